/* SPDX-License-Identifier: Apache-2.0 */
/*
 * opts.c - the mori backend's key=value options; hicache-backend-mori(7)
 * is their reference.  Every unknown key, repeated key or bad value fails
 * with -EINVAL and one line naming the option and what to give.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "mori.h"

enum opt_key {
	OPT_SERVERS,
	OPT_TRANSPORTS,
	OPT_CONNECT_TIMEOUT,
	OPT_IO_TIMEOUT,
	OPT_RETRY,
	OPT_RETRY_MAX,
	OPT_LEASE,
	OPT_INFLIGHT,
	OPT_BATCH,
	OPT__COUNT
};

static const char *const opt_names[OPT__COUNT] = {
	[OPT_SERVERS] = "servers",
	[OPT_TRANSPORTS] = "transports",
	[OPT_CONNECT_TIMEOUT] = "connect_timeout_ms",
	[OPT_IO_TIMEOUT] = "io_timeout_ms",
	[OPT_RETRY] = "retry_ms",
	[OPT_RETRY_MAX] = "retry_max_ms",
	[OPT_LEASE] = "lease_ms",
	[OPT_INFLIGHT] = "inflight",
	[OPT_BATCH] = "batch",
};

/* A UCX_TLS value: names of transports or aliases, separated by ','; a
 * leading '^' excludes them.  UCX itself says which names exist (open
 * fails with its message); this only keeps the string sane. */
static int parse_transports(const char *v, struct hc_mori_opts *o, char *err, size_t errlen)
{
	size_t len = strlen(v);

	if (!len || len > HC_MORI_TLS_MAX)
		return hc__mori_fail(err, errlen, EINVAL,
				     "transports= must be 1 to %d characters, as UCX_TLS: e.g. tcp, sm, rc,sm",
				     HC_MORI_TLS_MAX);
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)v[i]) && !strchr(",_^:", v[i]))
			return hc__mori_fail(
				err, errlen, EINVAL,
				"transports=%s: UCX_TLS takes names separated by ',' (e.g. tcp, sm, rc,sm)", v);
	memcpy(o->transports, v, len + 1);
	return 0;
}

static int set_ms(const char *name, const char *v, unsigned min, unsigned max, unsigned *out, char *err, size_t errlen)
{
	unsigned long long n;

	if (hc_be_parse_uint(v, min, max, &n) < 0)
		return hc__mori_fail(err, errlen, EINVAL, "%s=%s is not a count of milliseconds from %u to %u", name, v,
				     min, max);
	*out = (unsigned)n;
	return 0;
}

static int set_opt(struct hc_mori_opts *o, enum opt_key k, const char *v, char *err, size_t errlen)
{
	static const struct hc_be_servers_spec spec = {
		.default_port = HC_MORI_PORT,
		.unix_sockets = false,
		.example = "10.0.0.1:7470;10.0.0.2:7470",
	};
	unsigned long long n;

	switch (k) {
	case OPT_SERVERS:
		return hc_be_parse_servers(v, &spec, o->servers, HC_MORI_MAX_SERVERS, &o->nservers, err, errlen);
	case OPT_TRANSPORTS:
		return parse_transports(v, o, err, errlen);
	case OPT_CONNECT_TIMEOUT:
		return set_ms(opt_names[k], v, 1, 600000, &o->connect_timeout_ms, err, errlen);
	case OPT_IO_TIMEOUT:
		return set_ms(opt_names[k], v, 1, 600000, &o->io_timeout_ms, err, errlen);
	case OPT_RETRY:
		return set_ms(opt_names[k], v, 1, 3600000, &o->retry_ms, err, errlen);
	case OPT_RETRY_MAX:
		return set_ms(opt_names[k], v, 1, 3600000, &o->retry_max_ms, err, errlen);
	case OPT_LEASE:
		return set_ms(opt_names[k], v, 0, 3600000, &o->lease_ms, err, errlen);
	case OPT_INFLIGHT:
		if (hc_be_parse_uint(v, 1, 65536, &n) < 0)
			return hc__mori_fail(err, errlen, EINVAL, "inflight=%s is not a count of ops from 1 to 65536",
					     v);
		o->inflight = (unsigned)n;
		return 0;
	case OPT_BATCH:
		if (hc_be_parse_uint(v, 1, HC_MW_BATCH_MAX, &n) < 0)
			return hc__mori_fail(err, errlen, EINVAL, "batch=%s is not a count of ops from 1 to %u", v,
					     HC_MW_BATCH_MAX);
		o->batch = (unsigned)n;
		return 0;
	default:
		return hc__mori_fail(err, errlen, EINVAL, "option %d is unknown", (int)k);
	}
}

int hc__mori_opts_parse(const struct hc_be_option *opts, unsigned nopts, struct hc_mori_opts *o, char *err,
			size_t errlen)
{
	bool seen[OPT__COUNT] = { false };
	int ret;

	memset(o, 0, sizeof(*o));
	o->connect_timeout_ms = 2000;
	o->io_timeout_ms = 5000;
	o->retry_ms = 500;
	o->retry_max_ms = 30000;
	o->inflight = 1024;
	o->batch = 128;
	if (nopts && !opts)
		return hc__mori_fail(err, errlen, EINVAL, "options are NULL");
	for (unsigned i = 0; i < nopts; i++) {
		const char *key = opts[i].key, *v = opts[i].value;
		int k;

		if (!key || !v)
			return hc__mori_fail(err, errlen, EINVAL, "option %u has a NULL key or value", i);
		for (k = 0; k < OPT__COUNT && strcmp(key, opt_names[k]) != 0; k++)
			;
		if (k == OPT__COUNT)
			return hc__mori_fail(
				err, errlen, EINVAL,
				"unknown option '%s': mori takes servers, transports, connect_timeout_ms, io_timeout_ms, retry_ms, retry_max_ms, lease_ms, inflight, batch",
				key);
		if (seen[k])
			return hc__mori_fail(err, errlen, EINVAL, "option %s= is given twice: give it once", key);
		seen[k] = true;
		if ((ret = set_opt(o, (enum opt_key)k, v, err, errlen)) < 0)
			return ret;
	}
	if (!seen[OPT_SERVERS])
		return hc__mori_fail(
			err, errlen, EINVAL,
			"servers= is missing: give the hicache-memd servers as HOST:PORT, several separated by ';', e.g. servers=10.0.0.1:7470;10.0.0.2:7470");
	if (o->retry_max_ms < o->retry_ms)
		return hc__mori_fail(err, errlen, EINVAL, "retry_max_ms=%u is below retry_ms=%u: give at least %u",
				     o->retry_max_ms, o->retry_ms, o->retry_ms);
	if (o->lease_ms && o->lease_ms <= o->io_timeout_ms)
		return hc__mori_fail(
			err, errlen, EINVAL,
			"lease_ms=%u is not above io_timeout_ms=%u: a transfer may run io_timeout_ms, and the lease must outlast it (give lease_ms at least twice io_timeout_ms)",
			o->lease_ms, o->io_timeout_ms);
	return 0;
}
