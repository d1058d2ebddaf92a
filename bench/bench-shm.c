/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-shm.c - the shm backend's put and get against memcpy plus the
 * library's checksum (XXH3) of the same bytes, with the same threads, in
 * the same run (doc/design.md, "Measuring").  Target: at least 0.8.
 *
 * Ours:  hc_store_put / hc_store_get of every page of a pool through the
 *        shm backend, T threads, each one call over its slice of the pages.
 *        A put checksums the page and the plugin copies it into the store's
 *        segment; a get copies it out and the library checks the checksum.
 * Peer:  the same T threads: for a put, XXH3 of each envelope and a memcpy
 *        of it into a buffer as large as the store; for a get, a memcpy
 *        back into the envelope and XXH3 of it.  Both buffers are touched
 *        before timing, as the store's segment is by a first pass.
 *
 * Each repetition runs ours and the peer back to back; medians print.
 * This is a memory-bandwidth path: on these VMs one thread copies at
 * 15-20 GB/s cold.
 */
#include <getopt.h>
#include <sys/mman.h>

#include "l3.h"

struct peer {
	struct l3b *b;
	uint8_t *store;
	int get;
	unsigned off, n;
	uint64_t sink;
};

static void *peer_run(void *arg)
{
	struct peer *p = arg;

	for (unsigned i = p->off; i < p->off + p->n; i++) {
		uint8_t *env = hc_page_envelope(p->b->p, p->b->pages[i]);
		uint8_t *dst = p->store + (size_t)i * p->b->env_bytes;
		if (p->get) {
			memcpy(env, dst, p->b->env_bytes);
			p->sink += XXH3_64bits(env, p->b->env_bytes);
		} else {
			p->sink += XXH3_64bits(env, p->b->env_bytes);
			memcpy(dst, env, p->b->env_bytes);
		}
	}
	return NULL;
}

static double peer_timed(struct l3b *b, uint8_t *store, int get, unsigned threads)
{
	struct peer pr[64];
	pthread_t t[64];
	uint64_t t0 = bench_now_ns(), sink = 0;

	for (unsigned i = 0; i < threads; i++)
		pr[i] = (struct peer){
			b, store, get, b->npages * i / threads, b->npages * (i + 1) / threads - b->npages * i / threads,
			0
		};
	for (unsigned i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, peer_run, &pr[i]);
	for (unsigned i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		sink += pr[i].sink;
	}
	if (sink == 42)
		printf(" "); /* keeps the checksums from being optimised away */
	return (double)(bench_now_ns() - t0) / 1e9;
}

int main(int argc, char **argv)
{
	unsigned npages = 256, page_kib = 2048, threads = 2, reps = 5;
	static const struct option lo[] = {
		{ "pages", required_argument, NULL, 'n' },   { "page-kib", required_argument, NULL, 'k' },
		{ "threads", required_argument, NULL, 't' }, { "reps", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },          { 0 }
	};
	double ours[2][15], peer[2][15];
	char spec[256];
	struct l3b b;
	uint8_t *store;
	int c;

	while ((c = getopt_long(argc, argv, "n:k:t:r:h", lo, NULL)) != -1) {
		switch (c) {
		case 'n':
			npages = l3b_count("bench-shm", "pages", optarg);
			break;
		case 'k':
			page_kib = l3b_count("bench-shm", "page-kib", optarg);
			break;
		case 't':
			threads = l3b_count("bench-shm", "threads", optarg);
			break;
		case 'r':
			reps = l3b_count("bench-shm", "reps", optarg);
			break;
		default:
			printf("usage: bench-shm [--pages N] [--page-kib K] [--threads T] [--reps R]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (npages < 8 || page_kib < 256 || page_kib % 256 || threads < 1 || threads > 64 || reps < 1 || reps > 15) {
		fprintf(stderr,
			"bench-shm: --pages >= 8, --page-kib a multiple of 256, --threads 1..64, --reps 1..15\n");
		return 2;
	}
	bench_cleanup_init();
	l3b_pool(&b, npages, page_kib);
	uint64_t obj = b.env_bytes + 4096, total = b.env_bytes * npages;
	store = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (store == MAP_FAILED) {
		fprintf(stderr, "bench-shm: no memory for the peer's %llu bytes\n", (unsigned long long)total);
		return 1;
	}
	/* the store holds every object with room to spare; destroyed at close */
	snprintf(spec, sizeof(spec), "shm:name=bench-%d,capacity=%llu,destroy_on_close=1", (int)getpid(),
		 (unsigned long long)(obj * npages * 5 / 4 + (64u << 20)));
	l3b_open(&b, spec, 64);
	l3b_put(&b, threads); /* a first pass touches every page of the store */
	l3b_get(&b, threads);
	printf("shm backend vs memcpy + XXH3: %u objects of %.2f MiB (%.2f GiB), %u threads, %u reps\n", npages,
	       (double)obj / 1048576, (double)total / 1073741824, threads, reps);
	for (unsigned r = 0; r < reps; r++) {
		ours[0][r] = (double)total / l3b_put(&b, threads) / 1e9;
		peer[0][r] = (double)total / peer_timed(&b, store, 0, threads) / 1e9;
		ours[1][r] = (double)total / l3b_get(&b, threads) / 1e9;
		peer[1][r] = (double)total / peer_timed(&b, store, 1, threads) / 1e9;
	}
	printf("%-5s %12s %18s %7s\n", "op", "ours GB/s", "memcpy+xxh3 GB/s", "ratio");
	for (int op = 0; op < 2; op++) {
		double o = bench_median(ours[op], reps), p = bench_median(peer[op], reps);
		printf("%-5s %12.2f %18.2f %7.2f\n", op ? "get" : "put", o, p, o / p);
	}
	munmap(store, total);
	l3b_done(&b);
	return 0;
}
