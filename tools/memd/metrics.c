/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c - GET /metrics for Prometheus, in hicache-memd's own event loop:
 * the numbers of a STATS reply, as hicache_memd_<stat> with HELP and TYPE
 * lines.  Scrapes are non-blocking connections like the clients', so a
 * slow scraper holds up no one; one that has not finished in
 * SCRAPE_TIMEOUT_MS is dropped, and more than SCRAPES_MAX at once are
 * refused.  Anything but GET /metrics is answered 404 (or 405).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <hicache/version.h>

#include "memd.h"

#define SCRAPE_TIMEOUT_MS 2000
#define SCRAPES_MAX       16
#define REQ_MAX           4096

struct scrape {
	struct memd_ev ev; /* MEMD_EV_METRICS (first) */
	int fd;
	uint64_t since;
	char req[REQ_MAX + 1];
	size_t got;
	char *out; /* the response, once the request is in */
	size_t out_len, out_off;
	struct memd_link link; /* on scrapes */
};

struct memd_metrics {
	struct memd_ev ev; /* the listener's (first) */
	int fd;
	int epfd;
	const struct memd_dir *d;
	struct memd_list scrapes;
	unsigned n;
	int spare_fd;   /* given back to take (and close) a scrape when no fd is left */
	double started; /* seconds since the epoch */
};

int memd_metrics_open(struct memd_metrics **mp, int epfd, const struct memd_addr *a, const struct memd_dir *d,
		      char *bound, size_t boundlen)
{
	struct memd_metrics *m = calloc(1, sizeof(*m));
	struct epoll_event e = { .events = EPOLLIN };
	struct timespec now;
	int r;

	if (!m) {
		memd_log(MEMD_ERR, "%s: no memory", a->option);
		return -ENOMEM;
	}
	m->ev.kind = MEMD_EV_METRICS;
	m->epfd = epfd;
	m->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	m->d = d;
	clock_gettime(CLOCK_REALTIME, &now);
	m->started = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
	if ((m->fd = memd_listen(a, bound, boundlen)) < 0) {
		r = m->fd;
		free(m);
		return r;
	}
	e.data.ptr = &m->ev;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, m->fd, &e) < 0) {
		r = -errno;
		memd_log(MEMD_ERR, "%s: epoll_ctl: %s", a->option, strerror(-r));
		close(m->fd);
		free(m);
		return r;
	}
	*mp = m;
	return 0;
}

static void scrape_close(struct memd_metrics *m, struct scrape *s)
{
	epoll_ctl(m->epfd, EPOLL_CTL_DEL, s->fd, NULL);
	close(s->fd);
	memd_list_del(&m->scrapes, &s->link);
	m->n--;
	free(s->out);
	free(s);
}

/* The whole response (head and body) into s->out; false: no memory. */
static bool respond(struct memd_metrics *m, struct scrape *s)
{
	static const char ctype[] = "text/plain; version=0.0.4; charset=utf-8";
	const char *status = "200 OK";
	char *body = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&body, &len);

	if (!f)
		return false;
	if (strncmp(s->req, "GET ", 4) != 0) {
		status = "405 Method Not Allowed";
		fputs("only GET /metrics is served here\n", f);
	} else if (strncmp(s->req + 4, "/metrics", 8) != 0 || !strchr(" ?\r\n", s->req[12]) || !s->req[12]) {
		status = "404 Not Found";
		fputs("not found: the metrics are at /metrics\n", f);
	} else {
		fprintf(f,
			"# HELP hicache_memd_build_info 1, labelled with this server's version\n"
			"# TYPE hicache_memd_build_info gauge\nhicache_memd_build_info{version=\"%s\"} 1\n"
			"# HELP hicache_memd_start_time_seconds when this server started, in seconds since the epoch\n"
			"# TYPE hicache_memd_start_time_seconds gauge\nhicache_memd_start_time_seconds %.3f\n",
			HICACHE_VERSION_STRING, m->started);
		for (unsigned i = 0; i < MEMD_ST__COUNT; i++) {
			const struct memd_stat_desc *sd = &memd_stat_desc[i];
			const char *total = sd->kind == MEMD_COUNTER ? "_total" : ""; /* a counter's name says so */

			fprintf(f,
				"# HELP hicache_memd_%s%s %s\n# TYPE hicache_memd_%s%s %s\nhicache_memd_%s%s %" PRIu64
				"\n",
				sd->name, total, sd->help, sd->name, total,
				sd->kind == MEMD_COUNTER ? "counter" : "gauge", sd->name, total, m->d->st[i]);
		}
	}
	if (fclose(f) != 0) {
		free(body);
		return false;
	}
	f = open_memstream(&s->out, &s->out_len);
	if (!f) {
		free(body);
		return false;
	}
	fprintf(f, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status, ctype,
		len);
	fwrite(body, 1, len, f);
	free(body);
	if (fclose(f) != 0) {
		free(s->out);
		s->out = NULL;
		return false;
	}
	return true;
}

/* Send what the socket takes; closed once all is sent or it fails. */
static void scrape_send(struct memd_metrics *m, struct scrape *s)
{
	while (s->out_off < s->out_len) {
		ssize_t n = send(s->fd, s->out + s->out_off, s->out_len - s->out_off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct epoll_event e = { .events = EPOLLOUT, .data.ptr = &s->ev };

			epoll_ctl(m->epfd, EPOLL_CTL_MOD, s->fd, &e);
			return;
		}
		if (n <= 0)
			break; /* the scraper went away: its loss */
		s->out_off += (size_t)n;
	}
	scrape_close(m, s);
}

static void scrape_read(struct memd_metrics *m, struct scrape *s)
{
	ssize_t n = recv(s->fd, s->req + s->got, REQ_MAX - s->got, 0);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n <= 0) {
		scrape_close(m, s);
		return;
	}
	s->got += (size_t)n;
	s->req[s->got] = '\0';
	/* the request line and headers; nothing after them matters */
	if (!strstr(s->req, "\r\n\r\n") && !strstr(s->req, "\n\n") && s->got < REQ_MAX)
		return;
	if (!respond(m, s)) {
		memd_log(MEMD_WARN, "/metrics: no memory for a response");
		scrape_close(m, s);
		return;
	}
	scrape_send(m, s);
}

static void accept_scrapes(struct memd_metrics *m, uint64_t now)
{
	for (;;) {
		int fd = accept4(m->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct epoll_event e = { .events = EPOLLIN };
		struct scrape *s;

		if (fd < 0 && (errno == EMFILE || errno == ENFILE) && m->spare_fd >= 0) {
			/* no fd left: the listener would stay readable and the
			 * loop spin; take the scrape with the spare and close it */
			close(m->spare_fd);
			if ((fd = accept(m->fd, NULL, NULL)) >= 0)
				close(fd);
			m->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				return;
			continue;
		}
		if (fd < 0)
			return; /* EAGAIN: the next event tries again */
		if (m->n >= SCRAPES_MAX || !(s = calloc(1, sizeof(*s)))) {
			close(fd); /* a scraper retries at its next interval */
			continue;
		}
		s->ev.kind = MEMD_EV_METRICS;
		s->fd = fd;
		s->since = now;
		e.data.ptr = &s->ev;
		if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, fd, &e) < 0) {
			close(fd);
			free(s);
			continue;
		}
		memd_list_push(&m->scrapes, &s->link);
		m->n++;
	}
}

void memd_metrics_event(struct memd_metrics *m, struct memd_ev *ev, uint32_t events, uint64_t now_ms)
{
	struct scrape *s = (struct scrape *)ev;

	if (ev == &m->ev) {
		accept_scrapes(m, now_ms);
		return;
	}
	/* a scrape closed earlier in this turn cannot be named here: scrapes
	 * close only from their own events and the sweep, which runs between
	 * turns */
	if (s->out)
		scrape_send(m, s);
	else if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
		scrape_read(m, s);
}

void memd_metrics_sweep(struct memd_metrics *m, uint64_t now_ms)
{
	for (struct memd_link *k = m->scrapes.head, *next; k; k = next) {
		struct scrape *s = memd_entry(k, struct scrape, link);

		next = k->next;
		if (now_ms - s->since > SCRAPE_TIMEOUT_MS)
			scrape_close(m, s);
	}
}

void memd_metrics_close(struct memd_metrics *m)
{
	while (m->scrapes.head)
		scrape_close(m, memd_entry(m->scrapes.head, struct scrape, link));
	close(m->fd);
	if (m->spare_fd >= 0)
		close(m->spare_fd);
	free(m);
}
