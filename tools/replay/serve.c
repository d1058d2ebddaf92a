/* SPDX-License-Identifier: Apache-2.0 */
/*
 * serve.c - one rank of a replayed engine.  It serves every request of its
 * engine in arrival order, as the engine's GPU would:
 *
 *   1. L1: the longest prefix of the request's pages in its simulated GPU
 *      cache (an LRU of keys: a hit there moves no bytes, as on a GPU);
 *   2. L2: the rest looked up in the pool under a ticket, so every rank of
 *      the engine gets the same pages, pinned;
 *   3. L3: the rest after that prefetched through the service under
 *      another ticket, by the prefetch policy;
 *   4. the hits loaded through the device API (HC_DEV_HOST: host buffers
 *      stand in for the GPU's KV pools), and every byte checked;
 *   5. the missing pages "computed": their rows filled with the content of
 *      content.c, reserved by key under a ticket, stored and committed
 *      through the device API; the service's write policy backs them up
 *      (a hybrid's sliding-window KV and state snapshots only where a hit
 *      can end: presence_of);
 *   6. the request's pages touched (a lookup, last to first) and put in L1.
 *
 * Request page i uses device slots i * page_tokens .. and state slot i.
 */
#include <errno.h>
#include <sched.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <hicache/device.h>

#include "lru.h"
#include "replay.h"

struct dcomp {
	unsigned comp;
	int kv;
	uint32_t layers, g0, ng;
	uint64_t grp_bytes, token_bytes, slots;
	uint8_t *base;
	size_t bytes;
	uint64_t *k, *v;
};

struct rank {
	const struct hc_rp_ctx *cx;
	struct hc_rp_rank_stats *st;
	hc_pool *p;
	hc_dev *dev;
	unsigned engine, tp_rank, T, ncomp;
	uint32_t all; /* every component's bit */
	struct dcomp c[HC_RP_MAX_COMPS];
	struct hc_rp_lru l1;
	hc_key_t *keys;
	hc_page_t *pg, *xp; /* the request's pages; a transfer's */
	uint8_t *skip;
	uint32_t *xi; /* a transfer's request indices */
	uint64_t *slots, *sslots;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Record the first failure in the rank's row: its -errno.  One met after
 * the run was given up (another rank failed, or the driver was
 * interrupted) is what stopping does to work in flight, not a cause:
 * -ECANCELED, which the driver does not report as an error. */
static int failf(struct rank *r, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int failf(struct rank *r, int err, const char *fmt, ...)
{
	va_list ap;

	if (!r->st->err && atomic_load(&r->cx->sh->go) < 0) {
		r->st->err = -ECANCELED;
		snprintf(r->st->msg, sizeof(r->st->msg), "stopped with the run");
	}
	if (!r->st->err) {
		r->st->err = err < 0 ? err : -EIO;
		va_start(ap, fmt);
		vsnprintf(r->st->msg, sizeof(r->st->msg), fmt, ap);
		va_end(ap);
	}
	return r->st->err;
}

/* The head groups a rank holds of a component (as the device plans it). */
static void groups_of(const struct hc_component_info *ci, unsigned tp, unsigned rank, uint32_t *g0, uint32_t *ng)
{
	if (ci->sharding == HC_REPLICATED) {
		*g0 = 0;
		*ng = 1;
	} else if (tp <= ci->groups) {
		*ng = ci->groups / tp;
		*g0 = rank * *ng;
	} else {
		*g0 = rank / (tp / ci->groups);
		*ng = 1;
	}
}

static int open_device(struct rank *r)
{
	const struct hc_rp_ctx *cx = r->cx;
	struct hc_dev_comp dc[HC_RP_MAX_COMPS];
	uint64_t slots = (uint64_t)cx->max_pages * r->T;

	for (unsigned i = 0; i < r->ncomp; i++) {
		struct hc_component_info ci;
		struct dcomp *c = &r->c[i];
		int e = hc_pool_component(r->p, i, &ci, sizeof(ci));
		if (e < 0)
			return failf(r, e, "component %u: %s", i, hc_last_error());
		c->comp = i;
		c->kv = ci.kind == HC_COMP_KV;
		c->layers = ci.layers;
		groups_of(&ci, cx->o->tp, r->tp_rank, &c->g0, &c->ng);
		c->grp_bytes = c->kv ? (uint64_t)(ci.kv_heads / ci.groups) * ci.head_bytes : ci.layer_stride;
		c->token_bytes = c->ng * c->grp_bytes;
		c->slots = c->kv ? slots : cx->max_pages;
		c->bytes = (size_t)c->layers * (c->kv ? 2 : 1) * c->slots * c->token_bytes;
		c->base = mmap(NULL, c->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		c->k = calloc(c->layers, sizeof(*c->k));
		c->v = calloc(c->layers, sizeof(*c->v));
		if (c->base == MAP_FAILED || !c->k || !c->v) {
			if (c->base == MAP_FAILED)
				c->base = NULL;
			return failf(r, -ENOMEM, "no memory for %zu bytes of device KV (component %s)", c->bytes,
				     ci.name);
		}
		for (uint32_t l = 0; l < c->layers; l++) {
			c->k[l] = (uint64_t)(uintptr_t)(c->base +
							(size_t)(l * (c->kv ? 2 : 1)) * c->slots * c->token_bytes);
			if (c->kv)
				c->v[l] = c->k[l] + c->slots * c->token_bytes;
		}
		dc[i] = (struct hc_dev_comp){ .size = sizeof(struct hc_dev_comp),
					      .comp = i,
					      .k = c->k,
					      .v = c->kv ? c->v : NULL,
					      .token_bytes = c->token_bytes,
					      .token_stride = c->token_bytes,
					      .slots = c->slots };
	}
	struct hc_dev_spec ds = { .size = sizeof(struct hc_dev_spec),
				  .kind = HC_DEV_HOST,
				  .tp_size = cx->o->tp,
				  .tp_rank = r->tp_rank,
				  .comps = dc,
				  .ncomp = r->ncomp };
	int e = hc_dev_open(r->p, &ds, &r->dev);
	return e < 0 ? failf(r, e, "device: %s", hc_last_error()) : 0;
}

/* Fill (check) the rows of request page i, key, for the components in
 * presence: checking returns the bad bytes found. */
static uint64_t rows(struct rank *r, uint32_t i, const uint8_t *key, uint32_t presence, int check)
{
	uint64_t bad = 0;

	for (unsigned ci = 0; ci < r->ncomp; ci++) {
		struct dcomp *c = &r->c[ci];
		unsigned tokens = c->kv ? r->T : 1;
		if (!(presence & (1u << ci)))
			continue;
		for (uint32_t l = 0; l < c->layers; l++)
			for (unsigned kv = 0; kv < (c->kv ? 2u : 1u); kv++)
				for (unsigned t = 0; t < tokens; t++) {
					uint64_t slot = c->kv ? (uint64_t)i * r->T + t : i;
					uint8_t *row =
						(uint8_t *)(uintptr_t)(kv ? c->v[l] : c->k[l]) + slot * c->token_bytes;
					for (uint32_t g = 0; g < c->ng; g++) {
						struct hc_rp_row rw = { key, ci, c->g0 + g, l, kv, t };
						uint8_t *at = row + g * c->grp_bytes;
						long off;
						if (!check) {
							hc_rp_fill(&rw, at, c->grp_bytes);
							continue;
						}
						r->st->checked_bytes += c->grp_bytes;
						if ((off = hc_rp_check(&rw, at, c->grp_bytes)) >= 0)
							bad += c->grp_bytes - (uint64_t)off;
					}
				}
	}
	return bad;
}

/* This rank's bytes of a page holding the components in presence. */
static uint64_t page_bytes(const struct rank *r, uint32_t presence)
{
	uint64_t b = 0;

	for (unsigned ci = 0; ci < r->ncomp; ci++)
		if (presence & (1u << ci))
			b += (uint64_t)r->c[ci].layers * (r->c[ci].kv ? 2u * r->T : 1u) * r->c[ci].token_bytes;
	return b;
}

/* A transfer of the n pages in r->xp (request indices r->xi). */
static int transfer(struct rank *r, unsigned n, int store)
{
	struct hc_xfer_req xr = { .size = sizeof(struct hc_xfer_req),
				  .pages = r->xp,
				  .n = n,
				  .slots = r->slots,
				  .state_slots = r->sslots,
				  .flags = store ? HC_XFER_COMMIT : 0 };
	uint64_t t0 = now_ns();
	hc_xfer *x;
	int e;

	for (unsigned j = 0; j < n; j++) {
		for (unsigned t = 0; t < r->T; t++)
			r->slots[(size_t)j * r->T + t] = (uint64_t)r->xi[j] * r->T + t;
		r->sslots[j] = r->xi[j];
	}
	e = store ? hc_dev_store(r->dev, &xr, &x) : hc_dev_load(r->dev, &xr, &x);
	if (e < 0)
		return failf(r, e, "%s of %u pages: %s", store ? "store" : "load", n, hc_last_error());
	if ((e = hc_xfer_free(x)) < 0)
		return failf(r, e, "%s of %u pages: %s", store ? "store" : "load", n, hc_last_error());
	*(store ? &r->st->store_ns : &r->st->load_ns) += now_ns() - t0;
	return 0;
}

/* Load the n hits in r->xp and check every byte of them. */
static int load_hits(struct rank *r, unsigned n, size_t q)
{
	int e;

	if (!n)
		return 0;
	if ((e = transfer(r, n, 0)) < 0)
		return e;
	for (unsigned j = 0; j < n; j++) {
		uint32_t pres;
		uint64_t bad;
		if ((e = hc_page_presence(r->p, r->xp[j], &pres)) < 0)
			return failf(r, e, "presence of a hit: %s", hc_last_error());
		pres = pres ? pres : r->all;
		r->st->load_bytes += page_bytes(r, pres);
		if ((bad = rows(r, r->xi[j], r->keys[r->xi[j]], pres, 1)) != 0) {
			r->st->bad_bytes += bad;
			return failf(r, -EBADMSG,
				     "request %zu, page %u (pool page %u): %" PRIu64
				     " bytes read back are not what was stored",
				     q, r->xi[j], HC_PAGE_ID(r->xp[j]), bad);
		}
	}
	return 0;
}

/* Components page i of n stores.  A later prompt's hit can end only at a
 * block boundary (its hash ids match whole 512-token blocks) or at this
 * prompt's end, so a sliding window's KV is kept for the window before
 * each (the trailing window pages of each block and of the prompt), and a
 * state snapshot on the last page of each block and of the prompt. */
static uint32_t presence_of(const struct rank *r, uint32_t i, uint32_t n)
{
	const struct hc_rp_model *m = r->cx->m;
	uint32_t per = HC_RP_BLOCK_TOKENS / r->T, pres = r->all;

	if (m->swa >= 0) {
		uint32_t w = m->comps[m->swa].window_pages;
		if (i % per + w < per && i + w < n)
			pres &= ~(1u << m->swa);
	}
	if (m->state >= 0 && i % per != per - 1 && i + 1 != n)
		pres &= ~(1u << m->state);
	return pres;
}

/* Compute pages [s, n) and store them, run by run of equal presence. */
static int store_missing(struct rank *r, size_t q, const char *rid, uint32_t s, uint32_t n)
{
	uint32_t step = 2;

	for (uint32_t a = s, b; a < n; a = b, step++) {
		uint32_t pres = presence_of(r, a, n);
		struct hc_ticket_name nm = { .size = sizeof(struct hc_ticket_name), .request_id = rid, .step = step };
		struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req),
					     .keys = r->keys + a,
					     .first_depth = a,
					     .presence = pres };
		hc_ticket t = { .size = sizeof(hc_ticket) };
		unsigned k = 0;
		int e;
		for (b = a + 1; b < n && presence_of(r, b, n) == pres; b++)
			;
		rq.nkeys = b - a;
		e = hc_ticket_reserve(r->p, &nm, &rq, r->pg + a, r->skip + a, &t);
		if (e == -ENOSPC) {
			r->st->pages_nospace += b - a; /* computed, but the pool has no room to keep them */
			continue;
		}
		if (e < 0)
			return failf(r, e, "request %zu: reserve: %s", q, hc_last_error());
		for (uint32_t i = a; i < b; i++) {
			if (r->skip[i])
				continue; /* READY already, or another writer's */
			rows(r, i, r->keys[i], pres, 0);
			r->xp[k] = r->pg[i];
			r->xi[k++] = i;
			r->st->store_bytes += page_bytes(r, pres);
		}
		r->st->pages_stored += k;
		e = k ? transfer(r, k, 1) : 0;
		if (hc_ticket_release(r->p, &t) < 0 && e == 0)
			e = failf(r, -EIO, "request %zu: reserve release: %s", q, hc_last_error());
		if (e < 0)
			return e;
	}
	return 0;
}

/* --serial: wait for request q's turn (0), or give up (-ECANCELED). */
static int wait_turn(struct rank *r, size_t q)
{
	struct hc_rp_shared *sh = r->cx->sh;

	while (atomic_load(&sh->turn) != q)
		if (atomic_load(&sh->go) < 0)
			return -ECANCELED;
		else
			usleep(20);
	return 0;
}

/* In step with the engine's other ranks: they have served the j requests
 * before this one (0), or the run is given up (-ECANCELED). */
static int wait_peers(struct rank *r, uint64_t j)
{
	struct hc_rp_shared *sh = r->cx->sh;
	unsigned tp = r->cx->o->tp, base = r->engine * tp;

	for (unsigned k = 0; k < tp; k++)
		while (atomic_load(&sh->finished[base + k]) < j)
			if (atomic_load(&sh->go) < 0)
				return -ECANCELED;
			else
				sched_yield();
	return 0;
}

static void end_turn(struct rank *r, size_t q)
{
	struct hc_rp_shared *sh = r->cx->sh;

	if (atomic_fetch_sub(&sh->left, 1) == 1) {
		atomic_store(&sh->left, r->cx->o->tp);
		atomic_store(&sh->turn, q + 1);
	}
}

static int serve_one(struct rank *r, size_t q)
{
	const struct hc_rp_ctx *cx = r->cx;
	const struct hc_rp_req *rq = &cx->w->req[q];
	uint32_t n = hc_rp_pages(rq, r->T), l1 = 0, h2 = 0, h3 = 0, l2_late = 0;
	hc_ticket t2 = { .size = sizeof(t2) }, t3 = { .size = sizeof(t3) };
	int have2 = 0, have3 = 0, e = 0;
	char rid[32];

	snprintf(rid, sizeof(rid), "r%zu", q);
	hc_rp_keys(cx->w, rq, r->T, r->keys);
	if (cx->o->l1_pages)
		while (l1 < n && hc_rp_lru_has(&r->l1, r->keys[l1]))
			l1++;
	if (l1 < n) {
		struct hc_ticket_name nm = { .size = sizeof(struct hc_ticket_name), .request_id = rid, .step = 0 };
		struct hc_lookup_req lr = { .size = sizeof(struct hc_lookup_req),
					    .keys = r->keys + l1,
					    .nkeys = n - l1,
					    .flags = HC_LOOKUP_PIN };
		e = hc_ticket_lookup(r->p, &nm, &lr, r->pg + l1, &t2);
		if (e < 0)
			return failf(r, e, "request %zu: L2 lookup: %s", q, hc_last_error());
		h2 = (uint32_t)e;
		have2 = 1;
	}
	if (cx->l3 && l1 + h2 < n && n - l1 - h2 >= cx->o->prefetch_threshold) {
		struct hc_ticket_name nm = { .size = sizeof(struct hc_ticket_name), .request_id = rid, .step = 1 };
		struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
					      .keys = r->keys + l1 + h2,
					      .nkeys = n - l1 - h2,
					      .first_depth = l1 + h2,
					      .name = &nm,
					      .policy = cx->o->prefetch,
					      .timeout_ms = cx->o->prefetch_timeout_ms };
		hc_req *pq;
		/* Keys READY here past the L2 hit's first gap: once the prefetch
		 * fills the gap the take counts them, but they are L2's. */
		for (uint32_t i = l1 + h2; i < n; i++) {
			struct hc_lookup_req one = { .size = sizeof(struct hc_lookup_req),
						     .keys = &r->keys[i],
						     .nkeys = 1,
						     .flags = HC_LOOKUP_NOTOUCH };
			hc_page_t h;
			r->skip[i] = hc_lookup(r->p, &one, &h) == 1;
		}
		r->st->prefetches++;
		e = hc_req_prefetch(r->p, &pr, &pq);
		if (e == 0) {
			e = hc_req_prefetch_take(pq, r->pg + l1 + h2, &t3);
			if (e >= 0) {
				h3 = (uint32_t)e;
				have3 = 1;
				for (uint32_t i = l1 + h2; i < l1 + h2 + h3; i++)
					l2_late += r->skip[i];
			}
			hc_req_free(pq);
		}
		if (e < 0) {
			r->st->prefetch_fails++; /* the request is served without L3 */
			e = 0;
		}
	}
	/* The hits: L2's, then L3's, loaded and checked. */
	{
		unsigned k = 0;
		for (uint32_t i = l1; i < l1 + h2 + h3; i++)
			if (r->pg[i] != HC_PAGE_NONE) {
				r->xp[k] = r->pg[i];
				r->xi[k++] = i;
			}
		e = load_hits(r, k, q);
	}
	if (have2 && hc_ticket_release(r->p, &t2) < 0 && e == 0)
		e = failf(r, -EIO, "request %zu: L2 release: %s", q, hc_last_error());
	if (have3 && hc_ticket_release(r->p, &t3) < 0 && e == 0)
		e = failf(r, -EIO, "request %zu: L3 release: %s", q, hc_last_error());
	if (e < 0)
		return e;
	if ((e = store_missing(r, q, rid, l1 + h2 + h3, n)) < 0)
		return e;
	/* Used: a lookup stamps the request's pages last to first (exact LRU),
	 * and the GPU cache keeps them, the first most recent. */
	if (n) {
		struct hc_lookup_req lr = { .size = sizeof(struct hc_lookup_req), .keys = r->keys, .nkeys = n };
		if ((e = hc_lookup(r->p, &lr, r->pg)) < 0)
			return failf(r, e, "request %zu: touch: %s", q, hc_last_error());
	}
	for (uint32_t i = n; cx->o->l1_pages && i-- > 0;)
		hc_rp_lru_use(&r->l1, r->keys[i], 0);
	r->st->requests++;
	r->st->pages += n;
	r->st->pages_l1 += l1;
	r->st->pages_l2 += h2 + l2_late;
	r->st->pages_l3 += h3 - l2_late;
	r->st->tok_total += rq->input_len;
	r->st->tok_l1 += (uint64_t)l1 * r->T;
	r->st->tok_l2 += (uint64_t)(h2 + l2_late) * r->T;
	r->st->tok_l3 += (uint64_t)(h3 - l2_late) * r->T;
	return 0;
}

int hc_rp_serve(const struct hc_rp_ctx *cx, unsigned engine, unsigned tp_rank)
{
	struct rank r = { .cx = cx,
			  .engine = engine,
			  .tp_rank = tp_rank,
			  .T = cx->m->page_tokens,
			  .ncomp = cx->m->ncomp,
			  .st = &cx->sh->st[engine * cx->o->tp + tp_rank] };
	struct hc_engine_spec es = { .size = sizeof(struct hc_engine_spec),
				     .engine_id = engine + 1,
				     .tp_size = cx->o->tp,
				     .tp_rank = tp_rank,
				     .quota_pages = HC_QUOTA_UNLIMITED,
				     .ticket_timeout_ms = 60000 };
	size_t mp = (size_t)cx->max_pages + 1;
	uint64_t t0;
	int e = 0;

	r.st->engine = engine;
	r.st->tp_rank = tp_rank;
	r.all = (1u << r.ncomp) - 1;
	if ((e = hc_pool_attach(cx->pool, NULL, &r.p)) < 0)
		return failf(&r, e, "attach: %s", hc_last_error());
	if ((e = hc_engine_join(r.p, &es)) < 0) {
		failf(&r, e, "engine join: %s", hc_last_error());
		goto out;
	}
	r.keys = calloc(mp, sizeof(*r.keys));
	r.pg = calloc(mp, sizeof(*r.pg));
	r.xp = calloc(mp, sizeof(*r.xp));
	r.skip = calloc(mp, 1);
	r.xi = calloc(mp, sizeof(*r.xi));
	r.slots = calloc(mp * r.T, sizeof(*r.slots));
	r.sslots = calloc(mp, sizeof(*r.sslots));
	if (!r.keys || !r.pg || !r.xp || !r.skip || !r.xi || !r.slots || !r.sslots ||
	    (cx->o->l1_pages && hc_rp_lru_init(&r.l1, cx->o->l1_pages) < 0)) {
		e = failf(&r, -ENOMEM, "no memory for requests of %u pages", cx->max_pages);
		goto out;
	}
	if ((e = open_device(&r)) < 0)
		goto out;
	while (atomic_load(&cx->sh->go) == 0)
		usleep(1000);
	t0 = now_ns();
	for (size_t q = engine; q < cx->w->n && atomic_load(&cx->sh->go) > 0; q += cx->o->engines) {
		if ((cx->o->serial && (e = wait_turn(&r, q)) < 0) || (e = wait_peers(&r, r.st->requests)) < 0)
			break;
		if (cx->o->speedup > 0) {
			uint64_t due = t0 + (uint64_t)((double)cx->w->req[q].t_ms * 1e6 / cx->o->speedup);
			for (uint64_t t; (t = now_ns()) < due && atomic_load(&cx->sh->go) > 0;)
				usleep((useconds_t)((due - t) / 1000 > 100000 ? 100000 : (due - t) / 1000 + 1));
		}
		if ((e = serve_one(&r, q)) < 0)
			break;
		atomic_store(&cx->sh->finished[engine * cx->o->tp + tp_rank], r.st->requests);
		if (tp_rank == 0)
			atomic_fetch_add(&cx->sh->served, 1);
		if (cx->o->serial)
			end_turn(&r, q);
	}
	r.st->seconds = (double)(now_ns() - t0) / 1e9;
out:
	if (e == -ECANCELED && atomic_load(&cx->sh->go) < 0)
		e = 0; /* stopped with the run: another rank's failure, or the driver's stop, says why */
	if (e < 0)
		atomic_store(&cx->sh->go, -1); /* the others stop too */
	/* The builder of a reservation ticket owns its pages until the other
	 * ranks have committed: the engine's ranks leave together. */
	atomic_fetch_add(&cx->sh->leaving, 1);
	for (int i = 0;
	     i < 600000 && atomic_load(&cx->sh->leaving) < cx->o->tp * cx->o->engines && atomic_load(&cx->sh->go) > 0;
	     i++)
		usleep(100);
	if (r.dev)
		hc_dev_close(r.dev);
	for (unsigned i = 0; i < r.ncomp; i++) {
		if (r.c[i].base)
			munmap(r.c[i].base, r.c[i].bytes);
		free(r.c[i].k);
		free(r.c[i].v);
	}
	if (cx->o->l1_pages)
		hc_rp_lru_free(&r.l1);
	free(r.keys);
	free(r.pg);
	free(r.xp);
	free(r.skip);
	free(r.xi);
	free(r.slots);
	free(r.sslots);
	hc_engine_leave(r.p);
	hc_pool_detach(r.p);
	return e;
}
