/* SPDX-License-Identifier: Apache-2.0 */
/*
 * service.h - the service that moves pages between the pool and L3
 * (hicached(8), or embedded in one process), and the requests a rank
 * sends it through its rings in the segment (DESIGN.md sections 3 and 7).
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

/* The result (>= 0), or the request's -errno; -EINPROGRESS from poll while
 * it runs; wait gives -ETIMEDOUT after timeout_ms (< 0: no limit) and
 * leaves the request running. */
HC_API int hc_req_poll(hc_req *req);
HC_API int hc_req_wait(hc_req *req, int timeout_ms);
/* Waits for the request if it still runs (the service owns its pages until
 * then), and frees it. */
HC_API int hc_req_free(hc_req *req);

/* ---- the service's side */

typedef struct hc_service hc_service;

struct hc_service_opts {
	const char *dir;          /* the pool's directory; NULL: /dev/shm */
	const char *backend;      /* plugin spec, "name[:key=value,...]" (hicache-backend(7)) */
	const char *backend_dir;  /* searched after $HICACHE_BACKEND_PATH */
	unsigned batch_pages;     /* pages per backend call; 0: 128 */
	unsigned queue_depth;     /* backend ops in flight; 0: 256 */
	unsigned spin_us;         /* spin on the rings this long before sleeping; 0: 50 */
};

/* Attach pool name (a rank slot of its own), take its service lock, open
 * the backend, and serve from a thread of its own until hc_service_stop.
 * -EBUSY (with the serving pid) while another service serves the pool. */
HC_API int hc_service_start(const char *pool, const struct hc_service_opts *opts, hc_service **out);
/* Stop taking requests, finish those in flight, release everything. */
HC_API int hc_service_stop(hc_service *svc);

/* Whether a service serves the pool now: 1 (and its pid), 0, or -errno. */
HC_API int hc_service_probe(hc_pool *pool, uint32_t *pid);

#ifdef __cplusplus
}
#endif
#endif /* HICACHE_SERVICE_H */
