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
 *   recent of its chain; the evictor takes the smallest stamps, ties going
 *   to the deepest page.  One shared counter per lookup and a full scan per
 *   eviction: for tests and the replay's reference, not for speed.
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
void hc__count_hits(struct hc_pool *p, const hc_page_t *pages, unsigned n)
{
	uint32_t want = atomic_load_explicit(&p->ctl->service.select_hits, memory_order_relaxed);
	int reached = 0;

	if (atomic_load_explicit(&p->ctl->service.write_policy, memory_order_relaxed) != HC_WRITE_THROUGH_SELECTIVE + 1)
		return;
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

void hc__touch(struct hc_pool *p, const hc_page_t *pages, unsigned n)
{
	if (n == 0)
		return;
	if (p->g.evict == HC_EVICT_LRU) {
		uint64_t base = atomic_fetch_add_explicit(&p->ctl->lru_clock, n, memory_order_relaxed);
		for (unsigned i = n; i-- > 0;) {
			_Atomic uint64_t *st;
			uint64_t want = base + (n - i), cur;
			if (pages[i] == HC_PAGE_NONE || HC_PAGE_ID(pages[i]) >= p->g.npages)
				continue;
			/* Raise only: a touch whose stores land after a later
			 * touch's (its process was preempted between taking the
			 * clock and storing) must not make pages look older. */
			st = &p->pages[HC_PAGE_ID(pages[i])].stamp;
			cur = atomic_load_explicit(st, memory_order_relaxed);
			while (cur < want && !atomic_compare_exchange_weak_explicit(
						     st, &cur, want, memory_order_relaxed, memory_order_relaxed))
				;
		}
		return;
	}
	for (unsigned i = n; i-- > 0;) {
		_Atomic uint64_t *st;
		if (pages[i] == HC_PAGE_NONE || HC_PAGE_ID(pages[i]) >= p->g.npages)
			continue;
		st = &p->pages[HC_PAGE_ID(pages[i])].stamp;
		if (atomic_load_explicit(st, memory_order_relaxed) == 0)
			atomic_store_explicit(st, 1, memory_order_relaxed);
	}
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

struct victim {
	uint64_t stamp;
	uint32_t depth, id;
	uint64_t word;
};

/* Older first: the smaller stamp, then the deeper page. */
static int older(const struct victim *a, const struct victim *b)
{
	if (a->stamp != b->stamp)
		return a->stamp < b->stamp;
	if (a->depth != b->depth)
		return a->depth > b->depth;
	return a->id < b->id;
}

static int cmp_victim(const void *x, const void *y)
{
	const struct victim *a = x, *b = y;

	return older(a, b) ? -1 : older(b, a) ? 1 : 0;
}

/* A max-heap on "older": the root is the youngest of the k oldest so far. */
static void sift_down(struct victim *h, unsigned n, unsigned i)
{
	for (;;) {
		unsigned l = 2 * i + 1, r = l + 1, m = i;
		struct victim t;

		if (l < n && older(&h[m], &h[l]))
			m = l;
		if (r < n && older(&h[m], &h[r]))
			m = r;
		if (m == i)
			return;
		t = h[i];
		h[i] = h[m];
		h[m] = t;
		i = m;
	}
}

static void sift_up(struct victim *h, unsigned i)
{
	while (i) {
		unsigned parent = (i - 1) / 2;
		struct victim t;

		if (!older(&h[parent], &h[i]))
			return;
		t = h[i];
		h[i] = h[parent];
		h[parent] = t;
		i = parent;
	}
}

static unsigned evict_lru(struct hc_pool *p, unsigned k, uint32_t presence, hc_page_t *out)
{
	struct victim *h = malloc((size_t)k * sizeof(*h));
	unsigned got = 0;

	if (!h) {
		hc__log(HC_LOG_ERR, "evict: no memory for %u candidates", k);
		return 0;
	}
	for (int round = 0; round < 3 && got < k; round++) {
		unsigned need = k - got, nh = 0;

		for (uint32_t id = 0; id < p->g.npages; id++) {
			struct victim v;
			if (!candidate(p, id, &v.word))
				continue;
			v.stamp = atomic_load_explicit(&p->pages[id].stamp, memory_order_relaxed);
			v.depth = atomic_load_explicit(&p->pages[id].depth, memory_order_relaxed);
			v.id = id;
			if (nh < need) {
				h[nh] = v;
				sift_up(h, nh++);
			} else if (older(&v, &h[0])) {
				h[0] = v;
				sift_down(h, nh, 0);
			}
		}
		if (nh == 0)
			break;
		qsort(h, nh, sizeof(*h), cmp_victim);
		for (unsigned i = 0; i < nh && got < k; i++)
			got += take(p, h[i].id, h[i].word, presence, out ? out + got : NULL);
	}
	free(h);
	return got;
}

static unsigned evict_clock(struct hc_pool *p, unsigned k, uint32_t presence, hc_page_t *out)
{
	const uint32_t npages = p->g.npages, chunk = 32;
	uint64_t steps = 0, budget = 3 * (uint64_t)npages + chunk;
	unsigned got = 0;

	while (got < k && steps < budget) {
		uint32_t start = atomic_fetch_add_explicit(&p->ctl->clock_hand, chunk, memory_order_relaxed);

		for (uint32_t j = 0; j < chunk && got < k; j++, steps++) {
			uint32_t id = (uint32_t)(((uint64_t)start + j) % npages);
			_Atomic uint64_t *st = &p->pages[id].stamp;
			uint64_t w;

			if (!candidate(p, id, &w))
				continue;
			if (atomic_load_explicit(st, memory_order_relaxed)) {
				atomic_store_explicit(st, 0, memory_order_relaxed); /* a second chance */
				continue;
			}
			got += take(p, id, w, presence, out ? out + got : NULL);
		}
	}
	return got;
}

/* Evict up to n pages by policy, retiring them to us (out) or to FREE. */
unsigned hc__evict_take(struct hc_pool *p, unsigned n, uint32_t presence, hc_page_t *out)
{
	unsigned got;

	if (n == 0 || p->slot < 0 || p->g.host_mode == HC_HOST_BUFFER_ONLY)
		return 0;    /* buffer_only: the service frees each page when its transfer ends */
	if (n > p->g.npages) /* never more victims than pages: the LRU heap holds n */
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
