/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mc.h - the memcached backend's private declarations: the options, the
 * instance, the jobs its workers run, and what each file offers the others.
 *
 *   opts.c      option parsing: servers, timeouts, ejection, chunks, SASL
 *   names.c     item keys, the manifest, chunk tags, the placement hash
 *   conn.c      one worker's libmemcached handle: setup, errors, probes
 *   batch.c     a batch of one opcode on one handle: multi-gets, sets
 *   memcached.c the ABI table, the job queue, the workers, stats and ctl
 *
 * NOTES ON SYNCHRONIZATION (all process-private)
 *
 * A submit copies each op (and its iovecs) into a job and queues it under
 * be->mu.  Each worker thread owns one libmemcached handle (a memcached_st
 * is single-threaded) and takes a share of the queue, of one opcode, under
 * be->mu, into its batch (w->jobs).  It runs the batch without the lock;
 * a job that is done goes to the completed list under the lock, and its
 * slot in the batch becomes NULL then, which is how cancel tells a running
 * op (a non-NULL slot) from one that is not in flight.  A job is in exactly
 * one place at a time: the queue, a batch slot, or the completed list
 * (until a reap frees it).  The per-server handles (be->solo) are used
 * under be->stat_mu only; everything in be->o and chunk_bytes is fixed
 * after open.
 */
#ifndef HC_BACKENDS_MEMCACHED_MC_H
#define HC_BACKENDS_MEMCACHED_MC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include <libmemcached/memcached.h>

#include <hicache/backend.h>

#include "../common.h"
#include "../hostport.h"

#define HC_MC_MAX_SERVERS  64
#define HC_MC_PREFIX_MAX   64
#define HC_MC_HEXNAME      (2 * HC_BE_NAME_BYTES)                  /* 128 hex digits */
#define HC_MC_KEY_MAX      (HC_MC_PREFIX_MAX + HC_MC_HEXNAME + 12) /* ".<chunk>" and NUL: < 250 */
#define HC_MC_MAX_CHUNKS   65536u
#define HC_MC_MIN_CHUNK    1024u
#define HC_MC_ITEM_SLACK   1024u      /* of a server's item size: its item header and our key */
#define HC_MC_DEFAULT_ITEM (1u << 20) /* memcached's default -I */
#define HC_MC_QUEUE_MAX    65536u     /* ops accepted and not yet reaped */
#define HC_MC_MGET_KEYS    4096u      /* keys of one multi-get, at most (beyond one object's) */
#define HC_MC_TTL_MAX      2592000u   /* 30 days: memcached reads larger values as a date */

struct hc_mc_opts {
	struct hc_be_server servers[HC_MC_MAX_SERVERS];
	unsigned nservers;
	unsigned connect_timeout_ms;
	unsigned io_timeout_ms;
	unsigned eject_after; /* failed connects in a row that eject a server */
	unsigned eject_s;     /* seconds an ejected server is left alone before it is tried again */
	uint32_t chunk_bytes; /* object bytes per chunk item; 0: from the servers' item size */
	uint32_t ttl_s;       /* items expire after this; 0: never (LRU only) */
	unsigned workers;     /* threads, each with a connection to every server */
	unsigned batch;       /* ops in one multi-get or pipeline */
	char prefix[HC_MC_PREFIX_MAX + 1];
	char username[256];
	char password[256];
	bool sasl;
};

/* Counters, declared once (memcached's way) for the struct and stats(). */
#define HC_MC_COUNTERS(X)                                                                                              \
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
	X(items_read)                                                                                                  \
	X(items_written)                                                                                               \
	X(round_trips)                                                                                                 \
	X(missing_chunks)                                                                                              \
	X(inconsistent)                                                                                                \
	X(bad_manifests)                                                                                               \
	X(server_errors)                                                                                               \
	X(timeouts)                                                                                                    \
	X(hung)                                                                                                        \
	X(skipped)

struct hc_mc_counters {
#define X(n) _Atomic uint64_t n;
	HC_MC_COUNTERS(X)
#undef X
};
#define HC_MC_COUNT(be, n, v) atomic_fetch_add_explicit(&(be)->cnt.n, (v), memory_order_relaxed)

/* One accepted op: a copy of the host's, with its own iovecs. */
struct hc_mc_job {
	struct hc_mc_job *next;
	uint64_t user_data;
	uint32_t opcode;
	uint32_t iovcnt;
	uint64_t bytes; /* of the iovecs, summed at submit */
	uint8_t name[HC_BE_NAME_BYTES];
	int64_t result;
	struct iovec iov[]; /* iovcnt of them */
};

struct hc_mc_worker;

/* One open instance. */
struct hc_mc {
	struct hc_mc_opts o;
	uint32_t chunk_bytes;         /* in use: o.chunk_bytes, or what the servers allow */
	memcached_st *tmpl;           /* the handle every worker's is cloned from */
	memcached_st **solo;          /* one handle per server: probes and stats (under stat_mu) */
	_Atomic uint64_t *hung_until; /* per server (ring position): CLOCK_MONOTONIC ms, 0 if not */
	pthread_mutex_t stat_mu;

	pthread_mutex_t mu;
	pthread_cond_t work;             /* a job was queued, or stop */
	pthread_cond_t done;             /* a job completed */
	struct hc_mc_job *qhead, *qtail; /* queued, in submit order */
	unsigned nqueued;
	struct hc_mc_job *dhead, *dtail; /* completed, waiting for reap */
	unsigned ndone;
	unsigned nrunning;
	unsigned accepted; /* queued + running + done: bounded by HC_MC_QUEUE_MAX */
	unsigned idle;     /* workers waiting for work */
	bool stop;

	struct hc_mc_worker *workers;
	unsigned nworkers;

	struct hc_mc_counters cnt;
	_Atomic unsigned warned; /* HC_MC_WARN_* bits: causes already logged */
};

#define HC_MC_WARN_SERVER  0x1u
#define HC_MC_WARN_CHUNKSZ 0x2u
#define HC_MC_WARN_E2BIG   0x4u
#define HC_MC_WARN_FULL    0x8u
#define HC_MC_WARN_AUTH    0x10u
#define HC_MC_WARN_MANIF   0x20u
#define HC_MC_WARN_HUNG    0x40u

/* A worker: a thread and its handle, which only it touches. */
struct hc_mc_worker {
	struct hc_mc *be;
	pthread_t thread;
	bool started;
	struct hc_mc_job **jobs; /* the running batch (room for be->o.batch): slots NULL once done */
	unsigned nbatch;         /* its size, 0 between batches (under be->mu) */
	memcached_st *mc;
	memcached_result_st result; /* reused by every fetch */
	uint8_t *bounce;            /* one chunk, for a chunk that spans iovecs */
	uint8_t *man;               /* a manifest and its head */
	char (*keys)[HC_MC_KEY_MAX];
	const char **keyp;
	size_t *keylen;
	unsigned nkeys_cap;
};

/* memcached.c: the host entry() was given; logging through it
 * (backends/common.h), and errors into err. */
const struct hc_backend_host *hc__mc_host(void);
#define hc__mc_log(level, ...)           hc_be_log(hc__mc_host(), (level), __VA_ARGS__)
#define hc__mc_warn_once(be, cause, ...) hc_be_warn_once(hc__mc_host(), &(be)->warned, (cause), __VA_ARGS__)
#define hc__mc_fail                      hc_be_fail

/* opts.c */
int hc__mc_opts_parse(const struct hc_be_option *opts, unsigned nopts, struct hc_mc_opts *o, char *err, size_t errlen);

/* Call fn for each piece of bytes [off, off+len) of iov[0..iovcnt), in
 * order; done is how much of the range came before the piece.  The one walk
 * over an op's iovecs: copies in and out, and hashes. */
typedef void (*hc_mc_piece_fn)(void *ctx, uint8_t *piece, size_t n, uint64_t done);

static inline void hc__mc_iov_each(const struct iovec *iov, unsigned iovcnt, uint64_t off, uint64_t len,
				   hc_mc_piece_fn fn, void *ctx)
{
	uint64_t done = 0;

	for (unsigned v = 0; v < iovcnt && done < len; v++) {
		uint64_t n = iov[v].iov_len;
		if (off >= n) {
			off -= n;
			continue;
		}
		n -= off;
		n = n < len - done ? n : len - done;
		fn(ctx, (uint8_t *)iov[v].iov_base + off, (size_t)n, done);
		done += n;
		off = 0;
	}
}

/* names.c */
size_t hc__mc_key(const struct hc_mc *be, const uint8_t name[HC_BE_NAME_BYTES], int chunk, char *out);
uint32_t hc__mc_place(const char *key, size_t len, void *ctx);
struct hc_mc_manifest {
	uint64_t length; /* the object's bytes */
	uint64_t nonce;  /* ties the chunks to this version of the object */
	uint32_t chunk_bytes;
	uint32_t nchunks;    /* chunk items after the head */
	uint32_t head_bytes; /* object bytes [0, head_bytes) carried by the manifest itself */
};
#define HC_MC_MANIFEST_BYTES 128 /* the manifest's own fields; the head follows them */
#define HC_MC_HEAD_MAX       (64u << 10)
/* out has room for HC_MC_MANIFEST_BYTES; the head is the caller's to append. */
void hc__mc_manifest_encode(const struct hc_mc_manifest *m, const uint8_t name[HC_BE_NAME_BYTES],
			    uint8_t out[HC_MC_MANIFEST_BYTES]);
/* Where chunk i starts in the object. */
static inline uint64_t hc__mc_chunk_off(const struct hc_mc_manifest *m, uint32_t i)
{
	return m->head_bytes + (uint64_t)i * m->chunk_bytes;
}
int hc__mc_manifest_decode(const void *buf, size_t len, const uint8_t name[HC_BE_NAME_BYTES], struct hc_mc_manifest *m);
uint64_t hc__mc_nonce(const uint8_t name[HC_BE_NAME_BYTES], const struct iovec *iov, unsigned iovcnt, uint64_t length);
uint32_t hc__mc_chunk_tag(uint64_t nonce, uint32_t chunk);

/* conn.c */
int hc__mc_tmpl_new(struct hc_mc *be, char *err, size_t errlen);
void hc__mc_tmpl_free(struct hc_mc *be);
int hc__mc_probe(struct hc_mc *be, char *err, size_t errlen);
int hc__mc_worker_init(struct hc_mc_worker *w, struct hc_mc *be);
void hc__mc_worker_fini(struct hc_mc_worker *w);
int hc__mc_errno(memcached_return_t rc);
void hc__mc_server_failed(struct hc_mc *be, memcached_st *mc, memcached_return_t rc, const char *what);
int hc__mc_keys_reserve(struct hc_mc_worker *w, unsigned n);
/* Servers that answer nothing in io_timeout_ms (stopped, black-holed):
 * libmemcached counts only failed connects, so a hung server would cost
 * every op its timeout.  One that times out is left alone for eject_s by
 * every worker: its objects are misses, its puts fail. */
uint32_t hc__mc_server_of(struct hc_mc_worker *w, const uint8_t name[HC_BE_NAME_BYTES]);
bool hc__mc_hung(struct hc_mc *be, uint32_t server);
/* hc__mc_hung for an op, which is then not sent: counted (skipped). */
bool hc__mc_skip(struct hc_mc *be, uint32_t server);
void hc__mc_hang(struct hc_mc *be, memcached_st *mc, uint32_t server);
/* A number a server's stats gave (a value, not NUL-terminated); 0 if none. */
uint64_t hc__mc_stat_u64(const char *value, size_t vlen);

/* memcached.c: the job in a running batch's slot is done (its result
 * set): it goes to the reapers and the slot becomes NULL; the batch never
 * touches the job again. */
void hc__mc_complete(struct hc_mc *be, struct hc_mc_job **slot);

/* batch.c: run jobs[0..n) (one opcode) on w's handle; each job's result set,
 * or the job completed early (hc__mc_complete) and its slot NULL. */
void hc__mc_run_exists(struct hc_mc_worker *w, struct hc_mc_job **jobs, unsigned n);
void hc__mc_run_get(struct hc_mc_worker *w, struct hc_mc_job **jobs, unsigned n);
void hc__mc_run_put(struct hc_mc_worker *w, struct hc_mc_job **jobs, unsigned n);
void hc__mc_run_delete(struct hc_mc_worker *w, struct hc_mc_job **jobs, unsigned n);

#endif
