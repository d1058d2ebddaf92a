/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hct.h - helpers shared by the Check tests: unique tiny pools, sweeping
 * leftovers from /dev/shm, a default layout, and page contents that are a
 * function of (page, generation, group) so every reader can verify them.
 */
#ifndef HC_TESTS_HCT_H
#define HC_TESTS_HCT_H

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <hicache/hicache.h>
#include <hicache/service.h>

#include "../shmpool/pool.h"

#define HCT_PREFIX "hctest-"

/* A fresh pool name "hctest-<pid>-<n>" (static storage, 8 rotating buffers). */
const char *hct_name(void);

/* Remove /dev/shm/hicache.hctest-<pid>-* and /tmp/hct-l3-<pid>-* of dead
 * pids, and of ours if 'mine'. */
void hct_sweep(int mine);

/*
 * The default test layout: 16-token pages, TP 2, a sharded KV component
 * ("kv": bf16, 4 heads of 64 bytes, 2 layers) and a replicated state
 * ("state": 1024 bytes per layer, 2 layers).  20 KiB envelopes.
 */
struct hct_spec {
	struct hc_pool_spec spec;
	struct hc_component_spec comps[2];
};
void hct_spec_init(struct hct_spec *s, const char *name, uint32_t npages);
/* Create with the default layout (no populate) and attach; fails the test on error. */
hc_pool *hct_create_attach(const char *name, uint32_t npages, uint32_t quarantine_ms, uint32_t max_ranks);
hc_pool *hct_attach(const char *name, unsigned flags);

/* Fill / verify every byte of shard 'group' (HC_SHARD_REPLICATED: the replicated part). */
void hct_fill(hc_pool *p, hc_page_t page, uint32_t group_bit);
int hct_verify(hc_pool *p, hc_page_t page, uint32_t group_bit); /* 0, or -1 on mismatch */
/* Fill and commit every shard the page needs; returns the last commit's result. */
int hct_fill_commit_all(hc_pool *p, hc_page_t page);

/*
 * A board of READY pages that processes publish for others to read, in
 * shared memory.  hct_board_read pins a random one, verifies every shard and
 * unpins: 1 verified, 0 nothing to read (empty, or freed since published),
 * -EBADMSG wrong bytes, or the negative errno of a failed pin or unpin.
 */
#define HCT_BOARD 32
struct hct_board {
	_Atomic uint64_t slot[HCT_BOARD];
};
void hct_board_put(struct hct_board *b, hc_page_t pg);
void hct_board_drop(struct hct_board *b, hc_page_t pg);
int hct_board_read(hc_pool *p, struct hct_board *b, unsigned *seed);

/* Fill (fill != 0) or check every byte a page holds as a function of its
 * key, whatever page it lands in (a page read back from L3): 0, or -1 on a
 * mismatch or a page that cannot be addressed. */
int hct_key_bytes(hc_pool *p, hc_page_t pg, const hc_key_t key, int fill);
/* The same for one shard: a head group's bit, or HC_SHARD_REPLICATED (0: all). */
int hct_key_shard(hc_pool *p, hc_page_t pg, const hc_key_t key, uint32_t bit, int fill);
/* The lines a report callback got (hc_pool_check, hc_pool_repair): pass
 * hct_collect and a zeroed struct hct_lines. */
struct hct_lines {
	int n;
	char all[8192];
};
void hct_collect(void *arg, const char *line);
/* Store keys[0..n) (all new) as READY pages filled by key; their handles in pg. */
void hct_store_by_key(hc_pool *p, const hc_key_t *keys, unsigned n, uint32_t depth0, hc_page_t *pg);

/* n chained keys of a pseudo-random token sequence (4-token pages), from a seed. */
void hct_keys(hc_key_t *out, unsigned n, uint32_t seed);
/* Reserve keys, fill and commit every page reserved: the count stored (or a negative errno). */
int hct_store(hc_pool *p, const hc_key_t *keys, unsigned n, uint32_t depth0);
/* Pages of the pool in state s. */
uint64_t hct_in_state(hc_pool *p, enum hc_page_state s);
/* Wait (10 s at most) until no page is READY or RESERVED (a buffer_only
 * pool freed everything it staged): 1, or 0 after printing what is left. */
int hct_drained(hc_pool *p);
/* The write path of a buffer_only pool: a staging grant for n pages, the
 * keys stored filled by key (hct_store_by_key), their backup to L3, and the
 * grant given back. */
void hct_stage_write(hc_pool *p, const hc_key_t *k, unsigned n, uint32_t depth0);
/* Prefetch keys from L3 (waiting for all), take them, check every byte
 * (hct_key_bytes), and let them go. */
void hct_prefetch_read(hc_pool *p, const hc_key_t *k, unsigned n, uint32_t depth0);
/* The L3 existence query through the service (10 s at most): how many of
 * the first keys are in L3. */
int hct_l3_exists(hc_pool *p, const hc_key_t *keys, unsigned n);
/* Plain prefix lookup (no pin): the hit length. */
int hct_hit(hc_pool *p, const hc_key_t *keys, unsigned n);

/* The pool's stats; an error fails the test.  hct_counters and hct_counter
 * are the one place tests read the pool's counters (HC_CTR_*). */
struct hc_stats hct_stats(hc_pool *p);
void hct_counters(hc_pool *p, uint64_t out[HC_CTR__COUNT]);
uint64_t hct_counter(hc_pool *p, enum hc_counter c);

/* Stat name of a store (hc_store_stats): emitted once, or the test fails. */
uint64_t hct_store_stat(hc_store *st, const char *name);

/* Zeroed shared memory that forked children write and the parent reads. */
void *hct_shared(size_t bytes);
/* A report function for hc_pool_check that prints each violation. */
void hct_print_violation(void *arg, const char *line);
/*
 * A service (hc_service_start with o) in a child process, serving once this
 * returns; a child that could not start one is a test failure, not a hang.
 * Tests that fork ranks run their service so: a process with a service's
 * threads must not fork, since a lock one of them holds at that moment
 * (the allocator's, under ASan) stays held in the child for good.
 */
pid_t hct_service_child(const char *name, const struct hc_service_opts *o);
/* Stop it (SIGTERM: hc_service_stop); one that does not exit 0 fails the test. */
void hct_service_child_stop(pid_t pid);
/* A service in this process (hc_service_start with o); one that is refused
 * fails the test.  For tests that fork no ranks: stop it with hc_service_stop. */
hc_service *hct_service_start(const char *name, const struct hc_service_opts *o);

/* A fresh directory /tmp/hct-TAG-XXXXXX, its path in buf (len >= 64). */
void hct_mkdtemp(char *buf, size_t len, const char *tag);
/* Remove dir and everything under it; quiet when it is gone. */
void hct_rmtree(const char *dir);
/*
 * A test's L3 directory, a checked fixture (hct_l3_setup, hct_l3_teardown)
 * or called by a fixture of the test's own: hct_l3_dir is a fresh
 * /tmp/hct-l3-<pid>-XXXXXX and hct_l3_spec the file backend on it.  It is
 * removed by the teardown, at the exit of a test that failed a check (its
 * teardown does not run), or by hct_sweep once its process is gone.
 */
extern char hct_l3_dir[64];
extern char hct_l3_spec[128];
void hct_l3_setup(void);
void hct_l3_teardown(void);

/* How long hct_in_child waits before it shows the child's threads and kills it. */
#define HCT_CHILD_MAX_MS 25000

/* Fork; the child attaches pool_name itself (a forked handle is refused),
 * runs fn, detaches and exits 0 (100 if it could not attach).  Returns the
 * child's wait status. */
int hct_in_child(const char *pool_name, void (*fn)(hc_pool *, void *), void *arg);
/* A step that does nothing: the child attaches, detaches and exits, so its
 * slot was a rank once. */
void hct_nothing(hc_pool *p, void *arg);
/* The same in two steps, for children that run side by side: fork one (its
 * pid), and wait for it (HCT_CHILD_MAX_MS at most: a hung child is shown,
 * killed and fails the test; its wait status). */
pid_t hct_spawn(const char *pool_name, void (*fn)(hc_pool *, void *), void *arg);
int hct_wait_child(pid_t pid);

/*
 * A puppet: a child process attached to a pool that runs, one at a time,
 * the steps the test hands it, so several processes can be walked through
 * an exact order of events.  A step is fn(pool, arg) in the child; arg is
 * a number (point at shared memory for more).  A step that stops at a
 * crash point leaves the child stopped: hct_puppet_stopped waits for that,
 * hct_puppet_cont lets it go on, and hct_puppet_wait waits for the step's
 * end.  hct_puppet_end lets the child detach and exit; hct_puppet_kill
 * SIGKILLs it.  Each waits HCT_CHILD_MAX_MS at most, then fails the test.
 */
struct hct_puppet;
typedef void (*hct_step_fn)(hc_pool *p, long arg);
struct hct_puppet *hct_puppet(const char *pool_name);
void hct_puppet_send(struct hct_puppet *pp, hct_step_fn fn, long arg);
void hct_puppet_wait(struct hct_puppet *pp);
/* send + wait */
void hct_puppet_do(struct hct_puppet *pp, hct_step_fn fn, long arg);
void hct_puppet_stopped(struct hct_puppet *pp);
void hct_puppet_cont(struct hct_puppet *pp);
void hct_puppet_kill(struct hct_puppet *pp);
void hct_puppet_end(struct hct_puppet *pp);
pid_t hct_puppet_pid(const struct hct_puppet *pp);
/* The rank slot the puppet holds. */
int hct_puppet_slot(const struct hct_puppet *pp);

/* Seconds for a timed test, shortened under HC_QUICK=1. */
double hct_seconds(double normal);
double hct_now(void);
/* n distinct random values below range (slot maps), from rand(). */
void hct_perm(uint64_t *v, unsigned n, uint64_t range);
/* CUDA devices here: 0 in a build without CUDA, or when cudaGetDeviceCount finds none. */
int hct_cuda_devices(void);
/* Path of a built tool: $HC_BUILDDIR/tools/<name>. */
const char *hct_tool(const char *name);
/* Run tools/<name> with args (NULL-terminated, after argv[0]): its exit
 * status (128 + the signal that killed it), stdout into out and stderr into
 * err, NUL-terminated and cut to their sizes.  Fails the test if it could
 * not run at all. */
int hct_tool_run(const char *name, const char *const *args, char *out, size_t outlen, char *err, size_t errlen);

/* Run a suite in fork mode, sweeping before and after; returns the exit status. */
int hct_run(Suite *s);

#define ck_assert_ok(expr)                                                                                             \
	do {                                                                                                           \
		int ret__ = (expr);                                                                                    \
		ck_assert_msg(ret__ >= 0, "%s = %d: %s", #expr, ret__, hc_last_error());                               \
	} while (0)
#define ck_assert_err(expr, e)                                                                                         \
	do {                                                                                                           \
		int ret__ = (expr);                                                                                    \
		ck_assert_msg(ret__ == -(e), "%s = %d (%s), want -%s: %s", #expr, ret__,                               \
			      strerror(-ret__ > 0 ? -ret__ : 0), #e, hc_last_error());                                 \
	} while (0)
#define ck_assert_msg_has(s)                                                                                           \
	ck_assert_msg(strstr(hc_last_error(), (s)) != NULL, "error '%s' lacks '%s'", hc_last_error(), (s))

#endif
