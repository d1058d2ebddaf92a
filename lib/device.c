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

#include "config.h"
#include "../shmpool/pool.h"
#include "dev.h"

#define AUTO_DIRECT_RUN (64u << 10) /* HC_PATH_AUTO: runs this long on average go direct */

/* The runs of one layer into *runs (grown as needed). */
static int layer_runs(hc_dev *d, hc_xfer *x, unsigned l, struct hc__run **runs, unsigned *cap)
{
	for (;;) {
		unsigned need;
		int r = hc__dev_runs(&d->pool->g, x->store ? &d->pl_store : &d->pl, l, x->ids, x->presence, x->n,
				     x->slots, x->state_slots, *runs, *cap, &need);
		if (r != -ENOSPC)
			return r;
		free(*runs);
		*cap = need + need / 4 + 16;
		*runs = malloc((size_t)*cap * sizeof(**runs));
		if (!*runs) {
			*cap = 0;
			return hc__err(ENOMEM, "transfer: no memory for %u runs", need);
		}
	}
}

static void run_xfer(hc_dev *d, hc_xfer *x)
{
	const struct hc__dev_plan *pl = x->store ? &d->pl_store : &d->pl;
	struct hc__run *runs = NULL;
	unsigned cap = 0, copies = 0, kernel_layers = 0, direct_layers = 0;
	uint64_t bytes = 0;
	int r = 0, nr = -1;
	enum hc_dev_path path = d->path;

	if (path == HC_PATH_AUTO) {
		/* Layer 0 tells: the others have the same pages and slots. */
		nr = layer_runs(d, x, 0, &runs, &cap);
		if (nr < 0)
			r = nr;
		else
			path = d->ops->choose(d, runs, (unsigned)nr);
	}
	x->path = path;
	if (r == 0)
		r = d->ops->begin(d, x, path);
	for (unsigned l = 0; l < x->layers && r == 0; l++) {
		if (path == HC_PATH_DIRECT) {
			if (l > 0 || nr < 0)
				nr = layer_runs(d, x, l, &runs, &cap);
			if ((r = nr) < 0)
				break;
			for (int i = 0; i < nr; i++)
				bytes += runs[i].len;
			r = d->ops->runs(d, x, runs, (unsigned)nr);
			copies += (unsigned)nr;
			direct_layers++;
		} else {
			struct hc__dl L;
			if ((r = hc__dl_init(&d->pool->g, pl, l, x->n, &L)) < 0)
				break;
			bytes += hc__dl_bytes(&L, x->presence);
			r = d->ops->gather(d, x, &L);
			kernel_layers++;
		}
		if (r == 0)
			r = d->ops->mark(d, x, l);
		if (r < 0)
			break;
		pthread_mutex_lock(&d->mu);
		x->issued = l + 1;
		pthread_cond_broadcast(&d->cv);
		pthread_mutex_unlock(&d->mu);
	}
	free(runs);
	if (r == 0 && x->store && (x->flags & HC_XFER_COMMIT)) {
		/* The bytes must be in the envelopes before the pages are READY. */
		if (x->layers)
			r = d->ops->sync(x, x->layers - 1);
		for (unsigned i = 0; i < x->n && r == 0; i++) {
			uint32_t mine = d->shards & hc_page_needed(d->pool, x->presence[i]);
			int c;
			if (!mine)
				continue; /* nothing of this page is this rank's to write */
			c = hc_page_commit(d->pool, x->pages[i], mine);
			if (c < 0 && c != -EALREADY)
				r = c; /* EALREADY: a rank sharing our group finished it first */
		}
	}
	if (r < 0)
		snprintf(x->err, sizeof(x->err), "%s", hc_last_error()); /* the worker's thread-local line */
	pthread_mutex_lock(&d->mu);
	x->result = r;
	x->finished = 1;
	if (x->store) {
		d->st.stores++;
		d->st.store_bytes += bytes;
	} else {
		d->st.loads++;
		d->st.load_bytes += bytes;
	}
	d->st.copies += copies;
	d->st.direct_layers += direct_layers;
	d->st.kernel_layers += kernel_layers;
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
	const struct hc__dev_ops *ops;
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
	if (spec->kind == HC_DEV_HOST) {
		ops = &hc__dev_host_ops;
	} else if (spec->kind == HC_DEV_CUDA) {
#ifdef HAVE_CUDA
		ops = &hc__dev_cuda_ops;
#else
		return hc__err(ENOTSUP, "device open: this build has no CUDA: configure --with-cuda, or use HC_DEV_HOST");
#endif
	} else {
		return hc__err(EINVAL, "device open: kind %d is neither HC_DEV_HOST nor HC_DEV_CUDA", (int)spec->kind);
	}
	if ((unsigned)spec->path > HC_PATH_KERNEL)
		return hc__err(EINVAL, "device open: path %d is none of HC_PATH_AUTO, _DIRECT, _KERNEL", (int)spec->path);
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
	d->ops = ops;
	d->path = spec->path;
	d->device = spec->device;
	if ((r = ops->open(d, spec)) < 0)
		goto fail;
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	r = pthread_create(&d->worker, NULL, worker_main, d);
	if (r) {
		pthread_cond_destroy(&d->cv);
		pthread_mutex_destroy(&d->mu);
		ops->close(d);
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
	d->ops->close(d);
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
	if (rq->after && d->ops == &hc__dev_host_ops)
		return hc__err(EINVAL, "%s: 'after' is a CUDA event, and this is an HC_DEV_HOST device", what);
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
	/* Every slot in bounds now: the copies (and a kernel) cannot fail later. */
	{
		int r = hc__dev_check_slots(&p->g, store ? &d->pl_store : &d->pl, rq->n, x->presence, rq->slots,
					    rq->state_slots);
		if (r < 0) {
			xfer_free_arrays(x);
			return hc__err(-r, "%s: %s", what, hc_last_error());
		}
	}
	if (rq->slots)
		memcpy(x->slots, rq->slots, (size_t)rq->n * T * sizeof(*x->slots));
	if (rq->state_slots)
		memcpy(x->state_slots, rq->state_slots, rq->n * sizeof(*x->state_slots));
	x->dev = d;
	x->store = store;
	x->flags = rq->flags;
	x->n = rq->n;
	x->after = rq->after;
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
	r = x->issued > layer ? 1 : x->finished ? x->result : 0;
	pthread_mutex_unlock(&x->dev->mu);
	if (r == 1)
		return x->dev->ops->query(x, layer);
	return r < 0 ? hc__err(-r, "%s", x->err) : r;
}

/* Until layer is issued or the transfer failed before it: 1 issued, or the failure. */
static int wait_issued(hc_xfer *x, unsigned layer)
{
	int r;

	pthread_mutex_lock(&x->dev->mu);
	while (x->issued <= layer && !x->finished)
		pthread_cond_wait(&x->dev->cv, &x->dev->mu);
	r = x->issued > layer ? 1 : x->result;
	pthread_mutex_unlock(&x->dev->mu);
	return r < 0 ? hc__err(-r, "%s", x->err) : r;
}

int hc_xfer_wait_layer(hc_xfer *x, unsigned layer)
{
	int r;

	if (!x || layer >= x->layers)
		return hc__err(EINVAL, "transfer: %s", x ? "layer out of range" : "the transfer is NULL");
	r = wait_issued(x, layer);
	return r == 1 ? x->dev->ops->sync(x, layer) : r;
}

void *hc_xfer_layer_event(hc_xfer *x, unsigned layer)
{
	if (!x || layer >= x->layers) {
		hc__err(EINVAL, "transfer: %s", x ? "layer out of range" : "the transfer is NULL");
		return NULL;
	}
	if (x->dev->ops == &hc__dev_host_ops)
		return x->dev->ops->event(x, layer);
	return wait_issued(x, layer) == 1 ? x->dev->ops->event(x, layer) : NULL;
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
	if (r < 0)
		return hc__err(-r, "%s", x->err);
	/* Issued in order on one stream: the last layer's arrival is everyone's. */
	return x->layers ? x->dev->ops->sync(x, x->layers - 1) : 0;
}

int hc_xfer_free(hc_xfer *x)
{
	char msg[256] = "";
	int r;

	if (!x)
		return 0;
	r = hc_xfer_wait(x);
	if (r < 0) {
		snprintf(msg, sizeof(msg), "%s", hc_last_error());
		/* Whatever was issued must be done before its buffers go. */
		unsigned issued;
		pthread_mutex_lock(&x->dev->mu);
		issued = x->issued;
		pthread_mutex_unlock(&x->dev->mu);
		if (issued)
			x->dev->ops->sync(x, issued - 1);
	}
	x->dev->ops->end(x);
	xfer_free_arrays(x);
	return r < 0 ? hc__err(-r, "%s", msg) : r;
}

int hc_dev_stats(hc_dev *d, struct hc_dev_stats *out)
{
	if (!d || !out)
		return hc__err(EINVAL, "device stats: %s is NULL", d ? "out" : "the device");
	pthread_mutex_lock(&d->mu);
	*out = d->st;
	pthread_mutex_unlock(&d->mu);
	return 0;
}
