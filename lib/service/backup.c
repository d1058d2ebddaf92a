/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backup.c - the service's backups: pages written to L3 in prefix order,
 * for a rank's request (hc_req_backup) or for the write policy
 * (writer.c).  The workers and the dispatcher (transfer.c) call
 * hc__xfer_backups; nothing here touches the job queue.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../l3/store.h"
#include "internal.h"

/* Pages in prefix order, several small backups in one put.
 *
 * A backup's result is how many of its first pages are in L3.  The first
 * failure cancels the pages after it; its errno goes in where.  The
 * writer's own jobs (lenient) are pages picked from a scan, each on its
 * own: one evicted since (its pin fails) or one that fails is skipped, and
 * the rest go on.  Small backups queued together share puts: a rank that
 * backs up each request's few new pages would otherwise get one worker,
 * and a queue depth of one put, per request. */

struct bput { /* a put being gathered */
	hc_page_t *batch;
	uint32_t *pos; /* each entry's index in its backup */
	int *status;
	unsigned k;
};

struct bstate {        /* one backup's way through its pages */
	uint32_t done; /* pages looked at */
	int64_t bad;   /* the index of the first failure; -1: none */
	int err;
	unsigned k0, k1; /* its entries in this round's put */
	int live;
};

/* Pin j's next pages for the put, up to room entries: the flag set
 * afterwards is about these very pages.  One already in L3 is skipped. */
static void bk_pin(hc_service *s, const struct job *j, struct bstate *st, struct bput *b, unsigned room)
{
	hc_pool *p = s->p;
	const hc_page_t *pages = j->items;

	st->k0 = b->k;
	for (; st->done < j->n && b->k < room; st->done++) {
		hc_page_t h = pages[st->done];
		uint32_t id = HC_PAGE_ID(h);
		int r = id < p->g.npages ? hc_page_pin(p, h) : -EINVAL;
		if (r < 0 && j->internal) {
			hc__svc_count(s, HC_CTR_l3_backup_skips, 1);
			continue;
		}
		if (r < 0) {
			st->bad = st->done;
			st->err = r;
			break;
		}
		if (atomic_load_explicit(&p->pages[id].flags, memory_order_acquire) & HC_PF_IN_L3) {
			hc_page_unpin(p, h);
			hc__svc_count(s, HC_CTR_l3_backup_skips, 1);
			if (s->stage)
				hc__stage_release(s, h, 0); /* its write is done */
			continue;
		}
		b->batch[b->k] = h;
		b->pos[b->k++] = st->done;
	}
	st->k1 = b->k;
}

/* A failed L3 write's cause: its counter, and its slot in s->fail. */
static unsigned fail_cause(int err, enum hc_counter *c)
{
	switch (-err) {
	case ENOSPC:
	case EDQUOT:
	case EFBIG:
		*c = HC_CTR_l3_backup_failed_nospace;
		return 0;
	case EACCES:
	case EPERM:
	case EROFS:
		*c = HC_CTR_l3_backup_failed_access;
		return 1;
	case EIO:
		*c = HC_CTR_l3_backup_failed_io;
		return 2;
	default:
		*c = HC_CTR_l3_backup_failed_other;
		return 3;
	}
}

#define FAIL_LOG_NS (UINT64_C(10) * 1000000000u)

void hc__svc_put_failed(hc_service *s, int err)
{
	static const char *const what[] = { "no space", "access refused", "an I/O error", "an error" };
	enum hc_counter c;
	unsigned k = fail_cause(err, &c);
	uint64_t now = hc__mono_ns(), since = 0;
	int say = 0, first;

	hc__svc_count(s, c, 1);
	pthread_mutex_lock(&s->fail_mu);
	s->fail[k].since++;
	first = s->fail[k].last_ns == 0;
	if (first || now - s->fail[k].last_ns >= FAIL_LOG_NS || s->fail[k].last_err != err) {
		say = 1;
		since = s->fail[k].since;
		s->fail[k].since = 0;
		s->fail[k].last_ns = now;
		s->fail[k].last_err = err;
	}
	pthread_mutex_unlock(&s->fail_mu);
	if (!say)
		return;
	if (first)
		hc__log(HC_LOG_ERR,
			"pool '%s': writing a page to L3 (%s) failed with %s: %s; counted in %s, and said again at most every 10 s",
			s->name, s->backend, what[k], strerror(-err), hc_counter_name(c));
	else
		hc__log(HC_LOG_ERR,
			"pool '%s': %" PRIu64 " page writes to L3 (%s) failed with %s since the last report (now %s)",
			s->name, since, s->backend, what[k], strerror(-err));
}

/* After the put: mark what is in L3, take back what was written past a
 * failure, and let the pins go. */
static void bk_settle(hc_service *s, const struct job *j, struct bstate *st, const struct bput *b)
{
	hc_pool *p = s->p;

	for (unsigned i = st->k0; i < st->k1 && !j->internal; i++)
		if (b->status[i] != 0 && (st->bad < 0 || b->pos[i] < st->bad)) {
			st->bad = b->pos[i];
			st->err = b->status[i];
		}
	for (unsigned i = st->k0; i < st->k1; i++) {
		struct hc_seg_page *pg = &p->pages[HC_PAGE_ID(b->batch[i])];
		if (b->status[i] == 0 && (st->bad < 0 || b->pos[i] < st->bad)) {
			atomic_fetch_or_explicit(&pg->flags, HC_PF_IN_L3, memory_order_release);
			hc__svc_count(s, HC_CTR_l3_backup_pages, 1);
			hc__svc_count(s, HC_CTR_l3_backup_bytes, p->g.envelope_bytes);
		} else if (b->status[i] != 0) {
			hc__svc_count(s, HC_CTR_l3_backup_failed, 1); /* lenient: this page only */
			hc__svc_put_failed(s, b->status[i]);
		} else {
			/* Stored after the failure: a suffix nobody can reach
			 * is waste in L3, so it goes again. */
			hc_key_t key;
			int stt;
			hc__svc_page_key(p, HC_PAGE_ID(b->batch[i]), key);
			hc_store_delete(s->st, (const hc_key_t *)&key, 1, &stt);
		}
		hc_page_unpin(p, b->batch[i]);
		if (s->stage)
			hc__stage_release(s, b->batch[i], 0); /* written, or failed: its staging ends */
	}
}

/* j is done with its pages: its result.  buffer_only: the pages a failure
 * (or a cancel) cut off are dropped with it, not left for the writer: L3
 * keeps prefixes only. */
static void bk_end(hc_service *s, struct job *j, const struct bstate *st)
{
	const hc_page_t *pages = j->items;

	if (st->bad >= 0) {
		hc__svc_count(s, HC_CTR_l3_backup_failed, 1);
		j->where = (uint32_t)(st->err < 0 ? -st->err : EIO);
		j->result = (int)st->bad;
	} else if (st->done == j->n) {
		j->result = (int)j->n;
	} else { /* cancelled before its last round */
		j->where = ECANCELED;
		j->result = -ECANCELED;
	}
	for (uint32_t i = j->result >= 0 ? (uint32_t)j->result : 0; s->stage && !j->internal && i < j->n; i++)
		if (HC_PAGE_ID(pages[i]) < s->p->g.npages)
			hc__stage_release(s, pages[i], 0);
}

/* Back up m jobs: in rounds of one put of at most a batch, each job
 * adding its next pages in order until the batch is full.  A job stops at
 * its first failure, or when cancelled (at its next round). */
void hc__xfer_backups(hc_service *s, struct job **js, unsigned m)
{
	unsigned bp = js[0]->internal ? s->put_pages : s->o.batch_pages, live = m;
	struct bput b = { .batch = calloc(bp, sizeof(*b.batch)),
			  .pos = calloc(bp, sizeof(*b.pos)),
			  .status = calloc(bp, sizeof(*b.status)) };
	struct bstate *st = calloc(m, sizeof(*st));

	if (!b.batch || !b.pos || !b.status || !st) {
		for (unsigned i = 0; i < m; i++)
			js[i]->result = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < m; i++)
		st[i] = (struct bstate){ .bad = -1, .live = 1 };
	while (live) {
		b.k = 0;
		for (unsigned i = 0; i < m; i++) {
			st[i].k0 = st[i].k1 = b.k;
			if (!st[i].live || b.k == bp)
				continue;
			if (atomic_load_explicit(&js[i]->cancel, memory_order_relaxed) && st[i].done < js[i]->n) {
				st[i].live = 0;
				live--;
				bk_end(s, js[i], &st[i]);
				continue;
			}
			bk_pin(s, js[i], &st[i], &b, bp);
		}
		if (b.k) {
			hc_store_put(s->st, b.batch, b.k, b.status);
			hc__svc_count(s, HC_CTR_l3_backup_puts, 1);
		}
		for (unsigned i = 0; i < m; i++) {
			if (!st[i].live)
				continue;
			bk_settle(s, js[i], &st[i], &b);
			if (st[i].bad >= 0 || st[i].done == js[i]->n) {
				st[i].live = 0;
				live--;
				bk_end(s, js[i], &st[i]);
			}
		}
	}
out:
	free(b.batch);
	free(b.pos);
	free(b.status);
	free(st);
}