/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ranks.c - the rank slots and engines of a pool as info and ls show them,
 * in text and JSON.  The pool has no engine table: an engine is the live
 * slots that name it.
 */
#include <inttypes.h>
#include <stdio.h>

#include "pool.h"

/* One rank slot as info and ls print it in JSON. */
struct json_object *hcp_rank_json(const struct hc_rank_info *ri)
{
	struct json_object *x = json_object_new_object();

	hcp_jadd_u64(x, "slot", ri->slot);
	hcp_jadd_bool(x, "live", ri->live);
	hcp_jadd_u64(x, "pid", ri->pid);
	hcp_jadd_str(x, "comm", ri->comm);
	hcp_jadd_u64(x, "epoch", ri->epoch);
	hcp_jadd_u64(x, "attached_unix_ns", ri->attached_unix_ns);
	hcp_jadd_u64(x, "pins", ri->pins);
	hcp_jadd_u64(x, "locks", ri->locks);
	hcp_jadd_u64(x, "reserved", ri->reserved);
	json_object_object_add(x, "engine_id", json_object_new_int(ri->engine_id));
	hcp_jadd_u64(x, "tp_size", ri->tp_size);
	hcp_jadd_u64(x, "tp_rank", ri->tp_rank);
	hcp_jadd_u64(x, "quota", ri->quota);
	hcp_jadd_u64(x, "held", ri->held);
	return x;
}

/* "-", "unlimited" or the page count: a quota for people. */
const char *hcp_quota_text(const struct hc_rank_info *ri, char *buf, size_t len)
{
	if (ri->engine_id < 0)
		return "-";
	if (ri->quota == HC_QUOTA_UNLIMITED)
		return "unlimited";
	snprintf(buf, len, "%" PRIu32, ri->quota);
	return buf;
}

/*
 * The ranks that are in an engine, as indices into ri, sorted by engine id
 * and then TP rank, so each engine is one run.  Returns how many.  There
 * is no engine table in the pool: membership is in the rank slots.
 */
static unsigned engine_order(const struct hc_rank_info *ri, unsigned n, unsigned *idx)
{
	unsigned m = 0;

	for (unsigned i = 0; i < n; i++) {
		unsigned j;

		if (!ri[i].live || ri[i].engine_id < 0)
			continue;
		/* insertion sort: at most HC_MAX_RANKS entries */
		for (j = m++; j > 0; j--) {
			const struct hc_rank_info *a = &ri[idx[j - 1]];

			if (a->engine_id < ri[i].engine_id ||
			    (a->engine_id == ri[i].engine_id && a->tp_rank <= ri[i].tp_rank))
				break;
			idx[j] = idx[j - 1];
		}
		idx[j] = i;
	}
	return m;
}

/* The end of the run of engine members that starts at idx[i]. */
static unsigned engine_run(const struct hc_rank_info *ri, const unsigned *idx, unsigned m, unsigned i)
{
	unsigned e = i + 1;

	while (e < m && ri[idx[e]].engine_id == ri[idx[i]].engine_id)
		e++;
	return e;
}

/* "engine 3: tp 2, ranks 0,1 (slots 4,5)", and the TP ranks not present. */
void hcp_engines_text(const struct hc_rank_info *ri, unsigned n, const char *indent)
{
	unsigned idx[HC_MAX_RANKS], m = engine_order(ri, n, idx);

	for (unsigned i = 0, e; i < m; i = e) {
		const struct hc_rank_info *first = &ri[idx[i]];
		unsigned missing = 0;

		e = engine_run(ri, idx, m, i);
		printf("%sengine %" PRId32 ": tp %" PRIu32 ", ranks ", indent, first->engine_id, first->tp_size);
		for (unsigned k = i; k < e; k++)
			printf("%s%" PRIu32, k > i ? "," : "", ri[idx[k]].tp_rank);
		printf(" (slots ");
		for (unsigned k = i; k < e; k++)
			printf("%s%" PRIu32, k > i ? "," : "", ri[idx[k]].slot);
		printf(")");
		for (uint32_t t = 0, k = i; t < first->tp_size; t++) {
			while (k < e && ri[idx[k]].tp_rank < t)
				k++;
			if (k < e && ri[idx[k]].tp_rank == t)
				continue;
			printf("%s%" PRIu32, missing++ ? "," : ", missing ", t);
		}
		printf("\n");
	}
}

struct json_object *hcp_engines_json(const struct hc_rank_info *ri, unsigned n)
{
	unsigned idx[HC_MAX_RANKS], m = engine_order(ri, n, idx);
	struct json_object *a = json_object_new_array();

	for (unsigned i = 0, e; i < m; i = e) {
		const struct hc_rank_info *first = &ri[idx[i]];
		struct json_object *x = json_object_new_object(), *tr = json_object_new_array(),
				   *sl = json_object_new_array();

		e = engine_run(ri, idx, m, i);
		for (unsigned k = i; k < e; k++) {
			json_object_array_add(tr, json_object_new_int64(ri[idx[k]].tp_rank));
			json_object_array_add(sl, json_object_new_int64(ri[idx[k]].slot));
		}
		json_object_object_add(x, "engine_id", json_object_new_int(first->engine_id));
		hcp_jadd_u64(x, "tp_size", first->tp_size);
		json_object_object_add(x, "tp_ranks", tr);
		json_object_object_add(x, "slots", sl);
		hcp_jadd_bool(x, "complete", e - i == first->tp_size);
		json_object_array_add(a, x);
	}
	return a;
}
