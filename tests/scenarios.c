/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scenarios.c - the short multi-process scenarios that the schedule
 * explorer interleaves and the death sweep kills at every point (sched.h).
 * Each is 2-3 actors on a pool of a few pages; together they reach every
 * crash point.  Actors never wait for each other outside a point (the
 * controller could not run the other), and never call ck_assert: an
 * unexpected result is hcs_fail, which the controller reports.
 *
 * Pages are written as a function of their key (hcs_key_shard), so the
 * controller can check every READY page at the end, and an actor checks
 * every page it reads.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hicache/service.h>

#include "sched.h"

#define G0   UINT32_C(1)
#define G1   UINT32_C(2)
#define REPL HC_SHARD_REPLICATED

/* ---- helpers */

static int join(struct hcs_env *e, hc_pool *p, uint32_t engine, uint32_t tp, uint32_t rank, uint32_t timeout_ms,
		uint32_t quota)
{
	struct hc_engine_spec es = { .size = sizeof(struct hc_engine_spec),
				     .engine_id = engine,
				     .tp_size = tp,
				     .tp_rank = rank,
				     .quota_pages = quota ? quota : HC_QUOTA_UNLIMITED,
				     .ticket_timeout_ms = timeout_ms };
	int r = hc_engine_join(p, &es);

	if (r < 0)
		hcs_fail(e, "join engine %u as rank %u: %s", engine, rank, hc_last_error());
	return r;
}

/* Is r one of the errnos listed (0-terminated)? */
static int one_of(int r, const int *ok)
{
	for (; *ok; ok++)
		if (r == -*ok)
			return 1;
	return 0;
}

#define EXPECT(e, r, what, ...)                                                                                        \
	do {                                                                                                           \
		static const int ok_[] = { __VA_ARGS__, 0 };                                                           \
		if ((r) < 0 && !one_of((r), ok_))                                                                      \
			hcs_fail((e), "%s: %d (%s)", (what), (r), hc_last_error());                                    \
	} while (0)

/* A page we hold, read: its bytes must be its key's. */
static void read_check(struct hcs_env *e, hc_pool *p, hc_page_t h, const hc_key_t key)
{
	if (hct_key_shard(p, h, key, 0, 0) == 0)
		atomic_fetch_add(&e->sh->reads_ok, 1);
	else
		atomic_fetch_add(&e->sh->reads_bad, 1);
}

/* Reserve keys, fill every page by key, commit: the count stored, or a
 * negative errno. */
static int store(struct hcs_env *e, hc_pool *p, const hc_key_t *keys, unsigned n, hc_page_t *pg)
{
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = keys, .nkeys = n };
	uint8_t skip[HCS_KEYS];
	int r = hc_reserve(p, &rr, pg, skip), c;

	if (r < 0)
		return r;
	for (unsigned i = 0; i < n; i++) {
		uint32_t pres;
		if (skip[i])
			continue;
		hct_key_shard(p, pg[i], keys[i], 0, 1);
		hc_page_presence(p, pg[i], &pres);
		c = hc_page_commit(p, pg[i], hc_page_needed(p, pres));
		EXPECT(e, c, "commit", ESTALE);
	}
	return r;
}

/* The controller's setup: keys[0..n) READY, their handles in sh->pages. */
static void setup_store(struct hcs_env *e, unsigned n)
{
	hct_keys(e->sh->keys, HCS_KEYS, 77);
	if (n)
		hct_store_by_key(e->p, e->sh->keys, n, 0, e->sh->pages);
}

static void setup_keys(struct hcs_env *e)
{
	setup_store(e, 0);
}

static void setup_three(struct hcs_env *e)
{
	setup_store(e, 3);
}

/* ---- co-writers of a reservation ticket */

/* Rank me of a TP 2 engine: the ticket for keys[0..1], its own shards
 * filled and committed (rank 0 also the replicated part); abort_first:
 * rank 0, if it built the ticket, aborts instead of committing. */
static void co_write(struct hcs_env *e, hc_pool *p, unsigned me, int abort_first)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "w", .step = 0 };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = e->sh->keys, .nkeys = 2 };
	uint32_t mine = me == 0 ? (G0 | REPL) : G1;
	hc_page_t pg[2];
	uint8_t skip[2];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	int r;

	if (join(e, p, 1, 2, me, 60000, 0) < 0)
		return;
	r = hc_ticket_reserve(p, &tn, &rr, pg, skip, &t);
	e->sh->ret[me][0] = r;
	EXPECT(e, r, "ticket reserve", ENOSPC, ESTALE);
	if (r < 0)
		return;
	e->sh->ret[me][3] = t.first;
	if (abort_first && me == 0 && t.first) {
		for (int i = 0; i < 2; i++)
			if (pg[i] != HC_PAGE_NONE) {
				int a = hc_page_abort(p, &pg[i], 1);
				EXPECT(e, a, "abort", ESTALE);
			}
	} else {
		for (int i = 0; i < 2; i++) {
			if (pg[i] == HC_PAGE_NONE)
				continue;
			for (uint32_t m = mine; m; m &= m - 1)
				hct_key_shard(p, pg[i], e->sh->keys[i], m & -m, 1);
			int c = hc_page_commit(p, pg[i], mine);
			EXPECT(e, c, "commit", ESTALE);
			e->sh->ret[me][1] += c == -ESTALE;
		}
		e->sh->ret[me][2] = 1; /* committed all it had */
	}
	r = hc_ticket_release(p, &t);
	EXPECT(e, r, "ticket release", 0);
}

static void cow_actor(struct hcs_env *e, hc_pool *p, unsigned me)
{
	co_write(e, p, me, 0);
}

static void abort_actor(struct hcs_env *e, hc_pool *p, unsigned me)
{
	co_write(e, p, me, 1);
}

/* Both lived, shared one ticket, and every commit of both took: the
 * page of each key is complete.  (A rank that detaches before the other commits gives its
 * reservation up, as a dead one would: those commits fail.) */
static int cow_verify(struct hcs_env *e, char *why, size_t len)
{
	if (e->killed[0] || e->killed[1] || !e->sh->ret[0][2] || !e->sh->ret[1][2] || e->sh->ret[0][1] ||
	    e->sh->ret[1][1] || e->sh->ret[0][3] + e->sh->ret[1][3] != 1)
		return 0; /* a death, a failed commit, or two tickets (the first rank left, the engine ended) */
	if (hct_hit(e->p, e->sh->keys, 2) != 2) {
		snprintf(why, len, "both co-writers lived, and the keys are not both READY");
		return -1;
	}
	return 0;
}

static const struct hcs_scenario co_writers = {
	.name = "co_writers",
	.what = "two ranks fill and commit their shards of a reservation ticket's pages; the owner may die",
	.nactors = 2,
	.actor_name = { "rank 0", "rank 1" },
	.actor = { cow_actor, cow_actor },
	.victims = 3,
	.npages = 4,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_keys,
	.verify = cow_verify,
};

static const struct hcs_scenario abort_vs_co_writer = {
	.name = "abort_vs_co_writer",
	.what = "the owner of a reservation ticket aborts while its co-writer commits",
	.nactors = 2,
	.actor_name = { "rank 0 (aborts)", "rank 1" },
	.actor = { abort_actor, cow_actor },
	.victims = 3,
	.npages = 4,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_keys,
};

/* ---- the quarantine sweep against allocation */

static hc_page_t ctl_anon[2];

/* Two keyed pages quarantined long ago, still keyed (their quarantiner
 * died before it took the keys out); the other two pages are the
 * controller's, so the next allocation needs the sweep. */
static void setup_quarantined(struct hcs_env *e)
{
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = e->sh->keys, .nkeys = 2 };
	uint8_t skip[2];
	hc_page_t pg[2];

	setup_store(e, 0);
	ck_assert_int_eq(hc_page_alloc(e->p, 2, 3, ctl_anon), 2);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(hct_fill_commit_all(e->p, ctl_anon[i]), 1);
	ck_assert_int_eq(hc_reserve(e->p, &rr, pg, skip), 2);
	for (int i = 0; i < 2; i++) {
		_Atomic uint64_t *wp = &e->p->pages[HC_PAGE_ID(pg[i])].word;
		uint64_t w = atomic_load(wp);
		atomic_store(wp, hc__w_make(HC_PAGE_QUARANTINE, (unsigned)e->p->slot, hc__w_gen(w),
					    (hc__now_ms() - 3600u * 1000u) | 1));
	}
	hc__quota_give(e->p, 2);
}

static void sweep_actor(struct hcs_env *e, hc_pool *p, unsigned me)
{
	int r = hc_pool_recover(p, NULL, 0);

	(void)me;
	EXPECT(e, r, "recover", 0);
}

static void alloc_actor(struct hcs_env *e, hc_pool *p, unsigned me)
{
	hc_page_t pg[1];
	int r = store(e, p, e->sh->keys + 2, 1, pg);

	e->sh->ret[me][0] = r;
	EXPECT(e, r, "store", ENOSPC);
}

static int sweep_verify(struct hcs_env *e, char *why, size_t len)
{
	if (hct_hit(e->p, e->sh->keys, 1) != 0 || hct_hit(e->p, e->sh->keys + 1, 1) != 0) {
		snprintf(why, len, "a quarantined key is still found");
		return -1;
	}
	return 0;
}

static const struct hcs_scenario sweep_vs_allocator = {
	.name = "sweep_vs_allocator",
	.what = "two sweeps end a keyed quarantine while a rank stores a key in the pages it frees",
	.nactors = 3,
	.actor_name = { "sweeper", "allocator", "sweeper" },
	.actor = { sweep_actor, alloc_actor, sweep_actor },
	.victims = 7,
	.npages = 4,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_quarantined,
	.verify = sweep_verify,
};

/* ---- lookup and pin against eviction */

static void reader_actor(struct hcs_env *e, hc_pool *p, unsigned me)
{
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req),
				    .keys = e->sh->keys,
				    .nkeys = 3,
				    .flags = HC_LOOKUP_PIN };
	hc_page_t pg[3];
	int h = hc_lookup(p, &rq, pg);

	e->sh->ret[me][0] = h;
	EXPECT(e, h, "lookup", 0);
	for (int i = 0; i < h; i++) {
		read_check(e, p, pg[i], e->sh->keys[i]);
		int r = hc_page_unpin(p, pg[i]);
		EXPECT(e, r, "unpin", 0);
	}
}

static void evictor_actor(struct hcs_env *e, hc_pool *p, unsigned me)
{
	hc_page_t pg[2];
	int r = store(e, p, e->sh->keys + 3, 2, pg); /* one page free: one to evict */

	e->sh->ret[me][0] = r;
	EXPECT(e, r, "store", ENOSPC);
	r = hc_evict(p, 4);
	EXPECT(e, r, "evict", 0);
}

static const struct hcs_scenario lookup_vs_evict = {
	.name = "lookup_vs_evict",
	.what = "a rank looks up and pins three pages while another evicts for its stores and evicts all",
	.nactors = 2,
	.actor_name = { "reader", "evictor" },
	.actor = { reader_actor, evictor_actor },
	.victims = 3,
	.npages = 4,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_three,
};

/* The same in a pool of exact LRU: a lookup moves its pages on the list
 * while the evictor walks it, both under the list's lock, and a third rank
 * dies holding it, mid-move, so the next locker rebuilds the list. */
static void die_touching(struct hcs_env *e, hc_pool *p, unsigned me)
{
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = e->sh->keys + 1, .nkeys = 1 };
	hc_page_t pg[1];

	hcs_die_at(e, me, HC_PT_lru_moving);
	hc_lookup(p, &rq, pg); /* dies, unless the key was evicted first */
	hc__pt_disarm_all();
}

static const struct hcs_scenario lookup_vs_evict_lru = {
	.name = "lookup_vs_evict_lru",
	.what = "as lookup_vs_evict, in a pool of exact LRU, while a third rank dies moving a page on the list",
	.nactors = 3,
	.actor_name = { "dies touching", "reader", "evictor" },
	.actor = { die_touching, reader_actor, evictor_actor },
	.victims = 6,
	.npages = 4,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.evict = HC_EVICT_LRU,
	.setup = setup_three,
};

/* ---- the free map's summary level: a claim empties a word while a free fills it */

#define FM_PAGES 130 /* three words of page bits, and a summary word above them */
static hc_page_t fm_page[FM_PAGES];

/* Every page the controller's but two of the second word: page 70 FREE,
 * page 100 READY for the freer. */
static void setup_fm(struct hcs_env *e)
{
	setup_store(e, 0);
	ck_assert_int_eq(hc_page_alloc(e->p, FM_PAGES, 3, fm_page), FM_PAGES);
	for (int i = 0; i < FM_PAGES; i++)
		ck_assert_int_eq(hct_fill_commit_all(e->p, fm_page[i]), 1);
	ck_assert_int_eq(hc_page_free(e->p, &fm_page[70], 1), 1);
}

/* Take the one page the map shows (its word empties), use it, give it back. */
static void fm_cycle(struct hcs_env *e, hc_pool *p, unsigned me, int slot)
{
	hc_page_t pg;
	int r = hc_page_alloc(p, 1, 3, &pg);

	e->sh->ret[me][slot] = r;
	EXPECT(e, r, "alloc", 0);
	if (r < 0)
		return;
	r = hct_fill_commit_all(p, pg);
	EXPECT(e, r, "commit", 0);
	r = hc_page_free(p, &pg, 1);
	EXPECT(e, r, "free", 0);
}

static void fm_claimer(struct hcs_env *e, hc_pool *p, unsigned me)
{
	fm_cycle(e, p, me, 0);
}

/* Free page 100 (its word fills again), then the same cycle. */
static void fm_freer(struct hcs_env *e, hc_pool *p, unsigned me)
{
	int r = hc_page_free(p, &fm_page[100], 1);

	EXPECT(e, r, "free", 0);
	fm_cycle(e, p, me, 1);
}

static const struct hcs_scenario freemap_levels = {
	.name = "freemap_levels",
	.what = "a rank takes the last free page of a word of the free map while another frees one into it",
	.nactors = 2,
	.actor_name = { "claims", "frees" },
	.actor = { fm_claimer, fm_freer },
	.victims = 3,
	.npages = FM_PAGES,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_fm,
};

/* ---- tickets: join against expiry and reuse */

static hc_ticket bg[63];

/* The controller joins engine 9 as rank 0 of TP 2; rank 1 never comes, so
 * its tickets stay OPEN for an hour. */
static void ctl_join(struct hcs_env *e)
{
	struct hc_engine_spec es = { .size = sizeof(struct hc_engine_spec),
				     .engine_id = 9,
				     .tp_size = 2,
				     .tp_rank = 0,
				     .quota_pages = HC_QUOTA_UNLIMITED,
				     .ticket_timeout_ms = 3600u * 1000u };

	ck_assert_ok(hc_engine_join(e->p, &es));
}

/* 63 of the 64 records held open by an engine of the controller's (rank 1
 * never comes), so the scenario's tickets take the last and then reuse. */
static void setup_tickets(struct hcs_env *e)
{
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = e->sh->keys, .nkeys = 1 };
	hc_page_t pg[1];
	char id[16];

	setup_store(e, 2);
	ctl_join(e);
	for (int i = 0; i < 63; i++) {
		struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = id, .step = 0 };
		snprintf(id, sizeof(id), "bg-%d", i);
		bg[i].size = sizeof(bg[i]);
		ck_assert_int_eq(hc_ticket_lookup(e->p, &tn, &rq, pg, &bg[i]), 1);
		ck_assert_ok(hc_ticket_release(e->p, &bg[i]));
	}
}

/* Ranks 0 and 1 of engine 2: the same lookup ticket, pages read. */
static void tk_rank(struct hcs_env *e, hc_pool *p, unsigned me)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "t", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = e->sh->keys, .nkeys = 2 };
	hc_page_t pg[2];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	int h;

	if (join(e, p, 2, 2, me, 500, 0) < 0)
		return;
	h = hc_ticket_lookup(p, &tn, &rq, pg, &t);
	e->sh->ret[me][0] = h;
	EXPECT(e, h, "ticket lookup", ESTALE, EBUSY, ETIMEDOUT); /* ETIMEDOUT: the clock ran past a builder */
	if (h < 0)
		return;
	for (int i = 0; i < h; i++)
		read_check(e, p, pg[i], e->sh->keys[i]);
	h = hc_ticket_release(p, &t);
	EXPECT(e, h, "ticket release", 0);
}

/* Another engine's rank: evicts what it can, lets the clock pass engine
 * 2's deadline, sweeps (expiring its ticket) and takes a ticket of its own,
 * which must reuse a record. */
static void tk_other(struct hcs_env *e, hc_pool *p, unsigned me)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "other", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = e->sh->keys, .nkeys = 1 };
	hc_page_t pg[1];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	int r;

	if (join(e, p, 3, 1, 0, 500, 0) < 0)
		return;
	r = hc_evict(p, 2); /* ticket-held pages are put back */
	EXPECT(e, r, "evict", 0);
	hcs_clock_add(e, 10000);
	r = hc_pool_recover(p, NULL, 0);
	EXPECT(e, r, "recover", 0);
	r = hc_ticket_lookup(p, &tn, &rq, pg, &t);
	e->sh->ret[me][0] = r;
	EXPECT(e, r, "ticket lookup", EBUSY);
	if (r >= 0) {
		if (r == 1)
			read_check(e, p, pg[0], e->sh->keys[0]);
		r = hc_ticket_release(p, &t);
		EXPECT(e, r, "ticket release", 0);
	}
}

/* Two ranks of engine 2 and another engine, on 63 records held open. */
#define TICKET_ACTORS                                                                                                  \
	.nactors = 3, .actor_name = { "rank 0", "rank 1", "other engine" }, .actor = { tk_rank, tk_rank, tk_other },   \
	.victims = 7, .npages = 4, .quarantine_ms = 50, .max_tickets = 64, .setup = setup_tickets

static const struct hcs_scenario ticket_expiry = {
	.name = "ticket_join_vs_expiry",
	.what = "two ranks share a lookup ticket while a third evicts, lets it expire, and reuses its record",
	TICKET_ACTORS,
	/* the evictor has chosen the page before the ticket held it, and
	 * marks it FREEING as rank 1 joins: rank 1 waits it out */
	.hint = { { 2, HC_PT_evict_victim },
		  { 0, HC_PT_ticket_released },
		  { 2, HC_PT_retire_freeing },
		  { 1, HC_PT_hold_wait } },
	.nhint = 4,
};

/* The same actors: rank 0 has built 't' and let it go, the other engine
 * expires it and reuses its record for its own ticket, and rank 1 looks 't'
 * up while the record is taken but not yet named.  It must not take the
 * record for 't' (it is 'other' now): before the fix it waited for
 * other's build and got EINVAL, "opened as a lookup of 1 keys". */
static const struct hcs_scenario ticket_reuse = {
	.name = "ticket_join_vs_reuse",
	.what = "a rank looks up a ticket whose record another engine is taking for a new name",
	TICKET_ACTORS,
	.hint = { { 0, HC_PT_ticket_released },
		  { 2, HC_PT_ticket_taken },
		  { 1, HC_PT_ticket_wait },
		  { 2, HC_PT_ticket_released },
		  { 1, HCS_END } },
	.nhint = 5,
};

/* ---- a death, and two recoverers */

/* Hold one of everything, then die. */
static void hold_and_die(struct hcs_env *e, hc_pool *p, unsigned me)
{
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req),
				    .keys = e->sh->keys,
				    .nkeys = 2,
				    .flags = HC_LOOKUP_PIN };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = e->sh->keys + 2, .nkeys = 2 };
	hc_page_t pg[2], anon;
	uint8_t skip[2];
	int r;

	r = hc_lookup(p, &rq, pg);
	EXPECT(e, r, "lookup", 0);
	if (r == 2) {
		r = hc_page_lock(p, pg[1]);
		EXPECT(e, r, "lock", 0);
	}
	r = hc_reserve(p, &rr, pg, skip);
	EXPECT(e, r, "reserve", ENOSPC);
	if (hc_page_alloc(p, 1, 3, &anon) == 1) {
		hct_key_shard(p, anon, e->sh->keys[9], 0, 1);
		hc_page_commit(p, anon, hc_page_needed(p, 3));
	}
	hcs_die(e, me);
}

static void recoverer(struct hcs_env *e, hc_pool *p, unsigned me)
{
	sweep_actor(e, p, me);
}

static const struct hcs_scenario two_recoverers = {
	.name = "two_recoverers",
	.what = "a rank dies holding pins, a host lock, reservations and a page of its own; two recover it",
	.nactors = 3,
	.actor_name = { "dies", "recoverer", "recoverer" },
	.actor = { hold_and_die, recoverer, recoverer },
	.victims = 6,
	.npages = 6,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_three,
	/* one recoverer holds the dead slot as the other probes it */
	.hint = { { 0, HCS_END }, { 1, HC_PT_recover_begin }, { 2, HC_PT_probe_busy } },
	.nhint = 3,
};

/* A rank dies holding things; the next to notice is one that attaches
 * (the free process of a sweep run), not an actor. */
static void store_other(struct hcs_env *e, hc_pool *p, unsigned me)
{
	hc_page_t pg[1];
	int r = store(e, p, e->sh->keys + 5, 1, pg);

	e->sh->ret[me][0] = r;
	EXPECT(e, r, "store", ENOSPC);
}

static const struct hcs_scenario death_found_at_attach = {
	.name = "death_found_at_attach",
	.what = "a rank dies holding things while another stores; a rank that attaches later recovers it",
	.nactors = 2,
	.actor_name = { "dies", "stores" },
	.actor = { hold_and_die, store_other },
	.victims = 2,
	.npages = 6,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_three,
};

/* ---- a writer dies holding a key index stripe */

static void die_in_stripe(struct hcs_env *e, hc_pool *p, unsigned me)
{
	hc_page_t pg[1];

	hcs_die_at(e, me, HC_PT_reserve_keyed);
	store(e, p, e->sh->keys, 1, pg); /* dies, unless the key was stored first */
	hc__pt_disarm_all();
}

static void store_same(struct hcs_env *e, hc_pool *p, unsigned me)
{
	hc_page_t pg[1];
	int r = store(e, p, e->sh->keys + (me == 1 ? 0 : 1), 1, pg);

	e->sh->ret[me][0] = r;
	EXPECT(e, r, "store", ENOSPC);
}

static const struct hcs_scenario stripe_death = {
	.name = "stripe_death",
	.what = "a writer dies holding a key's index stripe; one stores that key, one another",
	.nactors = 3,
	.actor_name = { "dies in a stripe", "same key", "other key" },
	.actor = { die_in_stripe, store_same, store_same },
	.victims = 6,
	.npages = 4,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_keys,
};

/* ---- allocation: all or nothing, and a reservation that runs short */

static void alloc_four(struct hcs_env *e, hc_pool *p, unsigned me)
{
	hc_page_t pg[4];
	int r = hc_page_alloc(p, 4, 3, pg);

	e->sh->ret[me][0] = r;
	EXPECT(e, r, "alloc", ENOSPC);
	if (r < 0)
		return;
	for (int i = 0; i < 4; i++) {
		hct_key_shard(p, pg[i], e->sh->keys[10 + me], 0, 1);
		int c = hc_page_commit(p, pg[i], hc_page_needed(p, 3));
		EXPECT(e, c, "commit", 0);
	}
	for (int i = 0; i < 4; i++)
		read_check(e, p, pg[i], e->sh->keys[10 + me]);
	r = hc_page_free(p, pg, 4);
	EXPECT(e, r, "free", 0);
}

/* Reserve keys[0..1] in the two free pages, while the other actor
 * reserves keys[1] and aborts it into quarantine: the reservation may find
 * a key gone missing since its first look, and no page left for it. */
static void reserve_two(struct hcs_env *e, hc_pool *p, unsigned me)
{
	hc_page_t pg[2];
	int r = store(e, p, e->sh->keys, 2, pg);

	e->sh->ret[me][0] = r;
	EXPECT(e, r, "store", ENOSPC);
}

/* Through a ticket of a TP 2 engine whose other rank never comes: the
 * page is shared, so the abort leaves it in quarantine, not FREE. */
static void reserve_and_abort(struct hcs_env *e, hc_pool *p, unsigned me)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "r", .step = 0 };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = e->sh->keys + 1, .nkeys = 1 };
	hc_page_t pg[1];
	uint8_t skip[1];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	int r;

	if (join(e, p, 5, 2, 0, 60000, 0) < 0)
		return;
	r = hc_ticket_reserve(p, &tn, &rr, pg, skip, &t);
	e->sh->ret[me][0] = r;
	EXPECT(e, r, "ticket reserve", ENOSPC);
	if (r < 0)
		return;
	if (r == 1 && pg[0] != HC_PAGE_NONE) {
		r = hc_page_abort(p, pg, 1);
		EXPECT(e, r, "abort", 0);
	}
	r = hc_ticket_release(p, &t);
	EXPECT(e, r, "ticket release", 0);
}

static void setup_tight(struct hcs_env *e)
{
	setup_store(e, 0);
	ck_assert_int_eq(hc_page_alloc(e->p, 2, 3, ctl_anon), 2);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(hct_fill_commit_all(e->p, ctl_anon[i]), 1);
}

static const struct hcs_scenario alloc_contention = {
	.name = "alloc_contention",
	.what = "two ranks each allocate four of six pages: one gets them all, or neither keeps any",
	.nactors = 2,
	.actor_name = { "allocates 4", "allocates 4" },
	.actor = { alloc_four, alloc_four },
	.victims = 3,
	.npages = 6,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_keys,
};

static const struct hcs_scenario reserve_runs_short = {
	.name = "reserve_runs_short",
	.what = "a rank reserves two keys in two free pages while another reserves one of them and aborts it",
	.nactors = 2,
	.actor_name = { "reserves 2", "reserves 1, aborts" },
	.actor = { reserve_two, reserve_and_abort },
	.victims = 3,
	.npages = 4,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_tight,
	/* the key goes missing between the first look and the second */
	.hint = { { 1, HC_PT_abort_seen }, { 0, HC_PT_reserve_allocated }, { 1, HCS_END } },
	.nhint = 3,
};

/* ---- a page allocated without a key: free against pin */

static void anon_owner(struct hcs_env *e, hc_pool *p, unsigned me)
{
	hc_page_t pg;
	int r = hc_page_alloc(p, 1, 3, &pg);

	EXPECT(e, r, "alloc", 0);
	if (r < 0)
		return;
	hct_key_shard(p, pg, e->sh->keys[12], 0, 1);
	r = hc_page_commit(p, pg, hc_page_needed(p, 3));
	EXPECT(e, r, "commit", 0);
	atomic_store(&e->sh->pages[0], pg);
	for (int i = 0; i < 3; i++) {
		r = hc_page_free(p, &pg, 1);
		e->sh->ret[me][0] = r;
		EXPECT(e, r, "free", EBUSY);
		if (r == 1)
			break;
	}
}

static void anon_reader(struct hcs_env *e, hc_pool *p, unsigned me)
{
	(void)me;
	for (int i = 0; i < 3; i++) {
		hc_page_t pg = atomic_load(&e->sh->pages[0]);
		int r;
		if (!pg)
			continue;
		r = hc_page_pin(p, pg);
		EXPECT(e, r, "pin", ESTALE, EAGAIN);
		if (r < 0)
			continue;
		read_check(e, p, pg, e->sh->keys[12]);
		r = hc_page_unpin(p, pg);
		EXPECT(e, r, "unpin", 0);
	}
}

static void setup_zero_page(struct hcs_env *e)
{
	setup_keys(e);
	e->sh->pages[0] = 0;
}

static const struct hcs_scenario anon_free_vs_pin = {
	.name = "anon_free_vs_pin",
	.what = "a rank frees a page it allocated without a key while another pins and reads it",
	.nactors = 2,
	.actor_name = { "owner", "reader" },
	.actor = { anon_owner, anon_reader },
	.victims = 3,
	.npages = 4,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_zero_page,
};

/* Take what a prefetch fetched, check its bytes by key and unpin it; the
 * count taken. */
static int take_check(struct hcs_env *e, hc_pool *p, hc_req *rq, hc_page_t *pg)
{
	int h = hc_req_prefetch_take(rq, pg, NULL), r;

	for (int i = 0; i < h; i++) {
		read_check(e, p, pg[i], e->sh->keys[i]);
		r = hc_page_unpin(p, pg[i]);
		EXPECT(e, r, "unpin", 0);
	}
	hc_req_free(rq);
	return h;
}

/* ---- through a service: prefetch completion against a rank's death */

static void prefetcher(struct hcs_env *e, hc_pool *p, unsigned me)
{
	struct hc_lookup_req lr = { .size = sizeof(struct hc_lookup_req), .keys = e->sh->keys, .nkeys = 3 };
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .keys = e->sh->keys,
				      .nkeys = 3,
				      .policy = HC_PREFETCH_WAIT_COMPLETE };
	hc_page_t pg[3];
	hc_req *rq;
	int h, r;

	h = hc_lookup(p, &lr, pg);
	if (h == 3 && hc_req_backup(p, pg, 3, &rq) == 0) {
		r = hc_req_wait(rq, 5000);
		e->sh->ret[me][0] = r;
		hc_req_free(rq);
	}
	for (int i = 0; i < 3; i++)
		hc_evict_key(p, e->sh->keys[i]);
	if (hc_req_prefetch(p, &pr, &rq) < 0)
		return; /* the service is gone (a sweep killed it) */
	e->sh->ret[me][1] = take_check(e, p, rq, pg);
}

static const struct hcs_scenario prefetch_vs_death = {
	.name = "prefetch_vs_rank_death",
	.what = "a rank backs pages up, drops them and prefetches them back through the service, and may die",
	.nactors = 1,
	.actor_name = { "rank" },
	.actor = { prefetcher },
	.victims = 1,
	.npages = 8,
	.quarantine_ms = 20,
	.max_tickets = 64,
	.real_clock = 1,
	.service = 1,
	.setup = setup_three,
};

/* buffer_only: a write grant, pages stored and backed up, then read back. */
static void stager(struct hcs_env *e, hc_pool *p, unsigned me)
{
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .keys = e->sh->keys,
				      .nkeys = 2,
				      .policy = HC_PREFETCH_WAIT_COMPLETE };
	hc_page_t pg[2];
	hc_req *g, *b, *rq;
	int r, h;

	if (hc_req_stage(p, 2, 0, &g) < 0)
		return;
	r = hc_req_wait(g, 5000);
	e->sh->ret[me][0] = r;
	if (r == 2 && store(e, p, e->sh->keys, 2, pg) == 2 && hc_req_backup(p, pg, 2, &b) == 0) {
		e->sh->ret[me][1] = hc_req_wait(b, 5000);
		hc_req_free(b);
	}
	hc_req_free(g);
	if (hc_req_prefetch(p, &pr, &rq) < 0)
		return;
	h = e->sh->ret[me][2] = take_check(e, p, rq, pg);
	/* buffer_only frees each page once its transfer ended and nobody
	 * holds it: let the service get there before the run ends (a second,
	 * at most: the sweep may have killed it) */
	for (double t0 = hct_now(); h > 0 && hct_now() - t0 < 1.0; usleep(1000)) {
		int left = 0;
		for (int i = 0; i < h; i++) {
			hc_page_t now;
			left += hc_page_state(p, HC_PAGE_ID(pg[i]), &now, NULL, NULL) == HC_PAGE_READY && now == pg[i];
		}
		if (!left)
			break;
	}
}

static const struct hcs_scenario staging = {
	.name = "staging",
	.what = "a rank of a buffer_only pool takes a write grant, stores and backs up, and reads back",
	.nactors = 1,
	.actor_name = { "rank" },
	.actor = { stager },
	.victims = 1,
	.npages = 8,
	.quarantine_ms = 20,
	.max_tickets = 64,
	.host_mode = HC_HOST_BUFFER_ONLY,
	.real_clock = 1,
	.service = 1,
	.setup = setup_keys,
};

/* ---- a plain abort against a reader and a writer of the same key */

/* Reserve keys[0], write half of it, abort: quarantined, then FREE. */
static void aborter(struct hcs_env *e, hc_pool *p, unsigned me)
{
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = e->sh->keys, .nkeys = 1 };
	hc_page_t pg[1];
	uint8_t skip[1];
	int r = hc_reserve(p, &rr, pg, skip);

	e->sh->ret[me][0] = r;
	EXPECT(e, r, "reserve", ENOSPC);
	if (r != 1)
		return;
	hct_key_shard(p, pg[0], e->sh->keys[0], G0, 1);
	r = hc_page_abort(p, pg, 1);
	e->sh->ret[me][1] = r;
	EXPECT(e, r, "abort", 0);
}

/* Look keys[0] up (pinned), read it if found, then store it. */
static void lookup_store(struct hcs_env *e, hc_pool *p, unsigned me)
{
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req),
				    .keys = e->sh->keys,
				    .nkeys = 1,
				    .flags = HC_LOOKUP_PIN };
	hc_page_t pg[1];
	int r = hc_lookup(p, &rq, pg);

	e->sh->ret[me][0] = r;
	EXPECT(e, r, "lookup", 0);
	if (r == 1) {
		read_check(e, p, pg[0], e->sh->keys[0]);
		r = hc_page_unpin(p, pg[0]);
		EXPECT(e, r, "unpin", 0);
	}
	r = store(e, p, e->sh->keys, 1, pg);
	e->sh->ret[me][1] = r;
	EXPECT(e, r, "store", ENOSPC);
}

static const struct hcs_scenario abort_vs_lookup = {
	.name = "abort_vs_lookup",
	.what = "a rank reserves a key and aborts it while another looks it up and stores it",
	.nactors = 2,
	.actor_name = { "aborts", "looks up, stores" },
	.actor = { aborter, lookup_store },
	.victims = 3,
	.npages = 3,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_keys,
};

/* ---- a repair while a rank works */

static hc_ticket dmg = { .size = sizeof(hc_ticket) };

/* keys[0..2] READY, and damage: a lookup ticket of keys[1] (engine 9,
 * whose rank 1 never comes) recording more pages than keys, a stray bit of
 * a free ticket record on keys[0]'s page, and a READY page nothing can
 * find or free. */
static void setup_damage(struct hcs_env *e)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "dmg", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = e->sh->keys + 1, .nkeys = 1 };
	hc_page_t pg[1], lost;

	setup_store(e, 3);
	ctl_join(e);
	ck_assert_int_eq(hc_ticket_lookup(e->p, &tn, &rq, pg, &dmg), 1);
	ck_assert_ok(hc_ticket_release(e->p, &dmg));
	e->p->tickets[dmg.index].n = 9;
	atomic_fetch_or(&hc__tmask_row(e->p, HC_PAGE_ID(e->sh->pages[0]))[0], UINT64_C(1) << 40);
	ck_assert_int_eq(hc_page_alloc(e->p, 1, 3, &lost), 1);
	ck_assert_int_eq(hct_fill_commit_all(e->p, lost), 1);
	atomic_store(&e->p->pages[HC_PAGE_ID(lost)].flags, 0);
}

/* Pin, read and unpin keys[0..2], then store keys[3]. */
static void repair_reader(struct hcs_env *e, hc_pool *p, unsigned me)
{
	hc_page_t pg[1];
	int r;

	reader_actor(e, p, me);
	r = store(e, p, e->sh->keys + 3, 1, pg);
	e->sh->ret[me][1] = r;
	EXPECT(e, r, "store", ENOSPC);
}

static void repairer(struct hcs_env *e, hc_pool *p, unsigned me)
{
	int r = hc_pool_repair(p, 0, NULL, 0, NULL, NULL);

	e->sh->ret[me][0] = r;
	EXPECT(e, r, "repair", 0);
}

static const struct hcs_scenario repair_vs_rank = {
	.name = "repair_vs_rank",
	.what = "a repair mends a damaged pool while a rank pins, reads and stores in it",
	.nactors = 2,
	.actor_name = { "rank", "repairs" },
	.actor = { repair_reader, repairer },
	.victims = 3,
	.npages = 8,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_damage,
	.repairs = 1,
};

/* ---- a free slot's lock word, scribbled */

#define STUCK_SLOT 7 /* the last of the 8: the actors claim the first ones */

static void setup_stuck_slot(struct hcs_env *e)
{
	setup_store(e, 2);
	__atomic_store_n(&e->p->ranks[STUCK_SLOT].lock.__data.__lock, 0x2bad0001, __ATOMIC_RELEASE);
}

/* A quiescent repair (nothing else attaches or probes): the slot is let go. */
static void unsticker(struct hcs_env *e, hc_pool *p, unsigned me)
{
	struct hc_repair_report rep;
	int r = hc_pool_repair(p, HC_CHECK_QUIESCENT, &rep, sizeof(rep), NULL, NULL);

	e->sh->ret[me][0] = r;
	EXPECT(e, r, "repair", 0);
	if (r == 0 && rep.slot_locks != 1)
		hcs_fail(e, "repair let go of %u slot mutexes, not 1", rep.slot_locks);
}

/* Whoever ended it, the slot is claimable: no lock word left. */
static int stuck_slot_freed(struct hcs_env *e, char *why, size_t len)
{
	int w = __atomic_load_n(&e->p->ranks[STUCK_SLOT].lock.__data.__lock, __ATOMIC_ACQUIRE);

	if (w == 0)
		return 0;
	snprintf(why, len, "rank slot %u: lock word 0x%08x left", STUCK_SLOT, (unsigned)w);
	return -1;
}

static const struct hcs_scenario stuck_slot = {
	.name = "stuck_slot",
	.what = "a free slot's lock word names a thread that never held it; a quiescent repair lets go of it",
	.nactors = 1,
	.actor_name = { "repairs (quiescent)" },
	.actor = { unsticker },
	.victims = 1,
	.npages = 4,
	.quarantine_ms = 50,
	.max_tickets = 64,
	.setup = setup_stuck_slot,
	.verify = stuck_slot_freed,
	.repairs = 2,
};

const struct hcs_scenario *const hcs_scenarios[] = {
	&co_writers,          &abort_vs_co_writer, &sweep_vs_allocator, &lookup_vs_evict,
	&ticket_expiry,       &ticket_reuse,       &two_recoverers,     &death_found_at_attach,
	&stripe_death,        &alloc_contention,   &reserve_runs_short, &anon_free_vs_pin,
	&abort_vs_lookup,     &repair_vs_rank,     &prefetch_vs_death,  &staging,
	&lookup_vs_evict_lru, &freemap_levels,     &stuck_slot,
};
const unsigned hcs_nscenarios = sizeof(hcs_scenarios) / sizeof(hcs_scenarios[0]);
