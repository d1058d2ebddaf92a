/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_devmap.c - the runs between envelopes and a rank's device KV,
 * checked against a byte-by-byte reference of the documented envelope
 * order (hicache.h) on random page lists, slot maps and strides.
 */
#include <stdlib.h>

#include "../lib/devmap.h"
#include "hct.h"

struct pool {
	const char *name;
	hc_pool *p;
	uint8_t *env;
};

/* A pool of one sharded K/V component (heads x 16-byte heads, 3 layers)
 * and one replicated state (256 bytes a layer... padded), laid out for tp. */
static void mk(struct pool *q, uint32_t heads, uint32_t tp, uint32_t groups, int with_state)
{
	struct hc_component_spec c[2] = {
		{ .name = "kv", .dtype = HC_DTYPE_BF16, .kind = HC_COMP_KV, .sharding = HC_SHARDED, .kv_heads = heads,
		  .head_bytes = 16, .layers = 3 },
		{ .name = "st", .dtype = HC_DTYPE_F32, .kind = HC_COMP_STATE, .sharding = HC_REPLICATED,
		  .bytes_per_layer = 256, .layers = 2 },
	};
	struct hc_pool_spec s = { .model_id = "t/devmap", .page_tokens = 8, .tp_size = tp, .head_groups = groups,
				  .comps = c, .ncomp = with_state ? 2 : 1, .capacity_pages = 32,
				  .flags = HC_CREATE_NO_POPULATE };
	hc_page_t pg;

	q->name = hct_name();
	s.name = q->name;
	ck_assert_ok(hc_pool_create(&s));
	q->p = hct_attach(q->name, 0);
	ck_assert_int_eq(hc_page_alloc(q->p, 1, 1, &pg), 1);
	q->env = (uint8_t *)hc_page_envelope(q->p, pg) - (size_t)HC_PAGE_ID(pg) * q->p->g.envelope_bytes;
	for (size_t i = 0; i < (size_t)q->p->g.npages * q->p->g.envelope_bytes; i++)
		q->env[i] = (uint8_t)(rand() >> 7);
}

static void rm(struct pool *q)
{
	hc_pool_detach(q->p);
	hc_pool_destroy(q->name, NULL, HC_DESTROY_FORCE);
}

/* The reference: every byte of rank r's heads, from the formula in hicache.h. */
static void reference(struct pool *q, uint32_t S, uint32_t r, unsigned n, const uint32_t *pages,
		      const uint64_t *slots, uint8_t *dev_k[], uint8_t *dev_v[], uint64_t stride)
{
	const struct hc_component_info *ci = &q->p->g.comps[0];
	uint32_t T = q->p->g.page_tokens, G = ci->groups, Hg = ci->kv_heads / G, B = ci->head_bytes, L = ci->layers;
	uint32_t h0, nh;

	if (S <= ci->kv_heads) {
		nh = ci->kv_heads / S;
		h0 = r * nh;
	} else {
		nh = 1;
		h0 = r / (S / ci->kv_heads);
	}
	for (unsigned i = 0; i < n; i++)
		for (uint32_t l = 0; l < L; l++)
			for (uint32_t kv = 0; kv < 2; kv++)
				for (uint32_t t = 0; t < T; t++)
					for (uint32_t h = h0; h < h0 + nh; h++)
						for (uint32_t b = 0; b < B; b++) {
							uint32_t g = h / Hg;
							uint64_t off = (uint64_t)pages[i] * q->p->g.envelope_bytes + ci->offset +
								       (uint64_t)g * (L * 2 * T * Hg * B) +
								       (uint64_t)l * (2 * T * Hg * B) + kv * (T * Hg * B) +
								       (uint64_t)t * (Hg * B) + (h - g * Hg) * B + b;
							uint8_t *dev = (kv ? dev_v : dev_k)[l] + slots[i * T + t] * stride +
								       (h - h0) * B + b;
							*dev = q->env[off];
						}
}

/* Copy through the runs, layer by layer, as the host implementation will. */
static void through_runs(struct pool *q, const struct hc__dev_plan *pl, unsigned n, const uint32_t *pages,
			 const uint64_t *slots, const uint64_t *sslots, unsigned *nruns)
{
	struct hc__run runs[4096];

	*nruns = 0;
	for (unsigned l = 0; l < 3; l++) {
		unsigned need;
		int k = hc__dev_runs(&q->p->g, pl, l, pages, NULL, n, slots, sslots, runs, 4096, &need);
		ck_assert_msg(k >= 0, "runs: %s", hc_last_error());
		for (int i = 0; i < k; i++)
			memcpy((void *)(uintptr_t)runs[i].dev, q->env + runs[i].env, runs[i].len);
		*nruns += (unsigned)k;
	}
}

static void shuffle(uint64_t *v, unsigned n)
{
	for (unsigned i = n - 1; i > 0; i--) {
		unsigned j = (unsigned)rand() % (i + 1);
		uint64_t x = v[i];
		v[i] = v[j];
		v[j] = x;
	}
}

/* Random pages and slots for rank r of TP S; device pools as host buffers. */
static void check_rank(struct pool *q, uint32_t S, uint32_t r, uint64_t pad)
{
	const struct hc_component_info *ci = &q->p->g.comps[0];
	uint32_t T = q->p->g.page_tokens, nh = S <= ci->kv_heads ? ci->kv_heads / S : 1;
	uint64_t tb = (uint64_t)nh * ci->head_bytes, stride = tb + pad, nslots = 200;
	uint64_t kb[3], vb[3], slots[12 * 8];
	uint8_t *ref_k[3], *ref_v[3], *got_k[3], *got_v[3];
	uint32_t pages[12];
	uint64_t all[200];
	struct hc__dev_comp dc = { .comp = 0, .k = kb, .v = vb, .token_bytes = tb, .token_stride = stride, .slots = nslots };
	struct hc__dev_desc d = { .tp_size = S, .tp_rank = r, .ncomp = 1, .comps = &dc };
	struct hc__dev_plan pl;
	unsigned nruns;

	for (unsigned l = 0; l < 3; l++) {
		ref_k[l] = calloc(nslots, stride);
		ref_v[l] = calloc(nslots, stride);
		got_k[l] = calloc(nslots, stride);
		got_v[l] = calloc(nslots, stride);
		kb[l] = (uintptr_t)got_k[l];
		vb[l] = (uintptr_t)got_v[l];
	}
	for (unsigned i = 0; i < 200; i++)
		all[i] = i;
	shuffle(all, 200);
	for (unsigned i = 0; i < 12; i++) {
		pages[i] = (uint32_t)((i * 7 + (unsigned)rand()) % 32);
		for (unsigned j = 0; j < i; j++)
			if (pages[j] == pages[i])
				pages[i] = (pages[i] + 1) % 32, j = (unsigned)-1;
	}
	for (unsigned i = 0; i < 12 * T; i++)
		slots[i] = all[i];
	ck_assert_ok(hc__dev_plan(&q->p->g, &d, &pl));
	reference(q, S, r, 12, pages, slots, ref_k, ref_v, stride);
	through_runs(q, &pl, 12, pages, slots, NULL, &nruns);
	for (unsigned l = 0; l < 3; l++) {
		ck_assert_msg(memcmp(ref_k[l], got_k[l], nslots * stride) == 0, "TP %u rank %u layer %u K differs", S, r, l);
		ck_assert_msg(memcmp(ref_v[l], got_v[l], nslots * stride) == 0, "TP %u rank %u layer %u V differs", S, r, l);
		free(ref_k[l]);
		free(ref_v[l]);
		free(got_k[l]);
		free(got_v[l]);
	}
}

START_TEST(every_rank_every_tp)
{
	struct pool q;

	srand(1234);
	mk(&q, 8, 8, 0, 0); /* a pool for TP 8: 8 groups of one head */
	for (uint32_t S = 1; S <= 8; S *= 2)
		for (uint32_t r = 0; r < S; r++)
			for (uint64_t pad = 0; pad <= 32; pad += 32)
				check_rank(&q, S, r, pad);
	rm(&q);
	/* fewer KV heads than ranks: groups of one head shared by ranks */
	mk(&q, 2, 2, 0, 0);
	for (uint32_t r = 0; r < 8; r++)
		check_rank(&q, 8, r, 0);
	rm(&q);
}
END_TEST

START_TEST(merging)
{
	struct pool q;
	uint64_t kb[3], vb[3], slots[4 * 8];
	uint8_t *k = calloc(64 * 3, 64), *v = calloc(64 * 3, 64);
	struct hc__dev_comp dc = { .comp = 0, .k = kb, .v = vb, .token_bytes = 64, .token_stride = 64, .slots = 64 };
	struct hc__dev_desc d = { .tp_size = 1, .tp_rank = 0, .ncomp = 1, .comps = &dc };
	struct hc__dev_plan pl;
	struct hc__run runs[64];
	uint32_t pages[4] = { 3, 9, 4, 20 };
	unsigned need;

	mk(&q, 4, 1, 1, 0); /* one group of 4 heads of 16 bytes: 64 bytes a token */
	for (unsigned l = 0; l < 3; l++) {
		kb[l] = (uintptr_t)(k + l * 64 * 64);
		vb[l] = (uintptr_t)(v + l * 64 * 64);
	}
	for (unsigned i = 0; i < 4 * 8; i++)
		slots[i] = i; /* each page's 8 slots contiguous */
	ck_assert_ok(hc__dev_plan(&q.p->g, &d, &pl));
	/* one run per page and K/V: 8 tokens merged */
	ck_assert_int_eq(hc__dev_runs(&q.p->g, &pl, 0, pages, NULL, 4, slots, NULL, runs, 64, &need), 8);
	for (int i = 0; i < 8; i++)
		ck_assert_uint_eq(runs[i].len, 8 * 64);
	/* a slot out of order splits a page's run */
	slots[3] = 40;
	ck_assert_int_eq(hc__dev_runs(&q.p->g, &pl, 0, pages, NULL, 4, slots, NULL, runs, 64, &need), 12);
	/* too little room: the count needed */
	ck_assert_err(hc__dev_runs(&q.p->g, &pl, 0, pages, NULL, 4, slots, NULL, runs, 5, &need), ENOSPC);
	ck_assert_uint_eq(need, 12);
	/* out of bounds */
	slots[5] = 64;
	ck_assert_err(hc__dev_runs(&q.p->g, &pl, 0, pages, NULL, 4, slots, NULL, runs, 64, &need), ERANGE);
	ck_assert_msg_has("token 5's slot 64");
	rm(&q);
	free(k);
	free(v);
}
END_TEST

START_TEST(state_pages_merge)
{
	struct pool q;
	struct hc_component_spec c = { .name = "st", .dtype = HC_DTYPE_F32, .kind = HC_COMP_STATE,
				       .sharding = HC_REPLICATED, .bytes_per_layer = 4096, .layers = 1 };
	struct hc_pool_spec s = { .model_id = "t/state", .page_tokens = 8, .tp_size = 1, .comps = &c, .ncomp = 1,
				  .capacity_pages = 16, .flags = HC_CREATE_NO_POPULATE };
	uint8_t *buf = calloc(16, 4096);
	uint64_t base = (uintptr_t)buf, ss[3] = { 10, 11, 12 };
	struct hc__dev_comp dc = { .comp = 0, .k = &base, .token_bytes = 4096, .token_stride = 4096, .slots = 16 };
	struct hc__dev_desc d = { .tp_size = 4, .tp_rank = 3, .ncomp = 1, .comps = &dc };
	struct hc__dev_plan pl;
	struct hc__run runs[8];
	uint32_t pages[3] = { 5, 6, 7 };

	q.name = hct_name();
	s.name = q.name;
	ck_assert_ok(hc_pool_create(&s));
	q.p = hct_attach(q.name, 0);
	ck_assert_ok(hc__dev_plan(&q.p->g, &d, &pl));
	/* envelopes of 4096 bytes, adjacent pages into adjacent slots: one run */
	ck_assert_int_eq(hc__dev_runs(&q.p->g, &pl, 0, pages, NULL, 3, NULL, ss, runs, 8, NULL), 1);
	ck_assert_uint_eq(runs[0].len, 3 * 4096);
	ck_assert_uint_eq(runs[0].env, 5 * 4096);
	ck_assert_uint_eq(runs[0].dev, base + 10 * 4096);
	ck_assert_err(hc__dev_runs(&q.p->g, &pl, 0, pages, NULL, 3, NULL, NULL, runs, 8, NULL), EINVAL);
	rm(&q);
	free(buf);
}
END_TEST

START_TEST(bad_descriptions)
{
	struct pool q;
	uint64_t kb[3] = { 0x10000, 0x20000, 0x30000 }, vb[3] = { 0x40000, 0x50000, 0x60000 };
	struct hc__dev_comp dc = { .comp = 0, .k = kb, .v = vb, .token_bytes = 64, .token_stride = 64, .slots = 256 };
	struct hc__dev_comp two[2] = { dc, dc };
	struct hc__dev_desc d = { .tp_size = 2, .tp_rank = 0, .ncomp = 1, .comps = &dc };
	struct hc__dev_plan pl;

	mk(&q, 8, 2, 0, 1); /* 8 heads of 16 bytes in 2 groups: 64 bytes a token for TP 2 */
	ck_assert_ok(hc__dev_plan(&q.p->g, &d, &pl));
	ck_assert_uint_eq(pl.c[0].ng, 1);
	d.tp_rank = 2;
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	d.tp_rank = 0;
	d.tp_size = 4; /* a quarter of 8 heads is half a group */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	ck_assert_msg_has("part of a head group");
	d.tp_size = 1; /* both groups: 128 bytes a token, not 64 */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	ck_assert_msg_has("holds 2 head group(s) of 64 bytes");
	d.tp_size = 2;
	dc.token_stride = 32; /* slots overlap */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	dc.token_stride = 65; /* not a multiple of bf16 */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	dc.token_stride = 64;
	kb[1] = 0x20001; /* misaligned base */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	ck_assert_msg_has("layer 1's K base");
	kb[1] = 0x20000;
	vb[2] = 0x10000 + 64 * 100; /* V of layer 2 inside K of layer 0 */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	ck_assert_msg_has("overlap");
	vb[2] = 0x60000;
	dc.v = NULL;
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	dc.v = vb;
	dc.comp = 5;
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	dc.comp = 0;
	d.comps = two;
	d.ncomp = 2;
	two[0] = two[1] = dc;
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	ck_assert_msg_has("described twice");
	rm(&q);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("devmap");
	TCase *tc = tcase_create("devmap");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, every_rank_every_tp);
	tcase_add_test(tc, merging);
	tcase_add_test(tc, state_pages_merge);
	tcase_add_test(tc, bad_descriptions);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
