/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench.h - helpers shared by the benchmarks under bench/: a monotonic
 * clock, medians, a start barrier for forked workers, paths to remove on
 * the way out, and table printing.  Header-only: each benchmark is one
 * translation unit, so the static state below exists once per program.
 *
 * Benchmarks compare against a peer measured in the same run (doc/design.md,
 * "Measuring"): every figure is printed next to its peer and their ratio.
 */
#ifndef HC_BENCH_BENCH_H
#define HC_BENCH_BENCH_H

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- time */

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median of v[0..n); sorts v in place.  0 for n == 0. */
static inline double bench_median(double *v, unsigned n)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- pipes: whole reads and writes, for reports from forked workers */

static inline int bench_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* 0, or -EPIPE if the writer went away before 'len' bytes came. */
static inline int bench_read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * A start barrier for forked workers: each worker says it is ready on
 * ready[1], then blocks on go[0]; the parent waits for every ready byte and
 * then closes go[1], which releases all of them at once (EOF).  Pipes rather
 * than a futex, so a worker that dies before the start cannot hang the
 * parent: its ready byte never comes and the read sees EOF.
 */
struct bench_barrier {
	int ready[2];
	int go[2];
};

static inline int bench_barrier_init(struct bench_barrier *b)
{
	if (pipe(b->ready) < 0)
		return -errno;
	if (pipe(b->go) < 0) {
		int err = errno;
		close(b->ready[0]);
		close(b->ready[1]);
		return -err;
	}
	return 0;
}

/* In a worker, right after fork. */
static inline void bench_barrier_child(struct bench_barrier *b)
{
	close(b->ready[0]);
	close(b->go[1]);
}

/* In a worker: say ready, wait for the start.  0, or -EPIPE if the parent left. */
static inline int bench_barrier_wait(struct bench_barrier *b)
{
	char c = 'r';

	if (bench_write_all(b->ready[1], &c, 1) < 0)
		return -EPIPE;
	close(b->ready[1]);
	/* EOF on go[0] is the start signal. */
	while (read(b->go[0], &c, 1) < 0 && errno == EINTR)
		;
	close(b->go[0]);
	return 0;
}

/* In the parent, after forking n workers: wait until all are ready, then start them. */
static inline int bench_barrier_release(struct bench_barrier *b, unsigned n)
{
	int ret = 0;

	close(b->ready[1]);
	close(b->go[0]);
	for (unsigned i = 0; i < n && ret == 0; i++) {
		char c;
		ret = bench_read_all(b->ready[0], &c, 1);
	}
	close(b->ready[0]);
	close(b->go[1]);
	return ret;
}

/* ---- files to remove on exit, also on SIGINT/SIGTERM */

#define BENCH_MAX_CLEANUP 8

static char bench_cleanup_paths[BENCH_MAX_CLEANUP][512];
static pid_t bench_cleanup_owner;

static inline void bench_cleanup_run(void)
{
	/* Forked workers inherit the list; only the process that made it cleans. */
	if (getpid() != bench_cleanup_owner)
		return;
	for (int i = 0; i < BENCH_MAX_CLEANUP; i++)
		if (bench_cleanup_paths[i][0]) {
			unlink(bench_cleanup_paths[i]);
			bench_cleanup_paths[i][0] = 0;
		}
}

static inline void bench_cleanup_signal(int sig)
{
	bench_cleanup_run();
	signal(sig, SIG_DFL);
	raise(sig);
}

static inline void bench_cleanup_init(void)
{
	bench_cleanup_owner = getpid();
	atexit(bench_cleanup_run);
	signal(SIGINT, bench_cleanup_signal);
	signal(SIGTERM, bench_cleanup_signal);
}

/* Register 'path' for removal; returns its slot for bench_cleanup_forget, or -1. */
static inline int bench_cleanup_add(const char *path)
{
	size_t n = strlen(path);

	if (n >= sizeof(bench_cleanup_paths[0]))
		return -1;
	for (int i = 0; i < BENCH_MAX_CLEANUP; i++)
		if (!bench_cleanup_paths[i][0]) {
			memcpy(bench_cleanup_paths[i], path, n + 1);
			return i;
		}
	return -1;
}

/* The path is gone (or will be removed another way): drop it from the list. */
static inline void bench_cleanup_forget(int slot)
{
	if (slot >= 0 && slot < BENCH_MAX_CLEANUP)
		bench_cleanup_paths[slot][0] = 0;
}

/* ---- tables */

/* A rule as wide as the table: '-' repeated 'width' times. */
static inline void bench_rule(int width)
{
	for (int i = 0; i < width; i++)
		putchar('-');
	putchar('\n');
}

/*
 * One row: columns separated by " | ", each padded to its width, text
 * columns left-aligned and the rest right-aligned (negative width: left).
 */
static inline void bench_row(int ncol, const int *widths, ...)
{
	va_list ap;

	va_start(ap, widths);
	for (int i = 0; i < ncol; i++) {
		const char *cell = va_arg(ap, const char *);
		printf("%s%*s", i ? " | " : "", widths[i], cell);
	}
	va_end(ap);
	putchar('\n');
}

static inline int bench_table_width(int ncol, const int *widths)
{
	int w = 3 * (ncol - 1);

	for (int i = 0; i < ncol; i++)
		w += abs(widths[i]);
	return w;
}

/* Format into one of 16 rotating static buffers, for table cells. */
static inline const char *bench_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline const char *bench_fmt(const char *fmt, ...)
{
	static char bufs[16][64];
	static unsigned next;
	char *b = bufs[next++ % 16];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(b, sizeof(bufs[0]), fmt, ap);
	va_end(ap);
	return b;
}

/*
 * Worker i runs on the i-th CPU it may use.  Two workers left to share one
 * CPU would measure the scheduler: a ck_ring producer preempted between
 * its two steps makes the other spin for the rest of its time slice.
 */
static inline void bench_pin_cpu(unsigned i)
{
	cpu_set_t set, one;
	unsigned seen = 0;

	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &set) || seen++ != i)
			continue;
		CPU_ZERO(&one);
		CPU_SET(c, &one);
		sched_setaffinity(0, sizeof(one), &one);
		return;
	}
}

#endif /* HC_BENCH_BENCH_H */
