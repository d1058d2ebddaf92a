/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hicache-pool - create, inspect, list, repair and destroy hicache pools.
 *
 * Uses only libhicache's public API.  Exit status: 0 on success, 1 when the
 * operation failed, 2 when the command line is wrong.  Every failure is one
 * line on stderr: "hicache-pool: VERB: what went wrong and what to do".
 *
 * main.c reads the verb and runs it; each verb is a file of its own (pool.h).
 * What they share is here: the error line, the options and operands, JSON
 * output and attaching.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pool.h"

#ifndef JSON_C_TO_STRING_NOSLASHESCAPE
#define JSON_C_TO_STRING_NOSLASHESCAPE 0
#endif

const char *hcp_verb = NULL;
bool hcp_log_info;

int hcp_say(int code, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, HCP_PROG ": ");
	if (hcp_verb)
		fprintf(stderr, "%s: ", hcp_verb);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

/* The library's last error, less a leading "VERB: " that hcp_say() adds too
 * ("hicache-pool: clear: clear: pool ..." reads like a stutter). */
const char *hcp_lib_error(void)
{
	const char *e = hc_last_error();
	size_t n = hcp_verb ? strlen(hcp_verb) : 0;

	return n && !strncmp(e, hcp_verb, n) && !strncmp(e + n, ": ", 2) ? e + n + 2 : e;
}

static void tool_log(int level, const char *msg, void *arg)
{
	(void)arg;
	if (level > HC_LOG_WARN && !hcp_log_info)
		return;
	fprintf(stderr, HCP_PROG ": %s%s%s%s\n", hcp_verb ? hcp_verb : "", hcp_verb ? ": " : "",
		level <= HC_LOG_ERR    ? "error: "
		: level <= HC_LOG_WARN ? "warning: "
				       : "",
		msg);
}

int hcp_bad_option(int c, char **argv)
{
	const char *opt = argv[optind - 1];

	if (c == ':')
		return hcp_usage_error("option '%s' needs a value; see '" HCP_PROG " %s --help'", opt, hcp_verb);
	if (optopt >= 256) /* glibc: a long option without arguments got "=value" */
		return hcp_usage_error("option '%s' takes no value", opt);
	if (optopt)
		return hcp_usage_error("unknown option '-%c'; see '" HCP_PROG " %s --help'", optopt, hcp_verb);
	return hcp_usage_error("unknown or ambiguous option '%s'; see '" HCP_PROG " %s --help'", opt, hcp_verb);
}

/* The NAME operand of a verb, checked as the library would, and one more
 * optional operand where 'extra' is given (else NULL). */
static int take_operands(int argc, char **argv, const char **name, const char **extra)
{
	if (optind >= argc)
		return hcp_usage_error("missing pool NAME; see '" HCP_PROG " %s --help'", hcp_verb);
	if (optind + 1 + (extra != NULL) < argc)
		return hcp_usage_error("unexpected argument '%s': give one pool NAME%s",
				       argv[optind + 1 + (extra != NULL)],
				       extra ? " and at most one more operand" : "");
	if (hc_pool_name_valid(argv[optind]) < 0)
		return hcp_usage_error("%s", hc_last_error());
	*name = argv[optind];
	if (extra)
		*extra = optind + 1 < argc ? argv[optind + 1] : NULL;
	return 0;
}

int hcp_take_name(int argc, char **argv, const char **name)
{
	return take_operands(argc, argv, name, NULL);
}

/* The verb's --socket (hcp_parse_args), for hcp_attach: one pool a run. */
static const char *hcp_socket;

static int check_dir(const char *dir)
{
	if (dir && dir[0] != '/')
		return hcp_usage_error("--dir '%s' must be an absolute path", dir);
	return 0;
}

int hcp_parse_args(int argc, char **argv, const struct option *opts, const char *usage, struct hcp_args *va,
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
		case HCP_OPT_DIR:
			va->dir = optarg;
			break;
		case HCP_OPT_SOCKET:
			va->socket = optarg;
			break;
		case HCP_OPT_JSON:
			va->json = true;
			break;
		case HCP_OPT_PROMETHEUS:
			va->prometheus = true;
			break;
		case HCP_OPT_QUIESCENT:
			va->quiescent = true;
			break;
		case HCP_OPT_NO_RECOVER:
			va->no_recover = true;
			break;
		case HCP_OPT_FORCE:
			va->force = true;
			break;
		case HCP_OPT_LIMIT:
			ret = hc_cli_parse_u32("--limit", optarg, 1, UINT32_MAX, &va->limit);
			break;
		case HCP_OPT_COUNT:
			/* the library returns the count as an int */
			ret = hc_cli_parse_u32("--count", optarg, 1, INT32_MAX, &va->count);
			break;
		case HCP_OPT_INTERVAL:
			ret = hc_cli_parse_u32("--interval", optarg, 100, 3600000, &va->interval_ms);
			break;
		case HCP_OPT_KEY:
			va->key = optarg;
			ret = hc_cli_parse_hex("--key", optarg, va->keyb, HC_KEY_BYTES);
			break;
		default:
			return hcp_bad_option(c, argv);
		}
		if (ret < 0)
			return hcp_usage_error("%s", hc_cli_error());
	}
	if (name && (ret = take_operands(argc, argv, name, extra)) != 0)
		return ret;
	if ((ret = check_dir(va->dir)) != 0)
		return ret;
	if (va->dir && va->socket)
		return hcp_usage_error("--dir and --socket: a sealed pool is in no directory; give one of them");
	hcp_socket = va->socket;
	return HCP_GO;
}

/* "schema" first: a script checks it before it reads the rest, and a change
 * that would break one bumps the number (hicache-pool(8), JSON OUTPUT). */
struct json_object *hcp_json_new(const char *schema)
{
	struct json_object *o = json_object_new_object();

	if (o)
		hcp_jadd_str(o, "schema", schema);
	return o;
}

int hcp_print_json(struct json_object *o)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);

	if (!s)
		return hcp_failure("out of memory formatting JSON");
	puts(s);
	return 0;
}

void hcp_jadd_u64(struct json_object *o, const char *k, uint64_t v)
{
	/* every count and size in a pool is far below 2^63 (layout caps them) */
	json_object_object_add(o, k, json_object_new_int64((int64_t)v));
}

void hcp_jadd_str(struct json_object *o, const char *k, const char *v)
{
	json_object_object_add(o, k, json_object_new_string(v));
}

void hcp_jadd_bool(struct json_object *o, const char *k, bool v)
{
	json_object_object_add(o, k, json_object_new_boolean(v));
}

int hcp_attach(const char *name, const char *dir, unsigned flags, hc_pool **p)
{
	struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts),
				    .dir = dir,
				    .flags = flags,
				    .socket = hcp_socket };

	return hc_pool_attach(name, &o, p);
}

/* Attach as a rank: eviction and clearing retire pages, which takes a slot.
 * NO_POPULATE: the tool never touches an envelope. */
int hcp_attach_rank(const char *name, const char *dir, hc_pool **p)
{
	if (hcp_attach(name, dir, HC_ATTACH_NO_POPULATE, p) < 0)
		return hcp_failure("%s", hcp_lib_error());
	return 0;
}

static const char main_usage[] = "Usage: " HCP_PROG " VERB [OPTIONS]\n"
				 "       " HCP_PROG " --help | --version\n"
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
				 "Run '" HCP_PROG " VERB --help' for the options of a verb.  Exit status: 0 on\n"
				 "success, 1 when the operation failed (or check found a violation, or evict\n"
				 "found no such key), 2 when the command line is wrong.\n";

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *usage;
} verbs[] = {
#define X(v) { #v, hcp_cmd_##v, hcp_##v##_usage },
	HCP_VERBS(X)
#undef X
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
	opterr = 0; /* every message goes through hcp_say() */
	if (argc < 2)
		return hcp_usage_error("missing verb: use %s or help (" HCP_PROG " --help)", verb_list());
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(main_usage, stdout);
		return HC_CLI_EXIT_OK;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf(HCP_PROG " (hicache) %s\n", hc_version());
		return HC_CLI_EXIT_OK;
	}
	if (!strcmp(argv[1], "help")) {
		if (argc == 2) {
			fputs(main_usage, stdout);
			return HC_CLI_EXIT_OK;
		}
		hcp_verb = "help";
		if (argc > 3)
			return hcp_usage_error("unexpected argument '%s': give one VERB", argv[3]);
		v = find_verb(argv[2]);
		if (v < 0)
			return hcp_usage_error("unknown verb '%s': use %s", argv[2], verb_list());
		fputs(verbs[v].usage, stdout);
		return HC_CLI_EXIT_OK;
	}
	if (argv[1][0] == '-')
		return hcp_usage_error("unknown option '%s' before the verb; see '" HCP_PROG " --help'", argv[1]);
	v = find_verb(argv[1]);
	if (v < 0)
		return hcp_usage_error("unknown verb '%s': use %s or help", argv[1], verb_list());
	hcp_verb = verbs[v].name;
	/* the verb is argv[0] of its own command line */
	ret = verbs[v].fn(argc - 1, argv + 1);
	/* a full disk or a closed pipe must not pass for a clean listing */
	if (fflush(stdout) != 0 || ferror(stdout))
		return hcp_failure("cannot write the output: %s", strerror(errno));
	return ret;
}
