/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hostport.h - the servers= option of the plugins that talk to servers
 * (memcached, mori): HOST, HOST:PORT, [V6ADDR]:PORT, and for memcached a
 * socket's path, several separated by ';'.  Plugin-side inline code, as
 * common.h; each error is one line naming the entry and what to write.
 */
#ifndef HC_BACKENDS_HOSTPORT_H
#define HC_BACKENDS_HOSTPORT_H

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define HC_BE_HOST_MAX 255

struct hc_be_server {
	char host[HC_BE_HOST_MAX + 1]; /* a host name or address, or a socket's path */
	unsigned port;                 /* 0: a unix socket */
};

/* How a plugin reads its list. */
struct hc_be_servers_spec {
	unsigned default_port; /* for an entry without :PORT */
	bool unix_sockets;     /* an entry starting with '/' is a socket's path */
	const char *example;   /* for the message of an empty list */
};

/* A decimal count from min to max: 0, or -1. */
static inline int hc_be_parse_uint(const char *v, unsigned long long min, unsigned long long max,
				   unsigned long long *out)
{
	char *end;

	if (!isdigit((unsigned char)v[0]))
		return -1;
	errno = 0;
	*out = strtoull(v, &end, 10);
	return errno || *end || *out < min || *out > max ? -1 : 0;
}

/* "host:port", "[v6]:port" or the socket's path, into buf. */
static inline const char *hc_be_server_str(const struct hc_be_server *s, char *buf, size_t len)
{
	if (!s->port)
		snprintf(buf, len, "%s", s->host);
	else if (strchr(s->host, ':'))
		snprintf(buf, len, "[%s]:%u", s->host, s->port);
	else
		snprintf(buf, len, "%s:%u", s->host, s->port);
	return buf;
}

/* One server: HOST, HOST:PORT, [V6ADDR]:PORT, or /path/to/socket. */
static inline int hc_be_parse_server(const char *s, size_t len, const struct hc_be_servers_spec *spec,
				     struct hc_be_server *out, char *err, size_t errlen)
{
	const char *host = s, *port = NULL;
	size_t hlen = len;
	unsigned long long p = spec->default_port;
	char pbuf[8];

	memset(out, 0, sizeof(*out));
	if (s[0] == '/' && spec->unix_sockets) {
		if (len > HC_BE_HOST_MAX)
			return hc_be_fail(err, errlen, EINVAL, "servers=: the socket path '%.*s' is too long", (int)len,
					  s);
		memcpy(out->host, s, len);
		return 0;
	}
	if (memchr(s, ' ', len))
		return hc_be_fail(err, errlen, EINVAL,
				  "servers=: '%.*s' has a space: separate servers with ';' and write HOST:PORT",
				  (int)len, s);
	if (s[0] == '[') {
		const char *close = memchr(s, ']', len);
		if (!close || close == s + 1 || !memchr(s, ':', (size_t)(close - s)) ||
		    (close + 1 < s + len && close[1] != ':'))
			return hc_be_fail(err, errlen, EINVAL, "servers=: '%.*s' is not [IPV6-ADDRESS]:PORT", (int)len,
					  s);
		host = s + 1;
		hlen = (size_t)(close - host);
		if (close + 1 < s + len)
			port = close + 2;
	} else {
		const char *colon = memchr(s, ':', len);
		if (colon) {
			if (memchr(colon + 1, ':', len - (size_t)(colon + 1 - s)))
				return hc_be_fail(err, errlen, EINVAL,
						  "servers=: '%.*s': write an IPv6 address in brackets, [ADDRESS]:PORT",
						  (int)len, s);
			hlen = (size_t)(colon - s);
			port = colon + 1;
		}
	}
	if (hlen == 0 || hlen > HC_BE_HOST_MAX)
		return hc_be_fail(err, errlen, EINVAL, "servers=: '%.*s' has no host name", (int)len, s);
	for (size_t i = 0; i < hlen; i++)
		if (!isalnum((unsigned char)host[i]) && !strchr(".-_:%", host[i]))
			return hc_be_fail(err, errlen, EINVAL, "servers=: '%.*s' is not a host name or address",
					  (int)len, s);
	if (port) {
		size_t plen = len - (size_t)(port - s);
		if (plen == 0 || plen >= sizeof(pbuf))
			p = 0;
		else {
			memcpy(pbuf, port, plen);
			pbuf[plen] = '\0';
			if (hc_be_parse_uint(pbuf, 1, 65535, &p) < 0)
				p = 0;
		}
		if (!p)
			return hc_be_fail(err, errlen, EINVAL, "servers=: '%.*s' has no port from 1 to 65535 after ':'",
					  (int)len, s);
	}
	memcpy(out->host, host, hlen);
	out->port = (unsigned)p;
	return 0;
}

/* A list of servers separated by ';' (spaces around them are ignored) into
 * out[0..*n), at most max of them. */
static inline int hc_be_parse_servers(const char *v, const struct hc_be_servers_spec *spec, struct hc_be_server *out,
				      unsigned max, unsigned *n, char *err, size_t errlen)
{
	const char *p = v;
	int ret;

	*n = 0;
	while (*p) {
		const char *end;
		size_t len;

		while (*p == ' ' || *p == ';')
			p++;
		if (!*p)
			break;
		for (end = p; *end && *end != ';'; end++)
			;
		len = (size_t)(end - p);
		while (len && p[len - 1] == ' ')
			len--; /* spaces around an entry are ignored, not inside one */
		if (*n == max)
			return hc_be_fail(err, errlen, EINVAL, "servers=: more than %u servers", max);
		if ((ret = hc_be_parse_server(p, len, spec, &out[*n], err, errlen)) < 0)
			return ret;
		for (unsigned i = 0; i < *n; i++)
			if (!strcmp(out[i].host, out[*n].host) && out[i].port == out[*n].port)
				return hc_be_fail(err, errlen, EINVAL, "servers=: '%.*s' is listed twice", (int)len, p);
		(*n)++;
		p = end;
	}
	if (!*n)
		return hc_be_fail(err, errlen, EINVAL,
				  "servers= is empty: give HOST:PORT, several separated by ';', e.g. servers=%s",
				  spec->example);
	return 0;
}

#endif
