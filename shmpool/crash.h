/* SPDX-License-Identifier: Apache-2.0 */
/*
 * crash.h - crash points and the hooks of the schedule explorer
 * (doc/design.md, "How the core is proven").
 *
 * HC_POINT(name) marks a step of a shared-memory protocol (points.h).  In a
 * build with --enable-crash-points it costs a relaxed load and a branch
 * until something is armed; then hc__pt_hit runs, which can:
 *   - kill the process there (SIGKILL), or stop it there (SIGSTOP, until
 *     someone sends SIGCONT), at the Nth hit: armed by hc__pt_arm, or by
 *     the environment variable HC_CRASH (hicache-crash(7));
 *   - count the hit in a table shared with a test (hc__sched_observe);
 *   - park the thread until a controller lets it run one more step, when
 *     the thread has entered a schedule (hc__sched_enter): the controller
 *     runs one process at a time, from point to point, and may kill one
 *     while it is parked.
 * Without --enable-crash-points HC_POINT compiles to nothing, and the
 * functions below say so (-ENOTSUP) or do nothing.
 *
 * Time: while a controller holds a virtual clock (hc__sched.vclock_on),
 * every process that observes its block reads the pool's clocks from it,
 * so quarantines and ticket deadlines end when the schedule says, not when
 * the machine does.
 */
#ifndef HC_SHMPOOL_CRASH_H
#define HC_SHMPOOL_CRASH_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "points.h"

enum hc__pt_action { HC_PTA_NONE = 0, HC_PTA_KILL = 1, HC_PTA_STOP = 2 };

#ifdef HC_CRASH_POINTS
extern _Atomic int hc__pt_live;
void hc__pt_hit(enum hc__pt pt);
#define HC_POINT(name)                                                                                                 \
	do {                                                                                                           \
		if (__builtin_expect(atomic_load_explicit(&hc__pt_live, memory_order_relaxed), 0))                     \
			hc__pt_hit(HC_PT_##name);                                                                      \
	} while (0)
#else
#define HC_POINT(name) ((void)0)
#endif

/* 1 in a build with crash points, else 0. */
int hc__pt_built(void);
const char *hc__pt_name(unsigned pt);
const char *hc__pt_what(unsigned pt);
unsigned hc__pt_flags(unsigned pt);
/* The point of that name, or -ENOENT (with the line). */
int hc__pt_find(const char *name);
/* This process acts at the nth hit of pt from now (1: the next); -ENOTSUP
 * without crash points.  HC_PTA_NONE disarms pt. */
int hc__pt_arm(unsigned pt, enum hc__pt_action a, uint32_t nth);
void hc__pt_disarm_all(void);
/* Read HC_CRASH once per process (attach and create call it): 0, or a
 * negative errno with the line that names what is wrong in it. */
int hc__pt_env(void);

/*
 * The explorer's block, in memory the controller maps shared before it
 * forks the actors.  Notes on synchronization: an actor's state, at, parks
 * and trace are written by the actor's thread alone, which then bumps
 * 'event' (release) and wakes the controller; 'go' is bumped (release) by
 * the controller alone, and the actor sleeps on it.  hits are added by every
 * observer (relaxed).  vclock_ms and vclock_on are the controller's.
 */
#define HC_SCHED_MAGIC  0x48435343u /* "CSCH" */
#define HC_SCHED_ACTORS 8
#define HC_SCHED_TRACE  8192

enum hc__sched_state { HC_SA_IDLE = 0, HC_SA_RUNNING = 1, HC_SA_PARKED = 2, HC_SA_DONE = 3 };

struct hc__sched_actor {
	_Atomic uint32_t state; /* enum hc__sched_state */
	_Atomic uint32_t at;    /* the point it is parked at */
	_Atomic uint32_t parks; /* times it parked: the controller waits for the next */
	_Atomic uint32_t go;    /* futex word: the controller's permits */
	_Atomic uint32_t pid;
	_Atomic uint32_t ntrace; /* points passed; the first HC_SCHED_TRACE are in trace */
	uint16_t trace[HC_SCHED_TRACE];
};

struct hc__sched {
	uint32_t magic;
	_Atomic uint32_t event; /* futex word: an actor parked or left */
	_Atomic uint32_t vclock_on;
	uint32_t pad0;
	_Atomic uint64_t vclock_ms; /* CLOCK_BOOTTIME in ms as the pool sees it, while vclock_on */
	_Atomic uint64_t hits[HC_PT__COUNT];
	struct hc__sched_actor actor[HC_SCHED_ACTORS];
};

/* Count this process's hits in s and read the clock from it (no parking). */
void hc__sched_observe(struct hc__sched *s);
/* This thread parks at every point from now on, as actor a of s; it parks
 * once at once, so the controller decides when it starts.  -ENOTSUP
 * without crash points, -EINVAL for a bad block or actor. */
int hc__sched_enter(struct hc__sched *s, unsigned a);
/* This thread's actor is done: it parks no more (before it exits). */
void hc__sched_leave(void);
/* Is this thread parked at points by a controller? */
int hc__sched_on(void);

/* CLOCK_BOOTTIME in ms, or the controller's virtual clock. */
/*
 * hc__mutex_kind_ok: whether a shared mutex still has the kind
 * hc__mutex_init_robust gave it (ranks.c).  glibc takes the kind from the
 * mutex itself: a scribbled one sends it down another type's path (an
 * elision kind runs TSX instructions: SIGILL on a CPU without them), so
 * a mutex in the segment is checked before every lock.
 */
int hc__mutex_kind_ok(const pthread_mutex_t *m);

/*
 * hc__lock_shared: lock a shared robust mutex.  Under a schedule,
 * pthread_mutex_lock would sleep in the kernel behind a parked holder and
 * the controller would wait forever for the next point: so there it tries,
 * and parks at lock_busy between tries.  Returns what pthread_mutex_lock
 * returns, or ENOTRECOVERABLE for a mutex of a scribbled kind, never
 * locked.  hc__unlock_shared unlocks one that is still of its kind.
 */
#ifdef HC_CRASH_POINTS
uint64_t hc__clock_ms(void);
int hc__lock_shared(pthread_mutex_t *m);
#else
#include <time.h>
static inline uint64_t hc__clock_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline int hc__lock_shared(pthread_mutex_t *m)
{
	return hc__mutex_kind_ok(m) ? pthread_mutex_lock(m) : ENOTRECOVERABLE;
}
#endif

static inline void hc__unlock_shared(pthread_mutex_t *m)
{
	if (hc__mutex_kind_ok(m))
		pthread_mutex_unlock(m);
}

#endif /* HC_SHMPOOL_CRASH_H */
