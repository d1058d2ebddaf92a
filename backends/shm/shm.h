/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shm.h - the shm backend's private declarations: the process-local view of
 * a segment, the instance, and what each source file offers the others.
 *
 *   segment.c  names, geometry, create, validate, map, destroy
 *   meta.c     the metadata lock, index, LRU, allocator, pins, rebuild, check
 *   slots.c    opener slots: claim, holder thread, probe, recovery of the dead
 *   opts.c     option parsing
 *   shm.c      the ABI table and the ops
 */
#ifndef HC_BACKENDS_SHM_SHM_H
#define HC_BACKENDS_SHM_SHM_H

#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <sys/types.h>

#include "../common.h"
#include "layout.h"

#define HC_SHM_NAME_MAX    64
#define HC_SHM_FILE_PREFIX "hicache-l3."
#define HC_SHM_DEFAULT_DIR "/dev/shm"
#define HC_SHM_MIN_BLOCK   UINT32_C(4096)
#define HC_SHM_MAX_BLOCK   (UINT32_C(64) << 20)
#define HC_SHM_MAX_OPENERS 1024
#define HC_SHM_MAX_INDEX   UINT32_C(0x7fffffff) /* objects and blocks: indexes + 1 fit in 31 bits */

/* Creation parameters: what the header's geometry follows from. */
struct hc_shm_geom {
	uint32_t block_bytes;
	uint32_t nblocks;
	uint32_t max_objects;
	uint32_t max_openers;
	uint32_t pins_per_opener;
	uint32_t nbuckets;
	struct hc_shm_region toc[HC_SHM_REG__COUNT];
	uint64_t segment_bytes; /* before any rounding to the file system's block */
};

enum hc_shm_create { HC_SHM_CREATE_AUTO = 0, HC_SHM_CREATE_YES, HC_SHM_CREATE_NO };

struct hc_shm_opts {
	char name[HC_SHM_NAME_MAX + 1];
	char dir[PATH_MAX];
	uint64_t capacity;    /* 0: not given */
	uint32_t block_bytes; /* 0: not given */
	uint32_t max_objects; /* 0: not given */
	uint32_t max_openers; /* 0: not given */
	enum hc_shm_create create;
	int populate;
	int destroy_on_close;
	uint32_t put_wait_ms;
};

/* A mapped, validated segment.  Every pointer and number here comes from
 * the private copy of the header taken at open, never from the segment. */
struct hc_shm_seg {
	uint8_t *base;
	size_t map_bytes;
	struct hc_shm_geom g;
	uint64_t hash_secret;
	unsigned block_shift;
	dev_t dev;
	ino_t ino;
	bool created; /* this open created the segment */
	char path[PATH_MAX];
	struct hc_shm_ctl *ctl;
	struct hc_shm_slot *slots;
	struct hc_shm_pin *pins;
	struct hc_shm_obj *objs;
	uint32_t *buckets;
	struct hc_shm_ext *exts;
	uint8_t *data;
};

#define HC_SHM_OP_COUNTERS(X)                                                                                          \
	X(gets)                                                                                                        \
	X(hits)                                                                                                        \
	X(misses)                                                                                                      \
	X(puts)                                                                                                        \
	X(deletes)                                                                                                     \
	X(exists)                                                                                                      \
	X(evictions)                                                                                                   \
	X(errors)                                                                                                      \
	X(get_bytes)                                                                                                   \
	X(put_bytes)                                                                                                   \
	X(put_waits)

enum hc_shm_counter {
#define HC_SHM_X(n) HC_SHM_CTR_##n,
	HC_SHM_OP_COUNTERS(HC_SHM_X)
#undef HC_SHM_X
		HC_SHM_CTR__COUNT
};

/* One open instance (process-local). */
struct hc_shm {
	struct hc_shm_seg seg;
	struct hc_shm_opts opts;

	/* The opener slot, held by the holder thread (slots.c). */
	int slot;     /* -1 until claimed */
	int claiming; /* the slot the holder thread has locked but not yet claimed, or -1 */
	pthread_t holder;
	sem_t holder_ready; /* posted by the holder: claimed (holder_result >= 0) or failed */
	sem_t holder_stop;  /* posted by close: let go of the slot */
	int holder_result;  /* the slot, or a negative errno */

	/* This slot's free pin entries: a stack, under pin_mu. */
	pthread_mutex_t pin_mu;
	pthread_cond_t pin_cv;
	uint32_t *pin_free;
	unsigned npin_free;

	/* Completions of ops done inside submit, waiting for reap. */
	pthread_mutex_t q_mu;
	pthread_cond_t q_cv;
	struct hc_be_cqe *q;
	unsigned q_cap, q_head, q_count;
	unsigned executing; /* accepted by a submit, not yet queued */

	/* Options ctl may change while ops run. */
	_Atomic uint32_t put_wait_ms;
	_Atomic int destroy_on_close;

	_Atomic unsigned writing; /* puts between reserve and publish (or abort) */

	_Atomic uint64_t ctr[HC_SHM_CTR__COUNT];
	_Atomic unsigned warned; /* HC_SHM_WARN_* bits: causes already logged */
};

#define HC_SHM_WARN_LOCK  0x1u
#define HC_SHM_WARN_NOMEM 0x2u
#define HC_SHM_WARN_CHAIN 0x4u
#define HC_SHM_WARN_SLOT  0x8u

/* shm.c: the host entry() was given; logging through it (at most once per
 * instance and cause for warn_once), and one line into err with -errnum
 * (backends/common.h). */
const struct hc_backend_host *hc__shm_host(void);
#define hc__shm_log(level, ...)           hc_be_log(hc__shm_host(), (level), __VA_ARGS__)
#define hc__shm_warn_once(be, cause, ...) hc_be_warn_once(hc__shm_host(), &(be)->warned, (cause), __VA_ARGS__)
#define hc__shm_fail                      hc_be_fail

/* opts.c */
int hc__shm_opts_parse(const struct hc_be_option *opts, unsigned nopts, struct hc_shm_opts *o, char *err,
		       size_t errlen);
int hc__shm_parse_bool(const char *v);

/* segment.c */
int hc__shm_geom_init(struct hc_shm_geom *g, uint64_t capacity, uint32_t block_bytes, uint32_t max_objects,
		      uint32_t max_openers, char *err, size_t errlen);
int hc__shm_seg_open(struct hc_shm_seg *s, const struct hc_shm_opts *o, char *err, size_t errlen);
void hc__shm_seg_close(struct hc_shm_seg *s);
int hc__shm_seg_unlink(struct hc_shm_seg *s);

/* meta.c: everything named _locked needs ctl->lock. */
int hc__shm_lock(struct hc_shm *be);
void hc__shm_unlock(struct hc_shm *be);
uint32_t hc__shm_lookup_locked(struct hc_shm *be, const uint8_t name[HC_BE_NAME_BYTES]);
int hc__shm_touch_locked(struct hc_shm *be, uint32_t obj);
int hc__shm_remove_locked(struct hc_shm *be, uint32_t obj);
int hc__shm_reserve_locked(struct hc_shm *be, const uint8_t name[HC_BE_NAME_BYTES], uint64_t length, uint32_t *obj,
			   uint32_t *gen, unsigned *evicted);
int hc__shm_publish_locked(struct hc_shm *be, uint32_t obj, uint32_t gen);
void hc__shm_abort_locked(struct hc_shm *be, uint32_t obj, uint32_t gen);
void hc__shm_pin_locked(struct hc_shm *be, uint32_t obj, uint32_t entry);
void hc__shm_unpin_locked(struct hc_shm *be, uint32_t slot, uint32_t entry);
void hc__shm_free_obj_locked(struct hc_shm *be, uint32_t obj);
int hc__shm_rebuild_locked(struct hc_shm *be);
int hc__shm_check_locked(struct hc_shm *be, char *out, size_t outlen);

/* slots.c */
int hc__shm_slot_claim(struct hc_shm *be);
void hc__shm_slot_release(struct hc_shm *be);
unsigned hc__shm_probe_locked(struct hc_shm *be);
void hc__shm_drop_slot_locked(struct hc_shm *be, unsigned slot, bool writes);
unsigned hc__shm_openers(struct hc_shm *be);

/* An extent's first block, bounds-checked: -1 if 'ext' (index + 1) is not a block. */
static inline int64_t hc__shm_block(const struct hc_shm_seg *s, uint32_t ext)
{
	return ext >= 1 && ext <= s->g.nblocks ? (int64_t)ext - 1 : -1;
}

static inline struct hc_shm_obj *hc__shm_obj(const struct hc_shm_seg *s, uint32_t obj)
{
	return obj >= 1 && obj <= s->g.max_objects ? &s->objs[obj - 1] : NULL;
}

static inline void hc__shm_count(struct hc_shm *be, enum hc_shm_counter c, uint64_t n)
{
	atomic_fetch_add_explicit(&be->ctr[c], n, memory_order_relaxed);
}

#endif
