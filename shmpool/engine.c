/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine.c - engines: the ranks that serve one model instance.
 *
 * The truth about membership is in the rank slots (engine, tp, quota,
 * timeout, incarnation), written by each slot's holder; there is no engine
 * table to go stale.  Joins take ctl->engine_lock so two ranks cannot both
 * claim one TP rank or disagree on the TP size; on EOWNERDEAD there is
 * nothing to rebuild, since a dead joiner's slot is recovered like any
 * other.
 *
 * INCARNATIONS.  An engine lives from its first member's join to its last
 * member's leave or death.  The first live member takes a new incarnation
 * number, the others copy it, and tickets are named by it: a ticket never
 * outlives its engine.  When the last member goes (under the lock, so two
 * last members cannot both miss each other), the engine's tickets end: open
 * ones are dropped, tombstones freed.  A member that died and is not yet
 * recovered still counts: its own recovery ends them.
 */
#include <errno.h>
#include <string.h>

#include "pool.h"

/* Recovery may run inside a join (its probes find dead members) and then
 * clears that slot, which takes the lock too: a thread takes it once. */
static _Thread_local int engine_locked;

static int engine_lock(struct hc_pool *p)
{
	int r;

	if (engine_locked++)
		return 0;
	r = hc__lock_shared(&p->ctl->engine_lock.m);
	if (r == EOWNERDEAD) {
		pthread_mutex_consistent(&p->ctl->engine_lock.m);
		r = 0;
	}
	if (r) {
		engine_locked--;
		return hc__err(r, "engine: the pool's engine lock is unusable (%s); run hicache-pool check",
			       strerror(r));
	}
	return 0;
}

static void engine_unlock(struct hc_pool *p)
{
	if (--engine_locked == 0)
		hc__unlock_shared(&p->ctl->engine_lock.m);
}

int hc_engine_join(hc_pool *p, const struct hc_engine_spec *spec)
{
	struct hc_engine_spec sb, *s = &sb;
	struct hc_seg_rank *me;
	uint32_t timeout, inc = 0;
	int ret;

	if (!p || !spec)
		return hc__err(EINVAL, "engine join: %s is NULL", p ? "spec" : "pool");
	if ((ret = HC__ABI_IN(s, spec, "hc_engine_join", hc_engine_spec)) < 0)
		return ret;
	if ((ret = hc__need_slot(p, "engine join")) < 0)
		return ret;
	if (s->engine_id > HC_ENGINE_ID_MAX)
		return hc__err(EINVAL, "engine join: engine id %u is out of range 0..%d", s->engine_id,
			       HC_ENGINE_ID_MAX);
	if (s->tp_size == 0 || s->tp_size > HC_TP_MAX)
		return hc__err(EINVAL, "engine join: tp_size %u is out of range 1..%d", s->tp_size, HC_TP_MAX);
	if (s->tp_rank >= s->tp_size)
		return hc__err(EINVAL, "engine join: tp_rank %u is out of range 0..%u for tp_size %u", s->tp_rank,
			       s->tp_size - 1, s->tp_size);
	if (s->quota_pages == 0)
		return hc__err(
			EINVAL,
			"engine join: a quota of 0 pages would let the engine hold nothing; give a page count, or HC_QUOTA_UNLIMITED");
	timeout = s->ticket_timeout_ms ? s->ticket_timeout_ms : 10000;
	me = &p->ranks[p->slot];
	if (p->eng_id || atomic_load_explicit(&me->engine, memory_order_relaxed))
		return hc__err(EALREADY, "engine join: this rank already joined engine %u; hc_engine_leave first",
			       (p->eng_id ? p->eng_id : atomic_load_explicit(&me->engine, memory_order_relaxed)) - 1);
	if ((ret = engine_lock(p)) < 0)
		return ret;
	for (unsigned slot = 0; slot < p->g.max_ranks; slot++) {
		struct hc_seg_rank *r = &p->ranks[slot];
		uint32_t tp;

		if ((int)slot == p->slot || atomic_load_explicit(&r->engine, memory_order_acquire) != s->engine_id + 1)
			continue;
		if (hc__rank_probe(p, slot, NULL) != 1) /* a dead member is recovered (and cleared) on the way */
			continue;
		if (!inc)
			inc = atomic_load_explicit(&r->incarnation, memory_order_relaxed);
		tp = atomic_load_explicit(&r->tp, memory_order_relaxed);
		if (tp >> 16 != s->tp_size)
			ret = hc__err(EINVAL, "engine join: engine %u has tp_size %u (rank slot %u, pid %u), not %u",
				      s->engine_id, tp >> 16, slot, atomic_load_explicit(&r->pid, memory_order_relaxed),
				      s->tp_size);
		else if ((tp & 0xffff) == s->tp_rank)
			ret = hc__err(EEXIST, "engine join: engine %u tp rank %u is held by rank slot %u (pid %u)",
				      s->engine_id, s->tp_rank, slot,
				      atomic_load_explicit(&r->pid, memory_order_relaxed));
		else if (atomic_load_explicit(&r->quota, memory_order_relaxed) != s->quota_pages ||
			 atomic_load_explicit(&r->timeout_ms, memory_order_relaxed) != timeout)
			ret = hc__err(
				EINVAL,
				"engine join: engine %u has quota %u and ticket timeout %u ms (rank slot %u), not %u and %u",
				s->engine_id, atomic_load_explicit(&r->quota, memory_order_relaxed),
				atomic_load_explicit(&r->timeout_ms, memory_order_relaxed), slot, s->quota_pages,
				timeout);
		if (ret < 0)
			goto out;
	}
	while (!inc) /* the first live member: a new life of the engine */
		inc = atomic_fetch_add_explicit(&p->ctl->engine_seq, 1, memory_order_relaxed) + 1;
	atomic_store_explicit(&me->tp, s->tp_size << 16 | s->tp_rank, memory_order_relaxed);
	atomic_store_explicit(&me->quota, s->quota_pages, memory_order_relaxed);
	/* Counted from now on; what the rank holds already, counted once here
	 * (outside an engine nothing counts).  A thread of this rank that
	 * pins meanwhile may be counted twice or not at all: the count is
	 * approximate in the same way as racing threads' checks are. */
	atomic_store_explicit(&me->held, hc__held_count(p, (unsigned)p->slot), memory_order_relaxed);
	atomic_store_explicit(&me->timeout_ms, timeout, memory_order_relaxed);
	atomic_store_explicit(&me->incarnation, inc, memory_order_relaxed);
	/* Release: the fields above before anyone sees us as a member. */
	atomic_store_explicit(&me->engine, s->engine_id + 1, memory_order_release);
	p->eng_id = s->engine_id + 1;
	p->eng_tp = s->tp_size << 16 | s->tp_rank;
	p->eng_timeout_ms = timeout;
	p->eng_inc = inc;
	HC_POINT(engine_joined);
out:
	engine_unlock(p);
	return ret;
}

int hc_engine_leave(hc_pool *p)
{
	int ret;

	if (!p)
		return hc__err(EINVAL, "engine leave: pool is NULL");
	if ((ret = hc__need_slot(p, "engine leave")) < 0)
		return ret;
	if (!p->eng_id && !atomic_load_explicit(&p->ranks[p->slot].engine, memory_order_relaxed))
		return hc__err(ENOENT, "engine leave: this rank has not joined an engine");
	hc__engine_clear_slot(p, (unsigned)p->slot);
	return 0;
}

/* Recovery or leave: the slot is in no engine and has no quota; the last
 * member's going ends the engine's tickets.  On leave its holds stay (pins
 * are the rank's, not the engine's).  Recovery holds the dead slot's mutex,
 * and drops tickets as that slot, so a recoverer that dies leaves them to
 * the next. */
void hc__engine_clear_slot(struct hc_pool *p, unsigned slot)
{
	struct hc_seg_rank *r = &p->ranks[slot];
	uint32_t e = atomic_load_explicit(&r->engine, memory_order_acquire), inc, last = 1;
	int locked;

	inc = atomic_load_explicit(&r->incarnation, memory_order_relaxed);
	if ((int)slot == p->slot) {
		/* Our own leave or detach: the engine we joined, whatever our
		 * slot says now (only a scribble changes it); the private copy
		 * goes too. */
		e = p->eng_id;
		inc = p->eng_inc;
		p->eng_id = p->eng_tp = p->eng_timeout_ms = p->eng_inc = 0;
		if (!e)
			atomic_store_explicit(&r->engine, 0, memory_order_release);
	}
	if (!e)
		return;
	/* Without the lock (unusable) the tickets are left to expire.  The
	 * tickets end before the membership goes: a rank that dies between
	 * the two is still a member to its recoverer, who ends them again. */
	locked = engine_lock(p) == 0;
	for (unsigned s = 0; s < p->g.max_ranks && last; s++)
		last = s == slot || !(atomic_load_explicit(&p->ranks[s].engine, memory_order_acquire) == e &&
				      atomic_load_explicit(&p->ranks[s].incarnation, memory_order_relaxed) == inc);
	if (locked && last)
		hc__tickets_end_engine(p, e, inc, slot);
	HC_POINT(engine_left);
	atomic_store_explicit(&r->engine, 0, memory_order_release);
	atomic_store_explicit(&r->quota, 0, memory_order_relaxed);
	atomic_store_explicit(&r->held, 0, memory_order_relaxed); /* nothing counts outside an engine */
	atomic_store_explicit(&r->tp, 0, memory_order_relaxed);
	atomic_store_explicit(&r->timeout_ms, 0, memory_order_relaxed);
	atomic_store_explicit(&r->incarnation, 0, memory_order_relaxed);
	if (locked)
		engine_unlock(p);
}
