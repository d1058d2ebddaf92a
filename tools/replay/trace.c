/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.c - Mooncake's JSONL request traces (the FAST'25 release's format),
 * parsed with json-c: one request per line, in arrival order.  Every line
 * is checked in full; the first bad one fails the load with its number.
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

/* A field that must be an integer in [0, max]. */
static int field_u64(const char *path, unsigned lineno, json_object *obj, const char *name, uint64_t max, uint64_t *out)
{
	json_object *v;
	int64_t x;

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
		if (d < 0 || d > (double)max)
			return hc_cli_fail(ERANGE, "%s:%u: \"%s\" is %s: expected 0 to %" PRIu64, path, lineno, name,
					   json_object_to_json_string(v), max);
		*out = (uint64_t)d;
		return 0;
	}
	if (!json_object_is_type(v, json_type_int))
		return hc_cli_fail(EINVAL, "%s:%u: \"%s\" is %s: expected a whole number", path, lineno, name,
				   json_object_to_json_string(v));
	errno = 0;
	x = json_object_get_int64(v);
	if (x < 0 || (uint64_t)x > max || errno == ERANGE)
		return hc_cli_fail(ERANGE, "%s:%u: \"%s\" is %s: expected 0 to %" PRIu64, path, lineno, name,
				   json_object_to_json_string(v), max);
	*out = (uint64_t)x;
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
		int64_t x;
		errno = 0;
		if (!json_object_is_type(v, json_type_int) || (x = json_object_get_int64(v)) < 0 || errno == ERANGE)
			return hc_cli_fail(EINVAL,
					   "%s:%u: hash_ids[%zu] is %s: expected a block id, a whole number from 0",
					   path, lineno, i, json_object_to_json_string(v));
		w->ids[w->nids + i] = (uint64_t)x;
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

int hc_rp_trace_load(const char *path, size_t max_requests, struct hc_rp_workload *w)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	unsigned lineno = 0;
	ssize_t len;
	int r = 0;

	memset(w, 0, sizeof(*w));
	if (!f)
		return hc_cli_fail(errno, "trace %s: %s", path, strerror(errno));
	while ((!max_requests || w->n < max_requests) && (len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if ((size_t)len != strlen(line)) {
			r = hc_cli_fail(EINVAL, "%s:%u: a NUL byte in the line: a trace is JSON text", path, lineno);
			break;
		}
		if (line[strspn(line, " \t\r\n")] == '\0')
			continue; /* a blank line */
		if ((r = hc_rp_trace_line(path, lineno, line, w)) < 0)
			break;
	}
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
