/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stage.c - the arbiter of a buffer_only pool (doc/design.md, "buffer_only").  Its
 * pages only stage transfers between GPUs and L3, and the service alone
 * decides who may use them:
 *
 * - Reads (prefetches) park until the read staging R has room for every
 *   key they name: R + n <= 0.9 of the pool.
 * - Writes ask for a grant of n pages (hc_req_stage), given when the write
 *   staging W has room in its window, max(0.2 pool, pool - R - pool/10).
 *   A grant parked past write_park_ms is dropped: the rank holds GPU pages
 *   for it.
 * - Nothing is admitted past the pool itself (R + W + n <= pool), and each
 *   direction admits in FIFO order, class 0 first: a request that does not
 *   fit parks everything of its direction behind it, never shortened and
 *   never overtaken.
 * - A page is freed when its transfer has ended: written to L3 (or failed
 *   to be), or read and taken by every rank that asked.  "Asked" is kept as
 *   a count per key of prefetch requests not yet acknowledged (HC__OP_ACK,
 *   sent by the take or the free of each); a page stays while a backup
 *   names it (pending), a rank holds it, or an admitted prefetch names its
 *   key (held).  A parked prefetch holds nothing: were it to keep pages, a
 *   rank's next round (a superset of its last) parked behind another
 *   rank's read would keep the very pages that read waits for.
 * - What a rank holds goes when it dies or sits on it past stage_hold_ms.
 *
 * Accounting: R counts the pages admitted to prefetch jobs (the keys no
 * page holds yet), then exactly what each reserved, until each page is
 * freed (or found gone); W counts grants until their rank gives them back;
 * done_w counts pages written and not freed yet (a prefetch names them, or
 * a rank holds them).  Everything here is process-private
 * and under s->mu; the page table stays the truth (a restarted service
 * finds READY pages in L3 and frees them, the writer catches up on the
 * rest, and recovery undoes the old service's reservations).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define NEED_BUCKETS    4096 /* keys of prefetches in flight: thousands */
#define REPARK_RETRY_MS 100  /* a job that found no room tries again after a release, or this */
#define PUMP_MS         1    /* while a request waits for room: look again this often */
#define SWEEP_IDLE_MS   10   /* else free what has ended at least this often */
#define EXPIRE_EVERY_MS 100  /* dead ranks and overdue holds, looked for this often */

/* A key named by prefetches a rank may still take: how many asked (the
 * entry lives while any does: it is allocated when a request arrives, so
 * admission never fails for memory), and how many of those are admitted
 * (held: the sweep keeps its page). */
struct need {
	struct need *next;
	hc_key_t key;
	uint32_t count, held;
};

/* A prefetch request whose rank has not said it is done with it. */
struct asked {
	struct asked *next;
	struct waiter w;
	uint64_t t_ms;
	uint32_t n;
	int held; /* its job was admitted: its keys' pages stay */
	hc_key_t *keys;
};

/* A write grant, parked or given. */
struct grant {
	struct grant *next;
	struct waiter w;
	uint32_t n;
	uint64_t t_ms; /* parked since; given at */
};

struct rel {
	hc_page_t h;
	int read; /* counted in R until it goes */
};

struct stage {
	uint32_t pool, read_cap, write_max;
	uint32_t R, W;
	uint32_t done_w; /* pages written (or not) and not freed yet: kept while a
			  * prefetch names them or a rank holds them */
	struct job *rh[HC_PRIO_CLASSES], *rt[HC_PRIO_CLASSES];
	struct grant *wh[HC_PRIO_CLASSES], *wt[HC_PRIO_CLASSES];
	unsigned parked_r, parked_w;
	struct grant *given;
	struct asked *asked;
	struct need *need[NEED_BUCKETS];
	struct rel *rel;
	unsigned nrel, caprel;
	uint32_t *at;      /* per page: its index in rel, + 1; 0: not there */
	uint16_t *pending; /* per page: backups naming it, not done with it */
	uint64_t seq;      /* pages freed so far */
	uint64_t last_expire_ms, last_sweep_ms;
};

/* ---- keys still wanted by a rank */

static struct need **need_bucket(struct stage *st, const uint8_t *key)
{
	uint64_t x;

	memcpy(&x, key + 8, sizeof(x)); /* keys are hashes */
	return &st->need[hc__mix64(x) % NEED_BUCKETS];
}

static struct need *need_find(struct stage *st, const uint8_t *key)
{
	for (struct need *e = *need_bucket(st, key); e; e = e->next)
		if (!memcmp(e->key, key, sizeof(hc_key_t)))
			return e;
	return NULL;
}

static uint32_t need_held(struct stage *st, const uint8_t *key)
{
	struct need *e = need_find(st, key);

	return e ? e->held : 0;
}

/* Add d (+1 or -1) to key's count; an entry at 0 goes. */
static int need_add(struct stage *st, const uint8_t *key, int d)
{
	struct need **pe = need_bucket(st, key), *e;

	for (; (e = *pe); pe = &e->next)
		if (!memcmp(e->key, key, sizeof(hc_key_t)))
			break;
	if (!e) {
		if (d < 0)
			return 0;
		if (!(e = calloc(1, sizeof(*e))))
			return -ENOMEM;
		memcpy(e->key, key, sizeof(hc_key_t));
		e->next = *pe;
		*pe = e;
	}
	e->count += (uint32_t)d;
	if (e->count == 0) {
		*pe = e->next;
		free(e);
	}
	return 0;
}

/* An asked request's keys start or stop holding their pages (d: +1, -1).
 * Their entries exist: the request counts in each. */
static void asked_hold(struct stage *st, struct asked *a, int d)
{
	if (a->held == (d > 0))
		return;
	a->held = d > 0;
	for (uint32_t i = 0; i < a->n; i++) {
		struct need *e = need_find(st, a->keys[i]);
		if (e)
			e->held += (uint32_t)d;
	}
}

static void asked_free(struct stage *st, struct asked *a)
{
	asked_hold(st, a, -1);
	for (uint32_t i = 0; i < a->n; i++)
		need_add(st, a->keys[i], -1);
	free(a->keys);
	free(a);
}

static int same_waiter(const struct waiter *a, const struct waiter *b)
{
	return a->slot == b->slot && a->epoch == b->epoch && a->user_data == b->user_data;
}

/* The prefetch request of waiter w, if its rank has not acknowledged it. */
static struct asked *asked_of(struct stage *st, const struct waiter *w)
{
	for (struct asked *a = st->asked; a; a = a->next)
		if (same_waiter(&a->w, w))
			return a;
	return NULL;
}

/* The prefetches of job j's waiters start (+1) or stop (-1) holding their
 * keys' pages: when it is admitted, and when it parks again. */
static void job_hold(struct stage *st, const struct job *j, int d)
{
	for (const struct waiter *w = j->waiters; w; w = w->next) {
		struct asked *a = asked_of(st, w);
		if (a)
			asked_hold(st, a, d);
	}
}

/* ---- gauges */

static void gauges(hc_service *s)
{
	struct stage *st = s->stage;
	struct hc_seg_service *sv = &s->p->ctl->service;

	atomic_store_explicit(&sv->stage_read, st->R, memory_order_relaxed);
	atomic_store_explicit(&sv->stage_write, st->W, memory_order_relaxed);
	atomic_store_explicit(&sv->parked_reads, st->parked_r, memory_order_relaxed);
	atomic_store_explicit(&sv->parked_writes, st->parked_w, memory_order_relaxed);
}

/* ---- admission */

/* The pool itself: a grant must find its pages free when the rank reserves. */
static int fits(const struct stage *st, uint32_t n)
{
	return (uint64_t)st->R + st->W + st->done_w + n <= st->pool;
}

static int read_fits(const struct stage *st, uint32_t n)
{
	return fits(st, n) && st->R + n <= st->read_cap;
}

static int write_fits(const struct stage *st, uint32_t n)
{
	uint32_t floor = st->pool / 5, rest = st->pool - st->pool / 10;
	uint32_t window = st->R < rest && rest - st->R > floor ? rest - st->R : floor;

	return fits(st, n) && st->W + n <= window;
}

/* The pages a prefetch would reserve: its keys that no page holds yet.  A
 * key READY or reserved already costs nothing, and stays: nothing evicts
 * in buffer_only, and the sweep keeps what a prefetch names. */
static uint32_t read_need(const hc_service *s, const struct job *j)
{
	const hc_key_t *keys = j->items;
	uint32_t need = 0;

	for (uint32_t i = 0; i < j->n; i++) {
		struct hc__khash kh;
		hc__key_hash(s->p, keys[i], &kh);
		need += hc__index_find(s->p, &kh) < 0;
	}
	return need;
}

/* Take the head grant of class c off its queue. */
static struct grant *grant_pop(struct stage *st, unsigned c)
{
	struct grant *g = st->wh[c];

	st->wh[c] = g->next;
	if (!st->wh[c])
		st->wt[c] = NULL;
	st->parked_w--;
	return g;
}

/* Admit what fits, in order: reads first (they are what a GPU waits on),
 * then writes; in each, class 0 first, FIFO, no overtaking. */
static void admit(hc_service *s)
{
	struct stage *st = s->stage;
	uint64_t now = 0;
	int blocked = 0;

	for (unsigned c = 0; c < HC_PRIO_CLASSES && !blocked; c++)
		while (st->rh[c]) {
			struct job *j = st->rh[c];
			if (j->park_seq == st->seq + 1) { /* it found no room: wait for a release */
				if (!now)
					now = hc__mono_ms();
				if (now - j->parked_ms < REPARK_RETRY_MS) {
					blocked = 1;
					break;
				}
			}
			uint32_t need = read_need(s, j);
			if (!read_fits(st, need)) {
				blocked = 1;
				break;
			}
			st->rh[c] = j->next;
			if (!st->rh[c])
				st->rt[c] = NULL;
			st->parked_r--;
			st->R += need;
			j->staged = need;
			j->trimmed = 0;
			j->parked = 0;
			job_hold(st, j, +1); /* with need: what it counted on stays */
			hc__xfer_enqueue(s, j);
		}
	blocked = 0;
	for (unsigned c = 0; c < HC_PRIO_CLASSES && !blocked; c++)
		while (st->wh[c]) {
			struct grant *g = st->wh[c];
			if (!write_fits(st, g->n)) {
				blocked = 1;
				break;
			}
			grant_pop(st, c);
			st->W += g->n;
			g->t_ms = now ? now : (now = hc__mono_ms());
			g->next = st->given;
			st->given = g;
			hc__svc_count(s, HC_CTR_stage_grants, 1);
			hc__svc_count(s, HC_CTR_stage_grant_pages, g->n);
			hc__svc_count(s, HC_CTR_req_done, 1);
			gauges(s); /* first: whoever sees the grant sees it counted */
			HC_POINT(stage_granted);
			hc__svc_post(s, &g->w, (int)g->n, 0);
		}
	gauges(s);
}

/* ---- the transfer engine's side (under mu) */

void hc__stage_park(hc_service *s, struct job *j)
{
	struct stage *st = s->stage;
	unsigned c = j->prio;

	j->next = NULL;
	if (st->rt[c])
		st->rt[c]->next = j;
	else
		st->rh[c] = j;
	st->rt[c] = j;
	st->parked_r++;
	j->parked = 1;
	if (!j->parked_ms)
		j->parked_ms = hc__mono_ms();
	admit(s);
	if (st->rt[c] == j) /* still the last of its class, so not admitted: it waits */
		hc__svc_count(s, HC_CTR_stage_parked_reads, 1);
}

void hc__stage_repark(hc_service *s, struct job *j)
{
	struct stage *st = s->stage;
	unsigned c = j->prio;

	/* At the head of its class: it was first, and stays first.  Its keys
	 * hold nothing while it waits (or two reads could each wait on what
	 * the other keeps); admission counts again what is there then. */
	job_hold(st, j, -1);
	j->parked = 1;
	j->repark = 0;
	j->parked_ms = hc__mono_ms();
	j->park_seq = st->seq + 1;
	j->next = st->rh[c];
	st->rh[c] = j;
	if (!st->rt[c])
		st->rt[c] = j;
	st->parked_r++;
	gauges(s);
}

void hc__stage_reserved(hc_service *s, struct job *j, int r)
{
	struct stage *st = s->stage;
	uint32_t keep = r > 0 ? (uint32_t)r : 0;

	/* Exact from here: one a page, until the page goes (sweep).  More
	 * than admitted, if a page it counted on went meanwhile. */
	st->R = st->R - j->staged + keep;
	j->staged = keep;
	j->trimmed = 1;
	gauges(s);
}

void hc__stage_merged(hc_service *s, const struct job *j, const struct waiter *w)
{
	struct asked *a;

	if (j->parked)
		return; /* its admission holds for every waiter */
	if ((a = asked_of(s->stage, w)))
		asked_hold(s->stage, a, +1);
}

struct job *hc__stage_find(hc_service *s, int (*same)(const struct job *, const void *), const void *arg)
{
	for (unsigned c = 0; c < HC_PRIO_CLASSES; c++)
		for (struct job *j = s->stage->rh[c]; j; j = j->next)
			if (same(j, arg))
				return j;
	return NULL;
}

/* Take parked job j out of its class's queue. */
static void unpark(struct stage *st, struct job *j)
{
	unsigned c = j->prio;
	struct job *prev = NULL;

	for (struct job *x = st->rh[c]; x; prev = x, x = x->next)
		if (x == j) {
			if (prev)
				prev->next = j->next;
			else
				st->rh[c] = j->next;
			if (st->rt[c] == j)
				st->rt[c] = prev;
			st->parked_r--;
			j->parked = 0;
			return;
		}
}

static struct grant *unpark_grant(struct stage *st, const struct waiter *w)
{
	for (unsigned c = 0; c < HC_PRIO_CLASSES; c++) {
		struct grant *prev = NULL;
		for (struct grant *g = st->wh[c]; g; prev = g, g = g->next)
			if (same_waiter(&g->w, w)) {
				if (prev)
					prev->next = g->next;
				else
					st->wh[c] = g->next;
				if (st->wt[c] == g)
					st->wt[c] = prev;
				st->parked_w--;
				return g;
			}
	}
	return NULL;
}

int hc__stage_cancel(hc_service *s, const struct waiter *w)
{
	struct stage *st = s->stage;
	struct grant *g;

	if ((g = unpark_grant(st, w))) {
		hc__svc_post(s, &g->w, -ECANCELED, 0);
		free(g);
		hc__svc_count(s, HC_CTR_service_cancelled, 1);
		gauges(s);
		return 1;
	}
	for (unsigned c = 0; c < HC_PRIO_CLASSES; c++)
		for (struct job *j = st->rh[c]; j; j = j->next)
			for (struct waiter **x = &j->waiters; *x; x = &(*x)->next) {
				struct waiter *gone = *x;
				if (!same_waiter(gone, w))
					continue;
				*x = gone->next;
				hc__svc_post(s, gone, -ECANCELED, 0);
				hc__svc_count(s, HC_CTR_service_cancelled, 1);
				free(gone);
				if (!j->waiters) { /* nobody waits for it any more: it never runs */
					unpark(st, j);
					hc__xfer_drop(s, j);
				}
				gauges(s);
				return 1;
			}
	return 0;
}

/* Is a's generation before b's (of the same page)?  Generations wrap at
 * 22 bits: half the circle is behind. */
static int gen_older(hc_page_t a, hc_page_t b)
{
	uint32_t d = (HC_PAGE_GEN(b) - HC_PAGE_GEN(a)) & 0x3fffffu;

	return d != 0 && d < 0x200000u;
}

void hc__stage_release(hc_service *s, hc_page_t page, int read)
{
	struct stage *st = s->stage;
	uint32_t id = HC_PAGE_ID(page);

	if (id >= s->p->g.npages)
		return; /* a rank's bad handle: nothing of ours */
	pthread_mutex_lock(&s->mu);
	if (st->at[id]) {
		/* Listed already (the writer and a rank's backup both wrote it,
		 * or a rank backed up what it prefetched): one entry a page, or
		 * it would be counted twice and the pool look fuller than it is. */
		struct rel *e = &st->rel[st->at[id] - 1];
		if (e->h != page && gen_older(page, e->h)) {
			/* A late release of a life that is gone (releases race
			 * between workers): the newer one listed stays.  Its
			 * read staging ends with it. */
			if (read)
				st->R--;
			pthread_mutex_unlock(&s->mu);
			return;
		}
		if (e->h != page) { /* an older life of the page: that one is gone */
			if (e->read)
				st->R--;
			else
				st->done_w--;
			e->h = page;
			e->read = 0;
			st->done_w++;
		}
		if (read && !e->read) { /* R counts it already */
			e->read = 1;
			st->done_w--;
		}
		pthread_mutex_unlock(&s->mu);
		return;
	}
	if (st->nrel == st->caprel) {
		unsigned cap = st->caprel ? 2 * st->caprel : 256;
		struct rel *r = realloc(st->rel, cap * sizeof(*r));
		if (!r) {
			/* Not kept: a read page stays counted; the restart scan
			 * of the next service frees what is left. */
			pthread_mutex_unlock(&s->mu);
			hc__log(HC_LOG_ERR, "service: no memory to release staging page %u", HC_PAGE_ID(page));
			return;
		}
		st->rel = r;
		st->caprel = cap;
	}
	st->rel[st->nrel++] = (struct rel){ .h = page, .read = read };
	st->at[id] = st->nrel;
	if (!read)
		st->done_w++;
	pthread_mutex_unlock(&s->mu);
}

void hc__stage_busy(hc_service *s, uint8_t busy[HC_MAX_RANKS])
{
	memset(busy, 0, HC_MAX_RANKS);
	pthread_mutex_lock(&s->mu);
	for (struct grant *g = s->stage->given; g; g = g->next)
		busy[g->w.slot] = 1;
	pthread_mutex_unlock(&s->mu);
}

int hc__stage_listed(hc_service *s, uint32_t id)
{
	return id < s->p->g.npages && s->stage->at[id] != 0;
}

void hc__stage_backup(hc_service *s, const hc_page_t *pages, uint32_t n, int done)
{
	struct stage *st = s->stage;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = HC_PAGE_ID(pages[i]);
		if (id >= s->p->g.npages)
			continue;
		if (!done && st->pending[id] < UINT16_MAX)
			st->pending[id]++;
		else if (done && st->pending[id])
			st->pending[id]--;
	}
}

/* ---- the dispatcher's side */

int hc__stage_prefetch(hc_service *s, const struct waiter *w, const hc_key_t *keys, uint32_t n)
{
	struct stage *st = s->stage;
	struct asked *a = calloc(1, sizeof(*a));
	int r = 0;

	if (n > st->read_cap) {
		free(a);
		hc__log(HC_LOG_WARN,
			"service: rank slot %u: a prefetch of %u keys: buffer_only pool '%s' stages reads on at most %u of its %u pages; refused (E2BIG)",
			w->slot, n, s->name, st->read_cap, st->pool);
		return -E2BIG;
	}
	if (!a || !(a->keys = malloc((size_t)n * sizeof(hc_key_t)))) {
		free(a);
		return -ENOMEM;
	}
	memcpy(a->keys, keys, (size_t)n * sizeof(hc_key_t));
	a->w = *w;
	a->t_ms = hc__mono_ms();
	pthread_mutex_lock(&s->mu);
	for (uint32_t i = 0; i < n && r == 0; i++)
		if ((r = need_add(st, keys[i], +1)) < 0)
			a->n = i; /* what was counted is uncounted below */
	if (r == 0) {
		a->n = n;
		a->next = st->asked;
		st->asked = a;
	} else {
		asked_free(st, a);
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* The rank is done with a request (it took it, or freed it): 1 if it was
 * a prefetch, which is then also cancelled where it still waits or runs. */
static int ack(hc_service *s, const struct waiter *w)
{
	struct stage *st = s->stage;
	struct grant *g;

	for (struct grant **pg = &st->given; (g = *pg); pg = &g->next)
		if (same_waiter(&g->w, w)) {
			*pg = g->next;
			st->W -= g->n;
			free(g);
			hc__writer_kick(s); /* what it did not back up, the writer does */
			return 0;
		}
	if ((g = unpark_grant(st, w))) {
		free(g); /* freed before it was given: nobody waits for it */
		return 0;
	}
	for (struct asked **pa = &st->asked, *a; (a = *pa); pa = &a->next)
		if (same_waiter(&a->w, w)) {
			*pa = a->next;
			asked_free(st, a);
			return 1;
		}
	return 0;
}

int hc__stage_request(hc_service *s, const struct hc__sqe *e, const struct waiter *w)
{
	struct stage *st = s->stage;
	struct grant *g;
	int was_prefetch;

	if (!st)
		return -EOPNOTSUPP;
	if (e->op == HC__OP_ACK) {
		pthread_mutex_lock(&s->mu);
		was_prefetch = ack(s, w);
		admit(s); /* room may have come back */
		pthread_mutex_unlock(&s->mu);
		if (was_prefetch)
			hc__xfer_cancel(s, w); /* a read nobody will take is waste */
		return 0;
	}
	if (e->n == 0 || e->prio >= HC_PRIO_CLASSES || e->arg_len)
		return -EINVAL;
	if (e->n > st->write_max) {
		hc__log(HC_LOG_WARN,
			"service: rank slot %u: a write grant of %u pages: buffer_only pool '%s' grants at most %u of its %u pages at once; refused (E2BIG)",
			w->slot, e->n, s->name, st->write_max, st->pool);
		return -E2BIG;
	}
	if (!(g = calloc(1, sizeof(*g))))
		return -ENOMEM;
	g->w = *w;
	g->n = e->n;
	g->t_ms = hc__mono_ms();
	pthread_mutex_lock(&s->mu);
	if (st->wt[e->prio])
		st->wt[e->prio]->next = g;
	else
		st->wh[e->prio] = g;
	st->wt[e->prio] = g;
	st->parked_w++;
	admit(s);
	if (st->wt[e->prio] == g) /* still the last of its class, so not given: it waits */
		hc__svc_count(s, HC_CTR_stage_parked_writes, 1);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

/* Is the rank that asked w gone (dead, or its slot has another owner)? */
static int gone(hc_service *s, const struct waiter *w)
{
	const struct hc_seg_rank *r = &s->p->ranks[w->slot];

	return atomic_load_explicit(&r->state, memory_order_acquire) != HC_RANK_LIVE ||
	       atomic_load_explicit(&r->epoch, memory_order_acquire) != w->epoch;
}

/* Writes parked past the bound are dropped; grants and prefetches of dead
 * ranks, or held past stage_hold_ms, are given back. */
static void expire(hc_service *s, uint64_t now)
{
	struct stage *st = s->stage;
	uint64_t hold = s->o.stage_hold_ms;

	for (unsigned c = 0; c < HC_PRIO_CLASSES; c++) {
		struct grant *g;
		while ((g = st->wh[c]) && (now - g->t_ms >= s->o.write_park_ms || gone(s, &g->w))) {
			/* FIFO: the head is the oldest of its class */
			grant_pop(st, c);
			if (!gone(s, &g->w)) {
				hc__svc_count(s, HC_CTR_stage_dropped, 1);
				hc__svc_count(s, HC_CTR_req_timedout, 1);
				hc__svc_post(s, &g->w, -ETIMEDOUT, 0);
			}
			free(g);
		}
	}
	if (now - st->last_expire_ms < EXPIRE_EVERY_MS)
		return;
	st->last_expire_ms = now;
	for (struct grant **pg = &st->given, *g; (g = *pg);) {
		int dead = gone(s, &g->w);
		if (dead || now - g->t_ms >= hold) {
			hc__log(HC_LOG_WARN, "service: pool '%s': rank slot %u %s a write grant of %u pages: released",
				s->name, g->w.slot, dead ? "died holding" : "held past stage_hold_ms", g->n);
			*pg = g->next;
			st->W -= g->n;
			hc__svc_count(s, HC_CTR_stage_expired, 1);
			free(g);
			hc__writer_kick(s);
			continue;
		}
		pg = &g->next;
	}
	for (struct asked **pa = &st->asked, *a; (a = *pa);) {
		int dead = gone(s, &a->w);
		if (dead || now - a->t_ms >= hold) {
			*pa = a->next;
			if (!dead)
				hc__log(HC_LOG_WARN,
					"service: pool '%s': rank slot %u did not take a prefetch of %u keys within stage_hold_ms: its pages go",
					s->name, a->w.slot, a->n);
			hc__svc_count(s, HC_CTR_stage_expired, 1);
			asked_free(st, a);
			continue;
		}
		pa = &a->next;
	}
}

/* Free what has ended: no backup names it, no rank holds it, no prefetch
 * asks for its key.  A page already gone (aborted, evicted by an admin)
 * just leaves the list. */
static void sweep(hc_service *s)
{
	struct stage *st = s->stage;
	hc_pool *p = s->p;
	unsigned k = 0;

	for (unsigned i = 0; i < st->nrel; i++) {
		struct rel r = st->rel[i];
		uint32_t id = HC_PAGE_ID(r.h);
		uint64_t w = atomic_load_explicit(&p->pages[id].word, memory_order_acquire);
		int keep = 0;
		if (hc__w_state(w) == HC_PAGE_READY && hc__w_gen(w) == HC_PAGE_GEN(r.h)) {
			hc_key_t key;
			hc__svc_page_key(p, id, key);
			if (st->pending[id] || need_held(st, key)) {
				keep = 1;
			} else {
				HC_POINT(stage_released);
				if (hc_page_free(p, &r.h, 1) == 1) {
					hc__svc_count(s, HC_CTR_stage_released, 1);
					st->seq++;
				} else {
					keep = 1; /* held: a rank still loads it */
				}
			}
		} else if (hc__w_state(w) == HC_PAGE_RESERVED && hc__w_gen(w) == HC_PAGE_GEN(r.h)) {
			keep = 1; /* a read still in flight (or given up on, until the backend lets go) */
		}
		st->at[id] = keep ? k + 1 : 0;
		if (keep)
			st->rel[k++] = r;
		else if (r.read)
			st->R--;
		else
			st->done_w--;
	}
	st->nrel = k;
}

void hc__stage_pump(hc_service *s, int *wait_ms)
{
	struct stage *st = s->stage;
	uint64_t now = hc__mono_ms();
	int waiting;

	pthread_mutex_lock(&s->mu);
	expire(s, now);
	/* Pages come back when ranks let go of them, which the service is not
	 * told: look often while a request waits for room, seldom otherwise
	 * (a sweep walks every page still to be freed). */
	waiting = st->parked_r || st->parked_w;
	if (st->nrel && (waiting || now - st->last_sweep_ms >= SWEEP_IDLE_MS)) {
		sweep(s);
		st->last_sweep_ms = now;
	}
	admit(s);
	if (wait_ms && (waiting || st->nrel)) {
		int want = waiting ? PUMP_MS : SWEEP_IDLE_MS;
		if (*wait_ms > want)
			*wait_ms = want;
	}
	pthread_mutex_unlock(&s->mu);
}

/* ---- life */

int hc__stage_start(hc_service *s)
{
	hc_pool *p = s->p;
	struct stage *st;

	if (p->g.host_mode != HC_HOST_BUFFER_ONLY)
		return 0;
	if (!(st = calloc(1, sizeof(*st))) || !(st->pending = calloc(p->g.npages, sizeof(*st->pending))) ||
	    !(st->at = calloc(p->g.npages, sizeof(*st->at)))) {
		if (st)
			free(st->pending);
		free(st);
		return hc__err(ENOMEM, "service: no memory for the staging arbiter");
	}
	st->pool = p->g.npages;
	st->read_cap = p->g.npages - p->g.npages / 10;
	st->write_max = st->read_cap; /* the widest the window gets, with no reads */
	s->stage = st;
	/* A service before us may have died between a page's write and its
	 * free: what is READY and in L3 is done.  What is not in L3 yet, the
	 * writer's catch-up writes, and then it goes too. */
	for (uint32_t id = 0; id < p->g.npages; id++) {
		uint64_t w = atomic_load_explicit(&p->pages[id].word, memory_order_acquire);
		if (hc__w_state(w) == HC_PAGE_READY &&
		    (atomic_load_explicit(&p->pages[id].flags, memory_order_relaxed) & HC_PF_IN_L3))
			hc__stage_release(s, HC_PAGE_MAKE(id, hc__w_gen(w)), 0);
	}
	gauges(s);
	return 0;
}

void hc__stage_stop(hc_service *s)
{
	struct stage *st = s->stage;

	if (!st)
		return;
	/* The workers are gone: every job finished, no page is pending. */
	sweep(s);
	for (unsigned c = 0; c < HC_PRIO_CLASSES; c++) {
		while (st->rh[c]) {
			struct job *j = st->rh[c];
			st->rh[c] = j->next;
			for (struct waiter *w = j->waiters; w; w = w->next)
				hc__svc_post(s, w, -ECANCELED, 0); /* the service stops: they would be lost anyway */
			hc__xfer_drop(s, j);
		}
		while (st->wh[c]) {
			struct grant *g = grant_pop(st, c);
			hc__svc_post(s, &g->w, -ECANCELED, 0);
			free(g);
		}
	}
	while (st->given) {
		struct grant *g = st->given;
		st->given = g->next;
		free(g);
	}
	while (st->asked) {
		struct asked *a = st->asked;
		st->asked = a->next;
		asked_free(st, a);
	}
	for (unsigned b = 0; b < NEED_BUCKETS; b++)
		while (st->need[b]) { /* empty by now; for a count gone wrong */
			struct need *e = st->need[b];
			st->need[b] = e->next;
			free(e);
		}
	st->R = st->W = st->done_w = st->parked_r = st->parked_w = 0;
	gauges(s);
	free(st->rel);
	free(st->at);
	free(st->pending);
	free(st);
	s->stage = NULL;
}
