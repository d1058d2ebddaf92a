/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.c - a pool's counters and gauges as the tools show them: the
 * gauge table, and the Prometheus text exposition, shared by hicache-pool
 * stat and hicached's /metrics.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The gauges of struct hc_stats, besides pages by state: X(name, field, help). */
#define STAT_GAUGES(X)                                                                                                 \
	X(keyed_pages, keyed, "pages in the key index")                                                                \
	X(pinned_pages, pinned_pages, "pages pinned by at least one rank")                                             \
	X(pins_held, pin_count, "pins held, summed over pages")                                                        \
	X(locked_pages, locked_pages, "pages host-locked by at least one rank")                                        \
	X(locks_held, lock_count, "host locks held, summed over pages")                                                \
	X(ticket_pages, ticket_pages, "pages held by at least one ticket")                                             \
	X(live_ranks, live_ranks, "rank slots marked live")                                                            \
	X(engines, engines, "engines with a live rank")                                                                \
	X(open_tickets, open_tickets, "tickets being built, open or being dropped")                                    \
	X(service_jobs_queued, svc_jobs_queued, "transfer jobs waiting for a service worker")                          \
	X(service_jobs_running, svc_jobs_running, "transfer jobs the service's workers run")                           \
	X(stage_read_pages, stage_read_pages, "buffer_only: pages staging reads")                                      \
	X(stage_write_pages, stage_write_pages, "buffer_only: pages granted to writes")                                \
	X(stage_reads_waiting, stage_parked_reads, "buffer_only: prefetches waiting for read staging now")             \
	X(stage_writes_waiting, stage_parked_writes, "buffer_only: write grants waiting for the write window now")

enum {
#define X(name, field, help) GAUGE_##name,
	STAT_GAUGES(X)
#undef X
		NGAUGES_
};
_Static_assert(NGAUGES_ == HC_CLI_NGAUGES, "cli.h counts the gauges");

const char *const hc_cli_state_keys[] = { "free", "reserved", "ready", "quarantine", "freeing" };
static_assert(sizeof(hc_cli_state_keys) / sizeof(hc_cli_state_keys[0]) == HC_PAGE__COUNT, "a key per page state");

void hc_cli_metrics(const struct hc_stats *st, struct hc_cli_metric *g, struct hc_cli_metric *c)
{
	unsigned i = 0;

#define X(name, field, help) g[i++] = (struct hc_cli_metric){ #name, help, st->field };
	STAT_GAUGES(X)
#undef X
	for (unsigned k = 0; k < HC_CTR__COUNT; k++)
		c[k] = (struct hc_cli_metric){ hc_counter_name(k), hc_counter_help(k), st->counter[k] };
}

/* # HELP and # TYPE of one metric family; HELP escapes '\\' and newlines. */
void hc_cli_prom_family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP hicache_%s ", name);
	for (const char *h = help; *h; h++) {
		if (*h == '\\' || *h == '\n')
			fputc('\\', f);
		fputc(*h == '\n' ? 'n' : *h, f);
	}
	fprintf(f, "\n# TYPE hicache_%s %s\n", name, type);
}

uint64_t hc_cli_hist_quantile_us(const struct hc_hist *h, double q)
{
	uint64_t seen = 0;

	for (unsigned b = 0; b < HC_HIST_BUCKETS; b++) {
		seen += h->bucket[b];
		if (h->count && (double)seen >= q * (double)h->count) {
			uint64_t bound = hc_hist_bound_us(b);
			/* the last bucket has no bound: the largest value is one */
			return bound == UINT64_MAX || h->max < bound ? h->max : bound;
		}
	}
	return 0;
}

/* Pool names are [A-Za-z0-9_.-] (hc_pool_name_valid): no label escaping needed. */
/* v / div as an exact decimal (div 1 or 1000000): %g would print
 * 4194304 us as 4.1943 s, a bound below the true one. */
static const char *exact(char *b, size_t n, uint64_t v, uint64_t div)
{
	if (div == 1)
		snprintf(b, n, "%" PRIu64, v);
	else
		snprintf(b, n, "%" PRIu64 ".%06" PRIu64, v / div, v % div);
	return b;
}

/* One histogram's _bucket, _sum and _count samples, with label key=val;
 * bounds and the sum are divided by div (1000000: microseconds as
 * seconds; 1: as they are). */
static void prom_hist(FILE *f, const char *family, const char *pool, const char *key, const char *val,
		      const struct hc_hist *x, uint64_t div)
{
	uint64_t cum = 0;
	char b[48];

	for (unsigned i = 0; i < HC_HIST_BUCKETS; i++) {
		uint64_t bound = hc_hist_bound_us(i);
		cum += x->bucket[i];
		fprintf(f, "hicache_%s_bucket{pool=\"%s\",%s=\"%s\",le=\"%s\"} %" PRIu64 "\n", family, pool, key, val,
			bound == UINT64_MAX ? "+Inf" : exact(b, sizeof(b), bound, div), cum);
	}
	fprintf(f, "hicache_%s_sum{pool=\"%s\",%s=\"%s\"} %s\n", family, pool, key, val,
		exact(b, sizeof(b), x->sum, div));
	fprintf(f, "hicache_%s_count{pool=\"%s\",%s=\"%s\"} %" PRIu64 "\n", family, pool, key, val, x->count);
}

void hc_cli_prometheus(FILE *f, const struct hc_pool_info *in, const struct hc_stats *st)
{
	struct hc_cli_metric g[HC_CLI_NGAUGES], c[HC_CTR__COUNT];
	char name[64];

	hc_cli_metrics(st, g, c);
	hc_cli_prom_family(f, "build_info", "gauge", "1, labelled with the version of the library that read the pool");
	fprintf(f, "hicache_build_info{pool=\"%s\",version=\"%s\"} 1\n", in->name, hc_version());
	hc_cli_prom_family(f, "pool_created_time_seconds", "gauge",
			   "when the pool was created, in seconds since the epoch");
	fprintf(f, "hicache_pool_created_time_seconds{pool=\"%s\"} %.3f\n", in->name,
		(double)in->created_unix_ns / 1e9);
	hc_cli_prom_family(f, "pool_capacity_bytes", "gauge",
			   "the bytes of the pool's envelopes: pages times envelope size");
	fprintf(f, "hicache_pool_capacity_bytes{pool=\"%s\"} %" PRIu64 "\n", in->name,
		(uint64_t)in->npages * in->envelope_bytes);
	hc_cli_prom_family(f, "pool_bytes", "gauge",
			   "the bytes of the pool's envelopes by page state; they sum to the capacity");
	for (int s = 0; s < HC_PAGE__COUNT; s++)
		fprintf(f, "hicache_pool_bytes{pool=\"%s\",state=\"%s\"} %" PRIu64 "\n", in->name, hc_cli_state_keys[s],
			st->pages[s] * in->envelope_bytes);
	hc_cli_prom_family(f, "pages", "gauge", "pages by state");
	for (int s = 0; s < HC_PAGE__COUNT; s++)
		fprintf(f, "hicache_pages{pool=\"%s\",state=\"%s\"} %" PRIu64 "\n", in->name, hc_cli_state_keys[s],
			st->pages[s]);
	for (unsigned i = 0; i < HC_CLI_NGAUGES; i++) {
		hc_cli_prom_family(f, g[i].name, "gauge", g[i].help);
		fprintf(f, "hicache_%s{pool=\"%s\"} %" PRIu64 "\n", g[i].name, in->name, g[i].value);
	}
	for (unsigned i = 0; i < HC_CTR__COUNT; i++) {
		snprintf(name, sizeof(name), "%s_total", c[i].name);
		hc_cli_prom_family(f, name, "counter", c[i].help);
		fprintf(f, "hicache_%s{pool=\"%s\"} %" PRIu64 "\n", name, in->name, c[i].value);
	}
	hc_cli_prom_family(f, "request_seconds", "histogram",
			   "the service's requests by kind, from taking one off its rank's ring to posting its answer");
	for (unsigned h = 0; h < HC_HIST__COUNT; h++)
		prom_hist(f, "request_seconds", in->name, "kind", hc_hist_name(h), &st->hist[h], 1000000);
	hc_cli_prom_family(
		f, "request_tokens", "histogram",
		"tokens per request by the tier that served them: l2, a lookup's hit; l3, what a prefetch read from L3");
	for (unsigned t = 0; t < HC_TIER__COUNT; t++)
		prom_hist(f, "request_tokens", in->name, "tier", hc_tier_name(t), &st->tokens[t], 1);
}
