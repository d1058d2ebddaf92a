/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check.c - verify the invariants that tie the page table, the holds, the
 * key index, the tickets and the rank table together.  None of them holds
 * by construction across processes that die at random or scribble, so
 * tests and 'hicache-pool check' run this.  A leak is a violation: a READY
 * page that no key names and no live rank owns, a hold of a dead slot, a
 * ticket of an engine that is gone.
 *
 * Everything read here comes from shared memory and is bounds-checked
 * before it is used as an index: the check must name damage, never trip
 * on it.  Quiescent mode (nothing is mid-operation) also counts the
 * states a rank leaves for a moment inside a call.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "pool.h"

struct chk {
	struct hc_pool *p;
	unsigned flags;
	hc__check_fn report;
	void *arg;
	int n;
	uint8_t live[HC_MAX_RANKS];
	uint32_t keyed_live; /* keyed live pages seen */
};

static void say(struct chk *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(struct chk *c, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	c->n++;
	if (c->report)
		c->report(c->arg, line);
}

static int quiet(const struct chk *c)
{
	return (c->flags & HC_CHECK_QUIESCENT) != 0;
}

static int slot_live(const struct chk *c, unsigned s)
{
	return s < c->p->g.max_ranks && c->live[s];
}

/* The key index against the page table. */
static void check_index(struct chk *c)
{
	struct hc_pool *p = c->p;
	uint64_t nent = (uint64_t)p->g.index_buckets * HC_BUCKET_ENTRIES, entries = 0;
	uint8_t *seen = calloc(p->g.npages, 1);

	if (!seen) {
		say(c, "index: no memory to check %u pages", p->g.npages);
		return;
	}
	for (uint64_t i = 0; i < nent; i++) {
		uint64_t e = atomic_load(&p->index[i]), w;
		uint32_t id = (uint32_t)e - 1, b = (uint32_t)(i / HC_BUCKET_ENTRIES);
		struct hc__khash kh;

		if (e == 0)
			continue;
		if ((uint32_t)e == 0 || id >= p->g.npages) {
			say(c, "index entry %llu: page id %u is out of range (0x%llx)", (unsigned long long)i, id,
			    (unsigned long long)e);
			continue;
		}
		w = atomic_load(&p->pages[id].word);
		if (!hc__keyed_live(p, id, w)) {
			if (quiet(c))
				say(c, "index entry %llu: names page %u, which is %s and %skeyed",
				    (unsigned long long)i, id, hc_page_state_name(hc__w_state(w)),
				    (atomic_load(&p->pages[id].flags) & HC_PF_KEYED) ? "" : "not ");
			continue;
		}
		if (!hc__index_entry_placed(p, i, e, id)) {
			hc__page_khash(p, id, &kh);
			say(c,
			    "index entry %llu: page %u is in bucket %u with tag 0x%x; its key belongs in %u or %u with 0x%x",
			    (unsigned long long)i, id, b, (uint32_t)(e >> 32), kh.b1, kh.b2, kh.tag);
		} else if (seen[id]++)
			say(c, "index: page %u has more than one entry", id);
		else
			entries++;
	}
	for (uint32_t id = 0; id < p->g.npages; id++) {
		uint64_t w = atomic_load(&p->pages[id].word);
		struct hc__khash kh;
		int64_t found;

		if (!hc__keyed_live(p, id, w)) {
			if (!seen[id] && (atomic_load(&p->pages[id].flags) & HC_PF_KEYED) &&
			    hc__w_state(w) == HC_PAGE_FREE)
				say(c, "page %u: FREE but still flagged as keyed", id);
			continue;
		}
		c->keyed_live++;
		if (!seen[id]) { /* between a writer's flag and its insert, or remove and flag */
			if (quiet(c))
				say(c, "page %u: keyed and %s but not in the index: its key finds nothing", id,
				    hc_page_state_name(hc__w_state(w)));
			continue;
		}
		hc__page_khash(p, id, &kh);
		found = hc__index_find(p, &kh);
		if (found != (int64_t)id)
			say(c, "page %u: its key also names live page %lld", id, (long long)found);
	}
	if (quiet(c) && entries != c->keyed_live)
		say(c, "index: %llu good entries for %u keyed live pages", (unsigned long long)entries, c->keyed_live);
	free(seen);
}

int hc__index_entry_placed(const struct hc_pool *p, uint64_t i, uint64_t e, uint32_t id)
{
	uint32_t b = (uint32_t)(i / HC_BUCKET_ENTRIES);
	struct hc__khash kh;

	hc__page_khash(p, id, &kh);
	return (b == kh.b1 || b == kh.b2) && (uint32_t)(e >> 32) == kh.tag;
}

int hc__engine_alive(const struct hc_pool *p, const uint8_t *live, uint32_t e, uint32_t inc)
{
	for (unsigned s = 0; s < p->g.max_ranks; s++)
		if (live[s] && atomic_load(&p->ranks[s].engine) == e && atomic_load(&p->ranks[s].incarnation) == inc)
			return 1;
	return 0;
}

int hc__ticket_holds(const struct hc_pool *p, unsigned t, uint32_t id, uint64_t w)
{
	const struct hc_seg_ticket *r = &p->tickets[t];
	uint32_t n = r->n; /* once: it bounds the walk */

	if (hc__tk_state(w) == HC_TK_BUILDING || hc__tk_state(w) == HC_TK_DROPPING)
		return 1;
	if (hc__tk_state(w) != HC_TK_OPEN || r->kind != HC_TK_LOOKUP || n > p->g.ticket_keys)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t e = atomic_load(&p->tpages[(size_t)t * p->g.ticket_keys + i]);
		if (e != HC_PAGE_NONE && HC_PAGE_ID(e) == id)
			return 1;
	}
	return 0;
}

static const char *tk_state_name(unsigned st)
{
	static const char *const names[] = { "FREE", "BUILDING", "OPEN", "DROPPING", "CLOSED" };

	return st <= HC_TK_CLOSED ? names[st] : "INVALID";
}

/* Tickets against their shares and the pages they hold. */
static void check_tickets(struct chk *c)
{
	struct hc_pool *p = c->p;

	for (unsigned t = 0; t < p->g.max_tickets; t++) {
		const struct hc_seg_ticket *r = &p->tickets[t];
		uint64_t w = atomic_load(&r->word), bit = UINT64_C(1) << (t % 64);
		unsigned st = hc__tk_state(w), owner = hc__tk_owner(w);
		uint32_t n = r->n, nkeys = r->nkeys, tp = r->tp_size, kind = r->kind;
		_Atomic uint64_t *list = p->tpages + (size_t)t * p->g.ticket_keys;

		if (st > HC_TK_CLOSED) {
			say(c, "ticket %u: invalid state %u", t, st);
			continue;
		}
		if (st == HC_TK_FREE)
			continue;
		if ((st == HC_TK_BUILDING || st == HC_TK_DROPPING) && !slot_live(c, owner))
			say(c, "ticket %u: %s by slot %u, which is %s", t, tk_state_name(st), owner,
			    owner >= p->g.max_ranks ? "past the rank table" : "not live");
		if ((st == HC_TK_BUILDING || st == HC_TK_DROPPING) && quiet(c))
			say(c, "ticket %u: %s while quiescent", t, tk_state_name(st));
		if (tp == 0 || tp > HC_TP_MAX ||
		    (w & HC_TK_CLAIMED & ~(tp >= 32 ? HC_TK_CLAIMED : (UINT64_C(1) << tp) - 1)))
			say(c, "ticket %u: shares 0x%llx do not fit TP %u", t, (unsigned long long)(w & HC_TK_CLAIMED),
			    tp);
		if (kind != HC_TK_LOOKUP && kind != HC_TK_RESERVE)
			say(c, "ticket %u: invalid kind %u", t, kind);
		if (st >= HC_TK_OPEN && (n > nkeys || nkeys > p->g.ticket_keys)) {
			say(c, "ticket %u: %u pages recorded for %u keys (limit %u)", t, n, nkeys, p->g.ticket_keys);
			continue;
		}
		if (st == HC_TK_OPEN && quiet(c) &&
		    !hc__engine_alive(p, c->live, atomic_load(&r->engine), atomic_load(&r->incarnation)))
			say(c,
			    "ticket %u: OPEN for engine %u (incarnation %u), which has no live member: it should have ended with it",
			    t, atomic_load(&r->engine) - 1, atomic_load(&r->incarnation));
		if (st != HC_TK_OPEN || kind != HC_TK_LOOKUP)
			continue;
		/* An OPEN lookup ticket holds every page of its answer. */
		for (uint32_t i = 0; i < n; i++) {
			uint64_t e = atomic_load(&list[i]);
			if (e == HC_PAGE_NONE)
				continue;
			if (HC_PAGE_ID(e) >= p->g.npages) {
				say(c, "ticket %u: entry %u names page %u, past the pool's %u", t, i, HC_PAGE_ID(e),
				    p->g.npages);
				continue;
			}
			if (!(atomic_load(&hc__tmask_row(p, HC_PAGE_ID(e))[t / 64]) & bit))
				say(c, "ticket %u: OPEN but does not hold page %u of its answer", t, HC_PAGE_ID(e));
			else {
				uint64_t pw = atomic_load(&p->pages[HC_PAGE_ID(e)].word);
				/* A freer stopped in its check (FREEING, unchecked) sees our
				 * hold and puts the page back: a transient, as for pins. */
				int checking = hc__w_state(pw) == HC_PAGE_FREEING && !hc__freeing_checked(pw) &&
					       !quiet(c);
				if (hc__w_state(pw) != HC_PAGE_READY && !checking)
					say(c, "ticket %u: holds page %u, which is %s (aux 0x%x), not READY", t,
					    HC_PAGE_ID(e), hc_page_state_name(hc__w_state(pw)), hc__w_aux(pw));
			}
		}
	}
	/* Every ticket bit on a page belongs to a ticket that may hold it. */
	for (uint32_t id = 0; id < p->g.npages; id++) {
		for (unsigned k = 0; k < p->tmask_words; k++) {
			uint64_t m = atomic_load(&hc__tmask_row(p, id)[k]);
			for (; m; m &= m - 1) {
				unsigned t = k * 64 + (unsigned)__builtin_ctzll(m);
				uint64_t w = atomic_load(&p->tickets[t].word);

				if (!hc__ticket_holds(p, t, id, w))
					say(c, "page %u: held by ticket %u, which is %s and does not name it", id, t,
					    tk_state_name(hc__tk_state(w)));
			}
		}
	}
}

/* Engine membership: only live slots, one slot per TP rank, one TP size,
 * one incarnation. */
static void check_engines(struct chk *c)
{
	struct hc_pool *p = c->p;
	uint32_t seq = atomic_load(&p->ctl->engine_seq);

	for (unsigned s = 0; s < p->g.max_ranks; s++) {
		uint32_t e = atomic_load(&p->ranks[s].engine), tp = atomic_load(&p->ranks[s].tp);
		uint32_t inc = atomic_load(&p->ranks[s].incarnation);

		if (!e)
			continue;
		if (!c->live[s]) {
			say(c, "rank slot %u: member of engine %u but not live", s, e - 1);
			continue;
		}
		if ((tp >> 16) == 0 || (tp >> 16) > HC_TP_MAX || (tp & 0xffff) >= (tp >> 16))
			say(c, "rank slot %u: TP rank %u of %u is out of range", s, tp & 0xffff, tp >> 16);
		if (inc == 0 || inc > seq)
			say(c, "rank slot %u: engine %u incarnation %u was never handed out (%u so far)", s, e - 1, inc,
			    seq);
		for (unsigned o = s + 1; o < p->g.max_ranks; o++) {
			uint32_t oe = atomic_load(&p->ranks[o].engine), otp = atomic_load(&p->ranks[o].tp);
			if (oe != e || !c->live[o])
				continue;
			if (atomic_load(&p->ranks[o].incarnation) != inc)
				say(c,
				    "engine %u: slots %u and %u are members of two lives of it (incarnations %u and %u)",
				    e - 1, s, o, inc, atomic_load(&p->ranks[o].incarnation));
			else if ((otp >> 16) != (tp >> 16))
				say(c, "engine %u: slots %u and %u disagree on TP size (%u, %u)", e - 1, s, o, tp >> 16,
				    otp >> 16);
			else if ((otp & 0xffff) == (tp & 0xffff))
				say(c, "engine %u: slots %u and %u both hold TP rank %u", e - 1, s, o, tp & 0xffff);
		}
	}
}

/* Each rank slot's request path: rings that say what they are and hold no
 * more than they can (a scribbled index is refused, never trusted). */
static void check_rings(struct chk *c)
{
	struct hc_pool *p = c->p;

	for (unsigned s = 0; s < p->g.max_ranks; s++) {
		uint8_t *blk = p->rings + (uint64_t)s * p->g.rg.block;
		struct hc__ring v;
		if (hc__ring_attach(&v, blk + p->g.rg.sq_off, p->g.rg.cq_off - p->g.rg.sq_off, p->g.sq_entries,
				    HC_SQE_BYTES, HC_RING_CONSUMER) < 0)
			say(c, "rank slot %u: request ring: %s", s, hc_last_error());
		if (hc__ring_attach(&v, blk + p->g.rg.cq_off, p->g.rg.arg_off - p->g.rg.cq_off, p->g.cq_entries,
				    HC_CQE_BYTES, HC_RING_CONSUMER) < 0)
			say(c, "rank slot %u: completion ring: %s", s, hc_last_error());
	}
}

/* What a READY page's flags say about who may find or free it. */
static void check_ready(struct chk *c, uint32_t i, uint64_t w, uint32_t pins)
{
	struct hc_pool *p = c->p;
	struct hc_seg_page *pg = &p->pages[i];
	uint32_t f = atomic_load(&pg->flags), presence = atomic_load(&pg->presence);
	unsigned owner = hc__w_owner(w);
	int keyed = (f & HC_PF_KEYED) != 0;

	if (presence == 0 || (presence >> p->g.ncomp) != 0)
		say(c, "page %u: READY with presence 0x%x, which names no component or one past the pool's %u", i,
		    presence, p->g.ncomp);
	if (!keyed && !(f & HC_PF_ANON)) {
		say(c,
		    "page %u: READY, neither keyed nor allocated without a key (flags 0x%x): nothing can find or free it",
		    i, f & 0xffff);
		return;
	}
	/* What the reserver wrote, against the check it stored with it; in a
	 * running pool only if the word is still the one we started from. */
	if (!hc__page_check_ok(p, i, f) && atomic_load(&pg->word) == w)
		say(c, "page %u: its %s do not match their check: the page entry was overwritten", i,
		    keyed ? "key, depth or presence" : "presence");
	if (keyed)
		return;
	if (!(f & HC_PF_ORPHAN) && !slot_live(c, owner))
		say(c, "page %u: READY, allocated without a key by slot %u, which is not live, and never reclaimed", i,
		    owner);
	if ((f & HC_PF_ORPHAN) && pins == 0 && quiet(c)) {
		struct hc__holds h;
		hc__page_holds(p, i, &h);
		if (h.tickets == 0)
			say(c, "page %u: an orphan (its allocator died) that nobody holds, and not freed", i);
	}
}

static void check_pages(struct chk *c)
{
	struct hc_pool *p = c->p;
	uint32_t hwm = hc__hwm(p);

	for (uint32_t i = 0; i < p->g.npages; i++) {
		uint64_t w = atomic_load(&p->pages[i].word);
		unsigned st = hc__w_state(w), owner = hc__w_owner(w);
		_Atomic uint32_t *row = hc__pin_row(p, i);
		uint32_t pins = 0;

		if (st > HC_PAGE_FREEING) {
			say(c, "page %u: invalid state %u", i, st);
			continue;
		}
		if ((st == HC_PAGE_RESERVED || st == HC_PAGE_FREEING || st == HC_PAGE_QUARANTINE) &&
		    owner >= p->g.max_ranks) {
			say(c, "page %u: %s with owner slot %u out of range", i, hc_page_state_name(st), owner);
			continue;
		}
		for (unsigned s = 0; s < p->g.max_ranks; s++) {
			unsigned v = atomic_load(&row[s]);
			pins += v;
			if (v && !c->live[s])
				say(c, "page %u: %u pin(s) and %u host lock(s) held by slot %u, which is not live", i,
				    v & 0xffff, v >> 16, s);
			if (v && s >= hwm)
				say(c, "page %u: holds in slot %u, above the high-water mark %u", i, s, hwm);
		}
		switch (st) {
		case HC_PAGE_RESERVED: {
			uint32_t presence = atomic_load(&p->pages[i].presence);
			uint32_t need = hc_page_needed(p, presence);
			if (!c->live[owner])
				say(c, "page %u: RESERVED by slot %u, which is not live", i, owner);
			if (hc__w_aux(w) & ~need)
				say(c, "page %u: fill mask 0x%x has shards outside 0x%x", i, hc__w_aux(w), need);
			if (quiet(c) && (presence == 0 || (presence >> p->g.ncomp) != 0))
				say(c,
				    "page %u: RESERVED with presence 0x%x, which names no component or one past the pool's %u",
				    i, presence, p->g.ncomp);
			break;
		}
		case HC_PAGE_FREEING:
			if (!c->live[owner])
				say(c, "page %u: FREEING by slot %u, which is not live", i, owner);
			if (hc__w_aux(w) != hc__freeing_aux(hc__freeing_owner(w), (uint32_t)hc__freeing_checked(w)))
				say(c, "page %u: FREEING with aux 0x%x (a checked bit and a slot only)", i,
				    hc__w_aux(w));
			if (quiet(c))
				say(c, "page %u: FREEING while quiescent", i);
			break;
		case HC_PAGE_QUARANTINE:
			if ((atomic_load(&p->pages[i].flags) & HC_PF_KEYED) && quiet(c))
				say(c, "page %u: QUARANTINE but still keyed", i);
			break;
		case HC_PAGE_READY:
			if (hc__w_aux(w) != 0)
				say(c, "page %u: READY with aux bits 0x%x", i, hc__w_aux(w));
			check_ready(c, i, w, pins);
			break;
		default: /* FREE */
			if (hc__w_aux(w) != 0)
				say(c, "page %u: FREE with aux bits 0x%x", i, hc__w_aux(w));
			if (pins && quiet(c))
				say(c, "page %u: FREE with %u pin(s) and %u host lock(s)", i, pins & 0xffff,
				    pins >> 16);
		}
	}
}

/* While quiescent, a map shows every page in its state, and each level's
 * summary bit every word below it that has a bit (freemap.c). */
static void check_map(struct chk *c, const struct hc__fm *fm, unsigned state, const char *what)
{
	struct hc_pool *p = c->p;
	uint32_t missing = 0, first = 0;
	uint64_t word;
	unsigned level;

	for (uint32_t i = 0; i < p->g.npages; i++)
		if (hc__w_state(atomic_load(&p->pages[i].word)) == state && !hc__fm_has(fm, i) && !missing++)
			first = i;
	if (missing)
		say(c,
		    "%s: %u %s page(s) it does not show, the first page %u: no allocation finds them until a recovery",
		    what, missing, hc_page_state_name(state), first);
	if (!hc__fm_summary_ok(fm, &level, &word))
		say(c, "%s: word %llu of level %u has bits, but its summary bit is clear", what,
		    (unsigned long long)word, level);
}

static void lru_line(void *arg, const char *line)
{
	say(arg, "%s", line);
}

/*
 * Returns the number of violations (0: all invariants hold), or a negative
 * errno.  Probing liveness recovers dead slots on the way, like any attach.
 */
int hc__pool_check(struct hc_pool *p, unsigned flags, hc__check_fn report, void *arg)
{
	struct chk *c;
	int n;

	if (p->readonly)
		return hc__err(EROFS, "check: needs a read-write attach to prove liveness");
	if (!(c = calloc(1, sizeof(*c))))
		return hc__err(ENOMEM, "check: no memory");
	c->p = p;
	c->flags = flags;
	c->report = report;
	c->arg = arg;
	for (unsigned s = 0; s < p->g.max_ranks; s++) {
		int r = hc__rank_probe(p, s, NULL);
		/* A claimer the scheduler set aside holds a free slot for more
		 * than the probe's wait: give it a second before calling it stuck. */
		for (int i = 0; r == HC_PROBE_STUCK && !quiet(c) && !hc__sched_on() && i < 100; i++) {
			usleep(10000);
			r = hc__rank_probe(p, s, NULL);
		}
		/* A dead slot another process is still recovering may hold what
		 * it held a moment ago; in a quiescent pool nothing is mid-way. */
		c->live[s] = r == 1 || (r == HC_PROBE_RECOVERING && !quiet(c));
		if (r == HC_PROBE_RECOVERING && quiet(c))
			say(c, "rank slot %u: its dead holder's holds are still being undone", s);
		if (r == HC_PROBE_STUCK)
			say(c,
			    "rank slot %u: free, but its mutex is held by no rank (lock word 0x%08x): a scribbled word, or a process stopped while attaching; 'hicache-pool repair --quiescent' lets go of it once no other process uses the pool",
			    s, (uint32_t)__atomic_load_n(&p->ranks[s].lock.__data.__lock, __ATOMIC_RELAXED));
		if (r < 0)
			say(c,
			    "rank slot %u: mutex unusable; 'hicache-pool repair --quiescent' makes it new once no other process uses the pool",
			    s);
	}
	check_rings(c);
	check_pages(c);
	check_index(c);
	check_tickets(c);
	check_engines(c);
	if (quiet(c)) {
		check_map(c, &p->fm, HC_PAGE_FREE, "free map");
		check_map(c, &p->qm, HC_PAGE_QUARANTINE, "quarantine map");
	}
	hc__lru_census(p, quiet(c), lru_line, c);
	n = c->n;
	free(c);
	return n;
}

int hc_pool_check(hc_pool *p, unsigned flags, void (*report)(void *arg, const char *line), void *arg)
{
	if (!p)
		return hc__err(EINVAL, "check: pool is NULL");
	if (flags & ~HC_CHECK_QUIESCENT)
		return hc__err(EINVAL, "check: unknown flags 0x%x", flags & ~HC_CHECK_QUIESCENT);
	return hc__pool_check(p, flags, report, arg);
}
