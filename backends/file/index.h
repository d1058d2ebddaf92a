/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.h - the file backend's in-memory index: object name -> size, in one
 * LRU list.  A plain data structure: the caller (store.c) holds the lock.
 * Entries are addressed by index, not pointer, because the table grows by
 * realloc.
 */
#ifndef HC_FILE_INDEX_H
#define HC_FILE_INDEX_H

#include <stdint.h>

#include <hicache/backend.h>

#define HC_IDX_NIL UINT32_MAX

struct hc_idx_ent {
	uint8_t name[HC_BE_NAME_BYTES];
	uint64_t size;
	uint32_t prev;  /* toward the MRU head */
	uint32_t next;  /* toward the LRU tail */
	uint32_t chain; /* next in the bucket; next free when unused */
	uint32_t hash;
};

struct hc_idx {
	struct hc_idx_ent *ent;
	uint32_t cap;  /* entries allocated */
	uint32_t used; /* entries ever handed out (the rest were never used) */
	uint32_t free; /* head of the free list */
	uint32_t *bucket;
	uint32_t nbucket; /* a power of two */
	uint32_t head;    /* most recently used */
	uint32_t tail;    /* least recently used: the next victim */
	uint64_t count;
	uint64_t bytes;
};

uint32_t hc__idx_hash(const uint8_t *name);
int hc__idx_init(struct hc_idx *ix);
void hc__idx_free(struct hc_idx *ix);
uint32_t hc__idx_find(const struct hc_idx *ix, const uint8_t *name);
/* Insert or replace name as the most recent; *old gets the replaced size, or
 * -1 when it was new.  0, or -ENOMEM with the index unchanged. */
int hc__idx_put(struct hc_idx *ix, const uint8_t *name, uint64_t size, int64_t *old);
void hc__idx_touch(struct hc_idx *ix, uint32_t i);
void hc__idx_del(struct hc_idx *ix, uint32_t i);

#endif
