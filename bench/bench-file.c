/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-file.c - the file backend's put and get against fio with its
 * io_uring engine, in the same run, on the same directory, at the same
 * block size and queue depth (doc/design.md, "Measuring").
 *
 * Ours:  hc_store_put / hc_store_get of every page of a pool, through the
 *        file backend (one object per page: a 4096-byte header and the
 *        envelope), queue_depth ops in flight; each op checksums its page
 *        (XXH3) and a get checks header and checksum.
 * fio:   one file per object of the same size, one I/O per file
 *        (bs = filesize = the object's size), iodepth = the same queue
 *        depth, files created as they are opened (so fio pays for creation
 *        as the backend does); once plain, once with verify=xxhash (fio
 *        checksums every block it writes and checks every block it reads).
 *
 *        A third peer, fio on one file of the same total size at the same
 *        block size, is the disk's best case with no file per object.
 * O_DIRECT is the figure that counts (target 0.9 of fio).  Buffered mode
 * is also printed: with this much RAM it measures the page cache, so it is
 * informational.  Repetitions interleave ours and fio's; medians print.
 */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <json-c/json.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>

#include "l3.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

static char base[512];
static unsigned one_file_objs; /* objects the one-file peer's file holds */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(path);
}

static void rm_tree(const char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void cleanup(void)
{
	if (base[0])
		rm_tree(base);
}

/* fio's bandwidth in bytes/s of one job, or exit on failure.  nfiles 0:
 * one file of the same total size (the disk's best case at this block size). */
static double fio(const char *dir, int write, int direct, int verify, unsigned nfiles, uint64_t obj, unsigned qd)
{
	char files[128];

	char cmd[2048], out[600];
	struct json_object *j, *jobs, *job, *side, *bw;
	double v;
	int r;

	snprintf(out, sizeof(out), "%s/fio.json", base);
	if (nfiles)
		snprintf(
			files, sizeof(files),
			"--filesize=%llu --nrfiles=%u --create_on_open=1 --fallocate=none --file_service_type=sequential",
			(unsigned long long)obj, nfiles);
	else
		snprintf(files, sizeof(files), "--size=%llu", (unsigned long long)(obj * one_file_objs));
	snprintf(cmd, sizeof(cmd),
		 "fio --name=%s --directory=%s --ioengine=io_uring --direct=%d --rw=%s --bs=%llu --iodepth=%u "
		 "%s %s --verify_state_save=0 --output-format=json --output=%s >/dev/null 2>&1",
		 nfiles ? "obj" : "one", dir, direct, write ? "write" : "read", (unsigned long long)obj, qd, files,
		 verify ? (write ? "--verify=xxhash --do_verify=0" : "--verify=xxhash") : "", out);
	r = system(cmd);
	if (r != 0) {
		fprintf(stderr, "bench-file: fio failed (status %d): %s\n", r, cmd);
		exit(1);
	}
	j = json_object_from_file(out);
	if (!j || !json_object_object_get_ex(j, "jobs", &jobs) || !(job = json_object_array_get_idx(jobs, 0)) ||
	    !json_object_object_get_ex(job, write ? "write" : "read", &side) ||
	    !json_object_object_get_ex(side, "bw_bytes", &bw)) {
		fprintf(stderr, "bench-file: cannot read fio's report %s\n", out);
		exit(1);
	}
	v = json_object_get_double(bw);
	json_object_put(j);
	return v;
}

int main(int argc, char **argv)
{
	unsigned npages = 256, page_kib = 4096, qd = 16, reps = 3;
	const char *parent = "/var/tmp";
	static const struct option lo[] = { { "dir", required_argument, NULL, 'd' },
					    { "pages", required_argument, NULL, 'n' },
					    { "page-kib", required_argument, NULL, 'k' },
					    { "qd", required_argument, NULL, 'q' },
					    { "reps", required_argument, NULL, 'r' },
					    { "help", no_argument, NULL, 'h' },
					    { 0 } };
	struct l3b b;
	struct statfs sf;
	int c;

	while ((c = getopt_long(argc, argv, "d:n:k:q:r:h", lo, NULL)) != -1) {
		switch (c) {
		case 'd':
			parent = optarg;
			break;
		case 'n':
			npages = l3b_count("bench-file", "pages", optarg);
			break;
		case 'k':
			page_kib = l3b_count("bench-file", "page-kib", optarg);
			break;
		case 'q':
			qd = l3b_count("bench-file", "qd", optarg);
			break;
		case 'r':
			reps = l3b_count("bench-file", "reps", optarg);
			break;
		default:
			printf("usage: bench-file [--dir PARENT] [--pages N] [--page-kib K] [--qd Q] [--reps R]\n"
			       "  a scratch directory is made under PARENT (default /var/tmp) and removed\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (npages < 8 || page_kib < 256 || page_kib % 256 || qd < 1 || qd > 4096 || reps < 1 || reps > 15) {
		fprintf(stderr, "bench-file: --pages >= 8, --page-kib a multiple of 256, --qd 1..4096, --reps 1..15\n");
		return 2;
	}
	if (system("fio --version >/dev/null 2>&1") != 0) {
		fprintf(stderr, "bench-file: fio is missing, and it is the peer: apt-get install fio\n");
		return 1;
	}
	bench_cleanup_init();
	snprintf(base, sizeof(base), "%s/hicache-bench-file-%d", parent, (int)getpid());
	if (mkdir(base, 0700) < 0) {
		fprintf(stderr, "bench-file: mkdir %s: %s\n", base, strerror(errno));
		return 1;
	}
	atexit(cleanup);
	if (statfs(base, &sf) == 0 && sf.f_type == TMPFS_MAGIC)
		fprintf(stderr, "bench-file: warning: %s is on tmpfs, not a disk: give --dir on a real filesystem\n",
			base);

	l3b_pool(&b, npages, page_kib);
	uint64_t obj = b.env_bytes + 4096, total = obj * npages;
	printf("file backend vs fio (io_uring): %u objects of %.2f MiB (%.2f GiB), queue depth %u, %u reps, %s\n",
	       npages, (double)obj / 1048576, (double)total / 1073741824, qd, reps, base);
	one_file_objs = npages;
	printf("%-10s %-5s %10s %10s %6s %13s %6s %13s %6s\n", "mode", "op", "ours GB/s", "fio GB/s", "ratio",
	       "fio+xxh GB/s", "ratio", "fio 1 file", "ratio");
	for (int direct = 1; direct >= 0; direct--) {
		double ours[2][15], plain[2][15], ver[2][15], one[2][15];
		char spec[1200], odir[600], fdir[600];

		snprintf(odir, sizeof(odir), "%s/ours", base);
		snprintf(fdir, sizeof(fdir), "%s/fio", base);
		snprintf(spec, sizeof(spec), "file:dir=%s,direct=%s", odir, direct ? "on" : "off");
		for (unsigned r = 0; r < reps; r++) {
			mkdir(odir, 0700);
			mkdir(fdir, 0700);
			if (!direct)
				sync();
			l3b_open(&b, spec, qd);
			ours[0][r] = (double)total / l3b_put(&b, 1) / 1e9;
			plain[0][r] = fio(fdir, 1, direct, 0, npages, obj, qd) / 1e9;
			ours[1][r] = (double)total / l3b_get(&b, 1) / 1e9;
			plain[1][r] = fio(fdir, 0, direct, 0, npages, obj, qd) / 1e9;
			l3b_close(&b);
			rm_tree(odir);
			rm_tree(fdir);
			mkdir(fdir, 0700);
			ver[0][r] = fio(fdir, 1, direct, 1, npages, obj, qd) / 1e9;
			ver[1][r] = fio(fdir, 0, direct, 1, npages, obj, qd) / 1e9;
			rm_tree(fdir);
			mkdir(fdir, 0700);
			one[0][r] = fio(fdir, 1, direct, 0, 0, obj, qd) / 1e9;
			one[1][r] = fio(fdir, 0, direct, 0, 0, obj, qd) / 1e9;
			rm_tree(fdir);
		}
		for (int op = 0; op < 2; op++) {
			double o = bench_median(ours[op], reps), p = bench_median(plain[op], reps),
			       v = bench_median(ver[op], reps), f = bench_median(one[op], reps);
			printf("%-10s %-5s %10.2f %10.2f %6.2f %13.2f %6.2f %13.2f %6.2f\n",
			       direct ? "O_DIRECT" : "buffered", op ? "get" : "put", o, p, o / p, v, o / v, f, o / f);
		}
	}
	l3b_done(&b);
	return 0;
}
