/* SPDX-License-Identifier: Apache-2.0 */
/*
 * model.h - the model geometry hicache-bench replay stores pages of: a
 * preset of a public model (its KV layout, as the engines lay it out), or
 * explicit options, then scaled by a factor on the layer counts so that a
 * run moves gigabytes, not terabytes, on a small machine (model.c).  And
 * the bytes a page holds (content.c): a function of its key and of where
 * each byte sits, so every byte read back can be checked.
 */
#ifndef HC_TOOLS_REPLAY_MODEL_H
#define HC_TOOLS_REPLAY_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <hicache/hicache.h>

#define HC_RP_MAX_COMPS 4

struct hc_rp_model {
	char preset[32];
	char model_id[HC_MODEL_ID_MAX + 1];
	uint32_t page_tokens;
	unsigned ncomp;
	char names[HC_RP_MAX_COMPS][HC_COMP_NAME_MAX + 1];
	struct hc_component_spec comps[HC_RP_MAX_COMPS]; /* names point into names[] */
	uint32_t full_layers[HC_RP_MAX_COMPS];           /* before scaling */
	int state;                                       /* the state snapshot component, or -1 */
	int swa;                                         /* the sliding-window component, or -1 */
	uint32_t window_tokens;                          /* its window */
	double scale;
};

/* The presets' names, for usage: "llama3-8b, ...". */
const char *hc_rp_presets(void);
/* Fill m from a preset at page_tokens and scale (0 < scale <= 1, applied
 * to each component's layers, at least 1 each). */
int hc_rp_model_preset(const char *name, uint32_t page_tokens, double scale, struct hc_rp_model *m);

/* Explicit components (--kv, --state, as hicache-pool create takes them):
 * a KV component with window=W is the sliding-window one, a state one is
 * snapshotted on a prompt's last page (window 1 unless given). */
int hc_rp_model_custom(const struct hc_component_spec *comps, unsigned n, uint32_t page_tokens, struct hc_rp_model *m);

/* content.c: the bytes of one row that a device holds for a page: one
 * head group's run of one (layer, K/V, token) of a KV component, or of one
 * layer of a state (kv 0, token 0).  Rows are whole 8-byte words. */
struct hc_rp_row {
	const uint8_t *key; /* the page's */
	unsigned comp, group, layer, kv, token;
};
void hc_rp_fill(const struct hc_rp_row *row, void *buf, size_t bytes);
/* The first byte offset in buf that differs from hc_rp_fill's, or -1. */
long hc_rp_check(const struct hc_rp_row *row, const void *buf, size_t bytes);
/* The words under both: a stream from a seed, and the index of the first
 * word that differs from it (-1: none); and the mixer seeds come from. */
void hc_rp_fill_words(uint64_t *w, size_t words, uint64_t seed);
long hc_rp_check_words(const uint64_t *w, size_t words, uint64_t seed);
uint64_t hc_rp_mix64(uint64_t x);

#endif /* HC_TOOLS_REPLAY_MODEL_H */
