/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_segment.c - libFuzzer on a pool segment as hc_pool_attach meets
 * it.  The bytes are a segment's image from its start: they are written
 * to a file of a private directory and attached through the real path
 * (hc_pool_attach, admin and without recovery: the header and component
 * table checks of segment.c, the geometry rebuilt by layout.c and
 * compared, the fingerprint), then, once taken, hc_pool_check reads every
 * region as the image left it (check.c), as hicache-pool check would on a
 * scribbled pool.  The file is padded with zeros to the size its header
 * gives (at most 64 MiB), as a sparse pool has its envelopes: the seeds
 * are real small pools cut after their last non-zero byte.  An all-zero
 * meta_digest is resealed, so that a mutated geometry gets past the
 * checksum to the checks behind it.  A refusal must say why.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>

#include <hicache/hicache.h>

#include "shmpool/layout.h"
#include "shmpool/pool.h"

#define SEG_MAX_BYTES (UINT64_C(64) << 20) /* sparse, but a bound all the same */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void rm_dir(void)
{
	rmdir(dir);
}

/* The private directory, made once: never /dev/shm, removed at exit. */
static const char *fuzz_dir(void)
{
	const char *tmp = getenv("TMPDIR");

	if (dir[0])
		return dir;
	if ((size_t)snprintf(dir, sizeof(dir), "%s/hicache-fuzz-seg.XXXXXX", tmp && *tmp ? tmp : "/tmp") >=
		    sizeof(dir) ||
	    !mkdtemp(dir)) {
		snprintf(dir, sizeof(dir), "/tmp/hicache-fuzz-seg.XXXXXX");
		if (!mkdtemp(dir))
			abort();
	}
	atexit(rm_dir);
	return dir;
}

/* Seal an all-zero meta_digest over the header and component table given. */
static void reseal(int fd, const uint8_t *data, size_t size)
{
	static const uint8_t zero[32];
	static struct hc_seg_comp rc[HC_MAX_COMPONENTS];
	struct hc_seg_hdr h;
	uint8_t digest[32];

	if (size < HC_SEG_HDR_BYTES)
		return;
	memcpy(&h, data, sizeof(h));
	if (memcmp(h.meta_digest, zero, 32) || h.ncomp == 0 || h.ncomp > HC_MAX_COMPONENTS ||
	    size < HC_SEG_HDR_BYTES + h.ncomp * sizeof(rc[0]))
		return;
	memcpy(rc, data + HC_SEG_HDR_BYTES, h.ncomp * sizeof(rc[0]));
	hc__meta_digest(&h, rc, h.ncomp, digest);
	if (pwrite(fd, digest, 32, offsetof(struct hc_seg_hdr, meta_digest)) != 32)
		abort();
}

static void count_line(void *arg, const char *line)
{
	if (!line || !*line)
		abort(); /* a finding says what */
	(*(unsigned *)arg)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hc_attach_opts o = { .size = sizeof(o), .flags = HC_ATTACH_ADMIN | HC_ATTACH_NO_RECOVER };
	struct hc_pool_info info;
	char path[128];
	uint64_t want = size;
	unsigned lines;
	hc_pool *p;
	int fd, ret;

	o.dir = fuzz_dir();
	snprintf(path, sizeof(path), "%s/hicache.seg", o.dir);
	if ((fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		abort();
	if (size && write(fd, data, size) != (ssize_t)size)
		abort();
	reseal(fd, data, size);
	if (size >= sizeof(struct hc_seg_hdr)) {
		uint64_t claimed;

		memcpy(&claimed, data + offsetof(struct hc_seg_hdr, segment_bytes), 8);
		if (claimed > want && claimed <= SEG_MAX_BYTES)
			want = claimed;
	}
	if (ftruncate(fd, (off_t)want) < 0)
		abort();
	close(fd);

	hc__err(0, "%s", ""); /* "no error" until a refusal says one */
	ret = hc_pool_attach("seg", &o, &p);
	unlink(path); /* the mapping holds it */
	if (ret < 0) {
		if (!strcmp(hc_last_error(), "no error"))
			abort(); /* a refusal without a reason */
		return 0;
	}
	if (hc_pool_info(p, &info, sizeof(info)) < 0 || info.segment_bytes != want || info.ncomp == 0 ||
	    info.ncomp > HC_MAX_COMPONENTS)
		abort(); /* taken, but not what the file is */
	lines = 0;
	if (hc_pool_check(p, 0, count_line, &lines) < 0 || hc_pool_check(p, HC_CHECK_QUIESCENT, count_line, &lines) < 0)
		abort(); /* an admin attach is read-write: check runs */
	hc_pool_detach(p);
	return 0;
}
