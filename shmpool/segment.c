/* SPDX-License-Identifier: Apache-2.0 */
/*
 * segment.c - create, attach, validate, detach and destroy a pool segment.
 *
 * Creation builds the whole segment under a hidden temporary name and gives
 * it its public name with link(2) only when it is complete, so an attacher
 * never sees half a pool.  Attach trusts nothing: it reads the header with
 * pread into private memory, checks every field, recomputes the layout and
 * the fingerprint, and only then maps the segment.
 *
 * A sealed pool (hc_pool_spec.sealed_fd) is built the same way in a memfd
 * that never has a name: sealed against shrinking and growing as soon as
 * it is sized, so no holder of its fd can cut it short under the others.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <sys/random.h>
#include <unistd.h>

#include "pool.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif

#define HC_DEFAULT_DIR      "/dev/shm"
#define HC_WARN_SMALL_PAGES (UINT64_C(4) << 30)

int hc_pool_name_valid(const char *name)
{
	size_t n;

	if (!name || !*name)
		return hc__err(EINVAL, "pool name is empty");
	n = strnlen(name, HC_NAME_MAX + 1);
	if (n > HC_NAME_MAX)
		return hc__err(EINVAL, "pool name is longer than %d characters", HC_NAME_MAX);
	if (name[0] == '.' || strstr(name, ".."))
		return hc__err(EINVAL, "pool name '%s' may not start with '.' or contain '..'", name);
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
		      c == '-' || c == '.'))
			return hc__err(EINVAL, "pool name '%s' has '%c': use letters, digits, '_', '-' and '.'", name,
				       c);
	}
	return 0;
}

static int pool_path(const char *dir, const char *name, char *out, size_t outlen)
{
	int ret = hc_pool_name_valid(name);

	if (ret < 0)
		return ret;
	if (!dir)
		dir = HC_DEFAULT_DIR;
	if (dir[0] != '/')
		return hc__err(EINVAL, "pool directory '%s' must be an absolute path", dir);
	if ((size_t)snprintf(out, outlen, "%s/hicache.%s", dir, name) >= outlen)
		return hc__err(ENAMETOOLONG, "pool directory '%s' is too long", dir);
	return 0;
}

static uint64_t now_unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double gib(uint64_t b)
{
	return (double)b / (double)(UINT64_C(1) << 30);
}

/* Who hears how a long step goes (hc_progress_fn), and how often. */
#define PROGRESS_STEP (UINT64_C(1) << 30)
struct progress {
	hc_progress_fn fn;
	void *arg;
};

static void tell(const struct progress *pr, const char *phase, uint64_t done, uint64_t total)
{
	if (pr && pr->fn)
		pr->fn(pr->arg, phase, done, total);
}

/* Populate this process's page tables for [addr, addr+len), a GiB at a
 * time so that pr hears of it. */
static int populate(void *addr, size_t len, const char *what, const struct progress *pr)
{
	size_t off = 0;

	tell(pr, "populate", 0, len);
	while (off < len) {
		size_t n = len - off < PROGRESS_STEP ? len - off : PROGRESS_STEP;
		if (madvise((uint8_t *)addr + off, n, MADV_POPULATE_WRITE) < 0)
			break;
		off += n;
		tell(pr, "populate", off, len);
	}
	if (off == len)
		return 0;
	if (errno == EINVAL) {
		/* Kernels before 5.14: say so, then fault every page in by reading
		 * it.  Never write: other processes are using the segment. */
		hc__log(HC_LOG_WARN, "%s: MADV_POPULATE_WRITE unsupported (Linux < 5.14); faulting pages in instead",
			what);
		long pg = sysconf(_SC_PAGESIZE);
		uint8_t sum = 0;
		for (; off < len; off += (size_t)pg)
			sum ^= ((volatile uint8_t *)addr)[off];
		(void)sum;
		tell(pr, "populate", len, len);
		return 0;
	}
	if (errno == EFAULT || errno == ENOMEM)
		return hc__err(
			ENOMEM,
			"%s: populating %.2f GiB failed (%s): the backing file system ran out of memory; lower the capacity or raise the tmpfs size",
			what, gib(len), strerror(errno));
	return hc__err(errno, "%s: MADV_POPULATE_WRITE failed: %s", what, strerror(errno));
}

/* posix_fallocate of [0, len), a GiB at a time for pr: 0 or an errno. */
static int allocate(int fd, uint64_t len, const struct progress *pr)
{
	tell(pr, "allocate", 0, len);
	for (uint64_t off = 0; off < len;) {
		uint64_t n = len - off < PROGRESS_STEP ? len - off : PROGRESS_STEP;
		int err = posix_fallocate(fd, (off_t)off, (off_t)n);
		if (err)
			return err;
		off += n;
		tell(pr, "allocate", off, len);
	}
	return 0;
}

static int apply_numa(void *addr, size_t len, const struct hc_pool_spec *s)
{
	struct bitmask *nodes;

	if (s->numa == HC_NUMA_DEFAULT)
		return 0;
	if (s->numa != HC_NUMA_BIND && s->numa != HC_NUMA_INTERLEAVE)
		return hc__err(EINVAL, "numa mode %d is not default, bind or interleave", (int)s->numa);
	if (numa_available() < 0)
		return hc__err(
			ENOSYS,
			"NUMA placement was asked for, but this kernel or machine has no NUMA support; drop the numa option");
	if (s->numa_nodes && *s->numa_nodes) {
		nodes = numa_parse_nodestring(s->numa_nodes);
		if (!nodes)
			return hc__err(EINVAL,
				       "NUMA node list '%s' is invalid or names nodes this machine lacks (it has %d)",
				       s->numa_nodes, numa_max_node() + 1);
	} else if (s->numa == HC_NUMA_INTERLEAVE) {
		nodes = numa_allocate_nodemask();
		copy_bitmask_to_bitmask(numa_all_nodes_ptr, nodes);
	} else {
		return hc__err(EINVAL, "NUMA bind needs a node list (e.g. \"0\")");
	}
	if (s->numa == HC_NUMA_BIND)
		numa_tonodemask_memory(addr, len, nodes);
	else
		numa_interleave_memory(addr, len, nodes);
	numa_bitmask_free(nodes);
	return 0;
}

/* The first control byte of a model id (below 0x20, or DEL), or NULL:
 * tools print ids as they are, so one must not move a terminal's cursor. */
static const char *control_byte(const char *id)
{
	for (; *id; id++)
		if ((unsigned char)*id < 0x20 || *id == 0x7f)
			return id;
	return NULL;
}

static int spec_to_geom(const struct hc_pool_spec *s, struct hc__geom *g)
{
	const char *bad;
	int ret;

	memset(g, 0, sizeof(*g));
	if (!s->model_id || !*s->model_id)
		return hc__err(EINVAL, "model id is empty: name the model the pages belong to");
	if (strlen(s->model_id) > HC_MODEL_ID_MAX)
		return hc__err(EINVAL, "model id is longer than %d bytes", HC_MODEL_ID_MAX);
	if ((bad = control_byte(s->model_id)))
		return hc__err(EINVAL, "model id has a control byte 0x%02x at offset %zu: give printable text",
			       (unsigned)(unsigned char)*bad, (size_t)(bad - s->model_id));
	if (!s->comps || s->ncomp == 0 || s->ncomp > HC_MAX_COMPONENTS)
		return hc__err(EINVAL, "a pool needs 1..%d components, got %u", HC_MAX_COMPONENTS, s->ncomp);
	g->page_tokens = s->page_tokens;
	g->tp_size = s->tp_size;
	g->head_groups = s->head_groups;
	g->ncomp = s->ncomp;
	g->max_ranks = s->max_ranks ? s->max_ranks : 32;
	g->max_tickets = s->max_tickets ? s->max_tickets : 64;
	g->ticket_keys = s->ticket_keys ? s->ticket_keys : 1024;
	g->evict = (uint32_t)s->evict;
	g->host_mode = (uint32_t)s->host_mode;
	g->sq_entries = s->ring_entries ? s->ring_entries : 64;
	g->cq_entries = 2 * g->sq_entries;
	g->arg_bytes = s->arg_bytes ? s->arg_bytes : 64 * 1024;
	for (unsigned i = 0; i < s->ncomp; i++) {
		const struct hc_component_spec *cs = &s->comps[i];
		struct hc_component_info *c = &g->comps[i];
		if (!cs->name || strlen(cs->name) > HC_COMP_NAME_MAX)
			return hc__err(EINVAL, "component %u: name is missing or longer than %d", i, HC_COMP_NAME_MAX);
		strcpy(c->name, cs->name);
		c->dtype = cs->dtype;
		c->kind = cs->kind;
		c->sharding = cs->sharding;
		c->kv_heads = cs->kv_heads;
		c->head_bytes = cs->head_bytes;
		c->bytes_per_layer = cs->kind == HC_COMP_STATE ? cs->bytes_per_layer : 0;
		c->layers = cs->layers;
		c->window_pages = cs->window_pages;
	}
	if ((ret = hc__geom_envelope(g)) < 0)
		return ret;
	if ((s->capacity_pages != 0) == (s->capacity_bytes != 0))
		return hc__err(EINVAL, "give exactly one capacity: a page count or a byte size");
	if (s->capacity_pages) {
		if (s->capacity_pages > (uint64_t)INT32_MAX)
			return hc__err(EINVAL, "capacity of %" PRIu64 " pages is over the limit of 2^31-1",
				       s->capacity_pages);
		g->npages = (uint32_t)s->capacity_pages;
	} else {
		uint64_t n = s->capacity_bytes / g->envelope_bytes;
		if (n == 0)
			return hc__err(EINVAL,
				       "capacity of %" PRIu64 " bytes holds no page: one envelope is %" PRIu64 " bytes",
				       s->capacity_bytes, g->envelope_bytes);
		if (n > (uint64_t)INT32_MAX)
			return hc__err(EINVAL, "capacity of %" PRIu64 " pages is over the limit of 2^31-1", n);
		g->npages = (uint32_t)n;
	}
	return hc__geom_regions(g);
}

static uint64_t hash_secret(void)
{
	uint64_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = now_unix_ns() ^ ((uint64_t)getpid() << 32);
	return v;
}

static void ctl_init(struct hc_seg_ctl *c)
{
	hc__mutex_init_robust(&c->service.life);
	hc__bell_init(&c->service.bell);
	hc__mutex_init_robust(&c->engine_lock.m);
	for (unsigned i = 0; i < HC_INDEX_STRIPES; i++)
		hc__mutex_init_robust(&c->index_lock[i].m);
	for (unsigned i = 0; i < HC_TICKET_STRIPES; i++)
		hc__mutex_init_robust(&c->ticket_lock[i].m);
	hc__mutex_init_robust(&c->lru_lock.m);
}

/* Fill the header and component records of a fresh segment. */
static void write_meta(uint8_t *base, const struct hc_pool_spec *s, const struct hc__geom *g, const uint8_t fp[32],
		       uint32_t qms)
{
	struct hc_seg_hdr *h = (struct hc_seg_hdr *)base;
	struct hc_seg_comp *rc = (struct hc_seg_comp *)(base + g->toc[HC_REG_COMPS].off);
	struct hc_seg_rank *rk = (struct hc_seg_rank *)(base + g->toc[HC_REG_RANKS].off);

	h->magic = HC_SEG_MAGIC;
	h->layout_major = HC_LAYOUT_MAJOR;
	h->layout_minor = HC_LAYOUT_MINOR;
	h->hdr_bytes = sizeof(*h);
	h->flags = (s->flags & HC_CREATE_SPARSE) ? HC_SEG_F_SPARSE : 0;
	h->segment_bytes = g->segment_bytes;
	h->created_unix_ns = now_unix_ns();
	h->creator_pid = (uint32_t)getpid();
	h->creator_uid = (uint32_t)geteuid();
	gethostname(h->creator_host, sizeof(h->creator_host) - 1);
	snprintf(h->model_id, sizeof(h->model_id), "%s", s->model_id);
	snprintf(h->layout_id, sizeof(h->layout_id), "%s", HC_LAYOUT_ID);
	memcpy(h->fingerprint, fp, 32);
	h->page_tokens = g->page_tokens;
	h->tp_size = g->tp_size;
	h->head_groups = g->head_groups;
	h->ncomp = g->ncomp;
	h->max_ranks = g->max_ranks;
	h->npages = g->npages;
	h->quarantine_ms = qms;
	h->evict_policy = g->evict;
	h->envelope_bytes = g->envelope_bytes;
	h->max_tickets = g->max_tickets;
	h->ticket_keys = g->ticket_keys;
	h->index_buckets = g->index_buckets;
	h->host_mode = g->host_mode;
	h->sq_entries = g->sq_entries;
	h->cq_entries = g->cq_entries;
	h->arg_bytes = g->arg_bytes;
	h->hash_secret = hash_secret();
	for (int r = 0; r < HC_REG__COUNT; r++)
		h->toc[r] = g->toc[r];
	for (unsigned i = 0; i < g->ncomp; i++) {
		const struct hc_component_info *c = &g->comps[i];
		snprintf(rc[i].name, sizeof(rc[i].name), "%s", c->name);
		rc[i].dtype = c->dtype;
		rc[i].kind = c->kind;
		rc[i].sharding = c->sharding;
		rc[i].groups = c->groups;
		rc[i].kv_heads = c->kv_heads;
		rc[i].head_bytes = c->head_bytes;
		rc[i].layers = c->layers;
		rc[i].window_pages = c->window_pages;
		rc[i].bytes_per_layer = c->bytes_per_layer;
		rc[i].offset = c->offset;
		rc[i].bytes = c->bytes;
		rc[i].group_stride = c->group_stride;
		rc[i].layer_stride = c->layer_stride;
	}
	for (unsigned i = 0; i < g->max_ranks; i++)
		hc__mutex_init_robust(&rk[i].lock);
	ctl_init((struct hc_seg_ctl *)(base + g->toc[HC_REG_CTL].off));
	/* Each rank slot's request path: empty rings, a quiet bell. */
	for (unsigned i = 0; i < g->max_ranks; i++) {
		uint8_t *blk = base + g->toc[HC_REG_RINGS].off + (uint64_t)i * g->rg.block;
		hc__bell_init((struct hc_bell *)blk);
		hc__ring_init(blk + g->rg.sq_off, g->rg.cq_off - g->rg.sq_off, g->sq_entries, HC_SQE_BYTES);
		hc__ring_init(blk + g->rg.cq_off, g->rg.arg_off - g->rg.cq_off, g->cq_entries, HC_CQE_BYTES);
	}
	/* Page words and pins are zero from fallocate: FREE, generation 0,
	 * unpinned; so the free map shows every page, the quarantine map none,
	 * and no page is on the LRU list (an empty circle through its head,
	 * node npages). */
	hc__fm_init(base + g->toc[HC_REG_FREEMAP].off, g->npages, 1);
	hc__fm_init(base + g->toc[HC_REG_FREEMAP].off + g->toc[HC_REG_FREEMAP].bytes / 2, g->npages, 0);
	if (g->toc[HC_REG_LRU].bytes) {
		struct hc_seg_lru *l = (struct hc_seg_lru *)(base + g->toc[HC_REG_LRU].off);
		for (uint32_t i = 0; i < g->npages; i++)
			l[i].prev = l[i].next = HC_LRU_OFF;
		l[g->npages].prev = l[g->npages].next = g->npages;
	}
	hc__meta_digest(h, rc, g->ncomp, h->meta_digest);
	/* Release: everything above is visible before READY (no reader can see
	 * the segment before link(2) anyway; this orders it for the record). */
	atomic_store_explicit(&h->state, HC_SEG_READY, memory_order_release);
}

/* Give an O_TMPFILE file its name; fails with EEXIST like link(2). */
static int publish_anon(int fd, const char *path)
{
	char proc[64];

	if (linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH) == 0)
		return 0;
	if (errno != EPERM && errno != ENOENT)
		return -1;
	/* Without CAP_DAC_READ_SEARCH: through /proc, as open(2) documents. */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
}

/* The caller's spec and components, in this library's layout (abi.c). */
static int spec_in(const struct hc_pool_spec *spec, struct hc_pool_spec *s, struct hc_component_spec *cs)
{
	int ret;

	if ((ret = HC__ABI_IN(s, spec, "hc_pool_create", hc_pool_spec)) < 0)
		return ret;
	if (!s->comps || s->ncomp == 0 || s->ncomp > HC_MAX_COMPONENTS)
		return hc__err(EINVAL, "a pool needs 1..%d components, got %u", HC_MAX_COMPONENTS, s->ncomp);
	if ((ret = HC__ABI_IN_ARRAY(cs, s->comps, s->ncomp, "hc_pool_create", hc_component_spec)) < 0)
		return ret;
	s->comps = cs;
	return 0;
}

int hc_pool_create(const struct hc_pool_spec *spec)
{
	struct hc_component_spec comps[HC_MAX_COMPONENTS];
	struct hc_pool_spec sb, *s = &sb;
	char path[PATH_MAX], tmp[PATH_MAX + 64] = "";
	bool anon = false, sealed;
	struct hc__geom g;
	struct statvfs vfs;
	struct statfs sfs;
	struct stat st;
	uint8_t fp[32];
	uint8_t *base = MAP_FAILED;
	gid_t gid = (gid_t)-1;
	mode_t mode;
	uint32_t qms;
	int fd = -1, ret, err;
	uint64_t avail, phys, backed;
	struct progress pr;

	if (!spec)
		return hc__err(EINVAL, "pool spec is NULL");
	if ((ret = spec_in(spec, s, comps)) < 0)
		return ret;
	pr = (struct progress){ s->progress, s->progress_arg };
	if ((ret = hc__pt_env()) < 0)
		return ret;
	if ((ret = pool_path(s->dir, s->name, path, sizeof(path))) < 0)
		return ret;
	sealed = s->sealed_fd != NULL;
	if (sealed && s->dir)
		return hc__err(EINVAL, "pool '%s': a sealed pool is in no directory, but dir is '%s': drop one of them",
			       s->name, s->dir);
	if ((ret = spec_to_geom(s, &g)) < 0)
		return ret;
	qms = s->quarantine_ms ? s->quarantine_ms : 2000;
	mode = s->mode ? s->mode : (s->group ? 0660 : 0600);
	if (mode != 0600 && mode != 0660)
		return hc__err(EINVAL, "mode %04o is not allowed: a pool is 0600, or 0660 with a group",
			       (unsigned)mode);
	if (s->flags & ~(HC_CREATE_NO_POPULATE | HC_CREATE_SPARSE))
		return hc__err(EINVAL, "create: unknown flags 0x%x",
			       s->flags & ~(HC_CREATE_NO_POPULATE | HC_CREATE_SPARSE));
	/* What is reserved now: all of it, or (sparse) all but the envelopes. */
	backed = (s->flags & HC_CREATE_SPARSE) ? g.toc[HC_REG_ENV].off : g.segment_bytes;
	if (s->group) {
		struct group *gr = getgrnam(s->group);
		if (!gr)
			return hc__err(EINVAL, "group '%s' does not exist", s->group);
		gid = gr->gr_gid;
	}
	if (sealed) {
		snprintf(tmp, sizeof(tmp), "hicache.%s", s->name);
		fd = memfd_create(tmp, MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0)
			return hc__err(errno, "cannot create sealed pool '%s': memfd_create: %s", s->name,
				       strerror(errno));
		snprintf(tmp, sizeof(tmp), "the memfd of sealed pool '%s'", s->name);
		goto made;
	}
	if (stat(path, &st) == 0)
		return hc__err(EEXIST, "pool '%s' already exists at %s: destroy it first (hicache-pool destroy %s)",
			       s->name, path, s->name);
	if (lstat(path, &st) == 0) /* stat failed: a link to nothing */
		return hc__err(EEXIST, "%s is a symbolic link to nothing, not a pool: remove it (rm %s)", path, path);
	/* An unnamed file: a creator killed half way leaves nothing behind.
	 * File systems without O_TMPFILE get a hidden name with our pid. */
	fd = open(s->dir ? s->dir : HC_DEFAULT_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, mode);
	if (fd >= 0) {
		anon = true;
		snprintf(tmp, sizeof(tmp), "a temporary file in %s", s->dir ? s->dir : HC_DEFAULT_DIR);
	} else if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) {
		snprintf(tmp, sizeof(tmp), "%s/.hicache.%s.creating.%d", s->dir ? s->dir : HC_DEFAULT_DIR, s->name,
			 (int)getpid());
		fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	}
	if (fd < 0)
		return hc__err(errno, "cannot create a pool in %s: %s%s", s->dir ? s->dir : HC_DEFAULT_DIR,
			       strerror(errno),
			       errno == ENOENT   ? ": the directory does not exist"
			       : errno == EACCES ? ": this user may not write there"
						 : "");
made:
	if (fchmod(fd, mode) < 0 || (gid != (gid_t)-1 && fchown(fd, (uid_t)-1, gid) < 0)) {
		ret = hc__err(errno, "cannot set mode or group of %s: %s", tmp, strerror(errno));
		goto fail_unlink;
	}
	if (fstat(fd, &st) < 0 || fstatfs(fd, &sfs) < 0) {
		ret = hc__err(errno, "cannot stat %s: %s", tmp, strerror(errno));
		goto fail_unlink;
	}
	if (g.segment_bytes > HC_WARN_SMALL_PAGES && sfs.f_type != HUGETLBFS_MAGIC &&
	    st.st_blksize < (blksize_t)HC_SEG_ENV_ALIGN)
		hc__log(HC_LOG_WARN,
			"pool '%s' is %.1f GiB on 4 KiB pages: every attaching process pays a page fault per 4 KiB; put it on a huge-page tmpfs (mount -t tmpfs -o huge=always) or hugetlbfs and pass its directory",
			s->name, gib(g.segment_bytes));
	/* Fail before anything is mapped: no SIGBUS later, no half a pool. */
	if (fstatvfs(fd, &vfs) < 0) {
		ret = hc__err(errno, "cannot stat the file system of %s: %s", tmp, strerror(errno));
		goto fail_unlink;
	}
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	if (vfs.f_blocks && backed > avail) { /* no blocks: a tmpfs without a limit (a memfd's) */
		ret = hc__err(
			ENOSPC,
			"pool '%s' needs %.2f GiB but %s has %.2f GiB free: lower the capacity, or enlarge the tmpfs (Docker: --shm-size)",
			s->name, gib(backed),
			sealed   ? "the memfd's tmpfs"
			: s->dir ? s->dir
				 : HC_DEFAULT_DIR,
			gib(avail));
		goto fail_unlink;
	}
	phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	if (backed > phys) {
		ret = hc__err(ENOMEM,
			      "pool '%s' needs %.2f GiB but this machine has %.2f GiB of memory: lower the capacity",
			      s->name, gib(backed), gib(phys));
		goto fail_unlink;
	}
	if ((uint64_t)st.st_blksize > HC_SEG_ENV_ALIGN) {
		/* hugetlbfs with 1 GiB pages: the size must be a multiple of them */
		uint64_t a = (uint64_t)st.st_blksize;
		g.segment_bytes = (g.segment_bytes + a - 1) / a * a;
	}
	if (ftruncate(fd, (off_t)g.segment_bytes) < 0) {
		ret = hc__err(errno, "cannot size %s to %.2f GiB: %s", tmp, gib(g.segment_bytes), strerror(errno));
		goto fail_unlink;
	}
	/* Sealed before anything is mapped: from here no one can change the size. */
	if (sealed && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		ret = hc__err(errno, "cannot seal %s: %s", tmp, strerror(errno));
		goto fail_unlink;
	}
	base = mmap(NULL, g.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = hc__err(errno, "cannot map %s: %s", tmp, strerror(errno));
		goto fail_unlink;
	}
	/* The policy must be in place before the first page is allocated. */
	if ((ret = apply_numa(base, g.segment_bytes, s)) < 0)
		goto fail_unmap;
	err = allocate(fd, backed, &pr);
	if (err) {
		ret = hc__err(err, "cannot allocate %.2f GiB for pool '%s' in %s: %s%s", gib(g.segment_bytes), s->name,
			      s->dir ? s->dir : HC_DEFAULT_DIR, strerror(err),
			      err == ENOSPC ? "; lower the capacity or enlarge the tmpfs (Docker: --shm-size)" : "");
		goto fail_unmap;
	}
	if (!(s->flags & HC_CREATE_NO_POPULATE) && (ret = populate(base, backed, s->name, &pr)) < 0)
		goto fail_unmap;
	hc__fingerprint(s->model_id, &g, fp);
	write_meta(base, s, &g, fp, qms);
	munmap(base, g.segment_bytes);
	base = MAP_FAILED;
	if (sealed) {
		*s->sealed_fd = fd;
		return 0;
	}
	if ((anon ? publish_anon(fd, path) : link(tmp, path)) < 0) {
		ret = errno == EEXIST
			      ? hc__err(EEXIST, "pool '%s' was created by someone else meanwhile at %s", s->name, path)
			      : hc__err(errno, "cannot publish %s as %s: %s", tmp, path, strerror(errno));
		goto fail_unlink;
	}
	if (!anon)
		unlink(tmp);
	close(fd);
	return 0;

fail_unmap:
	munmap(base, g.segment_bytes);
fail_unlink:
	if (!anon && !sealed)
		unlink(tmp);
	close(fd);
	return ret;
}

int hc__pool_admits(const char *path, const struct stat *st, uid_t uid, const gid_t *groups, int ngroups)
{
	int in_group = 0;

	if (!S_ISREG(st->st_mode))
		return hc__err(EBADMSG, "%s is not a pool: not a regular file", path);
	for (int i = 0; i < ngroups && !in_group; i++)
		in_group = groups[i] == st->st_gid;
	if (st->st_mode & 0007)
		return hc__err(EPERM,
			       "%s has mode %04o, open to every user: a pool must be 0600 or 0660; chmod o-rwx %s",
			       path, (unsigned)(st->st_mode & 07777), path);
	if (st->st_mode & 0111)
		return hc__err(EPERM, "%s has mode %04o with execute bits: a pool must be 0600 or 0660", path,
			       (unsigned)(st->st_mode & 07777));
	if (uid != 0 && st->st_uid != uid && !((st->st_mode & 0060) == 0060 && in_group))
		return hc__err(
			EACCES,
			"%s belongs to uid %u and is not shared with a group of uid %u: attach as its owner, or recreate it with a group",
			path, (unsigned)st->st_uid, (unsigned)uid);
	return 0;
}

/* hc__pool_admits for this process: its effective ids and its groups. */
static int check_owner(const char *path, const struct stat *st)
{
	gid_t *groups;
	int n, ret;

	n = getgroups(0, NULL);
	groups = calloc((size_t)(n > 0 ? n : 0) + 1, sizeof(*groups));
	if (!groups)
		return hc__err(ENOMEM, "attach: out of memory");
	groups[0] = getegid();
	n = n > 0 ? getgroups(n, groups + 1) : 0;
	ret = hc__pool_admits(path, st, geteuid(), groups, (n > 0 ? n : 0) + 1);
	free(groups);
	return ret;
}

/* A sealed pool's fd: a memfd that no one can shrink or grow, nor seal
 * further (F_SEAL_FUTURE_WRITE would fail every later rank's mapping).
 * Its mode was checked by whoever handed it over. */
static int check_sealed(int fd, const char *path, const struct stat *st)
{
	int seals;

	if (!S_ISREG(st->st_mode))
		return hc__err(EBADMSG, "%s is not a pool: not a regular file", path);
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return hc__err(EPERM,
			       "%s cannot be sealed (%s): attach by fd takes a sealed pool's memfd only; "
			       "attach a named pool by its name",
			       path, strerror(errno));
	if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
		return hc__err(EPERM,
			       "%s is not sealed against shrinking and growing (seals 0x%x): any holder could "
			       "truncate it under the ranks; create it with hc_pool_spec.sealed_fd",
			       path, (unsigned)seals);
	if (!(seals & F_SEAL_SEAL))
		return hc__err(EPERM,
			       "%s is open to more seals (seals 0x%x): any holder could seal it against writing, "
			       "and every later rank's mapping would fail; create it with hc_pool_spec.sealed_fd",
			       path, (unsigned)seals);
	return 0;
}

/* Why this user may not open the pool at path: its owner, group and mode,
 * and what to do.  -EACCES. */
static int denied(const char *path, int readonly)
{
	struct stat st;
	struct group *gr;
	char gname[64];

	if (stat(path, &st) < 0)
		return hc__err(EACCES, "cannot open pool %s: %s", path, strerror(EACCES));
	gr = getgrgid(st.st_gid);
	snprintf(gname, sizeof(gname), "%s", gr ? gr->gr_name : "?");
	if ((st.st_mode & 0060) == 0060)
		return hc__err(
			EACCES,
			"cannot open pool %s %s: Permission denied: it belongs to uid %u and group %s (gid %u), mode %04o, and this "
			"process (uid %u) is not in that group: add the user to it (usermod -aG %s USER, then "
			"log in again)",
			path, readonly ? "to read" : "to attach", (unsigned)st.st_uid, gname, (unsigned)st.st_gid,
			(unsigned)(st.st_mode & 07777), (unsigned)geteuid(), gname);
	return hc__err(
		EACCES,
		"cannot open pool %s %s: Permission denied: it belongs to uid %u, mode %04o, shared with no group: attach as "
		"its owner, or recreate it with a group (hicache-pool create --group, or [pool] group)",
		path, readonly ? "to read" : "to attach", (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
}

/* Rebuild the geometry from the private header copy and compare every derived field. */
static int validate_meta(const char *path, const struct hc_seg_hdr *h, const struct hc_seg_comp *rc,
			 uint64_t file_bytes, struct hc__geom *g)
{
	uint8_t digest[32], fp[32];
	struct hc__geom want;
	char model[HC_MODEL_ID_MAX + 1];
	int ret;

	hc__meta_digest(h, rc, h->ncomp, digest);
	if (memcmp(digest, h->meta_digest, 32) != 0)
		return hc__err(EBADMSG,
			       "%s: metadata checksum mismatch, the header is corrupt: destroy and recreate the pool",
			       path);
	if (memchr(h->model_id, 0, sizeof(h->model_id)) == NULL || h->model_id[0] == 0)
		return hc__err(EBADMSG, "%s: model id is not a terminated string", path);
	if (control_byte(h->model_id))
		return hc__err(EBADMSG, "%s: model id has a control byte: the header is corrupt", path);
	memset(g, 0, sizeof(*g));
	g->page_tokens = h->page_tokens;
	g->tp_size = h->tp_size;
	g->head_groups = h->head_groups;
	g->ncomp = h->ncomp;
	g->max_ranks = h->max_ranks;
	g->npages = h->npages;
	g->max_tickets = h->max_tickets;
	g->ticket_keys = h->ticket_keys;
	g->evict = h->evict_policy;
	g->host_mode = h->host_mode;
	g->sq_entries = h->sq_entries;
	g->cq_entries = h->cq_entries;
	g->arg_bytes = h->arg_bytes;
	if (h->head_groups == 0)
		return hc__err(EBADMSG, "%s: head_groups is zero", path);
	for (unsigned i = 0; i < h->ncomp; i++) {
		struct hc_component_info *c = &g->comps[i];
		if (memchr(rc[i].name, 0, sizeof(rc[i].name)) == NULL)
			return hc__err(EBADMSG, "%s: component %u name is not terminated", path, i);
		memcpy(c->name, rc[i].name, sizeof(c->name));
		c->name[sizeof(c->name) - 1] = 0;
		c->dtype = (enum hc_dtype)rc[i].dtype;
		c->kind = (enum hc_comp_kind)rc[i].kind;
		c->sharding = (enum hc_sharding)rc[i].sharding;
		c->kv_heads = rc[i].kv_heads;
		c->head_bytes = rc[i].head_bytes;
		c->bytes_per_layer = c->kind == HC_COMP_STATE ? rc[i].bytes_per_layer : 0;
		c->layers = rc[i].layers;
		c->window_pages = rc[i].window_pages;
	}
	if ((ret = hc__geom_envelope(g)) < 0 || (ret = hc__geom_regions(g)) < 0) {
		char why[512];
		snprintf(why, sizeof(why), "%s", hc_last_error());
		return hc__err(EBADMSG, "%s: invalid geometry in the header: %s", path, why);
	}
	want = *g;
	if (want.envelope_bytes != h->envelope_bytes)
		return hc__err(EBADMSG, "%s: envelope size %" PRIu64 " does not match its components (%" PRIu64 ")",
			       path, h->envelope_bytes, want.envelope_bytes);
	for (unsigned i = 0; i < h->ncomp; i++) {
		const struct hc_component_info *c = &want.comps[i];
		if (c->offset != rc[i].offset || c->bytes != rc[i].bytes || c->groups != rc[i].groups ||
		    c->group_stride != rc[i].group_stride || c->layer_stride != rc[i].layer_stride ||
		    c->bytes_per_layer != rc[i].bytes_per_layer)
			return hc__err(EBADMSG,
				       "%s: component '%s' has offsets or strides that do not follow from its shape",
				       path, c->name);
	}
	for (int r = 0; r < HC_REG__COUNT; r++)
		if (want.toc[r].off != h->toc[r].off || want.toc[r].bytes != h->toc[r].bytes)
			return hc__err(EBADMSG, "%s: region %d of the table of offsets is out of place", path, r);
	if (g->index_buckets != h->index_buckets)
		return hc__err(EBADMSG, "%s: index of %u buckets does not follow from %u pages", path, h->index_buckets,
			       h->npages);
	/* hugetlbfs may round the size up to its page size; never down. */
	if (h->segment_bytes < want.segment_bytes || h->segment_bytes % HC_SEG_ENV_ALIGN)
		return hc__err(EBADMSG, "%s: segment size %" PRIu64 " is too small for its geometry (%" PRIu64 ")",
			       path, h->segment_bytes, want.segment_bytes);
	if (h->segment_bytes != file_bytes)
		return hc__err(EBADMSG,
			       "%s is truncated or padded: the header says %" PRIu64 " bytes, the file has %" PRIu64
			       "; destroy and recreate the pool",
			       path, h->segment_bytes, file_bytes);
	memcpy(model, h->model_id, sizeof(model));
	hc__fingerprint(model, &want, fp);
	if (memcmp(fp, h->fingerprint, 32) != 0)
		return hc__err(EBADMSG, "%s: fingerprint does not match the model and layout in the header", path);
	g->segment_bytes = h->segment_bytes;
	return 0;
}

/* Read and check the header and component table into private memory. */
static int read_meta(int fd, const char *path, uint64_t file_bytes, struct hc_seg_hdr *h, struct hc_seg_comp *rc,
		     struct hc__geom *g)
{
	ssize_t n;

	if (file_bytes < HC_SEG_HDR_BYTES)
		return hc__err(EBADMSG, "%s is not a pool, or is truncated: %" PRIu64 " bytes, less than a header",
			       path, file_bytes);
	n = pread(fd, h, sizeof(*h), 0);
	if (n != (ssize_t)sizeof(*h))
		return hc__err(EIO, "%s: cannot read the header: %s", path, n < 0 ? strerror(errno) : "short read");
	if (h->magic != HC_SEG_MAGIC)
		return hc__err(EBADMSG, "%s is not a hicache pool (bad magic)", path);
	if (h->layout_major != HC_LAYOUT_MAJOR)
		return hc__err(
			EPROTO,
			"%s has layout version %u.%u; this build reads version %d.x only: recreate the pool with this build's hicache-pool create",
			path, h->layout_major, h->layout_minor, HC_LAYOUT_MAJOR);
	if (h->hdr_bytes < sizeof(*h) || h->hdr_bytes > HC_SEG_HDR_BYTES)
		return hc__err(EBADMSG, "%s: header size %u is invalid", path, h->hdr_bytes);
	if (atomic_load_explicit(&h->state, memory_order_relaxed) != HC_SEG_READY)
		return hc__err(EBADMSG, "%s: segment state %u is not READY: the header is corrupt", path,
			       (unsigned)atomic_load_explicit(&h->state, memory_order_relaxed));
	if (h->segment_bytes != file_bytes) /* say it first: it explains what follows from it */
		return hc__err(EBADMSG,
			       "%s is truncated or padded: the header says %" PRIu64 " bytes, the file has %" PRIu64
			       "; destroy and recreate the pool",
			       path, h->segment_bytes, file_bytes);
	if (h->ncomp == 0 || h->ncomp > HC_MAX_COMPONENTS)
		return hc__err(EBADMSG, "%s: component count %u is out of range", path, h->ncomp);
	if (h->toc[HC_REG_COMPS].off != HC_SEG_HDR_BYTES ||
	    h->toc[HC_REG_COMPS].bytes != (uint64_t)h->ncomp * sizeof(*rc) ||
	    HC_SEG_HDR_BYTES + h->toc[HC_REG_COMPS].bytes > file_bytes)
		return hc__err(EBADMSG, "%s: the component table is out of place", path);
	n = pread(fd, rc, (size_t)h->ncomp * sizeof(*rc), HC_SEG_HDR_BYTES);
	if (n != (ssize_t)(h->ncomp * sizeof(*rc)))
		return hc__err(EIO, "%s: cannot read the component table", path);
	return validate_meta(path, h, rc, file_bytes, g);
}

static void fill_info(struct hc_pool *p, const char *name, const char *path, const struct hc_seg_hdr *h, int huge)
{
	struct hc_pool_info *i = &p->info;

	memset(i, 0, sizeof(*i));
	snprintf(i->name, sizeof(i->name), "%s", name);
	snprintf(i->model_id, sizeof(i->model_id), "%s", h->model_id);
	snprintf(i->path, sizeof(i->path), "%s", path);
	memcpy(i->fingerprint, h->fingerprint, 32);
	i->layout_major = h->layout_major;
	i->layout_minor = h->layout_minor;
	i->page_tokens = p->g.page_tokens;
	i->tp_size = p->g.tp_size;
	i->head_groups = p->g.head_groups;
	i->ncomp = p->g.ncomp;
	i->max_ranks = p->g.max_ranks;
	i->npages = p->g.npages;
	i->quarantine_ms = h->quarantine_ms;
	i->envelope_bytes = p->g.envelope_bytes;
	i->segment_bytes = p->g.segment_bytes;
	i->envelopes_offset = p->g.toc[HC_REG_ENV].off;
	i->creator_pid = h->creator_pid;
	i->creator_uid = h->creator_uid;
	i->created_unix_ns = h->created_unix_ns;
	i->self_slot = -1;
	i->huge_pages = huge;
	i->evict = (enum hc_evict_policy)p->g.evict;
	i->max_tickets = p->g.max_tickets;
	i->ticket_keys = p->g.ticket_keys;
	i->index_slots = p->g.index_buckets * HC_BUCKET_ENTRIES;
	i->host_mode = (enum hc_host_mode)p->g.host_mode;
	i->sq_entries = p->g.sq_entries;
	i->cq_entries = p->g.cq_entries;
	i->arg_bytes = p->g.arg_bytes;
}

int hc_pool_attach(const char *name, const struct hc_attach_opts *opts, hc_pool **out)
{
	struct hc_attach_opts ob, *o = NULL;
	char path[PATH_MAX];
	struct hc_seg_hdr h;
	struct hc_seg_comp rc[HC_MAX_COMPONENTS];
	struct stat st;
	struct statfs sfs;
	struct hc_pool *p;
	unsigned flags;
	int ret, huge;
	bool sealed;

	if (!out)
		return hc__err(EINVAL, "attach: out is NULL");
	*out = NULL;
	if (opts) {
		if ((ret = HC__ABI_IN(&ob, opts, "hc_pool_attach", hc_attach_opts)) < 0)
			return ret;
		o = &ob;
	}
	flags = o ? o->flags : 0;
	if ((ret = pool_path(o ? o->dir : NULL, name, path, sizeof(path))) < 0)
		return ret;
	if (flags & ~(unsigned)(HC_ATTACH_ADMIN | HC_ATTACH_READONLY | HC_ATTACH_NO_RECOVER | HC_ATTACH_NO_POPULATE |
				HC_ATTACH_FD))
		return hc__err(EINVAL, "attach: unknown flags 0x%x", flags);
	sealed = (flags & HC_ATTACH_FD) || (o && o->socket);
	if (sealed && o->dir)
		return hc__err(EINVAL,
			       "attach '%s': a sealed pool (by fd or socket) is in no directory, but dir is '%s'", name,
			       o->dir);
	if ((flags & HC_ATTACH_FD) && o->socket)
		return hc__err(EINVAL, "attach '%s': give a sealed pool's fd or its socket, not both", name);
	if (sealed)
		snprintf(path, sizeof(path), "memfd:hicache.%s", name);
	if (flags & HC_ATTACH_READONLY)
		flags |= HC_ATTACH_ADMIN | HC_ATTACH_NO_RECOVER;
	if ((ret = hc__pt_env()) < 0)
		return ret;
	p = calloc(1, sizeof(*p));
	if (!p)
		return hc__err(ENOMEM, "attach: out of memory");
	p->slot = -1;
	hc__fork_watch();
	p->fork_gen = atomic_load_explicit(&hc__forks, memory_order_relaxed);
	p->readonly = flags & HC_ATTACH_READONLY;
	if (flags & HC_ATTACH_FD) {
		p->fd = fcntl(o->fd, F_DUPFD_CLOEXEC, 3);
		if (p->fd < 0) {
			ret = hc__err(errno == EBADF ? EBADF : errno, "attach '%s': fd %d: %s", name, o->fd,
				      strerror(errno));
			goto fail_free;
		}
	} else if (sealed) {
		if ((ret = hc__handover_recv(o->socket, name, o->socket_timeout_ms, &p->fd)) < 0)
			goto fail_free;
	} else {
		/* O_NONBLOCK: a FIFO planted under a pool's name must not hang us. */
		p->fd = open(path, (p->readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	}
	if (p->fd < 0) {
		ret = errno == ENOENT
			      ? hc__err(ENOENT,
					"no pool '%s' at %s: create it with 'hicache-pool create', or give its directory "
					"(a sealed pool, hicached's default, has no name: attach it by its socket)",
					name, path)
		      : errno == ELOOP  ? hc__err(EBADMSG, "%s is a symbolic link, not a pool", path)
		      : errno == EISDIR ? hc__err(EBADMSG, "%s is not a pool: not a regular file (a directory)", path)
		      : errno == EACCES ? denied(path, p->readonly)
					: hc__err(errno, "cannot open pool %s: %s", path, strerror(errno));
		goto fail_free;
	}
	if (fstat(p->fd, &st) < 0) {
		ret = hc__err(errno, "cannot stat %s: %s", path, strerror(errno));
		goto fail_close;
	}
	if ((ret = sealed ? check_sealed(p->fd, path, &st) : check_owner(path, &st)) < 0)
		goto fail_close;
	if ((ret = read_meta(p->fd, path, (uint64_t)st.st_size, &h, rc, &p->g)) < 0)
		goto fail_close;
	p->quarantine_ms = h.quarantine_ms ? h.quarantine_ms : 1;
	p->all_groups = (p->g.head_groups >= 32) ? 0x7fffffffu : ((1u << p->g.head_groups) - 1);

	p->map_bytes = p->g.segment_bytes;
	p->base = mmap(NULL, p->map_bytes, p->readonly ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
	if (p->base == MAP_FAILED) {
		ret = hc__err(errno, "cannot map %s (%.2f GiB): %s", path, gib(p->map_bytes), strerror(errno));
		goto fail_close;
	}
	p->hdr = (struct hc_seg_hdr *)p->base;
	p->ranks = (struct hc_seg_rank *)(p->base + p->g.toc[HC_REG_RANKS].off);
	p->pages = (struct hc_seg_page *)(p->base + p->g.toc[HC_REG_PAGES].off);
	p->pins = (_Atomic uint32_t *)(p->base + p->g.toc[HC_REG_PINS].off);
	p->ctl = (struct hc_seg_ctl *)(p->base + p->g.toc[HC_REG_CTL].off);
	p->stats = (_Atomic uint64_t *)(p->base + p->g.toc[HC_REG_STATS].off);
	p->tmask = (_Atomic uint64_t *)(p->base + p->g.toc[HC_REG_TMASK].off);
	p->index = (_Atomic uint64_t *)(p->base + p->g.toc[HC_REG_INDEX].off);
	p->tickets = (struct hc_seg_ticket *)(p->base + p->g.toc[HC_REG_TICKETS].off);
	p->tpages = (_Atomic uint64_t *)(p->base + p->g.toc[HC_REG_TPAGES].off);
	p->tmask_words = p->g.max_tickets / 64;
	p->hash_secret = h.hash_secret;
	p->imask = p->g.index_buckets - 1;
	hc__hit_policy(&p->g, (1u << p->g.ncomp) - 1, &p->hit_full, &p->hit_win, &p->hit_maxwin);
	p->env = p->base + p->g.toc[HC_REG_ENV].off;
	p->rings = p->base + p->g.toc[HC_REG_RINGS].off;
	hc__fm_map(&p->fm, p->g.npages, p->base + p->g.toc[HC_REG_FREEMAP].off);
	hc__fm_map(&p->qm, p->g.npages, p->base + p->g.toc[HC_REG_FREEMAP].off + p->g.toc[HC_REG_FREEMAP].bytes / 2);
	p->lru = p->g.toc[HC_REG_LRU].bytes ? (struct hc_seg_lru *)(p->base + p->g.toc[HC_REG_LRU].off) : NULL;
	huge = fstatfs(p->fd, &sfs) == 0 &&
	       (sfs.f_type == HUGETLBFS_MAGIC || st.st_blksize >= (blksize_t)HC_SEG_ENV_ALIGN);
	fill_info(p, name, path, &h, huge);

	/* Each process has its own page tables: populate them now, not by faults. */
	if (!(flags & (HC_ATTACH_ADMIN | HC_ATTACH_NO_POPULATE)) &&
	    (ret = populate(p->base, (h.flags & HC_SEG_F_SPARSE) ? p->g.toc[HC_REG_ENV].off : p->map_bytes, name,
			    &(struct progress){ o ? o->progress : NULL, o ? o->progress_arg : NULL })) < 0)
		goto fail_unmap;
	if (!(flags & HC_ATTACH_ADMIN)) {
		if ((ret = hc__rank_claim(p)) < 0)
			goto fail_unmap;
		p->info.self_slot = p->slot;
	}
	if (!(flags & HC_ATTACH_NO_RECOVER))
		hc_pool_recover(p, NULL, 0);
	p->cursor = p->slot >= 0 ? (uint32_t)((uint64_t)p->g.npages * (unsigned)p->slot / p->g.max_ranks) : 0;
	p->hand = p->cursor;
	*out = p;
	return 0;

fail_unmap:
	munmap(p->base, p->map_bytes);
fail_close:
	close(p->fd);
fail_free:
	free(p);
	return ret;
}

int hc_pool_detach(hc_pool *p)
{
	bool forked;

	if (!p)
		return hc__err(EINVAL, "detach: pool is NULL");
	/* A forked child has the handle but not the holder thread: it only unmaps. */
	forked = p->fork_gen != atomic_load_explicit(&hc__forks, memory_order_relaxed);
	if (p->slot >= 0 && !forked)
		hc__rank_release(p);
	if (p->dev_unreg && !forked)
		p->dev_unreg(p); /* unpin before the pages go; a forked child has no CUDA of ours */
	if (p->reqs_fini)
		p->reqs_fini(p);
	munmap(p->base, p->map_bytes);
	close(p->fd);
	free(p);
	return 0;
}

int hc_pool_destroy(const char *name, const char *dir, unsigned flags)
{
	struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts),
				    .dir = dir,
				    .flags = HC_ATTACH_ADMIN | HC_ATTACH_NO_RECOVER };
	char path[PATH_MAX];
	hc_pool *p;
	int ret, live = 0;

	if ((ret = pool_path(dir, name, path, sizeof(path))) < 0)
		return ret;
	if (flags & ~HC_DESTROY_FORCE)
		return hc__err(EINVAL, "destroy: unknown flags 0x%x", flags & ~HC_DESTROY_FORCE);
	ret = hc_pool_attach(name, &o, &p);
	if (ret == -ENOENT)
		return ret;
	if (ret < 0 && !(flags & HC_DESTROY_FORCE)) {
		char why[512];
		snprintf(why, sizeof(why), "%s", hc_last_error());
		return hc__err(-ret, "%s; use --force to remove %s anyway", why, path);
	}
	if (ret == 0) {
		for (unsigned s = 0; s < p->g.max_ranks; s++)
			if (hc__rank_probe(p, s, NULL) == 1)
				live++;
		hc_pool_detach(p);
		if (live && !(flags & HC_DESTROY_FORCE))
			return hc__err(
				EBUSY,
				"pool '%s' has %d live rank(s) attached: stop them first, or use --force (their mappings stay valid until they exit)",
				name, live);
	}
	if (unlink(path) < 0)
		return hc__err(errno, "cannot remove %s: %s", path, strerror(errno));
	return 0;
}

int hc_pool_info(const hc_pool *p, struct hc_pool_info *out, size_t size)
{
	if (!p)
		return hc__err(EINVAL, "info: NULL pool");
	return HC__ABI_OUT(out, size, &p->info, "hc_pool_info", hc_pool_info);
}

int hc_pool_component(const hc_pool *p, unsigned comp, struct hc_component_info *out, size_t size)
{
	if (!p)
		return hc__err(EINVAL, "component: NULL pool");
	if (comp >= p->g.ncomp)
		return hc__err(EINVAL, "component %u is out of range: the pool has %u", comp, p->g.ncomp);
	return HC__ABI_OUT(out, size, &p->g.comps[comp], "hc_pool_component", hc_component_info);
}
