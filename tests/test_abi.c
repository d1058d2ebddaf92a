/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_abi.c - the versioned structs of the public ABI (hicache.h, "ABI"):
 * a caller built against an older header (a smaller size), a newer one (a
 * larger size, its new members zero or not), and one that forgot the size,
 * for every kind of struct: inputs, arrays of them, outputs, the ticket
 * handle.  Each error names the struct and what to do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hicache/device.h>
#include <hicache/service.h>

#include "../shmpool/pool.h"
#include "hct.h"

#define ASSERT_SIZE_ERROR(expr, type)                                                                                  \
	do {                                                                                                           \
		ck_assert_err(expr, EINVAL);                                                                           \
		ck_assert_msg_has("struct " type);                                                                     \
	} while (0)

START_TEST(input_size_checked)
{
	const char *name = hct_name();
	struct hct_spec s;

	hct_spec_init(&s, name, 4);
	s.spec.size = 0; /* a caller that never set it */
	ASSERT_SIZE_ERROR(hc_pool_create(&s.spec), "hc_pool_spec");
	ck_assert_msg_has(".size = sizeof(struct hc_pool_spec)");
	s.spec.size = offsetof(struct hc_pool_spec, arg_bytes); /* smaller than any version (the first ends there) */
	ASSERT_SIZE_ERROR(hc_pool_create(&s.spec), "hc_pool_spec");
	s.spec.size = 1u << 20; /* garbage: no struct is that large */
	ASSERT_SIZE_ERROR(hc_pool_create(&s.spec), "hc_pool_spec");
	s.spec.size = sizeof(s.spec);
	s.comps[1].size = 0;
	ASSERT_SIZE_ERROR(hc_pool_create(&s.spec), "hc_component_spec");
	ck_assert_msg_has("element 1");
	s.comps[1].size = sizeof(s.comps[1]);
	ck_assert_ok(hc_pool_create(&s.spec));
	hct_sweep(1);
}
END_TEST

/* A caller built against a newer header: its structs are larger.  Members
 * this library does not know must be zero ("as before"), else refused. */
START_TEST(newer_caller)
{
	const char *name = hct_name();
	struct {
		struct hc_pool_spec spec;
		uint64_t future;
	} big;
	struct {
		struct hc_component_spec c;
		uint64_t future;
	} comps[2];
	struct hct_spec s;
	struct hc_component_info ci;
	hc_pool *p;

	hct_spec_init(&s, name, 4);
	memset(&big, 0, sizeof(big));
	big.spec = s.spec;
	big.spec.size = sizeof(big);
	memset(comps, 0, sizeof(comps));
	for (int i = 0; i < 2; i++) {
		comps[i].c = s.comps[i];
		comps[i].c.size = sizeof(comps[i]); /* the array strides by the larger size */
	}
	big.spec.comps = &comps[0].c;
	big.future = 1;
	ASSERT_SIZE_ERROR(hc_pool_create(&big.spec), "hc_pool_spec");
	ck_assert_msg_has("members past");
	big.future = 0;
	comps[1].future = 7;
	ASSERT_SIZE_ERROR(hc_pool_create(&big.spec), "hc_component_spec");
	comps[1].future = 0;
	ck_assert_ok(hc_pool_create(&big.spec));
	p = hct_attach(name, 0);
	/* Both components were read at the caller's stride. */
	ck_assert_ok(hc_pool_component(p, 1, &ci, sizeof(ci)));
	ck_assert_str_eq(ci.name, "state");
	ck_assert_uint_eq(ci.bytes_per_layer, 1024);
	hc_pool_detach(p);
	hct_sweep(1);
}
END_TEST

/* Outputs: at least the first version's size; a larger struct gets zeros
 * past what the library knows. */
START_TEST(output_size_checked)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 0, 0);
	struct {
		struct hc_pool_info info;
		unsigned char tail[64];
	} big;
	struct {
		struct hc_stats st;
		unsigned char tail[64];
	} bst;
	struct hc_pool_info info;
	struct hc_recovery_report rep;
	uint64_t counts[HC_PAGE__COUNT + 2];

	ASSERT_SIZE_ERROR(hc_pool_info(p, &info, sizeof(info) - 1), "hc_pool_info");
	ck_assert_msg_has("pass sizeof *out");
	ASSERT_SIZE_ERROR(hc_pool_info(p, &info, 0), "hc_pool_info");
	ck_assert_err(hc_pool_info(p, NULL, sizeof(info)), EINVAL);
	memset(&big, 0xff, sizeof(big));
	ck_assert_ok(hc_pool_info(p, &big.info, sizeof(big)));
	ck_assert_str_eq(big.info.name, name);
	for (size_t i = 0; i < sizeof(big.tail); i++)
		ck_assert_uint_eq(big.tail[i], 0);
	memset(&bst, 0xff, sizeof(bst));
	ck_assert_ok(hc_pool_stats(p, &bst.st, sizeof(bst)));
	ck_assert_uint_eq(bst.st.pages[HC_PAGE_FREE], 4);
	for (unsigned c = HC_CTR__COUNT; c < HC_CTR_MAX; c++)
		ck_assert_uint_eq(bst.st.counter[c], 0); /* room to spare reads as zero */
	for (size_t i = 0; i < sizeof(bst.tail); i++)
		ck_assert_uint_eq(bst.tail[i], 0);
	ASSERT_SIZE_ERROR(hc_pool_stats(p, &bst.st, 8), "hc_stats");
	ASSERT_SIZE_ERROR(hc_pool_recover(p, &rep, 3), "hc_recovery_report");
	ck_assert_ok(hc_pool_recover(p, &rep, sizeof(rep)));
	ck_assert_ok(hc_pool_recover(p, NULL, 0));
	/* Counts: as many as asked, at most as many states as there are. */
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
		counts[i] = 99;
	ck_assert_int_eq(hc_pool_count_states(p, counts, 2), 2);
	ck_assert_uint_eq(counts[HC_PAGE_FREE], 4);
	ck_assert_uint_eq(counts[2], 99); /* not asked for: untouched */
	ck_assert_int_eq(hc_pool_count_states(p, counts, HC_PAGE__COUNT + 2), HC_PAGE__COUNT);
	ck_assert_uint_eq(counts[HC_PAGE__COUNT], 99);
	hc_pool_detach(p);
	hct_sweep(1);
}
END_TEST

/* The requests a rank makes, and the handle it keeps. */
START_TEST(requests_and_tickets)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 0, 0);
	struct hc_engine_spec es = { .engine_id = 3, .tp_size = 1, .tp_rank = 0, .quota_pages = HC_QUOTA_UNLIMITED };
	struct hc_attach_opts ao = { .flags = HC_ATTACH_ADMIN };
	struct hc_ticket_name tn = { .size = sizeof(tn), .request_id = "r1", .step = 0 };
	hc_key_t keys[2];
	struct hc_lookup_req lr = { .keys = keys, .nkeys = 2 };
	struct hc_reserve_req rr = { .keys = keys, .nkeys = 2 };
	hc_page_t pages[2];
	uint8_t skip[2];
	hc_ticket t = { .size = 0 };
	hc_pool *q;

	hct_keys(keys, 2, 1);
	ASSERT_SIZE_ERROR(hc_engine_join(p, &es), "hc_engine_spec");
	es.size = sizeof(es);
	ck_assert_ok(hc_engine_join(p, &es));
	ASSERT_SIZE_ERROR(hc_pool_attach(name, &ao, &q), "hc_attach_opts");
	ASSERT_SIZE_ERROR(hc_lookup(p, &lr, pages), "hc_lookup_req");
	ASSERT_SIZE_ERROR(hc_reserve(p, &rr, pages, skip), "hc_reserve_req");
	lr.size = sizeof(lr);
	rr.size = sizeof(rr);
	ck_assert_int_eq(hc_lookup(p, &lr, pages), 0);
	/* The handle's size is the caller's to set, before the call. */
	ck_assert_err(hc_ticket_lookup(p, &tn, &lr, pages, &t), EINVAL);
	ck_assert_msg_has("set .size = sizeof(hc_ticket)");
	tn.size = 0;
	t.size = sizeof(t);
	ASSERT_SIZE_ERROR(hc_ticket_lookup(p, &tn, &lr, pages, &t), "hc_ticket_name");
	tn.size = sizeof(tn);
	ck_assert_int_eq(hc_ticket_lookup(p, &tn, &lr, pages, &t), 0);
	ck_assert_uint_eq(t.size, sizeof(t)); /* kept as the caller set it */
	t.size = 0;
	ck_assert_err(hc_ticket_release(p, &t), EINVAL);
	t.size = sizeof(t);
	ck_assert_ok(hc_ticket_release(p, &t));
	ck_assert_int_eq(hc_reserve(p, &rr, pages, skip), 2);
	ck_assert_ok(hc_page_abort(p, pages, 2));
	hc_pool_detach(p);
	hct_sweep(1);
}
END_TEST

START_TEST(device_structs)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 0, 0);
	static uint8_t kbuf[2][64 * 1024], vbuf[2][64 * 1024];
	uint64_t k[2] = { (uintptr_t)kbuf[0], (uintptr_t)kbuf[1] }, v[2] = { (uintptr_t)vbuf[0], (uintptr_t)vbuf[1] };
	struct hc_dev_comp dc[1] = {
		{ .size = 0, .comp = 0, .k = k, .v = v, .token_bytes = 128, .token_stride = 128, .slots = 512 }
	};
	struct hc_dev_spec ds = { .kind = HC_DEV_HOST, .tp_size = 2, .tp_rank = 0, .comps = dc, .ncomp = 1 };
	struct hc_xfer_req xr = { .n = 1 };
	struct hc_dev_stats st;
	hc_dev *d;
	hc_xfer *x;

	ASSERT_SIZE_ERROR(hc_dev_open(p, &ds, &d), "hc_dev_spec");
	ds.size = sizeof(ds);
	ASSERT_SIZE_ERROR(hc_dev_open(p, &ds, &d), "hc_dev_comp");
	dc[0].size = sizeof(dc[0]);
	ck_assert_ok(hc_dev_open(p, &ds, &d));
	ck_assert_ok(hc_dev_close(d));
	/* A newer caller's larger elements: read at its stride. */
	struct {
		struct hc_dev_comp c;
		uint64_t future;
	} big[1] = { { .c = dc[0], .future = 0 } };
	big[0].c.size = sizeof(big[0]);
	ds.comps = &big[0].c;
	ck_assert_ok(hc_dev_open(p, &ds, &d));
	ASSERT_SIZE_ERROR(hc_dev_load(d, &xr, &x), "hc_xfer_req");
	ASSERT_SIZE_ERROR(hc_dev_stats(d, &st, 4), "hc_dev_stats");
	ck_assert_ok(hc_dev_stats(d, &st, sizeof(st)));
	ck_assert_uint_eq(st.loads, 0);
	ck_assert_ok(hc_dev_close(d));
	hc_pool_detach(p);
	hct_sweep(1);
}
END_TEST

START_TEST(service_structs)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 0, 0);
	struct hc_service_opts so = { .backend = "nosuch" };
	struct hc_store_opts sto = { .queue_depth = 8 };
	hc_key_t key;
	struct hc_prefetch_req pr = { .keys = &key, .nkeys = 1 };
	struct hc_service_info si;
	hc_service *svc;
	hc_store *st;
	hc_req *rq;

	hct_keys(&key, 1, 2);
	ASSERT_SIZE_ERROR(hc_service_start(name, &so, &svc), "hc_service_opts");
	ASSERT_SIZE_ERROR(hc_store_open(p, "nosuch", &sto, &st), "hc_store_opts");
	ASSERT_SIZE_ERROR(hc_req_prefetch(p, &pr, &rq), "hc_prefetch_req");
	ck_assert_ptr_null(rq);
	pr.size = sizeof(pr);
	pr.name = &(struct hc_ticket_name){ .request_id = "no-size" };
	ASSERT_SIZE_ERROR(hc_req_prefetch(p, &pr, &rq), "hc_ticket_name");
	ASSERT_SIZE_ERROR(hc_service_info(p, &si, 2), "hc_service_info");
	ck_assert_ok(hc_service_info(p, &si, sizeof(si)));
	ck_assert_int_eq(si.live, 0);
	hc_pool_detach(p);
	hct_sweep(1);
}
END_TEST

/* The functions that return no errno (hicache.h lists them) still say
 * what was wrong. */
START_TEST(exceptions)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 0, 0);

	ck_assert_ptr_null(hc_page_envelope(NULL, 0));
	ck_assert_msg_has("pool is NULL");
	ck_assert_ptr_null(hc_page_envelope(p, HC_PAGE_MAKE(4, 0)));
	ck_assert_msg_has("page id 4 is out of range");
	ck_assert_ptr_nonnull(hc_page_envelope(p, HC_PAGE_MAKE(3, 0)));
	ck_assert_uint_eq(hc_page_needed(NULL, 1), 0);
	ck_assert_str_eq(hc_page_state_name(HC_PAGE__COUNT), "INVALID");
	ck_assert_str_eq(hc_page_state_name(HC_PAGE_FREEING), "FREEING");
	ck_assert_ptr_null(hc_counter_name(HC_CTR__COUNT));
	ck_assert_ptr_nonnull(hc_counter_name(HC_CTR__COUNT - 1));
	hc_pool_detach(p);
	hct_sweep(1);
}
END_TEST

/* A caller built against the first version of each struct passes the
 * size that version ended at: each must be taken.  The ends are written
 * here on their own, so that moving the library's first-version table
 * (pool.h, HC__V1_*) breaks this test. */
#define END(T, m) (offsetof(T, m) + sizeof(((T *)0)->m))
START_TEST(first_versions)
{
	const char *name = hct_name();
	struct hct_spec s;
	struct hc_attach_opts ao = { .size = END(struct hc_attach_opts, flags) };
	struct hc_engine_spec es = { .size = END(struct hc_engine_spec, ticket_timeout_ms),
				     .engine_id = 1,
				     .tp_size = 1,
				     .quota_pages = HC_QUOTA_UNLIMITED };
	hc_key_t key;
	struct hc_lookup_req lr = { .size = END(struct hc_lookup_req, fingerprint), .keys = &key, .nkeys = 1 };
	struct hc_reserve_req rr = { .size = END(struct hc_reserve_req, fingerprint), .keys = &key, .nkeys = 1 };
	struct hc_ticket_name tn = { .size = END(struct hc_ticket_name, step), .request_id = "v1" };
	hc_ticket t = { .size = END(hc_ticket, pages) };
	struct hc_pool_info info;
	struct hc_component_info ci;
	struct hc_rank_info ri;
	struct hc_page_info pi;
	struct hc_stats st;
	struct hc_repair_report rep;
	hc_page_t pg;
	uint8_t skip;
	hc_pool *p;

	hct_keys(&key, 1, 9);
	hct_spec_init(&s, name, 4);
	s.spec.size = END(struct hc_pool_spec, arg_bytes);
	ck_assert_ok(hc_pool_create(&s.spec));
	ck_assert_ok(hc_pool_attach(name, &ao, &p));
	ck_assert_ok(hc_engine_join(p, &es));
	ck_assert_int_eq(hc_lookup(p, &lr, &pg), 0);
	ck_assert_int_eq(hc_ticket_lookup(p, &tn, &lr, &pg, &t), 0);
	ck_assert_ok(hc_ticket_release(p, &t));
	ck_assert_int_eq(hc_reserve(p, &rr, &pg, &skip), 1);
	ck_assert_ok(hc_page_abort(p, &pg, 1));
	ck_assert_ok(hc_pool_info(p, &info, END(struct hc_pool_info, arg_bytes)));
	ck_assert_ok(hc_pool_component(p, 0, &ci, END(struct hc_component_info, window_pages)));
	ck_assert_ok(hc_pool_rank(p, 0, &ri, END(struct hc_rank_info, held)));
	ck_assert_ok(hc_page_info(p, 0, &pi, END(struct hc_page_info, tickets)));
	ck_assert_ok(hc_pool_stats(p, &st, END(struct hc_stats, tokens)));
	ck_assert_int_ge(hc_pool_repair(p, 0, &rep, END(struct hc_repair_report, unrepaired), NULL, NULL), 0);
	hc_pool_detach(p);
	hct_sweep(1);
}
END_TEST

/* The older caller's path, on made-up versions: v1 has a, v2 adds b. */
struct v1 {
	uint32_t size;
	uint32_t a;
};
struct v2 {
	uint32_t size;
	uint32_t a;
	uint64_t b;
};
START_TEST(older_and_newer_struct)
{
	struct v1 old = { .size = sizeof(old), .a = 7 };
	struct v2 mine, newer = { .size = sizeof(newer), .a = 8, .b = 0 };
	struct {
		struct v2 v;
		uint64_t c;
	} newest = { .v = { .size = sizeof(newest), .a = 9, .b = 5 }, .c = 0 };

	memset(&mine, 0xee, sizeof(mine));
	ck_assert_ok(hc__abi_in(&mine, sizeof(mine), &old, sizeof(old), "test", "v2"));
	ck_assert_uint_eq(mine.a, 7);
	ck_assert_uint_eq(mine.b, 0); /* not in the caller's version: as before */
	ck_assert_ok(hc__abi_in(&mine, sizeof(mine), &newer, sizeof(old), "test", "v2"));
	ck_assert_uint_eq(mine.a, 8);
	ck_assert_ok(hc__abi_in(&mine, sizeof(mine), &newest, sizeof(old), "test", "v2"));
	ck_assert_uint_eq(mine.b, 5);
	newest.c = 1;
	ck_assert_err(hc__abi_in(&mine, sizeof(mine), &newest, sizeof(old), "test", "v2"), EINVAL);
	old.size = 4;
	ck_assert_err(hc__abi_in(&mine, sizeof(mine), &old, sizeof(old), "test", "v2"), EINVAL);
}
END_TEST

/* The library writes no further than the caller's size, and the handle
 * no further than its own. */
START_TEST(writes_stay_inside)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 0, 0);
	struct hc_engine_spec es = { .size = sizeof(es),
				     .engine_id = 2,
				     .tp_size = 1,
				     .quota_pages = HC_QUOTA_UNLIMITED };
	hc_key_t key;
	struct hc_lookup_req lr = { .size = sizeof(lr), .keys = &key, .nkeys = 1 };
	struct hc_ticket_name tn = { .size = sizeof(tn), .request_id = "w" };
	struct hc_repair_report rep;
	struct hc_component_info ci;
	struct hc_page_info pi;
	struct {
		struct hc_rank_info ri;
		unsigned char after[16];
	} rb;
	struct {
		hc_ticket t;
		unsigned char tail[16], after[16];
	} tb;
	size_t end = END(struct hc_rank_info, held);
	hc_page_t pg;

	memset(&rb, 0xff, sizeof(rb));
	ck_assert_ok(hc_pool_rank(p, 0, &rb.ri, end));
	for (size_t i = end; i < sizeof(rb); i++)
		ck_assert_uint_eq(((unsigned char *)&rb)[i], 0xff);
	ASSERT_SIZE_ERROR(hc_pool_rank(p, 0, &rb.ri, 70000), "hc_rank_info");
	/* an array of an older caller's structs: stepped by its size, nothing past them written */
	{
		unsigned char arr[3 * sizeof(struct hc_rank_info)];
		struct hc_rank_info r1;

		memset(arr, 0xff, sizeof(arr));
		ck_assert_int_eq(hc_pool_ranks(p, (struct hc_rank_info *)(void *)arr, end, 2), 2);
		memcpy(&r1, arr + end, end);
		ck_assert_uint_eq(r1.slot, 1);
		for (size_t i = 2 * end; i < sizeof(arr); i++)
			ck_assert_uint_eq(arr[i], 0xff);
		ASSERT_SIZE_ERROR(hc_pool_ranks(p, (struct hc_rank_info *)(void *)arr, 1, 2), "hc_rank_info");
	}
	ASSERT_SIZE_ERROR(hc_pool_component(p, 0, &ci, 1), "hc_component_info");
	ASSERT_SIZE_ERROR(hc_page_info(p, 0, &pi, 1), "hc_page_info");
	ASSERT_SIZE_ERROR(hc_pool_repair(p, 0, &rep, 1, NULL, NULL), "hc_repair_report");
	ck_assert_ok(hc_engine_join(p, &es));
	hct_keys(&key, 1, 3);
	memset(&tb, 0xa5, sizeof(tb));
	tb.t.size = sizeof(tb.t) + sizeof(tb.tail); /* a newer caller's handle */
	ck_assert_int_eq(hc_ticket_lookup(p, &tn, &lr, &pg, &tb.t), 0);
	for (size_t i = 0; i < sizeof(tb.tail); i++)
		ck_assert_uint_eq(tb.tail[i], 0); /* what it knows nothing of: zero */
	for (size_t i = 0; i < sizeof(tb.after); i++)
		ck_assert_uint_eq(tb.after[i], 0xa5);
	ck_assert_ok(hc_ticket_release(p, &tb.t));
	tb.t.size = 300; /* garbage: refused, nothing written */
	tn.step = 1;
	ck_assert_err(hc_ticket_lookup(p, &tn, &lr, &pg, &tb.t), EINVAL);
	ck_assert_msg_has("ticket handle has size 300");
	hc_pool_detach(p);
	hct_sweep(1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("abi");
	TCase *tc = tcase_create("abi");

	tcase_add_test(tc, input_size_checked);
	tcase_add_test(tc, newer_caller);
	tcase_add_test(tc, output_size_checked);
	tcase_add_test(tc, requests_and_tickets);
	tcase_add_test(tc, device_structs);
	tcase_add_test(tc, service_structs);
	tcase_add_test(tc, exceptions);
	tcase_add_test(tc, first_versions);
	tcase_add_test(tc, older_and_newer_struct);
	tcase_add_test(tc, writes_stay_inside);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
