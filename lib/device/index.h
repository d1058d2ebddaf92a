/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.h - the index arithmetic of one layer of a transfer, shared by the
 * C code (the runs of map.c, the host implementation's gather loop) and
 * the CUDA gather/scatter kernel (kernel.cu).  No libc, no pool: only the
 * numbers of struct hc__dl, which the host fills once per layer
 * (hc__dl_init in map.h), so the tests on CPU exercise what the kernel
 * computes.
 *
 * The work of a layer is a list of items, one per (component, K or V,
 * page, held group), in that order.  An item is a segment: the page's
 * tokens of that group in the envelope (one contiguous stretch, token t at
 * env + t * gb) going to the slots of the device pool (token t at
 * dev + off(slot(t)), hc__dl_off).  A state item is one piece of gb bytes into the
 * page's state slot.
 */
#ifndef HC_LIB_DEVIDX_H
#define HC_LIB_DEVIDX_H

#include <stdint.h>

#ifdef __CUDACC__
#define HC_IDX static __host__ __device__ __forceinline__
#else
#define HC_IDX static inline
#endif

#define HC__DL_MAX_COMPS 16 /* HC_MAX_COMPONENTS */

struct hc__dl_comp {
	uint64_t env;          /* from a page's envelope to this layer's first held group, K half */
	uint64_t group_stride; /* from one group to the next in the envelope */
	uint64_t half;         /* from K to V within a group (T * gb); 0 for a state */
	uint64_t gb;           /* one group's bytes of one token (a state: of the page) */
	uint64_t dev[2];       /* this layer's K and V device bases (a state: dev[0]) */
	uint64_t stride;       /* from one device slot to the next */
	uint64_t bstride;      /* from one block of slots to the next */
	uint32_t bslots;       /* slots in a block; 0: no blocks */
	uint32_t pad_;
	uint32_t ng;    /* groups held */
	uint32_t nkv;   /* 2 for K/V, 1 for a state or K alone */
	uint32_t bit;   /* 1 << the pool's component index, tested against presence */
	uint32_t first; /* this component's first item */
};

struct hc__dl {
	uint64_t envelope_bytes;
	uint32_t T;     /* tokens per page */
	uint32_t n;     /* pages in the transfer */
	uint32_t items; /* items in this layer */
	uint32_t ncomp; /* components with this layer */
	uint32_t align; /* largest power of two <= 16 dividing every offset, base, stride and gb */
	uint32_t pad_;
	struct hc__dl_comp c[HC__DL_MAX_COMPS];
};

struct hc__dl_seg {
	uint64_t env; /* envelope offset of the segment's token 0 */
	uint64_t dev; /* device address of slot 0, plus the group's place in a slot */
	uint64_t gb, stride, bstride;
	uint32_t bslots;
	uint32_t page; /* index into the transfer's pages */
	uint32_t ntok; /* T, or 1 for a state */
	uint32_t state;
};

/* Item -> segment.  Returns 0 when the page lacks the component (a window
 * or a snapshot it does not hold): nothing to copy. */
HC_IDX int hc__dl_seg(const struct hc__dl *L, uint32_t item, const uint32_t *pages, const uint32_t *presence,
		      struct hc__dl_seg *s)
{
	uint32_t c = 0, per, kv, rem, i, j;
	const struct hc__dl_comp *k;

	while (c + 1 < L->ncomp && item >= L->c[c + 1].first)
		c++;
	k = &L->c[c];
	per = L->n * k->ng;
	rem = item - k->first;
	kv = rem / per;
	rem -= kv * per;
	i = rem / k->ng;
	j = rem - i * k->ng;
	if (presence && !(presence[i] & k->bit))
		return 0;
	s->env = (uint64_t)pages[i] * L->envelope_bytes + k->env + (uint64_t)j * k->group_stride + kv * k->half;
	s->dev = k->dev[kv] + (uint64_t)j * k->gb;
	s->gb = k->gb;
	s->stride = k->stride;
	s->bstride = k->bstride;
	s->bslots = k->bslots;
	s->page = i;
	s->state = k->half == 0;
	s->ntok = s->state ? 1 : L->T;
	return 1;
}

/* The device slot of token t of a segment. */
HC_IDX uint64_t hc__dl_slot(const struct hc__dl *L, const struct hc__dl_seg *s, uint32_t t, const uint64_t *slots,
			    const uint64_t *state_slots)
{
	return s->state ? state_slots[s->page] : slots[(uint64_t)s->page * L->T + t];
}

/* Where slot sits from its pool's base: blocks of bslots slots bstride
 * apart, or (bslots 0) one run of slots. */
HC_IDX uint64_t hc__dl_off(const struct hc__dl_seg *s, uint64_t slot)
{
	if (!s->bslots)
		return slot * s->stride;
	return (slot / s->bslots) * s->bstride + (slot % s->bslots) * s->stride;
}

#endif /* HC_LIB_DEVIDX_H */
