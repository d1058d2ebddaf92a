/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_file_backend.c - the file backend plugin on its own: round trips,
 * GET lengths, LRU capacity, the index rebuilt at open, temp files swept, a
 * writer killed mid-put, fixed buffers and their warning, O_DIRECT falling
 * back, concurrent submitters and reapers, cancel, and every bad option.
 * The plugin is dlopen-ed from the build tree with a host whose log
 * callback records the lines.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hicache/backend.h>

#include "hct.h"
#include "hctbe.h"

#define MiB (1024u * 1024u)

/* ---- the host: a log that tests can read */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char logbuf[32][600];
static int nlog;

static void host_log(const struct hc_backend_host *h, int level, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	(void)h;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&log_lock);
	if (nlog < 32)
		snprintf(logbuf[nlog++], sizeof(logbuf[0]), "%d %s", level, line);
	pthread_mutex_unlock(&log_lock);
	if (getenv("HCT_VERBOSE"))
		fprintf(stderr, "[file %d] %s\n", level, line);
}

static struct hc_backend_host host = {
	.abi_version = HC_BACKEND_ABI_VERSION,
	.size = sizeof(struct hc_backend_host),
	.log = host_log,
};

/* Lines at level containing needle. */
static int logged(int level, const char *needle)
{
	int n = 0;

	pthread_mutex_lock(&log_lock);
	for (int i = 0; i < nlog; i++)
		n += atoi(logbuf[i]) == level && strstr(logbuf[i], needle) != NULL;
	pthread_mutex_unlock(&log_lock);
	return n;
}

static void log_clear(void)
{
	pthread_mutex_lock(&log_lock);
	nlog = 0;
	pthread_mutex_unlock(&log_lock);
}

/* ---- fixture: the plugin and a fresh directory */

static const struct hc_backend *B;
static char tdir[64];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(p);
	return 0;
}

static void rmtree(void)
{
	if (tdir[0]) {
		umount2(tdir, MNT_DETACH); /* the ramfs of direct_fallback, if any */
		nftw(tdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	}
}

static void setup(void)
{
	const char *bd = getenv("HC_BUILDDIR");
	char path[1024];
	hc_backend_entry_fn entry;
	void *h;

	snprintf(path, sizeof(path), "%s/backends/file/.libs/file.so", bd && *bd ? bd : ".");
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h != NULL, "dlopen %s: %s", path, dlerror());
	entry = (hc_backend_entry_fn)(uintptr_t)dlsym(h, HC_BACKEND_ENTRY_SYMBOL);
	ck_assert_msg(entry != NULL, "no %s in %s", HC_BACKEND_ENTRY_SYMBOL, path);
	B = entry(&host);
	ck_assert_ptr_nonnull(B);
	ck_assert_int_eq(B->abi_version, HC_BACKEND_ABI_VERSION);
	ck_assert_uint_eq(B->size, sizeof(struct hc_backend));
	ck_assert_str_eq(B->name, "file");
	snprintf(tdir, sizeof(tdir), "/tmp/hct-file-%d-XXXXXX", (int)getpid());
	ck_assert_ptr_nonnull(mkdtemp(tdir));
	atexit(rmtree); /* a failed check exits the test's process */
	log_clear();
}

static void teardown(void)
{
	rmtree();
}

/* The directories of test processes that died without their exit handlers
 * (a timeout's SIGKILL): removed by the runner, before and after. */
static void sweep_dirs(void)
{
	DIR *d = opendir("/tmp");
	struct dirent *e;

	while (d && (e = readdir(d))) {
		int pid;

		if (strlen(e->d_name) >= sizeof(tdir) - 5 || sscanf(e->d_name, "hct-file-%d-", &pid) != 1 || pid <= 0 ||
		    kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(tdir, sizeof(tdir), "/tmp/%.*s", (int)sizeof(tdir) - 6, e->d_name);
		rmtree();
	}
	tdir[0] = '\0';
	if (d)
		closedir(d);
}

/* Opens an instance on tdir with extra "key=value ..." options (NULL: none). */
static int try_open(void **be, const char *extra, char *err, size_t errlen)
{
	struct hc_be_option o[16];
	char buf[1024], *save = NULL;
	unsigned n = 0;

	snprintf(buf, sizeof(buf), "dir=%s %s", tdir, extra ? extra : "");
	for (char *t = strtok_r(buf, " ", &save); t && n < 16; t = strtok_r(NULL, " ", &save)) {
		char *eq = strchr(t, '=');

		if (eq)
			*eq = '\0';
		o[n++] = (struct hc_be_option){ .key = t, .value = eq ? eq + 1 : NULL };
	}
	return B->open(o, n, be, err, errlen);
}

static void *open_be(const char *extra)
{
	char err[256] = "";
	void *be = NULL;
	int r = try_open(&be, extra, err, sizeof(err));

	ck_assert_msg(r == 0, "open(%s) = %d: %s", extra ? extra : "", r, err);
	return be;
}

/* ---- names, contents and one-op helpers */

static void mkname(uint8_t *name, uint32_t fp, uint32_t key)
{
	uint64_t x = (fp + 1) * UINT64_C(0x9E3779B97F4A7C15);

	for (int i = 0; i < HC_BE_NAME_BYTES; i++) {
		if (i == 32)
			x = (key + 1) * UINT64_C(0xD1B54A32D192ED03) ^ fp;
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		name[i] = (uint8_t)x;
	}
}

static uint8_t pat(uint32_t seed, size_t i)
{
	uint64_t x = (seed + 1) * UINT64_C(0x9E3779B97F4A7C15) ^ (i * UINT64_C(0xff51afd7ed558ccd));

	return (uint8_t)(x ^ (x >> 29) ^ (x >> 47));
}

static void fill(void *buf, size_t len, uint32_t seed, size_t off)
{
	for (size_t i = 0; i < len; i++)
		((uint8_t *)buf)[i] = pat(seed, off + i);
}

static int same(const void *buf, size_t len, uint32_t seed, size_t off)
{
	for (size_t i = 0; i < len; i++)
		if (((const uint8_t *)buf)[i] != pat(seed, off + i))
			return 0;
	return 1;
}

static void *aligned(size_t len)
{
	void *p = NULL;

	ck_assert_int_eq(posix_memalign(&p, 4096, len ? len : 4096), 0);
	return p;
}

static int64_t run1(void *be, uint32_t opcode, const uint8_t *name, const struct iovec *iov, unsigned iovcnt)
{
	struct hc_be_op op = { .opcode = opcode, .iovcnt = iovcnt, .iov = iov, .user_data = 0x5eed };
	struct hc_be_cqe c = { 0 };

	memcpy(op.name, name, HC_BE_NAME_BYTES);
	ck_assert_int_eq(B->submit(be, &op, 1), 1);
	ck_assert_int_eq(B->reap(be, &c, 1, 10000), 1);
	ck_assert_uint_eq(c.user_data, 0x5eed);
	return c.result;
}

static int64_t put(void *be, const uint8_t *name, const void *buf, size_t len)
{
	struct iovec v = { (void *)buf, len };

	return run1(be, HC_BE_OP_PUT, name, &v, 1);
}

static int64_t get(void *be, const uint8_t *name, void *buf, size_t len)
{
	struct iovec v = { buf, len };

	return run1(be, HC_BE_OP_GET, name, &v, 1);
}

/* A put of len bytes of pattern seed, from a fresh aligned buffer. */
static void put_pat(void *be, const uint8_t *name, size_t len, uint32_t seed)
{
	void *b = aligned(len);

	fill(b, len, seed, 0);
	ck_assert_int_eq(put(be, name, b, len), 0);
	free(b);
}

/* Whether the object is there with len bytes of pattern seed. */
static int has_pat(void *be, const uint8_t *name, size_t len, uint32_t seed)
{
	void *b = aligned(len + 4096);
	int64_t r = get(be, name, b, len + 4096);
	int ok = r == (int64_t)len && same(b, len, seed, 0);

	free(b);
	return ok;
}

static int64_t exists(void *be, const uint8_t *name)
{
	return run1(be, HC_BE_OP_EXISTS, name, NULL, 0);
}

/* Asserts which of n[0..) exist: want[i] is 1, 0, or . for either. */
static void exist_set(void *be, uint8_t (*n)[HC_BE_NAME_BYTES], const char *want)
{
	for (int i = 0; want[i]; i++)
		if (want[i] != '.')
			ck_assert_msg(exists(be, n[i]) == (want[i] == '1'), "object %d: exists is not %c", i, want[i]);
}

static const char *ctl_get(void *be, const char *key)
{
	static char out[512];
	int n = B->ctl(be, key, NULL, out, sizeof(out));

	ck_assert_msg(n > 0, "ctl(%s) = %d", key, n);
	ck_assert_int_eq((int)strlen(out), n);
	return out;
}

static void obj_path(char *out, size_t len, const uint8_t *name, int tmp)
{
	char fp[65], key[65];

	for (int i = 0; i < 32; i++) {
		sprintf(fp + 2 * i, "%02x", name[i]);
		sprintf(key + 2 * i, "%02x", name[32 + i]);
	}
	snprintf(out, len, "%s/%s/%.2s/%s%s%s", tdir, fp, key, tmp ? "." : "", key, tmp ? ".0000000000000001.tmp" : "");
}

static int ntemps;

static int count_temps(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	ntemps += strstr(p + ftw->base, ".tmp") != NULL;
	return 0;
}

/* Temp files anywhere under tdir. */
static int temps(void)
{
	ntemps = 0;
	ck_assert_int_eq(nftw(tdir, count_temps, 16, FTW_PHYS), 0);
	return ntemps;
}

/* ---- round trips */

START_TEST(roundtrip_aligned)
{
	void *be = open_be(NULL);
	uint8_t name[HC_BE_NAME_BYTES];
	uint8_t *a = aligned(4096), *b = aligned(8192), *c = aligned(4096), *out = aligned(16384);
	struct iovec v[3] = { { a, 4096 }, { b, 8192 }, { c, 4096 } };
	char path[512];
	struct stat st;

	mkname(name, 1, 1);
	fill(a, 4096, 7, 0);
	fill(b, 8192, 7, 4096);
	fill(c, 4096, 7, 12288);
	ck_assert_int_eq(run1(be, HC_BE_OP_PUT, name, v, 3), 0);
	ck_assert_int_eq(get(be, name, out, 16384), 16384);
	ck_assert(same(out, 16384, 7, 0));
	/* The name on disk is the hex of the op name, fanned out. */
	obj_path(path, sizeof(path), name, 0);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_size, 16384);
	ck_assert_str_eq(ctl_get(be, "direct_active"), "yes"); /* /tmp takes O_DIRECT */
	ck_assert_uint_gt(hct_be_stat(B, be, "direct_ios"), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 1);
	ck_assert_uint_eq(hct_be_stat(B, be, "bytes"), 16384);
	ck_assert_uint_eq(hct_be_stat(B, be, "hits"), 1);
	ck_assert_uint_eq(hct_be_stat(B, be, "errors"), 0);
	ck_assert_int_eq(temps(), 0);
	B->close(be);
	free(a), free(b), free(c), free(out);
}
END_TEST

START_TEST(roundtrip_misaligned)
{
	void *be = open_be(NULL);
	uint8_t name[HC_BE_NAME_BYTES], *raw = malloc(40000), *in = raw + 3, *out = malloc(40000);
	/* Odd addresses and lengths, split differently on the way back. */
	struct iovec pv[3] = { { in, 1000 }, { in + 1000, 5001 }, { in + 6001, 7 } };
	struct iovec gv[4] = { { out + 1, 17 }, { out + 100, 4096 }, { out + 5000, 0 }, { out + 9000, 30000 } };

	mkname(name, 2, 1);
	fill(in, 6008, 9, 0);
	memset(out, 0xEE, 40000);
	ck_assert_int_eq(run1(be, HC_BE_OP_PUT, name, pv, 3), 0);
	ck_assert_int_eq(run1(be, HC_BE_OP_GET, name, gv, 4), 6008);
	ck_assert(same(out + 1, 17, 9, 0));
	ck_assert(same(out + 100, 4096, 9, 17));
	ck_assert(same(out + 9000, 6008 - 17 - 4096, 9, 17 + 4096));
	/* Nothing past the object's end. */
	ck_assert_uint_eq(out[9000 + 6008 - 17 - 4096], 0xEE);
	ck_assert_uint_eq(out[0], 0xEE);
	ck_assert_uint_eq(out[18], 0xEE);
	ck_assert_uint_gt(hct_be_stat(B, be, "buffered_ios"), 0);
	B->close(be);
	free(raw), free(out);
}
END_TEST

/* GET's result is the whole length, whatever the buffers hold. */
START_TEST(get_lengths)
{
	void *be = open_be(NULL);
	uint8_t name[HC_BE_NAME_BYTES], empty[HC_BE_NAME_BYTES], *buf = aligned(32768), *u = malloc(20001);
	struct iovec zero = { buf, 0 };

	mkname(name, 3, 1);
	mkname(empty, 3, 2);
	put_pat(be, name, 10000, 11);
	/* shorter: the first 4096 bytes, result 10000 */
	memset(buf, 0xEE, 32768);
	ck_assert_int_eq(get(be, name, buf, 4096), 10000);
	ck_assert(same(buf, 4096, 11, 0));
	ck_assert_uint_eq(buf[4096], 0xEE);
	/* longer (aligned buffer, object not a multiple of 4096): stops at 10000 */
	ck_assert_int_eq(get(be, name, buf, 32768), 10000);
	ck_assert(same(buf, 10000, 11, 0));
	ck_assert_uint_eq(buf[10000], 0xEE);
	/* longer, misaligned */
	memset(u, 0xEE, 20001);
	ck_assert_int_eq(get(be, name, u + 1, 20000), 10000);
	ck_assert(same(u + 1, 10000, 11, 0));
	ck_assert_uint_eq(u[10001], 0xEE);
	/* no room at all still tells the length */
	ck_assert_int_eq(run1(be, HC_BE_OP_GET, name, &zero, 1), 10000);
	/* an aligned object into a larger aligned buffer (O_DIRECT) */
	put_pat(be, name, 8192, 12);
	ck_assert_int_eq(get(be, name, buf, 32768), 8192);
	ck_assert(same(buf, 8192, 12, 0));
	/* an empty object exists and has length 0 */
	ck_assert_int_eq(run1(be, HC_BE_OP_PUT, empty, &zero, 1), 0);
	ck_assert_int_eq(exists(be, empty), 1);
	ck_assert_int_eq(get(be, empty, buf, 4096), 0);
	B->close(be);
	free(buf), free(u);
}
END_TEST

START_TEST(overwrite_delete)
{
	void *be = open_be(NULL);
	uint8_t name[HC_BE_NAME_BYTES];
	char path[512];

	mkname(name, 4, 1);
	put_pat(be, name, 5000, 1);
	put_pat(be, name, 3000, 2);
	ck_assert(has_pat(be, name, 3000, 2));
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 1);
	ck_assert_uint_eq(hct_be_stat(B, be, "bytes"), 3000);
	ck_assert_int_eq(run1(be, HC_BE_OP_DELETE, name, NULL, 0), 0);
	obj_path(path, sizeof(path), name, 0);
	ck_assert_int_eq(access(path, F_OK), -1);
	ck_assert_int_eq(exists(be, name), 0);
	ck_assert_int_eq(has_pat(be, name, 3000, 2), 0);
	ck_assert_int_eq(run1(be, HC_BE_OP_DELETE, name, NULL, 0), -ENOENT);
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "bytes"), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "deletes"), 2);
	ck_assert_uint_eq(hct_be_stat(B, be, "misses"), 1);
	ck_assert_uint_eq(hct_be_stat(B, be, "errors"), 0);
	B->close(be);
}
END_TEST

START_TEST(exists_batch)
{
	void *be = open_be(NULL);
	struct hc_be_op ops[40];
	struct hc_be_cqe c[40];
	int seen[40] = { 0 }, got = 0;

	for (unsigned i = 0; i < 40; i++) {
		ops[i] = (struct hc_be_op){ .opcode = HC_BE_OP_EXISTS, .user_data = 1000 + i };
		mkname(ops[i].name, 5, i);
		if (i % 3 == 0)
			put_pat(be, ops[i].name, 100, i);
	}
	ck_assert_int_eq(B->submit(be, ops, 40), 40);
	while (got < 40) {
		int n = B->reap(be, c, 40, 5000);

		ck_assert_int_gt(n, 0);
		for (int k = 0; k < n; k++) {
			unsigned i = (unsigned)(c[k].user_data - 1000);

			ck_assert_uint_lt(i, 40);
			ck_assert_int_eq(seen[i]++, 0);
			ck_assert_int_eq(c[k].result, i % 3 == 0);
		}
		got += n;
	}
	ck_assert_int_eq(B->reap(be, c, 40, -1), 0); /* nothing in flight: at once */
	ck_assert_uint_eq(hct_be_stat(B, be, "exists"), 40);
	B->close(be);
}
END_TEST

/* Bad ops complete with -EINVAL; bad calls return it. */
START_TEST(bad_ops)
{
	void *be = open_be(NULL);
	uint8_t buf[64];
	struct iovec v[HC_BE_IOV_MAX + 1];
	struct hc_be_op op = { .opcode = HC_BE_OP_GET };
	struct hc_be_cqe c;

	for (int i = 0; i <= HC_BE_IOV_MAX; i++)
		v[i] = (struct iovec){ buf, 1 };
	mkname(op.name, 6, 1);
	ck_assert_int_eq(run1(be, HC_BE_OP_GET, op.name, v, 0), -EINVAL);
	ck_assert_int_eq(run1(be, HC_BE_OP_PUT, op.name, v, HC_BE_IOV_MAX + 1), -EINVAL);
	ck_assert_int_eq(run1(be, HC_BE_OP_PUT, op.name, NULL, 1), -EINVAL);
	ck_assert_int_eq(run1(be, 99, op.name, NULL, 0), -EINVAL);
	/* the most iovecs a put may have */
	fill(buf, 64, 3, 0);
	ck_assert_int_eq(run1(be, HC_BE_OP_PUT, op.name, v, HC_BE_IOV_MAX), 0);
	ck_assert_int_eq(run1(be, HC_BE_OP_GET, op.name, v, 1), HC_BE_IOV_MAX);
	ck_assert_int_eq(B->submit(be, &op, 0), 0);
	ck_assert_int_eq(B->submit(be, NULL, 1), -EINVAL);
	ck_assert_int_eq(B->reap(be, &c, 0, -1), 0);
	ck_assert_int_eq(B->reap(be, NULL, 1, 0), -EINVAL);
	ck_assert_int_eq(B->cancel(be, 12345), -ENOENT);
	ck_assert_uint_eq(hct_be_stat(B, be, "errors"), 4);
	B->close(be);
}
END_TEST

/* ---- capacity and LRU */

START_TEST(capacity_lru)
{
	void *be = open_be("capacity=64K");
	uint8_t n[7][HC_BE_NAME_BYTES];
	void *big = aligned(65 * 1024);

	for (int i = 0; i < 7; i++)
		mkname(n[i], 7, i);
	ck_assert_str_eq(ctl_get(be, "capacity"), "65536");
	ck_assert_uint_eq(hct_be_stat(B, be, "capacity_bytes"), 65536);
	for (int i = 0; i < 4; i++)
		put_pat(be, n[i], 16384, i);
	ck_assert(has_pat(be, n[0], 16384, 0)); /* 0 is now the most recent; 1 the least */
	put_pat(be, n[4], 16384, 4);
	exist_set(be, n, "10111");
	ck_assert_uint_eq(hct_be_stat(B, be, "evictions"), 1);
	ck_assert_uint_eq(hct_be_stat(B, be, "bytes"), 65536);
	/* EXISTS does not count as a use: 2 goes next */
	put_pat(be, n[5], 16384, 5);
	exist_set(be, n, "100111");
	/* an overwrite replaces its own bytes first */
	put_pat(be, n[5], 16384, 55);
	ck_assert_uint_eq(hct_be_stat(B, be, "evictions"), 2);
	/* bigger than the capacity: never fits */
	ck_assert_int_eq(put(be, n[6], big, 65 * 1024), -ENOSPC);
	ck_assert_uint_eq(hct_be_stat(B, be, "errors"), 1);
	/* exactly the capacity: everything else goes */
	put_pat(be, n[6], 65536, 6);
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 1);
	ck_assert(has_pat(be, n[6], 65536, 6));
	ck_assert_uint_eq(hct_be_stat(B, be, "reserved_bytes"), 0);
	/* ctl shrinks it: the object no longer fits and goes */
	ck_assert_int_eq(B->ctl(be, "capacity", "32K", NULL, 0), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 0);
	ck_assert_int_eq(B->ctl(be, "capacity", "unlimited", NULL, 0), 0);
	ck_assert_str_eq(ctl_get(be, "capacity"), "unlimited");
	ck_assert_uint_eq(hct_be_stat(B, be, "capacity_bytes"), 0);
	B->close(be);
	free(big);
}
END_TEST

/* ---- reopen: the index comes back from the directory */

static void set_mtime(const uint8_t *name, time_t t)
{
	char path[512];
	struct timespec ts[2] = { { t, 0 }, { t, 0 } };

	obj_path(path, sizeof(path), name, 0);
	ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}

START_TEST(reopen_rebuilds)
{
	void *be = open_be(NULL);
	uint8_t n[5][HC_BE_NAME_BYTES];
	/* mtime order, oldest first: 3 (16K), 1 (8K), 4 (20K), 0 (4K), 2 (12K) */
	static const time_t when[5] = { 4000, 2000, 5000, 1000, 3000 };

	for (int i = 0; i < 5; i++) {
		mkname(n[i], 8 + (i & 1), i); /* two fingerprints */
		put_pat(be, n[i], 4096 * (i + 1), 20 + i);
	}
	B->close(be);
	for (int i = 0; i < 5; i++)
		set_mtime(n[i], when[i]);

	be = open_be(NULL);
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 5);
	ck_assert_uint_eq(hct_be_stat(B, be, "bytes"), 4096 * 15);
	for (int i = 0; i < 5; i++)
		ck_assert(has_pat(be, n[i], 4096 * (i + 1), 20 + i));
	B->close(be);
	for (int i = 0; i < 5; i++)
		set_mtime(n[i], when[i]); /* the GETs above may have touched nothing, but be sure */

	/* A smaller capacity at open evicts the oldest by mtime: 3, then 1. */
	log_clear();
	be = open_be("capacity=40K"); /* 16K (3) and 8K (1) go: 36K of 60K stay */
	exist_set(be, n, "10101");
	ck_assert_uint_eq(hct_be_stat(B, be, "evictions"), 2);
	ck_assert_int_eq(logged(HC_BE_LOG_INFO, "3 objects"), 1);
	/* ...and the LRU order goes on from there: 4 (mtime 3000) is the oldest left */
	put_pat(be, n[1], 8192, 99);
	exist_set(be, n, "11100");
	B->close(be);
}
END_TEST

static void touch(const char *rel, int dir)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", tdir, rel);
	if (dir) {
		ck_assert_int_eq(mkdir(path, 0755), 0);
	} else {
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);

		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, "junk", 4), 4);
		close(fd);
	}
}

/* Temp files of a crashed writer go; what is not ours stays, counted once. */
START_TEST(sweep_and_ignore)
{
	void *be = open_be(NULL);
	uint8_t name[HC_BE_NAME_BYTES];
	char path[512], rel[512], *fpdir, *leaf;
	int fd;

	mkname(name, 10, 1);
	put_pat(be, name, 5000, 1);
	B->close(be);
	obj_path(path, sizeof(path), name, 1); /* a temp file beside the object */
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "torn", 4), 4);
	close(fd);
	touch(".probe-1.tmp", 0);
	touch("README", 0);
	touch("notahexdir", 1);
	snprintf(rel, sizeof(rel), "%s", path + strlen(tdir) + 1);
	fpdir = strtok(rel, "/");
	leaf = strtok(NULL, "/");
	snprintf(path, sizeof(path), "%s/zz", fpdir);
	touch(path, 1);
	snprintf(path, sizeof(path), "%s/%s/XYZ", fpdir, leaf);
	touch(path, 0);
	/* upper-case hex, and a name in the wrong fan-out directory */
	snprintf(path, sizeof(path), "%s/%s/%064d", fpdir, leaf, 0);
	touch(path, 0);
	snprintf(path, sizeof(path), "%s/%s/ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789", fpdir,
		 leaf);
	touch(path, 0);

	log_clear();
	be = open_be(NULL);
	ck_assert_int_eq(temps(), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "temp_swept"), 2);
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 1);
	ck_assert_uint_eq(hct_be_stat(B, be, "ignored_files"), 6);
	ck_assert_int_eq(logged(HC_BE_LOG_WARN, "6 entries are not objects"), 1);
	ck_assert_int_eq(logged(HC_BE_LOG_WARN, ""), 1);
	ck_assert(has_pat(be, name, 5000, 1));
	snprintf(path, sizeof(path), "%s/README", tdir);
	ck_assert_int_eq(access(path, F_OK), 0); /* left in place */
	B->close(be);
}
END_TEST

START_TEST(busy_dir)
{
	void *be = open_be(NULL), *be2 = NULL;
	char err[256] = "";

	ck_assert_int_eq(try_open(&be2, NULL, err, sizeof(err)), -EBUSY);
	ck_assert_ptr_null(be2);
	ck_assert_msg(strstr(err, "in use") && strstr(err, tdir), "err: %s", err);
	B->close(be);
	be = open_be(NULL); /* close released it */
	B->close(be);
}
END_TEST

/* hc_backend_check: what a service would meet opening the spec, with no
 * pool: a plugin not found, an option refused, a dir in use, and a good
 * spec, which leaves the dir free for the next open. */
START_TEST(backend_check)
{
	void *be;
	char spec[256];

	snprintf(spec, sizeof(spec), "file:dir=%s", tdir);
	ck_assert_int_eq(hc_backend_check(spec, NULL), 0);
	be = open_be(NULL); /* the check let go of the dir */
	ck_assert_int_eq(hc_backend_check(spec, NULL), -EBUSY);
	ck_assert_msg(strstr(hc_last_error(), "in use"), "%s", hc_last_error());
	B->close(be);
	ck_assert_int_eq(hc_backend_check("nosuchbackend:x=1", NULL), -ENOENT);
	ck_assert_msg(strstr(hc_last_error(), "backend nosuchbackend: not found"), "%s", hc_last_error());
	ck_assert_int_eq(hc_backend_check("file:dri=/tmp", NULL), -EINVAL);
	ck_assert_msg(strstr(hc_last_error(), "unknown option dri="), "%s", hc_last_error());
	ck_assert_int_eq(hc_backend_check("file:dir", NULL), -EINVAL);
	ck_assert_int_eq(hc_backend_check("", NULL), -EINVAL);
	ck_assert_int_eq(hc_backend_check(NULL, NULL), -EINVAL);
}
END_TEST

/* ---- options */

START_TEST(bad_options)
{
	static const struct {
		const char *opts;
		const char *want[3];
	} bad[] = {
		{ "color=blue", { "unknown option color=blue", "queue_depth" } },
		{ "queue_depth=abc", { "queue_depth=abc", "1 to 4096" } },
		{ "queue_depth=0", { "queue_depth=0", "1 to 4096" } },
		{ "queue_depth=4097", { "queue_depth=4097", "1 to 4096" } },
		{ "queue_depth=-1", { "queue_depth=-1", "1 to 4096" } },
		{ "queue_depth=8x", { "queue_depth=8x", "1 to 4096" } },
		{ "queue_depth=99999999999999999999999", { "queue_depth=9999", "1 to 4096" } },
		{ "capacity=12X", { "capacity=12X", "K, M, G or T" } },
		{ "capacity=", { "capacity=", "unlimited" } },
		{ "capacity=0", { "capacity=0", "byte count" } },
		{ "capacity=K", { "capacity=K", "byte count" } },
		{ "capacity=1.5G", { "capacity=1.5G", "byte count" } },
		{ "capacity=99999999999T", { "capacity=99999999999T", "byte count" } },
		{ "capacity=10Gx", { "capacity=10Gx", "byte count" } },
		{ "fsync=sometimes", { "fsync=sometimes", "none or always" } },
		{ "direct=maybe", { "direct=maybe", "auto, on or off" } },
		{ "fixed_buffers=yes", { "fixed_buffers=yes", "auto or off" } },
		{ "fsync=none fsync=always", { "fsync given twice", "none, then always" } },
		{ "fsync", { "fsync has no value", "none or always" } },
	};
	char err[256];
	void *be;

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		be = (void *)1;
		err[0] = '\0';
		ck_assert_msg(try_open(&be, bad[i].opts, err, sizeof(err)) == -EINVAL, "%s accepted", bad[i].opts);
		ck_assert_ptr_null(be);
		for (int k = 0; k < 3 && bad[i].want[k]; k++)
			ck_assert_msg(strstr(err, bad[i].want[k]), "%s: err '%s' lacks '%s'", bad[i].opts, err,
				      bad[i].want[k]);
		ck_assert_ptr_null(strchr(err, '\n'));
	}
}
END_TEST

/* dir itself: missing, not a directory, not writable. */
START_TEST(bad_dir)
{
	struct hc_be_option o[2];
	char err[256], file[512];
	void *be;
	int fd;

	ck_assert_int_eq(B->open(NULL, 0, &be, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "dir is required"), "%s", err);
	o[0] = (struct hc_be_option){ "queue_depth", "8" };
	ck_assert_int_eq(B->open(o, 1, &be, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "dir is required"), "%s", err);
	ck_assert_int_eq(B->open(NULL, 1, &be, err, sizeof(err)), -EINVAL);
	o[0] = (struct hc_be_option){ "dir", "/nonexistent/hct-file" };
	ck_assert_int_eq(B->open(o, 1, &be, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "dir=/nonexistent/hct-file") && strstr(err, "no such directory"), "%s", err);
	o[0] = (struct hc_be_option){ "dir", "" };
	ck_assert_int_eq(B->open(o, 1, &be, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "dir="), "%s", err);
	snprintf(file, sizeof(file), "%s/plain", tdir);
	fd = open(file, O_WRONLY | O_CREAT, 0644);
	ck_assert_int_ge(fd, 0);
	close(fd);
	o[0] = (struct hc_be_option){ "dir", file };
	ck_assert_int_eq(B->open(o, 1, &be, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, file) && strstr(err, "not a directory"), "%s", err);
	o[0] = (struct hc_be_option){ NULL, "x" };
	ck_assert_int_eq(B->open(o, 1, &be, err, sizeof(err)), -EINVAL);
	/* a NULL err buffer is not a crash */
	ck_assert_int_eq(B->open(o, 1, &be, NULL, 0), -EINVAL);
	/* Read-only: /proc/self is a directory nobody may create files in. */
	o[0] = (struct hc_be_option){ "dir", "/proc/self" };
	ck_assert_int_eq(B->open(o, 1, &be, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "dir=/proc/self") && strstr(err, "not writable"), "%s", err);
}
END_TEST

/* Root ignores mode bits: without CAP_DAC_OVERRIDE a 0555 dir is read-only. */
static int drop_caps(const int *caps, int n)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d) < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		d[caps[i] / 32].effective &= ~(1u << (caps[i] % 32));
		d[caps[i] / 32].permitted &= ~(1u << (caps[i] % 32));
	}
	return (int)syscall(SYS_capset, &h, d);
}

START_TEST(dir_not_writable)
{
	static const int caps[] = { CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER };
	char err[256];
	void *be;

	ck_assert_int_eq(chmod(tdir, 0555), 0);
	if (geteuid() == 0)
		ck_assert_int_eq(drop_caps(caps, 3), 0);
	ck_assert_int_eq(try_open(&be, NULL, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, tdir) && strstr(err, "not writable"), "%s", err);
	chmod(tdir, 0755);
}
END_TEST

START_TEST(ctl_and_stats)
{
	static const char *names[] = { "objects",   "bytes",  "capacity_bytes", "gets",
				       "hits",      "misses", "puts",           "deletes",
				       "evictions", "errors", "fixed_buffers",  "direct_fallbacks" };
	void *be = open_be("queue_depth=16 capacity=10G fsync=always direct=off fixed_buffers=off");
	char out[8];
	uint64_t caps;

	ck_assert_str_eq(ctl_get(be, "dir"), tdir);
	ck_assert_str_eq(ctl_get(be, "queue_depth"), "16");
	ck_assert_str_eq(ctl_get(be, "capacity"), "10737418240");
	ck_assert_str_eq(ctl_get(be, "fsync"), "always");
	ck_assert_str_eq(ctl_get(be, "direct"), "off");
	ck_assert_str_eq(ctl_get(be, "direct_active"), "no");
	ck_assert_str_eq(ctl_get(be, "fixed_buffers"), "off");
	caps = strtoull(ctl_get(be, "caps"), NULL, 16);
	ck_assert(caps & HC_BE_CAP_DURABLE);
	ck_assert(!(caps & HC_BE_CAP_ZERO_COPY));
	ck_assert_uint_eq(caps & ~B->caps, 0);
	ck_assert_int_eq(B->ctl(be, "dir", NULL, out, sizeof(out)), -ERANGE);
	ck_assert_int_eq(B->ctl(be, "nope", NULL, out, sizeof(out)), -ENOENT);
	ck_assert_int_eq(B->ctl(be, "nope", "1", NULL, 0), -ENOENT);
	ck_assert_int_eq(B->ctl(be, "fsync", "none", NULL, 0), -EINVAL); /* fixed at open */
	ck_assert_int_eq(B->ctl(be, "capacity", "12X", NULL, 0), -EINVAL);
	ck_assert_str_eq(ctl_get(be, "capacity"), "10737418240");
	ck_assert_int_eq(B->ctl(be, "capacity", "512M", NULL, 0), 0);
	ck_assert_str_eq(ctl_get(be, "capacity"), "536870912");
	ck_assert_int_eq(B->ctl(be, "capacity", "3KiB", NULL, 0), 0);
	ck_assert_str_eq(ctl_get(be, "capacity"), "3072");
	ck_assert_int_eq(B->ctl(be, "capacity", "2kb", NULL, 0), 0);
	ck_assert_str_eq(ctl_get(be, "capacity"), "2048");
	ck_assert_int_eq(B->ctl(be, "capacity", NULL, NULL, 0), -EINVAL);
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		hct_be_stat(B, be, names[i]);
	ck_assert_int_eq(B->stats(be, NULL, NULL), -EINVAL);
	B->close(be);
}
END_TEST

/* fsync=always works end to end (what it guarantees needs a power cut). */
START_TEST(fsync_always)
{
	void *be = open_be("fsync=always");
	uint8_t name[HC_BE_NAME_BYTES];

	mkname(name, 11, 1);
	put_pat(be, name, 12288, 5);
	put_pat(be, name, 4096, 6);
	ck_assert(has_pat(be, name, 4096, 6));
	B->close(be);
	be = open_be("fsync=always");
	ck_assert(has_pat(be, name, 4096, 6));
	ck_assert_int_eq(run1(be, HC_BE_OP_DELETE, name, NULL, 0), 0);
	ck_assert_int_eq(run1(be, HC_BE_OP_DELETE, name, NULL, 0), -ENOENT);
	ck_assert_int_eq(exists(be, name), 0);
	B->close(be);
}
END_TEST

/* ---- crashes */

/* The child of kill_midput: puts two contents in turn until killed.  No
 * ck_assert here: a failing check would run the test's exit handlers. */
static void __attribute__((noreturn)) put_loop(const uint8_t *name, const char *opts, _Atomic uint64_t *done)
{
	const size_t la = 1 * MiB, lb = 768 * 1024;
	void *be = NULL, *a = NULL, *b = NULL;
	char err[256];

	if (posix_memalign(&a, 4096, la) || posix_memalign(&b, 4096, lb) || try_open(&be, opts, err, sizeof(err)) < 0)
		_exit(3);
	fill(a, la, 1, 0);
	fill(b, lb, 2, 0);
	for (uint64_t i = 0;; i++) {
		struct iovec v = { i & 1 ? b : a, i & 1 ? lb : la };
		struct hc_be_op op = { .opcode = HC_BE_OP_PUT, .iovcnt = 1, .iov = &v, .user_data = i };
		struct hc_be_cqe c;

		memcpy(op.name, name, HC_BE_NAME_BYTES);
		if (B->submit(be, &op, 1) != 1 || B->reap(be, &c, 1, -1) != 1 || c.result != 0)
			_exit(4);
		atomic_fetch_add(done, 1);
	}
}

/* A writer SIGKILLed mid-put leaves the old object or the new, never a mix:
 * each round a child loops puts of two contents of different lengths on
 * one name and is killed at a random moment. */
START_TEST(kill_midput)
{
	_Atomic uint64_t *done = hct_shared(sizeof(*done));
	uint8_t name[HC_BE_NAME_BYTES];
	unsigned seed = (unsigned)getpid(), news = 0;
	const size_t la = 1 * MiB, lb = 768 * 1024;

	mkname(name, 12, 1);
	for (int round = 0; round < 8; round++) {
		uint64_t start = atomic_load(done);
		pid_t pid = fork();

		ck_assert_int_ge(pid, 0);
		if (pid == 0)
			put_loop(name, round & 1 ? "direct=off" : NULL, done);
		/* Let it complete a put or two, then kill it anywhere in the next. */
		for (double t0 = hct_now(); atomic_load(done) < start + 2 && hct_now() - t0 < 5;)
			usleep(200);
		usleep(rand_r(&seed) % 3000);
		kill(pid, SIGKILL);
		int st;
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_msg(WIFSIGNALED(st), "child exited %d", WEXITSTATUS(st));

		void *be = open_be(NULL);
		int a = has_pat(be, name, la, 1), b = has_pat(be, name, lb, 2);

		ck_assert_msg(a + b == 1, "round %d: the object is neither old nor new", round);
		news += b;
		ck_assert_int_eq(temps(), 0);
		B->close(be);
	}
	ck_assert_uint_gt(atomic_load(done), 8);
	fprintf(stderr, "kill_midput: %" PRIu64 " puts in 8 kills; the new content %u times\n", atomic_load(done),
		news);
}
END_TEST

/* ---- fixed buffers */

START_TEST(fixed_buffers)
{
	void *be = open_be(NULL);
	size_t len = 8 * MiB;
	uint8_t *mem = mmap(NULL, len + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t name[HC_BE_NAME_BYTES], *out = aligned(8192);
	struct iovec mixed[2] = { { mem + 4096, 4096 }, { out, 4096 } };

	ck_assert_ptr_ne(mem, MAP_FAILED);
	mkname(name, 13, 1);
	ck_assert_int_eq(B->reg_mem(be, mem, len), 0);
	ck_assert_int_eq(B->reg_mem(be, mem + 4096, 4096), -EINVAL); /* overlaps */
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_buffers"), 1);
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_bytes"), len);
	fill(mem, 65536, 3, 0);
	ck_assert_int_eq(put(be, name, mem, 65536), 0);
	memset(mem + MiB, 0, 65536);
	ck_assert_int_eq(get(be, name, mem + MiB, 65536), 65536);
	ck_assert(same(mem + MiB, 65536, 3, 0));
	ck_assert_uint_ge(hct_be_stat(B, be, "fixed_ios"), 2);
	/* one iovec inside, one outside: a READ_FIXED and a READV */
	uint64_t before = hct_be_stat(B, be, "fixed_ios");
	ck_assert_int_eq(run1(be, HC_BE_OP_GET, name, mixed, 2), 65536);
	ck_assert(same(mem + 4096, 4096, 3, 0));
	ck_assert(same(out, 4096, 3, 4096));
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_ios"), before + 1);
	/* an iovec running past the region is not fixed */
	ck_assert_int_eq(get(be, name, mem + len - 2048, 4096), 65536);
	ck_assert(same(mem + len - 2048, 4096, 3, 0));
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_ios"), before + 1);
	ck_assert_int_eq(logged(HC_BE_LOG_WARN, ""), 0);
	ck_assert_int_eq(B->unreg_mem(be, mem), 0);
	ck_assert_int_eq(B->unreg_mem(be, mem), -EINVAL);
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_buffers"), 0);
	ck_assert_int_eq(get(be, name, mem, 65536), 65536); /* plain again */
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_ios"), before + 1);
	B->close(be);
	munmap(mem, len + 4096);
	free(out);
}
END_TEST

/* A region over 1 GiB is registered as several chunks (needs 1.5 GiB of RAM
 * for a moment: transparent huge pages make the faulting quick). */
START_TEST(fixed_chunks)
{
	size_t len = 1536 * MiB;
	void *be;
	uint8_t *raw, *mem, name[HC_BE_NAME_BYTES];
	long pages = sysconf(_SC_AVPHYS_PAGES);

	if (pages > 0 && (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE) < 6ull * 1024 * MiB) {
		fprintf(stderr, "fixed_chunks: skipped (under 6 GiB of free memory)\n");
		return;
	}
	be = open_be(NULL);
	raw = mmap(NULL, len + 2 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(raw, MAP_FAILED);
	mem = (uint8_t *)(((uintptr_t)raw + 2 * MiB - 1) & ~(uintptr_t)(2 * MiB - 1));
	madvise(mem, len, MADV_HUGEPAGE);
	ck_assert_int_eq(B->reg_mem(be, mem, len), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_buffers"), 2);
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_bytes"), len);
	mkname(name, 14, 1);
	/* in the second chunk: fixed; across the 1 GiB line: plain */
	fill(mem + 1200 * MiB, 8192, 4, 0);
	ck_assert_int_eq(put(be, name, mem + 1200 * MiB, 8192), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_ios"), 1);
	ck_assert_int_eq(get(be, name, mem + 1024 * MiB - 4096, 8192), 8192);
	ck_assert(same(mem + 1024 * MiB - 4096, 8192, 4, 0));
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_ios"), 1);
	ck_assert_int_eq(B->unreg_mem(be, mem), 0);
	B->close(be);
	munmap(raw, len + 2 * MiB);
}
END_TEST

/* Without CAP_IPC_LOCK and with a tiny RLIMIT_MEMLOCK the kernel refuses to
 * pin: one warning, and the I/O goes on without fixed buffers. */
START_TEST(fixed_refused)
{
	static const int caps[] = { CAP_IPC_LOCK, CAP_SYS_RESOURCE };
	struct rlimit rl = { 64 * 1024, 64 * 1024 };
	size_t len = 4 * MiB;
	uint8_t *mem = mmap(NULL, 2 * len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t name[HC_BE_NAME_BYTES];
	void *be;

	ck_assert_ptr_ne(mem, MAP_FAILED);
	ck_assert_int_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
	if (geteuid() == 0)
		ck_assert_int_eq(drop_caps(caps, 2), 0);
	be = open_be(NULL);
	ck_assert_int_eq(B->reg_mem(be, mem, len), 0);
	ck_assert_int_eq(B->reg_mem(be, mem + len, len), 0);
	ck_assert_int_eq(logged(HC_BE_LOG_WARN, "fixed buffers unavailable"), 1); /* once, not per region */
	ck_assert_int_eq(logged(HC_BE_LOG_WARN, "RLIMIT_MEMLOCK"), 1);
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_buffers"), 0);
	mkname(name, 15, 1);
	fill(mem, 65536, 5, 0);
	ck_assert_int_eq(put(be, name, mem, 65536), 0);
	ck_assert_int_eq(get(be, name, mem + len, 65536), 65536);
	ck_assert(same(mem + len, 65536, 5, 0));
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_ios"), 0);
	ck_assert_int_eq(B->unreg_mem(be, mem), 0);
	ck_assert_int_eq(B->unreg_mem(be, mem + len), 0);
	B->close(be);
	munmap(mem, 2 * len);
}
END_TEST

START_TEST(fixed_off)
{
	void *be = open_be("fixed_buffers=off");
	uint8_t *mem = aligned(MiB), name[HC_BE_NAME_BYTES];

	ck_assert_int_eq(B->reg_mem(be, mem, MiB), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_buffers"), 0);
	mkname(name, 16, 1);
	fill(mem, 8192, 6, 0);
	ck_assert_int_eq(put(be, name, mem, 8192), 0);
	ck_assert(has_pat(be, name, 8192, 6));
	ck_assert_uint_eq(hct_be_stat(B, be, "fixed_ios"), 0);
	ck_assert_int_eq(logged(HC_BE_LOG_WARN, ""), 0);
	ck_assert_int_eq(B->unreg_mem(be, mem), 0);
	B->close(be);
	free(mem);
}
END_TEST

/* ---- O_DIRECT refused: ramfs has no direct I/O */

static int mount_ramfs(void)
{
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("none", tdir, "ramfs", 0, NULL) < 0) {
		fprintf(stderr, "direct_fallback: skipped (cannot mount a ramfs: %s)\n", strerror(errno));
		return -1;
	}
	return 0;
}

START_TEST(direct_fallback)
{
	uint8_t name[HC_BE_NAME_BYTES];
	char err[256];
	void *be;

	if (mount_ramfs() < 0)
		return;
	ck_assert_int_eq(try_open(&be, "direct=on", err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "direct=on") && strstr(err, "refuses O_DIRECT"), "%s", err);
	be = open_be(NULL);
	ck_assert_int_eq(logged(HC_BE_LOG_WARN, "refuses O_DIRECT"), 1);
	ck_assert_str_eq(ctl_get(be, "direct_active"), "no");
	ck_assert_uint_eq(hct_be_stat(B, be, "direct_fallbacks"), 1);
	mkname(name, 17, 1);
	for (int i = 0; i < 4; i++)
		put_pat(be, name, 16384, 7 + i);
	ck_assert(has_pat(be, name, 16384, 10));
	ck_assert_uint_eq(hct_be_stat(B, be, "direct_ios"), 0);
	ck_assert_int_eq(logged(HC_BE_LOG_WARN, ""), 1);
	B->close(be);
}
END_TEST

/* ---- concurrency */

#define T_SUB  4
#define T_REAP 3
#define T_OPS  48
#define T_LEN  20000

struct tctx {
	void *be;
	_Atomic int phase_ops; /* completions reaped in this phase */
	_Atomic int seen[T_SUB * T_OPS];
	_Atomic int bad;
	int want;
	uint32_t opcode;
	uint8_t *buf[T_SUB * T_OPS];
};

static struct tctx T;

static void *submitter(void *arg)
{
	unsigned t = (unsigned)(uintptr_t)arg;

	for (unsigned i = 0; i < T_OPS; i++) {
		unsigned id = t * T_OPS + i;
		struct iovec v[2] = { { T.buf[id], 7000 }, { T.buf[id] + 7000, T_LEN - 7000 } };
		struct hc_be_op op = { .opcode = T.opcode, .iovcnt = 2, .iov = v, .user_data = id };
		int r;

		mkname(op.name, 18, id);
		while ((r = B->submit(T.be, &op, 1)) == -EAGAIN)
			sched_yield();
		if (r != 1)
			atomic_fetch_add(&T.bad, 1);
	}
	return NULL; /* exits with its ops in flight */
}

static void *reaper(void *arg)
{
	int timeout = (int)(intptr_t)arg;
	struct hc_be_cqe c[8];

	while (atomic_load(&T.phase_ops) < T.want) {
		int n = B->reap(T.be, c, 1 + (unsigned)timeout % 8, timeout);

		if (n < 0)
			atomic_fetch_add(&T.bad, 1);
		if (n == 0)
			sched_yield(); /* nothing in flight yet: reap returned at once */
		for (int k = 0; k < n; k++) {
			unsigned id = (unsigned)c[k].user_data;
			int64_t want = T.opcode == HC_BE_OP_PUT ? 0 : T_LEN;

			if (id >= T_SUB * T_OPS || atomic_fetch_add(&T.seen[id], 1) != 0 || c[k].result != want ||
			    (T.opcode == HC_BE_OP_GET && !same(T.buf[id], T_LEN, id, 0)))
				atomic_fetch_add(&T.bad, 1);
			atomic_fetch_add(&T.phase_ops, 1);
		}
	}
	return NULL;
}

static void run_phase(uint32_t opcode)
{
	pthread_t s[T_SUB], r[T_REAP];
	static const int timeouts[T_REAP] = { -1, 0, 3 };

	T.opcode = opcode;
	T.want = T_SUB * T_OPS;
	atomic_store(&T.phase_ops, 0);
	for (int i = 0; i < T_SUB * T_OPS; i++)
		atomic_store(&T.seen[i], 0);
	for (int i = 0; i < T_REAP; i++)
		ck_assert_int_eq(pthread_create(&r[i], NULL, reaper, (void *)(intptr_t)timeouts[i]), 0);
	for (int i = 0; i < T_SUB; i++)
		ck_assert_int_eq(pthread_create(&s[i], NULL, submitter, (void *)(uintptr_t)i), 0);
	for (int i = 0; i < T_SUB; i++)
		pthread_join(s[i], NULL);
	for (int i = 0; i < T_REAP; i++)
		pthread_join(r[i], NULL);
	ck_assert_int_eq(atomic_load(&T.bad), 0);
	ck_assert_int_eq(atomic_load(&T.phase_ops), T_SUB * T_OPS);
	for (int i = 0; i < T_SUB * T_OPS; i++)
		ck_assert_int_eq(atomic_load(&T.seen[i]), 1);
}

/* Several submitters (which exit with ops in flight) and reapers (waiting
 * for ever, polling, and with a timeout) on a small queue, with fsync. */
START_TEST(threads)
{
	T.be = open_be("queue_depth=8 fsync=always");
	for (int i = 0; i < T_SUB * T_OPS; i++) {
		T.buf[i] = malloc(T_LEN);
		fill(T.buf[i], T_LEN, (uint32_t)i, 0);
	}
	run_phase(HC_BE_OP_PUT);
	for (int i = 0; i < T_SUB * T_OPS; i++)
		memset(T.buf[i], 0, T_LEN);
	run_phase(HC_BE_OP_GET);
	ck_assert_uint_eq(hct_be_stat(B, T.be, "objects"), T_SUB * T_OPS);
	ck_assert_uint_eq(hct_be_stat(B, T.be, "inflight"), 0);
	ck_assert_uint_eq(hct_be_stat(B, T.be, "errors"), 0);
	fprintf(stderr, "threads: %" PRIu64 " I/Os tried again (-EAGAIN, or their thread exited)\n",
		hct_be_stat(B, T.be, "retries"));
	B->close(T.be);
	for (int i = 0; i < T_SUB * T_OPS; i++)
		free(T.buf[i]);
}
END_TEST

struct xreap {
	void *be;
	struct hc_be_cqe c[32];
	int n;
};

static void *reap_and_exit(void *arg)
{
	struct xreap *x = arg;

	x->n = B->reap(x->be, x->c, 32, 0);
	return NULL;
}

/* io_uring cancels the queued work of a thread that exits (an fsync always
 * waits in io-wq): here each reap runs on a thread that ends right after it
 * queued the next steps.  The ops must still succeed. */
START_TEST(exiting_threads)
{
	enum { N = 32, LEN = 256 * 1024 + 1 };
	void *be = open_be("queue_depth=32 fsync=always");
	uint8_t *buf = malloc((size_t)N * LEN);
	struct hc_be_op ops[N];
	struct iovec v[N];
	int got = 0;

	for (unsigned i = 0; i < N; i++) {
		v[i] = (struct iovec){ buf + (size_t)i * LEN, LEN };
		fill(v[i].iov_base, LEN, 200 + i, 0);
		ops[i] = (struct hc_be_op){ .opcode = HC_BE_OP_PUT, .iovcnt = 1, .iov = &v[i], .user_data = i };
		mkname(ops[i].name, 21, i);
	}
	ck_assert_int_eq(B->submit(be, ops, N), N);
	while (got < N) {
		struct xreap x = { .be = be };
		pthread_t t;

		ck_assert_int_eq(pthread_create(&t, NULL, reap_and_exit, &x), 0);
		pthread_join(t, NULL);
		ck_assert_int_ge(x.n, 0);
		for (int k = 0; k < x.n; k++)
			ck_assert_msg(x.c[k].result == 0, "put %" PRIu64 ": %" PRId64, x.c[k].user_data, x.c[k].result);
		got += x.n;
	}
	for (unsigned i = 0; i < N; i++)
		ck_assert(has_pat(be, ops[i].name, LEN, 200 + i));
	fprintf(stderr, "exiting_threads: %" PRIu64 " I/Os tried again (-EAGAIN, or their thread exited)\n",
		hct_be_stat(B, be, "retries"));
	B->close(be);
	free(buf);
}
END_TEST

/* GETs racing puts of the same name and evictions of it: a GET sees the
 * old object, the new one, or none, never a mix or a wrong length.  One
 * thread reaps for both and hands each its completion. */
struct race {
	void *be;
	_Atomic int stop, stop_reaper, bad;
	_Atomic uint64_t seq[2];
	_Atomic int64_t res[2];
};

static struct race R;

static int64_t race_op(unsigned t, uint32_t opcode, const uint8_t *name, void *buf, size_t len)
{
	static _Thread_local uint32_t seq;
	struct iovec v = { buf, len };
	struct hc_be_op op = { .opcode = opcode, .iovcnt = 1, .iov = &v };

	op.user_data = (uint64_t)t << 32 | ++seq;
	memcpy(op.name, name, HC_BE_NAME_BYTES);
	while (B->submit(R.be, &op, 1) != 1)
		sched_yield();
	while (atomic_load(&R.seq[t]) != seq)
		sched_yield();
	return atomic_load(&R.res[t]);
}

static void *race_reaper(void *arg)
{
	struct hc_be_cqe c[4];

	(void)arg;
	while (!atomic_load(&R.stop_reaper)) {
		int n = B->reap(R.be, c, 4, 5);

		for (int k = 0; k < n; k++) {
			unsigned t = (unsigned)(c[k].user_data >> 32);

			atomic_store(&R.res[t], c[k].result);
			atomic_store(&R.seq[t], (uint32_t)c[k].user_data);
		}
	}
	return NULL;
}

static void *race_reader(void *arg)
{
	const uint8_t *name = arg;
	uint8_t *buf = malloc(65536 + 4096);

	while (!atomic_load(&R.stop)) {
		int64_t r = race_op(1, HC_BE_OP_GET, name, buf, 65536 + 4096);

		if (!(r == -ENOENT || (r == 65536 && same(buf, 65536, 1, 0)) || (r == 32768 && same(buf, 32768, 2, 0))))
			atomic_fetch_add(&R.bad, 1);
	}
	free(buf);
	return NULL;
}

START_TEST(get_races)
{
	uint8_t x[HC_BE_NAME_BYTES], other[HC_BE_NAME_BYTES], *a = aligned(65536), *b = aligned(32768);
	pthread_t rp, rd;

	R.be = open_be("capacity=160K");
	mkname(x, 22, 0);
	fill(a, 65536, 1, 0);
	fill(b, 32768, 2, 0);
	ck_assert_int_eq(pthread_create(&rp, NULL, race_reaper, NULL), 0);
	ck_assert_int_eq(pthread_create(&rd, NULL, race_reader, x), 0);
	for (unsigned i = 0; i < 400; i++) {
		ck_assert_int_eq(race_op(0, HC_BE_OP_PUT, x, i & 1 ? b : a, i & 1 ? 32768 : 65536), 0);
		mkname(other, 22, 1 + i % 8); /* pushes x out now and then */
		ck_assert_int_eq(race_op(0, HC_BE_OP_PUT, other, b, 32768), 0);
	}
	atomic_store(&R.stop, 1);
	pthread_join(rd, NULL); /* its last GET still needs the reaper */
	atomic_store(&R.stop_reaper, 1);
	pthread_join(rp, NULL);
	ck_assert_int_eq(atomic_load(&R.bad), 0);
	ck_assert_uint_gt(hct_be_stat(B, R.be, "evictions"), 0);
	ck_assert_uint_le(hct_be_stat(B, R.be, "bytes"), 160 * 1024);
	fprintf(stderr, "get_races: %" PRIu64 " I/Os tried again\n", hct_be_stat(B, R.be, "retries"));
	B->close(R.be);
	free(a), free(b);
}
END_TEST

/* Cancel: every op still completes exactly once, a canceled put leaves the
 * old object (or the new, if it won), and no temp file stays. */
START_TEST(cancel)
{
	enum { N = 24 };
	void *be = open_be("queue_depth=32 fsync=always");
	struct hc_be_op ops[N];
	struct hc_be_cqe c[N];
	struct iovec v[N];
	int seen[N] = { 0 }, got = 0, canceled = 0;
	uint8_t *buf = aligned((size_t)N * 256 * 1024);

	for (unsigned i = 0; i < N; i++) {
		v[i] = (struct iovec){ buf + (size_t)i * 256 * 1024, 256 * 1024 };
		fill(v[i].iov_base, v[i].iov_len, 100 + i, 0);
		ops[i] = (struct hc_be_op){ .opcode = HC_BE_OP_PUT, .iovcnt = 1, .iov = &v[i], .user_data = i };
		mkname(ops[i].name, 19, i);
		if (i % 2 == 0)
			put_pat(be, ops[i].name, 4096, i); /* an old object */
	}
	ck_assert_int_eq(B->submit(be, ops, N), N);
	for (unsigned i = 0; i < N; i++)
		ck_assert_int_eq(B->cancel(be, i), 0);
	while (got < N) {
		int n = B->reap(be, c + got, N - (unsigned)got, 5000);

		ck_assert_int_gt(n, 0);
		got += n;
	}
	for (int k = 0; k < N; k++) {
		unsigned i = (unsigned)c[k].user_data;

		ck_assert_uint_lt(i, N);
		ck_assert_int_eq(seen[i]++, 0);
		ck_assert_msg(c[k].result == 0 || c[k].result == -ECANCELED, "put %u: %" PRId64, i, c[k].result);
		if (c[k].result == 0)
			ck_assert(has_pat(be, ops[i].name, 256 * 1024, 100 + i));
		else if (i % 2 == 0)
			ck_assert(has_pat(be, ops[i].name, 4096, i));
		else
			ck_assert_int_eq(exists(be, ops[i].name), 0);
		canceled += c[k].result == -ECANCELED;
	}
	ck_assert_int_eq(B->cancel(be, 0), -ENOENT); /* reaped: gone */
	ck_assert_int_eq(temps(), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "canceled"), (uint64_t)canceled);
	ck_assert_uint_eq(hct_be_stat(B, be, "reserved_bytes"), 0);
	/* A canceled GET ends too. */
	for (unsigned i = 0; i < N; i++)
		ops[i].opcode = HC_BE_OP_GET;
	ck_assert_int_eq(B->submit(be, ops, N), N);
	for (unsigned i = 0; i < N; i++)
		B->cancel(be, i);
	for (got = 0; got < N;) {
		int n = B->reap(be, c, N, 5000);

		ck_assert_int_gt(n, 0);
		got += n;
	}
	ck_assert_int_eq(B->reap(be, c, N, 0), 0);
	B->close(be);
	free(buf);
}
END_TEST

/* reap's waits: none in flight is at once, whatever the timeout; 0 polls. */
START_TEST(reap_waits)
{
	void *be = open_be(NULL);
	struct hc_be_cqe c;
	double t0 = hct_now();
	uint8_t name[HC_BE_NAME_BYTES];

	ck_assert_int_eq(B->reap(be, &c, 1, -1), 0);
	ck_assert_int_eq(B->reap(be, &c, 1, 500), 0);
	ck_assert_int_eq(B->reap(be, &c, 1, 0), 0);
	ck_assert_msg(hct_now() - t0 < 0.4, "reap with nothing in flight waited");
	mkname(name, 20, 1);
	put_pat(be, name, 4096, 1);
	struct hc_be_op op = { .opcode = HC_BE_OP_GET, .iovcnt = 0, .user_data = 7 };
	memcpy(op.name, name, sizeof(name));
	ck_assert_int_eq(B->submit(be, &op, 1), 1);
	ck_assert_int_eq(B->reap(be, &c, 1, -1), 1);
	ck_assert_int_eq(c.result, -EINVAL);
	B->close(be);
}
END_TEST

static TCase *tcase(Suite *s, const char *name, int timeout)
{
	TCase *t = tcase_create(name);

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, timeout);
	suite_add_tcase(s, t);
	return t;
}

static Suite *suite(void)
{
	Suite *s = suite_create("file_backend");
	TCase *t = tcase(s, "io", 10);

	tcase_add_test(t, roundtrip_aligned);
	tcase_add_test(t, backend_check);
	tcase_add_test(t, roundtrip_misaligned);
	tcase_add_test(t, get_lengths);
	tcase_add_test(t, overwrite_delete);
	tcase_add_test(t, exists_batch);
	tcase_add_test(t, bad_ops);
	tcase_add_test(t, capacity_lru);
	tcase_add_test(t, reopen_rebuilds);
	tcase_add_test(t, sweep_and_ignore);
	tcase_add_test(t, busy_dir);
	tcase_add_test(t, fsync_always);
	tcase_add_test(t, reap_waits);
	t = tcase(s, "options", 10);
	tcase_add_test(t, bad_options);
	tcase_add_test(t, bad_dir);
	tcase_add_test(t, dir_not_writable);
	tcase_add_test(t, ctl_and_stats);
	t = tcase(s, "memory", 20);
	tcase_add_test(t, fixed_buffers);
	tcase_add_test(t, fixed_chunks);
	tcase_add_test(t, fixed_refused);
	tcase_add_test(t, fixed_off);
	tcase_add_test(t, direct_fallback);
	t = tcase(s, "concurrency", 30);
	tcase_add_test(t, kill_midput);
	tcase_add_test(t, threads);
	tcase_add_test(t, exiting_threads);
	tcase_add_test(t, get_races);
	tcase_add_test(t, cancel);
	return s;
}

int main(void)
{
	int r;

	sweep_dirs();
	r = hct_run(suite());
	sweep_dirs();
	return r;
}
