/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lru.h - an exact LRU set of page keys, for the replay's simulated GPU
 * cache (L1) and the reference simulation of L2 (refsim.c): nodes on a
 * doubly linked list (head: most recently used) and a chained hash of
 * their keys, indices throughout.
 */
#ifndef HC_TOOLS_REPLAY_LRU_H
#define HC_TOOLS_REPLAY_LRU_H

#include <stdint.h>

#include <hicache/hicache.h>

struct hc_rp_lru_node {
	hc_key_t key;
	uint32_t prev, next; /* the LRU list */
	uint32_t hnext;      /* the hash chain */
	uint32_t mark;       /* the caller's: see hc_rp_lru_use */
};

struct hc_rp_lru {
	struct hc_rp_lru_node *n;
	uint32_t *bucket;
	uint32_t mask, cap, used, head, tail;
};

/* cap keys (1..2^30): 0, or -ENOMEM. */
int hc_rp_lru_init(struct hc_rp_lru *l, uint32_t cap);
void hc_rp_lru_free(struct hc_rp_lru *l);
int hc_rp_lru_has(const struct hc_rp_lru *l, const uint8_t *key);
/* Set the mark of key if present. */
void hc_rp_lru_mark(struct hc_rp_lru *l, const uint8_t *key, uint32_t mark);
/* Use key: make it the most recently used, inserting it if absent; when
 * full, the least recently used key goes, skipping those marked mark
 * (mark 0: none is skipped; all marked: the least recent anyway).  The
 * key gets mark.  0: it was there; 1: inserted; 2: inserted, one evicted. */
int hc_rp_lru_use(struct hc_rp_lru *l, const uint8_t *key, uint32_t mark);

#endif /* HC_TOOLS_REPLAY_LRU_H */
