/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.h - argument parsing shared by the command-line tools (hicache-pool,
 * hicache-bench): strict numbers, sizes with K/M/G/T suffixes, component
 * specs, NUMA options and fingerprint hex.
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

/* The calling thread's last parse error (one line, no newline). */
const char *hc_cli_error(void);

/*
 * A decimal number in [min, max]: digits only (no sign, no blanks, no
 * hex), overflow is an error.  'what' names the option in the message.
 */
int hc_cli_parse_u64(const char *what, const char *s, uint64_t min, uint64_t max, uint64_t *out);
int hc_cli_parse_u32(const char *what, const char *s, uint32_t min, uint32_t max, uint32_t *out);

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

#endif /* HC_TOOLS_CLI_H */
