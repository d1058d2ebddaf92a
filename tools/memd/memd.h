/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memd.h - hicache-memd(8), the memory server of the mori backend: a
 * region of DRAM that clients read and write by one-sided UCX get and put,
 * and a directory of the objects in it that they consult over TCP with the
 * control protocol of backends/mori/wire.h.
 *
 *   dir.c      the directory: objects, extents, LRU, leases, grants, stats
 *   proto.c    one control message in, its reply out (validation included)
 *   region.c   UCX: the context, the worker, the region and its rkey
 *   server.c   the event loop: listener, clients, worker, signals, expiry
 *   metrics.c  GET /metrics, in the same loop
 *   main.c     options, logging, start and stop
 *
 * dir.c and proto.c do no I/O, call no clock and know nothing of UCX:
 * the caller passes the time in, so the fuzzer (tests/fuzz/fuzz_memd.c)
 * and the unit tests drive them as the server does.
 *
 * NOTES ON SYNCHRONIZATION AND OWNERSHIP
 *
 * hicache-memd is one thread.  It owns the directory, every connection,
 * the UCX worker (UCS_THREAD_MODE_SINGLE) and the region's mapping; nothing
 * is shared with another thread of ours, so nothing here takes a lock.
 * The region's bytes are the exception: clients read and write them by
 * one-sided transfers that this process never sees.  The directory is
 * what keeps those transfers apart: an extent is given to one writer (a
 * grant) or read under leases, and it is neither reused nor moved until
 * the grant is committed or given up and every lease on it has ended
 * (released or expired).  Leases and grants belong to the directory, not
 * to the connection that took them: a client's transfers may still be in
 * flight when its connection breaks, so closing a connection releases
 * nothing; expiry does.
 *
 * A committed object is in the name table and on the LRU list; its bytes
 * are its extent's.  Committing a name that exists retires the older
 * object: it leaves the table and the LRU at once (a new lookup finds the
 * new one), and its extent is freed when its last lease ends.  Deleting
 * does the same.  A grant's object is on no list until it is committed.
 */
#ifndef HC_TOOLS_MEMD_H
#define HC_TOOLS_MEMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "../../backends/mori/wire.h"

#define MEMD_PROG         "hicache-memd"
#define MEMD_DEFAULT_PORT 7470
#define MEMD_LEASE_MS     10000u
#define MEMD_LEASE_MS_MAX 3600000u   /* an hour: a lease longer than that is a leak */
#define MEMD_LEASES_MAX   (1u << 20) /* read leases and grants held at once */
#define MEMD_MAX_CLIENTS  1024u
#define MEMD_REPLY_MAX    (16u << 20)  /* a connection's unsent replies */
#define MEMD_REPLY_PAUSE  (256u << 10) /* unsent replies beyond which its requests wait */
#define MEMD_SWEEP_MS     100          /* the event loop wakes at least this often */

/* ---- stats: declared once for the directory, STATS and /metrics.  The
 * directory keeps them all; the server bumps its own (the last five). */
#define MEMD_STATS(X)                                                                                                  \
	X(region_bytes, GAUGE, "bytes in the region")                                                                  \
	X(used_bytes, GAUGE, "bytes of the region allocated: committed, granted, or retired and still leased")         \
	X(free_bytes, GAUGE, "bytes of the region free")                                                               \
	X(free_extents, GAUGE, "free extents (how fragmented the free bytes are)")                                     \
	X(objects, GAUGE, "committed objects")                                                                         \
	X(object_bytes, GAUGE, "bytes of the committed objects (their lengths, not rounded)")                          \
	X(grants, GAUGE, "allocations granted and not yet committed, given up or expired")                             \
	X(leases, GAUGE, "read leases held")                                                                           \
	X(retired, GAUGE, "objects replaced or deleted whose bytes wait for their leases to end")                      \
	X(retired_bytes, GAUGE, "bytes of the retired objects' extents")                                               \
	X(lookups, COUNTER, "names looked up")                                                                         \
	X(hits, COUNTER, "lookups that found a committed object")                                                      \
	X(misses, COUNTER, "lookups that found nothing")                                                               \
	X(lease_refusals, COUNTER, "leases refused because the lease table was full")                                  \
	X(allocs, COUNTER, "allocations granted")                                                                      \
	X(alloc_nospc, COUNTER, "allocations refused: larger than the region")                                         \
	X(alloc_busy, COUNTER, "allocations refused: the room was leased or granted")                                  \
	X(alloc_invalid, COUNTER, "allocations refused: length 0")                                                     \
	X(commits, COUNTER, "grants committed")                                                                        \
	X(commit_stale, COUNTER, "commits refused: the grant had expired or was unknown")                              \
	X(replaced, COUNTER, "objects replaced by a commit of the same name")                                          \
	X(releases, COUNTER, "leases and grants released")                                                             \
	X(release_unknown, COUNTER, "releases of a lease or grant that was not held (expired, or unknown)")            \
	X(deletes, COUNTER, "objects deleted")                                                                         \
	X(delete_misses, COUNTER, "deletes of a name that was not there")                                              \
	X(evictions, COUNTER, "objects evicted to make room")                                                          \
	X(evicted_bytes, COUNTER, "bytes of the objects evicted")                                                      \
	X(leases_expired, COUNTER, "read leases that expired before they were released")                               \
	X(grants_expired, COUNTER, "grants that expired before they were committed")                                   \
	X(clients, GAUGE, "control connections open")                                                                  \
	X(connections, COUNTER, "control connections accepted")                                                        \
	X(refused, COUNTER, "control connections refused (--max-clients)")                                             \
	X(bad_messages, COUNTER, "connections closed for a bad message")                                               \
	X(requests, COUNTER, "requests answered")

enum memd_stat {
#define X(n, k, h) MEMD_ST_##n,
	MEMD_STATS(X)
#undef X
		MEMD_ST__COUNT
};
_Static_assert(MEMD_ST__COUNT <= HC_MW_STATS_MAX, "memd: the stats must fit in one STATS reply");

enum memd_stat_kind { MEMD_GAUGE, MEMD_COUNTER };
struct memd_stat_desc {
	const char *name;
	enum memd_stat_kind kind;
	const char *help;
};
extern const struct memd_stat_desc memd_stat_desc[MEMD_ST__COUNT];

/* An intrusive doubly linked list: the link is a member of what is listed
 * (memd_entry finds the container), and the list knows both its ends. */
struct memd_link {
	struct memd_link *prev, *next;
};
struct memd_list {
	struct memd_link *head, *tail;
};
#define memd_entry(link, type, member) ((type *)(void *)((char *)(link)-offsetof(type, member)))

/* Put n at the head of l. */
static inline void memd_list_push(struct memd_list *l, struct memd_link *n)
{
	n->prev = NULL;
	n->next = l->head;
	if (n->next)
		n->next->prev = n;
	else
		l->tail = n;
	l->head = n;
}

static inline void memd_list_del(struct memd_list *l, struct memd_link *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
}

/* ---- the directory (dir.c) */

struct memd_ext;
struct memd_obj;
struct memd_lease;

/* A chained hash table of intrusive nodes (power-of-two buckets). */
struct memd_hnode {
	struct memd_hnode *next;
	uint64_t hash;
};
struct memd_htab {
	struct memd_hnode **b;
	uint64_t mask;
	uint64_t count;
};

#define MEMD_BINS 64 /* free extents by floor(log2(units)) */

struct memd_dir_params {
	uint64_t size;       /* the region's bytes: a multiple of HC_MW_ALIGN, > 0 */
	uint32_t max_leases; /* leases and grants held at once; beyond, -EBUSY */
	uint64_t seed;       /* of the name hash (random: names come off the wire) */
};

struct memd_dir {
	struct memd_dir_params p;
	/* every extent, free or not, in address order: they tile the region */
	struct memd_ext *ext_head;
	/* free extents in bins, and which bins hold any */
	struct memd_list bin[MEMD_BINS];
	uint64_t bin_mask;
	/* committed objects by name, and in LRU order (head: most recent) */
	struct memd_htab names;
	struct memd_list lru;
	/* read leases and grants by token, and in a min-heap on their expiry */
	struct memd_htab tokens;
	struct memd_lease **heap;
	uint64_t heap_len, heap_cap;
	uint64_t next_token;
	uint64_t st[MEMD_ST__COUNT];
};

int memd_dir_init(struct memd_dir *d, const struct memd_dir_params *p);
void memd_dir_fini(struct memd_dir *d);
/* End the leases and grants that expired by now. */
void memd_dir_sweep(struct memd_dir *d, uint64_t now_ms);
/* When the next one expires (UINT64_MAX: none). */
uint64_t memd_dir_next_expiry(const struct memd_dir *d);
/* One item of each request; every result is filled (status 0 or -errno).
 * A lookup with lease_ms > 0 leases what it finds for that long (0: no
 * lease); a grant lasts lease_ms (> 0). */
void memd_dir_lookup(struct memd_dir *d, const uint8_t name[HC_MW_NAME_BYTES], uint32_t lease_ms, uint64_t now_ms,
		     struct hc_mw_found *out);
void memd_dir_alloc(struct memd_dir *d, const uint8_t name[HC_MW_NAME_BYTES], uint64_t length, uint32_t lease_ms,
		    uint64_t now_ms, struct hc_mw_grant *out);
int memd_dir_commit(struct memd_dir *d, uint64_t token);
int memd_dir_release(struct memd_dir *d, uint64_t token);
int memd_dir_delete(struct memd_dir *d, const uint8_t name[HC_MW_NAME_BYTES]);
/* Check every invariant (extents tile the region, free ones coalesced and
 * binned, tables and lists agree, gauges match): 0, or -EUCLEAN with the
 * first violation in why. */
int memd_dir_check(const struct memd_dir *d, char *why, size_t whylen);

/* ---- the control protocol (proto.c) */

/* A growable byte buffer: a connection's replies. */
struct memd_buf {
	uint8_t *p;
	size_t off; /* bytes already sent */
	size_t len;
	size_t cap;
};
/* Room for n more bytes at p + len (len is not moved), or NULL. */
void *memd_buf_reserve(struct memd_buf *b, size_t n);
void memd_buf_free(struct memd_buf *b);

/* What HELLO answers, the same for every client but lease_ms. */
struct memd_welcome {
	uint32_t lease_ms; /* the longest lease (--lease-ms), and the default */
	uint32_t batch_max;
	uint64_t instance;
	uint64_t base, size;
	const void *addr; /* the UCX worker's address */
	uint32_t addr_len;
	const void *rkey; /* the region's packed rkey */
	uint32_t rkey_len;
};

/* One connection's state. */
struct memd_session {
	bool hello; /* HELLO answered */
	uint16_t version;
	uint32_t lease_ms; /* how long this connection's leases and grants last */
};

/* How much of a message the header says there is: 0 with *body_len set,
 * or -EPROTO / -EMSGSIZE with the reason (the connection must close). */
int memd_proto_header(const struct memd_session *s, const uint8_t hdr[sizeof(struct hc_mw_hdr)], uint32_t *body_len,
		      char *why, size_t whylen);
/* Answer one whole message (header and body, len bytes): its reply is
 * appended to out.  0; -EPROTO, -EMSGSIZE or -EINVAL for a bad message,
 * with the reason; -ENOMEM.  Nothing is changed unless it returns 0. */
int memd_proto_handle(struct memd_dir *d, const struct memd_welcome *w, struct memd_session *s, const uint8_t *msg,
		      size_t len, uint64_t now_ms, struct memd_buf *out, char *why, size_t whylen);

/* ---- logging (main.c) */

enum memd_level { MEMD_ERR = 3, MEMD_WARN = 4, MEMD_INFO = 6, MEMD_DEBUG = 7 };
extern int memd_log_level;
void memd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Log lines of one kind at most MEMD_RATE_LINES a second; the rest are
 * counted and said in the next line that goes out. */
#define MEMD_RATE_LINES 10
struct memd_ratelimit {
	uint64_t sec;
	unsigned lines;
	uint64_t suppressed;
};
void memd_log_limited(struct memd_ratelimit *rl, uint64_t now_ms, int level, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
uint64_t memd_now_ms(void);

/* ---- options (main.c) */

/* A HOST:PORT option, resolved when it is parsed (a wrong one is a usage
 * error, not a failure to start). */
struct memd_addr {
	const char *option; /* "--listen" */
	const char *text;   /* as given; NULL: not given */
	struct sockaddr_storage ss;
	socklen_t len;
};

struct memd_opts {
	struct memd_addr listen;
	uint64_t size;            /* the region's bytes */
	const char *backing_file; /* --backing file:PATH, or NULL: UCX allocates it */
	uint32_t lease_ms;
	uint32_t batch_max;
	uint32_t max_clients;
	struct memd_addr metrics; /* text NULL: no /metrics */
};

/* ---- the region and UCX (region.c) */

struct memd_region {
	void *ctx;    /* ucp_context_h */
	void *worker; /* ucp_worker_h */
	void *memh;   /* ucp_mem_h */
	void *base;   /* the region, mapped here */
	uint64_t size;
	void *map;  /* our own mapping (--backing file:), or NULL */
	void *addr; /* the worker's address (ucp_address_t *) */
	size_t addr_len;
	void *rkey; /* packed */
	size_t rkey_len;
	int efd; /* the worker's event fd */
};

/* Set up UCX and the region, prefaulted: 0, or -errno logged. */
int memd_region_open(struct memd_region *r, const struct memd_opts *o);
void memd_region_close(struct memd_region *r);
/* Progress the worker until it has nothing more to do. */
void memd_region_progress(struct memd_region *r);
/* Arm the event fd before sleeping: 0, or -EAGAIN when there is more to
 * progress first (UCS_ERR_BUSY), or -EIO when it cannot be armed. */
int memd_region_arm(struct memd_region *r);

/* ---- the server (server.c, metrics.c) */

/* What an epoll event's data.ptr points at: the first member of each
 * thing the loop watches. */
enum memd_ev_kind { MEMD_EV_LISTEN, MEMD_EV_SIGNAL, MEMD_EV_WORKER, MEMD_EV_CLIENT, MEMD_EV_METRICS };
struct memd_ev {
	enum memd_ev_kind kind;
};

/* A non-blocking listening socket on a, its bound address ("127.0.0.1:7470",
 * "[::1]:7470") in bound: the fd, or -errno logged. */
int memd_listen(const struct memd_addr *a, char *bound, size_t boundlen);
/* Listen, say so on ready_fd (then closed; -1: nowhere), and serve until
 * SIGTERM or SIGINT: 0, or -errno logged. */
int memd_serve(const struct memd_opts *o, struct memd_region *r, struct memd_dir *d, uint64_t instance, int ready_fd);

struct memd_metrics;
/* GET /metrics on a, served by the caller's loop on epfd, from d's stats:
 * 0, or -errno logged.  The bound address in bound. */
int memd_metrics_open(struct memd_metrics **mp, int epfd, const struct memd_addr *a, const struct memd_dir *d,
		      char *bound, size_t boundlen);
/* An event on one of its fds (ev: the data.ptr it registered). */
void memd_metrics_event(struct memd_metrics *m, struct memd_ev *ev, uint32_t events, uint64_t now_ms);
/* Drop scrapes that have taken too long. */
void memd_metrics_sweep(struct memd_metrics *m, uint64_t now_ms);
void memd_metrics_close(struct memd_metrics *m);

#endif /* HC_TOOLS_MEMD_H */
