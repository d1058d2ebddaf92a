/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-service.c - the service's request path (include/hicache/service.h)
 * against peers measured in the same run (doc/design.md, "Measuring").
 *
 * The service runs two ways: embedded (hc_service_start in this process,
 * a thread of its own) and in a forked process (the real deployment: the
 * rank and the service are different processes).  Each way:
 *
 * Latency, shm backend, one request at a time (median and p99 in ns,
 * from hc_req_* to the result and hc_req_free):
 *   busy      requests back to back, so the service finds work while it
 *             spins.  Requests: an L3 exists of 1 key that is in L3, and a
 *             backup of 1 page already IN_L3 (the service pins it, sees
 *             the flag, unpins it: no backend I/O, so the figure is the
 *             request path alone; a fresh page would add a 1 MiB copy that
 *             the throughput part measures).  Peers: the service's own work
 *             called directly (hc_store_exists on the same store; for the
 *             skipped backup, hc_page_pin + hc_page_unpin), and a raw
 *             ck_ring SPSC ping-pong between two threads (embedded) or two
 *             processes (forked), spinning: the lower bound of any ring.
 *             Target: within 3 us of the direct call.
 *   32 in flight  32 exists posted, then waited: per-request cost, against
 *             the direct call and a ck_ring burst of 32.
 *   idle      a gap (2 ms) before each request, so the service has gone to
 *             sleep on its doorbell.  Peer: a raw futex ping-pong (FUTEX_WAKE,
 *             FUTEX_WAIT on a shared word, both sides asleep) with the same
 *             gap, between the same kind of partners.  Target: 1.5x.
 *   Rounds interleave ours and the peers; a ck_ring or futex partner runs
 *   only during its own round, so it never competes with the service.
 *
 * Throughput, shm and file backends: backups of every page of a pool
 * (fresh keys each repetition, so nothing is skipped), as one request of
 * all pages and as 1-page requests 32 in flight, against hc_store_put of
 * the same pages in one call on the same backend, in the same repetition
 * (the order alternates).  Target: 0.9.
 *
 * This is a syscall- and scheduler-bound path: on these VMs a syscall is
 * about 1 us and a futex round trip about 24 us.
 */
#include <ck_pr.h>
#include <ck_ring.h>
#include <ftw.h>
#include <getopt.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <hicache/service.h>

#include "l3.h"

#define INFLIGHT       32
#define ROUNDS         4 /* ours and the peers take turns this many times */
#define BUSY_TARGET_NS 3000.0
#define IDLE_TARGET    1.5
#define PUT_TARGET     0.9
#define PF_THREADS     4 /* the direct gets: as many threads as the service has workers */

static unsigned iters = 20000, idle_iters = 1000, gap_us = 2000, reps = 3;
static int pin;            /* --pin: the service on the second CPU, the rank on the first */
static cpu_set_t all_cpus; /* the affinity we started with */

static void unpin(void)
{
	sched_setaffinity(0, sizeof(all_cpus), &all_cpus);
}

/* The i-th CPU of those we started with (bench_pin_cpu counts in the
 * current set, which an earlier pin narrowed). */
static void pin_to(unsigned i)
{
	unpin();
	bench_pin_cpu(i);
}

static void die(const char *what)
{
	fprintf(stderr, "bench-service: %s\n", what);
	exit(1);
}

/* ---- samples */

struct lat {
	double *v;
	unsigned n;
};

static void lat_init(struct lat *l, unsigned cap)
{
	l->v = calloc(cap, sizeof(double));
	l->n = 0;
	if (!l->v)
		die("no memory for the samples");
}

static double lat_pct(struct lat *l, double q)
{
	unsigned i;

	if (!l->n)
		return 0;
	qsort(l->v, l->n, sizeof(double), bench_cmp_double);
	i = (unsigned)(q * (l->n - 1) + 0.5);
	return l->v[i];
}

/* ---- a partner for the raw peers: a thread, or a forked process */

struct partner {
	int proc;
	pid_t pid;
	pthread_t thr;
};

static void partner_start(struct partner *pt, int proc, void *(*fn)(void *), void *arg)
{
	pt->proc = proc;
	if (!proc) {
		if (pthread_create(&pt->thr, NULL, fn, arg) != 0)
			die("cannot start a peer thread");
		return;
	}
	pt->pid = fork();
	if (pt->pid < 0)
		die("cannot fork a peer process");
	if (pt->pid == 0) {
		fn(arg);
		_exit(0);
	}
}

static void partner_join(struct partner *pt)
{
	int st;

	if (!pt->proc) {
		pthread_join(pt->thr, NULL);
		return;
	}
	if (waitpid(pt->pid, &st, 0) != pt->pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die("a peer process failed");
}

/* ---- the raw peers, in one shared block (threads and processes alike) */

#define PEER_SLOTS 64

struct peer_shm {
	struct ck_ring req, rsp;
	struct ck_ring_buffer reqbuf[PEER_SLOTS], rspbuf[PEER_SLOTS];
	_Alignas(64) _Atomic uint32_t a2b; /* futex words, a line each */
	_Alignas(64) _Atomic uint32_t b2a;
};

static long futex(_Atomic uint32_t *w, int op, uint32_t val)
{
	return syscall(SYS_futex, (uint32_t *)w, op, val, NULL, NULL, 0);
}

/* Echo every entry back; NULL stops. */
static void *ck_echo(void *arg)
{
	struct peer_shm *s = arg;

	for (;;) {
		void *v;
		while (!ck_ring_dequeue_spsc(&s->req, s->reqbuf, &v))
			ck_pr_stall();
		if (!v)
			return NULL;
		while (!ck_ring_enqueue_spsc(&s->rsp, s->rspbuf, v))
			ck_pr_stall();
	}
}

/* Sleep until a2b moves, copy it to b2a and wake; UINT32_MAX stops. */
static void *futex_echo(void *arg)
{
	struct peer_shm *s = arg;
	uint32_t seen = 0;

	for (;;) {
		uint32_t v;
		while ((v = atomic_load(&s->a2b)) == seen)
			futex(&s->a2b, FUTEX_WAIT, seen);
		seen = v;
		atomic_store(&s->b2a, v);
		futex(&s->b2a, FUTEX_WAKE, 1);
		if (v == UINT32_MAX)
			return NULL;
	}
}

static void ck_round(struct peer_shm *s, int proc, unsigned n, unsigned burst, struct lat *out)
{
	struct partner pt;
	uintptr_t next = 1;

	ck_ring_init(&s->req, PEER_SLOTS);
	ck_ring_init(&s->rsp, PEER_SLOTS);
	/* two spinners sharing a CPU would measure the scheduler (bench.h) */
	pin_to(1);
	partner_start(&pt, proc, ck_echo, s);
	pin_to(0);
	for (unsigned i = 0; i < n / 8 + n; i++) { /* the first eighth warms up */
		uint64_t t0 = bench_now_ns();
		for (unsigned j = 0; j < burst; j++)
			while (!ck_ring_enqueue_spsc(&s->req, s->reqbuf, (void *)next++))
				ck_pr_stall();
		for (unsigned j = 0; j < burst; j++) {
			void *v;
			while (!ck_ring_dequeue_spsc(&s->rsp, s->rspbuf, &v))
				ck_pr_stall();
		}
		if (i >= n / 8)
			out->v[out->n++] = (double)(bench_now_ns() - t0) / burst;
	}
	while (!ck_ring_enqueue_spsc(&s->req, s->reqbuf, NULL))
		ck_pr_stall();
	partner_join(&pt);
	if (!pin)
		unpin();
}

static void gap(void)
{
	struct timespec ts = { 0, (long)gap_us * 1000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void futex_round(struct peer_shm *s, int proc, unsigned n, struct lat *out)
{
	struct partner pt;

	atomic_store(&s->a2b, 0);
	atomic_store(&s->b2a, 0);
	if (pin)
		pin_to(1); /* where the service runs */
	partner_start(&pt, proc, futex_echo, s);
	if (pin)
		pin_to(0);
	for (uint32_t i = 1; i <= n + 8; i++) { /* 8 to warm up */
		uint32_t x;
		uint64_t t0;
		gap();
		t0 = bench_now_ns();
		atomic_store(&s->a2b, i);
		futex(&s->a2b, FUTEX_WAKE, 1);
		while ((x = atomic_load(&s->b2a)) != i)
			futex(&s->b2a, FUTEX_WAIT, x);
		if (i > 8)
			out->v[out->n++] = (double)(bench_now_ns() - t0);
	}
	atomic_store(&s->a2b, UINT32_MAX);
	futex(&s->a2b, FUTEX_WAKE, 1);
	partner_join(&pt);
}

/* ---- the service: embedded, or in a forked process */

struct svc {
	int proc;
	hc_service *s;
	pid_t pid;
	int go; /* forked: closing it stops the service */
};

static void svc_start(struct svc *v, struct l3b *b, const char *spec, int proc)
{
	struct hc_service_opts o = { .size = sizeof(struct hc_service_opts),
				     .backend = spec,
				     .write_policy = HC_WRITE_NONE };
	int ready[2], go[2];
	char c;

	memset(v, 0, sizeof(*v));
	v->proc = proc;
	if (!proc) {
		if (pin)
			pin_to(1); /* the service thread inherits it */
		if (hc_service_start(b->pool, &o, &v->s) < 0)
			l3b_die("start the embedded service");
		if (pin)
			pin_to(0);
		return;
	}
	if (pipe(ready) < 0 || pipe(go) < 0)
		die("pipe");
	v->pid = fork();
	if (v->pid < 0)
		die("cannot fork the service");
	if (v->pid == 0) {
		hc_service *s;
		close(ready[0]);
		close(go[1]);
		if (pin)
			pin_to(1);
		if (hc_service_start(b->pool, &o, &s) < 0) {
			fprintf(stderr, "bench-service: the service process: %s\n", hc_last_error());
			_exit(1);
		}
		if (bench_write_all(ready[1], "r", 1) < 0)
			_exit(1);
		while (read(go[0], &c, 1) < 0 && errno == EINTR)
			; /* EOF: stop */
		_exit(hc_service_stop(s) < 0);
	}
	close(ready[1]);
	close(go[0]);
	if (bench_read_all(ready[0], &c, 1) < 0)
		die("the service process did not start");
	close(ready[0]);
	v->go = go[1];
	if (pin)
		pin_to(0);
}

static void svc_stop(struct svc *v)
{
	int st;

	if (!v->proc) {
		hc_service_stop(v->s);
		return;
	}
	close(v->go);
	if (waitpid(v->pid, &st, 0) != v->pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die("the service process failed");
}

/* ---- requests */

static int req_wait_free(hc_req *r)
{
	int v = hc_req_wait(r, -1);

	hc_req_free(r);
	return v;
}

static void ours_exists(struct l3b *b, unsigned n, unsigned burst, struct lat *out, int idle)
{
	hc_req *r[INFLIGHT];

	for (unsigned i = 0; i < n / 8 + n; i++) {
		uint64_t t0;
		if (idle)
			gap();
		t0 = bench_now_ns();
		for (unsigned j = 0; j < burst; j++)
			if (hc_req_exists(b->p, &b->keys[0], 1, &r[j]) < 0)
				l3b_die("post an exists");
		for (unsigned j = 0; j < burst; j++)
			if (req_wait_free(r[j]) != 1)
				l3b_die("an exists of a key in L3");
		if (i >= n / 8)
			out->v[out->n++] = (double)(bench_now_ns() - t0) / burst;
	}
}

static void ours_backup_skip(struct l3b *b, unsigned n, struct lat *out)
{
	for (unsigned i = 0; i < n / 8 + n; i++) {
		uint64_t t0 = bench_now_ns();
		hc_req *r;
		if (hc_req_backup(b->p, &b->pages[0], 1, &r) < 0)
			l3b_die("post a backup");
		if (req_wait_free(r) != 1)
			l3b_die("a backup of a page in L3");
		if (i >= n / 8)
			out->v[out->n++] = (double)(bench_now_ns() - t0);
	}
}

static void direct_exists(struct l3b *b, unsigned n, struct lat *out)
{
	for (unsigned i = 0; i < n / 8 + n; i++) {
		uint64_t t0 = bench_now_ns();
		int st;
		if (hc_store_exists(b->st, &b->keys[0], 1, &st) != 1)
			l3b_die("a direct exists");
		if (i >= n / 8)
			out->v[out->n++] = (double)(bench_now_ns() - t0);
	}
}

static void direct_pin(struct l3b *b, unsigned n, struct lat *out)
{
	for (unsigned i = 0; i < n / 8 + n; i++) {
		uint64_t t0 = bench_now_ns();
		if (hc_page_pin(b->p, b->pages[0]) < 0 || hc_page_unpin(b->p, b->pages[0]) < 0)
			l3b_die("pin and unpin");
		if (i >= n / 8)
			out->v[out->n++] = (double)(bench_now_ns() - t0);
	}
}

/* ---- the latency table */

static const int lw[] = { -30, 9, 9, -26, 9, 9, 7, 9, -18 };
#define LCOLS 9

enum { L_EXISTS, L_SKIP, L_BURST, L_IDLE, L_DIRECT, L_PIN, L_CK1, L_CK32, L_FUTEX, NLAT };

enum target { LOWER_BOUND, BUSY, IDLE };

static void lat_row(const char *name, struct lat *ours, const char *pname, struct lat *peer, enum target t)
{
	double o = lat_pct(ours, 0.5), o99 = lat_pct(ours, 0.99), q = lat_pct(peer, 0.5), q99 = lat_pct(peer, 0.99);
	const char *target = "(lower bound)";

	if (t == IDLE)
		target = bench_fmt("<= %.1fx  %s", IDLE_TARGET, o / q <= IDLE_TARGET ? "met" : "MISSED");
	else if (t == BUSY)
		target = bench_fmt("<= +%.0f  %s", BUSY_TARGET_NS, o - q <= BUSY_TARGET_NS ? "met" : "MISSED");
	bench_row(LCOLS, lw, name, bench_fmt("%.0f", o), bench_fmt("%.0f", o99), pname, bench_fmt("%.0f", q),
		  bench_fmt("%.0f", q99), bench_fmt("%.2f", o / q), bench_fmt("%+.0f", o - q), target);
}

static void latency(struct l3b *b, int proc, struct peer_shm *ps)
{
	struct lat l[NLAT];
	unsigned n = iters / ROUNDS, ni = idle_iters / ROUNDS;
	const char *where = proc ? "forked" : "embedded";
	hc_req *r;

	for (int i = 0; i < NLAT; i++)
		lat_init(&l[i], iters + idle_iters);
	/* fresh keys (a repetition before may have left IN_L3 flags on pages
	 * whose objects it deleted); page 0 and its key in L3 */
	l3b_rekey(b, 0xfeed + (uint64_t)proc);
	if (hc_req_backup(b->p, &b->pages[0], 1, &r) < 0 || req_wait_free(r) != 1)
		l3b_die("back up page 0");
	for (int round = 0; round < ROUNDS; round++) {
		ours_exists(b, n, 1, &l[L_EXISTS], 0);
		direct_exists(b, n, &l[L_DIRECT]);
		ck_round(ps, proc, n, 1, &l[L_CK1]);
		ours_backup_skip(b, n, &l[L_SKIP]);
		direct_pin(b, n, &l[L_PIN]);
		ours_exists(b, n / INFLIGHT, INFLIGHT, &l[L_BURST], 0);
		ck_round(ps, proc, n / INFLIGHT, INFLIGHT, &l[L_CK32]);
		ours_exists(b, ni, 1, &l[L_IDLE], 1);
		futex_round(ps, proc, ni, &l[L_FUTEX]);
	}
	lat_row(bench_fmt("busy exists, %s", where), &l[L_EXISTS], "direct hc_store_exists", &l[L_DIRECT], BUSY);
	lat_row(bench_fmt("busy exists, %s", where), &l[L_EXISTS], "ck_ring ping-pong", &l[L_CK1], LOWER_BOUND);
	lat_row(bench_fmt("busy backup skip, %s", where), &l[L_SKIP], "direct pin+unpin", &l[L_PIN], BUSY);
	lat_row(bench_fmt("busy backup skip, %s", where), &l[L_SKIP], "ck_ring ping-pong", &l[L_CK1], LOWER_BOUND);
	lat_row(bench_fmt("32 in flight/req, %s", where), &l[L_BURST], "direct hc_store_exists", &l[L_DIRECT], BUSY);
	lat_row(bench_fmt("32 in flight/req, %s", where), &l[L_BURST], "ck_ring burst of 32/msg", &l[L_CK32],
		LOWER_BOUND);
	lat_row(bench_fmt("idle exists (%u us gap), %s", gap_us, where), &l[L_IDLE],
		proc ? "futex ping-pong, 2 procs" : "futex ping-pong, 2 thrs", &l[L_FUTEX], IDLE);
	for (int i = 0; i < NLAT; i++)
		free(l[i].v);
}

/* ---- backup throughput */

struct put_fig {
	double one[15], many[15], direct[15];
	double pf_one[15], pf_many[15], pf_direct[15]; /* prefetch against get */
};

/* Remove what the direct store holds under the current keys (not timed). */
static void direct_forget(struct l3b *b)
{
	int *st = calloc(b->npages, sizeof(int));

	hc_store_delete(b->st, (const hc_key_t *)b->keys, b->npages, st);
	free(st);
}

static double svc_backup(struct l3b *b, unsigned per_req)
{
	hc_req *r[INFLIGHT];
	uint64_t t0 = bench_now_ns();

	for (unsigned i = 0; i < b->npages;) {
		unsigned k = 0;
		for (; k < INFLIGHT && i < b->npages; k++, i += per_req) {
			unsigned m = b->npages - i < per_req ? b->npages - i : per_req;
			if (hc_req_backup(b->p, &b->pages[i], m, &r[k]) < 0)
				l3b_die("post a backup");
		}
		for (unsigned j = 0; j < k; j++)
			if (req_wait_free(r[j]) < 0)
				l3b_die("a backup through the service");
	}
	return (double)(b->env_bytes * b->npages) / (double)(bench_now_ns() - t0);
}

static double direct_put(struct l3b *b)
{
	int *st = calloc(b->npages, sizeof(int));
	uint64_t t0 = bench_now_ns();

	if (hc_store_put(b->st, b->pages, b->npages, st) != (int)b->npages)
		l3b_die("a direct put");
	t0 = bench_now_ns() - t0;
	free(st);
	return (double)(b->env_bytes * b->npages) / (double)t0;
}

/* shared: the service's store is the direct one's (shm), so the direct
 * store can delete what the service wrote. */
static void throughput(struct l3b *b, int shared, uint64_t *seed, struct put_fig *f)
{
	for (unsigned r = 0; r <= reps; r++) { /* repetition 0 warms up */
		double one, many, direct;
		l3b_rekey(b, (*seed)++);
		if (r % 2) {
			direct = direct_put(b);
			direct_forget(b);
		}
		many = svc_backup(b, b->npages);
		if (shared)
			direct_forget(b);
		l3b_rekey(b, (*seed)++);
		one = svc_backup(b, 1);
		if (shared)
			direct_forget(b);
		if (r % 2 == 0) {
			direct = direct_put(b);
			direct_forget(b);
		}
		if (r) {
			f->many[r - 1] = many;
			f->one[r - 1] = one;
			f->direct[r - 1] = direct;
		}
	}
}

/* Evict every page, prefetch them all back through the service (per_req
 * keys a request, INFLIGHT in flight), take the hits and let them go:
 * bytes per ns.  The pages must be in the service's L3. */
static double svc_prefetch(struct l3b *b, unsigned per_req)
{
	hc_req *r[INFLIGHT];
	unsigned at[INFLIGHT];
	uint64_t t0;

	for (unsigned i = 0; i < b->npages; i++)
		hc_evict_key(b->p, b->keys[i]);
	t0 = bench_now_ns();
	for (unsigned i = 0; i < b->npages;) {
		unsigned k = 0;
		for (; k < INFLIGHT && i < b->npages; k++, i += per_req) {
			unsigned m = b->npages - i < per_req ? b->npages - i : per_req;
			struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
						      .keys = &b->keys[i],
						      .nkeys = m,
						      .first_depth = i,
						      .policy = HC_PREFETCH_WAIT_COMPLETE };
			at[k] = i;
			if (hc_req_prefetch(b->p, &pr, &r[k]) < 0)
				l3b_die("post a prefetch");
		}
		for (unsigned j = 0; j < k; j++) {
			unsigned m = b->npages - at[j] < per_req ? b->npages - at[j] : per_req;
			if (hc_req_prefetch_take(r[j], &b->pages[at[j]], NULL) != (int)m)
				l3b_die("a prefetch through the service");
			hc_req_free(r[j]);
		}
	}
	t0 = bench_now_ns() - t0;
	for (unsigned i = 0; i < b->npages; i++)
		hc_page_unpin(b->p, b->pages[i]);
	return (double)(b->env_bytes * b->npages) / (double)t0;
}

/* Prefetch (ours) against hc_store_get of the same pages into reserved
 * pages (direct): the direct store holds them too (shared: it is the
 * service's). */
static void pf_throughput(struct l3b *b, int shared, uint64_t *seed, struct put_fig *f)
{
	l3b_rekey(b, (*seed)++);
	l3b_resum(b);
	svc_backup(b, b->npages);
	if (!shared)
		direct_put(b);
	for (unsigned r = 0; r <= reps; r++) {
		double one, many, direct;
		if (r % 2)
			direct = (double)(b->env_bytes * b->npages) / (l3b_get(b, PF_THREADS) * 1e9);
		many = svc_prefetch(b, b->npages);
		one = svc_prefetch(b, 1);
		if (r % 2 == 0)
			direct = (double)(b->env_bytes * b->npages) / (l3b_get(b, PF_THREADS) * 1e9);
		if (r) {
			f->pf_many[r - 1] = many;
			f->pf_one[r - 1] = one;
			f->pf_direct[r - 1] = direct;
		}
	}
	direct_forget(b);
}

static const int tw[] = { -8, -9, -32, 9, 14, 6, -12 };
#define TCOLS 7

static void put_rows(const char *backend, int proc, struct put_fig *f, int pf)
{
	double d = bench_median(pf ? f->pf_direct : f->direct, reps);

	for (int one = 0; one < 2; one++) {
		double o = bench_median(one ? (pf ? f->pf_one : f->one) : (pf ? f->pf_many : f->many), reps);
		bench_row(TCOLS, tw, backend, proc ? "forked" : "embedded",
			  one ? "1-page requests, 32 in flight" : "1 request of every page", bench_fmt("%.2f", o),
			  bench_fmt("%.2f", d), bench_fmt("%.2f", o / d),
			  bench_fmt(">= %.1f %s", PUT_TARGET, o / d >= PUT_TARGET ? "met" : "MISSED"));
	}
}

/* ---- main */

static char base[512];

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(path);
}

static void rm_base(void)
{
	if (base[0])
		nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int main(int argc, char **argv)
{
	unsigned npages = 256, page_kib = 1024;
	const char *parent = "/tmp";
	static const struct option lo[] = {
		{ "iters", required_argument, NULL, 'i' },    { "idle-iters", required_argument, NULL, 'I' },
		{ "gap-us", required_argument, NULL, 'g' },   { "pages", required_argument, NULL, 'n' },
		{ "page-kib", required_argument, NULL, 'k' }, { "reps", required_argument, NULL, 'r' },
		{ "dir", required_argument, NULL, 'd' },      { "pin", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },           { 0 }
	};
	struct put_fig put[2][2]; /* [file][forked] */
	char shm_spec[256], shm_path[512], file_spec[700], svc_spec[700], dir[600];
	struct peer_shm *ps;
	uint64_t seed = 1;
	struct l3b b;
	int c;

	while ((c = getopt_long(argc, argv, "i:I:g:n:k:r:d:ph", lo, NULL)) != -1) {
		switch (c) {
		case 'i':
			iters = l3b_count("bench-service", "iters", optarg);
			break;
		case 'I':
			idle_iters = l3b_count("bench-service", "idle-iters", optarg);
			break;
		case 'g':
			gap_us = l3b_count("bench-service", "gap-us", optarg);
			break;
		case 'n':
			npages = l3b_count("bench-service", "pages", optarg);
			break;
		case 'k':
			page_kib = l3b_count("bench-service", "page-kib", optarg);
			break;
		case 'r':
			reps = l3b_count("bench-service", "reps", optarg);
			break;
		case 'd':
			parent = optarg;
			break;
		case 'p':
			pin = 1;
			break;
		default:
			printf("usage: bench-service [--iters N] [--idle-iters N] [--gap-us U] [--pages N] [--page-kib K]\n"
			       "                     [--reps R] [--dir PARENT] [--pin]\n"
			       "  the file backend's scratch directory is made under PARENT (default /tmp) and removed;\n"
			       "  --pin: the service on the second CPU, this process (the rank) on the first\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (iters < 64 * ROUNDS || idle_iters < 8 * ROUNDS || gap_us < 1 || gap_us > 1000000 || npages < 8 ||
	    page_kib < 256 || page_kib % 256 || reps < 1 || reps > 15) {
		fprintf(stderr,
			"bench-service: --iters >= %u, --idle-iters >= %u, --gap-us 1..1000000, --pages >= 8,\n"
			"  --page-kib a multiple of 256, --reps 1..15\n",
			64 * ROUNDS, 8 * ROUNDS);
		return 2;
	}
	bench_cleanup_init();
	sched_getaffinity(0, sizeof(all_cpus), &all_cpus);
	snprintf(base, sizeof(base), "%s/hicache-bench-service-%d", parent, (int)getpid());
	if (mkdir(base, 0700) < 0) {
		fprintf(stderr, "bench-service: mkdir %s: %s\n", base, strerror(errno));
		return 1;
	}
	atexit(rm_base);
	ps = mmap(NULL, sizeof(*ps), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ps == MAP_FAILED)
		die("no memory for the peers' shared block");

	l3b_pool(&b, npages, page_kib);
	uint64_t obj = b.env_bytes + 4096;
	/* one store for the direct calls and the service: the same objects,
	 * the same hash table; it holds one pool's objects at a time */
	snprintf(shm_spec, sizeof(shm_spec), "shm:name=bench-svc-%d,capacity=%llu", (int)getpid(),
		 (unsigned long long)(obj * npages * 5 / 4 + (64u << 20)));
	snprintf(shm_path, sizeof(shm_path), "/dev/shm/hicache-l3.bench-svc-%d", (int)getpid());
	bench_cleanup_add(shm_path);
	l3b_open(&b, shm_spec, 256); /* the service's default queue depth */

	printf("service request path vs direct calls, ck_ring and futex peers (same run)\n");
	printf("pool: %u pages of %.2f MiB; %u busy and %u idle iterations per case, %d rounds; shm backend;\n"
	       "%s; ck_ring peers pinned to CPUs 0 and 1\n\n",
	       npages, (double)b.env_bytes / 1048576, iters, idle_iters, ROUNDS,
	       pin ? "service pinned to CPU 1, rank to CPU 0" : "service and rank unpinned (as deployed)");
	bench_row(LCOLS, lw, "case", "ours med", "ours p99", "peer", "peer med", "peer p99", "ratio", "ours-peer",
		  "target");
	bench_rule(bench_table_width(LCOLS, lw));
	for (int proc = 0; proc < 2; proc++) {
		struct svc v;
		svc_start(&v, &b, shm_spec, proc);
		latency(&b, proc, ps);
		throughput(&b, 1, &seed, &put[0][proc]);
		pf_throughput(&b, 1, &seed, &put[0][proc]);
		svc_stop(&v);
	}
	bench_rule(bench_table_width(LCOLS, lw));
	printf("ns per request, from hc_req_* to the result and hc_req_free; ratio = ours / peer\n\n");

	/* the file backend: the direct store and the service each their own
	 * directory (one opener per directory) */
	l3b_close(&b);
	snprintf(file_spec, sizeof(file_spec), "file:dir=%s/direct", base);
	snprintf(svc_spec, sizeof(svc_spec), "file:dir=%s/svc", base);
	snprintf(dir, sizeof(dir), "%s/direct", base);
	mkdir(dir, 0700);
	l3b_open(&b, file_spec, 256);
	for (int proc = 0; proc < 2; proc++) {
		struct svc v;
		snprintf(dir, sizeof(dir), "%s/svc", base);
		mkdir(dir, 0700);
		svc_start(&v, &b, svc_spec, proc);
		throughput(&b, 0, &seed, &put[1][proc]);
		pf_throughput(&b, 0, &seed, &put[1][proc]);
		svc_stop(&v);
		nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	}

	printf("backup throughput: %u pages of %.2f MiB (%.0f MiB), fresh keys, %u reps (medians); file in %s\n",
	       npages, (double)b.env_bytes / 1048576, (double)(b.env_bytes * npages) / 1048576, reps, base);
	bench_row(TCOLS, tw, "backend", "service", "request shape", "ours GB/s", "direct put GB/s", "ratio", "target");
	bench_rule(bench_table_width(TCOLS, tw));
	for (int file = 0; file < 2; file++)
		for (int proc = 0; proc < 2; proc++)
			put_rows(file ? "file" : "shm", proc, &put[file][proc], 0);
	bench_rule(bench_table_width(TCOLS, tw));
	printf("direct put = hc_store_put of the same pages in one call, queue depth 256 (the service's)\n\n");
	printf("prefetch throughput: the same pages evicted, then brought back (exists, reserve, get, check, commit)\n");
	bench_row(TCOLS, tw, "backend", "service", "request shape", "ours GB/s", "direct get GB/s", "ratio", "target");
	bench_rule(bench_table_width(TCOLS, tw));
	for (int file = 0; file < 2; file++)
		for (int proc = 0; proc < 2; proc++)
			put_rows(file ? "file" : "shm", proc, &put[file][proc], 1);
	bench_rule(bench_table_width(TCOLS, tw));
	printf("direct get = hc_store_get of the same pages from %d threads (the service's workers) into pages reserved beforehand (not timed)\n",
	       PF_THREADS);
	l3b_done(&b);
	munmap(ps, sizeof(*ps));
	return 0;
}
