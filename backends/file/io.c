/* SPDX-License-Identifier: Apache-2.0 */
/*
 * io.c - the file backend's io_uring: setup, the fixed-buffer table,
 * preparing and flushing SQEs (sq_lock), and harvesting CQEs (one
 * harvester at a time, see file.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "file.h"

int hc__file_ring_init(struct hc_file *be, char *err, size_t errlen)
{
	struct io_uring_params p;
	int r;

	/* SUBMIT_ALL: one bad SQE must not leave the rest of a batch unsent. */
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
	p.cq_entries = be->qd * 2;
	r = io_uring_queue_init_params(be->qd, &be->ring, &p);
	if (r == -EINVAL) {
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_CQSIZE;
		p.cq_entries = be->qd * 2;
		r = io_uring_queue_init_params(be->qd, &be->ring, &p);
	}
	if (r < 0) {
		snprintf(err, errlen, "io_uring_setup with %u entries failed: %s%s", be->qd, strerror(-r),
			 r == -EPERM    ? " (is sysctl kernel.io_uring_disabled set?)"
			 : r == -ENOMEM ? " (lower queue_depth, or raise RLIMIT_MEMLOCK)"
					: "");
		return r;
	}
	/* Waiting with a timeout must not take an SQE (submitters own the SQ). */
	if (!(p.features & IORING_FEAT_EXT_ARG)) {
		io_uring_queue_exit(&be->ring);
		snprintf(err, errlen,
			 "this kernel's io_uring lacks IORING_FEAT_EXT_ARG: Linux 5.11 or newer is needed");
		return -EOPNOTSUPP;
	}
	io_uring_ring_dontfork(&be->ring);
	be->sq_entries = be->ring.sq.ring_entries;
	be->cq_entries = be->ring.cq.ring_entries;
	if (be->fixed_mode == HC_FIXED_AUTO) {
		r = io_uring_register_buffers_sparse(&be->ring, HC_FILE_BUF_SLOTS);
		if (r < 0)
			hc__file_warn_once(be, HC_WARN_FIXED,
					   "%s: no fixed buffers (a sparse table of %u: %s): plain reads and writes",
					   be->dir, HC_FILE_BUF_SLOTS, strerror(-r));
		be->fixed_usable = r == 0;
	}
	return 0;
}

void hc__file_ring_exit(struct hc_file *be)
{
	io_uring_queue_exit(&be->ring);
	free(be->chunk);
	free(be->region);
}

/* ---- fixed buffers */

/* The last chunk that starts at or below a. */
static unsigned chunk_at(const struct hc_file *be, uintptr_t a)
{
	unsigned lo = 0, hi = be->nchunk;

	while (hi - lo > 1) {
		unsigned mid = (lo + hi) / 2;

		if (be->chunk[mid].addr <= a)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

int hc__file_fixed_find(const struct hc_file *be, const void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;
	const struct hc_fchunk *c;

	if (be->nchunk == 0)
		return -1;
	c = &be->chunk[chunk_at(be, a)];
	if (a < c->addr || len > c->len || a - c->addr > c->len - len)
		return -1;
	return (int)c->slot;
}

uint64_t hc__file_fixed_bytes(const struct hc_file *be)
{
	uint64_t b = 0;

	for (unsigned i = 0; i < be->nchunk; i++)
		b += be->chunk[i].len;
	return b;
}

static int set_slot(struct hc_file *be, unsigned slot, void *addr, size_t len)
{
	struct iovec iov = { .iov_base = addr, .iov_len = len };
	__u64 tag = 0;
	int r = io_uring_register_buffers_update_tag(&be->ring, slot, &iov, &tag, 1);

	return r < 0 ? r : r == 1 ? 0 : -EIO;
}

static void drop_chunks(struct hc_file *be, void *region)
{
	unsigned k = 0;

	for (unsigned i = 0; i < be->nchunk; i++) {
		if (be->chunk[i].region == region) {
			set_slot(be, be->chunk[i].slot, NULL, 0);
			be->buf_used[be->chunk[i].slot] = 0;
		} else {
			be->chunk[k++] = be->chunk[i];
		}
	}
	be->nchunk = k;
}

static int add_chunk(struct hc_file *be, void *region, uintptr_t a, size_t len)
{
	unsigned slot = 0, at;
	int r;

	while (slot < HC_FILE_BUF_SLOTS && be->buf_used[slot])
		slot++;
	if (slot == HC_FILE_BUF_SLOTS)
		return -ENOSPC;
	r = set_slot(be, slot, (void *)a, len);
	if (r < 0)
		return r;
	be->buf_used[slot] = 1;
	for (at = 0; at < be->nchunk && be->chunk[at].addr < a; at++)
		;
	memmove(&be->chunk[at + 1], &be->chunk[at], (be->nchunk - at) * sizeof(*be->chunk));
	be->chunk[at] = (struct hc_fchunk){ .addr = a, .len = len, .slot = slot, .region = region };
	be->nchunk++;
	return 0;
}

static void warn_unregistered(struct hc_file *be, void *addr, size_t len, int r)
{
	struct rlimit rl;
	char lim[32] = "unlimited";

	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		snprintf(lim, sizeof(lim), "%" PRIu64 " bytes", (uint64_t)rl.rlim_cur);
	hc__file_warn_once(
		be, HC_WARN_FIXED,
		"%s: fixed buffers unavailable: registering %zu bytes at %p: %s (RLIMIT_MEMLOCK %s; raise it or grant CAP_IPC_LOCK): plain reads and writes",
		be->dir, len, addr, r == -ENOSPC ? "the buffer table is full" : strerror(-r), lim);
}

int hc__file_reg(struct hc_file *be, void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;
	size_t nch = (len + HC_FILE_CHUNK - 1) / HC_FILE_CHUNK;
	struct hc_fregion *rg;
	void *nc;
	int r = 0;

	if (!addr || !len || a + len < a)
		return -EINVAL;
	for (unsigned i = 0; i < be->nregion; i++) {
		uintptr_t b = (uintptr_t)be->region[i].addr;

		if (a < b + be->region[i].len && b < a + len)
			return -EINVAL; /* overlaps a region already given */
	}
	rg = realloc(be->region, (be->nregion + 1) * sizeof(*rg));
	if (!rg)
		return -ENOMEM;
	be->region = rg;
	be->region[be->nregion++] = (struct hc_fregion){ .addr = addr, .len = len };
	if (!be->fixed_usable)
		return 0;
	nc = realloc(be->chunk, (be->nchunk + nch) * sizeof(*be->chunk));
	if (!nc)
		return 0; /* still usable, only slower */
	be->chunk = nc;
	for (size_t off = 0; off < len && r == 0; off += HC_FILE_CHUNK)
		r = add_chunk(be, addr, a + off, len - off < HC_FILE_CHUNK ? len - off : HC_FILE_CHUNK);
	if (r < 0) {
		/* All of a region or none: a half-registered one works, but the
		 * stats would say it is fixed when most ops are not. */
		drop_chunks(be, addr);
		warn_unregistered(be, addr, len, r);
	}
	return 0;
}

int hc__file_unreg(struct hc_file *be, void *addr)
{
	for (unsigned i = 0; i < be->nregion; i++) {
		if (be->region[i].addr != addr)
			continue;
		drop_chunks(be, addr);
		be->region[i] = be->region[--be->nregion];
		return 0;
	}
	return -EINVAL;
}

/* ---- the submission side (callers hold sq_lock) */

/* Submits what is prepared; what the kernel does not take now stays in the
 * SQ for the next flush (the harvester flushes before it waits). */
static void flush_locked(struct hc_file *be)
{
	while (io_uring_sq_ready(&be->ring) > 0) {
		int r = io_uring_submit(&be->ring);

		if (r <= 0 && r != -EINTR) {
			if (r < 0)
				hc__file_warn_once(be, HC_WARN_RING, "%s: io_uring_enter: %s (retrying)", be->dir,
						   strerror(-r));
			break;
		}
	}
}

struct io_uring_sqe *hc__file_sqe(struct hc_file *be)
{
	struct io_uring_sqe *sqe;

	/* The CQE budget keeps the kernel able to take these: a full SQ is
	 * only ours to flush, or the kernel briefly out of memory. */
	for (int tries = 0; !(sqe = io_uring_get_sqe(&be->ring)) && tries < 1000; tries++) {
		flush_locked(be);
		if (tries)
			sched_yield();
	}
	return sqe;
}

void hc__file_flush(struct hc_file *be)
{
	pthread_mutex_lock(&be->sq_lock);
	flush_locked(be);
	pthread_mutex_unlock(&be->sq_lock);
}

/* A NOP whose CQE ends the harvester's wait: a completion was queued
 * without the ring (submit's EXISTS, a miss) while it slept. */
void hc__file_wake(struct hc_file *be)
{
	struct io_uring_sqe *sqe;

	pthread_mutex_lock(&be->sq_lock);
	sqe = hc__file_sqe(be);
	if (sqe) {
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, HC_UD_WAKE);
		flush_locked(be);
	}
	pthread_mutex_unlock(&be->sq_lock);
	if (!sqe) {
		/* The SQ is full of SQEs the harvester submits before waiting. */
		pthread_mutex_lock(&be->ops_lock);
		be->wake_pending = false;
		pthread_mutex_unlock(&be->ops_lock);
	}
}

void hc__file_send_cancels(struct hc_file *be, const uint64_t *ud, unsigned n)
{
	unsigned sent = 0;

	pthread_mutex_lock(&be->sq_lock);
	for (; sent < n; sent++) {
		struct io_uring_sqe *sqe = hc__file_sqe(be);

		if (!sqe)
			break;
		io_uring_prep_cancel64(sqe, ud[sent], 0);
		io_uring_sqe_set_data64(sqe, HC_UD_CANCEL);
	}
	flush_locked(be);
	pthread_mutex_unlock(&be->sq_lock);
	if (sent < n) {
		pthread_mutex_lock(&be->ops_lock);
		be->budget_used -= n - sent;
		pthread_mutex_unlock(&be->ops_lock);
	}
}

/* ---- the completion side: the harvester role is held (file.h) */

unsigned hc__file_harvest(struct hc_file *be, struct hc_fcqe *out, unsigned max, int timeout_ms)
{
	struct io_uring_cqe *cqe[64];
	unsigned n, k = 0, wakes = 0, cancels = 0;
	bool unsent;

	if (max > 64)
		max = 64;
	pthread_mutex_lock(&be->sq_lock);
	flush_locked(be);
	unsent = io_uring_sq_ready(&be->ring) > 0;
	pthread_mutex_unlock(&be->sq_lock);
	n = io_uring_peek_batch_cqe(&be->ring, cqe, max);
	if (n == 0 && timeout_ms != 0) {
		struct __kernel_timespec ts;
		struct io_uring_cqe *c;
		bool wait;

		/* While unsent SQEs wait for the kernel, wake up to retry them. */
		if (unsent && (timeout_ms < 0 || timeout_ms > 10))
			timeout_ms = 10;
		ts.tv_sec = timeout_ms / 1000;
		ts.tv_nsec = (long long)(timeout_ms % 1000) * 1000000;
		pthread_mutex_lock(&be->ops_lock);
		/* A completion queued, or the last one taken by another reaper,
		 * since the caller looked: no wait.  Otherwise in_wait tells
		 * whoever queues or takes one to send a wake-up. */
		wait = be->done_len == 0 && be->outstanding > 0;
		be->in_wait = wait;
		pthread_mutex_unlock(&be->ops_lock);
		if (wait) {
			int r;

			do
				r = io_uring_wait_cqe_timeout(&be->ring, &c, timeout_ms < 0 ? NULL : &ts);
			while (r == -EINTR && timeout_ms < 0);
			pthread_mutex_lock(&be->ops_lock);
			be->in_wait = false;
			pthread_mutex_unlock(&be->ops_lock);
		}
		n = io_uring_peek_batch_cqe(&be->ring, cqe, max);
	}
	for (unsigned i = 0; i < n; i++) {
		uint64_t ud = io_uring_cqe_get_data64(cqe[i]);

		if (ud == HC_UD_WAKE)
			wakes++;
		else if (ud == HC_UD_CANCEL)
			cancels++;
		else
			out[k++] = (struct hc_fcqe){ .ud = ud, .res = cqe[i]->res };
	}
	io_uring_cq_advance(&be->ring, n);
	if (wakes || cancels) {
		/* Cleared while still the harvester: the next one to wait then
		 * gets a fresh wake-up if it needs one. */
		pthread_mutex_lock(&be->ops_lock);
		if (wakes)
			be->wake_pending = false;
		be->budget_used -= cancels;
		pthread_mutex_unlock(&be->ops_lock);
	}
	return k;
}
