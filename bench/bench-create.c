/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-create.c - how fast a pool is created and attached, against the
 * physical floor measured in the same run on the same file system:
 *
 *   create:  hc_pool_create (ftruncate, mmap, posix_fallocate,
 *            MADV_POPULATE_WRITE, metadata, link) against
 *            open + posix_fallocate + mmap + MADV_POPULATE_WRITE;
 *   attach:  hc_pool_attach as a rank (validate, mmap, populate, claim a
 *            slot, recover) against open + mmap + MADV_POPULATE_WRITE of
 *            the existing file.
 *
 * An attach maps the file afresh, so it has no page-table entries for it
 * yet, exactly like a second process (doc/design.md, "Memory and page faults"): that is the
 * cost every rank pays.  Files go in /dev/shm and are removed, also on
 * SIGINT/SIGTERM.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <hicache/hicache.h>

#include "bench.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define DIR       "/dev/shm"
#define MAX_REPS  15
#define MAX_SIZES 4

enum step { CREATE = 0, ATTACH = 1, NSTEPS };

struct bench {
	char name[HC_NAME_MAX + 1];
	char pool_path[512];
	char base_path[512];
	char tmp_path[512];                 /* hc_pool_create's name while it builds the pool */
	int pool_slot, base_slot, tmp_slot; /* bench_cleanup slots */
};

/*
 * 2 MiB envelopes: 64 tokens x 8 KV heads x 256 B (128 dims of bf16) x K/V
 * x 8 layers.  The pool's size is what matters here, not its shape.
 */
static const struct hc_component_spec kv = {
	.size = sizeof(struct hc_component_spec),
	.name = "kv",
	.dtype = HC_DTYPE_BF16,
	.kind = HC_COMP_KV,
	.sharding = HC_SHARDED,
	.kv_heads = 8,
	.head_bytes = 256,
	.layers = 8,
};

static double gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0;
}

/* ---- ours */

static int ours_create(struct bench *b, uint64_t capacity, uint64_t *ns)
{
	struct hc_pool_spec s = {
		.size = sizeof(struct hc_pool_spec),
		.name = b->name,
		.model_id = "bench-create",
		.page_tokens = 64,
		.tp_size = 1,
		.comps = &kv,
		.ncomp = 1,
		.capacity_bytes = capacity,
	};
	uint64_t t0 = bench_now_ns();
	int ret = hc_pool_create(&s);

	*ns = bench_now_ns() - t0;
	if (ret < 0)
		fprintf(stderr, "bench-create: hc_pool_create: %s\n", hc_last_error());
	return ret;
}

/* A rank attach, as an engine's; 'seg' gets the segment's size. */
static int ours_attach(struct bench *b, uint64_t *ns, uint64_t *seg)
{
	struct hc_pool_info info;
	hc_pool *p;
	uint64_t t0 = bench_now_ns();
	int ret = hc_pool_attach(b->name, NULL, &p);

	*ns = bench_now_ns() - t0;
	if (ret < 0) {
		fprintf(stderr, "bench-create: hc_pool_attach: %s\n", hc_last_error());
		return ret;
	}
	hc_pool_info(p, &info, sizeof(info));
	*seg = info.segment_bytes;
	hc_pool_detach(p);
	return 0;
}

static int ours_destroy(struct bench *b)
{
	int ret = hc_pool_destroy(b->name, NULL, 0);

	if (ret < 0)
		fprintf(stderr, "bench-create: hc_pool_destroy: %s\n", hc_last_error());
	return ret;
}

/* ---- the baseline: the same system calls, nothing else */

/*
 * Map and populate; '*ns' gets the time from 't0' to the end of the populate.
 * The munmap after it is not counted: ours leaves its mapping in place too.
 */
static int base_map_populate(int fd, uint64_t bytes, uint64_t t0, uint64_t *ns)
{
	void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int ret = 0;

	if (m == MAP_FAILED)
		return -errno;
	if (madvise(m, bytes, MADV_POPULATE_WRITE) < 0)
		ret = -errno;
	*ns = bench_now_ns() - t0;
	munmap(m, bytes);
	return ret;
}

/*
 * hc_pool_create unmaps before it returns, so here the munmap is counted:
 * the same work on both sides.
 */
static int base_create(struct bench *b, uint64_t bytes, uint64_t *ns)
{
	uint64_t t0 = bench_now_ns(), unused;
	int fd, ret;

	fd = open(b->base_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		goto fail;
	}
	ret = -posix_fallocate(fd, 0, (off_t)bytes);
	if (ret == 0)
		ret = base_map_populate(fd, bytes, t0, &unused);
	close(fd);
	*ns = bench_now_ns() - t0;
	if (ret == 0)
		return 0;
fail:
	fprintf(stderr, "bench-create: baseline create of %s: %s\n", b->base_path, strerror(-ret));
	return ret;
}

static int base_attach(struct bench *b, uint64_t bytes, uint64_t *ns)
{
	uint64_t t0 = bench_now_ns();
	int fd, ret;

	fd = open(b->base_path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		goto fail;
	}
	ret = base_map_populate(fd, bytes, t0, ns);
	close(fd);
	if (ret == 0)
		return 0;
fail:
	fprintf(stderr, "bench-create: baseline attach of %s: %s\n", b->base_path, strerror(-ret));
	return ret;
}

/* ---- one size */

struct result {
	uint64_t capacity; /* asked for */
	uint64_t seg;      /* what the pool's segment came to; the baseline uses the same */
	double ours[NSTEPS], base[NSTEPS];
	double ours_best[NSTEPS], base_best[NSTEPS];
};

static int run_ours(struct bench *b, struct result *r, double *create, double *attach)
{
	uint64_t ns_c = 0, ns_a = 0, seg = 0;
	int ret;

	if ((ret = ours_create(b, r->capacity, &ns_c)) < 0)
		return ret;
	ret = ours_attach(b, &ns_a, &seg);
	if (ours_destroy(b) < 0 && ret == 0)
		ret = -EIO;
	if (ret < 0)
		return ret;
	r->seg = seg;
	*create = gbps(seg, ns_c);
	*attach = gbps(seg, ns_a);
	return 0;
}

static int run_base(struct bench *b, struct result *r, double *create, double *attach)
{
	uint64_t ns_c = 0, ns_a = 0;
	int ret;

	ret = base_create(b, r->seg, &ns_c);
	if (ret == 0)
		ret = base_attach(b, r->seg, &ns_a);
	unlink(b->base_path);
	if (ret < 0)
		return ret;
	*create = gbps(r->seg, ns_c);
	*attach = gbps(r->seg, ns_a);
	return 0;
}

static int run_size(struct bench *b, struct result *r, unsigned reps)
{
	double v[4][MAX_REPS], dummy[2];
	int ret;

	/* Untimed: learn the segment size, and warm the allocator's paths. */
	if ((ret = run_ours(b, r, &dummy[0], &dummy[1])) < 0 || (ret = run_base(b, r, &dummy[0], &dummy[1])) < 0)
		return ret;
	for (unsigned i = 0; i < reps; i++) {
		/* Alternate which goes first, so drift favours neither. */
		if (i % 2 == 0) {
			if ((ret = run_ours(b, r, &v[0][i], &v[1][i])) < 0 ||
			    (ret = run_base(b, r, &v[2][i], &v[3][i])) < 0)
				return ret;
		} else {
			if ((ret = run_base(b, r, &v[2][i], &v[3][i])) < 0 ||
			    (ret = run_ours(b, r, &v[0][i], &v[1][i])) < 0)
				return ret;
		}
	}
	for (int s = 0; s < NSTEPS; s++) {
		r->ours[s] = bench_median(v[s], reps);
		r->base[s] = bench_median(v[2 + s], reps);
		/* bench_median sorted them: the best (fastest) is the last */
		r->ours_best[s] = v[s][reps - 1];
		r->base_best[s] = v[2 + s][reps - 1];
	}
	return 0;
}

/* ---- main */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench-create [--reps N] [--mib SIZE]...\n"
		"  Pool create and attach throughput against posix_fallocate + MADV_POPULATE_WRITE\n"
		"  on the same file system (" DIR "), in GB/s.\n"
		"  --reps N    repetitions per size; the median is printed (default 5)\n"
		"  --mib SIZE  a pool size in MiB, up to %d times, 64..2048 (default 256 and 1024)\n",
		MAX_SIZES);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "reps", required_argument, NULL, 'r' },
		{ "mib", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const int w[] = { -8, -6, 13, 14, 11, -14 };
	struct result res[MAX_SIZES] = { 0 };
	struct bench b = { .pool_slot = -1, .base_slot = -1, .tmp_slot = -1 };
	struct statvfs vfs;
	unsigned reps = 5, nsizes = 0;
	uint64_t biggest = 0;
	char *end;
	int c, ret = 0;

	while ((c = getopt_long(argc, argv, "r:m:h", lo, NULL)) != -1) {
		switch (c) {
		case 'r':
			reps = (unsigned)strtoul(optarg, &end, 10);
			if (*end || reps < 1 || reps > MAX_REPS) {
				fprintf(stderr, "bench-create: --reps must be 1..%d\n", MAX_REPS);
				return 2;
			}
			break;
		case 'm': {
			unsigned long mib = strtoul(optarg, &end, 10);
			if (*end || mib < 64 || mib > 2048 || nsizes == MAX_SIZES) {
				fprintf(stderr, "bench-create: --mib must be 64..2048, at most %d times\n", MAX_SIZES);
				return 2;
			}
			res[nsizes++].capacity = (uint64_t)mib << 20;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (nsizes == 0) {
		res[nsizes++].capacity = UINT64_C(256) << 20;
		res[nsizes++].capacity = UINT64_C(1024) << 20;
	}
	for (unsigned i = 0; i < nsizes; i++)
		biggest = res[i].capacity > biggest ? res[i].capacity : biggest;
	/* One pool or one baseline file exists at a time: room for the biggest, plus slack. */
	if (statvfs(DIR, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < biggest + (biggest >> 3)) {
		fprintf(stderr, "bench-create: %s has %.2f GiB free; this run needs %.2f GiB: pass a smaller --mib\n",
			DIR, (double)vfs.f_bavail * vfs.f_frsize / (1u << 30), (double)biggest * 1.125 / (1u << 30));
		return 1;
	}

	bench_cleanup_init();
	snprintf(b.name, sizeof(b.name), "hcbench-%d", (int)getpid());
	snprintf(b.pool_path, sizeof(b.pool_path), DIR "/hicache.%s", b.name);
	snprintf(b.base_path, sizeof(b.base_path), DIR "/.hcbench-%d.baseline", (int)getpid());
	snprintf(b.tmp_path, sizeof(b.tmp_path), DIR "/.hicache.%s.creating.%d", b.name, (int)getpid());
	b.pool_slot = bench_cleanup_add(b.pool_path);
	b.base_slot = bench_cleanup_add(b.base_path);
	b.tmp_slot = bench_cleanup_add(b.tmp_path);

	printf("bench-create: hicache %s, %s, 4 KiB pages, median of %u repetitions\n", hc_version(), DIR, reps);
	printf("baseline: create = open + posix_fallocate + mmap + MADV_POPULATE_WRITE;\n"
	       "          attach = open + mmap + MADV_POPULATE_WRITE of the existing file\n\n");
	fflush(stdout);
	for (unsigned i = 0; i < nsizes; i++)
		if ((ret = run_size(&b, &res[i], reps)) < 0)
			goto out;

	bench_row(6, w, "size", "step", "ours GB/s", "baseline GB/s", "ratio", "target");
	bench_rule(bench_table_width(6, w));
	for (unsigned i = 0; i < nsizes; i++) {
		for (int s = 0; s < NSTEPS; s++) {
			double ratio = res[i].ours[s] / res[i].base[s];

			bench_row(6, w, s == 0 ? bench_fmt("%" PRIu64 " MiB", res[i].seg >> 20) : "",
				  s == CREATE ? "create" : "attach",
				  bench_fmt("%.2f [%.2f]", res[i].ours[s], res[i].ours_best[s]),
				  bench_fmt("%.2f [%.2f]", res[i].base[s], res[i].base_best[s]),
				  bench_fmt("%.2f [%.2f]", ratio, res[i].ours_best[s] / res[i].base_best[s]),
				  ratio >= 0.8 ? ">= 0.8  met" : ">= 0.8  MISSED");
		}
	}
	bench_rule(bench_table_width(6, w));
	printf("median [best] of the repetitions; ratio = ours / baseline, over the same bytes\n"
	       "(the whole segment, metadata included)\n");
	printf("attach = a fresh mapping with no page-table entries, as in a second process\n");

out:
	if (access(b.pool_path, F_OK) == 0)
		hc_pool_destroy(b.name, NULL, HC_DESTROY_FORCE);
	unlink(b.base_path);
	bench_cleanup_forget(b.pool_slot);
	bench_cleanup_forget(b.base_slot);
	bench_cleanup_run();
	return ret < 0 ? 1 : 0;
}
