/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transfer.c - the transfer engine of the service (doc/design.md, "The
 * transfer engine"): the jobs made of the ranks' requests, the workers
 * that run them against the backend through the store (backups in
 * backup.c, prefetches in prefetch.c), and the merging that reads each
 * key from L3 once however many ranks or engines ask for it.
 *
 * Merging, two ways:
 * - by ticket: a prefetch naming the same ticket, keys and parameters as
 *   one queued or running joins it (one job, a waiter per request);
 * - by key: a prefetch reserves the pages it reads, and registers their
 *   keys in the key map while it reads them.  Another prefetch that meets
 *   such a key reserved (HC_SKIP_BUSY) waits for that job instead of
 *   reading it again: it completes once its own reads and every job it
 *   waits for are done.
 * A job's completion (hc__svc_complete) is posted when both are done; the
 * keys it registered leave the map then.  See internal.h for what mu guards.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../l3/store.h"
#include "internal.h"

#define KM_BUCKETS 4096 /* in-flight keys are at most a few thousand */

struct kent {
	struct kent *next;
	hc_key_t key;
	struct job *job;
};

struct keymap {
	struct kent *b[KM_BUCKETS];
};

/* One value into a histogram of the service's row: workers race on it. */
static void svc_hist(hc_service *s, unsigned at, uint64_t v)
{
	_Atomic uint64_t *h = &s->p->stats[(size_t)s->p->slot * HC_STATS_ROW_WORDS + at];

	hc__hist_max(h, v);
	atomic_fetch_add_explicit(&h[hc__hist_bucket(v)], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h[HC_HIST_BUCKETS], v, memory_order_relaxed);
}

/* A write-policy backup, from its queueing to its end, into the backup
 * histogram with the ranks' own backups. */
static void internal_latency(hc_service *s, const struct job *j)
{
	if (j->op == HC__OP_BACKUP && j->t0_ns)
		svc_hist(s, HC_STATS_HIST_WORD + HC_HIST_backup * HC_STATS_HIST_WORDS,
			 (hc__mono_ns() - j->t0_ns) / 1000);
}

void hc__svc_latency(hc_service *s, const struct waiter *w)
{
	static const int kind[] = { [HC__OP_EXISTS] = HC_HIST_exists + 1,
				    [HC__OP_BACKUP] = HC_HIST_backup + 1,
				    [HC__OP_PREFETCH] = HC_HIST_prefetch + 1 };
	uint64_t us;

	if (w->op >= sizeof(kind) / sizeof(kind[0]) || !kind[w->op] || !w->t0_ns)
		return;
	us = (hc__mono_ns() - w->t0_ns) / 1000;
	svc_hist(s, HC_STATS_HIST_WORD + (unsigned)(kind[w->op] - 1) * HC_STATS_HIST_WORDS, us);
}

void hc__svc_count(hc_service *s, enum hc_counter c, uint64_t n)
{
	hc_pool *p = s->p;

	/* Not hc__count: several workers add to the service's row at once. */
	atomic_fetch_add_explicit(&p->stats[(size_t)p->slot * HC_STATS_ROW_WORDS + c], n, memory_order_relaxed);
}

/* ---- the key map: keys being read from L3, and by which job (under mu) */

static struct kent **km_bucket(struct keymap *m, const uint8_t *key)
{
	uint64_t x;

	memcpy(&x, key, sizeof(x)); /* keys are hashes: any 8 bytes will do */
	return &m->b[hc__mix64(x) & (KM_BUCKETS - 1)];
}

struct job *hc__km_find(struct keymap *m, const uint8_t *key)
{
	for (struct kent *e = *km_bucket(m, key); e; e = e->next)
		if (!memcmp(e->key, key, sizeof(hc_key_t)))
			return e->job;
	return NULL;
}

int hc__km_add(struct keymap *m, const uint8_t *key, struct job *j)
{
	struct kent **b = km_bucket(m, key), *e = malloc(sizeof(*e));

	if (!e)
		return -ENOMEM;
	memcpy(e->key, key, sizeof(hc_key_t));
	e->job = j;
	e->next = *b;
	*b = e;
	return 0;
}

static void km_del(struct keymap *m, const uint8_t *key, const struct job *j)
{
	for (struct kent **pe = km_bucket(m, key); *pe; pe = &(*pe)->next) {
		struct kent *e = *pe;
		if (e->job == j && !memcmp(e->key, key, sizeof(hc_key_t))) {
			*pe = e->next;
			free(e);
			return;
		}
	}
}

/* The queue depths, in the service record for tools, where they change
 * (under mu). */
static void gauges(hc_service *s)
{
	struct hc_seg_service *sv = &s->p->ctl->service;

	atomic_store_explicit(&sv->jobs_queued, s->queued, memory_order_relaxed);
	atomic_store_explicit(&sv->jobs_running, s->running, memory_order_relaxed);
}

/* ---- jobs */

static void job_free(hc_service *s, struct job *j)
{
	if (j->pending)
		hc__stage_backup(s, j->items, j->n, 1); /* under mu, as every caller is */
	for (struct waiter *w = j->waiters, *nx; w; w = nx) {
		nx = w->next;
		free(w);
	}
	free(j->dependents);
	free(j->mine);
	free(j->items);
	free(j);
}

static int add_waiter(struct job *j, const struct waiter *w)
{
	struct waiter *c = malloc(sizeof(*c));

	if (!c)
		return -ENOMEM;
	*c = *w;
	c->next = j->waiters;
	j->waiters = c;
	return 0;
}

/* j waits for a (under mu). */
int hc__xfer_depend(struct job *j, struct job *a)
{
	for (unsigned i = 0; i < a->ndependents; i++)
		if (a->dependents[i] == j)
			return 0;
	if (a->ndependents == a->cap_dependents) {
		unsigned cap = a->cap_dependents ? 2 * a->cap_dependents : 4;
		struct job **d = realloc(a->dependents, cap * sizeof(*d));
		if (!d)
			return -ENOMEM;
		a->dependents = d;
		a->cap_dependents = cap;
	}
	a->dependents[a->ndependents++] = j;
	j->deps++;
	return 0;
}

/* How many of a prefetch's first keys are READY now. */
static int ready_prefix(hc_service *s, const struct job *j)
{
	hc_page_t *scratch = malloc((size_t)j->n * sizeof(*scratch));
	struct hc_lookup_req lr = { .size = sizeof(struct hc_lookup_req),
				    .keys = j->items,
				    .nkeys = j->n,
				    .flags = HC_LOOKUP_NOTOUCH };
	int h;

	if (!scratch)
		return -ENOMEM;
	h = hc_lookup(s->p, &lr, scratch);
	free(scratch);
	return h;
}

/* A rank's job, by outcome (a cancel is counted where it is decided):
 * every request it answers counts once. */
static void count_outcome(hc_service *s, const struct job *j)
{
	unsigned n = 0;

	for (const struct waiter *w = j->waiters; w; w = w->next)
		n++;
	if (j->result == -ECANCELED)
		return;
	if (j->result < 0)
		hc__svc_count(
			s, j->result == -ETIMEDOUT || j->result == -ETIME ? HC_CTR_req_timedout : HC_CTR_req_failed, n);
	else if (j->op != HC__OP_EXISTS && (uint32_t)j->result < j->n)
		hc__svc_count(s, HC_CTR_req_partial, n);
	else
		hc__svc_count(s, HC_CTR_req_done, n);
}

/* j leaves the active list (under mu). */
static void active_remove(hc_service *s, struct job *j)
{
	for (struct job **pp = &s->active; *pp; pp = &(*pp)->next)
		if (*pp == j) {
			*pp = j->next;
			return;
		}
}

/* Both halves of j are done: let its keys go, finish what waited for it,
 * and answer its requests (under mu). */
static void job_finish(hc_service *s, struct job *j)
{
	for (unsigned i = 0; i < j->nmine; i++)
		km_del(s->keys, j->mine[i], j);
	active_remove(s, j);
	for (unsigned i = 0; i < j->ndependents; i++) {
		struct job *d = j->dependents[i];
		if (--d->deps == 0 && d->worked)
			job_finish(s, d);
	}
	if (j->op == HC__OP_PREFETCH && j->result >= 0)
		j->result = ready_prefix(s, j);
	if (atomic_load_explicit(&j->cancel, memory_order_relaxed)) {
		j->result = -ECANCELED;
		hc__svc_count(s, HC_CTR_service_cancelled, 1);
	}
	if (j->internal) {
		hc__writer_done(s, j);
		internal_latency(s, j);
	} else {
		count_outcome(s, j);
	}
	if (j->op == HC__OP_PREFETCH && j->result >= 0)
		for (const struct waiter *w = j->waiters; w; w = w->next) /* tokens from L3, per request */
			svc_hist(s, HC_STATS_TOKENS_WORD + HC_TIER_l3 * HC_STATS_HIST_WORDS,
				 (uint64_t)(j->l3_pages < (uint32_t)j->result ? j->l3_pages : (uint32_t)j->result) *
					 s->p->g.page_tokens);
	hc__svc_complete(s, j);
	job_free(s, j);
}

/* ---- the work */

/* L3 says it has no object of key.  A READY page of it that is marked in
 * L3 is not in L3 after all (L3 evicted or lost the object): the mark
 * goes, under a pin as it was set, so the write policy writes the page
 * again and write_back stops counting it clean.  (A backup of it ending
 * meanwhile may have its mark cleared: the page is written once more.)
 * Returns whether key is READY in the pool. */
int hc__xfer_l3_absent(hc_service *s, const hc_key_t *key)
{
	struct hc_lookup_req lr = { .size = sizeof(struct hc_lookup_req),
				    .keys = key,
				    .nkeys = 1,
				    .flags = HC_LOOKUP_NOTOUCH | HC_LOOKUP_PIN };
	struct hc_seg_page *pg;
	hc_page_t h;

	if (hc_lookup(s->p, &lr, &h) != 1)
		return 0;
	pg = &s->p->pages[HC_PAGE_ID(h)];
	if (atomic_fetch_and_explicit(&pg->flags, ~HC_PF_IN_L3, memory_order_relaxed) & HC_PF_IN_L3) {
		hc__svc_count(s, HC_CTR_l3_forgotten, 1);
		hc__dirty(s->p, pg);
	}
	hc_page_unpin(s->p, h);
	return 1;
}

/* The longest prefix of keys present in L3. */
static int do_exists(hc_service *s, const hc_key_t *keys, uint32_t n, uint32_t *where)
{
	int *status = calloc(s->o.batch_pages, sizeof(*status));
	uint32_t done = 0;
	int ret = -1;

	if (!status)
		return -ENOMEM;
	while (ret < 0 && done < n) {
		unsigned k = n - done < s->o.batch_pages ? n - done : s->o.batch_pages;
		int r = hc_store_exists(s->st, keys + done, k, status);
		hc__svc_count(s, HC_CTR_l3_exists_keys, k);
		if (r < 0) {
			*where = done;
			ret = r;
			break;
		}
		for (unsigned i = 0; i < k && ret < 0; i++)
			if (status[i] != 1) {
				ret = (int)(done + i); /* absent, or unreadable: the prefix ends */
				if (status[i] == 0)
					hc__xfer_l3_absent(s, &keys[ret]);
			}
		done += k;
	}
	if (ret < 0 && done == n)
		ret = (int)n;
	if (ret >= 0)
		hc__svc_count(s, HC_CTR_l3_exists_hits, (uint64_t)ret);
	free(status);
	return ret;
}

void hc__svc_page_key(const hc_pool *p, uint32_t id, hc_key_t key)
{
	for (int w = 0; w < 4; w++) {
		uint64_t x = atomic_load_explicit(&p->pages[id].key[w], memory_order_relaxed);
		memcpy(key + 8 * w, &x, 8);
	}
}

/* Run m jobs: one, or backups that share puts. */
static void run(hc_service *s, struct job **js, unsigned m)
{
	struct job *j = js[0];

	if (!s->st) { /* detached (hicache-pool backend detach) */
		for (unsigned i = 0; i < m; i++)
			js[i]->result = -ENODEV; /* the rank says so (request.c) */
		return;
	}
	switch (j->op) {
	case HC__OP_EXISTS:
		j->result = do_exists(s, j->items, j->n, &j->where);
		break;
	case HC__OP_BACKUP:
		hc__xfer_backups(s, js, m);
		break;
	case HC__OP_PREFETCH:
		j->result = hc__xfer_prefetch(s, j);
		break;
	default:
		j->result = -EOPNOTSUPP;
	}
}

#define GROUP_MAX 64 /* backups that share puts */

/* Under mu: take the job at the head of the queue, and if it is a backup
 * of less than a batch, the backups right behind it that fit in one batch
 * with it.  They go on the active list while they run: others may merge. */
static unsigned take_jobs(hc_service *s, struct job **js)
{
	/* A share of the queue, so that the other workers get some too. */
	unsigned m = 0, pages = 0, cap = (s->queued + s->nworkers - 1) / s->nworkers;

	do {
		struct job *j = s->qhead;
		s->qhead = j->next;
		if (!s->qhead)
			s->qtail = NULL;
		s->queued--;
		j->next = s->active;
		s->active = j;
		s->running++;
		pages += j->n;
		js[m++] = j;
	} while (js[0]->op == HC__OP_BACKUP && m < cap && m < GROUP_MAX && s->qhead && s->qhead->op == HC__OP_BACKUP &&
		 s->qhead->internal == js[0]->internal &&
		 pages + s->qhead->n <= (js[0]->internal ? s->put_pages : s->o.batch_pages));
	gauges(s);
	return m;
}

static void *worker(void *arg)
{
	hc_service *s = arg;
	struct job *js[GROUP_MAX];

	pthread_mutex_lock(&s->mu);
	for (;;) {
		unsigned m;
		while (!s->qhead && !s->helps && !s->workers_stop)
			pthread_cond_wait(&s->work, &s->mu);
		if (!s->qhead && s->helps) {
			hc__xfer_help(s);
			continue;
		}
		if (!s->qhead)
			break; /* stopping, and nothing is left */
		m = take_jobs(s, js);
		pthread_mutex_unlock(&s->mu);
		run(s, js, m);
		pthread_mutex_lock(&s->mu);
		s->running -= m;
		gauges(s);
		for (unsigned i = 0; i < m; i++) {
			struct job *j = js[i];
			if (s->stage && j->op == HC__OP_PREFETCH && !j->trimmed)
				hc__stage_reserved(s, j, 0); /* it reserved nothing: all its staging goes back */
			if (j->repark && !atomic_load_explicit(&j->cancel, memory_order_relaxed)) {
				/* buffer_only: no room after all; it waits again */
				active_remove(s, j);
				hc__stage_repark(s, j);
				continue;
			}
			j->worked = 1;
			if (j->deps == 0)
				job_finish(s, j);
		}
		pthread_cond_broadcast(&s->idle);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* ---- the dispatcher's side */

void hc__xfer_enqueue(hc_service *s, struct job *j)
{
	j->next = NULL;
	if (s->qtail)
		s->qtail->next = j;
	else
		s->qhead = j;
	s->qtail = j;
	s->queued++;
	gauges(s);
	pthread_cond_signal(&s->work);
}

void hc__xfer_drop(hc_service *s, struct job *j)
{
	job_free(s, j);
}

static void enqueue(hc_service *s, struct job *j)
{
	pthread_mutex_lock(&s->mu);
	hc__xfer_enqueue(s, j);
	pthread_mutex_unlock(&s->mu);
}

static uint64_t name_hash(const struct hc__pf_args *a)
{
	uint64_t h = UINT64_C(1469598103934665603); /* FNV-1a: a merge hint, checked in full */

	for (size_t i = 0; i < sizeof(a->name) && a->name[i]; i++)
		h = (h ^ (uint8_t)a->name[i]) * UINT64_C(1099511628211);
	return hc__mix64(h ^ ((uint64_t)a->step << 32 | a->engine)) | 1;
}

/* A job of the same ticket, keys and parameters, still queued or running. */
/* Is every page of a backup marked in L3 already?  A hint: the backup
 * checks each again under its pin. */
static int all_in_l3(hc_service *s, const void *items, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		hc_page_t h;
		memcpy(&h, (const uint8_t *)items + (size_t)i * sizeof(h), sizeof(h));
		if (HC_PAGE_ID(h) >= s->p->g.npages ||
		    !(atomic_load_explicit(&s->p->pages[HC_PAGE_ID(h)].flags, memory_order_relaxed) & HC_PF_IN_L3))
			return 0;
	}
	return 1;
}

struct ticket_of {
	uint64_t nh;
	const struct hc__pf_args *a;
	const void *keys;
	uint32_t n;
};

static int is_same(const struct job *j, const void *arg)
{
	const struct ticket_of *t = arg;

	return j->name_hash == t->nh && j->n == t->n && !memcmp(&j->pf, t->a, sizeof(*t->a)) &&
	       !memcmp(j->items, t->keys, (size_t)t->n * sizeof(hc_key_t));
}

/* A job of the same ticket, keys and parameters: parked, queued or running. */
static struct job *same_ticket(hc_service *s, const struct ticket_of *t)
{
	for (struct job *j = s->qhead; j; j = j->next)
		if (is_same(j, t))
			return j;
	for (struct job *j = s->active; j; j = j->next)
		if (is_same(j, t))
			return j;
	return s->stage ? hc__stage_find(s, is_same, t) : NULL;
}

int hc__xfer_submit(hc_service *s, const struct hc__sqe *e, const void *args, const struct waiter *w)
{
	size_t size = e->op == HC__OP_BACKUP ? sizeof(hc_page_t) : sizeof(hc_key_t);
	const uint8_t *items = args;
	struct hc__pf_args pf = { 0 };
	uint64_t nh = 0;
	struct job *j;
	int r;

	if (e->op == HC__OP_PREFETCH) {
		memcpy(&pf, args, sizeof(pf));
		items += sizeof(pf);
		if (pf.name[sizeof(pf.name) - 1])
			return -EINVAL; /* not NUL-terminated */
		if (pf.name[0]) {
			/* The engine is the slot's, as the segment says, not as
			 * the request says: another engine's ticket is not ours. */
			pf.engine = atomic_load_explicit(&s->p->ranks[w->slot].engine, memory_order_relaxed);
			nh = name_hash(&pf);
		}
		hc__svc_count(s, HC_CTR_l3_prefetch_reqs, 1);
	}
	if (s->stage && e->op == HC__OP_PREFETCH &&
	    (r = hc__stage_prefetch(s, w, (const hc_key_t *)(const void *)items, e->n)) < 0)
		return r; /* too large for the pool, or no memory */
	if ((e->op == HC__OP_EXISTS || (e->op == HC__OP_BACKUP && all_in_l3(s, items, e->n))) &&
	    e->n <= s->o.batch_pages && s->st) {
		/* One store call of metadata, or a backup with nothing to write,
		 * with the workers idle: do it here.  Handing it over costs a
		 * worker's wake-up, a futex round trip (about 24 us on these VMs)
		 * for microseconds of work. */
		int idle;
		pthread_mutex_lock(&s->mu);
		idle = !s->running && !s->qhead;
		pthread_mutex_unlock(&s->mu);
		if (idle) {
			struct waiter one = *w;
			struct job x = { .op = e->op, .n = e->n, .waiters = &one, .items = (void *)items };
			one.next = NULL;
			if (e->op == HC__OP_EXISTS) {
				x.result = do_exists(s, (const hc_key_t *)(const void *)items, e->n, &x.where);
			} else {
				if (s->stage) {
					pthread_mutex_lock(&s->mu);
					hc__stage_backup(s, (const hc_page_t *)(const void *)items, e->n, 0);
					pthread_mutex_unlock(&s->mu);
				}
				struct job *xp = &x;
				hc__xfer_backups(s, &xp, 1);
				if (s->stage) {
					pthread_mutex_lock(&s->mu);
					hc__stage_backup(s, (const hc_page_t *)(const void *)items, e->n, 1);
					pthread_mutex_unlock(&s->mu);
				}
			}
			count_outcome(s, &x);
			hc__svc_post(s, w, x.result, x.where);
			return 0;
		}
	}
	pthread_mutex_lock(&s->mu);
	if (nh && (j = same_ticket(s, &(struct ticket_of){ nh, &pf, items, e->n }))) {
		r = add_waiter(j, w);
		if (r == 0) {
			hc__svc_count(s, HC_CTR_l3_prefetch_merged, 1);
			if (s->stage)
				hc__stage_merged(s, j, w);
		}
		pthread_mutex_unlock(&s->mu);
		return r;
	}
	pthread_mutex_unlock(&s->mu);
	j = calloc(1, sizeof(*j));
	if (!j || !(j->items = malloc((size_t)e->n * size)) || add_waiter(j, w) < 0) {
		if (j)
			job_free(s, j);
		return -ENOMEM;
	}
	j->op = e->op;
	j->n = e->n;
	j->pf = pf;
	j->name_hash = nh;
	j->prio = e->prio < HC_PRIO_CLASSES ? e->prio : HC_PRIO_CLASSES - 1;
	memcpy(j->items, items, (size_t)e->n * size);
	pthread_mutex_lock(&s->mu);
	if (s->stage && e->op == HC__OP_BACKUP) {
		hc__stage_backup(s, j->items, j->n, 0); /* its pages stay until it is done */
		j->pending = 1;
	}
	if (s->stage && e->op == HC__OP_PREFETCH)
		hc__stage_park(s, j); /* buffer_only: it runs once its staging is granted */
	else
		hc__xfer_enqueue(s, j);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

static int waiter_is(const struct waiter *a, const struct waiter *b)
{
	return a->slot == b->slot && a->epoch == b->epoch && a->user_data == b->user_data;
}

void hc__xfer_cancel(hc_service *s, const struct waiter *w)
{
	struct job **queued = NULL, *j = NULL;
	struct waiter **wp = NULL, *gone;

	pthread_mutex_lock(&s->mu);
	if (s->stage && hc__stage_cancel(s, w)) {
		pthread_mutex_unlock(&s->mu); /* it was parked: answered already */
		return;
	}
	for (struct job **pp = &s->qhead; *pp && !j; pp = &(*pp)->next)
		for (struct waiter **x = &(*pp)->waiters; *x; x = &(*x)->next)
			if (waiter_is(*x, w)) {
				queued = pp;
				j = *pp;
				wp = x;
				break;
			}
	for (struct job *a = s->active; a && !j; a = a->next)
		for (struct waiter **x = &a->waiters; *x; x = &(*x)->next)
			if (waiter_is(*x, w)) {
				j = a;
				wp = x;
				break;
			}
	if (!j) {
		pthread_mutex_unlock(&s->mu);
		return;
	}
	if (j->waiters->next || j->ndependents || j->deps) {
		/* others wait for this job too: it goes on without this request */
		gone = *wp;
		*wp = gone->next;
		pthread_mutex_unlock(&s->mu);
		hc__svc_post(s, gone, -ECANCELED, 0);
		hc__svc_count(s, HC_CTR_service_cancelled, 1);
		free(gone);
		return;
	}
	atomic_store_explicit(&j->cancel, 1, memory_order_relaxed);
	if (queued) {
		/* not started: nothing of it to undo */
		*queued = j->next;
		s->queued--;
		gauges(s);
		if (s->qtail == j) {
			s->qtail = NULL;
			for (struct job *q = s->qhead; q; q = q->next)
				s->qtail = q;
		}
		j->result = -ECANCELED;
		hc__svc_count(s, HC_CTR_service_cancelled, 1);
		hc__svc_complete(s, j);
		if (s->stage && j->op == HC__OP_PREFETCH && !j->trimmed)
			hc__stage_reserved(s, j, 0); /* admitted, never run: its staging goes back */
		job_free(s, j);
	}
	pthread_mutex_unlock(&s->mu);
}

int hc__xfer_internal(hc_service *s, uint8_t op, void *items, uint32_t n)
{
	struct job *j = calloc(1, sizeof(*j));

	if (!j) {
		free(items);
		return -ENOMEM;
	}
	j->op = op;
	j->n = n;
	j->items = items;
	j->internal = 1;
	j->t0_ns = hc__mono_ns();
	enqueue(s, j);
	return 0;
}

int hc__xfer_start(hc_service *s)
{
	int r = 0;

	/* A page is pinned while a put writes it.  In a cache pool the write
	 * policy's puts, which run behind the ranks' backs, pin a quarter of
	 * it at most when they all run at once, so that allocations still
	 * find pages to evict behind a slow backend.  A backup a rank asks
	 * for, and any put in a buffer_only pool, writes a whole batch. */
	s->put_pages = s->o.batch_pages;
	if (s->p->g.host_mode == HC_HOST_CACHE && s->put_pages > s->p->g.npages / (4 * s->o.workers))
		s->put_pages = s->p->g.npages / (4 * s->o.workers) ? s->p->g.npages / (4 * s->o.workers) : 1;

	s->keys = calloc(1, sizeof(*s->keys));
	s->workers = calloc(s->o.workers, sizeof(*s->workers));
	if (!s->keys || !s->workers)
		return hc__err(ENOMEM, "service: no memory");
	pthread_cond_init(&s->work, NULL);
	pthread_cond_init(&s->idle, NULL);
	pthread_cond_init(&s->helped, NULL);
	for (s->nworkers = 0; s->nworkers < s->o.workers; s->nworkers++)
		if ((r = pthread_create(&s->workers[s->nworkers], NULL, worker, s)) != 0)
			break;
	if (r) {
		hc__xfer_stop(s);
		return hc__err(r, "service: cannot start its worker threads");
	}
	return 0;
}

void hc__xfer_stop(hc_service *s)
{
	pthread_mutex_lock(&s->mu);
	s->workers_stop = 1;
	pthread_cond_broadcast(&s->work);
	pthread_mutex_unlock(&s->mu);
	for (unsigned i = 0; i < s->nworkers; i++)
		pthread_join(s->workers[i], NULL);
	s->nworkers = 0;
	free(s->workers);
	s->workers = NULL;
	/* Every job finished: its own work is done, and what it waited for
	 * was another job, done too.  The map is empty. */
	free(s->keys);
	s->keys = NULL;
	pthread_cond_destroy(&s->work);
	pthread_cond_destroy(&s->idle);
	pthread_cond_destroy(&s->helped);
}
