/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_explore.c - the schedule explorer (in the manner of CHESS): every
 * scenario of scenarios.c is run under every interleaving of its actors
 * with at most HC_EXPLORE_PREEMPT preemptions (a switch away from an actor
 * that could go on) and at most one kill of a victim, at any point, by a
 * stateless depth-first search; then under random PCT schedules from
 * seeds.  Every run must keep every invariant (sched.h).  A failure prints
 * the scenario, the seed and the schedule;
 *   HC_EXPLORE_REPLAY='scenario:0*3 1*2 k1 0*9' tests/test_explore
 * runs that one schedule again, exactly (HC_EXPLORE_STEPS=1 also prints
 * each step: who ran, from which point; HC_EXPLORE_HINT=1 follows the
 * scenario's hint after the schedule).
 *
 * make check runs a bounded pass: HC_EXPLORE_PREEMPT=1, at most
 * HC_EXPLORE_MAX=3000 schedules and HC_EXPLORE_SECONDS=10 (a quarter under
 * HC_QUICK) per scenario, then HC_EXPLORE_SEEDS=16 random ones; make
 * check-long searches two preemptions deep with many more seeds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched.h"

static unsigned env_u(const char *name, unsigned dflt)
{
	const char *v = getenv(name);

	return v && *v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

struct frame {
	uint8_t enabled, calm;
	struct hcs_choice chosen;
	uint8_t tried_run, tried_kill;
};

struct dfs {
	struct frame f[HCS_MAX_STEPS];
	unsigned n;
	struct hcs_choice forced[HCS_MAX_STEPS];
};

static struct hcs_run run;
static struct dfs dfs;
static unsigned failures;

static void report(const struct hcs_scenario *sc, const char *how, const struct hcs_run *r)
{
	static char sched[16384];

	hcs_schedule_str(r, sched, sizeof(sched));
	fprintf(stderr,
		"explore: %s FAILED under %s\n  schedule: %s\n  replay: HC_EXPLORE_REPLAY='%s:%s' %s/tests/test_explore\n%s%s",
		sc->name, how, sched, sc->name, sched, getenv("HC_BUILDDIR") ? getenv("HC_BUILDDIR") : ".", r->deaths,
		r->why);
	failures++;
}

/* Preemptions and kills in the first i frames. */
static void spent(const struct dfs *d, unsigned i, unsigned *pre, unsigned *kills)
{
	*pre = *kills = 0;
	for (unsigned k = 0; k < i; k++) {
		const struct frame *f = &d->f[k];
		if (f->chosen.kill) {
			(*kills)++;
			continue;
		}
		if (k > 0) {
			unsigned prev = d->f[k - 1].chosen.actor;
			if (!d->f[k - 1].chosen.kill && f->chosen.actor != prev && (f->calm >> prev & 1))
				(*pre)++;
		}
	}
}

/* The next schedule: the deepest frame with an alternative left within
 * the bounds.  0 when the tree is done. */
static int backtrack(struct dfs *d, const struct hcs_scenario *sc, unsigned max_pre, unsigned max_kills)
{
	while (d->n > 0) {
		unsigned i = d->n - 1, pre, kills;
		struct frame *f = &d->f[i];
		int prev = i > 0 && !d->f[i - 1].chosen.kill ? d->f[i - 1].chosen.actor : -1;

		spent(d, i, &pre, &kills);
		for (unsigned a = 0; a < sc->nactors; a++) {
			unsigned cost = prev >= 0 && (unsigned)prev != a && (f->calm >> prev & 1);
			if (!(f->calm >> a & 1) || (f->tried_run >> a & 1) || pre + cost > max_pre)
				continue;
			f->tried_run |= (uint8_t)(1u << a);
			f->chosen = (struct hcs_choice){ (uint8_t)a, 0 };
			goto found;
		}
		for (unsigned a = 0; a < sc->nactors && kills < max_kills; a++) {
			if (!(f->enabled >> a & 1) || !(sc->victims >> a & 1) || (f->tried_kill >> a & 1))
				continue;
			f->tried_kill |= (uint8_t)(1u << a);
			f->chosen = (struct hcs_choice){ (uint8_t)a, 1 };
			goto found;
		}
		d->n--;
	}
	return 0;
found:
	for (unsigned k = 0; k < d->n; k++)
		d->forced[k] = d->f[k].chosen;
	return 1;
}

/* Frames from a run: those past the forced prefix are new. */
static int absorb(struct dfs *d, const struct hcs_run *r, unsigned forced)
{
	int odd = r->diverged;

	for (unsigned i = 0; i < forced && i < r->nsteps; i++)
		odd |= d->f[i].enabled != r->enabled[i];
	for (unsigned i = forced; i < r->nsteps; i++) {
		struct frame *f = &d->f[i];
		f->enabled = r->enabled[i];
		f->calm = r->enabled[i] & ~r->spinning[i]; /* all spinning: no choice, they take turns */
		f->chosen = r->chosen[i];
		f->tried_run = r->chosen[i].kill ? 0 : (uint8_t)(1u << r->chosen[i].actor);
		f->tried_kill = r->chosen[i].kill ? (uint8_t)(1u << r->chosen[i].actor) : 0;
	}
	d->n = r->nsteps;
	return odd;
}

static void explore(const struct hcs_scenario *sc)
{
	unsigned max_pre = env_u("HC_EXPLORE_PREEMPT", 1), max = env_u("HC_EXPLORE_MAX", 3000);
	unsigned seconds = env_u("HC_EXPLORE_SECONDS", (unsigned)hct_seconds(10)),
		 seeds = env_u("HC_EXPLORE_SEEDS", 16);
	struct hcs_plan plan = { .policy = HCS_STICKY, .kill_actor = -1, .free_point = -1 };
	unsigned schedules = 0, odd = 0, steps = 0, longest = 0, f0 = failures, pct = 0;
	double t0 = hct_now();
	int more = 1;

	memset(&dfs, 0, sizeof(dfs));
	while (more && schedules < max && hct_now() - t0 < seconds) {
		unsigned forced = plan.nforced;
		if (hcs_run(sc, &plan, &run) < 0)
			report(sc, "the bounded search", &run);
		schedules++;
		steps += run.nsteps;
		longest = run.nsteps > longest ? run.nsteps : longest;
		odd += (unsigned)absorb(&dfs, &run, forced);
		more = backtrack(&dfs, sc, max_pre, 1);
		plan.forced = dfs.forced;
		plan.nforced = dfs.n;
		if (failures - f0 >= 3)
			break;
	}
	/* The scenario's hint: the race it is there for, which the bound
	 * may not reach. */
	if (sc->nhint) {
		struct hcs_plan h = { .policy = HCS_STICKY,
				      .kill_actor = -1,
				      .free_point = -1,
				      .until = sc->hint,
				      .nuntil = sc->nhint };
		if (hcs_run(sc, &h, &run) < 0)
			report(sc, "its hint", &run);
		schedules++;
	}
	/* PCT: random priorities, three change points, one kill at a random step. */
	for (unsigned s = 1; s <= seeds && hct_now() - t0 < seconds + seconds / 2 && failures - f0 < 3; s++) {
		struct hcs_plan p = { .policy = HCS_PCT,
				      .seed = s,
				      .pct_depth = 3,
				      .pct_steps = longest,
				      .kill_actor = -1,
				      .free_point = -1 };
		char how[64];

		if (hcs_run(sc, &p, &run) < 0) {
			snprintf(how, sizeof(how), "PCT seed %u", s);
			report(sc, how, &run);
		}
		pct++;
	}
	fprintf(stderr,
		"explore: %-24s %4u schedules (%s), %3u PCT seeds, %6u steps, longest %4u, %u diverged, %.1f s, %u failed\n",
		sc->name, schedules, more ? "bound cut short" : "all within the bound", pct, steps, longest, odd,
		hct_now() - t0, failures - f0);
}

START_TEST(scenario)
{
	explore(hcs_scenarios[_i]);
	ck_assert_msg(failures == 0, "%s: %u schedules broke an invariant (see stderr)", hcs_scenarios[_i]->name,
		      failures);
}
END_TEST

static int replay(const char *spec);

/* HC_EXPLORE_REPLAY: one run, inside a test (the helpers assert). */
START_TEST(replay_one)
{
	ck_assert_int_eq(replay(getenv("HC_EXPLORE_REPLAY")), 0);
}
END_TEST

static int replay(const char *spec)
{
	static struct hcs_choice forced[HCS_MAX_STEPS];
	const char *colon = strchr(spec, ':');
	struct hcs_plan plan = { .policy = HCS_STICKY, .forced = forced, .kill_actor = -1, .free_point = -1 };
	char sched[16384];
	int n;

	for (unsigned i = 0; colon && i < hcs_nscenarios; i++) {
		if (strncmp(hcs_scenarios[i]->name, spec, (size_t)(colon - spec)) ||
		    hcs_scenarios[i]->name[colon - spec])
			continue;
		if ((n = hcs_schedule_parse(colon + 1, forced, HCS_MAX_STEPS)) < 0) {
			fprintf(stderr,
				"HC_EXPLORE_REPLAY: the schedule after ':' is not 'ACTOR*N' and 'kACTOR' words\n");
			return 2;
		}
		plan.nforced = (unsigned)n;
		if (getenv("HC_EXPLORE_HINT")) { /* the scenario's hint after the schedule */
			plan.until = hcs_scenarios[i]->hint;
			plan.nuntil = hcs_scenarios[i]->nhint;
		}
		n = hcs_run(hcs_scenarios[i], &plan, &run);
		hcs_schedule_str(&run, sched, sizeof(sched));
		if (getenv("HC_EXPLORE_STEPS")) /* each step: who ran, from which point */
			for (unsigned k = 0; k < run.nsteps; k++)
				fprintf(stderr, "  step %u: %s%u (%s) from %s\n", k, run.chosen[k].kill ? "kill " : "",
					run.chosen[k].actor, hcs_scenarios[i]->actor_name[run.chosen[k].actor],
					run.at[k][run.chosen[k].actor] < HC_PT__COUNT
						? hc__pt_name(run.at[k][run.chosen[k].actor])
						: "the start");
		fprintf(stderr, "%s: %s%s\n  schedule: %s\n%s%s", hcs_scenarios[i]->name, n ? "FAILED" : "ok",
			run.diverged ? " (the run left the schedule: it is not this build's)" : "", sched, run.deaths,
			run.why);
		return n ? 1 : 0;
	}
	fprintf(stderr, "HC_EXPLORE_REPLAY: give SCENARIO:SCHEDULE; the scenarios are:");
	for (unsigned i = 0; i < hcs_nscenarios; i++)
		fprintf(stderr, " %s", hcs_scenarios[i]->name);
	fprintf(stderr, "\n");
	return 2;
}

int main(void)
{
	Suite *s = suite_create("explore");
	TCase *tc = tcase_create("schedules");
	const char *r = getenv("HC_EXPLORE_REPLAY");

	tcase_set_timeout(tc, 600);
	if (r && *r)
		tcase_add_test(tc, replay_one);
	else
		tcase_add_loop_test(tc, scenario, 0, (int)hcs_nscenarios);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
