/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.h - argument parsing shared by the command-line tools (hicache-pool,
 * hicache-bench, hicached): strict numbers, sizes with K/M/G/T suffixes,
 * component specs, NUMA options, fingerprint hex, and the options that
 * describe a pool at its creation (pool.c).
 *
 * Every parser returns 0 or a negative errno (-EINVAL for malformed input,
 * -ERANGE for a number out of range) and, on failure, leaves one line in
 * hc_cli_error() naming the option, the bad value and what is expected.
 * Nothing here prints, exits or touches a pool.
 */
#ifndef HC_TOOLS_CLI_H
#define HC_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hicache/hicache.h>

#define HC_CLI_EXIT_OK    0
#define HC_CLI_EXIT_FAIL  1 /* the operation failed */
#define HC_CLI_EXIT_USAGE 2 /* the command line is wrong */

/* The write policies' names, as options take them, by enum hc_write_policy. */
extern const char *const hc_cli_write_policies[HC_WRITE_NONE + 1];

/* The calling thread's last parse error (one line, no newline). */
const char *hc_cli_error(void);
/* Record a message for hc_cli_error() and return -err. */
int hc_cli_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * A decimal number in [min, max]: digits only (no sign, no blanks, no
 * hex), overflow is an error.  'what' names the option in the message.
 */
int hc_cli_parse_u64(const char *what, const char *s, uint64_t min, uint64_t max, uint64_t *out);
int hc_cli_parse_u32(const char *what, const char *s, uint32_t min, uint32_t max, uint32_t *out);
/* A number (as strtod reads it, nothing after it) in [min, max]. */
int hc_cli_parse_double(const char *what, const char *s, double min, double max, double *out);

/*
 * A byte size: a decimal number with an optional suffix K, M, G or T (either
 * case, optionally followed by "iB"), all powers of 1024.  "64M" = 64 MiB.
 */
int hc_cli_parse_size(const char *what, const char *s, uint64_t min, uint64_t *out);

/* "0600" or "0660" (leading 0 optional): the only modes a pool may have. */
int hc_cli_parse_mode(const char *what, const char *s, mode_t *out);

/*
 * A component spec, as given to --kv or --state:
 *   kv:    NAME,DTYPE,HEADS,HEAD_BYTES,LAYERS[,replicated|sharded]
 *   state: NAME,DTYPE,BYTES_PER_LAYER,LAYERS[,replicated|sharded]
 * BYTES_PER_LAYER takes size suffixes.  spec.name points into 'name', so
 * keep the struct where it is once parsed.
 */
struct hc_cli_comp {
	char name[HC_COMP_NAME_MAX + 1];
	struct hc_component_spec spec;
};
int hc_cli_parse_comp(const char *what, const char *s, enum hc_comp_kind kind, struct hc_cli_comp *out);

/*
 * NUMA placement: "bind:NODES", "interleave" or "interleave:NODES", with
 * NODES a libnuma node string ("0", "0-1", "0,2").  *nodes points into s.
 */
int hc_cli_parse_numa(const char *what, const char *s, enum hc_numa_mode *mode, const char **nodes);

/* Lower-case hex of n bytes into out (2n+1 bytes); returns out. */
char *hc_cli_hex(const uint8_t *b, size_t n, char *out);
/* Exactly 2n hex digits (either case) into n bytes. */
int hc_cli_parse_hex(const char *what, const char *s, uint8_t *out, size_t n);
/* 0..max hex digits (either case), lower-cased into out (max + 1 bytes): a
 * prefix to match against hc_cli_hex() output. */
int hc_cli_parse_hex_prefix(const char *what, const char *s, size_t max, char *out);

/* "512 B", "20.0 KiB", "1.50 GiB": for people; JSON gets exact bytes. */
char *hc_cli_format_size(uint64_t bytes, char *buf, size_t len);

/* A CLOCK_REALTIME ns timestamp as local "YYYY-MM-DD HH:MM:SS +ZZZZ". */
char *hc_cli_format_time(uint64_t unix_ns, char *buf, size_t len);

/*
 * ---- a pool's creation options (pool.c), shared by 'hicache-pool
 * create' and hicached: one option at a time from any source (a command
 * line, a config file), then hc_cli_pool_finish() to create the pool, or
 * hc_cli_pool_agrees() to check an existing one against them.
 */
enum hc_cli_pool_opt {
	HC_CLI_POOL_MODEL,
	HC_CLI_POOL_PAGE_TOKENS,
	HC_CLI_POOL_TP,
	HC_CLI_POOL_HEAD_GROUPS,
	HC_CLI_POOL_PAGES,
	HC_CLI_POOL_SIZE,
	HC_CLI_POOL_KV,
	HC_CLI_POOL_STATE,
	HC_CLI_POOL_DIR,
	HC_CLI_POOL_GROUP,
	HC_CLI_POOL_MODE,
	HC_CLI_POOL_MAX_RANKS,
	HC_CLI_POOL_QUARANTINE_MS,
	HC_CLI_POOL_NUMA,
	HC_CLI_POOL_EVICT,
	HC_CLI_POOL_MAX_TICKETS,
	HC_CLI_POOL_TICKET_KEYS,
	HC_CLI_POOL_HOST_MODE,
	HC_CLI_POOL_RING_ENTRIES,
	HC_CLI_POOL_ARG_BYTES,
	HC_CLI_POOL__COUNT
};

/* Each option's long name (without "--"), its argument and a one-line help. */
struct hc_cli_pool_optinfo {
	const char *name, *arg, *help;
};
extern const struct hc_cli_pool_optinfo hc_cli_pool_opts[HC_CLI_POOL__COUNT];

struct hc_cli_pool {
	struct hc_pool_spec spec; /* strings point at the values given: keep them */
	struct hc_cli_comp comps[HC_MAX_COMPONENTS];
	struct hc_component_spec specs[HC_MAX_COMPONENTS]; /* spec.comps, once finished */
	unsigned ncomp;
	uint32_t given; /* a bit per option, from any source */
	uint32_t seen;  /* a bit per option, from the current source */
};

void hc_cli_pool_init(struct hc_cli_pool *cp);
/* A new source (the command line after the config file): its options
 * override the earlier ones; --kv/--state replace the earlier list, and
 * --pages or --size the earlier capacity. */
void hc_cli_pool_next_source(struct hc_cli_pool *cp);
/* One option; 'what' names it in messages ("--pages", or a config key).
 * Giving one twice in a source is an error, but for --kv and --state. */
int hc_cli_pool_set(struct hc_cli_pool *cp, enum hc_cli_pool_opt opt, const char *what, const char *value);
/* Whether any option but --dir was given: the caller means a geometry. */
int hc_cli_pool_has_geometry(const struct hc_cli_pool *cp);
/* Everything creation needs is there and fits together; spec.comps set. */
int hc_cli_pool_finish(struct hc_cli_pool *cp);
/* 0 when every option given agrees with the existing pool, else -EINVAL
 * naming each option that differs, with both values. */
int hc_cli_pool_agrees(const struct hc_cli_pool *cp, hc_pool *pool);

/* ---- a pool's stats as the tools show them (stats.c) */

#include <stdio.h>

#define HC_CLI_NGAUGES 15
struct hc_cli_metric {
	const char *name, *help;
	uint64_t value;
};
/* "free", "reserved", ...: pages by state, as keys and labels. */
extern const char *const hc_cli_state_keys[HC_PAGE__COUNT];
/* The gauges (HC_CLI_NGAUGES) and counters (HC_CTR__COUNT) of st, named. */
void hc_cli_metrics(const struct hc_stats *st, struct hc_cli_metric *g, struct hc_cli_metric *c);
void hc_cli_prom_family(FILE *f, const char *name, const char *type, const char *help);
/* The bound (us) of the bucket holding the q-quantile (0 when empty). */
uint64_t hc_cli_hist_quantile_us(const struct hc_hist *h, double q);
/* The Prometheus text exposition (format 0.0.4) of a pool's stats. */
void hc_cli_prometheus(FILE *f, const struct hc_pool_info *in, const struct hc_stats *st);

/* ---- file.c: a text file the tools read */
/* Open path to read, if it is a regular file of at most max_bytes (0: any
 * size): 0 and *out; -EINVAL and *kind ("a directory", "a FIFO", ...) for
 * what is not a regular file; -EFBIG past max_bytes; else -errno. */
int hc_cli_open_regular(const char *path, uint64_t max_bytes, FILE **out, const char **kind);

/* ---- progress.c: how a long step goes, on stderr */
/* Seconds on the monotonic clock. */
double hc_cli_now(void);
struct hc_cli_progress {
	FILE *f;
	const char *who; /* the line's prefix: "hicache-pool create" */
	int on, tty;     /* shown at all; as a bar redrawn in place */
	double every;    /* without a terminal: seconds between lines */
	double t0, shown;
	char phase[48];
	int said, drawn;
};
/* mode: 1 a bar, 0 nothing, -1 a bar on a terminal, else lines. */
void hc_cli_progress_init(struct hc_cli_progress *p, FILE *f, const char *who, int mode);
/* done of total (unit "bytes", shown as sizes, or a count's noun). */
void hc_cli_progress_show(struct hc_cli_progress *p, const char *phase, uint64_t done, uint64_t total,
			  const char *unit);
/* Take the bar off the line, before other output. */
void hc_cli_progress_clear(struct hc_cli_progress *p);
/* An hc_progress_fn: arg is a struct hc_cli_progress. */
void hc_cli_progress_pool(void *arg, const char *phase, uint64_t done, uint64_t total);

#endif /* HC_TOOLS_CLI_H */
