/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prefetch.c - the service's prefetches, in three steps: the longest
 * prefix of keys that L3 has (or that is READY, or being read), a
 * reservation of its missing pages all or nothing, and the reads, cut in
 * parts idle workers help with.  Merging by key goes through the key map
 * (transfer.c): a key another job reads makes this one wait for it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../l3/store.h"
#include "internal.h"

/* Is key READY in the pool now? */
static int in_l2(hc_service *s, const hc_key_t *key)
{
	struct hc_lookup_req lr = { .size = sizeof(struct hc_lookup_req),
				    .keys = key,
				    .nkeys = 1,
				    .flags = HC_LOOKUP_NOTOUCH };
	hc_page_t h;

	return hc_lookup(s->p, &lr, &h) == 1;
}

/* Step 1: the longest prefix of keys that is in L3, READY, or being read. */
static int pf_prefix(hc_service *s, struct job *j, int *status)
{
	const hc_key_t *keys = j->items;
	uint32_t done = 0;

	while (done < j->n) {
		unsigned k = j->n - done < s->o.batch_pages ? j->n - done : s->o.batch_pages;
		int r;
		if (atomic_load_explicit(&j->cancel, memory_order_relaxed))
			return (int)done; /* cancelled: what is known so far */
		r = hc_store_exists(s->st, keys + done, k, status);
		hc__svc_count(s, HC_CTR_l3_exists_keys, k);
		if (r < 0)
			return r;
		for (unsigned i = 0; i < k; i++) {
			int busy;
			if (status[i] == 1)
				continue;
			pthread_mutex_lock(&s->mu);
			busy = hc__km_find(s->keys, keys[done + i]) != NULL;
			pthread_mutex_unlock(&s->mu);
			if (!busy &&
			    !(status[i] == 0 ? hc__xfer_l3_absent(s, &keys[done + i]) : in_l2(s, &keys[done + i])))
				return (int)(done + i);
		}
		done += k;
	}
	return (int)j->n;
}

/* Step 2, under mu: reserve the prefix's missing pages all or nothing, and
 * register them; keys another job reads make this one wait for it. */
static int pf_reserve(hc_service *s, struct job *j, uint32_t len, hc_page_t *pages, uint8_t *skip)
{
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req),
				     .keys = j->items,
				     .nkeys = len,
				     .first_depth = j->pf.first_depth,
				     .presence = j->pf.presence };
	const hc_key_t *keys = j->items;
	int r = hc_reserve(s->p, &rr, pages, skip);

	if (r < 0)
		return r;
	j->mine = malloc((size_t)(r ? r : 1) * sizeof(hc_key_t));
	if (!j->mine) {
		for (uint32_t i = 0; i < len; i++)
			if (!skip[i])
				hc_page_abort(s->p, &pages[i], 1);
		return hc__err(ENOMEM, "prefetch: no memory");
	}
	for (uint32_t i = 0; i < len; i++) {
		if (skip[i] == HC_SKIP_BUSY) {
			struct job *a = hc__km_find(s->keys, keys[i]);
			/* Not ours: a rank is storing it, and it will be READY. */
			if (a && a != j && hc__xfer_depend(j, a) == 0)
				hc__svc_count(s, HC_CTR_l3_prefetch_shared, 1);
		} else if (!skip[i]) {
			if (hc__km_add(s->keys, keys[i], j) == 0)
				memcpy(j->mine[j->nmine++], keys[i], sizeof(hc_key_t));
		}
	}
	return r;
}

/* Step 3: read the reserved pages and commit them in prefix order; the
 * first that fails ends the prefix, and every reserved page from it on is
 * given back unread or unused.
 *
 * A long read is cut into parts that idle workers help with: one worker
 * reading a 1000-page prefetch alone leaves the others idle, and with a
 * backend that copies on the caller's thread (shm) that halves the
 * bandwidth.  Parts may end in any order; they are settled (committed or
 * given back) in order, by one thread at a time, so the ranks only ever
 * see a prefix. */
struct pf_help {
	struct pf_help *next; /* on s->helps while parts are left (under mu) */
	struct job *j;
	const hc_page_t *pages; /* the reservation */
	const uint32_t *at;     /* the indices in pages of those to read, nread */
	int *status;            /* one per entry of at */
	uint8_t *done;          /* one per part */
	uint32_t nread, part;   /* entries; entries per part */
	/* under mu */
	uint32_t claimed;  /* entries before it are claimed */
	uint32_t fail;     /* the first entry that failed; nread: none */
	uint32_t settled;  /* entries before it are committed or given back */
	unsigned inflight; /* parts claimed and not settled */
	int settling;      /* a thread settles parts (with mu let go) */
	/* the settling thread's */
	int failed; /* the prefix has ended */
};

/* Under mu: claim the next part of h, or take h off the list: none is
 * left, the prefix ended before it, or the job is cancelled. */
static int pf_claim(hc_service *s, struct pf_help *h, uint32_t *first)
{
	if (h->claimed < h->nread && h->claimed <= h->fail &&
	    !atomic_load_explicit(&h->j->cancel, memory_order_relaxed)) {
		*first = h->claimed;
		h->claimed += h->nread - h->claimed < h->part ? h->nread - h->claimed : h->part;
		h->inflight++;
		return 1;
	}
	for (struct pf_help **pp = &s->helps; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	return 0;
}

/* Commit entry x, or give its page back once the prefix has ended (the
 * settling thread's; read: it was read, not skipped by a cancel or a
 * failure before it). */
static void pf_settle(hc_service *s, struct pf_help *h, uint32_t x, int read)
{
	hc_pool *p = s->p;
	hc_page_t pg = h->pages[h->at[x]];
	uint32_t pres;

	if (!h->failed && read && h->status[x] == 0 && hc_page_presence(p, pg, &pres) == 0) {
		/* From L3: a backup of it has nothing to do.  Set while the page
		 * is still our reservation. */
		atomic_fetch_or_explicit(&p->pages[HC_PAGE_ID(pg)].flags, HC_PF_IN_L3, memory_order_relaxed);
		if (hc_page_commit(p, pg, hc_page_needed(p, pres)) >= 0) {
			HC_POINT(prefetch_committed);
			h->j->l3_pages++;
			hc__svc_count(s, HC_CTR_l3_prefetch_pages, 1);
			hc__svc_count(s, HC_CTR_l3_prefetch_bytes, p->g.envelope_bytes);
			return;
		}
	}
	if (!h->failed) {
		h->failed = 1;
		h->j->where = h->at[x];
		if (read)
			hc__svc_count(s,
				      h->status[x] == -EBADMSG        ? HC_CTR_l3_prefetch_corrupt
				      : h->status[x] == -EKEYREJECTED ? HC_CTR_l3_prefetch_forged
								      : HC_CTR_l3_prefetch_failed,
				      1);
	}
	if (!read || h->status[x] != -ETIME) /* given up on: the store aborts it once the backend lets go */
		hc_page_abort(p, &pg, 1);
}

/* Under mu, let go while it reads and settles: read parts of h until none
 * is left.  The owner and its helpers alike; h is the owner's, and stays
 * until no part is in flight. */
static void pf_read_parts(hc_service *s, struct pf_help *h, int helper)
{
	hc_page_t *batch = malloc((size_t)h->part * sizeof(*batch));
	uint32_t first;

	while (pf_claim(s, h, &first)) {
		uint32_t k = h->nread - first < h->part ? h->nread - first : h->part, bad = h->nread;
		int *status = h->status + first;
		pthread_mutex_unlock(&s->mu);
		for (uint32_t x = 0; x < k; x++)
			if (batch)
				batch[x] = h->pages[h->at[first + x]];
			else
				status[x] = -ENOMEM; /* not read: the prefix ends here */
		if (batch)
			hc_store_get(s->st, batch, k, status);
		if (helper)
			hc__svc_count(s, HC_CTR_l3_prefetch_helped, 1);
		for (uint32_t x = 0; x < k && bad == h->nread; x++)
			if (status[x] != 0)
				bad = first + x;
		pthread_mutex_lock(&s->mu);
		if (bad < h->fail)
			h->fail = bad;
		h->done[first / h->part] = 1;
		/* Settle the parts done from the first unsettled on, unless a
		 * thread is at it: it will find this one done too. */
		if (!h->settling) {
			h->settling = 1;
			while (h->settled < h->claimed && h->done[h->settled / h->part]) {
				uint32_t from = h->settled, to = h->nread - from < h->part ? h->nread : from + h->part;
				pthread_mutex_unlock(&s->mu);
				for (uint32_t x = from; x < to; x++)
					pf_settle(s, h, x, 1);
				pthread_mutex_lock(&s->mu);
				h->settled = to;
			}
			h->settling = 0;
		}
		if (--h->inflight == 0)
			pthread_cond_broadcast(&s->helped);
	}
	free(batch);
}

/* Returns the reads that failed (0 or 1). */
static int pf_read(hc_service *s, struct job *j, uint32_t len, hc_page_t *pages, const uint8_t *skip)
{
	struct pf_help h = { .j = j, .pages = pages };
	uint32_t *at = malloc((size_t)len * sizeof(*at));
	int *status = malloc((size_t)len * sizeof(*status));
	uint8_t *done = NULL;

	for (uint32_t i = 0; at && i < len; i++)
		if (!skip[i])
			at[h.nread++] = i;
	/* A part per worker, at least 16 pages (below that, handing a part
	 * over costs more than reading it), at most a backend call's batch. */
	h.part = (h.nread + s->nworkers - 1) / s->nworkers;
	h.part = h.part < 16 ? 16 : h.part;
	h.part = h.part > s->o.batch_pages ? s->o.batch_pages : h.part;
	if (at && status)
		done = calloc(h.nread / h.part + 1, 1);
	if (!done) {
		for (uint32_t i = 0; i < len; i++)
			if (!skip[i])
				hc_page_abort(s->p, &pages[i], 1);
		free(at);
		free(status);
		return hc__err(ENOMEM, "prefetch: no memory");
	}
	h.at = at;
	h.status = status;
	h.done = done;
	h.fail = h.nread;
	pthread_mutex_lock(&s->mu);
	if (h.nread > h.part) {
		struct pf_help **pp = &s->helps;
		while (*pp)
			pp = &(*pp)->next;
		*pp = &h; /* last: the oldest read is helped first */
		pthread_cond_broadcast(&s->work);
	}
	pf_read_parts(s, &h, 0);
	while (h.inflight)
		pthread_cond_wait(&s->helped, &s->mu);
	pthread_mutex_unlock(&s->mu);
	/* Every part claimed is settled; the rest was never read. */
	for (uint32_t x = h.settled; x < h.nread; x++)
		pf_settle(s, &h, x, 0);
	free(at);
	free(status);
	free(done);
	return h.failed;
}

/* A worker with no job to start: help the oldest long read (under mu). */
void hc__xfer_help(hc_service *s)
{
	pf_read_parts(s, s->helps, 1);
}

int hc__xfer_prefetch(hc_service *s, struct job *j)
{
	int *status = calloc(s->o.batch_pages, sizeof(*status));
	hc_page_t *pages = calloc(j->n, sizeof(*pages));
	uint8_t *skip = calloc(j->n, 1);
	int r, len;

	hc__svc_count(s, HC_CTR_l3_prefetch_keys, j->n);
	if (!status || !pages || !skip) {
		r = -ENOMEM;
		goto out;
	}
	if (j->n < s->o.prefetch_threshold) {
		r = 0; /* too short to be worth asking L3 */
		goto out;
	}
	if ((r = len = pf_prefix(s, j, status)) <= 0)
		goto out;
	pthread_mutex_lock(&s->mu);
	r = pf_reserve(s, j, (uint32_t)len, pages, skip);
	if (s->stage) {
		hc__stage_reserved(s, j, r); /* what it does not use goes back */
		j->repark = r == -ENOSPC;    /* buffer_only parks rather than fails */
	}
	pthread_mutex_unlock(&s->mu);
	if (r < 0) {
		if (r == -ENOSPC && !j->repark)
			hc__svc_count(s, HC_CTR_l3_prefetch_nospace, 1);
		goto out;
	}
	r = pf_read(s, j, (uint32_t)len, pages, skip);
	for (int i = 0; s->stage && i < len; i++)
		if (!skip[i]) /* read or not, its staging ends once its ranks are done */
			hc__stage_release(s, pages[i], 1);
out:
	free(status);
	free(pages);
	free(skip);
	return r < 0 ? r : 0;
}