/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check.c - verify the invariants that tie the page table, the holds, the
 * key index, the tickets and the rank table together.  There is no
 * free-page cache to check: allocation scans the page table itself.  None of them holds by construction across
 * processes that die at random, so tests (and later 'hicache-pool check')
 * run this after the dust settles.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "pool.h"

static void say(hc__check_fn report, void *arg, int *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void say(hc__check_fn report, void *arg, int *n, const char *fmt, ...)
{
	char line[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	(*n)++;
	if (report)
		report(arg, line);
}

/* The key index against the page table. */
static void check_index(struct hc_pool *p, unsigned flags, hc__check_fn report, void *arg, int *n)
{
	uint64_t nent = (uint64_t)p->g.index_buckets * HC_BUCKET_ENTRIES;
	uint8_t *seen = calloc(p->g.npages, 1);

	if (!seen) {
		say(report, arg, n, "index: no memory to check %u pages", p->g.npages);
		return;
	}
	for (uint64_t i = 0; i < nent; i++) {
		uint64_t e = atomic_load(&p->index[i]), w;
		uint32_t id = (uint32_t)e - 1, b = (uint32_t)(i / HC_BUCKET_ENTRIES);
		struct hc__khash kh;

		if (e == 0)
			continue;
		if ((uint32_t)e == 0 || id >= p->g.npages) {
			say(report, arg, n, "index entry %llu: page id %u is out of range", (unsigned long long)i, id);
			continue;
		}
		w = atomic_load(&p->pages[id].word);
		if (!hc__keyed_live(p, id, w)) {
			if (flags & HC_CHECK_QUIESCENT)
				say(report, arg, n, "index entry %llu: names page %u, which is %s and %skeyed",
				    (unsigned long long)i, id, hc_page_state_name(hc__w_state(w)),
				    (atomic_load(&p->pages[id].flags) & HC_PF_KEYED) ? "" : "not ");
			continue;
		}
		hc__page_khash(p, id, &kh);
		if ((b != kh.b1 && b != kh.b2) || (uint32_t)(e >> 32) != kh.tag)
			say(report, arg, n, "index entry %llu: page %u is in bucket %u with tag 0x%x; its key belongs in %u or %u with 0x%x",
			    (unsigned long long)i, id, b, (uint32_t)(e >> 32), kh.b1, kh.b2, kh.tag);
		else if (seen[id]++)
			say(report, arg, n, "index: page %u has more than one entry", id);
	}
	for (uint32_t id = 0; id < p->g.npages; id++) {
		uint64_t w = atomic_load(&p->pages[id].word);
		struct hc__khash kh;
		int64_t found;

		if (!hc__keyed_live(p, id, w)) {
			if (!seen[id] && (atomic_load(&p->pages[id].flags) & HC_PF_KEYED) &&
			    hc__w_state(w) == HC_PAGE_FREE)
				say(report, arg, n, "page %u: FREE but still flagged as keyed", id);
			continue;
		}
		if (!seen[id]) { /* between a writer's flag and its insert, or remove and flag */
			if (flags & HC_CHECK_QUIESCENT)
				say(report, arg, n, "page %u: keyed and %s but not in the index", id,
				    hc_page_state_name(hc__w_state(w)));
			continue;
		}
		hc__page_khash(p, id, &kh);
		found = hc__index_find(p, &kh);
		if (found != (int64_t)id)
			say(report, arg, n, "page %u: its key also names live page %lld", id, (long long)found);
	}
	free(seen);
}

/* Tickets against their shares and the pages they hold. */
static void check_tickets(struct hc_pool *p, unsigned flags, const int *live, hc__check_fn report, void *arg, int *n)
{
	for (unsigned t = 0; t < p->g.max_tickets; t++) {
		const struct hc_seg_ticket *r = &p->tickets[t];
		uint64_t w = atomic_load(&r->word), bit = UINT64_C(1) << (t % 64);
		unsigned st = hc__tk_state(w), owner = hc__tk_owner(w);
		_Atomic uint64_t *list = p->tpages + (size_t)t * p->g.ticket_keys;

		if (st > HC_TK_CLOSED) {
			say(report, arg, n, "ticket %u: invalid state %u", t, st);
			continue;
		}
		if (st == HC_TK_FREE)
			continue;
		if ((st == HC_TK_BUILDING || st == HC_TK_DROPPING) && (owner >= p->g.max_ranks || !live[owner]))
			say(report, arg, n, "ticket %u: %s by slot %u, which is not live", t,
			    st == HC_TK_BUILDING ? "BUILDING" : "DROPPING", owner);
		if ((st == HC_TK_BUILDING || st == HC_TK_DROPPING) && (flags & HC_CHECK_QUIESCENT))
			say(report, arg, n, "ticket %u: %s while quiescent", t, st == HC_TK_BUILDING ? "BUILDING" : "DROPPING");
		if (r->tp_size == 0 || r->tp_size > HC_TP_MAX || (w & HC_TK_CLAIMED & ~(r->tp_size >= 32 ? HC_TK_CLAIMED : (UINT64_C(1) << r->tp_size) - 1)))
			say(report, arg, n, "ticket %u: shares 0x%llx do not fit TP %u", t,
			    (unsigned long long)(w & HC_TK_CLAIMED), r->tp_size);
		if (r->kind != HC_TK_LOOKUP && r->kind != HC_TK_RESERVE)
			say(report, arg, n, "ticket %u: invalid kind %u", t, r->kind);
		if (st >= HC_TK_OPEN && (r->n > r->nkeys || r->nkeys > p->g.ticket_keys))
			say(report, arg, n, "ticket %u: %u pages recorded for %u keys (limit %u)", t, r->n, r->nkeys,
			    p->g.ticket_keys);
		if (st != HC_TK_OPEN || r->kind != HC_TK_LOOKUP || r->n > p->g.ticket_keys)
			continue;
		/* An OPEN lookup ticket holds every page of its answer. */
		for (uint32_t i = 0; i < r->n; i++) {
			uint64_t e = atomic_load(&list[i]);
			if (e == HC_PAGE_NONE || HC_PAGE_ID(e) >= p->g.npages)
				continue;
			if (!(atomic_load(&hc__tmask_row(p, HC_PAGE_ID(e))[t / 64]) & bit))
				say(report, arg, n, "ticket %u: OPEN but does not hold page %u of its answer", t, HC_PAGE_ID(e));
			else {
				uint64_t pw = atomic_load(&p->pages[HC_PAGE_ID(e)].word);
				/* A freer stopped in its check (FREEING, aux 0) sees our hold
				 * and puts the page back: a transient, as for pins above. */
				int checking = hc__w_state(pw) == HC_PAGE_FREEING && !hc__freeing_checked(pw) &&
					       !(flags & HC_CHECK_QUIESCENT);
				if (hc__w_state(pw) != HC_PAGE_READY && !checking)
					say(report, arg, n, "ticket %u: holds page %u, which is %s (aux %u), not READY", t,
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
				const struct hc_seg_ticket *r = &p->tickets[t];
				unsigned st = hc__tk_state(atomic_load(&r->word));
				int ok = st == HC_TK_BUILDING || st == HC_TK_DROPPING;

				if (st == HC_TK_OPEN && r->kind == HC_TK_LOOKUP && r->n <= p->g.ticket_keys)
					for (uint32_t i = 0; i < r->n && !ok; i++)
						ok = HC_PAGE_ID(atomic_load(&p->tpages[(size_t)t * p->g.ticket_keys + i])) == id &&
						     atomic_load(&p->tpages[(size_t)t * p->g.ticket_keys + i]) != HC_PAGE_NONE;
				if (!ok)
					say(report, arg, n, "page %u: held by ticket %u, which is %s and does not name it", id, t,
					    st == HC_TK_FREE ? "FREE" : st == HC_TK_CLOSED ? "CLOSED" : "OPEN");
			}
		}
	}
}

/* Engine membership: only live slots, one slot per TP rank, one TP size. */
static void check_engines(struct hc_pool *p, const int *live, hc__check_fn report, void *arg, int *n)
{
	for (unsigned s = 0; s < p->g.max_ranks; s++) {
		uint32_t e = atomic_load(&p->ranks[s].engine), tp = atomic_load(&p->ranks[s].tp);

		if (!e)
			continue;
		if (!live[s]) {
			say(report, arg, n, "rank slot %u: member of engine %u but not live", s, e - 1);
			continue;
		}
		if ((tp >> 16) == 0 || (tp >> 16) > HC_TP_MAX || (tp & 0xffff) >= (tp >> 16))
			say(report, arg, n, "rank slot %u: TP rank %u of %u is out of range", s, tp & 0xffff, tp >> 16);
		for (unsigned o = s + 1; o < p->g.max_ranks; o++) {
			uint32_t oe = atomic_load(&p->ranks[o].engine), otp = atomic_load(&p->ranks[o].tp);
			if (oe != e || !live[o])
				continue;
			if ((otp >> 16) != (tp >> 16))
				say(report, arg, n, "engine %u: slots %u and %u disagree on TP size (%u, %u)", e - 1, s, o,
				    tp >> 16, otp >> 16);
			else if ((otp & 0xffff) == (tp & 0xffff))
				say(report, arg, n, "engine %u: slots %u and %u both hold TP rank %u", e - 1, s, o, tp & 0xffff);
		}
	}
}

/*
 * Returns the number of violations (0: all invariants hold), or a negative
 * errno.  Probing liveness recovers dead slots on the way, like any attach.
 */
int hc__pool_check(struct hc_pool *p, unsigned flags, hc__check_fn report, void *arg)
{
	int live[HC_MAX_RANKS], n = 0;

	if (p->readonly)
		return hc__err(EROFS, "check: needs a read-write attach to prove liveness");
	for (unsigned s = 0; s < p->g.max_ranks; s++) {
		int r = hc__rank_probe(p, s, NULL);
		/* A dead slot another process is still recovering may hold what
		 * it held a moment ago; in a quiescent pool nothing is mid-way. */
		live[s] = r == 1 || (r == HC_PROBE_RECOVERING && !(flags & HC_CHECK_QUIESCENT));
		if (r == HC_PROBE_RECOVERING && (flags & HC_CHECK_QUIESCENT))
			say(report, arg, &n, "rank slot %u: its dead holder's holds are still being undone", s);
		if (r < 0)
			say(report, arg, &n, "rank slot %u: mutex unusable", s);
	}
	/* Each rank slot's request path: rings that say what they are and hold
	 * no more than they can (a scribbled index is refused, never trusted). */
	for (unsigned s = 0; s < p->g.max_ranks; s++) {
		uint8_t *blk = p->rings + (uint64_t)s * p->g.rg.block;
		struct hc__ring v;
		if (hc__ring_attach(&v, blk + p->g.rg.sq_off, p->g.rg.cq_off - p->g.rg.sq_off, p->g.sq_entries,
				    HC_SQE_BYTES, HC_RING_CONSUMER) < 0)
			say(report, arg, &n, "rank slot %u: request ring: %s", s, hc_last_error());
		if (hc__ring_attach(&v, blk + p->g.rg.cq_off, p->g.rg.arg_off - p->g.rg.cq_off, p->g.cq_entries,
				    HC_CQE_BYTES, HC_RING_CONSUMER) < 0)
			say(report, arg, &n, "rank slot %u: completion ring: %s", s, hc_last_error());
	}
	for (uint32_t i = 0; i < p->g.npages; i++) {
		uint64_t w = atomic_load(&p->pages[i].word);
		unsigned st = hc__w_state(w), owner = hc__w_owner(w);
		_Atomic uint32_t *row = hc__pin_row(p, i);
		unsigned pins = 0;

		if (st > HC_PAGE_FREEING) {
			say(report, arg, &n, "page %u: invalid state %u", i, st);
			continue;
		}
		if ((st == HC_PAGE_RESERVED || st == HC_PAGE_FREEING || st == HC_PAGE_QUARANTINE) &&
		    owner >= p->g.max_ranks) {
			say(report, arg, &n, "page %u: %s with owner slot %u out of range", i,
			    hc_page_state_name(st), owner);
			continue;
		}
		if (st == HC_PAGE_RESERVED && !live[owner])
			say(report, arg, &n, "page %u: RESERVED by slot %u, which is not live", i, owner);
		if (st == HC_PAGE_FREEING && !live[owner])
			say(report, arg, &n, "page %u: FREEING by slot %u, which is not live", i, owner);
		if (st == HC_PAGE_FREEING && hc__w_aux(w) != hc__freeing_aux(hc__freeing_owner(w), hc__freeing_checked(w)))
			say(report, arg, &n, "page %u: FREEING with aux 0x%x (a checked bit and a slot only)", i, hc__w_aux(w));
		if (st == HC_PAGE_FREEING && (flags & HC_CHECK_QUIESCENT))
			say(report, arg, &n, "page %u: FREEING while quiescent", i);
		if (st == HC_PAGE_RESERVED) {
			uint32_t need = hc_page_needed(p, atomic_load(&p->pages[i].presence));
			if (hc__w_aux(w) & ~need)
				say(report, arg, &n, "page %u: fill mask 0x%x has shards outside 0x%x", i, hc__w_aux(w), need);
		}
		if (st == HC_PAGE_QUARANTINE && (atomic_load(&p->pages[i].flags) & HC_PF_KEYED) &&
		    (flags & HC_CHECK_QUIESCENT))
			say(report, arg, &n, "page %u: QUARANTINE but still keyed", i);
		if ((st == HC_PAGE_FREE || st == HC_PAGE_READY) && hc__w_aux(w) != 0)
			say(report, arg, &n, "page %u: %s with aux bits 0x%x", i, hc_page_state_name(st), hc__w_aux(w));
		for (unsigned s = 0; s < p->g.max_ranks; s++) {
			unsigned c = atomic_load(&row[s]);
			pins += c;
			if (c && !live[s])
				say(report, arg, &n, "page %u: %u pin(s) and %u host lock(s) held by slot %u, which is not live",
				    i, c & 0xffff, c >> 16, s);
			if (c && s >= hc__hwm(p))
				say(report, arg, &n, "page %u: holds in slot %u, above the high-water mark %u", i, s, hc__hwm(p));
		}
		if (pins && st != HC_PAGE_READY && (flags & HC_CHECK_QUIESCENT))
			say(report, arg, &n, "page %u: pins or host locks on a %s page", i, hc_page_state_name(st));
	}
	check_index(p, flags, report, arg, &n);
	check_tickets(p, flags, live, report, arg, &n);
	check_engines(p, live, report, arg, &n);
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
