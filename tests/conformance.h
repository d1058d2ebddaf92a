/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conformance.h - the conformance suite every backend plugin passes
 * (hicache-backend(7), THE CONFORMANCE SUITE): Check loop tests over a
 * table of targets, each a backend and how to get a fresh store of it; and
 * the store on a fresh pool that the cases, and the loader's tests of
 * tests/test_backends.c, run on.
 */
#ifndef HC_TESTS_CONFORMANCE_H
#define HC_TESTS_CONFORMANCE_H

#include <check.h>
#include <stddef.h>

#include <hicache/backend.h>
#include <hicache/hicache.h>

#define HCT_NPAGES 256 /* pages of a case's pool */
#define HCT_KV     1u  /* presence bits of the default test layout (hct.h) */
#define HCT_STATE  2u
#define HCT_BOTH   3u

struct hct_target {
	const char *name;
	/* Writes the spec of a fresh, empty store into spec (run in the
	 * case's process); cleanup, if any, removes what it made. */
	void (*setup)(char *spec, size_t len);
	void (*cleanup)(void);
};

/* The targets a case's loop index picks from; set before the runner forks
 * (it maps the memory the cases log the names they write in): 0 or -errno. */
int hct_conf_targets(const struct hct_target *t, unsigned n);
/* The cases: how many (HCT_CONF_CASES_MAX at most), each one's test (its
 * name is ->name) and a line of help. */
#define HCT_CONF_CASES_MAX 64
unsigned hct_conf_ncases(void);
const TTest *hct_conf_case(unsigned i);
const char *hct_conf_help(unsigned i);

/*
 * For a runner, outside any case (nothing here fails a test): opens spec on
 * a fresh pool as a case would, with its info in info, and deletes the
 * objects that the log of written names still holds (what failed cases
 * left).  0, with how many it could not delete in *left (all of them for a
 * backend without HC_BE_CAP_DELETE) and why in err; or a negative errno,
 * with hc_last_error()'s line in err.
 */
int hct_conf_probe(const char *spec, struct hc_store_info *info, unsigned *left, char *err, size_t errlen);
/* How many names the log holds: what a case left, to probe away. */
unsigned hct_conf_logged(void);

/* A store of a target on a fresh pool, with its plugin's table and instance. */
struct hct_env {
	const struct hct_target *b;
	const char *pool_name;
	hc_pool *p;
	hc_store *st;
	char spec[512];
	const struct hc_backend *be; /* raw ABI */
	void *inst;
	struct hc_store_info info;
};
/* Target i's store on a fresh pool of HCT_NPAGES pages (queue depth qd, 0:
 * the default); any failure fails the test. */
void hct_env_open(struct hct_env *e, int i, unsigned qd);
void hct_env_close(struct hct_env *e);
/* Another store on e's pool and spec. */
hc_store *hct_env_store(struct hct_env *e, unsigned qd);
/* Reserve keys (all new), fill them as a function of (key, salt) and
 * commit: the READY handles in out. */
void hct_make_ready(struct hct_env *e, const hc_key_t *keys, unsigned n, uint32_t salt, uint32_t presence,
		    hc_page_t *out);
/* Reserve keys and get them: statuses in status, the hit count returned.
 * Hits are checked against salt and committed; the rest are aborted. */
int hct_get_keys(struct hct_env *e, const hc_key_t *keys, unsigned n, uint32_t salt, uint32_t presence, int *status);

/* A log callback (hc_set_log) that appends warnings and errors to hct_logged. */
extern char hct_logged[4096];
void hct_log_capture(int level, const char *msg, void *arg);

#endif
