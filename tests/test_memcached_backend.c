/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_memcached_backend.c - the memcached L3 plugin (backends/memcached)
 * on real memcached servers that each test starts on free loopback ports:
 * bad options, chunking under a small item size (memcached -I), placement
 * of an object's items on one server, chunks evicted by a full server and
 * chunks of another version (a miss, never a mix), another node's chunk
 * size, TTL, cancel, and a server SIGKILLed in the middle of a stream of
 * puts and gets, then restarted and used again.  The plugin is loaded by
 * the library's loader; objects are checked byte for byte here, below the
 * host's own checks, so a plugin that returned a mixed object would fail.
 */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <libmemcached/memcached.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <hicache/backend.h>

#include "../lib/l3/plugin.h"
#include "hct.h"
#include "hctbe.h"
#include "mcd.h"

static struct hct_mcd mcd;
static const struct hc_backend *B;

static void teardown(void)
{
	hct_mcd_stop(&mcd);
}

static void servers_up(unsigned n, const char *args)
{
	char e[256];

	ck_assert_msg(hct_mcd_start(&mcd, n, args, e, sizeof(e)) == 0, "%s", e);
}

/* Open an instance on the running servers with more options ("k=v,k=v"). */
static int open_with(void **inst, const char *more)
{
	struct hc__plugin_spec sp;
	struct hc__plugin pl;
	char spec[1024], servers[512];
	int ret;

	hct_mcd_servers(&mcd, servers, sizeof(servers));
	snprintf(spec, sizeof(spec), "memcached:servers=%s%s%s", servers, more && *more ? "," : "", more ? more : "");
	*inst = NULL;
	if ((ret = hc__plugin_spec_parse(spec, &sp)) < 0 || (ret = hc__plugin_load(sp.name, NULL, &pl)) < 0)
		return ret;
	B = pl.be;
	return hc__plugin_open(&pl, &sp, inst);
}

static void *must_open(const char *more)
{
	void *inst;
	int ret = open_with(&inst, more);

	ck_assert_msg(ret == 0 && inst, "open %s: %d %s", more ? more : "", ret, hc_last_error());
	return inst;
}

/* ---- objects: bytes of (id, version, offset) */

static uint8_t pat(uint32_t id, uint32_t ver, uint64_t i)
{
	uint64_t x = (i + 7) * UINT64_C(0xd6e8feb86659fd93) ^ ((uint64_t)id << 32 | ver);
	x ^= x >> 32;
	x *= UINT64_C(0x9e3779b97f4a7c15);
	return (uint8_t)(x >> 56);
}

static uint8_t *obj_new(uint32_t id, uint32_t ver, size_t len)
{
	uint8_t *b = malloc(len ? len : 1);

	for (size_t i = 0; i < len; i++)
		b[i] = pat(id, ver, i);
	return b;
}

/* Which version of id buf holds (its first len bytes): ver, or -1 if none. */
static int obj_ver(const uint8_t *b, size_t len, uint32_t id, uint32_t ver)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != pat(id, ver, i))
			return -1;
	return (int)ver;
}

static void oname(uint8_t n[HC_BE_NAME_BYTES], uint32_t id)
{
	memset(n, 0x3c, 32);
	memset(n + 32, 0, 32);
	memcpy(n + 32, &id, sizeof(id));
}

/* ---- ops: a batch submitted and reaped */

struct op {
	uint32_t opcode, id;
	struct iovec iov[4];
	unsigned iovcnt;
	int64_t result;
};

static void run_ops(void *inst, struct op *ops, unsigned n)
{
	struct hc_be_op *b = calloc(n, sizeof(*b));
	unsigned done = 0, sub = 0;

	for (unsigned i = 0; i < n; i++) {
		b[i] = (struct hc_be_op){ .opcode = ops[i].opcode,
					  .iovcnt = ops[i].iovcnt,
					  .iov = ops[i].iov,
					  .user_data = i };
		oname(b[i].name, ops[i].id);
		ops[i].result = INT64_MIN;
	}
	while (sub < n) {
		int r = B->submit(inst, b + sub, n - sub);
		ck_assert_msg(r > 0, "submit: %d", r);
		sub += (unsigned)r;
	}
	for (double t = hct_now() + 30; done < n;) {
		struct hc_be_cqe c[64];
		int k = B->reap(inst, c, 64, 100);
		ck_assert_msg(k >= 0, "reap: %d", k);
		for (int j = 0; j < k; j++) {
			ck_assert_uint_lt(c[j].user_data, n);
			ck_assert_msg(ops[c[j].user_data].result == INT64_MIN, "op %llu completed twice",
				      (unsigned long long)c[j].user_data);
			ops[c[j].user_data].result = c[j].result;
		}
		done += (unsigned)k;
		ck_assert_msg(hct_now() < t, "%u of %u ops not done in 30 s", n - done, n);
	}
	free(b);
}

static int64_t op1(void *inst, uint32_t opcode, uint32_t id, void *buf, size_t len)
{
	struct op o = { .opcode = opcode, .id = id, .iov = { { buf, len } }, .iovcnt = buf ? 1 : 0 };

	run_ops(inst, &o, 1);
	return o.result;
}

static int64_t put_obj(void *inst, uint32_t id, uint32_t ver, size_t len)
{
	uint8_t *b = obj_new(id, ver, len);
	int64_t r = op1(inst, HC_BE_OP_PUT, id, b, len);

	free(b);
	return r;
}

/* Get id into a buffer of room bytes: the result; *ver the version read
 * (-1: the bytes are no version of id). */
static int64_t get_obj(void *inst, uint32_t id, uint32_t ver, size_t room, int *got)
{
	uint8_t *b = malloc(room + 64);
	int64_t r;

	memset(b, 0xee, room + 64);
	r = op1(inst, HC_BE_OP_GET, id, b, room);
	*got = -1;
	if (r > 0) {
		size_t n = (size_t)r < room ? (size_t)r : room;
		*got = obj_ver(b, n, id, ver);
		for (size_t i = n; i < room + 64; i++)
			if (b[i] != 0xee)
				*got = -2; /* written past the object's end */
	}
	free(b);
	return r;
}

/* ---- straight to one server, around the plugin */

static memcached_st *direct(unsigned server)
{
	memcached_st *mc = memcached_create(NULL);

	memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 1);
	ck_assert_int_eq(memcached_server_add(mc, "127.0.0.1", (in_port_t)mcd.port[server]), MEMCACHED_SUCCESS);
	return mc;
}

/* The key of object id's manifest (chunk -1) or chunk, default prefix. */
static size_t item_key(uint32_t id, int chunk, char *out)
{
	uint8_t n[HC_BE_NAME_BYTES];
	size_t k = (size_t)sprintf(out, "hicache:");

	oname(n, id);
	for (int i = 0; i < HC_BE_NAME_BYTES; i++)
		k += (size_t)sprintf(out + k, "%02x", n[i]);
	if (chunk >= 0)
		k += (size_t)sprintf(out + k, ".%d", chunk);
	return k;
}

static int has_item(memcached_st *mc, uint32_t id, int chunk)
{
	char key[256];
	size_t klen = item_key(id, chunk, key), vlen;
	uint32_t flags;
	memcached_return_t rc;
	char *v = memcached_get(mc, key, klen, &vlen, &flags, &rc);

	free(v);
	return v != NULL;
}

/* The server (0..n-1) holding id's manifest, or -1 if none does. */
static int home_of(uint32_t id)
{
	int home = -1;

	for (unsigned s = 0; s < mcd.n; s++) {
		memcached_st *mc;
		if (!mcd.pid[s])
			continue;
		mc = direct(s);
		if (has_item(mc, id, -1)) {
			ck_assert_msg(home < 0, "object %u has a manifest on two servers", id);
			home = (int)s;
		}
		memcached_free(mc);
	}
	return home;
}

/* ---- the tests */

static void refused(const char *more, const char *needle)
{
	void *inst;
	int ret = open_with(&inst, more);

	ck_assert_msg(ret == -EINVAL || ret == -EHOSTDOWN, "open with '%s': %d (%s)", more, ret, hc_last_error());
	ck_assert_ptr_null(inst);
	ck_assert_msg(strstr(hc_last_error(), needle), "open with '%s': error '%s' lacks '%s'", more, hc_last_error(),
		      needle);
}

START_TEST(bad_options)
{
	struct hc__plugin_spec sp;
	struct hc__plugin pl;
	void *inst;
	char spec[128];
	int port;

	servers_up(1, "-I 64k -o slab_chunk_max=32768");
	refused("chunk_size=12", "chunk_size=12 is not auto or a size");
	refused("chunk_size=1M", "does not fit server 127.0.0.1");
	refused("chunk_size=1M", "give chunk_size=64512 or less");
	refused("ttl=2592001", "30 days");
	refused("workers=0", "workers=0");
	refused("batch=lots", "batch=lots");
	refused("eject_s=0", "eject_s=0");
	refused("eject_after=0", "eject_after=0 is not a count of failed connects");
	refused("io_timeout_ms=-1", "io_timeout_ms=-1");
	refused("prefix=a b", "no spaces");
	refused("username=u", "SASL needs both");
	refused("password=p", "SASL needs both");
	refused("password=p,password_file=/etc/hostname", "give one");
	refused("password_file=/nonexistent/pw,username=u", "password_file=/nonexistent/pw: No such file");
	refused("colour=blue", "unknown option 'colour': memcached takes servers");
	/* servers= itself */
	ck_assert_ok(hc__plugin_load("memcached", NULL, &pl));
	B = pl.be;
	{
		static const char *const bad[][2] = {
			{ "memcached", "servers= is missing" },
			{ "memcached:servers=", "servers= is empty" },
			{ "memcached:servers=;;", "servers= is empty" },
			{ "memcached:servers=h:0", "no port from 1 to 65535" },
			{ "memcached:servers=h:99999", "no port from 1 to 65535" },
			{ "memcached:servers=h:", "no port from 1 to 65535" },
			{ "memcached:servers=::1:11211", "in brackets" },
			{ "memcached:servers=[::1", "[IPV6-ADDRESS]:PORT" },
			{ "memcached:servers=a$b:1", "not a host name" },
			{ "memcached:servers=h:1;h:1", "listed twice" },
			{ "memcached:servers=h 11211", "has a space" },
			{ "memcached:servers=[foo]:1", "[IPV6-ADDRESS]:PORT" },
		};
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			ck_assert_ok(hc__plugin_spec_parse(bad[i][0], &sp));
			inst = NULL;
			ck_assert_err(hc__plugin_open(&pl, &sp, &inst), EINVAL);
			ck_assert_msg(strstr(hc_last_error(), bad[i][1]), "'%s': error '%s' lacks '%s'", bad[i][0],
				      hc_last_error(), bad[i][1]);
			ck_assert_ptr_null(inst);
		}
	}
	/* a server nobody listens on: said at open, naming it */
	port = mcd.port[0];
	hct_mcd_stop(&mcd);
	snprintf(spec, sizeof(spec), "memcached:servers=127.0.0.1:%d,connect_timeout_ms=200", port);
	ck_assert_ok(hc__plugin_spec_parse(spec, &sp));
	ck_assert_err(hc__plugin_open(&pl, &sp, &inst), EHOSTDOWN);
	ck_assert_msg_has("none of the 1 servers answered");
	ck_assert_msg_has("start them, or correct servers=");
}
END_TEST

/* Objects of many chunks under a 64 KiB item size, found by the probe. */
START_TEST(small_items)
{
	static const size_t sizes[] = { 1, 4096, 64512, 64513, 3 * 64512, (1 << 20) + 5, 3u << 20 };
	const unsigned ns = sizeof(sizes) / sizeof(sizes[0]);
	uint64_t chunks = 0;
	char out[64];
	void *inst;
	int got;

	servers_up(3, "-I 64k -o slab_chunk_max=32768 -m 64");
	inst = must_open("workers=3");
	ck_assert_int_eq(B->ctl(inst, "chunk_size", NULL, out, sizeof(out)), 5);
	ck_assert_str_eq(out, "64512"); /* the item size less 1 KiB */
	for (unsigned i = 0; i < ns; i++) {
		ck_assert_int_eq(put_obj(inst, i, 1, sizes[i]), 0);
		chunks += (sizes[i] + 64511) / 64512;
	}
	ck_assert_uint_eq(hct_be_stat(B, inst, "items_written"), chunks + ns);
	/* exact buffers, then one byte short, then 100 KiB too long */
	for (unsigned i = 0; i < ns; i++) {
		ck_assert_int_eq(get_obj(inst, i, 1, sizes[i], &got), (int64_t)sizes[i]);
		ck_assert_int_eq(got, 1);
		ck_assert_int_eq(get_obj(inst, i, 1, sizes[i] + 100000, &got), (int64_t)sizes[i]);
		ck_assert_msg(got == 1, "object %u (%zu bytes) in a longer buffer: %d", i, sizes[i], got);
		if (sizes[i] > 1) {
			ck_assert_int_eq(get_obj(inst, i, 1, sizes[i] - 1, &got), (int64_t)sizes[i]);
			ck_assert_int_eq(got, 1);
		}
	}
	/* a split read: three buffers of odd lengths at odd addresses */
	{
		size_t len = sizes[5];
		uint8_t *b = malloc(len + 16);
		struct op o = { .opcode = HC_BE_OP_GET,
				.id = 5,
				.iovcnt = 3,
				.iov = { { b + 1, 4097 }, { b + 1 + 4097, 70001 }, { b + 1 + 74098, len - 74098 } } };
		run_ops(inst, &o, 1);
		ck_assert_int_eq(o.result, (int64_t)len);
		ck_assert_int_eq(obj_ver(b + 1, len, 5, 1), 1);
		free(b);
	}
	/* the host's shape, a 4 KiB header block and the payload: the header
	 * rides in the manifest, and every chunk is set from the payload */
	{
		size_t len = 200000;
		uint8_t *src = obj_new(50, 4, len), *b = malloc(len);
		memcached_st *mc;
		char key[256];
		size_t vlen;
		uint32_t flags;
		memcached_return_t rc;
		char *v;
		struct op o = { .opcode = HC_BE_OP_PUT,
				.id = 50,
				.iovcnt = 2,
				.iov = { { src, 4096 }, { src + 4096, len - 4096 } } };
		uint64_t written = hct_be_stat(B, inst, "items_written");
		run_ops(inst, &o, 1);
		ck_assert_int_eq(o.result, 0);
		ck_assert_uint_eq(hct_be_stat(B, inst, "items_written") - written, 1 + (len - 4096 + 64511) / 64512);
		mc = direct((unsigned)home_of(50));
		item_key(50, -1, key);
		v = memcached_get(mc, key, strlen(key), &vlen, &flags, &rc);
		ck_assert_uint_eq(vlen, 128 + 4096);
		ck_assert_int_eq(memcmp(v + 128, src, 4096), 0);
		free(v);
		memcached_free(mc);
		ck_assert_int_eq(get_obj(inst, 50, 4, len, &got), (int64_t)len);
		ck_assert_int_eq(got, 4);
		ck_assert_int_eq(get_obj(inst, 50, 4, 1000, &got), (int64_t)len); /* inside the head */
		ck_assert_int_eq(got, 4);
		ck_assert_int_eq(get_obj(inst, 50, 4, 4096 + 10, &got), (int64_t)len);
		ck_assert_int_eq(got, 4);
		/* and read back in the same two parts */
		memset(b, 0, len);
		o = (struct op){ .opcode = HC_BE_OP_GET,
				 .id = 50,
				 .iovcnt = 2,
				 .iov = { { b, 4096 }, { b + 4096, len - 4096 } } };
		run_ops(inst, &o, 1);
		ck_assert_int_eq(o.result, (int64_t)len);
		ck_assert_int_eq(memcmp(b, src, len), 0);
		free(src);
		free(b);
	}
	/* every item of an object on one server, and the objects on all three */
	{
		unsigned per[3] = { 0 };
		for (unsigned i = 0; i < ns; i++) {
			int h = home_of(i);
			ck_assert_int_ge(h, 0);
			per[h]++;
			for (unsigned s = 0; s < 3; s++) {
				memcached_st *mc = direct(s);
				for (int c = 0; c < (int)((sizes[i] + 64511) / 64512); c++)
					ck_assert_msg(has_item(mc, i, c) == ((int)s == h),
						      "object %u chunk %d: on server %u, its manifest on %d", i, c, s,
						      h);
				memcached_free(mc);
			}
		}
		/* 40 more one-chunk objects spread: every server gets some */
		for (unsigned i = 100; i < 140; i++) {
			ck_assert_int_eq(put_obj(inst, i, 1, 100), 0);
			per[home_of(i)]++;
		}
		ck_assert_msg(per[0] && per[1] && per[2], "objects per server: %u %u %u", per[0], per[1], per[2]);
	}
	B->close(inst);
}
END_TEST

/* A server down when the instance opens: said, counted, and its keys are
 * ejected with it (misses, puts that fail at once); the others serve. */
START_TEST(down_at_open)
{
	unsigned ok = 0, homed_dead = 0;
	void *inst;
	int got;

	servers_up(3, NULL);
	hct_mcd_kill(&mcd, 2, SIGKILL);
	inst = must_open("connect_timeout_ms=300,eject_after=1,eject_s=30");
	ck_assert_uint_eq(hct_be_stat(B, inst, "servers"), 3);
	ck_assert_uint_eq(hct_be_stat(B, inst, "servers_up"), 2);
	for (uint32_t id = 0; id < 60; id++) {
		int64_t r = put_obj(inst, id, 1, 3000);
		ck_assert_msg(r == 0 || r == -ECONNREFUSED || r == -EHOSTDOWN, "put %u: %lld", id, (long long)r);
		if (r == 0) {
			ok++;
			ck_assert_int_eq(get_obj(inst, id, 1, 3000, &got), 3000);
			ck_assert_int_eq(got, 1);
		} else {
			ck_assert_int_eq(get_obj(inst, id, 1, 3000, &got), -ENOENT);
			ck_assert_int_eq(op1(inst, HC_BE_OP_EXISTS, id, NULL, 0), 0);
			homed_dead++;
		}
	}
	/* keys stay with their server: about a third fail, the rest are whole */
	ck_assert_msg(ok >= 20 && homed_dead >= 5, "%u of 60 puts stored with one of three servers down", ok);
	ck_assert_uint_gt(hct_be_stat(B, inst, "server_errors"), 0);
	B->close(inst);
}
END_TEST

/* A server too small for what is put evicts single chunks: every get is the
 * whole object or a miss. */
START_TEST(evicted_chunks)
{
	const size_t len = 300 * 1024; /* 5 chunks of 63 KiB */
	unsigned hits = 0, partial = 0, nobj = 120;
	void *inst;
	memcached_st *mc;

	servers_up(1, "-I 64k -o slab_chunk_max=32768 -m 4");
	inst = must_open("workers=2");
	for (unsigned i = 0; i < nobj; i++)
		ck_assert_int_eq(put_obj(inst, i, 7, len), 0);
	mc = direct(0);
	for (unsigned i = 0; i < nobj; i++) {
		int got, whole = has_item(mc, i, -1);
		int64_t r;
		for (int c = 0; c < 5; c++)
			whole &= has_item(mc, i, c);
		if (!whole && has_item(mc, i, -1))
			partial++;
		r = get_obj(inst, i, 7, len, &got);
		ck_assert_msg(r == -ENOENT || (r == (int64_t)len && got == 7), "object %u: %lld, version %d", i,
			      (long long)r, got);
		ck_assert_msg((r > 0) == whole, "object %u: get %lld, but its items are %s there", i, (long long)r,
			      whole ? "all" : "not all");
		hits += r > 0;
	}
	memcached_free(mc);
	ck_assert_msg(hits > 0 && hits < nobj, "%u of %u objects whole after eviction", hits, nobj);
	ck_assert_msg(partial > 0 || hct_be_stat(B, inst, "missing_chunks") > 0,
		      "no object lost a chunk but kept its manifest: the test did not test");
	B->close(inst);
}
END_TEST

/* Chunks missing or of another version, manifests damaged or misplaced:
 * misses, counted, never bytes. */
START_TEST(inconsistent_items)
{
	const size_t len = 200 * 1024;
	char key[256], key2[256];
	size_t vlen;
	uint32_t flags;
	memcached_return_t rc;
	memcached_st *mc;
	void *inst;
	char *v;
	int got;

	servers_up(1, "-I 64k -o slab_chunk_max=32768");
	inst = must_open(NULL);
	for (uint32_t id = 1; id <= 5; id++)
		ck_assert_int_eq(put_obj(inst, id, 1, len), 0);
	mc = direct(0);
	/* 1: chunk 2 deleted */
	item_key(1, 2, key);
	ck_assert_int_eq(memcached_delete(mc, key, strlen(key), 0), MEMCACHED_SUCCESS);
	/* 2: chunk 1 replaced by chunk 1 of version 2 of the same object */
	ck_assert_int_eq(put_obj(inst, 9, 2, len), 0); /* same bytes under another name: other tags */
	item_key(9, 1, key2);
	v = memcached_get(mc, key2, strlen(key2), &vlen, &flags, &rc);
	ck_assert_ptr_nonnull(v);
	item_key(2, 1, key);
	ck_assert_int_eq(memcached_set(mc, key, strlen(key), v, vlen, 0, flags), MEMCACHED_SUCCESS);
	free(v);
	/* 3: the manifest with a byte flipped */
	item_key(3, -1, key);
	v = memcached_get(mc, key, strlen(key), &vlen, &flags, &rc);
	v[20] ^= 1;
	ck_assert_int_eq(memcached_set(mc, key, strlen(key), v, vlen, 0, flags), MEMCACHED_SUCCESS);
	free(v);
	/* 4: object 5's manifest under object 4's name */
	item_key(5, -1, key2);
	v = memcached_get(mc, key2, strlen(key2), &vlen, &flags, &rc);
	item_key(4, -1, key);
	ck_assert_int_eq(memcached_set(mc, key, strlen(key), v, vlen, 0, flags), MEMCACHED_SUCCESS);
	free(v);
	/* 5: chunk 3 truncated by a byte, its tag kept */
	item_key(5, 3, key);
	v = memcached_get(mc, key, strlen(key), &vlen, &flags, &rc);
	ck_assert_int_eq(memcached_set(mc, key, strlen(key), v, vlen - 1, 0, flags), MEMCACHED_SUCCESS);
	free(v);
	/* 6: a manifest whose length is 2^64 - 2, sealed with a right checksum:
	 * never a result that reads as an errno */
	ck_assert_int_eq(put_obj(inst, 6, 1, len), 0);
	item_key(6, -1, key);
	v = memcached_get(mc, key, strlen(key), &vlen, &flags, &rc);
	{
		uint64_t huge = UINT64_MAX - 1, sum;
		memcpy(v + 16, &huge, 8);
		sum = XXH3_64bits(v, 120);
		memcpy(v + 120, &sum, 8);
	}
	ck_assert_int_eq(memcached_set(mc, key, strlen(key), v, vlen, 0, flags), MEMCACHED_SUCCESS);
	free(v);
	for (uint32_t id = 1; id <= 6; id++)
		ck_assert_msg(get_obj(inst, id, 1, len, &got) == -ENOENT, "object %u read", id);
	ck_assert_uint_eq(hct_be_stat(B, inst, "missing_chunks"), 1);
	ck_assert_uint_eq(hct_be_stat(B, inst, "inconsistent"), 2);
	ck_assert_uint_eq(hct_be_stat(B, inst, "bad_manifests"), 3);
	ck_assert_uint_eq(hct_be_stat(B, inst, "misses"), 6);
	/* exists reads manifests only: 3 and 4 are gone, the others look there */
	for (uint32_t id = 1; id <= 5; id++)
		ck_assert_int_eq(op1(inst, HC_BE_OP_EXISTS, id, NULL, 0), id == 3 || id == 4 ? 0 : 1);
	/* a put repairs; a delete removes the manifest and the chunks */
	ck_assert_int_eq(put_obj(inst, 2, 1, len), 0);
	ck_assert_int_eq(get_obj(inst, 2, 1, len, &got), (int64_t)len);
	ck_assert_int_eq(got, 1);
	ck_assert_int_eq(op1(inst, HC_BE_OP_DELETE, 2, NULL, 0), 0);
	ck_assert_int_eq(op1(inst, HC_BE_OP_DELETE, 2, NULL, 0), -ENOENT);
	for (int c = -1; c < 4; c++)
		ck_assert_msg(!has_item(mc, 2, c), "item %d of a deleted object is left", c);
	memcached_free(mc);
	B->close(inst);
}
END_TEST

/* The same object asked twice in one submit: both answered (a multi-get
 * matches answers by key, so the second waits for the next batch). */
START_TEST(same_name_twice)
{
	const size_t len = 150000;
	uint8_t *b1 = malloc(len), *b2 = malloc(len);
	void *inst;

	servers_up(1, "-I 64k -o slab_chunk_max=32768");
	inst = must_open("workers=1");
	ck_assert_int_eq(put_obj(inst, 1, 2, len), 0);
	{
		struct op o[4] = {
			{ .opcode = HC_BE_OP_GET, .id = 1, .iovcnt = 1, .iov = { { b1, len } } },
			{ .opcode = HC_BE_OP_GET, .id = 1, .iovcnt = 1, .iov = { { b2, len } } },
			{ .opcode = HC_BE_OP_EXISTS, .id = 1 },
			{ .opcode = HC_BE_OP_EXISTS, .id = 1 },
		};
		run_ops(inst, o, 4);
		ck_assert_int_eq(o[0].result, (int64_t)len);
		ck_assert_int_eq(o[1].result, (int64_t)len);
		ck_assert_int_eq(obj_ver(b1, len, 1, 2), 2);
		ck_assert_int_eq(obj_ver(b2, len, 1, 2), 2);
		ck_assert_int_eq(o[2].result, 1);
		ck_assert_int_eq(o[3].result, 1);
	}
	B->close(inst);
	free(b1);
	free(b2);
}
END_TEST

/* Another node's chunk size: read in a second round trip. */
START_TEST(other_chunk_size)
{
	const size_t len = 100 * 1024;
	void *a, *b;
	int got;

	servers_up(2, NULL);
	a = must_open("chunk_size=16K");
	b = must_open(NULL);
	ck_assert_int_eq(put_obj(a, 1, 3, len), 0);
	ck_assert_int_eq(get_obj(b, 1, 3, len, &got), (int64_t)len);
	ck_assert_int_eq(got, 3);
	ck_assert_uint_eq(hct_be_stat(B, b, "round_trips"), 2);
	ck_assert_int_eq(put_obj(b, 2, 3, len), 0);
	ck_assert_int_eq(get_obj(a, 2, 3, len, &got), (int64_t)len);
	ck_assert_int_eq(got, 3);
	/* the host's shape from a, read by b into no more than the head */
	{
		uint8_t *src = obj_new(3, 5, len), buf[4096];
		struct op o = { .opcode = HC_BE_OP_PUT,
				.id = 3,
				.iovcnt = 2,
				.iov = { { src, 4096 }, { src + 4096, len - 4096 } } };
		run_ops(a, &o, 1);
		ck_assert_int_eq(o.result, 0);
		o = (struct op){ .opcode = HC_BE_OP_GET, .id = 3, .iovcnt = 1, .iov = { { buf, sizeof(buf) } } };
		run_ops(b, &o, 1);
		ck_assert_int_eq(o.result, (int64_t)len);
		ck_assert_int_eq(memcmp(buf, src, sizeof(buf)), 0);
		free(src);
	}
	ck_assert_uint_eq(hct_be_stat(B, b, "errors"), 0);
	B->close(a);
	B->close(b);
}
END_TEST

START_TEST(ttl_expires)
{
	void *inst;
	int got;

	servers_up(1, NULL);
	inst = must_open("ttl=1");
	ck_assert_int_eq(put_obj(inst, 1, 1, 5000), 0);
	ck_assert_int_eq(get_obj(inst, 1, 1, 5000, &got), 5000);
	usleep(2600 * 1000); /* memcached's clock ticks in whole seconds */
	ck_assert_int_eq(get_obj(inst, 1, 1, 5000, &got), -ENOENT);
	ck_assert_int_eq(op1(inst, HC_BE_OP_EXISTS, 1, NULL, 0), 0);
	B->close(inst);
}
END_TEST

/* Queued ops end at a cancel; every op completes once. */
START_TEST(cancel_queued)
{
	enum { N = 40 };
	struct hc_be_op ops[N];
	struct iovec iov = { obj_new(1, 1, 1 << 20), 1 << 20 };
	int64_t res[N];
	unsigned done = 0, canceled = 0;

	servers_up(1, "-m 128");
	{
		void *inst = must_open("workers=1,batch=1");
		ck_assert_int_eq(B->cancel(inst, 12345), -ENOENT);
		for (unsigned i = 0; i < N; i++) {
			ops[i] = (struct hc_be_op){ .opcode = HC_BE_OP_PUT, .iovcnt = 1, .iov = &iov, .user_data = i };
			oname(ops[i].name, i);
			res[i] = INT64_MIN;
		}
		ck_assert_int_eq(B->submit(inst, ops, N), N);
		for (unsigned i = N / 2; i < N; i++)
			ck_assert_int_eq(B->cancel(inst, i), 0);
		while (done < N) {
			struct hc_be_cqe c[8];
			int k = B->reap(inst, c, 8, 1000);
			ck_assert_int_gt(k, 0);
			for (int j = 0; j < k; j++) {
				ck_assert_int_eq(res[c[j].user_data], INT64_MIN);
				res[c[j].user_data] = c[j].result;
				canceled += c[j].result == -ECANCELED;
			}
			done += (unsigned)k;
		}
		for (unsigned i = 0; i < N / 2; i++)
			ck_assert_int_eq(res[i], 0);
		ck_assert_msg(canceled >= N / 4, "only %u of %u queued puts were cancelled", canceled, N / 2);
		/* reaped: no longer in flight */
		ck_assert_int_eq(B->cancel(inst, 0), -ENOENT);
		ck_assert_int_eq(B->cancel(inst, N - 1), -ENOENT);
		ck_assert_uint_eq(hct_be_stat(B, inst, "canceled"), canceled);
		B->close(inst);
	}
	free(iov.iov_base);
}
END_TEST

/* ---- a server SIGKILLed under a stream of puts and gets */

struct stream {
	void *inst;
	unsigned id0;
	_Atomic int stop;
	_Atomic int phase; /* 0 before the kill, 1 while dead, 2 after the restart */
	_Atomic unsigned ok[3], failed[3], stale[3], wrong;
	char why[200];
};

/* Whether buf is an older version of id (1..ver-1) than the one put last. */
static int older_version(const uint8_t *buf, size_t len, uint32_t id, uint32_t ver)
{
	for (uint32_t v = 1; v < ver; v++)
		if (obj_ver(buf, len, id, v) == (int)v)
			return 1;
	return 0;
}

static void *streamer(void *arg)
{
	struct stream *s = arg;
	const size_t len = 150 * 1024;
	uint8_t *buf = malloc(len + 64);

	for (unsigned k = 0; !s->stop; k++) {
		uint32_t id = s->id0 + k % 64, ver = k / 64 + 1;
		int phase = s->phase;
		uint8_t *src = obj_new(id, ver, len);
		struct op o[2] = {
			{ .opcode = HC_BE_OP_PUT, .id = id, .iov = { { src, len } }, .iovcnt = 1 },
		};
		run_ops(s->inst, o, 1);
		free(src);
		if (o[0].result != 0) {
			if (!s->phase)
				snprintf(s->why, sizeof(s->why), "put of object %u before the kill: %lld", id,
					 (long long)o[0].result);
			s->failed[atomic_load(&s->phase)]++; /* the phase it ended in: the kill may come mid-op */
			continue;
		}
		o[1] = (struct op){ .opcode = HC_BE_OP_GET, .id = id, .iov = { { buf, len } }, .iovcnt = 1 };
		run_ops(s->inst, &o[1], 1);
		if (o[1].result == (int64_t)len && obj_ver(buf, len, id, ver) == (int)ver) {
			s->ok[phase]++;
		} else if (o[1].result == (int64_t)len && older_version(buf, len, id, ver)) {
			/* a whole older version: a copy a moved key left behind
			 * (keys must never move: each worker would move them on its own) */
			s->stale[atomic_load(&s->phase)]++;
		} else if (o[1].result > 0) {
			s->wrong++;
			snprintf(s->why, sizeof(s->why), "object %u version %u: got %lld bytes that are not it", id,
				 ver, (long long)o[1].result);
		} else {
			if (!s->phase)
				snprintf(s->why, sizeof(s->why), "get of object %u before the kill: %lld", id,
					 (long long)o[1].result);
			s->failed[atomic_load(&s->phase)]++;
		}
	}
	free(buf);
	return NULL;
}

START_TEST(server_killed)
{
	static const char *const fast = "eject_after=1,eject_s=1,connect_timeout_ms=300,io_timeout_ms=500";
	struct stream s[2] = { 0 };
	pthread_t t[2];
	unsigned on_dead = 0, before[3] = { 0 };
	char e[256];
	void *inst;
	int got;

	servers_up(3, "-m 64");
	/* an instance for each stream and one for this thread: a reap takes
	 * whatever completed, so threads that check their own ops don't share */
	inst = must_open(fast);
	s[0].inst = must_open(fast);
	s[1].inst = must_open(fast);
	s[1].id0 = 500;
	/* 60 objects before, and where they live */
	for (uint32_t id = 1000; id < 1060; id++) {
		ck_assert_int_eq(put_obj(inst, id, 1, 20000), 0);
		before[home_of(id)]++;
	}
	ck_assert_msg(before[1] > 0, "no object on server 1: %u %u %u", before[0], before[1], before[2]);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, streamer, &s[i]);
	usleep(600 * 1000);
	s[0].phase = s[1].phase = 1;
	hct_mcd_kill(&mcd, 1, SIGKILL);
	/* the old objects: those of the live servers are read whole, the dead
	 * one's are misses */
	for (uint32_t id = 1000; id < 1060; id++) {
		int64_t r = get_obj(inst, id, 1, 20000, &got);
		ck_assert_msg(r == -ENOENT || (r == 20000 && got == 1), "object %u: %lld, version %d", id, (long long)r,
			      got);
		on_dead += r == -ENOENT;
	}
	ck_assert_uint_eq(on_dead, before[1]);
	usleep(1200 * 1000);
	ck_assert_msg(hct_mcd_restart(&mcd, 1, e, sizeof(e)) == 0, "%s", e);
	usleep(3000 * 1000); /* the ejection ends (whole seconds); the server is tried again */
	s[0].phase = s[1].phase = 2;
	usleep(1500 * 1000);
	s[0].stop = s[1].stop = 1;
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		fprintf(stderr, "server_killed: stream %d: ok %u %u %u, failed %u %u %u, older versions %u %u %u\n", i,
			s[i].ok[0], s[i].ok[1], s[i].ok[2], s[i].failed[0], s[i].failed[1], s[i].failed[2],
			s[i].stale[0], s[i].stale[1], s[i].stale[2]);
		ck_assert_msg(s[i].wrong == 0, "%s", s[i].why);
		ck_assert_msg(s[i].ok[0] > 0 && s[i].ok[1] > 0 && s[i].ok[2] > 0,
			      "stream %d: ok before %u, while dead %u, after %u (failed %u %u %u)", i, s[i].ok[0],
			      s[i].ok[1], s[i].ok[2], s[i].failed[0], s[i].failed[1], s[i].failed[2]);
		ck_assert_msg(s[i].failed[0] == 0, "stream %d: %s", i, s[i].why);
		ck_assert_msg(s[i].stale[0] + s[i].stale[1] + s[i].stale[2] == 0,
			      "stream %d: older versions read: %u before the kill, %u while dead, %u after", i,
			      s[i].stale[0], s[i].stale[1], s[i].stale[2]);
	}
	/* the restarted server is used again: new objects land on it */
	{
		memcached_st *mc = direct(1);
		unsigned on1 = 0;
		for (uint32_t id = 2000; id < 2060; id++) {
			/* each worker's connection finds out on its own, within eject_s */
			int64_t r;
			for (double until = hct_now() + 10;
			     (r = put_obj(inst, id, 1, 20000)) != 0 && hct_now() < until;)
				usleep(100 * 1000);
			ck_assert_int_eq(r, 0);
			on1 += has_item(mc, id, -1);
			ck_assert_int_eq(get_obj(inst, id, 1, 20000, &got), 20000);
			ck_assert_int_eq(got, 1);
		}
		memcached_free(mc);
		ck_assert_msg(on1 > 0, "no new object on the restarted server");
	}
	ck_assert_uint_gt(hct_be_stat(B, inst, "server_errors"), 0);
	B->close(s[0].inst);
	B->close(s[1].inst);
	B->close(inst);
}
END_TEST

/* A server that answers nothing (SIGSTOP): one timeout, then every worker
 * leaves it alone for eject_s, its objects misses; back after SIGCONT. */
START_TEST(server_hung)
{
	unsigned home[60], on1 = 0;
	void *inst;
	int got;

	servers_up(3, NULL);
	inst = must_open("workers=2,io_timeout_ms=300,eject_s=2");
	for (uint32_t id = 0; id < 60; id++) {
		ck_assert_int_eq(put_obj(inst, id, 1, 30000), 0);
		home[id] = (unsigned)home_of(id);
		on1 += home[id] == 1;
	}
	ck_assert_uint_gt(on1, 0);
	kill(mcd.pid[1], SIGSTOP);
	usleep(100 * 1000); /* every thread of it stopped, not just signalled */
	for (int round = 0; round < 3; round++) {
		struct op o[60];
		uint8_t *b = malloc(60 * 30000);
		for (uint32_t id = 0; id < 60; id++)
			o[id] = (struct op){ .opcode = HC_BE_OP_GET,
					     .id = id,
					     .iovcnt = 1,
					     .iov = { { b + id * 30000, 30000 } } };
		run_ops(inst, o, 60);
		for (uint32_t id = 0; id < 60; id++) {
			if (home[id] == 1) {
				ck_assert_int_eq(o[id].result, -ENOENT);
				continue;
			}
			ck_assert_msg(o[id].result == 30000, "object %u on live server %u: %lld", id, home[id],
				      (long long)o[id].result);
			ck_assert_int_eq(obj_ver(b + id * 30000, 30000, id, 1), 1);
		}
		free(b);
	}
	fprintf(stderr, "server_hung: hung %llu, skipped %llu, timeouts %llu\n",
		(unsigned long long)hct_be_stat(B, inst, "hung"), (unsigned long long)hct_be_stat(B, inst, "skipped"),
		(unsigned long long)hct_be_stat(B, inst, "timeouts"));
	/* a put there fails at once; elsewhere it works */
	for (uint32_t id = 0; id < 60; id++)
		ck_assert_int_eq(put_obj(inst, id, 2, 30000), home[id] == 1 ? -EHOSTDOWN : 0);
	/* each worker timed out at most once before it was left alone */
	ck_assert_uint_le(hct_be_stat(B, inst, "hung"), 2);
	ck_assert_uint_ge(hct_be_stat(B, inst, "skipped"), 3 * on1);
	kill(mcd.pid[1], SIGCONT);
	usleep(2500 * 1000);
	for (uint32_t id = 0; id < 60; id++) {
		ck_assert_int_eq(get_obj(inst, id, home[id] == 1 ? 1 : 2, 30000, &got), 30000);
		ck_assert_int_eq(got, home[id] == 1 ? 1 : 2);
	}
	B->close(inst);
}
END_TEST

/* SASL (memcached -S): the right credentials work, given or from a file;
 * wrong or missing ones are said at open. */
START_TEST(sasl)
{
	char dir[128], e[256], more[400];
	void *inst;
	int got;
	FILE *f;

	hct_mkdtemp(dir, sizeof(dir), "sasl");
	ck_assert_msg(hct_mcd_start_sasl(&mcd, dir, "hcuser", "hc-secret", e, sizeof(e)) == 0, "%s", e);
	inst = must_open("username=hcuser,password=hc-secret");
	ck_assert_int_eq(put_obj(inst, 1, 1, 70000), 0);
	ck_assert_int_eq(get_obj(inst, 1, 1, 70000, &got), 70000);
	ck_assert_int_eq(got, 1);
	B->close(inst);
	snprintf(more, sizeof(more), "username=hcuser,password_file=%s/pw", dir);
	f = fopen(strchr(more, '/') ? strchr(more, '/') : "", "w");
	ck_assert_ptr_nonnull(f);
	fputs("hc-secret\n", f);
	fclose(f);
	inst = must_open(more);
	ck_assert_int_eq(get_obj(inst, 1, 1, 70000, &got), 70000);
	B->close(inst);
	ck_assert_err(open_with(&inst, "username=hcuser,password=wrong"), EACCES);
	ck_assert_msg_has("SASL authentication failed on 127.0.0.1:");
	ck_assert_msg_has("check username= and password=");
	ck_assert_err(open_with(&inst, NULL), EACCES);
	ck_assert_msg_has("requires SASL authentication: give username= and password=");
	hct_mcd_stop(&mcd);
	hct_rmtree(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("memcached_backend");
	TCase *tc = tcase_create("memcached");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, bad_options);
	tcase_add_test(tc, small_items);
	tcase_add_test(tc, down_at_open);
	tcase_add_test(tc, evicted_chunks);
	tcase_add_test(tc, inconsistent_items);
	tcase_add_test(tc, same_name_twice);
	tcase_add_test(tc, other_chunk_size);
	tcase_add_test(tc, ttl_expires);
	tcase_add_test(tc, cancel_queued);
	tcase_add_test(tc, server_killed);
	tcase_add_test(tc, server_hung);
	tcase_add_test(tc, sasl);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
