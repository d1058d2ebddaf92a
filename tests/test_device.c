/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_device.c - layer-wise loads and stores through the host
 * implementation of the device API (HC_DEV_HOST): round trips through the
 * pool by every rank of an engine, per-layer marks in order, a pool laid
 * out for TP 8 read by a TP 2 engine, and the errors.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hicache/device.h>

#include "hct.h"

/* The path every device of a test copies on (the looped tests set it). */
static enum hc_dev_path g_path = HC_PATH_AUTO;

/* One rank's "device": K, V (and state) pools per layer, in host memory. */
struct rank_dev {
	unsigned layers;
	uint64_t kv_bytes, st_bytes, nslots, nstate;
	uint8_t *k[8], *v[8], *st[8];
	uint64_t ka[8], va[8], sa[8];
	struct hc_dev_comp comp[2];
	hc_dev *dev;
};

static void rank_open(struct rank_dev *r, hc_pool *p, uint32_t tp, uint32_t rank, uint64_t nslots, int fill)
{
	struct hc_component_info kv, st;
	unsigned nc = 1;
	struct hc_pool_info pi;

	memset(r, 0, sizeof(*r));
	hc_pool_info(p, &pi, sizeof(pi));
	hc_pool_component(p, 0, &kv, sizeof(kv));
	r->layers = kv.layers;
	r->nslots = nslots;
	r->nstate = 16;
	r->kv_bytes = (uint64_t)kv.kv_heads / (tp <= kv.kv_heads ? tp : kv.kv_heads) * kv.head_bytes;
	for (unsigned l = 0; l < kv.layers; l++) {
		r->k[l] = malloc(nslots * r->kv_bytes);
		r->v[l] = malloc(nslots * r->kv_bytes);
		for (uint64_t b = 0; b < nslots * r->kv_bytes; b++) {
			r->k[l][b] = fill ? (uint8_t)rand() : 0;
			r->v[l][b] = fill ? (uint8_t)rand() : 0;
		}
		r->ka[l] = (uintptr_t)r->k[l];
		r->va[l] = (uintptr_t)r->v[l];
	}
	r->comp[0] = (struct hc_dev_comp){ .size = sizeof(struct hc_dev_comp),
					   .comp = 0,
					   .k = r->ka,
					   .v = r->va,
					   .token_bytes = r->kv_bytes,
					   .token_stride = r->kv_bytes,
					   .slots = nslots };
	if (pi.ncomp > 1) {
		hc_pool_component(p, 1, &st, sizeof(st));
		r->st_bytes = st.bytes_per_layer;
		for (unsigned l = 0; l < st.layers; l++) {
			r->st[l] = calloc(r->nstate, r->st_bytes);
			for (uint64_t b = 0; fill && b < r->nstate * r->st_bytes; b++)
				r->st[l][b] = (uint8_t)rand();
			r->sa[l] = (uintptr_t)r->st[l];
		}
		r->comp[1] = (struct hc_dev_comp){ .size = sizeof(struct hc_dev_comp),
						   .comp = 1,
						   .k = r->sa,
						   .token_bytes = r->st_bytes,
						   .token_stride = r->st_bytes,
						   .slots = r->nstate };
		nc = 2;
	}
	{
		struct hc_dev_spec s = { .size = sizeof(struct hc_dev_spec),
					 .kind = HC_DEV_HOST,
					 .tp_size = tp,
					 .tp_rank = rank,
					 .comps = r->comp,
					 .ncomp = nc,
					 .path = g_path };
		ck_assert_ok(hc_dev_open(p, &s, &r->dev));
	}
}

static void rank_close(struct rank_dev *r)
{
	ck_assert_ok(hc_dev_close(r->dev));
	for (unsigned l = 0; l < 8; l++) {
		free(r->k[l]);
		free(r->v[l]);
		free(r->st[l]);
	}
}

START_TEST(roundtrip_tp2)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 16, 100, 4); /* kv: 4 heads x 64 B, 2 layers; state: replicated */
	struct rank_dev a[2], b[2];
	hc_key_t k[6];
	hc_page_t pg[6];
	uint8_t skip[6];
	uint64_t s1[6 * 16], s2[6 * 16], ss1[6], ss2[6];
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 6 };
	struct hc_dev_stats st;
	hc_xfer *x;

	g_path = (enum hc_dev_path)_i;
	srand(7);
	for (int r = 0; r < 2; r++) {
		rank_open(&a[r], p, 2, (uint32_t)r, 128, 1);
		rank_open(&b[r], p, 2, (uint32_t)r, 128, 0);
	}
	hct_keys(k, 6, 40);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), 6);
	hct_perm(s1, 6 * 16, 128);
	hct_perm(ss1, 6, 16);
	/* rank 0 stores: its group and the replicated state; the page waits for rank 1 */
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 6,
					  .slots = s1,
					  .state_slots = ss1,
					  .flags = HC_XFER_COMMIT };
		ck_assert_ok(hc_dev_store(a[0].dev, &xr, &x));
		ck_assert_int_eq(hc_xfer_layers(x), 2);
		ck_assert_int_eq(hc_xfer_free(x), 0);
		ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[0]), NULL, NULL, NULL), HC_PAGE_RESERVED);
		ck_assert_ok(hc_dev_store(a[1].dev, &xr, &x));
		ck_assert_int_eq(hc_xfer_free(x), 0);
		for (int i = 0; i < 6; i++)
			ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[i]), NULL, NULL, NULL), HC_PAGE_READY);
	}
	/* both ranks load into other slots of fresh devices */
	hct_perm(s2, 6 * 16, 128);
	hct_perm(ss2, 6, 16);
	for (int r = 0; r < 2; r++) {
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 6,
					  .slots = s2,
					  .state_slots = ss2 };
		ck_assert_ok(hc_dev_load(b[r].dev, &xr, &x));
		ck_assert_int_eq(hc_xfer_free(x), 0);
		/* 6 pages, 2 layers: K and V of 16 tokens of 128 bytes, and 1024 bytes of state */
		ck_assert_ok(hc_dev_stats(b[r].dev, &st, sizeof(st)));
		ck_assert_uint_eq(st.loads, 1);
		ck_assert_uint_eq(st.stores, 0);
		ck_assert_uint_eq(st.load_bytes, 6 * 2 * (2 * 16 * 128 + 1024));
		ck_assert_uint_eq(st.kernel_layers, g_path == HC_PATH_KERNEL ? 2 : 0);
		ck_assert_uint_eq(st.direct_layers, g_path == HC_PATH_KERNEL ? 0 : 2);
		ck_assert_uint_eq(st.reg_ns, 0); /* host memory is not registered */
		for (unsigned l = 0; l < 2; l++) {
			for (unsigned i = 0; i < 6 * 16; i++) {
				ck_assert_int_eq(memcmp(b[r].k[l] + s2[i] * 128, a[r].k[l] + s1[i] * 128, 128), 0);
				ck_assert_int_eq(memcmp(b[r].v[l] + s2[i] * 128, a[r].v[l] + s1[i] * 128, 128), 0);
			}
			/* the replicated state, as rank 0 wrote it, for every rank */
			for (unsigned i = 0; i < 6; i++)
				ck_assert_int_eq(memcmp(b[r].st[l] + ss2[i] * 1024, a[0].st[l] + ss1[i] * 1024, 1024),
						 0);
		}
	}
	for (int r = 0; r < 2; r++) {
		rank_close(&a[r]);
		rank_close(&b[r]);
	}
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* HC_XFER_SYNC: the copy is done, and the pages committed, when the call
 * returns; it runs after the transfers made before it; two threads sync at
 * once; only a host device takes it. */
struct sync_arg {
	hc_dev *dev;
	hc_page_t *pg;
	uint64_t *sl, *ss;
	int rounds, fails;
};

static void *sync_loads(void *arg)
{
	struct sync_arg *a = arg;
	for (int i = 0; i < a->rounds; i++) {
		struct hc_xfer_req xr = {
			.size = sizeof(struct hc_xfer_req),
			.pages = a->pg,
			.n = 4,
			.slots = a->sl,
			.state_slots = a->ss,
			.flags = HC_XFER_SYNC,
		};
		hc_xfer *x;
		if (hc_dev_load(a->dev, &xr, &x) < 0 || hc_xfer_layer_done(x, 1) != 1 || hc_xfer_free(x) != 0)
			a->fails++;
	}
	return NULL;
}

/* A thread that keeps async loads in flight until told to stop, or for 5 s. */
struct stream_arg {
	hc_dev *dev;
	hc_page_t *pg;
	uint64_t *sl, *ss;
	volatile int stop, made, timed_out, ended;
};

static void *stream_loads(void *arg)
{
	struct stream_arg *a = arg;
	static hc_page_t pg[512];
	static uint64_t sl[512 * 16], ss[512];
	struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
				  .pages = pg,
				  .n = 512,
				  .slots = sl,
				  .state_slots = ss };
	hc_xfer *ring[8] = { 0 };
	double t0 = hct_now();

	/* the 8 pages 64 times over: a load the device takes longer to copy
	 * than this thread takes to make, so with 8 in flight the queue never
	 * runs dry */
	for (unsigned i = 0; i < 512; i++) {
		pg[i] = a->pg[i % 8];
		ss[i] = a->ss[i % 8];
		memcpy(sl + i * 16, a->sl + (i % 8) * 16, 16 * sizeof(*sl));
	}
	for (unsigned i = 0;; i = (i + 1) % 8) {
		if (__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE))
			break;
		if (hct_now() - t0 > 5.0) {
			a->timed_out = 1;
			break;
		}
		if (ring[i])
			hc_xfer_free(ring[i]);
		ring[i] = NULL;
		if (hc_dev_load(a->dev, &xr, &ring[i]) < 0)
			break;
		__atomic_add_fetch(&a->made, 1, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&a->ended, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < 8; i++)
		if (ring[i])
			hc_xfer_free(ring[i]);
	return NULL;
}

START_TEST(sync_transfers)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 16, 100, 1); /* kv: 4 heads x 64 B, 2 layers; TP 1 */
	struct rank_dev a, b, c;
	hc_key_t k[8];
	hc_page_t pg[8], hit[8];
	uint8_t skip[8];
	uint64_t s1[8 * 16], s2[8 * 16], s3[8 * 16], ss[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 8 };
	struct hc_lookup_req lq = { .size = sizeof(struct hc_lookup_req), .keys = k, .nkeys = 8 };
	struct hc_dev_stats st;
	hc_xfer *x, *xa;

	srand(11);
	rank_open(&a, p, 1, 0, 128, 1);
	rank_open(&b, p, 1, 0, 128, 0);
	rank_open(&c, p, 1, 0, 256, 0); /* 128 more slots: the sync load's beside the stream's */
	hct_keys(k, 8, 70);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), 8);
	hct_perm(s1, 8 * 16, 128);
	hct_perm(s2, 8 * 16, 128);
	hct_perm(s3, 8 * 16, 128);
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 8,
					  .slots = s1,
					  .state_slots = ss,
					  .flags = HC_XFER_COMMIT | HC_XFER_SYNC };
		ck_assert_ok(hc_dev_store(a.dev, &xr, &x));
		/* READY before any wait: committed on this thread */
		ck_assert_int_eq(hc_lookup(p, &lq, hit), 8);
		ck_assert_int_eq(hc_xfer_layer_done(x, 0), 1);
		ck_assert_int_eq(hc_xfer_layer_done(x, 1), 1);
		ck_assert_int_eq(hc_xfer_free(x), 0);
	}
	{
		/* an async load, then a sync load on the same device into the
		 * same slots in another order: the sync one runs after, so its
		 * bytes are the ones left, and it finds the first finished */
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 8,
					  .slots = s2,
					  .state_slots = ss };
		ck_assert_ok(hc_dev_load(b.dev, &xr, &xa));
		xr.flags = HC_XFER_SYNC;
		xr.slots = s3;
		ck_assert_ok(hc_dev_load(b.dev, &xr, &x));
		ck_assert_int_eq(hc_xfer_layer_done(xa, 1), 1);
		ck_assert_int_eq(hc_xfer_free(x), 0);
		ck_assert_int_eq(hc_xfer_free(xa), 0);
		for (unsigned l = 0; l < 2; l++)
			for (unsigned i = 0; i < 8 * 16; i++) {
				ck_assert_int_eq(memcmp(b.k[l] + s3[i] * 256, a.k[l] + s1[i] * 256, 256), 0);
				ck_assert_int_eq(memcmp(b.v[l] + s3[i] * 256, a.v[l] + s1[i] * 256, 256), 0);
			}
		ck_assert_ok(hc_dev_stats(b.dev, &st, sizeof(st)));
		ck_assert_uint_eq(st.loads, 2);
	}
	{
		/* two threads at once, sync loads of half the pages each */
		pthread_t t[2];
		struct sync_arg sa[2] = { { c.dev, pg, s2, ss, 50, 0 }, { c.dev, pg + 4, s2 + 4 * 16, ss + 4, 50, 0 } };
		for (int i = 0; i < 2; i++)
			ck_assert_int_eq(pthread_create(&t[i], NULL, sync_loads, &sa[i]), 0);
		for (int i = 0; i < 2; i++) {
			pthread_join(t[i], NULL);
			ck_assert_int_eq(sa[i].fails, 0);
		}
		ck_assert_ok(hc_dev_stats(c.dev, &st, sizeof(st)));
		ck_assert_uint_eq(st.loads, 100);
		for (unsigned l = 0; l < 2; l++)
			for (unsigned i = 0; i < 8 * 16; i++)
				ck_assert_int_eq(memcmp(c.k[l] + s2[i] * 256, a.k[l] + s1[i] * 256, 256), 0);
	}
	{
		/* a stream of async loads on the device, one always queued: a
		 * sync load waits for those made before it, not for the stream.
		 * It writes slots of its own: nothing orders it with the stream,
		 * so shared ones would be two unordered writers (a data race,
		 * which ThreadSanitizer reports). */
		pthread_t t;
		uint64_t s4[8 * 16], ss4[8];
		struct stream_arg sa = { .dev = c.dev, .pg = pg, .sl = s2, .ss = ss };
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 8,
					  .slots = s4,
					  .state_slots = ss4,
					  .flags = HC_XFER_SYNC };
		for (unsigned i = 0; i < 8 * 16; i++)
			s4[i] = s3[i] + 128;
		for (unsigned i = 0; i < 8; i++)
			ss4[i] = ss[i] + 8;
		ck_assert_int_eq(pthread_create(&t, NULL, stream_loads, &sa), 0);
		while (__atomic_load_n(&sa.made, __ATOMIC_ACQUIRE) < 16)
			usleep(100);
		ck_assert_ok(hc_dev_load(c.dev, &xr, &x));
		ck_assert_int_eq(hc_xfer_free(x), 0);
		ck_assert_msg(!__atomic_load_n(&sa.ended, __ATOMIC_ACQUIRE),
			      "the sync load waited for the whole stream (%d made)", sa.made);
		__atomic_store_n(&sa.stop, 1, __ATOMIC_RELEASE);
		pthread_join(t, NULL);
		ck_assert_int_eq(sa.timed_out, 0);
	}
	{
		/* a failure is the transfer's result, as without the flag */
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 8,
					  .slots = s2,
					  .state_slots = ss,
					  .flags = HC_XFER_COMMIT | HC_XFER_SYNC };
		ck_assert_err(hc_dev_store(a.dev, &xr, &x), ESTALE); /* READY pages, not reserved */
		xr.flags = HC_XFER_COMMIT | HC_XFER_SYNC | 0x4;
		ck_assert_err(hc_dev_load(a.dev, &xr, &x), EINVAL);
		ck_assert_msg_has("flags 0x7");
	}
	rank_close(&a);
	rank_close(&b);
	rank_close(&c);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* A store whose commit of one page fails still commits the pages after
 * it: page 0 is aborted while rank 1's store into it waits behind a long
 * load, and page 1 must still become READY from rank 1's commit. */
START_TEST(commit_failure_commits_the_rest)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 16, 100, 4); /* TP 2 */
	struct rank_dev a[2];
	hc_key_t k[8];
	hc_page_t pg[8], *big = calloc(2048, sizeof(*big));
	uint8_t skip[8];
	uint64_t sl[8 * 16], ss[8] = { 0, 1, 2, 3, 4, 5, 6, 7 }, *bsl = calloc(2048 * 16, sizeof(*bsl)),
			     *bss = calloc(2048, sizeof(*bss));
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 8 };
	hc_xfer *x, *stall, *late;

	srand(13);
	for (int r = 0; r < 2; r++)
		rank_open(&a[r], p, 2, (uint32_t)r, 128, 1);
	hct_keys(k, 8, 90);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), 8);
	for (unsigned i = 0; i < 8 * 16; i++)
		sl[i] = i;
	/* pages 2..7 READY: both ranks store and commit them */
	for (int r = 0; r < 2; r++) {
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg + 2,
					  .n = 6,
					  .slots = sl,
					  .state_slots = ss,
					  .flags = HC_XFER_COMMIT | HC_XFER_SYNC };
		ck_assert_ok(hc_dev_store(a[r].dev, &xr, &x));
		ck_assert_int_eq(hc_xfer_free(x), 0);
	}
	/* pages 0 and 1: rank 0's shards are in, rank 1's not yet */
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 2,
					  .slots = sl,
					  .state_slots = ss,
					  .flags = HC_XFER_COMMIT | HC_XFER_SYNC };
		ck_assert_ok(hc_dev_store(a[0].dev, &xr, &x));
		ck_assert_int_eq(hc_xfer_free(x), 0);
	}
	/* rank 1: a long load of the READY pages (32 MiB, milliseconds), then its
	 * store of 0 and 1 queued behind it */
	for (unsigned i = 0; i < 2048; i++) {
		big[i] = pg[2 + i % 6];
		bss[i] = i % 6;
		for (unsigned t = 0; t < 16; t++)
			bsl[i * 16 + t] = (i % 6) * 16 + t;
	}
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = big,
					  .n = 2048,
					  .slots = bsl,
					  .state_slots = bss };
		ck_assert_ok(hc_dev_load(a[1].dev, &xr, &stall));
	}
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 2,
					  .slots = sl + 6 * 16,
					  .state_slots = ss + 6,
					  .flags = HC_XFER_COMMIT };
		ck_assert_ok(hc_dev_store(a[1].dev, &xr, &late));
	}
	ck_assert_int_eq(hc_page_abort(p, pg, 1), 1); /* page 0 given up meanwhile */
	ck_assert_int_eq(hc_xfer_free(stall), 0);
	ck_assert_err(hc_xfer_free(late), ESTALE); /* page 0's commit */
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[1]), NULL, NULL, NULL), HC_PAGE_READY);
	for (int r = 0; r < 2; r++)
		rank_close(&a[r]);
	free(big);
	free(bsl);
	free(bss);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* A pool for TP 8 (8 groups of one head), written by 8 ranks, read by TP 4 and TP 2. */
START_TEST(tp8_read_by_tp4_and_tp2)
{
	const char *name = hct_name();
	struct hc_component_spec c = { .size = sizeof(struct hc_component_spec),
				       .name = "kv",
				       .dtype = HC_DTYPE_BF16,
				       .kind = HC_COMP_KV,
				       .sharding = HC_SHARDED,
				       .kv_heads = 8,
				       .head_bytes = 32,
				       .layers = 2 };
	struct hc_pool_spec s = { .size = sizeof(struct hc_pool_spec),
				  .name = name,
				  .model_id = "t/tp8",
				  .page_tokens = 16,
				  .tp_size = 8,
				  .comps = &c,
				  .ncomp = 1,
				  .capacity_pages = 8,
				  .max_ranks = 4,
				  .flags = HC_CREATE_NO_POPULATE };
	struct rank_dev w[8], r2;
	hc_key_t k[4];
	hc_page_t pg[4];
	uint8_t skip[4];
	uint64_t s1[4 * 16], s2[4 * 16];
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 4 };
	hc_pool *p;
	hc_xfer *x;

	g_path = (enum hc_dev_path)_i;
	srand(8);
	ck_assert_ok(hc_pool_create(&s));
	p = hct_attach(name, 0);
	hct_keys(k, 4, 41);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), 4);
	hct_perm(s1, 4 * 16, 64);
	for (uint32_t r = 0; r < 8; r++) {
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 4,
					  .slots = s1,
					  .flags = HC_XFER_COMMIT };
		rank_open(&w[r], p, 8, r, 64, 1);
		ck_assert_uint_eq(w[r].kv_bytes, 32);
		ck_assert_ok(hc_dev_store(w[r].dev, &xr, &x));
		ck_assert_int_eq(hc_xfer_free(x), 0);
	}
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[3]), NULL, NULL, NULL), HC_PAGE_READY);
	hct_perm(s2, 4 * 16, 64);
	for (uint32_t S = 4; S >= 2; S /= 2)
		for (uint32_t rank = 0; rank < S; rank++) {
			struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
						  .pages = pg,
						  .n = 4,
						  .slots = s2 };
			uint32_t hpr = 8 / S, tb = hpr * 32;
			rank_open(&r2, p, S, rank, 64, 0);
			ck_assert_uint_eq(r2.kv_bytes, tb);
			ck_assert_ok(hc_dev_load(r2.dev, &xr, &x));
			ck_assert_int_eq(hc_xfer_free(x), 0);
			/* a TP S token is the heads of 8/S TP 8 ranks, in order */
			for (unsigned l = 0; l < 2; l++)
				for (unsigned i = 0; i < 4 * 16; i++)
					for (unsigned h = 0; h < hpr; h++) {
						const struct rank_dev *src = &w[rank * hpr + h];
						ck_assert_int_eq(memcmp(r2.k[l] + s2[i] * tb + h * 32,
									src->k[l] + s1[i] * 32, 32),
								 0);
						ck_assert_int_eq(memcmp(r2.v[l] + s2[i] * tb + h * 32,
									src->v[l] + s1[i] * 32, 32),
								 0);
					}
			rank_close(&r2);
		}
	for (int r = 0; r < 8; r++)
		rank_close(&w[r]);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* Layers are marked in order, and a marked layer's bytes are in. */
START_TEST(layer_marks_in_order)
{
	const char *name = hct_name();
	struct hc_component_spec c = { .size = sizeof(struct hc_component_spec),
				       .name = "kv",
				       .dtype = HC_DTYPE_BF16,
				       .kind = HC_COMP_KV,
				       .sharding = HC_SHARDED,
				       .kv_heads = 8,
				       .head_bytes = 256,
				       .layers = 8 };
	struct hc_pool_spec s = { .size = sizeof(struct hc_pool_spec),
				  .name = name,
				  .model_id = "t/layers",
				  .page_tokens = 32,
				  .tp_size = 1,
				  .comps = &c,
				  .ncomp = 1,
				  .capacity_pages = 32,
				  .max_ranks = 4,
				  .flags = HC_CREATE_NO_POPULATE };
	struct rank_dev a, b;
	hc_key_t k[32];
	hc_page_t pg[32];
	uint8_t skip[32];
	uint64_t sl[32 * 32];
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 32 };
	hc_pool *p;
	hc_xfer *x;
	unsigned seen = 0, polls = 0;

	g_path = (enum hc_dev_path)_i;
	ck_assert_ok(hc_pool_create(&s));
	p = hct_attach(name, 0);
	rank_open(&a, p, 1, 0, 32 * 32, 1);
	rank_open(&b, p, 1, 0, 32 * 32, 0);
	hct_keys(k, 32, 42);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), 32);
	for (unsigned i = 0; i < 32 * 32; i++)
		sl[i] = i;
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 32,
					  .slots = sl,
					  .flags = HC_XFER_COMMIT };
		ck_assert_ok(hc_dev_store(a.dev, &xr, &x));
		ck_assert_int_eq(hc_xfer_free(x), 0);
	}
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req), .pages = pg, .n = 32, .slots = sl };
		ck_assert_ok(hc_dev_load(b.dev, &xr, &x));
	}
	ck_assert_uint_eq(hc_xfer_layers(x), 8);
	/* poll, last layer first: once a layer reads done, every earlier one
	 * (read after it) must too, since marks only ever go forward */
	while (seen < 8) {
		unsigned done = 0;
		int later_done = 0;
		for (int l = 7; l >= 0; l--) {
			int d = hc_xfer_layer_done(x, (unsigned)l);
			ck_assert_int_ge(d, 0);
			if (later_done && !d)
				ck_abort_msg("a layer after %d is marked, layer %d is not", l, l);
			later_done |= d;
			done += (unsigned)d;
		}
		ck_assert_uint_ge(done, seen);
		seen = done;
		polls++;
	}
	for (unsigned l = 0; l < 8; l++) {
		ck_assert_int_eq(hc_xfer_wait_layer(x, l), 0);
		ck_assert_int_eq(memcmp(a.k[l], b.k[l], 32 * 32 * a.kv_bytes), 0);
		ck_assert_int_eq(memcmp(a.v[l], b.v[l], 32 * 32 * a.kv_bytes), 0);
	}
	ck_assert_int_eq(hc_xfer_free(x), 0);
	ck_assert_uint_gt(polls, 0);
	rank_close(&a);
	rank_close(&b);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

START_TEST(errors)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 100, 4);
	struct rank_dev a;
	hc_key_t k[2];
	hc_page_t pg[2];
	uint8_t skip[2];
	uint64_t sl[2 * 16], ss[2] = { 0, 1 };
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 2 };
	struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
				  .pages = pg,
				  .n = 2,
				  .slots = sl,
				  .state_slots = ss };
	struct hc_dev_spec spec = { .size = sizeof(struct hc_dev_spec), .kind = HC_DEV_CUDA, .tp_size = 2 };
	hc_dev *d;
	hc_xfer *x;

	for (unsigned i = 0; i < 32; i++)
		sl[i] = i;
	rank_open(&a, p, 2, 0, 64, 1);
	spec.comps = a.comp;
	spec.ncomp = 2;
	/* A CUDA device: not in this build, no device here, or host addresses
	 * that are not device memory. */
#ifdef HAVE_CUDA
	if (hct_cuda_devices() == 0) {
		ck_assert_err(hc_dev_open(p, &spec, &d), ENODEV);
		ck_assert_msg_has("no CUDA device");
	} else {
		ck_assert_err(hc_dev_open(p, &spec, &d), EINVAL);
		ck_assert_msg_has("is not memory of CUDA device 0");
	}
#else
	ck_assert_err(hc_dev_open(p, &spec, &d), ENOTSUP);
	ck_assert_msg_has("configure --with-cuda");
#endif
	ck_assert_ptr_null(d);
	spec.kind = (enum hc_dev_kind)7;
	ck_assert_err(hc_dev_open(p, &spec, &d), EINVAL);
	spec.kind = HC_DEV_HOST;
	spec.path = (enum hc_dev_path)3;
	ck_assert_err(hc_dev_open(p, &spec, &d), EINVAL);
	ck_assert_msg_has("path 3");
	spec.path = HC_PATH_AUTO;
	/* a CUDA event to wait for means nothing to host memory */
	xr.after = &spec;
	ck_assert_err(hc_dev_load(a.dev, &xr, &x), EINVAL);
	ck_assert_msg_has("'after'");
	xr.after = NULL;
	hct_keys(k, 2, 43);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), 2);
	/* a load needs READY pages */
	ck_assert_err(hc_dev_load(a.dev, &xr, &x), ESTALE);
	ck_assert_ptr_null(x);
	/* a state component is described: its slots are needed */
	xr.state_slots = NULL;
	ck_assert_err(hc_dev_store(a.dev, &xr, &x), EINVAL);
	ck_assert_msg_has("state_slots");
	xr.state_slots = ss;
	xr.flags = 0x80;
	ck_assert_err(hc_dev_store(a.dev, &xr, &x), EINVAL);
	xr.flags = HC_XFER_COMMIT;
	/* a slot out of the device pool is refused before a byte moves */
	sl[5] = 64;
	ck_assert_err(hc_dev_store(a.dev, &xr, &x), ERANGE);
	ck_assert_msg_has("token 5's slot 64");
	ck_assert_ptr_null(x);
	sl[5] = 5;
	ss[1] = 16;
	ck_assert_err(hc_dev_store(a.dev, &xr, &x), ERANGE);
	ck_assert_msg_has("page 1's state slot 16");
	ss[1] = 1;
	ck_assert_ok(hc_dev_store(a.dev, &xr, &x));
	ck_assert_int_eq(hc_xfer_wait_layer(x, 1), 0);
	ck_assert_err(hc_xfer_wait_layer(x, 2), EINVAL);
	ck_assert_ptr_null(hc_xfer_layer_event(x, 0)); /* host memory has no events */
	ck_assert_msg_has("no CUDA events");
	ck_assert_int_eq(hc_xfer_free(x), 0);
	/* a store needs this process's reservation: the pages are not READY for lack of rank 1 */
	hc_page_abort(p, pg, 2);
	ck_assert_err(hc_dev_store(a.dev, &xr, &x), ESTALE);
	rank_close(&a);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* A store into another rank's reservation is refused before a byte moves. */
START_TEST(store_into_another_ranks_reservation)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 100, 4);
	struct rank_dev a;
	hc_key_t k[1];
	hc_page_t *pg = hct_shared(4096);
	uint64_t sl[16], ss[1] = { 0 };
	int up[2], down[2];
	pid_t child;
	char c = 0;
	hc_xfer *x;

	for (unsigned i = 0; i < 16; i++)
		sl[i] = i;
	hct_keys(k, 1, 44);
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	child = fork();
	if (child == 0) {
		struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 1 };
		uint8_t skip[1];
		hc_pool *q;
		if (hc_pool_attach(name,
				   &(struct hc_attach_opts){ .size = sizeof(struct hc_attach_opts),
							     .flags = HC_ATTACH_NO_POPULATE },
				   &q) < 0 ||
		    hc_reserve(q, &rq, pg, skip) != 1)
			_exit(1);
		if (write(up[1], &c, 1) != 1 || read(down[0], &c, 1) < 0) /* hold it until told */
			_exit(1);
		hc_page_abort(q, pg, 1);
		hc_pool_detach(q);
		_exit(0);
	}
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	rank_open(&a, p, 2, 0, 64, 1);
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 1,
					  .slots = sl,
					  .state_slots = ss };
		ck_assert_err(hc_dev_store(a.dev, &xr, &x), EPERM);
		ck_assert_msg_has("reserved by rank slot");
	}
	ck_assert_int_eq(write(down[1], &c, 1), 1);
	{
		int status;
		ck_assert_int_eq(waitpid(child, &status, 0), child);
		ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	rank_close(&a);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* The pages of an engine's reservation (a reservation ticket builds it in
 * one rank's name): every rank of the engine stores its own shards into
 * them, and a rank with nothing left to write (the page is READY: the
 * others wrote every shard it needs) skips it. */
START_TEST(store_into_the_engines_reservation)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 100, 4);
	struct hc_engine_spec es = { .size = sizeof(struct hc_engine_spec),
				     .engine_id = 7,
				     .tp_size = 2,
				     .tp_rank = 0,
				     .quota_pages = HC_QUOTA_UNLIMITED };
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = NULL, .nkeys = 1 };
	struct rank_dev a;
	hc_key_t k[2];
	hc_page_t *pg = hct_shared(4096);
	uint64_t sl[32], ss[2] = { 0, 1 };
	uint8_t skip[1];
	int up[2], down[2], status;
	pid_t child;
	char c = 0;
	hc_xfer *x;

	for (unsigned i = 0; i < 32; i++)
		sl[i] = i;
	hct_keys(k, 2, 45);
	rq.keys = k;
	ck_assert_ok(hc_engine_join(p, &es));
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), 1); /* this rank's reservation */
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	child = fork();
	if (child == 0) {
		struct hc_engine_spec e1 = es;
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 1,
					  .slots = sl,
					  .state_slots = ss,
					  .flags = HC_XFER_COMMIT };
		struct rank_dev b;
		hc_pool *q;
		hc_xfer *y;
		int ok = 1;
		e1.tp_rank = 1;
		if (hc_pool_attach(name,
				   &(struct hc_attach_opts){ .size = sizeof(struct hc_attach_opts),
							     .flags = HC_ATTACH_NO_POPULATE },
				   &q) < 0 ||
		    hc_engine_join(q, &e1) < 0)
			_exit(1);
		rank_open(&b, q, 2, 1, 16, 1);
		/* rank 1 writes its head group into rank 0's reservation */
		ok &= hc_dev_store(b.dev, &xr, &y) == 0 && hc_xfer_free(y) == 0;
		/* and reserves a page of the replicated state only: rank 0 writes it */
		ok &= hc_reserve(q,
				 &(struct hc_reserve_req){ .size = sizeof(struct hc_reserve_req),
							   .keys = k + 1,
							   .nkeys = 1,
							   .first_depth = 1,
							   .presence = 1u << 1 },
				 pg + 1, skip) == 1;
		if (write(up[1], &c, 1) != 1 || read(down[0], &c, 1) != 1)
			_exit(2);
		/* READY now, both: nothing left of them to write, so nothing is
		 * (page 1 is this rank's own reservation, with no shard of it) */
		xr.n = 2;
		ok &= hc_dev_store(b.dev, &xr, &y) == 0 && hc_xfer_free(y) == 0;
		rank_close(&b);
		hc_engine_leave(q);
		hc_pool_detach(q);
		_exit(ok ? 0 : 3);
	}
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[0]), NULL, NULL, NULL),
			 HC_PAGE_RESERVED); /* rank 0's part is missing */
	rank_open(&a, p, 2, 0, 16, 1);
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 2,
					  .slots = sl,
					  .state_slots = ss,
					  .flags = HC_XFER_COMMIT };
		ck_assert_ok(hc_dev_store(a.dev, &xr, &x));
		ck_assert_ok(hc_xfer_free(x));
	}
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[0]), NULL, NULL, NULL), HC_PAGE_READY);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[1]), NULL, NULL, NULL), HC_PAGE_READY);
	ck_assert_int_eq(write(down[1], &c, 1), 1);
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1: status 0x%x", status);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[0]), NULL, NULL, NULL), HC_PAGE_READY);
	/* this rank's own READY page is no reservation to store into */
	{
		struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
					  .pages = pg,
					  .n = 1,
					  .slots = sl,
					  .state_slots = ss };
		ck_assert_err(hc_dev_store(a.dev, &xr, &x), ESTALE);
	}
	rank_close(&a);
	hc_engine_leave(p);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* MLA: a replicated K/V component described with no V moves its K half
 * alone (one latent vector per token), and rank 0's store makes the page
 * whole; a sharded component without V is refused. */
START_TEST(replicated_k_only)
{
	const char *name = hct_name();
	struct hc_component_spec c[2] = {
		{ .size = sizeof(struct hc_component_spec),
		  .name = "mla",
		  .dtype = HC_DTYPE_BF16,
		  .kind = HC_COMP_KV,
		  .sharding = HC_REPLICATED,
		  .kv_heads = 1,
		  .head_bytes = 96,
		  .layers = 3 },
		{ .size = sizeof(struct hc_component_spec),
		  .name = "kv",
		  .dtype = HC_DTYPE_BF16,
		  .kind = HC_COMP_KV,
		  .sharding = HC_SHARDED,
		  .kv_heads = 2,
		  .head_bytes = 32,
		  .layers = 1 },
	};
	struct hc_pool_spec ps = { .size = sizeof(struct hc_pool_spec),
				   .name = name,
				   .model_id = "t/mla",
				   .page_tokens = 4,
				   .tp_size = 2,
				   .comps = c,
				   .ncomp = 1,
				   .capacity_pages = 8,
				   .flags = HC_CREATE_NO_POPULATE };
	uint8_t src[3][16 * 96], dst[3][16 * 96];
	uint64_t sa[3], da[3], slots[2 * 4], back[2 * 4];
	struct hc_dev_comp dc = { .size = sizeof(dc), .comp = 0, .token_bytes = 96, .token_stride = 96, .slots = 16 };
	struct hc_dev_spec s = { .size = sizeof(s), .kind = HC_DEV_HOST, .tp_size = 2, .comps = &dc, .ncomp = 1 };
	struct hc_component_info ci;
	hc_dev *d0, *d1;
	hc_key_t k[2];
	hc_page_t pg[2];
	uint8_t skip[2];
	struct hc_reserve_req rq = { .size = sizeof(rq), .keys = k, .nkeys = 2 };
	struct hc_xfer_req xr = { .size = sizeof(xr), .pages = pg, .n = 2, .slots = slots, .flags = HC_XFER_COMMIT };
	struct hc_dev_stats st;
	hc_pool *p;
	hc_xfer *x;
	uint8_t *env;

	ck_assert_ok(hc_pool_create(&ps));
	p = hct_attach(name, 0);
	srand(11);
	for (unsigned l = 0; l < 3; l++) {
		for (unsigned b = 0; b < sizeof(src[l]); b++)
			src[l][b] = (uint8_t)rand();
		memset(dst[l], 0, sizeof(dst[l]));
		sa[l] = (uintptr_t)src[l];
		da[l] = (uintptr_t)dst[l];
	}
	hct_keys(k, 2, 90);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), 2);
	/* the V halves of the envelopes hold a pattern the store must leave */
	ck_assert_ok(hc_pool_component(p, 0, &ci, sizeof(ci)));
	for (unsigned i = 0; i < 2; i++)
		for (unsigned l = 0; l < 3; l++)
			memset((uint8_t *)hc_page_envelope(p, pg[i]) + ci.offset + l * 2 * 4 * 96 + 4 * 96, 0xa5,
			       4 * 96);
	hct_perm(slots, 8, 16);
	dc.k = sa; /* v stays NULL */
	ck_assert_ok(hc_dev_open(p, &s, &d0));
	ck_assert_ok(hc_dev_store(d0, &xr, &x));
	ck_assert_int_eq(hc_xfer_free(x), 0);
	for (unsigned i = 0; i < 2; i++) {
		ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg[i]), NULL, NULL, NULL), HC_PAGE_READY);
		env = (uint8_t *)hc_page_envelope(p, pg[i]) + ci.offset;
		for (unsigned l = 0; l < 3; l++)
			for (unsigned t = 0; t < 4; t++) {
				ck_assert_int_eq(
					memcmp(env + l * 2 * 4 * 96 + t * 96, src[l] + slots[i * 4 + t] * 96, 96), 0);
				ck_assert_uint_eq(env[l * 2 * 4 * 96 + 4 * 96 + t * 96], 0xa5);
			}
	}
	ck_assert_ok(hc_dev_stats(d0, &st, sizeof(st)));
	ck_assert_uint_eq(st.store_bytes, 2 * 3 * 4 * 96); /* K alone */
	/* rank 1 loads the latent into other slots */
	dc.k = da;
	s.tp_rank = 1;
	ck_assert_ok(hc_dev_open(p, &s, &d1));
	hct_perm(back, 8, 16);
	xr.slots = back;
	xr.flags = 0;
	ck_assert_ok(hc_dev_load(d1, &xr, &x));
	ck_assert_int_eq(hc_xfer_free(x), 0);
	for (unsigned l = 0; l < 3; l++)
		for (unsigned i = 0; i < 8; i++)
			ck_assert_int_eq(memcmp(dst[l] + back[i] * 96, src[l] + slots[i] * 96, 96), 0);
	ck_assert_ok(hc_dev_close(d0));
	ck_assert_ok(hc_dev_close(d1));
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);

	/* a sharded component must give V */
	name = hct_name();
	ps.name = name;
	ps.comps = &c[1];
	ck_assert_ok(hc_pool_create(&ps));
	p = hct_attach(name, 0);
	dc = (struct hc_dev_comp){ .size = sizeof(dc),
				   .comp = 0,
				   .k = sa,
				   .token_bytes = 32,
				   .token_stride = 32,
				   .slots = 16 };
	s.tp_rank = 0;
	ck_assert_err(hc_dev_open(p, &s, &d0), EINVAL);
	ck_assert_msg_has("only a replicated component");
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/*
 * SGLang's page_first_direct host pool, [blocks][layers][P][heads*dim] a
 * half, through the public API: a store from one buffer and a load into a
 * zeroed one put every token back in its slot and touch no other byte.  A
 * caller built before blocks (a struct that ends at slots) gets none.
 */
START_TEST(page_first_direct_blocks)
{
	enum { L = 2, P = 4, NB = 4, TB = 64 };
	const char *name = hct_name();
	struct hc_component_spec c = { .size = sizeof(c),
				       .name = "kv",
				       .dtype = HC_DTYPE_BF16,
				       .kind = HC_COMP_KV,
				       .sharding = HC_SHARDED,
				       .kv_heads = 2,
				       .head_bytes = 32,
				       .layers = L };
	struct hc_pool_spec ps = { .size = sizeof(ps),
				   .name = name,
				   .model_id = "t/blocks",
				   .page_tokens = P,
				   .tp_size = 1,
				   .comps = &c,
				   .ncomp = 1,
				   .capacity_pages = 8,
				   .flags = HC_CREATE_NO_POPULATE };
	static uint8_t src[2][NB * L * P * TB], dst[2][NB * L * P * TB];
	uint64_t sk[L], sv[L], dk[L], dv[L], slots[2 * P], back[2 * P];
	struct hc_dev_comp dc = { .size = sizeof(dc),
				  .comp = 0,
				  .k = sk,
				  .v = sv,
				  .token_bytes = TB,
				  .token_stride = TB,
				  .slots = NB * P,
				  .block_stride = L * P * TB,
				  .block_slots = P };
	struct hc_dev_spec s = { .size = sizeof(s), .kind = HC_DEV_HOST, .tp_size = 1, .comps = &dc, .ncomp = 1 };
	hc_key_t k[2];
	hc_page_t pg[2];
	uint8_t skip[2];
	struct hc_reserve_req rq = { .size = sizeof(rq), .keys = k, .nkeys = 2 };
	struct hc_xfer_req xr = { .size = sizeof(xr), .pages = pg, .n = 2, .slots = slots, .flags = HC_XFER_COMMIT };
	uint8_t seen[2][NB * L * P * TB];
	hc_pool *p;
	hc_dev *d;
	hc_xfer *x;

	ck_assert_ok(hc_pool_create(&ps));
	p = hct_attach(name, 0);
	srand(23);
	for (unsigned h = 0; h < 2; h++)
		for (unsigned b = 0; b < sizeof(src[h]); b++)
			src[h][b] = (uint8_t)rand();
	memset(dst, 0, sizeof(dst));
	memset(seen, 0, sizeof(seen));
	for (unsigned l = 0; l < L; l++) {
		sk[l] = (uintptr_t)src[0] + l * P * TB, sv[l] = (uintptr_t)src[1] + l * P * TB;
		dk[l] = (uintptr_t)dst[0] + l * P * TB, dv[l] = (uintptr_t)dst[1] + l * P * TB;
	}
	hct_keys(k, 2, 91);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), 2);
	hct_perm(slots, 2 * P, NB * P);
	ck_assert_ok(hc_dev_open(p, &s, &d));
	ck_assert_ok(hc_dev_store(d, &xr, &x));
	ck_assert_int_eq(hc_xfer_free(x), 0);
	ck_assert_ok(hc_dev_close(d));
	dc.k = dk, dc.v = dv;
	ck_assert_ok(hc_dev_open(p, &s, &d));
	hct_perm(back, 2 * P, NB * P);
	xr.slots = back;
	xr.flags = 0;
	ck_assert_ok(hc_dev_load(d, &xr, &x));
	ck_assert_int_eq(hc_xfer_free(x), 0);
	ck_assert_ok(hc_dev_close(d));
	for (unsigned h = 0; h < 2; h++)
		for (unsigned l = 0; l < L; l++)
			for (unsigned i = 0; i < 2 * P; i++) {
				uint64_t so = slots[i] / P * L * P * TB + l * P * TB + slots[i] % P * TB;
				uint64_t bo = back[i] / P * L * P * TB + l * P * TB + back[i] % P * TB;
				ck_assert_int_eq(memcmp(dst[h] + bo, src[h] + so, TB), 0);
				memset(seen[h] + bo, 1, TB);
			}
	for (unsigned h = 0; h < 2; h++)
		for (unsigned b = 0; b < sizeof(dst[h]); b++)
			if (!seen[h][b])
				ck_assert_uint_eq(dst[h][b], 0);
	/* the same struct from a caller that knows no blocks: one run of slots,
	 * which this buffer's layers (interleaved by blocks) overlap */
	dc.size = (uint32_t)offsetof(struct hc_dev_comp, block_stride);
	ck_assert_err(hc_dev_open(p, &s, &d), EINVAL);
	ck_assert_msg_has("overlap");
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("device");
	TCase *tc = tcase_create("host");

	tcase_set_timeout(tc, 30);
	/* each on HC_PATH_AUTO, _DIRECT and _KERNEL */
	tcase_add_loop_test(tc, roundtrip_tp2, HC_PATH_AUTO, HC_PATH_KERNEL + 1);
	tcase_add_loop_test(tc, tp8_read_by_tp4_and_tp2, HC_PATH_AUTO, HC_PATH_KERNEL + 1);
	tcase_add_loop_test(tc, layer_marks_in_order, HC_PATH_AUTO, HC_PATH_KERNEL + 1);
	tcase_add_test(tc, errors);
	tcase_add_test(tc, sync_transfers);
	tcase_add_test(tc, commit_failure_commits_the_rest);
	tcase_add_test(tc, replicated_k_only);
	tcase_add_test(tc, page_first_direct_blocks);
	tcase_add_test(tc, store_into_another_ranks_reservation);
	tcase_add_test(tc, store_into_the_engines_reservation);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
