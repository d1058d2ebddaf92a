/* SPDX-License-Identifier: Apache-2.0 */
/* test_ranks.c - rank slots, proof of death by EOWNERDEAD, and recovery. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hct.h"

/* A child that attaches, runs 'work', reports 'r' on the pipe, then waits forever. */
static pid_t spawn(const char *name, void (*work)(hc_pool *, int fd), int *rfd)
{
	int fds[2];
	pid_t pid;
	char b;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_NO_POPULATE };
		hc_pool *c;
		close(fds[0]);
		if (hc_pool_attach(name, &o, &c) < 0)
			_exit(10);
		if (work)
			work(c, fds[1]);
		if (write(fds[1], "r", 1) != 1)
			_exit(11);
		for (;;)
			pause();
	}
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &b, 1), 1);
	if (rfd)
		*rfd = fds[0];
	else
		close(fds[0]);
	return pid;
}

static void kill_wait(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static hc_page_t shared_ready; /* set by the parent before fork */

static void hold_things(hc_pool *c, int fd)
{
	hc_page_t pg[3];

	(void)fd;
	if (hc_page_alloc(c, 3, 3, pg) != 3 || hc_page_commit(c, pg[0], 1) != 0)
		_exit(20);
	if (hc_page_pin(c, shared_ready) < 0 || hc_page_pin(c, shared_ready) < 0)
		_exit(21);
}

static void hold_things_alloc4(hc_pool *c, int fd)
{
	(void)fd;
	if (hc_page_alloc(c, 4, 3, (hc_page_t[4]){ 0 }) != 4)
		_exit(22);
}

static void hold_things_alloc1(hc_pool *c, int fd)
{
	(void)fd;
	if (hc_page_alloc(c, 1, 3, (hc_page_t[1]){ 0 }) != 1)
		_exit(23);
}

START_TEST(death_is_proved_and_undone)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 150, 0);
	struct hc_recovery_report rep;
	uint64_t counts[HC_PAGE__COUNT];
	pid_t pid;

	ck_assert_int_eq(hc_page_alloc(p, 1, 3, &shared_ready), 1);
	ck_assert_int_eq(hct_fill_commit_all(p, shared_ready), 1);
	pid = spawn(name, hold_things, NULL);

	/* alive: nothing to undo, and its pins block a free */
	ck_assert_ok(hc_pool_recover(p, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.dead_ranks, 0);
	ck_assert_err(hc_page_free(p, &shared_ready, 1), EBUSY);
	struct hc_rank_info ri;
	ck_assert_ok(hc_pool_rank(p, 1, &ri, sizeof(ri)));
	ck_assert_int_eq(ri.live, 1);
	ck_assert_uint_eq(ri.pid, (uint32_t)pid);
	ck_assert_uint_eq(ri.pins, 2);
	ck_assert_uint_eq(ri.reserved, 3);
	/* every slot in one pass says the same */
	struct hc_rank_info slots[HC_MAX_RANKS + 1];
	struct hc_pool_info in;
	ck_assert_ok(hc_pool_info(p, &in, sizeof(in)));
	ck_assert_int_eq(hc_pool_ranks(p, slots, sizeof(slots[0]), HC_MAX_RANKS + 1), (int)in.max_ranks);
	ck_assert_int_eq(slots[0].live, 1);
	ck_assert_uint_eq(slots[0].pins, 0);
	ck_assert_uint_eq(slots[1].slot, 1);
	ck_assert_uint_eq(slots[1].pid, (uint32_t)pid);
	ck_assert_uint_eq(slots[1].pins, 2);
	ck_assert_uint_eq(slots[1].reserved, 3);
	ck_assert_int_eq(slots[2].live, 0);
	ck_assert_int_eq(hc_pool_ranks(p, slots, sizeof(slots[0]), 2), 2);
	ck_assert_uint_eq(slots[1].reserved, 3);
	ck_assert_err(hc_pool_ranks(p, NULL, sizeof(slots[0]), 2), EINVAL);
	ck_assert_int_eq(hc_pool_ranks(p, NULL, sizeof(slots[0]), 0), 0);

	kill_wait(pid);
	ck_assert_ok(hc_pool_recover(p, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.dead_ranks, 1);
	ck_assert_uint_eq(rep.pins_dropped, 2);
	ck_assert_uint_eq(rep.quarantined, 3);
	ck_assert_ok(hc_pool_count_states(p, counts, HC_PAGE__COUNT));
	ck_assert_uint_eq(counts[HC_PAGE_QUARANTINE], 3);
	ck_assert_uint_eq(counts[HC_PAGE_READY], 1);
	ck_assert_ok(hc_pool_rank(p, 1, &ri, sizeof(ri)));
	ck_assert_int_eq(ri.live, 0);
	ck_assert_int_eq(hc__pool_check(p, HC_CHECK_QUIESCENT, NULL, NULL), 0);

	/* quarantined pages are not handed out before the grace runs out */
	hc_page_t all[7];
	ck_assert_err(hc_page_alloc(p, 7, 3, all), ENOSPC);
	usleep(200 * 1000);
	ck_assert_ok(hc_pool_recover(p, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.dead_ranks, 0);
	ck_assert_uint_eq(rep.released, 3);
	ck_assert_int_eq(hc_page_free(p, &shared_ready, 1), 1);
	ck_assert_int_eq(hc_page_alloc(p, 8, 3, (hc_page_t[8]){ 0 }), 8);
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

START_TEST(allocation_takes_expired_quarantine)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 100, 0);
	hc_page_t pg[4];
	pid_t pid;

	pid = spawn(name, hold_things_alloc4, NULL);
	kill_wait(pid);
	ck_assert_ok(hc_pool_recover(p, NULL, 0));
	ck_assert_err(hc_page_alloc(p, 1, 3, pg), ENOSPC);
	usleep(150 * 1000);
	/* no recovery pass in between: the allocator itself checks the grace */
	ck_assert_int_eq(hc_page_alloc(p, 4, 3, pg), 4);
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

START_TEST(stopped_is_alive)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 50, 0);
	struct hc_recovery_report rep;
	struct hc_rank_info ri;
	pid_t pid = spawn(name, hold_things_alloc1, NULL);

	ck_assert_int_eq(kill(pid, SIGSTOP), 0);
	usleep(100 * 1000);
	ck_assert_ok(hc_pool_recover(p, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.dead_ranks, 0);
	ck_assert_uint_eq(rep.quarantined, 0);
	ck_assert_ok(hc_pool_rank(p, 1, &ri, sizeof(ri)));
	ck_assert_int_eq(ri.live, 1);
	ck_assert_uint_eq(ri.reserved, 1);
	ck_assert_int_eq(hc__pool_check(p, HC_CHECK_QUIESCENT, NULL, NULL), 0);
	kill(pid, SIGCONT);
	kill_wait(pid);
	ck_assert_ok(hc_pool_recover(p, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.dead_ranks, 1);
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

static void *attach_and_exit(void *arg)
{
	return hct_attach((const char *)arg, 0);
}

START_TEST(attaching_thread_may_exit)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 0, 0), *q;
	pthread_t t;
	struct hc_recovery_report rep;
	struct hc_rank_info ri;
	hc_page_t pg;

	ck_assert_int_eq(pthread_create(&t, NULL, attach_and_exit, (void *)name), 0);
	ck_assert_int_eq(pthread_join(t, (void **)&q), 0);
	ck_assert_int_eq(hc_page_alloc(q, 1, 3, &pg), 1);
	/* the thread that attached is gone; the slot is still held */
	ck_assert_ok(hc_pool_recover(p, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.dead_ranks, 0);
	ck_assert_ok(hc_pool_rank(p, 1, &ri, sizeof(ri)));
	ck_assert_int_eq(ri.live, 1);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg), NULL, NULL, NULL), HC_PAGE_RESERVED);
	ck_assert_ok(hc_pool_detach(q));
	ck_assert_ok(hc_pool_rank(p, 1, &ri, sizeof(ri)));
	ck_assert_int_eq(ri.live, 0);
	/* a clean detach quarantines what it still had reserved */
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg), NULL, NULL, NULL), HC_PAGE_QUARANTINE);
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

START_TEST(slots_run_out)
{
	const char *name = hct_name();
	hc_pool *a = hct_create_attach(name, 4, 0, 2), *b, *c;
	struct hc_pool_info ia, ib;

	b = hct_attach(name, 0);
	ck_assert_ok(hc_pool_info(a, &ia, sizeof(ia)));
	ck_assert_ok(hc_pool_info(b, &ib, sizeof(ib)));
	ck_assert_int_ne(ia.self_slot, ib.self_slot);
	ck_assert_err(hc_pool_attach(name,
				     &(struct hc_attach_opts){ .size = sizeof(struct hc_attach_opts),
							       .flags = HC_ATTACH_NO_POPULATE },
				     &c),
		      EUSERS);
	ck_assert_msg_has("max-ranks");
	hc_pool_detach(b);
	c = hct_attach(name, 0);
	hc_pool_detach(c);
	hc_pool_detach(a);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

START_TEST(dead_slot_is_reclaimed_by_next_attach)
{
	const char *name = hct_name();
	struct hct_spec s;
	hc_pool *p;
	pid_t pid;
	uint64_t counts[HC_PAGE__COUNT];

	hct_spec_init(&s, name, 4);
	s.spec.max_ranks = 1;
	s.spec.quarantine_ms = 60000;
	ck_assert_ok(hc_pool_create(&s.spec));
	pid = spawn(name, hold_things_alloc1, NULL);
	kill_wait(pid);
	/* the only slot belonged to the dead: the claimer undoes its holds, then takes it */
	p = hct_attach(name, HC_ATTACH_NO_RECOVER);
	ck_assert_ok(hc_pool_count_states(p, counts, HC_PAGE__COUNT));
	ck_assert_uint_eq(counts[HC_PAGE_QUARANTINE], 1);
	ck_assert_uint_eq(counts[HC_PAGE_RESERVED], 0);
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

/* Deaths between the steps of a multi-step operation, staged by hand. */
static void stage_freeing(hc_pool *c, int fd)
{
	(void)fd;
	uint64_t w = atomic_load(&c->pages[HC_PAGE_ID(shared_ready)].word);
	atomic_store(&c->pages[HC_PAGE_ID(shared_ready)].word,
		     hc__w_make(HC_PAGE_FREEING, (unsigned)c->slot, hc__w_gen(w), 0));
}

START_TEST(death_mid_free_restores_ready)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 50, 0);
	struct hc_recovery_report rep;
	pid_t pid;

	ck_assert_int_eq(hc_page_alloc(p, 1, 3, &shared_ready), 1);
	ck_assert_int_eq(hct_fill_commit_all(p, shared_ready), 1);
	pid = spawn(name, stage_freeing, NULL);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(shared_ready), NULL, NULL, NULL), HC_PAGE_FREEING);
	kill_wait(pid);
	ck_assert_ok(hc_pool_recover(p, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.unfreed, 1);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(shared_ready), NULL, NULL, NULL), HC_PAGE_READY);
	ck_assert_int_eq(hct_verify(p, shared_ready, 1), 0);
	ck_assert_int_eq(hc_page_free(p, &shared_ready, 1), 1);
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

START_TEST(full_fill_is_promoted)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 50, 0);
	struct hc_recovery_report rep;
	struct hc_engine_spec e = { .size = sizeof(e), .engine_id = 3, .tp_size = 1, .quota_pages = 8 };
	struct hc_rank_info ri;
	hc_page_t pg;

	/* every shard is in, but the last committer died before READY; the
	 * owner is in an engine, so its reservation counts against its quota */
	ck_assert_ok(hc_engine_join(p, &e));
	ck_assert_int_eq(hc_page_alloc(p, 1, 3, &pg), 1);
	atomic_store(&p->pages[HC_PAGE_ID(pg)].word,
		     hc__w_make(HC_PAGE_RESERVED, (unsigned)p->slot, HC_PAGE_GEN(pg), 3u | HC_SHARD_REPLICATED));
	ck_assert_ok(hc_pool_recover(p, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.promoted, 1);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg), NULL, NULL, NULL), HC_PAGE_READY);
	ck_assert_ok(hc_pool_rank(p, (unsigned)p->slot, &ri, sizeof(ri)));
	ck_assert_uint_eq(ri.held, 0); /* no longer a reservation: no longer counted */
	/* a fresh reservation (fill 0, presence not yet written) is never promoted */
	hc_page_t q;
	ck_assert_int_eq(hc_page_alloc(p, 1, 3, &q), 1);
	atomic_store(&p->pages[HC_PAGE_ID(q)].presence, 0);
	ck_assert_ok(hc_pool_recover(p, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.promoted, 0);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(q), NULL, NULL, NULL), HC_PAGE_RESERVED);
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

START_TEST(forked_child_must_attach_again)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 0, 0);
	hc_page_t pg;
	pid_t pid;
	int status;

	ck_assert_int_eq(hc_page_alloc(p, 1, 3, &pg), 1);
	pid = fork();
	if (pid == 0) {
		hc_page_t x;
		int a = hc_page_alloc(p, 1, 3, &x);
		int b = hc_page_commit(p, pg, 1);
		int c = hc_page_abort(p, &pg, 1);
		hc_pool_detach(p); /* unmaps only: must not touch the parent's slot or holds */
		_exit(a == -ECHILD && b == -ECHILD && c == -ECHILD ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ck_assert_int_eq(hc_page_state(p, HC_PAGE_ID(pg), NULL, NULL, NULL), HC_PAGE_RESERVED);
	ck_assert_int_eq(hct_fill_commit_all(p, pg), 1);
	ck_assert_ok(hc_pool_detach(p)); /* and the parent's detach does not wait for the child */
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

/* Probes (recovery, hc_pool_rank, destroy) lock free slots for a moment; attaches must not fail for it. */
START_TEST(probes_do_not_steal_slots)
{
	const char *name = hct_name();
	struct hct_spec s;
	pid_t mon;
	int status;

	hct_spec_init(&s, name, 4);
	s.spec.max_ranks = 1;
	ck_assert_ok(hc_pool_create(&s.spec));
	int fds[2];
	char b;
	ck_assert_int_eq(pipe(fds), 0);
	mon = fork();
	if (mon == 0) {
		hc_pool *a = hct_attach(name, HC_ATTACH_ADMIN);
		if (write(fds[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			hc__rank_probe(a, 0, NULL);
	}
	ck_assert_int_eq(read(fds[0], &b, 1), 1);
	for (int i = 0; i < 2000; i++) {
		hc_pool *p;
		int ret = hc_pool_attach(name,
					 &(struct hc_attach_opts){ .size = sizeof(struct hc_attach_opts),
								   .flags = HC_ATTACH_NO_POPULATE },
					 &p);
		ck_assert_msg(ret == 0, "attach %d: %d %s", i, ret, hc_last_error());
		hc_pool_detach(p);
	}
	kill(mon, SIGKILL);
	ck_assert_int_eq(waitpid(mon, &status, 0), mon);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ranks");
	TCase *tc = tcase_create("ranks");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, death_is_proved_and_undone);
	tcase_add_test(tc, allocation_takes_expired_quarantine);
	tcase_add_test(tc, stopped_is_alive);
	tcase_add_test(tc, attaching_thread_may_exit);
	tcase_add_test(tc, slots_run_out);
	tcase_add_test(tc, dead_slot_is_reclaimed_by_next_attach);
	tcase_add_test(tc, death_mid_free_restores_ready);
	tcase_add_test(tc, full_fill_is_promoted);
	tcase_add_test(tc, forked_child_must_attach_again);
	tcase_add_test(tc, probes_do_not_steal_slots);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
