/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mori.c - the "mori" L3 backend: the plugin table, open and close, the
 * queue between the host's threads and the progress thread, stats and ctl.
 *
 *     An L3 in the DRAM of memory servers (hicache-memd), in the manner of
 *     AMD's MORI-IO, Mooncake's transfer engine and NIXL: each server
 *     contributes a registered region, and the bytes of objects move by
 *     one-sided UCX gets and puts between that region and the host's
 *     buffers (the pool's envelopes, registered through reg_mem), so a
 *     get lands straight in an envelope and the server's CPU copies
 *     nothing.  UCX picks RDMA, shared memory, CMA or TCP (transports=).
 *     A small control protocol over TCP (wire.h) says where: a leased
 *     lookup before a get, a leased allocation before a put and a commit
 *     after it, so an object is visible only once all its bytes landed.
 *     Names spread over the servers by rendezvous hashing (place.c); a
 *     server that is down makes its names misses, and a restarted one
 *     starts empty and is used again (server.c).
 *
 *     Options, ctl keys, results and statistics:
 *     hicache-backend-mori(7).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "mori.h"

static const struct hc_backend_host *_Atomic g_host;

const struct hc_backend_host *hc__mori_host(void)
{
	return atomic_load_explicit(&g_host, memory_order_acquire);
}

uint64_t hc__mori_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void wake(struct hc_mori *be)
{
	uint64_t one = 1;

	if (write(be->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		hc__mori_log(HC_BE_LOG_ERR, "eventfd: %s", strerror(errno));
}

static void all_unlink_locked(struct hc_mori *be, struct hc_mori_job *j)
{
	if (j->all_prev)
		j->all_prev->all_next = j->all_next;
	else
		be->all = j->all_next;
	if (j->all_next)
		j->all_next->all_prev = j->all_prev;
	j->all_prev = j->all_next = NULL;
}

/* To the reapers (be->mu held); the first one in wakes them. */
static void push_done_locked(struct hc_mori *be, struct hc_mori_job *j)
{
	j->next = NULL;
	if (be->done_tail)
		be->done_tail->next = j;
	else
		be->done = j;
	be->done_tail = j;
	if (++be->ndone == 1)
		pthread_cond_broadcast(&be->done_cv);
}

void hc__mori_complete(struct hc_mori *be, struct hc_mori_job *j, int64_t result)
{
	j->result = result;
	j->next = NULL;
	switch (j->opcode) {
	case HC_BE_OP_GET:
		HC_MORI_COUNT(be, gets, 1);
		break;
	case HC_BE_OP_PUT:
		HC_MORI_COUNT(be, puts, 1);
		break;
	case HC_BE_OP_EXISTS:
		HC_MORI_COUNT(be, exists, 1);
		break;
	case HC_BE_OP_DELETE:
		HC_MORI_COUNT(be, deletes, 1);
		break;
	}
	if (result == -ECANCELED)
		HC_MORI_COUNT(be, canceled, 1);
	else if (result < 0 && result != -ENOENT)
		HC_MORI_COUNT(be, errors, 1);
	pthread_mutex_lock(&be->mu);
	push_done_locked(be, j);
	pthread_mutex_unlock(&be->mu);
}

/* ---- the ABI */

static int mori_submit(void *p, const struct hc_be_op *ops, unsigned n)
{
	struct hc_mori *be = p;
	struct hc_mori_job *first = NULL, **tail = &first;
	unsigned k;

	if (!be || !ops || n == 0)
		return -EINVAL;
	pthread_mutex_lock(&be->mu);
	k = be->accepted >= be->o.inflight ? 0 : be->o.inflight - be->accepted;
	k = k < n ? k : n;
	be->accepted += k;
	pthread_mutex_unlock(&be->mu);
	if (!k)
		return -EAGAIN;
	for (unsigned i = 0; i < k; i++) {
		const struct hc_be_op *op = &ops[i];
		int64_t chk = hc_be_iov_check(op);
		unsigned iovcnt = chk < 0 ? 0 : op->iovcnt;
		struct hc_mori_job *j = calloc(1, sizeof(*j) + iovcnt * sizeof(struct iovec));

		if (!j) {
			pthread_mutex_lock(&be->mu);
			be->accepted -= k - i;
			pthread_cond_broadcast(&be->done_cv); /* a reap may wait on what was not accepted */
			pthread_mutex_unlock(&be->mu);
			if (i == 0)
				return -ENOMEM;
			k = i;
			break;
		}
		j->be = be;
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
	}
	pthread_mutex_lock(&be->mu);
	for (struct hc_mori_job *j = first, *nx; j; j = nx) {
		nx = j->next;
		j->next = NULL;
		j->all_next = be->all;
		if (be->all)
			be->all->all_prev = j;
		be->all = j;
		if (j->result < 0) { /* a bad op: completes at once */
			push_done_locked(be, j);
			continue;
		}
		if (be->incoming_tail)
			be->incoming_tail->next = j;
		else
			be->incoming = j;
		be->incoming_tail = j;
	}
	pthread_mutex_unlock(&be->mu);
	wake(be);
	return (int)k;
}

static int mori_reap(void *p, struct hc_be_cqe *cqes, unsigned max, int timeout_ms)
{
	struct hc_mori *be = p;
	struct timespec deadline;
	unsigned n = 0;

	if (!be || (!cqes && max) || timeout_ms < -1)
		return -EINVAL;
	if (max == 0)
		return 0;
	if (timeout_ms > 0)
		deadline = hc_be_deadline(timeout_ms);
	pthread_mutex_lock(&be->mu);
	/* nothing completed: wait only while something is in flight */
	while (!be->done && be->accepted > be->ndone && timeout_ms != 0) {
		if (timeout_ms < 0)
			pthread_cond_wait(&be->done_cv, &be->mu);
		else if (pthread_cond_timedwait(&be->done_cv, &be->mu, &deadline) == ETIMEDOUT)
			break;
	}
	while (be->done && n < max) {
		struct hc_mori_job *j = be->done;
		be->done = j->next;
		if (!be->done)
			be->done_tail = NULL;
		cqes[n++] = (struct hc_be_cqe){ .user_data = j->user_data, .result = j->result };
		be->ndone--;
		be->accepted--;
		all_unlink_locked(be, j);
		free(j);
	}
	pthread_mutex_unlock(&be->mu);
	return (int)n;
}

/* Flags the op; the thread ends it at its next step (a transfer in flight
 * finishes first: it may win the race). */
static int mori_cancel(void *p, uint64_t user_data)
{
	struct hc_mori *be = p;
	int ret = -ENOENT;

	if (!be)
		return -EINVAL;
	pthread_mutex_lock(&be->mu);
	for (struct hc_mori_job *j = be->all; j; j = j->all_next) {
		bool done = false;
		if (j->user_data != user_data)
			continue;
		for (struct hc_mori_job *d = be->done; d && !done; d = d->next)
			done = d == j;
		if (done)
			continue;
		atomic_store_explicit(&j->canceled, true, memory_order_relaxed);
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&be->mu);
	if (!ret)
		wake(be);
	return ret;
}

/* The pool's envelopes: registered once, so a get lands in them and a put
 * reads them with no bounce. */
static int mori_reg_mem(void *p, void *addr, size_t len)
{
	struct hc_mori *be = p;
	ucp_mem_map_params_t mp = {
		.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
		.address = addr,
		.length = len,
	};
	struct hc_mori_reg *r;
	ucs_status_t st;

	if (!be || !addr || !len)
		return -EINVAL;
	if (!(r = calloc(1, sizeof(*r))))
		return -ENOMEM;
	if ((st = ucp_mem_map(be->ctx, &mp, &r->memh)) != UCS_OK) {
		hc__mori_warn_once(be, HC_MORI_WARN_REGISTER,
				   "cannot register %zu bytes at %p with UCX (%s): transfers from them are slower", len,
				   addr, ucs_status_string(st));
		free(r);
		return 0;
	}
	r->addr = addr;
	r->len = len;
	pthread_mutex_lock(&be->reg_mu);
	r->next = be->regs;
	be->regs = r;
	pthread_mutex_unlock(&be->reg_mu);
	return 0;
}

static int mori_unreg_mem(void *p, void *addr)
{
	struct hc_mori *be = p;
	struct hc_mori_reg *r = NULL, **pp;

	if (!be || !addr)
		return -EINVAL;
	pthread_mutex_lock(&be->reg_mu);
	for (pp = &be->regs; *pp; pp = &(*pp)->next)
		if ((*pp)->addr == addr) {
			r = *pp;
			*pp = r->next;
			break;
		}
	pthread_mutex_unlock(&be->reg_mu);
	if (!r)
		return 0; /* reg_mem could not register it: nothing to undo */
	ucp_mem_unmap(be->ctx, r->memh);
	free(r);
	return 0;
}

static int mori_stats(void *p, void (*emit)(void *arg, const char *name, uint64_t value), void *arg)
{
	static const char *const names[] = {
#define X(n) #n,
		HC_MORI_COUNTERS(X)
#undef X
	};
	struct hc_mori *be = p;
	const _Atomic uint64_t *c;
	struct timespec deadline;
	uint64_t want, objects, bytes, capacity, evictions;
	unsigned inflight;

	if (!be || !emit)
		return -EINVAL;
	c = (const _Atomic uint64_t *)&be->cnt;
	deadline = hc_be_deadline((int)be->o.io_timeout_ms);
	pthread_mutex_lock(&be->mu);
	want = ++be->stats_want;
	pthread_mutex_unlock(&be->mu);
	wake(be);
	pthread_mutex_lock(&be->mu);
	while (be->stats_gen < want)
		if (pthread_cond_timedwait(&be->stats_cv, &be->mu, &deadline) == ETIMEDOUT)
			break; /* the last figures */
	objects = be->stat_objects;
	bytes = be->stat_bytes;
	capacity = be->stat_capacity;
	evictions = be->stat_evictions;
	inflight = be->accepted - be->ndone;
	pthread_mutex_unlock(&be->mu);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		emit(arg, names[i], atomic_load_explicit(&c[i], memory_order_relaxed));
	emit(arg, "inflight", inflight);
	emit(arg, "objects", objects);
	emit(arg, "bytes", bytes);
	emit(arg, "capacity_bytes", capacity);
	emit(arg, "evictions", evictions);
	emit(arg, "servers", be->o.nservers);
	return 0;
}

static const char *const ctl_keys[] = {
	"servers",      "transports", "connect_timeout_ms", "io_timeout_ms", "retry_ms",
	"retry_max_ms", "lease_ms",   "inflight",           "batch",
};

static int mori_ctl(void *p, const char *key, const char *value, char *out, size_t outlen)
{
	struct hc_mori *be = p;
	const unsigned nums[] = { 0,
				  0,
				  be ? be->o.connect_timeout_ms : 0,
				  be ? be->o.io_timeout_ms : 0,
				  be ? be->o.retry_ms : 0,
				  be ? be->o.retry_max_ms : 0,
				  be ? be->o.lease_ms : 0,
				  be ? be->o.inflight : 0,
				  be ? be->o.batch : 0 };
	size_t i;

	if (!be || !key)
		return -EINVAL;
	for (i = 0; i < sizeof(ctl_keys) / sizeof(ctl_keys[0]) && strcmp(key, ctl_keys[i]); i++)
		;
	if (i == sizeof(ctl_keys) / sizeof(ctl_keys[0]))
		return -ENOENT;
	if (value)
		return -EINVAL; /* all read-only: reopen with other options */
	if (i == 0) {
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
	if (i == 1)
		return hc_be_ctl_out(out, outlen, "%s", be->o.transports);
	return hc_be_ctl_out(out, outlen, "%u", nums[i]);
}

/* ---- open and close */

static void mori_close(void *p)
{
	struct hc_mori *be = p;

	if (!be)
		return;
	pthread_mutex_lock(&be->mu);
	be->stop = true;
	pthread_mutex_unlock(&be->mu);
	if (be->started) {
		wake(be);
		pthread_join(be->thread, NULL);
	}
	for (unsigned i = 0; i < be->nservers; i++) {
		hc__mori_server_fini(be, &be->servers[i]);
		free(be->releases ? be->releases[i].ids : NULL);
	}
	/* every op was reaped (the ABI's rule); free what a broken host left */
	for (struct hc_mori_job *j = be->all, *nx; j; j = nx) {
		nx = j->all_next;
		free(j);
	}
	while (be->regs) {
		struct hc_mori_reg *r = be->regs;
		be->regs = r->next;
		ucp_mem_unmap(be->ctx, r->memh);
		free(r);
	}
	if (be->worker)
		ucp_worker_destroy(be->worker);
	if (be->ctx)
		ucp_cleanup(be->ctx);
	if (be->epfd >= 0)
		close(be->epfd);
	if (be->wake_fd >= 0)
		close(be->wake_fd);
	free(be->servers);
	free(be->releases);
	pthread_cond_destroy(&be->done_cv);
	pthread_cond_destroy(&be->stats_cv);
	pthread_mutex_destroy(&be->mu);
	pthread_mutex_destroy(&be->reg_mu);
	free(be);
}

/* The UCP context (RMA only; thread-safe, see mori.h) and one worker whose
 * events wake the thread's epoll. */
static int ucx_open(struct hc_mori *be, char *err, size_t errlen)
{
	ucp_params_t up = {
		.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
		.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP,
		.mt_workers_shared = 1,
	};
	ucp_worker_params_t wp = {
		.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
		.thread_mode = UCS_THREAD_MODE_SINGLE,
	};
	struct epoll_event ev = { .events = EPOLLIN };
	ucp_config_t *cfg;
	ucs_status_t st;

	if ((st = ucp_config_read(NULL, NULL, &cfg)) != UCS_OK)
		return hc__mori_fail(err, errlen, EINVAL, "UCX's configuration (UCX_* variables): %s",
				     ucs_status_string(st));
	if (be->o.transports[0] && (st = ucp_config_modify(cfg, "TLS", be->o.transports)) != UCS_OK) {
		ucp_config_release(cfg);
		return hc__mori_fail(err, errlen, EINVAL, "transports=%s: UCX refuses it (%s): see ucx_info -d",
				     be->o.transports, ucs_status_string(st));
	}
	st = ucp_init(&up, cfg, &be->ctx);
	ucp_config_release(cfg);
	if (st != UCS_OK) {
		be->ctx = NULL;
		return hc__mori_fail(err, errlen, EINVAL, "UCX does not start (%s)%s%s: see ucx_info -d",
				     ucs_status_string(st), be->o.transports[0] ? " with transports=" : "",
				     be->o.transports);
	}
	if ((st = ucp_worker_create(be->ctx, &wp, &be->worker)) != UCS_OK) {
		be->worker = NULL;
		return hc__mori_fail(err, errlen, EINVAL, "UCX: no worker: %s", ucs_status_string(st));
	}
	if ((st = ucp_worker_get_efd(be->worker, &be->worker_fd)) != UCS_OK)
		return hc__mori_fail(err, errlen, EINVAL, "UCX: no event fd: %s", ucs_status_string(st));
	ev.data.u64 = 1;
	if (epoll_ctl(be->epfd, EPOLL_CTL_ADD, be->worker_fd, &ev) < 0)
		return hc__mori_fail(err, errlen, errno, "epoll: %s", strerror(errno));
	return 0;
}

static int mori_open(const struct hc_be_option *opts, unsigned nopts, void **out, char *err, size_t errlen)
{
	struct hc_mori *be;
	struct epoll_event ev = { .events = EPOLLIN };
	pthread_condattr_t ca;
	unsigned up = 0;
	int ret;

	if (!out)
		return hc__mori_fail(err, errlen, EINVAL, "open: the instance pointer is NULL");
	*out = NULL;
	if (!(be = calloc(1, sizeof(*be))))
		return hc__mori_fail(err, errlen, ENOMEM, "open: out of memory");
	be->epfd = be->wake_fd = -1;
	pthread_mutex_init(&be->mu, NULL);
	pthread_mutex_init(&be->reg_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&be->done_cv, &ca);
	pthread_cond_init(&be->stats_cv, &ca);
	pthread_condattr_destroy(&ca);
	if ((ret = hc__mori_opts_parse(opts, nopts, &be->o, err, errlen)) < 0)
		goto fail;
	be->epfd = epoll_create1(EPOLL_CLOEXEC);
	be->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (be->epfd < 0 || be->wake_fd < 0) {
		ret = hc__mori_fail(err, errlen, errno, "open: epoll or eventfd: %s", strerror(errno));
		goto fail;
	}
	ev.data.u64 = 0;
	epoll_ctl(be->epfd, EPOLL_CTL_ADD, be->wake_fd, &ev);
	if ((ret = ucx_open(be, err, errlen)) < 0)
		goto fail;
	be->servers = calloc(be->o.nservers, sizeof(*be->servers));
	be->releases = calloc(be->o.nservers, sizeof(*be->releases));
	if (!be->servers || !be->releases) {
		ret = hc__mori_fail(err, errlen, ENOMEM, "open: out of memory");
		goto fail;
	}
	be->nservers = be->o.nservers;
	for (unsigned i = 0; i < be->nservers; i++)
		hc__mori_server_init(be, &be->servers[i], &be->o.servers[i]);
	/* connect to every server before the first op (on this thread: the
	 * progress thread is not started yet) */
	up = hc__mori_connect_all(be);
	if (!up) {
		ret = hc__mori_fail(
			err, errlen, EHOSTUNREACH,
			"no memory server answers (%s%s): start hicache-memd there, or check servers= and transports=",
			be->servers[0].label, be->nservers > 1 ? " and the others" : "");
		goto fail;
	}
	if ((ret = pthread_create(&be->thread, NULL, hc__mori_thread, be)) != 0) {
		ret = hc__mori_fail(err, errlen, ret, "open: cannot start the progress thread: %s", strerror(ret));
		goto fail;
	}
	be->started = true;
	*out = be;
	return 0;

fail:
	mori_close(be);
	return ret;
}

static const struct hc_backend mori_backend = {
	.abi_version = HC_BACKEND_ABI_VERSION,
	.size = sizeof(struct hc_backend),
	.name = "mori",
	.description = "L3 in memory servers' DRAM (hicache-memd) by one-sided UCX get and put",
	.caps = HC_BE_CAP_ASYNC | HC_BE_CAP_ZERO_COPY | HC_BE_CAP_BATCH_EXISTS | HC_BE_CAP_DELETE |
		HC_BE_CAP_PERSISTENT,
	.open = mori_open,
	.close = mori_close,
	.reg_mem = mori_reg_mem,
	.unreg_mem = mori_unreg_mem,
	.submit = mori_submit,
	.reap = mori_reap,
	.cancel = mori_cancel,
	.stats = mori_stats,
	.ctl = mori_ctl,
};

HC_BACKEND_EXPORT const struct hc_backend *hc_backend_entry(const struct hc_backend_host *host)
{
	if (host && host->abi_version >= 1 && host->size >= offsetof(struct hc_backend_host, log) + sizeof(host->log))
		atomic_store_explicit(&g_host, host, memory_order_release);
	return &mori_backend;
}
