/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ring.c - the request path's pieces (shmpool/ring.h) between real
 * processes: every entry and its argument bytes arrive once and in order
 * through a full ring and a full argument area, with the doorbell when
 * the consumer sleeps; a dead consumer never blocks the producer; indices
 * that another process scribbled are refused; the bell's timeout and
 * wake-up; and the argument allocator against a model.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../shmpool/pool.h"
#include "../shmpool/ring.h"
#include "hct.h"

#define N   64   /* ring entries */
#define ARG 4096 /* argument area bytes */

struct ent {
	uint64_t seq;
	uint64_t off, len;
	uint64_t sum; /* of the argument bytes */
};

/* One shared block: a ring, two bells (entries in, room out), an argument area. */
struct shared {
	struct hc_bell in, out;
	uint8_t arg[ARG];
	_Alignas(64) uint8_t ring[];
};

static struct shared *mk_shared(void)
{
	size_t bytes = sizeof(struct shared) + hc__ring_bytes(N, sizeof(struct ent));
	struct shared *s = hct_shared(bytes);

	hc__bell_init(&s->in);
	hc__bell_init(&s->out);
	ck_assert_ok(hc__ring_init(s->ring, hc__ring_bytes(N, sizeof(struct ent)), N, sizeof(struct ent)));
	return s;
}

static uint64_t sum_of(const uint8_t *p, uint64_t n)
{
	uint64_t s = 0;

	for (uint64_t i = 0; i < n; i++)
		s = s * 31 + p[i];
	return s;
}

struct want {
	struct hc__ring *v;
	uint32_t k;
};

static int has_entries(void *arg)
{
	struct want *w = arg;

	return hc__ring_avail(w->v, w->k) != 0;
}

static int has_room(void *arg)
{
	struct want *w = arg;

	return hc__ring_room(w->v, w->k) != 0;
}

/* The consumer released something since head h0 (the argument area may have room). */
struct moved {
	struct hc__ring *v;
	uint32_t h0;
};

static int head_moved(void *arg)
{
	struct moved *m = arg;

	return hc__ring_refresh(m->v, HC_RING_PRODUCER) < 0 || m->v->theirs != m->h0;
}

/* The consumer: checks every entry and its bytes, in order; exits 0 when all came. */
static void consume(struct shared *s, uint64_t total, uint64_t spin_ns)
{
	struct hc__ring v;
	struct want w = { &v, 1 };
	uint64_t next = 0;

	if (hc__ring_attach(&v, s->ring, hc__ring_bytes(N, sizeof(struct ent)), N, sizeof(struct ent),
			    HC_RING_CONSUMER) < 0)
		_exit(10);
	while (next < total) {
		int k;
		if (hc__bell_wait(&s->in, has_entries, &w, spin_ns, 10000) < 0)
			_exit(11);
		k = hc__ring_avail(&v, 16);
		if (k <= 0)
			_exit(12);
		for (int i = 0; i < k; i++) {
			struct ent e;
			memcpy(&e, hc__ring_peek(&v, (uint32_t)i), sizeof(e));
			if (e.seq != next++ || e.off + e.len > ARG || sum_of(s->arg + e.off, e.len) != e.sum)
				_exit(13);
		}
		hc__ring_release(&v, (uint32_t)k);
		hc__bell_ring(&s->out);
	}
	_exit(0);
}

/* The producer: total entries with random argument stretches, waiting on
 * the out bell when the ring or the area is full. */
static void produce(struct shared *s, uint64_t total, uint64_t spin_ns)
{
	struct hc__ring v;
	struct hc__argbuf a;
	struct want w = { &v, 1 };
	unsigned seed = 42;

	ck_assert_ok(hc__ring_attach(&v, s->ring, hc__ring_bytes(N, sizeof(struct ent)), N, sizeof(struct ent),
				     HC_RING_PRODUCER));
	ck_assert_ok(hc__argbuf_init(&a, ARG, N));
	for (uint64_t seq = 0; seq < total;) {
		struct ent e = { .seq = seq };
		int64_t off;
		e.len = (uint64_t)(rand_r(&seed) % 700);
		if (seq % 5 == 0)
			e.len = 0;
		if (hc__ring_room(&v, 1) == 0) {
			ck_assert_int_eq(hc__bell_wait(&s->out, has_room, &w, spin_ns, 10000), 0);
			continue;
		}
		if ((off = hc__argbuf_alloc(&a, e.len, v.mine, v.theirs)) == -ENOSPC) {
			struct moved m = { &v, v.theirs };
			ck_assert_int_eq(hc__bell_wait(&s->out, head_moved, &m, spin_ns, 10000), 0);
			continue; /* the consumer released something: try again */
		}
		ck_assert_int_ge(off, 0);
		e.off = (uint64_t)off;
		for (uint64_t i = 0; i < e.len; i++)
			s->arg[e.off + i] = (uint8_t)rand_r(&seed);
		e.sum = sum_of(s->arg + e.off, e.len);
		memcpy(hc__ring_slot(&v, 0), &e, sizeof(e));
		hc__ring_post(&v, 1);
		hc__bell_ring(&s->in);
		seq++;
	}
	hc__argbuf_fini(&a);
}

static void run_pair(uint64_t total, uint64_t spin_ns)
{
	struct shared *s = mk_shared();
	pid_t pid = fork();
	int st;

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		consume(s, total, spin_ns);
	produce(s, total, spin_ns);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "consumer: status 0x%x", st);
	ck_assert_uint_eq(atomic_load(&s->in.sleepers), 0);
}

START_TEST(every_entry_once_in_order)
{
	run_pair(50000, 20000); /* spinning 20 us before sleeping */
}
END_TEST

START_TEST(every_entry_once_sleeping)
{
	run_pair(5000, 0); /* no spin: every wait goes through the futex */
}
END_TEST

/* A consumer that dies never blocks its producer: the ring fills, room is 0. */
START_TEST(dead_consumer)
{
	struct shared *s = mk_shared();
	struct hc__ring v;
	pid_t pid = fork();
	int st, posted = 0;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct hc__ring c;
		struct want w = { &c, 1 };
		if (hc__ring_attach(&c, s->ring, hc__ring_bytes(N, sizeof(struct ent)), N, sizeof(struct ent),
				    HC_RING_CONSUMER) < 0)
			_exit(1);
		hc__bell_wait(&s->in, has_entries, &w, 0, -1); /* sleeps until killed */
		_exit(2);
	}
	while (atomic_load(&s->in.sleepers) == 0)
		usleep(1000);
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFSIGNALED(st));
	ck_assert_ok(hc__ring_attach(&v, s->ring, hc__ring_bytes(N, sizeof(struct ent)), N, sizeof(struct ent),
				     HC_RING_PRODUCER));
	for (int i = 0; i < 3 * N; i++) {
		if (hc__ring_room(&v, 1) == 0) {
			hc__ring_drop(&v); /* a completion ring counts what it could not post */
			continue;
		}
		((struct ent *)hc__ring_slot(&v, 0))->seq = (uint64_t)i;
		hc__ring_post(&v, 1);
		hc__bell_ring(&s->in); /* the dead sleeper is still counted: a wake syscall, no harm */
		posted++;
	}
	ck_assert_int_eq(posted, N);
	ck_assert_uint_eq(hc__ring_dropped(&v), 2 * N);
	ck_assert_uint_eq(atomic_load(&s->in.sleepers), 1); /* it died counted */
	/* a new consumer goes on from the shared head and finds all N */
	{
		struct hc__ring c;
		ck_assert_ok(hc__ring_attach(&c, s->ring, hc__ring_bytes(N, sizeof(struct ent)), N, sizeof(struct ent),
					     HC_RING_CONSUMER));
		ck_assert_int_eq(hc__ring_avail(&c, 1000), N);
		ck_assert_uint_eq(((const struct ent *)hc__ring_peek(&c, N - 1))->seq, N - 1);
	}
}
END_TEST

/* Indices past 2^32 wrap; scribbled ones are refused, never trusted. */
START_TEST(wrap_and_scribbles)
{
	struct shared *s = mk_shared();
	struct hc_ring *r = (struct hc_ring *)s->ring;
	uint64_t bytes = hc__ring_bytes(N, sizeof(struct ent));
	struct hc__ring p, c;

	atomic_store(&r->tail, UINT32_MAX - 10);
	atomic_store(&r->head, UINT32_MAX - 10);
	ck_assert_ok(hc__ring_attach(&p, s->ring, bytes, N, sizeof(struct ent), HC_RING_PRODUCER));
	ck_assert_ok(hc__ring_attach(&c, s->ring, bytes, N, sizeof(struct ent), HC_RING_CONSUMER));
	for (uint32_t i = 0; i < 100; i++) {
		ck_assert_int_eq(hc__ring_room(&p, 1), 1);
		((struct ent *)hc__ring_slot(&p, 0))->seq = i;
		hc__ring_post(&p, 1);
		ck_assert_int_eq(hc__ring_avail(&c, 4), 1);
		ck_assert_uint_eq(((const struct ent *)hc__ring_peek(&c, 0))->seq, i);
		hc__ring_release(&c, 1);
	}
	ck_assert_uint_lt(atomic_load(&r->tail), 100); /* it wrapped */
	/* fill it: room stops at N */
	ck_assert_int_eq(hc__ring_room(&p, 1000), N);
	hc__ring_post(&p, N);
	ck_assert_int_eq(hc__ring_room(&p, 1), 0);
	/* a head moved past the tail, and a tail far past the head */
	atomic_store(&r->head, atomic_load(&r->tail) + 5);
	ck_assert_err(hc__ring_room(&p, 1), EPROTO);
	ck_assert_msg_has("more than the 64 it holds");
	atomic_store(&r->head, p.mine - N);
	atomic_store(&r->tail, p.mine + 1000);
	ck_assert_err(hc__ring_avail(&c, N + 1), EPROTO);
	ck_assert_err(hc__ring_attach(&c, s->ring, bytes, N, sizeof(struct ent), HC_RING_CONSUMER), EPROTO);
	/* geometry: not the one expected, or not a power of two */
	atomic_store(&r->tail, atomic_load(&r->head));
	ck_assert_err(hc__ring_attach(&c, s->ring, bytes, N * 2, sizeof(struct ent), HC_RING_CONSUMER), EPROTO);
	ck_assert_err(hc__ring_attach(&c, s->ring, bytes - 1, N, sizeof(struct ent), HC_RING_CONSUMER), EPROTO);
	ck_assert_err(hc__ring_init(s->ring, bytes, 48, sizeof(struct ent)), EINVAL);
	ck_assert_err(hc__ring_init(s->ring, bytes, N, 12), EINVAL);
	ck_assert_msg_has("power of two");
}
END_TEST

static int never(void *arg)
{
	(void)arg;
	return 0;
}

static int flag_set(void *arg)
{
	return atomic_load((_Atomic uint32_t *)arg) != 0;
}

/* The bell: a timeout is a timeout, and a ring from another process wakes a sleeper. */
START_TEST(bell)
{
	struct hc_bell *b = hct_shared(sizeof(*b) + 64);
	_Atomic uint32_t *flag = (_Atomic uint32_t *)(b + 1);
	double t0 = hct_now();
	pid_t pid;
	int st;

	hc__bell_init(b);
	ck_assert_err(hc__bell_wait(b, never, NULL, 1000, 50), ETIMEDOUT);
	ck_assert(hct_now() - t0 >= 0.045);
	ck_assert_uint_eq(atomic_load(&b->sleepers), 0);
	pid = fork();
	if (pid == 0) {
		while (atomic_load(&b->sleepers) == 0)
			usleep(100);
		usleep(20000);
		atomic_store(flag, 1);
		hc__bell_ring(b);
		_exit(0);
	}
	ck_assert_int_eq(hc__bell_wait(b, flag_set, (void *)flag, 0, 10000), 0);
	ck_assert_int_ne(atomic_load(flag), 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_uint_eq(atomic_load(&b->seq), 1); /* rung once: a sleeper was there */
	hc__bell_ring(b);                           /* nobody sleeps: nothing to do */
	ck_assert_uint_eq(atomic_load(&b->seq), 1);
}
END_TEST

/* The argument allocator against a model of live stretches. */
START_TEST(argbuf_model)
{
	struct hc__argbuf a;
	uint64_t lo[N], hi[N];
	uint32_t head = 0, tail = 0;
	unsigned seed = 7, full = 0, wraps = 0;

	ck_assert_err(hc__argbuf_init(&a, 100, 48), EINVAL);
	ck_assert_ok(hc__argbuf_init(&a, ARG, N));
	ck_assert_err(hc__argbuf_alloc(&a, ARG + 1, tail, head), E2BIG);
	for (int op = 0; op < 200000; op++) {
		if (tail - head < N && rand_r(&seed) % 2) {
			uint64_t len = (uint64_t)(rand_r(&seed) % 900);
			int64_t off = hc__argbuf_alloc(&a, len, tail, head);
			if (off == -ENOSPC) {
				full++;
				continue;
			}
			ck_assert_int_ge(off, 0);
			ck_assert_uint_le((uint64_t)off + len, ARG);
			if (len && (uint64_t)off < lo[(tail - 1) & (N - 1)] && tail != head)
				wraps++;
			/* no overlap with any live stretch */
			for (uint32_t i = head; i != tail && len; i++) {
				uint64_t l = lo[i & (N - 1)], h = hi[i & (N - 1)];
				ck_assert_msg((uint64_t)off + len <= l || (uint64_t)off >= h,
					      "[%lld, +%llu) overlaps [%llu, %llu)", (long long)off,
					      (unsigned long long)len, (unsigned long long)l, (unsigned long long)h);
			}
			lo[tail & (N - 1)] = (uint64_t)off;
			hi[tail & (N - 1)] = (uint64_t)off + len;
			tail++;
		} else if (head != tail) {
			head += 1 + (uint32_t)rand_r(&seed) % (tail - head);
		}
	}
	ck_assert_uint_gt(full, 100);  /* it filled up, often */
	ck_assert_uint_gt(wraps, 100); /* and wrapped */
	/* everything released: the whole area is free again */
	head = tail;
	ck_assert_int_ge(hc__argbuf_alloc(&a, ARG, tail, head), 0);
	ck_assert_err(hc__argbuf_alloc(&a, 1, tail, tail + 5), EPROTO);
	hc__argbuf_fini(&a);
}
END_TEST

static void count_line(void *arg, const char *line)
{
	(void)line;
	(*(int *)arg)++;
}

/* hc_pool_check reads every rank's rings, and names one whose index was scribbled. */
START_TEST(check_finds_scribbled_rings)
{
	const char *name = hct_name();
	hc_pool *p = hct_create_attach(name, 4, 100, 4);
	struct hc_ring *sq = (struct hc_ring *)(p->rings + 2 * p->g.rg.block + p->g.rg.sq_off);
	int lines = 0;

	ck_assert_uint_eq(sq->nentries, 64);
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, count_line, &lines), 0);
	atomic_store(&sq->tail, 1000); /* 1000 requests in a ring of 64 */
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, count_line, &lines), 1);
	ck_assert_int_eq(lines, 1);
	atomic_store(&sq->tail, 0);
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, count_line, &lines), 0);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ring");
	TCase *tc = tcase_create("ring");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, every_entry_once_in_order);
	tcase_add_test(tc, every_entry_once_sleeping);
	tcase_add_test(tc, dead_consumer);
	tcase_add_test(tc, wrap_and_scribbles);
	tcase_add_test(tc, bell);
	tcase_add_test(tc, argbuf_model);
	tcase_add_test(tc, check_finds_scribbled_rings);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
