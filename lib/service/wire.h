/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.h - the bytes of a request and of its completion on a rank's
 * rings (shmpool/ring.h, the RINGS region of layout.h), shared by the
 * rank's side (request.c) and the service (service.c).  Both ends may be other
 * builds and either may scribble: the service checks every field of a
 * request before it uses it, the rank every field of a completion.
 *
 * Epochs: a request carries the rank slot's epoch when it was posted, and
 * its completion carries it back.  A slot's next owner bumps the epoch
 * before it writes its first argument byte (release); the service copies a
 * request's arguments and then reads the epoch again (acquire), as a
 * seqlock reader does, so the requests of a dead owner are dropped unread
 * and their completions are ignored by the next one.
 */
#ifndef HC_LIB_REQWIRE_H
#define HC_LIB_REQWIRE_H

#include <assert.h>
#include <stdint.h>

#include "../../shmpool/pool.h"

enum hc__op {
	HC__OP_NOP = 0,
	HC__OP_EXISTS = 1,   /* arguments: n keys of 32 bytes */
	HC__OP_BACKUP = 2,   /* arguments: n page handles of 8 bytes */
	HC__OP_PREFETCH = 3, /* arguments: struct hc__pf_args, then n keys of 32 bytes */
	HC__OP_CANCEL = 4,   /* no arguments; user_data names the request to cancel; no completion */
	HC__OP_BACKEND = 5,  /* arguments: n bytes, a backend spec ending in NUL; "" detaches */
	HC__OP_STAGE = 6,    /* buffer_only: a write grant of n pages; no arguments */
	HC__OP_ACK = 7,      /* buffer_only: no arguments; user_data names a prefetch or a grant the
			      * rank is done with (taken, or freed); no completion */
};

/* A prefetch's parameters, before its keys in the argument area. */
struct hc__pf_args {
	char name[HC_REQUEST_ID_MAX + 1]; /* the ticket's request id, NUL-padded; "" for none */
	uint32_t step;                    /* the ticket's step */
	uint32_t engine;                  /* the rank's engine id (with a name) */
	uint32_t first_depth;
	uint32_t presence;
};
static_assert(sizeof(struct hc__pf_args) == 64, "prefetch arguments are a cache line");

struct hc__sqe {
	uint8_t op;   /* enum hc__op */
	uint8_t prio; /* PREFETCH and STAGE: priority class (buffer_only) */
	uint8_t pad0[2];
	uint32_t epoch;     /* the rank slot's epoch when posted */
	uint64_t user_data; /* the rank's: index << 32 | generation of its hc_req */
	uint64_t arg_off;   /* in this rank's argument area */
	uint32_t n;         /* keys or pages */
	uint32_t arg_len;   /* bytes: n times the item size */
	uint8_t pad1[32];
};
static_assert(sizeof(struct hc__sqe) == HC_SQE_BYTES, "a request is one ring entry");

struct hc__cqe {
	uint64_t user_data; /* the request's */
	int32_t result;     /* >= 0, or -errno */
	uint32_t epoch;     /* the request's */
	uint64_t svc_gen;   /* the service generation that answered */
	uint32_t where;     /* a failure: the item it failed at */
	uint32_t pad0;
};
static_assert(sizeof(struct hc__cqe) == HC_CQE_BYTES, "a completion is one ring entry");

/* A rank slot's parts of the RINGS region. */
static inline uint8_t *hc__rank_block(const struct hc_pool *p, unsigned slot)
{
	return p->rings + (uint64_t)slot * p->g.rg.block;
}

#endif /* HC_LIB_REQWIRE_H */
