/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tool.c - hicache-pool, run as a program: every verb end to end, its
 * JSON checked against the library's own view and against the shapes that
 * hicache-pool(8) documents, exit status 2 and a message naming the bad
 * thing for each kind of command-line error, and exit 1 for failures.  The
 * parsers in tools/cli/cli.c are also tested directly.
 */
#include <ctype.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include <hicache/service.h>

#include "hct.h"
#include "hctjson.h"

/* The parsers are not in any library; compile them in to test them directly. */
#include "../tools/cli/cli.h"

#define TOOL_OUT_MAX (256 * 1024)

struct run {
	int status; /* exit status, or 128 + signal */
	char out[TOOL_OUT_MAX];
	char err[16384];
};

static struct run r; /* one per forked test: too big for the stack */

/* Run hicache-pool with the NULL-terminated arguments; fills r. */
static int tool(const char *arg, ...)
{
	const char *args[64];
	int n = 0;
	va_list ap;

	va_start(ap, arg);
	for (; arg && n < 63; arg = va_arg(ap, const char *))
		args[n++] = arg;
	va_end(ap);
	args[n] = NULL;
	r.status = hct_tool_run("hicache-pool", args, r.out, sizeof(r.out), r.err, sizeof(r.err));
	return r.status;
}
#define TOOL(...) tool(__VA_ARGS__, (const char *)NULL)

#define ck_assert_tool(want, ...)                                                                                      \
	do {                                                                                                           \
		int got__ = TOOL(__VA_ARGS__);                                                                         \
		ck_assert_msg(got__ == (want), "exit %d, want %d\nstdout: %s\nstderr: %s", got__, (want), r.out,       \
			      r.err);                                                                                  \
	} while (0)

#define ck_assert_out_has(s) ck_assert_msg(strstr(r.out, (s)), "stdout lacks '%s':\n%s", (s), r.out)
#define ck_assert_err_has(s) ck_assert_msg(strstr(r.err, (s)), "stderr lacks '%s':\n%s", (s), r.err)

static const char *shm_path(const char *name)
{
	static char path[512];

	snprintf(path, sizeof(path), "/dev/shm/hicache.%s", name);
	return path;
}

/* A tiny pool: sharded bf16 K/V (4 heads x 256 B, 2 layers) and a replicated state. */
static void create_tiny(const char *name, const char *pages)
{
	ck_assert_tool(0, "create", name, "--model", "test/tool-1b", "--page-tokens", "16", "--tp", "2", "--kv",
		       "kv,bf16,4,256,2", "--state", "st,f32,1K,2,replicated", "--pages", pages, "--quarantine-ms",
		       "600000");
}

/* ---- JSON helpers: each asserts the key exists with the right type */

static json_object *jparse(const char *s)
{
	json_object *o = json_tokener_parse(s);

	ck_assert_msg(o != NULL, "not JSON:\n%s", s);
	return o;
}

static json_object *jget(json_object *o, const char *k, json_type t)
{
	json_object *v = NULL;

	ck_assert_msg(json_object_object_get_ex(o, k, &v), "JSON lacks \"%s\": %s", k, json_object_to_json_string(o));
	ck_assert_msg(json_object_is_type(v, t), "JSON \"%s\" has type %s, want %s", k,
		      json_type_to_name(json_object_get_type(v)), json_type_to_name(t));
	return v;
}

static int64_t jint(json_object *o, const char *k)
{
	return json_object_get_int64(jget(o, k, json_type_int));
}

static const char *jstr(json_object *o, const char *k)
{
	return json_object_get_string(jget(o, k, json_type_string));
}

static int jbool(json_object *o, const char *k)
{
	return json_object_get_boolean(jget(o, k, json_type_boolean));
}

/* The entry for 'name' in ls --json output (NULL if absent). */
static json_object *ls_find(json_object *ls, const char *name)
{
	json_object *pools = jget(ls, "pools", json_type_array);

	for (size_t i = 0; i < json_object_array_length(pools); i++) {
		json_object *e = json_object_array_get_idx(pools, i);
		if (!strcmp(jstr(e, "name"), name))
			return e;
	}
	return NULL;
}

static void hex_of(const uint8_t *b, char out[65])
{
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/* ---- end to end */

START_TEST(create_info_ls_repair_destroy)
{
	const char *name = hct_name();
	struct hc_attach_opts ao = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_READONLY };
	struct hc_pool_info li;
	char fp_create[65] = "", fp_lib[65], want[128], *s;
	json_object *o, *c, *e;
	hc_pool *p;

	create_tiny(name, "8");
	ck_assert_out_has("created pool");
	ck_assert_out_has(shm_path(name));
	s = strstr(r.out, "fingerprint");
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(sscanf(s, "fingerprint %64[0-9a-f]", fp_create), 1);
	ck_assert_uint_eq(strlen(fp_create), 64);

	/* the library's own view, to check the tool against */
	ck_assert_ok(hc_pool_attach(name, &ao, &p));
	ck_assert_ok(hc_pool_info(p, &li, sizeof(li)));
	hc_pool_detach(p);
	hex_of(li.fingerprint, fp_lib);
	ck_assert_str_eq(fp_create, fp_lib);

	ck_assert_tool(0, "info", name);
	ck_assert_out_has("test/tool-1b");
	ck_assert_out_has(fp_lib);
	ck_assert_out_has("pages        8: free 8, reserved 0, ready 0, quarantine 0, freeing 0");
	ck_assert_out_has("huge pages");

	ck_assert_tool(0, "info", name, "--json");
	o = jparse(r.out);
	ck_assert_str_eq(jstr(o, "name"), name);
	ck_assert_str_eq(jstr(o, "path"), shm_path(name));
	ck_assert_str_eq(jstr(o, "model_id"), "test/tool-1b");
	ck_assert_str_eq(jstr(o, "fingerprint"), fp_lib);
	ck_assert_int_eq(jint(o, "npages"), 8);
	ck_assert_int_eq(jint(o, "page_tokens"), 16);
	ck_assert_int_eq(jint(o, "tp_size"), 2);
	ck_assert_int_eq(jint(o, "head_groups"), 2);
	ck_assert_int_eq(jint(o, "max_ranks"), 32);
	ck_assert_int_eq(jint(o, "quarantine_ms"), 600000);
	/* kv: 2 groups x 2 layers x K/V x 16 tokens x 2 heads x 256 B = 64 KiB; st: 2 KiB; 4 KiB aligned */
	ck_assert_int_eq(jint(o, "envelope_bytes"), 65536 + 4096);
	ck_assert_int_eq(jint(o, "envelope_bytes"), (int64_t)li.envelope_bytes);
	ck_assert_int_eq(jint(o, "segment_bytes"), (int64_t)li.segment_bytes);
	ck_assert_int_eq(jint(o, "creator_uid"), (int64_t)geteuid());
	ck_assert_int_eq(jbool(o, "huge_pages"), li.huge_pages != 0);
	c = jget(o, "components", json_type_array);
	ck_assert_uint_eq(json_object_array_length(c), 2);
	e = json_object_array_get_idx(c, 0);
	ck_assert_str_eq(jstr(e, "name"), "kv");
	ck_assert_str_eq(jstr(e, "dtype"), "bf16");
	ck_assert_str_eq(jstr(e, "kind"), "kv");
	ck_assert_str_eq(jstr(e, "sharding"), "sharded");
	ck_assert_int_eq(jint(e, "kv_heads"), 4);
	ck_assert_int_eq(jint(e, "head_bytes"), 256);
	ck_assert_int_eq(jint(e, "layers"), 2);
	ck_assert_int_eq(jint(e, "groups"), 2);
	ck_assert_int_eq(jint(e, "offset"), 0);
	ck_assert_int_eq(jint(e, "layer_stride"), 2 * 16 * 2 * 256);
	ck_assert_int_eq(jint(e, "group_stride"), 2 * 2 * 16 * 2 * 256);
	ck_assert_int_eq(jint(e, "bytes"), 65536);
	e = json_object_array_get_idx(c, 1);
	ck_assert_str_eq(jstr(e, "name"), "st");
	ck_assert_str_eq(jstr(e, "dtype"), "f32");
	ck_assert_str_eq(jstr(e, "kind"), "state");
	ck_assert_str_eq(jstr(e, "sharding"), "replicated");
	ck_assert_int_eq(jint(e, "groups"), 1);
	ck_assert_int_eq(jint(e, "bytes_per_layer"), 1024);
	ck_assert_int_eq(jint(e, "offset"), 65536);
	ck_assert_int_eq(jint(e, "bytes"), 2048);
	c = jget(o, "pages", json_type_object);
	ck_assert_int_eq(jint(c, "free"), 8);
	ck_assert_int_eq(jint(c, "ready"), 0);
	ck_assert_uint_eq(json_object_array_length(jget(o, "ranks", json_type_array)), 0);
	json_object_put(o);

	ck_assert_tool(0, "ls");
	snprintf(want, sizeof(want), "%s ", name);
	ck_assert_out_has(want);
	ck_assert_out_has(shm_path(name));
	ck_assert_tool(0, "ls", "--json");
	o = jparse(r.out);
	ck_assert_str_eq(jstr(o, "dir"), "/dev/shm");
	e = ls_find(o, name);
	ck_assert_msg(e != NULL, "ls --json lacks %s:\n%s", name, r.out);
	ck_assert_str_eq(jstr(e, "status"), "ok");
	ck_assert_str_eq(jstr(e, "model_id"), "test/tool-1b");
	ck_assert_int_eq(jint(e, "npages"), 8);
	ck_assert_int_eq(jint(e, "envelope_bytes"), (int64_t)li.envelope_bytes);
	ck_assert_int_eq(jint(e, "live_ranks"), 0);
	json_object_put(o);

	ck_assert_tool(0, "repair", name);
	ck_assert_out_has("repaired pool");
	ck_assert_out_has("dead_ranks");
	ck_assert_tool(0, "repair", name, "--json");
	o = jparse(r.out);
	ck_assert_int_eq(jbool(o, "ok"), 1);
	ck_assert_int_eq(jint(o, "dead_ranks"), 0);
	ck_assert_int_eq(jint(o, "quarantined"), 0);
	json_object_put(o);

	ck_assert_tool(0, "destroy", name);
	ck_assert_out_has("destroyed pool");
	ck_assert_int_eq(access(shm_path(name), F_OK), -1);
	ck_assert_tool(1, "info", name);
	ck_assert_err_has("no pool");
}
END_TEST

/* A rank killed while holding reservations: visible to info, undone by repair. */
START_TEST(repair_dead_rank)
{
	const char *name = hct_name();
	json_object *o, *ranks, *rk;
	int st;
	pid_t pid;

	create_tiny(name, "8");
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct hc_attach_opts ao = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_NO_POPULATE };
		hc_page_t pg[3];
		hc_pool *p;

		if (hc_pool_attach(name, &ao, &p) < 0 || hc_page_alloc(p, 3, 1, pg) != 3)
			_exit(1);
		raise(SIGKILL);
		_exit(2);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "rank child did not die as planned: %#x", st);

	/* read-only: the dead rank's slot still reads live, and its holds show */
	ck_assert_tool(0, "info", name, "--json", "--no-recover");
	o = jparse(r.out);
	ck_assert_int_eq(jint(jget(o, "pages", json_type_object), "reserved"), 3);
	ranks = jget(o, "ranks", json_type_array);
	ck_assert_uint_eq(json_object_array_length(ranks), 1);
	rk = json_object_array_get_idx(ranks, 0);
	ck_assert_int_eq(jint(rk, "pid"), pid);
	ck_assert_int_eq(jint(rk, "reserved"), 3);
	json_object_put(o);
	ck_assert_tool(0, "ls", "--json");
	o = jparse(r.out);
	ck_assert_ptr_nonnull(ls_find(o, name));
	ck_assert_int_eq(jint(ls_find(o, name), "live_ranks"), 1);
	json_object_put(o);

	ck_assert_tool(0, "repair", name, "--json");
	o = jparse(r.out);
	ck_assert_int_eq(jbool(o, "ok"), 1);
	ck_assert_int_eq(jint(o, "dead_ranks"), 1);
	ck_assert_int_eq(jint(o, "quarantined"), 3);
	ck_assert_int_eq(jint(o, "released"), 0);
	json_object_put(o);

	/* a second repair finds nothing left to do */
	ck_assert_tool(0, "repair", name, "--json");
	o = jparse(r.out);
	ck_assert_int_eq(jint(o, "dead_ranks"), 0);
	ck_assert_int_eq(jint(o, "quarantined"), 0);
	json_object_put(o);

	ck_assert_tool(0, "info", name, "--json");
	o = jparse(r.out);
	ck_assert_int_eq(jint(jget(o, "pages", json_type_object), "quarantine"), 3);
	ck_assert_int_eq(jint(jget(o, "pages", json_type_object), "reserved"), 0);
	ck_assert_uint_eq(json_object_array_length(jget(o, "ranks", json_type_array)), 0);
	json_object_put(o);
	ck_assert_tool(0, "destroy", name);
}
END_TEST

/* ---- command-line errors: exit 2, one line naming the bad thing, no pool made */

START_TEST(usage_errors)
{
	const char *name = hct_name();
	static const struct {
		const char *args[8];
		const char *want;
	} cases[] = {
		{ { "--size", "4Q" }, "'4Q' has an unknown suffix" },
		{ { "--size", "4MB" }, "--size '4MB'" },
		{ { "--size", "99999999999999999999" }, "too large" },
		{ { "--size", "16777216T" }, "overflows" },
		{ { "--pages", "12x" }, "--pages '12x' is not a decimal number" },
		{ { "--pages", "-3" }, "--pages '-3'" },
		{ { "--pages", " 3" }, "--pages ' 3'" },
		{ { "--pages", "0" }, "too small" },
		{ { "--pages", "4", "--size", "4M" }, "both --pages and --size" },
		{ { "--pages", "4", "--pages", "5" }, "'--pages' is given twice" },
		{ { "--pages", "4", "--kv", "x,bf17,4,256,2" }, "unknown DTYPE 'bf17'" },
		{ { "--pages", "4", "--kv", "x,bf16,4,256" }, "has 4 fields" },
		{ { "--pages", "4", "--kv", "x,bf16,4,256,2,3,4,5" }, "has 8 fields" },
		{ { "--pages", "4", "--kv", "x,bf16,4x,256,2" }, "HEADS '4x'" },
		{ { "--pages", "4", "--kv", "x,bf16,4,,2" }, "HEAD_BYTES" },
		{ { "--pages", "4", "--kv", "x,bf16,4,256,zero" }, "LAYERS 'zero'" },
		{ { "--pages", "4", "--kv", "x,bf16,4,256,2,mirror" },
		  "'mirror' must be 'replicated', 'sharded' or 'window=PAGES'" },
		{ { "--pages", "4", "--kv", "a b,bf16,4,256,2" }, "NAME 'a b'" },
		{ { "--pages", "4", "--state", "s,f32,1Z,2" }, "BYTES_PER_LAYER '1Z'" },
		{ { "--pages", "4", "--mode", "0644" }, "--mode '0644'" },
		{ { "--pages", "4", "--numa", "near" }, "--numa 'near'" },
		{ { "--pages", "4", "--max-ranks", "129" }, "--max-ranks '129' is too large" },
		{ { "--pages", "4", "--dir", "relative/dir" }, "--dir 'relative/dir' must be an absolute path" },
		{ { "--pages", "4", "--bogus" }, "'--bogus'" },
		{ { "--pages" }, "'--pages' needs a value" },
		{ { NULL }, "missing capacity" },
	};

	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *const *a = cases[i].args;
		int got = TOOL("create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--kv",
			       "kv,bf16,4,256,2", a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);

		ck_assert_msg(got == 2, "case %u (%s %s): exit %d, want 2: %s", i, a[0], a[1] ? a[1] : "", got, r.err);
		ck_assert_msg(strstr(r.err, cases[i].want), "case %u: stderr lacks \"%s\": %s", i, cases[i].want,
			      r.err);
		ck_assert_msg(!strncmp(r.err, "hicache-pool: create: ", 22), "case %u: bad prefix: %s", i, r.err);
		ck_assert_msg(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "case %u: not one line: %s", i, r.err);
		ck_assert_msg(access(shm_path(name), F_OK) == -1, "case %u created the pool anyway", i);
	}

	/* errors that are not about a create option */
	ck_assert_tool(2, "frobnicate");
	ck_assert_err_has("unknown verb 'frobnicate'");
	ck_assert_tool(2, "--bogus");
	ck_assert_err_has("'--bogus'");
	ck_assert_int_eq(tool(NULL), 2);
	ck_assert_err_has("missing verb");
	ck_assert_tool(2, "create", "--model", "m", "--page-tokens", "16", "--tp", "2", "--pages", "4", "--kv",
		       "kv,bf16,4,256,2");
	ck_assert_err_has("missing pool NAME");
	ck_assert_tool(2, "create", name, "--page-tokens", "16", "--tp", "2", "--pages", "4", "--kv",
		       "kv,bf16,4,256,2");
	ck_assert_err_has("missing --model");
	ck_assert_tool(2, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--pages", "4");
	ck_assert_err_has("--kv or --state");
	ck_assert_tool(2, "create", "bad/name", "--model", "m", "--page-tokens", "16", "--tp", "2", "--pages", "4",
		       "--kv", "kv,bf16,4,256,2");
	ck_assert_err_has("'bad/name'");
	ck_assert_tool(2, "info");
	ck_assert_err_has("missing pool NAME");
	ck_assert_tool(2, "info", name, "other");
	ck_assert_err_has("unexpected argument 'other'");
	ck_assert_tool(2, "info", name, "--json=yes");
	ck_assert_err_has("'--json=yes' takes no value");
	ck_assert_tool(2, "destroy", name, "--frce");
	ck_assert_err_has("'--frce'");
	ck_assert_tool(2, "ls", "stray");
	ck_assert_err_has("'stray'");
	ck_assert_tool(2, "help", "frobnicate");
	ck_assert_err_has("'frobnicate'");
}
END_TEST

/* ---- failures: exit 1 with the library's message */

START_TEST(destroy_missing)
{
	const char *name = hct_name();

	ck_assert_tool(1, "destroy", name);
	ck_assert_err_has("hicache-pool: destroy: no pool");
	ck_assert_err_has(name);
	ck_assert_tool(1, "repair", name);
	ck_assert_err_has("no pool");
}
END_TEST

START_TEST(not_a_pool)
{
	const char *name = hct_name();
	char junk[8192];
	json_object *o, *e;
	int fd;

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)(i * 131 + 7);
	fd = open(shm_path(name), O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);

	ck_assert_tool(1, "info", name);
	ck_assert_err_has("not a hicache pool");
	ck_assert_tool(1, "info", name, "--no-recover");
	ck_assert_err_has("not a hicache pool");
	ck_assert_tool(1, "repair", name);
	ck_assert_err_has("not a hicache pool");

	/* ls keeps going and lists it with the reason */
	ck_assert_tool(0, "ls", "--json");
	o = jparse(r.out);
	e = ls_find(o, name);
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(jstr(e, "status"), "error");
	ck_assert_msg(strstr(jstr(e, "error"), "not a hicache pool"), "error: %s", jstr(e, "error"));
	json_object_put(o);
	ck_assert_tool(0, "ls");
	ck_assert_out_has("not a hicache pool");

	/* destroy refuses a file it cannot check, unless forced */
	ck_assert_tool(1, "destroy", name);
	ck_assert_err_has("--force");
	ck_assert_int_eq(access(shm_path(name), F_OK), 0);
	ck_assert_tool(0, "destroy", name, "--force");
	ck_assert_int_eq(access(shm_path(name), F_OK), -1);
}
END_TEST

START_TEST(create_existing)
{
	const char *name = hct_name();
	json_object *o;

	create_tiny(name, "4");
	ck_assert_tool(1, "create", name, "--model", "other", "--page-tokens", "32", "--tp", "1", "--kv",
		       "kv,f16,2,128,1", "--pages", "6");
	ck_assert_err_has("already exists");
	/* the first pool is untouched */
	ck_assert_tool(0, "info", name, "--json");
	o = jparse(r.out);
	ck_assert_str_eq(jstr(o, "model_id"), "test/tool-1b");
	ck_assert_int_eq(jint(o, "npages"), 4);
	json_object_put(o);
	ck_assert_tool(0, "destroy", name);
}
END_TEST

/* create says how the allocation and the population go: without a
 * terminal a line every HICACHE_PROGRESS_SECONDS (10: nothing for a small
 * pool), each phase's last at 100%; a bad value is the default. */
START_TEST(create_progress)
{
	const char *name = hct_name();
	char *a, *p;

	setenv("HICACHE_PROGRESS_SECONDS", "0", 1);
	create_tiny(name, "4");
	a = strstr(r.err, "hicache-pool create: allocating the pool 0 B of ");
	p = strstr(r.err, "hicache-pool create: populating the page tables 0 B of ");
	ck_assert_msg(a && p && a < p, "stderr: %s", r.err);
	ck_assert_msg(strstr(a, "(100%)") && strstr(a, "(100%)") < p, "allocation never ends: %s", r.err);
	ck_assert_msg(strstr(p, "(100%)"), "population never ends: %s", r.err);
	ck_assert_out_has("created pool");
	ck_assert_tool(0, "destroy", name);
	setenv("HICACHE_PROGRESS_SECONDS", "-3", 1); /* not a number of seconds: 10 */
	create_tiny(name, "4");
	ck_assert_str_eq(r.err, "");
	ck_assert_tool(0, "destroy", name);
	setenv("HICACHE_PROGRESS_SECONDS", "3600", 1); /* a step shorter than that says nothing */
	create_tiny(name, "4");
	ck_assert_str_eq(r.err, "");
	unsetenv("HICACHE_PROGRESS_SECONDS");
	ck_assert_tool(0, "destroy", name);
}
END_TEST

/* The library refuses a shape the parser cannot judge: exit 1, its message. */
START_TEST(library_refusal)
{
	const char *name = hct_name();

	ck_assert_tool(1, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--head-groups", "2",
		       "--kv", "kv,bf16,3,256,2", "--pages", "4");
	ck_assert_err_has("3 KV heads do not split into 2 head groups");
	ck_assert_tool(1, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--kv", "kv,f32,4,6,2",
		       "--pages", "4");
	ck_assert_err_has("head_bytes 6 is not a multiple of the f32 size 4");
	ck_assert_tool(1, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--kv", "kv,bf16,4,256,2",
		       "--size", "100");
	ck_assert_err_has("holds no page");
	/* 8 KV heads over TP 3: no rank's share is whole; it once made 1 head group */
	ck_assert_tool(1, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "3", "--kv", "kv,bf16,8,64,2",
		       "--pages", "4");
	ck_assert_err_has(
		"component 'kv': 8 KV heads do not split over TP 3 (neither divides the other): give a TP size "
		"that divides 8 or is a multiple of it");
	/* a directory that is not there, named; a link to nothing, not "someone else" */
	ck_assert_tool(1, "create", name, "--dir", "/nonexistent-hct", "--model", "m", "--page-tokens", "16", "--tp",
		       "1", "--kv", "kv,bf16,2,64,2", "--pages", "4");
	ck_assert_err_has("cannot create a pool in /nonexistent-hct: No such file or directory: the directory does "
			  "not exist");
	{
		char dir[256], link_path[512];
		hct_mkdtemp(dir, sizeof(dir), "tool-dangling");
		snprintf(link_path, sizeof(link_path), "%s/hicache.%s", dir, name);
		ck_assert_int_eq(symlink("/nonexistent-hct/x", link_path), 0);
		ck_assert_tool(1, "create", name, "--dir", dir, "--model", "m", "--page-tokens", "16", "--tp", "1",
			       "--kv", "kv,bf16,2,64,2", "--pages", "4");
		ck_assert_err_has("is a symbolic link to nothing, not a pool: remove it");
		unlink(link_path);
		rmdir(dir);
	}
	/* a model id with a control byte: info and ls would print it raw */
	ck_assert_tool(1, "create", name, "--model", "line\none", "--page-tokens", "16", "--tp", "1", "--kv",
		       "kv,bf16,2,64,2", "--pages", "4");
	ck_assert_err_has("model id has a control byte 0x0a at offset 4: give printable text");
	ck_assert_int_eq(access(shm_path(name), F_OK), -1);
}
END_TEST

/* --size rounds down to whole envelopes; other options reach the pool. */
START_TEST(create_options)
{
	const char *name = hct_name();
	json_object *o, *c;
	struct stat st;

	/* one envelope: 4 heads x 256 B x 16 tokens x K/V x 2 layers = 64 KiB */
	ck_assert_tool(0, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--head-groups", "4",
		       "--kv", "kv,bf16,4,256,2", "--kv", "mla,fp8_e4m3,1,64,3,replicated", "--size", "1000K",
		       "--max-ranks", "8", "--mode", "0660", "--quarantine-ms", "50");
	ck_assert_tool(0, "info", name, "--json");
	o = jparse(r.out);
	ck_assert_int_eq(jint(o, "head_groups"), 4);
	ck_assert_int_eq(jint(o, "max_ranks"), 8);
	ck_assert_int_eq(jint(o, "quarantine_ms"), 50);
	/* kv 64 KiB + mla 16 x 64 x 2 x 3 = 6 KiB -> 8 KiB: 72 KiB; 1000 KiB / 72 KiB = 13 pages */
	ck_assert_int_eq(jint(o, "envelope_bytes"), 73728);
	ck_assert_int_eq(jint(o, "npages"), 1000 * 1024 / 73728);
	c = json_object_array_get_idx(jget(o, "components", json_type_array), 1);
	ck_assert_str_eq(jstr(c, "dtype"), "fp8_e4m3");
	ck_assert_str_eq(jstr(c, "sharding"), "replicated");
	ck_assert_int_eq(jint(c, "groups"), 1);
	ck_assert_int_eq(jint(c, "offset"), 65536);
	json_object_put(o);
	ck_assert_int_eq(stat(shm_path(name), &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0660);
	ck_assert_tool(0, "destroy", name);

	/* The cache options: eviction policy, tickets, hit windows. */
	ck_assert_tool(0, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--kv", "kv,bf16,4,64,2",
		       "--kv", "swa,bf16,4,64,2,window=4", "--state", "st,f32,1024,1,replicated,window=1", "--pages",
		       "16", "--evict", "lru", "--max-tickets", "128", "--ticket-keys", "512");
	ck_assert_tool(0, "info", name, "--json");
	o = jparse(r.out);
	ck_assert_str_eq(jstr(o, "evict"), "lru");
	ck_assert_int_eq(jint(o, "max_tickets"), 128);
	ck_assert_int_eq(jint(o, "ticket_keys"), 512);
	c = json_object_array_get_idx(jget(o, "components", json_type_array), 0);
	ck_assert_int_eq(jint(c, "window_pages"), 0);
	c = json_object_array_get_idx(jget(o, "components", json_type_array), 1);
	ck_assert_int_eq(jint(c, "window_pages"), 4);
	c = json_object_array_get_idx(jget(o, "components", json_type_array), 2);
	ck_assert_int_eq(jint(c, "window_pages"), 1);
	ck_assert_str_eq(jstr(c, "sharding"), "replicated");
	json_object_put(o);
	ck_assert_tool(0, "destroy", name);
	ck_assert_tool(2, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--kv", "kv,bf16,4,64,2",
		       "--pages", "16", "--evict", "fifo");
	ck_assert_msg(strstr(r.err, "'clock' or 'lru'"), "stderr: %s", r.err);
	ck_assert_tool(2, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--kv", "kv,bf16,4,64,2",
		       "--pages", "16", "--max-tickets", "100");
	ck_assert_msg(strstr(r.err, "multiple of 64"), "stderr: %s", r.err);
	ck_assert_tool(2, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--kv",
		       "kv,bf16,4,64,2,window=0", "--pages", "16");
	ck_assert_tool(2, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--kv",
		       "kv,bf16,4,64,2,windows=2", "--pages", "16");
	ck_assert_msg(strstr(r.err, "window=PAGES"), "stderr: %s", r.err);

	/* The host-memory mode and the request path's sizes. */
	ck_assert_tool(0, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--kv", "kv,bf16,4,64,2",
		       "--pages", "16", "--host-mode", "buffer_only", "--ring-entries", "16", "--arg-bytes", "8K",
		       "--max-ranks", "4");
	ck_assert_tool(0, "info", name, "--json");
	o = jparse(r.out);
	ck_assert_str_eq(jstr(o, "host_mode"), "buffer_only");
	ck_assert_int_eq(jint(o, "ring_entries"), 16);
	ck_assert_int_eq(jint(o, "completion_entries"), 32);
	ck_assert_int_eq(jint(o, "arg_bytes"), 8192);
	json_object_put(o);
	ck_assert_tool(0, "info", name);
	ck_assert_msg(
		strstr(r.out, "host mode    buffer_only; requests: 16 a rank, 32 completions, 8 KiB of arguments"),
		"stdout: %s", r.out);
	ck_assert_tool(0, "destroy", name);
	ck_assert_tool(2, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--kv", "kv,bf16,4,64,2",
		       "--pages", "16", "--host-mode", "buffer");
	ck_assert_msg(strstr(r.err, "'cache' or 'buffer_only'"), "stderr: %s", r.err);
	ck_assert_tool(2, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--kv", "kv,bf16,4,64,2",
		       "--pages", "16", "--ring-entries", "100");
	ck_assert_msg(strstr(r.err, "power of two"), "stderr: %s", r.err);
	ck_assert_tool(2, "create", name, "--model", "m", "--page-tokens", "16", "--tp", "2", "--kv", "kv,bf16,4,64,2",
		       "--pages", "16", "--arg-bytes", "5000");
	ck_assert_msg(strstr(r.err, "multiple of 4096"), "stderr: %s", r.err);
}
END_TEST

/* ls in another directory: pools, leftovers of an interrupted create. */
START_TEST(ls_dir_incomplete)
{
	char dir[] = "/tmp/hctest-tool-XXXXXX", path[512], fifo[512];
	const char *name = hct_name();
	json_object *o, *e;
	int fd;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_tool(0, "ls", "--dir", dir);
	ck_assert_out_has("no pools");
	ck_assert_tool(0, "create", name, "--dir", dir, "--model", "m", "--page-tokens", "16", "--tp", "1", "--kv",
		       "kv,f16,2,64,1", "--pages", "4");
	ck_assert_int_eq(access(shm_path(name), F_OK), -1);
	snprintf(path, sizeof(path), "%s/.hicache.half.v2.creating.4242", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	/* attaching a fifo would block on open: ls must look first */
	snprintf(fifo, sizeof(fifo), "%s/hicache.fifo", dir);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);

	ck_assert_tool(0, "ls", "--dir", dir);
	ck_assert_out_has("hicache.fifo is not a pool: it is a fifo");
	ck_assert_out_has("incomplete (creator pid 4242)");
	ck_assert_out_has("half.v2");
	ck_assert_out_has(name);
	ck_assert_tool(0, "ls", "--dir", dir, "--json");
	o = jparse(r.out);
	ck_assert_uint_eq(json_object_array_length(jget(o, "pools", json_type_array)), 3);
	e = ls_find(o, "fifo");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(jstr(e, "status"), "error");
	e = ls_find(o, "half.v2");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(jstr(e, "status"), "incomplete");
	ck_assert_int_eq(jint(e, "creator_pid"), 4242);
	e = ls_find(o, name);
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(jstr(e, "status"), "ok");
	ck_assert_int_eq(jint(e, "npages"), 4);
	json_object_put(o);

	ck_assert_tool(0, "info", name, "--dir", dir);
	ck_assert_tool(0, "destroy", name, "--dir", dir);
	unlink(path);
	unlink(fifo);
	ck_assert_int_eq(rmdir(dir), 0);
	ck_assert_tool(1, "ls", "--dir", dir);
	ck_assert_err_has(dir);
}
END_TEST

START_TEST(help_and_version)
{
	static const char *const verbs[] = { "create", "info",  "ls",    "stat",    "check",
					     "keys",   "evict", "clear", "destroy", "repair" };

	ck_assert_tool(0, "--version");
	ck_assert_out_has("hicache-pool (hicache) " HICACHE_VERSION_STRING "\n");
	ck_assert_tool(0, "--help");
	for (unsigned i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
		char want[64];

		snprintf(want, sizeof(want), "\n  %s ", verbs[i]);
		ck_assert_out_has(want);
	}
	for (unsigned i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
		char want[64];

		ck_assert_tool(0, "help", verbs[i]);
		snprintf(want, sizeof(want), "Usage: hicache-pool %s ", verbs[i]);
		ck_assert_out_has(want);
	}
	ck_assert_tool(0, "create", "--help");
	ck_assert_out_has("--page-tokens");
	ck_assert_out_has("--numa");
	ck_assert_tool(0, "help", "info");
	ck_assert_out_has("--no-recover");
	ck_assert_tool(0, "repair", "-h");
	ck_assert_out_has("Usage: hicache-pool repair");
	ck_assert_tool(0, "stat", "--help");
	ck_assert_out_has("--prometheus");
	ck_assert_tool(0, "check", "--help");
	ck_assert_out_has("--quiescent");
	ck_assert_tool(0, "keys", "-h");
	ck_assert_out_has("--limit");
	ck_assert_tool(0, "evict", "--help");
	ck_assert_out_has("--count N");
	ck_assert_tool(2, "frobnicate");
	ck_assert_err_has(
		"use create, info, ls, stat, top, check, keys, evict, clear, destroy, repair, backend or help");
}
END_TEST

/* ---- stat, check, keys, evict, clear, and ranks and engines in ls */

/* A rank of its own in this (forked) test process, on a pool the tool made. */
static hc_pool *rank_on(const char *name)
{
	return hct_attach(name, 0);
}

/* The line of r.out that starts with 'start' (NULL if none), copied into buf. */
static char *out_line(const char *start, char *buf, size_t len)
{
	for (const char *l = r.out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		size_t n = strcspn(l, "\n");

		if (!strncmp(l, start, strlen(start))) {
			snprintf(buf, len, "%.*s", (int)n, l);
			return buf;
		}
	}
	return NULL;
}

/* Every counter and gauge the library reports, in each of the three formats. */
START_TEST(stat_formats)
{
	const char *name = hct_name();
	hc_key_t keys[4], other[2];
	uint64_t lib_ctr[HC_CTR__COUNT];
	json_object *o, *ctr, *pages;
	char want[1024], line[512];
	hc_pool *p;

	create_tiny(name, "16");
	/* an idle pool: no hit ratio yet */
	ck_assert_tool(0, "stat", name, "--json");
	o = jparse(r.out);
	ck_assert(json_object_is_type(jget(o, "hit_ratio", json_type_null), json_type_null));
	ck_assert_int_eq(jint(jget(o, "counters", json_type_object), "lookups"), 0);
	json_object_put(o);
	ck_assert_tool(0, "stat", name);
	ck_assert_ptr_nonnull(out_line("  hit_ratio ", line, sizeof(line)));
	ck_assert_msg(strstr(line, " -  hits / lookup_keys"), "line: %s", line);

	p = rank_on(name);
	hct_keys(keys, 4, 11);
	hct_keys(other, 2, 12);
	ck_assert_int_eq(hct_store(p, keys, 4, 0), 4);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(hct_hit(p, keys, 4), 4);
	ck_assert_int_eq(hct_hit(p, other, 2), 0);
	hct_counters(p, lib_ctr);

	ck_assert_tool(0, "stat", name, "--json");
	o = jparse(r.out);
	ck_assert_str_eq(jstr(o, "name"), name);
	ck_assert_int_eq(jint(o, "npages"), 16);
	ctr = jget(o, "counters", json_type_object);
	ck_assert_int_eq(jint(ctr, "lookups"), 6);
	ck_assert_int_eq(jint(ctr, "lookup_keys"), 22);
	ck_assert_int_eq(jint(ctr, "hits"), 20);
	ck_assert_int_eq(jint(ctr, "reserves"), 4);
	ck_assert_uint_eq(json_object_object_length(ctr), HC_CTR__COUNT);
	for (unsigned i = 0; i < HC_CTR__COUNT; i++)
		ck_assert_int_eq(jint(ctr, hc_counter_name(i)), (int64_t)lib_ctr[i]);
	pages = jget(o, "pages", json_type_object);
	ck_assert_int_eq(jint(pages, "ready"), 4);
	ck_assert_int_eq(jint(pages, "free"), 12);
	ck_assert_int_eq(jint(o, "keyed_pages"), 4);
	ck_assert_int_eq(jint(o, "live_ranks"), 1);
	ck_assert_int_eq(jint(o, "engines"), 0);
	ck_assert_int_eq(jint(o, "pins_held"), 0);
	ck_assert_double_eq_tol(json_object_get_double(jget(o, "hit_ratio", json_type_double)), 20.0 / 22.0, 1e-9);
	json_object_put(o);

	/* text: "  name  value  help", every counter with the library's value */
	ck_assert_tool(0, "stat", name);
	snprintf(want, sizeof(want), "pool '%s' at %s: 16 pages\n", name, shm_path(name));
	ck_assert_msg(!strncmp(r.out, want, strlen(want)), "first line:\n%s", r.out);
	for (unsigned i = 0; i < HC_CTR__COUNT; i++) {
		unsigned long long v;
		char n[64];

		snprintf(want, sizeof(want), "  %s ", hc_counter_name(i));
		ck_assert_msg(out_line(want, line, sizeof(line)), "no line for %s:\n%s", hc_counter_name(i), r.out);
		ck_assert_int_eq(sscanf(line, " %63s %llu", n, &v), 2);
		ck_assert_uint_eq(v, lib_ctr[i]);
		ck_assert_msg(strstr(line, hc_counter_help(i)), "line lacks the help: %s", line);
	}
	ck_assert_out_has("service request latency");
	ck_assert_ptr_nonnull(out_line("  prefetch ", line, sizeof(line)));
	ck_assert_msg(strstr(line, "0 requests, mean      0.0, p50         -"), "line: %s", line);
	ck_assert_ptr_nonnull(out_line("  pages_ready ", line, sizeof(line)));
	ck_assert_ptr_nonnull(out_line("  hit_ratio ", line, sizeof(line)));
	ck_assert_msg(strstr(line, " 0.909  hits / lookup_keys"), "line: %s", line);
	/* one column: the value ends at the same offset on every line */
	{
		char a[512], b[512];
		out_line("  hits ", a, sizeof(a));
		out_line("  pages_quarantine ", b, sizeof(b));
		ck_assert_int_eq((int)(strstr(a, "  keys found") - a), (int)(strstr(b, "  pages in state") - b));
	}

	/* Prometheus 0.0.4: every sample "name{labels} value", HELP and TYPE first */
	ck_assert_tool(0, "stat", name, "--prometheus");
	{
		char helped[128][64], typed[128][64], types[128][16];
		unsigned nh = 0, nt = 0, samples = 0;
		char *save = NULL, *buf = strdup(r.out);

		for (char *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
			char metric[128], labels[256], rest[64];
			double v;
			unsigned k;
			size_t ml;

			if (!strncmp(l, "# HELP ", 7)) {
				ck_assert_int_eq(sscanf(l, "# HELP %63s", helped[nh]), 1);
				ck_assert_msg(strlen(l) > 8 + strlen(helped[nh]), "empty HELP: %s", l);
				nh++;
				continue;
			}
			if (!strncmp(l, "# TYPE ", 7)) {
				ck_assert_int_eq(sscanf(l, "# TYPE %63s %15s", typed[nt], types[nt]), 2);
				ck_assert_msg(!strcmp(types[nt], "gauge") || !strcmp(types[nt], "counter") ||
						      !strcmp(types[nt], "histogram"),
					      "%s", l);
				ck_assert_msg(nh == nt + 1 && !strcmp(helped[nt], typed[nt]),
					      "TYPE without its HELP: %s", l);
				nt++;
				continue;
			}
			ck_assert_msg(l[0] != '#', "unknown comment: %s", l);
			ck_assert_msg(sscanf(l, "%127[a-zA-Z0-9_:]{%255[^}]} %lf%63s", metric, labels, &v, rest) == 3,
				      "not 'name{labels} value': %s", l);
			ck_assert_msg(isalpha((unsigned char)metric[0]) || metric[0] == '_', "bad name: %s", l);
			/* labels: key="value" pairs, comma separated, the pool first */
			snprintf(want, sizeof(want), "pool=\"%s\"", name);
			ck_assert_msg(!strncmp(labels, want, strlen(want)), "labels: %s", l);
			for (char *q = labels; *q;) {
				char key[64];
				int used = 0;
				ck_assert_msg(sscanf(q, "%63[a-zA-Z_]=\"%*[^\"]\"%n", key, &used) == 1 && used > 0,
					      "bad labels: %s", l);
				q += used;
				ck_assert_msg(*q == 0 || *q == ',', "bad labels: %s", l);
				q += *q == ',';
			}
			for (k = 0; k < nt && strcmp(typed[k], metric); k++)
				;
			/* a histogram's samples: its name and _bucket, _sum or _count */
			ml = strlen(metric);
			for (const char *const *sfx = (const char *const[]){ "_bucket", "_sum", "_count", NULL };
			     k == nt && *sfx; sfx++)
				if (ml > strlen(*sfx) && !strcmp(metric + ml - strlen(*sfx), *sfx))
					for (k = 0;
					     k < nt && (strncmp(typed[k], metric, ml - strlen(*sfx)) ||
							typed[k][ml - strlen(*sfx)] || strcmp(types[k], "histogram"));
					     k++)
						;
			ck_assert_msg(k < nt, "sample before its HELP and TYPE: %s", l);
			if (!strcmp(types[k], "histogram")) {
				ck_assert_msg(strstr(labels, ",kind=\"") || strstr(labels, ",tier=\""),
					      "a histogram sample without its kind or tier: %s", l);
				samples++;
				continue;
			}
			ck_assert_msg(!strcmp(types[k], "counter") ==
					      (strlen(metric) > 6 && !strcmp(metric + strlen(metric) - 6, "_total")),
				      "counter names end in _total, gauges do not: %s", l);
			samples++;
		}
		free(buf);
		ck_assert_uint_eq(nh, nt);
		ck_assert_uint_eq(nt, 5 + HC_CLI_NGAUGES + HC_CTR__COUNT + 2);
		ck_assert_uint_eq(samples, 3 + 2 * HC_PAGE__COUNT + HC_CLI_NGAUGES + HC_CTR__COUNT +
						   (HC_HIST__COUNT + HC_TIER__COUNT) * (HC_HIST_BUCKETS + 2));
	}
	snprintf(want, sizeof(want), "\nhicache_hits_total{pool=\"%s\"} 20\n", name);
	ck_assert_out_has(want);
	snprintf(want, sizeof(want), "\nhicache_pages{pool=\"%s\",state=\"ready\"} 4\n", name);
	ck_assert_out_has(want);
	ck_assert_out_has("# TYPE hicache_lookups_total counter\n");
	ck_assert_out_has("# TYPE hicache_pages gauge\n");

	hc_pool_detach(p);
	ck_assert_tool(0, "destroy", name);
}
END_TEST

/* A healthy pool passes; pages whose KEYED flag disagrees with the index fail. */
START_TEST(check_pool)
{
	const char *name = hct_name();
	hc_key_t keys[3];
	hc_page_t pg;
	json_object *o, *v;
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .nkeys = 1 };
	char want[128];
	uint32_t free_id = 15, flags;
	hc_pool *p;

	create_tiny(name, "16");
	p = rank_on(name);
	hct_keys(keys, 3, 21);
	ck_assert_int_eq(hct_store(p, keys, 3, 0), 3);
	ck_assert_tool(0, "check", name);
	snprintf(want, sizeof(want), "pool '%s': ok, no violations (live check)\n", name);
	ck_assert_str_eq(r.out, want);
	ck_assert_tool(0, "check", name, "--quiescent", "--json");
	o = jparse(r.out);
	ck_assert_int_eq(jbool(o, "ok"), 1);
	ck_assert_int_eq(jbool(o, "quiescent"), 1);
	ck_assert_int_eq(jint(o, "count"), 0);
	ck_assert_uint_eq(json_object_array_length(jget(o, "violations", json_type_array)), 0);
	json_object_put(o);

	/* A READY page the index names, but not flagged keyed: nothing can find
	 * or free it, at any time (a page is keyed before it is READY); the
	 * stale index entry counts only in a quiescent check (an unkeyer could
	 * be mid-way). */
	rq.keys = &keys[1];
	ck_assert_int_eq(hc_lookup(p, &rq, &pg), 1);
	flags = atomic_exchange(&p->pages[HC_PAGE_ID(pg)].flags, 0);
	ck_assert_tool(1, "check", name);
	snprintf(want, sizeof(want), "page %u: READY, neither keyed nor allocated without a key", HC_PAGE_ID(pg));
	ck_assert_out_has(want);
	ck_assert_out_has("1 violation (live check)");
	ck_assert_tool(1, "check", name, "--quiescent");
	snprintf(want, sizeof(want), "names page %u, which is READY and not keyed", HC_PAGE_ID(pg));
	ck_assert_out_has(want);
	ck_assert_out_has("2 violations (quiescent check)");
	atomic_store(&p->pages[HC_PAGE_ID(pg)].flags, flags);

	/* a FREE page flagged keyed is wrong at any time */
	ck_assert_int_eq(hc_page_state(p, free_id, NULL, NULL, NULL), HC_PAGE_FREE);
	atomic_store(&p->pages[free_id].flags, HC_PF_KEYED);
	ck_assert_tool(1, "check", name);
	snprintf(want, sizeof(want), "page %u: FREE but still flagged as keyed\n", free_id);
	ck_assert_out_has(want);
	ck_assert_out_has("1 violation (live check)");
	ck_assert_str_eq(r.err, "");
	ck_assert_tool(1, "check", name, "--json");
	o = jparse(r.out);
	ck_assert_int_eq(jbool(o, "ok"), 0);
	ck_assert_int_eq(jint(o, "count"), 1);
	v = jget(o, "violations", json_type_array);
	ck_assert_uint_eq(json_object_array_length(v), 1);
	ck_assert_msg(strstr(json_object_get_string(json_object_array_get_idx(v, 0)), "flagged as keyed"), "%s", r.out);
	json_object_put(o);
	atomic_store(&p->pages[free_id].flags, 0);
	ck_assert_tool(0, "check", name, "--quiescent");

	hc_pool_detach(p);
	ck_assert_tool(0, "destroy", name);
}
END_TEST

/* What check names, repair fixes, or says it cannot. */
START_TEST(repair_damage)
{
	const char *name = hct_name();
	hc_key_t keys[3];
	hc_page_t pg;
	json_object *o, *fix;
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .nkeys = 1 };
	char want[128];
	uint32_t free_id = 15;
	hc_pool *p;

	create_tiny(name, "16");
	p = rank_on(name);
	hct_keys(keys, 3, 23);
	ck_assert_int_eq(hct_store(p, keys, 3, 0), 3);
	rq.keys = &keys[1];
	ck_assert_int_eq(hc_lookup(p, &rq, &pg), 1);
	atomic_store(&p->pages[HC_PAGE_ID(pg)].flags, 0); /* READY, no key, no owner: lost */
	atomic_store(&p->pages[free_id].flags, HC_PF_KEYED);
	ck_assert_tool(1, "check", name, "--quiescent");

	ck_assert_tool(0, "repair", name, "--json", "--quiescent");
	o = jparse(r.out);
	ck_assert_int_eq(jbool(o, "ok"), 1);
	fix = jget(o, "repair", json_type_object);
	ck_assert_int_eq(jint(fix, "damaged") + jint(fix, "lost"), 1);
	ck_assert_int_eq(jint(fix, "bad_words"), 1);
	ck_assert_int_eq(jint(fix, "index_bad"), 1);
	ck_assert_int_eq(jint(fix, "unrepaired"), 0);
	ck_assert_uint_eq(json_object_array_length(jget(o, "lines", json_type_array)), 3);
	json_object_put(o);
	ck_assert_tool(0, "check", name, "--quiescent");
	ck_assert_int_eq(hct_hit(p, keys, 1), 1);
	ck_assert_int_eq(hct_hit(p, keys + 2, 1), 1);

	/* a damaged page this rank pins: reported, left, exit 1 */
	rq.keys = &keys[0];
	ck_assert_int_eq(hc_lookup(p, &rq, &pg), 1);
	ck_assert_ok(hc_page_pin(p, pg));
	atomic_store(&p->pages[HC_PAGE_ID(pg)].depth, 77);
	ck_assert_tool(1, "repair", name);
	snprintf(want, sizeof(want), "cannot repair: page %u:", HC_PAGE_ID(pg));
	ck_assert_out_has(want);
	ck_assert_out_has("partly repaired pool");
	ck_assert_err_has("could not be repaired");
	ck_assert_ok(hc_page_unpin(p, pg));
	ck_assert_tool(0, "repair", name);
	ck_assert_out_has("fail their check; freed");
	ck_assert_tool(0, "check", name, "--quiescent");

	hc_pool_detach(p);
	ck_assert_tool(0, "destroy", name);
}
END_TEST

START_TEST(keys_list)
{
	const char *name = hct_name();
	hc_key_t keys[6];
	char hex[6][65], pfx[8], want[128], line[512];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .nkeys = 2, .flags = HC_LOOKUP_PIN };
	hc_page_t pg[2];
	json_object *o, *a, *e;
	const char *prev = "";
	hc_pool *p;

	create_tiny(name, "16");
	ck_assert_tool(0, "keys", name);
	ck_assert_str_eq(r.out, "0 shown of 0 matching keys\n");

	p = rank_on(name);
	hct_keys(keys, 6, 31);
	for (int i = 0; i < 6; i++)
		hex_of(keys[i], hex[i]);
	ck_assert_int_eq(hct_store(p, keys, 6, 0), 6);
	rq.keys = keys;
	ck_assert_int_eq(hc_lookup(p, &rq, pg), 2); /* pins keys 0 and 1 */
	ck_assert_ok(hc_page_lock(p, pg[1]));

	ck_assert_tool(0, "keys", name, "--json");
	o = jparse(r.out);
	ck_assert_int_eq(jint(o, "matching"), 6);
	ck_assert_int_eq(jint(o, "shown"), 6);
	ck_assert_str_eq(jstr(o, "prefix"), "");
	a = jget(o, "keys", json_type_array);
	ck_assert_uint_eq(json_object_array_length(a), 6);
	for (size_t i = 0; i < 6; i++) {
		const char *k;
		int d;

		e = json_object_array_get_idx(a, i);
		k = jstr(e, "key");
		ck_assert_msg(strcmp(prev, k) < 0, "not sorted: %s after %s", k, prev);
		prev = k;
		for (d = 0; d < 6 && strcmp(hex[d], k); d++)
			;
		ck_assert_msg(d < 6, "unknown key %s", k);
		ck_assert_int_eq(jint(e, "depth"), d);
		ck_assert_str_eq(jstr(e, "state"), "READY");
		ck_assert_int_eq(jint(e, "pins"), d < 2);
		ck_assert_int_eq(jint(e, "locks"), d == 1);
		ck_assert_int_eq(jint(e, "tickets"), 0);
		if (d < 2)
			ck_assert_int_eq(jint(e, "page"), HC_PAGE_ID(pg[d]));
	}
	json_object_put(o);

	/* text: one row per key, 64 hex digits first; a footer */
	ck_assert_tool(0, "keys", name);
	ck_assert_ptr_nonnull(out_line("KEY ", line, sizeof(line)));
	ck_assert_ptr_nonnull(out_line(hex[1], line, sizeof(line)));
	snprintf(want, sizeof(want), "%s  %8u  READY ", hex[1], HC_PAGE_ID(pg[1]));
	ck_assert_msg(!strncmp(line, want, strlen(want)), "row: %s", line);
	ck_assert_out_has("\n6 shown of 6 matching keys\n");

	/* a prefix, in upper case, and a limit */
	for (int i = 0; i < 3; i++)
		pfx[i] = (char)toupper((unsigned char)hex[4][i]);
	pfx[3] = 0;
	ck_assert_tool(0, "keys", name, pfx, "--json");
	o = jparse(r.out);
	ck_assert_int_ge(jint(o, "matching"), 1);
	a = jget(o, "keys", json_type_array);
	for (size_t i = 0; i < json_object_array_length(a); i++)
		ck_assert_int_eq(strncmp(jstr(json_object_array_get_idx(a, i), "key"), hex[4], 3), 0);
	json_object_put(o);
	ck_assert_tool(0, "keys", name, hex[4]);
	ck_assert_out_has("1 shown of 1 matching key (prefix ");
	ck_assert_tool(0, "keys", name, "--limit", "2");
	ck_assert_out_has("\n2 shown of 6 matching keys\n");
	ck_assert_tool(0, "keys", "--limit", "1", name, "--json");
	o = jparse(r.out);
	ck_assert_int_eq(jint(o, "shown"), 1);
	ck_assert_int_eq(jint(o, "matching"), 6);
	json_object_put(o);

	hc_pool_detach(p);
	ck_assert_tool(0, "destroy", name);
}
END_TEST

/* backend attach and detach: against a service in a child process (this
 * process forks the tool, so it runs no service threads itself). */
START_TEST(backend_attach_detach)
{
	const char *name = hct_name();
	char dir[64], spec[128];
	struct hc_service_opts so = { .size = sizeof(struct hc_service_opts),
				      .backend = "mem",
				      .write_policy = HC_WRITE_NONE };
	hc_key_t k[2];
	hc_page_t pg[2];
	uint8_t skip[2];
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 2 };
	hc_req *rq;
	hc_pool *p;
	pid_t svc;

	create_tiny(name, "16");
	p = hct_attach(name, 0);
	ck_assert_tool(0, "info", name);
	ck_assert_out_has("service      none (0 started so far)\n");
	svc = hct_service_child(name, &so);
	ck_assert_tool(0, "info", name);
	snprintf(spec, sizeof(spec),
		 "service      pid %d (generation 1), write policy write_none; jobs 0 queued, 0 running\n", (int)svc);
	ck_assert_out_has(spec);
	ck_assert_tool(0, "info", name, "--json");
	{
		json_object *o = jparse(r.out), *sv = jget(o, "service", json_type_object);
		ck_assert(json_object_get_boolean(jget(sv, "live", json_type_boolean)));
		ck_assert_str_eq(json_object_get_string(jget(sv, "write_policy", json_type_string)), "write_none");
		json_object_put(o);
	}
	hct_keys(k, 2, 31);
	ck_assert_tool(1, "backend", "attach", name, "mem");
	ck_assert_err_has("attached already: detach it first");
	ck_assert_tool(0, "backend", "detach", name);
	ck_assert_out_has("backend detached");
	/* none: the ranks' requests fail, saying why */
	ck_assert_ok(hc_req_exists(p, k, 2, &rq));
	ck_assert_err(hc_req_wait(rq, 10000), ENODEV);
	ck_assert_msg_has("hicache-pool backend attach");
	ck_assert_ok(hc_req_free(rq));
	ck_assert_tool(1, "backend", "detach", name);
	ck_assert_err_has("no backend is attached");
	ck_assert_tool(1, "backend", "attach", name, "nosuchplugin");
	ck_assert_err_has("not found");
	/* a slow one, to catch a transfer in flight */
	hct_mkdtemp(dir, sizeof(dir), "tool-be");
	snprintf(spec, sizeof(spec), "fault:dir=%s,delay_us=1500000", dir);
	ck_assert_tool(0, "backend", "attach", name, spec);
	ck_assert_out_has("attached");
	ck_assert_int_eq(hc_reserve(p, &rr, pg, skip), 2);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(hct_fill_commit_all(p, pg[i]), 1);
	ck_assert_ok(hc_req_backup(p, pg, 2, &rq));
	ck_assert_tool(1, "backend", "detach", name);
	ck_assert_err_has("in flight");
	ck_assert_int_eq(hc_req_wait(rq, 20000), 2);
	ck_assert_ok(hc_req_free(rq));
	ck_assert_tool(0, "backend", "detach", name);
	ck_assert_tool(0, "backend", "attach", name, "mem");
	ck_assert_ok(hc_req_exists(p, k, 2, &rq));
	ck_assert_int_eq(hc_req_wait(rq, 10000), 0); /* a new, empty store */
	ck_assert_ok(hc_req_free(rq));
	/* usage */
	ck_assert_tool(2, "backend");
	ck_assert_err_has("missing action");
	ck_assert_tool(2, "backend", "frob", name);
	ck_assert_err_has("unknown action 'frob'");
	ck_assert_tool(2, "backend", "attach", name);
	ck_assert_err_has("missing SPEC");
	ck_assert_tool(0, "backend", "--help");
	ck_assert_out_has("Usage: hicache-pool backend attach");
	hct_service_child_stop(svc);
	ck_assert_tool(0, "info", name);
	ck_assert_out_has(
		"service      none (1 started so far); the last one's write policy, write_none, still holds\n");
	hc_pool_detach(p);
	hct_rmtree(dir);
	ck_assert_tool(0, "destroy", name);
}
END_TEST

START_TEST(top_samples)
{
	const char *name = hct_name();
	hc_key_t k[3];
	hc_pool *p;

	create_tiny(name, "16");
	p = hct_attach(name, 0);
	hct_keys(k, 3, 41);
	ck_assert_int_eq(hct_store(p, k, 3, 0), 3);
	ck_assert_int_eq(hct_hit(p, k, 3), 3);
	hc_pool_detach(p);
	ck_assert_tool(0, "top", name, "--interval", "100", "--count", "2");
	ck_assert_out_has("hicache-pool top: pool '");
	ck_assert_out_has("pages:  free 13 (81%)");
	ck_assert_out_has("lookups");
	ck_assert_out_has("per second");
	ck_assert_out_has("L3 bandwidth: backup 0.0 MB/s, prefetch 0.0 MB/s; tokens/s: ");
	ck_assert_msg(!strstr(r.out, "\033["), "not a terminal: no escape codes");
	ck_assert_msg(strstr(strstr(r.out, "hicache-pool top") + 1, "hicache-pool top"), "two samples:\n%s", r.out);
	ck_assert_tool(2, "top", name, "--interval", "5");
	ck_assert_err_has("--interval");
	ck_assert_tool(1, "top", "nosuchpool");
	ck_assert_tool(0, "destroy", name);
}
END_TEST

START_TEST(evict_and_clear)
{
	const char *name = hct_name();
	hc_key_t keys[6];
	char hex[65];
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .nkeys = 1, .flags = HC_LOOKUP_PIN };
	struct hc_stats st;
	hc_page_t pg;
	hc_pool *p;

	create_tiny(name, "16");
	p = rank_on(name);
	hct_keys(keys, 6, 41);
	ck_assert_int_eq(hct_store(p, keys, 6, 0), 6);

	/* one key */
	hex_of(keys[0], hex);
	ck_assert_tool(0, "evict", name, "--key", hex);
	ck_assert_out_has("evicted key ");
	ck_assert_out_has(hex);
	ck_assert_int_eq(hct_hit(p, keys, 6), 0);
	ck_assert_int_eq(hct_hit(p, keys + 1, 5), 5);
	ck_assert_tool(1, "evict", name, "--key", hex);
	ck_assert_err_has("has key ");
	ck_assert_err_has("hicache-pool keys");
	ck_assert_msg(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "not one line: %s", r.err);

	/* a pinned key: the library's reason, and clear refuses */
	rq.keys = &keys[1];
	ck_assert_int_eq(hc_lookup(p, &rq, &pg), 1);
	hex_of(keys[1], hex);
	ck_assert_tool(1, "evict", name, "--key", hex);
	ck_assert_err_has("hicache-pool: evict: the key's page");
	ck_assert_err_has("is pinned");
	ck_assert_tool(1, "clear", name);
	ck_assert_err_has("hicache-pool: clear: pool '");
	ck_assert_err_has("is in use: 1 pins");
	ck_assert_int_eq(hct_hit(p, keys + 1, 5), 5); /* nothing freed */

	/* by policy: never the pinned page */
	ck_assert_tool(0, "evict", name, "--count", "2");
	ck_assert_out_has("evicted 2 of 2 pages asked");
	ck_assert_tool(0, "evict", name, "--count", "99");
	ck_assert_out_has("evicted 2 of 99 pages asked");
	ck_assert_out_has("no other keyed READY page is free of holds");
	ck_assert_int_eq(hct_hit(p, keys + 1, 1), 1);
	ck_assert_ok(hc_page_unpin(p, pg));

	/* idle: clear frees what is left */
	ck_assert_int_eq(hct_store(p, keys + 2, 3, 2), 3);
	ck_assert_tool(0, "clear", name);
	ck_assert_out_has("cleared pool '");
	ck_assert_out_has("': 4 pages freed\n");
	st = hct_stats(p);
	ck_assert_uint_eq(st.pages[HC_PAGE_READY], 0);
	ck_assert_uint_eq(st.keyed, 0);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_evictions), 1 + 4 + 4);
	ck_assert_uint_eq(st.live_ranks, 1); /* the tool gave its slot back */
	ck_assert_tool(0, "clear", name);
	ck_assert_out_has("': 0 pages freed\n");
	ck_assert_tool(0, "evict", name, "--count", "1");
	ck_assert_out_has("evicted 0 of 1 page asked");

	hc_pool_detach(p);
	ck_assert_tool(0, "destroy", name);
}
END_TEST

#define KEY64 "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

/* The admin verbs' command-line errors: exit 2, one line naming the bad
 * thing, before any pool is touched (none exists); then exit 1 for each on
 * a pool that does not exist. */
START_TEST(admin_usage_errors)
{
	const char *name = hct_name();
	static const struct {
		const char *args[7];
		const char *want;
	} cases[] = {
		{ { "stat", "p", "--json", "--prometheus" }, "both --json and --prometheus given: choose one" },
		{ { "stat" }, "missing pool NAME" },
		{ { "stat", "p", "--dir", "rel" }, "--dir 'rel' must be an absolute path" },
		{ { "check", "p", "--quiet" }, "'--quiet'" },
		{ { "check", "p", "q" }, "unexpected argument 'q'" },
		{ { "keys", "p", "12g4" }, "PREFIX '12g4': 'g' at offset 2 is not a hex digit" },
		{ { "keys", "p", KEY64 "0" }, "65 hex digits long: at most 64" },
		{ { "keys", "p", "--limit", "0" }, "--limit '0' is too small" },
		{ { "keys", "p", "--limit", "ten" }, "--limit 'ten' is not a decimal number" },
		{ { "keys", "p", "ab", "cd" }, "unexpected argument 'cd'" },
		{ { "keys", "bad/name" }, "'bad/name'" },
		{ { "evict", "p" }, "give exactly one of --key HEX64 and --count N" },
		{ { "evict", "p", "--count", "1", "--key", KEY64 }, "give exactly one of" },
		{ { "evict", "p", "--count", "0" }, "--count '0' is too small" },
		{ { "evict", "p", "--count", "3x" }, "--count '3x' is not a decimal number" },
		{ { "evict", "p", "--count", "-1" }, "--count '-1' is not a decimal number" },
		{ { "evict", "p", "--count", "2147483648" }, "--count '2147483648' is too large" },
		{ { "evict", "p", "--count" }, "'--count' needs a value" },
		{ { "evict", "p", "--key", "abcd" }, "expected exactly 64 hex digits" },
		{ { "evict", "p", "--key", "z" KEY64 "0" }, "expected exactly 64 hex digits" },
		{ { "evict", "p", "--key", "0z112233445566778899aabbccddeeff00112233445566778899aabbccddeeff" },
		  "'0z' at offset 0 is not hex" },
		{ { "clear", "p", "extra" }, "unexpected argument 'extra'" },
		{ { "clear", "p", "--json" }, "'--json'" },
	};
	static const char *const missing[][3] = {
		{ "stat" }, { "check" }, { "keys" }, { "evict", "--count", "1" }, { "clear" },
	};

	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *const *a = cases[i].args;
		char prefix[64];
		int got = TOOL(a[0], a[1], a[2], a[3], a[4], a[5], a[6]);

		ck_assert_msg(got == 2, "case %u (%s %s): exit %d, want 2: %s", i, a[0], a[1] ? a[1] : "", got, r.err);
		ck_assert_msg(strstr(r.err, cases[i].want), "case %u: stderr lacks \"%s\": %s", i, cases[i].want,
			      r.err);
		snprintf(prefix, sizeof(prefix), "hicache-pool: %s: ", a[0]);
		ck_assert_msg(!strncmp(r.err, prefix, strlen(prefix)), "case %u: bad prefix: %s", i, r.err);
		ck_assert_msg(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "case %u: not one line: %s", i, r.err);
		ck_assert_str_eq(r.out, "");
	}
	for (unsigned i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
		char want[128];
		int got = TOOL(missing[i][0], name, missing[i][1], missing[i][2]);

		ck_assert_msg(got == 1, "%s: exit %d, want 1: %s", missing[i][0], got, r.err);
		snprintf(want, sizeof(want), "hicache-pool: %s: no pool '%s'", missing[i][0], name);
		ck_assert_err_has(want);
	}
}
END_TEST

/* ls and info show each live rank's engine, TP rank, quota and pages held. */
START_TEST(ls_engines)
{
	const char *name = hct_name();
	struct hc_engine_spec es = { .size = sizeof(struct hc_engine_spec),
				     .engine_id = 7,
				     .tp_size = 2,
				     .quota_pages = 32 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .nkeys = 1, .flags = HC_LOOKUP_PIN };
	hc_pool *a, *b, *c, *d;
	struct hc_pool_info ia, ib, ic, id;
	json_object *o, *e, *x, *ranks, *engs;
	hc_key_t key;
	hc_page_t pg;
	char want[256];
	int seen = 0;

	create_tiny(name, "16");
	a = rank_on(name);
	b = rank_on(name);
	c = rank_on(name);
	d = rank_on(name);
	hc_pool_info(a, &ia, sizeof(ia));
	hc_pool_info(b, &ib, sizeof(ib));
	hc_pool_info(c, &ic, sizeof(ic));
	hc_pool_info(d, &id, sizeof(id));
	es.tp_rank = 1;
	ck_assert_ok(hc_engine_join(b, &es));
	es.tp_rank = 0;
	ck_assert_ok(hc_engine_join(a, &es));
	es = (struct hc_engine_spec){ .size = sizeof(struct hc_engine_spec),
				      .engine_id = 9,
				      .tp_size = 4,
				      .tp_rank = 2,
				      .quota_pages = HC_QUOTA_UNLIMITED };
	ck_assert_ok(hc_engine_join(d, &es));
	hct_keys(&key, 1, 51);
	ck_assert_int_eq(hct_store(a, &key, 1, 0), 1);
	rq.keys = &key;
	ck_assert_int_eq(hc_lookup(b, &rq, &pg), 1);

	ck_assert_tool(0, "ls", "--json");
	o = jparse(r.out);
	e = ls_find(o, name);
	ck_assert_ptr_nonnull(e);
	ck_assert_int_eq(jint(e, "live_ranks"), 4);
	ranks = jget(e, "ranks", json_type_array);
	ck_assert_uint_eq(json_object_array_length(ranks), 4);
	for (size_t i = 0; i < 4; i++) {
		x = json_object_array_get_idx(ranks, i);
		ck_assert_int_eq(jint(x, "pid"), getpid());
		ck_assert_int_eq(jbool(x, "live"), 1);
		if (jint(x, "slot") == ib.self_slot) {
			ck_assert_int_eq(jint(x, "engine_id"), 7);
			ck_assert_int_eq(jint(x, "tp_rank"), 1);
			ck_assert_int_eq(jint(x, "tp_size"), 2);
			ck_assert_int_eq(jint(x, "quota"), 32);
			ck_assert_int_eq(jint(x, "held"), 1);
			ck_assert_int_eq(jint(x, "pins"), 1);
			seen |= 1;
		} else if (jint(x, "slot") == ic.self_slot) {
			ck_assert_int_eq(jint(x, "engine_id"), -1);
			seen |= 2;
		} else if (jint(x, "slot") == id.self_slot) {
			ck_assert_int_eq(jint(x, "quota"), (int64_t)HC_QUOTA_UNLIMITED);
			seen |= 4;
		}
	}
	ck_assert_int_eq(seen, 7);
	engs = jget(e, "engines", json_type_array);
	ck_assert_uint_eq(json_object_array_length(engs), 2);
	x = json_object_array_get_idx(engs, 0);
	ck_assert_int_eq(jint(x, "engine_id"), 7);
	ck_assert_int_eq(jint(x, "tp_size"), 2);
	ck_assert_int_eq(jbool(x, "complete"), 1);
	ck_assert_int_eq(json_object_get_int(json_object_array_get_idx(jget(x, "tp_ranks", json_type_array), 1)), 1);
	ck_assert_int_eq(json_object_get_int(json_object_array_get_idx(jget(x, "slots", json_type_array), 0)),
			 ia.self_slot);
	ck_assert_int_eq(json_object_get_int(json_object_array_get_idx(jget(x, "slots", json_type_array), 1)),
			 ib.self_slot);
	x = json_object_array_get_idx(engs, 1);
	ck_assert_int_eq(jint(x, "engine_id"), 9);
	ck_assert_int_eq(jbool(x, "complete"), 0);
	json_object_put(o);

	ck_assert_tool(0, "ls");
	snprintf(want, sizeof(want), "  engine 7: tp 2, ranks 0,1 (slots %d,%d)\n", ia.self_slot, ib.self_slot);
	ck_assert_out_has(want);
	snprintf(want, sizeof(want), "  engine 9: tp 4, ranks 2 (slots %d), missing 0,1,3\n", id.self_slot);
	ck_assert_out_has(want);
	snprintf(want, sizeof(want), "  slot %d: pid %d (", ib.self_slot, (int)getpid());
	ck_assert_out_has(want);
	ck_assert_out_has("), engine 7, tp rank 1 of 2, quota 32, held 1\n");
	ck_assert_out_has("), engine 9, tp rank 2 of 4, quota unlimited, held 0\n");
	ck_assert_out_has("), no engine, held 0\n");

	/* info shows the same */
	ck_assert_tool(0, "info", name, "--json");
	o = jparse(r.out);
	ck_assert_uint_eq(json_object_array_length(jget(o, "engines", json_type_array)), 2);
	ck_assert_uint_eq(json_object_array_length(jget(o, "ranks", json_type_array)), 4);
	json_object_put(o);
	ck_assert_tool(0, "info", name);
	snprintf(want, sizeof(want), "  engine 7: tp 2, ranks 0,1 (slots %d,%d)\n", ia.self_slot, ib.self_slot);
	ck_assert_out_has(want);
	ck_assert_out_has("ENGINE");

	ck_assert_ok(hc_page_unpin(b, pg));
	hc_pool_detach(d);
	hc_pool_detach(c);
	hc_pool_detach(b);
	hc_pool_detach(a);
	ck_assert_tool(0, "destroy", name);
}
END_TEST

/* ---- JSON: every output of the shape hicache-pool(8) documents */

#define POOL_PAGE "man/hicache-pool.8"

/* r.out is one JSON object of the shape 'schema' of hicache-pool(8). */
static void ck_assert_documented(const char *schema)
{
	json_object *o = jparse(r.out);

	hct_json_documented(o, POOL_PAGE, schema);
	json_object_put(o);
}

/*
 * Each verb's --json on one small pool in a directory of its own, made so
 * that every array has elements and every optional member shows: a rank in
 * an engine that pins a page, keys, a violation for check and repair to
 * find, and beside the pool, for ls, a leftover of a create and a file that
 * is no pool.
 */
START_TEST(json_documented)
{
	const char *name = hct_name(), *dir;
	struct hc_attach_opts ao = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_NO_POPULATE };
	struct hc_engine_spec es = { .size = sizeof(struct hc_engine_spec),
				     .engine_id = 3,
				     .tp_size = 2,
				     .quota_pages = 8 };
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .nkeys = 1, .flags = HC_LOOKUP_PIN };
	uint32_t free_id = 15;
	char path[512];
	hc_key_t keys[3];
	hc_page_t pg;
	hc_pool *p;
	int fd;

	hct_l3_setup(); /* the directory goes at the end, or when the test fails */
	dir = hct_l3_dir;
	ck_assert_tool(0, "create", name, "--dir", dir, "--model", "test/json", "--page-tokens", "16", "--tp", "2",
		       "--kv", "kv,bf16,4,256,2", "--state", "st,f32,1K,2,replicated", "--pages", "16");
	ao.dir = dir;
	ck_assert_ok(hc_pool_attach(name, &ao, &p));
	ck_assert_ok(hc_engine_join(p, &es));
	ck_assert_tool(0, "stat", name, "--dir", dir, "--json"); /* no lookup yet: hit_ratio is null */
	ck_assert_documented("hicache.pool-stat/1");

	hct_keys(keys, 3, 61);
	ck_assert_int_eq(hct_store(p, keys, 3, 0), 3);
	ck_assert_int_eq(hct_hit(p, keys, 3), 3);
	rq.keys = keys;
	ck_assert_int_eq(hc_lookup(p, &rq, &pg), 1);
	ck_assert_tool(0, "stat", name, "--dir", dir, "--json");
	ck_assert_documented("hicache.pool-stat/1");
	ck_assert_tool(0, "info", name, "--dir", dir, "--json");
	ck_assert_documented("hicache.pool-info/1");
	ck_assert_tool(0, "keys", name, "--dir", dir, "--json");
	ck_assert_documented("hicache.pool-keys/1");

	ck_assert_int_eq(hc_page_state(p, free_id, NULL, NULL, NULL), HC_PAGE_FREE);
	atomic_store(&p->pages[free_id].flags, HC_PF_KEYED);
	ck_assert_tool(1, "check", name, "--dir", dir, "--json");
	ck_assert_documented("hicache.pool-check/1");
	ck_assert_tool(0, "repair", name, "--dir", dir, "--json");
	ck_assert_documented("hicache.pool-repair/1");
	ck_assert_out_has("fixed: ");

	snprintf(path, sizeof(path), "%s/.hicache.half.creating.4242", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/hicache.junk", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "not a pool", 10), 10);
	close(fd);
	ck_assert_tool(0, "ls", "--dir", dir, "--json");
	ck_assert_documented("hicache.pool-ls/1");
	ck_assert_out_has("\"incomplete\"");
	ck_assert_out_has("\"error\"");
	ck_assert_out_has("\"engines\"");

	ck_assert_ok(hc_page_unpin(p, pg));
	hc_pool_detach(p);
	ck_assert_tool(0, "destroy", name, "--dir", dir);
	hct_l3_teardown();
}
END_TEST

/* A JSON object of the shape of check --json; what each test changes in it. */
static json_object *check_json(void)
{
	return jparse("{\"schema\": \"hicache.pool-check/1\", \"name\": \"p\", \"path\": \"/dev/shm/hicache.p\","
		      " \"quiescent\": false, \"ok\": false, \"count\": 1, \"violations\": [\"page 3: bad\"]}");
}

/* The check finds what is wrong, on either side: the output or the page. */
START_TEST(json_check_has_teeth)
{
	static const struct {
		const char *member, *value; /* set (NULL: removed) in check_json() */
		const char *why;
	} wrong[] = {
		{ "schema", "\"hicache.pool-check/2\"", "schema is \"hicache.pool-check/2\"" },
		{ "extra", "1", "extra is not documented" },
		{ "count", NULL, "count is documented but missing" },
		{ "count", "\"1\"", "count is string, documented as integer" },
		{ "hit_ratio", "0.5", "hit_ratio is not documented" },
		{ "violations", "[3]", "violations[0] is int, documented as string" },
		{ "violations", "{}", "violations is object, documented as array" },
	};
	static const struct {
		const char *man, *why;
	} bad_pages[] = {
		{ ".SS other\n", "no section '.SS x/1'" },
		{ ".SS x/1\n.PP\n", "x/1 lists no member" },
		{ ".SS x/1\n.TP\n.B schema\n", "tag is not '.BR PATH" },
		{ ".SS x/1\n.TP\n.BR schema \" strin\"\n", "'strin' is no JSON type" },
		{ ".SS x/1\n.TP\n.BR schema \" string or\"\n", "'or' with nothing after it" },
		{ ".SS x/1\n.TP\n.BR schema string\n", "the type is not given as" },
		{ ".SS x/1\n.TP\n.BR schema \" integer\"\n", "no entry 'schema' of type string" },
		{ ".SS x/1\n.TP\n.BR schema \" string\"\n.TP\n.BR a.b \" integer\"\n", "a.b, but no a object" },
		{ ".SS x/1\n.TP\n.BR schema \" string\"\n.TP\n.BR a[] \" integer\"\n", "a[], but no a array" },
		{ ".SS x/1\n.TP\n.BR schema \" string\"\n.TP\n.BR schema \" string\"\n", "schema is listed twice" },
	};
	struct hct_jschema *s = malloc(sizeof(*s));
	char why[512];
	json_object *o;

	ck_assert_ptr_nonnull(s);
	ck_assert_msg(hct_jschema_load(POOL_PAGE, "hicache.pool-check/1", s, why, sizeof(why)) == 0, "%s", why);
	o = check_json();
	ck_assert_msg(hct_jschema_check(s, o, why, sizeof(why)) == 0, "%s", why);
	json_object_put(o);
	for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
		o = check_json();
		if (wrong[i].value)
			json_object_object_add(o, wrong[i].member, jparse(wrong[i].value));
		else
			json_object_object_del(o, wrong[i].member);
		ck_assert_int_eq(hct_jschema_check(s, o, why, sizeof(why)), -1);
		ck_assert_msg(strstr(why, wrong[i].why), "%s: '%s', want '%s'", wrong[i].member, why, wrong[i].why);
		json_object_put(o);
	}

	/* a member the page stops listing, as if removed from it */
	for (unsigned i = 0; i < s->n; i++)
		if (!strcmp(s->f[i].path, "count"))
			s->f[i] = s->f[--s->n];
	o = check_json();
	ck_assert_int_eq(hct_jschema_check(s, o, why, sizeof(why)), -1);
	ck_assert_msg(strstr(why, "count is not documented"), "%s", why);
	json_object_put(o);

	/* an optional member may be absent; a "number" may be whole */
	ck_assert_int_eq(hct_jschema_parse(".SS x/1\n.TP\n.BR schema \" string\"\n.TP\n.BR a \" number, s, optional\"\n"
					   ".TP\n.BR b \" integer or null, us\"\n.SS y/1\n.TP\n.BR c \" string\"\n",
					   "x/1", s, why, sizeof(why)),
			 0);
	ck_assert_uint_eq(s->n, 3);
	o = jparse("{\"schema\": \"x/1\", \"b\": null}");
	ck_assert_msg(hct_jschema_check(s, o, why, sizeof(why)) == 0, "%s", why);
	json_object_object_add(o, "a", json_object_new_int(2));
	json_object_object_add(o, "b", json_object_new_int(2));
	ck_assert_msg(hct_jschema_check(s, o, why, sizeof(why)) == 0, "%s", why);
	json_object_object_add(o, "c", json_object_new_string("y/1's"));
	ck_assert_int_eq(hct_jschema_check(s, o, why, sizeof(why)), -1);
	json_object_put(o);

	for (size_t i = 0; i < sizeof(bad_pages) / sizeof(bad_pages[0]); i++) {
		ck_assert_int_eq(hct_jschema_parse(bad_pages[i].man, "x/1", s, why, sizeof(why)), -1);
		ck_assert_msg(strstr(why, bad_pages[i].why), "%s: '%s', want '%s'", bad_pages[i].man, why,
			      bad_pages[i].why);
	}
	free(s);
}
END_TEST

/* ---- the parsers themselves */

START_TEST(parse_numbers)
{
	uint64_t v = 7;
	uint32_t w = 7;

	ck_assert_int_eq(hc_cli_parse_u64("n", "18446744073709551615", 0, UINT64_MAX, &v), 0);
	ck_assert_uint_eq(v, UINT64_MAX);
	ck_assert_int_eq(hc_cli_parse_u64("n", "18446744073709551616", 0, UINT64_MAX, &v), -ERANGE);
	ck_assert_int_eq(hc_cli_parse_u64("n", "-1", 0, UINT64_MAX, &v), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_u64("n", "+1", 0, UINT64_MAX, &v), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_u64("n", "0x10", 0, UINT64_MAX, &v), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_u64("n", "1 ", 0, UINT64_MAX, &v), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_u64("n", "", 0, UINT64_MAX, &v), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_u64("n", "010", 0, UINT64_MAX, &v), 0);
	ck_assert_uint_eq(v, 10); /* decimal, not octal */
	ck_assert_int_eq(hc_cli_parse_u32("n", "4294967296", 0, UINT32_MAX, &w), -ERANGE);
	ck_assert_str_eq(hc_cli_error(), "n '4294967296' is too large: at most 4294967295");
	ck_assert_uint_eq(w, 7); /* untouched on failure */
	ck_assert_int_eq(hc_cli_parse_u32("n", "5", 6, 9, &w), -ERANGE);
	ck_assert_int_eq(hc_cli_parse_u32("n", "9", 6, 9, &w), 0);
	ck_assert_uint_eq(w, 9);

	ck_assert_int_eq(hc_cli_parse_size("s", "4096", 1, &v), 0);
	ck_assert_uint_eq(v, 4096);
	ck_assert_int_eq(hc_cli_parse_size("s", "3k", 1, &v), 0);
	ck_assert_uint_eq(v, 3072);
	ck_assert_int_eq(hc_cli_parse_size("s", "64MiB", 1, &v), 0);
	ck_assert_uint_eq(v, UINT64_C(64) << 20);
	ck_assert_int_eq(hc_cli_parse_size("s", "2G", 1, &v), 0);
	ck_assert_uint_eq(v, UINT64_C(2) << 30);
	ck_assert_int_eq(hc_cli_parse_size("s", "16777215T", 1, &v), 0);
	ck_assert_uint_eq(v, UINT64_C(16777215) << 40);
	ck_assert_int_eq(hc_cli_parse_size("s", "16777216T", 1, &v), -ERANGE);
	ck_assert_int_eq(hc_cli_parse_size("s", "1P", 1, &v), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_size("s", "1KB", 1, &v), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_size("s", "1.5G", 1, &v), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_size("s", "G", 1, &v), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_size("s", "0", 1, &v), -ERANGE);
}
END_TEST

START_TEST(parse_specs)
{
	struct hc_cli_comp c;
	enum hc_numa_mode m;
	const char *nodes;
	uint8_t fp[32], back[32];
	char hex[65];
	mode_t mode;

	ck_assert_int_eq(hc_cli_parse_comp("--kv", "k_v.1,fp8_e5m2,8,128,61,replicated", HC_COMP_KV, &c), 0);
	ck_assert_str_eq(c.spec.name, "k_v.1");
	ck_assert_ptr_eq(c.spec.name, c.name);
	ck_assert_int_eq(c.spec.dtype, HC_DTYPE_FP8_E5M2);
	ck_assert_int_eq(c.spec.kind, HC_COMP_KV);
	ck_assert_int_eq(c.spec.sharding, HC_REPLICATED);
	ck_assert_uint_eq(c.spec.kv_heads, 8);
	ck_assert_uint_eq(c.spec.head_bytes, 128);
	ck_assert_uint_eq(c.spec.layers, 61);
	ck_assert_int_eq(hc_cli_parse_comp("--state", "ssm,f32,2M,4", HC_COMP_STATE, &c), 0);
	ck_assert_int_eq(c.spec.kind, HC_COMP_STATE);
	ck_assert_int_eq(c.spec.sharding, HC_SHARDED);
	ck_assert_uint_eq(c.spec.bytes_per_layer, UINT64_C(2) << 20);
	ck_assert_uint_eq(c.spec.layers, 4);
	ck_assert_int_eq(hc_cli_parse_comp("--kv", "kv,bf16,,256,2", HC_COMP_KV, &c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(hc_cli_error(), "HEADS"));
	ck_assert_int_eq(hc_cli_parse_comp("--kv", "kv,bf16,4,256,2,", HC_COMP_KV, &c), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_comp("--kv", "kv,bf16,4,256,0", HC_COMP_KV, &c), -ERANGE);
	ck_assert_ptr_nonnull(strstr(hc_cli_error(), "LAYERS '0' is too small"));
	ck_assert_int_eq(hc_cli_parse_comp("--kv", "a23456789012345678901234567890123,bf16,4,256,2", HC_COMP_KV, &c),
			 -EINVAL);
	ck_assert_int_eq(hc_cli_parse_comp("--state", "s,f32,1024,2,3,4,5", HC_COMP_STATE, &c), -EINVAL);
	ck_assert_ptr_nonnull(strstr(hc_cli_error(), "has 7 fields"));

	ck_assert_int_eq(hc_cli_parse_numa("--numa", "bind:0-1", &m, &nodes), 0);
	ck_assert_int_eq(m, HC_NUMA_BIND);
	ck_assert_str_eq(nodes, "0-1");
	ck_assert_int_eq(hc_cli_parse_numa("--numa", "interleave", &m, &nodes), 0);
	ck_assert_int_eq(m, HC_NUMA_INTERLEAVE);
	ck_assert_ptr_null(nodes);
	ck_assert_int_eq(hc_cli_parse_numa("--numa", "bind:", &m, &nodes), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_numa("--numa", "bind", &m, &nodes), -EINVAL);

	ck_assert_int_eq(hc_cli_parse_mode("--mode", "660", &mode), 0);
	ck_assert_uint_eq(mode, 0660);
	ck_assert_int_eq(hc_cli_parse_mode("--mode", "0666", &mode), -EINVAL);

	for (int i = 0; i < 32; i++)
		fp[i] = (uint8_t)(i * 37 + 1);
	hc_cli_hex(fp, 32, hex);
	ck_assert_uint_eq(strlen(hex), 64);
	ck_assert_str_eq(hc_cli_hex((const uint8_t *)"\x00\xab\xff", 3, hex), "00abff");
	hc_cli_hex(fp, 32, hex);
	ck_assert_int_eq(hc_cli_parse_hex("fp", hex, back, 32), 0);
	ck_assert_mem_eq(fp, back, 32);
	hex[10] = 'g';
	ck_assert_int_eq(hc_cli_parse_hex("fp", hex, back, 32), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_hex("fp", "abc", back, 32), -EINVAL);

	ck_assert_int_eq(hc_cli_parse_hex_prefix("P", "aB09F", 64, hex), 0);
	ck_assert_str_eq(hex, "ab09f");
	ck_assert_int_eq(hc_cli_parse_hex_prefix("P", "", 64, hex), 0);
	ck_assert_str_eq(hex, "");
	ck_assert_int_eq(hc_cli_parse_hex_prefix("P", "12 4", 64, hex), -EINVAL);
	ck_assert_str_eq(hc_cli_error(), "P '12 4': ' ' at offset 2 is not a hex digit (0-9, a-f)");
	ck_assert_int_eq(hc_cli_parse_hex_prefix("P", "0x12", 64, hex), -EINVAL);
	ck_assert_int_eq(hc_cli_parse_hex_prefix("P", "abc", 2, hex), -EINVAL);
	ck_assert_str_eq(hc_cli_error(), "P 'abc' is 3 hex digits long: at most 2");
}
END_TEST

START_TEST(format_sizes)
{
	char b[32];

	ck_assert_str_eq(hc_cli_format_size(0, b, sizeof(b)), "0 B");
	ck_assert_str_eq(hc_cli_format_size(1023, b, sizeof(b)), "1023 B");
	ck_assert_str_eq(hc_cli_format_size(20480, b, sizeof(b)), "20 KiB");
	ck_assert_str_eq(hc_cli_format_size(1536, b, sizeof(b)), "1.50 KiB");
	ck_assert_str_eq(hc_cli_format_size(UINT64_C(3) << 30, b, sizeof(b)), "3 GiB");
	ck_assert_str_eq(hc_cli_format_size(UINT64_MAX, b, sizeof(b)), "16.00 EiB");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tool");
	TCase *tc = tcase_create("hicache-pool");
	TCase *ta = tcase_create("admin");
	TCase *tp = tcase_create("parsers");

	/* a test runs the tool up to ~45 times, each through libtool's wrapper script */
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, create_info_ls_repair_destroy);
	tcase_add_test(tc, repair_dead_rank);
	tcase_add_test(tc, usage_errors);
	tcase_add_test(tc, destroy_missing);
	tcase_add_test(tc, not_a_pool);
	tcase_add_test(tc, create_existing);
	tcase_add_test(tc, create_progress);
	tcase_add_test(tc, library_refusal);
	tcase_add_test(tc, create_options);
	tcase_add_test(tc, ls_dir_incomplete);
	tcase_add_test(tc, help_and_version);
	suite_add_tcase(s, tc);
	/* the admin verbs: each test runs the tool up to ~40 times */
	tcase_set_timeout(ta, 60);
	tcase_add_test(ta, stat_formats);
	tcase_add_test(ta, check_pool);
	tcase_add_test(ta, repair_damage);
	tcase_add_test(ta, keys_list);
	tcase_add_test(ta, evict_and_clear);
	tcase_add_test(ta, backend_attach_detach);
	tcase_add_test(ta, top_samples);
	tcase_add_test(ta, ls_engines);
	tcase_add_test(ta, admin_usage_errors);
	tcase_add_test(ta, json_documented);
	suite_add_tcase(s, ta);
	tcase_set_timeout(tp, 10);
	tcase_add_test(tp, parse_numbers);
	tcase_add_test(tp, parse_specs);
	tcase_add_test(tp, format_sizes);
	tcase_add_test(tp, json_check_has_teeth);
	suite_add_tcase(s, tp);
	return hct_run(s);
}
