/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hctjson.c - a tool's JSON against the shape its man page documents
 * (hctjson.h): the page is the contract a script relies on, so the test
 * reads the page itself rather than a copy of it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "hctjson.h"

static int jfail(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int jfail(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return -1;
}

/* One line of roff as text: "\-" is '-', "\&" nothing; other escapes stay. */
static void unroff(const char *in, size_t n, char *out, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < n && o + 1 < len; i++) {
		if (in[i] == '\\' && i + 1 < n && (in[i + 1] == '-' || in[i + 1] == '&')) {
			if (in[++i] == '-')
				out[o++] = '-';
			continue;
		}
		out[o++] = in[i];
	}
	out[o] = '\0';
}

static const struct {
	const char *name;
	unsigned types;
} type_names[] = {
	{ "string", 1u << json_type_string },
	{ "integer", 1u << json_type_int },
	/* a number may be whole: json-c reads 2 as an int and 2.5 as a double */
	{ "number", 1u << json_type_double | 1u << json_type_int },
	{ "boolean", 1u << json_type_boolean },
	{ "object", 1u << json_type_object },
	{ "array", 1u << json_type_array },
	{ "null", 1u << json_type_null },
};

/* "integer or null" into f->types: types joined by "or". */
static int parse_type(struct hct_jfield *f, char *why, size_t len)
{
	char buf[sizeof(f->type)], *save = NULL;
	int want_type = 1;

	snprintf(buf, sizeof(buf), "%s", f->type);
	for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save), want_type = !want_type) {
		size_t i, nt = sizeof(type_names) / sizeof(type_names[0]);

		if (!want_type) {
			if (strcmp(t, "or"))
				return jfail(why, len, "%s: '%s' where 'or' should join two types", f->path, t);
			continue;
		}
		for (i = 0; i < nt && strcmp(t, type_names[i].name); i++)
			;
		if (i == nt)
			return jfail(why, len,
				     "%s: '%s' is no JSON type (string, integer, number, boolean, object, array, null)",
				     f->path, t);
		f->types |= type_names[i].types;
	}
	return f->types && !want_type ? 0 : jfail(why, len, "%s: no type, or 'or' with nothing after it", f->path);
}

/* '.BR PATH " TYPE[, UNIT][, optional]"' */
static int parse_tag(const char *line, struct hct_jfield *f, char *why, size_t len)
{
	const char *p = line + 4, *q, *end;
	size_t n;

	if (strncmp(line, ".BR ", 4))
		return jfail(why, len, "an entry whose tag is not '.BR PATH \" TYPE\"': %s", line);
	n = strcspn(p, " ");
	if (n == 0 || n >= sizeof(f->path))
		return jfail(why, len, "an entry with no path, or one too long: %s", line);
	memcpy(f->path, p, n);
	f->path[n] = '\0';
	q = p + n + strspn(p + n, " ");
	end = q + strlen(q);
	if (q[0] != '"' || end - q < 3 || end[-1] != '"' || q[1] != ' ')
		return jfail(why, len, "%s: the type is not given as \" TYPE[, UNIT][, optional]\": %s", f->path, line);
	q += 2;
	end--;
	n = strcspn(q, ",");
	if ((size_t)(end - q) < n)
		n = (size_t)(end - q);
	if (n == 0 || n >= sizeof(f->type))
		return jfail(why, len, "%s: no type: %s", f->path, line);
	memcpy(f->type, q, n);
	f->type[n] = '\0';
	/* the unit is for people; "optional" is last when it is there */
	f->optional = (size_t)(end - q) >= 10 && !strncmp(end - 10, ", optional", 10);
	return parse_type(f, why, len);
}

static const struct hct_jfield *find(const struct hct_jschema *s, const char *path)
{
	for (unsigned i = 0; i < s->n; i++)
		if (!strcmp(s->f[i].path, path))
			return &s->f[i];
	return NULL;
}

/* The object path that member f belongs to, and its key; NULL for an
 * element ("a[]"), which belongs to an array. */
static const char *member_key(const struct hct_jfield *f, char *parent, size_t len)
{
	const char *dot = strrchr(f->path, '.');
	size_t n = strlen(f->path);

	if (n >= 2 && !strcmp(f->path + n - 2, "[]"))
		return NULL;
	snprintf(parent, len, "%.*s", dot ? (int)(dot - f->path) : 0, f->path);
	return dot ? dot + 1 : f->path;
}

/* Each entry hangs from a documented object or array, once. */
static int check_doc(const struct hct_jschema *s, char *why, size_t len)
{
	const struct hct_jfield *sf = find(s, "schema");

	if (!sf || sf->types != 1u << json_type_string || sf->optional)
		return jfail(why, len, "%s: no entry 'schema' of type string", s->name);
	for (unsigned i = 0; i < s->n; i++) {
		const struct hct_jfield *f = &s->f[i], *up;
		char parent[sizeof(f->path)];
		const char *key = member_key(f, parent, sizeof(parent));
		unsigned want = key ? 1u << json_type_object : 1u << json_type_array;

		if (find(s, f->path) != f)
			return jfail(why, len, "%s: %s is listed twice", s->name, f->path);
		if (!key)
			snprintf(parent, sizeof(parent), "%.*s", (int)strlen(f->path) - 2, f->path);
		else if (!*key)
			return jfail(why, len, "%s: %s has an empty member name", s->name, f->path);
		if (key && !*parent)
			continue;
		up = find(s, parent);
		if (!up || !(up->types & want))
			return jfail(why, len, "%s: %s, but no %s %s is listed", s->name, f->path, parent,
				     key ? "object" : "array");
	}
	return 0;
}

int hct_jschema_parse(const char *man, const char *name, struct hct_jschema *s, char *why, size_t len)
{
	char line[512];
	int in = 0, found = 0;

	memset(s, 0, sizeof(*s));
	snprintf(s->name, sizeof(s->name), "%s", name);
	for (const char *l = man, *next; *l; l = next) {
		size_t n = strcspn(l, "\n");

		next = l[n] ? l + n + 1 : l + n;
		unroff(l, n, line, sizeof(line));
		if (!strncmp(line, ".SH", 3) || !strncmp(line, ".SS", 3)) {
			const char *t = line + 3 + strspn(line + 3, " ");
			size_t tn = strlen(t);

			if (in)
				break;
			if (tn >= 2 && t[0] == '"' && t[tn - 1] == '"')
				t++, tn -= 2;
			in = !strncmp(line, ".SS", 3) && tn == strlen(name) && !strncmp(t, name, tn);
			found |= in;
			continue;
		}
		if (!in || strcmp(line, ".TP"))
			continue;
		if (s->n == HCT_JFIELDS_MAX)
			return jfail(why, len, "%s: more than %d entries", name, HCT_JFIELDS_MAX);
		l = next;
		n = strcspn(l, "\n");
		next = l[n] ? l + n + 1 : l + n;
		unroff(l, n, line, sizeof(line));
		if (parse_tag(line, &s->f[s->n++], why, len) < 0)
			return -1;
	}
	if (!found)
		return jfail(why, len, "no section '.SS %s'", name);
	if (!s->n)
		return jfail(why, len, "%s lists no member", name);
	return check_doc(s, why, len);
}

int hct_jschema_load(const char *page, const char *name, struct hct_jschema *s, char *why, size_t len)
{
	const char *src = getenv("HC_SRCDIR");
	char path[1024], *man = NULL;
	size_t n = 0;
	int ret;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", src && *src ? src : ".", page);
	f = fopen(path, "r");
	if (!f)
		return jfail(why, len, "%s: cannot open it", path);
	if (getdelim(&man, &n, '\0', f) < 0) {
		fclose(f);
		free(man);
		return jfail(why, len, "%s: cannot read it", path);
	}
	fclose(f);
	ret = hct_jschema_parse(man, name, s, why, len);
	if (ret < 0) {
		size_t w = strlen(why);
		snprintf(why + w, len - w, " (in %s)", path);
	}
	free(man);
	return ret;
}

static int typed(const struct hct_jfield *f, json_object *v, const char *real, char *why, size_t len)
{
	json_type t = json_object_get_type(v);

	if (f->types & 1u << t)
		return 0;
	return jfail(why, len, "%s is %s, documented as %s (%s)", real, json_type_to_name(t), f->type, f->path);
}

/* v, at documented path doc (real: the path with indices and names). */
static int walk(const struct hct_jschema *s, json_object *v, const char *doc, const char *real, char *why, size_t len)
{
	const struct hct_jfield *f;
	char dp[256], rp[256], parent[128];

	if (json_object_is_type(v, json_type_array)) {
		snprintf(dp, sizeof(dp), "%s[]", doc);
		f = find(s, dp);
		for (size_t i = 0; i < json_object_array_length(v); i++) {
			json_object *e = json_object_array_get_idx(v, i);

			snprintf(rp, sizeof(rp), "%s[%zu]", real, i);
			if (!f)
				return jfail(why, len, "%s is not documented (no entry %s)", rp, dp);
			if (typed(f, e, rp, why, len) < 0 || walk(s, e, f->path, rp, why, len) < 0)
				return -1;
		}
		return 0;
	}
	if (!json_object_is_type(v, json_type_object))
		return 0;
	json_object_object_foreach(v, k, child)
	{
		snprintf(rp, sizeof(rp), "%s%s%s", real, *real ? "." : "", k);
		snprintf(dp, sizeof(dp), "%s%s%s", doc, *doc ? "." : "", k);
		if (!(f = find(s, dp))) {
			snprintf(dp, sizeof(dp), "%s%s*", doc, *doc ? "." : "");
			f = find(s, dp);
		}
		if (!f)
			return jfail(why, len, "%s is not documented", rp);
		if (typed(f, child, rp, why, len) < 0 || walk(s, child, f->path, rp, why, len) < 0)
			return -1;
	}
	for (unsigned i = 0; i < s->n; i++) {
		const char *key = member_key(&s->f[i], parent, sizeof(parent));

		if (key && !s->f[i].optional && strcmp(key, "*") && !strcmp(parent, doc) &&
		    !json_object_object_get_ex(v, key, NULL))
			return jfail(why, len, "%s%s%s is documented but missing", real, *real ? "." : "", key);
	}
	return 0;
}

int hct_jschema_check(const struct hct_jschema *s, json_object *o, char *why, size_t len)
{
	json_object *v;

	if (!json_object_is_type(o, json_type_object))
		return jfail(why, len, "not a JSON object");
	if (!json_object_object_get_ex(o, "schema", &v) || !json_object_is_type(v, json_type_string))
		return jfail(why, len, "no \"schema\" string");
	if (strcmp(json_object_get_string(v), s->name))
		return jfail(why, len, "schema is \"%s\", not \"%s\"", json_object_get_string(v), s->name);
	return walk(s, o, "", "", why, len);
}

void hct_json_documented(json_object *o, const char *page, const char *name)
{
	struct hct_jschema *s = malloc(sizeof(*s));
	char why[512];

	ck_assert_ptr_nonnull(s);
	ck_assert_msg(hct_jschema_load(page, name, s, why, sizeof(why)) == 0, "%s", why);
	ck_assert_msg(hct_jschema_check(s, o, why, sizeof(why)) == 0, "%s, as %s says: %s\n%.4000s", name, page, why,
		      json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
	free(s);
}
