/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mac.h - the keyed MAC of L3 objects (doc/design.md, "Authenticated
 * objects"): Poly1305 under a one-time key that ChaCha20 derives from the
 * service's 32-byte key and a random 16-byte nonce the object carries.
 * Where the MAC sits in an object and what it covers is object.h's.
 */
#ifndef HC_LIB_MAC_H
#define HC_LIB_MAC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define HC_MAC_KEY_BYTES   32u
#define HC_MAC_NONCE_BYTES 16u
#define HC_MAC_TAG_BYTES   16u

struct hc__mac;

/* A MAC under key; -ENOMEM, or -ENOSYS where libcrypto lacks ChaCha20 or Poly1305. */
int hc__mac_new(const uint8_t key[HC_MAC_KEY_BYTES], struct hc__mac **out);
/* The key in file path: 64 hex digits and at most a newline, in a regular
 * file of this process's euid that neither group nor others may read or
 * write.  Anything else is refused with a message saying what to do. */
int hc__mac_load(const char *path, struct hc__mac **out);
void hc__mac_free(struct hc__mac *m);
/* A fresh random nonce (-EIO if the random generator fails). */
int hc__mac_nonce(uint8_t nonce[HC_MAC_NONCE_BYTES]);
/* The tag of the concatenation of iov[0..n) under nonce: 0, or -EIO. */
int hc__mac_tag(const struct hc__mac *m, const uint8_t nonce[HC_MAC_NONCE_BYTES], const struct iovec *iov, unsigned n,
		uint8_t tag[HC_MAC_TAG_BYTES]);

#endif /* HC_LIB_MAC_H */
