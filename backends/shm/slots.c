/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slots.c - opener slots and proof of death.
 *
 * Each open instance owns one slot of the segment by holding the slot's
 * robust mutex, from a holder thread that lives exactly as long as the
 * instance (a robust mutex belongs to a thread; the host's opening thread
 * may exit long before close).  When the process dies, the kernel marks the
 * mutex owner-dead, and the next trylock gets EOWNERDEAD: the only proof of
 * death we accept.  A stopped process still holds its lock, so it is alive;
 * nothing is declared dead on a timeout.
 *
 * What a slot holds: pin entries (GETs copying) and WRITING objects (PUTs
 * copying).  Whoever proves a slot dead drops both under ctl->lock, so the
 * pinned objects become evictable (a DEAD one is freed) and the unpublished
 * writes' blocks return to the free list.  Dead slots are looked for when an
 * instance opens, when a put finds the space it needs pinned or being
 * written, after a rebuild, and by stats and ctl "recover".
 *
 * Lock order: a slot's mutex, then ctl->lock.  Under ctl->lock a slot's
 * mutex is only ever tried (trylock), so the order cannot deadlock.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"

#define HC_SHM_CLAIM_ROUNDS  200
#define HC_SHM_CLAIM_WAIT_US 500

void hc__shm_drop_slot_locked(struct hc_shm *be, unsigned slot, bool writes)
{
	const struct hc_shm_seg *s = &be->seg;

	for (uint32_t k = 0; k < s->g.pins_per_opener; k++)
		if (s->pins[(size_t)slot * s->g.pins_per_opener + k].obj)
			hc__shm_unpin_locked(be, slot, k);
	for (uint32_t i = 1; writes && i <= s->g.max_objects; i++) {
		const struct hc_shm_obj *o = &s->objs[i - 1];
		if (o->state == HC_SHM_OBJ_WRITING && o->owner == slot)
			hc__shm_free_obj_locked(be, i);
	}
}

/* We hold slot's mutex, got with EOWNERDEAD, and ctl->lock: undo and free it. */
static void recover_dead(struct hc_shm *be, unsigned slot)
{
	struct hc_shm_slot *sl = &be->seg.slots[slot];

	hc__shm_drop_slot_locked(be, slot, true);
	atomic_fetch_add_explicit(&be->seg.ctl->recoveries, 1, memory_order_relaxed);
	hc__shm_log(HC_BE_LOG_INFO, "%s: opener slot %u (pid %u) died; dropped its pins and unfinished puts",
		    be->seg.path, slot, atomic_load_explicit(&sl->pid, memory_order_relaxed));
}

unsigned hc__shm_probe_locked(struct hc_shm *be)
{
	const struct hc_shm_seg *s = &be->seg;
	unsigned n = 0;

	for (unsigned slot = 0; slot < s->g.max_openers; slot++) {
		struct hc_shm_slot *sl = &s->slots[slot];
		int ret;

		if ((int)slot == be->slot || (int)slot == be->claiming ||
		    atomic_load_explicit(&sl->state, memory_order_acquire) == HC_SHM_SLOT_FREE)
			continue;
		ret = pthread_mutex_trylock(&sl->lock.m);
		if (ret == EOWNERDEAD) {
			recover_dead(be, slot);
			atomic_store_explicit(&sl->state, HC_SHM_SLOT_FREE, memory_order_release);
			pthread_mutex_consistent(&sl->lock.m);
		} else if (ret == 0) {
			/* Marked LIVE, yet nobody holds it: a leftover; its holds are nobody's. */
			hc__shm_drop_slot_locked(be, slot, true);
			atomic_store_explicit(&sl->state, HC_SHM_SLOT_FREE, memory_order_release);
		} else {
			continue; /* EBUSY: alive, or being claimed; else unusable, left alone */
		}
		pthread_mutex_unlock(&sl->lock.m);
		n++;
	}
	return n;
}

unsigned hc__shm_openers(struct hc_shm *be)
{
	unsigned n = 0;

	for (unsigned slot = 0; slot < be->seg.g.max_openers; slot++)
		n += atomic_load_explicit(&be->seg.slots[slot].state, memory_order_relaxed) == HC_SHM_SLOT_LIVE;
	return n;
}

static void sem_wait_intr(sem_t *s)
{
	while (sem_wait(s) < 0 && errno == EINTR)
		;
}

/* We hold slot's mutex: undo whatever it still holds, as its new owner.
 * A slot its owner let go of (FREE, and not owner-dead) holds nothing. */
static int take_slot(struct hc_shm *be, unsigned slot, int got)
{
	struct hc_shm_slot *sl = &be->seg.slots[slot];
	int ret;

	be->claiming = (int)slot;
	if (got != EOWNERDEAD && atomic_load_explicit(&sl->state, memory_order_acquire) == HC_SHM_SLOT_FREE)
		return 0;
	if ((ret = hc__shm_lock(be)) < 0)
		return ret;
	if (got == EOWNERDEAD)
		recover_dead(be, slot);
	else
		hc__shm_drop_slot_locked(be, slot, true); /* a leftover */
	hc__shm_unlock(be);
	if (got == EOWNERDEAD && (ret = pthread_mutex_consistent(&sl->lock.m)) != 0)
		return -ret;
	return 0;
}

/* Try every slot once: the slot claimed, -EAGAIN if one may free up soon, -EUSERS. */
static int claim_round(struct hc_shm *be)
{
	const struct hc_shm_seg *s = &be->seg;
	bool transient = false;

	for (unsigned slot = 0; slot < s->g.max_openers; slot++) {
		struct hc_shm_slot *sl = &s->slots[slot];
		int got = pthread_mutex_trylock(&sl->lock.m), ret;

		if (got == EBUSY) {
			/* FREE yet locked: a prober's moment. */
			transient |= atomic_load_explicit(&sl->state, memory_order_acquire) != HC_SHM_SLOT_LIVE;
			continue;
		}
		if (got != 0 && got != EOWNERDEAD) {
			hc__shm_warn_once(be, HC_SHM_WARN_SLOT, "%s: opener slot %u is unusable (%s); skipping it",
					  s->path, slot, strerror(got));
			continue;
		}
		if ((ret = take_slot(be, slot, got)) < 0) {
			pthread_mutex_unlock(&sl->lock.m);
			be->claiming = -1;
			return ret;
		}
		return (int)slot;
	}
	return transient ? -EAGAIN : -EUSERS;
}

static void *holder_main(void *arg)
{
	struct hc_shm *be = arg;
	struct hc_shm_slot *sl;
	struct timespec ts;
	int slot = -EAGAIN;

	for (int round = 0; round < HC_SHM_CLAIM_ROUNDS && slot == -EAGAIN; round++) {
		if (round)
			usleep(HC_SHM_CLAIM_WAIT_US);
		slot = claim_round(be);
	}
	if (slot < 0) {
		be->holder_result = slot == -EAGAIN ? -EUSERS : slot;
		sem_post(&be->holder_ready);
		return NULL;
	}
	sl = &be->seg.slots[slot];
	clock_gettime(CLOCK_REALTIME, &ts);
	atomic_store_explicit(&sl->pid, (uint32_t)getpid(), memory_order_relaxed);
	atomic_store_explicit(&sl->tid, (uint32_t)gettid(), memory_order_relaxed);
	atomic_fetch_add_explicit(&sl->epoch, 1, memory_order_relaxed);
	atomic_store_explicit(&sl->opened_unix_ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
			      memory_order_relaxed);
	/* Release: pid and the rest are visible before LIVE (probers, stats). */
	atomic_store_explicit(&sl->state, HC_SHM_SLOT_LIVE, memory_order_release);
	be->slot = slot;
	be->claiming = -1;
	be->holder_result = slot;
	sem_post(&be->holder_ready); /* the opener reads slot and holder_result after its wait */

	sem_wait_intr(&be->holder_stop);
	atomic_store_explicit(&sl->state, HC_SHM_SLOT_FREE, memory_order_release);
	pthread_mutex_unlock(&sl->lock.m);
	return NULL;
}

int hc__shm_slot_claim(struct hc_shm *be)
{
	int ret;

	be->slot = -1;
	be->claiming = -1;
	ret = pthread_create(&be->holder, NULL, holder_main, be);
	if (ret)
		return -ret;
	sem_wait_intr(&be->holder_ready);
	if (be->holder_result < 0) {
		pthread_join(be->holder, NULL);
		return be->holder_result;
	}
	return 0;
}

/* Clean close: undo our own holds (none, when every op was reaped), then
 * let go.  Only a put that never finished makes us scan the object table. */
void hc__shm_slot_release(struct hc_shm *be)
{
	if (be->slot < 0)
		return;
	if (hc__shm_lock(be) == 0) {
		hc__shm_drop_slot_locked(be, (unsigned)be->slot, atomic_load(&be->writing) != 0);
		hc__shm_unlock(be);
	}
	sem_post(&be->holder_stop);
	pthread_join(be->holder, NULL);
	be->slot = -1;
}
