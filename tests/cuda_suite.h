/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_suite.h - the CUDA device kind's suite, one body run on two
 * runtimes (as test_backends.c runs one body on every backend):
 * test_cuda.c on a real GPU, test_cudafake.c on a fake runtime over host
 * memory.  The suite's cases are the round trip on each path and a run cut
 * at the registration's chunks; each runtime adds its own cases (events,
 * errors) and says how to reach its device memory.  Where the runtime can
 * tell what it saw (the fake), the suite checks that too.
 */
#ifndef HC_TESTS_CUDA_SUITE_H
#define HC_TESTS_CUDA_SUITE_H

#include <check.h>
#include <stdint.h>

#include <hicache/device.h>

#include "hct.h"

#define NP      48             /* pages a case moves */
#define T       16             /* hct's page tokens */
#define KVB     128            /* a token of one rank's K (or V) in hct's layout: 2 of the 4 heads of 64 bytes */
#define KV_POOL (NP * T * KVB) /* bytes of a layer's K (or V) pool */

/* What the runtime saw so far; only a fake can tell. */
struct cs_seen {
	unsigned regs, allocs, pinned, events; /* live: registrations, device allocations, pinned buffers, events */
	unsigned launches, copies;             /* made: kernel launches, copies */
	unsigned at_chunk_end;                 /* copies that end where a registration ends */
	unsigned violations;                   /* calls a real runtime would refuse or stall on */
	const char *why;                       /* the first of them */
};

struct cs_rt {
	/* Device memory: zeroed when allocated; put and get have finished when they return. */
	void *(*alloc)(size_t n);
	void (*free)(void *d);
	void (*put)(void *d, const void *h, size_t n);
	void (*get)(void *h, const void *d, size_t n);
	/* At the start of each case (the fake installs itself), or NULL. */
	void (*begin)(void);
	/* What it saw (NULL: a real runtime cannot say). */
	void (*seen)(struct cs_seen *s);
	/* Slots in whole-page blocks for the direct path's round trips (long
	 * runs, as a real device wants them), else tokens scattered on every
	 * path (runs of 128 bytes: HC_PATH_AUTO takes the kernel). */
	int page_blocks;
};

/* One rank's device KV of hct's pool: K, V and state pools for 2 layers. */
struct cs_dev {
	uint8_t *k[2], *v[2], *st[2];
	uint64_t ka[2], va[2], sa[2];
	struct hc_dev_comp comp[2];
	hc_dev *dev;
};

/* Allocate the pools (zeroed) and open a device on them: hc_dev_open's result. */
int cs_dev_open(struct cs_dev *g, hc_pool *p, uint32_t rank, enum hc_dev_path path, uint64_t reg_chunk);
/* Fill every pool with bytes of the seed. */
void cs_dev_fill(struct cs_dev *g, unsigned seed);
/* Close the device (if it opened) and free the pools. */
void cs_dev_close(struct cs_dev *g);
/* n bytes of device memory: filled from a seed, or copied to a malloc-ed buffer. */
void cs_fill(void *d, size_t n, unsigned seed);
uint8_t *cs_to_host(const void *d, size_t n);
/* Slots of n whole pages in contiguous blocks, shuffled. */
void cs_page_blocks(uint64_t *slots, unsigned n);
/* No violation seen (a real runtime: nothing to check). */
void cs_no_violations(void);

/* The suite's cases on runtime rt, in a fresh test case (the runtime adds its own). */
TCase *cs_tcase(const struct cs_rt *rt, const char *name, double timeout);
/* The runtime the cases run on. */
extern const struct cs_rt *cs_rt;

#endif
