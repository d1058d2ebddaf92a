/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pages.c - the page table: allocate, commit, abort, pin, unpin, free, and
 * the recovery sweep.  Every state change is one compare-and-swap on a
 * page's word (layout.h gives the encoding and who may move what).
 *
 * THE PIN PROTOCOL.  A pin is this rank's counter in the page's pin row;
 * only this rank writes it while alive, and only recovery (holding the dead
 * rank's mutex) after.
 *   pinner:  (A) fetch_add(pin[page][self])  seq_cst
 *            (B) load(word)                   seq_cst; READY and our gen?
 *                else undo (A) and fail.
 *   freer:   (C) CAS(word, READY -> FREEING)  seq_cst
 *            (D) load(pin[page][*])           seq_cst; any nonzero?
 *                then store READY back, else store FREE.
 * In the single total order of seq_cst operations either (B) comes after
 * (C), and the pinner sees FREEING and backs off, or (D) comes after (A),
 * and the freer sees the pin.  Never both miss.  The evictor of the next
 * layer follows the freer's side.
 *
 * (D) reads only the columns below hdr->slots_hwm.  A rank raises the mark
 * (seq_cst) when it claims its slot, which happens before its first (A);
 * the freer loads the mark (seq_cst) after (C).  If that load missed the
 * raise, then (C) < load < raise < (A) < (B) in the total order, and the
 * pinner sees FREEING.
 *
 * Host locks are the same protocol on the high half of the same counter;
 * ticket holds are the same protocol on a bit of the page's ticket mask
 * (ticket.c).  A freer or evictor reads all three after (C).
 *
 * RETIREMENT (free and evict, hc__retire).  (C) stores FREEING with the
 * READY word's owner in aux.  After a (D) that saw no hold, the retirer
 * marks FREEING "checked, nothing held", takes the page out of the key
 * index, clears its key flag and stores FREE (or RESERVED for itself, when
 * an allocation evicts).  A retirer that dies leaves FREEING: recovery puts
 * an unchecked one back to READY, with its owner (holds may exist; the
 * index entry was never touched), and finishes a checked one (nothing
 * could pin it since (C)).
 *
 * ABORT (abort_one) and the co-writers' flag, HC_PF_SHARED, are the same
 * protocol again, with QUARANTINE for FREEING and the flag for a hold.
 *
 * Every page id read from a handle or from the segment is checked against
 * the private copy of npages before use.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "pool.h"

static int free_orphan(struct hc_pool *p, uint32_t id);

/* CLOCK_BOOTTIME in ms mod 2^32 (or an explorer's virtual clock, crash.h). */
uint32_t hc__now_ms(void)
{
	return (uint32_t)hc__clock_ms();
}

const char *hc_page_state_name(enum hc_page_state s)
{
	static const char *const names[] = { "FREE", "RESERVED", "READY", "QUARANTINE", "FREEING" };
	static_assert(sizeof(names) / sizeof(names[0]) == HC_PAGE__COUNT, "a name per page state");

	return (unsigned)s < HC_PAGE__COUNT ? names[s] : "INVALID";
}

uint32_t hc_page_needed(const hc_pool *p, uint32_t presence)
{
	if (!p)
		return 0;
	return ((presence & p->g.sharded_mask) ? p->all_groups : 0) |
	       ((presence & p->g.replicated_mask) ? HC_SHARD_REPLICATED : 0);
}

/* Error paths stay out of line, so the checks below inline to a compare. */
static int __attribute__((cold, noinline)) bad_id(const struct hc_pool *p, hc_page_t page, const char *op)
{
	return hc__err(EINVAL, "%s: page id %u is out of range: the pool has %u pages", op, HC_PAGE_ID(page),
		       p->g.npages);
}

int hc__bad_slot(const struct hc_pool *p, const char *op)
{
	if (p->slot < 0)
		return hc__err(EPERM, "%s: this attachment holds no rank slot (admin or read-only attach)", op);
	return hc__err(ECHILD, "%s: this handle was attached by the parent process; attach again after fork", op);
}

static inline int check_id(const struct hc_pool *p, hc_page_t page, const char *op)
{
	if (__builtin_expect(HC_PAGE_ID(page) >= p->g.npages, 0))
		return bad_id(p, page, op);
	return 0;
}

/* Is slot s a rank of the engine this process's slot has joined? */
static int same_engine(const struct hc_pool *p, unsigned s)
{
	uint32_t mine;

	if (p->slot < 0 || s >= p->g.max_ranks)
		return 0;
	mine = atomic_load_explicit(&p->ranks[p->slot].engine, memory_order_relaxed);
	return mine && atomic_load_explicit(&p->ranks[s].engine, memory_order_relaxed) == mine;
}

static int check_reserved(const struct hc_pool *p, hc_page_t page, const char *op, int engine_ok)
{
	uint32_t id = HC_PAGE_ID(page);
	uint64_t w;
	int ret;

	if ((ret = check_id(p, page, op)) < 0)
		return ret;
	w = atomic_load_explicit(&p->pages[id].word, memory_order_acquire);
	if (hc__w_gen(w) != HC_PAGE_GEN(page) || hc__w_state(w) != HC_PAGE_RESERVED)
		return hc__err(ESTALE, "%s: page %u generation %u is not reserved (now %s, generation %u)", op, id,
			       HC_PAGE_GEN(page), hc_page_state_name(hc__w_state(w)), hc__w_gen(w));
	if (p->slot < 0 || (hc__w_owner(w) != (unsigned)p->slot && !(engine_ok && same_engine(p, hc__w_owner(w)))))
		return hc__err(EPERM, "%s: page %u is reserved by rank slot %u, not this one (%d)%s", op, id,
			       hc__w_owner(w), p->slot, engine_ok ? " nor one of its engine" : "");
	return 0;
}

int hc__check_reserved(const struct hc_pool *p, hc_page_t page, const char *op)
{
	return check_reserved(p, page, op, 0);
}

int hc__check_reserved_engine(const struct hc_pool *p, hc_page_t page, const char *op)
{
	return check_reserved(p, page, op, 1);
}

int hc__engine_done(const struct hc_pool *p, hc_page_t page, int mine_too)
{
	uint64_t w;

	if (HC_PAGE_ID(page) >= p->g.npages)
		return 0;
	w = atomic_load_explicit(&p->pages[HC_PAGE_ID(page)].word, memory_order_acquire);
	return hc__w_gen(w) == HC_PAGE_GEN(page) && hc__w_state(w) == HC_PAGE_READY &&
	       (hc__w_owner(w) != (unsigned)p->slot || mine_too) && same_engine(p, hc__w_owner(w));
}

/*
 * The quota (engine.c sets it): pages this rank holds pinned or host-locked,
 * plus pages it reserved (owns in RESERVED).  A held page counts once, when
 * the rank's hold word on it leaves zero, and is given back when it returns
 * to zero, by the rank itself.  A reservation is counted by its owner
 * when allocated, and given back by whoever takes the page out of RESERVED:
 * the committer that completes it (any rank), the owner's abort, the
 * dropper of an expired ticket, or the sweep that promotes a complete one
 * whose last committer died; recovery zeroes a dead slot's count.  Add
 * first, then check, so racing threads can only fail spuriously, never pass
 * together.  Only under a quota: outside an engine nothing counts (no
 * locked instruction on the hot paths), and a join counts what the rank
 * holds then (hc__held_count).
 */
int hc__quota_count(struct hc_pool *p, uint32_t n, uint32_t quota, const char *op)
{
	struct hc_seg_rank *r = &p->ranks[p->slot];
	uint32_t held = atomic_fetch_add_explicit(&r->held, n, memory_order_relaxed) + n;

	if (held <= quota)
		return 0;
	atomic_fetch_sub_explicit(&r->held, n, memory_order_relaxed);
	return hc__err(
		EDQUOT,
		"%s: engine %u rank %u would hold %u pages, over its quota of %u: release pins, locks or tickets first",
		op, atomic_load_explicit(&r->engine, memory_order_relaxed) - 1,
		atomic_load_explicit(&r->tp, memory_order_relaxed) & 0xffff, held, quota);
}

uint32_t hc__held_count(const struct hc_pool *p, unsigned slot)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < p->g.npages; i++) {
		uint64_t w = atomic_load_explicit(&p->pages[i].word, memory_order_relaxed);

		n += atomic_load_explicit(&hc__pin_row(p, i)[slot], memory_order_relaxed) != 0;
		n += hc__w_state(w) == HC_PAGE_RESERVED && hc__w_owner(w) == slot;
	}
	return n;
}

/* Never below zero: a slot recovered and claimed again starts from 0. */
void hc__quota_give_slot(struct hc_pool *p, unsigned slot, uint32_t n)
{
	_Atomic uint32_t *h;
	uint32_t v;

	if (slot >= p->g.max_ranks || n == 0 || atomic_load_explicit(&p->ranks[slot].quota, memory_order_relaxed) == 0)
		return;
	h = &p->ranks[slot].held;
	v = atomic_load_explicit(h, memory_order_relaxed);

	while (!atomic_compare_exchange_weak_explicit(h, &v, v > n ? v - n : 0, memory_order_relaxed,
						      memory_order_relaxed))
		;
}

/*
 * Has a quarantine stamped 'aux' run out?  Read the clock after loading the
 * word, never once for a whole scan: a stamp written since an earlier
 * reading is newer than it, and now - aux would wrap to "49 days ago",
 * releasing a dead rank's page at once while its DMA may still land.  A
 * stamp that still looks ahead of us (by under 2^31 ms) is in its grace.
 */
static int grace_over(const struct hc_pool *p, uint32_t aux)
{
	uint32_t elapsed = (hc__now_ms() | 1) - aux;

	return elapsed >= p->quarantine_ms && elapsed < UINT32_C(1) << 31;
}

/* The flags of a fresh life: none for a reservation (its reserver keys
 * it), ANON and its check for a page allocated without a key. */
static inline uint32_t fresh_flags(const struct hc_pool *p, uint32_t id, int anon)
{
	return anon ? HC_PF_ANON | hc__page_check(p, id, 0) : 0;
}

/* May quarantined page id, at word w, be taken?  A dead rank's DMA may
 * still land until the grace runs out; a page still keyed is being (or
 * was to be) unkeyed: the sweep's; a live co-writer's copy may still land
 * while it holds the page. */
static int quarantine_over(const struct hc_pool *p, uint32_t id, uint64_t w)
{
	return grace_over(p, hc__w_aux(w)) &&
	       !(atomic_load_explicit(&p->pages[id].flags, memory_order_relaxed) & HC_PF_KEYED) &&
	       !hc__held_anywhere(p, id);
}

/* Page id, at word w, for us if it is FREE (or quarantined, its grace
 * run out, unkeyed and unheld): 1 and the handle in *out, else 0. */
static inline int take_page(struct hc_pool *p, uint32_t id, uint64_t w, uint32_t presence, int anon, hc_page_t *out)
{
	_Atomic uint64_t *wp = &p->pages[id].word;
	uint32_t gen;

	switch (hc__w_state(w)) {
	case HC_PAGE_FREE:
		break;
	case HC_PAGE_QUARANTINE:
		if (!quarantine_over(p, id, w))
			return 0;
		break;
	default:
		return 0;
	}
	gen = hc__w_gen(w) + 1;
	/* seq_cst: the page is ours before we write its presence. */
	if (!atomic_compare_exchange_strong(wp, &w, hc__w_make(HC_PAGE_RESERVED, (unsigned)p->slot, gen, 0)))
		return 0;
	HC_POINT(alloc_taken);
	atomic_store_explicit(&p->pages[id].presence, presence, memory_order_relaxed);
	/* While the CAS left the line ours: another scanner may read it next. */
	atomic_store_explicit(&p->pages[id].flags, fresh_flags(p, id, anon), memory_order_relaxed);
	*out = HC_PAGE_MAKE(id, gen);
	return 1;
}

/* Up to n pages the free map leads to; the count taken.  A bit that led
 * to a page no longer FREE was a stale hint, gone now. */
static unsigned map_take(struct hc_pool *p, unsigned n, uint32_t presence, int anon, hc_page_t *out)
{
	unsigned got = 0;

	while (got < n) {
		int64_t id = hc__fm_claim_near(&p->fm, &p->cursor);

		if (id < 0)
			break;
		got += (unsigned)take_page(p, (uint32_t)id, atomic_load(&p->pages[id].word), /* (H) */
					   presence, anon, out + got);
	}
	return got;
}

/* Quarantined pages an allocation looks at, at most, before it evicts:
 * over as many allocations every one is seen. */
#define QUARANTINE_LOOK 8

/* Up to n quarantined pages whose grace ran out, from the quarantine map
 * (freemap.c): a bit is taken only for a page that is ready, and given
 * back if the page could not be taken and is still quarantined.  A bit of
 * a page no longer quarantined is cleared, then the word looked at again
 * (a page quarantined anew gets its bit back from its quarantiner). */
static unsigned quarantine_take(struct hc_pool *p, unsigned n, uint32_t presence, int anon, hc_page_t *out)
{
	uint64_t from = atomic_load_explicit(&p->qcursor, memory_order_relaxed);
	int64_t first = -1;
	unsigned got = 0;

	for (unsigned look = 0; look < QUARANTINE_LOOK && got < n; look++) {
		int64_t id = hc__fm_peek(&p->qm, from);
		_Atomic uint64_t *wp;
		uint64_t w;

		if (id < 0 || id == first)
			break; /* none, or round to the first again */
		first = first < 0 ? id : first;
		from = (uint64_t)id + 1;
		wp = &p->pages[id].word;
		w = atomic_load(wp);
		if (hc__w_state(w) != HC_PAGE_QUARANTINE) {
			if (hc__fm_take(&p->qm, (uint32_t)id) && hc__w_state(atomic_load(wp)) == HC_PAGE_QUARANTINE)
				hc__fm_put(&p->qm, (uint32_t)id);
			continue;
		}
		if (!quarantine_over(p, (uint32_t)id, w) || !hc__fm_take(&p->qm, (uint32_t)id))
			continue; /* in its grace (the bit stays), or another allocator's */
		if (take_page(p, (uint32_t)id, w, presence, anon, out + got))
			got++;
		else if (hc__w_state(atomic_load(wp)) == HC_PAGE_QUARANTINE)
			hc__fm_put(&p->qm, (uint32_t)id);
	}
	atomic_store_explicit(&p->qcursor, (uint32_t)from, memory_order_relaxed);
	return got;
}

/* Up to n pages from a look at every page word, from this process's hand
 * on (where the last look stopped): the last resort before ENOSPC, which also finds what a death left
 * out of both maps; the count taken. */
static unsigned scan_take(struct hc_pool *p, unsigned n, uint32_t presence, int anon, hc_page_t *out)
{
	const uint32_t npages = p->g.npages;
	uint32_t id = atomic_load_explicit(&p->hand, memory_order_relaxed), got = 0, scanned;

	if (id >= npages)
		id = 0;
	for (scanned = 0; scanned < npages && got < n; scanned++, id = id + 1 == npages ? 0 : id + 1)
		got += (unsigned)take_page(p, id, atomic_load_explicit(&p->pages[id].word, memory_order_relaxed),
					   presence, anon, out + got);
	atomic_store_explicit(&p->hand, id, memory_order_relaxed); /* a hint: racing threads may share it */
	return got;
}

/* Give back fresh reservations of ours (nobody else has their handles). */
void hc__alloc_undo(struct hc_pool *p, const hc_page_t *pages, unsigned n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t rid = HC_PAGE_ID(pages[i]), gen = HC_PAGE_GEN(pages[i]);
		uint64_t w = hc__w_make(HC_PAGE_RESERVED, (unsigned)p->slot, gen, 0);

		HC_POINT(alloc_undo);
		if (rid < p->g.npages &&
		    atomic_compare_exchange_strong(&p->pages[rid].word, &w, hc__w_make(HC_PAGE_FREE, 0, gen, 0))) {
			hc__fm_put(&p->fm, rid);
			hc__quota_give(p, 1);
		}
	}
}

/* The rest of an allocation the free map could not fill: quarantined
 * pages whose grace ran out, then eviction, then one look at the whole
 * table; all or nothing (got: the pages taken so far). */
static int __attribute__((noinline))
alloc_more(struct hc_pool *p, unsigned n, unsigned got, uint32_t presence, int anon, hc_page_t *out, const char *op)
{
	unsigned was;

	got += quarantine_take(p, n - got, presence, anon, out + got);
	if (got < n) {
		was = got;
		got += hc__evict_take(p, n - got, presence, out + got);
		for (unsigned i = was; i < got && anon; i++) /* evicted for us: a fresh life, flags 0 */
			atomic_store_explicit(&p->pages[HC_PAGE_ID(out[i])].flags,
					      fresh_flags(p, HC_PAGE_ID(out[i]), 1), memory_order_relaxed);
	}
	if (got < n) /* someone freed pages while we evicted, or nothing shows them: every page */
		got += scan_take(p, n - got, presence, anon, out + got);
	if (got == n) {
		hc__count(p, HC_CTR_allocs, n);
		return (int)n;
	}
	hc__alloc_undo(p, out, got);
	hc__quota_give(p, n - got);
	hc__count(p, HC_CTR_alloc_failed, 1);
	if (atomic_load_explicit(&p->ctl->service.write_policy, memory_order_relaxed) == HC_WRITE_BACK + 1) {
		hc__dirty_note(p, 1); /* the writer makes room: wake it now */
		return hc__err(
			ENOSPC,
			"%s: %u pages asked, only %u free, out of quarantine or evictable in pool '%s' of %u pages; under write_back pages not yet in L3 are never evicted: is hicached running?",
			op, n, got, p->info.name, p->g.npages);
	}
	if (p->g.host_mode == HC_HOST_BUFFER_ONLY)
		return hc__err(
			ENOSPC,
			"%s: %u pages asked, only %u free in buffer_only pool '%s' of %u pages: pages come back as their transfers end; ask the service for staging first (hc_req_stage)",
			op, n, got, p->info.name, p->g.npages);
	return hc__err(ENOSPC,
		       "%s: %u pages asked, only %u free, out of quarantine or evictable in pool '%s' of %u pages", op,
		       n, got, p->info.name, p->g.npages);
}

/* Free pages first (the free map), then alloc_more.  The pages count
 * against this rank's quota until they leave RESERVED. */
int hc__alloc(struct hc_pool *p, unsigned n, uint32_t presence, int anon, hc_page_t *out, const char *op)
{
	unsigned got;
	int ret;

	if ((ret = hc__quota_take(p, n, op)) < 0)
		return ret;
	got = map_take(p, n, presence, anon, out);
	if (__builtin_expect(got < n, 0))
		return alloc_more(p, n, got, presence, anon, out, op);
	hc__count(p, HC_CTR_allocs, n);
	return (int)n;
}

int hc_page_alloc(hc_pool *p, unsigned n, uint32_t presence, hc_page_t *out)
{
	const uint32_t npages = p->g.npages;
	int ret;

	if ((ret = hc__need_slot(p, "alloc")) < 0)
		return ret;
	if (n == 0 || !out)
		return hc__err(EINVAL, "alloc: asked for %u pages%s", n, out ? "" : " into NULL");
	if (n > npages)
		return hc__err(ENOSPC, "alloc: %u pages asked, the pool has %u in all", n, npages);
	if (presence == 0 || (presence >> p->g.ncomp) != 0)
		return hc__err(EINVAL, "alloc: presence mask 0x%x names no component or one past the pool's %u",
			       presence, p->g.ncomp);
	/* ANON before the handles leave us: ours until we free them
	 * (recovery frees them if we die). */
	return hc__alloc(p, n, presence, 1, out, "alloc");
}

int hc_page_addr(const hc_pool *p, hc_page_t page, unsigned comp, unsigned layer, unsigned group, void **addr,
		 size_t *len)
{
	const struct hc_component_info *c;
	int ret;

	if ((ret = check_id(p, page, "addr")) < 0)
		return ret;
	if (comp >= p->g.ncomp)
		return hc__err(EINVAL, "addr: component %u is out of range: the pool has %u", comp, p->g.ncomp);
	c = &p->g.comps[comp];
	if (layer >= c->layers)
		return hc__err(EINVAL, "addr: layer %u is out of range: component '%s' has %u", layer, c->name,
			       c->layers);
	if (group >= c->groups)
		return hc__err(EINVAL, "addr: head group %u is out of range: component '%s' has %u", group, c->name,
			       c->groups);
	if (addr)
		*addr = p->env + (size_t)HC_PAGE_ID(page) * p->g.envelope_bytes + c->offset + group * c->group_stride +
			layer * c->layer_stride;
	if (len)
		*len = c->layer_stride;
	return 0;
}

void *hc_page_envelope(const hc_pool *p, hc_page_t page)
{
	if (!p) {
		hc__err(EINVAL, "envelope: pool is NULL");
		return NULL;
	}
	if (HC_PAGE_ID(page) >= p->g.npages) {
		hc__err(EINVAL, "envelope: page id %u is out of range: the pool has %u pages", HC_PAGE_ID(page),
			p->g.npages);
		return NULL;
	}
	return p->env + (size_t)HC_PAGE_ID(page) * p->g.envelope_bytes;
}

int hc_page_commit(hc_pool *p, hc_page_t page, uint32_t shards)
{
	struct hc_seg_page *pg;
	uint32_t gen = HC_PAGE_GEN(page), needed, fill;
	uint64_t w, nw;
	int ret;

	if ((ret = hc__need_slot(p, "commit")) < 0 || (ret = check_id(p, page, "commit")) < 0)
		return ret;
	if (shards == 0 || (shards & ~(p->all_groups | HC_SHARD_REPLICATED)))
		return hc__err(EINVAL, "commit: shard mask 0x%x names no shard or a head group past the pool's %u",
			       shards, p->g.head_groups);
	pg = &p->pages[HC_PAGE_ID(page)];
	w = atomic_load_explicit(&pg->word, memory_order_acquire);
	HC_POINT(commit_seen);
	/*
	 * The single writer's fast path: our own fresh reservation, every shard
	 * at once: one CAS, no loop.  A CAS, not a store: another committer may
	 * have made it READY, and someone freed and reallocated it, since our
	 * load.  Release: the bytes before READY.
	 */
	if (w == hc__w_make(HC_PAGE_RESERVED, (unsigned)p->slot, gen, 0) &&
	    shards == hc_page_needed(p, atomic_load_explicit(&pg->presence, memory_order_relaxed)) &&
	    atomic_compare_exchange_strong_explicit(&pg->word, &w, hc__w_make(HC_PAGE_READY, (unsigned)p->slot, gen, 0),
						    memory_order_seq_cst, memory_order_acquire)) {
		HC_POINT(commit_done);
		hc__quota_give(p, 1); /* our own reservation is done */
		hc__dirty(p, pg);
		return 1;
	}
	do {
		if (hc__w_gen(w) != gen || (hc__w_state(w) != HC_PAGE_RESERVED && hc__w_state(w) != HC_PAGE_READY))
			return hc__err(ESTALE,
				       "commit: page %u generation %u is no longer reserved (now %s, generation %u)",
				       HC_PAGE_ID(page), gen, hc_page_state_name(hc__w_state(w)), hc__w_gen(w));
		if (hc__w_state(w) == HC_PAGE_READY)
			return hc__err(EALREADY, "commit: page %u is already READY", HC_PAGE_ID(page));
		needed = hc_page_needed(p, atomic_load_explicit(&pg->presence, memory_order_relaxed));
		if (shards & ~needed)
			return hc__err(EINVAL, "commit: shard mask 0x%x has shards page %u does not hold (needs 0x%x)",
				       shards, HC_PAGE_ID(page), needed);
		fill = hc__w_aux(w) | shards;
		nw = fill == needed ? hc__w_make(HC_PAGE_READY, hc__w_owner(w), gen, 0)
				    : hc__w_make(HC_PAGE_RESERVED, hc__w_owner(w), gen, fill);
		HC_POINT(commit_seen);
		/* Release (seq_cst): our shard's bytes before READY; pairs with the
		 * acquire in hc_page_pin and in every reader's state load. */
	} while (!atomic_compare_exchange_weak(&pg->word, &w, nw));
	HC_POINT(commit_done);
	if (fill == needed) { /* the owner's reservation is done */
		hc__quota_give_slot(p, hc__w_owner(w), 1);
		hc__dirty(p, pg);
	}
	return fill == needed;
}

/*
 * Abort: (C') the reservation goes to QUARANTINE, so no commit lands on it
 * from here; then out of the index; then, unless it was handed to other
 * writers (HC_PF_SHARED), to FREE at once: the caller's own copies into it
 * are done (hc_page_abort(3)), and nobody else was given it.  A shared one
 * stays in quarantine for the grace, and until no co-writer holds it,
 * because their copies may still land, even after they died.  The flag is
 * read after (C'): a co-writer sets it before it re-reads the word
 * (hc__share_reserved), so one of the two sees the other.
 */
static int abort_one(struct hc_pool *p, hc_page_t page)
{
	const uint32_t id = HC_PAGE_ID(page), gen = HC_PAGE_GEN(page);
	struct hc_seg_page *pg = &p->pages[id];
	uint64_t w = atomic_load_explicit(&pg->word, memory_order_relaxed), q;

	for (;;) {
		if (hc__w_state(w) != HC_PAGE_RESERVED || hc__w_gen(w) != gen)
			return hc__err(ESTALE, "abort: page %u generation %u is not reserved (now %s)", id, gen,
				       hc_page_state_name(hc__w_state(w)));
		if (hc__w_owner(w) != (unsigned)p->slot)
			return hc__err(EPERM, "abort: page %u is reserved by rank slot %u, not this one (%d)", id,
				       hc__w_owner(w), p->slot);
		HC_POINT(abort_seen);
		q = hc__w_make(HC_PAGE_QUARANTINE, (unsigned)p->slot, gen, hc__now_ms() | 1);
		if (atomic_compare_exchange_weak(&pg->word, &w, q)) /* (C'), seq_cst */
			break;
	}
	HC_POINT(abort_quarantined);
	hc__quota_give(p, 1);
	/* A dead aborter leaves a quarantined page, keyed or not: the sweep's. */
	hc__unkey_at(p, id, q);
	if (atomic_load(&pg->flags) & HC_PF_SHARED) { /* (D') */
		hc__fm_put(&p->qm, id);               /* it stays: allocations find it there once its grace ran out */
		hc__count(p, HC_CTR_quarantines, 1);
		return 0;
	}
	HC_POINT(abort_unkeyed);
	/* Fails only when a zero grace let an allocator take it already. */
	if (atomic_compare_exchange_strong(&pg->word, &q, hc__w_make(HC_PAGE_FREE, 0, gen, 0)))
		hc__fm_put(&p->fm, id);
	return 0;
}

/* A co-writer's side of abort's (C')/(D'): mark the reservation shared,
 * then see that it still is one.  0, or -ESTALE. */
int hc__share_reserved(struct hc_pool *p, hc_page_t page)
{
	struct hc_seg_page *pg = &p->pages[HC_PAGE_ID(page)];
	uint64_t w;

	if (!(atomic_load_explicit(&pg->flags, memory_order_relaxed) & HC_PF_SHARED))
		atomic_fetch_or(&pg->flags, HC_PF_SHARED); /* (A'), seq_cst */
	w = atomic_load(&pg->word);                        /* (B') */
	if (hc__w_state(w) != HC_PAGE_RESERVED || hc__w_gen(w) != HC_PAGE_GEN(page))
		return -ESTALE;
	return 0;
}

/* each_page's tail once a page failed: the rest of the batch still runs,
 * and the first failure's message is the one returned. */
static int __attribute__((noinline, cold))
each_page_failed(struct hc_pool *p, const hc_page_t *pages, unsigned n, int (*one)(struct hc_pool *, hc_page_t),
		 const char *op, int first)
{
	char msg[512];

	snprintf(msg, sizeof(msg), "%s", hc_last_error());
	for (unsigned i = 0; i < n; i++)
		if (check_id(p, pages[i], op) == 0)
			one(p, pages[i]);
	return hc__err(-first, "%s", msg);
}

/*
 * Run 'one' on every page of a batch, even after a failure; return n, or
 * the first failure with its own message.  Inline, so each caller gets a
 * direct call.
 */
static inline int each_page(struct hc_pool *p, const hc_page_t *pages, unsigned n,
			    int (*one)(struct hc_pool *, hc_page_t), const char *op)
{
	int ret;

	if ((ret = hc__need_slot(p, op)) < 0)
		return ret;
	if (!pages && n)
		return hc__err(EINVAL, "%s: pages is NULL", op);
	for (unsigned i = 0; i < n; i++) {
		ret = check_id(p, pages[i], op);
		if (ret == 0)
			ret = one(p, pages[i]);
		if (__builtin_expect(ret < 0, 0))
			return each_page_failed(p, pages + i + 1, n - i - 1, one, op, ret);
	}
	return (int)n;
}

int hc_page_abort(hc_pool *p, const hc_page_t *pages, unsigned n)
{
	return each_page(p, pages, n, abort_one, "abort");
}

/* Take back one hold of ours; never below zero, even if a stray release of
 * another thread of this rank got there first.  1 if the page is no longer
 * held by this rank at all (the quota counts pages, not holds). */
static int hold_undo(_Atomic uint32_t *c, uint32_t one)
{
	uint32_t v = atomic_load_explicit(c, memory_order_relaxed);

	while ((v & (one * 0xffffu)) &&
	       !atomic_compare_exchange_weak_explicit(c, &v, v - one, memory_order_release, memory_order_relaxed))
		;
	return (v & (one * 0xffffu)) && v == one;
}

int hc__hold_drop(struct hc_pool *p, uint32_t id, uint32_t one)
{
	return hold_undo(&hc__pin_row(p, id)[p->slot], one);
}

static const char *hold_name(uint32_t one)
{
	return one == HC_PIN_ONE ? "pinned" : "locked";
}

/* How long a hold waits out a FREEING page at most, however long each
 * probe of its freer takes: a freer holds FREEING for microseconds, and a
 * probe of a slot whose lock word names another thread (a recoverer, or a
 * scribbled holder_tid) takes HC_PROBE_RETRIES waits. */
#define HC_HOLD_WAIT_MS 1000

/*
 * hc__hold (pool.h) in full: (A) unless 'counted' (then v is the count
 * before it), then (B) and what follows a word that is not yet READY.
 *   HC_HOLD_WAIT_FREEING: a FREEING page is waited out; the caller knows
 *     another hold (a ticket's) keeps it, so the freer will put it back.
 *   HC_HOLD_RESERVED: a RESERVED page is fine too.  A co-writer's hold on a
 *     reservation it was handed (ticket.c): it keeps the page from reuse
 *     out of quarantine while this rank's copy into it may still land, even
 *     if the owner dies or aborts meanwhile (scan_free and the sweep skip
 *     held pages).
 */
int hc__hold_full(struct hc_pool *p, hc_page_t page, uint32_t one, unsigned flags, const char *op, int counted,
		  uint32_t v)
{
	_Atomic uint32_t *c = &hc__pin_row(p, HC_PAGE_ID(page))[p->slot];
	uint64_t w, give_up = 0;

	/* Threads of this process share the counter: never let a half pass
	 * 65535 or dip below a hold another thread has, even for an instant. */
	if (!counted) {
		v = atomic_load_explicit(c, memory_order_relaxed);
		do {
			if ((v & (one * 0xffffu)) == one * 0xffffu)
				return hc__err(EOVERFLOW, "%s: page %u is %s 65535 times by this rank", op,
					       HC_PAGE_ID(page), hold_name(one));
		} while (!atomic_compare_exchange_weak(c, &v, v + one)); /* (A) */
		HC_POINT(hold_counted);
	}
	for (unsigned spin = 1;; spin++) {
		w = atomic_load(&p->pages[HC_PAGE_ID(page)].word); /* (B) */
		if (hc__w_gen(w) == HC_PAGE_GEN(page) &&
		    (hc__w_state(w) == HC_PAGE_READY ||
		     (hc__w_state(w) == HC_PAGE_RESERVED && (flags & HC_HOLD_RESERVED))))
			return v == 0; /* 1: the page is newly held by this rank */
		if (!(flags & HC_HOLD_WAIT_FREEING) || hc__w_state(w) != HC_PAGE_FREEING ||
		    hc__w_gen(w) != HC_PAGE_GEN(page))
			break;
		HC_POINT(hold_wait);
		/* A freer that died after (C) never puts it back: prove it dead
		 * (its recovery restores READY), or give up after a long while.
		 * Under a schedule every turn is a step: look every time. */
		if (spin % 4096 == 0 || hc__sched_on()) {
			if (spin >= 4096u * 2048u)
				break;
			if (!hc__sched_on()) { /* a time bound too: 2048 slow probes would take half a minute */
				uint64_t now = hc__mono_ms();
				if (!give_up)
					give_up = now + HC_HOLD_WAIT_MS;
				else if (now >= give_up)
					break;
			}
			if (hc__w_owner(w) < p->g.max_ranks)
				hc__rank_probe(p, hc__w_owner(w), NULL);
			sched_yield();
		}
		__builtin_ia32_pause();
	}
	hold_undo(c, one);
	HC_POINT(hold_undone);
	if (hc__w_gen(w) == HC_PAGE_GEN(page) && hc__w_state(w) == HC_PAGE_FREEING)
		return hc__err(EAGAIN, "%s: page %u is being freed", op, HC_PAGE_ID(page));
	if (hc__w_gen(w) == HC_PAGE_GEN(page) && hc__w_state(w) == HC_PAGE_RESERVED)
		return hc__err(EAGAIN, "%s: page %u is not committed yet", op, HC_PAGE_ID(page));
	return hc__err(ESTALE, "%s: page %u generation %u is gone (now %s, generation %u)", op, HC_PAGE_ID(page),
		       HC_PAGE_GEN(page), hc_page_state_name(hc__w_state(w)), hc__w_gen(w));
}

static int hold_public(hc_pool *p, hc_page_t page, uint32_t one, const char *op)
{
	int ret;

	if ((ret = hc__need_slot(p, op)) < 0 || (ret = check_id(p, page, op)) < 0)
		return ret;
	if ((ret = hc__hold(p, page, one, 0, op)) < 0)
		return ret;
	if (ret == 1 && (ret = hc__quota_take(p, 1, op)) < 0) {
		hc__hold_drop(p, HC_PAGE_ID(page), one);
		return ret;
	}
	hc__count(p, one == HC_PIN_ONE ? HC_CTR_pins : HC_CTR_locks, 1);
	return 0;
}

static inline __attribute__((always_inline)) int release_public(hc_pool *p, hc_page_t page, uint32_t one,
								const char *op)
{
	_Atomic uint32_t *c;
	uint32_t v, f;
	uint64_t w;
	int ret;

	if ((ret = hc__need_slot(p, op)) < 0 || (ret = check_id(p, page, op)) < 0)
		return ret;
	c = &hc__pin_row(p, HC_PAGE_ID(page))[p->slot];
	w = atomic_load_explicit(&p->pages[HC_PAGE_ID(page)].word, memory_order_relaxed);
	/* Read with the word, on its line: after our count drops, another
	 * rank's lookup may have written the line, and a second read would
	 * miss.  An orphan marked after this read is the sweep's to free. */
	f = atomic_load_explicit(&p->pages[HC_PAGE_ID(page)].flags, memory_order_relaxed);
	if (hc__w_gen(w) != HC_PAGE_GEN(page))
		return hc__err(ESTALE, "%s: page %u generation %u is gone (now generation %u)", op, HC_PAGE_ID(page),
			       HC_PAGE_GEN(page), hc__w_gen(w));
	v = atomic_load_explicit(c, memory_order_relaxed);
	do {
		if ((v & (one * 0xffffu)) == 0)
			return hc__err(EINVAL, "%s: page %u is not %s by this rank", op, HC_PAGE_ID(page),
				       hold_name(one));
		/* Release: our reads of the page happen before a freer sees the count drop. */
	} while (!atomic_compare_exchange_weak_explicit(c, &v, v - one, memory_order_release, memory_order_relaxed));
	HC_POINT(unpin_dropped);
	if (v == one) { /* the page is no longer held by this rank */
		hc__quota_give(p, 1);
		if (f & HC_PF_ORPHAN)
			free_orphan(p, HC_PAGE_ID(page));
	}
	return 0;
}

int hc_page_pin(hc_pool *p, hc_page_t page)
{
	return hold_public(p, page, HC_PIN_ONE, "pin");
}

int hc_page_unpin(hc_pool *p, hc_page_t page)
{
	return release_public(p, page, HC_PIN_ONE, "unpin");
}

int hc_page_lock(hc_pool *p, hc_page_t page)
{
	return hold_public(p, page, HC_LOCK_ONE, "lock");
}

int hc_page_unlock(hc_pool *p, hc_page_t page)
{
	return release_public(p, page, HC_LOCK_ONE, "unlock");
}

/* (D): any pin, host lock or ticket hold on the page, in any column. */
static inline int held_anywhere(const struct hc_pool *p, uint32_t id)
{
	const _Atomic uint32_t *row = hc__pin_row(p, id);
	const _Atomic uint64_t *tm = hc__tmask_row(p, id);
	uint32_t hwm = hc__hwm(p), any = 0;
	uint64_t tany = 0;

	for (unsigned r = 0; r < hwm; r++)
		any |= atomic_load(&row[r]);
	for (unsigned t = 0; t < p->tmask_words; t++)
		tany |= atomic_load(&tm[t]);
	return any != 0 || tany != 0;
}

int hc__held_anywhere(const struct hc_pool *p, uint32_t id)
{
	return held_anywhere(p, id);
}

/* Everything that holds page id, summed: inspection (stats, page info,
 * clear), not the (D) of a retirement, which hc__held_anywhere is. */
void hc__page_holds(const struct hc_pool *p, uint32_t id, struct hc__holds *h)
{
	const _Atomic uint32_t *row = hc__pin_row(p, id);
	const _Atomic uint64_t *tm = hc__tmask_row(p, id);
	uint32_t hwm = hc__hwm(p);

	memset(h, 0, sizeof(*h));
	for (unsigned r = 0; r < hwm; r++) {
		uint32_t v = atomic_load_explicit(&row[r], memory_order_relaxed);
		h->pins += v & 0xffff;
		h->locks += v >> 16;
	}
	for (unsigned t = 0; t < p->tmask_words; t++)
		h->tickets += (uint32_t)__builtin_popcountll(atomic_load_explicit(&tm[t], memory_order_relaxed));
}

/*
 * Take page id out of the index and clear its key flag, if its word is
 * still w: checked under the key's stripe lock, which every unkeyer of this
 * life takes too, while keying a next life needs a new generation (a new
 * word).  So a sweeper that read the page a while ago can never unkey the
 * page's next life.  1 if it unkeyed it.
 */
int hc__unkey_at(struct hc_pool *p, uint32_t id, uint64_t w)
{
	struct hc_seg_page *pg = &p->pages[id];
	struct hc__khash kh;
	int done = 0;

	if (!(atomic_load_explicit(&pg->flags, memory_order_acquire) & HC_PF_KEYED))
		return 0;
	hc__page_khash(p, id, &kh);
	hc__index_lock(p, kh.stripe);
	HC_POINT(unkey_locked);
	if (atomic_load(&pg->word) == w && hc__page_key_is(p, id, &kh)) {
		hc__index_remove(p, &kh, id);
		HC_POINT(unkey_removed);
		atomic_fetch_and_explicit(&pg->flags, ~HC_PF_KEYED, memory_order_release);
		done = 1;
	}
	hc__index_unlock(p, kh.stripe);
	return done;
}

/* The same, for a page the caller holds in a state nobody else moves
 * (RESERVED by it, and never handed out). */
void hc__unkey(struct hc_pool *p, uint32_t id)
{
	hc__unkey_at(p, id, atomic_load(&p->pages[id].word));
}

/*
 * Retire a READY page whose word is 'expect': (C), (D), then out of the
 * index and FREE, or RESERVED for us (how = HC_RETIRE_TAKE, *taken gets the
 * handle).  'as' is the slot FREEING names: ours, or the dead slot a
 * recoverer holds (whose next recovery finishes or undoes it).  0, -EBUSY
 * if held, -EAGAIN if the word changed.
 */
static inline __attribute__((always_inline)) int retire_as(struct hc_pool *p, uint32_t id, uint64_t expect, unsigned as,
							   int how, hc_page_t *taken)
{
	struct hc_seg_page *pg = &p->pages[id];
	uint32_t gen = hc__w_gen(expect);
	uint32_t was = hc__w_owner(expect);
	uint64_t w = expect, checked = hc__w_make(HC_PAGE_FREEING, as, gen, hc__freeing_aux(was, HC_FREEING_CHECKED));

	if (!atomic_compare_exchange_strong(&pg->word, &w,
					    hc__w_make(HC_PAGE_FREEING, as, gen, hc__freeing_aux(was, 0)))) /* (C) */
		return -EAGAIN;
	HC_POINT(retire_freeing);
	if (held_anywhere(p, id)) { /* (D) */
		HC_POINT(retire_putback);
		/* Release: pairs with the acquire of whoever pins it next. */
		atomic_store_explicit(&pg->word, expect, memory_order_release);
		return -EBUSY;
	}
	/* Checked, nothing held: from here recovery finishes, never undoes.
	 * Release, not seq_cst: it only has to follow the hold reads of (D);
	 * no load of ours after it depends on when others see it, and a
	 * pinner that reads FREEING backs off either way. */
	atomic_store_explicit(&pg->word, checked, memory_order_release);
	HC_POINT(retire_checked);
	if (atomic_load_explicit(&pg->flags, memory_order_acquire) & HC_PF_KEYED) /* hc__unkey_at's own first look */
		hc__unkey_at(p, id, checked);
	HC_POINT(retire_unkeyed);
	/* Release: the hold reads above happen before the page is reusable;
	 * the next allocator's CAS acquires it. */
	if (how == HC_RETIRE_TAKE) {
		atomic_store_explicit(&pg->flags, 0, memory_order_relaxed); /* a fresh life */
		atomic_store_explicit(&pg->word, hc__w_make(HC_PAGE_RESERVED, as, gen + 1, 0), memory_order_release);
		*taken = HC_PAGE_MAKE(id, gen + 1);
	} else {
		atomic_store_explicit(&pg->word, hc__w_make(HC_PAGE_FREE, 0, gen, 0), memory_order_release);
		hc__fm_put(&p->fm, id);
	}
	return 0;
}

int hc__retire(struct hc_pool *p, uint32_t id, uint64_t expect, int how, hc_page_t *taken)
{
	return retire_as(p, id, expect, (unsigned)p->slot, how, taken);
}

static inline __attribute__((always_inline)) int free_one(struct hc_pool *p, hc_page_t page)
{
	struct hc_seg_page *pg = &p->pages[HC_PAGE_ID(page)];
	uint32_t gen = HC_PAGE_GEN(page);
	uint64_t cur;
	int ret;

	cur = atomic_load_explicit(&pg->word, memory_order_relaxed);
	if (hc__w_state(cur) != HC_PAGE_READY || hc__w_gen(cur) != gen)
		return hc__err(ESTALE, "free: page %u generation %u is not READY (now %s, generation %u)",
			       HC_PAGE_ID(page), gen, hc_page_state_name(hc__w_state(cur)), hc__w_gen(cur));
	ret = retire_as(p, HC_PAGE_ID(page), cur, (unsigned)p->slot, HC_RETIRE_FREE, NULL);
	if (ret == -EAGAIN)
		return hc__err(EAGAIN, "free: page %u changed under us (now %s)", HC_PAGE_ID(page),
			       hc_page_state_name(hc__w_state(atomic_load(&pg->word))));
	if (ret == -EBUSY)
		return hc__err(EBUSY, "free: page %u is pinned, locked or held by a ticket", HC_PAGE_ID(page));
	hc__count(p, HC_CTR_frees, 1);
	return 0;
}

int hc_page_free(hc_pool *p, const hc_page_t *pages, unsigned n)
{
	return each_page(p, pages, n, free_one, "free");
}

int hc_page_state(const hc_pool *p, uint32_t id, hc_page_t *handle, uint32_t *owner, uint32_t *aux)
{
	uint64_t w;

	if (id >= p->g.npages)
		return hc__err(EINVAL, "state: page id %u is out of range: the pool has %u pages", id, p->g.npages);
	w = atomic_load_explicit(&p->pages[id].word, memory_order_acquire);
	if (handle)
		*handle = HC_PAGE_MAKE(id, hc__w_gen(w));
	if (owner)
		*owner = hc__w_owner(w);
	if (aux)
		*aux = hc__w_aux(w);
	return (int)hc__w_state(w);
}

int hc_page_presence(const hc_pool *p, hc_page_t page, uint32_t *presence)
{
	int ret;

	if ((ret = check_id(p, page, "presence")) < 0)
		return ret;
	*presence = atomic_load_explicit(&p->pages[HC_PAGE_ID(page)].presence, memory_order_relaxed);
	return 0;
}

int hc_pool_count_states(const hc_pool *p, uint64_t *counts, unsigned n)
{
	uint64_t c[HC_PAGE__COUNT] = { 0 };

	if (!p || (!counts && n))
		return hc__err(EINVAL, "count states: %s is NULL", p ? "counts" : "pool");
	for (uint32_t i = 0; i < p->g.npages; i++) {
		unsigned s = hc__w_state(atomic_load_explicit(&p->pages[i].word, memory_order_relaxed));
		if (s < HC_PAGE__COUNT)
			c[s]++;
	}
	n = n < HC_PAGE__COUNT ? n : HC_PAGE__COUNT;
	if (n)
		memcpy(counts, c, n * sizeof(c[0]));
	return (int)n;
}

/* A READY page the dead slot allocated without a key, at word w: freed as
 * that slot, or made an orphan if a live rank holds it. */
static void reclaim(struct hc_pool *p, uint32_t id, uint64_t w, unsigned slot, struct hc_recovery_report *rep)
{
	int r;

	HC_POINT(recover_orphaned);
	r = retire_as(p, id, w, slot, HC_RETIRE_FREE, NULL);
	if (r == -EBUSY) { /* a live rank holds it: the last hold frees it */
		atomic_fetch_or(&p->pages[id].flags, HC_PF_ORPHAN);
		hc__lru_heal(p, id, 1); /* nobody's cache: the first an LRU evictor takes */
	}
	if (rep && r == 0)
		rep->reclaimed++;
	if (rep && r == -EBUSY)
		rep->orphaned++;
}

/*
 * Recovery, with the dead slot's mutex held.  Its reservations go to
 * quarantine first, then out of the index: a live co-writer may complete
 * one meanwhile (READY and keyed, a page like any other), and then the CAS
 * fails and the key stays.  Its half-done retirements settle: back to READY
 * if it had not yet seen that nothing held the page, else on to FREE.  And
 * the READY pages it allocated without a key are freed, as the dead slot
 * (so a recoverer that dies here leaves FREEING of that slot, for the next
 * one); one another rank still holds becomes an orphan, freed when the last
 * hold goes.
 */
void hc__pages_release_slot(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep)
{
	for (uint32_t i = 0; i < p->g.npages; i++) {
		struct hc_seg_page *pg = &p->pages[i];
		uint64_t w = atomic_load_explicit(&pg->word, memory_order_acquire), nw;
		unsigned st = hc__w_state(w);
		uint32_t f;

		if (hc__w_owner(w) != slot || (st != HC_PAGE_RESERVED && st != HC_PAGE_FREEING && st != HC_PAGE_READY))
			continue;
		f = atomic_load_explicit(&pg->flags, memory_order_relaxed);
		if (st == HC_PAGE_READY && (f & (HC_PF_ANON | HC_PF_KEYED | HC_PF_ORPHAN)) != HC_PF_ANON)
			continue; /* a cache page, or an orphan already */
		HC_POINT(recover_page_seen);
		if (st == HC_PAGE_RESERVED) {
			/* Only commits move it now, and only up to READY. */
			do {
				nw = hc__w_make(HC_PAGE_QUARANTINE, slot, hc__w_gen(w), hc__now_ms() | 1);
				if (atomic_compare_exchange_strong(&pg->word, &w, nw)) {
					HC_POINT(recover_quarantined);
					hc__fm_put(&p->qm, i);
					hc__unkey_at(p, i, nw);
					if (rep)
						rep->quarantined++;
					hc__count(p, HC_CTR_quarantines, 1);
					break;
				}
			} while (hc__w_state(w) == HC_PAGE_RESERVED && hc__w_owner(w) == slot);
		} else if (st == HC_PAGE_FREEING && !hc__freeing_checked(w)) {
			/* Its index entry was never touched: nothing to redo there.
			 * READY goes back with the owner it had: if that was the
			 * dead slot and the page has no key, on to free it (a
			 * rank that died freeing its own page, or a recoverer
			 * that died reclaiming one). */
			nw = hc__w_make(HC_PAGE_READY, hc__freeing_owner(w), hc__w_gen(w), 0);
			if (f & HC_PF_KEYED)
				hc__index_repair_page(p, i);
			if (!atomic_compare_exchange_strong(&pg->word, &w, nw))
				continue;
			if (rep)
				rep->unfreed++;
			if (hc__freeing_owner(w) == slot &&
			    (f & (HC_PF_ANON | HC_PF_KEYED | HC_PF_ORPHAN)) == HC_PF_ANON)
				reclaim(p, i, nw, slot, rep);
		} else if (st == HC_PAGE_FREEING) {
			/* Checked, nothing held: only the dead retirer moved it. */
			hc__unkey_at(p, i, w);
			if (atomic_compare_exchange_strong(&pg->word, &w, hc__w_make(HC_PAGE_FREE, 0, hc__w_gen(w), 0)))
				hc__fm_put(&p->fm, i);
		} else {
			reclaim(p, i, w, slot, rep);
		}
	}
}

/* An orphan nobody holds goes: the last hold's release, the sweep or the
 * evictor (a slot holder) frees it.  Tries once; a racing freer that
 * loses leaves it for the next. */
static int free_orphan(struct hc_pool *p, uint32_t id)
{
	struct hc_seg_page *pg = &p->pages[id];
	uint64_t w = atomic_load(&pg->word);
	uint32_t f = atomic_load_explicit(&pg->flags, memory_order_relaxed);

	if (p->slot < 0 || hc__w_state(w) != HC_PAGE_READY || (f & (HC_PF_ORPHAN | HC_PF_KEYED)) != HC_PF_ORPHAN)
		return 0;
	return hc__retire(p, id, w, HC_RETIRE_FREE, NULL) == 0;
}

void hc__pins_drop_slot(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep)
{
	for (uint32_t i = 0; i < p->g.npages; i++) {
		_Atomic uint32_t *c = &hc__pin_row(p, i)[slot];
		uint32_t v = atomic_load_explicit(c, memory_order_relaxed);

		if (v) {
			HC_POINT(recover_pins);
			atomic_store(c, 0);
			if (rep)
				rep->pins_dropped += (v & 0xffff) + (v >> 16);
		}
	}
	atomic_store_explicit(&p->ranks[slot].held, 0, memory_order_relaxed);
}

/* A READY page of an LRU pool that should be on its list and is not: a
 * reserver died before its touch, and a co-writer completed the page.
 * The node is read without the lock, as a hint; heal looks again. */
static void lru_settle(struct hc_pool *p, uint32_t id)
{
	uint32_t f = atomic_load_explicit(&p->pages[id].flags, memory_order_relaxed);

	if (hc__lru_kind(f) && atomic_load_explicit(&p->lru[id].next, memory_order_relaxed) == HC_LRU_OFF)
		hc__lru_heal(p, id, !(f & HC_PF_KEYED));
}

/*
 * The sweep of every recovery: release quarantined pages whose grace ran
 * out, promote reservations whose every shard is in (the last committer
 * died between its two steps, or wrote the fill and died), quarantine
 * words that make no sense, and put back in the free map and the
 * quarantine map the pages a death left out of them.
 */
void hc__page_sweep(struct hc_pool *p, struct hc_recovery_report *rep)
{
	uint32_t now = hc__now_ms() | 1;

	if (p->lru) { /* a dead holder of the LRU list's lock: its next locker rebuilds the list */
		hc__lru_lock(p);
		hc__lru_unlock(p);
	}
	for (uint32_t i = 0; i < p->g.npages; i++) {
		_Atomic uint64_t *wp = &p->pages[i].word;
		/* Acquire: a fill mask we see comes with the presence written before it. */
		uint64_t w = atomic_load_explicit(wp, memory_order_acquire), nw;
		unsigned st = hc__w_state(w);
		uint32_t *count = NULL;

		if (st > HC_PAGE_FREEING ||
		    (st != HC_PAGE_FREE && st != HC_PAGE_READY && hc__w_owner(w) >= p->g.max_ranks)) {
			nw = hc__w_make(HC_PAGE_QUARANTINE, 0, hc__w_gen(w), now);
			count = rep ? &rep->bad_words : NULL;
		} else if (st == HC_PAGE_QUARANTINE && grace_over(p, hc__w_aux(w)) && !hc__held_anywhere(p, i)) {
			HC_POINT(sweep_seen);
			/* Whoever quarantined a keyed page may have died before
			 * unkeying it.  Only this life: another sweep may have
			 * freed it since we read it, and a rank keyed it anew. */
			hc__unkey_at(p, i, w);
			HC_POINT(sweep_unkeyed);
			nw = hc__w_make(HC_PAGE_FREE, 0, hc__w_gen(w), 0);
			count = rep ? &rep->released : NULL;
		} else if (st == HC_PAGE_RESERVED && hc__w_aux(w) != 0 &&
			   hc__w_aux(w) == hc_page_needed(p, atomic_load_explicit(&p->pages[i].presence,
										  memory_order_relaxed))) {
			/* fill != 0 means a commit ran, so presence is this life's */
			HC_POINT(sweep_seen);
			nw = hc__w_make(HC_PAGE_READY, hc__w_owner(w), hc__w_gen(w), 0);
			count = rep ? &rep->promoted : NULL;
		} else {
			if (st == HC_PAGE_READY && free_orphan(p, i) && rep)
				rep->reclaimed++;
			else if (st == HC_PAGE_FREE) /* a death may have left it out of the free map */
				hc__fm_heal(&p->fm, i);
			else if (st == HC_PAGE_QUARANTINE) /* or out of the quarantine map */
				hc__fm_heal(&p->qm, i);
			else if (st == HC_PAGE_READY && p->lru)
				lru_settle(p, i);
			continue;
		}
		if (!atomic_compare_exchange_strong(wp, &w, nw))
			continue;
		if (count)
			(*count)++;
		if (hc__w_state(nw) == HC_PAGE_FREE)
			hc__fm_put(&p->fm, i);
		else if (hc__w_state(nw) == HC_PAGE_QUARANTINE)
			hc__fm_put(&p->qm, i);
		else if (hc__w_state(nw) == HC_PAGE_READY) /* out of RESERVED: its owner's quota gets it back */
			hc__quota_give_slot(p, hc__w_owner(w), 1);
	}
	hc__fm_heal_summaries(&p->fm); /* and a summary bit a death left clear */
	hc__fm_heal_summaries(&p->qm);
}
