/* SPDX-License-Identifier: Apache-2.0 */
/*
 * content.c - what a replayed page holds, so that every byte read back can
 * be checked: each 8-byte word of a row is a function of the page's key,
 * the row's place (component, head group, layer, K/V, token) and the
 * word's index.  A page written by one rank and read by another, or read
 * back from L3, must match it exactly; a byte from another page, another
 * place or a torn write does not.
 */
#include <string.h>

#include "model.h"

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= UINT64_C(0xff51afd7ed558ccd);
	x ^= x >> 33;
	x *= UINT64_C(0xc4ceb9fe1a85ec53);
	return x ^ (x >> 33);
}

static uint64_t row_seed(const struct hc_rp_row *r)
{
	uint64_t k;

	memcpy(&k, r->key, sizeof(k));
	return mix64(k ^ mix64((uint64_t)r->comp << 56 ^ (uint64_t)r->group << 48 ^ (uint64_t)r->layer << 32 ^
			       (uint64_t)r->kv << 31 ^ r->token));
}

#define STEP UINT64_C(0x9e3779b97f4a7c15)

void hc_rp_fill(const struct hc_rp_row *row, void *buf, size_t bytes)
{
	uint64_t s = row_seed(row), *w = buf;

	for (size_t i = 0; i < bytes / 8; i++)
		w[i] = s ^ (i * STEP);
}

long hc_rp_check(const struct hc_rp_row *row, const void *buf, size_t bytes)
{
	uint64_t s = row_seed(row);
	const uint64_t *w = buf;

	for (size_t i = 0; i < bytes / 8; i++)
		if (w[i] != (s ^ (i * STEP))) {
			uint64_t want = s ^ (i * STEP);
			const uint8_t *a = (const uint8_t *)&w[i], *b = (const uint8_t *)&want;
			size_t j = 0;
			while (a[j] == b[j])
				j++;
			return (long)(i * 8 + j);
		}
	return -1;
}
