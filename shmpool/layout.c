/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layout.c - geometry of an envelope and of a segment, the fingerprint, and
 * the metadata digest.  Creation and attach both run these, so a segment is
 * accepted only if its stored layout is exactly what this code derives.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>

#include "pool.h"

static const struct {
	const char *name;
	unsigned size;
} dtypes[HC_DTYPE__COUNT] = {
	[HC_DTYPE_INVALID] = { "invalid", 0 },   [HC_DTYPE_F32] = { "f32", 4 },
	[HC_DTYPE_F16] = { "f16", 2 },           [HC_DTYPE_BF16] = { "bf16", 2 },
	[HC_DTYPE_FP8_E4M3] = { "fp8_e4m3", 1 }, [HC_DTYPE_FP8_E5M2] = { "fp8_e5m2", 1 },
	[HC_DTYPE_INT8] = { "int8", 1 },         [HC_DTYPE_UINT8] = { "uint8", 1 },
};

const char *hc_dtype_name(enum hc_dtype d)
{
	return (unsigned)d < HC_DTYPE__COUNT ? dtypes[d].name : "invalid";
}

unsigned hc_dtype_size(enum hc_dtype d)
{
	return (unsigned)d < HC_DTYPE__COUNT ? dtypes[d].size : 0;
}

int hc_dtype_parse(const char *s)
{
	for (int i = 1; i < HC_DTYPE__COUNT; i++)
		if (s && strcmp(s, dtypes[i].name) == 0)
			return i;
	return hc__err(EINVAL, "unknown dtype '%s': use f32, f16, bf16, fp8_e4m3, fp8_e5m2, int8 or uint8",
		       s ? s : "(null)");
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static int mul3(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
	uint64_t t;

	if (__builtin_mul_overflow(a, b, &t) || __builtin_mul_overflow(t, c, out))
		return -1;
	return 0;
}

/* Check one component and derive its strides; 'off' is where it starts. */
static int comp_geom(struct hc__geom *g, unsigned i, uint64_t off)
{
	struct hc_component_info *c = &g->comps[i];
	size_t nl = strnlen(c->name, sizeof(c->name));
	uint64_t per_token, run;

	if (nl == 0 || nl > HC_COMP_NAME_MAX)
		return hc__err(EINVAL, "component %u: name must be 1..%d characters", i, HC_COMP_NAME_MAX);
	for (size_t k = 0; k < nl; k++) {
		char ch = c->name[k];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
		      ch == '-' || ch == '.'))
			return hc__err(EINVAL, "component '%s': names may use only letters, digits, '_', '-' and '.'",
				       c->name);
	}
	for (unsigned j = 0; j < i; j++)
		if (strcmp(g->comps[j].name, c->name) == 0)
			return hc__err(EINVAL, "component '%s' is given twice: names must be unique", c->name);
	if (hc_dtype_size(c->dtype) == 0)
		return hc__err(EINVAL, "component '%s': invalid dtype %d", c->name, (int)c->dtype);
	if (c->sharding != HC_SHARDED && c->sharding != HC_REPLICATED)
		return hc__err(EINVAL, "component '%s': sharding must be sharded or replicated", c->name);
	if (c->layers == 0)
		return hc__err(EINVAL, "component '%s': layer count is zero", c->name);
	c->groups = c->sharding == HC_SHARDED ? g->head_groups : 1;

	switch (c->kind) {
	case HC_COMP_KV:
		if (c->kv_heads == 0 || c->head_bytes == 0)
			return hc__err(EINVAL, "component '%s': kv_heads and head_bytes must be non-zero (got %u, %u)",
				       c->name, c->kv_heads, c->head_bytes);
		if (c->head_bytes % hc_dtype_size(c->dtype))
			return hc__err(EINVAL, "component '%s': head_bytes %u is not a multiple of the %s size %u",
				       c->name, c->head_bytes, hc_dtype_name(c->dtype), hc_dtype_size(c->dtype));
		if (c->kv_heads % c->groups)
			return hc__err(EINVAL, "component '%s': %u KV heads do not split into %u head groups", c->name,
				       c->kv_heads, c->groups);
		/* run = T * (H/G) * B; layer = 2 * run; group = L * layer */
		if (mul3(g->page_tokens, c->kv_heads / c->groups, c->head_bytes, &run) ||
		    mul3(run, 2, 1, &c->layer_stride) || mul3(c->layer_stride, c->layers, 1, &c->group_stride) ||
		    mul3(c->group_stride, c->groups, 1, &c->bytes) ||
		    mul3(g->page_tokens, c->kv_heads, c->head_bytes, &per_token) ||
		    mul3(per_token, 2, 1, &c->bytes_per_layer))
			return hc__err(EOVERFLOW, "component '%s': size overflows 64 bits", c->name);
		break;
	case HC_COMP_STATE:
		if (c->bytes_per_layer == 0)
			return hc__err(EINVAL, "component '%s': bytes_per_layer is zero", c->name);
		if (c->bytes_per_layer % c->groups)
			return hc__err(EINVAL, "component '%s': %llu bytes per layer do not split into %u head groups",
				       c->name, (unsigned long long)c->bytes_per_layer, c->groups);
		c->kv_heads = 0;
		c->head_bytes = 0;
		c->layer_stride = c->bytes_per_layer / c->groups;
		if (mul3(c->layer_stride, c->layers, 1, &c->group_stride) ||
		    mul3(c->group_stride, c->groups, 1, &c->bytes))
			return hc__err(EOVERFLOW, "component '%s': size overflows 64 bits", c->name);
		break;
	default:
		return hc__err(EINVAL, "component '%s': kind must be kv or state", c->name);
	}
	c->offset = off;
	return 0;
}

/*
 * Fill in head_groups (if 0), each component's strides and offset, the
 * sharding masks and envelope_bytes, from page_tokens, tp_size and the
 * components' given fields.
 */
int hc__geom_envelope(struct hc__geom *g)
{
	uint64_t off = 0;
	int ret;

	if (g->page_tokens == 0)
		return hc__err(EINVAL, "page_tokens is zero: give the engine's page size in tokens (e.g. 64)");
	if (g->page_tokens > (1u << 20))
		return hc__err(EINVAL, "page_tokens %u is over the limit of %u", g->page_tokens, 1u << 20);
	if (g->tp_size == 0 || g->tp_size > 1024)
		return hc__err(EINVAL, "tp_size %u is out of range 1..1024", g->tp_size);
	if (g->ncomp == 0 || g->ncomp > HC_MAX_COMPONENTS)
		return hc__err(EINVAL, "a pool needs 1..%d components, got %u", HC_MAX_COMPONENTS, g->ncomp);
	if (g->head_groups == 0) {
		/* An engine splits a sharded KV component's heads over its ranks, or
		 * each rank holds a share of one head: TP and the head count must
		 * divide one another, or no rank's share is whole (and a group
		 * count picked below would quietly be 1). */
		for (unsigned i = 0; i < g->ncomp; i++) {
			const struct hc_component_info *c = &g->comps[i];

			if (c->sharding == HC_SHARDED && c->kind == HC_COMP_KV && c->kv_heads &&
			    c->kv_heads % g->tp_size && g->tp_size % c->kv_heads)
				return hc__err(
					EINVAL,
					"component '%s': %u KV heads do not split over TP %u (neither divides the other): give a TP size that divides %u or is a multiple of it, or mark the component replicated",
					c->name, c->kv_heads, g->tp_size, c->kv_heads);
		}
		/* The largest group count that every sharded component and the TP size accept. */
		for (uint32_t cand = g->tp_size < HC_MAX_HEAD_GROUPS ? g->tp_size : HC_MAX_HEAD_GROUPS; cand >= 1;
		     cand--) {
			bool ok = g->tp_size % cand == 0;
			for (unsigned i = 0; ok && i < g->ncomp; i++) {
				const struct hc_component_info *c = &g->comps[i];
				if (c->sharding != HC_SHARDED)
					continue;
				if (c->kind == HC_COMP_KV)
					ok = c->kv_heads && c->kv_heads % cand == 0;
				else
					ok = c->bytes_per_layer % cand == 0;
			}
			if (ok) {
				g->head_groups = cand;
				break;
			}
		}
		if (g->head_groups == 0)
			g->head_groups = 1;
	}
	if (g->head_groups > HC_MAX_HEAD_GROUPS)
		return hc__err(EINVAL, "head_groups %u is over the limit of %d", g->head_groups, HC_MAX_HEAD_GROUPS);
	if (g->tp_size % g->head_groups && g->head_groups % g->tp_size)
		return hc__err(EINVAL, "head_groups %u and tp_size %u: one must divide the other", g->head_groups,
			       g->tp_size);

	g->sharded_mask = g->replicated_mask = 0;
	for (unsigned i = 0; i < g->ncomp; i++) {
		if ((ret = comp_geom(g, i, off)) < 0)
			return ret;
		if (g->comps[i].sharding == HC_SHARDED)
			g->sharded_mask |= 1u << i;
		else
			g->replicated_mask |= 1u << i;
		if (g->comps[i].bytes > UINT64_MAX / 2 - off)
			return hc__err(EOVERFLOW, "envelope size overflows 64 bits");
		off = align_up(off + g->comps[i].bytes, HC_ENVELOPE_ALIGN);
	}
	g->envelope_bytes = off;
	return 0;
}

/* Place the regions for npages pages, max_ranks slots and max_tickets tickets. */
int hc__geom_regions(struct hc__geom *g)
{
	uint64_t off = HC_SEG_HDR_BYTES, b, words = g->max_tickets / 64;
	uint64_t sizes[HC_REG__COUNT] = { 0 };
	struct hc__fm_shape fs;

	if (g->max_ranks == 0 || g->max_ranks > HC_MAX_RANKS)
		return hc__err(EINVAL, "max_ranks %u is out of range 1..%d", g->max_ranks, HC_MAX_RANKS);
	if (g->npages == 0)
		return hc__err(
			EINVAL,
			"capacity is zero pages: give a page count, or a byte size of at least one envelope (%llu bytes)",
			(unsigned long long)g->envelope_bytes);
	if (g->npages > INT32_MAX)
		return hc__err(EINVAL, "capacity of %u pages is over the limit of 2^31-1", g->npages);
	if (g->max_tickets == 0 || g->max_tickets % 64 || g->max_tickets > 4096)
		return hc__err(EINVAL, "max_tickets %u must be a multiple of 64 in 64..4096", g->max_tickets);
	if (g->ticket_keys == 0 || g->ticket_keys > HC_LOOKUP_MAX)
		return hc__err(EINVAL, "ticket_keys %u is out of range 1..%d", g->ticket_keys, HC_LOOKUP_MAX);
	for (unsigned i = 0; i < g->ncomp; i++)
		if (g->comps[i].window_pages > HC_LOOKUP_MAX)
			return hc__err(
				EINVAL,
				"component '%s': window of %u pages is over the limit of %d (0 means every page)",
				g->comps[i].name, g->comps[i].window_pages, HC_LOOKUP_MAX);
	if (g->evict > HC_EVICT_LRU)
		return hc__err(EINVAL, "eviction policy %u is unknown: use HC_EVICT_CLOCK or HC_EVICT_LRU", g->evict);
	if (g->host_mode > HC_HOST_BUFFER_ONLY)
		return hc__err(EINVAL, "host-memory mode %u is unknown: use HC_HOST_CACHE or HC_HOST_BUFFER_ONLY",
			       g->host_mode);
	if (g->sq_entries < 8 || g->sq_entries > HC_SQ_MAX || (g->sq_entries & (g->sq_entries - 1)) ||
	    g->cq_entries != 2 * g->sq_entries)
		return hc__err(
			EINVAL,
			"ring of %u requests (and %u completions): give a power of two in 8..%u (completions are twice that)",
			g->sq_entries, g->cq_entries, HC_SQ_MAX);
	if (g->arg_bytes < 4096 || g->arg_bytes > HC_ARG_MAX || g->arg_bytes % 4096)
		return hc__err(EINVAL, "argument area of %llu bytes: give a multiple of 4096 in 4096..%llu",
			       (unsigned long long)g->arg_bytes, (unsigned long long)HC_ARG_MAX);
	g->rg.sq_off = sizeof(struct hc_bell);
	g->rg.cq_off = align_up(g->rg.sq_off + hc__ring_bytes(g->sq_entries, HC_SQE_BYTES), 64);
	g->rg.arg_off = align_up(g->rg.cq_off + hc__ring_bytes(g->cq_entries, HC_CQE_BYTES), 64);
	g->rg.block = align_up(g->rg.arg_off + g->arg_bytes, 4096);
	/* Two slots per page at least, so two-choice buckets never fill. */
	for (g->index_buckets = 2; (uint64_t)g->index_buckets * HC_BUCKET_ENTRIES < 2 * (uint64_t)g->npages;)
		g->index_buckets *= 2;
	sizes[HC_REG_COMPS] = (uint64_t)g->ncomp * sizeof(struct hc_seg_comp);
	sizes[HC_REG_RANKS] = (uint64_t)g->max_ranks * sizeof(struct hc_seg_rank);
	sizes[HC_REG_CTL] = sizeof(struct hc_seg_ctl);
	sizes[HC_REG_STATS] = ((uint64_t)g->max_ranks + 1) * HC_STATS_ROW_WORDS * sizeof(uint64_t);
	sizes[HC_REG_PAGES] = (uint64_t)g->npages * sizeof(struct hc_seg_page);
	sizes[HC_REG_PINS] = (uint64_t)g->npages * g->max_ranks * sizeof(uint32_t);
	sizes[HC_REG_TMASK] = (uint64_t)g->npages * words * sizeof(uint64_t);
	sizes[HC_REG_INDEX] = (uint64_t)g->index_buckets * HC_BUCKET_ENTRIES * sizeof(uint64_t);
	sizes[HC_REG_TICKETS] = (uint64_t)g->max_tickets * sizeof(struct hc_seg_ticket);
	sizes[HC_REG_TPAGES] = (uint64_t)g->max_tickets * g->ticket_keys * sizeof(uint64_t);
	sizes[HC_REG_RINGS] = (uint64_t)g->max_ranks * g->rg.block;
	sizes[HC_REG_FREEMAP] = 2 * hc__fm_shape(g->npages, &fs); /* free, then quarantined */
	sizes[HC_REG_LRU] = g->evict == HC_EVICT_LRU ? ((uint64_t)g->npages + 1) * sizeof(struct hc_seg_lru) : 0;
	for (int r = 0; r < HC_REG_ENV; r++) {
		g->toc[r].off = off;
		g->toc[r].bytes = sizes[r];
		off = align_up(off + sizes[r], 4096);
	}
	off = align_up(off, HC_SEG_ENV_ALIGN);
	if (__builtin_mul_overflow((uint64_t)g->npages, g->envelope_bytes, &b) || b > UINT64_MAX / 4)
		return hc__err(EOVERFLOW, "%u pages of %llu bytes overflow 64 bits", g->npages,
			       (unsigned long long)g->envelope_bytes);
	g->toc[HC_REG_ENV].off = off;
	g->toc[HC_REG_ENV].bytes = b;
	g->segment_bytes = align_up(off + b, HC_SEG_ENV_ALIGN);
	return 0;
}

static void put_u32(EVP_MD_CTX *c, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
	EVP_DigestUpdate(c, b, 4);
}

static void put_u64(EVP_MD_CTX *c, uint64_t v)
{
	put_u32(c, (uint32_t)v);
	put_u32(c, (uint32_t)(v >> 32));
}

static void put_str(EVP_MD_CTX *c, const char *s)
{
	size_t n = strlen(s);

	put_u64(c, n);
	EVP_DigestUpdate(c, s, n);
}

/*
 * The fingerprint: SHA-256 over a little-endian encoding of the model id,
 * page_tokens, the layout id with its head-group count (it decides the byte
 * order), and each component's name, dtype, kind, sharding and shape.
 * Never the TP size, the capacity or the pool's name.
 */
void hc__fingerprint(const char *model_id, const struct hc__geom *g, uint8_t out[32])
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned len = 32;

	if (!c) {
		memset(out, 0, 32);
		return;
	}
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	put_str(c, "hicache-fingerprint-v1");
	put_str(c, model_id);
	put_u32(c, g->page_tokens);
	put_str(c, HC_LAYOUT_ID);
	put_u32(c, g->head_groups);
	put_u32(c, g->ncomp);
	for (unsigned i = 0; i < g->ncomp; i++) {
		const struct hc_component_info *ci = &g->comps[i];
		put_str(c, ci->name);
		put_str(c, hc_dtype_name(ci->dtype));
		put_u32(c, ci->kind);
		put_u32(c, ci->sharding);
		put_u32(c, ci->kv_heads);
		put_u32(c, ci->head_bytes);
		put_u64(c, ci->bytes_per_layer);
		put_u32(c, ci->layers);
	}
	EVP_DigestFinal_ex(c, out, &len);
	EVP_MD_CTX_free(c);
}

/* SHA-256 over the immutable header bytes and the component records. */
void hc__meta_digest(const struct hc_seg_hdr *h, const struct hc_seg_comp *comps, uint32_t ncomp, uint8_t out[32])
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned len = 32;

	if (!c) {
		memset(out, 0, 32);
		return;
	}
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	EVP_DigestUpdate(c, h, offsetof(struct hc_seg_hdr, meta_digest));
	EVP_DigestUpdate(c, comps, (size_t)ncomp * sizeof(*comps));
	EVP_DigestFinal_ex(c, out, &len);
	EVP_MD_CTX_free(c);
}
