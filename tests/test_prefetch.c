/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_prefetch.c - prefetch from L3 through the service, end to end with
 * the file backend: pages stored and backed up, evicted from the pool,
 * then read back and checked byte for byte; the prefix ends at a missing
 * or corrupt object, also when idle workers help read a long prefetch in
 * parts; ranks of one engine with different timing take the
 * same hit; overlapping prefetches read each key once; small backups
 * queued together share puts, each with its own result; all or nothing
 * when the pool is too small; a service killed in the middle.
 */
#include <dirent.h>
#include <ftw.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hicache/service.h>

#include "../shmpool/pool.h"
#include "hct.h"

static void backup(hc_pool *p, const hc_page_t *pg, unsigned n)
{
	hc_req *rq;

	ck_assert_ok(hc_req_backup(p, pg, n, &rq));
	ck_assert_int_eq(hc_req_wait(rq, 10000), (int)n);
	ck_assert_ok(hc_req_free(rq));
}

static void evict(hc_pool *p, const hc_key_t *keys, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(hc_evict_key(p, keys[i]), 1);
	ck_assert_int_eq(hct_hit(p, keys, n), 0);
}

static struct hc_service_opts opts(unsigned threshold)
{
	return (struct hc_service_opts){ .size = sizeof(struct hc_service_opts),
					 .backend = hct_l3_spec,
					 .batch_pages = 4,
					 .prefetch_threshold = threshold,
					 .write_policy = HC_WRITE_NONE };
}

static hc_service *start(const char *name, unsigned threshold)
{
	struct hc_service_opts o = opts(threshold);

	return hct_service_start(name, &o);
}

static void check_clean(hc_pool *p)
{
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}

/* Prefetch keys without a ticket, wait for it, take the hit: its length. */
static int prefetch_all(hc_pool *p, const hc_key_t *keys, unsigned n, hc_page_t *pg, int *result)
{
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .keys = keys,
				      .nkeys = n,
				      .policy = HC_PREFETCH_WAIT_COMPLETE };
	hc_req *rq;
	int h;

	ck_assert_msg(hc_req_prefetch(p, &pr, &rq) == 0, "prefetch: %s", hc_last_error());
	h = hc_req_prefetch_take(rq, pg, NULL);
	*result = hc_req_poll(rq);
	ck_assert_ok(hc_req_free(rq));
	return h;
}

/* Every byte of the n pages taken for keys k is right; then unpin them. */
static void check_unpin(hc_pool *p, const hc_page_t *pg, const hc_key_t *k, int n)
{
	for (int i = 0; i < n; i++) {
		ck_assert_msg(hct_key_bytes(p, pg[i], k[i], 0) == 0, "page %d has wrong bytes", i);
		ck_assert_ok(hc_page_unpin(p, pg[i]));
	}
}

START_TEST(roundtrip)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 32, 100, 8);
	hc_service *s = start(name, 0);
	hc_key_t k[12];
	hc_page_t pg[12];
	int res;

	hct_keys(k, 12, 1);
	hct_store_by_key(p, k, 10, 0, pg);
	backup(p, pg, 10);
	evict(p, k, 10);
	/* keys 10 and 11 are nowhere: the prefix ends there */
	ck_assert_int_eq(prefetch_all(p, k, 12, pg, &res), 10);
	ck_assert_int_eq(res, 10);
	for (int i = 0; i < 10; i++) {
		ck_assert_msg(hct_key_bytes(p, pg[i], k[i], 0) == 0, "page %d has wrong bytes", i);
		ck_assert(atomic_load(&p->pages[HC_PAGE_ID(pg[i])].flags) & HC_PF_IN_L3);
		ck_assert_ok(hc_page_unpin(p, pg[i]));
	}
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_pages), 10);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_reqs), 1);
	{
		struct hc_stats st = hct_stats(p);
		ck_assert_uint_eq(st.hist[HC_HIST_backup].count, 1);
		ck_assert_uint_eq(st.hist[HC_HIST_prefetch].count, 1);
		ck_assert_uint_eq(st.hist[HC_HIST_exists].count, 0);
		ck_assert_uint_ge(st.hist[HC_HIST_prefetch].sum_us, 1); /* a read from the file backend takes time */
	}
	ck_assert_uint_eq(hct_counter(p, HC_CTR_req_done), 1);    /* the backup */
	ck_assert_uint_eq(hct_counter(p, HC_CTR_req_partial), 1); /* 10 of 12 */
	/* again: all READY, nothing read, and a backup of them skips them all */
	ck_assert_int_eq(prefetch_all(p, k, 10, pg, &res), 10);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_pages), 10);
	backup(p, pg, 10);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_backup_skips), 10);
	for (int i = 0; i < 10; i++)
		ck_assert_ok(hc_page_unpin(p, pg[i]));
	/* nothing at all in L3: an empty hit, nothing reserved */
	hct_keys(k, 3, 2);
	ck_assert_int_eq(prefetch_all(p, k, 3, pg, &res), 0);
	ck_assert_int_eq(res, 0);
	ck_assert_ok(hc_service_stop(s));
	check_clean(p);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

static void files_now(char (*names)[4096], unsigned *n);

/* A corrupt object in the middle: the prefix ends before it, its page is
 * never READY, and nothing after it is read or kept.  The pages it gave
 * back are FREE at once: no writer but the service's own read, which is
 * done, could land in them.  (Before the fix they sat in quarantine; a
 * replay over L3 objects of which a quarter were corrupt ended with the
 * whole pool there.) */
START_TEST(corrupt_ends_prefix)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 32, 60000, 8);
	uint64_t counts[HC_PAGE__COUNT];
	hc_service *s = start(name, 0);
	hc_key_t k[8];
	hc_page_t pg[8];
	char before[16][4096], after[16][4096];
	unsigned nb, na;
	char *victim = NULL;
	int fd, res;
	uint8_t b;

	hct_keys(k, 8, 3);
	hct_store_by_key(p, k, 8, 0, pg);
	backup(p, pg, 3);
	files_now(before, &nb);
	backup(p, pg + 3, 1); /* page 3 alone: its object is the one new file */
	files_now(after, &na);
	ck_assert_uint_eq(na, nb + 1);
	for (unsigned i = 0; i < na && !victim; i++) {
		unsigned j;
		for (j = 0; j < nb && strcmp(after[i], before[j]); j++)
			;
		if (j == nb)
			victim = after[i];
	}
	ck_assert_ptr_nonnull(victim);
	backup(p, pg + 4, 4);
	/* flip one payload byte, past the 4096-byte header block */
	fd = open(victim, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &b, 1, 5000), 1);
	b ^= 0x5a;
	ck_assert_int_eq(pwrite(fd, &b, 1, 5000), 1);
	close(fd);
	evict(p, k, 8);
	ck_assert_int_eq(prefetch_all(p, k, 8, pg, &res), 3);
	ck_assert_int_eq(res, 3);
	check_unpin(p, pg, k, 3);
	ck_assert_int_eq(hct_hit(p, k + 3, 5), 0); /* neither the bad page nor those after it */
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_corrupt), 1);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_pages), 3);
	ck_assert_ok(hc_pool_count_states(p, counts, HC_PAGE__COUNT));
	ck_assert_uint_eq(counts[HC_PAGE_QUARANTINE], 0);
	ck_assert_uint_eq(counts[HC_PAGE_FREE], 32 - 3);
	ck_assert_ok(hc_service_stop(s));
	check_clean(p);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

static char (*fn_names)[4096];
static unsigned fn_n;
static int list_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)ftw;
	if (flag == FTW_F && fn_n < 16)
		snprintf(fn_names[fn_n++], 4096, "%s", path);
	return 0;
}

static void files_now(char (*names)[4096], unsigned *n)
{
	fn_names = names;
	fn_n = 0;
	nftw(hct_l3_dir, list_one, 16, FTW_PHYS);
	*n = fn_n;
}

/* ---- ranks of one engine, with different timing, take the same hit */

#define NR    3 /* ranks: two of engine 1, one of engine 2 */
#define NKEYS 24

struct board {
	int ready[NR];
	int go;
	int hit[NR];
	hc_page_t pages[NR][NKEYS];
	int fail[NR];
};

struct rank_arg {
	struct board *b;
	int me;
	hc_key_t *keys;
};

static void rank(hc_pool *p, void *arg)
{
	struct rank_arg *a = arg;
	struct hc_engine_spec es = { .size = sizeof(struct hc_engine_spec),
				     .engine_id = a->me < 2 ? 1 : 2,
				     .tp_size = a->me < 2 ? 2 : 1,
				     .tp_rank = a->me < 2 ? (uint32_t)a->me : 0,
				     .quota_pages = HC_QUOTA_UNLIMITED };
	struct hc_ticket_name nm = { .size = sizeof(struct hc_ticket_name),
				     .request_id = a->me < 2 ? "req-A" : "req-B",
				     .step = 1 };
	/* rank 0 takes at once, rank 1 waits for the end; engine 2 asks for
	 * an overlapping range */
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .keys = a->me < 2 ? a->keys : a->keys + 4,
				      .nkeys = NKEYS - 4 * (a->me == 2),
				      .name = &nm,
				      .policy = a->me == 0 ? HC_PREFETCH_BEST_EFFORT : HC_PREFETCH_WAIT_COMPLETE };
	hc_ticket t = { .size = sizeof(hc_ticket) };
	hc_req *rq;
	int h;

	if (hc_engine_join(p, &es) < 0) {
		a->b->fail[a->me] = 1;
		return;
	}
	__atomic_store_n(&a->b->ready[a->me], 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&a->b->go, __ATOMIC_ACQUIRE))
		usleep(100);
	if (hc_req_prefetch(p, &pr, &rq) < 0) {
		a->b->fail[a->me] = 2;
		return;
	}
	if (a->me == 1)
		usleep(20000); /* later than rank 0, whatever the service does */
	h = hc_req_prefetch_take(rq, a->b->pages[a->me], &t);
	a->b->hit[a->me] = h;
	if (h < 0) {
		a->b->fail[a->me] = 3;
		return;
	}
	for (int i = 0; i < h; i++)
		if (hct_key_bytes(p, a->b->pages[a->me][i], pr.keys[i], 0) < 0)
			a->b->fail[a->me] = 4;
	hc_req_wait(rq, 10000);
	hc_req_free(rq);
	hc_ticket_release(p, &t);
	hc_engine_leave(p);
}

START_TEST(ranks_agree)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 64, 100, 8);
	struct hc_service_opts o = opts(0);
	pid_t svc = hct_service_child(name, &o); /* this process forks ranks: no service threads here */
	struct board *b = hct_shared(sizeof(*b));
	int st;
	hc_key_t k[NKEYS];
	hc_page_t pg[NKEYS];
	struct rank_arg ra[NR];
	pid_t pid[NR];

	hct_keys(k, NKEYS, 4);
	hct_store_by_key(p, k, NKEYS, 0, pg);
	backup(p, pg, NKEYS);
	evict(p, k, NKEYS);
	for (int r = 0; r < NR; r++) {
		ra[r] = (struct rank_arg){ b, r, k };
		pid[r] = hct_spawn(name, rank, &ra[r]);
	}
	for (int r = 0; r < NR; r++)
		while (!__atomic_load_n(&b->ready[r], __ATOMIC_ACQUIRE) && !b->fail[r])
			usleep(1000);
	__atomic_store_n(&b->go, 1, __ATOMIC_RELEASE);
	for (int r = 0; r < NR; r++) {
		ck_assert_int_eq(waitpid(pid[r], &st, 0), pid[r]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d status 0x%x", r, st);
		ck_assert_msg(b->fail[r] == 0, "rank %d failed at step %d", r, b->fail[r]);
	}
	/* the engine's two ranks: the same hit and the same pages, whatever
	 * rank 0 found when it took at once */
	ck_assert_int_eq(b->hit[0], b->hit[1]);
	ck_assert_mem_eq(b->pages[0], b->pages[1], (size_t)b->hit[0] * sizeof(hc_page_t));
	ck_assert_int_eq(b->hit[2], NKEYS - 4); /* it waited for all */
	/* every key read from L3 once, though three requests asked */
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_pages), NKEYS);
	ck_assert_int_eq(hct_hit(p, k, NKEYS), NKEYS);
	hct_service_child_stop(svc);
	check_clean(p);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* All or nothing: a prefix longer than the pool reserves nothing. */
START_TEST(no_space)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 16, 100, 8);
	hc_service *s = start(name, 0);
	hc_key_t k[20];
	hc_page_t pg[20];
	int res;

	hct_keys(k, 20, 5);
	hct_store_by_key(p, k, 10, 0, pg);
	backup(p, pg, 10);
	evict(p, k, 10);
	hct_store_by_key(p, k + 10, 10, 10, pg + 10);
	backup(p, pg + 10, 10);
	/* L3 has 20, the pool 16 pages with 10 READY: 6 free for the 10
	 * missing keys, and the READY ones are the prefetch's own, which are
	 * never evicted to make room for it */
	ck_assert_int_eq(hct_hit(p, k, 20), 0);
	{
		uint64_t ev = hct_counter(p, HC_CTR_evictions);
		ck_assert_int_eq(prefetch_all(p, k, 20, pg, &res), 0);
		ck_assert_int_eq(hct_hit(p, k + 10, 10), 10);
		ck_assert_uint_eq(hct_counter(p, HC_CTR_evictions), ev);
	}
	ck_assert_int_eq(res, -ENOSPC);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_nospace), 1);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_req_failed), 1);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_pages), 0);
	/* a prefix that fits is fine */
	ck_assert_int_eq(prefetch_all(p, k, 10, pg, &res), 10);
	check_unpin(p, pg, k, 10);
	ck_assert_ok(hc_service_stop(s));
	check_clean(p);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* Cancel: a running backup or prefetch stops at its next batch, a queued
 * request goes at once, a finished one cannot be; nothing leaks. */
START_TEST(cancel)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 32, 100, 8);
	char spec[160];
	struct hc_service_opts o = { .size = sizeof(struct hc_service_opts),
				     .backend = spec,
				     .batch_pages = 2,
				     .workers = 1,
				     .write_policy = HC_WRITE_NONE };
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .nkeys = 8,
				      .policy = HC_PREFETCH_BEST_EFFORT };
	hc_service *s;
	hc_key_t k[8];
	hc_page_t pg[8];
	hc_req *r1, *r2;
	int h;

	/* every backend op takes 150 ms: 8 pages in batches of 2, 600 ms */
	snprintf(spec, sizeof(spec), "fault:dir=%s,delay_us=150000", hct_l3_dir);
	s = hct_service_start(name, &o);
	hct_keys(k, 8, 11);
	hct_store_by_key(p, k, 8, 0, pg);
	ck_assert_ok(hc_req_backup(p, pg, 8, &r1));
	ck_assert_ok(hc_req_exists(p, k, 8, &r2)); /* queued behind it: one worker */
	for (int i = 0; i < 2500 && hct_counter(p, HC_CTR_l3_backup_pages) == 0; i++)
		usleep(2000); /* cancel them while the backup writes */
	ck_assert_ok(hc_req_cancel(r2));
	ck_assert_ok(hc_req_cancel(r1));
	ck_assert_err(hc_req_wait(r2, 5000), ECANCELED);
	ck_assert_err(hc_req_wait(r1, 5000), ECANCELED);
	ck_assert_msg_has("cancelled");
	ck_assert_err(hc_req_cancel(r1), EALREADY);
	ck_assert_ok(hc_req_free(r1));
	ck_assert_ok(hc_req_free(r2));
	ck_assert_uint_eq(hct_counter(p, HC_CTR_service_cancelled), 2);
	h = (int)hct_counter(p, HC_CTR_l3_backup_pages);
	ck_assert_msg(h >= 1 && h < 8, "%d pages backed up before the cancel", h);
	/* the rest goes now; evict all, then cancel a prefetch of them */
	backup(p, pg, 8);
	evict(p, k, 8);
	pr.keys = k;
	ck_assert_ok(hc_req_prefetch(p, &pr, &r1));
	for (int i = 0; i < 2500 && hct_counter(p, HC_CTR_l3_prefetch_pages) == 0; i++)
		usleep(2000); /* cancel it while it reads */
	ck_assert_ok(hc_req_cancel(r1));
	ck_assert_err(hc_req_wait(r1, 5000), ECANCELED);
	h = hc_req_prefetch_take(r1, pg, NULL); /* what was read stays, and is taken */
	ck_assert_msg(h >= 1 && h < 8, "hit %d after a cancel", h);
	check_unpin(p, pg, k, h);
	ck_assert_ok(hc_req_free(r1));
	ck_assert_err(hc_req_cancel(NULL), EINVAL);
	ck_assert_ok(hc_service_stop(s));
	check_clean(p);
	ck_assert_int_eq(hct_hit(p, k, 8), h);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* A backup slower than 262 ms (the old last bound) lands in a bucket with
 * a bound, and the histogram's max says how slow it was: no percentile
 * of it is unknown.  Buckets reach past a minute. */
START_TEST(slow_request_has_a_bound)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 100, 8);
	struct hc_service_opts o = opts(0);
	char spec[160];
	struct hc_stats st;
	const struct hc_hist *h;
	unsigned b = 0;
	hc_key_t k[1];
	hc_page_t pg[1];
	hc_service *s;

	ck_assert_uint_ge(hc_hist_bound_us(HC_HIST_BUCKETS - 2), UINT64_C(60000000));
	ck_assert_uint_eq(hc_hist_bound_us(HC_HIST_BUCKETS - 1), UINT64_MAX);
	snprintf(spec, sizeof(spec), "fault:dir=%s,delay_us=400000", hct_l3_dir);
	o.backend = spec;
	s = hct_service_start(name, &o);
	hct_keys(k, 1, 21);
	hct_store_by_key(p, k, 1, 0, pg);
	backup(p, pg, 1);
	st = hct_stats(p);
	h = &st.hist[HC_HIST_backup];
	ck_assert_uint_eq(h->count, 1);
	while (b < HC_HIST_BUCKETS && !h->bucket[b])
		b++;
	ck_assert_msg(b + 1 < HC_HIST_BUCKETS, "a 400 ms backup fell in the last bucket, which has no bound");
	ck_assert_uint_ge(hc_hist_bound_us(b), UINT64_C(400000));
	ck_assert_uint_ge(h->max, UINT64_C(400000));
	ck_assert_uint_lt(h->max, hc_hist_bound_us(b));
	ck_assert_uint_eq(h->max, h->sum_us); /* one value: it is the sum too */
	ck_assert_ok(hc_service_stop(s));
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* A long prefetch is read in parts that idle workers help with, and is
 * still settled in prefix order: a corrupt object in a middle part ends
 * the prefix there whichever part finishes first, nothing past it is
 * READY or leaked, and a second prefetch reads the rest. */
START_TEST(parts_settle_in_order)
{
	enum { N = 40 };
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 64, 100, 8);
	char spec[200];
	/* batches of 4: 10 parts for 4 workers; each get takes 20 ms, so the
	 * workers idle when the prefetch starts are sure to help */
	struct hc_service_opts o = { .size = sizeof(struct hc_service_opts),
				     .backend = spec,
				     .batch_pages = 4,
				     .write_policy = HC_WRITE_NONE };
	hc_service *s;
	hc_key_t k[N];
	hc_page_t pg[N];
	int h, res;

	snprintf(spec, sizeof(spec), "fault:dir=%s,delay_us=20000,corrupt_get_at=26", hct_l3_dir);
	s = hct_service_start(name, &o);
	hct_keys(k, N, 12);
	hct_store_by_key(p, k, N, 0, pg);
	backup(p, pg, N);
	evict(p, k, N);
	h = prefetch_all(p, k, N, pg, &res);
	ck_assert_int_eq(res, h);
	/* the 26th get submitted was corrupted: which key that was depends
	 * on the parts' timing, but the prefix ends at it */
	ck_assert_msg(h >= 0 && h < N, "hit %d of %d with a corrupt object", h, N);
	check_unpin(p, pg, k, h);
	for (int i = h; i < N; i++) /* each alone: a later part read first is not kept either */
		ck_assert_msg(hct_hit(p, k + i, 1) == 0, "key %d of %d is READY past the prefix's end at %d", i, N, h);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_corrupt), 1);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_pages), (uint64_t)h);
	ck_assert_uint_ge(hct_counter(p, HC_CTR_l3_prefetch_helped), 1);
	ck_assert_uint_le(hct_counter(p, HC_CTR_l3_prefetch_helped), N / 4 - 1); /* the owner reads one at least */
	/* the pages reserved past the corrupt one went back: the rest fits */
	ck_assert_int_eq(prefetch_all(p, k, N, pg, &res), N);
	ck_assert_int_eq(res, N);
	check_unpin(p, pg, k, N);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_pages), N);
	ck_assert_ok(hc_service_stop(s));
	check_clean(p);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* Small backups queued together share puts, and each keeps its own
 * result: a failed write ends only its own backup's prefix. */
START_TEST(backups_share_puts)
{
	enum { R = 8, PER = 2 };
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 32, 100, 8);
	char spec[200];
	/* one worker, and every op takes 100 ms: the requests posted while
	 * the first runs queue up behind it */
	struct hc_service_opts o = { .size = sizeof(struct hc_service_opts),
				     .backend = spec,
				     .batch_pages = 16,
				     .workers = 1,
				     .write_policy = HC_WRITE_NONE };
	hc_service *s;
	hc_key_t k[R * PER];
	hc_page_t pg[R * PER];
	hc_req *rq[R];
	uint64_t puts;

	/* the 8th page written (request 3's second) fails */
	snprintf(spec, sizeof(spec), "fault:dir=%s,delay_us=100000,fail_put_at=8", hct_l3_dir);
	s = hct_service_start(name, &o);
	hct_keys(k, R * PER, 13);
	hct_store_by_key(p, k, R * PER, 0, pg);
	for (int r = 0; r < R; r++)
		ck_assert_ok(hc_req_backup(p, pg + r * PER, PER, &rq[r]));
	for (int r = 0; r < R; r++) {
		int res = hc_req_wait(rq[r], 10000);
		ck_assert_msg(res == (r == 3 ? 1 : PER), "request %d: %d of %d pages", r, res, PER);
		ck_assert_ok(hc_req_free(rq[r]));
	}
	puts = hct_counter(p, HC_CTR_l3_backup_puts);
	ck_assert_msg(puts >= 1 && puts < R, "%llu puts for %d queued backups", (unsigned long long)puts, R);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_backup_pages), R * PER - 1);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_backup_failed), 2); /* the page, and its request cut short */
	ck_assert_uint_eq(hct_counter(p, HC_CTR_req_partial), 1);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_req_done), R - 1);
	for (int i = 0; i < R * PER; i++)
		ck_assert_int_eq(!!(atomic_load(&p->pages[HC_PAGE_ID(pg[i])].flags) & HC_PF_IN_L3), i != 7);
	ck_assert_ok(hc_service_stop(s));
	check_clean(p);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

START_TEST(threshold_and_bad_input)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 16, 100, 8);
	hc_service *s = start(name, 4);
	struct hc_ticket_name nm = { .size = sizeof(struct hc_ticket_name), .request_id = "r", .step = 0 };
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req), .nkeys = 3 };
	hc_key_t k[4];
	hc_page_t pg[4];
	hc_ticket t = { .size = sizeof(hc_ticket) };
	hc_req *rq;
	int res;

	hct_keys(k, 4, 6);
	hct_store_by_key(p, k, 4, 0, pg);
	backup(p, pg, 4);
	evict(p, k, 4);
	/* below the threshold: L3 is not asked */
	ck_assert_int_eq(prefetch_all(p, k, 3, pg, &res), 0);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_pages), 0);
	ck_assert_int_eq(prefetch_all(p, k, 4, pg, &res), 4);
	for (int i = 0; i < 4; i++)
		ck_assert_ok(hc_page_unpin(p, pg[i]));
	/* bad input */
	pr.keys = k;
	ck_assert_err(hc_req_prefetch(p, NULL, &rq), EINVAL);
	ck_assert_ptr_null(rq);
	pr.policy = (enum hc_prefetch_policy)7;
	ck_assert_err(hc_req_prefetch(p, &pr, &rq), EINVAL);
	ck_assert_msg_has("policy");
	pr.policy = HC_PREFETCH_TIMEOUT;
	pr.presence = 1u << 5;
	ck_assert_err(hc_req_prefetch(p, &pr, &rq), EINVAL);
	ck_assert_msg_has("presence");
	pr.presence = 0;
	pr.name = &nm;
	ck_assert_err(hc_req_prefetch(p, &pr, &rq), EINVAL);
	ck_assert_msg_has("hc_engine_join");
	ck_assert_ok(hc_engine_join(p, &(struct hc_engine_spec){ .size = sizeof(struct hc_engine_spec),
								 .engine_id = 3,
								 .tp_size = 1,
								 .quota_pages = HC_QUOTA_UNLIMITED }));
	nm.request_id = "";
	ck_assert_err(hc_req_prefetch(p, &pr, &rq), EINVAL);
	ck_assert_msg_has("request id");
	nm.request_id = "r";
	pr.nkeys = 1u << 20;
	ck_assert_err(hc_req_prefetch(p, &pr, &rq), E2BIG);
	pr.nkeys = 3;
	pr.timeout_ms = 50;
	ck_assert_ok(hc_req_prefetch(p, &pr, &rq));
	ck_assert_err(hc_req_prefetch_take(rq, pg, NULL), EINVAL); /* named: needs a ticket */
	ck_assert_int_eq(hc_req_prefetch_take(rq, pg, &t), 3);
	ck_assert_err(hc_req_prefetch_take(rq, pg, &t), EALREADY);
	ck_assert_ok(hc_ticket_release(p, &t));
	ck_assert_ok(hc_req_free(rq));
	ck_assert_ok(hc_req_exists(p, k, 1, &rq));
	ck_assert_err(hc_req_prefetch_take(rq, pg, NULL), EINVAL); /* not a prefetch */
	ck_assert_ok(hc_req_free(rq));
	ck_assert_ok(hc_engine_leave(p));
	ck_assert_ok(hc_service_stop(s));
	check_clean(p);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("prefetch");
	TCase *tc = tcase_create("prefetch");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, hct_l3_setup, hct_l3_teardown);
	tcase_add_test(tc, roundtrip);
	tcase_add_test(tc, corrupt_ends_prefix);
	tcase_add_test(tc, ranks_agree);
	tcase_add_test(tc, no_space);
	tcase_add_test(tc, threshold_and_bad_input);
	tcase_add_test(tc, cancel);
	tcase_add_test(tc, slow_request_has_a_bound);
	tcase_add_test(tc, parts_settle_in_order);
	tcase_add_test(tc, backups_share_puts);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
