/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_replay.c - what hicache-bench replay serves (tools/replay/): the
 * Mooncake trace parser on a slice of the public trace and on every kind of
 * bad line (each named with its line number), the pages of a request and
 * their keys, the built-in generator (deterministic, Mooncake-shaped,
 * sharing prefixes), and the reference simulation of L2, by hand and
 * against a second, naive LRU.  Then hicache-bench replay itself: the
 * reference check against the simulation, every backend, hybrid models'
 * hit policies, the reports (the JSON against the shape its man page
 * documents), and bad options.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include <hicache/service.h>

#include "../tools/cli/cli.h"
#include "../tools/replay/workload.h"
#include "hct.h"
#include "hctjson.h"
#include "mcd.h"

/* A trace file of these lines in the test's directory: its path. */
static const char *trace_of(const char *name, const char *text)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", hct_l3_dir, name);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fputs(text, f) >= 0, 1);
	ck_assert_int_eq(fclose(f), 0);
	return path;
}

/* Load text as a trace: it must fail with err, and the message must hold
 * each of the pieces. */
static void refused(const char *text, int err, const char *piece1, const char *piece2)
{
	struct hc_rp_workload w;
	const char *path = trace_of("t.jsonl", text);
	int r = hc_rp_trace_load(path, 0, &w);

	ck_assert_msg(r == -err, "'%s': %d (%s), wanted %d", text, r, hc_cli_error(), -err);
	ck_assert_msg(strstr(hc_cli_error(), piece1), "'%s' not in '%s'", piece1, hc_cli_error());
	if (piece2)
		ck_assert_msg(strstr(hc_cli_error(), piece2), "'%s' not in '%s'", piece2, hc_cli_error());
	ck_assert_ptr_null(w.req); /* freed */
}

#define REQ(t, in, ids)                                                                                                \
	"{\"timestamp\": " #t ", \"input_length\": " #in ", \"output_length\": 7, \"hash_ids\": " ids "}\n"

START_TEST(trace_slice)
{
	struct hc_rp_workload w;
	char path[4096];
	uint64_t tokens = 0;

	snprintf(path, sizeof(path), "%s/tests/data/mooncake-200.jsonl", HCT_SRCDIR);
	ck_assert_msg(hc_rp_trace_load(path, 0, &w) == 0, "%s", hc_cli_error());
	ck_assert_uint_eq(w.n, 200);
	/* line 1, as in the file */
	ck_assert_uint_eq(w.req[0].t_ms, 0);
	ck_assert_uint_eq(w.req[0].input_len, 40160);
	ck_assert_uint_eq(w.req[0].output_len, 6);
	ck_assert_uint_eq(w.req[0].nblocks, 79);
	ck_assert_uint_eq(w.req[0].line, 1);
	for (uint32_t i = 0; i < 79; i++)
		ck_assert_uint_eq(hc_rp_ids(&w, &w.req[0])[i], i);
	for (size_t i = 0; i < w.n; i++) {
		ck_assert_uint_eq(w.req[i].nblocks, (w.req[i].input_len + 511) / 512);
		ck_assert(i == 0 || w.req[i].t_ms >= w.req[i - 1].t_ms);
		tokens += w.req[i].input_len;
	}
	ck_assert_uint_gt(tokens, 0);
	hc_rp_workload_free(&w);
	/* a limit stops early */
	ck_assert_int_eq(hc_rp_trace_load(path, 10, &w), 0);
	ck_assert_uint_eq(w.n, 10);
	hc_rp_workload_free(&w);
}
END_TEST

START_TEST(trace_good_lines)
{
	struct hc_rp_workload w;
	const char *path = trace_of(
		"ok.jsonl",
		"\n" REQ(5, 1000, "[7, 8]") "   \n"
					    "{\"hash_ids\": [7, 9, 10], \"output_length\": 0, \"input_length\": 1025, "
					    "\"timestamp\": 5.0, \"extra\": {\"x\": [1]}}\r\n" REQ(6, 0, "[]"));

	ck_assert_msg(hc_rp_trace_load(path, 0, &w) == 0, "%s", hc_cli_error());
	ck_assert_uint_eq(w.n, 3);
	ck_assert_uint_eq(w.req[0].line, 2); /* blank lines skipped, and counted */
	ck_assert_uint_eq(w.req[1].line, 4);
	ck_assert_uint_eq(w.req[1].t_ms, 5);
	ck_assert_uint_eq(w.req[1].nblocks, 3);
	ck_assert_uint_eq(hc_rp_ids(&w, &w.req[1])[2], 10);
	ck_assert_uint_eq(w.req[2].nblocks, 0);
	hc_rp_workload_free(&w);
	/* ids past 2^63 - 1 stay themselves: they were clamped to it, and met */
	path = trace_of("big.jsonl", REQ(0, 10, "[9223372036854775809]") REQ(1, 10, "[9223372036854775810]")
					     REQ(2, 10, "[18446744073709551615]"));
	ck_assert_msg(hc_rp_trace_load(path, 0, &w) == 0, "%s", hc_cli_error());
	ck_assert_uint_eq(hc_rp_ids(&w, &w.req[0])[0], UINT64_C(9223372036854775809));
	ck_assert_uint_eq(hc_rp_ids(&w, &w.req[1])[0], UINT64_C(9223372036854775810));
	ck_assert_uint_eq(hc_rp_ids(&w, &w.req[2])[0], UINT64_MAX);
	hc_rp_workload_free(&w);
}
END_TEST

START_TEST(trace_bad_lines)
{
	refused("", EINVAL, "t.jsonl", "an empty file");
	refused("\n  \n\n", EINVAL, "no requests", "all blank");
	refused("{\"timestamp\": 0, \"input_length\": 5\n", EINVAL, "t.jsonl:1:", "ends in the middle");
	refused(REQ(0, 10, "[1]") "{]\n", EINVAL, "t.jsonl:2:", "not JSON at column");
	refused(REQ(0, 10, "[1]") REQ(1, 10, "[1]") "[1, 2]\n", EINVAL, "t.jsonl:3:", "one JSON object per request");
	refused("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1}\n", EINVAL,
		"t.jsonl:1:", "no \"hash_ids\" field");
	refused("{\"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n", EINVAL,
		"t.jsonl:1:", "no \"timestamp\" field");
	refused(REQ(-1, 10, "[1]"), ERANGE, "t.jsonl:1:", "\"timestamp\" is -1");
	refused(REQ(0, -10, "[1]"), ERANGE, "\"input_length\" is -10", NULL);
	refused(REQ(0, 10, "[1]") REQ(9, 10, "[1]") REQ(8, 10, "[1]"), EINVAL,
		"t.jsonl:3: timestamp 8 is before line 2's 9", "arrival order");
	refused(REQ(0.5, 10, "[1]"), EINVAL, "\"timestamp\" is 0.5", "whole number");
	refused(REQ("3", 10, "[1]"), EINVAL, "\"timestamp\" is \"3\"", NULL);
	refused(REQ(0, 1025, "[1, 2]"), EINVAL, "\"hash_ids\" has 2 ids, but input_length 1025 needs 3", NULL);
	refused(REQ(0, 10, "[1, 2]"), EINVAL, "has 2 ids", "needs 1");
	refused(REQ(0, 600, "[1, -2]"), EINVAL, "hash_ids[1] is -2", NULL);
	refused(REQ(0, 600, "[1, \"a\"]"), EINVAL, "hash_ids[1] is \"a\"", NULL);
	refused(REQ(0, 10,
		    "[1]") "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1],}\n",
		EINVAL, "t.jsonl:2: not JSON", NULL); /* json-c alone would take the trailing comma */
	refused("{'timestamp': 0}\n", EINVAL, "t.jsonl:1:", NULL);
	refused(REQ(0, 10, "{}"), EINVAL, "\"hash_ids\" is { }", "an array");
	refused(REQ(0, 10,
		    "[1]") "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]} {}\n",
		EINVAL, "t.jsonl:2: ", "column 75"); /* the second object */
	refused(REQ(0, 99999999999, "[1]"), ERANGE, "\"input_length\" is 99999999999", NULL);
	/* what strict json-c takes, or clamps */
	refused("{'timestamp': 0, 'input_length': 10, 'output_length': 1, 'hash_ids': [1]}\n", EINVAL,
		"t.jsonl:1: a single quote at column 2", "double quotes");
	refused(REQ(9223372036854775808, 10, "[1]"), ERANGE, "\"timestamp\" is 9223372036854775808",
		"expected 0 to 9223372036854775807");
	refused(REQ(0, 10, "[18446744073709551616]"), ERANGE, "t.jsonl:1: the number at column", "past 2^64 - 1");
	refused(REQ(9223372036854775808.0, 10, "[1]"), ERANGE, "\"timestamp\" is 9223372036854775808",
		"expected 0 to 9223372036854775807"); /* as a double, which (double)max rounds up to */
	refused(REQ(0, 10, "[\"it's\"]"), EINVAL, "hash_ids[0] is \"it's\"", NULL); /* a quote in a string is text */
	{
		struct hc_rp_workload w;
		char path[160];
		FILE *f;
		/* a NUL in a line without end: refused at the NUL, not read on */
		snprintf(path, sizeof(path), "%s/nul.jsonl", hct_l3_dir);
		f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		ck_assert_uint_eq(
			fwrite(REQ(0, 10, "[1]") "{\"timestamp\": 0\0\0\0", 1, sizeof(REQ(0, 10, "[1]")) + 17, f),
			sizeof(REQ(0, 10, "[1]")) + 17);
		fclose(f);
		ck_assert_int_eq(hc_rp_trace_load(path, 0, &w), -EINVAL);
		ck_assert_msg(strstr(hc_cli_error(), "nul.jsonl:2: a NUL byte"), "%s", hc_cli_error());
		/* not regular files: each refused at once, none read for ever */
		ck_assert_int_eq(hc_rp_trace_load("/dev/zero", 0, &w), -EINVAL);
		ck_assert_msg(strstr(hc_cli_error(), "not a regular file (a character device)"), "%s", hc_cli_error());
		ck_assert_int_eq(hc_rp_trace_load(hct_l3_dir, 0, &w), -EINVAL);
		ck_assert_msg(strstr(hc_cli_error(), "(a directory)"), "%s", hc_cli_error());
		snprintf(path, sizeof(path), "%s/fifo", hct_l3_dir);
		ck_assert_int_eq(mkfifo(path, 0600), 0);
		ck_assert_int_eq(hc_rp_trace_load(path, 0, &w), -EINVAL);
		ck_assert_msg(strstr(hc_cli_error(), "(a FIFO)"), "%s", hc_cli_error());
		/* a line past the cap: refused when it reaches it, with the cap */
		snprintf(path, sizeof(path), "%s/long.jsonl", hct_l3_dir);
		f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		ck_assert_int_eq(ftruncate(fileno(f), (off_t)HC_RP_LINE_MAX + 4096), 0);
		ck_assert_int_eq(fseek(f, 0, SEEK_SET), 0);
		for (unsigned i = 0; i < HC_RP_LINE_MAX / 4096 + 1; i++) {
			static char run[4096];
			memset(run, ' ', sizeof(run));
			run[0] = i ? ' ' : '[';
			ck_assert_uint_eq(fwrite(run, 1, sizeof(run), f), sizeof(run));
		}
		fclose(f);
		ck_assert_int_eq(hc_rp_trace_load(path, 0, &w), -E2BIG);
		ck_assert_msg(strstr(hc_cli_error(), "long.jsonl:1: the line is longer than 64 MiB"), "%s",
			      hc_cli_error());
	}
	{
		struct hc_rp_workload w;
		char path[128];
		snprintf(path, sizeof(path), "%s/none.jsonl", hct_l3_dir);
		ck_assert_int_eq(hc_rp_trace_load(path, 0, &w), -ENOENT);
		ck_assert_ptr_nonnull(strstr(hc_cli_error(), "none.jsonl"));
	}
}
END_TEST

/* ---- pages and keys */

static void one_req(struct hc_rp_workload *w, uint32_t in, const uint64_t *ids, uint32_t nb)
{
	ck_assert_int_eq(hc_rp_workload_grow(w, nb), 0);
	w->req[w->n++] = (struct hc_rp_req){ .input_len = in, .nblocks = nb, .first = w->nids };
	memcpy(w->ids + w->nids, ids, nb * sizeof(*ids));
	w->nids += nb;
}

START_TEST(pages_and_keys)
{
	struct hc_rp_workload w = { 0 };
	hc_key_t a[40], b[40];

	for (uint32_t p = 0; p <= 1024; p++)
		ck_assert_int_eq(hc_rp_page_tokens_ok(p), p >= 1 && p <= 512 && 512 % p == 0);
	one_req(&w, 1000, (const uint64_t[]){ 5, 6 }, 2);    /* 15 pages of 64: 8 of block 5, 7 of 6 */
	one_req(&w, 1280, (const uint64_t[]){ 5, 9, 9 }, 3); /* 20: 8 of 5, 8 of 9, 4 of the last 9 */
	ck_assert_uint_eq(hc_rp_pages(&w.req[0], 64), 15);
	ck_assert_uint_eq(hc_rp_pages(&w.req[1], 64), 20);
	ck_assert_uint_eq(hc_rp_pages(&w.req[0], 512), 1); /* the partial block is no page */
	ck_assert_uint_eq(hc_rp_pages(&w.req[0], 1), 1000);
	hc_rp_keys(&w, &w.req[0], 64, a);
	hc_rp_keys(&w, &w.req[1], 64, b);
	/* block 5 in both: the same 8 keys; then different ids, different keys */
	ck_assert_mem_eq(a, b, 8 * sizeof(hc_key_t));
	for (int i = 8; i < 15; i++)
		for (int j = 0; j < 20; j++)
			ck_assert_msg(memcmp(a[i], b[j], sizeof(hc_key_t)), "key %d of A is key %d of B", i, j);
	/* within one request every page is its own, save a repeated id at the
	 * same position: block 9 twice gives positions 0..3 twice */
	for (int i = 0; i < 20; i++)
		for (int j = i + 1; j < 20; j++)
			ck_assert_int_eq(!memcmp(b[i], b[j], sizeof(hc_key_t)), i >= 8 && i < 12 && j == i + 8);
	/* another page size, other keys */
	hc_rp_keys(&w, &w.req[0], 128, a);
	ck_assert_int_ne(memcmp(a[0], b[0], sizeof(hc_key_t)), 0);
	hc_rp_workload_free(&w);
}
END_TEST

/* ---- the generator */

START_TEST(generator)
{
	struct hc_rp_gen_opts o = { .seed = 42 };
	struct hc_rp_workload a, b, c;
	size_t shared = 0;

	ck_assert_msg(hc_rp_gen(&o, &a) == 0, "%s", hc_cli_error());
	ck_assert_int_eq(hc_rp_gen(&o, &b), 0);
	ck_assert_uint_eq(a.n, b.n);
	ck_assert_uint_eq(a.nids, b.nids);
	ck_assert_mem_eq(a.req, b.req, a.n * sizeof(*a.req));
	ck_assert_mem_eq(a.ids, b.ids, a.nids * sizeof(*a.ids));
	o.seed = 43;
	ck_assert_int_eq(hc_rp_gen(&o, &c), 0);
	ck_assert(c.n != a.n || c.nids != a.nids || memcmp(c.ids, a.ids, a.nids * sizeof(*a.ids)));
	hc_rp_gen_defaults(&o);
	ck_assert_uint_ge(a.n, o.sessions); /* every session fits one turn at least */
	for (size_t i = 0; i < a.n; i++) {
		const struct hc_rp_req *r = &a.req[i];
		ck_assert(i == 0 || r->t_ms >= a.req[i - 1].t_ms);
		ck_assert_uint_eq(r->nblocks, (r->input_len + 511) / 512);
		ck_assert_uint_le(r->input_len, o.max_input);
		ck_assert_uint_gt(r->input_len, o.system_tokens);
		ck_assert_uint_eq(r->line, 0);
	}
	/* prefixes are shared: the system prompts' blocks, and each turn's
	 * earlier blocks */
	for (size_t i = 0; i < a.n; i++)
		shared += hc_rp_ids(&a, &a.req[i])[0] < (uint64_t)o.system_prompts * (o.system_tokens / 512);
	ck_assert_uint_eq(shared, a.n);
	{
		struct hc_rp_refsim rs;
		ck_assert_int_eq(hc_rp_refsim(&a, 64, 1u << 20, &rs), 0); /* never full */
		ck_assert_uint_eq(rs.evictions, 0);
		ck_assert_uint_gt(rs.hit_pages, rs.pages / 4);
		ck_assert_uint_lt(rs.hit_pages, rs.pages);
	}
	hc_rp_workload_free(&a);
	hc_rp_workload_free(&b);
	hc_rp_workload_free(&c);
	o = (struct hc_rp_gen_opts){ .system_tokens = 4096, .max_input = 4096 };
	ck_assert_int_eq(hc_rp_gen(&o, &a), -EINVAL);
	ck_assert_ptr_nonnull(strstr(hc_cli_error(), "leave no room"));
}
END_TEST

/* ---- the reference simulation */

/* A second LRU, as plainly as it can be written: an array, most recent
 * first, searched and shifted. */
struct naive {
	hc_key_t *k;
	uint32_t *mark;
	uint32_t n, cap;
	uint64_t hits, evictions;
};

static int nv_find(struct naive *v, const uint8_t *key)
{
	for (uint32_t i = 0; i < v->n; i++)
		if (!memcmp(v->k[i], key, sizeof(hc_key_t)))
			return (int)i;
	return -1;
}

static void nv_front(struct naive *v, uint32_t at, const uint8_t *key, uint32_t mark)
{
	memmove(v->k + 1, v->k, at * sizeof(hc_key_t));
	memmove(v->mark + 1, v->mark, at * sizeof(uint32_t));
	memcpy(v->k[0], key, sizeof(hc_key_t));
	v->mark[0] = mark;
}

static void nv_request(struct naive *v, hc_key_t *keys, uint32_t n, uint32_t mark)
{
	uint32_t hit = 0;

	while (hit < n && nv_find(v, keys[hit]) >= 0)
		hit++;
	v->hits += hit;
	for (uint32_t i = 0; i < n; i++) {
		int x = nv_find(v, keys[i]);
		if (x >= 0)
			v->mark[x] = mark;
	}
	for (uint32_t i = n; i-- > 0;) {
		int x = nv_find(v, keys[i]);
		if (x < 0 && v->n == v->cap) {
			int y = (int)v->n - 1;
			while (v->mark[y] == mark)
				y--;
			memmove(v->k + y, v->k + y + 1, (v->n - 1 - (uint32_t)y) * sizeof(hc_key_t));
			memmove(v->mark + y, v->mark + y + 1, (v->n - 1 - (uint32_t)y) * sizeof(uint32_t));
			v->n--;
			v->evictions++;
		}
		if (x < 0)
			v->n++;
		nv_front(v, x < 0 ? v->n - 1 : (uint32_t)x, keys[i], mark);
	}
}

START_TEST(refsim_by_hand)
{
	struct hc_rp_workload w = { 0 };
	struct hc_rp_refsim rs;

	/* 512-token pages: a page per block; the pool holds 4 */
	one_req(&w, 1024, (const uint64_t[]){ 1, 2 }, 2);    /* miss both: [1 2] */
	one_req(&w, 1536, (const uint64_t[]){ 1, 2, 3 }, 3); /* hit 2: [1 2 3] */
	one_req(&w, 512, (const uint64_t[]){ 4 }, 1);        /* miss: [4 1 2 3] */
	one_req(&w, 1024, (const uint64_t[]){ 5, 6 }, 2);    /* miss, evict 3 and 2: [5 6 4 1] */
	one_req(&w, 1536, (const uint64_t[]){ 1, 2, 3 }, 3); /* hit 1; 1 stays (it is ours): evict 4, 6: [1 2 3 5] */
	one_req(&w, 1023, (const uint64_t[]){ 5, 1 }, 2);    /* one page (511 tokens are no page): hit 1 */
	ck_assert_int_eq(hc_rp_refsim(&w, 512, 4, &rs), 0);
	ck_assert_uint_eq(rs.requests, 6);
	ck_assert_uint_eq(rs.pages, 12);
	ck_assert_uint_eq(rs.hit_pages, 2 + 1 + 1);
	ck_assert_uint_eq(rs.evictions, 4);
	ck_assert_uint_eq(rs.input_tokens, 1024 + 1536 + 512 + 1024 + 1536 + 1023);
	/* a pool no larger than a request is refused */
	ck_assert_int_eq(hc_rp_refsim(&w, 512, 3, &rs), -EINVAL);
	ck_assert_ptr_nonnull(strstr(hc_cli_error(), "must be larger than any request"));
	ck_assert_int_eq(hc_rp_refsim(&w, 100, 64, &rs), -EINVAL);
	hc_rp_workload_free(&w);
}
END_TEST

START_TEST(refsim_against_naive)
{
	struct hc_rp_gen_opts o = { .seed = 7, .sessions = 40, .max_input = 8192, .system_tokens = 1024 };
	struct hc_rp_workload w;
	uint32_t most = 0;

	ck_assert_int_eq(hc_rp_gen(&o, &w), 0);
	for (size_t q = 0; q < w.n; q++)
		most = hc_rp_pages(&w.req[q], 128) > most ? hc_rp_pages(&w.req[q], 128) : most;
	for (uint32_t cap = most + 1; cap < 8 * most; cap = cap * 2 + 3) {
		struct naive v = { .k = calloc(cap, sizeof(hc_key_t)),
				   .mark = calloc(cap, sizeof(uint32_t)),
				   .cap = cap };
		hc_key_t *keys = calloc(most, sizeof(hc_key_t));
		struct hc_rp_refsim rs;
		ck_assert_int_eq(hc_rp_refsim(&w, 128, cap, &rs), 0);
		for (size_t q = 0; q < w.n; q++) {
			hc_rp_keys(&w, &w.req[q], 128, keys);
			nv_request(&v, keys, hc_rp_pages(&w.req[q], 128), (uint32_t)q + 1);
		}
		ck_assert_msg(rs.hit_pages == v.hits && rs.evictions == v.evictions,
			      "pool of %u: refsim %llu hits %llu evictions, naive %llu %llu", cap,
			      (unsigned long long)rs.hit_pages, (unsigned long long)rs.evictions,
			      (unsigned long long)v.hits, (unsigned long long)v.evictions);
		ck_assert_uint_gt(rs.evictions, 0); /* the cases that matter: a full pool */
		free(v.k);
		free(v.mark);
		free(keys);
	}
	hc_rp_workload_free(&w);
}
END_TEST

/* ---- the replay itself (tools/hicache-bench replay) */

static char out[256 * 1024], err[64 * 1024];

/* Run hicache-bench replay with the NULL-terminated arguments: its exit status. */
static int replay(const char *arg, ...)
{
	const char *args[64] = { "replay" };
	int n = 1;
	va_list ap;

	va_start(ap, arg);
	for (; arg && n < 62; arg = va_arg(ap, const char *))
		args[n++] = arg;
	va_end(ap);
	args[n++] = "--no-progress";
	args[n] = NULL;
	return hct_tool_run("hicache-bench", args, out, sizeof(out), err, sizeof(err));
}
#define REPLAY(...) replay(__VA_ARGS__, (const char *)NULL)
#define ck_assert_replay(want, ...)                                                                                    \
	do {                                                                                                           \
		int got_ = REPLAY(__VA_ARGS__);                                                                        \
		ck_assert_msg(got_ == (want), "exit %d, want %d\nstdout:\n%s\nstderr:\n%s", got_, (want), out, err);   \
	} while (0)

static const char *slice(void)
{
	static char path[4096];

	snprintf(path, sizeof(path), "%s/tests/data/mooncake-200.jsonl", HCT_SRCDIR);
	return path;
}

static const char *in_dir(const char *name)
{
	static char path[4][160];
	static int k;

	k = (k + 1) % 4;
	snprintf(path[k], sizeof(path[k]), "%s/%s", hct_l3_dir, name);
	return path[k];
}

/* Directories the file backend left in the test's directory. */
static int leftovers(void)
{
	DIR *d = opendir(hct_l3_dir);
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, "hicache-replay-", 15);
	closedir(d);
	return n;
}

/* A field of the --json report, by a dotted path ("tokens.l3"). */
static int64_t jget(json_object *root, const char *dotted)
{
	char buf[128], *save = NULL;
	json_object *o = root;

	snprintf(buf, sizeof(buf), "%s", dotted);
	for (char *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save))
		ck_assert_msg(json_object_object_get_ex(o, k, &o), "the JSON report has no %s", dotted);
	return json_object_get_int64(o);
}

/* The reference check: L1 off, no L3, serial, exact LRU; the pool's L2 hit
 * must be the simulation's, here and in the tool's own comparison. */
START_TEST(reference_check)
{
	struct hc_rp_workload w;
	struct hc_rp_refsim rs;
	struct hc_rp_gen_opts go = { 0 };
	json_object *j;

	/* a slice of the public trace, one rank, 128-token pages */
	ck_assert_replay(0, "--reference", "--trace", slice(), "--requests", "80", "--kv", "kv,bf16,2,16,1",
			 "--page-tokens", "128", "--pool-pages", "700", "--tp", "1", "--json", in_dir("a.json"));
	ck_assert_msg(strstr(out, "exact match"), "%s", out);
	ck_assert_int_eq(hc_rp_trace_load(slice(), 80, &w), 0);
	ck_assert_int_eq(hc_rp_refsim(&w, 128, 700, &rs), 0);
	hc_rp_workload_free(&w);
	j = json_object_from_file(in_dir("a.json"));
	ck_assert_ptr_nonnull(j);
	ck_assert_int_eq(jget(j, "reference.measured_hit_pages"), (int64_t)rs.hit_pages);
	ck_assert_int_eq(jget(j, "reference.pages"), (int64_t)rs.pages);
	ck_assert_int_gt(jget(j, "outcomes.evictions"), 0); /* a full pool: the order mattered */
	ck_assert_int_gt((int64_t)rs.hit_pages, 0);
	json_object_put(j);
	/* the built-in workload, two engines of TP 2 */
	ck_assert_replay(0, "--reference", "--seed", "3", "--kv", "kv,bf16,4,16,1", "--pool-pages", "400", "--tp", "2",
			 "--engines", "2", "--json", in_dir("b.json"));
	go.seed = 3;
	ck_assert_int_eq(hc_rp_gen(&go, &w), 0);
	ck_assert_int_eq(hc_rp_refsim(&w, 64, 400, &rs), 0);
	hc_rp_workload_free(&w);
	j = json_object_from_file(in_dir("b.json"));
	ck_assert_int_eq(jget(j, "reference.measured_hit_pages"), (int64_t)rs.hit_pages);
	ck_assert_int_gt((int64_t)rs.evictions, 0);
	json_object_put(j);
}
END_TEST

/* Every backend the suite has, on a slice of the trace and on the built-in
 * workload: pages go to L3 and come back as hits, every byte checks out. */
START_TEST(backends)
{
	static const char *be[] = { "file", "shm", "mem", "memcached" };
	struct hct_mcd mcd;
	char mspec[300], servers[256], e[256];

	/* a real memcached server on a free loopback port, for the last */
	ck_assert_msg(hct_mcd_start(&mcd, 1, "-m 256", e, sizeof(e)) == 0, "%s", e);
	hct_mcd_servers(&mcd, servers, sizeof(servers));
	snprintf(mspec, sizeof(mspec), "memcached:servers=%s", servers);
	be[3] = mspec;
	for (unsigned i = 0; i < 4; i++) {
		json_object *j;
		ck_assert_replay(0, "--trace", slice(), "--requests", "60", "--page-tokens", "128", "--kv",
				 "kv,bf16,2,16,1", "--pool-pages", "700", "--backend", be[i], "--dir", hct_l3_dir,
				 "--json", in_dir("c.json"));
		j = json_object_from_file(in_dir("c.json"));
		ck_assert_ptr_nonnull(j);
		ck_assert_int_eq(jget(j, "workload.served"), 60);
		ck_assert_int_gt(jget(j, "outcomes.prefetches"), 0);
		ck_assert_int_gt(jget(j, "bytes.backup"), 0);
		ck_assert_int_gt(jget(j, "outcomes.evictions"), 0);
		ck_assert_int_eq(jget(j, "bytes.bad"), 0);
		json_object_put(j);
		ck_assert_replay(0, "--sessions", "12", "--seed", "1", "--kv", "kv,bf16,2,16,1", "--pool-pages", "150",
				 "--backend", be[i], "--dir", hct_l3_dir, "--json", in_dir("c.json"));
		j = json_object_from_file(in_dir("c.json"));
		ck_assert_ptr_nonnull(j);
		ck_assert_msg(jget(j, "tokens.l3") > 0, "%s: no L3 hit\n%s", be[i], out);
		ck_assert_int_gt(jget(j, "bytes.prefetch"), 0);
		ck_assert_int_gt(jget(j, "bytes.backup"), 0);
		ck_assert_int_gt(jget(j, "bytes.checked"), 0);
		ck_assert_int_eq(jget(j, "bytes.bad"), 0);
		ck_assert_int_eq(jget(j, "tokens.total"), jget(j, "tokens.l1") + jget(j, "tokens.l2") +
								  jget(j, "tokens.l3") + jget(j, "tokens.miss"));
		json_object_put(j);
	}
	hct_mcd_stop(&mcd);
	/* L1 on: the GPU cache serves some, and L2 the rest */
	ck_assert_replay(0, "--sessions", "12", "--kv", "kv,bf16,2,16,1", "--pool-pages", "150", "--l1-pages", "200",
			 "--backend", "none", "--json", in_dir("d.json"));
	{
		json_object *j = json_object_from_file(in_dir("d.json"));
		ck_assert_int_gt(jget(j, "tokens.l1"), 0);
		ck_assert_int_eq(jget(j, "tokens.l3"), 0);
		json_object_put(j);
	}
	ck_assert_int_eq(leftovers(), 0); /* the file backend's directories went */
}
END_TEST

/* Hybrid models: a sliding-window component is stored on a prompt's
 * trailing pages only, a state snapshot on its last page only; hits must
 * come from the hit policies (a lookup that wanted them on every page
 * would stop at the first page). */
START_TEST(hybrids)
{
	json_object *j;

	ck_assert_replay(0, "--sessions", "12", "--kv", "full,bf16,2,16,1", "--kv", "swa,bf16,2,16,1,window=2",
			 "--pool-pages", "600", "--backend", "file", "--dir", hct_l3_dir, "--json", in_dir("e.json"));
	j = json_object_from_file(in_dir("e.json"));
	ck_assert_int_gt(jget(j, "tokens.l2") + jget(j, "tokens.l3"), jget(j, "tokens.total") / 10);
	ck_assert_int_eq(jget(j, "bytes.bad"), 0);
	json_object_put(j);
	ck_assert_replay(0, "--sessions", "12", "--kv", "full,bf16,2,16,1", "--state", "st,f32,8192,1", "--pool-pages",
			 "600", "--backend", "file", "--dir", hct_l3_dir, "--json", in_dir("f.json"));
	j = json_object_from_file(in_dir("f.json"));
	ck_assert_int_gt(jget(j, "tokens.l2") + jget(j, "tokens.l3"), jget(j, "tokens.total") / 10);
	ck_assert_int_eq(jget(j, "bytes.bad"), 0);
	json_object_put(j);
	/* the presets run too (scaled down) */
	ck_assert_replay(0, "--model", "hybrid-swa", "--scale", "0.05", "--sessions", "4", "--backend", "none");
	ck_assert_replay(0, "--model", "deepseek-v3", "--scale", "0.02", "--sessions", "4", "--backend", "none");
	ck_assert_msg(strstr(out, "mla 1 of 61 layers"), "%s", out);
}
END_TEST

/* The chart reads: both panels have labelled time ticks from 0 s and a
 * title for the axis, round y ticks, and a legend with a sample of each
 * line in its colour; rsvg-convert renders it as a PNG. */
static void check_chart(const char *svg, const char *path, const char *png)
{
	static const char *const names[] = { "L1 hit",        "L2 hit",          "L3 hit",       "L2->GPU load",
					     "GPU->L2 store", "L3->L2 prefetch", "L2->L3 backup" };
	const char *rsvg = getenv("RSVG_CONVERT"), *at;
	char cmd[9000], head[8] = { 0 };
	unsigned axes = 0, zero_ticks = 0;
	FILE *f;

	for (at = svg; (at = strstr(at, ">time since the first request, s</text>")); at++)
		axes++;
	ck_assert_uint_eq(axes, 2);
	for (at = svg; (at = strstr(at, "text-anchor=\"middle\">0")); at++) {
		const char *e = at + strlen("text-anchor=\"middle\">0");
		e += *e == '.' ? strspn(e + 1, "0") + 1 : 0; /* 0, 0.0 or 0.00, as the step needs */
		zero_ticks += !strncmp(e, "</text>", 7);
	}
	ck_assert_uint_eq(zero_ticks, 2); /* a time tick at 0 s in each panel */
	for (const char *const *t = (const char *const[]){ ">0%<", ">25%<", ">50%<", ">75%<", ">100%<", NULL }; *t; t++)
		ck_assert_msg(strstr(svg, *t), "no y tick %s", *t);
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char want[64];
		const char *label, *sample;
		snprintf(want, sizeof(want), ">%s</text>", names[i]);
		label = strstr(svg, want);
		ck_assert_msg(label, "the legend lacks %s", names[i]);
		/* its sample: the last line element before its label */
		for (sample = label; sample > svg && strncmp(sample, "<line", 5); sample--)
			;
		ck_assert_msg(!strncmp(sample, "<line", 5) && strstr(sample, "stroke-width=\"2.5\"") < label,
			      "the legend's %s has no line sample", names[i]);
	}
	ck_assert_msg(rsvg && *rsvg, "RSVG_CONVERT is not set: configure finds rsvg-convert (librsvg2-bin)");
	snprintf(cmd, sizeof(cmd), "'%s' '%s' -o '%s'", rsvg, path, png);
	ck_assert_int_eq(system(cmd), 0);
	f = fopen(png, "rb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fread(head, 1, 8, f), 8);
	fclose(f);
	ck_assert_msg(!memcmp(head, "\x89PNG\r\n\x1a\n", 8), "rsvg-convert made no PNG");
}

START_TEST(outputs)
{
	json_object *j;
	char line[512];
	FILE *f;
	int rows = 0;

	ck_assert_replay(0, "--sessions", "16", "--kv", "kv,bf16,2,16,1", "--pool-pages", "200", "--backend", "file",
			 "--dir", hct_l3_dir, "--json", in_dir("g.json"), "--csv", in_dir("g.csv"), "--svg",
			 in_dir("g.svg"));
	ck_assert_msg(strstr(out, "hit tokens") && strstr(out, "L2 -> GPU (loads)") && strstr(out, "prefill saved"),
		      "%s", out);
	j = json_object_from_file(in_dir("g.json"));
	ck_assert_int_eq(jget(j, "workload.served"), jget(j, "workload.requests"));
	ck_assert_int_eq(jget(j, "setup.tp"), 2);
	json_object_put(j);
	f = fopen(in_dir("g.csv"), "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
	ck_assert_msg(!strncmp(line, "t_s,requests,tokens,", 20), "%s", line);
	while (fgets(line, sizeof(line), f))
		rows++;
	fclose(f);
	ck_assert_int_ge(rows, 1);
	f = fopen(in_dir("g.svg"), "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_gt(fread(out, 1, sizeof(out) - 1, f), 100);
	fclose(f);
	ck_assert_msg(!strncmp(out, "<svg", 4) && strstr(out, "<polyline") && strstr(out, "</svg>"),
		      "not an SVG chart");
	check_chart(out, in_dir("g.svg"), in_dir("g.png"));
}
END_TEST

/* The --json report against the shape hicache-bench-replay(1) documents:
 * with --reference (its member shows) and no L3, whose latency quantiles
 * are null, and with the file backend, whose are bounds. */
START_TEST(json_documented)
{
	json_object *j;

	ck_assert_replay(0, "--reference", "--sessions", "8", "--kv", "kv,bf16,2,16,1", "--tp", "1", "--json",
			 in_dir("s.json"));
	j = json_object_from_file(in_dir("s.json"));
	ck_assert_ptr_nonnull(j);
	hct_json_documented(j, "man/hicache-bench-replay.1", "hicache.replay/1");
	ck_assert_ptr_nonnull(json_object_object_get(j, "reference"));
	json_object_put(j);
	ck_assert_replay(0, "--sessions", "8", "--kv", "kv,bf16,2,16,1", "--backend", "file", "--dir", hct_l3_dir,
			 "--json", in_dir("t.json"));
	j = json_object_from_file(in_dir("t.json"));
	ck_assert_ptr_nonnull(j);
	hct_json_documented(j, "man/hicache-bench-replay.1", "hicache.replay/1");
	ck_assert_int_gt(jget(j, "latency_us.prefetch.count"), 0);
	json_object_put(j);
}
END_TEST

/* --pool: a pool made beforehand and served by a service of its own (here
 * in a child process, as hicached would be): the replay takes the model
 * from the pool, leaves it there, and leaves nothing held in it. */
START_TEST(existing_pool)
{
	const char *name = hct_name();
	struct hc_component_spec kv = { .size = sizeof(struct hc_component_spec),
					.name = "kv",
					.dtype = HC_DTYPE_BF16,
					.kind = HC_COMP_KV,
					.sharding = HC_SHARDED,
					.kv_heads = 2,
					.head_bytes = 16,
					.layers = 1 };
	struct hc_pool_spec ps = { .size = sizeof(struct hc_pool_spec),
				   .name = name,
				   .model_id = "test/replay",
				   .page_tokens = 64,
				   .tp_size = 2,
				   .comps = &kv,
				   .ncomp = 1,
				   .capacity_pages = 300,
				   .flags = HC_CREATE_NO_POPULATE };
	struct hc_service_opts so = { .size = sizeof(struct hc_service_opts), .backend = hct_l3_spec };
	json_object *j;
	hc_pool *p;
	pid_t svc;

	ck_assert_ok(hc_pool_create(&ps));
	p = hct_attach(name, HC_ATTACH_ADMIN);
	svc = hct_service_child(name, &so);
	ck_assert_replay(0, "--pool", name, "--sessions", "12", "--json", in_dir("h.json"));
	ck_assert_msg(strstr(out, "L3 hicached (pid"), "%s", out);
	j = json_object_from_file(in_dir("h.json"));
	ck_assert_int_eq(jget(j, "model.page_bytes"), 4096);
	ck_assert_int_eq(jget(j, "setup.tp"), 2);
	ck_assert_int_gt(jget(j, "bytes.backup"), 0);
	ck_assert_int_eq(jget(j, "bytes.bad"), 0);
	json_object_put(j);
	hct_service_child_stop(svc);
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
	/* a second run finds the first's pages in the pool */
	ck_assert_replay(0, "--pool", name, "--sessions", "12", "--json", in_dir("i.json"));
	ck_assert_msg(strstr(out, "L3 none"), "%s", out);
	j = json_object_from_file(in_dir("i.json"));
	ck_assert_int_gt(jget(j, "tokens.l2"), 0);
	/* this run's figures, not the pool's lifetime: no service, so nothing went to
	 * L3 or came back (it reported the first run's bytes once) */
	ck_assert_int_eq(jget(j, "bytes.backup"), 0);
	ck_assert_int_eq(jget(j, "bytes.prefetch"), 0);
	ck_assert_int_eq(jget(j, "outcomes.l3_done"), 0);
	json_object_put(j);
	ck_assert_replay(2, "--pool", name, "--page-tokens", "128");
	ck_assert_msg(strstr(err, "made already: drop --page-tokens"), "%s", err);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
	ck_assert_replay(2, "--pool", name);
	ck_assert_msg(strstr(err, name), "%s", err);
}
END_TEST

/* --pool twice, with fewer requests than the pool has ticket records: the
 * second run's tickets have the first's names, and must not meet them (a
 * ticket ends with its engine).  Before the fix the second run failed with
 * "TP rank 0 already claimed its share of ticket 'r0' step 0". */
START_TEST(existing_pool_twice)
{
	const char *name = hct_name();
	struct hc_component_spec kv = { .size = sizeof(struct hc_component_spec),
					.name = "kv",
					.dtype = HC_DTYPE_BF16,
					.kind = HC_COMP_KV,
					.sharding = HC_SHARDED,
					.kv_heads = 2,
					.head_bytes = 16,
					.layers = 1 };
	struct hc_pool_spec ps = { .size = sizeof(struct hc_pool_spec),
				   .name = name,
				   .model_id = "test/replay",
				   .page_tokens = 64,
				   .tp_size = 2,
				   .comps = &kv,
				   .ncomp = 1,
				   .capacity_pages = 300,
				   .flags = HC_CREATE_NO_POPULATE };
	hc_pool *p;

	ck_assert_ok(hc_pool_create(&ps));
	p = hct_attach(name, HC_ATTACH_ADMIN);
	for (int run = 0; run < 3; run++) {
		ck_assert_replay(0, "--pool", name, "--sessions", "4");
		ck_assert_msg(strstr(out, "13 of 13 requests served"), "run %d: %s", run, out);
	}
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* --speedup paces requests by their timestamps: the 40th request of the
 * slice arrives at 12.075 s, so at 20 times the pace the run takes 0.6 s at
 * least (a lower bound: only a replay that ignored the pace is faster). */
START_TEST(paced)
{
	json_object *j;

	ck_assert_replay(0, "--trace", slice(), "--requests", "40", "--speedup", "20", "--kv", "kv,bf16,2,16,1",
			 "--page-tokens", "128", "--pool-pages", "700", "--backend", "none", "--json",
			 in_dir("p.json"));
	j = json_object_from_file(in_dir("p.json"));
	ck_assert_msg(json_object_get_double(json_object_object_get(j, "seconds")) >= 12.075 / 20, "served in %.3f s",
		      json_object_get_double(json_object_object_get(j, "seconds")));
	json_object_put(j);
}
END_TEST

/* A paced replay (about 3 s) in the background, its stdout and stderr in
 * memfds; *pid is the driver's. */
static void replay_bg(pid_t *pid, int *ofd, int *efd)
{
	const char *b = getenv("HC_BUILDDIR");
	char path[1024], libs[1024];

	/* the binary itself, not libtool's wrapper: the driver is then our
	 * child, and dies with this test if the test dies */
	snprintf(path, sizeof(path), "%s/tools/.libs/hicache-bench", b && *b ? b : ".");
	snprintf(libs, sizeof(libs), "%s/lib/.libs", b && *b ? b : ".");
	if (access(path, X_OK) < 0) /* no .libs: a static build, whose tools/ binary is no wrapper */
		snprintf(path, sizeof(path), "%s", hct_tool("hicache-bench"));

	*ofd = memfd_create("replay-out", MFD_CLOEXEC);
	*efd = memfd_create("replay-err", MFD_CLOEXEC);
	ck_assert_int_ge(*ofd, 0);
	ck_assert_int_ge(*efd, 0);
	*pid = fork();
	ck_assert_int_ge(*pid, 0);
	if (*pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		setenv("LD_LIBRARY_PATH", libs, 1);
		dup2(*ofd, 1);
		dup2(*efd, 2);
		/* 40 requests whose timestamps span 12 s, 4 times faster: long
		 * enough to stop it mid-run, light enough for a loaded machine */
		execl(path, "hicache-bench", "replay", "--trace", slice(), "--requests", "40", "--speedup", "4", "--kv",
		      "kv,bf16,2,16,1", "--page-tokens", "128", "--pool-pages", "700", "--tp", "2", "--dir", hct_l3_dir,
		      "--no-progress", (char *)NULL);
		_exit(127);
	}
}

static const char *fd_text(int fd, char *buf, size_t len)
{
	ssize_t n = pread(fd, buf, len - 1, 0);

	buf[n > 0 ? n : 0] = 0;
	return buf;
}

/* pid's children (up to n), from /proc; how many. */
static unsigned children(pid_t pid, pid_t *kids, unsigned n)
{
	char path[64], buf[256], *p = buf, *end;
	unsigned k = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	if (!(f = fopen(path, "r")))
		return 0;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	for (long c; k < n && (c = strtol(p, &end, 10)) > 0; p = end)
		kids[k++] = (pid_t)c;
	return k;
}

/* pid, the replay's driver, once it has forked its two ranks and the run
 * is under way; in *rank, the first of them. */
static pid_t driver_of(pid_t pid, pid_t *rank, int efd)
{
	pid_t kids[4];

	for (int i = 0; i < 6000; i++) {
		if (children(pid, kids, 4) >= 2) {
			*rank = kids[0];
			usleep(500000); /* a few requests in */
			return pid;
		}
		usleep(5000);
	}
	ck_abort_msg("replay pid %d forked no two ranks in 30 s:\n%s", (int)pid, fd_text(efd, err, sizeof(err)));
	return 0;
}

static int wait_exit(pid_t pid)
{
	int st;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A rank SIGKILLed mid-run: the driver names it, stops the others, exits 1
 * and cleans up.  It used to exit 1 saying nothing. */
START_TEST(rank_killed)
{
	pid_t d, rank;
	int ofd, efd;

	replay_bg(&d, &ofd, &efd);
	driver_of(d, &rank, efd);
	ck_assert_int_eq(kill(rank, SIGKILL), 0);
	ck_assert_int_eq(wait_exit(d), 1);
	fd_text(efd, err, sizeof(err));
	ck_assert_msg(strstr(err, "engine 0 rank 0 (pid ") && strstr(err, "was killed by Killed"), "%s", err);
	ck_assert_msg(strstr(err, "stopping the other ranks"), "%s", err);
	ck_assert_int_eq(leftovers(), 0);
	close(ofd);
	close(efd);
}
END_TEST

/* SIGINT to the driver: it says so, the ranks stop, the report covers what
 * was served, and what stopping did to work in flight is no rank's error
 * (it used to be reported as a commit error). */
START_TEST(interrupted)
{
	pid_t d, rank;
	int ofd, efd;

	replay_bg(&d, &ofd, &efd);
	ck_assert_int_eq(kill(driver_of(d, &rank, efd), SIGINT), 0);
	ck_assert_int_eq(wait_exit(d), 1);
	fd_text(efd, err, sizeof(err));
	fd_text(ofd, out, sizeof(out));
	ck_assert_msg(strstr(err, "interrupted: stopping the ranks after "), "%s", err);
	ck_assert_msg(strstr(err, "the figures above are of the requests served before it"), "%s", err);
	ck_assert_msg(!strstr(err, ": engine 0 rank"), "a rank's error after the stop:\n%s", err);
	ck_assert_msg(strstr(out, "requests:"), "no report:\n%s", out);
	ck_assert_int_eq(leftovers(), 0);
	close(ofd);
	close(efd);
}
END_TEST

/* A pid no process has: a child's, reaped. */
static pid_t dead_pid(void)
{
	pid_t p = fork();

	ck_assert_int_ge(p, 0);
	if (p == 0)
		_exit(0);
	ck_assert_int_eq(waitpid(p, NULL, 0), p);
	return p;
}

static int exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/* What replays that died left (a pool, an shm store, an L3 directory, all
 * named after their pid) goes with the next replay; a live pid's stays. */
START_TEST(leftovers_swept)
{
	pid_t dead = dead_pid();
	char pool[64], live[64], dir[256], file[300], store[128];
	struct hct_spec sp;
	FILE *f;

	snprintf(pool, sizeof(pool), "hcreplay-%d", (int)dead);
	snprintf(live, sizeof(live), "hcreplay-%d", (int)getpid());
	hct_spec_init(&sp, pool, 8);
	ck_assert_int_eq(hc_pool_create(&sp.spec), 0);
	hct_spec_init(&sp, live, 8);
	ck_assert_int_eq(hc_pool_create(&sp.spec), 0);
	snprintf(dir, sizeof(dir), "%s/hicache-replay-%d-Ab12Cd", hct_l3_dir, (int)dead);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	snprintf(file, sizeof(file), "%s/object", dir);
	ck_assert_ptr_nonnull(f = fopen(file, "w"));
	fclose(f);
	snprintf(store, sizeof(store), "/dev/shm/hicache-l3.hcreplay-%d", (int)dead);
	ck_assert_ptr_nonnull(f = fopen(store, "w"));
	fclose(f);

	ck_assert_replay(0, "--trace", slice(), "--requests", "10", "--kv", "kv,bf16,2,16,1", "--page-tokens", "128",
			 "--pool-pages", "700", "--tp", "1", "--dir", hct_l3_dir);
	ck_assert_msg(strstr(err, "removed pool hcreplay-") && strstr(err, "left by replay pid"), "%s", err);
	snprintf(file, sizeof(file), "/dev/shm/hicache.%s", pool);
	ck_assert_msg(!exists(file), "%s stayed:\n%s", file, err);
	ck_assert_msg(!exists(dir), "%s stayed:\n%s", dir, err);
	ck_assert_msg(!exists(store), "%s stayed:\n%s", store, err);
	snprintf(file, sizeof(file), "/dev/shm/hicache.%s", live);
	ck_assert_msg(exists(file), "a live pid's pool went:\n%s", err);
	ck_assert_int_eq(hc_pool_destroy(live, NULL, 0), 0);
}
END_TEST

/* A driver SIGKILLed mid-run: its ranks die with it, and what it left is
 * the next replay's to remove. */
START_TEST(driver_killed)
{
	pid_t d, rank, drv;
	int ofd, efd;
	char pool[128];

	replay_bg(&d, &ofd, &efd);
	drv = driver_of(d, &rank, efd);
	ck_assert_int_eq(kill(drv, SIGKILL), 0);
	wait_exit(d);
	for (int i = 0; i < 400 && kill(rank, 0) == 0; i++)
		usleep(5000);
	ck_assert_msg(kill(rank, 0) < 0 && errno == ESRCH, "rank %d outlived its driver", (int)rank);
	snprintf(pool, sizeof(pool), "/dev/shm/hicache.hcreplay-%d", (int)drv);
	ck_assert_msg(exists(pool), "a SIGKILLed driver's pool should be left for the sweep");
	ck_assert_int_eq(leftovers(), 1);
	ck_assert_replay(0, "--trace", slice(), "--requests", "5", "--kv", "kv,bf16,2,16,1", "--page-tokens", "128",
			 "--pool-pages", "700", "--tp", "1", "--dir", hct_l3_dir);
	ck_assert_msg(!exists(pool), "%s stayed:\n%s", pool, err);
	ck_assert_int_eq(leftovers(), 0);
	close(ofd);
	close(efd);
}
END_TEST

/* Without a terminal, every long step says how it goes, a line every
 * HICACHE_PROGRESS_SECONDS: the pool's allocation and population, the
 * requests, the ranks' exits, and the teardown; --no-progress, nothing. */
START_TEST(progress_lines)
{
	static const char *const phases[] = {
		"allocating the pool", "populating the page tables", "serving",
		"ranks exiting",       "removing the pool",          "removing the L3's files"
	};
	const char *args[] = { "replay", "--trace", slice(),          "--requests",   "20",  "--page-tokens",
			       "128",    "--kv",    "kv,bf16,2,16,1", "--pool-pages", "700", "--backend",
			       "file",   "--dir",   hct_l3_dir,       NULL,           NULL };
	const char *at = err;

	setenv("HICACHE_PROGRESS_SECONDS", "0", 1);
	ck_assert_int_eq(hct_tool_run("hicache-bench", args, out, sizeof(out), err, sizeof(err)), 0);
	for (unsigned i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
		char want[96];
		const char *first;
		snprintf(want, sizeof(want), "hicache-bench replay: %s ", phases[i]);
		first = strstr(at, want);
		ck_assert_msg(first, "no '%s' line after the phases before it:\n%.4000s", phases[i], err);
		for (at = first; strstr(at + 1, want); at = strstr(at + 1, want))
			; /* its last line */
		ck_assert_msg(strstr(at, "(100%)") && strstr(at, "(100%)") < strchr(at, '\n'),
			      "'%s' does not end at 100%%:\n%.4000s", phases[i], err);
	}
	args[15] = "--no-progress";
	ck_assert_int_eq(hct_tool_run("hicache-bench", args, out, sizeof(out), err, sizeof(err)), 0);
	ck_assert_msg(!strstr(err, "hicache-bench replay: serving"), "--no-progress said:\n%.4000s", err);
	setenv("HICACHE_PROGRESS_SECONDS", "3600", 1); /* a step shorter than that says nothing */
	args[15] = NULL;
	ck_assert_int_eq(hct_tool_run("hicache-bench", args, out, sizeof(out), err, sizeof(err)), 0);
	ck_assert_msg(!strstr(err, "hicache-bench replay: "), "a short run said (every hour):\n%.4000s", err);
	unsetenv("HICACHE_PROGRESS_SECONDS");
}
END_TEST

/* An L3 that fills up: every failed page write is counted by its cause,
 * the report prints them, and the log says it once (they used to go
 * unsaid: 102 K failures, no line). */
START_TEST(l3_full_said)
{
	char mnt[] = "/tmp/hct-l3full-XXXXXX";
	const char *cause;
	json_object *j;
	unsigned said = 0;

	ck_assert_ptr_nonnull(mkdtemp(mnt));
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("hct", mnt, "tmpfs", 0, "size=2m") < 0) {
		fprintf(stderr, "l3_full_said: skipped (cannot mount a tmpfs: %s)\n", strerror(errno));
		rmdir(mnt);
		return;
	}
	ck_assert_replay(0, "--trace", slice(), "--requests", "30", "--kv", "kv,bf16,2,64,2", "--page-tokens", "128",
			 "--pool-pages", "2000", "--tp", "1", "--serial", "--dir", mnt, "--json", in_dir("full.json"));
	umount2(mnt, MNT_DETACH);
	rmdir(mnt);
	ck_assert_msg(strstr(out, "L3 page writes failed: ") && strstr(out, "(no space "), "%s", out);
	for (cause = err; (cause = strstr(cause, "failed with no space: No space left on device")); cause++)
		said++;
	ck_assert_msg(said == 1, "said %u times, not once:\n%s", said, err);
	ck_assert_msg(strstr(err, "counted in l3_backup_failed_nospace") &&
			      strstr(err, "writing a page to L3 (file:dir="),
		      "%s", err);
	j = json_object_from_file(in_dir("full.json"));
	ck_assert_ptr_nonnull(j);
	ck_assert_int_gt(jget(j, "outcomes.l3_write_fail_nospace"), 0);
	ck_assert_int_eq(jget(j, "outcomes.l3_write_fail_access"), 0);
	json_object_put(j);
}
END_TEST

START_TEST(bad_options)
{
	ck_assert_replay(2, "--page-tokens", "100");
	ck_assert_msg(strstr(err, "does not divide 512"), "%s", err);
	ck_assert_replay(2, "--model", "gpt-5");
	ck_assert_msg(strstr(err, "no such preset") && strstr(err, "llama3-8b"), "%s", err);
	ck_assert_replay(2, "--tp", "0");
	ck_assert_replay(2, "--reference", "--backend", "file");
	ck_assert_msg(strstr(err, "--reference runs with"), "%s", err);
	ck_assert_replay(2, "--model", "llama3-8b", "--kv", "kv,bf16,2,16,1");
	ck_assert_replay(2, "--kv", "kv,bf16,2,16");
	ck_assert_replay(2, "--pool-pages", "10", "--kv", "kv,bf16,2,16,1");
	ck_assert_msg(strstr(err, "cannot hold the longest request"), "%s", err);
	ck_assert_replay(2, "--bogus");
	ck_assert_replay(2, "--trace", trace_of("bad.jsonl", REQ(0, 10, "[1]") "{\"timestamp\": 1}\n"));
	ck_assert_msg(strstr(err, "bad.jsonl:2:") && strstr(err, "no \"input_length\" field"), "%s", err);
	{
		/* a request longer than one lookup may name: its line, not the
		 * pool's "ticket_keys 1600000 is out of range" */
		static char text[100000];
		int off = snprintf(text, sizeof(text),
				   "%s{\"timestamp\": 1, \"input_length\": %u, "
				   "\"output_length\": 1, \"hash_ids\": [",
				   REQ(0, 10, "[1]"), 8200u * 512);
		for (unsigned i = 0; i < 8200; i++)
			off += snprintf(text + off, sizeof(text) - (size_t)off, "%s%u", i ? "," : "", i);
		snprintf(text + off, sizeof(text) - (size_t)off, "]}\n");
		ck_assert_replay(2, "--trace", trace_of("long.jsonl", text));
		ck_assert_msg(strstr(err, "trace line 2: a request of 4198400 tokens is 65600 pages of 64 tokens, more "
					  "than the 65536 one lookup may name"),
			      "%s", err);
	}
	ck_assert_replay(2, "--trace", in_dir("missing.jsonl"));
	ck_assert_msg(strstr(err, "missing.jsonl"), "%s", err);
	ck_assert_replay(0, "--help");
	ck_assert_msg(strstr(out, "--reference"), "%s", out);
	ck_assert_replay(0, "--version");
	ck_assert_msg(!strncmp(out, "hicache-bench replay (hicache) " HICACHE_VERSION_STRING "\n", 40), "%s", out);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("replay");
	TCase *tc = tcase_create("workload");
	TCase *tr = tcase_create("run");

	tcase_add_checked_fixture(tc, hct_l3_setup, hct_l3_teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, trace_slice);
	tcase_add_test(tc, trace_good_lines);
	tcase_add_test(tc, trace_bad_lines);
	tcase_add_test(tc, pages_and_keys);
	tcase_add_test(tc, generator);
	tcase_add_test(tc, refsim_by_hand);
	tcase_add_test(tc, refsim_against_naive);
	suite_add_tcase(s, tc);
	/* each test runs the replay up to ~12 times, processes and all */
	tcase_add_checked_fixture(tr, hct_l3_setup, hct_l3_teardown);
	tcase_set_timeout(tr, 120);
	tcase_add_test(tr, reference_check);
	tcase_add_test(tr, backends);
	tcase_add_test(tr, hybrids);
	tcase_add_test(tr, outputs);
	tcase_add_test(tr, json_documented);
	tcase_add_test(tr, existing_pool);
	tcase_add_test(tr, existing_pool_twice);
	tcase_add_test(tr, paced);
	tcase_add_test(tr, bad_options);
	tcase_add_test(tr, rank_killed);
	tcase_add_test(tr, interrupted);
	tcase_add_test(tr, leftovers_swept);
	tcase_add_test(tr, driver_killed);
	tcase_add_test(tr, l3_full_said);
	tcase_add_test(tr, progress_lines);
	suite_add_tcase(s, tr);
	return hct_run(s);
}
