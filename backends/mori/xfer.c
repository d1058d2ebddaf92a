/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xfer.c - the progress thread: it turns jobs into control requests to
 * their servers (one request per server, opcode and batch), starts the
 * one-sided transfers the replies allow, polls the UCX worker for their
 * completions, and completes each job.
 *
 *   GET     LOOKUP with a lease -> ucp_get_nbx of each buffer from the
 *           region -> the job completes -> RELEASE of the lease (batched)
 *   PUT     ALLOC (a leased grant) -> ucp_put_nbx of each buffer -> one
 *           ucp_ep_flush_nbx for the server's finished puts (remote
 *           completion) -> COMMIT: only now can a reader find the object
 *   EXISTS  LOOKUP without a lease
 *   DELETE  DELETE
 *
 * The thread sleeps in epoll on the eventfd, the servers' sockets and the
 * worker's event fd, armed; while transfers are in flight it polls.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "mori.h"

#define SPIN_MS 2 /* poll this long after the last event before sleeping */

/* ---- ending jobs */

static int64_t miss_result(const struct hc_mori_job *j)
{
	switch (j->opcode) {
	case HC_BE_OP_EXISTS:
		return 0;
	case HC_BE_OP_PUT:
		return -EHOSTDOWN;
	default:
		return -ENOENT;
	}
}

/* A job whose server is not up: a miss (PUT: -EHOSTDOWN). */
static void complete_down(struct hc_mori *be, struct hc_mori_job *j)
{
	HC_MORI_COUNT(be, server_down, 1);
	hc__mori_complete(be, j, miss_result(j));
}

/* ---- releases: batched per server, sent once a turn */

static void release(struct hc_mori *be, struct hc_mori_server *s, uint64_t id)
{
	struct hc_mori_release *r = &be->releases[s - be->servers];

	if (s->state != HC_MORI_S_UP || !id)
		return; /* a failed server forgets it; its lease expires */
	if (r->n == r->cap) {
		unsigned cap = r->cap ? r->cap * 2 : 64;
		uint64_t *p = realloc(r->ids, cap * sizeof(*p));
		if (!p)
			return; /* the lease expires on the server */
		r->ids = p;
		r->cap = cap;
	}
	r->ids[r->n++] = id;
}

static void send_releases(struct hc_mori *be)
{
	for (unsigned i = 0; i < be->nservers; i++) {
		struct hc_mori_release *r = &be->releases[i];
		struct hc_mori_server *s = &be->servers[i];
		unsigned off = 0;

		while (off < r->n && s->state == HC_MORI_S_UP) {
			unsigned k = r->n - off < s->batch_max ? r->n - off : s->batch_max;
			if (hc__mori_server_send(be, s, HC_MW_RELEASE, 0, r->ids + off, sizeof(uint64_t), k, NULL) < 0)
				break; /* the leases expire on the server */
			off += k;
		}
		r->n = 0;
	}
}

/* ---- transfers */

/* A transfer's callback (inside ucp_worker_progress): one request of a
 * job's is done. */
static void xfer_done(void *request, ucs_status_t status, void *user_data)
{
	struct hc_mori_job *j = user_data;
	struct hc_mori *be = j->be;

	if (status != UCS_OK && !j->xfer_status)
		j->xfer_status = status == UCS_ERR_CANCELED ? -ECANCELED : -EIO;
	j->pending--;
	be->ntransfers--;
	ucp_request_free(request);
	if (!j->pending) {
		j->next = be->finished;
		be->finished = j;
	}
}

/* The server's jobs between their transfer's start and its end (a put's:
 * its flush), oldest first: deadlines() fails the server when the oldest
 * outlives its lease. */
static void xlist_add(struct hc_mori_server *s, struct hc_mori_job *j)
{
	j->xnext = NULL;
	j->xprev = s->xtail;
	if (s->xtail)
		s->xtail->xnext = j;
	else
		s->xhead = j;
	s->xtail = j;
}

static void xlist_del(struct hc_mori_server *s, struct hc_mori_job *j)
{
	if (j->xprev)
		j->xprev->xnext = j->xnext;
	else if (s->xhead == j)
		s->xhead = j->xnext;
	else
		return; /* not on it */
	if (j->xnext)
		j->xnext->xprev = j->xprev;
	else
		s->xtail = j->xprev;
	j->xprev = j->xnext = NULL;
}

/* Start one get or put per buffer (as much as the object has); each
 * finished request counts down j->pending. */
static void start_transfer(struct hc_mori *be, struct hc_mori_server *s, struct hc_mori_job *j)
{
	uint64_t left = j->opcode == HC_BE_OP_GET ? (j->length < j->bytes ? j->length : j->bytes) : j->bytes;
	uint64_t remote = s->base + j->offset;

	j->server_epoch = s->epoch;
	xlist_add(s, j);
	if (!s->xfer_jobs++)
		s->xfer_last_ms = hc__mori_now_ms();
	j->pending = 1; /* held until every request is started */
	for (unsigned v = 0; v < j->iovcnt && left && !j->xfer_status; v++) {
		size_t n = j->iov[v].iov_len < left ? j->iov[v].iov_len : (size_t)left;
		ucp_request_param_t p = {
			.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
			.cb.send = xfer_done,
			.user_data = j,
		};
		void *r;

		if (!n)
			continue;
		if ((p.memh = hc__mori_memh(be, j->iov[v].iov_base, n))) {
			p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
			HC_MORI_COUNT(be, zero_copy, 1);
		}
		r = j->opcode == HC_BE_OP_GET ? ucp_get_nbx(s->ep, j->iov[v].iov_base, n, remote, s->rkey, &p)
					      : ucp_put_nbx(s->ep, j->iov[v].iov_base, n, remote, s->rkey, &p);
		HC_MORI_COUNT(be, transfers, 1);
		if (UCS_PTR_IS_ERR(r)) {
			j->xfer_status = -EIO;
			hc__mori_warn_once(be, HC_MORI_WARN_TRANSFER, "memory server %s: a %s failed to start: %s",
					   s->label, j->opcode == HC_BE_OP_GET ? "get" : "put",
					   ucs_status_string(UCS_PTR_STATUS(r)));
		} else if (r) {
			j->pending++;
			be->ntransfers++;
		}
		remote += n;
		left -= n;
	}
	if (--j->pending == 0) {
		j->next = be->finished;
		be->finished = j;
	}
}

/* Every request of j's is done. */
static void transfer_finished(struct hc_mori *be, struct hc_mori_job *j)
{
	struct hc_mori_server *s = &be->servers[j->server];
	bool same = s->state == HC_MORI_S_UP && s->epoch == j->server_epoch;
	int err = j->xfer_status ? j->xfer_status : same ? 0 : -ECONNRESET;

	if (s->epoch == j->server_epoch && s->xfer_jobs) {
		s->xfer_jobs--;
		s->xfer_last_ms = hc__mori_now_ms();
	}

	if (j->opcode == HC_BE_OP_GET) {
		xlist_del(s, j);
		if (same) {
			release(be, s, j->lease);
			if (!err)
				s->backoff_ms = 0; /* it works: a later failure backs off from the start */
		}
		if (err) {
			hc__mori_complete(be, j, err);
			return;
		}
		HC_MORI_COUNT(be, hits, 1);
		HC_MORI_COUNT(be, get_bytes, j->length);
		hc__mori_complete(be, j, (int64_t)j->length);
		return;
	}
	/* PUT: written locally; remotely once the endpoint is flushed.  One
	 * that failed or was cancelled is flushed too before its grant is
	 * given back: bytes still on their way must not land in room the
	 * server has given to another object. */
	if (!same) {
		xlist_del(s, j);
		hc__mori_complete(be, j, err);
		return;
	}
	if (err || atomic_load_explicit(&j->canceled, memory_order_relaxed))
		j->abort = err ? err : -ECANCELED;
	j->next = s->flushq;
	s->flushq = j;
}

static void flush_done(void *request, ucs_status_t status, void *user_data)
{
	struct hc_mori_server *s = user_data;

	s->flush_status = status;
	s->flush_ended = true;
	ucp_request_free(request);
}

/* COMMIT the puts a finished flush covered (or fail them). */
static void commit(struct hc_mori *be, struct hc_mori_server *s, struct hc_mori_job *list, int err)
{
	struct hc_mori_job *batch[HC_MW_BATCH_MAX];
	uint64_t tokens[HC_MW_BATCH_MAX];
	unsigned n = 0;

	while (list || n) {
		struct hc_mori_job *j = list;
		bool full = n == (s->batch_max ? s->batch_max : 1) || !list;

		if (full) {
			if (hc__mori_server_send(be, s, HC_MW_COMMIT, 0, tokens, sizeof(uint64_t), n, batch) < 0)
				for (unsigned i = 0; i < n; i++)
					hc__mori_complete(be, batch[i], -ENOBUFS);
			n = 0;
			continue;
		}
		list = j->next;
		xlist_del(s, j);
		if (err || s->state != HC_MORI_S_UP || s->epoch != j->server_epoch) {
			hc__mori_complete(be, j, err ? err : -ECONNRESET);
			continue;
		}
		if (j->abort) { /* flushed: its grant can go */
			release(be, s, j->lease);
			hc__mori_complete(be, j, j->abort);
			continue;
		}
		tokens[n] = j->lease;
		batch[n++] = j;
	}
}

/* Flush each server's finished puts, and commit what a flush covered. */
static void flushes(struct hc_mori *be)
{
	for (unsigned i = 0; i < be->nservers; i++) {
		struct hc_mori_server *s = &be->servers[i];

		if (s->flush_req && s->flush_ended) {
			struct hc_mori_job *list = s->flushing;
			s->flush_req = NULL;
			s->flushing = NULL;
			be->ntransfers--;
			commit(be, s, list, s->flush_status == UCS_OK ? 0 : -EIO);
		}
		if (s->flushq && !s->flush_req) {
			ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
								  UCP_OP_ATTR_FIELD_USER_DATA,
						  .cb.send = flush_done,
						  .user_data = s };
			struct hc_mori_job *list = s->flushq;
			void *r;

			s->flushq = NULL;
			if (s->state != HC_MORI_S_UP) {
				commit(be, s, list, -ECONNRESET);
				continue;
			}
			r = ucp_ep_flush_nbx(s->ep, &p);
			if (UCS_PTR_IS_PTR(r)) {
				s->flush_req = r;
				s->flush_ms = hc__mori_now_ms();
				s->flush_ended = false;
				s->flushing = list;
				be->ntransfers++;
			} else {
				commit(be, s, list, UCS_PTR_IS_ERR(r) ? -EIO : 0);
			}
		}
	}
}

/* ---- replies */

/* How long a transfer (and a put's flush) may run from the request that
 * leased its bytes: io_timeout_ms, and at most half the lease, so that it
 * ends well before the server may give the bytes to another object. */
static uint64_t lease_budget(const struct hc_mori *be, const struct hc_mori_server *s)
{
	uint64_t half = s->lease_ms / 2;

	return half && half < be->o.io_timeout_ms ? half : be->o.io_timeout_ms;
}

int hc__mori_reply_check(struct hc_mori *be, struct hc_mori_server *s, const struct hc_mori_req *req,
			 const uint8_t *results)
{
	for (uint32_t i = 0; i < req->n; i++) {
		if (req->type == HC_MW_LOOKUP) {
			struct hc_mw_found f;

			memcpy(&f, results + i * sizeof(f), sizeof(f));
			if (f.status == 0 && (f.offset > s->size || f.length > s->size - f.offset)) {
				hc__mori_server_fail(be, s, -EPROTO,
						     "bad reply: an object at %" PRIu64 "+%" PRIu64
						     " is outside its region",
						     f.offset, f.length);
				return -EPROTO;
			}
		} else if (req->type == HC_MW_ALLOC) {
			struct hc_mw_grant g;

			memcpy(&g, results + i * sizeof(g), sizeof(g));
			if (g.status == 0 && (g.offset > s->size || req->jobs[i]->bytes > s->size - g.offset ||
					      g.offset % HC_MW_ALIGN)) {
				hc__mori_server_fail(be, s, -EPROTO,
						     "bad reply: a grant at %" PRIu64 "+%" PRIu64
						     " is outside its region",
						     g.offset, req->jobs[i]->bytes);
				return -EPROTO;
			}
		}
	}
	return 0;
}

static int64_t wire_status(int32_t st)
{
	return st < 0 && st > -4096 ? st : -EPROTO;
}

void hc__mori_reply(struct hc_mori *be, struct hc_mori_server *s, struct hc_mori_req *req, const uint8_t *results)
{
	for (uint32_t i = 0; i < req->n; i++) {
		struct hc_mori_job *j = req->jobs ? req->jobs[i] : NULL;
		bool canceled = j && atomic_load_explicit(&j->canceled, memory_order_relaxed);

		switch (req->type) {
		case HC_MW_LOOKUP: {
			struct hc_mw_found f;

			memcpy(&f, results + i * sizeof(f), sizeof(f));
			if (f.status == 0 && (f.offset > s->size || f.length > s->size - f.offset))
				return hc__mori_server_fail(be, s, -EPROTO,
							    "bad reply: an object at %" PRIu64 "+%" PRIu64
							    " is outside its region",
							    f.offset, f.length);
			if (j->opcode == HC_BE_OP_EXISTS) {
				if (f.status == 0 || f.status == -ENOENT)
					hc__mori_complete(be, j, f.status == 0);
				else
					hc__mori_complete(be, j, wire_status(f.status));
				break;
			}
			if (f.status) {
				if (f.status == -ENOENT)
					HC_MORI_COUNT(be, misses, 1);
				hc__mori_complete(be, j, wire_status(f.status));
				break;
			}
			j->offset = f.offset;
			j->length = f.length;
			j->lease = f.lease;
			j->lease_end_ms = req->sent_ms + lease_budget(be, s);
			if (canceled) {
				release(be, s, f.lease);
				hc__mori_complete(be, j, -ECANCELED);
				break;
			}
			start_transfer(be, s, j);
			break;
		}
		case HC_MW_ALLOC: {
			struct hc_mw_grant g;

			memcpy(&g, results + i * sizeof(g), sizeof(g));
			if (g.status == 0 && (g.offset > s->size || j->bytes > s->size - g.offset))
				return hc__mori_server_fail(be, s, -EPROTO,
							    "bad reply: a grant at %" PRIu64 "+%" PRIu64
							    " is outside its region",
							    g.offset, j->bytes);
			if (g.status) {
				if (g.status == -ENOSPC) {
					HC_MORI_COUNT(be, enospc, 1);
					hc__mori_warn_once(be, HC_MORI_WARN_FULL,
							   "memory server %s: an object of %" PRIu64
							   " bytes can never fit its region of %" PRIu64 " bytes",
							   s->label, j->bytes, s->size);
				} else if (g.status == -EBUSY) {
					HC_MORI_COUNT(be, ebusy, 1);
				}
				hc__mori_complete(be, j, wire_status(g.status));
				break;
			}
			j->offset = g.offset;
			j->length = j->bytes;
			j->lease = g.token;
			j->lease_end_ms = req->sent_ms + lease_budget(be, s);
			if (canceled) {
				release(be, s, g.token);
				hc__mori_complete(be, j, -ECANCELED);
				break;
			}
			start_transfer(be, s, j);
			break;
		}
		case HC_MW_COMMIT:
		case HC_MW_DELETE: {
			struct hc_mw_status st;

			memcpy(&st, results + i * sizeof(st), sizeof(st));
			if (req->type == HC_MW_COMMIT && st.status == -ESTALE) {
				/* the lease ran out before the commit: nothing stored */
				HC_MORI_COUNT(be, stale, 1);
				hc__mori_complete(be, j, -ETIMEDOUT);
			} else if (req->type == HC_MW_COMMIT && st.status == 0) {
				HC_MORI_COUNT(be, put_bytes, j->bytes);
				hc__mori_complete(be, j, 0);
			} else {
				hc__mori_complete(be, j,
						  st.status == 0 || st.status == -ENOENT ? st.status
											 : wire_status(st.status));
			}
			break;
		}
		case HC_MW_STATS: {
			struct hc_mw_stat st;

			memcpy(&st, results + i * sizeof(st), sizeof(st));
			st.name[HC_MW_STAT_NAME - 1] = '\0';
			if (!strcmp(st.name, "objects"))
				s->stat_objects = st.value;
			else if (!strcmp(st.name, "object_bytes"))
				s->stat_bytes = st.value;
			else if (!strcmp(st.name, "region_bytes"))
				s->stat_capacity = st.value;
			else if (!strcmp(st.name, "evictions"))
				s->stat_evictions = st.value;
			break;
		}
		default: /* RELEASE: nothing waits for it */
			break;
		}
	}
	if (req->type == HC_MW_STATS && be->stats_waiting)
		be->stats_waiting--;
}

void hc__mori_req_fail(struct hc_mori *be, struct hc_mori_server *s, struct hc_mori_req *req, int errnum)
{
	(void)s;
	if (req->type == HC_MW_STATS && be->stats_waiting)
		be->stats_waiting--;
	if (!req->jobs)
		return;
	for (uint32_t i = 0; i < req->n; i++)
		hc__mori_complete(be, req->jobs[i], errnum);
}

void hc__mori_server_lost(struct hc_mori *be, struct hc_mori_server *s, int errnum)
{
	/* puts waiting for a flush: their bytes may not have landed */
	commit(be, s, s->flushq, errnum);
	s->flushq = NULL;
	/* a flush in flight ends with the endpoint's close; its jobs then fail
	 * (commit sees the server's new state) */
	be->releases[s - be->servers].n = 0;
}

/* ---- dispatch: NEW jobs into requests, per server and opcode */

/* One request for jobs[0..n) of one opcode on s. */
static int send_batch(struct hc_mori *be, struct hc_mori_server *s, uint32_t opcode, struct hc_mori_job **jobs,
		      unsigned n)
{
	static _Thread_local uint8_t items[HC_MW_BATCH_MAX * sizeof(struct hc_mw_alloc)];
	uint16_t type = opcode == HC_BE_OP_PUT ? HC_MW_ALLOC : opcode == HC_BE_OP_DELETE ? HC_MW_DELETE : HC_MW_LOOKUP;
	size_t isz = type == HC_MW_ALLOC ? sizeof(struct hc_mw_alloc) : HC_MW_NAME_BYTES;

	for (unsigned i = 0; i < n; i++) {
		if (type == HC_MW_ALLOC) {
			struct hc_mw_alloc a = { .length = jobs[i]->bytes };
			memcpy(a.name, jobs[i]->name, HC_MW_NAME_BYTES);
			memcpy(items + i * isz, &a, isz);
		} else {
			memcpy(items + i * isz, jobs[i]->name, isz);
		}
	}
	return hc__mori_server_send(be, s, type, opcode == HC_BE_OP_GET ? HC_MW_LOOKUP_LEASE : 0, items, isz, n, jobs);
}

static void dispatch(struct hc_mori *be, uint64_t now)
{
	struct hc_mori_job **pp = &be->work;
	static const uint32_t opcodes[] = { HC_BE_OP_GET, HC_BE_OP_EXISTS, HC_BE_OP_PUT, HC_BE_OP_DELETE };

	/* first what needs no server */
	while (*pp) {
		struct hc_mori_job *j = *pp;
		struct hc_mori_server *s;

		if (atomic_load_explicit(&j->canceled, memory_order_relaxed)) {
			*pp = j->next;
			hc__mori_complete(be, j, -ECANCELED);
			continue;
		}
		j->server = hc__mori_place(be, j->name);
		s = &be->servers[j->server];
		if (s->state == HC_MORI_S_DOWN || s->state == HC_MORI_S_CLOSING ||
		    (s->state != HC_MORI_S_UP && now > j->deadline_ms)) {
			*pp = j->next;
			complete_down(be, j);
			continue;
		}
		pp = &j->next;
	}
	/* then one request per server, opcode and batch */
	for (unsigned i = 0; i < be->nservers; i++) {
		struct hc_mori_server *s = &be->servers[i];

		if (s->state != HC_MORI_S_UP)
			continue;
		for (unsigned o = 0; o < sizeof(opcodes) / sizeof(opcodes[0]); o++) {
			struct hc_mori_job *jobs[HC_MW_BATCH_MAX];
			unsigned n = 0, max = be->o.batch < s->batch_max ? be->o.batch : s->batch_max;
			bool more = true;

			while (more && s->state == HC_MORI_S_UP && !s->tx_err) {
				more = false;
				n = 0;
				for (pp = &be->work; *pp && n < max;) {
					struct hc_mori_job *j = *pp;
					if (j->server != i || j->opcode != opcodes[o]) {
						pp = &j->next;
						continue;
					}
					jobs[n++] = j;
					*pp = j->next;
				}
				if (!n)
					break;
				more = n == max;
				if (send_batch(be, s, opcodes[o], jobs, n) < 0) {
					/* the server's queue is full: back on the list for later */
					for (unsigned k = n; k-- > 0;) {
						jobs[k]->next = be->work;
						be->work = jobs[k];
					}
					more = false;
				}
			}
		}
	}
}

/* ---- stats: the servers' own figures, asked for by stats() */

static void collect_stats(struct hc_mori *be)
{
	uint64_t want;

	pthread_mutex_lock(&be->mu);
	want = be->stats_want;
	pthread_mutex_unlock(&be->mu);
	if (want > be->stats_asked && !be->stats_waiting) {
		be->stats_asked = want;
		for (unsigned i = 0; i < be->nservers; i++) {
			struct hc_mori_server *s = &be->servers[i];
			s->stat_objects = s->stat_bytes = s->stat_capacity = s->stat_evictions = 0;
			if (s->state != HC_MORI_S_UP || s->tx_err)
				continue;
			be->stats_waiting++; /* before: a failed server's request takes it back */
			if (hc__mori_server_send(be, s, HC_MW_STATS, 0, NULL, 0, 0, NULL) < 0)
				be->stats_waiting--;
		}
	}
	if (be->stats_asked > be->stats_gen && !be->stats_waiting) {
		uint64_t objects = 0, bytes = 0, capacity = 0, evictions = 0;

		for (unsigned i = 0; i < be->nservers; i++) {
			objects += be->servers[i].stat_objects;
			bytes += be->servers[i].stat_bytes;
			capacity += be->servers[i].stat_capacity;
			evictions += be->servers[i].stat_evictions;
		}
		pthread_mutex_lock(&be->mu);
		be->stat_objects = objects;
		be->stat_bytes = bytes;
		be->stat_capacity = capacity;
		be->stat_evictions = evictions;
		be->stats_gen = be->stats_asked;
		pthread_cond_broadcast(&be->stats_cv);
		pthread_mutex_unlock(&be->mu);
	}
}

/* ---- the loop */

/* NEW jobs past their deadline (their server never came up) and transfers
 * past theirs (the server is hung: failing it cancels them). */
static void deadlines(struct hc_mori *be, uint64_t now)
{
	for (unsigned i = 0; i < be->nservers; i++) {
		struct hc_mori_server *s = &be->servers[i];
		if (s->state == HC_MORI_S_UP && s->xhead && s->xhead->server_epoch == s->epoch &&
		    now > s->xhead->lease_end_ms) {
			HC_MORI_COUNT(be, timeouts, 1);
			hc__mori_server_fail(
				be, s, -ETIMEDOUT,
				"a transfer outlived its lease (%u ms of the lease's %u, io_timeout_ms=%u)",
				(unsigned)(now - s->xhead->lease_end_ms + lease_budget(be, s)), s->lease_ms,
				be->o.io_timeout_ms);
		} else if (s->state == HC_MORI_S_UP && s->xfer_jobs && now > s->xfer_last_ms + be->o.io_timeout_ms) {
			HC_MORI_COUNT(be, timeouts, 1);
			hc__mori_server_fail(be, s, -ETIMEDOUT, "its transfers made no progress in %u ms",
					     be->o.io_timeout_ms);
		} else if (s->state == HC_MORI_S_UP && s->flush_req && now > s->flush_ms + be->o.io_timeout_ms) {
			HC_MORI_COUNT(be, timeouts, 1);
			hc__mori_server_fail(be, s, -ETIMEDOUT, "a flush of its puts took over %u ms",
					     be->o.io_timeout_ms);
		}
	}
}

static bool take_incoming(struct hc_mori *be, uint64_t now)
{
	struct hc_mori_job *in, **tail = &be->work;
	bool stop;

	pthread_mutex_lock(&be->mu);
	in = be->incoming;
	be->incoming = be->incoming_tail = NULL;
	stop = be->stop;
	pthread_mutex_unlock(&be->mu);
	while (*tail)
		tail = &(*tail)->next;
	*tail = in;
	for (; in; in = in->next)
		if (!in->deadline_ms)
			in->deadline_ms = now + be->o.io_timeout_ms;
	return stop;
}

void *hc__mori_thread(void *arg)
{
	struct hc_mori *be = arg;
	uint64_t last_event = 0;

	for (;;) {
		struct epoll_event ev[16];
		uint64_t now = hc__mori_now_ms();
		int n, timeout;

		if (take_incoming(be, now))
			break;
		for (unsigned i = 0; i < be->nservers; i++)
			hc__mori_server_tick(be, &be->servers[i], now);
		dispatch(be, now);
		while (ucp_worker_progress(be->worker))
			last_event = now;
		while (be->finished) {
			struct hc_mori_job *j = be->finished;
			be->finished = j->next;
			transfer_finished(be, j);
			last_event = now;
		}
		flushes(be);
		send_releases(be);
		collect_stats(be);
		deadlines(be, now);
		/* sleep only when nothing is in flight, or nothing moved for a while */
		timeout = 100;
		if (be->work)
			timeout = 1; /* waiting for a server to come up */
		if (be->ntransfers && now < last_event + SPIN_MS) {
			timeout = 0;
		} else if (ucp_worker_arm(be->worker) == UCS_ERR_BUSY) {
			timeout = 0;
		} else if (be->ntransfers) {
			timeout = 1;
		}
		n = epoll_wait(be->epfd, ev, 16, timeout);
		for (int i = 0; i < n; i++) {
			uint64_t id = ev[i].data.u64;
			if (id == 0) {
				uint64_t v;
				if (read(be->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					hc__mori_log(HC_BE_LOG_ERR, "eventfd: %s", strerror(errno));
			} else if (id >= 2 && id - 2 < be->nservers) {
				hc__mori_server_io(be, &be->servers[id - 2], ev[i].events);
			}
			last_event = hc__mori_now_ms();
		}
	}
	return NULL;
}

ucp_mem_h hc__mori_memh(struct hc_mori *be, const void *p, size_t len)
{
	const uint8_t *b = p;
	ucp_mem_h h = NULL;

	pthread_mutex_lock(&be->reg_mu);
	for (struct hc_mori_reg *r = be->regs; r && !h; r = r->next)
		if (b >= r->addr && len <= r->len && (size_t)(b - r->addr) <= r->len - len)
			h = r->memh;
	pthread_mutex_unlock(&be->reg_mu);
	return h;
}

unsigned hc__mori_connect_all(struct hc_mori *be)
{
	uint64_t end = hc__mori_now_ms() + be->o.connect_timeout_ms + 100;
	unsigned up = 0, waiting = 1;

	while (waiting && hc__mori_now_ms() < end) {
		struct epoll_event ev[16];
		uint64_t now = hc__mori_now_ms();
		int n;

		waiting = 0;
		for (unsigned i = 0; i < be->nservers; i++) {
			struct hc_mori_server *s = &be->servers[i];
			if (s->state == HC_MORI_S_DOWN && !s->backoff_ms)
				hc__mori_server_tick(be, s, now); /* its first try */
			else if (s->state != HC_MORI_S_DOWN)
				hc__mori_server_tick(be, s, now);
			waiting += s->state == HC_MORI_S_CONNECTING || s->state == HC_MORI_S_HELLO ||
				   s->state == HC_MORI_S_CLOSING;
		}
		ucp_worker_progress(be->worker);
		n = epoll_wait(be->epfd, ev, 16, waiting ? 5 : 0);
		for (int i = 0; i < n; i++)
			if (ev[i].data.u64 >= 2 && ev[i].data.u64 - 2 < be->nservers)
				hc__mori_server_io(be, &be->servers[ev[i].data.u64 - 2], ev[i].events);
	}
	for (unsigned i = 0; i < be->nservers; i++)
		up += be->servers[i].state == HC_MORI_S_UP;
	return up;
}
