/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cuda.c - the CUDA device path on a real GPU: round trips through
 * the pool by both ranks of a TP 2 engine on each path, the pool
 * registered in several chunks and a run longer than a chunk cut at its
 * end, per-layer events a stream can wait on, and the errors only a CUDA
 * device has.
 * Built with CUDA only; skipped (77) where cudaGetDeviceCount finds none.
 * The probe runs in a child: CUDA must not be initialised before Check
 * forks the tests.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include <hicache/device.h>

#include "hct.h"

#define CK_CUDA(call) ck_assert_msg((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

#define NPAGES 256 /* about 5 MiB of envelopes: three 2 MiB registration chunks */
#define NP 48      /* pages moved by a test */
#define T 16       /* hct's page tokens */

/* One rank's device KV of hct's pool: K, V and state pools for 2 layers. */
struct gdev {
	uint64_t kv_bytes, nslots;
	void *k[2], *v[2], *st[2];
	uint64_t ka[2], va[2], sa[2];
	struct hc_dev_comp comp[2];
	hc_dev *dev;
};

static void gdev_open(struct gdev *g, hc_pool *p, uint32_t rank, enum hc_dev_path path, uint64_t reg_chunk)
{
	struct hc_dev_spec s = { .kind = HC_DEV_CUDA, .device = 0, .tp_size = 2, .tp_rank = rank, .comps = g->comp,
				 .ncomp = 2, .path = path, .reg_threads = 3, .reg_chunk = reg_chunk };
	int r;

	memset(g, 0, sizeof(*g));
	g->kv_bytes = 2 * 64; /* 2 of the 4 heads */
	g->nslots = NP * T;
	for (int l = 0; l < 2; l++) {
		CK_CUDA(cudaMalloc(&g->k[l], g->nslots * g->kv_bytes));
		CK_CUDA(cudaMalloc(&g->v[l], g->nslots * g->kv_bytes));
		CK_CUDA(cudaMalloc(&g->st[l], NP * 1024));
		CK_CUDA(cudaMemset(g->k[l], 0, g->nslots * g->kv_bytes));
		CK_CUDA(cudaMemset(g->v[l], 0, g->nslots * g->kv_bytes));
		CK_CUDA(cudaMemset(g->st[l], 0, NP * 1024));
		g->ka[l] = (uintptr_t)g->k[l];
		g->va[l] = (uintptr_t)g->v[l];
		g->sa[l] = (uintptr_t)g->st[l];
	}
	/* The library's stream does not wait for the default one: finish the memsets. */
	CK_CUDA(cudaDeviceSynchronize());
	g->comp[0] = (struct hc_dev_comp){ .comp = 0, .k = g->ka, .v = g->va, .token_bytes = g->kv_bytes,
					   .token_stride = g->kv_bytes, .slots = g->nslots };
	g->comp[1] = (struct hc_dev_comp){ .comp = 1, .k = g->sa, .token_bytes = 1024, .token_stride = 1024, .slots = NP };
	r = hc_dev_open(p, &s, &g->dev);
	ck_assert_msg(r == 0, "hc_dev_open: %s", hc_last_error());
}

static void gdev_close(struct gdev *g)
{
	ck_assert_ok(hc_dev_close(g->dev));
	for (int l = 0; l < 2; l++) {
		cudaFree(g->k[l]);
		cudaFree(g->v[l]);
		cudaFree(g->st[l]);
	}
}

static void fill_random(void *dptr, size_t n, unsigned seed)
{
	uint8_t *h = malloc(n);

	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		h[i] = (uint8_t)(seed >> 16);
	}
	CK_CUDA(cudaMemcpy(dptr, h, n, cudaMemcpyHostToDevice));
	CK_CUDA(cudaDeviceSynchronize()); /* a pageable copy may return before it lands */
	free(h);
}

static uint8_t *to_host(const void *dptr, size_t n)
{
	uint8_t *h = malloc(n);

	CK_CUDA(cudaMemcpy(h, dptr, n, cudaMemcpyDeviceToHost));
	return h;
}

/* Slots of whole pages in contiguous blocks (long direct runs), shuffled. */
static void page_blocks(uint64_t *slots, unsigned n)
{
	uint64_t blk[NP];

	hct_perm(blk, n, NP);
	for (unsigned i = 0; i < n; i++)
		for (unsigned t = 0; t < T; t++)
			slots[i * T + t] = blk[i] * T + t;
}

/* Both ranks store into the pool, then load into other slots of fresh devices. */
START_TEST(roundtrip)
{
	enum hc_dev_path path = (enum hc_dev_path)_i;
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, NPAGES, 100, 4);
	struct gdev a[2], b[2];
	static hc_key_t k[NP];
	static hc_page_t pg[NP];
	static uint8_t skip[NP];
	static uint64_t s1[NP * T], s2[NP * T], ss1[NP], ss2[NP];
	struct hc_reserve_req rq = { .keys = k, .nkeys = NP };
	struct hc_dev_stats st;
	hc_xfer *x;

	srand(11 + _i);
	for (int r = 0; r < 2; r++) {
		gdev_open(&a[r], p, (uint32_t)r, path, 2u << 20);
		gdev_open(&b[r], p, (uint32_t)r, path, 0);
		for (int l = 0; l < 2; l++) {
			fill_random(a[r].k[l], a[r].nslots * a[r].kv_bytes, 100u * r + l);
			fill_random(a[r].v[l], a[r].nslots * a[r].kv_bytes, 200u * r + l);
			fill_random(a[r].st[l], NP * 1024, 300u * r + l);
		}
	}
	ck_assert_ok(hc_dev_stats(a[0].dev, &st));
	ck_assert_uint_gt(st.reg_ns, 0);
	ck_assert_uint_eq(st.reg_chunks, (st.reg_bytes + (2u << 20) - 1) / (2u << 20));
	ck_assert_uint_ge(st.reg_chunks, 3);
	hct_keys(k, NP, 77);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), NP);
	/* scattered tokens on the kernel path, page blocks elsewhere */
	if (path == HC_PATH_KERNEL)
		hct_perm(s1, NP * T, NP * T);
	else
		page_blocks(s1, NP);
	hct_perm(ss1, NP, NP);
	for (int r = 0; r < 2; r++) {
		struct hc_xfer_req xr = { .pages = pg, .n = NP, .slots = s1, .state_slots = ss1, .flags = HC_XFER_COMMIT };
		ck_assert_ok(hc_dev_store(a[r].dev, &xr, &x));
		ck_assert_msg(hc_xfer_free(x) == 0, "store: %s", hc_last_error());
	}
	for (int i = 0; i < NP; i++)
		ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[i]), NULL, NULL, NULL), HC_PAGE_READY);
	page_blocks(s2, NP);
	hct_perm(ss2, NP, NP);
	for (int r = 0; r < 2; r++) {
		struct hc_xfer_req xr = { .pages = pg, .n = NP, .slots = s2, .state_slots = ss2 };
		ck_assert_ok(hc_dev_load(b[r].dev, &xr, &x));
		ck_assert_msg(hc_xfer_free(x) == 0, "load: %s", hc_last_error());
		ck_assert_ok(hc_dev_stats(b[r].dev, &st));
		ck_assert_uint_eq(st.loads, 1);
		ck_assert_uint_eq(st.load_bytes, (uint64_t)NP * 2 * (2 * T * 128 + 1024));
		if (path != HC_PATH_AUTO)
			ck_assert_uint_eq(path == HC_PATH_KERNEL ? st.kernel_layers : st.direct_layers, 2);
		for (int l = 0; l < 2; l++) {
			size_t kvb = a[r].nslots * a[r].kv_bytes;
			uint8_t *ak = to_host(a[r].k[l], kvb), *av = to_host(a[r].v[l], kvb);
			uint8_t *bk = to_host(b[r].k[l], kvb), *bv = to_host(b[r].v[l], kvb);
			uint8_t *as = to_host(a[0].st[l], NP * 1024), *bs = to_host(b[r].st[l], NP * 1024);
			for (unsigned i = 0; i < NP * T; i++) {
				ck_assert_msg(memcmp(bk + s2[i] * 128, ak + s1[i] * 128, 128) == 0, "rank %d layer %d K token %u", r, l, i);
				ck_assert_msg(memcmp(bv + s2[i] * 128, av + s1[i] * 128, 128) == 0, "rank %d layer %d V token %u", r, l, i);
			}
			/* the replicated state, as rank 0 wrote it */
			for (unsigned i = 0; i < NP; i++)
				ck_assert_msg(memcmp(bs + ss2[i] * 1024, as + ss1[i] * 1024, 1024) == 0, "rank %d layer %d state %u", r, l, i);
			free(ak), free(av), free(bk), free(bv), free(as), free(bs);
		}
	}
	for (int r = 0; r < 2; r++) {
		gdev_close(&a[r]);
		gdev_close(&b[r]);
	}
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

static int cmp_id(const void *a, const void *b)
{
	uint32_t x = HC_PAGE_ID(*(const hc_page_t *)a), y = HC_PAGE_ID(*(const hc_page_t *)b);

	return (x > y) - (x < y);
}

/* A 4 MiB run over 2 MiB chunks: two copies, and the bytes whole. */
START_TEST(run_across_chunks)
{
	const char *name = hct_name();
	struct hc_component_spec c = { .name = "st", .dtype = HC_DTYPE_F32, .kind = HC_COMP_STATE,
				       .sharding = HC_REPLICATED, .bytes_per_layer = 4096, .layers = 1 };
	struct hc_pool_spec s = { .name = name, .model_id = "t/split", .page_tokens = 16, .tp_size = 1, .comps = &c,
				  .ncomp = 1, .capacity_pages = 1024, .max_ranks = 4, .flags = HC_CREATE_NO_POPULATE };
	enum { N = 1024 };
	static hc_key_t k[N];
	static hc_page_t pg[N];
	static uint8_t skip[N];
	static uint64_t ss[N];
	struct hc_reserve_req rq = { .keys = k, .nkeys = N };
	uint64_t base;
	struct hc_dev_comp dc = { .comp = 0, .k = &base, .token_bytes = 4096, .token_stride = 4096, .slots = N };
	struct hc_dev_spec ds = { .kind = HC_DEV_CUDA, .tp_size = 1, .comps = &dc, .ncomp = 1,
				  .path = HC_PATH_DIRECT, .reg_chunk = 2u << 20 };
	struct hc_dev_stats st;
	void *src, *dst;
	uint8_t *a, *b;
	hc_dev *d;
	hc_pool *p;
	hc_xfer *x;

	ck_assert_ok(hc_pool_create(&s));
	p = hct_attach(name, 0);
	CK_CUDA(cudaMalloc(&src, (size_t)N * 4096));
	CK_CUDA(cudaMalloc(&dst, (size_t)N * 4096));
	fill_random(src, (size_t)N * 4096, 17);
	CK_CUDA(cudaMemset(dst, 0, (size_t)N * 4096));
	CK_CUDA(cudaDeviceSynchronize());
	hct_keys(k, N, 79);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), N);
	qsort(pg, N, sizeof(pg[0]), cmp_id);
	for (unsigned i = 0; i < N; i++)
		ss[i] = HC_PAGE_ID(pg[i]);
	base = (uintptr_t)src;
	ck_assert_msg(hc_dev_open(p, &ds, &d) == 0, "%s", hc_last_error());
	{
		struct hc_xfer_req xr = { .pages = pg, .n = N, .state_slots = ss, .flags = HC_XFER_COMMIT };
		ck_assert_ok(hc_dev_store(d, &xr, &x));
		ck_assert_msg(hc_xfer_free(x) == 0, "%s", hc_last_error());
	}
	ck_assert_ok(hc_dev_stats(d, &st));
	ck_assert_uint_eq(st.copies, 2);
	ck_assert_ok(hc_dev_close(d));
	base = (uintptr_t)dst;
	ck_assert_ok(hc_dev_open(p, &ds, &d));
	{
		struct hc_xfer_req xr = { .pages = pg, .n = N, .state_slots = ss };
		ck_assert_ok(hc_dev_load(d, &xr, &x));
		ck_assert_msg(hc_xfer_free(x) == 0, "%s", hc_last_error());
	}
	a = to_host(src, (size_t)N * 4096);
	b = to_host(dst, (size_t)N * 4096);
	ck_assert_int_eq(memcmp(a, b, (size_t)N * 4096), 0);
	free(a);
	free(b);
	ck_assert_ok(hc_dev_close(d));
	cudaFree(src);
	cudaFree(dst);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* A stream waits for layer l's event and then reads layer l. */
START_TEST(layer_events)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, NPAGES, 100, 4);
	struct gdev a, b;
	static hc_key_t k[NP];
	static hc_page_t pg[NP];
	static uint8_t skip[NP];
	static uint64_t sl[NP * T], ss[NP];
	struct hc_reserve_req rq = { .keys = k, .nkeys = NP };
	cudaStream_t user;
	uint32_t pres = 0;
	void *copy;
	hc_xfer *x;

	srand(5);
	gdev_open(&a, p, 0, HC_PATH_AUTO, 0);
	gdev_open(&b, p, 0, HC_PATH_AUTO, 0);
	fill_random(a.k[1], a.nslots * a.kv_bytes, 9);
	hct_keys(k, NP, 78);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), NP);
	page_blocks(sl, NP);
	hct_perm(ss, NP, NP);
	{
		/* Rank 0 stores; rank 1 is not here, so page 0 is committed whole
		 * by hand, and only rank 0's bytes are compared. */
		struct hc_xfer_req xr = { .pages = pg, .n = NP, .slots = sl, .state_slots = ss };
		ck_assert_ok(hc_dev_store(a.dev, &xr, &x));
		ck_assert_ptr_nonnull(hc_xfer_layer_event(x, 1));
		ck_assert_int_eq(hc_xfer_free(x), 0);
	}
	ck_assert_ok(hc_page_presence(p, pg[0], &pres));
	ck_assert_int_ge(hc_page_commit(p, pg[0], hc_page_needed(p, pres)), 0);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[0]), NULL, NULL, NULL), HC_PAGE_READY);
	CK_CUDA(cudaStreamCreate(&user));
	CK_CUDA(cudaMalloc(&copy, T * a.kv_bytes));
	{
		struct hc_xfer_req xr = { .pages = pg, .n = 1, .slots = sl, .state_slots = ss };
		uint8_t *want, *got;
		ck_assert_ok(hc_dev_load(b.dev, &xr, &x));
		ck_assert_uint_eq(hc_xfer_layers(x), 2);
		/* the user's stream copies layer 1's K of page 0 once the event says it is in */
		CK_CUDA(cudaStreamWaitEvent(user, (cudaEvent_t)hc_xfer_layer_event(x, 1), 0));
		CK_CUDA(cudaMemcpyAsync(copy, (uint8_t *)b.k[1] + sl[0] * b.kv_bytes, T * b.kv_bytes,
					cudaMemcpyDeviceToDevice, user));
		CK_CUDA(cudaStreamSynchronize(user));
		ck_assert_int_eq(hc_xfer_layer_done(x, 1), 1);
		ck_assert_int_eq(hc_xfer_layer_done(x, 0), 1);
		want = to_host((uint8_t *)a.k[1] + sl[0] * a.kv_bytes, T * a.kv_bytes);
		got = to_host(copy, T * b.kv_bytes);
		ck_assert_int_eq(memcmp(want, got, T * a.kv_bytes), 0);
		free(want);
		free(got);
		ck_assert_int_eq(hc_xfer_free(x), 0);
	}
	cudaFree(copy);
	cudaStreamDestroy(user);
	gdev_close(&a);
	gdev_close(&b);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

START_TEST(errors)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, NPAGES, 100, 4);
	uint64_t host[2], hst[2];
	uint8_t *buf = malloc(NP * T * 128 * 4 + NP * 1024 * 2);
	struct hc_dev_comp c[2] = {
		{ .comp = 0, .k = host, .v = host, .token_bytes = 128, .token_stride = 128, .slots = NP * T },
		{ .comp = 1, .k = hst, .token_bytes = 1024, .token_stride = 1024, .slots = NP },
	};
	struct hc_dev_spec s = { .kind = HC_DEV_CUDA, .tp_size = 2, .comps = c, .ncomp = 2 };
	uint64_t vv[2];
	struct gdev g;
	hc_dev *d;
	int n = 0;

	for (int l = 0; l < 2; l++) {
		host[l] = (uintptr_t)buf + (uint64_t)l * NP * T * 128;
		vv[l] = (uintptr_t)buf + (uint64_t)(2 + l) * NP * T * 128;
		hst[l] = (uintptr_t)buf + (uint64_t)4 * NP * T * 128 + (uint64_t)l * NP * 1024;
	}
	c[0].v = vv;
	/* host memory is not the device's */
	ck_assert_err(hc_dev_open(p, &s, &d), EINVAL);
	ck_assert_msg_has("is not memory of CUDA device 0");
	CK_CUDA(cudaGetDeviceCount(&n));
	s.device = n;
	ck_assert_err(hc_dev_open(p, &s, &d), EINVAL);
	ck_assert_msg_has("does not exist");
	/* a registration chunk that is not whole huge pages */
	gdev_open(&g, p, 0, HC_PATH_AUTO, 0);
	{
		struct hc_dev_spec s2 = { .kind = HC_DEV_CUDA, .tp_size = 2, .comps = g.comp, .ncomp = 2,
					  .reg_chunk = 3u << 20 };
		hc_pool *q = hct_attach(name, 0); /* another handle: registered anew */
		ck_assert_err(hc_dev_open(q, &s2, &d), EINVAL);
		ck_assert_msg_has("multiple of 2 MiB");
		hc_pool_detach(q);
	}
	gdev_close(&g);
	free(buf);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

int main(void)
{
	pid_t pid = fork();
	Suite *s;
	TCase *tc;
	int st = 0;

	if (pid == 0)
		_exit(hct_cuda_devices() > 0 ? 0 : 1);
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		printf("test_cuda: no CUDA device here: skipped\n");
		return 77; /* before the suite exists: nothing for LeakSanitizer */
	}
	s = suite_create("cuda");
	tc = tcase_create("cuda");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, roundtrip, HC_PATH_AUTO, HC_PATH_KERNEL + 1);
	tcase_add_test(tc, run_across_chunks);
	tcase_add_test(tc, layer_events);
	tcase_add_test(tc, errors);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
