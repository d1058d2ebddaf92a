/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hicache.h - client API of libhicache: the shared-memory page-envelope pool.
 *
 * Conventions (as liburing): every function returns 0, a count, or a
 * negative errno, and never sets errno.  On failure the calling thread's
 * hc_last_error() holds one line saying what failed, on what, and what to do.
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

#define HC_NAME_MAX        64   /* pool name length, without the NUL */
#define HC_MODEL_ID_MAX    127  /* model id length, without the NUL */
#define HC_COMP_NAME_MAX   31   /* component name length, without the NUL */
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
	const char *name;          /* [A-Za-z0-9_.-], 1..HC_COMP_NAME_MAX */
	enum hc_dtype dtype;
	enum hc_comp_kind kind;
	enum hc_sharding sharding;
	uint32_t kv_heads;         /* HC_COMP_KV: total KV heads of the model */
	uint32_t head_bytes;       /* HC_COMP_KV: bytes of one head of one token */
	uint64_t bytes_per_layer;  /* HC_COMP_STATE: bytes per layer, all groups */
	uint32_t layers;
};

enum hc_numa_mode {
	HC_NUMA_DEFAULT = 0,    /* the kernel's first-touch policy */
	HC_NUMA_BIND = 1,       /* bind to numa_nodes */
	HC_NUMA_INTERLEAVE = 2, /* interleave across numa_nodes (NULL: all) */
};

struct hc_pool_spec {
	const char *name;        /* pool name; backing /dev/shm/hicache.<name> */
	const char *dir;         /* NULL: /dev/shm; else a (huge-page) tmpfs or hugetlbfs */
	const char *model_id;
	uint32_t page_tokens;
	uint32_t tp_size;        /* the TP size the pool is laid out for */
	uint32_t head_groups;    /* 0: the largest g <= min(tp_size, 31) that divides tp_size
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
	const char *numa_nodes;  /* libnuma node string, e.g. "0" or "0-1" */
	unsigned flags;          /* HC_CREATE_* */
};

#define HC_CREATE_NO_POPULATE 0x1u /* skip MADV_POPULATE_WRITE (tests only) */

typedef struct hc_pool hc_pool;

/*
 * A page handle names one life of a page: its id (low 32 bits) and the
 * generation its allocation gave it (22 bits above).  A handle to a page
 * that has since been freed and reused gets -ESTALE, not someone else's
 * page.
 */
typedef uint64_t hc_page_t;
#define HC_PAGE_ID(p)  ((uint32_t)((p) & 0xffffffffu))
#define HC_PAGE_GEN(p) ((uint32_t)(((p) >> 32) & 0x3fffffu))
#define HC_PAGE_MAKE(id, gen) \
	((hc_page_t)(uint32_t)(id) | ((hc_page_t)((gen) & 0x3fffffu) << 32))

#define HC_ATTACH_ADMIN       0x1u /* no rank slot, no populate: tools */
#define HC_ATTACH_READONLY    0x2u /* map read-only; implies ADMIN; no recovery */
#define HC_ATTACH_NO_RECOVER  0x4u /* skip recovery at attach */
#define HC_ATTACH_NO_POPULATE 0x8u /* skip MADV_POPULATE_WRITE (tests only) */

struct hc_attach_opts {
	const char *dir;  /* NULL: /dev/shm */
	unsigned flags;   /* HC_ATTACH_* */
};

/* What recovery found and undid (hc_pool_recover, hicache-pool repair). */
struct hc_recovery_report {
	uint32_t dead_ranks;        /* slots proven dead by EOWNERDEAD and cleared */
	uint32_t pins_dropped;      /* pin counts of dead ranks set to zero */
	uint32_t quarantined;       /* dead ranks' reservations put in quarantine */
	uint32_t released;          /* quarantined pages whose grace ran out -> FREE */
	uint32_t promoted;          /* fully committed reservations -> READY */
	uint32_t unfreed;           /* dead ranks' half-done frees -> back to READY */
	uint32_t bad_words;         /* page words that made no sense, put in quarantine */
};

enum hc_page_state {
	HC_PAGE_FREE = 0,
	HC_PAGE_RESERVED = 1,
	HC_PAGE_READY = 2,
	HC_PAGE_QUARANTINE = 3,
	HC_PAGE_FREEING = 4,
};

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
	int32_t self_slot;       /* this process's rank slot, or -1 */
	int huge_pages;          /* backing reports huge pages */
};

struct hc_component_info {
	char name[HC_COMP_NAME_MAX + 1];
	enum hc_dtype dtype;
	enum hc_comp_kind kind;
	enum hc_sharding sharding;
	uint32_t kv_heads, head_bytes, layers, groups;
	uint64_t bytes_per_layer;  /* per layer, all groups */
	uint64_t offset;           /* from the start of the envelope */
	uint64_t bytes;            /* whole component */
	uint64_t group_stride;     /* bytes of one group's shard */
	uint64_t layer_stride;     /* bytes of one (group, layer) run */
};

struct hc_rank_info {
	uint32_t slot;
	int live;                /* 1: holds its slot; 0: free */
	uint32_t pid;
	uint32_t epoch;          /* how many times the slot has been claimed */
	uint64_t attached_unix_ns;
	char comm[16];
	uint64_t pins;           /* pin count held, summed over pages */
	uint32_t reserved;       /* pages in RESERVED owned by this slot */
};

/* Errors and logging. */
HC_API const char *hc_version(void);
HC_API const char *hc_last_error(void);
typedef void (*hc_log_fn)(int level, const char *msg, void *arg);
#define HC_LOG_ERR  3
#define HC_LOG_WARN 4
#define HC_LOG_INFO 6
HC_API void hc_set_log(hc_log_fn fn, void *arg); /* NULL: stderr, warnings and errors */
HC_API const char *hc_dtype_name(enum hc_dtype d);
HC_API int hc_dtype_parse(const char *s);        /* enum hc_dtype, or -EINVAL */
HC_API unsigned hc_dtype_size(enum hc_dtype d);  /* bytes, 0 for invalid */
HC_API const char *hc_page_state_name(enum hc_page_state s);

/* Pools. */
HC_API int hc_pool_create(const struct hc_pool_spec *spec);
HC_API int hc_pool_attach(const char *name, const struct hc_attach_opts *opts, hc_pool **out);
HC_API int hc_pool_detach(hc_pool *pool);
HC_API int hc_pool_destroy(const char *name, const char *dir, unsigned flags);
#define HC_DESTROY_FORCE 0x1u /* even with live ranks attached */
HC_API int hc_pool_recover(hc_pool *pool, struct hc_recovery_report *rep);
HC_API int hc_pool_info(const hc_pool *pool, struct hc_pool_info *out);
HC_API int hc_pool_component(const hc_pool *pool, unsigned comp, struct hc_component_info *out);
HC_API int hc_pool_rank(hc_pool *pool, unsigned slot, struct hc_rank_info *out);
HC_API int hc_pool_count_states(const hc_pool *pool, uint64_t counts[5]);
HC_API int hc_pool_name_valid(const char *name);  /* 0 or -EINVAL */

/* Pages. */
HC_API int hc_page_alloc(hc_pool *pool, unsigned n, uint32_t presence, hc_page_t *out);
HC_API int hc_page_addr(const hc_pool *pool, hc_page_t page, unsigned comp, unsigned layer,
		 unsigned group, void **addr, size_t *len);
HC_API void *hc_page_envelope(const hc_pool *pool, hc_page_t page);
HC_API int hc_page_commit(hc_pool *pool, hc_page_t page, uint32_t shards);
HC_API int hc_page_abort(hc_pool *pool, const hc_page_t *pages, unsigned n);
HC_API int hc_page_pin(hc_pool *pool, hc_page_t page);
HC_API int hc_page_unpin(hc_pool *pool, hc_page_t page);
HC_API int hc_page_free(hc_pool *pool, const hc_page_t *pages, unsigned n);
HC_API int hc_page_state(const hc_pool *pool, uint32_t page_id, hc_page_t *handle,
		  uint32_t *owner_slot, uint32_t *fill_or_since);
HC_API int hc_page_presence(const hc_pool *pool, hc_page_t page, uint32_t *presence);
HC_API uint32_t hc_page_needed(const hc_pool *pool, uint32_t presence);

#ifdef __cplusplus
}
#endif
#endif /* HICACHE_HICACHE_H */
