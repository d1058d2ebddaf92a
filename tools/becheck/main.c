/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hicache-backend-check - the conformance suite of tests/conformance.c,
 * the one make check runs over the in-tree backends, run against any
 * plugin: named as the library finds it, or a path, with its options.
 * Each case runs in a process of its own (Check's fork mode, set here, not
 * taken from the environment), on a pool of its own and the spec given;
 * what a failed case left in the store is deleted after it.
 * hicache-backend-check(1).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hicache/hicache.h>
#include <hicache/version.h>

#include "../../tests/conformance.h"
#include "../../tests/hct.h"
#include "../cli/cli.h"

#define PROG        "hicache-backend-check"
#define SPEC_MAX    511 /* struct hct_env's spec */
#define TIMEOUT_S   60  /* a case's, by default */
#define EXIT_FAILED 1   /* a case failed, or the loader refused the plugin */
#define EXIT_USAGE  2

struct opts {
	const char *spec;
	int run[HCT_CONF_CASES_MAX]; /* which cases; none chosen: all */
	int chosen;
	unsigned timeout_s;
	int verbose;
};

/* The checked backend: the one target of the cases. */
static const char *the_spec;

static void spec_setup(char *spec, size_t len)
{
	snprintf(spec, len, "%s", the_spec);
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: " PROG " [OPTION]... SPEC\n"
		"Run hicache's conformance suite against an L3 backend plugin: SPEC names it\n"
		"(as HICACHE_BACKEND_PATH and the installed directory find it) or gives the path\n"
		"of its .so, with its options: file:dir=/tmp/x, ./heap.so:max_bytes=0.\n"
		"\n"
		"  -c, --case NAME[,NAME]...  run only these cases (again to add more)\n"
		"  -l, --list                 list the cases and exit\n"
		"  -t, --timeout SECONDS      fail a case that runs longer (default %d)\n"
		"  -v, --verbose              show what the library and the plugin log\n"
		"  -h, --help                 print this and exit\n"
		"  -V, --version              print the version and exit\n"
		"\n"
		"Exit status: 0 every case passed, 1 a case failed or the plugin was refused,\n"
		"2 a usage error.  See hicache-backend-check(1).\n",
		TIMEOUT_S);
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_USAGE;
}

static void list_cases(void)
{
	for (unsigned i = 0; i < hct_conf_ncases(); i++)
		printf("%-18s %s\n", hct_conf_case(i)->name, hct_conf_help(i));
}

/* Marks the cases of a comma-separated list: 0, or the exit status. */
static int choose(struct opts *o, const char *list)
{
	char buf[1024], *save = NULL;
	unsigned i;

	if (snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf))
		return usage_error("--case: the list is longer than %zu characters", sizeof(buf) - 1);
	for (char *name = strtok_r(buf, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
		for (i = 0; i < hct_conf_ncases() && strcmp(hct_conf_case(i)->name, name) != 0; i++)
			;
		if (i == hct_conf_ncases())
			return usage_error("--case: no case '%s' (--list shows them)", name);
		o->run[i] = 1;
		o->chosen = 1;
	}
	if (!o->chosen)
		return usage_error("--case '%s': give the names of cases (--list shows them)", list);
	return 0;
}

/* The options into o: -1 to go on, or the exit status. */
static int parse_options(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "case", required_argument, NULL, 'c' },
		{ "list", no_argument, NULL, 'l' },
		{ "timeout", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c, r;

	*o = (struct opts){ .timeout_s = TIMEOUT_S };
	opterr = 0; /* the messages below say more than getopt's */
	while ((c = getopt_long(argc, argv, ":c:lt:vhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if ((r = choose(o, optarg)) != 0)
				return r;
			break;
		case 'l':
			list_cases();
			return 0;
		case 't':
			if (hc_cli_parse_u32("--timeout", optarg, 1, 86400, &o->timeout_s) < 0)
				return usage_error("%s", hc_cli_error());
			break;
		case 'v':
			o->verbose = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf(PROG " " HICACHE_VERSION_STRING " (plugin ABI version %d)\n", HC_BACKEND_ABI_VERSION);
			return 0;
		case ':':
			return usage_error("%s needs a value: see --help", argv[optind - 1]);
		default:
			return usage_error("unknown option '%s': see --help", argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return usage_error("%s: give one SPEC, e.g. file:dir=/tmp/x or ./heap.so (see --help)",
				   optind == argc ? "no backend" : "more than one backend");
	o->spec = argv[optind];
	if (strlen(o->spec) > SPEC_MAX)
		return usage_error("the spec is longer than %d characters", SPEC_MAX);
	return -1;
}

/* What a probe in a child process found, in memory it shares. */
struct probe {
	int r;
	int sig;  /* the signal that killed the child, or 0 */
	int hung; /* it was killed after the timeout */
	unsigned left;
	struct hc_store_info info; /* its description is the child's: */
	char description[256];
	char err[512];
};

/*
 * hct_conf_probe in a child: the plugin is never loaded into this process,
 * which forks a child for every case (a plugin's threads or global state
 * would not survive the fork).
 */
static void probe(struct probe *pr, unsigned timeout_s)
{
	double end = hct_now() + timeout_s;
	pid_t pid, w;
	int st;

	memset(pr, 0, sizeof(*pr));
	fflush(NULL);
	if ((pid = fork()) < 0) {
		pr->r = -errno;
		snprintf(pr->err, sizeof(pr->err), "fork: %s", strerror(errno));
		return;
	}
	if (pid == 0) {
		pr->r = hct_conf_probe(the_spec, &pr->info, &pr->left, pr->err, sizeof(pr->err));
		if (pr->r == 0)
			snprintf(pr->description, sizeof(pr->description), "%s",
				 pr->info.description ? pr->info.description : "(no description)");
		_exit(0);
	}
	while ((w = waitpid(pid, &st, WNOHANG)) == 0 && hct_now() < end)
		usleep(10000);
	if (w == 0) {
		pr->hung = 1;
		kill(pid, SIGKILL);
		w = waitpid(pid, &st, 0);
	}
	if (w == pid && WIFSIGNALED(st))
		pr->sig = WTERMSIG(st);
}

static void quiet_log(int level, const char *msg, void *arg)
{
	(void)level, (void)msg, (void)arg;
}

static void print_log(int level, const char *msg, void *arg)
{
	(void)arg;
	fprintf(stderr, PROG ": %s: %s\n",
		level <= HC_LOG_ERR    ? "error"
		: level <= HC_LOG_WARN ? "warning"
				       : "info",
		msg);
}

/* Check's own variables would choose cases, log to files or change the
 * timeouts and the fork mode: this program sets what it needs itself. */
static void forget_check_env(void)
{
	static const char *const vars[] = {
		"CK_FORK",          "CK_RUN_SUITE",         "CK_RUN_CASE",          "CK_INCLUDE_TAGS",
		"CK_EXCLUDE_TAGS",  "CK_VERBOSITY",         "CK_DEFAULT_TIMEOUT",   "CK_TIMEOUT_MULTIPLIER",
		"CK_LOG_FILE_NAME", "CK_XML_LOG_FILE_NAME", "CK_TAP_LOG_FILE_NAME", "CK_MAX_MSG_SIZE"
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
}

/* Runs case i in a process of its own: 1 passed, 0 failed (said on stdout). */
static int run_case(const struct opts *o, const char *backend, unsigned i)
{
	const TTest *t = hct_conf_case(i);
	Suite *s = suite_create(PROG);
	TCase *tc = tcase_create(t->name);
	double t0 = hct_now();
	TestResult **res;
	SRunner *sr;
	int passed;

	tcase_set_timeout(tc, o->timeout_s);
	tcase_add_loop_test(tc, t, 0, 1);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_FORK);
	fflush(NULL);
	srunner_run_all(sr, CK_SILENT);
	passed = srunner_ntests_failed(sr) == 0;
	if (passed) {
		printf("PASS  %-18s %6.2f s\n", t->name, hct_now() - t0);
	} else {
		const char *file;
		res = srunner_failures(sr);
		file = strrchr(tr_lfile(res[0]), '/');
		printf("FAIL  %-18s %6.2f s  backend %s, case %s: %s (%s:%d)\n", t->name, hct_now() - t0, backend,
		       t->name, tr_msg(res[0]), file ? file + 1 : tr_lfile(res[0]), tr_lno(res[0]));
		free(res);
	}
	fflush(stdout);
	srunner_free(sr);
	return passed;
}

/* A first probe that could not open the spec: the exit status, said. */
static int open_failed(const struct probe *pr, const char *spec, unsigned timeout_s)
{
	if (pr->hung) {
		printf("FAIL  %-18s backend %s: opening it did not return in %u s\n", "open", spec, timeout_s);
		return EXIT_FAILED;
	}
	if (pr->sig) {
		printf("FAIL  %-18s backend %s: opening it killed the process (signal %d, %s)\n", "open", spec, pr->sig,
		       strsignal(pr->sig));
		return EXIT_FAILED;
	}
	if (pr->r == -ELIBBAD || pr->r == -EPROTO) {
		/* the loader refused the plugin, or its open broke the ABI */
		printf("FAIL  %-18s %s\n", "open", pr->err);
		return EXIT_FAILED;
	}
	return usage_error("cannot open '%s': %s%s", spec, pr->err,
			   pr->r == -EINVAL   ? " (give name[:key=value,...]: the backend's page lists its options)"
			   : pr->r == -ENOENT ? ""
					      : " (is what the backend needs there: its directory, its servers?)");
}

int main(int argc, char **argv)
{
	struct hct_target target = { .setup = spec_setup };
	unsigned ran = 0, failed = 0, left = 0;
	struct probe *pr, *drain;
	struct opts o;
	int r;

	if ((r = parse_options(argc, argv, &o)) >= 0)
		return r;
	forget_check_env();
	hc_set_log(o.verbose ? print_log : quiet_log, NULL);
	the_spec = target.name = o.spec;
	pr = mmap(NULL, 2 * sizeof(*pr), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (pr == MAP_FAILED || hct_conf_targets(&target, 1) < 0) {
		fprintf(stderr, PROG ": cannot map shared memory: %s\n", strerror(errno));
		return EXIT_FAILED;
	}
	drain = pr + 1;
	probe(pr, o.timeout_s);
	if (pr->r < 0 || pr->sig || pr->hung) {
		r = open_failed(pr, o.spec, o.timeout_s);
		goto out;
	}
	printf("backend %s (%s): %s; caps 0x%llx\n", pr->info.name, pr->info.path, pr->description,
	       (unsigned long long)pr->info.caps);
	for (unsigned i = 0; i < hct_conf_ncases(); i++) {
		if (o.chosen && !o.run[i])
			continue;
		ran++;
		failed += !run_case(&o, pr->info.name, i);
		if (hct_conf_logged() == 0)
			continue;
		/* what a failed case left, or what a backend without DELETE keeps */
		probe(drain, o.timeout_s);
		left += drain->left;
		if (drain->r < 0 || drain->sig || drain->hung || drain->err[0])
			printf("      %-18s backend %s: deleting what the case left: %s\n", "", pr->info.name,
			       drain->hung  ? "it hung"
			       : drain->sig ? strsignal(drain->sig)
					    : drain->err);
	}
	if (left)
		printf("%u objects the cases wrote stay in the store: %s\n", left,
		       pr->info.caps & HC_BE_CAP_DELETE ? "they could not be deleted" : "the backend has no DELETE");
	printf("%s: %u of %u cases passed\n", pr->info.name, ran - failed, ran);
	r = failed ? EXIT_FAILED : 0;
out:
	hct_sweep(0); /* the pools of cases and probes that died */
	return r;
}
