/* SPDX-License-Identifier: Apache-2.0 */
/*
 * l3.h - what the L3 benchmarks share: a pool of npages READY keyed pages
 * with random bytes, and timed batches of hc_store_put / hc_store_get over
 * them from T threads (each thread one slice of the pages, one call).
 * Header-only, like bench.h.
 *
 * The pool has one KV component: 64 tokens, 8 heads of 256 bytes (bf16,
 * head_dim 128), L layers, so an envelope is 256 KiB x L, and an object is
 * that plus its 4096-byte header.
 */
#ifndef HC_BENCH_L3_H
#define HC_BENCH_L3_H

#include <pthread.h>

#include <hicache/hicache.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bench.h"

struct l3b {
	char pool[64];
	char shm_path[512];
	hc_pool *p;
	hc_store *st;
	unsigned npages;
	uint64_t env_bytes;
	hc_key_t *keys;
	hc_page_t *pages;
	uint64_t sum; /* XXH3 of every envelope, in page order, before any I/O */
};

/* An option's whole number, or exit 2 saying which option was not one. */
static inline unsigned l3b_count(const char *prog, const char *opt, const char *s)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v > UINT32_MAX) {
		fprintf(stderr, "%s: --%s %s: give a whole number\n", prog, opt, s);
		exit(2);
	}
	return (unsigned)v;
}

/* --sizes KIB,KIB...: how many were given (at most max). */
static inline unsigned l3b_sizes(const char *prog, const char *s, unsigned *kib, unsigned max)
{
	unsigned n = 0;
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", s);
	for (char *t = strtok_r(buf, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
		kib[n++] = l3b_count(prog, "sizes", t);
	return n;
}

static inline void l3b_die(const char *what)
{
	fprintf(stderr, "bench: %s: %s\n", what, hc_last_error());
	exit(1);
}

/* Fill b->keys from the generator state x; returns the state after them. */
static inline uint64_t l3b_keys(struct l3b *b, uint64_t x)
{
	for (unsigned i = 0; i < b->npages; i++)
		for (unsigned j = 0; j < HC_KEY_BYTES; j++) {
			x = x * 6364136223846793005u + 1442695040888963407u;
			b->keys[i][j] = (uint8_t)(x >> 56);
		}
	return x;
}

/* Create, attach and fill the pool; page_kib is a multiple of 256. */
static inline void l3b_pool(struct l3b *b, unsigned npages, unsigned page_kib)
{
	struct hc_component_spec kv = { .size = sizeof(struct hc_component_spec),
					.name = "kv",
					.dtype = HC_DTYPE_BF16,
					.kind = HC_COMP_KV,
					.sharding = HC_SHARDED,
					.kv_heads = 8,
					.head_bytes = 256,
					.layers = page_kib / 256 };
	struct hc_pool_spec ps = { .size = sizeof(struct hc_pool_spec),
				   .model_id = "bench/l3",
				   .page_tokens = 64,
				   .tp_size = 1,
				   .comps = &kv,
				   .ncomp = 1,
				   .capacity_pages = npages,
				   .max_ranks = 4 };
	struct hc_reserve_req rq;
	struct hc_pool_info pi;
	uint8_t *skip;
	uint64_t x = 0x243F6A8885A308D3u;
	XXH3_state_t s;

	memset(b, 0, sizeof(*b));
	snprintf(b->pool, sizeof(b->pool), "bench-l3-%d", (int)getpid());
	ps.name = b->pool;
	if (hc_pool_create(&ps) < 0)
		l3b_die("create the pool");
	snprintf(b->shm_path, sizeof(b->shm_path), "/dev/shm/hicache.%s", b->pool);
	bench_cleanup_add(b->shm_path);
	if (hc_pool_attach(b->pool, NULL, &b->p) < 0)
		l3b_die("attach the pool");
	hc_pool_info(b->p, &pi, sizeof(pi));
	b->npages = npages;
	b->env_bytes = pi.envelope_bytes;
	b->keys = calloc(npages, sizeof(*b->keys));
	b->pages = calloc(npages, sizeof(*b->pages));
	skip = calloc(npages, 1);
	x = l3b_keys(b, x);
	rq = (struct hc_reserve_req){ .size = sizeof(struct hc_reserve_req), .keys = b->keys, .nkeys = npages };
	if (hc_reserve(b->p, &rq, b->pages, skip) != (int)npages)
		l3b_die("reserve the pages");
	XXH3_64bits_reset(&s);
	for (unsigned i = 0; i < npages; i++) {
		uint64_t *w = hc_page_envelope(b->p, b->pages[i]);
		for (uint64_t k = 0; k < b->env_bytes / 8; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			w[k] = x;
		}
		XXH3_64bits_update(&s, w, b->env_bytes);
		if (hc_page_commit(b->p, b->pages[i], hc_page_needed(b->p, 1)) != 1)
			l3b_die("commit a page");
	}
	b->sum = XXH3_64bits_digest(&s);
	free(skip);
}

static inline void l3b_open(struct l3b *b, const char *spec, unsigned qd)
{
	struct hc_store_opts o = { .size = sizeof(struct hc_store_opts), .queue_depth = qd };

	if (hc_store_open(b->p, spec, &o, &b->st) < 0)
		l3b_die(spec);
}

struct l3b_slice {
	struct l3b *b;
	int get;
	unsigned off, n;
	int ok;
};

static inline void *l3b_slice_run(void *arg)
{
	struct l3b_slice *s = arg;
	int *status = calloc(s->n, sizeof(int));
	int r = s->get ? hc_store_get(s->b->st, s->b->pages + s->off, s->n, status)
		       : hc_store_put(s->b->st, s->b->pages + s->off, s->n, status);

	s->ok = r == (int)s->n;
	if (!s->ok)
		fprintf(stderr, "bench: %s: %d of %u; first status %d: %s\n", s->get ? "get" : "put", r, s->n,
			status[0], hc_last_error());
	free(status);
	return NULL;
}

/* Seconds for every page through hc_store_put (get = 0) or hc_store_get. */
static inline double l3b_timed(struct l3b *b, int get, unsigned threads)
{
	struct l3b_slice sl[64];
	pthread_t t[64];
	uint64_t t0;
	int ok = 1;

	if (threads > 64)
		threads = 64;
	for (unsigned i = 0; i < threads; i++)
		sl[i] = (struct l3b_slice){ b, get, b->npages * i / threads,
					    b->npages * (i + 1) / threads - b->npages * i / threads, 0 };
	t0 = bench_now_ns();
	for (unsigned i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, l3b_slice_run, &sl[i]);
	for (unsigned i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		ok &= sl[i].ok;
	}
	if (!ok) {
		fprintf(stderr, "bench: a batch failed\n");
		exit(1);
	}
	return (double)(bench_now_ns() - t0) / 1e9;
}

static inline double l3b_put(struct l3b *b, unsigned threads)
{
	return l3b_timed(b, 0, threads);
}

/* Drop every page from the pool, reserve them again empty, get them all
 * (timed), commit, and check every byte came back. */
static inline double l3b_get(struct l3b *b, unsigned threads)
{
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = b->keys, .nkeys = b->npages };
	uint8_t *skip = calloc(b->npages, 1);
	XXH3_state_t s;
	double secs;

	for (unsigned i = 0; i < b->npages; i++)
		hc_evict_key(b->p, b->keys[i]);
	if (hc_reserve(b->p, &rq, b->pages, skip) != (int)b->npages)
		l3b_die("reserve the pages for the gets");
	for (unsigned i = 0; i < b->npages; i++) /* no stale bytes can pass for good ones */
		memset(hc_page_envelope(b->p, b->pages[i]), 0, 4096);
	secs = l3b_timed(b, 1, threads);
	XXH3_64bits_reset(&s);
	for (unsigned i = 0; i < b->npages; i++) {
		XXH3_64bits_update(&s, hc_page_envelope(b->p, b->pages[i]), b->env_bytes);
		if (hc_page_commit(b->p, b->pages[i], hc_page_needed(b->p, 1)) != 1)
			l3b_die("commit a page after its get");
	}
	if (XXH3_64bits_digest(&s) != b->sum) {
		fprintf(stderr, "bench: the bytes read back differ from the bytes stored\n");
		exit(1);
	}
	free(skip);
	return secs;
}

/* Give every page a fresh key (from seed): drop the pages, reserve the new
 * keys and commit them with the bytes they hold, so that nothing in L3 or
 * in the pool's flags knows them yet. */
static inline void l3b_rekey(struct l3b *b, uint64_t seed)
{
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = b->keys, .nkeys = b->npages };
	uint8_t *skip = calloc(b->npages, 1);

	for (unsigned i = 0; i < b->npages; i++)
		hc_evict_key(b->p, b->keys[i]);
	l3b_keys(b, seed * 0x9E3779B97F4A7C15u + 1);
	if (hc_reserve(b->p, &rq, b->pages, skip) != (int)b->npages)
		l3b_die("reserve the pages under fresh keys");
	for (unsigned i = 0; i < b->npages; i++)
		if (hc_page_commit(b->p, b->pages[i], hc_page_needed(b->p, 1)) != 1)
			l3b_die("commit a page under its fresh key");
	free(skip);
}

/* The checksum of every envelope in key order, as the pages hold them now
 * (after l3b_rekey the keys may sit on other pages than at first). */
static inline void l3b_resum(struct l3b *b)
{
	XXH3_state_t s;

	XXH3_64bits_reset(&s);
	for (unsigned i = 0; i < b->npages; i++)
		XXH3_64bits_update(&s, hc_page_envelope(b->p, b->pages[i]), b->env_bytes);
	b->sum = XXH3_64bits_digest(&s);
}

static inline void l3b_close(struct l3b *b)
{
	hc_store_close(b->st);
	b->st = NULL;
}

static inline void l3b_done(struct l3b *b)
{
	if (b->st)
		hc_store_close(b->st);
	hc_pool_detach(b->p);
	hc_pool_destroy(b->pool, NULL, HC_DESTROY_FORCE);
	free(b->keys);
	free(b->pages);
}

#endif /* HC_BENCH_L3_H */
