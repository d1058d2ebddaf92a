/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_devreg.c - the chunked, multi-threaded registration that pins a
 * pool for CUDA (lib/device/reg.c), with fake register functions: every chunk once,
 * the threads really overlap, and a failure anywhere undoes exactly what
 * was registered.
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "../lib/device/internal.h"
#include "hct.h"

#define NCH 64

struct fake {
	pthread_mutex_t mu;
	uint8_t *base;
	uint64_t chunk;
	int regs[NCH], unregs[NCH];
	uint64_t lens[NCH];
	int inside, max_inside;
	int fail_at; /* chunk that fails, or -1 */
	unsigned sleep_us;
};

static int fake_reg(void *arg, void *p, uint64_t n)
{
	struct fake *f = arg;
	uint64_t i = (uint64_t)((uint8_t *)p - f->base) / f->chunk;

	pthread_mutex_lock(&f->mu);
	ck_assert_uint_lt(i, NCH);
	f->regs[i]++;
	f->lens[i] = n;
	if (++f->inside > f->max_inside)
		f->max_inside = f->inside;
	pthread_mutex_unlock(&f->mu);
	usleep(f->sleep_us);
	pthread_mutex_lock(&f->mu);
	f->inside--;
	pthread_mutex_unlock(&f->mu);
	if ((int)i == f->fail_at)
		return hc__err(EIO, "fake: chunk %d refused", (int)i);
	return 0;
}

static void fake_unreg(void *arg, void *p, uint64_t n)
{
	struct fake *f = arg;
	uint64_t i = (uint64_t)((uint8_t *)p - f->base) / f->chunk;

	(void)n;
	pthread_mutex_lock(&f->mu);
	f->unregs[i]++;
	pthread_mutex_unlock(&f->mu);
}

static void setup(struct fake *f, struct hc__reg_job *j, uint64_t chunk, uint64_t len, unsigned threads)
{
	static uint8_t arena[1]; /* an address only: the fakes never touch the bytes */

	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->mu, NULL);
	f->base = arena;
	f->chunk = chunk;
	f->fail_at = -1;
	f->sleep_us = 20000;
	*j = (struct hc__reg_job){ .base = f->base,
				   .len = len,
				   .chunk = chunk,
				   .threads = threads,
				   .reg = fake_reg,
				   .unreg = fake_unreg,
				   .arg = f };
}

START_TEST(every_chunk_once_in_parallel)
{
	struct fake f;
	struct hc__reg_job j;
	struct hc_dev_stats st = { 0 };

	setup(&f, &j, 2 << 20, 10 * (2 << 20) + 4096, 4); /* 10 chunks and a short one */
	ck_assert_ok(hc__reg_parallel(&j, &st));
	for (int i = 0; i < NCH; i++) {
		ck_assert_int_eq(f.regs[i], i <= 10);
		ck_assert_int_eq(f.unregs[i], 0);
		if (i <= 10)
			ck_assert_uint_eq(f.lens[i], i < 10 ? 2u << 20 : 4096);
	}
	ck_assert_uint_eq(st.reg_chunks, 11);
	ck_assert_uint_eq(st.reg_threads, 4);
	ck_assert_uint_eq(st.reg_bytes, j.len);
	ck_assert_uint_ge(st.reg_ns, 20000000); /* at least one chunk's sleep */
	ck_assert_int_ge(f.max_inside, 2);      /* the threads overlapped */
	hc__unreg_parallel(&j);
	for (int i = 0; i <= 10; i++)
		ck_assert_int_eq(f.unregs[i], 1);
	ck_assert_int_eq(f.unregs[11], 0);
}
END_TEST

START_TEST(a_failure_undoes_the_rest)
{
	struct fake f;
	struct hc__reg_job j;
	struct hc_dev_stats st = { 0 };

	setup(&f, &j, 4096, 40 * 4096, 3);
	f.fail_at = 5;
	f.sleep_us = 1000;
	ck_assert_err(hc__reg_parallel(&j, &st), EIO);
	ck_assert_msg_has("fake: chunk 5 refused"); /* another thread's line, carried over */
	for (int i = 0; i < 40; i++) {
		/* each registered chunk undone once, and nothing else; chunk 5 never counted */
		ck_assert_int_le(f.regs[i], 1);
		ck_assert_int_eq(f.unregs[i], i == 5 ? 0 : f.regs[i]);
	}
	ck_assert_int_eq(f.regs[5], 1);
	ck_assert_uint_eq(st.reg_chunks, 0); /* no figures for a failure */
}
END_TEST

START_TEST(more_threads_than_chunks)
{
	struct fake f;
	struct hc__reg_job j;
	struct hc_dev_stats st = { 0 };

	setup(&f, &j, 1 << 20, 2 << 20, 16);
	f.sleep_us = 0;
	ck_assert_ok(hc__reg_parallel(&j, &st));
	ck_assert_uint_eq(st.reg_threads, 2);
	ck_assert_int_eq(f.regs[0] + f.regs[1], 2);
	j.threads = 0; /* one thread, the caller's */
	ck_assert_ok(hc__reg_parallel(&j, &st));
	ck_assert_uint_eq(st.reg_threads, 1);
	j.len = 0;
	ck_assert_err(hc__reg_parallel(&j, &st), EINVAL);
	j.len = 4096;
	j.chunk = 0;
	ck_assert_err(hc__reg_parallel(&j, &st), EINVAL);
	ck_assert_msg_has("chunk size");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("devreg");
	TCase *tc = tcase_create("devreg");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, every_chunk_once_in_parallel);
	tcase_add_test(tc, a_failure_undoes_the_rest);
	tcase_add_test(tc, more_threads_than_chunks);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
