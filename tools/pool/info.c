/* SPDX-License-Identifier: Apache-2.0 */
/*
 * info.c - hicache-pool info: a pool's header, geometry, components, page
 * states, rank slots and service, in text or JSON.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <hicache/service.h>

#include "pool.h"

const char hcp_info_usage[] = "Usage: " HCP_PROG " info NAME [--dir DIR | --socket PATH] [--json] [--no-recover]\n"
			      "\n"
			      "Show pool NAME: header, geometry, components, page counts by state, the\n"
			      "rank slots that are live or hold pages, and the fingerprint.\n"
			      "\n"
			      "  --dir DIR       the pool's directory (default " HCP_DEFAULT_DIR ")\n" HCP_USAGE_SOCKET
			      "  --json          print one JSON object\n"
			      "  --no-recover    attach read-only: do not undo the holds of dead ranks\n"
			      "                  first, and show rank liveness as recorded, not proven\n";

static const char *kind_name(enum hc_comp_kind k)
{
	return k == HC_COMP_KV ? "kv" : k == HC_COMP_STATE ? "state" : "invalid";
}

static const char *sharding_name(enum hc_sharding s)
{
	return s == HC_REPLICATED ? "replicated" : "sharded";
}

static const char *write_policy_name(int wp)
{
	return wp >= 0 && wp <= HC_WRITE_NONE ? hc_cli_write_policies[wp] : "none set yet";
}

/* "service      pid 4242 (generation 3), write policy write_through; jobs
 * 0 queued, 1 running[; staging 4 read, 8 write, 0 reads and 1 write waiting]" */
static void service_text(const struct hc_service_info *sv, int buffer_only)
{
	if (sv->live)
		printf("service      pid %" PRIu32 " (generation %" PRIu64 "), write policy %s", sv->pid,
		       sv->generation, write_policy_name(sv->write_policy));
	else if (sv->write_policy < 0)
		printf("service      none (%" PRIu64 " started so far)", sv->generation);
	else /* it outlives the service: eviction under write_back keeps dirty pages */
		printf("service      none (%" PRIu64 " started so far); the last one's write policy, %s, still holds",
		       sv->generation, write_policy_name(sv->write_policy));
	if (sv->write_policy == HC_WRITE_THROUGH_SELECTIVE)
		printf(" after %" PRIu32 " hits", sv->select_hits);
	if (sv->live)
		printf("; jobs %" PRIu32 " queued, %" PRIu32 " running", sv->jobs_queued, sv->jobs_running);
	if (sv->live && buffer_only)
		printf("; staging %" PRIu32 " read, %" PRIu32 " write, %" PRIu32 " reads and %" PRIu32
		       " writes waiting",
		       sv->stage_read, sv->stage_write, sv->parked_reads, sv->parked_writes);
	printf("\n");
}

static struct json_object *service_json(const struct hc_service_info *sv)
{
	struct json_object *o = json_object_new_object();

	hcp_jadd_bool(o, "live", sv->live);
	hcp_jadd_u64(o, "pid", sv->live ? sv->pid : 0);
	hcp_jadd_u64(o, "generation", sv->generation);
	json_object_object_add(o, "write_policy",
			       sv->write_policy < 0 ? NULL
						    : json_object_new_string(write_policy_name(sv->write_policy)));
	hcp_jadd_u64(o, "select_hits", sv->select_hits);
	hcp_jadd_u64(o, "jobs_queued", sv->jobs_queued);
	hcp_jadd_u64(o, "jobs_running", sv->jobs_running);
	hcp_jadd_u64(o, "stage_read", sv->stage_read);
	hcp_jadd_u64(o, "stage_write", sv->stage_write);
	hcp_jadd_u64(o, "parked_reads", sv->parked_reads);
	hcp_jadd_u64(o, "parked_writes", sv->parked_writes);
	return o;
}

static struct json_object *info_json(const struct hc_pool_info *in, const struct hc_component_info *ci,
				     const uint64_t counts[HC_PAGE__COUNT], const struct hc_rank_info *ri, unsigned nri)
{
	struct json_object *o = hcp_json_new("hicache.pool-info/1"), *a, *x;
	char hex[65], when[64];

	hcp_jadd_str(o, "name", in->name);
	hcp_jadd_str(o, "path", in->path);
	hcp_jadd_str(o, "model_id", in->model_id);
	hcp_jadd_str(o, "fingerprint", hc_cli_hex(in->fingerprint, 32, hex));
	hcp_jadd_u64(o, "layout_major", in->layout_major);
	hcp_jadd_u64(o, "layout_minor", in->layout_minor);
	hcp_jadd_u64(o, "page_tokens", in->page_tokens);
	hcp_jadd_u64(o, "tp_size", in->tp_size);
	hcp_jadd_u64(o, "head_groups", in->head_groups);
	hcp_jadd_u64(o, "max_ranks", in->max_ranks);
	hcp_jadd_u64(o, "quarantine_ms", in->quarantine_ms);
	hcp_jadd_str(o, "evict", in->evict == HC_EVICT_LRU ? "lru" : "clock");
	hcp_jadd_u64(o, "max_tickets", in->max_tickets);
	hcp_jadd_u64(o, "ticket_keys", in->ticket_keys);
	hcp_jadd_u64(o, "index_slots", in->index_slots);
	hcp_jadd_str(o, "host_mode", in->host_mode == HC_HOST_BUFFER_ONLY ? "buffer_only" : "cache");
	hcp_jadd_u64(o, "ring_entries", in->sq_entries);
	hcp_jadd_u64(o, "completion_entries", in->cq_entries);
	hcp_jadd_u64(o, "arg_bytes", in->arg_bytes);
	hcp_jadd_u64(o, "npages", in->npages);
	hcp_jadd_u64(o, "envelope_bytes", in->envelope_bytes);
	hcp_jadd_u64(o, "envelopes_offset", in->envelopes_offset);
	hcp_jadd_u64(o, "segment_bytes", in->segment_bytes);
	hcp_jadd_bool(o, "huge_pages", in->huge_pages);
	hcp_jadd_u64(o, "creator_pid", in->creator_pid);
	hcp_jadd_u64(o, "creator_uid", in->creator_uid);
	hcp_jadd_u64(o, "created_unix_ns", in->created_unix_ns);
	hcp_jadd_str(o, "created", hc_cli_format_time(in->created_unix_ns, when, sizeof(when)));

	a = json_object_new_array();
	for (unsigned i = 0; i < in->ncomp; i++) {
		x = json_object_new_object();
		hcp_jadd_str(x, "name", ci[i].name);
		hcp_jadd_str(x, "dtype", hc_dtype_name(ci[i].dtype));
		hcp_jadd_str(x, "kind", kind_name(ci[i].kind));
		hcp_jadd_str(x, "sharding", sharding_name(ci[i].sharding));
		hcp_jadd_u64(x, "kv_heads", ci[i].kv_heads);
		hcp_jadd_u64(x, "head_bytes", ci[i].head_bytes);
		hcp_jadd_u64(x, "bytes_per_layer", ci[i].bytes_per_layer);
		hcp_jadd_u64(x, "layers", ci[i].layers);
		hcp_jadd_u64(x, "groups", ci[i].groups);
		hcp_jadd_u64(x, "offset", ci[i].offset);
		hcp_jadd_u64(x, "bytes", ci[i].bytes);
		hcp_jadd_u64(x, "group_stride", ci[i].group_stride);
		hcp_jadd_u64(x, "layer_stride", ci[i].layer_stride);
		hcp_jadd_u64(x, "window_pages", ci[i].window_pages);
		json_object_array_add(a, x);
	}
	json_object_object_add(o, "components", a);

	x = json_object_new_object();
	for (int s = 0; s < HC_PAGE__COUNT; s++)
		hcp_jadd_u64(x, hc_cli_state_keys[s], counts[s]);
	json_object_object_add(o, "pages", x);

	a = json_object_new_array();
	for (unsigned i = 0; i < nri; i++)
		json_object_array_add(a, hcp_rank_json(&ri[i]));
	json_object_object_add(o, "ranks", a);
	json_object_object_add(o, "engines", hcp_engines_json(ri, nri));
	return o;
}

static void info_text(const struct hc_pool_info *in, const struct hc_component_info *ci,
		      const uint64_t counts[HC_PAGE__COUNT], const struct hc_rank_info *ri, unsigned nri, bool readonly)
{
	char hex[65], when[64], b1[32], b2[32];
	int w = 4;
	unsigned live = 0;

	printf("pool         %s\n", in->name);
	printf("path         %s\n", in->path);
	printf("model        %s\n", in->model_id);
	printf("fingerprint  %s\n", hc_cli_hex(in->fingerprint, 32, hex));
	printf("layout       %" PRIu32 ".%" PRIu32 "\n", in->layout_major, in->layout_minor);
	printf("created      %s by pid %" PRIu32 " uid %" PRIu32 "\n",
	       hc_cli_format_time(in->created_unix_ns, when, sizeof(when)), in->creator_pid, in->creator_uid);
	printf("huge pages   %s\n", in->huge_pages ? "yes" : "no");
	printf("geometry     %" PRIu32 " tokens/page, tp %" PRIu32 ", %" PRIu32 " head groups, %" PRIu32
	       " rank slots, quarantine %" PRIu32 " ms\n",
	       in->page_tokens, in->tp_size, in->head_groups, in->max_ranks, in->quarantine_ms);
	printf("cache        evict %s, key index of %" PRIu32 " slots, %" PRIu32 " tickets of up to %" PRIu32 " keys\n",
	       in->evict == HC_EVICT_LRU ? "lru" : "clock", in->index_slots, in->max_tickets, in->ticket_keys);
	printf("host mode    %s; requests: %" PRIu32 " a rank, %" PRIu32 " completions, %s of arguments\n",
	       in->host_mode == HC_HOST_BUFFER_ONLY ? "buffer_only" : "cache", in->sq_entries, in->cq_entries,
	       hc_cli_format_size(in->arg_bytes, b1, sizeof(b1)));
	printf("envelope     %" PRIu64 " bytes (%s), from offset %" PRIu64 "\n", in->envelope_bytes,
	       hc_cli_format_size(in->envelope_bytes, b1, sizeof(b1)), in->envelopes_offset);
	printf("segment      %" PRIu64 " bytes (%s)\n", in->segment_bytes,
	       hc_cli_format_size(in->segment_bytes, b2, sizeof(b2)));
	printf("pages        %" PRIu32 ": free %" PRIu64 ", reserved %" PRIu64 ", ready %" PRIu64
	       ", quarantine %" PRIu64 ", freeing %" PRIu64 "\n",
	       in->npages, counts[HC_PAGE_FREE], counts[HC_PAGE_RESERVED], counts[HC_PAGE_READY],
	       counts[HC_PAGE_QUARANTINE], counts[HC_PAGE_FREEING]);

	for (unsigned i = 0; i < in->ncomp; i++)
		if ((int)strlen(ci[i].name) > w)
			w = (int)strlen(ci[i].name);
	printf("components   %" PRIu32 "\n", in->ncomp);
	printf("  %-*s  %-8s  %-5s  %-10s  %5s  %10s  %6s  %6s  %12s  %12s  %12s  %12s  %6s\n", w, "NAME", "DTYPE",
	       "KIND", "SHARDING", "HEADS", "HEAD_BYTES", "LAYERS", "GROUPS", "OFFSET", "BYTES", "GROUP_STRIDE",
	       "LAYER_STRIDE", "WINDOW");
	for (unsigned i = 0; i < in->ncomp; i++) {
		char heads[16] = "-", hb[16] = "-", win[16] = "all";

		if (ci[i].kind == HC_COMP_KV) {
			snprintf(heads, sizeof(heads), "%" PRIu32, ci[i].kv_heads);
			snprintf(hb, sizeof(hb), "%" PRIu32, ci[i].head_bytes);
		}
		if (ci[i].window_pages)
			snprintf(win, sizeof(win), "%" PRIu32, ci[i].window_pages);
		printf("  %-*s  %-8s  %-5s  %-10s  %5s  %10s  %6" PRIu32 "  %6" PRIu32 "  %12" PRIu64 "  %12" PRIu64
		       "  %12" PRIu64 "  %12" PRIu64 "  %6s\n",
		       w, ci[i].name, hc_dtype_name(ci[i].dtype), kind_name(ci[i].kind), sharding_name(ci[i].sharding),
		       heads, hb, ci[i].layers, ci[i].groups, ci[i].offset, ci[i].bytes, ci[i].group_stride,
		       ci[i].layer_stride, win);
	}

	for (unsigned i = 0; i < nri; i++)
		live += ri[i].live != 0;
	printf("ranks        %u live of %" PRIu32 " slots%s\n", live, in->max_ranks,
	       readonly ? " (read-only: as recorded, not proven)" : "");
	if (!nri)
		return;
	printf("  %4s  %-5s  %8s  %-15s  %6s  %10s  %10s  %8s  %6s  %5s  %9s  %8s  %s\n", "SLOT", "STATE", "PID",
	       "COMM", "EPOCH", "PINS", "LOCKS", "RESERVED", "ENGINE", "TP", "QUOTA", "HELD", "ATTACHED");
	for (unsigned i = 0; i < nri; i++) {
		char eng[16] = "-", tp[32] = "-", quota[16];

		if (ri[i].engine_id >= 0) {
			snprintf(eng, sizeof(eng), "%" PRId32, ri[i].engine_id);
			snprintf(tp, sizeof(tp), "%" PRIu32 "/%" PRIu32, ri[i].tp_rank, ri[i].tp_size);
		}
		printf("  %4" PRIu32 "  %-5s  %8" PRIu32 "  %-15s  %6" PRIu32 "  %10" PRIu64 "  %10" PRIu64
		       "  %8" PRIu32 "  %6s  %5s  %9s  %8" PRIu32 "  %s\n",
		       ri[i].slot, ri[i].live ? "live" : "free", ri[i].pid, ri[i].comm[0] ? ri[i].comm : "-",
		       ri[i].epoch, ri[i].pins, ri[i].locks, ri[i].reserved, eng, tp,
		       hcp_quota_text(&ri[i], quota, sizeof(quota)), ri[i].held,
		       hc_cli_format_time(ri[i].attached_unix_ns, when, sizeof(when)));
	}
	hcp_engines_text(ri, nri, "  ");
}

int hcp_cmd_info(int argc, char **argv)
{
	static const struct option opts[] = {
		HCP_OPTION_DIR,  HCP_OPTION_SOCKET,
		HCP_OPTION_JSON, { "no-recover", no_argument, NULL, HCP_OPT_NO_RECOVER },
		HCP_OPTIONS_END,
	};
	struct hc_component_info ci[HC_MAX_COMPONENTS];
	struct hc_rank_info ri[HC_MAX_RANKS];
	struct hc_service_info sv;
	struct hc_pool_info in;
	struct hcp_args va;
	uint64_t counts[HC_PAGE__COUNT];
	const char *name;
	unsigned nri = 0;
	int n;
	hc_pool *p = NULL;
	int ret;

	if ((ret = hcp_parse_args(argc, argv, opts, hcp_info_usage, &va, &name, NULL)) != HCP_GO)
		return ret;
	/* ADMIN attach runs recovery first, so the counts below are after it. */
	if (hcp_attach(name, va.dir, va.no_recover ? HC_ATTACH_READONLY : HC_ATTACH_ADMIN, &p) < 0)
		return hcp_failure("%s", hcp_lib_error());
	ret = HC_CLI_EXIT_FAIL;
	if (hc_pool_info(p, &in, sizeof(in)) < 0 || hc_pool_count_states(p, counts, HC_PAGE__COUNT) < 0) {
		hcp_failure("%s", hcp_lib_error());
		goto out;
	}
	for (unsigned i = 0; i < in.ncomp && i < HC_MAX_COMPONENTS; i++) {
		if (hc_pool_component(p, i, &ci[i], sizeof(ci[i])) < 0) {
			hcp_failure("%s", hcp_lib_error());
			goto out;
		}
	}
	/* every slot in one pass over the pages */
	if ((n = hc_pool_ranks(p, ri, sizeof(ri[0]), HC_MAX_RANKS)) < 0) {
		hcp_failure("%s", hcp_lib_error());
		goto out;
	}
	for (int s = 0; s < n; s++) /* a free slot that holds nothing is noise */
		if (ri[s].live || ri[s].pins || ri[s].locks || ri[s].reserved)
			ri[nri++] = ri[s];
	if (hc_service_info(p, &sv, sizeof(sv)) < 0) {
		hcp_failure("%s", hcp_lib_error());
		goto out;
	}
	if (va.json) {
		struct json_object *o = info_json(&in, ci, counts, ri, nri);

		json_object_object_add(o, "service", service_json(&sv));
		if (hcp_print_json(o) == 0)
			ret = HC_CLI_EXIT_OK;
		json_object_put(o);
	} else {
		info_text(&in, ci, counts, ri, nri, va.no_recover);
		service_text(&sv, in.host_mode == HC_HOST_BUFFER_ONLY);
		ret = HC_CLI_EXIT_OK;
	}
out:
	hc_pool_detach(p);
	return ret;
}
