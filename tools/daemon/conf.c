/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conf.c - hicached's settings.  One table names every option
 * once: its command-line name, its section and key in the config file
 * (hicache.conf(5)), its type, the field it sets and its help.  The
 * command line (getopt_long), the config file (inih) and --help are all
 * made from it, so a new service option is one line here.
 *
 * The config file is read first, then the command line, whose options
 * override the file's.  Within one source an option given twice is an
 * error (but --kv and --state, which add up).
 */
#include <errno.h>
#include <getopt.h>
#include <ini.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hicached.h"

#define CONF_MAX_BYTES (1 << 20) /* a config file is settings: a few KiB */

enum opt_type {
	T_STRING,  /* const char * */
	T_U32,     /* unsigned, in [min, max] */
	T_CHOICE,  /* int, one of choices[] */
	T_POOL,    /* a pool option (cli.h): pool_opt says which */
	T_CMDLINE, /* --config, --help, --version: the command line only */
};

struct choice {
	const char *name;
	int value;
};

struct opt {
	const char *name;          /* --name (T_POOL: NULL, cli.h's) */
	const char *section, *key; /* [section] key = ... (NULL: command line only) */
	enum opt_type type;
	size_t off;                    /* the field of struct hcd_conf it sets */
	uint32_t min, max;             /* T_U32 */
	const struct choice *choices;  /* T_CHOICE, ending with { NULL } */
	enum hc_cli_pool_opt pool_opt; /* T_POOL */
	const char *arg, *help;        /* for --help; T_POOL: NULL takes cli.h's */
};

_Static_assert(sizeof(unsigned) == sizeof(uint32_t), "T_U32 fields are unsigned");

static const struct choice log_levels[] = {
	{ "err", HC_LOG_ERR }, { "warn", HC_LOG_WARN }, { "info", HC_LOG_INFO }, { "debug", HCD_LOG_DEBUG },
	{ NULL, 0 },
};

static const struct choice write_policies[] = {
	{ "write_through", HC_WRITE_THROUGH },
	{ "write_through_selective", HC_WRITE_THROUGH_SELECTIVE },
	{ "write_back", HC_WRITE_BACK },
	{ "write_none", HC_WRITE_NONE },
	{ NULL, 0 },
};

_Static_assert(sizeof(enum hc_write_policy) == sizeof(int), "T_CHOICE fields are int");

#define F(field) offsetof(struct hcd_conf, field)
/* a pool option: its name, argument and help are cli.h's */
#define POOL(opt, key_)                                                                                                \
	{                                                                                                              \
		NULL, "pool", key_, T_POOL, 0, 0, 0, NULL, opt, NULL, NULL                                             \
	}

static const struct choice booleans[] = {
	{ "true", 1 }, { "false", 0 }, { "yes", 1 }, { "no", 0 }, { NULL, 0 },
};

static const struct opt opts[] = {
	{ "config", NULL, NULL, T_CMDLINE, F(config), .arg = "FILE",
	  .help = "read settings from FILE (hicache.conf(5)); options given here override it" },
	{ "help", NULL, NULL, T_CMDLINE, 0, .help = "show this help and exit" },
	{ "version", NULL, NULL, T_CMDLINE, 0, .help = "show the version and exit" },
	{ "pool", "pool", "name", T_STRING, F(pool), .arg = "NAME",
	  .help = "the pool to serve; created from the options below if it does not exist" },
	POOL(HC_CLI_POOL_DIR, "dir"),
	POOL(HC_CLI_POOL_MODEL, "model"),
	POOL(HC_CLI_POOL_PAGE_TOKENS, "page_tokens"),
	POOL(HC_CLI_POOL_TP, "tp"),
	POOL(HC_CLI_POOL_HEAD_GROUPS, "head_groups"),
	POOL(HC_CLI_POOL_PAGES, "pages"),
	POOL(HC_CLI_POOL_SIZE, "size"),
	POOL(HC_CLI_POOL_KV, "kv"),
	POOL(HC_CLI_POOL_STATE, "state"),
	POOL(HC_CLI_POOL_GROUP, "group"),
	POOL(HC_CLI_POOL_MODE, "mode"),
	POOL(HC_CLI_POOL_MAX_RANKS, "max_ranks"),
	POOL(HC_CLI_POOL_QUARANTINE_MS, "quarantine_ms"),
	POOL(HC_CLI_POOL_NUMA, "numa"),
	POOL(HC_CLI_POOL_EVICT, "evict"),
	POOL(HC_CLI_POOL_MAX_TICKETS, "max_tickets"),
	POOL(HC_CLI_POOL_TICKET_KEYS, "ticket_keys"),
	POOL(HC_CLI_POOL_HOST_MODE, "host_mode"),
	POOL(HC_CLI_POOL_RING_ENTRIES, "ring_entries"),
	POOL(HC_CLI_POOL_ARG_BYTES, "arg_bytes"),
	{ "sealed", "pool", "sealed", T_CHOICE, F(sealed), .choices = booleans, .arg = "BOOL",
	  .help = "true: create the pool afresh as a sealed memfd, handed to ranks over --socket; false: a named pool in --dir (default true)" },
	{ "socket", "pool", "socket", T_STRING, F(socket), .arg = "PATH",
	  .help = "the Unix socket ranks get a sealed pool from (default $RUNTIME_DIRECTORY/NAME.sock, else /run/hicache/NAME.sock)" },
	{ "backend", "backend", "spec", T_STRING, F(svc.backend), .arg = "SPEC",
	  .help = "the L3 backend, NAME[:KEY=VALUE,...], e.g. file:dir=/var/cache/hicache (hicache-backend(7))" },
	{ "backend-dir", "backend", "dir", T_STRING, F(svc.backend_dir), .arg = "DIR",
	  .help = "look for backend plugins here after $HICACHE_BACKEND_PATH" },
	{ "mac-key-file", "backend", "mac_key_file", T_STRING, F(svc.mac_key_file), .arg = "FILE",
	  .help = "MAC L3 objects under the key in FILE (64 hex digits, mode 0600, the service's own) and read only objects whose MAC verifies (default: no MAC)" },
	{ "batch-pages", "service", "batch_pages", T_U32, F(svc.batch_pages), 1, 65536, .arg = "N",
	  .help = "pages per backend call (default 128)" },
	{ "queue-depth", "service", "queue_depth", T_U32, F(svc.queue_depth), 1, 65536, .arg = "N",
	  .help = "backend operations in flight (default 256)" },
	{ "spin-us", "service", "spin_us", T_U32, F(svc.spin_us), 1, 1000000, .arg = "US",
	  .help = "spin on the rings this long before sleeping (default 50)" },
	{ "timeout-ms", "service", "timeout_ms", T_U32, F(svc.timeout_ms), 1, 3600000, .arg = "MS",
	  .help = "a backend op not done this long is cancelled; one that does not end then is given up on, its page held until the backend lets go (default 30000)" },
	{ "retries", "service", "retries", T_U32, F(svc.retries), 0, 100, .arg = "N",
	  .help = "transient backend failures retried per op, with backoff; 0: none (default 2)" },
	{ "workers", "service", "workers", T_U32, F(svc.workers), 1, 1024, .arg = "N",
	  .help = "threads doing transfers (default 4)" },
	{ "prefetch-threshold", "service", "prefetch_threshold", T_U32, F(svc.prefetch_threshold), 0, UINT32_MAX,
	  .arg = "PAGES", .help = "prefetches of fewer keys do not ask L3 (default 0: all do)" },
	{ "write-policy", "service", "write_policy", T_CHOICE, F(svc.write_policy), .choices = write_policies,
	  .arg = "POLICY",
	  .help = "when pages go to L3 on their own: write_through, write_through_selective, write_back or write_none (default write_through)" },
	{ "select-hits", "service", "select_hits", T_U32, F(svc.select_hits), 1, 65535, .arg = "N",
	  .help = "write_through_selective: hits (one per ticket) before a page goes to L3 (default 2)" },
	{ "writeback-pct", "service", "writeback_pct", T_U32, F(svc.writeback_pct), 1, 100, .arg = "PCT",
	  .help = "write_back: the share of the pool kept free or in L3 (default 20)" },
	{ "write-park-ms", "service", "write_park_ms", T_U32, F(svc.write_park_ms), 1, 3600000, .arg = "MS",
	  .help = "buffer_only: a write grant waiting this long is dropped, so its GPU pages can go (default 2000)" },
	{ "stage-hold-ms", "service", "stage_hold_ms", T_U32, F(svc.stage_hold_ms), 1, 86400000, .arg = "MS",
	  .help = "buffer_only: staging a live rank holds this long without giving it back is released (default 60000)" },
	{ "metrics-listen", "metrics", "listen", T_STRING, F(metrics_listen), .arg = "HOST:PORT",
	  .help = "serve GET /metrics (Prometheus) here, e.g. 127.0.0.1:9464 (default: not served)" },
	{ "log-level", "log", "level", T_CHOICE, F(log_level), .choices = log_levels, .arg = "LEVEL",
	  .help = "err, warn, info or debug (default: $HICACHE_LOG, else info)" },
	{ "log-file", "log", "file", T_STRING, F(log_file), .arg = "FILE",
	  .help = "append the log to FILE, reopened on SIGHUP (default: stderr)" },
};

#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static const char *opt_name(const struct opt *o)
{
	return o->type == T_POOL ? hc_cli_pool_opts[o->pool_opt].name : o->name;
}

static const char *opt_help(const struct opt *o)
{
	return o->help ? o->help : hc_cli_pool_opts[o->pool_opt].help;
}

static const char *opt_arg(const struct opt *o)
{
	return o->type == T_POOL ? hc_cli_pool_opts[o->pool_opt].arg : o->arg;
}

/* --kv and --state add to a list; every other option is set once a source. */
static int opt_repeats(const struct opt *o)
{
	return o->type == T_POOL && (o->pool_opt == HC_CLI_POOL_KV || o->pool_opt == HC_CLI_POOL_STATE);
}

/* "a, b, c or d" of a choice list. */
static void choice_list(const struct choice *ch, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = 0;
	for (unsigned i = 0; ch[i].name && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s",
					i == 0           ? ""
					: ch[i + 1].name ? ", "
							 : " or ",
					ch[i].name);
}

static int parse_choice(const struct choice *ch, const char *what, const char *v, int *out)
{
	char list[128];

	for (unsigned i = 0; ch[i].name; i++)
		if (!strcmp(ch[i].name, v)) {
			*out = ch[i].value;
			return 0;
		}
	choice_list(ch, list, sizeof(list));
	return hc_cli_fail(EINVAL, "%s '%s': use %s", what, v, list);
}

/* Set one option from a value that outlives c (argv, or a kept copy). */
static int opt_set(struct hcd_conf *c, const struct opt *o, const char *what, const char *v)
{
	void *field = (char *)c + o->off;

	switch (o->type) {
	case T_STRING:
		if (!*v)
			return hc_cli_fail(EINVAL, "%s: the value is empty", what);
		*(const char **)field = v;
		return 0;
	case T_U32:
		return hc_cli_parse_u32(what, v, o->min, o->max, field);
	case T_CHOICE:
		return parse_choice(o->choices, what, v, field);
	case T_POOL:
		return hc_cli_pool_set(&c->geo, o->pool_opt, what, v);
	case T_CMDLINE:
		break;
	}
	return hc_cli_fail(EINVAL, "%s: not a setting", what);
}

/* ---- the config file */

struct ini_ctx {
	struct hcd_conf *c;
	FILE *f;
	unsigned line;     /* the line the reader gave last */
	unsigned err_line; /* the first line a handler refused, and why */
	char err[512];
	unsigned set_on[NOPTS]; /* the line that set each option */
	int cont;               /* the reader's last line starts with blanks: it continues a value */
	int last;               /* the option of the value being read, or -1 */
	char *last_value;       /* that value so far (kept), set once no line goes on with it */
	int joined;             /* lines went on with it */
};

static int ini_fail(struct ini_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Keep the first error only: inih goes on after it, but reports its line. */
static int ini_fail(struct ini_ctx *x, const char *fmt, ...)
{
	va_list ap;

	if (!x->err_line) {
		x->err_line = x->line;
		va_start(ap, fmt);
		vsnprintf(x->err, sizeof(x->err), fmt, ap);
		va_end(ap);
	}
	return 0;
}

static int flush(struct ini_ctx *x);

/* fgets that counts lines, and refuses one too long for inih's buffer
 * (it would cut it and read the rest as another line), and a NUL byte
 * (it would cut the line there).  A refused line reaches inih blank; after
 * an error nothing more is read (a file of NULs would never end). */
static char *conf_reader(char *str, int num, void *stream)
{
	struct ini_ctx *x = stream;
	long at = ftell(x->f);
	size_t n;
	int ch;

	if (x->err_line || !fgets(str, num, x->f))
		return NULL;
	x->line++;
	n = strlen(str);
	x->cont = (str[0] == ' ' || str[0] == '\t') && str[strspn(str, " \t\r\n")];
	if (str[strspn(str, " \t")] == '[') { /* a section: nothing goes on past it */
		x->cont = 0;
		flush(x);
	}
	if (at >= 0 && ftell(x->f) - at != (long)n) {
		ini_fail(x, "a NUL byte in the line: a config file is text");
		str[0] = 0;
	} else if (n && str[n - 1] != '\n' && !feof(x->f)) {
		while ((ch = fgetc(x->f)) != EOF && ch != '\n')
			;
		ini_fail(x,
			 "the line is longer than %d characters: continue a long value on lines that start "
			 "with blanks",
			 num - 2);
		str[0] = 0; /* a blank line to inih; the error stands */
	}
	return str;
}

/* A copy of a config value, freed with the settings. */
static char *keep(struct hcd_conf *c, const char *value)
{
	char **strs = realloc(c->strs, (c->nstrs + 1) * sizeof(*strs));
	char *v = strdup(value);

	if (strs)
		c->strs = strs;
	if (!strs || !v) {
		free(v);
		return NULL;
	}
	c->strs[c->nstrs++] = v;
	return v;
}

/* The sections are the table's: a section is known when an option names it. */
static int section_known(const char *section)
{
	for (unsigned i = 0; i < NOPTS; i++)
		if (opts[i].section && !strcmp(opts[i].section, section))
			return 1;
	return 0;
}

/* "[pool], [service], [backend], [metrics] or [log]", in the table's order. */
static const char *section_list(void)
{
	static char buf[256];
	const char *seen[NOPTS];
	unsigned n = 0;
	size_t off = 0;

	if (buf[0])
		return buf;
	for (unsigned i = 0; i < NOPTS; i++) {
		unsigned j;

		if (!opts[i].section)
			continue;
		for (j = 0; j < n && strcmp(seen[j], opts[i].section); j++)
			;
		if (j == n)
			seen[n++] = opts[i].section;
	}
	for (unsigned i = 0; i < n && off < sizeof(buf); i++)
		off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s[%s]",
					i == 0       ? ""
					: i + 1 == n ? " or "
						     : ", ",
					seen[i]);
	return buf;
}

/* Set the value read last, now that no line goes on with it (the next
 * key, a section, or the end).  An error names the key's line. */
static int flush(struct ini_ctx *x)
{
	const struct opt *o;
	unsigned here = x->line;

	if (x->last < 0 || !x->last_value) { /* none, or a kv or state line, set already */
		x->last = -1;
		return 1;
	}
	o = &opts[x->last];
	x->last = -1;
	if (opt_set(x->c, o, o->key, x->last_value) >= 0)
		return 1;
	x->line = x->set_on[o - opts];
	ini_fail(x, "%s%s", hc_cli_error(), x->joined ? " (the value joined from the lines after it)" : "");
	x->line = here;
	return 0;
}

static int conf_line(void *user, const char *section, const char *key, const char *value)
{
	struct ini_ctx *x = user;
	struct hcd_conf *c = x->c;
	char keys[512];
	size_t off = 0;

	if (x->cont && x->last >= 0 && !strcmp(opts[x->last].key, key) && !strcmp(opts[x->last].section, section)) {
		/* a line that starts with blanks: the value goes on, joined as is
		 * (a long backend spec over several lines) */
		const struct opt *o = &opts[x->last];
		size_t a, b = strlen(value);
		char *joined;
		if (opt_repeats(o) || !x->last_value)
			return ini_fail(x, "a %s value cannot go on over lines: give each on a line of its own", key);
		a = strlen(x->last_value);
		if (!(joined = malloc(a + b + 1)))
			return ini_fail(x, "out of memory");
		memcpy(joined, x->last_value, a);
		memcpy(joined + a, value, b + 1);
		x->last_value = keep(c, joined);
		free(joined);
		if (!x->last_value)
			return ini_fail(x, "out of memory");
		x->joined = 1;
		return 1;
	}
	if (!flush(x))
		return 0;
	if (!*section)
		return ini_fail(x, "'%s' is outside any section: put it under %s", key, section_list());
	if (!section_known(section))
		return ini_fail(x, "unknown section [%s]: use %s", section, section_list());
	for (unsigned i = 0; i < NOPTS; i++) {
		const struct opt *o = &opts[i];
		char *v;

		if (!o->section || strcmp(o->section, section))
			continue;
		if (strcmp(o->key, key)) {
			if (off < sizeof(keys))
				off += (size_t)snprintf(keys + off, sizeof(keys) - off, "%s%s", off ? ", " : "",
							o->key);
			continue;
		}
		if (x->set_on[i] && !opt_repeats(o))
			return ini_fail(x, "'%s' in [%s] is already set on line %u", key, section, x->set_on[i]);
		if (o->type == T_POOL && (o->pool_opt == HC_CLI_POOL_PAGES || o->pool_opt == HC_CLI_POOL_SIZE))
			for (unsigned j = 0; j < NOPTS; j++)
				if (j != i && x->set_on[j] && opts[j].type == T_POOL &&
				    (opts[j].pool_opt == HC_CLI_POOL_PAGES || opts[j].pool_opt == HC_CLI_POOL_SIZE))
					return ini_fail(
						x, "'%s' and '%s' (line %u) both give the pool's capacity: keep one",
						key, opts[j].key, x->set_on[j]);
		/* the value must outlive the parse: the settings point at it */
		v = keep(c, value);
		if (!v)
			return ini_fail(x, "out of memory");
		x->set_on[i] = x->line;
		if (opt_repeats(o)) { /* kv and state do not go on: set now */
			if (opt_set(c, o, key, v) < 0)
				return ini_fail(x, "%s", hc_cli_error());
			x->last = (int)i; /* still named by a line that would go on */
			x->last_value = NULL;
			x->joined = 0;
			return 1;
		}
		x->last = (int)i;
		x->last_value = v;
		x->joined = 0;
		return 1;
	}
	return ini_fail(x, "unknown key '%s' in [%s]: its keys are %s", key, section, keys);
}

static int read_config(struct hcd_conf *c, const char *path)
{
	static struct ini_ctx x; /* set_on and err: too big for a small stack */
	const char *kind;
	int ret;

	memset(&x, 0, sizeof(x));
	x.c = c;
	x.last = -1;
	if ((ret = hc_cli_open_regular(path, CONF_MAX_BYTES, &x.f, &kind)) < 0) {
		if (kind || ret == -EFBIG)
			fprintf(stderr,
				HCD_PROG ": the config file %s is %s: give a text file of settings (hicache.conf(5))\n",
				path, kind ? kind : "larger than 1 MiB");
		else
			fprintf(stderr, HCD_PROG ": cannot read the config file %s: %s\n", path, strerror(-ret));
		return HC_CLI_EXIT_USAGE;
	}
	ret = ini_parse_stream(conf_reader, &x, conf_line, &x);
	if (ret == 0 && !x.err_line)
		flush(&x); /* the last value: the end goes on with nothing */
	fclose(x.f);
	/* the first error wins: ours (a line too long is ours alone), or inih's */
	if (x.err_line && (ret == 0 || (ret > 0 && (unsigned)ret >= x.err_line)))
		fprintf(stderr, HCD_PROG ": %s:%u: %s\n", path, x.err_line, x.err);
	else if (ret == 0)
		return HCD_GO;
	else if (ret > 0)
		fprintf(stderr, HCD_PROG ": %s:%d: expected '[section]', 'key = value' or a comment (';' or '#')\n",
			path, ret);
	else
		fprintf(stderr, HCD_PROG ": %s: cannot parse it (inih error %d)\n", path, ret);
	return HC_CLI_EXIT_USAGE;
}

/* ---- the command line, --help, and checking the whole */

static void usage(void)
{
	printf("Usage: " HCD_PROG " --pool NAME --backend SPEC [OPTIONS]\n"
	       "       " HCD_PROG " --config FILE [OPTIONS]\n"
	       "\n"
	       "Serve a hicache pool: move its pages to and from an L3 backend for the\n"
	       "ranks that attach it (hicached(8)).  The pool is created from the pool\n"
	       "options if it does not exist; if it does, those given must agree with it.\n"
	       "Runs in the foreground until SIGTERM or SIGINT, which finish the work in\n"
	       "flight; SIGHUP reopens the log file.  Exit status: 0 after a clean stop,\n"
	       "1 when the pool or the service failed, 2 for a wrong option or config.\n"
	       "\n"
	       "Options, each with its section and key in the config file (hicache.conf(5)):\n");
	for (unsigned i = 0; i < NOPTS; i++) {
		const struct opt *o = &opts[i];
		const char *arg = opt_arg(o);
		char left[128];

		snprintf(left, sizeof(left), "  --%s%s%s", opt_name(o), arg ? " " : "", arg ? arg : "");
		if (o->section)
			printf("%-40s [%s] %s\n", left, o->section, o->key);
		else
			printf("%-40s (command line only)\n", left);
		printf("      %s\n", opt_help(o));
	}
	printf("\nDTYPE is one of f32, f16, bf16, fp8_e4m3, fp8_e5m2, int8, uint8.\n");
}

/* Print an option error and return the usage exit status. */
static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int bad(const char *fmt, ...)
{
	va_list ap;

	fputs(HCD_PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return HC_CLI_EXIT_USAGE;
}

/* HOST:PORT with a port of 1..65535 in digits (getaddrinfo would take
 * 99999, and listen on what is left of it), HOST [v6] or not. */
static int listen_addr_ok(const char *addr)
{
	const char *colon = strrchr(addr, ':');
	char *end;
	unsigned long port;

	if (!colon || colon == addr || !colon[1])
		return hc_cli_fail(EINVAL, "--metrics-listen '%s': give HOST:PORT, e.g. 127.0.0.1:9464", addr);
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (*end || colon[1] < '0' || colon[1] > '9' || errno || port < 1 || port > 65535)
		return hc_cli_fail(EINVAL, "--metrics-listen '%s': the port '%s' is not a number from 1 to 65535", addr,
				   colon + 1);
	return 0;
}

/* What is needed to run, once both sources are in. */
static int check_conf(struct hcd_conf *c)
{
	const char *env;

	if (!c->pool)
		return bad("missing --pool NAME (or 'name' in [pool]): which pool to serve");
	if (hc_pool_name_valid(c->pool) < 0)
		return bad("%s", hc_last_error());
	if (!c->svc.backend)
		return bad(
			"missing --backend SPEC (or 'spec' in [backend]), e.g. --backend file:dir=/var/cache/hicache");
	if (c->metrics_listen && listen_addr_ok(c->metrics_listen) < 0)
		return bad("%s", hc_cli_error());
	c->svc.dir = c->geo.spec.dir;
	if (c->svc.dir && c->svc.dir[0] != '/')
		return bad("--dir '%s' must be an absolute path", c->svc.dir);
	if (c->sealed && c->svc.dir)
		return bad("--dir '%s': a sealed pool is in no directory: drop --dir, or give --sealed false",
			   c->svc.dir);
	if (!c->sealed && c->socket)
		return bad("--socket '%s' hands over a sealed pool: drop it, or give --sealed true", c->socket);
	if (c->sealed && !c->socket) {
		/* systemd's RuntimeDirectory= (hicached@.service): its first path */
		const char *rd = getenv("RUNTIME_DIRECTORY");
		char path[4096];
		int n = rd && *rd ? snprintf(path, sizeof(path), "%.*s/%s.sock", (int)strcspn(rd, ":"), rd, c->pool)
				  : snprintf(path, sizeof(path), "/run/hicache/%s.sock", c->pool);
		c->socket_default = !(rd && *rd);
		if (n < 0 || (size_t)n >= sizeof(path) || !(c->socket = keep(c, path)))
			return bad("cannot make the socket path of pool '%s': give --socket PATH", c->pool);
	}
	if (c->socket && c->socket[0] != '/')
		return bad("--socket '%s' must be an absolute path", c->socket);
	if (c->log_level == 0) {
		env = getenv("HICACHE_LOG");
		c->log_level = HC_LOG_INFO;
		if (env && *env && parse_choice(log_levels, "HICACHE_LOG", env, &c->log_level) < 0)
			return bad("%s (or give --log-level)", hc_cli_error());
	}
	return HCD_GO;
}

int hcd_conf_load(struct hcd_conf *c, int argc, char **argv)
{
	struct option lo[NOPTS + 1];
	const char **given;
	int *which, ngiven = 0, ch, ret;
	char what[64];

	memset(c, 0, sizeof(*c));
	c->sealed = 1;
	c->pool_fd = -1;
	c->svc.size = sizeof(c->svc);
	c->svc.retries = 2; /* here 0 means none (hc_service_opts: -1) */
	hc_cli_pool_init(&c->geo);
	for (unsigned i = 0; i < NOPTS; i++)
		lo[i] = (struct option){ opt_name(&opts[i]), opt_arg(&opts[i]) ? required_argument : no_argument, NULL,
					 256 + (int)i };
	lo[NOPTS] = (struct option){ NULL, 0, NULL, 0 };
	/* options given are at most argc */
	given = calloc((size_t)argc + 1, sizeof(*given));
	which = calloc((size_t)argc + 1, sizeof(*which));
	if (!given || !which) {
		ret = bad("out of memory");
		goto out;
	}

	/* First the command line, kept aside: --config and --help come before
	 * the file, and the file's settings before these. */
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":hV", lo, NULL)) != -1) {
		const struct opt *o;

		o = ch >= 256 && ch < 256 + (int)NOPTS ? &opts[ch - 256] : NULL;
		if (ch == 'h' || (o && o->type == T_CMDLINE && !strcmp(o->name, "help"))) {
			usage();
			ret = HC_CLI_EXIT_OK;
			goto out;
		}
		if (ch == 'V' || (o && o->type == T_CMDLINE && !strcmp(o->name, "version"))) {
			printf(HCD_PROG " (hicache) %s\n", hc_version());
			ret = HC_CLI_EXIT_OK;
			goto out;
		}
		if (ch == ':') {
			ret = bad("option '%s' needs a value; see '" HCD_PROG " --help'", argv[optind - 1]);
			goto out;
		}
		if (!o) {
			ret = optopt && optopt < 256 ? bad("unknown option '-%c'; see '" HCD_PROG " --help'", optopt)
			      : optopt               ? bad("option '%s' takes no value", argv[optind - 1])
				       : bad("unknown or ambiguous option '%s'; see '" HCD_PROG " --help'",
					     argv[optind - 1]);
			goto out;
		}
		if (o->type == T_CMDLINE) { /* --config: the others have returned */
			c->config = optarg;
			continue;
		}
		which[ngiven] = ch - 256;
		given[ngiven++] = optarg;
	}
	if (optind < argc) {
		ret = bad("unexpected argument '%s': give the pool as --pool NAME", argv[optind]);
		goto out;
	}
	if (c->config && (ret = read_config(c, c->config)) != HCD_GO)
		goto out;

	hc_cli_pool_next_source(&c->geo);
	for (int i = 0; i < ngiven; i++) {
		const struct opt *o = &opts[which[i]];

		for (int j = 0; j < i && !opt_repeats(o); j++)
			if (which[j] == which[i]) {
				ret = bad("option '--%s' is given twice", opt_name(o));
				goto out;
			}
		snprintf(what, sizeof(what), "--%s", opt_name(o));
		if (opt_set(c, o, what, given[i]) < 0) {
			ret = bad("%s", hc_cli_error());
			goto out;
		}
	}
	ret = check_conf(c);
out:
	free(given);
	free(which);
	return ret;
}

void hcd_conf_log(const struct hcd_conf *c)
{
	hcd_log(HCD_LOG_DEBUG, "config file: %s", c->config ? c->config : "(none)");
	for (unsigned i = 0; i < NOPTS; i++) {
		const struct opt *o = &opts[i];
		const void *field = (const char *)c + o->off;

		if (o->type == T_STRING)
			hcd_log(HCD_LOG_DEBUG, "setting [%s] %s = %s", o->section, o->key,
				*(const char *const *)field ? *(const char *const *)field : "(unset)");
		else if (o->type == T_U32)
			hcd_log(HCD_LOG_DEBUG, "setting [%s] %s = %u%s", o->section, o->key, *(const unsigned *)field,
				*(const unsigned *)field ? "" : " (the default)");
		else if (o->type == T_CHOICE)
			for (const struct choice *ch = o->choices; ch->name; ch++)
				if (ch->value == *(const int *)field)
					hcd_log(HCD_LOG_DEBUG, "setting [%s] %s = %s", o->section, o->key, ch->name);
	}
}

void hcd_conf_free(struct hcd_conf *c)
{
	for (unsigned i = 0; i < c->nstrs; i++)
		free(c->strs[i]);
	free(c->strs);
	c->strs = NULL;
	c->nstrs = 0;
}
