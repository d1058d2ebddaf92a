/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layout.h - the bytes of a pool segment.  Everything here is shared with
 * other processes, which may be of another build, may die at any
 * instruction, and may scribble.  So: fixed-size types, offsets never
 * pointers, static_asserts on every size and offset that matters.
 *
 *   0             header (struct hc_seg_hdr, one 4 KiB block)
 *   toc[COMPS]    component records (struct hc_seg_comp)
 *   toc[RANKS]    rank slots (struct hc_seg_rank)
 *   toc[CTL]      pool-wide mutable state: writer locks, clocks (struct hc_seg_ctl)
 *   toc[STATS]    counters, one row per rank slot and one for admins
 *   toc[PAGES]    page table (struct hc_seg_page), the truth about pages
 *   toc[PINS]     holds of ranks, uint32 [npages][max_ranks]: pins | locks << 16
 *   toc[TMASK]    holds of tickets, uint64 [npages][max_tickets / 64], a bit per ticket
 *   toc[INDEX]    key index, buckets of 8 entries (a hint; rebuilt from PAGES)
 *   toc[TICKETS]  ticket records (struct hc_seg_ticket)
 *   toc[TPAGES]   each ticket's page list, uint64 [max_tickets][ticket_keys]
 *   toc[RINGS]    the request path: a block per rank slot (struct hc__ringgeo)
 *   toc[FREEMAP]  where the FREE pages are: a bit per page and summary levels (a hint; freemap.c)
 *   toc[LRU]      HC_EVICT_LRU only: the pages in stamp order, a list (a hint; lru.c)
 *   toc[ENV]      envelopes, 2 MiB aligned, npages * envelope_bytes
 *
 * LAYOUT VERSION POLICY.  layout_major changes when any existing field or
 * region changes meaning or place; a binary attaches only segments of its
 * own major.  layout_minor grows when something is appended (a new region
 * in a spare toc slot, a field in reserved bytes) that older binaries can
 * ignore safely; a binary attaches any minor of its major, newer or older.
 */
#ifndef HC_SHMPOOL_LAYOUT_H
#define HC_SHMPOOL_LAYOUT_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <hicache/hicache.h>

#include "ring.h"

#define HC_SEG_MAGIC     UINT64_C(0x0145484341434948) /* "HICACHE\1" little-endian */
#define HC_LAYOUT_MAJOR  8                            /* 8: histograms to 67 s, with their max */
#define HC_LAYOUT_MINOR  0
#define HC_LAYOUT_ID     "page-unified-v1"
#define HC_SEG_HDR_BYTES 4096
#define HC_SEG_ENV_ALIGN (UINT64_C(2) << 20) /* huge-page friendly */
#define HC_TOC_SLOTS     16

enum hc_region {
	HC_REG_COMPS = 0,
	HC_REG_RANKS,
	HC_REG_CTL,
	HC_REG_STATS,
	HC_REG_PAGES,
	HC_REG_PINS,
	HC_REG_TMASK,
	HC_REG_INDEX,
	HC_REG_TICKETS,
	HC_REG_TPAGES,
	HC_REG_RINGS,
	HC_REG_FREEMAP,
	HC_REG_LRU,
	HC_REG_ENV, /* always last */
	HC_REG__COUNT
};

enum hc_seg_state {
	HC_SEG_CREATING = 1, /* under construction, only under a temporary name */
	HC_SEG_READY = 2,
};

struct hc_seg_region {
	uint64_t off;
	uint64_t bytes;
};

/* The envelopes were never reserved (HC_CREATE_SPARSE): attaches populate
 * the page table and the rest of the metadata only. */
#define HC_SEG_F_SPARSE 0x1u

/*
 * Notes on synchronization: every field up to meta_digest is written once by
 * the creator before the segment gets its public name (link(2)), and never
 * again; meta_digest is SHA-256 over those bytes and the component records,
 * and every attach checks it.  'state' is the only mutable field.
 */
struct hc_seg_hdr {
	uint64_t magic;
	uint32_t layout_major;
	uint32_t layout_minor;
	uint32_t hdr_bytes;
	uint32_t flags; /* HC_SEG_F_* */
	uint64_t segment_bytes;
	uint64_t created_unix_ns;
	uint32_t creator_pid;
	uint32_t creator_uid;
	char creator_host[64];
	char model_id[HC_MODEL_ID_MAX + 1];
	char layout_id[32];
	uint8_t fingerprint[32];
	uint32_t page_tokens;
	uint32_t tp_size;
	uint32_t head_groups;
	uint32_t ncomp;
	uint32_t max_ranks;
	uint32_t npages;
	uint32_t quarantine_ms;
	uint32_t evict_policy; /* enum hc_evict_policy */
	uint64_t envelope_bytes;
	uint32_t max_tickets; /* a multiple of 64 */
	uint32_t ticket_keys;
	uint32_t index_buckets; /* a power of two */
	uint32_t host_mode;     /* enum hc_host_mode */
	uint64_t hash_secret;   /* random per pool: index buckets are not predictable from keys */
	uint32_t sq_entries;    /* each rank's submission ring; its completion ring has twice */
	uint32_t cq_entries;
	uint64_t arg_bytes; /* each rank's argument area */
	struct hc_seg_region toc[HC_TOC_SLOTS];
	uint8_t meta_digest[32];
	_Atomic uint32_t state; /* enum hc_seg_state; release-stored READY by the creator */
	/* One past the highest rank slot ever claimed; only grows (seq_cst
	 * fetch-max by each claimer before its first pin).  Freers scan pin
	 * counters below it, never above max_ranks.  See pages.c. */
	_Atomic uint32_t slots_hwm;
};
static_assert(offsetof(struct hc_seg_hdr, magic) == 0, "magic first");
static_assert(offsetof(struct hc_seg_hdr, model_id) == 112, "header layout");
static_assert(offsetof(struct hc_seg_hdr, fingerprint) == 272, "header layout");
static_assert(offsetof(struct hc_seg_hdr, envelope_bytes) == 336, "header layout");
static_assert(offsetof(struct hc_seg_hdr, hash_secret) == 360, "header layout");
static_assert(offsetof(struct hc_seg_hdr, sq_entries) == 368, "header layout");
static_assert(offsetof(struct hc_seg_hdr, toc) == 384, "header layout");
static_assert(offsetof(struct hc_seg_hdr, meta_digest) == 640, "header layout");
static_assert(offsetof(struct hc_seg_hdr, state) == 672, "header layout");
static_assert(sizeof(struct hc_seg_hdr) == 680, "header size");
static_assert(sizeof(struct hc_seg_hdr) <= HC_SEG_HDR_BYTES, "header fits its block");

/* Component record: written by the creator, then immutable (in meta_digest). */
struct hc_seg_comp {
	char name[32];
	uint32_t dtype;
	uint32_t kind;
	uint32_t sharding;
	uint32_t groups;
	uint32_t kv_heads;
	uint32_t head_bytes;
	uint32_t layers;
	uint32_t window_pages; /* hit policy: 0 all pages, w the trailing w */
	uint64_t bytes_per_layer;
	uint64_t offset;
	uint64_t bytes;
	uint64_t group_stride;
	uint64_t layer_stride;
	uint8_t reserved1[24];
};
static_assert(sizeof(struct hc_seg_comp) == 128, "component record size");
static_assert(offsetof(struct hc_seg_comp, bytes_per_layer) == 64, "component layout");

/*
 * Rank slot.  Notes on synchronization: 'lock' is a robust, process-shared
 * mutex.  The process that holds it owns the slot and every other field; it
 * holds it from attach to detach, from a thread that lives as long as the
 * attachment.  Another process may take it only by trylock: EBUSY means
 * alive (a stopped process is alive), EOWNERDEAD is the one proof of death,
 * and whoever gets EOWNERDEAD must undo the dead owner's holds (idempotent),
 * then mark the mutex consistent.  'state' LIVE is release-stored after the
 * rest of the slot is written; readers other than the holder use it and
 * pid only for display.
 */
/* RECOVERING: the holder is dead and whoever got EOWNERDEAD is undoing its
 * holds, with the mutex held; it stores FREE when done. */
enum hc_rank_state { HC_RANK_FREE = 0, HC_RANK_LIVE = 1, HC_RANK_RECOVERING = 2 };

struct hc_seg_rank {
	pthread_mutex_t lock;
	_Atomic uint32_t state;
	_Atomic uint32_t pid;
	_Atomic uint32_t epoch;
	/* The incarnation of the engine joined: written with 'engine' (below),
	 * by the holder under ctl->engine_lock: the first live member takes a
	 * new one (ctl->engine_seq), the others copy it. */
	_Atomic uint32_t incarnation;
	_Atomic uint64_t attached_unix_ns;
	char comm[16];
	/* Engine membership: written by the holder under ctl->engine_lock
	 * (engine.c); cleared by whoever recovers the slot.  engine is the id
	 * plus one, 0 for none. */
	_Atomic uint32_t engine;
	_Atomic uint32_t tp; /* tp_size << 16 | tp_rank */
	_Atomic uint32_t quota;
	_Atomic uint32_t timeout_ms;
	/* Pages held under the quota, counted only while 'quota' is set (in
	 * an engine): the join stores what the rank holds then; this rank's
	 * threads add, and take away, as does whoever takes one of its
	 * reservations out of RESERVED; leave and recovery store 0.
	 * Approximate in that racing threads of one rank may both pass the
	 * check and each back out, or pin while the rank joins. */
	_Atomic uint32_t held;
	/* The holder thread's TID, stored by it before LIVE: a prober that
	 * finds the mutex busy compares it with the owner TID in the lock word,
	 * to tell the live holder from a recoverer of a dead one (ranks.c). */
	_Atomic uint32_t holder_tid;
	uint8_t reserved1[128 - 104];
};
static_assert(sizeof(pthread_mutex_t) == 40, "glibc x86-64/aarch64 mutex size is part of the layout");
static_assert(offsetof(struct hc_seg_rank, state) == 40, "rank slot layout");
static_assert(offsetof(struct hc_seg_rank, engine) == 80, "rank slot layout");
static_assert(sizeof(struct hc_seg_rank) == 128, "rank slot size");

/*
 * Pool-wide mutable state.  Notes on synchronization: each lock is a
 * robust, process-shared mutex held for microseconds by a writer; no
 * reader ever takes one.  Whoever gets EOWNERDEAD rebuilds what the lock
 * guards from the page table (index.c, ticket.c, engine.c say how) before
 * marking it consistent.  The clocks are plain atomics, relaxed: they order
 * nothing but eviction candidates.
 */
#define HC_INDEX_STRIPES  64
#define HC_TICKET_STRIPES 16

struct hc_seg_lock {
	pthread_mutex_t m;
	uint8_t pad[64 - sizeof(pthread_mutex_t)];
};

/*
 * The service: hicached, or a transfer engine embedded in a client.
 * Notes on synchronization: 'life' is a robust, process-shared mutex that
 * the serving process holds from start to exit, from a thread that lives
 * that long: the same proof of death as a rank slot's lock, so there is
 * one service at a time and a dead one is known.  state, pid, holder_tid
 * and generation are written by the holder under it (state LIVE with
 * release, last); others read them without a lock, to show and to tell
 * whether anyone serves.  'bell' is rung by ranks after they post
 * requests, and after commits the write policy wants to hear of; only the
 * service sleeps on it.
 * write_policy and select_hits are written by each service at start, under
 * its lock, and outlive it: eviction under write_back must keep dirty pages
 * while no service runs too.  dirty_seq is bumped (relaxed) by every rank
 * that commits a keyed page not in L3, so the service knows when to look.
 */
enum hc_svc_state { HC_SVC_NONE = 0, HC_SVC_LIVE = 1 };

struct hc_seg_service {
	pthread_mutex_t life;
	_Atomic uint32_t state;
	_Atomic uint32_t pid;
	_Atomic uint64_t generation; /* bumped by each start */
	_Atomic uint32_t holder_tid;
	uint8_t pad0[4];
	struct hc_bell bell;
	_Atomic uint32_t write_policy; /* enum hc_write_policy, + 1; 0: no service ever set one */
	_Atomic uint32_t select_hits;  /* write_through_selective: hits before a backup */
	_Atomic uint64_t dirty_seq;
	/* Gauges (minor 1), stored by the live service alone, relaxed; read
	 * by tools while the service is live (stale after it dies). */
	_Atomic uint32_t stage_read;    /* buffer_only: read staging pages */
	_Atomic uint32_t stage_write;   /* buffer_only: write staging granted */
	_Atomic uint32_t parked_reads;  /* buffer_only: prefetches waiting for staging */
	_Atomic uint32_t parked_writes; /* buffer_only: write grants waiting */
	_Atomic uint32_t jobs_queued;   /* transfer jobs waiting for a worker */
	_Atomic uint32_t jobs_running;  /* transfer jobs a worker runs */
	uint8_t pad1[24];
};
static_assert(sizeof(struct hc_seg_service) == 192, "service record size");

struct hc_seg_ctl {
	struct hc_seg_service service;
	struct hc_seg_lock engine_lock;                    /* engine joins and leaves */
	struct hc_seg_lock index_lock[HC_INDEX_STRIPES];   /* index writers, by key hash */
	struct hc_seg_lock ticket_lock[HC_TICKET_STRIPES]; /* ticket find-or-create, by name hash */
	struct hc_seg_lock lru_lock;                       /* HC_EVICT_LRU: the list and the clock (lru.c) */
	_Atomic uint64_t lru_clock;                        /* HC_EVICT_LRU: the last stamp handed out, under lru_lock */
	_Atomic uint64_t ticket_seq;                       /* ticket records taken so far (ticket.c) */
	_Atomic uint32_t engine_seq; /* engine incarnations handed out, under engine_lock (engine.c) */
	uint8_t pad0[44];
	_Atomic uint32_t clock_hand; /* HC_EVICT_CLOCK: the next page the hand looks at */
	uint8_t pad1[60];
};
static_assert(sizeof(struct hc_seg_lock) == 64, "lock size");
static_assert(sizeof(struct hc_seg_ctl) % 64 == 0, "control block is whole cache lines");

/* Counters: a row per rank slot (only that rank adds to it, relaxed) and a
 * last row for attachments without a slot.  Rows outlive attachments: a
 * pool's figures are the sum of every row. */
#define HC_STATS_ROW_WORDS 256u
/* A row: the counters from word 0, then from word HC_STATS_HIST_WORD each
 * histogram's buckets, its sum of microseconds and its max. */
#define HC_STATS_HIST_WORD  64u
#define HC_STATS_HIST_WORDS (HC_HIST_BUCKETS + 2u)
static_assert(HC_CTR__COUNT <= HC_STATS_HIST_WORD, "a row holds every counter: new counters keep the layout");
/* Then from word HC_STATS_TOKENS_WORD the histograms of tokens per request
 * by tier (enum hc_tier), in the same shape. */
#define HC_STATS_TOKENS_WORD 160u
static_assert(HC_STATS_TOKENS_WORD + HC_TIER__COUNT * HC_STATS_HIST_WORDS <= HC_STATS_ROW_WORDS,
	      "a row holds every token histogram");
static_assert(HC_STATS_HIST_WORD + HC_HIST__COUNT * HC_STATS_HIST_WORDS <= HC_STATS_TOKENS_WORD,
	      "a row holds every histogram");

/*
 * Page entry.  'word' is the truth about the page:
 *
 *   bits 61..63  state  (enum hc_page_state)
 *   bits 54..60  owner rank slot: the reserver (RESERVED, READY), the quarantiner
 *                (QUARANTINE), the retirer (FREEING)
 *   bits 32..53  generation, bumped by each allocation
 *   bits  0..31  aux: fill mask (RESERVED), quarantine start in ms of
 *                CLOCK_BOOTTIME mod 2^32 (QUARANTINE), "checked" and the
 *                READY word's owner (FREEING, hc__freeing_aux), else 0
 *
 * Notes on synchronization: every transition is one compare-and-swap on
 * 'word' (seq_cst), so a death at any instruction leaves a state that
 * recovery reads exactly.  Who may move what:
 *   FREE        -> RESERVED   any rank, allocating (gen+1, owner = self)
 *   QUARANTINE  -> RESERVED   any rank, allocating, once the grace ran out,
 *                             the page is unkeyed and nothing holds it
 *   RESERVED    -> RESERVED   any rank with the handle, committing (aux |= bits)
 *   RESERVED    -> READY      whoever completes the fill mask
 *   RESERVED    -> QUARANTINE the owner, aborting; then it unkeys the page
 *                             and, unless it is HC_PF_SHARED, stores FREE
 *   READY       -> FREEING    any rank, freeing or evicting (aux: the READY
 *                             owner); then it reads every hold and stores
 *                             READY back if any, else FREEING "checked",
 *                             takes the page out of the index, and stores
 *                             FREE, or RESERVED (gen+1, owner = self) when an
 *                             allocation evicts it for itself
 *   RESERVED    -> QUARANTINE the dropper of an expired reservation ticket
 *   RESERVED of a dead owner -> QUARANTINE, then unkeyed      recovery
 *   FREEING of a dead retirer -> READY (unchecked) / FREE (checked) recovery
 *   READY, ANON, of a dead owner -> FREE (as a retirement)   recovery
 *   QUARANTINE  -> FREE       the sweep, once the grace ran out and nothing
 *                             holds it (unkeying it first, at that word only)
 * Whoever quarantines a keyed page unkeys it after its CAS, at that word
 * (hc__unkey_at), never before: a page it has not yet settled may still
 * become READY.
 * 'presence' is written by the allocator after its CAS and before the
 * handle leaves it; readers read it after an acquire load of 'word'.
 */
#define HC_PF_KEYED 0x1u /* key and depth are set and the page is (or is being put) in the index */
/* The page's object is in L3: set (fetch_or) by the service once a backup
 * of the READY page it pins is done, or by the prefetcher that read it;
 * cleared (fetch_and) by the service under a pin when L3 says it has no
 * such object (it evicted or lost it); a fresh reservation clears flags.  A restarted service backs up the READY
 * pages without it that its write policy wants in L3. */
#define HC_PF_IN_L3 0x2u
/* Allocated without a key (hc_page_alloc): its owner's until it frees it;
 * set by the allocator before the handle leaves it.  Recovery frees a dead
 * owner's READY ones. */
#define HC_PF_ANON 0x4u
/* The reservation was handed to other writers (a reservation ticket of
 * several ranks, an engine-mate's store): set (fetch_or) by the builder
 * before it publishes, or by the co-writer before its copy starts.  An
 * abort then quarantines the page, since their copies may still land; a
 * page nobody else was given goes straight back to FREE. */
#define HC_PF_SHARED 0x8u
/* An ANON page whose owner died while another rank held it: set (fetch_or)
 * by recovery; the last hold's release, the sweep or the evictor frees it. */
#define HC_PF_ORPHAN 0x10u
/* Bits 16..31: a check of what the allocator and the reserver wrote (the
 * key, depth and presence of a keyed page; the presence of an ANON one),
 * stored with KEYED or ANON: hc_pool_check tells a scribbled page entry by
 * it. */
#define HC_PF_CHECK_SHIFT 16

struct hc_seg_page {
	_Atomic uint64_t word;
	_Atomic uint32_t presence;
	/* key, depth and flags are written by the page's owner while it holds
	 * the page (RESERVED by it, or FREEING by it), before any release that
	 * publishes them (index insert, commit).  Readers load them after an
	 * acquire of 'word' and trust them only while they hold a pin or see
	 * the same word again afterwards. */
	_Atomic uint32_t depth;
	_Atomic uint64_t key[4];
	/* Last use: an LRU stamp from ctl->lru_clock, or CLOCK's reference bit.
	 * Written by lookups, relaxed; read by the evictor. */
	_Atomic uint64_t stamp;
	_Atomic uint32_t flags;
	/* Hits by lookups (one per ticket), counted only while the write
	 * policy is write_through_selective and the page is not in L3, up to
	 * select_hits; zeroed by the reserver with the key. */
	_Atomic uint32_t hits;
};
static_assert(sizeof(struct hc_seg_page) == 64, "page entry is one cache line");
static_assert(offsetof(struct hc_seg_page, key) == 16, "page entry layout");

/*
 * A node of the LRU list (toc[LRU], lru.c): npages + 1 of them, the last
 * the list's head; prev and next are node numbers, next HC_LRU_OFF when
 * the page is on no list.  Written only under ctl->lru_lock.
 */
#define HC_LRU_OFF UINT32_MAX
struct hc_seg_lru {
	_Atomic uint32_t prev, next;
};
static_assert(sizeof(struct hc_seg_lru) == 8, "LRU node size");

/*
 * Key index entry: 0 empty, else (tag << 32) | (page id + 1).  A bucket is
 * 8 entries (one cache line); a key lives in one of two buckets.  Entries
 * are claimed and cleared by CAS, by writers holding the key's stripe lock.
 * Readers take no lock: an entry only names a candidate, which they verify
 * in the page table.
 */
#define HC_BUCKET_ENTRIES 8

/*
 * Ticket record.  'word' is its state:
 *   bits 61..63 state (enum hc_ticket_state)
 *   bits 54..60 owner rank slot: the builder (BUILDING) or dropper (DROPPING)
 *   bits 38..53 generation, bumped each time the record is taken
 *   bit  37     expired: every share not claimed below is expired
 *   bit  36     naming: taken, its name not yet written (BUILDING only)
 *   bits  0..31 claimed shares, a bit per TP rank
 * Notes on synchronization: a record is taken (FREE/CLOSED -> BUILDING
 * with 'naming') by CAS under the ticket stripe lock of its new name; the
 * taker writes the name and fields, then stores the word without 'naming'
 * (release).  A finder of the record's old name holds another stripe, so
 * it may look in between: it matches no word with 'naming', and checks the
 * generation around its reads of the name.  Everything else (n, result, pages,
 * deadline) is written by the builder before its release CAS to OPEN, and
 * read only after an acquire load of OPEN.  Shares move by CAS on 'word'
 * alone.  'seq' is written at the take and read by takers of other stripes
 * without order: it only ranks tombstones for reuse.
 */
enum hc_ticket_state {
	HC_TK_FREE = 0,
	HC_TK_BUILDING = 1, /* the first rank is looking up or reserving */
	HC_TK_OPEN = 2,     /* the answer is published; shares are being claimed */
	HC_TK_DROPPING = 3, /* every share is claimed or expired; the owner drops the ticket's holds */
	HC_TK_CLOSED = 4,   /* no holds; kept as a tombstone so latecomers get a clear error */
};
enum hc_ticket_kind { HC_TK_LOOKUP = 1, HC_TK_RESERVE = 2 };

struct hc_seg_ticket {
	_Atomic uint64_t word;
	_Atomic uint64_t name_hash;
	_Atomic uint32_t engine; /* engine id + 1 */
	_Atomic uint32_t step;
	uint32_t kind;
	uint32_t nkeys;
	uint32_t tp_size;
	uint32_t n;            /* pages recorded: the hit length, or keys reserved for */
	uint64_t seq;          /* ctl->ticket_seq when taken: the oldest tombstone goes first */
	uint64_t deadline_ms;  /* CLOCK_BOOTTIME ms */
	uint64_t keys_fold[2]; /* which keys the name was used with */
	char request_id[48];
	int32_t result;               /* 0, or the first rank's failure, which every rank gets */
	_Atomic uint32_t incarnation; /* the engine's (hc_seg_rank): a name is for one life of an engine */
};
static_assert(sizeof(struct hc_seg_ticket) == 128, "ticket record size");

#define HC_TK_STATE_SHIFT 61
#define HC_TK_OWNER_SHIFT 54
#define HC_TK_GEN_SHIFT   38
#define HC_TK_GEN_MASK    UINT64_C(0xffff)
#define HC_TK_EXPIRED     (UINT64_C(1) << 37)
#define HC_TK_NAMING      (UINT64_C(1) << 36)
#define HC_TK_CLAIMED     UINT64_C(0xffffffff)

static inline unsigned hc__tk_state(uint64_t w)
{
	return (unsigned)(w >> HC_TK_STATE_SHIFT);
}
static inline unsigned hc__tk_owner(uint64_t w)
{
	return (unsigned)((w >> HC_TK_OWNER_SHIFT) & 0x7f);
}
static inline uint32_t hc__tk_gen(uint64_t w)
{
	return (uint32_t)((w >> HC_TK_GEN_SHIFT) & HC_TK_GEN_MASK);
}
static inline uint64_t hc__tk_with(uint64_t w, unsigned state, unsigned owner)
{
	return (w & ~((UINT64_C(7) << HC_TK_STATE_SHIFT) | (UINT64_C(0x7f) << HC_TK_OWNER_SHIFT))) |
	       ((uint64_t)state << HC_TK_STATE_SHIFT) | ((uint64_t)(owner & 0x7f) << HC_TK_OWNER_SHIFT);
}

/* Ticket page list entries: a handle, with the skip reason in bits 56..63. */
#define HC_TP_SKIP_SHIFT 56

static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free in shared memory");
static_assert(ATOMIC_INT_LOCK_FREE == 2, "32-bit atomics must be lock-free in shared memory");
static_assert(ATOMIC_SHORT_LOCK_FREE == 2, "16-bit atomics must be lock-free in shared memory");

#define HC_W_STATE_SHIFT 61
#define HC_W_OWNER_SHIFT 54
#define HC_W_GEN_SHIFT   32
#define HC_W_OWNER_MASK  UINT64_C(0x7f)
#define HC_W_GEN_MASK    UINT64_C(0x3fffff)

static inline uint64_t hc__w_make(unsigned state, unsigned owner, uint32_t gen, uint32_t aux)
{
	return ((uint64_t)state << HC_W_STATE_SHIFT) | (((uint64_t)owner & HC_W_OWNER_MASK) << HC_W_OWNER_SHIFT) |
	       (((uint64_t)gen & HC_W_GEN_MASK) << HC_W_GEN_SHIFT) | aux;
}
static inline unsigned hc__w_state(uint64_t w)
{
	return (unsigned)(w >> HC_W_STATE_SHIFT);
}
static inline unsigned hc__w_owner(uint64_t w)
{
	return (unsigned)((w >> HC_W_OWNER_SHIFT) & HC_W_OWNER_MASK);
}
static inline uint32_t hc__w_gen(uint64_t w)
{
	return (uint32_t)((w >> HC_W_GEN_SHIFT) & HC_W_GEN_MASK);
}
static inline uint32_t hc__w_aux(uint64_t w)
{
	return (uint32_t)w;
}

/* FREEING's aux: bit 0 "checked, nothing held"; bits 8..14 the owner the
 * READY word had, which a recoverer of a dead retirer puts back. */
#define HC_FREEING_CHECKED 0x1u
static inline uint32_t hc__freeing_aux(unsigned ready_owner, uint32_t checked)
{
	return (uint32_t)(ready_owner & HC_W_OWNER_MASK) << 8 | checked;
}
static inline int hc__freeing_checked(uint64_t w)
{
	return (hc__w_aux(w) & HC_FREEING_CHECKED) != 0;
}
static inline unsigned hc__freeing_owner(uint64_t w)
{
	return (hc__w_aux(w) >> 8) & HC_W_OWNER_MASK;
}

/*
 * A rank slot's block in toc[RINGS]: its completion bell (the rank sleeps
 * on it), its submission ring (the rank produces, the service consumes),
 * its completion ring (the service produces, the rank consumes), and its
 * argument area (the rank writes, the service reads).  Each part starts on
 * a cache line; a block is whole 4 KiB pages.
 */
#define HC_SQE_BYTES 64 /* a request entry */
#define HC_CQE_BYTES 32 /* a completion entry */
#define HC_SQ_MAX    4096
#define HC_ARG_MAX   (UINT64_C(64) << 20)

struct hc__ringgeo {
	uint64_t block; /* bytes per rank slot */
	uint64_t sq_off, cq_off, arg_off;
};

/* Geometry: computed from a spec at creation, recomputed at attach. */
struct hc__geom {
	uint32_t page_tokens, tp_size, head_groups, ncomp, max_ranks, npages;
	uint32_t max_tickets, ticket_keys, index_buckets, evict;
	uint32_t host_mode, sq_entries, cq_entries;
	uint64_t arg_bytes;
	struct hc__ringgeo rg;
	struct hc_component_info comps[HC_MAX_COMPONENTS];
	uint32_t sharded_mask;    /* components split by head group */
	uint32_t replicated_mask; /* components with one copy */
	uint64_t envelope_bytes;
	struct hc_seg_region toc[HC_REG__COUNT];
	uint64_t segment_bytes;
};

int hc__geom_envelope(struct hc__geom *g);
int hc__geom_regions(struct hc__geom *g);
void hc__fingerprint(const char *model_id, const struct hc__geom *g, uint8_t out[32]);
void hc__meta_digest(const struct hc_seg_hdr *h, const struct hc_seg_comp *comps, uint32_t ncomp, uint8_t out[32]);

#endif /* HC_SHMPOOL_LAYOUT_H */
