/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check.c - verify the invariants that tie the page table, the pin counters
 * and the rank table together.  None of them holds by construction across
 * processes that die at random, so tests (and later 'hicache-pool check')
 * run this after the dust settles.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "pool.h"

static void say(hc__check_fn report, void *arg, int *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void say(hc__check_fn report, void *arg, int *n, const char *fmt, ...)
{
	char line[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	(*n)++;
	if (report)
		report(arg, line);
}

/*
 * Returns the number of violations (0: all invariants hold), or a negative
 * errno.  Probing liveness recovers dead slots on the way, like any attach.
 */
int hc__pool_check(struct hc_pool *p, unsigned flags, hc__check_fn report, void *arg)
{
	int live[HC_MAX_RANKS], n = 0;

	if (p->readonly)
		return hc__err(EROFS, "check: needs a read-write attach to prove liveness");
	for (unsigned s = 0; s < p->g.max_ranks; s++) {
		int r = hc__rank_probe(p, s, NULL);
		live[s] = r == 1;
		if (r < 0)
			say(report, arg, &n, "rank slot %u: mutex unusable", s);
	}
	for (uint32_t i = 0; i < p->g.npages; i++) {
		uint64_t w = atomic_load(&p->pages[i].word);
		unsigned st = hc__w_state(w), owner = hc__w_owner(w);
		_Atomic uint16_t *row = hc__pin_row(p, i);
		unsigned pins = 0;

		if (st > HC_PAGE_FREEING) {
			say(report, arg, &n, "page %u: invalid state %u", i, st);
			continue;
		}
		if ((st == HC_PAGE_RESERVED || st == HC_PAGE_FREEING || st == HC_PAGE_QUARANTINE) &&
		    owner >= p->g.max_ranks) {
			say(report, arg, &n, "page %u: %s with owner slot %u out of range", i,
			    hc_page_state_name(st), owner);
			continue;
		}
		if (st == HC_PAGE_RESERVED && !live[owner])
			say(report, arg, &n, "page %u: RESERVED by slot %u, which is not live", i, owner);
		if (st == HC_PAGE_FREEING && !live[owner])
			say(report, arg, &n, "page %u: FREEING by slot %u, which is not live", i, owner);
		if (st == HC_PAGE_FREEING && (flags & HC_CHECK_QUIESCENT))
			say(report, arg, &n, "page %u: FREEING while quiescent", i);
		if (st == HC_PAGE_RESERVED) {
			uint32_t need = hc_page_needed(p, atomic_load(&p->pages[i].presence));
			if (hc__w_aux(w) & ~need)
				say(report, arg, &n, "page %u: fill mask 0x%x has shards outside 0x%x", i, hc__w_aux(w), need);
		}
		if ((st == HC_PAGE_FREE || st == HC_PAGE_READY) && hc__w_aux(w) != 0)
			say(report, arg, &n, "page %u: %s with aux bits 0x%x", i, hc_page_state_name(st), hc__w_aux(w));
		for (unsigned s = 0; s < p->g.max_ranks; s++) {
			unsigned c = atomic_load(&row[s]);
			pins += c;
			if (c && !live[s])
				say(report, arg, &n, "page %u: %u pin(s) held by slot %u, which is not live", i, c, s);
		}
		if (pins && st != HC_PAGE_READY && (flags & HC_CHECK_QUIESCENT))
			say(report, arg, &n, "page %u: %u pin(s) on a %s page", i, pins, hc_page_state_name(st));
	}
	return n;
}
