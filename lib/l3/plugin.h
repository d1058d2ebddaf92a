/* SPDX-License-Identifier: Apache-2.0 */
/* plugin.h - finding, loading and checking backend plugins (doc/design.md, "The plugin ABI"). */
#ifndef HC_LIB_PLUGIN_H
#define HC_LIB_PLUGIN_H

#include <limits.h>

#include <hicache/backend.h>

#define HC_PLUGIN_NAME_MAX 63
#define HC_PLUGIN_OPTS_MAX 64

struct hc__plugin {
	const struct hc_backend *be; /* the plugin's table, checked */
	char name[HC_PLUGIN_NAME_MAX + 1];
	char path[PATH_MAX];
};

/* A parsed "name[:key=value[,key=value]...]" spec; strings point into buf. */
struct hc__plugin_spec {
	char name[PATH_MAX];
	struct hc_be_option opt[HC_PLUGIN_OPTS_MAX];
	unsigned nopt;
	char buf[4096];
};

int hc__plugin_spec_parse(const char *spec, struct hc__plugin_spec *out);
int hc__plugin_load(const char *name, const char *dir, struct hc__plugin *out);
int hc__plugin_open(const struct hc__plugin *pl, const struct hc__plugin_spec *spec, void **inst);

#endif /* HC_LIB_PLUGIN_H */
