/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lru.c - the list behind exact LRU (HC_EVICT_LRU): the pages in the order
 * of their stamps, oldest first, so the evictor's next victim is at the
 * head instead of at the end of a scan of every page.
 *
 * Shape.  toc[LRU] holds npages + 1 nodes (struct hc_seg_lru); node npages
 * is the head of a circle.  A page is on the list when its node's next is
 * not HC_LRU_OFF.
 *
 * Notes on synchronization.  Every node, and ctl->lru_clock, is written
 * only under ctl->lru_lock, a robust process-shared mutex.  A touch takes
 * its stamps from the clock and moves its pages to the tail under the
 * lock, so the list is always in stamp order: the order in which the
 * evictor used to sort every candidate (stamps are unique, so the deeper
 * page never needs to break a tie).  Who is on the list:
 *   - every page touched since it was last taken off (a touch links it);
 *   - orphans (pages of a dead rank that nobody owns), at the head, by the
 *     recovery or repair that makes them: they are nobody's cache, so they
 *     go first (the last one made first; a rebuild orders them by stamp);
 *   - a READY cache page the sweep finds off the list (its reserver died
 *     before its touch), at the tail with a fresh stamp: it is the newest.
 * Who takes a page off: the evictor, for the victims it retires, and for
 * the pages its walk finds that only a touch can bring back (FREE,
 * QUARANTINE, READY without a key): so a page freed some other way costs
 * one step of one walk.  The evictor retires victims with the lock held.
 * Lock order: lru_lock, then an index stripe (hc__unkey_at); nothing takes
 * lru_lock holding a stripe.
 *
 * Deaths.  A process that dies holding the lock may leave a node half
 * linked: the next locker gets EOWNERDEAD and rebuilds the whole list from
 * the page table (lru_rebuild: stamps, sorted), every recovery takes the
 * lock for that reason, and the sweep of every recovery links any READY
 * cache page a death left off the list (a reservation its reserver died
 * holding, which a co-writer completed): hc__lru_heal.  A node read from
 * the segment is bounds-checked before it indexes anything; a list found
 * broken is rebuilt the same way.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

int hc__lru_kind(uint32_t f)
{
	return (f & HC_PF_KEYED) || (f & (HC_PF_ANON | HC_PF_ORPHAN)) == (HC_PF_ANON | HC_PF_ORPHAN);
}

struct lru_ent {
	uint64_t stamp;
	uint32_t depth, id;
	int orphan;
};

/* Orphans first; then the smaller stamp, the deeper page, the lower id. */
static int cmp_ent(const void *x, const void *y)
{
	const struct lru_ent *a = x, *b = y;

	if (a->orphan != b->orphan)
		return a->orphan ? -1 : 1;
	if (a->stamp != b->stamp)
		return a->stamp < b->stamp ? -1 : 1;
	if (a->depth != b->depth)
		return a->depth > b->depth ? -1 : 1;
	return (a->id > b->id) - (a->id < b->id);
}

/* The list anew from the page table, the lock held: every live cache page
 * and every orphan, in the evictor's order. */
static void lru_rebuild(struct hc_pool *p)
{
	const uint32_t H = p->g.npages;
	struct hc_seg_lru *l = p->lru;
	struct lru_ent *e = malloc((size_t)H * sizeof(*e));
	uint32_t n = 0, prev = H;
	uint64_t top = 0;

	for (uint32_t i = 0; i < H; i++) {
		uint64_t w = atomic_load_explicit(&p->pages[i].word, memory_order_relaxed);
		uint32_t f = atomic_load_explicit(&p->pages[i].flags, memory_order_relaxed);
		unsigned st = hc__w_state(w);

		atomic_store_explicit(&l[i].next, HC_LRU_OFF, memory_order_relaxed);
		atomic_store_explicit(&l[i].prev, HC_LRU_OFF, memory_order_relaxed);
		if (!e || (st != HC_PAGE_READY && st != HC_PAGE_RESERVED && st != HC_PAGE_FREEING) || !hc__lru_kind(f))
			continue;
		e[n].stamp = atomic_load_explicit(&p->pages[i].stamp, memory_order_relaxed);
		e[n].depth = atomic_load_explicit(&p->pages[i].depth, memory_order_relaxed);
		e[n].id = i;
		e[n].orphan = !(f & HC_PF_KEYED);
		top = e[n].stamp > top ? e[n].stamp : top;
		n++;
	}
	if (e)
		qsort(e, n, sizeof(*e), cmp_ent);
	for (uint32_t k = 0; k < n; k++) {
		atomic_store_explicit(&l[e[k].id].prev, prev, memory_order_relaxed);
		atomic_store_explicit(&l[prev].next, e[k].id, memory_order_relaxed);
		prev = e[k].id;
	}
	atomic_store_explicit(&l[prev].next, H, memory_order_relaxed);
	atomic_store_explicit(&l[H].prev, prev, memory_order_relaxed);
	if (atomic_load_explicit(&p->ctl->lru_clock, memory_order_relaxed) < top)
		atomic_store_explicit(&p->ctl->lru_clock, top, memory_order_relaxed);
	if (!e)
		hc__log(HC_LOG_ERR, "pool '%s': no memory to rebuild the LRU list; nothing is evicted until a recovery",
			p->info.name);
	free(e);
}

void hc__lru_lock(struct hc_pool *p)
{
	pthread_mutex_t *m = &p->ctl->lru_lock.m;
	int r = hc__lock_shared(m);

	if (r == EOWNERDEAD) {
		HC_POINT(lru_rebuild);
		lru_rebuild(p);
		hc__log(HC_LOG_WARN, "pool '%s': a process died holding the LRU list; rebuilt it from the page table",
			p->info.name);
		pthread_mutex_consistent(m);
	} else if (r != 0) {
		/* Only a scribbled mutex gets here: the list is a hint, and
		 * check and repair mend it. */
		hc__log(HC_LOG_ERR, "pool '%s': the LRU list's lock is unusable (%s); run hicache-pool repair",
			p->info.name, strerror(r));
	}
}

void hc__lru_unlock(struct hc_pool *p)
{
	hc__unlock_shared(&p->ctl->lru_lock.m);
}

/* Node id's links, checked: 0, or -1 if they point outside the nodes. */
static int links(const struct hc_pool *p, uint32_t id, uint32_t *prev, uint32_t *next)
{
	if (id > p->g.npages)
		return -1;
	*prev = atomic_load_explicit(&p->lru[id].prev, memory_order_relaxed);
	*next = atomic_load_explicit(&p->lru[id].next, memory_order_relaxed);
	return *next == HC_LRU_OFF || (*prev <= p->g.npages && *next <= p->g.npages) ? 0 : -1;
}

/* Take node id off the list (the lock held); -1 if the list is broken:
 * a link out of range, or neighbours that do not point back at it (a
 * scribbled link would otherwise cut a run of pages off the list). */
static int unlink_node(struct hc_pool *p, uint32_t id)
{
	struct hc_seg_lru *l = p->lru;
	uint32_t prev, next;

	if (links(p, id, &prev, &next) < 0)
		return -1;
	if (next == HC_LRU_OFF)
		return 0;
	if (atomic_load_explicit(&l[prev].next, memory_order_relaxed) != id ||
	    atomic_load_explicit(&l[next].prev, memory_order_relaxed) != id)
		return -1;
	atomic_store_explicit(&l[prev].next, next, memory_order_relaxed);
	atomic_store_explicit(&l[next].prev, prev, memory_order_relaxed);
	atomic_store_explicit(&l[id].next, HC_LRU_OFF, memory_order_relaxed);
	atomic_store_explicit(&l[id].prev, HC_LRU_OFF, memory_order_relaxed);
	return 0;
}

/* Link node id (off the list) after node 'after' (the lock held). */
static int link_after(struct hc_pool *p, uint32_t id, uint32_t after)
{
	struct hc_seg_lru *l = p->lru;
	uint32_t prev, next;

	if (links(p, after, &prev, &next) < 0 || next == HC_LRU_OFF)
		return -1;
	atomic_store_explicit(&l[id].prev, after, memory_order_relaxed);
	atomic_store_explicit(&l[id].next, next, memory_order_relaxed);
	atomic_store_explicit(&l[next].prev, id, memory_order_relaxed);
	atomic_store_explicit(&l[after].next, id, memory_order_relaxed);
	return 0;
}

/* Move node id to the tail (the newest), or to the head (the oldest);
 * a broken list is rebuilt. */
static void relink(struct hc_pool *p, uint32_t id, int at_head)
{
	uint32_t H = p->g.npages, after;

	if (unlink_node(p, id) == 0) {
		HC_POINT(lru_moving);
		after = at_head ? H : atomic_load_explicit(&p->lru[H].prev, memory_order_relaxed);
		if (after <= H && link_after(p, id, after) == 0)
			return;
	}
	hc__lru_mend(p);
}

void hc__lru_touch(struct hc_pool *p, const hc_page_t *pages, unsigned n)
{
	uint64_t base;

	hc__lru_lock(p);
	base = atomic_load_explicit(&p->ctl->lru_clock, memory_order_relaxed);
	atomic_store_explicit(&p->ctl->lru_clock, base + n, memory_order_relaxed);
	/* Last to first: a chain's root ends the newest of its chain. */
	for (unsigned i = n; i-- > 0;) {
		uint32_t id = HC_PAGE_ID(pages[i]);
		_Atomic uint64_t *st;
		uint64_t want = base + (n - i);

		if (pages[i] == HC_PAGE_NONE || id >= p->g.npages)
			continue;
		st = &p->pages[id].stamp;
		if (atomic_load_explicit(st, memory_order_relaxed) < want)
			atomic_store_explicit(st, want, memory_order_relaxed);
		relink(p, id, 0);
	}
	hc__lru_unlock(p);
}

int64_t hc__lru_first(const struct hc_pool *p)
{
	uint32_t n = atomic_load_explicit(&p->lru[p->g.npages].next, memory_order_relaxed);

	return n <= p->g.npages ? (int64_t)n : -1;
}

void hc__lru_mend(struct hc_pool *p)
{
	hc__log(HC_LOG_ERR, "pool '%s': the LRU list is broken; rebuilt it from the page table", p->info.name);
	lru_rebuild(p);
}

int64_t hc__lru_next(const struct hc_pool *p, uint32_t id)
{
	uint32_t prev, next;

	if (id >= p->g.npages || links(p, id, &prev, &next) < 0 || next == HC_LRU_OFF)
		return -1;
	return next;
}

int hc__lru_drop(struct hc_pool *p, uint32_t id)
{
	if (id >= p->g.npages || unlink_node(p, id) == 0)
		return 0;
	hc__lru_mend(p);
	return 1;
}

void hc__lru_repair(struct hc_pool *p)
{
	hc__lru_lock(p);
	lru_rebuild(p);
	hc__lru_unlock(p);
}

/* Page id is live and should be listed: link it if it is not, an orphan
 * at the head, a cache page at the tail with a fresh stamp (so the list
 * stays in stamp order). */
void hc__lru_heal(struct hc_pool *p, uint32_t id, int orphan)
{
	uint32_t prev, next;

	if (!p->lru || id >= p->g.npages)
		return;
	hc__lru_lock(p);
	if (links(p, id, &prev, &next) < 0 || next == HC_LRU_OFF || orphan) {
		uint64_t s = atomic_load_explicit(&p->ctl->lru_clock, memory_order_relaxed) + 1;

		if (!orphan) {
			atomic_store_explicit(&p->ctl->lru_clock, s, memory_order_relaxed);
			atomic_store_explicit(&p->pages[id].stamp, s, memory_order_relaxed);
		}
		relink(p, id, orphan);
	}
	hc__lru_unlock(p);
}

static void census_say(hc__check_fn report, void *arg, int *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void census_say(hc__check_fn report, void *arg, int *n, const char *fmt, ...)
{
	char line[256];
	va_list ap;

	(*n)++;
	if (!report)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	report(arg, line);
}

/* Walk the list with its lock held: is it a circle through its head, each
 * node linked both ways, the cache pages in stamp order?  While quiescent,
 * is every live page it should hold on it? */
int hc__lru_census(struct hc_pool *p, int quiescent, hc__check_fn report, void *arg)
{
	const uint32_t H = p->g.npages;
	struct hc_seg_lru *l = p->lru;
	uint8_t *on;
	uint32_t id, prev = H, steps = 0;
	uint64_t last = 0;
	int n = 0;

	if (!l)
		return 0;
	if (!(on = calloc(H, 1))) {
		census_say(report, arg, &n, "LRU list: no memory to check it");
		return n;
	}
	hc__lru_lock(p);
	for (id = atomic_load_explicit(&l[H].next, memory_order_relaxed); id != H; steps++) {
		uint64_t w, stamp;
		uint32_t f;

		if (id > H || steps >= H || on[id]) {
			census_say(report, arg, &n, "LRU list: %s after node %u",
				   id > H   ? "a link out of range"
				   : on[id] ? "a cycle"
					    : "longer than the pool",
				   prev);
			break;
		}
		on[id] = 1;
		if (atomic_load_explicit(&l[id].prev, memory_order_relaxed) != prev)
			census_say(report, arg, &n, "LRU list: page %u's back link is %u, not %u", id,
				   atomic_load_explicit(&l[id].prev, memory_order_relaxed), prev);
		w = atomic_load_explicit(&p->pages[id].word, memory_order_relaxed);
		f = atomic_load_explicit(&p->pages[id].flags, memory_order_relaxed);
		stamp = atomic_load_explicit(&p->pages[id].stamp, memory_order_relaxed);
		if ((f & HC_PF_KEYED) && hc__live_word(w)) {
			if (stamp < last)
				census_say(
					report, arg, &n,
					"LRU list: page %u (stamp %llu) comes after a page stamped %llu: out of order",
					id, (unsigned long long)stamp, (unsigned long long)last);
			last = stamp > last ? stamp : last;
		}
		prev = id;
		id = atomic_load_explicit(&l[id].next, memory_order_relaxed);
	}
	if (id == H && atomic_load_explicit(&l[H].prev, memory_order_relaxed) != prev)
		census_say(report, arg, &n, "LRU list: the head's back link is %u, not the last page %u",
			   atomic_load_explicit(&l[H].prev, memory_order_relaxed), prev);
	for (uint32_t i = 0; i < H; i++) {
		uint64_t w = atomic_load_explicit(&p->pages[i].word, memory_order_relaxed);
		uint32_t f = atomic_load_explicit(&p->pages[i].flags, memory_order_relaxed);

		if (!on[i] && atomic_load_explicit(&l[i].next, memory_order_relaxed) != HC_LRU_OFF)
			census_say(report, arg, &n, "LRU list: page %u is linked but not on the list", i);
		if (quiescent && !on[i] && hc__w_state(w) == HC_PAGE_READY && hc__lru_kind(f))
			census_say(report, arg, &n, "page %u: READY %s, but not on the LRU list: it is never evicted",
				   i, (f & HC_PF_KEYED) ? "and keyed" : "orphan");
	}
	hc__lru_unlock(p);
	free(on);
	return n;
}
