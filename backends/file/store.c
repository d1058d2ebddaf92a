/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c - the file backend's on-disk layout and the index that mirrors it.
 *
 *   <dir>/.hicache-file.lock                      flock: one instance per dir
 *   <dir>/<fingerprint hex>/<key hex[0:2]>/<key hex>   an object
 *   <dir>/<fingerprint hex>/<key hex[0:2]>/.<key hex>.<seq hex>.tmp
 *                                                 a put being written
 *
 * Names come only from the hex of the 64-byte op name.  A put writes its
 * temp file and renames it over the object, so a reader (or a crash) finds
 * the old object or the new one.  Anything else under <dir> is left alone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"

#define LOCK_NAME ".hicache-file.lock"
#define HEX_NAME  64 /* hex digits of a fingerprint or a key */

static const char hexd[] = "0123456789abcdef";

static char *put_hex(char *o, const uint8_t *b, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		*o++ = hexd[b[i] >> 4];
		*o++ = hexd[b[i] & 15];
	}
	return o;
}

/* "<fp>/<kk>", the fan-out directory of name. */
void hc__file_dirpath(char *out, const uint8_t *name)
{
	char *o = put_hex(out, name, 32);

	*o++ = '/';
	o = put_hex(o, name + 32, 1);
	*o = '\0';
}

void hc__file_path(char *out, const uint8_t *name, uint64_t tmp_seq, bool tmp)
{
	char *o = put_hex(out, name, 32);

	*o++ = '/';
	o = put_hex(o, name + 32, 1);
	*o++ = '/';
	if (tmp)
		*o++ = '.';
	o = put_hex(o, name + 32, 32);
	if (tmp)
		sprintf(o, ".%016" PRIx64 ".tmp", tmp_seq);
	else
		*o = '\0';
}

pthread_mutex_t *hc__file_name_lock(struct hc_file *be, const uint8_t *name)
{
	return &be->name_lock[hc__idx_hash(name) % HC_FILE_NAME_LOCKS];
}

/* ---- index operations (each takes idx_lock itself) */

int64_t hc__file_lookup(struct hc_file *be, const uint8_t *name, bool touch)
{
	int64_t size = -ENOENT;
	uint32_t i;

	pthread_mutex_lock(&be->idx_lock);
	i = hc__idx_find(&be->idx, name);
	if (i != HC_IDX_NIL) {
		size = (int64_t)be->idx.ent[i].size;
		if (touch)
			hc__idx_touch(&be->idx, i);
	}
	pthread_mutex_unlock(&be->idx_lock);
	return size;
}

/* Whether need more bytes overflow the capacity; a put that replaces name
 * gets the old object's bytes back when it commits, so they count for it. */
static bool over(const struct hc_file *be, uint64_t need, const uint8_t *name)
{
	uint64_t used = be->idx.bytes + (name ? be->reserved : 0);

	if (name) {
		uint32_t i = hc__idx_find(&be->idx, name);

		if (i != HC_IDX_NIL)
			used -= be->idx.ent[i].size < used ? be->idx.ent[i].size : used;
	}
	return be->capacity != HC_FILE_UNLIMITED && (need > be->capacity || used > be->capacity - need);
}

/*
 * Evicts from the LRU end while the committed bytes (and, for a put of name,
 * the bytes of puts in flight less the object it replaces) leave no room for
 * need, then reserves need.
 * A victim whose name lock is busy (a put or delete of it, or one that
 * shares the stripe, is renaming or unlinking) is skipped: the lock order is
 * name before index and this holds the index.  When only puts in flight are
 * left, the put goes ahead over capacity; each put trims again when it
 * commits, so the excess is at most the bytes in flight.
 */
void hc__file_make_room(struct hc_file *be, uint64_t need, const uint8_t *put_name)
{
	char path[HC_FILE_PATH_MAX];

	pthread_mutex_lock(&be->idx_lock);
	while (over(be, need, put_name)) {
		pthread_mutex_t *lk = NULL;
		uint8_t victim[HC_BE_NAME_BYTES];
		uint32_t i;

		for (i = be->idx.tail; i != HC_IDX_NIL; i = be->idx.ent[i].prev) {
			/* The object a put replaces would free nothing for it. */
			if (put_name && memcmp(be->idx.ent[i].name, put_name, HC_BE_NAME_BYTES) == 0)
				continue;
			lk = hc__file_name_lock(be, be->idx.ent[i].name);
			if (pthread_mutex_trylock(lk) == 0)
				break;
		}
		if (i == HC_IDX_NIL)
			break;
		memcpy(victim, be->idx.ent[i].name, sizeof(victim));
		hc__idx_del(&be->idx, i);
		HC_COUNT(be, evictions, 1);
		pthread_mutex_unlock(&be->idx_lock);
		/* A GET that opened it already keeps reading its inode. */
		hc__file_path(path, victim, 0, false);
		if (unlinkat(be->root, path, 0) < 0 && errno != ENOENT)
			hc__file_warn_once(be, HC_WARN_INDEX, "%s: evicting %s: %s (the file stays, uncounted)",
					   be->dir, path, strerror(errno));
		pthread_mutex_unlock(lk);
		pthread_mutex_lock(&be->idx_lock);
	}
	be->reserved += need;
	pthread_mutex_unlock(&be->idx_lock);
}

void hc__file_unreserve(struct hc_file *be, uint64_t bytes)
{
	pthread_mutex_lock(&be->idx_lock);
	be->reserved -= bytes;
	pthread_mutex_unlock(&be->idx_lock);
}

int hc__file_set_capacity(struct hc_file *be, uint64_t cap)
{
	pthread_mutex_lock(&be->idx_lock);
	be->capacity = cap;
	pthread_mutex_unlock(&be->idx_lock);
	hc__file_make_room(be, 0, NULL);
	return 0;
}

/* Caller holds the name lock. */
static void idx_drop(struct hc_file *be, const uint8_t *name)
{
	uint32_t i;

	pthread_mutex_lock(&be->idx_lock);
	i = hc__idx_find(&be->idx, name);
	if (i != HC_IDX_NIL)
		hc__idx_del(&be->idx, i);
	pthread_mutex_unlock(&be->idx_lock);
}

void hc__file_forget(struct hc_file *be, const uint8_t *name)
{
	pthread_mutex_t *lk = hc__file_name_lock(be, name);
	char path[HC_FILE_PATH_MAX];
	struct stat st;

	hc__file_path(path, name, 0, false);
	pthread_mutex_lock(lk);
	/* Under the name lock no rename or unlink of it can interleave. */
	if (fstatat(be->root, path, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
		idx_drop(be, name);
	pthread_mutex_unlock(lk);
}

/* ---- the filesystem side of puts and deletes */

static int fsync_at(int dirfd, const char *path)
{
	int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		r = -errno;
	close(fd);
	return r;
}

/* The fingerprint and fan-out directories; with fsync=always, each new one
 * is made durable in its parent (rare: once per directory). */
static int make_dirs(struct hc_file *be, const uint8_t *name)
{
	char path[HC_FILE_PATH_MAX];
	int r = 0;

	hc__file_dirpath(path, name);
	path[HEX_NAME] = '\0';
	if (mkdirat(be->root, path, 0755) == 0) {
		if (be->fsync_mode == HC_FSYNC_ALWAYS && fsync(be->root) < 0)
			return -errno;
	} else if (errno != EEXIST) {
		return -errno;
	}
	path[HEX_NAME] = '/';
	if (mkdirat(be->root, path, 0755) == 0) {
		path[HEX_NAME] = '\0';
		if (be->fsync_mode == HC_FSYNC_ALWAYS)
			r = fsync_at(be->root, path);
	} else if (errno != EEXIST) {
		r = -errno;
	}
	return r;
}

int hc__file_open_temp(struct hc_file *be, struct hc_fop *op, int flags)
{
	char path[HC_FILE_PATH_MAX];
	bool made = false;

	for (int tries = 0; tries < 8; tries++) {
		int fd;

		op->seq = atomic_fetch_add_explicit(&be->seq, 1, memory_order_relaxed);
		hc__file_path(path, op->name, op->seq, true);
		fd = openat(be->root, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | flags, 0644);
		if (fd >= 0) {
			op->fd = fd;
			return 0;
		}
		if (errno == EINVAL && (flags & O_DIRECT)) {
			unlinkat(be->root, path, 0); /* created before O_DIRECT was refused */
			return -EINVAL;
		}
		if (errno == ENOENT && !made) {
			int r = make_dirs(be, op->name);
			if (r < 0)
				return r;
			made = true;
		} else if (errno != EEXIST) {
			return -errno;
		}
	}
	return -EEXIST;
}

/*
 * Renames the written temp file over the object and records it, under the
 * name lock so that two puts of one name, or a put and a delete, leave the
 * index saying what the last rename or unlink did.  Consumes the put's
 * reservation.  0, or -errno with the temp file gone.
 */
int hc__file_commit(struct hc_file *be, struct hc_fop *op)
{
	pthread_mutex_t *lk = hc__file_name_lock(be, op->name);
	char tmp[HC_FILE_PATH_MAX], path[HC_FILE_PATH_MAX];
	int64_t old;
	int r = 0;

	hc__file_path(tmp, op->name, op->seq, true);
	hc__file_path(path, op->name, 0, false);
	pthread_mutex_lock(lk);
	if (renameat(be->root, tmp, be->root, path) < 0) {
		r = -errno;
		unlinkat(be->root, tmp, 0);
	}
	pthread_mutex_lock(&be->idx_lock);
	be->reserved -= op->size;
	op->reserved = false;
	if (r == 0 && hc__idx_put(&be->idx, op->name, op->size, &old) < 0) {
		/* No memory to index it: better no object than one the index
		 * cannot account for (a failed put may leave none). */
		uint32_t i = hc__idx_find(&be->idx, op->name);

		if (i != HC_IDX_NIL)
			hc__idx_del(&be->idx, i);
		unlinkat(be->root, path, 0);
		r = -ENOMEM;
	}
	pthread_mutex_unlock(&be->idx_lock);
	pthread_mutex_unlock(lk);
	if (r == 0)
		hc__file_make_room(be, 0, NULL);
	return r;
}

int hc__file_unlink(struct hc_file *be, const uint8_t *name)
{
	pthread_mutex_t *lk = hc__file_name_lock(be, name);
	char path[HC_FILE_PATH_MAX];
	int r = 0;

	hc__file_path(path, name, 0, false);
	pthread_mutex_lock(lk);
	/* The name lock keeps the entry as it is (evictors trylock it). */
	if (hc__file_lookup(be, name, false) < 0) {
		r = -ENOENT;
	} else if (unlinkat(be->root, path, 0) < 0 && errno != ENOENT) {
		r = -errno;
	} else {
		idx_drop(be, name);
	}
	pthread_mutex_unlock(lk);
	return r;
}

/* ---- rebuilding the index at open */

struct scan_ent {
	uint8_t name[HC_BE_NAME_BYTES];
	uint64_t size;
	int64_t mtime_ns;
};

struct scan {
	struct hc_file *be;
	struct scan_ent *v;
	size_t n, cap;
	uint64_t ignored, swept;
};

static int unhex(const char *s, unsigned nhex, uint8_t *out)
{
	for (unsigned i = 0; i < nhex; i++) {
		const char *p = s[i] ? strchr(hexd, s[i]) : NULL;

		if (!p)
			return -1; /* upper case is not a name we wrote */
		if (out)
			out[i / 2] = (uint8_t)((i & 1) ? (out[i / 2] | (p - hexd)) : ((p - hexd) << 4));
	}
	return s[nhex] == '\0' ? 0 : -1;
}

static bool is_temp(const char *n)
{
	size_t l = strlen(n);

	return n[0] == '.' && l > 5 && strcmp(n + l - 4, ".tmp") == 0;
}

static bool is_dir(int dfd, const struct dirent *e)
{
	struct stat st;

	if (e->d_type != DT_UNKNOWN)
		return e->d_type == DT_DIR;
	return fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

static DIR *open_sub(int dfd, const char *name)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);

	if (fd >= 0 && !d)
		close(fd);
	return d;
}

static int scan_add(struct scan *s, const uint8_t *fp, int dfd, const char *kname)
{
	struct scan_ent *e;
	struct stat st;

	if (fstatat(dfd, kname, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode)) {
		s->ignored++;
		return 0;
	}
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		struct scan_ent *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	e = &s->v[s->n++];
	memcpy(e->name, fp, 32);
	unhex(kname, HEX_NAME, e->name + 32);
	e->size = (uint64_t)st.st_size;
	e->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	return 0;
}

/* <fp>/<kk>/: objects whose name starts with kk, and our temp files. */
static int scan_leaf(struct scan *s, const uint8_t *fp, DIR *d, const char *kk)
{
	struct dirent *e;
	int r = 0;

	while (r == 0 && (e = readdir(d))) {
		const char *n = e->d_name;

		if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
			continue;
		if (is_temp(n)) {
			if (unlinkat(dirfd(d), n, 0) == 0)
				s->swept++;
			else
				s->ignored++;
		} else if (unhex(n, HEX_NAME, NULL) == 0 && n[0] == kk[0] && n[1] == kk[1]) {
			r = scan_add(s, fp, dirfd(d), n);
		} else {
			s->ignored++;
		}
	}
	return r;
}

static int scan_fp(struct scan *s, DIR *d, const char *fpname)
{
	uint8_t fp[32];
	struct dirent *e;
	int r = 0;

	unhex(fpname, HEX_NAME, fp);
	while (r == 0 && (e = readdir(d))) {
		const char *n = e->d_name;
		DIR *sub;

		if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
			continue;
		if (unhex(n, 2, NULL) < 0 || !is_dir(dirfd(d), e) || !(sub = open_sub(dirfd(d), n))) {
			s->ignored++;
			continue;
		}
		r = scan_leaf(s, fp, sub, n);
		closedir(sub);
	}
	return r;
}

static int by_mtime(const void *a, const void *b)
{
	const struct scan_ent *x = a, *y = b;

	if (x->mtime_ns != y->mtime_ns)
		return x->mtime_ns < y->mtime_ns ? -1 : 1;
	return memcmp(x->name, y->name, HC_BE_NAME_BYTES);
}

/*
 * Walks <dir>, sweeps temp files left by a crashed writer, and indexes every
 * object with its size.  The LRU order is the files' mtime: the time their
 * put wrote them, set by us on every filesystem, where atime depends on the
 * mount (noatime, relatime) and on reads we cannot tell apart from backups
 * or scanners.  So after a reopen the order is by last write, not last read.
 * Called before anything else can touch the instance (no locks needed).
 */
int hc__file_rebuild(struct hc_file *be, char *err, size_t errlen)
{
	struct scan s = { .be = be };
	struct dirent *e;
	int fd, r = 0;
	DIR *d;

	fd = openat(be->root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		r = -errno;
		snprintf(err, errlen, "dir=%s: cannot list it: %s", be->dir, strerror(-r));
		if (fd >= 0)
			close(fd);
		return r;
	}
	while (r == 0 && (e = readdir(d))) {
		const char *n = e->d_name;
		DIR *sub;

		if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0 || strcmp(n, LOCK_NAME) == 0)
			continue;
		if (is_temp(n)) { /* a probe of O_DIRECT (file.c) */
			s.swept += unlinkat(be->root, n, 0) == 0;
			continue;
		}
		if (unhex(n, HEX_NAME, NULL) < 0 || !is_dir(be->root, e) || !(sub = open_sub(be->root, n))) {
			s.ignored++;
			continue;
		}
		r = scan_fp(&s, sub, n);
		closedir(sub);
	}
	closedir(d);
	if (r < 0) {
		snprintf(err, errlen, "dir=%s: reading the objects: %s", be->dir, strerror(-r));
		goto out;
	}

	if (s.n)
		qsort(s.v, s.n, sizeof(*s.v), by_mtime);
	for (size_t i = 0; i < s.n; i++) {
		int64_t old;

		r = hc__idx_put(&be->idx, s.v[i].name, s.v[i].size, &old);
		if (r < 0) {
			snprintf(err, errlen, "dir=%s: no memory to index %zu objects", be->dir, s.n);
			goto out;
		}
	}
	be->cnt.temp_swept = s.swept;
	be->cnt.ignored_files = s.ignored;
	if (s.ignored)
		hc__file_log(be, HC_BE_LOG_WARN,
			     "%s: %" PRIu64 " entries are not objects of this backend: ignored, left in place", be->dir,
			     s.ignored);
	uint64_t before = be->cnt.evictions;
	hc__file_make_room(be, 0, NULL);
	hc__file_log(be, HC_BE_LOG_INFO,
		     "%s: %" PRIu64 " objects, %" PRIu64 " bytes; %" PRIu64 " temp files swept, %" PRIu64
		     " evicted to fit capacity",
		     be->dir, be->idx.count, be->idx.bytes, s.swept, be->cnt.evictions - before);
out:
	free(s.v);
	return r;
}
