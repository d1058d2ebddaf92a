/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handover.c - hand a sealed pool's fd to a rank over a Unix stream socket.
 *
 * A sealed pool has no name a rank could open, so its owner passes the fd
 * itself (SCM_RIGHTS).  The owner admits a peer by its kernel-given
 * credentials (SO_PEERCRED, SO_PEERGROUPS) under the rule a named pool's
 * file mode enforces (hc__pool_admits): who may open /dev/shm/hicache.X
 * may have the sealed X, and no one else.  Version 1 of the protocol
 * (hicache-sealed(7)): the peer sends one request, the owner one reply,
 * with the fd on a reply that admits; both are fixed-size records in host
 * byte order.  Every read is bounded in time and size: a peer that falls
 * silent, or says anything else, is cut off without holding the owner.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"

#define HO_VERSION       1
#define HO_REQ_MAGIC     0x51524348u /* "HCRQ" */
#define HO_REP_MAGIC     0x50524348u /* "HCRP" */
#define HO_PEER_MS       5000
#define HO_CLIENT_MS     10000
#define HO_NAME_BYTES    72
#define HO_WHY_BYTES     256
#define HO_STATUS_OK     0
#define HO_STATUS_REFUSE 1

struct ho_req {
	uint32_t magic;
	uint16_t version;
	uint16_t flags; /* 0 */
	char name[HO_NAME_BYTES];
};

struct ho_rep {
	uint32_t magic;
	uint16_t version;
	uint16_t status; /* HO_STATUS_* */
	uint32_t err;    /* refused: the errno the peer returns */
	uint32_t resv;
	uint64_t size; /* handed over: the pool's bytes */
	char name[HO_NAME_BYTES];
	char why[HO_WHY_BYTES]; /* refused: who and why, for the peer to print */
};

_Static_assert(sizeof(struct ho_req) == 80, "the request is 80 bytes (hicache-sealed(7))");
_Static_assert(sizeof(struct ho_rep) == 352, "the reply is 352 bytes (hicache-sealed(7))");
_Static_assert(HO_NAME_BYTES > HC_NAME_MAX, "a name fits with its NUL");

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait until fd is readable before deadline: 1, 0 on time out, -errno. */
static int wait_in(int fd, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - now_ms();
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int r;

		r = poll(&pfd, 1, left <= 0 ? 0 : left > 60000 ? 60000 : (int)left);
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r == 0 && left <= 0)
			return 0;
	}
}

/*
 * Read len bytes of a record before deadline, and any fds that come with
 * them (at most one is kept in *fd, others closed).  The count read, short
 * on EOF; -ETIMEDOUT; -EPROTO for fds of another kind; -errno.
 */
static ssize_t read_record(int s, void *buf, size_t len, int64_t deadline, int *fd)
{
	size_t got = 0;

	while (got < len) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(4 * sizeof(int))];
		} cb;
		struct iovec iov = { (char *)buf + got, len - got };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
		struct cmsghdr *c;
		ssize_t n;
		int r;

		if (fd) {
			m.msg_control = cb.b;
			m.msg_controllen = sizeof(cb.b);
		}
		if ((r = wait_in(s, deadline)) <= 0)
			return r == 0 ? -ETIMEDOUT : r;
		n = recvmsg(s, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return -errno;
		for (c = fd ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c)) {
			size_t nfd = c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS
					     ? (c->cmsg_len - CMSG_LEN(0)) / sizeof(int)
					     : 0;
			for (size_t i = 0; i < nfd; i++) {
				int f;
				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (*fd < 0)
					*fd = f;
				else
					close(f);
			}
		}
		if (m.msg_flags & MSG_CTRUNC)
			return -EPROTO;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Send a whole record (and fd, if >= 0); the socket's send timeout bounds it. */
static int send_record(int s, const void *buf, size_t len, int fd)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cb;
	struct iovec iov = { (void *)buf, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	size_t sent = 0;

	if (fd >= 0) {
		memset(&cb, 0, sizeof(cb));
		m.msg_control = cb.b;
		m.msg_controllen = sizeof(cb.b);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	while (sent < len) {
		ssize_t n = sendmsg(s, &m, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -(errno == EAGAIN ? ETIMEDOUT : errno);
		sent += (size_t)n;
		iov.iov_base = (char *)buf + sent;
		iov.iov_len = len - sent;
		m.msg_control = NULL; /* the fd went with the first byte */
		m.msg_controllen = 0;
	}
	return 0;
}

static void set_timeouts(int s, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* Text from a peer, safe to print: terminated, control bytes as '?'. */
static void printable(char *s, size_t len)
{
	s[len - 1] = 0;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
}

/* The peer's groups: its gid from SO_PEERCRED, then SO_PEERGROUPS (Linux
 * 4.13).  A malloc'd array of *n, or NULL. */
static gid_t *peer_groups(int s, gid_t gid, int *n)
{
	socklen_t len = 64 * sizeof(gid_t);
	gid_t *g = NULL;

	for (int tries = 0; tries < 3; tries++) {
		gid_t *ng = realloc(g, len + sizeof(gid_t));
		if (!ng)
			break;
		g = ng;
		g[0] = gid;
		if (getsockopt(s, SOL_SOCKET, SO_PEERGROUPS, g + 1, &len) == 0) {
			*n = 1 + (int)(len / sizeof(gid_t));
			return g;
		}
		if (errno != ERANGE)
			break;
	}
	if (!g)
		return NULL;
	*n = 1; /* no supplementary groups known: the primary one still counts */
	return g;
}

/* Send a refusal (best effort: the peer may be gone) and return -err with
 * the same text as the library's error. */
static int refuse(int s, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(int s, int err, const char *fmt, ...)
{
	struct ho_rep rep;
	va_list ap;

	memset(&rep, 0, sizeof(rep));
	rep.magic = HO_REP_MAGIC;
	rep.version = HO_VERSION;
	rep.status = HO_STATUS_REFUSE;
	rep.err = (uint32_t)err;
	va_start(ap, fmt);
	vsnprintf(rep.why, sizeof(rep.why), fmt, ap);
	va_end(ap);
	send_record(s, &rep, sizeof(rep), -1);
	return hc__err(err, "%s", rep.why);
}

/* Serve one accepted peer s: 0 handed over, or -errno. */
static int serve_peer(int s, int pool_fd, const char *name, const struct stat *st, int peer_ms)
{
	struct ho_req req;
	struct ho_rep rep;
	struct ucred cr;
	socklen_t crlen = sizeof(cr);
	char label[HC_NAME_MAX + 32], who[96];
	gid_t *groups;
	int ngroups, ret;
	ssize_t n;

	set_timeouts(s, peer_ms);
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0)
		return hc__err(errno, "serve pool '%s': cannot read the peer's credentials: %s", name, strerror(errno));
	snprintf(who, sizeof(who), "peer pid %d uid %u gid %u", (int)cr.pid, (unsigned)cr.uid, (unsigned)cr.gid);
	/* Admitted first: a peer with no right to the pool is answered at
	 * once, and cannot hold the server for peer_ms by saying nothing. */
	snprintf(label, sizeof(label), "sealed pool '%s'", name);
	groups = peer_groups(s, cr.gid, &ngroups);
	if (!groups)
		return refuse(s, ENOMEM, "pool '%s': out of memory reading %s's groups", name, who);
	ret = hc__pool_admits(label, st, cr.uid, groups, ngroups);
	free(groups);
	if (ret < 0) {
		char why[HO_WHY_BYTES];
		snprintf(why, sizeof(why), "%s", hc_last_error());
		return refuse(s, -ret, "%s refused: %s", who, why);
	}
	n = read_record(s, &req, sizeof(req), now_ms() + peer_ms, NULL);
	if (n == -ETIMEDOUT)
		return hc__err(ETIMEDOUT, "serve pool '%s': %s sent no whole request within %d ms; cut off", name, who,
			       peer_ms);
	if (n < 0)
		return hc__err((int)-n, "serve pool '%s': reading %s's request: %s", name, who, strerror((int)-n));
	if ((size_t)n < sizeof(req))
		return hc__err(EPROTO, "serve pool '%s': %s hung up after %zd of the request's %zu bytes", name, who, n,
			       sizeof(req));
	if (req.magic != HO_REQ_MAGIC)
		return refuse(s, EPROTO,
			      "%s does not speak the hicache pool handover protocol (magic 0x%08x, not 0x%08x)", who,
			      req.magic, HO_REQ_MAGIC);
	if (req.version != HO_VERSION)
		return refuse(
			s, EPROTO,
			"%s speaks version %u of the pool handover protocol; pool '%s' is served with version %d: "
			"use the same hicache on both sides",
			who, req.version, name, HO_VERSION);
	if (!memchr(req.name, 0, sizeof(req.name)) || strcmp(req.name, name) != 0) {
		printable(req.name, sizeof(req.name));
		return refuse(s, ENOENT, "%s asked for pool '%s', but this socket serves pool '%s'", who, req.name,
			      name);
	}
	memset(&rep, 0, sizeof(rep));
	rep.magic = HO_REP_MAGIC;
	rep.version = HO_VERSION;
	rep.status = HO_STATUS_OK;
	rep.size = (uint64_t)st->st_size;
	snprintf(rep.name, sizeof(rep.name), "%s", name);
	if ((ret = send_record(s, &rep, sizeof(rep), pool_fd)) < 0)
		return hc__err(-ret, "serve pool '%s': sending the fd to %s: %s", name, who, strerror(-ret));
	return 0;
}

int hc_pool_serve(int listen_fd, int pool_fd, const char *name, int accept_ms, int peer_ms)
{
	struct stat st;
	int ret, s, seals;

	if ((ret = hc_pool_name_valid(name)) < 0)
		return ret;
	if (peer_ms < 0)
		return hc__err(EINVAL, "serve pool '%s': peer_ms %d is negative: give 0 (5 s) or a time", name,
			       peer_ms);
	if (fstat(pool_fd, &st) < 0)
		return hc__err(errno == EBADF ? EBADF : errno, "serve pool '%s': pool fd %d: %s", name, pool_fd,
			       strerror(errno));
	seals = fcntl(pool_fd, F_GET_SEALS);
	if (!S_ISREG(st.st_mode) || seals < 0 ||
	    (seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) != (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		return hc__err(
			EPERM,
			"serve pool '%s': fd %d is not a memfd sealed against shrinking, growing and more seals: "
			"serve only a sealed pool (hc_pool_spec.sealed_fd)",
			name, pool_fd);
	if ((ret = wait_in(listen_fd, accept_ms < 0 ? INT64_MAX : now_ms() + accept_ms)) <= 0)
		return ret == 0 ? hc__err(ETIMEDOUT, "serve pool '%s': no peer connected within %d ms", name, accept_ms)
				: hc__err(-ret, "serve pool '%s': waiting on socket fd %d: %s", name, listen_fd,
					  strerror(-ret));
	s = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (s < 0)
		return hc__err(errno, "serve pool '%s': accept on fd %d: %s%s", name, listen_fd, strerror(errno),
			       errno == EINVAL ? " (not a listening socket)" : "");
	ret = serve_peer(s, pool_fd, name, &st, peer_ms ? peer_ms : HO_PEER_MS);
	close(s);
	return ret;
}

static int connect_to(const char *path, const char *name, int ms)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s;

	if (strlen(path) >= sizeof(a.sun_path))
		return hc__err(ENAMETOOLONG, "pool '%s': socket path '%s' is longer than %zu bytes", name, path,
			       sizeof(a.sun_path) - 1);
	memcpy(a.sun_path, path, strlen(path) + 1);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return hc__err(errno, "pool '%s': socket: %s", name, strerror(errno));
	set_timeouts(s, ms); /* SO_SNDTIMEO bounds a connect that waits on a full backlog */
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) == 0)
		return s;
	int e = errno;
	close(s);
	switch (e) {
	case ENOENT:
		return hc__err(ENOENT,
			       "pool '%s': no socket at %s: is its hicached running (and this the path in its config)?",
			       name, path);
	case ECONNREFUSED:
		return hc__err(ECONNREFUSED,
			       "pool '%s': nothing listens on %s: its owner has stopped, or left a stale socket", name,
			       path);
	case EACCES:
		return hc__err(EACCES,
			       "pool '%s': cannot connect to %s: permission denied by the socket or its directory",
			       name, path);
	case EAGAIN:
		return hc__err(ETIMEDOUT, "pool '%s': %s did not take the connection within %d ms", name, path, ms);
	default:
		return hc__err(e, "pool '%s': cannot connect to %s: %s", name, path, strerror(e));
	}
}

int hc__handover_recv(const char *path, const char *name, uint32_t timeout_ms, int *out)
{
	int ms = timeout_ms ? (timeout_ms > INT32_MAX ? INT32_MAX : (int)timeout_ms) : HO_CLIENT_MS;
	struct ho_req req;
	struct ho_rep rep;
	struct stat st;
	int s, fd = -1, ret;
	ssize_t n;

	*out = -1;
	if (!*path)
		return hc__err(EINVAL, "pool '%s': the socket path is empty", name);
	if ((s = connect_to(path, name, ms)) < 0)
		return s;
	memset(&req, 0, sizeof(req));
	req.magic = HO_REQ_MAGIC;
	req.version = HO_VERSION;
	snprintf(req.name, sizeof(req.name), "%s", name);
	/* EPIPE: the server refused us before reading the request (it checks
	 * credentials first) and hung up; its refusal is there to be read. */
	if ((ret = send_record(s, &req, sizeof(req), -1)) < 0 && ret != -EPIPE && ret != -ECONNRESET) {
		ret = hc__err(-ret, "pool '%s': sending the request to %s: %s", name, path, strerror(-ret));
		goto out;
	}
	n = read_record(s, &rep, sizeof(rep), now_ms() + ms, &fd);
	if (n < 0) {
		ret = n == -ETIMEDOUT ? hc__err(ETIMEDOUT, "pool '%s': %s sent no reply within %d ms", name, path, ms)
		      : n == -EPROTO ? hc__err(EPROTO, "pool '%s': %s sent more ancillary data than one fd", name, path)
				     : hc__err((int)-n, "pool '%s': reading the reply of %s: %s", name, path,
					       strerror((int)-n));
		goto out;
	}
	if ((size_t)n < sizeof(rep)) {
		ret = hc__err(EPROTO, "pool '%s': %s hung up after %zd of the reply's %zu bytes", name, path, n,
			      sizeof(rep));
		goto out;
	}
	if (rep.magic != HO_REP_MAGIC || rep.version != HO_VERSION) {
		ret = hc__err(EPROTO,
			      "pool '%s': %s does not speak version %d of the pool handover protocol (magic 0x%08x, "
			      "version %u)",
			      name, path, HO_VERSION, rep.magic, rep.version);
		goto out;
	}
	if (rep.status == HO_STATUS_REFUSE) {
		printable(rep.why, sizeof(rep.why));
		ret = hc__err(rep.err > 0 && rep.err < 4096 ? (int)rep.err : EACCES, "pool '%s' from %s: %s", name,
			      path, rep.why);
		goto out;
	}
	printable(rep.name, sizeof(rep.name));
	if (rep.status != HO_STATUS_OK || fd < 0 || strcmp(rep.name, name) != 0) {
		ret = hc__err(EPROTO, "pool '%s': %s sent a reply of status %u for pool '%s' %s an fd", name, path,
			      rep.status, rep.name, fd < 0 ? "without" : "with");
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		ret = hc__err(errno, "pool '%s': the fd %s sent: %s", name, path, strerror(errno));
		goto out;
	}
	if ((uint64_t)st.st_size != rep.size) {
		ret = hc__err(EPROTO, "pool '%s': %s said %llu bytes, but the fd it sent has %lld", name, path,
			      (unsigned long long)rep.size, (long long)st.st_size);
		goto out;
	}
	*out = fd;
	fd = -1;
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	close(s);
	return ret;
}
