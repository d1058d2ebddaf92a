/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c - one memory server as the progress thread sees it: its control
 * connection (TCP, non-blocking), the HELLO that gives its region, its UCX
 * endpoint and remote key, the requests in flight and their replies, and
 * what happens when it fails.
 *
 * A server goes DOWN -> CONNECTING -> HELLO -> UP, and back to DOWN (through
 * CLOSING while its endpoint closes) when it fails: a refused or timed-out
 * connect, a closed or broken connection, a bad reply, or no reply within
 * io_timeout_ms.  Its requests in flight then fail, its transfers are
 * cancelled by closing the endpoint, and it is tried again after a back-off
 * that doubles from retry_ms to retry_max_ms.  A restarted server is a new
 * instance (HELLO says so) and starts empty; nothing of the old one is used.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mori.h"

#define HDR sizeof(struct hc_mw_hdr)

void hc__mori_server_init(struct hc_mori *be, struct hc_mori_server *s, const struct hc_be_server *addr)
{
	(void)be;
	memset(s, 0, sizeof(*s));
	s->addr = *addr;
	s->fd = -1;
	s->state = HC_MORI_S_DOWN;
	hc_be_server_str(addr, s->label, sizeof(s->label));
	hc__mori_place_init(s);
}

static void epoll_set(struct hc_mori *be, struct hc_mori_server *s, bool out)
{
	struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0u),
				  .data.u64 = (uint64_t)(s - be->servers) + 2 };

	epoll_ctl(be->epfd, EPOLL_CTL_MOD, s->fd, &ev);
}

static void close_socket(struct hc_mori *be, struct hc_mori_server *s)
{
	if (s->fd >= 0) {
		epoll_ctl(be->epfd, EPOLL_CTL_DEL, s->fd, NULL);
		close(s->fd);
		s->fd = -1;
	}
	s->rx_len = 0;
	s->tx_off = s->tx_len = 0;
	s->tx_err = 0;
}

/* The endpoint is closed (or given up): its remote key goes, then DOWN.
 * A key that transfers may still use (a close that failed or never ended)
 * is left behind rather than freed under them. */
static void closed(struct hc_mori_server *s)
{
	if (s->rkey && !s->xfer_jobs)
		ucp_rkey_destroy(s->rkey);
	s->rkey = NULL;
	s->ep = NULL;
	s->close_req = NULL;
	s->state = HC_MORI_S_DOWN;
}

/* Start closing the endpoint.  With peer failure detection a forced close
 * cancels every transfer in flight (their callbacks run with an error);
 * without it (shared memory) a forced close is refused, and the transfers,
 * which are memory copies into a mapping, end by themselves. */
static void close_ep(struct hc_mori *be, struct hc_mori_server *s)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE };
	void *r;

	if (!s->ep) {
		closed(s);
		return;
	}
	r = ucp_ep_close_nbx(s->ep, &p);
	if (UCS_PTR_IS_ERR(r)) {
		p.op_attr_mask = 0;
		r = ucp_ep_close_nbx(s->ep, &p);
	}
	if (UCS_PTR_IS_PTR(r)) {
		s->close_req = r;
		s->state = HC_MORI_S_CLOSING;
		be->ntransfers++;
		return;
	}
	closed(s);
}

void hc__mori_server_fail(struct hc_mori *be, struct hc_mori_server *s, int errnum, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (s->state == HC_MORI_S_UP)
		hc__mori_log(HC_BE_LOG_WARN,
			     "memory server %s: %s; its keys are misses until it is back (retry in %u ms)", s->label,
			     why, s->backoff_ms ? s->backoff_ms : be->o.retry_ms);
	else
		hc__mori_warn_once(be, HC_MORI_WARN_SERVER,
				   "memory server %s: %s; retrying every %u to %u ms (logged once)", s->label, why,
				   be->o.retry_ms, be->o.retry_max_ms);
	HC_MORI_COUNT(be, server_failures, 1);
	close_socket(be, s);
	while (s->rq_head) {
		struct hc_mori_req *q = s->rq_head;
		s->rq_head = q->next;
		hc__mori_req_fail(be, s, q, errnum);
		free(q->jobs);
		free(q);
	}
	s->rq_tail = NULL;
	hc__mori_server_lost(be, s, errnum);
	s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : be->o.retry_ms;
	if (s->backoff_ms > be->o.retry_max_ms)
		s->backoff_ms = be->o.retry_max_ms;
	s->retry_at_ms = hc__mori_now_ms() + s->backoff_ms;
	if (s->state == HC_MORI_S_CLOSING)
		return; /* already closing */
	s->state = HC_MORI_S_DOWN;
	close_ep(be, s);
}

void hc__mori_server_fini(struct hc_mori *be, struct hc_mori_server *s)
{
	close_socket(be, s);
	if (s->state != HC_MORI_S_CLOSING && s->ep) {
		/* nothing is in flight (every op was reaped): a graceful close
		 * tells the server's worker, which then drops its side */
		ucp_request_param_t p = { .op_attr_mask = 0 };
		void *r = ucp_ep_close_nbx(s->ep, &p);

		if (UCS_PTR_IS_PTR(r))
			s->close_req = r;
		else
			closed(s);
	}
	/* bounded: a close that never ends is left behind */
	for (uint64_t end = hc__mori_now_ms() + be->o.io_timeout_ms; s->close_req && hc__mori_now_ms() < end;) {
		ucp_worker_progress(be->worker);
		if (ucp_request_check_status(s->close_req) != UCS_INPROGRESS) {
			ucp_request_free(s->close_req);
			closed(s);
		}
	}
	if (s->rkey && !s->close_req)
		ucp_rkey_destroy(s->rkey);
	/* requests no job waits for (RELEASE, STATS) still queued */
	while (s->rq_head) {
		struct hc_mori_req *q = s->rq_head;
		s->rq_head = q->next;
		free(q->jobs);
		free(q);
	}
	free(s->rx);
	free(s->tx);
}

static int grow(uint8_t **buf, size_t *cap, size_t need, size_t max)
{
	size_t n = *cap ? *cap : 4096;
	uint8_t *p;

	if (need > max)
		return -ENOBUFS;
	while (n < need)
		n *= 2;
	if (n == *cap)
		return 0;
	if (!(p = realloc(*buf, n)))
		return -ENOMEM;
	*buf = p;
	*cap = n;
	return 0;
}

/* Write what the socket takes.  A failure is kept in s->tx_err for the
 * next tick to fail the server: this runs inside a send, whose caller
 * still holds the jobs it is handing over. */
static void flush_tx(struct hc_mori *be, struct hc_mori_server *s)
{
	while (s->tx_off < s->tx_len && !s->tx_err) {
		ssize_t n = send(s->fd, s->tx + s->tx_off, s->tx_len - s->tx_off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			epoll_set(be, s, true);
			return;
		}
		if (n < 0) {
			s->tx_err = errno;
			return;
		}
		s->tx_off += (size_t)n;
	}
	if (s->tx_err)
		return;
	s->tx_off = s->tx_len = 0;
	epoll_set(be, s, false);
}

int hc__mori_server_send(struct hc_mori *be, struct hc_mori_server *s, uint16_t type, uint32_t flags, const void *items,
			 size_t item_size, uint32_t n, struct hc_mori_job **jobs)
{
	size_t body = type == HC_MW_HELLO ? sizeof(struct hc_mw_hello) : sizeof(struct hc_mw_count) + item_size * n;
	struct hc_mori_req *q = calloc(1, sizeof(*q));
	struct hc_mw_hdr h = {
		.magic = HC_MW_MAGIC,
		.version = type == HC_MW_HELLO ? HC_MW_VERSION_MIN : s->version,
		.type = type,
		.length = (uint32_t)body,
		.seq = ++s->seq,
	};
	uint8_t *p;

	if (!q)
		return -ENOMEM;
	if (s->tx_off) { /* what was sent no longer counts against the limit */
		memmove(s->tx, s->tx + s->tx_off, s->tx_len - s->tx_off);
		s->tx_len -= s->tx_off;
		s->tx_off = 0;
	}
	if (grow(&s->tx, &s->tx_cap, s->tx_len + HDR + body, HC_MORI_TX_MAX) < 0) {
		free(q);
		return -ENOBUFS;
	}
	if (jobs && !(q->jobs = malloc(n * sizeof(*jobs)))) {
		free(q);
		return -ENOMEM;
	}
	if (jobs)
		memcpy(q->jobs, jobs, n * sizeof(*jobs));
	p = s->tx + s->tx_len;
	memcpy(p, &h, HDR);
	if (type == HC_MW_HELLO) {
		struct hc_mw_hello hello = { .version_min = HC_MW_VERSION_MIN,
					     .version_max = HC_MW_VERSION_MAX,
					     .lease_ms = be->o.lease_ms };
		memcpy(p + HDR, &hello, sizeof(hello));
	} else {
		struct hc_mw_count c = { .count = n, .flags = flags };
		memcpy(p + HDR, &c, sizeof(c));
		if (n)
			memcpy(p + HDR + sizeof(c), items, item_size * n);
	}
	s->tx_len += HDR + body;
	q->type = type;
	q->seq = h.seq;
	q->n = n;
	q->sent_ms = hc__mori_now_ms();
	if (s->rq_tail)
		s->rq_tail->next = q;
	else
		s->rq_head = q;
	s->rq_tail = q;
	HC_MORI_COUNT(be, round_trips, 1);
	if (s->tx_off == 0 && s->state != HC_MORI_S_CONNECTING)
		flush_tx(be, s);
	return 0;
}

/* getaddrinfo for the server's host and port; the first address that a
 * socket can be made for is connected to. */
static int start_connect(struct hc_mori *be, struct hc_mori_server *s)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
	struct epoll_event ev;
	char port[16];
	int r, one = 1;

	snprintf(port, sizeof(port), "%u", s->addr.port);
	if ((r = getaddrinfo(s->addr.host, port, &hints, &res)) != 0) {
		hc__mori_server_fail(be, s, -EHOSTUNREACH, "cannot resolve: %s", gai_strerror(r));
		return -EHOSTUNREACH;
	}
	s->fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->fd < 0) {
		freeaddrinfo(res);
		hc__mori_server_fail(be, s, -errno, "socket: %s", strerror(errno));
		return -1;
	}
	setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	r = connect(s->fd, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	if (r < 0 && errno != EINPROGRESS) {
		hc__mori_server_fail(be, s, -ECONNREFUSED, "connect: %s", strerror(errno));
		return -1;
	}
	ev = (struct epoll_event){ .events = EPOLLIN | EPOLLOUT, .data.u64 = (uint64_t)(s - be->servers) + 2 };
	epoll_ctl(be->epfd, EPOLL_CTL_ADD, s->fd, &ev);
	s->state = HC_MORI_S_CONNECTING;
	s->since_ms = hc__mori_now_ms();
	s->version = HC_MW_VERSION_MIN;
	return 0;
}

void hc__mori_server_tick(struct hc_mori *be, struct hc_mori_server *s, uint64_t now)
{
	switch (s->state) {
	case HC_MORI_S_DOWN:
		if (now >= s->retry_at_ms)
			start_connect(be, s);
		break;
	case HC_MORI_S_CONNECTING:
	case HC_MORI_S_HELLO:
		if (s->tx_err)
			hc__mori_server_fail(be, s, -ECONNRESET, "sending: %s", strerror(s->tx_err));
		else if (now > s->since_ms + be->o.connect_timeout_ms)
			hc__mori_server_fail(be, s, -ETIMEDOUT, "no answer to connect and HELLO in %u ms",
					     be->o.connect_timeout_ms);
		break;
	case HC_MORI_S_UP:
		if (s->tx_err)
			hc__mori_server_fail(be, s, -ECONNRESET, "sending: %s", strerror(s->tx_err));
		else if (s->ep_failed != UCS_OK)
			hc__mori_server_fail(be, s, -ECONNRESET, "its UCX endpoint failed: %s",
					     ucs_status_string(s->ep_failed));
		else if (s->rq_head && now > s->rq_head->sent_ms + be->o.io_timeout_ms) {
			HC_MORI_COUNT(be, timeouts, 1);
			hc__mori_server_fail(be, s, -ETIMEDOUT, "no reply in %u ms (io_timeout_ms)",
					     be->o.io_timeout_ms);
		}
		break;
	case HC_MORI_S_CLOSING:
		if (ucp_request_check_status(s->close_req) != UCS_INPROGRESS) {
			ucp_request_free(s->close_req);
			be->ntransfers--;
			closed(s);
		} else if (now > s->retry_at_ms + be->o.io_timeout_ms) {
			/* the endpoint never finished closing: leave it behind */
			hc__mori_log(HC_BE_LOG_WARN,
				     "memory server %s: its endpoint did not close in time; left behind", s->label);
			be->ntransfers--;
			s->rkey = NULL;
			closed(s);
		}
		break;
	}
}

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct hc_mori_server *s = arg;

	(void)ep;
	/* Runs inside ucp_worker_progress on the thread: the transfers of this
	 * endpoint complete with errors.  The next tick fails the server. */
	s->ep_failed = status;
}

/* Whether the transports are UCX's shared-memory ones alone: those have no
 * peer failure detection, and an endpoint that asks for it is refused
 * (UCX logs an error).  tls as UCX_TLS takes it. */
static bool shm_only(const char *tls)
{
	static const char *const shm[] = { "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", "self" };
	char buf[HC_MORI_TLS_MAX + 1], *save = NULL;
	bool any = false;

	if (!tls || !*tls || *tls == '^' || strlen(tls) > HC_MORI_TLS_MAX)
		return false;
	strcpy(buf, tls);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		bool found = false;
		for (size_t i = 0; i < sizeof(shm) / sizeof(shm[0]) && !found; i++)
			found = !strcmp(t, shm[i]);
		if (!found)
			return false;
		any = true;
	}
	return any;
}

/* Where the region is mapped here (a shared-memory transport: UCX maps the
 * server's segment and its gets and puts are memory copies), fault its
 * page tables in now: otherwise each first touch of a 4 KiB page by a put
 * is a page fault, which on a VM costs as much as copying the page several
 * times over.  The pages exist (the server prefaulted them); this only
 * maps them, and writes nothing. */
static void map_region(struct hc_mori *be, struct hc_mori_server *s)
{
	void *local = NULL;
	uintptr_t a, end;

	if (ucp_rkey_ptr(s->rkey, s->base, &local) != UCS_OK || !local)
		return; /* not mapped here: RDMA, TCP, CMA */
	a = (uintptr_t)local & ~(uintptr_t)4095;
	end = (uintptr_t)local + s->size;
	if (madvise((void *)a, end - a, MADV_POPULATE_WRITE) < 0)
		hc__mori_warn_once(be, HC_MORI_WARN_REGISTER,
				   "memory server %s: cannot prefault its region's mapping (%s): first puts are slower",
				   s->label, strerror(errno));
}

/* The HELLO reply: the region, the worker address and the remote key. */
static void welcome(struct hc_mori *be, struct hc_mori_server *s, const uint8_t *body, uint32_t len)
{
	struct hc_mw_welcome w;
	ucp_ep_params_t ep = {
		.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER,
		.err_mode = UCP_ERR_HANDLING_MODE_PEER,
		.err_handler = { .cb = ep_error, .arg = s },
	};
	ucs_status_t st;

	if (len < sizeof(w))
		return hc__mori_server_fail(be, s, -EPROTO, "bad reply: HELLO's body is %u bytes", len);
	memcpy(&w, body, sizeof(w));
	if (w.version < HC_MW_VERSION_MIN || w.version > HC_MW_VERSION_MAX || !w.addr_len ||
	    w.addr_len > HC_MW_BLOB_MAX || !w.rkey_len || w.rkey_len > HC_MW_BLOB_MAX ||
	    len != sizeof(w) + (uint64_t)w.addr_len + w.rkey_len || !w.size || w.size % HC_MW_ALIGN ||
	    w.base + w.size < w.base || !w.lease_ms || !w.batch_max || w.batch_max > HC_MW_BATCH_MAX)
		return hc__mori_server_fail(be, s, -EPROTO,
					    "bad reply: HELLO (version %u, region %#" PRIx64 "+%" PRIu64
					    ", lease %u ms, blobs %u and %u bytes, batch %u)",
					    w.version, w.base, w.size, w.lease_ms, w.addr_len, w.rkey_len, w.batch_max);
	if (w.lease_ms <= be->o.io_timeout_ms)
		hc__mori_warn_once(
			be, HC_MORI_WARN_LEASE,
			"memory server %s: its lease (%u ms) is not above io_timeout_ms=%u: transfers are cut to half the lease",
			s->label, w.lease_ms, be->o.io_timeout_ms);
	s->version = w.version;
	s->lease_ms = w.lease_ms;
	s->base = w.base;
	s->size = w.size;
	s->batch_max = w.batch_max;
	ep.address = (const ucp_address_t *)(body + sizeof(w));
	s->err_none = false;
	st = shm_only(be->o.transports[0] ? be->o.transports : getenv("UCX_TLS"))
		     ? UCS_ERR_UNSUPPORTED
		     : ucp_ep_create(be->worker, &ep, &s->ep);
	if (st != UCS_OK) {
		/* UCX's shared-memory transports have no peer failure detection:
		 * without it they reach the region one-sidedly; the control
		 * connection still tells a dead server */
		ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
		ep.field_mask &= ~(uint64_t)UCP_EP_PARAM_FIELD_ERR_HANDLER;
		if ((st = ucp_ep_create(be->worker, &ep, &s->ep)) != UCS_OK) {
			s->ep = NULL;
			return hc__mori_server_fail(be, s, -EHOSTUNREACH,
						    "UCX cannot reach it (%s): check transports= and the network",
						    ucs_status_string(st));
		}
		s->err_none = true;
		hc__mori_warn_once(
			be, HC_MORI_WARN_ERRMODE,
			"memory server %s: the transports have no peer failure detection; the control connection tells a dead server",
			s->label);
	}
	if ((st = ucp_ep_rkey_unpack(s->ep, body + sizeof(w) + w.addr_len, &s->rkey)) != UCS_OK) {
		s->rkey = NULL;
		return hc__mori_server_fail(be, s, -EPROTO, "its remote key does not unpack: %s",
					    ucs_status_string(st));
	}
	map_region(be, s);
	s->ep_failed = UCS_OK;
	s->state = HC_MORI_S_UP;
	s->since_ms = hc__mori_now_ms();
	s->epoch++;
	s->xfer_jobs = 0;
	HC_MORI_COUNT(be, connects, 1);
	hc__mori_log(HC_BE_LOG_INFO, "memory server %s: up, region %" PRIu64 " MiB, lease %u ms%s", s->label,
		     s->size >> 20, s->lease_ms, s->err_none ? ", no peer failure detection" : "");
}

/* One whole message at s->rx: the reply to the request at the queue's head
 * (which, if the reply is bad, fails with the rest). */
static void handle(struct hc_mori *be, struct hc_mori_server *s, const struct hc_mw_hdr *h, const uint8_t *body)
{
	struct hc_mori_req *q = s->rq_head;
	struct hc_mw_count c = { 0 };

	if (!q)
		return hc__mori_server_fail(be, s, -EPROTO, "bad reply: a message with no request waiting (type %u)",
					    h->type);
	if (h->type != (q->type | HC_MW_REPLY) || h->seq != q->seq)
		return hc__mori_server_fail(be, s, -EPROTO, "bad reply: type %u seq %u, expected type %u seq %u",
					    h->type, h->seq, q->type | HC_MW_REPLY, q->seq);
	if (q->type != HC_MW_HELLO) {
		if (h->length >= sizeof(c))
			memcpy(&c, body, sizeof(c));
		if (h->length < sizeof(c) || (q->type == HC_MW_STATS ? c.count > HC_MW_STATS_MAX : c.count != q->n) ||
		    h->length != sizeof(c) + hc_mw_result_size(q->type) * c.count)
			return hc__mori_server_fail(be, s, -EPROTO,
						    "bad reply: %u results in %u bytes to a request of %u", c.count,
						    h->length, q->n);
		/* every item, before any is acted on: a bad one fails the
		 * server with the whole request still queued */
		if (hc__mori_reply_check(be, s, q, body + sizeof(c)) < 0)
			return;
	}
	s->rq_head = q->next;
	if (!s->rq_head)
		s->rq_tail = NULL;
	if (q->type == HC_MW_HELLO) {
		welcome(be, s, body, h->length);
	} else {
		if (q->type == HC_MW_STATS)
			q->n = c.count;
		hc__mori_reply(be, s, q, body + sizeof(c));
	}
	free(q->jobs);
	free(q);
}

static void receive(struct hc_mori *be, struct hc_mori_server *s)
{
	for (;;) {
		struct hc_mw_hdr h;
		ssize_t n;

		if (grow(&s->rx, &s->rx_cap, s->rx_len + 65536, HDR + HC_MW_BODY_MAX + 65536) < 0)
			return hc__mori_server_fail(be, s, -ENOMEM, "no memory for its replies");
		n = recv(s->fd, s->rx + s->rx_len, s->rx_cap - s->rx_len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0)
			return hc__mori_server_fail(be, s, -ECONNRESET, "%s",
						    n == 0 ? "it closed the connection" : strerror(errno));
		s->rx_len += (size_t)n;
		while (s->rx_len >= HDR && s->fd >= 0) {
			size_t whole;

			memcpy(&h, s->rx, HDR);
			if (h.magic != HC_MW_MAGIC || h.length > HC_MW_BODY_MAX ||
			    (s->state == HC_MORI_S_UP && h.version != s->version))
				return hc__mori_server_fail(be, s, -EPROTO, "bad reply: magic %#x version %u length %u",
							    h.magic, h.version, h.length);
			whole = HDR + h.length;
			if (s->rx_len < whole)
				break;
			handle(be, s, &h, s->rx + HDR);
			if (s->fd < 0)
				return; /* it failed */
			memmove(s->rx, s->rx + whole, s->rx_len - whole);
			s->rx_len -= whole;
		}
	}
}

void hc__mori_server_io(struct hc_mori *be, struct hc_mori_server *s, uint32_t events)
{
	if (s->fd < 0)
		return;
	if (s->state == HC_MORI_S_CONNECTING) {
		int e = 0;
		socklen_t el = sizeof(e);

		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &e, &el);
		if (e)
			return hc__mori_server_fail(be, s, -ECONNREFUSED, "connect: %s", strerror(e));
		s->state = HC_MORI_S_HELLO;
		if (hc__mori_server_send(be, s, HC_MW_HELLO, 0, NULL, 0, 0, NULL) < 0)
			return hc__mori_server_fail(be, s, -ENOMEM, "no memory for HELLO");
		return;
	}
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
		receive(be, s);
	if (s->fd >= 0 && (events & EPOLLOUT))
		flush_tx(be, s);
}
