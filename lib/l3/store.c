/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c - L3 through a backend plugin: batches of put, get, exists and
 * delete, with the object format of object.h built and checked here.
 *
 * Notes on synchronization (all process-private):
 * - A store has queue_depth header blocks (4096 bytes each, registered with
 *   the plugin); an op in flight owns one.  So queue_depth bounds the ops in
 *   flight across every thread using the store.  st->free and st->nfree are
 *   under st->mu.
 * - One thread at a time reaps (st->reaping, under st->mu).  It hands each
 *   completion to the call that owns the op (the op's call->done list, under
 *   st->mu) and wakes the others (st->cv) after each round.  A call reaps
 *   only while it has ops in flight; otherwise it waits for st->cv.
 * - Everything else of a call (its ops, their buffers, the verification) is
 *   touched only by the thread that made the call.
 * - A page stays held while its op is in flight: a put pins it, a get's page
 *   is the caller's reservation.  The plugin may touch a buffer until its op
 *   is reaped, so nothing here returns before every op of the call is
 *   reaped, or given up: an op past its deadline (timeout_ms) is cancelled,
 *   and one that still does not complete within a grace period becomes an
 *   orphan.  Its item fails with -ETIME, and the orphan keeps its header
 *   block, its bounce buffer and its page (a put's pin, a get's reservation,
 *   which the caller must then leave alone) out of use until the plugin
 *   lets go: whichever reap returns its completion, a call's or
 *   hc__store_poll's, settles it (st->orphan[block], under st->mu).
 * - Transient failures (EAGAIN, EBUSY, ETIMEDOUT, connection errors) are
 *   retried, up to 'retries' times per op, after a backoff that doubles
 *   from BACKOFF_MS; the op keeps its block meanwhile.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../shmpool/pool.h"
#include "mac.h"
#include "object.h"
#include "plugin.h"
#include "store.h"

#define QD_DEFAULT         64
#define QD_MAX             4096
#define REAP_MAX           64
#define REAP_WAIT_MS       100
#define TIMEOUT_DEFAULT_MS 30000
#define RETRIES_DEFAULT    2
#define BACKOFF_MS         1
#define BACKOFF_MAX_MS     100

/* The library's counters, declared once: X(name, help). */
#define HC_STORE_COUNTERS(X)                                                                                           \
	X(puts, "objects stored")                                                                                      \
	X(put_bytes, "bytes stored, headers included")                                                                 \
	X(put_errors, "puts that failed")                                                                              \
	X(gets, "gets asked")                                                                                          \
	X(hits, "gets that returned a checked object")                                                                 \
	X(misses, "gets of absent objects, or of objects without a needed component")                                  \
	X(corrupt, "gets of objects whose header, length or checksum was wrong (misses too)")                          \
	X(rereads, "gets read again whole because the object held more components than the page")                      \
	X(get_bytes, "bytes read by hits")                                                                             \
	X(get_errors, "gets that failed for another reason")                                                           \
	X(exists, "existence checks")                                                                                  \
	X(deletes, "objects deleted")                                                                                  \
	X(retries, "ops tried again after a transient failure")                                                        \
	X(timeouts, "ops past their deadline, cancelled")                                                              \
	X(orphans, "timed-out ops given up on before they completed; their buffers stay out of use")                   \
	X(late, "orphans the backend completed at last, their buffers released")                                       \
	X(mac_rejected, "gets of objects whose MAC did not verify, or that had none (mac_key_file; misses too)")

enum store_ctr {
#define X(n, h) SC_##n,
	HC_STORE_COUNTERS(X)
#undef X
		SC__COUNT
};

static const char *const ctr_names[] = {
#define X(n, h) "lib_" #n,
	HC_STORE_COUNTERS(X)
#undef X
};

struct hc_store {
	hc_pool *pool;
	struct hc__plugin pl;
	void *inst;
	uint8_t fp[32];
	uint64_t caps;       /* the instance's (ctl "caps"), else the table's */
	struct hc__mac *mac; /* mac_key_file's: objects are MAC'd and must be; else NULL */
	unsigned qd;
	uint8_t *hdrs; /* qd blocks of HC_OBJ_HEADER_BYTES */
	size_t env_len;
	int env_reg, hdr_reg;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t *free; /* free header blocks */
	unsigned nfree;
	/* The op that owns each block while in flight, and the block's use
	 * count: a completion names (use << 32 | block), so one the plugin
	 * should not have sent (a stale or made-up user_data) is dropped, not
	 * followed to freed memory. */
	struct op **owner;
	struct orphan **orphan; /* per block: an op given up on, not yet reaped */
	uint32_t *use;
	unsigned timeout_ms; /* an op's deadline after its submit */
	unsigned retries;    /* transient failures retried this often per op */
	uint64_t stray;      /* completions dropped so */
	int inflight;        /* ops submitted and not yet reaped, all calls */
	int reaping;
	unsigned reap_failing; /* consecutive failed reaps (a broken plugin) */

	_Atomic uint64_t ctr[SC__COUNT];
	_Atomic uint64_t last_warn_s, quiet; /* corrupt-object warnings: one a second */
};

struct call;

/* What an op given up on still holds (see the notes at the top). */
struct orphan {
	uint32_t opcode;
	hc_page_t page; /* a put's pinned page, a get's reservation */
	void *bounce;
};

enum op_state { OP_IDLE, OP_PEND, OP_FLIGHT, OP_DONE, OP_DELAYED };

struct op {
	struct hc_be_op be;
	struct iovec iov[1 + HC_MAX_COMPONENTS];
	struct call *call;
	struct op *next; /* on call->done */
	unsigned item;   /* index into the caller's arrays */
	uint32_t block;
	int64_t result;
	int reread; /* a get read again into bounce */
	void *bounce;
	size_t bounce_len;
	struct hc__obj_layout lay;
	enum op_state state; /* FLIGHT and DONE change under st->mu */
	unsigned tries;      /* retries so far */
	int cancelled;
	uint64_t deadline_ns; /* FLIGHT: cancel, then orphan, after this */
	uint64_t retry_at_ns; /* DELAYED: submit again from then on */
};

struct call {
	hc_store *st;
	uint32_t opcode;
	unsigned n, next, finished, inflight;
	const hc_page_t *pages;
	const hc_key_t *keys;
	int *status;
	int count;        /* the call's return: stored, hits, present, deleted */
	struct op *ops;   /* min(n, qd) records */
	struct op **idle; /* records not in use */
	unsigned nidle;
	struct op **pend; /* prepared, not yet accepted by submit */
	unsigned npend;
	struct hc_be_op *subq; /* contiguous copies of pend for submit */
	struct op *done;       /* completed, under st->mu */
	unsigned ndelayed;     /* waiting to be retried */
};

/* For messages, by enum hc_be_opcode. */
static const char *const op_name[] = { "", "get", "put", "exists", "delete" };

static inline void count(hc_store *st, enum store_ctr c, uint64_t n)
{
	atomic_fetch_add_explicit(&st->ctr[c], n, memory_order_relaxed);
}

static inline uint8_t *block(hc_store *st, uint32_t b)
{
	return st->hdrs + (size_t)b * HC_OBJ_HEADER_BYTES;
}

static void name_of(const hc_store *st, const uint8_t key[HC_KEY_BYTES], uint8_t name[HC_BE_NAME_BYTES])
{
	memcpy(name, st->fp, 32);
	memcpy(name + 32, key, 32);
}

static void page_key(const hc_pool *p, uint32_t id, uint8_t key[HC_KEY_BYTES])
{
	for (int k = 0; k < 4; k++) {
		uint64_t v = atomic_load_explicit(&p->pages[id].key[k], memory_order_relaxed);
		memcpy(key + 8 * k, &v, 8);
	}
}

static void warn_corrupt(hc_store *st, const uint8_t key[HC_KEY_BYTES], const char *why, const char *ctr)
{
	struct timespec ts;
	uint64_t last, quiet;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	last = atomic_load(&st->last_warn_s);
	if ((uint64_t)ts.tv_sec == last ||
	    !atomic_compare_exchange_strong(&st->last_warn_s, &last, (uint64_t)ts.tv_sec)) {
		atomic_fetch_add(&st->quiet, 1);
		return;
	}
	quiet = atomic_exchange(&st->quiet, 0);
	hc__log(HC_LOG_WARN,
		"backend %s: object %02x%02x%02x%02x...: %s: treated as a miss (%llu more not logged; see %s)",
		st->pl.name, key[0], key[1], key[2], key[3], why, (unsigned long long)quiet, ctr);
}

/* ---- preparing ops (the calling thread; no lock) */

/* Point an op at page id: its key, its layout, header block then payload runs. */
static int aim(struct call *c, struct op *o, uint32_t id)
{
	hc_store *st = c->st;
	hc_pool *p = st->pool;
	uint32_t presence;
	uint8_t key[HC_KEY_BYTES];
	const char *what = op_name[c->opcode];

	if (!(atomic_load_explicit(&p->pages[id].flags, memory_order_relaxed) & HC_PF_KEYED))
		return hc__err(EINVAL, "store %s: page %u has no key: L3 holds pages reserved by key (hc_reserve)",
			       what, id);
	presence = atomic_load_explicit(&p->pages[id].presence, memory_order_relaxed);
	if (hc__obj_layout(&p->g, presence, &o->lay) < 0)
		return hc__err(EINVAL, "store %s: page %u has presence 0x%x", what, id, presence);
	page_key(p, id, key);
	o->iov[0] = (struct iovec){ block(st, o->block), HC_OBJ_HEADER_BYTES };
	for (unsigned i = 0; i < o->lay.nrun; i++)
		o->iov[1 + i] = (struct iovec){ p->env + (size_t)id * p->g.envelope_bytes + o->lay.run[i].env_off,
						o->lay.run[i].len };
	o->be.iovcnt = 1 + o->lay.nrun;
	name_of(st, key, o->be.name);
	return 0;
}

static int prep_put(struct call *c, struct op *o)
{
	hc_pool *p = c->st->pool;
	hc_page_t pg = c->pages[o->item];
	uint32_t id = HC_PAGE_ID(pg);
	int r;

	r = hc_page_pin(p, pg); /* held until the op is reaped */
	if (r < 0)
		return r;
	r = aim(c, o, id);
	if (r < 0) {
		hc_page_unpin(p, pg);
		return r;
	}
	hc__obj_header_build(o->iov[0].iov_base, &p->g, c->st->fp, o->be.name + 32,
			     atomic_load_explicit(&p->pages[id].depth, memory_order_relaxed), &o->lay,
			     hc__obj_sum_iov(o->iov + 1, o->lay.nrun));
	if (c->st->mac && (r = hc__obj_header_seal(o->iov[0].iov_base, c->st->mac, o->iov + 1, o->lay.nrun)) < 0) {
		hc_page_unpin(p, pg);
		return hc__err(-r, "store put: page %u: libcrypto failed computing its MAC", id);
	}
	return 0;
}

static int prep_get(struct call *c, struct op *o)
{
	hc_pool *p = c->st->pool;
	int r = hc__check_reserved(p, c->pages[o->item], "store get");

	return r < 0 ? r : aim(c, o, HC_PAGE_ID(c->pages[o->item]));
}

static int prep(struct call *c, struct op *o)
{
	memset(&o->be, 0, sizeof(o->be));
	o->be.opcode = c->opcode;
	o->be.iov = o->iov;
	o->be.user_data = 0; /* set under st->mu when the op is handed over (submit_pending) */
	o->reread = 0;
	o->bounce = NULL;
	o->tries = 0;
	o->cancelled = 0;
	switch (c->opcode) {
	case HC_BE_OP_PUT:
		return prep_put(c, o);
	case HC_BE_OP_GET:
		return prep_get(c, o);
	default:
		name_of(c->st, c->keys[o->item], o->be.name);
		return 0;
	}
}

/* ---- finishing ops (the calling thread; no lock) */

/* A plugin's failure of one item, for hc_last_error (the statuses have them all). */
static int item_err(struct call *c, struct op *o)
{
	const uint8_t *k = o->be.name + 32;

	return hc__err((int)-o->result, "backend %s: %s of key %02x%02x%02x%02x... (item %u): %s", c->st->pl.name,
		       op_name[c->opcode], k[0], k[1], k[2], k[3], o->item, strerror((int)-o->result));
}

/* A get whose object holds more components than the page: read it whole,
 * check it, and copy the page's components out of it. */
static int reread_begin(struct call *c, struct op *o, int64_t len)
{
	size_t plen = (size_t)len - HC_OBJ_HEADER_BYTES;

	o->bounce_len = hc__obj_pad(plen);
	o->bounce = aligned_alloc(HC_ENVELOPE_ALIGN, o->bounce_len ? o->bounce_len : HC_ENVELOPE_ALIGN);
	if (!o->bounce)
		return -ENOMEM;
	o->iov[1] = (struct iovec){ o->bounce, o->bounce_len };
	o->be.iovcnt = 2;
	o->reread = 1;
	count(c->st, SC_rereads, 1);
	c->pend[c->npend++] = o;
	return 1;
}

static int finish_get(struct call *c, struct op *o)
{
	hc_store *st = c->st;
	hc_pool *p = st->pool;
	const uint8_t *key = o->be.name + 32;
	struct hc__obj_meta m;
	char why[160];
	int r;

	if (o->result == -ENOENT) {
		count(st, SC_misses, 1);
		return -ENOENT;
	}
	if (o->result < 0) {
		count(st, SC_get_errors, 1);
		return item_err(c, o);
	}
	if (o->result < (int64_t)HC_OBJ_HEADER_BYTES) {
		snprintf(why, sizeof(why), "%lld bytes, shorter than its header", (long long)o->result);
		goto corrupt;
	}
	r = hc__obj_header_check(o->iov[0].iov_base, &p->g, st->fp, key, &m, why, sizeof(why));
	if (r == -EPROTO) { /* a good object of a newer format: a miss, not corruption */
		count(st, SC_misses, 1);
		warn_corrupt(st, key, why, "lib_misses");
		return -EPROTO;
	}
	if (r < 0)
		goto corrupt;
	if ((uint64_t)o->result != HC_OBJ_HEADER_BYTES + m.payload_bytes) {
		snprintf(why, sizeof(why), "%lld bytes, its header says %llu", (long long)o->result,
			 (unsigned long long)(HC_OBJ_HEADER_BYTES + m.payload_bytes));
		goto corrupt;
	}
	if (m.presence != o->lay.presence) {
		if (o->lay.presence & ~m.presence) {
			count(st, SC_misses, 1);
			return -ENOENT; /* a good object, without a component the page needs */
		}
		if (!o->reread) {
			r = reread_begin(c, o, o->result);
			if (r < 0) {
				count(st, SC_get_errors, 1);
				return hc__err(ENOMEM, "store get: no memory to read a %lld-byte object whole",
					       (long long)o->result);
			}
			return 1;
		}
	}
	if (o->reread) {
		uint8_t *env = p->env + (size_t)HC_PAGE_ID(c->pages[o->item]) * p->g.envelope_bytes;
		uint64_t src = 0;

		if (m.payload_bytes != o->bounce_len) {
			count(st, SC_misses, 1); /* replaced between the two reads: no reading it now */
			return -ENOENT;
		}
		if (hc__obj_sum_iov(o->iov + 1, 1) != m.sum) {
			snprintf(why, sizeof(why), "payload checksum mismatch");
			goto corrupt;
		}
		/* The object's payload runs, in component order: copy the page's. */
		for (unsigned ci = 0; ci < p->g.ncomp; ci++) {
			uint64_t len = hc__obj_pad(p->g.comps[ci].bytes);
			if (!(m.presence & (UINT32_C(1) << ci)))
				continue;
			if (o->lay.presence & (UINT32_C(1) << ci))
				memcpy(env + p->g.comps[ci].offset, (uint8_t *)o->bounce + src, len);
			src += len;
		}
	} else if (hc__obj_sum_iov(o->iov + 1, o->lay.nrun) != m.sum) {
		snprintf(why, sizeof(why), "payload checksum mismatch");
		goto corrupt;
	}
	/* The checksums hold, so only a forger (or another key) fails here. */
	if (st->mac && (r = hc__obj_mac_check(o->iov[0].iov_base, st->mac, o->iov + 1, o->reread ? 1 : o->lay.nrun, why,
					      sizeof(why))) < 0) {
		if (r != -EKEYREJECTED) {
			count(st, SC_get_errors, 1);
			return hc__err(-r, "backend %s: get of key %02x%02x%02x%02x...: %s", st->pl.name, key[0],
				       key[1], key[2], key[3], why);
		}
		count(st, SC_mac_rejected, 1);
		warn_corrupt(st, key, why, "lib_mac_rejected");
		return -EKEYREJECTED;
	}
	count(st, SC_hits, 1);
	count(st, SC_get_bytes, (uint64_t)o->result);
	return 0;
corrupt:
	count(st, SC_corrupt, 1);
	warn_corrupt(st, key, why, "lib_corrupt");
	return -EBADMSG;
}

/* A result the ABI does not allow for this opcode: a plugin bug, made an
 * error so that it can never pass for a success or a hit. */
static int bad_result(struct call *c, struct op *o)
{
	return hc__err(EPROTO, "backend %s: %s completed with result %lld, which the ABI does not allow: a plugin bug",
		       c->st->pl.name, op_name[c->opcode], (long long)o->result);
}

/* Settles one completed op: 1 if it went back in flight (a reread), else 0
 * with the item's status in *status. */
static int finish(struct call *c, struct op *o, int *status)
{
	hc_store *st = c->st;
	int r;

	switch (c->opcode) {
	case HC_BE_OP_PUT:
		hc_page_unpin(st->pool, c->pages[o->item]);
		if (o->result != 0) {
			count(st, SC_put_errors, 1);
			*status = o->result < 0 ? item_err(c, o) : bad_result(c, o);
			return 0;
		}
		count(st, SC_puts, 1);
		count(st, SC_put_bytes, HC_OBJ_HEADER_BYTES + o->lay.payload_bytes);
		c->count++;
		*status = 0;
		return 0;
	case HC_BE_OP_GET:
		r = finish_get(c, o);
		if (r == 1)
			return 1;
		free(o->bounce);
		o->bounce = NULL;
		c->count += r == 0;
		*status = r;
		return 0;
	case HC_BE_OP_EXISTS:
		if (o->result < 0)
			*status = item_err(c, o);
		else if (o->result > 1)
			*status = bad_result(c, o);
		else
			*status = (int)o->result;
		c->count += *status == 1;
		return 0;
	default:
		if (o->result == 0) {
			count(st, SC_deletes, 1);
			c->count++;
			*status = 0;
		} else {
			*status = o->result == -ENOENT ? -ENOENT : o->result < 0 ? item_err(c, o) : bad_result(c, o);
		}
		return 0;
	}
}

/* ---- the loop of one call */

static void give_back(hc_store *st, struct call *c, struct op *o)
{
	/* under st->mu */
	st->free[st->nfree++] = o->block;
	o->state = OP_IDLE;
	c->idle[c->nidle++] = o;
}

static void complete_item(struct call *c, struct op *o, int status)
{
	if (c->status)
		c->status[o->item] = status;
	c->finished++;
}

/* The plugin let go of an orphan at last: release what it kept; under st->mu. */
static void settle_orphan(hc_store *st, uint32_t b)
{
	struct orphan * or = st->orphan[b];

	if (or->opcode == HC_BE_OP_PUT)
		hc_page_unpin(st->pool, or->page);
	else if (or->opcode == HC_BE_OP_GET)
		hc_page_abort(st->pool, & or->page, 1); /* its bytes are no one's */
	free(or->bounce);
	free(or);
	st->orphan[b] = NULL;
	st->free[st->nfree++] = b;
	st->inflight--;
	count(st, SC_late, 1);
}

/* Hand the reaped completions to their calls; under st->mu. */
static void dispatch(hc_store *st, struct hc_be_cqe *cqe, int k)
{
	for (int i = 0; i < k; i++) {
		uint32_t b = (uint32_t)cqe[i].user_data, use = (uint32_t)(cqe[i].user_data >> 32);
		struct op *o;

		if (b < st->qd && !st->owner[b] && st->orphan[b] && st->use[b] == use) {
			settle_orphan(st, b);
			continue;
		}
		if (b >= st->qd || !(o = st->owner[b]) || st->use[b] != use) {
			if (!st->stray++)
				hc__log(HC_LOG_ERR,
					"backend %s: a completion for no op in flight (user_data 0x%llx): a plugin bug; dropped",
					st->pl.name, (unsigned long long)cqe[i].user_data);
			continue;
		}
		st->owner[b] = NULL;
		st->inflight--;
		/* errnos are -1..-4095; anything below is a plugin bug, and must
		 * not truncate to a status that means something else */
		o->result = cqe[i].result < -4095 ? -EIO : cqe[i].result;
		o->state = OP_DONE;
		o->next = o->call->done;
		o->call->done = o;
	}
}

static void submit_pending(struct call *c)
{
	hc_store *st = c->st;
	int r;

	if (!c->npend)
		return;
	pthread_mutex_lock(&st->mu);
	for (unsigned i = 0; i < c->npend; i++) {
		struct op *o = c->pend[i];
		o->be.user_data = (uint64_t)++st->use[o->block] << 32 | o->block;
		o->deadline_ns = hc__mono_ns() + (uint64_t)st->timeout_ms * 1000000u;
		o->state = OP_FLIGHT;
		st->owner[o->block] = o;
		c->subq[i] = o->be;
	}
	/* Counted before submit, so that a caller whose submit meets -EAGAIN
	 * sees the ops another caller is handing over right now. */
	st->inflight += (int)c->npend;
	pthread_mutex_unlock(&st->mu);
	r = st->pl.be->submit(st->inst, c->subq, c->npend);
	if (r > (int)c->npend || r == 0)
		r = -EPROTO; /* the plugin broke its contract: nothing is known started */
	pthread_mutex_lock(&st->mu);
	st->inflight -= (int)c->npend - (r > 0 ? r : 0);
	if (r == -EAGAIN && st->inflight > 0) {
		for (unsigned i = 0; i < c->npend; i++) {
			st->owner[c->pend[i]->block] = NULL;
			c->pend[i]->state = OP_PEND;
		}
		pthread_mutex_unlock(&st->mu);
		return; /* retried once something is reaped */
	}
	if (r < 0) {
		/* -EAGAIN with nothing in flight would never clear: a plugin bug */
		hc__log(HC_LOG_WARN, "backend %s: submit: %s%s", st->pl.name, strerror(-r),
			r == -EAGAIN ? " with nothing in flight" : "");
		for (unsigned i = 0; i < c->npend; i++) {
			struct op *o = c->pend[i];
			st->owner[o->block] = NULL; /* a late completion of it is dropped */
			o->state = OP_PEND;
			if (c->opcode == HC_BE_OP_PUT) {
				hc_page_unpin(st->pool, c->pages[o->item]);
				count(st, SC_put_errors, 1);
			} else if (c->opcode == HC_BE_OP_GET) {
				count(st, SC_get_errors, 1);
			}
			free(o->bounce);
			o->bounce = NULL;
			complete_item(c, o, r);
			give_back(st, c, o);
		}
		pthread_cond_broadcast(&st->cv);
		pthread_mutex_unlock(&st->mu);
		c->npend = 0;
		return;
	}
	for (unsigned i = (unsigned)r; i < c->npend; i++) {
		st->owner[c->pend[i]->block] = NULL; /* not accepted: resubmitted later */
		c->pend[i]->state = OP_PEND;
	}
	pthread_mutex_unlock(&st->mu);
	c->inflight += (unsigned)r;
	memmove(c->pend, c->pend + r, (c->npend - (unsigned)r) * sizeof(c->pend[0]));
	c->npend -= (unsigned)r;
}

static int transient(int64_t r)
{
	switch (r) {
	case -EAGAIN:
	case -EBUSY:
	case -ETIMEDOUT:
	case -EINTR:
	case -ECONNRESET:
	case -ECONNREFUSED:
	case -ECONNABORTED:
	case -ENOTCONN:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -EPIPE:
		return 1;
	default:
		return 0;
	}
}

/* Give up on an op in flight (under st->mu): its item fails, and what it
 * holds stays out of use until the plugin completes it (settle_orphan). */
static void orphan(struct call *c, struct op *o)
{
	hc_store *st = c->st;
	struct orphan * or = malloc(sizeof(* or));
	const uint8_t *k = o->be.name + 32;

	if (! or)
		return; /* keep waiting for it instead; try again next round */
	* or = (struct orphan){ c->opcode, c->pages ? c->pages[o->item] : 0, o->bounce };
	o->bounce = NULL;
	st->owner[o->block] = NULL;
	st->orphan[o->block] = or ;
	c->inflight--;
	count(st, SC_orphans, 1);
	if (c->opcode == HC_BE_OP_GET)
		count(st, SC_get_errors, 1);
	else if (c->opcode == HC_BE_OP_PUT)
		count(st, SC_put_errors, 1);
	complete_item(
		c, o,
		hc__err(ETIME,
			"backend %s: %s of key %02x%02x%02x%02x... (item %u) not done %u ms after its submit, nor after a cancel: given up; its buffer stays out of use until the backend completes it",
			st->pl.name, op_name[c->opcode], k[0], k[1], k[2], k[3], o->item, st->timeout_ms));
	o->state = OP_IDLE;
	c->idle[c->nidle++] = o;
}

/* Cancel ops past their deadline, and give up on those cancelled a grace
 * period ago (under st->mu).  Returns the next deadline or retry time. */
static uint64_t watch(struct call *c, unsigned cap)
{
	hc_store *st = c->st;
	uint64_t now = hc__mono_ns(), next = UINT64_MAX;
	uint64_t grace = (uint64_t)(st->timeout_ms / 4 > 100 ? st->timeout_ms / 4 : 100) * 1000000u;

	for (unsigned i = 0; i < cap; i++) {
		struct op *o = &c->ops[i];
		if (o->state == OP_DELAYED && o->retry_at_ns < next)
			next = o->retry_at_ns;
		if (o->state != OP_FLIGHT || st->owner[o->block] != o)
			continue;
		if (now >= o->deadline_ns) {
			if (!o->cancelled) {
				o->cancelled = 1;
				o->deadline_ns = now + grace;
				count(st, SC_timeouts, 1);
				if (st->pl.be->cancel)
					st->pl.be->cancel(st->inst, o->be.user_data);
			} else {
				orphan(c, o);
				continue;
			}
		}
		if (o->deadline_ns < next)
			next = o->deadline_ns;
	}
	return next;
}

static int wait_ms_until(uint64_t t)
{
	uint64_t now = hc__mono_ns();

	if (t == UINT64_MAX || t <= now)
		return t == UINT64_MAX ? REAP_WAIT_MS : 1;
	t = (t - now) / 1000000u + 1;
	return t < REAP_WAIT_MS ? (int)t : REAP_WAIT_MS;
}

static void run(struct call *c, unsigned cap)
{
	hc_store *st = c->st;
	struct hc_be_cqe cqe[REAP_MAX];
	struct op *got[QD_MAX < 64 ? QD_MAX : 64];
	int wait_ms;
	/* A synchronous plugin does an op's copy inside submit: one op at a
	 * time, so the page it copies is still in cache when it is checksummed
	 * (before a put's copy, after a get's).  Other threads keep the
	 * plugin busy meanwhile.  An asynchronous one gets batches. */
	unsigned batch = (st->caps & HC_BE_CAP_ASYNC) ? sizeof(got) / sizeof(got[0]) : 1;

	while (c->finished < c->n) {
		struct op *list;
		unsigned ngot = 0;

		/* 1. take what was reaped for us, what is due for a retry, and
		 * new blocks for new items */
		pthread_mutex_lock(&st->mu);
		list = c->done;
		c->done = NULL;
		if (c->ndelayed) {
			uint64_t now = hc__mono_ns();
			for (unsigned i = 0; i < cap; i++)
				if (c->ops[i].state == OP_DELAYED && c->ops[i].retry_at_ns <= now) {
					c->ops[i].state = OP_PEND;
					c->pend[c->npend++] = &c->ops[i];
					c->ndelayed--;
				}
		}
		while (c->next < c->n && c->nidle && st->nfree && ngot < batch) {
			struct op *o = c->idle[--c->nidle];
			o->block = st->free[--st->nfree];
			o->item = c->next++;
			got[ngot++] = o;
		}
		pthread_mutex_unlock(&st->mu);

		/* 2. finish the completed ones, outside the lock (checksums) */
		for (struct op *o = list, *nx; o; o = nx) {
			int s;
			nx = o->next;
			c->inflight--;
			if (o->cancelled && o->result == -ECANCELED)
				o->result = -ETIMEDOUT; /* we cancelled it: for want of time */
			if (transient(o->result) && !o->cancelled && o->tries < st->retries) {
				unsigned ms = BACKOFF_MS << (o->tries < 16 ? o->tries : 16);
				o->tries++;
				o->retry_at_ns = hc__mono_ns() +
						 (uint64_t)(ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS) * 1000000u;
				o->state = OP_DELAYED; /* it keeps its block, and a put its pin */
				c->ndelayed++;
				count(st, SC_retries, 1);
				continue;
			}
			if (finish(c, o, &s))
				continue; /* a reread: in flight again */
			complete_item(c, o, s);
			pthread_mutex_lock(&st->mu);
			give_back(st, c, o);
			pthread_cond_broadcast(&st->cv);
			pthread_mutex_unlock(&st->mu);
		}

		/* 3. prepare the new ones and submit */
		for (unsigned i = 0; i < ngot; i++) {
			int r = prep(c, got[i]);
			if (r == 0) {
				c->pend[c->npend++] = got[i];
				continue;
			}
			if (c->opcode == HC_BE_OP_PUT)
				count(st, SC_put_errors, 1);
			else if (c->opcode == HC_BE_OP_GET)
				count(st, SC_get_errors, 1);
			complete_item(c, got[i], r);
			pthread_mutex_lock(&st->mu);
			give_back(st, c, got[i]);
			pthread_cond_broadcast(&st->cv);
			pthread_mutex_unlock(&st->mu);
		}
		submit_pending(c);
		if (c->finished == c->n)
			break;

		/* 4. wait: reap if ours are in flight and nobody else is reaping;
		 * no longer than the next deadline or retry */
		pthread_mutex_lock(&st->mu);
		wait_ms = wait_ms_until(watch(c, cap));
		if (c->finished == c->n) {
			pthread_mutex_unlock(&st->mu);
			break; /* the last ones were given up on */
		}
		if (!c->done && (c->inflight || c->npend || c->ndelayed || !st->nfree || !c->nidle)) {
			if (c->inflight && !st->reaping) {
				int k;
				st->reaping = 1;
				pthread_mutex_unlock(&st->mu);
				k = st->pl.be->reap(st->inst, cqe, REAP_MAX, wait_ms);
				pthread_mutex_lock(&st->mu);
				if (k > 0) {
					dispatch(st, cqe, k);
				} else if (k < 0) {
					/* Ops are still the plugin's: nothing can return before
					 * they are reaped, so keep asking, slowly, and say so once. */
					if (!st->reap_failing++)
						hc__log(HC_LOG_WARN, "backend %s: reap: %s (retrying)", st->pl.name,
							strerror(-k));
					pthread_mutex_unlock(&st->mu);
					usleep(1000);
					pthread_mutex_lock(&st->mu);
				}
				if (k >= 0)
					st->reap_failing = 0;
				st->reaping = 0;
				pthread_cond_broadcast(&st->cv);
			} else {
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				/* a bound, in case a wakeup is lost to a plugin bug */
				ts.tv_nsec += (wait_ms < 50 ? wait_ms : 50) * 1000000L;
				if (ts.tv_nsec >= 1000000000L) {
					ts.tv_sec++;
					ts.tv_nsec -= 1000000000L;
				}
				pthread_cond_timedwait(&st->cv, &st->mu, &ts);
			}
		}
		pthread_mutex_unlock(&st->mu);
	}
}

static int call(hc_store *st, uint32_t opcode, const hc_page_t *pages, const hc_key_t *keys, unsigned n, int *status)
{
	struct call c = { .st = st, .opcode = opcode, .n = n, .pages = pages, .keys = keys, .status = status };
	unsigned cap;
	int r;

	if (!st)
		return hc__err(EINVAL, "store %s: the store is NULL", op_name[opcode]);
	if (n == 0)
		return 0;
	if ((opcode == HC_BE_OP_PUT || opcode == HC_BE_OP_GET) && (r = hc__need_slot(st->pool, op_name[opcode])) < 0)
		return r;
	if ((opcode == HC_BE_OP_PUT || opcode == HC_BE_OP_GET) ? !pages : !keys)
		return hc__err(EINVAL, "store %s: %s is NULL with n = %u", op_name[opcode],
			       opcode <= HC_BE_OP_PUT ? "pages" : "keys", n);
	if (opcode == HC_BE_OP_GET)
		count(st, SC_gets, n);
	else if (opcode == HC_BE_OP_EXISTS)
		count(st, SC_exists, n);
	cap = n < st->qd ? n : st->qd;
	c.ops = calloc(cap, sizeof(*c.ops));
	c.idle = calloc(cap, sizeof(*c.idle));
	c.pend = calloc(cap, sizeof(*c.pend));
	c.subq = calloc(cap, sizeof(*c.subq));
	if (!c.ops || !c.idle || !c.pend || !c.subq) {
		free(c.ops);
		free(c.idle);
		free(c.pend);
		free(c.subq);
		return hc__err(ENOMEM, "store %s: no memory for %u ops", op_name[opcode], cap);
	}
	for (unsigned i = 0; i < cap; i++) {
		c.ops[i].call = &c;
		c.idle[c.nidle++] = &c.ops[i];
	}
	run(&c, cap);
	free(c.ops);
	free(c.idle);
	free(c.pend);
	free(c.subq);
	return c.count;
}

int hc_store_put(hc_store *st, const hc_page_t *pages, unsigned n, int *status)
{
	return call(st, HC_BE_OP_PUT, pages, NULL, n, status);
}

int hc_store_get(hc_store *st, const hc_page_t *pages, unsigned n, int *status)
{
	return call(st, HC_BE_OP_GET, pages, NULL, n, status);
}

int hc_store_exists(hc_store *st, const hc_key_t *keys, unsigned n, int *status)
{
	return call(st, HC_BE_OP_EXISTS, NULL, keys, n, status);
}

int hc_store_delete(hc_store *st, const hc_key_t *keys, unsigned n, int *status)
{
	return call(st, HC_BE_OP_DELETE, NULL, keys, n, status);
}

/* ---- open, close, info, stats, ctl */

int hc_store_open(hc_pool *pool, const char *spec, const struct hc_store_opts *given, hc_store **out)
{
	struct hc_store_opts ob, *opts = NULL;
	struct hc__plugin_spec *sp = NULL;
	hc_store *st = NULL;
	int r;

	if (!out)
		return hc__err(EINVAL, "store open: out is NULL");
	*out = NULL;
	if (!pool)
		return hc__err(EINVAL, "store open: pool is NULL");
	if (pool->readonly || pool->slot < 0)
		return hc__err(EPERM, "store open: the pool is attached %s: attach it as a rank (no HC_ATTACH_ADMIN)",
			       pool->readonly ? "read-only" : "for administration");
	if (given) {
		if ((r = HC__ABI_IN(&ob, given, "hc_store_open", hc_store_opts)) < 0)
			return r;
		opts = &ob;
	}
	if (opts && opts->queue_depth > QD_MAX)
		return hc__err(EINVAL, "store open: queue_depth %u is more than %u", opts->queue_depth, QD_MAX);
	sp = malloc(sizeof(*sp));
	st = calloc(1, sizeof(*st));
	if (!sp || !st) {
		r = hc__err(ENOMEM, "store open: no memory");
		goto fail;
	}
	r = hc__plugin_spec_parse(spec, sp);
	if (r < 0)
		goto fail;
	if (opts && opts->mac_key_file && (r = hc__mac_load(opts->mac_key_file, &st->mac)) < 0)
		goto fail;
	r = hc__plugin_load(sp->name, opts ? opts->backend_dir : NULL, &st->pl);
	if (r < 0)
		goto fail;
	st->pool = pool;
	memcpy(st->fp, pool->info.fingerprint, 32);
	st->qd = opts && opts->queue_depth ? opts->queue_depth : QD_DEFAULT;
	st->timeout_ms = opts && opts->timeout_ms ? opts->timeout_ms : TIMEOUT_DEFAULT_MS;
	st->retries = !opts || opts->retries == 0 ? RETRIES_DEFAULT : opts->retries < 0 ? 0 : (unsigned)opts->retries;
	st->hdrs = aligned_alloc(HC_OBJ_HEADER_BYTES, (size_t)st->qd * HC_OBJ_HEADER_BYTES);
	st->free = calloc(st->qd, sizeof(*st->free));
	st->owner = calloc(st->qd, sizeof(*st->owner));
	st->orphan = calloc(st->qd, sizeof(*st->orphan));
	st->use = calloc(st->qd, sizeof(*st->use));
	if (!st->hdrs || !st->free || !st->owner || !st->orphan || !st->use) {
		r = hc__err(ENOMEM, "store open: no memory for %u header blocks", st->qd);
		goto fail;
	}
	memset(st->hdrs, 0, (size_t)st->qd * HC_OBJ_HEADER_BYTES);
	for (unsigned i = 0; i < st->qd; i++)
		st->free[st->nfree++] = st->qd - 1 - i;
	pthread_mutex_init(&st->mu, NULL);
	pthread_cond_init(&st->cv, NULL);
	r = hc__plugin_open(&st->pl, sp, &st->inst);
	if (r < 0)
		goto fail_sync;
	st->env_len = (size_t)pool->g.npages * pool->g.envelope_bytes;
	r = st->pl.be->reg_mem(st->inst, pool->env, st->env_len);
	if (r < 0) {
		r = hc__err(-r, "backend %s: registering the pool's %zu envelope bytes: %s", st->pl.name, st->env_len,
			    strerror(-r));
		goto fail_close;
	}
	st->env_reg = 1;
	r = st->pl.be->reg_mem(st->inst, st->hdrs, (size_t)st->qd * HC_OBJ_HEADER_BYTES);
	if (r < 0) {
		r = hc__err(-r, "backend %s: registering the header blocks: %s", st->pl.name, strerror(-r));
		goto fail_close;
	}
	st->hdr_reg = 1;
	st->caps = st->pl.be->caps;
	{
		char buf[32], *end;
		unsigned long long v;
		if (st->pl.be->ctl(st->inst, "caps", NULL, buf, sizeof(buf)) > 0) {
			v = strtoull(buf, &end, 16);
			if (end != buf && *end == '\0')
				st->caps = v; /* this instance's, as its options made it */
		}
	}
	free(sp);
	*out = st;
	return 0;
fail_close:
	if (st->env_reg)
		st->pl.be->unreg_mem(st->inst, pool->env);
	st->pl.be->close(st->inst);
fail_sync:
	pthread_cond_destroy(&st->cv);
	pthread_mutex_destroy(&st->mu);
fail:
	if (st) {
		free(st->hdrs);
		free(st->free);
		free(st->owner);
		free(st->orphan);
		free(st->use);
		hc__mac_free(st->mac);
	}
	free(st);
	free(sp);
	return r;
}

int hc_backend_check(const char *spec, const char *backend_dir)
{
	struct hc__plugin_spec *sp;
	struct hc__plugin pl;
	void *inst = NULL;
	int r;

	if (!spec)
		return hc__err(EINVAL, "backend check: spec is NULL");
	if (!(sp = malloc(sizeof(*sp))))
		return hc__err(ENOMEM, "backend check: no memory");
	if ((r = hc__plugin_spec_parse(spec, sp)) == 0 && (r = hc__plugin_load(sp->name, backend_dir, &pl)) == 0 &&
	    (r = hc__plugin_open(&pl, sp, &inst)) == 0)
		pl.be->close(inst); /* the plugin stays loaded, as every loaded plugin does */
	free(sp);
	return r;
}

/* Reap what is there without waiting, if no call is reaping: orphans get
 * settled even while no call runs.  The service calls it now and then. */
void hc__store_poll(hc_store *st)
{
	struct hc_be_cqe cqe[REAP_MAX];
	int k;

	pthread_mutex_lock(&st->mu);
	if (st->inflight <= 0 || st->reaping) {
		pthread_mutex_unlock(&st->mu);
		return;
	}
	st->reaping = 1;
	pthread_mutex_unlock(&st->mu);
	k = st->pl.be->reap(st->inst, cqe, REAP_MAX, 0);
	pthread_mutex_lock(&st->mu);
	if (k > 0)
		dispatch(st, cqe, k);
	st->reaping = 0;
	pthread_cond_broadcast(&st->cv);
	pthread_mutex_unlock(&st->mu);
}

unsigned hc__store_orphans(hc_store *st)
{
	unsigned n = 0;

	pthread_mutex_lock(&st->mu);
	for (unsigned b = 0; b < st->qd; b++)
		n += st->orphan[b] != NULL;
	pthread_mutex_unlock(&st->mu);
	return n;
}

int hc_store_close(hc_store *st)
{
	unsigned left;

	if (!st)
		return 0;
	/* Orphans: ask again, and give the plugin a moment.  One that never
	 * lets go may still write into what it holds, so then the plugin is
	 * left open (and its memory registered) rather than closed under it. */
	pthread_mutex_lock(&st->mu);
	for (unsigned b = 0; b < st->qd; b++)
		if (st->orphan[b] && st->pl.be->cancel)
			st->pl.be->cancel(st->inst, (uint64_t)st->use[b] << 32 | b);
	pthread_mutex_unlock(&st->mu);
	for (int i = 0; i < 100 && (left = hc__store_orphans(st)) > 0; i++) {
		hc__store_poll(st);
		usleep(10000);
	}
	if ((left = hc__store_orphans(st)) > 0) {
		hc__log(HC_LOG_ERR,
			"backend %s: %u ops never completed, even cancelled: the plugin is left open, its memory registered, and their pages held",
			st->pl.name, left);
		return hc__err(EBUSY, "store close: backend %s still holds %u ops", st->pl.name, left);
	}
	if (st->hdr_reg)
		st->pl.be->unreg_mem(st->inst, st->hdrs);
	if (st->env_reg)
		st->pl.be->unreg_mem(st->inst, st->pool->env);
	st->pl.be->close(st->inst);
	pthread_cond_destroy(&st->cv);
	pthread_mutex_destroy(&st->mu);
	free(st->hdrs);
	free(st->free);
	free(st->owner);
	free(st->orphan);
	free(st->use);
	hc__mac_free(st->mac);
	free(st);
	return 0;
}

int hc_store_info(const hc_store *st, struct hc_store_info *info, size_t size)
{
	struct hc_store_info ob, *out = &ob;

	if (!st || !info)
		return hc__err(EINVAL, "store info: %s is NULL", st ? "out" : "store");
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", st->pl.name);
	snprintf(out->path, sizeof(out->path), "%s", st->pl.path);
	out->description = st->pl.be->description ? st->pl.be->description : "";
	out->caps = st->caps;
	out->queue_depth = st->qd;
	return HC__ABI_OUT(info, size, out, "hc_store_info", hc_store_info);
}

int hc_store_stats(hc_store *st, void (*emit)(void *arg, const char *name, uint64_t value), void *arg)
{
	int r;

	if (!st || !emit)
		return hc__err(EINVAL, "store stats: %s is NULL", st ? "emit" : "store");
	for (unsigned i = 0; i < SC__COUNT; i++)
		emit(arg, ctr_names[i], atomic_load_explicit(&st->ctr[i], memory_order_relaxed));
	r = st->pl.be->stats(st->inst, emit, arg);
	if (r < 0)
		return hc__err(-r, "backend %s: stats: %s", st->pl.name, strerror(-r));
	return 0;
}

int hc_store_ctl(hc_store *st, const char *key, const char *value, char *out, size_t outlen)
{
	int r;

	if (!st || !key)
		return hc__err(EINVAL, "store ctl: %s is NULL", st ? "key" : "store");
	if (!value && (!out || !outlen))
		return hc__err(EINVAL, "store ctl %s: reading needs an out buffer", key);
	r = st->pl.be->ctl(st->inst, key, value, out, outlen);
	if (r == -ENOENT)
		return hc__err(ENOENT, "backend %s: no option '%s'", st->pl.name, key);
	if (r < 0)
		return hc__err(-r, "backend %s: %s '%s'%s%s: %s", st->pl.name, value ? "setting" : "reading", key,
			       value ? " to " : "", value ? value : "", strerror(-r));
	return r;
}

void hc__store_plugin(hc_store *st, const struct hc_backend **be, void **inst)
{
	*be = st->pl.be;
	*inst = st->inst;
}
