/* SPDX-License-Identifier: Apache-2.0 */
/*
 * workload.c - the requests of a replay, in one growing array, and their
 * hash ids in another.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "workload.h"

void hc_rp_workload_free(struct hc_rp_workload *w)
{
	free(w->req);
	free(w->ids);
	memset(w, 0, sizeof(*w));
}

int hc_rp_workload_grow(struct hc_rp_workload *w, size_t ids)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 256;
		struct hc_rp_req *r = realloc(w->req, cap * sizeof(*r));
		if (!r)
			return -ENOMEM;
		w->req = r;
		w->cap = cap;
	}
	if (w->nids + ids > w->cap_ids) {
		size_t cap = w->cap_ids ? 2 * w->cap_ids : 4096;
		uint64_t *x;
		while (cap < w->nids + ids)
			cap *= 2;
		if (!(x = realloc(w->ids, cap * sizeof(*x))))
			return -ENOMEM;
		w->ids = x;
		w->cap_ids = cap;
	}
	return 0;
}
