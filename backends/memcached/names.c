/* SPDX-License-Identifier: Apache-2.0 */
/*
 * names.c - how an object becomes memcached items.
 *
 * An object of L bytes named N (fingerprint, then key) is
 *
 *   PREFIX + hex(N)            its manifest: 128 bytes (below), then the
 *                              object's first H bytes (its head)
 *   PREFIX + hex(N) + ".i"     chunk i, 0 <= i < ceil((L - H) / C): object
 *                              bytes [H + i*C, min(H + (i+1)*C, L)), as
 *                              they are
 *
 * where C is the chunk size.  H is the length of the put's first iovec when
 * that is short (up to 64 KiB) and more follow: the host's header block.
 * So every chunk lies within one iovec and is set straight from the
 * envelope; only the head is copied, behind the manifest.  A chunk item's 32-bit flags are its tag: a
 * hash of the version's nonce and i.  The nonce is a hash of N, L and the
 * object's first and last 4 KiB, so two nodes putting the same bytes write
 * interchangeable chunks, and chunks of different versions (a replace, a
 * put racing another) do not pass for each other.  A reader takes a chunk
 * only if its tag and length are what the manifest says; one missing or
 * inconsistent chunk (memcached evicts items one by one) makes the object a
 * miss.  The host still checks every object's bytes (its header and
 * checksum): the tags make an inconsistent object a miss early, they are
 * not what keeps wrong bytes from a rank.
 *
 * Placement: every item of an object goes to one server, chosen by ketama
 * on the manifest's key.  The key hash is libmemcached's MD5 over the key up
 * to the end of the hex name, so a chunk's ".i" does not move it; a plain
 * multi-get of many objects then reaches each server once, in parallel, and
 * a dead server takes only its own objects with it.
 */
#include <endian.h>
#include <errno.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "mc.h"

static const char hexd[] = "0123456789abcdef";

size_t hc__mc_key(const struct hc_mc *be, const uint8_t name[HC_BE_NAME_BYTES], int chunk, char *out)
{
	size_t plen = strlen(be->o.prefix), n;

	memcpy(out, be->o.prefix, plen);
	for (unsigned i = 0; i < HC_BE_NAME_BYTES; i++) {
		out[plen + 2 * i] = hexd[name[i] >> 4];
		out[plen + 2 * i + 1] = hexd[name[i] & 15];
	}
	n = plen + HC_MC_HEXNAME;
	if (chunk >= 0) {
		char digits[12];
		int k = 0;
		unsigned v = (unsigned)chunk;
		do
			digits[k++] = (char)('0' + v % 10);
		while ((v /= 10));
		out[n++] = '.';
		while (k)
			out[n++] = digits[--k];
	}
	out[n] = '\0';
	return n;
}

/* The key hash of libmemcached's handles (hashkit_set_custom_function):
 * ctx is the prefix's length. */
uint32_t hc__mc_place(const char *key, size_t len, void *ctx)
{
	size_t upto = (size_t)(uintptr_t)ctx + HC_MC_HEXNAME;

	return libhashkit_md5(key, len < upto ? len : upto);
}

/*
 * The manifest, little-endian:
 *    0  magic "HCMCMAN1"        8
 *    8  version 1 (u16), 0 (u16)
 *   12  chunk_bytes (u32)
 *   16  length (u64)
 *   24  nonce (u64)
 *   32  nchunks (u32), head_bytes (u32)
 *   40  the object's name       64
 *  104  zeros                   16
 *  120  XXH3-64 of bytes 0..120
 */
#define MAGIC "HCMCMAN1"

static void put32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

void hc__mc_manifest_encode(const struct hc_mc_manifest *m, const uint8_t name[HC_BE_NAME_BYTES],
			    uint8_t out[HC_MC_MANIFEST_BYTES])
{
	memset(out, 0, HC_MC_MANIFEST_BYTES);
	memcpy(out, MAGIC, 8);
	out[8] = 1;
	put32(out + 12, m->chunk_bytes);
	put64(out + 16, m->length);
	put64(out + 24, m->nonce);
	put32(out + 32, m->nchunks);
	put32(out + 36, m->head_bytes);
	memcpy(out + 40, name, HC_BE_NAME_BYTES);
	put64(out + 120, XXH3_64bits(out, 120));
}

/* 0, or -EBADMSG for anything but a manifest of this name whose numbers
 * agree (its head is the len - HC_MC_MANIFEST_BYTES bytes after it). */
int hc__mc_manifest_decode(const void *buf, size_t len, const uint8_t name[HC_BE_NAME_BYTES], struct hc_mc_manifest *m)
{
	const uint8_t *b = buf;

	if (len < HC_MC_MANIFEST_BYTES || memcmp(b, MAGIC, 8) || b[8] != 1 || b[9] ||
	    get64(b + 120) != XXH3_64bits(b, 120) || memcmp(b + 40, name, HC_BE_NAME_BYTES))
		return -EBADMSG;
	m->chunk_bytes = get32(b + 12);
	m->length = get64(b + 16);
	m->nonce = get64(b + 24);
	m->nchunks = get32(b + 32);
	m->head_bytes = get32(b + 36);
	if (m->length == 0 || m->length > INT64_MAX || m->chunk_bytes < HC_MC_MIN_CHUNK ||
	    m->nchunks > HC_MC_MAX_CHUNKS || m->head_bytes > HC_MC_HEAD_MAX || m->head_bytes >= m->length ||
	    len != HC_MC_MANIFEST_BYTES + m->head_bytes ||
	    m->nchunks != (m->length - m->head_bytes + m->chunk_bytes - 1) / m->chunk_bytes)
		return -EBADMSG;
	return 0;
}

static void feed(void *st, uint8_t *piece, size_t n, uint64_t done)
{
	(void)done;
	XXH3_64bits_update(st, piece, n);
}

uint64_t hc__mc_nonce(const uint8_t name[HC_BE_NAME_BYTES], const struct iovec *iov, unsigned iovcnt, uint64_t length)
{
	XXH3_state_t st;
	uint64_t edge = length < 4096 ? length : 4096, le = htole64(length);

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, name, HC_BE_NAME_BYTES);
	XXH3_64bits_update(&st, &le, sizeof(le));
	hc__mc_iov_each(iov, iovcnt, 0, edge, feed, &st);
	hc__mc_iov_each(iov, iovcnt, length - edge, edge, feed, &st);
	return XXH3_64bits_digest(&st);
}

uint32_t hc__mc_chunk_tag(uint64_t nonce, uint32_t chunk)
{
	uint32_t le = htole32(chunk);

	return (uint32_t)XXH3_64bits_withSeed(&le, sizeof(le), nonce);
}
