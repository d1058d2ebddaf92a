/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hctjson.h - the JSON shapes that the man pages document, member by
 * member, in their JSON OUTPUT sections, read from the page in the source
 * tree; and a tool's JSON checked against one.  An entry of a shape is
 *
 *	.TP
 *	.BR PATH " TYPE[, UNIT][, optional]"
 *
 * under ".SS SCHEMA": PATH dotted from the top level, "[]" for each
 * element of an array, "*" for any member of an object; TYPE "string",
 * "integer", "number", "boolean", "object", "array" or "null", or several
 * joined by " or ".
 */
#ifndef HC_TESTS_HCTJSON_H
#define HC_TESTS_HCTJSON_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#define HCT_JFIELDS_MAX 320

struct hct_jfield {
	char path[128];
	char type[64];  /* as documented, for messages */
	unsigned types; /* 1u << json_type, for each type allowed */
	bool optional;
};

struct hct_jschema {
	char name[64]; /* "hicache.pool-info/1" */
	unsigned n;
	struct hct_jfield f[HCT_JFIELDS_MAX];
};

/* Shape 'name' from man page text: 0, or -1 with why. */
int hct_jschema_parse(const char *man, const char *name, struct hct_jschema *s, char *why, size_t len);
/* The same from the page at HC_SRCDIR/page ("man/hicache-pool.8"). */
int hct_jschema_load(const char *page, const char *name, struct hct_jschema *s, char *why, size_t len);
/* 0 when o is of shape s: its "schema" is s's name, every member it has is
 * documented with its type, and every documented member that is not
 * optional is there; else -1 with the first thing wrong in why. */
int hct_jschema_check(const struct hct_jschema *s, json_object *o, char *why, size_t len);
/* Load and check, failing the test with the reason. */
void hct_json_documented(json_object *o, const char *page, const char *name);

#endif /* HC_TESTS_HCTJSON_H */
