/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.c - a chained hash table of object names with an intrusive LRU list.
 * Not thread-safe: store.c calls it under its index lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "index.h"

#define IDX_MIN_BUCKETS 1024u

uint32_t hc__idx_hash(const uint8_t *name)
{
	uint64_t h = UINT64_C(0x9E3779B97F4A7C15);

	/* Names are mostly digests already, but a plugin must not trust that:
	 * mix all 64 bytes so crafted keys cannot line up in one bucket. */
	for (unsigned i = 0; i < HC_BE_NAME_BYTES; i += 8) {
		uint64_t w;

		memcpy(&w, name + i, 8);
		h = (h ^ w) * UINT64_C(0xFF51AFD7ED558CCD);
		h ^= h >> 32;
	}
	return (uint32_t)(h ^ (h >> 29));
}

int hc__idx_init(struct hc_idx *ix)
{
	memset(ix, 0, sizeof(*ix));
	ix->bucket = malloc(IDX_MIN_BUCKETS * sizeof(*ix->bucket));
	if (!ix->bucket)
		return -ENOMEM;
	memset(ix->bucket, 0xff, IDX_MIN_BUCKETS * sizeof(*ix->bucket));
	ix->nbucket = IDX_MIN_BUCKETS;
	ix->free = ix->head = ix->tail = HC_IDX_NIL;
	return 0;
}

void hc__idx_free(struct hc_idx *ix)
{
	free(ix->ent);
	free(ix->bucket);
	memset(ix, 0, sizeof(*ix));
}

uint32_t hc__idx_find(const struct hc_idx *ix, const uint8_t *name)
{
	uint32_t h = hc__idx_hash(name);

	for (uint32_t i = ix->bucket[h & (ix->nbucket - 1)]; i != HC_IDX_NIL; i = ix->ent[i].chain)
		if (ix->ent[i].hash == h && memcmp(ix->ent[i].name, name, HC_BE_NAME_BYTES) == 0)
			return i;
	return HC_IDX_NIL;
}

static void lru_unlink(struct hc_idx *ix, uint32_t i)
{
	struct hc_idx_ent *e = &ix->ent[i];

	if (e->prev != HC_IDX_NIL)
		ix->ent[e->prev].next = e->next;
	else
		ix->head = e->next;
	if (e->next != HC_IDX_NIL)
		ix->ent[e->next].prev = e->prev;
	else
		ix->tail = e->prev;
}

static void lru_push_head(struct hc_idx *ix, uint32_t i)
{
	struct hc_idx_ent *e = &ix->ent[i];

	e->prev = HC_IDX_NIL;
	e->next = ix->head;
	if (ix->head != HC_IDX_NIL)
		ix->ent[ix->head].prev = i;
	else
		ix->tail = i;
	ix->head = i;
}

void hc__idx_touch(struct hc_idx *ix, uint32_t i)
{
	if (ix->head == i)
		return;
	lru_unlink(ix, i);
	lru_push_head(ix, i);
}

/* Doubles the buckets once the chains average two; a failed malloc only
 * leaves the chains longer. */
static void maybe_rehash(struct hc_idx *ix)
{
	uint32_t n = ix->nbucket * 2, *b;

	if (ix->count < (uint64_t)ix->nbucket * 2 || n == 0)
		return;
	b = malloc((size_t)n * sizeof(*b));
	if (!b)
		return;
	memset(b, 0xff, (size_t)n * sizeof(*b));
	for (uint32_t i = ix->head; i != HC_IDX_NIL; i = ix->ent[i].next) {
		uint32_t k = ix->ent[i].hash & (n - 1);

		ix->ent[i].chain = b[k];
		b[k] = i;
	}
	free(ix->bucket);
	ix->bucket = b;
	ix->nbucket = n;
}

static uint32_t alloc_entry(struct hc_idx *ix)
{
	if (ix->free != HC_IDX_NIL) {
		uint32_t i = ix->free;

		ix->free = ix->ent[i].chain;
		return i;
	}
	if (ix->used == ix->cap) {
		uint32_t cap = ix->cap ? ix->cap * 2 : 1024;
		struct hc_idx_ent *e;

		if (cap <= ix->cap || cap == HC_IDX_NIL)
			return HC_IDX_NIL;
		e = realloc(ix->ent, (size_t)cap * sizeof(*e));
		if (!e)
			return HC_IDX_NIL;
		ix->ent = e;
		ix->cap = cap;
	}
	return ix->used++;
}

int hc__idx_put(struct hc_idx *ix, const uint8_t *name, uint64_t size, int64_t *old)
{
	uint32_t i = hc__idx_find(ix, name), h;

	if (i != HC_IDX_NIL) {
		*old = (int64_t)ix->ent[i].size;
		ix->bytes = ix->bytes - ix->ent[i].size + size;
		ix->ent[i].size = size;
		hc__idx_touch(ix, i);
		return 0;
	}
	*old = -1;
	i = alloc_entry(ix);
	if (i == HC_IDX_NIL)
		return -ENOMEM;
	h = hc__idx_hash(name);
	memcpy(ix->ent[i].name, name, HC_BE_NAME_BYTES);
	ix->ent[i].size = size;
	ix->ent[i].hash = h;
	ix->ent[i].chain = ix->bucket[h & (ix->nbucket - 1)];
	ix->bucket[h & (ix->nbucket - 1)] = i;
	lru_push_head(ix, i);
	ix->count++;
	ix->bytes += size;
	maybe_rehash(ix);
	return 0;
}

void hc__idx_del(struct hc_idx *ix, uint32_t i)
{
	uint32_t *p = &ix->bucket[ix->ent[i].hash & (ix->nbucket - 1)];

	while (*p != i)
		p = &ix->ent[*p].chain;
	*p = ix->ent[i].chain;
	lru_unlink(ix, i);
	ix->count--;
	ix->bytes -= ix->ent[i].size;
	ix->ent[i].chain = ix->free;
	ix->free = i;
}
