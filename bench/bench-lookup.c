/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-lookup.c - prefix lookups per second on an index of 1 million
 * random keys, against Concurrency Kit's ck_ht holding the same keys, in
 * the same run.
 *
 * Ours:     hc_lookup(nkeys = list length); with pinning, HC_LOOKUP_PIN
 *           and then hc_page_unpin of every page (lookup + pin + unpin).
 * ck_ht:    CK_HT_MODE_BYTESTRING, 32-byte keys, value = page id; a prefix
 *           lookup is ck_ht_hash + ck_ht_get_spmc per key, stopping at the
 *           first miss (hashing is part of a probe for both).
 * ck_ht+cnt: the same, plus one atomic increment of a per-entry counter per
 *           key found and one decrement per key afterwards: the nearest
 *           thing to a pin that ck_ht can do, a fairer peer for pinning.
 *
 * Query lists of 1, 16 and 1000 keys are drawn from the stored keys, each
 * key at a random position (all hits: the full-length worst case), and
 * generated before anything is timed.  Each list length runs in 1 and in 2
 * forked processes; each process attaches the pool itself and reads the
 * ck_ht it inherited by fork (read-only).  For every (list length,
 * processes) the four variants run interleaved, repetition after
 * repetition, so each figure has its peer from the same minute.
 *
 * The pool is as small per page as the library allows (one 4 KiB state
 * component, so 4 KiB envelopes) with 2^20 pages; its envelopes are never
 * touched, so it is created and attached without populating them.  This is
 * a memory-latency path: the key index (16 MiB), the page table (64 MiB)
 * and ck_ht's table (64 MiB) and keys (32 MiB) are far larger than the
 * caches, so nearly every probe pays a cache miss and a TLB miss.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ck_ht.h>

#include <hicache/hicache.h>

#include "bench.h"

#define SHM_DIR    "/dev/shm"
#define POOL_PAGES (UINT32_C(1) << 20)
#define MAX_RANKS  4 /* parent (fill) + 2 workers; keeps the pin table at 16 B per page */
#define DEF_KEYS   1000000u
#define QUERY_KEYS (UINT32_C(1) << 21) /* keys of pre-generated query lists (64 MiB) */
#define FILL_BATCH 1024u
#define MAX_PROCS  2
#define MAX_LIST   1000u
#define MAX_REPS   15
/* Enough random keys that every 4 KiB page of the index, the page table,
 * the pin table and the counters is touched (a page-table page of 64
 * entries is missed with probability e^-16). */
#define WARM_KEYS    (QUERY_KEYS / 8)
#define TARGET_MPPS  10.0 /* million key probes per second per core */
#define TARGET_RATIO 0.8  /* of ck_ht */

enum peer { OURS = 0, OURS_PIN, CK, CK_CNT, NPEERS };
static const char *const peer_name[NPEERS] = { "hicache", "hicache+pin", "ck_ht", "ck_ht+cnt" };

struct opts {
	unsigned reps;
	double seconds; /* timed length of one run of one variant */
	unsigned keys;  /* keys stored */
	uint64_t seed;
	const char *dir; /* --huge: the pool in this huge-page tmpfs, ck_ht's memory on huge pages too */
	unsigned gap;    /* --gap: rounds of the caller's own work after every lookup, all variants */
};

static const char *huge_dir; /* o.dir, for the allocator below */

/* Parent -> worker. */
struct cmd {
	uint32_t op; /* OP_RUN or OP_QUIT */
	uint32_t peer;
	uint32_t n; /* keys per lookup */
	uint32_t pad;
	uint64_t dur_ns;
};
#define OP_RUN  1u
#define OP_QUIT 2u

/* Worker -> parent: after the warm-up, and after each run. */
struct report {
	uint64_t lookups;
	uint64_t probes; /* keys probed (all hits: lookups * n) */
	uint64_t ns;
	int err; /* 0, or a negative errno */
	char msg[240];
};

struct worker {
	pid_t pid;
	int cmd; /* write end */
	int rep; /* read end */
};

struct bench {
	struct opts o;
	char name[HC_NAME_MAX + 1];
	char path[512];
	hc_key_t *keys;    /* the stored keys */
	uint32_t *ids;     /* page id of keys[i] */
	hc_key_t *queries; /* QUERY_KEYS keys drawn from keys[] */
	ck_ht_t ht;
	bool ht_live;
	_Atomic uint32_t *cnt; /* ck_ht+cnt's per-entry counters, shared by the workers */
	size_t cnt_bytes;
	struct worker w[MAX_PROCS];
	unsigned nworkers;
};

/* ---- keys: 32 random bytes each (they stand for SHA-256 digests) */

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static void make_keys(hc_key_t *keys, unsigned n, uint64_t *rng)
{
	for (unsigned i = 0; i < n; i++)
		for (unsigned w = 0; w < HC_KEY_BYTES / 8; w++) {
			uint64_t v = splitmix64(rng);
			memcpy(&keys[i][w * 8], &v, 8);
		}
}

/* ---- ck_ht's allocator */

/* Memory for ck_ht and its keys: on 2 MiB pages with --huge, as the pool is
 * then, so both sides pay the same TLB; else malloc's (4 KiB pages here). */
static void *big_alloc(size_t n)
{
	const size_t huge = (size_t)2 << 20;
	void *q;

	if (!huge_dir || n < huge / 2)
		return malloc(n);
	if (posix_memalign(&q, huge, (n + huge - 1) / huge * huge))
		return NULL;
	madvise(q, (n + huge - 1) / huge * huge, MADV_HUGEPAGE);
	return q;
}

static void *ck_mem_malloc(size_t n)
{
	return big_alloc(n);
}

static void *ck_mem_realloc(void *p, size_t old, size_t n, bool defer)
{
	(void)old;
	(void)defer;
	return realloc(p, n);
}

static void ck_mem_free(void *p, size_t n, bool defer)
{
	(void)n;
	(void)defer;
	free(p);
}

static struct ck_malloc ck_mem = { .malloc = ck_mem_malloc, .realloc = ck_mem_realloc, .free = ck_mem_free };

/* ---- one prefix lookup of each kind; 0, or -1 with r filled in */

static void fail(struct report *r, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(struct report *r, int err, const char *fmt, ...)
{
	va_list ap;

	r->err = err;
	va_start(ap, fmt);
	vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
	va_end(ap);
}

/*
 * --gap N: what a caller does with an answer before its next lookup, the
 * same for every variant: N rounds of a multiply and a shift on the value
 * found (about 4 instructions a round, each on the one before), timed
 * with the lookups.  Back to back with nothing between them, one lookup's
 * last miss can overlap the next lookup's first in the core's out-of-order
 * window; work on the answer in between takes that overlap away from
 * every variant alike.
 */
static unsigned gap_rounds;
static volatile uint64_t gap_sink;

static __attribute__((noinline)) void caller_work(uint64_t v)
{
	for (unsigned k = 0; k < gap_rounds; k++) {
		v ^= v >> 31;
		v *= UINT64_C(0x9e3779b97f4a7c15);
	}
	gap_sink = v;
}

static inline int ours_lookup(hc_pool *p, const hc_key_t *q, unsigned n, bool pin, hc_page_t *pages, struct report *r)
{
	struct hc_lookup_req req = { .size = sizeof(struct hc_lookup_req),
				     .keys = q,
				     .nkeys = n,
				     .flags = pin ? HC_LOOKUP_PIN : 0 };
	int hit = hc_lookup(p, &req, pages), ret;

	if (__builtin_expect(hit != (int)n, 0)) {
		if (hit < 0)
			fail(r, hit, "hc_lookup: %s", hc_last_error());
		else
			fail(r, -EIO, "hc_lookup found %d of %u stored keys", hit, n);
		return -1;
	}
	if (pin)
		for (unsigned i = 0; i < n; i++)
			if (__builtin_expect((ret = hc_page_unpin(p, pages[i])) < 0, 0)) {
				fail(r, ret, "hc_page_unpin: %s", hc_last_error());
				return -1;
			}
	if (gap_rounds)
		caller_work(HC_PAGE_ID(pages[n - 1]));
	return 0;
}

static inline int ck_lookup(ck_ht_t *ht, const hc_key_t *q, unsigned n, _Atomic uint32_t *cnt, uintptr_t *vals,
			    struct report *r)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		ck_ht_hash_t h;
		ck_ht_entry_t e;

		ck_ht_hash(&h, ht, q[i], HC_KEY_BYTES);
		ck_ht_entry_key_set(&e, q[i], HC_KEY_BYTES);
		if (!ck_ht_get_spmc(ht, h, &e))
			break; /* the prefix ends at the first miss */
		vals[i] = (uintptr_t)ck_ht_entry_value(&e);
		if (cnt)
			atomic_fetch_add(&cnt[vals[i]], 1);
	}
	if (cnt)
		for (unsigned j = 0; j < i; j++)
			atomic_fetch_sub(&cnt[vals[j]], 1);
	if (gap_rounds && i)
		caller_work(vals[i - 1]);
	if (__builtin_expect(i != n, 0)) {
		fail(r, -EIO, "ck_ht_get_spmc found %u of %u stored keys", i, n);
		return -1;
	}
	return 0;
}

/* ---- the workers */

struct wctx {
	struct bench *b;
	hc_pool *p;
	hc_page_t pages[MAX_LIST];
	uintptr_t vals[MAX_LIST];
	size_t cursor; /* next query key; each run goes on where the last stopped */
};

/*
 * Lookups of n keys for dur_ns, or with dur_ns == 0 a warm-up pass over
 * WARM_KEYS query keys.  The clock is read once per ~256 keys.
 */
static void run_loop(struct wctx *c, enum peer peer, unsigned n, uint64_t dur_ns, struct report *r)
{
	const unsigned inner = n >= 256 ? 1 : 256 / n;
	const bool pass = dur_ns == 0;
	uint64_t t0, t, lookups = 0, left = WARM_KEYS;
	struct bench *b = c->b;
	int ret = 0;

	t0 = bench_now_ns();
	do {
		for (unsigned k = 0; k < inner; k++) {
			const hc_key_t *q;

			if (c->cursor + n > QUERY_KEYS)
				c->cursor = 0;
			q = b->queries + c->cursor;
			c->cursor += n;
			switch (peer) {
			case OURS:
				ret = ours_lookup(c->p, q, n, false, c->pages, r);
				break;
			case OURS_PIN:
				ret = ours_lookup(c->p, q, n, true, c->pages, r);
				break;
			case CK:
				ret = ck_lookup(&b->ht, q, n, NULL, c->vals, r);
				break;
			case CK_CNT:
				ret = ck_lookup(&b->ht, q, n, b->cnt, c->vals, r);
				break;
			default:
				fail(r, -EINVAL, "unknown variant %d", (int)peer);
				ret = -1;
			}
			if (ret < 0)
				return;
		}
		lookups += inner;
		t = bench_now_ns();
		if (pass) {
			if (left <= (uint64_t)inner * n)
				break;
			left -= (uint64_t)inner * n;
		}
	} while (pass || t - t0 < dur_ns);
	r->lookups = lookups;
	r->probes = lookups * n;
	r->ns = t - t0;
}

static unsigned cpus_allowed(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return 1;
	return (unsigned)CPU_COUNT(&set);
}

static int send_report(int fd, struct report *r)
{
	return bench_write_all(fd, r, sizeof(*r));
}

static void __attribute__((noreturn)) worker(struct bench *b, unsigned idx, int cmd_fd, int rep_fd)
{
	const struct hc_attach_opts ao = { .size = sizeof(struct hc_attach_opts),
					   .flags = HC_ATTACH_NO_POPULATE,
					   .dir = huge_dir };
	struct wctx *c = calloc(1, sizeof(*c));
	struct report r = { 0 };
	struct cmd cmd;
	int ret;

	bench_pin_cpu(idx);
	if (!c) {
		fail(&r, -ENOMEM, "no memory for the worker's buffers");
		goto out;
	}
	c->b = b;
	/* Each worker starts elsewhere in the query list, so two never walk the
	 * same keys in step and share each other's cache misses. */
	c->cursor = (size_t)idx * (QUERY_KEYS / MAX_PROCS);
	/* A rank attach of its own: a handle inherited by fork is refused. */
	ret = hc_pool_attach(b->name, &ao, &c->p);
	if (ret < 0) {
		fail(&r, ret, "hc_pool_attach: %s", hc_last_error());
		goto out;
	}
	/* Warm-up: fault in this process's mapping of the index, the page table
	 * and the pin table, and ck_ht's counters, with the variants that touch
	 * the most. */
	run_loop(c, OURS_PIN, MAX_LIST, 0, &r);
	if (!r.err)
		run_loop(c, CK_CNT, MAX_LIST, 0, &r);
	if (r.err)
		goto out;
	memset(&r, 0, sizeof(r));
	if (send_report(rep_fd, &r) < 0)
		goto out;
	for (;;) {
		if (bench_read_all(cmd_fd, &cmd, sizeof(cmd)) < 0 || cmd.op != OP_RUN)
			break; /* OP_QUIT, or the parent went away */
		memset(&r, 0, sizeof(r));
		if (cmd.n == 0 || cmd.n > MAX_LIST || cmd.peer >= NPEERS) {
			fail(&r, -EINVAL, "bad command: variant %u, %u keys", cmd.peer, cmd.n);
			break;
		}
		/* A short untimed run first: branch predictors, the first lines. */
		run_loop(c, (enum peer)cmd.peer, cmd.n, cmd.dur_ns / 20 + 1, &r);
		if (r.err)
			break;
		memset(&r, 0, sizeof(r));
		run_loop(c, (enum peer)cmd.peer, cmd.n, cmd.dur_ns, &r);
		if (r.err)
			break;
		if (send_report(rep_fd, &r) < 0)
			goto out_quiet;
	}
out:
	if (r.err)
		send_report(rep_fd, &r);
out_quiet:
	if (c && c->p)
		hc_pool_detach(c->p);
	free(c);
	_exit(r.err ? 1 : 0);
}

/* Fork the workers and wait until each is attached and warm. */
static int start_workers(struct bench *b, unsigned n)
{
	struct report r;
	int ret = 0;

	fflush(stdout);
	fflush(stderr);
	for (unsigned i = 0; i < n; i++) {
		int cp[2], rp[2];

		if (pipe(cp) < 0) {
			ret = -errno;
			fprintf(stderr, "bench-lookup: pipe: %s\n", strerror(-ret));
			return ret;
		}
		if (pipe(rp) < 0) {
			ret = -errno;
			fprintf(stderr, "bench-lookup: pipe: %s\n", strerror(-ret));
			close(cp[0]);
			close(cp[1]);
			return ret;
		}
		b->w[i].pid = fork();
		if (b->w[i].pid < 0) {
			ret = -errno;
			fprintf(stderr, "bench-lookup: fork: %s\n", strerror(-ret));
			close(cp[0]);
			close(cp[1]);
			close(rp[0]);
			close(rp[1]);
			return ret;
		}
		if (b->w[i].pid == 0) {
			for (unsigned j = 0; j < i; j++) {
				close(b->w[j].cmd);
				close(b->w[j].rep);
			}
			close(cp[1]);
			close(rp[0]);
			worker(b, i, cp[0], rp[1]);
		}
		close(cp[0]);
		close(rp[1]);
		b->w[i].cmd = cp[1];
		b->w[i].rep = rp[0];
		b->nworkers++;
	}
	for (unsigned i = 0; i < n; i++) {
		if (bench_read_all(b->w[i].rep, &r, sizeof(r)) < 0) {
			fprintf(stderr, "bench-lookup: worker %u died during its attach and warm-up\n", i);
			ret = ret ? ret : -EPIPE;
		} else if (r.err) {
			fprintf(stderr, "bench-lookup: worker %u: %s\n", i, r.msg);
			ret = ret ? ret : r.err;
		}
	}
	return ret;
}

static void stop_workers(struct bench *b)
{
	const struct cmd q = { .op = OP_QUIT };
	int status;

	for (unsigned i = 0; i < b->nworkers; i++) {
		bench_write_all(b->w[i].cmd, &q, sizeof(q));
		close(b->w[i].cmd);
		close(b->w[i].rep);
	}
	for (unsigned i = 0; i < b->nworkers; i++)
		while (waitpid(b->w[i].pid, &status, 0) < 0 && errno == EINTR)
			;
	b->nworkers = 0;
}

/* One figure: nproc workers run one variant at once. */
struct fig {
	double lookups_s; /* all processes together */
	double mpps_core; /* million key probes per second, mean over processes (one core each) */
};

static int run_cell(struct bench *b, enum peer peer, unsigned nproc, unsigned n, struct fig *f)
{
	const struct cmd c = { .op = OP_RUN, .peer = peer, .n = n, .dur_ns = (uint64_t)(b->o.seconds * 1e9) };
	struct report r;
	int ret = 0;

	/* The command is the start signal; the workers start within
	 * microseconds of each other, against runs of tenths of a second. */
	for (unsigned i = 0; i < nproc; i++)
		if (bench_write_all(b->w[i].cmd, &c, sizeof(c)) < 0) {
			fprintf(stderr, "bench-lookup: worker %u is gone\n", i);
			return -EPIPE;
		}
	f->lookups_s = f->mpps_core = 0;
	for (unsigned i = 0; i < nproc; i++) {
		if (bench_read_all(b->w[i].rep, &r, sizeof(r)) < 0) {
			fprintf(stderr, "bench-lookup: %s worker %u died without a report\n", peer_name[peer], i);
			ret = ret ? ret : -EPIPE;
			continue;
		}
		if (r.err || r.ns == 0) {
			fprintf(stderr, "bench-lookup: %s worker %u: %s\n", peer_name[peer], i,
				r.err ? r.msg : "ran for no time");
			ret = ret ? ret : (r.err ? r.err : -EIO);
			continue;
		}
		f->lookups_s += (double)r.lookups * 1e9 / (double)r.ns;
		f->mpps_core += (double)r.probes * 1e3 / (double)r.ns / nproc;
	}
	return ret;
}

/* ---- the memory floor */

#define FLOOR_BYTES (UINT64_C(64) << 20) /* the page table's size */

/*
 * Random 64-byte lines of a 64 MiB buffer on 4 KiB pages, like the pool's
 * metadata: ns per load when each load waits for the one before (a pointer
 * chase: what a probe pays per miss it cannot overlap), and when loads are
 * independent (what one core can overlap at best).
 */
static int mem_floor(double *dep_ns, double *ind_ns)
{
	const size_t lines = FLOOR_BYTES / 64;
	const uint64_t chase = 300000, loads = 4000000;
	uint64_t *a, rng = 12345, pos = 0, sum = 0, t0;
	uint32_t *perm;

	a = mmap(NULL, FLOOR_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a == MAP_FAILED)
		return -ENOMEM;
	/* the pages the pool is on: 4 KiB in /dev/shm here, 2 MiB with --huge */
	madvise(a, FLOOR_BYTES, huge_dir ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	perm = malloc(lines * sizeof(*perm));
	if (!perm) {
		munmap(a, FLOOR_BYTES);
		return -ENOMEM;
	}
	/* One random cycle through every line (Sattolo). */
	for (size_t i = 0; i < lines; i++)
		perm[i] = (uint32_t)i;
	for (size_t i = lines - 1; i > 0; i--) {
		size_t j = splitmix64(&rng) % i;
		uint32_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	for (size_t i = 0; i < lines; i++)
		a[(size_t)perm[i] * 8] = (uint64_t)perm[(i + 1) % lines] * 8;
	free(perm);
	t0 = bench_now_ns();
	for (uint64_t i = 0; i < chase; i++)
		pos = a[pos];
	*dep_ns = (double)(bench_now_ns() - t0) / (double)chase;
	t0 = bench_now_ns();
	for (uint64_t i = 0; i < loads; i++)
		sum += a[(splitmix64(&rng) % lines) * 8];
	*ind_ns = (double)(bench_now_ns() - t0) / (double)loads;
	/* Keep both loops observable. */
	__asm__ __volatile__("" : : "r"(pos), "r"(sum) : "memory");
	munmap(a, FLOOR_BYTES);
	return 0;
}

/* ---- setup */

static uint64_t segment_estimate(void)
{
	/* envelope, page entry, pin row, ticket mask, two index slots; plus
	 * ticket pages, small regions and alignment */
	return (uint64_t)POOL_PAGES * (4096 + 64 + 4 * MAX_RANKS + 8 + 16) + (UINT64_C(16) << 20);
}

static int check_space(void)
{
	struct statvfs v;
	uint64_t need = segment_estimate(), avail;
	const char *dir = huge_dir ? huge_dir : SHM_DIR;

	if (statvfs(dir, &v) < 0) {
		int err = errno;
		fprintf(stderr, "bench-lookup: cannot stat %s: %s\n", dir, strerror(err));
		return -err;
	}
	avail = (uint64_t)v.f_bavail * v.f_frsize;
	if (avail < need) {
		fprintf(stderr,
			"bench-lookup: the pool needs about %.2f GiB in %s but only %.2f GiB is free:\n"
			"  free some space (hicache-pool ls; stale hicache.* files) or enlarge the tmpfs\n"
			"  (Docker: --shm-size=6g)\n",
			(double)need / (1 << 30), dir, (double)avail / (1 << 30));
		return -ENOSPC;
	}
	return 0;
}

static int create_pool(struct bench *b)
{
	/* The smallest envelope there is: one replicated 4 KiB state snapshot. */
	static const struct hc_component_spec st = {
		.size = sizeof(struct hc_component_spec),
		.name = "state",
		.dtype = HC_DTYPE_UINT8,
		.kind = HC_COMP_STATE,
		.sharding = HC_REPLICATED,
		.bytes_per_layer = 4096,
		.layers = 1,
	};
	struct hc_pool_spec s = {
		.size = sizeof(struct hc_pool_spec),
		.name = b->name,
		.model_id = "bench-lookup",
		.page_tokens = 1,
		.tp_size = 1,
		.comps = &st,
		.ncomp = 1,
		.capacity_pages = POOL_PAGES,
		.max_ranks = MAX_RANKS,
		.flags = HC_CREATE_NO_POPULATE,
		.dir = huge_dir,
	};
	int ret = hc_pool_create(&s);

	if (ret < 0)
		fprintf(stderr, "bench-lookup: cannot create pool '%s': %s\n", b->name, hc_last_error());
	return ret;
}

/* Store every key: hc_reserve in batches, then commit each page.  The
 * pages per second, or a negative errno. */
static int fill_ours(struct bench *b, double *rate, struct hc_pool_info *info)
{
	const struct hc_attach_opts ao = { .size = sizeof(struct hc_attach_opts),
					   .flags = HC_ATTACH_NO_POPULATE,
					   .dir = huge_dir };
	hc_page_t pages[FILL_BATCH];
	uint8_t skip[FILL_BATCH];
	hc_pool *p = NULL;
	uint32_t mask;
	uint64_t t0;
	int ret;

	if ((ret = hc_pool_attach(b->name, &ao, &p)) < 0) {
		fprintf(stderr, "bench-lookup: hc_pool_attach: %s\n", hc_last_error());
		return ret;
	}
	if ((ret = hc_pool_info(p, info, sizeof(*info))) < 0) {
		fprintf(stderr, "bench-lookup: hc_pool_info: %s\n", hc_last_error());
		goto out;
	}
	mask = hc_page_needed(p, 1);
	t0 = bench_now_ns();
	for (unsigned i = 0; i < b->o.keys; i += FILL_BATCH) {
		unsigned n = b->o.keys - i < FILL_BATCH ? b->o.keys - i : FILL_BATCH;
		struct hc_reserve_req req = { .size = sizeof(struct hc_reserve_req),
					      .keys = b->keys + i,
					      .nkeys = n,
					      .presence = 1 };

		ret = hc_reserve(p, &req, pages, skip);
		if (ret != (int)n) {
			if (ret < 0)
				fprintf(stderr, "bench-lookup: hc_reserve: %s\n", hc_last_error());
			else
				fprintf(stderr,
					"bench-lookup: hc_reserve reserved %d of %u new keys (a duplicate key?)\n", ret,
					n);
			ret = ret < 0 ? ret : -EIO;
			goto out;
		}
		for (unsigned k = 0; k < n; k++) {
			ret = hc_page_commit(p, pages[k], mask);
			if (ret != 1) {
				fprintf(stderr, "bench-lookup: hc_page_commit did not make page %u READY: %s\n",
					HC_PAGE_ID(pages[k]), ret < 0 ? hc_last_error() : "a shard is missing");
				ret = ret < 0 ? ret : -EIO;
				goto out;
			}
			b->ids[i + k] = HC_PAGE_ID(pages[k]);
		}
	}
	*rate = (double)b->o.keys * 1e9 / (double)(bench_now_ns() - t0);
	ret = 0;
out:
	if (hc_pool_detach(p) < 0 && ret == 0) {
		fprintf(stderr, "bench-lookup: hc_pool_detach: %s\n", hc_last_error());
		ret = -EIO;
	}
	return ret;
}

/* The same keys in ck_ht: key = the stored key's bytes, value = page id. */
static int fill_ck(struct bench *b, double *rate)
{
	uint64_t t0;

	/* Sized so it never grows: ck_ht keeps its load factor under 0.5. */
	if (!ck_ht_init(&b->ht, CK_HT_MODE_BYTESTRING, NULL, &ck_mem, 2 * (uint64_t)b->o.keys, b->o.seed)) {
		fprintf(stderr, "bench-lookup: ck_ht_init failed (no memory?)\n");
		return -ENOMEM;
	}
	b->ht_live = true;
	t0 = bench_now_ns();
	for (unsigned i = 0; i < b->o.keys; i++) {
		ck_ht_hash_t h;
		ck_ht_entry_t e;

		ck_ht_hash(&h, &b->ht, b->keys[i], HC_KEY_BYTES);
		ck_ht_entry_set(&e, h, b->keys[i], HC_KEY_BYTES, (void *)(uintptr_t)b->ids[i]);
		if (!ck_ht_put_spmc(&b->ht, h, &e)) {
			fprintf(stderr, "bench-lookup: ck_ht_put_spmc failed on key %u (duplicate, or no memory)\n", i);
			return -EIO;
		}
	}
	*rate = (double)b->o.keys * 1e9 / (double)(bench_now_ns() - t0);
	if (ck_ht_count(&b->ht) != b->o.keys) {
		fprintf(stderr, "bench-lookup: ck_ht holds %" PRIu64 " keys, not %u\n", (uint64_t)ck_ht_count(&b->ht),
			b->o.keys);
		return -EIO;
	}
	return 0;
}

/* After the runs: nothing may stay pinned, and every key is still there. */
static int check_pool(struct bench *b)
{
	const struct hc_attach_opts ao = { .size = sizeof(struct hc_attach_opts),
					   .flags = HC_ATTACH_ADMIN | HC_ATTACH_NO_RECOVER,
					   .dir = huge_dir };
	struct hc_stats s;
	hc_pool *p;
	int ret;

	if ((ret = hc_pool_attach(b->name, &ao, &p)) < 0) {
		fprintf(stderr, "bench-lookup: hc_pool_attach (admin): %s\n", hc_last_error());
		return ret;
	}
	ret = hc_pool_stats(p, &s, sizeof(s));
	if (ret < 0)
		fprintf(stderr, "bench-lookup: hc_pool_stats: %s\n", hc_last_error());
	else if (s.pin_count != 0 || s.keyed != b->o.keys || s.pages[HC_PAGE_READY] != b->o.keys) {
		fprintf(stderr,
			"bench-lookup: after the runs the pool holds %" PRIu64 " pins (want 0), %" PRIu64
			" keyed and %" PRIu64 " READY pages (want %u)\n",
			s.pin_count, s.keyed, s.pages[HC_PAGE_READY], b->o.keys);
		ret = -EIO;
	} else {
		printf("after the runs: %" PRIu64 " keyed READY pages, 0 pins held; %" PRIu64 " lookups and %" PRIu64
		       " pins counted\n",
		       s.keyed, s.counter[HC_CTR_lookups], s.counter[HC_CTR_pins]);
	}
	hc_pool_detach(p);
	return ret;
}

/* ---- options */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench-lookup [--reps N] [--seconds S] [--keys N] [--seed N] [--huge DIR] [--gap N]\n"
		"  Prefix lookups of 1, 16 and 1000 keys, with and without pinning, in 1 and 2\n"
		"  processes, on an index of 1 million random keys, against ck_ht holding the\n"
		"  same keys.  The pool takes about 4.3 GiB of /dev/shm (no envelope is touched).\n"
		"  --reps N     repetitions per case; the median is printed (default 5; HC_QUICK=1: 3)\n"
		"  --seconds S  timed length of one run of one variant (default 0.5; HC_QUICK=1: 0.1)\n"
		"  --keys N     keys stored (default %u, at most %u)\n"
		"  --seed N     seed of the key generator (default 1)\n"
		"  --huge DIR   the pool in DIR (a huge=always tmpfs), ck_ht's memory on 2 MiB pages too\n"
		"  --gap N      after every lookup, N rounds of the caller's own work on the answer, in\n"
		"               every variant alike (default 0: lookups back to back; at most 1000)\n",
		DEF_KEYS, POOL_PAGES);
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "reps", required_argument, NULL, 'r' }, { "seconds", required_argument, NULL, 's' },
		{ "keys", required_argument, NULL, 'k' }, { "seed", required_argument, NULL, 'S' },
		{ "huge", required_argument, NULL, 'H' }, { "gap", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },       { NULL, 0, NULL, 0 },
	};
	const char *quick = getenv("HC_QUICK");
	unsigned long v;
	char *end;
	int c;

	o->reps = 5;
	o->seconds = 0.5;
	o->keys = DEF_KEYS;
	o->seed = 1;
	if (quick && *quick && strcmp(quick, "0") != 0) {
		o->reps = 3;
		o->seconds = 0.1;
	}
	while ((c = getopt_long(argc, argv, "r:s:k:S:H:g:h", lo, NULL)) != -1) {
		switch (c) {
		case 'H':
			o->dir = optarg;
			break;
		case 'g':
			v = strtoul(optarg, &end, 10);
			if (*end || !*optarg || v > 1000) {
				fprintf(stderr, "bench-lookup: --gap must be 0..1000\n");
				return -EINVAL;
			}
			o->gap = (unsigned)v;
			break;
		case 'r':
			v = strtoul(optarg, &end, 10);
			if (*end || v < 1 || v > MAX_REPS) {
				fprintf(stderr, "bench-lookup: --reps must be 1..%d\n", MAX_REPS);
				return -EINVAL;
			}
			o->reps = (unsigned)v;
			break;
		case 's':
			o->seconds = strtod(optarg, &end);
			if (*end || !(o->seconds >= 0.01 && o->seconds <= 10)) {
				fprintf(stderr, "bench-lookup: --seconds must be 0.01..10\n");
				return -EINVAL;
			}
			break;
		case 'k':
			v = strtoul(optarg, &end, 10);
			if (*end || v < MAX_LIST || v > POOL_PAGES) {
				fprintf(stderr, "bench-lookup: --keys must be %u..%u\n", MAX_LIST, POOL_PAGES);
				return -EINVAL;
			}
			o->keys = (unsigned)v;
			break;
		case 'S':
			o->seed = strtoull(optarg, &end, 0);
			if (*end || !*optarg) {
				fprintf(stderr, "bench-lookup: --seed must be a number\n");
				return -EINVAL;
			}
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

/* ---- main */

/* "1.23 M", "45.6 k" */
static const char *rate(double v)
{
	return v >= 1e6 ? bench_fmt("%.2f M", v / 1e6) : bench_fmt("%.1f k", v / 1e3);
}

static const char *verdict(bool met)
{
	return met ? "met" : "MISSED";
}

int main(int argc, char **argv)
{
	static const unsigned lens[] = { 1, 16, 1000 };
	enum { NLENS = sizeof(lens) / sizeof(lens[0]) };
	static const int w[] = { -25, 10, 13, 12, 5, 13, 5, -6, -6 };
	enum { NCOL = sizeof(w) / sizeof(w[0]) };
	/* [list length][procs - 1][variant][rep] */
	static struct fig fig[NLENS][MAX_PROCS][NPEERS][MAX_REPS];
	struct bench b = { 0 };
	struct hc_pool_info info;
	double fill_rate, ck_rate, dep_ns, ind_ns;
	unsigned ncpu, nproc_max;
	int ret, slot = -1, status = 1;
	bool created = false;
	uint64_t rng, t0;

	if (parse(argc, argv, &b.o) < 0)
		return 2;
	huge_dir = b.o.dir;
	gap_rounds = b.o.gap;
	bench_cleanup_init();
	signal(SIGPIPE, SIG_IGN); /* a dead worker is an error report, not a dead parent */
	snprintf(b.name, sizeof(b.name), "hcbench-lookup-%d", (int)getpid());
	snprintf(b.path, sizeof(b.path), "%s/hicache.%s", huge_dir ? huge_dir : SHM_DIR, b.name);
	ncpu = cpus_allowed();
	nproc_max = MAX_PROCS;

	if ((ret = check_space()) < 0)
		return 1;

	b.keys = big_alloc((size_t)b.o.keys * sizeof(hc_key_t));
	b.ids = malloc((size_t)b.o.keys * sizeof(uint32_t));
	b.queries = malloc((size_t)QUERY_KEYS * sizeof(hc_key_t));
	b.cnt_bytes = (size_t)POOL_PAGES * sizeof(uint32_t);
	b.cnt = mmap(NULL, b.cnt_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!b.keys || !b.ids || !b.queries || b.cnt == MAP_FAILED) {
		fprintf(stderr, "bench-lookup: no memory for %u keys and %u query keys\n", b.o.keys, QUERY_KEYS);
		if (b.cnt == MAP_FAILED)
			b.cnt = NULL;
		ret = -ENOMEM;
		goto out_free;
	}
	rng = b.o.seed;
	make_keys(b.keys, b.o.keys, &rng);

	slot = bench_cleanup_add(b.path);
	if ((ret = create_pool(&b)) < 0)
		goto out_free;
	created = true;
	if ((ret = fill_ours(&b, &fill_rate, &info)) < 0 || (ret = fill_ck(&b, &ck_rate)) < 0)
		goto out_destroy;

	/* Query lists: every key drawn at random from the stored ones. */
	for (uint32_t i = 0; i < QUERY_KEYS; i++)
		memcpy(b.queries[i], b.keys[splitmix64(&rng) % b.o.keys], HC_KEY_BYTES);

	printf("bench-lookup: hicache %s, pool %s: %u pages, envelope %" PRIu64 " B, %u rank slots, segment %.2f GiB\n",
	       hc_version(), b.name, info.npages, info.envelope_bytes, info.max_ranks,
	       (double)info.segment_bytes / (1 << 30));
	printf("index: %u keys in %u slots (%.0f MiB), page table %.0f MiB, pin table %.0f MiB; "
	       "ck_ht: %u keys, 32 B entries (%.0f MiB) + keys (%.0f MiB)\n",
	       b.o.keys, info.index_slots, info.index_slots * 8.0 / (1 << 20), info.npages * 64.0 / (1 << 20),
	       info.npages * 4.0 * info.max_ranks / (1 << 20), b.o.keys, 2.0 * b.o.keys * 32 / (1 << 20),
	       b.o.keys * 32.0 / (1 << 20));
	printf("fill: hicache %.2f M pages/s (hc_reserve of %u keys + hc_page_commit each), "
	       "ck_ht_put_spmc %.2f M keys/s: ratio %.2f\n",
	       fill_rate / 1e6, FILL_BATCH, ck_rate / 1e6, fill_rate / ck_rate);
	if ((ret = mem_floor(&dep_ns, &ind_ns)) < 0) {
		fprintf(stderr, "bench-lookup: no memory for the 64 MiB buffer of the memory floor\n");
		goto out_destroy;
	}
	printf("memory floor, random lines of 64 MiB on 4 KiB pages: %.0f ns a load when each waits for the last,\n"
	       "  %.1f ns a load when independent.  A probe is 2 dependent misses (bucket, then page entry;\n"
	       "  ck_ht: entry, then key): %.2f M probes/s if nothing overlaps; %.0f M/s per core needs about\n"
	       "  %.0f misses in flight, of the %.0f this core can keep\n",
	       dep_ns, ind_ns, 1e3 / (2 * dep_ns), TARGET_MPPS, 2 * dep_ns * TARGET_MPPS / 1e3, dep_ns / ind_ns);
	if (ncpu < MAX_PROCS)
		printf("note: only %u CPU allowed: the 2-process rows share it, per-core figures are per process\n",
		       ncpu);

	t0 = bench_now_ns();
	if ((ret = start_workers(&b, nproc_max)) < 0)
		goto out_workers;
	printf("%u workers attached and warmed up (%u lookups of each kind) in %.2f s\n", nproc_max, WARM_KEYS,
	       (double)(bench_now_ns() - t0) / 1e9);
	printf("median of %u repetitions of %.2f s per variant, variants interleaved; all lookups hit\n\n", b.o.reps,
	       b.o.seconds);
	fflush(stdout);

	for (unsigned l = 0; l < NLENS; l++)
		for (unsigned np = 1; np <= nproc_max; np++)
			for (unsigned r = 0; r < b.o.reps; r++)
				for (unsigned k = 0; k < NPEERS; k++) {
					/* Alternate the order, so drift favours neither side. */
					static const enum peer order[2][NPEERS] = { { OURS, CK, OURS_PIN, CK_CNT },
										    { CK, OURS, CK_CNT, OURS_PIN } };
					enum peer pe = order[r % 2][k];

					if ((ret = run_cell(&b, pe, np, lens[l], &fig[l][np - 1][pe][r])) < 0)
						goto out_workers;
				}

	bench_row(NCOL, w, "case", "lookups/s", "Mprobe/s/core", "ck_ht Mp/s/c", "ratio", "ck+cnt Mp/s/c", "ratio",
		  ">=10M", ">=0.8");
	bench_rule(bench_table_width(NCOL, w));
	for (unsigned l = 0; l < NLENS; l++)
		for (unsigned pin = 0; pin < 2; pin++)
			for (unsigned np = 1; np <= nproc_max; np++) {
				const enum peer ours = pin ? OURS_PIN : OURS;
				double lk[MAX_REPS], mp[MAX_REPS], ck[MAX_REPS], cc[MAX_REPS], ra[MAX_REPS],
					rc[MAX_REPS];
				double mlk, mmp, mck, mcc, mra, mrc;
				struct fig(*f)[MAX_REPS] = fig[l][np - 1];

				for (unsigned r = 0; r < b.o.reps; r++) {
					lk[r] = f[ours][r].lookups_s;
					mp[r] = f[ours][r].mpps_core;
					ck[r] = f[CK][r].mpps_core;
					cc[r] = f[CK_CNT][r].mpps_core;
					/* ratios of neighbours in time, then their median */
					ra[r] = mp[r] / ck[r];
					rc[r] = mp[r] / cc[r];
				}
				mlk = bench_median(lk, b.o.reps);
				mmp = bench_median(mp, b.o.reps);
				mck = bench_median(ck, b.o.reps);
				mcc = bench_median(cc, b.o.reps);
				mra = bench_median(ra, b.o.reps);
				mrc = bench_median(rc, b.o.reps);
				bench_row(NCOL, w,
					  bench_fmt("%4u key%s, %s, %u proc%s", lens[l], lens[l] > 1 ? "s" : " ",
						    pin ? "pin  " : "nopin", np, np > 1 ? "s" : ""),
					  rate(mlk), bench_fmt("%.2f", mmp), bench_fmt("%.2f", mck),
					  bench_fmt("%.2f", mra), pin ? bench_fmt("%.2f", mcc) : "-",
					  pin ? bench_fmt("%.2f", mrc) : "-", verdict(mmp >= TARGET_MPPS),
					  verdict(mra >= TARGET_RATIO));
			}
	bench_rule(bench_table_width(NCOL, w));
	if (b.o.gap)
		printf("--gap %u: every variant does %u rounds of its own work on each answer before the next lookup,\n"
		       "timed with the lookups: every figure includes it\n",
		       b.o.gap, b.o.gap);
	printf("lookups/s: prefix lookups per second, all processes together; Mprobe/s/core: million keys\n"
	       "probed per second by each process (one core each), the mean over processes; ratio: ours /\n"
	       "peer, the median of the ratios of neighbouring runs.  pin = HC_LOOKUP_PIN + hc_page_unpin\n"
	       "of every page; its ratio is against plain ck_ht (the issue's target) and, as a fairer\n"
	       "peer, ck_ht + an atomic increment and decrement of a per-entry counter (ck+cnt).\n"
	       "Targets: >= %.0f M key probes/s per core, >= %.1f of ck_ht.  A memory-latency path: the index\n"
	       "(%.0f MiB) and page table (%.0f MiB) are far out of cache, as are ck_ht's table and keys;\n"
	       "each probe waits on about two cache misses, each with a TLB miss on 4 KiB pages.\n\n",
	       TARGET_MPPS, TARGET_RATIO, info.index_slots * 8.0 / (1 << 20), info.npages * 64.0 / (1 << 20));
	/* A missed target is a finding to report, not a failure of the run. */
	status = 0;

out_workers:
	stop_workers(&b);
	if (status == 0 && check_pool(&b) < 0)
		status = 1;
out_destroy:
	if (b.ht_live)
		ck_ht_destroy(&b.ht);
	if (created) {
		if (hc_pool_destroy(b.name, huge_dir, HC_DESTROY_FORCE) < 0) {
			fprintf(stderr, "bench-lookup: cannot remove pool '%s': %s\n", b.name, hc_last_error());
			status = 1;
		}
	}
	if (access(b.path, F_OK) == 0) {
		fprintf(stderr, "bench-lookup: %s is still there after destroy\n", b.path);
		status = 1;
	} else {
		bench_cleanup_forget(slot);
	}
out_free:
	if (b.cnt)
		munmap(b.cnt, b.cnt_bytes);
	free(b.keys);
	free(b.ids);
	free(b.queries);
	return ret < 0 ? 1 : status;
}
