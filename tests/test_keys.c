/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_keys.c - the namespace seed and the key chain, checked against an
 * independent implementation of the key rule (doc/design.md, "Keys") in Python's hashlib, run
 * at test time: the keys must be byte-identical to SGLang's, and a second
 * implementation of the rule is the only way to see that ours says it.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "hct.h"

/*
 * The rule in Python, from the text of doc/design.md, not from keys.c.  argv:
 * extra_key cache_salt, each "-" for absent or "=" and its UTF-8 bytes in
 * hex; then pairs of page_tokens and comma-separated decimal token ids.
 * Prints the seed ("none" if absent), then for each pair its keys and "--".
 * No single quote inside: it travels in one to the shell.
 */
static const char py_rule[] =
	"import hashlib, sys\n"
	"def part(x):\n"
	"    if x == \"-\":\n"
	"        return b\"\\x00\"\n"
	"    b = bytes.fromhex(x[1:])\n"
	"    return b\"\\x01\" + len(b).to_bytes(8, \"little\") + b\n"
	"a = sys.argv[1:]\n"
	"seed = None\n"
	"if a[0] != \"-\" or a[1] != \"-\":\n"
	"    seed = hashlib.sha256(b\"sglang-cache-namespace-v1\" + part(a[0]) + part(a[1])).digest()\n"
	"print(seed.hex() if seed is not None else \"none\")\n"
	"for k in range(2, len(a), 2):\n"
	"    pt = int(a[k])\n"
	"    toks = [int(t) for t in a[k + 1].split(\",\") if t]\n"
	"    prior = seed if seed is not None else b\"\"\n"
	"    for i in range(len(toks) // pt):\n"
	"        h = hashlib.sha256()\n"
	"        h.update(prior)\n"
	"        for t in toks[i * pt:(i + 1) * pt]:\n"
	"            h.update(t.to_bytes(4, \"little\"))\n"
	"        prior = h.digest()\n"
	"        print(prior.hex())\n"
	"    print(\"--\")\n";

/* A growable string, for the command line and for our side's lines. */
struct buf {
	char *s;
	size_t len, cap;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	ck_assert_int_ge(n, 0);
	if (b->len + (size_t)n + 1 > b->cap) {
		b->cap = (b->len + (size_t)n + 1) * 2;
		b->s = realloc(b->s, b->cap);
		ck_assert_ptr_nonnull(b->s);
	}
	va_start(ap, fmt);
	vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

static void put_hex(struct buf *b, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		put(b, "%02x", p[i]);
}

/* A namespace part for the Python side: "-" absent, "=<hex>" present. */
static void put_part(struct buf *b, const char *s)
{
	if (!s) {
		put(b, " -");
		return;
	}
	put(b, " =");
	put_hex(b, (const uint8_t *)s, strlen(s));
}

/* One chain to compute on both sides. */
struct kcase {
	uint32_t pt;
	const uint32_t *tokens;
	size_t n;
	const char *what;
};

/* Run the Python rule; its whole stdout, or the test fails saying why. */
static char *run_python(const char *args)
{
	struct buf cmd = { 0 }, out = { 0 };
	char chunk[4096];
	size_t got;
	FILE *f;
	int st;

	put(&cmd, "python3 -c '%s'%s", py_rule, args);
	f = popen(cmd.s, "r");
	ck_assert_msg(f != NULL, "popen(python3): %s", strerror(errno));
	while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0)
		put(&out, "%.*s", (int)got, chunk);
	st = pclose(f);
	free(cmd.s);
	/* The shell's 127: no python3 at all.  A dependency, so a failure, not a skip. */
	ck_assert_msg(!(WIFEXITED(st) && WEXITSTATUS(st) == 127),
		      "python3 not found: it checks the keys against hashlib; run ./install-deps.sh");
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "python3 failed (status %#x), printed:\n%s", st,
		      out.s ? out.s : "");
	ck_assert_ptr_nonnull(out.s);
	return out.s;
}

/*
 * Compute the seed of (extra_key, cache_salt) and each case's chain here
 * and in Python, and compare line by line.
 */
static void check_against_python(const char *extra_key, const char *cache_salt, const struct kcase *cases,
				 unsigned ncases)
{
	struct buf args = { 0 }, ours = { 0 };
	uint8_t seed[HC_KEY_BYTES];
	const uint8_t *sp = NULL;
	char *theirs, *a, *b;
	unsigned line = 1;
	int r;

	put_part(&args, extra_key);
	put_part(&args, cache_salt);

	r = hc_namespace_seed(extra_key, cache_salt, seed);
	ck_assert_ok(r);
	ck_assert_int_eq(r, (extra_key || cache_salt) ? 1 : 0);
	if (r == 1) {
		sp = seed;
		put_hex(&ours, seed, sizeof(seed));
		put(&ours, "\n");
	} else {
		put(&ours, "none\n");
	}

	for (unsigned c = 0; c < ncases; c++) {
		const struct kcase *k = &cases[c];
		size_t want = k->n / k->pt;
		hc_key_t *keys = calloc(want + 1, sizeof(*keys));

		ck_assert_ptr_nonnull(keys);
		put(&args, " %" PRIu32 " ", k->pt);
		for (size_t i = 0; i < k->n; i++)
			put(&args, "%s%" PRIu32, i ? "," : "", k->tokens[i]);
		if (k->n == 0)
			put(&args, "''");
		r = hc_key_chain(sp, NULL, k->tokens, k->n, k->pt, keys);
		ck_assert_ok(r);
		ck_assert_msg((size_t)r == want, "%s: %d keys, want %zu", k->what, r, want);
		for (int i = 0; i < r; i++) {
			put_hex(&ours, keys[i], HC_KEY_BYTES);
			put(&ours, "\n");
		}
		put(&ours, "--\n");
		free(keys);
	}

	theirs = run_python(args.s);
	/* Report the first line that differs, with the case it belongs to. */
	a = ours.s;
	b = theirs;
	for (unsigned c = 0; *a || *b; line++) {
		size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
		const char *what = line == 1 ? "seed" : c < ncases ? cases[c].what : "(extra)";
		unsigned pt = line > 1 && c < ncases ? cases[c].pt : 0;

		ck_assert_msg(
			la == lb && memcmp(a, b, la) == 0,
			"extra_key %s%s%s, cache_salt %s%s%s: %s, page_tokens %u, line %u: ours %.*s, hashlib %.*s",
			extra_key ? "'" : "", extra_key ? extra_key : "NULL", extra_key ? "'" : "",
			cache_salt ? "'" : "", cache_salt ? cache_salt : "NULL", cache_salt ? "'" : "", what, pt, line,
			(int)la, a, (int)lb, b);
		if (line > 1 && la == 2 && memcmp(a, "--", 2) == 0)
			c++;
		a += la + (a[la] ? 1 : 0);
		b += lb + (b[lb] ? 1 : 0);
	}
	free(theirs);
	free(args.s);
	free(ours.s);
}

/* xorshift32: the same "random" tokens in every run, every value of uint32 reachable. */
static uint32_t rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

#define MAXTOK (7 * 64 + 5)

/* Token lists of every shape, for page sizes 1, 16 and 64. */
static unsigned make_cases(struct kcase *cases, uint32_t (*store)[MAXTOK])
{
	static const uint32_t sizes[] = { 1, 16, 64 };
	uint32_t s = 0x9e3779b9u;
	unsigned nc = 0;

	for (unsigned z = 0; z < 3; z++) {
		uint32_t pt = sizes[z];
		struct {
			size_t n;
			int random;
			const char *what;
		} shapes[] = {
			{ 0, 0, "no tokens" },       { pt - 1, 0, "less than a page" },
			{ pt, 0, "one page" },       { 2 * pt + pt / 2 + 1, 0, "a partial last page" },
			{ 5 * pt, 0, "five pages" }, { 7 * pt + 5, 1, "random tokens of all 32 bits" },
		};

		for (unsigned h = 0; h < sizeof(shapes) / sizeof(shapes[0]); h++) {
			uint32_t *t = store[nc];

			ck_assert_uint_le(shapes[h].n, MAXTOK);
			for (size_t i = 0; i < shapes[h].n; i++)
				t[i] = shapes[h].random ? rnd(&s) : (uint32_t)(1000 + 7 * i);
			if (shapes[h].random) {
				/* Make sure the high bit and both extremes are there. */
				t[0] = 0x80000000u;
				t[1] = UINT32_MAX;
				t[2] = 0;
			}
			cases[nc].pt = pt;
			cases[nc].tokens = t;
			cases[nc].n = shapes[h].n;
			cases[nc].what = shapes[h].what;
			nc++;
		}
	}
	return nc;
}

/* Each namespace: absent, each part alone, both, empty (present), non-ASCII. */
static const struct {
	const char *extra_key, *cache_salt;
} namespaces[] = {
	{ NULL, NULL },
	{ "lora-7", NULL },
	{ NULL, "tenant-a" },
	{ "lora-7", "tenant-a" },
	{ "", NULL },
	{ NULL, "" },
	{ "", "" },
	{ "", "tenant-a" },
	{ "caf\xc3\xa9-\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x94\x91 s\xc3\xa4lt" },
};

START_TEST(chain_matches_hashlib)
{
	static uint32_t store[18][MAXTOK];
	struct kcase cases[18];
	unsigned nc = make_cases(cases, store);

	check_against_python(namespaces[_i].extra_key, namespaces[_i].cache_salt, cases, nc);
}
END_TEST

/* A chain continued with prev is the chain computed at once, at every split. */
START_TEST(prev_continues_chain)
{
	enum { PT = 16, NP = 6 };
	uint32_t tokens[NP * PT + 3], s = 12345;
	hc_key_t whole[NP], part[NP];
	uint8_t seed[HC_KEY_BYTES];
	const uint8_t *sp = NULL;

	for (unsigned i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++)
		tokens[i] = rnd(&s);
	if (_i) {
		ck_assert_int_eq(hc_namespace_seed("lora", "salt", seed), 1);
		sp = seed;
	}
	ck_assert_int_eq(hc_key_chain(sp, NULL, tokens, sizeof(tokens) / sizeof(tokens[0]), PT, whole), NP);
	for (unsigned k = 1; k < NP; k++) {
		memset(part, 0, sizeof(part));
		ck_assert_int_eq(hc_key_chain(sp, NULL, tokens, (size_t)k * PT, PT, part), (int)k);
		/* The rest, with the tail that is not a full page. */
		ck_assert_int_eq(hc_key_chain(NULL, part[k - 1], tokens + k * PT,
					      sizeof(tokens) / sizeof(tokens[0]) - k * PT, PT, part + k),
				 (int)(NP - k));
		ck_assert_msg(memcmp(part, whole, sizeof(whole)) == 0, "split after page %u differs", k);
	}
	/* prev may be the slot just before out, as when a caller extends its own array. */
	ck_assert_int_eq(hc_key_chain(sp, NULL, tokens, 2 * PT, PT, part), 2);
	ck_assert_int_eq(hc_key_chain(NULL, part[1], tokens + 2 * PT, 4 * PT, PT, part + 2), 4);
	ck_assert_mem_eq(part, whole, sizeof(whole));
}
END_TEST

/* The properties a cache relies on, without Python. */
START_TEST(namespaces_differ)
{
	uint8_t s[6][HC_KEY_BYTES], keep[HC_KEY_BYTES];
	uint32_t tokens[4] = { 1, 2, 3, 4 };
	hc_key_t k0, k1, k2;

	memset(keep, 0xa5, sizeof(keep));
	memcpy(s[0], keep, sizeof(keep));
	ck_assert_int_eq(hc_namespace_seed(NULL, NULL, s[0]), 0);
	ck_assert_msg(memcmp(s[0], keep, sizeof(keep)) == 0, "no namespace must write nothing");

	ck_assert_int_eq(hc_namespace_seed("", NULL, s[0]), 1);
	ck_assert_int_eq(hc_namespace_seed(NULL, "", s[1]), 1);
	ck_assert_int_eq(hc_namespace_seed("a", NULL, s[2]), 1);
	ck_assert_int_eq(hc_namespace_seed(NULL, "a", s[3]), 1);
	ck_assert_int_eq(hc_namespace_seed("", "", s[4]), 1);
	ck_assert_int_eq(hc_namespace_seed("a", "a", s[5]), 1);
	for (int i = 0; i < 6; i++)
		for (int j = i + 1; j < 6; j++)
			ck_assert_msg(memcmp(s[i], s[j], HC_KEY_BYTES) != 0, "seeds %d and %d are equal", i, j);

	/* The same tokens under no namespace, and under two: three keys. */
	ck_assert_int_eq(hc_key_chain(NULL, NULL, tokens, 4, 4, &k0), 1);
	ck_assert_int_eq(hc_key_chain(s[0], NULL, tokens, 4, 4, &k1), 1);
	ck_assert_int_eq(hc_key_chain(s[1], NULL, tokens, 4, 4, &k2), 1);
	ck_assert_mem_ne(k0, k1, HC_KEY_BYTES);
	ck_assert_mem_ne(k0, k2, HC_KEY_BYTES);
	ck_assert_mem_ne(k1, k2, HC_KEY_BYTES);

	/* Position matters: the same page twice gets two keys. */
	uint32_t twice[8] = { 1, 2, 3, 4, 1, 2, 3, 4 };
	hc_key_t kk[2];
	ck_assert_int_eq(hc_key_chain(NULL, NULL, twice, 8, 4, kk), 2);
	ck_assert_mem_eq(kk[0], k0, HC_KEY_BYTES);
	ck_assert_mem_ne(kk[0], kk[1], HC_KEY_BYTES);
}
END_TEST

START_TEST(errors)
{
	uint32_t tokens[8] = { 0 };
	uint8_t seed[HC_KEY_BYTES] = { 1 }, prev[HC_KEY_BYTES] = { 2 };
	hc_key_t out[2], keep[2];

	memset(out, 0x5a, sizeof(out));
	memcpy(keep, out, sizeof(out));

	ck_assert_err(hc_namespace_seed("a", "b", NULL), EINVAL);
	ck_assert_msg_has("seed is NULL");
	ck_assert_err(hc_namespace_seed(NULL, NULL, NULL), EINVAL);
	ck_assert_msg_has("seed is NULL");

	ck_assert_err(hc_key_chain(NULL, NULL, tokens, 8, 0, out), EINVAL);
	ck_assert_msg_has("page_tokens is 0");
	ck_assert_err(hc_key_chain(seed, prev, tokens, 8, 4, out), EINVAL);
	ck_assert_msg_has("give prev to continue a chain or seed to start one, not both");
	ck_assert_err(hc_key_chain(NULL, NULL, NULL, 8, 4, out), EINVAL);
	ck_assert_msg_has("tokens is NULL but n is 8");
	ck_assert_err(hc_key_chain(NULL, NULL, NULL, 1, 4, out), EINVAL);
	ck_assert_msg_has("tokens is NULL");
	ck_assert_err(hc_key_chain(NULL, NULL, tokens, 8, 4, NULL), EINVAL);
	ck_assert_msg_has("out is NULL but 2 keys are due");
	/* Too many keys for the int it returns; nothing is read or written. */
	ck_assert_err(hc_key_chain(NULL, NULL, tokens, (size_t)INT32_MAX + 1, 1, out), E2BIG);
	ck_assert_msg_has("more than 2147483647 keys");
	ck_assert_err(hc_key_chain(NULL, NULL, tokens, SIZE_MAX, 1, out), E2BIG);
	ck_assert_msg_has("continue the chain with prev");
	ck_assert_mem_eq(out, keep, sizeof(out));

	/* No key due: no tokens or no out is fine, and out is not touched. */
	ck_assert_int_eq(hc_key_chain(NULL, NULL, NULL, 0, 4, NULL), 0);
	ck_assert_int_eq(hc_key_chain(NULL, NULL, tokens, 3, 4, NULL), 0);
	ck_assert_int_eq(hc_key_chain(seed, NULL, tokens, 3, 4, out), 0);
	ck_assert_int_eq(hc_key_chain(NULL, prev, tokens, 0, 4, out), 0);
	ck_assert_mem_eq(out, keep, sizeof(out));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("keys");
	TCase *tc = tcase_create("keys");

	/* Each hashlib case starts a python3: generous for slow CI machines. */
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, chain_matches_hashlib, 0, (int)(sizeof(namespaces) / sizeof(namespaces[0])));
	tcase_add_loop_test(tc, prev_continues_chain, 0, 2);
	tcase_add_test(tc, namespaces_differ);
	tcase_add_test(tc, errors);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
