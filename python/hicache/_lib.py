# SPDX-License-Identifier: Apache-2.0
"""The C ABI of libhicache, as ctypes sees it.

Every struct here mirrors one of <hicache/hicache.h>, <hicache/service.h>
or <hicache/device.h>
member for member; tests/test_python.py holds each to the sizes and offsets
the C compiler gives them (tests/pylayout.c), so a header that changes
without this file fails make check.  Structs the caller fills carry their
size (VERSIONED STRUCTS in hicache(7)): make() sets it.
"""
import ctypes
import os

c_u8, c_u32, c_u64, c_int, c_uint = ctypes.c_uint8, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint
c_char_p, c_void_p, c_size_t = ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t

KEY_BYTES = 32
Key = c_u8 * KEY_BYTES
NAME_MAX, MODEL_ID_MAX, COMP_NAME_MAX = 64, 127, 31
HIST_BUCKETS, CTR_MAX, HIST_MAX, TIER_MAX, PAGE_STATES_MAX = 24, 128, 8, 4, 8
PAGE_NONE = 2**64 - 1


class _Versioned(ctypes.Structure):
    """A struct whose first member is its size."""

    @classmethod
    def make(cls, **kw):
        s = cls(**kw)
        s.size = ctypes.sizeof(cls)
        return s


class ComponentSpec(_Versioned):
    _fields_ = [("size", c_u32), ("name", c_char_p), ("dtype", c_int), ("kind", c_int), ("sharding", c_int),
                ("kv_heads", c_u32), ("head_bytes", c_u32), ("bytes_per_layer", c_u64), ("layers", c_u32),
                ("window_pages", c_u32)]


class PoolSpec(_Versioned):
    _fields_ = [("size", c_u32), ("name", c_char_p), ("dir", c_char_p), ("model_id", c_char_p),
                ("page_tokens", c_u32), ("tp_size", c_u32), ("head_groups", c_u32),
                ("comps", ctypes.POINTER(ComponentSpec)), ("ncomp", c_u32), ("capacity_pages", c_u64),
                ("capacity_bytes", c_u64), ("max_ranks", c_u32), ("quarantine_ms", c_u32), ("mode", c_u32),
                ("group", c_char_p), ("numa", c_int), ("numa_nodes", c_char_p), ("flags", c_uint), ("evict", c_int),
                ("max_tickets", c_u32), ("ticket_keys", c_u32), ("host_mode", c_int), ("ring_entries", c_u32),
                ("arg_bytes", c_u64), ("progress", ctypes.c_void_p), ("progress_arg", ctypes.c_void_p),
                ("sealed_fd", ctypes.POINTER(c_int))]


class AttachOpts(_Versioned):
    _fields_ = [("size", c_u32), ("dir", c_char_p), ("flags", c_uint), ("progress", ctypes.c_void_p),
                ("progress_arg", ctypes.c_void_p), ("fd", c_int), ("socket", c_char_p), ("socket_timeout_ms", c_u32)]


class PoolInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * (NAME_MAX + 1)), ("model_id", ctypes.c_char * (MODEL_ID_MAX + 1)),
                ("path", ctypes.c_char * 4096), ("fingerprint", c_u8 * 32), ("layout_major", c_u32),
                ("layout_minor", c_u32), ("page_tokens", c_u32), ("tp_size", c_u32), ("head_groups", c_u32),
                ("ncomp", c_u32), ("max_ranks", c_u32), ("npages", c_u32), ("quarantine_ms", c_u32),
                ("envelope_bytes", c_u64), ("segment_bytes", c_u64), ("envelopes_offset", c_u64),
                ("creator_pid", c_u32), ("creator_uid", c_u32), ("created_unix_ns", c_u64),
                ("self_slot", ctypes.c_int32), ("huge_pages", c_int), ("evict", c_int), ("max_tickets", c_u32),
                ("ticket_keys", c_u32), ("index_slots", c_u32), ("host_mode", c_int), ("sq_entries", c_u32),
                ("cq_entries", c_u32), ("arg_bytes", c_u64)]


class ComponentInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * (COMP_NAME_MAX + 1)), ("dtype", c_int), ("kind", c_int),
                ("sharding", c_int), ("kv_heads", c_u32), ("head_bytes", c_u32), ("layers", c_u32),
                ("groups", c_u32), ("bytes_per_layer", c_u64), ("offset", c_u64), ("bytes", c_u64),
                ("group_stride", c_u64), ("layer_stride", c_u64), ("window_pages", c_u32)]


class LookupReq(_Versioned):
    _fields_ = [("size", c_u32), ("keys", ctypes.POINTER(Key)), ("nkeys", c_uint), ("comps", c_u32),
                ("flags", c_uint), ("fingerprint", ctypes.POINTER(c_u8))]


class ReserveReq(_Versioned):
    _fields_ = [("size", c_u32), ("keys", ctypes.POINTER(Key)), ("nkeys", c_uint), ("first_depth", c_u32),
                ("presence", c_u32), ("fingerprint", ctypes.POINTER(c_u8))]


class EngineSpec(_Versioned):
    _fields_ = [("size", c_u32), ("engine_id", c_u32), ("tp_size", c_u32), ("tp_rank", c_u32),
                ("quota_pages", c_u32), ("ticket_timeout_ms", c_u32)]


class TicketName(_Versioned):
    _fields_ = [("size", c_u32), ("request_id", c_char_p), ("step", c_u32)]


class Ticket(_Versioned):
    _fields_ = [("size", c_u32), ("index", c_u32), ("gen", c_u32), ("kind", c_u32), ("n", c_u32), ("held", c_u32),
                ("first", c_int), ("released", c_int), ("pages", ctypes.POINTER(c_u64))]


class Hist(ctypes.Structure):
    _fields_ = [("bucket", c_u64 * HIST_BUCKETS), ("count", c_u64), ("sum", c_u64), ("max", c_u64)]


class Stats(ctypes.Structure):
    _fields_ = [("pages", c_u64 * PAGE_STATES_MAX), ("keyed", c_u64), ("pinned_pages", c_u64),
                ("pin_count", c_u64), ("locked_pages", c_u64), ("lock_count", c_u64), ("ticket_pages", c_u64),
                ("live_ranks", c_u32), ("engines", c_u32), ("open_tickets", c_u32), ("svc_jobs_queued", c_u32),
                ("svc_jobs_running", c_u32), ("stage_read_pages", c_u32), ("stage_write_pages", c_u32),
                ("stage_parked_reads", c_u32), ("stage_parked_writes", c_u32), ("counter", c_u64 * CTR_MAX),
                ("hist", Hist * HIST_MAX), ("tokens", Hist * TIER_MAX)]


class PrefetchReq(_Versioned):
    _fields_ = [("size", c_u32), ("keys", ctypes.POINTER(Key)), ("nkeys", c_uint), ("first_depth", c_u32),
                ("presence", c_u32), ("name", ctypes.POINTER(TicketName)), ("policy", c_int), ("timeout_ms", c_u32),
                ("timeout_us_per_page", c_u32), ("prio", c_uint)]


class DevComp(_Versioned):
    _fields_ = [("size", c_u32), ("comp", c_uint), ("k", ctypes.POINTER(c_u64)), ("v", ctypes.POINTER(c_u64)),
                ("token_bytes", c_u64), ("token_stride", c_u64), ("slots", c_u64), ("block_stride", c_u64),
                ("block_slots", c_u32)]


class DevSpec(_Versioned):
    _fields_ = [("size", c_u32), ("kind", c_int), ("device", c_int), ("tp_size", c_u32), ("tp_rank", c_u32),
                ("comps", ctypes.POINTER(DevComp)), ("ncomp", c_uint), ("path", c_int), ("reg_threads", c_uint),
                ("reg_chunk", c_u64)]


class XferReq(_Versioned):
    _fields_ = [("size", c_u32), ("pages", ctypes.POINTER(c_u64)), ("n", c_uint), ("slots", c_void_p),
                ("state_slots", c_void_p), ("flags", c_uint), ("after", c_void_p)]


class DevStats(ctypes.Structure):
    _fields_ = [("reg_ns", c_u64), ("reg_bytes", c_u64), ("reg_chunks", c_u32), ("reg_threads", c_u32),
                ("loads", c_u64), ("stores", c_u64), ("load_bytes", c_u64), ("store_bytes", c_u64),
                ("direct_layers", c_u64), ("copies", c_u64), ("kernel_layers", c_u64)]


STRUCTS = {"hc_component_spec": ComponentSpec, "hc_pool_spec": PoolSpec, "hc_attach_opts": AttachOpts,
           "hc_pool_info": PoolInfo, "hc_component_info": ComponentInfo, "hc_lookup_req": LookupReq,
           "hc_reserve_req": ReserveReq, "hc_engine_spec": EngineSpec, "hc_ticket_name": TicketName,
           "hc_ticket": Ticket, "hc_hist": Hist, "hc_stats": Stats, "hc_prefetch_req": PrefetchReq,
           "hc_dev_comp": DevComp, "hc_dev_spec": DevSpec, "hc_xfer_req": XferReq, "hc_dev_stats": DevStats}


def _find():
    """The library: $HICACHE_LIB, else the installed one, else the loader's search."""
    path = os.environ.get("HICACHE_LIB")
    if path:
        return path
    try:
        from . import _config
        path = os.path.join(_config.LIBDIR, _config.SONAME)
        if os.path.exists(path):
            return path
        return _config.SONAME
    except ImportError:
        return "libhicache.so.2"


def load():
    path = _find()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"hicache: cannot load libhicache ({path}): {e}; install hicache, or set HICACHE_LIB to "
                          "the library's path") from None
    P = c_void_p  # hc_pool *, hc_req *, hc_service *: opaque
    sigs = {
        "hc_version": (c_char_p, []),
        "hc_last_error": (c_char_p, []),
        "hc_pool_create": (c_int, [ctypes.POINTER(PoolSpec)]),
        "hc_pool_attach": (c_int, [c_char_p, ctypes.POINTER(AttachOpts), ctypes.POINTER(P)]),
        "hc_pool_detach": (c_int, [P]),
        "hc_pool_destroy": (c_int, [c_char_p, c_char_p, c_uint]),
        "hc_pool_info": (c_int, [P, ctypes.POINTER(PoolInfo), c_size_t]),
        "hc_pool_component": (c_int, [P, c_uint, ctypes.POINTER(ComponentInfo), c_size_t]),
        "hc_pool_stats": (c_int, [P, ctypes.POINTER(Stats), c_size_t]),
        "hc_counter_name": (c_char_p, [c_uint]),
        "hc_hist_name": (c_char_p, [c_uint]),
        "hc_tier_name": (c_char_p, [c_uint]),
        "hc_page_state_name": (c_char_p, [c_int]),
        "hc_engine_join": (c_int, [P, ctypes.POINTER(EngineSpec)]),
        "hc_engine_leave": (c_int, [P]),
        "hc_namespace_seed": (c_int, [c_char_p, c_char_p, ctypes.POINTER(c_u8)]),
        "hc_key_chain": (c_int, [ctypes.POINTER(c_u8), ctypes.POINTER(c_u8), ctypes.POINTER(c_u32), c_size_t, c_u32,
                                 ctypes.POINTER(Key)]),
        "hc_lookup": (c_int, [P, ctypes.POINTER(LookupReq), ctypes.POINTER(c_u64)]),
        "hc_reserve": (c_int, [P, ctypes.POINTER(ReserveReq), ctypes.POINTER(c_u64), ctypes.POINTER(c_u8)]),
        "hc_ticket_lookup": (c_int, [P, ctypes.POINTER(TicketName), ctypes.POINTER(LookupReq), ctypes.POINTER(c_u64),
                                     ctypes.POINTER(Ticket)]),
        "hc_ticket_reserve": (c_int, [P, ctypes.POINTER(TicketName), ctypes.POINTER(ReserveReq),
                                      ctypes.POINTER(c_u64), ctypes.POINTER(c_u8), ctypes.POINTER(Ticket)]),
        "hc_ticket_release": (c_int, [P, ctypes.POINTER(Ticket)]),
        "hc_page_alloc": (c_int, [P, c_uint, c_u32, ctypes.POINTER(c_u64)]),
        "hc_page_commit": (c_int, [P, c_u64, c_u32]),
        "hc_page_abort": (c_int, [P, ctypes.POINTER(c_u64), c_uint]),
        "hc_page_free": (c_int, [P, ctypes.POINTER(c_u64), c_uint]),
        "hc_page_pin": (c_int, [P, c_u64]),
        "hc_page_unpin": (c_int, [P, c_u64]),
        "hc_page_needed": (c_u32, [P, c_u32]),
        "hc_page_addr": (c_int, [P, c_u64, c_uint, c_uint, c_uint, ctypes.POINTER(c_void_p),
                                 ctypes.POINTER(c_size_t)]),
        "hc_req_exists": (c_int, [P, ctypes.POINTER(Key), c_uint, ctypes.POINTER(P)]),
        "hc_req_backup": (c_int, [P, ctypes.POINTER(c_u64), c_uint, ctypes.POINTER(P)]),
        "hc_req_prefetch": (c_int, [P, ctypes.POINTER(PrefetchReq), ctypes.POINTER(P)]),
        "hc_req_prefetch_take": (c_int, [P, ctypes.POINTER(c_u64), ctypes.POINTER(Ticket)]),
        "hc_req_poll": (c_int, [P]),
        "hc_req_wait": (c_int, [P, c_int]),
        "hc_req_cancel": (c_int, [P]),
        "hc_req_free": (c_int, [P]),
        "hc_service_probe": (c_int, [P, ctypes.POINTER(c_u32)]),
        "hc_page_state": (c_int, [P, c_u32, ctypes.POINTER(c_u64), ctypes.POINTER(c_u32), ctypes.POINTER(c_u32)]),
        "hc_evict": (c_int, [P, c_uint]),
        "hc_evict_key": (c_int, [P, ctypes.POINTER(c_u8)]),
        "hc_dev_open": (c_int, [P, ctypes.POINTER(DevSpec), ctypes.POINTER(P)]),
        "hc_dev_close": (c_int, [P]),
        "hc_dev_load": (c_int, [P, ctypes.POINTER(XferReq), ctypes.POINTER(P)]),
        "hc_dev_store": (c_int, [P, ctypes.POINTER(XferReq), ctypes.POINTER(P)]),
        "hc_dev_stats": (c_int, [P, ctypes.POINTER(DevStats), c_size_t]),
        "hc_xfer_layers": (c_uint, [P]),
        "hc_xfer_layer_done": (c_int, [P, c_uint]),
        "hc_xfer_wait_layer": (c_int, [P, c_uint]),
        "hc_xfer_wait": (c_int, [P]),
        "hc_xfer_free": (c_int, [P]),
        "hc_xfer_layer_event": (c_void_p, [P, c_uint]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib
