/* SPDX-License-Identifier: Apache-2.0 */
/* test_layout.c - envelope geometry, byte order and fingerprint. */
#include <stdlib.h>

#include "hct.h"

static struct hc__geom geom_of(const struct hct_spec *s)
{
	struct hc__geom g;

	memset(&g, 0, sizeof(g));
	g.page_tokens = s->spec.page_tokens;
	g.tp_size = s->spec.tp_size;
	g.head_groups = s->spec.head_groups;
	g.ncomp = s->spec.ncomp;
	g.max_ranks = 32;
	g.npages = 8;
	for (unsigned i = 0; i < g.ncomp; i++) {
		const struct hc_component_spec *c = &s->comps[i];
		strcpy(g.comps[i].name, c->name);
		g.comps[i].dtype = c->dtype;
		g.comps[i].kind = c->kind;
		g.comps[i].sharding = c->sharding;
		g.comps[i].kv_heads = c->kv_heads;
		g.comps[i].head_bytes = c->head_bytes;
		g.comps[i].bytes_per_layer = c->kind == HC_COMP_STATE ? c->bytes_per_layer : 0;
		g.comps[i].layers = c->layers;
	}
	return g;
}

START_TEST(byte_order_matches_formula)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 0, 0);
	struct hc_component_info kv, st;
	struct hc_pool_info info;
	const uint64_t T = 16, H = 4, B = 64, L = 2, G = 2, Hg = H / G;

	ck_assert_ok(hc_pool_info(p, &info, sizeof(info)));
	ck_assert_ok(hc_pool_component(p, 0, &kv, sizeof(kv)));
	ck_assert_ok(hc_pool_component(p, 1, &st, sizeof(st)));
	ck_assert_uint_eq(info.head_groups, G);
	ck_assert_uint_eq(kv.groups, G);
	ck_assert_uint_eq(st.groups, 1);
	ck_assert_uint_eq(kv.offset, 0);
	ck_assert_uint_eq(kv.layer_stride, 2 * T * Hg * B);
	ck_assert_uint_eq(kv.group_stride, L * 2 * T * Hg * B);
	ck_assert_uint_eq(kv.bytes, G * L * 2 * T * Hg * B);
	ck_assert_uint_eq(st.offset % HC_ENVELOPE_ALIGN, 0);
	ck_assert_uint_ge(st.offset, kv.bytes);
	ck_assert_uint_eq(info.envelope_bytes % HC_ENVELOPE_ALIGN, 0);
	ck_assert_uint_eq(info.envelopes_offset % (2u << 20), 0);

	for (uint32_t id = 0; id < 4; id++) {
		hc_page_t pg = HC_PAGE_MAKE(id, 0);
		uint8_t *env = hc_page_envelope(p, pg);
		ck_assert_ptr_nonnull(env);
		ck_assert_uint_eq((uintptr_t)env % HC_ENVELOPE_ALIGN, 0);
		for (uint64_t g = 0; g < G; g++)
			for (uint64_t l = 0; l < L; l++) {
				uint8_t *a;
				size_t len;
				ck_assert_ok(hc_page_addr(p, pg, 0, (unsigned)l, (unsigned)g, (void **)&a, &len));
				ck_assert_uint_eq(len, 2 * T * Hg * B);
				for (uint64_t kvi = 0; kvi < 2; kvi++)
					for (uint64_t t = 0; t < T; t += 5)
						for (uint64_t h = 0; h < Hg; h++) {
							uint64_t want = g * (L * 2 * T * Hg * B) +
									l * (2 * T * Hg * B) + kvi * (T * Hg * B) +
									t * (Hg * B) + h * B;
							uint64_t got = (uint64_t)(a + kvi * T * Hg * B + t * Hg * B +
										  h * B - env);
							ck_assert_uint_eq(got, want);
						}
			}
		/* A rank's shard is one run: group g+1 starts where group g ends. */
		uint8_t *g0, *g1;
		ck_assert_ok(hc_page_addr(p, pg, 0, 0, 0, (void **)&g0, NULL));
		ck_assert_ok(hc_page_addr(p, pg, 0, 0, 1, (void **)&g1, NULL));
		ck_assert_uint_eq((uint64_t)(g1 - g0), kv.group_stride);
		uint8_t *s0;
		size_t slen;
		ck_assert_ok(hc_page_addr(p, pg, 1, 1, 0, (void **)&s0, &slen));
		ck_assert_uint_eq((uint64_t)(s0 - env), st.offset + 1024);
		ck_assert_uint_eq(slen, 1024);
	}
	/* Envelopes are back to back. */
	ck_assert_uint_eq((uint64_t)((uint8_t *)hc_page_envelope(p, HC_PAGE_MAKE(1, 0)) -
				     (uint8_t *)hc_page_envelope(p, HC_PAGE_MAKE(0, 0))),
			  info.envelope_bytes);
	ck_assert_ptr_null(hc_page_envelope(p, HC_PAGE_MAKE(4, 0)));
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

START_TEST(fingerprint_ignores_tp_capacity_name)
{
	struct hct_spec a, b;
	struct hc__geom ga, gb;
	uint8_t fa[32], fb[32];

	hct_spec_init(&a, "x", 8);
	hct_spec_init(&b, "y", 99);
	a.spec.head_groups = b.spec.head_groups = 2;
	b.spec.tp_size = 4; /* four ranks, two per head group */
	ga = geom_of(&a);
	gb = geom_of(&b);
	gb.npages = 99;
	ck_assert_ok(hc__geom_envelope(&ga));
	ck_assert_ok(hc__geom_envelope(&gb));
	hc__fingerprint("m", &ga, fa);
	hc__fingerprint("m", &gb, fb);
	ck_assert_mem_eq(fa, fb, 32);

	hc__fingerprint("other-model", &gb, fb);
	ck_assert(memcmp(fa, fb, 32) != 0);

	b.comps[0].dtype = HC_DTYPE_F16; /* same size, another dtype */
	gb = geom_of(&b);
	ck_assert_ok(hc__geom_envelope(&gb));
	hc__fingerprint("m", &gb, fb);
	ck_assert(memcmp(fa, fb, 32) != 0);

	hct_spec_init(&b, "y", 8);
	b.comps[0].head_bytes = 128;
	gb = geom_of(&b);
	ck_assert_ok(hc__geom_envelope(&gb));
	hc__fingerprint("m", &gb, fb);
	ck_assert(memcmp(fa, fb, 32) != 0);

	hct_spec_init(&b, "y", 8);
	b.spec.page_tokens = 32;
	gb = geom_of(&b);
	ck_assert_ok(hc__geom_envelope(&gb));
	hc__fingerprint("m", &gb, fb);
	ck_assert(memcmp(fa, fb, 32) != 0);

	/* The head-group count decides the byte order, so it is covered. */
	hct_spec_init(&b, "y", 8);
	b.spec.head_groups = 4;
	b.spec.tp_size = 4;
	gb = geom_of(&b);
	ck_assert_ok(hc__geom_envelope(&gb));
	hc__fingerprint("m", &gb, fb);
	ck_assert(memcmp(fa, fb, 32) != 0);
}
END_TEST

START_TEST(default_head_groups)
{
	struct hct_spec s;
	struct hc__geom g;

	hct_spec_init(&s, "x", 8);
	s.spec.tp_size = 8; /* more ranks than the 4 KV heads: groups = heads */
	g = geom_of(&s);
	ck_assert_ok(hc__geom_envelope(&g));
	ck_assert_uint_eq(g.head_groups, 4);
	ck_assert_uint_eq(g.comps[0].group_stride * 4, g.comps[0].bytes);

	s.spec.tp_size = 1;
	g = geom_of(&s);
	ck_assert_ok(hc__geom_envelope(&g));
	ck_assert_uint_eq(g.head_groups, 1);

	/* 32 ranks, 32 heads: the most groups under the limit of 31 that divide both */
	s.spec.tp_size = 32;
	s.comps[0].kv_heads = 32;
	g = geom_of(&s);
	ck_assert_ok(hc__geom_envelope(&g));
	ck_assert_uint_eq(g.head_groups, 16);

	/* 3 heads at TP 2: no rank's share is whole, so no count is picked
	 * (it was 1 once, and the engine failed at run time) */
	s.spec.tp_size = 2;
	s.comps[0].kv_heads = 3;
	g = geom_of(&s);
	ck_assert_err(hc__geom_envelope(&g), EINVAL);
	ck_assert_msg_has("3 KV heads do not split over TP 2");
	/* given explicitly, one group is the caller's choice (every rank reads all heads) */
	s.spec.head_groups = 1;
	g = geom_of(&s);
	ck_assert_ok(hc__geom_envelope(&g));
	ck_assert_uint_eq(g.head_groups, 1);
}
END_TEST

static int geom_err(struct hct_spec *s)
{
	struct hc__geom g = geom_of(s);
	int ret = hc__geom_envelope(&g);

	return ret < 0 ? ret : hc__geom_regions(&g);
}

START_TEST(bad_geometry)
{
	struct hct_spec s;

	hct_spec_init(&s, "x", 8);
	s.spec.page_tokens = 0;
	ck_assert_err(geom_err(&s), EINVAL);
	ck_assert_msg_has("page_tokens");

	hct_spec_init(&s, "x", 8);
	s.comps[0].layers = 0;
	ck_assert_err(geom_err(&s), EINVAL);
	ck_assert_msg_has("layer count is zero");

	hct_spec_init(&s, "x", 8);
	s.spec.head_groups = 2;
	s.comps[0].kv_heads = 3;
	ck_assert_err(geom_err(&s), EINVAL);
	ck_assert_msg_has("do not split");

	hct_spec_init(&s, "x", 8);
	s.comps[0].head_bytes = 63; /* not a multiple of bf16 */
	ck_assert_err(geom_err(&s), EINVAL);

	hct_spec_init(&s, "x", 8);
	s.comps[0].kv_heads = 1u << 30;
	s.comps[0].head_bytes = 1u << 30;
	s.comps[0].layers = 1u << 30;
	ck_assert_err(geom_err(&s), EOVERFLOW);

	hct_spec_init(&s, "x", 8);
	s.comps[1].bytes_per_layer = UINT64_MAX / 2;
	s.comps[1].layers = 4;
	ck_assert_err(geom_err(&s), EOVERFLOW);

	hct_spec_init(&s, "x", 8);
	s.comps[1].name = "kv";
	ck_assert_err(geom_err(&s), EINVAL);
	ck_assert_msg_has("twice");

	hct_spec_init(&s, "x", 8);
	s.comps[1].name = "st ate";
	ck_assert_err(geom_err(&s), EINVAL);

	hct_spec_init(&s, "x", 8);
	s.comps[0].dtype = (enum hc_dtype)77;
	ck_assert_err(geom_err(&s), EINVAL);

	hct_spec_init(&s, "x", 8);
	s.spec.head_groups = 32;
	s.comps[0].kv_heads = 64;
	ck_assert_err(geom_err(&s), EINVAL);

	hct_spec_init(&s, "x", 8);
	s.spec.head_groups = 3;
	s.spec.tp_size = 2;
	s.comps[0].kv_heads = 6;
	ck_assert_err(geom_err(&s), EINVAL);
	ck_assert_msg_has("divide");

	hct_spec_init(&s, "x", 8);
	s.spec.tp_size = 0;
	ck_assert_err(geom_err(&s), EINVAL);

	hct_spec_init(&s, "x", 8);
	s.spec.ncomp = 0;
	ck_assert_err(geom_err(&s), EINVAL);

	hct_spec_init(&s, "x", 8);
	s.comps[1].bytes_per_layer = 0;
	ck_assert_err(geom_err(&s), EINVAL);

	hct_spec_init(&s, "x", 8);
	s.comps[0].kind = (enum hc_comp_kind)9;
	ck_assert_err(geom_err(&s), EINVAL);
}
END_TEST

START_TEST(dtypes)
{
	for (int d = 1; d < HC_DTYPE__COUNT; d++) {
		ck_assert_int_eq(hc_dtype_parse(hc_dtype_name((enum hc_dtype)d)), d);
		ck_assert_uint_gt(hc_dtype_size((enum hc_dtype)d), 0);
	}
	ck_assert_err(hc_dtype_parse("float128"), EINVAL);
	ck_assert_msg_has("float128");
	ck_assert_uint_eq(hc_dtype_size((enum hc_dtype)99), 0);
	ck_assert_str_eq(hc_dtype_name(HC_DTYPE_BF16), "bf16");
}
END_TEST

START_TEST(word_encoding)
{
	uint64_t w = hc__w_make(HC_PAGE_QUARANTINE, 127, 0x3fffff, 0xdeadbeef);

	ck_assert_uint_eq(hc__w_state(w), HC_PAGE_QUARANTINE);
	ck_assert_uint_eq(hc__w_owner(w), 127);
	ck_assert_uint_eq(hc__w_gen(w), 0x3fffff);
	ck_assert_uint_eq(hc__w_aux(w), 0xdeadbeef);
	w = hc__w_make(HC_PAGE_FREEING, 0, 0x400001, 0); /* generations wrap at 22 bits */
	ck_assert_uint_eq(hc__w_gen(w), 1);
	ck_assert_uint_eq(hc__w_state(w), HC_PAGE_FREEING);
	ck_assert_uint_eq(HC_PAGE_ID(HC_PAGE_MAKE(77, 0x400005)), 77);
	ck_assert_uint_eq(HC_PAGE_GEN(HC_PAGE_MAKE(77, 0x400005)), 5);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("layout");
	TCase *tc = tcase_create("layout");

	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, byte_order_matches_formula);
	tcase_add_test(tc, fingerprint_ignores_tp_capacity_name);
	tcase_add_test(tc, default_head_groups);
	tcase_add_test(tc, bad_geometry);
	tcase_add_test(tc, dtypes);
	tcase_add_test(tc, word_encoding);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
