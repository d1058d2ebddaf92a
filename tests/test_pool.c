/* SPDX-License-Identifier: Apache-2.0 */
/* test_pool.c - create, attach, detach, destroy, permissions, backing. */
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hct.h"

static char shm_path[512];

static const char *path_of(const char *dir, const char *name)
{
	snprintf(shm_path, sizeof(shm_path), "%s/hicache.%s", dir ? dir : "/dev/shm", name);
	return shm_path;
}

START_TEST(create_attach_destroy)
{
	const char *name = hct_name();
	struct hc_pool_info info;
	struct stat st;
	hc_pool *p = hct_create_attach(name, 8, 0, 0);

	ck_assert_int_eq(stat(path_of(NULL, name), &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	ck_assert_uint_eq(st.st_uid, geteuid());
	ck_assert_ok(hc_pool_info(p, &info, sizeof(info)));
	ck_assert_str_eq(info.name, name);
	ck_assert_str_eq(info.model_id, "test/model-7b");
	ck_assert_uint_eq(info.npages, 8);
	ck_assert_uint_eq(info.tp_size, 2);
	ck_assert_uint_eq(info.page_tokens, 16);
	ck_assert_uint_eq(info.envelope_bytes, 20480);
	ck_assert_uint_eq(info.segment_bytes, (uint64_t)st.st_size);
	ck_assert_uint_eq(info.max_ranks, 32);
	ck_assert_uint_eq(info.quarantine_ms, 2000);
	ck_assert_int_eq(info.self_slot, 0);
	ck_assert_uint_eq(info.creator_pid, (uint32_t)getpid());
	ck_assert_uint_eq(info.layout_major, 8);
	/* the request path's defaults: 64 requests, 128 completions, 64 KiB of arguments */
	ck_assert_uint_eq(info.host_mode, HC_HOST_CACHE);
	ck_assert_uint_eq(info.sq_entries, 64);
	ck_assert_uint_eq(info.cq_entries, 128);
	ck_assert_uint_eq(info.arg_bytes, 65536);
	/* no temporary file is left behind */
	char tmp[512];
	snprintf(tmp, sizeof(tmp), "/dev/shm/.hicache.%s.creating.%d", name, (int)getpid());
	ck_assert_int_ne(access(tmp, F_OK), 0);

	uint64_t counts[HC_PAGE__COUNT];
	ck_assert_ok(hc_pool_count_states(p, counts, HC_PAGE__COUNT));
	ck_assert_uint_eq(counts[HC_PAGE_FREE], 8);
	ck_assert_ok(hc_pool_detach(p));
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
	ck_assert_int_ne(access(path_of(NULL, name), F_OK), 0);
	ck_assert_err(hc_pool_destroy(name, NULL, 0), ENOENT);
}
END_TEST

/* What a progress callback heard: phases in order, each from 0 to its
 * total, never backwards. */
struct heard {
	char phase[4][16];
	uint64_t total[4], last[4];
	unsigned n, calls, bad;
};

static void hear(void *arg, const char *phase, uint64_t done, uint64_t total)
{
	struct heard *h = arg;

	h->calls++;
	if (!h->n || strcmp(h->phase[h->n - 1], phase)) { /* a new phase starts at 0 */
		if (h->n == 4 || done != 0) {
			h->bad++;
			return;
		}
		snprintf(h->phase[h->n++], sizeof(h->phase[0]), "%s", phase);
		h->total[h->n - 1] = total;
	} else if (done < h->last[h->n - 1] || total != h->total[h->n - 1] || done > total) {
		h->bad++;
	}
	h->last[h->n - 1] = done;
}

START_TEST(populated_attach)
{
	const char *name = hct_name();
	struct hct_spec s;
	struct heard made = { 0 }, attached = { 0 };
	hc_pool *p;

	hct_spec_init(&s, name, 8);
	s.spec.flags = 0; /* the real path: fallocate + MADV_POPULATE_WRITE */
	s.spec.progress = hear;
	s.spec.progress_arg = &made;
	ck_assert_ok(hc_pool_create(&s.spec));
	/* allocated, then populated, each told from 0 to the whole */
	ck_assert_uint_eq(made.bad, 0);
	ck_assert_uint_eq(made.n, 2);
	ck_assert_str_eq(made.phase[0], "allocate");
	ck_assert_str_eq(made.phase[1], "populate");
	ck_assert_uint_gt(made.total[0], 0);
	ck_assert_uint_eq(made.last[0], made.total[0]);
	ck_assert_uint_eq(made.last[1], made.total[1]);
	ck_assert_ok(hc_pool_attach(name,
				    &(struct hc_attach_opts){ .size = sizeof(struct hc_attach_opts),
							      .progress = hear,
							      .progress_arg = &attached },
				    &p));
	ck_assert_uint_eq(attached.bad, 0);
	ck_assert_uint_eq(attached.n, 1);
	ck_assert_str_eq(attached.phase[0], "populate");
	ck_assert_uint_eq(attached.last[0], attached.total[0]);
	ck_assert_uint_ge(attached.calls, 2);
	ck_assert_ok(hc_pool_detach(p));
	ck_assert_ok(hc_pool_attach(name, NULL, &p));
	/* the envelopes are zero and writable */
	uint8_t *e = hc_page_envelope(p, HC_PAGE_MAKE(7, 0));
	for (size_t i = 0; i < 20480; i++)
		ck_assert_uint_eq(e[i], 0);
	memset(e, 0xab, 20480);
	ck_assert_ok(hc_pool_detach(p));
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

/* HC_CREATE_SPARSE: the metadata is reserved and populated, the
 * envelopes are not, until a page is written; the pool works as any. */
START_TEST(sparse_envelopes)
{
	const char *name = hct_name();
	struct hct_spec s;
	struct stat st;
	struct hc_pool_info info;
	hc_key_t k[4];
	hc_pool *p;

	hct_spec_init(&s, name, 512); /* 10 MiB of envelopes */
	s.spec.flags = HC_CREATE_SPARSE;
	ck_assert_ok(hc_pool_create(&s.spec));
	ck_assert_ok(hc_pool_attach(name, NULL, &p));
	ck_assert_ok(hc_pool_info(p, &info, sizeof(info)));
	ck_assert_int_eq(stat(path_of(NULL, name), &st), 0);
	ck_assert_uint_le((uint64_t)st.st_blocks * 512, info.envelopes_offset); /* nothing past the metadata */
	hct_keys(k, 4, 61);
	ck_assert_int_eq(hct_store(p, k, 4, 0), 4);
	ck_assert_int_eq(hct_hit(p, k, 4), 4);
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
	ck_assert_ok(hc_pool_detach(p));
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
	s.spec.flags = 0x4; /* the next unknown bit */
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg(strstr(hc_last_error(), "unknown flags") != NULL, "%s", hc_last_error());
}
END_TEST

START_TEST(capacity_by_bytes)
{
	const char *name = hct_name();
	struct hct_spec s;
	struct hc_pool_info info;
	hc_pool *p;

	hct_spec_init(&s, name, 0);
	s.spec.capacity_bytes = 20480 * 5 + 100; /* rounds down to 5 pages */
	ck_assert_ok(hc_pool_create(&s.spec));
	p = hct_attach(name, HC_ATTACH_ADMIN);
	ck_assert_ok(hc_pool_info(p, &info, sizeof(info)));
	ck_assert_uint_eq(info.npages, 5);
	ck_assert_int_eq(info.self_slot, -1);
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

START_TEST(exists_and_names)
{
	const char *name = hct_name();
	struct hct_spec s;

	hct_spec_init(&s, name, 4);
	ck_assert_ok(hc_pool_create(&s.spec));
	ck_assert_err(hc_pool_create(&s.spec), EEXIST);
	ck_assert_msg_has("already exists");
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));

	const char *bad[] = { "",           "a/b",
			      "..",         ".hidden",
			      "a..b",       "sp ace",
			      "semi;colon", "x123456789012345678901234567890123456789012345678901234567890123456789" };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_err(hc_pool_name_valid(bad[i]), EINVAL);
		s.spec.name = bad[i];
		ck_assert_err(hc_pool_create(&s.spec), EINVAL);
		hc_pool *p;
		ck_assert_err(hc_pool_attach(bad[i], NULL, &p), EINVAL);
	}
	ck_assert_ok(hc_pool_name_valid("llama-3.1_8b"));
	s.spec.name = name;
	s.spec.dir = "relative/dir";
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("absolute");
}
END_TEST

START_TEST(group_mode)
{
	const char *name = hct_name();
	struct hct_spec s;
	struct stat st;
	struct group *gr = getgrgid(0);

	ck_assert_ptr_nonnull(gr);
	hct_spec_init(&s, name, 4);
	s.spec.group = gr->gr_name;
	ck_assert_ok(hc_pool_create(&s.spec));
	ck_assert_int_eq(stat(path_of(NULL, name), &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0660);
	ck_assert_uint_eq(st.st_gid, 0);
	hc_pool_detach(hct_attach(name, 0));
	/* a user outside the group is told whose it is and what to do, not
	 * just "Permission denied" (nobody: uid and gid 65534) */
	{
		pid_t pid = fork();
		int status;
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			hc_pool *q = NULL;
			char want[160];
			if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
				_exit(10);
			if (hc_pool_attach(name, NULL, &q) != -EACCES)
				_exit(11);
			snprintf(want, sizeof(want), "it belongs to uid 0 and group %s (gid 0), mode 0660",
				 gr->gr_name);
			if (!strstr(hc_last_error(), want) ||
			    !strstr(hc_last_error(), "(uid 65534) is not in that group") ||
			    !strstr(hc_last_error(), "usermod -aG"))
				_exit(12);
			_exit(0);
		}
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the other user's attach: status 0x%x",
			      status);
	}
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));

	s.spec.group = "no-such-group-hct";
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("no-such-group-hct");
	s.spec.group = NULL;
	s.spec.mode = 0644;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("0644");
}
END_TEST

START_TEST(destroy_live_and_force)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 0, 0);
	int fds[2];
	pid_t pid;
	char b;

	/* a live rank in another process */
	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	if (pid == 0) {
		hc_pool *c = hct_attach(name, 0);
		(void)c;
		if (write(fds[1], "r", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	ck_assert_int_eq(read(fds[0], &b, 1), 1);
	hc_pool_detach(p);
	ck_assert_err(hc_pool_destroy(name, NULL, 0), EBUSY);
	ck_assert_msg_has("live rank");
	ck_assert_ok(hc_pool_destroy(name, NULL, HC_DESTROY_FORCE));
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}
END_TEST

static int mount_tmpfs(char *dir, size_t len, const char *opts)
{
	snprintf(dir, len, "/tmp/hct-mnt-%d-XXXXXX", (int)getpid());
	if (!mkdtemp(dir))
		return -1;
	if (mount("hct", dir, "tmpfs", 0, opts) < 0) {
		rmdir(dir);
		return -1;
	}
	return 0;
}

static void unmount_tmpfs(const char *dir)
{
	umount2(dir, MNT_DETACH);
	rmdir(dir);
}

START_TEST(huge_page_tmpfs)
{
	char dir[128];
	const char *name = hct_name();
	struct hct_spec s;
	struct hc_pool_info info;
	struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts) };
	hc_pool *p;

	ck_assert_msg(mount_tmpfs(dir, sizeof(dir), "size=64m,huge=always,mode=0700") == 0,
		      "mount tmpfs huge=always: %s (the tests run as root)", strerror(errno));
	hct_spec_init(&s, name, 16);
	s.spec.dir = dir;
	s.spec.flags = 0;
	ck_assert_ok(hc_pool_create(&s.spec));
	o.dir = dir;
	ck_assert_ok(hc_pool_attach(name, &o, &p));
	ck_assert_ok(hc_pool_info(p, &info, sizeof(info)));
	ck_assert_int_eq(info.huge_pages, 1);
	ck_assert(strncmp(info.path, dir, strlen(dir)) == 0);
	hc_pool_detach(p);
	ck_assert_err(hc_pool_attach(name, NULL, &p), ENOENT); /* not in /dev/shm */
	ck_assert_ok(hc_pool_destroy(name, dir, 0));
	unmount_tmpfs(dir);
}
END_TEST

START_TEST(shm_too_small)
{
	char dir[128];
	const char *name = hct_name();
	struct hct_spec s;

	ck_assert_msg(mount_tmpfs(dir, sizeof(dir), "size=4m,mode=0700") == 0, "mount tmpfs: %s", strerror(errno));
	hct_spec_init(&s, name, 400); /* 8 MiB of envelopes */
	s.spec.dir = dir;
	s.spec.flags = 0;
	ck_assert_err(hc_pool_create(&s.spec), ENOSPC);
	ck_assert_msg_has("free");
	ck_assert_msg_has("--shm-size");
	/* nothing was left behind */
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s)\"", dir);
	ck_assert_int_eq(system(cmd), 0);
	unmount_tmpfs(dir);
}
END_TEST

static char logged[512];

static void capture_log(int level, const char *msg, void *arg)
{
	(void)arg;
	if (level == HC_LOG_WARN)
		snprintf(logged, sizeof(logged), "%s", msg);
}

START_TEST(warns_big_pool_on_small_pages)
{
	char dir[128];
	struct hct_spec s;

	hc_set_log(capture_log, NULL);
	for (int huge = 0; huge < 2; huge++) {
		ck_assert_msg(mount_tmpfs(dir, sizeof(dir), huge ? "size=4m,huge=always" : "size=4m") == 0,
			      "mount tmpfs: %s", strerror(errno));
		hct_spec_init(&s, hct_name(), 0);
		s.spec.dir = dir;
		s.spec.capacity_bytes = UINT64_C(5) << 30;
		logged[0] = 0;
		ck_assert_err(hc_pool_create(&s.spec), ENOSPC); /* and nothing was allocated */
		if (huge)
			ck_assert_str_eq(logged, "");
		else
			ck_assert_msg(strstr(logged, "4 KiB pages") && strstr(logged, "huge=always"), "log: %s",
				      logged);
		unmount_tmpfs(dir);
	}
}
END_TEST

START_TEST(larger_than_memory)
{
	struct hct_spec s;

	hct_spec_init(&s, hct_name(), 0);
	s.spec.capacity_bytes = UINT64_C(1) << 40; /* 1 TiB */
	ck_assert_int_lt(hc_pool_create(&s.spec), 0);
	ck_assert_msg(strstr(hc_last_error(), "GiB") != NULL, "%s", hc_last_error());
}
END_TEST

START_TEST(numa_options)
{
	const char *name = hct_name();
	struct hct_spec s;

	hct_spec_init(&s, name, 4);
	s.spec.flags = 0;
	s.spec.numa = HC_NUMA_BIND;
	s.spec.numa_nodes = "0";
	ck_assert_ok(hc_pool_create(&s.spec));
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
	s.spec.numa = HC_NUMA_INTERLEAVE;
	s.spec.numa_nodes = NULL;
	ck_assert_ok(hc_pool_create(&s.spec));
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
	s.spec.numa = HC_NUMA_BIND;
	s.spec.numa_nodes = "77";
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("77");
	s.spec.numa_nodes = NULL;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_int_ne(access(path_of(NULL, name), F_OK), 0);
}
END_TEST

START_TEST(readonly_attach)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 0, 0), *ro;
	hc_page_t pg;

	ro = hct_attach(name, HC_ATTACH_READONLY);
	ck_assert_err(hc_page_alloc(ro, 1, 1, &pg), EPERM);
	ck_assert_err(hc_pool_recover(ro, NULL, 0), EROFS);
	struct hc_rank_info ri;
	ck_assert_ok(hc_pool_rank(ro, 0, &ri, sizeof(ri)));
	ck_assert_int_eq(ri.live, 1);
	ck_assert_uint_eq(ri.pid, (uint32_t)getpid());
	hc_pool_detach(ro);
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("pool");
	TCase *tc = tcase_create("pool");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, create_attach_destroy);
	tcase_add_test(tc, populated_attach);
	tcase_add_test(tc, sparse_envelopes);
	tcase_add_test(tc, capacity_by_bytes);
	tcase_add_test(tc, exists_and_names);
	tcase_add_test(tc, group_mode);
	tcase_add_test(tc, destroy_live_and_force);
	tcase_add_test(tc, huge_page_tmpfs);
	tcase_add_test(tc, shm_too_small);
	tcase_add_test(tc, warns_big_pool_on_small_pages);
	tcase_add_test(tc, larger_than_memory);
	tcase_add_test(tc, numa_options);
	tcase_add_test(tc, readonly_attach);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
