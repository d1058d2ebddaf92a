/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memcached.c - the "memcached" L3 backend: the plugin table, the job queue
 * and its workers, stats and ctl.
 *
 *     A distributed L3 on memcached servers, through libmemcached and the
 *     binary protocol, so the services of many nodes share one L3 on
 *     servers that are already deployed.  Objects are spread by consistent
 *     hashing (ketama); an object larger than an item is split into chunk
 *     items, with a small manifest item written last, and every item of an
 *     object lives on one server (names.c).  A missing or inconsistent
 *     chunk, such as one that memcached evicted, makes the whole object a
 *     miss, never a mix.
 *
 *     The backend is asynchronous: submit copies the ops and queues them;
 *     worker threads, each with its own connection to every server, take a
 *     share of the queue at a time and run it as one batch (batch.c): a
 *     multi-get of the manifests (EXISTS), a multi-get of manifests and
 *     chunks (GET, each object completed as soon as its last chunk is in),
 *     or one object's sets (PUT: its chunks, then its manifest).  Sets are
 *     synchronous: libmemcached's pipelined modes (NOREPLY, BUFFER_REQUESTS)
 *     lose the result of each item, and with TCP_NODELAY synchronous sets of
 *     large values run as fast; the workers set side by side.
 *
 *     A server that fails its connects, or answers nothing in time, is left
 *     alone by every worker for a while and rejoins by itself (conn.c,
 *     batch.c).  Keys never move to other servers (conn.c says why), so no
 *     server holds an older copy that a get could find.  Nothing a failed or
 *     misbehaving server returns reaches a rank unchecked: the host verifies
 *     every object.
 *
 *     Options, ctl keys, results and statistics:
 *     hicache-backend-memcached(7).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mc.h"

static const struct hc_backend_host *_Atomic g_host;

const struct hc_backend_host *hc__mc_host(void)
{
	return atomic_load_explicit(&g_host, memory_order_acquire);
}

/* ---- the queue (under be->mu) */

static void push_done_locked(struct hc_mc *be, struct hc_mc_job *j)
{
	j->next = NULL;
	if (be->dtail)
		be->dtail->next = j;
	else
		be->dhead = j;
	be->dtail = j;
	be->ndone++;
}

/* A job with its result: counted if it failed (a miss is no failure), and
 * handed to the reapers. */
static void finish_locked(struct hc_mc *be, struct hc_mc_job *j)
{
	if (j->result < 0 && j->result != -ENOENT)
		HC_MC_COUNT(be, errors, 1);
	push_done_locked(be, j);
}

/* Take the queued job *pp (prev: the one before it, or NULL) off the queue. */
static void unqueue_locked(struct hc_mc *be, struct hc_mc_job **pp, struct hc_mc_job *prev)
{
	struct hc_mc_job *j = *pp;

	*pp = j->next;
	if (be->qtail == j)
		be->qtail = prev;
	j->next = NULL;
	be->nqueued--;
}

/*
 * Take a worker's share of the queue: the head's opcode, and the queued
 * jobs of that opcode behind it, up to batch and to an equal share of what
 * is queued among the workers that are idle (so one worker does not take
 * what three others could run at the same time).
 */
static unsigned take_locked(struct hc_mc *be, struct hc_mc_job **out)
{
	uint32_t opcode = be->qhead->opcode;
	unsigned share = (be->nqueued + be->idle) / (be->idle + 1), n = 0;
	struct hc_mc_job **pp = &be->qhead, *prev = NULL;
	uint64_t keys = 0;

	if (opcode == HC_BE_OP_EXISTS || opcode == HC_BE_OP_DELETE)
		share = be->nqueued; /* small ops: one round trip for all */
	else if (opcode == HC_BE_OP_PUT)
		share = 1; /* sets are synchronous: one object each, workers side by side */
	share = share < be->o.batch ? share : be->o.batch;
	share = share ? share : 1;
	while (*pp && n < share) {
		struct hc_mc_job *j = *pp;
		if (j->opcode != opcode) {
			prev = j;
			pp = &j->next;
			continue;
		}
		if (opcode == HC_BE_OP_GET || opcode == HC_BE_OP_EXISTS) {
			/* one request per key in a multi-get: the answers are matched
			 * by key, so a name twice waits for the next batch */
			bool twice = false;
			for (unsigned i = 0; i < n && !twice; i++)
				twice = !memcmp(out[i]->name, j->name, HC_BE_NAME_BYTES);
			if (twice) {
				prev = j;
				pp = &j->next;
				continue;
			}
		}
		if (opcode == HC_BE_OP_GET) {
			/* a multi-get's requests must not pile up behind the answers
			 * (libmemcached reads little while it writes): a few thousand keys */
			keys += 1 + (j->bytes + be->chunk_bytes - 1) / be->chunk_bytes;
			if (n && keys > HC_MC_MGET_KEYS)
				break;
		}
		unqueue_locked(be, pp, prev);
		out[n++] = j;
	}
	be->nrunning += n;
	return n;
}

/* A job of a running batch is done: hand it to the reapers now. */
void hc__mc_complete(struct hc_mc *be, struct hc_mc_job **slot)
{
	struct hc_mc_job *j = *slot;

	pthread_mutex_lock(&be->mu);
	*slot = NULL; /* under the lock: cancel looks at the slots */
	finish_locked(be, j);
	be->nrunning--;
	/* reapers take all that is there: they were woken when it stopped
	 * being empty, or are running */
	if (be->ndone == 1)
		pthread_cond_broadcast(&be->done);
	pthread_mutex_unlock(&be->mu);
}

static void run_batch(struct hc_mc_worker *w, struct hc_mc_job **jobs, unsigned n)
{
	switch (jobs[0]->opcode) {
	case HC_BE_OP_EXISTS:
		hc__mc_run_exists(w, jobs, n);
		break;
	case HC_BE_OP_GET:
		hc__mc_run_get(w, jobs, n);
		break;
	case HC_BE_OP_PUT:
		hc__mc_run_put(w, jobs, n);
		break;
	case HC_BE_OP_DELETE:
		hc__mc_run_delete(w, jobs, n);
		break;
	default:
		for (unsigned i = 0; i < n; i++)
			jobs[i]->result = -EINVAL;
		break;
	}
}

static void *worker_main(void *arg)
{
	struct hc_mc_worker *w = arg;
	struct hc_mc *be = w->be;
	struct hc_mc_job **jobs = w->jobs;

	pthread_mutex_lock(&be->mu);
	while (!be->stop) {
		unsigned n;

		if (!be->qhead) {
			be->idle++;
			pthread_cond_wait(&be->work, &be->mu);
			be->idle--;
			continue;
		}
		n = take_locked(be, jobs);
		w->nbatch = n;
		pthread_mutex_unlock(&be->mu);
		run_batch(w, jobs, n);
		pthread_mutex_lock(&be->mu);
		for (unsigned i = 0; i < n; i++) {
			if (!jobs[i])
				continue; /* completed already */
			finish_locked(be, jobs[i]);
			jobs[i] = NULL;
			be->nrunning--;
		}
		w->nbatch = 0;
		pthread_cond_broadcast(&be->done);
	}
	pthread_mutex_unlock(&be->mu);
	return NULL;
}

/* ---- the ABI */

static int mc_submit(void *p, const struct hc_be_op *ops, unsigned n)
{
	struct hc_mc *be = p;
	struct hc_mc_job *first = NULL, **tail = &first;
	unsigned k, nbad = 0, nq = 0;

	if (!be || !ops || n == 0)
		return -EINVAL;
	pthread_mutex_lock(&be->mu);
	k = be->accepted >= HC_MC_QUEUE_MAX ? 0 : HC_MC_QUEUE_MAX - be->accepted;
	k = k < n ? k : n;
	be->accepted += k;
	pthread_mutex_unlock(&be->mu);
	if (!k)
		return -EAGAIN;
	/* Copies outside the lock; a bad op completes with -EINVAL at once. */
	for (unsigned i = 0; i < k; i++) {
		const struct hc_be_op *op = &ops[i];
		int64_t chk = hc_be_iov_check(op);
		unsigned iovcnt = chk < 0 ? 0 : op->iovcnt;
		struct hc_mc_job *j = malloc(sizeof(*j) + iovcnt * sizeof(struct iovec));

		if (!j) { /* the rest are not accepted */
			pthread_mutex_lock(&be->mu);
			be->accepted -= k - i;
			pthread_mutex_unlock(&be->mu);
			if (i == 0)
				return -ENOMEM;
			k = i;
			break;
		}
		j->next = NULL;
		j->user_data = op->user_data;
		j->opcode = chk < 0 ? 0 : op->opcode;
		j->iovcnt = iovcnt;
		j->bytes = chk < 0 ? 0 : (uint64_t)chk;
		j->result = chk < 0 ? chk : 0;
		memcpy(j->name, op->name, HC_BE_NAME_BYTES);
		if (iovcnt)
			memcpy(j->iov, op->iov, iovcnt * sizeof(struct iovec));
		*tail = j;
		tail = &j->next;
		if (chk < 0)
			nbad++;
		else
			nq++;
	}
	pthread_mutex_lock(&be->mu);
	for (struct hc_mc_job *j = first, *nx; j; j = nx) {
		nx = j->next;
		j->next = NULL;
		if (j->result < 0) {
			finish_locked(be, j);
			continue;
		}
		if (be->qtail)
			be->qtail->next = j;
		else
			be->qhead = j;
		be->qtail = j;
		be->nqueued++;
	}
	if (nq == 1)
		pthread_cond_signal(&be->work); /* one job: one worker */
	else if (nq)
		pthread_cond_broadcast(&be->work);
	if (nbad)
		pthread_cond_broadcast(&be->done);
	pthread_mutex_unlock(&be->mu);
	return (int)k;
}

static int mc_reap(void *p, struct hc_be_cqe *cqes, unsigned max, int timeout_ms)
{
	struct hc_mc *be = p;
	struct timespec deadline;
	unsigned n = 0;

	if (!be || (!cqes && max) || timeout_ms < -1)
		return -EINVAL;
	if (max == 0)
		return 0;
	if (timeout_ms > 0)
		deadline = hc_be_deadline(timeout_ms);
	pthread_mutex_lock(&be->mu);
	/* Nothing completed: wait only while something is queued or running. */
	while (!be->dhead && (be->nqueued || be->nrunning) && timeout_ms != 0) {
		if (timeout_ms < 0)
			pthread_cond_wait(&be->done, &be->mu);
		else if (pthread_cond_timedwait(&be->done, &be->mu, &deadline) == ETIMEDOUT)
			break;
	}
	while (be->dhead && n < max) {
		struct hc_mc_job *j = be->dhead;
		be->dhead = j->next;
		if (!be->dhead)
			be->dtail = NULL;
		cqes[n++] = (struct hc_be_cqe){ .user_data = j->user_data, .result = j->result };
		be->ndone--;
		be->accepted--;
		free(j);
	}
	pthread_mutex_unlock(&be->mu);
	return (int)n;
}

/* A queued op ends now; a running one ends within the timeouts. */
static int mc_cancel(void *p, uint64_t user_data)
{
	struct hc_mc *be = p;
	struct hc_mc_job **pp, *prev = NULL;
	int ret = -ENOENT;

	if (!be)
		return -EINVAL;
	pthread_mutex_lock(&be->mu);
	for (pp = &be->qhead; *pp; prev = *pp, pp = &(*pp)->next) {
		struct hc_mc_job *j = *pp;
		if (j->user_data != user_data)
			continue;
		unqueue_locked(be, pp, prev);
		j->result = -ECANCELED;
		push_done_locked(be, j);
		HC_MC_COUNT(be, canceled, 1);
		pthread_cond_broadcast(&be->done);
		ret = 0;
		break;
	}
	/* running: it cannot be cut short, and completes within the timeouts */
	for (unsigned w = 0; ret == -ENOENT && w < be->nworkers; w++)
		for (unsigned i = 0; i < be->workers[w].nbatch; i++)
			if (be->workers[w].jobs[i] && be->workers[w].jobs[i]->user_data == user_data) {
				ret = 0;
				break;
			}
	pthread_mutex_unlock(&be->mu);
	return ret;
}

/* Bytes go through libmemcached's buffers: registration helps nothing. */
static int mc_reg_mem(void *p, void *addr, size_t len)
{
	return p && addr && len ? 0 : -EINVAL;
}

static int mc_unreg_mem(void *p, void *addr)
{
	return p && addr ? 0 : -EINVAL;
}

struct srv_sum {
	uint64_t items, bytes, limit, evictions, up;
};

static memcached_return_t stat_cb(const memcached_instance_st *inst, const char *key, size_t klen, const char *value,
				  size_t vlen, void *ctx)
{
	struct srv_sum *s = ctx;
	uint64_t x = hc__mc_stat_u64(value, vlen);

	(void)inst;
	if (vlen >= 32)
		return MEMCACHED_SUCCESS; /* no number of ours */
	if (klen == 10 && !memcmp(key, "curr_items", 10))
		s->items += x, s->up++;
	else if (klen == 5 && !memcmp(key, "bytes", 5))
		s->bytes += x;
	else if (klen == 14 && !memcmp(key, "limit_maxbytes", 14))
		s->limit += x;
	else if (klen == 9 && !memcmp(key, "evictions", 9))
		s->evictions += x;
	return MEMCACHED_SUCCESS;
}

static int mc_stats(void *p, void (*emit)(void *arg, const char *name, uint64_t value), void *arg)
{
	static const char *const names[] = {
#define X(n) #n,
		HC_MC_COUNTERS(X)
#undef X
	};
	struct hc_mc *be = p;
	const _Atomic uint64_t *c;
	struct srv_sum s = { 0 };
	unsigned queued, running;

	if (!be || !emit)
		return -EINVAL;
	c = (const _Atomic uint64_t *)&be->cnt;
	/* the servers' own figures, one server at a time (a dead one answers
	 * nothing, and costs at most connect_timeout_ms) */
	pthread_mutex_lock(&be->stat_mu);
	for (unsigned i = 0; i < be->o.nservers; i++)
		memcached_stat_execute(be->solo[i], NULL, stat_cb, &s);
	pthread_mutex_unlock(&be->stat_mu);
	pthread_mutex_lock(&be->mu);
	queued = be->nqueued;
	running = be->nrunning;
	pthread_mutex_unlock(&be->mu);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		emit(arg, names[i], atomic_load_explicit(&c[i], memory_order_relaxed));
	emit(arg, "queued", queued);
	emit(arg, "running", running);
	emit(arg, "objects", s.items);
	emit(arg, "bytes", s.bytes);
	emit(arg, "capacity_bytes", s.limit);
	emit(arg, "evictions", s.evictions);
	emit(arg, "servers", be->o.nservers);
	emit(arg, "servers_up", s.up);
	emit(arg, "chunk_bytes", be->chunk_bytes);
	return 0;
}

static const char *const ctl_keys[] = {
	"servers", "chunk_size",         "ttl",           "prefix",      "workers",
	"batch",   "connect_timeout_ms", "io_timeout_ms", "eject_after", "eject_s",
};

static int mc_ctl(void *p, const char *key, const char *value, char *out, size_t outlen)
{
	struct hc_mc *be = p;
	size_t i;

	if (!be || !key)
		return -EINVAL;
	for (i = 0; i < sizeof(ctl_keys) / sizeof(ctl_keys[0]) && strcmp(key, ctl_keys[i]); i++)
		;
	if (i == sizeof(ctl_keys) / sizeof(ctl_keys[0]))
		return -ENOENT;
	if (value)
		return -EINVAL; /* all read-only: reopen with other options */
	switch (i) {
	case 0: {
		char buf[HC_BE_HOST_MAX + 16];
		size_t off = 0;
		if (!out || !outlen)
			return -EINVAL;
		out[0] = '\0';
		for (unsigned s = 0; s < be->o.nservers; s++) {
			int k = snprintf(out + off, outlen - off, "%s%s", s ? ";" : "",
					 hc_be_server_str(&be->o.servers[s], buf, sizeof(buf)));
			if (k < 0 || (size_t)k >= outlen - off)
				return -ERANGE;
			off += (size_t)k;
		}
		return (int)off;
	}
	case 1:
		return hc_be_ctl_out(out, outlen, "%" PRIu32, be->chunk_bytes);
	case 2:
		return hc_be_ctl_out(out, outlen, "%" PRIu32, be->o.ttl_s);
	case 3:
		return hc_be_ctl_out(out, outlen, "%s", be->o.prefix);
	case 4:
		return hc_be_ctl_out(out, outlen, "%u", be->o.workers);
	case 5:
		return hc_be_ctl_out(out, outlen, "%u", be->o.batch);
	case 6:
		return hc_be_ctl_out(out, outlen, "%u", be->o.connect_timeout_ms);
	case 7:
		return hc_be_ctl_out(out, outlen, "%u", be->o.io_timeout_ms);
	case 8:
		return hc_be_ctl_out(out, outlen, "%u", be->o.eject_after);
	default:
		return hc_be_ctl_out(out, outlen, "%u", be->o.eject_s);
	}
}

/* ---- open and close */

static void mc_close(void *p)
{
	struct hc_mc *be = p;

	if (!be)
		return;
	pthread_mutex_lock(&be->mu);
	be->stop = true;
	pthread_cond_broadcast(&be->work);
	pthread_mutex_unlock(&be->mu);
	for (unsigned i = 0; i < be->nworkers; i++) {
		if (be->workers[i].started)
			pthread_join(be->workers[i].thread, NULL);
		hc__mc_worker_fini(&be->workers[i]);
	}
	/* every op was reaped (the ABI's rule); free what a broken host left */
	for (struct hc_mc_job *j = be->qhead, *nx; j; j = nx) {
		nx = j->next;
		free(j);
	}
	for (struct hc_mc_job *j = be->dhead, *nx; j; j = nx) {
		nx = j->next;
		free(j);
	}
	hc__mc_tmpl_free(be);
	free(be->workers);
	pthread_cond_destroy(&be->done);
	pthread_cond_destroy(&be->work);
	pthread_mutex_destroy(&be->mu);
	pthread_mutex_destroy(&be->stat_mu);
	memset(be->o.password, 0, sizeof(be->o.password));
	free(be);
}

static int mc_open(const struct hc_be_option *opts, unsigned nopts, void **out, char *err, size_t errlen)
{
	struct hc_mc *be;
	pthread_condattr_t ca;
	int ret;

	if (!out)
		return hc__mc_fail(err, errlen, EINVAL, "open: the instance pointer is NULL");
	*out = NULL;
	if (!(be = calloc(1, sizeof(*be))))
		return hc__mc_fail(err, errlen, ENOMEM, "open: out of memory");
	pthread_mutex_init(&be->mu, NULL);
	pthread_mutex_init(&be->stat_mu, NULL);
	pthread_cond_init(&be->work, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&be->done, &ca);
	pthread_condattr_destroy(&ca);
	if ((ret = hc__mc_opts_parse(opts, nopts, &be->o, err, errlen)) < 0 ||
	    (ret = hc__mc_tmpl_new(be, err, errlen)) < 0 || (ret = hc__mc_probe(be, err, errlen)) < 0)
		goto fail;
	if (!(be->workers = calloc(be->o.workers, sizeof(*be->workers)))) {
		ret = hc__mc_fail(err, errlen, ENOMEM, "open: out of memory");
		goto fail;
	}
	be->nworkers = be->o.workers;
	for (unsigned i = 0; i < be->nworkers; i++) {
		struct hc_mc_worker *w = &be->workers[i];
		w->be = be;
		if ((ret = hc__mc_worker_init(w, be)) < 0) {
			ret = hc__mc_fail(err, errlen, -ret, "open: a worker's connection: %s", strerror(-ret));
			goto fail;
		}
		if ((ret = pthread_create(&w->thread, NULL, worker_main, w)) != 0) {
			ret = hc__mc_fail(err, errlen, ret, "open: cannot start a worker thread: %s", strerror(ret));
			goto fail;
		}
		w->started = true;
	}
	*out = be;
	return 0;

fail:
	mc_close(be);
	return ret;
}

static const struct hc_backend mc_backend = {
	.abi_version = HC_BACKEND_ABI_VERSION,
	.size = sizeof(struct hc_backend),
	.name = "memcached",
	.description = "distributed L3 on memcached servers (libmemcached, ketama, chunked objects)",
	.caps = HC_BE_CAP_ASYNC | HC_BE_CAP_BATCH_EXISTS | HC_BE_CAP_DELETE | HC_BE_CAP_PERSISTENT,
	.open = mc_open,
	.close = mc_close,
	.reg_mem = mc_reg_mem,
	.unreg_mem = mc_unreg_mem,
	.submit = mc_submit,
	.reap = mc_reap,
	.cancel = mc_cancel,
	.stats = mc_stats,
	.ctl = mc_ctl,
};

HC_BACKEND_EXPORT const struct hc_backend *hc_backend_entry(const struct hc_backend_host *host)
{
	if (host && host->abi_version >= 1 && host->size >= offsetof(struct hc_backend_host, log) + sizeof(host->log))
		atomic_store_explicit(&g_host, host, memory_order_release);
	return &mc_backend;
}
