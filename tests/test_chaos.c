/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_chaos.c - forked workers allocate, reserve, commit (whole pages and
 * shard by shard), abort, look up with pins, host-lock, evict, free, and run
 * tickets, with content checks, while the parent SIGKILLs random workers at
 * random moments and starts new ones, many times over.  Two engines are TP 2
 * pairs that share every request through tickets, so kills land inside
 * ticket builds, claims and drops; the others are single-rank engines.
 *
 * Afterwards (every worker dead): the invariants hold; nothing is pinned,
 * locked, held by a ticket, reserved or being freed; READY + FREE is every
 * page; every READY keyed page is found by its key and has the right bytes;
 * clearing empties the pool; and every page any reader saw had the right
 * bytes.  No test asserts how long recovery took; a generous cap only
 * prevents hangs.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hct.h"

#define NPAGES   256
#define WORKERS  7         /* 0,1: engine 10 (TP 2); 2,3: engine 11 (TP 2); 4..6: single ranks */
#define NTP      2         /* TP-2 engines */
#define NBASE    12        /* base chains */
#define BASELEN  8         /* pages per base chain */
#define MAXK     (BASELEN + 2)
#define OWN      8         /* unkeyed pages a single rank keeps */
#define QUAR_MS  50
#define TICKET_MS 1000
#define HANG_S   30.0

struct shared {
	struct hct_board board;                 /* unkeyed READY pages of single ranks */
	_Atomic uint32_t attached[WORKERS];     /* attached and joined: a kill now is a death of a live rank */
	_Atomic uint32_t progress[NTP][2];      /* next request of each rank of a TP engine */
	_Atomic uint64_t ops, stored, verified, tickets, ticket_errs, locks, evicted, freed, aborted;
	_Atomic uint32_t bad_bytes, unexpected;
	_Atomic uint64_t own[WORKERS][OWN];      /* unkeyed READY pages each worker allocated, for adoption */
	_Atomic uint64_t tk_err[2][160];         /* refused tickets by kind (single, TP) and errno */
	char bad[512], error[512];
};

static struct shared *sh;
static const char *pool_name;
static hc_key_t base_keys[NBASE][BASELEN];

static void note(_Atomic uint32_t *ctr, char *buf, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(_Atomic uint32_t *ctr, char *buf, const char *fmt, ...)
{
	va_list ap;

	if (atomic_fetch_add(ctr, 1) >= 5)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, 512, fmt, ap);
	va_end(ap);
	fprintf(stderr, "chaos: %s\n", buf);
}

#define BAD(...)        note(&sh->bad_bytes, sh->bad, __VA_ARGS__)
#define UNEXPECTED(...) note(&sh->unexpected, sh->error, __VA_ARGS__)

static uint64_t mix(uint64_t x)
{
	x ^= x >> 31;
	x *= UINT64_C(0x7fb5d329728ea185);
	x ^= x >> 27;
	x *= UINT64_C(0x81dadef4bc2dd44d);
	x ^= x >> 33;
	return x;
}

/* Keys of a request: a prefix of a base chain and up to 2 pages of its own. */
static unsigned make_keys(uint64_t x, hc_key_t *out)
{
	unsigned b = (unsigned)(x % NBASE), k = 1 + (unsigned)((x >> 8) % BASELEN), extra = (unsigned)((x >> 16) % 3);
	uint32_t tok[2 * 4];

	memcpy(out, base_keys[b], (size_t)k * HC_KEY_BYTES);
	for (unsigned i = 0; i < extra * 4; i++)
		tok[i] = (uint32_t)mix(x + i);
	if (extra)
		hc_key_chain(NULL, out[k - 1], tok, extra * 4, 4, out + k);
	return k + extra;
}

/* Every shard of a READY page we hold: 0, or a mismatch has been noted. */
static int check_page(hc_pool *p, hc_page_t pg, int w, const char *how)
{
	static const uint32_t shards[3] = { 1, 2, HC_SHARD_REPLICATED };

	for (int s = 0; s < 3; s++) {
		if (hct_verify(p, pg, shards[s]) != 0) {
			BAD("worker %d: %s: page %u gen %u has wrong bytes in shard 0x%x", w, how, HC_PAGE_ID(pg),
			    HC_PAGE_GEN(pg), shards[s]);
			return -1;
		}
	}
	atomic_fetch_add(&sh->verified, 1);
	return 0;
}

/* A hit page we hold (pin or ticket) must be the keyed page of the key we
 * asked for: the hold keeps its life, flag and key as they are.  It is
 * READY, or FREEING for a moment (a freer's (C), which sees our hold and
 * puts it back). */
static void check_key(hc_pool *p, hc_page_t pg, const uint8_t *key, int w, const char *how)
{
	struct hc_page_info pi;

	if (hc_page_info(p, HC_PAGE_ID(pg), &pi) < 0 ||
	    (pi.state != HC_PAGE_READY && !(pi.state == HC_PAGE_FREEING && pi.aux == 0)) || pi.gen != HC_PAGE_GEN(pg) ||
	    !pi.keyed || memcmp(pi.key, key, HC_KEY_BYTES) != 0)
		BAD("worker %d: %s: hit page %u gen %u is not the key's page (now %s gen %u, %skeyed, %s key)", w, how,
		    HC_PAGE_ID(pg), HC_PAGE_GEN(pg), hc_page_state_name(pi.state), pi.gen, pi.keyed ? "" : "not ",
		    memcmp(pi.key, key, HC_KEY_BYTES) ? "another" : "the same");
}

static int expected(int ret, const int *ok)
{
	if (ret >= 0)
		return 1;
	for (; *ok; ok++)
		if (ret == -*ok)
			return 1;
	return 0;
}

#define EXPECT(ret, what, ...) do { \
	static const int ok__[] = { __VA_ARGS__, 0 }; \
	if (!expected((ret), ok__)) \
		UNEXPECTED("worker %d: %s: %d %s", w, (what), (ret), hc_last_error()); \
} while (0)

/* ---- single-rank operations */

struct held {
	hc_page_t pin[4], lock[2];
	unsigned npin, nlock;
};

static void store(hc_pool *p, int w, unsigned *seed)
{
	hc_key_t keys[MAXK];
	hc_page_t pages[MAXK];
	uint8_t skip[MAXK];
	unsigned n = make_keys(mix(rand_r(seed)), keys);
	struct hc_reserve_req rq = { .keys = keys, .nkeys = n };
	int m = hc_reserve(p, &rq, pages, skip), ret;

	EXPECT(m, "reserve", ENOSPC);
	if (m <= 0)
		return;
	if (rand_r(seed) % 20 == 0) {
		hc_page_t mine[MAXK];
		unsigned k = 0;
		for (unsigned i = 0; i < n; i++)
			if (!skip[i])
				mine[k++] = pages[i];
		ret = hc_page_abort(p, mine, k);
		if (ret != (int)k)
			UNEXPECTED("worker %d: abort %u: %d %s", w, k, ret, hc_last_error());
		atomic_fetch_add(&sh->aborted, k);
		return;
	}
	for (unsigned i = 0; i < n; i++) {
		if (skip[i])
			continue;
		if (rand_r(seed) % 2) { /* shard by shard, as TP writers do */
			ret = hct_fill_commit_all(p, pages[i]);
		} else {
			hct_fill(p, pages[i], 1);
			hct_fill(p, pages[i], 2);
			hct_fill(p, pages[i], HC_SHARD_REPLICATED);
			ret = hc_page_commit(p, pages[i], 1 | 2 | HC_SHARD_REPLICATED);
		}
		if (ret != 1)
			UNEXPECTED("worker %d: commit of our own reservation (page %u): %d %s", w, HC_PAGE_ID(pages[i]), ret,
				   hc_last_error());
		atomic_fetch_add(&sh->stored, 1);
	}
}

static void unpin_all(hc_pool *p, int w, const hc_page_t *pg, int n, const char *how)
{
	for (int i = 0; i < n; i++) {
		int ret;
		if (pg[i] == HC_PAGE_NONE)
			continue;
		check_page(p, pg[i], w, how); /* still pinned: still right */
		if ((ret = hc_page_unpin(p, pg[i])) < 0)
			UNEXPECTED("worker %d: unpin page %u: %d %s", w, HC_PAGE_ID(pg[i]), ret, hc_last_error());
	}
}

static void lookup_pin(hc_pool *p, int w, unsigned *seed, struct held *hd)
{
	hc_key_t keys[MAXK];
	hc_page_t pages[MAXK];
	unsigned n = make_keys(mix(rand_r(seed)), keys);
	struct hc_lookup_req rq = { .keys = keys, .nkeys = n, .flags = HC_LOOKUP_PIN };
	int h = hc_lookup(p, &rq, pages), ret;

	EXPECT(h, "lookup", EDQUOT);
	if (h <= 0)
		return;
	for (int i = 0; i < h; i++) {
		check_page(p, pages[i], w, "pinned lookup");
		check_key(p, pages[i], keys[i], w, "pinned lookup");
	}
	/* Keep one pin for later (a kill may land while we hold it); maybe host-lock one. */
	if (hd->npin < 4) {
		hd->pin[hd->npin++] = pages[h - 1];
		pages[h - 1] = HC_PAGE_NONE;
	}
	if (hd->nlock < 2 && pages[0] != HC_PAGE_NONE && rand_r(seed) % 3 == 0) {
		if ((ret = hc_page_lock(p, pages[0])) < 0) {
			UNEXPECTED("worker %d: lock of a page we pin: %d %s", w, ret, hc_last_error());
		} else {
			hd->lock[hd->nlock++] = pages[0];
			atomic_fetch_add(&sh->locks, 1);
		}
	}
	unpin_all(p, w, pages, h, "pinned lookup");
}

static void let_go(hc_pool *p, int w, struct held *hd)
{
	int ret;

	unpin_all(p, w, hd->pin, (int)hd->npin, "held pin");
	hd->npin = 0;
	for (unsigned i = 0; i < hd->nlock; i++) {
		check_page(p, hd->lock[i], w, "host lock");
		if ((ret = hc_page_unlock(p, hd->lock[i])) < 0)
			UNEXPECTED("worker %d: unlock page %u: %d %s", w, HC_PAGE_ID(hd->lock[i]), ret, hc_last_error());
	}
	hd->nlock = 0;
}

/*
 * Unkeyed pages belong to whoever allocated them until they free them, and
 * a dead allocator frees nothing: the parent adopts a dead worker's pages.
 * A handle is listed (relaxed is enough: the parent reads after waitpid)
 * before it is committed, so a kill never loses one.
 */
static void alloc_own(hc_pool *p, int w, unsigned *seed)
{
	hc_page_t pg[2];
	unsigned n = 1 + (unsigned)rand_r(seed) % 2, have = 0, slot[2];
	int ret;

	for (unsigned i = 0; i < OWN && have < n; i++)
		if (!atomic_load(&sh->own[w][i]))
			slot[have++] = i;
	if (have < n)
		return;
	ret = hc_page_alloc(p, n, 3, pg);
	EXPECT(ret, "alloc", ENOSPC);
	if (ret < 0)
		return;
	for (unsigned i = 0; i < n; i++) {
		atomic_store(&sh->own[w][slot[i]], pg[i]);
		if ((ret = hct_fill_commit_all(p, pg[i])) != 1)
			UNEXPECTED("worker %d: commit of our own page %u: %d %s", w, HC_PAGE_ID(pg[i]), ret, hc_last_error());
		hct_board_put(&sh->board, pg[i]);
	}
}

static void free_own(hc_pool *p, int w, unsigned *seed)
{
	unsigned i = (unsigned)rand_r(seed) % OWN;
	hc_page_t pg = atomic_load(&sh->own[w][i]);
	int ret;

	if (!pg)
		return;
	hct_board_drop(&sh->board, pg);
	ret = hc_page_free(p, &pg, 1);
	EXPECT(ret, "free of our own page", EBUSY);
	if (ret == -EBUSY) {
		hct_board_put(&sh->board, pg);
		return;
	}
	atomic_store(&sh->own[w][i], 0);
	atomic_fetch_add(&sh->freed, 1);
}

/* The parent: free what a dead worker allocated unkeyed (RESERVED ones were
 * quarantined by recovery; READY ones are ours to free now). */
static void adopt(hc_pool *p, int w)
{
	for (unsigned i = 0; i < OWN; i++) {
		hc_page_t pg = atomic_exchange(&sh->own[w][i], 0);
		int ret = -EBUSY;

		if (!pg)
			continue;
		hct_board_drop(&sh->board, pg);
		for (int tries = 0; tries < 200 && ret == -EBUSY; tries++) {
			if (hc_page_state(p, HC_PAGE_ID(pg), NULL, NULL, NULL) != HC_PAGE_READY)
				break;
			if ((ret = hc_page_free(p, &pg, 1)) == -EBUSY)
				usleep(100);
		}
	}
}

/* Free a keyed page someone else stored, found without a pin. */
static void free_keyed(hc_pool *p, int w, unsigned *seed)
{
	hc_key_t keys[MAXK];
	hc_page_t pages[MAXK];
	unsigned n = make_keys(mix(rand_r(seed)), keys);
	struct hc_lookup_req rq = { .keys = keys, .nkeys = n };
	int h = hc_lookup(p, &rq, pages), ret;

	if (h <= 0)
		return;
	ret = hc_page_free(p, &pages[h - 1], 1);
	EXPECT(ret, "free of a keyed page", EBUSY, EAGAIN, ESTALE);
	if (ret > 0)
		atomic_fetch_add(&sh->freed, 1);
}

static void board_read(hc_pool *p, int w, unsigned *seed)
{
	int ret = hct_board_read(p, &sh->board, seed);

	if (ret == -EBADMSG)
		BAD("worker %d: a pinned unkeyed READY page from the board has wrong bytes", w);
	else if (ret < 0)
		UNEXPECTED("worker %d: board read: %d %s", w, ret, hc_last_error());
	else if (ret == 1)
		atomic_fetch_add(&sh->verified, 1);
}

/* ---- tickets: a request as every rank of an engine runs it */

static const int ticket_ok[] = { ESTALE, EALREADY, ETIMEDOUT, EBUSY, ENOSPC, EAGAIN, 0 };

static void request(hc_pool *p, int w, const char *id, uint64_t x, uint32_t shards)
{
	hc_key_t keys[MAXK];
	hc_page_t lp[MAXK], rp[MAXK];
	uint8_t skip[MAXK];
	hc_ticket lt, rt;
	unsigned n = make_keys(x, keys);
	struct hc_ticket_name ln = { .request_id = id, .step = 0 }, rn = { .request_id = id, .step = 1 };
	struct hc_lookup_req lq = { .keys = keys, .nkeys = n };
	int h, m, ret;

	h = hc_ticket_lookup(p, &ln, &lq, lp, &lt);
	atomic_fetch_add(&sh->tickets, 1);
	if (h < 0 && -h < 160)
		atomic_fetch_add(&sh->tk_err[w < 2 * NTP][-h], 1);
	if (h < 0) {
		if (!expected(h, ticket_ok))
			UNEXPECTED("worker %d: ticket lookup %s: %d %s", w, id, h, hc_last_error());
		atomic_fetch_add(&sh->ticket_errs, 1);
		return;
	}
	for (int i = 0; i < h; i++) {
		check_page(p, lp[i], w, "ticket lookup");
		check_key(p, lp[i], keys[i], w, "ticket lookup");
	}
	if ((unsigned)h < n) {
		struct hc_reserve_req rq = { .keys = keys + h, .nkeys = n - (unsigned)h, .first_depth = (uint32_t)h };

		m = hc_ticket_reserve(p, &rn, &rq, rp, skip, &rt);
		atomic_fetch_add(&sh->tickets, 1);
		if (m < 0 && -m < 160)
			atomic_fetch_add(&sh->tk_err[w < 2 * NTP][-m], 1);
		if (m < 0) {
			if (!expected(m, ticket_ok))
				UNEXPECTED("worker %d: ticket reserve %s: %d %s", w, id, m, hc_last_error());
			atomic_fetch_add(&sh->ticket_errs, 1);
		} else {
			for (unsigned i = 0; i < n - (unsigned)h; i++) {
				if (skip[i])
					continue;
				for (uint32_t b = shards; b; b &= b - 1)
					hct_fill(p, rp[i], b & -b);
				/* ESTALE: the builder died, or the ticket expired, and the page
				 * went to quarantine. */
				ret = hc_page_commit(p, rp[i], shards);
				EXPECT(ret, "commit of a ticket's page", ESTALE);
				if (ret == 1)
					atomic_fetch_add(&sh->stored, 1);
			}
			if ((ret = hc_ticket_release(p, &rt)) < 0)
				UNEXPECTED("worker %d: reserve ticket release: %d %s", w, ret, hc_last_error());
		}
	}
	if ((ret = hc_ticket_release(p, &lt)) < 0)
		UNEXPECTED("worker %d: lookup ticket release: %d %s", w, ret, hc_last_error());
}

/*
 * A TP rank.  The pair keeps in step (a rank starts request i once its
 * partner started i - 1), so while both live neither comes to a ticket
 * after it expired: a latecomer whose ticket's tombstone was reused would
 * build it again, which ticket.c documents.  A replacement starts past
 * every request its predecessor may have touched.  The wait is bounded:
 * the partner may be dead, stopped, or not yet replaced.
 */
static void __attribute__((noreturn)) tp_rank(hc_pool *p, int w, unsigned seed)
{
	const int e = w / 2, k = w % 2;
	uint32_t i = atomic_load(&sh->progress[e][k]), other = atomic_load(&sh->progress[e][1 - k]);

	i = (other > i ? other : i) + 1;
	for (;; i++) {
		char id[48];

		for (int t = 0; t < 1000 && atomic_load(&sh->progress[e][1 - k]) + 1 < i; t++)
			usleep(100);
		atomic_store(&sh->progress[e][k], i);
		snprintf(id, sizeof(id), "chaos-%d-%u", e, i);
		request(p, w, id, mix((uint64_t)e << 40 | i), k == 0 ? 1 | HC_SHARD_REPLICATED : 2);
		atomic_fetch_add(&sh->ops, 1);
		if (k == 0 && rand_r(&seed) % 8 == 0)
			atomic_fetch_add(&sh->evicted, (uint64_t)hc_evict(p, 2));
		if (k == 1 && rand_r(&seed) % 4 == 0)
			board_read(p, w, &seed);
	}
}

static void __attribute__((noreturn)) single_rank(hc_pool *p, int w, unsigned seed)
{
	struct held hd = { .npin = 0 };
	char id[48];
	int ret;

	for (uint32_t i = 0;; i++) {
		unsigned op = (unsigned)rand_r(&seed) % 100;

		if (op < 25) {
			store(p, w, &seed);
		} else if (op < 45) {
			lookup_pin(p, w, &seed, &hd);
		} else if (op < 52) {
			let_go(p, w, &hd);
		} else if (op < 57) {
			ret = hc_evict(p, 1 + (unsigned)rand_r(&seed) % 4);
			EXPECT(ret, "evict", 0);
			atomic_fetch_add(&sh->evicted, (uint64_t)(ret > 0 ? ret : 0));
		} else if (op < 61) {
			hc_key_t key[MAXK];
			make_keys(mix(rand_r(&seed)), key);
			ret = hc_evict_key(p, key[0]);
			EXPECT(ret, "evict key", EBUSY, EAGAIN);
		} else if (op < 73) {
			snprintf(id, sizeof(id), "single-%d-%u-%u", w, (unsigned)getpid(), i);
			request(p, w, id, mix(rand_r(&seed)), 1 | 2 | HC_SHARD_REPLICATED);
		} else if (op < 81) {
			alloc_own(p, w, &seed);
		} else if (op < 87) {
			free_own(p, w, &seed);
		} else if (op < 95) {
			board_read(p, w, &seed);
		} else {
			free_keyed(p, w, &seed);
		}
		atomic_fetch_add(&sh->ops, 1);
	}
}

static void __attribute__((noreturn)) worker(int w, unsigned seed)
{
	struct hc_attach_opts o = { .flags = HC_ATTACH_NO_POPULATE };
	struct hc_engine_spec es = { .quota_pages = HC_QUOTA_UNLIMITED, .ticket_timeout_ms = TICKET_MS };
	hc_pool *p;
	int ret;

	if ((ret = hc_pool_attach(pool_name, &o, &p)) < 0) {
		fprintf(stderr, "chaos: worker %d: attach: %d %s\n", w, ret, hc_last_error());
		UNEXPECTED("worker %d: attach: %d %s", w, ret, hc_last_error());
		_exit(1);
	}
	if (w < 2 * NTP) {
		es.engine_id = 10 + (uint32_t)w / 2;
		es.tp_size = 2;
		es.tp_rank = (uint32_t)w % 2;
	} else {
		es.engine_id = 20 + (uint32_t)w;
		es.tp_size = 1;
	}
	/* Our predecessor is dead (the parent reaped it); join probes members,
	 * so EEXIST would mean it is alive. */
	if ((ret = hc_engine_join(p, &es)) < 0) {
		fprintf(stderr, "chaos: worker %d: engine join: %d %s\n", w, ret, hc_last_error());
		UNEXPECTED("worker %d: engine join: %d %s", w, ret, hc_last_error());
		_exit(1);
	}
	atomic_store(&sh->attached[w], 1);
	if (w < 2 * NTP)
		tp_rank(p, w, seed);
	single_rank(p, w, seed);
}

static pid_t start(int w, unsigned seed)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		worker(w, seed);
	return pid;
}

static void print_violation(void *arg, const char *v)
{
	(void)arg;
	fprintf(stderr, "violation: %s\n", v);
}

START_TEST(random_kills)
{
	const char *name = hct_name();
	struct hct_spec s;
	hc_pool *p;
	pid_t pids[WORKERS];
	double t0 = hct_now(), deadline = t0 + hct_seconds(12.0);
	unsigned seed = (unsigned)getpid(), kills = 0, landed = 0, checks = 0, parent_recoveries = 0;
	struct hc_recovery_report rep;
	struct hc_stats st;
	uint64_t counts[5], ready = 0;
	int status, ret;

	hct_spec_init(&s, name, NPAGES);
	s.spec.quarantine_ms = QUAR_MS;
	s.spec.max_ranks = 32;
	s.spec.max_tickets = 256;
	s.spec.ticket_keys = 64;
	ck_assert_ok(hc_pool_create(&s.spec));
	p = hct_attach(name, 0);
	pool_name = name;
	for (unsigned b = 0; b < NBASE; b++)
		hct_keys(base_keys[b], BASELEN, 1000 + b);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(sh, MAP_FAILED);
	for (int w = 0; w < WORKERS; w++)
		pids[w] = start(w, seed + (unsigned)w * 7919u);

	while (hct_now() < deadline && hct_now() < t0 + HANG_S) {
		usleep(5000 + (unsigned)rand_r(&seed) % 60000);
		int w = (int)((unsigned)rand_r(&seed) % WORKERS);
		landed += atomic_load(&sh->attached[w]) != 0;
		kill(pids[w], SIGKILL);
		ck_assert_int_eq(waitpid(pids[w], &status, 0), pids[w]);
		ck_assert_msg(WIFSIGNALED(status), "worker %d exited by itself (status 0x%x): %s", w, status, sh->error);
		atomic_store(&sh->attached[w], 0);
		kills++;
		adopt(p, w);
		/* Sometimes an admin recovers while the others run; otherwise the
		 * replacement's attach (or a worker's probe) does. */
		if (rand_r(&seed) % 4 == 0) {
			ck_assert_ok(hc_pool_recover(p, NULL));
			parent_recoveries++;
		}
		if (kills % 16 == 0) {
			/* Freeze everyone (stopped is alive) and check across structures. */
			for (int i = 0; i < WORKERS; i++)
				if (i != w)
					kill(pids[i], SIGSTOP);
			for (int i = 0; i < WORKERS; i++)
				if (i != w)
					waitpid(pids[i], &status, WUNTRACED);
			ret = hc_pool_check(p, 0, print_violation, NULL);
			if (getenv("CHAOS_DEBUG")) {
				struct hc_stats d;
				hc_pool_stats(p, &d);
				fprintf(stderr, "chaos: stopped: FREE %llu RESERVED %llu READY %llu (keyed %llu) QUARANTINE %llu FREEING %llu; pinned %llu locked %llu ticket-held %llu open tickets %u\n",
					(unsigned long long)d.pages[0], (unsigned long long)d.pages[1], (unsigned long long)d.pages[2],
					(unsigned long long)d.keyed, (unsigned long long)d.pages[3], (unsigned long long)d.pages[4],
					(unsigned long long)d.pinned_pages, (unsigned long long)d.locked_pages,
					(unsigned long long)d.ticket_pages, d.open_tickets);
			}
			for (int i = 0; i < WORKERS; i++)
				if (i != w)
					kill(pids[i], SIGCONT);
			ck_assert_msg(ret == 0, "%d violations with every worker stopped (see stderr)", ret);
			checks++;
		}
		pids[w] = start(w, seed + kills * 31u);
	}
	for (int w = 0; w < WORKERS; w++) {
		landed += atomic_load(&sh->attached[w]) != 0;
		kill(pids[w], SIGKILL);
		ck_assert_int_eq(waitpid(pids[w], &status, 0), pids[w]);
		kills++;
	}
	for (int w = 0; w < WORKERS; w++)
		adopt(p, w);
	fprintf(stderr,
		"chaos: %u kills (%u of attached ranks), %u stopped checks, %u admin recoveries, %llu ops, %llu stored, %llu aborted, %llu verified, %llu tickets (%llu refused), %llu locks, %llu evicted, %llu freed\n",
		kills, landed, checks, parent_recoveries, (unsigned long long)sh->ops, (unsigned long long)sh->stored,
		(unsigned long long)sh->aborted, (unsigned long long)sh->verified, (unsigned long long)sh->tickets,
		(unsigned long long)sh->ticket_errs, (unsigned long long)sh->locks, (unsigned long long)sh->evicted,
		(unsigned long long)sh->freed);
	for (int kind = 0; kind < 2; kind++)
		for (int e = 0; e < 160; e++)
			if (sh->tk_err[kind][e])
				fprintf(stderr, "chaos: %s tickets refused with %s: %llu\n", kind ? "TP-2" : "single-rank",
					strerror(e), (unsigned long long)sh->tk_err[kind][e]);
	ck_assert_msg(sh->bad_bytes == 0, "%u reads saw wrong bytes; first: %s", sh->bad_bytes, sh->bad);
	ck_assert_msg(sh->unexpected == 0, "%u unexpected errors; first: %s", sh->unexpected, sh->error);
	ck_assert_uint_gt(kills, 10);
	ck_assert_uint_gt(sh->stored, 50);
	ck_assert_uint_gt(sh->verified, 50);

	/* Recover, wait out the quarantine and the ticket deadlines, recover again. */
	ck_assert_ok(hc_pool_recover(p, &rep));
	usleep((QUAR_MS > TICKET_MS ? QUAR_MS : TICKET_MS) * 1000 + 100 * 1000);
	ck_assert_ok(hc_pool_recover(p, &rep));
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, print_violation, NULL), 0);

	/* Every dead rank's holds were undone; nothing is held or in flight. */
	ck_assert_ok(hc_pool_stats(p, &st));
	ck_assert_uint_eq(st.pin_count, 0);
	ck_assert_uint_eq(st.lock_count, 0);
	ck_assert_uint_eq(st.ticket_pages, 0);
	ck_assert_uint_eq(st.open_tickets, 0);
	ck_assert_uint_eq(st.live_ranks, 1);
	ck_assert_uint_eq(st.engines, 0);
	ck_assert_uint_ge(st.counter[HC_CTR_recoveries], landed);
	ck_assert_uint_gt(st.counter[HC_CTR_recoveries], 0);
	for (unsigned slot = 0; slot < 32; slot++) {
		struct hc_rank_info ri;
		struct hc_pool_info info;
		hc_pool_info(p, &info);
		if ((int)slot == info.self_slot)
			continue;
		ck_assert_ok(hc_pool_rank(p, slot, &ri));
		ck_assert_msg(!ri.live && ri.pins == 0 && ri.locks == 0 && ri.reserved == 0,
			      "slot %u: live %d, %llu pins, %llu locks, %u reserved", slot, ri.live,
			      (unsigned long long)ri.pins, (unsigned long long)ri.locks, ri.reserved);
	}
	ck_assert_ok(hc_pool_count_states(p, counts));
	ck_assert_uint_eq(counts[HC_PAGE_RESERVED], 0);
	ck_assert_uint_eq(counts[HC_PAGE_FREEING], 0);
	ck_assert_uint_eq(counts[HC_PAGE_QUARANTINE], 0);
	ck_assert_uint_eq(counts[HC_PAGE_READY] + counts[HC_PAGE_FREE], NPAGES);

	/* Every READY page has the right bytes; every keyed one is found by its key. */
	for (uint32_t id = 0; id < NPAGES; id++) {
		struct hc_page_info pi;
		hc_page_t h = HC_PAGE_NONE;

		ck_assert_ok(hc_page_info(p, id, &pi));
		if (pi.state != HC_PAGE_READY)
			continue;
		ready++;
		ck_assert_uint_eq(pi.pins + pi.locks + pi.tickets, 0);
		ck_assert_msg(check_page(p, HC_PAGE_MAKE(id, pi.gen), -1, "final sweep") == 0, "%s", sh->bad);
		if (!pi.keyed)
			continue;
		struct hc_lookup_req one = { .keys = (const hc_key_t *)pi.key, .nkeys = 1, .flags = HC_LOOKUP_NOTOUCH };
		ck_assert_int_eq(hc_lookup(p, &one, &h), 1);
		ck_assert_uint_eq(h, HC_PAGE_MAKE(id, pi.gen));
	}
	ck_assert_int_eq(hc_pool_clear(p), (int)ready);
	ck_assert_ok(hc_pool_count_states(p, counts));
	ck_assert_uint_eq(counts[HC_PAGE_FREE], NPAGES);
	ck_assert_ok(hc_pool_stats(p, &st));
	ck_assert_uint_eq(st.keyed, 0);
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, print_violation, NULL), 0);
	munmap(sh, sizeof(*sh));
	hc_pool_detach(p);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("chaos");
	TCase *tc = tcase_create("chaos");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, random_kills);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
