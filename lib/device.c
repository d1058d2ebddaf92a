/* SPDX-License-Identifier: Apache-2.0 */
/*
 * device.c - layer-wise transfers between envelopes and a rank's device KV
 * (include/hicache/device.h), over the runs of devmap.c.
 *
 * Notes on synchronization (process-private):
 * - Each hc_dev has one worker thread that runs its transfers in the order
 *   they were made, layer by layer.  dev->mu guards the queue, each
 *   transfer's done_layers, finished and result, and dev->stop; the
 *   worker broadcasts dev->cv after every layer, so waiters wake in order.
 * - A transfer's arrays are its own copies, written before it is queued
 *   and read only by the worker until finished; then by its owner.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hicache/device.h>

#include "../shmpool/pool.h"
#include "devmap.h"

struct hc_xfer {
	hc_dev *dev;
	struct hc_xfer *next;
	int store;
	unsigned flags, n, layers;
	hc_page_t *pages;
	uint32_t *ids, *presence;
	uint64_t *slots, *state_slots;
	unsigned done_layers;     /* under dev->mu */
	int finished, result;     /* under dev->mu */
	char err[256];            /* the worker's hc_last_error of a failure */
};

struct hc_dev {
	hc_pool *pool;
	enum hc_dev_kind kind;
	struct hc__dev_plan pl;
	struct hc__dev_plan pl_store; /* pl without the replicated components, except on rank 0 */
	uint64_t *addrs;          /* our copies of the callers' k/v arrays */
	unsigned layers;          /* the most of any described component */
	uint32_t shards;          /* what this rank commits: its groups, and the replicated part on rank 0 */
	int has_state, has_kv;
	pthread_t worker;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct hc_xfer *head, *tail;
	int stop;
};

static void run_xfer(hc_dev *d, hc_xfer *x)
{
	const struct hc__geom *g = &d->pool->g;
	struct hc__run *runs = NULL;
	unsigned cap = 0, need;
	int r = 0;

	for (unsigned l = 0; l < x->layers && r == 0; l++) {
		for (;;) {
			r = hc__dev_runs(g, x->store ? &d->pl_store : &d->pl, l, x->ids, x->presence, x->n, x->slots, x->state_slots, runs, cap,
					 &need);
			if (r != -ENOSPC)
				break;
			free(runs);
			cap = need + need / 4 + 16;
			runs = malloc((size_t)cap * sizeof(*runs));
			if (!runs) {
				r = hc__err(ENOMEM, "transfer: no memory for %u runs", cap);
				break;
			}
		}
		if (r < 0)
			break;
		for (int i = 0; i < r; i++) {
			uint8_t *env = d->pool->env + runs[i].env;
			void *dev = (void *)(uintptr_t)runs[i].dev;
			if (x->store)
				memcpy(env, dev, runs[i].len);
			else
				memcpy(dev, env, runs[i].len);
		}
		r = 0;
		pthread_mutex_lock(&d->mu);
		x->done_layers = l + 1;
		pthread_cond_broadcast(&d->cv);
		pthread_mutex_unlock(&d->mu);
	}
	free(runs);
	if (r == 0 && x->store && (x->flags & HC_XFER_COMMIT)) {
		for (unsigned i = 0; i < x->n; i++) {
			uint32_t mine = d->shards & hc_page_needed(d->pool, x->presence[i]);
			int c;
			if (!mine)
				continue; /* nothing of this page is this rank's to write */
			c = hc_page_commit(d->pool, x->pages[i], mine);
			if (c < 0 && c != -EALREADY && r == 0)
				r = c; /* EALREADY: a rank sharing our group finished it first */
		}
	}
	if (r < 0)
		snprintf(x->err, sizeof(x->err), "%s", hc_last_error()); /* the worker's thread-local line */
	pthread_mutex_lock(&d->mu);
	x->result = r;
	x->finished = 1;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

static void *worker_main(void *arg)
{
	hc_dev *d = arg;

	pthread_mutex_lock(&d->mu);
	for (;;) {
		hc_xfer *x;
		while (!d->head && !d->stop)
			pthread_cond_wait(&d->cv, &d->mu);
		if (!d->head)
			break; /* stopping, and nothing left */
		x = d->head;
		d->head = x->next;
		if (!d->head)
			d->tail = NULL;
		pthread_mutex_unlock(&d->mu);
		run_xfer(d, x);
		pthread_mutex_lock(&d->mu);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

int hc_dev_open(hc_pool *pool, const struct hc_dev_spec *spec, hc_dev **out)
{
	struct hc__dev_comp dc[HC_MAX_COMPONENTS];
	struct hc__dev_desc desc;
	size_t naddr = 0;
	hc_dev *d;
	int r;

	if (!out)
		return hc__err(EINVAL, "device open: out is NULL");
	*out = NULL;
	if (!pool || !spec)
		return hc__err(EINVAL, "device open: %s is NULL", pool ? "spec" : "pool");
	if ((r = hc__need_slot(pool, "device open")) < 0)
		return r;
	if (spec->kind == HC_DEV_CUDA)
		return hc__err(ENOTSUP, "device open: the CUDA path is not in this build yet: use HC_DEV_HOST");
	if (spec->kind != HC_DEV_HOST)
		return hc__err(EINVAL, "device open: kind %d is neither HC_DEV_HOST nor HC_DEV_CUDA", (int)spec->kind);
	if (spec->ncomp > HC_MAX_COMPONENTS || (spec->ncomp && !spec->comps))
		return hc__err(EINVAL, "device open: %u components%s", spec->ncomp, spec->comps ? "" : " and comps is NULL");
	for (unsigned i = 0; i < spec->ncomp; i++) {
		dc[i] = (struct hc__dev_comp){ spec->comps[i].comp, spec->comps[i].k, spec->comps[i].v,
					       spec->comps[i].token_bytes, spec->comps[i].token_stride,
					       spec->comps[i].slots };
	}
	desc = (struct hc__dev_desc){ spec->tp_size, spec->tp_rank, spec->ncomp, dc };
	d = calloc(1, sizeof(*d));
	if (!d)
		return hc__err(ENOMEM, "device open: no memory");
	r = hc__dev_plan(&pool->g, &desc, &d->pl);
	if (r < 0)
		goto fail;
	/* Keep our own copies of the address arrays: the caller's may go. */
	for (unsigned i = 0; i < spec->ncomp; i++)
		naddr += (size_t)pool->g.comps[dc[i].comp].layers * (d->pl.c[i].kv ? 2 : 1);
	d->addrs = calloc(naddr ? naddr : 1, sizeof(*d->addrs));
	if (!d->addrs) {
		r = hc__err(ENOMEM, "device open: no memory");
		goto fail;
	}
	naddr = 0;
	for (unsigned i = 0; i < spec->ncomp; i++) {
		unsigned L = pool->g.comps[dc[i].comp].layers;
		memcpy(d->addrs + naddr, dc[i].k, L * sizeof(uint64_t));
		d->pl.c[i].d.k = d->addrs + naddr;
		naddr += L;
		if (d->pl.c[i].kv) {
			d->has_kv = 1;
			memcpy(d->addrs + naddr, dc[i].v, L * sizeof(uint64_t));
			d->pl.c[i].d.v = d->addrs + naddr;
			naddr += L;
		} else {
			d->pl.c[i].d.v = NULL;
			d->has_state = 1;
		}
		if (L > d->layers)
			d->layers = L;
		if (pool->g.comps[dc[i].comp].sharding == HC_SHARDED) {
			for (uint32_t j = 0; j < d->pl.c[i].ng; j++)
				d->shards |= 1u << (d->pl.c[i].g0 + j);
		} else if (spec->tp_rank == 0) {
			d->shards |= HC_SHARD_REPLICATED;
		}
	}
	/* A replicated component has one writer, rank 0 (it commits that part):
	 * the other ranks' copies of it are not written back. */
	d->pl_store = d->pl;
	d->pl_store.ncomp = 0;
	for (unsigned i = 0; i < d->pl.ncomp; i++)
		if (spec->tp_rank == 0 || pool->g.comps[d->pl.c[i].d.comp].sharding == HC_SHARDED)
			d->pl_store.c[d->pl_store.ncomp++] = d->pl.c[i];
	d->pool = pool;
	d->kind = spec->kind;
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	r = pthread_create(&d->worker, NULL, worker_main, d);
	if (r) {
		pthread_cond_destroy(&d->cv);
		pthread_mutex_destroy(&d->mu);
		r = hc__err(r, "device open: cannot start its worker thread");
		goto fail;
	}
	*out = d;
	return 0;
fail:
	free(d->addrs);
	free(d);
	return r;
}

int hc_dev_close(hc_dev *d)
{
	if (!d)
		return 0;
	pthread_mutex_lock(&d->mu);
	d->stop = 1;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	pthread_join(d->worker, NULL); /* it drains the queue first */
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
	free(d->addrs);
	free(d);
	return 0;
}

static void xfer_free_arrays(hc_xfer *x)
{
	free(x->pages);
	free(x->ids);
	free(x->presence);
	free(x->slots);
	free(x->state_slots);
	free(x);
}

static int submit(hc_dev *d, const struct hc_xfer_req *rq, int store, hc_xfer **out)
{
	const char *what = store ? "device store" : "device load";
	hc_pool *p;
	uint32_t T;
	hc_xfer *x;

	if (!out)
		return hc__err(EINVAL, "%s: out is NULL", what);
	*out = NULL;
	if (!d || !rq)
		return hc__err(EINVAL, "%s: %s is NULL", what, d ? "the request" : "the device");
	p = d->pool;
	T = p->g.page_tokens;
	if (rq->n == 0 || !rq->pages || (d->has_kv && !rq->slots) || (d->has_state && !rq->state_slots))
		return hc__err(EINVAL, "%s: %s", what,
			       rq->n == 0 ? "no pages" : !rq->pages ? "pages is NULL"
			       : !rq->state_slots && d->has_state ? "state_slots is NULL and a state component is described"
			       : "slots is NULL and a K/V component is described");
	if (rq->flags & ~HC_XFER_COMMIT || (!store && rq->flags))
		return hc__err(EINVAL, "%s: flags 0x%x are not known here", what, rq->flags);
	x = calloc(1, sizeof(*x));
	if (!x)
		return hc__err(ENOMEM, "%s: no memory", what);
	x->pages = malloc(rq->n * sizeof(*x->pages));
	x->ids = malloc(rq->n * sizeof(*x->ids));
	x->presence = malloc(rq->n * sizeof(*x->presence));
	x->slots = rq->slots ? malloc((size_t)rq->n * T * sizeof(*x->slots)) : NULL;
	x->state_slots = rq->state_slots ? malloc(rq->n * sizeof(*x->state_slots)) : NULL;
	if (!x->pages || !x->ids || !x->presence || (rq->slots && !x->slots) || (rq->state_slots && !x->state_slots)) {
		xfer_free_arrays(x);
		return hc__err(ENOMEM, "%s: no memory for %u pages", what, rq->n);
	}
	/* A load reads READY pages the caller holds; a store writes pages this
	 * process reserved.  Checked now, so a mistake fails the call. */
	for (unsigned i = 0; i < rq->n; i++) {
		hc_page_t h = rq->pages[i];
		uint32_t id = HC_PAGE_ID(h);
		int r = 0;
		if (id >= p->g.npages) {
			r = hc__err(EINVAL, "%s: page %u (item %u) is out of the pool's %u", what, id, i, p->g.npages);
		} else if (store) {
			r = hc__check_reserved(p, h, what);
		} else {
			uint64_t w = atomic_load_explicit(&p->pages[id].word, memory_order_acquire);
			if (hc__w_gen(w) != HC_PAGE_GEN(h) || hc__w_state(w) != HC_PAGE_READY)
				r = hc__err(ESTALE, "%s: page %u (item %u) is not READY at this handle's generation",
					    what, id, i);
		}
		if (r < 0) {
			xfer_free_arrays(x);
			return r;
		}
		x->pages[i] = h;
		x->ids[i] = id;
		x->presence[i] = atomic_load_explicit(&p->pages[id].presence, memory_order_relaxed);
	}
	if (rq->slots)
		memcpy(x->slots, rq->slots, (size_t)rq->n * T * sizeof(*x->slots));
	if (rq->state_slots)
		memcpy(x->state_slots, rq->state_slots, rq->n * sizeof(*x->state_slots));
	x->dev = d;
	x->store = store;
	x->flags = rq->flags;
	x->n = rq->n;
	x->layers = d->layers;
	pthread_mutex_lock(&d->mu);
	if (d->tail)
		d->tail->next = x;
	else
		d->head = x;
	d->tail = x;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	*out = x;
	return 0;
}

int hc_dev_load(hc_dev *dev, const struct hc_xfer_req *req, hc_xfer **out)
{
	return submit(dev, req, 0, out);
}

int hc_dev_store(hc_dev *dev, const struct hc_xfer_req *req, hc_xfer **out)
{
	return submit(dev, req, 1, out);
}

unsigned hc_xfer_layers(const hc_xfer *x)
{
	return x ? x->layers : 0;
}

int hc_xfer_layer_done(hc_xfer *x, unsigned layer)
{
	int r;

	if (!x || layer >= x->layers)
		return hc__err(EINVAL, "transfer: %s", x ? "layer out of range" : "the transfer is NULL");
	pthread_mutex_lock(&x->dev->mu);
	r = x->done_layers > layer ? 1 : x->finished ? x->result : 0;
	pthread_mutex_unlock(&x->dev->mu);
	return r;
}

int hc_xfer_wait_layer(hc_xfer *x, unsigned layer)
{
	int r;

	if (!x || layer >= x->layers)
		return hc__err(EINVAL, "transfer: %s", x ? "layer out of range" : "the transfer is NULL");
	pthread_mutex_lock(&x->dev->mu);
	while (x->done_layers <= layer && !x->finished)
		pthread_cond_wait(&x->dev->cv, &x->dev->mu);
	r = x->done_layers > layer ? 0 : x->result;
	pthread_mutex_unlock(&x->dev->mu);
	return r < 0 ? hc__err(-r, "%s", x->err) : r;
}

int hc_xfer_wait(hc_xfer *x)
{
	int r;

	if (!x)
		return hc__err(EINVAL, "transfer: the transfer is NULL");
	pthread_mutex_lock(&x->dev->mu);
	while (!x->finished)
		pthread_cond_wait(&x->dev->cv, &x->dev->mu);
	r = x->result;
	pthread_mutex_unlock(&x->dev->mu);
	return r < 0 ? hc__err(-r, "%s", x->err) : r;
}

int hc_xfer_free(hc_xfer *x)
{
	int r;

	if (!x)
		return 0;
	r = hc_xfer_wait(x);
	xfer_free_arrays(x);
	return r;
}
