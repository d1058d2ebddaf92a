/* SPDX-License-Identifier: Apache-2.0 */
/*
 * service.c - the service's side of the request path (service.h).  The
 * daemon (hicached) and an embedded engine both run it.  Its dispatcher
 * thread holds the pool's service lock for its whole life.
 *
 * This file is the service's life and its rings: the dispatcher thread
 * takes requests off the ranks' request rings, checks them and hands them
 * to the transfer engine (transfer.c) as jobs; completions come back
 * through hc__svc_complete.  internal.h says who touches what.  In shared
 * memory the service is the consumer of every request ring and the
 * producer of every completion ring, and it writes the service record only
 * while it holds its lock.  A completion ring that is full drops the
 * completion and counts it: a dead or slow rank never stalls the service.
 * The dispatcher also runs recovery of dead ranks, as soon as it sees
 * them (every RECOVER_MS at most).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <hicache/service.h>

#include "../l3/store.h"
#include "internal.h"

#define DEFAULT_BATCH         128
#define DEFAULT_QD            256
#define DEFAULT_SPIN_US       50
#define DEFAULT_WORKERS       4
#define DEFAULT_SELECT_HITS   2
#define DEFAULT_WRITEBACK_PCT 20
#define DEFAULT_WRITE_PARK_MS 2000
#define DEFAULT_STAGE_HOLD_MS 60000
#define IDLE_MS               100 /* look at the ranks' slots at least this often */
#define RECOVER_MS            100 /* and recover the dead ones */
#define LOCK_WAIT_MS          100 /* a prober holds the service lock for microseconds */

/* Check a request's fields and copy its arguments out: the item size, or -errno. */
static int take_args(hc_service *s, struct slot_view *v, const struct hc__sqe *e)
{
	size_t size = e->op == HC__OP_EXISTS || e->op == HC__OP_PREFETCH ? sizeof(hc_key_t)
		      : e->op == HC__OP_BACKUP                           ? sizeof(hc_page_t)
		      : e->op == HC__OP_BACKEND                          ? 1
									 : 0;
	uint64_t head = e->op == HC__OP_PREFETCH ? sizeof(struct hc__pf_args) : 0;

	if (!size)
		return -EOPNOTSUPP;
	if (e->n == 0 || (uint64_t)e->n * size + head != e->arg_len || e->arg_off > s->p->g.arg_bytes ||
	    e->arg_len > s->p->g.arg_bytes - e->arg_off)
		return -EINVAL;
	memcpy(s->args, v->arg + e->arg_off, e->arg_len);
	return (int)size;
}

/* Post one completion, if the slot still has the owner that asked. */
static void post(hc_service *s, unsigned slot, uint32_t epoch, uint64_t user_data, int result, uint32_t where)
{
	struct hc__cqe c = { .user_data = user_data,
			     .result = result,
			     .epoch = epoch,
			     .svc_gen = s->gen,
			     .where = where };
	struct slot_view *v = &s->v[slot];

	pthread_mutex_lock(&s->cq_mu);
	if (!v->ok || v->epoch != epoch) {
		hc__svc_count(s, HC_CTR_service_stale, 1); /* its owner is gone: nobody waits */
	} else if (hc__ring_room(&v->cq, 1) != 1) {
		hc__ring_drop(&v->cq); /* full or damaged: the rank is gone or not reading */
		hc__svc_count(s, HC_CTR_service_cq_dropped, 1);
	} else {
		memcpy(hc__ring_slot(&v->cq, 0), &c, sizeof(c));
		hc__ring_post(&v->cq, 1);
		hc__bell_ring(v->bell);
	}
	pthread_mutex_unlock(&s->cq_mu);
}

void hc__svc_post(hc_service *s, const struct waiter *w, int result, uint32_t where)
{
	hc__svc_latency(s, w); /* first: whoever sees the answer sees it counted */
	post(s, w->slot, w->epoch, w->user_data, result, where);
}

void hc__svc_complete(hc_service *s, struct job *j)
{
	for (struct waiter *w = j->waiters; w; w = w->next) {
		hc__svc_latency(s, w);
		post(s, w->slot, w->epoch, w->user_data, j->result, j->where);
	}
}

/* Views of a live slot's rings for its current epoch; 0 when not live. */
static int slot_ready(hc_service *s, unsigned slot, uint32_t *epoch)
{
	hc_pool *p = s->p;
	struct slot_view *v = &s->v[slot];
	uint8_t *blk = hc__rank_block(p, slot);

	if (atomic_load_explicit(&p->ranks[slot].state, memory_order_acquire) != HC_RANK_LIVE)
		return 0;
	*epoch = atomic_load_explicit(&p->ranks[slot].epoch, memory_order_acquire);
	if (v->ok && v->epoch == *epoch)
		return 1;
	/* A new owner: go on from the rings' indices as they are.  Workers
	 * post on the view: it changes under cq_mu. */
	pthread_mutex_lock(&s->cq_mu);
	memset(v, 0, sizeof(*v));
	if (hc__ring_attach(&v->sq, blk + p->g.rg.sq_off, p->g.rg.cq_off - p->g.rg.sq_off, p->g.sq_entries,
			    HC_SQE_BYTES, HC_RING_CONSUMER) < 0 ||
	    hc__ring_attach(&v->cq, blk + p->g.rg.cq_off, p->g.rg.arg_off - p->g.rg.cq_off, p->g.cq_entries,
			    HC_CQE_BYTES, HC_RING_PRODUCER) < 0) {
		pthread_mutex_unlock(&s->cq_mu);
		hc__log(HC_LOG_ERR, "service: rank slot %u: %s; its requests are ignored", slot, hc_last_error());
		return 0;
	}
	v->arg = blk + p->g.rg.arg_off;
	v->bell = (struct hc_bell *)blk;
	v->epoch = *epoch;
	v->ok = 1;
	pthread_mutex_unlock(&s->cq_mu);
	return 1;
}

/*
 * Attach (spec) or detach ("") the backend, for hicache-pool backend: only
 * while nothing is in flight, so no worker holds the store.  The dispatcher
 * alone submits jobs and runs this, so none starts meanwhile.
 */
static int backend_change(hc_service *s, const char *spec, unsigned slot)
{
	struct hc_store_opts so = { .size = sizeof(struct hc_store_opts),
				    .backend_dir = s->backend_dir,
				    .queue_depth = s->o.queue_depth,
				    .timeout_ms = s->o.timeout_ms,
				    .retries = s->o.retries,
				    .mac_key_file = s->mac_key_file };
	unsigned busy;
	hc_store *st = NULL;
	char *copy = NULL;
	int r;

	pthread_mutex_lock(&s->mu);
	busy = s->running;
	for (struct job *j = s->qhead; j; j = j->next)
		busy++;
	pthread_mutex_unlock(&s->mu);
	if (busy || hc__writer_busy(s)) {
		r = hc__err(
			EBUSY,
			"service: backend %s refused: %u requests and %u write-policy pages in flight; try again when idle",
			*spec ? "attach" : "detach", busy, hc__writer_busy(s));
		goto out;
	}
	if (!*spec) {
		if (!s->st) {
			r = hc__err(EALREADY, "service: no backend is attached");
			goto out;
		}
		pthread_mutex_lock(&s->st_mu);
		if ((r = hc_store_close(s->st)) < 0) {
			pthread_mutex_unlock(&s->st_mu);
			goto out; /* the backend still holds ops given up on: it stays */
		}
		pthread_mutex_lock(&s->mu);
		s->st = NULL;
		pthread_mutex_unlock(&s->mu);
		pthread_mutex_unlock(&s->st_mu);
		hc__log(HC_LOG_INFO, "service: pool '%s': backend %s detached (rank slot %u asked)", s->name,
			s->backend, slot);
		return 0;
	}
	if (s->st) {
		r = hc__err(EALREADY, "service: backend %s is attached: detach it first", s->backend);
		goto out;
	}
	if (!(copy = strdup(spec))) {
		r = hc__err(ENOMEM, "service: no memory");
		goto out;
	}
	if ((r = hc_store_open(s->p, spec, &so, &st)) < 0) {
		free(copy);
		goto out;
	}
	free(s->backend);
	s->backend = copy;
	pthread_mutex_lock(&s->st_mu);
	pthread_mutex_lock(&s->mu);
	s->st = st; /* the workers see it under mu, with their next job */
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_unlock(&s->st_mu);
	hc__log(HC_LOG_INFO, "service: pool '%s': backend %s attached (rank slot %u asked)", s->name, spec, slot);
	return 0;
out:
	hc__log(HC_LOG_WARN, "%s", hc_last_error());
	return r;
}

/* Take and do the requests waiting on one slot's ring; how many. */
static int serve_slot(hc_service *s, unsigned slot)
{
	struct slot_view *v = &s->v[slot];
	uint32_t epoch;
	int k, done = 0;

	if (!slot_ready(s, slot, &epoch))
		return 0;
	while ((k = hc__ring_avail(&v->sq, 1)) == 1) {
		struct hc__sqe e;
		struct waiter w = { .slot = slot, .epoch = epoch };
		int size, r;
		memcpy(&e, hc__ring_peek(&v->sq, 0), sizeof(e));
		if ((e.op == HC__OP_CANCEL || e.op == HC__OP_STAGE || e.op == HC__OP_ACK) && e.epoch == epoch) {
			/* No arguments to copy.  A cancel or an ack comes after the
			 * request it names, on the same ring: that one is ours
			 * already.  A grant goes to buffer_only's arbiter (stage.c). */
			hc__ring_release(&v->sq, 1);
			done++;
			w.user_data = e.user_data;
			w.op = e.op;
			w.t0_ns = hc__mono_ns();
			if (e.op == HC__OP_CANCEL) {
				hc__xfer_cancel(s, &w);
				continue;
			}
			if (e.op == HC__OP_STAGE)
				hc__svc_count(s, HC_CTR_service_requests, 1);
			if ((r = hc__stage_request(s, &e, &w)) < 0 && e.op == HC__OP_STAGE) {
				hc__svc_count(s, r == -EINVAL ? HC_CTR_service_bad : HC_CTR_req_failed, 1);
				post(s, slot, epoch, e.user_data, r, 0);
			}
			continue;
		}
		size = e.epoch == epoch ? take_args(s, v, &e) : -ESTALE;
		/* Seqlock reader: the arguments are ours only if the slot did
		 * not change owner while we copied them (wire.h). */
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&s->p->ranks[slot].epoch, memory_order_relaxed) != epoch)
			size = -ESTALE;
		hc__ring_release(&v->sq, 1);
		done++;
		hc__svc_count(s, HC_CTR_service_requests, 1);
		if (size == -ESTALE) {
			hc__svc_count(s, HC_CTR_service_stale, 1);
			continue; /* a dead owner's: nobody waits for it */
		}
		w.user_data = e.user_data;
		w.op = e.op;
		w.t0_ns = hc__mono_ns();
		if (e.op == HC__OP_BACKEND && size > 0) {
			r = s->args[e.arg_len - 1] ? -EINVAL : backend_change(s, (const char *)s->args, slot);
			post(s, slot, epoch, e.user_data, r, 0);
			continue;
		}
		r = size < 0 ? size : hc__xfer_submit(s, &e, s->args, &w);
		if (r < 0) {
			hc__svc_count(s, HC_CTR_service_bad, 1);
			post(s, slot, epoch, e.user_data, r, 0);
		}
	}
	if (k < 0)
		hc__log(HC_LOG_ERR, "service: rank slot %u: %s", slot, hc_last_error());
	return done;
}

static int any_request(void *arg)
{
	hc_service *s = arg;
	uint32_t hwm = atomic_load_explicit(&s->p->hdr->slots_hwm, memory_order_acquire);

	if (atomic_load(&s->stop) || hc__writer_due(s, NULL))
		return 1;
	for (unsigned i = 0; i < hwm && i < s->p->g.max_ranks; i++) {
		const struct slot_view *v = &s->v[i];
		const struct hc_ring *r = (const struct hc_ring *)(hc__rank_block(s->p, i) + s->p->g.rg.sq_off);
		if (atomic_load_explicit(&s->p->ranks[i].state, memory_order_relaxed) != HC_RANK_LIVE)
			continue; /* a dead owner's leftovers wait for the next owner */
		if (atomic_load_explicit(&r->tail, memory_order_acquire) !=
		    (v->ok ? v->sq.mine : atomic_load(&r->head)))
			return 1;
	}
	return 0;
}

/* ---- life */

/* Take the service lock for this thread's life, and say who we are.  Not
 * a trylock: while no service serves, each rank's hc_service_probe holds
 * the lock for a moment, and a (re)start among probing ranks would be
 * refused as "already served by pid 0".  A live service holds it for good,
 * so a bounded wait tells the two apart. */
static int take_lock(hc_service *s)
{
	struct hc_seg_service *sv = &s->p->ctl->service;
	struct timespec dl;
	int r;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_nsec += LOCK_WAIT_MS * 1000000L;
	dl.tv_sec += dl.tv_nsec / 1000000000L;
	dl.tv_nsec %= 1000000000L;
	r = hc__mutex_kind_ok(&sv->life) ? pthread_mutex_timedlock(&sv->life, &dl) : ENOTRECOVERABLE;
	if (r == ETIMEDOUT)
		r = EBUSY;
	if (r == EOWNERDEAD) {
		hc__log(HC_LOG_WARN, "service: pool '%s': the previous service (pid %u) died; taking over", s->name,
			atomic_load(&sv->pid));
		pthread_mutex_consistent(&sv->life);
		r = 0;
	}
	if (r == EBUSY)
		return hc__err(EBUSY, "pool '%s' is already served by pid %u: one service per pool", s->name,
			       atomic_load(&sv->pid));
	if (r)
		return hc__err(r == ENOTRECOVERABLE ? EIO : r, "pool '%s': the service lock is unusable (%s)", s->name,
			       strerror(r));
	HC_POINT(service_locked);
	atomic_store_explicit(&sv->pid, (uint32_t)getpid(), memory_order_relaxed);
	atomic_store_explicit(&sv->holder_tid, (uint32_t)syscall(SYS_gettid), memory_order_relaxed);
	s->gen = atomic_fetch_add_explicit(&sv->generation, 1, memory_order_acq_rel) + 1;
	atomic_store_explicit(&sv->state, HC_SVC_LIVE, memory_order_release);
	return 0;
}

static void drop_lock(hc_service *s)
{
	struct hc_seg_service *sv = &s->p->ctl->service;

	HC_POINT(service_stopping);
	atomic_store_explicit(&sv->state, HC_SVC_NONE, memory_order_release);
	atomic_store_explicit(&sv->pid, 0, memory_order_relaxed);
	pthread_mutex_unlock(&sv->life);
}

static void started(hc_service *s, int r)
{
	pthread_mutex_lock(&s->mu);
	s->result = r;
	if (r < 0)
		snprintf(s->err, sizeof(s->err), "%s", hc_last_error());
	s->started = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* Undo what dead ranks held (doc/design.md, "Death and recovery"): their lifetime locks
 * say so at once, so the pool does not wait for the next attach. */
static void recover(hc_service *s)
{
	struct hc_recovery_report rep;

	if (hc_pool_recover(s->p, &rep, sizeof(rep)) < 0)
		hc__log(HC_LOG_WARN, "service: pool '%s': recovery: %s", s->name, hc_last_error());
	else if (rep.dead_ranks)
		hc__log(HC_LOG_INFO,
			"service: pool '%s': recovered %u dead rank slots (%u pins dropped, %u reservations quarantined)",
			s->name, rep.dead_ranks, rep.pins_dropped, rep.quarantined);
}

static void *service_main(void *arg)
{
	hc_service *s = arg;
	struct hc_attach_opts ao = { .size = sizeof(struct hc_attach_opts), .dir = s->dir };
	struct hc_store_opts so = { .size = sizeof(struct hc_store_opts),
				    .backend_dir = s->backend_dir,
				    .queue_depth = s->o.queue_depth,
				    .timeout_ms = s->o.timeout_ms,
				    .retries = s->o.retries,
				    .mac_key_file = s->mac_key_file };
	uint64_t last_recover;
	int r;

	if (s->o.flags & HC_SERVICE_FD) {
		ao.flags = HC_ATTACH_FD;
		ao.fd = s->o.pool_fd;
	}
	if ((r = hc_pool_attach(s->name, &ao, &s->p)) < 0) {
		started(s, r);
		return NULL;
	}
	if ((r = take_lock(s)) < 0) {
		hc_pool_detach(s->p);
		s->p = NULL;
		started(s, r);
		return NULL;
	}
	if (s->p->g.host_mode == HC_HOST_BUFFER_ONLY && s->o.write_policy != HC_WRITE_THROUGH) {
		/* Staged pages live until they are in L3: every one goes there. */
		hc__log(HC_LOG_INFO, "service: pool '%s' is buffer_only: the write policy is write_through", s->name);
		s->o.write_policy = HC_WRITE_THROUGH;
	}
	s->args = malloc(s->p->g.arg_bytes);
	if (!s->args)
		r = hc__err(ENOMEM, "service: no memory");
	else if ((r = hc_store_open(s->p, s->backend, &so, &s->st)) == 0 &&
		 ((r = hc__writer_start(s)) < 0 || (r = hc__stage_start(s)) < 0 || (r = hc__xfer_start(s)) < 0)) {
		hc__stage_stop(s);
		hc__writer_stop(s);
		hc_store_close(s->st);
		s->st = NULL;
	}
	if (r < 0) {
		drop_lock(s);
		hc_pool_detach(s->p);
		s->p = NULL;
		started(s, r);
		return NULL;
	}
	started(s, 0);
	recover(s);
	last_recover = hc__mono_ms();
	while (!atomic_load(&s->stop)) {
		uint32_t hwm = atomic_load_explicit(&s->p->hdr->slots_hwm, memory_order_acquire);
		uint64_t now;
		int did = 0, wait_ms = IDLE_MS;
		for (unsigned i = 0; i < hwm && i < s->p->g.max_ranks; i++)
			did += serve_slot(s, i);
		if ((now = hc__mono_ms()) - last_recover >= RECOVER_MS) {
			recover(s);
			if (s->st)
				hc__store_poll(s->st); /* late completions of ops given up on */
			last_recover = now;
		}
		if (hc__writer_due(s, &wait_ms)) {
			hc__writer_scan(s);
			did = 1;
		}
		if (s->stage)
			hc__stage_pump(s, &wait_ms);
		if (!did)
			hc__bell_wait(&s->p->ctl->service.bell, any_request, s, (uint64_t)s->o.spin_us * 1000, wait_ms);
	}
	/* Drain: whatever was posted before the stop is answered. */
	{
		uint32_t hwm = atomic_load_explicit(&s->p->hdr->slots_hwm, memory_order_acquire);
		for (unsigned i = 0; i < hwm && i < s->p->g.max_ranks; i++)
			serve_slot(s, i);
	}
	hc__xfer_stop(s);
	hc__stage_stop(s);
	hc__writer_stop(s);
	pthread_mutex_lock(&s->mu);
	s->closing = 1; /* hc_service_stop rings the bell only before this */
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_lock(&s->st_mu);
	hc_store_close(s->st);
	s->st = NULL;
	pthread_mutex_unlock(&s->st_mu);
	drop_lock(s);
	hc_pool_detach(s->p);
	s->p = NULL;
	return NULL;
}

static void service_free(hc_service *s)
{
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->cq_mu);
	pthread_mutex_destroy(&s->fail_mu);
	pthread_mutex_destroy(&s->st_mu);
	free(s->args);
	free(s->dir);
	free(s->backend);
	free(s->backend_dir);
	free(s->mac_key_file);
	free(s);
}

int hc_service_start(const char *pool, const struct hc_service_opts *given, hc_service **out)
{
	struct hc_service_opts ob, *opts = NULL;
	hc_service *s;
	int r;

	if (!out)
		return hc__err(EINVAL, "service: out is NULL");
	*out = NULL;
	if (given) {
		if ((r = HC__ABI_IN(&ob, given, "hc_service_start", hc_service_opts)) < 0)
			return r;
		opts = &ob;
	}
	if (!pool || !opts || !opts->backend)
		return hc__err(EINVAL, "service: %s",
			       !pool   ? "no pool name"
			       : !opts ? "opts is NULL"
				       : "no backend (e.g. file:dir=/var/cache/hicache)");
	if ((r = hc_pool_name_valid(pool)) < 0)
		return r;
	if ((unsigned)opts->write_policy > HC_WRITE_NONE)
		return hc__err(
			EINVAL,
			"service: write policy %u is none of write_through (0), write_through_selective (1), write_back (2), write_none (3)",
			(unsigned)opts->write_policy);
	if (opts->flags & ~HC_SERVICE_FD)
		return hc__err(EINVAL, "service: unknown flags 0x%x", opts->flags & ~HC_SERVICE_FD);
	if ((opts->flags & HC_SERVICE_FD) && opts->dir)
		return hc__err(EINVAL,
			       "service: pool '%s' is sealed (HC_SERVICE_FD): it is in no directory, but dir is '%s'",
			       pool, opts->dir);
	if (opts->writeback_pct > 100)
		return hc__err(EINVAL, "service: writeback_pct %u is a share of the pool: 1 to 100",
			       opts->writeback_pct);
	s = calloc(1, sizeof(*s));
	if (!s)
		return hc__err(ENOMEM, "service: no memory");
	snprintf(s->name, sizeof(s->name), "%s", pool);
	s->o = *opts;
	s->o.batch_pages = opts->batch_pages ? opts->batch_pages : DEFAULT_BATCH;
	s->o.queue_depth = opts->queue_depth ? opts->queue_depth : DEFAULT_QD;
	s->o.spin_us = opts->spin_us ? opts->spin_us : DEFAULT_SPIN_US;
	s->o.workers = opts->workers ? opts->workers : DEFAULT_WORKERS;
	s->o.select_hits = opts->select_hits ? opts->select_hits : DEFAULT_SELECT_HITS;
	s->o.writeback_pct = opts->writeback_pct ? opts->writeback_pct : DEFAULT_WRITEBACK_PCT;
	s->o.write_park_ms = opts->write_park_ms ? opts->write_park_ms : DEFAULT_WRITE_PARK_MS;
	s->o.stage_hold_ms = opts->stage_hold_ms ? opts->stage_hold_ms : DEFAULT_STAGE_HOLD_MS;
	s->dir = opts->dir ? strdup(opts->dir) : NULL;
	s->backend = strdup(opts->backend);
	s->backend_dir = opts->backend_dir ? strdup(opts->backend_dir) : NULL;
	s->mac_key_file = opts->mac_key_file ? strdup(opts->mac_key_file) : NULL;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->cq_mu, NULL);
	pthread_mutex_init(&s->fail_mu, NULL);
	pthread_mutex_init(&s->st_mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (!s->backend || (opts->dir && !s->dir) || (opts->backend_dir && !s->backend_dir) ||
	    (opts->mac_key_file && !s->mac_key_file)) {
		service_free(s);
		return hc__err(ENOMEM, "service: no memory");
	}
	if ((r = pthread_create(&s->thr, NULL, service_main, s)) != 0) {
		service_free(s);
		return hc__err(r, "service: cannot start its thread");
	}
	pthread_mutex_lock(&s->mu);
	while (!s->started)
		pthread_cond_wait(&s->cv, &s->mu);
	r = s->result;
	pthread_mutex_unlock(&s->mu);
	if (r < 0) {
		pthread_join(s->thr, NULL);
		r = hc__err(-r, "%s", s->err);
		service_free(s);
		return r;
	}
	*out = s;
	return 0;
}

int hc_service_l3_stats(hc_service *s, struct hc_store_info *info, size_t size,
			void (*emit)(void *arg, const char *name, uint64_t value), void *arg)
{
	int r = 0;

	if (!s)
		return hc__err(EINVAL, "service L3 stats: the service is NULL");
	pthread_mutex_lock(&s->st_mu);
	if (!s->st)
		r = hc__err(ENOENT, "service L3 stats: pool '%s' has no backend attached now", s->name);
	if (r == 0 && info)
		r = hc_store_info(s->st, info, size);
	if (r >= 0 && emit)
		r = hc_store_stats(s->st, emit, arg);
	pthread_mutex_unlock(&s->st_mu);
	return r < 0 ? r : 0;
}

int hc_service_stop(hc_service *s)
{
	if (!s)
		return 0;
	atomic_store(&s->stop, 1);
	/* Wake it if it sleeps on its bell, as a rank would. */
	pthread_mutex_lock(&s->mu);
	if (!s->closing)
		hc__bell_ring(&s->p->ctl->service.bell);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thr, NULL);
	service_free(s);
	return 0;
}
