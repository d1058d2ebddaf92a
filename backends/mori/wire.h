/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.h - the control protocol between the mori backend and hicache-memd:
 * the only bytes on the wire that are ours.  The bytes of objects move by
 * UCX one-sided get and put into the memory server's region; this channel
 * (TCP) only says where: hello, lookup, allocate, commit, release, delete,
 * stats.  Both ends include this header and nothing else of each other.
 *
 * FRAMING
 *
 * Every message is a 16-byte header and a body of header.length bytes
 * (at most HC_MW_BODY_MAX).  All integers are little-endian (hosts are
 * checked below).  A client sends requests with a sequence number of its
 * choosing; the server answers each request, in order, with a reply whose
 * type is the request's | HC_MW_REPLY and whose seq is the request's.
 *
 * VERSIONS
 *
 * HELLO comes first on a connection and carries the range of versions the
 * client speaks; the server answers with the one it chose (the highest both
 * speak), and every later header carries that version.  A server that
 * shares none closes the connection.
 *
 * VALIDATION
 *
 * The server checks every message: magic, version, type, length, counts,
 * that the body is exactly as long as its counts say, lengths, tokens.  A
 * bad one closes that connection with a logged reason; it touches nothing
 * else (no lease, no object, no other connection).  A client that gets a
 * bad reply treats the server as dead.
 *
 * ITEMS
 *
 * Requests carry up to HC_MW_BATCH_MAX items each, and the reply has one
 * result per item, in the same order; each result's status is 0 or a
 * negative errno.  Names are the plugin ABI's 64-byte object names.
 *
 * LEASES
 *
 * A LOOKUP with HC_MW_LOOKUP_LEASE, and every ALLOC, gives a lease: until
 * it is released or lease_ms (from HELLO) has passed, the server neither
 * reuses nor moves those bytes, so a one-sided transfer in flight reads or
 * writes bytes nobody else uses.  Leases outlive their connection (the
 * client's transfers may still be in flight when its connection breaks);
 * they end only by RELEASE, COMMIT (an allocation's) or expiry.  A client
 * finishes its transfers well inside lease_ms or does not use the bytes.
 */
#ifndef HC_BACKENDS_MORI_WIRE_H
#define HC_BACKENDS_MORI_WIRE_H

#include <stdint.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the memd control protocol is little-endian and so is every host it is built for"
#endif

#define HC_MW_MAGIC       0x444d4348u /* "HCMD" as bytes on the wire */
#define HC_MW_VERSION_MIN 1u
#define HC_MW_VERSION_MAX 1u
#define HC_MW_NAME_BYTES  64u         /* HC_BE_NAME_BYTES */
#define HC_MW_BODY_MAX    (1u << 20)  /* a body longer than this is a bad message */
#define HC_MW_BATCH_MAX   1024u       /* items in one request */
#define HC_MW_BLOB_MAX    (64u << 10) /* a worker address or a packed rkey */
#define HC_MW_ALIGN       4096u       /* every allocation's offset and size round to this */
#define HC_MW_STAT_NAME   32u         /* a stat's name, NUL-padded */
#define HC_MW_STATS_MAX   64u

enum hc_mw_type {
	HC_MW_HELLO = 1,
	HC_MW_LOOKUP = 2,
	HC_MW_ALLOC = 3,
	HC_MW_COMMIT = 4,
	HC_MW_RELEASE = 5,
	HC_MW_DELETE = 6,
	HC_MW_STATS = 7,
};
#define HC_MW_REPLY 0x80u /* a reply's type: the request's | this */

struct hc_mw_hdr {
	uint32_t magic;   /* HC_MW_MAGIC */
	uint16_t version; /* HELLO: any the sender speaks (the body's range decides); after: the chosen one */
	uint16_t type;    /* enum hc_mw_type, | HC_MW_REPLY in a reply */
	uint32_t length;  /* body bytes after this header, <= HC_MW_BODY_MAX */
	uint32_t seq;     /* the request's, echoed by its reply */
};

/*
 * HELLO.  Request body: struct hc_mw_hello.  Reply body: struct
 * hc_mw_welcome, then the server's UCX worker address (addr_len bytes),
 * then the packed rkey of its region (rkey_len bytes).
 */
struct hc_mw_hello {
	uint16_t version_min;
	uint16_t version_max;
	uint32_t lease_ms; /* the lease the client asks for; 0: the server's.  The
			    * server grants at most its own (--lease-ms). */
};

struct hc_mw_welcome {
	uint16_t version; /* chosen */
	uint16_t reserved;
	uint32_t lease_ms;  /* a lease of this connection lasts this long */
	uint64_t instance;  /* random at each start: a restarted server is a new one, empty */
	uint64_t base;      /* the region's address in the server (a get or put's remote address: base + offset) */
	uint64_t size;      /* the region's bytes */
	uint32_t addr_len;  /* <= HC_MW_BLOB_MAX */
	uint32_t rkey_len;  /* <= HC_MW_BLOB_MAX */
	uint32_t batch_max; /* items the server takes in one request (<= HC_MW_BATCH_MAX) */
	uint32_t reserved2;
};

/* Every other request and reply body starts with a count of items. */
struct hc_mw_count {
	uint32_t count; /* 1..HC_MW_BATCH_MAX (STATS: 0 in the request) */
	uint32_t flags; /* LOOKUP: HC_MW_LOOKUP_*; else 0 */
};
#define HC_MW_LOOKUP_LEASE 0x1u /* lease what is found, for a get */

/* LOOKUP: count names (HC_MW_NAME_BYTES each); reply: count of these. */
struct hc_mw_found {
	int32_t status; /* 0; -ENOENT; -EBUSY: found, but the server's lease table is full (retry) */
	uint32_t reserved;
	uint64_t offset; /* in the region */
	uint64_t length; /* the object's bytes */
	uint64_t lease;  /* with HC_MW_LOOKUP_LEASE: what RELEASE takes; else 0 */
};

/* ALLOC: count of these; reply: count of struct hc_mw_grant. */
struct hc_mw_alloc {
	uint8_t name[HC_MW_NAME_BYTES];
	uint64_t length; /* 1..region size */
};

struct hc_mw_grant {
	int32_t status; /* 0; -ENOSPC: can never fit; -EINVAL: length 0;
			 * -EBUSY: the room is leased or granted right now, or the lease table is full;
			 * -ENOMEM: the server is out of memory for its directory (retry) */
	uint32_t reserved;
	uint64_t offset; /* write [offset, offset + length) */
	uint64_t token;  /* what COMMIT (or RELEASE, to give it up) takes */
};

/* COMMIT and RELEASE: count tokens (uint64_t, a grant's or a found's
 * lease); DELETE: count names.  Reply: count of these. */
struct hc_mw_status {
	int32_t status; /* COMMIT: 0, -ESTALE (the grant had expired, was given up or
			 * committed already: nothing committed), -EINVAL (the token is a LOOKUP's lease);
			 * RELEASE: 0, -ENOENT (no such lease or grant, or expired);
			 * DELETE: 0, -ENOENT */
	uint32_t reserved;
};

/* STATS: an empty request body (count 0); reply: count of these. */
struct hc_mw_stat {
	char name[HC_MW_STAT_NAME]; /* [a-z0-9_], NUL-padded */
	uint64_t value;
};

_Static_assert(sizeof(struct hc_mw_hdr) == 16, "wire: header");
_Static_assert(sizeof(struct hc_mw_hello) == 8, "wire: hello");
_Static_assert(sizeof(struct hc_mw_welcome) == 48, "wire: welcome");
_Static_assert(sizeof(struct hc_mw_count) == 8, "wire: count");
_Static_assert(sizeof(struct hc_mw_found) == 32, "wire: found");
_Static_assert(sizeof(struct hc_mw_alloc) == 72, "wire: alloc");
_Static_assert(sizeof(struct hc_mw_grant) == 24, "wire: grant");
_Static_assert(sizeof(struct hc_mw_status) == 8, "wire: status");
_Static_assert(sizeof(struct hc_mw_stat) == 40, "wire: stat");

/* The body length a request of this type and count must have (HELLO: its
 * fixed part), or 0 for a type that is not a request. */
static inline uint64_t hc_mw_request_len(uint16_t type, uint32_t count)
{
	switch (type) {
	case HC_MW_HELLO:
		return sizeof(struct hc_mw_hello);
	case HC_MW_LOOKUP:
	case HC_MW_DELETE:
		return sizeof(struct hc_mw_count) + (uint64_t)count * HC_MW_NAME_BYTES;
	case HC_MW_ALLOC:
		return sizeof(struct hc_mw_count) + (uint64_t)count * sizeof(struct hc_mw_alloc);
	case HC_MW_COMMIT:
	case HC_MW_RELEASE:
		return sizeof(struct hc_mw_count) + (uint64_t)count * sizeof(uint64_t);
	case HC_MW_STATS:
		return sizeof(struct hc_mw_count);
	default:
		return 0;
	}
}

/* The size of one result in the reply to a request of this type. */
static inline uint64_t hc_mw_result_size(uint16_t type)
{
	switch (type) {
	case HC_MW_LOOKUP:
		return sizeof(struct hc_mw_found);
	case HC_MW_ALLOC:
		return sizeof(struct hc_mw_grant);
	case HC_MW_COMMIT:
	case HC_MW_RELEASE:
	case HC_MW_DELETE:
		return sizeof(struct hc_mw_status);
	case HC_MW_STATS:
		return sizeof(struct hc_mw_stat);
	default:
		return 0;
	}
}

#endif
