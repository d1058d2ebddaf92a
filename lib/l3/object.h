/* SPDX-License-Identifier: Apache-2.0 */
/*
 * object.h - the L3 object format (hicache-backend(7)), owned by the
 * library: a plugin stores and returns these bytes without reading them.
 *
 *   [ header: one 4096-byte block ][ payload: the present components ]
 *
 * The payload is, for each component present in the page (in component
 * order), that component's bytes padded to 4096, exactly as they sit in the
 * envelope.  Absent components are not stored.  So a GET with O_DIRECT lands
 * every run of the payload straight in an aligned envelope.
 *
 * Header, all integers little-endian, at fixed offsets:
 *
 *     0  magic "HCOBJ\r\n\0"          8 bytes
 *     8  format major, minor          u16, u16
 *    12  header bytes (4096)          u32
 *    16  fingerprint                  32 bytes
 *    48  key                          32 bytes
 *    80  presence mask                u32
 *    84  flags                        u32: bit 0 (HC_OBJ_FLAG_MAC) the object
 *                                      carries a MAC (minor 1); others 0
 *    88  payload bytes                u64
 *    96  payload checksum (XXH3-64)   u64
 *   104  depth (page index in chain)  u32
 *   108  present components           u32
 *   112  written at (unix ns)         u64
 *   120  envelope bytes of the writer u64
 *   128  per present component, 24 bytes: index u32, 0 u32, payload offset
 *        u64, bytes u64 (the unpadded length)
 *  4048  MAC nonce (flag bit 0; else 0) 16 bytes, random per object
 *  4064  MAC tag (flag bit 0; else 0)   16 bytes
 *  4080  0                            8 bytes
 *  4088  header checksum: XXH3-64 of bytes 0..4087
 *
 * The MAC (mac.h: Poly1305, its one-time key derived by ChaCha20 from the
 * service's key and the nonce) covers bytes 0..4087 with the tag's 16 bytes
 * taken as zeros, then the payload: so it binds the fingerprint, key, depth,
 * presence and every payload byte to the service's key.  The header
 * checksum, written after the tag, covers the tag too.
 *
 * A reader checks, in order: magic, major (a newer major is refused, a newer
 * minor read), header checksum, header bytes, fingerprint, key, flags (an
 * unknown bit is refused), that the payload length and component table are
 * what this pool's geometry gives for that presence, and, after the payload,
 * its checksum, then, where the reader has a key, the MAC: an object without
 * one is refused as a downgrade.  A reader without a key reads a MAC'd
 * object on its checksums alone.
 */
#ifndef HC_LIB_OBJECT_H
#define HC_LIB_OBJECT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <hicache/hicache.h>

#define HC_OBJ_HEADER_BYTES 4096u
#define HC_OBJ_MAJOR        1u
#define HC_OBJ_MINOR        1u /* 1: the MAC (flag bit 0) */
#define HC_OBJ_FLAG_MAC     1u
#define HC_OBJ_OFF_NONCE    4048u
#define HC_OBJ_OFF_TAG      4064u
#define HC_OBJ_MAGIC        "HCOBJ\r\n" /* 7 bytes and its NUL: catches text-mode mangling */

/* Where a page's payload comes from in its envelope: runs of merged components. */
struct hc__obj_layout {
	uint32_t presence;
	unsigned nrun;
	uint64_t payload_bytes;
	struct {
		uint64_t env_off, len;
	} run[HC_MAX_COMPONENTS];
};

/* What a header says, once it has been checked. */
struct hc__obj_meta {
	uint32_t minor, presence, depth, flags;
	uint64_t payload_bytes, sum, written_ns;
};

struct hc__geom;
struct hc__mac;

/* A component's bytes as stored: padded to the next 4096. */
static inline uint64_t hc__obj_pad(uint64_t n)
{
	return (n + HC_ENVELOPE_ALIGN - 1) & ~(uint64_t)(HC_ENVELOPE_ALIGN - 1);
}

int hc__obj_layout(const struct hc__geom *g, uint32_t presence, struct hc__obj_layout *out);
uint64_t hc__obj_sum_iov(const struct iovec *iov, unsigned n);
void hc__obj_header_build(void *hdr, const struct hc__geom *g, const uint8_t fp[32], const uint8_t key[32],
			  uint32_t depth, const struct hc__obj_layout *l, uint64_t sum);
/* MAC a built header and its payload: the flag, a fresh nonce, the tag,
 * and the header checksum again.  0, or -EIO where libcrypto fails. */
int hc__obj_header_seal(void *hdr, const struct hc__mac *mac, const struct iovec *payload, unsigned n);
/* A checked header and its payload against mac: 0, -EKEYREJECTED if it
 * carries no MAC or a wrong one (why says which), -EIO where libcrypto fails. */
int hc__obj_mac_check(const void *hdr, const struct hc__mac *mac, const struct iovec *payload, unsigned n, char *why,
		      size_t whylen);
int hc__obj_header_check(const void *hdr, const struct hc__geom *g, const uint8_t fp[32], const uint8_t key[32],
			 struct hc__obj_meta *m, char *why, size_t whylen);

#endif /* HC_LIB_OBJECT_H */
