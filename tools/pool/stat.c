/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stat.c - hicache-pool stat: a pool's gauges, counters, latency and
 * tokens histograms, in text, JSON or Prometheus (tools/cli/stats.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pool.h"

const char hcp_stat_usage[] = "Usage: " HCP_PROG " stat NAME [--dir DIR | --socket PATH] [--json | --prometheus]\n"
			      "\n"
			      "Show pool NAME's gauges (pages by state, keyed, pinned and host-locked\n"
			      "pages, pages held by tickets, live ranks, engines, open tickets) and every\n"
			      "counter the ranks keep, summed over ranks, with the hit ratio.  The pool is\n"
			      "attached read-only: reading the stats never changes it, and live ranks are\n"
			      "the slots marked live, not proven (repair proves them).\n"
			      "\n"
			      "  --dir DIR       the pool's directory (default " HCP_DEFAULT_DIR ")\n" HCP_USAGE_SOCKET
			      "  --json          print one JSON object\n"
			      "  --prometheus    print the Prometheus text exposition format 0.0.4\n";

/* hits / lookup_keys, or -1 before the first lookup. */
static double hit_ratio(const struct hc_stats *st)
{
	uint64_t asked = st->counter[HC_CTR_lookup_keys];

	return asked ? (double)st->counter[HC_CTR_hits] / (double)asked : -1.0;
}

static void stat_line(const char *name, int wn, uint64_t v, int wv, const char *help)
{
	printf("  %-*s  %*" PRIu64 "  %s\n", wn, name, wv, v, help);
}

/* Aligned "name value help" lines: pages by state, gauges, counters. */
static void stat_text(const struct hc_pool_info *in, const struct hc_stats *st, const struct hc_cli_metric *g,
		      const struct hc_cli_metric *c)
{
	char name[32], help[32], val[32];
	int wn = (int)strlen("pages_quarantine"), wv = 5, len;
	double hr = hit_ratio(st);

	for (unsigned i = 0; i < HC_CLI_NGAUGES + HC_CTR__COUNT; i++) {
		const struct hc_cli_metric *m = i < HC_CLI_NGAUGES ? &g[i] : &c[i - HC_CLI_NGAUGES];

		if ((len = (int)strlen(m->name)) > wn)
			wn = len;
		if ((len = snprintf(val, sizeof(val), "%" PRIu64, m->value)) > wv)
			wv = len;
	}
	for (int s = 0; s < HC_PAGE__COUNT; s++)
		if ((len = snprintf(val, sizeof(val), "%" PRIu64, st->pages[s])) > wv)
			wv = len;

	printf("pool '%s' at %s: %" PRIu32 " pages\n", in->name, in->path, in->npages);
	for (int s = 0; s < HC_PAGE__COUNT; s++) {
		snprintf(name, sizeof(name), "pages_%s", hc_cli_state_keys[s]);
		snprintf(help, sizeof(help), "pages in state %s", hc_page_state_name((enum hc_page_state)s));
		stat_line(name, wn, st->pages[s], wv, help);
	}
	for (unsigned i = 0; i < HC_CLI_NGAUGES + HC_CTR__COUNT; i++) {
		const struct hc_cli_metric *m = i < HC_CLI_NGAUGES ? &g[i] : &c[i - HC_CLI_NGAUGES];

		stat_line(m->name, wn, m->value, wv, m->help);
	}
	if (hr < 0)
		printf("  %-*s  %*s  hits / lookup_keys (no lookups yet)\n", wn, "hit_ratio", wv, "-");
	else
		printf("  %-*s  %*.3f  hits / lookup_keys\n", wn, "hit_ratio", wv, hr);
	printf("service request latency, taken off the ring to answered (us; p50 and p99 are bucket bounds):\n");
	for (unsigned h = 0; h < HC_HIST__COUNT; h++) {
		const struct hc_hist *x = &st->hist[h];
		uint64_t p50 = hc_cli_hist_quantile_us(x, 0.5), p99 = hc_cli_hist_quantile_us(x, 0.99);
		char b50[24], b99[24];
		snprintf(b50, sizeof(b50), "<=%" PRIu64, p50);
		snprintf(b99, sizeof(b99), "<=%" PRIu64, p99);
		printf("  %-10s %8" PRIu64 " requests, mean %8.1f, p50 %9s, p99 %9s\n", hc_hist_name(h), x->count,
		       x->count ? (double)x->sum_us / (double)x->count : 0.0, x->count ? b50 : "-",
		       x->count ? b99 : "-");
	}
	printf("tokens per request by tier (l2: per lookup, its hit; l3: per prefetch, read from L3):\n");
	for (unsigned t = 0; t < HC_TIER__COUNT; t++) {
		const struct hc_hist *x = &st->tokens[t];
		printf("  %-10s %8" PRIu64 " requests, %12" PRIu64 " tokens, mean %10.1f\n", hc_tier_name(t), x->count,
		       x->sum, x->count ? (double)x->sum / (double)x->count : 0.0);
	}
}

/* {count, SUM, buckets: [{LT, count}...]} of one histogram. */
static struct json_object *hist_json(const struct hc_hist *h, const char *sum, const char *lt)
{
	struct json_object *k = json_object_new_object(), *b = json_object_new_array();

	hcp_jadd_u64(k, "count", h->count);
	hcp_jadd_u64(k, sum, h->sum);
	hcp_jadd_u64(k, "max", h->max);
	for (unsigned i = 0; i < HC_HIST_BUCKETS; i++) {
		struct json_object *e = json_object_new_object();
		uint64_t bound = hc_hist_bound_us(i);
		json_object_object_add(e, lt, bound == UINT64_MAX ? NULL : json_object_new_int64((int64_t)bound));
		hcp_jadd_u64(e, "count", h->bucket[i]);
		json_object_array_add(b, e);
	}
	json_object_object_add(k, "buckets", b);
	return k;
}

static struct json_object *stat_json(const struct hc_pool_info *in, const struct hc_stats *st,
				     const struct hc_cli_metric *g, const struct hc_cli_metric *c)
{
	struct json_object *o = hcp_json_new("hicache.pool-stat/1"), *x = json_object_new_object();
	double hr = hit_ratio(st);

	hcp_jadd_str(o, "name", in->name);
	hcp_jadd_str(o, "path", in->path);
	hcp_jadd_u64(o, "npages", in->npages);
	for (int s = 0; s < HC_PAGE__COUNT; s++)
		hcp_jadd_u64(x, hc_cli_state_keys[s], st->pages[s]);
	json_object_object_add(o, "pages", x);
	for (unsigned i = 0; i < HC_CLI_NGAUGES; i++)
		hcp_jadd_u64(o, g[i].name, g[i].value);
	x = json_object_new_object();
	for (unsigned i = 0; i < HC_CTR__COUNT; i++)
		hcp_jadd_u64(x, c[i].name, c[i].value);
	json_object_object_add(o, "counters", x);
	json_object_object_add(o, "hit_ratio", hr < 0 ? NULL : json_object_new_double(hr));
	x = json_object_new_object();
	for (unsigned h = 0; h < HC_HIST__COUNT; h++)
		json_object_object_add(x, hc_hist_name(h), hist_json(&st->hist[h], "sum_us", "lt_us"));
	json_object_object_add(o, "latency", x);
	x = json_object_new_object();
	for (unsigned t = 0; t < HC_TIER__COUNT; t++)
		json_object_object_add(x, hc_tier_name(t), hist_json(&st->tokens[t], "sum", "lt"));
	json_object_object_add(o, "tokens", x);
	return o;
}

int hcp_cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = {
		HCP_OPTION_DIR,  HCP_OPTION_SOCKET,
		HCP_OPTION_JSON, { "prometheus", no_argument, NULL, HCP_OPT_PROMETHEUS },
		HCP_OPTIONS_END,
	};
	struct hc_cli_metric g[HC_CLI_NGAUGES], ctr[HC_CTR__COUNT];
	struct hc_pool_info in;
	struct hcp_args va;
	struct hc_stats st;
	const char *name;
	hc_pool *p;
	int ret;

	if ((ret = hcp_parse_args(argc, argv, opts, hcp_stat_usage, &va, &name, NULL)) != HCP_GO)
		return ret;
	if (va.json && va.prometheus)
		return hcp_usage_error("both --json and --prometheus given: choose one format");
	/* READONLY: a scrape must never change the pool (no recovery at attach) */
	if (hcp_attach(name, va.dir, HC_ATTACH_READONLY, &p) < 0)
		return hcp_failure("%s", hcp_lib_error());
	ret = HC_CLI_EXIT_FAIL;
	if (hc_pool_info(p, &in, sizeof(in)) < 0 || hc_pool_stats(p, &st, sizeof(st)) < 0) {
		hcp_failure("%s", hcp_lib_error());
		goto out;
	}
	hc_cli_metrics(&st, g, ctr);
	if (va.json) {
		struct json_object *o = stat_json(&in, &st, g, ctr);

		if (hcp_print_json(o) == 0)
			ret = HC_CLI_EXIT_OK;
		json_object_put(o);
		goto out;
	}
	if (va.prometheus)
		hc_cli_prometheus(stdout, &in, &st);
	else
		stat_text(&in, &st, g, ctr);
	ret = HC_CLI_EXIT_OK;
out:
	hc_pool_detach(p);
	return ret;
}
