/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_svc_kill.c - deaths with L3 transfers in flight, through the fault
 * fixture backend (its objects are files that outlive the service, and its
 * delay keeps every transfer slow enough to be caught in the middle):
 * - the service SIGKILLed again and again in the middle of the ranks'
 *   backups and prefetches, and restarted: the ranks' requests fail fast
 *   with ENOTCONN, never hang, are retried on the next service, and no rank
 *   ever takes a byte that fails its check; afterwards nothing is reserved,
 *   pinned or half-done in the pool, and a new service reads back every
 *   page that was backed up;
 * - a rank SIGKILLed with a backup and a prefetch in flight, holding pins
 *   and a reservation: the service finishes its work, goes on serving the
 *   others, recovers the dead rank by itself, and a new rank gets its slot.
 * The service always runs in a child: the test process forks ranks.
 */
#include <dirent.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hicache/service.h>

#include "../shmpool/pool.h"
#include "hct.h"

/* ---- what the rank processes share with the test */

#define NRANK      3
#define NKEY       6 /* keys per round of a rank */
#define MAX_ROUNDS 200
#define RANK_MAX_S 10.0 /* one step of a rank, retries included */
#define WAIT_MS    5000 /* a request a live service has not answered by then hangs */

enum { OP_NONE, OP_BACKUP, OP_PREFETCH };

struct board {
	int stop;                 /* test: finish the round and go */
	int64_t kill_us;          /* test: when it last killed the service */
	int inflight[NRANK];      /* rank: OP_* posted and not answered */
	int rounds[NRANK];        /* rank: rounds done, all backed up and read back */
	int lost[NRANK][3];       /* rank: requests lost in flight (ENOTCONN), by OP_* */
	int refused[NRANK];       /* rank: posts refused with ENOTCONN (no service) */
	int64_t worst_us[NRANK];  /* rank: longest from a kill to its ENOTCONN */
	uint64_t verified[NRANK]; /* rank: pages read back and checked */
	int step[NRANK];          /* test 2: the test's go, the rank's done */
	int slot[NRANK];
	char why[NRANK][200]; /* rank: why it failed */
};

struct rank_arg {
	struct board *b;
	int me;
};

/* A test's pool, the board its ranks share with it, and its service's
 * options: the fault backend on hct_l3_dir. */
struct env {
	const char *name;
	hc_pool *p;
	struct board *b;
	char spec[160];
	struct hc_service_opts o;
	struct rank_arg ra[NRANK];
	pid_t pid[NRANK];
};

/* The service's backend: extra is more of its options, or "". */
static void env_backend(struct env *e, const char *extra, unsigned batch)
{
	snprintf(e->spec, sizeof(e->spec), "fault:dir=%s%s", hct_l3_dir, extra);
	e->o = (struct hc_service_opts){ .size = sizeof(struct hc_service_opts),
					 .backend = e->spec,
					 .batch_pages = batch,
					 .workers = 4,
					 .write_policy = HC_WRITE_NONE };
}

static hc_pool *env_init(struct env *e, uint32_t npages, uint32_t max_ranks, const char *extra, unsigned batch)
{
	e->name = hct_name();
	e->p = hct_create_attach(e->name, npages, 20, max_ranks);
	e->b = hct_shared(sizeof(*e->b));
	for (int r = 0; r < NRANK; r++)
		e->ra[r] = (struct rank_arg){ e->b, r };
	env_backend(e, extra, batch);
	return e->p;
}

static int64_t now_us(void)
{
	return (int64_t)(hct_now() * 1e6);
}

/* A rank gives up: why, for the test to show, and a status of its own. */
__attribute__((format(printf, 4, 5), noreturn)) static void rank_fail(struct board *b, int me, int code,
								      const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(b->why[me], sizeof(b->why[me]), fmt, ap);
	va_end(ap);
	_exit(code);
}

/* Wait (RANK_MAX_S at most) for a service to serve the pool. */
static void rank_wait_service(hc_pool *p, struct board *b, int me)
{
	double t0 = hct_now();

	while (hc_service_probe(p, NULL) != 1)
		if (hct_now() - t0 > RANK_MAX_S)
			rank_fail(b, me, 20, "no service came back in %.0f s", RANK_MAX_S);
		else
			usleep(2000);
}

static void rank_lost(hc_pool *p, struct board *b, int me, int op)
{
	int64_t lat = now_us() - __atomic_load_n(&b->kill_us, __ATOMIC_ACQUIRE);

	b->lost[me][op]++;
	if (lat > b->worst_us[me])
		b->worst_us[me] = lat;
	rank_wait_service(p, b, me);
}

/* After a post (r its result): 1 posted; 0 refused for want of a service,
 * which serves again now: post again. */
static int rank_posted(hc_pool *p, struct board *b, int me, const char *what, int r)
{
	if (r == -ENOTCONN) {
		__atomic_store_n(&b->inflight[me], OP_NONE, __ATOMIC_RELEASE);
		b->refused[me]++;
		rank_wait_service(p, b, me);
		return 0;
	}
	if (r < 0)
		rank_fail(b, me, 30, "%s: %s", what, hc_last_error());
	return 1;
}

/* Store keys as READY pages filled by key; their handles in pg. */
static void rank_store(hc_pool *p, struct board *b, int me, const hc_key_t *k, unsigned n, hc_page_t *pg)
{
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = n };
	struct hc_lookup_req lr = { .size = sizeof(struct hc_lookup_req), .keys = k, .nkeys = n };
	double t0 = hct_now();
	uint8_t skip[NKEY * 4];
	int m;

	for (;;) {
		if ((m = hc_reserve(p, &rr, pg, skip)) < 0)
			rank_fail(b, me, 21, "reserve: %s", hc_last_error());
		for (unsigned i = 0; i < n; i++) {
			uint32_t pres;
			if (skip[i])
				continue;
			if (hct_key_bytes(p, pg[i], k[i], 1) < 0 || hc_page_presence(p, pg[i], &pres) < 0 ||
			    hc_page_commit(p, pg[i], hc_page_needed(p, pres)) != 1)
				rank_fail(b, me, 22, "fill and commit: %s", hc_last_error());
		}
		if (hc_lookup(p, &lr, pg) == (int)n)
			return;
		/* A key busy: a lost prefetch of it, run by the next service. */
		if (hct_now() - t0 > RANK_MAX_S)
			rank_fail(b, me, 23, "stored keys not READY after %.0f s", RANK_MAX_S);
		usleep(1000);
	}
}

/* Back up pages until all are in L3, over as many services as it takes. */
static void rank_backup(hc_pool *p, struct board *b, int me, const hc_page_t *pg, unsigned n)
{
	double t0 = hct_now();

	while (hct_now() - t0 < RANK_MAX_S) {
		hc_req *rq;
		int r;
		__atomic_store_n(&b->inflight[me], OP_BACKUP, __ATOMIC_RELEASE);
		if (!rank_posted(p, b, me, "backup", hc_req_backup(p, pg, n, &rq)))
			continue;
		r = hc_req_wait(rq, WAIT_MS);
		__atomic_store_n(&b->inflight[me], OP_NONE, __ATOMIC_RELEASE);
		if (r == -ETIMEDOUT)
			rank_fail(b, me, 31, "backup hangs: no answer in %d ms", WAIT_MS);
		hc_req_free(rq); /* -ENOTCONN again when lost: freed all the same */
		if (r == (int)n)
			return;
		if (r != -ENOTCONN)
			rank_fail(b, me, 32, "backup: %d of %u (%s)", r, n, r < 0 ? hc_last_error() : "short");
		rank_lost(p, b, me, OP_BACKUP);
	}
	rank_fail(b, me, 33, "backup not done in %.0f s", RANK_MAX_S);
}

/* Evict keys from the pool (a service may hold one for a moment). */
static void rank_evict(hc_pool *p, struct board *b, int me, const hc_key_t *k, unsigned n)
{
	double t0 = hct_now();

	for (unsigned i = 0; i < n; i++) {
		int r;
		while ((r = hc_evict_key(p, k[i])) == -EBUSY || r == -EAGAIN) {
			if (hct_now() - t0 > RANK_MAX_S)
				rank_fail(b, me, 40, "evict: busy for %.0f s: %s", RANK_MAX_S, hc_last_error());
			usleep(1000);
		}
		if (r < 0)
			rank_fail(b, me, 41, "evict: %s", hc_last_error());
	}
}

/* Prefetch keys until all are READY, over as many services as it takes;
 * check every byte of every page taken. */
static void rank_prefetch(hc_pool *p, struct board *b, int me, const hc_key_t *k, unsigned n)
{
	double t0 = hct_now();

	while (hct_now() - t0 < RANK_MAX_S) {
		struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
					      .keys = k,
					      .nkeys = n,
					      .policy = HC_PREFETCH_TIMEOUT,
					      .timeout_ms = WAIT_MS };
		hc_page_t pg[NKEY * 4];
		hc_req *rq;
		int r, h;
		__atomic_store_n(&b->inflight[me], OP_PREFETCH, __ATOMIC_RELEASE);
		if (!rank_posted(p, b, me, "prefetch", hc_req_prefetch(p, &pr, &rq)))
			continue;
		h = hc_req_prefetch_take(rq, pg, NULL);
		r = hc_req_poll(rq);
		__atomic_store_n(&b->inflight[me], OP_NONE, __ATOMIC_RELEASE);
		if (h < 0)
			rank_fail(b, me, 51, "prefetch take: %s", hc_last_error());
		for (int i = 0; i < h; i++) {
			if (hct_key_bytes(p, pg[i], k[i], 0) < 0)
				rank_fail(b, me, 52, "prefetch: page %d of %d taken has wrong bytes", i, h);
			b->verified[me]++;
			hc_page_unpin(p, pg[i]);
		}
		hc_req_free(rq);
		if (r == -EINPROGRESS)
			rank_fail(b, me, 53, "prefetch hangs: not done in %d ms", WAIT_MS);
		if (r == -ENOTCONN)
			rank_lost(p, b, me, OP_PREFETCH);
		else if (h != (int)n)
			rank_fail(b, me, 54, "prefetch: hit %d of %u, result %d", h, n, r);
		if (h == (int)n)
			return;
	}
	rank_fail(b, me, 55, "prefetch not done in %.0f s", RANK_MAX_S);
}

/* One round: store, back up, evict, read back and check. */
static void rank_round(hc_pool *p, struct board *b, int me, const hc_key_t *k, unsigned n)
{
	hc_page_t pg[NKEY * 4];

	rank_store(p, b, me, k, n, pg);
	rank_backup(p, b, me, pg, n);
	rank_evict(p, b, me, k, n);
	rank_prefetch(p, b, me, k, n);
	rank_evict(p, b, me, k, n);
}

static uint32_t round_seed(int rank, int round)
{
	return 1000u * (uint32_t)(rank + 1) + (uint32_t)round;
}

static void busy_rank(hc_pool *p, void *arg)
{
	struct rank_arg *a = arg;
	hc_key_t k[NKEY];

	for (int round = 0; round < MAX_ROUNDS && !__atomic_load_n(&a->b->stop, __ATOMIC_ACQUIRE); round++) {
		hct_keys(k, NKEY, round_seed(a->me, round));
		rank_round(p, a->b, a->me, k, NKEY);
		__atomic_store_n(&a->b->rounds[a->me], round + 1, __ATOMIC_RELEASE);
	}
}

/* Nothing reserved, half-done, quarantined or held: every page FREE or READY. */
static void check_idle(hc_pool *p, uint32_t live)
{
	struct hc_stats st = hct_stats(p);

	ck_assert_uint_eq(st.pages[HC_PAGE_RESERVED], 0);
	ck_assert_uint_eq(st.pages[HC_PAGE_FREEING], 0);
	ck_assert_uint_eq(st.pages[HC_PAGE_QUARANTINE], 0);
	ck_assert_uint_eq(st.pin_count, 0);
	ck_assert_uint_eq(st.lock_count, 0);
	ck_assert_uint_eq(st.live_ranks, live);
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}

/* Check every byte of n pinned pages, and unpin them. */
static void check_pinned(hc_pool *p, const hc_key_t *k, const hc_page_t *pg, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		ck_assert_msg(hct_key_bytes(p, pg[i], k[i], 0) == 0, "page %u has wrong bytes", i);
		ck_assert_ok(hc_page_unpin(p, pg[i]));
	}
}

/* keys READY in the pool, with the right bytes. */
static void check_ready(hc_pool *p, const hc_key_t *k, unsigned n)
{
	struct hc_lookup_req lr = { .size = sizeof(struct hc_lookup_req),
				    .keys = k,
				    .nkeys = n,
				    .flags = HC_LOOKUP_PIN };
	hc_page_t pg[NKEY * 4];

	ck_assert_int_eq(hc_lookup(p, &lr, pg), (int)n);
	check_pinned(p, k, pg, n);
}

/* Evict keys, prefetch them from L3 with a live service, check every byte. */
static void read_back(hc_pool *p, const hc_key_t *k, unsigned n)
{
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .keys = k,
				      .nkeys = n,
				      .policy = HC_PREFETCH_WAIT_COMPLETE };
	hc_page_t pg[NKEY * 4];
	hc_req *rq;

	for (unsigned i = 0; i < n; i++)
		ck_assert_int_ge(hc_evict_key(p, k[i]), 0);
	ck_assert_ok(hc_req_prefetch(p, &pr, &rq));
	ck_assert_int_eq(hc_req_prefetch_take(rq, pg, NULL), (int)n);
	ck_assert_int_eq(hc_req_poll(rq), (int)n);
	ck_assert_ok(hc_req_free(rq));
	check_pinned(p, k, pg, n);
}

/* Puts cut short by a death leave temp files; the next open sweeps them. */
static unsigned temp_files(void)
{
	DIR *d = opendir(hct_l3_dir);
	struct dirent *e;
	unsigned n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += strncmp(e->d_name, ".tmp.", 5) == 0;
	closedir(d);
	return n;
}

static void kill_service(pid_t svc)
{
	int st;

	ck_assert_int_eq(kill(svc, SIGKILL), 0);
	ck_assert_int_eq(waitpid(svc, &st, 0), svc);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "service: status 0x%x", st);
}

static void check_ranks_exit(struct env *e, int n)
{
	for (int r = 0; r < n; r++) {
		int st = hct_wait_child(e->pid[r]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: status 0x%x: %s", r, st, e->b->why[r]);
	}
}

/* The end of a test: the pool idle and whole, then gone. */
static void finish(struct env *e)
{
	check_idle(e->p, 1);
	hc_pool_detach(e->p);
	hc_pool_destroy(e->name, NULL, HC_DESTROY_FORCE);
}

static void spawn_ranks(struct env *e, int n, void (*fn)(hc_pool *, void *))
{
	for (int r = 0; r < n; r++)
		e->pid[r] = hct_spawn(e->name, fn, &e->ra[r]);
}

#define KILLS 6

START_TEST(service_killed_midflight)
{
	struct env e;
	/* a batch of 2 takes 3 ms: a backup 9 ms, a prefetch 18 */
	hc_pool *p = env_init(&e, 64, 8, ",delay_us=3000", 2);
	struct board *b = e.b;
	pid_t svc = hct_service_child(e.name, &e.o);
	int lost[3] = { 0 }, worst_us = 0;

	srand((unsigned)getpid());
	spawn_ranks(&e, NRANK, busy_rank);
	for (int i = 0; i < KILLS; i++) {
		int want = i % 2 ? OP_BACKUP : OP_PREFETCH, seen = 0;
		usleep(20000 + (useconds_t)(rand() % 60000));
		/* at a moment one of them is in flight (2 s at most) */
		for (int t = 0; t < 20000 && !seen; t++) {
			for (int r = 0; r < NRANK; r++)
				seen |= __atomic_load_n(&b->inflight[r], __ATOMIC_ACQUIRE) == want;
			if (!seen)
				usleep(100);
		}
		__atomic_store_n(&b->kill_us, now_us(), __ATOMIC_RELEASE);
		kill_service(svc);
		usleep((useconds_t)(rand() % 30000)); /* the ranks meet a pool with no service */
		svc = hct_service_child(e.name, &e.o);
	}
	__atomic_store_n(&b->stop, 1, __ATOMIC_RELEASE);
	check_ranks_exit(&e, NRANK);
	for (int r = 0; r < NRANK; r++) {
		ck_assert_msg(b->rounds[r] >= 1, "rank %d did no round", r);
		ck_assert_uint_ge(b->verified[r], (uint64_t)b->rounds[r] * NKEY); /* each round read back whole */
		for (int op = 0; op < 3; op++)
			lost[op] += b->lost[r][op];
		if (b->worst_us[r] > worst_us)
			worst_us = (int)b->worst_us[r];
	}
	/* the kills caught both kinds in flight, and each loss was told at once */
	ck_assert_msg(lost[OP_BACKUP] >= 1, "no backup lost in %d kills", KILLS);
	ck_assert_msg(lost[OP_PREFETCH] >= 1, "no prefetch lost in %d kills", KILLS);
	ck_assert_msg(worst_us < 2000000, "a lost request took %d us to fail", worst_us);
	hct_service_child_stop(svc);
	/* every dead service's slot was recovered by the next one; what it had
	 * reserved is past its quarantine now */
	usleep(60000);
	ck_assert_ok(hc_pool_recover(p, NULL, 0));
	check_idle(p, 1);
	/* L3 holds every round's pages, and a new service reads them back */
	env_backend(&e, "", 0);
	svc = hct_service_child(e.name, &e.o);
	ck_assert_uint_eq(temp_files(), 0);
	for (int r = 0; r < NRANK; r++)
		for (int round = 0; round < b->rounds[r]; round++) {
			hc_key_t k[NKEY];
			hct_keys(k, NKEY, round_seed(r, round));
			read_back(p, k, NKEY);
		}
	hct_service_child_stop(svc);
	finish(&e);
}
END_TEST

/* ---- a rank killed with requests in flight */

#define NA 16 /* in L3 only: the victim's prefetch */
#define NV 4  /* the victim's own pages, pinned: its backup */
#define NW 2  /* the victim's reservations, never committed */
#define NS 4  /* the others' keys */

enum { SURVIVOR, VICTIM, NEWCOMER };

/* Wait for a shared int to reach v (5 s at most). */
static int wait_for(int *x, int v)
{
	for (int i = 0; i < 5000; i++) {
		if (__atomic_load_n(x, __ATOMIC_ACQUIRE) >= v)
			return 1;
		usleep(1000);
	}
	return 0;
}

static void survivor(hc_pool *p, void *arg)
{
	struct rank_arg *a = arg;
	hc_key_t k[NS];

	a->b->slot[a->me] = p->slot;
	hct_keys(k, NS, 41);
	__atomic_store_n(&a->b->step[a->me], 1, __ATOMIC_RELEASE);
	/* step 2: a round while the dead rank's requests are served */
	while (__atomic_load_n(&a->b->step[a->me], __ATOMIC_ACQUIRE) < 2)
		usleep(1000);
	rank_round(p, a->b, a->me, k, NS);
	__atomic_store_n(&a->b->step[a->me], 3, __ATOMIC_RELEASE);
	/* step 4: go, giving up the slot */
	while (__atomic_load_n(&a->b->step[a->me], __ATOMIC_ACQUIRE) < 4)
		usleep(1000);
}

static void victim(hc_pool *p, void *arg)
{
	struct rank_arg *a = arg;
	hc_key_t ka[NA], kv[NV], kw[NW];
	hc_page_t pv[NV], pw[NW];
	struct hc_lookup_req lr = { .size = sizeof(struct hc_lookup_req),
				    .keys = kv,
				    .nkeys = NV,
				    .flags = HC_LOOKUP_PIN };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = kw, .nkeys = NW };
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .keys = ka,
				      .nkeys = NA,
				      .policy = HC_PREFETCH_WAIT_COMPLETE };
	uint8_t skip[NW];
	uint32_t pres, need;
	hc_req *r1, *r2;

	a->b->slot[a->me] = p->slot;
	hct_keys(ka, NA, 40);
	hct_keys(kv, NV, 42);
	hct_keys(kw, NW, 43);
	rank_store(p, a->b, a->me, kv, NV, pv);
	if (hc_lookup(p, &lr, pv) != NV)
		rank_fail(a->b, a->me, 60, "pin: %s", hc_last_error());
	/* one reservation half committed, one untouched */
	if (hc_reserve(p, &rr, pw, skip) != NW || hct_key_bytes(p, pw[0], kw[0], 1) < 0 ||
	    hc_page_presence(p, pw[0], &pres) < 0)
		rank_fail(a->b, a->me, 61, "reserve: %s", hc_last_error());
	need = hc_page_needed(p, pres);
	if (hc_page_commit(p, pw[0], need & -need) != 0)
		rank_fail(a->b, a->me, 61, "commit of one shard of 0x%x: %s", need, hc_last_error());
	if (hc_req_backup(p, pv, NV, &r1) < 0 || hc_req_prefetch(p, &pr, &r2) < 0)
		rank_fail(a->b, a->me, 62, "post: %s", hc_last_error());
	__atomic_store_n(&a->b->step[a->me], 1, __ATOMIC_RELEASE);
	for (;;)
		pause(); /* until SIGKILL: no wait, no free, no detach */
}

static void newcomer(hc_pool *p, void *arg)
{
	struct rank_arg *a = arg;
	hc_key_t k[NS];

	a->b->slot[a->me] = p->slot;
	hct_keys(k, NS, 44);
	rank_round(p, a->b, a->me, k, NS);
}

START_TEST(rank_killed_midflight)
{
	struct env e;
	/* slots: this process, the service, the survivor, the victim; one page
	 * a batch, 20 ms each: the victim's prefetch takes 0.6 s */
	hc_pool *p = env_init(&e, 64, 4, ",delay_us=20000", 1);
	struct board *b = e.b;
	pid_t svc = hct_service_child(e.name, &e.o);
	uint64_t c0[HC_CTR__COUNT], c1[HC_CTR__COUNT], want;
	struct hc_stats s1;
	struct hc_rank_info ri;
	hc_key_t ka[NA], kv[NV];
	hc_page_t pa[NA];
	hc_req *rq;
	int st, ok;

	/* L3 has A, the pool does not */
	hct_keys(ka, NA, 40);
	hct_store_by_key(p, ka, NA, 0, pa);
	ck_assert_ok(hc_req_backup(p, pa, NA, &rq));
	ck_assert_int_eq(hc_req_wait(rq, 10000), NA);
	ck_assert_ok(hc_req_free(rq));
	for (unsigned i = 0; i < NA; i++)
		ck_assert_int_eq(hc_evict_key(p, ka[i]), 1);
	e.pid[SURVIVOR] = hct_spawn(e.name, survivor, &e.ra[SURVIVOR]);
	ck_assert(wait_for(&b->step[SURVIVOR], 1));
	/* the victim posts its two requests; once the service has taken both,
	 * it dies holding pins and a reservation */
	hct_counters(p, c0);
	e.pid[VICTIM] = hct_spawn(e.name, victim, &e.ra[VICTIM]);
	ck_assert_msg(wait_for(&b->step[VICTIM], 1), "victim: %s", b->why[VICTIM]);
	for (int i = 0; i < 5000 && hct_counter(p, HC_CTR_service_requests) < c0[HC_CTR_service_requests] + 2; i++)
		usleep(1000);
	hct_counters(p, c1);
	s1 = hct_stats(p);
	ck_assert_uint_eq(c1[HC_CTR_service_requests], c0[HC_CTR_service_requests] + 2);
	ck_assert_uint_eq(c1[HC_CTR_l3_prefetch_pages], c0[HC_CTR_l3_prefetch_pages]); /* in flight */
	ck_assert_uint_ge(s1.pin_count, NV);
	ck_assert_uint_ge(s1.pages[HC_PAGE_RESERVED], NW);
	ck_assert_int_eq(kill(e.pid[VICTIM], SIGKILL), 0);
	ck_assert_int_eq(waitpid(e.pid[VICTIM], &st, 0), e.pid[VICTIM]);
	ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	/* The service recovers it by itself: nobody else looks at the pool (stats
	 * and the slot's word never recover). */
	ok = 0;
	for (int i = 0; i < 3000 && !ok; i++) {
		ok = atomic_load(&p->ranks[b->slot[VICTIM]].state) == HC_RANK_FREE &&
		     hct_counter(p, HC_CTR_recoveries) > c0[HC_CTR_recoveries];
		if (!ok)
			usleep(1000);
	}
	ck_assert_msg(ok, "the dead rank's slot %d is not recovered after 3 s", b->slot[VICTIM]);
	ck_assert_ok(hc_pool_rank(p, (unsigned)b->slot[VICTIM], &ri, sizeof(ri)));
	ck_assert(!ri.live);
	ck_assert_uint_eq(ri.pins, 0);
	ck_assert_uint_eq(ri.locks, 0);
	ck_assert_uint_eq(ri.reserved, 0);
	/* the others are served meanwhile */
	__atomic_store_n(&b->step[SURVIVOR], 2, __ATOMIC_RELEASE);
	ck_assert_msg(wait_for(&b->step[SURVIVOR], 3), "survivor: %s", b->why[SURVIVOR]);
	/* the dead rank's requests are done: its prefetch made A READY, its
	 * backup put its pages in L3 */
	want = c0[HC_CTR_l3_prefetch_pages] + NA + NS;
	for (int i = 0; i < 5000 && hct_counter(p, HC_CTR_l3_prefetch_pages) < want; i++)
		usleep(1000);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_pages), want);
	ck_assert_int_eq(hct_hit(p, ka, NA), NA);
	check_ready(p, ka, NA);
	hct_keys(kv, NV, 42);
	ck_assert_int_eq(hct_l3_exists(p, kv, NV), NV);
	/* the reservation's quarantine runs out at the service's next sweep */
	for (int i = 0; i < 3000 && (hct_stats(p).pages[HC_PAGE_QUARANTINE] || hct_stats(p).pages[HC_PAGE_RESERVED]);
	     i++)
		usleep(1000);
	check_idle(p, 3);
	/* every slot but the dead rank's is held: a new rank gets that one */
	st = hct_in_child(e.name, newcomer, &e.ra[NEWCOMER]);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "newcomer: status 0x%x: %s", st, b->why[NEWCOMER]);
	ck_assert_int_eq(b->slot[NEWCOMER], b->slot[VICTIM]);
	__atomic_store_n(&b->step[SURVIVOR], 4, __ATOMIC_RELEASE);
	st = hct_wait_child(e.pid[SURVIVOR]);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "survivor: status 0x%x: %s", st, b->why[SURVIVOR]);
	hct_service_child_stop(svc);
	finish(&e);
}
END_TEST

/* ---- a service (re)started among ranks that retry at once */

static void retrying_rank(hc_pool *p, void *arg)
{
	struct rank_arg *a = arg;
	struct board *b = a->b;
	hc_key_t k[2];

	hct_keys(k, 2, 50u + (uint32_t)a->me);
	while (!__atomic_load_n(&b->stop, __ATOMIC_ACQUIRE)) {
		hc_req *rq;
		int r = hc_req_exists(p, k, 2, &rq);
		if (r == -ENOTCONN) {
			b->refused[a->me]++;
			continue; /* no service: again, at once */
		}
		if (r < 0)
			rank_fail(b, a->me, 70, "exists: %s", hc_last_error());
		r = hc_req_wait(rq, WAIT_MS);
		hc_req_free(rq);
		if (r == -ETIMEDOUT)
			rank_fail(b, a->me, 71, "exists hangs: no answer in %d ms", WAIT_MS);
		if (r == -ENOTCONN)
			b->lost[a->me][OP_NONE]++;
		else if (r != 0)
			rank_fail(b, a->me, 72, "exists: %d (%s)", r, r < 0 ? hc_last_error() : "keys never stored");
		else
			__atomic_fetch_add(&b->rounds[a->me], 1, __ATOMIC_RELEASE);
	}
}

static int answered(struct board *b, int n)
{
	int sum = 0;

	for (int r = 0; r < n; r++)
		sum += __atomic_load_n(&b->rounds[r], __ATOMIC_ACQUIRE);
	return sum;
}

/* While no service serves, the ranks' probes take and release its lock; a
 * service starting then must not find it busy and refuse to serve. */
START_TEST(restart_among_retrying_ranks)
{
	struct env e;
	hc_pool *p = env_init(&e, 16, 8, "", 0);
	struct board *b = e.b;
	pid_t svc;
	int refused = 0;

	spawn_ranks(&e, 2, retrying_rank);
	for (int i = 0; i < 16; i++) {
		int before = answered(b, 2);
		usleep(5000);
		svc = hct_service_child(e.name, &e.o); /* fails the test if it is refused */
		for (int t = 0; t < 5000 && answered(b, 2) == before; t++)
			usleep(1000);
		ck_assert_msg(answered(b, 2) > before, "start %d: no request answered", i);
		if (i % 2) {
			kill_service(svc);
		} else {
			hct_service_child_stop(svc);
		}
	}
	__atomic_store_n(&b->stop, 1, __ATOMIC_RELEASE);
	check_ranks_exit(&e, 2);
	for (int r = 0; r < 2; r++)
		refused += b->refused[r];
	ck_assert_int_gt(refused, 0); /* they did retry while none served */
	ck_assert_ok(hc_pool_recover(p, NULL, 0));
	finish(&e);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("svc_kill");
	TCase *tc = tcase_create("svc_kill");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, hct_l3_setup, hct_l3_teardown);
	tcase_add_test(tc, service_killed_midflight);
	tcase_add_test(tc, rank_killed_midflight);
	tcase_add_test(tc, restart_among_retrying_ranks);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
