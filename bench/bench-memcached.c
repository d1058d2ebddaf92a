/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-memcached.c - the memcached backend's put and get against a plain
 * libmemcached loop doing the same sets and multi-gets of the same bytes to
 * the same servers, in the same run (doc/design.md, "Measuring").  Target: at
 * least 0.9.
 *
 * Servers: --servers N real memcached servers (default 2) started here on
 *          free loopback ports, -m 2048 each, stopped at the end.
 * Ours:    hc_store_put / hc_store_get of every page of a pool through the
 *          memcached backend (workers=W), T calling threads each with one
 *          call over its slice of the pages: the library checksums and
 *          checks every object; the plugin sets its chunks and manifest,
 *          or multi-gets them and copies them into the envelope.
 * Peer:    W threads, each with its own libmemcached handle on the same
 *          servers (binary protocol, ketama): for a put, memcached_set of
 *          each chunk of each object (the same sizes as ours: the object is
 *          the envelope and a 4 KiB header) and of a 128-byte manifest,
 *          from a buffer holding the same bytes; for a get, memcached_mget
 *          of an object batch's keys (as many objects as ours takes at
 *          once) and memcached_fetch_result, copying each value to its
 *          place.  The peer neither checksums nor checks.
 *
 * Envelope sizes 256 KiB to 16 MiB (--sizes), about --mib MiB of objects
 * each (default 256); each repetition runs ours and the peer back to back
 * and medians print.  This is a loopback path: client and servers share
 * this machine's CPUs, so the figures are the CPUs' and the kernel's
 * copies through TCP, not a network's.
 */
#include <dlfcn.h>
#include <getopt.h>

#include <libmemcached/memcached.h>

#include <hicache/backend.h>

#include "../tests/mcd.h"
#include "l3.h"

struct peer {
	const char *servers;
	uint8_t *src, *dst; /* npages objects of obj bytes, back to back */
	uint64_t obj;
	uint32_t chunk;
	unsigned off, n, batch;
	int get;
	int xxh; /* also XXH3 of each object, as the library checksums it */
	uint64_t sink;
	int bad;
	char why[200];
};

static size_t peer_key(char *out, unsigned obj, int chunk)
{
	/* as long as ours: a prefix, 128 hex digits, ".chunk" */
	int n = sprintf(out, "peer:%08x%0120d", obj, 0);

	if (chunk >= 0)
		n += sprintf(out + n, ".%d", chunk);
	return (size_t)n;
}

static memcached_st *peer_handle(const char *servers)
{
	memcached_st *mc = memcached_create(NULL);
	char buf[1024], *save = NULL;

	memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 1);
	memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_DISTRIBUTION, MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA);
	memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
	snprintf(buf, sizeof(buf), "%s", servers);
	for (char *s = strtok_r(buf, ";", &save); s; s = strtok_r(NULL, ";", &save))
		memcached_server_add(mc, "127.0.0.1", (in_port_t)atoi(strchr(s, ':') + 1));
	return mc;
}

static void *peer_run(void *arg)
{
	struct peer *p = arg;
	memcached_st *mc = peer_handle(p->servers);
	uint32_t nchunks = (uint32_t)((p->obj + p->chunk - 1) / p->chunk);
	unsigned nk = p->batch * (nchunks + 1);
	char(*keys)[160] = malloc((size_t)nk * sizeof(*keys));
	const char **kp = malloc(nk * sizeof(*kp));
	size_t *kl = malloc(nk * sizeof(*kl));
	uint8_t man[128];
	memcached_result_st res;

	memcached_result_create(mc, &res);
	memset(man, 0x5c, sizeof(man));
	for (unsigned o = p->off; o < p->off + p->n && !p->bad;) {
		unsigned nb = p->off + p->n - o < p->batch ? p->off + p->n - o : p->batch, k = 0;
		if (!p->get) {
			for (unsigned i = o; i < o + nb; i++) {
				if (p->xxh)
					p->sink += XXH3_64bits(p->src + i * p->obj + 4096, p->obj - 4096);
				for (uint32_t c = 0; c < nchunks; c++) {
					uint64_t at = (uint64_t)c * p->chunk;
					size_t len = (size_t)(p->obj - at < p->chunk ? p->obj - at : p->chunk);
					size_t klen = peer_key(keys[0], i, (int)c);
					memcached_return_t rc = memcached_set(
						mc, keys[0], klen, (const char *)p->src + i * p->obj + at, len, 0, 0);
					if (rc != MEMCACHED_SUCCESS) {
						snprintf(p->why, sizeof(p->why), "set: %s",
							 memcached_last_error_message(mc));
						p->bad = 1;
					}
				}
				memcached_set(mc, keys[0], peer_key(keys[0], i, -1), (const char *)man, sizeof(man), 0,
					      0);
			}
		} else {
			memcached_return_t rc;
			memcached_result_st *r;
			for (unsigned i = o; i < o + nb; i++)
				for (int c = -1; c < (int)nchunks; c++) {
					kl[k] = peer_key(keys[k], i, c);
					kp[k] = keys[k];
					k++;
				}
			if (memcached_mget(mc, kp, kl, k) != MEMCACHED_SUCCESS) {
				snprintf(p->why, sizeof(p->why), "mget: %s", memcached_last_error_message(mc));
				p->bad = 1;
			}
			unsigned got = 0;
			while ((r = memcached_fetch_result(mc, &res, &rc)) ||
			       (rc != MEMCACHED_END && rc != MEMCACHED_NOTFOUND)) {
				if (!r) {
					fprintf(stderr, "peer fetch: %s\n", memcached_last_error_message(mc));
					continue;
				}
				got++;
				const char *key = memcached_result_key_value(r), *dot;
				unsigned i = (unsigned)strtoul((char[9]){ key[5], key[6], key[7], key[8], key[9],
									  key[10], key[11], key[12], 0 },
							       NULL, 16);
				size_t klen = memcached_result_key_length(r);
				unsigned c = 0;
				if (!(dot = memchr(key, '.', klen)))
					continue; /* the manifest */
				/* the result's key is not NUL-terminated */
				for (const char *d = dot + 1; d < key + klen; d++)
					c = c * 10 + (unsigned)(*d - '0');
				if (i >= p->off + p->n || c >= nchunks)
					continue;
				memcpy(p->dst + i * p->obj + (uint64_t)c * p->chunk, memcached_result_value(r),
				       memcached_result_length(r));
			}
			if (got != k)
				fprintf(stderr, "peer: %u of %u items\n", got, k);
			for (unsigned i = o; p->xxh && i < o + nb; i++)
				p->sink += XXH3_64bits(p->dst + i * p->obj + 4096, p->obj - 4096);
		}
		o += nb;
	}
	memcached_result_free(&res);
	memcached_free(mc);
	free(keys);
	free(kp);
	free(kl);
	return NULL;
}

static double peer_timed(struct peer *tmpl, unsigned npages, unsigned threads, int get, int xxh)
{
	struct peer pr[64];
	pthread_t t[64];
	uint64_t t0 = bench_now_ns();

	for (unsigned i = 0; i < threads; i++) {
		pr[i] = *tmpl;
		pr[i].get = get;
		pr[i].xxh = xxh;
		pr[i].off = npages * i / threads;
		pr[i].n = npages * (i + 1) / threads - pr[i].off;
	}
	for (unsigned i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, peer_run, &pr[i]);
	for (unsigned i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		if (pr[i].sink == 42)
			printf(" "); /* keeps the checksums from being optimised away */
		if (pr[i].bad) {
			fprintf(stderr, "bench-memcached: the peer failed: %s\n", pr[i].why);
			exit(1);
		}
	}
	return (double)(bench_now_ns() - t0) / 1e9;
}

/* ---- the plugin alone: its ABI driven from one thread, 64 ops in flight,
 * the same objects (a 4 KiB header block and the envelope), no library */

struct raw {
	const struct hc_backend *be;
	void *inst;
};

static void raw_open(struct raw *r, const char *servers, unsigned workers)
{
	char path[4096], wbuf[16], err[512];
	const char *p = getenv("HICACHE_BACKEND_PATH");
	struct hc_be_option o[2] = { { "servers", servers }, { "workers", wbuf } };
	hc_backend_entry_fn entry;
	void *h = NULL;

	snprintf(wbuf, sizeof(wbuf), "%u", workers);
	while (p && *p && !h) {
		size_t n = strcspn(p, ":");
		snprintf(path, sizeof(path), "%.*s/memcached.so", (int)n, p);
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		p += n + (p[n] == ':');
	}
	if (!h || !(entry = (hc_backend_entry_fn)dlsym(h, HC_BACKEND_ENTRY_SYMBOL)) || !(r->be = entry(NULL))) {
		fprintf(stderr, "bench-memcached: memcached.so not found in $HICACHE_BACKEND_PATH\n");
		exit(1);
	}
	if (r->be->open(o, 2, &r->inst, err, sizeof(err)) < 0) {
		fprintf(stderr, "bench-memcached: the plugin: %s\n", err);
		exit(1);
	}
}

static double raw_timed(struct raw *r, const struct l3b *b, const uint8_t *hdr, int get)
{
	uint64_t t0 = bench_now_ns();
	unsigned sub = 0, done = 0, n = b->npages;
	struct iovec(*iov)[2] = malloc(n * sizeof(*iov));

	while (done < n) {
		struct hc_be_cqe c[64];
		int k;
		while (sub < n && sub - done < 64) {
			struct hc_be_op op = { .opcode = get ? HC_BE_OP_GET : HC_BE_OP_PUT,
					       .iovcnt = 2,
					       .iov = iov[sub],
					       .user_data = sub };
			iov[sub][0] = (struct iovec){ (void *)hdr, 4096 };
			iov[sub][1] = (struct iovec){ hc_page_envelope(b->p, b->pages[sub]), b->env_bytes };
			memset(op.name, 0x77, 32);
			memcpy(op.name + 32, b->keys[sub], 32);
			if (r->be->submit(r->inst, &op, 1) != 1)
				break;
			sub++;
		}
		k = r->be->reap(r->inst, c, 64, 1000);
		for (int i = 0; i < k; i++)
			if (c[i].result < 0) {
				fprintf(stderr, "bench-memcached: the plugin alone: %s of object %llu: %s\n",
					get ? "get" : "put", (unsigned long long)c[i].user_data,
					strerror((int)-c[i].result));
				exit(1);
			}
		done += (unsigned)(k > 0 ? k : 0);
	}
	free(iov);
	return (double)(bench_now_ns() - t0) / 1e9;
}

int main(int argc, char **argv)
{
	unsigned kib[8] = { 256, 1024, 4096, 16384 }, nsizes = 4, nserv = 2, workers = 2, threads = 0, reps = 3,
		 mib = 256;
	static const struct option lo[] = {
		{ "sizes", required_argument, NULL, 's' },   { "servers", required_argument, NULL, 'S' },
		{ "workers", required_argument, NULL, 'w' }, { "threads", required_argument, NULL, 't' },
		{ "reps", required_argument, NULL, 'r' },    { "mib", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },          { 0 }
	};
	double res[8][4][2][15]; /* size, ours/peer/peer+xxh3/plugin alone, put/get, rep */
	char servers[512], err[256], spec[1024], out[32];
	struct hct_mcd mcd;
	int c;

	while ((c = getopt_long(argc, argv, "s:S:w:t:r:m:h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			nsizes = l3b_sizes("bench-memcached", optarg, kib, 8);
			break;
		case 'S':
			nserv = l3b_count("bench-memcached", "servers", optarg);
			break;
		case 'w':
			workers = l3b_count("bench-memcached", "workers", optarg);
			break;
		case 't':
			threads = l3b_count("bench-memcached", "threads", optarg);
			break;
		case 'r':
			reps = l3b_count("bench-memcached", "reps", optarg);
			break;
		case 'm':
			mib = l3b_count("bench-memcached", "mib", optarg);
			break;
		default:
			printf("usage: bench-memcached [--sizes KIB,KIB...] [--servers N] [--workers W] [--threads T] [--reps R] [--mib M]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	threads = threads ? threads : workers;
	for (unsigned i = 0; i < nsizes; i++)
		if (kib[i] < 256 || kib[i] % 256) {
			fprintf(stderr, "bench-memcached: --sizes: %u KiB is not a multiple of 256\n", kib[i]);
			return 2;
		}
	if (!nsizes || nserv < 1 || nserv > HCT_MCD_MAX || workers < 1 || workers > 64 || threads > 64 || reps < 1 ||
	    reps > 15 || mib < 16) {
		fprintf(stderr,
			"bench-memcached: --servers 1..%d, --workers 1..64, --threads 1..64, --reps 1..15, --mib >= 16\n",
			HCT_MCD_MAX);
		return 2;
	}
	if (hct_mcd_start(&mcd, nserv, "-m 2048", err, sizeof(err)) < 0) {
		fprintf(stderr, "bench-memcached: %s\n", err);
		return 1;
	}
	hct_mcd_servers(&mcd, servers, sizeof(servers));
	bench_cleanup_init();
	printf("memcached backend vs a plain libmemcached loop: %u servers on loopback (memcached -m 2048 -t 2), workers %u, threads %u, %u reps, ~%u MiB per size\n",
	       nserv, workers, threads, reps, mib);
	for (unsigned s = 0; s < nsizes; s++) {
		unsigned npages = (unsigned)(((uint64_t)mib << 10) / kib[s]);
		struct l3b b;
		struct peer pt = { .servers = servers, .batch = 64 };
		struct raw raw;
		static uint8_t hdr[4096];
		memcached_st *mc = peer_handle(servers);

		memcached_flush(mc, 0); /* room for this size's objects */
		memcached_free(mc);
		npages = npages < 8 ? 8 : npages;
		l3b_pool(&b, npages, kib[s]);
		snprintf(spec, sizeof(spec), "memcached:servers=%s,workers=%u", servers, workers);
		l3b_open(&b, spec, 64);
		if (hc_store_ctl(b.st, "chunk_size", NULL, out, sizeof(out)) < 0)
			l3b_die("read chunk_size");
		pt.chunk = (uint32_t)strtoul(out, NULL, 10);
		pt.obj = b.env_bytes + 4096;
		pt.batch = (npages + threads - 1) / threads < 64 ? (npages + threads - 1) / threads : 64;
		pt.src = malloc(pt.obj * npages);
		pt.dst = malloc(pt.obj * npages);
		if (!pt.src || !pt.dst) {
			fprintf(stderr, "bench-memcached: no memory for the peer's buffers\n");
			return 1;
		}
		for (unsigned i = 0; i < npages; i++) {
			memset(pt.src + i * pt.obj, 0xa5, 4096);
			memcpy(pt.src + i * pt.obj + 4096, hc_page_envelope(b.p, b.pages[i]), b.env_bytes);
		}
		memset(pt.dst, 0, pt.obj * npages);
		raw_open(&raw, servers, workers);
		l3b_put(&b, threads); /* a first pass of each, untimed */
		l3b_get(&b, threads);
		raw_timed(&raw, &b, hdr, 0);
		peer_timed(&pt, npages, workers, 0, 0);
		peer_timed(&pt, npages, workers, 1, 0);
		if (memcmp(pt.src, pt.dst, pt.obj * npages)) {
			fprintf(stderr, "bench-memcached: the peer read back other bytes than it stored\n");
			return 1;
		}
		for (unsigned r = 0; r < reps; r++) {
			double total = (double)pt.obj * npages;
			res[s][0][0][r] = total / l3b_put(&b, threads) / 1e9;
			res[s][1][0][r] = total / peer_timed(&pt, npages, workers, 0, 0) / 1e9;
			res[s][2][0][r] = total / peer_timed(&pt, npages, workers, 0, 1) / 1e9;
			res[s][0][1][r] = total / l3b_get(&b, threads) / 1e9;
			res[s][1][1][r] = total / peer_timed(&pt, npages, workers, 1, 0) / 1e9;
			res[s][2][1][r] = total / peer_timed(&pt, npages, workers, 1, 1) / 1e9;
			res[s][3][0][r] = total / raw_timed(&raw, &b, hdr, 0) / 1e9;
			res[s][3][1][r] = total / raw_timed(&raw, &b, hdr, 1) / 1e9;
		}
		raw.be->close(raw.inst);
		free(pt.src);
		free(pt.dst);
		l3b_done(&b);
		fprintf(stderr, ".");
	}
	fprintf(stderr, "\n");
	printf("\n%-10s %7s %-4s %9s %9s %6s %-10s | %9s %6s | %12s %6s\n", "envelope", "objects", "op", "ours GB/s",
	       "peer GB/s", "ratio", "target", "peer+xxh3", "ratio", "plugin alone", "ratio");
	for (unsigned s = 0; s < nsizes; s++)
		for (int op = 0; op < 2; op++) {
			double o = bench_median(res[s][0][op], reps), p = bench_median(res[s][1][op], reps),
			       px = bench_median(res[s][2][op], reps), pa = bench_median(res[s][3][op], reps);
			printf("%6u KiB %7u %-4s %9.2f %9.2f %6.2f %-10s | %9.2f %6.2f | %12.2f %6.2f\n", kib[s],
			       (unsigned)(((uint64_t)mib << 10) / kib[s]) < 8
				       ? 8
				       : (unsigned)(((uint64_t)mib << 10) / kib[s]),
			       op ? "get" : "put", o, p, o / p, o / p >= 0.9 ? ">=0.9 met" : ">=0.9 MISS", px, o / px,
			       pa, pa / p);
		}
	printf("GB/s = object bytes (envelope + 4 KiB header) moved per second, medians; ratio = ours / peer;\n"
	       "peer+xxh3: the peer also taking XXH3 of each envelope, as the library checksums every object (ours / it);\n"
	       "plugin alone: the plugin's ABI driven from one thread, 64 ops in flight, no library (it / peer)\n");
	hct_mcd_stop(&mcd);
	return 0;
}
