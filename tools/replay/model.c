/* SPDX-License-Identifier: Apache-2.0 */
/*
 * model.c - geometry presets of public models, as their engines lay out
 * the KV cache (bf16), from the models' published configurations:
 *
 *   llama3-8b     32 layers of GQA, 8 KV heads of 128 dims.
 *   qwen2.5-32b   64 layers of GQA, 8 KV heads of 128 dims.
 *   deepseek-v3   61 layers of MLA: a 512-dim latent and a 64-dim rope key
 *                 per token, the same for every rank: one replicated head
 *                 whose K and V halves hold those 576 dims (1152 bytes).
 *   hybrid-swa    gpt-oss-20b's shape: 24 layers alternating full and
 *                 sliding-window (128 tokens) attention, 8 KV heads of 64
 *                 dims; a hit needs the sliding-window KV on its trailing
 *                 window pages only, and the replay keeps it only where a
 *                 hit can end (serve.c).
 *   hybrid-state  Qwen3-Next's shape: 12 full-attention layers (2 KV heads
 *                 of 256 dims) and 36 linear-attention layers whose state
 *                 (32 heads of 128x128, f32, 2 MiB a layer) is snapshotted
 *                 where a hit can end; a hit needs it on its last page.
 *
 * The scale factor multiplies every component's layer count (at least one
 * layer each), which scales a page's bytes and leaves the per-token layout
 * of each layer as the model has it.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../cli/cli.h"
#include "model.h"

struct comp_def {
	const char *name;
	enum hc_comp_kind kind;
	enum hc_sharding sharding;
	uint32_t heads, head_bytes; /* KV */
	uint64_t bytes_per_layer;   /* state */
	uint32_t layers;
	int role; /* 0 full, 1 sliding window, 2 state */
};

struct preset {
	const char *name, *model_id;
	uint32_t window_tokens;
	struct comp_def c[HC_RP_MAX_COMPS];
};

static const struct preset presets[] = {
	{ "llama3-8b", "meta-llama/Meta-Llama-3-8B", 0, { { "kv", HC_COMP_KV, HC_SHARDED, 8, 256, 0, 32, 0 } } },
	{ "qwen2.5-32b", "Qwen/Qwen2.5-32B", 0, { { "kv", HC_COMP_KV, HC_SHARDED, 8, 256, 0, 64, 0 } } },
	{ "deepseek-v3", "deepseek-ai/DeepSeek-V3", 0, { { "mla", HC_COMP_KV, HC_REPLICATED, 1, 576, 0, 61, 0 } } },
	{ "hybrid-swa",
	  "openai/gpt-oss-20b",
	  128,
	  { { "full", HC_COMP_KV, HC_SHARDED, 8, 128, 0, 12, 0 },
	    { "swa", HC_COMP_KV, HC_SHARDED, 8, 128, 0, 12, 1 } } },
	{ "hybrid-state",
	  "Qwen/Qwen3-Next-80B-A3B",
	  0,
	  { { "full", HC_COMP_KV, HC_SHARDED, 2, 512, 0, 12, 0 },
	    { "state", HC_COMP_STATE, HC_SHARDED, 0, 0, 32ull * 128 * 128 * 4, 36, 2 } } },
};

const char *hc_rp_presets(void)
{
	return "llama3-8b, qwen2.5-32b, deepseek-v3, hybrid-swa, hybrid-state";
}

int hc_rp_model_preset(const char *name, uint32_t page_tokens, double scale, struct hc_rp_model *m)
{
	const struct preset *p = NULL;

	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]) && !p; i++)
		if (!strcmp(presets[i].name, name))
			p = &presets[i];
	if (!p)
		return hc_cli_fail(EINVAL, "--model '%s': no such preset (the presets: %s)", name, hc_rp_presets());
	if (!(scale > 0 && scale <= 1))
		return hc_cli_fail(EINVAL, "--scale %g: give a factor above 0 and at most 1", scale);
	memset(m, 0, sizeof(*m));
	snprintf(m->preset, sizeof(m->preset), "%s", p->name);
	snprintf(m->model_id, sizeof(m->model_id), "%s", p->model_id);
	m->page_tokens = page_tokens;
	m->scale = scale;
	m->state = m->swa = -1;
	m->window_tokens = p->window_tokens;
	for (unsigned i = 0; i < HC_RP_MAX_COMPS && p->c[i].name; i++) {
		const struct comp_def *d = &p->c[i];
		struct hc_component_spec *c = &m->comps[i];
		uint32_t layers = (uint32_t)lround(d->layers * scale);
		snprintf(m->names[i], sizeof(m->names[i]), "%s", d->name);
		*c = (struct hc_component_spec){ .size = sizeof(struct hc_component_spec),
						 .name = m->names[i],
						 .dtype = d->kind == HC_COMP_STATE ? HC_DTYPE_F32 : HC_DTYPE_BF16,
						 .kind = d->kind,
						 .sharding = d->sharding,
						 .kv_heads = d->heads,
						 .head_bytes = d->head_bytes,
						 .bytes_per_layer = d->bytes_per_layer,
						 .layers = layers ? layers : 1 };
		m->full_layers[i] = d->layers;
		if (d->role == 1) {
			m->swa = (int)i;
			c->window_pages = (p->window_tokens + page_tokens - 1) / page_tokens;
		} else if (d->role == 2) {
			m->state = (int)i;
			c->window_pages = 1;
		}
		m->ncomp++;
	}
	return 0;
}

int hc_rp_model_custom(const struct hc_component_spec *comps, unsigned n, uint32_t page_tokens, struct hc_rp_model *m)
{
	if (n == 0 || n > HC_RP_MAX_COMPS)
		return hc_cli_fail(EINVAL, "--kv/--state: %u components: give 1 to %d", n, HC_RP_MAX_COMPS);
	memset(m, 0, sizeof(*m));
	snprintf(m->preset, sizeof(m->preset), "custom");
	snprintf(m->model_id, sizeof(m->model_id), "hicache-bench/custom");
	m->page_tokens = page_tokens;
	m->scale = 1;
	m->state = m->swa = -1;
	for (unsigned i = 0; i < n; i++) {
		m->comps[i] = comps[i];
		snprintf(m->names[i], sizeof(m->names[i]), "%s", comps[i].name);
		m->comps[i].name = m->names[i];
		m->full_layers[i] = comps[i].layers;
		if (comps[i].kind == HC_COMP_STATE) {
			if (m->state >= 0)
				return hc_cli_fail(EINVAL, "--state: one state snapshot component at most");
			m->state = (int)i;
			if (!m->comps[i].window_pages)
				m->comps[i].window_pages = 1; /* a snapshot is on a prompt's last page only */
		} else if (comps[i].window_pages) {
			if (m->swa >= 0)
				return hc_cli_fail(EINVAL, "--kv: one sliding-window component at most");
			m->swa = (int)i;
			m->window_tokens = comps[i].window_pages * page_tokens;
		}
		m->ncomp++;
	}
	return 0;
}
