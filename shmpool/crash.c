/* SPDX-License-Identifier: Apache-2.0 */
/*
 * crash.c - crash points: arming, counting, and parking for the schedule
 * explorer (crash.h says what each does).  Everything here is process
 * private except the explorer's block, which the controller shares.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "crash.h"
#include "pool.h"

static const struct {
	const char *name, *what;
	unsigned flags;
} points[HC_PT__COUNT] = {
#define HC__PT_ROW(n, f, w) [HC_PT_##n] = { #n, w, f },
	HC_POINTS(HC__PT_ROW)
#undef HC__PT_ROW
};

const char *hc__pt_name(unsigned pt)
{
	return pt < HC_PT__COUNT ? points[pt].name : "?";
}

const char *hc__pt_what(unsigned pt)
{
	return pt < HC_PT__COUNT ? points[pt].what : "?";
}

unsigned hc__pt_flags(unsigned pt)
{
	return pt < HC_PT__COUNT ? points[pt].flags : 0;
}

int hc__pt_find(const char *name)
{
	for (unsigned i = 0; i < HC_PT__COUNT; i++)
		if (strcmp(points[i].name, name) == 0)
			return (int)i;
	return hc__err(ENOENT, "crash point '%s' does not exist: hicache-crash(7) lists them", name);
}

#ifdef HC_CRASH_POINTS

_Atomic int hc__pt_live;
static _Atomic uint32_t arm_action[HC_PT__COUNT];
static _Atomic uint32_t arm_left[HC_PT__COUNT];
static struct hc__sched *blk;     /* the explorer's block this process observes, or NULL */
static _Thread_local int me = -1; /* this thread's actor in blk, or -1 */

int hc__pt_built(void)
{
	return 1;
}

static long futex(_Atomic uint32_t *w, int op, uint32_t val)
{
	return syscall(SYS_futex, (uint32_t *)w, op, val, NULL, NULL, 0);
}

static void say(const char *what, unsigned pt)
{
	char line[160];
	int n = snprintf(line, sizeof(line), "hicache: crash point %s: %s pid %d\n", points[pt].name, what,
			 (int)getpid());

	if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0)
		n = 0; /* nowhere to say it: act all the same */
}

static void fire(uint32_t action, unsigned pt)
{
	if (action == HC_PTA_KILL) {
		say("killing", pt);
		kill(getpid(), SIGKILL);
		for (;;)
			pause();
	}
	say("stopping (SIGCONT goes on)", pt);
	raise(SIGSTOP);
}

static void park(unsigned pt)
{
	struct hc__sched_actor *a = &blk->actor[me];
	uint32_t n = atomic_load_explicit(&a->ntrace, memory_order_relaxed), g;

	if (pt < HC_PT__COUNT) {
		if (n < HC_SCHED_TRACE)
			a->trace[n] = (uint16_t)pt;
		atomic_store_explicit(&a->ntrace, n + 1, memory_order_relaxed);
	}
	atomic_store_explicit(&a->at, pt, memory_order_relaxed);
	g = atomic_load_explicit(&a->go, memory_order_acquire);
	atomic_store_explicit(&a->state, HC_SA_PARKED, memory_order_relaxed);
	/* Release: the trace and the state before the controller sees the park. */
	atomic_fetch_add_explicit(&a->parks, 1, memory_order_release);
	atomic_fetch_add_explicit(&blk->event, 1, memory_order_release);
	futex(&blk->event, FUTEX_WAKE, INT_MAX);
	/* Acquire: pairs with the controller's bump of go. */
	while (atomic_load_explicit(&a->go, memory_order_acquire) == g)
		futex(&a->go, FUTEX_WAIT, g);
	atomic_store_explicit(&a->state, HC_SA_RUNNING, memory_order_relaxed);
}

void hc__pt_hit(enum hc__pt pt)
{
	uint32_t act;

	if ((unsigned)pt >= HC_PT__COUNT)
		return;
	if (blk)
		atomic_fetch_add_explicit(&blk->hits[pt], 1, memory_order_relaxed);
	act = atomic_load_explicit(&arm_action[pt], memory_order_relaxed);
	if (act && atomic_fetch_sub_explicit(&arm_left[pt], 1, memory_order_relaxed) == 1) {
		atomic_store_explicit(&arm_action[pt], HC_PTA_NONE, memory_order_relaxed);
		fire(act, pt);
	}
	if (me >= 0)
		park(pt);
}

int hc__pt_arm(unsigned pt, enum hc__pt_action a, uint32_t nth)
{
	if (pt >= HC_PT__COUNT)
		return hc__err(EINVAL, "crash point %u is out of range: there are %d", pt, HC_PT__COUNT);
	if (a != HC_PTA_NONE && a != HC_PTA_KILL && a != HC_PTA_STOP)
		return hc__err(EINVAL, "crash point %s: action %d is not kill or stop", points[pt].name, (int)a);
	if (a != HC_PTA_NONE && nth == 0)
		return hc__err(EINVAL, "crash point %s: the hit to act at counts from 1", points[pt].name);
	atomic_store_explicit(&arm_action[pt], HC_PTA_NONE, memory_order_relaxed);
	atomic_store_explicit(&arm_left[pt], nth, memory_order_relaxed);
	atomic_store_explicit(&arm_action[pt], (uint32_t)a, memory_order_relaxed);
	if (a != HC_PTA_NONE)
		atomic_store_explicit(&hc__pt_live, 1, memory_order_relaxed);
	return 0;
}

void hc__pt_disarm_all(void)
{
	for (unsigned i = 0; i < HC_PT__COUNT; i++)
		atomic_store_explicit(&arm_action[i], HC_PTA_NONE, memory_order_relaxed);
}

void hc__sched_observe(struct hc__sched *s)
{
	blk = s;
	if (s)
		atomic_store_explicit(&hc__pt_live, 1, memory_order_relaxed);
}

int hc__sched_enter(struct hc__sched *s, unsigned a)
{
	if (!s || s->magic != HC_SCHED_MAGIC)
		return hc__err(EINVAL, "schedule: the block is not a controller's (bad magic)");
	if (a >= HC_SCHED_ACTORS)
		return hc__err(EINVAL, "schedule: actor %u is out of range: a block has %d", a, HC_SCHED_ACTORS);
	hc__sched_observe(s);
	me = (int)a;
	atomic_store_explicit(&s->actor[a].pid, (uint32_t)getpid(), memory_order_relaxed);
	park(HC_PT__COUNT); /* not a point: the controller starts us when it will */
	return 0;
}

void hc__sched_leave(void)
{
	struct hc__sched_actor *a;

	if (me < 0 || !blk)
		return;
	a = &blk->actor[me];
	me = -1;
	atomic_store_explicit(&a->state, HC_SA_DONE, memory_order_relaxed);
	atomic_fetch_add_explicit(&a->parks, 1, memory_order_release);
	atomic_fetch_add_explicit(&blk->event, 1, memory_order_release);
	futex(&blk->event, FUTEX_WAKE, INT_MAX);
}

int hc__sched_on(void)
{
	return me >= 0;
}

uint64_t hc__clock_ms(void)
{
	struct timespec ts;

	if (blk && atomic_load_explicit(&blk->vclock_on, memory_order_acquire))
		return atomic_load_explicit(&blk->vclock_ms, memory_order_acquire);
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int hc__lock_shared(pthread_mutex_t *m)
{
	int r;

	if (!hc__mutex_kind_ok(m))
		return ENOTRECOVERABLE;
	if (me < 0)
		return pthread_mutex_lock(m);
	while ((r = pthread_mutex_trylock(m)) == EBUSY)
		HC_POINT(lock_busy);
	return r;
}

/* One HC_CRASH entry, "POINT[:kill|:stop][:N]", arming this process. */
static int env_entry(char *e)
{
	char *name = strtok(e, ":"), *act = strtok(NULL, ":"), *nth = strtok(NULL, ":"), *end;
	enum hc__pt_action a = HC_PTA_KILL;
	unsigned long n = 1;
	int pt;

	if (!name || !*name)
		return hc__err(EINVAL,
			       "HC_CRASH: an entry names no point: give POINT[:kill|:stop][:N], comma-separated");
	if ((pt = hc__pt_find(name)) < 0)
		return hc__err(EINVAL, "HC_CRASH: %s", hc_last_error());
	if (act && strcmp(act, "stop") == 0)
		a = HC_PTA_STOP;
	else if (act && strcmp(act, "kill") != 0)
		return hc__err(EINVAL, "HC_CRASH: '%s' after point %s is no action: give kill or stop", act, name);
	if (nth) {
		errno = 0;
		n = strtoul(nth, &end, 10);
		if (errno || *end || n == 0 || n > UINT32_MAX)
			return hc__err(EINVAL, "HC_CRASH: hit '%s' of point %s is not a count from 1", nth, name);
	}
	if (strtok(NULL, ":"))
		return hc__err(EINVAL, "HC_CRASH: point %s has more than an action and a count", name);
	return hc__pt_arm((unsigned)pt, a, (uint32_t)n);
}

static int env_parse(void)
{
	const char *v = getenv("HC_CRASH");
	char *copy, *save = NULL, *e;
	int ret = 0;

	if (!v || !*v)
		return 0;
	if (!(copy = strdup(v)))
		return hc__err(ENOMEM, "HC_CRASH: no memory");
	for (e = strtok_r(copy, ",", &save); e && ret == 0; e = strtok_r(NULL, ",", &save))
		ret = env_entry(e);
	free(copy);
	return ret;
}

#else /* no crash points: the same entry points, inert */

int hc__pt_built(void)
{
	return 0;
}

int hc__pt_arm(unsigned pt, enum hc__pt_action a, uint32_t nth)
{
	(void)pt;
	(void)a;
	(void)nth;
	return hc__err(ENOTSUP, "crash points are not built in: configure with --enable-crash-points");
}

void hc__pt_disarm_all(void)
{
}

void hc__sched_observe(struct hc__sched *s)
{
	(void)s;
}

int hc__sched_enter(struct hc__sched *s, unsigned a)
{
	(void)s;
	(void)a;
	return hc__err(ENOTSUP, "schedule: crash points are not built in: configure with --enable-crash-points");
}

void hc__sched_leave(void)
{
}

int hc__sched_on(void)
{
	return 0;
}

static int env_parse(void)
{
	const char *v = getenv("HC_CRASH");

	if (v && *v)
		return hc__err(
			ENOTSUP,
			"HC_CRASH is set ('%s'), but this build has no crash points: configure with --enable-crash-points, or unset it",
			v);
	return 0;
}

#endif

/* pthread_once takes no argument: the result and its line go through these. */
static int env_result;
static char env_line[512];

static void env_once(void)
{
	if ((env_result = env_parse()) < 0)
		snprintf(env_line, sizeof(env_line), "%s", hc_last_error());
}

int hc__pt_env(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, env_once);
	if (env_result < 0)
		return hc__err(-env_result, "%s", env_line);
	return 0;
}
