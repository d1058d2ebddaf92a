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
#include <string.h>

#include "pool.h"

/* Sizes beyond this are no sizes: an uninitialized member, most likely. */
#define ABI_SIZE_MAX 65536

static int check_tail(const void *src, uint32_t size, size_t dsize, const char *fn, const char *type)
{
	const unsigned char *b = src;

	for (size_t i = dsize; i < size; i++)
		if (b[i])
			return hc__err(
				EINVAL,
				"%s: struct %s of %u bytes sets members past the %zu bytes this libhicache knows:"
				" build against the headers of the library you run",
				fn, type, size, dsize);
	return 0;
}

static int check_size(uint32_t size, size_t v1size, const char *fn, const char *type)
{
	if (size < v1size || size > ABI_SIZE_MAX)
		return hc__err(EINVAL,
			       "%s: struct %s has size %u, which no version of it has (the first is %zu bytes):"
			       " set .size = sizeof(struct %s)",
			       fn, type, size, v1size, type);
	return 0;
}

int hc__abi_in(void *dst, size_t dsize, const void *src, size_t v1size, const char *fn, const char *type)
{
	uint32_t size;
	int ret;

	if (!src)
		return hc__err(EINVAL, "%s: struct %s is NULL", fn, type);
	memcpy(&size, src, sizeof(size));
	if ((ret = check_size(size, v1size, fn, type)) < 0 || (ret = check_tail(src, size, dsize, fn, type)) < 0)
		return ret;
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
	if ((ret = check_size(stride, v1size, fn, type)) < 0)
		return ret;
	for (unsigned i = 0; i < n; i++) {
		uint32_t size;
		memcpy(&size, b + (size_t)i * stride, sizeof(size));
		if (size != stride)
			return hc__err(EINVAL,
				       "%s: element %u of the array of struct %s has size %u, element 0 has %u:"
				       " set every .size = sizeof(struct %s)",
				       fn, i, type, size, stride, type);
		if ((ret = hc__abi_in((unsigned char *)dst + (size_t)i * dsize, dsize, b + (size_t)i * stride, v1size,
				      fn, type)) < 0)
			return ret;
	}
	return 0;
}

int hc__abi_out(void *out, size_t size, const void *src, size_t ssize, size_t v1size, const char *fn, const char *type)
{
	if (!out)
		return hc__err(EINVAL, "%s: struct %s is NULL", fn, type);
	if (size < v1size || size > ABI_SIZE_MAX + ssize)
		return hc__err(
			EINVAL,
			"%s: the size given for struct %s is %zu, which no version of it has (the first is %zu bytes):"
			" pass sizeof *out",
			fn, type, size, v1size);
	memcpy(out, src, size < ssize ? size : ssize);
	if (size > ssize)
		memset((unsigned char *)out + ssize, 0, size - ssize);
	return 0;
}
