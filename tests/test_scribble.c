/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_scribble.c - hostile memory.  A scribbler process writes random and
 * nasty values (UINT32_MAX, max_ranks, npages, npages + 1, huge counts,
 * owners past the rank table, stripe counts...) into the shared tables of
 * a live pool: page entries, pin rows, ticket masks, the key index, ticket
 * records and their page lists, the rank table past its mutexes, the
 * control block's counters and policies, the high-water mark, and the
 * request path (ring indices and geometry, request and completion entries,
 * argument areas).  Meanwhile three forked ranks, each attached by name,
 * keep working: reserve, fill, commit and abort; lookups with pins, and
 * host locks; ticket lookups and reservations of a TP-2 engine and of a
 * TP-1 one; eviction, frees, pages allocated without a key; recovery;
 * inspection; L3 existence queries over the rings to a service process.
 *
 * Every index, count and slot number a process reads from the segment
 * must be bounds-checked where it is used: the ranks get errors (negative
 * errnos), never a crash (the parent fails the test on any signal, and
 * under ASan or UBSan on any report, which exits nonzero), never a hang
 * (each rank finishes within a deadline, or the parent shows its stack,
 * kills it and fails the test; the service must stop on SIGTERM), and
 * never write outside their arrays: every array handed to the library is
 * a heap block with canary words before and after it (ASan catches what
 * lands further out), and whatever the library answers must be in range
 * (counts up to the keys asked, handles naming pages of the pool, skip
 * reasons the API defines).  Afterwards hc_pool_check must name the damage.
 *
 * Most writes are undone a few writes later (damage that comes and goes,
 * so the ranks keep reaching deep paths with it); the rest stay.  The
 * rounds write at three rates.  Each round's seed is printed;
 * HC_SCRIBBLE_SEED=N runs the rounds from N (the processes' interleaving
 * still varies from run to run); HC_SCRIBBLE_VERBOSE=1 shows the first
 * errors of each kind and every violation the checks find.
 *
 * What the scribbler leaves alone, and why: the robust mutexes (a rank
 * slot's first 40 bytes, the control block's locks, the service's life):
 * glibc follows a robust mutex's list pointers at unlock, so a scribbled
 * one is beyond what any bounds check can defend; the header before
 * meta_digest, which every attach checks against its digest; envelopes,
 * which are data, not tables.
 */
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hicache/service.h>

#include "hct.h"

#define NPAGES      16
#define MAX_RANKS   8
#define TICKET_KEYS 8
#define RANKS       3 /* 0, 1: engine 1 (TP 2); 2: engine 2 (TP 1) */
#define NCHAIN      6
#define CHAIN       4 /* keys per chain: at most CHAIN keys a call */
#define ROUNDS      3
#define RUN_MS      700  /* each rank's loop, per round */
#define GRACE_MS    6000 /* after RUN_MS: its last call, detach and exit */
#define TICKET_MS   100
#define QUAR_MS     20
/* Between two writes, by round (pacing only: it orders nothing): from a
 * few hundred writes a round, which leaves the ranks mostly working on a
 * damaged pool, to thousands, which leaves little undamaged. */
static const long scribble_us[ROUNDS] = { 1000, 200, 40 };
#define GUARD        4 /* canary words each side of an array */
#define CANARY       UINT64_C(0xcafef00dd15ea5e5)
#define DEFAULT_SEED UINT64_C(20240611)

enum op {
	OP_IDLE,
	OP_STORE,
	OP_LOOKUP,
	OP_LOCK,
	OP_TICKETS,
	OP_EVICT,
	OP_EVICT_KEY,
	OP_FREE,
	OP_ANON,
	OP_RECOVER,
	OP_INFO,
	OP_L3,
	OP_DETACH,
	OP__COUNT
};
static const char *const op_names[OP__COUNT] = { "idle", "store", "lookup",  "lock", "tickets",    "evict", "evict_key",
						 "free", "anon",  "recover", "info", "L3 request", "detach" };

struct shared {
	_Atomic int ready[RANKS]; /* attached and joined */
	_Atomic int go;           /* the parent: loops start */
	_Atomic int stop;         /* the parent: the scribbler stops */
	_Atomic int scribbler_ready;
	_Atomic uint32_t progress[2];     /* the TP pair's request under way */
	_Atomic int op_now[RANKS];        /* what each rank is in: a hang's message */
	_Atomic uint64_t op_since[RANKS]; /* since when (ms) */
	_Atomic uint64_t slowest[RANKS];  /* the longest op (ms) << 8 | op */
	_Atomic uint64_t ops[RANKS], errs[RANKS], writes;
	_Atomic uint64_t errno_seen[RANKS][136];
	_Atomic uint32_t bad; /* caller-visible violations */
	char why[512];
};

static struct shared *sh;
static hc_key_t chains[NCHAIN][CHAIN];
static uint64_t round_seed;
static int round_no;

/* ---- randomness: splitmix64, one stream per process */

static uint64_t next(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static unsigned below(uint64_t *s, unsigned n)
{
	return (unsigned)(next(s) % n);
}

static uint64_t now_ms(void)
{
	return (uint64_t)(hct_now() * 1e3);
}

/* ---- what ranks check */

static void bad(int w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad(int w, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int len;

	len = snprintf(line, sizeof(line), "rank %d: ", w);
	va_start(ap, fmt);
	vsnprintf(line + len, sizeof(line) - (size_t)len, fmt, ap);
	va_end(ap);
	if (atomic_fetch_add(&sh->bad, 1) == 0)
		memcpy(sh->why, line, sizeof(sh->why));
	fprintf(stderr, "scribble: %s\n", line);
}

/* A call's result: a count up to max, or a negative errno.  1 if it is a
 * success the caller may use. */
static int result(int w, int ret, int max, const char *what)
{
	if (ret >= 0 && ret <= max)
		return 1;
	if (ret < 0 && ret >= -4095) {
		atomic_fetch_add(&sh->errs[w], 1);
		if (-ret < 136 && atomic_fetch_add(&sh->errno_seen[w][-ret], 1) < 3 && getenv("HC_SCRIBBLE_VERBOSE"))
			fprintf(stderr, "scribble: rank %d: %s: %d %s\n", w, what, ret, hc_last_error());
		if (!hc_last_error()[0])
			bad(w, "%s: %d with no error message", what, ret);
		return 0;
	}
	bad(w, "%s returned %d: neither a count up to %d nor a negative errno", what, ret, max);
	return 0;
}

/* A heap block with canaries: [GUARD words][n elements, rounded up to
 * words][GUARD words], every byte canary until the library writes. */
struct guarded {
	uint64_t *mem;
	size_t words, used; /* all of it, and the bytes the library may write */
};

static void *guard_new(struct guarded *g, unsigned n, size_t esize)
{
	size_t inner = ((size_t)n * esize + 7) / 8;

	g->words = 2 * GUARD + inner;
	g->used = (size_t)n * esize;
	g->mem = malloc(g->words * 8);
	if (!g->mem)
		abort();
	for (size_t i = 0; i < g->words; i++)
		g->mem[i] = CANARY;
	return g->mem + GUARD;
}

/* Every canary still there; frees the block. */
static void guard_end(int w, struct guarded *g, const char *what)
{
	const uint8_t *b = (const uint8_t *)(g->mem + GUARD), *c = (const uint8_t *)&(uint64_t){ CANARY };

	for (size_t i = 0; i < GUARD; i++) {
		if (g->mem[i] != CANARY)
			bad(w, "%s: the canary word %zu before the caller's array was overwritten (0x%llx)", what,
			    GUARD - i, (unsigned long long)g->mem[i]);
		if (g->mem[g->words - 1 - i] != CANARY)
			bad(w, "%s: the canary word %zu after the caller's array was overwritten (0x%llx)", what,
			    GUARD - i, (unsigned long long)g->mem[g->words - 1 - i]);
	}
	for (size_t i = g->used; i < (g->words - 2 * GUARD) * 8; i++)
		if (b[i] != c[i % 8])
			bad(w, "%s: byte %zu past the caller's %zu was written", what, i, g->used);
	free(g->mem);
}

/* A handle the library handed back: NONE, or a page of the pool with no
 * bits above its generation. */
static int handle_ok(int w, hc_page_t h, const char *what)
{
	if (h == HC_PAGE_NONE)
		return 1;
	if (HC_PAGE_ID(h) >= NPAGES || (h >> 54) != 0) {
		bad(w, "%s: handed back handle 0x%llx: page %u of a pool of %u, or bits past its generation", what,
		    (unsigned long long)h, HC_PAGE_ID(h), NPAGES);
		return 0;
	}
	return 1;
}

static int pages_ok(int w, const hc_page_t *pg, unsigned n, const uint8_t *skip, const char *what)
{
	int ok = 1;

	for (unsigned i = 0; i < n; i++) {
		ok &= handle_ok(w, pg[i], what);
		if (skip && skip[i] != 0 && skip[i] != HC_SKIP_READY && skip[i] != HC_SKIP_BUSY) {
			bad(w, "%s: skip[%u] is %u, which is no skip reason", what, i, skip[i]);
			ok = 0;
		}
	}
	return ok;
}

/* ---- the ranks' operations; every result is checked, no error is fatal */

struct rank {
	hc_pool *p;
	int w;
	uint64_t rng;
	hc_page_t anon[4];
	unsigned nanon;
};

static void store(struct rank *r, unsigned c, unsigned n)
{
	struct guarded gp, gs;
	hc_page_t *pg = guard_new(&gp, n, sizeof(*pg));
	uint8_t *skip = guard_new(&gs, n, 1);
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = chains[c], .nkeys = n };
	int m = hc_reserve(r->p, &rq, pg, skip);

	if (result(r->w, m, (int)n, "reserve") && pages_ok(r->w, pg, n, skip, "reserve")) {
		int abort_all = below(&r->rng, 8) == 0;

		for (unsigned i = 0; i < n; i++) {
			if (skip[i] || pg[i] == HC_PAGE_NONE)
				continue;
			if (abort_all)
				result(r->w, hc_page_abort(r->p, &pg[i], 1), 1, "abort");
			else
				result(r->w, hct_fill_commit_all(r->p, pg[i]), 1, "commit");
		}
	}
	guard_end(r->w, &gp, "reserve pages");
	guard_end(r->w, &gs, "reserve skip");
}

static void lookup(struct rank *r, unsigned c, unsigned n, int lock)
{
	struct guarded gp;
	hc_page_t *pg = guard_new(&gp, n, sizeof(*pg));
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req),
				    .keys = chains[c],
				    .nkeys = n,
				    .flags = HC_LOOKUP_PIN };
	int h = hc_lookup(r->p, &rq, pg);

	if (result(r->w, h, (int)n, "lookup") && pages_ok(r->w, pg, n, NULL, "lookup")) {
		if (lock && h > 0 && pg[0] != HC_PAGE_NONE && result(r->w, hc_page_lock(r->p, pg[0]), 0, "lock"))
			result(r->w, hc_page_unlock(r->p, pg[0]), 0, "unlock");
		for (int i = 0; i < h; i++)
			if (pg[i] != HC_PAGE_NONE)
				result(r->w, hc_page_unpin(r->p, pg[i]), 0, "unpin");
	}
	guard_end(r->w, &gp, "lookup pages");
}

/* A ticket handle between canaries too: the library writes it whole. */
struct tk_box {
	uint64_t pre[GUARD];
	hc_ticket t;
	uint64_t post[GUARD];
};

static void box_init(struct tk_box *b)
{
	memset(b, 0xa5, sizeof(*b));
	b->t.size = sizeof(b->t);
	for (int i = 0; i < GUARD; i++)
		b->pre[i] = b->post[i] = CANARY;
}

static void box_check(int w, const struct tk_box *b, const char *what)
{
	for (int i = 0; i < GUARD; i++)
		if (b->pre[i] != CANARY || b->post[i] != CANARY)
			bad(w, "%s: a canary around the ticket handle was overwritten", what);
}

/* A request as every rank of an engine runs it: a ticket lookup, then a
 * ticket reservation of what it missed, filled with this rank's shards. */
static void tickets(struct rank *r, const char *id, unsigned c, unsigned n, uint32_t shards)
{
	struct hc_ticket_name ln = { .size = sizeof(struct hc_ticket_name), .request_id = id, .step = 0 },
			      rn = { .size = sizeof(struct hc_ticket_name), .request_id = id, .step = 1 };
	struct hc_lookup_req lq = { .size = sizeof(struct hc_lookup_req), .keys = chains[c], .nkeys = n };
	struct guarded glp;
	hc_page_t *lp = guard_new(&glp, n, sizeof(*lp));
	struct tk_box lt, rt;
	int h, m;

	box_init(&lt);
	h = hc_ticket_lookup(r->p, &ln, &lq, lp, &lt.t);
	box_check(r->w, &lt, "ticket lookup");
	if (result(r->w, h, (int)n, "ticket lookup") && pages_ok(r->w, lp, n, NULL, "ticket lookup")) {
		if (lt.t.n > n)
			bad(r->w, "ticket lookup: the handle says %u pages for %u keys", lt.t.n, n);
		if ((unsigned)h < n) {
			unsigned k = n - (unsigned)h;
			struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req),
						     .keys = chains[c] + h,
						     .nkeys = k,
						     .first_depth = (uint32_t)h };
			struct guarded grp, grs;
			hc_page_t *rp = guard_new(&grp, k, sizeof(*rp));
			uint8_t *skip = guard_new(&grs, k, 1);

			box_init(&rt);
			m = hc_ticket_reserve(r->p, &rn, &rq, rp, skip, &rt.t);
			box_check(r->w, &rt, "ticket reserve");
			if (result(r->w, m, (int)k, "ticket reserve") &&
			    pages_ok(r->w, rp, k, skip, "ticket reserve")) {
				if (rt.t.n > k)
					bad(r->w, "ticket reserve: the handle says %u pages for %u keys", rt.t.n, k);
				for (unsigned i = 0; i < k; i++) {
					if (skip[i] || rp[i] == HC_PAGE_NONE)
						continue;
					for (uint32_t b = shards; b; b &= b - 1)
						hct_fill(r->p, rp[i], b & -b);
					result(r->w, hc_page_commit(r->p, rp[i], shards), 1, "ticket page commit");
				}
				result(r->w, hc_ticket_release(r->p, &rt.t), 0, "ticket reserve release");
				box_check(r->w, &rt, "ticket reserve release");
			}
			guard_end(r->w, &grp, "ticket reserve pages");
			guard_end(r->w, &grs, "ticket reserve skip");
		}
		result(r->w, hc_ticket_release(r->p, &lt.t), 0, "ticket lookup release");
		box_check(r->w, &lt, "ticket lookup release");
	}
	guard_end(r->w, &glp, "ticket lookup pages");
}

static void free_keyed(struct rank *r, unsigned c, unsigned n)
{
	struct guarded gp;
	hc_page_t *pg = guard_new(&gp, n, sizeof(*pg));
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = chains[c], .nkeys = n };
	int h = hc_lookup(r->p, &rq, pg);

	if (result(r->w, h, (int)n, "lookup (no pin)") && pages_ok(r->w, pg, n, NULL, "lookup (no pin)") && h > 0)
		result(r->w, hc_page_free(r->p, &pg[h - 1], 1), 1, "free");
	guard_end(r->w, &gp, "lookup (no pin) pages");
}

static void anon(struct rank *r)
{
	if (r->nanon && below(&r->rng, 2)) {
		hc_page_t pg = r->anon[--r->nanon];
		result(r->w, hc_page_free(r->p, &pg, 1), 1, "free of our own page");
		return;
	}
	if (r->nanon < 4) {
		struct guarded gp;
		hc_page_t *pg = guard_new(&gp, 1, sizeof(*pg));

		if (result(r->w, hc_page_alloc(r->p, 1, 3, pg), 1, "alloc") && pages_ok(r->w, pg, 1, NULL, "alloc") &&
		    pg[0] != HC_PAGE_NONE) {
			result(r->w, hct_fill_commit_all(r->p, pg[0]), 1, "commit of our own page");
			r->anon[r->nanon++] = pg[0];
		}
		guard_end(r->w, &gp, "alloc pages");
	}
}

static void inspect(struct rank *r)
{
	struct hc_page_info pi;
	struct hc_stats st;
	struct hc_rank_info ri;
	uint64_t counts[HC_PAGE__COUNT];

	result(r->w, hc_page_info(r->p, below(&r->rng, NPAGES + 2), &pi, sizeof(pi)), 0, "page info");
	result(r->w, hc_pool_stats(r->p, &st, sizeof(st)), 0, "stats");
	result(r->w, hc_pool_rank(r->p, below(&r->rng, MAX_RANKS + 2), &ri, sizeof(ri)), 0, "rank info");
	result(r->w, hc_pool_count_states(r->p, counts, HC_PAGE__COUNT), HC_PAGE__COUNT, "count states");
}

/* The request path: an existence query through the rings to the service
 * (its backend is an empty file store: a miss), its completion back. */
static void l3(struct rank *r, unsigned c, unsigned n)
{
	hc_req *rq = NULL;

	if (result(r->w, hc_req_exists(r->p, chains[c], n, &rq), 0, "L3 exists") && rq) {
		result(r->w, hc_req_wait(rq, 20), (int)n, "L3 exists wait");
		result(r->w, hc_req_free(rq), 0, "L3 request free");
	}
}

static void set_op(struct rank *r, enum op op)
{
	uint64_t now = now_ms(), took = now - atomic_load(&sh->op_since[r->w]);

	if (atomic_load(&sh->op_since[r->w]) &&
	    (took << 8 | (unsigned)atomic_load(&sh->op_now[r->w])) > atomic_load(&sh->slowest[r->w]))
		atomic_store(&sh->slowest[r->w], took << 8 | (unsigned)atomic_load(&sh->op_now[r->w]));
	atomic_store(&sh->op_now[r->w], op);
	atomic_store(&sh->op_since[r->w], now);
}

/* One operation that is not a TP request. */
static void single_op(struct rank *r)
{
	unsigned c = below(&r->rng, NCHAIN), n = 1 + below(&r->rng, CHAIN), x = below(&r->rng, 100);
	struct hc_recovery_report rep;

	if (x < 22) {
		set_op(r, OP_STORE);
		store(r, c, n);
	} else if (x < 42) {
		set_op(r, OP_LOOKUP);
		lookup(r, c, n, 0);
	} else if (x < 50) {
		set_op(r, OP_LOCK);
		lookup(r, c, n, 1);
	} else if (x < 58) {
		set_op(r, OP_EVICT);
		result(r->w, hc_evict(r->p, 1 + below(&r->rng, 3)), 3, "evict");
	} else if (x < 63) {
		set_op(r, OP_EVICT_KEY);
		result(r->w, hc_evict_key(r->p, chains[c][n - 1]), 1, "evict key");
	} else if (x < 71) {
		set_op(r, OP_FREE);
		free_keyed(r, c, n);
	} else if (x < 83) {
		set_op(r, OP_ANON);
		anon(r);
	} else if (x < 88) {
		set_op(r, OP_RECOVER);
		result(r->w, hc_pool_recover(r->p, &rep, sizeof(rep)), 0, "recover");
	} else if (x < 92) {
		set_op(r, OP_L3);
		l3(r, c, n);
	} else if (r->w == 2) {
		char id[48];
		set_op(r, OP_TICKETS);
		snprintf(id, sizeof(id), "solo-%llu", (unsigned long long)next(&r->rng));
		tickets(r, id, c, n, 1 | 2 | HC_SHARD_REPLICATED);
	} else {
		set_op(r, OP_INFO);
		inspect(r);
	}
	atomic_fetch_add(&sh->ops[r->w], 1);
}

static void rank_main(hc_pool *p, void *arg)
{
	struct rank r = { .p = p, .w = (int)(intptr_t)arg };
	struct hc_engine_spec es = { .size = sizeof(struct hc_engine_spec),
				     .engine_id = r.w < 2 ? 1 : 2,
				     .tp_size = r.w < 2 ? 2 : 1,
				     .tp_rank = r.w < 2 ? (uint32_t)r.w : 0,
				     .quota_pages = HC_QUOTA_UNLIMITED,
				     .ticket_timeout_ms = TICKET_MS };
	uint64_t start = now_ms(), end;
	int ret;

	r.rng = round_seed * 1000 + (uint64_t)r.w;
	if ((ret = hc_engine_join(p, &es)) < 0) { /* before any scribble: must work */
		bad(r.w, "engine join: %d %s", ret, hc_last_error());
		return;
	}
	atomic_store(&sh->ready[r.w], 1);
	while (!atomic_load(&sh->go)) {
		if (now_ms() - start > 20000) {
			bad(r.w, "the parent never said go");
			return;
		}
		sched_yield();
	}
	end = now_ms() + RUN_MS;
	for (uint32_t i = 1; now_ms() < end; i++) {
		if (r.w < 2) {
			/* The pair keeps in step, for a while: a partner that fell
			 * behind (or whose tickets failed) only costs expiries. */
			char id[48];
			uint64_t x = next(&(uint64_t){ round_seed ^ i });
			uint64_t t0 = now_ms();

			set_op(&r, OP_IDLE);
			while (atomic_load(&sh->progress[1 - r.w]) + 1 < i && now_ms() - t0 < 20 && now_ms() < end)
				sched_yield();
			atomic_store(&sh->progress[r.w], i);
			snprintf(id, sizeof(id), "pair-%u", i);
			set_op(&r, OP_TICKETS);
			tickets(&r, id, (unsigned)(x % NCHAIN), 1 + (unsigned)(x >> 8) % CHAIN,
				r.w == 0 ? 1 | HC_SHARD_REPLICATED : 2);
			atomic_fetch_add(&sh->ops[r.w], 1);
		}
		single_op(&r);
	}
	while (r.nanon)
		hc_page_free(p, &r.anon[--r.nanon], 1);
	set_op(&r, OP_DETACH);
}

/* ---- the scribbler */

/*
 * Most writes are transient: the old value goes back a few writes later
 * (by compare-and-swap, so a rank's update since then stays), as when a
 * stray writer's damage is overwritten.  The pool stays usable enough that
 * ranks keep reaching deep paths with damaged values, instead of stopping
 * at ENOSPC once every page carries a stray hold.  The rest stay.
 */
#define UNDO 16
struct undo {
	void *at;
	unsigned width; /* 4 or 8; 0: empty */
	uint64_t old, now;
};

struct scrib {
	hc_pool *p;
	uint64_t rng;
	struct undo undo[UNDO];
	unsigned next_undo;
	int transient; /* the next write is undone for sure */
};

static struct scrib *scr; /* the scribbler's, for put32 and put64 */

static uint64_t nasty(struct scrib *s)
{
	const struct hc_pool *p = s->p;
	const uint64_t v[] = { 0,
			       1,
			       2,
			       UINT32_MAX,
			       UINT64_MAX,
			       UINT32_MAX - 1,
			       p->g.max_ranks,
			       p->g.max_ranks + 1,
			       p->g.max_ranks - 1,
			       127,
			       128,
			       p->g.npages,
			       p->g.npages + 1,
			       p->g.npages - 1,
			       p->g.max_tickets,
			       p->g.max_tickets + 1,
			       p->g.ticket_keys,
			       p->g.ticket_keys + 1,
			       HC_INDEX_STRIPES,
			       HC_TICKET_STRIPES,
			       UINT32_C(1) << 31,
			       INT32_MIN,
			       0xffff,
			       0x10000,
			       UINT64_C(1) << 63,
			       (uint64_t)-4096,
			       HC_TP_MAX,
			       HC_TP_MAX + 1,
			       p->g.index_buckets };

	return v[below(&s->rng, sizeof(v) / sizeof(v[0]))];
}

/* Mostly nasty values, else random bits. */
static uint64_t value(struct scrib *s)
{
	return below(&s->rng, 3) ? nasty(s) : next(&s->rng);
}

/* Put back the oldest transient write's value, if it is still ours. */
static void undo_one(struct undo *u)
{
	if (u->width == 4) {
		uint32_t want = (uint32_t)u->now;
		__atomic_compare_exchange_n((uint32_t *)u->at, &want, (uint32_t)u->old, 0, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
	} else if (u->width == 8) {
		uint64_t want = u->now;
		__atomic_compare_exchange_n((uint64_t *)u->at, &want, u->old, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	}
	u->width = 0;
}

static void remember(void *at, unsigned width, uint64_t old, uint64_t now)
{
	struct undo *u = &scr->undo[scr->next_undo++ % UNDO];

	undo_one(u);
	if (below(&scr->rng, 4) || scr->transient)
		*u = (struct undo){ at, width, old, now };
	scr->transient = 0;
}

static void put32(void *at, uint32_t v)
{
	remember(at, 4, __atomic_exchange_n((uint32_t *)at, v, __ATOMIC_RELAXED), v);
}

static void put64(void *at, uint64_t v)
{
	remember(at, 8, __atomic_exchange_n((uint64_t *)at, v, __ATOMIC_RELAXED), v);
}

/* A rank slot: a live one half the time (where the damage meets probes of
 * a live holder), else one of the table, else anything 7 bits hold. */
static unsigned some_slot(struct scrib *s)
{
	const struct hc_pool *p = s->p;
	unsigned x = below(&s->rng, 4);

	if (x < 2)
		for (unsigned i = 0, k = below(&s->rng, p->g.max_ranks); i < p->g.max_ranks; i++)
			if (atomic_load(&p->ranks[(k + i) % p->g.max_ranks].state) == HC_RANK_LIVE)
				return (k + i) % p->g.max_ranks;
	return x == 2 ? below(&s->rng, p->g.max_ranks) : (unsigned)(nasty(s) & 0x7f);
}

/* A page word: a field changed and the generation kept (so handles still
 * match it), or any word at all. */
static uint64_t page_word(struct scrib *s, uint64_t w)
{
	unsigned st = hc__w_state(w), owner = hc__w_owner(w);
	uint32_t gen = hc__w_gen(w), aux = hc__w_aux(w);

	switch (below(&s->rng, 5)) {
	case 0:
		st = below(&s->rng, 8);
		break;
	case 1:
		owner = some_slot(s);
		break;
	case 2:
		aux = (uint32_t)value(s);
		break;
	case 3:
		return next(&s->rng);
	default: /* FREEING, as a freer mid-way leaves it: holders wait it out */
		st = HC_PAGE_FREEING;
		owner = some_slot(s);
		aux = below(&s->rng, 2) ? hc__freeing_aux(owner, 0) : aux;
	}
	return hc__w_make(st, owner, gen, aux);
}

static void scribble_page(struct scrib *s)
{
	struct hc_seg_page *pg = &s->p->pages[below(&s->rng, NPAGES)];

	switch (below(&s->rng, 8)) {
	case 0:
	case 1:
	case 2:
		put64(&pg->word, page_word(s, atomic_load(&pg->word)));
		break;
	case 3:
		put32(&pg->presence, (uint32_t)value(s));
		break;
	case 4:
		put32(&pg->depth, (uint32_t)value(s));
		break;
	case 5:
		put64(&pg->key[below(&s->rng, 4)], next(&s->rng));
		break;
	case 6:
		put32(&pg->flags,
		      below(&s->rng, 2) ? (uint32_t)value(s) : atomic_load(&pg->flags) ^ (1u << below(&s->rng, 32)));
		break;
	default:
		if (below(&s->rng, 2))
			put64(&pg->stamp, value(s));
		else
			put32(&pg->hits, (uint32_t)value(s));
	}
}

static void scribble_holds(struct scrib *s)
{
	const struct hc_pool *p = s->p;
	uint32_t id = below(&s->rng, NPAGES);

	if (below(&s->rng, 3)) {
		static const uint32_t v[] = { 0, 1, 0xffff, 0x10000, 0xffff0000u, UINT32_MAX, 2 };
		put32(&hc__pin_row(p, id)[below(&s->rng, p->g.max_ranks)],
		      below(&s->rng, 2) ? v[below(&s->rng, 7)] : (uint32_t)next(&s->rng));
	} else {
		_Atomic uint64_t *tw = &hc__tmask_row(p, id)[below(&s->rng, p->tmask_words)];
		put64(tw, below(&s->rng, 4) ? atomic_load(tw) ^ UINT64_C(1) << below(&s->rng, 64) : next(&s->rng));
	}
}

static void scribble_index(struct scrib *s)
{
	const struct hc_pool *p = s->p;
	uint64_t nent = (uint64_t)p->g.index_buckets * HC_BUCKET_ENTRIES;
	uint64_t i = next(&s->rng) % nent, e = atomic_load(&p->index[i]);

	switch (below(&s->rng, 4)) {
	case 0: /* the same tag, another page id, maybe past the pool */
		put64(&p->index[i], (e & ~UINT64_C(0xffffffff)) |
					    (uint32_t)(below(&s->rng, 2) ? nasty(s) : 1 + below(&s->rng, NPAGES)));
		break;
	case 1: { /* an entry a lookup of a live page's key meets first, naming another page */
		struct hc__khash kh;
		uint32_t id = below(&s->rng, NPAGES);
		hc__page_khash(p, id, &kh);
		put64(&p->index[(size_t)(below(&s->rng, 2) ? kh.b1 : kh.b2) * HC_BUCKET_ENTRIES +
				below(&s->rng, HC_BUCKET_ENTRIES)],
		      (uint64_t)kh.tag << 32 | (uint32_t)(below(&s->rng, 2) ? nasty(s) : 1 + below(&s->rng, NPAGES)));
		break;
	}
	case 2:
		put64(&p->index[i], next(&s->rng));
		break;
	default:
		put64(&p->index[i], 0);
	}
}

static void scribble_ticket(struct scrib *s)
{
	const struct hc_pool *p = s->p;
	unsigned t = below(&s->rng, p->g.max_tickets);
	struct hc_seg_ticket *r = &p->tickets[t];
	uint64_t w = atomic_load(&r->word);

	switch (below(&s->rng, 10)) {
	case 0: /* state and owner, the generation kept */
		put64(&r->word, hc__tk_with(w, below(&s->rng, 8), some_slot(s)));
		break;
	case 1: /* shares and the expired bit */
		put64(&r->word,
		      (w & ~(HC_TK_CLAIMED | HC_TK_EXPIRED)) | (next(&s->rng) & (HC_TK_CLAIMED | HC_TK_EXPIRED)));
		break;
	case 2:
	case 3:
		put32(&r->n, (uint32_t)value(s));
		break;
	case 4:
		put32(below(&s->rng, 2) ? &r->nkeys : &r->tp_size, (uint32_t)value(s));
		break;
	case 5:
		put32(&r->kind, (uint32_t)value(s));
		break;
	case 6:
		put32(&r->result, below(&s->rng, 2) ? (uint32_t)INT32_MIN : (uint32_t)value(s));
		break;
	case 7:
		put64(&r->deadline_ms, below(&s->rng, 2) ? 0 : UINT64_MAX);
		break;
	case 8:
		put32(below(&s->rng, 2) ? (void *)&r->engine : (void *)&r->incarnation, (uint32_t)value(s));
		break;
	default: { /* its page list */
		_Atomic uint64_t *list = p->tpages + (size_t)t * p->g.ticket_keys;
		unsigned i = below(&s->rng, p->g.ticket_keys);
		uint64_t e = atomic_load(&list[i]);
		switch (below(&s->rng, 5)) {
		case 0:
			put64(&list[i], HC_PAGE_MAKE((uint32_t)nasty(s), HC_PAGE_GEN(e)));
			break;
		case 1:
			put64(&list[i],
			      (uint64_t)(1 + below(&s->rng, 255)) << HC_TP_SKIP_SHIFT | (e & 0xffffffffffffffu));
			break;
		case 2:
			put64(&list[i], e ^ (UINT64_C(1) << below(&s->rng, 64)));
			break;
		case 3:
			put64(&list[i], HC_PAGE_NONE);
			break;
		default:
			put64(&list[i], next(&s->rng));
		}
	}
	}
}

/* The rank table past each slot's mutex. */
static void scribble_rank(struct scrib *s)
{
	const struct hc_pool *p = s->p;
	struct hc_seg_rank *r = &p->ranks[some_slot(s) % p->g.max_ranks];

	switch (below(&s->rng, 10)) {
	case 0:
		put32(&r->state, below(&s->rng, 2) ? below(&s->rng, 4) : (uint32_t)value(s));
		break;
	case 1:
		s->transient = 1; /* a rank refuses tickets while its own membership is damaged */
		put32(&r->engine, (uint32_t)value(s));
		break;
	case 2:
		s->transient = 1;
		put32(&r->tp, below(&s->rng, 2) ? (uint32_t)value(s)
						: (uint32_t)(below(&s->rng, 40) << 16 | below(&s->rng, 70)));
		break;
	case 3:
		put32(&r->quota, (uint32_t)value(s));
		break;
	case 4:
		s->transient = 1;
		put32(&r->timeout_ms, below(&s->rng, 2) ? UINT32_MAX : (uint32_t)value(s));
		break;
	case 5:
		put32(&r->held, (uint32_t)value(s));
		break;
	case 6:
		s->transient = 1;
		put32(&r->incarnation, (uint32_t)value(s));
		break;
	case 7:
		put32(&r->holder_tid, (uint32_t)value(s));
		break;
	case 8:
		put32(below(&s->rng, 2) ? &r->pid : &r->epoch, (uint32_t)value(s));
		break;
	default:
		put64(&r->attached_unix_ns, value(s));
	}
}

static void scribble_ctl(struct scrib *s)
{
	const struct hc_pool *p = s->p;
	struct hc_seg_ctl *c = p->ctl;

	switch (below(&s->rng, 9)) {
	case 0:
		put32(&c->clock_hand, (uint32_t)value(s));
		break;
	case 1:
		put64(&c->lru_clock, value(s));
		break;
	case 2:
		put64(&c->ticket_seq, value(s));
		break;
	case 3:
		put32(&c->engine_seq, (uint32_t)value(s));
		break;
	case 4:
		put32(&c->service.write_policy, below(&s->rng, 2) ? below(&s->rng, 6) : (uint32_t)value(s));
		break;
	case 5:
		put32(&c->service.select_hits, (uint32_t)value(s));
		break;
	case 6:
		put32(below(&s->rng, 2) ? &c->service.bell.sleepers : &c->service.bell.seq, (uint32_t)value(s));
		break;
	case 7:
		put32(&p->hdr->slots_hwm, (uint32_t)(below(&s->rng, 2) ? nasty(s) : below(&s->rng, MAX_RANKS + 2)));
		break;
	default: { /* a stats word of any row */
		size_t words = (size_t)(p->g.max_ranks + 1) * HC_STATS_ROW_WORDS;
		put64(&p->stats[next(&s->rng) % words], value(s));
	}
	}
}

/* The request path: ring indices and geometry, the entries themselves
 * (requests the service reads, completions the rank reads), and the
 * argument area the service copies keys from. */
static void scribble_ring(struct scrib *s)
{
	const struct hc_pool *p = s->p;
	uint8_t *blk = p->rings + (uint64_t)some_slot(s) % p->g.max_ranks * p->g.rg.block;
	int sq = below(&s->rng, 2);
	struct hc_ring *r = (struct hc_ring *)(blk + (sq ? p->g.rg.sq_off : p->g.rg.cq_off));
	uint32_t n = sq ? p->g.sq_entries : p->g.cq_entries, esize = sq ? HC_SQE_BYTES : HC_CQE_BYTES;

	switch (below(&s->rng, 7)) {
	case 4:
	case 5: { /* a word of an entry: op, epoch, user_data, arg_off, n and arg_len; result, epoch */
		uint8_t *e = (uint8_t *)(r + 1) + (size_t)below(&s->rng, n) * esize + 8 * below(&s->rng, esize / 8);
		put64(e, below(&s->rng, 2)
				 ? value(s)
				 : atomic_load((_Atomic uint64_t *)(void *)e) ^ (UINT64_C(1) << below(&s->rng, 64)));
		break;
	}
	case 6: /* the argument area */
		put64(blk + p->g.rg.arg_off + 8 * below(&s->rng, (unsigned)(p->g.arg_bytes / 8)), next(&s->rng));
		break;
	case 0:
		put32(&r->tail, (uint32_t)value(s));
		break;
	case 1:
		put32(&r->head, (uint32_t)value(s));
		break;
	case 2:
		put32(&r->dropped, (uint32_t)value(s));
		break;
	default:
		put32(below(&s->rng, 2) ? &r->nentries : &r->entry_bytes, (uint32_t)value(s));
	}
}

static void scribble_one(struct scrib *s)
{
	unsigned x = below(&s->rng, 100);

	if (x < 24)
		scribble_page(s);
	else if (x < 38)
		scribble_holds(s);
	else if (x < 52)
		scribble_index(s);
	else if (x < 74)
		scribble_ticket(s);
	else if (x < 86)
		scribble_rank(s);
	else if (x < 95)
		scribble_ctl(s);
	else
		scribble_ring(s);
}

/* After the stop: damage the check must name, whatever the ranks left. */
static void final_damage(struct scrib *s)
{
	const struct hc_pool *p = s->p;
	struct hc_seg_page *pg = &p->pages[below(&s->rng, NPAGES)];
	uint64_t w = atomic_load(&pg->word);

	for (unsigned i = 0; i < UNDO; i++)
		undo_one(&s->undo[i]);
	atomic_store(&pg->word, hc__w_make(5 + below(&s->rng, 3), hc__w_owner(w), hc__w_gen(w), hc__w_aux(w)));
	atomic_store(&p->index[next(&s->rng) % ((uint64_t)p->g.index_buckets * HC_BUCKET_ENTRIES)],
		     (uint64_t)0x5c << 32 | (p->g.npages + 1 + below(&s->rng, 1000)));
	for (int i = 0; i < 32; i++)
		scribble_one(s);
	for (unsigned i = 0; i < UNDO; i++)
		s->undo[i].width = 0; /* what the last writes did stays */
}

static void __attribute__((noreturn)) scribbler(const char *name)
{
	struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts),
				    .flags = HC_ATTACH_ADMIN | HC_ATTACH_NO_RECOVER | HC_ATTACH_NO_POPULATE };
	struct scrib s = { .rng = round_seed * 1000 + 999 };
	struct timespec pace = { 0, scribble_us[round_no] * 1000 };
	uint64_t start = now_ms();
	hc_pool *p;

	if (hc_pool_attach(name, &o, &p) < 0) {
		fprintf(stderr, "scribble: scribbler: attach: %s\n", hc_last_error());
		_exit(100);
	}
	s.p = p;
	scr = &s;
	atomic_store(&sh->scribbler_ready, 1);
	while (!atomic_load(&sh->go) && now_ms() - start < 20000)
		sched_yield();
	while (!atomic_load(&sh->stop) && now_ms() - start < 60000) {
		scribble_one(&s);
		atomic_fetch_add(&sh->writes, 1);
		nanosleep(&pace, NULL);
	}
	final_damage(&s);
	hc_pool_detach(p);
	_exit(0);
}

/* ---- the parent */

struct lines {
	int n, damage;
	char first[4][256];
};

static void collect(void *arg, const char *line)
{
	struct lines *l = arg;

	if (l->n < 4)
		snprintf(l->first[l->n], sizeof(l->first[0]), "%s", line);
	if (getenv("HC_SCRIBBLE_VERBOSE"))
		fprintf(stderr, "violation: %s\n", line);
	l->n++;
	l->damage += strstr(line, "invalid state") != NULL || strstr(line, "out of range") != NULL;
}

static const char *name;
/* The ranks, the scribbler, the service; 0 once reaped. */
#define SCRIBBLER RANKS
#define SERVICE   (RANKS + 1)
static pid_t kids[RANKS + 2];

static void kill_kids(void)
{
	for (int i = 0; i < RANKS + 2; i++)
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], NULL, 0);
			kids[i] = 0;
		}
}

static void teardown(void);

/* Fail the round, with no process, pool or directory of it left behind
 * (a failed check ends the test process: the fixture's teardown would not
 * run).  The message is made first: it may quote the shared block. */
#define FAIL(...)                                                                                                      \
	do {                                                                                                           \
		char msg__[1024];                                                                                      \
		snprintf(msg__, sizeof(msg__), __VA_ARGS__);                                                           \
		teardown();                                                                                            \
		ck_abort_msg("%s", msg__);                                                                             \
	} while (0)

static uint64_t base_seed(void)
{
	const char *e = getenv("HC_SCRIBBLE_SEED");

	return e && *e ? strtoull(e, NULL, 0) : DEFAULT_SEED;
}

static void setup(void)
{
	name = NULL;
	memset(kids, 0, sizeof(kids));
	hct_sweep(0);
}

static void teardown(void)
{
	kill_kids();
	if (name)
		hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
	name = NULL;
	hct_l3_teardown();
	if (sh)
		munmap(sh, sizeof(*sh));
	sh = NULL;
}

START_TEST(scribble_while_ranks_work)
{
	struct hct_spec spec;
	struct hc_service_opts so = { .size = sizeof(struct hc_service_opts),
				      .backend = hct_l3_spec,
				      .write_policy = HC_WRITE_NONE,
				      .workers = 1 };
	struct lines live = { 0 }, quiet = { 0 };
	hc_pool *p;
	uint64_t t0, deadline;
	int st, alive, checks = 0;

	round_no = _i;
	round_seed = base_seed() + (uint64_t)_i;
	fprintf(stderr, "scribble: round %d: seed %llu (HC_SCRIBBLE_SEED=%llu replays these rounds)\n", _i,
		(unsigned long long)round_seed, (unsigned long long)base_seed());
	for (unsigned c = 0; c < NCHAIN; c++)
		hct_keys(chains[c], CHAIN, (uint32_t)(round_seed * 16 + c));
	name = hct_name();
	hct_spec_init(&spec, name, NPAGES);
	spec.spec.max_ranks = MAX_RANKS;
	spec.spec.quarantine_ms = QUAR_MS;
	spec.spec.ticket_keys = TICKET_KEYS;
	spec.spec.ring_entries = 8;
	spec.spec.arg_bytes = 4096;
	spec.spec.evict = (round_seed & 1) ? HC_EVICT_LRU : HC_EVICT_CLOCK;
	ck_assert_ok(hc_pool_create(&spec.spec));
	p = hct_attach(name, HC_ATTACH_ADMIN); /* no slot, no holder thread: forks cleanly */
	sh = hct_shared(sizeof(*sh));
	hct_l3_setup(); /* the service's backend: an empty file store */

	/* A service answers the ranks' L3 requests over the rings: a process
	 * of the library that must survive the damage too. */
	kids[SERVICE] = hct_service_child(name, &so);
	for (int w = 0; w < RANKS; w++)
		kids[w] = hct_spawn(name, rank_main, (void *)(intptr_t)w);
	if ((kids[SCRIBBLER] = fork()) == 0)
		scribbler(name);
	if (kids[SCRIBBLER] < 0)
		FAIL("fork: %s", strerror(errno));
	/* Everyone attached (ranks joined their engines) before any damage. */
	for (t0 = now_ms();;) {
		int all = atomic_load(&sh->scribbler_ready);
		for (int w = 0; w < RANKS; w++)
			all &= atomic_load(&sh->ready[w]);
		if (all)
			break;
		for (int i = 0; i < RANKS + 2; i++)
			if (waitpid(kids[i], &st, WNOHANG) == kids[i]) {
				kids[i] = 0;
				FAIL("%s %d ended (status 0x%x) before the scribbling started: %s",
				     i < RANKS        ? "rank"
				     : i == SCRIBBLER ? "scribbler"
						      : "service",
				     i, st, sh->why);
			}
		if (now_ms() - t0 > 15000)
			FAIL("the ranks did not attach and join within 15 s");
		usleep(1000);
	}
	atomic_store(&sh->go, 1);

	/* The ranks work against the deadline; the live check, too, must
	 * never trip on what it reads. */
	deadline = now_ms() + RUN_MS + GRACE_MS;
	do {
		alive = 0;
		if (waitpid(kids[SERVICE], &st, WNOHANG) == kids[SERVICE]) {
			kids[SERVICE] = 0;
			FAIL("the service ended (status 0x%x: %s %d) while the ranks ran", st,
			     WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		}
		for (int w = 0; w < RANKS; w++) {
			if (!kids[w])
				continue;
			if (waitpid(kids[w], &st, WNOHANG) == kids[w]) {
				kids[w] = 0;
				if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
					FAIL("rank %d %s %d (in %s): %s", w,
					     WIFSIGNALED(st) ? "was killed by signal" : "exited with",
					     WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
					     op_names[atomic_load(&sh->op_now[w])], sh->why);
				continue;
			}
			alive++;
		}
		if (alive && checks < 8) {
			int n = hc_pool_check(p, 0, collect, &live);
			if (n < -4095)
				FAIL("live check returned %d", n);
			checks++;
		}
		if (alive && now_ms() > deadline) {
			char hung[128] = "";
			for (int w = 0; w < RANKS; w++)
				if (kids[w]) {
					snprintf(hung + strlen(hung), sizeof(hung) - strlen(hung), " %d (in %s)", w,
						 op_names[atomic_load(&sh->op_now[w])]);
					kill(kids[w], SIGUSR2); /* hct_spawn's handler: its stack to stderr */
				}
			usleep(300 * 1000); /* for the stacks to come out, before the kill */
			FAIL("ranks%s still run %d ms after their loops' end: a hang", hung, GRACE_MS);
		}
		if (alive)
			usleep(2000);
	} while (alive);

	/* The service stops as asked (hc_service_stop), whatever it read,
	 * while the scribbler still writes; then the scribbler, whose last
	 * writes nobody recovers before the check. */
	kill(kids[SERVICE], SIGTERM);
	for (t0 = now_ms(); waitpid(kids[SERVICE], &st, WNOHANG) != kids[SERVICE];) {
		if (now_ms() - t0 > 10000)
			FAIL("the service did not stop within 10 s of SIGTERM");
		usleep(1000);
	}
	kids[SERVICE] = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		FAIL("the service ended with status 0x%x (%s %d)", st, WIFSIGNALED(st) ? "signal" : "exit",
		     WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	atomic_store(&sh->stop, 1);
	for (t0 = now_ms(); waitpid(kids[SCRIBBLER], &st, WNOHANG) != kids[SCRIBBLER];) {
		if (now_ms() - t0 > 10000)
			FAIL("the scribbler did not stop");
		usleep(1000);
	}
	kids[SCRIBBLER] = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		FAIL("the scribbler ended with status 0x%x", st);

	fprintf(stderr, "scribble: round %d: %llu writes; live checks %d (%d lines)\n", _i,
		(unsigned long long)atomic_load(&sh->writes), checks, live.n);
	for (int w = 0; w < RANKS; w++) {
		char errs[512] = "";
		for (int e = 1; e < 136; e++)
			if (atomic_load(&sh->errno_seen[w][e]))
				snprintf(errs + strlen(errs), sizeof(errs) - strlen(errs), " %d:%llu", e,
					 (unsigned long long)atomic_load(&sh->errno_seen[w][e]));
		fprintf(stderr, "scribble: rank %d: %llu ops, %llu errors (errno:count):%s; slowest op: %s, %llu ms\n",
			w, (unsigned long long)atomic_load(&sh->ops[w]), (unsigned long long)atomic_load(&sh->errs[w]),
			errs, op_names[atomic_load(&sh->slowest[w]) & 0xff],
			(unsigned long long)(atomic_load(&sh->slowest[w]) >> 8));
	}
	if (atomic_load(&sh->bad))
		FAIL("%u caller-visible violations; the first: %s", atomic_load(&sh->bad), sh->why);
	for (int w = 0; w < RANKS; w++)
		if (!atomic_load(&sh->ops[w]))
			FAIL("rank %d did nothing", w);
	if (!(atomic_load(&sh->errs[0]) + atomic_load(&sh->errs[1]) + atomic_load(&sh->errs[2])))
		FAIL("the ranks met no damage at all in %llu writes", (unsigned long long)atomic_load(&sh->writes));

	/* Quiescent now: the check names the damage, and does not trip on it. */
	st = hc_pool_check(p, HC_CHECK_QUIESCENT, collect, &quiet);
	fprintf(stderr, "scribble: round %d: the quiescent check found %d violation(s)%s%s%s%s%s%s%s%s\n", _i, st,
		quiet.n > 0 ? "; first: " : "", quiet.first[0], quiet.n > 1 ? " | " : "", quiet.first[1],
		quiet.n > 2 ? " | " : "", quiet.first[2], quiet.n > 3 ? " | " : "", quiet.first[3]);
	if (st < 1 || st != quiet.n || quiet.damage < 1)
		FAIL("the quiescent check returned %d with %d lines, %d naming the damage left (an invalid state, an id out of range): %s",
		     st, quiet.n, quiet.damage, st < 0 ? hc_last_error() : "");
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, HC_DESTROY_FORCE));
	name = NULL;
}
END_TEST

/* ---- one nasty value at a time: what the scribbler found, made by hand */

static hc_pool *pool; /* this process: a rank of engine 1, TP rank 0 */
static hc_key_t keys[2];
static hc_page_t kp[2]; /* keys' READY pages */

struct one {         /* what a child did, for the parent */
	char id[48]; /* the ticket's request id (the parent's) */
	int ret;
	double took;
	char msg[512];
};
static struct one *one;

static void join_engine(hc_pool *p, uint32_t rank)
{
	struct hc_engine_spec e = { .size = sizeof(struct hc_engine_spec),
				    .engine_id = 1,
				    .tp_size = 2,
				    .tp_rank = rank,
				    .quota_pages = HC_QUOTA_UNLIMITED,
				    .ticket_timeout_ms = 60000 };

	ck_assert_ok(hc_engine_join(p, &e));
}

static void one_setup(void)
{
	name = hct_name();
	pool = hct_create_attach(name, 8, 60000, 4);
	join_engine(pool, 0);
	hct_keys(keys, 2, 77);
	hct_store_by_key(pool, keys, 2, 0, kp);
	one = hct_shared(sizeof(*one));
	snprintf(one->id, sizeof(one->id), "one");
}

static void one_teardown(void)
{
	hc_pool_detach(pool);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
	name = NULL;
	munmap(one, sizeof(*one));
}

static void note(int ret, double t0)
{
	one->ret = ret;
	one->took = hct_now() - t0;
	snprintf(one->msg, sizeof(one->msg), "%s", ret < 0 ? hc_last_error() : "");
}

static void ticket_lookup_as_rank1(hc_pool *p, void *arg)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = one->id, .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 2 };
	hc_page_t pg[2];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	double t0;

	join_engine(p, 1);
	if (arg) /* the parent's holder TID, scribbled: its lock word names another thread now */
		atomic_store(&p->ranks[pool->slot].holder_tid, 12345);
	t0 = hct_now();
	note(hc_ticket_lookup(p, &tn, &rq, pg, &t), t0);
	if (one->ret >= 0)
		hc_ticket_release(p, &t);
}

static void reserve_as_rank1(hc_pool *p, void *arg)
{
	struct hc_ticket_name rn = { .size = sizeof(struct hc_ticket_name), .request_id = one->id, .step = 1 };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = (const hc_key_t *)arg, .nkeys = 2 };
	hc_page_t rp[2];
	uint8_t skip[2];
	hc_ticket t = { .size = sizeof(hc_ticket) };

	join_engine(p, 1);
	note(hc_ticket_reserve(p, &rn, &rr, rp, skip, &t), hct_now());
	if (one->ret >= 0)
		hc_ticket_release(p, &t);
}

/* A ticket's page that looks FREEING by a live slot whose lock word names
 * another thread: each probe of the freer waits HC_PROBE_RETRIES times, and
 * the joiner's hold took 2048 of them (half a minute); now a second. */
START_TEST(hold_waits_a_bounded_time)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = one->id, .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 2 };
	hc_page_t pg[2];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	_Atomic uint64_t *wp;
	uint64_t w;
	uint32_t tid;

	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pg, &t), 2); /* OPEN for TP rank 1 */
	wp = &pool->pages[HC_PAGE_ID(pg[0])].word;
	w = atomic_load(wp);
	tid = atomic_load(&pool->ranks[pool->slot].holder_tid);
	atomic_store(wp, hc__w_make(HC_PAGE_FREEING, (unsigned)pool->slot, hc__w_gen(w),
				    hc__freeing_aux((unsigned)pool->slot, 0)));
	ck_assert_int_eq(hct_in_child(name, ticket_lookup_as_rank1, (void *)1), 0);
	atomic_store(&pool->ranks[pool->slot].holder_tid, tid);
	atomic_store(wp, w);
	ck_assert_msg(one->ret == -EAGAIN && strstr(one->msg, "being freed"), "%d %s", one->ret, one->msg);
	ck_assert_msg(one->took < 5.0, "the join waited %.1f s for a page that stays FREEING", one->took);
	ck_assert_ok(hc_ticket_release(pool, &t));
	ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}
END_TEST

/* A free rank slot's lock word, scribbled with a thread that never held
 * it: no kernel will mark it owner-dead, so the slot was lost for good.
 * It showed as live (with the last, dead, pid), check and repair saw
 * nothing, and destroy refused without --force.  Now it is not live, check
 * names it, a repair leaves it (a claim stopped half way looks the same)
 * unless told the pool is quiescent, and then lets go of it: claimed again. */
START_TEST(free_slot_lock_scribbled)
{
	struct hc_seg_rank *r = &pool->ranks[3];
	struct hct_lines chk = { 0 }, fix = { 0 }, fixq = { 0 };
	struct hc_repair_report rep;
	struct hc_rank_info ri;
	hc_pool *more[3];

	ck_assert_int_eq(atomic_load(&r->state), HC_RANK_FREE);
	atomic_store(&r->pid, 999999);
	__atomic_store_n(&r->lock.__data.__lock, 0x2bad0001, __ATOMIC_RELEASE);
	ck_assert_ok(hc_pool_rank(pool, 3, &ri, sizeof(ri)));
	ck_assert_msg(ri.live == 0, "a free slot that nobody claimed shows as live (pid %u)", ri.pid);
	ck_assert_int_eq(hc_pool_check(pool, 0, hct_collect, &chk), 1);
	ck_assert_msg(strstr(chk.all, "rank slot 3: free, but its mutex is held by no rank (lock word 0x2bad0001)") &&
			      strstr(chk.all, "repair --quiescent"),
		      "%s", chk.all);
	ck_assert_int_eq(hc_pool_repair(pool, 0, &rep, sizeof(rep), hct_collect, &fix), 1);
	ck_assert_uint_eq(rep.slot_locks, 0);
	ck_assert_msg(strstr(fix.all, "cannot repair: rank slot 3: free, but"), "%s", fix.all);
	ck_assert_int_eq(__atomic_load_n(&r->lock.__data.__lock, __ATOMIC_ACQUIRE), 0x2bad0001);
	ck_assert_int_eq(hc_pool_repair(pool, HC_CHECK_QUIESCENT, &rep, sizeof(rep), hct_collect, &fixq), 0);
	ck_assert_uint_eq(rep.slot_locks, 1);
	ck_assert_msg(
		strstr(fixq.all, "fixed: rank slot 3: its mutex was held by no rank (lock word 0x2bad0001); let go"),
		"%s", fixq.all);
	for (unsigned i = 0; i < 3; i++) /* slots 1, 2 and 3: the last one is usable again */
		more[i] = hct_attach(name, 0);
	ck_assert_int_eq(more[2]->slot, 3);
	for (unsigned i = 0; i < 3; i++)
		hc_pool_detach(more[i]);
	ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}
END_TEST

/* A free slot's mutex whose kind is scribbled, so that glibc refuses it
 * (EINVAL): every recovery, and so every repair, failed on it.  A
 * quiescent repair makes it new. */
START_TEST(free_slot_mutex_unusable)
{
	struct hct_lines chk = { 0 }, fixq = { 0 };
	struct hc_repair_report rep;

	pool->ranks[2].lock.__data.__kind = 0x7fff1234;
	ck_assert_int_eq(hc_pool_check(pool, 0, hct_collect, &chk), 1);
	ck_assert_msg(strstr(chk.all, "rank slot 2: mutex unusable; 'hicache-pool repair --quiescent' makes it new"),
		      "%s", chk.all);
	ck_assert_int_eq(hc_pool_repair(pool, 0, &rep, sizeof(rep), NULL, NULL), -ENOTRECOVERABLE); /* recovery's */
	ck_assert_int_eq(hc_pool_repair(pool, HC_CHECK_QUIESCENT, &rep, sizeof(rep), hct_collect, &fixq), 0);
	ck_assert_uint_eq(rep.slot_locks, 1);
	ck_assert_msg(strstr(fixq.all, "fixed: rank slot 2: its mutex was unusable; made new"), "%s", fixq.all);
	ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}
END_TEST

/* A pool whose only locked slot is a scribbled free one has no live rank:
 * destroy needs no --force. */
START_TEST(destroy_past_a_scribbled_slot)
{
	const char *other = hct_name();
	hc_pool *p = hct_create_attach(other, 8, 60000, 4);

	__atomic_store_n(&p->ranks[2].lock.__data.__lock, 0x2bad0002, __ATOMIC_RELEASE);
	hc_pool_detach(p);
	ck_assert_msg(hc_pool_destroy(other, NULL, 0) == 0, "destroy: %s", hc_last_error());
}
END_TEST

/* This rank's own membership, scribbled: its TP rank is a shift count and
 * its timeout a wait.  Refused (UBSan saw the shift by 100), then fine
 * again once the slot says what the rank joined with. */
START_TEST(own_membership_scribbled)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = "mine", .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 2 };
	struct hc_seg_rank *me = &pool->ranks[pool->slot];
	_Atomic uint32_t *field[3] = { &me->tp, &me->timeout_ms, &me->engine };
	const uint32_t bad_value[3] = { 2u << 16 | 100, UINT32_MAX, 0 };
	hc_page_t pg[2];
	hc_ticket t = { .size = sizeof(hc_ticket) };

	for (int i = 0; i < 3; i++) {
		uint32_t was = atomic_exchange(field[i], bad_value[i]);
		ck_assert_err(hc_ticket_lookup(pool, &tn, &rq, pg, &t), EBADMSG);
		ck_assert_msg_has("the segment is corrupt");
		atomic_store(field[i], was);
	}
	tn.request_id = "mine-solo"; /* TP 1 of its own: no partner needed */
	ck_assert_ok(hc_engine_leave(pool));
	ck_assert_ok(hc_engine_join(pool, &(struct hc_engine_spec){ .size = sizeof(struct hc_engine_spec),
								    .engine_id = 3,
								    .tp_size = 1,
								    .quota_pages = HC_QUOTA_UNLIMITED }));
	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pg, &t), 2);
	ck_assert_ok(hc_ticket_release(pool, &t));
	ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}
END_TEST

/* A published ticket record, scribbled before the second rank joins: its
 * result (whose negation overflowed), a page entry with bits past its
 * generation, and a reservation's skip reason that is none. */
START_TEST(ticket_record_scribbled)
{
	struct hc_ticket_name tn = { .size = sizeof(struct hc_ticket_name), .request_id = one->id, .step = 0 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 2 };
	hc_page_t pg[2];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	struct hc_seg_ticket *r;
	_Atomic uint64_t *list;
	uint64_t e;

	ck_assert_int_eq(hc_ticket_lookup(pool, &tn, &rq, pg, &t), 2);
	r = &pool->tickets[t.index];
	list = pool->tpages + (size_t)t.index * pool->g.ticket_keys;
	e = atomic_exchange(&list[1], list[1] | UINT64_C(1) << 60);
	ck_assert_int_eq(hct_in_child(name, ticket_lookup_as_rank1, NULL), 0);
	ck_assert_msg(one->ret == -EBADMSG && strstr(one->msg, "no handle of a page"), "%d %s", one->ret, one->msg);
	atomic_store(&list[1], e);
	r->result = INT32_MIN;
	ck_assert_int_eq(hct_in_child(name, ticket_lookup_as_rank1, NULL), 0);
	ck_assert_msg(one->ret == -EBADMSG, "%d %s", one->ret, one->msg);
	ck_assert_ok(hc_ticket_release(pool, &t));
	ck_assert_ok(hc_engine_leave(pool)); /* the engine ends: so does the damaged ticket */

	/* a reservation ticket's skip reason */
	{
		struct hc_ticket_name rn = { .size = sizeof(struct hc_ticket_name), .request_id = one->id, .step = 1 };
		hc_key_t more[2];
		struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = more, .nkeys = 2 };
		hc_page_t rp[2];
		uint8_t skip[2];

		hct_keys(more, 2, 78);
		join_engine(pool, 0);
		ck_assert_int_eq(hc_ticket_reserve(pool, &rn, &rr, rp, skip, &t), 2);
		list = pool->tpages + (size_t)t.index * pool->g.ticket_keys;
		e = atomic_exchange(&list[0], UINT64_C(7) << HC_TP_SKIP_SHIFT);
		one->ret = 1;
		ck_assert_int_eq(hct_in_child(name, reserve_as_rank1, more), 0);
		ck_assert_msg(one->ret == -EBADMSG && strstr(one->msg, "no skip reason"), "%d %s", one->ret, one->msg);
		atomic_store(&list[0], e);
		ck_assert_ok(hc_page_abort(pool, rp, 2));
		ck_assert_ok(hc_ticket_release(pool, &t));
	}
}
END_TEST

/* A ring index the other side scribbled, then put back: refused while it
 * is wrong, and the ring goes on once it is right.  The view kept the
 * refused index: the consumer then took 32 garbage entries a call from a
 * ring of 16, without end. */
START_TEST(ring_index_scribbled_and_restored)
{
	const uint32_t n = 16, esize = 32;
	uint64_t bytes = hc__ring_bytes(n, esize);
	void *mem = calloc(1, bytes);
	struct hc__ring prod, cons;
	struct hc_ring *r = mem;
	uint32_t was;

	ck_assert_ptr_nonnull(mem);
	ck_assert_ok(hc__ring_init(mem, bytes, n, esize));
	ck_assert_ok(hc__ring_attach(&prod, mem, bytes, n, esize, HC_RING_PRODUCER));
	ck_assert_ok(hc__ring_attach(&cons, mem, bytes, n, esize, HC_RING_CONSUMER));
	ck_assert_int_eq(hc__ring_room(&prod, 3), 3);
	hc__ring_post(&prod, 3);

	was = atomic_exchange(&r->tail, 3 + 1000); /* past what the ring holds */
	ck_assert_err(hc__ring_avail(&cons, 32), EPROTO);
	ck_assert_err(hc__ring_avail(&cons, 32), EPROTO); /* again: nothing was trusted */
	atomic_store(&r->tail, was);
	ck_assert_int_eq(hc__ring_avail(&cons, 32), 3);
	hc__ring_release(&cons, 3);
	ck_assert_int_eq(hc__ring_avail(&cons, 32), 0);

	was = atomic_exchange(&r->head, 3 - 1000); /* the producer's side of it */
	ck_assert_err(hc__ring_room(&prod, (uint32_t)n), EPROTO);
	ck_assert_err(hc__ring_room(&prod, (uint32_t)n), EPROTO); /* by its last trusted head, 3 are unread */
	ck_assert_int_eq(hc__ring_room(&prod, 1), 1);             /* by the last head it trusted */
	atomic_store(&r->head, was);
	ck_assert_int_eq(hc__ring_room(&prod, (uint32_t)n), (int)n);
	free(mem);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("scribble");
	TCase *tc = tcase_create("hostile memory");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, scribble_while_ranks_work, 0, ROUNDS);
	suite_add_tcase(s, tc);
	tc = tcase_create("one at a time");
	tcase_add_checked_fixture(tc, one_setup, one_teardown);
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, hold_waits_a_bounded_time);
	tcase_add_test(tc, own_membership_scribbled);
	tcase_add_test(tc, ticket_record_scribbled);
	tcase_add_test(tc, ring_index_scribbled_and_restored);
	tcase_add_test(tc, free_slot_lock_scribbled);
	tcase_add_test(tc, free_slot_mutex_unusable);
	tcase_add_test(tc, destroy_past_a_scribbled_slot);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
