/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mac.c - the keyed MAC of L3 objects (mac.h), and its key file.
 *
 * Poly1305 is a one-time authenticator: its key must never tag two
 * messages.  So each object's Poly1305 key is the first 32 bytes of the
 * ChaCha20 keystream under the service's key and the object's random
 * 16-byte nonce (ChaCha20's whole 128-bit counter and nonce input), as
 * RFC 8439 derives it from its 96-bit nonce.  Random 128-bit nonces repeat
 * with odds near n^2 / 2^129 over n objects: none in practice.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "../../shmpool/pool.h"
#include "mac.h"

struct hc__mac {
	uint8_t key[HC_MAC_KEY_BYTES];
	EVP_MAC *poly;
	EVP_CIPHER *chacha;
};

int hc__mac_new(const uint8_t key[HC_MAC_KEY_BYTES], struct hc__mac **out)
{
	struct hc__mac *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return hc__err(ENOMEM, "mac: no memory");
	memcpy(m->key, key, HC_MAC_KEY_BYTES);
	m->poly = EVP_MAC_fetch(NULL, "POLY1305", NULL);
	m->chacha = EVP_CIPHER_fetch(NULL, "ChaCha20", NULL);
	if (!m->poly || !m->chacha) {
		const char *lacks = m->poly ? "ChaCha20" : "Poly1305";

		hc__mac_free(m);
		return hc__err(ENOSYS, "mac: this libcrypto has no %s: OpenSSL 3 with its default provider has both",
			       lacks);
	}
	*out = m;
	return 0;
}

void hc__mac_free(struct hc__mac *m)
{
	if (!m)
		return;
	EVP_MAC_free(m->poly);
	EVP_CIPHER_free(m->chacha);
	OPENSSL_cleanse(m->key, sizeof(m->key));
	free(m);
}

static int unhex(int c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
				      : -1;
}

static const char *file_kind(mode_t mode)
{
	return S_ISDIR(mode)    ? "directory"
	       : S_ISCHR(mode)  ? "character device"
	       : S_ISBLK(mode)  ? "block device"
	       : S_ISFIFO(mode) ? "FIFO"
	       : S_ISSOCK(mode) ? "socket"
				: "special file";
}

#define KEY_HOWTO "make one with 'umask 077; openssl rand -hex 32 > FILE' as the service's user"

int hc__mac_load(const char *path, struct hc__mac **out)
{
	char text[2 * HC_MAC_KEY_BYTES + 2];
	uint8_t key[HC_MAC_KEY_BYTES];
	struct stat sb;
	ssize_t n;
	int fd, r;

	*out = NULL;
	if (!path || !*path)
		return hc__err(EINVAL, "mac key file: the path is empty");
	/* O_NONBLOCK: a FIFO in its place must not hang the service. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return hc__err(errno, "mac key file %s: %s: %s", path, strerror(errno), KEY_HOWTO);
	if (fstat(fd, &sb) < 0) {
		r = hc__err(errno, "mac key file %s: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(sb.st_mode)) {
		r = hc__err(EINVAL, "mac key file %s is a %s, not a regular file: %s", path, file_kind(sb.st_mode),
			    KEY_HOWTO);
		goto out;
	}
	if (sb.st_uid != geteuid()) {
		r = hc__err(EPERM, "mac key file %s is owned by uid %u, not by this service's uid %u: chown %u %s",
			    path, (unsigned)sb.st_uid, (unsigned)geteuid(), (unsigned)geteuid(), path);
		goto out;
	}
	if (sb.st_mode & 077) {
		r = hc__err(EPERM, "mac key file %s has mode %04o: group or others may %s it; chmod 600 %s", path,
			    (unsigned)(sb.st_mode & 07777), sb.st_mode & 044 ? "read" : "write or run", path);
		goto out;
	}
	if (sb.st_size != 2 * HC_MAC_KEY_BYTES && sb.st_size != 2 * HC_MAC_KEY_BYTES + 1) {
		r = hc__err(
			EINVAL,
			"mac key file %s holds %lld bytes: it must hold 64 hex digits (32 bytes), a newline after them allowed; %s",
			path, (long long)sb.st_size, KEY_HOWTO);
		goto out;
	}
	n = read(fd, text, sizeof(text));
	if (n != sb.st_size) {
		r = hc__err(n < 0 ? errno : EIO, "mac key file %s: read %zd of its %lld bytes%s%s", path, n,
			    (long long)sb.st_size, n < 0 ? ": " : "",
			    n < 0 ? strerror(errno) : " (it changed meanwhile)");
		goto out;
	}
	if (n == 2 * HC_MAC_KEY_BYTES + 1 && text[n - 1] != '\n') {
		r = hc__err(
			EINVAL,
			"mac key file %s: byte 64 is 0x%02x, not a newline: it must hold 64 hex digits, then at most a newline",
			path, (unsigned char)text[n - 1]);
		goto out;
	}
	for (unsigned i = 0; i < 2 * HC_MAC_KEY_BYTES; i++) {
		if (unhex((unsigned char)text[i]) < 0) {
			r = hc__err(EINVAL, "mac key file %s: byte %u is 0x%02x, not a hex digit: %s", path, i,
				    (unsigned char)text[i], KEY_HOWTO);
			goto out;
		}
		if (i % 2)
			key[i / 2] = (uint8_t)(unhex((unsigned char)text[i - 1]) << 4 | unhex((unsigned char)text[i]));
	}
	r = hc__mac_new(key, out);
out:
	OPENSSL_cleanse(text, sizeof(text));
	OPENSSL_cleanse(key, sizeof(key));
	close(fd);
	return r;
}

HC_API int hc_mac_key_check(const char *path)
{
	struct hc__mac *m;
	int r = hc__mac_load(path, &m);

	hc__mac_free(m);
	return r;
}

int hc__mac_nonce(uint8_t nonce[HC_MAC_NONCE_BYTES])
{
	return RAND_bytes(nonce, HC_MAC_NONCE_BYTES) == 1 ? 0 : -EIO;
}

int hc__mac_tag(const struct hc__mac *m, const uint8_t nonce[HC_MAC_NONCE_BYTES], const struct iovec *iov, unsigned n,
		uint8_t tag[HC_MAC_TAG_BYTES])
{
	static const uint8_t zero[32];
	uint8_t otk[32];
	EVP_CIPHER_CTX *cc = EVP_CIPHER_CTX_new();
	EVP_MAC_CTX *mc = EVP_MAC_CTX_new(m->poly);
	size_t len = 0;
	int outl = 0, r = -EIO;

	if (!cc || !mc)
		goto out;
	/* The one-time key: ChaCha20's keystream, i.e. zeros encrypted. */
	if (EVP_EncryptInit_ex2(cc, m->chacha, m->key, nonce, NULL) != 1 ||
	    EVP_EncryptUpdate(cc, otk, &outl, zero, sizeof(zero)) != 1 || outl != (int)sizeof(otk))
		goto out;
	if (EVP_MAC_init(mc, otk, sizeof(otk), NULL) != 1)
		goto out;
	for (unsigned i = 0; i < n; i++)
		if (iov[i].iov_len && EVP_MAC_update(mc, iov[i].iov_base, iov[i].iov_len) != 1)
			goto out;
	if (EVP_MAC_final(mc, tag, &len, HC_MAC_TAG_BYTES) != 1 || len != HC_MAC_TAG_BYTES)
		goto out;
	r = 0;
out:
	OPENSSL_cleanse(otk, sizeof(otk));
	EVP_MAC_CTX_free(mc);
	EVP_CIPHER_CTX_free(cc);
	return r;
}
