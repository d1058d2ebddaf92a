/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hicache-pool - create, inspect, list, repair and destroy hicache pools.
 *
 * Uses only libhicache's public API.  Exit status: 0 on success, 1 when the
 * operation failed, 2 when the command line is wrong.  Every failure is one
 * line on stderr: "hicache-pool: VERB: what went wrong and what to do".
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include <hicache/hicache.h>
#include <hicache/service.h>

#include "../cli/cli.h"

#define PROG "hicache-pool"
#define DEFAULT_DIR "/dev/shm"

#ifndef JSON_C_TO_STRING_NOSLASHESCAPE
#define JSON_C_TO_STRING_NOSLASHESCAPE 0
#endif

static const char *verb = NULL; /* for messages: the verb being run */
static bool log_info;           /* show the library's INFO lines (repair) */

static int say(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Print one error line and return the exit status to use. */
static int say(int code, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG ": ");
	if (verb)
		fprintf(stderr, "%s: ", verb);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

#define usage_error(...) say(HC_CLI_EXIT_USAGE, __VA_ARGS__)
#define failure(...)     say(HC_CLI_EXIT_FAIL, __VA_ARGS__)

/* The library's last error, less a leading "VERB: " that say() adds too
 * ("hicache-pool: clear: clear: pool ..." reads like a stutter). */
static const char *lib_error(void)
{
	const char *e = hc_last_error();
	size_t n = verb ? strlen(verb) : 0;

	return n && !strncmp(e, verb, n) && !strncmp(e + n, ": ", 2) ? e + n + 2 : e;
}

static void tool_log(int level, const char *msg, void *arg)
{
	(void)arg;
	if (level > HC_LOG_WARN && !log_info)
		return;
	fprintf(stderr, PROG ": %s%s%s%s\n", verb ? verb : "", verb ? ": " : "",
		level <= HC_LOG_ERR ? "error: " : level <= HC_LOG_WARN ? "warning: " : "", msg);
}

/* An unknown option or a missing value, as getopt_long reported it. */
static int bad_option(int c, char **argv)
{
	const char *opt = argv[optind - 1];

	if (c == ':')
		return usage_error("option '%s' needs a value; see '" PROG " %s --help'", opt, verb);
	if (optopt >= 256) /* glibc: a long option without arguments got "=value" */
		return usage_error("option '%s' takes no value", opt);
	if (optopt)
		return usage_error("unknown option '-%c'; see '" PROG " %s --help'", optopt, verb);
	return usage_error("unknown or ambiguous option '%s'; see '" PROG " %s --help'", opt, verb);
}

/* The NAME operand of a verb, checked as the library would, and one more
 * optional operand where 'extra' is given (else NULL). */
static int take_operands(int argc, char **argv, const char **name, const char **extra)
{
	if (optind >= argc)
		return usage_error("missing pool NAME; see '" PROG " %s --help'", verb);
	if (optind + 1 + (extra != NULL) < argc)
		return usage_error("unexpected argument '%s': give one pool NAME%s", argv[optind + 1 + (extra != NULL)],
				   extra ? " and at most one more operand" : "");
	if (hc_pool_name_valid(argv[optind]) < 0)
		return usage_error("%s", hc_last_error());
	*name = argv[optind];
	if (extra)
		*extra = optind + 1 < argc ? argv[optind + 1] : NULL;
	return 0;
}

static int take_name(int argc, char **argv, const char **name)
{
	return take_operands(argc, argv, name, NULL);
}

static int check_dir(const char *dir)
{
	if (dir && dir[0] != '/')
		return usage_error("--dir '%s' must be an absolute path", dir);
	return 0;
}

/* getopt_long codes of the long options, for every verb */
enum {
	OPT_DIR = 256, OPT_JSON, OPT_NO_RECOVER, OPT_FORCE, OPT_PROMETHEUS, OPT_QUIESCENT, OPT_LIMIT, OPT_KEY,
	OPT_COUNT, OPT_INTERVAL,
	OPT_POOL, /* create: OPT_POOL + enum hc_cli_pool_opt */
};

/*
 * The options of every verb but create.  Each verb's getopt table names the
 * ones it takes; parse_args fills what was given, checks the values, the
 * NAME operand (where 'name' is given; 'extra' for one more) and --dir.
 */
struct verb_args {
	const char *dir;              /* NULL unless --dir */
	bool json, prometheus, quiescent, no_recover, force;
	uint32_t limit;               /* --limit; UINT32_MAX when absent */
	uint32_t count;               /* --count; 0 when absent */
	uint32_t interval_ms;         /* --interval; 0 when absent */
	const char *key;              /* --key as given, NULL when absent */
	uint8_t keyb[HC_KEY_BYTES];   /* --key as bytes */
};

#define OPTION_DIR  { "dir", required_argument, NULL, OPT_DIR }
#define OPTION_JSON { "json", no_argument, NULL, OPT_JSON }
#define OPTIONS_END { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }
#define ARGS_OK (-1) /* parse_args: go on; anything else is the exit status */

static int parse_args(int argc, char **argv, const struct option *opts, const char *usage, struct verb_args *va,
		      const char **name, const char **extra)
{
	int c, ret;

	memset(va, 0, sizeof(*va));
	va->limit = UINT32_MAX;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		ret = 0;
		switch (c) {
		case 'h':
			fputs(usage, stdout);
			return HC_CLI_EXIT_OK;
		case OPT_DIR:
			va->dir = optarg;
			break;
		case OPT_JSON:
			va->json = true;
			break;
		case OPT_PROMETHEUS:
			va->prometheus = true;
			break;
		case OPT_QUIESCENT:
			va->quiescent = true;
			break;
		case OPT_NO_RECOVER:
			va->no_recover = true;
			break;
		case OPT_FORCE:
			va->force = true;
			break;
		case OPT_LIMIT:
			ret = hc_cli_parse_u32("--limit", optarg, 1, UINT32_MAX, &va->limit);
			break;
		case OPT_COUNT:
			/* the library returns the count as an int */
			ret = hc_cli_parse_u32("--count", optarg, 1, INT32_MAX, &va->count);
			break;
		case OPT_INTERVAL:
			ret = hc_cli_parse_u32("--interval", optarg, 100, 3600000, &va->interval_ms);
			break;
		case OPT_KEY:
			va->key = optarg;
			ret = hc_cli_parse_hex("--key", optarg, va->keyb, HC_KEY_BYTES);
			break;
		default:
			return bad_option(c, argv);
		}
		if (ret < 0)
			return usage_error("%s", hc_cli_error());
	}
	if (name && (ret = take_operands(argc, argv, name, extra)) != 0)
		return ret;
	if ((ret = check_dir(va->dir)) != 0)
		return ret;
	return ARGS_OK;
}

static int print_json(struct json_object *o)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);

	if (!s)
		return failure("out of memory formatting JSON");
	puts(s);
	return 0;
}

static void jadd_u64(struct json_object *o, const char *k, uint64_t v)
{
	/* every count and size in a pool is far below 2^63 (layout caps them) */
	json_object_object_add(o, k, json_object_new_int64((int64_t)v));
}

static void jadd_str(struct json_object *o, const char *k, const char *v)
{
	json_object_object_add(o, k, json_object_new_string(v));
}

static void jadd_bool(struct json_object *o, const char *k, bool v)
{
	json_object_object_add(o, k, json_object_new_boolean(v));
}

static const char *kind_name(enum hc_comp_kind k)
{
	return k == HC_COMP_KV ? "kv" : k == HC_COMP_STATE ? "state" : "invalid";
}

static const char *sharding_name(enum hc_sharding s)
{
	return s == HC_REPLICATED ? "replicated" : "sharded";
}

static int attach(const char *name, const char *dir, unsigned flags, hc_pool **p)
{
	struct hc_attach_opts o = { .dir = dir, .flags = flags };

	return hc_pool_attach(name, &o, p);
}

/* ------------------------------------------------------------------ create */

static const char create_usage[] =
	"Usage: " PROG " create NAME --model ID --page-tokens N --tp N [--head-groups N]\n"
	"           (--pages N | --size SIZE)\n"
	"           [--kv NAME,DTYPE,HEADS,HEAD_BYTES,LAYERS[,replicated][,window=W]]...\n"
	"           [--state NAME,DTYPE,BYTES_PER_LAYER,LAYERS[,replicated][,window=W]]...\n"
	"           [--dir DIR] [--group GROUP] [--mode 0600|0660] [--max-ranks N]\n"
	"           [--quarantine-ms N] [--numa bind:NODES|interleave[:NODES]]\n"
	"           [--evict clock|lru] [--max-tickets N] [--ticket-keys N]\n"
	"           [--host-mode cache|buffer_only] [--ring-entries N] [--arg-bytes SIZE]\n"
	"\n"
	"Create pool NAME as DIR/hicache.NAME (DIR: " DEFAULT_DIR ").  Give at least one\n"
	"--kv or --state component; components are laid out in the order given.\n"
	"\n"
	"  --model ID            model the pages belong to (part of the fingerprint)\n"
	"  --page-tokens N       tokens per page, the engine's page size\n"
	"  --tp N                tensor-parallel size the pool is laid out for\n"
	"  --head-groups N       head groups per sharded component (default:\n"
	"                        min(tp, smallest sharded HEADS))\n"
	"  --pages N             capacity in pages\n"
	"  --size SIZE           capacity in envelope bytes, rounded down to whole\n"
	"                        pages; K, M, G, T suffixes are powers of 1024\n"
	"  --kv SPEC             a K/V component: HEADS total KV heads, HEAD_BYTES\n"
	"                        bytes of one head of one token; 'replicated' for MLA\n"
	"  --state SPEC          a per-page state snapshot of BYTES_PER_LAYER per layer\n"
	"                        window=W: a hit needs this component in its last W\n"
	"                        pages only (sliding window; 1 for a state snapshot)\n"
	"  --dir DIR             a tmpfs, huge-page tmpfs or hugetlbfs directory\n"
	"  --group GROUP         group allowed to attach (mode becomes 0660)\n"
	"  --mode 0600|0660      file mode (default 0600, or 0660 with --group)\n"
	"  --max-ranks N         rank slots, 1..128 (default 32)\n"
	"  --quarantine-ms N     grace before a dead rank's reservations are reused\n"
	"                        (default 2000)\n"
	"  --numa MODE           bind:NODES, interleave or interleave:NODES\n"
	"  --evict POLICY        clock (default: approximate LRU, no shared counter)\n"
	"                        or lru (exact; a chain's root goes last)\n"
	"  --max-tickets N       tickets open at once, a multiple of 64 (default 64)\n"
	"  --ticket-keys N       most keys one ticket names (default 1024)\n"
	"  --host-mode MODE      cache (default: keep READY pages, evict by policy) or\n"
	"                        buffer_only (pages only stage GPU <-> L3 transfers)\n"
	"  --ring-entries N      each rank's request ring, a power of two in 8..4096\n"
	"                        (default 64; completions get twice as many)\n"
	"  --arg-bytes SIZE      each rank's argument area for key lists, a multiple\n"
	"                        of 4096 (default 64K)\n"
	"\n"
	"DTYPE is one of f32, f16, bf16, fp8_e4m3, fp8_e5m2, int8, uint8.\n";

static int cmd_create(int argc, char **argv)
{
	struct option opts[HC_CLI_POOL__COUNT + 2];
	static struct hc_cli_pool cp;
	struct hc_pool_spec spec;
	struct hc_pool_info info;
	char hex[65], b1[32], b2[32], what[32];
	hc_pool *p = NULL;
	int c, ret;

	/* the options are the shared pool options (cli.h), each coded OPT_POOL + its index */
	for (unsigned i = 0; i < HC_CLI_POOL__COUNT; i++)
		opts[i] = (struct option){ hc_cli_pool_opts[i].name, required_argument, NULL, OPT_POOL + (int)i };
	opts[HC_CLI_POOL__COUNT] = (struct option){ "help", no_argument, NULL, 'h' };
	opts[HC_CLI_POOL__COUNT + 1] = (struct option){ NULL, 0, NULL, 0 };
	hc_cli_pool_init(&cp);
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(create_usage, stdout);
			return HC_CLI_EXIT_OK;
		}
		if (c < OPT_POOL || c >= OPT_POOL + HC_CLI_POOL__COUNT)
			return bad_option(c, argv);
		snprintf(what, sizeof(what), "--%s", hc_cli_pool_opts[c - OPT_POOL].name);
		if (hc_cli_pool_set(&cp, (enum hc_cli_pool_opt)(c - OPT_POOL), what, optarg) < 0)
			return usage_error("%s", hc_cli_error());
	}
	if ((ret = take_name(argc, argv, &cp.spec.name)) != 0)
		return ret;
	if (hc_cli_pool_finish(&cp) < 0)
		return usage_error("%s", hc_cli_error());
	spec = cp.spec;

	if (hc_pool_create(&spec) < 0)
		return failure("%s", lib_error());
	/* Read the pool back: the summary shows what the library made of the spec. */
	if (attach(spec.name, spec.dir, HC_ATTACH_READONLY, &p) < 0 || hc_pool_info(p, &info) < 0) {
		ret = failure("pool '%s' was created, but reading it back failed: %s", spec.name, hc_last_error());
		goto out;
	}
	printf("created pool '%s' at %s\n", info.name, info.path);
	printf("  model        %s\n", info.model_id);
	printf("  pages        %" PRIu32 " (%s of envelopes)\n", info.npages,
	       hc_cli_format_size((uint64_t)info.npages * info.envelope_bytes, b1, sizeof(b1)));
	printf("  envelope     %" PRIu64 " bytes (%s)\n", info.envelope_bytes,
	       hc_cli_format_size(info.envelope_bytes, b1, sizeof(b1)));
	printf("  segment      %" PRIu64 " bytes (%s)\n", info.segment_bytes,
	       hc_cli_format_size(info.segment_bytes, b2, sizeof(b2)));
	printf("  fingerprint  %s\n", hc_cli_hex(info.fingerprint, 32, hex));
	ret = HC_CLI_EXIT_OK;
out:
	if (p)
		hc_pool_detach(p);
	return ret;
}

/* ------------------------------------------------------ ranks and engines */

/* One rank slot as info and ls print it in JSON. */
static struct json_object *rank_json(const struct hc_rank_info *ri)
{
	struct json_object *x = json_object_new_object();

	jadd_u64(x, "slot", ri->slot);
	jadd_bool(x, "live", ri->live);
	jadd_u64(x, "pid", ri->pid);
	jadd_str(x, "comm", ri->comm);
	jadd_u64(x, "epoch", ri->epoch);
	jadd_u64(x, "attached_unix_ns", ri->attached_unix_ns);
	jadd_u64(x, "pins", ri->pins);
	jadd_u64(x, "locks", ri->locks);
	jadd_u64(x, "reserved", ri->reserved);
	json_object_object_add(x, "engine_id", json_object_new_int(ri->engine_id));
	jadd_u64(x, "tp_size", ri->tp_size);
	jadd_u64(x, "tp_rank", ri->tp_rank);
	jadd_u64(x, "quota", ri->quota);
	jadd_u64(x, "held", ri->held);
	return x;
}

/* "-", "unlimited" or the page count: a quota for people. */
static const char *quota_text(const struct hc_rank_info *ri, char *buf, size_t len)
{
	if (ri->engine_id < 0)
		return "-";
	if (ri->quota == HC_QUOTA_UNLIMITED)
		return "unlimited";
	snprintf(buf, len, "%" PRIu32, ri->quota);
	return buf;
}

/*
 * The ranks that are in an engine, as indices into ri, sorted by engine id
 * and then TP rank, so each engine is one run.  Returns how many.  There
 * is no engine table in the pool: membership is in the rank slots.
 */
static unsigned engine_order(const struct hc_rank_info *ri, unsigned n, unsigned *idx)
{
	unsigned m = 0;

	for (unsigned i = 0; i < n; i++) {
		unsigned j;

		if (!ri[i].live || ri[i].engine_id < 0)
			continue;
		/* insertion sort: at most HC_MAX_RANKS entries */
		for (j = m++; j > 0; j--) {
			const struct hc_rank_info *a = &ri[idx[j - 1]];

			if (a->engine_id < ri[i].engine_id ||
			    (a->engine_id == ri[i].engine_id && a->tp_rank <= ri[i].tp_rank))
				break;
			idx[j] = idx[j - 1];
		}
		idx[j] = i;
	}
	return m;
}

/* The end of the run of engine members that starts at idx[i]. */
static unsigned engine_run(const struct hc_rank_info *ri, const unsigned *idx, unsigned m, unsigned i)
{
	unsigned e = i + 1;

	while (e < m && ri[idx[e]].engine_id == ri[idx[i]].engine_id)
		e++;
	return e;
}

/* "engine 3: tp 2, ranks 0,1 (slots 4,5)", and the TP ranks not present. */
static void engines_text(const struct hc_rank_info *ri, unsigned n, const char *indent)
{
	unsigned idx[HC_MAX_RANKS], m = engine_order(ri, n, idx);

	for (unsigned i = 0, e; i < m; i = e) {
		const struct hc_rank_info *first = &ri[idx[i]];
		unsigned missing = 0;

		e = engine_run(ri, idx, m, i);
		printf("%sengine %" PRId32 ": tp %" PRIu32 ", ranks ", indent, first->engine_id, first->tp_size);
		for (unsigned k = i; k < e; k++)
			printf("%s%" PRIu32, k > i ? "," : "", ri[idx[k]].tp_rank);
		printf(" (slots ");
		for (unsigned k = i; k < e; k++)
			printf("%s%" PRIu32, k > i ? "," : "", ri[idx[k]].slot);
		printf(")");
		for (uint32_t t = 0, k = i; t < first->tp_size; t++) {
			while (k < e && ri[idx[k]].tp_rank < t)
				k++;
			if (k < e && ri[idx[k]].tp_rank == t)
				continue;
			printf("%s%" PRIu32, missing++ ? "," : ", missing ", t);
		}
		printf("\n");
	}
}

static struct json_object *engines_json(const struct hc_rank_info *ri, unsigned n)
{
	unsigned idx[HC_MAX_RANKS], m = engine_order(ri, n, idx);
	struct json_object *a = json_object_new_array();

	for (unsigned i = 0, e; i < m; i = e) {
		const struct hc_rank_info *first = &ri[idx[i]];
		struct json_object *x = json_object_new_object(), *tr = json_object_new_array(),
				   *sl = json_object_new_array();

		e = engine_run(ri, idx, m, i);
		for (unsigned k = i; k < e; k++) {
			json_object_array_add(tr, json_object_new_int64(ri[idx[k]].tp_rank));
			json_object_array_add(sl, json_object_new_int64(ri[idx[k]].slot));
		}
		json_object_object_add(x, "engine_id", json_object_new_int(first->engine_id));
		jadd_u64(x, "tp_size", first->tp_size);
		json_object_object_add(x, "tp_ranks", tr);
		json_object_object_add(x, "slots", sl);
		jadd_bool(x, "complete", e - i == first->tp_size);
		json_object_array_add(a, x);
	}
	return a;
}

/* -------------------------------------------------------------------- info */

static const char info_usage[] =
	"Usage: " PROG " info NAME [--dir DIR] [--json] [--no-recover]\n"
	"\n"
	"Show pool NAME: header, geometry, components, page counts by state, the\n"
	"rank slots that are live or hold pages, and the fingerprint.\n"
	"\n"
	"  --dir DIR       the pool's directory (default " DEFAULT_DIR ")\n"
	"  --json          print one JSON object\n"
	"  --no-recover    attach read-only: do not undo the holds of dead ranks\n"
	"                  first, and show rank liveness as recorded, not proven\n";


static const char *write_policy_name(int wp)
{
	return wp >= 0 && wp <= HC_WRITE_NONE ? hc_cli_write_policies[wp] : "none set yet";
}

/* "service      pid 4242 (generation 3), write policy write_through; jobs
 * 0 queued, 1 running[; staging 4 read, 8 write, 0 reads and 1 write waiting]" */
static void service_text(const struct hc_service_info *sv, int buffer_only)
{
	if (sv->live)
		printf("service      pid %" PRIu32 " (generation %" PRIu64 "), write policy %s", sv->pid, sv->generation,
		       write_policy_name(sv->write_policy));
	else if (sv->write_policy < 0)
		printf("service      none (%" PRIu64 " started so far)", sv->generation);
	else /* it outlives the service: eviction under write_back keeps dirty pages */
		printf("service      none (%" PRIu64 " started so far); the last one's write policy, %s, still holds",
		       sv->generation, write_policy_name(sv->write_policy));
	if (sv->write_policy == HC_WRITE_THROUGH_SELECTIVE)
		printf(" after %" PRIu32 " hits", sv->select_hits);
	if (sv->live)
		printf("; jobs %" PRIu32 " queued, %" PRIu32 " running", sv->jobs_queued, sv->jobs_running);
	if (sv->live && buffer_only)
		printf("; staging %" PRIu32 " read, %" PRIu32 " write, %" PRIu32 " reads and %" PRIu32 " writes waiting",
		       sv->stage_read, sv->stage_write, sv->parked_reads, sv->parked_writes);
	printf("\n");
}

static struct json_object *service_json(const struct hc_service_info *sv)
{
	struct json_object *o = json_object_new_object();

	jadd_bool(o, "live", sv->live);
	jadd_u64(o, "pid", sv->live ? sv->pid : 0);
	jadd_u64(o, "generation", sv->generation);
	json_object_object_add(o, "write_policy", sv->write_policy < 0 ? NULL :
							 json_object_new_string(write_policy_name(sv->write_policy)));
	jadd_u64(o, "select_hits", sv->select_hits);
	jadd_u64(o, "jobs_queued", sv->jobs_queued);
	jadd_u64(o, "jobs_running", sv->jobs_running);
	jadd_u64(o, "stage_read", sv->stage_read);
	jadd_u64(o, "stage_write", sv->stage_write);
	jadd_u64(o, "parked_reads", sv->parked_reads);
	jadd_u64(o, "parked_writes", sv->parked_writes);
	return o;
}

static struct json_object *info_json(const struct hc_pool_info *in, const struct hc_component_info *ci,
				     const uint64_t counts[5], const struct hc_rank_info *ri, unsigned nri)
{
	struct json_object *o = json_object_new_object(), *a, *x;
	char hex[65], when[64];

	jadd_str(o, "name", in->name);
	jadd_str(o, "path", in->path);
	jadd_str(o, "model_id", in->model_id);
	jadd_str(o, "fingerprint", hc_cli_hex(in->fingerprint, 32, hex));
	jadd_u64(o, "layout_major", in->layout_major);
	jadd_u64(o, "layout_minor", in->layout_minor);
	jadd_u64(o, "page_tokens", in->page_tokens);
	jadd_u64(o, "tp_size", in->tp_size);
	jadd_u64(o, "head_groups", in->head_groups);
	jadd_u64(o, "max_ranks", in->max_ranks);
	jadd_u64(o, "quarantine_ms", in->quarantine_ms);
	jadd_str(o, "evict", in->evict == HC_EVICT_LRU ? "lru" : "clock");
	jadd_u64(o, "max_tickets", in->max_tickets);
	jadd_u64(o, "ticket_keys", in->ticket_keys);
	jadd_u64(o, "index_slots", in->index_slots);
	jadd_str(o, "host_mode", in->host_mode == HC_HOST_BUFFER_ONLY ? "buffer_only" : "cache");
	jadd_u64(o, "ring_entries", in->sq_entries);
	jadd_u64(o, "completion_entries", in->cq_entries);
	jadd_u64(o, "arg_bytes", in->arg_bytes);
	jadd_u64(o, "npages", in->npages);
	jadd_u64(o, "envelope_bytes", in->envelope_bytes);
	jadd_u64(o, "envelopes_offset", in->envelopes_offset);
	jadd_u64(o, "segment_bytes", in->segment_bytes);
	jadd_bool(o, "huge_pages", in->huge_pages);
	jadd_u64(o, "creator_pid", in->creator_pid);
	jadd_u64(o, "creator_uid", in->creator_uid);
	jadd_u64(o, "created_unix_ns", in->created_unix_ns);
	jadd_str(o, "created", hc_cli_format_time(in->created_unix_ns, when, sizeof(when)));

	a = json_object_new_array();
	for (unsigned i = 0; i < in->ncomp; i++) {
		x = json_object_new_object();
		jadd_str(x, "name", ci[i].name);
		jadd_str(x, "dtype", hc_dtype_name(ci[i].dtype));
		jadd_str(x, "kind", kind_name(ci[i].kind));
		jadd_str(x, "sharding", sharding_name(ci[i].sharding));
		jadd_u64(x, "kv_heads", ci[i].kv_heads);
		jadd_u64(x, "head_bytes", ci[i].head_bytes);
		jadd_u64(x, "bytes_per_layer", ci[i].bytes_per_layer);
		jadd_u64(x, "layers", ci[i].layers);
		jadd_u64(x, "groups", ci[i].groups);
		jadd_u64(x, "offset", ci[i].offset);
		jadd_u64(x, "bytes", ci[i].bytes);
		jadd_u64(x, "group_stride", ci[i].group_stride);
		jadd_u64(x, "layer_stride", ci[i].layer_stride);
		jadd_u64(x, "window_pages", ci[i].window_pages);
		json_object_array_add(a, x);
	}
	json_object_object_add(o, "components", a);

	x = json_object_new_object();
	for (int s = 0; s < 5; s++)
		jadd_u64(x, hc_cli_state_keys[s], counts[s]);
	json_object_object_add(o, "pages", x);

	a = json_object_new_array();
	for (unsigned i = 0; i < nri; i++)
		json_object_array_add(a, rank_json(&ri[i]));
	json_object_object_add(o, "ranks", a);
	json_object_object_add(o, "engines", engines_json(ri, nri));
	return o;
}

static void info_text(const struct hc_pool_info *in, const struct hc_component_info *ci, const uint64_t counts[5],
		      const struct hc_rank_info *ri, unsigned nri, bool readonly)
{
	char hex[65], when[64], b1[32], b2[32];
	int w = 4;
	unsigned live = 0;

	printf("pool         %s\n", in->name);
	printf("path         %s\n", in->path);
	printf("model        %s\n", in->model_id);
	printf("fingerprint  %s\n", hc_cli_hex(in->fingerprint, 32, hex));
	printf("layout       %" PRIu32 ".%" PRIu32 "\n", in->layout_major, in->layout_minor);
	printf("created      %s by pid %" PRIu32 " uid %" PRIu32 "\n",
	       hc_cli_format_time(in->created_unix_ns, when, sizeof(when)), in->creator_pid, in->creator_uid);
	printf("huge pages   %s\n", in->huge_pages ? "yes" : "no");
	printf("geometry     %" PRIu32 " tokens/page, tp %" PRIu32 ", %" PRIu32 " head groups, %" PRIu32
	       " rank slots, quarantine %" PRIu32 " ms\n",
	       in->page_tokens, in->tp_size, in->head_groups, in->max_ranks, in->quarantine_ms);
	printf("cache        evict %s, key index of %" PRIu32 " slots, %" PRIu32 " tickets of up to %" PRIu32 " keys\n",
	       in->evict == HC_EVICT_LRU ? "lru" : "clock", in->index_slots, in->max_tickets, in->ticket_keys);
	printf("host mode    %s; requests: %" PRIu32 " a rank, %" PRIu32 " completions, %s of arguments\n",
	       in->host_mode == HC_HOST_BUFFER_ONLY ? "buffer_only" : "cache", in->sq_entries, in->cq_entries,
	       hc_cli_format_size(in->arg_bytes, b1, sizeof(b1)));
	printf("envelope     %" PRIu64 " bytes (%s), from offset %" PRIu64 "\n", in->envelope_bytes,
	       hc_cli_format_size(in->envelope_bytes, b1, sizeof(b1)), in->envelopes_offset);
	printf("segment      %" PRIu64 " bytes (%s)\n", in->segment_bytes,
	       hc_cli_format_size(in->segment_bytes, b2, sizeof(b2)));
	printf("pages        %" PRIu32 ": free %" PRIu64 ", reserved %" PRIu64 ", ready %" PRIu64
	       ", quarantine %" PRIu64 ", freeing %" PRIu64 "\n",
	       in->npages, counts[HC_PAGE_FREE], counts[HC_PAGE_RESERVED], counts[HC_PAGE_READY],
	       counts[HC_PAGE_QUARANTINE], counts[HC_PAGE_FREEING]);

	for (unsigned i = 0; i < in->ncomp; i++)
		if ((int)strlen(ci[i].name) > w)
			w = (int)strlen(ci[i].name);
	printf("components   %" PRIu32 "\n", in->ncomp);
	printf("  %-*s  %-8s  %-5s  %-10s  %5s  %10s  %6s  %6s  %12s  %12s  %12s  %12s  %6s\n", w, "NAME", "DTYPE",
	       "KIND", "SHARDING", "HEADS", "HEAD_BYTES", "LAYERS", "GROUPS", "OFFSET", "BYTES", "GROUP_STRIDE",
	       "LAYER_STRIDE", "WINDOW");
	for (unsigned i = 0; i < in->ncomp; i++) {
		char heads[16] = "-", hb[16] = "-", win[16] = "all";

		if (ci[i].kind == HC_COMP_KV) {
			snprintf(heads, sizeof(heads), "%" PRIu32, ci[i].kv_heads);
			snprintf(hb, sizeof(hb), "%" PRIu32, ci[i].head_bytes);
		}
		if (ci[i].window_pages)
			snprintf(win, sizeof(win), "%" PRIu32, ci[i].window_pages);
		printf("  %-*s  %-8s  %-5s  %-10s  %5s  %10s  %6" PRIu32 "  %6" PRIu32 "  %12" PRIu64 "  %12" PRIu64
		       "  %12" PRIu64 "  %12" PRIu64 "  %6s\n",
		       w, ci[i].name, hc_dtype_name(ci[i].dtype), kind_name(ci[i].kind),
		       sharding_name(ci[i].sharding), heads, hb, ci[i].layers, ci[i].groups, ci[i].offset,
		       ci[i].bytes, ci[i].group_stride, ci[i].layer_stride, win);
	}

	for (unsigned i = 0; i < nri; i++)
		live += ri[i].live != 0;
	printf("ranks        %u live of %" PRIu32 " slots%s\n", live, in->max_ranks,
	       readonly ? " (read-only: as recorded, not proven)" : "");
	if (!nri)
		return;
	printf("  %4s  %-5s  %8s  %-15s  %6s  %10s  %10s  %8s  %6s  %5s  %9s  %8s  %s\n", "SLOT", "STATE", "PID",
	       "COMM", "EPOCH", "PINS", "LOCKS", "RESERVED", "ENGINE", "TP", "QUOTA", "HELD", "ATTACHED");
	for (unsigned i = 0; i < nri; i++) {
		char eng[16] = "-", tp[32] = "-", quota[16];

		if (ri[i].engine_id >= 0) {
			snprintf(eng, sizeof(eng), "%" PRId32, ri[i].engine_id);
			snprintf(tp, sizeof(tp), "%" PRIu32 "/%" PRIu32, ri[i].tp_rank, ri[i].tp_size);
		}
		printf("  %4" PRIu32 "  %-5s  %8" PRIu32 "  %-15s  %6" PRIu32 "  %10" PRIu64 "  %10" PRIu64 "  %8" PRIu32
		       "  %6s  %5s  %9s  %8" PRIu32 "  %s\n",
		       ri[i].slot, ri[i].live ? "live" : "free", ri[i].pid, ri[i].comm[0] ? ri[i].comm : "-",
		       ri[i].epoch, ri[i].pins, ri[i].locks, ri[i].reserved, eng, tp,
		       quota_text(&ri[i], quota, sizeof(quota)), ri[i].held,
		       hc_cli_format_time(ri[i].attached_unix_ns, when, sizeof(when)));
	}
	engines_text(ri, nri, "  ");
}

static int cmd_info(int argc, char **argv)
{
	static const struct option opts[] = {
		OPTION_DIR, OPTION_JSON,
		{ "no-recover", no_argument, NULL, OPT_NO_RECOVER },
		OPTIONS_END,
	};
	struct hc_component_info ci[HC_MAX_COMPONENTS];
	struct hc_rank_info ri[HC_MAX_RANKS];
	struct hc_service_info sv;
	struct hc_pool_info in;
	struct verb_args va;
	uint64_t counts[5];
	const char *name;
	unsigned nri = 0;
	hc_pool *p = NULL;
	int ret;

	if ((ret = parse_args(argc, argv, opts, info_usage, &va, &name, NULL)) != ARGS_OK)
		return ret;
	/* ADMIN attach runs recovery first, so the counts below are after it. */
	if (attach(name, va.dir, va.no_recover ? HC_ATTACH_READONLY : HC_ATTACH_ADMIN, &p) < 0)
		return failure("%s", lib_error());
	ret = HC_CLI_EXIT_FAIL;
	if (hc_pool_info(p, &in) < 0 || hc_pool_count_states(p, counts) < 0) {
		failure("%s", lib_error());
		goto out;
	}
	for (unsigned i = 0; i < in.ncomp && i < HC_MAX_COMPONENTS; i++) {
		if (hc_pool_component(p, i, &ci[i]) < 0) {
			failure("%s", lib_error());
			goto out;
		}
	}
	for (unsigned s = 0; s < in.max_ranks && s < HC_MAX_RANKS; s++) {
		if (hc_pool_rank(p, s, &ri[nri]) < 0) {
			failure("%s", lib_error());
			goto out;
		}
		/* a free slot that holds nothing is noise */
		if (ri[nri].live || ri[nri].pins || ri[nri].locks || ri[nri].reserved)
			nri++;
	}
	if (hc_service_info(p, &sv) < 0) {
		failure("%s", lib_error());
		goto out;
	}
	if (va.json) {
		struct json_object *o = info_json(&in, ci, counts, ri, nri);

		json_object_object_add(o, "service", service_json(&sv));
		if (print_json(o) == 0)
			ret = HC_CLI_EXIT_OK;
		json_object_put(o);
	} else {
		info_text(&in, ci, counts, ri, nri, va.no_recover);
		service_text(&sv, in.host_mode == HC_HOST_BUFFER_ONLY);
		ret = HC_CLI_EXIT_OK;
	}
out:
	hc_pool_detach(p);
	return ret;
}

/* ---------------------------------------------------------------------- ls */

static const char ls_usage[] =
	"Usage: " PROG " ls [--dir DIR] [--json]\n"
	"\n"
	"List the pools in DIR (default " DEFAULT_DIR "), the files named hicache.NAME,\n"
	"with their live ranks (pid, engine, TP rank, quota, pages held) and engines.\n"
	"Each is attached read-only, so listing never changes a pool; live ranks are\n"
	"the slots marked live, not proven.  A file that is not a usable pool is\n"
	"listed with the reason.  Leftovers of an interrupted create\n"
	"(.hicache.NAME.creating.PID) are listed as incomplete.\n"
	"\n"
	"  --dir DIR    the directory to list\n"
	"  --json       print one JSON object\n";

struct ls_entry {
	char *name;
	char path[4096];
	int incomplete;      /* a .creating. leftover */
	uint32_t creator_pid;
	int err;             /* attach failed: msg holds hc_last_error() */
	char msg[4096 + 256];
	struct hc_pool_info info;
	unsigned live;
	struct hc_rank_info ranks[HC_MAX_RANKS]; /* the live ones: [0, live) */
};

static int ls_cmp(const void *a, const void *b)
{
	const struct ls_entry *x = a, *y = b;
	int r = strcmp(x->name, y->name);

	return r ? r : x->incomplete - y->incomplete;
}

/* ".hicache.NAME.creating.PID" -> NAME and PID; 0 if d_name is not one. */
static int parse_creating(const char *d_name, char **name, uint32_t *pid)
{
	const char *tag = ".creating.", *last = NULL, *q;

	if (strncmp(d_name, ".hicache.", 9) != 0)
		return 0;
	for (q = d_name + 9; (q = strstr(q, tag)); q++)
		last = q;
	if (!last || last == d_name + 9 ||
	    hc_cli_parse_u32("pid", last + strlen(tag), 1, UINT32_MAX, pid) < 0)
		return 0;
	*name = strndup(d_name + 9, (size_t)(last - (d_name + 9)));
	return *name ? 1 : -ENOMEM;
}

static const char *file_kind(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link" : S_ISFIFO(m) ? "a fifo" :
	       S_ISSOCK(m) ? "a socket" : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "not a regular file";
}

static void ls_probe(struct ls_entry *e, const char *dir, int dfd, const char *d_name)
{
	struct stat st;
	hc_pool *p;

	/* Look before attaching: opening a fifo would block the listing forever. */
	if (fstatat(dfd, d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		e->err = 1;
		snprintf(e->msg, sizeof(e->msg), "cannot stat %s: %s", e->path, strerror(errno));
		return;
	}
	if (!S_ISREG(st.st_mode)) {
		e->err = 1;
		snprintf(e->msg, sizeof(e->msg), "%s is not a pool: it is %s", e->path, file_kind(st.st_mode));
		return;
	}
	/* READONLY: no recovery, no writes; a listing must never change a pool */
	if (attach(e->name, dir, HC_ATTACH_READONLY, &p) < 0 || hc_pool_info(p, &e->info) < 0) {
		e->err = 1;
		snprintf(e->msg, sizeof(e->msg), "%s", hc_last_error());
		return;
	}
	for (unsigned s = 0; s < e->info.max_ranks && s < HC_MAX_RANKS; s++)
		if (hc_pool_rank(p, s, &e->ranks[e->live]) == 0 && e->ranks[e->live].live)
			e->live++;
	hc_pool_detach(p);
}

static void ls_text(const struct ls_entry *es, size_t n, const char *dir)
{
	int wn = 4, wm = 5;
	char b1[32], b2[32];

	if (n == 0) {
		printf("no pools in %s\n", dir);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if ((int)strlen(es[i].name) > wn)
			wn = (int)strlen(es[i].name);
		if (!es[i].err && !es[i].incomplete && (int)strlen(es[i].info.model_id) > wm)
			wm = (int)strlen(es[i].info.model_id);
	}
	printf("%-*s  %-*s  %10s  %10s  %10s  %4s  %s\n", wn, "NAME", wm, "MODEL", "PAGES", "ENVELOPE", "SEGMENT",
	       "LIVE", "PATH");
	for (size_t i = 0; i < n; i++) {
		const struct ls_entry *e = &es[i];

		if (e->incomplete)
			printf("%-*s  incomplete (creator pid %" PRIu32 "): %s\n", wn, e->name, e->creator_pid, e->path);
		else if (e->err)
			printf("%-*s  error: %s\n", wn, e->name, e->msg);
		else
			printf("%-*s  %-*s  %10" PRIu32 "  %10s  %10s  %4u  %s\n", wn, e->name, wm, e->info.model_id,
			       e->info.npages, hc_cli_format_size(e->info.envelope_bytes, b1, sizeof(b1)),
			       hc_cli_format_size(e->info.segment_bytes, b2, sizeof(b2)), e->live, e->path);
		if (e->err || e->incomplete)
			continue;
		for (unsigned k = 0; k < e->live; k++) {
			const struct hc_rank_info *ri = &e->ranks[k];
			char quota[16];

			printf("  slot %" PRIu32 ": pid %" PRIu32 " (%s), ", ri->slot, ri->pid, ri->comm[0] ? ri->comm : "-");
			if (ri->engine_id < 0)
				printf("no engine, held %" PRIu32 "\n", ri->held);
			else
				printf("engine %" PRId32 ", tp rank %" PRIu32 " of %" PRIu32 ", quota %s, held %" PRIu32 "\n",
				       ri->engine_id, ri->tp_rank, ri->tp_size, quota_text(ri, quota, sizeof(quota)), ri->held);
		}
		engines_text(e->ranks, e->live, "  ");
	}
}

static struct json_object *ls_json(const struct ls_entry *es, size_t n, const char *dir)
{
	struct json_object *o = json_object_new_object(), *a = json_object_new_array(), *x, *a2;
	char hex[65];

	jadd_str(o, "dir", dir);
	for (size_t i = 0; i < n; i++) {
		const struct ls_entry *e = &es[i];

		x = json_object_new_object();
		jadd_str(x, "name", e->name);
		jadd_str(x, "path", e->path);
		if (e->incomplete) {
			jadd_str(x, "status", "incomplete");
			jadd_u64(x, "creator_pid", e->creator_pid);
		} else if (e->err) {
			jadd_str(x, "status", "error");
			jadd_str(x, "error", e->msg);
		} else {
			jadd_str(x, "status", "ok");
			jadd_str(x, "model_id", e->info.model_id);
			jadd_str(x, "fingerprint", hc_cli_hex(e->info.fingerprint, 32, hex));
			jadd_u64(x, "npages", e->info.npages);
			jadd_u64(x, "envelope_bytes", e->info.envelope_bytes);
			jadd_u64(x, "segment_bytes", e->info.segment_bytes);
			jadd_u64(x, "max_ranks", e->info.max_ranks);
			jadd_u64(x, "live_ranks", e->live);
			a2 = json_object_new_array();
			for (unsigned k = 0; k < e->live; k++)
				json_object_array_add(a2, rank_json(&e->ranks[k]));
			json_object_object_add(x, "ranks", a2);
			json_object_object_add(x, "engines", engines_json(e->ranks, e->live));
		}
		json_object_array_add(a, x);
	}
	json_object_object_add(o, "pools", a);
	return o;
}

static int cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = { OPTION_DIR, OPTION_JSON, OPTIONS_END };
	struct ls_entry *es = NULL, *grown;
	size_t n = 0, cap = 0;
	struct verb_args va;
	const char *dir;
	struct dirent *d;
	DIR *dh;
	int ret;

	if ((ret = parse_args(argc, argv, opts, ls_usage, &va, NULL, NULL)) != ARGS_OK)
		return ret;
	if (optind < argc)
		return usage_error("unexpected argument '%s': ls takes no NAME (use info)", argv[optind]);
	dir = va.dir ? va.dir : DEFAULT_DIR;
	dh = opendir(dir);
	if (!dh)
		return failure("cannot list %s: %s", dir, strerror(errno));

	ret = HC_CLI_EXIT_FAIL;
	while ((errno = 0, d = readdir(dh))) {
		struct ls_entry *e;
		char *cname = NULL;
		uint32_t pid = 0;
		int r = 0;

		if (strncmp(d->d_name, "hicache.", 8) != 0 && (r = parse_creating(d->d_name, &cname, &pid)) == 0)
			continue;
		if (r < 0)
			goto oom;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			grown = realloc(es, cap * sizeof(*es));
			if (!grown) {
				free(cname);
				goto oom;
			}
			es = grown;
		}
		e = &es[n];
		memset(e, 0, sizeof(*e));
		e->name = cname ? cname : strdup(d->d_name + 8);
		if (!e->name)
			goto oom;
		n++;
		snprintf(e->path, sizeof(e->path), "%s/%s", dir, d->d_name);
		if (cname) {
			e->incomplete = 1;
			e->creator_pid = pid;
		} else {
			ls_probe(e, dir, dirfd(dh), d->d_name);
		}
	}
	if (errno) {
		failure("cannot read %s: %s", dir, strerror(errno));
		goto out;
	}
	if (n)
		qsort(es, n, sizeof(*es), ls_cmp);
	if (va.json) {
		struct json_object *o = ls_json(es, n, dir);

		if (print_json(o) == 0)
			ret = HC_CLI_EXIT_OK;
		json_object_put(o);
	} else {
		ls_text(es, n, dir);
		ret = HC_CLI_EXIT_OK;
	}
	goto out;
oom:
	failure("out of memory listing %s", dir);
out:
	for (size_t i = 0; i < n; i++)
		free(es[i].name);
	free(es);
	closedir(dh);
	return ret;
}

/* ----------------------------------------------------------------- destroy */

static const char destroy_usage[] =
	"Usage: " PROG " destroy NAME [--dir DIR] [--force]\n"
	"\n"
	"Remove pool NAME.  Refused while ranks are attached, or when the file does\n"
	"not check out as a pool, unless --force.  Processes that still map it keep\n"
	"their mapping until they exit.\n"
	"\n"
	"  --dir DIR    the pool's directory (default " DEFAULT_DIR ")\n"
	"  --force      remove it even with live ranks or a damaged header\n";

static int cmd_destroy(int argc, char **argv)
{
	static const struct option opts[] = {
		OPTION_DIR,
		{ "force", no_argument, NULL, OPT_FORCE },
		OPTIONS_END,
	};
	struct verb_args va;
	const char *name;
	int ret;

	if ((ret = parse_args(argc, argv, opts, destroy_usage, &va, &name, NULL)) != ARGS_OK)
		return ret;
	if (hc_pool_destroy(name, va.dir, va.force ? HC_DESTROY_FORCE : 0) < 0)
		return failure("%s", lib_error());
	printf("destroyed pool '%s' at %s/hicache.%s\n", name, va.dir ? va.dir : DEFAULT_DIR, name);
	return HC_CLI_EXIT_OK;
}

/* What check and repair print: a violation or a fix a line, or JSON. */
struct check_out {
	struct json_object *lines; /* --json: the violations, else NULL: print them */
};

static void check_report(void *arg, const char *line)
{
	struct check_out *co = arg;

	if (co->lines)
		json_object_array_add(co->lines, json_object_new_string(line));
	else
		printf("%s\n", line);
}

/* ------------------------------------------------------------------ repair */

static const char repair_usage[] =
	"Usage: " PROG " repair NAME [--dir DIR] [--json] [--quiescent]\n"
	"\n"
	"Repair pool NAME and report what was done.  First recovery: rank slots\n"
	"proven dead (their robust mutex was left owner-dead) are cleared, their\n"
	"pins dropped, their reservations quarantined, the pages they allocated\n"
	"without a key freed, and pages whose quarantine ran out freed.  Then what\n"
	"the check finds and recovery cannot undo: page words that make no sense,\n"
	"READY pages that no key finds and no live rank owns, entries that fail\n"
	"their check, a key index that names the wrong pages (rebuilt from the\n"
	"page table), tickets of engines that are gone, stray holds.  Each fix is\n"
	"one line; then the check runs again, and each violation it still finds\n"
	"is a 'cannot repair' line.  Exit status 0 when none is left, 1 when some\n"
	"are.  Safe while ranks run: nothing a live rank holds is freed.\n"
	"\n"
	"  --dir DIR       the pool's directory (default " DEFAULT_DIR ")\n"
	"  --json          print one JSON object\n"
	"  --quiescent     no rank is mid-operation: the check at the end counts\n"
	"                  transient states too (as check --quiescent)\n";

#define REPORT_FIELDS(X)                                                          \
	X(dead_ranks, "rank slots proven dead and cleared")                       \
	X(pins_dropped, "pin counts of dead ranks set to zero")                   \
	X(quarantined, "reservations of dead ranks put in quarantine")            \
	X(released, "quarantined pages whose grace ran out, now free")            \
	X(promoted, "fully committed reservations made ready")                    \
	X(unfreed, "half-done frees of dead ranks put back to ready")             \
	X(bad_words, "page words that made no sense, put in quarantine")          \
	X(reclaimed, "dead ranks' pages allocated without a key, freed")         \
	X(orphaned, "such pages another rank holds, freed when it lets go")

#define REPAIR_FIELDS(X)                                                                   \
	X(bad_words, "page words with an invalid state, owner or aux: quarantined or cleared") \
	X(holds_cleared, "holds left in the columns of free slots, cleared")                \
	X(damaged, "READY pages whose entry fails its check, freed")                      \
	X(lost, "READY pages no key finds and no live rank owns, freed")                  \
	X(duplicates, "keyed pages whose key a live page already has, freed")             \
	X(index_bad, "index entries that named no page of their key, dropped")            \
	X(index_missing, "keyed pages the index did not find, put back")                  \
	X(tickets_ended, "tickets of gone engines, or damaged, ended")                     \
	X(ticket_bits, "ticket holds on pages no ticket names, dropped")                  \
	X(unrepaired, "violations left (the 'cannot repair' lines)")

static int cmd_repair(int argc, char **argv)
{
	static const struct option opts[] = {
		OPTION_DIR, OPTION_JSON,
		{ "quiescent", no_argument, NULL, OPT_QUIESCENT },
		OPTIONS_END,
	};
	struct hc_repair_report rep = { 0 };
	struct hc_recovery_report first = { 0 };
	struct check_out co = { NULL };
	struct hc_pool_info in;
	struct verb_args va;
	const char *name;
	hc_pool *p;
	int ret, n;

	if ((ret = parse_args(argc, argv, opts, repair_usage, &va, &name, NULL)) != ARGS_OK)
		return ret;
	/* Recovery first, attached without a slot: claiming one as a rank
	 * would recover the dead slots it probes before the report could
	 * count them.  Then as a rank (freeing and rebuilding need a slot);
	 * NO_POPULATE: a tool reads the tables, not every page of the pool. */
	if (attach(name, va.dir, HC_ATTACH_ADMIN | HC_ATTACH_NO_RECOVER, &p) < 0)
		return failure("%s", lib_error());
	log_info = true; /* the library names each dead slot it clears */
	n = hc_pool_recover(p, &first);
	hc_pool_detach(p);
	if (n < 0)
		return failure("%s", lib_error());
	if (attach(name, va.dir, HC_ATTACH_NO_RECOVER | HC_ATTACH_NO_POPULATE, &p) < 0)
		return failure("%s", lib_error());
	hc_pool_info(p, &in);
	if (va.json)
		co.lines = json_object_new_array();
	n = hc_pool_repair(p, va.quiescent ? HC_CHECK_QUIESCENT : 0, &rep, check_report, &co);
#define X(f, what) rep.recovery.f += first.f;
	REPORT_FIELDS(X)
#undef X
	/* Print the report even on failure: what was undone stays undone. */
	if (va.json) {
		struct json_object *o = json_object_new_object(), *fix = json_object_new_object();

		jadd_str(o, "name", in.name);
		jadd_str(o, "path", in.path);
		jadd_bool(o, "ok", n == 0);
		/* recovery's fields at the top, as before repair did more */
#define X(f, what) jadd_u64(o, #f, rep.recovery.f);
		REPORT_FIELDS(X)
#undef X
#define X(f, what) jadd_u64(fix, #f, rep.f);
		REPAIR_FIELDS(X)
#undef X
		json_object_object_add(o, "repair", fix);
		json_object_object_add(o, "lines", co.lines);
		if (n < 0)
			jadd_str(o, "error", hc_last_error());
		print_json(o);
		json_object_put(o);
	} else {
		printf("%s pool '%s' at %s\n", n == 0 ? "repaired" : "partly repaired", in.name, in.path);
		printf(" recovery:\n");
#define X(f, what) printf("  %-13s %10" PRIu32 "  %s\n", #f, rep.recovery.f, what);
		REPORT_FIELDS(X)
#undef X
		printf(" repair:\n");
#define X(f, what) printf("  %-13s %10" PRIu32 "  %s\n", #f, rep.f, what);
		REPAIR_FIELDS(X)
#undef X
	}
	ret = HC_CLI_EXIT_OK;
	if (n < 0)
		ret = failure("%s", lib_error());
	else if (n > 0)
		ret = failure("pool '%s': %d violation%s could not be repaired (the 'cannot repair' lines)", in.name, n,
			      n == 1 ? "" : "s");
	hc_pool_detach(p);
	return ret;
}

/* -------------------------------------------------------------------- stat */

static const char stat_usage[] =
	"Usage: " PROG " stat NAME [--dir DIR] [--json | --prometheus]\n"
	"\n"
	"Show pool NAME's gauges (pages by state, keyed, pinned and host-locked\n"
	"pages, pages held by tickets, live ranks, engines, open tickets) and every\n"
	"counter the ranks keep, summed over ranks, with the hit ratio.  The pool is\n"
	"attached read-only: reading the stats never changes it, and live ranks are\n"
	"the slots marked live, not proven (repair proves them).\n"
	"\n"
	"  --dir DIR       the pool's directory (default " DEFAULT_DIR ")\n"
	"  --json          print one JSON object\n"
	"  --prometheus    print the Prometheus text exposition format 0.0.4\n";

/* The gauges of struct hc_stats besides pages[]: X(name, field, help),
 * declared once for every printer, as the library's HC_COUNTERS. */
/* hits / lookup_keys, or -1 before the first lookup. */
static double hit_ratio(const struct hc_stats *st)
{
	uint64_t asked = st->counter[HC_CTR_lookup_keys];

	return asked ? (double)st->counter[HC_CTR_hits] / (double)asked : -1.0;
}

static void stat_line(const char *name, int wn, uint64_t v, int wv, const char *help)
{
	printf("  %-*s  %*" PRIu64 "  %s\n", wn, name, wv, v, help);
}

/* Aligned "name value help" lines: pages by state, gauges, counters. */
static void stat_text(const struct hc_pool_info *in, const struct hc_stats *st, const struct hc_cli_metric *g,
		      const struct hc_cli_metric *c)
{
	char name[32], help[32], val[32];
	int wn = (int)strlen("pages_quarantine"), wv = 5, len;
	double hr = hit_ratio(st);

	for (unsigned i = 0; i < HC_CLI_NGAUGES + HC_CTR__COUNT; i++) {
		const struct hc_cli_metric *m = i < HC_CLI_NGAUGES ? &g[i] : &c[i - HC_CLI_NGAUGES];

		if ((len = (int)strlen(m->name)) > wn)
			wn = len;
		if ((len = snprintf(val, sizeof(val), "%" PRIu64, m->value)) > wv)
			wv = len;
	}
	for (int s = 0; s < 5; s++)
		if ((len = snprintf(val, sizeof(val), "%" PRIu64, st->pages[s])) > wv)
			wv = len;

	printf("pool '%s' at %s: %" PRIu32 " pages\n", in->name, in->path, in->npages);
	for (int s = 0; s < 5; s++) {
		snprintf(name, sizeof(name), "pages_%s", hc_cli_state_keys[s]);
		snprintf(help, sizeof(help), "pages in state %s", hc_page_state_name((enum hc_page_state)s));
		stat_line(name, wn, st->pages[s], wv, help);
	}
	for (unsigned i = 0; i < HC_CLI_NGAUGES + HC_CTR__COUNT; i++) {
		const struct hc_cli_metric *m = i < HC_CLI_NGAUGES ? &g[i] : &c[i - HC_CLI_NGAUGES];

		stat_line(m->name, wn, m->value, wv, m->help);
	}
	if (hr < 0)
		printf("  %-*s  %*s  hits / lookup_keys (no lookups yet)\n", wn, "hit_ratio", wv, "-");
	else
		printf("  %-*s  %*.3f  hits / lookup_keys\n", wn, "hit_ratio", wv, hr);
	printf("service request latency, taken off the ring to answered (us; p50 and p99 are bucket bounds):\n");
	for (unsigned h = 0; h < HC_HIST__COUNT; h++) {
		const struct hc_hist *x = &st->hist[h];
		uint64_t p50 = hc_cli_hist_quantile_us(x, 0.5), p99 = hc_cli_hist_quantile_us(x, 0.99);
		char b50[24], b99[24];
		snprintf(b50, sizeof(b50), p50 == UINT64_MAX ? ">%" PRIu64 : "<%" PRIu64,
			 p50 == UINT64_MAX ? hc_hist_bound_us(HC_HIST_BUCKETS - 2) : p50);
		snprintf(b99, sizeof(b99), p99 == UINT64_MAX ? ">%" PRIu64 : "<%" PRIu64,
			 p99 == UINT64_MAX ? hc_hist_bound_us(HC_HIST_BUCKETS - 2) : p99);
		printf("  %-10s %8" PRIu64 " requests, mean %8.1f, p50 %9s, p99 %9s\n", hc_hist_name(h), x->count,
		       x->count ? (double)x->sum_us / (double)x->count : 0.0, x->count ? b50 : "-", x->count ? b99 : "-");
	}
	printf("tokens per request by tier (l2: per lookup, its hit; l3: per prefetch, read from L3):\n");
	for (unsigned t = 0; t < HC_TIER__COUNT; t++) {
		const struct hc_hist *x = &st->tokens[t];
		printf("  %-10s %8" PRIu64 " requests, %12" PRIu64 " tokens, mean %10.1f\n", hc_tier_name(t), x->count, x->sum,
		       x->count ? (double)x->sum / (double)x->count : 0.0);
	}
}

/* {count, SUM, buckets: [{LT, count}...]} of one histogram. */
static struct json_object *hist_json(const struct hc_hist *h, const char *sum, const char *lt)
{
	struct json_object *k = json_object_new_object(), *b = json_object_new_array();

	jadd_u64(k, "count", h->count);
	jadd_u64(k, sum, h->sum);
	for (unsigned i = 0; i < HC_HIST_BUCKETS; i++) {
		struct json_object *e = json_object_new_object();
		uint64_t bound = hc_hist_bound_us(i);
		json_object_object_add(e, lt, bound == UINT64_MAX ? NULL : json_object_new_int64((int64_t)bound));
		jadd_u64(e, "count", h->bucket[i]);
		json_object_array_add(b, e);
	}
	json_object_object_add(k, "buckets", b);
	return k;
}

static struct json_object *stat_json(const struct hc_pool_info *in, const struct hc_stats *st,
				     const struct hc_cli_metric *g, const struct hc_cli_metric *c)
{
	struct json_object *o = json_object_new_object(), *x = json_object_new_object();
	double hr = hit_ratio(st);

	jadd_str(o, "name", in->name);
	jadd_str(o, "path", in->path);
	jadd_u64(o, "npages", in->npages);
	for (int s = 0; s < 5; s++)
		jadd_u64(x, hc_cli_state_keys[s], st->pages[s]);
	json_object_object_add(o, "pages", x);
	for (unsigned i = 0; i < HC_CLI_NGAUGES; i++)
		jadd_u64(o, g[i].name, g[i].value);
	x = json_object_new_object();
	for (unsigned i = 0; i < HC_CTR__COUNT; i++)
		jadd_u64(x, c[i].name, c[i].value);
	json_object_object_add(o, "counters", x);
	json_object_object_add(o, "hit_ratio", hr < 0 ? NULL : json_object_new_double(hr));
	x = json_object_new_object();
	for (unsigned h = 0; h < HC_HIST__COUNT; h++)
		json_object_object_add(x, hc_hist_name(h), hist_json(&st->hist[h], "sum_us", "lt_us"));
	json_object_object_add(o, "latency", x);
	x = json_object_new_object();
	for (unsigned t = 0; t < HC_TIER__COUNT; t++)
		json_object_object_add(x, hc_tier_name(t), hist_json(&st->tokens[t], "sum", "lt"));
	json_object_object_add(o, "tokens", x);
	return o;
}

static int cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = {
		OPTION_DIR, OPTION_JSON,
		{ "prometheus", no_argument, NULL, OPT_PROMETHEUS },
		OPTIONS_END,
	};
	struct hc_cli_metric g[HC_CLI_NGAUGES], ctr[HC_CTR__COUNT];
	struct hc_pool_info in;
	struct verb_args va;
	struct hc_stats st;
	const char *name;
	hc_pool *p;
	int ret;

	if ((ret = parse_args(argc, argv, opts, stat_usage, &va, &name, NULL)) != ARGS_OK)
		return ret;
	if (va.json && va.prometheus)
		return usage_error("both --json and --prometheus given: choose one format");
	/* READONLY: a scrape must never change the pool (no recovery at attach) */
	if (attach(name, va.dir, HC_ATTACH_READONLY, &p) < 0)
		return failure("%s", lib_error());
	ret = HC_CLI_EXIT_FAIL;
	if (hc_pool_info(p, &in) < 0 || hc_pool_stats(p, &st) < 0) {
		failure("%s", lib_error());
		goto out;
	}
	hc_cli_metrics(&st, g, ctr);
	if (va.json) {
		struct json_object *o = stat_json(&in, &st, g, ctr);

		if (print_json(o) == 0)
			ret = HC_CLI_EXIT_OK;
		json_object_put(o);
		goto out;
	}
	if (va.prometheus)
		hc_cli_prometheus(stdout, &in, &st);
	else
		stat_text(&in, &st, g, ctr);
	ret = HC_CLI_EXIT_OK;
out:
	hc_pool_detach(p);
	return ret;
}

/* ------------------------------------------------------------------- check */

static const char check_usage[] =
	"Usage: " PROG " check NAME [--dir DIR] [--json] [--quiescent]\n"
	"\n"
	"Check every invariant that ties pool NAME's page table, holds, key index,\n"
	"tickets and rank table together; print one line per violation and a\n"
	"summary.  Exit status 0 when none is found, 1 when some are (or the check\n"
	"could not run).  Proving rank liveness recovers dead ranks on the way, as\n"
	"any attach does, so it needs write access to the pool.\n"
	"\n"
	"  --dir DIR       the pool's directory (default " DEFAULT_DIR ")\n"
	"  --json          print one JSON object\n"
	"  --quiescent     no rank is mid-operation: pages being freed, tickets\n"
	"                  being built and other transient states count as\n"
	"                  violations too\n";

static int cmd_check(int argc, char **argv)
{
	static const struct option opts[] = {
		OPTION_DIR, OPTION_JSON,
		{ "quiescent", no_argument, NULL, OPT_QUIESCENT },
		OPTIONS_END,
	};
	struct check_out co = { NULL };
	struct hc_pool_info in;
	struct verb_args va;
	const char *name;
	unsigned flags;
	hc_pool *p;
	int ret, n;

	if ((ret = parse_args(argc, argv, opts, check_usage, &va, &name, NULL)) != ARGS_OK)
		return ret;
	flags = va.quiescent ? HC_CHECK_QUIESCENT : 0;
	/* NO_RECOVER: look at the pool as the ranks left it, not as recovery
	 * would tidy it; the check's own liveness probes still recover dead ranks */
	if (attach(name, va.dir, HC_ATTACH_ADMIN | HC_ATTACH_NO_RECOVER, &p) < 0)
		return failure("%s", lib_error());
	hc_pool_info(p, &in);
	if (va.json)
		co.lines = json_object_new_array();
	n = hc_pool_check(p, flags, check_report, &co);
	if (n < 0) {
		ret = failure("cannot check pool '%s': %s", in.name, lib_error());
		json_object_put(co.lines);
		goto out;
	}
	if (va.json) {
		struct json_object *o = json_object_new_object();

		jadd_str(o, "name", in.name);
		jadd_str(o, "path", in.path);
		jadd_bool(o, "quiescent", flags & HC_CHECK_QUIESCENT);
		jadd_bool(o, "ok", n == 0);
		jadd_u64(o, "count", (uint64_t)n);
		json_object_object_add(o, "violations", co.lines);
		print_json(o);
		json_object_put(o);
	} else if (n == 0) {
		printf("pool '%s': ok, no violations (%s check)\n", in.name, flags ? "quiescent" : "live");
	} else {
		printf("pool '%s': %d violation%s (%s check)\n", in.name, n, n == 1 ? "" : "s",
		       flags ? "quiescent" : "live");
	}
	ret = n ? HC_CLI_EXIT_FAIL : HC_CLI_EXIT_OK;
out:
	hc_pool_detach(p);
	return ret;
}

/* -------------------------------------------------------------------- keys */

static const char keys_usage[] =
	"Usage: " PROG " keys NAME [PREFIX] [--dir DIR] [--limit N] [--json]\n"
	"\n"
	"List the keyed pages of pool NAME, sorted by key: key, page id, state,\n"
	"chain depth, pins, host locks, tickets holding it and last-use stamp.\n"
	"PREFIX (hex digits, either case) keeps only the keys that start with it.\n"
	"The pool is attached read-only, and each page is read on its own, so the\n"
	"list is not one atomic snapshot of a busy pool.\n"
	"\n"
	"  --dir DIR       the pool's directory (default " DEFAULT_DIR ")\n"
	"  --limit N       show at most the first N matching keys\n"
	"  --json          print one JSON object\n";

static int keys_cmp(const void *a, const void *b)
{
	const struct hc_page_info *x = a, *y = b;
	int r = memcmp(x->key, y->key, HC_KEY_BYTES);

	return r ? r : (x->id > y->id) - (x->id < y->id);
}

static struct json_object *keys_json(const struct hc_pool_info *in, const char *prefix,
				     const struct hc_page_info *pi, uint32_t shown, uint32_t matching)
{
	struct json_object *o = json_object_new_object(), *a = json_object_new_array(), *x;
	char hex[2 * HC_KEY_BYTES + 1];

	jadd_str(o, "name", in->name);
	jadd_str(o, "path", in->path);
	jadd_str(o, "prefix", prefix);
	jadd_u64(o, "matching", matching);
	jadd_u64(o, "shown", shown);
	for (uint32_t i = 0; i < shown; i++) {
		x = json_object_new_object();
		jadd_str(x, "key", hc_cli_hex(pi[i].key, HC_KEY_BYTES, hex));
		jadd_u64(x, "page", pi[i].id);
		jadd_u64(x, "gen", pi[i].gen);
		jadd_str(x, "state", hc_page_state_name(pi[i].state));
		jadd_u64(x, "depth", pi[i].depth);
		jadd_u64(x, "pins", pi[i].pins);
		jadd_u64(x, "locks", pi[i].locks);
		jadd_u64(x, "tickets", pi[i].tickets);
		jadd_u64(x, "stamp", pi[i].stamp);
		jadd_u64(x, "presence", pi[i].presence);
		json_object_array_add(a, x);
	}
	json_object_object_add(o, "keys", a);
	return o;
}

static void keys_text(const struct hc_page_info *pi, uint32_t shown, uint32_t matching, const char *prefix)
{
	char hex[2 * HC_KEY_BYTES + 1];

	if (shown)
		printf("%-64s  %8s  %-10s  %5s  %5s  %5s  %7s  %s\n", "KEY", "PAGE", "STATE", "DEPTH", "PINS", "LOCKS",
		       "TICKETS", "STAMP");
	for (uint32_t i = 0; i < shown; i++)
		printf("%s  %8" PRIu32 "  %-10s  %5" PRIu32 "  %5" PRIu32 "  %5" PRIu32 "  %7" PRIu32 "  %" PRIu64 "\n",
		       hc_cli_hex(pi[i].key, HC_KEY_BYTES, hex), pi[i].id, hc_page_state_name(pi[i].state),
		       pi[i].depth, pi[i].pins, pi[i].locks, pi[i].tickets, pi[i].stamp);
	printf("%" PRIu32 " shown of %" PRIu32 " matching key%s%s%s%s\n", shown, matching, matching == 1 ? "" : "s",
	       *prefix ? " (prefix " : "", prefix, *prefix ? ")" : "");
}

static int cmd_keys(int argc, char **argv)
{
	static const struct option opts[] = {
		OPTION_DIR, OPTION_JSON,
		{ "limit", required_argument, NULL, OPT_LIMIT },
		OPTIONS_END,
	};
	char prefix[2 * HC_KEY_BYTES + 1] = "", hex[2 * HC_KEY_BYTES + 1];
	const char *name, *pfx = NULL;
	struct hc_page_info *pi = NULL;
	struct hc_pool_info in;
	struct verb_args va;
	uint32_t limit, matching = 0;
	size_t plen;
	hc_pool *p;
	int ret;

	if ((ret = parse_args(argc, argv, opts, keys_usage, &va, &name, &pfx)) != ARGS_OK)
		return ret;
	if (pfx && hc_cli_parse_hex_prefix("PREFIX", pfx, 2 * HC_KEY_BYTES, prefix) < 0)
		return usage_error("%s", hc_cli_error());
	plen = strlen(prefix);
	if (attach(name, va.dir, HC_ATTACH_READONLY, &p) < 0)
		return failure("%s", lib_error());
	ret = HC_CLI_EXIT_FAIL;
	hc_pool_info(p, &in);
	pi = calloc(in.npages ? in.npages : 1, sizeof(*pi));
	if (!pi) {
		failure("out of memory for the %" PRIu32 " pages of pool '%s'", in.npages, in.name);
		goto out;
	}
	for (uint32_t id = 0; id < in.npages; id++) {
		if (hc_page_info(p, id, &pi[matching]) < 0) {
			failure("%s", lib_error());
			goto out;
		}
		if (pi[matching].keyed && !strncmp(hc_cli_hex(pi[matching].key, HC_KEY_BYTES, hex), prefix, plen))
			matching++;
	}
	qsort(pi, matching, sizeof(*pi), keys_cmp);
	limit = va.limit < matching ? va.limit : matching;
	if (va.json) {
		struct json_object *o = keys_json(&in, prefix, pi, limit, matching);

		if (print_json(o) == 0)
			ret = HC_CLI_EXIT_OK;
		json_object_put(o);
		goto out;
	}
	keys_text(pi, limit, matching, prefix);
	ret = HC_CLI_EXIT_OK;
out:
	free(pi);
	hc_pool_detach(p);
	return ret;
}

/* ------------------------------------------------------------- evict, clear */

static const char evict_usage[] =
	"Usage: " PROG " evict NAME (--key HEX64 | --count N) [--dir DIR]\n"
	"\n"
	"Evict from pool NAME the page of one key, or up to N pages chosen by the\n"
	"pool's eviction policy.  Only keyed READY pages that no rank pins or\n"
	"host-locks and no ticket holds are evicted.  The tool takes a rank slot\n"
	"while it runs, so the pool needs a free one.\n"
	"\n"
	"  --key HEX64     the key, 64 hex digits (as 'keys' lists them); exit\n"
	"                  status 1 if no page has it\n"
	"  --count N       evict up to N pages by policy and print how many went\n"
	"  --dir DIR       the pool's directory (default " DEFAULT_DIR ")\n";

static const char clear_usage[] =
	"Usage: " PROG " clear NAME [--dir DIR]\n"
	"\n"
	"Free every READY page of pool NAME and print how many.  Refused, with what\n"
	"is held, while any rank pins, host-locks or reserves a page or a ticket\n"
	"holds one.  Pages a rank allocated without a key and uses without a pin\n"
	"are freed too: clear a pool only while its engines are idle.  The tool\n"
	"takes a rank slot while it runs, so the pool needs a free one.\n"
	"\n"
	"  --dir DIR       the pool's directory (default " DEFAULT_DIR ")\n";

/* Attach as a rank: eviction and clearing retire pages, which takes a slot.
 * NO_POPULATE: the tool never touches an envelope. */
static int attach_rank(const char *name, const char *dir, hc_pool **p)
{
	if (attach(name, dir, HC_ATTACH_NO_POPULATE, p) < 0)
		return failure("%s", lib_error());
	return 0;
}

static int cmd_evict(int argc, char **argv)
{
	static const struct option opts[] = {
		OPTION_DIR,
		{ "key", required_argument, NULL, OPT_KEY },
		{ "count", required_argument, NULL, OPT_COUNT },
		OPTIONS_END,
	};
	char hex[2 * HC_KEY_BYTES + 1];
	struct hc_pool_info in;
	struct verb_args va;
	const char *name;
	hc_pool *p;
	int ret, n;

	if ((ret = parse_args(argc, argv, opts, evict_usage, &va, &name, NULL)) != ARGS_OK)
		return ret;
	if (!va.key == !va.count)
		return usage_error("give exactly one of --key HEX64 and --count N");
	if ((ret = attach_rank(name, va.dir, &p)) != 0)
		return ret;
	hc_pool_info(p, &in);
	if (va.key) {
		n = hc_evict_key(p, va.keyb);
		hc_cli_hex(va.keyb, HC_KEY_BYTES, hex);
		if (n < 0)
			ret = failure("%s", lib_error());
		else if (n == 0)
			ret = failure("no page of pool '%s' has key %s: list the keys with '" PROG " keys %s%s%s'",
				      in.name, hex, in.name, va.dir ? " --dir " : "", va.dir ? va.dir : "");
		else
			printf("evicted key %s from pool '%s'\n", hex, in.name);
	} else {
		/* more than every page asks for nothing more, and an LRU pool
		 * would first try to allocate room for that many candidates */
		n = hc_evict(p, va.count < in.npages ? va.count : in.npages);
		if (n < 0)
			ret = failure("%s", lib_error());
		else
			printf("evicted %d of %" PRIu32 " page%s asked from pool '%s'%s\n", n, va.count, va.count == 1 ? "" : "s",
			       in.name, (uint32_t)n < va.count ? ": no other keyed READY page is free of holds" : "");
	}
	hc_pool_detach(p);
	return ret;
}

static int cmd_clear(int argc, char **argv)
{
	static const struct option opts[] = { OPTION_DIR, OPTIONS_END };
	struct hc_pool_info in;
	struct verb_args va;
	const char *name;
	hc_pool *p;
	int ret, n;

	if ((ret = parse_args(argc, argv, opts, clear_usage, &va, &name, NULL)) != ARGS_OK)
		return ret;
	if ((ret = attach_rank(name, va.dir, &p)) != 0)
		return ret;
	hc_pool_info(p, &in);
	n = hc_pool_clear(p);
	if (n < 0)
		ret = failure("%s", lib_error());
	else
		printf("cleared pool '%s': %d page%s freed\n", in.name, n, n == 1 ? "" : "s");
	hc_pool_detach(p);
	return ret;
}

static const char top_usage[] =
	"Usage: " PROG " top NAME [--dir DIR] [--interval MS] [--count N]\n"
	"\n"
	"Show pool NAME's pages by state, holds and counters live, with each\n"
	"counter's rate per second over the last interval; counters that have\n"
	"not moved since the start are left out.  On a terminal the screen is\n"
	"redrawn; otherwise each sample is printed after the last.  Reads the\n"
	"pool read-only, as stat does.  Ctrl-C, or q and Enter, stops it.\n"
	"\n"
	"  --dir DIR       the pool's directory (default " DEFAULT_DIR ")\n"
	"  --interval MS   between samples, 100..3600000 (default 1000)\n"
	"  --count N       stop after N samples (default: until interrupted)\n";

static volatile sig_atomic_t top_stop;

static void top_signal(int sig)
{
	(void)sig;
	top_stop = 1;
}

/* One screen: pages by state, gauges, and the counters that moved. */
/* Counter c's rate between two samples secs apart. */
static double rate(const struct hc_stats *st, const struct hc_stats *prev, unsigned c, double secs)
{
	return secs > 0 ? (double)(st->counter[c] - prev->counter[c]) / secs : 0.0;
}

static void top_screen(const struct hc_pool_info *in, const struct hc_stats *st, const struct hc_stats *prev,
		       const struct hc_stats *first, double secs, int tty)
{
	struct hc_cli_metric g[HC_CLI_NGAUGES], c[HC_CTR__COUNT];
	char when[32];
	time_t now = time(NULL);

	hc_cli_metrics(st, g, c);
	strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
	if (tty)
		fputs("\033[H\033[2J", stdout);
	printf("hicache-pool top: pool '%s', %" PRIu32 " pages, %s (every %.1f s)\n", in->name, in->npages, when, secs);
	printf("pages:");
	for (int s = 0; s < 5; s++)
		printf("  %s %" PRIu64 " (%.0f%%)", hc_cli_state_keys[s], st->pages[s],
		       in->npages ? 100.0 * (double)st->pages[s] / in->npages : 0.0);
	printf("\n");
	for (unsigned i = 0; i < HC_CLI_NGAUGES; i++)
		printf("%s%s %" PRIu64, i % 5 ? "  " : (i ? "\n" : ""), g[i].name, g[i].value);
	printf("\nL3 bandwidth: backup %.1f MB/s, prefetch %.1f MB/s; tokens/s: %.0f from L2 hits, %.0f from L3\n",
	       rate(st, prev, HC_CTR_l3_backup_bytes, secs) / 1e6, rate(st, prev, HC_CTR_l3_prefetch_bytes, secs) / 1e6,
	       secs > 0 ? (double)(st->tokens[HC_TIER_l2].sum - prev->tokens[HC_TIER_l2].sum) / secs : 0.0,
	       secs > 0 ? (double)(st->tokens[HC_TIER_l3].sum - prev->tokens[HC_TIER_l3].sum) / secs : 0.0);
	printf("\n  %-24s %16s %14s\n", "counter", "total", "per second");
	for (unsigned i = 0; i < HC_CTR__COUNT; i++) {
		if (st->counter[i] == first->counter[i] && !st->counter[i])
			continue;
		printf("  %-24s %16" PRIu64 " %14.1f\n", c[i].name, st->counter[i], rate(st, prev, i, secs));
	}
	fflush(stdout);
}

static int cmd_top(int argc, char **argv)
{
	static const struct option opts[] = {
		OPTION_DIR,
		{ "interval", required_argument, NULL, OPT_INTERVAL },
		{ "count", required_argument, NULL, OPT_COUNT },
		OPTIONS_END,
	};
	struct hc_stats first, prev, st;
	struct hc_pool_info in;
	struct verb_args va;
	const char *name;
	int ret, tty = isatty(1);
	hc_pool *p;

	if ((ret = parse_args(argc, argv, opts, top_usage, &va, &name, NULL)) != ARGS_OK)
		return ret;
	if (!va.interval_ms)
		va.interval_ms = 1000;
	ret = HC_CLI_EXIT_OK;
	if (attach(name, va.dir, HC_ATTACH_READONLY, &p) < 0)
		return failure("%s", lib_error());
	signal(SIGINT, top_signal);
	signal(SIGTERM, top_signal);
	if (hc_pool_info(p, &in) < 0 || hc_pool_stats(p, &first) < 0) {
		ret = failure("%s", lib_error());
		goto out;
	}
	prev = first;
	for (uint32_t n = 0; !top_stop && (!va.count || n < va.count); n++) {
		struct pollfd pf = { .fd = 0, .events = POLLIN };
		char ch;
		/* a key press (q) on a terminal stops it; otherwise just the interval */
		if (poll(&pf, tty && isatty(0) ? 1 : 0, (int)va.interval_ms) > 0 && read(0, &ch, 1) == 1 && ch == 'q')
			break;
		if (hc_pool_stats(p, &st) < 0) {
			ret = failure("%s", lib_error());
			goto out;
		}
		top_screen(&in, &st, &prev, &first, va.interval_ms / 1000.0, tty);
		if (!tty)
			printf("\n");
		prev = st;
	}
out:
	hc_pool_detach(p);
	return ret;
}

static const char backend_usage[] =
	"Usage: " PROG " backend attach NAME SPEC [--dir DIR] [--timeout-ms MS]\n"
	"       " PROG " backend detach NAME [--dir DIR] [--timeout-ms MS]\n"
	"\n"
	"Attach an L3 backend to the service of pool NAME (hicached), or detach the\n"
	"one it has, while it runs.  SPEC is NAME[:KEY=VALUE,...] as hicached's\n"
	"--backend takes it (hicache-backend(7)).  Both are refused while transfers\n"
	"are in flight; attach is refused while a backend is attached.  While none\n"
	"is, the ranks' L3 requests fail with ENODEV.  The tool takes a rank slot\n"
	"while it runs, so the pool needs a free one.\n"
	"\n"
	"  --dir DIR          the pool's directory (default " DEFAULT_DIR ")\n"
	"  --timeout-ms MS    wait this long for the service (default 30000)\n";

static int cmd_backend(int argc, char **argv)
{
	static const struct option opts[] = {
		OPTION_DIR,
		{ "timeout-ms", required_argument, NULL, OPT_COUNT },
		OPTIONS_END,
	};
	struct verb_args va;
	const char *name, *spec = NULL, *sub = argc > 1 ? argv[1] : "";
	int attach_, ret, r;
	hc_req *rq;
	hc_pool *p;

	if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
		fputs(backend_usage, stdout);
		return HC_CLI_EXIT_OK;
	}
	if (strcmp(sub, "attach") && strcmp(sub, "detach"))
		return usage_error("%s%s%s: give attach or detach; see '" PROG " backend --help'",
				   *sub ? "unknown action '" : "missing action", sub, *sub ? "'" : "");
	attach_ = !strcmp(sub, "attach");
	verb = attach_ ? "backend attach" : "backend detach";
	if ((ret = parse_args(argc - 1, argv + 1, opts, backend_usage, &va, &name, attach_ ? &spec : NULL)) != ARGS_OK)
		return ret;
	if (attach_ && (!spec || !*spec))
		return usage_error("missing SPEC: the backend to attach, e.g. file:dir=/var/cache/hicache");
	if ((ret = attach_rank(name, va.dir, &p)) != 0)
		return ret;
	r = hc_req_backend(p, attach_ ? spec : NULL, &rq);
	if (r == 0) {
		r = hc_req_wait(rq, va.count ? (int)va.count : 30000);
		hc_req_free(rq);
	}
	if (r < 0)
		ret = failure("pool '%s': %s", name, lib_error());
	else if (attach_)
		printf("pool '%s': backend %s attached\n", name, spec);
	else
		printf("pool '%s': backend detached\n", name);
	hc_pool_detach(p);
	return ret;
}

/* -------------------------------------------------------------------- main */

static const char main_usage[] =
	"Usage: " PROG " VERB [OPTIONS]\n"
	"       " PROG " --help | --version\n"
	"\n"
	"Administer hicache shared-memory KV page pools.\n"
	"\n"
	"Verbs:\n"
	"  create NAME ...   create a pool\n"
	"  info NAME         show a pool's geometry, page states and ranks\n"
	"  ls                list the pools in a directory, their ranks and engines\n"
	"  stat NAME         show a pool's counters and gauges (text, JSON, Prometheus)\n"
	"  top NAME          show them live, with rates\n"
	"  check NAME        check a pool's invariants; exit 1 on a violation\n"
	"  keys NAME [PFX]   list the keyed pages, by key\n"
	"  evict NAME        evict one key, or N pages by policy\n"
	"  clear NAME        free every READY page of an idle pool\n"
	"  destroy NAME      remove a pool\n"
	"  repair NAME       undo what dead ranks held, fix what check finds\n"
	"  backend attach|detach NAME [SPEC]   change the L3 backend of a running service\n"
	"  help [VERB]       show the help of a verb\n"
	"\n"
	"Run '" PROG " VERB --help' for the options of a verb.  Exit status: 0 on\n"
	"success, 1 when the operation failed (or check found a violation, or evict\n"
	"found no such key), 2 when the command line is wrong.\n";

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *usage;
} verbs[] = {
	{ "create", cmd_create, create_usage },
	{ "info", cmd_info, info_usage },
	{ "ls", cmd_ls, ls_usage },
	{ "stat", cmd_stat, stat_usage },
	{ "top", cmd_top, top_usage },
	{ "check", cmd_check, check_usage },
	{ "keys", cmd_keys, keys_usage },
	{ "evict", cmd_evict, evict_usage },
	{ "clear", cmd_clear, clear_usage },
	{ "destroy", cmd_destroy, destroy_usage },
	{ "repair", cmd_repair, repair_usage },
	{ "backend", cmd_backend, backend_usage },
};

#define NVERBS (sizeof(verbs) / sizeof(verbs[0]))

/* "create, info, ..., repair", from the table, so a new verb shows up here. */
static const char *verb_list(void)
{
	static char buf[256];
	size_t off = 0;

	for (unsigned i = 0; i < NVERBS && off < sizeof(buf); i++)
		off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%s", i ? ", " : "", verbs[i].name);
	return buf;
}

static int find_verb(const char *name)
{
	for (unsigned i = 0; i < NVERBS; i++)
		if (!strcmp(verbs[i].name, name))
			return (int)i;
	return -1;
}

int main(int argc, char **argv)
{
	int v, ret;

	hc_set_log(tool_log, NULL);
	opterr = 0; /* every message goes through say() */
	if (argc < 2)
		return usage_error("missing verb: use %s or help (" PROG " --help)", verb_list());
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(main_usage, stdout);
		return HC_CLI_EXIT_OK;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf(PROG " (hicache) %s\n", hc_version());
		return HC_CLI_EXIT_OK;
	}
	if (!strcmp(argv[1], "help")) {
		if (argc == 2) {
			fputs(main_usage, stdout);
			return HC_CLI_EXIT_OK;
		}
		verb = "help";
		if (argc > 3)
			return usage_error("unexpected argument '%s': give one VERB", argv[3]);
		v = find_verb(argv[2]);
		if (v < 0)
			return usage_error("unknown verb '%s': use %s", argv[2], verb_list());
		fputs(verbs[v].usage, stdout);
		return HC_CLI_EXIT_OK;
	}
	if (argv[1][0] == '-')
		return usage_error("unknown option '%s' before the verb; see '" PROG " --help'", argv[1]);
	v = find_verb(argv[1]);
	if (v < 0)
		return usage_error("unknown verb '%s': use %s or help", argv[1], verb_list());
	verb = verbs[v].name;
	/* the verb is argv[0] of its own command line */
	ret = verbs[v].fn(argc - 1, argv + 1);
	/* a full disk or a closed pipe must not pass for a clean listing */
	if (fflush(stdout) != 0 || ferror(stdout))
		return failure("cannot write the output: %s", strerror(errno));
	return ret;
}
