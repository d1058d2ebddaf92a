/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lookup.c - prefix lookup: how many leading keys of a sequence are READY,
 * under each needed component's hit policy, optionally pinning exactly the
 * pages of the answer in the same pass.
 *
 * A candidate from the index is verified in the page table:
 *   pinning:  (A) hold, (B) word READY (seq_cst, so acquire), then the key
 *             again: the hold keeps the page, so what we compare is what
 *             the holder will read.
 *   counting: word (acquire), key, word again: the same READY word twice
 *             means the key we compared belonged to that life of the page.
 * A mismatch anywhere is a miss, never an error: the index is a hint.
 *
 * Hit policies.  A component with window 0 (full attention) needs every
 * page of the hit; one with window w (sliding window; 1 for a state
 * snapshot) needs only the last w.  The hit length h is the largest h for
 * which every needed component is satisfied, so for full attention alone
 * the scan stops at the first miss.
 */
#include <errno.h>
#include <string.h>

#include "pool.h"

/* 1 if the page is no longer held by this rank at all. */
static int release(struct hc_pool *p, hc_page_t page, int tk)
{
	uint32_t id = HC_PAGE_ID(page);
	int gone = hc__hold_drop(p, id, HC_PIN_ONE);

	if (tk >= 0)
		atomic_fetch_and(&hc__tmask_row(p, id)[tk / 64], ~(UINT64_C(1) << (tk % 64)));
	return gone;
}

/* Verify page id as the holder of key kh; returns the handle or NONE. */
static inline __attribute__((always_inline)) hc_page_t verify(struct hc_pool *p, uint32_t id,
							      const struct hc__khash *kh, int hold, int tk,
							      uint32_t *presence, uint32_t *newly)
{
	struct hc_seg_page *pg = &p->pages[id];
	uint64_t w, w2;

	if (hold) {
		uint64_t bit = 0;
		_Atomic uint64_t *tw = NULL;

		w = atomic_load_explicit(&pg->word, memory_order_relaxed);
		if (hc__w_state(w) != HC_PAGE_READY)
			return HC_PAGE_NONE; /* cheap early miss; (B) decides */
		if (tk >= 0) {               /* the ticket's hold first: both are in place at (B) */
			tw = &hc__tmask_row(p, id)[tk / 64];
			bit = UINT64_C(1) << (tk % 64);
			atomic_fetch_or(tw, bit); /* (A), seq_cst */
		}
		int first = hc__hold(p, HC_PAGE_MAKE(id, hc__w_gen(w)), HC_PIN_ONE, 0, "lookup");

		if (first < 0) {
			if (tw)
				atomic_fetch_and(tw, ~bit);
			return HC_PAGE_NONE;
		}
		if (!hc__page_key_is(p, id, kh)) {
			release(p, HC_PAGE_MAKE(id, hc__w_gen(w)), tk);
			return HC_PAGE_NONE;
		}
		*newly += (uint32_t)first;
		*presence = atomic_load_explicit(&pg->presence, memory_order_relaxed);
		return HC_PAGE_MAKE(id, hc__w_gen(w));
	}
	w = atomic_load_explicit(&pg->word, memory_order_acquire);
	if (hc__w_state(w) != HC_PAGE_READY || !hc__page_key_is(p, id, kh))
		return HC_PAGE_NONE;
	*presence = atomic_load_explicit(&pg->presence, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire); /* the key and presence reads before the re-read */
	w2 = atomic_load_explicit(&pg->word, memory_order_relaxed);
	return w2 == w ? HC_PAGE_MAKE(id, hc__w_gen(w)) : HC_PAGE_NONE;
}

/* Key kh's page from its first tag match id (-1: none), verified; if that
 * entry was another key's (or stale), every entry looked at with the keys
 * compared. */
static inline __attribute__((always_inline)) hc_page_t probe(struct hc_pool *p, const struct hc__khash *kh, int64_t id,
							     int hold, int tk, uint32_t *presence, uint32_t *newly)
{
	hc_page_t pg = id < 0 ? HC_PAGE_NONE : verify(p, (uint32_t)id, kh, hold, tk, presence, newly);
	int64_t id2;

	if (pg == HC_PAGE_NONE && id >= 0 && (id2 = hc__index_find(p, kh)) >= 0 && id2 != id)
		pg = verify(p, (uint32_t)id2, kh, hold, tk, presence, newly);
	return pg;
}

static inline int lookup_check(const struct hc_pool *p, const struct hc_lookup_req *req, const hc_page_t *pages,
			       const char *op)
{
	if (!req || !pages)
		return hc__err(EINVAL, "%s: %s is NULL", op, req ? "pages" : "req");
	if (req->nkeys == 0 || req->nkeys > HC_LOOKUP_MAX)
		return hc__err(req->nkeys ? E2BIG : EINVAL, "%s: %u keys: give 1..%d keys per call", op, req->nkeys,
			       HC_LOOKUP_MAX);
	if (!req->keys)
		return hc__err(EINVAL, "%s: keys is NULL with %u keys", op, req->nkeys);
	if (req->comps >> p->g.ncomp)
		return hc__err(EINVAL, "%s: component mask 0x%x names a component past the pool's %u", op, req->comps,
			       p->g.ncomp);
	if (req->flags & ~(HC_LOOKUP_PIN | HC_LOOKUP_NOTOUCH | HC__LOOKUP_TAKE))
		return hc__err(EINVAL, "%s: unknown flags 0x%x", op,
			       req->flags & ~(HC_LOOKUP_PIN | HC_LOOKUP_NOTOUCH | HC__LOOKUP_TAKE));
	return 0;
}

int hc__lookup_check(const struct hc_pool *p, const struct hc_lookup_req *req, const hc_page_t *pages, const char *op)
{
	return lookup_check(p, req, pages, op);
}

/* Split the components in mask by hit policy: every page (full) or a
 * trailing window (win, the longest maxwin). */
void hc__hit_policy(const struct hc__geom *g, uint32_t mask, uint32_t *full, uint32_t *win, uint32_t *maxwin)
{
	*full = *win = *maxwin = 0;
	for (uint32_t m = mask; m; m &= m - 1) {
		unsigned c = (unsigned)__builtin_ctz(m);
		uint32_t w = g->comps[c].window_pages;

		if (w == 0) {
			*full |= 1u << c;
		} else {
			*win |= 1u << c;
			*maxwin = w > *maxwin ? w : *maxwin;
		}
	}
}

/*
 * The probe pipeline.  A probe is two dependent misses (bucket, then page
 * entry) and, when pinning, a third (the pin word), each hundreds of ns on
 * a loaded machine; one at a time that caps a core at a few million probes
 * a second.  So key i+HASH_AHEAD is hashed and its buckets prefetched, key
 * i+CAND_AHEAD has its buckets scanned for its tag and its page entry (and
 * pin word) prefetched, while key i is verified.
 */
#define HASH_AHEAD 8
#define CAND_AHEAD 4
#define RING       16 /* > HASH_AHEAD, a power of two */

struct pipe {
	struct hc__khash kh[RING];
	int64_t cand[RING];
	uint32_t hashed, scanned;
};

static inline void pipe_fill(struct hc_pool *p, struct pipe *pp, const hc_key_t *keys, uint32_t n, uint32_t i, int hold)
{
	for (; pp->hashed < n && pp->hashed <= i + HASH_AHEAD; pp->hashed++) {
		struct hc__khash *kh = &pp->kh[pp->hashed % RING];

		hc__key_hash(p, keys[pp->hashed], kh);
		__builtin_prefetch(&p->index[(size_t)kh->b1 * HC_BUCKET_ENTRIES]);
		__builtin_prefetch(&p->index[(size_t)kh->b2 * HC_BUCKET_ENTRIES]);
	}
	for (; pp->scanned < pp->hashed && pp->scanned <= i + CAND_AHEAD; pp->scanned++) {
		int64_t id = hc__index_tag(p, &pp->kh[pp->scanned % RING]);

		pp->cand[pp->scanned % RING] = id;
		if (id < 0)
			continue;
		__builtin_prefetch(&p->pages[id]);
		if (hold)
			__builtin_prefetch(&hc__pin_row(p, (uint32_t)id)[p->slot], 1);
	}
}

/*
 * The lookup itself.  hold: pin every page of the answer for this rank; tk:
 * also set ticket tk's bit on them (-1: none); *newly gets the pages this
 * rank held nothing on before (its quota's count).  Returns the hit length.
 * pages[0..nkeys) is written: the hit's handles, NONE elsewhere.
 */
int hc__lookup(struct hc_pool *p, const struct hc_lookup_req *req, hc_page_t *pages, int hold, int tk, uint32_t *newly)
{
	uint32_t full = p->hit_full, win = p->hit_win, maxwin = p->hit_maxwin;
	uint32_t run[HC_MAX_COMPONENTS], best = 0, n = req->nkeys;
	_Atomic uint64_t *row;
	struct pipe pp;

	*newly = 0;
	if (req->comps) /* a subset: its own policy masks */
		hc__hit_policy(&p->g, req->comps, &full, &win, &maxwin);
	if (!hc__fp_ok(p, req->fingerprint, "lookup")) {
		for (uint32_t i = 0; i < n; i++)
			pages[i] = HC_PAGE_NONE;
		return 0;
	}
	if (n == 1 && !win) { /* one key, no window: nothing to pipeline */
		struct hc__khash kh;
		uint32_t presence = 0;

		int64_t id;

		hc__key_hash(p, req->keys[0], &kh);
		id = hc__index_tag(p, &kh);
		if (id >= 0 && hold) /* the pin word's miss beside the page entry's, not after it */
			__builtin_prefetch(&hc__pin_row(p, (uint32_t)id)[p->slot], 1);
		pages[0] = probe(p, &kh, id, hold, tk, &presence, newly);
		if (pages[0] != HC_PAGE_NONE && (presence & full) != full) {
			if (hold)
				*newly -= (uint32_t)release(p, pages[0], tk);
			pages[0] = HC_PAGE_NONE;
		}
		best = pages[0] != HC_PAGE_NONE;
		goto count;
	}
	if (win)
		memset(run, 0, sizeof(run));
	pp.hashed = pp.scanned = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct hc__khash *kh = &pp.kh[i % RING];
		uint32_t presence = 0;
		int64_t id;

		pipe_fill(p, &pp, req->keys, n, i, hold);
		id = pp.cand[i % RING];
		pages[i] = probe(p, kh, id, hold, tk, &presence, newly);
		if (pages[i] == HC_PAGE_NONE && !full) {
			for (uint32_t m = win; m; m &= m - 1) /* a gap: every window starts again */
				run[__builtin_ctz(m)] = 0;
			continue;
		}
		if (pages[i] == HC_PAGE_NONE || (presence & full) != full) {
			if (pages[i] != HC_PAGE_NONE && hold)
				*newly -= (uint32_t)release(p, pages[i], tk);
			for (uint32_t j = i; j < n; j++)
				pages[j] = HC_PAGE_NONE;
			break; /* the full-attention prefix ends here */
		}
		if (!win) {
			best = i + 1;
			continue;
		}
		/* Window components: the run of pages holding each, ending here. */
		uint32_t good = 1;
		for (uint32_t m = win; m; m &= m - 1) {
			unsigned c = (unsigned)__builtin_ctz(m);
			uint32_t w = p->g.comps[c].window_pages;

			run[c] = (presence & (1u << c)) ? run[c] + 1 : 0;
			good &= run[c] >= (w < i + 1 ? w : i + 1);
		}
		if (good)
			best = i + 1;
	}
	/* Keep exactly the pages the answer needs (windows leave some out). */
	for (uint32_t i = win ? 0 : best; i < n; i++) {
		int needed = i < best && (full || i + maxwin >= best);

		if (pages[i] == HC_PAGE_NONE || needed)
			continue;
		if (hold)
			*newly -= (uint32_t)release(p, pages[i], tk);
		pages[i] = HC_PAGE_NONE;
	}
count:
	/* The row of counters once: a 1-key lookup is short enough to notice. */
	row = hc__stats_row(p);
	if (!(req->flags & HC_LOOKUP_NOTOUCH) && row) {
		hc__touch(p, pages, best);
		hc__count_hits(p, pages, best);
		if (!(req->flags & HC__LOOKUP_TAKE)) /* a take's hit came from L3: the service counts it */
			hc__hist_at(row, HC_STATS_TOKENS_WORD + HC_TIER_l2 * HC_STATS_HIST_WORDS,
				    (uint64_t)best * p->g.page_tokens);
	}
	hc__row_bump(row, HC_CTR_lookups, 1);
	hc__row_bump(row, HC_CTR_lookup_keys, n);
	hc__row_bump(row, HC_CTR_hits, best);
	return (int)best;
}

/* Undo the pins of an answer (and the ticket's bits); the pages no longer
 * held by this rank at all. */
uint32_t hc__lookup_release(struct hc_pool *p, const hc_page_t *pages, uint32_t n, int tk)
{
	uint32_t gone = 0;

	for (uint32_t i = 0; i < n; i++)
		if (pages[i] != HC_PAGE_NONE)
			gone += (uint32_t)release(p, pages[i], tk);
	return gone;
}

int hc_lookup(hc_pool *p, const struct hc_lookup_req *req, hc_page_t *pages)
{
	struct hc_lookup_req rb;
	int hold, ret, hit;
	uint32_t newly;

	if (!p)
		return hc__err(EINVAL, "lookup: pool is NULL");
	if (!(req = HC__ABI_USE(req, &rb, "hc_lookup", hc_lookup_req, &ret)))
		return ret;
	if ((ret = lookup_check(p, req, pages, "lookup")) < 0)
		return ret;
	hold = (req->flags & HC_LOOKUP_PIN) != 0;
	if (hold && (ret = hc__need_slot(p, "lookup")) < 0)
		return ret;
	hit = hc__lookup(p, req, pages, hold, -1, &newly);
	if (!hold)
		return hit;
	if ((ret = hc__quota_take(p, newly, "lookup")) < 0) {
		hc__lookup_release(p, pages, (uint32_t)hit, -1);
		return ret;
	}
	hc__count(p, HC_CTR_pins, (uint64_t)hit);
	return hit;
}
