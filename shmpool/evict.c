/* SPDX-License-Identifier: Apache-2.0 */
/*
 * evict.c - which READY page goes when pages run out, and clearing.
 *
 * Only keyed pages (cache entries) are evicted; a page allocated without a
 * key belongs to whoever allocated it until they free it.  A page that any
 * rank pins or host-locks, or any ticket holds, is never evicted: the
 * evictor is a freer (pages.c, hc__retire): (C) CAS READY -> FREEING, then
 * (D) read every hold, then out of the index.  The candidate scans below
 * read holds too, but only to skip the obviously busy; (D) decides.
 *
 * Policies.
 *   HC_EVICT_LRU: exact.  Each lookup takes one stamp range from the shared
 *   clock and stamps its pages last to first, so a chain's root is the most
 *   recent of its chain; the evictor takes the smallest stamps.  The pages
 *   are kept in that order on a list (lru.c), under one lock: a touch moves
 *   its pages to the tail, the evictor walks from the head.  O(1) a page,
 *   but one lock for every lookup: for tests and the replay's reference.
 *   HC_EVICT_CLOCK (default): a reference bit per page, set by lookups only
 *   when clear (so hot pages are not rewritten), and a shared hand that
 *   clears bits and takes the first unreferenced page.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

/* write_through_selective: one hit more for each page not in L3 (once per
 * lookup, so once per ticket), up to the service's threshold. */
void hc__count_hits_all(struct hc_pool *p, const hc_page_t *pages, unsigned n)
{
	uint32_t want = atomic_load_explicit(&p->ctl->service.select_hits, memory_order_relaxed);
	int reached = 0;

	for (unsigned i = 0; i < n; i++) {
		struct hc_seg_page *pg;
		if (pages[i] == HC_PAGE_NONE || HC_PAGE_ID(pages[i]) >= p->g.npages)
			continue;
		pg = &p->pages[HC_PAGE_ID(pages[i])];
		if ((atomic_load_explicit(&pg->flags, memory_order_relaxed) & HC_PF_IN_L3) ||
		    atomic_load_explicit(&pg->hits, memory_order_relaxed) >= want)
			continue;
		reached |= atomic_fetch_add_explicit(&pg->hits, 1, memory_order_relaxed) + 1 == want;
	}
	if (reached)
		hc__dirty_note(p, 1);
}

void hc__touch_all(struct hc_pool *p, const hc_page_t *pages, unsigned n)
{
	if (n == 0)
		return;
	if (p->g.evict == HC_EVICT_LRU) {
		hc__lru_touch(p, pages, n);
		return;
	}
	for (unsigned i = n; i-- > 0;)
		hc__clock_touch(p, pages[i]);
}

/* A READY keyed page nobody seems to hold: worth a (C).  Under write_back
 * a dirty page (not in L3) is no candidate: eviction never waits for L3,
 * and never loses what only the pool has.  An orphan (a dead rank's page
 * allocated without a key, held when it died) is one too: nobody owns it. */
static int candidate(const struct hc_pool *p, uint32_t id, uint64_t *w)
{
	uint32_t need = HC_PF_KEYED, f;

	if (atomic_load_explicit(&p->ctl->service.write_policy, memory_order_relaxed) == HC_WRITE_BACK + 1)
		need |= HC_PF_IN_L3;
	*w = atomic_load_explicit(&p->pages[id].word, memory_order_relaxed);
	if (hc__w_state(*w) != HC_PAGE_READY)
		return 0;
	f = atomic_load_explicit(&p->pages[id].flags, memory_order_relaxed);
	return ((f & need) == need || (f & (HC_PF_ORPHAN | HC_PF_KEYED)) == HC_PF_ORPHAN) &&
	       !hc__held_anywhere(p, id) && !(hc__spare.n && hc__spared(id));
}

/* Retire one victim: to us (out) or to FREE (out NULL). */
static int take(struct hc_pool *p, uint32_t id, uint64_t w, uint32_t presence, hc_page_t *out)
{
	hc_page_t h;

	HC_POINT(evict_victim);
	if (hc__retire(p, id, w, out ? HC_RETIRE_TAKE : HC_RETIRE_FREE, &h) < 0)
		return 0;
	if (out) {
		atomic_store_explicit(&p->pages[id].presence, presence, memory_order_relaxed);
		*out = h;
	}
	return 1;
}

/*
 * Victims are retired in small batches: the buckets of their keys are
 * fetched together first, so in a pool larger than the caches the misses
 * of a batch overlap instead of queueing (each victim's unkey reads one).
 * The takes follow in the order the victims were chosen.
 */
#define VBATCH 16

struct vbatch {
	uint32_t id[VBATCH];
	uint64_t w[VBATCH];
	unsigned n;
};

static void vb_add(const struct hc_pool *p, struct vbatch *b, uint32_t id, uint64_t w)
{
	struct hc__khash kh;

	b->id[b->n] = id;
	b->w[b->n++] = w;
	if (atomic_load_explicit(&p->pages[id].flags, memory_order_relaxed) & HC_PF_KEYED) {
		hc__page_khash(p, id, &kh);
		__builtin_prefetch(&p->index[(size_t)kh.b1 * HC_BUCKET_ENTRIES]);
		__builtin_prefetch(&p->index[(size_t)kh.b2 * HC_BUCKET_ENTRIES]);
	}
}

/* Retire the batch; with 'listed', each taken page also leaves the LRU
 * list, and *broken is set if that found the list broken (and rebuilt it). */
static unsigned vb_take(struct hc_pool *p, struct vbatch *b, uint32_t presence, hc_page_t *out, int listed, int *broken)
{
	unsigned got = 0;

	for (unsigned i = 0; i < b->n; i++)
		if (take(p, b->id[i], b->w[i], presence, out ? out + got : NULL)) {
			if (listed && hc__lru_drop(p, b->id[i]))
				*broken = 1;
			got++;
		}
	b->n = 0;
	return got;
}

/* A page on the LRU list that only a touch can make a candidate again:
 * off the list with it (lru.c says who is on it). */
static int gone(const struct hc_pool *p, uint32_t id)
{
	uint64_t w = atomic_load_explicit(&p->pages[id].word, memory_order_relaxed);
	unsigned st = hc__w_state(w);

	return st == HC_PAGE_FREE || st == HC_PAGE_QUARANTINE ||
	       (st == HC_PAGE_READY && !hc__lru_kind(atomic_load_explicit(&p->pages[id].flags, memory_order_relaxed)));
}

/* The list is in stamp order, so the first candidates from its head are
 * the oldest: the ones a sort of every candidate would give.  A broken
 * link (a scribble) is mended under the lock and the walk starts again
 * from the head, once: eviction must not stop on a bad node. */
static unsigned evict_lru(struct hc_pool *p, unsigned k, uint32_t presence, hc_page_t *out)
{
	const uint32_t end = p->g.npages;
	struct vbatch b = { .n = 0 };
	unsigned got = 0, mends = 0;
	int broken = 0;
	int64_t id;

	hc__lru_lock(p);
again:
	broken = 0;
	for (uint64_t steps = 0; got + b.n < k && steps < end; steps++) {
		int64_t next;
		uint64_t w;

		id = steps ? id : hc__lru_first(p);
		if (id == end)
			break; /* round to the head: the whole list walked */
		if (id < 0 || (next = hc__lru_next(p, (uint32_t)id)) < 0) {
			broken = 2;
			break;
		}
		if (candidate(p, (uint32_t)id, &w))
			vb_add(p, &b, (uint32_t)id, w);
		else if (gone(p, (uint32_t)id) && hc__lru_drop(p, (uint32_t)id))
			broken = 1;
		if (b.n == VBATCH || got + b.n == k)
			got += vb_take(p, &b, presence, out ? out + got : NULL, 1, &broken);
		if (broken)
			break;
		id = next;
	}
	got += vb_take(p, &b, presence, out ? out + got : NULL, 1, &broken);
	if (broken && mends++ == 0) {
		if (broken == 2) /* found broken here; a drop that found it has rebuilt it */
			hc__lru_mend(p);
		if (got < k)
			goto again;
	}
	hc__lru_unlock(p);
	return got;
}

static unsigned evict_clock(struct hc_pool *p, unsigned k, uint32_t presence, hc_page_t *out)
{
	const uint32_t npages = p->g.npages, chunk = 32;
	uint64_t steps = 0, budget = 3 * (uint64_t)npages + chunk;
	struct vbatch b = { .n = 0 };
	unsigned got = 0;

	while (got < k && steps < budget) {
		uint32_t start = atomic_fetch_add_explicit(&p->ctl->clock_hand, chunk, memory_order_relaxed);

		for (uint32_t j = 0; j < chunk && got + b.n < k; j++, steps++) {
			uint32_t id = (uint32_t)(((uint64_t)start + j) % npages);
			_Atomic uint64_t *st = &p->pages[id].stamp;
			uint64_t w;

			if (!candidate(p, id, &w))
				continue;
			if (atomic_load_explicit(st, memory_order_relaxed)) {
				atomic_store_explicit(st, 0, memory_order_relaxed); /* a second chance */
				continue;
			}
			vb_add(p, &b, id, w);
			if (b.n == VBATCH)
				got += vb_take(p, &b, presence, out ? out + got : NULL, 0, NULL);
		}
		got += vb_take(p, &b, presence, out ? out + got : NULL, 0, NULL);
	}
	return got;
}

/* Evict up to n pages by policy, retiring them to us (out) or to FREE. */
unsigned hc__evict_take(struct hc_pool *p, unsigned n, uint32_t presence, hc_page_t *out)
{
	unsigned got;

	if (n == 0 || p->slot < 0 || p->g.host_mode == HC_HOST_BUFFER_ONLY)
		return 0;    /* buffer_only: the service frees each page when its transfer ends */
	if (n > p->g.npages) /* never more victims than pages */
		n = p->g.npages;
	hc__tickets_sweep(p); /* expired tickets may be all that holds some pages */
	got = p->g.evict == HC_EVICT_LRU ? evict_lru(p, n, presence, out) : evict_clock(p, n, presence, out);
	hc__count(p, HC_CTR_evictions, got);
	return got;
}

static int buffer_only(const struct hc_pool *p)
{
	return hc__err(
		EOPNOTSUPP,
		"evict: pool '%s' is buffer_only: its pages only stage transfers, and the service frees each when its transfer ends",
		p->info.name);
}

int hc_evict(hc_pool *p, unsigned n)
{
	int ret;

	if (!p)
		return hc__err(EINVAL, "evict: pool is NULL");
	if ((ret = hc__need_slot(p, "evict")) < 0)
		return ret;
	if (p->g.host_mode == HC_HOST_BUFFER_ONLY)
		return buffer_only(p);
	return (int)hc__evict_take(p, n, 0, NULL);
}

int hc_evict_key(hc_pool *p, const uint8_t key[HC_KEY_BYTES])
{
	struct hc__khash kh;
	int64_t id;
	uint64_t w;
	int ret;

	if (!p || !key)
		return hc__err(EINVAL, "evict: %s is NULL", p ? "key" : "pool");
	if ((ret = hc__need_slot(p, "evict")) < 0)
		return ret;
	if (p->g.host_mode == HC_HOST_BUFFER_ONLY)
		return buffer_only(p);
	hc__key_hash(p, key, &kh);
	id = hc__index_find(p, &kh);
	if (id < 0)
		return 0;
	w = atomic_load_explicit(&p->pages[id].word, memory_order_acquire);
	if (hc__w_state(w) != HC_PAGE_READY || !hc__page_key_is(p, (uint32_t)id, &kh))
		return hc__err(EBUSY, "evict: the key's page %u is %s, not READY: it is being written or freed",
			       (uint32_t)id, hc_page_state_name(hc__w_state(w)));
	ret = hc__retire(p, (uint32_t)id, w, HC_RETIRE_FREE, NULL);
	if (ret == -EBUSY)
		return hc__err(EBUSY, "evict: the key's page %u is pinned, host-locked or held by a ticket",
			       (uint32_t)id);
	if (ret < 0)
		return hc__err(EAGAIN, "evict: the key's page %u changed under us; try again", (uint32_t)id);
	hc__count(p, HC_CTR_evictions, 1);
	return 1;
}

/* Everything any rank or ticket holds, as one line; 0 if nothing. */
static int describe_holds(struct hc_pool *p, char *buf, size_t len)
{
	uint64_t pins = 0, locks = 0, tk = 0, resv = 0;

	for (uint32_t id = 0; id < p->g.npages; id++) {
		uint64_t w = atomic_load(&p->pages[id].word);
		struct hc__holds h;

		hc__page_holds(p, id, &h);
		pins += h.pins;
		locks += h.locks;
		tk += h.tickets != 0;
		resv += hc__w_state(w) == HC_PAGE_RESERVED || hc__w_state(w) == HC_PAGE_FREEING;
	}
	if (!pins && !locks && !tk && !resv)
		return 0;
	snprintf(buf, len, "%llu pins, %llu host locks, %llu pages held by tickets, %llu pages reserved or being freed",
		 (unsigned long long)pins, (unsigned long long)locks, (unsigned long long)tk, (unsigned long long)resv);
	return 1;
}

int hc_pool_clear(hc_pool *p)
{
	char why[256];
	int ret, freed = 0;

	if (!p)
		return hc__err(EINVAL, "clear: pool is NULL");
	if ((ret = hc__need_slot(p, "clear")) < 0)
		return ret;
	hc_pool_recover(p, NULL, 0); /* dead ranks' holds are not holds */
	if (describe_holds(p, why, sizeof(why)))
		return hc__err(EBUSY, "clear: pool '%s' is in use: %s; wait until the ranks let go", p->info.name, why);
	for (uint32_t id = 0; id < p->g.npages; id++) {
		uint64_t w = atomic_load(&p->pages[id].word);

		if (hc__w_state(w) != HC_PAGE_READY)
			continue;
		if (hc__retire(p, id, w, HC_RETIRE_FREE, NULL) == 0)
			freed++;
	}
	hc__count(p, HC_CTR_evictions, (uint64_t)freed);
	return freed;
}
