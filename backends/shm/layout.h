/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layout.h - the bytes of a shm L3 segment.  Everything here is shared with
 * other processes, which may be of another build, may die at any
 * instruction, and may scribble.  So: fixed-size types, offsets and indexes
 * never pointers, static_asserts on every size and offset that matters.
 * Indexes in shared memory are stored plus one, so that zero (what a fresh
 * tmpfs file holds) means "none".
 *
 *   0              header (struct hc_shm_hdr, one 4 KiB block, immutable)
 *   toc[CTL]       the metadata lock, list heads, gauges, counters
 *   toc[SLOTS]     opener slots (struct hc_shm_slot [max_openers])
 *   toc[PINS]      pin entries (struct hc_shm_pin [max_openers][pins_per_opener])
 *   toc[OBJS]      object table (struct hc_shm_obj [max_objects]): the truth
 *   toc[BUCKETS]   hash index heads (uint32 [nbuckets]), rebuilt from OBJS
 *   toc[EXTS]      extent records (struct hc_shm_ext [nblocks])
 *   toc[DATA]      nblocks * block_bytes, 2 MiB aligned
 *
 * VERSION POLICY.  version_major changes when any field or region changes
 * meaning or place; a binary opens only segments of its own major.
 * version_minor grows when something is appended in reserved bytes that
 * older binaries may ignore.
 */
#ifndef HC_BACKENDS_SHM_LAYOUT_H
#define HC_BACKENDS_SHM_LAYOUT_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <hicache/backend.h>

#define HC_SHM_MAGIC         "HCSHML3" /* 8 bytes with its NUL */
#define HC_SHM_VERSION_MAJOR 1
#define HC_SHM_VERSION_MINOR 0
#define HC_SHM_HDR_BYTES     4096
#define HC_SHM_DATA_ALIGN    (UINT64_C(2) << 20) /* huge-page friendly */
#define HC_SHM_META_ALIGN    64
#define HC_SHM_TOC_SLOTS     8
#define HC_SHM_PINS          256 /* pin entries per opener: GETs one instance copies at once */

enum hc_shm_region_id {
	HC_SHM_REG_CTL = 0,
	HC_SHM_REG_SLOTS,
	HC_SHM_REG_PINS,
	HC_SHM_REG_OBJS,
	HC_SHM_REG_BUCKETS,
	HC_SHM_REG_EXTS,
	HC_SHM_REG_DATA, /* always last */
	HC_SHM_REG__COUNT
};
static_assert(HC_SHM_REG__COUNT <= HC_SHM_TOC_SLOTS, "toc has room");

enum hc_shm_seg_state {
	HC_SHM_SEG_CREATING = 0, /* only ever under a temporary name */
	HC_SHM_SEG_READY = 1,
};

struct hc_shm_region {
	uint64_t off;
	uint64_t bytes;
};

/*
 * Notes on synchronization: every field up to meta_sum is written once by
 * the creator before the segment gets its public name (linkat(2)) and never
 * again; meta_sum is FNV-1a 64 over those bytes, checked by every open, which
 * then works from a private copy.  'state' is release-stored READY last.
 */
struct hc_shm_hdr {
	char magic[8];
	uint32_t version_major;
	uint32_t version_minor;
	uint32_t hdr_bytes;      /* sizeof(struct hc_shm_hdr) */
	uint32_t block_bytes;    /* a power of two, 4 KiB .. 64 MiB */
	uint64_t segment_bytes;  /* the file's size */
	uint64_t capacity_bytes; /* nblocks * block_bytes */
	uint32_t nblocks;
	uint32_t max_objects;
	uint32_t max_openers;
	uint32_t pins_per_opener;
	uint32_t nbuckets; /* a power of two >= max_objects */
	uint32_t creator_pid;
	uint32_t creator_uid;
	uint32_t reserved0;
	uint64_t created_unix_ns;
	uint64_t hash_secret; /* random per segment */
	struct hc_shm_region toc[HC_SHM_TOC_SLOTS];
	uint64_t meta_sum;
	_Atomic uint32_t state; /* enum hc_shm_seg_state */
	uint32_t reserved1;
};
static_assert(offsetof(struct hc_shm_hdr, version_major) == 8, "header layout");
static_assert(offsetof(struct hc_shm_hdr, nblocks) == 40, "header layout");
static_assert(offsetof(struct hc_shm_hdr, created_unix_ns) == 72, "header layout");
static_assert(offsetof(struct hc_shm_hdr, toc) == 88, "header layout");
static_assert(offsetof(struct hc_shm_hdr, meta_sum) == 216, "header layout");
static_assert(offsetof(struct hc_shm_hdr, state) == 224, "header layout");
static_assert(sizeof(struct hc_shm_hdr) == 232, "header size");

/* A robust mutex padded to a cache line (the mutex size is the C library's). */
union hc_shm_mutex {
	pthread_mutex_t m;
	uint8_t pad[64];
};
static_assert(sizeof(pthread_mutex_t) <= 64, "a mutex fits its cache line");

/*
 * Notes on synchronization: 'lock' is the one metadata lock, a robust,
 * process-shared mutex, held for the bookkeeping of an op (never across a
 * data copy).  Every plain field below, and every field of the pin entries,
 * the object table, the buckets and the extent records, is read and written
 * only under it.  A process that gets EOWNERDEAD sets 'dirty', marks the
 * mutex consistent and rebuilds all of it from the object table (meta.c);
 * 'dirty' stays set until a rebuild completes, so a rebuilder that dies (or
 * cannot allocate) leaves the job to the next locker.  The _Atomic counters
 * are relaxed adds from any process, with or without the lock.
 */
struct hc_shm_ctl {
	union hc_shm_mutex lock;
	uint32_t dirty;              /* 1: the structures below must be rebuilt before use */
	uint32_t free_obj;           /* head of FREE object entries, chained by hnext */
	uint32_t lru_head;           /* most recently used LIVE object */
	uint32_t lru_tail;           /* least recently used LIVE object */
	uint32_t free_ext;           /* head of the free extents, chained by ext.next */
	uint32_t nobjects;           /* LIVE objects */
	uint64_t free_blocks;        /* blocks on the free extent list */
	uint64_t live_bytes;         /* sum of the lengths of LIVE objects */
	uint64_t clock;              /* last LRU stamp / publish sequence handed out */
	uint64_t live_blocks;        /* blocks of LIVE objects */
	uint64_t pinned_blocks;      /* blocks of LIVE objects with pins (not evictable) */
	_Atomic uint64_t opens;      /* instances opened, ever */
	_Atomic uint64_t recoveries; /* dead openers whose holds were undone */
	_Atomic uint64_t rebuilds;   /* metadata rebuilds (a death under the lock, or damage found) */
	_Atomic uint64_t evictions;  /* by every opener */
	uint8_t reserved[48];
};
static_assert(offsetof(struct hc_shm_ctl, dirty) == 64, "ctl layout");
static_assert(offsetof(struct hc_shm_ctl, opens) == 128, "ctl layout");
static_assert(offsetof(struct hc_shm_ctl, free_blocks) == 88, "ctl layout");
static_assert(sizeof(struct hc_shm_ctl) == 208, "ctl size");

/*
 * Opener slot.  Notes on synchronization: 'lock' is a robust, process-shared
 * mutex that the owning instance holds from open to close, from a holder
 * thread that lives as long as the instance (a robust mutex belongs to a
 * thread, and the opening thread may exit first).  Another process takes it
 * only by trylock: EBUSY means alive (a stopped process is alive), EOWNERDEAD
 * is the one proof of death; whoever gets it undoes the dead opener's holds
 * under ctl->lock (slots.c), stores FREE and marks the mutex consistent.  The
 * owner stores 'state' LIVE (release) after the other fields, and FREE before
 * unlocking at close; pid, tid and epoch are for display only.
 */
enum hc_shm_slot_state { HC_SHM_SLOT_FREE = 0, HC_SHM_SLOT_LIVE = 1 };

struct hc_shm_slot {
	union hc_shm_mutex lock;
	_Atomic uint32_t state;
	_Atomic uint32_t pid;
	_Atomic uint32_t tid;
	_Atomic uint32_t epoch; /* opens of this slot, ever */
	_Atomic uint64_t opened_unix_ns;
	uint8_t reserved[40];
};
static_assert(offsetof(struct hc_shm_slot, state) == 64, "slot layout");
static_assert(sizeof(struct hc_shm_slot) == 128, "slot size");

/*
 * Pin entry: an opener's hold on a LIVE or DEAD object, for the length of
 * one GET's copy.  Notes on synchronization: written under ctl->lock, by the
 * slot's owner (pin, unpin), by the recoverer of a dead slot (cleared), and
 * by a rebuild (cleared if it matches no object).  obj->pins is the number
 * of entries of all slots whose {obj, gen} match the object.
 */
struct hc_shm_pin {
	uint32_t obj; /* object index + 1, 0: unused */
	uint32_t gen; /* the object's gen when pinned */
};
static_assert(sizeof(struct hc_shm_pin) == 8, "pin size");

/*
 * Object entry.  The object table is the truth: a rebuild makes the
 * buckets, the LRU list, the free lists and the gauges again from it.
 *
 *   FREE     on the free-object list (hnext), no blocks
 *   WRITING  blocks allocated to 'owner' (a slot), which copies into them
 *            outside the lock; in no index, invisible to readers
 *   LIVE     in the hash index (hnext) and the LRU list (lprev/lnext)
 *   DEAD     replaced, deleted or evicted while pinned: in no index; the
 *            last unpin frees it
 *
 * Notes on synchronization: every field is written under ctl->lock.  The
 * bytes of the object's blocks are written by the WRITING owner outside the
 * lock, published by the lock's release when it stores LIVE; they are read
 * by pinners outside the lock, and never change while a pin is held.
 */
enum hc_shm_obj_state {
	HC_SHM_OBJ_FREE = 0,
	HC_SHM_OBJ_WRITING = 1,
	HC_SHM_OBJ_LIVE = 2,
	HC_SHM_OBJ_DEAD = 3,
};

struct hc_shm_obj {
	uint8_t name[HC_BE_NAME_BYTES];
	uint64_t length; /* bytes, >= 1 */
	uint64_t stamp;  /* ctl->clock at the last use: the LRU order */
	uint64_t seq;    /* ctl->clock at publish: the newest of two same names wins */
	uint32_t gen;    /* bumped whenever the entry is freed */
	uint32_t state;  /* enum hc_shm_obj_state */
	uint32_t owner;  /* WRITING: the writer's slot */
	uint32_t pins;
	uint32_t hnext;    /* LIVE: next in the bucket; FREE: next free entry */
	uint32_t lprev;    /* LIVE: toward the LRU head (newer) */
	uint32_t lnext;    /* LIVE: toward the LRU tail (older) */
	uint32_t ext_head; /* first extent: block index + 1 */
	uint32_t ext_tail; /* last extent: block index + 1 */
	uint32_t nblocks;  /* ceil(length / block_bytes) once allocated */
};
static_assert(offsetof(struct hc_shm_obj, length) == 64, "object layout");
static_assert(offsetof(struct hc_shm_obj, gen) == 88, "object layout");
static_assert(sizeof(struct hc_shm_obj) == 128, "object size");

/*
 * Extent record, one per block, meaningful at the first block of an extent
 * only: 'len' blocks from here are one run, 'next' is the next extent of the
 * same chain (an object's, or the free list).  Written under ctl->lock; a
 * pinned object's chain is read outside it (it cannot change while pinned).
 */
struct hc_shm_ext {
	uint32_t next; /* block index + 1, 0: end of chain */
	uint32_t len;
};
static_assert(sizeof(struct hc_shm_ext) == 8, "extent size");

#endif
