/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lru.c - an exact LRU set of page keys (lru.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lru.h"

#define NIL UINT32_MAX

static uint32_t *slot(const struct hc_rp_lru *l, const uint8_t *key)
{
	uint64_t h;

	memcpy(&h, key, sizeof(h)); /* a SHA-256 digest: any 8 bytes are uniform */
	return &l->bucket[h & l->mask];
}

static uint32_t find(const struct hc_rp_lru *l, const uint8_t *key)
{
	for (uint32_t i = *slot(l, key); i != NIL; i = l->n[i].hnext)
		if (!memcmp(l->n[i].key, key, HC_KEY_BYTES))
			return i;
	return NIL;
}

static void unlink_lru(struct hc_rp_lru *l, uint32_t i)
{
	struct hc_rp_lru_node *x = &l->n[i];

	if (x->prev != NIL)
		l->n[x->prev].next = x->next;
	else
		l->head = x->next;
	if (x->next != NIL)
		l->n[x->next].prev = x->prev;
	else
		l->tail = x->prev;
}

static void push_front(struct hc_rp_lru *l, uint32_t i)
{
	l->n[i].prev = NIL;
	l->n[i].next = l->head;
	if (l->head != NIL)
		l->n[l->head].prev = i;
	l->head = i;
	if (l->tail == NIL)
		l->tail = i;
}

int hc_rp_lru_init(struct hc_rp_lru *l, uint32_t cap)
{
	uint32_t nb = 1;

	memset(l, 0, sizeof(*l));
	if (cap == 0 || cap > (1u << 30))
		return -EINVAL;
	while (nb < 2 * cap)
		nb <<= 1;
	l->n = malloc((size_t)cap * sizeof(*l->n));
	l->bucket = malloc((size_t)nb * sizeof(*l->bucket));
	if (!l->n || !l->bucket) {
		hc_rp_lru_free(l);
		return -ENOMEM;
	}
	memset(l->bucket, 0xff, (size_t)nb * sizeof(*l->bucket));
	l->mask = nb - 1;
	l->cap = cap;
	l->head = l->tail = NIL;
	return 0;
}

void hc_rp_lru_free(struct hc_rp_lru *l)
{
	free(l->n);
	free(l->bucket);
	memset(l, 0, sizeof(*l));
}

int hc_rp_lru_has(const struct hc_rp_lru *l, const uint8_t *key)
{
	return find(l, key) != NIL;
}

void hc_rp_lru_mark(struct hc_rp_lru *l, const uint8_t *key, uint32_t mark)
{
	uint32_t i = find(l, key);

	if (i != NIL)
		l->n[i].mark = mark;
}

int hc_rp_lru_use(struct hc_rp_lru *l, const uint8_t *key, uint32_t mark)
{
	uint32_t i = find(l, key);
	int ret = 1;

	if (i != NIL) {
		unlink_lru(l, i);
		push_front(l, i);
		l->n[i].mark = mark;
		return 0;
	}
	if (l->used == l->cap) {
		uint32_t *pp;
		for (i = l->tail; mark && i != NIL && l->n[i].mark == mark; i = l->n[i].prev)
			;
		if (i == NIL)
			i = l->tail; /* every key is marked: the least recent goes anyway */
		unlink_lru(l, i);
		for (pp = slot(l, l->n[i].key); *pp != i; pp = &l->n[*pp].hnext)
			;
		*pp = l->n[i].hnext;
		ret = 2;
	} else {
		i = l->used++;
	}
	memcpy(l->n[i].key, key, HC_KEY_BYTES);
	l->n[i].mark = mark;
	l->n[i].hnext = *slot(l, key);
	*slot(l, key) = i;
	push_front(l, i);
	return ret;
}
