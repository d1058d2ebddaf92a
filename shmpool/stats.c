/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.c - counters and page inspection.
 *
 * The counters are declared once, in HC_COUNTERS (hicache.h); the enum,
 * the names below and every printer of hicache-pool stat come from it.
 * Each rank adds to its own row (relaxed): no shared line bounces between
 * ranks on the lookup path.  A pool's figure is the sum of every row; rows
 * outlive attachments, so the sums never go backwards.  Gauges (pages by
 * state, holds) are computed from the page table, the truth, on each call.
 */
#include <errno.h>
#include <string.h>

#include "pool.h"

static const char *const counter_names[] = {
#define HC_X_NAME(name, help) #name,
	HC_COUNTERS(HC_X_NAME)
#undef HC_X_NAME
};

static const char *const counter_help[] = {
#define HC_X_HELP(name, help) help,
	HC_COUNTERS(HC_X_HELP)
#undef HC_X_HELP
};

static_assert(sizeof(counter_names) / sizeof(counter_names[0]) == HC_CTR__COUNT, "one name per counter");

const char *hc_counter_name(unsigned i)
{
	return i < HC_CTR__COUNT ? counter_names[i] : NULL;
}

const char *hc_counter_help(unsigned i)
{
	return i < HC_CTR__COUNT ? counter_help[i] : NULL;
}

static const char *const hist_names[] = {
#define X(name, help) #name,
	HC_HISTS(X)
#undef X
};

static const char *const hist_help[] = {
#define X(name, help) help,
	HC_HISTS(X)
#undef X
};

const char *hc_hist_name(unsigned i)
{
	return i < HC_HIST__COUNT ? hist_names[i] : NULL;
}

const char *hc_hist_help(unsigned i)
{
	return i < HC_HIST__COUNT ? hist_help[i] : NULL;
}

static const char *const tier_names[] = {
#define X(name, help) #name,
	HC_TIERS(X)
#undef X
};

static const char *const tier_help[] = {
#define X(name, help) help,
	HC_TIERS(X)
#undef X
};

const char *hc_tier_name(unsigned i)
{
	return i < HC_TIER__COUNT ? tier_names[i] : NULL;
}

const char *hc_tier_help(unsigned i)
{
	return i < HC_TIER__COUNT ? tier_help[i] : NULL;
}

uint64_t hc_hist_bound_us(unsigned bucket)
{
	return bucket + 1 < HC_HIST_BUCKETS ? UINT64_C(16) << bucket : UINT64_MAX;
}

/* The service's gauges, while one serves.  Its lock word says so without
 * taking it (stats never recover): held, and not by a dead owner (the
 * kernel sets FUTEX_OWNER_DIED in a robust mutex's word when its holder
 * dies). */
static void service_gauges(const struct hc_pool *p, struct hc_stats *out)
{
	struct hc_seg_service *sv = &p->ctl->service;
	uint32_t lock = (uint32_t)__atomic_load_n(&sv->life.__data.__lock, __ATOMIC_ACQUIRE);

	if (!lock || (lock & 0x40000000u) || atomic_load_explicit(&sv->state, memory_order_acquire) != HC_SVC_LIVE)
		return;
	out->svc_jobs_queued = atomic_load_explicit(&sv->jobs_queued, memory_order_relaxed);
	out->svc_jobs_running = atomic_load_explicit(&sv->jobs_running, memory_order_relaxed);
	out->stage_read_pages = atomic_load_explicit(&sv->stage_read, memory_order_relaxed);
	out->stage_write_pages = atomic_load_explicit(&sv->stage_write, memory_order_relaxed);
	out->stage_parked_reads = atomic_load_explicit(&sv->parked_reads, memory_order_relaxed);
	out->stage_parked_writes = atomic_load_explicit(&sv->parked_writes, memory_order_relaxed);
}

/* Add a row's histogram (its buckets, its sum, its max) to h. */
static void hist_add(struct hc_hist *h, const _Atomic uint64_t *w)
{
	for (unsigned b = 0; b < HC_HIST_BUCKETS; b++) {
		uint64_t v = atomic_load_explicit(&w[b], memory_order_relaxed);
		h->bucket[b] += v;
		h->count += v;
	}
	h->sum += atomic_load_explicit(&w[HC_HIST_BUCKETS], memory_order_relaxed);
	uint64_t m = atomic_load_explicit(&w[HC_HIST_BUCKETS + 1], memory_order_relaxed);
	h->max = m > h->max ? m : h->max;
}

static_assert(HC_CTR__COUNT <= HC_CTR_MAX && HC_HIST__COUNT <= HC_HIST_MAX && HC_TIER__COUNT <= HC_TIER_MAX &&
		      HC_PAGE__COUNT <= HC_PAGE_STATES_MAX,
	      "hc_stats has room for every counter, histogram, tier and page state");

int hc_pool_stats(hc_pool *p, struct hc_stats *stats, size_t size)
{
	uint32_t engines[HC_MAX_RANKS];
	struct hc_stats ob, *out = &ob;
	int ret;

	if (!p || !stats)
		return hc__err(EINVAL, "stats: %s is NULL", p ? "out" : "pool");
	if ((ret = HC__ABI_OUT_OK(size, "hc_pool_stats", hc_stats)) < 0)
		return ret;
	memset(out, 0, sizeof(*out));
	for (unsigned row = 0; row <= p->g.max_ranks; row++)
		for (unsigned c = 0; c < HC_CTR__COUNT; c++)
			out->counter[c] += atomic_load_explicit(&p->stats[(size_t)row * HC_STATS_ROW_WORDS + c],
								memory_order_relaxed);
	for (unsigned row = 0; row <= p->g.max_ranks; row++) {
		const _Atomic uint64_t *r = &p->stats[(size_t)row * HC_STATS_ROW_WORDS];
		for (unsigned h = 0; h < HC_HIST__COUNT; h++)
			hist_add(&out->hist[h], r + HC_STATS_HIST_WORD + h * HC_STATS_HIST_WORDS);
		for (unsigned t = 0; t < HC_TIER__COUNT; t++)
			hist_add(&out->tokens[t], r + HC_STATS_TOKENS_WORD + t * HC_STATS_HIST_WORDS);
	}
	for (uint32_t id = 0; id < p->g.npages; id++) {
		uint64_t w = atomic_load_explicit(&p->pages[id].word, memory_order_relaxed);
		struct hc__holds h;

		if (hc__w_state(w) < HC_PAGE__COUNT)
			out->pages[hc__w_state(w)]++;
		if (atomic_load_explicit(&p->pages[id].flags, memory_order_relaxed) & HC_PF_KEYED)
			out->keyed++;
		hc__page_holds(p, id, &h);
		out->pin_count += h.pins;
		out->pinned_pages += h.pins != 0;
		out->lock_count += h.locks;
		out->locked_pages += h.locks != 0;
		out->ticket_pages += h.tickets != 0;
	}
	/* Liveness by the slot's word, not by probing: stats never recover. */
	for (unsigned s = 0; s < p->g.max_ranks; s++) {
		uint32_t e;
		unsigned k;

		if (atomic_load_explicit(&p->ranks[s].state, memory_order_relaxed) != HC_RANK_LIVE)
			continue;
		out->live_ranks++;
		e = atomic_load_explicit(&p->ranks[s].engine, memory_order_relaxed);
		if (!e)
			continue;
		for (k = 0; k < out->engines && engines[k] != e; k++)
			;
		if (k == out->engines)
			engines[out->engines++] = e;
	}
	for (unsigned t = 0; t < p->g.max_tickets; t++) {
		unsigned st = hc__tk_state(atomic_load_explicit(&p->tickets[t].word, memory_order_relaxed));
		out->open_tickets += st == HC_TK_BUILDING || st == HC_TK_OPEN || st == HC_TK_DROPPING;
	}
	service_gauges(p, out);
	return HC__ABI_OUT(stats, size, out, "hc_pool_stats", hc_stats);
}

int hc_page_info(const hc_pool *p, uint32_t id, struct hc_page_info *info, size_t size)
{
	struct hc_page_info ob, *out = &ob;
	const struct hc_seg_page *pg;
	struct hc__holds h;
	uint64_t w;
	int ret;

	if (!p || !info)
		return hc__err(EINVAL, "page info: %s is NULL", p ? "out" : "pool");
	if ((ret = HC__ABI_OUT_OK(size, "hc_page_info", hc_page_info)) < 0)
		return ret;
	if (id >= p->g.npages)
		return hc__err(EINVAL, "page info: page id %u is out of range: the pool has %u pages", id, p->g.npages);
	memset(out, 0, sizeof(*out));
	pg = &p->pages[id];
	w = atomic_load_explicit(&pg->word, memory_order_acquire);
	out->id = id;
	out->gen = hc__w_gen(w);
	out->state = (enum hc_page_state)hc__w_state(w);
	out->owner = hc__w_owner(w);
	out->aux = hc__w_aux(w);
	out->presence = atomic_load_explicit(&pg->presence, memory_order_relaxed);
	out->keyed = (atomic_load_explicit(&pg->flags, memory_order_relaxed) & HC_PF_KEYED) != 0;
	for (int k = 0; k < 4; k++) {
		uint64_t v = atomic_load_explicit(&pg->key[k], memory_order_relaxed);
		memcpy(out->key + 8 * k, &v, 8);
	}
	out->depth = atomic_load_explicit(&pg->depth, memory_order_relaxed);
	out->stamp = atomic_load_explicit(&pg->stamp, memory_order_relaxed);
	hc__page_holds(p, id, &h);
	out->pins = h.pins;
	out->locks = h.locks;
	out->tickets = h.tickets;
	return HC__ABI_OUT(info, size, out, "hc_page_info", hc_page_info);
}
