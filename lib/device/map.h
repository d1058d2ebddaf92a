/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map.h - the index arithmetic between envelopes and a rank's device KV
 * (doc/design.md, "Envelope byte order" and "The device path"), in plain
 * C so that the host implementation, the direct copy path and a gather
 * kernel share one definition.
 *
 * A rank of an engine with TP size S and rank r holds, of each sharded K/V
 * component, the whole head groups g0 .. g0+ng-1 of the pool's G groups:
 *   S <= G (G a multiple of S): g0 = r * G/S, ng = G/S;
 *   S >  G: only when every group is one KV head, replicated over S/G
 *           ranks (fewer KV heads than ranks): g0 = r / (S/G), ng = 1.
 * A replicated component (MLA) is group 0 for every rank.
 *
 * The device side of a K/V component is, per layer, a K base and a V base,
 * each a token-major pool of slots (SGLang's [slots, heads, head_dim] per
 * layer, vLLM's blocks of block_size slots): token t of page i lives at
 *   base + off(slot(i, t)) + j * (Hg * B)   for owned group j,
 * where off(s) is s * token_stride, or with blocks of P slots
 * (s / P) * block_stride + (s % P) * token_stride.
 * A replicated K/V component may give no V bases (MLA's latent is one
 * vector per token): only its K half moves, and the V half of the
 * envelope is left as it is.
 * where slot(i, t) comes from the caller's page-to-slot map.  A state
 * component has one base per layer and one slot per page.
 *
 * A copy is a list of runs (envelope offset, device address, length), one
 * list per layer so that a layer can be marked done as soon as its runs
 * are; neighbouring runs that are adjacent on both sides are merged.
 */
#ifndef HC_LIB_DEVMAP_H
#define HC_LIB_DEVMAP_H

#include <stdint.h>

#include <hicache/hicache.h>

#include "index.h"

struct hc__geom;

/* One component of a rank's device KV. */
struct hc__dev_comp {
	unsigned comp;         /* the pool's component index */
	const uint64_t *k;     /* [layers] device address of slot 0 of K (state: of the state) */
	const uint64_t *v;     /* [layers] of V; NULL for a state component */
	uint64_t token_bytes;  /* this rank's bytes of one token (state: of one page) */
	uint64_t token_stride; /* bytes from one slot to the next, >= token_bytes */
	uint64_t slots;        /* slots in each device pool, for bounds */
	uint64_t block_stride; /* blocks of block_slots slots this far apart; */
	uint32_t block_slots;  /* 0: no blocks (index.h, hc__dl_off) */
};

struct hc__dev_desc {
	uint32_t tp_size, tp_rank;
	unsigned ncomp;
	const struct hc__dev_comp *comps;
};

/* What a checked description gives, per described component. */
struct hc__dev_plan {
	unsigned ncomp;
	struct {
		struct hc__dev_comp d;
		uint32_t g0, ng;    /* the head groups this rank holds */
		uint64_t grp_bytes; /* one group's bytes of one token (K/V) or one page (state) */
		int kv;
		unsigned nkv; /* halves moved: 2 (K and V), 1 (a state, or K alone) */
	} c[HC_MAX_COMPONENTS];
};

struct hc__run {
	uint64_t env; /* byte offset from the start of the pool's envelopes */
	uint64_t dev; /* device address */
	uint64_t len;
};

/* Checks a description against the pool's geometry: -EINVAL with a line
 * saying what is wrong (unknown component, a TP size the groups do not
 * fit, token bytes that are not the rank's heads, a stride smaller than a
 * token, blocks whose slots do not fit their stride, misaligned bases or
 * strides, K/V/layer pools that overlap).  Pools may interleave (one
 * layer's slots between another's, as SGLang's page_first has them) as
 * long as no byte of one is a byte of another. */
int hc__dev_plan(const struct hc__geom *g, const struct hc__dev_desc *d, struct hc__dev_plan *out);

/*
 * The runs of one layer for pages[0..n) (page ids) whose tokens sit in
 * slots[i * T + t] (K/V) and whose state sits in state_slots[i]; a page
 * contributes only the components of its presence[i] (NULL: all).  Built
 * on the items of index.h, in their order.  Appends
 * to runs (capacity cap) and returns the count, -ENOSPC if cap is too
 * small (with the count needed in *need), or -ERANGE naming a slot out of
 * bounds.
 */
int hc__dev_runs(const struct hc__geom *g, const struct hc__dev_plan *pl, unsigned layer, const uint32_t *pages,
		 const uint32_t *presence, unsigned n, const uint64_t *slots, const uint64_t *state_slots,
		 struct hc__run *runs, unsigned cap, unsigned *need);

/*
 * One layer of a transfer as the shared index arithmetic sees it
 * (index.h): the components of pl that have this layer, with their
 * offsets and this layer's device bases, for n pages.  -E2BIG when the
 * items of the layer do not fit 32 bits.
 */
int hc__dl_init(const struct hc__geom *g, const struct hc__dev_plan *pl, unsigned layer, unsigned n, struct hc__dl *L);

/*
 * Every slot of every token of the transfer within the device pools it
 * names: -ERANGE naming the first that is not.  Checked when a transfer is
 * made, so the copies (and the kernel, which cannot fail) need not.
 */
int hc__dev_check_slots(const struct hc__geom *g, const struct hc__dev_plan *pl, unsigned n, const uint32_t *presence,
			const uint64_t *slots, const uint64_t *state_slots);

/* The bytes from a device pool's base to the end of its last slot. */
uint64_t hc__dev_span(const struct hc__dev_comp *dc);

/* The bytes the items of L move for pages of these presence bits (NULL: all). */
uint64_t hc__dl_bytes(const struct hc__dl *L, const uint32_t *presence);

/*
 * The host implementation's gather/scatter: the kernel's loop over the
 * items of one layer, in C, on the same arithmetic.  env is the start of
 * the pool's envelopes; store copies device to envelopes.
 */
void hc__dl_copy(const struct hc__dl *L, uint8_t *env, const uint32_t *pages, const uint32_t *presence,
		 const uint64_t *slots, const uint64_t *state_slots, int store);

#endif /* HC_LIB_DEVMAP_H */
