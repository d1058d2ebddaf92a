/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sweep.c - the death sweep: every scenario of scenarios.c is run
 * under fixed schedules (sticky, round robin, the scenario's hint, and
 * HC_SWEEP_SEEDS=4 random ones), and each of its victims is killed at
 * every crash point it passes,
 * at the first and at the last time it passes it, one death a run.  The
 * points that only a process outside the schedule reaches (the service, a
 * recoverer) are killed there: the service armed to die at the point, or a
 * free recoverer, after a victim's death, armed the same way.  Each run
 * must keep every invariant the explorer proves (sched.h).
 *
 * It prints a table, point by point: the hits over the fixed runs, the
 * kills, and the result.  It fails on a run that broke an invariant, and
 * on a point that no run killed a process at: a point that no scenario
 * reaches is a step nobody has proven.  A second case checks that
 * hicache-crash(7) lists every point, as points.h says it, and no other.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched.h"

struct tally {
	uint64_t hits;
	unsigned kills, failed;
};

static struct tally tally[HC_PT__COUNT];
static struct hcs_run run;
static unsigned runs, failures;

static unsigned env_u(const char *name, unsigned dflt)
{
	const char *v = getenv(name);

	return v && *v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

/* One run; a failure is reported with all it takes to replay it. */
static void go(const struct hcs_scenario *sc, const struct hcs_plan *pl, const char *how, unsigned pt)
{
	static char sched[16384];

	runs++;
	if (hcs_run(sc, pl, &run) == 0)
		return;
	hcs_schedule_str(&run, sched, sizeof(sched));
	fprintf(stderr, "sweep: %s FAILED, %s\n  replay: HC_EXPLORE_REPLAY='%s:%s' tests/test_explore\n%s%s\n",
		sc->name, how, sc->name, sched, run.deaths, run.why);
	if (pt < HC_PT__COUNT)
		tally[pt].failed++;
	failures++;
}

static const char *policy_name(const struct hcs_plan *pl, char *buf, size_t len)
{
	if (pl->nuntil)
		snprintf(buf, len, "the scenario's hint");
	else if (pl->policy == HCS_PCT)
		snprintf(buf, len, "PCT seed %llu", (unsigned long long)pl->seed);
	else
		snprintf(buf, len, "%s", pl->policy == HCS_STICKY ? "sticky" : "round robin");
	return buf;
}

/*
 * One death under base: actor a (-1: none) at its nth pass of vpt, and, if
 * fp >= 0, the free process (the service, or a recoverer after the actors)
 * at fp.  1 if the death asked for last happened.
 */
static int kill_run(const struct hcs_scenario *sc, const struct hcs_plan *base, int a, unsigned vpt, unsigned nth,
		    int fp)
{
	struct hcs_plan pl = *base;
	char how[200], pol[32];
	int n;

	pl.kill_actor = a;
	pl.kill_point = vpt;
	pl.kill_nth = nth;
	pl.free_point = fp;
	n = snprintf(how, sizeof(how), "%s", policy_name(base, pol, sizeof(pol)));
	if (a >= 0)
		n += snprintf(how + n, sizeof(how) - (size_t)n, ", actor %d (%s) killed at %s, pass %u", a,
			      sc->actor_name[a], hc__pt_name(vpt), nth);
	if (fp >= 0)
		snprintf(how + n, sizeof(how) - (size_t)n, ", %s killed at %s",
			 sc->service ? "the service" : "a recoverer", hc__pt_name((unsigned)fp));
	go(sc, &pl, how, fp >= 0 ? (unsigned)fp : vpt);
	return fp >= 0 ? run.free_killed : run.deaths[0] != 0;
}

/* What a scenario's sweep has done so far. */
struct sweep {
	const struct hcs_scenario *sc;
	unsigned done[HCS_ACTORS][HC_PT__COUNT]; /* a victim was killed (or tried) there */
	unsigned killed[HC_PT__COUNT];
	uint64_t other[HC_PT__COUNT]; /* a process outside the schedule passed it */
	unsigned f0;
	unsigned steps; /* the longest fixed run */
};

/* One fixed run under base, then each victim killed at every point it
 * passed there that no earlier base reached: first pass and last. */
static void from_base(struct sweep *w, const struct hcs_plan *base)
{
	const struct hcs_scenario *sc = w->sc;
	static unsigned passes[HCS_ACTORS][HC_PT__COUNT];
	char pol[32];

	go(sc, base, policy_name(base, pol, sizeof(pol)), HC_PT__COUNT);
	w->steps = run.nsteps > w->steps ? run.nsteps : w->steps;
	memset(passes, 0, sizeof(passes));
	for (unsigned a = 0; a < sc->nactors; a++)
		for (unsigned i = 0; i < run.ntrace[a]; i++)
			passes[a][run.trace[a][i]]++;
	for (unsigned i = 0; i < HC_PT__COUNT; i++) {
		uint64_t mine = 0;
		for (unsigned a = 0; a < sc->nactors; a++)
			mine += passes[a][i];
		tally[i].hits += run.hits[i];
		w->other[i] |= run.hits[i] > mine; /* the controller's, the service's */
	}
	for (unsigned a = 0; a < sc->nactors; a++) {
		if (!(sc->victims >> a & 1))
			continue;
		for (unsigned pt = 0; pt < HC_PT__COUNT && failures - w->f0 < 3; pt++) {
			unsigned n = passes[a][pt];
			if (!n || w->done[a][pt])
				continue;
			w->done[a][pt] = 1;
			w->killed[pt] += (unsigned)kill_run(sc, base, (int)a, pt, 1, -1);
			if (n > 1)
				w->killed[pt] += (unsigned)kill_run(sc, base, (int)a, pt, n, -1);
		}
	}
}

static void sweep(const struct hcs_scenario *sc)
{
	unsigned seeds = env_u("HC_SWEEP_SEEDS", 4), r0 = runs, nkills = 0;
	static struct sweep w;
	double t0 = hct_now();

	memset(&w, 0, sizeof(w));
	w.sc = sc;
	w.f0 = failures;
	for (unsigned b = 0; b < 2 + seeds && failures - w.f0 < 3; b++) {
		struct hcs_plan base = { .policy = b == 0   ? HCS_STICKY
						   : b == 1 ? HCS_ROUND
							    : HCS_PCT,
					 .seed = b - 1,
					 .pct_depth = 3,
					 .pct_steps = w.steps,
					 .kill_actor = -1,
					 .free_point = -1 };
		from_base(&w, &base);
	}
	if (sc->nhint) {
		struct hcs_plan base = { .policy = HCS_STICKY,
					 .kill_actor = -1,
					 .free_point = -1,
					 .until = sc->hint,
					 .nuntil = sc->nhint };
		from_base(&w, &base);
	}
	/* The points only others reached: kill the service there, or a
	 * recoverer of a victim that died at one of a few points. */
	for (unsigned pt = 0; pt < HC_PT__COUNT && failures - w.f0 < 3; pt++) {
		struct hcs_plan base = { .policy = HCS_STICKY, .kill_actor = -1, .free_point = -1 };
		unsigned tries = 0;

		if (!w.other[pt] || w.killed[pt])
			continue;
		if (sc->service) {
			w.killed[pt] += (unsigned)kill_run(sc, &base, -1, 0, 0, (int)pt);
			continue;
		}
		for (unsigned a = 0; a < sc->nactors && !w.killed[pt]; a++)
			for (unsigned v = 0; v < HC_PT__COUNT && !w.killed[pt] && tries < 6; v++) {
				if (!(sc->victims >> a & 1) || !w.done[a][v])
					continue;
				tries++;
				w.killed[pt] += (unsigned)kill_run(sc, &base, (int)a, v, 1, (int)pt);
			}
	}
	for (unsigned pt = 0; pt < HC_PT__COUNT; pt++) {
		tally[pt].kills += w.killed[pt];
		nkills += w.killed[pt];
	}
	fprintf(stderr, "sweep: %-24s %4u runs, %4u deaths, %.1f s, %u failed\n", sc->name, runs - r0, nkills,
		hct_now() - t0, failures - w.f0);
}

START_TEST(every_point)
{
	unsigned unkilled = 0;

	for (unsigned i = 0; i < hcs_nscenarios; i++)
		sweep(hcs_scenarios[i]);
	fprintf(stderr, "\n%-20s %10s %6s  %s\n", "point", "hits", "kills", "result");
	for (unsigned pt = 0; pt < HC_PT__COUNT; pt++) {
		const char *res = tally[pt].failed ? "FAILED" : tally[pt].kills ? "ok" : "never killed";
		fprintf(stderr, "%-20s %10llu %6u  %s\n", hc__pt_name(pt), (unsigned long long)tally[pt].hits,
			tally[pt].kills, res);
		unkilled += !tally[pt].kills;
	}
	fprintf(stderr, "%u runs, %u failed; %u of %d points never killed\n", runs, failures, unkilled, HC_PT__COUNT);
	ck_assert_msg(failures == 0, "%u runs broke an invariant (see stderr)", failures);
	ck_assert_msg(unkilled == 0, "%u crash points were never killed at: a scenario must reach them", unkilled);
}
END_TEST

/* hicache-crash(7) has each point as ".B name" and its text, the first
 * letter raised, a full stop added, '-' as "\-". */
START_TEST(man_page_lists_every_point)
{
	char path[1024], *man = NULL, entry[512];
	const char *src = getenv("HC_SRCDIR");
	size_t len = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/man/hicache-crash.7", src && *src ? src : ".");
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: cannot open", path);
	ck_assert_int_ge(getdelim(&man, &len, '\0', f), 1);
	fclose(f);
	for (unsigned pt = 0; pt < HC_PT__COUNT; pt++) {
		const char *w = hc__pt_what(pt);
		size_t n = (size_t)snprintf(entry, sizeof(entry), ".TP\n.B %s\n", hc__pt_name(pt));

		for (size_t i = 0; w[i] && n + 3 < sizeof(entry); i++) {
			if (w[i] == '-')
				entry[n++] = '\\';
			entry[n++] = i == 0 ? (char)toupper((unsigned char)w[i]) : w[i];
		}
		entry[n++] = '.';
		entry[n++] = '\n';
		entry[n] = 0;
		ck_assert_msg(strstr(man, entry) != NULL, "%s does not list point %s as points.h says it:\n%s", path,
			      hc__pt_name(pt), entry);
	}
	/* And nothing more: an entry named like a point is one of points.h. */
	for (const char *e = strstr(man, ".TP\n.B "); e; e = strstr(e + 1, ".TP\n.B ")) {
		const char *name = e + strlen(".TP\n.B ");
		size_t n = strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_");
		unsigned pt;

		if (n == 0 || name[n] != '\n')
			continue; /* not a point's entry (HC_CRASH, a flag) */
		for (pt = 0; pt < HC_PT__COUNT; pt++)
			if (strlen(hc__pt_name(pt)) == n && !strncmp(hc__pt_name(pt), name, n))
				break;
		ck_assert_msg(pt < HC_PT__COUNT, "%s lists a point '%.*s' that points.h does not have", path, (int)n,
			      name);
	}
	free(man);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sweep");
	TCase *tc = tcase_create("deaths");
	TCase *doc = tcase_create("documented");

	tcase_set_timeout(tc, 900);
	tcase_add_test(tc, every_point);
	tcase_add_test(doc, man_page_lists_every_point);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, doc);
	return hct_run(s);
}
