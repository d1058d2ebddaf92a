/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dev_cuda.c - HC_DEV_CUDA: copies between the envelopes and a CUDA
 * device, on a stream of the device's own, with one event per layer.
 * Built only with CUDA (configure --with-cuda); the kernel is in
 * devkernel.cu.
 *
 * Registration: the first CUDA device opened on a pool handle registers
 * the envelopes (cudaHostRegister, portable and mapped) in chunks from
 * several threads (devreg.c); hc_pool_detach undoes it through the pool's
 * dev_unreg hook.  reg_mu guards every pool's dev_reg.  A direct copy never
 * crosses a chunk boundary: CUDA documents copies within one registration,
 * not across two.
 *
 * Threads: the worker issues (begin, runs, gather, mark); any thread may
 * query or wait for an issued layer's event, which CUDA allows from any
 * thread.  The worker and the registration threads are ours and set the
 * device; open and close run on the caller's thread and give it back its
 * current device.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../shmpool/pool.h"
#include "dev_cuda.h"

#define REG_CHUNK_DEFAULT (1ull << 30)
#define REG_CHUNK_ALIGN (2ull << 20)
#define REG_THREADS_DEFAULT 8
#define AUTO_DIRECT_RUN (64u << 10)

struct cuda_reg {
	struct hc__reg_job job;
	struct hc_dev_stats st;   /* the reg_ figures */
	int device;
};

struct cuda_dev {
	cudaStream_t stream;
	int host_ptr;             /* the device uses registered host memory at its host address */
	uint64_t chunk;           /* the registration's chunk */
	void *scratch;            /* device copies of a kernel transfer's indices (worker only) */
	size_t scratch_cap;
};

struct cuda_xfer {
	cudaEvent_t *ev;          /* [layers] */
	unsigned nev;
	void *packed;             /* the indices as uploaded */
	const uint32_t *pages, *presence;
	const uint64_t *slots, *state_slots;
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;

struct hc__cuda_rt hc__cuda = {
	.GetDeviceCount = cudaGetDeviceCount,
	.GetDevice = cudaGetDevice,
	.SetDevice = cudaSetDevice,
	.DeviceGetAttribute = cudaDeviceGetAttribute,
	.PointerGetAttributes = cudaPointerGetAttributes,
	.HostRegister = cudaHostRegister,
	.HostUnregister = cudaHostUnregister,
	.StreamCreateWithFlags = cudaStreamCreateWithFlags,
	.StreamDestroy = cudaStreamDestroy,
	.StreamSynchronize = cudaStreamSynchronize,
	.StreamWaitEvent = cudaStreamWaitEvent,
	.Malloc = cudaMalloc,
	.Free = cudaFree,
	.MemcpyAsync = cudaMemcpyAsync,
	.EventCreateWithFlags = cudaEventCreateWithFlags,
	.EventRecord = cudaEventRecord,
	.EventQuery = cudaEventQuery,
	.EventSynchronize = cudaEventSynchronize,
	.EventDestroy = cudaEventDestroy,
	.GetLastError = cudaGetLastError,
	.gather = hc__gather_launch,
};

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
		return cu_err(e, "device open: the pool's envelopes at +%llu are already registered in this process (by the engine?): leave their registration to hicache",
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

static void pool_unreg(struct hc_pool *p)
{
	struct cuda_reg *cr;

	pthread_mutex_lock(&reg_mu);
	cr = p->dev_reg;
	p->dev_reg = NULL;
	p->dev_unreg = NULL;
	pthread_mutex_unlock(&reg_mu);
	if (cr) {
		int old = -1;
		if (hc__cuda.GetDevice(&old) != cudaSuccess)
			old = -1;
		hc__unreg_parallel(&cr->job); /* the caller's thread takes chunks too */
		if (old >= 0)
			hc__cuda.SetDevice(old);
		hc__cuda.GetLastError();
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
	cr->job = (struct hc__reg_job){ .base = p->env, .len = (uint64_t)p->g.npages * p->g.envelope_bytes,
					.chunk = chunk, .threads = s->reg_threads ? s->reg_threads : REG_THREADS_DEFAULT,
					.reg = reg_chunk, .unreg = unreg_chunk, .arg = cr };
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
		uint64_t span = (dc->slots - 1) * dc->token_stride + dc->token_bytes;
		for (unsigned l = 0; l < g->comps[dc->comp].layers; l++)
			for (unsigned kv = 0; kv < (d->pl.c[c].kv ? 2u : 1u); kv++)
				for (int end = 0; end < 2; end++) {
					uint64_t a = (kv ? dc->v : dc->k)[l] + (end ? span - 1 : 0);
					struct cudaPointerAttributes at;
					cudaError_t e = hc__cuda.PointerGetAttributes(&at, (void *)(uintptr_t)a);
					if (e != cudaSuccess || (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeManaged) ||
					    at.device != d->device) {
						hc__cuda.GetLastError(); /* clear it */
						return hc__err(EINVAL,
							       "device open: component '%s' layer %u: the %s of the %s pool (0x%llx) is not memory of CUDA device %d",
							       g->comps[dc->comp].name, l, end ? "last byte" : "base",
							       d->pl.c[c].kv ? (kv ? "V" : "K") : "state", (unsigned long long)a,
							       d->device);
					}
				}
	}
	return 0;
}

static int cuda_open_on(hc_dev *d, const struct hc_dev_spec *s);

static int cuda_open(hc_dev *d, const struct hc_dev_spec *s)
{
	int old = -1, r;

	if (hc__cuda.GetDevice(&old) != cudaSuccess) {
		hc__cuda.GetLastError();
		old = -1;
	}
	r = cuda_open_on(d, s);
	if (old >= 0)
		hc__cuda.SetDevice(old);
	return r;
}

static int cuda_open_on(hc_dev *d, const struct hc_dev_spec *s)
{
	struct cuda_dev *cd;
	struct cuda_reg *cr = NULL;
	cudaError_t e;
	int n = 0, r;

	e = hc__cuda.GetDeviceCount(&n);
	if (e != cudaSuccess || n == 0) {
		hc__cuda.GetLastError();
		return hc__err(ENODEV, "device open: no CUDA device here (%s): use HC_DEV_HOST",
			       e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
	}
	if (s->device < 0 || s->device >= n)
		return hc__err(EINVAL, "device open: CUDA device %d does not exist (there are %d)", s->device, n);
	cd = calloc(1, sizeof(*cd));
	if (!cd)
		return hc__err(ENOMEM, "device open: no memory");
	if ((e = hc__cuda.SetDevice(s->device)) != cudaSuccess ||
	    (e = hc__cuda.DeviceGetAttribute(&cd->host_ptr, cudaDevAttrCanUseHostPointerForRegisteredMem, s->device)) !=
		    cudaSuccess) {
		r = cu_err(e, "device open: CUDA device %d", s->device);
		goto fail;
	}
	if (s->path == HC_PATH_KERNEL && !cd->host_ptr) {
		r = hc__err(ENOTSUP, "device open: CUDA device %d cannot use registered host memory at its host address, which the kernel path needs: use HC_PATH_DIRECT",
			    s->device);
		goto fail;
	}
	if ((r = check_addresses(d)) < 0)
		goto fail;
	if ((r = pool_reg(d, s, &cr)) < 0)
		goto fail;
	if (cr->device != s->device && !cd->host_ptr && s->path != HC_PATH_DIRECT) {
		r = hc__err(ENOTSUP, "device open: the pool was registered for CUDA device %d; the kernel path on device %d needs host addresses: use HC_PATH_DIRECT",
			    cr->device, s->device);
		goto fail;
	}
	cd->chunk = cr->job.chunk;
	d->st.reg_ns = cr->st.reg_ns;
	d->st.reg_bytes = cr->st.reg_bytes;
	d->st.reg_chunks = cr->st.reg_chunks;
	d->st.reg_threads = cr->st.reg_threads;
	if ((e = hc__cuda.StreamCreateWithFlags(&cd->stream, cudaStreamNonBlocking)) != cudaSuccess) {
		r = cu_err(e, "device open: cudaStreamCreate on device %d", s->device);
		goto fail;
	}
	d->kd = cd;
	return 0;
fail:
	free(cd);
	return r;
}

static void cuda_close(hc_dev *d)
{
	struct cuda_dev *cd = d->kd;
	int old = -1;

	if (hc__cuda.GetDevice(&old) != cudaSuccess)
		old = -1;
	hc__cuda.SetDevice(d->device);
	hc__cuda.StreamSynchronize(cd->stream);
	hc__cuda.StreamDestroy(cd->stream);
	if (cd->scratch)
		hc__cuda.Free(cd->scratch);
	if (old >= 0)
		hc__cuda.SetDevice(old);
	hc__cuda.GetLastError();
	free(cd);
	d->kd = NULL;
}

static size_t align8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* A kernel transfer's indices, packed and copied to the device's scratch. */
static int upload(hc_dev *d, hc_xfer *x, struct cuda_xfer *cx)
{
	struct cuda_dev *cd = d->kd;
	size_t o_pres = align8((size_t)x->n * 4), o_slots = o_pres + align8((size_t)x->n * 4);
	size_t o_ss = o_slots + (x->slots ? (size_t)x->n * d->pool->g.page_tokens * 8 : 0);
	size_t bytes = o_ss + (x->state_slots ? (size_t)x->n * 8 : 0);
	uint8_t *h, *dv;
	cudaError_t e;

	cx->packed = h = malloc(bytes);
	if (!h)
		return hc__err(ENOMEM, "transfer: no memory for %zu bytes of indices", bytes);
	memcpy(h, x->ids, (size_t)x->n * 4);
	memcpy(h + o_pres, x->presence, (size_t)x->n * 4);
	if (x->slots)
		memcpy(h + o_slots, x->slots, o_ss - o_slots);
	if (x->state_slots)
		memcpy(h + o_ss, x->state_slots, bytes - o_ss);
	if (bytes > cd->scratch_cap) {
		size_t cap = bytes > 2 * cd->scratch_cap ? bytes : 2 * cd->scratch_cap;
		/* Earlier kernels on the stream may still read the old one. */
		if ((e = hc__cuda.StreamSynchronize(cd->stream)) != cudaSuccess)
			return cu_err(e, "transfer: waiting for the stream");
		if (cd->scratch)
			hc__cuda.Free(cd->scratch);
		cd->scratch = NULL;
		cd->scratch_cap = 0;
		if ((e = hc__cuda.Malloc(&cd->scratch, cap)) != cudaSuccess)
			return cu_err(e, "transfer: cudaMalloc of %zu bytes for indices", cap);
		cd->scratch_cap = cap;
	}
	/* From pageable memory: staged before the call returns, ordered on the stream. */
	if ((e = hc__cuda.MemcpyAsync(cd->scratch, h, bytes, cudaMemcpyHostToDevice, cd->stream)) != cudaSuccess)
		return cu_err(e, "transfer: uploading %zu bytes of indices", bytes);
	dv = cd->scratch;
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

	if ((e = hc__cuda.SetDevice(d->device)) != cudaSuccess) /* the worker is ours */
		return cu_err(e, "transfer: cudaSetDevice(%d)", d->device);
	cx = calloc(1, sizeof(*cx));
	if (!cx)
		return hc__err(ENOMEM, "transfer: no memory");
	x->kx = cx;
	cx->ev = calloc(x->layers ? x->layers : 1, sizeof(*cx->ev));
	if (!cx->ev)
		return hc__err(ENOMEM, "transfer: no memory for %u events", x->layers);
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
		}
	}
	return 0;
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

static int cuda_query(hc_xfer *x, unsigned layer)
{
	struct cuda_xfer *cx = x->kx;
	cudaError_t e = hc__cuda.EventQuery(cx->ev[layer]);

	if (e == cudaSuccess)
		return 1;
	if (e == cudaErrorNotReady) {
		hc__cuda.GetLastError(); /* not sticky, but not ours to leave */
		return 0;
	}
	return cu_err(e, "transfer: layer %u", layer);
}

static int cuda_sync(hc_xfer *x, unsigned layer)
{
	struct cuda_xfer *cx = x->kx;
	cudaError_t e;

	if (!cx || layer >= cx->nev)
		return 0; /* never issued */
	e = hc__cuda.EventSynchronize(cx->ev[layer]);
	return e == cudaSuccess ? 0 : cu_err(e, "transfer: waiting for layer %u", layer);
}

static void *cuda_event(hc_xfer *x, unsigned layer)
{
	struct cuda_xfer *cx = x->kx;

	return (void *)cx->ev[layer];
}

static void cuda_end(hc_xfer *x)
{
	struct cuda_xfer *cx = x->kx;

	if (!cx)
		return;
	for (unsigned l = 0; l < cx->nev; l++)
		hc__cuda.EventDestroy(cx->ev[l]);
	free(cx->ev);
	free(cx->packed);
	free(cx);
	x->kx = NULL;
}

/* A copy costs a few microseconds to issue: long runs go direct, short ones
 * (scattered slots, another TP's head groups) to the kernel. */
static enum hc_dev_path cuda_choose(hc_dev *d, const struct hc__run *runs, unsigned n)
{
	struct cuda_dev *cd = d->kd;
	uint64_t total = 0;

	if (n == 0 || !cd->host_ptr)
		return HC_PATH_DIRECT;
	for (unsigned i = 0; i < n; i++)
		total += runs[i].len;
	return total / n >= AUTO_DIRECT_RUN ? HC_PATH_DIRECT : HC_PATH_KERNEL;
}

const struct hc__dev_ops hc__dev_cuda_ops = {
	.name = "cuda",
	.open = cuda_open,
	.close = cuda_close,
	.begin = cuda_begin,
	.runs = cuda_runs,
	.gather = cuda_gather,
	.mark = cuda_mark,
	.query = cuda_query,
	.sync = cuda_sync,
	.event = cuda_event,
	.end = cuda_end,
	.choose = cuda_choose,
};
