/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hicache.h - client API of libhicache: the shared-memory page-envelope pool.
 *
 * Conventions (as liburing): every function returns 0, a count, or a
 * negative errno, and never sets errno.  On failure the calling thread's
 * hc_last_error() holds one line saying what failed, on what, and what to do.
 * The exceptions, each marked where it is declared: hc_version,
 * hc_last_error, hc_set_log, the name and help lookups (hc_dtype_name,
 * hc_page_state_name: a placeholder for nonsense; hc_counter_name/help,
 * hc_hist_name/help, hc_tier_name/help: NULL past the end), hc_dtype_size and hc_page_needed
 * (a value, 0 for nonsense), hc_hist_bound_us (a bound), hc_page_envelope
 * (an address, or NULL with the error line), and in <hicache/device.h> hc_xfer_layers
 * (a count) and hc_xfer_layer_event (an event, NULL on error).
 *
 * ABI (hicache(7), VERSIONED STRUCTS): every struct the caller fills
 * starts with a uint32_t size, which the caller sets to sizeof the struct
 * as it was built (e.g. { .size = sizeof(struct hc_pool_spec), ... });
 * every function that fills a struct for the caller takes the caller's
 * sizeof of it.  Members are only ever appended, each new one meaning "as
 * before" when zero, and the library reads or writes a member only where
 * the caller's size covers it: a program built against an older header
 * keeps working with a newer library.  A size smaller than the first
 * version's, or over 4 KiB for a struct the caller fills (64 KiB for one
 * the library fills), or a caller's struct larger than this library's
 * with nonzero bytes past its end, is -EINVAL; a struct the library fills
 * that is larger than its own gets zeros past its end.  Initialize these
 * structs with = { ... } or memset, so that their padding is zero too.
 * Arrays of structs (hc_pool_spec.comps) are strided by their first
 * element's size.  The soname and the symbol version node change when
 * anything else does.
 *
 * ENVELOPE BYTE ORDER (layout id "page-unified-v1"; see hicache(7))
 *
 * A pool holds npages envelopes.  Envelope p starts at a 4096-byte aligned
 * address and is envelope_bytes long.  Inside it the components follow one
 * another in creation order, each starting at a 4096-byte boundary.  Inside
 * component c the bytes are ordered, outermost first:
 *
 *     (head group g, layer l, K/V kv, token t, head-in-group h, byte b)
 *
 * for a K/V component, and (head group g, layer l, byte b) for a state
 * snapshot.  With G head groups, H total KV heads, Hg = H / G, T =
 * page_tokens, B = head bytes and L layers:
 *
 *     offset(g, l, kv, t, h, b) = comp_off
 *                               + g  * (L * 2 * T * Hg * B)
 *                               + l  * (2 * T * Hg * B)
 *                               + kv * (T * Hg * B)
 *                               + t  * (Hg * B) + h * B + b
 *
 * So a rank's shard (one head group) of a component is one contiguous run,
 * and one (layer, K/V) of that shard is one run of T*Hg*B bytes, laid out
 * token-major like the KV pools of SGLang and vLLM.  A replicated component
 * (MLA) has exactly one group.  Engines with another TP size read whole
 * head groups.
 */
#ifndef HICACHE_HICACHE_H
#define HICACHE_HICACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hicache/version.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HC_API __attribute__((visibility("default")))
#else
#define HC_API
#endif

#define HC_NAME_MAX        64  /* pool name length, without the NUL */
#define HC_MODEL_ID_MAX    127 /* model id length, without the NUL */
#define HC_COMP_NAME_MAX   31  /* component name length, without the NUL */
#define HC_MAX_COMPONENTS  16
#define HC_MAX_HEAD_GROUPS 31   /* fill-mask bits 0..30; bit 31 is the replicated part */
#define HC_MAX_RANKS       128  /* rank slots a pool can have */
#define HC_ENVELOPE_ALIGN  4096 /* envelope and component alignment (O_DIRECT) */

/* Fill-mask bit that stands for "every replicated component is written". */
#define HC_SHARD_REPLICATED (UINT32_C(1) << 31)

enum hc_dtype {
	HC_DTYPE_INVALID = 0,
	HC_DTYPE_F32,
	HC_DTYPE_F16,
	HC_DTYPE_BF16,
	HC_DTYPE_FP8_E4M3,
	HC_DTYPE_FP8_E5M2,
	HC_DTYPE_INT8,
	HC_DTYPE_UINT8,
	HC_DTYPE__COUNT
};

enum hc_comp_kind {
	HC_COMP_KV = 1,    /* K and V for every token: kv_heads, head_bytes, layers */
	HC_COMP_STATE = 2, /* a per-page state snapshot: bytes_per_layer, layers */
};

enum hc_sharding {
	HC_SHARDED = 0,    /* split by head group: one run per rank */
	HC_REPLICATED = 1, /* one copy for all ranks (MLA); one writer */
};

struct hc_component_spec {
	uint32_t size;    /* sizeof(struct hc_component_spec); the same in every element */
	const char *name; /* [A-Za-z0-9_.-], 1..HC_COMP_NAME_MAX */
	enum hc_dtype dtype;
	enum hc_comp_kind kind;
	enum hc_sharding sharding;
	uint32_t kv_heads;        /* HC_COMP_KV: total KV heads of the model */
	uint32_t head_bytes;      /* HC_COMP_KV: bytes of one head of one token */
	uint64_t bytes_per_layer; /* HC_COMP_STATE: bytes per layer, all groups */
	uint32_t layers;
	uint32_t window_pages; /* hit policy: 0, every page of a hit must hold this component
				* (full attention); w, only the trailing w pages (sliding
				* window; 1 for a state snapshot) */
};

enum hc_evict_policy {
	HC_EVICT_CLOCK = 0, /* default: CLOCK over a reference bit; approximates LRU, no shared counter */
	HC_EVICT_LRU = 1,   /* exact: least recently used first, ties deepest first (tests, replay) */
};

/* When pages go to L3 (doc/design.md, "The transfer engine").  The service finds the pages
 * to write by itself (see hicached(8)); the pool keeps the policy, since
 * eviction under write_back depends on it even while no service runs. */
enum hc_write_policy {
	HC_WRITE_THROUGH = 0,           /* every keyed page, once it is READY */
	HC_WRITE_THROUGH_SELECTIVE = 1, /* a page once it has had select_hits hits (one per ticket) */
	HC_WRITE_BACK = 2,              /* dirty pages near the eviction end, to keep the
					 * clean tail above the watermark; dirty pages
					 * are never evicted, and allocation fails instead */
	HC_WRITE_NONE = 3,              /* only what ranks ask for with hc_req_backup */
};

/* What the pool is for (hc_pool_create(3), host_mode; doc/design.md, "buffer_only"). */
enum hc_host_mode {
	HC_HOST_CACHE = 0,       /* L2 keeps READY pages and evicts them by policy */
	HC_HOST_BUFFER_ONLY = 1, /* pages only stage transfers between GPUs and L3 */
};

enum hc_numa_mode {
	HC_NUMA_DEFAULT = 0,    /* the kernel's first-touch policy */
	HC_NUMA_BIND = 1,       /* bind to numa_nodes */
	HC_NUMA_INTERLEAVE = 2, /* interleave across numa_nodes (NULL: all) */
};

/* The progress of a long step of hc_pool_create or hc_pool_attach, on the
 * caller's thread: phase "allocate" (the pool's memory, at create) or
 * "populate" (this process's page tables), done of total bytes; first
 * with done 0, last with done == total, and after every GiB between. */
typedef void (*hc_progress_fn)(void *arg, const char *phase, uint64_t done, uint64_t total);

struct hc_pool_spec {
	uint32_t size;    /* sizeof(struct hc_pool_spec) */
	const char *name; /* pool name; backing /dev/shm/hicache.<name> */
	const char *dir;  /* NULL: /dev/shm; else a (huge-page) tmpfs or hugetlbfs */
	const char *model_id;
	uint32_t page_tokens;
	uint32_t tp_size;     /* the TP size the pool is laid out for */
	uint32_t head_groups; /* 0: the largest g <= min(tp_size, 31) that divides tp_size
			       * and every sharded component; give it explicitly for pools
			       * that engines of several TP sizes share (it is in the fingerprint) */
	const struct hc_component_spec *comps;
	uint32_t ncomp;
	uint64_t capacity_pages; /* exactly one of capacity_pages, capacity_bytes */
	uint64_t capacity_bytes; /* envelope bytes; rounded down to whole pages */
	uint32_t max_ranks;      /* rank slots; 0: 32 */
	uint32_t quarantine_ms;  /* grace before a dead rank's reservations are reused; 0: 2000 */
	mode_t mode;             /* 0, 0600 or 0660; 0: 0600, or 0660 when group is set */
	const char *group;       /* NULL, or a group name allowed to attach */
	enum hc_numa_mode numa;
	const char *numa_nodes;     /* libnuma node string, e.g. "0" or "0-1" */
	unsigned flags;             /* HC_CREATE_* */
	enum hc_evict_policy evict; /* which unpinned READY page goes first when pages run out */
	uint32_t max_tickets;       /* open tickets at once; a multiple of 64; 0: 64 */
	uint32_t ticket_keys;       /* most keys one ticket names; 0: 1024 */
	enum hc_host_mode host_mode;
	uint32_t ring_entries;   /* each rank's request ring, a power of two in 8..4096; 0: 64
				  * (its completion ring has twice as many) */
	uint64_t arg_bytes;      /* each rank's argument area for key lists, a multiple of 4096; 0: 64 KiB */
	hc_progress_fn progress; /* NULL, or told how the allocation and population go */
	void *progress_arg;
	int *sealed_fd; /* NULL: a named pool in dir.  Else a sealed pool: a memfd with no name in
			 * any directory (dir must be NULL), sealed against shrinking and growing;
			 * its fd (close-on-exec) is stored here, the caller's to attach
			 * (hc_attach_opts.fd), hand over (hc_pool_serve) and close; the pool is
			 * gone when the last fd and mapping are.  mode and group still decide
			 * who hc_pool_serve admits (hicache-sealed(7)) */
};

#define HC_CREATE_NO_POPULATE 0x1u /* skip MADV_POPULATE_WRITE (tests only) */
#define HC_CREATE_SPARSE      0x2u /* reserve the page table, not the envelopes (benches of the table only) */

typedef struct hc_pool hc_pool;

/*
 * A page handle names one life of a page: its id (low 32 bits) and the
 * generation its allocation gave it (22 bits above).  A handle to a page
 * that has since been freed and reused gets -ESTALE, not someone else's
 * page.
 */
typedef uint64_t hc_page_t;
#define HC_PAGE_ID(p)         ((uint32_t)((p)&0xffffffffu))
#define HC_PAGE_GEN(p)        ((uint32_t)(((p) >> 32) & 0x3fffffu))
#define HC_PAGE_MAKE(id, gen) ((hc_page_t)(uint32_t)(id) | ((hc_page_t)((gen)&0x3fffffu) << 32))

#define HC_ATTACH_ADMIN       0x1u  /* no rank slot, no populate: tools */
#define HC_ATTACH_READONLY    0x2u  /* map read-only; implies ADMIN; no recovery */
#define HC_ATTACH_NO_RECOVER  0x4u  /* skip recovery at attach */
#define HC_ATTACH_NO_POPULATE 0x8u  /* skip MADV_POPULATE_WRITE (tests only) */
#define HC_ATTACH_FD          0x10u /* attach the sealed pool in opts.fd, not a named one */

struct hc_attach_opts {
	uint32_t size;           /* sizeof(struct hc_attach_opts) */
	const char *dir;         /* NULL: /dev/shm */
	unsigned flags;          /* HC_ATTACH_* */
	hc_progress_fn progress; /* NULL, or told how the population goes */
	void *progress_arg;
	/* A sealed pool (hicache-sealed(7)); dir must then be NULL.  With
	 * HC_ATTACH_FD: fd, a memfd sealed against shrinking and growing,
	 * which the pool duplicates (the caller keeps its own).  Else with a
	 * socket: the path of a Unix socket whose owner (hicached, or
	 * hc_pool_serve) hands the pool's fd over; the name given to attach
	 * must be the pool's. */
	int fd;
	const char *socket;
	uint32_t socket_timeout_ms; /* how long the socket's owner may take; 0: 10 s */
};

/* What recovery found and undid (hc_pool_recover, hicache-pool repair).
 * Fixed at 64 bytes, since hc_repair_report embeds it: a new count takes
 * the place of resv[0], which the library zeroes (on purpose: make
 * abi-update, abi/README). */
struct hc_recovery_report {
	uint32_t dead_ranks;   /* slots proven dead by EOWNERDEAD and cleared */
	uint32_t pins_dropped; /* pin counts of dead ranks set to zero */
	uint32_t quarantined;  /* dead ranks' reservations put in quarantine */
	uint32_t released;     /* quarantined pages whose grace ran out -> FREE */
	uint32_t promoted;     /* fully committed reservations -> READY */
	uint32_t unfreed;      /* dead ranks' half-done frees -> back to READY */
	uint32_t bad_words;    /* page words that made no sense, put in quarantine */
	uint32_t reclaimed;    /* dead ranks' READY pages allocated without a key, freed */
	uint32_t orphaned;     /* such pages another rank still holds: freed when it lets go */
	uint32_t resv[7];
};

enum hc_page_state {
	HC_PAGE_FREE = 0,
	HC_PAGE_RESERVED = 1,
	HC_PAGE_READY = 2,
	HC_PAGE_QUARANTINE = 3,
	HC_PAGE_FREEING = 4,
	HC_PAGE__COUNT
};
#define HC_PAGE_STATES_MAX 8 /* room for states in hc_stats.pages */

/* A private copy of the pool's geometry, valid until detach. */
struct hc_pool_info {
	char name[HC_NAME_MAX + 1];
	char model_id[HC_MODEL_ID_MAX + 1];
	char path[4096];
	uint8_t fingerprint[32];
	uint32_t layout_major, layout_minor;
	uint32_t page_tokens, tp_size, head_groups, ncomp, max_ranks;
	uint32_t npages, quarantine_ms;
	uint64_t envelope_bytes;
	uint64_t segment_bytes;
	uint64_t envelopes_offset;
	uint32_t creator_pid, creator_uid;
	uint64_t created_unix_ns;
	int32_t self_slot; /* this process's rank slot, or -1 */
	int huge_pages;    /* backing reports huge pages */
	enum hc_evict_policy evict;
	uint32_t max_tickets, ticket_keys;
	uint32_t index_slots; /* key index capacity */
	enum hc_host_mode host_mode;
	uint32_t sq_entries, cq_entries; /* each rank's request and completion rings */
	uint64_t arg_bytes;              /* each rank's argument area */
};

struct hc_component_info {
	char name[HC_COMP_NAME_MAX + 1];
	enum hc_dtype dtype;
	enum hc_comp_kind kind;
	enum hc_sharding sharding;
	uint32_t kv_heads, head_bytes, layers, groups;
	uint64_t bytes_per_layer; /* per layer, all groups */
	uint64_t offset;          /* from the start of the envelope */
	uint64_t bytes;           /* whole component */
	uint64_t group_stride;    /* bytes of one group's shard */
	uint64_t layer_stride;    /* bytes of one (group, layer) run */
	uint32_t window_pages;    /* hit policy: 0 every page, else the trailing w pages */
};

struct hc_rank_info {
	uint32_t slot;
	int live; /* 1: holds its slot; 0: free */
	uint32_t pid;
	uint32_t epoch; /* how many times the slot has been claimed */
	uint64_t attached_unix_ns;
	char comm[16];
	uint64_t pins;     /* pin count held, summed over pages */
	uint32_t reserved; /* pages in RESERVED owned by this slot */
	uint64_t locks;    /* host-lock count held, summed over pages */
	int32_t engine_id; /* engine joined (hc_engine_join), or -1 */
	uint32_t tp_size, tp_rank;
	uint32_t quota; /* pages this rank may hold pinned, locked or reserved */
	uint32_t held;  /* pages it holds now, as the quota counts them */
};

/* Errors and logging. */
HC_API const char *hc_version(void);    /* exception: a static string */
HC_API const char *hc_last_error(void); /* exception: this thread's last error line, or "no error" */
typedef void (*hc_log_fn)(int level, const char *msg, void *arg);
#define HC_LOG_ERR  3
#define HC_LOG_WARN 4
#define HC_LOG_INFO 6
HC_API void hc_set_log(hc_log_fn fn, void *arg);             /* exception: void; NULL: stderr, warnings and errors */
HC_API const char *hc_dtype_name(enum hc_dtype d);           /* exception: "invalid" for invalid */
HC_API int hc_dtype_parse(const char *s);                    /* enum hc_dtype, or -EINVAL */
HC_API unsigned hc_dtype_size(enum hc_dtype d);              /* exception: bytes, 0 for invalid */
HC_API const char *hc_page_state_name(enum hc_page_state s); /* exception: "INVALID" past the end */

/* Pools. */
HC_API int hc_pool_create(const struct hc_pool_spec *spec);
HC_API int hc_pool_attach(const char *name, const struct hc_attach_opts *opts, hc_pool **out);
HC_API int hc_pool_detach(hc_pool *pool);
/* Serve one connection on listen_fd, a listening Unix stream socket: hand
 * the sealed pool pool_fd (named name) to the peer if its credentials may
 * open the pool (its owner, root, or a member of its group when its mode is
 * 0660), else send it why not.  Waits accept_ms for a connection (-1:
 * forever) and peer_ms (0: 5 s) for the peer's request.  0 when the fd was
 * handed over, or -errno: -EACCES refused, -EPROTO a peer that spoke no
 * protocol, -ETIMEDOUT none came or it fell silent (hicache-sealed(7)). */
HC_API int hc_pool_serve(int listen_fd, int pool_fd, const char *name, int accept_ms, int peer_ms);
HC_API int hc_pool_destroy(const char *name, const char *dir, unsigned flags);
#define HC_DESTROY_FORCE 0x1u /* even with live ranks attached */
/* size: sizeof *rep (rep may be NULL). */
HC_API int hc_pool_recover(hc_pool *pool, struct hc_recovery_report *rep, size_t size);
/* size: the caller's sizeof *out. */
HC_API int hc_pool_info(const hc_pool *pool, struct hc_pool_info *out, size_t size);
HC_API int hc_pool_component(const hc_pool *pool, unsigned comp, struct hc_component_info *out, size_t size);
HC_API int hc_pool_rank(hc_pool *pool, unsigned slot, struct hc_rank_info *out, size_t size);
/* Slots 0..n (at most max_ranks) into out[], each 'size' bytes apart, in one
 * pass over the pages: the count written. */
HC_API int hc_pool_ranks(hc_pool *pool, struct hc_rank_info *out, size_t size, unsigned n);
/* Pages by state into counts[0..n): the count of states written (at most HC_PAGE__COUNT). */
HC_API int hc_pool_count_states(const hc_pool *pool, uint64_t *counts, unsigned n);
HC_API int hc_pool_name_valid(const char *name); /* 0 or -EINVAL */

/* Pages. */
HC_API int hc_page_alloc(hc_pool *pool, unsigned n, uint32_t presence, hc_page_t *out);
HC_API int hc_page_addr(const hc_pool *pool, hc_page_t page, unsigned comp, unsigned layer, unsigned group, void **addr,
			size_t *len);
HC_API void *hc_page_envelope(const hc_pool *pool, hc_page_t page); /* exception: NULL (and the error line) on error */
HC_API int hc_page_commit(hc_pool *pool, hc_page_t page, uint32_t shards);
HC_API int hc_page_abort(hc_pool *pool, const hc_page_t *pages, unsigned n);
HC_API int hc_page_pin(hc_pool *pool, hc_page_t page);
HC_API int hc_page_unpin(hc_pool *pool, hc_page_t page);
HC_API int hc_page_free(hc_pool *pool, const hc_page_t *pages, unsigned n);
HC_API int hc_page_state(const hc_pool *pool, uint32_t page_id, hc_page_t *handle, uint32_t *owner_slot,
			 uint32_t *fill_or_since);
HC_API int hc_page_presence(const hc_pool *pool, hc_page_t page, uint32_t *presence);
HC_API uint32_t hc_page_needed(const hc_pool *pool, uint32_t presence); /* exception: a fill mask (0 for no pool) */

/*
 * Keys (doc/design.md, "Keys").  A key names one full page of a sequence by
 * its tokens and its position: SHA-256(previous key || this page's token
 * ids as uint32 little-endian).  The first page's "previous key" is the
 * namespace seed, or nothing.  Byte-identical to SGLang's, so the two share
 * pages.
 */
#define HC_KEY_BYTES 32
typedef uint8_t hc_key_t[HC_KEY_BYTES];

/* The seed of a namespace: 1 and *seed written, or 0 when both parts are
 * NULL (the chain then starts from nothing; pass seed = NULL). */
HC_API int hc_namespace_seed(const char *extra_key, const char *cache_salt, uint8_t seed[HC_KEY_BYTES]);
/* Keys of the n / page_tokens full pages of tokens[0..n): the count.  prev
 * is the key of the page before tokens[0] (continuing a chain); seed starts
 * one; give at most one of them.  A partial last page gets no key. */
HC_API int hc_key_chain(const uint8_t *seed, const uint8_t *prev, const uint32_t *tokens, size_t n,
			uint32_t page_tokens, hc_key_t *out);

/*
 * Prefix lookup.  The longest prefix of keys[0..nkeys) that is READY, under
 * each needed component's hit policy (hc_component_spec.window_pages).
 * Returns the hit length h; pages[0..h) get the handles, HC_PAGE_NONE where
 * a window policy does not need the page.  With HC_LOOKUP_PIN every handle
 * returned is pinned for this rank in the same step (unpin each); nothing
 * can be evicted between the answer and the pin.
 */
#define HC_PAGE_NONE      UINT64_MAX
#define HC_LOOKUP_MAX     65536 /* most keys one lookup or reservation takes */
#define HC_LOOKUP_PIN     0x1u  /* pin the hit pages */
#define HC_LOOKUP_NOTOUCH 0x2u  /* do not count as a use for eviction (inspection) */

struct hc_lookup_req {
	uint32_t size; /* sizeof(struct hc_lookup_req) */
	const hc_key_t *keys;
	unsigned nkeys;             /* 1..HC_LOOKUP_MAX */
	uint32_t comps;             /* components the caller needs (bit per component); 0: all */
	unsigned flags;             /* HC_LOOKUP_* */
	const uint8_t *fingerprint; /* 32 bytes, or NULL for the pool's own; another finds nothing */
};
HC_API int hc_lookup(hc_pool *pool, const struct hc_lookup_req *req, hc_page_t *pages);

/*
 * Reserve by key: the write path.  For each key, a page to fill, or a skip:
 * HC_SKIP_READY (the key is READY already) or HC_SKIP_BUSY (another writer
 * holds a reservation for it).  All or nothing: -ENOSPC reserves nothing.
 * Returns the number of pages reserved.  Fill them (hc_page_addr), then
 * hc_page_commit; the pages become findable when READY.
 */
#define HC_SKIP_READY 1
#define HC_SKIP_BUSY  2
struct hc_reserve_req {
	uint32_t size; /* sizeof(struct hc_reserve_req) */
	const hc_key_t *keys;
	unsigned nkeys;             /* 1..HC_LOOKUP_MAX */
	uint32_t first_depth;       /* position of keys[0] in its chain (0: the root page) */
	uint32_t presence;          /* components the pages will hold; 0: all */
	const uint8_t *fingerprint; /* NULL, or the pool's */
};
HC_API int hc_reserve(hc_pool *pool, const struct hc_reserve_req *req, hc_page_t *pages, uint8_t *skip);

/* Host locks: hold a READY page across scheduling steps, with no device
 * copy in flight.  A locked page is never evicted or freed. */
HC_API int hc_page_lock(hc_pool *pool, hc_page_t page);
HC_API int hc_page_unlock(hc_pool *pool, hc_page_t page);

/*
 * Engines and tickets.  Each rank of an engine joins it once after attach;
 * tickets then give every rank of the engine the same answer with no
 * message between them.  A ticket is named by (engine, request id, step).
 */
#define HC_ENGINE_ID_MAX   65535
#define HC_TP_MAX          32
#define HC_REQUEST_ID_MAX  47 /* bytes of a request id, without the NUL */
#define HC_QUOTA_UNLIMITED UINT32_MAX

struct hc_engine_spec {
	uint32_t size;              /* sizeof(struct hc_engine_spec) */
	uint32_t engine_id;         /* 0..HC_ENGINE_ID_MAX, the same in every rank of the engine */
	uint32_t tp_size;           /* 1..HC_TP_MAX */
	uint32_t tp_rank;           /* 0..tp_size-1 */
	uint32_t quota_pages;       /* pages each rank may hold pinned, locked or reserved;
				     * HC_QUOTA_UNLIMITED for no limit; 0 is an error */
	uint32_t ticket_timeout_ms; /* unclaimed shares expire after this; 0: 10000 */
};
HC_API int hc_engine_join(hc_pool *pool, const struct hc_engine_spec *spec);
HC_API int hc_engine_leave(hc_pool *pool);

struct hc_ticket_name {
	uint32_t size;          /* sizeof(struct hc_ticket_name) */
	const char *request_id; /* 1..HC_REQUEST_ID_MAX bytes, no NUL inside */
	uint32_t step;          /* chunk or attempt number: each lookup of a request is its own ticket */
};

/* What a rank holds of one ticket; private to the rank, released once.
 * The caller sets size; the library fills the rest. */
typedef struct hc_ticket {
	uint32_t size;       /* sizeof(hc_ticket) */
	uint32_t index, gen; /* the ticket record and its life */
	uint32_t kind;       /* 1 lookup, 2 reserve */
	uint32_t n;          /* entries of the answer: the hit length, or nkeys for a reservation */
	uint32_t held;       /* pages this rank holds under the ticket */
	int first;           /* 1 if this rank did the work */
	int released;
	hc_page_t *pages; /* the caller's array, as filled */
} hc_ticket;

HC_API int hc_ticket_lookup(hc_pool *pool, const struct hc_ticket_name *name, const struct hc_lookup_req *req,
			    hc_page_t *pages, hc_ticket *t);
HC_API int hc_ticket_reserve(hc_pool *pool, const struct hc_ticket_name *name, const struct hc_reserve_req *req,
			     hc_page_t *pages, uint8_t *skip, hc_ticket *t);
HC_API int hc_ticket_release(hc_pool *pool, hc_ticket *t);

/* Eviction (cache mode): only keyed pages, never a held one. */
HC_API int hc_evict(hc_pool *pool, unsigned n);                          /* by policy; the count evicted */
HC_API int hc_evict_key(hc_pool *pool, const uint8_t key[HC_KEY_BYTES]); /* 1, or 0 if absent */
/* Free every READY page, keyed or not; -EBUSY if any rank or ticket holds anything. */
HC_API int hc_pool_clear(hc_pool *pool);

/* One page, as inspection tools see it. */
struct hc_page_info {
	uint32_t id, gen;
	enum hc_page_state state;
	uint32_t owner, aux, presence;
	int keyed; /* in the key index */
	uint8_t key[HC_KEY_BYTES];
	uint32_t depth;
	uint64_t stamp;                /* last use (LRU) or reference bit (CLOCK) */
	uint32_t pins, locks, tickets; /* holds, summed over ranks and tickets */
};
HC_API int hc_page_info(const hc_pool *pool, uint32_t page_id, struct hc_page_info *out, size_t size);

/*
 * Counters, declared once (memcached's way): X(name, help).  Each rank
 * counts in its own row; hc_pool_stats sums the rows and adds gauges.
 */
#define HC_COUNTERS(X)                                                                                                 \
	X(lookups, "prefix lookups")                                                                                   \
	X(lookup_keys, "keys asked by prefix lookups")                                                                 \
	X(hits, "keys found by prefix lookups (hit lengths summed)")                                                   \
	X(pins, "pins taken")                                                                                          \
	X(locks, "host locks taken")                                                                                   \
	X(allocs, "pages allocated")                                                                                   \
	X(alloc_failed, "allocations that failed for want of pages")                                                   \
	X(reserves, "pages reserved by key")                                                                           \
	X(reserve_skips, "keys skipped by reservations (already READY or reserved)")                                   \
	X(evictions, "pages evicted")                                                                                  \
	X(frees, "pages freed")                                                                                        \
	X(tickets_opened, "tickets opened (first rank)")                                                               \
	X(tickets_joined, "ticket shares claimed by later ranks")                                                      \
	X(tickets_expired, "tickets whose unclaimed shares expired")                                                   \
	X(recoveries, "dead rank slots recovered")                                                                     \
	X(quarantines, "pages put in quarantine")                                                                      \
	X(index_rebuilds, "index stripes rebuilt after a writer died")                                                 \
	X(service_requests, "requests the service took off the rings")                                                 \
	X(service_stale, "requests or completions of rank slots whose owner had gone")                                 \
	X(service_bad, "requests refused as malformed or for want of memory")                                          \
	X(service_cq_dropped, "completions dropped on a full completion ring")                                         \
	X(service_cancelled, "requests cancelled by their rank (hc_req_cancel)")                                       \
	X(req_done, "backups and prefetches done whole, and existence queries answered")                               \
	X(req_partial, "backups and prefetches that did only a prefix of their pages")                                 \
	X(req_timedout, "requests failed by a backend deadline")                                                       \
	X(req_failed, "requests failed otherwise (no backend, no memory, no space, a backend error)")                  \
	X(l3_exists_keys, "keys asked of L3 by existence queries and prefetches")                                      \
	X(l3_exists_hits, "keys found in L3 by existence queries (prefix lengths summed)")                             \
	X(l3_backup_pages, "pages written to L3")                                                                      \
	X(l3_backup_bytes, "envelope bytes written to L3")                                                             \
	X(l3_backup_skips, "pages not written: in L3 already, or evicted since the write policy picked them")          \
	X(l3_backup_failed, "backups cut short by a failed write, and write-policy pages that failed")                 \
	X(l3_writer_pages, "pages the write policy sent to L3 on its own")                                             \
	X(l3_prefetch_reqs, "prefetch requests")                                                                       \
	X(l3_prefetch_merged, "prefetch requests merged into one of the same ticket")                                  \
	X(l3_prefetch_keys, "keys asked by prefetches")                                                                \
	X(l3_prefetch_shared, "prefetch keys left to another prefetch reading them")                                   \
	X(l3_prefetch_pages, "pages read from L3 and made READY")                                                      \
	X(l3_prefetch_bytes, "envelope bytes read from L3")                                                            \
	X(l3_prefetch_failed, "prefetches cut short by a failed or missing read")                                      \
	X(l3_prefetch_corrupt, "prefetches cut short by an object that failed its checks")                             \
	X(l3_prefetch_nospace, "prefetches that could not reserve their pages")                                        \
	X(stage_grants, "buffer_only: write grants given")                                                             \
	X(stage_grant_pages, "buffer_only: pages granted to writes, summed over grants")                               \
	X(stage_parked_reads, "buffer_only: prefetches that waited for read staging")                                  \
	X(stage_parked_writes, "buffer_only: write grants that waited for the write window")                           \
	X(stage_dropped, "buffer_only: write grants dropped after waiting past write_park_ms")                         \
	X(stage_released, "buffer_only: staging pages freed once their transfer ended")                                \
	X(stage_expired, "buffer_only: grants and prefetches released for their rank (dead, or past stage_hold_ms)")   \
	X(l3_prefetch_helped, "parts of long prefetches read by an idle worker helping the one that runs it")          \
	X(l3_forgotten, "pages marked in L3 whose object L3 said it no longer had: dirty again")                       \
	X(l3_backup_puts, "backend put calls made by backups (small backups queued together share one)")               \
	X(l3_backup_failed_nospace, "page writes to L3 that failed for want of space (ENOSPC, EDQUOT, EFBIG)")         \
	X(l3_backup_failed_access, "page writes to L3 refused access (EACCES, EPERM, EROFS)")                          \
	X(l3_backup_failed_io, "page writes to L3 that failed with an I/O error (EIO)")                                \
	X(l3_backup_failed_other, "page writes to L3 that failed otherwise (the log names the error)")                 \
	X(l3_prefetch_forged, "prefetches cut short by an object whose MAC was wrong or missing (mac_key_file)")

enum hc_counter {
#define HC_X_ENUM(name, help) HC_CTR_##name,
	HC_COUNTERS(HC_X_ENUM)
#undef HC_X_ENUM
		HC_CTR__COUNT
};
/* Room for counters in hc_stats: a new counter is appended to HC_COUNTERS
 * and changes no layout. */
#define HC_CTR_MAX 128

/* Latency histograms of the service's requests by kind, from the service
 * taking a request off its rank's ring to posting its answer: X(name, help). */
#define HC_HISTS(X)                                                                                                    \
	X(exists, "existence queries")                                                                                 \
	X(backup, "backups")                                                                                           \
	X(prefetch, "prefetches")

enum hc_hist_kind {
#define HC_X_ENUM(name, help) HC_HIST_##name,
	HC_HISTS(HC_X_ENUM)
#undef HC_X_ENUM
		HC_HIST__COUNT
};
#define HC_HIST_MAX 8 /* room for histograms in hc_stats */

/* Bucket i counts latencies below hc_hist_bound_us(i) (16 us << i, up to
 * 2^26 us, 67 s) and at or above the bound before it; the last one,
 * everything slower.  max bounds what the last bucket holds. */
#define HC_HIST_BUCKETS 24
struct hc_hist {
	uint64_t bucket[HC_HIST_BUCKETS];
	uint64_t count;
	union {
		uint64_t sum_us; /* latency histograms: microseconds, summed */
		uint64_t sum;    /* token histograms: tokens, summed */
	};
	uint64_t max; /* the largest value counted, in the unit of sum */
};

/* Tokens per request by the tier that served them, X(name, help); the
 * buckets are hc_hist_bound_us's bounds, read as tokens. */
#define HC_TIERS(X)                                                                                                    \
	X(l2, "tokens a prefix lookup found READY in the pool (its hit), per lookup")                                  \
	X(l3, "tokens a prefetch request's own reads brought from L3, per request")

enum hc_tier {
#define HC_X_ENUM(name, help) HC_TIER_##name,
	HC_TIERS(HC_X_ENUM)
#undef HC_X_ENUM
		HC_TIER__COUNT
};
#define HC_TIER_MAX 4 /* room for tiers in hc_stats */

/* The pool's figures (hc_pool_stats).  The arrays have room to spare
 * (HC_*_MAX), so that a new counter, histogram or tier is no layout
 * change; entries past the library's own counts are zero. */
struct hc_stats {
	uint64_t pages[HC_PAGE_STATES_MAX]; /* by enum hc_page_state */
	uint64_t keyed;                     /* pages in the key index */
	uint64_t pinned_pages, pin_count, locked_pages, lock_count, ticket_pages;
	uint32_t live_ranks, engines, open_tickets;
	/* The service's, while one serves (else 0): transfer jobs waiting for
	 * a worker and running; buffer_only staging, and requests parked. */
	uint32_t svc_jobs_queued, svc_jobs_running;
	uint32_t stage_read_pages, stage_write_pages, stage_parked_reads, stage_parked_writes;
	uint64_t counter[HC_CTR_MAX];       /* by enum hc_counter */
	struct hc_hist hist[HC_HIST_MAX];   /* by enum hc_hist_kind */
	struct hc_hist tokens[HC_TIER_MAX]; /* by enum hc_tier */
};
/* size: the caller's sizeof *out. */
HC_API int hc_pool_stats(hc_pool *pool, struct hc_stats *out, size_t size);
HC_API const char *hc_counter_name(unsigned i); /* exception: NULL past HC_CTR__COUNT */
HC_API const char *hc_counter_help(unsigned i); /* exception: NULL past HC_CTR__COUNT */
/* Exceptions: a histogram's name and help (NULL past HC_HIST__COUNT);
 * bucket i's upper bound in microseconds (UINT64_MAX for the last). */
HC_API const char *hc_hist_name(unsigned i);
HC_API const char *hc_hist_help(unsigned i);
HC_API uint64_t hc_hist_bound_us(unsigned bucket);
/* Exceptions: a tier's name and help (NULL past HC_TIER__COUNT). */
HC_API const char *hc_tier_name(unsigned i);
HC_API const char *hc_tier_help(unsigned i);

/* Every invariant across structures; report() gets one line per violation.
 * Returns the count of violations, or a negative errno. */
#define HC_CHECK_QUIESCENT 0x1u /* nothing is mid-operation: transient states count too */
HC_API int hc_pool_check(hc_pool *pool, unsigned flags, void (*report)(void *arg, const char *line), void *arg);

/* What hc_pool_repair fixed, after what recovery undid. */
struct hc_repair_report {
	struct hc_recovery_report recovery;
	uint32_t bad_words;     /* page words that made no sense (state, owner, aux): quarantined or cleared */
	uint32_t holds_cleared; /* hold counts left in the columns of free slots, cleared */
	uint32_t damaged;       /* READY pages whose entry fails its check, freed */
	uint32_t lost;          /* READY pages that no key finds and no live rank owns, freed */
	uint32_t duplicates;    /* keyed pages whose key a live page already has, freed */
	uint32_t index_bad;     /* index entries that named no page of their key, dropped */
	uint32_t index_missing; /* keyed live pages the index did not find, put back */
	uint32_t tickets_ended; /* tickets of gone engines, or damaged, ended and their holds dropped */
	uint32_t ticket_bits;   /* ticket holds on pages no ticket names, dropped */
	uint32_t unrepaired;    /* violations the check still finds afterwards */
	uint32_t slot_locks;    /* HC_CHECK_QUIESCENT only: free slots' mutexes that no rank held
				 * (a scribbled lock word) or that were unusable, made usable */
};
/*
 * Fix what hc_pool_check finds and recovery cannot: scribbled or lost
 * pages, a damaged index, tickets of gone engines, stray holds.  Runs
 * recovery first; needs an attach with a rank slot.  Safe while ranks run:
 * nothing a live rank holds is freed.  report() gets a line per fix and one
 * per violation left ("cannot repair: ..."); size is sizeof *rep (rep may
 * be NULL); flags (HC_CHECK_QUIESCENT) are those of the check at the end,
 * and with it, the caller says that no other process is attaching,
 * probing, checking or repairing the pool: only then are the mutexes of
 * free slots that no rank holds let go.  Returns the count of violations left
 * (0: all fixed), or a negative errno.
 */
HC_API int hc_pool_repair(hc_pool *pool, unsigned flags, struct hc_repair_report *rep, size_t size,
			  void (*report)(void *arg, const char *line), void *arg);

/*
 * L3 storage: a backend plugin (hicache-backend(7)) behind the library's
 * object format.  Every object is checked (header, fingerprint, key,
 * length, XXH3 checksum) before its bytes count as a hit; a bad one is a
 * miss, counted and logged, never handed back as good.  These calls are
 * synchronous batches (they return when every op of the batch is done) and
 * may run from several threads at once on one store.
 */
typedef struct hc_store hc_store;

struct hc_store_opts {
	uint32_t size;            /* sizeof(struct hc_store_opts) */
	const char *backend_dir;  /* searched after $HICACHE_BACKEND_PATH, before the installed one */
	unsigned queue_depth;     /* ops in flight on this store, all threads; 0: 64; at most 4096 */
	unsigned timeout_ms;      /* an op not done this long after its submit is cancelled; 0: 30000 */
	int retries;              /* transient failures retried per op, with backoff; 0: 2; < 0: none */
	const char *mac_key_file; /* objects MAC'd under this key, and refused without a good MAC; NULL: none */
};

struct hc_store_info {
	char name[64];           /* the plugin's short name */
	char path[4096];         /* the shared object it was loaded from */
	const char *description; /* the plugin's one line; static in the plugin */
	uint64_t caps;           /* HC_BE_CAP_* of <hicache/backend.h> */
	unsigned queue_depth;
};

/* spec: "name[:key=value[,key=value]...]", e.g. "file:dir=/var/cache/hicache,capacity=100G". */
HC_API int hc_store_open(hc_pool *pool, const char *spec, const struct hc_store_opts *opts, hc_store **out);
/* Parse spec, find and load its plugin (backend_dir after
 * $HICACHE_BACKEND_PATH), open an instance with its options and close it:
 * what a service would meet opening it, found before any pool exists. */
HC_API int hc_backend_check(const char *spec, const char *backend_dir);
/* Read the key file a store's mac_key_file names, as hc_store_open would,
 * and forget the key: a refusal found before any pool exists. */
HC_API int hc_mac_key_check(const char *path);
HC_API int hc_store_close(hc_store *st);
HC_API int hc_store_info(const hc_store *st, struct hc_store_info *out, size_t size);
/* READY keyed pages (pinned for the duration): status 0 stored, or -errno.  Returns the count stored. */
HC_API int hc_store_put(hc_store *st, const hc_page_t *pages, unsigned n, int *status);
/* Pages this process reserved by key (hc_reserve): on status 0 the page's
 * components are filled and checked, and the caller commits it; -ENOENT is
 * a miss, -EBADMSG a bad object (also a miss),
 * -EKEYREJECTED one whose MAC (mac_key_file) is wrong or missing (also a
 * miss).  -ETIME: the backend did not
 * complete the read even after a cancel; the store keeps the page and
 * aborts it once the backend lets go, so the caller must leave it alone.
 * Returns the count of hits. */
HC_API int hc_store_get(hc_store *st, const hc_page_t *pages, unsigned n, int *status);
/* status 1 present, 0 absent, or -errno.  Returns the count present. */
HC_API int hc_store_exists(hc_store *st, const hc_key_t *keys, unsigned n, int *status);
/* status 0 deleted, -ENOENT absent, or -errno.  Returns the count deleted. */
HC_API int hc_store_delete(hc_store *st, const hc_key_t *keys, unsigned n, int *status);
/* The library's counters (lib_*), then the plugin's own. */
HC_API int hc_store_stats(hc_store *st, void (*emit)(void *arg, const char *name, uint64_t value), void *arg);
/* The plugin's runtime options: value NULL reads key into out. */
HC_API int hc_store_ctl(hc_store *st, const char *key, const char *value, char *out, size_t outlen);

#ifdef __cplusplus
}
#endif
#endif /* HICACHE_HICACHE_H */
