/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_writer.c - the write policies, with the file backend: write_through
 * backs up every page once it is READY, a restarted service catches up
 * on what it missed, and pages whose objects L3 lost are written again; write_through_selective waits for N hits;
 * write_back keeps a clean share of the pool by writing the oldest dirty pages, and while no service runs dirty pages
 * are not evicted and allocation fails cleanly; write_none writes nothing unasked; bad options are refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hicache/service.h>

#include "../shmpool/pool.h"
#include "hct.h"

static hc_service *start(const char *name, enum hc_write_policy wp, unsigned select_hits, unsigned pct)
{
	struct hc_service_opts o = { .size = sizeof(struct hc_service_opts),
				     .backend = hct_l3_spec,
				     .batch_pages = 4,
				     .write_policy = wp,
				     .select_hits = select_hits,
				     .writeback_pct = pct };

	return hct_service_start(name, &o);
}

/* Is key's READY page marked in L3?  (-1: not in the pool.) */
static int in_l3(hc_pool *p, const hc_key_t key)
{
	struct hc_lookup_req lr = { .size = sizeof(struct hc_lookup_req),
				    .keys = (const hc_key_t *)key,
				    .nkeys = 1,
				    .flags = HC_LOOKUP_NOTOUCH };
	hc_page_t pg;

	if (hc_lookup(p, &lr, &pg) != 1)
		return -1;
	return !!(atomic_load(&p->pages[HC_PAGE_ID(pg)].flags) & HC_PF_IN_L3);
}

static unsigned count_in_l3(hc_pool *p, const hc_key_t *k, unsigned n)
{
	unsigned c = 0;

	for (unsigned i = 0; i < n; i++)
		c += in_l3(p, k[i]) == 1;
	return c;
}

/* Wait (10 s at most) until want of the keys are in L3; how many are. */
static unsigned wait_in_l3(hc_pool *p, const hc_key_t *k, unsigned n, unsigned want)
{
	unsigned c = 0;

	for (int i = 0; i < 1000 && (c = count_in_l3(p, k, n)) < want; i++)
		usleep(10000);
	return c;
}

static void finish(hc_pool *p, const char *name)
{
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}

START_TEST(write_through_and_catch_up)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 32, 100, 4);
	hc_service *s = start(name, HC_WRITE_THROUGH, 0, 0);
	hc_key_t k[16];

	hct_keys(k, 16, 7);
	ck_assert_int_eq(hct_store(p, k, 10, 0), 10);
	ck_assert_uint_eq(wait_in_l3(p, k, 10, 10), 10);
	ck_assert_int_eq(hct_l3_exists(p, k, 16), 10);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_writer_pages), 10);
	{
		/* the writer's backups are timed with the ranks' (none here) */
		struct hc_stats st;
		for (int i = 0; i < 100 && (st = hct_stats(p)).hist[HC_HIST_backup].count == 0; i++)
			usleep(10000);
		ck_assert_uint_ge(st.hist[HC_HIST_backup].count, 1);
		ck_assert_uint_le(st.hist[HC_HIST_backup].count, 10);
	}
	/* pages stored while no service runs: the next one catches up */
	ck_assert_ok(hc_service_stop(s));
	ck_assert_int_eq(hct_store(p, k + 10, 6, 10), 6);
	usleep(50000);
	ck_assert_uint_eq(count_in_l3(p, k, 16), 10);
	s = start(name, HC_WRITE_THROUGH, 0, 0);
	ck_assert_uint_eq(wait_in_l3(p, k, 16, 16), 16);
	ck_assert_int_eq(hct_l3_exists(p, k, 16), 16);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_writer_pages), 16);
	ck_assert_ok(hc_service_stop(s));
	finish(p, name);
}
END_TEST

/* L3 loses objects behind the pool's back (evicted, deleted): the pages
 * marked in L3 lose the mark when the service hears of it, from an
 * existence query or a prefetch, and the write policy writes them again. */
START_TEST(l3_forgets)
{
	enum { N = 8 };
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 32, 100, 4);
	hc_service *s = start(name, HC_WRITE_THROUGH, 0, 0);
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .nkeys = N,
				      .policy = HC_PREFETCH_WAIT_COMPLETE };
	hc_key_t k[N];
	hc_page_t pg[N];
	hc_store *st;
	hc_req *rq;
	int status[N];

	hct_keys(k, N, 9);
	ck_assert_int_eq(hct_store(p, k, N, 0), N);
	ck_assert_uint_eq(wait_in_l3(p, k, N, N), N);
	/* the objects go while no service runs; the marks stay */
	ck_assert_ok(hc_service_stop(s));
	ck_assert_msg(hc_store_open(p, hct_l3_spec, NULL, &st) == 0, "store: %s", hc_last_error());
	ck_assert_int_eq(hc_store_delete(st, (const hc_key_t *)k, N, status), N);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(status[i], 0);
	ck_assert_ok(hc_store_close(st));
	s = start(name, HC_WRITE_THROUGH, 0, 0);
	usleep(50000); /* its catch-up scan finds every page marked: nothing to write */
	ck_assert_uint_eq(count_in_l3(p, k, N), N);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_writer_pages), N);
	/* an existence query stops at the first key: that page is written again */
	ck_assert_int_eq(hct_l3_exists(p, k, N), 0);
	ck_assert_int_eq(in_l3(p, k[0]) == 0 || hct_counter(p, HC_CTR_l3_writer_pages) > N, 1);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_forgotten), 1);
	for (int i = 0; i < 1000 && hct_l3_exists(p, k, 1) != 1; i++)
		usleep(10000);
	ck_assert_int_eq(in_l3(p, k[0]), 1);
	/* a prefetch of keys READY here and gone from L3 clears the rest */
	pr.keys = k;
	ck_assert_ok(hc_req_prefetch(p, &pr, &rq));
	ck_assert_int_eq(hc_req_prefetch_take(rq, pg, NULL), N);
	ck_assert_int_eq(hc_req_wait(rq, 10000), N);
	ck_assert_ok(hc_req_free(rq));
	for (int i = 0; i < N; i++)
		ck_assert_ok(hc_page_unpin(p, pg[i]));
	ck_assert_uint_ge(hct_counter(p, HC_CTR_l3_forgotten), N);
	ck_assert_uint_eq(wait_in_l3(p, k, N, N), N);
	ck_assert_int_eq(hct_l3_exists(p, k, N), N);
	/* each page forgotten, and written again once for each time it was: an
	 * absence heard before a rewrite ended may land after it (the wait loop
	 * above asks while the writer works), and costs one more write, never
	 * a mark on a page that is not in L3 */
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_writer_pages), N + hct_counter(p, HC_CTR_l3_forgotten));
	ck_assert_ok(hc_service_stop(s));
	finish(p, name);
}
END_TEST

START_TEST(selective_after_hits)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 32, 100, 4);
	hc_service *s = start(name, HC_WRITE_THROUGH_SELECTIVE, 2, 0);
	hc_key_t k[4];

	hct_keys(k, 4, 8);
	ck_assert_int_eq(hct_store(p, k, 4, 0), 4);
	usleep(200000);
	ck_assert_uint_eq(count_in_l3(p, k, 4), 0);
	/* one hit on the first two: not yet */
	ck_assert_int_eq(hct_hit(p, k, 2), 2);
	usleep(200000);
	ck_assert_uint_eq(count_in_l3(p, k, 4), 0);
	/* the second: those two go, the others stay */
	ck_assert_int_eq(hct_hit(p, k, 2), 2);
	ck_assert_uint_eq(wait_in_l3(p, k, 2, 2), 2);
	usleep(200000);
	ck_assert_int_eq(in_l3(p, k[2]), 0);
	ck_assert_int_eq(in_l3(p, k[3]), 0);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_writer_pages), 2);
	ck_assert_ok(hc_service_stop(s));
	finish(p, name);
}
END_TEST

START_TEST(write_back_keeps_dirty_pages)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 32, 0, 4);
	hc_service *s;
	hc_key_t k[40];
	uint8_t was_clean[30];
	int r;

	hct_keys(k, 40, 9);
	ck_assert_int_eq(hct_store(p, k, 30, 0), 30); /* 2 free, 30 dirty */
	/* One scan at start sees them all: it writes the 6 eviction would take
	 * next (the oldest: in one reservation, the deepest), and no more. */
	s = start(name, HC_WRITE_BACK, 0, 25); /* 8 of 32 free or clean */
	ck_assert_uint_eq(wait_in_l3(p, k, 30, 6), 6);
	usleep(200000);
	ck_assert_uint_eq(count_in_l3(p, k, 30), 6);
	for (unsigned i = 24; i < 30; i++)
		ck_assert_msg(in_l3(p, k[i]) == 1, "key %u, of the oldest, not written", i);
	for (unsigned i = 0; i < 30; i++)
		was_clean[i] = (uint8_t)in_l3(p, k[i]);
	ck_assert_ok(hc_service_stop(s));
	/* no service: the 2 free and the 6 clean pages go, every dirty one stays */
	ck_assert_int_eq(hct_store(p, k + 30, 8, 0), 8);
	for (unsigned i = 0; i < 30; i++)
		ck_assert_msg(in_l3(p, k[i]) == (was_clean[i] ? -1 : 0), "key %u: %s, was %s", i,
			      in_l3(p, k[i]) < 0 ? "evicted" : "kept", was_clean[i] ? "clean" : "dirty");
	r = hct_store(p, k + 38, 1, 0);
	ck_assert_int_eq(r, -ENOSPC);
	ck_assert_msg(strstr(hc_last_error(), "write_back"), "error: %s", hc_last_error());
	/* a service again: it writes some back, and allocation works */
	s = start(name, HC_WRITE_BACK, 0, 25);
	for (int i = 0; i < 1000 && (r = hct_store(p, k + 38, 1, 0)) == -ENOSPC; i++)
		usleep(10000);
	ck_assert_int_eq(r, 1);
	ck_assert_ok(hc_service_stop(s));
	finish(p, name);
}
END_TEST

START_TEST(write_none_and_bad_options)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 32, 100, 4);
	hc_service *s = start(name, HC_WRITE_NONE, 0, 0);
	struct hc_service_opts o = { .size = sizeof(struct hc_service_opts), .backend = hct_l3_spec };
	hc_key_t k[4];

	hct_keys(k, 4, 10);
	ck_assert_int_eq(hct_store(p, k, 4, 0), 4);
	ck_assert_int_eq(hct_hit(p, k, 4), 4);
	ck_assert_int_eq(hct_hit(p, k, 4), 4);
	usleep(300000);
	ck_assert_uint_eq(count_in_l3(p, k, 4), 0);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_writer_pages), 0);
	ck_assert_ok(hc_service_stop(s));
	o.write_policy = (enum hc_write_policy)7;
	ck_assert_err(hc_service_start(name, &o, &s), EINVAL);
	ck_assert_msg_has("write policy 7");
	o.write_policy = HC_WRITE_BACK;
	o.writeback_pct = 101;
	ck_assert_err(hc_service_start(name, &o, &s), EINVAL);
	ck_assert_msg_has("writeback_pct 101");
	finish(p, name);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("writer");
	TCase *tc = tcase_create("writer");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, hct_l3_setup, hct_l3_teardown);
	tcase_add_test(tc, write_through_and_catch_up);
	tcase_add_test(tc, l3_forgets);
	tcase_add_test(tc, selective_after_hits);
	tcase_add_test(tc, write_back_keeps_dirty_pages);
	tcase_add_test(tc, write_none_and_bad_options);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
