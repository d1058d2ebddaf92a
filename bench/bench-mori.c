/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-mori.c - the mori backend's put and get against ucx_perftest
 * (ucp_put_bw, ucp_get) at the same sizes over the same UCX transports, in
 * the same run (doc/design.md, "Measuring").  Target: at least 0.8.
 *
 * Server:  one hicache-memd started here per transport (UCX_TLS), on a free
 *          loopback port, its region UCX-allocated and prefaulted, stopped
 *          at the end.
 * Ours:    hc_store_put / hc_store_get of every page of a pool through the
 *          mori backend (the pool registered with UCX), T calling threads
 *          each with one call over its slice of the pages: the library
 *          builds, checksums (XXH3) and checks every object; the plugin
 *          asks the server (LOOKUP/ALLOC, COMMIT, RELEASE) and moves the
 *          bytes by ucp_get_nbx / ucp_put_nbx and one flush per batch.
 * Peer:    ucx_perftest, a client and a server process on this machine,
 *          -t ucp_put_bw and -t ucp_get with messages of the object's size
 *          (the envelope and its 4 KiB header), over the same transports:
 *          the transfers alone, nothing asked, nothing checked.
 * Floor:   for the shared-memory transports, memcpy of every object plus
 *          XXH3 of it on the same threads, over the same working set, as
 *          a get is at best a copy and a check.
 *
 * Envelope sizes 256 KiB to 16 MiB (--sizes), about --mib MiB of objects
 * each (default 256); each repetition runs ours and the peer back to back
 * and medians print.  Loopback: client and server share this machine's
 * CPUs, so TCP figures are its kernel's copies, not a network's.
 */
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "../tests/memd.h"
#include "l3.h"

#ifndef HCT_UCX_PERFTEST
#define HCT_UCX_PERFTEST "ucx_perftest"
#endif

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &al) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* ucx_perftest's "Final:" bandwidth (overall, MB/s of 2^20 bytes) in GB/s,
 * or -1.  test: ucp_get or ucp_put_bw. */
static double perftest(const char *test, uint64_t size, unsigned iters)
{
	char port[16], sz[32], n[16], cmd[512], line[512];
	double gbs = -1;
	pid_t srv;
	FILE *f;

	snprintf(port, sizeof(port), "%d", free_port());
	snprintf(sz, sizeof(sz), "%llu", (unsigned long long)size);
	snprintf(n, sizeof(n), "%u", iters < 32 ? 32 : iters); /* past the wireup */
	if ((srv = fork()) == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		execl(HCT_UCX_PERFTEST, HCT_UCX_PERFTEST, "-p", port, (char *)NULL);
		_exit(127);
	}
	usleep(300 * 1000); /* the server listens */
	snprintf(cmd, sizeof(cmd), "%s -p %s 127.0.0.1 -t %s -s %s -n %s -w 4 2>&1", HCT_UCX_PERFTEST, port, test, sz,
		 n);
	if ((f = popen(cmd, "r"))) {
		while (fgets(line, sizeof(line), f)) {
			double v[7];
			if (sscanf(line, "Final: %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
				   &v[6]) == 7)
				gbs = v[5] * 1048576.0 / 1e9;
		}
		pclose(f);
	}
	kill(srv, SIGKILL);
	waitpid(srv, NULL, 0);
	return gbs;
}

/* memcpy + XXH3 of every object from one buffer of them all to another
 * (as cold as ours: the same working set), on as many threads as ours,
 * each a slice: the floor of a get over a shared-memory transport.  GB/s. */
struct floor_slice {
	uint8_t *src, *dst;
	uint64_t obj;
	unsigned first, n;
	uint64_t sink;
};

static void *floor_run(void *arg)
{
	struct floor_slice *f = arg;

	for (unsigned i = f->first; i < f->first + f->n; i++) {
		memcpy(f->dst + i * f->obj, f->src + i * f->obj, f->obj);
		f->sink += XXH3_64bits(f->dst + i * f->obj, f->obj);
	}
	return NULL;
}

static double floor_copy(uint64_t obj, unsigned n, unsigned threads)
{
	uint8_t *src = malloc(obj * n), *dst = malloc(obj * n);
	struct floor_slice f[64];
	pthread_t t[64];
	uint64_t t0, sink = 0;

	memset(src, 0x5a, obj * n);
	memset(dst, 1, obj * n); /* not 0: malloc and a zero fill become calloc, which faults nothing in */
	t0 = bench_now_ns();
	for (unsigned i = 0; i < threads; i++) {
		f[i] = (struct floor_slice){
			src, dst, obj, n * i / threads, n * (i + 1) / threads - n * i / threads, 0
		};
		pthread_create(&t[i], NULL, floor_run, &f[i]);
	}
	for (unsigned i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		sink += f[i].sink;
	}
	t0 = bench_now_ns() - t0;
	free(src);
	free(dst);
	return sink == 1 ? 0 : (double)obj * n / ((double)t0 / 1e9) / 1e9;
}

int main(int argc, char **argv)
{
	static const char *const tls[] = { "sm", "tcp" };
	unsigned kib[8] = { 256, 1024, 4096, 16384 }, nsizes = 4, threads = 2, reps = 3, mib = 256;
	static const struct option lo[] = {
		{ "sizes", required_argument, NULL, 's' }, { "threads", required_argument, NULL, 't' },
		{ "reps", required_argument, NULL, 'r' },  { "mib", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },        { NULL, 0, NULL, 0 },
	};
	double res[2][8][5][15]; /* transport, size, (ours put, peer put, ours get, peer get, floor), rep */
	char err[256], servers[128], spec[512], args[64];
	int c;

	while ((c = getopt_long(argc, argv, "s:t:r:m:h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			nsizes = l3b_sizes("bench-mori", optarg, kib, 8);
			break;
		case 't':
			threads = l3b_count("bench-mori", "threads", optarg);
			break;
		case 'r':
			reps = l3b_count("bench-mori", "reps", optarg);
			break;
		case 'm':
			mib = l3b_count("bench-mori", "mib", optarg);
			break;
		default:
			printf("usage: bench-mori [--sizes KIB,KIB...] [--threads T] [--reps R] [--mib M]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	for (unsigned i = 0; i < nsizes; i++)
		if (kib[i] < 256 || kib[i] % 256) {
			fprintf(stderr, "bench-mori: --sizes: %u KiB is not a multiple of 256\n", kib[i]);
			return 2;
		}
	if (!nsizes || threads < 1 || threads > 64 || reps < 1 || reps > 15 || mib < 16 || mib > 4096) {
		fprintf(stderr, "bench-mori: --threads 1..64, --reps 1..15, --mib 16..4096\n");
		return 2;
	}
	bench_cleanup_init();
	printf("mori backend vs ucx_perftest: one hicache-memd on loopback per transport, threads %u, %u reps, ~%u MiB per size\n",
	       threads, reps, mib);
	for (unsigned t = 0; t < 2; t++) {
		struct hct_memd memd = { 0 };

		setenv("UCX_TLS", tls[t], 1);
		/* room for every size's objects, and some */
		snprintf(args, sizeof(args), "--size %uM", mib + mib / 4 + 64);
		if (hct_memd_start(&memd, 1, args, err, sizeof(err)) < 0) {
			fprintf(stderr, "bench-mori: %s\n", err);
			return 1;
		}
		hct_memd_servers(&memd, servers, sizeof(servers));
		for (unsigned s = 0; s < nsizes; s++) {
			unsigned npages = (unsigned)(((uint64_t)mib << 10) / kib[s]);
			uint64_t obj;
			struct l3b b;

			npages = npages < 8 ? 8 : npages;
			l3b_pool(&b, npages, kib[s]);
			snprintf(spec, sizeof(spec), "mori:servers=%s,transports=%s", servers, tls[t]);
			l3b_open(&b, spec, 64);
			obj = b.env_bytes + 4096;
			l3b_put(&b, threads); /* a first pass of each, untimed */
			l3b_get(&b, threads);
			for (unsigned r = 0; r < reps; r++) {
				double total = (double)obj * npages;
				res[t][s][0][r] = total / l3b_put(&b, threads) / 1e9;
				res[t][s][1][r] = perftest("ucp_put_bw", obj, npages);
				res[t][s][2][r] = total / l3b_get(&b, threads) / 1e9;
				res[t][s][3][r] = perftest("ucp_get", obj, npages);
				res[t][s][4][r] = floor_copy(obj, npages, threads);
			}
			l3b_done(&b);
			fprintf(stderr, ".");
		}
		hct_memd_stop(&memd);
	}
	fprintf(stderr, "\n");
	printf("\n%-4s %-10s %7s %-4s %9s %9s %6s %-10s | %9s %6s\n", "tls", "envelope", "objects", "op", "ours GB/s",
	       "perftest", "ratio", "target", "cpy+xxh3", "ratio");
	for (unsigned t = 0; t < 2; t++)
		for (unsigned s = 0; s < nsizes; s++)
			for (int op = 0; op < 2; op++) {
				unsigned npages = (unsigned)(((uint64_t)mib << 10) / kib[s]);
				double o = bench_median(res[t][s][2 * op], reps),
				       p = bench_median(res[t][s][2 * op + 1], reps),
				       f = bench_median(res[t][s][4], reps);
				printf("%-4s %6u KiB %7u %-4s %9.2f %9.2f %6.2f %-10s", tls[t], kib[s],
				       npages < 8 ? 8 : npages, op ? "get" : "put", o, p, p > 0 ? o / p : 0,
				       p <= 0         ? "no peer"
				       : o / p >= 0.8 ? ">=0.8 met"
						      : ">=0.8 MISS");
				if (t == 0 && op == 1)
					printf(" | %9.2f %6.2f\n", f, o / f);
				else
					printf(" | %9s %6s\n", "-", "-");
			}
	printf("GB/s = object bytes (envelope + 4 KiB header) moved per second, medians; ratio = ours / perftest;\n"
	       "perftest: ucx_perftest -t ucp_put_bw / ucp_get, messages of the object's size, the same UCX_TLS;\n"
	       "cpy+xxh3: memcpy of each object plus XXH3 of it on the same threads, the floor of a shared-memory get (ours / it)\n");
	return 0;
}
