/* SPDX-License-Identifier: Apache-2.0 */
/* test_object.c - the L3 object header: built, then checked field by field;
 * its MAC: sealed, checked, and refused for each byte it covers. */
#include <stdlib.h>

#include "../lib/l3/mac.h"
#include "../lib/l3/object.h"
#include "hct.h"

static struct hc_pool *pool;
static const char *pname;
static uint8_t fp[32], key[32], hdr[4096];
static struct hc__obj_layout lay;

static void setup(void)
{
	struct hc_pool_info pi;

	pname = hct_name();
	pool = hct_create_attach(pname, 4, 100, 2);
	hc_pool_info(pool, &pi, sizeof(pi));
	memcpy(fp, pi.fingerprint, 32);
	for (int i = 0; i < 32; i++)
		key[i] = (uint8_t)(i * 7 + 1);
	ck_assert_int_eq(hc__obj_layout(&pool->g, 3, &lay), 0);
	hc__obj_header_build(hdr, &pool->g, fp, key, 5, &lay, 0x1234);
}

static void teardown(void)
{
	hc_pool_detach(pool);
	hc_pool_destroy(pname, NULL, HC_DESTROY_FORCE);
}

static int check(char *why, size_t len)
{
	struct hc__obj_meta m;

	return hc__obj_header_check(hdr, &pool->g, fp, key, &m, why, len);
}

/* Rewrite the header checksum after a deliberate edit, as a forger would. */
#define XXH_INLINE_ALL
#include <xxhash.h>
static void reseal(void)
{
	uint64_t s = XXH3_64bits(hdr, 4088);
	memcpy(hdr + 4088, &s, 8);
}

START_TEST(layout_runs)
{
	struct hc__obj_layout l;

	/* kv (16 KiB) and state (2 KiB, padded to 4 KiB) sit next to each other: one run */
	ck_assert_int_eq(lay.nrun, 1);
	ck_assert_uint_eq(lay.payload_bytes, 16384 + 4096);
	ck_assert_int_eq(hc__obj_layout(&pool->g, 2, &l), 0);
	ck_assert_int_eq(l.nrun, 1);
	ck_assert_uint_eq(l.run[0].env_off, 16384);
	ck_assert_uint_eq(l.run[0].len, 4096);
	ck_assert_int_eq(hc__obj_layout(&pool->g, 0, &l), -EINVAL);
	ck_assert_int_eq(hc__obj_layout(&pool->g, 4, &l), -EINVAL);
}
END_TEST

START_TEST(roundtrip)
{
	struct hc__obj_meta m;
	char why[160] = "";

	ck_assert_int_eq(hc__obj_header_check(hdr, &pool->g, fp, key, &m, why, sizeof(why)), 0);
	ck_assert_uint_eq(m.presence, 3);
	ck_assert_uint_eq(m.depth, 5);
	ck_assert_uint_eq(m.sum, 0x1234);
	ck_assert_uint_eq(m.payload_bytes, lay.payload_bytes);
	ck_assert_uint_eq(m.minor, HC_OBJ_MINOR);
	ck_assert_uint_gt(m.written_ns, 0);
	/* byte order: little-endian at the documented offsets */
	ck_assert_int_eq(memcmp(hdr, "HCOBJ\r\n\0", 8), 0);
	ck_assert_int_eq(hdr[12], 0x00);
	ck_assert_int_eq(hdr[13], 0x10); /* 4096 */
	ck_assert_int_eq(hdr[80], 3);
	ck_assert_int_eq(hdr[96], 0x34);
	ck_assert_int_eq(hdr[97], 0x12);
}
END_TEST

START_TEST(every_bad_field)
{
	char why[160];
	static const struct {
		unsigned off;
		uint8_t x;
		int reseal;
		int err;
		const char *needle;
	} cases[] = {
		{ 0, 0x01, 0, -EBADMSG, "bad magic" },
		{ 8, 0x03, 0, -EPROTO, "object format 2.1" },   /* a newer major */
		{ 200, 0x01, 0, -EBADMSG, "header checksum" },  /* any byte */
		{ 4090, 0x01, 0, -EBADMSG, "header checksum" }, /* the checksum itself */
		{ 13, 0x20, 1, -EBADMSG, "header size" },
		{ 16, 0x01, 1, -EBADMSG, "fingerprint" },
		{ 50, 0x01, 1, -EBADMSG, "holds key" },
		{ 84, 0x02, 1, -EBADMSG, "unknown flags 0x2" }, /* bit 0 is the MAC */
		{ 87, 0x80, 1, -EBADMSG, "unknown flags 0x80000000" },
		{ 80, 0x04, 1, -EBADMSG, "presence 0x7" },
		{ 89, 0x10, 1, -EBADMSG, "the geometry gives" },
		{ 108, 0x01, 1, -EBADMSG, "component table" },
		{ 144, 0x01, 1, -EBADMSG, "component table" },
	};

	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t save[4096];
		int r;
		memcpy(save, hdr, sizeof(hdr));
		hdr[cases[i].off] ^= cases[i].x;
		if (cases[i].reseal)
			reseal();
		why[0] = '\0';
		r = check(why, sizeof(why));
		ck_assert_msg(r == cases[i].err && strstr(why, cases[i].needle),
			      "case %u (byte %u): %d '%s', want %d '%s'", i, cases[i].off, r, why, cases[i].err,
			      cases[i].needle);
		memcpy(hdr, save, sizeof(hdr));
	}
	/* a newer minor is read */
	hdr[10] = 7;
	reseal();
	ck_assert_int_eq(check(why, sizeof(why)), 0);
}
END_TEST

START_TEST(sum_streams)
{
	uint8_t *b = malloc(100000);
	struct iovec one = { b, 100000 }, three[3] = { { b, 1 }, { b + 1, 65535 }, { b + 65536, 100000 - 65536 } };

	for (int i = 0; i < 100000; i++)
		b[i] = (uint8_t)(i * 17);
	uint64_t before = hc__obj_sum_iov(&one, 1);
	ck_assert_uint_eq(before, hc__obj_sum_iov(three, 3));
	ck_assert_uint_eq(before, XXH3_64bits(b, 100000));
	b[99999] ^= 1; /* one bit of the last byte */
	ck_assert_uint_ne(hc__obj_sum_iov(three, 3), before);
	free(b);
}
END_TEST

/* RFC 8439, 2.6.2: the one-time key ChaCha20 gives for key 80..9f and
 * nonce 00000000 0001020304050607 (counter 0).  An empty message's tag is
 * the key's second half, s. */
START_TEST(mac_derivation)
{
	static const uint8_t s_half[16] = { 0xa8, 0x33, 0xb6, 0x37, 0xe3, 0xfd, 0x0d, 0xa5,
					    0x08, 0xdb, 0xb8, 0xe2, 0xfd, 0xd1, 0xa6, 0x46 };
	uint8_t k[32], nonce[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7 }, tag[16];
	struct hc__mac *m;

	for (int i = 0; i < 32; i++)
		k[i] = (uint8_t)(0x80 + i);
	ck_assert_int_eq(hc__mac_new(k, &m), 0);
	ck_assert_int_eq(hc__mac_tag(m, nonce, NULL, 0, tag), 0);
	ck_assert_int_eq(memcmp(tag, s_half, 16), 0);
	hc__mac_free(m);
}
END_TEST

START_TEST(mac_seal)
{
	uint8_t k1[32] = { 1 }, k2[32] = { 2 }, *pay = malloc(lay.payload_bytes), save[4096];
	struct iovec one = { pay, lay.payload_bytes },
		     two[2] = { { pay, 4096 }, { pay + 4096, lay.payload_bytes - 4096 } };
	struct hc__mac *m1, *m2;
	struct hc__obj_meta m;
	char why[160] = "";
	static const unsigned covered[] = { 8, 16, 48, 80, 96, 104, 112, 128, 4000, 4048, 4063, 4064, 4079, 4080 };

	ck_assert_ptr_nonnull(pay);
	for (uint64_t i = 0; i < lay.payload_bytes; i++)
		pay[i] = (uint8_t)(i * 13);
	ck_assert_int_eq(hc__mac_new(k1, &m1), 0);
	ck_assert_int_eq(hc__mac_new(k2, &m2), 0);
	/* not sealed: a keyed reader calls it a downgrade */
	ck_assert_int_eq(hc__obj_mac_check(hdr, m1, &one, 1, why, sizeof(why)), -EKEYREJECTED);
	ck_assert_ptr_nonnull(strstr(why, "no MAC"));
	ck_assert_int_eq(hc__obj_header_seal(hdr, m1, two, 2), 0);
	ck_assert_int_eq(hc__obj_header_check(hdr, &pool->g, fp, key, &m, why, sizeof(why)), 0);
	ck_assert_uint_eq(m.flags, HC_OBJ_FLAG_MAC);
	/* the payload as one run or two: the same tag */
	ck_assert_int_eq(hc__obj_mac_check(hdr, m1, &one, 1, why, sizeof(why)), 0);
	ck_assert_int_eq(hc__obj_mac_check(hdr, m1, two, 2, why, sizeof(why)), 0);
	ck_assert_int_eq(hc__obj_mac_check(hdr, m2, &one, 1, why, sizeof(why)), -EKEYREJECTED);
	ck_assert_ptr_nonnull(strstr(why, "MAC mismatch"));
	/* every header byte but the checksum is covered, the nonce and tag too */
	for (unsigned i = 0; i < sizeof(covered) / sizeof(covered[0]); i++) {
		memcpy(save, hdr, sizeof(save));
		hdr[covered[i]] ^= 0x10;
		reseal();
		ck_assert_msg(hc__obj_mac_check(hdr, m1, &one, 1, why, sizeof(why)) == -EKEYREJECTED, "byte %u",
			      covered[i]);
		memcpy(hdr, save, sizeof(save));
	}
	pay[lay.payload_bytes - 1] ^= 1;
	ck_assert_int_eq(hc__obj_mac_check(hdr, m1, &one, 1, why, sizeof(why)), -EKEYREJECTED);
	hc__mac_free(m1);
	hc__mac_free(m2);
	free(pay);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("object");
	TCase *tc = tcase_create("header");

	tcase_set_timeout(tc, 10);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, layout_runs);
	tcase_add_test(tc, roundtrip);
	tcase_add_test(tc, every_bad_field);
	tcase_add_test(tc, sum_streams);
	tcase_add_test(tc, mac_derivation);
	tcase_add_test(tc, mac_seal);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
