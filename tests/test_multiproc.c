/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_multiproc.c - two TP=2 engines, four rank processes, for a bounded
 * time.  Each engine's rank 0 reserves pages and hands them to its rank 1
 * through a mailbox; each rank fills and commits its own shard, and the
 * page turns READY when the last shard is in.  Every rank pins READY pages
 * of both engines and verifies every byte, which is a function of the
 * page's id, generation and shard.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hct.h"

#define ENGINES 2
#define MBOX    64

struct shared {
	struct hct_board board;               /* READY pages anyone may read */
	_Atomic uint64_t mbox[ENGINES][MBOX]; /* rank 0 -> rank 1, SPSC */
	_Atomic uint32_t head[ENGINES], tail[ENGINES];
	_Atomic uint64_t allocs, commits, ready, verified, frees, busy;
	_Atomic uint32_t errors;
	char error[256];
};

static struct shared *sh;
static const char *pool_name;

static void record_fail(const char *what, int ret)
{
	if (atomic_fetch_add(&sh->errors, 1) == 0)
		snprintf(sh->error, sizeof(sh->error), "%s: %d %s", what, ret, hc_last_error());
}

static void read_one(hc_pool *p, unsigned *seed)
{
	int ret = hct_board_read(p, &sh->board, seed);

	if (ret == 1)
		atomic_fetch_add(&sh->verified, 1);
	else if (ret == -EBADMSG)
		record_fail("verify: a pinned READY page has the wrong bytes", 0);
	else if (ret < 0)
		record_fail("pin or unpin", ret);
}

/* Until the deadline, and past it (20 s at most) until enough was done for
 * the checks below to mean something: a loaded machine (ASan, parallel
 * suites) may get few rounds in; the test counts work, not time. */
static int running(double deadline)
{
	double now = hct_now();

	if (atomic_load(&sh->errors))
		return 0;
	if (now < deadline)
		return 1;
	return now < deadline + 20 &&
	       (atomic_load(&sh->ready) <= 10 || atomic_load(&sh->verified) <= 10 || atomic_load(&sh->frees) == 0);
}

static void leader(hc_pool *p, int e, double deadline, unsigned seed)
{
	hc_page_t mine[64];
	unsigned n = 0;

	while (running(deadline)) {
		/* free the oldest once it is READY and nobody pins it */
		if (n >= 8) {
			int st = hc_page_state(p, HC_PAGE_ID(mine[0]), NULL, NULL, NULL);
			if (st == HC_PAGE_READY) {
				hct_board_drop(&sh->board, mine[0]);
				int ret = hc_page_free(p, mine, 1);
				if (ret == 1) {
					atomic_fetch_add(&sh->frees, 1);
					memmove(mine, mine + 1, --n * sizeof(mine[0]));
				} else if (ret == -EBUSY) {
					atomic_fetch_add(&sh->busy, 1);
					hct_board_put(&sh->board, mine[0]);
				} else {
					return record_fail("free", ret);
				}
			}
		}
		unsigned want = 1 + rand_r(&seed) % 3;
		uint32_t t = atomic_load(&sh->tail[e]);
		if (n + want <= 24 && atomic_load(&sh->head[e]) - t + want <= MBOX) {
			int ret = hc_page_alloc(p, want, 3, mine + n);
			if (ret == (int)want) {
				atomic_fetch_add(&sh->allocs, want);
				for (unsigned i = 0; i < want; i++) {
					hc_page_t pg = mine[n + i];
					uint32_t h = atomic_load(&sh->head[e]);
					atomic_store(&sh->mbox[e][h % MBOX], pg);
					atomic_store(&sh->head[e], h + 1);
					hct_fill(p, pg, 1);
					hct_fill(p, pg, HC_SHARD_REPLICATED);
					ret = hc_page_commit(p, pg, 1 | HC_SHARD_REPLICATED);
					if (ret < 0)
						return record_fail("leader commit", ret);
					atomic_fetch_add(&sh->commits, 1);
					if (ret == 1) {
						atomic_fetch_add(&sh->ready, 1);
						hct_board_put(&sh->board, pg);
					}
				}
				n += want;
			} else if (ret != -ENOSPC) {
				return record_fail("alloc", ret);
			}
		}
		read_one(p, &seed);
	}
	/* wind down: free what is READY (readers may still pin for a moment) */
	for (int tries = 0; tries < 2000 && n; tries++) {
		for (unsigned i = 0; i < n;) {
			hct_board_drop(&sh->board, mine[i]);
			if (hc_page_free(p, &mine[i], 1) == 1)
				mine[i] = mine[--n];
			else
				i++;
		}
		usleep(1000);
	}
}

static void follower(hc_pool *p, int e, double deadline, unsigned seed)
{
	while (running(deadline)) {
		uint32_t t = atomic_load(&sh->tail[e]);
		if (t != atomic_load(&sh->head[e])) {
			hc_page_t pg = atomic_load(&sh->mbox[e][t % MBOX]);
			atomic_store(&sh->tail[e], t + 1);
			hct_fill(p, pg, 2);
			int ret = hc_page_commit(p, pg, 2);
			if (ret < 0)
				return record_fail("follower commit", ret);
			atomic_fetch_add(&sh->commits, 1);
			if (ret == 1) {
				atomic_fetch_add(&sh->ready, 1);
				hct_board_put(&sh->board, pg);
			}
		}
		read_one(p, &seed);
	}
}

START_TEST(two_engines_four_ranks)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 64, 100, 16);
	double secs = hct_seconds(2.0), deadline;
	pid_t pids[2 * ENGINES];
	uint64_t counts[HC_PAGE__COUNT];
	int status;

	pool_name = name;
	sh = hct_shared(sizeof(*sh));
	deadline = hct_now() + secs;
	for (int i = 0; i < 2 * ENGINES; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			hc_pool *c;
			struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts),
						    .flags = HC_ATTACH_NO_POPULATE };
			int ret = hc_pool_attach(pool_name, &o, &c);
			if (ret < 0) {
				record_fail("attach", ret);
				_exit(1);
			}
			if (i % 2 == 0)
				leader(c, i / 2, deadline, (unsigned)i * 7919u + 1);
			else
				follower(c, i / 2, deadline, (unsigned)i * 7919u + 1);
			hc_pool_detach(c);
			_exit(atomic_load(&sh->errors) ? 1 : 0);
		}
	}
	for (int i = 0; i < 2 * ENGINES; i++) {
		ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d failed: %s", i, sh->error);
	}
	ck_assert_msg(atomic_load(&sh->errors) == 0, "%s", sh->error);
	ck_assert_uint_gt(atomic_load(&sh->ready), 10);
	ck_assert_uint_gt(atomic_load(&sh->verified), 10);
	ck_assert_uint_gt(atomic_load(&sh->frees), 0);

	/* every invariant holds, and once the grace is over every page comes back */
	ck_assert_ok(hc_pool_recover(p, NULL, 0));
	ck_assert_int_eq(hc__pool_check(p, HC_CHECK_QUIESCENT, NULL, NULL), 0);
	usleep(150 * 1000);
	ck_assert_ok(hc_pool_recover(p, NULL, 0));
	ck_assert_ok(hc_pool_count_states(p, counts, HC_PAGE__COUNT));
	ck_assert_uint_eq(counts[HC_PAGE_RESERVED] + counts[HC_PAGE_QUARANTINE] + counts[HC_PAGE_FREEING], 0);
	for (uint32_t id = 0; id < 64; id++) {
		hc_page_t h;
		if (hc_page_state(p, id, &h, NULL, NULL) == HC_PAGE_READY)
			ck_assert_int_eq(hc_page_free(p, &h, 1), 1);
	}
	ck_assert_int_eq(hc_page_alloc(p, 64, 3, (hc_page_t[64]){ 0 }), 64);
	fprintf(stderr, "multiproc: %llu allocs, %llu commits, %llu ready, %llu verified, %llu frees, %llu busy\n",
		(unsigned long long)sh->allocs, (unsigned long long)sh->commits, (unsigned long long)sh->ready,
		(unsigned long long)sh->verified, (unsigned long long)sh->frees, (unsigned long long)sh->busy);
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("multiproc");
	TCase *tc = tcase_create("multiproc");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, two_engines_four_ranks);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
