/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.c - strict parsers for the tools' command lines.  A typo in a
 * capacity or a shape must stop the tool with a message, never become a
 * different pool, so nothing here guesses: no signs, no blanks, no bases
 * other than 10, and overflow is an error.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

const char *const hc_cli_write_policies[HC_WRITE_NONE + 1] = {
	[HC_WRITE_THROUGH] = "write_through",
	[HC_WRITE_THROUGH_SELECTIVE] = "write_through_selective",
	[HC_WRITE_BACK] = "write_back",
	[HC_WRITE_NONE] = "write_none",
};

int hc_cli_parse_u64(const char *what, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!s || !*s)
		return hc_cli_fail(EINVAL, "%s: the value is empty: expected a decimal number", what);
	/* strtoull would take blanks, a sign (and wrap a '-') and 0x: refuse them */
	if (!isdigit((unsigned char)s[0]))
		return hc_cli_fail(EINVAL, "%s '%s' is not a decimal number", what, s);
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end)
		return hc_cli_fail(EINVAL, "%s '%s' is not a decimal number", what, s);
	if (errno == ERANGE || v > max)
		return hc_cli_fail(ERANGE, "%s '%s' is too large: at most %" PRIu64, what, s, max);
	if (v < min)
		return hc_cli_fail(ERANGE, "%s '%s' is too small: at least %" PRIu64, what, s, min);
	*out = v;
	return 0;
}

int hc_cli_parse_double(const char *what, const char *s, double min, double max, double *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || !(v >= min && v <= max))
		return hc_cli_fail(EINVAL, "%s '%s': give a number from %g to %g", what, s, min, max);
	*out = v;
	return 0;
}

int hc_cli_parse_u32(const char *what, const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t v;
	int ret = hc_cli_parse_u64(what, s, min, max, &v);

	if (ret == 0)
		*out = (uint32_t)v;
	return ret;
}

int hc_cli_parse_size(const char *what, const char *s, uint64_t min, uint64_t *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (!s || !*s)
		return hc_cli_fail(EINVAL, "%s: the value is empty: expected a size like 4096, 64M or 2G", what);
	if (!isdigit((unsigned char)s[0]))
		return hc_cli_fail(EINVAL, "%s '%s' is not a size: expected a number with an optional K, M, G or T",
				   what, s);
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return hc_cli_fail(ERANGE, "%s '%s' is too large", what, s);
	switch (*end) {
	case '\0':
		break;
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
	case 't':
	case 'T':
		shift = 40;
		break;
	default:
		return hc_cli_fail(EINVAL, "%s '%s' has an unknown suffix '%s': use K, M, G or T (powers of 1024)",
				   what, s, end);
	}
	if (shift && strcmp(end + 1, "") != 0 && strcmp(end + 1, "iB") != 0)
		return hc_cli_fail(EINVAL, "%s '%s' has an unknown suffix '%s': use K, M, G or T (powers of 1024)",
				   what, s, end);
	if (v > (UINT64_MAX >> shift))
		return hc_cli_fail(ERANGE, "%s '%s' is too large: it overflows 64 bits", what, s);
	v <<= shift;
	if (v < min)
		return hc_cli_fail(ERANGE, "%s '%s' is too small: at least %" PRIu64 " bytes", what, s, min);
	*out = v;
	return 0;
}

int hc_cli_parse_mode(const char *what, const char *s, mode_t *out)
{
	if (s && (!strcmp(s, "0600") || !strcmp(s, "600"))) {
		*out = 0600;
		return 0;
	}
	if (s && (!strcmp(s, "0660") || !strcmp(s, "660"))) {
		*out = 0660;
		return 0;
	}
	return hc_cli_fail(EINVAL, "%s '%s' is not allowed: a pool is 0600, or 0660 to share it with a group", what,
			   s ? s : "");
}

static int comp_name_ok(const char *n)
{
	size_t len = strlen(n);

	if (len == 0 || len > HC_COMP_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)n[i]) && n[i] != '_' && n[i] != '-' && n[i] != '.')
			return 0;
	return 1;
}

/* "f32, f16, ..., uint8", from the library so a new dtype shows up here. */
static void dtype_list(char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = 0;
	for (int d = 1; d < HC_DTYPE__COUNT && off < len; d++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s", d > 1 ? ", " : "",
					hc_dtype_name((enum hc_dtype)d));
}

int hc_cli_parse_comp(const char *what, const char *s, enum hc_comp_kind kind, struct hc_cli_comp *out)
{
	const char *form = kind == HC_COMP_KV ? "NAME,DTYPE,HEADS,HEAD_BYTES,LAYERS[,replicated][,window=W]"
					      : "NAME,DTYPE,BYTES_PER_LAYER,LAYERS[,replicated][,window=W]";
	const unsigned nshape = kind == HC_COMP_KV ? 5 : 4;
	char buf[256], *f[8], *p;
	unsigned nf = 0;
	int d, ret;

	memset(out, 0, sizeof(*out));
	if (!s || strlen(s) >= sizeof(buf))
		return hc_cli_fail(EINVAL, "%s: the spec is missing or longer than %zu characters", what,
				   sizeof(buf) - 1);
	strcpy(buf, s);
	/* split by hand: strtok would merge empty fields and hide a typo */
	for (p = buf; nf < 8; nf++) {
		f[nf] = p;
		p = strchr(p, ',');
		if (!p) {
			nf++;
			break;
		}
		*p++ = 0;
	}
	if (p || nf < nshape || nf > nshape + 2)
		return hc_cli_fail(EINVAL, "%s '%s' has %s%u fields: expected %s", what, s, p ? "over " : "", nf, form);

	if (!comp_name_ok(f[0]))
		return hc_cli_fail(EINVAL, "%s '%s': NAME '%s' must be 1..%d letters, digits, '_', '-' or '.'", what, s,
				   f[0], HC_COMP_NAME_MAX);
	strcpy(out->name, f[0]);
	out->spec.size = sizeof(out->spec);
	out->spec.name = out->name;
	out->spec.kind = kind;

	d = hc_dtype_parse(f[1]);
	if (d < 0) {
		char list[128];

		dtype_list(list, sizeof(list));
		return hc_cli_fail(EINVAL, "%s '%s': unknown DTYPE '%s': use %s", what, s, f[1], list);
	}
	out->spec.dtype = (enum hc_dtype)d;

	if (kind == HC_COMP_KV) {
		if ((ret = hc_cli_parse_u32("HEADS", f[2], 1, UINT32_MAX, &out->spec.kv_heads)) < 0 ||
		    (ret = hc_cli_parse_u32("HEAD_BYTES", f[3], 1, UINT32_MAX, &out->spec.head_bytes)) < 0 ||
		    (ret = hc_cli_parse_u32("LAYERS", f[4], 1, UINT32_MAX, &out->spec.layers)) < 0)
			return hc_cli_fail(-ret, "%s '%s': %s", what, s, hc_cli_error());
	} else {
		if ((ret = hc_cli_parse_size("BYTES_PER_LAYER", f[2], 1, &out->spec.bytes_per_layer)) < 0 ||
		    (ret = hc_cli_parse_u32("LAYERS", f[3], 1, UINT32_MAX, &out->spec.layers)) < 0)
			return hc_cli_fail(-ret, "%s '%s': %s", what, s, hc_cli_error());
	}

	out->spec.sharding = HC_SHARDED;
	for (unsigned i = nshape; i < nf; i++) {
		const char *x = f[i];

		if (!strcmp(x, "replicated"))
			out->spec.sharding = HC_REPLICATED;
		else if (!strncmp(x, "window=", 7)) {
			if ((ret = hc_cli_parse_u32("window", x + 7, 1, HC_LOOKUP_MAX, &out->spec.window_pages)) < 0)
				return hc_cli_fail(-ret, "%s '%s': %s", what, s, hc_cli_error());
		} else if (strcmp(x, "sharded") != 0)
			return hc_cli_fail(EINVAL,
					   "%s '%s': field '%s' must be 'replicated', 'sharded' or 'window=PAGES'",
					   what, s, x);
	}
	return 0;
}

int hc_cli_parse_numa(const char *what, const char *s, enum hc_numa_mode *mode, const char **nodes)
{
	if (s && !strncmp(s, "bind:", 5) && s[5]) {
		*mode = HC_NUMA_BIND;
		*nodes = s + 5;
		return 0;
	}
	if (s && !strcmp(s, "interleave")) {
		*mode = HC_NUMA_INTERLEAVE;
		*nodes = NULL;
		return 0;
	}
	if (s && !strncmp(s, "interleave:", 11) && s[11]) {
		*mode = HC_NUMA_INTERLEAVE;
		*nodes = s + 11;
		return 0;
	}
	return hc_cli_fail(EINVAL,
			   "%s '%s': expected bind:NODES, interleave or interleave:NODES (NODES like 0, 0-1 or 0,2)",
			   what, s ? s : "");
}

char *hc_cli_hex(const uint8_t *b, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = 0;
	return out;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int hc_cli_parse_hex(const char *what, const char *s, uint8_t *out, size_t n)
{
	if (!s || strlen(s) != 2 * n)
		return hc_cli_fail(EINVAL, "%s '%s': expected exactly %zu hex digits", what, s ? s : "", 2 * n);
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return hc_cli_fail(EINVAL, "%s '%s': '%c%c' at offset %zu is not hex", what, s, s[2 * i],
					   s[2 * i + 1], 2 * i);
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

int hc_cli_parse_hex_prefix(const char *what, const char *s, size_t max, char *out)
{
	size_t n = s ? strlen(s) : 0;

	if (n > max)
		return hc_cli_fail(EINVAL, "%s '%s' is %zu hex digits long: at most %zu", what, s, n, max);
	for (size_t i = 0; i < n; i++) {
		if (hexval(s[i]) < 0)
			return hc_cli_fail(EINVAL, "%s '%s': '%c' at offset %zu is not a hex digit (0-9, a-f)", what, s,
					   s[i], i);
		out[i] = (char)tolower((unsigned char)s[i]);
	}
	out[n] = 0;
	return 0;
}

char *hc_cli_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	unsigned u = 0;
	uint64_t scale = 1024;

	if (bytes < 1024) {
		snprintf(buf, len, "%" PRIu64 " B", bytes);
		return buf;
	}
	while (u + 1 < sizeof(units) / sizeof(units[0]) && bytes / scale >= 1024) {
		scale <<= 10;
		u++;
	}
	if (bytes % scale == 0)
		snprintf(buf, len, "%" PRIu64 " %s", bytes / scale, units[u]);
	else
		snprintf(buf, len, "%.2f %s", (double)bytes / (double)scale, units[u]);
	return buf;
}

char *hc_cli_format_time(uint64_t unix_ns, char *buf, size_t len)
{
	time_t t = (time_t)(unix_ns / 1000000000u);
	struct tm tm;

	if (!localtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S %z", &tm))
		snprintf(buf, len, "%" PRIu64 " ns since the epoch", unix_ns);
	return buf;
}
