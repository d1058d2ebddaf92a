/* SPDX-License-Identifier: Apache-2.0 */
/*
 * refsim.c - the reference simulation of L2 for the replay's reference
 * check (hicache-bench(1)): an exact LRU of page keys (lru.c), served one
 * request at a time by the rules in workload.h.  Run with L1 off, no L3,
 * --serial and a pool in exact-LRU eviction, the replay's L2 hit ratio
 * must equal this one exactly.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../cli/cli.h"
#include "lru.h"
#include "workload.h"

int hc_rp_refsim(const struct hc_rp_workload *w, uint32_t page_tokens, uint64_t capacity, struct hc_rp_refsim *out)
{
	struct hc_rp_lru l = { 0 };
	uint32_t most = 0;
	hc_key_t *keys = NULL;
	int r = 0;

	memset(out, 0, sizeof(*out));
	if (!hc_rp_page_tokens_ok(page_tokens))
		return hc_cli_fail(EINVAL, "reference: page_tokens %u does not divide %u", page_tokens,
				   HC_RP_BLOCK_TOKENS);
	if (w->n >= UINT32_MAX)
		return hc_cli_fail(E2BIG, "reference: %zu requests: at most %u", w->n, UINT32_MAX - 1); /* marks */
	for (size_t q = 0; q < w->n; q++)
		if (hc_rp_pages(&w->req[q], page_tokens) > most)
			most = hc_rp_pages(&w->req[q], page_tokens);
	if (capacity <= most || capacity > (1u << 30))
		return hc_cli_fail(EINVAL, "reference: a pool of %llu pages %s: the longest request has %u",
				   (unsigned long long)capacity,
				   capacity > (1u << 30) ? "is too large" : "must be larger than any request", most);
	if (hc_rp_lru_init(&l, (uint32_t)capacity) < 0 || !(keys = malloc(((size_t)most + 1) * sizeof(*keys)))) {
		r = hc_cli_fail(ENOMEM, "reference: no memory for %llu pages", (unsigned long long)capacity);
		goto out;
	}
	for (size_t q = 0; q < w->n; q++) {
		const struct hc_rp_req *rq = &w->req[q];
		uint32_t n = hc_rp_pages(rq, page_tokens), hit = 0, mark = (uint32_t)q + 1;
		hc_rp_keys(w, rq, page_tokens, keys);
		while (hit < n && hc_rp_lru_has(&l, keys[hit]))
			hit++;
		for (uint32_t i = 0; i < n; i++) /* present: pinned or spared, never evicted for it */
			hc_rp_lru_mark(&l, keys[i], mark);
		for (uint32_t i = n; i-- > 0;) /* last to first: the first ends most recent */
			out->evictions += hc_rp_lru_use(&l, keys[i], mark) == 2;
		out->requests++;
		out->pages += n;
		out->hit_pages += hit;
		out->input_tokens += rq->input_len;
	}
out:
	hc_rp_lru_free(&l);
	free(keys);
	return r;
}
