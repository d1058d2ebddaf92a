/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pages.c - the pages of a replayed request and their keys.  A trace names
 * a prompt by 512-token blocks, not tokens, so a page's key is made from
 * its block's hash id and its position in the block: SHA-256 of a 32-byte
 * block naming the id and the page size (the "previous key" of
 * hc_key_chain) followed by the position as one uint32 token.  So two pages share a key exactly when
 * they share both, and no replay key is an engine's key.
 */
#include <string.h>

#include "workload.h"

int hc_rp_page_tokens_ok(uint32_t page_tokens)
{
	return page_tokens >= 1 && page_tokens <= HC_RP_BLOCK_TOKENS && HC_RP_BLOCK_TOKENS % page_tokens == 0;
}

uint32_t hc_rp_pages(const struct hc_rp_req *r, uint32_t page_tokens)
{
	uint64_t n = r->input_len / page_tokens, most = (uint64_t)r->nblocks * (HC_RP_BLOCK_TOKENS / page_tokens);

	return (uint32_t)(n < most ? n : most);
}

void hc_rp_keys(const struct hc_rp_workload *w, const struct hc_rp_req *r, uint32_t page_tokens, hc_key_t *out)
{
	static const char tag[16] = "hicache-replay";
	uint32_t per = HC_RP_BLOCK_TOKENS / page_tokens, n = hc_rp_pages(r, page_tokens);
	const uint64_t *ids = hc_rp_ids(w, r);

	for (uint32_t i = 0; i < n; i++) {
		uint8_t name[HC_KEY_BYTES] = { 0 };
		uint64_t id = ids[i / per];
		uint32_t pos = i % per;
		memcpy(name, tag, sizeof(tag));
		for (int b = 0; b < 8; b++)
			name[16 + b] = (uint8_t)(id >> (8 * b)); /* little-endian, as tokens are */
		for (int b = 0; b < 4; b++)
			name[24 + b] = (uint8_t)(page_tokens >> (8 * b));
		hc_key_chain(NULL, name, &pos, 1, 1, &out[i]);
	}
}
