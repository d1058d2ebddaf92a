/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_memd.c - hicache-memd, the mori backend's memory server: a real
 * server (tests/memd.c) driven over raw TCP with the control protocol of
 * backends/mori/wire.h.  No UCX client is needed for what is tested here:
 * the directory's answers (offsets, leases, grants, eviction, expiry), the
 * protocol's checks (each kind of bad message closes its connection with
 * its reason logged, and only that one), stats and /metrics, the options,
 * and a clean stop.  The directory is also tested directly (dir.c is
 * compiled in) for what the wire cannot reach: a full lease table, leases
 * of different lengths expiring in their order, and the invariants after
 * a long random run.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hct.h"
#include "memd.h"
#include "../tools/memd/memd.h"
/* the directory itself, for the unit tests at the end */
#include "../tools/memd/dir.c"

#define KIB   1024u
#define IO_MS 5000

static struct hct_memd md;
static char logdir[64], logpath[128];

static void setup(void)
{
	hct_mkdtemp(logdir, sizeof(logdir), "memd");
	snprintf(logpath, sizeof(logpath), "%s/memd.log", logdir);
}

static void teardown(void)
{
	hct_memd_stop(&md);
	hct_rmtree(logdir);
}

/* One server with these arguments, its stderr in logpath. */
static void server_up(const char *args)
{
	char e[512];

	ck_assert_msg(hct_memd_start_log(&md, 1, args, logpath, e, sizeof(e)) == 0, "%s", e);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait up to 3 s for the server's log to say s; fails the test if not. */
static void log_has(const char *s)
{
	static char buf[1 << 16];
	long long until = now_ms() + 3000;

	for (;;) {
		int fd = open(logpath, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

		if (fd >= 0)
			close(fd);
		buf[n > 0 ? n : 0] = '\0';
		if (strstr(buf, s))
			return;
		ck_assert_msg(now_ms() < until, "the server's log does not say \"%s\"; it has:\n%s", s, buf);
		poll(NULL, 0, 20);
	}
}

/* ---- the wire */

static int conn_to(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { .tv_sec = IO_MS / 1000 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_msg(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect to 127.0.0.1:%d: %s", port,
		      strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

		ck_assert_msg(w > 0, "send: %s", w < 0 ? strerror(errno) : "nothing sent");
		b += w;
		n -= (size_t)w;
	}
}

/* Exactly n bytes: 0, or -1 at EOF or on an error (a timeout included). */
static int recv_all(int fd, void *p, size_t n)
{
	uint8_t *b = p;

	while (n) {
		ssize_t r = recv(fd, b, n, 0);

		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* A header as given and body_len bytes of body, in one send: two would
 * wait on each other (Nagle and delayed acks). */
static void send_raw(int fd, const struct hc_mw_hdr *h, const void *body, uint32_t body_len)
{
	uint8_t *m = malloc(sizeof(*h) + body_len);

	ck_assert_ptr_nonnull(m);
	memcpy(m, h, sizeof(*h));
	if (body_len)
		memcpy(m + sizeof(*h), body, body_len);
	send_all(fd, m, sizeof(*h) + body_len);
	free(m);
}

static void send_msg(int fd, uint16_t version, uint16_t type, uint32_t seq, const void *body, uint32_t len)
{
	struct hc_mw_hdr h = { .magic = HC_MW_MAGIC, .version = version, .type = type, .length = len, .seq = seq };

	send_raw(fd, &h, body, len);
}

/* A reply to a request of type with seq; its body (up to cap) in body,
 * its length returned. */
static uint32_t recv_reply(int fd, uint16_t type, uint32_t seq, void *body, size_t cap)
{
	struct hc_mw_hdr h;

	ck_assert_msg(recv_all(fd, &h, sizeof(h)) == 0, "no reply to a request of type %u: %s", type, strerror(errno));
	ck_assert_uint_eq(h.magic, HC_MW_MAGIC);
	ck_assert_uint_eq(h.type, type | HC_MW_REPLY);
	ck_assert_uint_eq(h.seq, seq);
	ck_assert_uint_le(h.length, cap);
	ck_assert_int_eq(recv_all(fd, body, h.length), 0);
	return h.length;
}

/* The server closed fd (without a reply). */
static void closed(int fd)
{
	uint8_t b[64];
	ssize_t r = recv(fd, b, sizeof(b), 0);

	ck_assert_msg(r == 0 || (r < 0 && errno == ECONNRESET), "the connection is still open (recv: %zd, %s)", r,
		      r < 0 ? strerror(errno) : "bytes");
	close(fd);
}

static struct hc_mw_welcome hello_lease(int fd, uint32_t lease_ms)
{
	struct hc_mw_hello hi = { .version_min = HC_MW_VERSION_MIN,
				  .version_max = HC_MW_VERSION_MAX,
				  .lease_ms = lease_ms };
	static uint8_t body[sizeof(struct hc_mw_welcome) + 2 * HC_MW_BLOB_MAX];
	struct hc_mw_welcome w;
	uint32_t n;

	send_msg(fd, HC_MW_VERSION_MAX, HC_MW_HELLO, 77, &hi, sizeof(hi));
	n = recv_reply(fd, HC_MW_HELLO, 77, body, sizeof(body));
	ck_assert_uint_ge(n, sizeof(w));
	memcpy(&w, body, sizeof(w));
	ck_assert_uint_eq(n, sizeof(w) + w.addr_len + w.rkey_len);
	return w;
}

/* A connection to server i that said HELLO. */
static int client(unsigned i)
{
	int fd = conn_to(md.port[i]);

	hello_lease(fd, 0);
	return fd;
}

static uint32_t seqno = 1000;

/* A request of n items (item bytes each) and its results (res bytes each)
 * into out. */
static void request(int fd, uint16_t type, uint32_t flags, const void *items, size_t item, uint32_t n, void *out,
		    size_t res)
{
	static uint8_t buf[sizeof(struct hc_mw_count) + HC_MW_BATCH_MAX * sizeof(struct hc_mw_alloc)];
	struct hc_mw_count c = { .count = n, .flags = flags };
	uint32_t seq = ++seqno, len;

	ck_assert_uint_le(sizeof(c) + item * n, sizeof(buf));
	memcpy(buf, &c, sizeof(c));
	if (n)
		memcpy(buf + sizeof(c), items, item * n);
	send_msg(fd, HC_MW_VERSION_MAX, type, seq, buf, (uint32_t)(sizeof(c) + item * n));
	len = recv_reply(fd, type, seq, buf, sizeof(buf));
	memcpy(&c, buf, sizeof(c));
	ck_assert_uint_eq(c.count, n);
	ck_assert_uint_eq(len, sizeof(c) + res * n);
	memcpy(out, buf + sizeof(c), res * n);
}

static void name_of(uint8_t name[HC_MW_NAME_BYTES], unsigned id)
{
	memset(name, 0, HC_MW_NAME_BYTES);
	snprintf((char *)name, HC_MW_NAME_BYTES, "object-%u", id);
}

static struct hc_mw_grant alloc1(int fd, unsigned id, uint64_t length)
{
	struct hc_mw_alloc a = { .length = length };
	struct hc_mw_grant g;

	name_of(a.name, id);
	request(fd, HC_MW_ALLOC, 0, &a, sizeof(a), 1, &g, sizeof(g));
	return g;
}

static int token_op(int fd, uint16_t type, uint64_t token)
{
	struct hc_mw_status st;

	request(fd, type, 0, &token, sizeof(token), 1, &st, sizeof(st));
	ck_assert_uint_eq(st.reserved, 0);
	return st.status;
}

static int commit1(int fd, uint64_t token)
{
	return token_op(fd, HC_MW_COMMIT, token);
}

static int release1(int fd, uint64_t token)
{
	return token_op(fd, HC_MW_RELEASE, token);
}

static struct hc_mw_found lookup1(int fd, unsigned id, bool lease)
{
	uint8_t name[HC_MW_NAME_BYTES];
	struct hc_mw_found f;

	name_of(name, id);
	request(fd, HC_MW_LOOKUP, lease ? HC_MW_LOOKUP_LEASE : 0, name, sizeof(name), 1, &f, sizeof(f));
	return f;
}

static int delete1(int fd, unsigned id)
{
	uint8_t name[HC_MW_NAME_BYTES];
	struct hc_mw_status st;

	name_of(name, id);
	request(fd, HC_MW_DELETE, 0, name, sizeof(name), 1, &st, sizeof(st));
	return st.status;
}

/* Store object id of length bytes: its offset. */
static uint64_t put1(int fd, unsigned id, uint64_t length)
{
	struct hc_mw_grant g = alloc1(fd, id, length);

	ck_assert_msg(g.status == 0, "ALLOC of object %u (%llu bytes): %d", id, (unsigned long long)length, g.status);
	ck_assert_int_eq(commit1(fd, g.token), 0);
	return g.offset;
}

/* A stat by name, from a STATS request. */
static uint64_t stat_of(int fd, const char *name)
{
	struct hc_mw_stat st[HC_MW_STATS_MAX];
	struct hc_mw_count c = { 0 };
	uint8_t body[sizeof(c) + sizeof(st)];
	uint32_t seq = ++seqno, len;

	send_msg(fd, HC_MW_VERSION_MAX, HC_MW_STATS, seq, &c, sizeof(c));
	len = recv_reply(fd, HC_MW_STATS, seq, body, sizeof(body));
	memcpy(&c, body, sizeof(c));
	ck_assert_uint_eq(len, sizeof(c) + c.count * sizeof(st[0]));
	memcpy(st, body + sizeof(c), c.count * sizeof(st[0]));
	for (uint32_t i = 0; i < c.count; i++)
		if (strncmp(st[i].name, name, sizeof(st[i].name)) == 0)
			return st[i].value;
	ck_abort_msg("STATS has no stat %s", name);
	return 0;
}

/* ---- tests */

/* HELLO: the server's figures, a shorter lease when asked, and a new
 * instance id at each start; a client of other versions is refused. */
START_TEST(hello_and_versions)
{
	struct hc_mw_hello hi = { .version_min = 2, .version_max = 5 };
	struct hc_mw_welcome w, w2;
	char e[256];
	int fd;

	server_up("--size 1M --lease-ms 3000 --batch-max 16");
	fd = conn_to(md.port[0]);
	w = hello_lease(fd, 0);
	ck_assert_uint_eq(w.version, 1);
	ck_assert_uint_eq(w.lease_ms, 3000);
	ck_assert_uint_eq(w.size, 1u << 20);
	ck_assert_uint_eq(w.batch_max, 16);
	ck_assert_uint_ne(w.base, 0);
	ck_assert_uint_gt(w.addr_len, 0);
	ck_assert_uint_gt(w.rkey_len, 0);
	ck_assert_uint_eq(w.reserved, 0);
	ck_assert_uint_eq(w.reserved2, 0);
	close(fd);
	/* a shorter lease is granted; a longer one is cut to the server's */
	fd = conn_to(md.port[0]);
	ck_assert_uint_eq(hello_lease(fd, 250).lease_ms, 250);
	close(fd);
	fd = conn_to(md.port[0]);
	ck_assert_uint_eq(hello_lease(fd, 999999).lease_ms, 3000);
	close(fd);
	/* no version in common */
	fd = conn_to(md.port[0]);
	send_msg(fd, 2, HC_MW_HELLO, 1, &hi, sizeof(hi));
	closed(fd);
	log_has("bad message: the client speaks protocol versions 2..5 and this server 1..1: none in common");
	/* a restarted server is another instance */
	hct_memd_kill(&md, 0, SIGKILL);
	ck_assert_msg(hct_memd_restart(&md, 0, e, sizeof(e)) == 0, "%s", e);
	fd = conn_to(md.port[0]);
	w2 = hello_lease(fd, 0);
	ck_assert_uint_ne(w2.instance, w.instance);
	close(fd);
}
END_TEST

/* ALLOC, COMMIT, LOOKUP, RELEASE and DELETE in batches: aligned extents
 * that do not overlap, results in item order, leases and their ends. */
START_TEST(round_trip)
{
	static const uint64_t lens[] = { 1, 4096, 4097, 10000, 65536 };
	struct hc_mw_alloc a[5];
	struct hc_mw_grant g[5];
	struct hc_mw_found f[6];
	struct hc_mw_status st[6];
	uint64_t tokens[5];
	uint8_t names[6][HC_MW_NAME_BYTES];
	int fd;

	server_up("--size 1M");
	fd = client(0);
	for (unsigned i = 0; i < 5; i++) {
		name_of(a[i].name, i);
		a[i].length = lens[i];
	}
	request(fd, HC_MW_ALLOC, 0, a, sizeof(a[0]), 5, g, sizeof(g[0]));
	for (unsigned i = 0; i < 5; i++) {
		ck_assert_int_eq(g[i].status, 0);
		ck_assert_uint_eq(g[i].offset % HC_MW_ALIGN, 0);
		ck_assert_uint_ne(g[i].token, 0);
		for (unsigned j = 0; j < i; j++) /* [offset, offset + length) apart */
			ck_assert(g[i].offset >= g[j].offset + lens[j] || g[j].offset >= g[i].offset + lens[i]);
		tokens[i] = g[i].token;
	}
	/* not visible before COMMIT */
	ck_assert_int_eq(lookup1(fd, 0, false).status, -ENOENT);
	request(fd, HC_MW_COMMIT, 0, tokens, sizeof(tokens[0]), 5, st, sizeof(st[0]));
	for (unsigned i = 0; i < 5; i++)
		ck_assert_int_eq(st[i].status, 0);
	/* a grant commits once */
	ck_assert_int_eq(commit1(fd, tokens[0]), -ESTALE);
	for (unsigned i = 0; i < 6; i++)
		name_of(names[i], i);
	request(fd, HC_MW_LOOKUP, 0, names, HC_MW_NAME_BYTES, 6, f, sizeof(f[0]));
	for (unsigned i = 0; i < 5; i++) {
		ck_assert_int_eq(f[i].status, 0);
		ck_assert_uint_eq(f[i].offset, g[i].offset);
		ck_assert_uint_eq(f[i].length, lens[i]);
		ck_assert_uint_eq(f[i].lease, 0);
	}
	ck_assert_int_eq(f[5].status, -ENOENT);
	request(fd, HC_MW_LOOKUP, HC_MW_LOOKUP_LEASE, names, HC_MW_NAME_BYTES, 2, f, sizeof(f[0]));
	ck_assert_uint_ne(f[0].lease, 0);
	ck_assert_uint_ne(f[1].lease, f[0].lease);
	ck_assert_uint_eq(stat_of(fd, "leases"), 2);
	ck_assert_int_eq(release1(fd, f[0].lease), 0);
	ck_assert_int_eq(release1(fd, f[0].lease), -ENOENT);
	ck_assert_int_eq(release1(fd, f[1].lease), 0);
	/* a lookup's lease is not a grant */
	ck_assert_int_eq(commit1(fd, f[1].lease), -EINVAL);
	ck_assert_int_eq(release1(fd, 12345678), -ENOENT);
	request(fd, HC_MW_DELETE, 0, names, HC_MW_NAME_BYTES, 6, st, sizeof(st[0]));
	for (unsigned i = 0; i < 5; i++)
		ck_assert_int_eq(st[i].status, 0);
	ck_assert_int_eq(st[5].status, -ENOENT);
	ck_assert_int_eq(lookup1(fd, 3, false).status, -ENOENT);
	ck_assert_int_eq(delete1(fd, 3), -ENOENT);
	/* a grant given up frees its bytes */
	g[0] = alloc1(fd, 9, 1u << 20);
	ck_assert_int_eq(g[0].status, 0);
	ck_assert_int_eq(release1(fd, g[0].token), 0);
	ck_assert_int_eq(commit1(fd, g[0].token), -ESTALE);
	ck_assert_uint_eq(stat_of(fd, "used_bytes"), 0);
	close(fd);
}
END_TEST

/* STATS: every stat once, named [a-z0-9_], and the counts of what was done. */
START_TEST(stats)
{
	struct hc_mw_stat st[HC_MW_STATS_MAX];
	struct hc_mw_count c = { 0 };
	uint8_t body[sizeof(c) + sizeof(st)];
	int fd;

	server_up("--size 256K");
	fd = client(0);
	put1(fd, 1, 5000);
	put1(fd, 2, 100);
	ck_assert_int_eq(lookup1(fd, 1, false).status, 0);
	ck_assert_int_eq(lookup1(fd, 3, false).status, -ENOENT);
	ck_assert_int_eq(alloc1(fd, 4, 1u << 20).status, -ENOSPC);
	send_msg(fd, HC_MW_VERSION_MAX, HC_MW_STATS, 5, &c, sizeof(c));
	recv_reply(fd, HC_MW_STATS, 5, body, sizeof(body));
	memcpy(&c, body, sizeof(c));
	ck_assert_uint_eq(c.count, MEMD_ST__COUNT);
	memcpy(st, body + sizeof(c), c.count * sizeof(st[0]));
	for (uint32_t i = 0; i < c.count; i++) {
		size_t n = strnlen(st[i].name, sizeof(st[i].name));

		ck_assert_uint_gt(n, 0);
		ck_assert_uint_lt(n, sizeof(st[i].name));
		ck_assert_uint_eq(strspn(st[i].name, "abcdefghijklmnopqrstuvwxyz0123456789_"), n);
		for (uint32_t j = 0; j < i; j++)
			ck_assert_str_ne(st[i].name, st[j].name);
	}
	ck_assert_uint_eq(stat_of(fd, "region_bytes"), 256 * KIB);
	ck_assert_uint_eq(stat_of(fd, "objects"), 2);
	ck_assert_uint_eq(stat_of(fd, "object_bytes"), 5100);
	ck_assert_uint_eq(stat_of(fd, "used_bytes"), 3 * 4096);
	ck_assert_uint_eq(stat_of(fd, "free_bytes"), 256 * KIB - 3 * 4096);
	ck_assert_uint_eq(stat_of(fd, "lookups"), 2);
	ck_assert_uint_eq(stat_of(fd, "hits"), 1);
	ck_assert_uint_eq(stat_of(fd, "misses"), 1);
	ck_assert_uint_eq(stat_of(fd, "allocs"), 2);
	ck_assert_uint_eq(stat_of(fd, "alloc_nospc"), 1);
	ck_assert_uint_eq(stat_of(fd, "commits"), 2);
	ck_assert_uint_eq(stat_of(fd, "clients"), 1);
	ck_assert_uint_eq(stat_of(fd, "connections"), 1);
	close(fd);
}
END_TEST

/* Lengths that can never fit, or are nothing, are refused; the whole
 * region can be one object. */
START_TEST(too_big)
{
	int fd;

	server_up("--size 64K");
	fd = client(0);
	ck_assert_int_eq(alloc1(fd, 1, 64 * KIB + 1).status, -ENOSPC);
	ck_assert_int_eq(alloc1(fd, 1, UINT64_MAX).status, -ENOSPC);
	ck_assert_int_eq(alloc1(fd, 1, 0).status, -EINVAL);
	ck_assert_uint_eq(put1(fd, 1, 64 * KIB), 0);
	ck_assert_uint_eq(stat_of(fd, "alloc_invalid"), 1);
	close(fd);
}
END_TEST

/* A full region makes room by evicting the least recently used object;
 * a leased lookup counts as a use. */
START_TEST(lru_eviction)
{
	struct hc_mw_found f;
	int fd;

	server_up("--size 64K");
	fd = client(0);
	for (unsigned i = 0; i < 16; i++)
		put1(fd, i, 4096);
	ck_assert_uint_eq(stat_of(fd, "free_bytes"), 0);
	f = lookup1(fd, 0, true);
	ck_assert_int_eq(f.status, 0);
	ck_assert_int_eq(release1(fd, f.lease), 0);
	/* object 1 is now the coldest: its unit is the one free */
	ck_assert_uint_eq(put1(fd, 100, 4096), 4096);
	ck_assert_int_eq(lookup1(fd, 1, false).status, -ENOENT);
	ck_assert_int_eq(lookup1(fd, 0, false).status, 0);
	ck_assert_int_eq(lookup1(fd, 2, false).status, 0);
	ck_assert_uint_eq(stat_of(fd, "evictions"), 1);
	/* three units: the next coldest go until three adjacent units are free */
	ck_assert_uint_eq(put1(fd, 101, 3 * 4096), 2 * 4096);
	for (unsigned i = 2; i <= 4; i++)
		ck_assert_int_eq(lookup1(fd, i, false).status, -ENOENT);
	ck_assert_int_eq(lookup1(fd, 5, false).status, 0);
	ck_assert_int_eq(lookup1(fd, 0, false).status, 0);
	ck_assert_uint_eq(stat_of(fd, "evictions"), 4);
	ck_assert_uint_eq(stat_of(fd, "objects"), 14);
	close(fd);
}
END_TEST

/* A leased object is neither evicted nor its bytes given to another, with
 * the region full; once released, it can go. */
START_TEST(leased_survives)
{
	struct hc_mw_found f, f2;
	struct hc_mw_grant g;
	int fd;

	server_up("--size 64K");
	fd = client(0);
	for (unsigned i = 0; i < 16; i++)
		put1(fd, i, 4096);
	f = lookup1(fd, 7, true);
	ck_assert_int_eq(f.status, 0);
	for (unsigned i = 100; i < 140; i++)
		ck_assert_uint_ne(put1(fd, i, 4096), f.offset);
	f2 = lookup1(fd, 7, false);
	ck_assert_int_eq(f2.status, 0);
	ck_assert_uint_eq(f2.offset, f.offset);
	/* the whole region cannot be had while one unit is leased */
	g = alloc1(fd, 200, 64 * KIB);
	ck_assert_int_eq(g.status, -EBUSY);
	ck_assert_uint_eq(stat_of(fd, "alloc_busy"), 1);
	ck_assert_int_eq(lookup1(fd, 7, false).status, 0);
	ck_assert_int_eq(release1(fd, f.lease), 0);
	ck_assert_uint_eq(put1(fd, 200, 64 * KIB), 0);
	ck_assert_int_eq(lookup1(fd, 7, false).status, -ENOENT);
	close(fd);
}
END_TEST

/* Leases outlive their connection: a closed connection's lease still
 * holds its bytes until it expires. */
START_TEST(lease_outlives_connection)
{
	struct hc_mw_found f;
	int fd, fd2;

	server_up("--size 64K --lease-ms 400");
	fd = client(0);
	put1(fd, 1, 64 * KIB);
	f = lookup1(fd, 1, true);
	ck_assert_int_eq(f.status, 0);
	close(fd);
	fd2 = client(0);
	ck_assert_int_eq(alloc1(fd2, 2, 4096).status, -EBUSY);
	poll(NULL, 0, 600);
	ck_assert_uint_eq(put1(fd2, 2, 4096), 0);
	ck_assert_uint_eq(stat_of(fd2, "leases_expired"), 1);
	close(fd2);
}
END_TEST

/* An uncommitted grant expires: its COMMIT is -ESTALE and its bytes are
 * free again; an expired read lease cannot be released.  Both by the
 * server's --lease-ms and by a shorter lease asked in HELLO. */
START_TEST(grant_expires)
{
	struct hc_mw_grant g;
	struct hc_mw_found f;
	int fd, fd2;

	server_up("--size 64K --lease-ms 300");
	fd = client(0);
	g = alloc1(fd, 1, 64 * KIB);
	ck_assert_int_eq(g.status, 0);
	ck_assert_int_eq(alloc1(fd, 2, 4096).status, -EBUSY);
	poll(NULL, 0, 500);
	ck_assert_uint_eq(stat_of(fd, "grants"), 0);
	ck_assert_uint_eq(stat_of(fd, "used_bytes"), 0);
	ck_assert_int_eq(commit1(fd, g.token), -ESTALE);
	ck_assert_int_eq(lookup1(fd, 1, false).status, -ENOENT);
	ck_assert_uint_eq(stat_of(fd, "grants_expired"), 1);
	ck_assert_uint_eq(stat_of(fd, "commit_stale"), 1);
	put1(fd, 3, 4096);
	f = lookup1(fd, 3, true);
	poll(NULL, 0, 500);
	ck_assert_int_eq(release1(fd, f.lease), -ENOENT);
	close(fd);
	hct_memd_stop(&md);

	/* 10 s by default, 200 ms for a client that asks */
	server_up("--size 64K");
	fd = conn_to(md.port[0]);
	ck_assert_uint_eq(hello_lease(fd, 200).lease_ms, 200);
	fd2 = client(0);
	g = alloc1(fd, 1, 4096);
	put1(fd2, 2, 4096);
	f = lookup1(fd2, 2, true);
	poll(NULL, 0, 400);
	ck_assert_int_eq(commit1(fd, g.token), -ESTALE);
	ck_assert_int_eq(release1(fd2, f.lease), 0);
	close(fd);
	close(fd2);
}
END_TEST

/* COMMIT replaces an older object of the same name at once; the old bytes
 * stay allocated while a lease reads them, and are freed at its release. */
START_TEST(commit_replaces)
{
	struct hc_mw_found f1, f2;
	uint64_t o1, o2;
	int fd;

	server_up("--size 64K");
	fd = client(0);
	o1 = put1(fd, 1, 8192);
	f1 = lookup1(fd, 1, true);
	ck_assert_uint_eq(f1.offset, o1);
	o2 = put1(fd, 1, 4096);
	ck_assert_uint_ne(o2, o1);
	f2 = lookup1(fd, 1, false);
	ck_assert_uint_eq(f2.offset, o2);
	ck_assert_uint_eq(f2.length, 4096);
	ck_assert_uint_eq(stat_of(fd, "replaced"), 1);
	ck_assert_uint_eq(stat_of(fd, "objects"), 1);
	ck_assert_uint_eq(stat_of(fd, "retired"), 1);
	ck_assert_uint_eq(stat_of(fd, "used_bytes"), 8192 + 4096);
	/* the retired bytes are not handed out while leased */
	for (unsigned i = 10; i < 30; i++)
		ck_assert_uint_ne(put1(fd, i, 4096), o1);
	ck_assert_int_eq(release1(fd, f1.lease), 0);
	ck_assert_uint_eq(stat_of(fd, "retired"), 0);
	ck_assert_uint_eq(stat_of(fd, "retired_bytes"), 0);
	/* deleting a leased object retires it the same way */
	f1 = lookup1(fd, 25, true);
	ck_assert_int_eq(f1.status, 0);
	ck_assert_int_eq(delete1(fd, 25), 0);
	ck_assert_int_eq(lookup1(fd, 25, false).status, -ENOENT);
	ck_assert_uint_eq(stat_of(fd, "retired"), 1);
	ck_assert_int_eq(release1(fd, f1.lease), 0);
	ck_assert_uint_eq(stat_of(fd, "retired"), 0);
	close(fd);
}
END_TEST

/* Requests sent back to back without waiting are answered in order. */
START_TEST(pipelined)
{
	struct hc_mw_count c = { 0 };
	uint8_t body[sizeof(c) + HC_MW_STATS_MAX * sizeof(struct hc_mw_stat)];
	int fd;

	server_up("--size 64K");
	fd = client(0);
	for (uint32_t i = 0; i < 200; i++)
		send_msg(fd, HC_MW_VERSION_MAX, HC_MW_STATS, 5000 + i, &c, sizeof(c));
	for (uint32_t i = 0; i < 200; i++)
		recv_reply(fd, HC_MW_STATS, 5000 + i, body, sizeof(body));
	ck_assert_uint_eq(stat_of(fd, "requests"), 201);
	close(fd);
}
END_TEST

/* ---- bad messages: each closes its own connection with the reason in
 * the log; another connection goes on. */

struct bad {
	const char *what;
	bool hello; /* said HELLO first */
	struct hc_mw_hdr h;
	uint8_t body[80];
	uint32_t body_len; /* sent (h.length may say otherwise) */
	const char *reason;
};

static void bad_one(const struct bad *b, int other)
{
	int fd = conn_to(md.port[0]);

	if (b->hello)
		hello_lease(fd, 0);
	send_raw(fd, &b->h, b->body, b->body_len);
	closed(fd);
	log_has(b->reason);
	/* the other connection still works */
	ck_assert_uint_eq(stat_of(other, "region_bytes"), 64 * KIB);
}

#define HDR(v, t, len)                                                                                                 \
	{                                                                                                              \
		.magic = HC_MW_MAGIC, .version = (v), .type = (t), .length = (len), .seq = 9                           \
	}

START_TEST(bad_messages)
{
	static const struct bad bads[] = {
		{ "bad magic",
		  true,
		  { .magic = 0x50545448, .version = 1, .type = HC_MW_STATS, .length = 8 },
		  { 0 },
		  8,
		  "bad message: magic 0x50545448, not 0x444d4348" },
		{ "bad version",
		  true,
		  HDR(2, HC_MW_STATS, 8),
		  { 0 },
		  8,
		  "bad message: version 2 in a header, but HELLO chose version 1" },
		{ "oversize length",
		  true,
		  HDR(1, HC_MW_LOOKUP, HC_MW_BODY_MAX + 1),
		  { 0 },
		  0,
		  "bad message: a body of 1048577 bytes, more than the 1048576" },
		{ "count too large",
		  true,
		  HDR(1, HC_MW_COMMIT, 8 + 9 * 8),
		  { 9 },
		  8 + 9 * 8,
		  "bad message: a COMMIT of 9 items: give 1 to 8" },
		{ "count zero", true, HDR(1, HC_MW_DELETE, 8), { 0 }, 8, "bad message: a DELETE of 0 items" },
		{ "body length mismatch",
		  true,
		  HDR(1, HC_MW_COMMIT, 8 + 12),
		  { 2 },
		  8 + 12,
		  "bad message: a COMMIT of 2 items has a body of 24 bytes, not 20" },
		{ "body too short for a count",
		  true,
		  HDR(1, HC_MW_LOOKUP, 4),
		  { 1 },
		  4,
		  "bad message: a LOOKUP body of 4 bytes, too short for its count" },
		{ "request before HELLO",
		  false,
		  HDR(1, HC_MW_STATS, 8),
		  { 0 },
		  8,
		  "bad message: a message of type 7 (STATS) before HELLO" },
		{ "unknown type", true, HDR(1, 9, 8), { 1 }, 8, "bad message: unknown message type 9" },
		{ "a reply's type",
		  true,
		  HDR(1, HC_MW_STATS | HC_MW_REPLY, 8),
		  { 0 },
		  8,
		  "bad message: unknown message type 135 (a reply's)" },
		{ "nonzero reserved flags",
		  true,
		  HDR(1, HC_MW_RELEASE, 16),
		  { 1, 0, 0, 0, 4 },
		  16,
		  "bad message: RELEASE flags 0x4: none are defined, give 0" },
		{ "unknown lookup flag",
		  true,
		  HDR(1, HC_MW_LOOKUP, 8 + 64),
		  { 1, 0, 0, 0, 3 },
		  8 + 64,
		  "bad message: LOOKUP flags 0x3: only 0x1 (lease) is defined" },
		{ "STATS with items",
		  true,
		  HDR(1, HC_MW_STATS, 8),
		  { 1 },
		  8,
		  "bad message: STATS with count 1: give 0" },
		{ "HELLO twice",
		  true,
		  HDR(1, HC_MW_HELLO, 8),
		  { 1, 0, 1, 0 },
		  8,
		  "bad message: a second HELLO on a connection" },
		{ "HELLO of the wrong size",
		  false,
		  HDR(1, HC_MW_HELLO, 12),
		  { 1, 0, 1, 0 },
		  12,
		  "bad message: a HELLO body of 12 bytes, not 8" },
		{ "HELLO of an empty range",
		  false,
		  HDR(1, HC_MW_HELLO, 8),
		  { 3, 0, 1, 0 },
		  8,
		  "bad message: HELLO offers versions 3..1, an empty range" },
	};
	int other;

	server_up("--size 64K --batch-max 8");
	other = client(0);
	for (unsigned i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		if (i && i % 8 == 0)
			poll(NULL, 0, 1100); /* past the log's rate limit */
		bad_one(&bads[i], other);
	}
	ck_assert_uint_eq(stat_of(other, "bad_messages"), sizeof(bads) / sizeof(bads[0]));
	ck_assert_uint_eq(stat_of(other, "clients"), 1);
	/* a flood of them is logged at 10 lines a second, and the lines left
	 * out are counted in the next one */
	poll(NULL, 0, 1100);
	for (unsigned i = 0; i < 26; i++) {
		int fd = conn_to(md.port[0]);

		send_all(fd, &bads[0].h, sizeof(bads[0].h));
		closed(fd);
	}
	poll(NULL, 0, 1100);
	bad_one(&bads[1], other);
	log_has("more like it, not logged)");
	ck_assert_uint_eq(stat_of(other, "bad_messages"), sizeof(bads) / sizeof(bads[0]) + 27);
	close(other);
}
END_TEST

/* A client that sends requests and reads no reply is cut off once its
 * replies pile up past the bound, not served into the server's memory. */
START_TEST(unread_replies)
{
	enum { N = 200000, REQ = 16 + 8 + HC_MW_NAME_BYTES };
	uint8_t *p = malloc((size_t)N * REQ), body[64];
	int fd, other, sz = 64 * 1024;
	size_t off = 0, len = (size_t)N * REQ;
	unsigned sent;

	ck_assert_ptr_nonnull(p);
	server_up("--size 64K");
	other = client(0);
	fd = client(0);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	for (unsigned i = 0; i < N; i++) {
		struct hc_mw_hdr hh = { .magic = HC_MW_MAGIC,
					.version = 1,
					.type = HC_MW_LOOKUP,
					.length = REQ - 16,
					.seq = i };
		struct hc_mw_count c = { .count = 1 };

		memcpy(p + (size_t)i * REQ, &hh, sizeof(hh));
		memcpy(p + (size_t)i * REQ + 16, &c, sizeof(c));
		name_of(p + (size_t)i * REQ + 24, i);
	}
	/* 200000 lookups (17 MiB; their replies 11 MiB): the server stops
	 * reading this client once some of its replies wait, instead of
	 * reading on and buffering them all */
	for (long long until = now_ms() + 3000; off < len && now_ms() < until;) {
		ssize_t w = send(fd, p + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w > 0)
			off += (size_t)w;
		else
			usleep(10000);
	}
	ck_assert_msg(off < len, "all %zu bytes of requests went in without a reply read", len);
	/* it is not closed, and others are served meanwhile */
	ck_assert_uint_eq(stat_of(other, "clients"), 2);
	/* read, and every request sent whole is answered, in order */
	sent = (unsigned)(off / REQ);
	for (unsigned i = 0; i < sent; i++)
		recv_reply(fd, HC_MW_LOOKUP, i, body, sizeof(body));
	close(fd);
	close(other);
	free(p);
}
END_TEST

/* --max-clients: one more is refused with a logged line; a place freed
 * is taken again. */
START_TEST(max_clients)
{
	int a, b, c;

	server_up("--size 64K --max-clients 2");
	a = client(0);
	b = client(0);
	c = conn_to(md.port[0]);
	closed(c);
	log_has("refusing a connection from 127.0.0.1:");
	log_has("2 clients already (--max-clients)");
	ck_assert_uint_eq(stat_of(a, "refused"), 1);
	close(b);
	/* the server sees the close before the next connection */
	for (int i = 0; i < 100 && stat_of(a, "clients") != 1; i++)
		poll(NULL, 0, 10);
	c = client(0);
	ck_assert_uint_eq(stat_of(c, "clients"), 2);
	close(a);
	close(c);
}
END_TEST

/* SIGTERM stops it at once with status 0 and one line, clients or not;
 * SIGINT the same. */
START_TEST(sigterm)
{
	int st, fd, sigs[] = { SIGTERM, SIGINT };

	for (unsigned i = 0; i < 2; i++) {
		long long t0;
		pid_t pid;

		server_up("--size 1M");
		fd = client(0);
		put1(fd, 1, 4096);
		pid = md.pid[0];
		t0 = now_ms();
		ck_assert_int_eq(kill(pid, sigs[i]), 0);
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		md.pid[0] = 0;
		ck_assert_msg(now_ms() - t0 < 2000, "it took %lld ms to stop", now_ms() - t0);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
		log_has(i == 0 ? "SIGTERM from pid" : "SIGINT from pid");
		log_has("stopping (1 clients, 1 objects, 4096 bytes, all dropped)");
		closed(fd);
	}
}
END_TEST

/* Every wrong option: exit 2 and one line naming it and what to give. */
START_TEST(bad_options)
{
	static const struct {
		const char *args[4];
		const char *says;
	} bad[] = {
		{ { NULL }, "--size is missing: give the region's bytes" },
		{ { "--size", "0" }, "--size '0': give the region's bytes" },
		{ { "--size", "12X" }, "--size '12X': give the region's bytes" },
		{ { "--size", "-5" }, "--size '-5'" },
		{ { "--size", "99999999999T" }, "--size '99999999999T'" },
		{ { "--size", "1M", "--lease-ms", "0" }, "--lease-ms '0': give milliseconds from 1 to" },
		{ { "--size", "1M", "--batch-max", "2000" },
		  "--batch-max '2000': give a number of items from 1 to 1024" },
		{ { "--size", "1M", "--max-clients", "x" }, "--max-clients 'x': give a number from 1 to" },
		{ { "--size", "1M", "--backing", "disk" }, "--backing 'disk': give ucx, or file:PATH" },
		{ { "--size", "1M", "--backing", "file:" }, "--backing 'file:'" },
		{ { "--size", "1M", "--listen", "7470" }, "--listen '7470': give HOST:PORT" },
		{ { "--size", "1M", "--listen", "127.0.0.1:70000" }, "--listen '127.0.0.1:70000': give HOST:PORT" },
		{ { "--size", "1M", "--metrics-listen", "x" }, "--metrics-listen 'x': give HOST:PORT" },
		{ { "--size", "1M", "--log-level", "loud" }, "--log-level 'loud': give err, warn, info or debug" },
		{ { "--size", "1M", "--frobnicate" }, "unknown option '--frobnicate'" },
		{ { "--size", "1M", "extra" }, "unexpected argument 'extra'" },
		{ { "--size" }, "--size needs a value" },
	};
	char out[4096], err[4096];

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int st = hct_tool_run("hicache-memd", bad[i].args, out, sizeof(out), err, sizeof(err));

		ck_assert_msg(st == 2, "case %u: status %d, stderr: %s", i, st, err);
		ck_assert_msg(strstr(err, bad[i].says), "case %u: stderr \"%s\" does not say \"%s\"", i, err,
			      bad[i].says);
		ck_assert_msg(strchr(err, '\n') == err + strlen(err) - 1, "case %u: not one line: %s", i, err);
		ck_assert_str_eq(out, "");
	}
	{
		const char *help[] = { "--help", NULL }, *version[] = { "--version", NULL };

		ck_assert_int_eq(hct_tool_run("hicache-memd", help, out, sizeof(out), err, sizeof(err)), 0);
		ck_assert_ptr_nonnull(strstr(out, "--lease-ms N"));
		ck_assert_int_eq(hct_tool_run("hicache-memd", version, out, sizeof(out), err, sizeof(err)), 0);
		ck_assert_ptr_nonnull(strstr(out, "hicache-memd "));
	}
}
END_TEST

/* Failures to start are status 1 with the reason: a port in use, a
 * backing file that exists. */
START_TEST(start_failures)
{
	char out[4096], err[4096], listen[64], file[128];
	const char *busy[] = { "--size", "64K", "--listen", listen, NULL };
	const char *exists[] = { "--size", "64K", "--listen", "127.0.0.1:0", "--backing", file, NULL };
	int fd;

	server_up("--size 64K");
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", md.port[0]);
	ck_assert_int_eq(hct_tool_run("hicache-memd", busy, out, sizeof(out), err, sizeof(err)), 1);
	ck_assert_ptr_nonnull(strstr(err, "--listen 127.0.0.1:"));
	ck_assert_ptr_nonnull(strstr(err, "Address already in use (another server has that port"));
	ck_assert_str_eq(out, "");
	snprintf(file, sizeof(file), "file:%s/region", logdir);
	fd = open(file + 5, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(hct_tool_run("hicache-memd", exists, out, sizeof(out), err, sizeof(err)), 1);
	ck_assert_ptr_nonnull(strstr(err, "the file exists; give a path that does not"));
}
END_TEST

/* --backing file:PATH: the file is made, mapped and removed at once; the
 * region works the same. */
START_TEST(backing_file)
{
	char args[256], path[128];
	struct stat sb;
	int fd;

	snprintf(path, sizeof(path), "%s/region", logdir);
	snprintf(args, sizeof(args), "--size 256K --backing file:%s", path);
	server_up(args);
	ck_assert_int_eq(stat(path, &sb), -1);
	ck_assert_int_eq(errno, ENOENT);
	fd = client(0);
	ck_assert_uint_eq(put1(fd, 1, 256 * KIB), 0);
	ck_assert_uint_eq(lookup1(fd, 1, false).length, 256 * KIB);
	close(fd);
}
END_TEST

/* GET /metrics: the stats as Prometheus text; anything else, 404. */
static void http_get(int port, const char *path, char *buf, size_t len)
{
	char req[256];
	size_t got = 0;
	int fd = conn_to(port);

	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
	send_all(fd, req, strlen(req));
	for (;;) {
		ssize_t r = recv(fd, buf + got, len - 1 - got, 0);

		ck_assert_int_ge(r, 0);
		if (r == 0 || got + (size_t)r == len - 1) {
			got += (size_t)r;
			break;
		}
		got += (size_t)r;
	}
	buf[got] = '\0';
	close(fd);
}

START_TEST(metrics)
{
	static char buf[65536], logbuf[4096];
	const char *at;
	int fd, mport, lf;

	server_up("--size 256K --metrics-listen 127.0.0.1:0");
	lf = open(logpath, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(lf, 0);
	logbuf[read(lf, logbuf, sizeof(logbuf) - 1)] = '\0';
	close(lf);
	at = strstr(logbuf, "metrics at http://127.0.0.1:");
	ck_assert_msg(at, "the log does not say where the metrics are: %s", logbuf);
	mport = atoi(at + strlen("metrics at http://127.0.0.1:"));
	fd = client(0);
	put1(fd, 1, 5000);
	http_get(mport, "/metrics", buf, sizeof(buf));
	ck_assert_msg(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", buf);
	ck_assert_ptr_nonnull(strstr(buf, "# HELP hicache_memd_objects committed objects\n"));
	ck_assert_ptr_nonnull(strstr(buf, "# TYPE hicache_memd_objects gauge\nhicache_memd_objects 1\n"));
	ck_assert_ptr_nonnull(strstr(buf, "# TYPE hicache_memd_commits_total counter\nhicache_memd_commits_total 1\n"));
	ck_assert_ptr_nonnull(strstr(buf, "\nhicache_memd_object_bytes 5000\n"));
	ck_assert_ptr_nonnull(strstr(buf, "\nhicache_memd_region_bytes 262144\n"));
	ck_assert_ptr_nonnull(strstr(buf, "\nhicache_memd_clients 1\n"));
	http_get(mport, "/other", buf, sizeof(buf));
	ck_assert_msg(strncmp(buf, "HTTP/1.1 404 Not Found\r\n", 24) == 0, "%s", buf);
	/* the control port goes on after the scrapes */
	ck_assert_uint_eq(stat_of(fd, "objects"), 1);
	close(fd);
}
END_TEST

/* ---- the directory, directly */

static const struct memd_dir_params dparams = { .size = 64 * KIB, .max_leases = 4, .seed = 42 };

static void dcheck(const struct memd_dir *d)
{
	char why[256];

	ck_assert_msg(memd_dir_check(d, why, sizeof(why)) == 0, "%s", why);
}

static uint64_t dput(struct memd_dir *d, unsigned id, uint64_t length, uint64_t now)
{
	uint8_t name[HC_MW_NAME_BYTES];
	struct hc_mw_grant g;

	name_of(name, id);
	memd_dir_alloc(d, name, length, 1000, now, &g);
	ck_assert_int_eq(g.status, 0);
	ck_assert_int_eq(memd_dir_commit(d, g.token), 0);
	dcheck(d);
	return g.offset;
}

/* A full lease table refuses leases and grants with -EBUSY. */
START_TEST(dir_lease_table_full)
{
	struct memd_dir d;
	uint8_t name[HC_MW_NAME_BYTES];
	struct hc_mw_found f[5];
	struct hc_mw_grant g;

	ck_assert_int_eq(memd_dir_init(&d, &dparams), 0);
	dput(&d, 1, 100, 0);
	name_of(name, 1);
	for (unsigned i = 0; i < 5; i++)
		memd_dir_lookup(&d, name, 1000, 0, &f[i]);
	for (unsigned i = 0; i < 4; i++)
		ck_assert_int_eq(f[i].status, 0);
	ck_assert_int_eq(f[4].status, -EBUSY);
	memd_dir_alloc(&d, name, 100, 1000, 0, &g);
	ck_assert_int_eq(g.status, -EBUSY);
	ck_assert_uint_eq(d.st[MEMD_ST_lease_refusals], 1);
	ck_assert_int_eq(memd_dir_release(&d, f[0].lease), 0);
	memd_dir_alloc(&d, name, 100, 1000, 0, &g);
	ck_assert_int_eq(g.status, 0);
	dcheck(&d);
	memd_dir_fini(&d);
}
END_TEST

/* Leases of different lengths expire each at its own time. */
START_TEST(dir_expiry_order)
{
	static const uint32_t ms[] = { 500, 100, 300, 200 };
	struct memd_dir d;
	uint8_t name[HC_MW_NAME_BYTES];
	struct hc_mw_found f[4];

	ck_assert_int_eq(memd_dir_init(&d, &dparams), 0);
	dput(&d, 1, 100, 0);
	name_of(name, 1);
	for (unsigned i = 0; i < 4; i++) {
		memd_dir_lookup(&d, name, ms[i], 1000, &f[i]);
		ck_assert_int_eq(f[i].status, 0);
	}
	ck_assert_uint_eq(memd_dir_next_expiry(&d), 1100);
	memd_dir_sweep(&d, 1250);
	dcheck(&d);
	ck_assert_int_eq(memd_dir_release(&d, f[1].lease), -ENOENT);
	ck_assert_int_eq(memd_dir_release(&d, f[3].lease), -ENOENT);
	ck_assert_uint_eq(memd_dir_next_expiry(&d), 1300);
	ck_assert_int_eq(memd_dir_release(&d, f[2].lease), 0);
	ck_assert_uint_eq(memd_dir_next_expiry(&d), 1500);
	memd_dir_sweep(&d, 1500);
	ck_assert_int_eq(memd_dir_release(&d, f[0].lease), -ENOENT);
	ck_assert_uint_eq(memd_dir_next_expiry(&d), UINT64_MAX);
	ck_assert_uint_eq(d.st[MEMD_ST_leases_expired], 3);
	dcheck(&d);
	memd_dir_fini(&d);
}
END_TEST

/* Freed extents merge with their free neighbours: after every other
 * object goes, then the rest, the region is one free extent again. */
START_TEST(dir_coalesce)
{
	struct memd_dir d;
	uint8_t name[HC_MW_NAME_BYTES];

	ck_assert_int_eq(memd_dir_init(&d, &dparams), 0);
	for (unsigned i = 0; i < 16; i++)
		ck_assert_uint_eq(dput(&d, i, 4096, 0), i * 4096);
	for (unsigned i = 0; i < 16; i += 2) {
		name_of(name, i);
		ck_assert_int_eq(memd_dir_delete(&d, name), 0);
		dcheck(&d);
	}
	ck_assert_uint_eq(d.st[MEMD_ST_free_extents], 8);
	/* two units fit nowhere without evicting: the coldest unleased go */
	ck_assert_uint_eq(dput(&d, 100, 8192, 0), 0);
	ck_assert_uint_eq(d.st[MEMD_ST_evictions], 1);
	for (unsigned i = 1; i < 16; i += 2) {
		name_of(name, i);
		memd_dir_delete(&d, name);
		dcheck(&d);
	}
	name_of(name, 100);
	ck_assert_int_eq(memd_dir_delete(&d, name), 0);
	ck_assert_uint_eq(d.st[MEMD_ST_free_extents], 1);
	ck_assert_uint_eq(d.st[MEMD_ST_free_bytes], 64 * KIB);
	dcheck(&d);
	memd_dir_fini(&d);
}
END_TEST

/* The tables grow past their first size (1024) and still find everything. */
START_TEST(dir_many)
{
	struct memd_dir_params p = { .size = 8u << 20, .max_leases = 4096, .seed = 3 };
	struct memd_dir d;
	uint8_t name[HC_MW_NAME_BYTES];
	struct hc_mw_found f;

	ck_assert_int_eq(memd_dir_init(&d, &p), 0);
	for (unsigned i = 0; i < 2000; i++) {
		struct hc_mw_grant g;

		name_of(name, i);
		memd_dir_alloc(&d, name, 4096, 1000, 0, &g);
		ck_assert_uint_eq(g.token, (uint64_t)(i + 1) << 1 | 1);
	}
	ck_assert_uint_eq(d.st[MEMD_ST_grants], 2000);
	for (uint64_t t = 1; t <= 2000; t++)
		ck_assert_int_eq(memd_dir_commit(&d, t << 1 | 1), 0);
	for (unsigned i = 0; i < 2000; i++) {
		name_of(name, i);
		memd_dir_lookup(&d, name, 10 + i % 50, 0, &f);
		ck_assert_int_eq(f.status, 0);
		ck_assert_uint_eq(f.offset, (uint64_t)i * 4096);
	}
	ck_assert_uint_gt(d.names.mask, 1023);
	ck_assert_uint_gt(d.tokens.mask, 1023);
	dcheck(&d);
	memd_dir_sweep(&d, 30); /* the leases of 10 to 30 ms: 21 of every 50 */
	ck_assert_uint_eq(d.st[MEMD_ST_leases], 2000 - 21 * 40);
	dcheck(&d);
	memd_dir_fini(&d);
}
END_TEST

/* A long random run of every operation keeps every invariant. */
START_TEST(dir_random)
{
	struct memd_dir_params p = { .size = 256 * KIB, .max_leases = 64, .seed = 7 };
	struct memd_dir d;
	uint64_t x = 88172645463325252ull, now = 0, tokens[32] = { 0 };

	ck_assert_int_eq(memd_dir_init(&d, &p), 0);
	for (unsigned i = 0; i < 20000; i++) {
		uint8_t name[HC_MW_NAME_BYTES];
		unsigned r;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		r = (unsigned)(x >> 32);
		name_of(name, r % 40);
		now += r % 7;
		switch (r % 6) {
		case 0: {
			struct hc_mw_grant g;

			memd_dir_alloc(&d, name, 1 + (x >> 8) % (96 * KIB), 1 + r % 50, now, &g);
			if (g.status == 0)
				tokens[r % 32] = g.token;
			break;
		}
		case 1: {
			struct hc_mw_found f;

			memd_dir_lookup(&d, name, r % 3 ? 1 + r % 40 : 0, now, &f);
			if (f.status == 0 && f.lease)
				tokens[r % 32] = f.lease;
			break;
		}
		case 2:
			memd_dir_commit(&d, tokens[r % 32]);
			break;
		case 3:
			memd_dir_release(&d, tokens[r % 32]);
			break;
		case 4:
			memd_dir_delete(&d, name);
			break;
		case 5:
			memd_dir_sweep(&d, now);
			break;
		}
		dcheck(&d);
	}
	ck_assert_uint_gt(d.st[MEMD_ST_commits], 100);
	ck_assert_uint_gt(d.st[MEMD_ST_evictions], 10);
	memd_dir_sweep(&d, UINT64_MAX);
	ck_assert_uint_eq(d.st[MEMD_ST_grants] + d.st[MEMD_ST_leases] + d.st[MEMD_ST_retired], 0);
	dcheck(&d);
	memd_dir_fini(&d);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("memd");
	TCase *tc = tcase_create("server"), *td = tcase_create("dir");

	tcase_set_timeout(tc, 30);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, hello_and_versions);
	tcase_add_test(tc, round_trip);
	tcase_add_test(tc, stats);
	tcase_add_test(tc, too_big);
	tcase_add_test(tc, lru_eviction);
	tcase_add_test(tc, leased_survives);
	tcase_add_test(tc, lease_outlives_connection);
	tcase_add_test(tc, grant_expires);
	tcase_add_test(tc, commit_replaces);
	tcase_add_test(tc, pipelined);
	tcase_add_test(tc, bad_messages);
	tcase_add_test(tc, unread_replies);
	tcase_add_test(tc, max_clients);
	tcase_add_test(tc, sigterm);
	tcase_add_test(tc, bad_options);
	tcase_add_test(tc, start_failures);
	tcase_add_test(tc, backing_file);
	tcase_add_test(tc, metrics);
	suite_add_tcase(s, tc);
	tcase_set_timeout(td, 30);
	tcase_add_test(td, dir_lease_table_full);
	tcase_add_test(td, dir_expiry_order);
	tcase_add_test(td, dir_coalesce);
	tcase_add_test(td, dir_many);
	tcase_add_test(td, dir_random);
	suite_add_tcase(s, td);
	return hct_run(s);
}
