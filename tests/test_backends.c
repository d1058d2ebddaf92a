/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_backends.c - the conformance suite (tests/conformance.c) run once
 * per backend of the table below, each a loop test over it.  Then the
 * loader's refusals of broken plugins, and the host's handling of a plugin
 * that fails or breaks the ABI, with the fixtures.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hicache/backend.h>

#include "conformance.h"
#include "hct.h"
#include "mcd.h"
#include "memd.h"

/* ---- the backends under test */

static void mem_setup(char *spec, size_t len)
{
	snprintf(spec, len, "mem");
}

/* shm stores: /dev/shm/hicache-l3.hctl3-<suite pid>-<test pid>, swept by main */
static pid_t suite_pid;
static char shm_name[64];

static void shm_setup(char *spec, size_t len)
{
	snprintf(shm_name, sizeof(shm_name), "hctl3-%d-%d", (int)suite_pid, (int)getpid());
	snprintf(spec, len, "shm:name=%s,capacity=48M,populate=0", shm_name);
}

static void shm_cleanup(void)
{
	char path[128];

	snprintf(path, sizeof(path), "/dev/shm/hicache-l3.%s", shm_name);
	unlink(path);
}

static void shm_sweep(void)
{
	char prefix[64], path[512];
	struct dirent *d;
	DIR *dir = opendir("/dev/shm");

	snprintf(prefix, sizeof(prefix), "hicache-l3.hctl3-%d-", (int)suite_pid);
	while (dir && (d = readdir(dir)))
		if (strncmp(d->d_name, prefix, strlen(prefix)) == 0) {
			snprintf(path, sizeof(path), "/dev/shm/%s", d->d_name);
			unlink(path);
		}
	if (dir)
		closedir(dir);
}

/* file stores: a fresh directory under /tmp (a disk, so O_DIRECT is used) */
static void file_setup(char *spec, size_t len)
{
	hct_l3_setup();
	snprintf(spec, len, "%s,queue_depth=32", hct_l3_spec);
}

/* the fault fixture with no fault armed: objects as files in a fresh directory */
static void fault_setup(char *spec, size_t len)
{
	hct_l3_setup();
	snprintf(spec, len, "fault:dir=%s", hct_l3_dir);
}

/* memcached: real servers on free loopback ports, started by the test's
 * process and dying with it */
static struct hct_mcd mcd;

static void mcd_setup(char *spec, size_t len, unsigned n)
{
	char err[256], servers[256];

	ck_assert_msg(hct_mcd_start(&mcd, n, "-m 64", err, sizeof(err)) == 0, "%s", err);
	hct_mcd_servers(&mcd, servers, sizeof(servers));
	snprintf(spec, len, "memcached:servers=%s", servers);
}

static void mcd1_setup(char *spec, size_t len)
{
	mcd_setup(spec, len, 1);
}

static void mcd3_setup(char *spec, size_t len)
{
	mcd_setup(spec, len, 3);
}

static void mcd_cleanup(void)
{
	hct_mcd_stop(&mcd);
}

/* mori: real hicache-memd servers on free loopback ports, reached over
 * UCX's TCP transport, or its shared-memory ones (the servers are told the
 * same through UCX_TLS) */
static struct hct_memd memd;

static void memd_setup(char *spec, size_t len, unsigned n, const char *tls)
{
	char err[256], servers[256];

	setenv("UCX_TLS", tls, 1);
	ck_assert_msg(hct_memd_start(&memd, n, "--size 48M", err, sizeof(err)) == 0, "%s", err);
	hct_memd_servers(&memd, servers, sizeof(servers));
	snprintf(spec, len, "mori:servers=%s,transports=%s", servers, tls);
}

static void memd1_tcp_setup(char *spec, size_t len)
{
	memd_setup(spec, len, 1, "tcp");
}

static void memd2_tcp_setup(char *spec, size_t len)
{
	memd_setup(spec, len, 2, "tcp");
}

static void memd1_sm_setup(char *spec, size_t len)
{
	memd_setup(spec, len, 1, "sm");
}

static void memd2_sm_setup(char *spec, size_t len)
{
	memd_setup(spec, len, 2, "sm");
}

static void memd_cleanup(void)
{
	hct_memd_stop(&memd);
	unsetenv("UCX_TLS");
}

static const struct hct_target backends[] = {
	{ "mem", mem_setup, NULL },
	{ "shm", shm_setup, shm_cleanup },
	{ "file", file_setup, hct_l3_teardown },
	{ "fault", fault_setup, hct_l3_teardown },
	{ "memcached (1 server)", mcd1_setup, mcd_cleanup },
	{ "memcached (3 servers)", mcd3_setup, mcd_cleanup },
	{ "mori (1 server, tcp)", memd1_tcp_setup, memd_cleanup },
	{ "mori (2 servers, tcp)", memd2_tcp_setup, memd_cleanup },
	{ "mori (1 server, sm)", memd1_sm_setup, memd_cleanup },
	{ "mori (2 servers, sm)", memd2_sm_setup, memd_cleanup },
};
#define NBACKENDS (int)(sizeof(backends) / sizeof(backends[0]))

/* ---- the loader, with the fixtures */

static void loader_env(struct hct_env *e)
{
	memset(e, 0, sizeof(*e));
	e->pool_name = hct_name();
	e->p = hct_create_attach(e->pool_name, 8, 100, 4);
}

static void refused(const char *spec, int err, const char *needle)
{
	struct hct_env e;
	hc_store *st = (hc_store *)&e; /* must come back NULL */

	loader_env(&e);
	ck_assert_err(hc_store_open(e.p, spec, NULL, &st), err);
	ck_assert_msg(strstr(hc_last_error(), needle) != NULL, "'%s': error '%s' lacks '%s'", spec, hc_last_error(),
		      needle);
	ck_assert_msg(strchr(hc_last_error(), '\n') == NULL, "error is more than one line: %s", hc_last_error());
	ck_assert_ptr_null(st);
	hc_pool_detach(e.p);
	hc_pool_destroy(e.pool_name, NULL, HC_DESTROY_FORCE);
}

START_TEST(loader_refuses)
{
	refused("nosuch", ENOENT, "backend nosuch: not found");
	refused("nosuch", ENOENT, "fixtures/.libs"); /* it says where it looked */
	refused("bad name", EINVAL, "not valid");
	refused("", EINVAL, "empty");
	refused(":x=1", EINVAL, "empty");
	refused("mem:novalue", EINVAL, "not key=value");
	refused("mem:a=1,a=2", EINVAL, "given twice");
	/* a stray ',' was skipped silently */
	refused("mem:max_objects=8,,,", EINVAL, "an empty option at offset 14 of 'max_objects=8,,,' (a ',' too many)");
	refused("mem:,max_objects=8", EINVAL, "an empty option at offset 0");
	refused("mem:max_objects=8,", EINVAL, "an empty option at offset 14");
	refused("mem:max_objects=lots", EINVAL, "max_objects=lots");
	refused("bad_version", ELIBBAD, "ABI version 2, this library speaks 1");
	refused("bad_small", ELIBBAD, "struct hc_backend is");
	refused("bad_null_member", ELIBBAD, "reap() is NULL");
	refused("bad_null_table", ELIBBAD, "returned NULL");
	refused("bad_undefined", ELIBBAD, "hc_fixture_no_such_symbol");
	refused("bad_no_entry", ELIBBAD, "no entry symbol hc_backend_entry()");
	refused("bad_open", EINVAL, "backend bad_open: Invalid argument");
	refused("/nonexistent/dir/mem.so", ENOENT, "not found");
}
END_TEST

START_TEST(loader_paths)
{
	struct hct_env e;
	hc_store *st;
	char path[1100], dir[1024];
	const char *b = getenv("HC_BUILDDIR");
	struct hc_store_info info;
	struct hc_store_opts o = { .size = sizeof(struct hc_store_opts) };

	loader_env(&e);
	snprintf(dir, sizeof(dir), "%s/tests/fixtures/.libs", b && *b ? b : ".");
	/* an explicit path */
	snprintf(path, sizeof(path), "%s/mem.so:max_objects=3", dir);
	ck_assert_ok(hc_store_open(e.p, path, NULL, &st));
	ck_assert_ok(hc_store_info(st, &info, sizeof(info)));
	ck_assert_str_eq(info.name, "mem");
	ck_assert_uint_eq(info.queue_depth, 64);
	hc_store_close(st);
	/* the configured directory, after an environment that lacks it */
	setenv("HICACHE_BACKEND_PATH", "/nonexistent", 1);
	ck_assert_err(hc_store_open(e.p, "mem", NULL, &st), ENOENT);
	o.backend_dir = dir;
	ck_assert_ok(hc_store_open(e.p, "mem", &o, &st));
	hc_store_close(st);
	/* queue depth bounds */
	o.queue_depth = 5000;
	ck_assert_err(hc_store_open(e.p, "mem", &o, &st), EINVAL);
	hc_pool_detach(e.p);
	/* a read-only attachment cannot fill pages */
	e.p = hct_attach(e.pool_name, HC_ATTACH_READONLY);
	o.queue_depth = 0;
	ck_assert_err(hc_store_open(e.p, "mem", &o, &st), EPERM);
	hc_pool_detach(e.p);
	hc_pool_destroy(e.pool_name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* A plugin, or a directory on its way, that another user could replace is
 * refused before it is opened: it would run as the service.  A sticky
 * world-writable directory (/tmp) is fine: there only an entry's owner may
 * rename it. */
START_TEST(loader_trust)
{
	const char *b = getenv("HC_BUILDDIR");
	char dir[] = "/tmp/hct-trust-XXXXXX", src[1100], so[1100], spec[1200], cmd[2400];
	struct hct_env e;
	hc_store *st;

	snprintf(src, sizeof(src), "%s/tests/fixtures/.libs/mem.so", b && *b ? b : ".");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(so, sizeof(so), "%s/mem.so", dir);
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", src, so);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(chmod(so, 0755), 0);
	snprintf(spec, sizeof(spec), "%s:max_objects=3", so);
	loader_env(&e);
	ck_assert_msg(hc_store_open(e.p, spec, NULL, &st) == 0, "%s", hc_last_error()); /* under /tmp, sticky */
	hc_store_close(st);
	ck_assert_int_eq(chmod(dir, 0777), 0);
	ck_assert_err(hc_store_open(e.p, spec, NULL, &st), EPERM);
	ck_assert_msg(
		strstr(hc_last_error(), "directory /tmp/hct-trust-") &&
			strstr(hc_last_error(), ", on the way to the plugin, may be written by anyone (mode 0777)"),
		"%s", hc_last_error());
	setenv("HICACHE_BACKEND_PATH", dir, 1); /* found on the search path: the same */
	ck_assert_err(hc_store_open(e.p, "mem", NULL, &st), EPERM);
	unsetenv("HICACHE_BACKEND_PATH");
	ck_assert_int_eq(chmod(dir, 0770), 0); /* root's group may write: fine */
	ck_assert_msg(hc_store_open(e.p, spec, NULL, &st) == 0, "%s", hc_last_error());
	hc_store_close(st);
	ck_assert_int_eq(chown(dir, 0, 65534), 0); /* another group may: not */
	ck_assert_err(hc_store_open(e.p, spec, NULL, &st), EPERM);
	ck_assert_msg(strstr(hc_last_error(), ", on the way to the plugin, may be written by group 65534 (mode 0770)"),
		      "%s", hc_last_error());
	ck_assert_int_eq(chmod(dir, 0700), 0);
	ck_assert_int_eq(chown(so, 0, 65534), 0);
	ck_assert_int_eq(chmod(so, 0775), 0);
	ck_assert_err(hc_store_open(e.p, spec, NULL, &st), EPERM);
	ck_assert_msg(strstr(hc_last_error(), "mem.so may be written by group 65534 (mode 0775)"), "%s",
		      hc_last_error());
	ck_assert_int_eq(chmod(so, 0755), 0);
	{
		/* through a symlink: what is opened is the file checked */
		char link[1200];
		snprintf(link, sizeof(link), "%s/link.so:max_objects=3", dir);
		link[strlen(dir) + strlen("/link.so")] = '\0';
		ck_assert_int_eq(symlink(so, link), 0);
		link[strlen(link)] = ':';
		ck_assert_msg(hc_store_open(e.p, link, NULL, &st) == 0, "%s", hc_last_error());
		hc_store_close(st);
		link[strlen(dir) + strlen("/link.so")] = '\0';
		ck_assert_int_eq(unlink(link), 0);
	}
	ck_assert_int_eq(chown(so, 65534, 65534), 0);
	ck_assert_err(hc_store_open(e.p, spec, NULL, &st), EPERM);
	ck_assert_msg(strstr(hc_last_error(), "is owned by uid 65534"), "%s", hc_last_error());
	ck_assert_int_eq(unlink(so), 0);
	ck_assert_int_eq(rmdir(dir), 0);
	hc_pool_detach(e.p);
	hc_pool_destroy(e.pool_name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* A plugin whose put fails: the status says so and the page stays READY. */
START_TEST(put_failure)
{
	struct hct_env e;
	hc_key_t k[3];
	hc_page_t pg[3];
	int st[3];
	char out[32];

	hct_env_open(&e, 0, 0); /* mem */
	hct_keys(k, 3, 20);
	hct_make_ready(&e, k, 3, 1, HCT_BOTH, pg);
	ck_assert_ok(hc_store_ctl(e.st, "fail_puts", "2", NULL, 0));
	ck_assert_int_eq(hc_store_ctl(e.st, "fail_puts", NULL, out, sizeof(out)), 1);
	ck_assert_str_eq(out, "2");
	ck_assert_int_eq(hc_store_put(e.st, pg, 3, st), 1);
	ck_assert_int_eq(st[0], -EIO);
	ck_assert_int_eq(st[1], -EIO);
	ck_assert_int_eq(st[2], 0);
	ck_assert_msg_has("Input/output error"); /* the first failure, for hc_last_error */
	ck_assert_msg_has("backend mem: put of key");
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_put_errors"), 2);
	for (int i = 0; i < 3; i++) {
		struct hc_page_info pi;
		hc_page_info(e.p, HC_PAGE_ID(pg[i]), &pi, sizeof(pi));
		ck_assert_int_eq(pi.state, HC_PAGE_READY);
		ck_assert_uint_eq(pi.pins, 0);
	}
	ck_assert_err(hc_store_ctl(e.st, "fail_puts", "many", NULL, 0), EINVAL);
	hct_env_close(&e);
}
END_TEST

/* Completions the plugin should never have sent are dropped, and said so. */
START_TEST(stray_completions)
{
	struct hct_env e;
	hc_key_t k[3];
	hc_page_t pg[3];
	int st[3];

	hct_env_open(&e, 0, 0); /* mem */
	hct_logged[0] = '\0';
	hc_set_log(hct_log_capture, NULL);
	hct_keys(k, 3, 21);
	hct_make_ready(&e, k, 3, 1, HCT_BOTH, pg);
	ck_assert_ok(hc_store_ctl(e.st, "stray", "2", NULL, 0));
	ck_assert_int_eq(hc_store_put(e.st, pg, 3, st), 3);
	ck_assert_msg(strstr(hct_logged, "a completion for no op in flight") != NULL, "not hct_logged: '%s'",
		      hct_logged);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(hc_evict_key(e.p, k[i]), 1);
	ck_assert_int_eq(hct_get_keys(&e, k, 3, 1, HCT_BOTH, st), 3);
	hc_set_log(NULL, NULL);
	hct_env_close(&e);
}
END_TEST

/* Results outside what the ABI allows (errnos are -4095..-1) are plugin
 * bugs: never a hit, never a hang, always an error status. */
START_TEST(bogus_results)
{
	struct hct_env e;
	hc_key_t k[2];
	hc_page_t pg[1];
	int st[1];

	hct_env_open(&e, 0, 0); /* mem */
	hct_keys(k, 2, 30);
	/* a GET of an absent key whose -ENOENT became -(2^32): (int) of it is 0 */
	ck_assert_ok(hc_store_ctl(e.st, "result", "-4294967296", NULL, 0));
	ck_assert_int_eq(hct_get_keys(&e, k, 1, 1, HCT_BOTH, st), 0);
	ck_assert_int_eq(st[0], -EIO);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_hits"), 0);
	/* a PUT completing with INT32_MIN, and one with a positive result */
	hct_make_ready(&e, k + 1, 1, 1, HCT_BOTH, pg);
	ck_assert_ok(hc_store_ctl(e.st, "result", "-2147483648", NULL, 0));
	ck_assert_int_eq(hc_store_put(e.st, pg, 1, st), 0);
	ck_assert_int_eq(st[0], -EIO);
	ck_assert_ok(hc_store_ctl(e.st, "result", "7", NULL, 0));
	ck_assert_int_eq(hc_store_put(e.st, pg, 1, st), 0);
	ck_assert_int_eq(st[0], -EPROTO);
	ck_assert_msg_has("a plugin bug");
	/* EXISTS answering 2, DELETE answering 2^31 */
	ck_assert_ok(hc_store_ctl(e.st, "result", "2", NULL, 0));
	ck_assert_int_eq(hc_store_exists(e.st, k, 1, st), 0);
	ck_assert_int_eq(st[0], -EPROTO);
	ck_assert_ok(hc_store_ctl(e.st, "result", "2147483648", NULL, 0));
	ck_assert_int_eq(hc_store_delete(e.st, k, 1, st), 0);
	ck_assert_int_eq(st[0], -EPROTO);
	hct_env_close(&e);
}
END_TEST

/* A plugin whose queue is smaller than the store's: -EAGAIN while another
 * thread's ops are in flight is worth a retry, never an item's status. */
struct eagain_arg {
	struct hct_env *e;
	unsigned id;
	int bad;
};

static void *eagain_worker(void *arg)
{
	struct eagain_arg *a = arg;
	hc_key_t k[64];
	int st[64];

	hct_keys(k, 64, 4000 + a->id);
	for (int round = 0; round < 100 && !a->bad; round++) {
		hc_store_exists(a->e->st, k, 64, st);
		for (int i = 0; i < 64; i++)
			if (st[i] < 0)
				a->bad = st[i];
	}
	return NULL;
}

START_TEST(eagain_race)
{
	struct hct_env e;
	pthread_t t[3];
	struct eagain_arg a[3];

	memset(&e, 0, sizeof(e));
	e.b = &backends[2]; /* file */
	e.pool_name = hct_name();
	e.p = hct_create_attach(e.pool_name, HCT_NPAGES, 100, 8);
	e.b->setup(e.spec, sizeof(e.spec));
	snprintf(e.spec, sizeof(e.spec), "%s,queue_depth=1", hct_l3_spec);
	e.st = hct_env_store(&e, 64);
	for (unsigned i = 0; i < 3; i++) {
		a[i] = (struct eagain_arg){ .e = &e, .id = i };
		pthread_create(&t[i], NULL, eagain_worker, &a[i]);
	}
	for (unsigned i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(a[i].bad == 0, "thread %u: an item failed with %d (%s)", i, a[i].bad,
			      strerror(-a[i].bad));
	}
	hct_env_close(&e);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("backends");
	TCase *tc = tcase_create("conformance");
	int ret;

	tcase_set_timeout(tc, 60);
	for (unsigned i = 0; i < hct_conf_ncases(); i++)
		tcase_add_loop_test(tc, hct_conf_case(i), 0, NBACKENDS);
	suite_add_tcase(s, tc);
	tc = tcase_create("loader");
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, loader_refuses);
	tcase_add_test(tc, loader_paths);
	tcase_add_test(tc, loader_trust);
	tcase_add_test(tc, put_failure);
	tcase_add_test(tc, stray_completions);
	tcase_add_test(tc, bogus_results);
	tcase_add_test(tc, eagain_race);
	suite_add_tcase(s, tc);
	suite_pid = getpid();
	if (hct_conf_targets(backends, NBACKENDS) < 0) {
		perror("test_backends: mapping the conformance log");
		return 99;
	}
	ret = hct_run(s);
	shm_sweep();
	return ret;
}
