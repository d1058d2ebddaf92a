/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_devmap.c - the runs between envelopes and a rank's device KV,
 * checked against a byte-by-byte reference of the documented envelope
 * order (hicache.h) on random page lists, slot maps and strides.
 */
#include <stdlib.h>

#include "../lib/device/map.h"
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
		{ .size = sizeof(struct hc_component_spec),
		  .name = "kv",
		  .dtype = HC_DTYPE_BF16,
		  .kind = HC_COMP_KV,
		  .sharding = HC_SHARDED,
		  .kv_heads = heads,
		  .head_bytes = 16,
		  .layers = 3 },
		{ .size = sizeof(struct hc_component_spec),
		  .name = "st",
		  .dtype = HC_DTYPE_F32,
		  .kind = HC_COMP_STATE,
		  .sharding = HC_REPLICATED,
		  .bytes_per_layer = 256,
		  .layers = 2 },
	};
	struct hc_pool_spec s = { .size = sizeof(struct hc_pool_spec),
				  .model_id = "t/devmap",
				  .page_tokens = 8,
				  .tp_size = tp,
				  .head_groups = groups,
				  .comps = c,
				  .ncomp = with_state ? 2 : 1,
				  .capacity_pages = 32,
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
/* Where slot s sits from its pool's base, written out (not index.h's). */
static uint64_t slot_off(uint64_t s, uint64_t stride, uint32_t bslots, uint64_t bstride)
{
	return bslots ? s / bslots * bstride + s % bslots * stride : s * stride;
}

static void reference_b(struct pool *q, uint32_t S, uint32_t r, unsigned n, const uint32_t *pages,
			const uint64_t *slots, uint8_t *dev_k[], uint8_t *dev_v[], uint64_t stride, uint32_t bslots,
			uint64_t bstride)
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
							uint64_t off = (uint64_t)pages[i] * q->p->g.envelope_bytes +
								       ci->offset + (uint64_t)g * (L * 2 * T * Hg * B) +
								       (uint64_t)l * (2 * T * Hg * B) +
								       kv * (T * Hg * B) + (uint64_t)t * (Hg * B) +
								       (h - g * Hg) * B + b;
							uint8_t *dev =
								(kv ? dev_v : dev_k)[l] +
								slot_off(slots[i * T + t], stride, bslots, bstride) +
								(h - h0) * B + b;
							*dev = q->env[off];
						}
}

static void reference(struct pool *q, uint32_t S, uint32_t r, unsigned n, const uint32_t *pages, const uint64_t *slots,
		      uint8_t *dev_k[], uint8_t *dev_v[], uint64_t stride)
{
	reference_b(q, S, r, n, pages, slots, dev_k, dev_v, stride, 0, 0);
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
	struct hc__dev_comp dc = { .comp = 0,
				   .k = kb,
				   .v = vb,
				   .token_bytes = tb,
				   .token_stride = stride,
				   .slots = nslots };
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
		ck_assert_msg(memcmp(ref_k[l], got_k[l], nslots * stride) == 0, "TP %u rank %u layer %u K differs", S,
			      r, l);
		ck_assert_msg(memcmp(ref_v[l], got_v[l], nslots * stride) == 0, "TP %u rank %u layer %u V differs", S,
			      r, l);
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
	struct hc_component_spec c = { .size = sizeof(struct hc_component_spec),
				       .name = "st",
				       .dtype = HC_DTYPE_F32,
				       .kind = HC_COMP_STATE,
				       .sharding = HC_REPLICATED,
				       .bytes_per_layer = 4096,
				       .layers = 1 };
	struct hc_pool_spec s = { .size = sizeof(struct hc_pool_spec),
				  .model_id = "t/state",
				  .page_tokens = 8,
				  .tp_size = 1,
				  .comps = &c,
				  .ncomp = 1,
				  .capacity_pages = 16,
				  .flags = HC_CREATE_NO_POPULATE };
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

/*
 * Every component kind (sharded K/V, replicated K/V as MLA, a replicated
 * and a sharded state), random pages, presence, slots and strides, every
 * rank of TP 1..8: the runs, the kernel's loop (hc__dl_copy) and a
 * reference written from the byte order in hicache.h agree, both ways.
 */
struct kind_dev {
	uint64_t base[4][2][3]; /* [comp][kv][layer] */
	uint64_t tb[4], stride[4], nslots;
	uint8_t *buf;
	size_t bytes;
};

static const struct hc_component_spec kinds[4] = {
	{ .size = sizeof(struct hc_component_spec),
	  .name = "kv",
	  .dtype = HC_DTYPE_BF16,
	  .kind = HC_COMP_KV,
	  .sharding = HC_SHARDED,
	  .kv_heads = 8,
	  .head_bytes = 16,
	  .layers = 3 },
	{ .size = sizeof(struct hc_component_spec),
	  .name = "mla",
	  .dtype = HC_DTYPE_BF16,
	  .kind = HC_COMP_KV,
	  .sharding = HC_REPLICATED,
	  .kv_heads = 1,
	  .head_bytes = 48,
	  .layers = 2 },
	{ .size = sizeof(struct hc_component_spec),
	  .name = "st",
	  .dtype = HC_DTYPE_F32,
	  .kind = HC_COMP_STATE,
	  .sharding = HC_REPLICATED,
	  .bytes_per_layer = 256,
	  .layers = 2,
	  .window_pages = 1 },
	{ .size = sizeof(struct hc_component_spec),
	  .name = "sst",
	  .dtype = HC_DTYPE_F32,
	  .kind = HC_COMP_STATE,
	  .sharding = HC_SHARDED,
	  .bytes_per_layer = 512,
	  .layers = 1,
	  .window_pages = 1 },
};

/* Lay out one rank's device pools (random padding) in one buffer. */
static void kind_dev_init(struct kind_dev *k, const struct hc_pool_info *pi, uint32_t S, struct hc__dev_comp *dc)
{
	size_t off = 0;

	k->nslots = 96;
	for (unsigned c = 0; c < 4; c++) {
		uint32_t G = c == 0 || c == 3 ? pi->head_groups : 1, ng = S <= G ? G / S : 1;
		uint64_t gb = c == 0 ? (uint64_t)(8 / G) * 16 : c == 1 ? 48 : c == 2 ? 256 : 512 / G;
		k->tb[c] = ng * gb;
		k->stride[c] = k->tb[c] + 4 * (unsigned)(rand() % 3);
		for (unsigned kv = 0; kv < 2; kv++)
			for (unsigned l = 0; l < 3; l++) {
				k->base[c][kv][l] = off;
				off += k->nslots * k->stride[c] + 4 * (unsigned)(rand() % 4);
			}
		dc[c] = (struct hc__dev_comp){ .comp = c,
					       .token_bytes = k->tb[c],
					       .token_stride = k->stride[c],
					       .slots = k->nslots };
	}
	k->bytes = off;
	k->buf = calloc(1, off);
	for (unsigned c = 0; c < 4; c++)
		for (unsigned kv = 0; kv < 2; kv++)
			for (unsigned l = 0; l < 3; l++)
				k->base[c][kv][l] += (uintptr_t)k->buf;
	for (unsigned c = 0; c < 4; c++) {
		dc[c].k = k->base[c][0];
		dc[c].v = c < 2 ? k->base[c][1] : NULL;
	}
}

/* Call fn(envelope byte, device byte) for every byte rank r holds, from hicache.h's formula. */
static void kind_ref(struct pool *q, struct kind_dev *k, uint32_t S, uint32_t r, unsigned n, const uint32_t *pages,
		     const uint32_t *presence, const uint64_t *slots, const uint64_t *ss, int store, uint8_t *env)
{
	uint32_t T = q->p->g.page_tokens;

	for (unsigned c = 0; c < 4; c++) {
		const struct hc_component_info *ci = &q->p->g.comps[c];
		uint32_t G = ci->groups, ng = S <= G ? G / S : 1, g0 = S <= G ? r * ng : r / (S / G);
		uint32_t L = ci->layers;
		uint64_t gb = ci->kind == HC_COMP_KV ? (uint64_t)(ci->kv_heads / G) * ci->head_bytes
						     : ci->bytes_per_layer / G;

		if (ci->sharding == HC_REPLICATED)
			g0 = 0, ng = 1;
		for (unsigned i = 0; i < n; i++) {
			if (!(presence[i] & (1u << c)))
				continue;
			for (uint32_t j = 0; j < ng; j++)
				for (uint32_t l = 0; l < L; l++)
					for (uint32_t kv = 0; kv < (ci->kind == HC_COMP_KV ? 2u : 1u); kv++)
						for (uint32_t t = 0; t < (ci->kind == HC_COMP_KV ? T : 1u); t++) {
							uint64_t eo = (uint64_t)pages[i] * q->p->g.envelope_bytes +
								      ci->offset;
							uint8_t *d;
							if (ci->kind == HC_COMP_KV)
								eo += (g0 + j) * (L * 2 * T * gb) + l * (2 * T * gb) +
								      kv * (T * gb) + t * gb;
							else
								eo += (g0 + j) * (L * gb) + l * gb;
							d = (uint8_t *)(uintptr_t)(k->base[c][kv][l] +
										   (ci->kind == HC_COMP_KV
											    ? slots[i * T + t]
											    : ss[i]) *
											   k->stride[c] +
										   j * gb);
							if (store)
								memcpy(env + eo, d, gb);
							else
								memcpy(d, env + eo, gb);
						}
		}
	}
}

START_TEST(every_kind_random)
{
	struct pool q;
	struct hc_pool_spec s = { .size = sizeof(struct hc_pool_spec),
				  .model_id = "t/kinds",
				  .page_tokens = 8,
				  .tp_size = 8,
				  .comps = kinds,
				  .ncomp = 4,
				  .capacity_pages = 24,
				  .flags = HC_CREATE_NO_POPULATE };
	struct hc_pool_info pi;
	hc_page_t pg;

	srand(99);
	q.name = hct_name();
	s.name = q.name;
	ck_assert_ok(hc_pool_create(&s));
	q.p = hct_attach(q.name, 0);
	ck_assert_int_eq(hc_page_alloc(q.p, 1, 1, &pg), 1);
	q.env = (uint8_t *)hc_page_envelope(q.p, pg) - (size_t)HC_PAGE_ID(pg) * q.p->g.envelope_bytes;
	hc_pool_info(q.p, &pi, sizeof(pi));
	ck_assert_uint_eq(pi.head_groups, 8);
	for (size_t b = 0; b < (size_t)pi.npages * pi.envelope_bytes; b++)
		q.env[b] = (uint8_t)(rand() >> 5);
	for (uint32_t S = 1; S <= 8; S *= 2)
		for (uint32_t r = 0; r < S; r++)
			for (int round = 0; round < 3; round++) {
				size_t eb = (size_t)pi.npages * pi.envelope_bytes;
				struct hc__dev_comp dc[4];
				struct hc__dev_desc d = { .tp_size = S, .tp_rank = r, .ncomp = 4, .comps = dc };
				struct hc__dev_plan pl;
				struct kind_dev ref, got, krn;
				unsigned n = 1 + (unsigned)rand() % 10, seed = (unsigned)rand();
				uint32_t pages[10], presence[10];
				uint64_t all[96], slots[10 * 8], ss[10];
				uint8_t *e_ref = malloc(eb), *e_run = malloc(eb), *e_krn = malloc(eb);
				static struct hc__run runs[8192];

				srand(seed); /* the same random layout three times */
				kind_dev_init(&ref, &pi, S, dc);
				srand(seed);
				kind_dev_init(&got, &pi, S, dc);
				srand(seed);
				kind_dev_init(&krn, &pi, S, dc);
				for (unsigned i = 0; i < 96; i++)
					all[i] = i;
				for (unsigned i = 95; i > 0; i--) {
					unsigned j = (unsigned)rand() % (i + 1);
					uint64_t x = all[i];
					all[i] = all[j], all[j] = x;
				}
				for (unsigned i = 0; i < n; i++) {
					int dup;
					do {
						pages[i] = (uint32_t)rand() % pi.npages;
						dup = 0;
						for (unsigned j = 0; j < i; j++)
							dup |= pages[j] == pages[i];
					} while (dup);
					presence[i] = (uint32_t)rand() & 0xf;
					ss[i] = all[i];
				}
				for (unsigned i = 0; i < n * 8; i++)
					slots[i] = all[(i * 7 + 3) % 96];
				/* load: reference, runs, kernel loop */
				for (unsigned c = 0; c < 4; c++)
					dc[c].k = got.base[c][0], dc[c].v = c < 2 ? got.base[c][1] : NULL;
				ck_assert_msg(hc__dev_plan(&q.p->g, &d, &pl) == 0, "TP %u rank %u: %s", S, r,
					      hc_last_error());
				kind_ref(&q, &ref, S, r, n, pages, presence, slots, ss, 0, q.env);
				for (unsigned l = 0; l < 3; l++) {
					int m = hc__dev_runs(&q.p->g, &pl, l, pages, presence, n, slots, ss, runs, 8192,
							     NULL);
					ck_assert_msg(m >= 0, "%s", hc_last_error());
					for (int i = 0; i < m; i++)
						memcpy((void *)(uintptr_t)runs[i].dev, q.env + runs[i].env,
						       runs[i].len);
				}
				ck_assert_msg(memcmp(ref.buf, got.buf, ref.bytes) == 0,
					      "runs: TP %u rank %u load differs", S, r);
				for (unsigned c = 0; c < 4; c++)
					dc[c].k = krn.base[c][0], dc[c].v = c < 2 ? krn.base[c][1] : NULL;
				ck_assert_ok(hc__dev_plan(&q.p->g, &d, &pl));
				for (unsigned l = 0; l < 3; l++) {
					struct hc__dl L;
					ck_assert_ok(hc__dl_init(&q.p->g, &pl, l, n, &L));
					ck_assert_uint_eq(L.ncomp, l == 0 ? 4 : l == 1 ? 3 : 1);
					/* 4-byte padding: at least f32 copies, and every base a multiple */
					ck_assert(L.align >= 4 && L.align <= 16 && !(L.align & (L.align - 1)));
					for (unsigned c = 0; c < L.ncomp; c++)
						ck_assert_uint_eq(
							(L.c[c].dev[0] | L.c[c].dev[1] | L.c[c].stride | L.c[c].gb) %
								L.align,
							0);
					hc__dl_copy(&L, q.env, pages, presence, slots, ss, 0);
				}
				ck_assert_msg(memcmp(ref.buf, krn.buf, ref.bytes) == 0,
					      "kernel loop: TP %u rank %u load differs", S, r);
				/* store: each writes exactly the reference's bytes of a scribbled copy */
				for (size_t b = 0; b < ref.bytes; b++)
					ref.buf[b] = krn.buf[b] = (uint8_t)(b * 131 + 7);
				memset(e_ref, 0xa5, eb);
				memset(e_krn, 0xa5, eb);
				memset(e_run, 0xa5, eb);
				kind_ref(&q, &ref, S, r, n, pages, presence, slots, ss, 1, e_ref);
				for (unsigned l = 0; l < 3; l++) {
					struct hc__dl L;
					int m;
					ck_assert_ok(hc__dl_init(&q.p->g, &pl, l, n, &L));
					hc__dl_copy(&L, e_krn, pages, presence, slots, ss, 1);
					m = hc__dev_runs(&q.p->g, &pl, l, pages, presence, n, slots, ss, runs, 8192,
							 NULL);
					ck_assert_int_ge(m, 0);
					for (int i = 0; i < m; i++)
						memcpy(e_run + runs[i].env, (void *)(uintptr_t)runs[i].dev,
						       runs[i].len);
				}
				ck_assert_msg(memcmp(e_ref, e_krn, eb) == 0, "kernel loop: TP %u rank %u store differs",
					      S, r);
				ck_assert_msg(memcmp(e_ref, e_run, eb) == 0, "runs: TP %u rank %u store differs", S, r);
				free(ref.buf), free(got.buf), free(krn.buf);
				free(e_ref), free(e_run), free(e_krn);
			}
	rm(&q);
}
END_TEST

START_TEST(alignment)
{
	struct pool q;
	uint64_t kb[3], vb[3];
	struct hc__dev_comp dc = { .comp = 0, .k = kb, .v = vb, .token_bytes = 64, .token_stride = 64, .slots = 16 };
	struct hc__dev_desc d = { .tp_size = 2, .tp_rank = 1, .ncomp = 1, .comps = &dc };
	struct hc__dev_plan pl;
	struct hc__dl L;

	mk(&q, 8, 2, 0, 0);
	for (unsigned l = 0; l < 3; l++)
		kb[l] = 0x100000 * (l + 1), vb[l] = 0x800000 + 0x100000 * l;
	ck_assert_ok(hc__dev_plan(&q.p->g, &d, &pl));
	ck_assert_ok(hc__dl_init(&q.p->g, &pl, 1, 5, &L));
	ck_assert_uint_eq(L.align, 16);
	ck_assert_uint_eq(L.items, 2 * 5 * 1);
	ck_assert_uint_eq(L.c[0].dev[1], vb[1]);
	kb[1] += 2; /* a bf16-aligned base: two-byte copies */
	ck_assert_ok(hc__dev_plan(&q.p->g, &d, &pl));
	ck_assert_ok(hc__dl_init(&q.p->g, &pl, 1, 5, &L));
	ck_assert_uint_eq(L.align, 2);
	ck_assert_ok(hc__dl_init(&q.p->g, &pl, 0, 5, &L)); /* another layer's bases are aligned */
	ck_assert_uint_eq(L.align, 16);
	ck_assert_err(hc__dl_init(&q.p->g, &pl, 0, UINT32_MAX, &L), E2BIG);
	rm(&q);
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

/*
 * SGLang's host pool layouts, as one buffer for K and one for V (L layers,
 * N slots, tb bytes a token):
 *   layer_first       [L][N][tb]:    k[l] = K + l*N*tb, stride tb;
 *   page_first        [N][L][tb]:    k[l] = K + l*tb, stride L*tb (layers interleave);
 *   page_first_direct [N/P][L][P][tb]: k[l] = K + l*P*tb, stride tb, blocks of P
 *                                     slots L*P*tb apart.
 * Each goes through the runs and through the gather loop (the kernel's
 * arithmetic) and must equal the reference, byte for byte.
 */
enum sgl_layout { LAYER_FIRST, PAGE_FIRST, PAGE_FIRST_DIRECT };

static void check_layout(struct pool *q, uint32_t S, uint32_t r, enum sgl_layout lay)
{
	const struct hc_component_info *ci = &q->p->g.comps[0];
	const uint32_t T = q->p->g.page_tokens, L = 3, P = T, N = 16 * T;
	uint32_t nh = S <= ci->kv_heads ? ci->kv_heads / S : 1;
	uint64_t tb = (uint64_t)nh * ci->head_bytes, bytes = (uint64_t)L * N * tb;
	uint8_t *ref[2], *got[2], *gat[2], *rk[3], *rv[3];
	uint64_t kb[3], vb[3], gk[3], gv[3], slots[12 * 8], all[16 * 8];
	uint32_t pages[12];
	struct hc__dev_comp dc = { .comp = 0, .k = kb, .v = vb, .token_bytes = tb, .slots = N };
	struct hc__dev_desc d = { .tp_size = S, .tp_rank = r, .ncomp = 1, .comps = &dc };
	struct hc__dev_plan pl;
	unsigned nruns;

	for (int h = 0; h < 2; h++) {
		ref[h] = calloc(1, bytes);
		got[h] = calloc(1, bytes);
		gat[h] = calloc(1, bytes);
	}
	for (unsigned l = 0; l < L; l++) {
		uint64_t o = lay == LAYER_FIRST ? l * N * tb : lay == PAGE_FIRST ? l * tb : l * P * tb;
		kb[l] = (uintptr_t)got[0] + o, vb[l] = (uintptr_t)got[1] + o;
		gk[l] = (uintptr_t)gat[0] + o, gv[l] = (uintptr_t)gat[1] + o;
		rk[l] = ref[0] + o, rv[l] = ref[1] + o;
	}
	dc.token_stride = lay == PAGE_FIRST ? L * tb : tb;
	if (lay == PAGE_FIRST_DIRECT)
		dc.block_slots = P, dc.block_stride = (uint64_t)L * P * tb;
	for (unsigned i = 0; i < N; i++)
		all[i] = i;
	shuffle(all, N);
	for (unsigned i = 0; i < 12; i++)
		pages[i] = (uint32_t)((i * 5 + 3) % 32);
	for (unsigned i = 0; i < 12 * T; i++)
		slots[i] = all[i];
	ck_assert_msg(hc__dev_plan(&q->p->g, &d, &pl) == 0, "layout %d: %s", lay, hc_last_error());
	reference_b(q, S, r, 12, pages, slots, rk, rv, dc.token_stride, dc.block_slots, dc.block_stride);
	through_runs(q, &pl, 12, pages, slots, NULL, &nruns);
	dc.k = gk, dc.v = gv;
	ck_assert_ok(hc__dev_plan(&q->p->g, &d, &pl));
	for (unsigned l = 0; l < L; l++) {
		struct hc__dl dl;
		ck_assert_ok(hc__dl_init(&q->p->g, &pl, l, 12, &dl));
		hc__dl_copy(&dl, q->env, pages, NULL, slots, NULL, 0);
	}
	for (int h = 0; h < 2; h++) {
		ck_assert_msg(memcmp(ref[h], got[h], bytes) == 0, "layout %d TP %u rank %u: %s differs (runs)", lay, S,
			      r, h ? "V" : "K");
		ck_assert_msg(memcmp(ref[h], gat[h], bytes) == 0, "layout %d TP %u rank %u: %s differs (gather)", lay,
			      S, r, h ? "V" : "K");
	}
	/* page_first_direct: a page's tokens in one block are one run a layer per half */
	if (lay == PAGE_FIRST_DIRECT && S == 4) { /* one group a rank: whole in the envelope too */
		for (unsigned i = 0; i < 12 * T; i++)
			slots[i] = (uint64_t)(i / T) * P + i % T;
		through_runs(q, &pl, 12, pages, slots, NULL, &nruns);
		ck_assert_uint_eq(nruns, 3 * 2 * 12);
	}
	for (int h = 0; h < 2; h++) {
		free(ref[h]);
		free(got[h]);
		free(gat[h]);
	}
}

START_TEST(sglang_layouts)
{
	struct pool q;

	mk(&q, 4, 4, 0, 0);
	for (int lay = LAYER_FIRST; lay <= PAGE_FIRST_DIRECT; lay++)
		for (uint32_t S = 1; S <= 4; S *= 2)
			for (uint32_t r = 0; r < S; r++)
				check_layout(&q, S, r, (enum sgl_layout)lay);
	rm(&q);
}
END_TEST

/* Interleaved pools are taken only where no byte is shared; blocks must fit. */
START_TEST(bad_interleave_and_blocks)
{
	struct pool q;
	const uint64_t tb = 64, L = 3, N = 64;
	uint64_t kb[3], vb[3];
	struct hc__dev_comp dc = { .comp = 0, .k = kb, .v = vb, .token_bytes = tb, .token_stride = L * tb, .slots = N };
	struct hc__dev_desc d = { .tp_size = 2, .tp_rank = 0, .ncomp = 1, .comps = &dc };
	struct hc__dev_plan pl;

	mk(&q, 8, 2, 0, 0);
	for (unsigned l = 0; l < 3; l++)
		kb[l] = 0x100000 + l * tb, vb[l] = 0x200000 + l * tb;
	ck_assert_ok(hc__dev_plan(&q.p->g, &d, &pl)); /* page_first */
	kb[1] = 0x100000 + tb / 2;                    /* layer 1's tokens half over layer 0's */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	ck_assert_msg_has("layer 0 K and component 'kv' layer 1 K share bytes");
	kb[1] = 0x100000 + 2 * tb; /* layer 1 on layer 2's bytes */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	kb[1] = 0x100000 + tb;
	vb[0] = 0x100000 + N * L * tb - tb; /* V of layer 0 in K's last period */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	ck_assert_msg_has("overlap");
	vb[0] = 0x200000;
	dc.token_stride = 2 * tb; /* three layers' tokens in a stride of two */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	/* page_first_direct: blocks of 8 slots, 3 layers a block */
	dc.token_stride = tb;
	dc.block_slots = 8;
	dc.block_stride = L * 8 * tb;
	for (unsigned l = 0; l < 3; l++)
		kb[l] = 0x100000 + l * 8 * tb, vb[l] = 0x200000 + l * 8 * tb;
	ck_assert_ok(hc__dev_plan(&q.p->g, &d, &pl));
	dc.block_stride = 8 * tb - 2; /* smaller than a block */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	ck_assert_msg_has("blocks would overlap");
	dc.block_stride = L * 8 * tb + 1; /* not a multiple of bf16 */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	ck_assert_msg_has("block stride");
	dc.block_stride = L * 8 * tb;
	kb[2] = 0x100000 + 8 * tb + 4 * tb; /* layer 2's block half over layer 1's */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	kb[2] = 0x100000 + 2 * 8 * tb;
	/* the K and V halves of one latent a slot, in blocks (MLA's
	 * page_first_direct): V is K + tb, in K's slot stride of 2 tb */
	dc.token_stride = 2 * tb;
	dc.block_stride = L * 8 * 2 * tb;
	for (unsigned l = 0; l < 3; l++)
		kb[l] = 0x100000 + l * 8 * 2 * tb, vb[l] = kb[l] + tb;
	ck_assert_msg(hc__dev_plan(&q.p->g, &d, &pl) == 0, "%s", hc_last_error());
	vb[1] = kb[1] + tb - 2; /* V's first two bytes on K's last two */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	ck_assert_msg_has("layer 1 K and component 'kv' layer 1 V share bytes");
	vb[1] = kb[1] + tb + 2; /* each V slot's last two bytes on K's next slot */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EINVAL);
	vb[1] = kb[1] + tb;
	dc.token_stride = tb;
	dc.block_stride = L * 8 * tb;
	for (unsigned l = 0; l < 3; l++)
		kb[l] = 0x100000 + l * 8 * tb, vb[l] = 0x200000 + l * 8 * tb;
	dc.block_stride = UINT64_MAX / 4; /* the last block past 2^64 */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EOVERFLOW);
	dc.block_stride = L * 8 * tb;
	dc.token_stride = UINT64_MAX / 4; /* one block past 2^64 */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EOVERFLOW);
	ck_assert_msg_has("a block of 8 slots");
	dc.token_stride = tb;
	dc.block_slots = 0;
	dc.token_stride = UINT64_MAX / 16; /* no blocks: the slots past 2^64 */
	ck_assert_err(hc__dev_plan(&q.p->g, &d, &pl), EOVERFLOW);
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
	tcase_add_test(tc, every_kind_random);
	tcase_add_test(tc, alignment);
	tcase_add_test(tc, bad_descriptions);
	tcase_add_test(tc, sglang_layouts);
	tcase_add_test(tc, bad_interleave_and_blocks);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
