/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.h - the parts of hicache-pool(8): main.c runs the verb named on the
 * command line and holds what every verb shares (the error line, the
 * options and operands, JSON, attaching); ranks.c shows rank slots and
 * engines (info, ls); check.c prints the lines of check and repair; each
 * verb is a file of its own.
 */
#ifndef HC_TOOLS_POOL_H
#define HC_TOOLS_POOL_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include <hicache/hicache.h>

#include "../cli/cli.h"

#define HCP_PROG        "hicache-pool"
#define HCP_DEFAULT_DIR "/dev/shm"

/* The verbs, in the order the help and the errors list them.  Each has
 * hcp_cmd_VERB, which takes the verb's own command line (argv[0] is the
 * verb) and returns the exit status, and hcp_VERB_usage, its help. */
#define HCP_VERBS(X)                                                                                                   \
	X(create) X(info) X(ls) X(stat) X(top) X(check) X(keys) X(evict) X(clear) X(destroy) X(repair) X(backend)
#define X(v)                                                                                                           \
	int hcp_cmd_##v(int argc, char **argv);                                                                        \
	extern const char hcp_##v##_usage[];
HCP_VERBS(X)
#undef X

extern const char *hcp_verb; /* for messages: the verb being run */
extern bool hcp_log_info;    /* show the library's INFO lines (repair) */

/* Print one error line and return the exit status to use. */
int hcp_say(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define hcp_usage_error(...) hcp_say(HC_CLI_EXIT_USAGE, __VA_ARGS__)
#define hcp_failure(...)     hcp_say(HC_CLI_EXIT_FAIL, __VA_ARGS__)
/* The library's last error, less a leading "VERB: " that hcp_say() adds too. */
const char *hcp_lib_error(void);
/* An unknown option or a missing value, as getopt_long reported it. */
int hcp_bad_option(int c, char **argv);
/* The NAME operand of a verb, checked as the library would. */
int hcp_take_name(int argc, char **argv, const char **name);

/* getopt_long codes of the long options, for every verb */
enum {
	HCP_OPT_DIR = 256,
	HCP_OPT_SOCKET,
	HCP_OPT_JSON,
	HCP_OPT_NO_RECOVER,
	HCP_OPT_FORCE,
	HCP_OPT_PROMETHEUS,
	HCP_OPT_QUIESCENT,
	HCP_OPT_LIMIT,
	HCP_OPT_KEY,
	HCP_OPT_COUNT,
	HCP_OPT_INTERVAL,
	HCP_OPT_POOL, /* create: HCP_OPT_POOL + enum hc_cli_pool_opt */
};

/*
 * The options of every verb but create.  Each verb's getopt table names the
 * ones it takes; hcp_parse_args fills what was given, checks the values, the
 * NAME operand (where 'name' is given; 'extra' for one more) and --dir.
 */
struct hcp_args {
	const char *dir;    /* NULL unless --dir */
	const char *socket; /* NULL unless --socket: a sealed pool, by its owner's socket */
	bool json, prometheus, quiescent, no_recover, force;
	uint32_t limit;             /* --limit; UINT32_MAX when absent */
	uint32_t count;             /* --count; 0 when absent */
	uint32_t interval_ms;       /* --interval; 0 when absent */
	const char *key;            /* --key as given, NULL when absent */
	uint8_t keyb[HC_KEY_BYTES]; /* --key as bytes */
};

#define HCP_OPTION_DIR                                                                                                 \
	{                                                                                                              \
		"dir", required_argument, NULL, HCP_OPT_DIR                                                            \
	}
/* --socket PATH, for every verb that attaches an existing pool: hcp_attach
 * then asks the socket's owner (hicached) for the sealed pool's fd. */
#define HCP_OPTION_SOCKET                                                                                              \
	{                                                                                                              \
		"socket", required_argument, NULL, HCP_OPT_SOCKET                                                      \
	}
#define HCP_USAGE_SOCKET                                                                                               \
	"  --socket PATH   a sealed pool (hicached's default): attach it through its\n"                                \
	"                  owner's socket, hicached's 'socket =' (no --dir then)\n"
#define HCP_OPTION_JSON                                                                                                \
	{                                                                                                              \
		"json", no_argument, NULL, HCP_OPT_JSON                                                                \
	}
#define HCP_OPTIONS_END                                                                                                \
	{ "help", no_argument, NULL, 'h' },                                                                            \
	{                                                                                                              \
		NULL, 0, NULL, 0                                                                                       \
	}
#define HCP_GO (-1) /* hcp_parse_args: go on; anything else is the exit status */
int hcp_parse_args(int argc, char **argv, const struct option *opts, const char *usage, struct hcp_args *va,
		   const char **name, const char **extra);

/* JSON: a verb's object, its "schema" member set ("hicache.pool-VERB/N");
 * o printed pretty (0, or the exit status of a failure); members added. */
struct json_object *hcp_json_new(const char *schema);
int hcp_print_json(struct json_object *o);
void hcp_jadd_u64(struct json_object *o, const char *k, uint64_t v);
void hcp_jadd_str(struct json_object *o, const char *k, const char *v);
void hcp_jadd_bool(struct json_object *o, const char *k, bool v);

/* Attach with HC_ATTACH_* flags (-errno, the library's error), or as a rank
 * (0, or the exit status of a failure, printed). */
int hcp_attach(const char *name, const char *dir, unsigned flags, hc_pool **p);
int hcp_attach_rank(const char *name, const char *dir, hc_pool **p);

/* ranks.c: one rank slot in JSON; its quota for people; the engines of the
 * n slots of ri, a line each under indent, or a JSON array. */
struct json_object *hcp_rank_json(const struct hc_rank_info *ri);
const char *hcp_quota_text(const struct hc_rank_info *ri, char *buf, size_t len);
void hcp_engines_text(const struct hc_rank_info *ri, unsigned n, const char *indent);
struct json_object *hcp_engines_json(const struct hc_rank_info *ri, unsigned n);

/* check.c: what check and repair print: a violation or a fix a line, or JSON. */
struct hcp_check_out {
	struct json_object *lines; /* --json: the violations, else NULL: print them */
};
/* An hc_pool_check/hc_pool_repair report callback; arg is a struct hcp_check_out. */
void hcp_check_report(void *arg, const char *line);

#endif /* HC_TOOLS_POOL_H */
