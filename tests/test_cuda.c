/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cuda.c - the CUDA device path on a real GPU: cuda_suite.c's round
 * trips through the pool by both ranks of a TP 2 engine on each path and
 * its run longer than a chunk cut at the chunk's end, here on the device;
 * per-layer events a stream can wait on, and the errors only a CUDA device
 * has.
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

#include "cuda_suite.h"

#define CK_CUDA(call) ck_assert_msg((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

#define NPAGES 256 /* about 5 MiB of envelopes: three 2 MiB registration chunks */

/* ---- the runtime: device memory, reached by synchronous copies */

static void *d_alloc(size_t n)
{
	void *d;

	CK_CUDA(cudaMalloc(&d, n));
	CK_CUDA(cudaMemset(d, 0, n));
	/* The library's stream does not wait for the default one: finish the memset. */
	CK_CUDA(cudaDeviceSynchronize());
	return d;
}

static void d_free(void *d)
{
	cudaFree(d);
}

static void d_put(void *d, const void *h, size_t n)
{
	CK_CUDA(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
	CK_CUDA(cudaDeviceSynchronize()); /* a pageable copy may return before it lands */
}

static void d_get(void *h, const void *d, size_t n)
{
	CK_CUDA(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

static const struct cs_rt gpu = {
	.alloc = d_alloc,
	.free = d_free,
	.put = d_put,
	.get = d_get,
	.page_blocks = 1,
};

static void gdev_open(struct cs_dev *g, hc_pool *p, uint32_t rank, enum hc_dev_path path, uint64_t reg_chunk)
{
	ck_assert_msg(cs_dev_open(g, p, rank, path, reg_chunk) == 0, "hc_dev_open: %s", hc_last_error());
}

/* A stream waits for layer l's event and then reads layer l. */
START_TEST(layer_events)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, NPAGES, 100, 4);
	struct cs_dev a, b;
	static hc_key_t k[NP];
	static hc_page_t pg[NP];
	static uint8_t skip[NP];
	static uint64_t sl[NP * T], ss[NP];
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = NP };
	cudaStream_t user;
	uint32_t pres = 0;
	void *copy;
	hc_xfer *x;

	srand(5);
	gdev_open(&a, p, 0, HC_PATH_AUTO, 0);
	gdev_open(&b, p, 0, HC_PATH_AUTO, 0);
	cs_fill(a.k[1], KV_POOL, 9);
	hct_keys(k, NP, 78);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), NP);
	cs_page_blocks(sl, NP);
	hct_perm(ss, NP, NP);
	{
		/* Rank 0 stores; rank 1 is not here, so page 0 is committed whole
		 * by hand, and only rank 0's bytes are compared. */
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = NP,
					  .slots = sl,
					  .state_slots = ss };
		ck_assert_ok(hc_dev_store(a.dev, &xr, &x));
		ck_assert_ptr_nonnull(hc_xfer_layer_event(x, 1));
		ck_assert_int_eq(hc_xfer_free(x), 0);
	}
	ck_assert_ok(hc_page_presence(p, pg[0], &pres));
	ck_assert_int_ge(hc_page_commit(p, pg[0], hc_page_needed(p, pres)), 0);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[0]), NULL, NULL, NULL), HC_PAGE_READY);
	CK_CUDA(cudaStreamCreate(&user));
	CK_CUDA(cudaMalloc(&copy, T * KVB));
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 1,
					  .slots = sl,
					  .state_slots = ss };
		uint8_t *want, *got;
		ck_assert_ok(hc_dev_load(b.dev, &xr, &x));
		ck_assert_uint_eq(hc_xfer_layers(x), 2);
		/* the user's stream copies layer 1's K of page 0 once the event says it is in */
		CK_CUDA(cudaStreamWaitEvent(user, (cudaEvent_t)hc_xfer_layer_event(x, 1), 0));
		CK_CUDA(cudaMemcpyAsync(copy, b.k[1] + sl[0] * KVB, T * KVB, cudaMemcpyDeviceToDevice, user));
		CK_CUDA(cudaStreamSynchronize(user));
		ck_assert_int_eq(hc_xfer_layer_done(x, 1), 1);
		ck_assert_int_eq(hc_xfer_layer_done(x, 0), 1);
		want = cs_to_host(a.k[1] + sl[0] * KVB, T * KVB);
		got = cs_to_host(copy, T * KVB);
		ck_assert_int_eq(memcmp(want, got, T * KVB), 0);
		free(want);
		free(got);
		ck_assert_int_eq(hc_xfer_free(x), 0);
	}
	cudaFree(copy);
	cudaStreamDestroy(user);
	cs_dev_close(&a);
	cs_dev_close(&b);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

START_TEST(errors)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, NPAGES, 100, 4);
	uint64_t host[2], hst[2];
	uint8_t *buf = malloc(KV_POOL * 4 + NP * 1024 * 2);
	struct hc_dev_comp c[2] = {
		{ .size = sizeof(struct hc_dev_comp),
		  .comp = 0,
		  .k = host,
		  .v = host,
		  .token_bytes = KVB,
		  .token_stride = KVB,
		  .slots = NP * T },
		{ .size = sizeof(struct hc_dev_comp),
		  .comp = 1,
		  .k = hst,
		  .token_bytes = 1024,
		  .token_stride = 1024,
		  .slots = NP },
	};
	struct hc_dev_spec s = { .size = sizeof(struct hc_dev_spec),
				 .kind = HC_DEV_CUDA,
				 .tp_size = 2,
				 .comps = c,
				 .ncomp = 2 };
	uint64_t vv[2];
	struct cs_dev g;
	hc_dev *d;
	int n = 0;

	for (int l = 0; l < 2; l++) {
		host[l] = (uintptr_t)buf + (uint64_t)l * KV_POOL;
		vv[l] = (uintptr_t)buf + (uint64_t)(2 + l) * KV_POOL;
		hst[l] = (uintptr_t)buf + (uint64_t)4 * KV_POOL + (uint64_t)l * NP * 1024;
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
		struct hc_dev_spec s2 = { .size = sizeof(struct hc_dev_spec),
					  .kind = HC_DEV_CUDA,
					  .tp_size = 2,
					  .comps = g.comp,
					  .ncomp = 2,
					  .reg_chunk = 3u << 20 };
		hc_pool *q = hct_attach(name, 0); /* another handle: registered anew */
		ck_assert_err(hc_dev_open(q, &s2, &d), EINVAL);
		ck_assert_msg_has("multiple of 2 MiB");
		hc_pool_detach(q);
	}
	cs_dev_close(&g);
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
	tc = cs_tcase(&gpu, "cuda", 120);
	tcase_add_test(tc, layer_events);
	tcase_add_test(tc, errors);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
