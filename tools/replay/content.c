/* SPDX-License-Identifier: Apache-2.0 */
/*
 * content.c - what a replayed page holds, so that every byte read back can
 * be checked (and the words hicache-bench's stress run fills, the same way): each 8-byte word of a row is a function of
 * the page's key, the row's place (component, head group, layer, K/V, token) and the word's index.  A page written by
 * one rank and read by another, or read back from L3, must match it exactly; a byte from another page, another place or
 * a torn write does not.
 */
#include <string.h>

#include "model.h"

uint64_t hc_rp_mix64(uint64_t x)
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
	return hc_rp_mix64(k ^ hc_rp_mix64((uint64_t)r->comp << 56 ^ (uint64_t)r->group << 48 ^
					   (uint64_t)r->layer << 32 ^ (uint64_t)r->kv << 31 ^ r->token));
}

#define STEP UINT64_C(0x9e3779b97f4a7c15)

void hc_rp_fill_words(uint64_t *w, size_t words, uint64_t seed)
{
	for (size_t i = 0; i < words; i++)
		w[i] = seed ^ (i * STEP);
}

long hc_rp_check_words(const uint64_t *w, size_t words, uint64_t seed)
{
	for (size_t i = 0; i < words; i++)
		if (w[i] != (seed ^ (i * STEP)))
			return (long)i;
	return -1;
}

void hc_rp_fill(const struct hc_rp_row *row, void *buf, size_t bytes)
{
	hc_rp_fill_words(buf, bytes / 8, row_seed(row));
}

long hc_rp_check(const struct hc_rp_row *row, const void *buf, size_t bytes)
{
	uint64_t s = row_seed(row), want;
	const uint64_t *w = buf;
	long i = hc_rp_check_words(w, bytes / 8, s);
	const uint8_t *a, *b;
	size_t j = 0;

	if (i < 0)
		return -1;
	want = s ^ ((uint64_t)i * STEP);
	a = (const uint8_t *)&w[i];
	b = (const uint8_t *)&want;
	while (a[j] == b[j])
		j++;
	return i * 8 + (long)j; /* the first byte that differs */
}
