/* SPDX-License-Identifier: Apache-2.0 */
/*
 * internal.h - what device.c (the API, the queue, the worker) shares with the
 * kinds that move the bytes: host.c (host memory) and cuda.c (a
 * CUDA device).  A kind is a table of operations, as SQLite's VFS is.
 *
 * Who touches what (process-private):
 * - hc_dev: set by hc_dev_open, then read-only, except the queues, stop
 *   and the counters (under mu; see device.c) and the kind's own state
 *   (its threads', as its ops say).
 * - hc_xfer: the request copies are written before it is queued; the
 *   kind's per-transfer state (kx) is written by the issuer in begin and
 *   the layers, and read by the completer (sync) and by event() once
 *   issued says the layer was, and by end() once the transfer finished.
 */
#ifndef HC_LIB_DEV_H
#define HC_LIB_DEV_H

#include <pthread.h>

#include <hicache/device.h>

#include "map.h"

struct hc__dev_ops {
	const char *name;
	/* After the plan is made: the kind's state in d->kd; -errno with a line. */
	int (*open)(hc_dev *d, const struct hc_dev_spec *s);
	void (*close)(hc_dev *d);
	/* First thing on each of the device's two threads. */
	void (*thread_start)(hc_dev *d);
	/* Issuer: before the first layer of x, on path (DIRECT or KERNEL). */
	int (*begin)(hc_dev *d, hc_xfer *x, enum hc_dev_path path);
	/* Issuer: issue one layer, as runs (returns the copies issued) or as
	 * the items of L; then mark it. */
	int (*runs)(hc_dev *d, hc_xfer *x, const struct hc__run *runs, unsigned n);
	int (*gather)(hc_dev *d, hc_xfer *x, const struct hc__dl *L);
	int (*mark)(hc_dev *d, hc_xfer *x, unsigned layer);
	/* Issuer, after the last layer or a failure (result < 0): let go of
	 * what begin took; on a failure, wait until whatever was issued is
	 * done, so nothing lands after the failure is told. */
	void (*issued)(hc_dev *d, hc_xfer *x, int result);
	/* Completer: wait until an issued layer has arrived. */
	int (*sync)(hc_dev *d, hc_xfer *x, unsigned layer);
	/* Any thread, for an issued layer: its event (no call into the kind's runtime). */
	void *(*event)(hc_xfer *x, unsigned layer);
	/* Owner, once the transfer finished: free what begin made (no call into the runtime). */
	void (*end)(hc_dev *d, hc_xfer *x);
	/* Issuer, on AUTO: the path for a transfer whose first layer has these runs. */
	enum hc_dev_path (*choose)(hc_dev *d, const struct hc__run *runs, unsigned n);
};

extern const struct hc__dev_ops hc__dev_host_ops;
extern const struct hc__dev_ops hc__dev_cuda_ops; /* fails to open in a build without CUDA */

struct hc_xfer {
	hc_dev *dev;
	struct hc_xfer *next;
	int store;
	int sync; /* HC_XFER_SYNC: issued and completed by the caller's thread, never queued */
	unsigned flags, n, layers;
	hc_page_t *pages;
	uint32_t *ids, *presence;
	uint64_t *slots, *state_slots;
	void *after;
	struct hc_xfer *cnext; /* the completer's queue */
	enum hc_dev_path path; /* the issuer's choice, before layer 0 */
	/* under dev->mu */
	unsigned issued; /* layers issued */
	int issue_done, issue_result;
	unsigned arrived; /* layers whose bytes are in */
	int finished, result;
	/* the issuer's, read by the completer after issue_done */
	uint64_t bytes, copies, direct_layers, kernel_layers;
	char err[256]; /* the line of a failure */
	void *kx;      /* the kind's, from begin to end */
};

struct hc_dev {
	hc_pool *pool;
	const struct hc__dev_ops *ops;
	enum hc_dev_path path;
	int device;
	struct hc__dev_plan pl;
	struct hc__dev_plan pl_store; /* pl without the replicated components, except on rank 0 */
	uint64_t *addrs;              /* our copies of the callers' k/v arrays */
	unsigned layers;              /* the most of any described component */
	uint32_t shards;              /* what this rank commits: its groups, and the replicated part on rank 0 */
	int has_state, has_kv;
	pthread_t issuer, completer;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct hc_xfer *head, *tail;   /* to issue */
	struct hc_xfer *chead, *ctail; /* issuing or issued, to complete */
	int stop, issuer_done;
	uint64_t made, finished; /* transfers made for the threads, and finished (in order) */
	unsigned inline_running; /* HC_XFER_SYNC transfers on callers' threads: the issuer waits */
	struct hc_dev_stats st;  /* under mu; the kind fills the reg_ figures at open */
	void *kd;                /* the kind's */
};

/* reg.c: register [base, base+len) in chunks from several threads, all
 * or nothing: on a failure every chunk that was registered is undone and
 * the first error returned.  unreg undoes a whole registration. */
struct hc__reg_job {
	uint8_t *base;
	uint64_t len, chunk;
	unsigned threads;
	int (*reg)(void *arg, void *p, uint64_t n); /* 0 or -errno with a line */
	void (*unreg)(void *arg, void *p, uint64_t n);
	void *arg;
};
int hc__reg_parallel(const struct hc__reg_job *j, struct hc_dev_stats *st);
void hc__unreg_parallel(const struct hc__reg_job *j);

/* kernel.cu (nvcc): one gather/scatter launch for the items of L on a
 * cudaStream_t; env is the envelopes at an address the device can use,
 * the index arrays are device memory.  Returns a cudaError_t. */
int hc__gather_launch(const struct hc__dl *L, uint8_t *env, const uint32_t *pages, const uint32_t *presence,
		      const uint64_t *slots, const uint64_t *state_slots, int store, void *stream);

#endif /* HC_LIB_DEV_H */
