/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hicache-bench - run a small pool the way TP ranks would, and check every
 * byte they read.
 *
 * It creates a pool, forks rank processes that for a few seconds allocate
 * pages, fill every shard with bytes that are a function of (page id,
 * generation, component, head group), commit each shard, then pin, verify
 * and unpin pages other ranks made READY, and free their own.  One extra
 * rank takes holds (half-committed reservations, pins on other ranks'
 * pages) and is SIGKILLed half way; the parent then proves it dead and
 * undoes its holds with hc_pool_recover and prints what that did.  At the
 * end every page must be FREE again and no byte may have failed to verify.
 *
 * Only the public API (hicache.h) is used.  Exit status: 0 all verified and
 * no page leaked, 1 a verification failure, a leaked page or a failed rank,
 * 2 bad usage or no pool to run on.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hicache/hicache.h>

#include "../cli/cli.h"
#include "../../bench/bench.h" /* pipe helpers shared with the benchmarks */
#include "../replay/model.h"   /* the words pages hold */
#include "../replay/replay.h"

#define PROG            "hicache-bench"
#define MAX_RANKS       64
#define VICTIM_HOLDS    4   /* partial reservations and pins the killed rank takes */
#define QUARANTINE_MS   300 /* short grace, so the run shows quarantined pages coming back */
#define READS_PER_WRITE 2   /* pages of other ranks verified per page written */

struct opts {
	unsigned ranks;
	double seconds;
	unsigned pages;
	bool keep;
};

/* What a rank sends back through its pipe when it is done. */
struct rank_stats {
	int32_t slot;
	uint32_t pid;
	uint64_t written; /* pages allocated and filled */
	uint64_t ready;   /* of those, made READY by our last commit */
	uint64_t shards;  /* shards filled and committed */
	uint64_t bytes_written;
	uint64_t verified; /* other ranks' pages pinned and checked */
	uint64_t bytes_verified;
	uint64_t failures;  /* pages with a byte that did not match */
	uint64_t pin_races; /* READY when looked at, gone or going when pinned */
	uint64_t free_busy; /* our page was pinned by a reader: freed later */
	uint64_t pool_full; /* allocation found no free page */
	uint64_t left;      /* own pages we could not free before detaching */
	double seconds;     /* how long the rank ran */
	int err;            /* 0, or the negative errno that stopped the rank */
	char msg[256];      /* hc_last_error() or the first mismatch */
};

/* What the rank to be killed holds when it says so. */
struct victim_stats {
	int32_t slot;
	uint32_t pid;
	uint32_t partial; /* reservations with one shard of several committed */
	uint32_t ready;   /* pages it made READY and keeps */
	uint32_t pins;    /* pins on other ranks' READY pages */
	int err;
	char msg[256];
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sleep until 'until' (now_s time) or a signal asks us to stop. */
static void sleep_until(double until)
{
	double left;

	while (!stop && (left = until - now_s()) > 0) {
		struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
		nanosleep(&ts, NULL);
	}
}

/* ---- page contents: a function of (page id, generation, component, group) */

static uint64_t shard_seed(hc_page_t h, unsigned comp, unsigned group)
{
	return hc_rp_mix64(((uint64_t)HC_PAGE_ID(h) << 32) ^ ((uint64_t)HC_PAGE_GEN(h) << 8) ^ ((uint64_t)comp << 5) ^
			   group);
}

/* ---- the rank's view of the layout */

struct rank {
	hc_pool *pool;
	struct hc_pool_info info;
	struct hc_component_info comp[2];
	uint32_t ncomp;
	uint64_t rng;
	struct rank_stats st;
};

static uint32_t rnd(struct rank *r)
{
	/* xorshift64: enough to pick presence masks and page ids */
	r->rng ^= r->rng << 13;
	r->rng ^= r->rng >> 7;
	r->rng ^= r->rng << 17;
	return (uint32_t)(r->rng >> 16);
}

static int fail(struct rank *r, int err, const char *what)
{
	r->st.err = err;
	snprintf(r->st.msg, sizeof(r->st.msg), "%s: %s", what, hc_last_error());
	return err;
}

/* A shard (one head group of one component) is one contiguous run. */
static int shard_addr(struct rank *r, hc_page_t h, unsigned comp, unsigned group, uint64_t **addr, size_t *words)
{
	void *a;
	size_t len;
	int ret = hc_page_addr(r->pool, h, comp, 0, group, &a, &len);

	if (ret < 0)
		return fail(r, ret, "hc_page_addr");
	*addr = a;
	*words = (size_t)(r->comp[comp].group_stride / sizeof(uint64_t));
	return 0;
}

/*
 * Fill and commit one shard: either head group 'g' of every sharded
 * component (bit g), or every replicated component (HC_SHARD_REPLICATED).
 * Returns hc_page_commit's result: 1 when this commit made the page READY.
 */
static int write_shard(struct rank *r, hc_page_t h, uint32_t presence, uint32_t bit)
{
	uint64_t *w;
	size_t words;
	int ret;

	for (unsigned c = 0; c < r->ncomp; c++) {
		const struct hc_component_info *ci = &r->comp[c];
		bool repl = ci->sharding == HC_REPLICATED;

		if (!(presence & (1u << c)) || repl != (bit == HC_SHARD_REPLICATED))
			continue;
		if ((ret = shard_addr(r, h, c, repl ? 0 : (unsigned)__builtin_ctz(bit), &w, &words)) < 0)
			return ret;
		hc_rp_fill_words(w, words, shard_seed(h, c, repl ? 0 : (unsigned)__builtin_ctz(bit)));
		r->st.bytes_written += words * sizeof(uint64_t);
	}
	ret = hc_page_commit(r->pool, h, bit);
	if (ret < 0)
		return fail(r, ret, "hc_page_commit");
	r->st.shards++;
	return ret;
}

/* Allocate one page and fill the shards in 'shards' (all of them: it goes READY). */
static int write_page(struct rank *r, uint32_t shards, hc_page_t *out)
{
	/* Every page holds K/V; about half also hold the state snapshot. */
	uint32_t presence = 1u | (r->ncomp > 1 && (rnd(r) & 1) ? 2u : 0u);
	uint32_t needed = hc_page_needed(r->pool, presence);
	int ret, last = 0;

	ret = hc_page_alloc(r->pool, 1, presence, out);
	if (ret == -ENOSPC) {
		r->st.pool_full++;
		return 0;
	}
	if (ret < 0)
		return fail(r, ret, "hc_page_alloc");
	r->st.written++;
	for (uint32_t left = needed & shards; left; left &= left - 1) {
		uint32_t bit = left & -left;
		if ((last = write_shard(r, *out, presence, bit)) < 0)
			return last;
	}
	if (last == 1)
		r->st.ready++;
	return 1;
}

/* Pin a READY page of another rank, check every byte it holds, unpin. */
static int verify_page(struct rank *r, hc_page_t h)
{
	uint32_t presence;
	int ret, bad = 0;

	ret = hc_page_pin(r->pool, h);
	if (ret == -EAGAIN || ret == -ESTALE) {
		r->st.pin_races++;
		return 0;
	}
	if (ret < 0)
		return fail(r, ret, "hc_page_pin");
	if ((ret = hc_page_presence(r->pool, h, &presence)) < 0) {
		fail(r, ret, "hc_page_presence");
		goto unpin;
	}
	for (unsigned c = 0; c < r->ncomp && !bad; c++) {
		if (!(presence & (1u << c)))
			continue;
		for (unsigned g = 0; g < r->comp[c].groups; g++) {
			uint64_t *w;
			size_t words;
			long at;

			if ((ret = shard_addr(r, h, c, g, &w, &words)) < 0)
				goto unpin;
			at = hc_rp_check_words(w, words, shard_seed(h, c, g));
			r->st.bytes_verified += words * sizeof(uint64_t);
			if (at >= 0) {
				if (!r->st.failures)
					snprintf(
						r->st.msg, sizeof(r->st.msg),
						"page %u generation %u, %s group %u, byte %ld: not what its writer wrote",
						HC_PAGE_ID(h), HC_PAGE_GEN(h), r->comp[c].name, g, at * 8);
				bad = 1;
				break;
			}
		}
	}
	r->st.failures += bad;
	r->st.verified++;
	ret = 0;
unpin:
	if (hc_page_unpin(r->pool, h) < 0 && ret == 0)
		ret = fail(r, -EIO, "hc_page_unpin");
	return ret;
}

/* Look at a few random pages; verify the READY ones other ranks wrote. */
static int read_others(struct rank *r, unsigned want, unsigned *pinned_out, hc_page_t *keep)
{
	unsigned got = 0;

	for (unsigned tries = 0; tries < 16 * want && got < want; tries++) {
		uint32_t id = rnd(r) % r->info.npages, owner;
		hc_page_t h;
		int st = hc_page_state(r->pool, id, &h, &owner, NULL);

		if (st < 0)
			return fail(r, st, "hc_page_state");
		if (st != HC_PAGE_READY || (int32_t)owner == r->info.self_slot)
			continue;
		if (keep) {
			/* The rank to be killed: pin and hold. */
			if (hc_page_pin(r->pool, h) == 0)
				keep[got++] = h;
			continue;
		}
		if (verify_page(r, h) < 0)
			return -1;
		got++;
	}
	if (pinned_out)
		*pinned_out = got;
	return 0;
}

/* ---- own pages: a FIFO of handles, freed oldest first */

struct fifo {
	hc_page_t *h;
	unsigned cap, head, n;
};

static hc_page_t *fifo_at(struct fifo *f, unsigned i)
{
	return &f->h[(f->head + i) % f->cap];
}

/* Free the oldest page; if a reader pins it, move it to the back and try later. */
static int free_oldest(struct rank *r, struct fifo *f)
{
	hc_page_t h = *fifo_at(f, 0);
	int ret;

	f->head = (f->head + 1) % f->cap;
	f->n--;
	ret = hc_page_free(r->pool, &h, 1);
	if (ret == -EBUSY || ret == -EAGAIN) {
		r->st.free_busy++;
		*fifo_at(f, f->n++) = h;
		return 0;
	}
	if (ret < 0)
		return fail(r, ret, "hc_page_free");
	return 1;
}

static int rank_attach(struct rank *r, const char *name)
{
	int ret;

	if ((ret = hc_pool_attach(name, NULL, &r->pool)) < 0)
		return fail(r, ret, "hc_pool_attach");
	hc_pool_info(r->pool, &r->info, sizeof(r->info));
	r->ncomp = r->info.ncomp < 2 ? r->info.ncomp : 2;
	for (unsigned c = 0; c < r->ncomp; c++)
		hc_pool_component(r->pool, c, &r->comp[c], sizeof(r->comp[c]));
	r->st.slot = r->info.self_slot;
	r->st.pid = (uint32_t)getpid();
	r->rng = hc_rp_mix64((uint64_t)getpid() << 20 | (uint64_t)r->info.self_slot) | 1;
	return 0;
}

/* Say ready on 'ready', then wait for the start (EOF on 'go'). */
static void barrier(int ready, int go)
{
	char c = 'r';

	bench_write_all(ready, &c, 1);
	close(ready);
	while (read(go, &c, 1) < 0 && errno == EINTR)
		;
	close(go);
}

static void rank_main(const char *name, const struct opts *o, int ready, int go, int out)
{
	struct rank r = { 0 };
	struct fifo f = { 0 };
	double start, end;
	int ret = 0;

	if (rank_attach(&r, name) < 0) {
		barrier(ready, go);
		goto report;
	}
	/* Keep about half the pool in use across all ranks, so frees meet readers. */
	f.cap = o->pages / (2 * (o->ranks + 1));
	f.cap = f.cap ? f.cap : 1;
	f.h = calloc(f.cap, sizeof(*f.h));
	if (!f.h) {
		r.st.err = -ENOMEM;
		snprintf(r.st.msg, sizeof(r.st.msg), "out of memory");
		barrier(ready, go);
		goto detach;
	}
	barrier(ready, go);
	start = now_s();
	end = start + o->seconds;
	while (!stop && now_s() < end) {
		hc_page_t h;

		if (f.n == f.cap && (ret = free_oldest(&r, &f)) < 0)
			break;
		if (f.n < f.cap) {
			if ((ret = write_page(&r, UINT32_MAX, &h)) < 0)
				break;
			if (ret == 1)
				*fifo_at(&f, f.n++) = h;
			else if (f.n && (ret = free_oldest(&r, &f)) < 0) /* pool full: make room */
				break;
		}
		if ((ret = read_others(&r, READS_PER_WRITE, NULL, NULL)) < 0)
			break;
	}
	r.st.seconds = now_s() - start;
	/* Give back every own page; readers release their pins within moments. */
	for (double give_up = now_s() + 2.0; f.n && now_s() < give_up;)
		if (free_oldest(&r, &f) < 0)
			break;
	r.st.left = f.n;
detach:
	free(f.h);
	hc_pool_detach(r.pool);
report:
	bench_write_all(out, &r.st, sizeof(r.st));
	close(out);
	_exit(r.st.err ? 1 : 0);
}

/*
 * The rank that will be killed: take holds of every kind recovery must undo,
 * say what it holds, then keep working until the SIGKILL lands mid-way.
 */
static void victim_main(const char *name, const struct opts *o, int ready, int go, int out)
{
	struct victim_stats v = { 0 };
	struct rank r = { 0 };
	hc_page_t pins[VICTIM_HOLDS], h;
	double give_up;
	int ret;

	if (rank_attach(&r, name) < 0) {
		barrier(ready, go);
		goto report;
	}
	v.slot = r.info.self_slot;
	v.pid = (uint32_t)getpid();
	barrier(ready, go);
	/* Reservations with only head group 0 committed: recovery must quarantine them. */
	for (unsigned i = 0; i < VICTIM_HOLDS && !stop; i++) {
		uint32_t presence = 1u;

		ret = hc_page_alloc(r.pool, 1, presence, &h);
		if (ret == -ENOSPC)
			break;
		if (ret < 0 || (ret = write_shard(&r, h, presence, 1u)) < 0) {
			fail(&r, ret, "partial reservation");
			goto report;
		}
		v.partial++;
	}
	/* READY pages it keeps: cache content that outlives its writer. */
	for (unsigned i = 0; i < 2 && !stop; i++) {
		ret = write_page(&r, UINT32_MAX, &h);
		if (ret < 0)
			goto report;
		v.ready += ret == 1;
	}
	/* Pins on other ranks' pages, held until recovery drops them. */
	for (give_up = now_s() + o->seconds / 4; v.pins < VICTIM_HOLDS && now_s() < give_up && !stop;) {
		unsigned got = 0;

		if (read_others(&r, VICTIM_HOLDS - v.pins, &got, pins + v.pins) < 0)
			goto report;
		v.pins += got;
		if (!got)
			usleep(1000);
	}
report:
	v.err = r.st.err;
	snprintf(v.msg, sizeof(v.msg), "%s", r.st.msg);
	bench_write_all(out, &v, sizeof(v));
	close(out);
	if (v.err)
		_exit(1);
	/* Work on until killed, so the kill lands in the middle of some call. */
	while (!stop) {
		if (write_page(&r, UINT32_MAX, &h) == 1)
			hc_page_free(r.pool, &h, 1);
	}
	_exit(0);
}

/* ---- the parent */

struct child {
	pid_t pid;
	int out; /* read end of its report pipe */
};

static pid_t spawn(void (*fn)(const char *, const struct opts *, int, int, int), const char *name, const struct opts *o,
		   int ready[2], int go[2], struct child *c)
{
	int p[2];

	if (pipe(p) < 0)
		return -errno;
	c->pid = fork();
	if (c->pid < 0) {
		int err = errno;
		close(p[0]);
		close(p[1]);
		return -err;
	}
	if (c->pid == 0) {
		close(p[0]);
		close(ready[0]);
		close(go[1]);
		fn(name, o, ready[1], go[0], p[1]);
	}
	close(p[1]);
	c->out = p[0];
	return c->pid;
}

static void print_states(const uint64_t n[3][HC_PAGE__COUNT])
{
	static const char *const when[3] = { "right after recovery", "when the ranks ended", "at the end" };

	printf("%-21s %6s %9s %6s %11s %8s\n", "page states", "FREE", "RESERVED", "READY", "QUARANTINE", "FREEING");
	for (int i = 0; i < 3; i++)
		printf("%-21s %6" PRIu64 " %9" PRIu64 " %6" PRIu64 " %11" PRIu64 " %8" PRIu64 "\n", when[i],
		       n[i][HC_PAGE_FREE], n[i][HC_PAGE_RESERVED], n[i][HC_PAGE_READY], n[i][HC_PAGE_QUARANTINE],
		       n[i][HC_PAGE_FREEING]);
}

static void print_report(const char *what, const struct hc_recovery_report *rep)
{
	printf("%s: dead ranks %u, pins dropped %u, quarantined %u,\n"
	       "  promoted %u, unfreed %u, released %u, bad words %u\n",
	       what, rep->dead_ranks, rep->pins_dropped, rep->quarantined, rep->promoted, rep->unfreed, rep->released,
	       rep->bad_words);
}

/* Free the READY pages nobody will free: the killed rank's, and any a rank left. */
static int free_leftovers(const char *name, uint32_t npages, unsigned *freed)
{
	struct hc_attach_opts ao = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_NO_POPULATE };
	hc_pool *p;
	int ret;

	*freed = 0;
	/* A rank attach (a slot to free with); page words only, so no populate. */
	if ((ret = hc_pool_attach(name, &ao, &p)) < 0)
		return ret;
	for (uint32_t id = 0; id < npages; id++) {
		hc_page_t h;

		if (hc_page_state(p, id, &h, NULL, NULL) == HC_PAGE_READY && hc_page_free(p, &h, 1) == 1)
			(*freed)++;
	}
	hc_pool_detach(p);
	return 0;
}

static double mib(uint64_t b)
{
	return (double)b / (1 << 20);
}

/* Kill the rank to be killed half way, then prove it dead and undo its holds. */
static void kill_victim(hc_pool *admin, struct child *victim, const struct opts *o, double t0, struct victim_stats *vs,
			double *t_kill, struct hc_recovery_report *rep, uint64_t counts[HC_PAGE__COUNT])
{
	if (bench_read_all(victim->out, vs, sizeof(*vs)) < 0) {
		vs->err = -EPIPE;
		snprintf(vs->msg, sizeof(vs->msg), "it died before saying what it holds");
	}
	sleep_until(t0 + o->seconds / 2);
	kill(victim->pid, SIGKILL);
	waitpid(victim->pid, NULL, 0);
	close(victim->out);
	*t_kill = now_s() - t0;
	/* Proof of death is EOWNERDEAD on its slot's mutex, which this probes. */
	if (hc_pool_recover(admin, rep, sizeof(*rep)) < 0)
		fprintf(stderr, PROG ": recovery: %s\n", hc_last_error());
	hc_pool_count_states(admin, counts, HC_PAGE__COUNT);
}

static void collect(struct child *kids, unsigned n, struct rank_stats *st)
{
	for (unsigned i = 0; i < n; i++) {
		memset(&st[i], 0, sizeof(st[i]));
		if (bench_read_all(kids[i].out, &st[i], sizeof(st[i])) < 0) {
			st[i].err = -EPIPE;
			snprintf(st[i].msg, sizeof(st[i].msg), "rank process %d died without a report",
				 (int)kids[i].pid);
		}
		close(kids[i].out);
		waitpid(kids[i].pid, NULL, 0);
	}
}

#define ROW_FMT "%4s %4s %7s %7s %8s %8s %8s %4s %5s %5s %4s\n"

static void print_ranks(const struct rank_stats *st, unsigned n, struct rank_stats *sum)
{
	printf(ROW_FMT, "rank", "slot", "pid", "pages", "MiB out", "verified", "MiB in", "bad", "races", "busy",
	       "full");
	for (unsigned i = 0; i <= n; i++) {
		const struct rank_stats *s = i < n ? &st[i] : sum;
		char c[11][24];

		snprintf(c[0], sizeof(c[0]), i < n ? "%u" : "all", i);
		snprintf(c[1], sizeof(c[1]), i < n ? "%d" : "", s->slot);
		snprintf(c[2], sizeof(c[2]), i < n ? "%u" : "", s->pid);
		snprintf(c[3], sizeof(c[3]), "%" PRIu64, s->written);
		snprintf(c[4], sizeof(c[4]), "%.0f", mib(s->bytes_written));
		snprintf(c[5], sizeof(c[5]), "%" PRIu64, s->verified);
		snprintf(c[6], sizeof(c[6]), "%.0f", mib(s->bytes_verified));
		snprintf(c[7], sizeof(c[7]), "%" PRIu64, s->failures);
		snprintf(c[8], sizeof(c[8]), "%" PRIu64, s->pin_races);
		snprintf(c[9], sizeof(c[9]), "%" PRIu64, s->free_busy);
		snprintf(c[10], sizeof(c[10]), "%" PRIu64, s->pool_full);
		printf(ROW_FMT, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]);
		if (i == n)
			break;
		sum->written += s->written;
		sum->ready += s->ready;
		sum->shards += s->shards;
		sum->bytes_written += s->bytes_written;
		sum->verified += s->verified;
		sum->bytes_verified += s->bytes_verified;
		sum->failures += s->failures;
		sum->pin_races += s->pin_races;
		sum->free_busy += s->free_busy;
		sum->pool_full += s->pool_full;
		sum->left += s->left;
		sum->seconds = s->seconds > sum->seconds ? s->seconds : sum->seconds;
	}
	printf("pages: written, one commit per shard (%" PRIu64 " commits); verified: other ranks'\n"
	       "READY pages pinned and checked byte by byte; bad: pages that failed the check;\n"
	       "races: READY when seen, freed before the pin; busy: a free met a reader's pin\n"
	       "and was retried; full: no free page for an allocation\n",
	       sum->shards);
	if (sum->seconds > 0)
		printf("%.0f pages/s written, %.0f pages/s verified, all ranks, over %.2f s\n\n",
		       (double)sum->written / sum->seconds, (double)sum->verified / sum->seconds, sum->seconds);
}

static int run(const struct opts *o)
{
	const struct hc_component_spec comps[2] = {
		{ .size = sizeof(struct hc_component_spec),
		  .name = "kv",
		  .dtype = HC_DTYPE_BF16,
		  .kind = HC_COMP_KV,
		  .sharding = HC_SHARDED,
		  .kv_heads = 4,
		  .head_bytes = 128,
		  .layers = 4 },
		{ .size = sizeof(struct hc_component_spec),
		  .name = "state",
		  .dtype = HC_DTYPE_BF16,
		  .kind = HC_COMP_STATE,
		  .sharding = HC_REPLICATED,
		  .bytes_per_layer = 8192,
		  .layers = 4 },
	};
	char name[HC_NAME_MAX + 1];
	struct hc_pool_spec spec = {
		.size = sizeof(struct hc_pool_spec),
		.name = name,
		.model_id = "hicache-bench/demo",
		.page_tokens = 16,
		.tp_size = 2,
		.comps = comps,
		.ncomp = 2,
		.capacity_pages = o->pages,
		/* the ranks, the one to be killed, and the parent's cleanup */
		.max_ranks = o->ranks + 2,
		.quarantine_ms = QUARANTINE_MS,
	};
	struct hc_attach_opts admin_opts = { .size = sizeof(struct hc_attach_opts),
					     .flags = HC_ATTACH_ADMIN | HC_ATTACH_NO_RECOVER };
	struct child kids[MAX_RANKS], victim = { .pid = -1, .out = -1 };
	struct rank_stats st[MAX_RANKS], sum = { 0 };
	struct victim_stats vs = { 0 };
	struct hc_recovery_report rep = { 0 }, rep2 = { 0 };
	struct hc_pool_info info;
	hc_pool *admin = NULL;
	unsigned nkids = 0, freed = 0;
	uint64_t counts[3][HC_PAGE__COUNT] = { { 0 } }, leaked;
	int ready[2], go[2], status = 0, ret = 0;
	double t0, t_kill = 0;

	snprintf(name, sizeof(name), "hcbench-%d", (int)getpid());
	if (hc_pool_create(&spec) < 0) {
		fprintf(stderr, PROG ": cannot create pool '%s': %s\n", name, hc_last_error());
		return 2;
	}
	/* Admin: no slot, no populate, and above all no recovery of its own. */
	if (hc_pool_attach(name, &admin_opts, &admin) < 0) {
		fprintf(stderr, PROG ": cannot attach pool '%s': %s\n", name, hc_last_error());
		status = 2;
		goto out_destroy;
	}
	hc_pool_info(admin, &info, sizeof(info));
	printf(PROG " %s: pool %s at %s\n", hc_version(), name, info.path);
	printf("  %u-token pages, TP %u (%u head groups), envelope %" PRIu64 " KiB, %u pages (%.1f MiB)\n",
	       info.page_tokens, info.tp_size, info.head_groups, info.envelope_bytes >> 10, info.npages,
	       mib(info.segment_bytes));
	printf("  kv: %s, %u KV heads x %u B, %u layers, sharded\n", hc_dtype_name(comps[0].dtype), comps[0].kv_heads,
	       comps[0].head_bytes, comps[0].layers);
	printf("  state: %" PRIu64 " B x %u layers, replicated, in about half the pages\n", comps[1].bytes_per_layer,
	       comps[1].layers);
	printf("  %u ranks for %.1f s, each verifying %d pages of others per page it writes;\n"
	       "  1 more rank is killed with SIGKILL at %.1f s\n\n",
	       o->ranks, o->seconds, READS_PER_WRITE, o->seconds / 2);
	fflush(stdout);

	if (pipe(ready) < 0) {
		fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
		status = 2;
		goto out_detach;
	}
	if (pipe(go) < 0) {
		fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
		close(ready[0]);
		close(ready[1]);
		status = 2;
		goto out_detach;
	}
	for (; nkids < o->ranks; nkids++)
		if ((ret = (int)spawn(rank_main, name, o, ready, go, &kids[nkids])) < 0)
			break;
	if (nkids == o->ranks)
		ret = (int)spawn(victim_main, name, o, ready, go, &victim);
	if (ret < 0) {
		fprintf(stderr, PROG ": fork: %s\n", strerror(-ret));
		status = 2;
		/* The ones already forked stop at once (their handler sets 'stop'). */
		for (unsigned i = 0; i < nkids; i++)
			kill(kids[i].pid, SIGTERM);
	}
	close(ready[1]);
	close(go[0]);
	/* Wait until every child has attached, then start them all at once. */
	for (unsigned i = 0; i < nkids + (victim.pid > 0); i++) {
		char c;
		if (bench_read_all(ready[0], &c, 1) < 0)
			break;
	}
	close(ready[0]);
	t0 = now_s();
	close(go[1]);

	if (victim.pid > 0)
		kill_victim(admin, &victim, o, t0, &vs, &t_kill, &rep, counts[0]);
	collect(kids, nkids, st);
	if (status)
		goto out_detach;

	if (stop)
		printf("interrupted: the ranks stopped early\n");
	print_ranks(st, nkids, &sum);
	fflush(stdout); /* the table first, then any complaint on stderr */
	for (unsigned i = 0; i < nkids; i++)
		if (st[i].err || st[i].failures) {
			fprintf(stderr, PROG ": rank %u (pid %u): %s%s\n", i, st[i].pid,
				st[i].err ? "failed: " : "verification failed: ", st[i].msg);
			status = 1;
		}
	if (vs.err)
		printf("killed rank: it failed before the kill: %s\n", vs.msg);
	else
		printf("killed rank (slot %d, pid %u): SIGKILL at %.2f s, holding %u half-committed\n"
		       "  reservations, %u READY pages of its own and %u pins on other ranks' pages\n",
		       vs.slot, vs.pid, t_kill, vs.partial, vs.ready, vs.pins);
	print_report("recovery after the kill", &rep);
	hc_pool_count_states(admin, counts[1], HC_PAGE__COUNT);

	/* Quarantined reservations come back once no late DMA can land on them. */
	stop = 0;
	sleep_until(now_s() + QUARANTINE_MS / 1e3 + 0.05);
	if (hc_pool_recover(admin, &rep2, sizeof(rep2)) < 0)
		fprintf(stderr, PROG ": recovery: %s\n", hc_last_error());
	printf("after the %d ms quarantine grace, recovery released %u more pages\n"
	       "  (allocations take quarantined pages too, once their grace is over)\n",
	       QUARANTINE_MS, rep2.released);
	if (free_leftovers(name, info.npages, &freed) < 0) {
		fprintf(stderr, PROG ": cannot attach to free the leftover pages: %s\n", hc_last_error());
		status = 1;
	}
	if (sum.left)
		printf("freed %u READY pages: the killed rank's, and %" PRIu64 " the ranks could not free\n\n", freed,
		       sum.left);
	else
		printf("freed the %u READY pages the killed rank left behind\n\n", freed);
	hc_pool_count_states(admin, counts[2], HC_PAGE__COUNT);
	print_states((const uint64_t(*)[HC_PAGE__COUNT])counts);
	leaked = info.npages - counts[2][HC_PAGE_FREE];
	if (leaked) {
		fprintf(stderr, PROG ": %" PRIu64 " pages are not FREE at the end: leaked\n", leaked);
		status = 1;
	}
	printf("\nresult: %s: %" PRIu64 " pages verified, %" PRIu64 " failed, %" PRIu64 " leaked\n",
	       status ? "FAILED" : "OK", sum.verified, sum.failures, leaked);

out_detach:
	hc_pool_detach(admin);
out_destroy:
	if (o->keep) {
		printf("pool kept: /dev/shm/hicache.%s (remove it with: hicache-pool destroy %s)\n", name, name);
	} else if (hc_pool_destroy(name, NULL, HC_DESTROY_FORCE) < 0) {
		fprintf(stderr, PROG ": cannot remove pool '%s': %s\n", name, hc_last_error());
		status = status ? status : 1;
	}
	return status;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [--ranks N] [--seconds S] [--pages N] [--keep]\n"
		"Run rank processes on a small pool: allocate, fill, commit, pin, verify, free;\n"
		"kill one more rank half way and show the recovery.\n\n"
		"  -r, --ranks N     rank processes (default 4, 1..%d)\n"
		"  -s, --seconds S   how long they run (default 2, 0.1..3600)\n"
		"  -p, --pages N     pool capacity in pages (default 256, 16..16384)\n"
		"  -k, --keep        keep the pool afterwards (default: destroy it)\n"
		"  -h, --help        this text\n"
		"  -V, --version     the version\n\n"
		"Exit status: 0 all verified, no page leaked; 1 a verification failure,\n"
		"a leaked page or a failed rank; 2 bad usage or no pool to run on.\n",
		MAX_RANKS);
}

static int parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "ranks", required_argument, NULL, 'r' },
		{ "seconds", required_argument, NULL, 's' },
		{ "pages", required_argument, NULL, 'p' },
		{ "keep", no_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .ranks = 4, .seconds = 2.0, .pages = 256 };
	struct sigaction sa = { .sa_handler = on_signal };
	int c;

	if (argc > 1 && !strcmp(argv[1], "replay"))
		return hc_rp_main(argc - 1, argv + 1);

	while ((c = getopt_long(argc, argv, "r:s:p:khV", lo, NULL)) != -1) {
		switch (c) {
		case 'r':
			if (parse_uint(optarg, 1, MAX_RANKS, &o.ranks) < 0) {
				fprintf(stderr, PROG ": --ranks '%s': give a number from 1 to %d\n", optarg, MAX_RANKS);
				return 2;
			}
			break;
		case 's':
			if (hc_cli_parse_double("--seconds", optarg, 0.1, 3600, &o.seconds) < 0) {
				fprintf(stderr, PROG ": %s\n", hc_cli_error());
				return 2;
			}
			break;
		case 'p':
			if (parse_uint(optarg, 16, 16384, &o.pages) < 0) {
				fprintf(stderr, PROG ": --pages '%s': give a number from 16 to 16384\n", optarg);
				return 2;
			}
			break;
		case 'k':
			o.keep = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf(PROG " (hicache) %s\n", hc_version());
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	/* Ctrl-C: every process stops its loop and the pool is still destroyed. */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	return run(&o);
}
