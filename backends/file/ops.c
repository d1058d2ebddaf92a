/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops.c - submit, reap and cancel, and the steps of each op.
 *
 *   EXISTS           answered from the index inside submit.
 *   GET              a miss is answered inside submit; a hit opens the file
 *                    (so an eviction's unlink cannot hurt it), reads with
 *                    one SQE per segment, and completes with the length of
 *                    the file it opened.
 *   PUT              reserves capacity (evicting), creates a temp file,
 *                    writes one SQE per segment, [fsync], renames it over
 *                    the object, [fsyncs the directory].
 *   DELETE           unlinks inside submit, [fsyncs the directory].
 *
 * [..] with fsync=always.  A segment is one fixed buffer (READ_FIXED) or one
 * run of other iovecs (READV); an op's segments run at once, at their file
 * offsets.  Completions without a ring op go to the done queue directly;
 * ring ops go there from their last step.  reap only takes from that queue,
 * harvesting the ring when it is empty.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "file.h"

/* Resubmissions after a transient failure, before doing it here. */
#define RETRIES 2

static void step_done(struct hc_file *be, struct hc_fop *op);
static void get_start(struct hc_file *be, struct hc_fop *op);
static void put_start(struct hc_file *be, struct hc_fop *op);

static void set_err(struct hc_fop *op, int64_t e)
{
	int64_t zero = 0;

	atomic_compare_exchange_strong(&op->err, &zero, e);
}

/* ---- admission and the done queue (ops_lock) */

/* Caller holds ops_lock.  true: a harvester sleeps in the kernel and must be
 * woken (by the caller, after unlocking) to see this completion. */
static bool push_done(struct hc_file *be, uint64_t user_data, int64_t result)
{
	bool wake = be->in_wait && !be->wake_pending;

	be->done[(be->done_head + be->done_len) % be->done_cap] = (struct hc_be_cqe){ user_data, result };
	be->done_len++;
	if (wake)
		be->wake_pending = true;
	pthread_cond_broadcast(&be->ops_cond);
	return wake;
}

static void count_result(struct hc_file *be, uint32_t opcode, int64_t result)
{
	if (result == -ECANCELED)
		HC_COUNT(be, canceled, 1);
	else if (opcode == HC_BE_OP_GET && result >= 0)
		HC_COUNT(be, hits, 1);
	else if (opcode == HC_BE_OP_GET && result == -ENOENT)
		HC_COUNT(be, misses, 1);
	else if (result < 0 && !(opcode == HC_BE_OP_DELETE && result == -ENOENT))
		HC_COUNT(be, errors, 1);
}

/* A place in the done queue for an op that needs no ring. */
static bool reserve_now(struct hc_file *be)
{
	bool ok;

	pthread_mutex_lock(&be->ops_lock);
	ok = be->outstanding < be->done_cap;
	be->outstanding += ok;
	pthread_mutex_unlock(&be->ops_lock);
	return ok;
}

static void complete_now(struct hc_file *be, uint32_t opcode, uint64_t user_data, int64_t result)
{
	bool wake;

	count_result(be, opcode, result);
	pthread_mutex_lock(&be->ops_lock);
	wake = push_done(be, user_data, result);
	pthread_mutex_unlock(&be->ops_lock);
	if (wake)
		hc__file_wake(be);
}

/* A slot and budget CQEs for a ring op, or NULL (submit stops there).  One
 * CQE of the ring stays free for the harvester's wake-up. */
static struct hc_fop *admit(struct hc_file *be, const struct hc_be_op *o, unsigned budget, bool fixed)
{
	struct hc_fop *op = NULL;

	pthread_mutex_lock(&be->ops_lock);
	if (be->outstanding < be->done_cap && be->nfree && be->budget_used + budget < be->cq_entries) {
		op = &be->op[be->free_slot[--be->nfree]];
		op->user_data = o->user_data; /* before active: cancel matches on it */
		atomic_store(&op->canceled, false);
		op->active = true;
		op->budget = budget;
		be->budget_used += budget;
		be->outstanding++;
	}
	pthread_mutex_unlock(&be->ops_lock);
	if (!op)
		return NULL;
	op->opcode = o->opcode;
	op->fixed = fixed;
	op->direct = op->reserved = false;
	op->step = HC_STEP_IO;
	op->step_tries = 0;
	op->fd = op->dfd = -1;
	op->size = 0;
	op->nseg = op->iovcnt = 0;
	atomic_store(&op->pending, 0);
	atomic_store(&op->err, 0);
	memcpy(op->name, o->name, HC_BE_NAME_BYTES);
	op->uiovcnt = o->opcode == HC_BE_OP_GET || o->opcode == HC_BE_OP_PUT ? o->iovcnt : 0;
	if (op->uiovcnt)
		memcpy(op->uiov, o->iov, op->uiovcnt * sizeof(*op->uiov));
	return op;
}

static void finish(struct hc_file *be, struct hc_fop *op, int64_t result)
{
	bool wake;

	count_result(be, op->opcode, result);
	pthread_mutex_lock(&be->ops_lock);
	wake = push_done(be, op->user_data, result);
	op->active = false;
	op->gen++;
	be->free_slot[be->nfree++] = op->slot;
	be->budget_used -= op->budget;
	pthread_mutex_unlock(&be->ops_lock);
	if (wake)
		hc__file_wake(be);
}

/* ---- segments */

/* One pass over src up to limit bytes: how many segments, and when op is
 * given, the segments themselves in op->iov and op->seg. */
static unsigned plan(const struct hc_file *be, const struct iovec *src, unsigned cnt, uint64_t limit, bool fixed,
		     struct hc_fop *op)
{
	unsigned ns = 0, ni = 0;
	uint64_t off = 0;
	bool run = false;

	for (unsigned i = 0; i < cnt && off < limit; i++) {
		size_t len = src[i].iov_len < limit - off ? src[i].iov_len : (size_t)(limit - off);
		int buf = fixed && len ? hc__file_fixed_find(be, src[i].iov_base, len) : -1;

		if (!len)
			continue;
		if (op) {
			op->iov[ni].iov_base = src[i].iov_base;
			op->iov[ni].iov_len = len;
		}
		if (buf >= 0 || !run) {
			if (op) {
				struct hc_fseg *s = &op->seg[ns];

				s->off = off;
				s->first = ni;
				s->cnt = 1;
				s->buf = buf;
				s->tries = 0;
			}
			ns++;
		} else if (op) {
			op->seg[ns - 1].cnt++;
		}
		run = buf < 0;
		ni++;
		off += len;
	}
	if (op) {
		op->iovcnt = ni;
		op->nseg = ns;
	}
	return ns;
}

/* CQEs an op may cause at once; more segments than the SQ holds become one
 * READV/WRITEV without fixed buffers. */
static unsigned budget_of(const struct hc_file *be, const struct hc_be_op *o, bool *fixed)
{
	unsigned n = plan(be, o->iov, o->iovcnt, UINT64_MAX, be->nchunk > 0, NULL);

	*fixed = be->nchunk > 0 && n <= be->sq_entries;
	if (!*fixed)
		n = plan(be, o->iov, o->iovcnt, UINT64_MAX, false, NULL) ? 1 : 0;
	return n ? n : 1; /* at least the fsync of an empty put */
}

static bool want_direct(struct hc_file *be, const struct hc_be_op *o)
{
	if (be->direct_mode == HC_DIRECT_OFF || !atomic_load(&be->direct_ok))
		return false;
	for (unsigned i = 0; i < o->iovcnt; i++)
		if ((uintptr_t)o->iov[i].iov_base % HC_FILE_ALIGN || o->iov[i].iov_len % HC_FILE_ALIGN)
			return false;
	return true;
}

/* direct=auto: O_DIRECT refused (EINVAL) at open or on I/O; buffered from
 * now on.  false with direct=on (the op fails). */
static bool direct_refused(struct hc_file *be, const char *when)
{
	if (be->direct_mode != HC_DIRECT_AUTO)
		return false;
	HC_COUNT(be, direct_fallbacks, 1);
	atomic_store(&be->direct_ok, false);
	hc__file_warn_once(be, HC_WARN_DIRECT,
			   "%s: the filesystem refuses O_DIRECT (EINVAL %s): buffered I/O from now on", be->dir, when);
	return true;
}

/* Caller holds sq_lock. */
static int prep_seg(struct hc_file *be, struct hc_fop *op, unsigned k)
{
	struct hc_fseg *s = &op->seg[k];
	struct io_uring_sqe *sqe = hc__file_sqe(be);
	struct iovec *v = &op->iov[s->first];

	if (!sqe)
		return -EAGAIN;
	if (s->buf >= 0 && op->opcode == HC_BE_OP_PUT)
		io_uring_prep_write_fixed(sqe, op->fd, v->iov_base, (unsigned)v->iov_len, s->off, s->buf);
	else if (s->buf >= 0)
		io_uring_prep_read_fixed(sqe, op->fd, v->iov_base, (unsigned)v->iov_len, s->off, s->buf);
	else if (op->opcode == HC_BE_OP_PUT)
		io_uring_prep_writev(sqe, op->fd, v, s->cnt, s->off);
	else
		io_uring_prep_readv(sqe, op->fd, v, s->cnt, s->off);
	io_uring_sqe_set_data64(sqe, HC_UD(op, k));
	atomic_store(&s->busy, true);
	return 0;
}

static void start_io(struct hc_file *be, struct hc_fop *op)
{
	unsigned k = 0, n = op->nseg;

	op->step = HC_STEP_IO;
	if (n == 0) {
		step_done(be, op);
		return;
	}
	HC_COUNT(be, direct_ios, op->direct);
	HC_COUNT(be, buffered_ios, !op->direct);
	for (unsigned i = 0; i < n; i++)
		HC_COUNT(be, fixed_ios, op->seg[i].buf >= 0);
	/* No other flush can send these SQEs before the unlock; from then on
	 * op belongs to whoever reaps its last CQE (the release pairs with
	 * on_cqe's acquire).  SQEs that could not be had fail the op. */
	pthread_mutex_lock(&be->sq_lock);
	while (k < n && prep_seg(be, op, k) == 0)
		k++;
	if (k < n)
		set_err(op, -EAGAIN);
	atomic_store_explicit(&op->pending, k, memory_order_release);
	pthread_mutex_unlock(&be->sq_lock);
	if (k == 0)
		step_done(be, op);
}

/* Caller holds sq_lock. */
static bool prep_step(struct hc_file *be, struct hc_fop *op)
{
	struct io_uring_sqe *sqe = hc__file_sqe(be);

	if (!sqe)
		return false;
	io_uring_prep_fsync(sqe, op->step == HC_STEP_DIRSYNC ? op->dfd : op->fd, 0);
	io_uring_sqe_set_data64(sqe, HC_UD(op, HC_UD_STEP));
	return true;
}

static void queue_step(struct hc_file *be, struct hc_fop *op, enum hc_fstep step)
{
	bool queued;

	op->step = step;
	pthread_mutex_lock(&be->sq_lock);
	queued = prep_step(be, op);
	atomic_store_explicit(&op->pending, queued, memory_order_release); /* as in start_io */
	pthread_mutex_unlock(&be->sq_lock);
	if (!queued) {
		/* No SQE after retries: do this one fsync here rather than fail. */
		if (fsync(step == HC_STEP_DIRSYNC ? op->dfd : op->fd) < 0)
			set_err(op, -errno);
		step_done(be, op);
	}
}

/* ---- GET */

static void get_start(struct hc_file *be, struct hc_fop *op)
{
	char path[HC_FILE_PATH_MAX];
	struct stat st;
	int fd;

	hc__file_path(path, op->name, 0, false);
	fd = openat(be->root, path, O_RDONLY | O_CLOEXEC | (op->direct ? O_DIRECT : 0));
	if (fd < 0 && errno == EINVAL && op->direct && direct_refused(be, "opening an object")) {
		op->direct = false;
		fd = openat(be->root, path, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0) {
		int r = -errno;

		/* Lost a race with an eviction or a delete, or removed behind
		 * our back: then the index forgets it. */
		if (r == -ENOENT)
			hc__file_forget(be, op->name);
		finish(be, op, r);
		return;
	}
	if (fstat(fd, &st) < 0) {
		int r = -errno;

		close(fd);
		finish(be, op, r);
		return;
	}
	op->fd = fd;
	op->size = (uint64_t)st.st_size;
	/* O_DIRECT moves whole blocks: past an unaligned end it would write
	 * beyond the object, and the last iovec would not be aligned. */
	if (op->direct && op->size % HC_FILE_ALIGN) {
		int fl = fcntl(fd, F_GETFL);

		if (fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0)
			op->direct = false;
	}
	plan(be, op->uiov, op->uiovcnt, op->size, op->fixed, op);
	start_io(be, op);
}

/* ---- PUT */

static void drop_temp(struct hc_file *be, struct hc_fop *op)
{
	char tmp[HC_FILE_PATH_MAX];

	close(op->fd);
	op->fd = -1;
	hc__file_path(tmp, op->name, op->seq, true);
	unlinkat(be->root, tmp, 0);
}

static void put_abort(struct hc_file *be, struct hc_fop *op, int64_t r)
{
	if (op->fd >= 0)
		drop_temp(be, op);
	if (op->reserved) {
		hc__file_unreserve(be, op->size);
		op->reserved = false;
	}
	finish(be, op, r);
}

static void put_start(struct hc_file *be, struct hc_fop *op)
{
	int r = hc__file_open_temp(be, op, op->direct ? O_DIRECT : 0);

	if (r == -EINVAL && op->direct && direct_refused(be, "creating a file")) {
		op->direct = false;
		r = hc__file_open_temp(be, op, 0);
	}
	if (r < 0) {
		put_abort(be, op, r);
		return;
	}
	plan(be, op->uiov, op->uiovcnt, UINT64_MAX, op->fixed, op);
	start_io(be, op);
}

/* The written (or flushed) temp file becomes the object. */
static void put_commit(struct hc_file *be, struct hc_fop *op)
{
	char dir[HC_FILE_PATH_MAX];
	int r;

	close(op->fd);
	op->fd = -1;
	r = hc__file_commit(be, op);
	if (r == 0 && be->fsync_mode == HC_FSYNC_ALWAYS) {
		hc__file_dirpath(dir, op->name);
		op->dfd = openat(be->root, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (op->dfd >= 0) {
			queue_step(be, op, HC_STEP_DIRSYNC);
			return;
		}
		r = -errno;
	}
	finish(be, op, r);
}

/* ---- completions */

/* Every SQE of op's current step has completed. */
static void step_done(struct hc_file *be, struct hc_fop *op)
{
	int64_t err = atomic_load(&op->err);
	bool canceled = atomic_load(&op->canceled);

	if (op->step == HC_STEP_DIRSYNC) {
		/* After the rename or unlink: its result stands, cancel or not. */
		close(op->dfd);
		op->dfd = -1;
		finish(be, op, err);
		return;
	}
	if (op->step == HC_STEP_IO && err == -EINVAL && op->direct && !canceled &&
	    direct_refused(be, op->opcode == HC_BE_OP_GET ? "reading" : "writing")) {
		atomic_store(&op->err, 0);
		op->direct = false;
		if (op->opcode == HC_BE_OP_GET) {
			close(op->fd);
			op->fd = -1;
			get_start(be, op);
		} else {
			drop_temp(be, op);
			put_start(be, op);
		}
		return;
	}
	if (op->opcode == HC_BE_OP_GET) {
		close(op->fd);
		op->fd = -1;
		finish(be, op, err ? err : canceled ? -ECANCELED : (int64_t)op->size);
	} else if (err || canceled) {
		put_abort(be, op, err ? err : -ECANCELED);
	} else if (op->step == HC_STEP_IO && be->fsync_mode == HC_FSYNC_ALWAYS) {
		queue_step(be, op, HC_STEP_FSYNC);
	} else {
		put_commit(be, op);
	}
}

static bool resubmit(struct hc_file *be, struct hc_fop *op, unsigned k)
{
	int r;

	pthread_mutex_lock(&be->sq_lock);
	r = k == HC_UD_STEP ? (prep_step(be, op) ? 0 : -EAGAIN) : prep_seg(be, op, k);
	/* What this thread changed in the segment, for the next reaper. */
	atomic_fetch_add_explicit(&op->pending, 0, memory_order_release);
	pthread_mutex_unlock(&be->sq_lock);
	if (r < 0)
		set_err(op, r);
	return r == 0;
}

/*
 * Results worth another try.  io_uring cancels the work still queued for a
 * thread that exits, and the thread that submitted this (a host's) may be
 * gone: -ECANCELED that nobody asked for.  And the block layer's -EAGAIN
 * (out of requests) reaches the CQE when the kernel does not reissue it
 * itself (completed from another thread or from io-wq).  Again on the ring,
 * then with plain syscalls, so that neither can go on for ever.
 */
static bool transient(struct hc_fop *op, int64_t res)
{
	return res == -EAGAIN || (res == -ECANCELED && !atomic_load(&op->canceled));
}

/* The rest of a segment with plain syscalls: bytes moved, or -errno. */
static int64_t seg_sync(struct hc_fop *op, const struct hc_fseg *s)
{
	struct iovec v[HC_BE_IOV_MAX];
	unsigned first = 0, cnt = s->cnt;
	uint64_t off = s->off;
	int64_t done = 0;

	memcpy(v, &op->iov[s->first], cnt * sizeof(*v));
	while (cnt) {
		ssize_t n = op->opcode == HC_BE_OP_PUT ? pwritev(op->fd, v + first, (int)cnt, (off_t)off)
						       : preadv(op->fd, v + first, (int)cnt, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : done;
		done += n;
		off += (uint64_t)n;
		for (size_t m = (size_t)n; m;) {
			size_t d = m < v[first].iov_len ? m : v[first].iov_len;

			v[first].iov_base = (char *)v[first].iov_base + d;
			v[first].iov_len -= d;
			m -= d;
			if (!v[first].iov_len) {
				first++;
				cnt--;
			}
		}
	}
	return done;
}

/* A segment's CQE: true when it went back to the ring for the rest. */
static bool seg_done(struct hc_file *be, struct hc_fop *op, unsigned k, int64_t res)
{
	struct hc_fseg *s = &op->seg[k];
	uint64_t left = 0;

	atomic_store(&s->busy, false);
	if (transient(op, res)) {
		HC_COUNT(be, retries, 1);
		if (s->tries++ < RETRIES)
			return resubmit(be, op, k);
		res = seg_sync(op, s);
	}
	if (res < 0) {
		set_err(op, res);
		return false;
	}
	if (op->opcode == HC_BE_OP_PUT)
		HC_COUNT(be, bytes_written, (uint64_t)res);
	else
		HC_COUNT(be, bytes_read, (uint64_t)res);
	for (unsigned j = s->first; j < s->first + s->cnt; j++)
		left += op->iov[j].iov_len;
	if ((uint64_t)res >= left)
		return false;
	if (res == 0) {
		set_err(op, -EIO); /* a GET's file shrank, or a write made no progress */
		return false;
	}
	/* A short transfer (a large READV, a signal): move on and go again. */
	s->off += (uint64_t)res;
	for (size_t n = (size_t)res; n;) {
		struct iovec *v = &op->iov[s->first];
		size_t d = n < v->iov_len ? n : v->iov_len;

		v->iov_base = (char *)v->iov_base + d;
		v->iov_len -= d;
		n -= d;
		if (v->iov_len == 0) {
			s->first++;
			s->cnt--;
		}
	}
	return resubmit(be, op, k);
}

static void on_cqe(struct hc_file *be, uint64_t ud, int32_t res)
{
	uint32_t slot = (uint32_t)(ud >> 8) & 0xffffffu;
	unsigned k = ud & 0xffu;
	struct hc_fop *op;

	if (slot >= be->qd)
		return; /* not ours: cannot happen */
	op = &be->op[slot];
	/* The kernel orders the CQE after its SQE; this tells the compiler
	 * (and TSan) that the op's fields written before it are seen. */
	(void)atomic_load_explicit(&op->pending, memory_order_acquire);
	if (k != HC_UD_STEP) {
		if (seg_done(be, op, k, res))
			return;
	} else {
		if (transient(op, res)) {
			HC_COUNT(be, retries, 1);
			if (op->step_tries++ < RETRIES && resubmit(be, op, k))
				return;
			res = fsync(op->step == HC_STEP_DIRSYNC ? op->dfd : op->fd) < 0 ? -errno : 0;
		}
		if (res < 0)
			set_err(op, res);
	}
	if (atomic_fetch_sub(&op->pending, 1) == 1)
		step_done(be, op);
}

/* ---- the ABI calls */

static int submit_one(struct hc_file *be, const struct hc_be_op *o)
{
	struct hc_fop *op;
	unsigned budget;
	uint64_t total = 0;
	bool fixed;
	int64_t r;

	switch (o->opcode) {
	case HC_BE_OP_EXISTS:
		if (!reserve_now(be))
			return -EAGAIN;
		HC_COUNT(be, exists, 1);
		complete_now(be, o->opcode, o->user_data, hc__file_lookup(be, o->name, false) >= 0);
		return 0;
	case HC_BE_OP_DELETE:
		if (be->fsync_mode == HC_FSYNC_NONE) {
			if (!reserve_now(be))
				return -EAGAIN;
			HC_COUNT(be, deletes, 1);
			complete_now(be, o->opcode, o->user_data, hc__file_unlink(be, o->name));
			return 0;
		}
		if (!(op = admit(be, o, 1, false)))
			return -EAGAIN;
		HC_COUNT(be, deletes, 1);
		r = hc__file_unlink(be, o->name);
		if (r == 0) {
			char dir[HC_FILE_PATH_MAX];

			hc__file_dirpath(dir, o->name);
			op->dfd = openat(be->root, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (op->dfd >= 0) {
				queue_step(be, op, HC_STEP_DIRSYNC);
				return 0;
			}
			r = -errno;
		}
		finish(be, op, r);
		return 0;
	case HC_BE_OP_GET:
	case HC_BE_OP_PUT:
		if (o->iov && o->iovcnt >= 1 && o->iovcnt <= HC_BE_IOV_MAX)
			break;
		/* fall through */
	default:
		if (!reserve_now(be))
			return -EAGAIN;
		complete_now(be, o->opcode, o->user_data, -EINVAL);
		return 0;
	}

	if (o->opcode == HC_BE_OP_GET && hc__file_lookup(be, o->name, true) < 0) {
		if (!reserve_now(be))
			return -EAGAIN;
		HC_COUNT(be, gets, 1);
		complete_now(be, o->opcode, o->user_data, -ENOENT);
		return 0;
	}
	for (unsigned i = 0; o->opcode == HC_BE_OP_PUT && i < o->iovcnt; i++) {
		if (total + o->iov[i].iov_len < total)
			total = UINT64_MAX;
		else
			total += o->iov[i].iov_len;
	}
	if (o->opcode == HC_BE_OP_PUT) {
		pthread_mutex_lock(&be->idx_lock);
		r = be->capacity != HC_FILE_UNLIMITED && total > be->capacity ? -ENOSPC : 0;
		pthread_mutex_unlock(&be->idx_lock);
		if (r < 0) {
			if (!reserve_now(be))
				return -EAGAIN;
			HC_COUNT(be, puts, 1);
			complete_now(be, o->opcode, o->user_data, r);
			return 0;
		}
	}
	budget = budget_of(be, o, &fixed);
	if (!(op = admit(be, o, budget, fixed)))
		return -EAGAIN;
	op->direct = want_direct(be, o);
	if (o->opcode == HC_BE_OP_GET) {
		HC_COUNT(be, gets, 1);
		get_start(be, op);
		return 0;
	}
	HC_COUNT(be, puts, 1);
	op->size = total;
	hc__file_make_room(be, total, op->name);
	op->reserved = true;
	put_start(be, op);
	return 0;
}

int hc__file_submit(void *arg, const struct hc_be_op *ops, unsigned n)
{
	struct hc_file *be = arg;
	unsigned i = 0;

	if (!be || (!ops && n))
		return -EINVAL;
	while (i < n && submit_one(be, &ops[i]) == 0)
		i++;
	/* One io_uring_enter for the SQEs of the whole batch. */
	hc__file_flush(be);
	return i == 0 && n > 0 ? -EAGAIN : (int)i;
}

static unsigned pop_done(struct hc_file *be, struct hc_be_cqe *cqes, unsigned max)
{
	unsigned n = be->done_len < max ? be->done_len : max;

	for (unsigned i = 0; i < n; i++)
		cqes[i] = be->done[(be->done_head + i) % be->done_cap];
	be->done_head = (be->done_head + n) % be->done_cap;
	be->done_len -= n;
	be->outstanding -= n;
	return n;
}

static int ms_left(const struct timespec *deadline)
{
	struct timespec now;
	int64_t ms;

	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (deadline->tv_sec - now.tv_sec) * 1000 + (deadline->tv_nsec - now.tv_nsec + 999999) / 1000000;
	return ms <= 0 ? 0 : ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/* Takes the harvester role's turn (ops_lock held on entry and exit): CQEs
 * are copied out under the role, acted on after it is given up. */
static void harvest_turn(struct hc_file *be, int wait_ms)
{
	struct hc_fcqe fc[64];
	unsigned got;

	be->harvesting = true;
	pthread_mutex_unlock(&be->ops_lock);
	got = hc__file_harvest(be, fc, 64, wait_ms);
	pthread_mutex_lock(&be->ops_lock);
	be->harvesting = false;
	pthread_cond_broadcast(&be->ops_cond); /* a waiter may take the role */
	pthread_mutex_unlock(&be->ops_lock);
	for (unsigned i = 0; i < got; i++)
		on_cqe(be, fc[i].ud, fc[i].res);
	hc__file_flush(be); /* the next steps' SQEs */
	pthread_mutex_lock(&be->ops_lock);
}

int hc__file_reap(void *arg, struct hc_be_cqe *cqes, unsigned max, int timeout_ms)
{
	struct hc_file *be = arg;
	struct timespec deadline = { 0 };
	bool tried = false, wake = false;
	unsigned n = 0;

	if (!be || (!cqes && max))
		return -EINVAL;
	if (max == 0)
		return 0;
	if (timeout_ms > 0)
		deadline = hc_be_deadline(timeout_ms);
	pthread_mutex_lock(&be->ops_lock);
	for (;;) {
		n = pop_done(be, cqes, max);
		if (n && be->outstanding == 0) {
			/* Nothing left in flight: other reapers stop waiting. */
			pthread_cond_broadcast(&be->ops_cond);
			if (be->in_wait && !be->wake_pending) {
				be->wake_pending = true;
				wake = true;
			}
		}
		if (n || be->outstanding == 0)
			break;
		if (!be->harvesting) {
			int wait = timeout_ms < 0 ? -1 : timeout_ms == 0 ? 0 : ms_left(&deadline);

			if (tried && wait == 0)
				break;
			harvest_turn(be, wait);
			tried = true;
			continue;
		}
		if (timeout_ms == 0)
			break;
		if (timeout_ms < 0)
			pthread_cond_wait(&be->ops_cond, &be->ops_lock);
		else if (pthread_cond_timedwait(&be->ops_cond, &be->ops_lock, &deadline) == ETIMEDOUT)
			tried = true; /* one last look, without waiting */
	}
	pthread_mutex_unlock(&be->ops_lock);
	if (wake)
		hc__file_wake(be);
	return (int)n;
}

int hc__file_cancel(void *arg, uint64_t user_data)
{
	struct hc_file *be = arg;
	uint64_t ud[HC_BE_IOV_MAX];
	unsigned n = 0, room;
	bool found = false;

	if (!be)
		return -EINVAL;
	pthread_mutex_lock(&be->ops_lock);
	for (unsigned i = 0; i < be->done_len && !found; i++)
		found = be->done[(be->done_head + i) % be->done_cap].user_data == user_data;
	room = be->cq_entries - 1 - be->budget_used;
	for (unsigned s = 0; s < be->qd; s++) {
		struct hc_fop *op = &be->op[s];

		if (!op->active || op->user_data != user_data)
			continue;
		found = true;
		/* Under ops_lock the slot cannot be reused: the flag lands on
		 * this op, and the SQE user_data carry its generation. */
		atomic_store(&op->canceled, true);
		for (unsigned k = 0; k < HC_BE_IOV_MAX && n < room && n < HC_BE_IOV_MAX; k++)
			if (atomic_load(&op->seg[k].busy))
				ud[n++] = HC_UD(op, k);
	}
	be->budget_used += n;
	pthread_mutex_unlock(&be->ops_lock);
	if (!found)
		return -ENOENT;
	/* Best effort: I/O already running finishes; the op then sees the
	 * flag at its next step and ends with -ECANCELED (a put before its
	 * rename), or with its result if it had won the race. */
	if (n)
		hc__file_send_cancels(be, ud, n);
	return 0;
}

int hc__file_ops_init(struct hc_file *be)
{
	pthread_condattr_t ca;
	int r;

	be->done_cap = be->qd + HC_FILE_DONE_EXTRA;
	be->op = calloc(be->qd, sizeof(*be->op));
	be->free_slot = calloc(be->qd, sizeof(*be->free_slot));
	be->done = calloc(be->done_cap, sizeof(*be->done));
	if (!be->op || !be->free_slot || !be->done)
		goto nomem;
	for (unsigned i = 0; i < be->qd; i++) {
		be->op[i].slot = i;
		be->op[i].fd = be->op[i].dfd = -1;
		be->free_slot[i] = be->qd - 1 - i;
	}
	be->nfree = be->qd;
	r = pthread_condattr_init(&ca);
	if (r == 0) {
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		r = pthread_cond_init(&be->ops_cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	if (r != 0)
		goto nomem;
	pthread_mutex_init(&be->ops_lock, NULL);
	pthread_mutex_init(&be->sq_lock, NULL);
	return 0;
nomem:
	free(be->op);
	free(be->free_slot);
	free(be->done);
	be->op = NULL;
	be->free_slot = NULL;
	be->done = NULL;
	return -ENOMEM;
}

/* close() with ops in flight breaks the ABI; still, finish them (temp files
 * removed, fds closed) rather than free memory the kernel writes to. */
void hc__file_ops_drain(struct hc_file *be)
{
	struct hc_fcqe fc[64];

	for (;;) {
		unsigned got;
		bool busy;

		pthread_mutex_lock(&be->ops_lock);
		busy = be->nfree < be->qd;
		pthread_mutex_unlock(&be->ops_lock);
		if (!busy)
			break;
		got = hc__file_harvest(be, fc, 64, 100);
		for (unsigned i = 0; i < got; i++)
			on_cqe(be, fc[i].ud, fc[i].res);
		hc__file_flush(be);
	}
}

void hc__file_ops_free(struct hc_file *be)
{
	pthread_cond_destroy(&be->ops_cond);
	pthread_mutex_destroy(&be->ops_lock);
	pthread_mutex_destroy(&be->sq_lock);
	free(be->op);
	free(be->free_slot);
	free(be->done);
}
