/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ranks.c - rank slots and proof of death.
 *
 * A process owns a rank slot by holding the slot's robust mutex.  The lock
 * is taken by a holder thread that lives exactly as long as the attachment:
 * a robust mutex belongs to a thread, and an engine's attaching thread may
 * well exit before the process does.  When the process dies, the kernel
 * marks the mutex owner-dead, and the next trylock gets EOWNERDEAD: the only
 * proof of death we accept.  A stopped process still holds its lock, so it
 * is alive.  Nothing is ever declared dead on a timeout.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"

/* A prober holds a free slot's mutex for microseconds; wait that out. */
#define HC_PROBE_WAIT_US 200
#define HC_PROBE_RETRIES 50
#define HC_CLAIM_RETRIES 200

_Atomic unsigned hc__forks;

static void on_fork_child(void)
{
	atomic_fetch_add_explicit(&hc__forks, 1, memory_order_relaxed);
}

static void register_fork_watch(void)
{
	pthread_atfork(NULL, NULL, on_fork_child);
}

/* A forked child inherits handles but not the holder threads that make them ranks. */
void hc__fork_watch(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, register_fork_watch);
}

void hc__mutex_init_robust(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
}

int hc__mutex_kind_ok(const pthread_mutex_t *m)
{
	static _Atomic int kind = -1; /* what init gives, learnt once (a race of equal stores) */
	int k = atomic_load_explicit(&kind, memory_order_relaxed);

	if (k < 0) {
		pthread_mutex_t ref;

		hc__mutex_init_robust(&ref);
		k = ref.__data.__kind;
		pthread_mutex_destroy(&ref);
		atomic_store_explicit(&kind, k, memory_order_relaxed);
	}
	return __atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED) == k;
}

/*
 * Undo everything slot 'slot' held.  The caller holds the slot's mutex, got
 * with EOWNERDEAD (or is the owner detaching).  Idempotent: if we die half
 * way, the next owner of the mutex gets EOWNERDEAD and runs this again.
 */
static void recover_slot(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep)
{
	hc__tickets_recover_slot(p, slot);
	hc__pages_release_slot(p, slot, rep);
	hc__pins_drop_slot(p, slot, rep);
	HC_POINT(recover_engine);
	hc__engine_clear_slot(p, slot);
}

/*
 * We got EOWNERDEAD on the slot's mutex: undo the dead owner's holds, mark
 * the slot free and the mutex consistent.  Returns 0, or the errno of
 * pthread_mutex_consistent, in which case the caller must keep the mutex
 * locked (unlocking it now would make it unrecoverable for good).
 */
int hc__rank_take_dead(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep)
{
	struct hc_seg_rank *r = &p->ranks[slot];
	uint32_t was = atomic_load_explicit(&r->state, memory_order_relaxed);

	/* Probers that find the mutex busy now wait for FREE instead of taking
	 * the dead slot for a live one (hc__rank_probe; the lock word already
	 * names us, not the holder, so even before this store they wait). */
	atomic_store_explicit(&r->state, HC_RANK_RECOVERING, memory_order_release);
	atomic_store_explicit(&r->holder_tid, 0, memory_order_release);
	hc__log(HC_LOG_INFO, "rank slot %u (pid %u) is dead; undoing its holds", slot,
		atomic_load_explicit(&r->pid, memory_order_relaxed));
	HC_POINT(recover_begin);
	recover_slot(p, slot, rep);
	if (was != HC_RANK_FREE) { /* LIVE, or RECOVERING by a recoverer that died */
		if (rep)
			rep->dead_ranks++;
		hc__count(p, HC_CTR_recoveries, 1);
	}
	HC_POINT(recover_end);
	atomic_store_explicit(&r->state, HC_RANK_FREE, memory_order_release);
	return pthread_mutex_consistent(&r->lock);
}

/*
 * Is the slot's mutex held by the thread that claimed the slot?  glibc's
 * robust mutex keeps the owner's TID in its lock word (with the kernel's
 * owner-died bit once that owner is gone); a recoverer that took it with
 * EOWNERDEAD has its own TID there.  The layout is glibc's, which the
 * static_assert on the mutex size already assumes.
 */
#define HC_FUTEX_TID_MASK   0x3fffffffu
#define HC_FUTEX_OWNER_DIED 0x40000000u
static int held_by_holder(struct hc_seg_rank *r)
{
	uint32_t word = (uint32_t)__atomic_load_n(&r->lock.__data.__lock, __ATOMIC_ACQUIRE);
	uint32_t tid = atomic_load_explicit(&r->holder_tid, memory_order_acquire);

	return !(word & HC_FUTEX_OWNER_DIED) && (word & HC_FUTEX_TID_MASK) == tid && tid != 0;
}

/*
 * Probe a slot that is not ours.  Returns 1 if a live process holds it, 0 if
 * it is free (a dead holder's holds are undone on the way),
 * HC_PROBE_RECOVERING if its holder is dead and another process is still
 * undoing its holds, or a negative errno if the mutex is unusable.
 */
int hc__rank_probe(struct hc_pool *p, unsigned slot, struct hc_recovery_report *rep)
{
	struct hc_seg_rank *r;
	int ret;

	if (slot >= p->g.max_ranks) /* past the table lie other regions: never lock those */
		return hc__err(EINVAL, "probe: rank slot %u is out of range: the pool has %u", slot, p->g.max_ranks);
	r = &p->ranks[slot];
	if ((int)slot == p->slot)
		return 1;
	if (p->readonly)
		return atomic_load_explicit(&r->state, memory_order_acquire) == HC_RANK_LIVE;
	if (!hc__mutex_kind_ok(&r->lock))
		return hc__err(ENOTRECOVERABLE,
			       "rank slot %u: its mutex is scribbled (kind %d); recreate the pool when it is idle",
			       slot, r->lock.__data.__kind);
	ret = pthread_mutex_trylock(&r->lock);
	/* Busy but FREE: another prober or a claimer has it for a moment.  Busy
	 * and not held by the slot's holder thread (RECOVERING, or LIVE with
	 * another owner TID in the lock word): the holder is dead and someone
	 * is undoing its holds; wait a moment for that, and never call it live. */
	for (int tries = 0; ret == EBUSY; tries++) {
		uint32_t st = atomic_load_explicit(&r->state, memory_order_acquire);

		if (st == HC_RANK_LIVE && held_by_holder(r))
			return 1;
		if (tries >= HC_PROBE_RETRIES) /* a recoverer that is slow, or stopped: dead, not ours to wait for */
			return st == HC_RANK_FREE ? HC_PROBE_STUCK : HC_PROBE_RECOVERING;
		HC_POINT(probe_busy);
		if (!hc__sched_on()) /* under a schedule the holder runs while we park */
			usleep(HC_PROBE_WAIT_US);
		ret = pthread_mutex_trylock(&r->lock);
	}
	if (ret == EOWNERDEAD) {
		if ((ret = hc__rank_take_dead(p, slot, rep)) != 0)
			return hc__err(ret, "rank slot %u: cannot mark its mutex consistent: %s", slot, strerror(ret));
	} else if (ret == 0 && atomic_load_explicit(&r->state, memory_order_relaxed) != HC_RANK_FREE) {
		/* Unlocked but marked live: a scribble.  We hold the lock, so fix it. */
		atomic_store_explicit(&r->state, HC_RANK_FREE, memory_order_release);
	}
	if (ret == 0) {
		pthread_mutex_unlock(&r->lock);
		return 0;
	}
	return hc__err(ret, "rank slot %u: its mutex is unusable (%s); recreate the pool when it is idle", slot,
		       strerror(ret));
}

/*
 * A FREE slot whose lock word names a thread that never claimed it (or
 * whose mutex glibc marked unrecoverable) stays out of use for good: no
 * kernel will ever mark it owner-dead.  Only an operator who knows that no
 * process is attaching, probing or repairing (hicache-pool repair
 * --quiescent) may say the word is garbage: a claimer or prober stopped
 * inside its few instructions with the lock looks the same.  The word is
 * cleared by a CAS from what was read, so a holder that let go meanwhile
 * is never undone.
 */
int hc__rank_unlock_stuck(struct hc_pool *p, unsigned slot, char *what, size_t len)
{
	struct hc_seg_rank *r;
	uint32_t word;
	int ret;

	if (slot >= p->g.max_ranks || (int)slot == p->slot)
		return 0;
	r = &p->ranks[slot];
	ret = hc__rank_probe(p, slot, NULL);
	if (atomic_load_explicit(&r->state, memory_order_acquire) != HC_RANK_FREE)
		return 0;
	if (ret == HC_PROBE_STUCK) {
		word = (uint32_t)__atomic_load_n(&r->lock.__data.__lock, __ATOMIC_ACQUIRE);
		if (word == 0 || (word & HC_FUTEX_OWNER_DIED))
			return 0; /* let go, or a death the next probe proves */
		HC_POINT(rank_unstick);
		if (!__atomic_compare_exchange_n(&r->lock.__data.__lock, &(int){ (int)word }, 0, 0, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
			return 0; /* it moved: someone's, not garbage */
		/* the word may carry the waiters bit: wake whoever sleeps on it */
		syscall(SYS_futex, &r->lock.__data.__lock, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
		snprintf(what, len, "its mutex was held by no rank (lock word 0x%08x); let go", word);
		return 1;
	}
	if (ret < 0) {
		hc__mutex_init_robust(&r->lock);
		snprintf(what, len, "its mutex was unusable; made new");
		return 1;
	}
	return 0;
}

static void holder_set(struct hc_pool *p, int state, int result)
{
	pthread_mutex_lock(&p->holder_mu);
	p->holder_state = state;
	p->holder_result = result;
	pthread_cond_broadcast(&p->holder_cv);
	pthread_mutex_unlock(&p->holder_mu);
}

static void *holder_main(void *arg)
{
	struct hc_pool *p = arg;
	struct hc_seg_rank *r = NULL;
	struct timespec ts;
	char comm[16] = "";
	int slot = -1, ret;

	prctl(PR_GET_NAME, comm);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	/* Retry while some slot is busy only for a moment, for up to
	 * HC_CLAIM_RETRIES waits or two seconds, whichever is longer: on a
	 * loaded machine a prober's moment can last a scheduling quantum. */
	for (int attempt = 0; slot < 0; attempt++) {
		int transient = 0;
		struct timespec now;

		if (attempt) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (attempt >= HC_CLAIM_RETRIES && now.tv_sec - ts.tv_sec >= 2)
				break;
			usleep(HC_PROBE_WAIT_US);
		}
		for (unsigned s = 0; s < p->g.max_ranks; s++) {
			r = &p->ranks[s];
			ret = hc__mutex_kind_ok(&r->lock) ? pthread_mutex_trylock(&r->lock) : ENOTRECOVERABLE;
			if (ret == EBUSY) {
				/* FREE but locked: a prober's moment; RECOVERING: soon free */
				transient |= atomic_load_explicit(&r->state, memory_order_acquire) != HC_RANK_LIVE;
				continue;
			}
			if (ret == EOWNERDEAD) {
				/* The previous owner died: its holds are ours to undo first. */
				if ((ret = hc__rank_take_dead(p, s, NULL)) != 0) {
					hc__log(HC_LOG_WARN,
						"rank slot %u: cannot mark its mutex consistent (%s); skipping it", s,
						strerror(ret));
					continue;
				}
			} else if (ret != 0) {
				hc__log(HC_LOG_WARN, "rank slot %u: mutex unusable (%s); skipping it", s,
					strerror(ret));
				continue;
			}
			slot = (int)s;
			HC_POINT(rank_claimed);
			break;
		}
		if (!transient)
			break;
	}
	if (slot < 0) {
		holder_set(p, 2, -EUSERS);
		return NULL;
	}
	/* Before our first pin: freers must scan our pin column (pages.c). */
	for (uint32_t h = atomic_load(&p->hdr->slots_hwm); h < (uint32_t)slot + 1;)
		if (atomic_compare_exchange_weak(&p->hdr->slots_hwm, &h, (uint32_t)slot + 1))
			break;
	atomic_store_explicit(&r->pid, (uint32_t)getpid(), memory_order_relaxed);
	atomic_store_explicit(&r->holder_tid, (uint32_t)gettid(), memory_order_relaxed);
	atomic_fetch_add_explicit(&r->epoch, 1, memory_order_relaxed);
	clock_gettime(CLOCK_REALTIME, &ts);
	atomic_store_explicit(&r->attached_unix_ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
			      memory_order_relaxed);
	memcpy(r->comm, comm, sizeof(r->comm));
	/* Release: pid, epoch and comm are visible before LIVE (readers: ls, info). */
	atomic_store_explicit(&r->state, HC_RANK_LIVE, memory_order_release);
	holder_set(p, 1, slot);

	/* Hold the lock until detach asks us to stop. */
	pthread_mutex_lock(&p->holder_mu);
	while (p->holder_state != 3)
		pthread_cond_wait(&p->holder_cv, &p->holder_mu);
	pthread_mutex_unlock(&p->holder_mu);
	atomic_store_explicit(&r->state, HC_RANK_FREE, memory_order_release);
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

int hc__rank_claim(struct hc_pool *p)
{
	int ret;

	pthread_mutex_init(&p->holder_mu, NULL);
	pthread_cond_init(&p->holder_cv, NULL);
	p->holder_state = 0;
	ret = pthread_create(&p->holder, NULL, holder_main, p);
	if (ret) {
		ret = hc__err(ret, "attach: cannot start the rank holder thread: %s", strerror(ret));
		goto fail;
	}
	pthread_mutex_lock(&p->holder_mu);
	while (p->holder_state == 0)
		pthread_cond_wait(&p->holder_cv, &p->holder_mu);
	pthread_mutex_unlock(&p->holder_mu);
	if (p->holder_state == 2) {
		pthread_join(p->holder, NULL);
		ret = hc__err(
			-p->holder_result,
			"all %u rank slots of pool '%s' are held by live processes: detach some, or recreate the pool with more --max-ranks",
			p->g.max_ranks, p->info.name);
		goto fail;
	}
	p->slot = p->holder_result;
	return 0;

fail:
	pthread_cond_destroy(&p->holder_cv);
	pthread_mutex_destroy(&p->holder_mu);
	return ret;
}

/* Clean detach: undo our own holds as recovery would, then let go of the slot. */
void hc__rank_release(struct hc_pool *p)
{
	recover_slot(p, (unsigned)p->slot, NULL);
	HC_POINT(rank_release);
	holder_set(p, 3, p->slot);
	pthread_join(p->holder, NULL);
	pthread_cond_destroy(&p->holder_cv);
	pthread_mutex_destroy(&p->holder_mu);
	p->slot = -1;
}

/* What slot's own record says (its pages are counted apart). */
static void rank_head(hc_pool *p, unsigned slot, struct hc_rank_info *out)
{
	struct hc_seg_rank *r = &p->ranks[slot];

	memset(out, 0, sizeof(*out));
	out->slot = slot;
	out->live = hc__rank_probe(p, slot, NULL) == 1;
	out->pid = atomic_load_explicit(&r->pid, memory_order_relaxed);
	out->epoch = atomic_load_explicit(&r->epoch, memory_order_relaxed);
	out->attached_unix_ns = atomic_load_explicit(&r->attached_unix_ns, memory_order_relaxed);
	memcpy(out->comm, r->comm, sizeof(out->comm));
	out->comm[sizeof(out->comm) - 1] = 0;
	out->engine_id = -1;
	if (out->live) {
		uint32_t e = atomic_load_explicit(&r->engine, memory_order_relaxed);
		uint32_t tp = atomic_load_explicit(&r->tp, memory_order_relaxed);
		out->engine_id = e ? (int32_t)(e - 1) : -1;
		out->tp_size = e ? tp >> 16 : 0;
		out->tp_rank = e ? tp & 0xffff : 0;
		out->quota = atomic_load_explicit(&r->quota, memory_order_relaxed);
		out->held = atomic_load_explicit(&r->held, memory_order_relaxed);
	}
}

/* One pass over the pages: the pins, host locks and reservations of slots
 * [first, first + n).  Holds are read below the high-water mark only: a
 * hold above it is damage, which hc_pool_check names. */
static void rank_pages(hc_pool *p, unsigned first, unsigned n, struct hc_rank_info *out)
{
	uint32_t hwm = hc__hwm(p), end = first + n < hwm ? first + n : hwm;

	for (uint32_t i = 0; i < p->g.npages; i++) {
		uint64_t w = atomic_load_explicit(&p->pages[i].word, memory_order_relaxed);
		const _Atomic uint32_t *row = hc__pin_row(p, i);
		unsigned owner = hc__w_owner(w);

		for (uint32_t s = first; s < end; s++) {
			uint32_t h = atomic_load_explicit(&row[s], memory_order_relaxed);
			out[s - first].pins += h & 0xffff;
			out[s - first].locks += h >> 16;
		}
		if (hc__w_state(w) == HC_PAGE_RESERVED && owner >= first && owner - first < n)
			out[owner - first].reserved++;
	}
}

int hc_pool_rank(hc_pool *p, unsigned slot, struct hc_rank_info *info, size_t size)
{
	struct hc_rank_info ob;
	int ret;

	if (!p || !info)
		return hc__err(EINVAL, "rank: NULL argument");
	if ((ret = HC__ABI_OUT_OK(size, "hc_pool_rank", hc_rank_info)) < 0)
		return ret;
	if (slot >= p->g.max_ranks)
		return hc__err(EINVAL, "rank slot %u is out of range: the pool has %u", slot, p->g.max_ranks);
	rank_head(p, slot, &ob);
	rank_pages(p, slot, 1, &ob);
	return HC__ABI_OUT(info, size, &ob, "hc_pool_rank", hc_rank_info);
}

int hc_pool_ranks(hc_pool *p, struct hc_rank_info *out, size_t size, unsigned n)
{
	struct hc_rank_info *all;
	int ret;

	if (!p || (!out && n))
		return hc__err(EINVAL, "ranks: NULL argument");
	if ((ret = HC__ABI_OUT_OK(size, "hc_pool_ranks", hc_rank_info)) < 0)
		return ret;
	n = n < p->g.max_ranks ? n : p->g.max_ranks;
	if (n == 0)
		return 0;
	if (!(all = calloc(n, sizeof(*all))))
		return hc__err(ENOMEM, "ranks: no memory for %u rank slots", n);
	for (unsigned s = 0; s < n; s++)
		rank_head(p, s, &all[s]);
	rank_pages(p, 0, n, all);
	for (unsigned s = 0; s < n; s++)
		HC__ABI_OUT((uint8_t *)out + (size_t)s * size, size, &all[s], "hc_pool_ranks", hc_rank_info);
	free(all);
	return (int)n;
}

int hc__recover(hc_pool *p, struct hc_recovery_report *rep)
{
	int bad = 0;

	if (!p)
		return hc__err(EINVAL, "recover: pool is NULL");
	if (p->readonly)
		return hc__err(EROFS, "recover: pool '%s' is attached read-only", p->info.name);
	memset(rep, 0, sizeof(*rep));
	for (unsigned s = 0; s < p->g.max_ranks; s++)
		if (hc__rank_probe(p, s, rep) < 0)
			bad++;
	hc__page_sweep(p, rep);
	hc__tickets_sweep(p);
	return bad ? hc__err(ENOTRECOVERABLE, "%d rank slot(s) have unusable mutexes", bad) : 0;
}

int hc_pool_recover(hc_pool *p, struct hc_recovery_report *rep, size_t size)
{
	struct hc_recovery_report local = { 0 };
	int ret;

	/* Checked first: a bad size must not cost a recovery's findings. */
	if (rep && (ret = HC__ABI_OUT_OK(size, "hc_pool_recover", hc_recovery_report)) < 0)
		return ret;
	ret = hc__recover(p, &local);
	if (rep)
		HC__ABI_OUT(rep, size, &local, "hc_pool_recover", hc_recovery_report);
	return ret;
}
