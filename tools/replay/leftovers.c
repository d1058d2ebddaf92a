/* SPDX-License-Identifier: Apache-2.0 */
/*
 * leftovers.c - what replays that died left behind, removed by the next
 * one.  A replay names what it makes after its pid: the pool hcreplay-PID,
 * the shm backend's store hicache-l3.hcreplay-PID (both in /dev/shm), and
 * the file backend's directory hicache-replay-PID-XXXXXX under --dir.  It
 * removes them itself when it ends; a SIGKILL leaves them, and its ranks
 * die with it (PR_SET_PDEATHSIG).  So an entry whose PID no process has
 * is a dead run's.  A recycled PID keeps an entry until that process is
 * gone too: a leftover kept a while, never a live run's removed.
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay.h"

#define SHM_DIR "/dev/shm"

/* nftw's callbacks take no argument: the one removal shown, if any. */
static struct {
	struct hc_cli_progress *pg;
	uint64_t done, total;
} rm;

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	if (rm.pg && (++rm.done % 256 == 0 || rm.done == rm.total)) /* a step, not a line, per file */
		hc_cli_progress_show(rm.pg, "removing the L3's files", rm.done, rm.total, "files");
	return remove(path);
}

static int count_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path, (void)st, (void)flag, (void)ftw;
	rm.total++;
	return 0;
}

int hc_rp_rm_tree(const char *path, struct hc_cli_progress *pg)
{
	int r;

	rm.pg = NULL;
	rm.done = rm.total = 0;
	if (pg && nftw(path, count_one, 16, FTW_PHYS) == 0)
		rm.pg = pg;
	r = nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	rm.pg = NULL;
	return r;
}

/* The PID in name after prefix (and before '-' or the end), if it is a
 * dead process's: 1 and *pid, else 0. */
static int dead_pid(const char *name, const char *prefix, long *pid)
{
	size_t n = strlen(prefix);
	char *end;

	if (strncmp(name, prefix, n) || name[n] < '1' || name[n] > '9')
		return 0;
	errno = 0;
	*pid = strtol(name + n, &end, 10);
	if (errno || *pid <= 0 || *pid > (1L << 22) || (*end && *end != '-'))
		return 0;
	return kill((pid_t)*pid, 0) < 0 && errno == ESRCH;
}

unsigned hc_rp_sweep(const char *dir, FILE *say)
{
	unsigned gone = 0;
	struct dirent *e;
	char path[4352];
	DIR *d;
	long pid;

	if ((d = opendir(SHM_DIR))) {
		while ((e = readdir(d))) {
			if (dead_pid(e->d_name, "hicache.hcreplay-", &pid)) {
				if (hc_pool_destroy(e->d_name + strlen("hicache."), NULL, HC_DESTROY_FORCE) == 0) {
					fprintf(say,
						"hicache-bench replay: removed pool %s, left by replay pid %ld, gone\n",
						e->d_name + strlen("hicache."), pid);
					gone++;
				} else {
					fprintf(say,
						"hicache-bench replay: cannot remove pool %s, left by replay pid %ld: %s\n",
						e->d_name + strlen("hicache."), pid, hc_last_error());
				}
			} else if (dead_pid(e->d_name, "hicache-l3.hcreplay-", &pid)) {
				snprintf(path, sizeof(path), SHM_DIR "/%s", e->d_name);
				if (unlink(path) == 0) {
					fprintf(say, "hicache-bench replay: removed %s, left by replay pid %ld, gone\n",
						path, pid);
					gone++;
				}
			}
		}
		closedir(d);
	}
	if (dir && (d = opendir(dir))) {
		while ((e = readdir(d)))
			if (e->d_type == DT_DIR && dead_pid(e->d_name, "hicache-replay-", &pid)) {
				snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
				if (hc_rp_rm_tree(path, NULL) == 0) {
					fprintf(say, "hicache-bench replay: removed %s, left by replay pid %ld, gone\n",
						path, pid);
					gone++;
				} else {
					fprintf(say,
						"hicache-bench replay: cannot remove %s, left by replay pid %ld: %s\n",
						path, pid, strerror(errno));
				}
			}
		closedir(d);
	}
	return gone;
}
