/* SPDX-License-Identifier: Apache-2.0 */
/*
 * writer.c - the write policy: which pages the service backs up to L3 on
 * its own, without a rank asking (doc/design.md, "The transfer engine").
 *
 * The dispatcher thread scans the page table when ranks say something
 * changed (the service record's dirty_seq), at start (a restarted service
 * catches up on what it missed: every READY keyed page without IN_L3 is
 * one), and every SCAN_IDLE_MS anyway.  What it picks becomes internal
 * backup jobs with no waiter, in prefix order (shallow pages first: a
 * reader of L3 needs the prefix).  The same page is never queued twice
 * while a job for it runs: 'queued' (one byte per page, set under s->mu) says
 * so.  Everything here is a hint from the segment, checked again by the
 * backup itself, which pins each page and skips one already in L3.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../shmpool/pool.h"
#include "internal.h"

#define SCAN_MIN_MS  2    /* between two scans, however busy the ranks are */
#define SCAN_IDLE_MS 1000 /* a scan at least this often, changes or not */

struct writer {
	_Atomic uint8_t *queued; /* per page: an internal backup has it (written under s->mu) */
	uint64_t seen;           /* dirty_seq at the last scan */
	uint64_t last_ms;        /* when it was */
	unsigned inflight;       /* pages in internal jobs (under s->mu) */
	unsigned max_inflight;
	int again; /* the last scan stopped at max_inflight */
	struct cand {
		uint64_t stamp;
		uint32_t depth, id, gen;
	} * c;
};

int hc__writer_start(hc_service *s)
{
	struct writer *w;

	/* Written at start under the service lock, and left behind: eviction
	 * under write_back keeps dirty pages even while no service runs. */
	atomic_store_explicit(&s->p->ctl->service.select_hits, s->o.select_hits, memory_order_relaxed);
	atomic_store_explicit(&s->p->ctl->service.write_policy, (uint32_t)s->o.write_policy + 1, memory_order_release);
	if (s->o.write_policy == HC_WRITE_NONE)
		return 0;
	if (!(w = calloc(1, sizeof(*w))) || !(w->queued = calloc(s->p->g.npages, 1)) ||
	    !(w->c = calloc(s->p->g.npages, sizeof(*w->c)))) {
		if (w)
			free(w->queued);
		free(w);
		return hc__err(ENOMEM, "service: no memory for the writer's page map");
	}
	/* Enough to keep every worker's store queue full, not the whole pool
	 * queued behind rank requests.  (Queued pages are not pinned; those a
	 * put is writing are, and transfer.c bounds those: put_pages.) */
	w->max_inflight = 2 * s->o.workers * s->o.batch_pages;
	w->seen = atomic_load_explicit(&s->p->ctl->service.dirty_seq, memory_order_relaxed) - 1; /* catch up at once */
	s->writer = w;
	return 0;
}

void hc__writer_stop(hc_service *s)
{
	if (!s->writer)
		return;
	free(s->writer->queued);
	free(s->writer->c);
	free(s->writer);
	s->writer = NULL;
}

/* Under s->mu: an internal job is done with its pages. */
void hc__writer_done(hc_service *s, const struct job *j)
{
	const hc_page_t *pg = j->items;

	for (uint32_t i = 0; i < j->n; i++)
		atomic_store_explicit(&s->writer->queued[HC_PAGE_ID(pg[i])], 0, memory_order_relaxed);
	s->writer->inflight -= j->n;
}

unsigned hc__writer_busy(hc_service *s)
{
	unsigned n;

	if (!s->writer)
		return 0;
	pthread_mutex_lock(&s->mu);
	n = s->writer->inflight;
	pthread_mutex_unlock(&s->mu);
	return n;
}

void hc__writer_kick(hc_service *s)
{
	if (s->writer) /* the next due turn scans, as after a change */
		s->writer->seen = atomic_load_explicit(&s->p->ctl->service.dirty_seq, memory_order_relaxed) - 1;
}

int hc__writer_due(hc_service *s, int *wait_ms)
{
	struct writer *w = s->writer;
	uint64_t now, seq;

	if (!w || !s->st) /* no backend attached: nothing to write to */
		return 0;
	now = hc__mono_ms();
	seq = atomic_load_explicit(&s->p->ctl->service.dirty_seq, memory_order_relaxed);
	if (now - w->last_ms < SCAN_MIN_MS) {
		if (wait_ms && seq != w->seen)
			*wait_ms = SCAN_MIN_MS; /* changes wait for the next turn, not for idle */
		return 0;
	}
	if (now - w->last_ms >= SCAN_IDLE_MS)
		return 1;
	if (w->again) {
		int room;
		pthread_mutex_lock(&s->mu);
		room = w->inflight <= w->max_inflight / 2;
		pthread_mutex_unlock(&s->mu);
		if (room)
			return 1;
	}
	return seq != w->seen;
}

static int by_stamp(const void *x, const void *y)
{
	const struct cand *a = x, *b = y;

	if (a->stamp != b->stamp)
		return a->stamp < b->stamp ? -1 : 1;
	return a->depth != b->depth ? (a->depth > b->depth ? -1 : 1) : (a->id > b->id) - (a->id < b->id);
}

static int by_depth(const void *x, const void *y)
{
	const struct cand *a = x, *b = y;

	if (a->depth != b->depth)
		return a->depth < b->depth ? -1 : 1;
	return (a->id > b->id) - (a->id < b->id);
}

/* Which pages want L3 now; their count, in w->c. */
static unsigned pick(hc_service *s, struct writer *w)
{
	hc_pool *p = s->p;
	unsigned n = 0, clean = 0;
	uint8_t busy[HC_MAX_RANKS] = { 0 };

	if (s->stage)
		hc__stage_busy(s, busy); /* buffer_only: a rank with a grant backs up its own pages */
	for (uint32_t id = 0; id < p->g.npages; id++) {
		struct hc_seg_page *pg = &p->pages[id];
		uint64_t word = atomic_load_explicit(&pg->word, memory_order_acquire);
		uint32_t f = atomic_load_explicit(&pg->flags, memory_order_relaxed);
		if (hc__w_state(word) == HC_PAGE_FREE) {
			clean++;
			continue;
		}
		if (hc__w_state(word) != HC_PAGE_READY || !(f & HC_PF_KEYED))
			continue;
		if (f & HC_PF_IN_L3) {
			clean++;
			continue;
		}
		/* Read without s->mu, a hint: only this thread sets an entry, so
		 * a stale one is a 1 a worker is clearing, and the page waits
		 * for the next scan. */
		if (atomic_load_explicit(&w->queued[id], memory_order_relaxed) ||
		    (s->stage && hc__w_owner(word) < HC_MAX_RANKS && busy[hc__w_owner(word)]))
			continue;
		if (s->o.write_policy == HC_WRITE_THROUGH_SELECTIVE &&
		    atomic_load_explicit(&pg->hits, memory_order_relaxed) < s->o.select_hits)
			continue;
		w->c[n++] = (struct cand){ .stamp = atomic_load_explicit(&pg->stamp, memory_order_relaxed),
					   .depth = atomic_load_explicit(&pg->depth, memory_order_relaxed),
					   .id = id,
					   .gen = hc__w_gen(word) };
	}
	if (s->stage) {
		/* buffer_only: a page whose write was tried already (and failed,
		 * or was cut off) waits to be freed, not written again. */
		unsigned k = 0;
		pthread_mutex_lock(&s->mu);
		for (unsigned i = 0; i < n; i++)
			if (!hc__stage_listed(s, w->c[i].id))
				w->c[k++] = w->c[i];
		pthread_mutex_unlock(&s->mu);
		n = k;
	}
	if (s->o.write_policy == HC_WRITE_BACK) {
		/* Keep writeback_pct of the pool free or clean: write the
		 * oldest dirty pages, the ones eviction would want next. */
		uint64_t want = (uint64_t)p->g.npages * s->o.writeback_pct / 100;
		unsigned need = clean >= want ? 0 : (unsigned)(want - clean);
		qsort(w->c, n, sizeof(*w->c), by_stamp); /* oldest first, also when room cuts it */
		if (need < n)
			n = need;
	}
	return n;
}

void hc__writer_scan(hc_service *s)
{
	struct writer *w = s->writer;
	unsigned n, room, bp = s->o.batch_pages;

	w->seen = atomic_load_explicit(&s->p->ctl->service.dirty_seq, memory_order_relaxed);
	w->last_ms = hc__mono_ms();
	w->again = 0;
	pthread_mutex_lock(&s->mu);
	room = w->inflight < w->max_inflight ? w->max_inflight - w->inflight : 0;
	pthread_mutex_unlock(&s->mu);
	if (!room) {
		w->again = 1;
		return;
	}
	n = pick(s, w);
	if (n > room) {
		w->again = 1;
		if (s->o.write_policy != HC_WRITE_BACK) /* oldest first there; else any, in prefix order */
			qsort(w->c, n, sizeof(*w->c), by_depth);
		n = room;
	}
	qsort(w->c, n, sizeof(*w->c), by_depth);
	for (unsigned i = 0; i < n; i += bp) {
		unsigned k = n - i < bp ? n - i : bp;
		hc_page_t *pages = malloc(k * sizeof(*pages));
		if (!pages) {
			w->again = 1;
			return; /* the next scan tries again */
		}
		for (unsigned j = 0; j < k; j++)
			pages[j] = HC_PAGE_MAKE(w->c[i + j].id, w->c[i + j].gen);
		pthread_mutex_lock(&s->mu);
		for (unsigned j = 0; j < k; j++)
			atomic_store_explicit(&w->queued[w->c[i + j].id], 1, memory_order_relaxed);
		w->inflight += k;
		pthread_mutex_unlock(&s->mu);
		if (hc__xfer_internal(s, HC__OP_BACKUP, pages, k) < 0) {
			pthread_mutex_lock(&s->mu);
			for (unsigned j = 0; j < k; j++)
				atomic_store_explicit(&w->queued[w->c[i + j].id], 0, memory_order_relaxed);
			w->inflight -= k;
			pthread_mutex_unlock(&s->mu);
			w->again = 1;
			return;
		}
		hc__svc_count(s, HC_CTR_l3_writer_pages, k);
	}
}
