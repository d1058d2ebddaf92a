/* SPDX-License-Identifier: Apache-2.0 */
/*
 * top.c - hicache-pool top: a pool's stats live, with each counter's rate.
 */
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"

const char hcp_top_usage[] = "Usage: " HCP_PROG " top NAME [--dir DIR | --socket PATH] [--interval MS] [--count N]\n"
			     "\n"
			     "Show pool NAME's pages by state, holds and counters live, with each\n"
			     "counter's rate per second over the last interval; counters that have\n"
			     "not moved since the start are left out.  On a terminal the screen is\n"
			     "redrawn; otherwise each sample is printed after the last.  Reads the\n"
			     "pool read-only, as stat does.  Ctrl-C, or q and Enter, stops it.\n"
			     "\n"
			     "  --dir DIR       the pool's directory (default " HCP_DEFAULT_DIR ")\n" HCP_USAGE_SOCKET
			     "  --interval MS   between samples, 100..3600000 (default 1000)\n"
			     "  --count N       stop after N samples (default: until interrupted)\n";

static volatile sig_atomic_t top_stop;

static void top_signal(int sig)
{
	(void)sig;
	top_stop = 1;
}

/* Counter c's rate between two samples secs apart. */
static double rate(const struct hc_stats *st, const struct hc_stats *prev, unsigned c, double secs)
{
	return secs > 0 ? (double)(st->counter[c] - prev->counter[c]) / secs : 0.0;
}

/* One screen: pages by state, gauges, and the counters that moved. */
static void top_screen(const struct hc_pool_info *in, const struct hc_stats *st, const struct hc_stats *prev,
		       const struct hc_stats *first, double secs, int tty)
{
	struct hc_cli_metric g[HC_CLI_NGAUGES], c[HC_CTR__COUNT];
	char when[32];
	time_t now = time(NULL);

	hc_cli_metrics(st, g, c);
	strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
	if (tty)
		fputs("\033[H\033[2J", stdout);
	printf("hicache-pool top: pool '%s', %" PRIu32 " pages, %s (every %.1f s)\n", in->name, in->npages, when, secs);
	printf("pages:");
	for (int s = 0; s < HC_PAGE__COUNT; s++)
		printf("  %s %" PRIu64 " (%.0f%%)", hc_cli_state_keys[s], st->pages[s],
		       in->npages ? 100.0 * (double)st->pages[s] / in->npages : 0.0);
	printf("\n");
	for (unsigned i = 0; i < HC_CLI_NGAUGES; i++)
		printf("%s%s %" PRIu64, i % 5 ? "  " : (i ? "\n" : ""), g[i].name, g[i].value);
	printf("\nL3 bandwidth: backup %.1f MB/s, prefetch %.1f MB/s; tokens/s: %.0f from L2 hits, %.0f from L3\n",
	       rate(st, prev, HC_CTR_l3_backup_bytes, secs) / 1e6, rate(st, prev, HC_CTR_l3_prefetch_bytes, secs) / 1e6,
	       secs > 0 ? (double)(st->tokens[HC_TIER_l2].sum - prev->tokens[HC_TIER_l2].sum) / secs : 0.0,
	       secs > 0 ? (double)(st->tokens[HC_TIER_l3].sum - prev->tokens[HC_TIER_l3].sum) / secs : 0.0);
	printf("\n  %-24s %16s %14s\n", "counter", "total", "per second");
	for (unsigned i = 0; i < HC_CTR__COUNT; i++) {
		if (st->counter[i] == first->counter[i] && !st->counter[i])
			continue;
		printf("  %-24s %16" PRIu64 " %14.1f\n", c[i].name, st->counter[i], rate(st, prev, i, secs));
	}
	fflush(stdout);
}

int hcp_cmd_top(int argc, char **argv)
{
	static const struct option opts[] = {
		HCP_OPTION_DIR,
		HCP_OPTION_SOCKET,
		{ "interval", required_argument, NULL, HCP_OPT_INTERVAL },
		{ "count", required_argument, NULL, HCP_OPT_COUNT },
		HCP_OPTIONS_END,
	};
	struct hc_stats first, prev, st;
	struct hc_pool_info in;
	struct hcp_args va;
	const char *name;
	int ret, tty = isatty(1);
	hc_pool *p;

	if ((ret = hcp_parse_args(argc, argv, opts, hcp_top_usage, &va, &name, NULL)) != HCP_GO)
		return ret;
	if (!va.interval_ms)
		va.interval_ms = 1000;
	ret = HC_CLI_EXIT_OK;
	if (hcp_attach(name, va.dir, HC_ATTACH_READONLY, &p) < 0)
		return hcp_failure("%s", hcp_lib_error());
	signal(SIGINT, top_signal);
	signal(SIGTERM, top_signal);
	if (hc_pool_info(p, &in, sizeof(in)) < 0 || hc_pool_stats(p, &first, sizeof(first)) < 0) {
		ret = hcp_failure("%s", hcp_lib_error());
		goto out;
	}
	prev = first;
	for (uint32_t n = 0; !top_stop && (!va.count || n < va.count); n++) {
		struct pollfd pf = { .fd = 0, .events = POLLIN };
		char ch;
		/* a key press (q) on a terminal stops it; otherwise just the interval */
		if (poll(&pf, tty && isatty(0) ? 1 : 0, (int)va.interval_ms) > 0 && read(0, &ch, 1) == 1 && ch == 'q')
			break;
		if (hc_pool_stats(p, &st, sizeof(st)) < 0) {
			ret = hcp_failure("%s", hcp_lib_error());
			goto out;
		}
		top_screen(&in, &st, &prev, &first, va.interval_ms / 1000.0, tty);
		if (!tty)
			printf("\n");
		prev = st;
	}
out:
	hc_pool_detach(p);
	return ret;
}
