/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gen.c - the built-in workload: multi-turn conversations over a few shared
 * system prompts, named with Mooncake-style prefix hash ids, so that the
 * replay needs no file.  Deterministic for a seed.
 *
 * A session's content is its system prompt, then user messages and replies
 * in turn.  Each turn's prompt is the whole content so far plus a new user
 * message.  Block ids follow the content: a block wholly inside the system
 * prompt has that prompt's id for it (shared by every session on it); a
 * block wholly inside what the previous turn asked keeps its id; every
 * other block (the one the new text starts in, and those after it) gets a
 * fresh id, since its tokens are new.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../cli/cli.h"
#include "workload.h"

#define B HC_RP_BLOCK_TOKENS

/* splitmix64: a seeded stream, the same everywhere. */
static uint64_t next(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static uint32_t uniform(uint64_t *s, uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)(next(s) % ((uint64_t)hi - lo + 1));
}

/* 1/2..3/2 of mean, at least 1. */
static uint32_t around(uint64_t *s, uint32_t mean)
{
	uint32_t lo = mean / 2 ? mean / 2 : 1;

	return uniform(s, lo, mean + mean / 2 > lo ? mean + mean / 2 : lo);
}

/* Exponential with this mean, in whole ms. */
static uint64_t expo(uint64_t *s, uint32_t mean)
{
	double u = ((double)(next(s) >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */

	return (uint64_t)(-log(u) * mean);
}

void hc_rp_gen_defaults(struct hc_rp_gen_opts *o)
{
	if (!o->sessions)
		o->sessions = 64;
	if (!o->max_turns)
		o->max_turns = 6;
	if (!o->system_prompts)
		o->system_prompts = 4;
	if (!o->system_tokens)
		o->system_tokens = 2048;
	if (!o->user_tokens)
		o->user_tokens = 600;
	if (!o->output_tokens)
		o->output_tokens = 200;
	if (!o->max_input)
		o->max_input = 32768;
	if (!o->session_gap_ms)
		o->session_gap_ms = 100;
	if (!o->turn_gap_ms)
		o->turn_gap_ms = 3000;
}

static int by_time(const void *a, const void *b)
{
	const struct hc_rp_req *x = a, *y = b;

	if (x->t_ms != y->t_ms)
		return x->t_ms < y->t_ms ? -1 : 1;
	return x->first < y->first ? -1 : x->first > y->first; /* made first, first */
}

int hc_rp_gen(const struct hc_rp_gen_opts *opts, struct hc_rp_workload *w)
{
	struct hc_rp_gen_opts o = *opts;
	uint32_t sys_blocks, max_blocks;
	uint64_t rng, next_id, t0 = 0, *cur = NULL;
	int r = 0;

	memset(w, 0, sizeof(*w));
	hc_rp_gen_defaults(&o);
	rng = o.seed;
	if (o.system_tokens >= o.max_input)
		return hc_cli_fail(
			EINVAL, "workload: system prompts of %u tokens leave no room under the %u-token prompt limit",
			o.system_tokens, o.max_input);
	sys_blocks = o.system_tokens / B; /* the full blocks every session of a prompt shares */
	max_blocks = (o.max_input + B - 1) / B;
	next_id = (uint64_t)o.system_prompts * sys_blocks; /* prompt p's block b is p * sys_blocks + b */
	if (!(cur = malloc((size_t)max_blocks * sizeof(*cur)))) {
		r = hc_cli_fail(ENOMEM, "workload: no memory");
		goto out;
	}
	for (uint32_t s = 0; s < o.sessions; s++) {
		uint32_t p = (uint32_t)(next(&rng) % o.system_prompts), turns = uniform(&rng, 1, o.max_turns);
		uint32_t asked = o.system_tokens; /* content whose blocks have ids already */
		uint32_t len = o.system_tokens;   /* content so far */
		uint64_t t = (t0 += expo(&rng, o.session_gap_ms));
		for (uint32_t b = 0; b < sys_blocks; b++)
			cur[b] = (uint64_t)p * sys_blocks + b;
		for (uint32_t k = 0; k < turns; k++) {
			uint32_t user = around(&rng, o.user_tokens), reply = around(&rng, o.output_tokens);
			uint32_t in = len + user, nb = (in + B - 1) / B;
			struct hc_rp_req *q;
			if (in > o.max_input)
				break; /* the conversation is as long as it gets */
			/* blocks that start new text get fresh ids */
			for (uint32_t b = asked / B; b < nb; b++)
				cur[b] = next_id++;
			if (hc_rp_workload_grow(w, nb) < 0) {
				r = hc_cli_fail(ENOMEM, "workload: no memory for %zu requests", w->n + 1);
				goto out;
			}
			q = &w->req[w->n++];
			*q = (struct hc_rp_req){ .t_ms = t,
						 .input_len = in,
						 .output_len = reply,
						 .nblocks = nb,
						 .first = w->nids };
			memcpy(w->ids + w->nids, cur, (size_t)nb * sizeof(*cur));
			w->nids += nb;
			asked = in;
			len = in + reply;
			t += expo(&rng, o.turn_gap_ms) + 1;
		}
	}
	if (w->n == 0) {
		r = hc_cli_fail(EINVAL, "workload: no request fits under the %u-token prompt limit", o.max_input);
		goto out;
	}
	qsort(w->req, w->n, sizeof(*w->req), by_time);
out:
	free(cur);
	if (r < 0)
		hc_rp_workload_free(w);
	return r;
}
