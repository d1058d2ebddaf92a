/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ls.c - hicache-pool ls: the pools of a directory, each attached read-only,
 * with their live ranks and engines; what is not a usable pool is listed with
 * the reason.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pool.h"

const char hcp_ls_usage[] = "Usage: " HCP_PROG " ls [--dir DIR] [--json]\n"
			    "\n"
			    "List the pools in DIR (default " HCP_DEFAULT_DIR "), the files named hicache.NAME,\n"
			    "with their live ranks (pid, engine, TP rank, quota, pages held) and engines.\n"
			    "Each is attached read-only, so listing never changes a pool; live ranks are\n"
			    "the slots marked live, not proven.  A file that is not a usable pool is\n"
			    "listed with the reason.  Leftovers of an interrupted create\n"
			    "(.hicache.NAME.creating.PID) are listed as incomplete.\n"
			    "\n"
			    "  --dir DIR    the directory to list\n"
			    "  --json       print one JSON object\n";

struct ls_entry {
	char *name;
	char path[4096];
	int incomplete; /* a .creating. leftover */
	uint32_t creator_pid;
	int err; /* attach failed: msg holds hc_last_error() */
	char msg[4096 + 256];
	struct hc_pool_info info;
	unsigned live;
	struct hc_rank_info ranks[HC_MAX_RANKS]; /* the live ones: [0, live) */
};

static int ls_cmp(const void *a, const void *b)
{
	const struct ls_entry *x = a, *y = b;
	int r = strcmp(x->name, y->name);

	return r ? r : x->incomplete - y->incomplete;
}

/* ".hicache.NAME.creating.PID" -> NAME and PID; 0 if d_name is not one. */
static int parse_creating(const char *d_name, char **name, uint32_t *pid)
{
	const char *tag = ".creating.", *last = NULL, *q;

	if (strncmp(d_name, ".hicache.", 9) != 0)
		return 0;
	for (q = d_name + 9; (q = strstr(q, tag)); q++)
		last = q;
	if (!last || last == d_name + 9 || hc_cli_parse_u32("pid", last + strlen(tag), 1, UINT32_MAX, pid) < 0)
		return 0;
	*name = strndup(d_name + 9, (size_t)(last - (d_name + 9)));
	return *name ? 1 : -ENOMEM;
}

static const char *file_kind(mode_t m)
{
	return S_ISDIR(m)                 ? "a directory"
	       : S_ISLNK(m)               ? "a symbolic link"
	       : S_ISFIFO(m)              ? "a fifo"
	       : S_ISSOCK(m)              ? "a socket"
	       : S_ISCHR(m) || S_ISBLK(m) ? "a device"
					  : "not a regular file";
}

static void ls_probe(struct ls_entry *e, const char *dir, int dfd, const char *d_name)
{
	struct stat st;
	hc_pool *p;

	/* Look before attaching: opening a fifo would block the listing forever. */
	if (fstatat(dfd, d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		e->err = 1;
		snprintf(e->msg, sizeof(e->msg), "cannot stat %s: %s", e->path, strerror(errno));
		return;
	}
	if (!S_ISREG(st.st_mode)) {
		e->err = 1;
		snprintf(e->msg, sizeof(e->msg), "%s is not a pool: it is %s", e->path, file_kind(st.st_mode));
		return;
	}
	/* READONLY: no recovery, no writes; a listing must never change a pool */
	if (hcp_attach(e->name, dir, HC_ATTACH_READONLY, &p) < 0 || hc_pool_info(p, &e->info, sizeof(e->info)) < 0) {
		e->err = 1;
		snprintf(e->msg, sizeof(e->msg), "%s", hc_last_error());
		return;
	}
	/* every slot in one pass over the pages, then the live ones to the front */
	int n = hc_pool_ranks(p, e->ranks, sizeof(e->ranks[0]), HC_MAX_RANKS);
	for (int s = 0; s < n; s++)
		if (e->ranks[s].live)
			e->ranks[e->live++] = e->ranks[s];
	hc_pool_detach(p);
}

static void ls_text(const struct ls_entry *es, size_t n, const char *dir)
{
	int wn = 4, wm = 5;
	char b1[32], b2[32];

	if (n == 0) {
		printf("no pools in %s\n", dir);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if ((int)strlen(es[i].name) > wn)
			wn = (int)strlen(es[i].name);
		if (!es[i].err && !es[i].incomplete && (int)strlen(es[i].info.model_id) > wm)
			wm = (int)strlen(es[i].info.model_id);
	}
	printf("%-*s  %-*s  %10s  %10s  %10s  %4s  %s\n", wn, "NAME", wm, "MODEL", "PAGES", "ENVELOPE", "SEGMENT",
	       "LIVE", "PATH");
	for (size_t i = 0; i < n; i++) {
		const struct ls_entry *e = &es[i];

		if (e->incomplete)
			printf("%-*s  incomplete (creator pid %" PRIu32 "): %s\n", wn, e->name, e->creator_pid,
			       e->path);
		else if (e->err)
			printf("%-*s  error: %s\n", wn, e->name, e->msg);
		else
			printf("%-*s  %-*s  %10" PRIu32 "  %10s  %10s  %4u  %s\n", wn, e->name, wm, e->info.model_id,
			       e->info.npages, hc_cli_format_size(e->info.envelope_bytes, b1, sizeof(b1)),
			       hc_cli_format_size(e->info.segment_bytes, b2, sizeof(b2)), e->live, e->path);
		if (e->err || e->incomplete)
			continue;
		for (unsigned k = 0; k < e->live; k++) {
			const struct hc_rank_info *ri = &e->ranks[k];
			char quota[16];

			printf("  slot %" PRIu32 ": pid %" PRIu32 " (%s), ", ri->slot, ri->pid,
			       ri->comm[0] ? ri->comm : "-");
			if (ri->engine_id < 0)
				printf("no engine, held %" PRIu32 "\n", ri->held);
			else
				printf("engine %" PRId32 ", tp rank %" PRIu32 " of %" PRIu32 ", quota %s, held %" PRIu32
				       "\n",
				       ri->engine_id, ri->tp_rank, ri->tp_size,
				       hcp_quota_text(ri, quota, sizeof(quota)), ri->held);
		}
		hcp_engines_text(e->ranks, e->live, "  ");
	}
}

static struct json_object *ls_json(const struct ls_entry *es, size_t n, const char *dir)
{
	struct json_object *o = hcp_json_new("hicache.pool-ls/1"), *a = json_object_new_array(), *x, *a2;
	char hex[65];

	hcp_jadd_str(o, "dir", dir);
	for (size_t i = 0; i < n; i++) {
		const struct ls_entry *e = &es[i];

		x = json_object_new_object();
		hcp_jadd_str(x, "name", e->name);
		hcp_jadd_str(x, "path", e->path);
		if (e->incomplete) {
			hcp_jadd_str(x, "status", "incomplete");
			hcp_jadd_u64(x, "creator_pid", e->creator_pid);
		} else if (e->err) {
			hcp_jadd_str(x, "status", "error");
			hcp_jadd_str(x, "error", e->msg);
		} else {
			hcp_jadd_str(x, "status", "ok");
			hcp_jadd_str(x, "model_id", e->info.model_id);
			hcp_jadd_str(x, "fingerprint", hc_cli_hex(e->info.fingerprint, 32, hex));
			hcp_jadd_u64(x, "npages", e->info.npages);
			hcp_jadd_u64(x, "envelope_bytes", e->info.envelope_bytes);
			hcp_jadd_u64(x, "segment_bytes", e->info.segment_bytes);
			hcp_jadd_u64(x, "max_ranks", e->info.max_ranks);
			hcp_jadd_u64(x, "live_ranks", e->live);
			a2 = json_object_new_array();
			for (unsigned k = 0; k < e->live; k++)
				json_object_array_add(a2, hcp_rank_json(&e->ranks[k]));
			json_object_object_add(x, "ranks", a2);
			json_object_object_add(x, "engines", hcp_engines_json(e->ranks, e->live));
		}
		json_object_array_add(a, x);
	}
	json_object_object_add(o, "pools", a);
	return o;
}

int hcp_cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = { HCP_OPTION_DIR, HCP_OPTION_JSON, HCP_OPTIONS_END };
	struct ls_entry *es = NULL, *grown;
	size_t n = 0, cap = 0;
	struct hcp_args va;
	const char *dir;
	struct dirent *d;
	DIR *dh;
	int ret;

	if ((ret = hcp_parse_args(argc, argv, opts, hcp_ls_usage, &va, NULL, NULL)) != HCP_GO)
		return ret;
	if (optind < argc)
		return hcp_usage_error("unexpected argument '%s': ls takes no NAME (use info)", argv[optind]);
	dir = va.dir ? va.dir : HCP_DEFAULT_DIR;
	dh = opendir(dir);
	if (!dh)
		return hcp_failure("cannot list %s: %s", dir, strerror(errno));

	ret = HC_CLI_EXIT_FAIL;
	while ((errno = 0, d = readdir(dh))) {
		struct ls_entry *e;
		char *cname = NULL;
		uint32_t pid = 0;
		int r = 0;

		if (strncmp(d->d_name, "hicache.", 8) != 0 && (r = parse_creating(d->d_name, &cname, &pid)) == 0)
			continue;
		if (r < 0)
			goto oom;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			grown = realloc(es, cap * sizeof(*es));
			if (!grown) {
				free(cname);
				goto oom;
			}
			es = grown;
		}
		e = &es[n];
		memset(e, 0, sizeof(*e));
		e->name = cname ? cname : strdup(d->d_name + 8);
		if (!e->name)
			goto oom;
		n++;
		snprintf(e->path, sizeof(e->path), "%s/%s", dir, d->d_name);
		if (cname) {
			e->incomplete = 1;
			e->creator_pid = pid;
		} else {
			ls_probe(e, dir, dirfd(dh), d->d_name);
		}
	}
	if (errno) {
		hcp_failure("cannot read %s: %s", dir, strerror(errno));
		goto out;
	}
	if (n)
		qsort(es, n, sizeof(*es), ls_cmp);
	if (va.json) {
		struct json_object *o = ls_json(es, n, dir);

		if (hcp_print_json(o) == 0)
			ret = HC_CLI_EXIT_OK;
		json_object_put(o);
	} else {
		ls_text(es, n, dir);
		ret = HC_CLI_EXIT_OK;
	}
	goto out;
oom:
	hcp_failure("out of memory listing %s", dir);
out:
	for (size_t i = 0; i < n; i++)
		free(es[i].name);
	free(es);
	closedir(dh);
	return ret;
}
