/* SPDX-License-Identifier: Apache-2.0 */
/*
 * request.c - a rank's requests to the service (include/hicache/service.h),
 * through its rank slot's rings (wire.h).
 *
 * Notes on synchronization (process-private): a pool handle has one
 * struct reqs, made at its first request.  mu guards everything in it: the
 * request ring (we are its one producer), the completion ring (its one
 * consumer), the argument allocator and the table of outstanding requests.
 * A waiter drains the completion ring under mu and sleeps on the slot's
 * completion bell without it; the bell wakes every sleeper, and each looks
 * at its own request again.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <hicache/service.h>

#include "wire.h"

#define SPIN_NS     20000u /* a busy service answers within a few microseconds */
#define LIVENESS_MS 100    /* while waiting, look at the service this often */

struct hc_req {
	hc_pool *p;
	uint8_t op; /* enum hc__op */
	uint32_t idx, gen;
	uint64_t svc_gen; /* the service generation it was posted to */
	int done, result;
	uint32_t where;
	/* a prefetch's, for the take */
	hc_key_t *keys;
	unsigned nkeys;
	uint32_t presence;
	struct hc__pf_args pf; /* its ticket name */
	enum hc_prefetch_policy policy;
	uint64_t deadline_ms; /* TIMEOUT: when the take stops waiting */
	int taken;
	int backend_attach; /* a backend request: attach (1) or detach (0) */
	uint8_t prio;       /* buffer_only: the priority class */
	int acked;          /* buffer_only: the service was told we are done with it */
};

struct reqs {
	pthread_mutex_t mu;
	struct hc__ring sq, cq;
	struct hc__argbuf arg;
	uint8_t *argmem;
	struct hc_bell *bell; /* this slot's completion bell */
	uint32_t epoch;
	hc_req **live; /* [cap]: outstanding requests by index */
	uint32_t cap, next_gen;
};

static void reqs_fini(struct hc_pool *p)
{
	struct reqs *q = p->reqs;

	if (!q)
		return;
	/* Requests not freed are abandoned: the service's answers go nowhere. */
	for (uint32_t i = 0; i < q->cap; i++)
		if (q->live[i])
			q->live[i]->p = NULL;
	hc__argbuf_fini(&q->arg);
	pthread_mutex_destroy(&q->mu);
	free(q->live);
	free(q);
	p->reqs = NULL;
	p->reqs_fini = NULL;
}

/* The handle's request path, made at the first request. */
static int reqs_get(hc_pool *p, const char *op, struct reqs **out)
{
	struct reqs *q = p->reqs;
	uint8_t *blk;
	int r;

	if (q) {
		*out = q;
		return 0;
	}
	if ((r = hc__need_slot(p, op)) < 0)
		return r;
	q = calloc(1, sizeof(*q));
	if (!q)
		return hc__err(ENOMEM, "%s: no memory", op);
	blk = hc__rank_block(p, (unsigned)p->slot);
	q->bell = (struct hc_bell *)blk;
	q->argmem = blk + p->g.rg.arg_off;
	/* Our slot's epoch was bumped when we claimed it, before anything of
	 * ours went into the argument area: the service drops what a dead
	 * owner left in the ring (wire.h). */
	q->epoch = atomic_load_explicit(&p->ranks[p->slot].epoch, memory_order_acquire);
	q->cap = p->g.sq_entries * 2;
	q->live = calloc(q->cap, sizeof(*q->live));
	if (!q->live ||
	    (r = hc__ring_attach(&q->sq, blk + p->g.rg.sq_off, p->g.rg.cq_off - p->g.rg.sq_off, p->g.sq_entries,
				 HC_SQE_BYTES, HC_RING_PRODUCER)) < 0 ||
	    (r = hc__ring_attach(&q->cq, blk + p->g.rg.cq_off, p->g.rg.arg_off - p->g.rg.cq_off, p->g.cq_entries,
				 HC_CQE_BYTES, HC_RING_CONSUMER)) < 0 ||
	    (r = hc__argbuf_init(&q->arg, p->g.arg_bytes, p->g.sq_entries)) < 0) {
		if (!q->live)
			r = hc__err(ENOMEM, "%s: no memory", op);
		free(q->live);
		free(q);
		return hc__err(-r, "%s: this rank's request path: %s", op, hc_last_error());
	}
	/* What a dead owner left unconsumed is not ours: its bytes are free to us. */
	q->arg.freed = q->sq.theirs;
	pthread_mutex_init(&q->mu, NULL);
	p->reqs = q;
	p->reqs_fini = reqs_fini;
	*out = q;
	return 0;
}

int hc_service_probe(hc_pool *p, uint32_t *pid)
{
	struct hc_seg_service *s;
	int r;

	if (!p)
		return hc__err(EINVAL, "service probe: pool is NULL");
	s = &p->ctl->service;
	/* Unlocked (glibc's lock word is 0): no service, nothing to recover.
	 * Not taken then: a prober that holds the lock even for a moment makes
	 * a service starting meanwhile find it busy. */
	if (__atomic_load_n(&s->life.__data.__lock, __ATOMIC_ACQUIRE) == 0) {
		if (pid)
			*pid = 0;
		return 0;
	}
	r = hc__mutex_kind_ok(&s->life) ? pthread_mutex_trylock(&s->life) : ENOTRECOVERABLE;
	if (r == EBUSY) {
		/* Held by a live service (a stopped one is alive), or, with no
		 * LIVE record, for a moment by another prober or a service
		 * starting or stopping: none serves. */
		int live = atomic_load_explicit(&s->state, memory_order_acquire) == HC_SVC_LIVE;
		if (pid)
			*pid = live ? atomic_load_explicit(&s->pid, memory_order_relaxed) : 0;
		return live;
	}
	if (r == EOWNERDEAD) {
		/* The service died; its rank slot's recovery undoes its holds. */
		atomic_store_explicit(&s->state, HC_SVC_NONE, memory_order_relaxed);
		pthread_mutex_consistent(&s->life);
		r = 0;
	}
	if (r != 0)
		return hc__err(r == ENOTRECOVERABLE ? EIO : r, "service probe: the service lock is unusable (%d)", r);
	pthread_mutex_unlock(&s->life);
	if (pid)
		*pid = 0;
	return 0;
}

int hc_service_info(hc_pool *p, struct hc_service_info *info, size_t size)
{
	struct hc_service_info ob, *out = &ob;
	struct hc_seg_service *s;
	uint32_t wp;
	int r;

	if (!p || !info)
		return hc__err(EINVAL, "service info: %s is NULL", p ? "out" : "pool");
	s = &p->ctl->service;
	memset(out, 0, sizeof(*out));
	if ((r = hc_service_probe(p, &out->pid)) < 0)
		return r;
	out->live = r;
	out->generation = atomic_load_explicit(&s->generation, memory_order_acquire);
	wp = atomic_load_explicit(&s->write_policy, memory_order_relaxed);
	out->write_policy = wp >= 1 && wp <= HC_WRITE_NONE + 1 ? (int)wp - 1
							       : -1; /* anything else: never set (or scribbled) */
	out->select_hits = atomic_load_explicit(&s->select_hits, memory_order_relaxed);
	if (out->live) { /* a dead service's gauges are stale */
		out->jobs_queued = atomic_load_explicit(&s->jobs_queued, memory_order_relaxed);
		out->jobs_running = atomic_load_explicit(&s->jobs_running, memory_order_relaxed);
		out->stage_read = atomic_load_explicit(&s->stage_read, memory_order_relaxed);
		out->stage_write = atomic_load_explicit(&s->stage_write, memory_order_relaxed);
		out->parked_reads = atomic_load_explicit(&s->parked_reads, memory_order_relaxed);
		out->parked_writes = atomic_load_explicit(&s->parked_writes, memory_order_relaxed);
	}
	return HC__ABI_OUT(info, size, out, "hc_service_info", hc_service_info);
}

static int no_service(hc_pool *p, const char *op)
{
	return hc__err(ENOTCONN, "%s: no service serves pool '%s': start hicached (or an embedded service) for it", op,
		       p->info.name);
}

/* Post one request with its items (after head, hlen bytes, if any); the
 * caller holds q->mu. */
static int post(hc_pool *p, struct reqs *q, const char *op, uint8_t code, const void *head, size_t hlen,
		const void *items, unsigned n, size_t size, hc_req *rq)
{
	uint64_t len = (uint64_t)n * size + hlen;
	struct hc__sqe e = { .op = code, .prio = rq->prio, .epoch = q->epoch, .n = n, .arg_len = (uint32_t)len };
	int64_t off;
	int r;

	if ((r = hc__ring_room(&q->sq, 1)) < 0)
		return hc__err(-r, "%s: %s", op, hc_last_error());
	if (r == 0)
		return hc__err(EAGAIN, "%s: this rank's %u requests are all in flight: wait for some first", op,
			       p->g.sq_entries);
	off = hc__argbuf_alloc(&q->arg, len, q->sq.mine, q->sq.theirs);
	if (off == -ENOSPC) {
		hc__ring_refresh(&q->sq, HC_RING_PRODUCER);
		off = hc__argbuf_alloc(&q->arg, len, q->sq.mine, q->sq.theirs);
	}
	if (off == -ENOSPC)
		return hc__err(EAGAIN,
			       "%s: this rank's argument area (%llu bytes) is full: wait for requests in flight", op,
			       (unsigned long long)p->g.arg_bytes);
	if (off < 0)
		return hc__err(-(int)off, "%s: %u items: %s", op, n, hc_last_error());
	if (hlen)
		memcpy(q->argmem + off, head, hlen);
	if (size)
		memcpy(q->argmem + off + hlen, items, (size_t)n * size);
	e.arg_off = (uint64_t)off;
	e.user_data = (uint64_t)rq->idx << 32 | rq->gen;
	memcpy(hc__ring_slot(&q->sq, 0), &e, sizeof(e));
	hc__ring_post(&q->sq, 1); /* release: the entry and its arguments first */
	hc__bell_ring(&p->ctl->service.bell);
	return 0;
}

/* The checks every request gets before anything is made. */
static int check_args(hc_pool *p, const char *op, uint8_t code, const void *items, unsigned n, size_t size, size_t hlen,
		      hc_req **out)
{
	if (!out)
		return hc__err(EINVAL, "%s: out is NULL", op);
	*out = NULL;
	if (!p || (n && !items))
		return hc__err(EINVAL, "%s: %s is NULL", op, p ? "the list" : "pool");
	if (n == 0)
		return hc__err(EINVAL, "%s: no %s", op, code == HC__OP_BACKUP ? "pages" : "keys");
	if ((uint64_t)n * size + hlen > p->g.arg_bytes)
		return hc__err(
			E2BIG,
			"%s: %u items (%llu bytes) do not fit this pool's argument area of %llu bytes: split the request, or create the pool with a larger --arg-bytes",
			op, n, (unsigned long long)(n * size + hlen), (unsigned long long)p->g.arg_bytes);
	return 0;
}

/* Post rq (made by the caller, freed on failure). */
static int submit_req(hc_pool *p, const char *op, uint8_t code, const void *head, size_t hlen, const void *items,
		      unsigned n, size_t size, hc_req *rq, hc_req **out)
{
	struct reqs *q = NULL;
	uint32_t idx;
	int r;

	if ((r = reqs_get(p, op, &q)) < 0 || (r = hc_service_probe(p, NULL)) <= 0) {
		free(rq->keys);
		free(rq);
		return r < 0 ? r : no_service(p, op);
	}
	rq->op = code;
	pthread_mutex_lock(&q->mu);
	for (idx = 0; idx < q->cap && q->live[idx]; idx++)
		;
	if (idx == q->cap) {
		pthread_mutex_unlock(&q->mu);
		free(rq->keys);
		free(rq);
		return hc__err(EAGAIN, "%s: %u requests outstanding: free some first", op, q->cap);
	}
	rq->p = p;
	rq->idx = idx;
	rq->gen = ++q->next_gen;
	rq->svc_gen = atomic_load_explicit(&p->ctl->service.generation, memory_order_acquire);
	r = post(p, q, op, code, head, hlen, items, n, size, rq);
	if (r == 0)
		q->live[idx] = rq;
	pthread_mutex_unlock(&q->mu);
	if (r < 0) {
		free(rq->keys);
		free(rq);
		return r;
	}
	*out = rq;
	return 0;
}

static int submit(hc_pool *p, const char *op, uint8_t code, const void *items, unsigned n, size_t size, hc_req **out)
{
	hc_req *rq;
	int r;

	if ((r = check_args(p, op, code, items, n, size, 0, out)) < 0)
		return r;
	if (!(rq = calloc(1, sizeof(*rq))))
		return hc__err(ENOMEM, "%s: no memory", op);
	return submit_req(p, op, code, NULL, 0, items, n, size, rq, out);
}

int hc_req_exists(hc_pool *pool, const hc_key_t *keys, unsigned n, hc_req **out)
{
	return submit(pool, "L3 exists", HC__OP_EXISTS, keys, n, sizeof(hc_key_t), out);
}

int hc_req_backup(hc_pool *pool, const hc_page_t *pages, unsigned n, hc_req **out)
{
	return submit(pool, "L3 backup", HC__OP_BACKUP, pages, n, sizeof(hc_page_t), out);
}

int hc_req_backend(hc_pool *pool, const char *spec, hc_req **out)
{
	int r;

	if (!spec)
		spec = "";
	r = submit(pool, *spec ? "backend attach" : "backend detach", HC__OP_BACKEND, spec, (unsigned)strlen(spec) + 1,
		   1, out);
	if (r == 0)
		(*out)->backend_attach = *spec != 0;
	return r;
}

int hc_req_stage(hc_pool *p, unsigned npages, unsigned prio, hc_req **out)
{
	const char *op = "write staging";
	hc_req *rq;

	if (!out)
		return hc__err(EINVAL, "%s: out is NULL", op);
	*out = NULL;
	if (!p)
		return hc__err(EINVAL, "%s: pool is NULL", op);
	if (p->g.host_mode != HC_HOST_BUFFER_ONLY)
		return hc__err(
			EOPNOTSUPP,
			"%s: pool '%s' is a cache pool: reserve pages directly (staging grants are for buffer_only pools)",
			op, p->info.name);
	if (npages == 0 || npages > p->g.npages)
		return hc__err(EINVAL, "%s: %u pages: ask for 1 to the pool's %u", op, npages, p->g.npages);
	if (prio >= HC_PRIO_CLASSES)
		return hc__err(EINVAL, "%s: priority class %u: the classes are 0 (first) to %d", op, prio,
			       HC_PRIO_CLASSES - 1);
	if (!(rq = calloc(1, sizeof(*rq))))
		return hc__err(ENOMEM, "%s: no memory", op);
	rq->prio = (uint8_t)prio;
	return submit_req(p, op, HC__OP_STAGE, NULL, 0, NULL, npages, 0, rq, out);
}

int hc_req_prefetch(hc_pool *p, const struct hc_prefetch_req *given, hc_req **out)
{
	const char *op = "L3 prefetch";
	struct hc_prefetch_req rb, *req = &rb;
	struct hc_ticket_name nb;
	struct hc__pf_args a = { 0 };
	uint64_t wait_ms;
	hc_req *rq;
	size_t len;
	int r;

	if (out)
		*out = NULL;
	if (!given)
		return hc__err(EINVAL, "%s: req is NULL", op);
	if ((r = HC__ABI_IN(req, given, "hc_req_prefetch", hc_prefetch_req)) < 0 ||
	    (req->name && (r = HC__ABI_IN(&nb, req->name, "hc_req_prefetch", hc_ticket_name)) < 0))
		return r;
	if (req->name)
		req->name = &nb;
	if ((r = check_args(p, op, HC__OP_PREFETCH, req->keys, req->nkeys, sizeof(hc_key_t), sizeof(a), out)) < 0)
		return r;
	if ((unsigned)req->policy > HC_PREFETCH_TIMEOUT)
		return hc__err(EINVAL, "%s: policy %u is none of best_effort (0), wait_complete (1), timeout (2)", op,
			       (unsigned)req->policy);
	if (req->presence >> p->g.ncomp)
		return hc__err(EINVAL, "%s: presence mask 0x%x names a component past the pool's %u", op, req->presence,
			       p->g.ncomp);
	if (req->prio >= HC_PRIO_CLASSES)
		return hc__err(EINVAL, "%s: priority class %u: the classes are 0 (first) to %d", op, req->prio,
			       HC_PRIO_CLASSES - 1);
	if (req->first_depth > UINT32_MAX - req->nkeys)
		return hc__err(EINVAL, "%s: first_depth %u plus %u keys overflows", op, req->first_depth, req->nkeys);
	if (req->name) {
		int32_t eng;
		if (!req->name->request_id || !(len = strnlen(req->name->request_id, HC_REQUEST_ID_MAX + 1)) ||
		    len > HC_REQUEST_ID_MAX)
			return hc__err(EINVAL, "%s: the ticket's request id must be 1..%d bytes", op,
				       HC_REQUEST_ID_MAX);
		if (p->slot < 0 ||
		    !(eng = (int32_t)atomic_load_explicit(&p->ranks[p->slot].engine, memory_order_relaxed)))
			return hc__err(EINVAL, "%s: a ticket name needs an engine: call hc_engine_join first", op);
		memcpy(a.name, req->name->request_id, len);
		a.step = req->name->step;
		a.engine = (uint32_t)eng - 1;
	}
	a.first_depth = req->first_depth;
	a.presence = req->presence;
	if (!(rq = calloc(1, sizeof(*rq))) || !(rq->keys = malloc((size_t)req->nkeys * sizeof(hc_key_t)))) {
		free(rq);
		return hc__err(ENOMEM, "%s: no memory", op);
	}
	memcpy(rq->keys, req->keys, (size_t)req->nkeys * sizeof(hc_key_t));
	rq->nkeys = req->nkeys;
	rq->presence = req->presence;
	rq->pf = a;
	rq->policy = req->policy;
	rq->prio = (uint8_t)req->prio;
	wait_ms = req->timeout_ms + ((uint64_t)req->timeout_us_per_page * req->nkeys + 999) / 1000;
	rq->deadline_ms = hc__mono_ms() + wait_ms;
	return submit_req(p, op, HC__OP_PREFETCH, &a, sizeof(a), req->keys, req->nkeys, sizeof(hc_key_t), rq, out);
}

/* Hand every completion waiting to its request; the caller holds q->mu. */
static int drain(struct reqs *q)
{
	int k;

	while ((k = hc__ring_avail(&q->cq, 32)) > 0) {
		for (int i = 0; i < k; i++) {
			struct hc__cqe c;
			uint32_t idx, gen;
			memcpy(&c, hc__ring_peek(&q->cq, (uint32_t)i), sizeof(c));
			idx = (uint32_t)(c.user_data >> 32);
			gen = (uint32_t)c.user_data;
			/* Another owner's, or not one of ours: not trusted, dropped. */
			if (c.epoch != q->epoch || idx >= q->cap || !q->live[idx] || q->live[idx]->gen != gen)
				continue;
			q->live[idx]->done = 1;
			q->live[idx]->result = c.result < -4095 ? -EIO : c.result;
			q->live[idx]->where = c.where;
		}
		hc__ring_release(&q->cq, (uint32_t)k);
	}
	return k < 0 ? k : 0;
}

/* 1 done, 0 running, or -errno (the service is gone, the ring is damaged). */
static int check(hc_req *rq, struct reqs *q)
{
	uint32_t pid;
	int r;

	if ((r = drain(q)) < 0)
		return hc__err(-r, "L3 request: this rank's completion ring: %s", hc_last_error());
	if (rq->done)
		return 1;
	r = hc_service_probe(rq->p, &pid);
	if (r < 0)
		return r;
	if (r == 0 || atomic_load_explicit(&rq->p->ctl->service.generation, memory_order_acquire) != rq->svc_gen)
		return hc__err(ENOTCONN,
			       "L3 request: the service of pool '%s' %s while the request was in flight; it is lost",
			       rq->p->info.name, r == 0 ? "stopped or died" : "restarted");
	return 0;
}

static int result_of(hc_req *rq)
{
	if (rq->op == HC__OP_BACKEND && rq->result < 0)
		return hc__err(
			-rq->result, "backend %s: %s", rq->backend_attach ? "attach" : "detach",
			rq->result == -EBUSY
				? "refused while transfers are in flight: try again when the service is idle"
			: rq->result == -EALREADY
				? (rq->backend_attach ? "a backend is attached already: detach it first"
						      : "no backend is attached")
			: rq->result == -ENOENT ? "the plugin was not found (see the service's log for where it looked)"
			: rq->result == -EINVAL ? "the spec or an option of it is wrong (the service's log says which)"
						: strerror(-rq->result));
	if (rq->op == HC__OP_STAGE && rq->result == -ETIMEDOUT)
		return hc__err(
			ETIMEDOUT,
			"write staging: the grant waited longer than the service's write_park_ms and was dropped: let its GPU pages go, or ask again");
	if (rq->result == -E2BIG)
		return hc__err(
			E2BIG,
			"%s: more staging pages than the buffer_only pool ever grants at once (the service's log says how many): split it",
			rq->op == HC__OP_STAGE ? "write staging" : "L3 prefetch");
	if (rq->result == -ENODEV)
		return hc__err(ENODEV, "L3 request: the service has no backend attached: hicache-pool backend attach");
	if (rq->result == -ECANCELED)
		return hc__err(ECANCELED, "L3 request: cancelled (hc_req_cancel)%s",
			       rq->op == HC__OP_BACKUP ? "; the pages before the one it stopped at are in L3" : "");
	if (rq->result < 0)
		return hc__err(-rq->result, "L3 request: the service failed it at item %u: %s", rq->where,
			       strerror(-rq->result));
	return rq->result;
}

/* Post an entry with no arguments and no completion that names rq (a
 * cancel, an ack); the caller holds q->mu and rings the bell. */
static int post_about(struct reqs *q, hc_req *rq, uint8_t code, const char *op)
{
	struct hc__sqe e = { .op = code };
	int64_t off;
	int r;

	if ((r = hc__ring_room(&q->sq, 1)) <= 0)
		return r < 0 ? hc__err(-r, "%s: %s", op, hc_last_error())
			     : hc__err(EAGAIN, "%s: this rank's request ring is full: wait for some first", op);
	/* Every entry posted passes through the argument area's books, even
	 * one without arguments (ring.c). */
	if ((off = hc__argbuf_alloc(&q->arg, 0, q->sq.mine, q->sq.theirs)) < 0)
		return hc__err(-(int)off, "%s: %s", op, hc_last_error());
	/* It names the request by its user_data, after it on the same ring. */
	e.epoch = q->epoch;
	e.user_data = (uint64_t)rq->idx << 32 | rq->gen;
	memcpy(hc__ring_slot(&q->sq, 0), &e, sizeof(e));
	hc__ring_post(&q->sq, 1);
	return 0;
}

int hc_req_cancel(hc_req *rq)
{
	struct reqs *q;
	int r;

	if (!rq || !rq->p)
		return hc__err(EINVAL, "L3 cancel: %s", rq ? "its pool was detached" : "the request is NULL");
	q = rq->p->reqs;
	pthread_mutex_lock(&q->mu);
	if ((r = check(rq, q)) != 0) {
		pthread_mutex_unlock(&q->mu);
		return r < 0 ? r : hc__err(EALREADY, "L3 cancel: the request is done already");
	}
	r = post_about(q, rq, HC__OP_CANCEL, "L3 cancel");
	pthread_mutex_unlock(&q->mu);
	if (r == 0)
		hc__bell_ring(&rq->p->ctl->service.bell);
	return r;
}

/* buffer_only: tell the arbiter we are done with rq's staging (a prefetch
 * taken or dropped, a grant given back).  Best effort: if the ring is
 * full, the service lets it go after stage_hold_ms. */
static void ack(hc_req *rq)
{
	struct reqs *q = rq->p->reqs;
	int r;

	if (rq->acked || rq->p->g.host_mode != HC_HOST_BUFFER_ONLY ||
	    (rq->op != HC__OP_PREFETCH && rq->op != HC__OP_STAGE))
		return;
	rq->acked = 1;
	pthread_mutex_lock(&q->mu);
	r = post_about(q, rq, HC__OP_ACK, "staging release");
	pthread_mutex_unlock(&q->mu);
	if (r == 0)
		hc__bell_ring(&rq->p->ctl->service.bell);
}

int hc_req_poll(hc_req *rq)
{
	struct reqs *q;
	int r;

	if (!rq || !rq->p)
		return hc__err(EINVAL, "L3 request: %s", rq ? "its pool was detached" : "the request is NULL");
	q = rq->p->reqs;
	pthread_mutex_lock(&q->mu);
	r = check(rq, q);
	pthread_mutex_unlock(&q->mu);
	if (r < 0)
		return r;
	return r ? result_of(rq) : -EINPROGRESS;
}

struct waitarg {
	struct reqs *q;
	hc_req *rq;
};

static int has_completion(void *arg)
{
	struct waitarg *w = arg;

	/* Without the lock: a hint that something came, looked at under it. */
	return w->rq->done || atomic_load_explicit(&w->q->cq.r->tail, memory_order_acquire) != w->q->cq.mine;
}

int hc_req_wait(hc_req *rq, int timeout_ms)
{
	uint64_t deadline;
	struct waitarg w;
	int r;

	if (!rq || !rq->p)
		return hc__err(EINVAL, "L3 request: %s", rq ? "its pool was detached" : "the request is NULL");
	deadline = timeout_ms < 0 ? UINT64_MAX : hc__mono_ms() + (uint64_t)timeout_ms;
	w = (struct waitarg){ rq->p->reqs, rq };
	for (;;) {
		uint64_t now;
		int slice;
		pthread_mutex_lock(&w.q->mu);
		r = check(rq, w.q);
		pthread_mutex_unlock(&w.q->mu);
		if (r < 0)
			return r;
		if (r)
			return result_of(rq);
		now = hc__mono_ms();
		if (now >= deadline)
			return hc__err(ETIMEDOUT, "L3 request: not done after %d ms; it goes on", timeout_ms);
		/* Sleep in slices, to notice a service that died. */
		slice = deadline - now < LIVENESS_MS ? (int)(deadline - now) : LIVENESS_MS;
		hc__bell_wait(w.q->bell, has_completion, &w, SPIN_NS, slice);
	}
}

int hc_req_prefetch_take(hc_req *rq, hc_page_t *pages, hc_ticket *t)
{
	struct hc_lookup_req lr;
	int r;

	if (!rq || !rq->p || !pages)
		return hc__err(EINVAL, "prefetch take: %s",
			       !rq      ? "the request is NULL"
			       : !pages ? "pages is NULL"
					: "its pool was detached");
	if (rq->op != HC__OP_PREFETCH)
		return hc__err(EINVAL, "prefetch take: the request is not a prefetch");
	if (rq->pf.name[0] && !t)
		return hc__err(EINVAL, "prefetch take: a named prefetch takes under a ticket: t is NULL");
	if (rq->pf.name[0] && (r = hc__ticket_handle_ok(t, "prefetch take")) < 0)
		return r; /* before any wait: a forgotten size should not cost one */
	if (rq->taken)
		return hc__err(EALREADY, "prefetch take: the hit of this request was taken already");
	/* Stop waiting by the policy.  Whatever stopped the service (a failure,
	 * its death) only shortens the hit: the take itself is of the pool. */
	if (rq->policy == HC_PREFETCH_WAIT_COMPLETE) {
		hc_req_wait(rq, -1);
	} else if (rq->policy == HC_PREFETCH_TIMEOUT) {
		uint64_t now = hc__mono_ms();
		if (now < rq->deadline_ms)
			hc_req_wait(rq, (int)(rq->deadline_ms - now < INT32_MAX ? rq->deadline_ms - now : INT32_MAX));
		else
			hc_req_poll(rq);
	} else {
		hc_req_poll(rq);
	}
	lr = (struct hc_lookup_req){ .size = sizeof(lr),
				     .keys = rq->keys,
				     .nkeys = rq->nkeys,
				     .comps = rq->presence,
				     .flags = HC_LOOKUP_PIN | HC__LOOKUP_TAKE };
	if (rq->pf.name[0]) {
		struct hc_ticket_name nm = { .size = sizeof(nm), .request_id = rq->pf.name, .step = rq->pf.step };
		r = hc_ticket_lookup(rq->p, &nm, &lr, pages, t);
	} else {
		r = hc_lookup(rq->p, &lr, pages);
	}
	if (r >= 0) {
		HC_POINT(prefetch_taken);
		rq->taken = 1;
		ack(rq); /* pinned now: the service's part in these pages is over */
	}
	return r;
}

int hc_req_free(hc_req *rq)
{
	struct reqs *q;
	int r = 0;

	if (!rq)
		return 0;
	if (!rq->p) {
		free(rq->keys);
		free(rq); /* its pool was detached */
		return 0;
	}
	q = rq->p->reqs;
	/* A backup's pages are the service's until it is done; an existence
	 * query or a prefetch is abandoned, its answer dropped when it comes. */
	if (!rq->done && rq->op == HC__OP_BACKUP)
		r = hc_req_wait(rq, -1);
	ack(rq);
	pthread_mutex_lock(&q->mu);
	q->live[rq->idx] = NULL;
	pthread_mutex_unlock(&q->mu);
	free(rq->keys);
	free(rq);
	return r < 0 ? r : 0;
}
