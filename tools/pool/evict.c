/* SPDX-License-Identifier: Apache-2.0 */
/*
 * evict.c - hicache-pool evict and clear: retire pages of a pool, one key,
 * N by the eviction policy, or every READY page.
 */
#include <inttypes.h>
#include <stdio.h>

#include "pool.h"

const char hcp_evict_usage[] = "Usage: " HCP_PROG " evict NAME (--key HEX64 | --count N) [--dir DIR | --socket PATH]\n"
			       "\n"
			       "Evict from pool NAME the page of one key, or up to N pages chosen by the\n"
			       "pool's eviction policy.  Only keyed READY pages that no rank pins or\n"
			       "host-locks and no ticket holds are evicted.  The tool takes a rank slot\n"
			       "while it runs, so the pool needs a free one.\n"
			       "\n"
			       "  --key HEX64     the key, 64 hex digits (as 'keys' lists them); exit\n"
			       "                  status 1 if no page has it\n"
			       "  --count N       evict up to N pages by policy and print how many went\n"
			       "  --dir DIR       the pool's directory (default " HCP_DEFAULT_DIR
			       ")\n" HCP_USAGE_SOCKET;

const char hcp_clear_usage[] = "Usage: " HCP_PROG " clear NAME [--dir DIR | --socket PATH]\n"
			       "\n"
			       "Free every READY page of pool NAME and print how many.  Refused, with what\n"
			       "is held, while any rank pins, host-locks or reserves a page or a ticket\n"
			       "holds one.  Pages a rank allocated without a key and uses without a pin\n"
			       "are freed too: clear a pool only while its engines are idle.  The tool\n"
			       "takes a rank slot while it runs, so the pool needs a free one.\n"
			       "\n"
			       "  --dir DIR       the pool's directory (default " HCP_DEFAULT_DIR
			       ")\n" HCP_USAGE_SOCKET;

int hcp_cmd_evict(int argc, char **argv)
{
	static const struct option opts[] = {
		HCP_OPTION_DIR,
		HCP_OPTION_SOCKET,
		{ "key", required_argument, NULL, HCP_OPT_KEY },
		{ "count", required_argument, NULL, HCP_OPT_COUNT },
		HCP_OPTIONS_END,
	};
	char hex[2 * HC_KEY_BYTES + 1];
	struct hc_pool_info in;
	struct hcp_args va;
	const char *name;
	hc_pool *p;
	int ret, n;

	if ((ret = hcp_parse_args(argc, argv, opts, hcp_evict_usage, &va, &name, NULL)) != HCP_GO)
		return ret;
	if (!va.key == !va.count)
		return hcp_usage_error("give exactly one of --key HEX64 and --count N");
	if ((ret = hcp_attach_rank(name, va.dir, &p)) != 0)
		return ret;
	hc_pool_info(p, &in, sizeof(in));
	if (va.key) {
		n = hc_evict_key(p, va.keyb);
		hc_cli_hex(va.keyb, HC_KEY_BYTES, hex);
		if (n < 0)
			ret = hcp_failure("%s", hcp_lib_error());
		else if (n == 0)
			ret = hcp_failure("no page of pool '%s' has key %s: list the keys with '" HCP_PROG
					  " keys %s%s%s'",
					  in.name, hex, in.name, va.dir ? " --dir " : "", va.dir ? va.dir : "");
		else
			printf("evicted key %s from pool '%s'\n", hex, in.name);
	} else {
		/* more than every page asks for nothing more, and an LRU pool
		 * would first try to allocate room for that many candidates */
		n = hc_evict(p, va.count < in.npages ? va.count : in.npages);
		if (n < 0)
			ret = hcp_failure("%s", hcp_lib_error());
		else
			printf("evicted %d of %" PRIu32 " page%s asked from pool '%s'%s\n", n, va.count,
			       va.count == 1 ? "" : "s", in.name,
			       (uint32_t)n < va.count ? ": no other keyed READY page is free of holds" : "");
	}
	hc_pool_detach(p);
	return ret;
}

int hcp_cmd_clear(int argc, char **argv)
{
	static const struct option opts[] = { HCP_OPTION_DIR, HCP_OPTION_SOCKET, HCP_OPTIONS_END };
	struct hc_pool_info in;
	struct hcp_args va;
	const char *name;
	hc_pool *p;
	int ret, n;

	if ((ret = hcp_parse_args(argc, argv, opts, hcp_clear_usage, &va, &name, NULL)) != HCP_GO)
		return ret;
	if ((ret = hcp_attach_rank(name, va.dir, &p)) != 0)
		return ret;
	hc_pool_info(p, &in, sizeof(in));
	n = hc_pool_clear(p);
	if (n < 0)
		ret = hcp_failure("%s", hcp_lib_error());
	else
		printf("cleared pool '%s': %d page%s freed\n", in.name, n, n == 1 ? "" : "s");
	hc_pool_detach(p);
	return ret;
}
