/* SPDX-License-Identifier: Apache-2.0 */
/*
 * report.h - what hicache-bench replay reports (report.c): the figures of
 * a run as a table, as JSON, a per-interval timeline as CSV, and a chart
 * of hit ratio by tier and bandwidth over time as SVG; and the progress
 * bar while it runs.
 */
#ifndef HC_TOOLS_REPLAY_REPORT_H
#define HC_TOOLS_REPLAY_REPORT_H

#include <stdio.h>

#include "replay.h"

struct hc_rp_sample {
	double t; /* seconds from the start */
	uint64_t served;
	uint64_t tok_total, tok_l1, tok_l2, tok_l3; /* summed over engines */
	uint64_t load_bytes, store_bytes;           /* summed over ranks */
	uint64_t l3_read, l3_write;                 /* the service's */
};

struct hc_rp_result {
	const struct hc_rp_opts *o;
	const struct hc_rp_model *m;
	const struct hc_rp_workload *w;
	size_t requests;
	uint64_t distinct_pages, pool_pages, envelope_bytes;
	uint32_t max_pages;
	char l3[4096];
	double seconds;
	struct hc_rp_rank_stats ranks[HC_RP_MAX_RANKS];
	unsigned nranks;
	struct hc_stats base; /* the pool's counters when the run started (--pool: its past) */
	struct hc_stats st;   /* this run's: counters and histograms less base, gauges at the end */
	int have_ref;
	struct hc_rp_refsim ref;
	struct hc_rp_sample *samples;
	size_t nsamples, cap_samples;
};

/* now's counters and histograms less base's: what a run did in a pool
 * that has a past (gauges, such as pages by state, are left as they are). */
void hc_rp_stats_since(struct hc_stats *now, const struct hc_stats *base);
/* A point of the timeline, from the ranks' rows and the pool's counters. */
void hc_rp_sample(struct hc_rp_result *res, const struct hc_rp_shared *sh, hc_pool *admin, double t);
void hc_rp_report_text(FILE *f, const struct hc_rp_result *res);
int hc_rp_report_json(const char *path, const struct hc_rp_result *res);
int hc_rp_report_csv(const char *path, const struct hc_rp_result *res);
int hc_rp_report_svg(const char *path, const struct hc_rp_result *res);
/* A rank failed, a byte did not check out, or the reference disagrees. */
int hc_rp_result_bad(const struct hc_rp_result *res);
void hc_rp_result_free(struct hc_rp_result *res);

#endif /* HC_TOOLS_REPLAY_REPORT_H */
