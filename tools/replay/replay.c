/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.c - hicache-bench replay's driver: it reads its options and the
 * workload, creates the pool (and the backend's place), forks the engines'
 * rank processes, starts the service in this process once they are forked
 * (so no thread of it is copied into a rank), lets them serve, stops the
 * service, and reports (report.c).  Everything it made goes again, also
 * when a rank fails or Ctrl-C stops the run.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../cli/cli.h"
#include "lru.h"
#include "replay.h"
#include "report.h"

#define PROG "hicache-bench replay"

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: hicache-bench replay [--trace FILE [--requests N]] [options]\n"
		"  workload:  --trace FILE (Mooncake JSONL; default: the built-in generator)\n"
		"             --requests N, --seed S, --sessions N (built-in)\n"
		"  model:     --model PRESET (%s; default llama3-8b)\n"
		"             or --kv NAME,DTYPE,HEADS,HEAD_BYTES,LAYERS[,replicated][,window=W] and\n"
		"                --state NAME,DTYPE,BYTES_PER_LAYER,LAYERS[,replicated] (repeatable)\n"
		"             --page-tokens P (divides 512; default 64), --scale F (layers x F; default 0.125)\n"
		"  engines:   --tp N (default 2), --engines M (default 1), --l1-pages N (each rank's GPU cache; 0: off)\n"
		"  pool:      --pool-pages N (default: a quarter of the workload's distinct pages)\n"
		"             or --pool NAME: an existing pool, served by a running hicached (its geometry is the model)\n"
		"             --evict clock|lru (default clock)\n"
		"  L3:        --backend file|shm|none|SPEC (default file, in a temporary directory under --dir, default /tmp)\n"
		"             --write-policy write_through|write_through_selective|write_back|write_none\n"
		"             --prefetch best_effort|wait_complete|timeout (default wait_complete), --prefetch-timeout-ms MS\n"
		"             --prefetch-threshold PAGES (default 0)\n"
		"  time:      --serial (one request at a time), --speedup X (paced by the timestamps, X times faster)\n"
		"  check:     --reference (L1 off, no L3, serial, exact LRU: the L2 hit ratio must equal the simulation's)\n"
		"  output:    --json FILE, --csv FILE (per-second timeline), --svg FILE, --progress / --no-progress\n"
		"             --keep (leave the pool and the L3 files)\n",
		hc_rp_presets());
}

static int parse_enum(const char *what, const char *s, const char *const *names, unsigned n, unsigned *out)
{
	for (unsigned i = 0; i < n; i++)
		if (names[i] && !strcmp(s, names[i])) {
			*out = i;
			return 0;
		}
	{
		char list[256] = "";
		for (unsigned i = 0; i < n; i++)
			if (names[i])
				snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", *list ? ", " : "",
					 names[i]);
		return hc_cli_fail(EINVAL, "%s '%s': give one of %s", what, s, list);
	}
}

enum {
	O_TRACE = 256,
	O_REQUESTS,
	O_SEED,
	O_SESSIONS,
	O_MODEL,
	O_PAGE_TOKENS,
	O_SCALE,
	O_TP,
	O_ENGINES,
	O_L1,
	O_POOL_PAGES,
	O_EVICT,
	O_BACKEND,
	O_DIR,
	O_WRITE_POLICY,
	O_PREFETCH,
	O_PF_TIMEOUT,
	O_PF_THRESHOLD,
	O_SERIAL,
	O_SPEEDUP,
	O_REFERENCE,
	O_JSON,
	O_CSV,
	O_SVG,
	O_PROGRESS,
	O_NO_PROGRESS,
	O_KEEP,
	O_HELP,
	O_VERSION,
	O_KV,
	O_STATE,
	O_POOL
};

static int parse(int argc, char **argv, struct hc_rp_opts *o)
{
	static const struct option lo[] = {
		{ "trace", required_argument, NULL, O_TRACE },
		{ "requests", required_argument, NULL, O_REQUESTS },
		{ "seed", required_argument, NULL, O_SEED },
		{ "sessions", required_argument, NULL, O_SESSIONS },
		{ "model", required_argument, NULL, O_MODEL },
		{ "kv", required_argument, NULL, O_KV },
		{ "state", required_argument, NULL, O_STATE },
		{ "page-tokens", required_argument, NULL, O_PAGE_TOKENS },
		{ "scale", required_argument, NULL, O_SCALE },
		{ "tp", required_argument, NULL, O_TP },
		{ "engines", required_argument, NULL, O_ENGINES },
		{ "l1-pages", required_argument, NULL, O_L1 },
		{ "pool-pages", required_argument, NULL, O_POOL_PAGES },
		{ "pool", required_argument, NULL, O_POOL },
		{ "evict", required_argument, NULL, O_EVICT },
		{ "backend", required_argument, NULL, O_BACKEND },
		{ "dir", required_argument, NULL, O_DIR },
		{ "write-policy", required_argument, NULL, O_WRITE_POLICY },
		{ "prefetch", required_argument, NULL, O_PREFETCH },
		{ "prefetch-timeout-ms", required_argument, NULL, O_PF_TIMEOUT },
		{ "prefetch-threshold", required_argument, NULL, O_PF_THRESHOLD },
		{ "serial", no_argument, NULL, O_SERIAL },
		{ "speedup", required_argument, NULL, O_SPEEDUP },
		{ "reference", no_argument, NULL, O_REFERENCE },
		{ "json", required_argument, NULL, O_JSON },
		{ "csv", required_argument, NULL, O_CSV },
		{ "svg", required_argument, NULL, O_SVG },
		{ "progress", no_argument, NULL, O_PROGRESS },
		{ "no-progress", no_argument, NULL, O_NO_PROGRESS },
		{ "keep", no_argument, NULL, O_KEEP },
		{ "help", no_argument, NULL, O_HELP },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const evicts[] = { "clock", "lru" };
	static const char *const pfs[] = { "best_effort", "wait_complete", "timeout" };
	uint64_t u;
	unsigned e;
	int c, r = 0, evict_set = 0, model_set = 0, backend_set = 0;
	const char *makes = NULL; /* an option about the pool and service the replay makes */

	optind = 1;
	while (r == 0 && (c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case O_TRACE:
			o->trace = optarg;
			break;
		case O_REQUESTS:
			r = hc_cli_parse_u64("--requests", optarg, 1, UINT32_MAX, &u);
			o->max_requests = u;
			break;
		case O_SEED:
			r = hc_cli_parse_u64("--seed", optarg, 0, UINT64_MAX, &o->gen.seed);
			break;
		case O_SESSIONS:
			r = hc_cli_parse_u32("--sessions", optarg, 1, 1000000, &o->gen.sessions);
			break;
		case O_MODEL:
			makes = "--model";
			o->model = optarg;
			model_set = 1;
			break;
		case O_KV:
		case O_STATE: {
			struct hc_cli_comp cc;
			makes = c == O_KV ? "--kv" : "--state";
			if (o->ncomp == HC_RP_MAX_COMPS) {
				r = hc_cli_fail(EINVAL, "--kv/--state: at most %d components", HC_RP_MAX_COMPS);
				break;
			}
			r = hc_cli_parse_comp(c == O_KV ? "--kv" : "--state", optarg,
					      c == O_KV ? HC_COMP_KV : HC_COMP_STATE, &cc);
			if (r == 0) {
				snprintf(o->comp_names[o->ncomp], sizeof(o->comp_names[0]), "%s", cc.name);
				o->comps[o->ncomp] = cc.spec;
				o->comps[o->ncomp].name = o->comp_names[o->ncomp];
				o->ncomp++;
			}
			break;
		}
		case O_PAGE_TOKENS:
			makes = "--page-tokens";
			r = hc_cli_parse_u32("--page-tokens", optarg, 1, 512, &o->page_tokens);
			if (r == 0 && !hc_rp_page_tokens_ok(o->page_tokens))
				r = hc_cli_fail(
					EINVAL,
					"--page-tokens %u does not divide 512, the tokens of a trace's hash id: give 16, 32, 64, 128, 256 or 512",
					o->page_tokens);
			break;
		case O_SCALE:
			makes = "--scale";
			r = hc_cli_parse_double("--scale", optarg, 1e-6, 1, &o->scale);
			break;
		case O_TP:
			r = hc_cli_parse_u32("--tp", optarg, 1, HC_TP_MAX, &o->tp);
			o->tp_set = 1;
			break;
		case O_ENGINES:
			r = hc_cli_parse_u32("--engines", optarg, 1, HC_RP_MAX_RANKS, &o->engines);
			break;
		case O_L1:
			r = hc_cli_parse_u32("--l1-pages", optarg, 0, 1u << 24, &o->l1_pages);
			break;
		case O_POOL_PAGES:
			r = hc_cli_parse_u64("--pool-pages", optarg, 1, 1u << 30, &o->pool_pages);
			makes = "--pool-pages";
			break;
		case O_POOL:
			o->pool = optarg;
			break;
		case O_EVICT:
			makes = "--evict";
			r = parse_enum("--evict", optarg, evicts, 2, &e);
			o->evict = (enum hc_evict_policy)e;
			evict_set = 1;
			break;
		case O_BACKEND:
			makes = "--backend";
			o->backend = optarg;
			backend_set = 1;
			break;
		case O_DIR:
			o->dir = optarg;
			break;
		case O_WRITE_POLICY:
			makes = "--write-policy";
			r = parse_enum("--write-policy", optarg, hc_cli_write_policies, HC_WRITE_NONE + 1, &e);
			o->write_policy = (enum hc_write_policy)e;
			break;
		case O_PREFETCH:
			r = parse_enum("--prefetch", optarg, pfs, 3, &e);
			o->prefetch = (enum hc_prefetch_policy)e;
			break;
		case O_PF_TIMEOUT:
			r = hc_cli_parse_u32("--prefetch-timeout-ms", optarg, 1, 3600000, &o->prefetch_timeout_ms);
			break;
		case O_PF_THRESHOLD:
			r = hc_cli_parse_u32("--prefetch-threshold", optarg, 0, HC_LOOKUP_MAX, &o->prefetch_threshold);
			break;
		case O_SERIAL:
			o->serial = 1;
			break;
		case O_SPEEDUP:
			r = hc_cli_parse_double("--speedup", optarg, 1e-3, 1e6, &o->speedup);
			break;
		case O_REFERENCE:
			o->reference = 1;
			break;
		case O_JSON:
			o->json = optarg;
			break;
		case O_CSV:
			o->csv = optarg;
			break;
		case O_SVG:
			o->svg = optarg;
			break;
		case O_PROGRESS:
			o->progress = 1;
			break;
		case O_NO_PROGRESS:
			o->progress = 0;
			break;
		case O_KEEP:
			o->keep = 1;
			break;
		case O_HELP:
			usage(stdout);
			exit(0);
		case O_VERSION:
			printf(PROG " (hicache) %s\n", hc_version());
			exit(0);
		default:
			return hc_cli_fail(EINVAL, "unknown option (see --help)");
		}
	}
	if (r == 0 && o->pool && (makes || o->reference))
		r = hc_cli_fail(EINVAL, "--pool %s: the pool and its service are made already: drop %s", o->pool,
				makes ? makes : "--reference (it needs a fresh pool)");
	if (r == 0 && model_set && o->ncomp)
		r = hc_cli_fail(EINVAL, "--model and --kv/--state both describe the model: give one");
	if (r == 0 && optind < argc)
		r = hc_cli_fail(EINVAL, "unexpected argument '%s'", argv[optind]);
	if (r == 0 && o->trace && o->gen.sessions)
		r = hc_cli_fail(EINVAL, "--sessions is the built-in workload's: a trace has its own requests");
	if (r == 0 && o->tp * o->engines > HC_RP_MAX_RANKS)
		r = hc_cli_fail(EINVAL, "--tp %u x --engines %u is %u ranks: at most %d", o->tp, o->engines,
				o->tp * o->engines, HC_RP_MAX_RANKS);
	if (r == 0 && o->reference &&
	    (o->l1_pages || (backend_set && strcmp(o->backend, "none")) || (evict_set && o->evict != HC_EVICT_LRU)))
		r = hc_cli_fail(EINVAL, "--reference runs with L1 off, no L3 and exact LRU eviction: drop %s",
				o->l1_pages                             ? "--l1-pages"
				: evict_set && o->evict != HC_EVICT_LRU ? "--evict"
									: "--backend");
	if (r == 0 && o->reference) {
		/* The rules the simulation follows, and nothing else. */
		o->backend = "none";
		o->serial = 1;
		o->evict = HC_EVICT_LRU;
	}
	return r;
}

/* ---- planning: what the workload needs */

struct plan {
	uint32_t max_pages; /* of any request */
	uint64_t pages;     /* asked, summed */
	uint64_t distinct;  /* distinct keys */
};

static int plan_workload(const struct hc_rp_workload *w, uint32_t T, struct plan *pl)
{
	struct hc_rp_lru set;
	hc_key_t *keys;
	uint64_t cap = 0;
	int r;

	memset(pl, 0, sizeof(*pl));
	for (size_t q = 0; q < w->n; q++) {
		uint32_t n = hc_rp_pages(&w->req[q], T);
		if (n > HC_LOOKUP_MAX) /* a ticket, a lookup or a reservation names at most that many */
			return hc_cli_fail(E2BIG,
					   "%s %u: a request of %" PRIu32 " tokens is %" PRIu32
					   " pages of %u tokens, more than the %d one lookup may name: give a larger "
					   "--page-tokens, or leave the request out",
					   w->req[q].line ? "trace line" : "request",
					   w->req[q].line ? w->req[q].line : (unsigned)q + 1, w->req[q].input_len, n, T,
					   HC_LOOKUP_MAX);
		pl->pages += n;
		pl->max_pages = n > pl->max_pages ? n : pl->max_pages;
	}
	cap = pl->pages ? pl->pages : 1;
	if (cap > (1u << 30))
		return hc_cli_fail(E2BIG, "the workload asks for %" PRIu64 " pages: at most %u", cap, 1u << 30);
	if ((r = hc_rp_lru_init(&set, (uint32_t)cap)) < 0)
		return hc_cli_fail(-r, "no memory to plan %" PRIu64 " pages", cap);
	if (!(keys = calloc((size_t)pl->max_pages + 1, sizeof(*keys)))) {
		hc_rp_lru_free(&set);
		return hc_cli_fail(ENOMEM, "no memory to plan the workload");
	}
	for (size_t q = 0; q < w->n; q++) {
		uint32_t n = hc_rp_pages(&w->req[q], T);
		hc_rp_keys(w, &w->req[q], T, keys);
		for (uint32_t i = 0; i < n; i++)
			pl->distinct += hc_rp_lru_use(&set, keys[i], 0) != 0;
	}
	free(keys);
	hc_rp_lru_free(&set);
	return 0;
}

/* ---- an existing pool (--pool), served by hicached */

/* Attach to it as an administrator, and take the model from it. */
static int use_pool(struct hc_rp_opts *o, struct hc_rp_model *m, hc_pool **admin)
{
	struct hc_component_spec comps[HC_RP_MAX_COMPS];
	struct hc_component_info ci[HC_RP_MAX_COMPS];
	struct hc_pool_info pi;
	int r;

	if ((r = hc_pool_attach(
		     o->pool,
		     &(struct hc_attach_opts){ .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_ADMIN },
		     admin)) < 0)
		return hc_cli_fail(-r, "--pool %s: %s", o->pool, hc_last_error());
	hc_pool_info(*admin, &pi, sizeof(pi));
	if (pi.ncomp > HC_RP_MAX_COMPS || !hc_rp_page_tokens_ok(pi.page_tokens) || pi.host_mode != HC_HOST_CACHE) {
		r = hc_cli_fail(EINVAL, "--pool %s: %s", o->pool,
				pi.host_mode != HC_HOST_CACHE
					? "a buffer_only pool keeps no pages for a replay to hit: give a cache pool"
				: pi.ncomp > HC_RP_MAX_COMPS
					? "more components than the replay models (4)"
					: "its page size does not divide 512, the tokens of a trace's hash id");
		goto fail;
	}
	for (unsigned i = 0; i < pi.ncomp; i++) {
		hc_pool_component(*admin, i, &ci[i], sizeof(ci[i]));
		comps[i] = (struct hc_component_spec){ .size = sizeof(struct hc_component_spec),
						       .name = ci[i].name,
						       .dtype = ci[i].dtype,
						       .kind = ci[i].kind,
						       .sharding = ci[i].sharding,
						       .kv_heads = ci[i].kv_heads,
						       .head_bytes = ci[i].head_bytes,
						       .bytes_per_layer = ci[i].bytes_per_layer,
						       .layers = ci[i].layers,
						       .window_pages = ci[i].window_pages };
	}
	if ((r = hc_rp_model_custom(comps, pi.ncomp, pi.page_tokens, m)) < 0)
		goto fail;
	snprintf(m->preset, sizeof(m->preset), "pool %s", o->pool);
	snprintf(m->model_id, sizeof(m->model_id), "%s", pi.model_id);
	o->page_tokens = pi.page_tokens;
	o->evict = pi.evict;
	{
		struct hc_service_info si;
		if (hc_service_info(*admin, &si, sizeof(si)) == 0 && si.write_policy >= 0)
			o->write_policy = (enum hc_write_policy)si.write_policy; /* for the report */
	}
	if (!o->tp_set)
		o->tp = pi.tp_size;
	return 0;
fail:
	hc_pool_detach(*admin);
	*admin = NULL;
	return r;
}

/* Whether the pool's tickets and argument areas take the longest request. */
static int pool_fits(hc_pool *admin, const struct hc_rp_opts *o, const struct plan *pl)
{
	struct hc_pool_info pi;

	hc_pool_info(admin, &pi, sizeof(pi));
	if (!o->pool)
		return 0;
	if (pi.ticket_keys < pl->max_pages)
		return hc_cli_fail(
			EINVAL,
			"--pool %s: its tickets name at most %u keys, and the longest request has %u pages: create it with --ticket-keys %u or more",
			o->pool, pi.ticket_keys, pl->max_pages, pl->max_pages);
	if (pi.arg_bytes < (uint64_t)pl->max_pages * HC_KEY_BYTES + 4096)
		return hc_cli_fail(
			EINVAL,
			"--pool %s: its argument areas (%" PRIu64
			" bytes) cannot hold the keys of the longest request (%u pages): create it with a larger --arg-bytes",
			o->pool, pi.arg_bytes, pl->max_pages);
	if (pi.npages <= pl->max_pages)
		return hc_cli_fail(EINVAL, "--pool %s: %u pages cannot hold the longest request (%u pages)", o->pool,
				   pi.npages, pl->max_pages);
	return 0;
}

/* ---- the run */

/* Run from the build tree (./tools/hicache-bench is libtool's wrapper of
 * tools/.libs/lt-hicache-bench), the plugins are built beside it and not
 * installed: the directory of spec's plugin there, or NULL. */
static const char *build_tree_plugins(const char *spec, char *buf, size_t len)
{
	char exe[2048], name[64], *slash;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	size_t k = strcspn(spec, ":");

	if (n <= 0 || k == 0 || k >= sizeof(name))
		return NULL;
	exe[n] = '\0';
	memcpy(name, spec, k);
	name[k] = '\0';
	for (int up = 0; up < 3 && (slash = strrchr(exe, '/')); up++) {
		*slash = '\0';
		if ((size_t)snprintf(buf, len, "%s/backends/%s/.libs/%s.so", exe, name, name) >= len)
			return NULL;
		if (access(buf, R_OK) == 0) {
			snprintf(buf, len, "%s/backends/%s/.libs", exe, name);
			return buf;
		}
	}
	return NULL;
}

/* Wait for every rank; a failed one stops the others.  Samples the
 * timeline meanwhile.  Returns how many failed.  A rank that died (a
 * signal) or exited without its own message is said here: nothing else
 * would say it. */
static unsigned wait_ranks(pid_t *pids, unsigned n, unsigned tp, struct hc_rp_shared *sh, hc_pool *admin, size_t total,
			   struct hc_cli_progress *pg, struct hc_rp_result *res)
{
	unsigned left = n, failed = 0;
	double t0 = hc_cli_now(), next = t0;
	int said_stop = 0, exiting = 0;

	while (left) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid > 0) {
			for (unsigned i = 0; i < n; i++)
				if (pids[i] == pid) {
					pids[i] = 0;
					left--;
					if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
						continue;
					failed++;
					atomic_store(&sh->go, -1);
					if (WIFSIGNALED(st))
						fprintf(stderr,
							PROG ": engine %u rank %u (pid %d) was killed by %s%s\n",
							i / tp, i % tp, (int)pid, strsignal(WTERMSIG(st)),
							left ? "; stopping the other ranks" : "");
					else if (!sh->st[i].err)
						fprintf(stderr,
							PROG ": engine %u rank %u (pid %d) exited with status %d%s\n",
							i / tp, i % tp, (int)pid, WEXITSTATUS(st),
							left ? "; stopping the other ranks" : "");
				}
			continue;
		}
		if (interrupted && !said_stop) {
			said_stop = 1;
			atomic_store(&sh->go, -1);
			fprintf(stderr, PROG ": interrupted: stopping the ranks after %" PRIu64 " of %zu requests\n",
				(uint64_t)atomic_load(&sh->served), total);
		}
		if (hc_cli_now() >= next) {
			uint64_t served = atomic_load(&sh->served);
			hc_rp_sample(res, sh, admin, hc_cli_now() - t0);
			/* the requests, then the ranks' exits (their unmapping
			 * takes a while with a large pool) */
			if (!exiting && (served >= total || left < n)) {
				hc_cli_progress_show(pg, "serving", served, total, "requests"); /* its end */
				exiting = 1;
			}
			if (exiting)
				hc_cli_progress_show(pg, "ranks exiting", n - left, n, "ranks");
			else
				hc_cli_progress_show(pg, "serving", served, total, "requests");
			next += 0.25;
		}
		usleep(2000);
	}
	hc_rp_sample(res, sh, admin, hc_cli_now() - t0);
	if (!exiting) /* the serving phase's end, then the exits' */
		hc_cli_progress_show(pg, "serving", atomic_load(&sh->served), total, "requests");
	hc_cli_progress_show(pg, "ranks exiting", n, n, "ranks");
	hc_cli_progress_clear(pg);
	res->seconds = hc_cli_now() - t0;
	return failed;
}

int hc_rp_main(int argc, char **argv)
{
	struct hc_rp_opts o = { .model = "llama3-8b",
				.page_tokens = 64,
				.scale = 0.125,
				.tp = 2,
				.engines = 1,
				.backend = "file",
				.dir = "/tmp",
				.prefetch = HC_PREFETCH_WAIT_COMPLETE,
				.prefetch_timeout_ms = 1000,
				.progress = -1 };
	struct hc_rp_workload w = { 0 };
	struct hc_rp_model m;
	struct hc_rp_result res = { 0 };
	struct hc_rp_shared *sh = MAP_FAILED;
	struct hc_rp_ctx cx;
	struct plan pl;
	struct sigaction sa = { .sa_handler = on_signal };
	struct hc_cli_progress pg;
	char pool[HC_NAME_MAX + 1], l3dir[4096] = "", spec[4600] = "";
	pid_t pids[HC_RP_MAX_RANKS] = { 0 }, driver;
	hc_service *svc = NULL;
	hc_pool *admin = NULL;
	unsigned nranks, failed = 0;
	int created = 0, ret = HC_CLI_EXIT_FAIL, r;

	if ((r = parse(argc, argv, &o)) < 0) {
		fprintf(stderr, PROG ": %s\n", hc_cli_error());
		return HC_CLI_EXIT_USAGE;
	}
	/* a bar on a terminal, else a line every 10 s of a long step */
	hc_cli_progress_init(&pg, stderr, PROG, o.progress);
	if (o.pool) {
		if ((r = use_pool(&o, &m, &admin)) < 0) {
			fprintf(stderr, PROG ": %s\n", hc_cli_error());
			return r == -ENOENT || r == -EINVAL ? HC_CLI_EXIT_USAGE : HC_CLI_EXIT_FAIL;
		}
	} else if ((r = o.ncomp ? hc_rp_model_custom(o.comps, o.ncomp, o.page_tokens, &m)
				: hc_rp_model_preset(o.model, o.page_tokens, o.scale, &m)) < 0) {
		fprintf(stderr, PROG ": %s\n", hc_cli_error());
		return HC_CLI_EXIT_USAGE;
	}
	r = o.trace ? hc_rp_trace_load(o.trace, o.max_requests, &w) : hc_rp_gen(&o.gen, &w);
	if (r == 0 && !o.trace && o.max_requests && w.n > o.max_requests)
		w.n = o.max_requests;
	if (r < 0 || (r = plan_workload(&w, o.page_tokens, &pl)) < 0 ||
	    (admin && (r = pool_fits(admin, &o, &pl)) < 0)) {
		fprintf(stderr, PROG ": %s\n", hc_cli_error());
		hc_rp_workload_free(&w);
		if (admin)
			hc_pool_detach(admin);
		return o.trace || admin ? HC_CLI_EXIT_USAGE : HC_CLI_EXIT_FAIL;
	}
	if (o.pool) {
		snprintf(pool, sizeof(pool), "%s", o.pool);
		goto made;
	}
	if (!o.pool_pages)
		o.pool_pages = pl.distinct / 4 > 2ull * pl.max_pages * o.engines + 16
				       ? pl.distinct / 4
				       : 2ull * pl.max_pages * o.engines + 16;
	if (o.pool_pages <= pl.max_pages) {
		fprintf(stderr,
			PROG ": --pool-pages %" PRIu64 " cannot hold the longest request (%u pages): give more\n",
			o.pool_pages, pl.max_pages);
		hc_rp_workload_free(&w);
		return HC_CLI_EXIT_USAGE;
	}
	hc_rp_sweep(o.backend && !strcmp(o.backend, "file") ? o.dir : NULL, stderr);
	snprintf(pool, sizeof(pool), "hcreplay-%d", (int)getpid());
	{
		struct hc_pool_spec ps = { .size = sizeof(struct hc_pool_spec),
					   .name = pool,
					   .model_id = m.model_id,
					   .page_tokens = o.page_tokens,
					   .tp_size = o.tp,
					   .comps = m.comps,
					   .ncomp = m.ncomp,
					   .capacity_pages = o.pool_pages,
					   .max_ranks = o.tp * o.engines + 4,
					   .quarantine_ms = 200,
					   .evict = o.evict,
					   .max_tickets = 64 * ((o.engines * 8 + 63) / 64),
					   .ticket_keys = pl.max_pages > 1024 ? pl.max_pages : 1024,
					   .arg_bytes = ((uint64_t)pl.max_pages * HC_KEY_BYTES + 8191) / 4096 * 4096 };
		if (ps.arg_bytes < 65536)
			ps.arg_bytes = 65536;
		ps.progress = hc_cli_progress_pool;
		ps.progress_arg = &pg;
		if ((r = hc_pool_create(&ps)) < 0) {
			fprintf(stderr, PROG ": pool: %s\n", hc_last_error());
			goto out;
		}
		created = 1;
	}
	if ((r = hc_pool_attach(
		     pool, &(struct hc_attach_opts){ .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_ADMIN },
		     &admin)) < 0) {
		fprintf(stderr, PROG ": pool: %s\n", hc_last_error());
		goto out;
	}
made:
	if (o.pool) {
		uint32_t pid = 0;
		if (hc_service_probe(admin, &pid) == 1)
			snprintf(spec, sizeof(spec), "hicached (pid %u)", pid); /* the L3 is the running service's */
	} else if (strcmp(o.backend, "none")) {
		if (!strcmp(o.backend, "file")) {
			/* named after our pid: the next replay removes it if we die (leftovers.c) */
			snprintf(l3dir, sizeof(l3dir), "%s/hicache-replay-%d-XXXXXX", o.dir, (int)getpid());
			if (!mkdtemp(l3dir)) {
				fprintf(stderr, PROG ": --dir %s: cannot make a directory there: %s\n", o.dir,
					strerror(errno));
				l3dir[0] = '\0';
				goto out;
			}
			snprintf(spec, sizeof(spec), "file:dir=%s", l3dir);
		} else if (!strcmp(o.backend, "shm")) {
			struct hc_pool_info pi;
			hc_pool_info(admin, &pi, sizeof(pi));
			snprintf(spec, sizeof(spec), "shm:name=hcreplay-%d,capacity=%" PRIu64 ",destroy_on_close=1",
				 (int)getpid(), (pl.distinct + pl.distinct / 4 + 64) * (pi.envelope_bytes + 4096));
		} else {
			snprintf(spec, sizeof(spec), "%s", o.backend);
		}
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		fprintf(stderr, PROG ": no memory for the ranks' shared figures\n");
		goto out;
	}
	memset(sh, 0, sizeof(*sh));
	atomic_store(&sh->left, o.tp);
	cx = (struct hc_rp_ctx){ .o = &o,
				 .w = &w,
				 .m = &m,
				 .pool = pool,
				 .l3 = spec[0] != '\0',
				 .max_pages = pl.max_pages ? pl.max_pages : 1,
				 .sh = sh };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* Ranks first, then the service's threads: a fork copies no thread. */
	fflush(NULL);
	nranks = o.tp * o.engines;
	driver = getpid();
	for (unsigned i = 0; i < nranks; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			/* a rank never outlives its driver: a killed driver's
			 * ranks would wait on it for ever */
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != driver)
				_exit(1);
			signal(SIGINT, SIG_IGN); /* the driver stops us */
			_exit(hc_rp_serve(&cx, i / o.tp, i % o.tp) < 0 ? 1 : 0);
		}
		if (pid < 0) {
			fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
			atomic_store(&sh->go, -1);
			failed++;
			break;
		}
		pids[i] = pid;
	}
	if (!failed && cx.l3 && !o.pool) {
		char bdir[4200];
		struct hc_service_opts so = { .size = sizeof(struct hc_service_opts),
					      .backend = spec,
					      .write_policy = o.write_policy,
					      .backend_dir = build_tree_plugins(spec, bdir, sizeof(bdir)) };
		if (hc_service_start(pool, &so, &svc) < 0) {
			fprintf(stderr, PROG ": service: %s\n", hc_last_error());
			atomic_store(&sh->go, -1);
			failed++;
		}
	}
	res.o = &o;
	res.m = &m;
	res.w = &w;
	res.requests = w.n;
	res.distinct_pages = pl.distinct;
	res.max_pages = pl.max_pages;
	res.pool_pages = o.pool_pages;
	if (o.pool) {
		struct hc_pool_info pi;
		hc_pool_info(admin, &pi, sizeof(pi));
		res.pool_pages = pi.npages;
	}
	snprintf(res.l3, sizeof(res.l3), "%s", cx.l3 ? (l3dir[0] ? l3dir : spec) : "none");
	/* The pool's figures so far: with --pool it has a past, and the report
	 * is of this run alone. */
	hc_pool_stats(admin, &res.base, sizeof(res.base));
	if (!failed)
		atomic_store(&sh->go, 1);
	failed += wait_ranks(pids, nranks, o.tp, sh, admin, w.n, &pg, &res);
	if (svc && hc_service_stop(svc) < 0)
		fprintf(stderr, PROG ": service stop: %s\n", hc_last_error());
	svc = NULL;
	hc_pool_stats(admin, &res.st, sizeof(res.st));
	hc_rp_stats_since(&res.st, &res.base);
	{
		struct hc_pool_info pi;
		hc_pool_info(admin, &pi, sizeof(pi));
		res.envelope_bytes = pi.envelope_bytes;
	}
	for (unsigned i = 0; i < nranks; i++)
		res.ranks[i] = sh->st[i];
	res.nranks = nranks;
	if (o.reference && !failed) {
		if (hc_rp_refsim(&w, o.page_tokens, o.pool_pages, &res.ref) < 0) {
			fprintf(stderr, PROG ": reference: %s\n", hc_cli_error());
			failed++;
		} else {
			res.have_ref = 1;
		}
	}
	hc_rp_report_text(stdout, &res);
	if (o.json && hc_rp_report_json(o.json, &res) < 0) {
		fprintf(stderr, PROG ": --json %s: %s\n", o.json, hc_cli_error());
		failed++;
	}
	if (o.csv && hc_rp_report_csv(o.csv, &res) < 0) {
		fprintf(stderr, PROG ": --csv %s: %s\n", o.csv, hc_cli_error());
		failed++;
	}
	if (o.svg && hc_rp_report_svg(o.svg, &res) < 0) {
		fprintf(stderr, PROG ": --svg %s: %s\n", o.svg, hc_cli_error());
		failed++;
	}
	for (unsigned i = 0; i < nranks; i++)
		if (sh->st[i].err && sh->st[i].err != -ECANCELED) /* not one stopped with the run */
			fprintf(stderr, PROG ": engine %u rank %u: %s\n", sh->st[i].engine, sh->st[i].tp_rank,
				sh->st[i].msg);
	if (interrupted)
		fprintf(stderr, PROG ": interrupted: the figures above are of the requests served before it\n");
	ret = failed || interrupted || hc_rp_result_bad(&res) ? HC_CLI_EXIT_FAIL : HC_CLI_EXIT_OK;
out:
	hc_rp_result_free(&res);
	if (admin)
		hc_pool_detach(admin);
	if (created && !o.keep) {
		/* the memory goes back as the pool goes: a while for a large one */
		hc_cli_progress_show(&pg, "removing the pool", 0, 1, "pools");
		if (hc_pool_destroy(pool, NULL, HC_DESTROY_FORCE) < 0)
			fprintf(stderr, PROG ": pool %s: %s\n", pool, hc_last_error());
		hc_cli_progress_show(&pg, "removing the pool", 1, 1, "pools");
	}
	if (created && o.keep)
		fprintf(stderr, PROG ": kept pool %s%s%s\n", pool, l3dir[0] ? " and " : "", l3dir);
	if (l3dir[0] && !o.keep)
		hc_rp_rm_tree(l3dir, &pg);
	hc_cli_progress_clear(&pg);
	if (sh != MAP_FAILED)
		munmap(sh, sizeof(*sh));
	hc_rp_workload_free(&w);
	return ret;
}
