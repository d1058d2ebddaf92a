/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c - GET /metrics over HTTP for Prometheus: the pool's
 * counters and gauges (the service's among them), as hicache-pool stat
 * --prometheus prints them.  One thread, one connection at a time: a
 * scrape is a few KiB every few seconds.  It reads the pool through a
 * read-only attachment, so a scrape never changes it, and never touches
 * the service's threads.  A slow or silent client is dropped after
 * IO_TIMEOUT_S, and never holds up the service.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "hicached.h"

#define IO_TIMEOUT_S 2
#define REQ_MAX      4096

static struct {
	int fd;      /* the listening socket */
	int stop[2]; /* a pipe: written to stop the thread */
	pthread_t thr;
	hc_pool *p;      /* read-only */
	hc_service *svc; /* its L3's figures */
	double started;  /* this hicached's start, seconds since the epoch */
	int running;
} M = { .fd = -1, .stop = { -1, -1 } };

/* "HOST:PORT" (HOST may be [v6]) into a listening socket; -errno with the
 * reason logged. */
static int listen_on(const char *addr)
{
	char host[256];
	const char *colon = strrchr(addr, ':'), *h = addr;
	size_t hl;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai;
	int fd, one = 1, r;

	if (!colon || colon == addr || !colon[1])
		return hcd_log(HC_LOG_ERR, "--metrics-listen '%s': give HOST:PORT, e.g. 127.0.0.1:9464", addr), -EINVAL;
	hl = (size_t)(colon - addr);
	if (*h == '[' && hl >= 2 && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	if (hl >= sizeof(host))
		return hcd_log(HC_LOG_ERR, "--metrics-listen '%s': the host is too long", addr), -EINVAL;
	memcpy(host, h, hl);
	host[hl] = 0;
	if ((r = getaddrinfo(host, colon + 1, &hints, &ai)) != 0)
		return hcd_log(HC_LOG_ERR, "--metrics-listen '%s': %s", addr, gai_strerror(r)), -EINVAL;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0) {
		r = -errno;
		hcd_log(HC_LOG_ERR, "--metrics-listen '%s': %s", addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return r;
	}
	freeaddrinfo(ai);
	return fd;
}

static void send_all(int fd, const char *b, size_t n)
{
	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w <= 0)
			return; /* the client went away, or was too slow: its loss */
		b += w;
		n -= (size_t)w;
	}
}

static void respond(int fd, const char *status, const char *body, size_t len)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %s\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
			 status, len);

	send_all(fd, head, (size_t)n);
	send_all(fd, body, len);
}

/* The L3's figures a scrape shows, of hc_store_stats's (every backend
 * gives the first three; those that evict, evictions). */
struct l3 {
	uint64_t v[4];
	unsigned have;
};
static const char *const l3_names[] = { "objects", "bytes", "capacity_bytes", "evictions" };

static void l3_take(void *arg, const char *name, uint64_t value)
{
	struct l3 *l = arg;

	for (unsigned i = 0; i < 4; i++)
		if (!strcmp(name, l3_names[i])) {
			l->v[i] = value;
			l->have |= 1u << i;
		}
}

static void l3_metrics(FILE *f, const char *pool)
{
	static const char *const family[] = { "l3_objects", "l3_bytes", "l3_capacity_bytes", "l3_evictions_total" };
	static const char *const help[] = {
		"objects in the L3 the service writes to, as its backend counts them",
		"bytes of those objects",
		"the bytes the L3 may hold (0: no limit the backend knows of)",
		"objects the L3 evicted to make room",
	};
	struct hc_store_info si;
	struct l3 l = { { 0 }, 0 };

	if (hc_service_l3_stats(M.svc, &si, sizeof(si), l3_take, &l) < 0)
		return; /* detached, or the backend cannot say: no L3 samples */
	hc_cli_prom_family(f, "l3_info", "gauge", "1, labelled with the backend the service writes to");
	fprintf(f, "hicache_l3_info{pool=\"%s\",backend=\"%s\"} 1\n", pool, si.name);
	for (unsigned i = 0; i < 4; i++)
		if (l.have & 1u << i) {
			hc_cli_prom_family(f, family[i], i == 3 ? "counter" : "gauge", help[i]);
			fprintf(f, "hicache_%s{pool=\"%s\",backend=\"%s\"} %" PRIu64 "\n", family[i], pool, si.name,
				l.v[i]);
		}
}

/* The body of one scrape, malloc'd; NULL on failure. */
static char *scrape(size_t *len)
{
	struct hc_pool_info in;
	struct hc_stats st;
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (!f)
		return NULL;
	if (hc_pool_info(M.p, &in, sizeof(in)) < 0 || hc_pool_stats(M.p, &st, sizeof(st)) < 0) {
		fclose(f);
		free(buf);
		return NULL;
	}
	hc_cli_prometheus(f, &in, &st);
	hc_cli_prom_family(f, "service_up", "gauge", "1 while this hicached serves the pool");
	fprintf(f, "hicache_service_up{pool=\"%s\"} 1\n", in.name);
	hc_cli_prom_family(f, "service_start_time_seconds", "gauge",
			   "when this hicached started, in seconds since the epoch");
	fprintf(f, "hicache_service_start_time_seconds{pool=\"%s\"} %.3f\n", in.name, M.started);
	l3_metrics(f, in.name);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static void serve_one(int fd)
{
	struct timeval tv = { .tv_sec = IO_TIMEOUT_S };
	char req[REQ_MAX + 1], *body;
	size_t got = 0, len;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	/* the request line and headers; nothing after them matters */
	while (got < REQ_MAX) {
		ssize_t r = recv(fd, req + got, REQ_MAX - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
		req[got] = 0;
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
	}
	req[got] = 0;
	if (strncmp(req, "GET ", 4) != 0) {
		static const char m[] = "only GET /metrics is served here\n";
		respond(fd, got ? "405 Method Not Allowed" : "400 Bad Request", m, sizeof(m) - 1);
		return;
	}
	if (strncmp(req + 4, "/metrics ", 9) != 0 && strncmp(req + 4, "/metrics?", 9) != 0 &&
	    strncmp(req + 4, "/metrics\r", 9) != 0) {
		static const char m[] = "not found: the metrics are at /metrics\n";
		respond(fd, "404 Not Found", m, sizeof(m) - 1);
		return;
	}
	if (!(body = scrape(&len))) {
		static const char m[] = "cannot read the pool's stats\n";
		hcd_log(HC_LOG_WARN, "/metrics: cannot read the pool's stats: %s", hc_last_error());
		respond(fd, "500 Internal Server Error", m, sizeof(m) - 1);
		return;
	}
	respond(fd, "200 OK", body, len);
	free(body);
}

static void *metrics_main(void *arg)
{
	struct pollfd pf[2] = { { .fd = M.fd, .events = POLLIN }, { .fd = M.stop[0], .events = POLLIN } };

	(void)arg;
	for (;;) {
		int c;
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			hcd_log(HC_LOG_ERR, "/metrics: poll: %s; no more scrapes", strerror(errno));
			break;
		}
		if (pf[1].revents)
			break;
		if (!(pf[0].revents & POLLIN))
			continue;
		c = accept4(M.fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue; /* the client gave up already, or no fds: the next one */
		serve_one(c);
		close(c);
	}
	return NULL;
}

/* Seconds since the epoch, now. */
static double wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int hcd_metrics_listen(const char *addr)
{
	int fd = listen_on(addr);

	if (!M.started)
		M.started = wall_now(); /* at the start: it binds before anything is made */
	if (fd < 0)
		return fd;
	M.fd = fd;
	return 0;
}

int hcd_metrics_start(const char *addr, const char *pool, const char *dir, int pool_fd, hc_service *svc)
{
	struct hc_attach_opts ao = { .size = sizeof(struct hc_attach_opts), .dir = dir, .flags = HC_ATTACH_READONLY };
	int r;

	if (pool_fd >= 0) {
		ao.flags |= HC_ATTACH_FD;
		ao.fd = pool_fd;
	}
	if (M.fd < 0 && (r = hcd_metrics_listen(addr)) < 0)
		return r;
	if ((r = hc_pool_attach(pool, &ao, &M.p)) < 0) {
		hcd_log(HC_LOG_ERR, "/metrics: %s", hc_last_error());
		goto fail;
	}
	if (pipe2(M.stop, O_CLOEXEC) < 0) {
		r = -errno;
		hcd_log(HC_LOG_ERR, "/metrics: pipe: %s", strerror(errno));
		goto fail;
	}
	M.svc = svc; /* before the thread: its first scrape reads it */
	if ((r = pthread_create(&M.thr, NULL, metrics_main, NULL)) != 0) {
		hcd_log(HC_LOG_ERR, "/metrics: cannot start its thread: %s", strerror(r));
		r = -r;
		goto fail;
	}
	M.running = 1;
	hcd_log(HC_LOG_INFO, "serving the metrics of pool '%s' at http://%s/metrics", pool, addr);
	return 0;
fail:
	hcd_metrics_stop();
	return r;
}

void hcd_metrics_stop(void)
{
	if (M.running) {
		if (write(M.stop[1], "x", 1) < 0)
			hcd_log(HC_LOG_WARN, "/metrics: cannot stop its thread: %s", strerror(errno));
		else
			pthread_join(M.thr, NULL);
		M.running = 0;
	}
	for (int i = 0; i < 2; i++)
		if (M.stop[i] >= 0) {
			close(M.stop[i]);
			M.stop[i] = -1;
		}
	if (M.fd >= 0) {
		close(M.fd);
		M.fd = -1;
	}
	if (M.p) {
		hc_pool_detach(M.p);
		M.p = NULL;
	}
}
