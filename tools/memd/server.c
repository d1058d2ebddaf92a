/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c - the event loop of hicache-memd: one thread, one epoll set,
 * level-triggered: the control listener, the clients' connections, the
 * UCX worker's event fd, a signalfd for SIGTERM and SIGINT, and the
 * metrics listener and its scrapes (metrics.c).
 *
 * The worker is progressed at every turn of the loop, not only when its fd
 * fires: over TCP, UCX emulates a client's get or put with messages this
 * process must answer, and a turn woken by a client's request may have
 * work for the worker too.  The fd is armed before each sleep; an arm that
 * answers busy means there is more to progress, so the loop turns again
 * without sleeping.  The loop sleeps at most MEMD_SWEEP_MS, or until the
 * next lease expires, so expired leases free their bytes on time.
 *
 * A connection is closed (and only that one) for a bad message, a reply
 * queue over MEMD_REPLY_MAX (a client that does not read), or an error on
 * its socket.  Closing it ends none of its leases: see memd.h.  Closed
 * connections are freed after the turn, since an event of the same batch
 * may still name them.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "memd.h"

#define RX_START          (64u << 10)
#define TX_KEEP           (1u << 20)
#define RX_MAX            (sizeof(struct hc_mw_hdr) + HC_MW_BODY_MAX)
#define EVENTS_MAX        64
#define KEEPALIVE_IDLE_S  60
#define KEEPALIVE_INTVL_S 10
#define KEEPALIVE_CNT     6

struct conn {
	struct memd_ev ev; /* MEMD_EV_CLIENT (first) */
	int fd;            /* -1 once closed */
	char peer[64];
	struct memd_session s;
	uint8_t *rx;
	size_t rx_len, rx_cap;
	struct memd_buf tx;
	bool want_out;         /* EPOLLOUT is asked for */
	bool paused;           /* its replies back up: EPOLLIN is not asked for */
	struct memd_link link; /* on conns, then on dead */
};

struct server {
	const struct memd_opts *o;
	struct memd_region *r;
	struct memd_dir *d;
	struct memd_welcome w;
	int epfd;
	int lfd, sfd, spare_fd;
	struct memd_ev lev, sev, wev;
	struct memd_list conns; /* open */
	struct memd_list dead;  /* closed this turn, freed after it */
	unsigned nconns;
	struct memd_metrics *metrics;
	struct memd_ratelimit rl_bad, rl_refuse, rl_io;
	bool stop;
	bool arm_failed;
};

static void format_addr(const struct sockaddr *sa, socklen_t len, char *buf, size_t buflen)
{
	char host[NI_MAXHOST], port[NI_MAXSERV];

	if (getnameinfo(sa, len, host, sizeof(host), port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0)
		snprintf(buf, buflen, "(unknown peer)");
	else if (sa->sa_family == AF_INET6)
		snprintf(buf, buflen, "[%s]:%s", host, port);
	else
		snprintf(buf, buflen, "%s:%s", host, port);
}

int memd_listen(const struct memd_addr *a, char *bound, size_t boundlen)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fd, one = 1, r;

	fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	/* SO_REUSEADDR: a restarted server binds its port at once, whatever
	 * connections of the old one linger in TIME_WAIT */
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (const struct sockaddr *)&a->ss, a->len) < 0 || listen(fd, 128) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
		r = -errno;
		memd_log(MEMD_ERR, "%s %s: %s%s", a->option, a->text, strerror(-r),
			 r == -EADDRINUSE ? " (another server has that port: give another, or stop it)" : "");
		if (fd >= 0)
			close(fd);
		return r;
	}
	format_addr((struct sockaddr *)&ss, len, bound, boundlen);
	return fd;
}

static int watch(struct server *S, int fd, uint32_t events, struct memd_ev *ev)
{
	struct epoll_event e = { .events = events, .data.ptr = ev };

	if (epoll_ctl(S->epfd, EPOLL_CTL_ADD, fd, &e) < 0) {
		int r = -errno;

		memd_log(MEMD_ERR, "epoll_ctl: %s", strerror(-r));
		return r;
	}
	return 0;
}

/* ---- connections */

static void conn_close(struct server *S, struct conn *c)
{
	if (c->fd < 0)
		return;
	epoll_ctl(S->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	memd_list_del(&S->conns, &c->link);
	memd_list_push(&S->dead, &c->link);
	S->nconns--;
	S->d->st[MEMD_ST_clients]--;
}

static void conn_free(struct conn *c)
{
	free(c->rx);
	memd_buf_free(&c->tx);
	free(c);
}

static void free_dead(struct server *S)
{
	while (S->dead.head) {
		struct conn *c = memd_entry(S->dead.head, struct conn, link);

		memd_list_del(&S->dead, &c->link);
		conn_free(c);
	}
}

static void bad_message(struct server *S, struct conn *c, uint64_t now, const char *why)
{
	S->d->st[MEMD_ST_bad_messages]++;
	memd_log_limited(&S->rl_bad, now, MEMD_WARN, "%s: bad message: %s; closing the connection", c->peer, why);
	conn_close(S, c);
}

static void io_failed(struct server *S, struct conn *c, uint64_t now, const char *what, int err)
{
	memd_log_limited(&S->rl_io, now, MEMD_INFO, "%s: %s: %s; closing the connection", c->peer, what, strerror(err));
	conn_close(S, c);
}

/* The events asked for c: EPOLLOUT while replies wait, EPOLLIN unless
 * paused (a client that does not read its replies is not read either). */
static void want(struct server *S, struct conn *c, bool out, bool paused)
{
	struct epoll_event e = { .events = (paused ? 0u : EPOLLIN) | (out ? EPOLLOUT : 0u), .data.ptr = &c->ev };

	if ((c->want_out != out || c->paused != paused) && epoll_ctl(S->epfd, EPOLL_CTL_MOD, c->fd, &e) == 0) {
		c->want_out = out;
		c->paused = paused;
	}
}

static void want_out(struct server *S, struct conn *c, bool on)
{
	want(S, c, on, c->paused);
}

static bool conn_answer(struct server *S, struct conn *c, uint64_t now);

/* Send what the socket takes of c's replies. */
static void conn_flush(struct server *S, struct conn *c, uint64_t now)
{
	struct memd_buf *b = &c->tx;

	while (b->off < b->len) {
		ssize_t n = send(c->fd, b->p + b->off, b->len - b->off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			io_failed(S, c, now, "send", n < 0 ? errno : EPIPE);
			return;
		}
		b->off += (size_t)n;
	}
	if (b->off == b->len) {
		b->off = b->len = 0;
		if (b->cap > TX_KEEP)
			memd_buf_free(b); /* a burst's buffer is not kept for good */
		bool was = c->paused;

		want(S, c, false, false);
		if (was && c->rx_len && conn_answer(S, c, now)) /* what came while it was paused */
			conn_flush(S, c, now);
		return;
	}
	want_out(S, c, true);
}

/* Room in c->rx for a message of need bytes; false when there is no memory. */
static bool rx_room(struct conn *c, size_t need)
{
	size_t cap = c->rx_cap;
	uint8_t *p;

	if (cap >= need)
		return true;
	while (cap < need)
		cap = cap * 2 < RX_MAX ? cap * 2 : RX_MAX;
	if (!(p = realloc(c->rx, cap)))
		return false;
	c->rx = p;
	c->rx_cap = cap;
	return true;
}

/* Answer every whole message in c->rx; false when c was closed. */
static bool conn_answer(struct server *S, struct conn *c, uint64_t now)
{
	size_t off = 0;
	char why[256];
	int r;

	while (c->rx_len - off >= sizeof(struct hc_mw_hdr)) {
		uint32_t body;
		size_t whole;

		/* a client that sends and does not read: stop reading it (what it
		 * sent stays in rx, bounded by one message) until its replies
		 * drain; conn_flush resumes it */
		if (c->tx.len - c->tx.off > MEMD_REPLY_PAUSE) {
			want(S, c, true, true);
			break;
		}
		/* checked before each reply, so it is passed by one reply at most */
		if (c->tx.len - c->tx.off > MEMD_REPLY_MAX) {
			memd_log_limited(
				&S->rl_bad, now, MEMD_WARN,
				"%s: %zu bytes of replies unsent, more than %u: the client sends requests and does not read the replies; closing the connection",
				c->peer, c->tx.len - c->tx.off, MEMD_REPLY_MAX);
			conn_close(S, c);
			return false;
		}

		if (memd_proto_header(&c->s, c->rx + off, &body, why, sizeof(why)) < 0) {
			bad_message(S, c, now, why);
			return false;
		}
		whole = sizeof(struct hc_mw_hdr) + body;
		if (c->rx_len - off < whole)
			break;
		r = memd_proto_handle(S->d, &S->w, &c->s, c->rx + off, whole, now, &c->tx, why, sizeof(why));
		if (r == -ENOMEM) {
			memd_log(MEMD_ERR, "%s: %s; closing the connection", c->peer, why);
			conn_close(S, c);
			return false;
		}
		if (r < 0) {
			bad_message(S, c, now, why);
			return false;
		}
		off += whole;
	}
	memmove(c->rx, c->rx + off, c->rx_len - off);
	c->rx_len -= off;
	return true;
}

static void conn_read(struct server *S, struct conn *c, uint64_t now)
{
	size_t need = c->rx_len + 1;
	ssize_t n;

	/* a partial message's header says how much room it needs (bounded by
	 * HC_MW_BODY_MAX, or it was refused already) */
	if (c->rx_len >= sizeof(struct hc_mw_hdr)) {
		struct hc_mw_hdr h;

		memcpy(&h, c->rx, sizeof(h));
		need = sizeof(h) + h.length;
	}
	if (c->rx_len == c->rx_cap && !rx_room(c, need)) {
		memd_log(MEMD_ERR, "%s: no memory for a message of %zu bytes; closing the connection", c->peer, need);
		conn_close(S, c);
		return;
	}
	n = recv(c->fd, c->rx + c->rx_len, c->rx_cap - c->rx_len, 0);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n < 0) {
		io_failed(S, c, now, "recv", errno);
		return;
	}
	if (n == 0) {
		if (c->rx_len)
			memd_log_limited(&S->rl_bad, now, MEMD_INFO,
					 "%s: closed in the middle of a message (%zu bytes of it came)", c->peer,
					 c->rx_len);
		else
			memd_log(MEMD_DEBUG, "%s: closed", c->peer);
		conn_close(S, c);
		return;
	}
	c->rx_len += (size_t)n;
	if (conn_answer(S, c, now))
		conn_flush(S, c, now);
}

static void conn_event(struct server *S, struct conn *c, uint32_t events, uint64_t now)
{
	if (c->fd < 0)
		return; /* closed earlier in this turn */
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
		conn_read(S, c, now);
	if (c->fd >= 0 && (events & EPOLLOUT))
		conn_flush(S, c, now);
}

/* ---- the listener */

/* Refuse one connection when no fd is left for it: give back the spare
 * fd kept for this, take the connection, close it, take the spare again.
 * Without this, the listener would stay readable and the loop spin. */
static void refuse_no_fd(struct server *S, uint64_t now, int err)
{
	int fd;

	if (S->spare_fd >= 0) {
		close(S->spare_fd);
		if ((fd = accept(S->lfd, NULL, NULL)) >= 0)
			close(fd);
		S->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	S->d->st[MEMD_ST_refused]++;
	memd_log_limited(&S->rl_refuse, now, MEMD_ERR,
			 "refusing a connection: %s (raise the limit on open files: LimitNOFILE= or ulimit -n)",
			 strerror(err));
}

static void accept_all(struct server *S, uint64_t now)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		struct conn *c;
		char peer[64];
		int fd, one = 1;

		fd = accept4(S->lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE)
				refuse_no_fd(S, now, errno);
			else if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return;
		}
		format_addr((struct sockaddr *)&ss, len, peer, sizeof(peer));
		if (S->nconns >= S->o->max_clients) {
			S->d->st[MEMD_ST_refused]++;
			memd_log_limited(&S->rl_refuse, now, MEMD_WARN,
					 "refusing a connection from %s: %u clients already (--max-clients)", peer,
					 S->nconns);
			close(fd);
			continue;
		}
		/* requests and replies are small and answered one by one: Nagle
		 * would hold each back for the previous one's ack */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		/* a client whose host died frees its place in minutes, not never */
		setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &(int){ KEEPALIVE_IDLE_S }, sizeof(int));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &(int){ KEEPALIVE_INTVL_S }, sizeof(int));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &(int){ KEEPALIVE_CNT }, sizeof(int));
		if (!(c = calloc(1, sizeof(*c))) || !(c->rx = malloc(RX_START))) {
			free(c);
			close(fd);
			memd_log_limited(&S->rl_refuse, now, MEMD_ERR, "refusing a connection from %s: no memory",
					 peer);
			continue;
		}
		c->ev.kind = MEMD_EV_CLIENT;
		c->fd = fd;
		c->rx_cap = RX_START;
		snprintf(c->peer, sizeof(c->peer), "%s", peer);
		if (watch(S, fd, EPOLLIN, &c->ev) < 0) {
			conn_free(c);
			close(fd);
			continue;
		}
		memd_list_push(&S->conns, &c->link);
		S->nconns++;
		S->d->st[MEMD_ST_clients]++;
		S->d->st[MEMD_ST_connections]++;
		memd_log(MEMD_DEBUG, "%s: connected", peer);
	}
}

/* ---- signals */

static void read_signal(struct server *S)
{
	struct signalfd_siginfo si;
	ssize_t n = read(S->sfd, &si, sizeof(si));

	if (n != (ssize_t)sizeof(si))
		return; /* EAGAIN or EINTR: it will be readable again */
	memd_log(MEMD_INFO,
		 "%s from pid %u: stopping (%u clients, %" PRIu64 " objects, %" PRIu64 " bytes, all dropped)",
		 si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT", si.ssi_pid, S->nconns, S->d->st[MEMD_ST_objects],
		 S->d->st[MEMD_ST_object_bytes]);
	S->stop = true;
}

/* ---- the loop */

static int setup(struct server *S, int ready_fd)
{
	char bound[96], mbound[96];
	sigset_t set;
	int r;

	if ((S->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		r = -errno;
		memd_log(MEMD_ERR, "epoll_create1: %s", strerror(-r));
		return r;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	if ((S->sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
		r = -errno;
		memd_log(MEMD_ERR, "signalfd: %s", strerror(-r));
		return r;
	}
	S->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if ((S->lfd = memd_listen(&S->o->listen, bound, sizeof(bound))) < 0)
		return S->lfd;
	S->sev.kind = MEMD_EV_SIGNAL;
	S->lev.kind = MEMD_EV_LISTEN;
	S->wev.kind = MEMD_EV_WORKER;
	if ((r = watch(S, S->sfd, EPOLLIN, &S->sev)) < 0 || (r = watch(S, S->lfd, EPOLLIN, &S->lev)) < 0 ||
	    (r = watch(S, S->r->efd, EPOLLIN, &S->wev)) < 0)
		return r;
	if (S->o->metrics.text &&
	    (r = memd_metrics_open(&S->metrics, S->epfd, &S->o->metrics, S->d, mbound, sizeof(mbound))) < 0)
		return r;
	memd_log(MEMD_INFO, "serving on %s%s%s%s", bound, S->metrics ? ", metrics at http://" : "",
		 S->metrics ? mbound : "", S->metrics ? "/metrics" : "");
	if (ready_fd >= 0) {
		/* the one line on stdout: whoever started us may go on */
		if (dprintf(ready_fd, MEMD_PROG ": listening on %s\n", bound) < 0)
			memd_log(MEMD_WARN, "cannot write the ready line to stdout: %s", strerror(errno));
		close(ready_fd);
	}
	return 0;
}

static void turn(struct server *S)
{
	struct epoll_event ev[EVENTS_MAX];
	uint64_t now, next;
	int timeout = MEMD_SWEEP_MS, n, r;

	memd_region_progress(S->r);
	now = memd_now_ms();
	memd_dir_sweep(S->d, now);
	if (S->metrics)
		memd_metrics_sweep(S->metrics, now);
	next = memd_dir_next_expiry(S->d);
	if (next - now < (uint64_t)timeout)
		timeout = (int)(next - now);
	if ((r = memd_region_arm(S->r)) == -EAGAIN) {
		timeout = 0; /* more to progress first */
	} else if (r < 0) {
		/* no wakeup from UCX: poll it, which TCP transfers need */
		if (!S->arm_failed)
			memd_log(
				MEMD_ERR,
				"the UCX worker cannot be woken by its event fd: progressing it every millisecond instead");
		S->arm_failed = true;
		timeout = timeout < 1 ? timeout : 1;
	}
	n = epoll_wait(S->epfd, ev, EVENTS_MAX, timeout);
	now = memd_now_ms();
	for (int i = 0; i < n; i++) {
		struct memd_ev *e = ev[i].data.ptr;

		switch (e->kind) {
		case MEMD_EV_LISTEN:
			accept_all(S, now);
			break;
		case MEMD_EV_SIGNAL:
			read_signal(S);
			break;
		case MEMD_EV_WORKER:
			break; /* progressed at the next turn's start */
		case MEMD_EV_CLIENT:
			conn_event(S, (struct conn *)e, ev[i].events, now);
			break;
		case MEMD_EV_METRICS:
			memd_metrics_event(S->metrics, e, ev[i].events, now);
			break;
		}
	}
	free_dead(S);
}

int memd_serve(const struct memd_opts *o, struct memd_region *r, struct memd_dir *d, uint64_t instance, int ready_fd)
{
	struct server S = { .o = o, .r = r, .d = d, .epfd = -1, .lfd = -1, .sfd = -1, .spare_fd = -1 };
	int ret;

	S.w = (struct memd_welcome){ .lease_ms = o->lease_ms,
				     .batch_max = o->batch_max,
				     .instance = instance,
				     .base = (uint64_t)(uintptr_t)r->base,
				     .size = r->size,
				     .addr = r->addr,
				     .addr_len = (uint32_t)r->addr_len,
				     .rkey = r->rkey,
				     .rkey_len = (uint32_t)r->rkey_len };
	ret = setup(&S, ready_fd);
	if (ret < 0 && ready_fd >= 0)
		close(ready_fd);
	while (ret == 0 && !S.stop)
		turn(&S);
	while (S.conns.head)
		conn_close(&S, memd_entry(S.conns.head, struct conn, link));
	free_dead(&S);
	if (S.metrics)
		memd_metrics_close(S.metrics);
	if (S.lfd >= 0)
		close(S.lfd);
	if (S.sfd >= 0)
		close(S.sfd);
	if (S.spare_fd >= 0)
		close(S.spare_fd);
	if (S.epfd >= 0)
		close(S.epfd);
	return ret;
}
