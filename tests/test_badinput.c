/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_badinput.c - every bad input to create and attach gets a clear error
 * and no crash: missing pools, files that are not pools, truncation, wrong
 * magic or version, corrupt headers, bad geometry, wrong owner or mode.
 */
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hct.h"

static char pathbuf[512];

static const char *shm(const char *name)
{
	snprintf(pathbuf, sizeof(pathbuf), "/dev/shm/hicache.%s", name);
	return pathbuf;
}

static const char *make_pool(void)
{
	const char *name = hct_name();
	struct hct_spec s;

	hct_spec_init(&s, name, 4);
	ck_assert_ok(hc_pool_create(&s.spec));
	return name;
}

/* Overwrite bytes of a pool file at 'off'. */
static void poke(const char *name, off_t off, const void *b, size_t n)
{
	int fd = open(shm(name), O_RDWR);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, b, n, off), (ssize_t)n);
	close(fd);
}

static int try_attach(const char *name)
{
	hc_pool *p = NULL;
	int ret = hc_pool_attach(name, NULL, &p);

	if (ret == 0)
		hc_pool_detach(p);
	else
		ck_assert_ptr_null(p);
	return ret;
}

START_TEST(missing_pool)
{
	ck_assert_err(try_attach("hctest-none-such"), ENOENT);
	ck_assert_msg_has("no pool 'hctest-none-such'");
	ck_assert_msg_has("hicache-pool create");
}
END_TEST

START_TEST(not_a_pool)
{
	const char *name = hct_name();
	char junk[8192];
	int fd = open(shm(name), O_CREAT | O_WRONLY | O_EXCL, 0600);

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)(i * 7);
	ck_assert_int_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("not a hicache pool");
	unlink(shm(name));
}
END_TEST

START_TEST(tiny_file)
{
	const char *name = hct_name();
	int fd = open(shm(name), O_CREAT | O_WRONLY | O_EXCL, 0600);

	ck_assert_int_eq(write(fd, "hello", 5), 5);
	close(fd);
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("truncated");
	unlink(shm(name));
}
END_TEST

START_TEST(directory_and_symlink)
{
	const char *name = hct_name();
	char target[512];

	ck_assert_int_eq(mkdir(shm(name), 0700), 0);
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("not a regular file");
	rmdir(shm(name));

	/* a FIFO must not block the attach */
	ck_assert_int_eq(mkfifo(shm(name), 0600), 0);
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("not a regular file");
	unlink(shm(name));

	const char *real = make_pool();
	snprintf(target, sizeof(target), "%s", shm(real));
	ck_assert_int_eq(symlink(target, shm(name)), 0);
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("symbolic link");
	unlink(shm(name));
	ck_assert_ok(hc_pool_destroy(real, NULL, 0));
}
END_TEST

START_TEST(truncated_segment)
{
	const char *name = make_pool();
	struct stat st;

	ck_assert_int_eq(stat(shm(name), &st), 0);
	ck_assert_int_eq(truncate(shm(name), st.st_size - (2 << 20)), 0);
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("truncated");
	ck_assert_int_eq(truncate(shm(name), st.st_size + (2 << 20)), 0);
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("padded");
	/* down to its header: said so, not that a table is out of place */
	ck_assert_int_eq(truncate(shm(name), 4096), 0);
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("is truncated or padded: the header says");
	ck_assert_msg_has("the file has 4096");
	ck_assert_err(hc_pool_destroy(name, NULL, 0), EBADMSG);
	ck_assert_msg_has("--force");
	ck_assert_ok(hc_pool_destroy(name, NULL, HC_DESTROY_FORCE));
}
END_TEST

START_TEST(wrong_magic)
{
	const char *name = make_pool();
	uint8_t b = 'X';

	poke(name, 0, &b, 1);
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("bad magic");
	ck_assert_ok(hc_pool_destroy(name, NULL, HC_DESTROY_FORCE));
}
END_TEST

START_TEST(wrong_version)
{
	const char *name = make_pool();
	uint32_t v = 99;

	poke(name, offsetof(struct hc_seg_hdr, layout_major), &v, 4);
	ck_assert_err(try_attach(name), EPROTO);
	{
		char want[64];
		snprintf(want, sizeof(want), "layout version 99.%u", HC_LAYOUT_MINOR);
		ck_assert_msg_has(want);
	}
	ck_assert_msg_has("recreate");
	ck_assert_ok(hc_pool_destroy(name, NULL, HC_DESTROY_FORCE));
}
END_TEST

START_TEST(newer_minor_accepted)
{
	const char *name = make_pool();
	struct hc_seg_hdr h;
	int fd = open(shm(name), O_RDWR);

	/* A newer minor only appends: attach it (re-sealing the digest as its creator would). */
	ck_assert_int_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	struct hc_seg_comp rc[2];
	ck_assert_int_eq(pread(fd, rc, sizeof(rc), 4096), (ssize_t)sizeof(rc));
	h.layout_minor = HC_LAYOUT_MINOR + 3;
	hc__meta_digest(&h, rc, 2, h.meta_digest);
	ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	ck_assert_int_eq(try_attach(name), 0);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

START_TEST(corrupt_header_fields)
{
	const size_t offs[] = { offsetof(struct hc_seg_hdr, npages),      offsetof(struct hc_seg_hdr, envelope_bytes),
				offsetof(struct hc_seg_hdr, toc) + 8 * 5, offsetof(struct hc_seg_hdr, model_id),
				offsetof(struct hc_seg_hdr, max_ranks),   4096 + 40 /* a component's kv_heads */ };

	for (unsigned i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		const char *name = make_pool();
		uint8_t b = 0x5a;
		poke(name, (off_t)offs[i], &b, 1);
		ck_assert_err(try_attach(name), EBADMSG);
		ck_assert_msg_has("checksum");
		ck_assert_ok(hc_pool_destroy(name, NULL, HC_DESTROY_FORCE));
	}
}
END_TEST

/* A header whose digest is right but whose geometry lies: a sealed forgery. */
START_TEST(forged_geometry)
{
	const char *name = make_pool();
	struct hc_seg_hdr h;
	struct hc_seg_comp rc[2];
	int fd = open(shm(name), O_RDWR);

	ck_assert_int_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ck_assert_int_eq(pread(fd, rc, sizeof(rc), 4096), (ssize_t)sizeof(rc));
	h.npages = 1000; /* more pages than the file holds */
	hc__meta_digest(&h, rc, 2, h.meta_digest);
	ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("out of place");

	h.npages = 4;
	rc[0].group_stride += 4096; /* strides that do not follow from the shape */
	hc__meta_digest(&h, rc, 2, h.meta_digest);
	ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ck_assert_int_eq(pwrite(fd, rc, sizeof(rc), 4096), (ssize_t)sizeof(rc));
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("strides");

	rc[0].group_stride -= 4096;
	h.ncomp = 0;
	hc__meta_digest(&h, rc, 0, h.meta_digest);
	ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ck_assert_int_eq(pwrite(fd, rc, sizeof(rc), 4096), (ssize_t)sizeof(rc));
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("component count");

	h.ncomp = 2;
	h.cq_entries = h.sq_entries; /* rings that do not follow the rule */
	hc__meta_digest(&h, rc, 2, h.meta_digest);
	ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("completions are twice");

	h.cq_entries = 2 * h.sq_entries;
	h.arg_bytes += 4096; /* a request path bigger than the table of offsets says */
	hc__meta_digest(&h, rc, 2, h.meta_digest);
	ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("out of place");

	h.arg_bytes -= 4096;
	h.fingerprint[0] ^= 1;
	hc__meta_digest(&h, rc, 2, h.meta_digest);
	ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("fingerprint");

	h.fingerprint[0] ^= 1;
	memcpy(h.model_id, "a\033[2Jb", sizeof("a\033[2Jb")); /* it would clear the terminal of info and ls */
	hc__meta_digest(&h, rc, 2, h.meta_digest);
	ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ck_assert_err(try_attach(name), EBADMSG);
	ck_assert_msg_has("model id has a control byte");
	close(fd);
	ck_assert_ok(hc_pool_destroy(name, NULL, HC_DESTROY_FORCE));
}
END_TEST

START_TEST(wrong_mode)
{
	const char *name = make_pool();

	ck_assert_int_eq(chmod(shm(name), 0666), 0);
	ck_assert_err(try_attach(name), EPERM);
	ck_assert_msg_has("0666");
	ck_assert_msg_has("chmod");
	ck_assert_int_eq(chmod(shm(name), 0700), 0);
	ck_assert_err(try_attach(name), EPERM);
	ck_assert_msg_has("execute");
	ck_assert_int_eq(chmod(shm(name), 0600), 0);
	ck_assert_int_eq(try_attach(name), 0);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

START_TEST(wrong_owner)
{
	const char *name = make_pool();
	pid_t pid;
	int status;

	/* Owned by uid 4242; attach as uid 4343, not in any group of the file. */
	ck_assert_int_eq(chown(shm(name), 4242, 4242), 0);
	pid = fork();
	if (pid == 0) {
		gid_t none[1] = { 4343 };
		hc_pool *p;
		if (setgroups(1, none) || setresgid(4343, 4343, 4343) || setresuid(4343, 4343, 4343))
			_exit(10);
		int ret = hc_pool_attach(name, NULL, &p);
		_exit(ret == -EACCES && strstr(hc_last_error(), "ermission") ? 0 : 11);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(WEXITSTATUS(status), 0);

	/* Shared with a group the other uid is not in: still refused, by our check. */
	ck_assert_int_eq(chmod(shm(name), 0660), 0);
	ck_assert_int_eq(chown(shm(name), 4242, 4242), 0);
	pid = fork();
	if (pid == 0) {
		gid_t none[1] = { 4343 };
		hc_pool *p;
		if (setgroups(1, none) || setresgid(4343, 4343, 4343) || setresuid(4343, 4343, 4343))
			_exit(10);
		int ret = hc_pool_attach(name, NULL, &p);
		_exit(ret == -EACCES ? 0 : 12);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(WEXITSTATUS(status), 0);

	/* ...and accepted for a member of that group. */
	pid = fork();
	if (pid == 0) {
		gid_t grp[1] = { 4242 };
		hc_pool *p;
		if (setgroups(1, grp) || setresgid(4242, 4242, 4242) || setresuid(4343, 4343, 4343))
			_exit(10);
		int ret = hc_pool_attach(name,
					 &(struct hc_attach_opts){ .size = sizeof(struct hc_attach_opts),
								   .flags = HC_ATTACH_NO_POPULATE },
					 &p);
		_exit(ret == 0 ? 0 : 13);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

START_TEST(bad_specs)
{
	struct hct_spec s;

	ck_assert_err(hc_pool_create(NULL), EINVAL);

	hct_spec_init(&s, hct_name(), 4);
	s.spec.capacity_pages = 0;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("exactly one capacity");

	hct_spec_init(&s, hct_name(), 4);
	s.spec.capacity_bytes = 1 << 20;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("exactly one capacity");

	hct_spec_init(&s, hct_name(), 0);
	s.spec.capacity_bytes = 100;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("holds no page");

	hct_spec_init(&s, hct_name(), UINT32_C(1) << 31 | 1);
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);

	hct_spec_init(&s, hct_name(), 4);
	s.spec.model_id = "";
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("model id");

	hct_spec_init(&s, hct_name(), 4);
	s.spec.page_tokens = 0;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);

	hct_spec_init(&s, hct_name(), 4);
	s.spec.max_ranks = 129;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("max_ranks");

	hct_spec_init(&s, hct_name(), 4);
	s.comps[0].head_bytes = 1u << 30;
	s.comps[0].kv_heads = 1u << 30;
	s.comps[0].layers = 1u << 30;
	ck_assert_err(hc_pool_create(&s.spec), EOVERFLOW);

	hct_spec_init(&s, hct_name(), 4);
	s.spec.ncomp = 17;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);

	hct_spec_init(&s, hct_name(), 4);
	s.comps[1].name = NULL;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);

	hct_spec_init(&s, hct_name(), 4);
	s.spec.mode = 0400;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("0400");

	hct_spec_init(&s, hct_name(), 4);
	s.spec.ring_entries = 48; /* not a power of two */
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("power of two in 8..4096");
	s.spec.ring_entries = 8192;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);

	hct_spec_init(&s, hct_name(), 4);
	s.spec.arg_bytes = 5000;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("argument area of 5000 bytes");

	hct_spec_init(&s, hct_name(), 4);
	s.spec.host_mode = (enum hc_host_mode)2;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("host-memory mode 2");

	hct_spec_init(&s, hct_name(), 4);
	s.spec.flags = 0x80;
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_msg_has("unknown flags");
	ck_assert_err(hc_pool_destroy(s.spec.name, NULL, 0x10), EINVAL);
	hc_pool *p;
	ck_assert_err(hc_pool_attach(s.spec.name,
				     &(struct hc_attach_opts){ .size = sizeof(struct hc_attach_opts), .flags = 0x100 },
				     &p),
		      EINVAL);

	/* no file is left by any of the failures */
	char pfx[64];
	struct dirent *e;
	DIR *d = opendir("/dev/shm");
	snprintf(pfx, sizeof(pfx), "hctest-%d-", (int)getpid());
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		ck_assert_msg(strstr(e->d_name, pfx) == NULL, "left behind: %s", e->d_name);
	closedir(d);
}
END_TEST

START_TEST(bad_page_args)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 0, 0);
	hc_page_t pg, bad = HC_PAGE_MAKE(4, 0), huge = HC_PAGE_MAKE(0xffffffffu, 0);
	void *a;
	size_t len;

	ck_assert_int_eq(hc_page_alloc(p, 1, 3, &pg), 1);
	ck_assert_err(hc_page_addr(p, bad, 0, 0, 0, &a, &len), EINVAL);
	ck_assert_err(hc_page_addr(p, huge, 0, 0, 0, &a, &len), EINVAL);
	ck_assert_err(hc_page_addr(p, pg, 2, 0, 0, &a, &len), EINVAL);
	ck_assert_err(hc_page_addr(p, pg, 0, 2, 0, &a, &len), EINVAL);
	ck_assert_err(hc_page_addr(p, pg, 0, 0, 2, &a, &len), EINVAL);
	ck_assert_err(hc_page_addr(p, pg, 1, 0, 1, &a, &len), EINVAL); /* replicated: one group */
	ck_assert_err(hc_page_commit(p, bad, 1), EINVAL);
	ck_assert_err(hc_page_commit(p, pg, 0), EINVAL);
	ck_assert_err(hc_page_commit(p, pg, 4), EINVAL); /* group 2 of 2 */
	ck_assert_err(hc_page_pin(p, huge), EINVAL);
	ck_assert_err(hc_page_unpin(p, bad), EINVAL);
	ck_assert_err(hc_page_free(p, &bad, 1), EINVAL);
	ck_assert_err(hc_page_abort(p, &huge, 1), EINVAL);
	ck_assert_err(hc_page_alloc(p, 0, 3, &pg), EINVAL);
	ck_assert_err(hc_page_alloc(p, 5, 3, &pg), ENOSPC);
	ck_assert_err(hc_page_alloc(p, 1, 0, &pg), EINVAL);
	ck_assert_err(hc_page_alloc(p, 1, 4, &pg), EINVAL);
	ck_assert_err(hc_page_alloc(p, 1, 1, NULL), EINVAL);
	ck_assert_err(hc_page_state(p, 4, NULL, NULL, NULL), EINVAL);
	ck_assert_err(
		hc_pool_component(p, 2, &(struct hc_component_info){ 0 }, sizeof((struct hc_component_info){ 0 })),
		EINVAL);
	ck_assert_err(hc_pool_rank(p, 32, &(struct hc_rank_info){ 0 }, sizeof((struct hc_rank_info){ 0 })), EINVAL);
	/* a read-only attachment cannot change anything, and does not crash trying */
	hc_pool *ro = hct_attach(name, HC_ATTACH_READONLY);
	ck_assert_err(hc_page_commit(ro, pg, 1), EPERM);
	ck_assert_err(hc_page_abort(ro, &pg, 1), EPERM);
	ck_assert_err(hc_page_free(ro, &pg, 1), EPERM);
	ck_assert_err(hc_page_pin(ro, pg), EPERM);
	hc_pool_detach(ro);
	/* a failed abort keeps its reason */
	ck_assert_err(hc_page_abort(p, &bad, 1), EINVAL);
	ck_assert_msg_has("out of range");
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

/* A page id scribbled into the segment is caught at use, not followed. */
START_TEST(scribbled_page_words)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 50, 0);
	struct hc_recovery_report rep;
	hc_page_t pg[4];

	atomic_store(&p->pages[1].word, UINT64_MAX);                              /* invalid state */
	atomic_store(&p->pages[2].word, hc__w_make(HC_PAGE_RESERVED, 100, 1, 1)); /* owner past max_ranks */
	ck_assert_ok(hc_pool_recover(p, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.bad_words, 2);
	ck_assert_int_eq(hc_page_state(p, 1, NULL, NULL, NULL), HC_PAGE_QUARANTINE);
	usleep(80 * 1000);
	ck_assert_ok(hc_pool_recover(p, &rep, sizeof(rep)));
	ck_assert_uint_eq(rep.released, 2);
	ck_assert_int_eq(hc_page_alloc(p, 4, 1, pg), 4);
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("badinput");
	TCase *tc = tcase_create("badinput");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, missing_pool);
	tcase_add_test(tc, not_a_pool);
	tcase_add_test(tc, tiny_file);
	tcase_add_test(tc, directory_and_symlink);
	tcase_add_test(tc, truncated_segment);
	tcase_add_test(tc, wrong_magic);
	tcase_add_test(tc, wrong_version);
	tcase_add_test(tc, newer_minor_accepted);
	tcase_add_test(tc, corrupt_header_fields);
	tcase_add_test(tc, forged_geometry);
	tcase_add_test(tc, wrong_mode);
	tcase_add_test(tc, wrong_owner);
	tcase_add_test(tc, bad_specs);
	tcase_add_test(tc, bad_page_args);
	tcase_add_test(tc, scribbled_page_words);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
