/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sched.c - the controller of the schedule explorer and the death sweep
 * (sched.h says what a run is).  The controller is the test process; each
 * actor is a child that parks at every crash point of its thread, and the
 * controller lets one of them run one step at a time, in the order a plan
 * says.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hicache/service.h>

#include "sched.h"

#define PARK_WAIT_MS 20000 /* an actor that neither parks nor ends in this long hangs */
#define EST_STEPS    160   /* PCT spreads its change points over this many steps */

enum { A_RUNNING, A_PARKED, A_DONE, A_DEAD };

struct ctl {
	struct hcs_env e;
	const struct hcs_plan *plan;
	struct hcs_run *run;
	pid_t pid[HCS_ACTORS];
	int st[HCS_ACTORS];
	uint32_t parks[HCS_ACTORS];
	pid_t svc, free_pid;
	int last; /* the actor that ran last, or -1 */
	int killed_once;
	uint8_t stale[HCS_ACTORS]; /* it spun, and no other actor moved since */
	unsigned ui;               /* the phase of plan->until[] we are in */
	uint32_t prio[HCS_ACTORS]; /* PCT */
	unsigned change[16], nchange;
	uint64_t rng;
};

/* ---- what actors use */

void hcs_fail(struct hcs_env *e, const char *fmt, ...)
{
	va_list ap;

	if (atomic_fetch_add(&e->sh->errors, 1) != 0)
		return;
	va_start(ap, fmt);
	vsnprintf(e->sh->error, sizeof(e->sh->error), fmt, ap);
	va_end(ap);
}

void hcs_die(struct hcs_env *e, unsigned me)
{
	atomic_fetch_or(&e->sh->dying, 1u << me);
	kill(getpid(), SIGKILL);
	for (;;)
		pause();
}

void hcs_die_at(struct hcs_env *e, unsigned me, unsigned pt)
{
	atomic_fetch_or(&e->sh->dying, 1u << me);
	hc__pt_arm(pt, HC_PTA_KILL, 1);
}

void hcs_clock_add(struct hcs_env *e, uint64_t ms)
{
	atomic_fetch_add(&e->blk->vclock_ms, ms);
}

/* ---- the schedule as text */

void hcs_schedule_str(const struct hcs_run *run, char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = 0;
	for (unsigned i = 0; i < run->nsteps && o + 16 < len;) {
		const struct hcs_choice c = run->chosen[i];
		unsigned n = 1;

		if (c.kill) {
			o += (size_t)snprintf(buf + o, len - o, "%sk%u", o ? " " : "", c.actor);
			i++;
			continue;
		}
		while (i + n < run->nsteps && !run->chosen[i + n].kill && run->chosen[i + n].actor == c.actor)
			n++;
		o += (size_t)snprintf(buf + o, len - o, "%s%u*%u", o ? " " : "", c.actor, n);
		i += n;
	}
}

int hcs_schedule_parse(const char *s, struct hcs_choice *out, unsigned max)
{
	unsigned n = 0;

	while (*s) {
		unsigned a, k = 1;
		int used = 0;

		while (*s == ' ')
			s++;
		if (!*s)
			break;
		if (*s == 'k') {
			if (sscanf(s, "k%u%n", &a, &used) != 1 || a >= HCS_ACTORS || n >= max)
				return -EINVAL;
			out[n++] = (struct hcs_choice){ (uint8_t)a, 1 };
		} else {
			if (sscanf(s, "%u*%u%n", &a, &k, &used) != 2 || a >= HCS_ACTORS || n + k > max)
				return -EINVAL;
			while (k--)
				out[n++] = (struct hcs_choice){ (uint8_t)a, 0 };
		}
		s += used;
	}
	return (int)n;
}

/* ---- the controller */

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

static void why(struct ctl *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void why(struct ctl *c, const char *fmt, ...)
{
	size_t o = strlen(c->run->why);
	va_list ap;

	c->run->failed = 1;
	if (o + 2 >= sizeof(c->run->why))
		return;
	va_start(ap, fmt);
	vsnprintf(c->run->why + o, sizeof(c->run->why) - o, fmt, ap);
	va_end(ap);
	o = strlen(c->run->why);
	if (o + 1 < sizeof(c->run->why))
		strcat(c->run->why, "\n");
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t boot_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Wait for actor a to park again (after 'before' parks) or end. */
static void wait_park(struct ctl *c, unsigned a, uint32_t before)
{
	struct hc__sched_actor *sa = &c->e.blk->actor[a];
	uint64_t t0 = mono_ms();
	struct timespec ts = { 0, 2 * 1000 * 1000 };

	for (;;) {
		uint32_t ev = atomic_load(&c->e.blk->event);
		int status;

		if (atomic_load_explicit(&sa->parks, memory_order_acquire) != before) {
			c->parks[a] = atomic_load(&sa->parks);
			c->st[a] = atomic_load(&sa->state) == HC_SA_DONE ? A_DONE : A_PARKED;
			return;
		}
		if (waitpid(c->pid[a], &status, WNOHANG) == c->pid[a]) {
			c->pid[a] = 0;
			/* It may have left the schedule and exited between our
			 * look at parks and this wait: look again. */
			if (atomic_load_explicit(&sa->parks, memory_order_acquire) != before &&
			    atomic_load(&sa->state) == HC_SA_DONE) {
				c->parks[a] = atomic_load(&sa->parks);
				c->st[a] = A_DONE;
				if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
					why(c, "actor %u (%s) exited with status 0x%x", a, c->e.sc->actor_name[a],
					    status);
				return;
			}
			c->st[a] = A_DEAD;
			if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
			    (atomic_load(&c->e.sh->dying) >> a & 1)) {
				c->e.killed[a] = 1; /* it ended itself, as its scenario says */
				return;
			}
			why(c, "actor %u (%s) ended outside the schedule (status 0x%x) after point %s", a,
			    c->e.sc->actor_name[a], status, hc__pt_name(atomic_load(&sa->at)));
			return;
		}
		if (mono_ms() - t0 > PARK_WAIT_MS) {
			why(c,
			    "actor %u (%s) neither parked nor ended for %d ms after point %s: it blocks outside a point",
			    a, c->e.sc->actor_name[a], PARK_WAIT_MS, hc__pt_name(atomic_load(&sa->at)));
			kill(c->pid[a], SIGKILL);
			waitpid(c->pid[a], &status, 0);
			c->pid[a] = 0;
			c->st[a] = A_DEAD;
			return;
		}
		futex(&c->e.blk->event, FUTEX_WAIT, ev, &ts);
	}
}

static void step(struct ctl *c, unsigned a)
{
	struct hc__sched_actor *sa = &c->e.blk->actor[a];
	uint32_t before = c->parks[a];

	c->st[a] = A_RUNNING;
	atomic_fetch_add_explicit(&sa->go, 1, memory_order_release);
	futex(&sa->go, FUTEX_WAKE, INT_MAX, NULL);
	wait_park(c, a, before);
}

static void kill_actor(struct ctl *c, unsigned a)
{
	int status;

	kill(c->pid[a], SIGKILL);
	waitpid(c->pid[a], &status, 0);
	c->pid[a] = 0;
	c->st[a] = A_DEAD;
	c->e.killed[a] = 1;
}

static uint64_t rnd(struct ctl *c)
{
	c->rng ^= c->rng << 13;
	c->rng ^= c->rng >> 7;
	c->rng ^= c->rng << 17;
	return c->rng;
}

static int parked_at(const struct ctl *c, unsigned a)
{
	return (int)atomic_load(&c->e.blk->actor[a].at);
}

static int at_spin_point(const struct ctl *c, unsigned a)
{
	unsigned at = (unsigned)parked_at(c, a);

	return at < HC_PT__COUNT && (hc__pt_flags(at) & HC_PTF_SPIN);
}

/* An actor in a wait loop that tried and found nothing changed: running it
 * again before another actor moves would only spin.  Once another moves
 * (a lock may be free now) it is a choice like any other. */
static int spinning(const struct ctl *c, unsigned a)
{
	return c->stale[a] && at_spin_point(c, a);
}

/* Times actor a has parked at pt so far. */
static unsigned parks_at(const struct ctl *c, unsigned a, unsigned pt)
{
	const struct hc__sched_actor *sa = &c->e.blk->actor[a];
	unsigned n = atomic_load(&sa->ntrace), k = 0;

	for (unsigned i = 0; i < n && i < HC_SCHED_TRACE; i++)
		k += sa->trace[i] == pt;
	return k;
}

/* The policy's pick among the enabled (non-spinning first). */
static struct hcs_choice pick(struct ctl *c, unsigned en, unsigned spin, unsigned k)
{
	const struct hcs_plan *pl = c->plan;
	unsigned calm = en & ~spin, n = c->e.sc->nactors, from = c->last < 0 ? 0 : (unsigned)c->last;
	struct hcs_choice ch = { 0, 0 };

	if (pl->kill_actor >= 0 && !c->killed_once && (en >> pl->kill_actor & 1) &&
	    parked_at(c, (unsigned)pl->kill_actor) == (int)pl->kill_point &&
	    parks_at(c, (unsigned)pl->kill_actor, pl->kill_point) == pl->kill_nth) {
		ch.actor = (uint8_t)pl->kill_actor;
		ch.kill = 1;
		return ch;
	}
	/* The phases of a hint: one ends when its actor parks at its point,
	 * ends, or spins (it waits for someone the hint did not name). */
	while (c->ui < pl->nuntil) {
		const struct hcs_until *u = &pl->until[c->ui];
		if (u->actor < n && (calm >> u->actor & 1) && parked_at(c, u->actor) != (int)u->point) {
			ch.actor = u->actor;
			return ch;
		}
		c->ui++;
	}
	if (!calm) { /* all spin: take turns */
		for (unsigned i = 1; i <= n; i++)
			if (en >> ((from + i) % n) & 1) {
				ch.actor = (uint8_t)((from + i) % n);
				return ch;
			}
	}
	switch (pl->policy) {
	case HCS_STICKY:
		if (c->last >= 0 && (calm >> c->last & 1)) {
			ch.actor = (uint8_t)c->last;
			return ch;
		}
		ch.actor = (uint8_t)__builtin_ctz(calm);
		return ch;
	case HCS_ROUND:
		for (unsigned i = 1; i <= n; i++)
			if (calm >> ((from + i) % n) & 1) {
				ch.actor = (uint8_t)((from + i) % n);
				return ch;
			}
		break;
	case HCS_PCT:
		for (unsigned i = 0; i < c->nchange; i++)
			if (c->change[i] == k && c->last >= 0)     /* the running actor drops below all, */
				c->prio[c->last] = c->nchange - i; /* and below those that dropped before */
		for (unsigned a = 0, best = 0; a < n; a++)
			if ((calm >> a & 1) && c->prio[a] >= best) {
				best = c->prio[a] + 1;
				ch.actor = (uint8_t)a;
			}
		return ch;
	}
	ch.actor = (uint8_t)__builtin_ctz(calm);
	return ch;
}

static int fork_actor(struct ctl *c, unsigned a)
{
	pid_t pid = fork();

	if (pid < 0) {
		why(c, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_NO_POPULATE };
		hc_pool *p;

		hc__sched_observe(c->e.blk);
		if (hc_pool_attach(c->e.name, &o, &p) < 0) {
			hcs_fail(&c->e, "actor %u: attach: %s", a, hc_last_error());
			_exit(100);
		}
		if (hc__sched_enter(c->e.blk, a) < 0)
			_exit(101);
		c->e.sc->actor[a](&c->e, p, a);
		hc_pool_detach(p);
		hc__sched_leave();
		_exit(0);
	}
	c->pid[a] = pid;
	c->st[a] = A_RUNNING;
	wait_park(c, a, 0);
	return c->st[a] == A_PARKED ? 0 : -1;
}

/* The scenario's service, free in a process of its own, observing the
 * block (for its counts and clock), maybe armed to die at a point. */
static int fork_service(struct ctl *c, int pt)
{
	char spec[160];
	int fds[2];
	pid_t pid;
	char b;

	if (c->e.sc->backend)
		snprintf(spec, sizeof(spec), "%s", c->e.sc->backend);
	else
		snprintf(spec, sizeof(spec), "file:dir=%s", c->e.dir);
	if (pipe(fds) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		struct hc_service_opts o = { .size = sizeof(struct hc_service_opts),
					     .backend = spec,
					     .batch_pages = 4,
					     .workers = 1 };
		hc_service *s;
		sigset_t set;
		int sig;

		close(fds[0]);
		if (c->e.sc->write_policy)
			o.write_policy = (enum hc_write_policy)(c->e.sc->write_policy - 1);
		else
			o.write_policy = HC_WRITE_NONE;
		sigemptyset(&set);
		sigaddset(&set, SIGTERM);
		sigprocmask(SIG_BLOCK, &set, NULL);
		hc__sched_observe(c->e.blk);
		if (pt >= 0)
			hc__pt_arm((unsigned)pt, HC_PTA_KILL, 1);
		if (hc_service_start(c->e.name, &o, &s) < 0) {
			fprintf(stderr, "sched: service: %s\n", hc_last_error());
			_exit(3);
		}
		if (write(fds[1], "s", 1) != 1)
			_exit(4);
		sigwait(&set, &sig);
		hc_service_stop(s);
		_exit(0);
	}
	close(fds[1]);
	if (pid < 0 || read(fds[0], &b, 1) != 1) {
		int status = 0;

		close(fds[0]);
		if (pid > 0)
			waitpid(pid, &status, 0);
		/* Armed, it died starting: the next service must start in
		 * its place, after whatever it left. */
		if (pid > 0 && pt >= 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
			c->run->free_killed = 1;
			return fork_service(c, -1);
		}
		why(c, "the service did not start (status 0x%x)", status);
		return -1;
	}
	close(fds[0]);
	c->svc = pid;
	return 0;
}

/* A process of its own that attaches after the actors (its holder thread
 * recovers the dead ones' slots) and recovers the pool, then sweeps it past
 * every grace, armed to die at point pt: the points of attach, recovery and
 * the sweep outside any actor.  1 if it died at pt (SIGKILL), else 0. */
static int free_recoverer(struct ctl *c, int pt)
{
	pid_t pid = fork();
	int status;

	if (pid == 0) {
		struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_NO_POPULATE };
		hc_pool *p;

		hc__sched_observe(c->e.blk);
		hc__pt_arm((unsigned)pt, HC_PTA_KILL, 1);
		if (hc_pool_attach(c->e.name, &o, &p) < 0)
			_exit(2);
		hc_pool_recover(p, NULL, 0);
		/* and once more past every grace: the quarantine sweep */
		if (!c->e.sc->real_clock)
			hcs_clock_add(&c->e, c->e.sc->quarantine_ms + 1);
		hc_pool_recover(p, NULL, 0);
		hc_pool_detach(p);
		_exit(0);
	}
	if (pid > 0 && waitpid(pid, &status, 0) == pid)
		return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
	return 0;
}

static void collect(void *arg, const char *line)
{
	struct ctl *c = arg;

	why(c, "check: %s", line);
}

/* After the run: recover, end quarantines, and prove it all. */
static void prove(struct ctl *c)
{
	hc_pool *p = c->e.p;
	uint64_t counts[HC_PAGE__COUNT];
	int n;

	if (hc_pool_recover(p, NULL, 0) < 0)
		why(c, "recover: %s", hc_last_error());
	if (c->e.sc->repairs &&
	    hc_pool_repair(p, c->e.sc->repairs > 1 ? HC_CHECK_QUIESCENT : 0, NULL, 0, NULL, NULL) < 0)
		why(c, "repair: %s", hc_last_error());
	if (c->e.sc->real_clock)
		usleep((c->e.sc->quarantine_ms + 5) * 1000);
	else
		hcs_clock_add(&c->e, c->e.sc->quarantine_ms + 1);
	if (hc_pool_recover(p, NULL, 0) < 0)
		why(c, "recover: %s", hc_last_error());
	n = hc_pool_check(p, HC_CHECK_QUIESCENT, collect, c);
	if (n < 0)
		why(c, "check: %s", hc_last_error());
	if (atomic_load(&c->e.sh->errors))
		why(c, "%u unexpected errors in actors; first: %s", atomic_load(&c->e.sh->errors), c->e.sh->error);
	if (atomic_load(&c->e.sh->reads_bad))
		why(c, "%u reads by actors saw wrong bytes", atomic_load(&c->e.sh->reads_bad));
	hc_pool_count_states(p, counts, HC_PAGE__COUNT);
	if (counts[HC_PAGE_RESERVED] || counts[HC_PAGE_FREEING])
		why(c, "lost: %llu pages RESERVED and %llu FREEING with every actor ended",
		    (unsigned long long)counts[1], (unsigned long long)counts[4]);
	for (uint32_t id = 0; id < c->e.sc->npages; id++) {
		struct hc_page_info pi;
		hc_page_t h;

		if (hc_page_info(p, id, &pi, sizeof(pi)) < 0)
			continue;
		if (pi.state == HC_PAGE_QUARANTINE && pi.pins + pi.locks == 0)
			why(c, "lost: page %u is still in quarantine, nothing holds it, past its grace", id);
		if (pi.state != HC_PAGE_READY)
			continue;
		if (!pi.keyed) {
			if (pi.owner != (uint32_t)p->slot)
				why(c, "lost: page %u is READY, unkeyed and not the controller's (slot %u)", id,
				    pi.owner);
			continue;
		}
		struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req),
					    .keys = (const hc_key_t *)pi.key,
					    .nkeys = 1,
					    .flags = HC_LOOKUP_NOTOUCH };
		if (hc_lookup(p, &rq, &h) != 1 || HC_PAGE_ID(h) != id)
			why(c, "lost: page %u is READY and keyed, and its key does not find it", id);
		else if (hct_key_shard(p, h, pi.key, 0, 0) < 0)
			why(c, "bytes: page %u does not hold its key's bytes", id);
	}
	if (c->e.sc->verify) {
		char w[256] = "";
		if (c->e.sc->verify(&c->e, w, sizeof(w)) < 0)
			why(c, "%s", w);
	}
}

static int make_pool(struct ctl *c)
{
	const struct hcs_scenario *sc = c->e.sc;
	struct hct_spec sp;
	struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_NO_POPULATE };

	snprintf(c->e.name, sizeof(c->e.name), "%s", hct_name());
	hct_spec_init(&sp, c->e.name, sc->npages);
	sp.spec.quarantine_ms = sc->quarantine_ms;
	sp.spec.max_ranks = 8;
	sp.spec.max_tickets = sc->max_tickets;
	sp.spec.ticket_keys = 16;
	sp.spec.head_groups = sc->head_groups;
	sp.spec.host_mode = (enum hc_host_mode)sc->host_mode;
	sp.spec.evict = (enum hc_evict_policy)sc->evict;
	sp.spec.ring_entries = 8;
	sp.spec.arg_bytes = 4096;
	if (hc_pool_create(&sp.spec) < 0 || hc_pool_attach(c->e.name, &o, &c->e.p) < 0) {
		why(c, "pool: %s", hc_last_error());
		return -1;
	}
	return 0;
}

int hcs_run(const struct hcs_scenario *sc, const struct hcs_plan *plan, struct hcs_run *run)
{
	struct ctl *c = calloc(1, sizeof(*c));
	unsigned k = 0, n = sc->nactors;
	int ret;

	memset(run, 0, sizeof(*run));
	if (!c)
		return -1;
	c->e.sc = sc;
	c->plan = plan;
	c->run = run;
	c->last = -1;
	c->e.blk = mmap(NULL, sizeof(*c->e.blk), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	c->e.sh = mmap(NULL, sizeof(*c->e.sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (c->e.blk == MAP_FAILED || c->e.sh == MAP_FAILED) {
		why(c, "mmap: %s", strerror(errno));
		goto out;
	}
	c->e.blk->magic = HC_SCHED_MAGIC;
	atomic_store(&c->e.blk->vclock_ms, boot_ms());
	atomic_store(&c->e.blk->vclock_on, sc->real_clock ? 0 : 1);
	hc__sched_observe(c->e.blk);
	if (plan->policy == HCS_PCT) {
		c->rng = plan->seed * UINT64_C(0x9E3779B97F4A7C15) + 1;
		for (unsigned a = 0; a < n; a++)
			c->prio[a] = 1000 + (uint32_t)(rnd(c) % 1000) * HCS_ACTORS + a; /* distinct */
		c->nchange = plan->pct_depth < 16 ? plan->pct_depth : 16;
		for (unsigned i = 0; i < c->nchange; i++)
			c->change[i] = (unsigned)(rnd(c) % (plan->pct_steps ? plan->pct_steps : EST_STEPS));
	}
	if (sc->service || sc->backend)
		hct_mkdtemp(c->e.dir, sizeof(c->e.dir), "sched");
	if (make_pool(c) < 0)
		goto out;
	if (sc->setup)
		sc->setup(&c->e);
	if (sc->service && fork_service(c, plan->free_point) < 0)
		goto out;
	for (unsigned a = 0; a < n; a++)
		if (fork_actor(c, a) < 0)
			goto reap;

	for (;;) {
		unsigned en = 0, spin = 0;
		struct hcs_choice ch;
		int was;

		for (unsigned a = 0; a < n; a++)
			if (c->st[a] == A_PARKED) {
				en |= 1u << a;
				spin |= (unsigned)spinning(c, a) << a;
			}
		if (!en)
			break;
		if (k >= HCS_MAX_STEPS) {
			why(c, "ran past %d steps: a livelock?", HCS_MAX_STEPS);
			break;
		}
		if (k < plan->nforced && !run->diverged) {
			ch = plan->forced[k];
			if (!(en >> ch.actor & 1))
				run->diverged = 1;
		}
		if (k >= plan->nforced || run->diverged)
			ch = pick(c, en, spin, k);
		run->enabled[k] = (uint8_t)en;
		run->spinning[k] = (uint8_t)spin;
		for (unsigned a = 0; a < n; a++)
			run->at[k][a] = (uint16_t)parked_at(c, a);
		run->chosen[k] = ch;
		was = parked_at(c, ch.actor);
		k++;
		if (ch.kill) {
			c->killed_once = 1;
			snprintf(run->deaths + strlen(run->deaths), sizeof(run->deaths) - strlen(run->deaths),
				 "  actor %u (%s) killed at %s, its %u-th point\n", ch.actor, sc->actor_name[ch.actor],
				 hc__pt_name((unsigned)parked_at(c, ch.actor)),
				 atomic_load(&c->e.blk->actor[ch.actor].ntrace));
			kill_actor(c, ch.actor);
		} else {
			step(c, ch.actor);
		}
		/* Another spin at the same point moved nothing: the others'
		 * waits stay stale.  Anything else may have. */
		if (ch.kill || !(at_spin_point(c, ch.actor) && parked_at(c, ch.actor) == was))
			for (unsigned a = 0; a < n; a++)
				c->stale[a] = 0;
		if (!ch.kill)
			c->stale[ch.actor] = (uint8_t)at_spin_point(c, ch.actor);
		c->last = ch.actor;
		if (run->failed)
			break;
	}
	run->nsteps = k;
reap:
	for (unsigned a = 0; a < n; a++) {
		struct hc__sched_actor *sa = &c->e.blk->actor[a];
		int status;

		run->ntrace[a] = atomic_load(&sa->ntrace) < HC_SCHED_TRACE ? atomic_load(&sa->ntrace) : HC_SCHED_TRACE;
		memcpy(run->trace[a], sa->trace, run->ntrace[a] * sizeof(sa->trace[0]));
		if (!c->pid[a])
			continue;
		if (c->st[a] != A_DONE)
			kill(c->pid[a], SIGKILL);
		if (waitpid(c->pid[a], &status, 0) == c->pid[a] && c->st[a] == A_DONE &&
		    !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
			why(c, "actor %u (%s) exited with status 0x%x", a, sc->actor_name[a], status);
	}
	if (c->svc) {
		int status;
		kill(c->svc, SIGTERM);
		waitpid(c->svc, &status, 0);
		if (plan->free_point >= 0 && !run->free_killed && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
			run->free_killed = 1; /* the armed one died at its point */
		else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
			why(c, "the service ended with status 0x%x", status);
	} else if (plan->free_point >= 0) {
		run->free_killed = free_recoverer(c, plan->free_point);
	}
	if (!run->failed)
		prove(c);
	for (unsigned i = 0; i < HC_PT__COUNT; i++)
		run->hits[i] = atomic_load(&c->e.blk->hits[i]);
out:
	hc__sched_observe(NULL);
	if (c->e.p)
		hc_pool_detach(c->e.p);
	if (c->e.name[0])
		hc_pool_destroy(c->e.name, NULL, HC_DESTROY_FORCE);
	if (c->e.dir[0])
		hct_rmtree(c->e.dir);
	if (c->e.blk != MAP_FAILED)
		munmap(c->e.blk, sizeof(*c->e.blk));
	if (c->e.sh != MAP_FAILED)
		munmap(c->e.sh, sizeof(*c->e.sh));
	ret = run->failed ? -1 : 0;
	free(c);
	return ret;
}
