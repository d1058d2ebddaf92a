/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host.c - HC_DEV_HOST: host memory stands in for the device.  The
 * issuer copies each layer before it marks it, so an issued layer has
 * arrived.  The kernel path runs the kernel's loop in C (hc__dl_copy).
 */
#include <errno.h>
#include <string.h>

#include "../../shmpool/pool.h"
#include "internal.h"

static int host_open(hc_dev *d, const struct hc_dev_spec *s)
{
	(void)d;
	(void)s;
	return 0;
}

static void host_close(hc_dev *d)
{
	(void)d;
}

static int host_begin(hc_dev *d, hc_xfer *x, enum hc_dev_path path)
{
	(void)d;
	(void)x;
	(void)path;
	return 0;
}

static int host_runs(hc_dev *d, hc_xfer *x, const struct hc__run *runs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		uint8_t *env = d->pool->env + runs[i].env;
		void *dev = (void *)(uintptr_t)runs[i].dev;
		if (x->store)
			memcpy(env, dev, runs[i].len);
		else
			memcpy(dev, env, runs[i].len);
	}
	return (int)n;
}

static int host_gather(hc_dev *d, hc_xfer *x, const struct hc__dl *L)
{
	hc__dl_copy(L, d->pool->env, x->ids, x->presence, x->slots, x->state_slots, x->store);
	return 0;
}

static int host_mark(hc_dev *d, hc_xfer *x, unsigned layer)
{
	(void)d;
	(void)x;
	(void)layer;
	return 0;
}

static void host_issued(hc_dev *d, hc_xfer *x, int result)
{
	(void)d;
	(void)x;
	(void)result;
}

/* The bytes moved before the layer was marked issued. */
static int host_sync(hc_dev *d, hc_xfer *x, unsigned layer)
{
	(void)d;
	(void)x;
	(void)layer;
	return 0;
}

static void *host_event(hc_xfer *x, unsigned layer)
{
	(void)x;
	(void)layer;
	hc__err(ENOTSUP, "transfer: an HC_DEV_HOST transfer has no CUDA events (wait with hc_xfer_wait_layer)");
	return NULL;
}

static void host_end(hc_dev *d, hc_xfer *x)
{
	(void)d;
	(void)x;
}

static void host_thread_start(hc_dev *d)
{
	(void)d;
}

/* memcpy has no per-copy cost worth a second loop: runs always. */
static enum hc_dev_path host_choose(hc_dev *d, const struct hc__run *runs, unsigned n)
{
	(void)d;
	(void)runs;
	(void)n;
	return HC_PATH_DIRECT;
}

const struct hc__dev_ops hc__dev_host_ops = {
	.name = "host",
	.open = host_open,
	.close = host_close,
	.thread_start = host_thread_start,
	.begin = host_begin,
	.runs = host_runs,
	.gather = host_gather,
	.mark = host_mark,
	.issued = host_issued,
	.sync = host_sync,
	.event = host_event,
	.end = host_end,
	.choose = host_choose,
};
