/* SPDX-License-Identifier: Apache-2.0 */
/* test_pages.c - allocation, commit, abort, pin, unpin and free. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hct.h"

#define ALL_COMPS  3u /* kv (sharded) + state (replicated) */
#define KV_ONLY    1u
#define STATE_ONLY 2u

struct fixture {
	const char *name;
	hc_pool *p;
};

static struct fixture fx;

static void setup(void)
{
	fx.name = hct_name();
	fx.p = hct_create_attach(fx.name, 8, 0, 0);
}

static void teardown(void)
{
	hc_pool_detach(fx.p);
	hc_pool_destroy(fx.name, NULL, HC_DESTROY_FORCE);
}

START_TEST(alloc_distinct_reserved)
{
	hc_page_t pg[8];
	uint32_t owner;
	uint64_t seen = 0;

	ck_assert_int_eq(hc_page_alloc(fx.p, 8, ALL_COMPS, pg), 8);
	for (int i = 0; i < 8; i++) {
		ck_assert_uint_lt(HC_PAGE_ID(pg[i]), 8);
		ck_assert_uint_eq(seen & (1u << HC_PAGE_ID(pg[i])), 0);
		seen |= 1u << HC_PAGE_ID(pg[i]);
		ck_assert_uint_eq(HC_PAGE_GEN(pg[i]), 1);
		ck_assert_int_eq(hc_page_state(fx.p, HC_PAGE_ID(pg[i]), NULL, &owner, NULL), HC_PAGE_RESERVED);
		ck_assert_uint_eq(owner, 0);
	}
	ck_assert_err(hc_page_alloc(fx.p, 1, ALL_COMPS, pg), ENOSPC);
	ck_assert_msg_has("only 0 free");
}
END_TEST

START_TEST(alloc_all_or_nothing)
{
	hc_page_t pg[8], more[2];
	uint64_t counts[HC_PAGE__COUNT];

	ck_assert_int_eq(hc_page_alloc(fx.p, 7, ALL_COMPS, pg), 7);
	ck_assert_err(hc_page_alloc(fx.p, 2, ALL_COMPS, more), ENOSPC);
	ck_assert_ok(hc_pool_count_states(fx.p, counts, HC_PAGE__COUNT));
	ck_assert_uint_eq(counts[HC_PAGE_FREE], 1);
	ck_assert_uint_eq(counts[HC_PAGE_RESERVED], 7);
	ck_assert_int_eq(hc_page_alloc(fx.p, 1, ALL_COMPS, more), 1);
}
END_TEST

START_TEST(commit_shards)
{
	hc_page_t pg;
	uint32_t fill;

	ck_assert_uint_eq(hc_page_needed(fx.p, ALL_COMPS), 0x3u | HC_SHARD_REPLICATED);
	ck_assert_uint_eq(hc_page_needed(fx.p, KV_ONLY), 0x3u);
	ck_assert_uint_eq(hc_page_needed(fx.p, STATE_ONLY), HC_SHARD_REPLICATED);

	ck_assert_int_eq(hc_page_alloc(fx.p, 1, ALL_COMPS, &pg), 1);
	ck_assert_err(hc_page_pin(fx.p, pg), EAGAIN);
	ck_assert_int_eq(hc_page_commit(fx.p, pg, 1), 0);
	ck_assert_int_eq(hc_page_state(fx.p, HC_PAGE_ID(pg), NULL, NULL, &fill), HC_PAGE_RESERVED);
	ck_assert_uint_eq(fill, 1);
	ck_assert_int_eq(hc_page_commit(fx.p, pg, 1), 0); /* idempotent for one shard */
	ck_assert_int_eq(hc_page_commit(fx.p, pg, HC_SHARD_REPLICATED), 0);
	ck_assert_int_eq(hc_page_commit(fx.p, pg, 2), 1);
	ck_assert_int_eq(hc_page_state(fx.p, HC_PAGE_ID(pg), NULL, NULL, &fill), HC_PAGE_READY);
	ck_assert_err(hc_page_commit(fx.p, pg, 2), EALREADY);

	/* a page without the replicated component needs no replicated writer */
	ck_assert_int_eq(hc_page_alloc(fx.p, 1, KV_ONLY, &pg), 1);
	ck_assert_err(hc_page_commit(fx.p, pg, HC_SHARD_REPLICATED), EINVAL);
	ck_assert_int_eq(hc_page_commit(fx.p, pg, 3), 1);

	/* state only: the one writer makes it READY */
	ck_assert_int_eq(hc_page_alloc(fx.p, 1, STATE_ONLY, &pg), 1);
	ck_assert_err(hc_page_commit(fx.p, pg, 1), EINVAL);
	ck_assert_int_eq(hc_page_commit(fx.p, pg, HC_SHARD_REPLICATED), 1);
}
END_TEST

START_TEST(stale_handles)
{
	hc_page_t pg, again;

	ck_assert_int_eq(hc_page_alloc(fx.p, 1, ALL_COMPS, &pg), 1);
	ck_assert_int_eq(hct_fill_commit_all(fx.p, pg), 1);
	ck_assert_int_eq(hc_page_free(fx.p, &pg, 1), 1);
	ck_assert_err(hc_page_free(fx.p, &pg, 1), ESTALE);
	ck_assert_err(hc_page_pin(fx.p, pg), ESTALE);
	ck_assert_err(hc_page_commit(fx.p, pg, 1), ESTALE);
	/* exhaust the pool so the same page comes back, with the next generation */
	hc_page_t all[8];
	ck_assert_int_eq(hc_page_alloc(fx.p, 8, ALL_COMPS, all), 8);
	again = 0;
	for (int i = 0; i < 8; i++)
		if (HC_PAGE_ID(all[i]) == HC_PAGE_ID(pg))
			again = all[i];
	ck_assert_uint_eq(HC_PAGE_GEN(again), HC_PAGE_GEN(pg) + 1);
	ck_assert_err(hc_page_commit(fx.p, pg, 1), ESTALE);
	ck_assert_err(hc_page_abort(fx.p, &pg, 1), ESTALE);
	ck_assert_err(hc_page_unpin(fx.p, pg), ESTALE);
	ck_assert_int_eq(hc_page_commit(fx.p, again, 1), 0);
}
END_TEST

START_TEST(abort_returns_free)
{
	hc_page_t pg[3], one;
	uint64_t counts[HC_PAGE__COUNT];

	/* one writer (the replicated part only): straight back to FREE */
	ck_assert_int_eq(hc_page_alloc(fx.p, 3, STATE_ONLY, pg), 3);
	ck_assert_int_eq(hc_page_abort(fx.p, pg, 3), 3);
	ck_assert_ok(hc_pool_count_states(fx.p, counts, HC_PAGE__COUNT));
	ck_assert_uint_eq(counts[HC_PAGE_FREE], 8);
	ck_assert_err(hc_page_abort(fx.p, pg, 1), ESTALE);

	/* several shards, all ours (nobody else was given it): FREE too */
	ck_assert_int_eq(hc_page_alloc(fx.p, 1, KV_ONLY, &one), 1);
	ck_assert_int_eq(hc_page_commit(fx.p, one, 1), 0);
	ck_assert_int_eq(hc_page_abort(fx.p, &one, 1), 1);
	ck_assert_int_eq(hc_page_state(fx.p, HC_PAGE_ID(one), NULL, NULL, NULL), HC_PAGE_FREE);

	/* handed to another writer (its store marks it before copying): its
	 * copy may still land, so quarantine, one shard or several */
	for (int k = 0; k < 2; k++) {
		ck_assert_int_eq(hc_page_alloc(fx.p, 1, k ? KV_ONLY : STATE_ONLY, &one), 1);
		ck_assert_int_eq(hc__share_reserved(fx.p, one), 0);
		ck_assert_int_eq(hc_page_abort(fx.p, &one, 1), 1);
		ck_assert_int_eq(hc_page_state(fx.p, HC_PAGE_ID(one), NULL, NULL, NULL), HC_PAGE_QUARANTINE);
		ck_assert_err(hc_page_commit(fx.p, one, k ? 2 : HC_SHARD_REPLICATED), ESTALE);
		ck_assert_int_eq(hc__share_reserved(fx.p, one), -ESTALE); /* too late to mark it */
	}

	/* abort of a READY page is refused and leaves it READY */
	ck_assert_int_eq(hc_page_alloc(fx.p, 1, ALL_COMPS, pg), 1);
	ck_assert_int_eq(hct_fill_commit_all(fx.p, pg[0]), 1);
	ck_assert_err(hc_page_abort(fx.p, pg, 1), ESTALE);
	ck_assert_int_eq(hc_page_state(fx.p, HC_PAGE_ID(pg[0]), NULL, NULL, NULL), HC_PAGE_READY);
}
END_TEST

/* Two writers of the same shard (TP above the head groups) race: exactly one sees READY. */
START_TEST(racing_full_commits_one_winner)
{
	for (int round = 0; round < 200; round++) {
		hc_page_t pg;
		int fds[2], status, mine, theirs;
		char b;
		pid_t pid;

		ck_assert_int_eq(hc_page_alloc(fx.p, 1, KV_ONLY, &pg), 1);
		ck_assert_int_eq(pipe(fds), 0);
		pid = fork();
		if (pid == 0) {
			hc_pool *c;
			if (hc_pool_attach(
				    fx.name,
				    &(struct hc_attach_opts){ .size = sizeof(struct hc_attach_opts),
							      .flags = HC_ATTACH_NO_POPULATE | HC_ATTACH_NO_RECOVER },
				    &c) < 0)
				_exit(100);
			if (write(fds[1], "r", 1) != 1)
				_exit(101);
			int r = hc_page_commit(c, pg, 3);
			_exit(r == 1 ? 1 : r == -EALREADY ? 0 : 102);
		}
		ck_assert_int_eq(read(fds[0], &b, 1), 1);
		mine = hc_page_commit(fx.p, pg, 3);
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		theirs = WEXITSTATUS(status);
		ck_assert_msg(mine == 1 || mine == -EALREADY, "mine = %d", mine);
		ck_assert_msg((mine == 1) + (theirs == 1) == 1, "round %d: mine %d, theirs %d", round, mine, theirs);
		ck_assert_int_eq(hc_page_free(fx.p, &pg, 1), 1);
		close(fds[0]);
		close(fds[1]);
	}
}
END_TEST

START_TEST(abort_only_by_owner)
{
	hc_page_t pg;
	pid_t pid;
	int status;

	ck_assert_int_eq(hc_page_alloc(fx.p, 1, ALL_COMPS, &pg), 1);
	pid = fork();
	if (pid == 0) {
		hc_pool *c;
		struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_NO_POPULATE };
		if (hc_pool_attach(fx.name, &o, &c) < 0)
			_exit(10);
		int ret = hc_page_abort(c, &pg, 1);
		/* but another rank may commit its shard of our reservation */
		int ret2 = hc_page_commit(c, pg, 2);
		_exit(ret == -EPERM && ret2 == 0 ? 0 : 11);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ck_assert_int_eq(hc_page_commit(fx.p, pg, 1 | HC_SHARD_REPLICATED), 1);
}
END_TEST

START_TEST(pin_unpin_free)
{
	hc_page_t pg;

	ck_assert_int_eq(hc_page_alloc(fx.p, 1, ALL_COMPS, &pg), 1);
	ck_assert_int_eq(hct_fill_commit_all(fx.p, pg), 1);
	ck_assert_err(hc_page_unpin(fx.p, pg), EINVAL);
	ck_assert_ok(hc_page_pin(fx.p, pg));
	ck_assert_ok(hc_page_pin(fx.p, pg));
	ck_assert_int_eq(hct_verify(fx.p, pg, 1), 0);
	ck_assert_int_eq(hct_verify(fx.p, pg, 2), 0);
	ck_assert_int_eq(hct_verify(fx.p, pg, HC_SHARD_REPLICATED), 0);
	ck_assert_err(hc_page_free(fx.p, &pg, 1), EBUSY);
	ck_assert_int_eq(hc_page_state(fx.p, HC_PAGE_ID(pg), NULL, NULL, NULL), HC_PAGE_READY);
	ck_assert_ok(hc_page_unpin(fx.p, pg));
	ck_assert_err(hc_page_free(fx.p, &pg, 1), EBUSY);
	ck_assert_ok(hc_page_unpin(fx.p, pg));
	ck_assert_err(hc_page_unpin(fx.p, pg), EINVAL);
	ck_assert_int_eq(hc_page_free(fx.p, &pg, 1), 1);
	ck_assert_int_eq(hc_page_state(fx.p, HC_PAGE_ID(pg), NULL, NULL, NULL), HC_PAGE_FREE);
}
END_TEST

START_TEST(pin_from_another_rank_blocks_free)
{
	hc_page_t pg;
	int to_child[2], to_parent[2];
	pid_t pid;
	char b;
	int status;

	ck_assert_int_eq(hc_page_alloc(fx.p, 1, ALL_COMPS, &pg), 1);
	ck_assert_int_eq(hct_fill_commit_all(fx.p, pg), 1);
	ck_assert_int_eq(pipe(to_child), 0);
	ck_assert_int_eq(pipe(to_parent), 0);
	pid = fork();
	if (pid == 0) {
		hc_pool *c;
		struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_NO_POPULATE };
		if (hc_pool_attach(fx.name, &o, &c) < 0 || hc_page_pin(c, pg) < 0 || hct_verify(c, pg, 1) < 0)
			_exit(10);
		if (write(to_parent[1], "p", 1) != 1 || read(to_child[0], &b, 1) != 1)
			_exit(11);
		if (hc_page_unpin(c, pg) < 0)
			_exit(12);
		hc_pool_detach(c);
		_exit(0);
	}
	ck_assert_int_eq(read(to_parent[0], &b, 1), 1);
	ck_assert_err(hc_page_free(fx.p, &pg, 1), EBUSY);
	ck_assert_int_eq(write(to_child[1], "u", 1), 1);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ck_assert_int_eq(hc_page_free(fx.p, &pg, 1), 1);
}
END_TEST

/* Free scans pin columns up to the slot high-water mark: a pin in the newest slot counts. */
START_TEST(pin_in_highest_slot_blocks_free)
{
	hc_pool *extra[5];
	struct hc_pool_info info;
	hc_page_t pg;

	for (int i = 0; i < 5; i++)
		extra[i] = hct_attach(fx.name, 0);
	ck_assert_ok(hc_pool_info(extra[4], &info, sizeof(info)));
	ck_assert_int_eq(info.self_slot, 5);
	ck_assert_uint_eq(atomic_load(&fx.p->hdr->slots_hwm), 6);
	ck_assert_int_eq(hc_page_alloc(fx.p, 1, KV_ONLY, &pg), 1);
	ck_assert_int_eq(hc_page_commit(fx.p, pg, 3), 1);
	ck_assert_ok(hc_page_pin(extra[4], pg));
	ck_assert_err(hc_page_free(fx.p, &pg, 1), EBUSY);
	/* the mark only grows, and a scribbled one is clamped to max_ranks */
	hc_pool_detach(extra[4]);
	ck_assert_uint_eq(atomic_load(&fx.p->hdr->slots_hwm), 6);
	atomic_store(&fx.p->hdr->slots_hwm, 100000);
	ck_assert_int_eq(hc_page_free(fx.p, &pg, 1), 1);
	for (int i = 0; i < 4; i++)
		hc_pool_detach(extra[i]);
}
END_TEST

START_TEST(pin_overflow)
{
	hc_page_t pg;

	ck_assert_int_eq(hc_page_alloc(fx.p, 1, KV_ONLY, &pg), 1);
	ck_assert_int_eq(hc_page_commit(fx.p, pg, 3), 1);
	for (int i = 0; i < 65535; i++)
		ck_assert_int_eq(hc_page_pin(fx.p, pg), 0);
	ck_assert_err(hc_page_pin(fx.p, pg), EOVERFLOW);
	ck_assert_ok(hc_page_unpin(fx.p, pg));
	ck_assert_ok(hc_page_pin(fx.p, pg));
}
END_TEST

START_TEST(free_batch_reports_first_error)
{
	hc_page_t pg[3];

	ck_assert_int_eq(hc_page_alloc(fx.p, 3, KV_ONLY, pg), 3);
	ck_assert_int_eq(hc_page_commit(fx.p, pg[0], 3), 1);
	ck_assert_int_eq(hc_page_commit(fx.p, pg[2], 3), 1);
	/* pg[1] is still RESERVED: the others are freed, the call says why one was not */
	ck_assert_err(hc_page_free(fx.p, pg, 3), ESTALE);
	ck_assert_msg_has("not READY");
	ck_assert_int_eq(hc_page_state(fx.p, HC_PAGE_ID(pg[0]), NULL, NULL, NULL), HC_PAGE_FREE);
	ck_assert_int_eq(hc_page_state(fx.p, HC_PAGE_ID(pg[2]), NULL, NULL, NULL), HC_PAGE_FREE);
	ck_assert_int_eq(hc_page_state(fx.p, HC_PAGE_ID(pg[1]), NULL, NULL, NULL), HC_PAGE_RESERVED);
}
END_TEST

START_TEST(admin_cannot_hold)
{
	hc_pool *a = hct_attach(fx.name, HC_ATTACH_ADMIN);
	hc_page_t pg;

	ck_assert_err(hc_page_alloc(a, 1, 1, &pg), EPERM);
	ck_assert_msg_has("no rank slot");
	ck_assert_int_eq(hc_page_alloc(fx.p, 1, KV_ONLY, &pg), 1);
	ck_assert_int_eq(hc_page_commit(fx.p, pg, 3), 1);
	ck_assert_err(hc_page_pin(a, pg), EPERM);
	ck_assert_err(hc_page_free(a, &pg, 1), EPERM);
	hc_pool_detach(a);
}
END_TEST

START_TEST(addr_runs_disjoint)
{
	struct hc_pool_info info;
	hc_page_t pg = HC_PAGE_MAKE(3, 0);
	uint8_t *env = hc_page_envelope(fx.p, pg);
	static uint8_t owner[20480];
	uint8_t tag = 1;

	ck_assert_ok(hc_pool_info(fx.p, &info, sizeof(info)));
	memset(owner, 0, sizeof(owner));
	for (unsigned c = 0; c < info.ncomp; c++) {
		struct hc_component_info ci;
		hc_pool_component(fx.p, c, &ci, sizeof(ci));
		for (unsigned g = 0; g < ci.groups; g++)
			for (unsigned l = 0; l < ci.layers; l++, tag++) {
				uint8_t *a;
				size_t len;
				ck_assert_ok(hc_page_addr(fx.p, pg, c, l, g, (void **)&a, &len));
				ck_assert_uint_le((size_t)(a - env) + len, info.envelope_bytes);
				for (size_t i = 0; i < len; i++) {
					ck_assert_uint_eq(owner[a - env + i], 0);
					owner[a - env + i] = tag;
				}
			}
	}
}
END_TEST

/* The free map over three levels (4160 pages: 65 words of page bits, 2
 * summary words, 1 top word): in a full pool, the pages freed anywhere
 * are exactly what the map gives back, each once, from any cursor, and
 * an allocation takes them without looking at the page table. */
START_TEST(free_map_finds_every_free_page)
{
	enum { NP = 4160 };
	static const uint32_t holes[] = { 0, 5, 63, 64, 2047, 4095, 4096, 4159 };
	const unsigned nh = sizeof(holes) / sizeof(holes[0]);
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, NP, 0, 0);
	hc_page_t *pg = malloc(NP * sizeof(*pg)), got[8];
	unsigned level;
	uint64_t word;
	uint8_t seen[NP] = { 0 };

	ck_assert_uint_eq(p->fm.sh.nlevels, 3);
	ck_assert_int_eq(hc_page_alloc(p, NP, ALL_COMPS, pg), NP);
	ck_assert_int_eq(hc__fm_claim(&p->fm, &p->cursor), -1); /* full: every bit taken, every summary cleared */
	ck_assert_int_eq(hc__fm_summary_ok(&p->fm, &level, &word), 1);
	for (unsigned i = 0; i < NP; i++)
		ck_assert_int_eq(hct_fill_commit_all(p, pg[i]), 1);
	for (unsigned i = 0; i < nh; i++) {
		ck_assert_int_eq(hc_page_free(p, &pg[holes[i]], 1), 1);
		ck_assert(hc__fm_has(&p->fm, holes[i]));
	}
	ck_assert_int_eq(hc__fm_summary_ok(&p->fm, &level, &word), 1);
	/* from a cursor past most of them: the search wraps */
	atomic_store(&p->cursor, 3000);
	for (unsigned i = 0; i < nh; i++) {
		int64_t id = hc__fm_claim(&p->fm, &p->cursor);
		ck_assert_int_ge(id, 0);
		ck_assert_int_lt(id, NP);
		ck_assert_msg(!seen[id]++, "page %lld given twice", (long long)id);
	}
	ck_assert_int_eq(hc__fm_claim(&p->fm, &p->cursor), -1);
	for (unsigned i = 0; i < nh; i++)
		ck_assert_msg(seen[holes[i]], "page %u not given", holes[i]);
	/* a claim that dies leaves the pages out of sight: a recovery's sweep shows them again */
	ck_assert_int_gt(hc_pool_check(p, HC_CHECK_QUIESCENT, NULL, NULL), 0);
	ck_assert_ok(hc_pool_recover(p, NULL, 0));
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
	/* an allocation takes exactly those pages */
	ck_assert_int_eq(hc_page_alloc(p, nh, ALL_COMPS, got), (int)nh);
	memset(seen, 0, sizeof(seen));
	for (unsigned i = 0; i < nh; i++)
		seen[HC_PAGE_ID(got[i])]++;
	for (unsigned i = 0; i < nh; i++)
		ck_assert_msg(seen[holes[i]] == 1, "page %u not allocated", holes[i]);
	ck_assert_int_eq(hc__fm_claim(&p->fm, &p->cursor), -1);
	free(pg);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* Bits past the last page, in the map's last word, are a scribble: no
 * claim indexes the page table with one, from any cursor. */
START_TEST(free_map_ignores_bits_past_the_last_page)
{
	enum { NP = 100 };
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, NP, 0, 0);
	hc_page_t pg[NP], one;

	ck_assert_int_eq(hc_page_alloc(p, NP, ALL_COMPS, pg), NP);
	atomic_fetch_or(&p->fm.lv[0][1], ~((UINT64_C(1) << (NP - 64)) - 1)); /* pages 100..127 */
	for (uint32_t from = 0; from < 128; from += 36) {
		atomic_store(&p->cursor, from);
		ck_assert_int_eq(hc__fm_claim(&p->fm, &p->cursor), -1);
		atomic_store(&p->cursor, from);
		ck_assert_int_eq(hc_page_alloc(p, 1, ALL_COMPS, &one), -ENOSPC);
	}
	ck_assert_int_eq(hc_page_free(p, &pg[7], 1), -ESTALE); /* RESERVED, not READY: nothing else moved */
	ck_assert_int_eq(hct_fill_commit_all(p, pg[7]), 1);
	ck_assert_int_eq(hc_page_free(p, &pg[7], 1), 1);
	atomic_store(&p->cursor, 70);
	ck_assert_int_eq(hc_page_alloc(p, 1, ALL_COMPS, &one), 1);
	ck_assert_uint_eq(HC_PAGE_ID(one), 7);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

static uint64_t evictions(hc_pool *p)
{
	struct hc_stats st;

	ck_assert_ok(hc_pool_stats(p, &st, sizeof(st)));
	return st.counter[HC_CTR_evictions];
}

/* A quarantined page whose grace ran out comes back through the
 * quarantine map, before anything is evicted and without a recovery to
 * sweep it. */
START_TEST(quarantine_comes_back_without_a_sweep)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 20, 0);
	hc_key_t k[7];
	hc_page_t q, got;
	uint64_t ev;

	hct_keys(k, 7, 62);
	ck_assert_int_eq(hct_store(p, k, 7, 0), 7); /* 7 evictable pages */
	ck_assert_int_eq(hc_page_alloc(p, 1, ALL_COMPS, &q), 1);
	atomic_fetch_or(&p->pages[HC_PAGE_ID(q)].flags, HC_PF_SHARED); /* as a co-writer would */
	ck_assert_int_eq(hc_page_abort(p, &q, 1), 1);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(q), NULL, NULL, NULL), HC_PAGE_QUARANTINE);
	ck_assert(hc__fm_has(&p->qm, HC_PAGE_ID(q))); /* the quarantine map shows it */
	usleep(40 * 1000);
	ev = evictions(p);
	ck_assert_int_eq(hc_page_alloc(p, 1, ALL_COMPS, &got), 1);
	ck_assert_uint_eq(HC_PAGE_ID(got), HC_PAGE_ID(q));
	ck_assert_uint_eq(evictions(p), ev);
	ck_assert_int_eq(hct_hit(p, k, 7), 7);
	ck_assert_int_eq(hct_fill_commit_all(p, got), 1);
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("pages");
	TCase *tc = tcase_create("pages");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, alloc_distinct_reserved);
	tcase_add_test(tc, alloc_all_or_nothing);
	tcase_add_test(tc, commit_shards);
	tcase_add_test(tc, stale_handles);
	tcase_add_test(tc, abort_returns_free);
	tcase_add_test(tc, racing_full_commits_one_winner);
	tcase_add_test(tc, abort_only_by_owner);
	tcase_add_test(tc, pin_unpin_free);
	tcase_add_test(tc, pin_from_another_rank_blocks_free);
	tcase_add_test(tc, pin_in_highest_slot_blocks_free);
	tcase_add_test(tc, pin_overflow);
	tcase_add_test(tc, free_batch_reports_first_error);
	tcase_add_test(tc, admin_cannot_hold);
	tcase_add_test(tc, addr_runs_disjoint);
	tcase_add_test(tc, free_map_finds_every_free_page);
	tcase_add_test(tc, free_map_ignores_bits_past_the_last_page);
	tcase_add_test(tc, quarantine_comes_back_without_a_sweep);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
