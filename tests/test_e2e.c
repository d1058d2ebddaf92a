/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_e2e.c - the whole path, with the file and the shm backends: several
 * rank processes store pages from their "device" (the host implementation
 * of the device API) and back them up through the service; their L2
 * copies are evicted; they prefetch them back from L3, load them into a
 * fresh device, and compare every byte of K, V and state with what they
 * stored.  Then the pool passes its checks with nothing left held.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hicache/device.h>
#include <hicache/service.h>

#include "hct.h"

#define NRANKS   3
#define NK       8   /* pages per rank */
#define T        16  /* tokens per page (hct_spec_init) */
#define SLOTS    256 /* token slots per layer on a rank's device */
#define LAYERS   2
#define KV_BYTES 256 /* a token's K (or V) at TP 1: 4 heads x 64 B */
#define ST_BYTES 1024

/* One rank's device memory: K, V and state per layer, in host memory. */
struct dev_mem {
	uint8_t k[LAYERS][SLOTS * KV_BYTES], v[LAYERS][SLOTS * KV_BYTES], st[LAYERS][NK * ST_BYTES];
	uint64_t ka[LAYERS], va[LAYERS], sa[LAYERS];
	struct hc_dev_comp comp[2];
};

static hc_dev *dev_open(hc_pool *p, struct dev_mem *m)
{
	struct hc_dev_spec s = { .size = sizeof(struct hc_dev_spec),
				 .kind = HC_DEV_HOST,
				 .tp_size = 1,
				 .tp_rank = 0,
				 .comps = m->comp,
				 .ncomp = 2 };
	hc_dev *d = NULL;

	for (int l = 0; l < LAYERS; l++) {
		m->ka[l] = (uintptr_t)m->k[l];
		m->va[l] = (uintptr_t)m->v[l];
		m->sa[l] = (uintptr_t)m->st[l];
	}
	m->comp[0] = (struct hc_dev_comp){ .size = sizeof(struct hc_dev_comp),
					   .comp = 0,
					   .k = m->ka,
					   .v = m->va,
					   .token_bytes = KV_BYTES,
					   .token_stride = KV_BYTES,
					   .slots = SLOTS };
	m->comp[1] = (struct hc_dev_comp){ .size = sizeof(struct hc_dev_comp),
					   .comp = 1,
					   .k = m->sa,
					   .token_bytes = ST_BYTES,
					   .token_stride = ST_BYTES,
					   .slots = NK };
	return hc_dev_open(p, &s, &d) < 0 ? NULL : d;
}

/* A rank: exit 0, or the step that failed (10 + step). */
static void rank(hc_pool *p, void *arg)
{
	unsigned r = *(const unsigned *)arg, seed = 1000 + r;
	struct dev_mem *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	uint64_t slots[NK * T], sslots[NK];
	hc_key_t k[NK];
	hc_page_t pg[NK];
	uint8_t skip[NK];
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = NK };
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .keys = k,
				      .nkeys = NK,
				      .policy = HC_PREFETCH_WAIT_COMPLETE };
	struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
				  .pages = pg,
				  .n = NK,
				  .slots = slots,
				  .state_slots = sslots };
	hc_dev *da, *db;
	hc_xfer *x;
	hc_req *rq;

	if (!a || !b || !(da = dev_open(p, a)) || !(db = dev_open(p, b)))
		_exit(10);
	for (int l = 0; l < LAYERS; l++)
		for (size_t i = 0; i < sizeof(a->k[l]); i++) {
			a->k[l][i] = (uint8_t)rand_r(&seed);
			a->v[l][i] = (uint8_t)rand_r(&seed);
		}
	for (int l = 0; l < LAYERS; l++)
		for (size_t i = 0; i < sizeof(a->st[l]); i++)
			a->st[l][i] = (uint8_t)rand_r(&seed);
	/* pages in scattered slots, as a paged KV cache has them */
	for (unsigned i = 0; i < NK * T; i++)
		slots[i] = (i * 37 + r * 11) % SLOTS;
	for (unsigned i = 0; i < NK; i++)
		sslots[i] = (i + r) % NK;
	hct_keys(k, NK, 500 + r);
	/* 1. store from the device: READY once every layer is in */
	if (hc_reserve(p, &rr, pg, skip) != NK)
		_exit(11);
	xr.flags = HC_XFER_COMMIT;
	if (hc_dev_store(da, &xr, &x) < 0 || hc_xfer_free(x) != 0)
		_exit(12);
	/* 2. back them up */
	if (hc_req_backup(p, pg, NK, &rq) < 0 || hc_req_wait(rq, 20000) != NK || hc_req_free(rq) < 0)
		_exit(13);
	/* 3. L2 forgets them */
	for (unsigned i = 0; i < NK; i++)
		if (hc_evict_key(p, k[i]) != 1)
			_exit(14);
	if (hct_hit(p, k, NK) != 0)
		_exit(15);
	/* 4. prefetch them back: every one, pinned for us */
	if (hc_req_prefetch(p, &pr, &rq) < 0 || hc_req_prefetch_take(rq, pg, NULL) != NK || hc_req_free(rq) < 0)
		_exit(16);
	/* 5. into a fresh device, and every byte compared */
	xr.flags = 0;
	if (hc_dev_load(db, &xr, &x) < 0 || hc_xfer_free(x) != 0)
		_exit(17);
	for (int l = 0; l < LAYERS; l++) {
		for (unsigned i = 0; i < NK * T; i++)
			if (memcmp(a->k[l] + slots[i] * KV_BYTES, b->k[l] + slots[i] * KV_BYTES, KV_BYTES) ||
			    memcmp(a->v[l] + slots[i] * KV_BYTES, b->v[l] + slots[i] * KV_BYTES, KV_BYTES))
				_exit(18);
		for (unsigned i = 0; i < NK; i++)
			if (memcmp(a->st[l] + sslots[i] * ST_BYTES, b->st[l] + sslots[i] * ST_BYTES, ST_BYTES))
				_exit(19);
	}
	for (unsigned i = 0; i < NK; i++)
		if (hc_page_unpin(p, pg[i]) < 0)
			_exit(20);
	if (hc_dev_close(da) < 0 || hc_dev_close(db) < 0)
		_exit(21);
	free(a);
	free(b);
}

START_TEST(store_backup_evict_prefetch_load)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, NRANKS * NK + 8, 100, 8);
	char spec[192], shm_path[128] = "";
	struct hc_service_opts so = { .size = sizeof(struct hc_service_opts),
				      .backend = spec,
				      .write_policy = HC_WRITE_NONE };
	unsigned ids[NRANKS];
	pid_t pid[NRANKS], svc;
	struct hc_stats st;
	int s;

	if (_i == 0) {
		snprintf(spec, sizeof(spec), "%s", hct_l3_spec);
	} else {
		snprintf(spec, sizeof(spec), "shm:name=hct-e2e-%d,capacity=64M", (int)getpid());
		snprintf(shm_path, sizeof(shm_path), "/dev/shm/hicache-l3.hct-e2e-%d", (int)getpid());
	}
	svc = hct_service_child(name, &so);
	for (unsigned r = 0; r < NRANKS; r++) {
		ids[r] = r;
		pid[r] = hct_spawn(name, rank, &ids[r]);
	}
	for (unsigned r = 0; r < NRANKS; r++) {
		s = hct_wait_child(pid[r]);
		ck_assert_msg(WIFEXITED(s) && WEXITSTATUS(s) == 0, "%s: rank %u failed at step %d", spec, r,
			      WIFEXITED(s) ? WEXITSTATUS(s) - 10 : -1);
	}
	hct_service_child_stop(svc);
	/* every page read from L3 once, every request answered whole */
	st = hct_stats(p);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_pages), NRANKS * NK);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_backup_pages), NRANKS * NK);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_req_done), 2 * NRANKS);
	ck_assert_uint_eq(st.pinned_pages, 0);
	ck_assert_uint_eq(st.pages[HC_PAGE_RESERVED], 0);
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
	if (shm_path[0])
		unlink(shm_path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("e2e");
	TCase *tc = tcase_create("e2e");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, hct_l3_setup, hct_l3_teardown);
	tcase_add_loop_test(tc, store_backup_evict_prefetch_load, 0, 2); /* file, shm */
	suite_add_tcase(s, tc);
	return hct_run(s);
}
