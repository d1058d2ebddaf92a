/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cudafake.c - lib/device/cuda.c on a fake CUDA runtime (cuda.h's
 * table), so the CUDA kind runs in 'make check' on machines without a GPU:
 * cuda_suite.c's round trips and chunked run, with what the fake saw
 * (registration in chunks and its undoing, direct copies that never cross
 * a chunk, the kernel path's index upload: the fake launch runs the
 * kernel's loop, hc__dl_copy, on what was uploaded); then per-layer
 * events, 'after' events, and every CUDA failure turned into an errno and
 * a line.
 *
 * The fake: "device memory" is host memory the fake allocators handed
 * out; streams run each call at once; events are numbers, and
 * cudaEventSynchronize can be held.  It counts as a violation what a real
 * runtime would refuse or what would stall one (a copy across two
 * registrations, a host side neither registered nor pinned, a device side
 * outside an allocation), and any runtime call on the test's own thread:
 * the library makes none on its callers' threads.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "../lib/device/cuda.h"
#include "cuda_suite.h"

#define MAXR 256

struct range {
	uint8_t *lo, *hi;
};

static struct fake {
	pthread_mutex_t mu;
	int ndev, host_ptr;
	struct range alloc[MAXR], reg[MAXR];
	struct range pinned[MAXR];
	unsigned nalloc, nreg, npinned;
	pthread_t caller; /* the test's thread: no runtime call may run on it */
	pthread_cond_t cv;
	int hold;                        /* cudaEventSynchronize waits while set */
	int pools;                       /* cudaDevAttrMemoryPoolsSupported */
	int test_side;                   /* the test itself calls the fake: not a violation */
	unsigned reg_calls, reg_fail_at; /* the reg_fail_at'th registration fails (0: none) */
	unsigned copies, copy_fail_at, at_chunk_end;
	unsigned launches, violations, stream_syncs;
	unsigned events_live, next_event;
	uintptr_t last_waited;
	char why[256]; /* the first violation */
} F;

static void violation(const char *what)
{
	if (!F.violations++)
		snprintf(F.why, sizeof(F.why), "%s", what);
}

/* Every fake runtime call starts here. */
static void on_call(void)
{
	if (pthread_equal(pthread_self(), F.caller) && !F.test_side) {
		pthread_mutex_lock(&F.mu);
		violation("a runtime call on the caller's thread");
		pthread_mutex_unlock(&F.mu);
	}
}

static int in_list(uint8_t *lo, uint8_t *hi, unsigned n, const struct range *l)
{
	for (unsigned i = 0; i < n; i++)
		if (lo >= l[i].lo && hi <= l[i].hi)
			return (int)i;
	return -1;
}

static int overlaps(uint8_t *lo, uint8_t *hi)
{
	for (unsigned i = 0; i < F.nreg; i++)
		if (lo < F.reg[i].hi && F.reg[i].lo < hi)
			return 1;
	return 0;
}

static cudaError_t f_count(int *n)
{
	on_call();
	*n = F.ndev;
	return F.ndev ? cudaSuccess : cudaErrorNoDevice;
}

static cudaError_t f_set(int d)
{
	on_call();
	return d >= 0 && d < F.ndev ? cudaSuccess : cudaErrorInvalidDevice;
}

static cudaError_t f_attr(int *v, enum cudaDeviceAttr a, int d)
{
	on_call();
	(void)d;
	*v = a == cudaDevAttrCanUseHostPointerForRegisteredMem ? F.host_ptr
	     : a == cudaDevAttrMemoryPoolsSupported            ? F.pools
							       : 0;
	return cudaSuccess;
}

static cudaError_t f_ptr(struct cudaPointerAttributes *a, const void *p)
{
	on_call();
	uint8_t *b = (uint8_t *)(uintptr_t)p;

	memset(a, 0, sizeof(*a));
	pthread_mutex_lock(&F.mu);
	a->type = in_list(b, b + 1, F.nalloc, F.alloc) >= 0 ? cudaMemoryTypeDevice
		  : in_list(b, b + 1, F.nreg, F.reg) >= 0 || in_list(b, b + 1, F.npinned, F.pinned) >= 0
			  ? cudaMemoryTypeHost
			  : cudaMemoryTypeUnregistered;
	pthread_mutex_unlock(&F.mu);
	a->device = 0;
	return cudaSuccess;
}

static cudaError_t f_reg(void *p, size_t n, unsigned flags)
{
	on_call();
	cudaError_t e = cudaSuccess;

	pthread_mutex_lock(&F.mu);
	if (flags != (cudaHostRegisterPortable | cudaHostRegisterMapped))
		violation("registration flags are not portable | mapped");
	if (++F.reg_calls == F.reg_fail_at)
		e = cudaErrorMemoryAllocation;
	else if (overlaps(p, (uint8_t *)p + n))
		e = cudaErrorHostMemoryAlreadyRegistered;
	else
		F.reg[F.nreg].lo = p, F.reg[F.nreg].hi = (uint8_t *)p + n, F.nreg++;
	pthread_mutex_unlock(&F.mu);
	return e;
}

static cudaError_t f_unreg(void *p)
{
	on_call();
	cudaError_t e = cudaErrorHostMemoryNotRegistered;

	pthread_mutex_lock(&F.mu);
	for (unsigned i = 0; i < F.nreg; i++)
		if (F.reg[i].lo == p) {
			F.reg[i] = F.reg[--F.nreg];
			e = cudaSuccess;
			break;
		}
	if (e != cudaSuccess)
		violation("unregistering what is not registered");
	pthread_mutex_unlock(&F.mu);
	return e;
}

static cudaError_t f_stream(cudaStream_t *s, unsigned flags)
{
	on_call();
	if (flags != cudaStreamNonBlocking)
		violation("a blocking stream: it would wait for the legacy default stream");
	*s = (cudaStream_t)(uintptr_t)0x5;
	return cudaSuccess;
}

static cudaError_t f_stream_x(cudaStream_t s)
{
	on_call();
	if (s != (cudaStream_t)(uintptr_t)0x5)
		violation("a stream that is not ours");
	return cudaSuccess;
}

static cudaError_t f_stream_sync(cudaStream_t s)
{
	on_call();
	pthread_mutex_lock(&F.mu);
	F.stream_syncs++;
	pthread_mutex_unlock(&F.mu);
	return f_stream_x(s);
}

static cudaError_t f_wait(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
	on_call();
	(void)flags;
	f_stream_x(s);
	F.last_waited = (uintptr_t)e;
	return cudaSuccess;
}

/* "Device memory": the test's own (called directly, not through the table) and the library's. */
static cudaError_t f_malloc(void **p, size_t n)
{
	pthread_mutex_lock(&F.mu);
	*p = aligned_alloc(256, (n + 255) & ~(size_t)255);
	F.alloc[F.nalloc].lo = *p, F.alloc[F.nalloc].hi = (uint8_t *)*p + n, F.nalloc++;
	pthread_mutex_unlock(&F.mu);
	return cudaSuccess;
}

static cudaError_t f_free(void *p)
{
	pthread_mutex_lock(&F.mu);
	for (unsigned i = 0; i < F.nalloc; i++)
		if (F.alloc[i].lo == p) {
			F.alloc[i] = F.alloc[--F.nalloc];
			free(p);
			pthread_mutex_unlock(&F.mu);
			return cudaSuccess;
		}
	violation("freeing what cudaMalloc did not give");
	pthread_mutex_unlock(&F.mu);
	return cudaErrorInvalidValue;
}

static cudaError_t f_malloc_async(void **p, size_t n, cudaStream_t s)
{
	on_call();
	f_stream_x(s);
	return f_malloc(p, n);
}

static cudaError_t f_free_async(void *p, cudaStream_t s)
{
	on_call();
	f_stream_x(s);
	return f_free(p);
}

static cudaError_t f_malloc_host(void **p, size_t n)
{
	on_call();
	pthread_mutex_lock(&F.mu);
	*p = malloc(n);
	F.pinned[F.npinned].lo = *p, F.pinned[F.npinned].hi = (uint8_t *)*p + n, F.npinned++;
	pthread_mutex_unlock(&F.mu);
	return cudaSuccess;
}

static cudaError_t f_free_host(void *p)
{
	on_call();
	pthread_mutex_lock(&F.mu);
	for (unsigned i = 0; i < F.npinned; i++)
		if (F.pinned[i].lo == p) {
			F.pinned[i] = F.pinned[--F.npinned];
			free(p);
			pthread_mutex_unlock(&F.mu);
			return cudaSuccess;
		}
	violation("cudaFreeHost of what cudaMallocHost did not give");
	pthread_mutex_unlock(&F.mu);
	return cudaErrorInvalidValue;
}

static cudaError_t f_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s)
{
	on_call();
	uint8_t *h = k == cudaMemcpyHostToDevice ? (uint8_t *)(uintptr_t)src : dst;
	uint8_t *d = k == cudaMemcpyHostToDevice ? dst : (uint8_t *)(uintptr_t)src;
	int r;

	f_stream_x(s);
	pthread_mutex_lock(&F.mu);
	if (++F.copies == F.copy_fail_at) {
		pthread_mutex_unlock(&F.mu);
		return cudaErrorLaunchFailure;
	}
	if (k != cudaMemcpyHostToDevice && k != cudaMemcpyDeviceToHost)
		violation("a copy that is neither host to device nor back");
	if (in_list(d, d + n, F.nalloc, F.alloc) < 0)
		violation("a copy's device side is not inside one allocation");
	r = in_list(h, h + n, F.nreg, F.reg);
	if (r < 0 && in_list(h, h + n, F.npinned, F.pinned) < 0)
		violation("a copy's host side spans registrations, or is pageable (the copy may block)");
	if (r >= 0 && h + n == F.reg[r].hi)
		F.at_chunk_end++;
	pthread_mutex_unlock(&F.mu);
	memcpy(dst, src, n);
	return cudaSuccess;
}

static cudaError_t f_ev_create(cudaEvent_t *e, unsigned flags)
{
	on_call();
	if (!(flags & cudaEventDisableTiming))
		violation("events with timing cost more");
	pthread_mutex_lock(&F.mu);
	*e = (cudaEvent_t)(uintptr_t)(0x1000 + ++F.next_event);
	F.events_live++;
	pthread_mutex_unlock(&F.mu);
	return cudaSuccess;
}

static cudaError_t f_ev_record(cudaEvent_t e, cudaStream_t s)
{
	on_call();
	(void)e;
	return f_stream_x(s);
}

static cudaError_t f_ev_sync(cudaEvent_t e)
{
	on_call();
	(void)e;
	pthread_mutex_lock(&F.mu);
	while (F.hold)
		pthread_cond_wait(&F.cv, &F.mu);
	pthread_mutex_unlock(&F.mu);
	return cudaSuccess;
}

static cudaError_t f_ev_destroy(cudaEvent_t e)
{
	on_call();
	(void)e;
	pthread_mutex_lock(&F.mu);
	F.events_live--;
	pthread_mutex_unlock(&F.mu);
	return cudaSuccess;
}

static cudaError_t f_last(void)
{
	on_call();
	return cudaSuccess;
}

/* The launch: the kernel's loop in C, on the indices as uploaded. */
static int f_gather(const struct hc__dl *L, uint8_t *env, const uint32_t *pages, const uint32_t *presence,
		    const uint64_t *slots, const uint64_t *state_slots, int store, void *stream)
{
	on_call();
	f_stream_x(stream);
	pthread_mutex_lock(&F.mu);
	F.launches++;
	if (in_list((uint8_t *)(uintptr_t)pages, (uint8_t *)(uintptr_t)(pages + L->n), F.nalloc, F.alloc) < 0 ||
	    in_list((uint8_t *)(uintptr_t)presence, (uint8_t *)(uintptr_t)(presence + L->n), F.nalloc, F.alloc) < 0)
		violation("the kernel's page list is not device memory");
	if (L->align & (L->align - 1) || L->align > 16)
		violation("the kernel's word is not a power of two up to 16");
	pthread_mutex_unlock(&F.mu);
	hc__dl_copy(L, env, pages, presence, slots, state_slots, store);
	return cudaSuccess;
}

static void fake_install(void)
{
	memset(&F, 0, sizeof(F));
	pthread_mutex_init(&F.mu, NULL);
	pthread_cond_init(&F.cv, NULL);
	F.ndev = 1;
	F.host_ptr = 1;
	F.pools = 1;
	F.caller = pthread_self();
	hc__cuda = (struct hc__cuda_rt){
		.GetDeviceCount = f_count,
		.SetDevice = f_set,
		.DeviceGetAttribute = f_attr,
		.PointerGetAttributes = f_ptr,
		.HostRegister = f_reg,
		.HostUnregister = f_unreg,
		.StreamCreateWithFlags = f_stream,
		.StreamDestroy = f_stream_x,
		.StreamSynchronize = f_stream_sync,
		.StreamWaitEvent = f_wait,
		.MallocAsync = f_malloc_async,
		.FreeAsync = f_free_async,
		.MallocHost = f_malloc_host,
		.FreeHost = f_free_host,
		.MemcpyAsync = f_copy,
		.EventCreateWithFlags = f_ev_create,
		.EventRecord = f_ev_record,
		.EventSynchronize = f_ev_sync,
		.EventDestroy = f_ev_destroy,
		.GetLastError = f_last,
		.gather = f_gather,
	};
}

/* ---- the suite's view of it: device memory is host memory the fake handed out */

static void *fk_alloc(size_t n)
{
	void *p;

	f_malloc(&p, n);
	memset(p, 0, n);
	return p;
}

static void fk_free(void *p)
{
	f_free(p);
}

static void fk_copy(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}

static void fk_seen(struct cs_seen *s)
{
	pthread_mutex_lock(&F.mu);
	*s = (struct cs_seen){ .regs = F.nreg,
			       .allocs = F.nalloc,
			       .pinned = F.npinned,
			       .events = F.events_live,
			       .launches = F.launches,
			       .copies = F.copies,
			       .at_chunk_end = F.at_chunk_end,
			       .violations = F.violations,
			       .why = F.why };
	pthread_mutex_unlock(&F.mu);
}

static const struct cs_rt fake = {
	.alloc = fk_alloc,
	.free = fk_free,
	.put = fk_copy,
	.get = fk_copy,
	.begin = fake_install,
	.seen = fk_seen,
};

/* A layer's event is what the stream recorded; 'after' is waited for first. */
START_TEST(events)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 64, 100, 4);
	struct cs_dev a;
	static hc_key_t k[4];
	static hc_page_t pg[4];
	static uint8_t skip[4];
	uint64_t sl[4 * T], ss[4] = { 0, 1, 2, 3 };
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 4 };
	cudaEvent_t after;
	void *e0, *e1;
	hc_xfer *x;

	fake_install();
	ck_assert_ok(cs_dev_open(&a, p, 0, HC_PATH_AUTO, 0));
	cs_dev_fill(&a, 1);
	for (unsigned i = 0; i < 4 * T; i++)
		sl[i] = i;
	hct_keys(k, 4, 93);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), 4);
	after = (cudaEvent_t)(uintptr_t)0x777; /* the engine's: a number to the fake */
	F.hold = 1;                            /* layers are issued, none arrives */
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 4,
					  .slots = sl,
					  .state_slots = ss,
					  .after = after };
		ck_assert_ok(hc_dev_store(a.dev, &xr, &x));
		e0 = hc_xfer_layer_event(x, 0);
		e1 = hc_xfer_layer_event(x, 1);
		ck_assert_ptr_nonnull(e0);
		ck_assert_ptr_nonnull(e1);
		ck_assert_ptr_ne(e0, e1);
		ck_assert_ptr_null(hc_xfer_layer_event(x, 2));
		ck_assert_uint_eq(F.last_waited, (uintptr_t)after);
		ck_assert_int_eq(hc_xfer_layer_done(x, 0), 0); /* issued, not arrived */
		ck_assert_int_eq(hc_xfer_layer_done(x, 1), 0);
		pthread_mutex_lock(&F.mu);
		F.hold = 0;
		pthread_cond_broadcast(&F.cv);
		pthread_mutex_unlock(&F.mu);
		ck_assert_int_eq(hc_xfer_wait_layer(x, 1), 0);
		ck_assert_int_eq(hc_xfer_layer_done(x, 0), 1);
		ck_assert_int_eq(hc_xfer_layer_done(x, 1), 1);
		ck_assert_int_eq(hc_xfer_free(x), 0);
	}
	/* runs of 16 tokens x 128 bytes (2 KiB) average under 64 KiB: the kernel */
	{
		struct hc_dev_stats st;
		ck_assert_ok(hc_dev_stats(a.dev, &st, sizeof(st)));
		ck_assert_uint_eq(st.kernel_layers, 2);
		ck_assert_uint_eq(st.stores, 1);
	}
	cs_no_violations();
	hc_page_abort(p, pg, 4);
	cs_dev_close(&a);
	ck_assert_uint_eq(F.events_live, 0); /* kept for later transfers, destroyed at close */
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* Each CUDA failure is an errno and a line, and leaves nothing behind. */
START_TEST(failures)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 256, 100, 4);
	struct cs_dev a;
	static hc_key_t k[NP];
	static hc_page_t pg[NP];
	static uint8_t skip[NP];
	static uint64_t sl[NP * T], ss[NP];
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = NP };
	struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
				  .pages = pg,
				  .n = NP,
				  .slots = sl,
				  .state_slots = ss };
	uint64_t host[2];
	unsigned syncs;
	hc_xfer *x;

	fake_install();
	for (unsigned i = 0; i < NP * T; i++)
		sl[i] = i;
	for (unsigned i = 0; i < NP; i++)
		ss[i] = i;
	F.ndev = 0;
	ck_assert_err(cs_dev_open(&a, p, 0, HC_PATH_AUTO, 0), ENODEV);
	ck_assert_msg_has("no CUDA device");
	cs_dev_close(&a);
	F.ndev = 1;
	{
		struct hc_dev_spec s = { .size = sizeof(struct hc_dev_spec),
					 .kind = HC_DEV_CUDA,
					 .device = 1,
					 .tp_size = 2 };
		ck_assert_ok(cs_dev_open(&a, p, 0, HC_PATH_DIRECT, 0)); /* a good one first: the pool registers */
		s.comps = a.comp;
		s.ncomp = 2;
		hc_dev *d;
		ck_assert_err(hc_dev_open(p, &s, &d), EINVAL);
		ck_assert_msg_has("CUDA device 1 does not exist");
		/* host memory as the K pool of layer 1 */
		host[0] = a.ka[0];
		host[1] = (uintptr_t)&sl[0];
		a.comp[0].k = host;
		s.device = 0;
		ck_assert_err(hc_dev_open(p, &s, &d), EINVAL);
		ck_assert_msg_has("layer 1: the base of the K pool");
		a.comp[0].k = a.ka;
		/* the kernel path needs host addresses on the device */
		F.host_ptr = 0;
		s.path = HC_PATH_KERNEL;
		ck_assert_err(hc_dev_open(p, &s, &d), ENOTSUP);
		ck_assert_msg_has("HC_PATH_DIRECT");
		F.host_ptr = 1;
		s.reg_chunk = 3u << 20;
		ck_assert_err(hc_dev_open(p, &s, &d), EINVAL);
		ck_assert_msg_has("multiple of 2 MiB");
	}
	/* a copy that fails fails the transfer, with CUDA's words */
	hct_keys(k, NP, 94);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), NP);
	F.copy_fail_at = F.copies + 3;
	syncs = F.stream_syncs;
	ck_assert_ok(hc_dev_store(a.dev, &xr, &x));
	ck_assert_err(hc_xfer_wait(x), EIO);
	ck_assert_msg_has("cudaMemcpyAsync");
	ck_assert_uint_eq(F.stream_syncs, syncs + 1); /* the two copies issued were waited for */
	ck_assert_err(hc_xfer_free(x), EIO);
	hc_page_abort(p, pg, NP);
	cs_dev_close(&a);
	ck_assert_uint_eq(F.events_live, 0);
	hc_pool_detach(p);
	ck_assert_uint_eq(F.nreg, 0);

	/* a chunk that cannot be pinned: the others are unpinned, ENOMEM */
	p = hct_attach(name, 0);
	F.reg_calls = 0;
	F.reg_fail_at = 2;
	ck_assert_err(cs_dev_open(&a, p, 0, HC_PATH_AUTO, 2u << 20), ENOMEM);
	ck_assert_msg_has("cudaHostRegister");
	ck_assert_uint_eq(F.nreg, 0);
	cs_dev_close(&a);
	/* the engine registered the pool itself: hicache says so */
	F.reg_fail_at = 0;
	F.test_side = 1;
	f_reg(p->env, 4096, cudaHostRegisterPortable | cudaHostRegisterMapped);
	F.test_side = 0;
	ck_assert_err(cs_dev_open(&a, p, 0, HC_PATH_AUTO, 0), EBUSY);
	ck_assert_msg_has("already registered");
	F.test_side = 1;
	f_unreg(p->env);
	F.test_side = 0;
	cs_dev_close(&a);
	ck_assert_uint_eq(F.nreg, 0);
	cs_no_violations();
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cudafake");
	TCase *tc = cs_tcase(&fake, "cudafake", 30);

	tcase_add_test(tc, events);
	tcase_add_test(tc, failures);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
