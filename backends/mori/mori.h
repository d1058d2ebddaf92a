/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mori.h - the mori backend's private declarations: the options, the
 * instance, one memory server as the plugin sees it, and an op's job.
 *
 *   opts.c    option parsing: servers, transports, timeouts, limits
 *   place.c   rendezvous hashing: which server holds a name
 *   server.c  one server: its control connection, hello, UCX endpoint and
 *             rkey, its requests and their replies, failure and back-off
 *   xfer.c    the progress thread: jobs to control requests, the one-sided
 *             gets and puts, completions, deadlines
 *   mori.c    the ABI table: open, close, submit, reap, cancel, stats, ctl
 *
 * NOTES ON SYNCHRONIZATION (all process-private)
 *
 * One progress thread owns the UCX worker, every server (its socket, its
 * endpoint, its request queue) and every job between submit and
 * completion: nothing else touches them.  The worker is created
 * UCS_THREAD_MODE_SINGLE for that reason.  Other threads meet it in
 * be->mu:
 *   - submit puts new jobs on be->incoming and writes the eventfd;
 *   - the thread completes a job by moving it to be->done (and never
 *     touches it again); reap takes it from there and frees it;
 *   - every accepted job is also on be->all until it is reaped, so that
 *     cancel can find it and set its canceled flag (atomic), which the
 *     thread reads;
 *   - stats() asks for the servers' figures by bumping be->stats_want and
 *     waits for be->stats_gen to reach it.
 * reg_mem and unreg_mem run with no other call on the instance, but the
 * thread reads the registrations to find a buffer's memory handle: they
 * are under be->reg_mu.  The UCP context is shared by the caller's thread
 * (ucp_mem_map) and the progress thread, so it is made thread-safe
 * (mt_workers_shared).
 */
#ifndef HC_BACKENDS_MORI_MORI_H
#define HC_BACKENDS_MORI_MORI_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include <ucp/api/ucp.h>

#include <hicache/backend.h>

#include "../common.h"
#include "../hostport.h"
#include "wire.h"

#define HC_MORI_MAX_SERVERS 64
#define HC_MORI_PORT        7470 /* hicache-memd's default */
#define HC_MORI_TLS_MAX     255
#define HC_MORI_TX_MAX      (8u << 20) /* requests waiting to be written to one server */

struct hc_mori_opts {
	struct hc_be_server servers[HC_MORI_MAX_SERVERS];
	unsigned nservers;
	char transports[HC_MORI_TLS_MAX + 1]; /* UCX_TLS for this instance, or "" (UCX's own) */
	unsigned connect_timeout_ms;
	unsigned io_timeout_ms; /* an op's whole life, control and transfer */
	unsigned retry_ms;      /* first back-off after a server fails; doubles to retry_max_ms */
	unsigned retry_max_ms;
	unsigned lease_ms; /* the lease asked of the servers; 0: theirs */
	unsigned inflight; /* ops accepted and not yet reaped */
	unsigned batch;    /* items in one control request */
};

/* Counters, declared once for the struct and stats(). */
#define HC_MORI_COUNTERS(X)                                                                                            \
	X(gets)                                                                                                        \
	X(hits)                                                                                                        \
	X(misses)                                                                                                      \
	X(puts)                                                                                                        \
	X(deletes)                                                                                                     \
	X(exists)                                                                                                      \
	X(errors)                                                                                                      \
	X(canceled)                                                                                                    \
	X(get_bytes)                                                                                                   \
	X(put_bytes)                                                                                                   \
	X(round_trips)                                                                                                 \
	X(transfers)                                                                                                   \
	X(zero_copy)                                                                                                   \
	X(timeouts)                                                                                                    \
	X(server_failures)                                                                                             \
	X(connects)                                                                                                    \
	X(server_down)                                                                                                 \
	X(enospc)                                                                                                      \
	X(ebusy)                                                                                                       \
	X(stale)

struct hc_mori_counters {
#define X(n) _Atomic uint64_t n;
	HC_MORI_COUNTERS(X)
#undef X
};
#define HC_MORI_COUNT(be, n, v) atomic_fetch_add_explicit(&(be)->cnt.n, (v), memory_order_relaxed)

/* One accepted op: a copy of the host's, with its own iovecs. */
struct hc_mori_job {
	struct hc_mori_job *next;                /* incoming, the thread's lists, done */
	struct hc_mori_job *all_prev, *all_next; /* be->all (under be->mu) */
	uint64_t user_data;
	uint32_t opcode;
	uint32_t iovcnt;
	uint64_t bytes; /* of the iovecs */
	uint8_t name[HC_BE_NAME_BYTES];
	int64_t result;
	_Atomic bool canceled;
	/* the thread's own */
	unsigned server;
	uint64_t deadline_ms;              /* CLOCK_MONOTONIC */
	uint64_t offset;                   /* in the server's region */
	uint64_t length;                   /* the object's bytes (GET), what is written (PUT) */
	uint64_t lease;                    /* a GET's lease or a PUT's token, 0 if none */
	unsigned pending;                  /* UCX requests in flight */
	int xfer_status;                   /* the first failure among them, or 0 */
	uint64_t server_epoch;             /* the server's connection when the transfer started */
	uint64_t lease_end_ms;             /* its transfer (and a put's flush) must end by then */
	int abort;                         /* a PUT to give up after its flush: RELEASE, not COMMIT */
	struct hc_mori_job *xprev, *xnext; /* the server's transfers, oldest first */
	struct hc_mori *be;
	struct iovec iov[]; /* iovcnt of them */
};

/* A control request in flight on a server's connection. */
struct hc_mori_req {
	struct hc_mori_req *next;
	uint16_t type;
	uint32_t seq;
	uint32_t n;
	uint64_t sent_ms;
	struct hc_mori_job **jobs; /* n of them, in item order (NULL for RELEASE and STATS) */
};

enum hc_mori_sstate {
	HC_MORI_S_DOWN,       /* not connected; retry at retry_at_ms */
	HC_MORI_S_CONNECTING, /* TCP connect in flight */
	HC_MORI_S_HELLO,      /* HELLO sent */
	HC_MORI_S_UP,
	HC_MORI_S_CLOSING, /* its endpoint is closing; then DOWN */
};

/* One memory server (the thread's). */
struct hc_mori_server {
	struct hc_be_server addr;
	char label[HC_BE_HOST_MAX + 16]; /* host:port, for logs */
	uint64_t hash;                   /* its rendezvous seed (place.c) */
	enum hc_mori_sstate state;
	int fd;
	uint64_t epoch; /* connections made so far: a transfer of an older one failed with it */
	uint64_t since_ms;
	uint64_t retry_at_ms;
	unsigned backoff_ms;
	/* what HELLO said */
	uint16_t version;
	uint32_t lease_ms;
	uint64_t base, size;
	uint32_t batch_max;
	ucp_ep_h ep;
	ucp_rkey_h rkey;
	void *close_req;        /* the endpoint's close in flight (CLOSING) */
	bool err_none;          /* the endpoint has no peer failure detection (shm) */
	ucs_status_t ep_failed; /* set by its error handler: the next tick fails it */
	/* the connection */
	uint8_t *rx;
	size_t rx_len, rx_cap;
	uint8_t *tx;
	size_t tx_off, tx_len, tx_cap;
	int tx_err;                            /* a send failed: the next tick fails the server */
	struct hc_mori_req *rq_head, *rq_tail; /* awaiting replies, in order */
	uint32_t seq;
	/* the puts of this server waiting for one flush, then one COMMIT */
	struct hc_mori_job *flushq;
	void *flush_req;
	struct hc_mori_job *flushing;      /* the jobs the flush in flight covers */
	uint64_t flush_ms;                 /* when it started */
	unsigned xfer_jobs;                /* jobs of this connection with transfers in flight */
	uint64_t xfer_last_ms;             /* when one last finished (or the first started) */
	struct hc_mori_job *xhead, *xtail; /* jobs from their transfer's start to its end (PUT: its flush) */
	ucs_status_t flush_status;
	bool flush_ended;
	/* STATS */
	uint64_t stat_objects, stat_bytes, stat_capacity, stat_evictions;
};

/* Leases and tokens a server is to be told of (RELEASE), batched. */
struct hc_mori_release {
	uint64_t *ids;
	unsigned n, cap;
};

/* One reg_mem: a memory handle for buffers in [addr, addr + len). */
struct hc_mori_reg {
	struct hc_mori_reg *next;
	uint8_t *addr;
	size_t len;
	ucp_mem_h memh;
};

/* One open instance. */
struct hc_mori {
	struct hc_mori_opts o;
	ucp_context_h ctx;
	ucp_worker_h worker;
	int worker_fd; /* ucp_worker_get_efd */
	int epfd;
	int wake_fd; /* eventfd: submit, cancel, stats, stop */

	pthread_mutex_t reg_mu;
	struct hc_mori_reg *regs;

	pthread_mutex_t mu;
	pthread_cond_t done_cv;  /* a job completed */
	pthread_cond_t stats_cv; /* stats_gen moved */
	struct hc_mori_job *incoming, *incoming_tail;
	struct hc_mori_job *done, *done_tail;
	struct hc_mori_job *all;
	unsigned accepted; /* incoming + the thread's + done */
	unsigned ndone;
	uint64_t stats_want, stats_gen;
	uint64_t stat_objects, stat_bytes, stat_capacity, stat_evictions; /* summed at stats_gen */
	bool stop;

	pthread_t thread;
	bool started;
	/* the thread's */
	struct hc_mori_server *servers;
	unsigned nservers;
	struct hc_mori_job *work;         /* NEW jobs, in submit order */
	struct hc_mori_job *finished;     /* jobs whose transfers all ended */
	struct hc_mori_release *releases; /* per server */
	unsigned ntransfers;              /* UCX requests in flight (gets, puts, flushes, closes) */
	uint64_t stats_asked;
	unsigned stats_waiting; /* servers yet to answer STATS */

	struct hc_mori_counters cnt;
	_Atomic unsigned warned; /* HC_MORI_WARN_* */
};

#define HC_MORI_WARN_SERVER   0x1u
#define HC_MORI_WARN_ERRMODE  0x2u
#define HC_MORI_WARN_LEASE    0x4u
#define HC_MORI_WARN_FULL     0x8u
#define HC_MORI_WARN_REGISTER 0x10u
#define HC_MORI_WARN_TRANSFER 0x20u

/* mori.c */
const struct hc_backend_host *hc__mori_host(void);
#define hc__mori_log(level, ...)           hc_be_log(hc__mori_host(), (level), __VA_ARGS__)
#define hc__mori_warn_once(be, cause, ...) hc_be_warn_once(hc__mori_host(), &(be)->warned, (cause), __VA_ARGS__)
#define hc__mori_fail                      hc_be_fail
uint64_t hc__mori_now_ms(void);
/* The job is done with its result: to the reapers; the thread forgets it. */
void hc__mori_complete(struct hc_mori *be, struct hc_mori_job *j, int64_t result);

/* opts.c */
int hc__mori_opts_parse(const struct hc_be_option *opts, unsigned nopts, struct hc_mori_opts *o, char *err,
			size_t errlen);

/* place.c */
void hc__mori_place_init(struct hc_mori_server *s);
unsigned hc__mori_place(const struct hc_mori *be, const uint8_t name[HC_BE_NAME_BYTES]);

/* server.c */
void hc__mori_server_init(struct hc_mori *be, struct hc_mori_server *s, const struct hc_be_server *addr);
void hc__mori_server_fini(struct hc_mori *be, struct hc_mori_server *s);
/* Connect a DOWN server whose back-off has passed; add its fd to epfd. */
void hc__mori_server_tick(struct hc_mori *be, struct hc_mori_server *s, uint64_t now);
/* Its socket is ready (EPOLLIN/OUT/ERR events). */
void hc__mori_server_io(struct hc_mori *be, struct hc_mori_server *s, uint32_t events);
/* The server failed (why, with errnum for its jobs): fail what it has in
 * flight, close its endpoint, and back off. */
void hc__mori_server_fail(struct hc_mori *be, struct hc_mori_server *s, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Queue a request: header and body (count and flags, then items of
 * item_size bytes from items); jobs (n, or NULL) get its replies.
 * 0, or -ENOBUFS when the server's queue is full. */
int hc__mori_server_send(struct hc_mori *be, struct hc_mori_server *s, uint16_t type, uint32_t flags, const void *items,
			 size_t item_size, uint32_t n, struct hc_mori_job **jobs);

/* xfer.c */
void *hc__mori_thread(void *arg);
/* Before the thread starts: try every server once; how many are up. */
unsigned hc__mori_connect_all(struct hc_mori *be);
/* A reply to req arrived on s: its results (validated count and size). */
void hc__mori_reply(struct hc_mori *be, struct hc_mori_server *s, struct hc_mori_req *req, const uint8_t *results);
/* Checks every result of a reply before any is used: 0, or -EPROTO after
 * failing the server (a result outside its region). */
int hc__mori_reply_check(struct hc_mori *be, struct hc_mori_server *s, const struct hc_mori_req *req,
			 const uint8_t *results);
/* Every job that req was carrying failed with errnum (the server failed). */
void hc__mori_req_fail(struct hc_mori *be, struct hc_mori_server *s, struct hc_mori_req *req, int errnum);
/* The transfers of s's jobs are finished or failed: flush queue and so on. */
void hc__mori_server_lost(struct hc_mori *be, struct hc_mori_server *s, int errnum);
/* The memory handle of [p, p + len), or NULL (be->reg_mu). */
ucp_mem_h hc__mori_memh(struct hc_mori *be, const void *p, size_t len);

#endif
