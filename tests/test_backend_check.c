/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_backend_check.c - hicache-backend-check, run as a program: the
 * conformance suite against an in-tree backend by name and a fixture by
 * path (exit 0, and nothing of the cases left in the store), against a
 * plugin with a broken EXISTS and one the loader refuses (exit 1, each
 * failure naming the backend and the case), and each usage error (exit 2,
 * saying what was wrong).  Check's own variables in its environment change
 * nothing: it sets the fork mode and chooses its cases itself.
 */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

#include <hicache/version.h>

#include "conformance.h"
#include "hct.h"

static struct run {
	int status;
	char out[32768];
	char err[8192];
} r; /* one per forked test: too big for the stack */

/* Runs the tool with args (NULL-terminated) and wants exit status want. */
static void run(int want, const char *const *args)
{
	r.status = hct_tool_run("hicache-backend-check", args, r.out, sizeof(r.out), r.err, sizeof(r.err));
	ck_assert_msg(r.status == want, "exit %d, want %d\nstdout: %s\nstderr: %s", r.status, want, r.out, r.err);
}

#define RUN(want, ...)          run(want, (const char *const[]){ __VA_ARGS__, NULL })
#define ck_assert_has(where, s) ck_assert_msg(strstr((where), (s)) != NULL, "'%s' lacks '%s'", (where), (s))

static int files_left;

static int count_file(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	/* the file backend's lock stays, as do the directories it made */
	if (flag == FTW_F && strcmp(path + ftw->base, ".hicache-file.lock") != 0)
		files_left++;
	return 0;
}

/* Regular files under dir, but the file backend's lock. */
static int files_under(const char *dir)
{
	files_left = 0;
	ck_assert_int_eq(nftw(dir, count_file, 16, FTW_PHYS), 0);
	return files_left;
}

START_TEST(usage_errors)
{
	RUN(2, "--bogus");
	ck_assert_has(r.err, "unknown option '--bogus'");
	RUN(2, "--timeout", "soon", "mem");
	ck_assert_has(r.err, "--timeout");
	run(2, (const char *const[]){ NULL });
	ck_assert_has(r.err, "no backend: give one SPEC");
	RUN(2, "mem", "file");
	ck_assert_has(r.err, "more than one backend");
	RUN(2, "--case", "roundtrip,nosuch", "mem");
	ck_assert_has(r.err, "no case 'nosuch' (--list shows them)");
	/* the spec: the loader's words, and what to do */
	RUN(2, "nosuch");
	ck_assert_has(r.err, "backend nosuch: not found");
	ck_assert_has(r.err, "HICACHE_BACKEND_PATH");
	RUN(2, "/nonexistent/heap.so");
	ck_assert_has(r.err, "not found");
	RUN(2, "bad name");
	ck_assert_has(r.err, "is not valid");
	RUN(2, "mem:no_such_option=1");
	ck_assert_has(r.err, "unknown option 'no_such_option'");
	ck_assert_str_eq(r.out, "");
}
END_TEST

START_TEST(help_version_list)
{
	RUN(0, "--help");
	ck_assert_has(r.out, "Usage: hicache-backend-check");
	RUN(0, "--version");
	ck_assert_has(r.out, HICACHE_VERSION_STRING);
	RUN(0, "--list");
	for (unsigned i = 0; i < hct_conf_ncases(); i++)
		ck_assert_has(r.out, hct_conf_case(i)->name);
}
END_TEST

/* The file backend by name, as HICACHE_BACKEND_PATH finds it: every case
 * passes and deletes what it wrote; Check's variables are ignored. */
START_TEST(file_passes)
{
	char spec[160], summary[64];

	hct_l3_setup();
	snprintf(spec, sizeof(spec), "%s", hct_l3_spec);
	setenv("CK_FORK", "no", 1);
	setenv("CK_RUN_CASE", "nosuch", 1);
	setenv("CK_TIMEOUT_MULTIPLIER", "0.001", 1);
	RUN(0, spec);
	snprintf(summary, sizeof(summary), "file: %u of %u cases passed", hct_conf_ncases(), hct_conf_ncases());
	ck_assert_has(r.out, summary);
	ck_assert_has(r.out, "backend file (");
	ck_assert_int_eq(files_under(hct_l3_dir), 0);
	hct_l3_teardown();
}
END_TEST

/* A plugin by its path, and some of the cases. */
START_TEST(path_and_cases)
{
	char spec[1100];
	const char *b = getenv("HC_BUILDDIR");

	snprintf(spec, sizeof(spec), "%s/tests/fixtures/.libs/mem.so:max_objects=0", b && *b ? b : ".");
	RUN(0, "--case", "raw_ops,roundtrip", "-c", "presence", spec);
	ck_assert_has(r.out, "PASS  roundtrip");
	ck_assert_has(r.out, "PASS  raw_ops");
	ck_assert_has(r.out, "PASS  presence");
	ck_assert_msg(strstr(r.out, "large_batch") == NULL, "a case not chosen ran: %s", r.out);
	ck_assert_has(r.out, "mem: 3 of 3 cases passed");
}
END_TEST

/* The fault fixture with EXISTS broken: the cases that use it fail, each
 * line naming the backend and the case; what they stored is deleted. */
START_TEST(broken_exists)
{
	char spec[160];

	hct_l3_setup();
	snprintf(spec, sizeof(spec), "fault:dir=%s,fail_exists_every=1", hct_l3_dir);
	RUN(1, spec);
	ck_assert_has(r.out, "FAIL  roundtrip");
	ck_assert_has(r.out, "backend fault, case roundtrip: ");
	ck_assert_has(r.out, "backend fault, case raw_ops: ");
	ck_assert_has(r.out, "PASS  raw_misaligned");
	ck_assert_int_eq(files_under(hct_l3_dir), 0);
	RUN(1, "--case", "exists_mixed", spec);
	ck_assert_has(r.out, "backend fault, case exists_mixed: ");
	ck_assert_has(r.out, "fault: 0 of 1 cases passed");
	ck_assert_int_eq(files_under(hct_l3_dir), 0);
	hct_l3_teardown();
}
END_TEST

/* A plugin the loader refuses fails before any case, named. */
START_TEST(refused_plugin)
{
	RUN(1, "bad_version");
	ck_assert_has(r.out, "FAIL  open");
	ck_assert_has(r.out, "backend bad_version: ");
	ck_assert_has(r.out, "ABI version 2");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("backend_check");
	TCase *tc = tcase_create("tool");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, usage_errors);
	tcase_add_test(tc, help_version_list);
	tcase_add_test(tc, file_passes);
	tcase_add_test(tc, path_and_cases);
	tcase_add_test(tc, broken_exists);
	tcase_add_test(tc, refused_plugin);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
