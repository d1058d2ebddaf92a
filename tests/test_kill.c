/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_kill.c - workers allocate, fill, commit shard by shard, abort, pin,
 * verify and free, while the parent SIGKILLs them at random moments and
 * starts new ones, many times over.  Between kills, with the workers
 * stopped (a stopped process is alive), and at the end, the invariants
 * across structures must hold:
 *   - every FREE page is free in every structure that tracks pages;
 *   - every RESERVED page has a live owner (or is in quarantine);
 *   - every pin counter belongs to a live slot;
 *   - no page is handed out twice, and none is lost: a dead worker's
 *     reservations come back after the quarantine, and its READY pages (it
 *     allocated them without a key) come back at once, by recovery alone.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hct.h"

#define WORKERS       4
#define NPAGES        96
#define MIN_KILLS     16
#define QUARANTINE_MS 200

struct shared {
	/* who the test believes holds each page, or 0: a tag, (life << 32) |
	 * (gen << 8) | COMMITTED | (worker + 1), where life counts the worker's
	 * starts and COMMITTED says the page is READY, or its last commit is
	 * under way (recovery frees a dead worker's READY page at once) */
	_Atomic uint64_t own[NPAGES];
	/* per worker, the parent's last SIGKILL to it: (life << 32) | when (ms),
	 * one word, so a reader never pairs one life with another's time */
	_Atomic uint64_t killed[WORKERS];
	struct hct_board board;
	_Atomic uint64_t allocs, commits, verified, frees, aborts;
	_Atomic uint32_t twice, bad_bytes, errors;
	char error[256];
};

static struct shared *sh;
static const char *pool_name;
static uint32_t my_life; /* in a worker: this life */

static void record(_Atomic uint32_t *counter, const char *what, int ret)
{
	if (atomic_fetch_add(counter, 1) == 0 && !sh->error[0])
		snprintf(sh->error, sizeof(sh->error), "%s: %d %s", what, ret, hc_last_error());
}

#define COMMITTED 0x80u

static uint64_t tag(int w, hc_page_t pg)
{
	return ((uint64_t)my_life << 32) | (HC_PAGE_GEN(pg) << 8) | (uint32_t)(w + 1);
}

static uint32_t now_ms(void)
{
	return (uint32_t)(uint64_t)(hct_now() * 1e3);
}

/*
 * Mark a fresh page ours.  A tag already there means the page was handed
 * out twice, with one exception: its holder was killed, and the page came
 * back out of quarantine before the parent's adopt() forgot it.  Any
 * process may recover a dead worker's slot (a worker that attaches does,
 * even while the parent is still busy in adopt), and that starts the
 * quarantine clock early.  Then the holder must have been sent SIGKILL
 * (the parent notes it first) and most of a quarantine ago, or the pool
 * gave its reservation away too soon; a page it had committed may come back
 * as soon as it is dead.
 */
static void claim(int w, hc_page_t pg)
{
	_Atomic uint64_t *o = &sh->own[HC_PAGE_ID(pg)];
	uint64_t z = 0;

	while (!atomic_compare_exchange_strong(o, &z, tag(w, pg))) {
		unsigned hw = (unsigned)(z & 0x7f) - 1;
		uint32_t life = (uint32_t)(z >> 32);
		uint64_t k = hw < WORKERS ? atomic_load(&sh->killed[hw]) : 0;
		const char *why = NULL;

		if (z == 0) /* the parent's adopt() forgot it since we looked */
			continue;
		if (hw >= WORKERS || (uint32_t)(k >> 32) != life)
			why = "whose holder is alive";
		else if (!(z & COMMITTED) && now_ms() - (uint32_t)k < QUARANTINE_MS * 9 / 10)
			why = "before its killed holder's quarantine ran out";
		if (why) {
			if (atomic_fetch_add(&sh->twice, 1) == 0 && !sh->error[0])
				snprintf(
					sh->error, sizeof(sh->error),
					"page %u generation %u handed to worker %d %s: worker %u life %u holds generation %u (tag 0x%llx)",
					HC_PAGE_ID(pg), HC_PAGE_GEN(pg), w, why, hw, life,
					(uint32_t)(z >> 8) & 0x3fffff, (unsigned long long)z);
			return;
		}
	}
}

static void read_one(hc_pool *p, unsigned *seed)
{
	int ret = hct_board_read(p, &sh->board, seed);

	if (ret == 1)
		atomic_fetch_add(&sh->verified, 1);
	else if (ret == -EBADMSG)
		record(&sh->bad_bytes, "a pinned READY page has the wrong bytes", 0);
	else if (ret < 0)
		record(&sh->errors, "pin or unpin", ret);
}

static void give_up(int w, hc_page_t pg)
{
	uint64_t t = tag(w, pg), c = t | COMMITTED;

	if (!atomic_compare_exchange_strong(&sh->own[HC_PAGE_ID(pg)], &t, 0))
		atomic_compare_exchange_strong(&sh->own[HC_PAGE_ID(pg)], &c, 0);
}

static void committed(int w, hc_page_t pg)
{
	uint64_t t = tag(w, pg);

	atomic_compare_exchange_strong(&sh->own[HC_PAGE_ID(pg)], &t, t | COMMITTED);
}

static void __attribute__((noreturn)) worker(int w, unsigned seed)
{
	struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_NO_POPULATE };
	hc_page_t mine[32], fresh[8];
	unsigned n = 0;
	hc_pool *p;
	int ret;

	if ((ret = hc_pool_attach(pool_name, &o, &p)) < 0) {
		record(&sh->errors, "attach", ret);
		_exit(1);
	}
	for (;;) {
		unsigned want = 1 + rand_r(&seed) % 8;
		ret = 0;
		if (n + want <= 24 && (ret = hc_page_alloc(p, want, 3, fresh)) == (int)want) {
			atomic_fetch_add(&sh->allocs, want);
			for (unsigned i = 0; i < want; i++)
				claim(w, fresh[i]);
			if (rand_r(&seed) % 8 == 0) {
				for (unsigned i = 0; i < want; i++)
					give_up(w, fresh[i]);
				if ((ret = hc_page_abort(p, fresh, want)) != (int)want)
					record(&sh->errors, "abort", ret);
				atomic_fetch_add(&sh->aborts, want);
				continue;
			}
			for (unsigned i = 0; i < want; i++) {
				hc_page_t pg = fresh[i];
				const uint32_t shards[3] = { 1, 2, HC_SHARD_REPLICATED };
				for (int s = 0; s < 3; s++) {
					hct_fill(p, pg, shards[s]);
					/* Before the last shard: a death once it is in
					 * leaves the page READY, which recovery frees
					 * at once, quarantine or not. */
					if (s == 2)
						committed(w, pg);
					ret = hc_page_commit(p, pg, shards[s]);
					if (ret != (s == 2))
						record(&sh->errors, "commit", ret);
				}
				atomic_fetch_add(&sh->commits, 1);
				mine[n++] = pg;
				hct_board_put(&sh->board, pg);
			}
		} else if (ret < 0 && ret != -ENOSPC) {
			record(&sh->errors, "alloc", ret);
		}
		read_one(p, &seed);
		while (n > 12) {
			hc_page_t pg = mine[0];
			hct_board_drop(&sh->board, pg);
			give_up(w, pg);
			ret = hc_page_free(p, &pg, 1);
			if (ret == -EBUSY) {
				uint64_t z = 0;
				atomic_compare_exchange_strong(&sh->own[HC_PAGE_ID(pg)], &z, tag(w, pg) | COMMITTED);
				hct_board_put(&sh->board, pg);
				break;
			}
			if (ret != 1)
				record(&sh->errors, "free", ret);
			atomic_fetch_add(&sh->frees, 1);
			memmove(mine, mine + 1, --n * sizeof(mine[0]));
		}
	}
}

static pid_t start(int w, unsigned seed, uint32_t life)
{
	pid_t pid = fork();

	if (pid == 0) {
		my_life = life;
		worker(w, seed);
	}
	return pid;
}

/* Note the kill before it happens: claim() must never see a dead holder
 * that is not noted yet. */
static void kill_worker(int w, pid_t pid, uint32_t life)
{
	atomic_store(&sh->killed[w], ((uint64_t)life << 32) | now_ms());
	kill(pid, SIGKILL);
}

/* After recovery: the dead worker's pages.  Forget ownership (unless a
 * worker claimed the page meanwhile).  Its READY ones were freed by the
 * recovery, unless a reader pinned one then: an orphan, which goes when the
 * reader lets go. */
static void adopt(hc_pool *p, int w)
{
	for (uint32_t id = 0; id < NPAGES; id++) {
		uint64_t t = atomic_load(&sh->own[id]);
		hc_page_t h;

		if ((t & 0x7f) != (uint32_t)(w + 1) || !atomic_compare_exchange_strong(&sh->own[id], &t, 0))
			continue;
		if (hc_page_state(p, id, &h, NULL, NULL) == HC_PAGE_READY &&
		    HC_PAGE_GEN(h) == ((uint32_t)(t >> 8) & 0x3fffff)) {
			hct_board_drop(&sh->board, h);
			if (!(atomic_load(&p->pages[id].flags) & HC_PF_ORPHAN))
				record(&sh->errors, "recovery left a dead worker's READY page to nobody", (int)id);
		}
	}
}

static void print_violation(void *arg, const char *v)
{
	(void)arg;
	fprintf(stderr, "violation: %s\n", v);
}

START_TEST(random_kills)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, NPAGES, QUARANTINE_MS, 16);
	pid_t pids[WORKERS];
	uint32_t lives[WORKERS] = { 0 };
	double deadline = hct_now() + hct_seconds(3.0), hard = hct_now() + 60;
	unsigned seed = (unsigned)getpid(), kills = 0, checks = 0;
	uint64_t counts[HC_PAGE__COUNT];
	int status;

	pool_name = name;
	sh = hct_shared(sizeof(*sh));
	for (int w = 0; w < WORKERS; w++)
		pids[w] = start(w, seed + (unsigned)w, ++lives[w]);

	/* Enough kills and enough work even on a slow, sanitized or quick run:
	 * the deadline only adds more on a fast machine, and the hard limit
	 * (well inside the test timeout) turns a stuck pool into a failed
	 * assertion below rather than a timeout. */
	while (hct_now() < hard &&
	       (hct_now() < deadline || kills < MIN_KILLS || sh->commits <= 20 || sh->verified <= 20)) {
		usleep(1000 + rand_r(&seed) % 15000);
		int w = (int)(rand_r(&seed) % WORKERS);
		kill_worker(w, pids[w], lives[w]);
		ck_assert_int_eq(waitpid(pids[w], &status, 0), pids[w]);
		ck_assert_msg(WIFSIGNALED(status), "worker %d exited by itself (%d): %s", w, status, sh->error);
		kills++;
		ck_assert_ok(hc_pool_recover(p, NULL, 0));
		adopt(p, w);
		if (kills % 8 == 0) {
			/* freeze everyone (stopped is alive) and check across structures */
			for (int i = 0; i < WORKERS; i++)
				if (i != w)
					kill(pids[i], SIGSTOP);
			for (int i = 0; i < WORKERS; i++)
				if (i != w)
					waitpid(pids[i], &status, WUNTRACED);
			ck_assert_int_eq(hc__pool_check(p, 0, print_violation, NULL), 0);
			checks++;
			for (int i = 0; i < WORKERS; i++)
				if (i != w)
					kill(pids[i], SIGCONT);
		}
		pids[w] = start(w, seed + kills * 31u, ++lives[w]);
	}
	for (int w = 0; w < WORKERS; w++) {
		kill_worker(w, pids[w], lives[w]);
		waitpid(pids[w], &status, 0);
	}
	ck_assert_ok(hc_pool_recover(p, NULL, 0));
	for (int w = 0; w < WORKERS; w++)
		adopt(p, w);
	ck_assert_msg(sh->errors == 0 && sh->bad_bytes == 0 && sh->twice == 0,
		      "errors %u, bad bytes %u, handed out twice %u: %s", sh->errors, sh->bad_bytes, sh->twice,
		      sh->error);
	ck_assert_uint_ge(kills, MIN_KILLS);
	ck_assert_uint_gt(sh->commits, 20);
	ck_assert_uint_gt(sh->verified, 20);

	/* after recovery and the grace, nothing is held and nothing is lost */
	ck_assert_ok(hc_pool_recover(p, NULL, 0));
	ck_assert_int_eq(hc__pool_check(p, HC_CHECK_QUIESCENT, print_violation, NULL), 0);
	usleep(250 * 1000);
	ck_assert_ok(hc_pool_recover(p, NULL, 0));
	ck_assert_ok(hc_pool_count_states(p, counts, HC_PAGE__COUNT));
	ck_assert_uint_eq(counts[HC_PAGE_RESERVED], 0);
	ck_assert_uint_eq(counts[HC_PAGE_FREEING], 0);
	ck_assert_uint_eq(counts[HC_PAGE_QUARANTINE], 0);
	ck_assert_uint_eq(counts[HC_PAGE_READY], 0); /* every worker is dead: their pages came back */
	for (uint32_t id = 0; id < NPAGES; id++)
		ck_assert_uint_eq(atomic_load(&hc__pin_row(p, id)[1]), 0);
	ck_assert_int_eq(hc_page_alloc(p, NPAGES, 3, (hc_page_t[NPAGES]){ 0 }), NPAGES);
	fprintf(stderr,
		"kill: %u kills, %u frozen checks, %llu allocs, %llu commits, %llu aborts, %llu verified, %llu frees\n",
		kills, checks, (unsigned long long)sh->allocs, (unsigned long long)sh->commits,
		(unsigned long long)sh->aborts, (unsigned long long)sh->verified, (unsigned long long)sh->frees);
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kill");
	TCase *tc = tcase_create("kill");

	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, random_kills);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
