/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_spec.c - libFuzzer on backend specs, "name:key=value,..." as
 * hicached, the replay and hicache-backend-check take them
 * (hc__plugin_spec_parse, lib/l3/plugin.c).  What it takes must hold
 * together: a name (the loader judges its characters), options of a key
 * and a value each,
 * no key twice, no more than HC_PLUGIN_OPTS_MAX; what it refuses, it
 * says why.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hicache/hicache.h>

#include "lib/l3/plugin.h"
#include "shmpool/pool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	struct hc__plugin_spec sp;

	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	hc__err(0, "%s", ""); /* no line: hc_last_error() says "no error" until a refusal gives one */
	if (hc__plugin_spec_parse(s, &sp) < 0) {
		if (!strcmp(hc_last_error(), "no error"))
			abort(); /* a refusal without a reason */
		free(s);
		return 0;
	}
	if (!sp.name[0] || sp.nopt > HC_PLUGIN_OPTS_MAX)
		abort();
	for (unsigned i = 0; i < sp.nopt; i++) {
		if (!sp.opt[i].key || !sp.opt[i].key[0] || !sp.opt[i].value || strchr(sp.opt[i].key, '=') ||
		    strchr(sp.opt[i].key, ','))
			abort();
		for (unsigned j = 0; j < i; j++)
			if (!strcmp(sp.opt[i].key, sp.opt[j].key))
				abort();
	}
	free(s);
	return 0;
}
