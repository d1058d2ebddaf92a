/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_stage.c - buffer_only pools and their arbiter (lib/service/stage.c), with
 * the file backend: write grants, all or nothing, in FIFO order within
 * each priority class, parked and dropped past write_park_ms; prefetches
 * parked while the read staging is full; every page freed once its
 * transfer has ended (written, or taken and let go); what a dead rank held
 * given back; a restarted service freeing what its predecessor left; and
 * many ranks at once on a pool far smaller than their data, reading back
 * every byte.  Bad requests get clear errors.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hicache/service.h>

#include "../lib/service/internal.h"
#include "hct.h"

static hc_pool *buffer_pool(const char *name, uint32_t npages, uint32_t max_ranks)
{
	struct hct_spec s;

	hct_spec_init(&s, name, npages);
	s.spec.host_mode = HC_HOST_BUFFER_ONLY;
	s.spec.quarantine_ms = 50;
	s.spec.max_ranks = max_ranks;
	ck_assert_msg(hc_pool_create(&s.spec) == 0, "create %s: %s", name, hc_last_error());
	return hct_attach(name, 0);
}

static struct hc_service_opts opts(unsigned park_ms, unsigned hold_ms)
{
	return (struct hc_service_opts){ .size = sizeof(struct hc_service_opts),
					 .backend = hct_l3_spec,
					 .batch_pages = 4,
					 .write_park_ms = park_ms,
					 .stage_hold_ms = hold_ms };
}

static hc_service *start(const char *name, unsigned park_ms, unsigned hold_ms)
{
	struct hc_service_opts o = opts(park_ms, hold_ms);

	return hct_service_start(name, &o);
}

/* Counter c once it reaches want (5 s at most): the service counts some
 * things just after what a test can see of them. */
static uint64_t ctr_reach(hc_pool *p, enum hc_counter c, uint64_t want)
{
	uint64_t v = 0;

	for (int i = 0; i < 500 && (v = hct_counter(p, c)) < want; i++)
		usleep(10000);
	return v;
}

static struct hc_service_info info(hc_pool *p)
{
	struct hc_service_info si;

	ck_assert_ok(hc_service_info(p, &si, sizeof(si)));
	return si;
}

/* Wait (5 s at most) for a gauge to reach want. */
#define WAIT_GAUGE(p, field, want)                                                                                     \
	do {                                                                                                           \
		uint32_t v__ = 0;                                                                                      \
		for (int i__ = 0; i__ < 500 && (v__ = info(p).field) != (want); i__++)                                 \
			usleep(10000);                                                                                 \
		ck_assert_msg(v__ == (want), #field " is %u, want %u", v__, (unsigned)(want));                         \
	} while (0)

static hc_req *grant(hc_pool *p, unsigned n, unsigned prio)
{
	hc_req *g;

	ck_assert_ok(hc_req_stage(p, n, prio, &g));
	return g;
}

/* n keys from seed written to L3 through a grant, then prefetched and read
 * whole, not taken: the request. */
static hc_req *read_not_taken(hc_pool *p, hc_key_t *k, unsigned n, uint32_t seed)
{
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .keys = k,
				      .nkeys = n,
				      .policy = HC_PREFETCH_WAIT_COMPLETE };
	hc_req *rq;

	hct_keys(k, n, seed);
	hct_stage_write(p, k, n, 0);
	ck_assert(hct_drained(p));
	ck_assert_ok(hc_req_prefetch(p, &pr, &rq));
	ck_assert_int_eq(hc_req_wait(rq, 10000), (int)n);
	return rq;
}

static void finish(hc_pool *p, const char *name)
{
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}

/* Every staged page freed and R back to 0; the service stopped, the pool
 * checked and gone. */
static void drained_finish(hc_pool *p, hc_service *s, const char *name)
{
	ck_assert(hct_drained(p));
	WAIT_GAUGE(p, stage_read, 0);
	ck_assert_ok(hc_service_stop(s));
	finish(p, name);
}

/* Take the n pages of read rq, check their bytes against keys k, let go. */
static void take_check(hc_pool *p, hc_req *rq, const hc_key_t *k, unsigned n)
{
	hc_page_t pg[32];

	ck_assert_uint_le(n, 32);
	ck_assert_int_eq(hc_req_prefetch_take(rq, pg, NULL), (int)n);
	for (unsigned i = 0; i < n; i++) {
		ck_assert_int_eq(hct_key_bytes(p, pg[i], k[i], 0), 0);
		ck_assert_ok(hc_page_unpin(p, pg[i]));
	}
}

START_TEST(write_then_read_frees_every_page)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 32, 4);
	hc_service *s = start(name, 0, 0);
	hc_page_t pg[8];
	hc_key_t k[8];
	hc_req *g, *b;

	hct_keys(k, 8, 11);
	g = grant(p, 8, 0);
	ck_assert_int_eq(hc_req_wait(g, 10000), 8);
	ck_assert_uint_eq(info(p).stage_write, 8);
	{
		struct hc_stats st = hct_stats(p); /* the same gauge, as the tools see it */
		ck_assert_uint_eq(st.stage_write_pages, 8);
		ck_assert_uint_eq(st.stage_read_pages, 0);
	}
	{
		/* and as hicache-pool info prints it */
		char cmd[1200], out[4096] = "";
		FILE *f;
		snprintf(cmd, sizeof(cmd), "%s info %s", hct_tool("hicache-pool"), name);
		ck_assert_ptr_nonnull(f = popen(cmd, "r"));
		fread(out, 1, sizeof(out) - 1, f);
		ck_assert_int_eq(pclose(f), 0);
		ck_assert_msg(strstr(out, "; staging 0 read, 8 write, 0 reads and 0 writes waiting\n"), "info: %s",
			      out);
	}
	hct_store_by_key(p, k, 8, 0, pg);
	ck_assert_ok(hc_req_backup(p, pg, 8, &b));
	ck_assert_int_eq(hc_req_wait(b, 10000), 8);
	ck_assert_ok(hc_req_free(b));
	/* written: the pages go, while the grant is still held */
	ck_assert(hct_drained(p));
	ck_assert_ok(hc_req_free(g));
	WAIT_GAUGE(p, stage_write, 0);
	ck_assert_int_eq(hct_l3_exists(p, k, 8), 8);
	/* read back: held until taken and let go, then freed */
	hct_prefetch_read(p, k, 8, 0);
	ck_assert(hct_drained(p));
	WAIT_GAUGE(p, stage_read, 0);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_stage_grants), 1);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_stage_grant_pages), 8);
	ck_assert_uint_ge(ctr_reach(p, HC_CTR_stage_released, 16), 16);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_pages), 8);
	{
		/* tokens by tier: the prefetch read 8 pages of 16 tokens from
		 * L3; its take is not an L2 hit */
		struct hc_stats st = hct_stats(p);
		ck_assert_uint_eq(st.tokens[HC_TIER_l3].count, 1);
		ck_assert_uint_eq(st.tokens[HC_TIER_l3].sum, 8 * 16);
		ck_assert_uint_eq(st.tokens[HC_TIER_l3].bucket[4], 1); /* 128: [128, 256) */
		ck_assert_uint_eq(st.tokens[HC_TIER_l2].sum, 0);
	}
	ck_assert_ok(hc_service_stop(s));
	finish(p, name);
}
END_TEST

/* A prefetched page stays while its rank has not taken it, and goes once
 * the rank frees its request without taking. */
START_TEST(prefetch_held_until_taken_or_freed)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 32, 4);
	hc_service *s = start(name, 0, 0);
	hc_key_t k[6];
	hc_req *rq = read_not_taken(p, k, 6, 12);

	usleep(100000); /* the arbiter has had many turns: nothing goes */
	ck_assert_uint_eq(hct_in_state(p, HC_PAGE_READY), 6);
	ck_assert_uint_eq(info(p).stage_read, 6);
	{
		/* the same keys again need no staging: admitted at once, never parked */
		struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
					      .keys = k,
					      .nkeys = 6,
					      .policy = HC_PREFETCH_WAIT_COMPLETE };
		hc_req *again;
		ck_assert_ok(hc_req_prefetch(p, &pr, &again));
		ck_assert_int_eq(hc_req_wait(again, 10000), 6);
		ck_assert_ok(hc_req_free(again));
		ck_assert_uint_eq(hct_counter(p, HC_CTR_stage_parked_reads), 0);
	}
	ck_assert_ok(hc_req_free(rq)); /* never taken */
	drained_finish(p, s, name);
}
END_TEST

/* A rank that gives its grant back without backing its pages up loses
 * nothing: the service writes them (it left them to the rank while the
 * grant was held), and then frees them. */
START_TEST(grant_given_back_unwritten)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 32, 4);
	hc_service *s = start(name, 0, 0);
	hc_page_t pg[4];
	hc_key_t k[4];
	hc_req *g;

	hct_keys(k, 4, 17);
	g = grant(p, 4, 2);
	ck_assert_int_eq(hc_req_wait(g, 10000), 4);
	hct_store_by_key(p, k, 4, 0, pg);
	usleep(50000); /* the writer's turns come and go: the pages are the rank's */
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_writer_pages), 0);
	ck_assert_ok(hc_req_free(g));
	ck_assert(hct_drained(p));
	ck_assert_int_eq(hct_l3_exists(p, k, 4), 4);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_writer_pages), 4);
	hct_prefetch_read(p, k, 4, 0);
	ck_assert(hct_drained(p));
	ck_assert_ok(hc_service_stop(s));
	finish(p, name);
}
END_TEST

/* Failures release exactly what they took: a backup that fails at its
 * third page drops it and the page after it (L3 keeps prefixes); a read
 * that fails its checks gives its page back. */
START_TEST(failures_release_their_staging)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 32, 4);
	struct hc_service_opts o = opts(0, 0);
	hc_service *s = NULL;
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .nkeys = 2,
				      .policy = HC_PREFETCH_WAIT_COMPLETE };
	char spec[160];
	hc_page_t pg[4];
	hc_key_t k[4];
	hc_req *g, *b, *rq;

	snprintf(spec, sizeof(spec), "fault:dir=%s,fail_put_at=3,corrupt_get_at=1", hct_l3_dir);
	o.backend = spec;
	o.retries = -1;
	s = hct_service_start(name, &o);
	hct_keys(k, 4, 18);
	g = grant(p, 4, 0);
	ck_assert_int_eq(hc_req_wait(g, 10000), 4);
	hct_store_by_key(p, k, 4, 0, pg);
	ck_assert_ok(hc_req_backup(p, pg, 4, &b));
	ck_assert_int_eq(hc_req_wait(b, 10000), 2);
	ck_assert_ok(hc_req_free(b));
	ck_assert_ok(hc_req_free(g));
	ck_assert(hct_drained(p));
	ck_assert_int_eq(hct_l3_exists(p, k, 4), 2);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_writer_pages), 0); /* the cut-off page was not written after */
	/* the first read comes back corrupt: the prefix ends before it */
	pr.keys = k;
	ck_assert_ok(hc_req_prefetch(p, &pr, &rq));
	ck_assert_int_eq(hc_req_wait(rq, 10000), 0);
	ck_assert_ok(hc_req_free(rq));
	ck_assert(hct_drained(p));
	WAIT_GAUGE(p, stage_read, 0);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_corrupt), 1);
	hct_prefetch_read(p, k, 2, 0); /* the next read is good */
	ck_assert(hct_drained(p));
	ck_assert_ok(hc_service_stop(s));
	finish(p, name);
}
END_TEST

/* Write grants: the window, FIFO within a class, class 0 first, no
 * overtaking, and the drop of one parked too long. */
START_TEST(write_grants_fifo_by_class)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 20, 4); /* window 18 with no reads */
	hc_service *s = start(name, 400, 0);
	hc_req *a, *e, *f, *g, *d;

	a = grant(p, 18, 1);
	ck_assert_int_eq(hc_req_wait(a, 10000), 18);
	e = grant(p, 2, 3);
	f = grant(p, 2, 0);
	g = grant(p, 17, 0);
	WAIT_GAUGE(p, parked_writes, 3);
	ck_assert_int_eq(hc_req_poll(e), -EINPROGRESS);
	ck_assert_uint_eq(ctr_reach(p, HC_CTR_stage_parked_writes, 3), 3);
	ck_assert_ok(hc_req_free(a));
	/* class 0 first: f, then g does not fit (2 + 17 > 18) and holds e back */
	ck_assert_int_eq(hc_req_wait(f, 10000), 2);
	usleep(50000);
	ck_assert_int_eq(hc_req_poll(g), -EINPROGRESS);
	ck_assert_int_eq(hc_req_poll(e), -EINPROGRESS);
	ck_assert_ok(hc_req_free(f));
	ck_assert_int_eq(hc_req_wait(g, 10000), 17);
	usleep(50000);
	ck_assert_int_eq(hc_req_poll(e), -EINPROGRESS); /* 17 + 2 > 18 */
	/* parked past write_park_ms (400 ms): dropped, with a clear error */
	d = grant(p, 5, 0);
	ck_assert_int_eq(hc_req_wait(d, 10000), -ETIMEDOUT);
	ck_assert_msg_has("write_park_ms");
	ck_assert_int_eq(hc_req_wait(e, 10000), -ETIMEDOUT);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_stage_dropped), 2);
	ck_assert_ok(hc_req_free(d));
	ck_assert_ok(hc_req_free(e));
	ck_assert_ok(hc_req_free(g));
	WAIT_GAUGE(p, stage_write, 0);
	WAIT_GAUGE(p, parked_writes, 0);
	ck_assert_ok(hc_service_stop(s));
	finish(p, name);
}
END_TEST

/* Reads park while the read staging would pass 0.9 of the pool; a read
 * larger than that is refused. */
START_TEST(reads_park_at_the_read_cap)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 20, 4); /* reads: 18 pages */
	hc_service *s = start(name, 0, 0);
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req), .policy = HC_PREFETCH_WAIT_COMPLETE };
	hc_key_t k[28];
	hc_req *r1, *r2, *big;

	hct_keys(k, 28, 13);
	for (unsigned i = 0; i < 28; i += 7)
		hct_stage_write(p, k + i, 7, i);
	ck_assert(hct_drained(p));
	pr.keys = k;
	pr.nkeys = 12;
	ck_assert_ok(hc_req_prefetch(p, &pr, &r1));
	ck_assert_int_eq(hc_req_wait(r1, 10000), 12);
	pr.keys = k + 12;
	pr.first_depth = 12;
	pr.nkeys = 8;
	ck_assert_ok(hc_req_prefetch(p, &pr, &r2));
	WAIT_GAUGE(p, parked_reads, 1);
	ck_assert_int_eq(hc_req_poll(r2), -EINPROGRESS);
	/* taking r1 and letting go of it makes room */
	take_check(p, r1, k, 12);
	ck_assert_int_eq(hc_req_wait(r2, 10000), 8);
	take_check(p, r2, k + 12, 8);
	ck_assert_uint_ge(hct_counter(p, HC_CTR_stage_parked_reads), 1);
	/* 19 keys can never be staged at once in 20 pages (reads get 18) */
	pr.keys = k;
	pr.first_depth = 0;
	pr.nkeys = 19;
	ck_assert_ok(hc_req_prefetch(p, &pr, &big));
	ck_assert_int_eq(hc_req_wait(big, 10000), -E2BIG);
	ck_assert_msg_has("split");
	ck_assert_ok(hc_req_free(big));
	ck_assert_ok(hc_req_free(r1));
	ck_assert_ok(hc_req_free(r2));
	drained_finish(p, s, name);
}
END_TEST

/* A parked prefetch holds no page.  A rank's next prefetch names what its
 * last one read (a superset, as an engine's next round does) and parks
 * behind another rank's that waits for room; when the rank lets go of the
 * last one, its pages go, and the other is admitted.  Counted from the
 * moment it asked, the parked superset kept those pages, so the read in
 * front of it never fit: each waited on the other until stage_hold_ms. */
START_TEST(parked_read_holds_nothing)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 20, 4); /* reads: 18 pages */
	hc_service *s = start(name, 0, 60000);
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req), .policy = HC_PREFETCH_WAIT_COMPLETE };
	hc_key_t k[24]; /* k[0..11]: the first round; k[0..15]: the next; k[16..23]: the other rank's */
	hc_req *first, *next, *other;

	hct_keys(k, 24, 23);
	for (unsigned i = 0; i < 24; i += 6)
		hct_stage_write(p, k + i, 6, i);
	ck_assert(hct_drained(p));
	pr.keys = k;
	pr.nkeys = 12;
	ck_assert_ok(hc_req_prefetch(p, &pr, &first));
	ck_assert_int_eq(hc_req_wait(first, 10000), 12);
	pr.keys = k + 16;
	pr.first_depth = 16;
	pr.nkeys = 8;
	ck_assert_ok(hc_req_prefetch(p, &pr, &other)); /* 12 + 8 > 18: parks */
	WAIT_GAUGE(p, parked_reads, 1);
	pr.keys = k;
	pr.first_depth = 0;
	pr.nkeys = 16;
	ck_assert_ok(hc_req_prefetch(p, &pr, &next)); /* behind it, FIFO */
	WAIT_GAUGE(p, parked_reads, 2);
	ck_assert_ok(hc_req_free(first)); /* done with the first round */
	ck_assert_msg(hc_req_wait(other, 5000) == 8, "the read in front waits for pages a parked read names");
	ck_assert_int_eq(hc_req_poll(next), -EINPROGRESS); /* 8 + 16 > 18 */
	take_check(p, other, k + 16, 8);
	ck_assert_ok(hc_req_free(other));
	ck_assert_int_eq(hc_req_wait(next, 5000), 16);
	take_check(p, next, k, 16);
	ck_assert_ok(hc_req_free(next));
	ck_assert_uint_eq(hct_counter(p, HC_CTR_stage_expired), 0);
	drained_finish(p, s, name);
}
END_TEST

/* A release of a page's older life that comes after its newer one (two
 * workers race to the arbiter's lock) leaves the newer one listed: the page
 * is freed once its rank lets go.  Taking the late handle for the newer one,
 * the sweep found its generation gone and dropped the entry: the page stayed
 * READY for good, and the pool smaller by one. */
START_TEST(late_release_of_an_older_life)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 20, 4);
	hc_service *s = start(name, 0, 0);
	hc_page_t pg[1];
	hc_key_t k[1];
	hc_req *g, *b;

	hct_keys(k, 1, 29);
	g = grant(p, 1, 0);
	ck_assert_int_eq(hc_req_wait(g, 10000), 1);
	hct_store_by_key(p, k, 1, 0, pg);
	ck_assert_ok(hc_page_pin(p, pg[0])); /* held: listed, not freed */
	ck_assert_ok(hc_req_backup(p, pg, 1, &b));
	ck_assert_int_eq(hc_req_wait(b, 10000), 1);
	ck_assert_ok(hc_req_free(b));
	ck_assert_ok(hc_req_free(g));
	usleep(50000); /* the arbiter's turns: it stays while held */
	ck_assert_uint_eq(hct_in_state(p, HC_PAGE_READY), 1);
	/* the late release: the same page, a generation before */
	hc__stage_release(s, HC_PAGE_MAKE(HC_PAGE_ID(pg[0]), HC_PAGE_GEN(pg[0]) - 1), 0);
	ck_assert_ok(hc_page_unpin(p, pg[0]));
	ck_assert_msg(hct_drained(p), "the newer life was dropped from the release list");
	ck_assert_ok(hc_service_stop(s));
	finish(p, name);
}
END_TEST

/* A prefetch admitted but still queued behind a busy worker, cancelled by
 * its rank: its read staging goes back.  Freed from the queue without it,
 * it stayed counted in R for the life of the service. */
START_TEST(cancelled_queued_read_gives_back)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 20, 4);
	struct hc_service_opts o = opts(0, 0);
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req), .policy = HC_PREFETCH_WAIT_COMPLETE };
	char spec[160];
	hc_key_t k[8];
	hc_req *slow, *queued;
	hc_service *s;

	snprintf(spec, sizeof(spec), "fault:dir=%s,delay_us=400000", hct_l3_dir);
	o.backend = spec;
	o.workers = 1;
	s = hct_service_start(name, &o);
	hct_keys(k, 8, 31);
	hct_stage_write(p, k, 8, 0);
	ck_assert(hct_drained(p));
	pr.keys = k;
	pr.nkeys = 4;
	ck_assert_ok(hc_req_prefetch(p, &pr, &slow)); /* the one worker reads for 0.4 s */
	WAIT_GAUGE(p, jobs_running, 1);
	pr.keys = k + 4;
	pr.first_depth = 4;
	ck_assert_ok(hc_req_prefetch(p, &pr, &queued));
	WAIT_GAUGE(p, jobs_queued, 1);
	ck_assert_uint_eq(info(p).stage_read, 8); /* both admitted */
	ck_assert_ok(hc_req_cancel(queued));
	ck_assert_int_eq(hc_req_wait(queued, 5000), -ECANCELED);
	ck_assert_ok(hc_req_free(queued));
	ck_assert_int_eq(hc_req_wait(slow, 5000), 4);
	ck_assert_ok(hc_req_free(slow));
	drained_finish(p, s, name);
}
END_TEST

START_TEST(bad_requests)
{
	const char *name = hct_name(), *cname = hct_name();
	hc_pool *p = buffer_pool(name, 20, 4);
	hc_pool *c = hct_create_attach(cname, 16, 100, 4);
	hc_service *s = start(name, 0, 0);
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req), .nkeys = 1, .prio = HC_PRIO_CLASSES };
	hc_key_t k[1];
	hc_req *r;

	hct_keys(k, 1, 14);
	pr.keys = k;
	ck_assert_err(hc_req_stage(c, 1, 0, &r), EOPNOTSUPP);
	ck_assert_msg_has("cache pool");
	ck_assert_err(hc_req_stage(p, 0, 0, &r), EINVAL);
	ck_assert_err(hc_req_stage(p, 21, 0, &r), EINVAL);
	ck_assert_err(hc_req_stage(p, 1, HC_PRIO_CLASSES, &r), EINVAL);
	ck_assert_msg_has("priority class");
	ck_assert_err(hc_req_stage(p, 1, 0, NULL), EINVAL);
	ck_assert_err(hc_req_prefetch(p, &pr, &r), EINVAL);
	ck_assert_msg_has("priority class");
	/* more than the widest write window (18 of 20) */
	ck_assert_ok(hc_req_stage(p, 19, 0, &r));
	ck_assert_int_eq(hc_req_wait(r, 10000), -E2BIG);
	ck_assert_ok(hc_req_free(r));
	/* a backup of a page the pool does not have stops before it, and the
	 * arbiter keeps nothing of it */
	{
		hc_page_t bogus = HC_PAGE_MAKE(1000000, 1);
		ck_assert_ok(hc_req_backup(p, &bogus, 1, &r));
		ck_assert_int_eq(hc_req_wait(r, 10000), 0); /* none of the first pages is in L3 */
		ck_assert_ok(hc_req_free(r));
	}
	/* nothing is evicted from a buffer_only pool */
	ck_assert_err(hc_evict(p, 1), EOPNOTSUPP);
	ck_assert_msg_has("buffer_only");
	ck_assert_err(hc_evict_key(p, k[0]), EOPNOTSUPP);
	ck_assert_ok(hc_service_stop(s));
	hc_pool_detach(c);
	hc_pool_destroy(cname, NULL, HC_DESTROY_FORCE);
	finish(p, name);
}
END_TEST

/* A restarted service frees what the one before left behind: pages read
 * for a rank that never took them. */
START_TEST(restart_frees_leftovers)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 32, 4);
	hc_service *s = start(name, 0, 0);
	hc_key_t k[5];
	hc_req *rq = read_not_taken(p, k, 5, 15);

	ck_assert_ok(hc_service_stop(s)); /* the rank never took them */
	ck_assert_uint_eq(hct_in_state(p, HC_PAGE_READY), 5);
	s = start(name, 0, 0);
	ck_assert(hct_drained(p));
	ck_assert_ok(hc_req_free(rq));
	ck_assert_ok(hc_service_stop(s));
	finish(p, name);
}
END_TEST

/* ---- ranks in other processes (the service in a child of its own) */

struct dead_arg {
	hc_key_t k[6];
};

static void hold_and_die(hc_pool *p, void *arg)
{
	struct dead_arg *a = arg;
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .keys = a->k,
				      .nkeys = 6,
				      .policy = HC_PREFETCH_WAIT_COMPLETE };
	hc_req *g, *rq;

	ck_assert_ok(hc_req_stage(p, 10, 0, &g));
	ck_assert_int_eq(hc_req_wait(g, 10000), 10);
	ck_assert_ok(hc_req_prefetch(p, &pr, &rq));
	ck_assert_int_eq(hc_req_wait(rq, 10000), 6);
	raise(SIGKILL); /* with a grant and an untaken prefetch */
}

START_TEST(dead_rank_gives_back)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 32, 4);
	struct hc_service_opts o = opts(0, 0);
	struct dead_arg *a = hct_shared(sizeof(*a));
	pid_t svc = hct_service_child(name, &o);
	int st;

	hct_keys(a->k, 6, 16);
	hct_stage_write(p, a->k, 6, 0);
	ck_assert(hct_drained(p));
	st = hct_in_child(name, hold_and_die, a);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status 0x%x", st);
	ck_assert(hct_drained(p));
	WAIT_GAUGE(p, stage_write, 0);
	WAIT_GAUGE(p, stage_read, 0);
	ck_assert_uint_ge(hct_counter(p, HC_CTR_stage_expired), 2);
	hct_service_child_stop(svc);
	finish(p, name);
}
END_TEST

/* Many ranks at once on a pool far smaller than their data: each writes
 * its own chains through grants and reads them back, and every byte read
 * must be right.  Nothing may be left staged at the end. */
#define PR_RANKS  3
#define PR_ROUNDS 6
#define PR_CHUNK  5

struct pressure {
	unsigned seed[PR_RANKS];
	_Atomic int bad, done;
};

/* A prefetch that never ends: the arbiter's state, then a failure. */
static void stuck(hc_pool *p, unsigned me, unsigned r, unsigned n)
{
	struct hc_service_info si = info(p);
	struct hc_stats st;

	ck_assert_ok(hc_pool_stats(p, &st, sizeof(st)));
	ck_abort_msg(
		"rank %u round %u: a prefetch of %u keys not done after 15 s: live %d, R %u, W %u, parked reads %u, "
		"writes %u, jobs queued %u, running %u; pages free %" PRIu64 " reserved %" PRIu64 " ready %" PRIu64
		"; released %" PRIu64 ", expired %" PRIu64 ", parked-read events %" PRIu64,
		me, r, n, si.live, si.stage_read, si.stage_write, si.parked_reads, si.parked_writes, si.jobs_queued,
		si.jobs_running, st.pages[HC_PAGE_FREE], st.pages[HC_PAGE_RESERVED], st.pages[HC_PAGE_READY],
		st.counter[HC_CTR_stage_released], st.counter[HC_CTR_stage_expired],
		st.counter[HC_CTR_stage_parked_reads]);
}

static void pressure_rank(hc_pool *p, void *arg)
{
	struct pressure *ps = arg;
	unsigned me = (unsigned)atomic_fetch_add_explicit(&ps->done, 1, memory_order_relaxed); /* 0.. as spawned */
	hc_key_t k[PR_ROUNDS * PR_CHUNK];

	hct_keys(k, PR_ROUNDS * PR_CHUNK, 100 + me);
	for (unsigned r = 0; r < PR_ROUNDS; r++) {
		const hc_key_t *c = k + r * PR_CHUNK;
		hc_page_t pg[PR_CHUNK];
		struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
					      .keys = k,
					      .nkeys = (r + 1) * PR_CHUNK,
					      .policy = HC_PREFETCH_WAIT_COMPLETE,
					      .prio = r % HC_PRIO_CLASSES };
		hc_page_t *rd = calloc(pr.nkeys, sizeof(*rd));
		hc_req *g, *b, *rq;
		int h;
		/* write this round's chunk */
		ck_assert_ok(hc_req_stage(p, PR_CHUNK, me % HC_PRIO_CLASSES, &g));
		ck_assert_int_eq(hc_req_wait(g, 20000), PR_CHUNK);
		hct_store_by_key(p, c, PR_CHUNK, r * PR_CHUNK, pg);
		ck_assert_ok(hc_req_backup(p, pg, PR_CHUNK, &b));
		ck_assert_int_eq(hc_req_wait(b, 20000), PR_CHUNK);
		ck_assert_ok(hc_req_free(b));
		ck_assert_ok(hc_req_free(g));
		/* read back everything written so far; check every byte */
		ck_assert_ok(hc_req_prefetch(p, &pr, &rq));
		if (hc_req_wait(rq, 15000) == -ETIMEDOUT) /* say what the arbiter holds, not just hang */
			stuck(p, me, r, pr.nkeys);
		h = hc_req_prefetch_take(rq, rd, NULL);
		ck_assert_msg(h == (int)pr.nkeys, "rank %u round %u: hit %d of %u: %s", me, r, h, pr.nkeys,
			      hc_last_error());
		for (int i = 0; i < h; i++) {
			if (hct_key_bytes(p, rd[i], k[i], 0) != 0)
				atomic_fetch_add_explicit(&ps->bad, 1, memory_order_relaxed);
			ck_assert_ok(hc_page_unpin(p, rd[i]));
		}
		ck_assert_ok(hc_req_free(rq));
		free(rd);
	}
}

START_TEST(many_ranks_under_pressure)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 40, 8); /* 3 ranks x 30 pages of data, 40 pages */
	struct hc_service_opts o = opts(20000, 0);
	struct pressure *ps = hct_shared(sizeof(*ps));
	pid_t svc = hct_service_child(name, &o), kids[PR_RANKS];

	for (unsigned i = 0; i < PR_RANKS; i++)
		kids[i] = hct_spawn(name, pressure_rank, ps);
	for (unsigned i = 0; i < PR_RANKS; i++) {
		int st = hct_wait_child(kids[i]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %u status 0x%x", i, st);
	}
	ck_assert_int_eq(ps->bad, 0);
	ck_assert(hct_drained(p));
	WAIT_GAUGE(p, stage_read, 0);
	WAIT_GAUGE(p, stage_write, 0);
	ck_assert_uint_eq(info(p).parked_reads + info(p).parked_writes, 0);
	ck_assert_uint_eq(hct_counter(p, HC_CTR_stage_dropped), 0);
	hct_service_child_stop(svc);
	finish(p, name);
}
END_TEST

/* SIGKILL of the service while ranks write and read through it: the ranks
 * see their requests fail, a restarted service frees what was staged, and
 * nothing is left behind; every byte read back is right. */
struct churn {
	_Atomic int stop, bad, rounds, next;
};

static void churn_rank(hc_pool *p, void *arg)
{
	struct churn *c = arg;

	while (!atomic_load(&c->stop)) {
		hc_key_t k[4];
		hc_page_t pg[4], got[4];
		uint8_t skip[4];
		struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req), .keys = k, .nkeys = 4 };
		struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
					      .keys = k,
					      .nkeys = 4,
					      .policy = HC_PREFETCH_WAIT_COMPLETE };
		hc_req *g = NULL, *b = NULL, *rq = NULL;
		int h;
		hct_keys(k, 4, 5000 + (uint32_t)atomic_fetch_add(&c->next, 1));
		if (hc_req_stage(p, 4, 0, &g) < 0 || hc_req_wait(g, 5000) != 4 || hc_reserve(p, &rr, pg, skip) != 4) {
			hc_req_free(g); /* no service now, or no room yet: later */
			usleep(20000);
			continue;
		}
		for (int i = 0; i < 4; i++) {
			uint32_t pres;
			ck_assert_int_eq(hct_key_bytes(p, pg[i], k[i], 1), 0);
			ck_assert_ok(hc_page_presence(p, pg[i], &pres));
			ck_assert_int_eq(hc_page_commit(p, pg[i], hc_page_needed(p, pres)), 1);
		}
		if (hc_req_backup(p, pg, 4, &b) == 0)
			hc_req_wait(b, 5000);
		hc_req_free(b);
		hc_req_free(g);
		if (hc_req_prefetch(p, &pr, &rq) < 0)
			continue;
		h = hc_req_prefetch_take(rq, got, NULL);
		for (int i = 0; i < h; i++) {
			if (hct_key_bytes(p, got[i], k[i], 0) != 0)
				atomic_fetch_add(&c->bad, 1);
			ck_assert_ok(hc_page_unpin(p, got[i]));
		}
		hc_req_free(rq);
		atomic_fetch_add(&c->rounds, 1);
	}
}

START_TEST(service_killed_mid_transfer)
{
	const char *name = hct_name();
	hc_pool *p = buffer_pool(name, 32, 8);
	struct hc_service_opts o = opts(0, 0);
	struct churn *c = hct_shared(sizeof(*c));
	pid_t svc = hct_service_child(name, &o), kids[2];
	int st;

	for (int i = 0; i < 2; i++)
		kids[i] = hct_spawn(name, churn_rank, c);
	for (int i = 0; i < 200 && atomic_load(&c->rounds) < 10; i++)
		usleep(10000);
	kill(svc, SIGKILL);
	ck_assert_int_eq(waitpid(svc, &st, 0), svc);
	usleep(100000);
	svc = hct_service_child(name, &o);
	int before = atomic_load(&c->rounds);
	for (int i = 0; i < 500 && atomic_load(&c->rounds) < before + 10; i++)
		usleep(10000);
	ck_assert_int_ge(atomic_load(&c->rounds), before + 10); /* the restarted service serves */
	atomic_store(&c->stop, 1);
	for (int i = 0; i < 2; i++) {
		st = hct_wait_child(kids[i]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d status 0x%x", i, st);
	}
	ck_assert_int_eq(c->bad, 0);
	ck_assert(hct_drained(p));
	WAIT_GAUGE(p, stage_read, 0);
	WAIT_GAUGE(p, stage_write, 0);
	hct_service_child_stop(svc);
	finish(p, name);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("stage");
	TCase *t = tcase_create("buffer_only");

	tcase_add_checked_fixture(t, hct_l3_setup, hct_l3_teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, write_then_read_frees_every_page);
	tcase_add_test(t, prefetch_held_until_taken_or_freed);
	tcase_add_test(t, grant_given_back_unwritten);
	tcase_add_test(t, failures_release_their_staging);
	tcase_add_test(t, write_grants_fifo_by_class);
	tcase_add_test(t, reads_park_at_the_read_cap);
	tcase_add_test(t, parked_read_holds_nothing);
	tcase_add_test(t, late_release_of_an_older_life);
	tcase_add_test(t, cancelled_queued_read_gives_back);
	tcase_add_test(t, bad_requests);
	tcase_add_test(t, restart_frees_leftovers);
	tcase_add_test(t, dead_rank_gives_back);
	tcase_add_test(t, many_ranks_under_pressure);
	tcase_add_test(t, service_killed_mid_transfer);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return hct_run(suite());
}
