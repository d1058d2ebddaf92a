/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file.h - the file backend's instance and the calls between its parts:
 * file.c (ABI table, options, open/close, ctl, stats), store.c (the on-disk
 * layout: names, rebuild and sweep, eviction, commit and delete), io.c (the
 * ring, fixed buffers, harvesting completions) and ops.c (submit, reap,
 * cancel and each op's steps).
 *
 * NOTES ON SYNCHRONIZATION
 *
 * Four kinds of lock, always taken in this order, never two of one kind:
 *   name_lock[stripe]  serializes what changes a name on disk (rename of a
 *                      put, unlink of a delete or an eviction) with the
 *                      index update that goes with it, so the index always
 *                      says what the last rename or unlink did;
 *   idx_lock           the index, its LRU order, reserved and capacity;
 *   ops_lock           slots, the done queue, the CQE budget, the harvester
 *                      role and its wake-up (ops_cond);
 *   sq_lock            the submission ring.
 * An evictor holds idx_lock and only trylocks a name lock (the wrong order),
 * skipping a victim whose stripe is busy.  The completion ring is consumed by
 * one harvester at a time (ops->harvesting), which copies the CQEs out and
 * gives the role up before it acts on them, so the steps of different ops
 * (and of one op's segments, through atomics) run on several reapers at once.
 */
#ifndef HC_FILE_FILE_H
#define HC_FILE_FILE_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <hicache/backend.h>

#include "../common.h"
#include "index.h"

#define HC_FILE_NAME_LOCKS 64
#define HC_FILE_PATH_MAX   160          /* fp/kk/.key.seq.tmp: 64+1+2+1+1+64+1+16+4, and NUL */
#define HC_FILE_CHUNK      (1ull << 30) /* the kernel's limit on one fixed buffer */
#define HC_FILE_BUF_SLOTS  1024u        /* the sparse fixed-buffer table */
#define HC_FILE_DONE_EXTRA 1024u        /* completions without a ring op that may wait to be reaped */
#define HC_FILE_ALIGN      4096u        /* O_DIRECT only when every iovec is aligned to this */
#define HC_FILE_QD_MAX     4096u
#define HC_FILE_UNLIMITED  UINT64_MAX

enum { HC_FSYNC_NONE, HC_FSYNC_ALWAYS };
enum { HC_DIRECT_AUTO, HC_DIRECT_ON, HC_DIRECT_OFF };
enum { HC_FIXED_AUTO, HC_FIXED_OFF };

/* Counters, declared once (memcached's way) for the struct and stats(). */
#define HC_FILE_COUNTERS(X)                                                                                            \
	X(gets)                                                                                                        \
	X(hits)                                                                                                        \
	X(misses)                                                                                                      \
	X(puts)                                                                                                        \
	X(deletes)                                                                                                     \
	X(exists)                                                                                                      \
	X(evictions)                                                                                                   \
	X(errors)                                                                                                      \
	X(canceled)                                                                                                    \
	X(bytes_read)                                                                                                  \
	X(bytes_written)                                                                                               \
	X(direct_ios)                                                                                                  \
	X(buffered_ios)                                                                                                \
	X(fixed_ios)                                                                                                   \
	X(direct_fallbacks)                                                                                            \
	X(retries)                                                                                                     \
	X(temp_swept)                                                                                                  \
	X(ignored_files)

struct hc_file_counters {
#define X(n) _Atomic uint64_t n;
	HC_FILE_COUNTERS(X)
#undef X
};
#define HC_COUNT(be, n, v) atomic_fetch_add_explicit(&(be)->cnt.n, (v), memory_order_relaxed)

/* One SQE's worth of an op's bytes: a fixed buffer, or a run of iovecs. */
struct hc_fseg {
	uint64_t off;        /* file offset of the segment's next byte */
	uint32_t first, cnt; /* op->iov[first .. first+cnt) */
	int buf;             /* fixed buffer index, or -1 for READV/WRITEV */
	uint32_t tries;      /* resubmissions after a spurious -ECANCELED */
	_Atomic bool busy;   /* its SQE is in the ring (what cancel targets) */
};

enum hc_fstep { HC_STEP_IO, HC_STEP_FSYNC, HC_STEP_DIRSYNC };

/* An accepted op that uses the ring (GET hit, PUT, DELETE with fsync). */
struct hc_fop {
	uint64_t user_data; /* the host's */
	uint32_t opcode;
	uint32_t gen; /* bumped at each reuse of the slot: stale cancels miss */
	uint32_t slot;
	uint32_t budget; /* CQEs this op may cause at once */
	bool active;
	bool fixed;    /* may use fixed buffers (fits the budget) */
	bool direct;   /* its file is open with O_DIRECT */
	bool reserved; /* a PUT holding capacity */
	enum hc_fstep step;
	uint32_t step_tries; /* resubmissions of an fsync after a spurious -ECANCELED */
	int fd;              /* the object or temp file; -1 */
	int dfd;             /* the fan-out directory, for its fsync; -1 */
	uint64_t size;       /* GET: the object's length; PUT: bytes to write */
	uint64_t seq;        /* PUT: the temp name's number */
	_Atomic bool canceled;
	_Atomic uint32_t pending; /* SQEs in the ring */
	_Atomic int64_t err;      /* the first failure, or 0 */
	uint8_t name[HC_BE_NAME_BYTES];
	uint32_t uiovcnt, iovcnt, nseg;
	struct iovec uiov[HC_BE_IOV_MAX]; /* the host's, copied at submit */
	struct iovec iov[HC_BE_IOV_MAX];  /* what is left to move, per segment */
	struct hc_fseg seg[HC_BE_IOV_MAX];
};

/* A reg_mem region, whether or not its memory could be registered. */
struct hc_fregion {
	void *addr;
	size_t len;
};

/* A registered chunk (at most HC_FILE_CHUNK) of one reg_mem region. */
struct hc_fchunk {
	uintptr_t addr;
	size_t len;
	unsigned slot; /* index in the ring's buffer table */
	void *region;  /* the addr reg_mem was given */
};

struct hc_file {
	/* options: fixed after open, except capacity (idx_lock) */
	char *dir;
	unsigned qd;
	int fsync_mode, direct_mode, fixed_mode;
	int root;   /* the directory */
	int lockfd; /* flock: one instance per directory */
	_Atomic bool direct_ok;

	struct io_uring ring;
	unsigned sq_entries, cq_entries;
	pthread_mutex_t sq_lock;

	pthread_mutex_t ops_lock;
	pthread_cond_t ops_cond;
	struct hc_fop *op; /* qd slots */
	uint32_t *free_slot;
	unsigned nfree;
	struct hc_be_cqe *done; /* a circular queue of finished ops */
	unsigned done_cap, done_head, done_len;
	unsigned outstanding; /* accepted and not yet reaped */
	unsigned budget_used; /* CQEs that may still come, besides the wake-up */
	bool harvesting, in_wait, wake_pending;

	pthread_mutex_t idx_lock;
	struct hc_idx idx;
	uint64_t capacity;
	uint64_t reserved; /* bytes of puts in flight */
	pthread_mutex_t name_lock[HC_FILE_NAME_LOCKS];

	/* fixed buffers: reg_mem/unreg_mem never run beside anything else */
	bool fixed_usable;
	struct hc_fregion *region;
	unsigned nregion;
	struct hc_fchunk *chunk; /* sorted by addr */
	unsigned nchunk;
	uint8_t buf_used[HC_FILE_BUF_SLOTS];

	_Atomic uint64_t seq;
	_Atomic unsigned warned; /* HC_WARN_* bits: one warning per cause */
	struct hc_file_counters cnt;
};

#define HC_WARN_DIRECT 1u
#define HC_WARN_FIXED  2u
#define HC_WARN_RING   4u
#define HC_WARN_INDEX  8u

/* file.c */
/* Logging through the host entry() was given (backends/common.h); warn_once
 * logs at WARN unless this cause was already logged. */
const struct hc_backend_host *hc__file_host(void);
#define hc__file_log(be, level, ...)       ((void)(be), hc_be_log(hc__file_host(), (level), __VA_ARGS__))
#define hc__file_warn_once(be, cause, ...) hc_be_warn_once(hc__file_host(), &(be)->warned, (cause), __VA_ARGS__)

/* store.c */
void hc__file_path(char *out, const uint8_t *name, uint64_t tmp_seq, bool tmp);
void hc__file_dirpath(char *out, const uint8_t *name);
pthread_mutex_t *hc__file_name_lock(struct hc_file *be, const uint8_t *name);
int hc__file_rebuild(struct hc_file *be, char *err, size_t errlen);
/* Evicts LRU objects until need more bytes fit (for a put of put_name:
 * counting puts in flight), then reserves need; see store.c. */
void hc__file_make_room(struct hc_file *be, uint64_t need, const uint8_t *put_name);
void hc__file_unreserve(struct hc_file *be, uint64_t bytes);
/* GET: the indexed size (touching the LRU), or -ENOENT. */
int64_t hc__file_lookup(struct hc_file *be, const uint8_t *name, bool touch);
/* The file behind an index entry is gone: drop the entry if it still is. */
void hc__file_forget(struct hc_file *be, const uint8_t *name);
int hc__file_open_temp(struct hc_file *be, struct hc_fop *op, int flags);
int hc__file_commit(struct hc_file *be, struct hc_fop *op);
int hc__file_unlink(struct hc_file *be, const uint8_t *name);
int hc__file_set_capacity(struct hc_file *be, uint64_t cap);

/* io.c */
int hc__file_ring_init(struct hc_file *be, char *err, size_t errlen);
void hc__file_ring_exit(struct hc_file *be);
int hc__file_fixed_find(const struct hc_file *be, const void *addr, size_t len);
int hc__file_reg(struct hc_file *be, void *addr, size_t len);
int hc__file_unreg(struct hc_file *be, void *addr);
uint64_t hc__file_fixed_bytes(const struct hc_file *be);
/* Prepares an SQE (under sq_lock); flush submits what is prepared. */
struct io_uring_sqe *hc__file_sqe(struct hc_file *be);
void hc__file_flush(struct hc_file *be);
void hc__file_wake(struct hc_file *be);
void hc__file_send_cancels(struct hc_file *be, const uint64_t *ud, unsigned n);
/* The harvester: copies out up to max CQEs, waiting up to timeout_ms. */
struct hc_fcqe {
	uint64_t ud;
	int32_t res;
};
unsigned hc__file_harvest(struct hc_file *be, struct hc_fcqe *out, unsigned max, int timeout_ms);

/* ops.c */
int hc__file_submit(void *be, const struct hc_be_op *ops, unsigned n);
int hc__file_reap(void *be, struct hc_be_cqe *cqes, unsigned max, int timeout_ms);
int hc__file_cancel(void *be, uint64_t user_data);
int hc__file_ops_init(struct hc_file *be);
void hc__file_ops_drain(struct hc_file *be);
void hc__file_ops_free(struct hc_file *be);

/* SQE user_data: an op's slot, generation and segment; or a tag of our own. */
#define HC_UD_TAG      (1ull << 63)
#define HC_UD_WAKE     (HC_UD_TAG | 1)
#define HC_UD_CANCEL   (HC_UD_TAG | 2)
#define HC_UD_STEP     0xffu /* the segment byte of an fsync */
#define HC_UD(op, seg) (((uint64_t)((op)->gen & 0x7fffffffu) << 32) | ((uint64_t)(op)->slot << 8) | (seg))

#endif
