/* SPDX-License-Identifier: Apache-2.0 */
/*
 * freemap.c - where the FREE pages are, so an allocation finds one in a
 * few reads whatever the pool's size and occupancy; and, with the same
 * code, where the quarantined pages are, so an allocation finds one whose
 * grace ran out before it evicts anything (the quarantine map, p->qm).
 *
 * Shape.  Level 0 has a bit per page: "this page may be FREE".  Level k+1
 * has a bit per word of level k: "that word may have a bit set".  The top
 * level is one word (4 M pages: 65536, 1024, 16 and 1 words).  A search
 * reads one word a level on its way down, and skips a run of empty words
 * by the level above.
 *
 * A hint, never the truth: the page word is (layout.h).  An allocator
 * takes a page only by its CAS FREE -> RESERVED, so a bit set for a page
 * that is not FREE costs one look; a FREE page without its bit is out of
 * sight, never lost: every recovery's sweep sets the bits of the FREE
 * pages again (hc__fm_heal), and an allocator that finds nothing here,
 * nothing to evict, looks at the whole page table (pages.c).
 *
 * THE BIT PROTOCOL (every step seq_cst).
 *   publisher, after it stores FREE to a page's word (E):
 *     (F) set the page's bit (fetch_or); then each level's summary bit
 *         above: load it, stop if it is set, else set it.
 *   claimer (hc__fm_claim):
 *     (G) fetch_and the page's bit away: the claimer won it only if it was
 *         set.  If that emptied the word: clear the summary bit above,
 *         then load the word again, and set the summary bit back if the
 *         word is not empty (and on up, a level at a time).
 *     (H) then, in pages.c, load the page's word: FREE, and the CAS to
 *         RESERVED is the allocation; anything else was a stale hint.
 *   In the total order either (H) comes after (E), and the claimer sees
 *   FREE, or (F) comes after (G), and the publisher sets the bit again.
 *   Each summary level is the same argument one level up: whoever clears
 *   a summary bit looks at the word below after it, and whoever sets a
 *   bit below looks at the summary bit after it.
 *
 * Deaths.  Between (E) and (F), between (G) and the CAS, or between a
 * summary's clear and its second look, a process leaves FREE pages no bit
 * leads to: the sweep of the next recovery sets them again (the quiescent
 * check calls one left unset a violation).  A bit is set or cleared by one
 * locked instruction, so nothing is ever half-written.
 *
 * The quarantine map is the same protocol with QUARANTINE for FREE: whoever
 * CASes a page to QUARANTINE sets its bit after, and an allocator takes
 * the bit (hc__fm_take) only for a page it then takes by CAS, putting it
 * back if the CAS fails while the page is still quarantined.
 *
 * Every bit position used as an index comes from a bit found in a word,
 * within the private copy of the shape: nothing read from shared memory
 * indexes anything here unchecked.
 */
#include <errno.h>
#include <string.h>

#include "pool.h"

uint64_t hc__fm_shape(uint32_t npages, struct hc__fm_shape *sh)
{
	uint64_t bits = npages ? npages : 1, off = 0;

	memset(sh, 0, sizeof(*sh));
	for (;;) {
		uint64_t words = (bits + 63) / 64;

		sh->nbits[sh->nlevels] = bits;
		sh->off[sh->nlevels] = off;
		sh->nlevels++;
		off += words;
		if (words == 1)
			break;
		bits = words;
	}
	return off * sizeof(uint64_t);
}

void hc__fm_map(struct hc__fm *fm, uint32_t npages, uint8_t *region)
{
	hc__fm_shape(npages, &fm->sh);
	for (unsigned l = 0; l < fm->sh.nlevels; l++)
		fm->lv[l] = (_Atomic uint64_t *)(void *)region + fm->sh.off[l];
}

/* Set bit 'bit' of level 'l', then each summary above it, up to one found
 * set.  'always': set the first without looking (see hc__fm_put). */
static void put_up(struct hc__fm *fm, unsigned l, uint64_t bit, int always)
{
	for (; l < fm->sh.nlevels; l++, bit /= 64, always = 0) {
		_Atomic uint64_t *w = &fm->lv[l][bit / 64];
		uint64_t m = UINT64_C(1) << (bit % 64);

		if (!always && (atomic_load(w) & m))
			return;
		atomic_fetch_or(w, m);
	}
}

/* Word 'word' of level l - 1 was seen empty, or emptied by us: clear its
 * summary bit at level l, look at the word again, and set the bit back if
 * something landed meanwhile; on up while a summary word empties. */
void hc__fm_emptied(struct hc__fm *fm, unsigned l, uint64_t word)
{
	for (; l < fm->sh.nlevels; l++, word /= 64) {
		_Atomic uint64_t *w = &fm->lv[l][word / 64];
		uint64_t m = UINT64_C(1) << (word % 64), old = atomic_fetch_and(w, ~m);

		HC_POINT(freemap_emptied);
		if (atomic_load(&fm->lv[l - 1][word]) != 0) {
			put_up(fm, l, word, 0);
			return;
		}
		if ((old & m) == 0 || (old & ~m) != 0)
			return;
	}
}

void hc__fm_put_up(struct hc__fm *fm, unsigned l, uint64_t bit)
{
	put_up(fm, l, bit, 0);
}

/* The first set bit of level l at or after 'from', or -1: a run of empty
 * words is skipped by the level above, and a summary bit found set over
 * an empty word is cleared on the way (emptied, so nothing is lost). */
static int64_t next_set(struct hc__fm *fm, unsigned l, uint64_t from)
{
	while (from < fm->sh.nbits[l]) {
		uint64_t w = atomic_load_explicit(&fm->lv[l][from / 64], memory_order_relaxed);
		int64_t next;

		if (w >> (from % 64))
			return (int64_t)(from & ~UINT64_C(63)) + __builtin_ctzll(w & (~UINT64_C(0) << (from % 64)));
		if (l + 1 == fm->sh.nlevels)
			return -1; /* the top is one word */
		if (w == 0 && from % 64 == 0 &&
		    ((atomic_load_explicit(&fm->lv[l + 1][from / 4096], memory_order_relaxed) >> (from / 64 % 64)) & 1))
			hc__fm_emptied(fm, l + 1, from / 64); /* a stale summary bit: clear it for the next search */
		if ((next = next_set(fm, l + 1, from / 64 + 1)) < 0)
			return -1;
		from = (uint64_t)next * 64;
	}
	return -1;
}

int64_t hc__fm_peek(struct hc__fm *fm, uint64_t from)
{
	const uint64_t n = fm->sh.nbits[0];
	int64_t id;

	if (from >= n)
		from = 0;
	/* the word at 'from' first: frees and claims stay near a cursor */
	uint64_t near = atomic_load_explicit(&fm->lv[0][from / 64], memory_order_relaxed) >> (from % 64);
	if (near && from + (uint64_t)__builtin_ctzll(near) < n) /* a bit past the last page is a scribble */
		return (int64_t)from + __builtin_ctzll(near);
	if ((id = next_set(fm, 0, from)) >= 0 && (uint64_t)id < n)
		return id;
	if (from && (id = next_set(fm, 0, 0)) >= 0 && (uint64_t)id < n)
		return id;
	return -1;
}

/* Bounds the races a claim may lose in a row before it gives up: only
 * other claimers winning the same bits make it go round. */
#define CLAIM_TRIES 256

int64_t hc__fm_claim(struct hc__fm *fm, _Atomic uint32_t *cursor)
{
	uint64_t from = atomic_load_explicit(cursor, memory_order_relaxed);

	for (int tries = 0; tries < CLAIM_TRIES; tries++) {
		int64_t id = hc__fm_peek(fm, from);

		if (id < 0)
			return -1;
		if (hc__fm_take(fm, (uint32_t)id)) {
			atomic_store_explicit(cursor, (uint32_t)id + 1, memory_order_relaxed);
			return id;
		}
		from = (uint64_t)id; /* lost it: look again from there */
	}
	return -1;
}

int hc__fm_has(const struct hc__fm *fm, uint32_t id)
{
	return (atomic_load_explicit(&fm->lv[0][id / 64], memory_order_relaxed) >> (id % 64)) & 1;
}

void hc__fm_heal(struct hc__fm *fm, uint32_t id)
{
	if (!hc__fm_has(fm, id))
		put_up(fm, 0, id, 1);
}

void hc__fm_heal_summaries(struct hc__fm *fm)
{
	for (unsigned l = 0; l + 1 < fm->sh.nlevels; l++)
		for (uint64_t i = 0; i < (fm->sh.nbits[l] + 63) / 64; i++)
			if (atomic_load_explicit(&fm->lv[l][i], memory_order_relaxed))
				put_up(fm, l + 1, i, 0);
}

int hc__fm_summary_ok(const struct hc__fm *fm, unsigned *level, uint64_t *word)
{
	for (unsigned l = 0; l + 1 < fm->sh.nlevels; l++)
		for (uint64_t i = 0; i < (fm->sh.nbits[l] + 63) / 64; i++)
			if (atomic_load_explicit(&fm->lv[l][i], memory_order_relaxed) &&
			    !((atomic_load_explicit(&fm->lv[l + 1][i / 64], memory_order_relaxed) >> (i % 64)) & 1)) {
				*level = l;
				*word = i;
				return 0;
			}
	return 1;
}

void hc__fm_init(uint8_t *region, uint32_t npages, int full)
{
	struct hc__fm_shape sh;

	hc__fm_shape(npages, &sh);
	for (unsigned l = 0; l < sh.nlevels; l++) {
		uint64_t *w = (uint64_t *)(void *)region + sh.off[l], whole = sh.nbits[l] / 64;

		for (uint64_t i = 0; i < whole; i++)
			w[i] = full ? ~UINT64_C(0) : 0;
		if (sh.nbits[l] % 64)
			w[whole] = full ? (UINT64_C(1) << (sh.nbits[l] % 64)) - 1 : 0;
	}
}
