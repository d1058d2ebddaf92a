/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common.h - what the plugins of this tree do the same way, as static
 * inline functions (a plugin links nothing of hicache; this is plugin-side
 * code, like backend.h's declarations): one log line through the host, an
 * error line into open's err, and a reap's deadline.  Each plugin keeps
 * its own host pointer and wraps these in its hc__<name>_log/_fail.
 */
#ifndef HC_BACKENDS_COMMON_H
#define HC_BACKENDS_COMMON_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include <hicache/backend.h>

/* One line to the host's log (none before entry() was given a host). */
static inline void hc_be_vlog(const struct hc_backend_host *host, int level, const char *fmt, va_list ap)
{
	char line[512];

	if (!host || !host->log)
		return;
	vsnprintf(line, sizeof(line), fmt, ap);
	host->log(host, level, "%s", line);
}

/* The line into err (when there is room for one), and -errnum. */
static inline int hc_be_vfail(char *err, size_t errlen, int errnum, const char *fmt, va_list ap)
{
	if (err && errlen)
		vsnprintf(err, errlen, fmt, ap);
	return errnum > 0 ? -errnum : -EINVAL;
}

static inline void hc_be_log(const struct hc_backend_host *host, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static inline void hc_be_log(const struct hc_backend_host *host, int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	hc_be_vlog(host, level, fmt, ap);
	va_end(ap);
}

/* A warning, at most once per cause (a bit of *warned) for the instance. */
static inline void hc_be_warn_once(const struct hc_backend_host *host, _Atomic unsigned *warned, unsigned cause,
				   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static inline void hc_be_warn_once(const struct hc_backend_host *host, _Atomic unsigned *warned, unsigned cause,
				   const char *fmt, ...)
{
	va_list ap;

	if (atomic_fetch_or(warned, cause) & cause)
		return;
	va_start(ap, fmt);
	hc_be_vlog(host, HC_BE_LOG_WARN, fmt, ap);
	va_end(ap);
}

static inline int hc_be_fail(char *err, size_t errlen, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static inline int hc_be_fail(char *err, size_t errlen, int errnum, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = hc_be_vfail(err, errlen, errnum, fmt, ap);
	va_end(ap);
	return ret;
}

/* The total length of a GET's or PUT's iovecs, or -EINVAL (none, too
 * many, a NULL buffer of some length, or a total past INT64_MAX). */
static inline int64_t hc_be_iov_bytes(const struct hc_be_op *op)
{
	uint64_t total = 0;

	if (op->iovcnt == 0 || op->iovcnt > HC_BE_IOV_MAX || !op->iov)
		return -EINVAL;
	for (unsigned v = 0; v < op->iovcnt; v++) {
		if (!op->iov[v].iov_base && op->iov[v].iov_len)
			return -EINVAL;
		if (op->iov[v].iov_len > (uint64_t)INT64_MAX - total)
			return -EINVAL;
		total += op->iov[v].iov_len;
	}
	return (int64_t)total;
}

/* An op's opcode and iovecs: the bytes its iovecs hold, or -EINVAL (the
 * ABI's rule: such an op completes with -EINVAL). */
static inline int64_t hc_be_iov_check(const struct hc_be_op *op)
{
	int64_t total;

	if (op->opcode != HC_BE_OP_GET && op->opcode != HC_BE_OP_PUT)
		return op->opcode == HC_BE_OP_EXISTS || op->opcode == HC_BE_OP_DELETE ? (op->iovcnt ? -EINVAL : 0)
										      : -EINVAL;
	total = hc_be_iov_bytes(op);
	if (op->opcode == HC_BE_OP_PUT && total == 0)
		return -EINVAL;
	return total;
}

/* A ctl read's value into out: its length, or -ERANGE if it does not fit. */
static inline int hc_be_ctl_out(char *out, size_t outlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int hc_be_ctl_out(char *out, size_t outlen, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!out || !outlen)
		return -EINVAL;
	va_start(ap, fmt);
	n = vsnprintf(out, outlen, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	return (size_t)n < outlen ? n : -ERANGE;
}

/* CLOCK_MONOTONIC now + ms (> 0), for pthread_cond_timedwait on a
 * condition variable set to that clock. */
static inline struct timespec hc_be_deadline(int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

#endif
