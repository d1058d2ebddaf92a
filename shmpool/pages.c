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
 * Every page id read from a handle or from the segment is checked against
 * the private copy of npages before use.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "pool.h"

uint32_t hc__now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint32_t)((uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u);
}

const char *hc_page_state_name(enum hc_page_state s)
{
	static const char *const names[] = { "FREE", "RESERVED", "READY", "QUARANTINE", "FREEING" };

	return (unsigned)s < 5 ? names[s] : "INVALID";
}

uint32_t hc_page_needed(const hc_pool *p, uint32_t presence)
{
	return ((presence & p->g.sharded_mask) ? p->all_groups : 0) |
	       ((presence & p->g.replicated_mask) ? HC_SHARD_REPLICATED : 0);
}

/* Error paths stay out of line, so the checks below inline to a compare. */
static int __attribute__((cold, noinline)) bad_id(const struct hc_pool *p, hc_page_t page, const char *op)
{
	return hc__err(EINVAL, "%s: page id %u is out of range: the pool has %u pages", op, HC_PAGE_ID(page),
		       p->g.npages);
}

static int __attribute__((cold, noinline)) bad_slot(const struct hc_pool *p, const char *op)
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

static inline int need_slot(const struct hc_pool *p, const char *op)
{
	if (__builtin_expect(p->slot < 0 ||
			     p->fork_gen != atomic_load_explicit(&hc__forks, memory_order_relaxed), 0))
		return bad_slot(p, op);
	return 0;
}

int hc_page_alloc(hc_pool *p, unsigned n, uint32_t presence, hc_page_t *out)
{
	const uint32_t npages = p->g.npages;
	uint32_t id = atomic_load_explicit(&p->cursor, memory_order_relaxed), now = 0, got = 0, scanned;
	int ret;

	if ((ret = need_slot(p, "alloc")) < 0)
		return ret;
	if (n == 0 || !out)
		return hc__err(EINVAL, "alloc: asked for %u pages%s", n, out ? "" : " into NULL");
	if (n > npages)
		return hc__err(ENOSPC, "alloc: %u pages asked, the pool has %u in all", n, npages);
	if (presence == 0 || (presence >> p->g.ncomp) != 0)
		return hc__err(EINVAL, "alloc: presence mask 0x%x names no component or one past the pool's %u",
			       presence, p->g.ncomp);
	if (id >= npages)
		id = 0;
	for (scanned = 0; scanned < npages && got < n; scanned++, id = id + 1 == npages ? 0 : id + 1) {
		_Atomic uint64_t *wp = &p->pages[id].word;
		uint64_t w = atomic_load_explicit(wp, memory_order_relaxed);

		switch (hc__w_state(w)) {
		case HC_PAGE_FREE:
			break;
		case HC_PAGE_QUARANTINE:
			/* A dead rank's DMA may still land here until the grace runs out. */
			if (!now)
				now = hc__now_ms() | 1;
			if (now - hc__w_aux(w) < p->quarantine_ms)
				continue;
			break;
		default:
			continue;
		}
		uint32_t gen = hc__w_gen(w) + 1;
		/* seq_cst: the page is ours before we write its presence. */
		if (!atomic_compare_exchange_strong(wp, &w, hc__w_make(HC_PAGE_RESERVED, (unsigned)p->slot, gen, 0)))
			continue;
		atomic_store_explicit(&p->pages[id].presence, presence, memory_order_relaxed);
		out[got++] = HC_PAGE_MAKE(id, gen);
	}
	atomic_store_explicit(&p->cursor, id, memory_order_relaxed); /* a hint: racing threads may share it */
	if (got == n)
		return (int)n;
	/* All or nothing: give back what we took.  They are still ours alone. */
	for (uint32_t i = 0; i < got; i++) {
		uint32_t rid = HC_PAGE_ID(out[i]), gen = HC_PAGE_GEN(out[i]);
		uint64_t w = hc__w_make(HC_PAGE_RESERVED, (unsigned)p->slot, gen, 0);
		atomic_compare_exchange_strong(&p->pages[rid].word, &w, hc__w_make(HC_PAGE_FREE, 0, gen, 0));
	}
	return hc__err(ENOSPC, "alloc: %u pages asked, only %u free or out of quarantine in pool '%s' of %u pages",
		       n, got, p->info.name, npages);
}

int hc_page_addr(const hc_pool *p, hc_page_t page, unsigned comp, unsigned layer, unsigned group,
		 void **addr, size_t *len)
{
	const struct hc_component_info *c;
	int ret;

	if ((ret = check_id(p, page, "addr")) < 0)
		return ret;
	if (comp >= p->g.ncomp)
		return hc__err(EINVAL, "addr: component %u is out of range: the pool has %u", comp, p->g.ncomp);
	c = &p->g.comps[comp];
	if (layer >= c->layers)
		return hc__err(EINVAL, "addr: layer %u is out of range: component '%s' has %u", layer, c->name, c->layers);
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
	if (HC_PAGE_ID(page) >= p->g.npages)
		return NULL;
	return p->env + (size_t)HC_PAGE_ID(page) * p->g.envelope_bytes;
}

int hc_page_commit(hc_pool *p, hc_page_t page, uint32_t shards)
{
	struct hc_seg_page *pg;
	uint32_t gen = HC_PAGE_GEN(page), needed, fill;
	uint64_t w, nw;
	int ret;

	if ((ret = need_slot(p, "commit")) < 0 || (ret = check_id(p, page, "commit")) < 0)
		return ret;
	if (shards == 0 || (shards & ~(p->all_groups | HC_SHARD_REPLICATED)))
		return hc__err(EINVAL, "commit: shard mask 0x%x names no shard or a head group past the pool's %u",
			       shards, p->g.head_groups);
	pg = &p->pages[HC_PAGE_ID(page)];
	w = atomic_load_explicit(&pg->word, memory_order_acquire);
	/*
	 * The single writer's fast path: our own fresh reservation, every shard
	 * at once: one CAS, no loop.  A CAS, not a store: another committer may
	 * have made it READY, and someone freed and reallocated it, since our
	 * load.  Release: the bytes before READY.
	 */
	if (w == hc__w_make(HC_PAGE_RESERVED, (unsigned)p->slot, gen, 0) &&
	    shards == hc_page_needed(p, atomic_load_explicit(&pg->presence, memory_order_relaxed)) &&
	    atomic_compare_exchange_strong_explicit(&pg->word, &w, hc__w_make(HC_PAGE_READY, (unsigned)p->slot, gen, 0),
						    memory_order_seq_cst, memory_order_acquire))
		return 1;
	do {
		if (hc__w_gen(w) != gen || (hc__w_state(w) != HC_PAGE_RESERVED && hc__w_state(w) != HC_PAGE_READY))
			return hc__err(ESTALE, "commit: page %u generation %u is no longer reserved (now %s, generation %u)",
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
		/* Release (seq_cst): our shard's bytes before READY; pairs with the
		 * acquire in hc_page_pin and in every reader's state load. */
	} while (!atomic_compare_exchange_weak(&pg->word, &w, nw));
	return fill == needed;
}

/*
 * Where an aborted reservation goes.  One writer (a single shard needed):
 * straight back to FREE, since the caller owns every copy into it.  Several
 * writers (head groups, or groups and the replicated part): to quarantine,
 * because another rank's DMA into it may still land, even after that rank
 * died, and the owner cannot know.
 */
static uint64_t abort_word(const struct hc_pool *p, struct hc_seg_page *pg, uint64_t w)
{
	uint32_t need = hc_page_needed(p, atomic_load_explicit(&pg->presence, memory_order_relaxed));

	if (need & (need - 1))
		return hc__w_make(HC_PAGE_QUARANTINE, hc__w_owner(w), hc__w_gen(w), hc__now_ms() | 1);
	return hc__w_make(HC_PAGE_FREE, 0, hc__w_gen(w), 0);
}

static int abort_one(struct hc_pool *p, hc_page_t page)
{
	struct hc_seg_page *pg = &p->pages[HC_PAGE_ID(page)];
	uint32_t gen = HC_PAGE_GEN(page);
	uint64_t w = atomic_load_explicit(&pg->word, memory_order_relaxed);

	for (;;) {
		if (hc__w_state(w) != HC_PAGE_RESERVED || hc__w_gen(w) != gen)
			return hc__err(ESTALE, "abort: page %u generation %u is not reserved (now %s)",
				       HC_PAGE_ID(page), gen, hc_page_state_name(hc__w_state(w)));
		if (hc__w_owner(w) != (unsigned)p->slot)
			return hc__err(EPERM, "abort: page %u is reserved by rank slot %u, not this one (%d)",
				       HC_PAGE_ID(page), hc__w_owner(w), p->slot);
		if (atomic_compare_exchange_weak(&pg->word, &w, abort_word(p, pg, w)))
			return 0;
	}
}

/*
 * Run 'one' on every page of a batch, even after a failure; return n, or
 * the first failure with its own message.  Inline, so each caller gets a
 * direct call.
 */
static inline int each_page(struct hc_pool *p, const hc_page_t *pages, unsigned n,
			    int (*one)(struct hc_pool *, hc_page_t), const char *op)
{
	int ret, first = 0;
	char msg[512]; /* written before it is read: no memset on the hot path */

	if ((ret = need_slot(p, op)) < 0)
		return ret;
	if (!pages && n)
		return hc__err(EINVAL, "%s: pages is NULL", op);
	for (unsigned i = 0; i < n; i++) {
		ret = check_id(p, pages[i], op);
		if (ret == 0)
			ret = one(p, pages[i]);
		if (ret < 0 && !first) {
			first = ret;
			snprintf(msg, sizeof(msg), "%s", hc_last_error());
		}
	}
	if (first)
		return hc__err(-first, "%s", msg);
	return (int)n;
}

int hc_page_abort(hc_pool *p, const hc_page_t *pages, unsigned n)
{
	return each_page(p, pages, n, abort_one, "abort");
}

/* Take back one pin of ours; never below zero, even if a stray unpin of
 * another thread of this rank got there first. */
static void pin_drop(_Atomic uint16_t *c)
{
	uint16_t v = atomic_load_explicit(c, memory_order_relaxed);

	while (v && !atomic_compare_exchange_weak_explicit(c, &v, (uint16_t)(v - 1), memory_order_release,
							    memory_order_relaxed))
		;
}

int hc_page_pin(hc_pool *p, hc_page_t page)
{
	_Atomic uint16_t *c;
	uint16_t v;
	uint64_t w;
	int ret;

	if ((ret = need_slot(p, "pin")) < 0 || (ret = check_id(p, page, "pin")) < 0)
		return ret;
	c = &hc__pin_row(p, HC_PAGE_ID(page))[p->slot];
	/* Threads of this process share the counter: never let it pass 65535
	 * or dip below a pin another thread holds, even for an instant. */
	v = atomic_load_explicit(c, memory_order_relaxed);
	do {
		if (v == UINT16_MAX)
			return hc__err(EOVERFLOW, "pin: page %u is pinned 65535 times by this rank", HC_PAGE_ID(page));
	} while (!atomic_compare_exchange_weak(c, &v, (uint16_t)(v + 1))); /* (A) */
	w = atomic_load(&p->pages[HC_PAGE_ID(page)].word); /* (B) */
	if (hc__w_state(w) == HC_PAGE_READY && hc__w_gen(w) == HC_PAGE_GEN(page))
		return 0;
	pin_drop(c);
	if (hc__w_gen(w) == HC_PAGE_GEN(page) && hc__w_state(w) == HC_PAGE_FREEING)
		return hc__err(EAGAIN, "pin: page %u is being freed", HC_PAGE_ID(page));
	if (hc__w_gen(w) == HC_PAGE_GEN(page) && hc__w_state(w) == HC_PAGE_RESERVED)
		return hc__err(EAGAIN, "pin: page %u is not committed yet", HC_PAGE_ID(page));
	return hc__err(ESTALE, "pin: page %u generation %u is gone (now %s, generation %u)", HC_PAGE_ID(page),
		       HC_PAGE_GEN(page), hc_page_state_name(hc__w_state(w)), hc__w_gen(w));
}

int hc_page_unpin(hc_pool *p, hc_page_t page)
{
	_Atomic uint16_t *c;
	uint16_t v;
	uint64_t w;
	int ret;

	if ((ret = need_slot(p, "unpin")) < 0 || (ret = check_id(p, page, "unpin")) < 0)
		return ret;
	c = &hc__pin_row(p, HC_PAGE_ID(page))[p->slot];
	w = atomic_load_explicit(&p->pages[HC_PAGE_ID(page)].word, memory_order_relaxed);
	if (hc__w_gen(w) != HC_PAGE_GEN(page))
		return hc__err(ESTALE, "unpin: page %u generation %u is gone (now generation %u)", HC_PAGE_ID(page),
			       HC_PAGE_GEN(page), hc__w_gen(w));
	v = atomic_load_explicit(c, memory_order_relaxed);
	do {
		if (v == 0)
			return hc__err(EINVAL, "unpin: page %u is not pinned by this rank", HC_PAGE_ID(page));
		/* Release: our reads of the page happen before a freer sees the count drop. */
	} while (!atomic_compare_exchange_weak_explicit(c, &v, (uint16_t)(v - 1), memory_order_release,
							memory_order_relaxed));
	return 0;
}

static int free_one(struct hc_pool *p, hc_page_t page)
{
	struct hc_seg_page *pg = &p->pages[HC_PAGE_ID(page)];
	_Atomic uint16_t *row = hc__pin_row(p, HC_PAGE_ID(page));
	uint32_t gen = HC_PAGE_GEN(page), hwm;
	uint64_t w, cur;
	unsigned pinned = 0;

	cur = atomic_load_explicit(&pg->word, memory_order_relaxed);
	if (hc__w_state(cur) != HC_PAGE_READY || hc__w_gen(cur) != gen)
		return hc__err(ESTALE, "free: page %u generation %u is not READY (now %s, generation %u)",
			       HC_PAGE_ID(page), gen, hc_page_state_name(hc__w_state(cur)), hc__w_gen(cur));
	w = cur;
	if (!atomic_compare_exchange_strong(&pg->word, &w,
					    hc__w_make(HC_PAGE_FREEING, (unsigned)p->slot, gen, 0))) /* (C) */
		return hc__err(EAGAIN, "free: page %u changed under us (now %s)", HC_PAGE_ID(page),
			       hc_page_state_name(hc__w_state(w)));
	hwm = atomic_load(&p->hdr->slots_hwm);
	if (hwm > p->g.max_ranks) /* shared memory: never trust it past our private copy */
		hwm = p->g.max_ranks;
	for (unsigned r = 0; r < hwm; r++) /* (D) */
		pinned |= atomic_load(&row[r]);
	/* Release: the pin reads above happen before the page is reusable; the
	 * next allocator's CAS acquires it. */
	if (pinned) {
		atomic_store_explicit(&pg->word, cur, memory_order_release);
		return hc__err(EBUSY, "free: page %u is pinned", HC_PAGE_ID(page));
	}
	atomic_store_explicit(&pg->word, hc__w_make(HC_PAGE_FREE, 0, gen, 0), memory_order_release);
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

int hc_pool_count_states(const hc_pool *p, uint64_t counts[5])
{
	memset(counts, 0, 5 * sizeof(counts[0]));
	for (uint32_t i = 0; i < p->g.npages; i++) {
		unsigned s = hc__w_state(atomic_load_explicit(&p->pages[i].word, memory_order_relaxed));
		if (s < 5)
			counts[s]++;
	}
	return 0;
}

/* Recovery, with the dead slot's mutex held: quarantine its reservations and
 * put its half-done frees back to READY. */
void hc__pages_release_slot(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep)
{
	uint32_t now = hc__now_ms() | 1;

	for (uint32_t i = 0; i < p->g.npages; i++) {
		_Atomic uint64_t *wp = &p->pages[i].word;
		uint64_t w = atomic_load_explicit(wp, memory_order_relaxed);

		for (;;) {
			unsigned st = hc__w_state(w);
			uint64_t nw;

			if (hc__w_owner(w) != slot || (st != HC_PAGE_RESERVED && st != HC_PAGE_FREEING))
				break;
			nw = st == HC_PAGE_RESERVED ? hc__w_make(HC_PAGE_QUARANTINE, slot, hc__w_gen(w), now)
						    : hc__w_make(HC_PAGE_READY, 0, hc__w_gen(w), 0);
			if (atomic_compare_exchange_weak(wp, &w, nw)) {
				if (rep && st == HC_PAGE_RESERVED)
					rep->quarantined++;
				else if (rep)
					rep->unfreed++;
				break;
			}
		}
	}
}

void hc__pins_drop_slot(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep)
{
	for (uint32_t i = 0; i < p->g.npages; i++) {
		_Atomic uint16_t *c = &hc__pin_row(p, i)[slot];
		uint16_t v = atomic_load_explicit(c, memory_order_relaxed);

		if (v) {
			atomic_store(c, 0);
			if (rep)
				rep->pins_dropped += v;
		}
	}
}

/*
 * The sweep of every recovery: release quarantined pages whose grace ran
 * out, promote reservations whose every shard is in (the last committer
 * died between its two steps, or wrote the fill and died), and quarantine
 * words that make no sense.
 */
void hc__page_sweep(struct hc_pool *p, struct hc_recovery_report *rep)
{
	uint32_t now = hc__now_ms() | 1;

	for (uint32_t i = 0; i < p->g.npages; i++) {
		_Atomic uint64_t *wp = &p->pages[i].word;
		/* Acquire: a fill mask we see comes with the presence written before it. */
		uint64_t w = atomic_load_explicit(wp, memory_order_acquire), nw;
		unsigned st = hc__w_state(w);
		uint32_t *count = NULL;

		if (st > HC_PAGE_FREEING || (st != HC_PAGE_FREE && st != HC_PAGE_READY && hc__w_owner(w) >= p->g.max_ranks)) {
			nw = hc__w_make(HC_PAGE_QUARANTINE, 0, hc__w_gen(w), now);
			count = rep ? &rep->bad_words : NULL;
		} else if (st == HC_PAGE_QUARANTINE && now - hc__w_aux(w) >= p->quarantine_ms) {
			nw = hc__w_make(HC_PAGE_FREE, 0, hc__w_gen(w), 0);
			count = rep ? &rep->released : NULL;
		} else if (st == HC_PAGE_RESERVED && hc__w_aux(w) != 0 &&
			   hc__w_aux(w) == hc_page_needed(p, atomic_load_explicit(&p->pages[i].presence, memory_order_relaxed))) {
			/* fill != 0 means a commit ran, so presence is this life's */
			nw = hc__w_make(HC_PAGE_READY, hc__w_owner(w), hc__w_gen(w), 0);
			count = rep ? &rep->promoted : NULL;
		} else {
			continue;
		}
		if (atomic_compare_exchange_strong(wp, &w, nw) && count)
			(*count)++;
	}
}
