/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-gpu.c - the CUDA device path (include/hicache/device.h) on GPU 0
 * against what the GPU's copy engines do alone, in the same run (doc/design.md,
 * "Measuring").  Target: 0.9 of peak for the better path on 256 KiB runs.
 *
 * Ours:  one hc_dev_load or hc_dev_store of every page and every layer,
 *        timed on the host from the call to hc_xfer_wait, on each path:
 *        direct (one cudaMemcpyAsync per run) and kernel (one gather or
 *        scatter launch per layer over the mapped envelopes).
 * Peer:  one cudaMemcpyAsync of the same bytes between one pinned buffer
 *        (cudaMallocHost) and one device buffer, to cudaStreamSynchronize.
 *        Each repetition runs ours, then the peer; medians print.
 *
 * The pools hold one sharded K/V component: bf16, 8 KV heads of 256 bytes
 * (head_dim 128), 128 tokens a page, 8 layers, so an envelope is 4 MiB
 * and one page's K or V of one layer is one run of 256 KiB.  One pool is
 * laid out for TP 1; the other for TP 8 (8 head groups of one head, so a
 * TP 1 engine reads runs of 256 bytes).  Both are read and written by a
 * TP 1 engine whose device K and V pools hold, per layer, a 2048-byte slot
 * for every token of every page.  Each pool has room for twice the pages
 * it starts with, so that stores have fresh pages to fill.
 *
 * First every path is checked byte for byte: a load against what
 * HC_DEV_HOST loads into host buffers with the same slots, and a store
 * (HC_XFER_COMMIT) into fresh pages against the pages it came from.  Last,
 * layer-by-layer overlap: a load alone, a spin kernel per layer alone, and
 * both, the compute stream waiting for each layer's event.
 *
 * These are DMA and PCIe figures, not syscall-bound ones: the VMs'
 * expensive syscalls and faults (section 10) touch only the setup.
 */
#include "config.h"

#include <getopt.h>
#include <sys/statvfs.h>

#include <cuda_runtime.h>

#include <hicache/device.h>

#include "bench.h"
#include "l3.h" /* l3b_count, l3b_die */

#define PAGE_TOKENS        128
#define KV_HEADS           8
#define HEAD_BYTES         256
#define LAYERS             8
#define TOKEN_BYTES        (KV_HEADS * HEAD_BYTES)               /* one slot of a TP 1 engine: 2048 */
#define RUN_BYTES          ((uint64_t)PAGE_TOKENS * TOKEN_BYTES) /* one page's K or V of a layer: 256 KiB */
#define PAGE_BYTES         ((uint64_t)LAYERS * 2 * RUN_BYTES)    /* one page's K/V: 4 MiB */
#define REMAP_DIRECT_PAGES 4                                     /* the direct path copies 256 bytes at a time there */
#define MAX_REPS           64
#define TARGET             0.9

/* spin.cu: one launch on a cudaStream_t that spins for ns nanoseconds;
 * returns its cudaError_t. */
int bench_spin(void *stream, uint64_t ns);

static const char *const path_name[2] = { "direct", "kernel" };
static const enum hc_dev_path path_of[2] = { HC_PATH_DIRECT, HC_PATH_KERNEL };

#define CU(call) cu_check((cudaError_t)(call), #call, __LINE__)

static void cu_check(cudaError_t e, const char *call, int line)
{
	if (e == cudaSuccess)
		return;
	fprintf(stderr, "bench-gpu: line %d: %s: %s (%s)\n", line, call, cudaGetErrorString(e), cudaGetErrorName(e));
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "bench-gpu: no memory for %zu bytes\n", n);
		exit(1);
	}
	return p;
}

/* ---- randomness: xorshift64, a fixed seed, so runs are comparable */

static uint64_t rng = 0x9E3779B97F4A7C15u;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void shuffle(uint64_t *v, size_t n)
{
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)(rnd() % i);
		uint64_t t = v[i - 1];
		v[i - 1] = v[j];
		v[j] = t;
	}
}

static uint64_t *copy_of(const uint64_t *v, size_t n)
{
	uint64_t *c = xmalloc(n * sizeof(*c));

	memcpy(c, v, n * sizeof(*c));
	return c;
}

/* Page i's tokens into slot block b[i] (slots b[i] * T ..): blocks in
 * order, or a random permutation of them. */
static uint64_t *slots_blocks(unsigned n, int shuffled)
{
	uint64_t *b = xmalloc(n * sizeof(*b)), *s = xmalloc((size_t)n * PAGE_TOKENS * sizeof(*s));

	for (unsigned i = 0; i < n; i++)
		b[i] = i;
	if (shuffled)
		shuffle(b, n);
	for (unsigned i = 0; i < n; i++)
		for (unsigned t = 0; t < PAGE_TOKENS; t++)
			s[(size_t)i * PAGE_TOKENS + t] = b[i] * PAGE_TOKENS + t;
	free(b);
	return s;
}

/* Every token into a slot of its own, at random. */
static uint64_t *slots_tokens(unsigned n)
{
	size_t m = (size_t)n * PAGE_TOKENS;
	uint64_t *s = xmalloc(m * sizeof(*s));

	for (size_t k = 0; k < m; k++)
		s[k] = k;
	shuffle(s, m);
	return s;
}

/* ---- device K/V: per layer a K and a V pool of 2048-byte slots */

struct kvset {
	uint64_t k[LAYERS], v[LAYERS];
	uint64_t slots, bytes; /* per pool */
	int gpu;               /* cudaMalloc, or host memory for HC_DEV_HOST */
};

static void kv_alloc(struct kvset *s, uint64_t slots, int gpu)
{
	s->slots = slots;
	s->bytes = slots * TOKEN_BYTES;
	s->gpu = gpu;
	for (unsigned l = 0; l < LAYERS; l++)
		for (int kv = 0; kv < 2; kv++) {
			void *p;
			if (gpu)
				CU(cudaMalloc(&p, s->bytes));
			else
				p = xmalloc(s->bytes);
			(kv ? s->v : s->k)[l] = (uintptr_t)p;
		}
}

static void kv_zero(struct kvset *s)
{
	for (unsigned l = 0; l < LAYERS; l++)
		for (int kv = 0; kv < 2; kv++) {
			void *p = (void *)(uintptr_t)(kv ? s->v : s->k)[l];
			if (s->gpu)
				CU(cudaMemset(p, 0, s->bytes));
			else
				memset(p, 0, s->bytes);
		}
	/* cudaMemset may return before it is done, and the devices' streams
	 * (non-blocking) do not wait for the default stream. */
	if (s->gpu)
		CU(cudaDeviceSynchronize());
}

static void kv_free(struct kvset *s)
{
	for (unsigned l = 0; l < LAYERS; l++)
		for (int kv = 0; kv < 2; kv++) {
			void *p = (void *)(uintptr_t)(kv ? s->v : s->k)[l];
			if (s->gpu)
				cudaFree(p);
			else
				free(p);
		}
}

/* ---- pools */

struct bpool {
	char name[64], path[512];
	hc_pool *p;
	struct hc_component_info ci;
	uint64_t env_bytes;
	unsigned n;
	hc_page_t *src; /* n READY pages of random bytes, pinned, in id order */
	hc_dev *dev[2]; /* HC_DEV_CUDA: [0] direct, [1] kernel */
	hc_dev *host;   /* HC_DEV_HOST on the host K/V */
};

static int cmp_page_id(const void *a, const void *b)
{
	uint32_t x = HC_PAGE_ID(*(const hc_page_t *)a), y = HC_PAGE_ID(*(const hc_page_t *)b);

	return (x > y) - (x < y);
}

/* n pages reserved under new keys, sorted by id.  The keys are random, as
 * SHA-256 keys are: the key index spreads keys by their bytes. */
static void reserve(struct bpool *bp, hc_page_t *pages, unsigned n)
{
	hc_key_t *keys = xmalloc(n * sizeof(*keys));
	uint8_t *skip = xmalloc(n);
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = keys, .nkeys = n };

	for (unsigned i = 0; i < n; i++)
		for (unsigned j = 0; j < HC_KEY_BYTES; j += 8) {
			uint64_t x = rnd();
			memcpy(keys[i] + j, &x, 8);
		}
	if (hc_reserve(bp->p, &rq, pages, skip) != (int)n)
		l3b_die("reserve pages");
	qsort(pages, n, sizeof(*pages), cmp_page_id);
	free(keys);
	free(skip);
}

/* Give back pages a store used: free the READY ones, abort the others. */
static void release(struct bpool *bp, const hc_page_t *pages, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		int r = hc_page_state(bp->p, HC_PAGE_ID(pages[i]), NULL, NULL, NULL) == HC_PAGE_READY
				? hc_page_free(bp->p, &pages[i], 1)
				: hc_page_abort(bp->p, &pages[i], 1);
		if (r < 0)
			l3b_die("give back a stored page");
	}
}

static void pool_make(struct bpool *bp, uint32_t tp, unsigned n)
{
	struct hc_component_spec kv = { .size = sizeof(struct hc_component_spec),
					.name = "kv",
					.dtype = HC_DTYPE_BF16,
					.kind = HC_COMP_KV,
					.sharding = HC_SHARDED,
					.kv_heads = KV_HEADS,
					.head_bytes = HEAD_BYTES,
					.layers = LAYERS };
	struct hc_pool_spec ps = { .size = sizeof(struct hc_pool_spec),
				   .model_id = "bench/gpu",
				   .page_tokens = PAGE_TOKENS,
				   .tp_size = tp,
				   .comps = &kv,
				   .ncomp = 1,
				   .capacity_pages = 2 * (uint64_t)n,
				   .max_ranks = 4 };
	struct hc_pool_info pi;

	memset(bp, 0, sizeof(*bp));
	bp->n = n;
	snprintf(bp->name, sizeof(bp->name), "bench-gpu-%d-tp%u", (int)getpid(), tp);
	snprintf(bp->path, sizeof(bp->path), "/dev/shm/hicache.%s", bp->name);
	bench_cleanup_add(bp->path);
	ps.name = bp->name;
	if (hc_pool_create(&ps) < 0)
		l3b_die("create a pool");
	if (hc_pool_attach(bp->name, NULL, &bp->p) < 0)
		l3b_die("attach the pool");
	hc_pool_info(bp->p, &pi, sizeof(pi));
	hc_pool_component(bp->p, 0, &bp->ci, sizeof(bp->ci));
	bp->env_bytes = pi.envelope_bytes;
	if (bp->ci.groups != tp || bp->ci.bytes != PAGE_BYTES) {
		fprintf(stderr, "bench-gpu: pool %s has %u head groups and %llu bytes of K/V a page, not %u and %llu\n",
			bp->name, bp->ci.groups, (unsigned long long)bp->ci.bytes, tp, (unsigned long long)PAGE_BYTES);
		exit(1);
	}
	bp->src = xmalloc(n * sizeof(*bp->src));
	reserve(bp, bp->src, n);
	for (unsigned i = 0; i < n; i++) {
		uint64_t *w = hc_page_envelope(bp->p, bp->src[i]);
		for (uint64_t k = 0; k < bp->env_bytes / 8; k++)
			w[k] = rnd();
		if (hc_page_commit(bp->p, bp->src[i], hc_page_needed(bp->p, 1)) != 1)
			l3b_die("commit a page");
		/* held, as a load's pages must be: nothing evicts them */
		if (hc_page_pin(bp->p, bp->src[i]) < 0)
			l3b_die("pin a page");
	}
}

static hc_dev *dev_open(struct bpool *bp, const struct kvset *s, enum hc_dev_kind kind, enum hc_dev_path path)
{
	struct hc_dev_comp c = { .size = sizeof(struct hc_dev_comp),
				 .comp = 0,
				 .k = s->k,
				 .v = s->v,
				 .token_bytes = TOKEN_BYTES,
				 .token_stride = TOKEN_BYTES,
				 .slots = s->slots };
	struct hc_dev_spec spec = { .size = sizeof(struct hc_dev_spec),
				    .kind = kind,
				    .device = 0,
				    .tp_size = 1,
				    .tp_rank = 0,
				    .comps = &c,
				    .ncomp = 1,
				    .path = path };
	hc_dev *d;

	if (hc_dev_open(bp->p, &spec, &d) < 0)
		l3b_die("open a device");
	return d;
}

static void pool_done(struct bpool *bp)
{
	hc_dev_close(bp->dev[0]);
	hc_dev_close(bp->dev[1]);
	hc_dev_close(bp->host);
	for (unsigned i = 0; i < bp->n; i++)
		hc_page_unpin(bp->p, bp->src[i]);
	hc_pool_detach(bp->p); /* after the devices: it unregisters the envelopes */
	hc_pool_destroy(bp->name, NULL, HC_DESTROY_FORCE);
	free(bp->src);
}

/* ---- what the benchmark shares */

static struct {
	unsigned reps;
	struct kvset gpu, host;
	uint8_t *stage;       /* one GPU pool, copied back to compare */
	void *pinned, *dbuf;  /* the peer's buffers */
	cudaStream_t copy;    /* the peer's stream */
	cudaStream_t compute; /* the overlap's compute stream */
	char fail[2][512];    /* each path's first mismatch */
} G;

/* One whole transfer: seconds from the call to hc_xfer_wait's return. */
static double xfer(hc_dev *d, int store, const hc_page_t *pages, unsigned n, const uint64_t *slots, unsigned flags)
{
	struct hc_xfer_req rq = { .size = sizeof(struct hc_xfer_req),
				  .pages = pages,
				  .n = n,
				  .slots = slots,
				  .flags = flags };
	uint64_t t0 = bench_now_ns(), t1;
	hc_xfer *x = NULL;

	if ((store ? hc_dev_store(d, &rq, &x) : hc_dev_load(d, &rq, &x)) < 0 || hc_xfer_wait(x) < 0)
		l3b_die(store ? "device store" : "device load");
	t1 = bench_now_ns();
	hc_xfer_free(x);
	return (double)(t1 - t0) / 1e9;
}

/* ---- round trips */

static uint64_t first_diff(const uint8_t *a, const uint8_t *b, uint64_t n)
{
	uint64_t i = 0;

	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/* The page and token of the transfer whose slot is s. */
static const char *slot_owner(const uint64_t *slots, unsigned n, uint64_t s)
{
	for (size_t k = 0; k < (size_t)n * PAGE_TOKENS; k++)
		if (slots[k] == s)
			return bench_fmt("page %zu token %zu", k / PAGE_TOKENS, k % PAGE_TOKENS);
	return "a slot no page goes to";
}

/* Byte o of a page's K/V, as hicache.h orders it. */
static const char *env_where(const struct bpool *bp, uint64_t o)
{
	uint64_t half = bp->ci.layer_stride / 2, tok = half / PAGE_TOKENS;
	uint64_t g = o / bp->ci.group_stride, r = o % bp->ci.group_stride, l = r / bp->ci.layer_stride;

	r %= bp->ci.layer_stride;
	return bench_fmt("group %llu layer %llu %c token %llu byte %llu", (unsigned long long)g, (unsigned long long)l,
			 r >= half ? 'V' : 'K', (unsigned long long)(r % half / tok),
			 (unsigned long long)(r % half % tok));
}

/*
 * Path i of bp: load pages[0..n) into slots and compare every GPU pool
 * with what HC_DEV_HOST loads; then store the slots back into fresh pages
 * (HC_XFER_COMMIT) and compare each with the page it came from.  The
 * first mismatch goes to G.fail[i]; later checks of that path are skipped.
 */
static void round_trip(struct bpool *bp, int i, const char *label, const hc_page_t *pages, unsigned n,
		       const uint64_t *slots)
{
	hc_page_t *dst;

	if (G.fail[i][0])
		return;
	kv_zero(&G.host);
	xfer(bp->host, 0, pages, n, slots, 0);
	kv_zero(&G.gpu); /* a slot the load misses shows */
	xfer(bp->dev[i], 0, pages, n, slots, 0);
	for (unsigned l = 0; l < LAYERS; l++)
		for (int kv = 0; kv < 2; kv++) {
			const uint8_t *h = (const uint8_t *)(uintptr_t)(kv ? G.host.v : G.host.k)[l];
			uint64_t o;
			CU(cudaMemcpy(G.stage, (const void *)(uintptr_t)(kv ? G.gpu.v : G.gpu.k)[l], G.gpu.bytes,
				      cudaMemcpyDeviceToHost));
			if ((o = first_diff(G.stage, h, G.gpu.bytes)) == G.gpu.bytes)
				continue;
			snprintf(
				G.fail[i], sizeof(G.fail[i]),
				"%s, load: layer %u %c slot %llu byte %llu (%s) is 0x%02x on the GPU, 0x%02x from HC_DEV_HOST",
				label, l, kv ? 'V' : 'K', (unsigned long long)(o / TOKEN_BYTES),
				(unsigned long long)(o % TOKEN_BYTES), slot_owner(slots, n, o / TOKEN_BYTES),
				G.stage[o], h[o]);
			return;
		}
	dst = xmalloc(n * sizeof(*dst));
	reserve(bp, dst, n);
	for (unsigned k = 0; k < n; k++) /* no stale bytes can pass for stored ones */
		memset(hc_page_envelope(bp->p, dst[k]), 0, bp->env_bytes);
	xfer(bp->dev[i], 1, dst, n, slots, HC_XFER_COMMIT);
	for (unsigned k = 0; k < n && !G.fail[i][0]; k++) {
		const uint8_t *a = (const uint8_t *)hc_page_envelope(bp->p, dst[k]) + bp->ci.offset;
		const uint8_t *b = (const uint8_t *)hc_page_envelope(bp->p, pages[k]) + bp->ci.offset;
		uint64_t o;
		if (hc_page_state(bp->p, HC_PAGE_ID(dst[k]), NULL, NULL, NULL) != HC_PAGE_READY)
			snprintf(G.fail[i], sizeof(G.fail[i]),
				 "%s, store: page %u of %u is not READY after HC_XFER_COMMIT", label, k, n);
		else if ((o = first_diff(a, b, bp->ci.bytes)) < bp->ci.bytes)
			snprintf(G.fail[i], sizeof(G.fail[i]),
				 "%s, store: page %u of %u, %s, is 0x%02x, its source 0x%02x", label, k, n,
				 env_where(bp, o), a[o], b[o]);
	}
	release(bp, dst, n);
	free(dst);
}

/* ---- throughput */

static double peak_copy(uint64_t bytes, int store)
{
	uint64_t t0 = bench_now_ns();

	if (store)
		CU(cudaMemcpyAsync(G.pinned, G.dbuf, bytes, cudaMemcpyDeviceToHost, G.copy));
	else
		CU(cudaMemcpyAsync(G.dbuf, G.pinned, bytes, cudaMemcpyHostToDevice, G.copy));
	CU(cudaStreamSynchronize(G.copy));
	return (double)(bench_now_ns() - t0) / 1e9;
}

struct xcase {
	const char *name;
	struct bpool *bp;
	unsigned n[2];             /* pages moved by each path */
	const hc_page_t *pages[2]; /* [0] a load's (READY), [1] a store's (reserved) */
	const uint64_t *slots;
};

struct result {
	double gbs, peak;
};

static const int widths[7] = { -26, -6, -5, 8, 7, 9, 6 };

/* Median GB/s of ours and the peer for one case, path and direction; prints its row. */
static struct result measure(const struct xcase *c, int path, int store)
{
	double ours[MAX_REPS], peer[MAX_REPS];
	unsigned n = c->n[path];
	uint64_t bytes = n * c->bp->ci.bytes;
	const hc_page_t *pages = c->pages[store];
	hc_dev *d = c->bp->dev[path];
	struct result r;

	/* warm-up: the kernel path's first transfer makes its index buffer,
	 * and CUDA loads a kernel at its first launch */
	xfer(d, store, pages, n, c->slots, 0);
	peak_copy(bytes, store);
	for (unsigned i = 0; i < G.reps; i++) {
		ours[i] = (double)bytes / xfer(d, store, pages, n, c->slots, 0) / 1e9;
		peer[i] = (double)bytes / peak_copy(bytes, store) / 1e9;
	}
	r.gbs = bench_median(ours, G.reps);
	r.peak = bench_median(peer, G.reps);
	bench_row(7, widths, n == c->bp->n ? c->name : bench_fmt("%s (%u pages)", c->name, n), path_name[path],
		  store ? "store" : "load", bench_fmt("%.0f", (double)bytes / 1048576), bench_fmt("%.2f", r.gbs),
		  bench_fmt("%.2f", r.peak), bench_fmt("%.3f", r.gbs / r.peak));
	fflush(stdout);
	return r;
}

/* ---- overlap */

/* Seconds for L spin kernels of ns each on the compute stream. */
static double compute_alone(uint64_t ns)
{
	uint64_t t0 = bench_now_ns();

	for (unsigned l = 0; l < LAYERS; l++)
		CU(bench_spin(G.compute, ns));
	CU(cudaStreamSynchronize(G.compute));
	return (double)(bench_now_ns() - t0) / 1e9;
}

/* A load, and layer l's compute as soon as layer l is in: seconds until both are done. */
static double load_and_compute(hc_dev *d, const hc_page_t *pages, unsigned n, const uint64_t *slots, uint64_t ns)
{
	struct hc_xfer_req rq = { .size = sizeof(struct hc_xfer_req), .pages = pages, .n = n, .slots = slots };
	uint64_t t0 = bench_now_ns(), t1;
	hc_xfer *x;

	if (hc_dev_load(d, &rq, &x) < 0)
		l3b_die("device load");
	for (unsigned l = 0; l < LAYERS; l++) {
		void *ev = hc_xfer_layer_event(x, l); /* returns once layer l's copies are issued */
		if (!ev)
			l3b_die("the event of a layer");
		CU(cudaStreamWaitEvent(G.compute, (cudaEvent_t)ev, 0));
		CU(bench_spin(G.compute, ns));
	}
	CU(cudaStreamSynchronize(G.compute));
	if (hc_xfer_wait(x) < 0)
		l3b_die("device load");
	t1 = bench_now_ns();
	hc_xfer_free(x); /* after the compute stream is done with its events */
	return (double)(t1 - t0) / 1e9;
}

static void overlap(struct bpool *bp, const uint64_t *slots)
{
	double load[MAX_REPS], comp[MAX_REPS], both[MAX_REPS], tl, tc, tb;
	hc_dev *d = bp->dev[0];
	uint64_t ns;

	xfer(d, 0, bp->src, bp->n, slots, 0);
	for (unsigned i = 0; i < G.reps; i++)
		load[i] = xfer(d, 0, bp->src, bp->n, slots, 0);
	tl = bench_median(load, G.reps);
	ns = (uint64_t)(tl * 1e9 / LAYERS);
	compute_alone(1000); /* warm-up: CUDA loads the kernel */
	for (unsigned i = 0; i < G.reps; i++)
		comp[i] = compute_alone(ns);
	tc = bench_median(comp, G.reps);
	for (unsigned i = 0; i < G.reps; i++)
		both[i] = load_and_compute(d, bp->src, bp->n, slots, ns);
	tb = bench_median(both, G.reps);
	printf("\noverlap (direct, contiguous; a spin kernel per layer of %.2f ms, each after its layer's event):\n"
	       "load %.2f ms, compute %.2f ms, both %.2f ms, overlap %.2f "
	       "(1: compute hidden; a layer-by-layer pipeline of equal parts reaches %u/%u = %.2f)\n",
	       (double)ns / 1e6, tl * 1e3, tc * 1e3, tb * 1e3, (tl + tc - tb) / (tl < tc ? tl : tc), LAYERS - 1, LAYERS,
	       (double)(LAYERS - 1) / LAYERS);
}

/* ---- main */

static int no_device(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e == cudaSuccess && n > 0)
		return 0;
	cudaGetLastError();
	fprintf(stderr,
		"bench-gpu: no CUDA device here (%s): run it on a machine with an NVIDIA GPU and its driver (bench/gpu.sh)\n",
		e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
	return 1;
}

static void header(unsigned npages)
{
	struct cudaDeviceProp prop;
	int ndev = 0, rt = 0, drv = 0;

	CU(cudaGetDeviceCount(&ndev));
	CU(cudaGetDeviceProperties(&prop, 0));
	CU(cudaRuntimeGetVersion(&rt));
	CU(cudaDriverGetVersion(&drv));
	printf("GPU 0 of %d: %s, compute capability %d.%d, CUDA runtime %d.%d, driver %d.%d; hicache %s\n", ndev,
	       prop.name, prop.major, prop.minor, rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10,
	       PACKAGE_VERSION);
	printf("pages: %u of %.0f MiB of K/V (bf16, %u heads of %u B, %u tokens, %u layers; runs of %llu KiB), in a pool laid out for TP 1 and one for TP 8, moved by TP 1; %u reps, medians\n",
	       npages, (double)PAGE_BYTES / 1048576, KV_HEADS, HEAD_BYTES, PAGE_TOKENS, LAYERS,
	       (unsigned long long)(RUN_BYTES >> 10), G.reps);
}

/* The pools go in /dev/shm: say so plainly if they cannot fit. */
static void check_shm(unsigned npages)
{
	/* two pools of 2 * npages envelopes, plus their metadata */
	uint64_t need = 2 * 2 * (uint64_t)npages * PAGE_BYTES + (64u << 20);
	struct statvfs sv;

	if (statvfs("/dev/shm", &sv) == 0 && (uint64_t)sv.f_bavail * sv.f_frsize < need) {
		fprintf(stderr,
			"bench-gpu: the pools need %.1f GiB in /dev/shm, which has %.1f GiB free: lower --pages, or enlarge it (mount -o remount,size=8G /dev/shm; docker run --shm-size)\n",
			(double)need / 1073741824, (double)sv.f_bavail * sv.f_frsize / 1073741824);
		exit(1);
	}
}

int main(int argc, char **argv)
{
	unsigned npages = 192;
	static const struct option lo[] = { { "pages", required_argument, NULL, 'n' },
					    { "reps", required_argument, NULL, 'r' },
					    { "help", no_argument, NULL, 'h' },
					    { 0 } };
	struct bpool p1, p8;
	struct hc_dev_stats st;
	uint64_t *blocks, *in_order, *tokens, *scattered_src, *scattered_dst;
	hc_page_t *dst1, *dst8;
	struct result res[3][2][2]; /* case, path, store */
	int c;

	G.reps = 5;
	while ((c = getopt_long(argc, argv, "n:r:h", lo, NULL)) != -1) {
		switch (c) {
		case 'n':
			npages = l3b_count("bench-gpu", "pages", optarg);
			break;
		case 'r':
			G.reps = l3b_count("bench-gpu", "reps", optarg);
			break;
		default:
			printf("usage: bench-gpu [--pages N] [--reps R]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (npages < REMAP_DIRECT_PAGES || npages > 4096 || G.reps < 1 || G.reps > MAX_REPS) {
		fprintf(stderr, "bench-gpu: --pages %u..4096, --reps 1..%u\n", REMAP_DIRECT_PAGES, MAX_REPS);
		return 2;
	}
	if (no_device())
		return 1;
	header(npages);
	check_shm(npages);
	bench_cleanup_init();
	CU(cudaSetDevice(0));

	pool_make(&p1, 1, npages);
	pool_make(&p8, 8, npages);
	kv_alloc(&G.gpu, (uint64_t)npages * PAGE_TOKENS, 1);
	kv_alloc(&G.host, (uint64_t)npages * PAGE_TOKENS, 0);
	G.stage = xmalloc(G.gpu.bytes);
	for (int k = 0; k < 2; k++) {
		struct bpool *bp = k ? &p8 : &p1;
		for (int i = 0; i < 2; i++)
			bp->dev[i] = dev_open(bp, &G.gpu, HC_DEV_CUDA, path_of[i]);
		bp->host = dev_open(bp, &G.host, HC_DEV_HOST, HC_PATH_AUTO);
	}
	hc_dev_stats(p1.dev[0], &st, sizeof(st));
	printf("registration of the TP 1 pool (cudaHostRegister): %.0f MiB in %u chunks by %u threads, %.1f ms, %.2f GB/s\n",
	       (double)st.reg_bytes / 1048576, st.reg_chunks, st.reg_threads, (double)st.reg_ns / 1e6,
	       st.reg_ns ? (double)st.reg_bytes / (double)st.reg_ns : 0.0);
	CU(cudaStreamCreateWithFlags(&G.copy, cudaStreamNonBlocking));
	CU(cudaStreamCreateWithFlags(&G.compute, cudaStreamNonBlocking));
	CU(cudaMallocHost(&G.pinned, npages * PAGE_BYTES));
	CU(cudaMalloc(&G.dbuf, npages * PAGE_BYTES));
	memset(G.pinned, 0x5a, npages * PAGE_BYTES);
	CU(cudaMemset(G.dbuf, 0xa5, npages * PAGE_BYTES));
	CU(cudaDeviceSynchronize());

	/* slot maps and page orders */
	in_order = slots_blocks(npages, 0);
	blocks = slots_blocks(npages, 1);
	tokens = slots_tokens(npages);
	scattered_src = copy_of(p1.src, npages);
	shuffle(scattered_src, npages);

	printf("round trip (loads against HC_DEV_HOST, stores into fresh pages against their sources): "
	       "random page order into random slot blocks; random slot per token; the TP 8 pool, random slot per token (direct: %u pages)\n",
	       REMAP_DIRECT_PAGES);
	fflush(stdout);
	for (int i = 0; i < 2; i++) {
		round_trip(&p1, i, "slot blocks", scattered_src, npages, blocks);
		round_trip(&p1, i, "slot per token", p1.src, npages, tokens);
		round_trip(&p8, i, "TP 8 pool, slot per token", p8.src, i ? npages : REMAP_DIRECT_PAGES, tokens);
	}
	printf("round trip: %s %s, %s %s\n", path_name[0], G.fail[0][0] ? "FAILED" : "ok", path_name[1],
	       G.fail[1][0] ? "FAILED" : "ok");
	for (int i = 0; i < 2; i++)
		if (G.fail[i][0])
			printf("  %s: %s\n", path_name[i], G.fail[i]);
	fflush(stdout);

	/* stores go to pages reserved once and never committed: a store
	 * rewrites them, and the reservation is not timed */
	dst1 = xmalloc(npages * sizeof(*dst1));
	dst8 = xmalloc(npages * sizeof(*dst8));
	reserve(&p1, dst1, npages);
	reserve(&p8, dst8, npages);
	scattered_dst = copy_of(dst1, npages);
	shuffle(scattered_dst, npages);
	{
		const struct xcase cases[3] = {
			{ "contiguous", &p1, { npages, npages }, { p1.src, dst1 }, in_order },
			{ "scattered", &p1, { npages, npages }, { scattered_src, scattered_dst }, blocks },
			{ "tp8->tp1 remap", &p8, { REMAP_DIRECT_PAGES, npages }, { p8.src, dst8 }, in_order },
		};

		printf("\nthroughput: one transfer of every page and layer, from hc_dev_load/store to hc_xfer_wait;\n"
		       "peak: one cudaMemcpyAsync of as many bytes, between a pinned buffer and a device buffer\n");
		bench_row(7, widths, "case", "path", "dir", "MiB", "GB/s", "peak GB/s", "ratio");
		bench_rule(bench_table_width(7, widths));
		for (int k = 0; k < 3; k++)
			for (int i = 0; i < 2; i++)
				for (int s = 0; s < 2; s++)
					res[k][i][s] = measure(&cases[k], i, s);
	}
	release(&p1, dst1, npages);
	release(&p8, dst8, npages);

	overlap(&p1, in_order);

	/* the verdict: the better path of each 256 KiB case, against the target */
	{
		int met = 1;

		printf("\n256 KiB runs, the better path against peak (target %.2f):", TARGET);
		for (int s = 0; s < 2; s++) {
			printf("%s", s ? "; store" : " load");
			for (int k = 0; k < 2; k++) {
				double r0 = res[k][0][s].gbs / res[k][0][s].peak,
				       r1 = res[k][1][s].gbs / res[k][1][s].peak;
				int b = r1 > r0;
				printf("%s %.3f %s (%s)", k ? "," : "", b ? r1 : r0, k ? "scattered" : "contiguous",
				       path_name[b]);
				met &= (b ? r1 : r0) >= TARGET;
			}
		}
		printf(": %s\n", met ? "met" : "NOT met");
	}

	free(in_order);
	free(blocks);
	free(tokens);
	free(scattered_src);
	free(scattered_dst);
	free(dst1);
	free(dst8);
	pool_done(&p1);
	pool_done(&p8);
	kv_free(&G.gpu);
	kv_free(&G.host);
	free(G.stage);
	cudaFreeHost(G.pinned);
	cudaFree(G.dbuf);
	cudaStreamDestroy(G.copy);
	cudaStreamDestroy(G.compute);
	return G.fail[0][0] || G.fail[1][0] ? 1 : 0;
}
