/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conformance.c - the conformance suite: one body of tests that every
 * backend plugin must pass (hicache-backend(7), THE CONFORMANCE SUITE),
 * each a loop test over a table of targets, through the library's store
 * (object format and checks) and through the raw ABI.
 * tests/test_backends.c runs it over the in-tree backends.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <hicache/backend.h>

#include "../lib/l3/store.h"
#include "conformance.h"
#include "hct.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

static const struct hct_target *targets;
static unsigned ntargets;

/*
 * What the cases write, so that they leave nothing in a store they share
 * with others (hicache-backend-check runs them on the user's): each pool
 * has a model id of its own, so every name a case writes is its own, and
 * each is logged here, in memory mapped before the runner forks.  A case
 * deletes them at its end; the runner, what a failed case left.
 */
#define WRITTEN_MAX 1024
static struct written {
	_Atomic unsigned n;
	uint8_t name[WRITTEN_MAX][HC_BE_NAME_BYTES];
} * written;

int hct_conf_targets(const struct hct_target *t, unsigned n)
{
	void *m = written ? (void *)written
			  : mmap(NULL, sizeof(*written), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return -errno;
	written = m;
	targets = t;
	ntargets = n;
	return 0;
}

unsigned hct_conf_logged(void)
{
	return written->n;
}

static void wrote(const uint8_t name[HC_BE_NAME_BYTES])
{
	unsigned i = written->n++;

	ck_assert_msg(i < WRITTEN_MAX, "a case wrote more than %d objects: raise WRITTEN_MAX", WRITTEN_MAX);
	memcpy(written->name[i], name, HC_BE_NAME_BYTES);
}

static void obj_name(struct hct_env *e, const uint8_t *key, uint8_t name[HC_BE_NAME_BYTES])
{
	struct hc_pool_info pi;

	hc_pool_info(e->p, &pi, sizeof(pi));
	memcpy(name, pi.fingerprint, 32);
	memcpy(name + 32, key, 32);
}

/* A name of the case's own that is no page's: its fingerprint, then fill. */
static void own_name(struct hct_env *e, uint8_t fill, uint8_t name[HC_BE_NAME_BYTES])
{
	uint8_t key[32];

	memset(key, fill, sizeof(key));
	obj_name(e, key, name);
}

static void wrote_keys(struct hct_env *e, const hc_key_t *keys, unsigned n)
{
	uint8_t name[HC_BE_NAME_BYTES];

	for (unsigned i = 0; i < n; i++) {
		obj_name(e, keys[i], name);
		wrote(name);
	}
}

/* A pool of the default test layout under a model id no other pool has:
 * a fingerprint, and so object names, of its own. */
static hc_pool *own_pool(const char *name, uint32_t npages, uint32_t quarantine_ms, uint32_t max_ranks)
{
	static unsigned seq;
	struct timespec now;
	struct hct_spec s;
	char model[HC_MODEL_ID_MAX + 1];

	clock_gettime(CLOCK_REALTIME, &now);
	snprintf(model, sizeof(model), "hicache-conformance/%d.%u.%lld.%ld", (int)getpid(), seq++,
		 (long long)now.tv_sec, now.tv_nsec);
	hct_spec_init(&s, name, npages);
	s.spec.model_id = model;
	s.spec.quarantine_ms = quarantine_ms;
	s.spec.max_ranks = max_ranks;
	ck_assert_msg(hc_pool_create(&s.spec) == 0, "create %s: %s", name, hc_last_error());
	return hct_attach(name, 0);
}

/* ---- one store on one fresh pool */

static void delete_written(struct hct_env *e);

hc_store *hct_env_store(struct hct_env *e, unsigned qd)
{
	struct hc_store_opts o = { .size = sizeof(struct hc_store_opts), .queue_depth = qd };
	hc_store *st = NULL;
	int r = hc_store_open(e->p, e->spec, &o, &st);

	ck_assert_msg(r == 0, "open %s: %d %s", e->spec, r, hc_last_error());
	return st;
}

void hct_env_open(struct hct_env *e, int i, unsigned qd)
{
	ck_assert_uint_lt((unsigned)i, ntargets);
	memset(e, 0, sizeof(*e));
	e->b = &targets[i];
	e->pool_name = hct_name();
	e->p = own_pool(e->pool_name, HCT_NPAGES, 100, 8);
	written->n = 0;
	e->b->setup(e->spec, sizeof(e->spec));
	e->st = hct_env_store(e, qd);
	hc__store_plugin(e->st, &e->be, &e->inst);
	ck_assert_ok(hc_store_info(e->st, &e->info, sizeof(e->info)));
}

void hct_env_close(struct hct_env *e)
{
	delete_written(e);
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
void hct_make_ready(struct hct_env *e, const hc_key_t *keys, unsigned n, uint32_t salt, uint32_t presence,
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
static void put_keys(struct hct_env *e, const hc_key_t *keys, unsigned n, uint32_t salt, uint32_t presence)
{
	hc_page_t *pg = calloc(n, sizeof(*pg));
	int *status = calloc(n, sizeof(int));

	hct_make_ready(e, keys, n, salt, presence, pg);
	wrote_keys(e, keys, n);
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
int hct_get_keys(struct hct_env *e, const hc_key_t *keys, unsigned n, uint32_t salt, uint32_t presence, int *status)
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

/* One op on an instance, submitted and reaped (10 s at most): NULL with
 * its result in *res, or what went wrong (one line). */
static const char *raw_op(const struct hc_backend *be, void *inst, const struct hc_be_op *op, int64_t *res)
{
	static _Thread_local char why[128];
	struct hc_be_cqe cqe;
	int r, k;

	if ((r = be->submit(inst, op, 1)) != 1) {
		snprintf(why, sizeof(why), "submit of one op returned %d", r);
		return why;
	}
	for (double t = hct_now() + 10; (k = be->reap(inst, &cqe, 1, 100)) == 0;)
		if (hct_now() >= t)
			return "an op did not complete in 10 s";
	if (k != 1 || cqe.user_data != op->user_data) {
		snprintf(why, sizeof(why), "reap returned %d, user_data 0x%llx for an op of 0x%llx", k,
			 (unsigned long long)cqe.user_data, (unsigned long long)op->user_data);
		return why;
	}
	*res = cqe.result;
	return NULL;
}

static int64_t raw1(struct hct_env *e, uint32_t opcode, const uint8_t *name, const struct iovec *iov, unsigned iovcnt)
{
	struct hc_be_op op = { .opcode = opcode, .iovcnt = iovcnt, .iov = iov, .user_data = 0xfeed };
	const char *why;
	int64_t res = 0;

	memcpy(op.name, name, HC_BE_NAME_BYTES);
	if (opcode == HC_BE_OP_PUT)
		wrote(name);
	why = raw_op(e->be, e->inst, &op, &res);
	ck_assert_msg(why == NULL, "%s: %s", e->b->name, why);
	return res;
}

/* Deletes the logged names through an instance, last first: NULL, or
 * what went wrong with the first that failed; *left counts those.  -ENOENT
 * is no failure: a name logged twice is gone the second time. */
static const char *delete_log(const struct hc_backend *be, void *inst, unsigned *left)
{
	static _Thread_local char why[160];
	const char *first = NULL, *w;
	int64_t res = 0;

	*left = 0;
	for (unsigned n; (n = written->n) > 0; written->n = n - 1) {
		struct hc_be_op op = { .opcode = HC_BE_OP_DELETE, .user_data = n };

		memcpy(op.name, written->name[n - 1], HC_BE_NAME_BYTES);
		if ((w = raw_op(be, inst, &op, &res)) == NULL && (res == 0 || res == -ENOENT))
			continue;
		if (!first) {
			if (w)
				snprintf(why, sizeof(why), "%s", w);
			else
				snprintf(why, sizeof(why), "a DELETE completed with %lld", (long long)res);
			first = why;
		}
		(*left)++;
	}
	return first;
}

/* Deletes what the case wrote, if the backend can, through the store's
 * instance now (a case may have opened the store again). */
static void delete_written(struct hct_env *e)
{
	const char *why;
	unsigned left;

	if (!(e->info.caps & HC_BE_CAP_DELETE))
		return;
	hc__store_plugin(e->st, &e->be, &e->inst);
	why = delete_log(e->be, e->inst, &left);
	ck_assert_msg(why == NULL, "%s: deleting what the case wrote: %u not deleted: %s", e->b->name, left, why);
}

/* The stored bytes of an object (malloc'd), and their length. */
static uint8_t *raw_get(struct hct_env *e, const uint8_t *name, int64_t *len)
{
	uint8_t *buf = malloc(1 << 20);
	struct iovec iov = { buf, 1 << 20 };

	*len = raw1(e, HC_BE_OP_GET, name, &iov, 1);
	ck_assert_msg(*len > 0 && *len <= (1 << 20), "%s: raw get: %lld", e->b->name, (long long)*len);
	return buf;
}

static void raw_put(struct hct_env *e, const uint8_t *name, const void *bytes, size_t len)
{
	struct iovec iov = { (void *)bytes, len };

	ck_assert_int_eq(raw1(e, HC_BE_OP_PUT, name, &iov, 1), 0);
}

/* ---- the cases (loop index: the target) */

START_TEST(roundtrip)
{
	struct hct_env e;
	hc_key_t k[40];
	int st[40];

	hct_env_open(&e, _i, 0);
	/* capabilities: known bits only, and the instance's where they depend on options */
	ck_assert_uint_eq(e.info.caps & ~(uint64_t)0x3f, 0);
	if (strcmp(e.b->name, "file") == 0)
		ck_assert_msg(!(e.info.caps & HC_BE_CAP_DURABLE) && (e.info.caps & HC_BE_CAP_ASYNC),
			      "file with fsync=none: caps 0x%llx", (unsigned long long)e.info.caps);
	hct_keys(k, 40, 11);
	put_keys(&e, k, 40, 7, HCT_BOTH);
	ck_assert_int_eq(hc_store_exists(e.st, k, 40, st), 40);
	ck_assert_int_eq(hct_get_keys(&e, k, 40, 7, HCT_BOTH, st), 40);
	for (int i = 0; i < 40; i++)
		ck_assert_int_eq(st[i], 0);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_hits"), 40);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_puts"), 40);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_corrupt"), 0);
	/* read again: a get does not consume */
	ck_assert_int_eq(hct_get_keys(&e, k, 40, 7, HCT_BOTH, st), 40);
	hct_env_close(&e);
}
END_TEST

START_TEST(exists_mixed)
{
	struct hct_env e;
	hc_key_t k[64], in[32];
	int st[64];

	hct_env_open(&e, _i, 0);
	hct_keys(k, 64, 12);
	for (int i = 0; i < 32; i++)
		memcpy(in[i], k[2 * i], HC_KEY_BYTES);
	put_keys(&e, in, 32, 1, HCT_BOTH);
	ck_assert_int_eq(hc_store_exists(e.st, k, 64, st), 32);
	for (int i = 0; i < 64; i++)
		ck_assert_msg(st[i] == (i % 2 == 0), "%s: key %d: exists %d", e.b->name, i, st[i]);
	/* absent keys are misses for get, never errors */
	ck_assert_int_eq(hct_get_keys(&e, k, 64, 1, HCT_BOTH, st), 32);
	for (int i = 0; i < 64; i++)
		ck_assert_int_eq(st[i], i % 2 == 0 ? 0 : -ENOENT);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_misses"), 32);
	hct_env_close(&e);
}
END_TEST

START_TEST(delete_overwrite)
{
	struct hct_env e;
	hc_key_t k[8];
	int st[8];

	hct_env_open(&e, _i, 0);
	hct_keys(k, 8, 13);
	put_keys(&e, k, 8, 1, HCT_BOTH);
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
		ck_assert_int_eq(hct_get_keys(&e, k, 8, 1, HCT_BOTH, st), 4);
		ck_assert_int_eq(st[0], -ENOENT);
		ck_assert_int_eq(st[4], 0);
	}
	/* overwrite: the second put wins, whole */
	put_keys(&e, k + 4, 4, 2, HCT_BOTH);
	ck_assert_int_eq(hct_get_keys(&e, k + 4, 4, 2, HCT_BOTH, st), 4);
	/* and a put of a key that was deleted stores it again */
	put_keys(&e, k, 2, 3, HCT_BOTH);
	ck_assert_int_eq(hct_get_keys(&e, k, 2, 3, HCT_BOTH, st), 2);
	hct_env_close(&e);
}
END_TEST

START_TEST(large_batch)
{
	struct hct_env e;
	hc_key_t *k = calloc(200, sizeof(*k));
	int *st = calloc(200, sizeof(int));

	hct_env_open(&e, _i, 8); /* 200 pages through 8 ops in flight */
	hct_keys(k, 200, 14);
	put_keys(&e, k, 200, 5, HCT_BOTH);
	ck_assert_int_eq(hc_store_exists(e.st, k, 200, st), 200);
	ck_assert_int_eq(hct_get_keys(&e, k, 200, 5, HCT_BOTH, st), 200);
	free(k);
	free(st);
	hct_env_close(&e);
}
END_TEST

START_TEST(raw_misaligned)
{
	struct hct_env e;
	uint8_t name[HC_BE_NAME_BYTES], *src = malloc(9000 + 64), *dst = malloc(9000 + 64), *got;
	const size_t len = 1 + 4097 + 777;
	struct iovec put[3], get[4];
	int64_t r;

	hct_env_open(&e, _i, 0);
	own_name(&e, 0xa5, name);
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
	hct_env_close(&e);
}
END_TEST

START_TEST(raw_ops)
{
	struct hct_env e;
	uint8_t name[HC_BE_NAME_BYTES], buf[64];
	struct iovec iov = { buf, sizeof(buf) };
	char out[256];

	hct_env_open(&e, _i, 0);
	own_name(&e, 0x5a, name);
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
	hct_env_close(&e);
}
END_TEST

struct worker {
	struct hct_env *e;
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
	wrote_keys(w->e, k, 24);
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
			page_bytes(w->e->p, pg[i], k[i], w->id + 100u * round, HCT_BOTH, 1);
			hc_page_commit(w->e->p, pg[i], hc_page_needed(w->e->p, HCT_BOTH));
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
			if (st[i] == 0 && page_bytes(w->e->p, pg[i], k[i], w->id + 100u * round, HCT_BOTH, 0) != 0) {
				snprintf(w->why, sizeof(w->why), "round %d key %d: wrong bytes", round, i);
				w->bad = 1;
			}
			/* a hit is committed and dropped (an abort would quarantine a TP=2 page) */
			if (st[i] == 0 && hc_page_commit(w->e->p, pg[i], hc_page_needed(w->e->p, HCT_BOTH)) == 1)
				hc_evict_key(w->e->p, k[i]);
			else
				hc_page_abort(w->e->p, &pg[i], 1);
		}
	}
	return NULL;
}

START_TEST(concurrent_store)
{
	struct hct_env e;
	pthread_t t[4];
	struct worker w[4];

	hct_env_open(&e, _i, 16);
	for (unsigned i = 0; i < 4; i++) {
		w[i] = (struct worker){ .e = &e, .id = i };
		ck_assert_int_eq(pthread_create(&t[i], NULL, store_worker, &w[i]), 0);
	}
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(!w[i].bad, "%s: thread %u: %s", e.b->name, i, w[i].why);
	}
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_hits"), 4 * 3 * 24);
	hct_env_close(&e);
}
END_TEST

/* Raw ABI: submitters and reapers on separate threads; every completion once. */
struct raw_shared {
	struct hct_env *e;
	uint8_t base[HC_BE_NAME_BYTES]; /* names: this, with submitter and op in bytes 32 and 33 */
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
			memcpy(op[j].name, s->base, sizeof(op[j].name));
			op[j].name[32] = (uint8_t)id;
			op[j].name[33] = (uint8_t)((i + j) % 7);
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
	struct hct_env e;
	struct raw_shared *s = calloc(1, sizeof(*s));
	pthread_t sub[4], rea[2];
	void *args[4][2];

	hct_env_open(&e, _i, 0);
	s->e = &e;
	own_name(&e, 0, s->base);
	for (int id = 0; id < 4; id++)
		for (int k = 0; k < 7; k++) {
			uint8_t name[HC_BE_NAME_BYTES];
			memcpy(name, s->base, sizeof(name));
			name[32] = (uint8_t)id;
			name[33] = (uint8_t)k;
			wrote(name);
		}
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
	hct_env_close(&e);
}
END_TEST

char hct_logged[4096];

void hct_log_capture(int level, const char *msg, void *arg)
{
	(void)arg;
	if (level <= HC_LOG_WARN && strlen(hct_logged) + strlen(msg) + 2 < sizeof(hct_logged)) {
		strcat(hct_logged, msg);
		strcat(hct_logged, "\n");
	}
}

START_TEST(corrupt_objects)
{
	struct hct_env e;
	hc_key_t k[6];
	uint8_t name[HC_BE_NAME_BYTES], name2[HC_BE_NAME_BYTES];
	uint8_t *obj;
	int64_t len;
	int st[6];

	hct_env_open(&e, _i, 0);
	hc_set_log(hct_log_capture, NULL);
	hct_keys(k, 6, 15);
	put_keys(&e, k, 6, 9, HCT_BOTH);
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

	ck_assert_int_eq(hct_get_keys(&e, k, 6, 9, HCT_BOTH, st), 1);
	for (int i = 0; i < 5; i++)
		ck_assert_msg(st[i] == -EBADMSG, "%s: corrupt object %d: status %d", e.b->name, i, st[i]);
	ck_assert_int_eq(st[5], 0);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_corrupt"), 5);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_hits"), 1);
	ck_assert_msg(strstr(hct_logged, "treated as a miss") != NULL, "no warning hct_logged: '%s'", hct_logged);
	hc_set_log(NULL, NULL);
	hct_env_close(&e);
}
END_TEST

/* An object written by a pool of another fingerprint is never read as ours.
 * The stores take turns: a backend may allow one instance per location. */
START_TEST(wrong_fingerprint)
{
	struct hct_env e;
	const char *other = hct_name();
	hc_pool *q;
	hc_store *qs;
	struct hc_pool_info pi;
	uint8_t name[HC_BE_NAME_BYTES], *obj;
	hc_key_t k[2];
	int64_t len;
	int st[2];

	hct_env_open(&e, _i, 0);
	hct_keys(k, 2, 16);
	put_keys(&e, k, 2, 3, HCT_BOTH);
	obj_name(&e, k[0], name);
	obj = raw_get(&e, name, &len);
	ck_assert_ok(hc_store_close(e.st));
	/* the same layout under another model id: another fingerprint */
	q = own_pool(other, 16, 0, 0);
	ck_assert_ok(hc_store_open(q, e.spec, NULL, &qs));
	hc_pool_info(q, &pi, sizeof(pi));
	/* plant our object under the other pool's name for the key */
	memcpy(name, pi.fingerprint, 32);
	{
		struct hct_env e2 = e;
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
	e.st = hct_env_store(&e, 0);
	if (e.info.caps & HC_BE_CAP_PERSISTENT)
		ck_assert_int_eq(hct_get_keys(&e, k, 2, 3, HCT_BOTH, st), 2);
	hct_env_close(&e);
}
END_TEST

START_TEST(presence)
{
	struct hct_env e;
	hc_key_t k[4];
	int st[4];

	hct_env_open(&e, _i, 0);
	hct_keys(k, 4, 17);
	put_keys(&e, k, 2, 4, HCT_BOTH);   /* objects with both components */
	put_keys(&e, k + 2, 2, 4, HCT_KV); /* objects with the KV component only */
	/* a page that needs less than the object holds: read whole, then copied */
	ck_assert_int_eq(hct_get_keys(&e, k, 2, 4, HCT_KV, st), 2);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_rereads"), 2);
	ck_assert_int_eq(hct_get_keys(&e, k, 2, 4, HCT_STATE, st), 2);
	/* a page that needs more than the object holds: a miss */
	ck_assert_int_eq(hct_get_keys(&e, k + 2, 2, 4, HCT_BOTH, st), 0);
	ck_assert_int_eq(st[0], -ENOENT);
	ck_assert_int_eq(hct_get_keys(&e, k + 2, 2, 4, HCT_KV, st), 2);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_corrupt"), 0);
	hct_env_close(&e);
}
END_TEST

START_TEST(reopen)
{
	struct hct_env e;
	hc_key_t k[10];
	int st[10];

	hct_env_open(&e, _i, 0);
	hct_keys(k, 10, 18);
	put_keys(&e, k, 10, 6, HCT_BOTH);
	ck_assert_ok(hc_store_close(e.st));
	e.st = hct_env_store(&e, 0);
	if (e.info.caps & HC_BE_CAP_PERSISTENT) {
		ck_assert_int_eq(hct_get_keys(&e, k, 10, 6, HCT_BOTH, st), 10);
	} else {
		ck_assert_int_eq(hc_store_exists(e.st, k, 10, st), 0);
	}
	/* close and reopen again, with nothing done in between */
	ck_assert_ok(hc_store_close(e.st));
	e.st = hct_env_store(&e, 0);
	hct_env_close(&e);
}
END_TEST

START_TEST(store_errors)
{
	struct hct_env e;
	hc_key_t k[2];
	hc_page_t pg[2], unkeyed;
	int st[2];
	char spec[600];
	hc_store *bad = NULL;

	hct_env_open(&e, _i, 0);
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
	ck_assert_int_eq(hc_page_alloc(e.p, 1, HCT_BOTH, &unkeyed), 1);
	ck_assert_int_eq(hct_fill_commit_all(e.p, unkeyed), 1);
	ck_assert_int_eq(hc_store_put(e.st, &unkeyed, 1, st), 0);
	ck_assert_int_eq(st[0], -EINVAL);
	/* a freed handle */
	ck_assert_int_eq(hc_page_free(e.p, &unkeyed, 1), 1);
	ck_assert_int_eq(hc_store_put(e.st, &unkeyed, 1, st), 0);
	ck_assert_int_eq(st[0], -ESTALE);
	/* get needs this process's reservation, not a READY page */
	hct_make_ready(&e, k, 1, 1, HCT_BOTH, pg);
	ck_assert_int_eq(hc_store_get(e.st, pg, 1, st), 0);
	ck_assert_int_eq(st[0], -ESTALE);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_get_errors"), 1);
	hct_env_close(&e);
}
END_TEST

/* An object of a newer format major is a miss, not corruption. */
START_TEST(newer_format)
{
	struct hct_env e;
	hc_key_t k[2];
	uint8_t name[HC_BE_NAME_BYTES], *obj;
	int64_t len;
	uint64_t sum;
	int st[2];

	hct_env_open(&e, _i, 0);
	hct_keys(k, 2, 22);
	put_keys(&e, k, 2, 3, HCT_BOTH);
	obj_name(&e, k[0], name);
	obj = raw_get(&e, name, &len);
	obj[8] = 2; /* format 2.0, sealed as a newer writer would */
	sum = XXH3_64bits(obj, 4088);
	memcpy(obj + 4088, &sum, 8);
	raw_put(&e, name, obj, (size_t)len);
	free(obj);
	ck_assert_int_eq(hct_get_keys(&e, k, 2, 3, HCT_BOTH, st), 1);
	ck_assert_int_eq(st[0], -EPROTO);
	ck_assert_int_eq(st[1], 0);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_corrupt"), 0);
	ck_assert_uint_eq(hct_store_stat(e.st, "lib_misses"), 1);
	hct_env_close(&e);
}
END_TEST

/* ---- the runner's side, outside any case: nothing here fails a test */

int hct_conf_probe(const char *spec, struct hc_store_info *info, unsigned *left, char *err, size_t errlen)
{
	struct hc_attach_opts ao = { .size = sizeof(ao), .flags = HC_ATTACH_NO_POPULATE };
	const char *name = hct_name(), *why;
	const struct hc_backend *be;
	struct hct_spec s;
	hc_store *st = NULL;
	hc_pool *p = NULL;
	int r, made = 0;
	void *inst;

	*left = 0;
	err[0] = '\0';
	hct_spec_init(&s, name, 16);
	s.spec.model_id = "hicache-conformance/runner";
	if ((r = hc_pool_create(&s.spec)) < 0 || (made = 1, r = hc_pool_attach(name, &ao, &p)) < 0 ||
	    (r = hc_store_open(p, spec, NULL, &st)) < 0 || (r = hc_store_info(st, info, sizeof(*info))) < 0) {
		snprintf(err, errlen, "%s", hc_last_error());
	} else if (!(info->caps & HC_BE_CAP_DELETE)) {
		*left = written->n; /* it cannot delete them */
		written->n = 0;
	} else {
		hc__store_plugin(st, &be, &inst);
		if ((why = delete_log(be, inst, left)) != NULL)
			snprintf(err, errlen, "%s", why);
	}
	if (st)
		hc_store_close(st);
	if (p)
		hc_pool_detach(p);
	if (made)
		hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
	return r;
}

/* The cases, in the order they run, each with a line of help. */
#define CASES(X)                                                                                                       \
	X(roundtrip, "pages put, found by EXISTS, read back twice; the store's counters")                              \
	X(exists_mixed, "EXISTS of stored and absent keys; a get of an absent key is a miss")                          \
	X(delete_overwrite, "DELETE (or -EOPNOTSUPP); a put replaces whole; a deleted key is stored again")            \
	X(large_batch, "200 pages through a queue depth of 8")                                                         \
	X(raw_misaligned, "raw PUT and GET of odd lengths at odd addresses, into short and long buffers")              \
	X(raw_ops, "raw ops on a missing name, bad ops, an idle reap, cancel, statistics, unknown ctl keys")           \
	X(concurrent_store, "4 threads put and get their pages through one store")                                     \
	X(concurrent_raw, "4 threads submit raw ops while 2 reap: every completion once")                              \
	X(corrupt_objects, "objects altered through the raw ABI are refused as corrupt")                               \
	X(wrong_fingerprint, "an object under another pool's name is never read as ours")                              \
	X(presence, "pages that need fewer or more components than their objects hold")                                \
	X(reopen, "objects after a close and an open, as HC_BE_CAP_PERSISTENT says")                                   \
	X(store_errors, "an unknown option refused by name; bad arguments, pages without a key or freed")              \
	X(newer_format, "an object of a newer format major is a miss, not corruption")

#define CASE_TEST(fn, help) fn,
#define CASE_HELP(fn, help) help,

static const char *const help[] = { CASES(CASE_HELP) };
_Static_assert(sizeof(help) / sizeof(help[0]) <= HCT_CONF_CASES_MAX, "raise HCT_CONF_CASES_MAX");

unsigned hct_conf_ncases(void)
{
	return sizeof(help) / sizeof(help[0]);
}

const TTest *hct_conf_case(unsigned i)
{
	/* START_TEST's pointers are not constants: the table is made here */
	const TTest *t[] = { CASES(CASE_TEST) };

	return i < hct_conf_ncases() ? t[i] : NULL;
}

const char *hct_conf_help(unsigned i)
{
	return i < hct_conf_ncases() ? help[i] : NULL;
}
