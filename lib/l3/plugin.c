/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin.c - the backend loader.  A plugin is found on a search path
 * ($HICACHE_BACKEND_PATH, then the configured directory, then the installed
 * $(pkglibdir)/backends), opened with RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE,
 * and checked before any call: its entry symbol, ABI version, struct size,
 * and every version-1 member.  Before it is opened, the file and every
 * directory on its way must be safe from other users (trusted()).  Each
 * failure is one line naming the plugin and the cause (hc_last_error).
 */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../shmpool/pool.h"
#include "plugin.h"

#ifndef HC_BACKEND_DIR
#define HC_BACKEND_DIR "/usr/local/lib/hicache/backends"
#endif

/* The version-1 struct ends after its last member; a plugin's may be longer. */
#define V1_SIZE (offsetof(struct hc_backend, ctl) + sizeof(((struct hc_backend *)0)->ctl))

/*
 * Host services, one per plugin name, for the life of the process (the
 * ABI promises that; RTLD_NODELETE keeps the plugins mapped as long).
 */
#define MAX_HOSTS 32
static struct host_slot {
	struct hc_backend_host host;
	char name[HC_PLUGIN_NAME_MAX + 1];
} hosts[MAX_HOSTS];
static unsigned nhosts;
static pthread_mutex_t hosts_mu = PTHREAD_MUTEX_INITIALIZER;

static void host_log(const struct hc_backend_host *h, int level, const char *fmt, ...)
{
	const struct host_slot *s = (const struct host_slot *)h->host_data;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	hc__log(level, "backend %s: %s", s ? s->name : "?", msg);
}

static const struct hc_backend_host *host_for(const char *name)
{
	struct host_slot *s = NULL;

	pthread_mutex_lock(&hosts_mu);
	for (unsigned i = 0; i < nhosts && !s; i++)
		if (strcmp(hosts[i].name, name) == 0)
			s = &hosts[i];
	if (!s && nhosts == MAX_HOSTS) {
		/* More distinct plugins than slots: the rest share one, named once. */
		s = &hosts[MAX_HOSTS - 1];
	} else if (!s) {
		s = &hosts[nhosts++];
		snprintf(s->name, sizeof(s->name), "%s", nhosts == MAX_HOSTS ? "(one of several)" : name);
		s->host.abi_version = HC_BACKEND_ABI_VERSION;
		s->host.size = sizeof(s->host);
		s->host.log = host_log;
		s->host.host_data = s;
	}
	pthread_mutex_unlock(&hosts_mu);
	return &s->host;
}

static int name_ok(const char *n)
{
	size_t len = strlen(n);

	if (len == 0 || len > HC_PLUGIN_NAME_MAX)
		return 0;
	for (const char *c = n; *c; c++)
		if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-')
			return 0;
	return 1;
}

int hc__plugin_spec_parse(const char *spec, struct hc__plugin_spec *out)
{
	const char *colon;
	char *p, *save = NULL, *item;
	size_t nlen;

	if (!spec || !*spec)
		return hc__err(EINVAL,
			       "backend spec is empty: give name[:key=value,...], e.g. file:dir=/var/cache/hicache");
	memset(out, 0, sizeof(*out));
	colon = strchr(spec, ':');
	nlen = colon ? (size_t)(colon - spec) : strlen(spec);
	if (nlen == 0 || nlen >= sizeof(out->name))
		return hc__err(EINVAL, "backend spec '%s': the name before ':' is %s", spec,
			       nlen ? "too long" : "empty");
	memcpy(out->name, spec, nlen);
	if (!colon || !colon[1])
		return 0;
	if (strlen(colon + 1) >= sizeof(out->buf))
		return hc__err(EINVAL, "backend spec '%s': options longer than %zu bytes", out->name,
			       sizeof(out->buf) - 1);
	strcpy(out->buf, colon + 1);
	/* strtok_r would skip an empty option: a stray ',' is a mistake to say */
	for (const char *c = out->buf; *c; c++)
		if (*c == ',' && (c == out->buf || c[1] == ',' || !c[1]))
			return hc__err(
				EINVAL,
				"backend %s: an empty option at offset %zu of '%s' (a ',' too many): options are "
				"key=value separated by one ','",
				out->name, (size_t)(c - out->buf) + (c == out->buf ? 0 : 1), colon + 1);
	for (item = strtok_r(out->buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		p = strchr(item, '=');
		if (!p || p == item)
			return hc__err(EINVAL,
				       "backend %s: option '%s' is not key=value (options are separated by ',')",
				       out->name, item);
		if (out->nopt == HC_PLUGIN_OPTS_MAX)
			return hc__err(EINVAL, "backend %s: more than %d options", out->name, HC_PLUGIN_OPTS_MAX);
		*p = '\0';
		for (unsigned i = 0; i < out->nopt; i++)
			if (strcmp(out->opt[i].key, item) == 0)
				return hc__err(EINVAL, "backend %s: option '%s' is given twice", out->name, item);
		out->opt[out->nopt++] = (struct hc_be_option){ item, p + 1 };
	}
	return 0;
}

/* Whether <d>/<name>.so exists (into path); d is noted in tried either way. */
static int try_dir(const char *d, const char *name, char *path, size_t len, char *tried, size_t tlen)
{
	struct stat sb;

	if ((size_t)snprintf(path, len, "%s/%s.so", d, name) >= len)
		return 0; /* too long to be a path: cannot hold it */
	snprintf(tried + strlen(tried), tlen - strlen(tried), "%s%s", tried[0] ? ", " : "", d);
	return stat(path, &sb) == 0;
}

/* The first <dir>/<name>.so that exists, in search order, wins: a broken
 * plugin is reported, not skipped for a later one. */
static int find(const char *name, const char *dir, char *path, size_t len, char *tried, size_t tlen)
{
	/* secure_getenv: a setuid program must not load what the caller names */
	const char *env = secure_getenv("HICACHE_BACKEND_PATH");
	char list[8192];
	char *save = NULL, *d;

	/* The variable is a ':' list; the configured directory is one directory. */
	snprintf(list, sizeof(list), "%s", env ? env : "");
	tried[0] = '\0';
	for (d = strtok_r(list, ":", &save); d; d = strtok_r(NULL, ":", &save))
		if (try_dir(d, name, path, len, tried, tlen))
			return 0;
	if (dir && *dir && try_dir(dir, name, path, len, tried, tlen))
		return 0;
	return try_dir(HC_BACKEND_DIR, name, path, len, tried, tlen) ? 0 : -ENOENT;
}

/*
 * A plugin runs as the process that loads it (the service): whoever can
 * replace the file, or rename an entry in a directory on its way, runs code
 * as the service.  Refused: a file or directory owned by someone other than
 * root or this process's user, and a plugin file or a directory (unless it
 * is sticky, as /tmp is: there only an entry's owner may rename or remove
 * it) that others, or a group other than root's or this process's own, may
 * write.  Checked on the real path, which then replaces path: the file
 * opened is the file checked, whatever a symlink on the way points to
 * later.
 */
static int trusted(const char *name, char path[PATH_MAX])
{
	char real[PATH_MAX], *slash;
	uid_t me = geteuid();
	gid_t mygid = getegid();
	struct stat sb;

	if (!realpath(path, real))
		return hc__err(errno, "backend %s: %s: %s", name, path, strerror(errno));
	memcpy(path, real, sizeof(real));
	for (int file = 1;; file = 0) {
		const char *what = file ? "plugin" : "directory";
		int sticky;
		if (stat(real, &sb) < 0)
			return hc__err(errno, "backend %s: %s: %s", name, real, strerror(errno));
		sticky = !file && (sb.st_mode & S_ISVTX);
		if (sb.st_uid != 0 && sb.st_uid != me)
			return hc__err(
				EPERM,
				"backend %s: %s %s is owned by uid %u, not root or this process's uid %u: its owner could run code in this process; install the plugin where only root or uid %u can write",
				name, what, real, (unsigned)sb.st_uid, (unsigned)me, (unsigned)me);
		if ((sb.st_mode & S_IWOTH) && !sticky)
			return hc__err(
				EPERM,
				"backend %s: %s %s%s may be written by anyone (mode %04o): anyone could replace the plugin; chmod o-w it%s",
				name, what, real, file ? "" : ", on the way to the plugin,",
				(unsigned)(sb.st_mode & 07777), file ? "" : ", or install the plugin elsewhere");
		if ((sb.st_mode & S_IWGRP) && !sticky && sb.st_gid != 0 && sb.st_gid != mygid)
			return hc__err(
				EPERM,
				"backend %s: %s %s%s may be written by group %u (mode %04o), neither root's nor this process's (%u): its members could replace the plugin; chmod g-w it",
				name, what, real, file ? "" : ", on the way to the plugin,", (unsigned)sb.st_gid,
				(unsigned)(sb.st_mode & 07777), (unsigned)mygid);
		if (!strcmp(real, "/"))
			return 0;
		slash = strrchr(real, '/');
		slash[slash == real] = '\0'; /* "/usr" goes to "/", "/usr/lib" to "/usr" */
	}
}

int hc__plugin_load(const char *name, const char *dir, struct hc__plugin *out)
{
	int ret;

	const struct hc_backend *be;
	hc_backend_entry_fn entry;
	char tried[8192];
	const char *base;
	void *dl;

	memset(out, 0, sizeof(*out));
	if (!name)
		return hc__err(EINVAL, "backend: no name given");
	if (strchr(name, '/')) { /* an explicit path: no search */
		if (strlen(name) >= sizeof(out->path))
			return hc__err(ENAMETOOLONG, "backend path '%s' is too long", name);
		strcpy(out->path, name);
		base = strrchr(name, '/') + 1;
		snprintf(out->name, sizeof(out->name), "%.*s", (int)strcspn(base, "."), base);
		if (!name_ok(out->name))
			return hc__err(
				EINVAL,
				"backend path '%s': its file name should be <name>.so with a name of 1-%d of [A-Za-z0-9_-]",
				name, HC_PLUGIN_NAME_MAX);
		if (access(out->path, F_OK) != 0)
			return hc__err(ENOENT, "backend %s: %s: not found", out->name, out->path);
	} else {
		if (!name_ok(name))
			return hc__err(EINVAL, "backend name '%s' is not valid: use 1-%d of [A-Za-z0-9_-], or a path",
				       name, HC_PLUGIN_NAME_MAX);
		strcpy(out->name, name);
		if (find(name, dir, out->path, sizeof(out->path), tried, sizeof(tried)) < 0)
			return hc__err(
				ENOENT,
				"backend %s: not found: no %s.so in %s (set HICACHE_BACKEND_PATH or install the plugin)",
				name, name, tried);
	}
	if ((ret = trusted(out->name, out->path)) < 0)
		return ret;
	/* out->path is the real path trusted() checked, with a '/': the
	 * dynamic loader opens that file, and never searches LD_LIBRARY_PATH or
	 * its cache for it */
	dlerror();
	dl = dlopen(out->path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!dl)
		return hc__err(ELIBBAD, "backend %s: %s", out->name, dlerror());
	entry = (hc_backend_entry_fn)dlsym(dl, HC_BACKEND_ENTRY_SYMBOL);
	if (!entry) {
		dlclose(dl);
		return hc__err(ELIBBAD, "backend %s: %s: no entry symbol %s(): not a hicache backend plugin", out->name,
			       out->path, HC_BACKEND_ENTRY_SYMBOL);
	}
	be = entry(host_for(out->name));
	if (!be)
		goto refuse_null;
	if (be->abi_version != HC_BACKEND_ABI_VERSION) {
		dlclose(dl);
		return hc__err(
			ELIBBAD,
			"backend %s: %s: built for plugin ABI version %u, this library speaks %u: rebuild it against this hicache's backend.h",
			out->name, out->path, be->abi_version, HC_BACKEND_ABI_VERSION);
	}
	if (be->size < V1_SIZE) {
		dlclose(dl);
		return hc__err(
			ELIBBAD,
			"backend %s: %s: its struct hc_backend is %u bytes, version %u needs at least %zu: rebuild it against this hicache's backend.h",
			out->name, out->path, be->size, HC_BACKEND_ABI_VERSION, (size_t)V1_SIZE);
	}
	{
		static const struct {
			const char *name;
			size_t off;
		} req[] = {
#define REQ(m) { #m, offsetof(struct hc_backend, m) }
			REQ(open), REQ(close),  REQ(reg_mem), REQ(unreg_mem), REQ(submit),
			REQ(reap), REQ(cancel), REQ(stats),   REQ(ctl),
#undef REQ
		};
		for (unsigned i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
			void *fn;
			memcpy(&fn, (const char *)be + req[i].off, sizeof(fn));
			if (!fn) {
				dlclose(dl);
				return hc__err(
					ELIBBAD,
					"backend %s: %s: member %s() is NULL; every version-%u member is required",
					out->name, out->path, req[i].name, HC_BACKEND_ABI_VERSION);
			}
		}
	}
	out->be = be;
	return 0;
refuse_null:
	dlclose(dl);
	return hc__err(ELIBBAD, "backend %s: %s: %s() returned NULL", out->name, out->path, HC_BACKEND_ENTRY_SYMBOL);
}

int hc__plugin_open(const struct hc__plugin *pl, const struct hc__plugin_spec *spec, void **inst)
{
	char err[512] = "";
	int r;

	*inst = NULL;
	r = pl->be->open(spec->opt, spec->nopt, inst, err, sizeof(err));
	if (r > 0 && *inst) {
		pl->be->close(*inst); /* a bad return with an instance: don't leak it */
		*inst = NULL;
	}
	if (r > 0 || (r == 0 && !*inst))
		return hc__err(EPROTO, "backend %s: open() returned %d%s: a plugin bug", pl->name, r,
			       r == 0 ? " and no instance" : "");
	if (r < 0)
		return hc__err(-r, "backend %s: %s", pl->name, err[0] ? err : strerror(-r));
	return 0;
}
