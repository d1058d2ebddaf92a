/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_evict.c - eviction order (exact LRU, CLOCK), what is never evicted,
 * and all-or-nothing allocation when too little can be evicted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hct.h"

static const char *name;

static hc_pool *make(enum hc_evict_policy pol, uint32_t npages)
{
	struct hct_spec s;

	name = hct_name();
	hct_spec_init(&s, name, npages);
	s.spec.evict = pol;
	s.spec.quarantine_ms = 50;
	ck_assert_ok(hc_pool_create(&s.spec));
	return hct_attach(name, 0);
}

static void done(hc_pool *p)
{
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, NULL, NULL), 0);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, 0);
}

/* How many of keys[0..n) are still findable, each on its own. */
static int present(hc_pool *p, const hc_key_t *keys, unsigned n)
{
	int k = 0;

	for (unsigned i = 0; i < n; i++)
		k += hct_hit(p, keys + i, 1);
	return k;
}

/* A chain's deepest pages go first, its root last; a used chain outlives an unused one. */
START_TEST(lru_order)
{
	hc_pool *p = make(HC_EVICT_LRU, 16);
	hc_key_t a[4], b[4];
	struct hc_pool_info info;

	hc_pool_info(p, &info, sizeof(info));
	ck_assert_int_eq(info.evict, HC_EVICT_LRU);
	hct_keys(a, 4, 31);
	hct_keys(b, 4, 32);
	ck_assert_int_eq(hct_store(p, a, 4, 0), 4);
	ck_assert_int_eq(hct_store(p, b, 4, 0), 4);
	ck_assert_int_eq(hct_hit(p, a, 4), 4); /* a is now the more recent */
	ck_assert_int_eq(hc_evict(p, 2), 2);
	ck_assert_int_eq(hct_hit(p, b, 4), 2); /* b3 and b2 went */
	ck_assert_int_eq(hct_hit(p, a, 4), 4);
	ck_assert_int_eq(hc_evict(p, 1), 1); /* b1, not a anything: b was touched before a */
	ck_assert_int_eq(present(p, b, 4), 1);
	ck_assert_int_eq(hct_hit(p, b, 1), 1); /* the root survived its descendants */
	/* b0 was just looked up: now a's deepest pages are the oldest. */
	ck_assert_int_eq(hc_evict(p, 2), 2);
	ck_assert_int_eq(present(p, b, 1), 1);
	ck_assert_int_eq(hct_hit(p, a, 4), 2);
	ck_assert_int_eq(hc_evict(p, UINT32_MAX), 3); /* more than the pool: all there is */
	done(p);
}
END_TEST

/* Deepest first among pages of the same last use. */
START_TEST(lru_root_last_under_pressure)
{
	hc_pool *p = make(HC_EVICT_LRU, 8);
	hc_key_t a[8], c[4];

	hct_keys(a, 8, 33);
	hct_keys(c, 4, 34);
	ck_assert_int_eq(hct_store(p, a, 8, 0), 8);
	/* Need 4 pages: the 4 deepest of chain a go. */
	ck_assert_int_eq(hct_store(p, c, 4, 0), 4);
	ck_assert_int_eq(hct_hit(p, a, 8), 4);
	ck_assert_int_eq(present(p, a, 8), 4);
	done(p);
}
END_TEST

/* The oldest candidate by a scan of every page, as the evictor found it
 * before it kept a list: the smallest stamp, then the deeper page, then
 * the lower id, among READY keyed pages nothing holds.  -1 if none. */
static int64_t oldest_by_scan(hc_pool *p)
{
	int64_t best = -1;
	uint64_t bs = 0;
	uint32_t bd = 0;

	for (uint32_t id = 0; id < p->g.npages; id++) {
		struct hc_page_info pi;
		uint64_t st;
		uint32_t d;

		ck_assert_ok(hc_page_info(p, id, &pi, sizeof(pi)));
		if (pi.state != HC_PAGE_READY || !pi.keyed || pi.pins + pi.locks + pi.tickets)
			continue;
		st = atomic_load(&p->pages[id].stamp);
		d = atomic_load(&p->pages[id].depth);
		if (best < 0 || st < bs || (st == bs && (d > bd || (d == bd && id < (uint32_t)best)))) {
			best = id;
			bs = st;
			bd = d;
		}
	}
	return best;
}

/* The list keeps exact LRU's order: through stores of chains, lookups,
 * frees, pins and evictions in a random mix, every victim is the one a
 * scan of every page would pick, and the list checks clean. */
START_TEST(lru_list_is_the_scan_order)
{
	enum { NP = 64, NK = 1500 };
	hc_pool *p = make(HC_EVICT_LRU, NP);
	hc_key_t *k = malloc(NK * sizeof(*k));
	hc_page_t pinned = HC_PAGE_NONE;
	unsigned next = 0, evicted = 0;
	uint32_t seed = 12345;

	hct_keys(k, NK, 36);
	for (int step = 0; step < 1200 && next + 4 <= NK; step++) {
		unsigned op;
		uint64_t counts[HC_PAGE__COUNT];

		seed = seed * 1103515245u + 12345u;
		op = (seed >> 16) % 10;
		hc_pool_count_states(p, counts, HC_PAGE__COUNT);
		if (counts[HC_PAGE_FREE] < 4 || op == 0) { /* evict one, and check it was the oldest */
			int64_t want = oldest_by_scan(p);

			if (want < 0)
				continue;
			ck_assert_int_eq(hc_evict(p, 1), 1);
			ck_assert_int_eq(hc_page_state(p, (uint32_t)want, NULL, NULL, NULL), HC_PAGE_FREE);
			evicted++;
		} else if (op < 5) { /* a chain of 1..4 new keys */
			unsigned n = 1 + (seed >> 8) % 4;
			ck_assert_int_eq(hct_store(p, k + next, n, (seed >> 4) % 3), (int)n);
			next += n;
		} else if (op < 8 && next) { /* look up a stored chain from a random start */
			unsigned at = (seed >> 6) % next;
			hct_hit(p, k + at, 1 + (seed >> 3) % 4 < next - at ? 1 + (seed >> 3) % 4 : next - at);
		} else if (op == 8 && next) { /* free a key's page, off the evictor's side */
			struct hc_lookup_req rq = { .size = sizeof(rq), .keys = k + (seed >> 5) % next, .nkeys = 1 };
			hc_page_t h;
			if (hc_lookup(p, &rq, &h) == 1)
				hc_page_free(p, &h, 1);
		} else if (next) { /* pin one page (it is no candidate), unpin the last */
			struct hc_lookup_req rq = { .size = sizeof(rq),
						    .keys = k + (seed >> 5) % next,
						    .nkeys = 1,
						    .flags = HC_LOOKUP_PIN | HC_LOOKUP_NOTOUCH };
			hc_page_t h;
			if (pinned != HC_PAGE_NONE)
				ck_assert_ok(hc_page_unpin(p, pinned));
			pinned = hc_lookup(p, &rq, &h) == 1 ? h : HC_PAGE_NONE;
		}
		ck_assert_int_eq(hc__lru_census(p, 1, hct_print_violation, NULL), 0);
	}
	ck_assert_uint_gt(evicted, 100);
	if (pinned != HC_PAGE_NONE)
		ck_assert_ok(hc_page_unpin(p, pinned));
	free(k);
	done(p);
}
END_TEST

static hc_page_t *orphan_slot; /* shared with the puppet */

static void alloc_anon(hc_pool *p, long arg)
{
	(void)arg;
	if (hc_page_alloc(p, 1, 1, orphan_slot) != 1 || hct_fill_commit_all(p, *orphan_slot) != 1)
		_exit(31);
}

/* An orphan (a dead rank's page nobody owns) goes to the head of the LRU
 * list when recovery makes it, so it is the first an eviction takes. */
START_TEST(lru_orphans_go_first)
{
	hc_pool *p = make(HC_EVICT_LRU, 8);
	struct hct_puppet *pp;
	hc_key_t k[3];
	hc_page_t o;

	orphan_slot = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(orphan_slot != MAP_FAILED);
	hct_keys(k, 3, 37);
	ck_assert_int_eq(hct_store(p, k, 3, 0), 3);
	pp = hct_puppet(name);
	hct_puppet_do(pp, alloc_anon, 0);
	o = *orphan_slot;
	ck_assert_ok(hc_page_pin(p, o));
	hct_puppet_kill(pp);
	hct_puppet_end(pp); /* after a kill: only frees */
	ck_assert_ok(hc_pool_recover(p, NULL, 0));
	ck_assert(atomic_load(&p->pages[HC_PAGE_ID(o)].flags) & HC_PF_ORPHAN);
	ck_assert_uint_eq(hc__lru_first(p), HC_PAGE_ID(o));
	/* let go of it without the unpin that would free it at once */
	atomic_store(&hc__pin_row(p, HC_PAGE_ID(o))[p->slot], 0);
	ck_assert_int_eq(hc_evict(p, 1), 1);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(o), NULL, NULL, NULL), HC_PAGE_FREE);
	ck_assert_int_eq(present(p, k, 3), 3);
	munmap(orphan_slot, 4096);
	done(p);
}
END_TEST

/* A scribbled LRU list never stops eviction: the walk mends a link out of
 * range and starts again; a move through a node whose neighbours do not
 * point back at it rebuilds the list instead of cutting pages off it. */
START_TEST(lru_list_mends_itself)
{
	hc_pool *p = make(HC_EVICT_LRU, 8);
	hc_key_t k[4];
	int64_t first;
	uint32_t second;

	hct_keys(k, 4, 38);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(hct_store(p, k + i, 1, 0), 1);
	first = hc__lru_first(p);
	ck_assert_int_ge(first, 0);
	atomic_store(&p->lru[first].next, 0xdeadbeef);
	ck_assert_int_eq(hc_evict(p, 1), 1);
	ck_assert_int_eq(present(p, k, 4), 3);
	ck_assert_int_eq(hc__lru_census(p, 1, hct_print_violation, NULL), 0);

	/* an in-range lie: k[2]'s page (second on the list) says k[3]'s is
	 * before it; touching k[2] must rebuild, not cut k[3] off */
	first = hc__lru_first(p);
	second = (uint32_t)hc__lru_next(p, (uint32_t)first);
	atomic_store(&p->lru[second].prev, (uint32_t)hc__lru_next(p, second));
	ck_assert_int_gt(hc__lru_census(p, 1, NULL, NULL), 0);
	ck_assert_int_eq(hct_hit(p, k + 2, 1), 1);
	ck_assert_int_eq(hc__lru_census(p, 1, hct_print_violation, NULL), 0);
	ck_assert_int_eq(hc_evict(p, 3), 3);
	done(p);
}
END_TEST

/* CLOCK: a page looked up since the hand last passed gets a second chance. */
START_TEST(clock_second_chance)
{
	hc_pool *p = make(HC_EVICT_CLOCK, 8);
	hc_key_t k[8];
	int left = 0, touched = 0;

	hct_keys(k, 8, 35);
	ck_assert_int_eq(hct_store(p, k, 8, 0), 8);
	ck_assert_int_eq(hc_evict(p, 1), 1); /* the hand clears every bit on its way */
	for (int i = 0; i < 8; i += 2)
		touched += hct_hit(p, k + i, 1);
	ck_assert_int_ge(touched, 3);
	ck_assert_int_eq(hc_evict(p, 3), 3);
	for (int i = 0; i < 8; i += 2)
		left += hct_hit(p, k + i, 1);
	ck_assert_int_eq(left, touched); /* every touched page survived */
	ck_assert_int_eq(present(p, k, 8), 4);
	done(p);
}
END_TEST

/* Too little to evict: the allocation fails whole and evicts nothing. */
START_TEST(all_or_nothing_when_pinned)
{
	hc_pool *p = make(HC_EVICT_LRU, 8);
	hc_key_t k[8];
	hc_page_t pages[8], out[4];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req),
				    .keys = k,
				    .nkeys = 6,
				    .flags = HC_LOOKUP_PIN };
	struct hc_stats st;

	hct_keys(k, 8, 36);
	ck_assert_int_eq(hct_store(p, k, 8, 0), 8);
	ck_assert_int_eq(hc_lookup(p, &rq, pages), 6);
	ck_assert_err(hc_page_alloc(p, 4, 1, out), ENOSPC);
	ck_assert_msg_has("evictable");
	st = hct_stats(p);
	ck_assert_uint_eq(st.pages[HC_PAGE_RESERVED], 0);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_alloc_failed), 1);
	ck_assert_int_eq(hc_page_alloc(p, 2, 1, out), 2); /* the two unpinned ones */
	ck_assert_int_eq(hct_hit(p, k, 8), 6);
	ck_assert_int_eq(hc_page_abort(p, out, 2), 2);
	for (int i = 0; i < 6; i++)
		ck_assert_ok(hc_page_unpin(p, pages[i]));
	done(p);
}
END_TEST

/* Pages allocated without a key are not cache entries: never evicted. */
START_TEST(unkeyed_pages_stay)
{
	hc_pool *p = make(HC_EVICT_CLOCK, 8);
	hc_page_t raw[8];

	ck_assert_int_eq(hc_page_alloc(p, 8, 1, raw), 8);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(hct_fill_commit_all(p, raw[i]), 1);
	ck_assert_int_eq(hc_evict(p, 8), 0);
	ck_assert_err(hc_page_alloc(p, 1, 1, raw), ENOSPC);
	ck_assert_int_eq(hc_page_free(p, raw, 8), 8);
	done(p);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("evict");
	TCase *tc = tcase_create("evict");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, lru_order);
	tcase_add_test(tc, lru_root_last_under_pressure);
	tcase_add_test(tc, lru_list_is_the_scan_order);
	tcase_add_test(tc, lru_orphans_go_first);
	tcase_add_test(tc, lru_list_mends_itself);
	tcase_add_test(tc, clock_second_chance);
	tcase_add_test(tc, all_or_nothing_when_pinned);
	tcase_add_test(tc, unkeyed_pages_stay);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
