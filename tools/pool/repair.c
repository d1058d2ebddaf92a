/* SPDX-License-Identifier: Apache-2.0 */
/*
 * repair.c - hicache-pool repair: recovery, then the fixes of what check
 * finds, then the check again; a report of each count.
 */
#include <inttypes.h>
#include <stdio.h>

#include "pool.h"

const char hcp_repair_usage[] = "Usage: " HCP_PROG " repair NAME [--dir DIR | --socket PATH] [--json] [--quiescent]\n"
				"\n"
				"Repair pool NAME and report what was done.  First recovery: rank slots\n"
				"proven dead (their robust mutex was left owner-dead) are cleared, their\n"
				"pins dropped, their reservations quarantined, the pages they allocated\n"
				"without a key freed, and pages whose quarantine ran out freed.  Then what\n"
				"the check finds and recovery cannot undo: page words that make no sense,\n"
				"READY pages that no key finds and no live rank owns, entries that fail\n"
				"their check, a key index that names the wrong pages (rebuilt from the\n"
				"page table), tickets of engines that are gone, stray holds.  Each fix is\n"
				"one line; then the check runs again, and each violation it still finds\n"
				"is a 'cannot repair' line.  Exit status 0 when none is left, 1 when some\n"
				"are.  Safe while ranks run: nothing a live rank holds is freed.\n"
				"\n"
				"  --dir DIR       the pool's directory (default " HCP_DEFAULT_DIR
				")\n" HCP_USAGE_SOCKET "  --json          print one JSON object\n"
				"  --quiescent     no rank is mid-operation and no other process attaches,\n"
				"                  checks or repairs meanwhile: the check at the end counts\n"
				"                  transient states too (as check --quiescent), and the\n"
				"                  mutex of a free rank slot that no rank holds (a\n"
				"                  scribbled lock word) or that is unusable is made usable\n";

#define REPORT_FIELDS(X)                                                                                               \
	X(dead_ranks, "rank slots proven dead and cleared")                                                            \
	X(pins_dropped, "pin counts of dead ranks set to zero")                                                        \
	X(quarantined, "reservations of dead ranks put in quarantine")                                                 \
	X(released, "quarantined pages whose grace ran out, now free")                                                 \
	X(promoted, "fully committed reservations made ready")                                                         \
	X(unfreed, "half-done frees of dead ranks put back to ready")                                                  \
	X(bad_words, "page words that made no sense, put in quarantine")                                               \
	X(reclaimed, "dead ranks' pages allocated without a key, freed")                                               \
	X(orphaned, "such pages another rank holds, freed when it lets go")

#define REPAIR_FIELDS(X)                                                                                               \
	X(bad_words, "page words with an invalid state, owner or aux: quarantined or cleared")                         \
	X(holds_cleared, "holds left in the columns of free slots, cleared")                                           \
	X(damaged, "READY pages whose entry fails its check, freed")                                                   \
	X(lost, "READY pages no key finds and no live rank owns, freed")                                               \
	X(duplicates, "keyed pages whose key a live page already has, freed")                                          \
	X(index_bad, "index entries that named no page of their key, dropped")                                         \
	X(index_missing, "keyed pages the index did not find, put back")                                               \
	X(tickets_ended, "tickets of gone engines, or damaged, ended")                                                 \
	X(ticket_bits, "ticket holds on pages no ticket names, dropped")                                               \
	X(slot_locks, "free slots' mutexes no rank held, or unusable, made usable (--quiescent)")                      \
	X(unrepaired, "violations left (the 'cannot repair' lines)")

int hcp_cmd_repair(int argc, char **argv)
{
	static const struct option opts[] = {
		HCP_OPTION_DIR,  HCP_OPTION_SOCKET,
		HCP_OPTION_JSON, { "quiescent", no_argument, NULL, HCP_OPT_QUIESCENT },
		HCP_OPTIONS_END,
	};
	struct hc_repair_report rep = { 0 };
	struct hc_recovery_report first = { 0 };
	struct hcp_check_out co = { NULL };
	struct hc_pool_info in;
	struct hcp_args va;
	const char *name;
	hc_pool *p;
	int ret, n;

	if ((ret = hcp_parse_args(argc, argv, opts, hcp_repair_usage, &va, &name, NULL)) != HCP_GO)
		return ret;
	/* Recovery first, attached without a slot: claiming one as a rank
	 * would recover the dead slots it probes before the report could
	 * count them.  Then as a rank (freeing and rebuilding need a slot);
	 * NO_POPULATE: a tool reads the tables, not every page of the pool. */
	if (hcp_attach(name, va.dir, HC_ATTACH_ADMIN | HC_ATTACH_NO_RECOVER, &p) < 0)
		return hcp_failure("%s", hcp_lib_error());
	hcp_log_info = true; /* the library names each dead slot it clears */
	n = hc_pool_recover(p, &first, sizeof(first));
	hc_pool_detach(p);
	if (n < 0)
		return hcp_failure("%s", hcp_lib_error());
	if (hcp_attach(name, va.dir, HC_ATTACH_NO_RECOVER | HC_ATTACH_NO_POPULATE, &p) < 0)
		return hcp_failure("%s", hcp_lib_error());
	hc_pool_info(p, &in, sizeof(in));
	if (va.json)
		co.lines = json_object_new_array();
	n = hc_pool_repair(p, va.quiescent ? HC_CHECK_QUIESCENT : 0, &rep, sizeof(rep), hcp_check_report, &co);
#define X(f, what) rep.recovery.f += first.f;
	REPORT_FIELDS(X)
#undef X
	/* Print the report even on failure: what was undone stays undone. */
	if (va.json) {
		struct json_object *o = hcp_json_new("hicache.pool-repair/1"), *fix = json_object_new_object();

		hcp_jadd_str(o, "name", in.name);
		hcp_jadd_str(o, "path", in.path);
		hcp_jadd_bool(o, "ok", n == 0);
		/* recovery's fields at the top, as before repair did more */
#define X(f, what) hcp_jadd_u64(o, #f, rep.recovery.f);
		REPORT_FIELDS(X)
#undef X
#define X(f, what) hcp_jadd_u64(fix, #f, rep.f);
		REPAIR_FIELDS(X)
#undef X
		json_object_object_add(o, "repair", fix);
		json_object_object_add(o, "lines", co.lines);
		if (n < 0)
			hcp_jadd_str(o, "error", hc_last_error());
		hcp_print_json(o);
		json_object_put(o);
	} else {
		printf("%s pool '%s' at %s\n", n == 0 ? "repaired" : "partly repaired", in.name, in.path);
		printf(" recovery:\n");
#define X(f, what) printf("  %-13s %10" PRIu32 "  %s\n", #f, rep.recovery.f, what);
		REPORT_FIELDS(X)
#undef X
		printf(" repair:\n");
#define X(f, what) printf("  %-13s %10" PRIu32 "  %s\n", #f, rep.f, what);
		REPAIR_FIELDS(X)
#undef X
	}
	ret = HC_CLI_EXIT_OK;
	if (n < 0)
		ret = hcp_failure("%s", hcp_lib_error());
	else if (n > 0)
		ret = hcp_failure("pool '%s': %d violation%s could not be repaired (the 'cannot repair' lines)",
				  in.name, n, n == 1 ? "" : "s");
	hc_pool_detach(p);
	return ret;
}
