/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check.c - hicache-pool check: every invariant of a pool, a line per
 * violation; and the printer of those lines that repair shares.
 */
#include <stdio.h>

#include "pool.h"

void hcp_check_report(void *arg, const char *line)
{
	struct hcp_check_out *co = arg;

	if (co->lines)
		json_object_array_add(co->lines, json_object_new_string(line));
	else
		printf("%s\n", line);
}

const char hcp_check_usage[] = "Usage: " HCP_PROG " check NAME [--dir DIR | --socket PATH] [--json] [--quiescent]\n"
			       "\n"
			       "Check every invariant that ties pool NAME's page table, holds, key index,\n"
			       "tickets and rank table together; print one line per violation and a\n"
			       "summary.  Exit status 0 when none is found, 1 when some are (or the check\n"
			       "could not run).  Proving rank liveness recovers dead ranks on the way, as\n"
			       "any attach does, so it needs write access to the pool.\n"
			       "\n"
			       "  --dir DIR       the pool's directory (default " HCP_DEFAULT_DIR ")\n" HCP_USAGE_SOCKET
			       "  --json          print one JSON object\n"
			       "  --quiescent     no rank is mid-operation: pages being freed, tickets\n"
			       "                  being built and other transient states count as\n"
			       "                  violations too\n";

int hcp_cmd_check(int argc, char **argv)
{
	static const struct option opts[] = {
		HCP_OPTION_DIR,  HCP_OPTION_SOCKET,
		HCP_OPTION_JSON, { "quiescent", no_argument, NULL, HCP_OPT_QUIESCENT },
		HCP_OPTIONS_END,
	};
	struct hcp_check_out co = { NULL };
	struct hc_pool_info in;
	struct hcp_args va;
	const char *name;
	unsigned flags;
	hc_pool *p;
	int ret, n;

	if ((ret = hcp_parse_args(argc, argv, opts, hcp_check_usage, &va, &name, NULL)) != HCP_GO)
		return ret;
	flags = va.quiescent ? HC_CHECK_QUIESCENT : 0;
	/* NO_RECOVER: look at the pool as the ranks left it, not as recovery
	 * would tidy it; the check's own liveness probes still recover dead ranks */
	if (hcp_attach(name, va.dir, HC_ATTACH_ADMIN | HC_ATTACH_NO_RECOVER, &p) < 0)
		return hcp_failure("%s", hcp_lib_error());
	hc_pool_info(p, &in, sizeof(in));
	if (va.json)
		co.lines = json_object_new_array();
	n = hc_pool_check(p, flags, hcp_check_report, &co);
	if (n < 0) {
		ret = hcp_failure("cannot check pool '%s': %s", in.name, hcp_lib_error());
		json_object_put(co.lines);
		goto out;
	}
	if (va.json) {
		struct json_object *o = hcp_json_new("hicache.pool-check/1");

		hcp_jadd_str(o, "name", in.name);
		hcp_jadd_str(o, "path", in.path);
		hcp_jadd_bool(o, "quiescent", flags & HC_CHECK_QUIESCENT);
		hcp_jadd_bool(o, "ok", n == 0);
		hcp_jadd_u64(o, "count", (uint64_t)n);
		json_object_object_add(o, "violations", co.lines);
		hcp_print_json(o);
		json_object_put(o);
	} else if (n == 0) {
		printf("pool '%s': ok, no violations (%s check)\n", in.name, flags ? "quiescent" : "live");
	} else {
		printf("pool '%s': %d violation%s (%s check)\n", in.name, n, n == 1 ? "" : "s",
		       flags ? "quiescent" : "live");
	}
	ret = n ? HC_CLI_EXIT_FAIL : HC_CLI_EXIT_OK;
out:
	hc_pool_detach(p);
	return ret;
}
