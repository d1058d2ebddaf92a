/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.c - the options that describe a pool at its creation, for every
 * tool that creates one ('hicache-pool create', hicached): parsed one at a
 * time from any source, checked as a whole before creating, and compared
 * with a pool that already exists, so a daemon restarted with another
 * geometry says so instead of serving a pool its engines do not expect.
 */
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

#define BIT(o) (1u << (o))

const struct hc_cli_pool_optinfo hc_cli_pool_opts[HC_CLI_POOL__COUNT] = {
	[HC_CLI_POOL_MODEL] = { "model", "ID", "model the pages belong to (part of the fingerprint)" },
	[HC_CLI_POOL_PAGE_TOKENS] = { "page-tokens", "N", "tokens per page, the engine's page size" },
	[HC_CLI_POOL_TP] = { "tp", "N", "tensor-parallel size the pool is laid out for" },
	[HC_CLI_POOL_HEAD_GROUPS] = { "head-groups", "N",
				      "head groups per sharded component (default: min(tp, HEADS))" },
	[HC_CLI_POOL_PAGES] = { "pages", "N", "capacity in pages" },
	[HC_CLI_POOL_SIZE] = { "size", "SIZE", "capacity in envelope bytes (K, M, G, T), rounded down to pages" },
	[HC_CLI_POOL_KV] = { "kv", "NAME,DTYPE,HEADS,HEAD_BYTES,LAYERS[,replicated][,window=W]",
			     "a K/V component (repeatable)" },
	[HC_CLI_POOL_STATE] = { "state", "NAME,DTYPE,BYTES_PER_LAYER,LAYERS[,replicated][,window=W]",
				"a state-snapshot component (repeatable)" },
	[HC_CLI_POOL_DIR] = { "dir", "DIR", "the pool's directory: a tmpfs or hugetlbfs (default /dev/shm)" },
	[HC_CLI_POOL_GROUP] = { "group", "GROUP", "group allowed to attach (mode becomes 0660)" },
	[HC_CLI_POOL_MODE] = { "mode", "0600|0660", "file mode (default 0600, or 0660 with a group)" },
	[HC_CLI_POOL_MAX_RANKS] = { "max-ranks", "N", "rank slots, 1..128 (default 32)" },
	[HC_CLI_POOL_QUARANTINE_MS] = { "quarantine-ms", "N",
					"grace before a dead rank's reservations are reused (default 2000)" },
	[HC_CLI_POOL_NUMA] = { "numa", "bind:NODES|interleave[:NODES]", "NUMA placement, applied before populating" },
	[HC_CLI_POOL_EVICT] = { "evict", "clock|lru", "eviction policy (default clock)" },
	[HC_CLI_POOL_MAX_TICKETS] = { "max-tickets", "N", "tickets open at once, a multiple of 64 (default 64)" },
	[HC_CLI_POOL_TICKET_KEYS] = { "ticket-keys", "N", "most keys one ticket names (default 1024)" },
	[HC_CLI_POOL_HOST_MODE] = { "host-mode", "cache|buffer_only",
				    "keep READY pages, or only stage transfers (default cache)" },
	[HC_CLI_POOL_RING_ENTRIES] = { "ring-entries", "N",
				       "each rank's request ring, a power of two in 8..4096 (default 64)" },
	[HC_CLI_POOL_ARG_BYTES] = { "arg-bytes", "SIZE",
				    "each rank's argument area, a multiple of 4096 (default 64K)" },
};

void hc_cli_pool_init(struct hc_cli_pool *cp)
{
	memset(cp, 0, sizeof(*cp));
	cp->spec.size = sizeof(cp->spec);
}

void hc_cli_pool_next_source(struct hc_cli_pool *cp)
{
	cp->seen = 0;
}

int hc_cli_pool_set(struct hc_cli_pool *cp, enum hc_cli_pool_opt opt, const char *what, const char *v)
{
	struct hc_pool_spec *s = &cp->spec;
	int ret = 0;

	if ((unsigned)opt >= HC_CLI_POOL__COUNT)
		return hc_cli_fail(EINVAL, "%s: not a pool option", what);
	if (opt != HC_CLI_POOL_KV && opt != HC_CLI_POOL_STATE) {
		/* a second --pages would silently win: refuse it */
		if (cp->seen & BIT(opt))
			return hc_cli_fail(EINVAL, "option '%s' is given twice", what);
	} else if (!(cp->seen & (BIT(HC_CLI_POOL_KV) | BIT(HC_CLI_POOL_STATE)))) {
		cp->ncomp = 0; /* this source's list replaces an earlier one */
	}
	if ((opt == HC_CLI_POOL_PAGES || opt == HC_CLI_POOL_SIZE) &&
	    !(cp->seen & (BIT(HC_CLI_POOL_PAGES) | BIT(HC_CLI_POOL_SIZE)))) {
		/* so does its capacity, in either unit */
		cp->given &= ~(BIT(HC_CLI_POOL_PAGES) | BIT(HC_CLI_POOL_SIZE));
		s->capacity_pages = s->capacity_bytes = 0;
	}

	switch (opt) {
	case HC_CLI_POOL_MODEL:
		s->model_id = v;
		break;
	case HC_CLI_POOL_PAGE_TOKENS:
		ret = hc_cli_parse_u32(what, v, 1, UINT32_MAX, &s->page_tokens);
		break;
	case HC_CLI_POOL_TP:
		ret = hc_cli_parse_u32(what, v, 1, UINT32_MAX, &s->tp_size);
		break;
	case HC_CLI_POOL_HEAD_GROUPS:
		ret = hc_cli_parse_u32(what, v, 1, HC_MAX_HEAD_GROUPS, &s->head_groups);
		break;
	case HC_CLI_POOL_PAGES:
		ret = hc_cli_parse_u64(what, v, 1, UINT64_MAX, &s->capacity_pages);
		break;
	case HC_CLI_POOL_SIZE:
		ret = hc_cli_parse_size(what, v, 1, &s->capacity_bytes);
		break;
	case HC_CLI_POOL_KV:
	case HC_CLI_POOL_STATE:
		if (cp->ncomp == HC_MAX_COMPONENTS)
			return hc_cli_fail(EINVAL, "too many components: a pool has at most %d", HC_MAX_COMPONENTS);
		ret = hc_cli_parse_comp(what, v, opt == HC_CLI_POOL_KV ? HC_COMP_KV : HC_COMP_STATE,
					&cp->comps[cp->ncomp]);
		if (ret == 0)
			cp->ncomp++;
		break;
	case HC_CLI_POOL_DIR:
		s->dir = v;
		break;
	case HC_CLI_POOL_GROUP:
		s->group = v;
		break;
	case HC_CLI_POOL_MODE:
		ret = hc_cli_parse_mode(what, v, &s->mode);
		break;
	case HC_CLI_POOL_MAX_RANKS:
		ret = hc_cli_parse_u32(what, v, 1, HC_MAX_RANKS, &s->max_ranks);
		break;
	case HC_CLI_POOL_QUARANTINE_MS:
		ret = hc_cli_parse_u32(what, v, 1, UINT32_MAX, &s->quarantine_ms);
		break;
	case HC_CLI_POOL_NUMA:
		ret = hc_cli_parse_numa(what, v, &s->numa, &s->numa_nodes);
		break;
	case HC_CLI_POOL_EVICT:
		if (!strcmp(v, "clock"))
			s->evict = HC_EVICT_CLOCK;
		else if (!strcmp(v, "lru"))
			s->evict = HC_EVICT_LRU;
		else
			return hc_cli_fail(EINVAL, "%s '%s': use 'clock' or 'lru'", what, v);
		break;
	case HC_CLI_POOL_MAX_TICKETS:
		ret = hc_cli_parse_u32(what, v, 64, 4096, &s->max_tickets);
		if (ret == 0 && s->max_tickets % 64)
			return hc_cli_fail(EINVAL, "%s %u: give a multiple of 64", what, s->max_tickets);
		break;
	case HC_CLI_POOL_TICKET_KEYS:
		ret = hc_cli_parse_u32(what, v, 1, HC_LOOKUP_MAX, &s->ticket_keys);
		break;
	case HC_CLI_POOL_HOST_MODE:
		if (!strcmp(v, "cache"))
			s->host_mode = HC_HOST_CACHE;
		else if (!strcmp(v, "buffer_only"))
			s->host_mode = HC_HOST_BUFFER_ONLY;
		else
			return hc_cli_fail(EINVAL, "%s '%s': use 'cache' or 'buffer_only'", what, v);
		break;
	case HC_CLI_POOL_RING_ENTRIES:
		ret = hc_cli_parse_u32(what, v, 8, 4096, &s->ring_entries);
		if (ret == 0 && (s->ring_entries & (s->ring_entries - 1)))
			return hc_cli_fail(EINVAL, "%s %u: give a power of two", what, s->ring_entries);
		break;
	case HC_CLI_POOL_ARG_BYTES:
		ret = hc_cli_parse_size(what, v, 4096, &s->arg_bytes);
		if (ret == 0 && s->arg_bytes % 4096)
			return hc_cli_fail(EINVAL, "%s %llu: give a multiple of 4096", what,
					   (unsigned long long)s->arg_bytes);
		break;
	case HC_CLI_POOL__COUNT:
		break;
	}
	if (ret < 0)
		return ret;
	cp->seen |= BIT(opt);
	cp->given |= BIT(opt);
	return 0;
}

int hc_cli_pool_has_geometry(const struct hc_cli_pool *cp)
{
	return (cp->given & ~BIT(HC_CLI_POOL_DIR)) != 0;
}

int hc_cli_pool_finish(struct hc_cli_pool *cp)
{
	struct hc_pool_spec *s = &cp->spec;

	if (!s->model_id)
		return hc_cli_fail(EINVAL, "missing --model ID: name the model the pages belong to");
	if (!s->page_tokens)
		return hc_cli_fail(EINVAL, "missing --page-tokens N: give the engine's page size in tokens");
	if (!s->tp_size)
		return hc_cli_fail(EINVAL, "missing --tp N: give the tensor-parallel size the pool is for");
	if (cp->ncomp == 0)
		return hc_cli_fail(EINVAL, "no components: give at least one --kv or --state");
	if ((cp->given & BIT(HC_CLI_POOL_PAGES)) && (cp->given & BIT(HC_CLI_POOL_SIZE)))
		return hc_cli_fail(EINVAL, "both --pages and --size given: give one capacity");
	if (!(cp->given & (BIT(HC_CLI_POOL_PAGES) | BIT(HC_CLI_POOL_SIZE))))
		return hc_cli_fail(EINVAL, "missing capacity: give --pages N or --size SIZE");
	if (s->group && s->mode == 0600)
		return hc_cli_fail(
			EINVAL,
			"--group '%s' with --mode 0600 would lock the group out: use --mode 0660 or drop --mode",
			s->group);
	if (s->dir && s->dir[0] != '/')
		return hc_cli_fail(EINVAL, "--dir '%s' must be an absolute path", s->dir);
	for (unsigned i = 0; i < cp->ncomp; i++) {
		cp->specs[i] = cp->comps[i].spec;
		cp->specs[i].name = cp->comps[i].name; /* the struct may have been copied */
	}
	s->comps = cp->specs;
	s->ncomp = cp->ncomp;
	return 0;
}

/* ---- comparing with an existing pool */

/* A component as --kv/--state would give it, so two can be compared as text. */
static void comp_text(enum hc_comp_kind kind, const char *name, enum hc_dtype dtype, uint32_t heads,
		      uint32_t head_bytes, uint64_t bytes_per_layer, uint32_t layers, enum hc_sharding sh,
		      uint32_t window, char *buf, size_t len)
{
	int n;

	if (kind == HC_COMP_KV)
		n = snprintf(buf, len, "--kv %s,%s,%" PRIu32 ",%" PRIu32 ",%" PRIu32, name, hc_dtype_name(dtype), heads,
			     head_bytes, layers);
	else
		n = snprintf(buf, len, "--state %s,%s,%" PRIu64 ",%" PRIu32, name, hc_dtype_name(dtype),
			     bytes_per_layer, layers);
	if (n > 0 && (size_t)n < len && sh == HC_REPLICATED)
		n += snprintf(buf + n, len - (size_t)n, ",replicated");
	if (n > 0 && (size_t)n < len && window)
		snprintf(buf + n, len - (size_t)n, ",window=%" PRIu32, window);
}

struct diffs {
	char text[400];
	size_t len;
	unsigned n;
};

static void differ(struct diffs *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Note one disagreement, "; "-separated. */
static void differ(struct diffs *d, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (d->len + 2 < sizeof(d->text)) {
		if (d->n)
			d->len += (size_t)snprintf(d->text + d->len, sizeof(d->text) - d->len, "; ");
		va_start(ap, fmt);
		n = vsnprintf(d->text + d->len, sizeof(d->text) - d->len, fmt, ap);
		va_end(ap);
		if (n > 0)
			d->len = d->len + (size_t)n < sizeof(d->text) ? d->len + (size_t)n : sizeof(d->text) - 1;
	}
	d->n++;
}

static void differ_u64(struct diffs *d, const struct hc_cli_pool *cp, enum hc_cli_pool_opt o, uint64_t given,
		       uint64_t pool)
{
	if ((cp->given & BIT(o)) && given != pool)
		differ(d, "--%s %" PRIu64 " (the pool has %" PRIu64 ")", hc_cli_pool_opts[o].name, given, pool);
}

static void differ_comps(struct diffs *d, const struct hc_cli_pool *cp, hc_pool *pool, uint32_t ncomp)
{
	char want[256], have[256];

	if (cp->ncomp != ncomp) {
		differ(d, "%u components given (the pool has %" PRIu32 ")", cp->ncomp, ncomp);
		return;
	}
	for (unsigned i = 0; i < ncomp; i++) {
		const struct hc_component_spec *g = &cp->comps[i].spec;
		struct hc_component_info ci;

		if (hc_pool_component(pool, i, &ci, sizeof(ci)) < 0) {
			differ(d, "component %u cannot be read: %s", i, hc_last_error());
			continue;
		}
		comp_text(g->kind, cp->comps[i].name, g->dtype, g->kv_heads, g->head_bytes, g->bytes_per_layer,
			  g->layers, g->sharding, g->window_pages, want, sizeof(want));
		comp_text(ci.kind, ci.name, ci.dtype, ci.kv_heads, ci.head_bytes, ci.bytes_per_layer, ci.layers,
			  ci.sharding, ci.window_pages, have, sizeof(have));
		if (strcmp(want, have))
			differ(d, "%s (the pool has %s)", want, have);
	}
}

/* The group and mode live in the file's owner and permissions. */
static void differ_file(struct diffs *d, const struct hc_cli_pool *cp, const char *path)
{
	struct stat st;

	if (!(cp->given & (BIT(HC_CLI_POOL_GROUP) | BIT(HC_CLI_POOL_MODE))))
		return;
	if (stat(path, &st) < 0) {
		differ(d, "cannot stat %s to compare --group and --mode: %s", path, strerror(errno));
		return;
	}
	if (cp->given & BIT(HC_CLI_POOL_MODE) && (st.st_mode & 07777) != cp->spec.mode)
		differ(d, "--mode 0%o (the pool has 0%o)", (unsigned)cp->spec.mode, (unsigned)(st.st_mode & 07777));
	if (cp->given & BIT(HC_CLI_POOL_GROUP)) {
		struct group *g = getgrnam(cp->spec.group);

		if (!g)
			differ(d, "--group '%s' is no group on this system", cp->spec.group);
		else if (g->gr_gid != st.st_gid)
			differ(d, "--group '%s' (the pool's group is gid %u)", cp->spec.group, (unsigned)st.st_gid);
	}
}

int hc_cli_pool_agrees(const struct hc_cli_pool *cp, hc_pool *pool)
{
	const struct hc_pool_spec *s = &cp->spec;
	struct diffs d = { .len = 0 };
	struct hc_pool_info in;
	int ret;

	if ((ret = hc_pool_info(pool, &in, sizeof(in))) < 0)
		return hc_cli_fail(-ret, "%s", hc_last_error());
	if ((cp->given & BIT(HC_CLI_POOL_MODEL)) && strcmp(s->model_id, in.model_id))
		differ(&d, "--model '%s' (the pool has '%s')", s->model_id, in.model_id);
	differ_u64(&d, cp, HC_CLI_POOL_PAGE_TOKENS, s->page_tokens, in.page_tokens);
	differ_u64(&d, cp, HC_CLI_POOL_TP, s->tp_size, in.tp_size);
	differ_u64(&d, cp, HC_CLI_POOL_HEAD_GROUPS, s->head_groups, in.head_groups);
	differ_u64(&d, cp, HC_CLI_POOL_PAGES, s->capacity_pages, in.npages);
	if ((cp->given & BIT(HC_CLI_POOL_SIZE)) && in.envelope_bytes &&
	    s->capacity_bytes / in.envelope_bytes != in.npages)
		differ(&d, "--size %" PRIu64 " makes %" PRIu64 " pages (the pool has %" PRIu32 ")", s->capacity_bytes,
		       s->capacity_bytes / in.envelope_bytes, in.npages);
	if (cp->given & (BIT(HC_CLI_POOL_KV) | BIT(HC_CLI_POOL_STATE)))
		differ_comps(&d, cp, pool, in.ncomp);
	differ_file(&d, cp, in.path);
	differ_u64(&d, cp, HC_CLI_POOL_MAX_RANKS, s->max_ranks, in.max_ranks);
	differ_u64(&d, cp, HC_CLI_POOL_QUARANTINE_MS, s->quarantine_ms, in.quarantine_ms);
	/* --numa placed the pages at creation; the pool does not record it */
	if ((cp->given & BIT(HC_CLI_POOL_EVICT)) && s->evict != in.evict)
		differ(&d, "--evict %s (the pool has %s)", s->evict == HC_EVICT_LRU ? "lru" : "clock",
		       in.evict == HC_EVICT_LRU ? "lru" : "clock");
	differ_u64(&d, cp, HC_CLI_POOL_MAX_TICKETS, s->max_tickets, in.max_tickets);
	differ_u64(&d, cp, HC_CLI_POOL_TICKET_KEYS, s->ticket_keys, in.ticket_keys);
	if ((cp->given & BIT(HC_CLI_POOL_HOST_MODE)) && s->host_mode != in.host_mode)
		differ(&d, "--host-mode %s (the pool has %s)",
		       s->host_mode == HC_HOST_BUFFER_ONLY ? "buffer_only" : "cache",
		       in.host_mode == HC_HOST_BUFFER_ONLY ? "buffer_only" : "cache");
	differ_u64(&d, cp, HC_CLI_POOL_RING_ENTRIES, s->ring_entries, in.sq_entries);
	differ_u64(&d, cp, HC_CLI_POOL_ARG_BYTES, s->arg_bytes, in.arg_bytes);
	if (d.n)
		return hc_cli_fail(
			EINVAL,
			"pool '%s' at %s exists with another geometry: %s; drop %s, or destroy the pool to create it anew",
			in.name, in.path, d.text, d.n == 1 ? "that option" : "those options");
	return 0;
}
