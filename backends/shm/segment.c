/* SPDX-License-Identifier: Apache-2.0 */
/*
 * segment.c - name, geometry, create, validate, map and unlink a shm L3
 * segment.
 *
 * Creation builds the whole segment in an unnamed file (O_TMPFILE, or a
 * hidden name with our pid where the file system lacks it) and gives it its
 * public name with linkat(2) only when it is complete, so an opener never
 * sees half a segment, a creator killed half way leaves nothing behind, and
 * of two creators racing exactly one wins (the other gets EEXIST and, with
 * create=auto, opens the winner's).  Open trusts nothing: it reads the
 * header with pread into private memory, checks every field, recomputes the
 * geometry, and only then maps the file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static double mib(uint64_t b)
{
	return (double)b / (double)(UINT64_C(1) << 20);
}

/* FNV-1a 64: detects a scribbled header (not an adversary). */
static uint64_t fnv1a(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

/* A robust, process-shared mutex in the segment: 0 or a negative errno. */
static int robust_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	int ret = pthread_mutexattr_init(&a);

	if (ret)
		return -ret;
	if (!(ret = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED)) &&
	    !(ret = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST)))
		ret = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return -ret;
}

int hc__shm_geom_init(struct hc_shm_geom *g, uint64_t capacity, uint32_t block_bytes, uint32_t max_objects,
		      uint32_t max_openers, char *err, size_t errlen)
{
	static const uint64_t unit[HC_SHM_REG__COUNT] = {
		[HC_SHM_REG_CTL] = sizeof(struct hc_shm_ctl),  [HC_SHM_REG_SLOTS] = sizeof(struct hc_shm_slot),
		[HC_SHM_REG_PINS] = sizeof(struct hc_shm_pin), [HC_SHM_REG_OBJS] = sizeof(struct hc_shm_obj),
		[HC_SHM_REG_BUCKETS] = sizeof(uint32_t),       [HC_SHM_REG_EXTS] = sizeof(struct hc_shm_ext),
	};
	uint64_t n[HC_SHM_REG__COUNT], off = HC_SHM_HDR_BYTES, nb;

	memset(g, 0, sizeof(*g));
	if (!block_bytes)
		block_bytes = HC_SHM_MIN_BLOCK;
	if (block_bytes < HC_SHM_MIN_BLOCK || block_bytes > HC_SHM_MAX_BLOCK || (block_bytes & (block_bytes - 1)))
		return hc__shm_fail(err, errlen, EINVAL, "block_size=%" PRIu32 " is not a power of two from 4K to 64M",
				    block_bytes);
	nb = capacity / block_bytes;
	if (nb == 0)
		return hc__shm_fail(err, errlen, EINVAL,
				    "capacity=%" PRIu64 " is less than one block of %" PRIu32
				    " bytes: give a larger capacity",
				    capacity, block_bytes);
	if (nb > HC_SHM_MAX_INDEX)
		return hc__shm_fail(err, errlen, EINVAL,
				    "capacity=%" PRIu64 " is over 2^31 blocks of %" PRIu32 " bytes: raise block_size",
				    capacity, block_bytes);
	if (!max_objects) {
		uint64_t d = capacity >> 14; /* one per 16 KiB; objects are 64 KiB..16 MiB in practice */
		if (d < 256)
			d = 256;
		max_objects = (uint32_t)(d < nb ? d : nb);
	}
	if (max_objects > HC_SHM_MAX_INDEX)
		return hc__shm_fail(err, errlen, EINVAL, "max_objects=%" PRIu32 " is over 2^31-1", max_objects);
	if (!max_openers)
		max_openers = 64;
	if (max_openers > HC_SHM_MAX_OPENERS)
		return hc__shm_fail(err, errlen, EINVAL, "max_openers=%" PRIu32 " is over %d", max_openers,
				    HC_SHM_MAX_OPENERS);
	g->block_bytes = block_bytes;
	g->nblocks = (uint32_t)nb;
	g->max_objects = max_objects;
	g->max_openers = max_openers;
	g->pins_per_opener = HC_SHM_PINS;
	g->nbuckets = 1;
	while (g->nbuckets < max_objects)
		g->nbuckets <<= 1;
	n[HC_SHM_REG_CTL] = 1;
	n[HC_SHM_REG_SLOTS] = max_openers;
	n[HC_SHM_REG_PINS] = (uint64_t)max_openers * g->pins_per_opener;
	n[HC_SHM_REG_OBJS] = max_objects;
	n[HC_SHM_REG_BUCKETS] = g->nbuckets;
	n[HC_SHM_REG_EXTS] = nb;
	for (int r = 0; r < HC_SHM_REG_DATA; r++) {
		g->toc[r].off = off;
		g->toc[r].bytes = n[r] * unit[r];
		off = align_up(off + g->toc[r].bytes, HC_SHM_META_ALIGN);
	}
	g->toc[HC_SHM_REG_DATA].off = align_up(off, HC_SHM_DATA_ALIGN);
	g->toc[HC_SHM_REG_DATA].bytes = nb * block_bytes;
	g->segment_bytes = g->toc[HC_SHM_REG_DATA].off + g->toc[HC_SHM_REG_DATA].bytes;
	return 0;
}

static int name_valid(const char *name, char *err, size_t errlen)
{
	size_t n = strlen(name);

	if (n == 0)
		return hc__shm_fail(err, errlen, EINVAL, "name= is empty: give the store a name, e.g. name=l3");
	if (n > HC_SHM_NAME_MAX)
		return hc__shm_fail(err, errlen, EINVAL, "name= is longer than %d characters", HC_SHM_NAME_MAX);
	if (name[0] == '.' || strstr(name, ".."))
		return hc__shm_fail(err, errlen, EINVAL, "name='%s' may not start with '.' or contain '..'", name);
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
		      c == '-' || c == '.'))
			return hc__shm_fail(err, errlen, EINVAL,
					    "name='%s' has a '%c': use letters, digits, '_', '-' and '.'", name, c);
	}
	return 0;
}

static uint64_t now_unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Fill a fresh (zeroed) segment.  Nobody else can see it yet. */
static int seg_init(uint8_t *base, const struct hc_shm_geom *g, uint64_t segment_bytes)
{
	struct hc_shm_hdr *h = (struct hc_shm_hdr *)base;
	struct hc_shm_ctl *ctl = (struct hc_shm_ctl *)(base + g->toc[HC_SHM_REG_CTL].off);
	struct hc_shm_slot *slots = (struct hc_shm_slot *)(base + g->toc[HC_SHM_REG_SLOTS].off);
	struct hc_shm_obj *objs = (struct hc_shm_obj *)(base + g->toc[HC_SHM_REG_OBJS].off);
	struct hc_shm_ext *exts = (struct hc_shm_ext *)(base + g->toc[HC_SHM_REG_EXTS].off);
	uint64_t secret = 0;
	int ret;

	memcpy(h->magic, HC_SHM_MAGIC, sizeof(h->magic));
	h->version_major = HC_SHM_VERSION_MAJOR;
	h->version_minor = HC_SHM_VERSION_MINOR;
	h->hdr_bytes = sizeof(*h);
	h->block_bytes = g->block_bytes;
	h->segment_bytes = segment_bytes;
	h->capacity_bytes = (uint64_t)g->nblocks * g->block_bytes;
	h->nblocks = g->nblocks;
	h->max_objects = g->max_objects;
	h->max_openers = g->max_openers;
	h->pins_per_opener = g->pins_per_opener;
	h->nbuckets = g->nbuckets;
	h->creator_pid = (uint32_t)getpid();
	h->creator_uid = (uint32_t)geteuid();
	h->created_unix_ns = now_unix_ns();
	if (getrandom(&secret, sizeof(secret), 0) != sizeof(secret))
		secret = h->created_unix_ns ^ ((uint64_t)getpid() << 32);
	h->hash_secret = secret;
	for (int r = 0; r < HC_SHM_REG__COUNT; r++)
		h->toc[r] = g->toc[r];
	h->meta_sum = fnv1a(h, offsetof(struct hc_shm_hdr, meta_sum));

	if ((ret = robust_init(&ctl->lock.m)) < 0)
		return ret;
	for (uint32_t i = 0; i < g->max_openers; i++)
		if ((ret = robust_init(&slots[i].lock.m)) < 0)
			return ret;
	/* All blocks are one free extent; all entries are on the free list. */
	exts[0].len = g->nblocks;
	ctl->free_ext = 1;
	ctl->free_blocks = g->nblocks;
	for (uint32_t i = 0; i + 1 < g->max_objects; i++)
		objs[i].hnext = i + 2;
	ctl->free_obj = 1;
	/* Release: the above is visible before READY (no opener can see the
	 * file before linkat anyway; this orders it for the record). */
	atomic_store_explicit(&h->state, HC_SHM_SEG_READY, memory_order_release);
	return 0;
}

/* Name an unnamed (O_TMPFILE) file, the way open(2) shows, which needs no
 * capability (without /proc, AT_EMPTY_PATH, which needs
 * CAP_DAC_READ_SEARCH); -1 with errno EEXIST if the name is taken. */
static int name_tmpfile(int fd, const char *path)
{
	char self[40];
	int ret;

	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	ret = linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
	if (ret < 0 && errno == ENOENT && access(self, F_OK) < 0)
		ret = linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH);
	return ret;
}

/* Create and publish a new segment at 'path'; *fdout is its open file.
 * -EEXIST when another creator published first. */
static int seg_create(const struct hc_shm_opts *o, const char *dir, const char *path, int *fdout, char *err,
		      size_t errlen)
{
	char tmp[PATH_MAX + 96] = "";
	struct hc_shm_geom g;
	struct statvfs vfs;
	struct stat st;
	uint8_t *base = MAP_FAILED;
	uint64_t bytes, avail, phys;
	bool anon = false;
	int fd, ret, e;

	if ((ret = hc__shm_geom_init(&g, o->capacity, o->block_bytes, o->max_objects, o->max_openers, err, errlen)) < 0)
		return ret;
	fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0) {
		anon = true;
	} else if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) {
		snprintf(tmp, sizeof(tmp), "%s/.%s%s.creating.%d", dir, HC_SHM_FILE_PREFIX, o->name, (int)getpid());
		fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	}
	if (fd < 0)
		return hc__shm_fail(err, errlen, errno, "cannot create a file in dir=%s: %s", dir, strerror(errno));
	if (fstat(fd, &st) < 0 || fstatvfs(fd, &vfs) < 0) {
		ret = hc__shm_fail(err, errlen, errno, "cannot stat a new file in %s: %s", dir, strerror(errno));
		goto fail_unlink;
	}
	bytes = g.segment_bytes;
	if ((uint64_t)st.st_blksize > HC_SHM_HDR_BYTES) /* hugetlbfs: whole huge pages */
		bytes = align_up(bytes, (uint64_t)st.st_blksize);
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	if (bytes > avail) {
		ret = hc__shm_fail(
			err, errlen, ENOSPC,
			"store '%s' needs %.1f MiB but %s has %.1f MiB free: lower capacity= or enlarge the tmpfs (Docker: --shm-size)",
			o->name, mib(bytes), dir, mib(avail));
		goto fail_unlink;
	}
	phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	if (bytes > phys) {
		ret = hc__shm_fail(err, errlen, ENOMEM,
				   "store '%s' needs %.1f MiB but this machine has %.1f MiB of memory: lower capacity=",
				   o->name, mib(bytes), mib(phys));
		goto fail_unlink;
	}
	if (ftruncate(fd, (off_t)bytes) < 0) {
		ret = hc__shm_fail(err, errlen, errno, "cannot size a new segment in %s to %.1f MiB: %s", dir,
				   mib(bytes), strerror(errno));
		goto fail_unlink;
	}
	/* Fail now, not with a SIGBUS later, when the tmpfs cannot hold it. */
	if ((e = posix_fallocate(fd, 0, (off_t)bytes)) != 0) {
		ret = hc__shm_fail(err, errlen, e, "cannot allocate %.1f MiB for store '%s' in %s: %s%s", mib(bytes),
				   o->name, dir, strerror(e),
				   e == ENOSPC ? "; lower capacity= or enlarge the tmpfs (Docker: --shm-size)" : "");
		goto fail_unlink;
	}
	base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = hc__shm_fail(err, errlen, errno, "cannot map a new segment in %s: %s", dir, strerror(errno));
		goto fail_unlink;
	}
	ret = seg_init(base, &g, bytes);
	munmap(base, bytes);
	if (ret < 0) {
		ret = hc__shm_fail(err, errlen, -ret, "cannot set up the locks of a new segment: %s", strerror(-ret));
		goto fail_unlink;
	}
	if ((anon ? name_tmpfile(fd, path) : link(tmp, path)) < 0) {
		ret = errno == EEXIST ? -EEXIST
				      : hc__shm_fail(err, errlen, errno, "cannot publish the new segment as %s: %s",
						     path, strerror(errno));
		goto fail_unlink;
	}
	if (!anon)
		unlink(tmp);
	*fdout = fd;
	return 0;

fail_unlink:
	if (!anon)
		unlink(tmp);
	close(fd);
	return ret;
}

/* Check the private header copy; on success, g holds the geometry. */
static int validate_hdr(const char *path, const struct hc_shm_hdr *h, uint64_t file_bytes, struct hc_shm_geom *g,
			char *err, size_t errlen)
{
	char why[256];
	int ret;

	if (memcmp(h->magic, HC_SHM_MAGIC, sizeof(h->magic)) != 0)
		return hc__shm_fail(err, errlen, EBADMSG,
				    "%s is not a shm L3 segment (bad magic): remove it or give another name=", path);
	if (h->version_major != HC_SHM_VERSION_MAJOR)
		return hc__shm_fail(err, errlen, EPROTO,
				    "%s has segment version %" PRIu32 ".%" PRIu32
				    "; this build reads %d.x only: destroy it and let this build create it",
				    path, h->version_major, h->version_minor, HC_SHM_VERSION_MAJOR);
	if (h->hdr_bytes != sizeof(*h) || h->meta_sum != fnv1a(h, offsetof(struct hc_shm_hdr, meta_sum)))
		return hc__shm_fail(
			err, errlen, EBADMSG,
			"%s: header checksum mismatch, the segment is corrupt: remove it (rm %s) and let it be created again",
			path, path);
	if (atomic_load_explicit(&h->state, memory_order_relaxed) != HC_SHM_SEG_READY)
		return hc__shm_fail(err, errlen, EBADMSG,
				    "%s: segment state is not READY: the header is corrupt; remove it", path);
	if (h->pins_per_opener != HC_SHM_PINS || h->max_openers == 0 || h->max_objects == 0)
		return hc__shm_fail(err, errlen, EBADMSG, "%s: opener or object counts are out of range; remove it",
				    path);
	ret = hc__shm_geom_init(g, (uint64_t)h->nblocks * h->block_bytes, h->block_bytes, h->max_objects,
				h->max_openers, why, sizeof(why));
	if (ret < 0)
		return hc__shm_fail(err, errlen, EBADMSG, "%s: invalid geometry in the header (%s); remove it", path,
				    why);
	if (g->nblocks != h->nblocks || g->nbuckets != h->nbuckets ||
	    h->capacity_bytes != (uint64_t)h->nblocks * h->block_bytes)
		return hc__shm_fail(err, errlen, EBADMSG,
				    "%s: block or bucket counts do not follow from the capacity; remove it", path);
	for (int r = 0; r < HC_SHM_REG__COUNT; r++)
		if (g->toc[r].off != h->toc[r].off || g->toc[r].bytes != h->toc[r].bytes)
			return hc__shm_fail(err, errlen, EBADMSG,
					    "%s: region %d of the table of offsets is out of place; remove it", path,
					    r);
	/* A huge-page file system may round the size up; never down. */
	if (h->segment_bytes < g->segment_bytes || h->segment_bytes != file_bytes)
		return hc__shm_fail(err, errlen, EBADMSG,
				    "%s is truncated or padded: the header says %" PRIu64
				    " bytes, the file has %" PRIu64 "; remove it",
				    path, h->segment_bytes, file_bytes);
	return 0;
}

static int check_owner(const char *path, const struct stat *st, char *err, size_t errlen)
{
	if (!S_ISREG(st->st_mode))
		return hc__shm_fail(err, errlen, EBADMSG,
				    "%s is not a regular file: remove it or give another name=", path);
	if (st->st_mode & 0007)
		return hc__shm_fail(err, errlen, EPERM, "%s has mode %04o, open to every user: chmod o-rwx %s", path,
				    (unsigned)(st->st_mode & 07777), path);
	if (geteuid() != 0 && st->st_uid != geteuid() && (st->st_mode & 0060) != 0060)
		return hc__shm_fail(err, errlen, EACCES, "%s belongs to uid %u: open it as its owner", path,
				    (unsigned)st->st_uid);
	return 0;
}

static int seg_map(struct hc_shm_seg *s, int fd, char *err, size_t errlen)
{
	struct hc_shm_hdr h;
	struct stat st;
	ssize_t n;
	int ret;

	if (fstat(fd, &st) < 0)
		return hc__shm_fail(err, errlen, errno, "cannot stat %s: %s", s->path, strerror(errno));
	if ((ret = check_owner(s->path, &st, err, errlen)) < 0)
		return ret;
	if ((uint64_t)st.st_size < HC_SHM_HDR_BYTES)
		return hc__shm_fail(
			err, errlen, EBADMSG,
			"%s is not a shm L3 segment, or is truncated: %lld bytes, less than a header; remove it",
			s->path, (long long)st.st_size);
	n = pread(fd, &h, sizeof(h), 0);
	if (n != (ssize_t)sizeof(h))
		return hc__shm_fail(err, errlen, n < 0 ? errno : EIO, "cannot read the header of %s: %s", s->path,
				    n < 0 ? strerror(errno) : "short read");
	if ((ret = validate_hdr(s->path, &h, (uint64_t)st.st_size, &s->g, err, errlen)) < 0)
		return ret;
	s->g.segment_bytes = h.segment_bytes;
	s->hash_secret = h.hash_secret;
	s->map_bytes = h.segment_bytes;
	s->dev = st.st_dev;
	s->ino = st.st_ino;
	s->base = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (s->base == MAP_FAILED) {
		s->base = NULL;
		return hc__shm_fail(err, errlen, errno, "cannot map %s (%.1f MiB): %s", s->path, mib(s->map_bytes),
				    strerror(errno));
	}
	s->block_shift = (unsigned)__builtin_ctz(s->g.block_bytes);
	s->ctl = (struct hc_shm_ctl *)(s->base + s->g.toc[HC_SHM_REG_CTL].off);
	s->slots = (struct hc_shm_slot *)(s->base + s->g.toc[HC_SHM_REG_SLOTS].off);
	s->pins = (struct hc_shm_pin *)(s->base + s->g.toc[HC_SHM_REG_PINS].off);
	s->objs = (struct hc_shm_obj *)(s->base + s->g.toc[HC_SHM_REG_OBJS].off);
	s->buckets = (uint32_t *)(s->base + s->g.toc[HC_SHM_REG_BUCKETS].off);
	s->exts = (struct hc_shm_ext *)(s->base + s->g.toc[HC_SHM_REG_EXTS].off);
	s->data = s->base + s->g.toc[HC_SHM_REG_DATA].off;
	return 0;
}

/* Populate this process's page tables (doc/design.md, "Memory and page faults": every open does). */
static int populate(struct hc_shm_seg *s, char *err, size_t errlen)
{
	if (madvise(s->base, s->map_bytes, MADV_POPULATE_WRITE) == 0)
		return 0;
	if (errno == EINVAL) { /* Linux < 5.14: fault each page in by reading it, never writing */
		uint8_t sum = 0;
		for (size_t off = 0; off < s->map_bytes; off += 4096)
			sum ^= ((volatile uint8_t *)s->base)[off];
		(void)sum;
		return 0;
	}
	return hc__shm_fail(
		err, errlen, errno == EFAULT ? ENOMEM : errno,
		"populating %s (%.1f MiB) failed: %s; lower its capacity, enlarge the tmpfs, or give populate=0",
		s->path, mib(s->map_bytes), strerror(errno));
}

/* An existing segment must match what the options ask for, if they ask. */
static int check_wanted(const struct hc_shm_seg *s, const struct hc_shm_opts *o, char *err, size_t errlen)
{
	const struct hc_shm_geom *g = &s->g;
	uint64_t have = (uint64_t)g->nblocks * g->block_bytes;
	uint32_t bs = o->block_bytes ? o->block_bytes : g->block_bytes;
	const char *what = NULL;

	if (o->capacity && o->capacity / bs * bs != have)
		what = "capacity=";
	else if (o->block_bytes && o->block_bytes != g->block_bytes)
		what = "block_size=";
	else if (o->max_objects && o->max_objects != g->max_objects)
		what = "max_objects=";
	else if (o->max_openers && o->max_openers != g->max_openers)
		what = "max_openers=";
	if (!what)
		return 0;
	return hc__shm_fail(
		err, errlen, EINVAL,
		"%s exists with capacity %" PRIu64 ", block_size %" PRIu32 ", max_objects %" PRIu32
		", max_openers %" PRIu32
		", which %s does not match: drop the option to use it, or destroy it (rm %s) to recreate it",
		s->path, have, g->block_bytes, g->max_objects, g->max_openers, what, s->path);
}

int hc__shm_seg_open(struct hc_shm_seg *s, const struct hc_shm_opts *o, char *err, size_t errlen)
{
	const char *dir = o->dir[0] ? o->dir : HC_SHM_DEFAULT_DIR;
	int fd = -1, ret = 0;

	memset(s, 0, sizeof(*s));
	if ((ret = name_valid(o->name, err, errlen)) < 0)
		return ret;
	if (dir[0] != '/')
		return hc__shm_fail(err, errlen, EINVAL, "dir=%s is not an absolute path", dir);
	if ((size_t)snprintf(s->path, sizeof(s->path), "%s/%s%s", dir, HC_SHM_FILE_PREFIX, o->name) >=
	    sizeof(s->path) - 64)
		return hc__shm_fail(err, errlen, ENAMETOOLONG, "dir=%s is too long", dir);
	/* Two rounds: a creator that loses the race to publish opens the winner's. */
	for (int round = 0; round < 2 && fd < 0; round++) {
		fd = open(s->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0) {
			if (o->create == HC_SHM_CREATE_YES) {
				close(fd);
				return hc__shm_fail(
					err, errlen, EEXIST,
					"%s already exists and create=yes: use create=auto to open it, or remove it first",
					s->path);
			}
			break;
		}
		if (errno == ELOOP)
			return hc__shm_fail(err, errlen, ELOOP, "%s is a symbolic link: remove it", s->path);
		if (errno != ENOENT)
			return hc__shm_fail(err, errlen, errno, "cannot open %s: %s", s->path, strerror(errno));
		if (o->create == HC_SHM_CREATE_NO)
			return hc__shm_fail(err, errlen, ENOENT,
					    "%s does not exist and create=no: create it with capacity= and create=auto",
					    s->path);
		if (!o->capacity)
			return hc__shm_fail(err, errlen, EINVAL,
					    "%s does not exist: capacity= is required to create it", s->path);
		ret = seg_create(o, dir, s->path, &fd, err, errlen);
		if (ret == -EEXIST && o->create == HC_SHM_CREATE_YES)
			return hc__shm_fail(err, errlen, EEXIST,
					    "%s was created by another process meanwhile and create=yes", s->path);
		if (ret < 0 && ret != -EEXIST)
			return ret;
		s->created = ret == 0;
	}
	if (fd < 0)
		return hc__shm_fail(err, errlen, EAGAIN, "%s appeared and vanished while opening: retry", s->path);
	ret = seg_map(s, fd, err, errlen);
	close(fd);
	if (ret < 0)
		return ret;
	if ((!s->created && (ret = check_wanted(s, o, err, errlen)) < 0) ||
	    (o->populate && (ret = populate(s, err, errlen)) < 0)) {
		hc__shm_seg_close(s);
		return ret;
	}
	return 0;
}

void hc__shm_seg_close(struct hc_shm_seg *s)
{
	if (s->base)
		munmap(s->base, s->map_bytes);
	s->base = NULL;
}

/* Remove the segment's name if it still names our file; 0 if gone either way. */
int hc__shm_seg_unlink(struct hc_shm_seg *s)
{
	struct stat st;

	if (stat(s->path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (st.st_dev != s->dev || st.st_ino != s->ino)
		return 0; /* someone removed ours and created another: not ours to remove */
	if (unlink(s->path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}
