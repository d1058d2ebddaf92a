/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_backends.c - the conformance suite: one body of tests that every
 * backend plugin must pass, run once per backend (a loop test over the
 * table below), through the library's store (object format and checks) and
 * through the raw ABI.  Then the loader's refusals of broken plugins.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <hicache/backend.h>

#include "../lib/l3/store.h"
#include "hct.h"
#include "mcd.h"
#include "memd.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define NPAGES 256
#define KV     1u /* presence bits of the default test layout */
#define STATE  2u
#define BOTH   3u

/* ---- the backends under test */

struct backend {
	const char *name;
	/* Writes the spec of a fresh, empty store into spec (run in the test's
	 * process); cleanup removes what it made. */
	void (*setup)(char *spec, size_t len);
	void (*cleanup)(void);
};

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

static const struct backend backends[] = {
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

/* ---- one store on one fresh pool */

struct env {
	const struct backend *b;
	const char *pool_name;
	hc_pool *p;
	hc_store *st;
	char spec[512];
	const struct hc_backend *be; /* raw ABI */
	void *inst;
	struct hc_store_info info;
};

static hc_store *open_store(struct env *e, unsigned qd)
{
	struct hc_store_opts o = { .size = sizeof(struct hc_store_opts), .queue_depth = qd };
	hc_store *st = NULL;
	int r = hc_store_open(e->p, e->spec, &o, &st);

	ck_assert_msg(r == 0, "open %s: %d %s", e->spec, r, hc_last_error());
	return st;
}

static void env_open(struct env *e, int i, unsigned qd)
{
	memset(e, 0, sizeof(*e));
	e->b = &backends[i];
	e->pool_name = hct_name();
	e->p = hct_create_attach(e->pool_name, NPAGES, 100, 8);
	e->b->setup(e->spec, sizeof(e->spec));
	e->st = open_store(e, qd);
	hc__store_plugin(e->st, &e->be, &e->inst);
	ck_assert_ok(hc_store_info(e->st, &e->info, sizeof(e->info)));
}

static void env_close(struct env *e)
{
	ck_assert_ok(hc_store_close(e->st));
	if (e->b->cleanup)
		e->b->cleanup();
	hc_pool_detach(e->p);
	hc_pool_destroy(e->pool_name, NULL, HC_DESTROY_FORCE);
}

/* Component bytes as a function of (key, salt, component, offset). */
static uint8_t byte_of(const uint8_t *key, uint32_t salt, unsigned c, size_t off)
{
	uint64_t x = (off + 1) * UINT64_C(0x9E3779B97F4A7C15) ^ ((uint64_t)key[off % 32] << 40) ^
		     ((uint64_t)salt << 8) ^ c;
	x ^= x >> 31;
	x *= UINT64_C(0xbf58476d1ce4e5b9);
	return (uint8_t)(x ^ (x >> 29));
}

static int page_bytes(hc_pool *p, hc_page_t pg, const uint8_t *key, uint32_t salt, uint32_t comps, int fill)
{
	uint8_t *env = hc_page_envelope(p, pg);

	for (unsigned c = 0; c < 2; c++) {
		struct hc_component_info ci;
		if (!(comps & (1u << c)))
			continue;
		hc_pool_component(p, c, &ci, sizeof(ci));
		for (size_t j = 0; j < ci.bytes; j++) {
			uint8_t want = byte_of(key, salt, c, j);
			if (fill)
				env[ci.offset + j] = want;
			else if (env[ci.offset + j] != want)
				return -1;
		}
	}
	return 0;
}

/* Reserve keys (all must be new), fill, commit: the READY handles in out. */
static void make_ready(struct env *e, const hc_key_t *keys, unsigned n, uint32_t salt, uint32_t presence,
		       hc_page_t *out)
{
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req),
				     .keys = keys,
				     .nkeys = n,
				     .presence = presence };
	uint8_t *skip = calloc(n, 1);

	ck_assert_int_eq(hc_reserve(e->p, &rq, out, skip), (int)n);
	for (unsigned i = 0; i < n; i++) {
		ck_assert_int_eq(skip[i], 0);
		page_bytes(e->p, out[i], keys[i], salt, presence, 1);
		ck_assert_int_eq(hc_page_commit(e->p, out[i], hc_page_needed(e->p, presence)), 1);
	}
	free(skip);
}

/* Store keys with content salt, then drop them from the pool. */
static void put_keys(struct env *e, const hc_key_t *keys, unsigned n, uint32_t salt, uint32_t presence)
{
	hc_page_t *pg = calloc(n, sizeof(*pg));
	int *status = calloc(n, sizeof(int));

	make_ready(e, keys, n, salt, presence, pg);
	ck_assert_int_eq(hc_store_put(e->st, pg, n, status), (int)n);
	for (unsigned i = 0; i < n; i++) {
		ck_assert_int_eq(status[i], 0);
		ck_assert_int_eq(hc_evict_key(e->p, keys[i]), 1);
	}
	free(pg);
	free(status);
}

/* Reserve keys and get them: statuses in status, the hit count returned.
 * Hits are checked against salt and committed; the rest are aborted. */
static int get_keys(struct env *e, const hc_key_t *keys, unsigned n, uint32_t salt, uint32_t presence, int *status)
{
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req),
				     .keys = keys,
				     .nkeys = n,
				     .presence = presence };
	hc_page_t *pg = calloc(n, sizeof(*pg));
	uint8_t *skip = calloc(n, 1);
	int hits;

	ck_assert_int_eq(hc_reserve(e->p, &rq, pg, skip), (int)n);
	hits = hc_store_get(e->st, pg, n, status);
	for (unsigned i = 0; i < n; i++) {
		if (status[i] == 0) {
			ck_assert_msg(page_bytes(e->p, pg[i], keys[i], salt, presence, 0) == 0,
				      "%s: key %u: wrong bytes after a hit", e->b->name, i);
			ck_assert_int_eq(hc_page_commit(e->p, pg[i], hc_page_needed(e->p, presence)), 1);
			ck_assert_int_eq(hc_evict_key(e->p, keys[i]), 1);
		} else {
			ck_assert_int_eq(hc_page_abort(e->p, &pg[i], 1), 1);
		}
	}
	free(pg);
	free(skip);
	return hits;
}

/* ---- raw ABI helpers: one op, submitted and reaped */

static int64_t raw1(struct env *e, uint32_t opcode, const uint8_t *name, const struct iovec *iov, unsigned iovcnt)
{
	struct hc_be_op op = { .opcode = opcode, .iovcnt = iovcnt, .iov = iov, .user_data = 0xfeed };
	struct hc_be_cqe cqe;
	int r, k;

	memcpy(op.name, name, HC_BE_NAME_BYTES);
	r = e->be->submit(e->inst, &op, 1);
	ck_assert_int_eq(r, 1);
	for (double t = hct_now() + 10; (k = e->be->reap(e->inst, &cqe, 1, 100)) == 0;)
		ck_assert_msg(hct_now() < t, "%s: an op did not complete in 10 s", e->b->name);
	ck_assert_int_eq(k, 1);
	ck_assert_uint_eq(cqe.user_data, 0xfeed);
	return cqe.result;
}

static void obj_name(struct env *e, const uint8_t *key, uint8_t name[HC_BE_NAME_BYTES])
{
	struct hc_pool_info pi;

	hc_pool_info(e->p, &pi, sizeof(pi));
	memcpy(name, pi.fingerprint, 32);
	memcpy(name + 32, key, 32);
}

/* The stored bytes of an object (malloc'd), and their length. */
static uint8_t *raw_get(struct env *e, const uint8_t *name, int64_t *len)
{
	uint8_t *buf = malloc(1 << 20);
	struct iovec iov = { buf, 1 << 20 };

	*len = raw1(e, HC_BE_OP_GET, name, &iov, 1);
	ck_assert_msg(*len > 0 && *len <= (1 << 20), "%s: raw get: %lld", e->b->name, (long long)*len);
	return buf;
}

static void raw_put(struct env *e, const uint8_t *name, const void *bytes, size_t len)
{
	struct iovec iov = { (void *)bytes, len };

	ck_assert_int_eq(raw1(e, HC_BE_OP_PUT, name, &iov, 1), 0);
}

/* ---- the conformance tests (loop index: the backend) */

START_TEST(roundtrip)
{
	struct env e;
	hc_key_t k[40];
	int st[40];

	env_open(&e, _i, 0);
	/* capabilities: known bits only, and the instance's where they depend on options */
	ck_assert_uint_eq(e.info.caps & ~(uint64_t)0x3f, 0);
	if (strcmp(e.b->name, "file") == 0)
		ck_assert_msg(!(e.info.caps & HC_BE_CAP_DURABLE) && (e.info.caps & HC_BE_CAP_ASYNC),
			      "file with fsync=none: caps 0x%llx", (unsigned long long)e.info.caps);
	hct_keys(k, 40, 11);
	put_keys(&e, k, 40, 7, BOTH);
	ck_assert_int_eq(hc_store_exists(e.st, k, 40, st), 40);
	ck_assert_int_eq(get_keys(&e, k, 40, 7, BOTH, st), 40);
	for (int i = 0; i < 40; i++)
		ck_assert_int_eq(st[i], 0);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_hits"), 40);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_puts"), 40);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_corrupt"), 0);
	/* read again: a get does not consume */
	ck_assert_int_eq(get_keys(&e, k, 40, 7, BOTH, st), 40);
	env_close(&e);
}
END_TEST

START_TEST(exists_mixed)
{
	struct env e;
	hc_key_t k[64], in[32];
	int st[64];

	env_open(&e, _i, 0);
	hct_keys(k, 64, 12);
	for (int i = 0; i < 32; i++)
		memcpy(in[i], k[2 * i], HC_KEY_BYTES);
	put_keys(&e, in, 32, 1, BOTH);
	ck_assert_int_eq(hc_store_exists(e.st, k, 64, st), 32);
	for (int i = 0; i < 64; i++)
		ck_assert_msg(st[i] == (i % 2 == 0), "%s: key %d: exists %d", e.b->name, i, st[i]);
	/* absent keys are misses for get, never errors */
	ck_assert_int_eq(get_keys(&e, k, 64, 1, BOTH, st), 32);
	for (int i = 0; i < 64; i++)
		ck_assert_int_eq(st[i], i % 2 == 0 ? 0 : -ENOENT);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_misses"), 32);
	env_close(&e);
}
END_TEST

START_TEST(delete_overwrite)
{
	struct env e;
	hc_key_t k[8];
	int st[8];

	env_open(&e, _i, 0);
	hct_keys(k, 8, 13);
	put_keys(&e, k, 8, 1, BOTH);
	if (!(e.info.caps & HC_BE_CAP_DELETE)) {
		ck_assert_int_eq(hc_store_delete(e.st, k, 4, st), 0);
		ck_assert_int_eq(st[0], -EOPNOTSUPP);
	} else {
		ck_assert_int_eq(hc_store_delete(e.st, k, 4, st), 4);
		for (int i = 0; i < 4; i++)
			ck_assert_int_eq(st[i], 0);
		ck_assert_int_eq(hc_store_delete(e.st, k, 4, st), 0);
		for (int i = 0; i < 4; i++)
			ck_assert_int_eq(st[i], -ENOENT);
		ck_assert_int_eq(hc_store_exists(e.st, k, 8, st), 4);
		ck_assert_int_eq(get_keys(&e, k, 8, 1, BOTH, st), 4);
		ck_assert_int_eq(st[0], -ENOENT);
		ck_assert_int_eq(st[4], 0);
	}
	/* overwrite: the second put wins, whole */
	put_keys(&e, k + 4, 4, 2, BOTH);
	ck_assert_int_eq(get_keys(&e, k + 4, 4, 2, BOTH, st), 4);
	/* and a put of a key that was deleted stores it again */
	put_keys(&e, k, 2, 3, BOTH);
	ck_assert_int_eq(get_keys(&e, k, 2, 3, BOTH, st), 2);
	env_close(&e);
}
END_TEST

START_TEST(large_batch)
{
	struct env e;
	hc_key_t *k = calloc(200, sizeof(*k));
	int *st = calloc(200, sizeof(int));

	env_open(&e, _i, 8); /* 200 pages through 8 ops in flight */
	hct_keys(k, 200, 14);
	put_keys(&e, k, 200, 5, BOTH);
	ck_assert_int_eq(hc_store_exists(e.st, k, 200, st), 200);
	ck_assert_int_eq(get_keys(&e, k, 200, 5, BOTH, st), 200);
	free(k);
	free(st);
	env_close(&e);
}
END_TEST

START_TEST(raw_misaligned)
{
	struct env e;
	uint8_t name[HC_BE_NAME_BYTES], *src = malloc(9000 + 64), *dst = malloc(9000 + 64), *got;
	const size_t len = 1 + 4097 + 777;
	struct iovec put[3], get[4];
	int64_t r;

	env_open(&e, _i, 0);
	memset(name, 0xa5, sizeof(name));
	for (size_t j = 0; j < 9000 + 64; j++)
		src[j] = (uint8_t)(j * 131 + 7);
	/* odd lengths at odd addresses */
	put[0] = (struct iovec){ src + 3, 1 };
	put[1] = (struct iovec){ src + 3 + 1, 4097 };
	put[2] = (struct iovec){ src + 3 + 4098, 777 };
	ck_assert_int_eq(raw1(&e, HC_BE_OP_PUT, name, put, 3), 0);
	/* read back in another split, into misaligned buffers */
	memset(dst, 0, 9064);
	get[0] = (struct iovec){ dst + 5, 100 };
	get[1] = (struct iovec){ dst + 5 + 100, 3000 };
	get[2] = (struct iovec){ dst + 5 + 3100, 1 };
	get[3] = (struct iovec){ dst + 5 + 3101, len - 3101 };
	r = raw1(&e, HC_BE_OP_GET, name, get, 4);
	ck_assert_int_eq(r, (int64_t)len);
	ck_assert_int_eq(memcmp(dst + 5, src + 3, len), 0);
	/* a shorter buffer: the prefix, and the whole length */
	memset(dst, 0, 9064);
	get[0] = (struct iovec){ dst + 1, 1000 };
	ck_assert_int_eq(raw1(&e, HC_BE_OP_GET, name, get, 1), (int64_t)len);
	ck_assert_int_eq(memcmp(dst + 1, src + 3, 1000), 0);
	ck_assert_int_eq(dst[1001], 0);
	/* a longer one: the object, and nothing past it */
	memset(dst, 0xee, 9064);
	get[0] = (struct iovec){ dst, 9000 };
	ck_assert_int_eq(raw1(&e, HC_BE_OP_GET, name, get, 1), (int64_t)len);
	ck_assert_int_eq(memcmp(dst, src + 3, len), 0);
	ck_assert_int_eq(dst[len], 0xee);
	ck_assert_int_eq(dst[8999], 0xee);
	/* a one-byte object */
	put[0] = (struct iovec){ src + 1, 1 };
	ck_assert_int_eq(raw1(&e, HC_BE_OP_PUT, name, put, 1), 0);
	got = raw_get(&e, name, &r);
	ck_assert_int_eq(r, 1);
	ck_assert_int_eq(got[0], src[1]);
	free(got);
	free(src);
	free(dst);
	env_close(&e);
}
END_TEST

START_TEST(raw_ops)
{
	struct env e;
	uint8_t name[HC_BE_NAME_BYTES], buf[64];
	struct iovec iov = { buf, sizeof(buf) };
	char out[256];

	env_open(&e, _i, 0);
	memset(name, 0x5a, sizeof(name));
	ck_assert_int_eq(raw1(&e, HC_BE_OP_EXISTS, name, NULL, 0), 0);
	ck_assert_int_eq(raw1(&e, HC_BE_OP_GET, name, &iov, 1), -ENOENT);
	if (e.info.caps & HC_BE_CAP_DELETE)
		ck_assert_int_eq(raw1(&e, HC_BE_OP_DELETE, name, NULL, 0), -ENOENT);
	/* bad ops are accepted and complete with -EINVAL */
	ck_assert_int_eq(raw1(&e, 99, name, NULL, 0), -EINVAL);
	ck_assert_int_eq(raw1(&e, HC_BE_OP_GET, name, &iov, 0), -EINVAL);
	ck_assert_int_eq(raw1(&e, HC_BE_OP_PUT, name, NULL, 1), -EINVAL);
	ck_assert_int_eq(raw1(&e, HC_BE_OP_PUT, name, &iov, HC_BE_IOV_MAX + 1), -EINVAL);
	ck_assert_int_eq(raw1(&e, HC_BE_OP_EXISTS, name, NULL, 0), 0);
	/* nothing in flight: reap returns 0 at once, even asked to wait */
	{
		struct hc_be_cqe c;
		double t0 = hct_now();
		ck_assert_int_eq(e.be->reap(e.inst, &c, 1, -1), 0);
		ck_assert_msg(hct_now() - t0 < 2.0, "%s: reap with nothing in flight waited", e.b->name);
	}
	/* cancel of nothing */
	{
		int r = e.be->cancel(e.inst, 12345);
		ck_assert_msg(r == -ENOENT || r == -EOPNOTSUPP, "%s: cancel of nothing: %d", e.b->name, r);
	}
	/* the standard statistics exist; unknown ctl keys are -ENOENT */
	hct_store_stat(e.st, "objects");
	hct_store_stat(e.st, "bytes");
	hct_store_stat(e.st, "gets");
	hct_store_stat(e.st, "puts");
	hct_store_stat(e.st, "evictions");
	ck_assert_err(hc_store_ctl(e.st, "no_such_option", NULL, out, sizeof(out)), ENOENT);
	ck_assert_msg_has("no_such_option");
	ck_assert_err(hc_store_ctl(e.st, "no_such_option", "1", NULL, 0), ENOENT);
	env_close(&e);
}
END_TEST

struct worker {
	struct env *e;
	unsigned id;
	int bad;
	char why[200];
};

/* Each thread puts its own keys then reads its own and a shared set. */
static void *store_worker(void *arg)
{
	struct worker *w = arg;
	hc_key_t k[24];
	hc_page_t pg[24];
	int st[24];
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 24 };
	uint8_t skip[24];

	hct_keys(k, 24, 1000 + w->id);
	for (int round = 0; round < 3 && !w->bad; round++) {
		if (hc_reserve(w->e->p, &rq, pg, skip) != 24) {
			uint64_t cnt[HC_PAGE__COUNT];
			hc_pool_count_states(w->e->p, cnt, HC_PAGE__COUNT);
			snprintf(w->why, sizeof(w->why),
				 "round %d reserve: %s [free %llu res %llu ready %llu q %llu f %llu]", round,
				 hc_last_error(), (unsigned long long)cnt[0], (unsigned long long)cnt[1],
				 (unsigned long long)cnt[2], (unsigned long long)cnt[3], (unsigned long long)cnt[4]);
			w->bad = 1;
			break;
		}
		/* a host lock keeps each page from the others' evictions until it is stored */
		for (int i = 0; i < 24; i++) {
			page_bytes(w->e->p, pg[i], k[i], w->id + 100u * round, BOTH, 1);
			hc_page_commit(w->e->p, pg[i], hc_page_needed(w->e->p, BOTH));
			hc_page_lock(w->e->p, pg[i]);
		}
		if (hc_store_put(w->e->st, pg, 24, st) != 24) {
			snprintf(w->why, sizeof(w->why), "put round %d: status %d: %s", round, st[0], hc_last_error());
			w->bad = 1;
		}
		for (int i = 0; i < 24; i++) {
			hc_page_unlock(w->e->p, pg[i]);
			hc_evict_key(w->e->p, k[i]);
		}
		if (hc_reserve(w->e->p, &rq, pg, skip) != 24) {
			snprintf(w->why, sizeof(w->why), "round %d reserve for get: %s", round, hc_last_error());
			w->bad = 1;
			break;
		}
		if (hc_store_get(w->e->st, pg, 24, st) != 24) {
			snprintf(w->why, sizeof(w->why), "get round %d: status %d", round, st[0]);
			w->bad = 1;
		}
		for (int i = 0; i < 24; i++) {
			if (st[i] == 0 && page_bytes(w->e->p, pg[i], k[i], w->id + 100u * round, BOTH, 0) != 0) {
				snprintf(w->why, sizeof(w->why), "round %d key %d: wrong bytes", round, i);
				w->bad = 1;
			}
			/* a hit is committed and dropped (an abort would quarantine a TP=2 page) */
			if (st[i] == 0 && hc_page_commit(w->e->p, pg[i], hc_page_needed(w->e->p, BOTH)) == 1)
				hc_evict_key(w->e->p, k[i]);
			else
				hc_page_abort(w->e->p, &pg[i], 1);
		}
	}
	return NULL;
}

START_TEST(concurrent_store)
{
	struct env e;
	pthread_t t[4];
	struct worker w[4];

	env_open(&e, _i, 16);
	for (unsigned i = 0; i < 4; i++) {
		w[i] = (struct worker){ .e = &e, .id = i };
		ck_assert_int_eq(pthread_create(&t[i], NULL, store_worker, &w[i]), 0);
	}
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(!w[i].bad, "%s: thread %u: %s", e.b->name, i, w[i].why);
	}
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_hits"), 4 * 3 * 24);
	env_close(&e);
}
END_TEST

/* Raw ABI: submitters and reapers on separate threads; every completion once. */
struct raw_shared {
	struct env *e;
	_Atomic unsigned submitted, reaped, stop;
	_Atomic uint8_t seen[4 * 500];
	_Atomic int bad;
};

static void *raw_submitter(void *arg)
{
	struct raw_shared *s = ((struct raw_shared **)arg)[0];
	unsigned id = (unsigned)(uintptr_t)((void **)arg)[1];
	uint8_t payload[512];

	memset(payload, (int)id, sizeof(payload));
	for (unsigned i = 0; i < 500;) {
		struct hc_be_op op[4];
		struct iovec iov = { payload, sizeof(payload) };
		unsigned n = 500 - i < 4 ? 500 - i : 4;
		for (unsigned j = 0; j < n; j++) {
			op[j] = (struct hc_be_op){ .opcode = (i + j) % 3 ? HC_BE_OP_EXISTS : HC_BE_OP_PUT,
						   .user_data = id * 500 + i + j };
			if (op[j].opcode == HC_BE_OP_PUT) {
				op[j].iov = &iov;
				op[j].iovcnt = 1;
			}
			memset(op[j].name, 0, sizeof(op[j].name));
			op[j].name[0] = (uint8_t)id;
			op[j].name[1] = (uint8_t)((i + j) % 7);
		}
		int r = s->e->be->submit(s->e->inst, op, n);
		if (r == -EAGAIN) {
			usleep(100);
			continue;
		}
		if (r <= 0) {
			s->bad = 1;
			break;
		}
		i += (unsigned)r;
		s->submitted += (unsigned)r;
	}
	return NULL;
}

static void *raw_reaper(void *arg)
{
	struct raw_shared *s = arg;
	struct hc_be_cqe c[8];

	while (!s->stop || s->reaped < s->submitted) {
		int k = s->e->be->reap(s->e->inst, c, 8, 10);
		if (k < 0) {
			s->bad = 2;
			break;
		}
		for (int j = 0; j < k; j++) {
			if (c[j].user_data >= 2000 || s->seen[c[j].user_data]++ || c[j].result < 0)
				s->bad = 3;
			s->reaped++;
		}
	}
	return NULL;
}

START_TEST(concurrent_raw)
{
	struct env e;
	struct raw_shared *s = calloc(1, sizeof(*s));
	pthread_t sub[4], rea[2];
	void *args[4][2];

	env_open(&e, _i, 0);
	s->e = &e;
	for (int i = 0; i < 2; i++)
		pthread_create(&rea[i], NULL, raw_reaper, s);
	for (int i = 0; i < 4; i++) {
		args[i][0] = s;
		args[i][1] = (void *)(uintptr_t)i;
		pthread_create(&sub[i], NULL, raw_submitter, args[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(sub[i], NULL);
	s->stop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(rea[i], NULL);
	ck_assert_int_eq(s->bad, 0);
	ck_assert_uint_eq(s->submitted, 2000);
	ck_assert_uint_eq(s->reaped, 2000);
	for (int i = 0; i < 2000; i++)
		ck_assert_int_eq(s->seen[i], 1);
	free(s);
	env_close(&e);
}
END_TEST

static char logged[4096];
static void log_capture(int level, const char *msg, void *arg)
{
	(void)arg;
	if (level <= HC_LOG_WARN && strlen(logged) + strlen(msg) + 2 < sizeof(logged)) {
		strcat(logged, msg);
		strcat(logged, "\n");
	}
}

START_TEST(corrupt_objects)
{
	struct env e;
	hc_key_t k[6];
	uint8_t name[HC_BE_NAME_BYTES], name2[HC_BE_NAME_BYTES];
	uint8_t *obj;
	int64_t len;
	int st[6];

	env_open(&e, _i, 0);
	hc_set_log(log_capture, NULL);
	hct_keys(k, 6, 15);
	put_keys(&e, k, 6, 9, BOTH);
	/* 0: a payload byte flipped */
	obj_name(&e, k[0], name);
	obj = raw_get(&e, name, &len);
	ck_assert_int_eq(len, 4096 + 16384 + 4096);
	obj[4096 + 1000] ^= 0x40;
	raw_put(&e, name, obj, (size_t)len);
	free(obj);
	/* 1: a header byte flipped (the presence mask) */
	obj_name(&e, k[1], name);
	obj = raw_get(&e, name, &len);
	obj[80] ^= 0x01;
	raw_put(&e, name, obj, (size_t)len);
	free(obj);
	/* 2: truncated, header intact */
	obj_name(&e, k[2], name);
	obj = raw_get(&e, name, &len);
	raw_put(&e, name, obj, (size_t)len - 4096);
	free(obj);
	/* 3: truncated inside its header */
	obj_name(&e, k[3], name);
	obj = raw_get(&e, name, &len);
	raw_put(&e, name, obj, 100);
	free(obj);
	/* 4: the object of key 5 stored under key 4's name */
	obj_name(&e, k[5], name);
	obj_name(&e, k[4], name2);
	obj = raw_get(&e, name, &len);
	raw_put(&e, name2, obj, (size_t)len);
	free(obj);

	ck_assert_int_eq(get_keys(&e, k, 6, 9, BOTH, st), 1);
	for (int i = 0; i < 5; i++)
		ck_assert_msg(st[i] == -EBADMSG, "%s: corrupt object %d: status %d", e.b->name, i, st[i]);
	ck_assert_int_eq(st[5], 0);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_corrupt"), 5);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_hits"), 1);
	ck_assert_msg(strstr(logged, "treated as a miss") != NULL, "no warning logged: '%s'", logged);
	hc_set_log(NULL, NULL);
	env_close(&e);
}
END_TEST

/* An object written by a pool of another fingerprint is never read as ours.
 * The stores take turns: a backend may allow one instance per location. */
START_TEST(wrong_fingerprint)
{
	struct env e;
	struct hct_spec s;
	const char *other = hct_name();
	hc_pool *q;
	hc_store *qs;
	struct hc_pool_info pi;
	uint8_t name[HC_BE_NAME_BYTES], *obj;
	hc_key_t k[2];
	int64_t len;
	int st[2];

	env_open(&e, _i, 0);
	hct_keys(k, 2, 16);
	put_keys(&e, k, 2, 3, BOTH);
	obj_name(&e, k[0], name);
	obj = raw_get(&e, name, &len);
	ck_assert_ok(hc_store_close(e.st));
	/* the same layout under another model id: another fingerprint */
	hct_spec_init(&s, other, 16);
	s.spec.model_id = "test/another-model";
	ck_assert_ok(hc_pool_create(&s.spec));
	q = hct_attach(other, 0);
	ck_assert_ok(hc_store_open(q, e.spec, NULL, &qs));
	hc_pool_info(q, &pi, sizeof(pi));
	/* plant our object under the other pool's name for the key */
	memcpy(name, pi.fingerprint, 32);
	{
		struct env e2 = e;
		hc__store_plugin(qs, &e2.be, &e2.inst);
		raw_put(&e2, name, obj, (size_t)len);
	}
	free(obj);
	{
		struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 2 };
		hc_page_t pg[2];
		uint8_t skip[2];
		ck_assert_int_eq(hc_reserve(q, &rq, pg, skip), 2);
		ck_assert_int_eq(hc_store_get(qs, pg, 2, st), 0);
		ck_assert_int_eq(st[0], -EBADMSG); /* planted: the header names our fingerprint */
		ck_assert_int_eq(st[1], -ENOENT);  /* not planted: another name altogether */
		hc_page_abort(q, pg, 2);
	}
	hc_store_close(qs);
	hc_pool_detach(q);
	hc_pool_destroy(other, NULL, HC_DESTROY_FORCE);
	/* and ours still read fine where they outlive a close */
	e.st = open_store(&e, 0);
	if (e.info.caps & HC_BE_CAP_PERSISTENT)
		ck_assert_int_eq(get_keys(&e, k, 2, 3, BOTH, st), 2);
	env_close(&e);
}
END_TEST

START_TEST(presence)
{
	struct env e;
	hc_key_t k[4];
	int st[4];

	env_open(&e, _i, 0);
	hct_keys(k, 4, 17);
	put_keys(&e, k, 2, 4, BOTH);   /* objects with both components */
	put_keys(&e, k + 2, 2, 4, KV); /* objects with the KV component only */
	/* a page that needs less than the object holds: read whole, then copied */
	ck_assert_int_eq(get_keys(&e, k, 2, 4, KV, st), 2);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_rereads"), 2);
	ck_assert_int_eq(get_keys(&e, k, 2, 4, STATE, st), 2);
	/* a page that needs more than the object holds: a miss */
	ck_assert_int_eq(get_keys(&e, k + 2, 2, 4, BOTH, st), 0);
	ck_assert_int_eq(st[0], -ENOENT);
	ck_assert_int_eq(get_keys(&e, k + 2, 2, 4, KV, st), 2);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_corrupt"), 0);
	env_close(&e);
}
END_TEST

START_TEST(reopen)
{
	struct env e;
	hc_key_t k[10];
	int st[10];

	env_open(&e, _i, 0);
	hct_keys(k, 10, 18);
	put_keys(&e, k, 10, 6, BOTH);
	ck_assert_ok(hc_store_close(e.st));
	e.st = open_store(&e, 0);
	if (e.info.caps & HC_BE_CAP_PERSISTENT) {
		ck_assert_int_eq(get_keys(&e, k, 10, 6, BOTH, st), 10);
	} else {
		ck_assert_int_eq(hc_store_exists(e.st, k, 10, st), 0);
	}
	/* close and reopen again, with nothing done in between */
	ck_assert_ok(hc_store_close(e.st));
	e.st = open_store(&e, 0);
	env_close(&e);
}
END_TEST

START_TEST(store_errors)
{
	struct env e;
	hc_key_t k[2];
	hc_page_t pg[2], unkeyed;
	int st[2];
	char spec[600];
	hc_store *bad = NULL;

	env_open(&e, _i, 0);
	hct_keys(k, 2, 19);
	/* an unknown option is refused, naming it */
	snprintf(spec, sizeof(spec), "%s%sno_such_option=1", e.spec, strchr(e.spec, ':') ? "," : ":");
	ck_assert_err(hc_store_open(e.p, spec, NULL, &bad), EINVAL);
	ck_assert_msg_has("no_such_option");
	ck_assert_ptr_null(bad);
	/* arguments */
	ck_assert_err(hc_store_put(NULL, pg, 1, st), EINVAL);
	ck_assert_err(hc_store_put(e.st, NULL, 1, st), EINVAL);
	ck_assert_int_eq(hc_store_put(e.st, pg, 0, st), 0);
	ck_assert_err(hc_store_exists(e.st, NULL, 1, st), EINVAL);
	ck_assert_err(hc_store_stats(e.st, NULL, NULL), EINVAL);
	/* a page without a key cannot be named in L3 */
	ck_assert_int_eq(hc_page_alloc(e.p, 1, BOTH, &unkeyed), 1);
	ck_assert_int_eq(hct_fill_commit_all(e.p, unkeyed), 1);
	ck_assert_int_eq(hc_store_put(e.st, &unkeyed, 1, st), 0);
	ck_assert_int_eq(st[0], -EINVAL);
	/* a freed handle */
	ck_assert_int_eq(hc_page_free(e.p, &unkeyed, 1), 1);
	ck_assert_int_eq(hc_store_put(e.st, &unkeyed, 1, st), 0);
	ck_assert_int_eq(st[0], -ESTALE);
	/* get needs this process's reservation, not a READY page */
	make_ready(&e, k, 1, 1, BOTH, pg);
	ck_assert_int_eq(hc_store_get(e.st, pg, 1, st), 0);
	ck_assert_int_eq(st[0], -ESTALE);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_get_errors"), 1);
	env_close(&e);
}
END_TEST

/* ---- the loader, with the fixtures */

static void loader_env(struct env *e)
{
	memset(e, 0, sizeof(*e));
	e->pool_name = hct_name();
	e->p = hct_create_attach(e->pool_name, 8, 100, 4);
}

static void refused(const char *spec, int err, const char *needle)
{
	struct env e;
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
	struct env e;
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

/* A plugin whose put fails: the status says so and the page stays READY. */
START_TEST(put_failure)
{
	struct env e;
	hc_key_t k[3];
	hc_page_t pg[3];
	int st[3];
	char out[32];

	env_open(&e, 0, 0); /* mem */
	hct_keys(k, 3, 20);
	make_ready(&e, k, 3, 1, BOTH, pg);
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
	env_close(&e);
}
END_TEST

/* Completions the plugin should never have sent are dropped, and said so. */
START_TEST(stray_completions)
{
	struct env e;
	hc_key_t k[3];
	hc_page_t pg[3];
	int st[3];

	env_open(&e, 0, 0); /* mem */
	logged[0] = '\0';
	hc_set_log(log_capture, NULL);
	hct_keys(k, 3, 21);
	make_ready(&e, k, 3, 1, BOTH, pg);
	ck_assert_ok(hc_store_ctl(e.st, "stray", "2", NULL, 0));
	ck_assert_int_eq(hc_store_put(e.st, pg, 3, st), 3);
	ck_assert_msg(strstr(logged, "a completion for no op in flight") != NULL, "not logged: '%s'", logged);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(hc_evict_key(e.p, k[i]), 1);
	ck_assert_int_eq(get_keys(&e, k, 3, 1, BOTH, st), 3);
	hc_set_log(NULL, NULL);
	env_close(&e);
}
END_TEST

/* An object of a newer format major is a miss, not corruption. */
START_TEST(newer_format)
{
	struct env e;
	hc_key_t k[2];
	uint8_t name[HC_BE_NAME_BYTES], *obj;
	int64_t len;
	uint64_t sum;
	int st[2];

	env_open(&e, _i, 0);
	hct_keys(k, 2, 22);
	put_keys(&e, k, 2, 3, BOTH);
	obj_name(&e, k[0], name);
	obj = raw_get(&e, name, &len);
	obj[8] = 2; /* format 2.0, sealed as a newer writer would */
	sum = XXH3_64bits(obj, 4088);
	memcpy(obj + 4088, &sum, 8);
	raw_put(&e, name, obj, (size_t)len);
	free(obj);
	ck_assert_int_eq(get_keys(&e, k, 2, 3, BOTH, st), 1);
	ck_assert_int_eq(st[0], -EPROTO);
	ck_assert_int_eq(st[1], 0);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_corrupt"), 0);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_misses"), 1);
	env_close(&e);
}
END_TEST

/* Results outside what the ABI allows (errnos are -4095..-1) are plugin
 * bugs: never a hit, never a hang, always an error status. */
START_TEST(bogus_results)
{
	struct env e;
	hc_key_t k[2];
	hc_page_t pg[1];
	int st[1];

	env_open(&e, 0, 0); /* mem */
	hct_keys(k, 2, 30);
	/* a GET of an absent key whose -ENOENT became -(2^32): (int) of it is 0 */
	ck_assert_ok(hc_store_ctl(e.st, "result", "-4294967296", NULL, 0));
	ck_assert_int_eq(get_keys(&e, k, 1, 1, BOTH, st), 0);
	ck_assert_int_eq(st[0], -EIO);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_hits"), 0);
	/* a PUT completing with INT32_MIN, and one with a positive result */
	make_ready(&e, k + 1, 1, 1, BOTH, pg);
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
	env_close(&e);
}
END_TEST

/* A plugin whose queue is smaller than the store's: -EAGAIN while another
 * thread's ops are in flight is worth a retry, never an item's status. */
struct eagain_arg {
	struct env *e;
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
	struct env e;
	pthread_t t[3];
	struct eagain_arg a[3];

	memset(&e, 0, sizeof(e));
	e.b = &backends[2]; /* file */
	e.pool_name = hct_name();
	e.p = hct_create_attach(e.pool_name, NPAGES, 100, 8);
	e.b->setup(e.spec, sizeof(e.spec));
	snprintf(e.spec, sizeof(e.spec), "%s,queue_depth=1", hct_l3_spec);
	e.st = open_store(&e, 64);
	for (unsigned i = 0; i < 3; i++) {
		a[i] = (struct eagain_arg){ .e = &e, .id = i };
		pthread_create(&t[i], NULL, eagain_worker, &a[i]);
	}
	for (unsigned i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(a[i].bad == 0, "thread %u: an item failed with %d (%s)", i, a[i].bad,
			      strerror(-a[i].bad));
	}
	env_close(&e);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("backends");
	TCase *tc = tcase_create("conformance");
	int ret;

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, roundtrip, 0, NBACKENDS);
	tcase_add_loop_test(tc, exists_mixed, 0, NBACKENDS);
	tcase_add_loop_test(tc, delete_overwrite, 0, NBACKENDS);
	tcase_add_loop_test(tc, large_batch, 0, NBACKENDS);
	tcase_add_loop_test(tc, raw_misaligned, 0, NBACKENDS);
	tcase_add_loop_test(tc, raw_ops, 0, NBACKENDS);
	tcase_add_loop_test(tc, concurrent_store, 0, NBACKENDS);
	tcase_add_loop_test(tc, concurrent_raw, 0, NBACKENDS);
	tcase_add_loop_test(tc, corrupt_objects, 0, NBACKENDS);
	tcase_add_loop_test(tc, wrong_fingerprint, 0, NBACKENDS);
	tcase_add_loop_test(tc, presence, 0, NBACKENDS);
	tcase_add_loop_test(tc, reopen, 0, NBACKENDS);
	tcase_add_loop_test(tc, store_errors, 0, NBACKENDS);
	tcase_add_loop_test(tc, newer_format, 0, NBACKENDS);
	suite_add_tcase(s, tc);
	tc = tcase_create("loader");
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, loader_refuses);
	tcase_add_test(tc, loader_paths);
	tcase_add_test(tc, put_failure);
	tcase_add_test(tc, stray_completions);
	tcase_add_test(tc, bogus_results);
	tcase_add_test(tc, eagain_race);
	suite_add_tcase(s, tc);
	suite_pid = getpid();
	ret = hct_run(s);
	shm_sweep();
	return ret;
}
