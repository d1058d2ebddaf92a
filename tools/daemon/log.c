/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c - the daemon's log: one line per message, with a
 * timestamp and a level, written with one write(2) so lines from the
 * service thread and main never interleave, on stderr or appended to a
 * file.  SIGHUP reopens the file under the same name, so logrotate can
 * move it away and the next line lands in a new one.
 *
 * Notes on synchronization: mu guards fd and path; the level never
 * changes after hcd_log_open.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "hicached.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = STDERR_FILENO;
static char *log_path; /* NULL: stderr */
static int log_level = HC_LOG_INFO;

static const char *level_name(int level)
{
	return level <= HC_LOG_ERR    ? "error"
	       : level <= HC_LOG_WARN ? "warning"
	       : level <= HC_LOG_INFO ? "info"
				      : "debug";
}

static int open_file(const char *path)
{
	/* O_APPEND: each line is one atomic append, even if two writers share the file */
	return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
}

int hcd_log_open(const char *file, int level)
{
	int fd;

	log_level = level;
	if (!file)
		return 0;
	fd = open_file(file);
	if (fd < 0)
		return -errno;
	log_path = strdup(file);
	if (!log_path) {
		close(fd);
		return -ENOMEM;
	}
	pthread_mutex_lock(&mu);
	log_fd = fd;
	pthread_mutex_unlock(&mu);
	return 0;
}

int hcd_log_reopen(void)
{
	int fd, old;

	if (!log_path)
		return 0; /* stderr belongs to whoever started us */
	fd = open_file(log_path);
	if (fd < 0)
		return -errno; /* keep writing to the old file rather than nowhere */
	pthread_mutex_lock(&mu);
	old = log_fd;
	log_fd = fd;
	pthread_mutex_unlock(&mu);
	close(old);
	return 0;
}

void hcd_log_close(void)
{
	pthread_mutex_lock(&mu);
	if (log_path)
		close(log_fd);
	log_fd = STDERR_FILENO;
	pthread_mutex_unlock(&mu);
	free(log_path);
	log_path = NULL;
}

/* "2026-05-01T12:00:00.123+0000 info: msg\n" */
static void emit(int level, const char *msg)
{
	char line[1024], stamp[40];
	struct timeval tv;
	struct tm tm;
	size_t n;
	int len;

	gettimeofday(&tv, NULL);
	if (!localtime_r(&tv.tv_sec, &tm) || !strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm))
		snprintf(stamp, sizeof(stamp), "%lld", (long long)tv.tv_sec);
	n = strlen(stamp);
	snprintf(stamp + n, sizeof(stamp) - n, ".%03d", (int)(tv.tv_usec / 1000));
	n = strlen(stamp);
	strftime(stamp + n, sizeof(stamp) - n, "%z", &tm);
	len = snprintf(line, sizeof(line), "%s %s: %s\n", stamp, level_name(level), msg);
	if (len < 0)
		return;
	if ((size_t)len >= sizeof(line)) {
		len = sizeof(line) - 1;
		line[len - 1] = '\n';
	}
	pthread_mutex_lock(&mu);
	/* nothing sensible to do when the log itself fails */
	if (write(log_fd, line, (size_t)len) < 0)
		errno = 0;
	pthread_mutex_unlock(&mu);
}

void hcd_log(int level, const char *fmt, ...)
{
	char msg[900];
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	emit(level, msg);
}

void hcd_log_lib(int level, const char *msg, void *arg)
{
	(void)arg;
	if (level <= log_level)
		emit(level, msg);
}
