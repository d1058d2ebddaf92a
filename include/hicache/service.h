/* SPDX-License-Identifier: Apache-2.0 */
/*
 * service.h - the service that moves pages between the pool and L3
 * (hicached(8), or embedded in one process), and the requests a rank
 * sends it through its rings in the segment (doc/design.md, "Rings and
 * requests" and "The transfer engine").
 *
 * A rank never blocks on L3: it posts a request on its own ring and polls
 * or waits for the completion.  One service serves a pool at a time; it
 * holds the pool's service lock for its whole life, so a second one is
 * refused and a dead one is known at once.  Requests made while no service
 * serves, or lost with a service that died, fail fast with -ENOTCONN.
 */
#ifndef HICACHE_SERVICE_H
#define HICACHE_SERVICE_H

#include <hicache/hicache.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the rank's side */

typedef struct hc_req hc_req;

/* The longest prefix of keys present in L3: the result is its length. */
HC_API int hc_req_exists(hc_pool *pool, const hc_key_t *keys, unsigned n, hc_req **out);
/* Back up READY keyed pages to L3 in prefix order (each pinned by the
 * service until its write is done; a page already in L3 is skipped): the
 * result is how many of the first pages are in L3; a failure cancels the
 * pages after it. */
HC_API int hc_req_backup(hc_pool *pool, const hc_page_t *pages, unsigned n, hc_req **out);

/*
 * Prefetch from L3 (doc/design.md, "The transfer engine").  The service finds the longest
 * prefix of keys it can make READY (in L3, or READY or being read already),
 * reserves its missing pages all or nothing, reads and checks them, and
 * commits them: READY for every rank at once.  A page that fails a check
 * is never made READY, and the prefix ends before it.  Requests under one
 * ticket name, and reads of one key asked for by several requests, are
 * merged: each key is read from L3 once.  The request's result is how many
 * of the first keys were READY when the service was done.
 *
 * hc_req_prefetch_take then stops waiting by the policy and takes the
 * hit: the longest READY prefix of keys, pinned for this rank.  Under a
 * ticket name (hc_ticket_lookup's, so the rank must have joined an engine)
 * the first rank of the engine to take fixes the hit length and the pins
 * for every rank of it: later ranks get exactly that, whatever their own
 * timing.  Give the take a ticket step of its own, not the L2 lookup's.
 */
enum hc_prefetch_policy {
	HC_PREFETCH_BEST_EFFORT = 0,   /* take what is READY when the take is called */
	HC_PREFETCH_WAIT_COMPLETE = 1, /* take once the service is done */
	HC_PREFETCH_TIMEOUT = 2,       /* wait until done or the deadline, whichever is first */
};

struct hc_prefetch_req {
	uint32_t size;                     /* sizeof(struct hc_prefetch_req) */
	const hc_key_t *keys;              /* the keys after the L2 hit, in prefix order */
	unsigned nkeys;                    /* 1.. (the argument area bounds it) */
	uint32_t first_depth;              /* position of keys[0] in its chain */
	uint32_t presence;                 /* components the pages hold; 0: all */
	const struct hc_ticket_name *name; /* the engine's take ticket, or NULL: this rank alone */
	enum hc_prefetch_policy policy;
	uint32_t timeout_ms;          /* TIMEOUT: the deadline after the post, ... */
	uint32_t timeout_us_per_page; /* ... plus this much per key (the deadline grows with the prefix) */
	unsigned prio;                /* buffer_only: priority class, 0 (first) .. HC_PRIO_CLASSES - 1 */
};

HC_API int hc_req_prefetch(hc_pool *pool, const struct hc_prefetch_req *req, hc_req **out);
/* pages[nkeys] gets the hit's handles, pinned for this rank (unpin each, or
 * hc_ticket_release(t) with a ticket name).  Returns the hit length.  t may
 * be NULL without a ticket name. */
HC_API int hc_req_prefetch_take(hc_req *req, hc_page_t *pages, hc_ticket *t);

/*
 * buffer_only pools (doc/design.md, "buffer_only"): the pool only stages transfers,
 * and the service is the one arbiter of its pages.  Prefetches park until
 * the read staging has room for all their keys; a write asks first for a
 * grant of staging pages:
 *
 *   hc_req_stage(pool, n, prio, &g); hc_req_wait(g, -1) -> n granted
 *   hc_reserve (n pages at most), fill, hc_page_commit, hc_req_backup
 *   once the backup is done: hc_req_free(g) gives the grant back
 *
 * Grants are all or nothing, in FIFO order within each priority class
 * (0 first).  A grant parked longer than the service's write_park_ms fails
 * with -ETIMEDOUT, so the caller can let its GPU pages go; one larger than
 * the write window can ever be, with -E2BIG.  Every page written to L3 is
 * freed by the service once no rank holds it and no prefetch still names
 * its key; a prefetched page, once every rank that asked has taken it (or
 * freed its request) and let it go.  In a cache pool hc_req_stage fails
 * with -EOPNOTSUPP.
 */
#define HC_PRIO_CLASSES 4
HC_API int hc_req_stage(hc_pool *pool, unsigned npages, unsigned prio, hc_req **out);

/* The result (>= 0), or the request's -errno; -EINPROGRESS from poll while
 * it runs; wait gives -ETIMEDOUT after timeout_ms (< 0: no limit) and
 * leaves the request running. */
/* Attach the backend spec to the service, or detach its backend (spec NULL
 * or ""), as hicache-pool backend does: the result is 0, or -EBUSY while
 * transfers are in flight, -EALREADY (one attached already; none to
 * detach), or what opening the backend gave.  While none is attached,
 * transfers complete with -ENODEV. */
HC_API int hc_req_backend(hc_pool *pool, const char *spec, hc_req **out);
/* Ask the service to stop a request: it then completes with -ECANCELED
 * (a backup: the pages before where it stopped are in L3; a prefetch: what
 * was made READY stays), or with its result if it was done first.  Wait
 * for it as for any.  -EALREADY: it is done already.  A request that other
 * ranks' requests were merged with goes on for them. */
HC_API int hc_req_cancel(hc_req *req);
HC_API int hc_req_poll(hc_req *req);
HC_API int hc_req_wait(hc_req *req, int timeout_ms);
/* Waits for the request if it still runs (the service owns its pages until
 * then), and frees it. */
HC_API int hc_req_free(hc_req *req);

/* ---- the service's side */

typedef struct hc_service hc_service;

struct hc_service_opts {
	uint32_t size;                     /* sizeof(struct hc_service_opts) */
	const char *dir;                   /* the pool's directory; NULL: /dev/shm */
	const char *backend;               /* plugin spec, "name[:key=value,...]" (hicache-backend(7)) */
	const char *backend_dir;           /* searched after $HICACHE_BACKEND_PATH */
	unsigned batch_pages;              /* pages per backend call; 0: 128 */
	unsigned queue_depth;              /* backend ops in flight; 0: 256 */
	unsigned spin_us;                  /* spin on the rings this long before sleeping; 0: 50 */
	unsigned workers;                  /* threads doing transfers; 0: 4 */
	unsigned prefetch_threshold;       /* prefetches of fewer keys do not ask L3; 0: none */
	enum hc_write_policy write_policy; /* default write_through */
	unsigned select_hits;              /* write_through_selective; 0: 2 */
	unsigned writeback_pct;            /* write_back: the clean share, in percent of the pool,
					    * kept at the eviction end; 0: 20 */
	unsigned timeout_ms;               /* a backend op not done this long is cancelled; 0: 30000 */
	int retries;                       /* transient backend failures retried per op; 0: 2; < 0: none */
	unsigned write_park_ms;            /* buffer_only: a write grant parked this long is dropped; 0: 2000 */
	unsigned stage_hold_ms;            /* buffer_only: staging a live rank holds this long without giving
					    * it back (a grant not freed, a prefetch not taken) is released; 0: 60000 */
	const char *mac_key_file;          /* L3 objects MAC'd under this key file's key (hc_store_opts); NULL: none */
	unsigned flags;                    /* HC_SERVICE_* */
	int pool_fd;                       /* HC_SERVICE_FD: the sealed pool's fd (hc_pool_spec.sealed_fd),
					    * attached instead of pool in dir; the caller keeps it */
};
#define HC_SERVICE_FD 0x1u /* serve the sealed pool in pool_fd (hicache-sealed(7)) */

/* Attach pool name (a rank slot of its own), take its service lock, open
 * the backend, and serve from a thread of its own until hc_service_stop.
 * -EBUSY (with the serving pid) while another service serves the pool. */
HC_API int hc_service_start(const char *pool, const struct hc_service_opts *opts, hc_service **out);
/* Stop taking requests, finish those in flight, release everything. */
HC_API int hc_service_stop(hc_service *svc);

/* Whether a service serves the pool now: 1 (and its pid), 0, or -errno. */
HC_API int hc_service_probe(hc_pool *pool, uint32_t *pid);

/* The pool's service record, for tools: read without any lock. */
struct hc_service_info {
	int live;             /* a service serves the pool now (hc_service_probe) */
	uint32_t pid;         /* its pid when live */
	uint64_t generation;  /* services started on this pool so far */
	int write_policy;     /* enum hc_write_policy the last service set; -1: none ever did */
	uint32_t select_hits; /* its write_through_selective threshold */
	/* Gauges of the live service (0 when none serves): */
	uint32_t jobs_queued;   /* transfer jobs waiting for a worker */
	uint32_t jobs_running;  /* transfer jobs the workers run */
	uint32_t stage_read;    /* buffer_only: pages staging reads */
	uint32_t stage_write;   /* buffer_only: pages granted to writes */
	uint32_t parked_reads;  /* buffer_only: prefetches waiting for staging */
	uint32_t parked_writes; /* buffer_only: write grants waiting */
};
HC_API int hc_service_info(hc_pool *pool, struct hc_service_info *out, size_t size);

/* The L3 a running service has attached: info as hc_store_info fills it
 * (if info), then each of hc_store_stats's figures through emit (if
 * emit), with the backend held open meanwhile.  -ENOENT: none attached
 * now (hicache-pool backend detach).  Not concurrently with
 * hc_service_stop. */
HC_API int hc_service_l3_stats(hc_service *svc, struct hc_store_info *info, size_t size,
			       void (*emit)(void *arg, const char *name, uint64_t value), void *arg);

#ifdef __cplusplus
}
#endif
#endif /* HICACHE_SERVICE_H */
