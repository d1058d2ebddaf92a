/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.h - a process's private view of an attached pool.  Everything here
 * is a private copy, validated once at attach; the shared pointers below
 * point into the mapping and are never stored in the segment.
 */
#ifndef HC_SHMPOOL_POOL_H
#define HC_SHMPOOL_POOL_H

#include <pthread.h>
#include <stdbool.h>

#include "layout.h"

struct hc_pool {
	/* the mapping */
	uint8_t *base;
	size_t map_bytes;
	int fd;
	bool readonly;

	/* shared regions, at offsets validated at attach */
	struct hc_seg_hdr *hdr;
	struct hc_seg_rank *ranks;
	struct hc_seg_page *pages;
	_Atomic uint16_t *pins; /* [npages][max_ranks] */
	uint8_t *env;

	/* private copies of the geometry: never re-read from the segment */
	struct hc__geom g;
	struct hc_pool_info info;
	uint32_t all_groups;     /* fill bits of every head group */
	uint32_t quarantine_ms;

	/* this process's rank slot, held by the holder thread */
	int slot;
	unsigned fork_gen;       /* hc__forks at attach; differs in a forked child */
	pthread_t holder;
	/* Process-private handshake with the holder thread.  Not a pipe: a
	 * forked child would inherit its write end and keep the holder alive. */
	pthread_mutex_t holder_mu;
	pthread_cond_t holder_cv;
	int holder_state;        /* 0 starting, 1 holding, 2 failed, 3 asked to stop */
	int holder_result;       /* slot, or negative errno */

	_Atomic uint32_t cursor; /* where the next allocation scan starts (a hint) */
};

/* error.c */
int hc__err(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hc__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ranks.c */
int hc__rank_claim(struct hc_pool *p);
void hc__rank_release(struct hc_pool *p);
int hc__rank_probe(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep);
void hc__mutex_init_robust(pthread_mutex_t *m);

/* ranks.c: bumped in every forked child, so handles know they were inherited */
extern _Atomic unsigned hc__forks;
void hc__fork_watch(void);

/* pages.c */
uint32_t hc__now_ms(void);
void hc__page_sweep(struct hc_pool *p, struct hc_recovery_report *rep);
void hc__pins_drop_slot(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep);
void hc__pages_release_slot(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep);

/* check.c */
#define HC_CHECK_QUIESCENT 0x1u /* no rank is mid-operation: transient states are errors too */
typedef void (*hc__check_fn)(void *arg, const char *violation);
int hc__pool_check(struct hc_pool *p, unsigned flags, hc__check_fn report, void *arg);

static inline _Atomic uint16_t *hc__pin_row(const struct hc_pool *p, uint32_t id)
{
	return p->pins + (size_t)id * p->g.max_ranks;
}

#endif /* HC_SHMPOOL_POOL_H */
