/* SPDX-License-Identifier: Apache-2.0 */
/*
 * opts.c - the memcached backend's key=value options;
 * hicache-backend-memcached(7) is their reference.  Every unknown key,
 * repeated key or bad value fails with -EINVAL and one line naming the
 * option and what to give.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mc.h"

/* Bytes with an optional K, M or G (powers of 1024, also KiB/KB...): 0, or -1. */
static int parse_bytes(const char *v, unsigned long long *out)
{
	char *end;
	unsigned shift = 0;

	if (!isdigit((unsigned char)v[0]))
		return -1;
	errno = 0;
	*out = strtoull(v, &end, 10);
	if (errno)
		return -1;
	switch (*end) {
	case 'k':
	case 'K':
		shift = 10;
		break;
	case 'm':
	case 'M':
		shift = 20;
		break;
	case 'g':
	case 'G':
		shift = 30;
		break;
	case '\0':
		return 0;
	default:
		return -1;
	}
	end++;
	if (*end && strcmp(end, "iB") && strcmp(end, "B"))
		return -1;
	if (*out > (~0ull >> shift))
		return -1;
	*out <<= shift;
	return 0;
}

/* The password from a file: its first line, which must not be empty. */
static int read_password(const char *path, struct hc_mc_opts *o, char *err, size_t errlen)
{
	char buf[sizeof(o->password) + 1];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	int rerr;

	if (fd < 0)
		return hc__mc_fail(err, errlen, EINVAL, "password_file=%s: %s", path, strerror(errno));
	n = read(fd, buf, sizeof(buf) - 1);
	rerr = errno;
	close(fd);
	if (n < 0)
		return hc__mc_fail(err, errlen, EINVAL, "password_file=%s: %s", path, strerror(rerr));
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	if (!buf[0] || strlen(buf) >= sizeof(o->password))
		return hc__mc_fail(err, errlen, EINVAL,
				   "password_file=%s: its first line must hold the password (1 to %zu bytes)", path,
				   sizeof(o->password) - 1);
	strcpy(o->password, buf);
	return 0;
}

enum opt_key {
	OPT_SERVERS,
	OPT_CONNECT_TIMEOUT,
	OPT_IO_TIMEOUT,
	OPT_EJECT_AFTER,
	OPT_EJECT_S,
	OPT_CHUNK_SIZE,
	OPT_TTL,
	OPT_WORKERS,
	OPT_BATCH,
	OPT_PREFIX,
	OPT_USERNAME,
	OPT_PASSWORD,
	OPT_PASSWORD_FILE,
	OPT__COUNT
};

static const char *const opt_names[OPT__COUNT] = {
	[OPT_SERVERS] = "servers",
	[OPT_CONNECT_TIMEOUT] = "connect_timeout_ms",
	[OPT_IO_TIMEOUT] = "io_timeout_ms",
	[OPT_EJECT_AFTER] = "eject_after",
	[OPT_EJECT_S] = "eject_s",
	[OPT_CHUNK_SIZE] = "chunk_size",
	[OPT_TTL] = "ttl",
	[OPT_WORKERS] = "workers",
	[OPT_BATCH] = "batch",
	[OPT_PREFIX] = "prefix",
	[OPT_USERNAME] = "username",
	[OPT_PASSWORD] = "password",
	[OPT_PASSWORD_FILE] = "password_file",
};

static int set_opt(struct hc_mc_opts *o, enum opt_key k, const char *v, char *err, size_t errlen)
{
	unsigned long long n;

	switch (k) {
	case OPT_SERVERS: {
		static const struct hc_be_servers_spec spec = {
			.default_port = 11211,
			.unix_sockets = true,
			.example = "10.0.0.1:11211;10.0.0.2:11211",
		};
		return hc_be_parse_servers(v, &spec, o->servers, HC_MC_MAX_SERVERS, &o->nservers, err, errlen);
	}
	case OPT_CONNECT_TIMEOUT:
	case OPT_IO_TIMEOUT:
		if (hc_be_parse_uint(v, 1, 600000, &n) < 0)
			return hc__mc_fail(err, errlen, EINVAL, "%s=%s is not a count of milliseconds from 1 to 600000",
					   opt_names[k], v);
		*(k == OPT_CONNECT_TIMEOUT ? &o->connect_timeout_ms : &o->io_timeout_ms) = (unsigned)n;
		return 0;
	case OPT_EJECT_AFTER:
		if (hc_be_parse_uint(v, 1, 1000, &n) < 0)
			return hc__mc_fail(err, errlen, EINVAL,
					   "eject_after=%s is not a count of failed connects from 1 to 1000", v);
		o->eject_after = (unsigned)n;
		return 0;
	case OPT_EJECT_S:
		if (hc_be_parse_uint(v, 1, 86400, &n) < 0)
			return hc__mc_fail(err, errlen, EINVAL, "eject_s=%s is not a count of seconds from 1 to 86400",
					   v);
		o->eject_s = (unsigned)n;
		return 0;
	case OPT_CHUNK_SIZE:
		if (!strcmp(v, "auto")) {
			o->chunk_bytes = 0;
			return 0;
		}
		if (parse_bytes(v, &n) < 0 || n < HC_MC_MIN_CHUNK || n > (1ull << 30))
			return hc__mc_fail(
				err, errlen, EINVAL,
				"chunk_size=%s is not auto or a size from 1K to 1G (e.g. 1000K): keep it below the servers' item size (memcached -I)",
				v);
		o->chunk_bytes = (uint32_t)n;
		return 0;
	case OPT_TTL:
		if (hc_be_parse_uint(v, 0, HC_MC_TTL_MAX, &n) < 0)
			return hc__mc_fail(err, errlen, EINVAL,
					   "ttl=%s is not a count of seconds from 0 (no expiry) to %u (30 days)", v,
					   HC_MC_TTL_MAX);
		o->ttl_s = (uint32_t)n;
		return 0;
	case OPT_WORKERS:
		if (hc_be_parse_uint(v, 1, 64, &n) < 0)
			return hc__mc_fail(err, errlen, EINVAL, "workers=%s is not a count of threads from 1 to 64", v);
		o->workers = (unsigned)n;
		return 0;
	case OPT_BATCH:
		if (hc_be_parse_uint(v, 1, 1024, &n) < 0)
			return hc__mc_fail(err, errlen, EINVAL, "batch=%s is not a count of ops from 1 to 1024", v);
		o->batch = (unsigned)n;
		return 0;
	case OPT_PREFIX:
		if (!v[0] || strlen(v) > HC_MC_PREFIX_MAX)
			return hc__mc_fail(err, errlen, EINVAL, "prefix=%s must be 1 to %d characters", v,
					   HC_MC_PREFIX_MAX);
		for (const char *c = v; *c; c++)
			if (!isgraph((unsigned char)*c))
				return hc__mc_fail(err, errlen, EINVAL,
						   "prefix=%s: memcached keys take no spaces or control characters", v);
		strcpy(o->prefix, v);
		return 0;
	case OPT_USERNAME:
	case OPT_PASSWORD:
		if (!v[0] || strlen(v) >= sizeof(o->username))
			return hc__mc_fail(err, errlen, EINVAL, "%s= must be 1 to %zu bytes", opt_names[k],
					   sizeof(o->username) - 1);
		strcpy(k == OPT_USERNAME ? o->username : o->password, v);
		return 0;
	case OPT_PASSWORD_FILE:
		return read_password(v, o, err, errlen);
	default:
		return hc__mc_fail(err, errlen, EINVAL, "option %d is unknown", (int)k);
	}
}

int hc__mc_opts_parse(const struct hc_be_option *opts, unsigned nopts, struct hc_mc_opts *o, char *err, size_t errlen)
{
	bool seen[OPT__COUNT] = { false };
	int ret;

	memset(o, 0, sizeof(*o));
	o->connect_timeout_ms = 1000;
	o->io_timeout_ms = 2000;
	o->eject_after = 2;
	o->eject_s = 5;
	o->workers = 4;
	o->batch = 64;
	strcpy(o->prefix, "hicache:");
	if (nopts && !opts)
		return hc__mc_fail(err, errlen, EINVAL, "options are NULL");
	for (unsigned i = 0; i < nopts; i++) {
		const char *key = opts[i].key, *v = opts[i].value;
		int k;

		if (!key || !v)
			return hc__mc_fail(err, errlen, EINVAL, "option %u has a NULL key or value", i);
		for (k = 0; k < OPT__COUNT && strcmp(key, opt_names[k]) != 0; k++)
			;
		if (k == OPT__COUNT)
			return hc__mc_fail(
				err, errlen, EINVAL,
				"unknown option '%s': memcached takes servers, connect_timeout_ms, io_timeout_ms, eject_after, eject_s, chunk_size, ttl, workers, batch, prefix, username, password, password_file",
				key);
		if (seen[k] || (k == OPT_PASSWORD_FILE && seen[OPT_PASSWORD]) ||
		    (k == OPT_PASSWORD && seen[OPT_PASSWORD_FILE]))
			return hc__mc_fail(err, errlen, EINVAL, "option %s= is given twice (or with %s=): give one",
					   key,
					   k == OPT_PASSWORD        ? "password_file"
					   : k == OPT_PASSWORD_FILE ? "password"
								    : key);
		seen[k] = true;
		if ((ret = set_opt(o, (enum opt_key)k, v, err, errlen)) < 0)
			return ret;
	}
	if (!seen[OPT_SERVERS])
		return hc__mc_fail(
			err, errlen, EINVAL,
			"servers= is missing: give HOST:PORT, several separated by ';', e.g. servers=10.0.0.1:11211;10.0.0.2:11211");
	if (seen[OPT_USERNAME] != (seen[OPT_PASSWORD] || seen[OPT_PASSWORD_FILE]))
		return hc__mc_fail(err, errlen, EINVAL,
				   "SASL needs both username= and password= (or password_file=): one is missing");
	o->sasl = seen[OPT_USERNAME];
	return 0;
}
