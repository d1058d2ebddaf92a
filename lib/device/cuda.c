/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda.c - HC_DEV_CUDA: copies between the envelopes and a CUDA
 * device, on a stream of the device's own, with one event per layer.
 * Built only with CUDA (configure --with-cuda); the kernel is in
 * kernel.cu, and every runtime call goes through cuda.h's table.
 *
 * Registration: the first CUDA device opened on a pool handle registers
 * the envelopes (cudaHostRegister, portable and mapped) in chunks from
 * several threads (reg.c); hc_pool_detach undoes it through the pool's
 * dev_unreg hook.  reg_mu guards every pool's dev_reg, and is held while
 * a registration is made.  A direct copy never crosses a chunk boundary:
 * CUDA documents copies within one registration, not across two.
 *
 * Threads: no runtime call is made on a caller's thread, so a caller's
 * current device, context and pending error are never touched, and no
 * context is made on a device it did not choose.  Open, close and the
 * unregistering run on a short-lived thread of ours; transfers run on the
 * device's issuer (begin, copies, launches, events) and completer
 * (cudaEventSynchronize) threads, which set the device first.
 * cuda_dev's event stack is under ev_mu (the issuer pops, owners push);
 * the staging buffers and everything else are the issuer's.
 *
 * A kernel transfer's indices go up through a pinned staging buffer (two,
 * used in turn: one is refilled only once the copy out of it is done) into
 * device memory from the stream-ordered allocator, freed on the stream
 * after the transfer's last launch: nothing waits for the device.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../shmpool/pool.h"
#include "cuda.h"

#define REG_CHUNK_DEFAULT   (1ull << 30)
#define REG_CHUNK_ALIGN     (2ull << 20)
#define REG_THREADS_DEFAULT 8
#define AUTO_DIRECT_RUN     (64u << 10)
#define STAGE_MIN           (64u << 10)

struct cuda_reg {
	struct hc__reg_job job;
	struct hc_dev_stats st; /* the reg_ figures */
	int device;
};

struct stage {
	void *h; /* pinned */
	size_t cap;
	cudaEvent_t used; /* recorded after the copy out of h */
	int armed;
};

struct cuda_dev {
	cudaStream_t stream;
	int host_ptr;   /* the device uses registered host memory at its host address */
	int pools;      /* the stream-ordered allocator works on it (the kernel path needs it) */
	uint64_t chunk; /* the registration's chunk */
	struct stage stg[2];
	unsigned next_stg;
	pthread_mutex_t ev_mu; /* guards ev, nev */
	cudaEvent_t *ev;       /* finished transfers' events, for the next ones */
	unsigned nev, cap_ev;
};

struct cuda_xfer {
	cudaEvent_t *ev; /* [layers] */
	unsigned nev;
	void *scratch; /* device copies of the indices (kernel path) */
	const uint32_t *pages, *presence;
	const uint64_t *slots, *state_slots;
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;

struct hc__cuda_rt hc__cuda = {
	.GetDeviceCount = cudaGetDeviceCount,
	.SetDevice = cudaSetDevice,
	.DeviceGetAttribute = cudaDeviceGetAttribute,
	.PointerGetAttributes = cudaPointerGetAttributes,
	.HostRegister = cudaHostRegister,
	.HostUnregister = cudaHostUnregister,
	.StreamCreateWithFlags = cudaStreamCreateWithFlags,
	.StreamDestroy = cudaStreamDestroy,
	.StreamSynchronize = cudaStreamSynchronize,
	.StreamWaitEvent = cudaStreamWaitEvent,
	.MallocAsync = cudaMallocAsync,
	.FreeAsync = cudaFreeAsync,
	.MallocHost = cudaMallocHost,
	.FreeHost = cudaFreeHost,
	.MemcpyAsync = cudaMemcpyAsync,
	.EventCreateWithFlags = cudaEventCreateWithFlags,
	.EventRecord = cudaEventRecord,
	.EventSynchronize = cudaEventSynchronize,
	.EventDestroy = cudaEventDestroy,
	.GetLastError = cudaGetLastError,
	.gather = hc__gather_launch,
};

/* Run fn(arg) on a thread of ours and wait: its CUDA calls (the current
 * device above all) stay there.  Its error line comes back with it. */
struct own {
	int (*fn)(void *arg);
	void *arg;
	int r;
	char msg[512];
};

static void *own_main(void *p)
{
	struct own *o = p;

	o->r = o->fn(o->arg);
	if (o->r < 0)
		snprintf(o->msg, sizeof(o->msg), "%s", hc_last_error());
	return NULL;
}

static int on_own_thread(int (*fn)(void *arg), void *arg)
{
	struct own o = { .fn = fn, .arg = arg };
	pthread_t t;
	int e = pthread_create(&t, NULL, own_main, &o);

	if (e)
		return hc__err(e, "device: cannot start a thread for CUDA's calls");
	pthread_join(t, NULL);
	return o.r < 0 ? hc__err(-o.r, "%s", o.msg) : o.r;
}

/* A CUDA error as -errno and one line: what we did, then CUDA's words. */
__attribute__((format(printf, 2, 3))) static int cu_err(cudaError_t e, const char *fmt, ...)
{
	char what[256];
	va_list ap;
	int err;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	switch (e) {
	case cudaErrorMemoryAllocation:
		err = ENOMEM;
		break;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
		err = ENODEV;
		break;
	case cudaErrorInvalidValue:
		err = EINVAL;
		break;
	case cudaErrorHostMemoryAlreadyRegistered:
		err = EBUSY;
		break;
	default:
		err = EIO;
	}
	return hc__err(err, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

static int reg_chunk(void *arg, void *p, uint64_t n)
{
	struct cuda_reg *cr = arg;
	cudaError_t e = hc__cuda.SetDevice(cr->device);

	if (e == cudaSuccess)
		e = hc__cuda.HostRegister(p, n, cudaHostRegisterPortable | cudaHostRegisterMapped);
	if (e == cudaErrorHostMemoryAlreadyRegistered)
		return cu_err(
			e,
			"device open: the pool's envelopes at +%llu are already registered in this process (by the engine?): leave their registration to hicache",
			(unsigned long long)((uint8_t *)p - cr->job.base));
	if (e != cudaSuccess)
		return cu_err(e, "device open: cudaHostRegister of %llu bytes of the pool at +%llu",
			      (unsigned long long)n, (unsigned long long)((uint8_t *)p - cr->job.base));
	return 0;
}

static void unreg_chunk(void *arg, void *p, uint64_t n)
{
	struct cuda_reg *cr = arg;

	(void)n;
	hc__cuda.SetDevice(cr->device); /* our thread, as at registration */
	hc__cuda.HostUnregister(p);
	hc__cuda.GetLastError();
}

static int unreg_on(void *arg)
{
	hc__unreg_parallel(&((struct cuda_reg *)arg)->job);
	return 0;
}

static void pool_unreg(struct hc_pool *p)
{
	struct cuda_reg *cr;

	pthread_mutex_lock(&reg_mu);
	cr = p->dev_reg;
	p->dev_reg = NULL;
	p->dev_unreg = NULL;
	pthread_mutex_unlock(&reg_mu);
	if (cr) {
		if (on_own_thread(unreg_on, cr) < 0)
			hc__log(HC_LOG_WARN, "device: the pool stays registered with CUDA until exit: %s",
				hc_last_error());
		free(cr);
	}
}

/* The pool's registration: this process's, made once. */
static int pool_reg(hc_dev *d, const struct hc_dev_spec *s, struct cuda_reg **out)
{
	hc_pool *p = d->pool;
	struct cuda_reg *cr;
	uint64_t chunk = s->reg_chunk ? s->reg_chunk : REG_CHUNK_DEFAULT;
	int r;

	if (chunk % REG_CHUNK_ALIGN)
		return hc__err(EINVAL, "device open: reg_chunk %llu is not a multiple of 2 MiB",
			       (unsigned long long)chunk);
	pthread_mutex_lock(&reg_mu);
	if (p->dev_reg) {
		*out = p->dev_reg;
		pthread_mutex_unlock(&reg_mu);
		return 0;
	}
	cr = calloc(1, sizeof(*cr));
	if (!cr) {
		pthread_mutex_unlock(&reg_mu);
		return hc__err(ENOMEM, "device open: no memory");
	}
	cr->device = s->device;
	cr->job = (struct hc__reg_job){ .base = p->env,
					.len = (uint64_t)p->g.npages * p->g.envelope_bytes,
					.chunk = chunk,
					.threads = s->reg_threads ? s->reg_threads : REG_THREADS_DEFAULT,
					.reg = reg_chunk,
					.unreg = unreg_chunk,
					.arg = cr };
	r = hc__reg_parallel(&cr->job, &cr->st);
	if (r < 0) {
		pthread_mutex_unlock(&reg_mu);
		free(cr);
		return r;
	}
	p->dev_reg = cr;
	p->dev_unreg = pool_unreg;
	pthread_mutex_unlock(&reg_mu);
	*out = cr;
	return 0;
}

/* Every described base, and the last byte of its pool, is memory of our device. */
static int check_addresses(hc_dev *d)
{
	const struct hc__geom *g = &d->pool->g;

	for (unsigned c = 0; c < d->pl.ncomp; c++) {
		const struct hc__dev_comp *dc = &d->pl.c[c].d;
		uint64_t span = hc__dev_span(dc);
		for (unsigned l = 0; l < g->comps[dc->comp].layers; l++)
			for (unsigned kv = 0; kv < d->pl.c[c].nkv; kv++)
				for (int end = 0; end < 2; end++) {
					uint64_t a = (kv ? dc->v : dc->k)[l] + (end ? span - 1 : 0);
					struct cudaPointerAttributes at;
					cudaError_t e = hc__cuda.PointerGetAttributes(&at, (void *)(uintptr_t)a);
					if (e != cudaSuccess ||
					    (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged) ||
					    at.device != d->device) {
						hc__cuda.GetLastError(); /* ours to clear: this is our thread */
						return hc__err(
							EINVAL,
							"device open: component '%s' layer %u: the %s of the %s pool (0x%llx) is not memory of CUDA device %d",
							g->comps[dc->comp].name, l, end ? "last byte" : "base",
							d->pl.c[c].kv ? (kv ? "V" : "K") : "state",
							(unsigned long long)a, d->device);
					}
				}
	}
	return 0;
}

struct open_args {
	hc_dev *d;
	const struct hc_dev_spec *s;
};

static int open_on(void *arg)
{
	struct open_args *a = arg;
	hc_dev *d = a->d;
	const struct hc_dev_spec *s = a->s;
	struct cuda_dev *cd;
	struct cuda_reg *cr = NULL;
	cudaError_t e;
	int n = 0, r;

	e = hc__cuda.GetDeviceCount(&n);
	if (e != cudaSuccess || n == 0)
		return hc__err(ENODEV, "device open: no CUDA device here (%s): use HC_DEV_HOST",
			       e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
	if (s->device < 0 || s->device >= n)
		return hc__err(EINVAL, "device open: CUDA device %d does not exist (there are %d)", s->device, n);
	cd = calloc(1, sizeof(*cd));
	if (!cd)
		return hc__err(ENOMEM, "device open: no memory");
	if ((e = hc__cuda.SetDevice(s->device)) != cudaSuccess ||
	    (e = hc__cuda.DeviceGetAttribute(&cd->host_ptr, cudaDevAttrCanUseHostPointerForRegisteredMem, s->device)) !=
		    cudaSuccess ||
	    (e = hc__cuda.DeviceGetAttribute(&cd->pools, cudaDevAttrMemoryPoolsSupported, s->device)) != cudaSuccess) {
		r = cu_err(e, "device open: CUDA device %d", s->device);
		goto fail;
	}
	if (s->path == HC_PATH_KERNEL && (!cd->host_ptr || !cd->pools)) {
		r = hc__err(ENOTSUP, "device open: CUDA device %d %s, which the kernel path needs: use HC_PATH_DIRECT",
			    s->device,
			    !cd->host_ptr ? "cannot use registered host memory at its host address"
					  : "has no stream-ordered allocator");
		goto fail;
	}
	if ((r = check_addresses(d)) < 0)
		goto fail;
	if ((r = pool_reg(d, s, &cr)) < 0)
		goto fail;
	cd->chunk = cr->job.chunk;
	d->st.reg_ns = cr->st.reg_ns;
	d->st.reg_bytes = cr->st.reg_bytes;
	d->st.reg_chunks = cr->st.reg_chunks;
	d->st.reg_threads = cr->st.reg_threads;
	if ((e = hc__cuda.StreamCreateWithFlags(&cd->stream, cudaStreamNonBlocking)) != cudaSuccess) {
		r = cu_err(e, "device open: cudaStreamCreate on device %d", s->device);
		goto fail;
	}
	pthread_mutex_init(&cd->ev_mu, NULL);
	d->kd = cd;
	return 0;
fail:
	free(cd);
	return r;
}

static int cuda_open(hc_dev *d, const struct hc_dev_spec *s)
{
	struct open_args a = { d, s };

	return on_own_thread(open_on, &a);
}

static int close_on(void *arg)
{
	hc_dev *d = arg;
	struct cuda_dev *cd = d->kd;

	hc__cuda.SetDevice(d->device);
	hc__cuda.StreamSynchronize(cd->stream);
	for (unsigned i = 0; i < cd->nev; i++)
		hc__cuda.EventDestroy(cd->ev[i]);
	for (int i = 0; i < 2; i++) {
		if (cd->stg[i].h)
			hc__cuda.FreeHost(cd->stg[i].h);
		if (cd->stg[i].used)
			hc__cuda.EventDestroy(cd->stg[i].used);
	}
	hc__cuda.StreamDestroy(cd->stream);
	return 0;
}

static void cuda_close(hc_dev *d)
{
	struct cuda_dev *cd = d->kd;

	on_own_thread(close_on, d);
	pthread_mutex_destroy(&cd->ev_mu);
	free(cd->ev);
	free(cd);
	d->kd = NULL;
}

static void cuda_thread_start(hc_dev *d)
{
	hc__cuda.SetDevice(d->device); /* our thread; begin reports a failure */
}

static size_t align8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* A kernel transfer's indices, packed into pinned staging, up to the device. */
static int upload(hc_dev *d, hc_xfer *x, struct cuda_xfer *cx)
{
	struct cuda_dev *cd = d->kd;
	struct stage *sg = &cd->stg[cd->next_stg++ & 1];
	size_t o_pres = align8((size_t)x->n * 4), o_slots = o_pres + align8((size_t)x->n * 4);
	size_t o_ss = o_slots + (x->slots ? (size_t)x->n * d->pool->g.page_tokens * 8 : 0);
	size_t bytes = o_ss + (x->state_slots ? (size_t)x->n * 8 : 0);
	uint8_t *h, *dv;
	cudaError_t e;

	/* The copy out of this buffer two transfers ago must be done. */
	if (sg->armed && (e = hc__cuda.EventSynchronize(sg->used)) != cudaSuccess)
		return cu_err(e, "transfer: waiting for a staging buffer");
	sg->armed = 0;
	if (!sg->used && (e = hc__cuda.EventCreateWithFlags(&sg->used, cudaEventDisableTiming)) != cudaSuccess)
		return cu_err(e, "transfer: cudaEventCreate");
	if (bytes > sg->cap) {
		size_t cap = bytes > 2 * sg->cap ? bytes : 2 * sg->cap;
		if (cap < STAGE_MIN)
			cap = STAGE_MIN;
		if (sg->h)
			hc__cuda.FreeHost(sg->h);
		sg->h = NULL;
		sg->cap = 0;
		if ((e = hc__cuda.MallocHost(&sg->h, cap)) != cudaSuccess)
			return cu_err(e, "transfer: cudaMallocHost of %zu bytes for indices", cap);
		sg->cap = cap;
	}
	h = sg->h;
	memcpy(h, x->ids, (size_t)x->n * 4);
	memcpy(h + o_pres, x->presence, (size_t)x->n * 4);
	if (x->slots)
		memcpy(h + o_slots, x->slots, o_ss - o_slots);
	if (x->state_slots)
		memcpy(h + o_ss, x->state_slots, bytes - o_ss);
	if ((e = hc__cuda.MallocAsync(&cx->scratch, bytes, cd->stream)) != cudaSuccess) {
		cx->scratch = NULL;
		return cu_err(e, "transfer: cudaMallocAsync of %zu bytes for indices", bytes);
	}
	if ((e = hc__cuda.MemcpyAsync(cx->scratch, h, bytes, cudaMemcpyHostToDevice, cd->stream)) != cudaSuccess)
		return cu_err(e, "transfer: uploading %zu bytes of indices", bytes);
	if ((e = hc__cuda.EventRecord(sg->used, cd->stream)) != cudaSuccess)
		return cu_err(e, "transfer: recording a staging buffer's event");
	sg->armed = 1;
	dv = cx->scratch;
	cx->pages = (const uint32_t *)dv;
	cx->presence = (const uint32_t *)(dv + o_pres);
	cx->slots = x->slots ? (const uint64_t *)(dv + o_slots) : NULL;
	cx->state_slots = x->state_slots ? (const uint64_t *)(dv + o_ss) : NULL;
	return 0;
}

static int cuda_begin(hc_dev *d, hc_xfer *x, enum hc_dev_path path)
{
	struct cuda_dev *cd = d->kd;
	struct cuda_xfer *cx;
	cudaError_t e;

	if ((e = hc__cuda.SetDevice(d->device)) != cudaSuccess)
		return cu_err(e, "transfer: cudaSetDevice(%d)", d->device);
	cx = calloc(1, sizeof(*cx));
	if (!cx)
		return hc__err(ENOMEM, "transfer: no memory");
	x->kx = cx;
	cx->ev = calloc(x->layers ? x->layers : 1, sizeof(*cx->ev));
	if (!cx->ev)
		return hc__err(ENOMEM, "transfer: no memory for %u events", x->layers);
	/* Events of finished transfers first: creating one costs a call. */
	pthread_mutex_lock(&cd->ev_mu);
	while (cx->nev < x->layers && cd->nev)
		cx->ev[cx->nev++] = cd->ev[--cd->nev];
	pthread_mutex_unlock(&cd->ev_mu);
	for (; cx->nev < x->layers; cx->nev++)
		if ((e = hc__cuda.EventCreateWithFlags(&cx->ev[cx->nev], cudaEventDisableTiming)) != cudaSuccess)
			return cu_err(e, "transfer: cudaEventCreate");
	if (x->after && (e = hc__cuda.StreamWaitEvent(cd->stream, (cudaEvent_t)x->after, 0)) != cudaSuccess)
		return cu_err(e, "transfer: waiting for the 'after' event");
	return path == HC_PATH_KERNEL ? upload(d, x, cx) : 0;
}

static int cuda_runs(hc_dev *d, hc_xfer *x, const struct hc__run *runs, unsigned n)
{
	struct cuda_dev *cd = d->kd;
	enum cudaMemcpyKind kind = x->store ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
	int copies = 0;

	for (unsigned i = 0; i < n; i++) {
		uint64_t env = runs[i].env, dev = runs[i].dev, left = runs[i].len;
		while (left) {
			/* Not across a registration chunk. */
			uint64_t room = cd->chunk - env % cd->chunk, len = left < room ? left : room;
			void *h = d->pool->env + env, *dv = (void *)(uintptr_t)dev;
			cudaError_t e = x->store ? hc__cuda.MemcpyAsync(h, dv, len, kind, cd->stream)
						 : hc__cuda.MemcpyAsync(dv, h, len, kind, cd->stream);
			if (e != cudaSuccess)
				return cu_err(e, "transfer: cudaMemcpyAsync of %llu bytes at envelope offset %llu",
					      (unsigned long long)len, (unsigned long long)env);
			env += len;
			dev += len;
			left -= len;
			copies++;
		}
	}
	return copies;
}

static int cuda_gather(hc_dev *d, hc_xfer *x, const struct hc__dl *L)
{
	struct cuda_dev *cd = d->kd;
	struct cuda_xfer *cx = x->kx;
	cudaError_t e = (cudaError_t)hc__cuda.gather(L, d->pool->env, cx->pages, cx->presence, cx->slots,
						     cx->state_slots, x->store, cd->stream);

	return e == cudaSuccess ? 0 : cu_err(e, "transfer: the gather kernel (%u items)", L->items);
}

static int cuda_mark(hc_dev *d, hc_xfer *x, unsigned layer)
{
	struct cuda_dev *cd = d->kd;
	struct cuda_xfer *cx = x->kx;
	cudaError_t e = hc__cuda.EventRecord(cx->ev[layer], cd->stream);

	return e == cudaSuccess ? 0 : cu_err(e, "transfer: recording layer %u's event", layer);
}

static void cuda_issued(hc_dev *d, hc_xfer *x, int result)
{
	struct cuda_dev *cd = d->kd;
	struct cuda_xfer *cx = x->kx;

	/* Freed on the stream, after the transfer's last launch. */
	if (cx && cx->scratch && hc__cuda.FreeAsync(cx->scratch, cd->stream) != cudaSuccess)
		hc__cuda.GetLastError();
	if (cx)
		cx->scratch = NULL;
	if (result < 0 && hc__cuda.StreamSynchronize(cd->stream) != cudaSuccess)
		hc__cuda.GetLastError(); /* the transfer's own error is the one told */
}

static int cuda_sync(hc_dev *d, hc_xfer *x, unsigned layer)
{
	struct cuda_xfer *cx = x->kx;
	cudaError_t e = hc__cuda.EventSynchronize(cx->ev[layer]);

	(void)d;
	return e == cudaSuccess ? 0 : cu_err(e, "transfer: waiting for layer %u", layer);
}

static void *cuda_event(hc_xfer *x, unsigned layer)
{
	struct cuda_xfer *cx = x->kx;

	return (void *)cx->ev[layer];
}

/* The events are done (the transfer finished): kept for the next transfers. */
static void cuda_end(hc_dev *d, hc_xfer *x)
{
	struct cuda_dev *cd = d->kd;
	struct cuda_xfer *cx = x->kx;

	if (!cx)
		return;
	pthread_mutex_lock(&cd->ev_mu);
	if (cd->nev + cx->nev > cd->cap_ev) {
		unsigned cap = (cd->nev + cx->nev) * 2;
		cudaEvent_t *ev = realloc(cd->ev, cap * sizeof(*ev));
		if (ev) {
			cd->ev = ev;
			cd->cap_ev = cap;
		}
	}
	for (unsigned l = 0; l < cx->nev && cd->nev < cd->cap_ev; l++)
		cd->ev[cd->nev++] = cx->ev[l];
	pthread_mutex_unlock(&cd->ev_mu);
	/* Without room (no memory), an event is left to leak rather than
	 * destroyed on the owner's thread. */
	free(cx->ev);
	free(cx);
	x->kx = NULL;
}

/* A copy costs a few microseconds to issue: long runs go direct, short ones
 * (scattered slots, another TP's head groups) to the kernel. */
static enum hc_dev_path cuda_choose(hc_dev *d, const struct hc__run *runs, unsigned n)
{
	struct cuda_dev *cd = d->kd;
	uint64_t total = 0;

	if (n == 0 || !cd->host_ptr || !cd->pools)
		return HC_PATH_DIRECT;
	for (unsigned i = 0; i < n; i++)
		total += runs[i].len;
	return total / n >= AUTO_DIRECT_RUN ? HC_PATH_DIRECT : HC_PATH_KERNEL;
}

const struct hc__dev_ops hc__dev_cuda_ops = {
	.name = "cuda",
	.open = cuda_open,
	.close = cuda_close,
	.thread_start = cuda_thread_start,
	.begin = cuda_begin,
	.runs = cuda_runs,
	.gather = cuda_gather,
	.mark = cuda_mark,
	.issued = cuda_issued,
	.sync = cuda_sync,
	.event = cuda_event,
	.end = cuda_end,
	.choose = cuda_choose,
};
