/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.c - Mooncake's JSONL request traces (the FAST'25 release's format),
 * parsed with json-c: one request per line, in arrival order.  Every line
 * is checked in full; the first bad one fails the load with its number.
 * A line is at most HC_RP_LINE_MAX bytes and has no NUL, and the file is
 * a regular one: /dev/zero or a FIFO never feeds a line without end.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "../cli/cli.h"
#include "workload.h"

/* An integer json-c parsed, exactly (lex_check refused what it would
 * clamp): -1 if negative, else 0 and *out. */
static int exact_u64(json_object *v, uint64_t *out)
{
	if (json_object_get_int64(v) < 0)
		return -1;
	*out = json_object_get_uint64(v);
	return 0;
}

/* What strict json-c would still take, or take wrongly: a single-quoted
 * string, and an integer past 2^64 - 1 (clamped, so two ids would meet).
 * 0, or the failure with its column. */
static int lex_check(const char *path, unsigned lineno, const char *line)
{
	int in_string = 0;

	for (const char *c = line; *c; c++) {
		if (in_string) {
			if (*c == '\\' && c[1])
				c++;
			else if (*c == '"')
				in_string = 0;
			continue;
		}
		if (*c == '"') {
			in_string = 1;
		} else if (*c == '\'') {
			return hc_cli_fail(EINVAL,
					   "%s:%u: a single quote at column %zu: JSON strings take double quotes", path,
					   lineno, (size_t)(c - line) + 1);
		} else if (*c >= '0' && *c <= '9' && (c == line || !strchr("0123456789.eE+-", c[-1]))) {
			uint64_t v = 0;
			const char *d = c;
			for (; *d >= '0' && *d <= '9'; d++) {
				if (v > (UINT64_MAX - (uint64_t)(*d - '0')) / 10)
					return hc_cli_fail(ERANGE,
							   "%s:%u: the number at column %zu is past 2^64 - 1 (%" PRIu64
							   "): no field of a request is that large",
							   path, lineno, (size_t)(c - line) + 1, UINT64_MAX);
				v = v * 10 + (uint64_t)(*d - '0');
			}
			if (*d == '.' || *d == 'e' || *d == 'E')
				for (d++; *d && strchr("0123456789eE+-", *d); d++)
					; /* a fraction or exponent: the fields say what they take */
			c = d - 1;
		}
	}
	return 0;
}

/* A field that must be an integer in [0, max]. */
static int field_u64(const char *path, unsigned lineno, json_object *obj, const char *name, uint64_t max, uint64_t *out)
{
	json_object *v;
	uint64_t x;

	if (!json_object_object_get_ex(obj, name, &v))
		return hc_cli_fail(
			EINVAL,
			"%s:%u: no \"%s\" field (a request has timestamp, input_length, output_length and hash_ids)",
			path, lineno, name);
	if (json_object_is_type(v, json_type_double)) {
		double d = json_object_get_double(v);
		if (!isfinite(d) || d != floor(d))
			return hc_cli_fail(EINVAL, "%s:%u: \"%s\" is %s: expected a whole number", path, lineno, name,
					   json_object_to_json_string(v));
		if (d < 0 || d >= 0x1p64 || (uint64_t)d > max) /* (double)max may round up past it */
			return hc_cli_fail(ERANGE, "%s:%u: \"%s\" is %s: expected 0 to %" PRIu64, path, lineno, name,
					   json_object_to_json_string(v), max);
		*out = (uint64_t)d;
		return 0;
	}
	if (!json_object_is_type(v, json_type_int))
		return hc_cli_fail(EINVAL, "%s:%u: \"%s\" is %s: expected a whole number", path, lineno, name,
				   json_object_to_json_string(v));
	if (exact_u64(v, &x) < 0 || x > max)
		return hc_cli_fail(ERANGE, "%s:%u: \"%s\" is %s: expected 0 to %" PRIu64, path, lineno, name,
				   json_object_to_json_string(v), max);
	*out = x;
	return 0;
}

static int parse(const char *path, unsigned lineno, json_object *obj, struct hc_rp_workload *w)
{
	struct hc_rp_req r = { .line = lineno };
	uint64_t t, in, out, need;
	json_object *ids;
	size_t n;
	int e;

	if (!json_object_is_type(obj, json_type_object))
		return hc_cli_fail(EINVAL, "%s:%u: a line is one JSON object per request, not %s", path, lineno,
				   json_object_to_json_string(obj));
	if ((e = field_u64(path, lineno, obj, "timestamp", UINT64_MAX / 2, &t)) < 0 ||
	    (e = field_u64(path, lineno, obj, "input_length", UINT32_MAX, &in)) < 0 ||
	    (e = field_u64(path, lineno, obj, "output_length", UINT32_MAX, &out)) < 0)
		return e;
	if (w->n && t < w->req[w->n - 1].t_ms)
		return hc_cli_fail(EINVAL,
				   "%s:%u: timestamp %" PRIu64 " is before line %u's %" PRIu64
				   ": a trace lists requests in arrival order",
				   path, lineno, t, w->req[w->n - 1].line, w->req[w->n - 1].t_ms);
	if (!json_object_object_get_ex(obj, "hash_ids", &ids))
		return hc_cli_fail(
			EINVAL,
			"%s:%u: no \"hash_ids\" field (a request has timestamp, input_length, output_length and hash_ids)",
			path, lineno);
	if (!json_object_is_type(ids, json_type_array))
		return hc_cli_fail(EINVAL, "%s:%u: \"hash_ids\" is %s: expected an array of block ids", path, lineno,
				   json_object_to_json_string(ids));
	n = json_object_array_length(ids);
	need = (in + HC_RP_BLOCK_TOKENS - 1) / HC_RP_BLOCK_TOKENS;
	if (n != need)
		return hc_cli_fail(EINVAL,
				   "%s:%u: \"hash_ids\" has %zu ids, but input_length %" PRIu64 " needs %" PRIu64
				   " (one per %u-token block, the last one partial)",
				   path, lineno, n, in, need, HC_RP_BLOCK_TOKENS);
	if (hc_rp_workload_grow(w, n) < 0)
		return hc_cli_fail(ENOMEM, "%s:%u: no memory for %zu requests", path, lineno, w->n + 1);
	for (size_t i = 0; i < n; i++) {
		json_object *v = json_object_array_get_idx(ids, i);
		uint64_t x;
		if (!json_object_is_type(v, json_type_int) || exact_u64(v, &x) < 0)
			return hc_cli_fail(EINVAL,
					   "%s:%u: hash_ids[%zu] is %s: expected a block id, a whole number from 0",
					   path, lineno, i, json_object_to_json_string(v));
		w->ids[w->nids + i] = x;
	}
	r.t_ms = t;
	r.input_len = (uint32_t)in;
	r.output_len = (uint32_t)out;
	r.nblocks = (uint32_t)n;
	r.first = w->nids;
	w->nids += n;
	w->req[w->n++] = r;
	return 0;
}

int hc_rp_trace_line(const char *path, unsigned lineno, const char *line, struct hc_rp_workload *w)
{
	struct json_tokener *tok = json_tokener_new();
	size_t len = strlen(line), end;
	enum json_tokener_error je;
	json_object *obj;
	int r;

	if (!tok)
		return hc_cli_fail(ENOMEM, "%s:%u: no memory for the JSON parser", path, lineno);
	if ((r = lex_check(path, lineno, line)) < 0) {
		json_tokener_free(tok);
		return r;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT); /* JSON, not what json-c would also take */
	obj = json_tokener_parse_ex(tok, line, (int)len);
	je = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	if (je == json_tokener_continue)
		r = hc_cli_fail(EINVAL, "%s:%u: the JSON ends in the middle of a value (a request is one whole line)",
				path, lineno);
	else if (je != json_tokener_success)
		r = hc_cli_fail(EINVAL, "%s:%u: not JSON at column %zu: %s", path, lineno, end + 1,
				json_tokener_error_desc(je));
	else if (end + strspn(line + end, " \t\r\n") != len) /* strict json-c says so itself; others may not */
		r = hc_cli_fail(EINVAL, "%s:%u: more after the request's object at column %zu: one request per line",
				path, lineno, end + 1);
	else
		r = parse(path, lineno, obj, w);
	json_object_put(obj);
	json_tokener_free(tok);
	return r;
}

/* The next line of f into *buf (NUL-terminated, without its newline):
 * its length; -1 at the end; -E2BIG past max bytes; -EILSEQ at a NUL. */
static ssize_t read_line(FILE *f, char **buf, size_t *cap, size_t max)
{
	size_t n = 0;
	int c;

	while ((c = getc_unlocked(f)) != EOF && c != '\n') {
		if (c == '\0')
			return -EILSEQ;
		if (n >= max)
			return -E2BIG;
		if (n + 1 >= *cap) {
			size_t want = *cap ? *cap * 2 : 4096;
			char *b;
			if (!(b = realloc(*buf, want)))
				return -ENOMEM;
			*buf = b;
			*cap = want;
		}
		(*buf)[n++] = (char)c;
	}
	if (c == EOF && n == 0)
		return -1;
	if (!*buf && !(*buf = malloc(*cap = 1)))
		return -ENOMEM;
	(*buf)[n] = '\0';
	return (ssize_t)n;
}

int hc_rp_trace_load(const char *path, size_t max_requests, struct hc_rp_workload *w)
{
	FILE *f;
	char *line = NULL;
	size_t cap = 0;
	unsigned lineno = 0;
	ssize_t len = 0;
	const char *kind;
	int r;

	memset(w, 0, sizeof(*w));
	if ((r = hc_cli_open_regular(path, 0, &f, &kind)) < 0)
		return kind ? hc_cli_fail(-r, "trace %s: not a regular file (%s): give a JSONL file", path, kind)
			    : hc_cli_fail(-r, "trace %s: %s", path, strerror(-r));
	while ((!max_requests || w->n < max_requests) && (len = read_line(f, &line, &cap, HC_RP_LINE_MAX)) >= 0) {
		lineno++;
		if (line[strspn(line, " \t\r")] == '\0')
			continue; /* a blank line */
		if ((r = hc_rp_trace_line(path, lineno, line, w)) < 0)
			break;
	}
	if (r == 0 && len < -1)
		r = len == -EILSEQ ? hc_cli_fail(EINVAL, "%s:%u: a NUL byte in the line: a trace is JSON text", path,
						 lineno + 1)
		    : len == -E2BIG
			    ? hc_cli_fail(E2BIG, "%s:%u: the line is longer than %u MiB, the most a trace line may be",
					  path, lineno + 1, HC_RP_LINE_MAX >> 20)
			    : hc_cli_fail(ENOMEM, "%s:%u: no memory for the line", path, lineno + 1);
	if (r == 0 && ferror(f))
		r = hc_cli_fail(EIO, "trace %s: read error after line %u", path, lineno);
	if (r == 0 && w->n == 0)
		r = hc_cli_fail(EINVAL, "trace %s: no requests in it (%u lines%s)", path, lineno,
				lineno ? ", all blank" : ": an empty file");
	free(line);
	fclose(f);
	if (r < 0)
		hc_rp_workload_free(w);
	return r;
}
