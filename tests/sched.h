/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sched.h - the controller of the schedule explorer and the death sweep
 * (built with --enable-crash-points; doc/design.md, "How the core is
 * proven").
 *
 * A scenario is 2-3 actor processes on a fresh tiny pool.  Each actor is
 * forked, attaches, and enters the controller's block (shmpool/crash.h):
 * from then on it parks at every crash point, and the controller lets one
 * actor at a time run to its next point.  A run follows a schedule: at each
 * step the controller picks a parked actor to run one step, or to kill
 * where it is parked.  After every actor has ended, the controller
 * recovers the pool, ends the quarantines (the pool's clock is the
 * controller's), and proves three things: the quiescent check passes,
 * every READY page's bytes are those of its key, and nothing is lost (every
 * page is FREE or READY and found by its key, and every byte an actor read
 * was right).
 *
 * Runs are deterministic: the same schedule gives the same run, so a
 * failure prints its schedule (and the seed that chose it), and
 * HC_EXPLORE_REPLAY=scenario:schedule replays it exactly.  A scenario with
 * a service (hcs_scenario.service) runs the service free, in real time, in
 * a process of its own: there only the actors' side replays exactly.
 */
#ifndef HC_TESTS_SCHED_H
#define HC_TESTS_SCHED_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hct.h"

#define HCS_ACTORS    3
#define HCS_MAX_STEPS 4096

struct hcs_env;

/* A phase of a hinted schedule: run actor until it parks at point. */
struct hcs_until {
	uint8_t actor;
	uint16_t point;
};
#define HCS_END 0xffffu /* no point: until the actor ends */

struct hcs_scenario {
	const char *name;
	const char *what;
	unsigned nactors;
	const char *actor_name[HCS_ACTORS];
	/* In actor i's process, attached (as a rank), inside the schedule. */
	void (*actor[HCS_ACTORS])(struct hcs_env *e, hc_pool *p, unsigned me);
	unsigned victims; /* actors an explorer or the sweep may kill: a bit each */
	/* The pool: the test layout (hct_spec_init) with these. */
	uint32_t npages, quarantine_ms, max_tickets;
	uint32_t head_groups; /* 0: the pool's default */
	uint32_t host_mode;   /* enum hc_host_mode */
	uint32_t evict;       /* enum hc_evict_policy */
	int real_clock;       /* 1: the pool reads the real clock (a service scenario) */
	/* In the controller, before the actors: keys stored, tickets left open. */
	void (*setup)(struct hcs_env *e);
	/* A service in a process of its own, for the whole run (NULL: none),
	 * and what it runs on (NULL: the file backend in e->dir). */
	int service;
	const char *backend;
	int write_policy; /* enum hc_write_policy + 1; 0: none */
	/* In the controller, after recovery: what else must hold; 0, or -1
	 * with a line in why. */
	int (*verify)(struct hcs_env *e, char *why, size_t len);
	/* A race the scenario is there for that the fixed schedules miss,
	 * as phases: each runs its actor until it parks at its point (HCS_END:
	 * until it ends); then the sticky policy goes on.  The death sweep
	 * runs it besides the fixed ones. */
	struct hcs_until hint[6];
	unsigned nhint;
	/* 1: the proof runs hc_pool_repair after recovery, as an operator
	 * would after a repair that died (a scenario that damages the pool);
	 * 2: a quiescent one (the actors are gone) */
	int repairs;
};

/* What a run's actors and its controller share (in shared memory). */
#define HCS_KEYS 16
struct hcs_shared {
	hc_key_t keys[HCS_KEYS];
	hc_page_t pages[HCS_KEYS];
	_Atomic int flag[8];                  /* scenario's own handshakes */
	_Atomic uint32_t reads_ok, reads_bad; /* byte checks of what actors read */
	_Atomic uint32_t errors;              /* unexpected errors in actors */
	_Atomic uint32_t dying;               /* actors that end themselves by SIGKILL: a bit each */
	char error[256];
	int32_t ret[HCS_ACTORS][8]; /* what each actor's calls returned */
};

struct hcs_env {
	const struct hcs_scenario *sc;
	char name[64]; /* the pool */
	char dir[64];  /* a scratch directory (L3) */
	hc_pool *p;    /* the controller's attachment */
	struct hc__sched *blk;
	struct hcs_shared *sh;
	int killed[HCS_ACTORS]; /* set by the controller */
};

/* An actor's unexpected failure: counted, the first line kept. */
void hcs_fail(struct hcs_env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Actor me ends itself here (SIGKILL), or at its next hit of point pt:
 * part of the scenario, not a failure. */
void hcs_die(struct hcs_env *e, unsigned me) __attribute__((noreturn));
void hcs_die_at(struct hcs_env *e, unsigned me, unsigned pt);
/* The scenarios: for the explorer and the sweep. */
extern const struct hcs_scenario *const hcs_scenarios[];
extern const unsigned hcs_nscenarios;
/* The controller's clock, which the pool reads while a run is on. */
void hcs_clock_add(struct hcs_env *e, uint64_t ms);

/*
 * One decision: run actor a one step, or kill it where it is parked.
 */
struct hcs_choice {
	uint8_t actor;
	uint8_t kill;
};

/* A run's record: at each step, who was parked (enabled), who was spinning,
 * and what was chosen; each actor's points, in order. */
struct hcs_run {
	unsigned nsteps;
	uint8_t enabled[HCS_MAX_STEPS];
	uint8_t spinning[HCS_MAX_STEPS];
	uint16_t at[HCS_MAX_STEPS][HCS_ACTORS]; /* where each parked actor was */
	struct hcs_choice chosen[HCS_MAX_STEPS];
	unsigned ntrace[HCS_ACTORS];
	uint16_t trace[HCS_ACTORS][HC_SCHED_TRACE];
	uint64_t hits[HC_PT__COUNT];
	int diverged;     /* a forced prefix met another enabled set */
	int failed;       /* the run broke an invariant */
	int free_killed;  /* the free process died at plan->free_point */
	char deaths[256]; /* who was killed where, a line each */
	char why[1024];
};

/*
 * How a run chooses.  The first nforced steps follow forced[]; after that
 * the policy picks: HCS_STICKY runs the last actor while it is parked and
 * not spinning (a non-preemptive scheduler), HCS_ROUND takes turns every
 * step, HCS_PCT follows random priorities with change points from a seed.
 * kill_actor/kill_point/kill_nth: kill that actor at its nth park at that
 * point (the death sweep), at most once.  until[]: phases, as in
 * hcs_scenario.hint, that come before the policy.
 */
enum hcs_policy { HCS_STICKY, HCS_ROUND, HCS_PCT };
struct hcs_plan {
	enum hcs_policy policy;
	uint64_t seed;      /* HCS_PCT */
	unsigned pct_depth; /* HCS_PCT: change points */
	unsigned pct_steps; /* HCS_PCT: spread over so many steps (0: 160) */
	const struct hcs_choice *forced;
	unsigned nforced;
	int kill_actor; /* -1: none */
	unsigned kill_point, kill_nth;
	/* a process of its own, free, armed to die at a point (-1: none) */
	int free_point;
	/* phases to follow before the policy (after forced[]) */
	const struct hcs_until *until;
	unsigned nuntil;
};

/* Run sc once under plan: 0 if every invariant held, else -1 with
 * run->why.  run gets the record either way. */
int hcs_run(const struct hcs_scenario *sc, const struct hcs_plan *plan, struct hcs_run *run);

/* A schedule as text ("0*12 1*3 k1 0*4": actor, times; k: kill), and back. */
void hcs_schedule_str(const struct hcs_run *run, char *buf, size_t len);
int hcs_schedule_parse(const char *s, struct hcs_choice *out, unsigned max);

#endif /* HC_TESTS_SCHED_H */
