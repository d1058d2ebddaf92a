/* SPDX-License-Identifier: Apache-2.0 */
/*
 * create.c - hicache-pool create: a pool from the shared pool options
 * (tools/cli/pool.c), and a summary of what the library made of them.
 */
#include <inttypes.h>
#include <stdio.h>

#include "pool.h"

const char hcp_create_usage[] = "Usage: " HCP_PROG " create NAME --model ID --page-tokens N --tp N [--head-groups N]\n"
				"           (--pages N | --size SIZE)\n"
				"           [--kv NAME,DTYPE,HEADS,HEAD_BYTES,LAYERS[,replicated][,window=W]]...\n"
				"           [--state NAME,DTYPE,BYTES_PER_LAYER,LAYERS[,replicated][,window=W]]...\n"
				"           [--dir DIR] [--group GROUP] [--mode 0600|0660] [--max-ranks N]\n"
				"           [--quarantine-ms N] [--numa bind:NODES|interleave[:NODES]]\n"
				"           [--evict clock|lru] [--max-tickets N] [--ticket-keys N]\n"
				"           [--host-mode cache|buffer_only] [--ring-entries N] [--arg-bytes SIZE]\n"
				"\n"
				"Create pool NAME as DIR/hicache.NAME (DIR: " HCP_DEFAULT_DIR ").  Give at least one\n"
				"--kv or --state component; components are laid out in the order given.\n"
				"\n"
				"  --model ID            model the pages belong to (part of the fingerprint)\n"
				"  --page-tokens N       tokens per page, the engine's page size\n"
				"  --tp N                tensor-parallel size the pool is laid out for\n"
				"  --head-groups N       head groups per sharded component (default:\n"
				"                        min(tp, smallest sharded HEADS))\n"
				"  --pages N             capacity in pages\n"
				"  --size SIZE           capacity in envelope bytes, rounded down to whole\n"
				"                        pages; K, M, G, T suffixes are powers of 1024\n"
				"  --kv SPEC             a K/V component: HEADS total KV heads, HEAD_BYTES\n"
				"                        bytes of one head of one token; 'replicated' for MLA\n"
				"  --state SPEC          a per-page state snapshot of BYTES_PER_LAYER per layer\n"
				"                        window=W: a hit needs this component in its last W\n"
				"                        pages only (sliding window; 1 for a state snapshot)\n"
				"  --dir DIR             a tmpfs, huge-page tmpfs or hugetlbfs directory\n"
				"  --group GROUP         group allowed to attach (mode becomes 0660)\n"
				"  --mode 0600|0660      file mode (default 0600, or 0660 with --group)\n"
				"  --max-ranks N         rank slots, 1..128 (default 32)\n"
				"  --quarantine-ms N     grace before a dead rank's reservations are reused\n"
				"                        (default 2000)\n"
				"  --numa MODE           bind:NODES, interleave or interleave:NODES\n"
				"  --evict POLICY        clock (default: approximate LRU, no shared counter)\n"
				"                        or lru (exact; a chain's root goes last)\n"
				"  --max-tickets N       tickets open at once, a multiple of 64 (default 64)\n"
				"  --ticket-keys N       most keys one ticket names (default 1024)\n"
				"  --host-mode MODE      cache (default: keep READY pages, evict by policy) or\n"
				"                        buffer_only (pages only stage GPU <-> L3 transfers)\n"
				"  --ring-entries N      each rank's request ring, a power of two in 8..4096\n"
				"                        (default 64; completions get twice as many)\n"
				"  --arg-bytes SIZE      each rank's argument area for key lists, a multiple\n"
				"                        of 4096 (default 64K)\n"
				"\n"
				"DTYPE is one of f32, f16, bf16, fp8_e4m3, fp8_e5m2, int8, uint8.\n";

int hcp_cmd_create(int argc, char **argv)
{
	struct option opts[HC_CLI_POOL__COUNT + 2];
	static struct hc_cli_pool cp;
	struct hc_pool_spec spec;
	struct hc_pool_info info;
	struct hc_cli_progress pg;
	char hex[65], b1[32], b2[32], what[32];
	hc_pool *p = NULL;
	int c, ret;

	/* the options are the shared pool options (cli.h), each coded OPT_POOL + its index */
	for (unsigned i = 0; i < HC_CLI_POOL__COUNT; i++)
		opts[i] = (struct option){ hc_cli_pool_opts[i].name, required_argument, NULL, HCP_OPT_POOL + (int)i };
	opts[HC_CLI_POOL__COUNT] = (struct option){ "help", no_argument, NULL, 'h' };
	opts[HC_CLI_POOL__COUNT + 1] = (struct option){ NULL, 0, NULL, 0 };
	hc_cli_pool_init(&cp);
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(hcp_create_usage, stdout);
			return HC_CLI_EXIT_OK;
		}
		if (c < HCP_OPT_POOL || c >= HCP_OPT_POOL + HC_CLI_POOL__COUNT)
			return hcp_bad_option(c, argv);
		snprintf(what, sizeof(what), "--%s", hc_cli_pool_opts[c - HCP_OPT_POOL].name);
		if (hc_cli_pool_set(&cp, (enum hc_cli_pool_opt)(c - HCP_OPT_POOL), what, optarg) < 0)
			return hcp_usage_error("%s", hc_cli_error());
	}
	if ((ret = hcp_take_name(argc, argv, &cp.spec.name)) != 0)
		return ret;
	if (hc_cli_pool_finish(&cp) < 0)
		return hcp_usage_error("%s", hc_cli_error());
	spec = cp.spec;
	/* a bar on a terminal, else a line every 10 s of a long step */
	hc_cli_progress_init(&pg, stderr, "hicache-pool create", -1);
	spec.progress = hc_cli_progress_pool;
	spec.progress_arg = &pg;

	if (hc_pool_create(&spec) < 0) {
		hc_cli_progress_clear(&pg);
		return hcp_failure("%s", hcp_lib_error());
	}
	/* Read the pool back: the summary shows what the library made of the spec. */
	if (hcp_attach(spec.name, spec.dir, HC_ATTACH_READONLY, &p) < 0 || hc_pool_info(p, &info, sizeof(info)) < 0) {
		ret = hcp_failure("pool '%s' was created, but reading it back failed: %s", spec.name, hc_last_error());
		goto out;
	}
	printf("created pool '%s' at %s\n", info.name, info.path);
	printf("  model        %s\n", info.model_id);
	printf("  pages        %" PRIu32 " (%s of envelopes)\n", info.npages,
	       hc_cli_format_size((uint64_t)info.npages * info.envelope_bytes, b1, sizeof(b1)));
	printf("  envelope     %" PRIu64 " bytes (%s)\n", info.envelope_bytes,
	       hc_cli_format_size(info.envelope_bytes, b1, sizeof(b1)));
	printf("  segment      %" PRIu64 " bytes (%s)\n", info.segment_bytes,
	       hc_cli_format_size(info.segment_bytes, b2, sizeof(b2)));
	printf("  fingerprint  %s\n", hc_cli_hex(info.fingerprint, 32, hex));
	ret = HC_CLI_EXIT_OK;
out:
	if (p)
		hc_pool_detach(p);
	return ret;
}
