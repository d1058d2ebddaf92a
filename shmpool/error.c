/* SPDX-License-Identifier: Apache-2.0 */
/* error.c - the calling thread's last error line, and the log sink. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pool.h"

static __thread char last_error[512];
static hc_log_fn log_fn;
static void *log_arg;

const char *hc_last_error(void)
{
	return last_error[0] ? last_error : "no error";
}

/* Record a message for hc_last_error() and return -err, for 'return hc__err(...)'. */
int hc__err(int err, const char *fmt, ...)
{
	char buf[sizeof(last_error)];
	va_list ap;

	/* Format aside: callers may pass hc_last_error() itself as an argument. */
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	memcpy(last_error, buf, sizeof(buf));
	return -err;
}

void hc_set_log(hc_log_fn fn, void *arg)
{
	log_fn = fn;
	log_arg = arg;
}

void hc__log(int level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (log_fn) {
		log_fn(level, msg, log_arg);
		return;
	}
	if (level <= HC_LOG_WARN)
		fprintf(stderr, "hicache: %s: %s\n", level <= HC_LOG_ERR ? "error" : "warning", msg);
}
