/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend.h - the L3 plugin ABI: what a storage backend (a dlopen-ed shared
 * object) implements, and what the host (libhicache) gives it.  A plugin
 * includes this header and nothing else of hicache.  See hicache-backend(7).
 *
 * LIFECYCLE
 *
 *   entry(host)       the host dlopens the plugin and calls its one exported
 *                     symbol, HC_BACKEND_ENTRY_SYMBOL, with the host services;
 *                     the plugin returns its struct hc_backend (static, never
 *                     freed).  The host checks abi_version and size, and that
 *                     every member of version 1 is set, before any call.
 *
 * VERSIONS: abi_version changes only when a member changes meaning (never
 * expected); the host refuses any other version.  New members are appended
 * and the struct's size tells them apart: the host calls a member beyond
 * version 1 only when the plugin's size covers it and it is not NULL.
 *   open(opts)        one instance, configured by key=value options.  An
 *                     unknown key or a bad value fails with -EINVAL and one
 *                     line in err saying which option and why.
 *   reg_mem()         zero or more times: memory that ops will point into
 *                     (the pool's envelopes, the host's header blocks).
 *   submit()/reap()   any number of batches.
 *   unreg_mem()       before that memory goes away; nothing in flight in it.
 *   close()           after every submitted op has been reaped.
 *
 * OBJECTS
 *
 * A backend stores objects: opaque byte strings named by 64 bytes, the
 * pool's fingerprint followed by the page key (HC_BE_NAME_BYTES).  The host
 * builds and verifies every object (its 4096-byte header, payload and
 * checksum); a plugin never interprets the bytes.  A plugin that names
 * things (files, memcached keys) derives the name only from the hex of these
 * 64 bytes, never from anything a user typed.
 *
 * OPERATIONS (struct hc_be_op; one completion each, struct hc_be_cqe)
 *
 *   GET     copy the object named by name into iov[0..iovcnt), in order,
 *           from its first byte, stopping at whichever ends first.
 *           result: the object's whole length in bytes (which may be more
 *           or less than the buffers hold: the host then knows), or
 *           -ENOENT if there is no such object.
 *   PUT     store the bytes of iov[0..iovcnt) as the object, replacing any
 *           older one.  A reader sees the old object or the new one, never a
 *           mix (atomic replace).  result: 0, or -ENOSPC when the object can
 *           never fit, -EBUSY when the room exists but is held right now
 *           (pinned by readers, taken by puts in flight: worth a retry),
 *           or another -errno.  A backend with a capacity evicts
 *           older objects to make room; it never fails a put because it is
 *           full of objects it could evict.
 *   EXISTS  result: 1 if the object exists, 0 if not.  iovcnt is 0.
 *   DELETE  result: 0, or -ENOENT if there was no such object; without
 *           HC_BE_CAP_DELETE, -EOPNOTSUPP.  iovcnt is 0.
 *
 * An op with an unknown opcode, an iovcnt out of range or a NULL iov
 * completes with -EINVAL (submit still accepts it).
 * Any op may also complete with -ECANCELED (after cancel), -ETIMEDOUT (the
 * plugin's own deadline), -EIO and so on.  A failed PUT leaves the old object
 * or no object, never a partial one.  A failed GET may have written some of
 * the buffers: the host discards them.
 *
 * BUFFERS
 *
 * The host's buffers are 4096-byte aligned with lengths that are multiples
 * of 4096 (so O_DIRECT lands the payload in an envelope), but a plugin must
 * accept any address and length, falling back to a slower path.  Buffers may
 * or may not lie in registered memory.  A plugin reads (PUT) or writes (GET)
 * a buffer only between the submit that hands it over and the reap that
 * returns its completion: never after.  After the host cancels an op or
 * gives up on it (a timeout), it keeps the buffer out of use (quarantined)
 * until the op is reaped, so a late transfer lands in memory nobody reads.
 * The ops array and the iovec arrays are the caller's: a plugin copies what
 * it needs before submit returns.
 *
 * CONCURRENCY
 *
 * On one instance, submit, reap, cancel, stats and ctl may be called from any
 * threads at the same time, in any mix.  Each completion is returned by
 * exactly one reap (a reap waiting while another takes the last completion
 * returns 0).  An instance belongs to the process that opened it: a forked
 * child opens its own.  open may run while other instances are in use.
 * reg_mem, unreg_mem and close are never called concurrently with any other
 * call on the same instance.  Logging through the host may happen from any
 * thread.
 *
 * SYNCHRONOUS BACKENDS
 *
 * A backend without HC_BE_CAP_ASYNC may do the work of its ops inside
 * submit (blocking); the host then calls submit from several threads at once
 * to keep several ops in flight.  The completions are still returned by
 * reap.
 *
 * ERRORS
 *
 * Every call returns 0, a count, or a negative errno; none sets errno or
 * aborts.  A plugin logs through host->log, at most once per cause at
 * HC_BE_LOG_WARN or above (no log per op on a hot path).
 */
#ifndef HICACHE_BACKEND_H
#define HICACHE_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HC_BACKEND_ABI_VERSION  1
#define HC_BACKEND_ENTRY_SYMBOL "hc_backend_entry"
#define HC_BE_NAME_BYTES        64 /* object name: 32-byte fingerprint, then 32-byte key */

/* Log levels (syslog numbers, as hicache.h's HC_LOG_*). */
#define HC_BE_LOG_ERR   3
#define HC_BE_LOG_WARN  4
#define HC_BE_LOG_INFO  6
#define HC_BE_LOG_DEBUG 7

/* What the host gives a plugin: valid from entry() until the process ends. */
struct hc_backend_host {
	uint32_t abi_version; /* HC_BACKEND_ABI_VERSION of the host */
	uint32_t size;        /* sizeof(struct hc_backend_host) of the host */
	/* One line, no trailing newline; the host prefixes the plugin's name. */
	void (*log)(const struct hc_backend_host *host, int level, const char *fmt, ...)
		__attribute__((format(printf, 3, 4)));
	void *host_data; /* the host's; a plugin never touches it */
};

/* Capabilities: what a backend does natively (struct hc_backend.caps). */
#define HC_BE_CAP_ASYNC        (1u << 0) /* submit never blocks on I/O; reap waits */
#define HC_BE_CAP_ZERO_COPY    (1u << 1) /* moves bytes straight to or from registered memory (DMA, O_DIRECT) */
#define HC_BE_CAP_BATCH_EXISTS (1u << 2) /* a batch of EXISTS costs about one round trip */
#define HC_BE_CAP_DELETE       (1u << 3) /* DELETE works (else -EOPNOTSUPP) */
#define HC_BE_CAP_DURABLE      (1u << 4) /* objects survive a crash or reboot (as configured, e.g. fsync) */
#define HC_BE_CAP_PERSISTENT   (1u << 5) /* objects outlive close(): a new open() finds them */

enum hc_be_opcode {
	HC_BE_OP_GET = 1,
	HC_BE_OP_PUT = 2,
	HC_BE_OP_EXISTS = 3,
	HC_BE_OP_DELETE = 4,
};

struct hc_be_op {
	uint32_t opcode; /* enum hc_be_opcode */
	uint32_t iovcnt; /* GET, PUT: 1..HC_BE_IOV_MAX; else 0 */
	const struct iovec *iov;
	uint64_t user_data;             /* handed back in the completion */
	uint8_t name[HC_BE_NAME_BYTES]; /* fingerprint, key */
};
#define HC_BE_IOV_MAX 64

struct hc_be_cqe {
	uint64_t user_data;
	int64_t result; /* per opcode, above; negative errno on failure */
};

/* An option: both strings are NUL-terminated and live until open returns. */
struct hc_be_option {
	const char *key;
	const char *value;
};

/*
 * The plugin's table.  Version 1 members are all required.  Later versions
 * only append members; the host reads one only when size covers it.
 */
struct hc_backend {
	uint32_t abi_version;    /* HC_BACKEND_ABI_VERSION the plugin was built for */
	uint32_t size;           /* sizeof(struct hc_backend) the plugin was built with */
	const char *name;        /* short name, e.g. "file" */
	const char *description; /* one line */
	uint64_t caps;           /* HC_BE_CAP_* */

	/* A new instance in *be.  On failure: -errno, and one line in err
	 * (errlen > 0) saying what was wrong and what to do. */
	int (*open)(const struct hc_be_option *opts, unsigned nopts, void **be, char *err, size_t errlen);
	/* Frees the instance.  Every op has been reaped. */
	void (*close)(void *be);

	/* Memory that ops may point into.  0 even when the plugin cannot use it
	 * (it logs one warning and carries on); -errno only for bad arguments or
	 * a broken instance.  unreg_mem takes the addr given to reg_mem. */
	int (*reg_mem)(void *be, void *addr, size_t len);
	int (*unreg_mem)(void *be, void *addr);

	/* Starts ops[0..n) in order.  Returns how many were accepted (1..n); the
	 * rest were not started.  -EAGAIN: none can be accepted until some are
	 * reaped.  Other -errno: none accepted.  Per-op failures are reported
	 * in completions, not here. */
	int (*submit)(void *be, const struct hc_be_op *ops, unsigned n);
	/* Up to max completions into cqes; returns how many.  timeout_ms 0 does
	 * not wait; > 0 waits up to that long for at least one; -1 waits
	 * without a limit.  With nothing in flight it returns 0 at once. */
	int (*reap)(void *be, struct hc_be_cqe *cqes, unsigned max, int timeout_ms);
	/* Asks that the op with this user_data end early.  It still completes
	 * (-ECANCELED, or its result if it won the race) and must be reaped.
	 * 0 if asked, -ENOENT if no such op is in flight, -EOPNOTSUPP. */
	int (*cancel)(void *be, uint64_t user_data);

	/* Calls emit once per counter or gauge.  Names are [a-z0-9_]; these
	 * mean the same everywhere: objects, bytes, capacity_bytes (0: no
	 * limit), gets, hits, misses, puts, deletes, evictions, errors. */
	int (*stats)(void *be, void (*emit)(void *arg, const char *name, uint64_t value), void *arg);
	/* Options that need no ABI change.  value non-NULL sets key (-EINVAL
	 * with nothing changed if bad or read-only, -ENOENT if unknown); value
	 * NULL reads it into out (-ERANGE if outlen is too small).  Returns the
	 * length written (without the NUL), or 0.  The key "caps", when read,
	 * gives this instance's HC_BE_CAP_* in hex where they depend on its
	 * options (O_DIRECT, fsync); the host prefers it to the table's caps. */
	int (*ctl)(void *be, const char *key, const char *value, char *out, size_t outlen);
};

/* The one symbol a plugin exports; host stays valid for the process's life. */
typedef const struct hc_backend *(*hc_backend_entry_fn)(const struct hc_backend_host *host);

#if defined(__GNUC__)
#define HC_BACKEND_EXPORT __attribute__((visibility("default")))
#else
#define HC_BACKEND_EXPORT
#endif

/* What a plugin defines (declared here so the compiler checks its type). */
HC_BACKEND_EXPORT const struct hc_backend *hc_backend_entry(const struct hc_backend_host *host);

#ifdef __cplusplus
}
#endif
#endif /* HICACHE_BACKEND_H */
