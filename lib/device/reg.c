/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reg.c - registering a large range in chunks from several threads
 * (internal.h).  Pinning is page by page in the kernel, so one thread pinning
 * hundreds of GiB takes minutes; chunks taken from a shared counter by a
 * few threads take a fraction of that.  Whoever registers (CUDA's
 * cudaHostRegister) gives the two functions; the tests give fakes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../shmpool/pool.h"
#include "internal.h"

struct reg_run {
	const struct hc__reg_job *j;
	uint64_t nchunks;
	_Atomic uint64_t next;
	_Atomic int failed;
	int undo;           /* 1: call unreg on every chunk */
	uint8_t *done;      /* [nchunks]: registered; each written by the thread that took it */
	pthread_mutex_t mu; /* guards err and msg */
	int err;
	char msg[256];
};

static void *reg_thread(void *arg)
{
	struct reg_run *r = arg;
	const struct hc__reg_job *j = r->j;

	for (;;) {
		uint64_t i = atomic_fetch_add(&r->next, 1), off;
		uint64_t n;
		int e;

		if (i >= r->nchunks || (!r->undo && atomic_load(&r->failed)))
			break;
		off = i * j->chunk;
		n = j->len - off < j->chunk ? j->len - off : j->chunk;
		if (r->undo) {
			j->unreg(j->arg, j->base + off, n);
			continue;
		}
		e = j->reg(j->arg, j->base + off, n);
		if (e == 0) {
			r->done[i] = 1;
			continue;
		}
		pthread_mutex_lock(&r->mu);
		if (!r->err) {
			r->err = e;
			snprintf(r->msg, sizeof(r->msg), "%s", hc_last_error()); /* this thread's line */
		}
		pthread_mutex_unlock(&r->mu);
		atomic_store(&r->failed, 1);
	}
	return NULL;
}

/* Run the chunks on up to j->threads threads (the caller's is one of them). */
static unsigned run_threads(struct reg_run *r)
{
	unsigned nt = r->j->threads ? r->j->threads : 1, started = 0;
	pthread_t t[64];

	if (nt > 64)
		nt = 64;
	if (nt > r->nchunks)
		nt = (unsigned)r->nchunks;
	for (unsigned i = 1; i < nt; i++)
		if (pthread_create(&t[started], NULL, reg_thread, r) == 0)
			started++; /* fewer threads is slower, not wrong */
	reg_thread(r);
	for (unsigned i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	return started + 1;
}

int hc__reg_parallel(const struct hc__reg_job *j, struct hc_dev_stats *st)
{
	struct reg_run r = { .j = j };
	struct timespec t0, t1;
	unsigned used;

	if (!j->len || !j->chunk)
		return hc__err(EINVAL, "registration: %s is 0", j->len ? "the chunk size" : "the length");
	r.nchunks = (j->len + j->chunk - 1) / j->chunk;
	r.done = calloc(r.nchunks, 1);
	if (!r.done)
		return hc__err(ENOMEM, "registration: no memory for %llu chunks", (unsigned long long)r.nchunks);
	pthread_mutex_init(&r.mu, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	used = run_threads(&r);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (r.err) {
		/* All or nothing: undo what the other threads registered. */
		for (uint64_t i = 0; i < r.nchunks; i++)
			if (r.done[i]) {
				uint64_t off = i * j->chunk;
				j->unreg(j->arg, j->base + off, j->len - off < j->chunk ? j->len - off : j->chunk);
			}
	} else if (st) {
		st->reg_ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)(t1.tv_nsec - t0.tv_nsec);
		st->reg_bytes = j->len;
		st->reg_chunks = (uint32_t)r.nchunks;
		st->reg_threads = used;
	}
	pthread_mutex_destroy(&r.mu);
	free(r.done);
	if (r.err)
		return hc__err(-r.err, "%s", r.msg);
	return 0;
}

void hc__unreg_parallel(const struct hc__reg_job *j)
{
	struct reg_run r = { .j = j, .undo = 1 };

	if (!j->len || !j->chunk)
		return;
	r.nchunks = (j->len + j->chunk - 1) / j->chunk;
	pthread_mutex_init(&r.mu, NULL);
	run_threads(&r);
	pthread_mutex_destroy(&r.mu);
}
