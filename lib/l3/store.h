/* SPDX-License-Identifier: Apache-2.0 */
/* store.h - what tests and the service may reach inside a store. */
#ifndef HC_LIB_STORE_H
#define HC_LIB_STORE_H

#include <hicache/backend.h>
#include <hicache/hicache.h>

/* The plugin's table and instance under a store: raw ABI access, e.g. for
 * the conformance suite to plant corrupt objects. */
void hc__store_plugin(hc_store *st, const struct hc_backend **be, void **inst);

/* Reap without waiting (no call need be running): settles orphans, ops
 * given up on after their deadline and a cancel (store.c). */
void hc__store_poll(hc_store *st);
/* How many orphans the store holds now. */
unsigned hc__store_orphans(hc_store *st);

#endif /* HC_LIB_STORE_H */
