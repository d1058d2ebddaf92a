/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.h - a process's private view of an attached pool.  Everything here
 * is a private copy, validated once at attach; the shared pointers below
 * point into the mapping and are never stored in the segment.
 */
#ifndef HC_SHMPOOL_POOL_H
#define HC_SHMPOOL_POOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "crash.h"
#include "layout.h"

/* freemap.c: the shape of the free map (levels of bits; level 0 a bit a
 * page), computed from npages, never read from the segment */
#define HC_FM_LEVELS 8
struct hc__fm_shape {
	uint64_t nbits[HC_FM_LEVELS]; /* bits in each level */
	uint64_t off[HC_FM_LEVELS];   /* its first word, in words from the region's start */
	unsigned nlevels;
};
struct hc__fm {
	struct hc__fm_shape sh;
	_Atomic uint64_t *lv[HC_FM_LEVELS];
};

struct hc_pool {
	/* the mapping */
	uint8_t *base;
	size_t map_bytes;
	int fd;
	bool readonly;

	/* shared regions, at offsets validated at attach */
	struct hc_seg_hdr *hdr;
	struct hc_seg_rank *ranks;
	struct hc_seg_page *pages;
	_Atomic uint32_t *pins; /* [npages][max_ranks]: pins | locks << 16 */
	struct hc_seg_ctl *ctl;
	_Atomic uint64_t *stats; /* [max_ranks + 1][HC_STATS_ROW_WORDS] */
	_Atomic uint64_t *tmask; /* [npages][tmask_words] */
	_Atomic uint64_t *index; /* [index_buckets][HC_BUCKET_ENTRIES] */
	struct hc_seg_ticket *tickets;
	_Atomic uint64_t *tpages; /* [max_tickets][ticket_keys] */
	uint8_t *env;
	uint8_t *rings; /* toc[RINGS]: a block of g.rg.block bytes per rank slot */
	uint32_t tmask_words, imask;
	uint64_t hash_secret;
	/* hit policy of a lookup of every component, from the component records */
	uint32_t hit_full, hit_win, hit_maxwin;

	/* private copies of the geometry: never re-read from the segment */
	struct hc__geom g;
	struct hc_pool_info info;
	uint32_t all_groups; /* fill bits of every head group */
	uint32_t quarantine_ms;

	/* this process's rank slot, held by the holder thread */
	int slot;
	unsigned fork_gen; /* hc__forks at attach; differs in a forked child */
	pthread_t holder;
	/* Process-private handshake with the holder thread.  Not a pipe: a
	 * forked child would inherit its write end and keep the holder alive. */
	pthread_mutex_t holder_mu;
	pthread_cond_t holder_cv;
	int holder_state;  /* 0 starting, 1 holding, 2 failed, 3 asked to stop */
	int holder_result; /* slot, or negative errno */

	struct hc__fm fm, qm;     /* toc[FREEMAP]: the free map, then the quarantine map */
	struct hc_seg_lru *lru;   /* toc[LRU]: npages + 1 nodes, or NULL (clock) */
	_Atomic uint32_t cursor;  /* where this process's next free-map search starts (a hint) */
	_Atomic uint32_t hand;    /* where its next look at the page table starts (pages.c) */
	_Atomic uint32_t qcursor; /* where its next look at the quarantine map starts (pages.c) */

	/* engine.c: what this rank joined with (id + 1, tp_size << 16 | tp_rank,
	 * ticket timeout, incarnation; all 0 while in no engine).  Its slot's
	 * copies are written by this rank alone while it lives, so a slot that
	 * disagrees was scribbled: ticket.c checks before it trusts them. */
	uint32_t eng_id, eng_tp, eng_timeout_ms, eng_inc;

	/* lib/device/cuda.c: this process's registration of the envelopes with
	 * CUDA (its own lock guards both); detach calls dev_unreg first. */
	void *dev_reg;
	void (*dev_unreg)(struct hc_pool *p);
	/* lib/service/request.c: this handle's request path (its rings' private views and
	 * outstanding requests), made at the first request; freed at detach. */
	void *reqs;
	void (*reqs_fini)(struct hc_pool *p);
};

/* error.c */
int hc__err(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * abi.c: the public structs across versions (hicache.h, "ABI").
 * hc__abi_in reads the caller's struct (leading uint32_t size) into dst,
 * the library's own of dsize bytes; hc__abi_in_array reads n of them,
 * strided by element 0's size, into dst[n]; hc__abi_out writes src (ssize
 * bytes) into the caller's out of size bytes, and hc__abi_out_ok checks
 * that size alone (before the work that fills a struct).  v1size is where
 * the struct's first version ended (HC__V1_*).  0, or -EINVAL with the
 * error line set.
 */
int hc__abi_in(void *dst, size_t dsize, const void *src, size_t v1size, const char *fn, const char *type);
int hc__abi_in_array(void *dst, size_t dsize, const void *src, unsigned n, size_t v1size, const char *fn,
		     const char *type);
int hc__abi_out_ok(size_t size, size_t v1size, const char *fn, const char *type);
int hc__abi_out(void *out, size_t size, const void *src, size_t ssize, size_t v1size, const char *fn, const char *type);
#define HC__ABI_IN(dst, src, fn, T)          hc__abi_in((dst), sizeof(*(dst)), (src), HC__V1_##T, (fn), #T)
#define HC__ABI_IN_ARRAY(dst, src, n, fn, T) hc__abi_in_array((dst), sizeof(*(dst)), (src), (n), HC__V1_##T, (fn), #T)
#define HC__ABI_OUT_OK(size, fn, T)          hc__abi_out_ok((size), HC__V1_##T, (fn), #T)
#define HC__ABI_OUT(out, size, src, fn, T)   hc__abi_out((out), (size), (src), sizeof(*(src)), HC__V1_##T, (fn), #T)
/* Hot paths (lookup, reserve): the caller's struct itself when its size is
 * this library's (it is neither copied nor changed), else a copy in buf;
 * NULL with *ret set on a bad one. */
static inline const void *hc__abi_use(const void *src, void *buf, size_t dsize, size_t v1size, const char *fn,
				      const char *type, int *ret)
{
	uint32_t size;

	if (src) {
		memcpy(&size, src, sizeof(size));
		if (size == dsize)
			return src;
	}
	*ret = hc__abi_in(buf, dsize, src, v1size, fn, type);
	return *ret < 0 ? NULL : buf;
}
#define HC__ABI_USE(src, buf, fn, T, ret) hc__abi_use((src), (buf), sizeof(*(buf)), HC__V1_##T, (fn), #T, (ret))

/*
 * Where the first version of each versioned struct ended: the end of its
 * last member.  Never change one: a caller built against that version
 * passes a size at least this.  A member appended later must start at or
 * after the sizeof of the version before it (pad explicitly if it would
 * not), since an older caller's padding bytes are not known to be zero;
 * tests/test_abi.c holds each of these to its value.
 */
#define HC__END(T, m)             (offsetof(T, m) + sizeof(((T *)0)->m))
#define HC__V1_hc_pool_spec       HC__END(struct hc_pool_spec, arg_bytes)
#define HC__V1_hc_component_spec  HC__END(struct hc_component_spec, window_pages)
#define HC__V1_hc_attach_opts     HC__END(struct hc_attach_opts, flags)
#define HC__V1_hc_lookup_req      HC__END(struct hc_lookup_req, fingerprint)
#define HC__V1_hc_reserve_req     HC__END(struct hc_reserve_req, fingerprint)
#define HC__V1_hc_engine_spec     HC__END(struct hc_engine_spec, ticket_timeout_ms)
#define HC__V1_hc_ticket_name     HC__END(struct hc_ticket_name, step)
#define HC__V1_hc_ticket          HC__END(hc_ticket, pages)
#define HC__V1_hc_store_opts      HC__END(struct hc_store_opts, retries)
#define HC__V1_hc_prefetch_req    HC__END(struct hc_prefetch_req, prio)
#define HC__V1_hc_service_opts    HC__END(struct hc_service_opts, stage_hold_ms)
#define HC__V1_hc_dev_spec        HC__END(struct hc_dev_spec, reg_chunk)
#define HC__V1_hc_dev_comp        HC__END(struct hc_dev_comp, slots)
#define HC__V1_hc_xfer_req        HC__END(struct hc_xfer_req, after)
#define HC__V1_hc_pool_info       HC__END(struct hc_pool_info, arg_bytes)
#define HC__V1_hc_component_info  HC__END(struct hc_component_info, window_pages)
#define HC__V1_hc_rank_info       HC__END(struct hc_rank_info, held)
#define HC__V1_hc_page_info       HC__END(struct hc_page_info, tickets)
#define HC__V1_hc_recovery_report sizeof(struct hc_recovery_report) /* fixed: hc_repair_report embeds it */
#define HC__V1_hc_repair_report   HC__END(struct hc_repair_report, unrepaired)
#define HC__V1_hc_stats           HC__END(struct hc_stats, tokens)
#define HC__V1_hc_store_info      HC__END(struct hc_store_info, queue_depth)
#define HC__V1_hc_service_info    HC__END(struct hc_service_info, parked_writes)
#define HC__V1_hc_dev_stats       HC__END(struct hc_dev_stats, kernel_layers)
/* The ticket handle's size: at least its first version's, at most this
 * (the library writes the handle up to its size). */
#define HC__TICKET_SIZE_MAX 256
int hc__ticket_handle_ok(const hc_ticket *t, const char *op);
void hc__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* segment.c, handover.c */
/* Whether a process of uid, whose groups (its effective gid among them)
 * are groups[0..ngroups), may open the pool file st (path names it in the
 * message): 0, or -EACCES, -EPERM, -EBADMSG with why (segment.c). */
struct stat;
int hc__pool_admits(const char *path, const struct stat *st, uid_t uid, const gid_t *groups, int ngroups);
/* The fd of the sealed pool name from the owner of the Unix socket path
 * (handover.c): 0 with *fd, or -errno with the owner's refusal or what
 * went wrong. */
int hc__handover_recv(const char *path, const char *name, uint32_t timeout_ms, int *fd);

/* ranks.c */
int hc__rank_claim(struct hc_pool *p);
void hc__rank_release(struct hc_pool *p);
#define HC_PROBE_RECOVERING 2
/* FREE, but its mutex held past the probe's wait by a thread that is no
 * rank's holder: a scribbled lock word, or a process stopped half way
 * through attaching.  No proof of death, so not free; no rank, so not live. */
#define HC_PROBE_STUCK 3
int hc__rank_probe(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep);
/* Repair in a quiescent pool: let go of a FREE slot's mutex that no rank
 * holds (HC_PROBE_STUCK), or make an unusable one new.  1 if done, 0 if
 * there was nothing to do, or a negative errno. */
int hc__rank_unlock_stuck(struct hc_pool *p, unsigned slot, char *what, size_t len);
/* hc_pool_recover into the library's own report (rep not NULL). */
int hc__recover(struct hc_pool *p, struct hc_recovery_report *rep);
/* With the slot's mutex just taken as EOWNERDEAD: undo the dead holder's
 * holds and make the mutex consistent (the caller then unlocks it). */
int hc__rank_take_dead(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep);
void hc__mutex_init_robust(pthread_mutex_t *m);

/* ranks.c: bumped in every forked child, so handles know they were inherited */
extern _Atomic unsigned hc__forks;
void hc__fork_watch(void);

/* pages.c */
uint32_t hc__now_ms(void);
/* CLOCK_MONOTONIC in ns and ms: deadlines and ages within one process. */
static inline uint64_t hc__mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t hc__mono_ms(void)
{
	return hc__mono_ns() / 1000000u;
}
void hc__page_sweep(struct hc_pool *p, struct hc_recovery_report *rep);
void hc__pins_drop_slot(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep);
void hc__pages_release_slot(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep);

/* pages.c: holds and retirement */
#define HC_PIN_ONE  UINT32_C(1)
#define HC_LOCK_ONE (UINT32_C(1) << 16)
int hc__bad_slot(const struct hc_pool *p, const char *op) __attribute__((cold, noinline));
/* This attachment holds a rank slot, and this process attached it (a
 * forked child's copy of the handle is its parent's); else the error. */
static inline int hc__need_slot(const struct hc_pool *p, const char *op)
{
	if (__builtin_expect(p->slot < 0 || p->fork_gen != atomic_load_explicit(&hc__forks, memory_order_relaxed), 0))
		return hc__bad_slot(p, op);
	return 0;
}
/* 0 if page is this rank's reservation at its generation; else -ESTALE or -EPERM, with the line. */
int hc__check_reserved(const struct hc_pool *p, hc_page_t page, const char *op);
/* The same, or a reservation of another rank of the engine this rank joined
 * (a reservation ticket's pages, whose shards every rank fills). */
int hc__check_reserved_engine(const struct hc_pool *p, hc_page_t page, const char *op);
/* 1 if page, a reservation of this rank's engine, is READY at its
 * generation already: another rank of the engine reserved it (or this one
 * did, with mine_too) and the ranks completed it. */
int hc__engine_done(const struct hc_pool *p, hc_page_t page, int mine_too);
#define HC_HOLD_WAIT_FREEING 0x1u
#define HC_HOLD_RESERVED     0x2u
int hc__hold_full(struct hc_pool *p, hc_page_t page, uint32_t one, unsigned flags, const char *op, int counted,
		  uint32_t v);
int hc__hold_drop(struct hc_pool *p, uint32_t id, uint32_t one);
int hc__held_anywhere(const struct hc_pool *p, uint32_t id);
struct hc__holds {
	uint32_t pins, locks; /* summed over rank slots */
	uint32_t tickets;     /* tickets holding the page */
};
void hc__page_holds(const struct hc_pool *p, uint32_t id, struct hc__holds *h);
/* anon: allocated without a key (HC_PF_ANON), else a reservation to key */
int hc__alloc(struct hc_pool *p, unsigned n, uint32_t presence, int anon, hc_page_t *out, const char *op);
void hc__alloc_undo(struct hc_pool *p, const hc_page_t *pages, unsigned n);
#define HC_RETIRE_FREE 0 /* to FREE */
#define HC_RETIRE_TAKE 1 /* to RESERVED for this rank, a new generation */
int hc__retire(struct hc_pool *p, uint32_t id, uint64_t expect, int how, hc_page_t *taken);
int hc__unkey_at(struct hc_pool *p, uint32_t id, uint64_t w);
void hc__unkey(struct hc_pool *p, uint32_t id);
int hc__share_reserved(struct hc_pool *p, hc_page_t page);
int hc__quota_count(struct hc_pool *p, uint32_t n, uint32_t quota, const char *op);
void hc__quota_give_slot(struct hc_pool *p, unsigned slot, uint32_t n);
/* Inline: outside an engine (no quota) a take or a give is one load. */
static inline int hc__quota_take(struct hc_pool *p, uint32_t n, const char *op)
{
	uint32_t quota = atomic_load_explicit(&p->ranks[p->slot].quota, memory_order_relaxed);

	return quota == 0 || n == 0 ? 0 : hc__quota_count(p, n, quota, op);
}

static inline void hc__quota_give(struct hc_pool *p, uint32_t n)
{
	if (n && atomic_load_explicit(&p->ranks[p->slot].quota, memory_order_relaxed))
		hc__quota_give_slot(p, (unsigned)p->slot, n);
}
/* What slot holds, as its quota counts it: pages it pins or host-locks,
 * and pages it has RESERVED (one pass; engine join). */
uint32_t hc__held_count(const struct hc_pool *p, unsigned slot);

/* index.c: the key index.  Readers lock nothing; writers hold the stripe. */
struct hc__khash {
	uint64_t k[4];   /* the key as four words, as the page table stores it */
	uint32_t b1, b2; /* the two buckets it may live in */
	uint32_t tag;
	unsigned stripe;
};
int64_t hc__index_find(const struct hc_pool *p, const struct hc__khash *kh);
void hc__index_lock(struct hc_pool *p, unsigned stripe);
void hc__index_unlock(struct hc_pool *p, unsigned stripe);
int hc__index_insert(struct hc_pool *p, const struct hc__khash *kh, uint32_t id);
int hc__index_remove(struct hc_pool *p, const struct hc__khash *kh, uint32_t id);
void hc__page_khash(const struct hc_pool *p, uint32_t id, struct hc__khash *kh);
void hc__index_repair_page(struct hc_pool *p, uint32_t id);
void hc__index_rebuild_stripe(struct hc_pool *p, unsigned stripe); /* the stripe held */

/* lookup.c, reserve.c: the cores that tickets share */
void hc__hit_policy(const struct hc__geom *g, uint32_t mask, uint32_t *full, uint32_t *win, uint32_t *maxwin);
int hc__lookup_check(const struct hc_pool *p, const struct hc_lookup_req *req, const hc_page_t *pages, const char *op);
int hc__lookup(struct hc_pool *p, const struct hc_lookup_req *req, hc_page_t *pages, int hold, int tk, uint32_t *newly);
uint32_t hc__lookup_release(struct hc_pool *p, const hc_page_t *pages, uint32_t n, int tk);
int hc__reserve_check(const struct hc_pool *p, const struct hc_reserve_req *req, const hc_page_t *pages,
		      const uint8_t *skip, const char *op);
int hc__reserve(struct hc_pool *p, const struct hc_reserve_req *req, hc_page_t *pages, uint8_t *skip);

/* freemap.c: where the FREE pages are (p->fm), and the quarantined ones
 * (p->qm), in toc[FREEMAP] one after the other.  hc__fm_shape: one map's
 * size for npages; hc__fm_map: this process's view of one; hc__fm_init:
 * a fresh pool's (full: every bit set).  hc__fm_put: page id entered the
 * map's state (after the CAS or store).  hc__fm_claim: a page whose bit
 * this call took, from *cursor on, or -1; hc__fm_peek: the next set bit
 * from 'from' (wrapping), taking nothing, or -1; hc__fm_take: take id's
 * bit, 1 if this call cleared it.  hc__fm_heal: id is in the map's state,
 * make sure its bit says so; hc__fm_heal_summaries: every word's summary
 * bit after a pass of heals.  hc__fm_summary_ok: 0 with the first word of
 * a level whose summary bit is clear though it has bits, else 1. */
uint64_t hc__fm_shape(uint32_t npages, struct hc__fm_shape *sh);
void hc__fm_map(struct hc__fm *fm, uint32_t npages, uint8_t *region);
void hc__fm_init(uint8_t *region, uint32_t npages, int full);
int64_t hc__fm_claim(struct hc__fm *fm, _Atomic uint32_t *cursor);
int64_t hc__fm_peek(struct hc__fm *fm, uint64_t from);
int hc__fm_has(const struct hc__fm *fm, uint32_t id);
void hc__fm_heal(struct hc__fm *fm, uint32_t id);
void hc__fm_heal_summaries(struct hc__fm *fm);
int hc__fm_summary_ok(const struct hc__fm *fm, unsigned *level, uint64_t *word);
/* The slow halves of a take and a put (freemap.c's protocol): summary
 * bits above word 'word' of level l - 1, cleared after it emptied (then
 * looked at again), or set from level l up to one found set. */
void hc__fm_emptied(struct hc__fm *fm, unsigned l, uint64_t word);
void hc__fm_put_up(struct hc__fm *fm, unsigned l, uint64_t bit);

/* Inline: an allocation and a free each run one, and the common case is a
 * locked instruction and a load (see freemap.c for why each step is there). */
static inline int hc__fm_take(struct hc__fm *fm, uint32_t id)
{
	_Atomic uint64_t *w = &fm->lv[0][id / 64];
	uint64_t m = UINT64_C(1) << (id % 64);

	/* (G): only the bit's old value is used, so this is one lock btr,
	 * not a compare-and-swap loop */
	if (!(atomic_fetch_and(w, ~m) & m))
		return 0; /* another claimer won it */
	HC_POINT(freemap_claimed);
	/* Emptied (by us or since): clear the summary.  A look, not the old
	 * value: a clear missed leaves a stale summary bit, which a search
	 * clears; one made in vain is undone by emptied's second look. */
	if (fm->sh.nlevels > 1 && atomic_load_explicit(w, memory_order_relaxed) == 0)
		hc__fm_emptied(fm, 1, (uint64_t)id / 64);
	return 1;
}

/* The page's own bit is set by a read-modify-write even when it looks set:
 * a FREE store may be a release store (pages.c), and only the chain of
 * RMWs on the bit's word carries it to the claimer that clears the bit
 * next, whose (H) then sees FREE.  Then the summary bit, loaded. */
static inline void hc__fm_put(struct hc__fm *fm, uint32_t id)
{
	HC_POINT(freemap_unlisted);
	atomic_fetch_or(&fm->lv[0][id / 64], UINT64_C(1) << (id % 64));
	if (fm->sh.nlevels > 1 && !((atomic_load(&fm->lv[1][id / 4096]) >> (id / 64 % 64)) & 1))
		hc__fm_put_up(fm, 1, id / 64);
}

/* hc__fm_claim, trying the bit at or after the cursor in its own word first:
 * frees and claims stay near a cursor, so this is most claims. */
static inline int64_t hc__fm_claim_near(struct hc__fm *fm, _Atomic uint32_t *cursor)
{
	uint32_t from = atomic_load_explicit(cursor, memory_order_relaxed);

	if (__builtin_expect(from < fm->sh.nbits[0], 1)) {
		uint64_t near = atomic_load_explicit(&fm->lv[0][from / 64], memory_order_relaxed) >> (from % 64);
		uint32_t id = from + (uint32_t)__builtin_ctzll(near | (UINT64_C(1) << 63));

		/* a bit past the last page (a scribble) indexes nothing */
		if (near && id < fm->sh.nbits[0] && hc__fm_take(fm, id)) {
			atomic_store_explicit(cursor, id + 1, memory_order_relaxed);
			return id;
		}
	}
	return hc__fm_claim(fm, cursor);
}

/* lru.c: the list of exact LRU (HC_EVICT_LRU pools: p->lru).  lock and
 * unlock it (a dead holder's list is rebuilt); touch: stamp and move to
 * the tail; first/next: walk it from the oldest (the lock held; the head,
 * npages, ends it; -1 for a broken link); mend: rebuild it, the lock held;
 * drop: take a page off, the lock held (1 if the list was broken and is
 * rebuilt); heal: a live page a death left off goes on (an orphan at the
 * head); repair: rebuild it.  hc__lru_kind: do flags f make a live page
 * one to list? */
void hc__lru_lock(struct hc_pool *p);
void hc__lru_unlock(struct hc_pool *p);
void hc__lru_touch(struct hc_pool *p, const hc_page_t *pages, unsigned n);
int64_t hc__lru_first(const struct hc_pool *p);
int64_t hc__lru_next(const struct hc_pool *p, uint32_t id);
void hc__lru_mend(struct hc_pool *p);
int hc__lru_drop(struct hc_pool *p, uint32_t id);
void hc__lru_heal(struct hc_pool *p, uint32_t id, int orphan);
void hc__lru_repair(struct hc_pool *p);
int hc__lru_kind(uint32_t f);

/* evict.c */
unsigned hc__evict_take(struct hc_pool *p, unsigned n, uint32_t presence, hc_page_t *out);
void hc__touch_all(struct hc_pool *p, const hc_page_t *pages, unsigned n);
void hc__count_hits_all(struct hc_pool *p, const hc_page_t *pages, unsigned n);

/* engine.c, ticket.c: recovery of a dead slot's engine membership and tickets */
void hc__engine_clear_slot(struct hc_pool *p, unsigned slot);
void hc__tickets_recover_slot(struct hc_pool *p, unsigned slot);
void hc__tickets_sweep(struct hc_pool *p);
/* Engine e (id + 1) of incarnation inc has no member left: drop its open
 * tickets (as slot 'as') and free its tombstones. */
void hc__tickets_end_engine(struct hc_pool *p, uint32_t e, uint32_t inc, unsigned as);

/* check.c */
typedef void (*hc__check_fn)(void *arg, const char *violation);
int hc__pool_check(struct hc_pool *p, unsigned flags, hc__check_fn report, void *arg);
/* lru.c: the LRU list's violations, a line each (quiescent: also a live
 * page it should hold and does not); the count. */
int hc__lru_census(struct hc_pool *p, int quiescent, hc__check_fn report, void *arg);
/* The invariants that repair.c mends too.  Is index entry e, in slot i,
 * where page id's key puts it (one of its buckets, its tag)?  Does a slot
 * marked in live[] belong to engine e (id + 1) of incarnation inc?  Does
 * ticket t, at word w, hold page id (building, dropping, or an OPEN
 * lookup whose answer names it)? */
int hc__index_entry_placed(const struct hc_pool *p, uint64_t i, uint64_t e, uint32_t id);
int hc__engine_alive(const struct hc_pool *p, const uint8_t *live, uint32_t e, uint32_t inc);
int hc__ticket_holds(const struct hc_pool *p, unsigned t, uint32_t id, uint64_t w);
/* ticket.c: drop ticket t's hold on every page */
void hc__ticket_clear_bits(struct hc_pool *p, unsigned t);

static inline _Atomic uint32_t *hc__pin_row(const struct hc_pool *p, uint32_t id)
{
	return p->pins + (size_t)id * p->g.max_ranks;
}

static inline _Atomic uint64_t *hc__tmask_row(const struct hc_pool *p, uint32_t id)
{
	return p->tmask + (size_t)id * p->tmask_words;
}

/*
 * (A) and (B) of the pin protocol for a pin (one = HC_PIN_ONE) or a host
 * lock (HC_LOCK_ONE).  Returns 1 if the rank held nothing on the page
 * before (a page more for its quota), 0 if it did, or a negative errno.
 * flags: HC_HOLD_WAIT_FREEING, HC_HOLD_RESERVED (pages.c).  Inline, the
 * common case: one CAS, one load; anything else is hc__hold_full's.
 */
static inline int hc__hold(struct hc_pool *p, hc_page_t page, uint32_t one, unsigned flags, const char *op)
{
	_Atomic uint32_t *c = &hc__pin_row(p, HC_PAGE_ID(page))[p->slot];
	uint32_t v = atomic_load_explicit(c, memory_order_relaxed);
	uint64_t w;

	if ((v & (one * 0xffffu)) == one * 0xffffu || !atomic_compare_exchange_strong(c, &v, v + one)) /* (A) */
		return hc__hold_full(p, page, one, flags, op, 0, 0); /* full, or another thread of ours raced */
	HC_POINT(hold_counted);
	w = atomic_load(&p->pages[HC_PAGE_ID(page)].word); /* (B) */
	if (hc__w_gen(w) == HC_PAGE_GEN(page) && hc__w_state(w) == HC_PAGE_READY)
		return v == 0; /* 1: the page is newly held by this rank */
	return hc__hold_full(p, page, one, flags, op, 1, v);
}

/* Counters and histograms: add n to a word of this rank's row, or of the
 * last row without a slot.  A plain load and store, no locked instruction:
 * only this rank writes its row, and two of its threads racing can lose a
 * count, never tear one. */
static inline _Atomic uint64_t *hc__stats_row(struct hc_pool *p)
{
	unsigned row = p->slot >= 0 ? (unsigned)p->slot : p->g.max_ranks;

	return p->readonly ? NULL : &p->stats[(size_t)row * HC_STATS_ROW_WORDS];
}

/* Add n to word of a row from hc__stats_row (NULL: read-only, nothing). */
static inline void hc__row_bump(_Atomic uint64_t *row, unsigned word, uint64_t n)
{
	if (row)
		atomic_store_explicit(&row[word], atomic_load_explicit(&row[word], memory_order_relaxed) + n,
				      memory_order_relaxed);
}

static inline void hc__row_add(struct hc_pool *p, unsigned word, uint64_t n)
{
	hc__row_bump(hc__stats_row(p), word, n);
}

static inline void hc__count(struct hc_pool *p, enum hc_counter c, uint64_t n)
{
	hc__row_add(p, c, n);
}

/* reserve.c: the pages the reservation running on this thread found READY
 * (their ids, sorted by the first hc__spared): evict.c never picks them to
 * make room for it. */
struct hc__spare {
	uint32_t *ids;
	unsigned n;
	int sorted;
};
extern _Thread_local struct hc__spare hc__spare;
int hc__spared(uint32_t id);

/* hc_lookup's private flag: the lookup is a prefetch's take (lib/service/request.c). */
#define HC__LOOKUP_TAKE 0x80000000u

/* The bucket of value v in a histogram (hc_hist_bound_us's bounds). */
static inline unsigned hc__hist_bucket(uint64_t v)
{
	/* bucket b >= 1 holds [16 << (b - 1), 16 << b): floor(log2 v) - 3 */
	unsigned b = v < 16 ? 0 : 60u - (unsigned)__builtin_clzll(v);

	return b < HC_HIST_BUCKETS ? b : HC_HIST_BUCKETS - 1;
}

/* Raise a histogram's max (its word after the sum) to v, by CAS: writers
 * may race on it, and it must never fall below a value counted.  Called
 * before the value is counted, so a reader never sees one past it. */
static inline void hc__hist_max(_Atomic uint64_t *hist, uint64_t v)
{
	uint64_t m = atomic_load_explicit(&hist[HC_HIST_BUCKETS + 1], memory_order_relaxed);

	while (v > m && !atomic_compare_exchange_weak_explicit(&hist[HC_HIST_BUCKETS + 1], &m, v, memory_order_relaxed,
							       memory_order_relaxed))
		; /* a larger max someone else set stops it */
}

/* One value into this rank's row's histogram at word 'at' (one writer a
 * row, as hc__count). */
static inline void hc__hist_at(_Atomic uint64_t *row, unsigned at, uint64_t v)
{
	if (row)
		hc__hist_max(row + at, v);
	hc__row_bump(row, at + hc__hist_bucket(v), 1);
	hc__row_bump(row, at + HC_HIST_BUCKETS, v);
}

static inline void hc__hist(struct hc_pool *p, unsigned at, uint64_t v)
{
	hc__hist_at(hc__stats_row(p), at, v);
}

/* A keyed page not in L3 became READY, or reached its hits: tell the
 * service, whose write policy may want it in L3 (layout.h, the service
 * record).  No syscall unless the service sleeps and wants it now. */
static inline void hc__dirty_note(struct hc_pool *p, int wake)
{
	struct hc_seg_service *sv = &p->ctl->service;

	atomic_fetch_add_explicit(&sv->dirty_seq, 1, memory_order_relaxed);
	if (wake)
		hc__bell_ring(&sv->bell);
}

static inline void hc__dirty(struct hc_pool *p, struct hc_seg_page *pg)
{
	uint32_t wp = atomic_load_explicit(&p->ctl->service.write_policy, memory_order_relaxed);

	if (wp == 0 || wp == HC_WRITE_NONE + 1 ||
	    (atomic_load_explicit(&pg->flags, memory_order_relaxed) & (HC_PF_KEYED | HC_PF_IN_L3)) != HC_PF_KEYED)
		return;
	hc__dirty_note(p, wp == HC_WRITE_THROUGH + 1);
}

/* CLOCK's touch of one page: its reference bit (the stamp), written only
 * when clear, so a hot page's line is not written on every hit. */
static inline void hc__clock_touch(struct hc_pool *p, hc_page_t page)
{
	_Atomic uint64_t *st;

	if (page == HC_PAGE_NONE || HC_PAGE_ID(page) >= p->g.npages)
		return;
	st = &p->pages[HC_PAGE_ID(page)].stamp;
	if (atomic_load_explicit(st, memory_order_relaxed) == 0)
		atomic_store_explicit(st, 1, memory_order_relaxed);
}

/* A hit or a reservation uses pages: CLOCK's bit, or exact LRU's move to
 * the tail (evict.c).  One page under CLOCK inline: a 1-key lookup's. */
static inline void hc__touch(struct hc_pool *p, const hc_page_t *pages, unsigned n)
{
	if (n == 1 && p->g.evict != HC_EVICT_LRU)
		hc__clock_touch(p, pages[0]);
	else if (n)
		hc__touch_all(p, pages, n);
}

/* A lookup's hits, for write_through_selective (not a reservation's
 * touch): nothing to count under any other policy. */
static inline void hc__count_hits(struct hc_pool *p, const hc_page_t *pages, unsigned n)
{
	if (atomic_load_explicit(&p->ctl->service.write_policy, memory_order_relaxed) == HC_WRITE_THROUGH_SELECTIVE + 1)
		hc__count_hits_all(p, pages, n);
}

/* A request's model fingerprint (NULL: none given) is the pool's?  Another
 * model's is answered "nothing" before the index is read (index.c). */
static inline int hc__fp_ok(const struct hc_pool *p, const uint8_t *fp, const char *op)
{
	(void)op;
	return fp == NULL || memcmp(fp, p->info.fingerprint, 32) == 0;
}

/* A 64-bit finalizer (murmur3's): spreads bits for hashing, nothing more. */
static inline uint64_t hc__mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= UINT64_C(0xff51afd7ed558ccd);
	x ^= x >> 33;
	x *= UINT64_C(0xc4ceb9fe1a85ec53);
	x ^= x >> 33;
	return x;
}

/* Keys are SHA-256 digests: their words are already uniform.  The secret
 * keeps bucket placement unknown to whoever chooses the tokens.  Inline:
 * every key of every lookup comes through here (index.c has the rest). */
static inline void hc__key_hash(const struct hc_pool *p, const uint8_t key[32], struct hc__khash *kh)
{
	uint64_t h;

	memcpy(kh->k, key, 32);
	h = hc__mix64(kh->k[0] ^ p->hash_secret);
	kh->b1 = (uint32_t)h & p->imask;
	kh->b2 = (uint32_t)(h >> 32) & p->imask;
	if (kh->b2 == kh->b1)
		kh->b2 = kh->b1 ^ 1;
	kh->tag = (uint32_t)(kh->k[1] >> 32) ^ (uint32_t)h;
	kh->stripe = (unsigned)(kh->k[2] >> 7) % HC_INDEX_STRIPES;
}

/* Is page id keyed with kh's key?  The flag too: a page reused without a
 * key keeps its old key's words. */
static inline int hc__page_key_is(const struct hc_pool *p, uint32_t id, const struct hc__khash *kh)
{
	const struct hc_seg_page *pg = &p->pages[id];

	return (atomic_load_explicit(&pg->flags, memory_order_acquire) & HC_PF_KEYED) &&
	       atomic_load_explicit(&pg->key[0], memory_order_relaxed) == kh->k[0] &&
	       atomic_load_explicit(&pg->key[1], memory_order_relaxed) == kh->k[1] &&
	       atomic_load_explicit(&pg->key[2], memory_order_relaxed) == kh->k[2] &&
	       atomic_load_explicit(&pg->key[3], memory_order_relaxed) == kh->k[3];
}

/* The first entry of kh's buckets with kh's tag: a candidate page id, not
 * yet checked against its key (lookup.c pipelines that check), or -1.
 * Acquire: pairs with the inserter's CAS; the key and flags came first. */
static inline int64_t hc__index_tag(const struct hc_pool *p, const struct hc__khash *kh)
{
	const _Atomic uint64_t *bk = p->index + (size_t)kh->b1 * HC_BUCKET_ENTRIES;

	for (int k = 0; k < 2; k++, bk = p->index + (size_t)kh->b2 * HC_BUCKET_ENTRIES)
		for (int j = 0; j < HC_BUCKET_ENTRIES; j++) {
			uint64_t e = atomic_load_explicit(&bk[j], memory_order_acquire);

			if ((uint32_t)(e >> 32) == kh->tag && (uint32_t)e != 0 && (uint32_t)e - 1 < p->g.npages)
				return (uint32_t)e - 1;
		}
	return -1;
}

/* A page the index should answer for: RESERVED, READY, or FREEING not yet
 * past its hold check.  A leaving page (FREEING checked, or QUARANTINE still
 * keyed) keeps its entry for a moment and must not shadow the key's next
 * page. */
static inline int hc__live_word(uint64_t w)
{
	unsigned st = hc__w_state(w);

	return st == HC_PAGE_RESERVED || st == HC_PAGE_READY || (st == HC_PAGE_FREEING && !hc__freeing_checked(w));
}

/* Keyed, and live with word w: the page should have exactly one entry. */
static inline int hc__keyed_live(const struct hc_pool *p, uint32_t id, uint64_t w)
{
	return (atomic_load_explicit(&p->pages[id].flags, memory_order_relaxed) & HC_PF_KEYED) && hc__live_word(w);
}

/* The number of columns a freer must read (see pages.c). */
static inline uint32_t hc__hwm(const struct hc_pool *p)
{
	uint32_t hwm = atomic_load(&p->hdr->slots_hwm);

	return hwm > p->g.max_ranks ? p->g.max_ranks : hwm;
}

/* The 16-bit check of what the reserver wrote (key, depth and presence
 * when keyed, else presence), in HC_PF_CHECK_SHIFT's bits. */
static inline uint32_t hc__page_check(const struct hc_pool *p, uint32_t id, int keyed)
{
	const struct hc_seg_page *pg = &p->pages[id];
	uint64_t h = hc__mix64(atomic_load_explicit(&pg->presence, memory_order_relaxed) ^ UINT64_C(0x5bd1e995));

	if (keyed) {
		h = hc__mix64(h ^ atomic_load_explicit(&pg->depth, memory_order_relaxed));
		for (int i = 0; i < 4; i++)
			h = hc__mix64(h ^ atomic_load_explicit(&pg->key[i], memory_order_relaxed));
	}
	return (uint32_t)(h >> 48) << HC_PF_CHECK_SHIFT;
}

/* Do flags f carry the check of what page id's reserver wrote? */
static inline int hc__page_check_ok(const struct hc_pool *p, uint32_t id, uint32_t f)
{
	return hc__page_check(p, id, (f & HC_PF_KEYED) != 0) == (f & ~((UINT32_C(1) << HC_PF_CHECK_SHIFT) - 1));
}

#endif /* HC_SHMPOOL_POOL_H */
