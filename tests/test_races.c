/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_races.c - races a few instructions wide, each played out in an
 * exact order: one process is stopped at a crash point (SIGSTOP, built with
 * --enable-crash-points), the others take their steps, then it goes on.
 * Nothing here sleeps to make an order.  Each case is a bug that an
 * outside review or the schedule explorer (test_explore.c) found; each
 * failed before its fix.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hct.h"

static const char *name;
static hc_pool *pool;

/* What the puppets share with the test. */
struct shared {
	hc_key_t keys[4];
	hc_page_t page;
	int ret;
};
static struct shared *sh;

/* Each puppet's own (its copy of the process after fork). */
static hc_ticket tk = { .size = sizeof(hc_ticket) };
static hc_page_t tk_pages[4];
static uint8_t tk_skip[4];

static void setup(void)
{
	name = hct_name();
	pool = hct_create_attach(name, 4, 60000, 8); /* a long grace: nothing leaves quarantine by itself */
	sh = hct_shared(sizeof(*sh));
	hct_keys(sh->keys, 4, 17);
}

static void teardown(void)
{
	if (pool)
		hc_pool_detach(pool);
	munmap(sh, sizeof(*sh));
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}

static void quiet_check(void)
{
	ck_assert_ok(hc_pool_recover(pool, NULL, 0));
	ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}

/* ---- steps the puppets take */

static void step_join(hc_pool *p, long rank)
{
	struct hc_engine_spec e = { .size = sizeof(struct hc_engine_spec),
				    .engine_id = 3,
				    .tp_size = 2,
				    .tp_rank = (uint32_t)rank,
				    .quota_pages = HC_QUOTA_UNLIMITED };

	ck_assert_ok(hc_engine_join(p, &e));
}

/* Both ranks: the reservation ticket for keys[0]; the page in sh->page. */
static void step_ticket_reserve(hc_pool *p, long arg)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "req", .step = 0 };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = sh->keys, .nkeys = 1 };

	(void)arg;
	ck_assert_int_eq(hc_ticket_reserve(p, &tn, &rr, tk_pages, tk_skip, &tk), 1);
	sh->page = tk_pages[0];
}

/* Fill and commit the shards in arg (a mask); fill only when arg < 0. */
static void step_fill_commit(hc_pool *p, long arg)
{
	uint32_t mask = (uint32_t)(arg < 0 ? -arg : arg);

	for (uint32_t m = mask; m; m &= m - 1)
		hct_fill(p, sh->page, m & -m);
	if (arg > 0)
		sh->ret = hc_page_commit(p, sh->page, mask);
}

static void step_release(hc_pool *p, long arg)
{
	(void)arg;
	ck_assert_ok(hc_ticket_release(p, &tk));
}

static void step_arm_stop(hc_pool *p, long pt)
{
	(void)p;
	ck_assert_ok(hc__pt_arm((unsigned)pt, HC_PTA_STOP, 1));
}

static void step_recover(hc_pool *p, long arg)
{
	(void)arg;
	hc_pool_recover(p, NULL, 0);
}

static void step_abort(hc_pool *p, long arg)
{
	(void)arg;
	sh->ret = hc_page_abort(p, &sh->page, 1);
}

static int lookup_hits(void)
{
	hc_page_t pages[1];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = sh->keys, .nkeys = 1 };

	return hc_lookup(pool, &rq, pages);
}

#define G0   UINT32_C(1)
#define G1   UINT32_C(2)
#define REPL HC_SHARD_REPLICATED

/*
 * Rank 0 reserved a page through a ticket and wrote its shards; it dies.
 * Its recoverer reads the page (RESERVED, a dead owner's) and, before it
 * settles it, rank 1 commits the last shard: the page is READY and keyed.
 * Recovery must leave it so.  Before the fix it took the key out first and
 * then failed its CAS: a READY page nobody could find, owned by a dead slot.
 */
START_TEST(recovery_vs_the_last_commit)
{
	struct hct_puppet *r0 = hct_puppet(name), *r1 = hct_puppet(name), *rec = hct_puppet(name);

	hct_puppet_do(r0, step_join, 0);
	hct_puppet_do(r1, step_join, 1);
	hct_puppet_do(r0, step_ticket_reserve, 0);
	hct_puppet_do(r1, step_ticket_reserve, 0);
	hct_puppet_do(r0, step_fill_commit, (long)(G0 | REPL));
	ck_assert_int_eq(sh->ret, 0);
	hct_puppet_do(r1, step_fill_commit, -(long)G1);
	hct_puppet_kill(r0);

	hct_puppet_do(rec, step_arm_stop, HC_PT_recover_page_seen);
	hct_puppet_send(rec, step_recover, 0);
	hct_puppet_stopped(rec);
	hct_puppet_do(r1, step_fill_commit, (long)G1);
	ck_assert_int_eq(sh->ret, 1); /* the last shard: READY */
	hct_puppet_cont(rec);
	hct_puppet_wait(rec);

	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(sh->page), NULL, NULL, NULL), HC_PAGE_READY);
	ck_assert_int_eq(lookup_hits(), 1);
	hct_puppet_do(r1, step_release, 0);
	hct_puppet_end(r1);
	hct_puppet_end(rec);
	hct_puppet_end(r0);
	quiet_check();
}
END_TEST

/*
 * The same race with the owner alive and aborting: it has read the page,
 * and rank 1 commits the last shard before its abort settles.  The page is
 * READY and keyed: the abort must fail (ESTALE) and leave it findable.
 * Before the fix the abort unkeyed it first: READY and unfindable.
 */
START_TEST(abort_vs_the_last_commit)
{
	struct hct_puppet *r0 = hct_puppet(name), *r1 = hct_puppet(name);

	hct_puppet_do(r0, step_join, 0);
	hct_puppet_do(r1, step_join, 1);
	hct_puppet_do(r0, step_ticket_reserve, 0);
	hct_puppet_do(r1, step_ticket_reserve, 0);
	hct_puppet_do(r0, step_fill_commit, (long)(G0 | REPL));
	hct_puppet_do(r1, step_fill_commit, -(long)G1);

	hct_puppet_do(r0, step_arm_stop, HC_PT_abort_seen);
	hct_puppet_send(r0, step_abort, 0);
	hct_puppet_stopped(r0);
	hct_puppet_do(r1, step_fill_commit, (long)G1);
	ck_assert_int_eq(sh->ret, 1);
	hct_puppet_cont(r0);
	hct_puppet_wait(r0);
	ck_assert_int_eq(sh->ret, -ESTALE);

	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(sh->page), NULL, NULL, NULL), HC_PAGE_READY);
	ck_assert_int_eq(lookup_hits(), 1);
	hct_puppet_do(r1, step_release, 0);
	hct_puppet_end(r0);
	hct_puppet_end(r1);
	quiet_check();
}
END_TEST

/* A keyed page whose quarantine ran out long ago, still keyed: as a
 * quarantiner that died before it took the key out leaves it. */
static hc_page_t keyed_quarantine(void)
{
	hc_page_t pg;
	uint8_t skip;
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = sh->keys, .nkeys = 1 };
	struct hc_seg_page *e;
	uint64_t w;

	ck_assert_int_eq(hc_reserve(pool, &rr, &pg, &skip), 1);
	e = &pool->pages[HC_PAGE_ID(pg)];
	w = atomic_load(&e->word);
	ck_assert(atomic_compare_exchange_strong(
		&e->word, &w,
		hc__w_make(HC_PAGE_QUARANTINE, (unsigned)pool->slot, hc__w_gen(w), (hc__now_ms() - 3600 * 1000u) | 1)));
	hc__quota_give(pool, 1);
	return pg;
}

static void step_store_key1(hc_pool *p, long arg)
{
	(void)arg;
	sh->ret = hct_store(p, sh->keys + 1, 1, 1);
}

/*
 * The quarantine sweep reads a keyed quarantined page whose grace ran out.
 * Before it looks at the key flag, another sweep frees the page and a rank
 * stores another key in it.  The first sweep must leave that new life
 * alone.  Before the fix it took the new key out of the index: a READY page
 * nobody could find.
 */
START_TEST(sweep_vs_the_next_life)
{
	struct hct_puppet *sw = hct_puppet(name), *rank = hct_puppet(name);
	hc_page_t pg, others[3];
	hc_page_t got[1];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = sh->keys + 1, .nkeys = 1 };

	/* The three other pages are taken, so the next store lands in pg. */
	ck_assert_int_eq(hc_page_alloc(pool, 3, 1, others), 3);
	pg = keyed_quarantine();
	hct_puppet_do(sw, step_arm_stop, HC_PT_sweep_seen);
	hct_puppet_send(sw, step_recover, 0);
	hct_puppet_stopped(sw);

	ck_assert_ok(hc_pool_recover(pool, NULL, 0)); /* another sweep: unkeyed, FREE */
	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(pg), NULL, NULL, NULL), HC_PAGE_FREE);
	hct_puppet_do(rank, step_store_key1, 0);
	ck_assert_int_eq(sh->ret, 1);
	ck_assert_int_eq(hc_lookup(pool, &rq, got), 1);
	ck_assert_uint_eq(HC_PAGE_ID(got[0]), HC_PAGE_ID(pg));

	hct_puppet_cont(sw);
	hct_puppet_wait(sw);
	ck_assert_int_eq(hc_lookup(pool, &rq, got), 1);
	hct_puppet_end(sw);
	hct_puppet_end(rank);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(hct_fill_commit_all(pool, others[i]), 1);
	ck_assert_int_eq(hc_page_free(pool, others, 3), 3);
	quiet_check();
}
END_TEST

static void step_alloc_ready(hc_pool *p, long arg)
{
	(void)arg;
	ck_assert_int_eq(hc_page_alloc(p, 1, 1, &sh->page), 1);
	ck_assert_int_eq(hct_fill_commit_all(p, sh->page), 1);
}

static void step_free(hc_pool *p, long arg)
{
	(void)arg;
	sh->ret = hc_page_free(p, &sh->page, 1);
}

static void step_leave(hc_pool *p, long arg)
{
	(void)arg;
	sh->ret = hc_engine_leave(p);
}

/*
 * A rank frees a READY page it allocated without a key and dies with the
 * page FREEING, before it read the holds.  Recovery puts the page back
 * READY with its owner, the dead slot, and must go on to free it.  Before
 * the fix it stayed READY, keyless, owned by nobody alive: lost until the
 * pool was cleared.  (Found by the explorer, in anon_free_vs_pin.)
 */
START_TEST(freer_dies_freeing_its_own_page)
{
	struct hct_puppet *r0 = hct_puppet(name);
	struct hc_recovery_report rep;

	hct_puppet_do(r0, step_alloc_ready, 0);
	hct_puppet_do(r0, step_arm_stop, HC_PT_retire_freeing);
	hct_puppet_send(r0, step_free, 0);
	hct_puppet_stopped(r0);
	hct_puppet_kill(r0);

	ck_assert_ok(hc_pool_recover(pool, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.reclaimed, 1);
	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(sh->page), NULL, NULL, NULL), HC_PAGE_FREE);
	hct_puppet_end(r0);
	quiet_check();
}
END_TEST

/*
 * The last rank of an engine leaves it while a ticket of the engine is
 * open, and dies in the middle.  The engine's tickets must end all the
 * same.  Before the fix the membership went first: the recoverer saw a rank
 * of no engine, and the ticket stayed OPEN, its pages held, for an engine
 * that was gone.  (Found by the explorer, in ticket_join_vs_expiry.)
 */
START_TEST(last_rank_dies_leaving)
{
	struct hct_puppet *r0 = hct_puppet(name);

	hct_puppet_do(r0, step_join, 0);
	hct_puppet_do(r0, step_ticket_reserve, 0);
	hct_puppet_do(r0, step_arm_stop, HC_PT_engine_left);
	hct_puppet_send(r0, step_leave, 0);
	hct_puppet_stopped(r0);
	hct_puppet_kill(r0);
	hct_puppet_end(r0);
	quiet_check();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("races");
	TCase *tc = tcase_create("stopped at a point");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, recovery_vs_the_last_commit);
	tcase_add_test(tc, abort_vs_the_last_commit);
	tcase_add_test(tc, sweep_vs_the_next_life);
	tcase_add_test(tc, freer_dies_freeing_its_own_page);
	tcase_add_test(tc, last_rank_dies_leaving);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
