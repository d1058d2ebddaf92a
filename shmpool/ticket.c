/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ticket.c - tickets: every rank of an engine gets the same answer, with no
 * collective and no message.
 *
 * A ticket is named by (engine, request id, step).  The first rank to
 * arrive takes a ticket record (under the stripe lock of the name, so two
 * first-comers cannot both take one), does the lookup or the reservation,
 * writes the answer into the record's page list and publishes it (release
 * CAS BUILDING -> OPEN).  Every later rank with the same name finds the
 * record, checks the keys are the same, takes the same pages and claims its
 * share (a bit in the record's word).  The pool may have changed since: it
 * does not matter, because the answer is the record's, not the index's.
 *
 * HOLDS.  For a lookup, the builder pins its own share and sets the
 * ticket's bit in each answer page's ticket mask (pin protocol, pages.c:
 * the bit is an (A)).  The bit keeps the pages for the ranks still to
 * come; each arriving rank pins its own share in its own column.  When the
 * last share is claimed, or the deadline passes and the rest expire, one
 * rank (the one whose CAS decided it, recorded as owner in DROPPING) clears
 * the bits and closes the record.  A closed record stays as a tombstone, so
 * a rank that comes again gets -EALREADY and a latecomer -ESTALE, until the
 * record is needed for another name.
 *
 * DEATH.  A builder that dies leaves BUILDING owned by a dead slot: its
 * recoverer clears the ticket's bit on every page (the list may be
 * incomplete) and frees the record; waiting ranks start over and one of
 * them builds.  A dropper that dies leaves DROPPING: its recoverer drops
 * again (clearing a bit twice is harmless) and closes.  A rank that dies
 * after claiming loses its pins with its slot, like any pin.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "pool.h"

#define HC_TK_RESTARTS 1000

struct tk_name {
	uint32_t engine; /* id + 1 */
	uint32_t inc;    /* the engine's incarnation */
	uint32_t step;
	char req[48];
	uint64_t hash;
};

static uint64_t now_ms64(void)
{
	return hc__clock_ms();
}

static inline uint64_t all_shares(uint32_t tp)
{
	return tp >= 32 ? HC_TK_CLAIMED : (UINT64_C(1) << tp) - 1;
}

/*
 * This rank's membership as it joined (engine.c keeps the private copy).
 * Its slot says the same unless it was scribbled, and what it says is used
 * below as a shift count (the TP rank), a loop bound (the TP size) and a
 * wait (the timeout): a slot that disagrees is refused, never used.
 */
static int membership(const struct hc_pool *p, const char *op)
{
	const struct hc_seg_rank *me = &p->ranks[p->slot];
	uint32_t e = atomic_load_explicit(&me->engine, memory_order_relaxed);
	uint32_t tp = atomic_load_explicit(&me->tp, memory_order_relaxed);
	uint32_t to = atomic_load_explicit(&me->timeout_ms, memory_order_relaxed);
	uint32_t inc = atomic_load_explicit(&me->incarnation, memory_order_relaxed);

	if (!p->eng_id)
		return hc__err(EINVAL, "%s: this rank has joined no engine: call hc_engine_join first", op);
	if (e != p->eng_id || tp != p->eng_tp || to != p->eng_timeout_ms || inc != p->eng_inc)
		return hc__err(
			EBADMSG,
			"%s: rank slot %d says engine %lld, TP rank %u of %u, ticket timeout %u ms, incarnation %u, but this rank joined engine %u as TP rank %u of %u (%u ms, incarnation %u): the segment is corrupt; run hicache-pool check",
			op, p->slot, (long long)e - 1, tp & 0xffff, tp >> 16, to, inc, p->eng_id - 1,
			p->eng_tp & 0xffff, p->eng_tp >> 16, p->eng_timeout_ms, p->eng_inc);
	return 0;
}

static int name_init(const struct hc_pool *p, const struct hc_ticket_name *given, struct tk_name *nm, const char *op)
{
	struct hc_ticket_name nb, *name = NULL;
	size_t len;
	int ret;

	memset(nm, 0, sizeof(*nm));
	nm->engine = p->eng_id;
	nm->inc = p->eng_inc;
	if (given) {
		if ((ret = HC__ABI_IN(&nb, given, op, hc_ticket_name)) < 0)
			return ret;
		name = &nb;
	}
	if (!name || !name->request_id)
		return hc__err(EINVAL, "%s: the ticket name%s is NULL", op, name ? "'s request id" : "");
	len = strnlen(name->request_id, HC_REQUEST_ID_MAX + 1);
	if (len == 0 || len > HC_REQUEST_ID_MAX)
		return hc__err(EINVAL, "%s: request id is %s: give 1..%d bytes", op, len ? "too long" : "empty",
			       HC_REQUEST_ID_MAX);
	memcpy(nm->req, name->request_id, len);
	nm->step = name->step;
	nm->hash = hc__mix64(((uint64_t)nm->engine << 32 | nm->step) ^ UINT64_C(0x9e3779b97f4a7c15) ^
			     ((uint64_t)nm->inc << 17));
	for (size_t i = 0; i < sizeof(nm->req); i += 8) {
		uint64_t v;
		memcpy(&v, nm->req + i, 8);
		nm->hash = hc__mix64(nm->hash ^ v);
	}
	nm->hash |= 1; /* 0 means "no name" */
	return 0;
}

/* Which keys (and how) a name was used with. */
static void fold_keys(const hc_key_t *keys, unsigned n, uint32_t kind, uint32_t x, uint32_t y, uint64_t out[2])
{
	uint64_t a = hc__mix64((uint64_t)n << 32 | kind), b = hc__mix64((uint64_t)x << 32 | y);

	for (unsigned i = 0; i < n; i++) {
		uint64_t k[4];
		memcpy(k, keys[i], 32);
		a = hc__mix64(a ^ k[0] ^ (k[2] << 1 | k[2] >> 63)) + i;
		b = hc__mix64(b ^ k[1] ^ (k[3] << 3 | k[3] >> 61)) ^ i;
	}
	out[0] = a;
	out[1] = b;
}

/* Does record t carry this name?  *w gets its word, consistent with the name. */
static int matches(const struct hc_pool *p, unsigned t, const struct tk_name *nm, uint64_t *w)
{
	const struct hc_seg_ticket *r = &p->tickets[t];
	uint64_t w1 = atomic_load_explicit(&r->word, memory_order_acquire), w2;
	int eq;

	if (hc__tk_state(w1) == HC_TK_FREE || (w1 & HC_TK_NAMING) ||
	    atomic_load_explicit(&r->name_hash, memory_order_acquire) != nm->hash)
		return 0;
	eq = atomic_load_explicit(&r->engine, memory_order_relaxed) == nm->engine &&
	     atomic_load_explicit(&r->incarnation, memory_order_relaxed) == nm->inc &&
	     atomic_load_explicit(&r->step, memory_order_relaxed) == nm->step &&
	     memcmp(r->request_id, nm->req, sizeof(nm->req)) == 0;
	atomic_thread_fence(memory_order_acquire); /* the name reads before the re-read */
	w2 = atomic_load_explicit(&r->word, memory_order_relaxed);
	*w = w2;
	return eq && hc__tk_gen(w1) == hc__tk_gen(w2); /* the name changes only with the generation */
}

static int stripe_lock(struct hc_pool *p, unsigned s)
{
	pthread_mutex_t *m = &p->ctl->ticket_lock[s].m;
	int r = hc__lock_shared(m);

	/* Nothing to rebuild: records move by CAS, and a half-named record of a
	 * dead taker is BUILDING under a dead owner, which recovery frees. */
	if (r == EOWNERDEAD) {
		pthread_mutex_consistent(m);
		r = 0;
	}
	return r ? hc__err(r, "ticket: stripe lock %u of pool '%s' is unusable (%s); run hicache-pool check", s,
			   p->info.name, strerror(r))
		 : 0;
}

struct tk_new {
	uint32_t kind, nkeys, tp, rank, timeout_ms;
	uint64_t fold[2];
};

/* Find the record of a name, or take one for it.  1: we took it (BUILDING,
 * ours); 0: found; negative errno. */
/* A record to take for a new name: a free one, else the tombstone taken
 * longest ago; -1 if every record is open. */
static int pick_record(const struct hc_pool *p)
{
	uint64_t oldest_seq = UINT64_MAX;
	int oldest = -1;

	for (unsigned t = 0; t < p->g.max_tickets; t++) {
		unsigned st = hc__tk_state(atomic_load_explicit(&p->tickets[t].word, memory_order_acquire));

		if (st == HC_TK_FREE)
			return (int)t;
		if (st == HC_TK_CLOSED && p->tickets[t].seq < oldest_seq) {
			oldest_seq = p->tickets[t].seq;
			oldest = (int)t;
		}
	}
	return oldest;
}

/* Take record t (FREE or CLOSED) for the name, BUILDING and ours; with the
 * name's stripe held.  0, or -EAGAIN if another stripe's taker won it. */
static int take_record(struct hc_pool *p, unsigned t, const struct tk_name *nm, const struct tk_new *nw, uint64_t *wout)
{
	struct hc_seg_ticket *r = &p->tickets[t];
	uint64_t w = atomic_load_explicit(&r->word, memory_order_acquire), taken;

	if (hc__tk_state(w) != HC_TK_FREE && hc__tk_state(w) != HC_TK_CLOSED)
		return -EAGAIN;
	taken = ((uint64_t)HC_TK_BUILDING << HC_TK_STATE_SHIFT) | ((uint64_t)p->slot << HC_TK_OWNER_SHIFT) |
		((uint64_t)((hc__tk_gen(w) + 1) & HC_TK_GEN_MASK) << HC_TK_GEN_SHIFT) | (UINT64_C(1) << nw->rank);
	/* 'naming' until the name below is ours: the old name's finders hold
	 * another stripe and would match its fields in the new generation. */
	if (!atomic_compare_exchange_strong(&r->word, &w, taken | HC_TK_NAMING))
		return -EAGAIN;
	HC_POINT(ticket_taken);
	if (hc__tk_state(w) == HC_TK_CLOSED)
		HC_POINT(ticket_reused);
	atomic_store_explicit(&r->engine, nm->engine, memory_order_relaxed);
	atomic_store_explicit(&r->incarnation, nm->inc, memory_order_relaxed);
	atomic_store_explicit(&r->step, nm->step, memory_order_relaxed);
	memcpy(r->request_id, nm->req, sizeof(r->request_id));
	r->kind = nw->kind;
	r->nkeys = nw->nkeys;
	r->tp_size = nw->tp;
	r->n = 0;
	r->result = 0;
	r->seq = atomic_fetch_add_explicit(&p->ctl->ticket_seq, 1, memory_order_relaxed);
	r->deadline_ms = now_ms64() + nw->timeout_ms;
	r->keys_fold[0] = nw->fold[0];
	r->keys_fold[1] = nw->fold[1];
	atomic_store_explicit(&r->name_hash, nm->hash, memory_order_release);
	/* Release: the name and fields above before a finder matches it. */
	atomic_store_explicit(&r->word, taken, memory_order_release);
	*wout = taken;
	return 0;
}

static int find_or_take(struct hc_pool *p, const struct tk_name *nm, const struct tk_new *nw, unsigned *idx,
			uint64_t *wout)
{
	const unsigned s = (unsigned)(nm->hash % HC_TICKET_STRIPES);
	int ret, t;

	for (int attempt = 0; attempt < 2; attempt++) {
		if ((ret = stripe_lock(p, s)) < 0)
			return ret;
		for (unsigned u = 0; u < p->g.max_tickets; u++) {
			if (matches(p, u, nm, wout)) {
				hc__unlock_shared(&p->ctl->ticket_lock[s].m);
				*idx = u;
				return 0;
			}
		}
		/* Takers of other stripes race for the same records: pick again
		 * after a lost CAS, at most once per record. */
		for (unsigned tries = 0; tries < p->g.max_tickets && (t = pick_record(p)) >= 0; tries++) {
			if (take_record(p, (unsigned)t, nm, nw, wout) == 0) {
				hc__unlock_shared(&p->ctl->ticket_lock[s].m);
				*idx = (unsigned)t;
				return 1;
			}
		}
		hc__unlock_shared(&p->ctl->ticket_lock[s].m);
		hc__tickets_sweep(p); /* overdue tickets may free records */
	}
	return hc__err(
		EBUSY,
		"ticket: all %u ticket records of pool '%s' are open: release tickets, or create the pool with more (max_tickets)",
		p->g.max_tickets, p->info.name);
}

static inline _Atomic uint64_t *tk_pages(const struct hc_pool *p, unsigned t)
{
	return p->tpages + (size_t)t * p->g.ticket_keys;
}

void hc__ticket_clear_bits(struct hc_pool *p, unsigned t)
{
	const uint64_t bit = UINT64_C(1) << (t % 64);

	for (uint32_t id = 0; id < p->g.npages; id++) {
		_Atomic uint64_t *tw = &hc__tmask_row(p, id)[t / 64];
		if (atomic_load_explicit(tw, memory_order_relaxed) & bit)
			atomic_fetch_and(tw, ~bit);
	}
}

/* An expired reservation can never be completed: quarantine its pages
 * (other ranks' DMA may still land), then take them out of the index. */
static void abandon(struct hc_pool *p, hc_page_t page)
{
	struct hc_seg_page *pg;
	uint64_t w;

	if (HC_PAGE_ID(page) >= p->g.npages)
		return;
	pg = &p->pages[HC_PAGE_ID(page)];
	w = atomic_load(&pg->word);
	while (hc__w_state(w) == HC_PAGE_RESERVED && hc__w_gen(w) == HC_PAGE_GEN(page)) {
		uint64_t q = hc__w_make(HC_PAGE_QUARANTINE, hc__w_owner(w), hc__w_gen(w), hc__now_ms() | 1);
		if (atomic_compare_exchange_weak(&pg->word, &w, q)) {
			hc__fm_put(&p->qm, HC_PAGE_ID(page));
			hc__count(p, HC_CTR_quarantines, 1);
			hc__quota_give_slot(p, hc__w_owner(w), 1);
			hc__unkey_at(p, HC_PAGE_ID(page), q);
			return;
		}
	}
}

/* We own DROPPING: let go of what the ticket holds, then close it. */
static void drop(struct hc_pool *p, unsigned t, uint64_t w)
{
	struct hc_seg_ticket *r = &p->tickets[t];
	_Atomic uint64_t *list = tk_pages(p, t);
	/* Each read once: another process may scribble them meanwhile, and n
	 * bounds the walk of the list (a second read could be past it). */
	uint32_t n = __atomic_load_n(&r->n, __ATOMIC_RELAXED), kind = __atomic_load_n(&r->kind, __ATOMIC_RELAXED);

	if (n > p->g.ticket_keys)
		n = p->g.ticket_keys;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t e = atomic_load_explicit(&list[i], memory_order_relaxed);
		hc_page_t h = e & ((UINT64_C(1) << HC_TP_SKIP_SHIFT) - 1);

		if (e == HC_PAGE_NONE || HC_PAGE_ID(h) >= p->g.npages)
			continue;
		HC_POINT(ticket_drop);
		if (kind == HC_TK_LOOKUP) {
			_Atomic uint64_t *tw = &hc__tmask_row(p, HC_PAGE_ID(h))[t / 64];
			if (atomic_load_explicit(tw, memory_order_relaxed) & (UINT64_C(1) << (t % 64)))
				atomic_fetch_and(tw, ~(UINT64_C(1) << (t % 64)));
		} else if ((w & HC_TK_EXPIRED) && !(e >> HC_TP_SKIP_SHIFT))
			abandon(p, h);
	}
	HC_POINT(ticket_dropped);
	/* Release: the holds are gone before the record can be taken again. */
	atomic_store_explicit(&r->word, hc__tk_with(w, HC_TK_CLOSED, 0), memory_order_release);
}

/* Expire an overdue OPEN ticket; 1 if we did. */
static int expire(struct hc_pool *p, unsigned t, uint64_t w)
{
	struct hc_seg_ticket *r = &p->tickets[t];
	uint64_t nw;

	if (hc__tk_state(w) != HC_TK_OPEN || now_ms64() <= r->deadline_ms)
		return 0;
	nw = hc__tk_with(w, HC_TK_DROPPING, (unsigned)p->slot) | HC_TK_EXPIRED;
	if (!atomic_compare_exchange_strong(&r->word, &w, nw))
		return 0;
	HC_POINT(ticket_expired);
	drop(p, t, nw);
	hc__count(p, HC_CTR_tickets_expired, 1);
	return 1;
}

void hc__tickets_sweep(struct hc_pool *p)
{
	if (p->slot < 0)
		return;
	for (unsigned t = 0; t < p->g.max_tickets; t++) {
		uint64_t w = atomic_load_explicit(&p->tickets[t].word, memory_order_acquire);
		if (hc__tk_state(w) == HC_TK_OPEN)
			expire(p, t, w);
	}
}

/* Recovery of a dead slot, with its mutex held. */
void hc__tickets_recover_slot(struct hc_pool *p, unsigned slot)
{
	for (unsigned t = 0; t < p->g.max_tickets; t++) {
		struct hc_seg_ticket *r = &p->tickets[t];
		uint64_t w = atomic_load_explicit(&r->word, memory_order_acquire);

		if (hc__tk_owner(w) != slot)
			continue;
		if (hc__tk_state(w) == HC_TK_BUILDING) {
			/* Nothing was published.  Its reservations, if any, are the dead
			 * slot's and get quarantined with the rest of its pages. */
			hc__ticket_clear_bits(p, t);
			atomic_compare_exchange_strong(&r->word, &w,
						       hc__tk_with(w, HC_TK_FREE, 0) & ~(HC_TK_CLAIMED | HC_TK_NAMING));
		} else if (hc__tk_state(w) == HC_TK_DROPPING) {
			drop(p, t, w);
		}
	}
}

/* The engine is gone (engine.c): its open tickets are dropped as slot
 * 'as', their unclaimed shares expired, and its tombstones freed, so no
 * ticket outlives the engine that held it. */
void hc__tickets_end_engine(struct hc_pool *p, uint32_t e, uint32_t inc, unsigned as)
{
	for (unsigned t = 0; t < p->g.max_tickets; t++) {
		struct hc_seg_ticket *r = &p->tickets[t];
		uint64_t w = atomic_load_explicit(&r->word, memory_order_acquire), nw;

		if (atomic_load_explicit(&r->engine, memory_order_relaxed) != e ||
		    atomic_load_explicit(&r->incarnation, memory_order_relaxed) != inc)
			continue;
		if (hc__tk_state(w) == HC_TK_OPEN) {
			nw = hc__tk_with(w, HC_TK_DROPPING, as) | HC_TK_EXPIRED;
			if (atomic_compare_exchange_strong(&r->word, &w, nw)) {
				HC_POINT(ticket_expired);
				drop(p, t, nw);
				w = atomic_load_explicit(&r->word, memory_order_acquire);
			}
		}
		/* Only a record of this name's generation: a taker may have it already. */
		if (hc__tk_state(w) == HC_TK_CLOSED && atomic_load_explicit(&r->engine, memory_order_relaxed) == e &&
		    atomic_load_explicit(&r->incarnation, memory_order_relaxed) == inc)
			atomic_compare_exchange_strong(&r->word, &w, hc__tk_with(w, HC_TK_FREE, 0) & ~HC_TK_CLAIMED);
	}
}

/* Wait for a builder to publish; 0 when the record is past BUILDING. */
static int wait_built(struct hc_pool *p, unsigned t, uint32_t gen, uint32_t timeout_ms, uint64_t *w)
{
	uint64_t start = now_ms64();
	struct timespec ts = { 0, 20000 };

	for (unsigned i = 1;; i++) {
		*w = atomic_load_explicit(&p->tickets[t].word, memory_order_acquire);
		if (hc__tk_gen(*w) != gen || hc__tk_state(*w) != HC_TK_BUILDING)
			return 0;
		if (hc__tk_owner(*w) >=
		    p->g.max_ranks) /* never probe a slot past the table: the service's lock lies there */
			return hc__err(
				EBADMSG,
				"ticket: record %u is being built by rank slot %u, past the pool's %u: the segment is corrupt; run hicache-pool check",
				t, hc__tk_owner(*w), p->g.max_ranks);
		if ((i % 64 == 0 || hc__sched_on()) && hc__rank_probe(p, hc__tk_owner(*w), NULL) == 0)
			continue; /* the builder was dead: its recovery just freed the record */
		HC_POINT(ticket_wait);
		if (now_ms64() - start > timeout_ms)
			return hc__err(
				ETIMEDOUT,
				"ticket: rank slot %u has been building ticket %u for %u ms and is alive; is it stopped?",
				hc__tk_owner(*w), t, timeout_ms);
		if (hc__sched_on())
			continue; /* the builder runs while we park */
		if (i < 32)
			sched_yield();
		else
			nanosleep(&ts, NULL);
	}
}

static const char *kind_name(uint32_t k)
{
	return k == HC_TK_LOOKUP ? "lookup" : "reserve";
}

/*
 * Everything tickets share.  The builder's work is do_build(); it returns
 * the page count recorded (or a negative errno, which gives the record
 * back).  Joiners copy the record's answer into pages/skip.
 */
struct tk_call {
	const char *op;
	struct tk_new nw;
	const struct hc_lookup_req *lreq;
	const struct hc_reserve_req *rreq;
	hc_page_t *pages;
	uint8_t *skip;
	unsigned nkeys;
};

static int build(struct hc_pool *p, unsigned t, const struct tk_call *c, uint32_t *held)
{
	struct hc_seg_ticket *r = &p->tickets[t];
	_Atomic uint64_t *list = tk_pages(p, t);
	int tk = c->nw.tp > 1 ? (int)t : -1;
	int ret;
	uint32_t n;

	if (c->nw.kind == HC_TK_LOOKUP) {
		ret = hc__lookup(p, c->lreq, c->pages, 1, tk, held);
		n = (uint32_t)ret;
		if ((ret = hc__quota_take(p, *held, c->op)) < 0) {
			hc__lookup_release(p, c->pages, n, tk);
			return ret;
		}
		hc__count(p, HC_CTR_pins, n);
	} else {
		ret = hc__reserve(p, c->rreq, c->pages, c->skip);
		if (ret < 0)
			return ret;
		*held = 0; /* the reservations count as ours until completed (pages.c) */
		n = c->nkeys;
		/* The other ranks write them too: an abort must quarantine them
		 * (pages.c).  Before OPEN publishes them. */
		for (uint32_t i = 0; i < n && c->nw.tp > 1; i++)
			if (!c->skip[i])
				atomic_fetch_or(&p->pages[HC_PAGE_ID(c->pages[i])].flags, HC_PF_SHARED);
	}
	for (uint32_t i = 0; i < n; i++) {
		uint64_t e = c->pages[i];
		if (c->nw.kind == HC_TK_RESERVE && c->skip[i])
			e = ((uint64_t)c->skip[i] << HC_TP_SKIP_SHIFT);
		atomic_store_explicit(&list[i], e, memory_order_relaxed);
	}
	r->n = n;
	return (int)n;
}

/* Copy the published answer; take our holds.  Returns n or negative errno. */
static int join(struct hc_pool *p, unsigned t, const struct tk_call *c, uint32_t *held)
{
	struct hc_seg_ticket *r = &p->tickets[t];
	_Atomic uint64_t *list = tk_pages(p, t);
	uint32_t n = __atomic_load_n(&r->n, __ATOMIC_RELAXED), i; /* once: another process may scribble it */
	int ret = 0;

	*held = 0;
	if (n > c->nkeys || n > p->g.ticket_keys)
		return hc__err(
			EBADMSG,
			"%s: ticket %u records %u pages for %u keys (at most %u a ticket): the segment is corrupt; run hicache-pool check",
			c->op, t, n, c->nkeys, p->g.ticket_keys);
	for (i = 0; i < c->nkeys; i++) {
		c->pages[i] = HC_PAGE_NONE;
		if (c->skip)
			c->skip[i] = 0;
	}
	for (i = 0; i < n; i++) {
		uint64_t e = atomic_load_explicit(&list[i], memory_order_relaxed);
		unsigned why = (unsigned)(e >> HC_TP_SKIP_SHIFT);

		if (c->nw.kind == HC_TK_RESERVE && e != HC_PAGE_NONE && why) {
			/* The builder writes a skip reason alone, and only one
			 * the API defines: the caller may index by it. */
			if ((why != HC_SKIP_READY && why != HC_SKIP_BUSY) ||
			    (e & ((UINT64_C(1) << HC_TP_SKIP_SHIFT) - 1)))
				return hc__err(
					EBADMSG,
					"%s: ticket %u entry %u is 0x%llx, no skip reason (%d or %d) alone: the segment is corrupt; run hicache-pool check",
					c->op, t, i, (unsigned long long)e, HC_SKIP_READY, HC_SKIP_BUSY);
			c->skip[i] = (uint8_t)why;
			continue;
		}
		if (e == HC_PAGE_NONE)
			continue;
		/* A handle: an id of the pool, a generation, nothing above it. */
		if (HC_PAGE_ID(e) >= p->g.npages || e != HC_PAGE_MAKE(HC_PAGE_ID(e), HC_PAGE_GEN(e)))
			return hc__err(
				EBADMSG,
				"%s: ticket %u entry %u is 0x%llx, no handle of a page of the pool's %u: the segment is corrupt; run hicache-pool check",
				c->op, t, i, (unsigned long long)e, p->g.npages);
		c->pages[i] = e;
	}
	/*
	 * Our holds.  A lookup's pages: pins, which the ticket's bit keeps
	 * READY (a freer that saw the bit puts it back, so FREEING is waited
	 * out), counted against our quota.  A reservation's pages: a hold until
	 * our copy is done; the builder owns them and their quota.
	 */
	for (i = 0; i < n; i++) {
		if (c->pages[i] == HC_PAGE_NONE)
			continue;
		ret = hc__hold(p, c->pages[i], HC_PIN_ONE,
			       c->nw.kind == HC_TK_RESERVE ? HC_HOLD_RESERVED : HC_HOLD_WAIT_FREEING, c->op);
		if (ret < 0)
			break;
		*held += c->nw.kind == HC_TK_LOOKUP ? (uint32_t)ret : 0;
		ret = 0;
	}
	if (ret == 0 && c->nw.kind == HC_TK_LOOKUP && (ret = hc__quota_take(p, *held, c->op)) < 0)
		i = n;
	if (ret < 0) {
		while (i-- > 0)
			if (c->pages[i] != HC_PAGE_NONE)
				hc__hold_drop(p, HC_PAGE_ID(c->pages[i]), HC_PIN_ONE);
		*held = 0;
		return ret;
	}
	if (c->nw.kind == HC_TK_LOOKUP)
		hc__count(p, HC_CTR_pins, n);
	return (int)n;
}

static void undo_join(struct hc_pool *p, const struct tk_call *c, uint32_t n)
{
	uint32_t gone = 0;

	for (uint32_t i = 0; i < n; i++)
		if (c->pages[i] != HC_PAGE_NONE)
			gone += (uint32_t)hc__hold_drop(p, HC_PAGE_ID(c->pages[i]), HC_PIN_ONE);
	if (c->nw.kind == HC_TK_LOOKUP)
		hc__quota_give(p, gone);
}

/* The caller's handle: its size, which the library writes up to.  The
 * size is in the caller's memory, so a bound keeps a garbage one from
 * letting the library write far past the handle. */
int hc__ticket_handle_ok(const hc_ticket *t, const char *op)
{
	if (!t)
		return hc__err(EINVAL, "%s: the ticket handle is NULL", op);
	if (t->size < HC__V1_hc_ticket || t->size > HC__TICKET_SIZE_MAX)
		return hc__err(
			EINVAL,
			"%s: the ticket handle has size %u, which no version of it has (the first is %zu bytes): set .size = sizeof(hc_ticket) before the call",
			op, t->size, HC__V1_hc_ticket);
	return 0;
}

static int ticket_run(struct hc_pool *p, const struct hc_ticket_name *name, struct tk_call *c, hc_ticket *out)
{
	struct tk_name nm;
	uint64_t w = 0;
	unsigned t = 0;
	uint32_t held = 0, tpw;
	int32_t res_err;
	int ret, n = 0;
	hc_ticket res = { .size = sizeof(
				  hc_ticket) }; /* *out is written only on success: a live handle is never lost */
	uint32_t g0;

	if ((ret = hc__need_slot(p, c->op)) < 0 || (ret = membership(p, c->op)) < 0 ||
	    (ret = name_init(p, name, &nm, c->op)) < 0)
		return ret;
	if ((ret = hc__ticket_handle_ok(out, c->op)) < 0)
		return ret;
	if (c->nkeys > p->g.ticket_keys)
		return hc__err(E2BIG, "%s: %u keys, but a ticket of pool '%s' names at most %u (ticket_keys)", c->op,
			       c->nkeys, p->info.name, p->g.ticket_keys);
	tpw = p->eng_tp; /* the slot's copy may be scribbled (membership()) */
	c->nw.tp = tpw >> 16;
	c->nw.rank = tpw & 0xffff;
	c->nw.timeout_ms = p->eng_timeout_ms;
	c->nw.nkeys = c->nkeys;
	memset(&res, 0, sizeof(res));

	for (int restart = 0; restart < HC_TK_RESTARTS; restart++) {
		struct hc_seg_ticket *r;
		uint64_t bit = UINT64_C(1) << c->nw.rank, all = all_shares(c->nw.tp);

		if ((ret = find_or_take(p, &nm, &c->nw, &t, &w)) < 0)
			return ret;
		r = &p->tickets[t];
		if (ret == 1) { /* we are first */
			n = build(p, t, c, &held);
			if (n < 0) { /* publish the failure: every rank gets the same answer */
				hc__ticket_clear_bits(p, t);
				r->n = 0;
				r->result = n;
			}
			HC_POINT(ticket_built);
			/* Release: the answer before anyone reads OPEN. */
			if ((w & HC_TK_CLAIMED) == all) {
				uint64_t d = hc__tk_with(w, HC_TK_DROPPING, (unsigned)p->slot);
				atomic_store_explicit(&r->word, d, memory_order_release);
				drop(p, t, d);
			} else {
				atomic_store_explicit(&r->word, hc__tk_with(w, HC_TK_OPEN, 0), memory_order_release);
			}
			hc__count(p, HC_CTR_tickets_opened, 1);
			if (n < 0)
				return n; /* its own message stands */
			res.first = 1;
			goto done;
		}
		g0 = hc__tk_gen(w);
		if (hc__tk_state(w) == HC_TK_BUILDING && (ret = wait_built(p, t, g0, c->nw.timeout_ms, &w)) < 0)
			return ret;
		/* The builder died and the record went to another name meanwhile,
		 * or is free: start over. */
		if (hc__tk_gen(w) != g0 || hc__tk_state(w) == HC_TK_FREE || hc__tk_state(w) == HC_TK_BUILDING)
			continue;
		if (hc__tk_gen(w) != hc__tk_gen(atomic_load_explicit(&r->word, memory_order_acquire)))
			continue;
		if (r->kind != c->nw.kind || r->nkeys != c->nkeys || r->keys_fold[0] != c->nw.fold[0] ||
		    r->keys_fold[1] != c->nw.fold[1])
			return hc__err(
				EINVAL,
				"%s: ticket '%s' step %u of engine %u was opened as a %s of %u keys with other keys; a name is for one key list (use another step)",
				c->op, nm.req, nm.step, nm.engine - 1, kind_name(r->kind), r->nkeys);
		if (r->tp_size != c->nw.tp)
			return hc__err(EINVAL, "%s: ticket '%s' step %u was opened for TP %u, this rank has TP %u",
				       c->op, nm.req, nm.step, r->tp_size, c->nw.tp);
		if (w & bit)
			return hc__err(EALREADY, "%s: TP rank %u already claimed its share of ticket '%s' step %u",
				       c->op, c->nw.rank, nm.req, nm.step);
		if ((w & HC_TK_EXPIRED) || hc__tk_state(w) != HC_TK_OPEN || expire(p, t, w))
			return hc__err(
				ESTALE,
				"%s: ticket '%s' step %u expired before TP rank %u claimed its share (timeout %u ms); look up again under a new step",
				c->op, nm.req, nm.step, c->nw.rank, c->nw.timeout_ms);
		if ((n = join(p, t, c, &held)) < 0) {
			uint64_t now = atomic_load(&r->word);
			if (hc__tk_gen(now) == hc__tk_gen(w) && (now & HC_TK_EXPIRED))
				return hc__err(ESTALE,
					       "%s: ticket '%s' step %u expired while TP rank %u claimed its share",
					       c->op, nm.req, nm.step, c->nw.rank);
			return n;
		}
		HC_POINT(ticket_joined);
		/* Claim: one CAS, which also names us the dropper if we are last. */
		for (;;) {
			uint64_t nw = w | bit;

			if ((nw & HC_TK_CLAIMED) == all)
				nw = hc__tk_with(nw, HC_TK_DROPPING, (unsigned)p->slot);
			if (atomic_compare_exchange_strong(&r->word, &w, nw)) {
				HC_POINT(ticket_claimed);
				if (hc__tk_state(nw) == HC_TK_DROPPING)
					drop(p, t, nw);
				break;
			}
			if (hc__tk_gen(w) != hc__tk_gen(nw) || hc__tk_state(w) != HC_TK_OPEN ||
			    (w & (bit | HC_TK_EXPIRED))) {
				undo_join(p, c, (uint32_t)n);
				return hc__err(ESTALE,
					       "%s: ticket '%s' step %u expired while TP rank %u claimed its share",
					       c->op, nm.req, nm.step, c->nw.rank);
			}
		}
		hc__count(p, HC_CTR_tickets_joined, 1);
		if ((res_err = __atomic_load_n(&r->result, __ATOMIC_RELAXED)) < 0) {
			/* An errno the builder published, or a scribble (whose
			 * negation might not even be an int). */
			if (res_err < -4095)
				res_err = -EBADMSG;
			undo_join(p, c,
				  (uint32_t)n); /* nothing, unless the record was scribbled: no handle keeps them */
			return hc__err(
				-res_err,
				"%s: the first rank of engine %u failed ticket '%s' step %u with %s; every rank gets the same answer (try again under a new step)",
				c->op, nm.engine - 1, nm.req, nm.step, strerror(-res_err));
		}
		goto done;
	}
	return hc__err(EAGAIN, "%s: ticket '%s' step %u kept changing under us; try again", c->op, nm.req, nm.step);
done:
	res.index = t;
	res.gen = hc__tk_gen(w);
	res.kind = c->nw.kind;
	res.n = (uint32_t)n;
	res.held = held;
	res.pages = c->pages;
	res.size = out->size;
	hc__abi_out(out, out->size, &res, sizeof(res), HC__V1_hc_ticket, c->op, "hc_ticket");
	if (c->nw.kind == HC_TK_RESERVE) { /* the answer is how many pages to write */
		int m = 0;
		for (unsigned i = 0; i < c->nkeys; i++)
			m += c->pages[i] != HC_PAGE_NONE;
		return m;
	}
	return n;
}

int hc_ticket_lookup(hc_pool *p, const struct hc_ticket_name *name, const struct hc_lookup_req *req, hc_page_t *pages,
		     hc_ticket *t)
{
	struct tk_call c = { .op = "ticket lookup", .pages = pages };
	struct hc_lookup_req rb;
	int ret;

	if (!p)
		return hc__err(EINVAL, "ticket lookup: pool is NULL");
	if (!(req = HC__ABI_USE(req, &rb, c.op, hc_lookup_req, &ret)))
		return ret;
	c.lreq = req;
	if ((ret = hc__lookup_check(p, req, pages, c.op)) < 0)
		return ret;
	c.nkeys = req->nkeys;
	c.nw.kind = HC_TK_LOOKUP;
	/* The answer depends on the components and on whether the fingerprint is ours. */
	fold_keys(req->keys, req->nkeys, HC_TK_LOOKUP, req->comps, (uint32_t)hc__fp_ok(p, req->fingerprint, c.op),
		  c.nw.fold);
	return ticket_run(p, name, &c, t);
}

int hc_ticket_reserve(hc_pool *p, const struct hc_ticket_name *name, const struct hc_reserve_req *req, hc_page_t *pages,
		      uint8_t *skip, hc_ticket *t)
{
	struct tk_call c = { .op = "ticket reserve", .pages = pages, .skip = skip };
	struct hc_reserve_req rb;
	int ret;

	if (!p)
		return hc__err(EINVAL, "ticket reserve: pool is NULL");
	if (!(req = HC__ABI_USE(req, &rb, c.op, hc_reserve_req, &ret)))
		return ret;
	c.rreq = req;
	if ((ret = hc__reserve_check(p, req, pages, skip, c.op)) < 0)
		return ret;
	c.nkeys = req->nkeys;
	c.nw.kind = HC_TK_RESERVE;
	fold_keys(req->keys, req->nkeys, HC_TK_RESERVE, req->first_depth, req->presence, c.nw.fold);
	return ticket_run(p, name, &c, t);
}

int hc_ticket_release(hc_pool *p, hc_ticket *t)
{
	int ret;

	if (!p || !t)
		return hc__err(EINVAL, "ticket release: %s is NULL", p ? "ticket" : "pool");
	if ((ret = hc__need_slot(p, "ticket release")) < 0 || (ret = hc__ticket_handle_ok(t, "ticket release")) < 0)
		return ret;
	if (t->released)
		return hc__err(EALREADY, "ticket release: ticket %u was already released by this rank", t->index);
	if (t->kind != HC_TK_LOOKUP && t->kind != HC_TK_RESERVE)
		return hc__err(EINVAL,
			       "ticket release: the handle was never filled by hc_ticket_lookup or hc_ticket_reserve");
	if (t->n && !t->pages)
		return hc__err(EINVAL, "ticket release: the handle lost its page array");
	/* Our pins (lookup), or our write holds (reserve, not the builder). */
	if (t->kind == HC_TK_LOOKUP || !t->first) {
		uint32_t gone = 0;

		for (uint32_t i = 0; i < t->n; i++)
			if (t->pages[i] != HC_PAGE_NONE && HC_PAGE_ID(t->pages[i]) < p->g.npages) {
				HC_POINT(ticket_released);
				gone += (uint32_t)hc__hold_drop(p, HC_PAGE_ID(t->pages[i]), HC_PIN_ONE);
			}
		if (t->kind == HC_TK_LOOKUP)
			hc__quota_give(p, gone);
	}
	t->released = 1;
	return 0;
}
