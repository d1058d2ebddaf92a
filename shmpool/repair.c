/* SPDX-License-Identifier: Apache-2.0 */
/*
 * repair.c - fix what the check finds and recovery cannot (hc_pool_repair,
 * 'hicache-pool repair').  Recovery undoes what a dead rank held, exactly;
 * repair deals with damage: words that make no sense, READY pages nothing
 * finds or frees, entries that fail their check, a key index that lies,
 * tickets of engines that are gone, holds in the columns of free slots.
 *
 * Live ranks may run meanwhile, so every fix is one a live rank could have
 * made itself: a page leaves READY only by a retirement, which backs off
 * when anything holds it; a slot's hold column is cleared only with the
 * slot's mutex held and the slot FREE, so no rank can claim it meanwhile;
 * the index is rebuilt a stripe at a time under the stripe's lock, from
 * the page table.  What a live rank holds is never freed: it is reported,
 * and left.  At the end the check runs again; what it still finds is
 * reported as "cannot repair", and counted.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

struct fix {
	struct hc_pool *p;
	struct hc_repair_report *r;
	void (*report)(void *arg, const char *line);
	void *arg;
	uint8_t live[HC_MAX_RANKS];
};

static void say(struct fix *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(struct fix *f, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (f->report)
		f->report(f->arg, line);
}

static int live(const struct fix *f, unsigned s)
{
	return s < f->p->g.max_ranks && f->live[s];
}

/* Free a READY page at word w, as a retirement; why names it in the line. */
static int retire(struct fix *f, uint32_t id, uint64_t w, uint32_t *count, const char *why)
{
	struct hc__holds h;
	int r = hc__retire(f->p, id, w, HC_RETIRE_FREE, NULL);

	if (r == 0) {
		(*count)++;
		say(f, "fixed: page %u: %s; freed", id, why);
	} else if (r == -EBUSY) {
		hc__page_holds(f->p, id, &h);
		say(f,
		    "cannot repair: page %u: %s, but it is held (%u pins, %u host locks, %u tickets); left to its holders",
		    id, why, h.pins, h.locks, h.tickets);
	}
	return r;
}

/* A word no protocol writes: an invalid state, an owner past the rank
 * table, aux bits where none belong.  Quarantined under our slot: the sweep
 * frees it when its grace ran out and nothing holds it. */
static int bad_word(struct fix *f, uint32_t id, uint64_t w)
{
	struct hc_pool *p = f->p;
	unsigned st = hc__w_state(w), owner = hc__w_owner(w);
	const char *what;
	uint64_t nw;

	if (st > HC_PAGE_FREEING)
		what = "an invalid state";
	else if ((st == HC_PAGE_RESERVED || st == HC_PAGE_FREEING || st == HC_PAGE_QUARANTINE) &&
		 owner >= p->g.max_ranks)
		what = "an owner past the rank table";
	else if ((st == HC_PAGE_READY || st == HC_PAGE_FREE) && hc__w_aux(w))
		what = "aux bits";
	else if ((st == HC_PAGE_RESERVED || st == HC_PAGE_FREEING) && !live(f, owner) &&
		 hc__rank_probe(p, owner, NULL) != 1 && atomic_load(&p->pages[id].word) == w)
		what = "an owner slot that nobody holds"; /* looked at again: a claimer may have it now */
	else
		return 0;
	if (st == HC_PAGE_READY || st == HC_PAGE_FREE) /* only the aux is wrong */
		nw = hc__w_make(st, owner, hc__w_gen(w), 0);
	else
		nw = hc__w_make(HC_PAGE_QUARANTINE, (unsigned)p->slot, hc__w_gen(w) + 1, hc__now_ms() | 1);
	if (!atomic_compare_exchange_strong(&p->pages[id].word, &w, nw))
		return 1; /* it moved: someone is using it after all */
	if (hc__w_state(nw) == HC_PAGE_QUARANTINE) {
		hc__fm_put(&p->qm, id);
		hc__unkey_at(p, id, nw); /* as any quarantiner does, after its CAS */
	}
	f->r->bad_words++;
	say(f, "fixed: page %u: its word 0x%llx had %s; %s", id, (unsigned long long)w, what,
	    hc__w_state(nw) == HC_PAGE_QUARANTINE ? "quarantined" : "cleared");
	return 1;
}

/* A READY page: damaged, lost, or an orphan nobody holds. */
static void ready_page(struct fix *f, uint32_t id, uint64_t w)
{
	struct hc_pool *p = f->p;
	struct hc_seg_page *pg = &p->pages[id];
	uint32_t fl = atomic_load(&pg->flags), presence = atomic_load(&pg->presence);
	int keyed = (fl & HC_PF_KEYED) != 0;
	struct hc__holds h;

	if (presence == 0 || (presence >> p->g.ncomp) != 0 || !hc__page_check_ok(p, id, fl)) {
		if (atomic_load(&pg->word) == w) /* not a writer's moment */
			retire(f, id, w, &f->r->damaged,
			       keyed ? "its key, depth or presence fail their check" : "its presence fails its check");
		return;
	}
	if (keyed)
		return; /* the index pass finds it, or puts it back */
	if (!(fl & HC_PF_ANON)) {
		retire(f, id, w, &f->r->lost, "READY, neither keyed nor allocated without a key");
		return;
	}
	if (live(f, hc__w_owner(w)))
		return;
	if (!(fl & HC_PF_ORPHAN)) {
		if (retire(f, id, w, &f->r->lost, "allocated without a key by a slot that is not live") == -EBUSY) {
			atomic_fetch_or(&pg->flags, HC_PF_ORPHAN); /* the last hold frees it */
			hc__lru_heal(p, id, 1);                    /* as recovery's orphans: nobody's cache */
		}
		return;
	}
	hc__page_holds(p, id, &h);
	if (h.pins + h.locks + h.tickets == 0)
		retire(f, id, w, &f->r->lost, "an orphan nobody holds");
}

/* A FREE page still flagged keyed: the flag goes (its index entry goes
 * with the rebuild).  A CAS on the flags: an allocator that took the page
 * meanwhile stores its own flags after its word, and wins. */
static void free_page(struct fix *f, uint32_t id)
{
	struct hc_seg_page *pg = &f->p->pages[id];
	uint32_t fl = atomic_load(&pg->flags);

	if (!(fl & HC_PF_KEYED) || hc__w_state(atomic_load(&pg->word)) != HC_PAGE_FREE)
		return;
	if (atomic_compare_exchange_strong(&pg->flags, &fl, fl & ~HC_PF_KEYED)) {
		f->r->bad_words++;
		say(f, "fixed: page %u: FREE but flagged keyed; the flag cleared", id);
	}
}

static void fix_pages(struct fix *f)
{
	struct hc_pool *p = f->p;

	for (uint32_t id = 0; id < p->g.npages; id++) {
		uint64_t w = atomic_load(&p->pages[id].word);

		HC_POINT(repair_page_seen);
		if (bad_word(f, id, w))
			continue;
		if (hc__w_state(w) == HC_PAGE_READY)
			ready_page(f, id, w);
		else if (hc__w_state(w) == HC_PAGE_QUARANTINE && (atomic_load(&p->pages[id].flags) & HC_PF_KEYED))
			hc__unkey_at(p, id, w); /* a quarantiner died before it took the key out */
		else if (hc__w_state(w) == HC_PAGE_FREE)
			free_page(f, id);
	}
}

/* Holds in the column of a slot nobody has: cleared with its mutex held
 * and the slot FREE, so no claimer can start using the column meanwhile. */
static void fix_columns(struct fix *f)
{
	struct hc_pool *p = f->p;

	for (unsigned s = 0; s < p->g.max_ranks; s++) {
		struct hc_seg_rank *rk = &p->ranks[s];
		uint32_t n = 0;

		int r;

		if (live(f, s) || (int)s == p->slot)
			continue;
		r = hc__mutex_kind_ok(&rk->lock) ? pthread_mutex_trylock(&rk->lock) : ENOTRECOVERABLE;
		if (r == EOWNERDEAD) /* claimed and dead since we looked: recover it, then look */
			r = hc__rank_take_dead(p, s, &f->r->recovery);
		if (r != 0)
			continue;
		if (atomic_load(&rk->state) == HC_RANK_FREE)
			for (uint32_t id = 0; id < p->g.npages; id++) {
				_Atomic uint32_t *c = &hc__pin_row(p, id)[s];
				if (atomic_load(c)) {
					atomic_store(c, 0);
					n++;
				}
			}
		pthread_mutex_unlock(&rk->lock);
		if (n) {
			f->r->holds_cleared += n;
			say(f, "fixed: rank slot %u: free, but %u pages had holds in its column; cleared", s, n);
		}
	}
}

/* Does the index hold exactly one good entry for each keyed live page?
 * Count the rest: entries that name nothing of their key, pages missing. */
static void index_census(struct fix *f, uint32_t *bad, uint32_t *missing)
{
	struct hc_pool *p = f->p;
	uint64_t nent = (uint64_t)p->g.index_buckets * HC_BUCKET_ENTRIES;
	uint8_t *seen = calloc(p->g.npages, 1);

	*bad = *missing = 0;
	if (!seen)
		return;
	for (uint64_t i = 0; i < nent; i++) {
		uint64_t e = atomic_load(&p->index[i]);
		uint32_t id = (uint32_t)e - 1;

		if (e == 0)
			continue;
		if ((uint32_t)e == 0 || id >= p->g.npages || !hc__keyed_live(p, id, atomic_load(&p->pages[id].word)) ||
		    !hc__index_entry_placed(p, i, e, id) || seen[id]++)
			(*bad)++;
	}
	for (uint32_t id = 0; id < p->g.npages; id++)
		*missing += !seen[id] && hc__keyed_live(p, id, atomic_load(&p->pages[id].word));
	free(seen);
}

static void fix_index(struct fix *f)
{
	struct hc_pool *p = f->p;
	uint32_t bad, missing;

	index_census(f, &bad, &missing);
	if (bad + missing == 0)
		return;
	for (unsigned s = 0; s < HC_INDEX_STRIPES; s++) {
		hc__index_lock(p, s);
		hc__index_rebuild_stripe(p, s);
		hc__index_unlock(p, s);
	}
	f->r->index_bad += bad;
	f->r->index_missing += missing;
	say(f,
	    "fixed: key index: %u entries that named no page of their key dropped, %u keyed pages put back; rebuilt from the page table",
	    bad, missing);
}

/* Two live pages with one key: the index finds one, the other is lost. */
static void fix_duplicates(struct fix *f)
{
	struct hc_pool *p = f->p;

	for (uint32_t id = 0; id < p->g.npages; id++) {
		uint64_t w = atomic_load(&p->pages[id].word);
		struct hc__khash kh;
		int64_t found;

		if (hc__w_state(w) != HC_PAGE_READY || !hc__keyed_live(p, id, w))
			continue;
		hc__page_khash(p, id, &kh);
		found = hc__index_find(p, &kh);
		if (found >= 0 && found != (int64_t)id)
			retire(f, id, w, &f->r->duplicates, "its key is another live page's");
	}
}

/* A record no protocol leaves: its holds dropped, the record freed. */
static void scrap_ticket(struct fix *f, unsigned t, uint64_t w, const char *why)
{
	struct hc_pool *p = f->p;
	struct hc_seg_ticket *r = &p->tickets[t];

	if (!atomic_compare_exchange_strong(&r->word, &w,
					    hc__tk_with(w, HC_TK_DROPPING, (unsigned)p->slot) | HC_TK_EXPIRED))
		return;
	/* A death here leaves a ticket DROPPING by a dead slot: its recoverer
	 * drops its holds (bounded by ticket_keys) and closes it. */
	HC_POINT(repair_scrapped);
	hc__ticket_clear_bits(p, t);
	r->n = 0;
	atomic_store(&r->word, hc__tk_with(w, HC_TK_FREE, 0) & ~(HC_TK_CLAIMED | HC_TK_EXPIRED));
	f->r->tickets_ended++;
	say(f, "fixed: ticket %u: %s; its holds dropped, the record freed", t, why);
}

static void fix_tickets(struct fix *f)
{
	struct hc_pool *p = f->p;

	for (unsigned t = 0; t < p->g.max_tickets; t++) {
		struct hc_seg_ticket *r = &p->tickets[t];
		uint64_t w = atomic_load(&r->word);
		unsigned st = hc__tk_state(w), owner = hc__tk_owner(w);
		uint32_t e = atomic_load(&r->engine), inc = atomic_load(&r->incarnation);

		if (st == HC_TK_FREE)
			continue;
		if (st > HC_TK_CLOSED)
			scrap_ticket(f, t, w, "an invalid state");
		else if ((st == HC_TK_BUILDING || st == HC_TK_DROPPING) && owner >= p->g.max_ranks)
			scrap_ticket(f, t, w, "an owner past the rank table");
		else if ((st == HC_TK_OPEN || st == HC_TK_CLOSED) && /* no writer at work on it */
			 (r->n > r->nkeys || r->nkeys > p->g.ticket_keys || r->tp_size == 0 || r->tp_size > HC_TP_MAX ||
			  (r->kind != HC_TK_LOOKUP && r->kind != HC_TK_RESERVE)))
			scrap_ticket(f, t, w, "a record that does not add up (pages, keys, TP or kind)");
		else if (st == HC_TK_OPEN && !hc__engine_alive(p, f->live, e, inc)) {
			hc__tickets_end_engine(p, e, inc, (unsigned)p->slot);
			f->r->tickets_ended++;
			say(f, "fixed: ticket %u: OPEN for engine %u (incarnation %u), which has no live member; ended",
			    t, e - 1, inc);
		}
	}
}

/* A ticket's bit on a page it does not name: dropped, then put back if
 * the record moved meanwhile (a new builder may have set it). */
static void fix_ticket_bits(struct fix *f)
{
	struct hc_pool *p = f->p;

	for (uint32_t id = 0; id < p->g.npages; id++)
		for (unsigned k = 0; k < p->tmask_words; k++) {
			_Atomic uint64_t *row = &hc__tmask_row(p, id)[k];
			for (uint64_t m = atomic_load(row); m; m &= m - 1) {
				unsigned t = k * 64 + (unsigned)__builtin_ctzll(m);
				uint64_t bit = m & -m, w;

				if (t >= p->g.max_tickets) {
					atomic_fetch_and(row, ~bit);
					f->r->ticket_bits++;
					continue;
				}
				w = atomic_load(&p->tickets[t].word);
				if (hc__ticket_holds(p, t, id, w))
					continue;
				atomic_fetch_and(row, ~bit);
				HC_POINT(repair_bit_dropped);
				if (atomic_load(&p->tickets[t].word) != w) {
					atomic_fetch_or(row, bit);
					continue;
				}
				f->r->ticket_bits++;
				say(f, "fixed: page %u: held by ticket %u, which does not name it; the hold dropped",
				    id, t);
			}
		}
}

/* The LRU list, if the census finds it wrong: rebuilt from the page
 * table, under its lock (a FREE page the free map lost came back with the
 * recovery's sweep). */
static void fix_lru(struct fix *f, unsigned flags)
{
	int n = hc__lru_census(f->p, (flags & HC_CHECK_QUIESCENT) != 0, NULL, NULL);

	if (n <= 0)
		return;
	hc__lru_repair(f->p);
	say(f, "fixed: LRU list: %d fault(s) in its links, order or membership; rebuilt from the page table", n);
}

static void left(void *arg, const char *line)
{
	struct fix *f = arg;

	say(f, "cannot repair: %s", line);
}

/* Quiescent only (the operator's word that no process is attaching,
 * probing or repairing): free slots whose mutex no rank holds, or that is
 * unusable, are made usable again, before recovery probes them. */
static void fix_slot_locks(struct fix *f)
{
	char what[96];

	for (unsigned s = 0; s < f->p->g.max_ranks; s++)
		if (hc__rank_unlock_stuck(f->p, s, what, sizeof(what)) == 1) {
			f->r->slot_locks++;
			say(f, "fixed: rank slot %u: %s", s, what);
		}
}

int hc_pool_repair(hc_pool *p, unsigned flags, struct hc_repair_report *rep, size_t size,
		   void (*report)(void *arg, const char *line), void *arg)
{
	struct hc_repair_report mine = { 0 };
	struct fix *f;
	int ret;

	if (!p)
		return hc__err(EINVAL, "repair: pool is NULL");
	if (flags & ~HC_CHECK_QUIESCENT)
		return hc__err(EINVAL, "repair: unknown flags 0x%x", flags & ~HC_CHECK_QUIESCENT);
	if (p->readonly || p->slot < 0)
		return hc__err(
			EPERM,
			"repair: pool '%s' is attached without a rank slot; attach it as a rank (not HC_ATTACH_ADMIN or READONLY)",
			p->info.name);
	/* Checked first: a bad size must not cost a repair's findings. */
	if (rep && (ret = HC__ABI_OUT_OK(size, "hc_pool_repair", hc_repair_report)) < 0)
		return ret;
	if (!(f = calloc(1, sizeof(*f))))
		return hc__err(ENOMEM, "repair: no memory");
	f->p = p;
	f->r = &mine;
	f->report = report;
	f->arg = arg;
	if (flags & HC_CHECK_QUIESCENT)
		fix_slot_locks(f);
	if ((ret = hc__recover(p, &f->r->recovery)) < 0)
		goto out;
	for (unsigned s = 0; s < p->g.max_ranks; s++)
		f->live[s] = (int)s == p->slot || hc__rank_probe(p, s, NULL) == 1;
	fix_pages(f);
	fix_columns(f);
	fix_tickets(f);
	fix_ticket_bits(f);
	fix_index(f);
	fix_duplicates(f);
	fix_lru(f, flags);
	ret = hc__pool_check(p, flags, left, f);
	if (ret >= 0)
		f->r->unrepaired = (uint32_t)ret;
out:
	free(f);
	if (rep)
		HC__ABI_OUT(rep, size, &mine, "hc_pool_repair", hc_repair_report);
	return ret;
}
