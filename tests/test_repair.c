/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_repair.c - hc_pool_repair fixes what the check names: each case
 * makes one kind of damage by hand (as test_check.c does), repairs, and
 * wants the fix counted, its line printed, and a pool that checks clean in
 * both modes, its surviving pages still found with their bytes.  What it
 * must not fix (a damaged page a live rank holds) it reports, and leaves.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hct.h"

static const char *name;
static hc_pool *pool;
static hc_key_t keys[4];
static hc_page_t kp[4]; /* keyed READY pages of keys[0..3] */

static void setup(void)
{
	name = hct_name();
	pool = hct_create_attach(name, 16, 60000, 8);
	hct_keys(keys, 4, 61);
	hct_store_by_key(pool, keys, 4, 0, kp);
}

static void teardown(void)
{
	hc_pool_detach(pool);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}

static struct hc_seg_page *pg(hc_page_t h)
{
	return &pool->pages[HC_PAGE_ID(h)];
}

/* Repair; it must say has (a line) and leave no violation; then the check
 * agrees, in both modes. */
static void repaired(struct hc_repair_report *rep, const char *has)
{
	struct hct_lines l = { 0 };
	int n = hc_pool_repair(pool, HC_CHECK_QUIESCENT, rep, sizeof(*rep), hct_collect, &l);

	ck_assert_msg(n == 0, "repair left %d violations:\n%s", n, l.all);
	ck_assert_msg(strstr(l.all, has), "repair did not say '%s':\n%s", has, l.all);
	ck_assert_uint_eq(rep->unrepaired, 0);
	ck_assert_int_eq(hc_pool_check(pool, 0, hct_print_violation, NULL), 0);
	ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}

/* keys[i] still hits, with its bytes. */
static void still_there(unsigned i)
{
	hc_page_t h;
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req),
				    .keys = keys + i,
				    .nkeys = 1,
				    .flags = HC_LOOKUP_NOTOUCH };

	ck_assert_int_eq(hc_lookup(pool, &rq, &h), 1);
	ck_assert_int_eq(hct_key_bytes(pool, h, keys[i], 0), 0);
}

START_TEST(a_clean_pool_is_left_alone)
{
	struct hc_repair_report rep;
	struct hct_lines l = { 0 };

	ck_assert_int_eq(hc_pool_repair(pool, HC_CHECK_QUIESCENT, &rep, sizeof(rep), hct_collect, &l), 0);
	ck_assert_msg(l.n == 0, "a clean pool got lines:\n%s", l.all);
	ck_assert_uint_eq(rep.lost + rep.damaged + rep.bad_words + rep.index_bad + rep.index_missing +
				  rep.tickets_ended + rep.ticket_bits + rep.holds_cleared + rep.duplicates,
			  0);
	for (unsigned i = 0; i < 4; i++)
		still_there(i);
}
END_TEST

/* READY pages that nothing finds or frees: bugs 1 and 5's states. */
START_TEST(lost_pages_are_freed)
{
	struct hc_repair_report rep;
	hc_page_t a;
	uint64_t w;

	ck_assert_int_eq(hct_in_child(name, hct_nothing, NULL), 0); /* slot + 1 was a rank once */
	ck_assert_int_eq(hc_page_alloc(pool, 1, 3, &a), 1);
	ck_assert_int_eq(hct_fill_commit_all(pool, a), 1);
	w = atomic_load(&pg(a)->word);
	atomic_store(&pg(a)->word, hc__w_make(HC_PAGE_READY, (unsigned)pool->slot + 1, hc__w_gen(w), 0));
	atomic_fetch_and(&pg(kp[1])->flags, ~HC_PF_KEYED); /* READY, its key flag gone */
	repaired(&rep, "allocated without a key by a slot that is not live");
	ck_assert_uint_eq(rep.lost, 1);
	ck_assert_uint_eq(rep.damaged, 1);   /* without the flag its check fails too */
	ck_assert_uint_ge(rep.index_bad, 1); /* kp[1]'s entry named an unkeyed page */
	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(a), NULL, NULL, NULL), HC_PAGE_FREE);
	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(kp[1]), NULL, NULL, NULL), HC_PAGE_FREE);
	still_there(0);
	still_there(2);
}
END_TEST

/* A stray write to a page entry: the page fails its check and goes; its
 * entry, found under the key it had, is dropped from the index. */
START_TEST(damaged_entries_are_freed)
{
	struct hc_repair_report rep;

	atomic_fetch_xor(&pg(kp[0])->key[0], 0x5a5a); /* the index's hash reads this word */
	atomic_store(&pg(kp[2])->depth, 99);
	repaired(&rep, "fail their check; freed");
	ck_assert_uint_eq(rep.damaged, 2);
	ck_assert_uint_ge(rep.index_bad, 1);
	ck_assert_int_eq(hct_hit(pool, keys, 1), 0);
	still_there(1);
	still_there(3);
}
END_TEST

/* A damaged page a live rank pins is not freed: reported, and left. */
START_TEST(what_a_live_rank_holds_is_left)
{
	struct hc_repair_report rep;
	struct hct_lines l = { 0 };
	int n;

	ck_assert_ok(hc_page_pin(pool, kp[3]));
	atomic_store(&pg(kp[3])->depth, 42);
	n = hc_pool_repair(pool, HC_CHECK_QUIESCENT, &rep, sizeof(rep), hct_collect, &l);
	ck_assert_msg(n >= 1 && rep.unrepaired == (uint32_t)n, "repair said %d, unrepaired %u:\n%s", n, rep.unrepaired,
		      l.all);
	ck_assert_msg(strstr(l.all, "but it is held (1 pins"), "no line for the held page:\n%s", l.all);
	ck_assert_msg(strstr(l.all, "cannot repair: page"), "no 'cannot repair' line:\n%s", l.all);
	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(kp[3]), NULL, NULL, NULL), HC_PAGE_READY);
	ck_assert_ok(hc_page_unpin(pool, kp[3]));
	repaired(&rep, "fail their check; freed");
}
END_TEST

/* The index against the page table: a missing entry, a stray one, an
 * entry past the pool; and two live pages of one key. */
START_TEST(the_index_is_rebuilt)
{
	struct hc_repair_report rep;
	struct hc__khash kh;
	hc_page_t d;
	uint64_t k[4];

	hc__page_khash(pool, HC_PAGE_ID(kp[2]), &kh);
	hc__index_lock(pool, kh.stripe);
	ck_assert_int_eq(hc__index_remove(pool, &kh, HC_PAGE_ID(kp[2])), 1);
	hc__index_unlock(pool, kh.stripe);
	for (uint64_t i = 0;; i++) /* an empty slot gets a page id past the pool */
		if (atomic_load(&pool->index[i]) == 0) {
			atomic_store(&pool->index[i], (UINT64_C(7) << 32) | 1000);
			break;
		}
	repaired(&rep, "rebuilt from the page table");
	ck_assert_uint_eq(rep.index_missing, 1);
	ck_assert_uint_eq(rep.index_bad, 1);
	for (unsigned i = 0; i < 4; i++)
		still_there(i);

	/* a second live page with keys[1]'s key: found by nothing, freed */
	ck_assert_int_eq(hc_page_alloc(pool, 1, 3, &d), 1);
	for (int j = 0; j < 4; j++)
		k[j] = atomic_load(&pg(kp[1])->key[j]);
	for (int j = 0; j < 4; j++)
		atomic_store(&pg(d)->key[j], k[j]);
	atomic_store(&pg(d)->depth, atomic_load(&pg(kp[1])->depth));
	atomic_store(&pg(d)->flags, HC_PF_KEYED | hc__page_check(pool, HC_PAGE_ID(d), 1));
	ck_assert_int_eq(hct_key_bytes(pool, d, keys[1], 1), 0);
	ck_assert_int_eq(hc_page_commit(pool, d, hc_page_needed(pool, 3)), 1);
	repaired(&rep, "its key is another live page's");
	ck_assert_uint_eq(rep.duplicates, 1);
	/* the one the index finds stays */
	ck_assert_int_eq((hc_page_state(pool, HC_PAGE_ID(d), NULL, NULL, NULL) == HC_PAGE_FREE) +
				 (hc_page_state(pool, HC_PAGE_ID(kp[1]), NULL, NULL, NULL) == HC_PAGE_FREE),
			 1);
	still_there(1);
}
END_TEST

/* Words no protocol writes, and holds in the column of a free slot. */
START_TEST(bad_words_and_stray_holds)
{
	struct hc_repair_report rep;
	hc_page_t f = HC_PAGE_MAKE(15, 0);
	uint64_t w = atomic_load(&pg(kp[3])->word);

	ck_assert_int_eq(hct_in_child(name, hct_nothing, NULL), 0);
	atomic_store(&pg(kp[3])->word, hc__w_make(6, 0, hc__w_gen(w), 0)); /* a state that does not exist */
	atomic_store(&pg(f)->word, hc__w_make(HC_PAGE_FREE, 0, 0, 0x77));  /* aux on a FREE page */
	atomic_store(&hc__pin_row(pool, HC_PAGE_ID(kp[0]))[pool->slot + 1], 3);
	w = atomic_load(&pg(kp[2])->word); /* a reservation of a slot nobody holds */
	atomic_store(&pg(kp[2])->word, hc__w_make(HC_PAGE_RESERVED, (unsigned)pool->slot + 1, hc__w_gen(w), 0));
	repaired(&rep, "had aux bits; cleared");
	ck_assert_uint_eq(rep.recovery.bad_words, 1); /* the state: recovery quarantines those */
	ck_assert_uint_eq(rep.bad_words, 2);
	ck_assert_uint_eq(rep.holds_cleared, 1);
	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(kp[3]), NULL, NULL, NULL), HC_PAGE_QUARANTINE);
	ck_assert_uint_eq(atomic_load(&hc__pin_row(pool, HC_PAGE_ID(kp[0]))[pool->slot + 1]), 0);
	still_there(0);
}
END_TEST

static void join(hc_pool *p, uint32_t engine, uint32_t rank)
{
	struct hc_engine_spec e = { .size = sizeof(struct hc_engine_spec),
				    .engine_id = engine,
				    .tp_size = 2,
				    .tp_rank = rank,
				    .quota_pages = HC_QUOTA_UNLIMITED,
				    .ticket_timeout_ms = 60000 };

	ck_assert_ok(hc_engine_join(p, &e));
}

/* A lookup ticket of keys[0..1], OPEN for rank 1 of engine 2. */
static hc_ticket open_ticket(const char *req)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = req, .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 2 };
	hc_page_t pages[2];
	hc_ticket t = { .size = sizeof(hc_ticket) };

	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t), 2);
	ck_assert_ok(hc_ticket_release(pool, &t));
	return t;
}

START_TEST(tickets_are_ended)
{
	struct hc_repair_report rep;
	hc_ticket a = { .size = sizeof(a) }, b = { .size = sizeof(b) };
	uint32_t e;

	join(pool, 2, 0);
	a = open_ticket("a");
	b = open_ticket("b");
	pool->tickets[b.index].n = 9;                                                        /* more pages than keys */
	atomic_fetch_or(&hc__tmask_row(pool, HC_PAGE_ID(kp[3]))[0], UINT64_C(1) << a.index); /* a names no kp[3] */
	repaired(&rep, "a record that does not add up");
	ck_assert_uint_eq(rep.tickets_ended, 1);
	ck_assert_uint_eq(rep.ticket_bits, 1);

	/* the engine's last member is gone and its ticket open: bug 8's state */
	e = atomic_exchange(&pool->ranks[pool->slot].engine, 0);
	repaired(&rep, "which has no live member; ended");
	ck_assert_uint_eq(rep.tickets_ended, 1);
	atomic_store(&pool->ranks[pool->slot].engine, e);
	ck_assert_ok(hc_engine_leave(pool));
	for (unsigned i = 0; i < 4; i++)
		still_there(i);
	ck_assert_int_eq(hc_evict(pool, 4), 4); /* no hold is left anywhere */
}
END_TEST

START_TEST(bad_calls)
{
	hc_pool *adm;
	struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_ADMIN };

	ck_assert_int_eq(hc_pool_repair(NULL, 0, NULL, 0, NULL, NULL), -EINVAL);
	ck_assert_int_eq(hc_pool_repair(pool, 0x80, NULL, 0, NULL, NULL), -EINVAL);
	ck_assert(strstr(hc_last_error(), "unknown flags 0x80"));
	ck_assert_ok(hc_pool_attach(name, &o, &adm));
	ck_assert_int_eq(hc_pool_repair(adm, 0, NULL, 0, NULL, NULL), -EPERM);
	ck_assert(strstr(hc_last_error(), "without a rank slot"));
	hc_pool_detach(adm);
	ck_assert_int_eq(hc_pool_repair(pool, 0, NULL, 0, NULL, NULL), 0); /* no report, no lines: fine */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("repair");
	TCase *tc = tcase_create("fixes");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, a_clean_pool_is_left_alone);
	tcase_add_test(tc, lost_pages_are_freed);
	tcase_add_test(tc, damaged_entries_are_freed);
	tcase_add_test(tc, what_a_live_rank_holds_is_left);
	tcase_add_test(tc, the_index_is_rebuilt);
	tcase_add_test(tc, bad_words_and_stray_holds);
	tcase_add_test(tc, tickets_are_ended);
	tcase_add_test(tc, bad_calls);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
