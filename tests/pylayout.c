/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pylayout.c - the layout of the public structs the Python binding
 * mirrors (python/hicache/_lib.py), as this compiler lays them out from
 * the headers: "struct NAME SIZE" and "member NAME.FIELD OFFSET SIZE"
 * lines, which tests/test_python.py compares with ctypes' own.
 */
#include <stddef.h>
#include <stdio.h>

#include <hicache/device.h>
#include <hicache/hicache.h>
#include <hicache/service.h>

#define S(T)    printf("struct %s %zu\n", #T, sizeof(struct T))
#define M(T, m) printf("member %s.%s %zu %zu\n", #T, #m, offsetof(struct T, m), sizeof(((struct T *)0)->m))

int main(void)
{
	S(hc_component_spec);
	M(hc_component_spec, size), M(hc_component_spec, name), M(hc_component_spec, dtype);
	M(hc_component_spec, kind), M(hc_component_spec, sharding), M(hc_component_spec, kv_heads);
	M(hc_component_spec, head_bytes), M(hc_component_spec, bytes_per_layer), M(hc_component_spec, layers);
	M(hc_component_spec, window_pages);
	S(hc_pool_spec);
	M(hc_pool_spec, size), M(hc_pool_spec, name), M(hc_pool_spec, dir), M(hc_pool_spec, model_id);
	M(hc_pool_spec, page_tokens), M(hc_pool_spec, tp_size), M(hc_pool_spec, head_groups), M(hc_pool_spec, comps);
	M(hc_pool_spec, ncomp), M(hc_pool_spec, capacity_pages), M(hc_pool_spec, capacity_bytes);
	M(hc_pool_spec, max_ranks), M(hc_pool_spec, quarantine_ms), M(hc_pool_spec, mode), M(hc_pool_spec, group);
	M(hc_pool_spec, numa), M(hc_pool_spec, numa_nodes), M(hc_pool_spec, flags), M(hc_pool_spec, evict);
	M(hc_pool_spec, max_tickets), M(hc_pool_spec, ticket_keys), M(hc_pool_spec, host_mode);
	M(hc_pool_spec, ring_entries), M(hc_pool_spec, arg_bytes), M(hc_pool_spec, progress);
	M(hc_pool_spec, progress_arg), M(hc_pool_spec, sealed_fd);
	S(hc_attach_opts);
	M(hc_attach_opts, size), M(hc_attach_opts, dir), M(hc_attach_opts, flags), M(hc_attach_opts, progress);
	M(hc_attach_opts, progress_arg), M(hc_attach_opts, fd), M(hc_attach_opts, socket);
	M(hc_attach_opts, socket_timeout_ms);
	S(hc_pool_info);
	M(hc_pool_info, name), M(hc_pool_info, model_id), M(hc_pool_info, path), M(hc_pool_info, fingerprint);
	M(hc_pool_info, layout_major), M(hc_pool_info, layout_minor), M(hc_pool_info, page_tokens);
	M(hc_pool_info, tp_size), M(hc_pool_info, head_groups), M(hc_pool_info, ncomp), M(hc_pool_info, max_ranks);
	M(hc_pool_info, npages), M(hc_pool_info, quarantine_ms), M(hc_pool_info, envelope_bytes);
	M(hc_pool_info, segment_bytes), M(hc_pool_info, envelopes_offset), M(hc_pool_info, creator_pid);
	M(hc_pool_info, creator_uid), M(hc_pool_info, created_unix_ns), M(hc_pool_info, self_slot);
	M(hc_pool_info, huge_pages), M(hc_pool_info, evict), M(hc_pool_info, max_tickets);
	M(hc_pool_info, ticket_keys), M(hc_pool_info, index_slots), M(hc_pool_info, host_mode);
	M(hc_pool_info, sq_entries), M(hc_pool_info, cq_entries), M(hc_pool_info, arg_bytes);
	S(hc_component_info);
	M(hc_component_info, name), M(hc_component_info, dtype), M(hc_component_info, kind);
	M(hc_component_info, sharding), M(hc_component_info, kv_heads), M(hc_component_info, head_bytes);
	M(hc_component_info, layers), M(hc_component_info, groups), M(hc_component_info, bytes_per_layer);
	M(hc_component_info, offset), M(hc_component_info, bytes), M(hc_component_info, group_stride);
	M(hc_component_info, layer_stride), M(hc_component_info, window_pages);
	S(hc_lookup_req);
	M(hc_lookup_req, size), M(hc_lookup_req, keys), M(hc_lookup_req, nkeys), M(hc_lookup_req, comps);
	M(hc_lookup_req, flags), M(hc_lookup_req, fingerprint);
	S(hc_reserve_req);
	M(hc_reserve_req, size), M(hc_reserve_req, keys), M(hc_reserve_req, nkeys), M(hc_reserve_req, first_depth);
	M(hc_reserve_req, presence), M(hc_reserve_req, fingerprint);
	S(hc_engine_spec);
	M(hc_engine_spec, size), M(hc_engine_spec, engine_id), M(hc_engine_spec, tp_size), M(hc_engine_spec, tp_rank);
	M(hc_engine_spec, quota_pages), M(hc_engine_spec, ticket_timeout_ms);
	S(hc_ticket_name);
	M(hc_ticket_name, size), M(hc_ticket_name, request_id), M(hc_ticket_name, step);
	S(hc_ticket);
	M(hc_ticket, size), M(hc_ticket, index), M(hc_ticket, gen), M(hc_ticket, kind), M(hc_ticket, n);
	M(hc_ticket, held), M(hc_ticket, first), M(hc_ticket, released), M(hc_ticket, pages);
	S(hc_hist);
	M(hc_hist, bucket), M(hc_hist, count), M(hc_hist, sum), M(hc_hist, max);
	S(hc_stats);
	M(hc_stats, pages), M(hc_stats, keyed), M(hc_stats, pinned_pages), M(hc_stats, pin_count);
	M(hc_stats, locked_pages), M(hc_stats, lock_count), M(hc_stats, ticket_pages), M(hc_stats, live_ranks);
	M(hc_stats, engines), M(hc_stats, open_tickets), M(hc_stats, svc_jobs_queued), M(hc_stats, svc_jobs_running);
	M(hc_stats, stage_read_pages), M(hc_stats, stage_write_pages), M(hc_stats, stage_parked_reads);
	M(hc_stats, stage_parked_writes), M(hc_stats, counter), M(hc_stats, hist), M(hc_stats, tokens);
	S(hc_prefetch_req);
	M(hc_prefetch_req, size), M(hc_prefetch_req, keys), M(hc_prefetch_req, nkeys), M(hc_prefetch_req, first_depth);
	M(hc_prefetch_req, presence), M(hc_prefetch_req, name), M(hc_prefetch_req, policy);
	M(hc_prefetch_req, timeout_ms), M(hc_prefetch_req, timeout_us_per_page), M(hc_prefetch_req, prio);
	S(hc_dev_comp);
	M(hc_dev_comp, size), M(hc_dev_comp, comp), M(hc_dev_comp, k), M(hc_dev_comp, v), M(hc_dev_comp, token_bytes);
	M(hc_dev_comp, token_stride), M(hc_dev_comp, slots), M(hc_dev_comp, block_stride), M(hc_dev_comp, block_slots);
	S(hc_dev_spec);
	M(hc_dev_spec, size), M(hc_dev_spec, kind), M(hc_dev_spec, device), M(hc_dev_spec, tp_size);
	M(hc_dev_spec, tp_rank), M(hc_dev_spec, comps), M(hc_dev_spec, ncomp), M(hc_dev_spec, path);
	M(hc_dev_spec, reg_threads), M(hc_dev_spec, reg_chunk);
	S(hc_xfer_req);
	M(hc_xfer_req, size), M(hc_xfer_req, pages), M(hc_xfer_req, n), M(hc_xfer_req, slots);
	M(hc_xfer_req, state_slots), M(hc_xfer_req, flags), M(hc_xfer_req, after);
	S(hc_dev_stats);
	M(hc_dev_stats, reg_ns), M(hc_dev_stats, reg_bytes), M(hc_dev_stats, reg_chunks), M(hc_dev_stats, reg_threads);
	M(hc_dev_stats, loads), M(hc_dev_stats, stores), M(hc_dev_stats, load_bytes), M(hc_dev_stats, store_bytes);
	M(hc_dev_stats, direct_layers), M(hc_dev_stats, copies), M(hc_dev_stats, kernel_layers);
	return 0;
}
