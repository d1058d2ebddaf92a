/* SPDX-License-Identifier: Apache-2.0 */
/*
 * refsim.c - the reference simulation of L2 for the replay's reference
 * check (hicache-bench(1)): an exact LRU of page keys, served one request
 * at a time by the rules in workload.h.  Run with L1 off, no L3, --serial
 * and a pool in exact-LRU eviction, the replay's L2 hit ratio must equal
 * this one exactly.
 *
 * The LRU is an array of nodes on a doubly linked list (head: most
 * recently used) and a chained hash of their keys, indices throughout.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../cli.h"
#include "workload.h"

#define NIL UINT32_MAX

struct node {
	hc_key_t key;
	uint32_t prev, next;  /* the LRU list */
	uint32_t hnext;       /* the hash chain */
	uint32_t mark;        /* the request (plus one) that names it last */
};

struct lru {
	struct node *n;
	uint32_t *bucket;
	uint32_t mask, cap, used, head, tail;
};

static uint32_t *slot(struct lru *l, const uint8_t *key)
{
	uint64_t h;

	memcpy(&h, key, sizeof(h)); /* a SHA-256 digest: any 8 bytes are uniform */
	return &l->bucket[h & l->mask];
}

static uint32_t find(struct lru *l, const uint8_t *key)
{
	for (uint32_t i = *slot(l, key); i != NIL; i = l->n[i].hnext)
		if (!memcmp(l->n[i].key, key, HC_KEY_BYTES))
			return i;
	return NIL;
}

static void unlink_lru(struct lru *l, uint32_t i)
{
	struct node *x = &l->n[i];

	if (x->prev != NIL)
		l->n[x->prev].next = x->next;
	else
		l->head = x->next;
	if (x->next != NIL)
		l->n[x->next].prev = x->prev;
	else
		l->tail = x->prev;
}

static void push_front(struct lru *l, uint32_t i)
{
	l->n[i].prev = NIL;
	l->n[i].next = l->head;
	if (l->head != NIL)
		l->n[l->head].prev = i;
	l->head = i;
	if (l->tail == NIL)
		l->tail = i;
}

/* Insert key as the most recently used, marked for request mark; when
 * full, evict the least recently used page of another request (this one's
 * are pinned or reserved in the pool while it is served): 1 if it evicted. */
static int insert(struct lru *l, const uint8_t *key, uint32_t mark)
{
	uint32_t i;
	int evicted = 0;

	if (l->used == l->cap) {
		uint32_t *pp;
		for (i = l->tail; l->n[i].mark == mark; i = l->n[i].prev)
			; /* cap > the request's pages: another is there */
		unlink_lru(l, i);
		for (pp = slot(l, l->n[i].key); *pp != i; pp = &l->n[*pp].hnext)
			;
		*pp = l->n[i].hnext;
		evicted = 1;
	} else {
		i = l->used++;
	}
	memcpy(l->n[i].key, key, HC_KEY_BYTES);
	l->n[i].mark = mark;
	l->n[i].hnext = *slot(l, key);
	*slot(l, key) = i;
	push_front(l, i);
	return evicted;
}

int hc_rp_refsim(const struct hc_rp_workload *w, uint32_t page_tokens, uint64_t capacity, struct hc_rp_refsim *out)
{
	struct lru l = { .head = NIL, .tail = NIL };
	uint32_t most = 0, nb = 1;
	hc_key_t *keys = NULL;
	int r = 0;

	memset(out, 0, sizeof(*out));
	if (!hc_rp_page_tokens_ok(page_tokens))
		return hc_cli_fail(EINVAL, "reference: page_tokens %u does not divide %u", page_tokens, HC_RP_BLOCK_TOKENS);
	if (w->n >= NIL)
		return hc_cli_fail(E2BIG, "reference: %zu requests: at most %u", w->n, NIL - 1); /* marks are request numbers */
	for (size_t q = 0; q < w->n; q++)
		if (hc_rp_pages(&w->req[q], page_tokens) > most)
			most = hc_rp_pages(&w->req[q], page_tokens);
	if (capacity <= most || capacity >= NIL)
		return hc_cli_fail(EINVAL, "reference: a pool of %llu pages %s: the longest request has %u",
				   (unsigned long long)capacity, capacity >= NIL ? "is too large" : "must be larger than any request",
				   most);
	while (nb < 2 * capacity)
		nb <<= 1;
	l.cap = (uint32_t)capacity;
	l.mask = nb - 1;
	l.n = malloc((size_t)capacity * sizeof(*l.n));
	l.bucket = malloc((size_t)nb * sizeof(*l.bucket));
	keys = malloc(((size_t)most + 1) * sizeof(*keys));
	if (!l.n || !l.bucket || !keys) {
		r = hc_cli_fail(ENOMEM, "reference: no memory for %llu pages", (unsigned long long)capacity);
		goto out;
	}
	memset(l.bucket, 0xff, (size_t)nb * sizeof(*l.bucket));
	for (size_t q = 0; q < w->n; q++) {
		const struct hc_rp_req *rq = &w->req[q];
		uint32_t n = hc_rp_pages(rq, page_tokens), hit = 0;
		uint32_t mark = (uint32_t)q + 1;
		hc_rp_keys(w, rq, page_tokens, keys);
		while (hit < n && find(&l, keys[hit]) != NIL)
			hit++;
		for (uint32_t i = 0; i < n; i++) { /* present: never evicted for this request */
			uint32_t x = find(&l, keys[i]);
			if (x != NIL)
				l.n[x].mark = mark;
		}
		for (uint32_t i = n; i-- > 0;) { /* last to first: the first ends most recent */
			uint32_t x = find(&l, keys[i]);
			if (x != NIL) {
				unlink_lru(&l, x);
				push_front(&l, x);
			} else {
				out->evictions += (uint64_t)insert(&l, keys[i], mark);
			}
		}
		out->requests++;
		out->pages += n;
		out->hit_pages += hit;
		out->input_tokens += rq->input_len;
	}
out:
	free(l.n);
	free(l.bucket);
	free(keys);
	return r;
}
