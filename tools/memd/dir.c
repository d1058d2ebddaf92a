/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dir.c - the directory of hicache-memd: which bytes of the region hold
 * which object, who may read or write them, and until when.
 *
 * The region is cut into extents of whole HC_MW_ALIGN units that tile it
 * exactly, kept in address order so that a freed extent merges with free
 * neighbours at once (free extents are never adjacent).  Free extents are
 * also binned by floor(log2(units)): any extent of a bin above the
 * request's fits, so a fit is found without walking the free list, and
 * only the request's own bin is searched when no bigger one has any.
 *
 * An allocation that finds no free extent evicts committed objects from
 * the cold end of the LRU list, skipping those with read leases, until
 * the extent the last eviction freed (merged with its neighbours) is big
 * enough.  If none is, the room is held by leases and grants: -EBUSY.
 *
 * Leases and grants share one table keyed by token.  A token's low bit
 * says which it is (1: a grant), so a COMMIT can tell an expired grant
 * (-ESTALE) from a read lease it should never have been given (-EINVAL)
 * without remembering tokens that are gone.  How long one lasts is its
 * connection's (HELLO), so they expire out of the order they were given
 * in: a min-heap on the expiry time finds the next, and each lease knows
 * its place in it, so a release takes it out in log time.
 *
 * Nothing here does I/O or reads a clock; failures are statuses, never
 * half-done changes.  See memd.h for the ownership notes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memd.h"

const struct memd_stat_desc memd_stat_desc[MEMD_ST__COUNT] = {
#define X(n, k, h) { #n, MEMD_##k, h },
	MEMD_STATS(X)
#undef X
};

enum memd_obj_state {
	MEMD_GRANTED, /* an ALLOC's: being written, on no list */
	MEMD_LIVE,    /* committed: in the name table and on the LRU list */
	MEMD_RETIRED, /* replaced or deleted: its bytes wait for its leases to end */
};

struct memd_ext {
	uint64_t off, len;            /* bytes, multiples of HC_MW_ALIGN */
	struct memd_ext *prev, *next; /* address order */
	struct memd_link fl;          /* in its bin, while free */
	struct memd_obj *obj;         /* the owner; NULL: free */
	unsigned bin;
};

struct memd_obj {
	struct memd_hnode h; /* in names, while LIVE (first: see obj_of) */
	uint8_t name[HC_MW_NAME_BYTES];
	uint64_t length;
	struct memd_ext *ext;
	struct memd_link lru; /* on the LRU list, while LIVE */
	uint32_t leases;      /* read leases on its bytes */
	enum memd_obj_state state;
};

struct memd_lease {
	struct memd_hnode h; /* in tokens (first: see lease_of) */
	uint64_t token;
	uint64_t expires;
	struct memd_obj *obj; /* what it reads, or the grant's object */
	uint64_t heap_i;      /* its index in d->heap */
};

#define TOKEN_GRANT 1u

static struct memd_obj *obj_of(struct memd_hnode *n)
{
	return (struct memd_obj *)n;
}

static struct memd_lease *lease_of(struct memd_hnode *n)
{
	return (struct memd_lease *)n;
}

/* ---- hashing */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xbf58476d1ce4e5b9);
	x ^= x >> 27;
	x *= UINT64_C(0x94d049bb133111eb);
	return x ^ (x >> 31);
}

static uint64_t name_hash(const struct memd_dir *d, const uint8_t name[HC_MW_NAME_BYTES])
{
	uint64_t h = d->p.seed, w;

	for (unsigned i = 0; i < HC_MW_NAME_BYTES; i += 8) {
		memcpy(&w, name + i, 8);
		h = mix64(h ^ w);
	}
	return h;
}

static uint64_t token_hash(const struct memd_dir *d, uint64_t token)
{
	return mix64(token ^ d->p.seed);
}

/* ---- the hash table */

static int htab_init(struct memd_htab *t, uint64_t buckets)
{
	t->b = calloc(buckets, sizeof(*t->b));
	if (!t->b)
		return -ENOMEM;
	t->mask = buckets - 1;
	t->count = 0;
	return 0;
}

/* Twice the buckets once there are as many nodes as buckets; a table that
 * cannot grow keeps working with longer chains. */
static void htab_grow(struct memd_htab *t)
{
	uint64_t nb = (t->mask + 1) * 2;
	struct memd_hnode **b = calloc(nb, sizeof(*b));

	if (!b)
		return;
	for (uint64_t i = 0; i <= t->mask; i++)
		for (struct memd_hnode *n = t->b[i], *next; n; n = next) {
			next = n->next;
			n->next = b[n->hash & (nb - 1)];
			b[n->hash & (nb - 1)] = n;
		}
	free(t->b);
	t->b = b;
	t->mask = nb - 1;
}

static void htab_insert(struct memd_htab *t, struct memd_hnode *n)
{
	if (t->count > t->mask)
		htab_grow(t);
	n->next = t->b[n->hash & t->mask];
	t->b[n->hash & t->mask] = n;
	t->count++;
}

static void htab_remove(struct memd_htab *t, struct memd_hnode *n)
{
	struct memd_hnode **pp = &t->b[n->hash & t->mask];

	while (*pp != n)
		pp = &(*pp)->next;
	*pp = n->next;
	t->count--;
}

static struct memd_obj *find_name(const struct memd_dir *d, const uint8_t name[HC_MW_NAME_BYTES])
{
	uint64_t h = name_hash(d, name);

	for (struct memd_hnode *n = d->names.b[h & d->names.mask]; n; n = n->next)
		if (n->hash == h && memcmp(obj_of(n)->name, name, HC_MW_NAME_BYTES) == 0)
			return obj_of(n);
	return NULL;
}

static struct memd_lease *find_token(const struct memd_dir *d, uint64_t token)
{
	uint64_t h = token_hash(d, token);

	for (struct memd_hnode *n = d->tokens.b[h & d->tokens.mask]; n; n = n->next)
		if (n->hash == h && lease_of(n)->token == token)
			return lease_of(n);
	return NULL;
}

/* ---- gauges */

static void gauge_used(struct memd_dir *d, int64_t delta)
{
	d->st[MEMD_ST_used_bytes] += (uint64_t)delta;
	d->st[MEMD_ST_free_bytes] = d->p.size - d->st[MEMD_ST_used_bytes];
}

/* ---- extents */

static unsigned bin_of(uint64_t len)
{
	return 63u - (unsigned)__builtin_clzll(len / HC_MW_ALIGN);
}

static void bin_add(struct memd_dir *d, struct memd_ext *e)
{
	e->bin = bin_of(e->len);
	memd_list_push(&d->bin[e->bin], &e->fl);
	d->bin_mask |= UINT64_C(1) << e->bin;
	d->st[MEMD_ST_free_extents]++;
}

static void bin_del(struct memd_dir *d, struct memd_ext *e)
{
	memd_list_del(&d->bin[e->bin], &e->fl);
	if (!d->bin[e->bin].head)
		d->bin_mask &= ~(UINT64_C(1) << e->bin);
	d->st[MEMD_ST_free_extents]--;
}

/* A free extent of at least len bytes, or NULL. */
static struct memd_ext *find_fit(const struct memd_dir *d, uint64_t len)
{
	unsigned b = bin_of(len);
	uint64_t above = b >= 63 ? 0 : d->bin_mask & ~((UINT64_C(2) << b) - 1);

	/* every extent of a higher bin is at least 2^(b+1) units: it fits */
	if (above)
		return memd_entry(d->bin[__builtin_ctzll(above)].head, struct memd_ext, fl);
	for (struct memd_link *k = d->bin[b].head; k; k = k->next)
		if (memd_entry(k, struct memd_ext, fl)->len >= len)
			return memd_entry(k, struct memd_ext, fl);
	return NULL;
}

/* Merge a's successor into a (the caller has taken both out of the bins). */
static void absorb_next(struct memd_ext *a)
{
	struct memd_ext *b = a->next;

	a->len += b->len;
	a->next = b->next;
	if (a->next)
		a->next->prev = a;
	free(b);
}

/* Free e's bytes: the free extent they are now part of. */
static struct memd_ext *ext_free(struct memd_dir *d, struct memd_ext *e)
{
	gauge_used(d, -(int64_t)e->len);
	e->obj = NULL;
	if (e->next && !e->next->obj) {
		bin_del(d, e->next);
		absorb_next(e);
	}
	if (e->prev && !e->prev->obj) {
		e = e->prev;
		bin_del(d, e);
		absorb_next(e);
	}
	bin_add(d, e);
	return e;
}

/* Give the first len bytes of free extent e to obj; spare: a node for the
 * rest, or NULL when e is exactly len (used or freed here). */
static struct memd_ext *ext_take(struct memd_dir *d, struct memd_ext *e, uint64_t len, struct memd_obj *obj,
				 struct memd_ext *spare)
{
	bin_del(d, e);
	if (e->len > len) {
		*spare = (struct memd_ext){ .off = e->off + len, .len = e->len - len, .prev = e, .next = e->next };
		if (e->next)
			e->next->prev = spare;
		e->next = spare;
		e->len = len;
		bin_add(d, spare);
	} else {
		free(spare);
	}
	e->obj = obj;
	gauge_used(d, (int64_t)len);
	return e;
}

/* ---- objects */

/* A LIVE object leaves the table and the LRU list; a new lookup no longer
 * finds it. */
static void unlink_live(struct memd_dir *d, struct memd_obj *o)
{
	htab_remove(&d->names, &o->h);
	memd_list_del(&d->lru, &o->lru);
	d->st[MEMD_ST_objects]--;
	d->st[MEMD_ST_object_bytes] -= o->length;
}

/* An object no lookup finds any more: its bytes are freed now, or retired
 * until the last lease on them ends.  The free extent, or NULL. */
static struct memd_ext *drop(struct memd_dir *d, struct memd_obj *o)
{
	struct memd_ext *e;

	if (o->leases) {
		o->state = MEMD_RETIRED;
		d->st[MEMD_ST_retired]++;
		d->st[MEMD_ST_retired_bytes] += o->ext->len;
		return NULL;
	}
	e = ext_free(d, o->ext);
	free(o);
	return e;
}

/* ---- leases and grants */

static uint64_t expiry(uint64_t now_ms, uint32_t lease_ms)
{
	return now_ms > UINT64_MAX - lease_ms ? UINT64_MAX : now_ms + lease_ms;
}

/* Room for one more lease in the table and the heap: false when the
 * table is full or there is no memory for the heap. */
static bool lease_room(struct memd_dir *d)
{
	struct memd_lease **h;
	uint64_t cap;

	if (d->tokens.count >= d->p.max_leases)
		return false;
	if (d->heap_len < d->heap_cap)
		return true;
	cap = d->heap_cap ? d->heap_cap * 2 : 1024;
	if (!(h = realloc(d->heap, cap * sizeof(*h))))
		return false;
	d->heap = h;
	d->heap_cap = cap;
	return true;
}

static void heap_set(struct memd_dir *d, uint64_t i, struct memd_lease *l)
{
	d->heap[i] = l;
	l->heap_i = i;
}

/* Restore the heap around index i, whose lease may be out of place. */
static void heap_fix(struct memd_dir *d, uint64_t i)
{
	struct memd_lease *l = d->heap[i];

	while (i && d->heap[(i - 1) / 2]->expires > l->expires) {
		heap_set(d, i, d->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	for (;;) {
		uint64_t c = 2 * i + 1;

		if (c >= d->heap_len)
			break;
		if (c + 1 < d->heap_len && d->heap[c + 1]->expires < d->heap[c]->expires)
			c++;
		if (d->heap[c]->expires >= l->expires)
			break;
		heap_set(d, i, d->heap[c]);
		i = c;
	}
	heap_set(d, i, l);
}

/* Enter l (lease_room said there is room) for o, lasting lease_ms. */
static void lease_add(struct memd_dir *d, struct memd_lease *l, struct memd_obj *o, unsigned kind, uint64_t now_ms,
		      uint32_t lease_ms)
{
	l->token = (d->next_token++ << 1) | kind;
	l->h.hash = token_hash(d, l->token);
	l->expires = expiry(now_ms, lease_ms);
	l->obj = o;
	htab_insert(&d->tokens, &l->h);
	heap_set(d, d->heap_len++, l);
	heap_fix(d, l->heap_i);
}

static void lease_del(struct memd_dir *d, struct memd_lease *l)
{
	uint64_t i = l->heap_i;

	htab_remove(&d->tokens, &l->h);
	if (i != --d->heap_len) {
		heap_set(d, i, d->heap[d->heap_len]);
		heap_fix(d, i);
	}
	free(l);
}

/* End a lease or a grant (released, or expired): a grant's bytes are
 * freed; a read lease's are when it was the last on a retired object. */
static void lease_end(struct memd_dir *d, struct memd_lease *l)
{
	struct memd_obj *o = l->obj;

	if (l->token & TOKEN_GRANT) {
		d->st[MEMD_ST_grants]--;
		ext_free(d, o->ext);
		free(o);
	} else {
		d->st[MEMD_ST_leases]--;
		if (--o->leases == 0 && o->state == MEMD_RETIRED) {
			d->st[MEMD_ST_retired]--;
			d->st[MEMD_ST_retired_bytes] -= o->ext->len;
			ext_free(d, o->ext);
			free(o);
		}
	}
	lease_del(d, l);
}

/* ---- the directory */

int memd_dir_init(struct memd_dir *d, const struct memd_dir_params *p)
{
	struct memd_ext *e;

	memset(d, 0, sizeof(*d));
	if (p->size == 0 || p->size % HC_MW_ALIGN || p->max_leases == 0)
		return -EINVAL;
	d->p = *p;
	d->next_token = 1; /* 0 is "no lease" on the wire */
	if (!(e = calloc(1, sizeof(*e))))
		return -ENOMEM;
	if (htab_init(&d->names, 1024) < 0 || htab_init(&d->tokens, 1024) < 0) {
		free(e);
		free(d->names.b);
		free(d->tokens.b);
		return -ENOMEM;
	}
	e->len = p->size;
	d->ext_head = e;
	bin_add(d, e);
	d->st[MEMD_ST_region_bytes] = p->size;
	d->st[MEMD_ST_free_bytes] = p->size;
	return 0;
}

void memd_dir_fini(struct memd_dir *d)
{
	for (uint64_t i = 0; i < d->heap_len; i++)
		free(d->heap[i]);
	free(d->heap);
	for (struct memd_ext *e = d->ext_head, *next; e; e = next) {
		next = e->next;
		free(e->obj);
		free(e);
	}
	free(d->names.b);
	free(d->tokens.b);
	memset(d, 0, sizeof(*d));
}

void memd_dir_sweep(struct memd_dir *d, uint64_t now_ms)
{
	while (d->heap_len && d->heap[0]->expires <= now_ms) {
		struct memd_lease *l = d->heap[0];

		d->st[l->token & TOKEN_GRANT ? MEMD_ST_grants_expired : MEMD_ST_leases_expired]++;
		lease_end(d, l);
	}
}

uint64_t memd_dir_next_expiry(const struct memd_dir *d)
{
	return d->heap_len ? d->heap[0]->expires : UINT64_MAX;
}

void memd_dir_lookup(struct memd_dir *d, const uint8_t name[HC_MW_NAME_BYTES], uint32_t lease_ms, uint64_t now_ms,
		     struct hc_mw_found *out)
{
	struct memd_obj *o = find_name(d, name);
	struct memd_lease *l;

	memset(out, 0, sizeof(*out));
	d->st[MEMD_ST_lookups]++;
	if (!o) {
		d->st[MEMD_ST_misses]++;
		out->status = -ENOENT;
		return;
	}
	d->st[MEMD_ST_hits]++;
	if (lease_ms) {
		if (!lease_room(d) || !(l = malloc(sizeof(*l)))) {
			d->st[MEMD_ST_lease_refusals]++;
			out->status = -EBUSY;
			return;
		}
		lease_add(d, l, o, 0, now_ms, lease_ms);
		o->leases++;
		d->st[MEMD_ST_leases]++;
		out->lease = l->token;
		/* a get is a use: the object goes to the hot end */
		memd_list_del(&d->lru, &o->lru);
		memd_list_push(&d->lru, &o->lru);
	}
	out->offset = o->ext->off;
	out->length = o->length;
}

void memd_dir_alloc(struct memd_dir *d, const uint8_t name[HC_MW_NAME_BYTES], uint64_t length, uint32_t lease_ms,
		    uint64_t now_ms, struct hc_mw_grant *out)
{
	struct memd_obj *o = NULL, *victim;
	struct memd_link *k, *scan;
	struct memd_lease *l = NULL;
	struct memd_ext *e, *spare = NULL;
	uint64_t need;

	memset(out, 0, sizeof(*out));
	if (length == 0) {
		d->st[MEMD_ST_alloc_invalid]++;
		out->status = -EINVAL;
		return;
	}
	if (length > d->p.size) {
		d->st[MEMD_ST_alloc_nospc]++;
		out->status = -ENOSPC;
		return;
	}
	need = (length + HC_MW_ALIGN - 1) / HC_MW_ALIGN * HC_MW_ALIGN;
	if (!lease_room(d))
		goto busy;
	/* everything that can fail, before anything is evicted */
	if (!(o = calloc(1, sizeof(*o))) || !(l = malloc(sizeof(*l))) || !(spare = malloc(sizeof(*spare)))) {
		free(o);
		free(l);
		out->status = -ENOMEM;
		return;
	}
	e = find_fit(d, need);
	/* Oldest first, each object looked at once: a leased one stays leased
	 * while this runs, so the scan goes on from where it was rather than
	 * from the tail again (which made one ALLOC quadratic in the leased
	 * objects at the tail). */
	scan = d->lru.tail;
	while (!e) {
		for (k = scan; k && memd_entry(k, struct memd_obj, lru)->leases; k = k->prev)
			;
		if (!k)
			break;
		scan = k->prev;
		victim = memd_entry(k, struct memd_obj, lru);
		d->st[MEMD_ST_evictions]++;
		d->st[MEMD_ST_evicted_bytes] += victim->length;
		unlink_live(d, victim);
		e = drop(d, victim);
		if (e->len < need)
			e = NULL;
	}
	if (!e) {
		free(o);
		free(l);
		free(spare);
		goto busy;
	}
	memcpy(o->name, name, HC_MW_NAME_BYTES);
	o->length = length;
	o->state = MEMD_GRANTED;
	o->ext = ext_take(d, e, need, o, spare);
	lease_add(d, l, o, TOKEN_GRANT, now_ms, lease_ms);
	d->st[MEMD_ST_grants]++;
	d->st[MEMD_ST_allocs]++;
	out->offset = o->ext->off;
	out->token = l->token;
	return;
busy:
	d->st[MEMD_ST_alloc_busy]++;
	out->status = -EBUSY;
}

int memd_dir_commit(struct memd_dir *d, uint64_t token)
{
	struct memd_lease *l;
	struct memd_obj *o, *old;

	if (!(token & TOKEN_GRANT)) {
		d->st[MEMD_ST_commit_stale]++;
		return -EINVAL; /* a lookup's lease: nothing to commit */
	}
	if (!(l = find_token(d, token))) {
		d->st[MEMD_ST_commit_stale]++;
		return -ESTALE;
	}
	o = l->obj;
	lease_del(d, l);
	d->st[MEMD_ST_grants]--;
	/* the older object of this name leaves the table in the same step as
	 * the new one enters it: a lookup finds one or the other, never none */
	if ((old = find_name(d, o->name))) {
		d->st[MEMD_ST_replaced]++;
		unlink_live(d, old);
		drop(d, old);
	}
	o->state = MEMD_LIVE;
	o->h.hash = name_hash(d, o->name);
	htab_insert(&d->names, &o->h);
	memd_list_push(&d->lru, &o->lru);
	d->st[MEMD_ST_objects]++;
	d->st[MEMD_ST_object_bytes] += o->length;
	d->st[MEMD_ST_commits]++;
	return 0;
}

int memd_dir_release(struct memd_dir *d, uint64_t token)
{
	struct memd_lease *l = find_token(d, token);

	if (!l) {
		d->st[MEMD_ST_release_unknown]++;
		return -ENOENT;
	}
	d->st[MEMD_ST_releases]++;
	lease_end(d, l);
	return 0;
}

int memd_dir_delete(struct memd_dir *d, const uint8_t name[HC_MW_NAME_BYTES])
{
	struct memd_obj *o = find_name(d, name);

	if (!o) {
		d->st[MEMD_ST_delete_misses]++;
		return -ENOENT;
	}
	d->st[MEMD_ST_deletes]++;
	unlink_live(d, o);
	drop(d, o);
	return 0;
}

/* ---- the invariants */

#define FAIL(...) return snprintf(why, whylen, __VA_ARGS__), -EUCLEAN

/* The extents tile the region; free ones are coalesced and binned. */
static int check_extents(const struct memd_dir *d, uint64_t counts[3], uint64_t *used, uint64_t *retired_bytes,
			 uint64_t *object_bytes, uint64_t *read_leases, char *why, size_t whylen)
{
	uint64_t at = 0, nfree = 0;
	const struct memd_ext *prev = NULL;

	for (const struct memd_ext *e = d->ext_head; e; prev = e, e = e->next) {
		const struct memd_obj *o = e->obj;

		if (e->prev != prev)
			FAIL("extent at %llu: its prev link is wrong", (unsigned long long)e->off);
		if (e->off != at || e->len == 0 || e->len % HC_MW_ALIGN || e->len > d->p.size - at)
			FAIL("extent [%llu, +%llu) does not follow the one before, which ends at %llu",
			     (unsigned long long)e->off, (unsigned long long)e->len, (unsigned long long)at);
		at += e->len;
		if (!o) {
			nfree++;
			if (prev && !prev->obj)
				FAIL("free extents at %llu and %llu are adjacent, not merged",
				     (unsigned long long)prev->off, (unsigned long long)e->off);
			if (e->bin != bin_of(e->len) || !(d->bin_mask & (UINT64_C(1) << e->bin)))
				FAIL("free extent at %llu is in bin %u, not %u", (unsigned long long)e->off, e->bin,
				     bin_of(e->len));
			continue;
		}
		*used += e->len;
		if (o->ext != e)
			FAIL("the object at %llu names another extent", (unsigned long long)e->off);
		if (o->length == 0 || o->length > e->len || e->len - o->length >= HC_MW_ALIGN)
			FAIL("the object at %llu has %llu bytes in an extent of %llu", (unsigned long long)e->off,
			     (unsigned long long)o->length, (unsigned long long)e->len);
		if (o->state > MEMD_RETIRED)
			FAIL("the object at %llu is in state %d", (unsigned long long)e->off, (int)o->state);
		counts[o->state]++;
		*read_leases += o->leases;
		if (o->state == MEMD_GRANTED && o->leases)
			FAIL("the grant at %llu has read leases", (unsigned long long)e->off);
		if (o->state == MEMD_RETIRED) {
			if (!o->leases)
				FAIL("the retired object at %llu has no lease left", (unsigned long long)e->off);
			*retired_bytes += e->len;
		}
		if (o->state == MEMD_LIVE) {
			*object_bytes += o->length;
			if (find_name(d, o->name) != o)
				FAIL("the object at %llu is not found by its name", (unsigned long long)e->off);
		}
	}
	if (d->st[MEMD_ST_free_extents] != nfree)
		FAIL("%llu free extents, the gauge says %llu", (unsigned long long)nfree,
		     (unsigned long long)d->st[MEMD_ST_free_extents]);
	if (at != d->p.size)
		FAIL("the extents end at %llu, the region at %llu", (unsigned long long)at,
		     (unsigned long long)d->p.size);
	for (unsigned b = 0; b < MEMD_BINS; b++) {
		const struct memd_link *fp = NULL;

		if (!d->bin[b].head != !(d->bin_mask & (UINT64_C(1) << b)))
			FAIL("bin %u: its bit in the mask is wrong", b);
		for (const struct memd_link *k = d->bin[b].head; k; fp = k, k = k->next) {
			const struct memd_ext *e = memd_entry(k, const struct memd_ext, fl);

			if (e->obj || e->bin != b || k->prev != fp)
				FAIL("bin %u holds a wrong extent (at %llu)", b, (unsigned long long)e->off);
			if (!nfree--)
				FAIL("bin %u: more extents in the bins than free extents", b);
		}
		if (fp != d->bin[b].tail)
			FAIL("bin %u: its tail is not its last extent", b);
	}
	if (nfree)
		FAIL("%llu free extents are in no bin", (unsigned long long)nfree);
	return 0;
}

/* The LRU list holds the live objects; the heap the leases and grants. */
static int check_lists(const struct memd_dir *d, uint64_t *read_leases, uint64_t *grants, char *why, size_t whylen)
{
	const struct memd_link *kp = NULL;
	uint64_t n = 0;

	for (const struct memd_link *k = d->lru.head; k; kp = k, k = k->next, n++)
		if (memd_entry(k, const struct memd_obj, lru)->state != MEMD_LIVE || k->prev != kp ||
		    n > d->names.count)
			FAIL("the LRU list is broken at entry %llu", (unsigned long long)n);
	if (kp != d->lru.tail || n != d->names.count)
		FAIL("the LRU list has %llu objects, the name table %llu", (unsigned long long)n,
		     (unsigned long long)d->names.count);
	if (d->heap_len != d->tokens.count || d->heap_len > d->heap_cap)
		FAIL("the lease heap has %llu entries, the token table %llu", (unsigned long long)d->heap_len,
		     (unsigned long long)d->tokens.count);
	for (uint64_t i = 0; i < d->heap_len; i++) {
		const struct memd_lease *l = d->heap[i];

		if (l->heap_i != i)
			FAIL("lease %llu is at %llu in the heap but says %llu", (unsigned long long)l->token,
			     (unsigned long long)i, (unsigned long long)l->heap_i);
		if (i && d->heap[(i - 1) / 2]->expires > l->expires)
			FAIL("the lease heap is out of order at %llu", (unsigned long long)i);
		if (find_token(d, l->token) != l || l->token >= d->next_token << 1)
			FAIL("lease %llu is not found by its token", (unsigned long long)l->token);
		if (l->token & TOKEN_GRANT) {
			++*grants;
			if (l->obj->state != MEMD_GRANTED)
				FAIL("grant %llu is of an object in state %d", (unsigned long long)l->token,
				     (int)l->obj->state);
		} else {
			++*read_leases;
			if (l->obj->state == MEMD_GRANTED || !l->obj->leases)
				FAIL("lease %llu reads an object that has none", (unsigned long long)l->token);
		}
	}
	return 0;
}

int memd_dir_check(const struct memd_dir *d, char *why, size_t whylen)
{
	uint64_t counts[3] = { 0 }, used = 0, retired_bytes = 0, object_bytes = 0, obj_leases = 0, read_leases = 0,
		 grants = 0;
	const uint64_t *st = d->st;
	int r;

	if ((r = check_extents(d, counts, &used, &retired_bytes, &object_bytes, &obj_leases, why, whylen)) < 0 ||
	    (r = check_lists(d, &read_leases, &grants, why, whylen)) < 0)
		return r;
	if (obj_leases != read_leases)
		FAIL("the objects count %llu read leases, the lease list holds %llu", (unsigned long long)obj_leases,
		     (unsigned long long)read_leases);
	if (grants != counts[MEMD_GRANTED])
		FAIL("%llu grants for %llu granted objects", (unsigned long long)grants,
		     (unsigned long long)counts[MEMD_GRANTED]);
	if (counts[MEMD_LIVE] != d->names.count)
		FAIL("%llu live objects, %llu in the name table", (unsigned long long)counts[MEMD_LIVE],
		     (unsigned long long)d->names.count);
	if (st[MEMD_ST_used_bytes] != used || st[MEMD_ST_free_bytes] != d->p.size - used ||
	    st[MEMD_ST_region_bytes] != d->p.size || st[MEMD_ST_objects] != counts[MEMD_LIVE] ||
	    st[MEMD_ST_object_bytes] != object_bytes || st[MEMD_ST_grants] != grants ||
	    st[MEMD_ST_leases] != read_leases || st[MEMD_ST_retired] != counts[MEMD_RETIRED] ||
	    st[MEMD_ST_retired_bytes] != retired_bytes)
		FAIL("a gauge disagrees with the directory (used %llu, objects %llu, grants %llu, leases %llu)",
		     (unsigned long long)used, (unsigned long long)counts[MEMD_LIVE], (unsigned long long)grants,
		     (unsigned long long)read_leases);
	if (st[MEMD_ST_hits] + st[MEMD_ST_misses] != st[MEMD_ST_lookups])
		FAIL("hits and misses do not add up to the lookups");
	return 0;
}
