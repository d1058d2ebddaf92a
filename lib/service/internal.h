/* SPDX-License-Identifier: Apache-2.0 */
/*
 * internal.h - the service's insides, shared by its two halves: service.c
 * (its life, and the rings: requests in, completions out) and the transfer
 * engine (transfer.c: jobs, merging, workers; backup.c and prefetch.c: the
 * work against the backend; stage.c and writer.c: buffer_only and the
 * write policy).
 *
 * Notes on synchronization (process-private):
 * - The dispatcher thread (service.c) alone reads the request rings and
 *   makes jobs.  Workers (transfer.c) run them, and help read each other's
 *   long prefetches (struct pf_help).  mu guards the job queue, the helps,
 *   the job table, the key map and each job's waiters and dependencies.
 * - Completion rings are written under cq_mu: every thread of the service
 *   posts on them, and the ring in the segment has one producer, the
 *   service, only if its threads take turns.
 * - The store is thread-safe (hicache.h); workers call it without mu.
 */
#ifndef HC_LIB_SVC_H
#define HC_LIB_SVC_H

#include <pthread.h>
#include <stdatomic.h>

#include <hicache/service.h>

#include "wire.h"

struct slot_view {
	int ok; /* views made for this epoch */
	uint32_t epoch;
	struct hc__ring sq, cq;
	const uint8_t *arg;
	struct hc_bell *bell;
};

/* One request waiting for a job: where its completion goes. */
struct waiter {
	struct waiter *next;
	unsigned slot;
	uint32_t epoch;
	uint64_t user_data;
	uint64_t t0_ns; /* when the dispatcher took it off the ring */
	uint8_t op;     /* its enum hc__op, for the latency histograms */
};

struct job {
	struct job *next; /* in the queue, or on the active list */
	uint8_t op;       /* enum hc__op */
	uint32_t n;
	void *items;           /* n keys or page handles, ours */
	struct hc__pf_args pf; /* a prefetch's */
	uint64_t name_hash;    /* a named prefetch's, for merging; 0: none */
	struct waiter *waiters;
	int result;
	uint32_t where;
	/* Keys another job is reading for this one: it completes once they are
	 * done (deps == 0) and its own work is (worked). */
	unsigned deps;
	int worked;
	struct job **dependents;
	unsigned ndependents, cap_dependents;
	hc_key_t *mine; /* keys this job registered in the key map */
	unsigned nmine;
	int internal;       /* the writer's (writer.c): no waiter */
	uint64_t t0_ns;     /* an internal job's: when it was queued (its latency) */
	_Atomic int cancel; /* its only waiter cancelled it: stop at the next batch */
	/* buffer_only (stage.c), under mu */
	uint8_t prio;       /* priority class */
	uint32_t staged;    /* read staging pages admitted to it */
	int trimmed;        /* staged is cut to what it reserved */
	uint64_t parked_ms; /* when it parked first: 0 while never parked */
	uint64_t park_seq;  /* stage releases seen when it last parked */
	int repark;         /* its reservation found no room: park it again */
	int parked;         /* waits in the arbiter's queue: its keys hold no page */
	int pending;        /* a rank's backup, counted in the arbiter's pending */
	uint32_t l3_pages;  /* a prefetch's pages read from L3 and made READY (its worker's) */
};

struct keymap;
struct pf_help;
struct writer;
struct stage;

struct hc_service {
	char name[HC_NAME_MAX + 1];
	struct hc_service_opts o;
	char *dir, *backend, *backend_dir, *mac_key_file;
	hc_pool *p;
	hc_store *st;
	pthread_t thr;
	_Atomic int stop;
	pthread_mutex_t mu;  /* the start/stop handshake, and the jobs (above) */
	pthread_cond_t cv;   /* start and stop */
	pthread_cond_t work; /* a job was queued, or the workers are to stop */
	pthread_cond_t idle; /* a job finished */
	int started, result;
	char err[512];
	/* backup.c: the last log line of each cause of failed L3 writes, and
	 * the failures since it (under fail_mu) */
	pthread_mutex_t fail_mu;
	/* st's life, against hc_service_l3_stats from other threads: held
	 * where st is opened into place or closed */
	pthread_mutex_t st_mu;
	struct {
		uint64_t last_ns, since;
		int last_err;
	} fail[4];
	uint64_t gen;
	struct slot_view v[HC_MAX_RANKS];
	uint8_t *args; /* the dispatcher's: one request's arguments, copied out */
	pthread_mutex_t cq_mu;
	int closing; /* under mu: the thread is letting go of the pool */

	/* the transfer engine (transfer.c), under mu */
	pthread_t *workers;
	unsigned nworkers;
	int workers_stop;
	struct job *qhead, *qtail;
	unsigned put_pages;    /* pages a write-policy put writes (and pins) at most */
	struct job *active;    /* queued or running, for merging by name */
	struct pf_help *helps; /* long prefetch reads idle workers help with */
	pthread_cond_t helped; /* a part of one is done */
	unsigned running, queued;
	struct keymap *keys;
	struct writer *writer; /* writer.c; NULL under write_none */
	struct stage *stage;   /* stage.c; NULL in a cache pool */
};

/* service.c: post a job's completion to each of its waiters; post one. */
void hc__svc_complete(hc_service *s, struct job *j);
void hc__svc_post(hc_service *s, const struct waiter *w, int result, uint32_t where);

/* transfer.c: the job queue, its workers, and merging */
int hc__xfer_start(hc_service *s);
/* Stop the workers once every queued job is done. */
void hc__xfer_stop(hc_service *s);
/* Make a job of a checked request whose arguments are in args, or join an
 * identical one running: the waiter goes on its list.  -errno: the caller
 * completes the request with it. */
int hc__xfer_submit(hc_service *s, const struct hc__sqe *e, const void *args, const struct waiter *w);
/* A rank cancels its request (slot, epoch, user_data): a queued job only
 * its request waits for goes at once, a running one stops at its next
 * batch; with other waiters or dependents it goes on, and this waiter is
 * answered -ECANCELED now.  Nothing found: done already, nothing to do. */
void hc__xfer_cancel(hc_service *s, const struct waiter *w);
/* Under mu: queue a job for the workers; free one that never ran. */
void hc__xfer_enqueue(hc_service *s, struct job *j);
void hc__xfer_drop(hc_service *s, struct job *j);
/* The key of page id, from the segment. */
void hc__svc_page_key(const hc_pool *p, uint32_t id, hc_key_t key);
/* Queue a job of the service's own (items: malloc'd, taken). */
int hc__xfer_internal(hc_service *s, uint8_t op, void *items, uint32_t n);
/* Under mu: the job reading key, or NULL; register j as reading key
 * (-ENOMEM, or -EEXIST when another job has it). */
struct job *hc__km_find(struct keymap *m, const uint8_t *key);
int hc__km_add(struct keymap *m, const uint8_t *key, struct job *j);
/* Under mu: j waits for a to end. */
int hc__xfer_depend(struct job *j, struct job *a);
/* L3 has no object of key: unmark a READY page of it; whether one is READY. */
int hc__xfer_l3_absent(hc_service *s, const hc_key_t *key);

/* backup.c: run m backups that share puts. */
void hc__xfer_backups(hc_service *s, struct job **js, unsigned m);

/* prefetch.c: run a prefetch (0, or -errno); help the oldest long read
 * (a worker with no job to start, under mu). */
int hc__xfer_prefetch(hc_service *s, struct job *j);
void hc__xfer_help(hc_service *s);

/* writer.c: the write policy.  start stores the policy in the service
 * record and makes the page map; due says whether the dispatcher should
 * scan now (and lowers *wait_ms, if not NULL, when it should soon); scan queues backups; done (under mu) ends an
 * internal job. */
int hc__writer_start(hc_service *s);
void hc__writer_stop(hc_service *s);
int hc__writer_due(hc_service *s, int *wait_ms);
void hc__writer_scan(hc_service *s);
void hc__writer_done(hc_service *s, const struct job *j);
/* The dispatcher: scan at the next turn (pages left to a rank are free to write now). */
void hc__writer_kick(hc_service *s);
/* Pages in the writer's jobs now. */
unsigned hc__writer_busy(hc_service *s);

/* stage.c: buffer_only's arbiter (doc/design.md, "buffer_only").  Everything runs
 * under mu, save start and stop (the dispatcher's, with no worker yet or
 * left) and pump (the dispatcher's; it takes mu).  A cache pool has none:
 * s->stage is NULL and the transfer engine never calls in. */
int hc__stage_start(hc_service *s);
void hc__stage_stop(hc_service *s);
/* The dispatcher: a prefetch is submitted (its keys name pages that stay
 * until every rank that asked is done with them); a STAGE or ACK request. */
int hc__stage_prefetch(hc_service *s, const struct waiter *w, const hc_key_t *keys, uint32_t n);
int hc__stage_request(hc_service *s, const struct hc__sqe *e, const struct waiter *w);
/* Park a new prefetch job until the read staging has room for it. */
void hc__stage_park(hc_service *s, struct job *j);
/* A parked prefetch job of the same ticket, for merging; NULL if none. */
struct job *hc__stage_find(hc_service *s, int (*same)(const struct job *, const void *), const void *arg);
/* Waiter w's prefetch joined job j: it holds j's pages once j is admitted. */
void hc__stage_merged(hc_service *s, const struct job *j, const struct waiter *w);
/* A waiter's parked job is cancelled: 1 if found (answered and dropped). */
int hc__stage_cancel(hc_service *s, const struct waiter *w);
/* A prefetch reserved r of its admitted pages (r < 0: none); a job found
 * no room (j->repark) and parks again; a page read, or written, or not, is
 * released once nothing needs it. */
void hc__stage_reserved(hc_service *s, struct job *j, int r);
void hc__stage_repark(hc_service *s, struct job *j);
void hc__stage_release(hc_service *s, hc_page_t page, int read); /* takes mu */
/* Rank slots holding a write grant: their pages are theirs to back up
 * (the writer leaves them alone until the grant goes).  Takes mu. */
void hc__stage_busy(hc_service *s, uint8_t busy[HC_MAX_RANKS]);
/* Under mu: page id is on the release list (its transfer has ended). */
int hc__stage_listed(hc_service *s, uint32_t id);
/* A backup names these pages: none is freed until it is done with them. */
void hc__stage_backup(hc_service *s, const hc_page_t *pages, uint32_t n, int done);
/* The dispatcher's turn: drop writes parked too long, release what dead
 * or slow ranks held, free what is done, admit what fits; *wait_ms is
 * lowered while something waits. */
void hc__stage_pump(hc_service *s, int *wait_ms);

/* A request answered: its latency into the histogram of its kind. */
void hc__svc_latency(hc_service *s, const struct waiter *w);
/* Atomic add to a service counter: workers race on the service's row. */
void hc__svc_count(hc_service *s, enum hc_counter c, uint64_t n);
/* A page's write to L3 failed with err (backup.c): counted by cause, and
 * logged with the backend's spec, each cause at most every 10 s. */
void hc__svc_put_failed(hc_service *s, int err);

#endif /* HC_LIB_SVC_H */
