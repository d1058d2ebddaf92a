/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_suite.c - the cases of cuda_suite.h: both ranks of a TP 2 engine
 * store into the pool and load into other slots of fresh devices, on each
 * path, the pool registered in 2 MiB chunks; and a run longer than a chunk
 * cut at the chunk's end, and nowhere else.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cuda_suite.h"

#define CHUNK (2u << 20)

const struct cs_rt *cs_rt;

static struct cs_seen seen(void)
{
	struct cs_seen s = { 0 };

	cs_rt->seen(&s);
	return s;
}

void cs_no_violations(void)
{
	if (cs_rt->seen) {
		struct cs_seen s = seen();
		ck_assert_msg(s.violations == 0, "%u violations, first: %s", s.violations, s.why);
	}
}

void cs_fill(void *d, size_t n, unsigned seed)
{
	uint8_t *h = malloc(n);

	ck_assert_ptr_nonnull(h);
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		h[i] = (uint8_t)(seed >> 16);
	}
	cs_rt->put(d, h, n);
	free(h);
}

uint8_t *cs_to_host(const void *d, size_t n)
{
	uint8_t *h = malloc(n);

	ck_assert_ptr_nonnull(h);
	cs_rt->get(h, d, n);
	return h;
}

int cs_dev_open(struct cs_dev *g, hc_pool *p, uint32_t rank, enum hc_dev_path path, uint64_t reg_chunk)
{
	struct hc_dev_spec s = { .size = sizeof(struct hc_dev_spec),
				 .kind = HC_DEV_CUDA,
				 .device = 0,
				 .tp_size = 2,
				 .tp_rank = rank,
				 .comps = g->comp,
				 .ncomp = 2,
				 .path = path,
				 .reg_threads = 3,
				 .reg_chunk = reg_chunk };

	memset(g, 0, sizeof(*g));
	for (int l = 0; l < 2; l++) {
		g->k[l] = cs_rt->alloc(KV_POOL);
		g->v[l] = cs_rt->alloc(KV_POOL);
		g->st[l] = cs_rt->alloc(NP * 1024);
		g->ka[l] = (uintptr_t)g->k[l];
		g->va[l] = (uintptr_t)g->v[l];
		g->sa[l] = (uintptr_t)g->st[l];
	}
	g->comp[0] = (struct hc_dev_comp){ .size = sizeof(struct hc_dev_comp),
					   .comp = 0,
					   .k = g->ka,
					   .v = g->va,
					   .token_bytes = KVB,
					   .token_stride = KVB,
					   .slots = NP * T };
	g->comp[1] = (struct hc_dev_comp){ .size = sizeof(struct hc_dev_comp),
					   .comp = 1,
					   .k = g->sa,
					   .token_bytes = 1024,
					   .token_stride = 1024,
					   .slots = NP };
	return hc_dev_open(p, &s, &g->dev);
}

void cs_dev_fill(struct cs_dev *g, unsigned seed)
{
	for (unsigned l = 0; l < 2; l++) {
		cs_fill(g->k[l], KV_POOL, 100 * seed + l);
		cs_fill(g->v[l], KV_POOL, 200 * seed + l);
		cs_fill(g->st[l], NP * 1024, 300 * seed + l);
	}
}

void cs_dev_close(struct cs_dev *g)
{
	if (g->dev)
		ck_assert_ok(hc_dev_close(g->dev));
	for (int l = 0; l < 2; l++) {
		cs_rt->free(g->k[l]);
		cs_rt->free(g->v[l]);
		cs_rt->free(g->st[l]);
	}
}

void cs_page_blocks(uint64_t *slots, unsigned n)
{
	uint64_t blk[NP];

	hct_perm(blk, n, NP);
	for (unsigned i = 0; i < n; i++)
		for (unsigned t = 0; t < T; t++)
			slots[i * T + t] = blk[i] * T + t;
}

/* A transfer's token slots: in page blocks, or scattered. */
static void slots_of(uint64_t *slots, int blocks)
{
	if (blocks)
		cs_page_blocks(slots, NP);
	else
		hct_perm(slots, NP * T, NP * T);
}

/* Both ranks store into the pool, then load into other slots of fresh devices. */
START_TEST(roundtrip)
{
	enum hc_dev_path path = (enum hc_dev_path)_i;
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 256, 100, 4);
	uint64_t env_bytes = (uint64_t)p->g.npages * p->g.envelope_bytes;
	uint64_t env_chunks = (env_bytes + CHUNK - 1) / CHUNK;
	struct cs_dev a[2], b[2];
	static hc_key_t k[NP];
	static hc_page_t pg[NP];
	static uint8_t skip[NP];
	static uint64_t s1[NP * T], s2[NP * T], ss1[NP], ss2[NP];
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = NP };
	struct hc_dev_stats st;
	hc_xfer *x;

	if (cs_rt->begin)
		cs_rt->begin();
	srand(11 + _i);
	for (int r = 0; r < 2; r++) {
		ck_assert_msg(cs_dev_open(&a[r], p, (uint32_t)r, path, CHUNK) == 0, "%s", hc_last_error());
		ck_assert_msg(cs_dev_open(&b[r], p, (uint32_t)r, path, 0) == 0, "%s", hc_last_error());
		cs_dev_fill(&a[r], (unsigned)r);
	}
	/* one registration for the pool handle, in 2 MiB chunks */
	ck_assert_ok(hc_dev_stats(b[1].dev, &st, sizeof(st)));
	ck_assert_uint_gt(st.reg_ns, 0);
	ck_assert_uint_eq(st.reg_bytes, env_bytes);
	ck_assert_uint_eq(st.reg_chunks, env_chunks);
	ck_assert_uint_ge(st.reg_chunks, 3);
	ck_assert_uint_eq(st.reg_threads, 3);
	if (cs_rt->seen)
		ck_assert_uint_eq(seen().regs, env_chunks);
	hct_keys(k, NP, 77);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), NP);
	slots_of(s1, cs_rt->page_blocks && path != HC_PATH_KERNEL); /* the kernel path scatters */
	hct_perm(ss1, NP, NP);
	for (int r = 0; r < 2; r++) {
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = NP,
					  .slots = s1,
					  .state_slots = ss1,
					  .flags = HC_XFER_COMMIT | HC_XFER_SYNC };
		/* a CUDA device copies on its own stream, never on the caller's thread */
		ck_assert_err(hc_dev_store(a[r].dev, &xr, &x), EINVAL);
		ck_assert_msg_has("HC_XFER_SYNC");
		xr.flags = HC_XFER_COMMIT;
		ck_assert_ok(hc_dev_store(a[r].dev, &xr, &x));
		ck_assert_msg(hc_xfer_free(x) == 0, "store: %s", hc_last_error());
	}
	for (int i = 0; i < NP; i++)
		ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[i]), NULL, NULL, NULL), HC_PAGE_READY);
	slots_of(s2, cs_rt->page_blocks);
	hct_perm(ss2, NP, NP);
	for (int r = 0; r < 2; r++) {
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = NP,
					  .slots = s2,
					  .state_slots = ss2 };
		unsigned launches = cs_rt->seen ? seen().launches : 0;
		ck_assert_ok(hc_dev_load(b[r].dev, &xr, &x));
		ck_assert_msg(hc_xfer_free(x) == 0, "load: %s", hc_last_error());
		ck_assert_ok(hc_dev_stats(b[r].dev, &st, sizeof(st)));
		ck_assert_uint_eq(st.loads, 1);
		ck_assert_uint_eq(st.load_bytes, (uint64_t)NP * 2 * (2 * T * KVB + 1024));
		if (path == HC_PATH_DIRECT)
			ck_assert_uint_eq(st.direct_layers, 2);
		else if (path == HC_PATH_KERNEL || !cs_rt->page_blocks)
			ck_assert_uint_eq(st.kernel_layers, 2);
		if (path == HC_PATH_DIRECT)
			ck_assert_uint_eq(st.kernel_layers, 0);
		if (cs_rt->seen)
			ck_assert_uint_eq(seen().launches - launches, st.kernel_layers); /* one launch a layer */
		for (int l = 0; l < 2; l++) {
			uint8_t *ak = cs_to_host(a[r].k[l], KV_POOL), *av = cs_to_host(a[r].v[l], KV_POOL);
			uint8_t *bk = cs_to_host(b[r].k[l], KV_POOL), *bv = cs_to_host(b[r].v[l], KV_POOL);
			uint8_t *as = cs_to_host(a[0].st[l], NP * 1024), *bs = cs_to_host(b[r].st[l], NP * 1024);
			for (unsigned i = 0; i < NP * T; i++) {
				ck_assert_msg(memcmp(bk + s2[i] * KVB, ak + s1[i] * KVB, KVB) == 0,
					      "rank %d layer %d K token %u", r, l, i);
				ck_assert_msg(memcmp(bv + s2[i] * KVB, av + s1[i] * KVB, KVB) == 0,
					      "rank %d layer %d V token %u", r, l, i);
			}
			/* the replicated state, as rank 0 wrote it */
			for (unsigned i = 0; i < NP; i++)
				ck_assert_msg(memcmp(bs + ss2[i] * 1024, as + ss1[i] * 1024, 1024) == 0,
					      "rank %d layer %d state %u", r, l, i);
			free(ak), free(av), free(bk), free(bv), free(as), free(bs);
		}
	}
	cs_no_violations();
	for (int r = 0; r < 2; r++) {
		cs_dev_close(&a[r]);
		cs_dev_close(&b[r]);
	}
	if (cs_rt->seen) {
		struct cs_seen s = seen();
		ck_assert_uint_eq(s.events, 0);
		ck_assert_uint_eq(s.pinned, 0);
		ck_assert_uint_eq(s.regs, env_chunks); /* until detach */
	}
	hc_pool_detach(p);
	if (cs_rt->seen) {
		struct cs_seen s = seen();
		ck_assert_uint_eq(s.regs, 0);
		ck_assert_uint_eq(s.allocs, 0); /* the index scratch was freed at close */
	}
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

static int cmp_id(const void *a, const void *b)
{
	uint32_t x = HC_PAGE_ID(*(const hc_page_t *)a), y = HC_PAGE_ID(*(const hc_page_t *)b);

	return (x > y) - (x < y);
}

/* A 4 MiB run over 2 MiB chunks: two copies, each ending at a chunk's end, and the bytes whole. */
START_TEST(run_across_chunks)
{
	const char *name = hct_name();
	struct hc_component_spec c = { .size = sizeof(struct hc_component_spec),
				       .name = "st",
				       .dtype = HC_DTYPE_F32,
				       .kind = HC_COMP_STATE,
				       .sharding = HC_REPLICATED,
				       .bytes_per_layer = 4096,
				       .layers = 1 };
	struct hc_pool_spec s = { .size = sizeof(struct hc_pool_spec),
				  .name = name,
				  .model_id = "t/split",
				  .page_tokens = 16,
				  .tp_size = 1,
				  .comps = &c,
				  .ncomp = 1,
				  .capacity_pages = 1024,
				  .max_ranks = 4,
				  .flags = HC_CREATE_NO_POPULATE };
	enum { N = 1024 };
	static hc_key_t k[N];
	static hc_page_t pg[N];
	static uint8_t skip[N];
	static uint64_t ss[N];
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = N };
	uint64_t base;
	struct hc_dev_comp dc = { .size = sizeof(struct hc_dev_comp),
				  .comp = 0,
				  .k = &base,
				  .token_bytes = 4096,
				  .token_stride = 4096,
				  .slots = N };
	struct hc_dev_spec ds = { .size = sizeof(struct hc_dev_spec),
				  .kind = HC_DEV_CUDA,
				  .tp_size = 1,
				  .comps = &dc,
				  .ncomp = 1,
				  .path = HC_PATH_DIRECT,
				  .reg_chunk = CHUNK };
	struct hc_dev_stats st;
	void *src, *dst;
	uint8_t *a, *b;
	hc_dev *d;
	hc_pool *p;
	hc_xfer *x;

	if (cs_rt->begin)
		cs_rt->begin();
	ck_assert_ok(hc_pool_create(&s));
	p = hct_attach(name, 0);
	ck_assert_uint_eq(p->g.envelope_bytes, 4096);
	src = cs_rt->alloc((size_t)N * 4096);
	dst = cs_rt->alloc((size_t)N * 4096);
	cs_fill(src, (size_t)N * 4096, 17);
	hct_keys(k, N, 79);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), N);
	qsort(pg, N, sizeof(pg[0]), cmp_id);
	for (unsigned i = 0; i < N; i++)
		ss[i] = HC_PAGE_ID(pg[i]); /* slot i holds page i: the whole pool is one run */
	base = (uintptr_t)src;
	ck_assert_msg(hc_dev_open(p, &ds, &d) == 0, "%s", hc_last_error());
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = N,
					  .state_slots = ss,
					  .flags = HC_XFER_COMMIT };
		ck_assert_ok(hc_dev_store(d, &xr, &x));
		ck_assert_msg(hc_xfer_free(x) == 0, "%s", hc_last_error());
	}
	ck_assert_ok(hc_dev_stats(d, &st, sizeof(st)));
	ck_assert_uint_eq(st.copies, 2);
	if (cs_rt->seen) {
		struct cs_seen sn = seen();
		ck_assert_uint_eq(sn.copies, 2);
		ck_assert_uint_eq(sn.at_chunk_end, 2);
	}
	ck_assert_ok(hc_dev_close(d));
	base = (uintptr_t)dst;
	ck_assert_ok(hc_dev_open(p, &ds, &d));
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req), .pages = pg, .n = N, .state_slots = ss };
		ck_assert_ok(hc_dev_load(d, &xr, &x));
		ck_assert_msg(hc_xfer_free(x) == 0, "%s", hc_last_error());
	}
	a = cs_to_host(src, (size_t)N * 4096);
	b = cs_to_host(dst, (size_t)N * 4096);
	ck_assert_int_eq(memcmp(a, b, (size_t)N * 4096), 0);
	free(a);
	free(b);
	cs_no_violations();
	ck_assert_ok(hc_dev_close(d));
	cs_rt->free(src);
	cs_rt->free(dst);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

TCase *cs_tcase(const struct cs_rt *rt, const char *name, double timeout)
{
	TCase *tc = tcase_create(name);

	cs_rt = rt;
	tcase_set_timeout(tc, timeout);
	tcase_add_loop_test(tc, roundtrip, HC_PATH_AUTO, HC_PATH_KERNEL + 1);
	tcase_add_test(tc, run_across_chunks);
	return tc;
}
