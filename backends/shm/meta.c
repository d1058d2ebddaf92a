/* SPDX-License-Identifier: Apache-2.0 */
/*
 * meta.c - the metadata of a shm L3 segment: the lock, the hash index, the
 * LRU list, the extent allocator, pins, and the rebuild that repairs all of
 * them after a process died holding the lock.
 *
 * Everything here runs under ctl->lock (layout.h says who writes what).  The
 * lock is held for bookkeeping only, never across a data copy.
 *
 * ALLOCATOR.  The data region is nblocks blocks of block_bytes.  An object
 * owns a chain of extents (runs of contiguous blocks); so does the free
 * list.  Allocation takes extents from the head of the free list, splitting
 * the last one; freeing splices an object's whole chain onto the free list
 * in O(1).  Objects of one size (the usual case: one envelope size per
 * model) therefore get back the single extent an evicted one left.  Free
 * extents are never merged while running; a rebuild makes maximal runs.
 *
 * RECOVERY.  The object table is the truth.  On EOWNERDEAD (or when an op
 * finds an index out of bounds, a cycle or a state that cannot be) the
 * locker rebuilds, from the object table alone: each object's pin count from
 * the pin entries of every slot, each object's extent chain (checked against
 * its length, the bounds and every other chain; a bad one is dropped), the
 * hash index (of two LIVE objects of one name, the newer publish wins), the
 * LRU list (from the stamps), the free-object list, the free extents (every
 * block no object holds) and the gauges.  It writes nothing that a live
 * process holds outside the lock: a pinned object keeps its blocks, and a
 * WRITING object of a LIVE slot keeps its entry.  A rebuild is idempotent,
 * and ctl->dirty stays set until one completes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm.h"

#define HC_SHM_SPIN    128
#define HC_SHM_DAMAGED (-EUCLEAN) /* internal: the metadata is damaged; rebuild and retry */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

int hc__shm_lock(struct hc_shm *be)
{
	struct hc_shm_ctl *ctl = be->seg.ctl;
	bool owner_died = false;
	int ret = EBUSY;

	/* The lock is held for well under a microsecond; a futex round trip
	 * costs about 24 us on these virtual machines, so spin a little first. */
	for (int i = 0; i < HC_SHM_SPIN && ret == EBUSY; i++) {
		ret = pthread_mutex_trylock(&ctl->lock.m);
		if (ret == EBUSY)
			cpu_relax();
	}
	if (ret == EBUSY)
		ret = pthread_mutex_lock(&ctl->lock.m);
	if (ret == EOWNERDEAD) {
		owner_died = true;
		ctl->dirty = 1;
		hc__shm_log(HC_BE_LOG_INFO, "%s: a process died holding the metadata lock; rebuilding the metadata",
			    be->seg.path);
		ret = pthread_mutex_consistent(&ctl->lock.m);
		if (ret != 0) {
			pthread_mutex_unlock(&ctl->lock.m);
			ret = ENOTRECOVERABLE;
		}
	}
	if (ret != 0) {
		hc__shm_warn_once(
			be, HC_SHM_WARN_LOCK,
			"%s: the metadata lock is unusable (%s): remove the segment and let it be created again",
			be->seg.path, strerror(ret));
		return -ret;
	}
	/* Never work on damaged metadata: on failure (no memory) dirty stays
	 * set, this op fails, and the next locker tries again. */
	if (ctl->dirty && (ret = hc__shm_rebuild_locked(be)) < 0) {
		pthread_mutex_unlock(&ctl->lock.m);
		return ret;
	}
	if (owner_died)
		hc__shm_probe_locked(be); /* the dead holder's pins and writes, too */
	return 0;
}

void hc__shm_unlock(struct hc_shm *be)
{
	pthread_mutex_unlock(&be->seg.ctl->lock.m);
}

static uint32_t bucket_of(const struct hc_shm_seg *s, const uint8_t *name)
{
	uint64_t h = s->hash_secret ^ UINT64_C(0x9e3779b97f4a7c15);

	for (int i = 0; i < HC_BE_NAME_BYTES; i += 8) {
		uint64_t w;
		memcpy(&w, name + i, sizeof(w));
		h = (h ^ w) * UINT64_C(0xff51afd7ed558ccd);
		h ^= h >> 32;
	}
	return (uint32_t)h & (s->g.nbuckets - 1);
}

/* Found damage: say so once, rebuild.  The caller retries its step once. */
static void damaged(struct hc_shm *be, const char *what)
{
	hc__shm_warn_once(be, HC_SHM_WARN_CHAIN, "%s: damaged metadata (%s); rebuilding it", be->seg.path, what);
	be->seg.ctl->dirty = 1;
	hc__shm_rebuild_locked(be);
}

static int lookup(struct hc_shm *be, const uint8_t *name, uint32_t *out)
{
	const struct hc_shm_seg *s = &be->seg;
	uint32_t i = s->buckets[bucket_of(s, name)];

	for (uint32_t steps = 0; i; steps++) {
		const struct hc_shm_obj *o = hc__shm_obj(s, i);
		if (!o || o->state != HC_SHM_OBJ_LIVE || steps >= s->g.max_objects)
			return HC_SHM_DAMAGED;
		if (memcmp(o->name, name, HC_BE_NAME_BYTES) == 0)
			break;
		i = o->hnext;
	}
	*out = i;
	return 0;
}

uint32_t hc__shm_lookup_locked(struct hc_shm *be, const uint8_t name[HC_BE_NAME_BYTES])
{
	uint32_t i = 0;

	if (lookup(be, name, &i) == HC_SHM_DAMAGED) {
		damaged(be, "hash chain");
		if (lookup(be, name, &i) < 0)
			return 0;
	}
	return i;
}

static int hash_remove(struct hc_shm *be, uint32_t i)
{
	const struct hc_shm_seg *s = &be->seg;
	struct hc_shm_obj *o = hc__shm_obj(s, i);
	uint32_t *link = &s->buckets[bucket_of(s, o->name)];

	for (uint32_t steps = 0; *link; steps++) {
		struct hc_shm_obj *x = hc__shm_obj(s, *link);
		if (!x || steps >= s->g.max_objects)
			return HC_SHM_DAMAGED;
		if (*link == i) {
			*link = o->hnext;
			o->hnext = 0;
			return 0;
		}
		link = &x->hnext;
	}
	return HC_SHM_DAMAGED;
}

static void hash_insert(const struct hc_shm_seg *s, uint32_t i)
{
	struct hc_shm_obj *o = &s->objs[i - 1];
	uint32_t *head = &s->buckets[bucket_of(s, o->name)];

	o->hnext = *head;
	*head = i;
}

static int lru_unlink(const struct hc_shm_seg *s, uint32_t i)
{
	struct hc_shm_obj *o = hc__shm_obj(s, i);
	struct hc_shm_obj *prev = o->lprev ? hc__shm_obj(s, o->lprev) : NULL;
	struct hc_shm_obj *next = o->lnext ? hc__shm_obj(s, o->lnext) : NULL;

	if ((o->lprev && !prev) || (o->lnext && !next))
		return HC_SHM_DAMAGED;
	if (prev)
		prev->lnext = o->lnext;
	else
		s->ctl->lru_head = o->lnext;
	if (next)
		next->lprev = o->lprev;
	else
		s->ctl->lru_tail = o->lprev;
	o->lprev = o->lnext = 0;
	return 0;
}

static void lru_push_head(const struct hc_shm_seg *s, uint32_t i)
{
	struct hc_shm_obj *o = &s->objs[i - 1];
	struct hc_shm_obj *head = hc__shm_obj(s, s->ctl->lru_head);

	o->lprev = 0;
	o->lnext = head ? s->ctl->lru_head : 0;
	if (head)
		head->lprev = i;
	else
		s->ctl->lru_tail = i;
	s->ctl->lru_head = i;
}

int hc__shm_touch_locked(struct hc_shm *be, uint32_t i)
{
	const struct hc_shm_seg *s = &be->seg;

	s->objs[i - 1].stamp = ++s->ctl->clock;
	if (s->ctl->lru_head == i)
		return 0;
	if (lru_unlink(s, i) < 0) {
		damaged(be, "LRU list");
		return -EIO;
	}
	lru_push_head(s, i);
	return 0;
}

/* The entry's fields as FREE, without touching any list. */
static void reset_entry(struct hc_shm_obj *o)
{
	o->state = HC_SHM_OBJ_FREE;
	o->gen++;
	o->pins = 0;
	o->owner = 0;
	o->length = 0;
	o->hnext = o->lprev = o->lnext = 0;
	o->ext_head = o->ext_tail = 0;
	o->nblocks = 0;
}

void hc__shm_free_obj_locked(struct hc_shm *be, uint32_t i)
{
	const struct hc_shm_seg *s = &be->seg;
	struct hc_shm_ctl *ctl = s->ctl;
	struct hc_shm_obj *o = hc__shm_obj(s, i);
	int64_t tail = hc__shm_block(s, o->ext_tail);

	if (o->ext_head && tail >= 0) { /* splice the whole chain onto the free list */
		s->exts[tail].next = ctl->free_ext;
		ctl->free_ext = o->ext_head;
		ctl->free_blocks += o->nblocks;
	} else if (o->ext_head || o->nblocks) {
		ctl->dirty = 1; /* leaked blocks: the next locker's rebuild finds them */
	}
	reset_entry(o);
	o->hnext = ctl->free_obj;
	ctl->free_obj = i;
}

static int remove_obj(struct hc_shm *be, uint32_t i)
{
	const struct hc_shm_seg *s = &be->seg;
	struct hc_shm_obj *o = &s->objs[i - 1];
	int ret;

	if ((ret = hash_remove(be, i)) < 0 || (ret = lru_unlink(s, i)) < 0)
		return ret;
	s->ctl->nobjects--;
	s->ctl->live_bytes -= o->length;
	s->ctl->live_blocks -= o->nblocks;
	if (o->pins) {
		s->ctl->pinned_blocks -= o->nblocks;
		o->state = HC_SHM_OBJ_DEAD; /* the last unpin frees it */
	} else
		hc__shm_free_obj_locked(be, i);
	return 0;
}

int hc__shm_remove_locked(struct hc_shm *be, uint32_t i)
{
	uint8_t name[HC_BE_NAME_BYTES];

	if (remove_obj(be, i) == 0)
		return 0;
	memcpy(name, be->seg.objs[i - 1].name, sizeof(name));
	damaged(be, "removing an object");
	/* Rebuilt: the object is there or not, for sure now. */
	i = hc__shm_lookup_locked(be, name);
	if (!i)
		return -ENOENT;
	return remove_obj(be, i) == 0 ? 0 : -EIO;
}

/* Evict unpinned LIVE objects from the LRU tail until nb blocks and an
 * entry are free.  An object named 'name' (the one a put will replace) goes
 * last, so readers keep seeing it while anything else can go.  -EAGAIN: the
 * rest is pinned or being written. */
static int make_room(struct hc_shm *be, uint32_t nb, const uint8_t *name, unsigned *evicted)
{
	const struct hc_shm_seg *s = &be->seg;
	struct hc_shm_ctl *ctl = s->ctl;
	bool same_ok = false;
	int ret;

	/* Evict nothing for a put that cannot fit yet. */
	if (ctl->pinned_blocks > ctl->live_blocks || ctl->live_blocks > s->g.nblocks)
		return HC_SHM_DAMAGED;
	if (ctl->free_blocks + (ctl->live_blocks - ctl->pinned_blocks) < nb)
		return -EAGAIN;
	while (ctl->free_blocks < nb || !ctl->free_obj) {
		uint32_t v = ctl->lru_tail, steps = 0;
		while (v) {
			const struct hc_shm_obj *o = hc__shm_obj(s, v);
			if (!o || o->state != HC_SHM_OBJ_LIVE || ++steps > s->g.max_objects)
				return HC_SHM_DAMAGED;
			if (!o->pins && (same_ok || memcmp(o->name, name, HC_BE_NAME_BYTES) != 0))
				break;
			v = o->lprev;
		}
		if (!v) {
			if (same_ok)
				return -EAGAIN;
			same_ok = true;
			continue;
		}
		if ((ret = remove_obj(be, v)) < 0)
			return ret;
		(*evicted)++;
	}
	return 0;
}

/* Move nb blocks from the free list to o's chain. */
static int take_blocks(const struct hc_shm_seg *s, struct hc_shm_obj *o, uint32_t nb)
{
	struct hc_shm_ctl *ctl = s->ctl;

	while (nb) {
		int64_t b = hc__shm_block(s, ctl->free_ext);
		struct hc_shm_ext *e;
		uint32_t len, take;

		if (b < 0)
			return HC_SHM_DAMAGED;
		e = &s->exts[b];
		len = e->len;
		if (len == 0 || len > s->g.nblocks - (uint64_t)b)
			return HC_SHM_DAMAGED;
		take = len <= nb ? len : nb;
		if (take == len) {
			ctl->free_ext = e->next;
		} else {
			struct hc_shm_ext *rest = &s->exts[b + take];
			rest->len = len - take;
			rest->next = e->next;
			ctl->free_ext = (uint32_t)(b + take + 1);
		}
		e->len = take;
		e->next = 0;
		if (o->ext_tail && hc__shm_block(s, o->ext_tail) >= 0)
			s->exts[o->ext_tail - 1].next = (uint32_t)(b + 1);
		else
			o->ext_head = (uint32_t)(b + 1);
		o->ext_tail = (uint32_t)(b + 1);
		o->nblocks += take;
		ctl->free_blocks -= take;
		nb -= take;
	}
	return 0;
}

static int reserve(struct hc_shm *be, const uint8_t *name, uint64_t length, uint32_t nb, uint32_t *obj,
		   unsigned *evicted)
{
	const struct hc_shm_seg *s = &be->seg;
	struct hc_shm_ctl *ctl = s->ctl;
	struct hc_shm_obj *o;
	uint32_t i;
	int ret;

	ret = make_room(be, nb, name, evicted);
	if (ret == -EAGAIN && hc__shm_probe_locked(be)) /* dead openers' pins and writes hold space? */
		ret = make_room(be, nb, name, evicted);
	if (ret < 0)
		return ret;
	i = ctl->free_obj;
	o = hc__shm_obj(s, i);
	if (!o || o->state != HC_SHM_OBJ_FREE)
		return HC_SHM_DAMAGED;
	ctl->free_obj = o->hnext;
	o->hnext = 0;
	memcpy(o->name, name, HC_BE_NAME_BYTES);
	o->length = length;
	o->owner = (uint32_t)be->slot;
	o->nblocks = 0;
	o->ext_head = o->ext_tail = 0;
	o->state = HC_SHM_OBJ_WRITING;
	*obj = i;
	return take_blocks(s, o, nb);
}

int hc__shm_reserve_locked(struct hc_shm *be, const uint8_t name[HC_BE_NAME_BYTES], uint64_t length, uint32_t *obj,
			   uint32_t *gen, unsigned *evicted)
{
	const struct hc_shm_seg *s = &be->seg;
	uint64_t nb = (length + s->g.block_bytes - 1) >> s->block_shift;
	int ret;

	*evicted = 0;
	if (length == 0 || nb > s->g.nblocks)
		return -ENOSPC;
	for (int tries = 0;; tries++) {
		*obj = 0;
		ret = reserve(be, name, length, (uint32_t)nb, obj, evicted);
		if (ret != HC_SHM_DAMAGED)
			break;
		if (tries)
			return -EIO;
		/* A WRITING entry that we took stays so until the rebuild: it
		 * has our LIVE slot, so the rebuild keeps it only if its chain
		 * is whole; free it either way and start again. */
		damaged(be, "free lists");
		if (*obj && s->objs[*obj - 1].state == HC_SHM_OBJ_WRITING &&
		    s->objs[*obj - 1].owner == (uint32_t)be->slot)
			hc__shm_free_obj_locked(be, *obj);
	}
	if (ret == 0)
		*gen = s->objs[*obj - 1].gen;
	return ret;
}

static struct hc_shm_obj *own_write(struct hc_shm *be, uint32_t i, uint32_t gen)
{
	struct hc_shm_obj *o = hc__shm_obj(&be->seg, i);

	if (!o || o->state != HC_SHM_OBJ_WRITING || o->gen != gen || o->owner != (uint32_t)be->slot)
		return NULL;
	return o;
}

int hc__shm_publish_locked(struct hc_shm *be, uint32_t i, uint32_t gen)
{
	const struct hc_shm_seg *s = &be->seg;
	struct hc_shm_obj *o;
	uint32_t old = 0;
	int ret;

	for (int tries = 0;; tries++) {
		/* NULL: a rebuild dropped our write (its chain was damaged). */
		if (!(o = own_write(be, i, gen)))
			return -EIO;
		ret = lookup(be, o->name, &old);
		if (ret == 0 && old)
			ret = remove_obj(be, old);
		if (ret == 0)
			break;
		if (tries)
			return -EIO;
		damaged(be, "replacing an object");
	}
	/* The old object is gone from the index; ours takes its place in the
	 * same critical section, so a reader finds one or the other. */
	o->state = HC_SHM_OBJ_LIVE;
	o->owner = 0;
	o->seq = o->stamp = ++s->ctl->clock;
	hash_insert(s, i);
	lru_push_head(s, i);
	s->ctl->nobjects++;
	s->ctl->live_bytes += o->length;
	s->ctl->live_blocks += o->nblocks;
	return 0;
}

void hc__shm_abort_locked(struct hc_shm *be, uint32_t i, uint32_t gen)
{
	if (own_write(be, i, gen))
		hc__shm_free_obj_locked(be, i);
}

static struct hc_shm_pin *pin_entry(const struct hc_shm_seg *s, uint32_t slot, uint32_t entry)
{
	return &s->pins[(size_t)slot * s->g.pins_per_opener + entry];
}

void hc__shm_pin_locked(struct hc_shm *be, uint32_t i, uint32_t entry)
{
	struct hc_shm_obj *o = &be->seg.objs[i - 1];
	struct hc_shm_pin *p = pin_entry(&be->seg, (uint32_t)be->slot, entry);

	if (o->pins++ == 0)
		be->seg.ctl->pinned_blocks += o->nblocks; /* pins are taken on LIVE objects only */
	p->obj = i;
	p->gen = o->gen;
}

void hc__shm_unpin_locked(struct hc_shm *be, uint32_t slot, uint32_t entry)
{
	struct hc_shm_pin *p = pin_entry(&be->seg, slot, entry);
	uint32_t i = p->obj, gen = p->gen;
	struct hc_shm_obj *o = hc__shm_obj(&be->seg, i);

	p->obj = p->gen = 0;
	if (!o || o->gen != gen || !o->pins || (o->state != HC_SHM_OBJ_LIVE && o->state != HC_SHM_OBJ_DEAD))
		return; /* a rebuild dropped the object (its entry no longer matches) */
	if (--o->pins)
		return;
	if (o->state == HC_SHM_OBJ_DEAD)
		hc__shm_free_obj_locked(be, i);
	else
		be->seg.ctl->pinned_blocks -= o->nblocks;
}

/* ---- rebuild and check: bitmaps of blocks, private memory */

static bool bits_any(const uint64_t *w, uint64_t b, uint64_t n)
{
	for (uint64_t i = b; i < b + n; i++)
		if (w[i >> 6] & (UINT64_C(1) << (i & 63)))
			return true;
	return false;
}

static void bits_set(uint64_t *w, uint64_t b, uint64_t n, bool on)
{
	for (uint64_t i = b; i < b + n; i++) {
		if (on)
			w[i >> 6] |= UINT64_C(1) << (i & 63);
		else
			w[i >> 6] &= ~(UINT64_C(1) << (i & 63));
	}
}

/* Unmark the first n extents of o's chain (each was checked by chain_mark). */
static void chain_unmark(const struct hc_shm_seg *s, const struct hc_shm_obj *o, uint64_t *bits, uint32_t n)
{
	uint32_t e = o->ext_head;

	for (uint32_t k = 0; k < n && e; k++) {
		const struct hc_shm_ext *x = &s->exts[e - 1];
		bits_set(bits, e - 1, x->len, false);
		e = x->next;
	}
}

/*
 * Check o's extent chain (bounds, no cycle, no block another chain marked,
 * the block count, the tail) and mark its blocks.  0, or -1 with nothing
 * marked.
 */
static int chain_mark(const struct hc_shm_seg *s, const struct hc_shm_obj *o, uint64_t *bits)
{
	uint32_t e = o->ext_head, last = 0, n = 0;
	uint64_t total = 0;

	while (e) {
		int64_t b = hc__shm_block(s, e);
		const struct hc_shm_ext *x;

		if (b < 0 || n >= o->nblocks)
			break;
		x = &s->exts[b];
		if (x->len == 0 || x->len > s->g.nblocks - (uint64_t)b || bits_any(bits, (uint64_t)b, x->len))
			break;
		bits_set(bits, (uint64_t)b, x->len, true);
		n++;
		total += x->len;
		last = e;
		e = x->next;
	}
	if (!e && total && total == o->nblocks && last == o->ext_tail)
		return 0;
	chain_unmark(s, o, bits, n);
	return -1;
}

static bool length_fits(const struct hc_shm_seg *s, const struct hc_shm_obj *o)
{
	uint64_t cap = (uint64_t)s->g.nblocks << s->block_shift;

	return o->length >= 1 && o->length <= cap && o->nblocks == (o->length + s->g.block_bytes - 1) >> s->block_shift;
}

/* Whether an entry in this state holds blocks and should keep them. */
static bool keeps_blocks(const struct hc_shm_seg *s, const struct hc_shm_obj *o)
{
	switch (o->state) {
	case HC_SHM_OBJ_WRITING:
		/* A writer of a LIVE slot may be copying now; a dead one's slot is
		 * recovered by the probe that follows a rebuild. */
		return o->owner < s->g.max_openers &&
		       atomic_load_explicit(&s->slots[o->owner].state, memory_order_acquire) == HC_SHM_SLOT_LIVE;
	case HC_SHM_OBJ_LIVE:
		return true;
	case HC_SHM_OBJ_DEAD:
		return o->pins > 0;
	default:
		return false;
	}
}

static bool pin_matches(const struct hc_shm_seg *s, const struct hc_shm_pin *p)
{
	const struct hc_shm_obj *o = hc__shm_obj(s, p->obj);

	return o && o->gen == p->gen && (o->state == HC_SHM_OBJ_LIVE || o->state == HC_SHM_OBJ_DEAD);
}

/* Of two LIVE objects of one name, retire the older: DEAD if pinned, else free. */
static void retire(const struct hc_shm_seg *s, uint32_t i, uint64_t *bits)
{
	struct hc_shm_obj *o = &s->objs[i - 1];

	o->hnext = 0;
	if (o->pins) {
		o->state = HC_SHM_OBJ_DEAD;
		return;
	}
	chain_unmark(s, o, bits, o->nblocks);
	reset_entry(o);
}

static void rebuild_index(const struct hc_shm_seg *s, uint64_t *bits)
{
	memset(s->buckets, 0, (size_t)s->g.nbuckets * sizeof(*s->buckets));
	for (uint32_t i = 1; i <= s->g.max_objects; i++) {
		struct hc_shm_obj *o = &s->objs[i - 1];
		uint32_t *link, *dup = NULL;

		if (o->state != HC_SHM_OBJ_LIVE)
			continue;
		link = &s->buckets[bucket_of(s, o->name)];
		for (uint32_t *l = link; *l; l = &s->objs[*l - 1].hnext)
			if (memcmp(s->objs[*l - 1].name, o->name, HC_BE_NAME_BYTES) == 0)
				dup = l;
		if (dup && s->objs[*dup - 1].seq > o->seq) {
			retire(s, i, bits);
			continue;
		}
		if (dup) {
			uint32_t d = *dup;
			*dup = s->objs[d - 1].hnext;
			retire(s, d, bits);
		}
		o->hnext = *link;
		*link = i;
	}
}

struct lru_ord {
	uint64_t stamp;
	uint32_t i;
};

static int ord_cmp(const void *a, const void *b)
{
	const struct lru_ord *x = a, *y = b;

	if (x->stamp != y->stamp)
		return x->stamp < y->stamp ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/* LRU list (from the stamps), free entries, gauges. */
static void rebuild_lists(const struct hc_shm_seg *s, struct lru_ord *ord)
{
	struct hc_shm_ctl *ctl = s->ctl;
	uint64_t bytes = 0, blocks = 0, pinned = 0, clock = ctl->clock;
	uint32_t n = 0;

	ctl->lru_head = ctl->lru_tail = 0;
	ctl->free_obj = 0;
	for (uint32_t i = s->g.max_objects; i >= 1; i--) {
		struct hc_shm_obj *o = &s->objs[i - 1];
		o->lprev = o->lnext = 0;
		if (o->state == HC_SHM_OBJ_FREE) {
			o->hnext = ctl->free_obj;
			ctl->free_obj = i;
		} else if (o->state == HC_SHM_OBJ_LIVE) {
			ord[n].stamp = o->stamp;
			ord[n++].i = i;
			bytes += o->length;
			blocks += o->nblocks;
			pinned += o->pins ? o->nblocks : 0;
			clock = o->stamp > clock ? o->stamp : clock;
			clock = o->seq > clock ? o->seq : clock;
		} else {
			o->hnext = 0;
		}
	}
	qsort(ord, n, sizeof(*ord), ord_cmp);
	for (uint32_t k = 0; k < n; k++)
		lru_push_head(s, ord[k].i); /* the newest ends at the head */
	ctl->nobjects = n;
	ctl->live_bytes = bytes;
	ctl->live_blocks = blocks;
	ctl->pinned_blocks = pinned;
	ctl->clock = clock;
}

/* The free extents: every maximal run of blocks no object holds, lowest first. */
static void rebuild_free(const struct hc_shm_seg *s, const uint64_t *bits)
{
	struct hc_shm_ctl *ctl = s->ctl;
	uint64_t nfree = 0;
	uint32_t tail = 0;

	ctl->free_ext = 0;
	for (uint64_t b = 0; b < s->g.nblocks;) {
		uint64_t len = 0;
		if (bits[b >> 6] == ~UINT64_C(0) && !(b & 63)) {
			b += 64;
			continue;
		}
		while (b + len < s->g.nblocks && !(bits[(b + len) >> 6] & (UINT64_C(1) << ((b + len) & 63))))
			len++;
		if (!len) {
			b++;
			continue;
		}
		s->exts[b].len = (uint32_t)len;
		s->exts[b].next = 0;
		if (tail)
			s->exts[tail - 1].next = (uint32_t)(b + 1);
		else
			ctl->free_ext = (uint32_t)(b + 1);
		tail = (uint32_t)(b + 1);
		nfree += len;
		b += len;
	}
	ctl->free_blocks = nfree;
}

int hc__shm_rebuild_locked(struct hc_shm *be)
{
	const struct hc_shm_seg *s = &be->seg;
	const struct hc_shm_geom *g = &s->g;
	size_t npins = (size_t)g->max_openers * g->pins_per_opener;
	uint64_t *bits = calloc(((size_t)g->nblocks + 63) / 64, sizeof(*bits));
	struct lru_ord *ord = calloc(g->max_objects, sizeof(*ord));
	uint32_t dropped = 0;
	int ret = 0;

	if (!bits || !ord) {
		hc__shm_warn_once(be, HC_SHM_WARN_NOMEM,
				  "%s: no memory to rebuild the metadata; the next op tries again", s->path);
		ret = -ENOMEM;
		goto out;
	}
	/* 1. Pin counts from every slot's pin entries. */
	for (uint32_t i = 0; i < g->max_objects; i++)
		s->objs[i].pins = 0;
	for (size_t k = 0; k < npins; k++)
		if (s->pins[k].obj && pin_matches(s, &s->pins[k]))
			s->objs[s->pins[k].obj - 1].pins++;
	/* 2. Who holds which blocks: only whole, disjoint chains survive. */
	for (uint32_t i = 0; i < g->max_objects; i++) {
		struct hc_shm_obj *o = &s->objs[i];
		if (keeps_blocks(s, o) && length_fits(s, o) && chain_mark(s, o, bits) == 0)
			continue;
		dropped += o->state != HC_SHM_OBJ_FREE;
		reset_entry(o);
	}
	/* 3. Pin entries of what was dropped match nothing now: clear them. */
	for (size_t k = 0; k < npins; k++)
		if (s->pins[k].obj && !pin_matches(s, &s->pins[k]))
			s->pins[k].obj = s->pins[k].gen = 0;
	rebuild_index(s, bits);
	rebuild_lists(s, ord);
	rebuild_free(s, bits);
	s->ctl->dirty = 0;
	atomic_fetch_add_explicit(&s->ctl->rebuilds, 1, memory_order_relaxed);
	hc__shm_log(HC_BE_LOG_INFO, "%s: metadata rebuilt: %" PRIu32 " objects, %" PRIu32 " entries dropped", s->path,
		    s->ctl->nobjects, dropped);
out:
	free(ord);
	free(bits);
	return ret;
}

/* ---- check: read-only, for tests and ctl "check" */

#define CHECK_FAIL(...)                                                                                                \
	do {                                                                                                           \
		snprintf(out, outlen, __VA_ARGS__);                                                                    \
		ret = -EUCLEAN;                                                                                        \
		goto done;                                                                                             \
	} while (0)

static int check_objects(const struct hc_shm_seg *s, uint64_t *bits, uint32_t *npins, char *out, size_t outlen)
{
	size_t total = (size_t)s->g.max_openers * s->g.pins_per_opener;
	int ret = 0;

	for (size_t k = 0; k < total; k++) {
		const struct hc_shm_pin *p = &s->pins[k];
		if (!p->obj)
			continue;
		if (!pin_matches(s, p))
			CHECK_FAIL("pin entry %zu of slot %zu names object %" PRIu32 " gen %" PRIu32
				   ", which is not pinnable",
				   k % s->g.pins_per_opener, k / s->g.pins_per_opener, p->obj, p->gen);
		npins[p->obj - 1]++;
	}
	for (uint32_t i = 0; i < s->g.max_objects; i++) {
		const struct hc_shm_obj *o = &s->objs[i];
		if (o->state == HC_SHM_OBJ_FREE) {
			if (o->ext_head || o->nblocks || o->pins)
				CHECK_FAIL("object %" PRIu32 " is FREE but holds blocks or pins", i + 1);
			continue;
		}
		if (o->state > HC_SHM_OBJ_DEAD)
			CHECK_FAIL("object %" PRIu32 " has state %" PRIu32, i + 1, o->state);
		if (o->pins != npins[i])
			CHECK_FAIL("object %" PRIu32 " counts %" PRIu32 " pins, its entries say %" PRIu32, i + 1,
				   o->pins, npins[i]);
		if (o->state == HC_SHM_OBJ_DEAD && !o->pins)
			CHECK_FAIL("object %" PRIu32 " is DEAD and unpinned (leaked)", i + 1);
		if (o->state == HC_SHM_OBJ_WRITING && o->owner >= s->g.max_openers)
			CHECK_FAIL("object %" PRIu32 " is written by slot %" PRIu32 ", out of range", i + 1, o->owner);
		if (!length_fits(s, o) || chain_mark(s, o, bits) < 0)
			CHECK_FAIL("object %" PRIu32 " has a bad extent chain or length", i + 1);
	}
done:
	return ret;
}

static int check_free(const struct hc_shm_seg *s, uint64_t *bits, char *out, size_t outlen)
{
	const struct hc_shm_ctl *ctl = s->ctl;
	uint64_t nfree = 0, marked = 0;
	uint32_t e = ctl->free_ext, steps = 0, nentries = 0;
	int ret = 0;

	for (; e; e = s->exts[e - 1].next) {
		int64_t b = hc__shm_block(s, e);
		if (b < 0 || ++steps > s->g.nblocks)
			CHECK_FAIL("the free extent list is out of bounds or has a cycle");
		if (!s->exts[b].len || s->exts[b].len > s->g.nblocks - (uint64_t)b ||
		    bits_any(bits, (uint64_t)b, s->exts[b].len))
			CHECK_FAIL("free extent at block %" PRId64 " overlaps an object or is out of bounds", b);
		bits_set(bits, (uint64_t)b, s->exts[b].len, true);
		nfree += s->exts[b].len;
	}
	if (nfree != ctl->free_blocks)
		CHECK_FAIL("free_blocks is %" PRIu64 ", the free list holds %" PRIu64, ctl->free_blocks, nfree);
	for (uint64_t b = 0; b < s->g.nblocks; b++)
		marked += (bits[b >> 6] >> (b & 63)) & 1;
	if (marked != s->g.nblocks)
		CHECK_FAIL("%" PRIu64 " blocks are neither free nor in an object (leaked)", s->g.nblocks - marked);
	for (uint32_t i = ctl->free_obj; i; i = s->objs[i - 1].hnext) {
		if (!hc__shm_obj(s, i) || s->objs[i - 1].state != HC_SHM_OBJ_FREE || ++nentries > s->g.max_objects)
			CHECK_FAIL("the free object list holds object %" PRIu32 ", which is not FREE, or has a cycle",
				   i);
	}
	for (uint32_t i = 0; i < s->g.max_objects; i++)
		nentries -= s->objs[i].state == HC_SHM_OBJ_FREE;
	if (nentries)
		CHECK_FAIL("the free object list misses FREE objects");
done:
	return ret;
}

static int check_index(const struct hc_shm_seg *s, uint32_t *seen, char *out, size_t outlen)
{
	const struct hc_shm_ctl *ctl = s->ctl;
	uint32_t nlive = 0, steps = 0, prev = 0, i;
	uint64_t bytes = 0, blocks = 0, pinned = 0;
	int ret = 0;

	for (i = 0; i < s->g.max_objects; i++) {
		const struct hc_shm_obj *o = &s->objs[i];
		if (o->state != HC_SHM_OBJ_LIVE)
			continue;
		nlive++;
		bytes += o->length;
		blocks += o->nblocks;
		pinned += o->pins ? o->nblocks : 0;
		seen[i] = 0;
	}
	for (uint32_t b = 0; b < s->g.nbuckets; b++)
		for (i = s->buckets[b]; i; i = s->objs[i - 1].hnext) {
			if (!hc__shm_obj(s, i) || s->objs[i - 1].state != HC_SHM_OBJ_LIVE || ++steps > nlive ||
			    bucket_of(s, s->objs[i - 1].name) != b)
				CHECK_FAIL("bucket %" PRIu32 " holds object %" PRIu32
					   ", not LIVE or not of that bucket",
					   b, i);
			seen[i - 1] |= 1;
			for (uint32_t j = s->objs[i - 1].hnext; j && hc__shm_obj(s, j); j = s->objs[j - 1].hnext)
				if (memcmp(s->objs[j - 1].name, s->objs[i - 1].name, HC_BE_NAME_BYTES) == 0)
					CHECK_FAIL("objects %" PRIu32 " and %" PRIu32 " are LIVE with one name", i, j);
		}
	if (steps != nlive)
		CHECK_FAIL("the hash index holds %" PRIu32 " of %" PRIu32 " LIVE objects", steps, nlive);
	steps = 0;
	for (i = ctl->lru_head; i; prev = i, i = s->objs[i - 1].lnext) {
		if (!hc__shm_obj(s, i) || s->objs[i - 1].state != HC_SHM_OBJ_LIVE || ++steps > nlive ||
		    s->objs[i - 1].lprev != prev || (seen[i - 1] & 2))
			CHECK_FAIL("the LRU list is broken at object %" PRIu32, i);
		seen[i - 1] |= 2;
	}
	if (steps != nlive || prev != ctl->lru_tail)
		CHECK_FAIL("the LRU list holds %" PRIu32 " of %" PRIu32 " LIVE objects, or its tail is wrong", steps,
			   nlive);
	if (ctl->nobjects != nlive || ctl->live_bytes != bytes)
		CHECK_FAIL("the gauges say %" PRIu32 " objects of %" PRIu64 " bytes; there are %" PRIu32 " of %" PRIu64,
			   ctl->nobjects, ctl->live_bytes, nlive, bytes);
	if (ctl->live_blocks != blocks || ctl->pinned_blocks != pinned)
		CHECK_FAIL("the gauges say %" PRIu64 " live blocks, %" PRIu64 " pinned; there are %" PRIu64
			   ", %" PRIu64,
			   ctl->live_blocks, ctl->pinned_blocks, blocks, pinned);
	snprintf(out, outlen, "ok: %" PRIu32 " objects, %" PRIu64 " bytes, %" PRIu64 " free blocks", nlive, bytes,
		 ctl->free_blocks);
done:
	return ret;
}

int hc__shm_check_locked(struct hc_shm *be, char *out, size_t outlen)
{
	const struct hc_shm_seg *s = &be->seg;
	uint64_t *bits = calloc(((size_t)s->g.nblocks + 63) / 64, sizeof(*bits));
	uint32_t *aux = calloc(s->g.max_objects, sizeof(*aux));
	int ret = -ENOMEM;

	if (bits && aux) {
		if (s->ctl->dirty) {
			snprintf(out, outlen, "the metadata is marked for a rebuild");
			ret = -EUCLEAN;
		} else if ((ret = check_objects(s, bits, aux, out, outlen)) == 0 &&
			   (ret = check_free(s, bits, out, outlen)) == 0) {
			ret = check_index(s, aux, out, outlen);
		}
	} else {
		snprintf(out, outlen, "no memory for the check");
	}
	free(aux);
	free(bits);
	return ret;
}
