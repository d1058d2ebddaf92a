/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_object.c - libFuzzer on the L3 object header's check
 * (hc__obj_header_check, lib/l3/object.c), what every object read from a
 * backend goes through, and its MAC's (hc__obj_mac_check).  An input edits
 * a good header: after a flags byte, (offset low, offset high, byte)
 * triples overwrite it; flag bit 0 reseals its checksum, so the fields
 * behind it are reached too; flag bit 1 starts from a MAC'd header.  A
 * header taken must agree with the pool's geometry; a refused one says
 * why; and a MAC'd one whose bytes were edited must fail its MAC.
 */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "lib/l3/mac.h"
#include "lib/l3/object.h"
#include "shmpool/layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct hc__geom g;
	static const uint8_t fp[32] = { 1, 2, 3 }, key[32] = { 4, 5, 6 };
	static const uint8_t mac_key[HC_MAC_KEY_BYTES] = { 7, 8, 9 };
	static uint8_t hdr[HC_OBJ_HEADER_BYTES], plain[HC_OBJ_HEADER_BYTES], sealed[HC_OBJ_HEADER_BYTES];
	static uint8_t payload[16384 + 4096];
	static struct hc__mac *mac;
	const struct iovec piov = { payload, sizeof(payload) };
	struct hc__obj_layout l;
	struct hc__obj_meta m;
	char why[256] = "";
	int r;

	if (!g.ncomp) { /* two components, as a KV cache and a state */
		g.ncomp = 2;
		g.comps[0].offset = 0;
		g.comps[0].bytes = 16384;
		g.comps[1].offset = 16384;
		g.comps[1].bytes = 2048;
	}
	if (!mac) { /* sealed once: its nonce is random */
		if (hc__obj_layout(&g, 3, &l) < 0 || l.payload_bytes != sizeof(payload) ||
		    hc__mac_new(mac_key, &mac) < 0)
			abort();
		hc__obj_header_build(plain, &g, fp, key, 5, &l, 0x1234);
		memcpy(sealed, plain, sizeof(sealed));
		if (hc__obj_header_seal(sealed, mac, &piov, 1) < 0)
			abort();
	}
	memcpy(hdr, size && (data[0] & 2) ? sealed : plain, sizeof(hdr));
	for (size_t i = 1; i + 2 < size; i += 3)
		hdr[(data[i] | (unsigned)data[i + 1] << 8) % HC_OBJ_HEADER_BYTES] = data[i + 2];
	if (size && (data[0] & 1)) {
		uint64_t sum = htole64(XXH3_64bits(hdr, HC_OBJ_HEADER_BYTES - 8));
		memcpy(hdr + HC_OBJ_HEADER_BYTES - 8, &sum, 8);
	}
	if (hc__obj_header_check(hdr, &g, fp, key, &m, why, sizeof(why)) < 0) {
		if (!why[0])
			abort(); /* a refusal without a reason */
		return 0;
	}
	if (hc__obj_layout(&g, m.presence, &l) < 0 || l.payload_bytes != m.payload_bytes)
		abort(); /* taken, but not this pool's shape */
	why[0] = '\0';
	r = hc__obj_mac_check(hdr, mac, &piov, 1, why, sizeof(why));
	if (r < 0 ? r != -EKEYREJECTED || !why[0] : !(m.flags & HC_OBJ_FLAG_MAC))
		abort(); /* refused without a reason, or a MAC found where none is */
	if (r == 0 && memcmp(hdr, sealed, HC_OBJ_HEADER_BYTES - 8) != 0)
		abort(); /* a forgery: edited bytes that the MAC passed */
	return 0;
}
