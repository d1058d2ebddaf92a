/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_fault_backend.c - the fault fixture (tests/fixtures/fault.c) through
 * the library's store: each knob does what it says on exactly the op it
 * names (failures with their errno, corruption and short reads caught by
 * the library, hangs ended by cancel, delays honoured by reap), its ctl
 * keys and options, and its objects outliving a process killed without
 * closing its store.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hicache/backend.h>

#include "../lib/l3/store.h"
#include "hct.h"

static const char *pool_name;
static hc_pool *pool;
static hc_store *st;

static void setup(void)
{
	hct_l3_setup();
	pool_name = hct_name();
	pool = hct_create_attach(pool_name, 64, 100, 8);
	st = NULL;
}

static void teardown(void)
{
	if (st)
		hc_store_close(st);
	hc_pool_detach(pool);
	hc_pool_destroy(pool_name, NULL, HC_DESTROY_FORCE);
	hct_l3_teardown();
}

/* A store on p over this test's directory, with plugin options after dir,
 * and the library's options so (NULL: without retries, so that the
 * plugin's failures show as they are). */
static hc_store *open_with(hc_pool *p, const char *opts, const struct hc_store_opts *so)
{
	static const struct hc_store_opts plain = { .size = sizeof(struct hc_store_opts), .retries = -1 };
	char spec[256];
	hc_store *s = NULL;
	int r;

	snprintf(spec, sizeof(spec), "fault:dir=%s%s%s", hct_l3_dir, *opts ? "," : "", opts);
	r = hc_store_open(p, spec, so ? so : &plain, &s);
	ck_assert_msg(r == 0, "open %s: %d %s", spec, r, hc_last_error());
	return s;
}

static hc_store *open_on(hc_pool *p, const char *opts)
{
	return open_with(p, opts, NULL);
}

/* Reserve n new keys, fill and commit them, and store them: the count stored.
 * The pages leave the pool either way, so a later get must read L3. */
static int put_n(hc_pool *p, hc_store *s, const hc_key_t *keys, unsigned n, int *status)
{
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = keys, .nkeys = n };
	hc_page_t pg[16];
	uint8_t skip[16];
	int r;

	ck_assert_uint_le(n, 16);
	ck_assert_int_eq(hc_reserve(p, &rq, pg, skip), (int)n);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(hct_fill_commit_all(p, pg[i]), 1);
	r = hc_store_put(s, pg, n, status);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(hc_evict_key(p, keys[i]), 1);
	return r;
}

/* Reserve n keys and get them: the hit count; hits are committed and dropped. */
static int get_n(const hc_key_t *keys, unsigned n, int *status)
{
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = keys, .nkeys = n };
	hc_page_t pg[16];
	uint8_t skip[16];
	uint32_t pres;
	int hits;

	ck_assert_uint_le(n, 16);
	ck_assert_int_eq(hc_reserve(pool, &rq, pg, skip), (int)n);
	hits = hc_store_get(st, pg, n, status);
	for (unsigned i = 0; i < n; i++) {
		if (status[i] == 0) {
			hc_page_presence(pool, pg[i], &pres);
			ck_assert_int_eq(hc_page_commit(pool, pg[i], hc_page_needed(pool, pres)), 1);
			ck_assert_int_eq(hc_evict_key(pool, keys[i]), 1);
		} else {
			ck_assert_int_eq(hc_page_abort(pool, &pg[i], 1), 1);
		}
	}
	return hits;
}

static uint64_t ctl_u64(const char *key)
{
	char out[32];

	ck_assert_int_gt(hc_store_ctl(st, key, NULL, out, sizeof(out)), 0);
	return strtoull(out, NULL, 10);
}

START_TEST(fail_at_and_every)
{
	hc_key_t k[6];
	int s[6];

	st = open_on(pool, "fail_get_at=3,fail_get_errno=110,fail_put_every=4");
	hct_keys(k, 6, 1);
	/* puts 4 fails (every 4th), with the default EIO */
	ck_assert_int_eq(put_n(pool, st, k, 6, s), 5);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(s[i], i == 3 ? -EIO : 0);
	/* the 3rd get, and only it, fails with the errno given */
	ck_assert_int_eq(get_n(k, 6, s), 4);
	for (int i = 0; i < 6; i++)
		ck_assert_msg(s[i] == (i == 2 ? -ETIMEDOUT : i == 3 ? -ENOENT : 0), "get %d: %d", i, s[i]);
	ck_assert_uint_eq(ctl_u64("gets"), 6);
	ck_assert_uint_eq(ctl_u64("puts"), 6);
	/* at run time: "+1" aims at the next get, with a transient errno */
	ck_assert_ok(hc_store_ctl(st, "fail_get_at", "+1", NULL, 0));
	ck_assert_uint_eq(ctl_u64("fail_get_at"), 7);
	ck_assert_ok(hc_store_ctl(st, "fail_get_errno", "11", NULL, 0));
	ck_assert_int_eq(get_n(k, 2, s), 1);
	ck_assert_int_eq(s[0], -EAGAIN);
	ck_assert_int_eq(s[1], 0);
	/* exists and delete have their own counts */
	ck_assert_ok(hc_store_ctl(st, "fail_exists_at", "2", NULL, 0));
	ck_assert_ok(hc_store_ctl(st, "fail_delete_at", "1", NULL, 0));
	ck_assert_ok(hc_store_ctl(st, "fail_delete_errno", "13", NULL, 0));
	ck_assert_int_eq(hc_store_exists(st, k, 3, s), 2);
	ck_assert_int_eq(s[1], -EIO);
	ck_assert_int_eq(hc_store_delete(st, k, 2, s), 1);
	ck_assert_int_eq(s[0], -EACCES);
	ck_assert_int_eq(s[1], 0);
	ck_assert_uint_eq(ctl_u64("exists"), 3);
	ck_assert_uint_eq(ctl_u64("deletes"), 2);
	/* a failed put stored nothing, a failed delete deleted nothing */
	ck_assert_int_eq(hc_store_exists(st, k, 4, s), 2);
	ck_assert_int_eq(s[0], 1);
	ck_assert_int_eq(s[1], 0);
	ck_assert_int_eq(s[3], 0);
}
END_TEST

START_TEST(corrupt_and_short)
{
	hc_key_t k[3];
	int s[3];

	st = open_on(pool, "corrupt_get_at=2,short_get_at=5");
	hct_keys(k, 3, 2);
	ck_assert_int_eq(put_n(pool, st, k, 3, s), 3);
	ck_assert_int_eq(get_n(k, 3, s), 2);
	ck_assert_int_eq(s[0], 0);
	ck_assert_int_eq(s[1], -EBADMSG); /* the library's checksum caught the flipped byte */
	ck_assert_int_eq(s[2], 0);
	ck_assert_uint_eq(hct_store_stat(st, "lib_corrupt"), 1);
	/* the 5th get: half the object, which the library's length check catches */
	ck_assert_int_eq(get_n(k, 3, s), 2);
	ck_assert_int_eq(s[1], -EBADMSG);
	ck_assert_uint_eq(hct_store_stat(st, "lib_corrupt"), 2);
	/* the objects themselves are whole */
	ck_assert_int_eq(get_n(k, 3, s), 3);
	ck_assert_uint_eq(hct_store_stat(st, "lib_corrupt"), 2);
}
END_TEST

/* Raw ABI: one op submitted; its completion reaped separately. */
struct raw {
	const struct hc_backend *be;
	void *inst;
};

static void raw_submit(struct raw *r, uint32_t opcode, uint8_t tag, uint64_t user_data, void *buf, size_t len)
{
	struct iovec iov = { buf, len };
	struct hc_be_op op = { .opcode = opcode, .user_data = user_data };

	if (buf) {
		op.iov = &iov;
		op.iovcnt = 1;
	}
	memset(op.name, tag, sizeof(op.name));
	ck_assert_int_eq(r->be->submit(r->inst, &op, 1), 1);
}

static void *reap_forever(void *arg)
{
	struct raw *r = arg;
	static struct hc_be_cqe c;

	return r->be->reap(r->inst, &c, 1, -1) == 1 ? &c : NULL;
}

START_TEST(hang_and_cancel)
{
	struct raw r;
	struct hc_be_cqe c;
	uint8_t buf[100] = { 7 }, back[100];
	struct hc_be_cqe *got;
	pthread_t t;
	double t0;

	st = open_on(pool, "hang_get_at=1,hang_put_at=2");
	hc__store_plugin(st, &r.be, &r.inst);
	raw_submit(&r, HC_BE_OP_PUT, 1, 10, buf, sizeof(buf)); /* put 1: stored */
	ck_assert_int_eq(r.be->reap(r.inst, &c, 1, 0), 1);
	ck_assert_int_eq(c.result, 0);
	/* get 1 hangs: reaps that wait return 0 after their timeout */
	raw_submit(&r, HC_BE_OP_GET, 1, 11, back, sizeof(back));
	ck_assert_int_eq(r.be->reap(r.inst, &c, 1, 0), 0);
	t0 = hct_now();
	ck_assert_int_eq(r.be->reap(r.inst, &c, 1, 50), 0);
	ck_assert(hct_now() - t0 >= 0.045);
	ck_assert_uint_eq(ctl_u64("inflight"), 1);
	/* other ops pass it */
	raw_submit(&r, HC_BE_OP_GET, 1, 12, back, sizeof(back));
	ck_assert_int_eq(r.be->reap(r.inst, &c, 1, 1000), 1);
	ck_assert_uint_eq(c.user_data, 12);
	ck_assert_int_eq(c.result, sizeof(buf));
	/* a reap without a limit waits for it until the cancel */
	ck_assert_int_eq(pthread_create(&t, NULL, reap_forever, &r), 0);
	usleep(20000);
	ck_assert_int_eq(r.be->cancel(r.inst, 99), -ENOENT);
	ck_assert_int_eq(r.be->cancel(r.inst, 11), 0);
	ck_assert_int_eq(pthread_join(t, (void **)&got), 0);
	ck_assert_ptr_nonnull(got);
	ck_assert_uint_eq(got->user_data, 11);
	ck_assert_int_eq(got->result, -ECANCELED);
	ck_assert_int_eq(r.be->cancel(r.inst, 11), -ENOENT); /* reaped: no longer in flight */
	/* put 2 hangs and, cancelled, stored nothing */
	raw_submit(&r, HC_BE_OP_PUT, 2, 13, buf, sizeof(buf));
	ck_assert_int_eq(r.be->cancel(r.inst, 13), 0);
	ck_assert_int_eq(r.be->reap(r.inst, &c, 1, 0), 1);
	ck_assert_int_eq(c.result, -ECANCELED);
	raw_submit(&r, HC_BE_OP_EXISTS, 2, 14, NULL, 0);
	ck_assert_int_eq(r.be->reap(r.inst, &c, 1, 0), 1);
	ck_assert_int_eq(c.result, 0);
	ck_assert_uint_eq(ctl_u64("cancels"), 2);
	ck_assert_uint_eq(ctl_u64("inflight"), 0);
	ck_assert_uint_eq(hct_store_stat(st, "errors"), 2);
}
END_TEST

/* An instance closed with a hung op in flight drops it cleanly. */
START_TEST(close_while_hung)
{
	const struct hc_backend *be;
	void *inst, *raw_inst;
	struct hc_be_option opt[2] = { { "dir", hct_l3_dir }, { "hang_exists_at", "1" } };
	struct raw r;
	char err[256] = "";

	st = open_on(pool, "");
	hc__store_plugin(st, &be, &inst);
	ck_assert_int_eq(be->open(opt, 2, &raw_inst, err, sizeof(err)), 0);
	r = (struct raw){ be, raw_inst };
	raw_submit(&r, HC_BE_OP_EXISTS, 3, 1, NULL, 0);
	be->close(raw_inst);
}
END_TEST

START_TEST(delay)
{
	struct raw r;
	struct hc_be_cqe c;
	hc_key_t k[1];
	int s[1];
	double t0;

	st = open_on(pool, "delay_us=200000");
	hct_keys(k, 1, 3);
	t0 = hct_now();
	ck_assert_int_eq(hc_store_exists(st, k, 1, s), 0);
	ck_assert_msg(hct_now() - t0 >= 0.2, "an exists took %.3f s", hct_now() - t0);
	/* raw: not reapable before its time, then reap waits for it */
	hc__store_plugin(st, &r.be, &r.inst);
	ck_assert_ok(hc_store_ctl(st, "delay_us", "100000", NULL, 0));
	t0 = hct_now();
	raw_submit(&r, HC_BE_OP_EXISTS, 4, 20, NULL, 0);
	ck_assert_int_eq(r.be->reap(r.inst, &c, 1, 0), 0);
	ck_assert_int_eq(r.be->reap(r.inst, &c, 1, -1), 1);
	ck_assert_msg(hct_now() - t0 >= 0.1, "reaped after %.3f s", hct_now() - t0);
	ck_assert_int_eq(c.result, 0);
	/* a cancel cuts a delay short (a 30 s one would outlast the tcase) */
	ck_assert_ok(hc_store_ctl(st, "delay_us", "30000000", NULL, 0));
	raw_submit(&r, HC_BE_OP_EXISTS, 4, 21, NULL, 0);
	ck_assert_int_eq(r.be->cancel(r.inst, 21), 0);
	ck_assert_int_eq(r.be->reap(r.inst, &c, 1, -1), 1);
	ck_assert_int_eq(c.result, 0); /* done in submit: it keeps its own result */
}
END_TEST

static void put_and_die(hc_pool *p, void *arg)
{
	hc_key_t *k = arg;
	hc_store *s = open_on(p, "");
	int status[8];

	if (put_n(p, s, k, 8, status) == 8)
		raise(SIGKILL); /* no close, no detach */
	_exit(1);
}

START_TEST(survives_kill)
{
	hc_key_t k[8];
	int s[8], wst;
	char tmp[128];
	pid_t dead = fork();

	ck_assert_int_ge(dead, 0);
	if (dead == 0)
		_exit(0);
	waitpid(dead, &wst, 0);
	/* a temp file of a dead writer, swept at open */
	snprintf(tmp, sizeof(tmp), "%s/.tmp.%d.0", hct_l3_dir, (int)dead);
	close(open(tmp, O_CREAT | O_WRONLY, 0644));
	hct_keys(k, 8, 4);
	wst = hct_in_child(pool_name, put_and_die, k);
	ck_assert_msg(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL, "child: status 0x%x", wst);
	st = open_on(pool, "");
	ck_assert_int_eq(access(tmp, F_OK), -1);
	ck_assert_uint_eq(hct_store_stat(st, "objects"), 8);
	ck_assert_int_eq(hc_store_exists(st, k, 8, s), 8);
	ck_assert_int_eq(get_n(k, 8, s), 8);
}
END_TEST

START_TEST(ctl_keys)
{
	char out[32], spec[128];
	hc_store *bad = NULL;
	static const char *const counters[] = { "gets", "puts", "exists", "deletes", "cancels", "inflight" };

	st = open_on(pool, "fail_put_errno=28,delay_us=5");
	for (unsigned i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
		ck_assert_int_eq(hc_store_ctl(st, counters[i], NULL, out, sizeof(out)), 1);
		ck_assert_str_eq(out, "0");
		ck_assert_err(hc_store_ctl(st, counters[i], "1", NULL, 0), EINVAL); /* read-only */
	}
	ck_assert_uint_eq(ctl_u64("fail_put_errno"), 28);
	ck_assert_uint_eq(ctl_u64("fail_get_errno"), EIO);
	ck_assert_uint_eq(ctl_u64("delay_us"), 5);
	ck_assert_uint_eq(ctl_u64("hang_delete_at"), 0);
	ck_assert_err(hc_store_ctl(st, "fail_get_errno", "0", NULL, 0), EINVAL);
	ck_assert_err(hc_store_ctl(st, "fail_get_errno", "4096", NULL, 0), EINVAL);
	ck_assert_err(hc_store_ctl(st, "fail_get_every", "+1", NULL, 0), EINVAL); /* not an op number */
	ck_assert_err(hc_store_ctl(st, "fail_get_at", "-1", NULL, 0), EINVAL);
	ck_assert_err(hc_store_ctl(st, "fail_get_at", "3x", NULL, 0), EINVAL);
	ck_assert_err(hc_store_ctl(st, "fail_post_at", "1", NULL, 0), ENOENT);
	ck_assert_err(hc_store_ctl(st, "dir", NULL, out, sizeof(out)), ENOENT);
	ck_assert_ok(hc_store_ctl(st, "short_get_at", "123456", NULL, 0));
	ck_assert_err(hc_store_ctl(st, "short_get_at", NULL, out, 4), ERANGE);
	/* open refuses what ctl refuses, naming it, and a missing or bad dir */
	ck_assert_err(hc_store_open(pool, "fault", NULL, &bad), EINVAL);
	ck_assert_msg_has("dir=PATH");
	snprintf(spec, sizeof(spec), "fault:dir=%s,hang_get_at=soon", hct_l3_dir);
	ck_assert_err(hc_store_open(pool, spec, NULL, &bad), EINVAL);
	ck_assert_msg_has("hang_get_at=soon");
	snprintf(spec, sizeof(spec), "fault:dir=%s,fail_gets_at=1", hct_l3_dir);
	ck_assert_err(hc_store_open(pool, spec, NULL, &bad), EINVAL);
	ck_assert_msg_has("unknown option 'fail_gets_at'");
	snprintf(spec, sizeof(spec), "fault:dir=%s/none", hct_l3_dir);
	ck_assert_err(hc_store_open(pool, spec, NULL, &bad), ENOENT);
	snprintf(spec, sizeof(spec), "%s/file", hct_l3_dir);
	close(open(spec, O_CREAT | O_WRONLY, 0644));
	snprintf(spec, sizeof(spec), "fault:dir=%s/file", hct_l3_dir);
	ck_assert_err(hc_store_open(pool, spec, NULL, &bad), ENOTDIR);
	ck_assert_ptr_null(bad);
}
END_TEST

/* The library retries transient failures with backoff; others, and the
 * last try, come back as they are. */
START_TEST(retries)
{
	struct hc_store_opts so = { .size = sizeof(struct hc_store_opts), .retries = 2 };
	hc_key_t k[4];
	int s[4];

	st = open_with(pool, "fail_get_at=2,fail_get_errno=11", &so);
	hct_keys(k, 4, 21);
	ck_assert_int_eq(put_n(pool, st, k, 4, s), 4);
	ck_assert_int_eq(get_n(k, 4, s), 4); /* the EAGAIN of get 2 was tried again */
	ck_assert_uint_eq(hct_store_stat(st, "lib_retries"), 1);
	ck_assert_uint_eq(ctl_u64("gets"), 5);
	/* always EAGAIN: three tries, then the error */
	ck_assert_ok(hc_store_ctl(st, "fail_get_every", "1", NULL, 0));
	ck_assert_int_eq(get_n(k, 1, s), 0);
	ck_assert_int_eq(s[0], -EAGAIN);
	ck_assert_uint_eq(hct_store_stat(st, "lib_retries"), 3);
	/* EIO is no transient failure: one try */
	ck_assert_ok(hc_store_ctl(st, "fail_get_errno", "5", NULL, 0));
	ck_assert_int_eq(get_n(k, 1, s), 0);
	ck_assert_int_eq(s[0], -EIO);
	ck_assert_uint_eq(hct_store_stat(st, "lib_retries"), 3);
}
END_TEST

/* An op past its deadline is cancelled; the call returns, the page is the
 * caller's again. */
START_TEST(timeout_cancels)
{
	struct hc_store_opts so = { .size = sizeof(struct hc_store_opts), .timeout_ms = 100, .retries = -1 };
	hc_key_t k[3];
	int s[3];
	double t0;

	st = open_with(pool, "", &so);
	hct_keys(k, 3, 22);
	ck_assert_int_eq(put_n(pool, st, k, 3, s), 3);
	ck_assert_ok(hc_store_ctl(st, "hang_get_at", "+2", NULL, 0));
	t0 = hct_now();
	ck_assert_int_eq(get_n(k, 3, s), 2); /* get_n aborts the timed-out page: it is ours */
	ck_assert_int_eq(s[1], -ETIMEDOUT);
	ck_assert(hct_now() - t0 >= 0.09);
	ck_assert(hct_now() - t0 < 5.0);
	ck_assert_uint_eq(hct_store_stat(st, "lib_timeouts"), 1);
	ck_assert_uint_eq(hct_store_stat(st, "lib_orphans"), 0);
	ck_assert_uint_eq(ctl_u64("cancels"), 1);
	ck_assert_uint_eq(ctl_u64("inflight"), 0);
}
END_TEST

/* A backend that cannot stop a hung op: the call gives it up (-ETIME), the
 * store keeps its page reserved until the backend completes it at last. */
START_TEST(orphan_until_reaped)
{
	struct hc_store_opts so = { .size = sizeof(struct hc_store_opts), .timeout_ms = 100, .retries = -1 };
	struct hc_reserve_req rq;
	hc_key_t k[2];
	hc_page_t pg[2];
	uint8_t skip[2];
	uint32_t pres;
	int s[2];
	hc_page_t h;

	st = open_with(pool, "deaf_cancel=1", &so);
	hct_keys(k, 2, 23);
	ck_assert_int_eq(put_n(pool, st, k, 2, s), 2);
	ck_assert_ok(hc_store_ctl(st, "hang_get_at", "+1", NULL, 0));
	rq = (struct hc_reserve_req){ .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 2 };
	ck_assert_int_eq(hc_reserve(pool, &rq, pg, skip), 2);
	ck_assert_int_eq(hc_store_get(st, pg, 2, s), 1);
	ck_assert_int_eq(s[0], -ETIME);
	ck_assert_msg_has("stays out of use");
	ck_assert_int_eq(s[1], 0);
	hc_page_presence(pool, pg[1], &pres);
	ck_assert_int_eq(hc_page_commit(pool, pg[1], hc_page_needed(pool, pres)), 1);
	ck_assert_uint_eq(hct_store_stat(st, "lib_orphans"), 1);
	ck_assert_uint_eq(hc__store_orphans(st), 1);
	/* the page is still reserved: nobody reuses what the backend may write */
	ck_assert_int_eq(hc_page_state(pool, HC_PAGE_ID(pg[0]), &h, NULL, NULL), HC_PAGE_RESERVED);
	hc__store_poll(st);
	ck_assert_uint_eq(hc__store_orphans(st), 1);
	/* the backend lets go: the next poll settles it, and the page is freed */
	ck_assert_ok(hc_store_ctl(st, "release", "1", NULL, 0));
	for (int i = 0; i < 100 && hc__store_orphans(st); i++) {
		hc__store_poll(st);
		usleep(1000);
	}
	ck_assert_uint_eq(hc__store_orphans(st), 0);
	ck_assert_uint_eq(hct_store_stat(st, "lib_late"), 1);
	ck_assert_int_ne(hc_page_state(pool, HC_PAGE_ID(pg[0]), &h, NULL, NULL), HC_PAGE_RESERVED);
	ck_assert_int_eq(hct_hit(pool, k, 2), 0); /* key 0 is not READY, so no prefix */
	ck_assert_int_eq(hc_pool_check(pool, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
}
END_TEST

/* Closed while an op is given up on and never let go: close refuses
 * rather than free what the backend may still write. */
START_TEST(close_with_orphan)
{
	struct hc_store_opts so = { .size = sizeof(struct hc_store_opts), .timeout_ms = 50, .retries = -1 };
	hc_key_t k[1];
	int s[1];

	st = open_with(pool, "deaf_cancel=1", &so);
	hct_keys(k, 1, 24);
	ck_assert_ok(hc_store_ctl(st, "hang_exists_at", "+1", NULL, 0));
	ck_assert_int_eq(hc_store_exists(st, k, 1, s), 0);
	ck_assert_int_eq(s[0], -ETIME);
	ck_assert_err(hc_store_close(st), EBUSY);
	ck_assert_msg_has("still holds 1");
	/* it lets go after all: now close works */
	ck_assert_ok(hc_store_ctl(st, "release", "1", NULL, 0));
	ck_assert_ok(hc_store_close(st));
	st = NULL;
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fault_backend");
	TCase *tc = tcase_create("knobs");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, fail_at_and_every);
	tcase_add_test(tc, corrupt_and_short);
	tcase_add_test(tc, hang_and_cancel);
	tcase_add_test(tc, close_while_hung);
	tcase_add_test(tc, delay);
	tcase_add_test(tc, survives_kill);
	tcase_add_test(tc, ctl_keys);
	tcase_add_test(tc, retries);
	tcase_add_test(tc, timeout_cancels);
	tcase_add_test(tc, orphan_until_reaped);
	tcase_add_test(tc, close_with_orphan);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
