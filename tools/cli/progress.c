/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress.c - how a long step goes, on stderr, for a person: on a
 * terminal a bar redrawn in place (at most ten times a second); elsewhere
 * (a log, a pipe, a unit's journal) a line every HICACHE_PROGRESS_SECONDS
 * (10 by default), and the phase's last once a line was printed for it, so
 * a short step says nothing and a long one is never silent (0: a line for
 * every step).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define DEFAULT_EVERY_S 10
#define REDRAW_S        0.1

double hc_cli_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void hc_cli_progress_init(struct hc_cli_progress *p, FILE *f, const char *who, int mode)
{
	const char *e = getenv("HICACHE_PROGRESS_SECONDS");
	char *end;
	double every = e && *e ? strtod(e, &end) : DEFAULT_EVERY_S;

	memset(p, 0, sizeof(*p));
	p->f = f;
	p->who = who;
	p->on = mode != 0;
	p->tty = mode < 0 ? isatty(fileno(f)) : mode == 1;
	p->every = e && *e && (*end || every < 0) ? DEFAULT_EVERY_S : every; /* a bad value: the default */
}

/* "3.0 GiB" for bytes, else the count as is. */
static const char *amount(char *b, size_t n, uint64_t v, const char *unit)
{
	if (!strcmp(unit, "bytes"))
		return hc_cli_format_size(v, b, n);
	snprintf(b, n, "%" PRIu64, v);
	return b;
}

void hc_cli_progress_show(struct hc_cli_progress *p, const char *phase, uint64_t done, uint64_t total, const char *unit)
{
	double now = hc_cli_now(), t, rate;
	int last = done >= total;
	const char *noun = strcmp(unit, "bytes") ? unit : ""; /* a size says its unit */
	char a[32], b[32], eta[32] = "";

	if (!p->on)
		return;
	if (strncmp(p->phase, phase, sizeof(p->phase) - 1) || !p->t0) { /* a new phase */
		snprintf(p->phase, sizeof(p->phase), "%s", phase);
		p->t0 = p->shown = now;
		p->said = 0;
	}
	t = now - p->t0;
	rate = t > 0 ? (double)done / t : 0;
	if (!last && rate > 0)
		snprintf(eta, sizeof(eta), ", ETA %.0f s", (double)(total - done) / rate);
	if (p->tty) {
		char bar[31];
		unsigned fill = total ? (unsigned)(30 * (done < total ? done : total) / total) : 30;
		if (!last && now - p->shown < REDRAW_S && p->drawn)
			return;
		memset(bar, '#', fill);
		memset(bar + fill, '.', 30 - fill);
		bar[30] = '\0';
		fprintf(p->f, "\r%s: %s [%s] %s of %s%s%s%s   ", p->who, phase, bar, amount(a, sizeof(a), done, unit),
			amount(b, sizeof(b), total, unit), *noun ? " " : "", noun, eta);
		p->drawn = 1;
		p->shown = now;
		if (last)
			hc_cli_progress_clear(p);
		fflush(p->f);
		return;
	}
	if (p->every > 0 && (last ? !p->said : now - p->shown < p->every))
		return; /* a short phase says nothing; a long one, every so often and its end */
	fprintf(p->f, "%s: %s %s of %s%s%s (%.0f%%), %.0f s%s\n", p->who, phase, amount(a, sizeof(a), done, unit),
		amount(b, sizeof(b), total, unit), *noun ? " " : "", noun,
		total ? 100.0 * (double)done / (double)total : 100.0, t, eta);
	fflush(p->f);
	p->shown = now;
	p->said = 1;
}

void hc_cli_progress_clear(struct hc_cli_progress *p)
{
	if (p->tty && p->drawn) {
		fprintf(p->f, "\r%*s\r", 110, "");
		fflush(p->f);
		p->drawn = 0;
	}
}

void hc_cli_progress_pool(void *arg, const char *phase, uint64_t done, uint64_t total)
{
	struct hc_cli_progress *p = arg;

	hc_cli_progress_show(p, !strcmp(phase, "allocate") ? "allocating the pool" : "populating the page tables", done,
			     total, "bytes");
}
