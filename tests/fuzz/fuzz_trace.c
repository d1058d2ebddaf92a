/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_trace.c - libFuzzer on the replay's Mooncake trace reader
 * (tools/replay/trace.c): each input is a whole trace file, read through
 * hc_rp_trace_load from a memfd, as a file on disk would be.  Whatever it
 * takes must hold together: requests in arrival order, one id per block,
 * every request's ids inside the id array.  Built with ASan and UBSan
 * (fuzz.sh), and replayed over its corpus in make check (replay.c).
 */
#ifndef _GNU_SOURCE /* memfd_create; the build may give it already */
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tools/cli/cli.h"
#include "tools/replay/workload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	struct hc_rp_workload w;
	char path[64];

	if (fd < 0 && (fd = memfd_create("hicache-fuzz-trace", MFD_CLOEXEC)) < 0)
		abort();
	if (ftruncate(fd, 0) < 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if (hc_rp_trace_load(path, 0, &w) < 0)
		return 0; /* refused, with a message: what it is for */
	if (w.n == 0)
		abort();
	for (size_t q = 0; q < w.n; q++) {
		const struct hc_rp_req *r = &w.req[q];
		if ((q && r->t_ms < w.req[q - 1].t_ms) ||
		    r->nblocks != ((uint64_t)r->input_len + HC_RP_BLOCK_TOKENS - 1) / HC_RP_BLOCK_TOKENS ||
		    r->first + r->nblocks > w.nids)
			abort();
	}
	hc_rp_workload_free(&w);
	return 0;
}
