/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handover.c - hicached's side of a sealed pool: the Unix socket ranks
 * get its fd from (hc_pool_serve, hicache-sealed(7)), served by a thread
 * of its own that wakes for a connection or for the stop pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "hicached.h"

static struct {
	int ls, stop[2], fd, running;
	const char *pool, *path;
	pthread_t thr;
	dev_t dev; /* the socket we bound: at stop, the path is removed only if it is still ours */
	ino_t ino;
} H = { -1, { -1, -1 }, -1, 0, NULL, NULL, 0, 0, 0 };

static int addr_of(const char *path, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(a->sun_path))
		return -1;
	memcpy(a->sun_path, path, strlen(path) + 1);
	return 0;
}

/* Listen on a, at path: bound under a temporary name in the same
 * directory, listening, open to connect (0666: who gets the pool is the
 * peer's credentials' business, hc_pool_serve), then linked to path and
 * the temporary name removed.  A peer that finds the path can connect at
 * once (between bind and listen it would be refused, as from a stale
 * socket), and link, unlike rename, never takes the path from another
 * daemon that got there first (EADDRINUSE).  A path too long for a
 * temporary name beside it is bound as it is.  Records what was bound. */
static int listen_as(int s, struct sockaddr_un *a, const char *path)
{
	struct sockaddr_un t = { .sun_family = AF_UNIX }, *b = &t;
	const char *slash = strrchr(path, '/');
	int dirlen = slash ? (int)(slash - path) : 1, n, e;
	struct stat st;

	n = snprintf(t.sun_path, sizeof(t.sun_path), "%.*s/.hicached.%d", dirlen, slash ? path : ".", (int)getpid());
	if (n < 0 || (size_t)n >= sizeof(t.sun_path))
		b = a; /* bound at path itself */
	else
		unlink(t.sun_path); /* a name of ours left by a process of our pid: gone */
	if (bind(s, (struct sockaddr *)b, sizeof(*b)) < 0)
		return -1;
	if (chmod(b->sun_path, 0666) < 0 || listen(s, 64) < 0 || lstat(b->sun_path, &st) < 0 ||
	    (b == &t && link(t.sun_path, path) < 0)) {
		e = errno == EEXIST ? EADDRINUSE : errno;
		if (b == &t)
			unlink(t.sun_path);
		errno = e;
		return -1;
	}
	if (b == &t)
		unlink(t.sun_path);
	H.dev = st.st_dev;
	H.ino = st.st_ino;
	return 0;
}

int hcd_handover_listen(const struct hcd_conf *c)
{
	struct sockaddr_un a;
	struct stat st;
	int s, r, e;

	if (addr_of(c->socket, &a) < 0) {
		hcd_log(HC_LOG_ERR, "--socket '%s' is longer than %zu bytes: give a shorter path", c->socket,
			sizeof(a.sun_path) - 1);
		return HC_CLI_EXIT_USAGE;
	}
	/* Run by hand, not by systemd: the default's directory may be missing
	 * (0755: the credentials of each peer, not the directory, decide). */
	if (c->socket_default && mkdir("/run/hicache", 0755) < 0 && errno != EEXIST)
		hcd_log(HC_LOG_WARN, "cannot make /run/hicache for the socket: %s", strerror(errno));
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		hcd_log(HC_LOG_ERR, "socket: %s", strerror(errno));
		return HC_CLI_EXIT_FAIL;
	}
	/* The probe: a live daemon whose backlog is full must not hold us for
	 * ever (connect waits up to the send timeout); one that answers late
	 * still owns the path, and listen_as says so. */
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &(struct timeval){ .tv_sec = 2 }, sizeof(struct timeval));
	r = connect(s, (struct sockaddr *)&a, sizeof(a));
	e = errno;
	close(s);
	if (r == 0) {
		hcd_log(HC_LOG_ERR,
			"cannot serve pool '%s': another process serves on %s (it answers): one hicached per socket; "
			"stop it, or give another --socket",
			c->pool, c->socket);
		return HC_CLI_EXIT_FAIL;
	}
	if (e == ECONNREFUSED) {
		/* nothing listens: a socket left by a hicached that died */
		if (lstat(c->socket, &st) < 0 || !S_ISSOCK(st.st_mode)) {
			hcd_log(HC_LOG_ERR, "--socket %s exists and is not a socket: remove it, or give another path",
				c->socket);
			return HC_CLI_EXIT_USAGE;
		}
		if (unlink(c->socket) < 0) {
			hcd_log(HC_LOG_ERR, "cannot remove the stale socket %s: %s", c->socket, strerror(errno));
			return HC_CLI_EXIT_FAIL;
		}
		hcd_log(HC_LOG_INFO, "removed the stale socket %s (nothing listened on it)", c->socket);
	}
	if ((s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
		hcd_log(HC_LOG_ERR, "socket: %s", strerror(errno));
		return HC_CLI_EXIT_FAIL;
	}
	if (listen_as(s, &a, c->socket) < 0) {
		e = errno;
		close(s);
		if (e == EADDRINUSE) { /* another daemon took the path since the probe */
			hcd_log(HC_LOG_ERR,
				"cannot serve pool '%s': another process serves on %s: one hicached per socket; "
				"stop it, or give another --socket",
				c->pool, c->socket);
			return HC_CLI_EXIT_FAIL;
		}
		hcd_log(HC_LOG_ERR, "cannot listen on --socket %s: %s%s", c->socket, strerror(e),
			e == ENOENT ? ": its directory does not exist" : "");
		return HC_CLI_EXIT_USAGE;
	}
	H.ls = s;
	H.path = c->socket;
	return 0;
}

static void *handover_main(void *arg)
{
	struct pollfd p[2] = { { .fd = H.ls, .events = POLLIN }, { .fd = H.stop[0], .events = POLLIN } };
	int r;

	(void)arg;
	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			hcd_log(HC_LOG_ERR, "pool '%s': poll on %s: %s; no more ranks get the pool", H.pool, H.path,
				strerror(errno));
			return NULL;
		}
		if (p[1].revents)
			return NULL;
		if (!(p[0].revents & POLLIN))
			continue;
		r = hc_pool_serve(H.ls, H.fd, H.pool, 0, 0);
		if (r == 0)
			hcd_log(HCD_LOG_DEBUG, "pool '%s': handed over on %s", H.pool, H.path);
		else if (r != -ETIMEDOUT || strstr(hc_last_error(), "no peer connected") == NULL)
			hcd_log(HC_LOG_WARN, "%s", hc_last_error());
	}
}

int hcd_handover_start(const struct hcd_conf *c)
{
	int r;

	H.fd = c->pool_fd;
	H.pool = c->pool;
	if (pipe2(H.stop, O_CLOEXEC) < 0) {
		hcd_log(HC_LOG_ERR, "pool '%s': pipe: %s", c->pool, strerror(errno));
		return -errno;
	}
	if ((r = pthread_create(&H.thr, NULL, handover_main, NULL)) != 0) {
		hcd_log(HC_LOG_ERR, "pool '%s': cannot start the thread that serves %s: %s", c->pool, c->socket,
			strerror(r));
		return -r;
	}
	H.running = 1;
	return 0;
}

void hcd_handover_stop(void)
{
	if (H.running) {
		if (write(H.stop[1], "s", 1) != 1)
			hcd_log(HC_LOG_WARN, "cannot wake the socket thread: %s", strerror(errno));
		pthread_join(H.thr, NULL);
		H.running = 0;
	}
	for (int i = 0; i < 2; i++)
		if (H.stop[i] >= 0) {
			close(H.stop[i]);
			H.stop[i] = -1;
		}
	if (H.ls >= 0) {
		close(H.ls);
		H.ls = -1;
		struct stat st;
		/* only ours: a daemon after us may have replaced a socket it found stale */
		if (lstat(H.path, &st) == 0 && st.st_dev == H.dev && st.st_ino == H.ino && unlink(H.path) < 0 &&
		    errno != ENOENT)
			hcd_log(HC_LOG_WARN, "cannot remove the socket %s: %s", H.path, strerror(errno));
	}
}
