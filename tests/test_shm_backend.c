/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_shm_backend.c - the shm L3 plugin (backends/shm), loaded with dlopen
 * the way the host will: round trips, GET length semantics, overwrite,
 * delete, exists batches, capacity and LRU order, pins, persistence, racing
 * creators, concurrent processes with content checks, processes SIGKILLed
 * while holding the lock, mid-copy and with pins, corrupt segments, and
 * every bad option.  Stores are named hctshm-<pid>-<n>, a few MiB each, and
 * removed by each test's teardown (and leftovers of dead pids by main).
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hicache/backend.h>

#include "../backends/shm/layout.h"
#include "hctbe.h"

#define PREFIX      "hctshm-"
#define FILE_PREFIX "hicache-l3." PREFIX
#define K4          4096u

static const struct hc_backend *B;
static char logbuf[16384]; /* this process's log lines, '\n'-separated */
static char err[512];

static void host_log(const struct hc_backend_host *h, int level, const char *fmt, ...)
{
	size_t n = strlen(logbuf);
	va_list ap;

	(void)h;
	if (n + 2 >= sizeof(logbuf))
		return;
	n += (size_t)snprintf(logbuf + n, sizeof(logbuf) - n, "%d ", level);
	va_start(ap, fmt);
	if (n < sizeof(logbuf))
		n += (size_t)vsnprintf(logbuf + n, sizeof(logbuf) - n, fmt, ap);
	va_end(ap);
	if (n + 1 < sizeof(logbuf))
		strcat(logbuf, "\n");
}

static const struct hc_backend_host host = {
	.abi_version = HC_BACKEND_ABI_VERSION,
	.size = sizeof(struct hc_backend_host),
	.log = host_log,
};

static void load_plugin(void)
{
	const char *dir = getenv("HC_BUILDDIR");
	char path[4096];
	hc_backend_entry_fn entry;
	void *h;

	snprintf(path, sizeof(path), "%s/backends/shm/.libs/shm.so", dir && *dir ? dir : ".");
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!h) {
		fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
		exit(EXIT_FAILURE);
	}
	entry = (hc_backend_entry_fn)dlsym(h, HC_BACKEND_ENTRY_SYMBOL);
	if (!entry || !(B = entry(&host))) {
		fprintf(stderr, "%s: no %s\n", path, HC_BACKEND_ENTRY_SYMBOL);
		exit(EXIT_FAILURE);
	}
}

/* ---- store names and files */

static const char *sname(void)
{
	static char names[8][64];
	static int n;
	char *s = names[n % 8];

	snprintf(s, 64, PREFIX "%d-%d", (int)getpid(), n);
	n++;
	return s;
}

static const char *spath(const char *name)
{
	static char p[256];

	snprintf(p, sizeof(p), "/dev/shm/hicache-l3.%s", name);
	return p;
}

/* Remove our stores (mine) or those of processes that are gone. */
static void sweep(int mine)
{
	glob_t g;

	if (glob("/dev/shm/" FILE_PREFIX "*", GLOB_NOSORT, NULL, &g) != 0)
		return;
	for (size_t i = 0; i < g.gl_pathc; i++) {
		int pid = atoi(g.gl_pathv[i] + strlen("/dev/shm/" FILE_PREFIX));
		bool ours = pid == getpid(), gone = pid > 0 && kill(pid, 0) < 0 && errno == ESRCH;
		if (mine ? ours : gone)
			remove(g.gl_pathv[i]);
	}
	globfree(&g);
}

static void setup(void)
{
	logbuf[0] = 0;
}

static void teardown(void)
{
	sweep(1);
}

/* ---- open, ops, stats */

static int open_kv(void **be, const char *name, const char *const *kv)
{
	struct hc_be_option o[16];
	char buf[16][600];
	unsigned n = 0;

	if (name) {
		snprintf(buf[0], sizeof(buf[0]), "name=%s", name);
		n = 1;
	}
	for (; *kv && n < 16; kv++, n++)
		snprintf(buf[n], sizeof(buf[n]), "%s", *kv);
	for (unsigned i = 0; i < n; i++) {
		char *eq = strchr(buf[i], '=');
		o[i].key = buf[i];
		o[i].value = eq ? eq + 1 : "";
		if (eq)
			*eq = 0;
	}
	err[0] = 0;
	*be = NULL;
	return B->open(o, n, be, err, sizeof(err));
}
/* Open store 'name' with more "key=value" options (at least one). */
#define OPEN(be, name, ...) open_kv((be), (name), (const char *const[]){ __VA_ARGS__, NULL })

static void *must_open_kv(const char *name, const char *const *kv)
{
	void *be = NULL;
	int ret = open_kv(&be, name, kv);

	ck_assert_msg(ret == 0 && be, "open: %d %s", ret, err);
	return be;
}
#define must_open(name, ...) must_open_kv((name), (const char *const[]){ __VA_ARGS__, NULL })

static void oname(uint8_t n[HC_BE_NAME_BYTES], uint32_t id)
{
	memset(n, 0xab, 32);
	memset(n + 32, 0, 32);
	memcpy(n + 32, &id, sizeof(id));
}

static int64_t op1v(void *be, uint32_t opcode, uint32_t id, const struct iovec *iov, unsigned iovcnt)
{
	struct hc_be_op op = { .opcode = opcode, .iovcnt = iovcnt, .iov = iov, .user_data = 0x5eed0000u + id };
	struct hc_be_cqe c;
	int ret;

	oname(op.name, id);
	ret = B->submit(be, &op, 1);
	if (ret != 1)
		return ret < 0 ? ret : -1000;
	ret = B->reap(be, &c, 1, -1);
	if (ret != 1 || c.user_data != op.user_data)
		return -1001;
	return c.result;
}

static int64_t put(void *be, uint32_t id, const void *buf, size_t len)
{
	struct iovec v = { (void *)buf, len };
	return op1v(be, HC_BE_OP_PUT, id, &v, 1);
}

static int64_t get(void *be, uint32_t id, void *buf, size_t len)
{
	struct iovec v = { buf, len };
	return op1v(be, HC_BE_OP_GET, id, &v, 1);
}

static int64_t exists(void *be, uint32_t id)
{
	return op1v(be, HC_BE_OP_EXISTS, id, NULL, 0);
}

static int64_t del(void *be, uint32_t id)
{
	return op1v(be, HC_BE_OP_DELETE, id, NULL, 0);
}

static void assert_check(void *be)
{
	char out[512] = "";
	int r = B->ctl(be, "check", NULL, out, sizeof(out));

	ck_assert_msg(r > 0 && strncmp(out, "ok", 2) == 0, "check: %d %s", r, out);
}

/* ---- contents: a 16-byte header {id, ver, len}, then bytes of (id, ver, i) */

static uint8_t pat(uint32_t id, uint32_t ver, uint64_t i)
{
	uint64_t x = (i + 1) * UINT64_C(0x9e3779b97f4a7c15) ^ ((uint64_t)id << 32 | ver);
	return (uint8_t)(x ^ (x >> 29) ^ (x >> 43));
}

static void fill(uint8_t *b, size_t len, uint32_t id, uint32_t ver)
{
	size_t i = 0;

	if (len >= 16) {
		uint64_t l = len;
		memcpy(b, &id, 4);
		memcpy(b + 4, &ver, 4);
		memcpy(b + 8, &l, 8);
		i = 16;
	}
	for (; i < len; i++)
		b[i] = pat(id, ver, i);
}

/* The version of a whole object of id read into b (len bytes), or -1. */
static int64_t verify(const uint8_t *b, size_t len, uint32_t id)
{
	uint32_t gid, ver;
	uint64_t l;

	if (len < 16)
		return -1;
	memcpy(&gid, b, 4);
	memcpy(&ver, b + 4, 4);
	memcpy(&l, b + 8, 8);
	if (gid != id || l != len)
		return -1;
	for (size_t i = 16; i < len; i++)
		if (b[i] != pat(id, ver, i))
			return -1;
	return ver;
}

static uint8_t *obj(uint32_t id, uint32_t ver, size_t len)
{
	uint8_t *b = malloc(len);

	ck_assert_ptr_nonnull(b);
	fill(b, len, id, ver);
	return b;
}

static void put_obj(void *be, uint32_t id, uint32_t ver, size_t len)
{
	uint8_t *b = obj(id, ver, len);
	int64_t r = put(be, id, b, len);

	ck_assert_msg(r == 0, "put %u (%zu bytes): %lld", id, len, (long long)r);
	free(b);
}

static void get_obj(void *be, uint32_t id, uint32_t ver, size_t len)
{
	uint8_t *b = malloc(len + 64);
	int64_t r;

	ck_assert_ptr_nonnull(b);
	r = get(be, id, b, len + 64);
	ck_assert_msg(r == (int64_t)len, "get %u: %lld, want %zu", id, (long long)r, len);
	ck_assert_msg(verify(b, len, id) == ver, "get %u: wrong bytes", id);
	free(b);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *shared(size_t bytes)
{
	void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(m, MAP_FAILED);
	return m;
}

static int reap_child(pid_t pid)
{
	int st = 0;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return st;
}

/* ---- round trips */

START_TEST(test_roundtrip)
{
	const char *name = sname();
	void *be = must_open(name, "capacity=4M", "destroy_on_close=1");
	uint8_t *src = malloc(6000), *dst = malloc(16384), *big;
	struct iovec in[3], out[3];
	int64_t r;

	(void)name;
	ck_assert_uint_eq(B->caps, HC_BE_CAP_BATCH_EXISTS | HC_BE_CAP_DELETE | HC_BE_CAP_PERSISTENT);
	ck_assert_str_eq(B->name, "shm");
	/* Three misaligned iovecs in, two out, one of them empty. */
	fill(src, 6000, 1, 7);
	in[0] = (struct iovec){ src, 1003 };
	in[1] = (struct iovec){ src + 1003, 4096 };
	in[2] = (struct iovec){ src + 5099, 7 };
	ck_assert_int_eq(op1v(be, HC_BE_OP_PUT, 1, in, 3), 0);
	memset(dst, 0xee, 16384);
	out[0] = (struct iovec){ dst + 1, 2000 };
	out[1] = (struct iovec){ dst + 2001, 0 };
	out[2] = (struct iovec){ dst + 2001, 5000 };
	ck_assert_int_eq(op1v(be, HC_BE_OP_GET, 1, out, 3), 5106);
	ck_assert_int_eq(memcmp(dst + 1, src, 5106), 0);
	ck_assert_uint_eq(dst[0], 0xee);
	ck_assert_uint_eq(dst[5107], 0xee); /* nothing past the object */
	/* A buffer shorter than the object: its whole length, a prefix copied. */
	memset(dst, 0xee, 16384);
	ck_assert_int_eq(get(be, 1, dst + 3, 100), 5106);
	ck_assert_int_eq(memcmp(dst + 3, src, 100), 0);
	ck_assert_uint_eq(dst[103], 0xee);
	/* One byte; and a large odd length. */
	ck_assert_int_eq(put(be, 2, "x", 1), 0);
	ck_assert_int_eq(get(be, 2, dst, 4096), 1);
	ck_assert_uint_eq(dst[0], 'x');
	put_obj(be, 3, 1, (1u << 20) + 1);
	get_obj(be, 3, 1, (1u << 20) + 1);
	big = obj(4, 9, 3 * K4);
	ck_assert_int_eq(put(be, 4, big, 3 * K4), 0);
	ck_assert_int_eq(exists(be, 4), 1);
	ck_assert_int_eq(exists(be, 5), 0);
	ck_assert_int_eq(get(be, 5, dst, 100), -ENOENT);
	r = get(be, 4, dst, 3 * K4);
	ck_assert_int_eq(r, 3 * K4);
	ck_assert_int_eq(memcmp(dst, big, 3 * K4), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 4);
	ck_assert_uint_eq(hct_be_stat(B, be, "bytes"), 5106 + 1 + (1u << 20) + 1 + 3 * K4);
	ck_assert_uint_eq(hct_be_stat(B, be, "capacity_bytes"), 4u << 20);
	ck_assert_uint_eq(hct_be_stat(B, be, "hits"), 5);
	ck_assert_uint_eq(hct_be_stat(B, be, "misses"), 1);
	ck_assert_uint_eq(hct_be_stat(B, be, "puts"), 4);
	ck_assert_uint_eq(hct_be_stat(B, be, "openers"), 1);
	assert_check(be);
	free(src);
	free(dst);
	free(big);
	B->close(be);
	ck_assert_int_eq(access(spath(name), F_OK), -1); /* destroy_on_close */
}
END_TEST

START_TEST(test_overwrite_delete)
{
	void *be = must_open(sname(), "capacity=1M", "destroy_on_close=1");

	put_obj(be, 1, 1, 10000);
	put_obj(be, 1, 2, 3000);
	get_obj(be, 1, 2, 3000);
	put_obj(be, 1, 3, 70000);
	get_obj(be, 1, 3, 70000);
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 1);
	ck_assert_uint_eq(hct_be_stat(B, be, "bytes"), 70000);
	ck_assert_uint_eq(hct_be_stat(B, be, "free_bytes"), (1u << 20) - 18 * K4);
	ck_assert_int_eq(del(be, 1), 0);
	ck_assert_int_eq(del(be, 1), -ENOENT);
	ck_assert_int_eq(exists(be, 1), 0);
	ck_assert_int_eq(get(be, 1, err, sizeof(err)), -ENOENT);
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "free_bytes"), 1u << 20);
	ck_assert_uint_eq(hct_be_stat(B, be, "deletes"), 2);
	ck_assert_uint_eq(hct_be_stat(B, be, "errors"), 0);
	assert_check(be);
	B->close(be);
}
END_TEST

START_TEST(test_exists_batch_and_reap)
{
	void *be = must_open(sname(), "capacity=1M", "destroy_on_close=1");
	struct hc_be_op ops[24];
	struct hc_be_cqe c[24];
	uint8_t buf[K4], seen[64] = { 0 };
	struct iovec v = { buf, sizeof(buf) };
	double t0;
	int n = 0, r;

	for (uint32_t id = 0; id < 20; id += 2)
		put_obj(be, id, 1, 100 + id);
	/* Nothing in flight: 0 at once, even when told to wait forever. */
	t0 = now_s();
	ck_assert_int_eq(B->reap(be, c, 24, -1), 0);
	ck_assert_int_eq(B->reap(be, c, 24, 500), 0);
	ck_assert(now_s() - t0 < 0.4);
	memset(ops, 0, sizeof(ops));
	for (uint32_t id = 0; id < 20; id++) {
		ops[id].opcode = HC_BE_OP_EXISTS;
		ops[id].user_data = id;
		oname(ops[id].name, id);
	}
	/* A mixed tail: a GET, a DELETE, a bad opcode, an EXISTS with an iovec. */
	ops[20] = (struct hc_be_op){ .opcode = HC_BE_OP_GET, .iovcnt = 1, .iov = &v, .user_data = 20 };
	oname(ops[20].name, 4);
	ops[21] = (struct hc_be_op){ .opcode = HC_BE_OP_DELETE, .user_data = 21 };
	oname(ops[21].name, 6);
	ops[22] = (struct hc_be_op){ .opcode = 99, .user_data = 22 };
	ops[23] = (struct hc_be_op){ .opcode = HC_BE_OP_EXISTS, .iovcnt = 1, .iov = &v, .user_data = 23 };
	ck_assert_int_eq(B->submit(be, ops, 24), 24);
	while (n < 24) {
		r = B->reap(be, c, 5, 1000);
		ck_assert_int_gt(r, 0);
		for (int k = 0; k < r; k++) {
			uint64_t u = c[k].user_data;
			ck_assert_uint_lt(u, 24);
			ck_assert_msg(!seen[u]++, "completion %llu reaped twice", (unsigned long long)u);
			if (u < 20)
				ck_assert_int_eq(c[k].result, u % 2 == 0);
			else if (u == 20)
				ck_assert_int_eq(c[k].result, 104);
			else if (u == 21)
				ck_assert_int_eq(c[k].result, 0);
			else
				ck_assert_int_eq(c[k].result, -EINVAL);
		}
		n += r;
	}
	ck_assert_int_eq(B->reap(be, c, 24, 0), 0);
	ck_assert_int_eq(exists(be, 6), 0);
	/* Bad submits and bad ops. */
	ck_assert_int_eq(B->submit(be, NULL, 1), -EINVAL);
	ck_assert_int_eq(B->submit(be, ops, 0), -EINVAL);
	ck_assert_int_eq(op1v(be, HC_BE_OP_GET, 4, NULL, 0), -EINVAL);
	ck_assert_int_eq(op1v(be, HC_BE_OP_GET, 4, &v, HC_BE_IOV_MAX + 1), -EINVAL);
	ck_assert_int_eq(op1v(be, HC_BE_OP_PUT, 4, &v, 0), -EINVAL);
	ck_assert_int_eq(op1v(be, HC_BE_OP_DELETE, 4, &v, 1), -EINVAL);
	v.iov_len = 0;
	ck_assert_int_eq(op1v(be, HC_BE_OP_PUT, 4, &v, 1), -EINVAL); /* zero bytes */
	ck_assert_int_eq(B->cancel(be, 1), -EOPNOTSUPP);
	ck_assert_int_eq(B->reg_mem(be, buf, sizeof(buf)), 0);
	ck_assert_int_eq(B->unreg_mem(be, buf), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "errors"), 7);
	B->close(be);
}
END_TEST

/* ---- capacity and LRU */

START_TEST(test_lru_capacity)
{
	void *be = must_open(sname(), "capacity=64K", "block_size=4K", "destroy_on_close=1");
	uint8_t buf[16 * K4];
	void *small;

	for (uint32_t id = 1; id <= 4; id++) /* A B C D, 4 blocks each: full */
		put_obj(be, id, 1, 4 * K4);
	ck_assert_uint_eq(hct_be_stat(B, be, "free_bytes"), 0);
	get_obj(be, 1, 1, 4 * K4);          /* A is now the most recent */
	ck_assert_int_eq(exists(be, 2), 1); /* EXISTS does not touch */
	put_obj(be, 5, 1, 4 * K4);          /* E evicts B; order C D A E */
	ck_assert_int_eq(exists(be, 2), 0);
	ck_assert_int_eq(exists(be, 1), 1);
	put_obj(be, 6, 1, 2 * K4 + 1); /* F (3 blocks) evicts C; order D A E F, 1 block free */
	ck_assert_int_eq(exists(be, 3), 0);
	ck_assert_int_eq(exists(be, 4), 1);
	/* Replacing D: the old D goes last, so A (next least recent) goes. */
	put_obj(be, 4, 2, 4 * K4);
	ck_assert_int_eq(exists(be, 1), 0);
	get_obj(be, 4, 2, 4 * K4); /* order E F D, 5 blocks free */
	ck_assert_uint_eq(hct_be_stat(B, be, "evictions"), 3);
	ck_assert_uint_eq(hct_be_stat(B, be, "free_bytes"), 5 * K4);
	put_obj(be, 7, 1, 6 * K4); /* G evicts E only */
	ck_assert_int_eq(exists(be, 5), 0);
	ck_assert_int_eq(exists(be, 6), 1);
	ck_assert_uint_eq(hct_be_stat(B, be, "evictions"), 4);
	{
		uint8_t *huge = obj(9, 1, 16 * K4 + 1);
		ck_assert_int_eq(put(be, 9, huge, 16 * K4 + 1), -ENOSPC);
		free(huge);
	}
	fill(buf, sizeof(buf), 9, 1);
	ck_assert_int_eq(put(be, 9, buf, sizeof(buf)), 0); /* the whole capacity: everything else goes */
	for (uint32_t id = 1; id <= 7; id++)
		ck_assert_int_eq(exists(be, id), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 1);
	assert_check(be);
	B->close(be);

	/* The object table is a limit too: 2 entries, 3 objects. */
	small = must_open(sname(), "capacity=64K", "max_objects=2", "destroy_on_close=1");
	put_obj(small, 1, 1, 100);
	put_obj(small, 2, 1, 100);
	put_obj(small, 3, 1, 100);
	ck_assert_int_eq(exists(small, 1), 0);
	ck_assert_int_eq(exists(small, 2), 1);
	ck_assert_int_eq(exists(small, 3), 1);
	assert_check(small);
	B->close(small);
}
END_TEST

/* ---- children stuck in the middle of a copy (a fault they never leave) */

struct stuck {
	_Atomic int ready;
	int64_t result;
};
static struct stuck *stuck_sh;

static void on_fault(int sig)
{
	(void)sig;
	atomic_store(&stuck_sh->ready, 1);
	for (;;)
		pause();
}

/* A child that opens 'name' and starts a GET (or PUT) of id whose second
 * buffer faults; returns once the child is stuck in the copy. */
static pid_t spawn_stuck(const char *name, uint32_t opcode, uint32_t id, uint32_t ver, size_t len)
{
	struct stuck *sh = shared(sizeof(*sh));
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct sigaction sa = { .sa_handler = on_fault };
		struct iovec v[2];
		uint8_t *m;
		void *be;

		stuck_sh = sh;
		sigaction(SIGSEGV, &sa, NULL);
		sigaction(SIGBUS, &sa, NULL);
		if (OPEN(&be, name, "create=no", "populate=0") < 0)
			_exit(3);
		m = mmap(NULL, len + K4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			_exit(4);
		fill(m, len, id, ver);
		mprotect(m + K4, len, PROT_NONE);
		v[0] = (struct iovec){ m, K4 };
		v[1] = (struct iovec){ m + K4, len - K4 };
		sh->result = op1v(be, opcode, id, v, 2);
		_exit(5); /* the copy did not fault */
	}
	for (double t0 = now_s(); !atomic_load(&sh->ready); usleep(1000)) {
		int st;
		ck_assert_msg(waitpid(pid, &st, WNOHANG) == 0, "stuck child exited: status %d", st);
		ck_assert_msg(now_s() - t0 < 10, "child never got stuck");
	}
	munmap(sh, sizeof(*sh));
	return pid;
}

static void kill_child(pid_t pid)
{
	kill(pid, SIGKILL);
	reap_child(pid);
}

START_TEST(test_pinned_not_evicted)
{
	const char *name = sname();
	void *be = must_open(name, "capacity=64K", "put_wait_ms=50", "destroy_on_close=1");
	pid_t reader;

	put_obj(be, 1, 1, 8 * K4);                              /* P: 8 blocks */
	put_obj(be, 2, 1, 4 * K4);                              /* Q: 4 blocks; 4 free */
	reader = spawn_stuck(name, HC_BE_OP_GET, 1, 0, 8 * K4); /* pins P */
	get_obj(be, 2, 1, 4 * K4);                              /* Q the most recent: P, pinned, is the least */
	/* R needs 8 blocks of the 4 free: P is skipped, Q goes. */
	put_obj(be, 3, 1, 8 * K4);
	ck_assert_int_eq(exists(be, 1), 1);
	ck_assert_int_eq(exists(be, 2), 0);
	get_obj(be, 1, 1, 8 * K4);
	assert_check(be);
	/* S needs 12 blocks: only R's 8 could go, P's are pinned: EBUSY,
	 * and nothing was evicted for nothing. */
	{
		uint8_t *s = obj(4, 1, 12 * K4);
		ck_assert_int_eq(put(be, 4, s, 12 * K4), -EBUSY);
		ck_assert_int_eq(exists(be, 1), 1);
		ck_assert_int_eq(exists(be, 3), 1);
		ck_assert_uint_ge(hct_be_stat(B, be, "put_waits"), 1);
		/* Deleted while pinned: gone from the index, its space still held. */
		ck_assert_int_eq(del(be, 1), 0);
		ck_assert_int_eq(exists(be, 1), 0);
		ck_assert_uint_eq(hct_be_stat(B, be, "free_bytes"), 0);
		assert_check(be);
		/* The reader dies holding its pin: the next shortage finds it. */
		kill_child(reader);
		ck_assert_int_eq(put(be, 4, s, 12 * K4), 0);
		free(s);
	}
	ck_assert_uint_ge(hct_be_stat(B, be, "recoveries"), 1);
	ck_assert_uint_eq(hct_be_stat(B, be, "free_bytes"), 4 * K4);
	ck_assert_ptr_nonnull(strstr(logbuf, "died"));
	get_obj(be, 4, 1, 12 * K4);
	assert_check(be);
	B->close(be);
}
END_TEST

START_TEST(test_kill_mid_put)
{
	const char *name = sname();
	void *be = must_open(name, "capacity=256K", "destroy_on_close=1");
	pid_t w1, w2;

	put_obj(be, 1, 1, 6 * K4);
	w1 = spawn_stuck(name, HC_BE_OP_PUT, 1, 2, 10 * K4); /* replacing 1, stuck after 4K */
	w2 = spawn_stuck(name, HC_BE_OP_PUT, 2, 1, 5 * K4);  /* a new name */
	/* Readers see the old object whole, and nothing of the new one. */
	get_obj(be, 1, 1, 6 * K4);
	ck_assert_int_eq(exists(be, 2), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "free_bytes"), 256 * K4 / 4 - 21 * K4);
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 1);
	assert_check(be);
	kill_child(w1);
	kill_child(w2);
	ck_assert_int_eq(B->ctl(be, "recover", "1", NULL, 0), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "free_bytes"), 256 * K4 / 4 - 6 * K4); /* reclaimed */
	ck_assert_uint_eq(hct_be_stat(B, be, "recoveries"), 2);
	get_obj(be, 1, 1, 6 * K4);
	ck_assert_int_eq(exists(be, 2), 0);
	put_obj(be, 2, 3, 5 * K4);
	get_obj(be, 2, 3, 5 * K4);
	assert_check(be);
	B->close(be);
}
END_TEST

/* A child takes the metadata lock itself, scribbles over everything a
 * rebuild can recompute, breaks the extent chain of object 'broken', and
 * dies holding the lock. */
static void die_holding_lock(const char *path, uint32_t broken)
{
	uint8_t bname[HC_BE_NAME_BYTES];
	struct hc_shm_hdr h;
	struct hc_shm_ctl *ctl;
	struct hc_shm_obj *objs;
	uint8_t *base;
	int fd = open(path, O_RDWR);

	if (fd < 0 || pread(fd, &h, sizeof(h), 0) != sizeof(h))
		_exit(3);
	base = mmap(NULL, h.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		_exit(4);
	ctl = (struct hc_shm_ctl *)(base + h.toc[HC_SHM_REG_CTL].off);
	objs = (struct hc_shm_obj *)(base + h.toc[HC_SHM_REG_OBJS].off);
	oname(bname, broken);
	pthread_mutex_lock(&ctl->lock.m);
	ctl->lru_head = 0x7777777;
	ctl->lru_tail = 3;
	ctl->free_ext = h.nblocks + 5;
	ctl->free_obj = 0;
	ctl->free_blocks = 0;
	ctl->nobjects = 999;
	ctl->live_bytes = 1;
	memset(base + h.toc[HC_SHM_REG_BUCKETS].off, 0x5a, h.toc[HC_SHM_REG_BUCKETS].bytes);
	for (uint32_t i = 0; i < h.max_objects; i++) {
		objs[i].lprev = i * 7919u;
		objs[i].lnext = 0xffffffffu - i;
		objs[i].hnext = i + 1;
		objs[i].pins = 77;
		if (objs[i].state == HC_SHM_OBJ_LIVE && memcmp(objs[i].name, bname, sizeof(bname)) == 0)
			objs[i].ext_head = h.nblocks + 100;
	}
	raise(SIGKILL);
	_exit(5);
}

START_TEST(test_kill_holding_lock)
{
	const char *name = sname();
	void *be = must_open(name, "capacity=1M", "destroy_on_close=1");
	pid_t pid, reader, writer;

	/* 12 objects of 95 blocks in all; object 7 takes 10 of them. */
	for (uint32_t id = 0; id < 12; id++)
		put_obj(be, id, 1, 3000 + id * 5000);
	get_obj(be, 0, 1, 3000);
	/* A live reader pins 5, a live writer holds 6 blocks for object 50. */
	reader = spawn_stuck(name, HC_BE_OP_GET, 5, 0, 6 * K4);
	writer = spawn_stuck(name, HC_BE_OP_PUT, 50, 1, 6 * K4);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		die_holding_lock(spath(name), 7);
	ck_assert(WIFSIGNALED(reap_child(pid)));
	/* The next locker rebuilds: the invariants hold (the reader's pin
	 * counted, the writer's blocks kept), only the broken object is lost. */
	assert_check(be);
	ck_assert_uint_eq(hct_be_stat(B, be, "rebuilds"), 1);
	ck_assert_ptr_nonnull(strstr(logbuf, "died holding the metadata lock"));
	ck_assert_uint_eq(hct_be_stat(B, be, "objects"), 11);
	ck_assert_int_eq(exists(be, 7), 0);
	ck_assert_int_eq(exists(be, 50), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "free_bytes"), (256 - 95 + 10 - 6) * K4);
	/* The LRU order survived: 1 is the least recent (2 blocks), so 166
	 * blocks evict it alone. */
	put_obj(be, 100, 1, 166 * K4);
	ck_assert_int_eq(exists(be, 1), 0);
	for (uint32_t id = 0; id < 12; id++)
		if (id != 1 && id != 7)
			get_obj(be, id, 1, 3000 + id * 5000);
	/* The reader and the writer die: their pin and blocks come back. */
	kill_child(reader);
	kill_child(writer);
	ck_assert_int_eq(B->ctl(be, "recover", "1", NULL, 0), 0);
	ck_assert_uint_eq(hct_be_stat(B, be, "free_bytes"), (167 - 166 + 6) * K4);
	assert_check(be);
	B->close(be);
}
END_TEST

/* ---- persistence, processes, races */

START_TEST(test_persistence)
{
	const char *name = sname();
	void *be = must_open(name, "capacity=2M");
	char out[256];
	pid_t pid;

	put_obj(be, 1, 1, 50000);
	ck_assert_int_eq(B->ctl(be, "created", NULL, out, sizeof(out)), 1);
	ck_assert_str_eq(out, "1");
	B->close(be);
	ck_assert_int_eq(access(spath(name), F_OK), 0);
	be = must_open(name, "create=no");
	ck_assert_int_eq(B->ctl(be, "created", NULL, out, sizeof(out)), 1);
	ck_assert_str_eq(out, "0");
	get_obj(be, 1, 1, 50000);
	B->close(be);
	/* Another process stores, closes and exits; we read it. */
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		void *c;
		uint8_t *b = malloc(70000);
		if (!b || OPEN(&c, name, "create=no", "capacity=2M") < 0)
			_exit(3);
		fill(b, 70000, 2, 4);
		_exit(put(c, 2, b, 70000) == 0 ? (B->close(c), 0) : 4);
	}
	ck_assert_int_eq(reap_child(pid), 0);
	be = must_open(name, "create=auto", "capacity=2M");
	get_obj(be, 2, 4, 70000);
	get_obj(be, 1, 1, 50000);
	/* destroy: the name goes now, this instance keeps working. */
	ck_assert_int_eq(B->ctl(be, "destroy", "1", NULL, 0), 0);
	ck_assert_int_eq(access(spath(name), F_OK), -1);
	get_obj(be, 2, 4, 70000);
	B->close(be);
	ck_assert_int_eq(OPEN(&be, name, "create=no"), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "create=no"));
}
END_TEST

#define RACERS 4
struct race {
	_Atomic int go;
	_Atomic int created;
	_Atomic int failed;
	char err[256];
};

START_TEST(test_create_race)
{
	struct race *sh = shared(sizeof(*sh));

	for (int round = 0; round < 5; round++) {
		const char *name = sname();
		pid_t pids[RACERS];
		void *be;

		memset(sh, 0, sizeof(*sh));
		for (int c = 0; c < RACERS; c++) {
			pids[c] = fork();
			ck_assert_int_ge(pids[c], 0);
			if (pids[c] == 0) {
				char out[16];
				void *me;
				int r;
				while (!atomic_load(&sh->go))
					sched_yield();
				r = OPEN(&me, name, "capacity=2M", "max_openers=8");
				if (r < 0) {
					if (atomic_fetch_add(&sh->failed, 1) == 0)
						snprintf(sh->err, sizeof(sh->err), "%d %.200s", r, err);
					_exit(3);
				}
				B->ctl(me, "created", NULL, out, sizeof(out));
				atomic_fetch_add(&sh->created, out[0] == '1');
				{
					uint8_t *b = malloc(5000 + (size_t)c);
					fill(b, 5000 + (size_t)c, (uint32_t)c, (uint32_t)round);
					r = (int)put(me, (uint32_t)c, b, 5000 + (size_t)c);
					free(b);
				}
				B->close(me);
				_exit(r == 0 ? 0 : 4);
			}
		}
		atomic_store(&sh->go, 1);
		for (int c = 0; c < RACERS; c++)
			ck_assert_int_eq(reap_child(pids[c]), 0);
		ck_assert_msg(sh->failed == 0, "an opener failed: %s", sh->err);
		ck_assert_int_eq(sh->created, 1);
		be = must_open(name, "create=no", "destroy_on_close=1");
		for (uint32_t c = 0; c < RACERS; c++)
			get_obj(be, c, (uint32_t)round, 5000 + c);
		ck_assert_uint_eq(hct_be_stat(B, be, "opens"), RACERS + 1);
		B->close(be);
	}
}
END_TEST

START_TEST(test_openers)
{
	const char *name = sname();
	void *a = must_open(name, "capacity=1M", "max_openers=2", "destroy_on_close=1");
	void *b = must_open(name, "create=auto");
	void *c;
	pid_t pid;

	ck_assert_int_eq(OPEN(&c, name, "create=auto"), -EUSERS);
	ck_assert_ptr_nonnull(strstr(err, "opener slots"));
	ck_assert_ptr_null(c);
	B->close(b);
	c = must_open(name, "create=auto");
	B->close(c);
	/* A child opens and dies: its slot is proven free by EOWNERDEAD. */
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		void *d;
		if (OPEN(&d, name, "create=no") < 0)
			_exit(3);
		raise(SIGKILL);
	}
	ck_assert(WIFSIGNALED(reap_child(pid)));
	c = must_open(name, "create=auto");
	ck_assert_uint_eq(hct_be_stat(B, a, "openers"), 2);
	ck_assert_uint_ge(hct_be_stat(B, a, "recoveries"), 1);
	B->close(c);
	ck_assert_uint_eq(hct_be_stat(B, a, "openers"), 1);
	B->close(a);
}
END_TEST

/* ---- concurrent processes and threads, with content checks */

#define IDS    40
#define MAXLEN (24 * K4)
struct stress {
	_Atomic int stop;
	_Atomic uint64_t verified, puts, bad, errors, ops;
	_Atomic uint32_t ver;
	char what[256];
};
static struct stress *ss;
static const char *stress_name;

static void stress_err(_Atomic uint64_t *ctr, const char *what, uint32_t id, int64_t r)
{
	if (atomic_fetch_add(ctr, 1) == 0)
		snprintf(ss->what, sizeof(ss->what), "%.200s %u: %lld", what, id, (long long)r);
}

/*
 * Threads share one instance: a completion may be reaped by any of them, so
 * each posts what it reaps into a mailbox by user_data (the thread's index)
 * and waits for its own.
 */
#define MAXTHREADS 4
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int have[MAXTHREADS];
	int64_t res[MAXTHREADS];
} mbox = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, { 0 }, { 0 } };
static _Thread_local unsigned me;

static int64_t op_mt(void *be, uint32_t opcode, uint32_t id, const struct iovec *iov, unsigned iovcnt)
{
	struct hc_be_op op = { .opcode = opcode, .iovcnt = iovcnt, .iov = iov, .user_data = me };
	int64_t r;

	oname(op.name, id);
	if ((r = B->submit(be, &op, 1)) != 1)
		return r < 0 ? r : -1000;
	pthread_mutex_lock(&mbox.mu);
	while (!mbox.have[me]) {
		struct hc_be_cqe c[MAXTHREADS];
		int n;
		pthread_mutex_unlock(&mbox.mu);
		n = B->reap(be, c, MAXTHREADS, 0);
		pthread_mutex_lock(&mbox.mu);
		for (int k = 0; k < n; k++) {
			if (c[k].user_data >= MAXTHREADS || mbox.have[c[k].user_data]) {
				pthread_mutex_unlock(&mbox.mu);
				return -1002; /* not ours to have, or reaped twice */
			}
			mbox.have[c[k].user_data] = 1;
			mbox.res[c[k].user_data] = c[k].result;
		}
		if (n > 0) {
			pthread_cond_broadcast(&mbox.cv);
		} else if (!mbox.have[me]) {
			/* Another thread reaped ours and is about to post it. */
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&mbox.cv, &mbox.mu, &ts);
		}
	}
	mbox.have[me] = 0;
	r = mbox.res[me];
	pthread_mutex_unlock(&mbox.mu);
	return r;
}

static void stress_loop(void *be, unsigned seed)
{
	uint8_t *buf = malloc(MAXLEN + 64);

	if (!buf)
		_exit(6);
	while (!atomic_load(&ss->stop)) {
		uint32_t id = (uint32_t)rand_r(&seed) % IDS, dice = (uint32_t)rand_r(&seed) % 100;
		int64_t r;

		if (dice < 40) {
			size_t len = 16 + (size_t)rand_r(&seed) % (MAXLEN - 16);
			uint32_t ver = atomic_fetch_add(&ss->ver, 1);
			struct iovec v = { buf, len };
			fill(buf, len, id, ver);
			if ((r = op_mt(be, HC_BE_OP_PUT, id, &v, 1)) != 0)
				stress_err(&ss->errors, "put", id, r);
			atomic_fetch_add(&ss->puts, 1);
		} else if (dice < 90) {
			struct iovec v = { buf, MAXLEN + 64 };
			r = op_mt(be, HC_BE_OP_GET, id, &v, 1);
			if (r >= 0 && verify(buf, (size_t)r, id) < 0)
				stress_err(&ss->bad, "torn or wrong bytes in get", id, r);
			else if (r >= 0)
				atomic_fetch_add(&ss->verified, 1);
			else if (r != -ENOENT)
				stress_err(&ss->errors, "get", id, r);
		} else if (dice < 95) {
			if ((r = op_mt(be, HC_BE_OP_DELETE, id, NULL, 0)) != 0 && r != -ENOENT)
				stress_err(&ss->errors, "delete", id, r);
		} else if ((r = op_mt(be, HC_BE_OP_EXISTS, id, NULL, 0)) != 0 && r != 1) {
			stress_err(&ss->errors, "exists", id, r);
		}
		atomic_fetch_add(&ss->ops, 1);
	}
	free(buf);
}

struct stress_arg {
	void *be;
	unsigned idx;
};

static void *stress_thread(void *p)
{
	struct stress_arg *a = p;

	me = a->idx;
	stress_loop(a->be, (unsigned)getpid() * 31u + a->idx);
	return NULL;
}

static void __attribute__((noreturn)) stress_worker(int threads)
{
	pthread_t t[MAXTHREADS];
	struct stress_arg a[MAXTHREADS];
	void *be;
	int r;

	if ((r = OPEN(&be, stress_name, "create=no", "populate=0")) < 0) {
		stress_err(&ss->errors, err, 0, r);
		_exit(3);
	}
	for (int i = 0; i < threads; i++)
		a[i] = (struct stress_arg){ be, (unsigned)i };
	for (int i = 1; i < threads; i++)
		pthread_create(&t[i], NULL, stress_thread, &a[i]);
	stress_thread(&a[0]);
	for (int i = 1; i < threads; i++)
		pthread_join(t[i], NULL);
	B->close(be);
	_exit(0);
}

static pid_t spawn_worker(int threads)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		stress_worker(threads);
	return pid;
}

/* Every object left must read back whole. */
static void verify_all(void *be)
{
	uint8_t *buf = malloc(MAXLEN + 64);

	ck_assert_ptr_nonnull(buf);
	for (uint32_t id = 0; id < IDS; id++) {
		int64_t r = get(be, id, buf, MAXLEN + 64);
		ck_assert_msg(r == -ENOENT || (r > 0 && verify(buf, (size_t)r, id) >= 0), "object %u: %lld", id,
			      (long long)r);
	}
	free(buf);
}

START_TEST(test_concurrent)
{
	void *be;
	pid_t pids[4];

	stress_name = sname();
	ss = shared(sizeof(*ss));
	be = must_open(stress_name, "capacity=320K", "destroy_on_close=1");
	for (int w = 0; w < 4; w++)
		pids[w] = spawn_worker(2);
	usleep(1500 * 1000);
	atomic_store(&ss->stop, 1);
	for (int w = 0; w < 4; w++)
		ck_assert_int_eq(reap_child(pids[w]), 0);
	ck_assert_msg(ss->bad == 0 && ss->errors == 0, "%llu bad, %llu errors: %s", (unsigned long long)ss->bad,
		      (unsigned long long)ss->errors, ss->what);
	ck_assert_uint_gt(ss->verified, 100);
	fprintf(stderr, "concurrent: %llu ops, %llu puts, %llu verified gets, %llu evictions\n",
		(unsigned long long)ss->ops, (unsigned long long)ss->puts, (unsigned long long)ss->verified,
		(unsigned long long)hct_be_stat(B, be, "store_evictions"));
	ck_assert_uint_gt(hct_be_stat(B, be, "store_evictions"), 10);
	assert_check(be);
	verify_all(be);
	B->close(be);
}
END_TEST

START_TEST(test_chaos_kill)
{
	unsigned seed = (unsigned)getpid();
	int kills = 0;
	pid_t pids[3];
	double t0;
	void *be;

	stress_name = sname();
	ss = shared(sizeof(*ss));
	be = must_open(stress_name, "capacity=320K", "max_openers=16", "destroy_on_close=1");
	for (int w = 0; w < 3; w++)
		pids[w] = spawn_worker(1 + w % 2);
	/* Kill a worker every few ms at a random point, until enough kills
	 * and work happened (bounded in time). */
	for (t0 = now_s(); now_s() - t0 < 6 && (kills < 25 || ss->verified < 500); kills++) {
		int w = rand_r(&seed) % 3;
		usleep(2000 + (useconds_t)(rand_r(&seed) % 20000));
		kill(pids[w], SIGKILL);
		reap_child(pids[w]);
		pids[w] = spawn_worker(1 + w % 2);
	}
	atomic_store(&ss->stop, 1);
	for (int w = 0; w < 3; w++)
		reap_child(pids[w]);
	ck_assert_msg(ss->bad == 0 && ss->errors == 0, "%llu bad, %llu errors: %s", (unsigned long long)ss->bad,
		      (unsigned long long)ss->errors, ss->what);
	ck_assert_int_ge(kills, 25);
	fprintf(stderr, "chaos: %d kills, %llu ops, %llu verified gets, %llu recoveries, %llu rebuilds\n", kills,
		(unsigned long long)ss->ops, (unsigned long long)ss->verified,
		(unsigned long long)hct_be_stat(B, be, "recoveries"),
		(unsigned long long)hct_be_stat(B, be, "rebuilds"));
	ck_assert_int_eq(B->ctl(be, "recover", "1", NULL, 0), 0);
	assert_check(be);
	ck_assert_uint_eq(hct_be_stat(B, be, "openers"), 1);
	verify_all(be);
	for (uint32_t id = 0; id < IDS; id++)
		del(be, id);
	ck_assert_uint_eq(hct_be_stat(B, be, "free_bytes"), 320 * 1024); /* nothing leaked */
	B->close(be);
}
END_TEST

/* Several threads submit into one instance while others reap. */
struct mt {
	void *be;
	_Atomic int done_submitting;
	_Atomic uint32_t reaped;
	_Atomic uint8_t seen[4 * 200];
	_Atomic int bad;
};

static void *mt_submit(void *arg)
{
	struct mt *m = arg;
	static _Atomic int next;
	int t = atomic_fetch_add(&next, 1);
	uint8_t buf[3000];
	struct iovec v = { buf, sizeof(buf) };

	fill(buf, sizeof(buf), (uint32_t)t, 1);
	for (int i = 0; i < 200; i += 2) {
		struct hc_be_op ops[2] = {
			{ .opcode = HC_BE_OP_PUT, .iovcnt = 1, .iov = &v, .user_data = (uint64_t)(t * 200 + i) },
			{ .opcode = HC_BE_OP_EXISTS, .user_data = (uint64_t)(t * 200 + i + 1) },
		};
		oname(ops[0].name, (uint32_t)(t * 1000 + i % 16));
		oname(ops[1].name, (uint32_t)(t * 1000 + i % 16));
		if (B->submit(m->be, ops, 2) != 2)
			atomic_store(&m->bad, 1);
	}
	return NULL;
}

static void ignore_stat(void *arg, const char *name, uint64_t v)
{
	(void)arg;
	(void)name;
	(void)v;
}

/* Reaps, and calls stats and ctl between reaps, as a host's metrics would. */
static void *mt_reap(void *arg)
{
	struct mt *m = arg;
	struct hc_be_cqe c[7];
	char out[256];

	while (atomic_load(&m->reaped) < 800) {
		int n = B->reap(m->be, c, 7, 10);
		if (B->stats(m->be, ignore_stat, NULL) < 0 || B->ctl(m->be, "check", NULL, out, sizeof(out)) <= 0)
			atomic_store(&m->bad, 1);
		for (int k = 0; k < n; k++) {
			if (c[k].user_data >= 800 || atomic_fetch_add(&m->seen[c[k].user_data], 1) ||
			    c[k].result != (int64_t)(c[k].user_data % 2))
				atomic_store(&m->bad, 1);
		}
		atomic_fetch_add(&m->reaped, (uint32_t)(n > 0 ? n : 0));
		if (n == 0 && atomic_load(&m->done_submitting) && atomic_load(&m->reaped) >= 800)
			break;
	}
	return NULL;
}

START_TEST(test_threads_one_instance)
{
	struct mt *m = calloc(1, sizeof(*m));
	pthread_t s[4], r[2];

	m->be = must_open(sname(), "capacity=2M", "destroy_on_close=1");
	for (int i = 0; i < 2; i++)
		pthread_create(&r[i], NULL, mt_reap, m);
	for (int i = 0; i < 4; i++)
		pthread_create(&s[i], NULL, mt_submit, m);
	for (int i = 0; i < 4; i++)
		pthread_join(s[i], NULL);
	atomic_store(&m->done_submitting, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(r[i], NULL);
	ck_assert_int_eq(m->bad, 0);
	ck_assert_uint_eq(m->reaped, 800);
	for (int i = 0; i < 800; i++)
		ck_assert_uint_eq(m->seen[i], 1);
	assert_check(m->be);
	B->close(m->be);
	free(m);
}
END_TEST

/* ---- bad segments and bad options */

static void corrupt_at(const char *path, off_t off, const void *bytes, size_t n)
{
	int fd = open(path, O_RDWR);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, bytes, n, off), (ssize_t)n);
	close(fd);
}

static void expect_refused(const char *name, int want, const char *msg)
{
	void *be;
	int r = OPEN(&be, name, "create=no");

	ck_assert_msg(r == -want, "open: %d (%s), want -%d", r, err, want);
	ck_assert_ptr_null(be);
	ck_assert_msg(strstr(err, msg) && !strchr(err, '\n'), "error '%s' lacks '%s'", err, msg);
	/* create=auto never replaces what is there */
	r = OPEN(&be, name, "capacity=1M");
	ck_assert_msg(r == -want, "open auto: %d (%s)", r, err);
}

START_TEST(test_corrupt_segment)
{
	const char *name = sname(), *path = spath(name);
	struct hc_shm_hdr h;
	uint8_t junk[8192];
	void *be = must_open(name, "capacity=1M");
	int fd;

	put_obj(be, 1, 1, 1000);
	B->close(be);
	fd = open(path, O_RDONLY);
	ck_assert_int_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);

	corrupt_at(path, offsetof(struct hc_shm_hdr, capacity_bytes), "\x01", 1);
	expect_refused(name, EBADMSG, "checksum");
	corrupt_at(path, 0, &h, sizeof(h));
	be = must_open(name, "create=no"); /* repaired: fine again */
	get_obj(be, 1, 1, 1000);
	B->close(be);

	corrupt_at(path, 0, "NOTASHM!", 8);
	expect_refused(name, EBADMSG, "bad magic");
	{
		struct hc_shm_hdr v = h; /* a future version */
		v.version_major = 2;
		corrupt_at(path, 0, &v, sizeof(v));
		expect_refused(name, EPROTO, "version");
	}
	corrupt_at(path, 0, &h, sizeof(h));
	ck_assert_int_eq(truncate(path, (off_t)h.segment_bytes - 4096), 0);
	expect_refused(name, EBADMSG, "truncated");
	ck_assert_int_eq(truncate(path, 100), 0);
	expect_refused(name, EBADMSG, "less than a header");
	/* A foreign file of random bytes. */
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 37 + 11);
	ck_assert_int_eq(truncate(path, 0), 0);
	corrupt_at(path, 0, junk, sizeof(junk));
	expect_refused(name, EBADMSG, "bad magic");
	chmod(path, 0666);
	expect_refused(name, EPERM, "mode");
	unlink(path);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	expect_refused(name, EISDIR, "cannot open");
	rmdir(path);
	ck_assert_int_eq(symlink("/dev/null", path), 0);
	expect_refused(name, ELOOP, "symbolic link");
	unlink(path);
}
END_TEST

struct badopt {
	const char *kv[6];
	int err;
	const char *msg;
};

START_TEST(test_bad_options)
{
	const char *name = sname();
	char big[100], nm[80];
	const struct badopt cases[] = {
		{ { "capacity=1M" }, EINVAL, "name=" },
		{ { "name=" }, EINVAL, "name=" },
		{ { "name=../x" }, EINVAL, "'..'" },
		{ { "name=.hidden" }, EINVAL, "'.'" },
		{ { "name=a/b" }, EINVAL, "'/'" },
		{ { "name=a b" }, EINVAL, "' '" },
		{ { big }, EINVAL, "longer than" },
		{ { nm, "bogus=1" }, EINVAL, "unknown option 'bogus'" },
		{ { nm, "name=x" }, EINVAL, "twice" },
		{ { nm, "capacity=abc" }, EINVAL, "capacity=abc" },
		{ { nm, "capacity=10X" }, EINVAL, "capacity=10X" },
		{ { nm, "capacity=0" }, EINVAL, "capacity=0" },
		{ { nm, "capacity=-1" }, EINVAL, "capacity=-1" },
		{ { nm, "capacity=99999999999999999999" }, EINVAL, "capacity=" },
		{ { nm, "capacity=16777216T" }, EINVAL, "capacity=" },
		{ { nm, "capacity=" }, EINVAL, "capacity=" },
		{ { nm, "capacity=1000" }, EINVAL, "less than one block" },
		{ { nm, "capacity=1M", "create=maybe" }, EINVAL, "create=maybe" },
		{ { nm, "capacity=1M", "dir=relative" }, EINVAL, "dir=relative" },
		{ { nm, "capacity=1M", "dir=/nonexistent-hctshm" }, ENOENT, "/nonexistent-hctshm" },
		{ { nm, "capacity=1M", "block_size=3000" }, EINVAL, "block_size=3000" },
		{ { nm, "capacity=1M", "block_size=1K" }, EINVAL, "block_size=1K" },
		{ { nm, "capacity=1M", "block_size=128M" }, EINVAL, "block_size=128M" },
		{ { nm, "capacity=1M", "max_objects=0" }, EINVAL, "max_objects=0" },
		{ { nm, "capacity=1M", "max_openers=0" }, EINVAL, "max_openers=0" },
		{ { nm, "capacity=1M", "max_openers=5000" }, EINVAL, "max_openers=5000" },
		{ { nm, "capacity=1M", "populate=2" }, EINVAL, "populate=2" },
		{ { nm, "capacity=1M", "destroy_on_close=maybe" }, EINVAL, "destroy_on_close=maybe" },
		{ { nm, "capacity=1M", "put_wait_ms=soon" }, EINVAL, "put_wait_ms=soon" },
		{ { nm, "create=no" }, ENOENT, "create=no" },
		{ { nm }, EINVAL, "capacity= is required" },
		{ { nm, "capacity=4T" }, 0, NULL }, /* ENOSPC or ENOMEM: checked below */
	};
	struct hc_be_option nullkey = { NULL, "x" };
	void *be;
	int r;

	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	memcpy(big, "name=", 5);
	snprintf(nm, sizeof(nm), "name=%s", name);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct badopt *c = &cases[i];
		r = open_kv(&be, NULL, c->kv);
		if (!c->msg) {
			ck_assert_msg(r == -ENOSPC || r == -ENOMEM, "case %zu: %d %s", i, r, err);
			continue;
		}
		ck_assert_msg(r == -c->err, "case %zu (%s %s): %d (%s), want -%d", i, c->kv[0],
			      c->kv[1] ? c->kv[1] : "", r, err, c->err);
		ck_assert_ptr_null(be);
		ck_assert_msg(err[0] && strstr(err, c->msg) && !strchr(err, '\n'), "case %zu: error '%s' lacks '%s'", i,
			      err, c->msg);
	}
	ck_assert_int_eq(B->open(&nullkey, 1, &be, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(B->open(NULL, 0, &be, err, sizeof(err)), -EINVAL); /* no name */
	ck_assert_int_eq(access(spath(name), F_OK), -1);                    /* nothing left behind */
	/* Against an existing store. */
	be = must_open(name, "capacity=1M");
	{
		void *x;
		ck_assert_int_eq(OPEN(&x, name, "create=yes", "capacity=1M"), -EEXIST);
		ck_assert_int_eq(OPEN(&x, name, "capacity=2M"), -EINVAL);
		ck_assert_ptr_nonnull(strstr(err, "capacity="));
		ck_assert_int_eq(OPEN(&x, name, "block_size=8K"), -EINVAL);
		ck_assert_ptr_nonnull(strstr(err, "block_size="));
		ck_assert_int_eq(OPEN(&x, name, "max_openers=3"), -EINVAL);
		x = must_open(name, "capacity=1048576", "create=auto");
		B->close(x);
	}
	B->close(be);
	ck_assert_int_eq(access(spath(name), F_OK), 0);
}
END_TEST

START_TEST(test_ctl)
{
	const char *name = sname();
	void *be = must_open(name, "capacity=1M", "block_size=8K");
	char out[512];

	ck_assert_int_eq(B->ctl(be, "path", NULL, out, sizeof(out)), (int)strlen(spath(name)));
	ck_assert_str_eq(out, spath(name));
	ck_assert_int_gt(B->ctl(be, "capacity", NULL, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "1048576");
	ck_assert_int_gt(B->ctl(be, "block_size", NULL, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "8192");
	ck_assert_int_gt(B->ctl(be, "slot", NULL, out, sizeof(out)), 0);
	ck_assert_int_eq(B->ctl(be, "capacity", NULL, out, 4), 3); /* truncated */
	ck_assert_int_eq(B->ctl(be, "nosuch", NULL, out, sizeof(out)), -ENOENT);
	ck_assert_int_eq(B->ctl(be, "nosuch", "1", NULL, 0), -ENOENT);
	ck_assert_int_eq(B->ctl(be, "capacity", "2M", NULL, 0), -EINVAL);
	ck_assert_int_eq(B->ctl(be, "put_wait_ms", "soon", NULL, 0), -EINVAL);
	ck_assert_int_eq(B->ctl(be, "put_wait_ms", "10", NULL, 0), 0);
	ck_assert_int_gt(B->ctl(be, "put_wait_ms", NULL, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "10");
	ck_assert_int_eq(B->ctl(be, "destroy", "0", NULL, 0), -EINVAL);
	ck_assert_int_eq(B->ctl(be, "destroy", NULL, out, sizeof(out)), -EINVAL);
	put_obj(be, 1, 1, 9000);
	put_obj(be, 2, 1, 20000);
	ck_assert_int_eq(B->ctl(be, "rebuild", "1", NULL, 0), 0);
	assert_check(be);
	get_obj(be, 1, 1, 9000);
	get_obj(be, 2, 1, 20000);
	ck_assert_uint_eq(hct_be_stat(B, be, "free_bytes"), (1u << 20) - 5 * 8192);
	ck_assert_int_eq(B->ctl(be, "destroy_on_close", "1", NULL, 0), 0);
	B->close(be);
	ck_assert_int_eq(access(spath(name), F_OK), -1);
}
END_TEST

static void add(Suite *s, const char *name, const TTest *t, double timeout)
{
	TCase *c = tcase_create(name);

	tcase_add_checked_fixture(c, setup, teardown);
	tcase_set_timeout(c, timeout);
	_tcase_add_test(c, t, 0, 0, 0, 1);
	suite_add_tcase(s, c);
}

static Suite *shm_suite(void)
{
	Suite *s = suite_create("shm_backend");

	add(s, "roundtrip", test_roundtrip, 10);
	add(s, "overwrite_delete", test_overwrite_delete, 10);
	add(s, "exists_batch_and_reap", test_exists_batch_and_reap, 10);
	add(s, "lru_capacity", test_lru_capacity, 10);
	add(s, "pinned_not_evicted", test_pinned_not_evicted, 20);
	add(s, "kill_mid_put", test_kill_mid_put, 20);
	add(s, "kill_holding_lock", test_kill_holding_lock, 10);
	add(s, "persistence", test_persistence, 10);
	add(s, "create_race", test_create_race, 20);
	add(s, "openers", test_openers, 10);
	add(s, "concurrent", test_concurrent, 30);
	add(s, "chaos_kill", test_chaos_kill, 40);
	add(s, "threads_one_instance", test_threads_one_instance, 20);
	add(s, "corrupt_segment", test_corrupt_segment, 10);
	add(s, "bad_options", test_bad_options, 10);
	add(s, "ctl", test_ctl, 10);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	load_plugin();
	sweep(0);
	sr = srunner_create(shm_suite());
	srunner_set_fork_status(sr, CK_FORK); /* each test in its own process: they fork and kill */
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	sweep(0);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
