/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keys.c - page keys (doc/design.md, "Keys"): the namespace seed and the key
 * chain.  Both must stay byte-identical to SGLang's, so that the two can
 * share pages: any change here is a change of format, not a refactoring.
 *
 *   seed  = SHA-256("sglang-cache-namespace-v1" || part(extra_key) || part(cache_salt))
 *           part(NULL) = 0x00
 *           part(s)    = 0x01 || strlen(s) as u64 LE || bytes of s
 *   key_0 = SHA-256([prev or seed, if any] || tokens of page 0 as u32 LE)
 *   key_i = SHA-256(key_{i-1} || tokens of page i as u32 LE)
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>

#include <hicache/hicache.h>

#include "../shmpool/pool.h"

#define NS_TAG "sglang-cache-namespace-v1"

/* An absent part and an empty one must hash differently: the tag byte says which. */
static int put_part(EVP_MD_CTX *c, const char *s)
{
	uint8_t hdr[9];
	uint64_t n;

	if (!s) {
		hdr[0] = 0x00;
		return EVP_DigestUpdate(c, hdr, 1);
	}
	n = strlen(s);
	hdr[0] = 0x01;
	for (unsigned i = 0; i < 8; i++)
		hdr[1 + i] = (uint8_t)(n >> (8 * i));
	return EVP_DigestUpdate(c, hdr, sizeof(hdr)) && EVP_DigestUpdate(c, s, (size_t)n);
}

int hc_namespace_seed(const char *extra_key, const char *cache_salt, uint8_t seed[HC_KEY_BYTES])
{
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned len = 0;
	EVP_MD_CTX *c;
	int ret;

	if (!seed)
		return hc__err(EINVAL, "hc_namespace_seed: seed is NULL: pass a %d-byte buffer", HC_KEY_BYTES);
	/* No namespace: the chain starts from nothing, as SGLang's does. */
	if (!extra_key && !cache_salt)
		return 0;
	c = EVP_MD_CTX_new();
	if (!c)
		return hc__err(ENOMEM, "hc_namespace_seed: out of memory for a SHA-256 context");
	if (!EVP_DigestInit_ex(c, EVP_sha256(), NULL) || !EVP_DigestUpdate(c, NS_TAG, strlen(NS_TAG)) ||
	    !put_part(c, extra_key) || !put_part(c, cache_salt) || !EVP_DigestFinal_ex(c, md, &len) ||
	    len != HC_KEY_BYTES) {
		ret = hc__err(EIO, "hc_namespace_seed: SHA-256 failed in libcrypto: check the OpenSSL installation");
		goto done;
	}
	/* Written only on success: a caller's seed is never left half-made. */
	memcpy(seed, md, HC_KEY_BYTES);
	ret = 1;
done:
	EVP_MD_CTX_free(c);
	return ret;
}

/* One page's tokens as uint32 little-endian, the only encoding SGLang hashes. */
static int put_tokens(EVP_MD_CTX *c, const uint32_t *t, uint32_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	/* The array already is the encoding: one update for the whole page. */
	return EVP_DigestUpdate(c, t, (size_t)n * sizeof(*t));
#else
	uint8_t buf[1024];
	uint32_t k = 0;

	while (k < n) {
		uint32_t m = n - k < sizeof(buf) / 4 ? n - k : (uint32_t)(sizeof(buf) / 4);

		for (uint32_t j = 0; j < m; j++) {
			uint32_t v = t[k + j];

			buf[4 * j] = (uint8_t)v;
			buf[4 * j + 1] = (uint8_t)(v >> 8);
			buf[4 * j + 2] = (uint8_t)(v >> 16);
			buf[4 * j + 3] = (uint8_t)(v >> 24);
		}
		if (!EVP_DigestUpdate(c, buf, (size_t)m * 4))
			return 0;
		k += m;
	}
	return 1;
#endif
}

int hc_key_chain(const uint8_t *seed, const uint8_t *prev, const uint32_t *tokens, size_t n, uint32_t page_tokens,
		 hc_key_t *out)
{
	const uint8_t *prior;
	EVP_MD_CTX *c;
	size_t npages;
	int ret;

	if (page_tokens == 0)
		return hc__err(EINVAL, "hc_key_chain: page_tokens is 0: pass the pool's page size in tokens");
	/* prev already folds the seed in; hashing both would name other pages. */
	if (seed && prev)
		return hc__err(EINVAL, "hc_key_chain: give prev to continue a chain or seed to start one, not both");
	if (!tokens && n > 0)
		return hc__err(EINVAL, "hc_key_chain: tokens is NULL but n is %zu", n);
	npages = n / page_tokens;
	if (npages > INT32_MAX)
		return hc__err(E2BIG,
			       "hc_key_chain: %zu pages of %u tokens is more than %d keys in one call: "
			       "split the tokens and continue the chain with prev",
			       npages, page_tokens, INT32_MAX);
	if (npages == 0)
		return 0;
	if (!out)
		return hc__err(EINVAL, "hc_key_chain: out is NULL but %zu keys are due", npages);

	c = EVP_MD_CTX_new();
	if (!c)
		return hc__err(ENOMEM, "hc_key_chain: out of memory for a SHA-256 context");
	prior = prev ? prev : seed;
	for (size_t i = 0; i < npages; i++) {
		uint8_t md[EVP_MAX_MD_SIZE];
		unsigned len = 0;

		/* Init resets the one context: no allocation per page. */
		if (!EVP_DigestInit_ex(c, EVP_sha256(), NULL) || (prior && !EVP_DigestUpdate(c, prior, HC_KEY_BYTES)) ||
		    !put_tokens(c, tokens + i * page_tokens, page_tokens) || !EVP_DigestFinal_ex(c, md, &len) ||
		    len != HC_KEY_BYTES) {
			ret = hc__err(EIO,
				      "hc_key_chain: SHA-256 failed in libcrypto at page %zu: "
				      "check the OpenSSL installation",
				      i);
			goto done;
		}
		memcpy(out[i], md, HC_KEY_BYTES);
		prior = out[i];
	}
	ret = (int)npages;
done:
	EVP_MD_CTX_free(c);
	return ret;
}
