/* SPDX-License-Identifier: Apache-2.0 */
/*
 * device.c - layer-wise transfers between envelopes and a rank's device KV
 * (include/hicache/device.h), over the runs and items of map.c, moved
 * by a kind (internal.h).
 *
 * Notes on synchronization (process-private):
 * - Each hc_dev has two threads of its own.  The issuer takes transfers
 *   in the order they were made and issues them layer by layer (for CUDA:
 *   copies or a launch, then the layer's event).  The completer follows
 *   it, transfer by transfer: it waits for each issued layer to arrive
 *   (the kind's sync), marks it, and once the issuer is done with the
 *   transfer, commits a store and finishes it.  So the issuer never waits
 *   for the device, and the caller's threads never call the kind at all:
 *   marks, waits and frees are a mutex and a condition variable.
 * - dev->mu guards both queues, stop, the counters, and each transfer's
 *   issued, issue_done, issue_result, arrived, finished and result; every
 *   change is broadcast on dev->cv.
 * - A transfer's arrays are its own copies, written before it is queued;
 *   err is written by the issuer before issue_done, then by the completer
 *   only if still empty, before finished; the owner reads it after.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "../../shmpool/pool.h"
#include "internal.h"

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

static void publish_issued(hc_dev *d, hc_xfer *x, unsigned layers)
{
	pthread_mutex_lock(&d->mu);
	x->issued = layers;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

/* The issuer's part of a transfer. */
static void issue_xfer(hc_dev *d, hc_xfer *x)
{
	const struct hc__dev_plan *pl = x->store ? &d->pl_store : &d->pl;
	struct hc__run *runs = NULL;
	unsigned cap = 0;
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
				x->bytes += runs[i].len;
			r = d->ops->runs(d, x, runs, (unsigned)nr);
			if (r > 0)
				x->copies += (unsigned)r;
			r = r < 0 ? r : 0;
			x->direct_layers++;
		} else {
			struct hc__dl L;
			if ((r = hc__dl_init(&d->pool->g, pl, l, x->n, &L)) < 0)
				break;
			x->bytes += hc__dl_bytes(&L, x->presence);
			r = d->ops->gather(d, x, &L);
			x->kernel_layers++;
		}
		if (r == 0)
			r = d->ops->mark(d, x, l);
		if (r == 0)
			publish_issued(d, x, l + 1);
	}
	free(runs);
	/* The kind lets go of what the transfer issued: on a failure it waits
	 * until that is done, so no copy lands after the failure is told. */
	d->ops->issued(d, x, r);
	if (r < 0)
		snprintf(x->err, sizeof(x->err), "%s", hc_last_error()); /* this thread's line */
	pthread_mutex_lock(&d->mu);
	x->issue_result = r;
	x->issue_done = 1;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

/* The completer's part: marks as layers arrive, then commits and finishes. */
static void complete_xfer(hc_dev *d, hc_xfer *x)
{
	int r = 0;

	for (unsigned l = 0; l < x->layers; l++) {
		int issued;
		pthread_mutex_lock(&d->mu);
		while (x->issued <= l && !x->issue_done)
			pthread_cond_wait(&d->cv, &d->mu);
		issued = x->issued > l;
		pthread_mutex_unlock(&d->mu);
		if (!issued)
			break; /* the issuer stopped short: its result tells why */
		if ((r = d->ops->sync(d, x, l)) < 0)
			break;
		pthread_mutex_lock(&d->mu);
		x->arrived = l + 1;
		pthread_cond_broadcast(&d->cv);
		pthread_mutex_unlock(&d->mu);
	}
	pthread_mutex_lock(&d->mu);
	while (!x->issue_done)
		pthread_cond_wait(&d->cv, &d->mu);
	pthread_mutex_unlock(&d->mu);
	if (x->issue_result < 0) {
		r = x->issue_result; /* x->err holds the issuer's line */
	} else if (r < 0) {
		snprintf(x->err, sizeof(x->err), "%s", hc_last_error());
	} else if (x->store && (x->flags & HC_XFER_COMMIT)) {
		/* Every layer is in the envelopes: the pages may become READY.
		 * Each page on its own: one that was given up meanwhile does not
		 * keep the others from being finished.  The first failure tells. */
		for (unsigned i = 0; i < x->n; i++) {
			uint32_t mine = d->shards & hc_page_needed(d->pool, x->presence[i]);
			int c;
			if (!mine)
				continue; /* nothing of this page is this rank's to write */
			c = hc_page_commit(d->pool, x->pages[i], mine);
			if (c < 0 && c != -EALREADY && r == 0) { /* EALREADY: a rank sharing our group finished it */
				r = c;
				snprintf(x->err, sizeof(x->err), "%s", hc_last_error());
			}
		}
	}
	pthread_mutex_lock(&d->mu);
	x->result = r;
	x->finished = 1;
	if (x->store) {
		d->st.stores++;
		d->st.store_bytes += x->bytes;
	} else {
		d->st.loads++;
		d->st.load_bytes += x->bytes;
	}
	d->st.copies += x->copies;
	d->st.direct_layers += x->direct_layers;
	d->st.kernel_layers += x->kernel_layers;
	if (!x->sync)
		d->finished++; /* the completer finishes them in the order they were made */
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

static void *issuer_main(void *arg)
{
	hc_dev *d = arg;

	d->ops->thread_start(d);
	pthread_mutex_lock(&d->mu);
	for (;;) {
		hc_xfer *x;
		/* An HC_XFER_SYNC transfer runs on its caller's thread: the ones
		 * made after it wait until it is done. */
		while ((!d->head || d->inline_running) && !d->stop)
			pthread_cond_wait(&d->cv, &d->mu);
		if (!d->head)
			break; /* stopping, and nothing left */
		x = d->head;
		d->head = x->next;
		if (!d->head)
			d->tail = NULL;
		/* The completer follows this transfer from its first layer on. */
		if (d->ctail)
			d->ctail->cnext = x;
		else
			d->chead = x;
		d->ctail = x;
		pthread_cond_broadcast(&d->cv);
		pthread_mutex_unlock(&d->mu);
		issue_xfer(d, x);
		pthread_mutex_lock(&d->mu);
	}
	d->issuer_done = 1;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

static void *completer_main(void *arg)
{
	hc_dev *d = arg;

	d->ops->thread_start(d);
	pthread_mutex_lock(&d->mu);
	for (;;) {
		hc_xfer *x;
		while (!d->chead && !d->issuer_done)
			pthread_cond_wait(&d->cv, &d->mu);
		if (!d->chead)
			break; /* the issuer has stopped, and everything is complete */
		x = d->chead;
		d->chead = x->cnext;
		if (!d->chead)
			d->ctail = NULL;
		pthread_mutex_unlock(&d->mu);
		complete_xfer(d, x);
		pthread_mutex_lock(&d->mu);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

/* Stop the threads: each finishes what it has first. */
static void stop_threads(hc_dev *d, int issuer, int completer)
{
	pthread_mutex_lock(&d->mu);
	d->stop = 1;
	if (!issuer)
		d->issuer_done = 1;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	if (issuer)
		pthread_join(d->issuer, NULL);
	if (completer)
		pthread_join(d->completer, NULL);
}

int hc_dev_open(hc_pool *pool, const struct hc_dev_spec *given, hc_dev **out)
{
	struct hc_dev_comp comps[HC_MAX_COMPONENTS];
	struct hc_dev_spec sb, *spec = &sb;
	struct hc__dev_comp dc[HC_MAX_COMPONENTS];
	struct hc__dev_desc desc;
	const struct hc__dev_ops *ops;
	size_t naddr = 0;
	hc_dev *d;
	int r;

	if (!out)
		return hc__err(EINVAL, "device open: out is NULL");
	*out = NULL;
	if (!pool || !given)
		return hc__err(EINVAL, "device open: %s is NULL", pool ? "spec" : "pool");
	if ((r = HC__ABI_IN(spec, given, "hc_dev_open", hc_dev_spec)) < 0)
		return r;
	if ((r = hc__need_slot(pool, "device open")) < 0)
		return r;
	if (spec->kind == HC_DEV_HOST) {
		ops = &hc__dev_host_ops;
	} else if (spec->kind == HC_DEV_CUDA) {
#ifdef HAVE_CUDA
		ops = &hc__dev_cuda_ops;
#else
		return hc__err(ENOTSUP,
			       "device open: this build has no CUDA: configure --with-cuda, or use HC_DEV_HOST");
#endif
	} else {
		return hc__err(EINVAL, "device open: kind %d is neither HC_DEV_HOST nor HC_DEV_CUDA", (int)spec->kind);
	}
	if ((unsigned)spec->path > HC_PATH_KERNEL)
		return hc__err(EINVAL, "device open: path %d is none of HC_PATH_AUTO, _DIRECT, _KERNEL",
			       (int)spec->path);
	if (spec->ncomp > HC_MAX_COMPONENTS || (spec->ncomp && !spec->comps))
		return hc__err(EINVAL, "device open: %u components%s", spec->ncomp,
			       spec->comps ? "" : " and comps is NULL");
	if ((r = HC__ABI_IN_ARRAY(comps, spec->comps, spec->ncomp, "hc_dev_open", hc_dev_comp)) < 0)
		return r;
	spec->comps = comps;
	for (unsigned i = 0; i < spec->ncomp; i++) {
		const struct hc_dev_comp *sc = &spec->comps[i];
		dc[i] = (struct hc__dev_comp){
			sc->comp,         sc->k,          sc->v, sc->token_bytes, sc->token_stride, sc->slots,
			sc->block_stride, sc->block_slots
		};
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
		naddr += (size_t)pool->g.comps[dc[i].comp].layers * d->pl.c[i].nkv;
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
			d->pl.c[i].d.v = NULL;
			if (d->pl.c[i].nkv == 2) {
				memcpy(d->addrs + naddr, dc[i].v, L * sizeof(uint64_t));
				d->pl.c[i].d.v = d->addrs + naddr;
				naddr += L;
			}
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
	if ((r = pthread_create(&d->issuer, NULL, issuer_main, d)) != 0) {
		r = hc__err(r, "device open: cannot start its issuing thread");
		goto fail_sync;
	}
	if ((r = pthread_create(&d->completer, NULL, completer_main, d)) != 0) {
		stop_threads(d, 1, 0);
		r = hc__err(r, "device open: cannot start its completing thread");
		goto fail_sync;
	}
	*out = d;
	return 0;
fail_sync:
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
	ops->close(d);
fail:
	free(d->addrs);
	free(d);
	return r;
}

int hc_dev_close(hc_dev *d)
{
	if (!d)
		return 0;
	stop_threads(d, 1, 1); /* they finish the queued transfers first */
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

static int submit(hc_dev *d, const struct hc_xfer_req *given, int store, hc_xfer **out)
{
	const char *what = store ? "device store" : "device load";
	struct hc_xfer_req rb, *rq = &rb;
	int ret;
	hc_pool *p;
	uint32_t T;
	unsigned k = 0; /* the pages kept: a store skips those its engine completed */
	hc_xfer *x;

	if (!out)
		return hc__err(EINVAL, "%s: out is NULL", what);
	*out = NULL;
	if (!d || !given)
		return hc__err(EINVAL, "%s: %s is NULL", what, d ? "the request" : "the device");
	if ((ret = HC__ABI_IN(rq, given, store ? "hc_dev_store" : "hc_dev_load", hc_xfer_req)) < 0)
		return ret;
	p = d->pool;
	T = p->g.page_tokens;
	if (rq->n == 0 || !rq->pages || (d->has_kv && !rq->slots) || (d->has_state && !rq->state_slots))
		return hc__err(EINVAL, "%s: %s", what,
			       rq->n == 0   ? "no pages"
			       : !rq->pages ? "pages is NULL"
			       : !rq->state_slots && d->has_state
				       ? "state_slots is NULL and a state component is described"
				       : "slots is NULL and a K/V component is described");
	if (rq->flags & ~(HC_XFER_COMMIT | HC_XFER_SYNC) || (!store && (rq->flags & HC_XFER_COMMIT)))
		return hc__err(EINVAL, "%s: flags 0x%x are not known here", what, rq->flags);
	if ((rq->flags & HC_XFER_SYNC) && d->ops != &hc__dev_host_ops)
		return hc__err(EINVAL,
			       "%s: HC_XFER_SYNC copies on the calling thread, which only an HC_DEV_HOST device can",
			       what);
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
	 * process reserved, or a rank of its engine did (a reservation ticket:
	 * each rank writes its own shards).  Checked now, so a mistake fails
	 * the call. */
	for (unsigned i = 0; i < rq->n; i++) {
		hc_page_t h = rq->pages[i];
		uint32_t id = HC_PAGE_ID(h);
		int r = 0;
		if (id >= p->g.npages) {
			r = hc__err(EINVAL, "%s: page %u (item %u) is out of the pool's %u", what, id, i, p->g.npages);
		} else if (store && hc__engine_done(p, h,
						    !(d->shards &
						      hc_page_needed(p, atomic_load_explicit(&p->pages[id].presence,
											     memory_order_relaxed))))) {
			/* Completed by the engine: none of this rank's shards is
			 * needed (e.g. replicated only, rank 0's), or another rank
			 * that shares its head group wrote them. */
			continue;
		} else if (store) {
			r = hc__check_reserved_engine(p, h, what);
			/* Another rank's reservation: tell it our copy may land,
			 * before the copy starts (an abort then quarantines it). */
			if (r == 0 && hc__w_owner(atomic_load(&p->pages[id].word)) != (unsigned)p->slot &&
			    hc__share_reserved(p, h) < 0)
				r = hc__err(ESTALE, "%s: page %u (item %u) stopped being reserved as we checked it",
					    what, id, i);
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
		x->pages[k] = h;
		x->ids[k] = id;
		x->presence[k] = atomic_load_explicit(&p->pages[id].presence, memory_order_relaxed);
		if (rq->slots)
			memcpy(x->slots + (size_t)k * T, rq->slots + (size_t)i * T, T * sizeof(*x->slots));
		if (rq->state_slots)
			x->state_slots[k] = rq->state_slots[i];
		k++;
	}
	/* Every slot in bounds now: the copies (and a kernel) cannot fail later. */
	{
		int r = hc__dev_check_slots(&p->g, store ? &d->pl_store : &d->pl, k, x->presence, x->slots,
					    x->state_slots);
		if (r < 0) {
			xfer_free_arrays(x);
			return hc__err(-r, "%s: %s", what, hc_last_error());
		}
	}
	x->dev = d;
	x->store = store;
	x->flags = rq->flags;
	x->n = k;
	x->after = rq->after;
	x->layers = d->layers;
	x->sync = (rq->flags & HC_XFER_SYNC) != 0;
	pthread_mutex_lock(&d->mu);
	if (x->sync) {
		/* After every transfer made before it, on this thread: no handoff
		 * to the device's threads, whose wake-ups cost more than a small
		 * copy.  Syncs of several threads may run at once.  Transfers
		 * made meanwhile are not waited for, so a stream of them cannot
		 * hold this one back. */
		uint64_t before = d->made;
		while (d->finished < before)
			pthread_cond_wait(&d->cv, &d->mu);
		d->inline_running++;
		pthread_mutex_unlock(&d->mu);
		issue_xfer(d, x);
		complete_xfer(d, x);
		pthread_mutex_lock(&d->mu);
		d->inline_running--;
		pthread_cond_broadcast(&d->cv);
		pthread_mutex_unlock(&d->mu);
		*out = x;
		return 0;
	}
	d->made++;
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
	r = x->arrived > layer ? 1 : x->finished ? x->result : 0;
	pthread_mutex_unlock(&x->dev->mu);
	return r < 0 ? hc__err(-r, "%s", x->err) : r;
}

int hc_xfer_wait_layer(hc_xfer *x, unsigned layer)
{
	int r;

	if (!x || layer >= x->layers)
		return hc__err(EINVAL, "transfer: %s", x ? "layer out of range" : "the transfer is NULL");
	pthread_mutex_lock(&x->dev->mu);
	while (x->arrived <= layer && !x->finished)
		pthread_cond_wait(&x->dev->cv, &x->dev->mu);
	r = x->arrived > layer ? 0 : x->result;
	pthread_mutex_unlock(&x->dev->mu);
	return r < 0 ? hc__err(-r, "%s", x->err) : r;
}

void *hc_xfer_layer_event(hc_xfer *x, unsigned layer)
{
	int issued, r;

	if (!x || layer >= x->layers) {
		hc__err(EINVAL, "transfer: %s", x ? "layer out of range" : "the transfer is NULL");
		return NULL;
	}
	if (x->dev->ops == &hc__dev_host_ops)
		return x->dev->ops->event(x, layer);
	pthread_mutex_lock(&x->dev->mu);
	while (x->issued <= layer && !x->issue_done)
		pthread_cond_wait(&x->dev->cv, &x->dev->mu);
	issued = x->issued > layer;
	r = x->issue_result;
	pthread_mutex_unlock(&x->dev->mu);
	if (issued)
		return x->dev->ops->event(x, layer);
	hc__err(r < 0 ? -r : EIO, "transfer: layer %u was not issued: %s", layer, x->err);
	return NULL;
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
	return r < 0 ? hc__err(-r, "%s", x->err) : 0;
}

int hc_xfer_free(hc_xfer *x)
{
	int r;

	if (!x)
		return 0;
	r = hc_xfer_wait(x); /* finished: nothing of it is in flight */
	x->dev->ops->end(x->dev, x);
	xfer_free_arrays(x);
	return r; /* hc_last_error still holds the failure's line */
}

int hc_dev_stats(hc_dev *d, struct hc_dev_stats *out, size_t size)
{
	struct hc_dev_stats st;

	if (!d)
		return hc__err(EINVAL, "device stats: the device is NULL");
	pthread_mutex_lock(&d->mu);
	st = d->st;
	pthread_mutex_unlock(&d->mu);
	return HC__ABI_OUT(out, size, &st, "hc_dev_stats", hc_dev_stats);
}
