/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shm.c - the "shm" L3 backend: the plugin table and the ops.
 *
 *     A node-local L3 in one shared-memory file (/dev/shm/hicache-l3.NAME by
 *     default) with a fixed capacity and LRU eviction, which any number of
 *     processes open at once and which outlives them all.  Any of them may
 *     die at any instruction, SIGKILL included, without losing or tearing
 *     an object.
 *
 *     The backend is synchronous: submit copies each op's bytes (memcpy)
 *     before it returns, and queues the completions for reap.  The host
 *     keeps several ops in flight by calling submit from several threads;
 *     copies run in parallel, never under a lock.
 *
 *     Options, ctl keys, results and statistics: hicache-backend-shm(7).
 *
 * SEGMENT LAYOUT
 *     layout.h has every region and field.  A 4 KiB header, written once by
 *     the creator before the file gets its name and checked by every open;
 *     the metadata (the lock, opener slots, pins, the object table, which is
 *     the truth the rest is rebuilt from, hash buckets, extent records);
 *     then the data, 2 MiB aligned.  An object is a chain of extents (runs
 *     of blocks); so is free space.
 *
 * LOCKING AND RECOVERY
 *     One robust mutex guards all metadata, held for bookkeeping only:
 *     a GET pins the object under it, copies outside it, and unpins under
 *     it; a PUT allocates (evicting unpinned LRU objects) under it, copies
 *     into the invisible WRITING object outside it, and publishes under it,
 *     taking the older object of the name out of the index in the same
 *     critical section.  A replaced, deleted or evicted object that is
 *     pinned turns DEAD and its space is reused at the last unpin.  On
 *     EOWNERDEAD the locker rebuilds the metadata from the object table
 *     (meta.c).  A dead opener (EOWNERDEAD on its slot's mutex) has its pins
 *     dropped and its unpublished puts freed (slots.c).
 *
 * LIMITS
 *     An object takes whole blocks, so a 1-byte object takes one block.  An
 *     instance must not be used in a child after fork(); open another.
 *     Objects are lost at reboot.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"

#define HC_SHM_QUEUE_MAX  (1u << 16) /* completions waiting for reap, per instance */
#define HC_SHM_EXISTS_RUN 64         /* EXISTS ops answered under one lock */

static const struct hc_backend_host *_Atomic g_host;

const struct hc_backend_host *hc__shm_host(void)
{
	return atomic_load_explicit(&g_host, memory_order_acquire);
}

/* ---- completions: ops finish inside submit; reap hands them out */

static int q_grow(struct hc_shm *be, unsigned need)
{
	unsigned cap = be->q_cap ? be->q_cap : 64;
	struct hc_be_cqe *q;

	while (cap < need)
		cap *= 2;
	if (cap == be->q_cap)
		return 0;
	q = malloc((size_t)cap * sizeof(*q));
	if (!q)
		return -ENOMEM;
	for (unsigned k = 0; k < be->q_count; k++)
		q[k] = be->q[(be->q_head + k) % be->q_cap];
	free(be->q);
	be->q = q;
	be->q_cap = cap;
	be->q_head = 0;
	return 0;
}

/* Room for up to n completions: how many ops may start, or -EAGAIN / -ENOMEM. */
static int q_reserve(struct hc_shm *be, unsigned n)
{
	unsigned used, k;
	int ret = 0;

	pthread_mutex_lock(&be->q_mu);
	used = be->q_count + be->executing;
	k = used >= HC_SHM_QUEUE_MAX ? 0 : HC_SHM_QUEUE_MAX - used;
	k = k < n ? k : n;
	if (k && (ret = q_grow(be, used + k)) == 0)
		be->executing += k;
	pthread_mutex_unlock(&be->q_mu);
	return ret < 0 ? ret : k ? (int)k : -EAGAIN;
}

static void q_push(struct hc_shm *be, uint64_t user_data, int64_t result)
{
	pthread_mutex_lock(&be->q_mu);
	be->q[(be->q_head + be->q_count) % be->q_cap] = (struct hc_be_cqe){ .user_data = user_data, .result = result };
	be->q_count++;
	be->executing--;
	pthread_cond_broadcast(&be->q_cv);
	pthread_mutex_unlock(&be->q_mu);
}

/* ---- pin entries of our slot: a process-local free stack */

static uint32_t pin_take(struct hc_shm *be)
{
	uint32_t k;

	pthread_mutex_lock(&be->pin_mu);
	while (!be->npin_free)
		pthread_cond_wait(&be->pin_cv, &be->pin_mu);
	k = be->pin_free[--be->npin_free];
	pthread_mutex_unlock(&be->pin_mu);
	return k;
}

static void pin_give(struct hc_shm *be, uint32_t k)
{
	pthread_mutex_lock(&be->pin_mu);
	be->pin_free[be->npin_free++] = k;
	pthread_cond_signal(&be->pin_cv);
	pthread_mutex_unlock(&be->pin_mu);
}

/* ---- data copies, outside the lock */

/*
 * Copy between an object's blocks and the iovecs, from the first byte of
 * each, until either ends.  The chain belongs to an object we pinned or are
 * writing, so nobody changes it; it is still bounds-checked, as everything
 * read from shared memory is.
 */
static int copy_blocks(const struct hc_shm_seg *s, uint32_t head, uint32_t nblocks, uint64_t length,
		       const struct iovec *iov, unsigned iovcnt, bool to_iov)
{
	uint32_t e = head, steps = 0;
	unsigned v = 0;
	size_t voff = 0;

	while (length && v < iovcnt) {
		int64_t b = hc__shm_block(s, e);
		struct hc_shm_ext x;
		uint8_t *blk;
		uint64_t run;

		if (b < 0 || ++steps > nblocks)
			return -EIO;
		x = s->exts[b];
		if (x.len == 0 || x.len > s->g.nblocks - (uint64_t)b)
			return -EIO;
		blk = s->data + ((uint64_t)b << s->block_shift);
		run = (uint64_t)x.len << s->block_shift;
		run = run < length ? run : length;
		length -= run;
		while (run && v < iovcnt) {
			size_t room = iov[v].iov_len - voff;
			size_t c = room < run ? room : (size_t)run;
			uint8_t *buf = (uint8_t *)iov[v].iov_base + voff;
			if (c) {
				if (to_iov)
					memcpy(buf, blk, c);
				else
					memcpy(blk, buf, c);
			}
			blk += c;
			run -= c;
			voff += c;
			if (voff == iov[v].iov_len) {
				v++;
				voff = 0;
			}
		}
		e = x.next;
	}
	return 0;
}

/* ---- ops */

static int64_t op_get(struct hc_shm *be, const struct hc_be_op *op)
{
	const struct hc_shm_seg *s = &be->seg;
	int64_t room = hc_be_iov_bytes(op), ret;
	uint32_t k, i, head, nblocks;
	uint64_t length;

	if (room < 0)
		return room;
	hc__shm_count(be, HC_SHM_CTR_gets, 1);
	k = pin_take(be);
	if ((ret = hc__shm_lock(be)) < 0) {
		pin_give(be, k);
		return ret;
	}
	i = hc__shm_lookup_locked(be, op->name);
	if (i && hc__shm_touch_locked(be, i) < 0)
		i = hc__shm_lookup_locked(be, op->name); /* the metadata was rebuilt meanwhile */
	if (!i) {
		hc__shm_unlock(be);
		pin_give(be, k);
		hc__shm_count(be, HC_SHM_CTR_misses, 1);
		return -ENOENT;
	}
	hc__shm_pin_locked(be, i, k);
	length = s->objs[i - 1].length;
	head = s->objs[i - 1].ext_head;
	nblocks = s->objs[i - 1].nblocks;
	hc__shm_unlock(be);

	ret = copy_blocks(s, head, nblocks, length, op->iov, op->iovcnt, true);

	if (hc__shm_lock(be) == 0) {
		hc__shm_unpin_locked(be, (uint32_t)be->slot, k);
		hc__shm_unlock(be);
	}
	pin_give(be, k);
	if (ret < 0) {
		hc__shm_warn_once(be, HC_SHM_WARN_CHAIN,
				  "%s: an object's extent chain is damaged; it reads as an error", s->path);
		return ret;
	}
	hc__shm_count(be, HC_SHM_CTR_hits, 1);
	hc__shm_count(be, HC_SHM_CTR_get_bytes, length < (uint64_t)room ? length : (uint64_t)room);
	return (int64_t)length;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A put's WRITING object, and where its bytes go (read under the lock). */
struct put_target {
	uint32_t obj, gen, head, nblocks;
};

/* Room for a put: evicting, then waiting while pins or other puts hold it. */
static int put_reserve(struct hc_shm *be, const struct hc_be_op *op, uint64_t length, struct put_target *t)
{
	uint64_t deadline = now_ms() + atomic_load_explicit(&be->put_wait_ms, memory_order_relaxed);
	useconds_t wait_us = 50;
	unsigned evicted;
	int ret;

	for (;;) {
		if ((ret = hc__shm_lock(be)) < 0)
			return ret;
		ret = hc__shm_reserve_locked(be, op->name, length, &t->obj, &t->gen, &evicted);
		if (ret == 0) {
			t->head = be->seg.objs[t->obj - 1].ext_head;
			t->nblocks = be->seg.objs[t->obj - 1].nblocks;
		}
		hc__shm_unlock(be);
		if (evicted) {
			hc__shm_count(be, HC_SHM_CTR_evictions, evicted);
			atomic_fetch_add_explicit(&be->seg.ctl->evictions, evicted, memory_order_relaxed);
		}
		if (ret != -EAGAIN)
			return ret;
		if (now_ms() >= deadline)
			return -EBUSY;
		hc__shm_count(be, HC_SHM_CTR_put_waits, 1);
		usleep(wait_us);
		wait_us = wait_us < 5000 ? wait_us * 2 : wait_us;
	}
}

static int64_t op_put(struct hc_shm *be, const struct hc_be_op *op)
{
	const struct hc_shm_seg *s = &be->seg;
	int64_t length = hc_be_iov_bytes(op);
	struct put_target t;
	int ret;

	if (length <= 0)
		return -EINVAL;
	hc__shm_count(be, HC_SHM_CTR_puts, 1);
	if ((uint64_t)length > (uint64_t)s->g.nblocks << s->block_shift)
		return -ENOSPC;
	if ((ret = put_reserve(be, op, (uint64_t)length, &t)) < 0)
		return ret;
	atomic_fetch_add(&be->writing, 1);

	/* Invisible to readers until published; a death here leaves a
	 * WRITING object that the recoverer of our slot frees. */
	ret = copy_blocks(s, t.head, t.nblocks, (uint64_t)length, op->iov, op->iovcnt, false);

	if (hc__shm_lock(be) < 0)
		return -ENOTRECOVERABLE; /* the object stays WRITING: close scans for it */
	if (ret < 0)
		hc__shm_abort_locked(be, t.obj, t.gen);
	else
		ret = hc__shm_publish_locked(be, t.obj, t.gen);
	hc__shm_unlock(be);
	atomic_fetch_sub(&be->writing, 1);
	if (ret == 0)
		hc__shm_count(be, HC_SHM_CTR_put_bytes, (uint64_t)length);
	return ret;
}

static int64_t op_delete(struct hc_shm *be, const struct hc_be_op *op)
{
	uint32_t i;
	int ret;

	if (op->iovcnt)
		return -EINVAL;
	hc__shm_count(be, HC_SHM_CTR_deletes, 1);
	if ((ret = hc__shm_lock(be)) < 0)
		return ret;
	i = hc__shm_lookup_locked(be, op->name);
	ret = i ? hc__shm_remove_locked(be, i) : -ENOENT;
	hc__shm_unlock(be);
	return ret;
}

/* A run of EXISTS ops, answered under one lock (HC_BE_CAP_BATCH_EXISTS). */
static unsigned op_exists_run(struct hc_shm *be, const struct hc_be_op *ops, unsigned n)
{
	int64_t res[HC_SHM_EXISTS_RUN];
	unsigned k;
	int ret;

	for (k = 0; k < n && k < HC_SHM_EXISTS_RUN && ops[k].opcode == HC_BE_OP_EXISTS; k++)
		;
	hc__shm_count(be, HC_SHM_CTR_exists, k);
	if ((ret = hc__shm_lock(be)) < 0) {
		for (unsigned j = 0; j < k; j++)
			res[j] = ret;
	} else {
		for (unsigned j = 0; j < k; j++)
			res[j] = ops[j].iovcnt ? -EINVAL : hc__shm_lookup_locked(be, ops[j].name) != 0;
		hc__shm_unlock(be);
	}
	for (unsigned j = 0; j < k; j++) {
		if (res[j] < 0)
			hc__shm_count(be, HC_SHM_CTR_errors, 1);
		q_push(be, ops[j].user_data, res[j]);
	}
	return k;
}

static int shm_submit(void *p, const struct hc_be_op *ops, unsigned n)
{
	struct hc_shm *be = p;
	int accepted;

	if (!be || !ops || n == 0)
		return -EINVAL;
	if ((accepted = q_reserve(be, n)) < 0)
		return accepted;
	for (unsigned i = 0; i < (unsigned)accepted;) {
		const struct hc_be_op *op = &ops[i];
		int64_t r;

		if (op->opcode == HC_BE_OP_EXISTS) {
			i += op_exists_run(be, op, (unsigned)accepted - i);
			continue;
		}
		switch (op->opcode) {
		case HC_BE_OP_GET:
			r = op_get(be, op);
			break;
		case HC_BE_OP_PUT:
			r = op_put(be, op);
			break;
		case HC_BE_OP_DELETE:
			r = op_delete(be, op);
			break;
		default:
			r = -EINVAL;
			break;
		}
		if (r < 0 && r != -ENOENT)
			hc__shm_count(be, HC_SHM_CTR_errors, 1);
		q_push(be, op->user_data, r);
		i++;
	}
	return accepted;
}

static int shm_reap(void *p, struct hc_be_cqe *cqes, unsigned max, int timeout_ms)
{
	struct hc_shm *be = p;
	struct timespec deadline;
	unsigned n;

	if (!be || (!cqes && max) || timeout_ms < -1)
		return -EINVAL;
	if (max == 0)
		return 0;
	if (timeout_ms > 0)
		deadline = hc_be_deadline(timeout_ms);
	pthread_mutex_lock(&be->q_mu);
	/* Nothing queued: wait only while some op is still being done. */
	while (be->q_count == 0 && be->executing && timeout_ms != 0) {
		if (timeout_ms < 0)
			pthread_cond_wait(&be->q_cv, &be->q_mu);
		else if (pthread_cond_timedwait(&be->q_cv, &be->q_mu, &deadline) == ETIMEDOUT)
			break;
	}
	n = be->q_count < max ? be->q_count : max;
	for (unsigned k = 0; k < n; k++)
		cqes[k] = be->q[(be->q_head + k) % be->q_cap];
	if (n) {
		be->q_head = (be->q_head + n) % be->q_cap;
		be->q_count -= n;
	}
	pthread_mutex_unlock(&be->q_mu);
	return (int)n;
}

/*
 * Every op is complete when submit returns: the work is a memcpy between
 * memory regions, bounded in time (a put waits at most put_wait_ms), with
 * nothing outstanding that could be cut short.  What is in flight is only a
 * completion waiting for reap, and its result already won any race.
 */
static int shm_cancel(void *p, uint64_t user_data)
{
	(void)user_data;
	return p ? -EOPNOTSUPP : -EINVAL;
}

/* The bytes are copied with the CPU: registration helps nothing. */
static int shm_reg_mem(void *p, void *addr, size_t len)
{
	return p && addr && len ? 0 : -EINVAL;
}

static int shm_unreg_mem(void *p, void *addr)
{
	return p && addr ? 0 : -EINVAL;
}

static int shm_stats(void *p, void (*emit)(void *arg, const char *name, uint64_t value), void *arg)
{
	static const char *const names[HC_SHM_CTR__COUNT] = {
#define HC_SHM_X(n) #n,
		HC_SHM_OP_COUNTERS(HC_SHM_X)
#undef HC_SHM_X
	};
	struct hc_shm *be = p;
	const struct hc_shm_seg *s;
	uint64_t objects, bytes, free_blocks, openers;
	int ret;

	if (!be || !emit)
		return -EINVAL;
	s = &be->seg;
	if ((ret = hc__shm_lock(be)) < 0)
		return ret;
	hc__shm_probe_locked(be);
	objects = s->ctl->nobjects;
	bytes = s->ctl->live_bytes;
	free_blocks = s->ctl->free_blocks;
	openers = hc__shm_openers(be);
	hc__shm_unlock(be);
	for (int c = 0; c < HC_SHM_CTR__COUNT; c++)
		emit(arg, names[c], atomic_load_explicit(&be->ctr[c], memory_order_relaxed));
	emit(arg, "objects", objects);
	emit(arg, "bytes", bytes);
	emit(arg, "capacity_bytes", (uint64_t)s->g.nblocks << s->block_shift);
	emit(arg, "free_bytes", free_blocks << s->block_shift);
	emit(arg, "openers", openers);
	emit(arg, "opens", atomic_load_explicit(&s->ctl->opens, memory_order_relaxed));
	emit(arg, "recoveries", atomic_load_explicit(&s->ctl->recoveries, memory_order_relaxed));
	emit(arg, "rebuilds", atomic_load_explicit(&s->ctl->rebuilds, memory_order_relaxed));
	emit(arg, "store_evictions", atomic_load_explicit(&s->ctl->evictions, memory_order_relaxed));
	return 0;
}

static int ctl_out(char *out, size_t outlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int ctl_out(char *out, size_t outlen, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out, outlen, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	return (size_t)n < outlen ? n : (int)outlen - 1;
}

static const char *const ctl_keys[] = {
	"path",    "name",        "capacity",         "block_size", "max_objects", "max_openers", "slot",
	"created", "put_wait_ms", "destroy_on_close", "check",      "destroy",     "recover",     "rebuild",
};

static bool ctl_known(const char *key)
{
	for (size_t i = 0; i < sizeof(ctl_keys) / sizeof(ctl_keys[0]); i++)
		if (strcmp(key, ctl_keys[i]) == 0)
			return true;
	return false;
}

static int ctl_read(struct hc_shm *be, const char *key, char *out, size_t outlen)
{
	const struct hc_shm_seg *s = &be->seg;
	int ret;

	if (!ctl_known(key))
		return -ENOENT;
	if (!out || !outlen)
		return -EINVAL;
	if (strcmp(key, "path") == 0)
		return ctl_out(out, outlen, "%s", s->path);
	if (strcmp(key, "name") == 0)
		return ctl_out(out, outlen, "%s", be->opts.name);
	if (strcmp(key, "capacity") == 0)
		return ctl_out(out, outlen, "%" PRIu64, (uint64_t)s->g.nblocks << s->block_shift);
	if (strcmp(key, "block_size") == 0)
		return ctl_out(out, outlen, "%" PRIu32, s->g.block_bytes);
	if (strcmp(key, "max_objects") == 0)
		return ctl_out(out, outlen, "%" PRIu32, s->g.max_objects);
	if (strcmp(key, "max_openers") == 0)
		return ctl_out(out, outlen, "%" PRIu32, s->g.max_openers);
	if (strcmp(key, "slot") == 0)
		return ctl_out(out, outlen, "%d", be->slot);
	if (strcmp(key, "created") == 0)
		return ctl_out(out, outlen, "%d", s->created);
	if (strcmp(key, "put_wait_ms") == 0)
		return ctl_out(out, outlen, "%" PRIu32, atomic_load(&be->put_wait_ms));
	if (strcmp(key, "destroy_on_close") == 0)
		return ctl_out(out, outlen, "%d", atomic_load(&be->destroy_on_close));
	if (strcmp(key, "check") == 0) {
		if ((ret = hc__shm_lock(be)) < 0)
			return ret;
		ret = hc__shm_check_locked(be, out, outlen);
		hc__shm_unlock(be);
		return ret < 0 ? ret : (int)strlen(out);
	}
	return -EINVAL; /* destroy, recover, rebuild: actions, set them to 1 */
}

static int ctl_action(struct hc_shm *be, const char *key)
{
	int ret;

	if (strcmp(key, "destroy") == 0)
		return hc__shm_seg_unlink(&be->seg);
	if ((ret = hc__shm_lock(be)) < 0)
		return ret;
	if (strcmp(key, "rebuild") == 0) {
		be->seg.ctl->dirty = 1;
		ret = hc__shm_rebuild_locked(be);
	} else {
		hc__shm_probe_locked(be);
	}
	hc__shm_unlock(be);
	return ret;
}

static int shm_ctl(void *p, const char *key, const char *value, char *out, size_t outlen)
{
	struct hc_shm *be = p;
	uint64_t ms;
	char *end;
	int b;

	if (!be || !key)
		return -EINVAL;
	if (!value)
		return ctl_read(be, key, out, outlen);
	if (strcmp(key, "destroy") == 0 || strcmp(key, "recover") == 0 || strcmp(key, "rebuild") == 0)
		return hc__shm_parse_bool(value) == 1 ? ctl_action(be, key) : -EINVAL;
	if (strcmp(key, "destroy_on_close") == 0) {
		if ((b = hc__shm_parse_bool(value)) < 0)
			return -EINVAL;
		atomic_store(&be->destroy_on_close, b);
		return 0;
	}
	if (strcmp(key, "put_wait_ms") == 0) {
		errno = 0;
		ms = strtoull(value, &end, 10);
		if (value[0] < '0' || value[0] > '9' || *end || errno || ms > 600000)
			return -EINVAL;
		atomic_store(&be->put_wait_ms, (uint32_t)ms);
		return 0;
	}
	return ctl_known(key) ? -EINVAL : -ENOENT; /* read-only, or unknown */
}

/* ---- open and close */

static void shm_close(void *p)
{
	struct hc_shm *be = p;

	if (!be)
		return;
	if (be->seg.base) {
		hc__shm_slot_release(be);
		if (atomic_load(&be->destroy_on_close))
			hc__shm_seg_unlink(&be->seg);
		hc__shm_seg_close(&be->seg);
	}
	sem_destroy(&be->holder_stop);
	sem_destroy(&be->holder_ready);
	pthread_cond_destroy(&be->pin_cv);
	pthread_mutex_destroy(&be->pin_mu);
	pthread_cond_destroy(&be->q_cv);
	pthread_mutex_destroy(&be->q_mu);
	free(be->pin_free);
	free(be->q);
	free(be);
}

static struct hc_shm *instance_new(void)
{
	struct hc_shm *be = calloc(1, sizeof(*be));
	pthread_condattr_t ca;

	if (!be)
		return NULL;
	be->slot = -1;
	be->claiming = -1;
	sem_init(&be->holder_ready, 0, 0);
	sem_init(&be->holder_stop, 0, 0);
	pthread_mutex_init(&be->pin_mu, NULL);
	pthread_cond_init(&be->pin_cv, NULL);
	pthread_mutex_init(&be->q_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&be->q_cv, &ca);
	pthread_condattr_destroy(&ca);
	return be;
}

static int shm_open(const struct hc_be_option *opts, unsigned nopts, void **out, char *err, size_t errlen)
{
	struct hc_shm *be;
	int ret;

	if (!out)
		return hc__shm_fail(err, errlen, EINVAL, "open: the instance pointer is NULL");
	*out = NULL;
	if (!(be = instance_new()))
		return hc__shm_fail(err, errlen, ENOMEM, "open: out of memory");
	if ((ret = hc__shm_opts_parse(opts, nopts, &be->opts, err, errlen)) < 0 ||
	    (ret = hc__shm_seg_open(&be->seg, &be->opts, err, errlen)) < 0)
		goto fail;
	atomic_store(&be->put_wait_ms, be->opts.put_wait_ms);
	atomic_store(&be->destroy_on_close, be->opts.destroy_on_close);
	be->pin_free = malloc(be->seg.g.pins_per_opener * sizeof(*be->pin_free));
	if (!be->pin_free) {
		ret = hc__shm_fail(err, errlen, ENOMEM, "open: out of memory");
		goto fail;
	}
	for (uint32_t k = 0; k < be->seg.g.pins_per_opener; k++)
		be->pin_free[be->npin_free++] = be->seg.g.pins_per_opener - 1 - k;
	if ((ret = hc__shm_slot_claim(be)) < 0) {
		ret = ret == -EUSERS
			      ? hc__shm_fail(
					err, errlen, EUSERS,
					"all %" PRIu32
					" opener slots of %s are held by live processes: close some, or recreate it with a larger max_openers=",
					be->seg.g.max_openers, be->seg.path)
			      : hc__shm_fail(err, errlen, -ret, "cannot take an opener slot of %s: %s", be->seg.path,
					     strerror(-ret));
		goto fail;
	}
	if ((ret = hc__shm_lock(be)) < 0) {
		ret = hc__shm_fail(err, errlen, -ret, "%s: the metadata lock is unusable (%s): remove the file",
				   be->seg.path, strerror(-ret));
		goto fail;
	}
	hc__shm_probe_locked(be); /* undo whoever died since */
	hc__shm_unlock(be);
	atomic_fetch_add_explicit(&be->seg.ctl->opens, 1, memory_order_relaxed);
	hc__shm_log(HC_BE_LOG_DEBUG, "%s store %s: %" PRIu64 " bytes in %" PRIu32 "-byte blocks, opener slot %d",
		    be->seg.created ? "created" : "opened", be->seg.path,
		    (uint64_t)be->seg.g.nblocks << be->seg.block_shift, be->seg.g.block_bytes, be->slot);
	*out = be;
	return 0;

fail:
	/* A store this open created stays: another process may have opened it
	 * since it got its name. */
	atomic_store(&be->destroy_on_close, 0);
	shm_close(be);
	return ret;
}

static const struct hc_backend shm_backend = {
	.abi_version = HC_BACKEND_ABI_VERSION,
	.size = sizeof(struct hc_backend),
	.name = "shm",
	.description = "node-local store in a POSIX shared-memory segment, with a capacity and LRU eviction",
	.caps = HC_BE_CAP_BATCH_EXISTS | HC_BE_CAP_DELETE | HC_BE_CAP_PERSISTENT,
	.open = shm_open,
	.close = shm_close,
	.reg_mem = shm_reg_mem,
	.unreg_mem = shm_unreg_mem,
	.submit = shm_submit,
	.reap = shm_reap,
	.cancel = shm_cancel,
	.stats = shm_stats,
	.ctl = shm_ctl,
};

HC_BACKEND_EXPORT const struct hc_backend *hc_backend_entry(const struct hc_backend_host *host)
{
	if (host && host->abi_version >= 1 && host->size >= offsetof(struct hc_backend_host, log) + sizeof(host->log))
		atomic_store_explicit(&g_host, host, memory_order_release);
	return &shm_backend;
}
