/* SPDX-License-Identifier: Apache-2.0 */
/*
 * abi.c - the versioned structs of the public ABI (hicache.h, "ABI"):
 * a struct a caller built against another version of the headers, read
 * into the library's own or written from it.  The caller's struct may be
 * older (smaller: the members it lacks read as zero, "as before") or newer
 * (larger: allowed while every byte past ours is zero, since a member we
 * do not know cannot be honoured).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pool.h"

/* Sizes beyond these are no sizes (an uninitialized member, most likely):
 * the structs a caller fills are a few hundred bytes, those the library
 * fills a few KiB.  The first bounds how far past ours we read. */
#define ABI_IN_MAX  4096
#define ABI_OUT_MAX 65536

enum { IN, ELEMENT, OUT };

static int bad_size(const char *fn, const char *type, size_t size, size_t v1size, int kind)
{
	char how[128];

	if (kind == OUT)
		snprintf(how, sizeof(how), "pass sizeof *out");
	else
		snprintf(how, sizeof(how), "set %s.size = sizeof(struct %s)%s",
			 kind == ELEMENT ? "every element's " : "", type, kind == IN ? " before the call" : "");
	return hc__err(EINVAL, "%s: struct %s has size %zu, which no version of it has (the first is %zu bytes): %s",
		       fn, type, size, v1size, how);
}

static_assert(sizeof(struct hc_recovery_report) == 64, "hc_repair_report embeds the recovery report: it never grows");

int hc__abi_in(void *dst, size_t dsize, const void *src, size_t v1size, const char *fn, const char *type)
{
	const unsigned char *b = src;
	uint32_t size;

	if (!src)
		return hc__err(EINVAL, "%s: struct %s is NULL", fn, type);
	memcpy(&size, src, sizeof(size));
	if (size < v1size || size > ABI_IN_MAX)
		return bad_size(fn, type, size, v1size, IN);
	for (size_t i = dsize; i < size; i++)
		if (b[i])
			return hc__err(
				EINVAL,
				"%s: struct %s of %u bytes sets members past the %zu bytes this libhicache knows: build against the headers of the library you run",
				fn, type, size, dsize);
	memset(dst, 0, dsize);
	memcpy(dst, src, size < dsize ? size : dsize);
	return 0;
}

int hc__abi_in_array(void *dst, size_t dsize, const void *src, unsigned n, size_t v1size, const char *fn,
		     const char *type)
{
	const unsigned char *b = src;
	uint32_t stride;
	int ret;

	if (n == 0)
		return 0;
	if (!src)
		return hc__err(EINVAL, "%s: the array of struct %s is NULL", fn, type);
	memcpy(&stride, src, sizeof(stride)); /* element 0's size strides the array */
	if (stride < v1size || stride > ABI_IN_MAX)
		return bad_size(fn, type, stride, v1size, ELEMENT);
	for (unsigned i = 0; i < n; i++) {
		uint32_t size;
		memcpy(&size, b + (size_t)i * stride, sizeof(size));
		if (size != stride)
			return hc__err(
				EINVAL,
				"%s: element %u of the array of struct %s has size %u, element 0 has %u: set every .size = sizeof(struct %s)",
				fn, i, type, size, stride, type);
		if ((ret = hc__abi_in((unsigned char *)dst + (size_t)i * dsize, dsize, b + (size_t)i * stride, v1size,
				      fn, type)) < 0)
			return ret;
	}
	return 0;
}

int hc__abi_out_ok(size_t size, size_t v1size, const char *fn, const char *type)
{
	if (size < v1size || size > ABI_OUT_MAX)
		return bad_size(fn, type, size, v1size, OUT);
	return 0;
}

int hc__abi_out(void *out, size_t size, const void *src, size_t ssize, size_t v1size, const char *fn, const char *type)
{
	int ret;

	if (!out)
		return hc__err(EINVAL, "%s: struct %s is NULL", fn, type);
	if ((ret = hc__abi_out_ok(size, v1size, fn, type)) < 0)
		return ret;
	memcpy(out, src, size < ssize ? size : ssize);
	if (size > ssize)
		memset((unsigned char *)out + ssize, 0, size - ssize);
	return 0;
}
