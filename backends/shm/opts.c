/* SPDX-License-Identifier: Apache-2.0 */
/*
 * opts.c - the shm backend's key=value options; hicache-backend-shm(7) is
 * their reference.  Every unknown key, repeated key or bad value fails with
 * -EINVAL and one line naming the option and what to give instead.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm.h"

/* "1"/"0" (also yes/no, true/false, on/off): 1, 0, or -1 if neither. */
int hc__shm_parse_bool(const char *v)
{
	static const char *const yes[] = { "1", "yes", "true", "on" }, *const no[] = { "0", "no", "false", "off" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcmp(v, yes[i]) == 0)
			return 1;
		if (strcmp(v, no[i]) == 0)
			return 0;
	}
	return -1;
}

/* Bytes with an optional binary suffix: 4096, 64K, 64M, 10G, 1T (also KiB, MB...). */
static int parse_size(const char *v, uint64_t *out)
{
	uint64_t n = 0, mult = 1;
	const char *p = v;

	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (n > (UINT64_MAX - 9) / 10)
			return -1;
		n = n * 10 + (uint64_t)(*p - '0');
	}
	switch (*p) {
	case 'k':
	case 'K':
		mult = UINT64_C(1) << 10;
		p++;
		break;
	case 'm':
	case 'M':
		mult = UINT64_C(1) << 20;
		p++;
		break;
	case 'g':
	case 'G':
		mult = UINT64_C(1) << 30;
		p++;
		break;
	case 't':
	case 'T':
		mult = UINT64_C(1) << 40;
		p++;
		break;
	default:
		break;
	}
	if (mult > 1 && (strcmp(p, "iB") == 0 || strcmp(p, "B") == 0))
		p += strlen(p);
	if (*p || (mult > 1 && n > UINT64_MAX / mult))
		return -1;
	*out = n * mult;
	return 0;
}

static int parse_u32(const char *v, uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t n;

	if (parse_size(v, &n) < 0 || n < min || n > max)
		return -1;
	*out = (uint32_t)n;
	return 0;
}

enum opt_key {
	OPT_NAME,
	OPT_DIR,
	OPT_CAPACITY,
	OPT_CREATE,
	OPT_BLOCK_SIZE,
	OPT_MAX_OBJECTS,
	OPT_MAX_OPENERS,
	OPT_POPULATE,
	OPT_DESTROY_ON_CLOSE,
	OPT_PUT_WAIT_MS,
	OPT__COUNT
};

static const char *const opt_names[OPT__COUNT] = {
	[OPT_NAME] = "name",
	[OPT_DIR] = "dir",
	[OPT_CAPACITY] = "capacity",
	[OPT_CREATE] = "create",
	[OPT_BLOCK_SIZE] = "block_size",
	[OPT_MAX_OBJECTS] = "max_objects",
	[OPT_MAX_OPENERS] = "max_openers",
	[OPT_POPULATE] = "populate",
	[OPT_DESTROY_ON_CLOSE] = "destroy_on_close",
	[OPT_PUT_WAIT_MS] = "put_wait_ms",
};

static int set_opt(struct hc_shm_opts *o, enum opt_key k, const char *v, char *err, size_t errlen)
{
	int b;

	switch (k) {
	case OPT_NAME:
		if (strlen(v) > HC_SHM_NAME_MAX)
			return hc__shm_fail(err, errlen, EINVAL, "name= is longer than %d characters", HC_SHM_NAME_MAX);
		strcpy(o->name, v);
		return 0;
	case OPT_DIR:
		if (v[0] != '/' || strlen(v) >= sizeof(o->dir) - HC_SHM_NAME_MAX - 64)
			return hc__shm_fail(err, errlen, EINVAL, "dir=%s must be an absolute path to a directory", v);
		strcpy(o->dir, v);
		return 0;
	case OPT_CAPACITY:
		if (parse_size(v, &o->capacity) < 0 || o->capacity == 0)
			return hc__shm_fail(
				err, errlen, EINVAL,
				"capacity=%s is not a size in bytes: give e.g. 64M or 10G (suffixes K, M, G, T)", v);
		return 0;
	case OPT_CREATE:
		if (strcmp(v, "auto") == 0)
			o->create = HC_SHM_CREATE_AUTO;
		else if (strcmp(v, "yes") == 0)
			o->create = HC_SHM_CREATE_YES;
		else if (strcmp(v, "no") == 0)
			o->create = HC_SHM_CREATE_NO;
		else
			return hc__shm_fail(err, errlen, EINVAL, "create=%s is not auto, yes or no", v);
		return 0;
	case OPT_BLOCK_SIZE:
		if (parse_u32(v, HC_SHM_MIN_BLOCK, HC_SHM_MAX_BLOCK, &o->block_bytes) < 0 ||
		    (o->block_bytes & (o->block_bytes - 1)))
			return hc__shm_fail(err, errlen, EINVAL, "block_size=%s is not a power of two from 4K to 64M",
					    v);
		return 0;
	case OPT_MAX_OBJECTS:
		if (parse_u32(v, 1, HC_SHM_MAX_INDEX, &o->max_objects) < 0)
			return hc__shm_fail(err, errlen, EINVAL, "max_objects=%s is not a count from 1 to 2^31-1", v);
		return 0;
	case OPT_MAX_OPENERS:
		if (parse_u32(v, 1, HC_SHM_MAX_OPENERS, &o->max_openers) < 0)
			return hc__shm_fail(err, errlen, EINVAL, "max_openers=%s is not a count from 1 to %d", v,
					    HC_SHM_MAX_OPENERS);
		return 0;
	case OPT_PUT_WAIT_MS:
		if (parse_u32(v, 0, 600000, &o->put_wait_ms) < 0)
			return hc__shm_fail(err, errlen, EINVAL,
					    "put_wait_ms=%s is not a count of milliseconds up to 600000", v);
		return 0;
	case OPT_POPULATE:
	case OPT_DESTROY_ON_CLOSE:
		if ((b = hc__shm_parse_bool(v)) < 0)
			return hc__shm_fail(err, errlen, EINVAL, "%s=%s is not 0 or 1", opt_names[k], v);
		*(k == OPT_POPULATE ? &o->populate : &o->destroy_on_close) = b;
		return 0;
	default:
		return hc__shm_fail(err, errlen, EINVAL, "option %d is unknown", (int)k);
	}
}

int hc__shm_opts_parse(const struct hc_be_option *opts, unsigned nopts, struct hc_shm_opts *o, char *err, size_t errlen)
{
	bool seen[OPT__COUNT] = { false };
	int ret;

	memset(o, 0, sizeof(*o));
	o->create = HC_SHM_CREATE_AUTO;
	o->populate = 1;
	o->put_wait_ms = 200;
	if (nopts && !opts)
		return hc__shm_fail(err, errlen, EINVAL, "options are NULL");
	for (unsigned i = 0; i < nopts; i++) {
		const char *key = opts[i].key, *v = opts[i].value;
		int k;

		if (!key || !v)
			return hc__shm_fail(err, errlen, EINVAL, "option %u has a NULL key or value", i);
		for (k = 0; k < OPT__COUNT && strcmp(key, opt_names[k]) != 0; k++)
			;
		if (k == OPT__COUNT)
			return hc__shm_fail(
				err, errlen, EINVAL,
				"unknown option '%s': shm takes name, dir, capacity, create, block_size, max_objects, max_openers, populate, destroy_on_close, put_wait_ms",
				key);
		if (seen[k])
			return hc__shm_fail(err, errlen, EINVAL, "option %s= is given twice: give it once", key);
		seen[k] = true;
		if ((ret = set_opt(o, (enum opt_key)k, v, err, errlen)) < 0)
			return ret;
	}
	if (!seen[OPT_NAME])
		return hc__shm_fail(err, errlen, EINVAL, "name= is missing: name the store, e.g. name=l3");
	return 0;
}
