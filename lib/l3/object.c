/* SPDX-License-Identifier: Apache-2.0 */
/* object.c - building and checking L3 objects (the format is in object.h). */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define XXH_INLINE_ALL /* inlined XXH3 runs 3-4x faster than the shared library's */
#include <xxhash.h>

#include <openssl/crypto.h>

#include "../../shmpool/layout.h"
#include "mac.h"
#include "object.h"

#define OFF_MAGIC    0
#define OFF_MAJOR    8
#define OFF_MINOR    10
#define OFF_HDRBYTES 12
#define OFF_FP       16
#define OFF_KEY      48
#define OFF_PRESENCE 80
#define OFF_FLAGS    84
#define OFF_PAYLOAD  88
#define OFF_SUM      96
#define OFF_DEPTH    104
#define OFF_NCOMP    108
#define OFF_WRITTEN  112
#define OFF_ENVBYTES 120
#define OFF_COMPS    128
#define COMP_BYTES   24
#define OFF_HDRSUM   (HC_OBJ_HEADER_BYTES - 8)

_Static_assert(OFF_COMPS + HC_MAX_COMPONENTS * COMP_BYTES <= HC_OBJ_OFF_NONCE, "the component table meets the MAC");
_Static_assert(HC_OBJ_OFF_NONCE + HC_MAC_NONCE_BYTES == HC_OBJ_OFF_TAG, "the nonce, then the tag");
_Static_assert(HC_OBJ_OFF_TAG + HC_MAC_TAG_BYTES <= OFF_HDRSUM, "the tag before the header checksum");

static void put16(uint8_t *b, unsigned off, uint16_t v)
{
	v = htole16(v);
	memcpy(b + off, &v, 2);
}
static void put32(uint8_t *b, unsigned off, uint32_t v)
{
	v = htole32(v);
	memcpy(b + off, &v, 4);
}
static void put64(uint8_t *b, unsigned off, uint64_t v)
{
	v = htole64(v);
	memcpy(b + off, &v, 8);
}
static uint16_t get16(const uint8_t *b, unsigned off)
{
	uint16_t v;
	memcpy(&v, b + off, 2);
	return le16toh(v);
}
static uint32_t get32(const uint8_t *b, unsigned off)
{
	uint32_t v;
	memcpy(&v, b + off, 4);
	return le32toh(v);
}
static uint64_t get64(const uint8_t *b, unsigned off)
{
	uint64_t v;
	memcpy(&v, b + off, 8);
	return le64toh(v);
}

int hc__obj_layout(const struct hc__geom *g, uint32_t presence, struct hc__obj_layout *out)
{
	uint32_t all = g->ncomp >= 32 ? UINT32_MAX : (UINT32_C(1) << g->ncomp) - 1;

	if (!presence || (presence & ~all))
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->presence = presence;
	for (unsigned c = 0; c < g->ncomp; c++) {
		uint64_t off = g->comps[c].offset, len = hc__obj_pad(g->comps[c].bytes);

		if (!(presence & (UINT32_C(1) << c)))
			continue;
		/* Components follow one another at 4096-byte boundaries, so
		 * neighbours present together merge into one run. */
		if (out->nrun && out->run[out->nrun - 1].env_off + out->run[out->nrun - 1].len == off)
			out->run[out->nrun - 1].len += len;
		else
			out->run[out->nrun++] = (typeof(out->run[0])){ off, len };
		out->payload_bytes += len;
	}
	return 0;
}

uint64_t hc__obj_sum_iov(const struct iovec *iov, unsigned n)
{
	XXH3_state_t st;

	/* Streaming over the runs gives the one-shot hash of their concatenation. */
	XXH3_64bits_reset(&st);
	for (unsigned i = 0; i < n; i++)
		XXH3_64bits_update(&st, iov[i].iov_base, iov[i].iov_len);
	return XXH3_64bits_digest(&st);
}

void hc__obj_header_build(void *hdr, const struct hc__geom *g, const uint8_t fp[32], const uint8_t key[32],
			  uint32_t depth, const struct hc__obj_layout *l, uint64_t sum)
{
	uint8_t *b = hdr;
	struct timespec ts;
	unsigned n = 0;
	uint64_t poff = 0;

	memset(b, 0, HC_OBJ_HEADER_BYTES);
	memcpy(b + OFF_MAGIC, HC_OBJ_MAGIC, sizeof(HC_OBJ_MAGIC));
	put16(b, OFF_MAJOR, HC_OBJ_MAJOR);
	put16(b, OFF_MINOR, HC_OBJ_MINOR);
	put32(b, OFF_HDRBYTES, HC_OBJ_HEADER_BYTES);
	memcpy(b + OFF_FP, fp, 32);
	memcpy(b + OFF_KEY, key, 32);
	put32(b, OFF_PRESENCE, l->presence);
	put32(b, OFF_FLAGS, 0);
	put64(b, OFF_PAYLOAD, l->payload_bytes);
	put64(b, OFF_SUM, sum);
	put32(b, OFF_DEPTH, depth);
	clock_gettime(CLOCK_REALTIME, &ts);
	put64(b, OFF_WRITTEN, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
	put64(b, OFF_ENVBYTES, g->envelope_bytes);
	for (unsigned c = 0; c < g->ncomp; c++) {
		if (!(l->presence & (UINT32_C(1) << c)))
			continue;
		put32(b, OFF_COMPS + n * COMP_BYTES, c);
		put64(b, OFF_COMPS + n * COMP_BYTES + 8, poff);
		put64(b, OFF_COMPS + n * COMP_BYTES + 16, g->comps[c].bytes);
		poff += hc__obj_pad(g->comps[c].bytes);
		n++;
	}
	put32(b, OFF_NCOMP, n);
	put64(b, OFF_HDRSUM, XXH3_64bits(b, OFF_HDRSUM));
}

static void hex8(const uint8_t *b, char out[17])
{
	for (unsigned i = 0; i < 8; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

int hc__obj_header_check(const void *hdr, const struct hc__geom *g, const uint8_t fp[32], const uint8_t key[32],
			 struct hc__obj_meta *m, char *why, size_t whylen)
{
	const uint8_t *b = hdr;
	struct hc__obj_layout l;
	uint32_t major, ncomp;
	char h1[17], h2[17];
	unsigned n = 0;
	uint64_t poff = 0;

	if (memcmp(b + OFF_MAGIC, HC_OBJ_MAGIC, sizeof(HC_OBJ_MAGIC)) != 0)
		goto bad_magic;
	major = get16(b, OFF_MAJOR);
	if (major != HC_OBJ_MAJOR) {
		snprintf(why, whylen, "object format %u.%u, this library reads %u.x", major, get16(b, OFF_MINOR),
			 HC_OBJ_MAJOR);
		return -EPROTO;
	}
	if (get64(b, OFF_HDRSUM) != XXH3_64bits(b, OFF_HDRSUM)) {
		snprintf(why, whylen, "header checksum mismatch");
		return -EBADMSG;
	}
	if (get32(b, OFF_HDRBYTES) != HC_OBJ_HEADER_BYTES) {
		snprintf(why, whylen, "header size %u, expected %u", get32(b, OFF_HDRBYTES), HC_OBJ_HEADER_BYTES);
		return -EBADMSG;
	}
	if (memcmp(b + OFF_FP, fp, 32) != 0) {
		hex8(b + OFF_FP, h1);
		hex8(fp, h2);
		snprintf(why, whylen, "fingerprint %s..., this pool's is %s...", h1, h2);
		return -EBADMSG;
	}
	if (memcmp(b + OFF_KEY, key, 32) != 0) {
		hex8(b + OFF_KEY, h1);
		snprintf(why, whylen, "the object holds key %s...", h1);
		return -EBADMSG;
	}
	if (get32(b, OFF_FLAGS) & ~HC_OBJ_FLAG_MAC) {
		snprintf(why, whylen, "unknown flags 0x%x", get32(b, OFF_FLAGS) & ~HC_OBJ_FLAG_MAC);
		return -EBADMSG;
	}
	m->flags = get32(b, OFF_FLAGS);
	m->minor = get16(b, OFF_MINOR);
	m->presence = get32(b, OFF_PRESENCE);
	m->payload_bytes = get64(b, OFF_PAYLOAD);
	m->sum = get64(b, OFF_SUM);
	m->depth = get32(b, OFF_DEPTH);
	m->written_ns = get64(b, OFF_WRITTEN);
	if (hc__obj_layout(g, m->presence, &l) < 0) {
		snprintf(why, whylen, "presence 0x%x names components this pool does not have", m->presence);
		return -EBADMSG;
	}
	if (l.payload_bytes != m->payload_bytes) {
		snprintf(why, whylen, "payload %llu bytes, the geometry gives %llu",
			 (unsigned long long)m->payload_bytes, (unsigned long long)l.payload_bytes);
		return -EBADMSG;
	}
	/* The table is redundant with the fingerprint; a mismatch means a bug
	 * or a forgery, so it is checked rather than trusted. */
	ncomp = get32(b, OFF_NCOMP);
	for (unsigned c = 0; c < g->ncomp; c++) {
		if (!(m->presence & (UINT32_C(1) << c)))
			continue;
		if (n >= ncomp || get32(b, OFF_COMPS + n * COMP_BYTES) != c ||
		    get64(b, OFF_COMPS + n * COMP_BYTES + 8) != poff ||
		    get64(b, OFF_COMPS + n * COMP_BYTES + 16) != g->comps[c].bytes) {
			snprintf(why, whylen, "component table entry %u does not match the pool's geometry", n);
			return -EBADMSG;
		}
		poff += hc__obj_pad(g->comps[c].bytes);
		n++;
	}
	if (n != ncomp) {
		snprintf(why, whylen, "component table has %u entries, presence gives %u", ncomp, n);
		return -EBADMSG;
	}
	return 0;
bad_magic:
	snprintf(why, whylen, "not a hicache object (bad magic)");
	return -EBADMSG;
}

/* The tag of a header (its tag taken as zeros) and its payload. */
static int obj_tag(const uint8_t *b, const struct hc__mac *mac, const struct iovec *payload, unsigned n,
		   uint8_t tag[HC_MAC_TAG_BYTES])
{
	static const uint8_t zero[HC_MAC_TAG_BYTES];
	struct iovec iov[3 + HC_MAX_COMPONENTS];

	if (n > HC_MAX_COMPONENTS)
		return -EINVAL;
	iov[0] = (struct iovec){ (void *)b, HC_OBJ_OFF_TAG };
	iov[1] = (struct iovec){ (void *)zero, sizeof(zero) };
	iov[2] = (struct iovec){ (void *)(b + HC_OBJ_OFF_TAG + HC_MAC_TAG_BYTES),
				 OFF_HDRSUM - HC_OBJ_OFF_TAG - HC_MAC_TAG_BYTES };
	memcpy(iov + 3, payload, n * sizeof(*payload));
	return hc__mac_tag(mac, b + HC_OBJ_OFF_NONCE, iov, 3 + n, tag);
}

int hc__obj_header_seal(void *hdr, const struct hc__mac *mac, const struct iovec *payload, unsigned n)
{
	uint8_t *b = hdr, tag[HC_MAC_TAG_BYTES];
	int r;

	put32(b, OFF_FLAGS, get32(b, OFF_FLAGS) | HC_OBJ_FLAG_MAC);
	if ((r = hc__mac_nonce(b + HC_OBJ_OFF_NONCE)) < 0 || (r = obj_tag(b, mac, payload, n, tag)) < 0)
		return r;
	memcpy(b + HC_OBJ_OFF_TAG, tag, sizeof(tag));
	put64(b, OFF_HDRSUM, XXH3_64bits(b, OFF_HDRSUM));
	return 0;
}

int hc__obj_mac_check(const void *hdr, const struct hc__mac *mac, const struct iovec *payload, unsigned n, char *why,
		      size_t whylen)
{
	const uint8_t *b = hdr;
	uint8_t tag[HC_MAC_TAG_BYTES];
	int r;

	if (!(get32(b, OFF_FLAGS) & HC_OBJ_FLAG_MAC)) {
		snprintf(why, whylen,
			 "no MAC, and this service asks for one (mac_key_file): written without a key, or stripped");
		return -EKEYREJECTED;
	}
	if ((r = obj_tag(b, mac, payload, n, tag)) < 0) {
		snprintf(why, whylen, "libcrypto failed computing its MAC");
		return r;
	}
	if (CRYPTO_memcmp(tag, b + HC_OBJ_OFF_TAG, sizeof(tag)) != 0) {
		snprintf(why, whylen, "MAC mismatch: forged, altered, or written under another key");
		return -EKEYREJECTED;
	}
	return 0;
}
