/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_lookup.c - the key index, prefix lookup, hit policies, reserve by
 * key and host locks, in one process.
 */
#include <stdio.h>
#include <stdlib.h>

#include "hct.h"

static const char *name;
static hc_pool *pool;

static void setup(void)
{
	name = hct_name();
	pool = hct_create_attach(name, 64, 50, 8);
}

static void teardown(void)
{
	if (pool) {
		ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, NULL, NULL), 0);
		hc_pool_detach(pool);
	}
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}

START_TEST(store_then_find)
{
	hc_key_t keys[8];
	hc_page_t pages[8];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 8 };

	hct_keys(keys, 8, 1);
	ck_assert_int_eq(hct_hit(pool, keys, 8), 0);
	ck_assert_int_eq(hct_store(pool, keys, 5, 0), 5);
	ck_assert_int_eq(hc_lookup(pool, &rq, pages), 5);
	for (int i = 0; i < 5; i++) {
		struct hc_page_info pi;
		ck_assert_ok(hc_page_info(pool, HC_PAGE_ID(pages[i]), &pi, sizeof(pi)));
		ck_assert_int_eq(pi.state, HC_PAGE_READY);
		ck_assert_int_eq(pi.depth, (uint32_t)i);
		ck_assert_int_eq(pi.keyed, 1);
		ck_assert_mem_eq(pi.key, keys[i], 32);
		ck_assert_int_eq(hct_verify(pool, pages[i], 1), 0);
	}
	ck_assert_uint_eq(pages[5], HC_PAGE_NONE);
	ck_assert_uint_eq(pages[7], HC_PAGE_NONE);
	/* A gap ends the prefix: key 1 gone, so the hit is 1. */
	ck_assert_int_eq(hc_evict_key(pool, keys[1]), 1);
	ck_assert_int_eq(hct_hit(pool, keys, 8), 1);
	ck_assert_int_eq(hc_evict_key(pool, keys[1]), 0);
	ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}
END_TEST

START_TEST(findable_only_when_ready)
{
	hc_key_t keys[2];
	hc_page_t pages[2];
	uint8_t skip[2];
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = keys, .nkeys = 2 };

	hct_keys(keys, 2, 2);
	ck_assert_int_eq(hc_reserve(pool, &rr, pages, skip), 2);
	ck_assert_int_eq(hct_hit(pool, keys, 2), 0); /* reserved is not findable */
	/* A second writer of the same keys is told to skip them. */
	{
		hc_page_t p2[2];
		uint8_t s2[2];
		ck_assert_int_eq(hc_reserve(pool, &rr, p2, s2), 0);
		ck_assert_int_eq(s2[0], HC_SKIP_BUSY);
		ck_assert_int_eq(s2[1], HC_SKIP_BUSY);
		ck_assert_uint_eq(p2[0], HC_PAGE_NONE);
	}
	ck_assert_int_eq(hct_fill_commit_all(pool, pages[0]), 1);
	ck_assert_int_eq(hct_hit(pool, keys, 2), 1);
	ck_assert_int_eq(hct_fill_commit_all(pool, pages[1]), 1);
	ck_assert_int_eq(hct_hit(pool, keys, 2), 2);
	ck_assert_int_eq(hc_reserve(pool, &rr, pages, skip), 0);
	ck_assert_int_eq(skip[0], HC_SKIP_READY);
	ck_assert_int_eq(skip[1], HC_SKIP_READY);
	/* Freed: gone from the index. */
	{
		struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 2 };
		ck_assert_int_eq(hc_lookup(pool, &rq, pages), 2);
		ck_assert_int_eq(hc_page_free(pool, pages, 2), 2);
		ck_assert_int_eq(hct_hit(pool, keys, 2), 0);
	}
}
END_TEST

START_TEST(abort_unkeys)
{
	hc_key_t keys[3];
	hc_page_t pages[3];
	uint8_t skip[3];
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = keys, .nkeys = 3 };

	hct_keys(keys, 3, 3);
	ck_assert_int_eq(hc_reserve(pool, &rr, pages, skip), 3);
	ck_assert_int_eq(hc_page_abort(pool, pages, 3), 3);
	ck_assert_int_eq(hc_reserve(pool, &rr, pages, skip), 3); /* absent again, not busy */
	ck_assert_int_eq(skip[0], 0);
	ck_assert_int_eq(hc_page_abort(pool, pages, 3), 3);
}
END_TEST

START_TEST(other_fingerprint_finds_nothing)
{
	hc_key_t keys[4];
	hc_page_t pages[4];
	uint8_t fp[32], skip[4];
	struct hc_pool_info info;
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 4 };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req),
				     .keys = keys,
				     .nkeys = 4,
				     .fingerprint = fp };

	hct_keys(keys, 4, 4);
	ck_assert_int_eq(hct_store(pool, keys, 4, 0), 4);
	hc_pool_info(pool, &info, sizeof(info));
	memcpy(fp, info.fingerprint, 32);
	rq.fingerprint = fp;
	ck_assert_int_eq(hc_lookup(pool, &rq, pages), 4);
	fp[7] ^= 1;
	ck_assert_int_eq(hc_lookup(pool, &rq, pages), 0);
	ck_assert_uint_eq(pages[0], HC_PAGE_NONE);
	ck_assert_err(hc_reserve(pool, &rr, pages, skip), EINVAL);
	ck_assert_msg_has("fingerprint");
}
END_TEST

START_TEST(lookup_pin_holds_against_eviction)
{
	hc_key_t keys[4];
	hc_page_t pages[4];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req),
				    .keys = keys,
				    .nkeys = 4,
				    .flags = HC_LOOKUP_PIN };

	hct_keys(keys, 4, 5);
	ck_assert_int_eq(hct_store(pool, keys, 4, 0), 4);
	ck_assert_int_eq(hc_lookup(pool, &rq, pages), 4);
	ck_assert_err(hc_evict_key(pool, keys[2]), EBUSY);
	ck_assert_int_eq(hc_evict(pool, 64), 0); /* everything is pinned */
	for (int i = 0; i < 4; i++)
		ck_assert_ok(hc_page_unpin(pool, pages[i]));
	ck_assert_int_eq(hc_evict(pool, 64), 4);
	ck_assert_int_eq(hct_hit(pool, keys, 4), 0);
}
END_TEST

START_TEST(host_lock_holds)
{
	hc_key_t keys[2];
	hc_page_t pages[2];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 2 };
	struct hc_page_info pi;

	hct_keys(keys, 2, 6);
	ck_assert_int_eq(hct_store(pool, keys, 2, 0), 2);
	ck_assert_int_eq(hc_lookup(pool, &rq, pages), 2);
	ck_assert_ok(hc_page_lock(pool, pages[1]));
	ck_assert_ok(hc_page_info(pool, HC_PAGE_ID(pages[1]), &pi, sizeof(pi)));
	ck_assert_int_eq(pi.locks, 1);
	ck_assert_int_eq(pi.pins, 0);
	ck_assert_int_eq(hc_evict(pool, 64), 1);
	ck_assert_err(hc_page_unpin(pool, pages[1]), EINVAL); /* a lock is not a pin */
	ck_assert_err(hc_page_free(pool, &pages[1], 1), EBUSY);
	ck_assert_ok(hc_page_unlock(pool, pages[1]));
	ck_assert_err(hc_page_unlock(pool, pages[1]), EINVAL);
	ck_assert_msg_has("not locked");
	ck_assert_int_eq(hc_evict(pool, 64), 1);
	ck_assert_err(hc_page_lock(pool, pages[1]), ESTALE);
}
END_TEST

/* Fill the pool, then ask for more: the least recently used go first. */
START_TEST(alloc_evicts_when_full)
{
	hc_key_t a[32], b[32], c[8];

	hct_keys(a, 32, 7);
	hct_keys(b, 32, 8);
	hct_keys(c, 8, 9);
	ck_assert_int_eq(hct_store(pool, a, 32, 0), 32);
	ck_assert_int_eq(hct_store(pool, b, 32, 0), 32);
	ck_assert_int_eq(hct_hit(pool, a, 32), 32);
	ck_assert_int_eq(hct_store(pool, c, 8, 0), 8);
	ck_assert_int_eq(hct_hit(pool, c, 8), 8);
	{
		struct hc_stats st = hct_stats(pool);
		ck_assert_uint_ge(hct_counter(pool, HC_CTR_evictions), 8);
		ck_assert_uint_eq(st.pages[HC_PAGE_READY], 64);
		ck_assert_uint_eq(st.keyed, 64);
	}
}
END_TEST

/* A reservation whose new keys need exactly the free pages left, with READY
 * keys after them, takes those pages and evicts nothing: it used to ask for
 * one page too many at the first READY key past its last free page. */
START_TEST(reserve_takes_exactly_the_free_pages)
{
	hc_key_t k[64], fill[60];
	hc_page_t pages[64];
	uint8_t skip[64];
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 8 };

	hct_keys(k, 64, 21);
	hct_keys(fill, 60, 22);
	ck_assert_int_eq(hct_store(pool, k + 4, 4, 4), 4);  /* keys 4..7 READY */
	ck_assert_int_eq(hct_store(pool, fill, 56, 0), 56); /* 4 pages left free */
	ck_assert_int_eq(hc_reserve(pool, &rr, pages, skip), 4);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(skip[i], i < 4 ? 0 : HC_SKIP_READY);
	ck_assert_uint_eq(hct_counter(pool, HC_CTR_evictions), 0);
	ck_assert_ok(hc_page_abort(pool, pages, 4));
}
END_TEST

/* Room for a reservation is never made by evicting the pages it found
 * READY, even when they are the oldest in the pool. */
START_TEST(reserve_spares_its_own_ready_pages)
{
	hc_key_t k[8], fill[62];
	hc_page_t pages[8];
	uint8_t skip[8];
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 8 };

	hct_keys(k, 8, 23);
	hct_keys(fill, 62, 24);
	ck_assert_int_eq(hct_store(pool, k + 4, 4, 4), 4);       /* keys 4..7: the oldest */
	ck_assert_int_eq(hct_store(pool, fill, 58, 0), 58);      /* 2 pages left free */
	ck_assert_int_eq(hc_reserve(pool, &rr, pages, skip), 4); /* 2 free, 2 evicted */
	ck_assert_int_eq(hct_hit(pool, k + 4, 4), 4);
	ck_assert_int_eq(hct_hit(pool, fill, 58), 0); /* the victims were others' */
	ck_assert_ok(hc_page_abort(pool, pages, 4));
}
END_TEST

/* Store keys[first..first+n) with one presence mask: the count stored. */
static int store_with(hc_pool *p, const hc_key_t *keys, unsigned first, unsigned n, uint32_t presence)
{
	hc_page_t pages[8];
	uint8_t skip[8];
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req),
				     .keys = keys + first,
				     .nkeys = n,
				     .first_depth = first,
				     .presence = presence };
	int m = hc_reserve(p, &rr, pages, skip);

	for (unsigned i = 0; m > 0 && i < n; i++)
		ck_assert_int_eq(hct_fill_commit_all(p, pages[i]), 1);
	return m;
}

/*
 * Hit policies: "kv" needs every page, "swa" the last 2, "state" the last 1.
 * Page:      0   1   2      3      4      5
 * holds:     kv  kv  kv,st  kv,sw  kv,sw  kv,sw,st
 */
START_TEST(hit_policies)
{
	struct hc_component_spec comps[3] = {
		{ .size = sizeof(struct hc_component_spec),
		  .name = "kv",
		  .dtype = HC_DTYPE_BF16,
		  .kind = HC_COMP_KV,
		  .sharding = HC_SHARDED,
		  .kv_heads = 2,
		  .head_bytes = 64,
		  .layers = 1 },
		{ .size = sizeof(struct hc_component_spec),
		  .name = "swa",
		  .dtype = HC_DTYPE_BF16,
		  .kind = HC_COMP_KV,
		  .sharding = HC_SHARDED,
		  .kv_heads = 2,
		  .head_bytes = 64,
		  .layers = 1,
		  .window_pages = 2 },
		{ .size = sizeof(struct hc_component_spec),
		  .name = "state",
		  .dtype = HC_DTYPE_F32,
		  .kind = HC_COMP_STATE,
		  .sharding = HC_REPLICATED,
		  .bytes_per_layer = 512,
		  .layers = 1,
		  .window_pages = 1 },
	};
	struct hct_spec s;
	const char *n2 = hct_name();
	hc_pool *p;
	hc_key_t keys[6];
	hc_page_t pages[6];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 6 };
	struct hc_component_info ci;

	hct_spec_init(&s, n2, 16);
	s.spec.comps = comps;
	s.spec.ncomp = 3;
	ck_assert_ok(hc_pool_create(&s.spec));
	p = hct_attach(n2, 0);
	ck_assert_ok(hc_pool_component(p, 1, &ci, sizeof(ci)));
	ck_assert_uint_eq(ci.window_pages, 2);
	hct_keys(keys, 6, 21);
	ck_assert_int_eq(store_with(p, keys, 0, 2, 0x1), 2);
	ck_assert_int_eq(store_with(p, keys, 2, 1, 0x5), 1);
	ck_assert_int_eq(store_with(p, keys, 3, 2, 0x3), 2);
	ck_assert_int_eq(store_with(p, keys, 5, 1, 0x7), 1);

	rq.comps = 0x1;
	ck_assert_int_eq(hc_lookup(p, &rq, pages), 6);
	rq.comps = 0x3; /* kv everywhere, swa on 4 and 5 */
	ck_assert_int_eq(hc_lookup(p, &rq, pages), 6);
	rq.comps = 0x5; /* state on the last page: 5 */
	ck_assert_int_eq(hc_lookup(p, &rq, pages), 6);
	rq.comps = 0; /* all three */
	ck_assert_int_eq(hc_lookup(p, &rq, pages), 6);
	rq.nkeys = 5; /* ends at page 4: no state there; page 2 has it, but swa needs 1 and 2 */
	rq.comps = 0x5;
	ck_assert_int_eq(hc_lookup(p, &rq, pages), 3);
	rq.comps = 0x7;
	ck_assert_int_eq(hc_lookup(p, &rq, pages), 0);
	rq.comps = 0x3;
	ck_assert_int_eq(hc_lookup(p, &rq, pages), 5);
	/* State alone, pinned: only the page it needs is pinned. */
	rq.nkeys = 6;
	rq.comps = 0x4;
	rq.flags = HC_LOOKUP_PIN;
	ck_assert_int_eq(hc_lookup(p, &rq, pages), 6);
	for (int i = 0; i < 5; i++)
		ck_assert_uint_eq(pages[i], HC_PAGE_NONE);
	ck_assert_uint_ne(pages[5], HC_PAGE_NONE);
	{
		struct hc_page_info pi;
		ck_assert_ok(hc_page_info(p, HC_PAGE_ID(pages[5]), &pi, sizeof(pi)));
		ck_assert_int_eq(pi.pins, 1);
		ck_assert_ok(hc_page_unpin(p, pages[5]));
	}
	/* A hole before the window: full attention stops there, the window does not. */
	rq.flags = 0;
	ck_assert_int_eq(hc_evict_key(p, keys[1]), 1);
	rq.comps = 0x1;
	ck_assert_int_eq(hc_lookup(p, &rq, pages), 1);
	rq.comps = 0x6;
	ck_assert_int_eq(hc_lookup(p, &rq, pages), 6);
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
	hc_pool_detach(p);
	hc_pool_destroy(n2, NULL, 0);
}
END_TEST

/* One key alone takes its own path (no pipeline): a hit pins exactly its
 * page, a page without every full component is no hit and keeps no pin,
 * and NOTOUCH and PIN mean what they do for longer lookups. */
START_TEST(one_key_lookups)
{
	hc_key_t keys[3];
	hc_page_t h;
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .nkeys = 1, .flags = HC_LOOKUP_PIN };
	struct hc_rank_info ri;

	hct_keys(keys, 3, 9);
	ck_assert_int_eq(hct_store(pool, keys, 1, 0), 1);
	ck_assert_int_eq(store_with(pool, keys, 1, 1, 1), 1); /* kv only: the state is missing */
	rq.keys = keys;
	ck_assert_int_eq(hc_lookup(pool, &rq, &h), 1);
	ck_assert_uint_ne(h, HC_PAGE_NONE);
	ck_assert_int_eq(hct_verify(pool, h, 1), 0);
	rq.keys = keys + 1;
	ck_assert_int_eq(hc_lookup(pool, &rq, &h), 0);
	ck_assert_uint_eq(h, HC_PAGE_NONE);
	rq.keys = keys + 2;
	ck_assert_int_eq(hc_lookup(pool, &rq, &h), 0); /* never stored */
	ck_assert_ok(hc_pool_rank(pool, (unsigned)pool->slot, &ri, sizeof(ri)));
	ck_assert_uint_eq(ri.pins, 1); /* key 0's page, and nothing of the miss */
	rq.keys = keys;
	rq.flags = 0;
	ck_assert_int_eq(hc_lookup(pool, &rq, &h), 1);
	ck_assert_ok(hc_pool_rank(pool, (unsigned)pool->slot, &ri, sizeof(ri)));
	ck_assert_uint_eq(ri.pins, 1);
	ck_assert_ok(hc_page_unpin(pool, h));
	ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}
END_TEST

START_TEST(lookup_bad_input)
{
	hc_key_t keys[2];
	hc_page_t pages[2];
	uint8_t skip[2];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 0 };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = keys, .nkeys = 0 };

	hct_keys(keys, 2, 22);
	ck_assert_err(hc_lookup(pool, &rq, pages), EINVAL);
	ck_assert_msg_has("0 keys");
	ck_assert_err(hc_reserve(pool, &rr, pages, skip), EINVAL);
	rq.nkeys = rr.nkeys = HC_LOOKUP_MAX + 1;
	ck_assert_err(hc_lookup(pool, &rq, pages), E2BIG);
	ck_assert_msg_has("1..65536");
	ck_assert_err(hc_reserve(pool, &rr, pages, skip), E2BIG);
	rq.nkeys = rr.nkeys = 2;
	rq.keys = rr.keys = NULL;
	ck_assert_err(hc_lookup(pool, &rq, pages), EINVAL);
	ck_assert_err(hc_reserve(pool, &rr, pages, skip), EINVAL);
	rq.keys = rr.keys = keys;
	ck_assert_err(hc_lookup(pool, NULL, pages), EINVAL);
	ck_assert_err(hc_lookup(pool, &rq, NULL), EINVAL);
	ck_assert_err(hc_reserve(pool, &rr, pages, NULL), EINVAL);
	rq.comps = 0x10;
	ck_assert_err(hc_lookup(pool, &rq, pages), EINVAL);
	ck_assert_msg_has("component mask");
	rq.comps = 0;
	rq.flags = 0x80;
	ck_assert_err(hc_lookup(pool, &rq, pages), EINVAL);
	ck_assert_msg_has("unknown flags");
	rr.presence = 0x8;
	ck_assert_err(hc_reserve(pool, &rr, pages, skip), EINVAL);
	rr.presence = 0;
	rr.first_depth = UINT32_MAX;
	ck_assert_err(hc_reserve(pool, &rr, pages, skip), EINVAL);
	ck_assert_err(hc_evict_key(pool, NULL), EINVAL);
	ck_assert_err(hc_page_info(pool, 64, NULL, 0), EINVAL);
	{
		struct hc_page_info pi;
		ck_assert_err(hc_page_info(pool, 64, &pi, sizeof(pi)), EINVAL);
		ck_assert_msg_has("out of range");
	}
}
END_TEST

/* An admin attach has no rank slot: it may look, never hold. */
START_TEST(admin_looks_but_never_holds)
{
	hc_key_t keys[3];
	hc_page_t pages[3];
	uint8_t skip[3];
	hc_pool *adm = hct_attach(name, HC_ATTACH_ADMIN);
	hc_pool *ro = hct_attach(name, HC_ATTACH_READONLY);
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = 3 };
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = keys, .nkeys = 3 };

	hct_keys(keys, 3, 23);
	ck_assert_int_eq(hct_store(pool, keys, 3, 0), 3);
	ck_assert_int_eq(hc_lookup(adm, &rq, pages), 3);
	ck_assert_int_eq(hc_lookup(ro, &rq, pages), 3);
	rq.flags = HC_LOOKUP_PIN;
	ck_assert_err(hc_lookup(adm, &rq, pages), EPERM);
	ck_assert_err(hc_reserve(adm, &rr, pages, skip), EPERM);
	ck_assert_err(hc_evict(adm, 1), EPERM);
	ck_assert_err(hc_pool_clear(adm), EPERM);
	hc_pool_detach(ro);
	hc_pool_detach(adm);
}
END_TEST

START_TEST(clear_empties_when_nothing_is_held)
{
	hc_key_t keys[6];
	hc_page_t pages[6];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req),
				    .keys = keys,
				    .nkeys = 6,
				    .flags = HC_LOOKUP_PIN };
	struct hc_stats st;

	hct_keys(keys, 6, 24);
	ck_assert_int_eq(hct_store(pool, keys, 6, 0), 6);
	ck_assert_int_eq(hc_lookup(pool, &rq, pages), 6);
	ck_assert_err(hc_pool_clear(pool), EBUSY);
	ck_assert_msg_has("6 pins");
	for (int i = 0; i < 6; i++)
		ck_assert_ok(hc_page_unpin(pool, pages[i]));
	ck_assert_int_eq(hc_pool_clear(pool), 6);
	st = hct_stats(pool);
	ck_assert_uint_eq(st.pages[HC_PAGE_FREE], 64);
	ck_assert_uint_eq(st.keyed, 0);
	ck_assert_int_eq(hct_hit(pool, keys, 6), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lookup");
	TCase *tc = tcase_create("lookup");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, store_then_find);
	tcase_add_test(tc, findable_only_when_ready);
	tcase_add_test(tc, reserve_takes_exactly_the_free_pages);
	tcase_add_test(tc, reserve_spares_its_own_ready_pages);
	tcase_add_test(tc, abort_unkeys);
	tcase_add_test(tc, other_fingerprint_finds_nothing);
	tcase_add_test(tc, lookup_pin_holds_against_eviction);
	tcase_add_test(tc, host_lock_holds);
	tcase_add_test(tc, alloc_evicts_when_full);
	tcase_add_test(tc, hit_policies);
	tcase_add_test(tc, one_key_lookups);
	tcase_add_test(tc, lookup_bad_input);
	tcase_add_test(tc, admin_looks_but_never_holds);
	tcase_add_test(tc, clear_empties_when_nothing_is_held);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
