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
	s.spec.size = sizeof(s.spec) - 8; /* smaller than any version */
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
	suite_add_tcase(s, tc);
	return hct_run(s);
}
