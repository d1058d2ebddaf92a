/* SPDX-License-Identifier: Apache-2.0 */
/* map.c - runs between envelopes and a rank's device KV (map.h). */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../shmpool/layout.h"
#include "../../shmpool/pool.h"
#include "map.h"

static_assert(HC__DL_MAX_COMPS == HC_MAX_COMPONENTS, "index.h holds every component");

/* One device pool: its hull [lo, hi), and its bytes, foot of every period
 * bytes from lo (a slot's, or a block's); in blocks, also the slot stride
 * and a slot's bytes within a block, and the slots of a block. */
struct range {
	uint64_t lo, hi, period, foot;
	uint64_t stride, bytes;
	uint32_t block_slots;
	unsigned comp, layer, kv;
};

static uint64_t foot_of(const struct hc__dev_comp *dc)
{
	return dc->block_slots ? (uint64_t)(dc->block_slots - 1) * dc->token_stride + dc->token_bytes : dc->token_bytes;
}

uint64_t hc__dev_span(const struct hc__dev_comp *dc)
{
	uint64_t last = dc->slots - 1;

	if (!dc->block_slots)
		return last * dc->token_stride + dc->token_bytes;
	return (last / dc->block_slots) * dc->block_stride + (last % dc->block_slots) * dc->token_stride +
	       dc->token_bytes;
}

/* Blocks whose slots fit their stride, and a span that fits 64 bits. */
static int check_blocks(const struct hc_component_info *ci, const struct hc__dev_comp *dc)
{
	uint64_t last = dc->slots - 1, a, b;

	if (!dc->block_slots) {
		if (__builtin_mul_overflow(last, dc->token_stride, &a) ||
		    __builtin_add_overflow(a, dc->token_bytes, &a))
			return hc__err(EOVERFLOW, "component '%s': %llu slots of %llu bytes overflow 64 bits", ci->name,
				       (unsigned long long)dc->slots, (unsigned long long)dc->token_stride);
		return 0;
	}
	if (__builtin_mul_overflow((uint64_t)(dc->block_slots - 1), dc->token_stride, &a) ||
	    __builtin_add_overflow(a, dc->token_bytes, &a))
		return hc__err(EOVERFLOW, "component '%s': a block of %u slots of %llu bytes overflows 64 bits",
			       ci->name, dc->block_slots, (unsigned long long)dc->token_stride);
	if (dc->block_stride < a)
		return hc__err(
			EINVAL,
			"component '%s': block stride %llu is smaller than a block of %u slots (%llu bytes): blocks would overlap",
			ci->name, (unsigned long long)dc->block_stride, dc->block_slots, (unsigned long long)a);
	if (__builtin_mul_overflow(last / dc->block_slots, dc->block_stride, &b) ||
	    __builtin_add_overflow(b, (last % dc->block_slots) * dc->token_stride + dc->token_bytes, &b))
		return hc__err(
			EOVERFLOW, "component '%s': %llu slots in blocks of %u, %llu bytes apart, overflow 64 bits",
			ci->name, (unsigned long long)dc->slots, dc->block_slots, (unsigned long long)dc->block_stride);
	return 0;
}

/*
 * Whether two pools whose hulls meet share a byte.  Two pools of the same
 * period p (the layers of SGLang's page_first, the blocks of its
 * page_first_direct) are disjoint when b's bytes of each period fall in
 * a's gap: d = (b.lo - a.lo) mod p, d >= a.foot and d + b.foot <= p.
 * Pools in blocks of the same shape may also interleave slot by slot
 * within each block (the K and V halves of an MLA latent in
 * page_first_direct): then d must fall in the gap of a's slot, d >=
 * a.bytes and d + b.bytes <= stride, with b's last slot still inside the
 * period.  Anything else whose hulls meet counts as an overlap:
 * interleaving with different periods is not a layout any engine uses.
 */
static int ranges_meet(const struct range *a, const struct range *b)
{
	uint64_t d;

	if (b->lo >= a->hi || a->lo >= b->hi)
		return 0;
	if (a->period != b->period || a->period == 0)
		return 1;
	d = (b->lo - a->lo) % a->period; /* b->lo >= a->lo: sorted */
	if (d >= a->foot && d + b->foot <= a->period)
		return 0;
	if (a->block_slots && a->block_slots == b->block_slots && a->stride == b->stride && d >= a->bytes &&
	    d + b->bytes <= a->stride && d + (uint64_t)(b->block_slots - 1) * b->stride + b->bytes <= a->period)
		return 0;
	return 1;
}

static int cmp_range(const void *a, const void *b)
{
	const struct range *x = a, *y = b;

	return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Which whole head groups rank r of an engine of TP size s holds. */
static int groups_of(const struct hc_component_info *ci, uint32_t s, uint32_t r, uint32_t *g0, uint32_t *ng)
{
	uint32_t G = ci->groups;

	if (ci->sharding == HC_REPLICATED) {
		*g0 = 0;
		*ng = 1;
		return 0;
	}
	if (s <= G) {
		if (G % s)
			return hc__err(EINVAL, "component '%s': %u head groups do not split over TP %u", ci->name, G,
				       s);
		*g0 = r * (G / s);
		*ng = G / s;
		return 0;
	}
	/* More ranks than groups: only a group of one head, replicated over
	 * the ranks that share it, is a whole group for each of them. */
	if (s % G || (ci->kind == HC_COMP_KV && ci->kv_heads != G))
		return hc__err(
			EINVAL,
			"component '%s': TP %u needs part of a head group (the pool has %u groups of %u heads): create the pool with more head groups (--head-groups)",
			ci->name, s, G, ci->kind == HC_COMP_KV ? ci->kv_heads / G : 0);
	*g0 = r / (s / G);
	*ng = 1;
	return 0;
}

int hc__dev_plan(const struct hc__geom *g, const struct hc__dev_desc *d, struct hc__dev_plan *out)
{
	struct range *rg;
	unsigned nr = 0, used = 0;
	int ret = 0;

	if (!d || (d->ncomp && !d->comps))
		return hc__err(EINVAL, "device description: %s is NULL", d ? "comps" : "the description");
	if (d->ncomp == 0 || d->ncomp > g->ncomp)
		return hc__err(EINVAL, "device description: %u components, the pool has %u", d->ncomp, g->ncomp);
	if (d->tp_size == 0 || d->tp_rank >= d->tp_size)
		return hc__err(EINVAL, "device description: TP rank %u of TP size %u", d->tp_rank, d->tp_size);
	memset(out, 0, sizeof(*out));
	out->ncomp = d->ncomp;
	for (unsigned i = 0; i < d->ncomp; i++) {
		const struct hc__dev_comp *dc = &d->comps[i];
		const struct hc_component_info *ci;
		unsigned dt;

		if (dc->comp >= g->ncomp)
			return hc__err(EINVAL,
				       "device component %u: pool component %u does not exist (the pool has %u)", i,
				       dc->comp, g->ncomp);
		if (used & (1u << dc->comp))
			return hc__err(EINVAL, "device component %u: pool component %u is described twice", i,
				       dc->comp);
		used |= 1u << dc->comp;
		ci = &g->comps[dc->comp];
		out->c[i].d = *dc;
		out->c[i].kv = ci->kind == HC_COMP_KV;
		if (!dc->k)
			return hc__err(EINVAL, "component '%s': the %s base addresses are missing", ci->name,
				       out->c[i].kv ? "K" : "state");
		if (out->c[i].kv && !dc->v && ci->sharding != HC_REPLICATED)
			return hc__err(
				EINVAL,
				"component '%s': the V base addresses are missing (only a replicated component, such as MLA's latent, may go without V)",
				ci->name);
		out->c[i].nkv = out->c[i].kv && dc->v ? 2 : 1;
		if ((ret = groups_of(ci, d->tp_size, d->tp_rank, &out->c[i].g0, &out->c[i].ng)) < 0)
			return ret;
		out->c[i].grp_bytes = out->c[i].kv ? (uint64_t)(ci->kv_heads / ci->groups) * ci->head_bytes
						   : ci->layer_stride;
		if (dc->token_bytes != out->c[i].ng * out->c[i].grp_bytes)
			return hc__err(
				EINVAL,
				"component '%s': %llu bytes per %s, but TP rank %u of %u holds %u head group(s) of %llu bytes",
				ci->name, (unsigned long long)dc->token_bytes, out->c[i].kv ? "token" : "page",
				d->tp_rank, d->tp_size, out->c[i].ng, (unsigned long long)out->c[i].grp_bytes);
		if (dc->token_stride < dc->token_bytes || dc->slots == 0)
			return hc__err(EINVAL, "component '%s': %s", ci->name,
				       dc->slots
					       ? "the slot stride is smaller than a slot's bytes (slots would overlap)"
					       : "the device pool has no slots");
		if ((ret = check_blocks(ci, dc)) < 0)
			return ret;
		dt = hc_dtype_size(ci->dtype);
		if (dc->token_stride % dt || (dc->block_slots && dc->block_stride % dt))
			return hc__err(
				EINVAL, "component '%s': %s stride %llu is not a multiple of the %s size %u", ci->name,
				dc->token_stride % dt ? "slot" : "block",
				(unsigned long long)(dc->token_stride % dt ? dc->token_stride : dc->block_stride),
				hc_dtype_name(ci->dtype), dt);
		for (unsigned l = 0; l < ci->layers; l++)
			for (unsigned kv = 0; kv < out->c[i].nkv; kv++)
				if ((kv ? dc->v : dc->k)[l] % dt)
					return hc__err(
						EINVAL,
						"component '%s': layer %u's %s base is not aligned to the %s size %u",
						ci->name, l, out->c[i].kv ? (kv ? "V" : "K") : "state",
						hc_dtype_name(ci->dtype), dt);
	}
	/* No two device pools may overlap: a load would write one over another. */
	{
		size_t max = 0;
		for (unsigned i = 0; i < d->ncomp; i++)
			max += (size_t)g->comps[d->comps[i].comp].layers * 2;
		rg = calloc(max ? max : 1, sizeof(*rg));
		if (!rg)
			return hc__err(ENOMEM, "device description: no memory to check %zu ranges", max);
	}
	for (unsigned i = 0; i < d->ncomp; i++) {
		const struct hc__dev_comp *dc = &d->comps[i];
		uint64_t span = hc__dev_span(dc), foot = foot_of(dc);
		uint64_t period = dc->block_slots ? dc->block_stride : dc->token_stride;

		for (unsigned l = 0; l < g->comps[dc->comp].layers; l++)
			for (unsigned kv = 0; kv < out->c[i].nkv; kv++) {
				uint64_t lo = (kv ? dc->v : dc->k)[l];
				if (lo > UINT64_MAX - span) {
					ret = hc__err(EOVERFLOW,
						      "component '%s': layer %u's pool wraps the address space",
						      g->comps[dc->comp].name, l);
					goto out;
				}
				rg[nr++] = (struct range){ .lo = lo,
							   .hi = lo + span,
							   .period = period,
							   .foot = foot,
							   .stride = dc->token_stride,
							   .bytes = dc->token_bytes,
							   .block_slots = dc->block_slots,
							   .comp = dc->comp,
							   .layer = l,
							   .kv = kv };
			}
	}
	qsort(rg, nr, sizeof(*rg), cmp_range);
	/* Sorted by base: the pools a pool may meet follow it, up to its end. */
	for (unsigned i = 0; i < nr; i++)
		for (unsigned j = i + 1; j < nr && rg[j].lo < rg[i].hi; j++)
			if (ranges_meet(&rg[i], &rg[j])) {
				const struct range *a = &rg[i], *b = &rg[j];
				ret = hc__err(
					EINVAL,
					"device pools overlap: component '%s' layer %u %s and component '%s' layer %u %s share bytes%s",
					g->comps[a->comp].name, a->layer, a->kv ? "V" : "K", g->comps[b->comp].name,
					b->layer, b->kv ? "V" : "K",
					a->period != b->period
						? " (or interleave with different strides, which is not supported)"
						: "");
				goto out;
			}
out:
	free(rg);
	return ret;
}

int hc__dl_init(const struct hc__geom *g, const struct hc__dev_plan *pl, unsigned layer, unsigned n, struct hc__dl *L)
{
	uint64_t bits = g->envelope_bytes;
	uint64_t items = 0;

	memset(L, 0, sizeof(*L));
	L->envelope_bytes = g->envelope_bytes;
	L->T = g->page_tokens;
	L->n = n;
	for (unsigned c = 0; c < pl->ncomp; c++) {
		const struct hc_component_info *ci = &g->comps[pl->c[c].d.comp];
		const struct hc__dev_comp *dc = &pl->c[c].d;
		struct hc__dl_comp *k = &L->c[L->ncomp];

		if (layer >= ci->layers)
			continue;
		k->env = ci->offset + (uint64_t)pl->c[c].g0 * ci->group_stride + (uint64_t)layer * ci->layer_stride;
		k->group_stride = ci->group_stride;
		k->gb = pl->c[c].grp_bytes;
		k->half = pl->c[c].kv ? (uint64_t)g->page_tokens * k->gb : 0;
		k->nkv = pl->c[c].nkv;
		k->dev[0] = dc->k[layer];
		k->dev[1] = k->nkv == 2 ? dc->v[layer] : 0;
		k->stride = dc->token_stride;
		k->bstride = dc->block_slots ? dc->block_stride : 0;
		k->bslots = dc->block_slots;
		k->ng = pl->c[c].ng;
		k->bit = 1u << dc->comp;
		k->first = (uint32_t)items;
		items += (uint64_t)k->nkv * n * k->ng;
		if (items > UINT32_MAX)
			return hc__err(E2BIG, "transfer: %u pages make more than 2^32 copies in a layer: split it", n);
		bits |= k->env | k->group_stride | k->half | k->gb | k->dev[0] | k->dev[1] | k->stride | k->bstride;
		L->ncomp++;
	}
	L->items = (uint32_t)items;
	L->align = 16;
	while (L->align > 1 && (bits & (L->align - 1)))
		L->align >>= 1;
	return 0;
}

int hc__dev_check_slots(const struct hc__geom *g, const struct hc__dev_plan *pl, unsigned n, const uint32_t *presence,
			const uint64_t *slots, const uint64_t *state_slots)
{
	const uint32_t T = g->page_tokens;

	for (unsigned c = 0; c < pl->ncomp; c++) {
		const struct hc_component_info *ci = &g->comps[pl->c[c].d.comp];
		const uint64_t max = pl->c[c].d.slots;

		if (!pl->c[c].kv && !state_slots)
			return hc__err(EINVAL, "component '%s' is a state: give state_slots", ci->name);
		if (pl->c[c].kv && !slots)
			return hc__err(EINVAL, "component '%s' is K/V: give slots", ci->name);
		for (unsigned i = 0; i < n; i++) {
			if (presence && !(presence[i] & (1u << pl->c[c].d.comp)))
				continue; /* not copied: its slots are not used */
			if (!pl->c[c].kv) {
				if (state_slots[i] >= max)
					return hc__err(
						ERANGE,
						"component '%s': page %u's state slot %llu is out of the %llu slots",
						ci->name, i, (unsigned long long)state_slots[i],
						(unsigned long long)max);
				continue;
			}
			for (uint32_t t = 0; t < T; t++)
				if (slots[(size_t)i * T + t] >= max)
					return hc__err(
						ERANGE,
						"component '%s': page %u token %u's slot %llu is out of the %llu slots",
						ci->name, i, t, (unsigned long long)slots[(size_t)i * T + t],
						(unsigned long long)max);
		}
	}
	return 0;
}

uint64_t hc__dl_bytes(const struct hc__dl *L, const uint32_t *presence)
{
	uint64_t b = 0;

	for (uint32_t c = 0; c < L->ncomp; c++) {
		const struct hc__dl_comp *k = &L->c[c];
		uint64_t pages = 0;
		for (uint32_t i = 0; i < L->n; i++)
			pages += !presence || (presence[i] & k->bit);
		b += pages * k->nkv * k->ng * k->gb * (k->half ? L->T : 1);
	}
	return b;
}

void hc__dl_copy(const struct hc__dl *L, uint8_t *env, const uint32_t *pages, const uint32_t *presence,
		 const uint64_t *slots, const uint64_t *state_slots, int store)
{
	for (uint32_t item = 0; item < L->items; item++) {
		struct hc__dl_seg s;

		if (!hc__dl_seg(L, item, pages, presence, &s))
			continue;
		for (uint32_t t = 0; t < s.ntok; t++) {
			uint8_t *h = env + s.env + (uint64_t)t * s.gb;
			uint8_t *d = (uint8_t *)(uintptr_t)(s.dev +
							    hc__dl_off(&s, hc__dl_slot(L, &s, t, slots, state_slots)));
			if (store)
				memcpy(h, d, s.gb);
			else
				memcpy(d, h, s.gb);
		}
	}
}

/* Append a run, merged into the last when adjacent on both sides. */
static inline void put_run(struct hc__run *runs, unsigned cap, unsigned *n, struct hc__run *last, uint64_t env,
			   uint64_t dev, uint64_t len)
{
	if (*n && last->env + last->len == env && last->dev + last->len == dev) {
		last->len += len;
		if (*n <= cap)
			runs[*n - 1].len = last->len;
		return;
	}
	*last = (struct hc__run){ env, dev, len };
	if (*n < cap)
		runs[*n] = *last;
	(*n)++;
}

int hc__dev_runs(const struct hc__geom *g, const struct hc__dev_plan *pl, unsigned layer, const uint32_t *pages,
		 const uint32_t *presence, unsigned n, const uint64_t *slots, const uint64_t *state_slots,
		 struct hc__run *runs, unsigned cap, unsigned *need)
{
	struct hc__run last = { 0 };
	struct hc__dl L;
	unsigned cnt = 0;
	int r;

	for (unsigned i = 0; i < n; i++)
		if (pages[i] >= g->npages)
			return hc__err(ERANGE, "page %u (item %u) is out of the pool's %u", pages[i], i, g->npages);
	if ((r = hc__dev_check_slots(g, pl, n, presence, slots, state_slots)) < 0)
		return r;
	if ((r = hc__dl_init(g, pl, layer, n, &L)) < 0)
		return r;
	for (uint32_t item = 0; item < L.items; item++) {
		struct hc__dl_seg s;

		if (!hc__dl_seg(&L, item, pages, presence, &s))
			continue;
		for (uint32_t t = 0; t < s.ntok; t++)
			put_run(runs, cap, &cnt, &last, s.env + (uint64_t)t * s.gb,
				s.dev + hc__dl_off(&s, hc__dl_slot(&L, &s, t, slots, state_slots)), s.gb);
	}
	if (need)
		*need = cnt;
	if (cnt > cap)
		return hc__err(ENOSPC, "%u runs, room for %u", cnt, cap);
	return (int)cnt;
}
