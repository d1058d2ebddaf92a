/* SPDX-License-Identifier: Apache-2.0 */
/*
 * region.c - UCX for hicache-memd: one context (RMA), one worker that only
 * this thread touches, and the region mapped for remote access, with the
 * worker's address and the region's packed rkey that HELLO hands out.
 *
 * Who allocates the region decides which transports reach it one-sidedly.
 * With --backing ucx (the default), UCX allocates it (UCP_MEM_MAP_ALLOCATE)
 * as shared memory of its own, which its shared-memory transports (posix,
 * sysv) map into a client on the same host: a get is a memcpy.  Memory we
 * map ourselves is registered instead; RDMA and TCP reach it the same,
 * but shared memory then goes through UCX's emulation: messages
 * this process answers, far slower for large objects.  --backing file:PATH is for that case anyway: a
 * hugetlbfs (or huge=always tmpfs) file, for huge pages under RDMA.
 *
 * The region is prefaulted before the server says it is ready: a fault
 * taken during a client's get is a stall for that client.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "memd.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Fault every page of [p, p + len) in, writable. */
static void prefault(void *p, uint64_t len)
{
	volatile uint8_t *b = p;
	long page = sysconf(_SC_PAGESIZE);

	if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
		return;
	/* an older kernel: one write a page does the same, more slowly */
	for (uint64_t i = 0; i < len; i += (uint64_t)(page > 0 ? page : 4096))
		b[i] = 0;
}

/* Create, size and map the backing file, removed from its directory at
 * once: a restarted server starts empty, and nothing is left behind. */
static int map_file(struct memd_region *r, const char *path, uint64_t size)
{
	int fd, e;
	void *p;

	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		e = errno;
		if (e == EEXIST)
			memd_log(
				MEMD_ERR,
				"--backing file:%s: the file exists; give a path that does not (hicache-memd creates the file and removes it at once, so it never reuses one)",
				path);
		else
			memd_log(MEMD_ERR, "--backing file:%s: cannot create it: %s", path, strerror(e));
		return -e;
	}
	if ((e = posix_fallocate(fd, 0, (off_t)size)) != 0) {
		memd_log(
			MEMD_ERR,
			"--backing file:%s: cannot allocate %" PRIu64
			" bytes: %s (on a hugetlbfs: are there enough free huge pages in /proc/sys/vm/nr_hugepages, and is --size a multiple of the huge page size?)",
			path, size, strerror(e));
		goto fail;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (p == MAP_FAILED) {
		e = errno;
		memd_log(MEMD_ERR, "--backing file:%s: cannot map %" PRIu64 " bytes of it: %s", path, size,
			 strerror(e));
		goto fail;
	}
	unlink(path);
	close(fd);
	r->map = p;
	return 0;
fail:
	unlink(path);
	close(fd);
	return -e;
}

static const char *ucx_err(ucs_status_t st)
{
	return ucs_status_string(st);
}

int memd_region_open(struct memd_region *r, const struct memd_opts *o)
{
	ucp_params_t cp = { .field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP };
	/* RX: a client's get or put over TCP is emulated by messages that this
	 * worker must receive and answer, so their arrival must wake us */
	ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS,
				   .thread_mode = UCS_THREAD_MODE_SINGLE,
				   .events = UCP_WAKEUP_RMA | UCP_WAKEUP_AMO | UCP_WAKEUP_RX | UCP_WAKEUP_TX };
	ucp_mem_map_params_t mp = { .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
						  UCP_MEM_MAP_PARAM_FIELD_FLAGS,
				    .length = o->size };
	ucp_mem_attr_t ma = { .field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH };
	ucp_config_t *cfg;
	ucp_context_h ctx;
	ucp_worker_h worker;
	ucp_mem_h memh;
	ucp_address_t *addr;
	ucs_status_t st;
	int ret = -EIO;

	memset(r, 0, sizeof(*r));
	r->efd = -1;
	r->size = o->size;
	if ((st = ucp_config_read(NULL, NULL, &cfg)) != UCS_OK) {
		memd_log(MEMD_ERR, "cannot read UCX's configuration (the UCX_* variables): %s", ucx_err(st));
		return -EINVAL;
	}
	st = ucp_init(&cp, cfg, &ctx);
	ucp_config_release(cfg);
	if (st != UCS_OK) {
		memd_log(MEMD_ERR, "cannot start UCX: %s (check UCX_TLS and UCX_NET_DEVICES)", ucx_err(st));
		return -EIO;
	}
	r->ctx = ctx;
	if ((st = ucp_worker_create(ctx, &wp, &worker)) != UCS_OK) {
		memd_log(MEMD_ERR, "cannot create a UCX worker: %s", ucx_err(st));
		goto fail;
	}
	r->worker = worker;

	if (o->backing_file) {
		if ((ret = map_file(r, o->backing_file, o->size)) < 0)
			goto fail;
		mp.address = r->map;
	} else {
		mp.flags = UCP_MEM_MAP_ALLOCATE;
	}
	if ((st = ucp_mem_map(ctx, &mp, &memh)) != UCS_OK) {
		memd_log(MEMD_ERR, "cannot %s a region of %" PRIu64 " bytes with UCX: %s%s",
			 o->backing_file ? "register" : "allocate", o->size, ucx_err(st),
			 o->backing_file ? " (is LimitMEMLOCK / ulimit -l unlimited?)"
					 : " (is there that much free memory, and room in /dev/shm?)");
		ret = -ENOMEM;
		goto fail;
	}
	r->memh = memh;
	if ((st = ucp_mem_query(memh, &ma)) != UCS_OK || ma.length < o->size) {
		memd_log(MEMD_ERR, "cannot find where UCX mapped the region: %s",
			 st != UCS_OK ? ucx_err(st) : "it is shorter than asked");
		goto fail;
	}
	r->base = ma.address;
	if (!o->backing_file) {
		memd_log(MEMD_DEBUG, "prefaulting the region: %" PRIu64 " bytes at %p", o->size, r->base);
		prefault(r->base, o->size);
	}

	if ((st = ucp_worker_get_address(worker, &addr, &r->addr_len)) != UCS_OK) {
		memd_log(MEMD_ERR, "cannot get the UCX worker's address: %s", ucx_err(st));
		goto fail;
	}
	r->addr = addr;
	if ((st = ucp_rkey_pack(ctx, memh, &r->rkey, &r->rkey_len)) != UCS_OK) {
		memd_log(MEMD_ERR, "cannot pack the region's remote key: %s", ucx_err(st));
		goto fail;
	}
	if (r->addr_len > HC_MW_BLOB_MAX || r->rkey_len > HC_MW_BLOB_MAX) {
		memd_log(
			MEMD_ERR,
			"the UCX worker's address (%zu bytes) or the region's rkey (%zu) is longer than the protocol's %u: narrow UCX_TLS or UCX_NET_DEVICES",
			r->addr_len, r->rkey_len, HC_MW_BLOB_MAX);
		goto fail;
	}
	if ((st = ucp_worker_get_efd(worker, &r->efd)) != UCS_OK) {
		memd_log(MEMD_ERR, "cannot get the UCX worker's event fd: %s", ucx_err(st));
		goto fail;
	}
	return 0;
fail:
	memd_region_close(r);
	return ret;
}

void memd_region_close(struct memd_region *r)
{
	if (r->rkey)
		ucp_rkey_buffer_release(r->rkey);
	if (r->addr)
		ucp_worker_release_address(r->worker, r->addr);
	if (r->worker) {
		/* Let the worker finish what clients started (the wireup of an
		 * endpoint, a close): UCX 1.13 asserts when it destroys a TCP
		 * endpoint with a wireup reply still queued.  20 ms without an
		 * event, 500 ms at most. */
		for (unsigned idle = 0, turns = 0; idle < 20 && turns < 500; turns++) {
			if (ucp_worker_progress(r->worker)) {
				idle = 0;
				continue;
			}
			idle++;
			usleep(1000);
		}
		ucp_worker_destroy(r->worker);
	}
	/* after the worker: a client's put emulated over TCP may land while
	 * it drains, and must land in mapped memory */
	if (r->memh)
		ucp_mem_unmap(r->ctx, r->memh);
	if (r->ctx)
		ucp_cleanup(r->ctx);
	if (r->map)
		munmap(r->map, r->size);
	memset(r, 0, sizeof(*r));
	r->efd = -1;
}

/* A bounded share of the worker's work per turn of the loop: over TCP
 * this process does the copies of every client's gets and puts, and a
 * client streaming puts would otherwise keep it here, with no request
 * answered, no lease expired and SIGTERM unread.  The loop comes back at
 * once (ucp_worker_arm says busy). */
#define MEMD_PROGRESS_TURN 64

void memd_region_progress(struct memd_region *r)
{
	for (unsigned i = 0; i < MEMD_PROGRESS_TURN && ucp_worker_progress(r->worker); i++)
		;
}

int memd_region_arm(struct memd_region *r)
{
	ucs_status_t st = ucp_worker_arm(r->worker);

	if (st == UCS_OK)
		return 0;
	if (st == UCS_ERR_BUSY)
		return -EAGAIN;
	return -EIO;
}
