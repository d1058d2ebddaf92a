/* SPDX-License-Identifier: Apache-2.0 */
/*
 * workload.h - what hicache-bench replay serves: requests in arrival order,
 * each a prompt named block by block with Mooncake's prefix hash ids (one
 * id per 512-token block; equal ids mean equal prefixes up to that block),
 * read from a trace (trace.c) or made by the built-in generator (gen.c);
 * the page keys of a request (pages.c); and the reference simulation of
 * the L2 hit ratio (refsim.c).
 *
 * Errors are the tools' (cli.h): a negative errno, and one line in
 * hc_cli_error() that says what was wrong and where.
 */
#ifndef HC_TOOLS_REPLAY_WORKLOAD_H
#define HC_TOOLS_REPLAY_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include <hicache/hicache.h>

#define HC_RP_BLOCK_TOKENS 512u        /* tokens per hash id, as Mooncake's traces have them */
#define HC_RP_LINE_MAX     (64u << 20) /* bytes of one trace line: 4 M ids of 16 digits */

struct hc_rp_req {
	uint64_t t_ms;       /* arrival, from the start of the workload */
	uint32_t input_len;  /* prompt tokens */
	uint32_t output_len; /* tokens generated (decode is not replayed) */
	uint32_t nblocks;    /* hash ids */
	size_t first;        /* its first hash id in the workload's ids */
	uint32_t line;       /* in the trace; 0: generated */
};

struct hc_rp_workload {
	struct hc_rp_req *req; /* in arrival order: t_ms never decreases */
	size_t n, cap;
	uint64_t *ids; /* every request's hash ids, one after the other */
	size_t nids, cap_ids;
};

static inline const uint64_t *hc_rp_ids(const struct hc_rp_workload *w, const struct hc_rp_req *r)
{
	return w->ids + r->first;
}

void hc_rp_workload_free(struct hc_rp_workload *w);
/* Room for one more request with ids hash ids: 0 or -ENOMEM. */
int hc_rp_workload_grow(struct hc_rp_workload *w, size_t ids);

/* trace.c: load a Mooncake JSONL trace, one request per line:
 *   {"timestamp": MS, "input_length": N, "output_length": N, "hash_ids": [ID, ...]}
 * Other fields are ignored; blank lines are skipped.  A line that is not
 * such an object, a timestamp before the previous one, or a file with no
 * request fails the load with the file, the line number and the reason.
 * max_requests > 0 stops after that many. */
int hc_rp_trace_load(const char *path, size_t max_requests, struct hc_rp_workload *w);
/* One line (NUL-terminated) into w, checked against the request before
 * it; path and lineno name it in messages.  Exposed for the tests. */
int hc_rp_trace_line(const char *path, unsigned lineno, const char *line, struct hc_rp_workload *w);

/* gen.c: the built-in multi-turn workload.  Sessions arrive at random
 * (Poisson), each starting from one of a few shared system prompts and
 * taking turns: a turn's prompt is the whole conversation so far plus a new
 * user message, so it shares every full block of the previous turn.  The
 * same seed gives the same workload. */
struct hc_rp_gen_opts {
	uint64_t seed;
	uint32_t sessions;       /* conversations */
	uint32_t max_turns;      /* turns per session: 1..max_turns, uniform */
	uint32_t system_prompts; /* shared prefixes sessions start from */
	uint32_t system_tokens;  /* tokens of each */
	uint32_t user_tokens;    /* a user message: 1/2..3/2 of this, uniform */
	uint32_t output_tokens;  /* a reply: 1/2..3/2 of this, uniform */
	uint32_t max_input;      /* a session ends before its prompt passes this */
	uint32_t session_gap_ms; /* mean time between session starts */
	uint32_t turn_gap_ms;    /* mean time between a session's turns */
};
/* Defaults for every field left 0 (seed 0 is a seed like another). */
void hc_rp_gen_defaults(struct hc_rp_gen_opts *o);
int hc_rp_gen(const struct hc_rp_gen_opts *o, struct hc_rp_workload *w);

/* pages.c: a request of page_tokens-token pages (page_tokens divides 512)
 * has floor(input_len / page_tokens) pages, at most 512 / page_tokens per
 * hash id; the partial tail is never keyed.  Two pages share a key exactly
 * when they have the same hash id and the same position in its block.
 * hc_rp_pages: how many; hc_rp_keys: their keys into out (that many). */
int hc_rp_page_tokens_ok(uint32_t page_tokens);
uint32_t hc_rp_pages(const struct hc_rp_req *r, uint32_t page_tokens);
void hc_rp_keys(const struct hc_rp_workload *w, const struct hc_rp_req *r, uint32_t page_tokens, hc_key_t *out);

/* refsim.c: the reference simulation of L2 (hicache-bench(1), "The
 * reference check"): one request at a time; its hit is the longest prefix
 * of its pages present; then its pages are touched from the last to the
 * first (the first becomes the most recently used), the missing ones
 * inserted in that order; a full pool evicts its least recently used page
 * that is not one of the request's (those are pinned or reserved while it
 * is served).  capacity is in pages and must exceed every request's. */
struct hc_rp_refsim {
	uint64_t requests;
	uint64_t pages; /* keyed pages asked */
	uint64_t hit_pages;
	uint64_t evictions;
	uint64_t input_tokens; /* every prompt token, partial tails included */
};
int hc_rp_refsim(const struct hc_rp_workload *w, uint32_t page_tokens, uint64_t capacity, struct hc_rp_refsim *out);

#endif /* HC_TOOLS_REPLAY_WORKLOAD_H */
