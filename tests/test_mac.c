/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mac.c - the keyed MAC of L3 objects (mac_key_file) through the
 * library's store over the real file backend, and through a service: round
 * trips; objects rewritten on disk with good XXH3 checksums (a forged
 * payload, another key's object swapped in, a replayed depth), another
 * service key and an object without a MAC are misses, counted and logged;
 * without the option nothing changes, and MAC'd objects are read; and
 * every bad key file is refused with its message.
 */
#include <endian.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <hicache/service.h>

#include "hct.h"

/* The object format's offsets (lib/l3/object.h), as a forger knows them. */
#define HDR      4096
#define O_MINOR  10
#define O_KEY    48
#define O_FLAGS  84
#define O_SUM    96
#define O_DEPTH  104
#define O_NONCE  4048
#define O_HDRSUM 4088

#define KEY1 "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
#define KEY2 "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

static const char *pool_name;
static hc_pool *pool;
static char kdir[64], key1[128], key2[128];

static void write_file(const char *path, const char *text, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
}

static void setup(void)
{
	hct_l3_setup();
	hct_mkdtemp(kdir, sizeof(kdir), "mac");
	snprintf(key1, sizeof(key1), "%s/key1", kdir);
	snprintf(key2, sizeof(key2), "%s/key2", kdir);
	write_file(key1, KEY1, strlen(KEY1), 0600);
	write_file(key2, KEY2, strlen(KEY2), 0400);
	pool_name = hct_name();
	pool = hct_create_attach(pool_name, 64, 100, 8);
}

static void teardown(void)
{
	hc_pool_detach(pool);
	hc_pool_destroy(pool_name, NULL, HC_DESTROY_FORCE);
	hct_l3_teardown();
	hct_rmtree(kdir);
}

/* A store over the test's file backend, keyed by key_file (NULL: none). */
static hc_store *open_store(const char *key_file)
{
	struct hc_store_opts so = { .size = sizeof(so), .retries = -1, .mac_key_file = key_file };
	hc_store *s = NULL;

	ck_assert_msg(hc_store_open(pool, hct_l3_spec, &so, &s) == 0, "open: %s", hc_last_error());
	return s;
}

/* Store n keys' pages, filled by key, then evict them: L3 has them only. */
static void put_n(hc_store *s, const hc_key_t *keys, unsigned n)
{
	hc_page_t pg[8];
	int st[8];

	ck_assert_uint_le(n, 8);
	hct_store_by_key(pool, keys, n, 0, pg);
	ck_assert_int_eq(hc_store_put(s, pg, n, st), (int)n);
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(hc_evict_key(pool, keys[i]), 1);
}

/* Get one key: its status; *right says whether a hit's bytes are key's. */
static int get_k(hc_store *s, const hc_key_t key, int *right)
{
	struct hc_reserve_req rq = { .size = sizeof(rq), .keys = (const hc_key_t *)key, .nkeys = 1 };
	hc_page_t pg;
	uint8_t skip;
	uint32_t pres;
	int st;

	ck_assert_int_eq(hc_reserve(pool, &rq, &pg, &skip), 1);
	hc_store_get(s, &pg, 1, &st);
	if (st == 0) {
		*right = hct_key_bytes(pool, pg, key, 0) == 0;
		ck_assert_ok(hc_page_presence(pool, pg, &pres));
		ck_assert_int_eq(hc_page_commit(pool, pg, hc_page_needed(pool, pres)), 1);
		ck_assert_int_eq(hc_evict_key(pool, key), 1);
	} else {
		ck_assert_int_eq(hc_page_abort(pool, &pg, 1), 1);
	}
	return st;
}

/* Get one key: its status; a hit must hold the key's bytes. */
static int get1(hc_store *s, const hc_key_t key)
{
	int right = 1, st = get_k(s, key, &right);

	ck_assert_msg(right, "a hit with the wrong bytes");
	return st;
}

/* Where the file backend keeps key's object: <dir>/<fp>/<key[0]>/<key>. */
static void obj_path(char *out, size_t len, const hc_key_t key)
{
	struct hc_pool_info pi;
	char fp[65], k[65];

	ck_assert_ok(hc_pool_info(pool, &pi, sizeof(pi)));
	for (int i = 0; i < 32; i++) {
		snprintf(fp + 2 * i, 3, "%02x", pi.fingerprint[i]);
		snprintf(k + 2 * i, 3, "%02x", key[i]);
	}
	snprintf(out, len, "%s/%s/%.2s/%s", hct_l3_dir, fp, k, k);
}

static uint8_t *read_obj(const hc_key_t key, size_t *len)
{
	char path[512];
	struct stat sb;
	uint8_t *b;
	int fd;

	obj_path(path, sizeof(path), key);
	fd = open(path, O_RDONLY);
	ck_assert_msg(fd >= 0, "%s: %m", path);
	ck_assert_int_eq(fstat(fd, &sb), 0);
	b = malloc((size_t)sb.st_size);
	ck_assert_int_eq(read(fd, b, (size_t)sb.st_size), sb.st_size);
	close(fd);
	*len = (size_t)sb.st_size;
	return b;
}

/* Write an object back over key's, its XXH3 checksums made good again:
 * what a forger in L3 can do without the key. */
static void write_obj(const hc_key_t key, uint8_t *b, size_t len)
{
	char path[512];
	uint64_t v;
	int fd;

	v = htole64(XXH3_64bits(b + HDR, len - HDR));
	memcpy(b + O_SUM, &v, 8);
	v = htole64(XXH3_64bits(b, O_HDRSUM));
	memcpy(b + O_HDRSUM, &v, 8);
	obj_path(path, sizeof(path), key);
	fd = open(path, O_WRONLY | O_TRUNC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, b, len), (ssize_t)len);
	close(fd);
}

static uint32_t flags_of(const hc_key_t key)
{
	size_t len;
	uint8_t *b = read_obj(key, &len);
	uint32_t f;

	memcpy(&f, b + O_FLAGS, 4);
	free(b);
	return le32toh(f);
}

/* The store's log, kept for the test to read. */
static char logged[4096];

static void keep_log(int level, const char *msg, void *arg)
{
	size_t n = strlen(logged);

	(void)level;
	(void)arg;
	snprintf(logged + n, sizeof(logged) - n, "%s\n", msg);
}

START_TEST(roundtrip)
{
	hc_store *s = open_store(key1);
	hc_key_t k[3];
	size_t len;
	uint8_t *a, *b;
	uint16_t minor;

	hct_keys(k, 3, 1);
	put_n(s, k, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(get1(s, k[i]), 0);
	ck_assert_uint_eq(hct_store_stat(s, "lib_hits"), 3);
	ck_assert_uint_eq(hct_store_stat(s, "lib_mac_rejected"), 0);
	/* flagged, minor 1, and each with a nonce of its own */
	ck_assert_uint_eq(flags_of(k[0]), 1);
	a = read_obj(k[0], &len);
	b = read_obj(k[1], &len);
	memcpy(&minor, a + O_MINOR, 2);
	ck_assert_uint_eq(le16toh(minor), 1);
	ck_assert(memcmp(a + O_NONCE, b + O_NONCE, 16) != 0);
	free(a);
	free(b);
	ck_assert_ok(hc_store_close(s));
}
END_TEST

/* One payload byte changed, its checksums made good: only the MAC sees it. */
START_TEST(forged_payload)
{
	hc_store *s = open_store(key1), *plain;
	hc_key_t k[2];
	size_t len;
	uint8_t *b;
	int right = 1;

	hct_keys(k, 2, 2);
	put_n(s, k, 2);
	b = read_obj(k[0], &len);
	b[HDR + 100] ^= 0x40;
	write_obj(k[0], b, len);
	free(b);
	logged[0] = '\0';
	hc_set_log(keep_log, NULL);
	ck_assert_int_eq(get1(s, k[0]), -EKEYREJECTED);
	hc_set_log(NULL, NULL);
	ck_assert_int_eq(get1(s, k[1]), 0);
	ck_assert_uint_eq(hct_store_stat(s, "lib_mac_rejected"), 1);
	ck_assert_uint_eq(hct_store_stat(s, "lib_corrupt"), 0);
	ck_assert_uint_eq(hct_store_stat(s, "lib_hits"), 1);
	ck_assert_msg(strstr(logged, "MAC mismatch") && strstr(logged, "lib_mac_rejected"), "log: %s", logged);
	ck_assert_ok(hc_store_close(s));
	/* Without a key the forgery passes: XXH3 alone stops only accidents. */
	plain = open_store(NULL);
	ck_assert_int_eq(get_k(plain, k[0], &right), 0);
	ck_assert(!right);
	ck_assert_ok(hc_store_close(plain));
}
END_TEST

/* Object A's file over B's, its key field made B's: a swap. */
START_TEST(swapped)
{
	hc_store *s = open_store(key1);
	hc_key_t k[2];
	size_t la, lb;
	uint8_t *a, *b;

	hct_keys(k, 2, 3);
	put_n(s, k, 2);
	a = read_obj(k[0], &la);
	b = read_obj(k[1], &lb);
	ck_assert_uint_eq(la, lb);
	memcpy(a + O_KEY, b + O_KEY, 32);
	write_obj(k[1], a, la);
	free(a);
	free(b);
	ck_assert_int_eq(get1(s, k[1]), -EKEYREJECTED);
	ck_assert_int_eq(get1(s, k[0]), 0);
	ck_assert_uint_eq(hct_store_stat(s, "lib_mac_rejected"), 1);
	ck_assert_ok(hc_store_close(s));
}
END_TEST

/* The same object claiming another depth in its chain. */
START_TEST(replayed_depth)
{
	hc_store *s = open_store(key1);
	hc_key_t k[1];
	size_t len;
	uint8_t *b;

	hct_keys(k, 1, 4);
	put_n(s, k, 1);
	b = read_obj(k[0], &len);
	b[O_DEPTH] ^= 1;
	write_obj(k[0], b, len);
	free(b);
	ck_assert_int_eq(get1(s, k[0]), -EKEYREJECTED);
	ck_assert_uint_eq(hct_store_stat(s, "lib_mac_rejected"), 1);
	ck_assert_ok(hc_store_close(s));
}
END_TEST

START_TEST(other_key)
{
	hc_store *s1 = open_store(key1), *s2;
	hc_key_t k[1];

	hct_keys(k, 1, 5);
	put_n(s1, k, 1);
	ck_assert_ok(hc_store_close(s1));
	s2 = open_store(key2);
	ck_assert_int_eq(get1(s2, k[0]), -EKEYREJECTED);
	ck_assert_uint_eq(hct_store_stat(s2, "lib_mac_rejected"), 1);
	ck_assert_ok(hc_store_close(s2));
	s1 = open_store(key1);
	ck_assert_int_eq(get1(s1, k[0]), 0);
	ck_assert_ok(hc_store_close(s1));
}
END_TEST

/* Written without a MAC, or stripped of it: a keyed reader refuses it. */
START_TEST(downgrade)
{
	hc_store *plain = open_store(NULL), *s;
	hc_key_t k[2];
	size_t len;
	uint8_t *b;

	hct_keys(k, 2, 6);
	put_n(plain, k, 1);
	ck_assert_uint_eq(flags_of(k[0]), 0);
	ck_assert_ok(hc_store_close(plain));
	s = open_store(key1);
	logged[0] = '\0';
	hc_set_log(keep_log, NULL);
	ck_assert_int_eq(get1(s, k[0]), -EKEYREJECTED);
	hc_set_log(NULL, NULL);
	ck_assert_msg(strstr(logged, "no MAC"), "log: %s", logged);
	/* a MAC'd object with its flag cleared */
	put_n(s, k + 1, 1);
	b = read_obj(k[1], &len);
	b[O_FLAGS] = 0;
	write_obj(k[1], b, len);
	free(b);
	ck_assert_int_eq(get1(s, k[1]), -EKEYREJECTED);
	ck_assert_uint_eq(hct_store_stat(s, "lib_mac_rejected"), 2);
	ck_assert_ok(hc_store_close(s));
}
END_TEST

/* Without the option: no MAC written, and MAC'd objects read on their checksums. */
START_TEST(without_option)
{
	hc_store *plain = open_store(NULL), *s;
	hc_key_t k[2];
	size_t len;
	uint8_t *b;

	hct_keys(k, 2, 7);
	put_n(plain, k, 1);
	ck_assert_ok(hc_store_close(plain));
	s = open_store(key1);
	put_n(s, k + 1, 1);
	ck_assert_ok(hc_store_close(s));
	plain = open_store(NULL);
	ck_assert_uint_eq(flags_of(k[0]), 0);
	ck_assert_uint_eq(flags_of(k[1]), 1);
	ck_assert_int_eq(get1(plain, k[0]), 0);
	ck_assert_int_eq(get1(plain, k[1]), 0);
	ck_assert_uint_eq(hct_store_stat(plain, "lib_hits"), 2);
	ck_assert_uint_eq(hct_store_stat(plain, "lib_mac_rejected"), 0);
	/* and their XXH3 checks still apply: a flipped byte is corrupt */
	b = read_obj(k[1], &len);
	b[HDR + 7] ^= 1;
	{
		char path[512];
		int fd;
		obj_path(path, sizeof(path), k[1]);
		fd = open(path, O_WRONLY);
		ck_assert_int_eq(pwrite(fd, b + HDR + 7, 1, HDR + 7), 1);
		close(fd);
	}
	free(b);
	ck_assert_int_eq(get1(plain, k[1]), -EBADMSG);
	ck_assert_uint_eq(hct_store_stat(plain, "lib_corrupt"), 1);
	ck_assert_ok(hc_store_close(plain));
}
END_TEST

/* hc_store_open with key file path refuses it, its message holding each of want. */
static void refused(const char *path, int err, const char *want1, const char *want2)
{
	struct hc_store_opts so = { .size = sizeof(so), .mac_key_file = path };
	hc_store *s = NULL;
	int r = hc_store_open(pool, hct_l3_spec, &so, &s);

	ck_assert_msg(r == -err, "%s: %d (%s)", path, r, hc_last_error());
	ck_assert_ptr_null(s);
	ck_assert_msg(strstr(hc_last_error(), path), "no path: %s", hc_last_error());
	ck_assert_msg(strstr(hc_last_error(), want1), "no '%s': %s", want1, hc_last_error());
	ck_assert_msg(!want2 || strstr(hc_last_error(), want2), "no '%s': %s", want2, hc_last_error());
}

START_TEST(key_file_refused)
{
	char p[160];

	snprintf(p, sizeof(p), "%s/absent", kdir);
	refused(p, ENOENT, "No such file", "openssl rand -hex 32");
	refused(kdir, EINVAL, "is a directory, not a regular file", NULL);
	snprintf(p, sizeof(p), "%s/fifo", kdir);
	ck_assert_int_eq(mkfifo(p, 0600), 0);
	refused(p, EINVAL, "is a FIFO, not a regular file", NULL);
	snprintf(p, sizeof(p), "%s/group", kdir);
	write_file(p, KEY1, strlen(KEY1), 0640);
	refused(p, EPERM, "mode 0640: group or others may read it", "chmod 600");
	snprintf(p, sizeof(p), "%s/otherw", kdir);
	write_file(p, KEY1, strlen(KEY1), 0602);
	refused(p, EPERM, "mode 0602: group or others may write", "chmod 600");
	snprintf(p, sizeof(p), "%s/short", kdir);
	write_file(p, KEY1, 40, 0600);
	refused(p, EINVAL, "holds 40 bytes: it must hold 64 hex digits", NULL);
	snprintf(p, sizeof(p), "%s/raw", kdir);
	write_file(p, "0123456789abcdef0123456789abcdef", 32, 0600); /* 32 raw bytes are not the format */
	refused(p, EINVAL, "holds 32 bytes", NULL);
	snprintf(p, sizeof(p), "%s/nothex", kdir);
	write_file(p, "000102030405060708090a0b0c0d0e0f1011121314151617181920212223242g\n", 65, 0600);
	refused(p, EINVAL, "byte 63 is 0x67, not a hex digit", NULL);
	snprintf(p, sizeof(p), "%s/tail", kdir);
	write_file(p, KEY2 "x", 65, 0600);
	refused(p, EINVAL, "byte 64 is 0x78, not a newline", NULL);
	/* not ours: as root, a file given away; else one of root's */
	if (geteuid() == 0) {
		snprintf(p, sizeof(p), "%s/theirs", kdir);
		write_file(p, KEY1, strlen(KEY1), 0600);
		ck_assert_int_eq(chown(p, 65534, 65534), 0);
		refused(p, EPERM, "owned by uid 65534, not by this service's uid 0", "chown 0");
	} else {
		refused("/etc/passwd", EPERM, "owned by uid 0, not by this service's uid", "chown");
	}
}
END_TEST

/* Through a service: the option, a forged object cutting a prefetch short
 * (l3_prefetch_forged), and a bad key file refusing the start. */
START_TEST(service)
{
	struct hc_service_opts o = { .size = sizeof(o),
				     .backend = hct_l3_spec,
				     .write_policy = HC_WRITE_NONE,
				     .mac_key_file = key1 };
	hc_service *svc = hct_service_start(pool_name, &o), *bad = NULL;
	struct hc_prefetch_req pr = { .size = sizeof(pr), .nkeys = 4, .policy = HC_PREFETCH_WAIT_COMPLETE };
	hc_key_t k[4];
	hc_page_t pg[4];
	hc_req *rq;
	size_t len;
	uint8_t *b;
	char p[160];

	hct_keys(k, 4, 8);
	hct_store_by_key(pool, k, 4, 0, pg);
	ck_assert_ok(hc_req_backup(pool, pg, 4, &rq));
	ck_assert_int_eq(hc_req_wait(rq, 10000), 4);
	ck_assert_ok(hc_req_free(rq));
	ck_assert_uint_eq(flags_of(k[2]), 1);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(hc_evict_key(pool, k[i]), 1);
	b = read_obj(k[2], &len);
	b[HDR] ^= 0x80;
	write_obj(k[2], b, len);
	free(b);
	pr.keys = k;
	ck_assert_ok(hc_req_prefetch(pool, &pr, &rq));
	ck_assert_int_eq(hc_req_prefetch_take(rq, pg, NULL), 2); /* the prefix ends at the forgery */
	ck_assert_ok(hc_req_free(rq));
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(hct_key_bytes(pool, pg[i], k[i], 0), 0);
		ck_assert_ok(hc_page_unpin(pool, pg[i]));
	}
	ck_assert_uint_eq(hct_counter(pool, HC_CTR_l3_prefetch_forged), 1);
	ck_assert_uint_eq(hct_counter(pool, HC_CTR_l3_prefetch_corrupt), 0);
	ck_assert_ok(hc_service_stop(svc));
	/* a key file others may read: the service does not start, and says why */
	snprintf(p, sizeof(p), "%s/open", kdir);
	write_file(p, KEY1, strlen(KEY1), 0644);
	o.mac_key_file = p;
	ck_assert_int_eq(hc_service_start(pool_name, &o, &bad), -EPERM);
	ck_assert_ptr_null(bad);
	ck_assert_msg(strstr(hc_last_error(), "mode 0644") && strstr(hc_last_error(), p), "%s", hc_last_error());
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("mac");
	TCase *tc = tcase_create("mac");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, roundtrip);
	tcase_add_test(tc, forged_payload);
	tcase_add_test(tc, swapped);
	tcase_add_test(tc, replayed_depth);
	tcase_add_test(tc, other_key);
	tcase_add_test(tc, downgrade);
	tcase_add_test(tc, without_option);
	tcase_add_test(tc, key_file_refused);
	tcase_add_test(tc, service);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return hct_run(suite());
}
