/* SPDX-License-Identifier: Apache-2.0 */
/*
 * report.c - hicache-bench replay's figures: the table on stdout, --json
 * (json-c), --csv (one row per interval of the timeline), --svg (a chart
 * of hit ratio by tier and of bandwidth over time, for a browser), and the
 * progress bar.  Request figures come from each engine's rank 0 (its ranks
 * all see the same hits); bytes from every rank; L3 traffic, latencies and
 * evictions from the pool's counters.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "../cli/cli.h"
#include "report.h"

struct totals {
	uint64_t requests, tok_total, tok_l1, tok_l2, tok_l3, pages, pages_l1, pages_l2, pages_l3, stored, nospace;
	uint64_t prefetches, prefetch_fails, load, store, checked, bad, load_ns, store_ns;
	int failed;
};

static void add_rank(struct totals *t, const struct hc_rp_rank_stats *s)
{
	if (s->tp_rank == 0) {
		t->requests += s->requests;
		t->tok_total += s->tok_total;
		t->tok_l1 += s->tok_l1;
		t->tok_l2 += s->tok_l2;
		t->tok_l3 += s->tok_l3;
		t->pages += s->pages;
		t->pages_l1 += s->pages_l1;
		t->pages_l2 += s->pages_l2;
		t->pages_l3 += s->pages_l3;
		t->stored += s->pages_stored;
		t->nospace += s->pages_nospace;
		t->prefetches += s->prefetches;
		t->prefetch_fails += s->prefetch_fails;
	}
	t->load += s->load_bytes;
	t->store += s->store_bytes;
	t->checked += s->checked_bytes;
	t->bad += s->bad_bytes;
	t->load_ns += s->load_ns;
	t->store_ns += s->store_ns;
	t->failed |= s->err != 0 && s->err != -ECANCELED; /* a rank stopped with the run is no failure of its own */
}

static void totals(const struct hc_rp_result *r, struct totals *t)
{
	memset(t, 0, sizeof(*t));
	for (unsigned i = 0; i < r->nranks; i++)
		add_rank(t, &r->ranks[i]);
}

void hc_rp_sample(struct hc_rp_result *res, const struct hc_rp_shared *sh, hc_pool *admin, double t)
{
	struct hc_rp_sample *s;
	struct totals tt = { 0 };
	struct hc_stats st;

	if (res->nsamples == res->cap_samples) {
		size_t cap = res->cap_samples ? 2 * res->cap_samples : 256;
		struct hc_rp_sample *x = realloc(res->samples, cap * sizeof(*x));
		if (!x)
			return; /* the timeline is shorter; the run goes on */
		res->samples = x;
		res->cap_samples = cap;
	}
	for (unsigned i = 0; i < res->o->tp * res->o->engines; i++)
		add_rank(&tt, &sh->st[i]); /* read while the ranks write: a monitor's figures */
	s = &res->samples[res->nsamples++];
	*s = (struct hc_rp_sample){ .t = t,
				    .served = tt.requests,
				    .tok_total = tt.tok_total,
				    .tok_l1 = tt.tok_l1,
				    .tok_l2 = tt.tok_l2,
				    .tok_l3 = tt.tok_l3,
				    .load_bytes = tt.load,
				    .store_bytes = tt.store };
	if (hc_pool_stats(admin, &st, sizeof(st)) == 0) {
		hc_rp_stats_since(&st, &res->base);
		s->l3_read = st.counter[HC_CTR_l3_prefetch_bytes];
		s->l3_write = st.counter[HC_CTR_l3_backup_bytes];
	}
}

static uint64_t less(uint64_t now, uint64_t base)
{
	return now > base ? now - base : 0; /* a counter never runs back; if one did, none is right */
}

static void hist_since(struct hc_hist *now, const struct hc_hist *base)
{
	for (unsigned b = 0; b < HC_HIST_BUCKETS; b++)
		now->bucket[b] = less(now->bucket[b], base->bucket[b]);
	now->count = less(now->count, base->count);
	now->sum = less(now->sum, base->sum);
}

void hc_rp_stats_since(struct hc_stats *now, const struct hc_stats *base)
{
	for (unsigned i = 0; i < HC_CTR_MAX; i++)
		now->counter[i] = less(now->counter[i], base->counter[i]);
	for (unsigned i = 0; i < HC_HIST_MAX; i++)
		hist_since(&now->hist[i], &base->hist[i]);
	for (unsigned i = 0; i < HC_TIER_MAX; i++)
		hist_since(&now->tokens[i], &base->tokens[i]);
}

static const char *pct(char *b, size_t n, uint64_t part, uint64_t whole)
{
	snprintf(b, n, "%5.1f%%", whole ? 100.0 * (double)part / (double)whole : 0.0);
	return b;
}

static const char *size(char *b, size_t n, uint64_t bytes)
{
	return hc_cli_format_size(bytes, b, n);
}

/* An upper bound of a quantile, as hicache-pool stat gives it
 * (hc_cli_hist_quantile_us: a bucket's bound, or the largest value). */
static const char *quantile_text(char *b, size_t n, const struct hc_hist *h, double share)
{
	snprintf(b, n, "%" PRIu64 " us", hc_cli_hist_quantile_us(h, share));
	return b;
}

/* JSON: null only when nothing was counted. */
static json_object *quantile_json(const struct hc_hist *h, double share)
{
	return h->count ? json_object_new_int64((int64_t)hc_cli_hist_quantile_us(h, share)) : NULL;
}

static double gbps(uint64_t bytes, double s)
{
	return s > 0 ? (double)bytes / s / 1e9 : 0;
}

static const char *const evict_names[] = { "clock", "lru" };
static const char *const pf_names[] = { "best_effort", "wait_complete", "timeout" };

void hc_rp_report_text(FILE *f, const struct hc_rp_result *r)
{
	const struct hc_rp_opts *o = r->o;
	const struct hc_rp_model *m = r->m;
	struct totals t;
	char a[32], b[32], c[32], d[32];
	uint64_t miss, backup = r->st.counter[HC_CTR_l3_backup_bytes],
		       prefetch = r->st.counter[HC_CTR_l3_prefetch_bytes];

	totals(r, &t);
	miss = t.tok_total - t.tok_l1 - t.tok_l2 - t.tok_l3;
	fprintf(f, "hicache-bench replay: %" PRIu64 " of %zu requests served in %.1f s (%.1f/s), from %s\n", t.requests,
		r->requests, r->seconds, r->seconds > 0 ? (double)t.requests / r->seconds : 0.0,
		o->trace ? o->trace : "the built-in workload");
	fprintf(f, "model %s (%s), layers x %g:", m->preset, m->model_id, m->scale);
	for (unsigned i = 0; i < m->ncomp; i++)
		fprintf(f, " %s %u of %u layers%s", m->names[i], m->comps[i].layers, m->full_layers[i],
			i + 1 < m->ncomp ? "," : ";");
	fprintf(f, " %u-token pages of %s\n", m->page_tokens, size(a, sizeof(a), r->envelope_bytes));
	fprintf(f, "%u engine%s of TP %u; L1 %s; L2 %" PRIu64 " pages (%s, %s eviction); L3 %s", o->engines,
		o->engines > 1 ? "s" : "", o->tp, o->l1_pages ? "on" : "off", r->pool_pages,
		size(b, sizeof(b), r->pool_pages * r->envelope_bytes), evict_names[o->evict], r->l3);
	if (strcmp(r->l3, "none"))
		fprintf(f, ", %s, prefetch %s", hc_cli_write_policies[o->write_policy], pf_names[o->prefetch]);
	fprintf(f, "%s\n\n", o->serial ? "; serial" : "");
	if (o->l1_pages)
		fprintf(f, "(L1: %u pages a rank)\n", o->l1_pages);

	fprintf(f, "tier        |   hit tokens |  share\n");
	fprintf(f, "------------+--------------+-------\n");
	fprintf(f, "L1 (GPU)    | %12" PRIu64 " | %s\n", t.tok_l1, pct(a, sizeof(a), t.tok_l1, t.tok_total));
	fprintf(f, "L2 (host)   | %12" PRIu64 " | %s\n", t.tok_l2, pct(a, sizeof(a), t.tok_l2, t.tok_total));
	fprintf(f, "L3          | %12" PRIu64 " | %s\n", t.tok_l3, pct(a, sizeof(a), t.tok_l3, t.tok_total));
	fprintf(f, "miss        | %12" PRIu64 " | %s\n", miss, pct(a, sizeof(a), miss, t.tok_total));
	fprintf(f, "total       | %12" PRIu64 " |\n", t.tok_total);
	fprintf(f, "prefill saved: %" PRIu64 " tokens (%s of the prompts)\n\n", t.tok_l1 + t.tok_l2 + t.tok_l3,
		pct(a, sizeof(a), t.tok_l1 + t.tok_l2 + t.tok_l3, t.tok_total));

	fprintf(f, "moved                  |      bytes | GB/s (run) | GB/s (copying)\n");
	fprintf(f, "-----------------------+------------+------------+---------------\n");
	fprintf(f, "L2 -> GPU (loads)      | %10s | %10.2f | %8.2f\n", size(a, sizeof(a), t.load),
		gbps(t.load, r->seconds), gbps(t.load, (double)t.load_ns / 1e9));
	fprintf(f, "GPU -> L2 (stores)     | %10s | %10.2f | %8.2f\n", size(b, sizeof(b), t.store),
		gbps(t.store, r->seconds), gbps(t.store, (double)t.store_ns / 1e9));
	fprintf(f, "L2 -> L3 (backups)     | %10s | %10.2f |\n", size(c, sizeof(c), backup), gbps(backup, r->seconds));
	fprintf(f, "L3 -> L2 (prefetches)  | %10s | %10.2f |\n", size(d, sizeof(d), prefetch),
		gbps(prefetch, r->seconds));
	fprintf(f, "checked: every byte loaded, %s, %" PRIu64 " bad\n\n", size(a, sizeof(a), t.checked), t.bad);

	if (strcmp(r->l3, "none")) {
		fprintf(f, "service latency |  count |       mean |     p50 <= |     p99 <=\n");
		fprintf(f, "----------------+--------+------------+------------+-----------\n");
		for (unsigned k = HC_HIST_backup; k <= HC_HIST_prefetch; k++) {
			const struct hc_hist *h = &r->st.hist[k];
			if (!h->count) {
				fprintf(f, "%-15s | %6d |          - |          - |          -\n", hc_hist_name(k), 0);
				continue;
			}
			fprintf(f, "%-15s | %6" PRIu64 " | %7.0f us | %10s | %10s\n", hc_hist_name(k), h->count,
				(double)h->sum_us / (double)h->count, quantile_text(a, sizeof(a), h, 0.5),
				quantile_text(b, sizeof(b), h, 0.99));
		}
		fprintf(f, "\n");
	}
	fprintf(f,
		"requests: %" PRIu64 " served; pages: %" PRIu64 " asked, %" PRIu64 " stored, %" PRIu64
		" not stored for want of room\n",
		t.requests, t.pages, t.stored, t.nospace);
	fprintf(f,
		"prefetches: %" PRIu64 " (%" PRIu64 " failed); L3 prefetch requests done %" PRIu64 ", partial %" PRIu64
		", failed %" PRIu64 ", timed out %" PRIu64 "; evictions: %" PRIu64 "\n",
		t.prefetches, t.prefetch_fails, r->st.counter[HC_CTR_req_done], r->st.counter[HC_CTR_req_partial],
		r->st.counter[HC_CTR_req_failed], r->st.counter[HC_CTR_req_timedout], r->st.counter[HC_CTR_evictions]);
	{
		const uint64_t *ctr = r->st.counter;
		uint64_t all = ctr[HC_CTR_l3_backup_failed_nospace] + ctr[HC_CTR_l3_backup_failed_access] +
			       ctr[HC_CTR_l3_backup_failed_io] + ctr[HC_CTR_l3_backup_failed_other];

		if (all)
			fprintf(f,
				"L3 page writes failed: %" PRIu64 " (no space %" PRIu64 ", access refused %" PRIu64
				", I/O error %" PRIu64 ", other %" PRIu64 "; the log names each)\n",
				all, ctr[HC_CTR_l3_backup_failed_nospace], ctr[HC_CTR_l3_backup_failed_access],
				ctr[HC_CTR_l3_backup_failed_io], ctr[HC_CTR_l3_backup_failed_other]);
	}
	if (r->have_ref)
		fprintf(f,
			"reference: L2 hit %" PRIu64 " of %" PRIu64 " pages (%s); simulated %" PRIu64 " of %" PRIu64
			" (%s): %s\n",
			t.pages_l2, t.pages, pct(a, sizeof(a), t.pages_l2, t.pages), r->ref.hit_pages, r->ref.pages,
			pct(b, sizeof(b), r->ref.hit_pages, r->ref.pages),
			t.pages_l2 == r->ref.hit_pages && t.pages == r->ref.pages ? "exact match" : "MISMATCH");
}

int hc_rp_result_bad(const struct hc_rp_result *r)
{
	struct totals t;

	totals(r, &t);
	return t.failed || t.bad || (r->have_ref && (t.pages_l2 != r->ref.hit_pages || t.pages != r->ref.pages));
}

void hc_rp_result_free(struct hc_rp_result *r)
{
	free(r->samples);
	r->samples = NULL;
	r->nsamples = r->cap_samples = 0;
}

/* ---- JSON */

static void put_u64(json_object *o, const char *k, uint64_t v)
{
	json_object_object_add(o, k, json_object_new_int64((int64_t)v));
}

static void put_dbl(json_object *o, const char *k, double v)
{
	json_object_object_add(o, k, json_object_new_double(v));
}

static void put_str(json_object *o, const char *k, const char *v)
{
	json_object_object_add(o, k, json_object_new_string(v));
}

int hc_rp_report_json(const char *path, const struct hc_rp_result *r)
{
	const struct hc_rp_opts *o = r->o;
	json_object *root = json_object_new_object(), *x, *comps;
	struct totals t;
	int ret = 0;

	if (!root)
		return hc_cli_fail(ENOMEM, "no memory");
	totals(r, &t);
	/* first, so a script checks it before it reads the rest; a change that
	 * would break one bumps the number (hicache-bench-replay(1), JSON OUTPUT) */
	put_str(root, "schema", "hicache.replay/1");
	x = json_object_new_object();
	put_str(x, "source", o->trace ? o->trace : "built-in");
	put_u64(x, "requests", r->requests);
	put_u64(x, "served", t.requests);
	put_u64(x, "prompt_tokens", t.tok_total);
	put_u64(x, "pages", t.pages);
	put_u64(x, "distinct_pages", r->distinct_pages);
	json_object_object_add(root, "workload", x);
	x = json_object_new_object();
	put_str(x, "preset", r->m->preset);
	put_str(x, "model_id", r->m->model_id);
	put_dbl(x, "scale", r->m->scale);
	put_u64(x, "page_tokens", r->m->page_tokens);
	put_u64(x, "page_bytes", r->envelope_bytes);
	comps = json_object_new_array();
	for (unsigned i = 0; i < r->m->ncomp; i++) {
		json_object *c = json_object_new_object();
		put_str(c, "name", r->m->names[i]);
		put_u64(c, "layers", r->m->comps[i].layers);
		put_u64(c, "model_layers", r->m->full_layers[i]);
		json_object_array_add(comps, c);
	}
	json_object_object_add(x, "components", comps);
	json_object_object_add(root, "model", x);
	x = json_object_new_object();
	put_u64(x, "tp", o->tp);
	put_u64(x, "engines", o->engines);
	put_u64(x, "l1_pages", o->l1_pages);
	put_u64(x, "pool_pages", r->pool_pages);
	put_str(x, "eviction", evict_names[o->evict]);
	put_str(x, "l3", r->l3);
	put_str(x, "write_policy", hc_cli_write_policies[o->write_policy]);
	put_str(x, "prefetch", pf_names[o->prefetch]);
	json_object_object_add(x, "serial", json_object_new_boolean(o->serial));
	put_dbl(x, "speedup", o->speedup);
	json_object_object_add(root, "setup", x);
	put_dbl(root, "seconds", r->seconds);
	x = json_object_new_object();
	put_u64(x, "total", t.tok_total);
	put_u64(x, "l1", t.tok_l1);
	put_u64(x, "l2", t.tok_l2);
	put_u64(x, "l3", t.tok_l3);
	put_u64(x, "miss", t.tok_total - t.tok_l1 - t.tok_l2 - t.tok_l3);
	put_u64(x, "saved", t.tok_l1 + t.tok_l2 + t.tok_l3);
	json_object_object_add(root, "tokens", x);
	x = json_object_new_object();
	put_u64(x, "load", t.load);
	put_u64(x, "store", t.store);
	put_u64(x, "backup", r->st.counter[HC_CTR_l3_backup_bytes]);
	put_u64(x, "prefetch", r->st.counter[HC_CTR_l3_prefetch_bytes]);
	put_u64(x, "checked", t.checked);
	put_u64(x, "bad", t.bad);
	json_object_object_add(root, "bytes", x);
	x = json_object_new_object();
	for (unsigned k = HC_HIST_backup; k <= HC_HIST_prefetch; k++) {
		const struct hc_hist *h = &r->st.hist[k];
		json_object *l = json_object_new_object();
		put_u64(l, "count", h->count);
		put_dbl(l, "mean", h->count ? (double)h->sum_us / (double)h->count : 0.0);
		json_object_object_add(l, "p50_le", quantile_json(h, 0.5));
		json_object_object_add(l, "p99_le", quantile_json(h, 0.99));
		json_object_object_add(x, hc_hist_name(k), l);
	}
	json_object_object_add(root, "latency_us", x);
	x = json_object_new_object();
	put_u64(x, "served", t.requests);
	put_u64(x, "pages_stored", t.stored);
	put_u64(x, "pages_not_stored", t.nospace);
	put_u64(x, "prefetches", t.prefetches);
	put_u64(x, "prefetch_failures", t.prefetch_fails);
	put_u64(x, "l3_done", r->st.counter[HC_CTR_req_done]);
	put_u64(x, "l3_partial", r->st.counter[HC_CTR_req_partial]);
	put_u64(x, "l3_failed", r->st.counter[HC_CTR_req_failed]);
	put_u64(x, "l3_timed_out", r->st.counter[HC_CTR_req_timedout]);
	put_u64(x, "evictions", r->st.counter[HC_CTR_evictions]);
	put_u64(x, "l3_write_fail_nospace", r->st.counter[HC_CTR_l3_backup_failed_nospace]);
	put_u64(x, "l3_write_fail_access", r->st.counter[HC_CTR_l3_backup_failed_access]);
	put_u64(x, "l3_write_fail_io", r->st.counter[HC_CTR_l3_backup_failed_io]);
	put_u64(x, "l3_write_fail_other", r->st.counter[HC_CTR_l3_backup_failed_other]);
	json_object_object_add(root, "outcomes", x);
	if (r->have_ref) {
		x = json_object_new_object();
		put_u64(x, "pages", r->ref.pages);
		put_u64(x, "hit_pages", r->ref.hit_pages);
		put_u64(x, "measured_hit_pages", t.pages_l2);
		json_object_object_add(
			x, "match", json_object_new_boolean(t.pages_l2 == r->ref.hit_pages && t.pages == r->ref.pages));
		json_object_object_add(root, "reference", x);
	}
	if (json_object_to_file_ext(path, root, JSON_C_TO_STRING_PRETTY) < 0)
		ret = hc_cli_fail(EIO, "cannot write it: %s", json_util_get_last_err());
	json_object_put(root);
	return ret;
}

/* ---- the timeline */

/* A figure of each interval between samples: a counter's growth as a share
 * of another's (a hit ratio), or per second (a bandwidth, GB/s).  The CSV
 * writes them in this order; the chart draws each in its panel. */
struct series {
	const char *name, *color;
	size_t field, of; /* offsetof in struct hc_rp_sample; of 0: per second */
	int panel;        /* 0: hit ratios, 1: bandwidths */
};

#define S(f) offsetof(struct hc_rp_sample, f)
static const struct series lines[] = {
	{ "L1 hit", "#2ca02c", S(tok_l1), S(tok_total), 0 },  { "L2 hit", "#1f77b4", S(tok_l2), S(tok_total), 0 },
	{ "L3 hit", "#ff7f0e", S(tok_l3), S(tok_total), 0 },  { "L2->GPU load", "#1f77b4", S(load_bytes), 0, 1 },
	{ "GPU->L2 store", "#9467bd", S(store_bytes), 0, 1 }, { "L3->L2 prefetch", "#ff7f0e", S(l3_read), 0, 1 },
	{ "L2->L3 backup", "#d62728", S(l3_write), 0, 1 },
};
#undef S
#define NLINES (sizeof(lines) / sizeof(lines[0]))

static uint64_t grew(const struct hc_rp_sample *a, const struct hc_rp_sample *b, size_t field)
{
	uint64_t x, y;

	memcpy(&x, (const char *)a + field, sizeof(x));
	memcpy(&y, (const char *)b + field, sizeof(y));
	return y - x;
}

static double value(const struct series *s, const struct hc_rp_sample *a, const struct hc_rp_sample *b)
{
	uint64_t d = grew(a, b, s->field), whole;

	if (!s->of)
		return gbps(d, b->t - a->t);
	whole = grew(a, b, s->of);
	return whole ? (double)d / (double)whole : 0;
}

int hc_rp_report_csv(const char *path, const struct hc_rp_result *r)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return hc_cli_fail(errno, "cannot write it: %s", strerror(errno));
	fprintf(f, "t_s,requests,tokens,l1_tokens,l2_tokens,l3_tokens,miss_tokens,l1_ratio,l2_ratio,l3_ratio,"
		   "load_gbps,store_gbps,l3_read_gbps,l3_write_gbps\n");
	for (size_t i = 1; i < r->nsamples; i++) {
		const struct hc_rp_sample *a = &r->samples[i - 1], *b = &r->samples[i];
		uint64_t tok = b->tok_total - a->tok_total, l1 = b->tok_l1 - a->tok_l1, l2 = b->tok_l2 - a->tok_l2,
			 l3 = b->tok_l3 - a->tok_l3;
		fprintf(f, "%.2f,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, b->t,
			b->served - a->served, tok, l1, l2, l3, tok - l1 - l2 - l3);
		for (size_t k = 0; k < NLINES; k++)
			fprintf(f, lines[k].of ? ",%.4f" : ",%.3f", value(&lines[k], a, b));
		fprintf(f, "\n");
	}
	if (fclose(f) != 0)
		return hc_cli_fail(EIO, "cannot write it");
	return 0;
}

/* One polyline of a panel: s over the samples, in [0, ymax]. */
static void svg_line(FILE *f, const struct hc_rp_result *r, double x0, double y0, double w, double h, double ymax,
		     const struct series *s)
{
	double tmax = r->nsamples ? r->samples[r->nsamples - 1].t : 1;

	fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", s->color);
	for (size_t i = 1; i < r->nsamples; i++) {
		double v = value(s, &r->samples[i - 1], &r->samples[i]);
		v = v > ymax ? ymax : v;
		fprintf(f, "%.1f,%.1f ", x0 + w * r->samples[i].t / (tmax > 0 ? tmax : 1), y0 + h - h * v / ymax);
	}
	fprintf(f, "\"/>\n");
}

/* A round step (1, 2 or 5 times a power of ten) that cuts range into at
 * most want parts, and the decimals its labels need. */
static double nice_step(double range, int want, int *decimals)
{
	double raw = range > 0 ? range / want : 1, mag = pow(10, floor(log10(raw))), norm = raw / mag;
	double step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
	int d = (int)-floor(log10(step) + 1e-9);

	*decimals = d > 0 ? d : 0;
	return step;
}

/* The legend of panel p at its top right: a sample of each line, named. */
static void svg_legend(FILE *f, int p, double right, double top)
{
	const double row = 16, wide = 150;
	unsigned n = 0, i = 0;

	for (size_t k = 0; k < NLINES; k++)
		n += lines[k].panel == p;
	fprintf(f,
		"<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"white\" fill-opacity=\"0.85\" "
		"stroke=\"#bbb\"/>\n",
		right - wide - 8, top + 6, wide, row * n + 8);
	for (size_t k = 0; k < NLINES; k++) {
		double y = top + 6 + 4 + row * i + row / 2;
		if (lines[k].panel != p)
			continue;
		fprintf(f,
			"<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"/>\n",
			right - wide, y, right - wide + 24, y, lines[k].color);
		fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">%s</text>\n", right - wide + 30, y + 4, lines[k].name);
		i++;
	}
}

int hc_rp_report_svg(const char *path, const struct hc_rp_result *r)
{
	const double W = 900, PW = 760, PH = 200, X0 = 80, Y0[2] = { 58, 338 };
	double tmax = r->nsamples ? r->samples[r->nsamples - 1].t : 0, bmax = 0, tstep;
	int tdec;
	FILE *f = fopen(path, "w");

	if (!f)
		return hc_cli_fail(errno, "cannot write it: %s", strerror(errno));
	for (size_t i = 1; i < r->nsamples; i++)
		for (size_t k = 0; k < NLINES; k++) {
			double v = lines[k].panel ? value(&lines[k], &r->samples[i - 1], &r->samples[i]) : 0;
			bmax = v > bmax ? v : bmax;
		}
	tstep = nice_step(tmax, 8, &tdec);
	fprintf(f,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"620\" font-family=\"sans-serif\" "
		"font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
		W);
	fprintf(f,
		"<text x=\"%.0f\" y=\"20\" font-size=\"14\">hicache-bench replay: %s, %s, TP %u x %u, %zu requests</text>\n",
		X0, r->m->preset, r->o->trace ? "trace" : "built-in workload", r->o->tp, r->o->engines, r->requests);
	for (int p = 0; p < 2; p++) {
		int ydec;
		/* the hit ratio in quarters of 100%; the bandwidth up to a round
		 * step above its peak */
		double ystep = p ? nice_step(bmax > 0 ? bmax : 0.1, 5, &ydec) : 25, ymax;
		if (!p)
			ydec = 0;
		ymax = p ? ystep * ceil((bmax > 0 ? bmax : 0.1) / ystep) : 100;
		fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", X0, Y0[p] - 8,
			p ? "bandwidth, GB/s (per interval)" : "hit ratio by tier, % of prompt tokens (per interval)");
		for (double y = 0; y <= ymax + ystep / 1000; y += ystep) {
			double yy = Y0[p] + PH - PH * y / ymax;
			fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", X0,
				yy, X0 + PW, yy);
			fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#444\"/>\n", X0 - 4,
				yy, X0, yy);
			fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.*f%s</text>\n", X0 - 7, yy + 4,
				ydec, y, p ? "" : "%");
		}
		for (double t = 0; tmax > 0 && t <= tmax + tstep / 1000; t += tstep) {
			double xx = X0 + PW * t / tmax;
			fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#e4e4e4\"/>\n", xx,
				Y0[p], xx, Y0[p] + PH);
			fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#444\"/>\n", xx,
				Y0[p] + PH, xx, Y0[p] + PH + 4);
			fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.*f</text>\n", xx,
				Y0[p] + PH + 17, tdec, t);
		}
		fprintf(f,
			"<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">time since the first request, s</text>\n",
			X0 + PW / 2, Y0[p] + PH + 34);
		fprintf(f,
			"<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#444\"/>\n",
			X0, Y0[p], PW, PH);
		for (size_t k = 0; k < NLINES; k++)
			if (lines[k].panel == p)
				svg_line(f, r, X0, Y0[p], PW, PH, p ? ymax : 1, &lines[k]);
		svg_legend(f, p, X0 + PW, Y0[p]);
	}
	fprintf(f, "</svg>\n");
	if (fclose(f) != 0)
		return hc_cli_fail(EIO, "cannot write it");
	return 0;
}
