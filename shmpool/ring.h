/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ring.h - the pieces of the per-rank request path (doc/design.md, "Rings
 * and requests" and "Memory and page faults"), in shared memory between two processes that trust each other
 * with nothing: a single-producer/single-consumer ring of fixed-size
 * entries (io_uring's submission and completion queues), a doorbell that
 * a consumer sleeps on after a short spin, and the producer's allocator
 * for an argument area (key lists that do not fit an entry).
 *
 * Notes on synchronization (struct hc_ring, shared):
 * - tail: written only by the producer, with release after the entries
 *   below it; read by the consumer with acquire (pairs with it).
 * - head: written only by the consumer, with release once it has copied
 *   every entry below it (and the argument bytes they name); read by the
 *   producer with acquire before it reuses those slots.
 * - dropped: written only by the producer: entries it could not post
 *   because the ring was full (a completion ring never waits for its
 *   reader: a dead or slow rank cannot stall the service).
 * - nentries, entry_bytes: written at init; each side checks them against
 *   what it expects and keeps private copies (hc__ring).
 * - Either side may be another build, die at any instruction or scribble:
 *   an index the other side owns is checked at every read, and a ring whose
 *   indices say more than nentries are in it is -EPROTO, never trusted.
 *
 * struct hc_bell, shared: seq is bumped (release) by anyone who rings it
 * and is the futex word; sleepers counts those between announcing they
 * may sleep and waking.  A sleeper that dies counted leaves sleepers high:
 * ringers then always make the wake syscall (slower, never wrong).
 */
#ifndef HC_SHMPOOL_RING_H
#define HC_SHMPOOL_RING_H

#include <assert.h>
#include <stdatomic.h>
#include <stdint.h>

#define HC_RING_MAX_ENTRIES (1u << 20)

struct hc_ring {
	_Atomic uint32_t tail; /* producer's line */
	_Atomic uint32_t dropped;
	uint8_t pad0[56];
	_Atomic uint32_t head; /* consumer's line */
	uint8_t pad1[60];
	uint32_t nentries;    /* a power of two */
	uint32_t entry_bytes; /* a multiple of 8 */
	uint8_t pad2[56];
	/* entries follow, at offset 192 */
};
static_assert(sizeof(struct hc_ring) == 192, "ring header: three cache lines");

struct hc_bell {
	_Atomic uint32_t seq; /* the futex word */
	_Atomic uint32_t sleepers;
	uint8_t pad[56];
};
static_assert(sizeof(struct hc_bell) == 64, "a bell is one cache line");

/* Bytes a ring of n entries of esize bytes takes. */
static inline uint64_t hc__ring_bytes(uint32_t n, uint32_t esize)
{
	return sizeof(struct hc_ring) + (uint64_t)n * esize;
}

/* One side's private view; cached_* spare a shared read per entry. */
struct hc__ring {
	struct hc_ring *r;
	uint8_t *ent;
	uint32_t n, mask, esize;
	uint32_t mine;   /* our index: tail for a producer, head for a consumer */
	uint32_t theirs; /* the other's, as last read */
};

/* Lay out a ring in mem (zeroed indices); once, by whoever creates it. */
int hc__ring_init(void *mem, uint64_t bytes, uint32_t n, uint32_t esize);
/* Take a view of a ring another process may have laid out, as its
 * producer or its consumer, going on from the indices it holds: -EPROTO
 * when its geometry is not the one expected, does not fit in bytes, or its
 * indices say more than n entries are in it. */
enum hc_ring_role { HC_RING_PRODUCER, HC_RING_CONSUMER };
int hc__ring_attach(struct hc__ring *v, void *mem, uint64_t bytes, uint32_t n, uint32_t esize, enum hc_ring_role role);

/* Read the other side's index again (room and avail do only when they
 * must): 0, or -EPROTO. */
int hc__ring_refresh(struct hc__ring *v, enum hc_ring_role role);

/* Producer: room for up to want entries; returns how many (0: full), or
 * -EPROTO.  Fill hc__ring_slot(v, 0 .. k-1), then post them at once. */
int hc__ring_room(struct hc__ring *v, uint32_t want);
static inline void *hc__ring_slot(struct hc__ring *v, uint32_t i)
{
	return v->ent + (size_t)((v->mine + i) & v->mask) * v->esize;
}
void hc__ring_post(struct hc__ring *v, uint32_t k);
/* Producer: count an entry that could not be posted (a full completion ring). */
void hc__ring_drop(struct hc__ring *v);

/* Consumer: entries waiting, up to want (0: none), or -EPROTO.  Copy out
 * hc__ring_peek(v, 0 .. k-1), then release them. */
int hc__ring_avail(struct hc__ring *v, uint32_t want);
static inline const void *hc__ring_peek(struct hc__ring *v, uint32_t i)
{
	return v->ent + (size_t)((v->mine + i) & v->mask) * v->esize;
}
void hc__ring_release(struct hc__ring *v, uint32_t k);
/* Entries the producer dropped since the ring was laid out. */
uint32_t hc__ring_dropped(const struct hc__ring *v);

/* Doorbell.  ring: after publishing, wake whoever sleeps (a syscall only
 * when someone may).  wait: return 0 once ready(arg) is true, spinning
 * for spin_ns first, then sleeping on the bell; -ETIMEDOUT after
 * timeout_ms (< 0: never).  ready() must read what the ringer published
 * before it rang. */
void hc__bell_init(struct hc_bell *b);
void hc__bell_ring(struct hc_bell *b);
int hc__bell_wait(struct hc_bell *b, int (*ready)(void *arg), void *arg, uint64_t spin_ns, int timeout_ms);

/*
 * The producer's allocator for an argument area of size bytes, used in
 * order with a ring: each posted entry may own one contiguous stretch,
 * freed when the consumer releases that entry.  Private to the producer
 * (the consumer only reads the bytes an entry names, before releasing it).
 */
struct hc__argbuf {
	uint64_t size;
	uint64_t pos;      /* bytes handed out since init, wasted tails included */
	uint64_t free_pos; /* everything below it is free again */
	uint64_t *end;     /* [ring entries]: pos after each entry's stretch */
	uint32_t mask;
	uint32_t freed; /* ring entries whose stretch is known free */
};
int hc__argbuf_init(struct hc__argbuf *a, uint64_t size, uint32_t ring_entries);
void hc__argbuf_fini(struct hc__argbuf *a);
/* An offset of len contiguous bytes for the entry the producer posts next
 * as ring index idx (its tail), given the consumer's head as last read
 * (v->theirs; on -ENOSPC, hc__ring_refresh it before trying again);
 * -ENOSPC while the area is full, -E2BIG when len could never fit.  Call
 * it for every entry posted, with len 0 for none. */
int64_t hc__argbuf_alloc(struct hc__argbuf *a, uint64_t len, uint32_t idx, uint32_t head);

#endif /* HC_SHMPOOL_RING_H */
