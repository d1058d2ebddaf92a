/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reserve.c - reserve by key: the write path.
 *
 * For each key, under its index stripe: if a live page already has it
 * (READY: nothing to store; RESERVED, or being freed: someone else is
 * storing it), the key is skipped before anyone copies a byte; otherwise a
 * fresh page of ours gets the key, its depth and the key flag, and goes in
 * the index.  So two writers of one key end with one page.
 *
 * Pages come first (hc__alloc, evicting if it must), taken without any
 * stripe held, so an allocation never waits behind a lock.  All or nothing:
 * on any failure every page this call keyed is unkeyed and given back.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

/* What the index says about a key right now: 0 absent, or HC_SKIP_*; the
 * page in *idp when there is one. */
static int key_status_id(struct hc_pool *p, const struct hc__khash *kh, uint32_t *idp)
{
	int64_t id = hc__index_find(p, kh);
	uint64_t w;

	if (id < 0)
		return 0;
	*idp = (uint32_t)id;
	w = atomic_load_explicit(&p->pages[id].word, memory_order_acquire);
	if (!hc__page_key_is(p, (uint32_t)id, kh))
		return 0;
	switch (hc__w_state(w)) {
	case HC_PAGE_READY:
		return HC_SKIP_READY;
	case HC_PAGE_RESERVED:
		return HC_SKIP_BUSY;
	case HC_PAGE_FREEING:
		return hc__freeing_checked(w) ? 0 : HC_SKIP_BUSY; /* checked: going, no way back */
	default:
		return 0;
	}
}

static int key_status(struct hc_pool *p, const struct hc__khash *kh)
{
	uint32_t id;

	return key_status_id(p, kh, &id);
}

_Thread_local struct hc__spare hc__spare;

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

int hc__spared(uint32_t id)
{
	if (!hc__spare.sorted) { /* sorted only once an eviction asks */
		qsort(hc__spare.ids, hc__spare.n, sizeof(*hc__spare.ids), cmp_u32);
		hc__spare.sorted = 1;
	}
	return bsearch(&id, hc__spare.ids, hc__spare.n, sizeof(id), cmp_u32) != NULL;
}

int hc__reserve_check(const struct hc_pool *p, const struct hc_reserve_req *req, const hc_page_t *pages,
		      const uint8_t *skip, const char *op)
{
	if (!req || !pages || !skip)
		return hc__err(EINVAL, "%s: %s is NULL", op, !req ? "req" : !pages ? "pages" : "skip");
	if (req->nkeys == 0 || req->nkeys > HC_LOOKUP_MAX)
		return hc__err(req->nkeys ? E2BIG : EINVAL, "%s: %u keys: give 1..%d keys per call", op, req->nkeys,
			       HC_LOOKUP_MAX);
	if (!req->keys)
		return hc__err(EINVAL, "%s: keys is NULL with %u keys", op, req->nkeys);
	if (req->presence >> p->g.ncomp)
		return hc__err(EINVAL, "%s: presence mask 0x%x names a component past the pool's %u", op, req->presence,
			       p->g.ncomp);
	if (!hc__fp_ok(p, req->fingerprint, op))
		return hc__err(
			EINVAL,
			"%s: the fingerprint given is not pool '%s''s: pages of another model or layout cannot be stored here",
			op, p->info.name);
	if (req->first_depth > UINT32_MAX - req->nkeys)
		return hc__err(EINVAL, "%s: first_depth %u overflows with %u keys", op, req->first_depth, req->nkeys);
	return 0;
}

/* Undo every page this call keyed (pages[i] set, skip[i] 0). */
static void undo(struct hc_pool *p, hc_page_t *pages, const uint8_t *skip, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (skip[i] || pages[i] == HC_PAGE_NONE)
			continue;
		hc__unkey(p, HC_PAGE_ID(pages[i]));
		hc__alloc_undo(p, &pages[i], 1);
		pages[i] = HC_PAGE_NONE;
	}
}

int hc__reserve(struct hc_pool *p, const struct hc_reserve_req *req, hc_page_t *pages, uint8_t *skip)
{
	const unsigned n = req->nkeys;
	const uint32_t presence = req->presence ? req->presence : (1u << p->g.ncomp) - 1;
	struct hc__khash *kh = malloc((size_t)n * sizeof(*kh));
	/* the pages taken, then the ids of those found READY */
	hc_page_t *pool = malloc((size_t)n * (sizeof(*pool) + sizeof(uint32_t)));
	uint32_t *ready = pool ? (uint32_t *)(void *)(pool + n) : NULL;
	unsigned want = 0, have = 0, used = 0, done = 0, nready = 0;
	int ret = 0;

	if (!kh || !pool) {
		ret = hc__err(ENOMEM, "reserve: no memory for %u keys", n);
		goto out;
	}
	/* Every key's buckets first, so their misses overlap (in a large
	 * pool each is a trip to DRAM), then the look at each. */
	for (unsigned i = 0; i < n; i++) {
		hc__key_hash(p, req->keys[i], &kh[i]);
		__builtin_prefetch(&p->index[(size_t)kh[i].b1 * HC_BUCKET_ENTRIES]);
		__builtin_prefetch(&p->index[(size_t)kh[i].b2 * HC_BUCKET_ENTRIES]);
	}
	for (unsigned i = 0; i < n; i++) {
		uint32_t id;
		int st;
		pages[i] = HC_PAGE_NONE;
		skip[i] = 0;
		st = key_status_id(p, &kh[i], &id);
		want += st == 0;
		if (st == HC_SKIP_READY)
			ready[nready++] = id;
	}
	/* Room for this call is never made by evicting the pages it found
	 * READY: it would reserve their keys again, or fail for want of the
	 * very pages it took. */
	hc__spare = (struct hc__spare){ ready, nready, 0 };
	if (want && (ret = hc__alloc(p, want, presence, 0, pool, "reserve")) < 0)
		goto out;
	have = want;
	HC_POINT(reserve_allocated);
	for (done = 0; done < n; done++) {
		struct hc_seg_page *pg;
		uint32_t id;
		int st;

		for (;;) {
			hc__index_lock(p, kh[done].stripe);
			st = key_status(p, &kh[done]);
			if (st || used < have)
				break;
			/* More keys went missing since the first look: one more
			 * page, taken with no stripe held, and look again.  Only
			 * for a key that needs one: a pool with exactly the pages
			 * this call needs must not fail it (nor evict for it). */
			hc__index_unlock(p, kh[done].stripe);
			if ((ret = hc__alloc(p, 1, presence, 0, &pool[have], "reserve")) < 0)
				goto fail;
			have++;
		}
		if (st) {
			hc__index_unlock(p, kh[done].stripe);
			skip[done] = (uint8_t)st;
			continue;
		}
		id = HC_PAGE_ID(pool[used]);
		pg = &p->pages[id];
		for (int k = 0; k < 4; k++)
			atomic_store_explicit(&pg->key[k], kh[done].k[k], memory_order_relaxed);
		atomic_store_explicit(&pg->depth, req->first_depth + done, memory_order_relaxed);
		atomic_store_explicit(&pg->flags, HC_PF_KEYED | hc__page_check(p, id, 1), memory_order_relaxed);
		atomic_store_explicit(&pg->hits, 0, memory_order_relaxed);
		HC_POINT(reserve_keyed);
		ret = hc__index_insert(p, &kh[done], id); /* release: key and flags first */
		if (ret < 0) {
			atomic_store_explicit(&pg->flags, 0, memory_order_relaxed);
			hc__index_unlock(p, kh[done].stripe);
			goto fail;
		}
		HC_POINT(reserve_inserted);
		hc__index_unlock(p, kh[done].stripe);
		pages[done] = pool[used++];
	}
	hc__alloc_undo(p, pool + used, have - used); /* keys that turned up meanwhile */
	hc__touch(p, pages, n);
	hc__count(p, HC_CTR_reserves, used);
	hc__count(p, HC_CTR_reserve_skips, n - used);
	ret = (int)used;
	goto out;
fail:
	HC_POINT(reserve_undo);
	undo(p, pages, skip, done);
	hc__alloc_undo(p, pool + used, have - used);
out:
	hc__spare = (struct hc__spare){ NULL, 0, 0 };
	free(kh);
	free(pool);
	return ret;
}

int hc_reserve(hc_pool *p, const struct hc_reserve_req *req, hc_page_t *pages, uint8_t *skip)
{
	struct hc_reserve_req rb;
	int ret;

	if (!p)
		return hc__err(EINVAL, "reserve: pool is NULL");
	if (!(req = HC__ABI_USE(req, &rb, "hc_reserve", hc_reserve_req, &ret)))
		return ret;
	if ((ret = hc__need_slot(p, "reserve")) < 0 || (ret = hc__reserve_check(p, req, pages, skip, "reserve")) < 0)
		return ret;
	return hc__reserve(p, req, pages, skip);
}
