/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file.c - the "file" L3 backend: one object per file under a directory,
 * data moved through io_uring.  This file holds the ABI table, the options,
 * open/close, ctl and stats; file.h names the other parts.
 *
 * An object is DIR/FINGERPRINT/KK/KEY (store.c has the layout).  A put
 * writes a temp file and renames it over the object, so a reader, or a
 * restart after a crash, finds the old object or the new, never a mix.
 * open() takes an flock on the directory (one instance per directory),
 * sweeps the temp files a crashed writer left and rebuilds the index (size,
 * and LRU order by modification time) from the directory.
 *
 * I/O goes through one ring per instance, its completion ring twice the
 * submission ring.  An op whose buffers are all 4096-aligned (the host's
 * always are) goes O_DIRECT, and memory given to reg_mem is registered as
 * fixed buffers in chunks of at most 1 GiB, so a GET lands straight in the
 * envelope; each falls back, with one warning, when the filesystem or the
 * kernel refuses it.
 *
 * Options, ctl keys and statistics: hicache-backend-file(7).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"

#define LOCK_NAME ".hicache-file.lock"

static const struct hc_backend_host *host;

const struct hc_backend_host *hc__file_host(void)
{
	return host;
}

/* ---- options */

struct opts {
	const char *dir;
	unsigned qd;
	uint64_t capacity;
	int fsync_mode, direct_mode, fixed_mode;
};

static const char *const fsync_names[] = { "none", "always", NULL };
static const char *const direct_names[] = { "auto", "on", "off", NULL };
static const char *const fixed_names[] = { "auto", "off", NULL };

static int parse_word(const char *v, const char *const *names, int *out)
{
	for (int i = 0; names[i]; i++) {
		if (strcmp(v, names[i]) == 0) {
			*out = i;
			return 0;
		}
	}
	return -EINVAL;
}

static int parse_uint(const char *v, uint64_t *out, const char **end)
{
	uint64_t n = 0;
	const char *p = v;

	if (*p < '0' || *p > '9')
		return -EINVAL; /* no sign, no space, no empty string */
	for (; *p >= '0' && *p <= '9'; p++) {
		if (n > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -EINVAL;
		n = n * 10 + (uint64_t)(*p - '0');
	}
	*out = n;
	*end = p;
	return 0;
}

static int parse_size(const char *v, uint64_t *out)
{
	static const char units[] = "kmgt";
	const char *p, *u;
	uint64_t n;

	if (strcmp(v, "unlimited") == 0) {
		*out = HC_FILE_UNLIMITED;
		return 0;
	}
	if (parse_uint(v, &n, &p) < 0)
		return -EINVAL;
	if (*p && (u = strchr(units, *p | 0x20))) {
		unsigned shift = 10 * (unsigned)(u - units + 1);

		if (n > UINT64_MAX >> shift)
			return -EINVAL;
		n <<= shift;
		p++;
		if ((p[0] | 0x20) == 'i' && (p[1] | 0x20) == 'b')
			p += 2;
		else if ((p[0] | 0x20) == 'b')
			p++;
	}
	if (*p || n == 0 || n == HC_FILE_UNLIMITED)
		return -EINVAL;
	*out = n;
	return 0;
}

enum { OPT_DIR, OPT_QD, OPT_CAP, OPT_FSYNC, OPT_DIRECT, OPT_FIXED, OPT_N };
static const struct {
	const char *key;
	const char *accepted;
} optdef[OPT_N] = {
	[OPT_DIR] = { "dir", "an existing, writable directory" },
	[OPT_QD] = { "queue_depth", "an integer from 1 to 4096" },
	[OPT_CAP] = { "capacity", "a byte count with an optional K, M, G or T suffix (powers of 1024), or unlimited" },
	[OPT_FSYNC] = { "fsync", "none or always" },
	[OPT_DIRECT] = { "direct", "auto, on or off" },
	[OPT_FIXED] = { "fixed_buffers", "auto or off" },
};

static int parse_one(struct opts *o, int k, const char *v)
{
	uint64_t n;
	const char *end;

	switch (k) {
	case OPT_DIR:
		o->dir = v;
		return *v ? 0 : -EINVAL;
	case OPT_QD:
		if (parse_uint(v, &n, &end) < 0 || *end || n < 1 || n > HC_FILE_QD_MAX)
			return -EINVAL;
		o->qd = (unsigned)n;
		return 0;
	case OPT_CAP:
		return parse_size(v, &o->capacity);
	case OPT_FSYNC:
		return parse_word(v, fsync_names, &o->fsync_mode);
	case OPT_DIRECT:
		return parse_word(v, direct_names, &o->direct_mode);
	default:
		return parse_word(v, fixed_names, &o->fixed_mode);
	}
}

static int parse_opts(const struct hc_be_option *opts, unsigned nopts, struct opts *o, char *err, size_t errlen)
{
	const char *seen[OPT_N] = { 0 };

	*o = (struct opts){ .qd = 64, .capacity = HC_FILE_UNLIMITED };
	if (nopts && !opts) {
		snprintf(err, errlen, "no options given (opts is NULL): dir= is required");
		return -EINVAL;
	}
	for (unsigned i = 0; i < nopts; i++) {
		const char *key = opts[i].key, *v = opts[i].value;
		int k = 0;

		while (k < OPT_N && key && strcmp(key, optdef[k].key) != 0)
			k++;
		if (!key || k == OPT_N) {
			snprintf(
				err, errlen,
				"unknown option %s=%s: the file backend takes dir, queue_depth, capacity, fsync, direct, fixed_buffers",
				key ? key : "(null)", v ? v : "(null)");
			return -EINVAL;
		}
		if (!v) {
			snprintf(err, errlen, "option %s has no value: expected %s", key, optdef[k].accepted);
			return -EINVAL;
		}
		if (seen[k]) {
			snprintf(err, errlen, "option %s given twice (%s, then %s): give it once", key, seen[k], v);
			return -EINVAL;
		}
		seen[k] = v;
		if (parse_one(o, k, v) < 0) {
			snprintf(err, errlen, "bad value %s=%s: expected %s", key, v, optdef[k].accepted);
			return -EINVAL;
		}
	}
	if (!o->dir) {
		snprintf(err, errlen, "option dir is required: %s for the objects", optdef[OPT_DIR].accepted);
		return -EINVAL;
	}
	return 0;
}

/* ---- open and close */

/* Whether O_DIRECT works in dir: open and one aligned write, as a put does. */
static int probe_direct(struct hc_file *be)
{
	char name[64];
	void *buf = NULL;
	int fd, r = 0;

	snprintf(name, sizeof(name), ".probe-%d.tmp", (int)getpid());
	fd = openat(be->root, name, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = -errno;
		unlinkat(be->root, name, 0); /* created before O_DIRECT was refused */
		return r;
	}
	if (posix_memalign(&buf, HC_FILE_ALIGN, HC_FILE_ALIGN) == 0) {
		memset(buf, 0, HC_FILE_ALIGN);
		if (pwrite(fd, buf, HC_FILE_ALIGN, 0) < 0)
			r = -errno;
		free(buf);
	}
	close(fd);
	unlinkat(be->root, name, 0);
	return r;
}

static int open_dir(struct hc_file *be, char *err, size_t errlen)
{
	int r;

	be->root = open(be->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (be->root < 0) {
		r = -errno;
		snprintf(err, errlen, "bad value dir=%s: %s: expected %s", be->dir,
			 r == -ENOTDIR  ? "not a directory"
			 : r == -ENOENT ? "no such directory"
					: strerror(-r),
			 optdef[OPT_DIR].accepted);
		return -EINVAL;
	}
	if (faccessat(be->root, ".", W_OK | X_OK, AT_EACCESS) < 0 ||
	    (be->lockfd = openat(be->root, LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
		snprintf(err, errlen, "bad value dir=%s: not writable (%s): expected %s", be->dir, strerror(errno),
			 optdef[OPT_DIR].accepted);
		return -EINVAL;
	}
	if (flock(be->lockfd, LOCK_EX | LOCK_NB) < 0) {
		r = errno == EWOULDBLOCK ? -EBUSY : -errno;
		snprintf(err, errlen,
			 "dir=%s is in use by another open instance (%s/%s is locked): one instance per directory",
			 be->dir, be->dir, LOCK_NAME);
		return r;
	}
	if (be->direct_mode == HC_DIRECT_OFF)
		return 0;
	r = probe_direct(be);
	if (r == -EINVAL && be->direct_mode == HC_DIRECT_ON) {
		snprintf(err, errlen,
			 "bad value direct=on: the filesystem of %s refuses O_DIRECT: use direct=auto or direct=off",
			 be->dir);
		return -EINVAL;
	}
	if (r == -EINVAL) {
		atomic_store(&be->direct_ok, false);
		HC_COUNT(be, direct_fallbacks, 1);
		hc__file_warn_once(be, HC_WARN_DIRECT, "%s: the filesystem refuses O_DIRECT: buffered I/O", be->dir);
	} else if (r < 0) {
		snprintf(err, errlen, "bad value dir=%s: not writable (%s): expected %s", be->dir, strerror(-r),
			 optdef[OPT_DIR].accepted);
		return -EINVAL;
	}
	return 0;
}

/* What open has built so far, in order: destroy() undoes it backwards. */
enum { BUILT_DIR, BUILT_IDX, BUILT_OPS, BUILT_RING };

static void destroy(struct hc_file *be, int built)
{
	if (built >= BUILT_RING)
		hc__file_ring_exit(be);
	if (built >= BUILT_OPS)
		hc__file_ops_free(be);
	if (built >= BUILT_IDX)
		hc__idx_free(&be->idx);
	if (be->lockfd >= 0)
		close(be->lockfd); /* releases the flock */
	if (be->root >= 0)
		close(be->root);
	for (unsigned i = 0; i < HC_FILE_NAME_LOCKS; i++)
		pthread_mutex_destroy(&be->name_lock[i]);
	pthread_mutex_destroy(&be->idx_lock);
	free(be->dir);
	free(be);
}

static int file_open(const struct hc_be_option *opts, unsigned nopts, void **out, char *err, size_t errlen)
{
	char scratch[1];
	struct hc_file *be;
	struct opts o;
	int r, built = BUILT_DIR;

	if (!err || !errlen) {
		err = scratch;
		errlen = sizeof(scratch);
	}
	err[0] = '\0';
	if (!out) {
		snprintf(err, errlen, "open: no place for the instance (be is NULL)");
		return -EINVAL;
	}
	*out = NULL;
	r = parse_opts(opts, nopts, &o, err, errlen);
	if (r < 0)
		return r;
	be = calloc(1, sizeof(*be));
	if (!be || !(be->dir = strdup(o.dir))) {
		free(be);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	be->qd = o.qd;
	be->capacity = o.capacity;
	be->fsync_mode = o.fsync_mode;
	be->direct_mode = o.direct_mode;
	be->fixed_mode = o.fixed_mode;
	be->root = be->lockfd = -1;
	atomic_store(&be->direct_ok, o.direct_mode != HC_DIRECT_OFF);
	atomic_store(&be->seq, (uint64_t)getpid() << 32);
	pthread_mutex_init(&be->idx_lock, NULL);
	for (unsigned i = 0; i < HC_FILE_NAME_LOCKS; i++)
		pthread_mutex_init(&be->name_lock[i], NULL);

	r = open_dir(be, err, errlen);
	if (r < 0)
		goto fail;
	r = hc__idx_init(&be->idx);
	if (r < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	built = BUILT_IDX;
	r = hc__file_ops_init(be);
	if (r < 0) {
		snprintf(err, errlen, "out of memory for %u ops", be->qd);
		goto fail;
	}
	built = BUILT_OPS;
	r = hc__file_ring_init(be, err, errlen);
	if (r < 0)
		goto fail;
	built = BUILT_RING;
	r = hc__file_rebuild(be, err, errlen);
	if (r < 0)
		goto fail;
	*out = be;
	return 0;
fail:
	destroy(be, built);
	return r;
}

static void file_close(void *arg)
{
	if (!arg)
		return;
	hc__file_ops_drain(arg);
	destroy(arg, BUILT_RING);
}

static int file_reg_mem(void *arg, void *addr, size_t len)
{
	return arg ? hc__file_reg(arg, addr, len) : -EINVAL;
}

static int file_unreg_mem(void *arg, void *addr)
{
	return arg ? hc__file_unreg(arg, addr) : -EINVAL;
}

/* ---- ctl and stats */

static uint64_t instance_caps(struct hc_file *be)
{
	uint64_t caps = HC_BE_CAP_ASYNC | HC_BE_CAP_BATCH_EXISTS | HC_BE_CAP_DELETE | HC_BE_CAP_PERSISTENT;

	if (be->direct_mode != HC_DIRECT_OFF && atomic_load(&be->direct_ok))
		caps |= HC_BE_CAP_ZERO_COPY;
	if (be->fsync_mode == HC_FSYNC_ALWAYS)
		caps |= HC_BE_CAP_DURABLE;
	return caps;
}

static int file_ctl(void *arg, const char *key, const char *value, char *out, size_t outlen)
{
	struct hc_file *be = arg;
	uint64_t cap;
	int k = 0, n;

	if (!be || !key)
		return -EINVAL;
	if (value) {
		if (strcmp(key, "capacity") == 0)
			return parse_size(value, &cap) < 0 ? -EINVAL : hc__file_set_capacity(be, cap);
		while (k < OPT_N && strcmp(key, optdef[k].key) != 0)
			k++;
		/* The others are fixed for the life of the instance. */
		return k < OPT_N || strcmp(key, "direct_active") == 0 || strcmp(key, "caps") == 0 ? -EINVAL : -ENOENT;
	}
	if (!out || !outlen)
		return -EINVAL;
	if (strcmp(key, "dir") == 0) {
		n = snprintf(out, outlen, "%s", be->dir);
	} else if (strcmp(key, "queue_depth") == 0) {
		n = snprintf(out, outlen, "%u", be->qd);
	} else if (strcmp(key, "capacity") == 0) {
		pthread_mutex_lock(&be->idx_lock);
		cap = be->capacity;
		pthread_mutex_unlock(&be->idx_lock);
		n = cap == HC_FILE_UNLIMITED ? snprintf(out, outlen, "unlimited")
					     : snprintf(out, outlen, "%" PRIu64, cap);
	} else if (strcmp(key, "fsync") == 0) {
		n = snprintf(out, outlen, "%s", fsync_names[be->fsync_mode]);
	} else if (strcmp(key, "direct") == 0) {
		n = snprintf(out, outlen, "%s", direct_names[be->direct_mode]);
	} else if (strcmp(key, "direct_active") == 0) {
		n = snprintf(out, outlen, "%s", instance_caps(be) & HC_BE_CAP_ZERO_COPY ? "yes" : "no");
	} else if (strcmp(key, "fixed_buffers") == 0) {
		n = snprintf(out, outlen, "%s", fixed_names[be->fixed_mode]);
	} else if (strcmp(key, "caps") == 0) {
		n = snprintf(out, outlen, "0x%" PRIx64, instance_caps(be));
	} else {
		return -ENOENT;
	}
	return n < 0 ? -EINVAL : (size_t)n >= outlen ? -ERANGE : n;
}

static int file_stats(void *arg, void (*emit)(void *, const char *, uint64_t), void *earg)
{
	struct hc_file *be = arg;
	uint64_t objects, bytes, cap, reserved;
	unsigned inflight;

	if (!be || !emit)
		return -EINVAL;
	pthread_mutex_lock(&be->idx_lock);
	objects = be->idx.count;
	bytes = be->idx.bytes;
	cap = be->capacity;
	reserved = be->reserved;
	pthread_mutex_unlock(&be->idx_lock);
	pthread_mutex_lock(&be->ops_lock);
	inflight = be->outstanding;
	pthread_mutex_unlock(&be->ops_lock);
	emit(earg, "objects", objects);
	emit(earg, "bytes", bytes);
	emit(earg, "capacity_bytes", cap == HC_FILE_UNLIMITED ? 0 : cap);
	emit(earg, "reserved_bytes", reserved);
	emit(earg, "inflight", inflight);
	emit(earg, "fixed_buffers", be->nchunk);
	emit(earg, "fixed_bytes", hc__file_fixed_bytes(be));
#define X(n) emit(earg, #n, atomic_load_explicit(&be->cnt.n, memory_order_relaxed));
	HC_FILE_COUNTERS(X)
#undef X
	return 0;
}

static const struct hc_backend file_backend = {
	.abi_version = HC_BACKEND_ABI_VERSION,
	.size = sizeof(struct hc_backend),
	.name = "file",
	.description = "one file per object under a directory, through io_uring (O_DIRECT, fixed buffers)",
	.caps = HC_BE_CAP_ASYNC | HC_BE_CAP_ZERO_COPY | HC_BE_CAP_BATCH_EXISTS | HC_BE_CAP_DELETE | HC_BE_CAP_DURABLE |
		HC_BE_CAP_PERSISTENT,
	.open = file_open,
	.close = file_close,
	.reg_mem = file_reg_mem,
	.unreg_mem = file_unreg_mem,
	.submit = hc__file_submit,
	.reap = hc__file_reap,
	.cancel = hc__file_cancel,
	.stats = file_stats,
	.ctl = file_ctl,
};

HC_BACKEND_EXPORT const struct hc_backend *hc_backend_entry(const struct hc_backend_host *h)
{
	/* All this plugin uses of the host is log. */
	if (h && h->size >= offsetof(struct hc_backend_host, log) + sizeof(h->log))
		host = h;
	return &file_backend;
}
