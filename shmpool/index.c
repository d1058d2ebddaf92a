/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.c - the key index: (fingerprint, key) -> page.  A hint over the
 * page table, which stays the truth: every entry only names a candidate,
 * which the reader checks (key, state, generation) in the page table.
 *
 * Shape.  index_buckets buckets of 8 entries, one cache line each.  A key
 * may live in either of two buckets (two-choice hashing), so with at least
 * two slots per page a bucket pair overflows with vanishing probability.
 * Entries are (tag << 32) | (page id + 1); 0 is empty.  No tombstones:
 * readers always look at both buckets.
 *
 * Notes on synchronization.  Readers take no lock and never wait: they
 * load entries (acquire, pairs with the inserter's CAS) and the page's key.
 * Writers of one key serialize on the key's stripe lock (a robust mutex in
 * the control block), so "absent, then insert" is atomic per key; entries
 * of different keys share buckets and are claimed and cleared by CAS.  A
 * writer that dies holding a stripe leaves at most one entry half-done; the
 * next locker gets EOWNERDEAD and rebuilds that stripe from the page table.
 *
 * The fingerprint: a pool holds pages of its own fingerprint only, so the
 * index qualifies every entry by it implicitly; a lookup under another
 * fingerprint is answered "nothing" before the index is read (hc__fp_ok).
 */
#include <errno.h>
#include <string.h>

#include "pool.h"

void hc__page_khash(const struct hc_pool *p, uint32_t id, struct hc__khash *kh)
{
	uint64_t k[4];

	for (int i = 0; i < 4; i++)
		k[i] = atomic_load_explicit(&p->pages[id].key[i], memory_order_relaxed);
	hc__key_hash(p, (const uint8_t *)k, kh);
}

static inline _Atomic uint64_t *bucket(const struct hc_pool *p, uint32_t b)
{
	return p->index + (size_t)b * HC_BUCKET_ENTRIES;
}

static inline uint64_t entry(const struct hc__khash *kh, uint32_t id)
{
	return ((uint64_t)kh->tag << 32) | ((uint64_t)id + 1);
}

/* The live page whose key is kh's, by the index; -1 if none.  The caller
 * checks state and key again after it pins or re-reads the word. */
int64_t hc__index_find(const struct hc_pool *p, const struct hc__khash *kh)
{
	const uint32_t bs[2] = { kh->b1, kh->b2 };

	for (int k = 0; k < 2; k++) {
		_Atomic uint64_t *bk = bucket(p, bs[k]);
		for (int j = 0; j < HC_BUCKET_ENTRIES; j++) {
			/* Acquire: pairs with the inserter's CAS; the key came first. */
			uint64_t e = atomic_load_explicit(&bk[j], memory_order_acquire);
			uint32_t id = (uint32_t)e - 1;

			if ((uint32_t)(e >> 32) != kh->tag || (uint32_t)e == 0 || id >= p->g.npages)
				continue;
			if (hc__page_key_is(p, id, kh) &&
			    hc__live_word(atomic_load_explicit(&p->pages[id].word, memory_order_acquire)))
				return id;
		}
	}
	return -1;
}

static int bucket_used(const struct hc_pool *p, uint32_t b)
{
	_Atomic uint64_t *bk = bucket(p, b);
	int n = 0;

	for (int j = 0; j < HC_BUCKET_ENTRIES; j++)
		n += atomic_load_explicit(&bk[j], memory_order_relaxed) != 0;
	return n;
}

/* With the stripe held: put (key, id) in the emptier of its buckets. */
int hc__index_insert(struct hc_pool *p, const struct hc__khash *kh, uint32_t id)
{
	uint32_t first = bucket_used(p, kh->b1) <= bucket_used(p, kh->b2) ? kh->b1 : kh->b2;
	const uint32_t bs[2] = { first, first == kh->b1 ? kh->b2 : kh->b1 };

	for (int k = 0; k < 2; k++) {
		_Atomic uint64_t *bk = bucket(p, bs[k]);
		for (int j = 0; j < HC_BUCKET_ENTRIES; j++) {
			uint64_t e = 0;
			/* Release (seq_cst): the page's key and flags before the entry. */
			if (atomic_compare_exchange_strong(&bk[j], &e, entry(kh, id)))
				return 0;
		}
	}
	return hc__err(ENOSPC, "key index of pool '%s': both buckets of a key are full (%u and %u)", p->info.name,
		       kh->b1, kh->b2);
}

/* With the stripe held: take out every entry (key, id); the count. */
int hc__index_remove(struct hc_pool *p, const struct hc__khash *kh, uint32_t id)
{
	const uint32_t bs[2] = { kh->b1, kh->b2 };
	const uint64_t want = entry(kh, id);
	int n = 0;

	for (int k = 0; k < 2; k++) {
		_Atomic uint64_t *bk = bucket(p, bs[k]);
		for (int j = 0; j < HC_BUCKET_ENTRIES; j++) {
			uint64_t e = want;
			n += atomic_compare_exchange_strong(&bk[j], &e, 0);
		}
	}
	return n;
}

static int count_entries(const struct hc_pool *p, const struct hc__khash *kh, uint32_t id)
{
	const uint32_t bs[2] = { kh->b1, kh->b2 };
	const uint64_t want = entry(kh, id);
	int n = 0;

	for (int k = 0; k < 2; k++)
		for (int j = 0; j < HC_BUCKET_ENTRIES; j++)
			n += atomic_load_explicit(&bucket(p, bs[k])[j], memory_order_relaxed) == want;
	return n;
}

static int keyed_live(const struct hc_pool *p, uint32_t id)
{
	return hc__keyed_live(p, id, atomic_load_explicit(&p->pages[id].word, memory_order_acquire));
}

/*
 * EOWNERDEAD on stripe s: a writer died mid-insert or mid-remove (or a
 * repair, which rebuilds them all).  With the stripe held: drop every entry
 * of stripe s and every entry naming a page that is no longer keyed, then
 * put back one entry for each keyed live page of stripe s.
 */
void hc__index_rebuild_stripe(struct hc_pool *p, unsigned s)
{
	struct hc__khash kh;
	uint64_t nent = (uint64_t)p->g.index_buckets * HC_BUCKET_ENTRIES;

	HC_POINT(index_rebuild);
	for (uint64_t i = 0; i < nent; i++) {
		uint64_t e = atomic_load_explicit(&p->index[i], memory_order_acquire);
		uint32_t id = (uint32_t)e - 1;

		if (e == 0)
			continue;
		if (id < p->g.npages && keyed_live(p, id)) {
			hc__page_khash(p, id, &kh);
			if (kh.stripe != s)
				continue;
		}
		atomic_compare_exchange_strong(&p->index[i], &e, 0);
	}
	for (uint32_t id = 0; id < p->g.npages; id++) {
		if (!keyed_live(p, id))
			continue;
		hc__page_khash(p, id, &kh);
		if (kh.stripe == s && hc__index_insert(p, &kh, id) < 0)
			hc__log(HC_LOG_ERR, "index rebuild: page %u is keyed but its buckets are full", id);
	}
}

void hc__index_lock(struct hc_pool *p, unsigned stripe)
{
	pthread_mutex_t *m = &p->ctl->index_lock[stripe].m;
	int r = hc__lock_shared(m);

	if (r == EOWNERDEAD) {
		hc__index_rebuild_stripe(p, stripe);
		hc__log(HC_LOG_WARN,
			"pool '%s': a writer died holding key index stripe %u; rebuilt it from the page table",
			p->info.name, stripe);
		hc__count(p, HC_CTR_index_rebuilds, 1);
		pthread_mutex_consistent(m);
	} else if (r != 0) {
		/* Only a scribbled mutex gets here (we never unlock one without
		 * making it consistent).  Entries are CAS-safe without it; only
		 * the one-writer-per-key guarantee is lost, so say so loudly. */
		hc__log(HC_LOG_ERR, "pool '%s': key index stripe %u lock is unusable (%s); run hicache-pool check",
			p->info.name, stripe, strerror(r));
	}
}

void hc__index_unlock(struct hc_pool *p, unsigned stripe)
{
	hc__unlock_shared(&p->ctl->index_lock[stripe].m);
}

/* Recovery: a keyed page that stays live must be findable, exactly once. */
void hc__index_repair_page(struct hc_pool *p, uint32_t id)
{
	struct hc__khash kh;
	int n;

	hc__page_khash(p, id, &kh);
	hc__index_lock(p, kh.stripe);
	n = count_entries(p, &kh, id);
	if (n > 1) /* remove takes every copy */
		hc__index_remove(p, &kh, id);
	if (n != 1)
		hc__index_insert(p, &kh, id);
	hc__index_unlock(p, kh.stripe);
}
