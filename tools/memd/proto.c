/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto.c - the control protocol of hicache-memd (backends/mori/wire.h):
 * one whole message in, its reply out.
 *
 * Every message is checked whole before anything is done with it: a bad
 * one is the sign of a client that does not speak this protocol (or of
 * bytes gone astray), so the connection closes with the reason, and the
 * directory is left as it was.  An item the directory refuses (no such
 * name, no room) is not a bad message: its status says so.  The reason
 * names what was wrong and what was expected, since it is all the
 * operator of a client will see.
 *
 * No I/O and no UCX: HELLO's worker address and rkey are blobs given in.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memd.h"

void *memd_buf_reserve(struct memd_buf *b, size_t n)
{
	size_t cap;
	uint8_t *p;

	if (b->cap - b->len >= n)
		return b->p + b->len;
	if (b->off) {
		/* the sent bytes make room first */
		memmove(b->p, b->p + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		if (b->cap - b->len >= n)
			return b->p + b->len;
	}
	for (cap = b->cap ? b->cap : 4096; cap - b->len < n; cap *= 2)
		if (cap > SIZE_MAX / 4)
			return NULL;
	if (!(p = realloc(b->p, cap)))
		return NULL;
	b->p = p;
	b->cap = cap;
	return b->p + b->len;
}

void memd_buf_free(struct memd_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static const char *type_name(uint16_t type)
{
	static const char *const names[] = {
		[HC_MW_HELLO] = "HELLO",   [HC_MW_LOOKUP] = "LOOKUP",   [HC_MW_ALLOC] = "ALLOC",
		[HC_MW_COMMIT] = "COMMIT", [HC_MW_RELEASE] = "RELEASE", [HC_MW_DELETE] = "DELETE",
		[HC_MW_STATS] = "STATS"
	};

	return type < sizeof(names) / sizeof(names[0]) && names[type] ? names[type] : "unknown";
}

#define BAD(err, ...) return snprintf(why, whylen, __VA_ARGS__), (err)

int memd_proto_header(const struct memd_session *s, const uint8_t hdr[sizeof(struct hc_mw_hdr)], uint32_t *body_len,
		      char *why, size_t whylen)
{
	struct hc_mw_hdr h;

	memcpy(&h, hdr, sizeof(h));
	if (h.magic != HC_MW_MAGIC)
		BAD(-EPROTO, "magic 0x%08x, not 0x%08x (\"HCMD\"): the peer does not speak the hicache-memd protocol",
		    h.magic, HC_MW_MAGIC);
	if (h.length > HC_MW_BODY_MAX)
		BAD(-EMSGSIZE, "a body of %u bytes, more than the %u a message may have", h.length, HC_MW_BODY_MAX);
	/* no request is longer than its type's with the most items: a header
	 * claiming more would only make the server hold a buffer for it */
	if (h.type == HC_MW_HELLO && h.length != sizeof(struct hc_mw_hello))
		BAD(-EPROTO, "a HELLO body of %u bytes, not %zu", h.length, sizeof(struct hc_mw_hello));
	if (hc_mw_request_len(h.type, 0) && h.length > hc_mw_request_len(h.type, HC_MW_BATCH_MAX))
		BAD(-EMSGSIZE, "a %s body of %u bytes, more than the %llu of %u items", type_name(h.type), h.length,
		    (unsigned long long)hc_mw_request_len(h.type, HC_MW_BATCH_MAX), HC_MW_BATCH_MAX);
	if (!s->hello && h.type != HC_MW_HELLO)
		BAD(-EPROTO, "a message of type %u (%s) before HELLO: a connection starts with HELLO", h.type,
		    type_name(h.type));
	/* HELLO's own header may carry any version of the sender's: its body
	 * says which it speaks */
	if (s->hello && h.version != s->version)
		BAD(-EPROTO, "version %u in a header, but HELLO chose version %u for this connection", h.version,
		    s->version);
	*body_len = h.length;
	return 0;
}

static int hello(const struct memd_welcome *w, struct memd_session *s, const struct hc_mw_hdr *h, const uint8_t *body,
		 struct memd_buf *out, char *why, size_t whylen)
{
	struct hc_mw_hello in;
	struct hc_mw_welcome wel = { 0 };
	struct hc_mw_hdr rh = { .magic = HC_MW_MAGIC, .type = HC_MW_HELLO | HC_MW_REPLY, .seq = h->seq };
	unsigned lo, hi;
	uint8_t *p;

	if (s->hello)
		BAD(-EPROTO, "a second HELLO on a connection that said HELLO already");
	if (h->length != sizeof(in))
		BAD(-EPROTO, "a HELLO body of %u bytes, not %zu", h->length, sizeof(in));
	memcpy(&in, body, sizeof(in));
	if (in.version_min > in.version_max)
		BAD(-EPROTO, "HELLO offers versions %u..%u, an empty range", in.version_min, in.version_max);
	lo = in.version_min > HC_MW_VERSION_MIN ? in.version_min : HC_MW_VERSION_MIN;
	hi = in.version_max < HC_MW_VERSION_MAX ? in.version_max : HC_MW_VERSION_MAX;
	if (lo > hi)
		BAD(-EPROTO,
		    "the client speaks protocol versions %u..%u and this server %u..%u: none in common; upgrade the older of the two",
		    in.version_min, in.version_max, HC_MW_VERSION_MIN, HC_MW_VERSION_MAX);
	wel.version = (uint16_t)hi;
	/* the client may ask for shorter leases, never longer ones */
	wel.lease_ms = in.lease_ms && in.lease_ms < w->lease_ms ? in.lease_ms : w->lease_ms;
	wel.instance = w->instance;
	wel.base = w->base;
	wel.size = w->size;
	wel.addr_len = w->addr_len;
	wel.rkey_len = w->rkey_len;
	wel.batch_max = w->batch_max;
	rh.version = wel.version;
	rh.length = (uint32_t)(sizeof(wel) + w->addr_len + w->rkey_len);
	if (!(p = memd_buf_reserve(out, sizeof(rh) + rh.length)))
		BAD(-ENOMEM, "no memory for the HELLO reply");
	memcpy(p, &rh, sizeof(rh));
	memcpy(p + sizeof(rh), &wel, sizeof(wel));
	memcpy(p + sizeof(rh) + sizeof(wel), w->addr, w->addr_len);
	memcpy(p + sizeof(rh) + sizeof(wel) + w->addr_len, w->rkey, w->rkey_len);
	out->len += sizeof(rh) + rh.length;
	s->hello = true;
	s->version = wel.version;
	s->lease_ms = wel.lease_ms;
	return 0;
}

/* Check a request's count, flags and length against its type. */
static int check_request(const struct memd_welcome *w, const struct hc_mw_hdr *h, const struct hc_mw_count *c,
			 char *why, size_t whylen)
{
	const char *t = type_name(h->type);
	uint64_t want;

	if (h->type < HC_MW_LOOKUP || h->type > HC_MW_STATS)
		BAD(-EPROTO, "unknown message type %u%s: the requests are types %u to %u", h->type,
		    h->type & HC_MW_REPLY ? " (a reply's)" : "", HC_MW_HELLO, HC_MW_STATS);
	if (h->length < sizeof(*c))
		BAD(-EPROTO, "a %s body of %u bytes, too short for its count (%zu bytes)", t, h->length, sizeof(*c));
	if (h->type == HC_MW_STATS) {
		if (c->count)
			BAD(-EPROTO, "STATS with count %u: give 0", c->count);
	} else if (c->count == 0 || c->count > w->batch_max) {
		BAD(-EPROTO, "a %s of %u items: give 1 to %u (the batch_max HELLO said)", t, c->count, w->batch_max);
	}
	if (h->type == HC_MW_LOOKUP && (c->flags & ~HC_MW_LOOKUP_LEASE))
		BAD(-EPROTO, "LOOKUP flags 0x%x: only 0x%x (lease) is defined", c->flags, HC_MW_LOOKUP_LEASE);
	if (h->type != HC_MW_LOOKUP && c->flags)
		BAD(-EPROTO, "%s flags 0x%x: none are defined, give 0", t, c->flags);
	want = hc_mw_request_len(h->type, c->count);
	if (h->length != want)
		BAD(-EPROTO, "a %s of %u items has a body of %llu bytes, not %u", t, c->count, (unsigned long long)want,
		    h->length);
	return 0;
}

static void do_items(struct memd_dir *d, const struct memd_session *s, uint16_t type, uint32_t n, uint32_t flags,
		     const uint8_t *in, uint8_t *res, uint64_t now_ms)
{
	for (uint32_t i = 0; i < n; i++) {
		switch (type) {
		case HC_MW_LOOKUP: {
			struct hc_mw_found f;

			memd_dir_lookup(d, in + (size_t)i * HC_MW_NAME_BYTES,
					flags & HC_MW_LOOKUP_LEASE ? s->lease_ms : 0, now_ms, &f);
			memcpy(res + (size_t)i * sizeof(f), &f, sizeof(f));
			break;
		}
		case HC_MW_ALLOC: {
			struct hc_mw_alloc a;
			struct hc_mw_grant g;

			memcpy(&a, in + (size_t)i * sizeof(a), sizeof(a));
			memd_dir_alloc(d, a.name, a.length, s->lease_ms, now_ms, &g);
			memcpy(res + (size_t)i * sizeof(g), &g, sizeof(g));
			break;
		}
		case HC_MW_COMMIT:
		case HC_MW_RELEASE: {
			struct hc_mw_status st = { 0 };
			uint64_t token;

			memcpy(&token, in + (size_t)i * sizeof(token), sizeof(token));
			st.status = type == HC_MW_COMMIT ? memd_dir_commit(d, token) : memd_dir_release(d, token);
			memcpy(res + (size_t)i * sizeof(st), &st, sizeof(st));
			break;
		}
		case HC_MW_DELETE: {
			struct hc_mw_status st = { .status = memd_dir_delete(d, in + (size_t)i * HC_MW_NAME_BYTES) };

			memcpy(res + (size_t)i * sizeof(st), &st, sizeof(st));
			break;
		}
		}
	}
}

static void do_stats(const struct memd_dir *d, uint8_t *res)
{
	for (unsigned i = 0; i < MEMD_ST__COUNT; i++) {
		struct hc_mw_stat st = { .value = d->st[i] };

		strncpy(st.name, memd_stat_desc[i].name, sizeof(st.name) - 1);
		memcpy(res + (size_t)i * sizeof(st), &st, sizeof(st));
	}
}

int memd_proto_handle(struct memd_dir *d, const struct memd_welcome *w, struct memd_session *s, const uint8_t *msg,
		      size_t len, uint64_t now_ms, struct memd_buf *out, char *why, size_t whylen)
{
	struct hc_mw_hdr h, rh;
	struct hc_mw_count c = { 0 }, rc = { 0 };
	uint32_t body_len;
	uint64_t reply_len;
	uint8_t *p;
	int r;

	if (len < sizeof(h))
		BAD(-EPROTO, "a message of %zu bytes, shorter than its %zu-byte header", len, sizeof(h));
	if ((r = memd_proto_header(s, msg, &body_len, why, whylen)) < 0)
		return r;
	if (len - sizeof(h) != body_len)
		BAD(-EPROTO, "the header says %u body bytes, the message has %zu", body_len, len - sizeof(h));
	memcpy(&h, msg, sizeof(h));
	if (h.type == HC_MW_HELLO)
		return hello(w, s, &h, msg + sizeof(h), out, why, whylen);
	if (h.length >= sizeof(c))
		memcpy(&c, msg + sizeof(h), sizeof(c));
	if ((r = check_request(w, &h, &c, why, whylen)) < 0)
		return r;

	rc.count = h.type == HC_MW_STATS ? MEMD_ST__COUNT : c.count;
	reply_len = sizeof(rc) + (uint64_t)rc.count * hc_mw_result_size(h.type);
	if (!(p = memd_buf_reserve(out, sizeof(rh) + reply_len)))
		BAD(-ENOMEM, "no memory for the reply to a %s of %u items", type_name(h.type), c.count);
	/* the leases and grants that ran out by now are gone for this request */
	memd_dir_sweep(d, now_ms);
	d->st[MEMD_ST_requests]++;
	rh = (struct hc_mw_hdr){ .magic = HC_MW_MAGIC,
				 .version = s->version,
				 .type = (uint16_t)(h.type | HC_MW_REPLY),
				 .length = (uint32_t)reply_len,
				 .seq = h.seq };
	if (h.type == HC_MW_STATS)
		do_stats(d, p + sizeof(rh) + sizeof(rc));
	else
		do_items(d, s, h.type, c.count, c.flags, msg + sizeof(h) + sizeof(c), p + sizeof(rh) + sizeof(rc),
			 now_ms);
	memcpy(p, &rh, sizeof(rh));
	memcpy(p + sizeof(rh), &rc, sizeof(rc));
	out->len += sizeof(rh) + reply_len;
	return 0;
}
