/* SPDX-License-Identifier: Apache-2.0 */
/*
 * batch.c - a batch of ops of one opcode on one worker's handle.
 *
 * EXISTS and GET are one multi-get each: libmemcached writes every key to
 * its server, then reads the answers as they come, so the servers of a
 * batch work at once.  A GET asks for the manifest and, behind it, the
 * chunks its buffers can hold; one server answers a connection's requests
 * in order, so an object's manifest arrives before its chunks, and a chunk
 * is copied only once the manifest says it belongs (right tag, right
 * length, inside the object): nothing lands past the object's end, and a
 * missing manifest copies nothing.  Chunks are placed by the manifest's
 * chunk size: an object a node with a smaller chunk_size= wrote has the
 * chunks past those asked fetched in a second round.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "mc.h"

/* ---- key index: which request a fetched key answers */

struct kidx {
	uint32_t *slot; /* request index + 1, or 0 */
	uint32_t mask;
};

static int kidx_build(struct kidx *t, struct hc_mc_worker *w, unsigned n)
{
	uint32_t size = 16;

	while (size < 2 * n)
		size *= 2;
	if (!(t->slot = calloc(size, sizeof(*t->slot))))
		return -ENOMEM;
	t->mask = size - 1;
	for (unsigned i = 0; i < n; i++) {
		uint32_t h = (uint32_t)XXH3_64bits(w->keyp[i], w->keylen[i]) & t->mask;
		while (t->slot[h])
			h = (h + 1) & t->mask;
		t->slot[h] = i + 1;
	}
	return 0;
}

static int kidx_find(const struct kidx *t, struct hc_mc_worker *w, const char *key, size_t len)
{
	uint32_t h = (uint32_t)XXH3_64bits(key, len) & t->mask;

	for (; t->slot[h]; h = (h + 1) & t->mask) {
		uint32_t i = t->slot[h] - 1;
		if (w->keylen[i] == len && !memcmp(w->keyp[i], key, len))
			return (int)i;
	}
	return -1;
}

/* Set request k to the key of name (chunk -1: the manifest). */
static void key_set(struct hc_mc_worker *w, unsigned k, const uint8_t *name, int chunk)
{
	w->keylen[k] = hc__mc_key(w->be, name, chunk, w->keys[k]);
	w->keyp[k] = w->keys[k];
}

/*
 * Multi-get keys[0..n): on() for each item found, in the order the servers
 * answer.  Returns 0, or -ENOMEM.  A server that fails is counted and
 * logged; its items are simply not found (a miss, as for an ejected one).
 *
 * libmemcached's codes need care here: mget's own is that of its last
 * connect, not of the batch; a fetch that meets a failed server returns
 * NULL with the error, or with NOTFOUND when nothing was fetched before it;
 * fetching again goes on with the others.  So NULLs are asked again (one
 * more than there are servers) until END, and answers a failure left
 * unread are dropped with the connections, not left for the next request.
 */
typedef void (*found_fn)(void *ctx, unsigned k, const char *val, size_t len, uint32_t flags);

/* Answers a failure left unread must not meet the next request: drop the
 * connections that still owe some. */
static void drop_unread(struct hc_mc_worker *w)
{
	uint32_t n = memcached_server_count(w->mc);

	for (uint32_t i = 0; i < n; i++) {
		const memcached_instance_st *in = memcached_server_instance_by_position(w->mc, i);
		if (in && memcached_server_response_count(in)) {
			memcached_quit(w->mc);
			return;
		}
	}
}

/*
 * A multi-get timed out: which of its servers hung?  libmemcached does not
 * say (it resets the connection, and names a server only for failed
 * connects), so each server the batch asked is asked for its version on
 * its own handle: the hung one times out again, once, and is left alone
 * by every worker for eject_s.
 */
static void find_hung(struct hc_mc_worker *w, unsigned n)
{
	struct hc_mc *be = w->be;
	bool asked[HC_MC_MAX_SERVERS] = { false };

	for (unsigned k = 0; k < n; k++) {
		uint32_t s = memcached_generate_hash(w->mc, w->keyp[k], w->keylen[k]);
		if (s < HC_MC_MAX_SERVERS)
			asked[s] = true;
	}
	for (uint32_t s = 0; s < be->o.nservers; s++) {
		memcached_return_t rc;
		if (!asked[s] || hc__mc_hung(be, s))
			continue;
		pthread_mutex_lock(&be->stat_mu);
		{
			/* a get of a key nobody sets (a version would come from the cache) */
			char key[HC_MC_PREFIX_MAX + 8];
			size_t vlen, klen = (size_t)snprintf(key, sizeof(key), "%sprobe", be->o.prefix);
			uint32_t flags;
			free(memcached_get(be->solo[s], key, klen, &vlen, &flags, &rc));
		}
		if (rc == MEMCACHED_TIMEOUT)
			memcached_quit(be->solo[s]);
		pthread_mutex_unlock(&be->stat_mu);
		if (rc == MEMCACHED_TIMEOUT)
			hc__mc_hang(be, w->mc, s);
	}
}

static int mget(struct hc_mc_worker *w, unsigned n, const char *what, found_fn on, void *ctx)
{
	struct hc_mc *be = w->be;
	struct kidx t;
	memcached_return_t rc;
	memcached_result_st *r;
	unsigned nulls = 0;
	bool timed_out = false;
	int ret;

	if (!n)
		return 0;
	if ((ret = kidx_build(&t, w, n)) < 0)
		return ret;
	HC_MC_COUNT(be, round_trips, 1);
	rc = memcached_mget(w->mc, w->keyp, w->keylen, n);
	if (rc != MEMCACHED_SUCCESS)
		hc__mc_server_failed(be, w->mc, rc, what);
	timed_out = rc == MEMCACHED_TIMEOUT;
	for (;;) {
		int k;
		if (!(r = memcached_fetch_result(w->mc, &w->result, &rc))) {
			if (rc == MEMCACHED_END)
				break;
			if (rc != MEMCACHED_NOTFOUND)
				hc__mc_server_failed(be, w->mc, rc, what);
			timed_out |= rc == MEMCACHED_TIMEOUT;
			if (++nulls > be->o.nservers)
				break;
			continue;
		}
		nulls = 0;
		k = kidx_find(&t, w, memcached_result_key_value(r), memcached_result_key_length(r));
		if (k < 0)
			continue; /* not ours: a server bug; nothing is taken from it */
		HC_MC_COUNT(be, items_read, 1);
		on(ctx, (unsigned)k, memcached_result_value(r), memcached_result_length(r), memcached_result_flags(r));
	}
	drop_unread(w);
	if (timed_out)
		find_hung(w, n);
	free(t.slot);
	return 0;
}

/* ---- EXISTS: the manifests */

struct ex_ctx {
	struct hc_mc_job **jobs;
	unsigned *job; /* request k asks for jobs[job[k]] */
};

static void ex_found(void *ctx, unsigned k, const char *val, size_t len, uint32_t flags)
{
	struct ex_ctx *c = ctx;
	struct hc_mc_job *j = c->jobs[c->job[k]];
	struct hc_mc_manifest m;

	(void)flags;
	if (hc__mc_manifest_decode(val, len, j->name, &m) == 0)
		j->result = 1;
}

void hc__mc_run_exists(struct hc_mc_worker *w, struct hc_mc_job **jobs, unsigned n)
{
	struct hc_mc *be = w->be;
	struct ex_ctx c = { jobs, calloc(n, sizeof(unsigned)) };
	unsigned nk = 0;
	int ret;

	HC_MC_COUNT(be, exists, n);
	for (unsigned i = 0; i < n; i++)
		jobs[i]->result = 0;
	if (!c.job || (ret = hc__mc_keys_reserve(w, n)) < 0) {
		for (unsigned i = 0; i < n; i++)
			jobs[i]->result = -ENOMEM;
		free(c.job);
		return;
	}
	/* a failed or hung server's objects are absent, as a miss is */
	for (unsigned i = 0; i < n; i++)
		if (!hc__mc_skip(be, hc__mc_server_of(w, jobs[i]->name))) {
			c.job[nk] = i;
			key_set(w, nk++, jobs[i]->name, -1);
		}
	if ((ret = mget(w, nk, "multi-get of manifests", ex_found, &c)) == -ENOMEM)
		for (unsigned i = 0; i < n; i++)
			jobs[i]->result = ret;
	free(c.job);
}

/* ---- GET: manifests and chunks */

struct gj {
	struct hc_mc_job *job;   /* NULL once completed */
	struct hc_mc_job **slot; /* its place in the batch */
	uint64_t room;           /* bytes the buffers hold */
	uint32_t asked;          /* chunks 0..asked-1 requested in the first round */
	uint32_t need;           /* chunks wanted: set once the manifest is in */
	uint32_t good;           /* of those, copied and consistent */
	bool have_m, bad, hung;  /* hung: its server is left alone; a miss */
	struct hc_mc_manifest m;
};

struct get_ctx {
	struct hc_mc *be;
	struct gj *g;
	uint32_t *kjob;
	int32_t *kchunk;
};

static void copy_piece_in(void *src, uint8_t *piece, size_t n, uint64_t done)
{
	memcpy(piece, (const char *)src + done, n);
}

/* Copy len bytes to object offset off of the job's buffers. */
static void copy_out(struct hc_mc_job *j, uint64_t off, const char *src, uint64_t len)
{
	hc__mc_iov_each(j->iov, j->iovcnt, off, len, copy_piece_in, (void *)src);
}

/* The chunks that hold the object's bytes the buffers can take. */
static void set_need(struct gj *g)
{
	uint64_t want = g->room < g->m.length ? g->room : g->m.length;

	want = want > g->m.head_bytes ? want - g->m.head_bytes : 0;
	g->need = (uint32_t)((want + g->m.chunk_bytes - 1) / g->m.chunk_bytes);
}

/* A whole object read: complete it now, so the host checks it while the
 * rest of the batch arrives. */
static void get_done(struct get_ctx *c, struct gj *g)
{
	g->job->result = (int64_t)g->m.length;
	HC_MC_COUNT(c->be, hits, 1);
	HC_MC_COUNT(c->be, get_bytes, g->room < g->m.length ? g->room : g->m.length);
	hc__mc_complete(c->be, g->slot);
	g->job = NULL;
}

static void get_found(void *ctx, unsigned k, const char *val, size_t len, uint32_t flags)
{
	struct get_ctx *c = ctx;
	struct gj *g = &c->g[c->kjob[k]];
	int32_t i = c->kchunk[k];
	uint64_t off, want, end;

	if (!g->job)
		return; /* completed: an extra key of the plan */
	if (i < 0) {
		if (g->have_m)
			return; /* asked once; a server repeating itself is not believed twice */
		if (hc__mc_manifest_decode(val, len, g->job->name, &g->m) < 0) {
			HC_MC_COUNT(c->be, bad_manifests, 1);
			hc__mc_warn_once(
				c->be, HC_MC_WARN_MANIF,
				"a manifest item that is not one of ours, or damaged: its object reads as a miss");
			return;
		}
		g->have_m = true;
		set_need(g);
		copy_out(g->job, 0, val + HC_MC_MANIFEST_BYTES, g->room < g->m.head_bytes ? g->room : g->m.head_bytes);
		if (g->need == 0)
			get_done(c, g);
		return;
	}
	/* a chunk: only behind its manifest (a server answers in order), and
	 * only if it is the manifest's; its place is by the manifest's chunk
	 * size, which may be another node's */
	if (!g->have_m || (uint32_t)i >= g->need)
		return;
	off = hc__mc_chunk_off(&g->m, (uint32_t)i);
	end = off + g->m.chunk_bytes < g->m.length ? off + g->m.chunk_bytes : g->m.length;
	if (flags != hc__mc_chunk_tag(g->m.nonce, (uint32_t)i) || len != end - off) {
		g->bad = true;
		HC_MC_COUNT(c->be, inconsistent, 1);
		return;
	}
	want = end < g->room ? end : g->room;
	copy_out(g->job, off, val, want - off);
	if (++g->good == g->need)
		get_done(c, g);
}

static int plan_grow(struct get_ctx *c, struct hc_mc_worker *w, unsigned nk, unsigned *cap)
{
	if (nk > *cap) {
		uint32_t *kj = realloc(c->kjob, nk * sizeof(*c->kjob));
		int32_t *kc;
		if (kj)
			c->kjob = kj;
		if (!kj || !(kc = realloc(c->kchunk, nk * sizeof(*c->kchunk))))
			return -ENOMEM;
		c->kchunk = kc;
		*cap = nk;
	}
	return hc__mc_keys_reserve(w, nk);
}

/* Ask for chunk i of job j as request k of the plan. */
static void plan_key(struct get_ctx *c, struct hc_mc_worker *w, unsigned k, unsigned j, int32_t i)
{
	c->kjob[k] = j;
	c->kchunk[k] = i;
	key_set(w, k, c->g[j].job->name, i);
}

/*
 * Round one asks, for each object, its manifest and the chunks its buffers
 * would take at our chunk size.  An object written by a node with a
 * smaller chunk size needs more chunks than that: round two asks for the
 * rest, in multi-gets of at most HC_MC_MGET_KEYS.
 */
void hc__mc_run_get(struct hc_mc_worker *w, struct hc_mc_job **jobs, unsigned n)
{
	struct hc_mc *be = w->be;
	struct gj *g = calloc(n, sizeof(*g));
	struct get_ctx c = { .be = be, .g = g };
	unsigned nk = 0, cap = 0;
	int ret = g ? 0 : -ENOMEM;

	HC_MC_COUNT(be, gets, n);
	for (unsigned j = 0; j < n && !ret; j++) {
		uint64_t cnt;
		g[j] = (struct gj){ .job = jobs[j], .slot = &jobs[j], .room = jobs[j]->bytes };
		g[j].hung = hc__mc_skip(be, hc__mc_server_of(w, jobs[j]->name));
		cnt = (g[j].room + be->chunk_bytes - 1) / be->chunk_bytes;
		g[j].asked = (uint32_t)(cnt < HC_MC_MAX_CHUNKS ? cnt : HC_MC_MAX_CHUNKS);
		nk += g[j].hung ? 0 : 1 + g[j].asked;
	}
	if (!ret && !(ret = plan_grow(&c, w, nk, &cap))) {
		nk = 0;
		for (unsigned j = 0; j < n; j++)
			for (int32_t i = -1; !g[j].hung && i < (int32_t)g[j].asked; i++)
				plan_key(&c, w, nk++, j, i);
		ret = mget(w, nk, "multi-get of objects", get_found, &c);
	}
	/* round two: chunks past those asked, of objects still incomplete */
	for (unsigned j = 0, i = 0; !ret && j < n;) {
		bool warned = false;
		nk = 0;
		while (j < n && nk < HC_MC_MGET_KEYS) {
			struct gj *x = &g[j];
			if (!x->job || !x->have_m || x->bad || x->need <= x->asked || x->good < x->asked) {
				j++;
				i = 0;
				continue;
			}
			if (!warned) {
				hc__mc_warn_once(be, HC_MC_WARN_CHUNKSZ,
						 "objects written with a smaller chunk size than ours (%" PRIu32
						 "): they take more round trips; give every node the same chunk_size=",
						 be->chunk_bytes);
				warned = true;
			}
			if (!i)
				i = x->asked;
			if ((ret = plan_grow(&c, w, nk + 1, &cap)) < 0)
				break;
			plan_key(&c, w, nk++, j, (int32_t)i);
			if (++i == x->need) {
				j++;
				i = 0;
			}
		}
		if (!ret && nk)
			ret = mget(w, nk, "multi-get of chunks", get_found, &c);
	}
	for (unsigned j = 0; j < n; j++) {
		struct gj *x = g ? &g[j] : NULL;
		if (!jobs[j])
			continue; /* completed whole */
		if (ret < 0) {
			jobs[j]->result = ret;
			continue;
		}
		if (x->have_m && !x->bad && x->good < x->need)
			HC_MC_COUNT(be, missing_chunks, 1);
		jobs[j]->result = -ENOENT; /* absent, or a chunk missing or inconsistent */
		HC_MC_COUNT(be, misses, 1);
	}
	free(c.kjob);
	free(c.kchunk);
	free(g);
}

/* ---- DELETE: the manifest (the object is gone), then its chunks */

void hc__mc_run_delete(struct hc_mc_worker *w, struct hc_mc_job **jobs, unsigned n)
{
	struct hc_mc *be = w->be;
	char key[HC_MC_KEY_MAX];

	HC_MC_COUNT(be, deletes, n);
	for (unsigned j = 0; j < n; j++) {
		struct hc_mc_manifest m = { 0 };
		size_t klen = hc__mc_key(be, jobs[j]->name, -1, key), vlen = 0;
		uint32_t flags, server = hc__mc_server_of(w, jobs[j]->name);
		memcached_return_t rc;
		char *v;
		bool have;

		if (hc__mc_skip(be, server)) {
			jobs[j]->result = -EHOSTDOWN;
			continue;
		}
		v = memcached_get(w->mc, key, klen, &vlen, &flags, &rc);
		have = v && hc__mc_manifest_decode(v, vlen, jobs[j]->name, &m) == 0;
		if (rc == MEMCACHED_TIMEOUT) {
			hc__mc_hang(be, w->mc, server);
			jobs[j]->result = -EHOSTDOWN;
			free(v);
			continue;
		}

		free(v);
		rc = memcached_delete(w->mc, key, klen, 0);
		if (rc != MEMCACHED_SUCCESS && rc != MEMCACHED_NOTFOUND && rc != MEMCACHED_DELETED)
			hc__mc_server_failed(be, w->mc, rc, "delete");
		jobs[j]->result = hc__mc_errno(rc);
		/* chunks of an object whose manifest is gone are dead weight: best effort */
		for (uint32_t i = 0; have && i < m.nchunks; i++) {
			klen = hc__mc_key(be, jobs[j]->name, (int)i, key);
			memcached_delete(w->mc, key, klen, 0);
		}
	}
}

/* ---- PUT: the chunks, then the manifest */

static void copy_piece_out(void *dst, uint8_t *piece, size_t n, uint64_t done)
{
	memcpy((uint8_t *)dst + done, piece, n);
}

/* Bytes [off, off+len) of the job's object: a pointer into its buffers when
 * they are contiguous there, else a copy in the worker's bounce buffer. */
static const char *span(struct hc_mc_worker *w, const struct hc_mc_job *j, uint64_t off, uint64_t len)
{
	uint64_t at = off;

	for (unsigned v = 0; v < j->iovcnt; v++) {
		if (at >= j->iov[v].iov_len) {
			at -= j->iov[v].iov_len;
			continue;
		}
		if (j->iov[v].iov_len - at >= len)
			return (const char *)j->iov[v].iov_base + at;
		break;
	}
	hc__mc_iov_each(j->iov, j->iovcnt, off, len, copy_piece_out, w->bounce);
	return (const char *)w->bounce;
}

static int put_one(struct hc_mc_worker *w, struct hc_mc_job *j)
{
	struct hc_mc *be = w->be;
	struct hc_mc_manifest m = { .chunk_bytes = be->chunk_bytes };
	char key[HC_MC_KEY_MAX];
	memcached_return_t rc;
	size_t klen;
	uint32_t server = hc__mc_server_of(w, j->name);

	if (hc__mc_skip(be, server))
		return -EHOSTDOWN;
	m.length = j->bytes;
	/* a short first iovec (the host's header block) rides in the manifest,
	 * so that every chunk is one iovec's bytes, set without a copy */
	if (j->iovcnt > 1 && j->iov[0].iov_len <= HC_MC_HEAD_MAX && j->iov[0].iov_len < m.length)
		m.head_bytes = (uint32_t)j->iov[0].iov_len;
	if ((m.length - m.head_bytes + m.chunk_bytes - 1) / m.chunk_bytes > HC_MC_MAX_CHUNKS)
		return -ENOSPC; /* more chunks than a manifest may name: it can never fit */
	m.nchunks = (uint32_t)((m.length - m.head_bytes + m.chunk_bytes - 1) / m.chunk_bytes);
	m.nonce = hc__mc_nonce(j->name, j->iov, j->iovcnt, m.length);
	for (uint32_t i = 0; i < m.nchunks; i++) {
		uint64_t off = hc__mc_chunk_off(&m, i);
		uint64_t len = m.length - off < m.chunk_bytes ? m.length - off : m.chunk_bytes;
		klen = hc__mc_key(be, j->name, (int)i, key);
		rc = memcached_set(w->mc, key, klen, span(w, j, off, len), (size_t)len, (time_t)be->o.ttl_s,
				   hc__mc_chunk_tag(m.nonce, i));
		if (rc != MEMCACHED_SUCCESS) {
			hc__mc_server_failed(be, w->mc, rc, "set of a chunk");
			if (rc == MEMCACHED_TIMEOUT)
				hc__mc_hang(be, w->mc, server);
			return hc__mc_errno(rc) ? hc__mc_errno(rc) : -EIO;
		}
		HC_MC_COUNT(be, items_written, 1);
	}
	hc__mc_manifest_encode(&m, j->name, w->man);
	if (m.head_bytes) /* the first iovec, whole */
		memcpy(w->man + HC_MC_MANIFEST_BYTES, j->iov[0].iov_base, m.head_bytes);
	klen = hc__mc_key(be, j->name, -1, key);
	rc = memcached_set(w->mc, key, klen, (const char *)w->man, HC_MC_MANIFEST_BYTES + m.head_bytes,
			   (time_t)be->o.ttl_s, 0);
	if (rc != MEMCACHED_SUCCESS) {
		hc__mc_server_failed(be, w->mc, rc, "set of a manifest");
		if (rc == MEMCACHED_TIMEOUT)
			hc__mc_hang(be, w->mc, server);
		return hc__mc_errno(rc) ? hc__mc_errno(rc) : -EIO;
	}
	HC_MC_COUNT(be, items_written, 1);
	HC_MC_COUNT(be, put_bytes, m.length);
	return 0;
}

void hc__mc_run_put(struct hc_mc_worker *w, struct hc_mc_job **jobs, unsigned n)
{
	HC_MC_COUNT(w->be, puts, n);
	for (unsigned j = 0; j < n; j++) {
		jobs[j]->result = put_one(w, jobs[j]);
		hc__mc_complete(w->be, &jobs[j]);
	}
}
