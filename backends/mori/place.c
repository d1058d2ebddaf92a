/* SPDX-License-Identifier: Apache-2.0 */
/*
 * place.c - which memory server holds a name: rendezvous (highest random
 * weight) hashing.  Each server scores each name with a hash seeded by the
 * server's address, and the highest score wins.  Adding or removing a
 * server moves only the names it wins or won (1/n of them), every client
 * with the same list agrees with no coordination, and a server that is down
 * keeps its names: they are misses until it is back, never found stale on
 * another server.
 */
#include <stdio.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "mori.h"

/* The seed is the server's address as written in its label (host:port),
 * so the placement depends on the list's members, not their order. */
void hc__mori_place_init(struct hc_mori_server *s)
{
	s->hash = XXH3_64bits(s->label, strlen(s->label));
}

unsigned hc__mori_place(const struct hc_mori *be, const uint8_t name[HC_BE_NAME_BYTES])
{
	uint64_t best = 0;
	unsigned win = 0;

	for (unsigned i = 0; i < be->nservers; i++) {
		uint64_t score = XXH3_64bits_withSeed(name, HC_BE_NAME_BYTES, be->servers[i].hash);
		if (i == 0 || score > best) {
			best = score;
			win = i;
		}
	}
	return win;
}
