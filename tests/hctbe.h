/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hctbe.h - helpers for the tests that drive a backend plugin through
 * include/hicache/backend.h alone, without libhicache (test_shm_backend
 * links nothing else), and for those that read a store's stats: one stat
 * by name.
 */
#ifndef HC_TESTS_HCTBE_H
#define HC_TESTS_HCTBE_H

#include <stdint.h>

#include <hicache/backend.h>

/* One stat looked for by an emit callback; found counts its emissions. */
struct hct_stat {
	const char *name;
	uint64_t value;
	int found;
};
/* The emit callback of a stats call, arg a struct hct_stat: a name that is
 * not [a-z0-9_]+ fails the test. */
void hct_stat_emit(void *arg, const char *name, uint64_t value);
/* Its value, once stats returned r: r must be 0 and the stat emitted once. */
uint64_t hct_stat_value(const struct hct_stat *s, int r);
/* Stat name of a plugin's instance inst (be->stats). */
uint64_t hct_be_stat(const struct hc_backend *be, void *inst, const char *name);

#endif
