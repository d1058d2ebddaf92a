/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tickets.c - engines, tickets for lookup and reservation, quotas.
 * The test process is TP rank 0 of an engine; forked children attach on
 * their own and play the other ranks.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hct.h"

#define NK 8

static const char *name;
static hc_pool *pool;

/* What a child rank saw, for the parent to compare. */
struct seen {
	int ret;
	int err_has; /* 1 if hc_last_error() had the expected text */
	hc_page_t pages[NK];
	uint8_t skip[NK];
	hc_key_t keys[NK];
	uint32_t timeout_ms; /* for puppets' joins */
};
static struct seen *shared;

static void setup(void)
{
	name = hct_name();
	pool = hct_create_attach(name, 32, 50, 8);
	shared = hct_shared(sizeof(*shared));
}

static void teardown(void)
{
	if (pool) {
		ck_assert_int_eq(hc_pool_check(pool, 0, NULL, NULL), 0);
		hc_pool_detach(pool);
	}
	munmap(shared, sizeof(*shared));
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}

static void join(hc_pool *p, uint32_t engine, uint32_t tp, uint32_t rank, uint32_t timeout_ms)
{
	struct hc_engine_spec e = { .size = sizeof(struct hc_engine_spec),
				    .engine_id = engine,
				    .tp_size = tp,
				    .tp_rank = rank,
				    .quota_pages = HC_QUOTA_UNLIMITED,
				    .ticket_timeout_ms = timeout_ms };
	ck_assert_ok(hc_engine_join(p, &e));
}

static int in_child(void (*fn)(hc_pool *, void *), void *arg)
{
	return hct_in_child(name, fn, arg);
}

struct lk {
	uint32_t engine, tp, rank, timeout_ms, n, step;
	const char *req;
	int release;
	int reserve;
	const char *expect_err;
	int fill_group; /* reserve: fill and commit this shard (bit), 0 none */
};

static void child_lookup(hc_pool *p, void *arg)
{
	struct lk *a = arg;
	struct hc_engine_spec e = { .size = sizeof(struct hc_engine_spec),
				    .engine_id = a->engine,
				    .tp_size = a->tp,
				    .tp_rank = a->rank,
				    .quota_pages = HC_QUOTA_UNLIMITED,
				    .ticket_timeout_ms = a->timeout_ms };
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = a->req, .step = a->step };
	hc_ticket t = { .size = sizeof(hc_ticket) };

	if (hc_engine_join(p, &e) < 0)
		_exit(101);
	if (a->reserve) {
		struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req),
					     .keys = shared->keys,
					     .nkeys = a->n };
		shared->ret = hc_ticket_reserve(p, &tn, &rr, shared->pages, shared->skip, &t);
	} else {
		struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = a->n };
		shared->ret = hc_ticket_lookup(p, &tn, &rq, shared->pages, &t);
	}
	shared->err_has = a->expect_err && strstr(hc_last_error(), a->expect_err) != NULL;
	if (shared->ret >= 0 && a->fill_group)
		for (unsigned i = 0; i < a->n; i++)
			if (!shared->skip[i]) {
				hct_fill(p, shared->pages[i], (uint32_t)a->fill_group);
				hc_page_commit(p, shared->pages[i], (uint32_t)a->fill_group);
			}
	if (shared->ret >= 0 && a->release && hc_ticket_release(p, &t) < 0)
		_exit(102);
}

START_TEST(lookup_same_answer_despite_changes)
{
	hc_page_t pages[NK];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "req-1", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = NK };
	struct lk a = { .engine = 7, .tp = 2, .rank = 1, .n = NK, .req = "req-1", .release = 1 };
	struct hc_page_info pi;

	hct_keys(shared->keys, NK, 11);
	ck_assert_int_eq(hct_store(pool, shared->keys, 5, 0), 5);
	join(pool, 7, 2, 0, 0);
	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t), 5);
	ck_assert_int_eq(t.first, 1);
	/* The pool changes before rank 1 arrives: more keys, and an eviction try. */
	ck_assert_int_eq(hct_store(pool, shared->keys + 5, 3, 5), 3);
	ck_assert_int_eq(hct_hit(pool, shared->keys, NK), NK);
	ck_assert_ok(hc_page_info(pool, HC_PAGE_ID(pages[0]), &pi, sizeof(pi)));
	ck_assert_int_eq(pi.tickets, 1); /* the ticket holds it for rank 1 */
	ck_assert_int_eq(pi.pins, 1);
	ck_assert_int_eq(in_child(child_lookup, &a), 0);
	ck_assert_int_eq(shared->ret, 5);
	ck_assert_mem_eq(shared->pages, pages, 5 * sizeof(hc_page_t));
	ck_assert_uint_eq(shared->pages[5], HC_PAGE_NONE);
	/* Every share claimed: the ticket let go; rank 1 released its own. */
	ck_assert_ok(hc_page_info(pool, HC_PAGE_ID(pages[0]), &pi, sizeof(pi)));
	ck_assert_int_eq(pi.tickets, 0);
	ck_assert_int_eq(pi.pins, 1);
	ck_assert_ok(hc_ticket_release(pool, &t));
	ck_assert_err(hc_ticket_release(pool, &t), EALREADY);
	ck_assert_ok(hc_page_info(pool, HC_PAGE_ID(pages[0]), &pi, sizeof(pi)));
	ck_assert_int_eq(pi.pins, 0);
	/* A rank that comes again with the name gets a clear error. */
	ck_assert_err(hc_ticket_lookup(pool, &tn, &rq, pages, &t), EALREADY);
	ck_assert_msg_has("already claimed");
	{
		struct hc_stats st = hct_stats(pool);
		ck_assert_uint_eq(hct_counter(pool, HC_CTR_tickets_opened), 1);
		ck_assert_uint_eq(hct_counter(pool, HC_CTR_tickets_joined), 1);
		ck_assert_uint_eq(st.open_tickets, 0);
	}
}
END_TEST

/*
 * An evictor stopped in its check (FREEING, aux 0) on a page an OPEN lookup
 * ticket holds: a transient the check allows while others run (the freer
 * will see the hold and put the page back), as it does for pins, and
 * reports when the pool is said to be quiescent, or once the freer has
 * checked (aux 1: it saw no hold, which a held page cannot be).
 */
static void count_report(void *arg, const char *line)
{
	(void)line;
	++*(int *)arg;
}

START_TEST(ticket_page_under_a_stopped_freer)
{
	hc_page_t pages[NK];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "req-f", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = NK };
	_Atomic uint64_t *word;
	uint64_t w;
	int lines = 0;

	hct_keys(shared->keys, NK, 12);
	ck_assert_int_eq(hct_store(pool, shared->keys, 3, 0), 3);
	join(pool, 7, 2, 0, 0);
	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t), 3);
	word = &pool->pages[HC_PAGE_ID(pages[1])].word;
	w = atomic_load(word);
	atomic_store(word, hc__w_make(HC_PAGE_FREEING, (unsigned)pool->slot, hc__w_gen(w), 0));
	ck_assert_int_eq(hc_pool_check(pool, 0, count_report, &lines), 0);
	ck_assert_int_gt(hc_pool_check(pool, HC_CHECK_QUIESCENT, count_report, &lines), 0);
	atomic_store(word, hc__w_make(HC_PAGE_FREEING, (unsigned)pool->slot, hc__w_gen(w), 1));
	lines = 0;
	ck_assert_int_eq(hc_pool_check(pool, 0, count_report, &lines), 1);
	atomic_store(word, w); /* the freer backs off */
	ck_assert_int_eq(hc_pool_check(pool, 0, NULL, NULL), 0);
	ck_assert_ok(hc_ticket_release(pool, &t));
}
END_TEST

START_TEST(same_name_other_keys)
{
	hc_page_t pages[NK];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "req-2", .step = 3 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = 4 };
	struct lk a = { .engine = 7,
			.tp = 2,
			.rank = 1,
			.n = 4,
			.step = 3,
			.req = "req-2",
			.release = 1,
			.expect_err = "other keys" };

	hct_keys(shared->keys, NK, 12);
	ck_assert_int_eq(hct_store(pool, shared->keys, 4, 0), 4);
	join(pool, 7, 2, 0, 0);
	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t), 4);
	shared->keys[2][0] ^= 1;
	ck_assert_int_eq(in_child(child_lookup, &a), 0);
	ck_assert_int_eq(shared->ret, -EINVAL);
	ck_assert_int_eq(shared->err_has, 1);
	/* Another step is another ticket: fine, with a shorter hit. */
	a.step = 4;
	a.expect_err = NULL;
	ck_assert_int_eq(in_child(child_lookup, &a), 0);
	ck_assert_int_eq(shared->ret, 2);
	ck_assert_ok(hc_ticket_release(pool, &t));
}
END_TEST

START_TEST(latecomer_after_timeout)
{
	hc_page_t pages[NK];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "req-3", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = 3 };
	struct lk a = { .engine = 9,
			.tp = 2,
			.rank = 1,
			.timeout_ms = 100,
			.n = 3,
			.req = "req-3",
			.expect_err = "expired" };
	struct hc_page_info pi;

	hct_keys(shared->keys, NK, 13);
	ck_assert_int_eq(hct_store(pool, shared->keys, 3, 0), 3);
	join(pool, 9, 2, 0, 100);
	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t), 3);
	usleep(250 * 1000);
	ck_assert_int_eq(in_child(child_lookup, &a), 0);
	ck_assert_int_eq(shared->ret, -ESTALE);
	ck_assert_int_eq(shared->err_has, 1);
	/* Only the unclaimed share expired: rank 0 still holds its own. */
	ck_assert_ok(hc_page_info(pool, HC_PAGE_ID(pages[0]), &pi, sizeof(pi)));
	ck_assert_int_eq(pi.tickets, 0);
	ck_assert_int_eq(pi.pins, 1);
	ck_assert_ok(hc_ticket_release(pool, &t));
	ck_assert_uint_eq(hct_counter(pool, HC_CTR_tickets_expired), 1);
}
END_TEST

static void die_after_lookup(hc_pool *p, void *arg)
{
	child_lookup(p, arg);
	kill(getpid(), SIGKILL);
}

/* The builder publishes and dies: the other rank, a member of the engine
 * all along, still gets its pages. */
START_TEST(builder_dies_after_publishing)
{
	hc_page_t pages[NK];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "req-4", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = 4 };
	struct lk a = { .engine = 5, .tp = 2, .rank = 0, .n = 4, .req = "req-4" };
	struct hc_page_info pi;
	int st;

	hct_keys(shared->keys, NK, 14);
	ck_assert_int_eq(hct_store(pool, shared->keys, 4, 0), 4);
	join(pool, 5, 2, 1, 0);
	st = in_child(die_after_lookup, &a);
	ck_assert(WIFSIGNALED(st));
	ck_assert_int_eq(shared->ret, 4);
	ck_assert_ok(hc_pool_recover(pool, NULL, 0)); /* its pins go; the engine lives on in us */
	ck_assert_int_eq(hc_evict(pool, 32), 0);      /* the ticket still holds all 4 */
	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t), 4);
	ck_assert_int_eq(t.first, 0);
	ck_assert_mem_eq(shared->pages, pages, 4 * sizeof(hc_page_t));
	ck_assert_ok(hc_page_info(pool, HC_PAGE_ID(pages[3]), &pi, sizeof(pi)));
	ck_assert_int_eq(pi.pins, 1); /* ours; the dead rank's went with it */
	ck_assert_int_eq(pi.tickets, 0);
	ck_assert_int_eq(hct_verify(pool, pages[3], 1), 0);
	ck_assert_ok(hc_ticket_release(pool, &t));
	ck_assert_int_eq(hc_evict(pool, 32), 4);
}
END_TEST

/* TP write path: same pages for both ranks, READY when both shards are in. */
START_TEST(reserve_by_key_two_ranks)
{
	hc_page_t pages[NK];
	uint8_t skip[NK];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "req-5", .step = 1 };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = shared->keys, .nkeys = 4 };
	struct lk a = { .engine = 3,
			.tp = 2,
			.rank = 1,
			.n = 4,
			.step = 1,
			.req = "req-5",
			.reserve = 1,
			.release = 1,
			.fill_group = 2 };

	hct_keys(shared->keys, NK, 15);
	ck_assert_int_eq(hct_store(pool, shared->keys, 1, 0), 1); /* key 0 is READY already */
	join(pool, 3, 2, 0, 0);
	ck_assert_int_eq(hc_ticket_reserve(pool, &tn, &rr, pages, skip, &t), 3);
	ck_assert_int_eq(skip[0], HC_SKIP_READY);
	ck_assert_uint_eq(pages[0], HC_PAGE_NONE);
	for (int i = 1; i < 4; i++) {
		ck_assert_int_eq(skip[i], 0);
		hct_fill(pool, pages[i], 1);
		hct_fill(pool, pages[i], HC_SHARD_REPLICATED);
		ck_assert_int_eq(hc_page_commit(pool, pages[i], 1 | HC_SHARD_REPLICATED), 0);
	}
	ck_assert_int_eq(hct_hit(pool, shared->keys, 4), 1); /* rank 1's shard is missing */
	ck_assert_int_eq(in_child(child_lookup, &a), 0);
	ck_assert_int_eq(shared->ret, 3);
	ck_assert_mem_eq(shared->pages, pages, 4 * sizeof(hc_page_t));
	ck_assert_mem_eq(shared->skip, skip, 4);
	ck_assert_int_eq(hct_hit(pool, shared->keys, 4), 4);
	for (int i = 1; i < 4; i++) {
		ck_assert_int_eq(hct_verify(pool, pages[i], 1), 0);
		ck_assert_int_eq(hct_verify(pool, pages[i], 2), 0);
		ck_assert_int_eq(hct_verify(pool, pages[i], HC_SHARD_REPLICATED), 0);
	}
	ck_assert_ok(hc_ticket_release(pool, &t));
}
END_TEST

/* Two engines storing the same keys end with one page each and no copies. */
START_TEST(two_engines_one_page)
{
	hc_page_t pages[NK];
	uint8_t skip[NK];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "req-6", .step = 0 };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = shared->keys, .nkeys = 4 };
	struct lk a = { .engine = 4, .tp = 1, .rank = 0, .n = 4, .req = "req-6", .reserve = 1, .release = 1 };
	struct hc_stats st;

	hct_keys(shared->keys, NK, 16);
	join(pool, 3, 2, 0, 0);
	ck_assert_int_eq(hc_ticket_reserve(pool, &tn, &rr, pages, skip, &t), 4);
	ck_assert_int_eq(in_child(child_lookup, &a), 0); /* engine 4, TP 1, same name */
	ck_assert_int_eq(shared->ret, 0);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(shared->skip[i], HC_SKIP_BUSY);
	st = hct_stats(pool);
	ck_assert_uint_eq(hct_counter(pool, HC_CTR_reserves), 4);
	ck_assert_uint_eq(hct_counter(pool, HC_CTR_reserve_skips), 4);
	ck_assert_uint_eq(st.pages[HC_PAGE_RESERVED], 4);
	ck_assert_ok(hc_ticket_release(pool, &t));
	ck_assert_int_eq(hc_page_abort(pool, pages, 4), 4); /* our rank 1 never comes */
}
END_TEST

START_TEST(engine_join_errors)
{
	struct hc_engine_spec e = { .size = sizeof(struct hc_engine_spec),
				    .engine_id = 1,
				    .tp_size = 2,
				    .tp_rank = 0,
				    .quota_pages = 10 };
	struct lk a = { .engine = 1, .tp = 4, .rank = 1, .n = 1, .req = "x" };
	hc_page_t pages[1];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "x" };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = 1 };

	e.engine_id = HC_ENGINE_ID_MAX + 1;
	ck_assert_err(hc_engine_join(pool, &e), EINVAL);
	ck_assert_msg_has("engine id");
	e.engine_id = 1;
	e.tp_size = 0;
	ck_assert_err(hc_engine_join(pool, &e), EINVAL);
	e.tp_size = HC_TP_MAX + 1;
	ck_assert_err(hc_engine_join(pool, &e), EINVAL);
	ck_assert_msg_has("tp_size");
	e.tp_size = 2;
	e.tp_rank = 2;
	ck_assert_err(hc_engine_join(pool, &e), EINVAL);
	ck_assert_msg_has("tp_rank");
	e.tp_rank = 0;
	e.quota_pages = 0;
	ck_assert_err(hc_engine_join(pool, &e), EINVAL);
	ck_assert_msg_has("quota of 0");
	hct_keys(shared->keys, 1, 1);
	ck_assert_err(hc_ticket_lookup(pool, &tn, &rq, pages, &t), EINVAL);
	ck_assert_msg_has("hc_engine_join");
	e.quota_pages = 10;
	ck_assert_ok(hc_engine_join(pool, &e));
	ck_assert_err(hc_engine_join(pool, &e), EALREADY);
	/* Another rank says TP 4: refused.  Same TP rank twice: refused. */
	ck_assert_int_eq(in_child(child_lookup, &a), 101 << 8);
	a.tp = 2;
	a.rank = 0;
	ck_assert_int_eq(in_child(child_lookup, &a), 101 << 8);
	ck_assert_ok(hc_engine_leave(pool));
	ck_assert_err(hc_engine_leave(pool), ENOENT);
}
END_TEST

START_TEST(ticket_name_errors)
{
	hc_key_t many[NK];
	hc_page_t pages[NK];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	char longid[HC_REQUEST_ID_MAX + 2];
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "" };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = many, .nkeys = 2 };

	hct_keys(many, NK, 17);
	join(pool, 2, 2, 0, 0);
	ck_assert_err(hc_ticket_lookup(pool, &tn, &rq, pages, &t), EINVAL);
	ck_assert_msg_has("empty");
	memset(longid, 'a', sizeof(longid) - 1);
	longid[sizeof(longid) - 1] = 0;
	tn.request_id = longid;
	ck_assert_err(hc_ticket_lookup(pool, &tn, &rq, pages, &t), EINVAL);
	ck_assert_msg_has("too long");
	tn.request_id = NULL;
	ck_assert_err(hc_ticket_lookup(pool, &tn, &rq, pages, &t), EINVAL);
	ck_assert_err(hc_ticket_lookup(pool, NULL, &rq, pages, &t), EINVAL);
	tn.request_id = "ok";
	rq.nkeys = 0;
	ck_assert_err(hc_ticket_lookup(pool, &tn, &rq, pages, &t), EINVAL);
	rq.nkeys = 2;
	ck_assert_err(hc_ticket_lookup(pool, &tn, &rq, pages, NULL), EINVAL);
	ck_assert_err(hc_ticket_release(pool, NULL), EINVAL);
	memset(&t, 0, sizeof(t));
	t.size = sizeof(t);
	ck_assert_err(hc_ticket_release(pool, &t), EINVAL);
	ck_assert_msg_has("never filled");
}
END_TEST

START_TEST(too_many_keys_for_a_ticket)
{
	struct hct_spec s;
	const char *n2 = hct_name();
	hc_pool *p2;
	hc_key_t keys[5];
	hc_page_t pages[5];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "big" };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 5 };
	struct hc_engine_spec e = { .size = sizeof(struct hc_engine_spec),
				    .engine_id = 1,
				    .tp_size = 1,
				    .quota_pages = HC_QUOTA_UNLIMITED };

	hct_spec_init(&s, n2, 16);
	s.spec.ticket_keys = 4;
	ck_assert_ok(hc_pool_create(&s.spec));
	p2 = hct_attach(n2, 0);
	ck_assert_ok(hc_engine_join(p2, &e));
	hct_keys(keys, 5, 18);
	ck_assert_err(hc_ticket_lookup(p2, &tn, &rq, pages, &t), E2BIG);
	ck_assert_msg_has("ticket_keys");
	rq.nkeys = 4;
	ck_assert_int_eq(hc_ticket_lookup(p2, &tn, &rq, pages, &t), 0);
	ck_assert_ok(hc_ticket_release(p2, &t));
	hc_pool_detach(p2);
	hc_pool_destroy(n2, NULL, 0);
}
END_TEST

START_TEST(quota_limits_holds)
{
	hc_key_t keys[6];
	hc_page_t pages[6], more[4];
	struct hc_engine_spec e = { .size = sizeof(struct hc_engine_spec),
				    .engine_id = 1,
				    .tp_size = 1,
				    .quota_pages = 3 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req),
				    .keys = keys,
				    .nkeys = 6,
				    .flags = HC_LOOKUP_PIN };
	struct hc_rank_info ri;

	hct_keys(keys, 6, 19);
	ck_assert_int_eq(hct_store(pool, keys, 6, 0), 6);
	ck_assert_ok(hc_engine_join(pool, &e));
	ck_assert_err(hc_lookup(pool, &rq, pages), EDQUOT);
	ck_assert_msg_has("quota of 3");
	rq.nkeys = 3;
	ck_assert_int_eq(hc_lookup(pool, &rq, pages), 3);
	ck_assert_ok(hc_pool_rank(pool, (unsigned)pool->slot, &ri, sizeof(ri)));
	ck_assert_uint_eq(ri.held, 3);
	ck_assert_uint_eq(ri.quota, 3);
	/* A page counts once, however it is held. */
	ck_assert_ok(hc_page_lock(pool, pages[0]));
	ck_assert_ok(hc_page_pin(pool, pages[0]));
	ck_assert_ok(hc_pool_rank(pool, (unsigned)pool->slot, &ri, sizeof(ri)));
	ck_assert_uint_eq(ri.held, 3);
	ck_assert_err(hc_page_alloc(pool, 1, 1, more), EDQUOT);
	{
		struct hc_lookup_req one = { .size = sizeof(struct hc_lookup_req),
					     .keys = keys + 3,
					     .nkeys = 1,
					     .flags = HC_LOOKUP_PIN };
		ck_assert_err(hc_lookup(pool, &one, more), EDQUOT);
	}
	ck_assert_ok(hc_page_unpin(pool, pages[0]));
	ck_assert_ok(hc_page_unlock(pool, pages[0]));
	for (int i = 0; i < 3; i++)
		ck_assert_ok(hc_page_unpin(pool, pages[i]));
	ck_assert_int_eq(hc_page_alloc(pool, 3, 1, more), 3);
	ck_assert_err(hc_page_alloc(pool, 1, 1, more + 3), EDQUOT);
	ck_assert_int_eq(hc_page_commit(pool, more[0], hc_page_needed(pool, 1)), 1);
	ck_assert_int_eq(hc_page_alloc(pool, 1, 1, more + 3), 1); /* a committed page no longer counts */
	ck_assert_int_eq(hc_page_abort(pool, more + 1, 3), 3);
	ck_assert_ok(hc_pool_rank(pool, (unsigned)pool->slot, &ri, sizeof(ri)));
	ck_assert_uint_eq(ri.held, 0);
}
END_TEST

/* Outside an engine nothing counts against a quota; a join counts what
 * the rank holds then, and a leave forgets it. */
START_TEST(join_counts_what_is_held)
{
	hc_key_t keys[4];
	hc_page_t pages[4], resv;
	struct hc_engine_spec e = { .size = sizeof(struct hc_engine_spec),
				    .engine_id = 2,
				    .tp_size = 1,
				    .quota_pages = 4 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req),
				    .keys = keys,
				    .nkeys = 2,
				    .flags = HC_LOOKUP_PIN };
	struct hc_rank_info ri;

	hct_keys(keys, 4, 23);
	ck_assert_int_eq(hct_store(pool, keys, 4, 0), 4);
	ck_assert_int_eq(hc_lookup(pool, &rq, pages), 2);
	ck_assert_ok(hc_page_pin(pool, pages[0])); /* a page counts once */
	ck_assert_int_eq(hc_page_alloc(pool, 1, 1, &resv), 1);
	ck_assert_ok(hc_pool_rank(pool, (unsigned)pool->slot, &ri, sizeof(ri)));
	ck_assert_uint_eq(ri.held, 0);
	ck_assert_ok(hc_engine_join(pool, &e));
	ck_assert_ok(hc_pool_rank(pool, (unsigned)pool->slot, &ri, sizeof(ri)));
	ck_assert_uint_eq(ri.held, 3); /* two pinned, one reserved */
	rq.keys = keys + 2;
	ck_assert_err(hc_lookup(pool, &rq, pages + 2), EDQUOT); /* 3 + 2 > 4 */
	rq.nkeys = 1;
	ck_assert_int_eq(hc_lookup(pool, &rq, pages + 2), 1);
	ck_assert_int_eq(hc_page_commit(pool, resv, hc_page_needed(pool, 1)), 1);
	ck_assert_ok(hc_page_unpin(pool, pages[0]));
	ck_assert_ok(hc_pool_rank(pool, (unsigned)pool->slot, &ri, sizeof(ri)));
	ck_assert_uint_eq(ri.held, 3); /* pages[0] is still pinned once */
	ck_assert_ok(hc_engine_leave(pool));
	ck_assert_ok(hc_pool_rank(pool, (unsigned)pool->slot, &ri, sizeof(ri)));
	ck_assert_uint_eq(ri.held, 0);
	for (int i = 0; i < 3; i++)
		ck_assert_ok(hc_page_unpin(pool, pages[i]));
	ck_assert_ok(hc_pool_rank(pool, (unsigned)pool->slot, &ri, sizeof(ri)));
	ck_assert_uint_eq(ri.held, 0);
	ck_assert_uint_eq(ri.pins, 0);
}
END_TEST

/* The first rank fails: every rank gets the same failure, not another answer. */
START_TEST(failure_is_shared)
{
	hc_page_t pages[NK];
	hc_ticket t = { .size = sizeof(t), .index = 77 };
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "req-f", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = 3 };
	struct hc_engine_spec e = { .size = sizeof(struct hc_engine_spec),
				    .engine_id = 12,
				    .tp_size = 2,
				    .tp_rank = 0,
				    .quota_pages = 2 };
	struct lk a = { .engine = 12, .tp = 2, .rank = 1, .n = 3, .req = "req-f", .expect_err = "first rank" };

	hct_keys(shared->keys, NK, 25);
	ck_assert_int_eq(hct_store(pool, shared->keys, 3, 0), 3);
	ck_assert_ok(hc_engine_join(pool, &e));
	ck_assert_err(hc_ticket_lookup(pool, &tn, &rq, pages, &t), EDQUOT);
	ck_assert_uint_eq(t.index, 77); /* a failed call leaves the handle alone */
	/* Rank 1 has room for 3 pins (quota is per rank) but gets EDQUOT too:
	 * the engine's ranks agree. */
	ck_assert_int_eq(in_child(child_lookup, &a), 101 << 8); /* its join asks another quota */
	{
		pid_t pid = fork();
		int st;
		if (pid == 0) {
			hc_pool *p;
			struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts),
						    .flags = HC_ATTACH_NO_POPULATE };
			struct hc_engine_spec e1 = e;
			hc_ticket t1 = { .size = sizeof(hc_ticket) };
			e1.tp_rank = 1;
			if (hc_pool_attach(name, &o, &p) < 0 || hc_engine_join(p, &e1) < 0)
				_exit(100);
			shared->ret = hc_ticket_lookup(p, &tn, &rq, shared->pages, &t1);
			shared->err_has = strstr(hc_last_error(), "first rank") != NULL;
			_exit(0);
		}
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_int_eq(st, 0);
	}
	ck_assert_int_eq(shared->ret, -EDQUOT);
	ck_assert_int_eq(shared->err_has, 1);
	{
		struct hc_stats st = hct_stats(pool);
		ck_assert_uint_eq(st.pin_count, 0);
		ck_assert_uint_eq(st.ticket_pages, 0);
		ck_assert_uint_eq(st.open_tickets, 0);
	}
}
END_TEST

/* Every record open and none overdue: a clear EBUSY; one expires: room again. */
START_TEST(ticket_table_full)
{
	hc_page_t pages[1];
	hc_ticket t[65];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = 1 };
	char id[16];

	hct_keys(shared->keys, 1, 20);
	join(pool, 8, 2, 0, 200);
	for (int i = 0; i < 64; i++) {
		struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = id, .step = 0 };
		snprintf(id, sizeof(id), "full-%d", i);
		t[i].size = sizeof(t[i]);
		ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t[i]), 0);
	}
	{
		struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name),
					     .request_id = "one-more",
					     .step = 0 };
		t[64].size = sizeof(t[64]);
		ck_assert_err(hc_ticket_lookup(pool, &tn, &rq, pages, &t[64]), EBUSY);
		ck_assert_msg_has("max_tickets");
		usleep(300 * 1000);
		ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t[64]), 0);
	}
	for (int i = 0; i < 65; i++)
		ck_assert_ok(hc_ticket_release(pool, &t[i]));
}
END_TEST

/* ---- puppets' steps: each puppet keeps its own ticket */

static hc_ticket my_tk = { .size = sizeof(hc_ticket) };
static hc_page_t my_pages[NK];
static uint8_t my_skip[NK];

/* arg: engine << 16 | tp << 8 | rank; the ticket timeout from shared */
static void step_join(hc_pool *p, long arg)
{
	join(p, (uint32_t)(arg >> 16), (uint32_t)(arg >> 8) & 0xff, (uint32_t)arg & 0xff, shared->timeout_ms);
}

static void step_leave(hc_pool *p, long arg)
{
	(void)arg;
	ck_assert_ok(hc_engine_leave(p));
}

/* arg: presence mask; the answer in shared->ret, the page in shared->pages[0] */
static void step_reserve_one(hc_pool *p, long arg)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "shared-resv", .step = 0 };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req),
				     .keys = shared->keys,
				     .nkeys = 1,
				     .presence = (uint32_t)arg };

	shared->ret = hc_ticket_reserve(p, &tn, &rr, my_pages, my_skip, &my_tk);
	shared->pages[0] = my_pages[0];
}

static void step_release_mine(hc_pool *p, long arg)
{
	(void)arg;
	ck_assert_ok(hc_ticket_release(p, &my_tk));
}

/*
 * A reservation ticket hands its pages to every rank of the engine: here
 * rank 1 builds it, rank 0 joins, and (the request cancelled) rank 1 aborts
 * while rank 0 may still be copying.  The page needs one shard only (the
 * replicated part; or a head group both ranks share, with one head group
 * for TP 2), which both may write.  It must not be handed out again while
 * that copy can land.  Before the fix it went straight back to FREE.
 */
static void abort_while_a_co_writer_copies(hc_pool *p, uint32_t presence)
{
	struct hct_puppet *r0 = hct_puppet(name);
	hc_page_t all[32];
	uint64_t counts[HC_PAGE__COUNT];
	int n;

	shared->timeout_ms = 300;
	hct_puppet_do(r0, step_join, 7 << 16 | 2 << 8 | 0);
	join(p, 7, 2, 1, 300);
	step_reserve_one(pool, presence);
	ck_assert_int_eq(shared->ret, 1);
	hct_puppet_do(r0, step_reserve_one, presence); /* rank 0 has the page, and copies */
	ck_assert_int_eq(shared->ret, 1);
	ck_assert_int_eq(hc_page_abort(pool, &shared->pages[0], 1), 1);
	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(shared->pages[0]), NULL, NULL, NULL), HC_PAGE_QUARANTINE);
	ck_assert_ok(hc_pool_count_states(pool, counts, HC_PAGE__COUNT));
	n = hc_page_alloc(pool, (unsigned)counts[HC_PAGE_FREE], 1, all);
	ck_assert_int_eq(n, (int)counts[HC_PAGE_FREE]);
	for (int i = 0; i < n; i++)
		ck_assert_uint_ne(HC_PAGE_ID(all[i]), HC_PAGE_ID(shared->pages[0]));
	ck_assert_err(hc_page_alloc(pool, 1, 1, all + n), ENOSPC); /* nor past the grace while rank 0 holds it */
	ck_assert_ok(hc_page_abort(pool, all, (unsigned)n));
	hct_puppet_do(r0, step_release_mine, 0);
	hct_puppet_end(r0);
	ck_assert_ok(hc_ticket_release(pool, &my_tk));
}

START_TEST(abort_of_a_shared_reservation_quarantines)
{
	hct_keys(shared->keys, 1, 31);
	abort_while_a_co_writer_copies(pool, 2); /* the replicated state only */
}
END_TEST

/* The fixture's pool, made again with another shape. */
static void fresh_pool(uint32_t max_ranks, uint32_t head_groups)
{
	struct hct_spec sp;

	hc_pool_detach(pool);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
	name = hct_name();
	hct_spec_init(&sp, name, 32);
	sp.spec.head_groups = head_groups;
	sp.spec.quarantine_ms = 50;
	sp.spec.max_ranks = max_ranks;
	ck_assert_ok(hc_pool_create(&sp.spec));
	pool = hct_attach(name, 0);
}

START_TEST(abort_with_one_head_group_for_two_ranks)
{
	fresh_pool(8, 1); /* MQA-like: both TP ranks hold every head */
	hct_keys(shared->keys, 1, 32);
	abort_while_a_co_writer_copies(pool, 1); /* kv only: group 0, written by both */
}
END_TEST

/*
 * A record's page count is read from shared memory: a scribbled or reused
 * record must not make a joiner write past the array it was given (two
 * keys, two pages).  Before the fix n was bounded by ticket_keys only.
 */
static void step_join_two(hc_pool *p, long arg)
{
	struct {
		hc_page_t pages[2];
		hc_page_t canary[1100];
	} *out = malloc(sizeof(*out));
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "scribbled", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = 2 };
	hc_ticket t = { .size = sizeof(hc_ticket) };

	(void)arg;
	ck_assert_ptr_nonnull(out);
	memset(out->canary, 0xa5, sizeof(out->canary));
	shared->ret = hc_ticket_lookup(p, &tn, &rq, out->pages, &t);
	shared->err_has = strstr(hc_last_error(), "corrupt") != NULL;
	for (size_t i = 0; i < sizeof(out->canary); i++)
		if (((uint8_t *)out->canary)[i] != 0xa5) {
			shared->err_has = -1;
			break;
		}
	free(out);
}

START_TEST(join_bounds_a_scribbled_count)
{
	struct hct_puppet *r1 = hct_puppet(name);
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "scribbled", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = 2 };
	hc_page_t pages[2];
	hc_ticket t = { .size = sizeof(hc_ticket) };

	hct_keys(shared->keys, 2, 33);
	ck_assert_int_eq(hct_store(pool, shared->keys, 2, 0), 2);
	join(pool, 4, 2, 0, 300);
	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t), 2);
	pool->tickets[t.index].n = pool->g.ticket_keys; /* a stray write */
	shared->timeout_ms = 300;
	hct_puppet_do(r1, step_join, 4 << 16 | 2 << 8 | 1);
	hct_puppet_do(r1, step_join_two, 0);
	ck_assert_int_eq(shared->ret, -EBADMSG);
	ck_assert_int_eq(shared->err_has, 1); /* and nothing written past its two pages */
	hct_puppet_end(r1);
	pool->tickets[t.index].n = 2;
	ck_assert_ok(hc_ticket_release(pool, &t));
}
END_TEST

/*
 * A builder slot read from a record is checked before it is probed: slot
 * max_ranks and up lie past the rank table, where the service's lifetime
 * lock and other pages' pin columns are.  With the service dead, probing
 * "slot 32" of a 32-slot pool "recovered" it: its pin column is the next
 * page's column 0, and our pin there was dropped.
 */
static void step_lookup_scribbled(hc_pool *p, long arg)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "bad-owner", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = 1 };
	hc_page_t pg[1];
	hc_ticket t = { .size = sizeof(hc_ticket) };

	(void)arg;
	shared->ret = hc_ticket_lookup(p, &tn, &rq, pg, &t);
	shared->err_has = strstr(hc_last_error(), "past the pool's") != NULL;
}

static void die_holding_the_service_lock(hc_pool *p, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&p->ctl->service.life);
	kill(getpid(), SIGKILL);
}

START_TEST(builder_slot_past_the_table)
{
	struct hct_puppet *r1;
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "bad-owner", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = 1 };
	struct hc_seg_ticket *r;
	hc_page_t pages[2], own[2], mine;
	hc_ticket t = { .size = sizeof(hc_ticket) };
	uint64_t w;

	fresh_pool(32, 0);
	r1 = hct_puppet(name);
	ck_assert_ptr_eq((void *)&pool->ranks[pool->g.max_ranks], (void *)pool->ctl); /* what lies past the table */
	hct_keys(shared->keys, 2, 34);
	ck_assert_int_eq(hct_store(pool, shared->keys, 2, 0), 2);
	ck_assert_int_eq(hct_hit(pool, shared->keys, 1), 1);
	ck_assert(WIFSIGNALED(in_child(die_holding_the_service_lock, NULL))); /* the service "died" */
	/* Our pin on a page whose column 0 is slot 8's column of the page before. */
	ck_assert_int_eq(pool->slot, 0);
	ck_assert_int_eq(hc_page_alloc(pool, 2, 1, own), 2);
	mine = HC_PAGE_ID(own[0]) > HC_PAGE_ID(own[1]) ? own[0] : own[1];
	ck_assert_uint_gt(HC_PAGE_ID(mine), 0);
	ck_assert_int_eq(hct_fill_commit_all(pool, own[0]), 1);
	ck_assert_int_eq(hct_fill_commit_all(pool, own[1]), 1);
	ck_assert_ok(hc_page_pin(pool, mine));

	join(pool, 6, 2, 0, 300);
	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t), 1);
	r = &pool->tickets[t.index];
	w = atomic_load(&r->word);
	atomic_store(&r->word, hc__tk_with(w, HC_TK_BUILDING, pool->g.max_ranks)); /* a stray write */
	shared->timeout_ms = 300;
	hct_puppet_do(r1, step_join, 6 << 16 | 2 << 8 | 1);
	hct_puppet_do(r1, step_lookup_scribbled, 0);
	ck_assert_int_eq(shared->ret, -EBADMSG);
	ck_assert_int_eq(shared->err_has, 1);
	ck_assert_uint_eq(atomic_load(&hc__pin_row(pool, HC_PAGE_ID(mine))[0]), 1); /* our pin is ours */
	ck_assert_uint_eq(atomic_load(&pool->ctl->service.state), HC_SVC_NONE);
	atomic_store(&r->word, w);
	hct_puppet_end(r1);
	ck_assert_ok(hc_ticket_release(pool, &t));
	ck_assert_ok(hc_page_unpin(pool, mine));
	ck_assert_int_eq(hc_page_free(pool, own, 2), 2);
}
END_TEST

/*
 * A ticket ends with the engine that held it: an engine whose ranks all
 * left (a finished run) and that is started again under the same id and
 * the same request names gets fresh tickets, and the tickets the old one
 * left open hold nothing any more.  Before the fix the second run failed
 * with "TP rank 0 already claimed its share" (hicache-bench replay --pool,
 * run twice), and open tickets held their pages until their deadline.
 */
START_TEST(ticket_ends_with_its_engine)
{
	struct hct_puppet *r1 = hct_puppet(name);
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "r0", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = shared->keys, .nkeys = 2 };
	hc_page_t pages[2];
	hc_ticket t = { .size = sizeof(hc_ticket) };

	hct_keys(shared->keys, 2, 35);
	ck_assert_int_eq(hct_store(pool, shared->keys, 2, 0), 2);
	shared->timeout_ms = 60000; /* a deadline far away: only the engine's end drops the ticket */
	for (int run = 0; run < 2; run++) {
		struct hc_page_info pi;

		hct_puppet_do(r1, step_join, 9 << 16 | 2 << 8 | 1);
		join(pool, 9, 2, 0, 60000);
		ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pages, &t), 2);
		ck_assert_int_eq(t.first, 1);
		ck_assert_ok(hc_ticket_release(pool, &t));
		ck_assert_ok(hc_page_info(pool, HC_PAGE_ID(pages[1]), &pi, sizeof(pi)));
		ck_assert_int_eq(pi.tickets, 1); /* rank 1 never claims its share: the ticket holds them */
		ck_assert_ok(hc_engine_leave(pool));
		hct_puppet_do(r1, step_leave, 0);
		ck_assert_ok(hc_page_info(pool, HC_PAGE_ID(pages[1]), &pi, sizeof(pi)));
		ck_assert_int_eq(pi.tickets, 0); /* the engine is gone: its ticket holds nothing */
	}
	ck_assert_int_eq(hc_evict(pool, 32), 2); /* the engine is gone: nothing holds them */
	hct_puppet_end(r1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tickets");
	TCase *tc = tcase_create("tickets");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, lookup_same_answer_despite_changes);
	tcase_add_test(tc, ticket_page_under_a_stopped_freer);
	tcase_add_test(tc, same_name_other_keys);
	tcase_add_test(tc, latecomer_after_timeout);
	tcase_add_test(tc, builder_dies_after_publishing);
	tcase_add_test(tc, reserve_by_key_two_ranks);
	tcase_add_test(tc, two_engines_one_page);
	tcase_add_test(tc, engine_join_errors);
	tcase_add_test(tc, ticket_name_errors);
	tcase_add_test(tc, too_many_keys_for_a_ticket);
	tcase_add_test(tc, quota_limits_holds);
	tcase_add_test(tc, join_counts_what_is_held);
	tcase_add_test(tc, ticket_table_full);
	tcase_add_test(tc, failure_is_shared);
	tcase_add_test(tc, abort_of_a_shared_reservation_quarantines);
	tcase_add_test(tc, abort_with_one_head_group_for_two_ranks);
	tcase_add_test(tc, join_bounds_a_scribbled_count);
	tcase_add_test(tc, builder_slot_past_the_table);
	tcase_add_test(tc, ticket_ends_with_its_engine);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
