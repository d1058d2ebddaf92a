/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_service.c - the request path end to end: rank processes post L3
 * existence queries and backups on their rings, a service (embedded here,
 * the engine hicached runs) does them against a backend and answers; one
 * service per pool; a service that is absent, stopped or killed makes
 * requests fail fast; a dead rank's leftover requests are dropped unread.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hicache/service.h>

#include "../shmpool/pool.h"
#include "hct.h"

static hc_service *start(const char *name, const char *backend)
{
	struct hc_service_opts o = { .size = sizeof(struct hc_service_opts),
				     .backend = backend,
				     .batch_pages = 4,
				     .write_policy = HC_WRITE_NONE };

	return hct_service_start(name, &o);
}

/* A service in a child process (no write policy: only what is asked). */
static pid_t service_child(const char *name)
{
	return hct_service_child(name, &(struct hc_service_opts){ .size = sizeof(struct hc_service_opts),
								  .backend = "mem",
								  .write_policy = HC_WRITE_NONE });
}

START_TEST(no_service)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 100, 4);
	hc_key_t k[2];
	hc_req *rq;
	uint32_t pid = 7;

	hct_keys(k, 2, 1);
	ck_assert_int_eq(hc_service_probe(p, &pid), 0);
	ck_assert_uint_eq(pid, 0);
	ck_assert_err(hc_req_exists(p, k, 2, &rq), ENOTCONN);
	ck_assert_msg_has("start hicached");
	ck_assert_ptr_null(rq);
	ck_assert_err(hc_req_exists(p, k, 0, &rq), EINVAL);
	ck_assert_err(hc_req_exists(p, NULL, 2, &rq), EINVAL);
	ck_assert_err(hc_req_exists(p, k, 1u << 20, &rq), E2BIG);
	ck_assert_msg_has("--arg-bytes");
	ck_assert_err(hc_req_exists(p, k, 2, NULL), EINVAL);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

#define NK 10

/* A rank process: store pages, back them up, ask what L3 has. */
static void rank_work(hc_pool *p, void *arg)
{
	hc_key_t k[NK + 3];
	hc_page_t pg[NK];
	uint8_t skip[NK];
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = NK };
	struct hc_lookup_req lq = { .size = sizeof(struct hc_lookup_req), .keys = k, .nkeys = NK };
	hc_req *r1, *r2, *r3;

	hct_keys(k, NK + 3, *(const uint32_t *)arg);
	if (hc_reserve(p, &rq, pg, skip) != NK)
		_exit(10);
	for (int i = 0; i < NK; i++)
		if (hct_fill_commit_all(p, pg[i]) != 1)
			_exit(11);
	/* nothing in L3 yet */
	if (hc_req_exists(p, k, NK, &r1) < 0 || hc_req_wait(r1, 10000) != 0 || hc_req_free(r1) < 0)
		_exit(12);
	/* back up all; then all are there, and a second backup skips them */
	if (hc_req_backup(p, pg, NK, &r1) < 0 || hc_req_wait(r1, 10000) != NK)
		_exit(13);
	for (int i = 0; i < NK; i++)
		if (!(atomic_load(&p->pages[HC_PAGE_ID(pg[i])].flags) & HC_PF_IN_L3))
			_exit(14);
	hc_req_free(r1);
	/* three requests in flight at once, answered in any order */
	if (hc_req_exists(p, k, NK, &r1) < 0 || hc_req_exists(p, k + 1, NK + 2, &r2) < 0 ||
	    hc_req_backup(p, pg, NK, &r3) < 0)
		_exit(15);
	if (hc_req_wait(r3, 10000) != NK || hc_req_wait(r2, 10000) != NK - 1 || hc_req_wait(r1, 10000) != NK)
		_exit(16);
	if (hc_req_poll(r1) != NK)
		_exit(17);
	hc_req_free(r1);
	hc_req_free(r2);
	hc_req_free(r3);
	/* an unknown key first: the prefix is empty */
	if (hc_req_exists(p, k + NK, 3, &r1) < 0 || hc_req_wait(r1, 10000) != 0)
		_exit(18);
	hc_req_free(r1);
	(void)lq;
}

/* Another rank's keys: what the first rank backed up is in L3 for it too. */
static void other_rank(hc_pool *p, void *arg)
{
	hc_key_t k[NK];
	hc_req *r;

	(void)arg;
	hct_keys(k, NK, 100);
	if (hc_req_exists(p, k, NK, &r) < 0 || hc_req_wait(r, 10000) != NK || hc_req_free(r) < 0)
		_exit(30);
}

START_TEST(exists_and_backup)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 32, 100, 4);
	pid_t svc = service_child(name);
	uint32_t pid = 0;
	int st;

	ck_assert_int_eq(hc_service_probe(p, &pid), 1);
	ck_assert_uint_eq(pid, (uint32_t)svc);
	for (uint32_t i = 0; i < 2; i++) {
		uint32_t seed = 100 + 50 * i;
		st = hct_in_child(name, rank_work, &seed);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %u: status 0x%x", i, st);
	}
	st = hct_in_child(name, other_rank, NULL);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "other rank: status 0x%x", st);
	hct_service_child_stop(svc);
	ck_assert_int_eq(hc_service_probe(p, NULL), 0);
	{
		int v = 0;
		ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, &v), 0);
	}
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* hc_service_l3_stats: the attached backend's name and figures, which
 * follow its writes; nothing once it is detached; bad arguments named. */
struct figures {
	uint64_t objects, bytes;
	unsigned seen;
};

static void take_figure(void *arg, const char *name, uint64_t value)
{
	struct figures *f = arg;

	f->seen++;
	if (!strcmp(name, "objects"))
		f->objects = value;
	else if (!strcmp(name, "bytes"))
		f->bytes = value;
}

START_TEST(l3_stats_of_the_attached_backend)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 100, 4);
	hc_service *s = hct_service_start(name, &(struct hc_service_opts){ .size = sizeof(struct hc_service_opts),
									   .backend = "mem",
									   .write_policy = HC_WRITE_NONE });
	struct hc_store_info si;
	struct figures f = { 0 };
	hc_key_t k[3];
	hc_page_t pg[3];
	hc_req *rq;

	ck_assert_ok(hc_service_l3_stats(s, &si, sizeof(si), take_figure, &f));
	ck_assert_str_eq(si.name, "mem");
	ck_assert_uint_gt(f.seen, 3);
	ck_assert_uint_eq(f.objects, 0);
	hct_keys(k, 3, 7);
	hct_store_by_key(p, k, 3, 0, pg);
	ck_assert_ok(hc_req_backup(p, pg, 3, &rq));
	ck_assert_int_eq(hc_req_wait(rq, 10000), 3);
	ck_assert_ok(hc_req_free(rq));
	ck_assert_ok(hc_service_l3_stats(s, NULL, 0, take_figure, &f));
	ck_assert_uint_eq(f.objects, 3);
	ck_assert_uint_gt(f.bytes, 0);
	ck_assert_ok(hc_service_l3_stats(s, &si, sizeof(si), NULL, NULL)); /* the name alone */
	/* detached: no L3 to read */
	ck_assert_ok(hc_req_backend(p, "", &rq));
	ck_assert_int_eq(hc_req_wait(rq, 10000), 0);
	ck_assert_ok(hc_req_free(rq));
	ck_assert_err(hc_service_l3_stats(s, &si, sizeof(si), take_figure, &f), ENOENT);
	ck_assert_msg_has("no backend attached");
	ck_assert_err(hc_service_l3_stats(NULL, &si, sizeof(si), take_figure, &f), EINVAL);
	ck_assert_ok(hc_service_stop(s));
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

START_TEST(one_service_per_pool)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 100, 4);
	hc_service *s = start(name, "mem"), *s2 = NULL;
	struct hc_service_opts o = { .size = sizeof(struct hc_service_opts), .backend = "mem" };
	char want[64];

	ck_assert_err(hc_service_start(name, &o, &s2), EBUSY);
	snprintf(want, sizeof(want), "already served by pid %d", (int)getpid());
	ck_assert_msg_has(want);
	ck_assert_ptr_null(s2);
	o.backend = "nosuchplugin";
	ck_assert_ok(hc_service_stop(s));
	ck_assert_err(hc_service_start(name, &o, &s2), ENOENT); /* the backend is checked, the lock let go */
	ck_assert_int_eq(hc_service_probe(p, NULL), 0);
	o.backend = NULL;
	ck_assert_err(hc_service_start(name, &o, &s2), EINVAL);
	ck_assert_err(
		hc_service_start("bad/name",
				 &(struct hc_service_opts){ .size = sizeof(struct hc_service_opts), .backend = "mem" },
				 &s2),
		EINVAL);
	s = start(name, "mem"); /* and again, after a clean stop */
	ck_assert_ok(hc_service_stop(s));
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* A service in a child process: stopped, then killed, with a request in flight. */
START_TEST(service_death)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 100, 4);
	hc_key_t k[3];
	hc_req *rq;
	uint32_t pid = 0;
	pid_t child;
	int st;
	double t0;

	hct_keys(k, 3, 5);
	child = service_child(name);
	ck_assert_int_eq(hc_service_probe(p, &pid), 1);
	ck_assert_uint_eq(pid, (uint32_t)child);
	ck_assert_ok(hc_req_exists(p, k, 3, &rq));
	ck_assert_int_eq(hc_req_wait(rq, 10000), 0);
	ck_assert_ok(hc_req_free(rq));
	/* stopped: alive, so the request waits; a timeout leaves it running */
	kill(child, SIGSTOP);
	ck_assert_int_eq(waitpid(child, &st, WUNTRACED), child); /* stopped now, not later */
	ck_assert(WIFSTOPPED(st));
	ck_assert_ok(hc_req_exists(p, k, 3, &rq));
	ck_assert_err(hc_req_wait(rq, 150), ETIMEDOUT);
	ck_assert_err(hc_req_poll(rq), EINPROGRESS);
	/* killed: the wait fails fast, and new requests are refused */
	kill(child, SIGKILL);
	ck_assert_int_eq(waitpid(child, &st, 0), child);
	t0 = hct_now();
	ck_assert_err(hc_req_wait(rq, 10000), ENOTCONN);
	ck_assert_msg_has("lost");
	ck_assert(hct_now() - t0 < 2.0);
	ck_assert_ok(hc_req_free(rq)); /* a query is abandoned, not waited for */
	ck_assert_err(hc_req_exists(p, k, 3, &rq), ENOTCONN);
	/* a new service takes over the dead one's lock */
	{
		hc_service *s = start(name, "mem");
		ck_assert_ok(hc_req_exists(p, k, 3, &rq));
		ck_assert_int_eq(hc_req_wait(rq, 10000), 0);
		ck_assert_ok(hc_req_free(rq));
		ck_assert_ok(hc_service_stop(s));
	}
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* A rank that dies with a request queued: the next owner of its slot never
 * sees an answer to it, and its own requests are answered. */
static void post_and_die(hc_pool *p, void *arg)
{
	hc_key_t k[4];
	hc_req *rq;

	(void)arg;
	hct_keys(k, 4, 9);
	if (hc_req_exists(p, k, 4, &rq) < 0)
		_exit(20);
	_exit(0); /* without waiting, without detaching */
}

static void next_owner(hc_pool *p, void *arg)
{
	hc_key_t k[2];
	hc_req *rq;

	(void)arg;
	hct_keys(k, 2, 10);
	if (hc_req_exists(p, k, 2, &rq) < 0 || hc_req_wait(rq, 10000) != 0 || hc_req_free(rq) < 0)
		_exit(21);
}

START_TEST(dead_ranks_requests_dropped)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 8, 100, 4);
	pid_t svc = service_child(name);
	int st;

	kill(svc, SIGSTOP); /* the request stays queued */
	ck_assert_int_eq(waitpid(svc, &st, WUNTRACED), svc);
	st = hct_in_child(name, post_and_die, NULL);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
	ck_assert_ok(hc_pool_recover(p, NULL, 0)); /* the dead rank's slot is free again */
	kill(svc, SIGCONT);
	st = hct_in_child(name, next_owner, NULL);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
	kill(svc, SIGKILL);
	waitpid(svc, &st, 0);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("service");
	TCase *tc = tcase_create("service");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, no_service);
	tcase_add_test(tc, exists_and_backup);
	tcase_add_test(tc, one_service_per_pool);
	tcase_add_test(tc, l3_stats_of_the_attached_backend);
	tcase_add_test(tc, service_death);
	tcase_add_test(tc, dead_ranks_requests_dropped);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
