/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_memd.c - hicache-memd's control protocol and directory on hostile
 * bytes (tools/memd/proto.c and dir.c, with no I/O and no UCX): the input
 * is a stream of messages on up to four connections, each message led by
 * one control byte
 *
 *   bits 0-1  the connection it arrives on
 *   bit  2    fix it up: the right magic and version, and the length its
 *             count asks for, so that mutations reach the directory
 *   bits 3-7  how far the clock moves first, in 16 ms steps (leases last
 *             LEASE_MS here, so they expire in a few messages)
 *
 * then a 16-byte header and its body, fed as the server does: the header
 * first (a bad one closes the connection, which starts again, fresh), then
 * the whole message once its body is in the input.  After every message
 * the reply is checked (type, seq, count, each status one of those the
 * protocol allows, each extent inside the region) and so is every
 * invariant of the directory (memd_dir_check); any failure aborts.  At the
 * end every lease expires and nothing may be left held.
 *
 * Built with libFuzzer (tests/fuzz/fuzz-memd) when clang links it, and
 * always as tests/fuzz/replay_memd, which runs the seed corpus through it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/memd/memd.h"

#define REGION   (1u << 20)
#define LEASE_MS 1000u
#define BATCH    64u
#define CONNS    4
#define CTL_FIX  0x4u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t worker_addr[37] = "a worker address, opaque to memd";
static const uint8_t rkey[23] = "a packed rkey, opaque";

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...);

static void fail(const char *fmt, ...)
{
	va_list ap;

	fputs("fuzz_memd: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

static bool allowed(int32_t status)
{
	switch (-status) {
	case 0:
	case ENOENT:
	case EBUSY:
	case ENOSPC:
	case EINVAL:
	case ESTALE:
	case ENOMEM:
		return true;
	default:
		return false;
	}
}

/* The extent [offset, offset + length) is aligned and inside the region. */
static void check_extent(const char *what, uint64_t offset, uint64_t length)
{
	if (offset % HC_MW_ALIGN || offset >= REGION || length == 0 || length > REGION - offset)
		fail("%s: extent [%llu, +%llu) is not an aligned part of the region", what, (unsigned long long)offset,
		     (unsigned long long)length);
}

/* The reply to the request msg is the last out->len - from bytes of out. */
static void check_reply(const struct hc_mw_hdr *req, const uint8_t *body, const struct memd_buf *out, size_t from)
{
	const uint8_t *p = out->p + from;
	struct hc_mw_hdr h;
	struct hc_mw_count c;
	uint64_t rs;

	if (out->len - from < sizeof(h))
		fail("a reply shorter than a header");
	memcpy(&h, p, sizeof(h));
	if (h.magic != HC_MW_MAGIC || h.type != (req->type | HC_MW_REPLY) || h.seq != req->seq ||
	    h.length != out->len - from - sizeof(h))
		fail("a reply's header is wrong: type 0x%x seq %u length %u", h.type, h.seq, h.length);
	p += sizeof(h);
	if (req->type == HC_MW_HELLO) {
		struct hc_mw_welcome w;

		memcpy(&w, p, sizeof(w));
		if (w.size != REGION || w.addr_len != sizeof(worker_addr) || w.rkey_len != sizeof(rkey) ||
		    w.lease_ms == 0 || w.lease_ms > LEASE_MS || h.length != sizeof(w) + w.addr_len + w.rkey_len ||
		    memcmp(p + sizeof(w), worker_addr, w.addr_len) != 0)
			fail("a wrong HELLO reply");
		return;
	}
	memcpy(&c, p, sizeof(c));
	rs = hc_mw_result_size(req->type);
	if (c.flags || h.length != sizeof(c) + c.count * rs)
		fail("a reply of %u results of %llu bytes in %u bytes", c.count, (unsigned long long)rs, h.length);
	p += sizeof(c);
	for (uint32_t i = 0; i < c.count; i++, p += rs) {
		int32_t st;

		memcpy(&st, p, sizeof(st));
		if (req->type != HC_MW_STATS && !allowed(st))
			fail("a result of status %d", st);
		if (req->type == HC_MW_LOOKUP && st == 0) {
			struct hc_mw_found f;
			struct hc_mw_count rc;

			memcpy(&f, p, sizeof(f));
			memcpy(&rc, body, sizeof(rc));
			check_extent("LOOKUP", f.offset, f.length);
			if (!(rc.flags & HC_MW_LOOKUP_LEASE) != !f.lease)
				fail("a LOOKUP's lease is %llu with flags 0x%x", (unsigned long long)f.lease, rc.flags);
		}
		if (req->type == HC_MW_ALLOC && st == 0) {
			struct hc_mw_grant g;
			struct hc_mw_alloc a;

			memcpy(&g, p, sizeof(g));
			memcpy(&a, body + sizeof(c) + i * sizeof(a), sizeof(a));
			check_extent("ALLOC", g.offset, a.length);
			if (!g.token)
				fail("a grant without a token");
		}
	}
}

/* The right magic and version, and the length the count asks for (the
 * body is what follows, as much as there is). */
static void fix_up(struct hc_mw_hdr *h, const struct memd_session *s, const uint8_t *body, size_t avail)
{
	struct hc_mw_count c = { 0 };
	uint64_t want;

	h->magic = HC_MW_MAGIC;
	if (s->hello)
		h->version = s->version;
	if (avail >= sizeof(c))
		memcpy(&c, body, sizeof(c));
	want = h->type == HC_MW_HELLO ? sizeof(struct hc_mw_hello) : hc_mw_request_len(h->type, c.count);
	if (want && want <= avail)
		h->length = (uint32_t)want;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t msg[sizeof(struct hc_mw_hdr) + HC_MW_BODY_MAX];
	const struct memd_dir_params dp = { .size = REGION, .max_leases = 64, .seed = 1 };
	const struct memd_welcome w = { .lease_ms = LEASE_MS,
					.batch_max = BATCH,
					.instance = 0x1234,
					.base = 0x7f0000000000,
					.size = REGION,
					.addr = worker_addr,
					.addr_len = sizeof(worker_addr),
					.rkey = rkey,
					.rkey_len = sizeof(rkey) };
	struct memd_session s[CONNS] = { 0 };
	struct memd_buf out = { 0 };
	struct memd_dir d;
	uint64_t now = 1000;
	char why[256];
	size_t at = 0;

	if (memd_dir_init(&d, &dp) < 0)
		fail("memd_dir_init");
	while (size - at > sizeof(struct hc_mw_hdr)) {
		uint8_t ctl = data[at++];
		struct memd_session *ss = &s[ctl & 3];
		struct hc_mw_hdr h;
		uint32_t body_len;
		size_t avail;
		int r;

		now += (uint64_t)(ctl >> 3) * 16;
		memcpy(&h, data + at, sizeof(h));
		at += sizeof(h);
		avail = size - at;
		if (ctl & CTL_FIX)
			fix_up(&h, ss, data + at, avail);
		if (memd_proto_header(ss, (const uint8_t *)&h, &body_len, why, sizeof(why)) < 0) {
			if (!why[0])
				fail("a header refused without a reason");
			*ss = (struct memd_session){ 0 }; /* closed; the next one is a new connection */
			continue;
		}
		if (body_len > avail)
			break; /* the server would wait for the rest */
		memcpy(msg, &h, sizeof(h));
		memcpy(msg + sizeof(h), data + at, body_len);
		at += body_len;
		out.off = out.len = 0;
		why[0] = '\0';
		r = memd_proto_handle(&d, &w, ss, msg, sizeof(h) + body_len, now, &out, why, sizeof(why));
		if (r < 0) {
			if (!why[0] || out.len)
				fail("a message refused (%d) without a reason, or with a reply", r);
			*ss = (struct memd_session){ 0 };
		} else {
			check_reply(&h, msg + sizeof(h), &out, 0);
		}
		if (memd_dir_check(&d, why, sizeof(why)) < 0)
			fail("after a message of type %u: %s", h.type, why);
	}
	/* every lease and grant ends; what is left is committed objects */
	memd_dir_sweep(&d, UINT64_MAX);
	if (memd_dir_check(&d, why, sizeof(why)) < 0)
		fail("after the last expiry: %s", why);
	if (d.st[MEMD_ST_grants] || d.st[MEMD_ST_leases] || d.st[MEMD_ST_retired])
		fail("leases, grants or retired objects left after every lease expired");
	memd_dir_fini(&d);
	memd_buf_free(&out);
	return 0;
}
