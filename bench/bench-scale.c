/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-scale.c - what a page operation costs as the pool grows, with the
 * pool in steady state: full, every new page an eviction.
 *
 * For each pool size (16 K to 4 M pages), each policy (CLOCK, exact LRU)
 * and 1 or 2 processes, the ns per page of:
 *   reserve+commit  hc_reserve of 8 new keys (each evicts one page) and a
 *                   commit of each;
 *   evict           hc_evict of 64 pages (then the 64 are stored again,
 *                   untimed);
 *   lookup+pin      a 1-key hc_lookup with HC_LOOKUP_PIN and its unpin, of
 *                   a key among the 4096 this process stored last (a hot
 *                   set: the cost of the structures, not of DRAM);
 *   lookup (cold)   the same of a key anywhere in what this process stored
 *                   and the pool still holds, next to the peer: one random
 *                   64-byte read in a table the size of the page table,
 *                   the memory system's floor for a lookup that misses.
 * The target (doc/design.md, "Measuring"): the 4 M figure within 1.3x of
 * the 16 K one for every operation but the cold lookup, whose ratio to its
 * peer is what must stay flat.
 *
 * The pools are created HC_CREATE_SPARSE: the envelopes (4 KiB a page) are
 * never reserved nor touched, so 4 M pages fit in memory; only the page
 * table, the index, the holds, the free map and the LRU list are real.
 * The table is printed, and with --svg FILE the curves as a chart.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hicache/hicache.h>

#include "bench.h"

#define MAX_SIZES 8
#define MAX_PROCS 2
#define BATCH     8    /* keys a reservation */
#define EVICT_N   64   /* pages an eviction */
#define HOT       4096 /* keys of the hot set */

enum op { OP_RESERVE, OP_EVICT, OP_HOT, OP_COLD, OP_PEER, OP__COUNT };
static const char *const op_name[OP__COUNT] = { "reserve+commit", "evict", "lookup+pin", "lookup (cold)",
						"peer: DRAM read" };

struct opts {
	uint32_t sizes[MAX_SIZES];
	unsigned nsizes;
	double seconds;
	unsigned procs_max;
	const char *svg;
	const char *dir; /* the pools' directory (and the peer's table): NULL for /dev/shm */
};

/* A worker's report: ns per page of each op (0: not run), or an error. */
struct report {
	double ns[OP__COUNT];
	int err;
	char msg[200];
};

/* [policy][procs - 1][size][op] */
static double result[2][MAX_PROCS][MAX_SIZES][OP__COUNT];

/* ---- keys: 32 uniform bytes from (process, counter) */

static inline uint64_t mix(uint64_t x)
{
	x += UINT64_C(0x9e3779b97f4a7c15);
	x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
	return x ^ (x >> 31);
}

static void key_of(unsigned who, uint64_t i, hc_key_t out)
{
	uint64_t w[4];

	for (int k = 0; k < 4; k++)
		w[k] = mix(((uint64_t)who << 56) ^ (i << 2) ^ (uint64_t)k);
	memcpy(out, w, sizeof(w));
}

/* ---- the operations */

/* Store keys [next, next + n) of 'who' (a chain); n pages stored, or -errno. */
static int store(hc_pool *p, unsigned who, uint64_t next, unsigned n)
{
	hc_key_t keys[EVICT_N];
	hc_page_t pg[EVICT_N];
	uint8_t skip[EVICT_N];
	struct hc_reserve_req rq = { .size = sizeof(rq), .keys = keys, .nkeys = n };
	int r;

	for (unsigned i = 0; i < n; i++)
		key_of(who, next + i, keys[i]);
	if ((r = hc_reserve(p, &rq, pg, skip)) < 0)
		return r;
	for (unsigned i = 0; i < n; i++) {
		uint32_t pres;
		int c;

		if (skip[i])
			continue;
		hc_page_presence(p, pg[i], &pres);
		if ((c = hc_page_commit(p, pg[i], hc_page_needed(p, pres))) < 0)
			return c;
	}
	return r;
}

/* Look up key i of 'who' with a pin, and unpin it: 1 hit, 0 miss, -errno. */
static int lookup_pin(hc_pool *p, unsigned who, uint64_t i)
{
	hc_key_t k;
	struct hc_lookup_req rq = { .size = sizeof(rq),
				    .keys = (const hc_key_t *)&k,
				    .nkeys = 1,
				    .flags = HC_LOOKUP_PIN };
	hc_page_t h;
	int r;

	key_of(who, i, k);
	if ((r = hc_lookup(p, &rq, &h)) <= 0)
		return r;
	return hc_page_unpin(p, h) < 0 ? -1 : 1;
}

static inline uint64_t rnd(uint64_t *s)
{
	*s = *s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
	return *s >> 17;
}

/* ns per 1-key lookup+pin of a key among the last 'range' before 'next'. */
static int time_lookups(const struct opts *o, hc_pool *p, unsigned who, uint64_t next, uint64_t range, uint64_t *seed,
			double *ns)
{
	uint64_t n = 0, t0 = bench_now_ns();
	int r;

	do {
		for (int k = 0; k < 256; k++, n++)
			if ((r = lookup_pin(p, who, next - 1 - rnd(seed) % range)) < 0)
				return r;
	} while (bench_now_ns() - t0 < o->seconds * 1e9);
	*ns = (double)(bench_now_ns() - t0) / (double)n;
	return 0;
}

/* One process's run of every op, for o->seconds each; *next is where its
 * keys continue.  The pool is full when it starts. */
static void run_ops(const struct opts *o, hc_pool *p, unsigned who, uint64_t *next, uint32_t npages, struct report *rep,
		    unsigned procs)
{
	uint64_t seed = mix(who + 1), n = 0, t0, mine;
	int r;

	/* reserve+commit: every page evicts one */
	t0 = bench_now_ns();
	do {
		for (int k = 0; k < 16; k++, n += BATCH, *next += BATCH)
			if ((r = store(p, who, *next, BATCH)) < 0)
				goto fail;
	} while (bench_now_ns() - t0 < o->seconds * 1e9);
	rep->ns[OP_RESERVE] = (double)(bench_now_ns() - t0) / (double)n;

	/* evict, then store as many again, untimed */
	{
		uint64_t spent = 0, pages = 0;

		t0 = bench_now_ns();
		while (bench_now_ns() - t0 < o->seconds * 1e9 * 2) {
			uint64_t a = bench_now_ns();
			int got = hc_evict(p, EVICT_N);

			spent += bench_now_ns() - a;
			if (got < 0) {
				r = got;
				goto fail;
			}
			pages += (uint64_t)got;
			if ((r = store(p, who, *next, EVICT_N)) < 0)
				goto fail;
			*next += EVICT_N;
		}
		rep->ns[OP_EVICT] = pages ? (double)spent / (double)pages : 0;
	}

	/* lookup+pin of the hot set, then anywhere in what this process
	 * stored that the pool holds: of its last keys, about npages / procs */
	mine = npages / procs / 2 < *next ? npages / procs / 2 : *next;
	if ((r = time_lookups(o, p, who, *next, HOT, &seed, &rep->ns[OP_HOT])) < 0 ||
	    (r = time_lookups(o, p, who, *next, mine, &seed, &rep->ns[OP_COLD])) < 0)
		goto fail;
	return;
fail:
	rep->err = r;
	snprintf(rep->msg, sizeof(rep->msg), "%s", hc_last_error());
}

static volatile uint64_t peer_sink; /* the reads are used: the compiler keeps them */

/* The peer of a cold lookup: one dependent random 64-byte read in a table
 * as large as the page table (64 bytes a page), in a file where the pools
 * are (so on the same kind of pages). */
static double peer_ns(const char *dir, uint32_t npages, double seconds)
{
	size_t bytes = (size_t)npages * 64;
	char path[512];
	int fd;
	uint64_t *t, seed = 7, n = 0, t0, acc = 0;

	snprintf(path, sizeof(path), "%s/bench-scale-peer.%d", dir ? dir : "/dev/shm", (int)getpid());
	if ((fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600)) < 0)
		return 0;
	unlink(path);
	t = ftruncate(fd, (off_t)bytes) == 0
		    ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)
		    : MAP_FAILED;
	close(fd);
	if (t == MAP_FAILED)
		return 0;
	for (size_t i = 0; i < bytes / 8; i += 8)
		t[i] = mix(i);
	t0 = bench_now_ns();
	do {
		for (int k = 0; k < 4096; k++, n++) /* each address depends on the last read */
			acc += t[((rnd(&seed) ^ acc) % npages) * 8];
	} while (bench_now_ns() - t0 < seconds * 1e9);
	t0 = bench_now_ns() - t0;
	peer_sink = acc;
	munmap(t, bytes);
	return (double)t0 / (double)n;
}

/* ---- one pool: create, fill, measure in 1..procs processes */

static int make_pool(const char *dir, const char *name, uint32_t npages, enum hc_evict_policy pol)
{
	struct hc_component_spec c = { .size = sizeof(c),
				       .name = "kv",
				       .dtype = HC_DTYPE_BF16,
				       .kind = HC_COMP_KV,
				       .sharding = HC_SHARDED,
				       .kv_heads = 1,
				       .head_bytes = 32,
				       .layers = 1 };
	struct hc_pool_spec s = { .size = sizeof(s),
				  .name = name,
				  .dir = dir,
				  .model_id = "bench/scale",
				  .page_tokens = 16,
				  .tp_size = 1,
				  .comps = &c,
				  .ncomp = 1,
				  .capacity_pages = npages,
				  .max_ranks = 4,
				  .max_tickets = 64,
				  .evict = pol,
				  .flags = HC_CREATE_SPARSE };

	return hc_pool_create(&s);
}

static int measure(const struct opts *o, const char *name, uint32_t npages, unsigned procs, uint64_t *base,
		   double out[OP__COUNT])
{
	struct hc_attach_opts ao = { .size = sizeof(ao), .dir = o->dir };
	struct bench_barrier b;
	struct report reps[MAX_PROCS];
	int fds[MAX_PROCS][2];
	pid_t pid[MAX_PROCS];
	int ret = 0;

	if (bench_barrier_init(&b) < 0)
		return -EIO;
	for (unsigned w = 0; w < procs; w++) {
		if (pipe(fds[w]) < 0)
			return -errno;
		pid[w] = fork();
		if (pid[w] == 0) {
			struct report rep = { 0 };
			uint64_t next = base[w];
			hc_pool *p;

			bench_barrier_child(&b);
			bench_pin_cpu(w);
			close(fds[w][0]);
			if (hc_pool_attach(name, &ao, &p) < 0) {
				rep.err = -1;
				snprintf(rep.msg, sizeof(rep.msg), "attach: %s", hc_last_error());
				bench_barrier_wait(&b);
			} else {
				bench_barrier_wait(&b);
				run_ops(o, p, w, &next, npages, &rep, procs);
				hc_pool_detach(p);
			}
			bench_write_all(fds[w][1], &rep, sizeof(rep));
			bench_write_all(fds[w][1], &next, sizeof(next));
			_exit(0);
		}
		close(fds[w][1]);
	}
	bench_barrier_release(&b, procs);
	memset(out, 0, OP__COUNT * sizeof(double));
	for (unsigned w = 0; w < procs; w++) {
		if (bench_read_all(fds[w][0], &reps[w], sizeof(reps[w])) < 0 ||
		    bench_read_all(fds[w][0], &base[w], sizeof(base[w])) < 0) {
			ret = -EPIPE;
			reps[w].err = -EPIPE;
			snprintf(reps[w].msg, sizeof(reps[w].msg), "worker %u died", w);
		}
		close(fds[w][0]);
		waitpid(pid[w], NULL, 0);
		if (reps[w].err) {
			fprintf(stderr, "bench-scale: worker %u: %s\n", w, reps[w].msg);
			ret = -EIO;
		}
		for (int k = 0; k < OP__COUNT; k++)
			out[k] += reps[w].ns[k] / procs;
	}
	return ret;
}

/* Fill a fresh pool to full from this process, with keys 0..npages of
 * worker 0 (which goes on from there; worker 1 starts its own at 0). */
static int fill(const char *dir, const char *name, uint32_t npages)
{
	struct hc_attach_opts ao = { .size = sizeof(ao), .dir = dir };
	hc_pool *p;
	int r = 0;

	if (hc_pool_attach(name, &ao, &p) < 0)
		return -1;
	for (uint64_t i = 0; i < npages && r >= 0; i += EVICT_N)
		r = store(p, 0, i, EVICT_N);
	hc_pool_detach(p);
	return r < 0 ? r : 0;
}

/* ---- output */

static const char *size_str(uint32_t n)
{
	return n >= (1u << 20) && n % (1u << 20) == 0 ? bench_fmt("%uM", n >> 20) : bench_fmt("%uK", n >> 10);
}

static void print_table(const struct opts *o)
{
	int w[3 + MAX_SIZES + 1] = { -16, -6, 5 };
	int ncol = 3 + (int)o->nsizes + 1;
	const char *cells[3 + MAX_SIZES + 1];

	for (unsigned s = 0; s < o->nsizes; s++)
		w[3 + s] = 8;
	w[3 + o->nsizes] = 8;
	printf("\nns per page, steady state (full pool, evicting); the last column: largest / smallest\n");
	cells[0] = "op";
	cells[1] = "policy";
	cells[2] = "procs";
	for (unsigned s = 0; s < o->nsizes; s++)
		cells[3 + s] = size_str(o->sizes[s]);
	cells[3 + o->nsizes] = "ratio";
	for (int i = 0; i < ncol; i++)
		printf("%s%*s", i ? " | " : "", w[i], cells[i]);
	putchar('\n');
	bench_rule(bench_table_width(ncol, w));
	for (int op = 0; op < OP__COUNT; op++)
		for (int pol = 0; pol < 2; pol++)
			for (unsigned pr = 1; pr <= o->procs_max; pr++) {
				double first, last;

				if (op == OP_PEER && (pol || pr > 1))
					continue;
				first = result[pol][pr - 1][0][op];
				last = result[pol][pr - 1][o->nsizes - 1][op];
				printf("%*s | %*s | %*u", w[0], op_name[op], w[1],
				       op == OP_PEER ? "-"
				       : pol         ? "lru"
						     : "clock",
				       w[2], op == OP_PEER ? 1 : pr);
				for (unsigned s = 0; s < o->nsizes; s++)
					printf(" | %*.0f", w[3 + s], result[pol][pr - 1][s][op]);
				printf(" | %*.2f\n", w[3 + o->nsizes], first > 0 ? last / first : 0);
			}
	/* the cold lookup against its peer */
	printf("\nlookup (cold) / peer, by size: ");
	for (unsigned s = 0; s < o->nsizes; s++)
		printf("%s%s %.2f", s ? ", " : "", size_str(o->sizes[s]),
		       result[0][0][s][OP_PEER] > 0 ? result[0][0][s][OP_COLD] / result[0][0][s][OP_PEER] : 0);
	printf(" (clock, 1 process)\n");
}

static int write_svg(const struct opts *o)
{
	static const char *const color[OP__COUNT] = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#7f7f7f" };
	const double X0 = 70, Y0 = 30, W = 560, H = 330;
	double ymax = 1;
	FILE *f = fopen(o->svg, "w");

	if (!f) {
		fprintf(stderr, "bench-scale: cannot write %s: %s\n", o->svg, strerror(errno));
		return -1;
	}
	for (int pol = 0; pol < 2; pol++)
		for (unsigned pr = 0; pr < o->procs_max; pr++)
			for (unsigned s = 0; s < o->nsizes; s++)
				for (int op = 0; op < OP__COUNT; op++)
					ymax = result[pol][pr][s][op] > ymax ? result[pol][pr][s][op] : ymax;
	ymax = pow(10, ceil(log10(ymax)));
	fprintf(f,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"860\" height=\"420\" font-family=\"sans-serif\" font-size=\"12\">\n"
		"<text x=\"%.0f\" y=\"18\">bench-scale: ns per page (log) against pool pages; solid clock, dashed lru; thick 2 processes</text>\n"
		"<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#000\"/>\n",
		X0, X0, Y0, W, H);
	for (double v = 1; v <= ymax; v *= 10) { /* log axis: 1 ns to ymax */
		double y = Y0 + H - H * log10(v) / log10(ymax);
		fprintf(f,
			"<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
			X0, X0 + W, y, y, X0 - 6, y + 4, v);
	}
	for (unsigned s = 0; s < o->nsizes; s++) {
		double x = X0 + (o->nsizes > 1 ? W * s / (o->nsizes - 1) : W / 2);
		fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n", x, Y0 + H + 16,
			size_str(o->sizes[s]));
	}
	for (int op = 0; op < OP__COUNT; op++)
		for (int pol = 0; pol < 2; pol++)
			for (unsigned pr = 0; pr < o->procs_max; pr++) {
				if (op == OP_PEER && (pol || pr))
					continue;
				fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%d\"%s points=\"",
					color[op], pr ? 3 : 1, pol ? " stroke-dasharray=\"5,3\"" : "");
				for (unsigned s = 0; s < o->nsizes; s++) {
					double v = result[pol][pr][s][op] > 1 ? result[pol][pr][s][op] : 1;
					fprintf(f, "%.1f,%.1f ", X0 + (o->nsizes > 1 ? W * s / (o->nsizes - 1) : W / 2),
						Y0 + H - H * log10(v) / log10(ymax));
				}
				fprintf(f, "\"/>\n");
			}
	for (int op = 0; op < OP__COUNT; op++)
		fprintf(f,
			"<rect x=\"660\" y=\"%d\" width=\"14\" height=\"4\" fill=\"%s\"/><text x=\"680\" y=\"%d\">%s</text>\n",
			40 + 20 * op, color[op], 46 + 20 * op, op_name[op]);
	fprintf(f, "</svg>\n");
	return fclose(f) == 0 ? 0 : -1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench-scale [--sizes N,N,...] [--seconds S] [--procs 1|2] [--dir DIR] [--svg FILE]\n"
		   "  --sizes    pool sizes in pages (default 16384,262144,1048576,4194304)\n"
		   "  --seconds  per operation, per size (default 0.5)\n"
		   "  --procs    up to this many processes (default 2)\n"
		   "  --svg      also draw the curves into FILE\n");
}

static int parse_sizes(struct opts *o, const char *arg)
{
	char *dup = strdup(arg), *save = NULL, *tok;

	o->nsizes = 0;
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long v = strtoul(tok, &end, 10);

		if (*end || v < 1024 || v > (1ul << 26) || o->nsizes == MAX_SIZES) {
			fprintf(stderr,
				"bench-scale: --sizes: '%s' is not a page count in 1024..67108864 (at most %d sizes)\n",
				tok, MAX_SIZES);
			free(dup);
			return -1;
		}
		o->sizes[o->nsizes++] = (uint32_t)v;
	}
	free(dup);
	return o->nsizes ? 0 : -1;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "sizes", required_argument, NULL, 'z' },
					    { "seconds", required_argument, NULL, 's' },
					    { "procs", required_argument, NULL, 'p' },
					    { "svg", required_argument, NULL, 'g' },
					    { "dir", required_argument, NULL, 'd' },
					    { "help", no_argument, NULL, 'h' },
					    { NULL, 0, NULL, 0 } };
	struct opts o = { .sizes = { 16384, 262144, 1048576, 4194304 }, .nsizes = 4, .seconds = 0.5, .procs_max = 2 };
	char name[HC_NAME_MAX + 1];
	int c, failed = 0;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'z':
			if (parse_sizes(&o, optarg) < 0)
				return 2;
			break;
		case 's':
			o.seconds = atof(optarg);
			if (o.seconds <= 0 || o.seconds > 60) {
				fprintf(stderr, "bench-scale: --seconds %s: give 0 < S <= 60\n", optarg);
				return 2;
			}
			break;
		case 'p':
			o.procs_max = (unsigned)atoi(optarg);
			if (o.procs_max < 1 || o.procs_max > MAX_PROCS) {
				fprintf(stderr, "bench-scale: --procs %s: give 1 or 2\n", optarg);
				return 2;
			}
			break;
		case 'g':
			o.svg = optarg;
			break;
		case 'd':
			o.dir = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	bench_cleanup_init();
	for (unsigned s = 0; s < o.nsizes && !failed; s++)
		for (int pol = 0; pol < 2 && !failed; pol++) {
			uint64_t base[MAX_PROCS];
			double t0 = (double)bench_now_ns();
			char path[600];

			snprintf(name, sizeof(name), "bench-scale.%d", (int)getpid());
			snprintf(path, sizeof(path), "%s/hicache.%s", o.dir ? o.dir : "/dev/shm", name);
			hc_pool_destroy(name, o.dir, HC_DESTROY_FORCE);
			if (make_pool(o.dir, name, o.sizes[s], pol ? HC_EVICT_LRU : HC_EVICT_CLOCK) < 0) {
				fprintf(stderr, "bench-scale: create %s pages: %s\n", size_str(o.sizes[s]),
					hc_last_error());
				return 1;
			}
			bench_cleanup_add(path);
			if (fill(o.dir, name, o.sizes[s]) < 0) {
				fprintf(stderr, "bench-scale: fill: %s\n", hc_last_error());
				failed = 1;
			}
			base[0] = o.sizes[s];
			base[1] = 0;
			for (unsigned pr = 1; pr <= o.procs_max && !failed; pr++)
				failed = measure(&o, name, o.sizes[s], pr, base, result[pol][pr - 1][s]) < 0;
			if (pol == 0)
				result[0][0][s][OP_PEER] = peer_ns(o.dir, o.sizes[s], o.seconds);
			hc_pool_destroy(name, o.dir, HC_DESTROY_FORCE);
			fprintf(stderr, "bench-scale: %s pages, %s: %.1f s\n", size_str(o.sizes[s]),
				pol ? "lru" : "clock", ((double)bench_now_ns() - t0) / 1e9);
		}
	if (failed)
		return 1;
	print_table(&o);
	if (o.svg && write_svg(&o) < 0)
		return 1;
	return 0;
}
