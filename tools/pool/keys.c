/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keys.c - hicache-pool keys: the keyed pages of a pool, sorted by key.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

const char hcp_keys_usage[] = "Usage: " HCP_PROG
			      " keys NAME [PREFIX] [--dir DIR | --socket PATH] [--limit N] [--json]\n"
			      "\n"
			      "List the keyed pages of pool NAME, sorted by key: key, page id, state,\n"
			      "chain depth, pins, host locks, tickets holding it and last-use stamp.\n"
			      "PREFIX (hex digits, either case) keeps only the keys that start with it.\n"
			      "The pool is attached read-only, and each page is read on its own, so the\n"
			      "list is not one atomic snapshot of a busy pool.\n"
			      "\n"
			      "  --dir DIR       the pool's directory (default " HCP_DEFAULT_DIR ")\n" HCP_USAGE_SOCKET
			      "  --limit N       show at most the first N matching keys\n"
			      "  --json          print one JSON object\n";

static int keys_cmp(const void *a, const void *b)
{
	const struct hc_page_info *x = a, *y = b;
	int r = memcmp(x->key, y->key, HC_KEY_BYTES);

	return r ? r : (x->id > y->id) - (x->id < y->id);
}

static struct json_object *keys_json(const struct hc_pool_info *in, const char *prefix, const struct hc_page_info *pi,
				     uint32_t shown, uint32_t matching)
{
	struct json_object *o = hcp_json_new("hicache.pool-keys/1"), *a = json_object_new_array(), *x;
	char hex[2 * HC_KEY_BYTES + 1];

	hcp_jadd_str(o, "name", in->name);
	hcp_jadd_str(o, "path", in->path);
	hcp_jadd_str(o, "prefix", prefix);
	hcp_jadd_u64(o, "matching", matching);
	hcp_jadd_u64(o, "shown", shown);
	for (uint32_t i = 0; i < shown; i++) {
		x = json_object_new_object();
		hcp_jadd_str(x, "key", hc_cli_hex(pi[i].key, HC_KEY_BYTES, hex));
		hcp_jadd_u64(x, "page", pi[i].id);
		hcp_jadd_u64(x, "gen", pi[i].gen);
		hcp_jadd_str(x, "state", hc_page_state_name(pi[i].state));
		hcp_jadd_u64(x, "depth", pi[i].depth);
		hcp_jadd_u64(x, "pins", pi[i].pins);
		hcp_jadd_u64(x, "locks", pi[i].locks);
		hcp_jadd_u64(x, "tickets", pi[i].tickets);
		hcp_jadd_u64(x, "stamp", pi[i].stamp);
		hcp_jadd_u64(x, "presence", pi[i].presence);
		json_object_array_add(a, x);
	}
	json_object_object_add(o, "keys", a);
	return o;
}

static void keys_text(const struct hc_page_info *pi, uint32_t shown, uint32_t matching, const char *prefix)
{
	char hex[2 * HC_KEY_BYTES + 1];

	if (shown)
		printf("%-64s  %8s  %-10s  %5s  %5s  %5s  %7s  %s\n", "KEY", "PAGE", "STATE", "DEPTH", "PINS", "LOCKS",
		       "TICKETS", "STAMP");
	for (uint32_t i = 0; i < shown; i++)
		printf("%s  %8" PRIu32 "  %-10s  %5" PRIu32 "  %5" PRIu32 "  %5" PRIu32 "  %7" PRIu32 "  %" PRIu64 "\n",
		       hc_cli_hex(pi[i].key, HC_KEY_BYTES, hex), pi[i].id, hc_page_state_name(pi[i].state), pi[i].depth,
		       pi[i].pins, pi[i].locks, pi[i].tickets, pi[i].stamp);
	printf("%" PRIu32 " shown of %" PRIu32 " matching key%s%s%s%s\n", shown, matching, matching == 1 ? "" : "s",
	       *prefix ? " (prefix " : "", prefix, *prefix ? ")" : "");
}

int hcp_cmd_keys(int argc, char **argv)
{
	static const struct option opts[] = {
		HCP_OPTION_DIR,  HCP_OPTION_SOCKET,
		HCP_OPTION_JSON, { "limit", required_argument, NULL, HCP_OPT_LIMIT },
		HCP_OPTIONS_END,
	};
	char prefix[2 * HC_KEY_BYTES + 1] = "", hex[2 * HC_KEY_BYTES + 1];
	const char *name, *pfx = NULL;
	struct hc_page_info *pi = NULL;
	struct hc_pool_info in;
	struct hcp_args va;
	uint32_t limit, matching = 0;
	size_t plen;
	hc_pool *p;
	int ret;

	if ((ret = hcp_parse_args(argc, argv, opts, hcp_keys_usage, &va, &name, &pfx)) != HCP_GO)
		return ret;
	if (pfx && hc_cli_parse_hex_prefix("PREFIX", pfx, 2 * HC_KEY_BYTES, prefix) < 0)
		return hcp_usage_error("%s", hc_cli_error());
	plen = strlen(prefix);
	if (hcp_attach(name, va.dir, HC_ATTACH_READONLY, &p) < 0)
		return hcp_failure("%s", hcp_lib_error());
	ret = HC_CLI_EXIT_FAIL;
	hc_pool_info(p, &in, sizeof(in));
	pi = calloc(in.npages ? in.npages : 1, sizeof(*pi));
	if (!pi) {
		hcp_failure("out of memory for the %" PRIu32 " pages of pool '%s'", in.npages, in.name);
		goto out;
	}
	for (uint32_t id = 0; id < in.npages; id++) {
		if (hc_page_info(p, id, &pi[matching], sizeof(pi[matching])) < 0) {
			hcp_failure("%s", hcp_lib_error());
			goto out;
		}
		if (pi[matching].keyed && !strncmp(hc_cli_hex(pi[matching].key, HC_KEY_BYTES, hex), prefix, plen))
			matching++;
	}
	qsort(pi, matching, sizeof(*pi), keys_cmp);
	limit = va.limit < matching ? va.limit : matching;
	if (va.json) {
		struct json_object *o = keys_json(&in, prefix, pi, limit, matching);

		if (hcp_print_json(o) == 0)
			ret = HC_CLI_EXIT_OK;
		json_object_put(o);
		goto out;
	}
	keys_text(pi, limit, matching, prefix);
	ret = HC_CLI_EXIT_OK;
out:
	free(pi);
	hc_pool_detach(p);
	return ret;
}
