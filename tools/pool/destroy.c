/* SPDX-License-Identifier: Apache-2.0 */
/*
 * destroy.c - hicache-pool destroy: remove a pool.
 */
#include <stdio.h>

#include "pool.h"

const char hcp_destroy_usage[] = "Usage: " HCP_PROG " destroy NAME [--dir DIR] [--force]\n"
				 "\n"
				 "Remove pool NAME.  Refused while ranks are attached, or when the file does\n"
				 "not check out as a pool, unless --force.  Processes that still map it keep\n"
				 "their mapping until they exit.\n"
				 "\n"
				 "  --dir DIR    the pool's directory (default " HCP_DEFAULT_DIR ")\n"
				 "  --force      remove it even with live ranks or a damaged header\n";

int hcp_cmd_destroy(int argc, char **argv)
{
	static const struct option opts[] = {
		HCP_OPTION_DIR,
		{ "force", no_argument, NULL, HCP_OPT_FORCE },
		HCP_OPTIONS_END,
	};
	struct hcp_args va;
	const char *name;
	int ret;

	if ((ret = hcp_parse_args(argc, argv, opts, hcp_destroy_usage, &va, &name, NULL)) != HCP_GO)
		return ret;
	if (hc_pool_destroy(name, va.dir, va.force ? HC_DESTROY_FORCE : 0) < 0)
		return hcp_failure("%s", hcp_lib_error());
	printf("destroyed pool '%s' at %s/hicache.%s\n", name, va.dir ? va.dir : HCP_DEFAULT_DIR, name);
	return HC_CLI_EXIT_OK;
}
