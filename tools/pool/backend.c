/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend.c - hicache-pool backend attach|detach: change the L3 backend of
 * a running service.
 */
#include <stdio.h>
#include <string.h>

#include <hicache/service.h>

#include "pool.h"

const char hcp_backend_usage[] =
	"Usage: " HCP_PROG " backend attach NAME SPEC [--dir DIR | --socket PATH] [--timeout-ms MS]\n"
	"       " HCP_PROG " backend detach NAME [--dir DIR | --socket PATH] [--timeout-ms MS]\n"
	"\n"
	"Attach an L3 backend to the service of pool NAME (hicached), or detach the\n"
	"one it has, while it runs.  SPEC is NAME[:KEY=VALUE,...] as hicached's\n"
	"--backend takes it (hicache-backend(7)).  Both are refused while transfers\n"
	"are in flight; attach is refused while a backend is attached.  While none\n"
	"is, the ranks' L3 requests fail with ENODEV.  The tool takes a rank slot\n"
	"while it runs, so the pool needs a free one.\n"
	"\n"
	"  --dir DIR          the pool's directory (default " HCP_DEFAULT_DIR ")\n" HCP_USAGE_SOCKET
	"  --timeout-ms MS    wait this long for the service (default 30000)\n";

int hcp_cmd_backend(int argc, char **argv)
{
	static const struct option opts[] = {
		HCP_OPTION_DIR,
		HCP_OPTION_SOCKET,
		{ "timeout-ms", required_argument, NULL, HCP_OPT_COUNT },
		HCP_OPTIONS_END,
	};
	struct hcp_args va;
	const char *name, *spec = NULL, *sub = argc > 1 ? argv[1] : "";
	int attach_, ret, r;
	hc_req *rq;
	hc_pool *p;

	if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
		fputs(hcp_backend_usage, stdout);
		return HC_CLI_EXIT_OK;
	}
	if (strcmp(sub, "attach") && strcmp(sub, "detach"))
		return hcp_usage_error("%s%s%s: give attach or detach; see '" HCP_PROG " backend --help'",
				       *sub ? "unknown action '" : "missing action", sub, *sub ? "'" : "");
	attach_ = !strcmp(sub, "attach");
	hcp_verb = attach_ ? "backend attach" : "backend detach";
	ret = hcp_parse_args(argc - 1, argv + 1, opts, hcp_backend_usage, &va, &name, attach_ ? &spec : NULL);
	if (ret != HCP_GO)
		return ret;
	if (attach_ && (!spec || !*spec))
		return hcp_usage_error("missing SPEC: the backend to attach, e.g. file:dir=/var/cache/hicache");
	if ((ret = hcp_attach_rank(name, va.dir, &p)) != 0)
		return ret;
	r = hc_req_backend(p, attach_ ? spec : NULL, &rq);
	if (r == 0) {
		r = hc_req_wait(rq, va.count ? (int)va.count : 30000);
		hc_req_free(rq);
	}
	if (r < 0)
		ret = hcp_failure("pool '%s': %s", name, hcp_lib_error());
	else if (attach_)
		printf("pool '%s': backend %s attached\n", name, spec);
	else
		printf("pool '%s': backend detached\n", name);
	hc_pool_detach(p);
	return ret;
}
