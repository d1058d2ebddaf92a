/* SPDX-License-Identifier: Apache-2.0 */
/* ring.c - SPSC rings, doorbells and argument areas in shared memory (ring.h). */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"
#include "ring.h"

static int geometry_ok(uint32_t n, uint32_t esize, uint64_t bytes)
{
	return n >= 2 && n <= HC_RING_MAX_ENTRIES && !(n & (n - 1)) && esize >= 8 && esize <= 4096 && esize % 8 == 0 &&
	       bytes >= hc__ring_bytes(n, esize);
}

int hc__ring_init(void *mem, uint64_t bytes, uint32_t n, uint32_t esize)
{
	struct hc_ring *r = mem;

	if (!geometry_ok(n, esize, bytes))
		return hc__err(
			EINVAL,
			"ring: %u entries of %u bytes in %llu bytes: give a power of two of 2..%u entries of 8..4096 bytes (multiples of 8) and room for them",
			n, esize, (unsigned long long)bytes, HC_RING_MAX_ENTRIES);
	memset(r, 0, sizeof(*r));
	r->nentries = n;
	r->entry_bytes = esize;
	atomic_store_explicit(&r->tail, 0, memory_order_release);
	atomic_store_explicit(&r->head, 0, memory_order_release);
	return 0;
}

int hc__ring_attach(struct hc__ring *v, void *mem, uint64_t bytes, uint32_t n, uint32_t esize, enum hc_ring_role role)
{
	struct hc_ring *r = mem;
	uint32_t tail, head;

	memset(v, 0, sizeof(*v));
	if (!geometry_ok(n, esize, bytes) || r->nentries != n || r->entry_bytes != esize)
		return hc__err(
			EPROTO,
			"ring: it holds %u entries of %u bytes, %u of %u expected (in %llu bytes): the segment is damaged",
			r->nentries, r->entry_bytes, n, esize, (unsigned long long)bytes);
	tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	head = atomic_load_explicit(&r->head, memory_order_acquire);
	if (tail - head > n)
		return hc__err(EPROTO,
			       "ring: tail %u and head %u say %u entries are in a ring of %u: the segment is damaged",
			       tail, head, tail - head, n);
	v->r = r;
	v->ent = (uint8_t *)mem + sizeof(*r);
	v->n = n;
	v->mask = n - 1;
	v->esize = esize;
	v->mine = role == HC_RING_PRODUCER ? tail : head;
	v->theirs = role == HC_RING_PRODUCER ? head : tail;
	return 0;
}

/*
 * The other side's index is kept (v->theirs) only once it is checked: a
 * refused one kept would make mine - theirs wrap, pass for room or entries
 * on every later call without another read, and a consumer would go round
 * a ring of garbage for ever (a producer, overwrite what is unread).
 */
int hc__ring_room(struct hc__ring *v, uint32_t want)
{
	uint32_t used = v->mine - v->theirs, room;

	if (used > v->n || v->n - used < want) {
		/* Acquire: pairs with the consumer's release of head, so the
		 * slots below it are copied out before we write them again. */
		uint32_t head = atomic_load_explicit(&v->r->head, memory_order_acquire);
		used = v->mine - head;
		if (used > v->n)
			return hc__err(
				EPROTO,
				"ring: the consumer's head (%u) is %u entries behind our tail (%u), more than the %u it holds",
				head, used, v->mine, v->n);
		v->theirs = head;
	}
	room = v->n - used;
	return (int)(room < want ? room : want);
}

int hc__ring_refresh(struct hc__ring *v, enum hc_ring_role role)
{
	_Atomic uint32_t *other = role == HC_RING_PRODUCER ? &v->r->head : &v->r->tail;
	uint32_t t = atomic_load_explicit(other, memory_order_acquire); /* pairs with the other's release */
	uint32_t used = role == HC_RING_PRODUCER ? v->mine - t : t - v->mine;

	if (used > v->n)
		return hc__err(EPROTO,
			       "ring: the %s index (%u) is %u entries from ours (%u), more than the %u it holds",
			       role == HC_RING_PRODUCER ? "consumer's" : "producer's", t, used, v->mine, v->n);
	v->theirs = t;
	return 0;
}

void hc__ring_post(struct hc__ring *v, uint32_t k)
{
	v->mine += k;
	HC_POINT(ring_posted);
	/* Release: the k entries are written before the consumer sees them. */
	atomic_store_explicit(&v->r->tail, v->mine, memory_order_release);
}

void hc__ring_drop(struct hc__ring *v)
{
	atomic_fetch_add_explicit(&v->r->dropped, 1, memory_order_relaxed);
}

int hc__ring_avail(struct hc__ring *v, uint32_t want)
{
	uint32_t have = v->theirs - v->mine;

	if (have > v->n || have < want) {
		/* Acquire: pairs with the producer's release of tail. */
		uint32_t tail = atomic_load_explicit(&v->r->tail, memory_order_acquire);
		have = tail - v->mine;
		if (have > v->n)
			return hc__err(
				EPROTO,
				"ring: the producer's tail (%u) is %u entries past our head (%u), more than the %u it holds",
				tail, have, v->mine, v->n);
		v->theirs = tail;
	}
	return (int)(have < want ? have : want);
}

void hc__ring_release(struct hc__ring *v, uint32_t k)
{
	v->mine += k;
	HC_POINT(ring_consumed);
	/* Release: our copies of the entries are made before the producer reuses them. */
	atomic_store_explicit(&v->r->head, v->mine, memory_order_release);
}

uint32_t hc__ring_dropped(const struct hc__ring *v)
{
	return atomic_load_explicit(&v->r->dropped, memory_order_relaxed);
}

/* ---- doorbell: a shared futex (no FUTEX_PRIVATE_FLAG: two processes) */

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

void hc__bell_init(struct hc_bell *b)
{
	memset(b, 0, sizeof(*b));
}

void hc__bell_ring(struct hc_bell *b)
{
	/* Dekker with the sleeper: our publication, then our read of sleepers;
	 * its sleepers++, then its read of what we published.  seq_cst on both
	 * sides, so at least one of us sees the other. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&b->sleepers, memory_order_seq_cst) == 0)
		return; /* nobody sleeps: no syscall */
	atomic_fetch_add_explicit(&b->seq, 1, memory_order_release);
	futex(&b->seq, FUTEX_WAKE, INT_MAX, NULL);
}

#define BELL_PURE_SPIN_NS 2000u /* spin without yielding this long first */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int hc__bell_wait(struct hc_bell *b, int (*ready)(void *arg), void *arg, uint64_t spin_ns, int timeout_ms)
{
	uint64_t t0 = now_ns(), deadline = timeout_ms < 0 ? UINT64_MAX : t0 + (uint64_t)timeout_ms * 1000000u;

	/* Spin first: a busy peer answers faster than a futex round trip.
	 * After BELL_PURE_SPIN_NS, yield between looks: with few CPUs the peer
	 * we wait for may be queued on ours (the scheduler wakes a task near
	 * its waker), and a spin that never yields keeps it from running for
	 * the whole spin, so every answer would cost spin_ns.  Alone on a CPU,
	 * a yield returns at once and costs one syscall. */
	for (unsigned i = 0, yielding = 0;; i++) {
		if (ready(arg))
			return 0;
		if ((i & 63) == 63 || yielding) {
			uint64_t t = now_ns();
			if (t - t0 >= spin_ns || t >= deadline)
				break;
			yielding = t - t0 >= BELL_PURE_SPIN_NS;
		}
		if (yielding)
			sched_yield();
	}
	for (;;) {
		uint32_t seq = atomic_load_explicit(&b->seq, memory_order_acquire);
		struct timespec ts, *tsp = NULL;
		uint64_t t;
		int r;

		atomic_fetch_add_explicit(&b->sleepers, 1, memory_order_seq_cst);
		r = ready(arg); /* after announcing: a ringer now sees us, or we see its work */
		if (!r) {
			t = now_ns();
			if (t >= deadline) {
				atomic_fetch_sub_explicit(&b->sleepers, 1, memory_order_relaxed);
				return -ETIMEDOUT;
			}
			if (deadline != UINT64_MAX) {
				ts.tv_sec = (time_t)((deadline - t) / 1000000000u);
				ts.tv_nsec = (long)((deadline - t) % 1000000000u);
				tsp = &ts;
			}
			/* Returns at once if seq moved since we read it: no lost wake. */
			futex(&b->seq, FUTEX_WAIT, seq, tsp);
		}
		atomic_fetch_sub_explicit(&b->sleepers, 1, memory_order_relaxed);
		if (r || ready(arg))
			return 0;
	}
}

/* ---- the producer's argument area */

int hc__argbuf_init(struct hc__argbuf *a, uint64_t size, uint32_t ring_entries)
{
	memset(a, 0, sizeof(*a));
	if (!size || !ring_entries || ring_entries & (ring_entries - 1))
		return hc__err(EINVAL, "argument area: %llu bytes for %u ring entries", (unsigned long long)size,
			       ring_entries);
	a->end = calloc(ring_entries, sizeof(*a->end));
	if (!a->end)
		return hc__err(ENOMEM, "argument area: no memory");
	a->size = size;
	a->mask = ring_entries - 1;
	return 0;
}

void hc__argbuf_fini(struct hc__argbuf *a)
{
	free(a->end);
	a->end = NULL;
}

int64_t hc__argbuf_alloc(struct hc__argbuf *a, uint64_t len, uint32_t idx, uint32_t head)
{
	uint64_t off, skip = 0;

	if ((uint32_t)(idx - head) >= a->mask + 1u || (uint32_t)(head - a->freed) > a->mask + 1u)
		return hc__err(
			EPROTO,
			"argument area: entry %u with head %u and %u freed: the ring is full or its head is damaged",
			idx, head, a->freed);
	/* Entries the consumer released since the last call: their stretches
	 * are free.  Each end is read here before a later entry in its slot
	 * overwrites it, since every posted entry passes through this call. */
	while (a->freed != head) {
		a->free_pos = a->end[a->freed & a->mask];
		a->freed++;
	}
	if (idx == head) {
		/* Nothing in flight: all of it is free; start again at offset 0. */
		a->pos += (a->size - a->pos % a->size) % a->size;
		a->free_pos = a->pos;
	}
	if (len == 0) {
		a->end[idx & a->mask] = a->pos;
		return 0;
	}
	if (len > a->size)
		return hc__err(E2BIG, "argument area: %llu bytes can never fit its %llu", (unsigned long long)len,
			       (unsigned long long)a->size);
	off = a->pos % a->size;
	if (off + len > a->size)
		skip = a->size - off; /* contiguous: the tail end is wasted until the wrap frees */
	if (a->pos - a->free_pos + skip + len > a->size)
		return -ENOSPC; /* transient, like a full ring: the caller waits or parks */
	a->pos += skip;
	off = a->pos % a->size;
	a->pos += len;
	a->end[idx & a->mask] = a->pos;
	return (int64_t)off;
}
