/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-mac.c - what the keyed MAC of L3 objects (mac_key_file;
 * lib/l3/mac.c) costs against the XXH3-64 payload checksum every object
 * has anyway, measured in the same run on the same buffer, per payload
 * size: GB/s of each and their ratio.  Besides the MAC hicache uses
 * (Poly1305 under a one-time key ChaCha20 derives per object, as stored:
 * hc__mac_tag), the candidates it was chosen from, through the same
 * OpenSSL EVP_MAC interface: GMAC (AES-256-GCM) and HMAC-SHA-256.
 *
 * A run hashes --mib MiB in payload-sized calls, one context per call as
 * the store makes one per object; each repetition runs XXH3 and the MAC
 * back to back, so that the ratio compares two runs of the same moment
 * (these VMs are shared: a neighbour's load moves both).  Printed: the
 * medians over --reps repetitions of each GB/s and of the ratio.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "../lib/l3/mac.h"
#include "../lib/l3/object.h"
#include "bench.h"

#define MAX_REPS 31

enum algo { XXH3, POLY1305, GMAC, HMAC, NALGO };
static const char *const algo_name[NALGO] = { "XXH3-64", "Poly1305 (ChaCha20 key)", "GMAC (AES-256-GCM)",
					      "HMAC-SHA-256" };

static const uint8_t key[32] = { 0x42, 1, 2, 3 };
static EVP_MAC *gmac, *hmac;
static struct hc__mac *poly;

/* One payload's tag by algorithm a: 0, or -1 if libcrypto failed. */
static int one(enum algo a, const uint8_t *buf, size_t len, uint64_t *sink)
{
	static const uint8_t iv[12] = { 9 };
	uint8_t nonce[HC_MAC_NONCE_BYTES] = { 0 }, tag[64];
	struct iovec v = { (void *)buf, len };
	OSSL_PARAM p[3];
	EVP_MAC_CTX *c;
	size_t n = 0;
	int ok;

	switch (a) {
	case XXH3:
		*sink += hc__obj_sum_iov(&v, 1);
		return 0;
	case POLY1305:
		memcpy(nonce, sink, sizeof(*sink)); /* a fresh one per object, as the store draws */
		if (hc__mac_tag(poly, nonce, &v, 1, tag) < 0)
			return -1;
		*sink += tag[0];
		return 0;
	case GMAC:
		p[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, (char *)"AES-256-GCM", 0);
		p[1] = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, (void *)iv, sizeof(iv));
		p[2] = OSSL_PARAM_construct_end();
		c = EVP_MAC_CTX_new(gmac);
		break;
	default:
		p[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
		p[1] = OSSL_PARAM_construct_end();
		c = EVP_MAC_CTX_new(hmac);
		break;
	}
	ok = c && EVP_MAC_init(c, key, sizeof(key), p) == 1 && EVP_MAC_update(c, buf, len) == 1 &&
	     EVP_MAC_final(c, tag, &n, sizeof(tag)) == 1;
	EVP_MAC_CTX_free(c);
	*sink += tag[0];
	return ok ? 0 : -1;
}

/* GB/s of algorithm a over total bytes in len-byte calls. */
static double rate(enum algo a, const uint8_t *buf, size_t len, uint64_t total)
{
	static uint64_t sink;
	uint64_t calls = total / len ? total / len : 1, t0 = bench_now_ns();

	for (uint64_t k = 0; k < calls; k++)
		if (one(a, buf, len, &sink) < 0) {
			fprintf(stderr, "bench-mac: %s failed in libcrypto\n", algo_name[a]);
			exit(1);
		}
	if (sink == 42)
		putchar(' '); /* keeps the results live */
	return (double)(calls * len) / (double)(bench_now_ns() - t0);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench-mac [--reps N (1..%d, default 7)] [--mib M (MiB hashed per run, default 64)]\n",
		MAX_REPS);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "reps", required_argument, NULL, 'r' },
					    { "mib", required_argument, NULL, 'm' },
					    { "help", no_argument, NULL, 'h' },
					    { NULL, 0, NULL, 0 } };
	static const size_t sizes[] = { 64u << 10, 1u << 20, 4u << 20 };
	static const int w[] = { -8, -24, 7, 8, 7 };
	unsigned reps = 7, mib = 64;
	uint8_t *buf;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		unsigned long v = 0;
		char *end = NULL;

		if (c == 'r' || c == 'm')
			v = strtoul(optarg, &end, 10);
		switch (c) {
		case 'r':
			if (*end || v < 1 || v > MAX_REPS) {
				fprintf(stderr, "bench-mac: --reps '%s' is not a number from 1 to %d\n", optarg,
					MAX_REPS);
				return 2;
			}
			reps = (unsigned)v;
			break;
		case 'm':
			if (*end || v < 1 || v > 65536) {
				fprintf(stderr, "bench-mac: --mib '%s' is not a number from 1 to 65536\n", optarg);
				return 2;
			}
			mib = (unsigned)v;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	gmac = EVP_MAC_fetch(NULL, "GMAC", NULL);
	hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	if (!gmac || !hmac || hc__mac_new(key, &poly) < 0) {
		fprintf(stderr, "bench-mac: libcrypto lacks GMAC, HMAC, ChaCha20 or Poly1305 (OpenSSL 3 has them)\n");
		return 1;
	}
	buf = aligned_alloc(4096, sizes[2]);
	if (!buf) {
		fprintf(stderr, "bench-mac: no memory\n");
		return 1;
	}
	for (size_t i = 0; i < sizes[2]; i++)
		buf[i] = (uint8_t)(i * 131 + 7);
	printf("bench-mac: a MAC over an L3 payload against its XXH3-64 checksum (GB/s and ratio: medians of %u pairs of runs of %u MiB)\n",
	       reps, mib);
	bench_rule(bench_table_width(5, w));
	bench_row(5, w, "payload", "algorithm", "GB/s", "XXH3-64", "ratio");
	bench_rule(bench_table_width(5, w));
	for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		const char *sz = sizes[s] >= (1u << 20) ? bench_fmt("%zu MiB", sizes[s] >> 20)
							: bench_fmt("%zu KiB", sizes[s] >> 10);
		for (int a = POLY1305; a < NALGO; a++) {
			double x[MAX_REPS], m[MAX_REPS], r[MAX_REPS];

			for (unsigned i = 0; i < reps; i++) { /* the peer right before, on the same buffer */
				x[i] = rate(XXH3, buf, sizes[s], (uint64_t)mib << 20);
				m[i] = rate((enum algo)a, buf, sizes[s], (uint64_t)mib << 20);
				r[i] = m[i] / x[i];
			}
			bench_row(5, w, sz, algo_name[a], bench_fmt("%.2f", bench_median(m, reps)),
				  bench_fmt("%.2f", bench_median(x, reps)), bench_fmt("%.2f", bench_median(r, reps)));
		}
	}
	bench_rule(bench_table_width(5, w));
	EVP_MAC_free(gmac);
	EVP_MAC_free(hmac);
	hc__mac_free(poly);
	free(buf);
	return 0;
}
