/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_replay.c - what hicache-bench replay serves (tools/replay/): the
 * Mooncake trace parser on a slice of the public trace and on every kind of
 * bad line (each named with its line number), the pages of a request and
 * their keys, the built-in generator (deterministic, Mooncake-shaped,
 * sharing prefixes), and the reference simulation of L2, by hand and
 * against a second, naive LRU.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/cli.h"
#include "../tools/replay/workload.h"
#include "hct.h"

static char dir[64];

static void dir_setup(void)
{
	hct_mkdtemp(dir, sizeof(dir), "replay");
}

static void dir_teardown(void)
{
	hct_rmtree(dir);
}

/* A trace file of these lines in the test's directory: its path. */
static const char *trace_of(const char *name, const char *text)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
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

#define REQ(t, in, ids) "{\"timestamp\": " #t ", \"input_length\": " #in ", \"output_length\": 7, \"hash_ids\": " ids "}\n"

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
	const char *path = trace_of("ok.jsonl", "\n" REQ(5, 1000, "[7, 8]") "   \n"
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
}
END_TEST

START_TEST(trace_bad_lines)
{
	refused("", EINVAL, "t.jsonl", "an empty file");
	refused("\n  \n\n", EINVAL, "no requests", "all blank");
	refused("{\"timestamp\": 0, \"input_length\": 5\n", EINVAL, "t.jsonl:1:", "ends in the middle");
	refused(REQ(0, 10, "[1]") "{]\n", EINVAL, "t.jsonl:2:", "not JSON at column");
	refused(REQ(0, 10, "[1]") REQ(1, 10, "[1]") "[1, 2]\n", EINVAL, "t.jsonl:3:", "one JSON object per request");
	refused("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1}\n", EINVAL, "t.jsonl:1:",
		"no \"hash_ids\" field");
	refused("{\"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n", EINVAL, "t.jsonl:1:",
		"no \"timestamp\" field");
	refused(REQ(-1, 10, "[1]"), ERANGE, "t.jsonl:1:", "\"timestamp\" is -1");
	refused(REQ(0, -10, "[1]"), ERANGE, "\"input_length\" is -10", NULL);
	refused(REQ(0, 10, "[1]") REQ(9, 10, "[1]") REQ(8, 10, "[1]"), EINVAL, "t.jsonl:3: timestamp 8 is before line 2's 9",
		"arrival order");
	refused(REQ(0.5, 10, "[1]"), EINVAL, "\"timestamp\" is 0.5", "whole number");
	refused(REQ("3", 10, "[1]"), EINVAL, "\"timestamp\" is \"3\"", NULL);
	refused(REQ(0, 1025, "[1, 2]"), EINVAL, "\"hash_ids\" has 2 ids, but input_length 1025 needs 3", NULL);
	refused(REQ(0, 10, "[1, 2]"), EINVAL, "has 2 ids", "needs 1");
	refused(REQ(0, 600, "[1, -2]"), EINVAL, "hash_ids[1] is -2", NULL);
	refused(REQ(0, 600, "[1, \"a\"]"), EINVAL, "hash_ids[1] is \"a\"", NULL);
	refused(REQ(0, 10, "[1]") "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1],}\n",
		EINVAL, "t.jsonl:2: not JSON", NULL); /* json-c alone would take the trailing comma */
	refused("{'timestamp': 0}\n", EINVAL, "t.jsonl:1:", NULL);
	refused(REQ(0, 10, "{}"), EINVAL, "\"hash_ids\" is { }", "an array");
	refused(REQ(0, 10, "[1]") "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]} {}\n",
		EINVAL, "t.jsonl:2: ", "column 75"); /* the second object */
	refused(REQ(0, 99999999999, "[1]"), ERANGE, "\"input_length\" is 99999999999", NULL);
	{
		struct hc_rp_workload w;
		char path[128];
		snprintf(path, sizeof(path), "%s/none.jsonl", dir);
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
		struct naive v = { .k = calloc(cap, sizeof(hc_key_t)), .mark = calloc(cap, sizeof(uint32_t)), .cap = cap };
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

int main(void)
{
	Suite *s = suite_create("replay");
	TCase *tc = tcase_create("workload");

	tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, trace_slice);
	tcase_add_test(tc, trace_good_lines);
	tcase_add_test(tc, trace_bad_lines);
	tcase_add_test(tc, pages_and_keys);
	tcase_add_test(tc, generator);
	tcase_add_test(tc, refsim_by_hand);
	tcase_add_test(tc, refsim_against_naive);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
