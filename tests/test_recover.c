/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_recover.c - a rank dies at each hard moment of the new structures,
 * put there on purpose: holding an index stripe mid-insert, mid-build and
 * mid-drop of a ticket, mid-retirement of a page, and with pins, host
 * locks and keyed reservations.  Recovery must undo exactly what it held.
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

struct shared {
	hc_key_t keys[8];
	hc_page_t pages[8];
	int ret;
	int slot;
};
static struct shared *sh;

static void setup(void)
{
	name = hct_name();
	pool = hct_create_attach(name, 32, 20, 8);
	sh = hct_shared(sizeof(*sh));
}

static void teardown(void)
{
	if (pool) {
		ck_assert_int_eq(hc_pool_check(pool, 0, hct_print_violation, NULL), 0);
		hc_pool_detach(pool);
	}
	munmap(sh, sizeof(*sh));
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}

static void run_then_die(hc_pool *p, void *arg)
{
	void (*fn)(hc_pool *) = (void (*)(hc_pool *))arg;

	sh->slot = p->slot;
	fn(p);
	kill(getpid(), SIGKILL);
}

/* Run fn in a child that attaches, then dies by SIGKILL inside fn's state. */
static void die_in_child(void (*fn)(hc_pool *))
{
	int st = hct_in_child(name, run_then_die, (void *)fn);

	ck_assert_msg(WIFSIGNALED(st), "child status %d", st);
}

static void settle(void)
{
	struct hc_recovery_report rep;

	ck_assert_ok(hc_pool_recover(pool, &rep, sizeof(rep)));
	usleep(40 * 1000); /* past the quarantine grace */
	ck_assert_ok(hc_pool_recover(pool, &rep, sizeof(rep)));
	ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}

static void hold_everything(hc_pool *p)
{
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req),
				    .keys = sh->keys,
				    .nkeys = 3,
				    .flags = HC_LOOKUP_PIN };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = sh->keys + 4, .nkeys = 4 };
	uint8_t skip[4];

	sh->ret = hc_lookup(p, &rq, sh->pages);
	hc_page_lock(p, sh->pages[0]);
	hc_page_lock(p, sh->pages[1]);
	hc_reserve(p, &rr, sh->pages + 4, skip);
}

START_TEST(dead_rank_holds_undone)
{
	struct hc_stats st;

	hct_keys(sh->keys, 8, 41);
	ck_assert_int_eq(hct_store(pool, sh->keys, 4, 0), 4);
	die_in_child(hold_everything);
	ck_assert_int_eq(sh->ret, 3);
	settle();
	st = hct_stats(pool);
	ck_assert_uint_eq(st.pin_count, 0);
	ck_assert_uint_eq(st.lock_count, 0);
	ck_assert_uint_eq(st.pages[HC_PAGE_RESERVED], 0);
	ck_assert_uint_eq(st.pages[HC_PAGE_READY], 4);
	ck_assert_uint_eq(st.keyed, 4);
	ck_assert_uint_ge(hct_counter(pool, HC_CTR_recoveries), 1);
	ck_assert_uint_ge(hct_counter(pool, HC_CTR_quarantines), 4);
	ck_assert_int_eq(hct_hit(pool, sh->keys, 8), 4);
	ck_assert_int_eq(hct_store(pool, sh->keys, 8, 0), 4); /* the dead rank's keys are free to store again */
	ck_assert_int_eq(hc_evict(pool, 32), 8);
}
END_TEST

/* Find a key whose stripe is s. */
static void key_in_stripe(hc_pool *p, unsigned s, hc_key_t out, uint32_t seed)
{
	struct hc__khash kh;

	for (uint32_t i = 0;; i++) {
		hct_keys((hc_key_t *)out, 1, seed + i * 7919);
		hc__key_hash(p, out, &kh);
		if (kh.stripe == s)
			return;
	}
}

/* Die holding a stripe, with a half-made entry (a page keyed in flags but
 * not in the index) and a stale entry (an index entry naming a FREE page). */
static void die_mid_insert(hc_pool *p)
{
	struct hc__khash kh;
	hc_page_t pg;

	hc__key_hash(p, sh->keys[0], &kh);
	hc__index_lock(p, kh.stripe);
	hc_page_alloc(p, 1, 1, &pg);
	for (int k = 0; k < 4; k++)
		atomic_store(&p->pages[HC_PAGE_ID(pg)].key[k], kh.k[k]);
	atomic_store(&p->pages[HC_PAGE_ID(pg)].flags, HC_PF_KEYED);
	hc__key_hash(p, sh->keys[1], &kh);
	hc__index_insert(p, &kh, 30); /* page 30 is FREE */
}

START_TEST(dead_index_writer_stripe_rebuilt)
{
	struct hc__khash kh;

	key_in_stripe(pool, 5, sh->keys[0], 1);
	key_in_stripe(pool, 5, sh->keys[1], 99991);
	key_in_stripe(pool, 5, sh->keys[2], 424243);
	die_in_child(die_mid_insert);
	hc__key_hash(pool, sh->keys[2], &kh);
	ck_assert_uint_eq(kh.stripe, 5);
	/* A writer of stripe 5 gets EOWNERDEAD and rebuilds the stripe first. */
	ck_assert_int_eq(hct_store(pool, sh->keys + 2, 1, 0), 1);
	ck_assert_uint_eq(hct_counter(pool, HC_CTR_index_rebuilds), 1);
	ck_assert_int_eq(hc_pool_check(pool, 0, hct_print_violation, NULL), 0);
	settle();
	ck_assert_int_eq(hct_hit(pool, sh->keys + 2, 1), 1);
	ck_assert_int_eq(hct_hit(pool, sh->keys, 1), 0);
	ck_assert_int_eq(hct_store(pool, sh->keys, 2, 0), 2);
}
END_TEST

static void join_engine(hc_pool *p, uint32_t rank)
{
	struct hc_engine_spec e = { .size = sizeof(struct hc_engine_spec),
				    .engine_id = 6,
				    .tp_size = 2,
				    .tp_rank = rank,
				    .quota_pages = HC_QUOTA_UNLIMITED,
				    .ticket_timeout_ms = 5000 };
	ck_assert_ok(hc_engine_join(p, &e));
}

/* Publish a lookup ticket, then fake a death in the middle of building it. */
static void die_mid_build(hc_pool *p)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "r", .step = 1 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = sh->keys, .nkeys = 4 };
	hc_ticket t = { .size = sizeof(hc_ticket) };
	uint64_t w;

	join_engine(p, 0);
	sh->ret = hc_ticket_lookup(p, &tn, &rq, sh->pages, &t);
	w = atomic_load(&p->tickets[t.index].word);
	atomic_store(&p->tickets[t.index].word, hc__tk_with(w, HC_TK_BUILDING, (unsigned)p->slot));
}

START_TEST(dead_builder_others_rebuild)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "r", .step = 1 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = sh->keys, .nkeys = 4 };
	hc_page_t pages[4];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	struct hc_page_info pi;

	hct_keys(sh->keys, 8, 43);
	ck_assert_int_eq(hct_store(pool, sh->keys, 3, 0), 3);
	die_in_child(die_mid_build);
	ck_assert_int_eq(sh->ret, 3);
	join_engine(pool, 1);
	/* Rank 1 finds BUILDING under a dead owner, which its recovery frees: it builds. */
	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t), 3);
	ck_assert_int_eq(t.first, 1);
	ck_assert_ok(hc_page_info(pool, HC_PAGE_ID(pages[0]), &pi, sizeof(pi)));
	ck_assert_int_eq(pi.pins, 1);
	ck_assert_int_eq(pi.tickets, 1); /* its own ticket, for rank 0, not the dead one's */
	ck_assert_ok(hc_ticket_release(pool, &t));
	ck_assert_int_eq(hc_pool_check(pool, 0, hct_print_violation, NULL), 0);
}
END_TEST

/* Claim the last share, then fake a death before the drop finished. */
static void die_mid_drop(hc_pool *p)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "d", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = sh->keys, .nkeys = 2 };
	hc_ticket t = { .size = sizeof(hc_ticket) };
	uint64_t w;
	uint32_t id;

	join_engine(p, 1);
	sh->ret = hc_ticket_lookup(p, &tn, &rq, sh->pages, &t);
	/* Put the ticket back in DROPPING with its holds, as if we died mid-drop. */
	w = atomic_load(&p->tickets[t.index].word);
	atomic_store(&p->tickets[t.index].word, hc__tk_with(w, HC_TK_DROPPING, (unsigned)p->slot));
	id = HC_PAGE_ID(sh->pages[0]);
	atomic_fetch_or(&hc__tmask_row(p, id)[t.index / 64], UINT64_C(1) << (t.index % 64));
}

START_TEST(dead_dropper_drop_finished)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "d", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = sh->keys, .nkeys = 2 };
	hc_page_t pages[2];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	struct hc_page_info pi;

	hct_keys(sh->keys, 8, 44);
	ck_assert_int_eq(hct_store(pool, sh->keys, 2, 0), 2);
	join_engine(pool, 0);
	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t), 2);
	die_in_child(die_mid_drop);
	ck_assert_int_eq(sh->ret, 2);
	ck_assert_ok(hc_page_info(pool, HC_PAGE_ID(pages[0]), &pi, sizeof(pi)));
	ck_assert_int_eq(pi.tickets, 1);
	settle(); /* recovery of the dead dropper drops again and closes */
	ck_assert_ok(hc_page_info(pool, HC_PAGE_ID(pages[0]), &pi, sizeof(pi)));
	ck_assert_int_eq(pi.tickets, 0);
	ck_assert_int_eq(pi.pins, 1); /* rank 0's own share is untouched */
	ck_assert_ok(hc_ticket_release(pool, &t));
}
END_TEST

/* Die after the evictor's hold check (aux 1) and before it (aux 0). */
static void die_mid_retire(hc_pool *p)
{
	hc_page_t pg[2];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = sh->keys, .nkeys = 2 };

	hc_lookup(p, &rq, pg);
	atomic_store(&p->pages[HC_PAGE_ID(pg[0])].word,
		     hc__w_make(HC_PAGE_FREEING, (unsigned)p->slot, HC_PAGE_GEN(pg[0]), 1));
	atomic_store(&p->pages[HC_PAGE_ID(pg[1])].word,
		     hc__w_make(HC_PAGE_FREEING, (unsigned)p->slot, HC_PAGE_GEN(pg[1]), 0));
}

START_TEST(dead_evictor_finished_or_undone)
{
	struct hc_stats st;

	hct_keys(sh->keys, 8, 45);
	ck_assert_int_eq(hct_store(pool, sh->keys, 2, 0), 2);
	die_in_child(die_mid_retire);
	settle();
	ck_assert_int_eq(hct_hit(pool, sh->keys, 1), 0);     /* aux 1: finished, gone */
	ck_assert_int_eq(hct_hit(pool, sh->keys + 1, 1), 1); /* aux 0: back to READY, findable */
	st = hct_stats(pool);
	ck_assert_uint_eq(st.keyed, 1);
	ck_assert_uint_eq(st.pages[HC_PAGE_FREEING], 0);
}
END_TEST

/* Allocate three pages without a key, fill and commit them (READY, ours),
 * list them for the parent, then wait for it to pin one. */
static void own_three(hc_pool *p)
{
	ck_assert_int_eq(hc_page_alloc(p, 3, 3, sh->pages), 3);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(hct_fill_commit_all(p, sh->pages[i]), 1);
	__atomic_store_n(&sh->ret, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&sh->ret, __ATOMIC_ACQUIRE) != 2)
		usleep(100);
}

/*
 * A rank that dies owns READY pages it allocated without a key: nothing
 * could ever find, evict or free them.  Recovery frees them; one that a
 * live rank has pinned meanwhile is freed when that rank lets go.  Before
 * the fix they stayed READY, owned by a dead slot, until hc_pool_clear.
 */
START_TEST(dead_ranks_unkeyed_pages_reclaimed)
{
	struct hc_recovery_report rep;
	pid_t pid = hct_spawn(name, run_then_die, (void *)own_three);
	int st;

	while (__atomic_load_n(&sh->ret, __ATOMIC_ACQUIRE) != 1)
		usleep(100);
	ck_assert_ok(hc_page_pin(pool, sh->pages[2])); /* a reader of the dead rank's page */
	__atomic_store_n(&sh->ret, 2, __ATOMIC_RELEASE);
	st = hct_wait_child(pid);
	ck_assert(WIFSIGNALED(st));
	ck_assert_ok(hc_pool_recover(pool, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.dead_ranks, 1);
	ck_assert_uint_eq(rep.reclaimed, 2);
	ck_assert_uint_eq(rep.orphaned, 1);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(sh->pages[i]), NULL, NULL, NULL), HC_PAGE_FREE);
	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(sh->pages[2]), NULL, NULL, NULL), HC_PAGE_READY);
	ck_assert_int_eq(hct_verify(pool, sh->pages[2], 1), 0); /* still readable while we hold it */
	ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
	ck_assert_ok(hc_page_unpin(pool, sh->pages[2]));
	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(sh->pages[2]), NULL, NULL, NULL), HC_PAGE_FREE);
	settle();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("recover");
	TCase *tc = tcase_create("recover");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, dead_rank_holds_undone);
	tcase_add_test(tc, dead_index_writer_stripe_rebuilt);
	tcase_add_test(tc, dead_builder_others_rebuild);
	tcase_add_test(tc, dead_dropper_drop_finished);
	tcase_add_test(tc, dead_evictor_finished_or_undone);
	tcase_add_test(tc, dead_ranks_unkeyed_pages_reclaimed);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
