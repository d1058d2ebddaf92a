/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mori_backend.c - the mori L3 plugin (backends/mori) on real
 * hicache-memd servers that each test starts on free loopback ports: bad
 * options, a server SIGKILLed in the middle of a stream of puts and gets
 * and restarted (empty, and used again), a full server, a lease that keeps
 * an object being read from eviction, and a server in another network
 * namespace behind a veth pair, so the bytes cross an interface.  The
 * plugin is loaded by the library's loader; objects are checked byte for
 * byte here, below the host's own checks.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hicache/backend.h>

#include "../backends/mori/wire.h"
#include "../lib/l3/plugin.h"
#include "hct.h"
#include "hctbe.h"
#include "memd.h"

static struct hct_memd memd;
static const struct hc_backend *B;

static void teardown(void)
{
	hct_memd_stop(&memd);
}

static void up(unsigned n, const char *args)
{
	char e[256];

	setenv("UCX_TLS", "tcp", 1);
	ck_assert_msg(hct_memd_start(&memd, n, args, e, sizeof(e)) == 0, "%s", e);
}

/* An instance on servers (NULL: the running ones) with more options. */
static int open_on(void **inst, const char *servers, const char *more)
{
	struct hc__plugin_spec sp;
	struct hc__plugin pl;
	char spec[1024], list[512];
	int ret;

	if (!servers) {
		hct_memd_servers(&memd, list, sizeof(list));
		servers = list;
	}
	snprintf(spec, sizeof(spec), "mori:servers=%s%s%s%s", servers,
		 more && strstr(more, "transports=") ? "" : ",transports=tcp", more && *more ? "," : "",
		 more ? more : "");
	*inst = NULL;
	if ((ret = hc__plugin_spec_parse(spec, &sp)) < 0 || (ret = hc__plugin_load(sp.name, NULL, &pl)) < 0)
		return ret;
	B = pl.be;
	return hc__plugin_open(&pl, &sp, inst);
}

static void *must_open(const char *servers, const char *more)
{
	void *inst;
	int ret = open_on(&inst, servers, more);

	ck_assert_msg(ret == 0 && inst, "open %s: %d %s", more ? more : "", ret, hc_last_error());
	return inst;
}

/* ---- objects: words of (id, version, index), checked whole */

static void fill(uint64_t *w, size_t len, uint32_t id, uint32_t ver)
{
	for (size_t i = 0; i < len / 8; i++)
		w[i] = ((uint64_t)id << 40 | (uint64_t)ver << 24) ^ (i * UINT64_C(0x9e3779b97f4a7c15));
}

static int same(const uint64_t *w, size_t len, uint32_t id, uint32_t ver)
{
	for (size_t i = 0; i < len / 8; i++)
		if (w[i] != (((uint64_t)id << 40 | (uint64_t)ver << 24) ^ (i * UINT64_C(0x9e3779b97f4a7c15))))
			return 0;
	return 1;
}

static void name_of(uint8_t n[HC_BE_NAME_BYTES], uint32_t id)
{
	memset(n, 0x5a, HC_BE_NAME_BYTES);
	memcpy(n + 32, &id, sizeof(id));
}

/* One op, submitted and reaped (30 s at most: the plugin never hangs). */
static int64_t one(void *inst, uint32_t opcode, uint32_t id, void *buf, size_t len)
{
	struct iovec iov = { buf, len };
	struct hc_be_op op = { .opcode = opcode, .iovcnt = buf ? 1 : 0, .iov = buf ? &iov : NULL, .user_data = id };
	struct hc_be_cqe c;
	int r;

	name_of(op.name, id);
	ck_assert_int_eq(B->submit(inst, &op, 1), 1);
	for (double end = hct_now() + 30; (r = B->reap(inst, &c, 1, 100)) == 0;)
		ck_assert_msg(hct_now() < end, "op %u on object %u: no completion in 30 s", opcode, id);
	ck_assert_int_eq(r, 1);
	ck_assert_uint_eq(c.user_data, id);
	return c.result;
}

static int64_t put(void *inst, uint32_t id, uint32_t ver, size_t len)
{
	uint64_t *w = malloc(len);
	int64_t r;

	fill(w, len, id, ver);
	r = one(inst, HC_BE_OP_PUT, id, w, len);
	free(w);
	return r;
}

/* The result of a get; *ok whether the bytes are (id, ver). */
static int64_t get(void *inst, uint32_t id, uint32_t ver, size_t len, int *ok)
{
	uint64_t *w = calloc(1, len);
	int64_t r = one(inst, HC_BE_OP_GET, id, w, len);

	*ok = r == (int64_t)len && same(w, len, id, ver);
	free(w);
	return r;
}

/* ---- the tests */

static void refused(const char *servers, const char *more, int errnum, const char *needle)
{
	void *inst;
	int ret = open_on(&inst, servers, more);

	ck_assert_msg(ret == -errnum, "open with '%s': %d (%s)", more, ret, hc_last_error());
	ck_assert_ptr_null(inst);
	ck_assert_msg(strstr(hc_last_error(), needle), "open with '%s': error '%s' lacks '%s'", more, hc_last_error(),
		      needle);
}

START_TEST(bad_options)
{
	char servers[64];

	up(1, "--size 4M");
	refused(NULL, "colour=blue", EINVAL, "unknown option 'colour': mori takes servers");
	refused(NULL, "io_timeout_ms=0", EINVAL, "io_timeout_ms=0 is not a count of milliseconds");
	refused(NULL, "batch=5000", EINVAL, "batch=5000 is not a count of ops from 1 to 1024");
	refused(NULL, "inflight=lots", EINVAL, "inflight=lots");
	refused(NULL, "lease_ms=1000,io_timeout_ms=2000", EINVAL, "lease must outlast it");
	refused(NULL, "retry_ms=100,retry_max_ms=50", EINVAL, "retry_max_ms=50 is below retry_ms=100");
	refused(NULL, "io_timeout_ms=5,io_timeout_ms=6", EINVAL, "given twice");
	refused("h:0", NULL, EINVAL, "no port from 1 to 65535");
	refused("h:1;h:1", NULL, EINVAL, "listed twice");
	refused("/tmp/sock", NULL, EINVAL, "not a host name");
	/* UCX_TLS that UCX does not take */
	refused(NULL, "transports=tcp;rm", EINVAL, "transports=tcp;rm");
	/* nobody listens: said at open, naming the server */
	snprintf(servers, sizeof(servers), "127.0.0.1:%d", memd.port[0]);
	hct_memd_stop(&memd);
	refused(servers, "connect_timeout_ms=300", EHOSTUNREACH, "no memory server answers (127.0.0.1:");
}
END_TEST

/* Round trips with several buffers and odd lengths, and the results the ABI
 * promises: a get into less or more room, exists, delete, overwrite. */
START_TEST(round_trip)
{
	uint64_t *w = malloc(3 << 20), *r = calloc(1, 3 << 20);
	struct iovec iov[3];
	int ok;
	void *inst;

	up(2, "--size 16M");
	inst = must_open(NULL, NULL);
	for (uint32_t id = 0; id < 40; id++)
		ck_assert_int_eq(put(inst, id, 1, 4096 + id * 8192), 0);
	for (uint32_t id = 0; id < 40; id++) {
		ck_assert_int_eq(get(inst, id, 1, 4096 + id * 8192, &ok), 4096 + id * 8192);
		ck_assert_msg(ok, "object %u: other bytes", id);
		ck_assert_int_eq(one(inst, HC_BE_OP_EXISTS, id, NULL, 0), 1);
	}
	ck_assert_int_eq(one(inst, HC_BE_OP_EXISTS, 999, NULL, 0), 0);
	ck_assert_int_eq(one(inst, HC_BE_OP_GET, 999, r, 4096), -ENOENT);
	/* a 3 MiB object from three buffers, read back into less room */
	fill(w, 3 << 20, 77, 2);
	iov[0] = (struct iovec){ w, 1 << 20 };
	iov[1] = (struct iovec){ (uint8_t *)w + (1 << 20), 12345 };
	iov[2] = (struct iovec){ (uint8_t *)w + (1 << 20) + 12345, (2 << 20) - 12345 };
	{
		struct hc_be_op op = { .opcode = HC_BE_OP_PUT, .iovcnt = 3, .iov = iov, .user_data = 1 };
		struct hc_be_cqe c;
		name_of(op.name, 77);
		ck_assert_int_eq(B->submit(inst, &op, 1), 1);
		ck_assert_int_eq(B->reap(inst, &c, 1, 30000), 1);
		ck_assert_int_eq(c.result, 0);
	}
	ck_assert_int_eq(one(inst, HC_BE_OP_GET, 77, r, 1 << 20), 3 << 20);
	ck_assert(same(r, 1 << 20, 77, 2));
	ck_assert_int_eq(get(inst, 77, 2, 3 << 20, &ok), 3 << 20);
	ck_assert(ok);
	/* overwrite, then delete */
	ck_assert_int_eq(put(inst, 5, 9, 8192), 0);
	ck_assert_int_eq(get(inst, 5, 9, 8192, &ok), 8192);
	ck_assert(ok);
	ck_assert_int_eq(one(inst, HC_BE_OP_DELETE, 5, NULL, 0), 0);
	ck_assert_int_eq(one(inst, HC_BE_OP_DELETE, 5, NULL, 0), -ENOENT);
	ck_assert_int_eq(one(inst, HC_BE_OP_EXISTS, 5, NULL, 0), 0);
	/* the servers' figures */
	ck_assert_uint_eq(hct_be_stat(B, inst, "objects"), 40);
	ck_assert_uint_eq(hct_be_stat(B, inst, "capacity_bytes"), 32u << 20);
	ck_assert_uint_ge(hct_be_stat(B, inst, "hits"), 43);
	B->close(inst);
	free(w);
	free(r);
}
END_TEST

/* A full server: an object larger than its region is -ENOSPC at once;
 * puts beyond its size evict the oldest objects, which become misses. */
START_TEST(full_server)
{
	void *inst;
	unsigned hits = 0, missed_early = 0;
	int ok;

	up(1, "--size 1M");
	inst = must_open(NULL, NULL);
	ck_assert_int_eq(put(inst, 1, 1, 2 << 20), -ENOSPC);
	ck_assert_uint_eq(hct_be_stat(B, inst, "enospc"), 1);
	for (uint32_t id = 0; id < 64; id++)
		ck_assert_int_eq(put(inst, id, 1, 64 << 10), 0);
	for (uint32_t id = 0; id < 64; id++) {
		int64_t r = get(inst, id, 1, 64 << 10, &ok);
		ck_assert_msg(r == -ENOENT || (r == 64 << 10 && ok), "object %u: %lld", id, (long long)r);
		hits += r > 0;
		missed_early += r < 0 && id < 16;
	}
	/* 1 MiB holds 16 of them; the newest are there */
	ck_assert_uint_ge(hits, 8);
	ck_assert_uint_le(hits, 16);
	ck_assert_uint_eq(missed_early, 16);
	B->close(inst);
}
END_TEST

/* ---- a client of the control protocol of its own, to hold a lease */

static int raw_connect(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static void raw_read(int fd, void *p, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t k = read(fd, (uint8_t *)p + got, n - got);
		ck_assert_msg(k > 0, "memd closed the connection");
		got += (size_t)k;
	}
}

/* A request; its reply's body into out (at most cap bytes): the length. */
static uint32_t raw_call(int fd, uint16_t type, const void *body, uint32_t len, void *out, size_t cap)
{
	static uint32_t seq;
	struct hc_mw_hdr h = { HC_MW_MAGIC, 1, type, len, ++seq }, r;
	uint8_t *b = malloc(len + sizeof(h));

	memcpy(b, &h, sizeof(h));
	memcpy(b + sizeof(h), body, len);
	ck_assert_int_eq(write(fd, b, len + sizeof(h)), (ssize_t)(len + sizeof(h)));
	free(b);
	raw_read(fd, &r, sizeof(r));
	ck_assert_uint_eq(r.type, type | HC_MW_REPLY);
	ck_assert_uint_eq(r.seq, h.seq);
	ck_assert_uint_le(r.length, cap);
	raw_read(fd, out, r.length);
	return r.length;
}

static int raw_open(int port)
{
	struct hc_mw_hello hello = { 1, 1, 0 };
	static uint8_t welcome[2 * HC_MW_BLOB_MAX + 64];
	int fd = raw_connect(port);

	raw_call(fd, HC_MW_HELLO, &hello, sizeof(hello), welcome, sizeof(welcome));
	return fd;
}

/* LOOKUP id with a lease: the lease, or 0 if it is not there. */
static uint64_t raw_lease(int fd, uint32_t id)
{
	struct {
		struct hc_mw_count c;
		uint8_t name[HC_MW_NAME_BYTES];
	} q = { { 1, HC_MW_LOOKUP_LEASE }, { 0 } };
	struct {
		struct hc_mw_count c;
		struct hc_mw_found f;
	} a;

	name_of(q.name, id);
	ck_assert_uint_eq(raw_call(fd, HC_MW_LOOKUP, &q, sizeof(q), &a, sizeof(a)), sizeof(a));
	return a.f.status == 0 ? a.f.lease : 0;
}

static void raw_release(int fd, uint64_t lease)
{
	struct {
		struct hc_mw_count c;
		uint64_t id;
	} q = { { 1, 0 }, lease };
	struct {
		struct hc_mw_count c;
		struct hc_mw_status s;
	} a;

	ck_assert_uint_eq(raw_call(fd, HC_MW_RELEASE, &q, sizeof(q), &a, sizeof(a)), sizeof(a));
	ck_assert_int_eq(a.s.status, 0);
}

/* An object being read (leased) is neither evicted nor overwritten in
 * place by the puts that fill the region around it; released, it goes. */
START_TEST(lease_keeps_object)
{
	void *inst;
	uint64_t lease;
	int fd, ok;

	up(1, "--size 1M --lease-ms 60000");
	inst = must_open(NULL, NULL);
	ck_assert_int_eq(put(inst, 1, 1, 64 << 10), 0);
	fd = raw_open(memd.port[0]);
	ck_assert_uint_ne(lease = raw_lease(fd, 1), 0);
	/* four times the region, object 1 oldest all along */
	for (uint32_t id = 100; id < 164; id++)
		ck_assert_int_eq(put(inst, id, 1, 64 << 10), 0);
	ck_assert_int_eq(get(inst, 1, 1, 64 << 10, &ok), 64 << 10);
	ck_assert_msg(ok, "the leased object's bytes changed");
	/* a new version while it is read: the reader's bytes stay, the new
	 * version is what a get finds */
	ck_assert_int_eq(put(inst, 1, 2, 64 << 10), 0);
	ck_assert_int_eq(get(inst, 1, 2, 64 << 10, &ok), 64 << 10);
	ck_assert(ok);
	raw_release(fd, lease);
	ck_assert_int_eq(one(inst, HC_BE_OP_DELETE, 1, NULL, 0), 0);
	for (uint32_t id = 200; id < 232; id++)
		ck_assert_int_eq(put(inst, id, 1, 64 << 10), 0);
	/* the old version's room is free again: the region holds 16 objects */
	ck_assert_uint_eq(hct_be_stat(B, inst, "objects"), 16);
	close(fd);
	B->close(inst);
}
END_TEST

/* A server full of objects being read has no room to give: a put is
 * -EBUSY (worth a retry), not a wait, and works once a reader lets go. */
START_TEST(full_of_leases)
{
	uint64_t lease[16];
	void *inst;
	int fd, ok;

	up(1, "--size 1M --lease-ms 60000");
	inst = must_open(NULL, NULL);
	for (uint32_t id = 0; id < 16; id++)
		ck_assert_int_eq(put(inst, id, 1, 64 << 10), 0);
	fd = raw_open(memd.port[0]);
	for (uint32_t id = 0; id < 16; id++)
		ck_assert_uint_ne(lease[id] = raw_lease(fd, id), 0);
	ck_assert_int_eq(put(inst, 100, 1, 64 << 10), -EBUSY);
	ck_assert_uint_eq(hct_be_stat(B, inst, "ebusy"), 1);
	raw_release(fd, lease[3]);
	ck_assert_int_eq(put(inst, 100, 1, 64 << 10), 0);
	ck_assert_int_eq(get(inst, 100, 1, 64 << 10, &ok), 64 << 10);
	ck_assert(ok);
	ck_assert_int_eq(one(inst, HC_BE_OP_EXISTS, 3, NULL, 0), 0); /* the one let go was evicted */
	for (uint32_t id = 0; id < 16; id++)
		if (id != 3)
			raw_release(fd, lease[id]);
	close(fd);
	B->close(inst);
}
END_TEST

/* ---- a server SIGKILLed mid-stream, then restarted */

struct stream {
	void *inst;
	uint32_t id0;
	_Atomic int phase, stop;
	_Atomic unsigned ok[3], failed[3], wrong; /* read by the test while the stream runs */
	char why[256];
};

static void *streamer(void *arg)
{
	struct stream *s = arg;
	const size_t len = 256 << 10;

	for (unsigned k = 0; !s->stop; k++) {
		uint32_t id = s->id0 + k % 64, ver = k / 64 + 1;
		int phase = s->phase, ok;
		int64_t r = put(s->inst, id, ver, len);

		if (r != 0) {
			s->failed[atomic_load(&s->phase)]++;
			if (!s->phase)
				snprintf(s->why, sizeof(s->why), "put of %u before the kill: %lld", id, (long long)r);
			if (r != -ECONNRESET && r != -ETIMEDOUT && r != -EHOSTDOWN && r != -EIO && r != -ECANCELED) {
				s->wrong++;
				snprintf(s->why, sizeof(s->why), "put of %u: %lld", id, (long long)r);
			}
			continue;
		}
		r = get(s->inst, id, ver, len, &ok);
		if (r == (int64_t)len && ok) {
			s->ok[phase]++;
		} else if (r > 0) {
			s->wrong++;
			snprintf(s->why, sizeof(s->why), "object %u version %u: %lld other bytes", id, ver,
				 (long long)r);
		} else {
			s->failed[atomic_load(&s->phase)]++;
			if (!s->phase)
				snprintf(s->why, sizeof(s->why), "get of %u before the kill: %lld", id, (long long)r);
		}
	}
	return NULL;
}

START_TEST(server_killed)
{
	static const char *const fast = "connect_timeout_ms=300,io_timeout_ms=1000,retry_ms=200,retry_max_ms=400";
	struct stream s = { .id0 = 1 };
	pthread_t t;
	char e[256];
	void *inst;
	int ok;

	up(1, "--size 32M");
	inst = must_open(NULL, fast);
	s.inst = must_open(NULL, fast);
	ck_assert_int_eq(put(inst, 5000, 1, 8192), 0);
	pthread_create(&t, NULL, streamer, &s);
	usleep(500 * 1000);
	s.phase = 1;
	hct_memd_kill(&memd, 0, SIGKILL);
	usleep(800 * 1000);
	/* while it is dead: misses, puts refused, nothing hangs */
	ck_assert_int_eq(get(inst, 5000, 1, 8192, &ok), -ENOENT);
	ck_assert_int_eq(one(inst, HC_BE_OP_EXISTS, 5000, NULL, 0), 0);
	ck_assert_int_eq(put(inst, 5001, 1, 8192), -EHOSTDOWN);
	ck_assert_msg(hct_memd_restart(&memd, 0, e, sizeof(e)) == 0, "%s", e);
	usleep(1500 * 1000); /* the back-off passes; the server is used again */
	s.phase = 2;
	usleep(1000 * 1000);
	s.stop = 1;
	pthread_join(t, NULL);
	fprintf(stderr, "server_killed: ok %u %u %u, failed %u %u %u\n", s.ok[0], s.ok[1], s.ok[2], s.failed[0],
		s.failed[1], s.failed[2]);
	ck_assert_msg(s.wrong == 0, "%s", s.why);
	ck_assert_msg(s.failed[0] == 0, "%s", s.why);
	ck_assert_msg(s.ok[0] > 0 && s.ok[2] > 0, "ok before %u, after %u", s.ok[0], s.ok[2]);
	/* the restarted server started empty, and is used */
	ck_assert_int_eq(get(inst, 5000, 1, 8192, &ok), -ENOENT);
	ck_assert_int_eq(put(inst, 5000, 2, 8192), 0);
	ck_assert_int_eq(get(inst, 5000, 2, 8192, &ok), 8192);
	ck_assert(ok);
	ck_assert_uint_ge(hct_be_stat(B, inst, "server_failures"), 1);
	ck_assert_uint_ge(hct_be_stat(B, inst, "connects"), 2);
	B->close(s.inst);
	B->close(inst);
}
END_TEST

/* SIGTERM while a client streams puts over TCP (whose copies the server's
 * own worker does): the server stops within a second and exits 0. */
START_TEST(stop_under_load)
{
	static const char *const fast = "connect_timeout_ms=300,io_timeout_ms=1000,retry_ms=200,retry_max_ms=400";
	struct stream st = { .id0 = 1 };
	pthread_t t;
	double t0;
	int status;

	up(1, "--size 32M");
	st.inst = must_open(NULL, fast);
	pthread_create(&t, NULL, streamer, &st);
	usleep(500 * 1000);
	ck_assert_uint_gt(st.ok[0], 0);
	t0 = hct_now();
	kill(memd.pid[0], SIGTERM);
	ck_assert_int_eq(waitpid(memd.pid[0], &status, 0), memd.pid[0]);
	memd.pid[0] = 0;
	ck_assert_msg(hct_now() - t0 < 3, "SIGTERM took %.1f s under load", hct_now() - t0);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "memd ended with status %#x under load", status);
	st.stop = 1;
	pthread_join(t, NULL);
	ck_assert_msg(st.wrong == 0, "%s", st.why);
	B->close(st.inst);
}
END_TEST

/* A server that answers nothing (SIGSTOP): the ops in flight fail with
 * -ETIMEDOUT within io_timeout_ms, later ones are misses; after SIGCONT
 * it is used again. */
START_TEST(server_stopped)
{
	void *inst;
	int ok;
	double t0;

	up(1, "--size 8M");
	inst = must_open(NULL, "io_timeout_ms=400,connect_timeout_ms=300,retry_ms=100,retry_max_ms=200");
	ck_assert_int_eq(put(inst, 1, 1, 8192), 0);
	kill(memd.pid[0], SIGSTOP);
	t0 = hct_now();
	ck_assert_int_eq(get(inst, 1, 1, 8192, &ok), -ETIMEDOUT);
	ck_assert_msg(hct_now() - t0 < 3, "a hung server held a get %.1f s", hct_now() - t0);
	ck_assert_int_eq(get(inst, 1, 1, 8192, &ok), -ENOENT);
	kill(memd.pid[0], SIGCONT);
	for (double end = hct_now() + 10; put(inst, 2, 1, 8192) != 0;) {
		ck_assert_msg(hct_now() < end, "the server is not used again after SIGCONT");
		usleep(100 * 1000);
	}
	ck_assert_int_eq(get(inst, 2, 1, 8192, &ok), 8192);
	ck_assert(ok);
	ck_assert_uint_ge(hct_be_stat(B, inst, "timeouts"), 1);
	B->close(inst);
}
END_TEST

/* ---- a server that answers wrong: a proxy on the control connection */

struct proxy {
	int lfd, port, target;
	_Atomic int spoil; /* spoil item 1 of the next LOOKUP reply of 2 items or more */
	_Atomic int stop;
	pthread_t thread;
};

/* Forward what fd a has to fd b: 0, or -1 when a closed.  From the server
 * (whole messages kept in buf), a LOOKUP reply may be spoiled. */
static int pump(struct proxy *px, int a, int b, uint8_t *buf, size_t *len, int from_server)
{
	ssize_t n = read(a, buf + *len, (1u << 21) - *len);

	if (n <= 0)
		return -1;
	*len += (size_t)n;
	if (!from_server) {
		ck_assert_int_eq(write(b, buf, *len), (ssize_t)*len);
		*len = 0;
		return 0;
	}
	for (;;) {
		struct hc_mw_hdr h;
		size_t whole;

		if (*len < sizeof(h))
			return 0;
		memcpy(&h, buf, sizeof(h));
		whole = sizeof(h) + h.length;
		if (*len < whole)
			return 0;
		if (h.type == (HC_MW_LOOKUP | HC_MW_REPLY) && h.length >= 8 + 2 * sizeof(struct hc_mw_found) &&
		    atomic_exchange(&px->spoil, 0)) {
			struct hc_mw_found f;
			uint8_t *at = buf + sizeof(h) + 8 + sizeof(f);
			memcpy(&f, at, sizeof(f));
			f.status = 0;
			f.offset = UINT64_C(1) << 50; /* far outside any region */
			memcpy(at, &f, sizeof(f));
		}
		ck_assert_int_eq(write(b, buf, whole), (ssize_t)whole);
		memmove(buf, buf + whole, *len - whole);
		*len -= whole;
	}
}

static void *proxy_main(void *arg)
{
	struct proxy *px = arg;
	uint8_t *up = malloc(1u << 21), *down = malloc(1u << 21);

	while (!px->stop) {
		struct pollfd pf[2];
		size_t ul = 0, dl = 0;
		int c = accept(px->lfd, NULL, NULL), m;

		if (c < 0)
			continue;
		m = raw_connect(px->target);
		pf[0] = (struct pollfd){ .fd = c, .events = POLLIN };
		pf[1] = (struct pollfd){ .fd = m, .events = POLLIN };
		while (!px->stop && poll(pf, 2, 100) >= 0) {
			if ((pf[0].revents & (POLLIN | POLLHUP)) && pump(px, c, m, up, &ul, 0) < 0)
				break;
			if ((pf[1].revents & (POLLIN | POLLHUP)) && pump(px, m, c, down, &dl, 1) < 0)
				break;
		}
		close(c);
		close(m);
	}
	free(up);
	free(down);
	return NULL;
}

static void proxy_start(struct proxy *px, int target)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	struct timeval tv = { .tv_usec = 100000 };

	memset(px, 0, sizeof(*px));
	px->target = target;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	px->lfd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(bind(px->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(px->lfd, 4), 0);
	ck_assert_int_eq(getsockname(px->lfd, (struct sockaddr *)&a, &al), 0);
	setsockopt(px->lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)); /* accept wakes to see stop */
	px->port = ntohs(a.sin_port);
	pthread_create(&px->thread, NULL, proxy_main, px);
}

static void proxy_stop(struct proxy *px)
{
	px->stop = 1;
	pthread_join(px->thread, NULL);
	close(px->lfd);
}

/* A reply with one bad item of four: the server is failed, and all four
 * gets complete (none is left waiting); the server is then used again. */
START_TEST(bad_reply_item)
{
	struct hc_be_op op[4];
	struct iovec iov[4];
	struct hc_be_cqe c[4];
	uint64_t *buf = malloc(4 * 8192);
	char servers[64];
	struct proxy px;
	unsigned done = 0;
	void *inst;
	int ok;

	up(1, "--size 8M");
	proxy_start(&px, memd.port[0]);
	snprintf(servers, sizeof(servers), "127.0.0.1:%d", px.port);
	inst = must_open(servers, "retry_ms=100,retry_max_ms=200");
	for (uint32_t id = 1; id <= 4; id++)
		ck_assert_int_eq(put(inst, id, 1, 8192), 0);
	atomic_store(&px.spoil, 1);
	for (unsigned i = 0; i < 4; i++) {
		iov[i] = (struct iovec){ (uint8_t *)buf + i * 8192, 8192 };
		op[i] = (struct hc_be_op){ .opcode = HC_BE_OP_GET, .iovcnt = 1, .iov = &iov[i], .user_data = i };
		name_of(op[i].name, i + 1);
	}
	ck_assert_int_eq(B->submit(inst, op, 4), 4); /* one LOOKUP of four */
	for (double end = hct_now() + 10; done < 4; done += (unsigned)B->reap(inst, c + done, 4 - done, 100))
		ck_assert_msg(hct_now() < end, "%u of 4 gets never completed", 4 - done);
	for (unsigned i = 0; i < 4; i++)
		ck_assert_msg(c[i].result < 0, "get %llu: %lld from a reply that failed its server",
			      (unsigned long long)c[i].user_data, (long long)c[i].result);
	ck_assert_uint_ge(hct_be_stat(B, inst, "server_failures"), 1);
	for (double end = hct_now() + 10; put(inst, 9, 1, 8192) != 0;) {
		ck_assert_msg(hct_now() < end, "the server is not used again after a bad reply");
		usleep(50 * 1000);
	}
	ck_assert_int_eq(get(inst, 9, 1, 8192, &ok), 8192);
	ck_assert(ok);
	B->close(inst);
	proxy_stop(&px);
	free(buf);
}
END_TEST

/* ---- buffer_only: a pool that only stages, to memory servers */

/* A buffer_only pool far smaller than its data, under the service's
 * arbiter, writing to and reading from two memory servers: every byte comes
 * back, and every staged page is freed. */
START_TEST(buffer_only_pool)
{
	const char *name = hct_name();
	struct hct_spec ps;
	char spec[512], servers[256];
	struct hc_service_opts o = { .size = sizeof(struct hc_service_opts), .batch_pages = 4 };
	hc_service *svc;
	hc_key_t k[96];
	hc_pool *p;

	up(2, "--size 32M");
	hct_memd_servers(&memd, servers, sizeof(servers));
	snprintf(spec, sizeof(spec), "mori:servers=%s,transports=tcp", servers);
	o.backend = spec;
	hct_spec_init(&ps, name, 16);
	ps.spec.host_mode = HC_HOST_BUFFER_ONLY;
	ck_assert_msg(hc_pool_create(&ps.spec) == 0, "create %s: %s", name, hc_last_error());
	p = hct_attach(name, 0);
	svc = hct_service_start(name, &o);
	hct_keys(k, 96, 21);
	for (unsigned i = 0; i < 96; i += 12) /* 96 pages through a pool of 16 */
		hct_stage_write(p, k + i, 12, i);
	ck_assert(hct_drained(p));
	ck_assert_int_eq(hct_l3_exists(p, k, 96), 96);
	for (unsigned i = 0; i < 96; i += 12)
		hct_prefetch_read(p, k + i, 12, i);
	ck_assert(hct_drained(p));
	ck_assert_uint_eq(hct_counter(p, HC_CTR_l3_prefetch_pages), 96);
	ck_assert_ok(hc_service_stop(svc));
	ck_assert_int_eq(hc_pool_check(p, HC_CHECK_QUIESCENT, hct_print_violation, NULL), 0);
	hc_pool_detach(p);
	hc_pool_destroy(name, NULL, HC_DESTROY_FORCE);
}
END_TEST

/* ---- a server in another network namespace, behind a veth pair */

static int sh(const char *cmd)
{
	int st = system(cmd);

	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The namespace and veth pair of other_namespace, named after the suite's
 * process: the teardown runs in that process (unchecked), so they go even
 * when the test's own process failed midway. */
static pid_t suite_pid;
static char made_ns[32];
static unsigned made_tag;

static void netns_names(void)
{
	made_tag = (unsigned)suite_pid % 60000;
	snprintf(made_ns, sizeof(made_ns), "hctmori%u", made_tag);
}

static void netns_sweep(void)
{
	char cmd[256];

	netns_names();
	snprintf(cmd, sizeof(cmd), "ip netns del %s 2>/dev/null; ip link del hcm%ua 2>/dev/null; true", made_ns,
		 made_tag);
	sh(cmd);
}

static uint64_t if_bytes(const char *ifname, const char *which)
{
	char path[128];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/%s_bytes", ifname, which);
	if ((f = fopen(path, "r"))) {
		if (fscanf(f, "%llu", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

/* The server in a network namespace of its own, reached through a veth
 * pair: the control connection and the transfers cross an interface, whose
 * counters show the objects' bytes both ways. */
START_TEST(other_namespace)
{
	char cmd[640], host[32], servers[64], e[256], veth[16];
	uint64_t rx0, tx0;
	void *inst;
	int ok, ret;

	netns_names();
	snprintf(veth, sizeof(veth), "hcm%ua", made_tag);
	snprintf(host, sizeof(host), "10.%u.%u.2", 200 + made_tag / 250 % 50, made_tag % 250);
	snprintf(cmd, sizeof(cmd),
		 "set -e; ip netns add %s; ip link add %s type veth peer name hcm%ub; ip link set hcm%ub netns %s; "
		 "ip addr add 10.%u.%u.1/30 dev %s; ip link set %s up; ip -n %s addr add %s/30 dev hcm%ub; "
		 "ip -n %s link set hcm%ub up; ip -n %s link set lo up",
		 made_ns, veth, made_tag, made_tag, made_ns, 200 + made_tag / 250 % 50, made_tag % 250, veth, veth,
		 made_ns, host, made_tag, made_ns, made_tag, made_ns);
	ret = sh(cmd);
	ck_assert_msg(ret == 0, "cannot make a network namespace and a veth pair (exit %d): this test runs as root",
		      ret);
	setenv("UCX_TLS", "tcp", 1);
	ret = hct_memd_start_in(&memd, 1, made_ns, host, "--size 16M", e, sizeof(e));
	ck_assert_msg(ret == 0, "%s", e);
	snprintf(servers, sizeof(servers), "%s:%d", host, memd.port[0]);
	rx0 = if_bytes(veth, "rx");
	tx0 = if_bytes(veth, "tx");
	inst = must_open(servers, NULL);
	for (uint32_t id = 0; id < 16; id++)
		ck_assert_int_eq(put(inst, id, 1, 256 << 10), 0);
	for (uint32_t id = 0; id < 16; id++) {
		ck_assert_int_eq(get(inst, id, 1, 256 << 10, &ok), 256 << 10);
		ck_assert(ok);
	}
	/* 4 MiB each way went through the veth */
	ck_assert_uint_ge(if_bytes(veth, "tx") - tx0, 16u << 18);
	ck_assert_uint_ge(if_bytes(veth, "rx") - rx0, 16u << 18);
	B->close(inst);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mori_backend");
	TCase *tc = tcase_create("mori");
	int ret;

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, bad_options);
	tcase_add_test(tc, round_trip);
	tcase_add_test(tc, full_server);
	tcase_add_test(tc, lease_keeps_object);
	tcase_add_test(tc, full_of_leases);
	tcase_add_test(tc, server_killed);
	tcase_add_test(tc, server_stopped);
	tcase_add_test(tc, stop_under_load);
	tcase_add_test(tc, buffer_only_pool);
	tcase_add_test(tc, bad_reply_item);
	suite_add_tcase(s, tc);
	tc = tcase_create("netns");
	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_unchecked_fixture(tc, netns_sweep, netns_sweep);
	tcase_add_test(tc, other_namespace);
	suite_add_tcase(s, tc);
	suite_pid = getpid();
	ret = hct_run(s);
	return ret;
}
