/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hicache-memd - the memory server of the mori backend (hicache-memd(8)):
 * options, the log, and the order things start and stop in.
 *
 * It is ready (region mapped and prefaulted, UCX up, listening) when it
 * prints its one line to stdout; everything else goes to stderr, UCX's own
 * messages included (stdout is pointed at stderr once the line's fd is set
 * aside), so whoever reads that line reads nothing else there.
 *
 * Exit status: 0 after SIGTERM or SIGINT, 1 when the region, UCX or a
 * socket failed, 2 for a wrong option.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <hicache/version.h>

#include "memd.h"

#define EXIT_USAGE 2

/* ---- the log */

int memd_log_level = MEMD_INFO;

uint64_t memd_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static const char *level_name(int level)
{
	return level <= MEMD_ERR ? "error" : level <= MEMD_WARN ? "warning" : level <= MEMD_INFO ? "info" : "debug";
}

/* One write(2) a line, so that UCX's lines on the same fd never cut it. */
static void emit(int level, const char *fmt, va_list ap, uint64_t suppressed)
{
	char line[1200];
	int n = snprintf(line, sizeof(line), MEMD_PROG ": %s: ", level_name(level));

	n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	if ((size_t)n < sizeof(line) && suppressed)
		n += snprintf(line + n, sizeof(line) - (size_t)n, " (and %" PRIu64 " more like it, not logged)",
			      suppressed);
	if ((size_t)n >= sizeof(line) - 1)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	/* nothing sensible to do when the log itself fails */
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		errno = 0;
}

void memd_log(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > memd_log_level)
		return;
	va_start(ap, fmt);
	emit(level, fmt, ap, 0);
	va_end(ap);
}

void memd_log_limited(struct memd_ratelimit *rl, uint64_t now_ms, int level, const char *fmt, ...)
{
	va_list ap;
	uint64_t sec = now_ms / 1000, suppressed;

	if (level > memd_log_level)
		return;
	if (sec != rl->sec) {
		rl->sec = sec;
		rl->lines = 0;
	}
	if (rl->lines >= MEMD_RATE_LINES) {
		rl->suppressed++;
		return;
	}
	rl->lines++;
	suppressed = rl->suppressed;
	rl->suppressed = 0;
	va_start(ap, fmt);
	emit(level, fmt, ap, suppressed);
	va_end(ap);
}

/* ---- options */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: " MEMD_PROG " --size SIZE [OPTION]...\n"
		"Serve a region of memory to the mori backend of hicache: its clients read and\n"
		"write objects in it by one-sided UCX transfers, and ask where over TCP.\n"
		"\n"
		"  --size SIZE             the region's bytes (K, M, G or T suffix; rounded up to 4 KiB)\n"
		"  --listen HOST:PORT      the control port (default 127.0.0.1:%d; port 0: any free one)\n"
		"  --backing ucx|file:PATH who allocates the region: UCX (default, shared memory that\n"
		"                          UCX's shm transports reach one-sidedly), or a file this\n"
		"                          creates at PATH (hugetlbfs, tmpfs) and removes at once\n"
		"  --lease-ms N            how long a lease or an allocation lasts (default %u)\n"
		"  --batch-max N           items a client may send in one request (1 to %u, default %u)\n"
		"  --max-clients N         control connections at once (default %u)\n"
		"  --metrics-listen HOST:PORT  serve GET /metrics (Prometheus) there\n"
		"  --log-level LEVEL       err, warn, info (default) or debug\n"
		"  --help                  print this and exit\n"
		"  --version               print the version and exit\n"
		"\n"
		"It prints \"" MEMD_PROG ": listening on HOST:PORT\" on stdout once it serves.\n"
		"See hicache-memd(8).\n",
		MEMD_DEFAULT_PORT, MEMD_LEASE_MS, HC_MW_BATCH_MAX, HC_MW_BATCH_MAX, MEMD_MAX_CLIENTS);
}

/* One error line about an option: the exit status of a usage error. */
__attribute__((format(printf, 1, 2))) static int bad_option(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	emit(MEMD_ERR, fmt, ap, 0);
	va_end(ap);
	return EXIT_USAGE;
}

/* An unsigned number in [min, max]: 0, or -EINVAL. */
static int parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

/* "64G", "512M", "4096": bytes, rounded up to HC_MW_ALIGN; 0, or -EINVAL. */
static int parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	unsigned long long v;
	const char *u;
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end) {
		if (end[1] || !(u = strchr(units, end[0] & ~0x20)))
			return -EINVAL;
		for (long i = 0; i <= u - units; i++) {
			if (v > UINT64_MAX / 1024)
				return -EINVAL;
			v *= 1024;
		}
	}
	if (v == 0 || v > UINT64_MAX - HC_MW_ALIGN)
		return -EINVAL;
	*out = (v + HC_MW_ALIGN - 1) / HC_MW_ALIGN * HC_MW_ALIGN;
	return 0;
}

/* HOST:PORT (HOST may be [v6]) with a numeric port, resolved into a: 0,
 * or the exit status after saying what is wrong. */
static int parse_addr(struct memd_addr *a, const char *s, const char *example)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai;
	const char *colon = strrchr(s, ':');
	char host[256];
	size_t hl;
	uint32_t port;
	int r;

	if (!colon || colon == s || parse_u32(colon + 1, 0, 65535, &port) < 0)
		return bad_option("%s '%s': give HOST:PORT, e.g. %s (port 0: any free one)", a->option, s, example);
	hl = (size_t)(colon - s);
	if (s[0] == '[' && hl >= 2 && s[hl - 1] == ']') {
		s++;
		hl -= 2;
	}
	if (hl >= sizeof(host))
		return bad_option("%s: the host is longer than %zu characters", a->option, sizeof(host) - 1);
	memcpy(host, s, hl);
	host[hl] = '\0';
	if ((r = getaddrinfo(host, colon + 1, &hints, &ai)) != 0)
		return bad_option("%s '%s': cannot resolve '%s': %s; give an address of this host", a->option, a->text,
				  host, gai_strerror(r));
	memcpy(&a->ss, ai->ai_addr, ai->ai_addrlen);
	a->len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

enum { OPT_LISTEN = 256, OPT_SIZE, OPT_BACKING, OPT_LEASE, OPT_BATCH, OPT_CLIENTS, OPT_METRICS, OPT_LOG };

/* The options into o: -1 to go on, or the exit status. */
static int parse_options(int argc, char **argv, struct memd_opts *o)
{
	static const struct option longopts[] = {
		{ "listen", required_argument, NULL, OPT_LISTEN },
		{ "size", required_argument, NULL, OPT_SIZE },
		{ "backing", required_argument, NULL, OPT_BACKING },
		{ "lease-ms", required_argument, NULL, OPT_LEASE },
		{ "batch-max", required_argument, NULL, OPT_BATCH },
		{ "max-clients", required_argument, NULL, OPT_CLIENTS },
		{ "metrics-listen", required_argument, NULL, OPT_METRICS },
		{ "log-level", required_argument, NULL, OPT_LOG },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const
		levels[] = { [MEMD_ERR] = "err", [MEMD_WARN] = "warn", [MEMD_INFO] = "info", [MEMD_DEBUG] = "debug" };
	int c, i;

	*o = (struct memd_opts){ .listen = { .option = "--listen", .text = "127.0.0.1:7470" },
				 .metrics = { .option = "--metrics-listen" },
				 .lease_ms = MEMD_LEASE_MS,
				 .batch_max = HC_MW_BATCH_MAX,
				 .max_clients = MEMD_MAX_CLIENTS };
	opterr = 0; /* the messages below say more than getopt's */
	while ((c = getopt_long(argc, argv, ":hV", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_LISTEN:
			o->listen.text = optarg;
			break;
		case OPT_SIZE:
			if (parse_size(optarg, &o->size) < 0)
				return bad_option(
					"--size '%s': give the region's bytes, more than 0, with an optional K, M, G or T suffix, e.g. 64G",
					optarg);
			break;
		case OPT_BACKING:
			if (strcmp(optarg, "ucx") == 0)
				o->backing_file = NULL;
			else if (strncmp(optarg, "file:", 5) == 0 && optarg[5])
				o->backing_file = optarg + 5;
			else
				return bad_option(
					"--backing '%s': give ucx, or file:PATH for a file to create (on a hugetlbfs or tmpfs)",
					optarg);
			break;
		case OPT_LEASE:
			if (parse_u32(optarg, 1, MEMD_LEASE_MS_MAX, &o->lease_ms) < 0)
				return bad_option("--lease-ms '%s': give milliseconds from 1 to %u", optarg,
						  MEMD_LEASE_MS_MAX);
			break;
		case OPT_BATCH:
			if (parse_u32(optarg, 1, HC_MW_BATCH_MAX, &o->batch_max) < 0)
				return bad_option("--batch-max '%s': give a number of items from 1 to %u", optarg,
						  HC_MW_BATCH_MAX);
			break;
		case OPT_CLIENTS:
			if (parse_u32(optarg, 1, 1u << 20, &o->max_clients) < 0)
				return bad_option("--max-clients '%s': give a number from 1 to %u", optarg, 1u << 20);
			break;
		case OPT_METRICS:
			o->metrics.text = optarg;
			break;
		case OPT_LOG:
			for (i = 0; i < (int)(sizeof(levels) / sizeof(levels[0])); i++)
				if (levels[i] && strcmp(optarg, levels[i]) == 0)
					break;
			if (i == (int)(sizeof(levels) / sizeof(levels[0])))
				return bad_option("--log-level '%s': give err, warn, info or debug", optarg);
			memd_log_level = i;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf(MEMD_PROG " " HICACHE_VERSION_STRING " (control protocol versions %u to %u)\n",
			       HC_MW_VERSION_MIN, HC_MW_VERSION_MAX);
			return 0;
		case ':':
			return bad_option("%s needs a value: see --help", argv[optind - 1]);
		default:
			return bad_option("unknown option '%s': see --help", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return bad_option("unexpected argument '%s': every setting is an option; see --help", argv[optind]);
	if (!o->size)
		return bad_option("--size is missing: give the region's bytes, e.g. --size 64G");
	/* after the loop: the last --listen given is the one resolved */
	if ((c = parse_addr(&o->listen, o->listen.text, "127.0.0.1:7470")) != 0 ||
	    (o->metrics.text && (c = parse_addr(&o->metrics, o->metrics.text, "127.0.0.1:9464")) != 0))
		return c;
	return -1;
}

int main(int argc, char **argv)
{
	static struct memd_dir d;
	struct memd_region r = { .efd = -1 };
	struct memd_opts o;
	struct memd_dir_params dp;
	uint64_t rnd[2];
	sigset_t set;
	int ret, ready_fd;

	if ((ret = parse_options(argc, argv, &o)) >= 0)
		return ret;
	/* Before UCX starts its threads, so they inherit the mask and only the
	 * signalfd sees these. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	signal(SIGPIPE, SIG_IGN); /* a closed socket or stdout is an error, not a death */
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0) {
		memd_log(MEMD_ERR, "cannot block SIGTERM and SIGINT: %s", strerror(errno));
		return 1;
	}
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		memd_log(MEMD_ERR, "cannot read random bytes for the instance id: %s", strerror(errno));
		return 1;
	}
	/* stdout carries the ready line and nothing else: UCX prints there */
	fflush(stdout);
	ready_fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
	if (ready_fd >= 0)
		dup2(STDERR_FILENO, STDOUT_FILENO);

	dp = (struct memd_dir_params){ .size = o.size, .max_leases = MEMD_LEASES_MAX, .seed = rnd[1] };
	if ((ret = memd_dir_init(&d, &dp)) < 0) {
		memd_log(MEMD_ERR, "cannot set up the directory: %s", strerror(-ret));
		ret = 1;
		goto out;
	}
	if (memd_region_open(&r, &o) < 0) {
		ret = 1;
		goto out_dir;
	}
	memd_log(MEMD_INFO,
		 MEMD_PROG " " HICACHE_VERSION_STRING ", pid %d: a region of %" PRIu64 " bytes (%s), leases of %u ms",
		 (int)getpid(), o.size, o.backing_file ? o.backing_file : "allocated by UCX", o.lease_ms);
	ret = memd_serve(&o, &r, &d, rnd[0], ready_fd) < 0 ? 1 : 0;
	ready_fd = -1; /* closed by memd_serve */
	memd_region_close(&r);
out_dir:
	memd_dir_fini(&d);
out:
	if (ready_fd >= 0)
		close(ready_fd);
	return ret;
}
