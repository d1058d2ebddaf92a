/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_check.c - the checker has teeth: for each way a pool can be wrong
 * (a leak the review found, a stray write, a hold of nobody), the state is
 * made by hand and hc_pool_check must name it, in the mode that can tell.
 * A clean pool before and after each case checks clean in both modes.
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
	hct_keys(keys, 4, 51);
	hct_store_by_key(pool, keys, 4, 0, kp);
	ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}

static void teardown(void)
{
	hc_pool_detach(pool);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}

/* Both modes, with what each must say (NULL: nothing). */
static void expect(const char *live_has, const char *quiet_has)
{
	struct hct_lines l = { 0 }, q = { 0 };
	int n = hc_pool_check(pool, 0, hct_collect, &l), nq = hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_collect, &q);

	ck_assert_int_ge(n, 0);
	ck_assert_int_ge(nq, n);
	if (live_has)
		ck_assert_msg(n >= 1 && strstr(l.all, live_has), "live check lacks '%s':\n%s", live_has, l.all);
	else
		ck_assert_msg(n == 0, "live check found:\n%s", l.all);
	if (quiet_has)
		ck_assert_msg(strstr(q.all, quiet_has), "quiescent check lacks '%s':\n%s", quiet_has, q.all);
	else
		ck_assert_msg(nq == 0, "quiescent check found:\n%s", q.all);
}

static void clean(void)
{
	expect(NULL, NULL);
}

static struct hc_seg_page *pg(hc_page_t h)
{
	return &pool->pages[HC_PAGE_ID(h)];
}

/* A slot that is not live: a child attached and left. */
static unsigned gone_slot(void)
{
	return (unsigned)pool->slot + 1;
}

static void set_owner(hc_page_t h, unsigned owner)
{
	uint64_t w = atomic_load(&pg(h)->word);

	atomic_store(&pg(h)->word, hc__w_make(hc__w_state(w), owner, hc__w_gen(w), hc__w_aux(w)));
}

/* The states of the review's bugs 1 and 5: a READY page allocated without
 * a key whose owner is gone, and a READY page that lost its key. */
START_TEST(ready_pages_nobody_owns)
{
	hc_page_t a;
	uint32_t f;

	ck_assert_int_eq(hct_in_child(name, hct_nothing, NULL), 0); /* gone_slot() was a rank once */
	ck_assert_int_eq(hc_page_alloc(pool, 1, 3, &a), 1);
	ck_assert_int_eq(hct_fill_commit_all(pool, a), 1);
	clean();
	set_owner(a, gone_slot());
	expect("never reclaimed", "never reclaimed");
	set_owner(a, (unsigned)pool->slot);
	clean();

	/* bug 1 and 2's page: READY, its key flag gone */
	f = atomic_fetch_and(&pg(kp[1])->flags, ~HC_PF_KEYED);
	expect("neither keyed nor allocated without a key", "not keyed");
	atomic_store(&pg(kp[1])->flags, f);
	clean();

	/* an orphan nobody holds was never freed */
	set_owner(a, gone_slot());
	atomic_fetch_or(&pg(a)->flags, HC_PF_ORPHAN);
	expect(NULL, "an orphan");
	ck_assert_ok(hc_page_pin(pool, a));
	clean(); /* held: its last hold frees it */
	ck_assert_ok(hc_page_unpin(pool, a));
	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(a), NULL, NULL, NULL), HC_PAGE_FREE);
	clean();
}
END_TEST

/* Stray writes to a READY page's presence mask and key bytes (the review
 * found the checker blind to both). */
START_TEST(stray_writes_to_a_page_entry)
{
	uint32_t was = atomic_load(&pg(kp[0])->presence);
	uint64_t k3 = atomic_load(&pg(kp[0])->key[3]);

	atomic_store(&pg(kp[0])->presence, 1u << 9);
	expect("names no component", "names no component");
	atomic_store(&pg(kp[0])->presence, was & 1);
	expect("do not match their check", "do not match their check");
	atomic_store(&pg(kp[0])->presence, was);
	clean();

	atomic_store(&pg(kp[0])->key[3], k3 ^ 0x100); /* a word the index's hash never reads */
	expect("do not match their check", "do not match their check");
	atomic_store(&pg(kp[0])->key[3], k3);
	atomic_store(&pg(kp[0])->depth, 99);
	expect("do not match their check", "do not match their check");
	atomic_store(&pg(kp[0])->depth, 0);
	clean();
}
END_TEST

/* A rank slot's mutex and a key index stripe's lock of a kind init never
 * gives, as a damaged pool file has them: glibc takes the kind from the
 * mutex, and 256 (timed, with lock elision) runs TSX instructions, SIGILL
 * on a CPU without them.  Nothing may lock them: check names the slot, an
 * attach claims another, a reservation goes on without the stripe lock. */
START_TEST(mutexes_of_a_scribbled_kind)
{
	pthread_mutex_t *rank = &pool->ranks[gone_slot()].lock, *stripe = &pool->ctl->index_lock[0].m;
	int rank_kind = rank->__data.__kind, stripe_kind = stripe->__data.__kind;
	hc_key_t more[8];
	hc_page_t h[8];
	char want[64];

	rank->__data.__kind = 256;
	for (unsigned i = 0; i < HC_INDEX_STRIPES; i++)
		pool->ctl->index_lock[i].m.__data.__kind = 256;
	snprintf(want, sizeof(want), "rank slot %u: mutex unusable", gone_slot());
	expect(want, want);
	ck_assert_int_eq(hct_in_child(name, hct_nothing, NULL), 0);
	hct_keys(more, 8, 52);
	hct_store_by_key(pool, more, 8, 0, h);
	ck_assert_int_eq(hct_hit(pool, more, 8), 8);
	rank->__data.__kind = rank_kind;
	for (unsigned i = 0; i < HC_INDEX_STRIPES; i++)
		pool->ctl->index_lock[i].m.__data.__kind = stripe_kind;
	clean();
}
END_TEST

START_TEST(index_against_the_page_table)
{
	struct hc__khash kh;
	uint64_t e;

	/* a keyed READY page missing from the index */
	hc__page_khash(pool, HC_PAGE_ID(kp[2]), &kh);
	hc__index_lock(pool, kh.stripe);
	ck_assert_int_eq(hc__index_remove(pool, &kh, HC_PAGE_ID(kp[2])), 1);
	expect(NULL, "not in the index");
	ck_assert_ok(hc__index_insert(pool, &kh, HC_PAGE_ID(kp[2])));
	hc__index_unlock(pool, kh.stripe);
	clean();

	/* a scribbled entry: a page id past the pool */
	e = atomic_exchange(&pool->index[5], (UINT64_C(7) << 32) | 1000);
	expect("out of range", "out of range");
	atomic_store(&pool->index[5], e);
	clean();
}
END_TEST

START_TEST(holds_of_nobody)
{
	_Atomic uint32_t *row = hc__pin_row(pool, HC_PAGE_ID(kp[3]));
	hc_page_t f = HC_PAGE_MAKE(15, 0);

	ck_assert_int_eq(hct_in_child(name, hct_nothing, NULL), 0);
	atomic_store(&row[gone_slot()], 1);
	expect("which is not live", "which is not live");
	atomic_store(&row[gone_slot()], 0);
	clean();
	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(f), NULL, NULL, NULL), HC_PAGE_FREE);
	atomic_store(&hc__pin_row(pool, HC_PAGE_ID(f))[pool->slot], 1);
	expect(NULL, "FREE with 1 pin");
	atomic_store(&hc__pin_row(pool, HC_PAGE_ID(f))[pool->slot], 0);
	clean();

	atomic_store(&pg(kp[3])->word, hc__w_make(6, 0, 1, 0)); /* a state that does not exist */
	expect("invalid state 6", "invalid state 6");
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

/* Ticket records read from shared memory (the review's bugs 4 and 6, and 8's
 * ticket that outlived its engine). */
START_TEST(ticket_records)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "chk", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 2 };
	hc_page_t pages[2];
	struct hc_seg_ticket *r;
	hc_ticket t = { .size = sizeof(hc_ticket) };
	uint64_t w;
	uint32_t e, inc;

	join(pool, 2, 0);
	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t), 2);
	clean(); /* OPEN for rank 1, which is to come */
	r = &pool->tickets[t.index];
	r->n = 5;
	expect("5 pages recorded for 2 keys", "5 pages recorded for 2 keys");
	r->n = 2;
	w = atomic_load(&r->word);
	atomic_store(&r->word, hc__tk_with(w, HC_TK_BUILDING, pool->g.max_ranks + 3));
	expect("past the rank table", "past the rank table");
	atomic_store(&r->word, w);
	clean();

	/* the engine's last member is gone, its ticket still open */
	e = atomic_exchange(&pool->ranks[pool->slot].engine, 0);
	expect(NULL, "which has no live member");
	atomic_store(&pool->ranks[pool->slot].engine, e);
	clean();

	/* two lives of one engine */
	inc = atomic_exchange(&pool->ranks[pool->slot].incarnation, 77);
	expect("was never handed out", "was never handed out");
	atomic_store(&pool->ranks[pool->slot].incarnation, inc);
	ck_assert_ok(hc_ticket_release(pool, &t));
	ck_assert_ok(hc_engine_leave(pool)); /* the engine ends: its ticket is dropped */
	clean();
}
END_TEST

/* The free map and the LRU list, both hints over the page table: a FREE
 * page the map does not show, a summary bit left clear, a live page off
 * the list, a broken link, pages out of stamp order.  Recovery mends what
 * a death leaves (the first three); repair mends damage (the rest). */
START_TEST(free_map_and_lru_list)
{
	const char *lname = hct_name();
	hc_pool *keep = pool, *lp;
	struct hct_spec sp;
	hc_key_t lk[8];
	hc_page_t h[8], f;
	uint32_t id, a, b;
	uint64_t sa;

	hct_spec_init(&sp, lname, 130);
	sp.spec.evict = HC_EVICT_LRU;
	ck_assert_ok(hc_pool_create(&sp.spec));
	pool = lp = hct_attach(lname, 0);
	hct_keys(lk, 8, 52);
	hct_store_by_key(lp, lk, 8, 0, h);
	clean();

	/* the map: a FREE page whose bit a dead claimer took */
	ck_assert_int_eq(hc_page_alloc(lp, 1, 3, &f), 1);
	ck_assert_ok(hc_page_abort(lp, &f, 1));
	id = HC_PAGE_ID(f);
	atomic_fetch_and(&lp->fm.lv[0][id / 64], ~(UINT64_C(1) << (id % 64)));
	expect(NULL, "FREE page(s) it does not show");
	ck_assert_ok(hc_pool_recover(lp, NULL, 0));
	clean();
	/* a summary bit a dead claimer cleared before its second look */
	atomic_store(&lp->fm.lv[1][0], 0);
	expect(NULL, "its summary bit is clear");
	ck_assert_ok(hc_pool_recover(lp, NULL, 0));
	clean();

	/* the quarantine map: a quarantined page it does not show */
	ck_assert_int_eq(hc_page_alloc(lp, 1, 3, &f), 1);
	atomic_fetch_or(&lp->pages[HC_PAGE_ID(f)].flags, HC_PF_SHARED); /* as a co-writer would */
	ck_assert_int_eq(hc_page_abort(lp, &f, 1), 1);
	clean();
	id = HC_PAGE_ID(f);
	atomic_fetch_and(&lp->qm.lv[0][id / 64], ~(UINT64_C(1) << (id % 64)));
	expect(NULL, "QUARANTINE page(s) it does not show");
	ck_assert_ok(hc_pool_recover(lp, NULL, 0));
	clean();

	/* the list: a READY keyed page off it is never evicted */
	hc__lru_lock(lp);
	hc__lru_drop(lp, HC_PAGE_ID(h[3]));
	hc__lru_unlock(lp);
	expect(NULL, "not on the LRU list");
	ck_assert_ok(hc_pool_recover(lp, NULL, 0));
	clean();
	/* a scribbled back link, then two pages' stamps swapped */
	id = HC_PAGE_ID(h[5]);
	a = atomic_exchange(&lp->lru[id].prev, 7777);
	expect("back link", "back link");
	ck_assert_int_eq(hc_pool_repair(lp, 0, NULL, 0, NULL, NULL), 0);
	clean();
	(void)a;
	a = HC_PAGE_ID(h[0]);
	b = HC_PAGE_ID(h[7]);
	sa = atomic_exchange(&lp->pages[a].stamp, atomic_load(&lp->pages[b].stamp));
	atomic_store(&lp->pages[b].stamp, sa);
	expect("out of order", "out of order");
	ck_assert_int_eq(hc_pool_repair(lp, 0, NULL, 0, NULL, NULL), 0);
	clean();

	/* repair's orphan (an owner gone without recovery, a live hold) goes
	 * on the list as recovery's do */
	{
		hc_page_t orph;
		struct hc_repair_report rr;

		ck_assert_int_eq(hct_in_child(lname, hct_nothing, NULL), 0); /* gone_slot() was a rank once */
		ck_assert_int_eq(hc_page_alloc(lp, 1, 3, &orph), 1);
		ck_assert_int_eq(hct_fill_commit_all(lp, orph), 1);
		ck_assert_ok(hc_page_pin(lp, orph));
		set_owner(orph, gone_slot());
		/* a live repair: its census of the list does not look for it */
		ck_assert_int_eq(hc_pool_repair(lp, 0, &rr, sizeof(rr), NULL, NULL), 0);
		ck_assert(atomic_load(&pg(orph)->flags) & HC_PF_ORPHAN);
		clean();
		ck_assert_ok(hc_page_unpin(lp, orph)); /* the last hold frees it */
		clean();
	}

	pool = keep;
	hc_pool_detach(lp);
	hc_pool_destroy(lname, NULL, HC_DESTROY_FORCE);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("check");
	TCase *tc = tcase_create("teeth");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, ready_pages_nobody_owns);
	tcase_add_test(tc, stray_writes_to_a_page_entry);
	tcase_add_test(tc, index_against_the_page_table);
	tcase_add_test(tc, mutexes_of_a_scribbled_kind);
	tcase_add_test(tc, holds_of_nobody);
	tcase_add_test(tc, ticket_records);
	tcase_add_test(tc, free_map_and_lru_list);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
