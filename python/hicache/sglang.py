# SPDX-License-Identifier: Apache-2.0
"""hicache.sglang: SGLang's HiCache L3 storage on a shared hicache pool.

Load it with --hicache-storage-backend dynamic and an extra config naming
this module and class HicacheStorage (hicache-sglang(7) has the flags).
Every rank of every SGLang server on the node then shares one pool: each
rank copies its shard of a page between its host pool and the page's
envelope, in C (the device path, HC_DEV_HOST), and hicached behind the pool
backs the pages up to L3 and brings them back.

The TP ranks of a server agree without a collective: each lookup and each
reservation is a ticket named from the call (its kind, its first key, and
how often this rank asked that before), so every rank gets the answer the
first rank got.
"""
import errno
import hashlib
import logging
import os
import re
import threading
import time
from collections import OrderedDict

try:
    import torch
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
except ImportError as _e:
    raise ImportError(f"hicache.sglang is SGLang's storage backend, and SGLang (with torch) cannot be imported "
                      f"here ({_e}): install SGLang in this Python, or use the hicache package without it") from None

import hicache

try:  # what SGLang's metrics collector asserts get_stats() returns, where it lives
    from sglang.srt.observability.metrics_collector import StorageMetrics as _Metrics
except ImportError:
    try:
        from sglang.srt.metrics.collector import StorageMetrics as _Metrics
    except ImportError:
        _Metrics = object

__all__ = ["HicacheStorage", "Stats", "derive_engine_id"]

log = logging.getLogger("hicache.sglang")

_DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int8: "int8",
                torch.uint8: "uint8"}
for _n, _h in (("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2")):
    if hasattr(torch, _n):
        _DTYPE_NAMES[getattr(torch, _n)] = _h
_DTYPE_OF = {v: k for k, v in hicache.DTYPES.items()}

# extra_config keys of SGLang's own, which are not ours to check
_SGLANG_KEYS = {"backend_name", "module_path", "class_name", "interface_v1", "interface_v2"}
_OPTIONS = {"pool", "pool_dir", "engine_id", "component", "prefetch_deadline_ms", "ticket_timeout_ms",
            "hold_ms", "quota_pages", "check_model", "clear"}
_LAYOUTS = ("layer_first", "page_first", "page_first_direct")


def derive_engine_id(ppid, dp_rank=0, pp_rank=0, model=""):
    """The engine id a rank takes when the extra config gives none: a hash
    of its parent's pid (SGLang's launcher starts every TP rank of a server
    as its child, so the ranks agree and two servers differ), its DP and PP
    rank, and the model, folded to 0..65535."""
    h = hashlib.sha256(f"{ppid}/{dp_rank}/{pp_rank}/{model}".encode()).digest()
    return int.from_bytes(h[:2], "little")


class _Stats:
    """Figures of one rank, under a lock: SGLang reads them from its metrics
    thread while the prefetch and backup threads add to them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.c = dict(exists_calls=0, exists_keys=0, hit_pool=0, hit_l3=0, miss=0, get_calls=0, get_pages=0,
                      get_bytes=0, get_failed=0, set_calls=0, set_pages=0, set_present=0, set_busy=0,
                      set_failed=0, set_bytes=0, errors=0)
        self.lat = {k: [0, 0.0, 0.0] for k in ("exists", "get", "set")}  # calls, sum s, max s
        self.sg = dict(prefetch_pgs=[], backup_pgs=[], prefetch_bandwidth=[], backup_bandwidth=[])

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                self.c[k] += v

    def took(self, what, t0, pages=0, nbytes=0):
        dt = time.monotonic() - t0
        with self.lock:
            a = self.lat[what]
            a[0], a[1], a[2] = a[0] + 1, a[1] + dt, max(a[2], dt)
            if what in ("get", "set") and pages:
                p = "prefetch" if what == "get" else "backup"
                self.sg[p + "_pgs"].append(pages)
                self.sg[p + "_bandwidth"].append(nbytes / dt / 1e9 if dt > 0 else 0.0)


class Stats(dict, _Metrics):
    """get_stats()'s answer: a dict of this rank's figures (hits by tier,
    pages, bytes, latencies, the pool's and the device's), and SGLang's
    StorageMetrics, whose lists prefetch_pgs, backup_pgs, prefetch_bandwidth
    and backup_bandwidth (GB/s) hold one entry per call since the last
    get_stats()."""

    def __init__(self, figures, lists):
        dict.__init__(self, figures)
        for k, v in lists.items():
            setattr(self, k, v)

    __eq__, __hash__ = dict.__eq__, None


class _Pins:
    """Pages this rank pinned without a ticket, let go as a ticket is."""

    def __init__(self, pool, pages):
        self.pool, self.pages = pool, list(pages)

    def release(self):
        pages, self.pages = self.pages, []
        for p in pages:
            self.pool.unpin(p)


class HicacheStorage(HiCacheStorage):
    """SGLang's HiCacheStorage on a hicache pool (hicache-sglang(7))."""

    def __init__(self, storage_config, kwargs=None):
        cfg = dict(storage_config.extra_config or {})
        cfg.update(kwargs or {})
        unknown = set(cfg) - _OPTIONS - _SGLANG_KEYS
        if unknown:
            log.warning("hicache: extra config keys %s are not hicache's (%s): ignored", sorted(unknown),
                        ", ".join(sorted(_OPTIONS)))
        self.sc = storage_config
        self.tp_size, self.tp_rank = int(storage_config.tp_size), int(storage_config.tp_rank)
        self.mla = bool(storage_config.is_mla_model)
        pp_rank, pp_size = int(getattr(storage_config, "pp_rank", 0)), int(getattr(storage_config, "pp_size", 1))
        if int(getattr(storage_config, "attn_cp_size", 1) or 1) > 1:
            raise hicache.Error(errno.EINVAL, "hicache: attention context parallelism (attn_cp_size > 1) splits "
                                              "pages across ranks in a way a pool does not hold: run without it")
        name = cfg.get("pool")
        if not name:
            raise hicache.Error(errno.EINVAL, "hicache: the extra config has no 'pool': give the name of the pool "
                                              "hicached serves, e.g. {\"pool\": \"sglang\"} (hicache-sglang(7))")
        name = str(name)
        if pp_size > 1:
            if "{pp_rank}" not in name:
                raise hicache.Error(errno.EINVAL, f"hicache: pipeline parallelism (pp_size {pp_size}): each stage "
                                                  f"holds other layers, so give each its own pool: a 'pool' with "
                                                  f"{{pp_rank}} in it, e.g. \"{name}-{{pp_rank}}\"")
            name = name.replace("{pp_rank}", str(pp_rank))
        self.deadline_ms = self._int(cfg, "prefetch_deadline_ms", 2000, 0, 3600000)
        self.hold_s = self._int(cfg, "hold_ms", 30000, 1, 3600000) / 1000.0
        self.clear_mode = str(cfg.get("clear", "local"))
        if self.clear_mode not in ("local", "pool"):
            raise hicache.Error(errno.EINVAL, f"hicache: extra config 'clear' is '{self.clear_mode}': give "
                                              f"\"local\" (drop this rank's holds) or \"pool\" (evict every "
                                              f"page no rank holds, every server's)")
        self.check_model = self._bool(cfg, "check_model", True)
        self.comp_name = cfg.get("component")
        model = storage_config.model_name or ""
        if "engine_id" in cfg:
            self.engine_id = self._int(cfg, "engine_id", 0, 0, 65535)
        else:
            self.engine_id = derive_engine_id(os.getppid(), int(getattr(storage_config, "dp_rank", 0) or 0), pp_rank,
                                              model)
        self.pool = hicache.Pool.attach(name, dir=cfg.get("pool_dir"))
        try:
            self.pool.join(self.engine_id, self.tp_size, self.tp_rank,
                           quota_pages=self._int(cfg, "quota_pages", hicache.QUOTA_UNLIMITED, 1, 2**32 - 1),
                           ticket_timeout_ms=self._int(cfg, "ticket_timeout_ms", 0, 0, 2**32 - 1))
        except hicache.Error as e:
            self.pool.detach()
            hint = (" (another server has this engine id: give each server its own 'engine_id')"
                    if e.errno == errno.EEXIST else "")
            raise hicache.Error(e.errno, f"hicache: engine {self.engine_id} TP rank {self.tp_rank} of "
                                         f"{self.tp_size} on pool '{name}': {e.strerror}{hint}") from None
        self.info = self.pool.info()
        self.name, self.P = name, self.info["page_tokens"]
        self.dev = self.host = self.scratch = self.scratch_dev = None
        self.st = _Stats()
        self.mu = threading.Lock()
        self.scratch_mu = threading.Lock()  # the flat calls share one page of scratch
        self.seq = OrderedDict()  # (kind, first key) -> how often this rank named it
        self.held = OrderedDict()  # first key -> (time, keys, pages, tickets) found by batch_exists
        self.warned = {}
        log.info("hicache: pool '%s' engine %d TP rank %d/%d%s", name, self.engine_id, self.tp_rank, self.tp_size,
                 " (MLA)" if self.mla else "")

    @staticmethod
    def _bool(cfg, key, default):
        v = cfg.get(key, default)
        if isinstance(v, str) and v.lower() in ("true", "false", "1", "0", "yes", "no"):
            return v.lower() in ("true", "1", "yes")
        if isinstance(v, (bool, int)) and v in (0, 1):
            return bool(v)
        raise hicache.Error(errno.EINVAL, f"hicache: extra config '{key}' is {v!r}: give true or false")

    @staticmethod
    def _int(cfg, key, default, lo, hi):
        v = cfg.get(key, default)
        try:
            v = int(v)
        except (TypeError, ValueError):
            v = None
        if v is None or not lo <= v <= hi:
            raise hicache.Error(errno.EINVAL, f"hicache: extra config '{key}' is {cfg.get(key)!r}: give an integer "
                                              f"from {lo} to {hi}")
        return v

    # ---- the host pool --------------------------------------------------

    def _component(self):
        comps = self.info["components"]
        kv = [i for i, c in enumerate(comps) if c["kind"] == 1]
        if self.comp_name is not None:
            kv = [i for i in kv if comps[i]["name"] == self.comp_name]
        if not kv:
            raise hicache.Error(errno.EINVAL, f"hicache: pool '{self.name}' has no K/V component"
                                              f"{'' if self.comp_name is None else ' named ' + repr(self.comp_name)}"
                                              f" (it has {', '.join(c['name'] for c in comps)})")
        return kv[0], comps[kv[0]]

    def _mismatch(self, what, host, pool):
        return hicache.Error(errno.EINVAL, f"hicache: {what}: SGLang's host pool has {host}, pool '{self.name}' "
                                           f"has {pool}: create the pool for this model and TP "
                                           f"(hicache-sglang(7), \"The pool\")")

    def _geometry(self, hp):
        """Check the host pool against the pool; return what describes it."""
        ci, c = self._component()
        layout = getattr(hp, "layout", "layer_first")
        if layout not in _LAYOUTS:
            raise hicache.Error(errno.EINVAL, f"hicache: host pool layout '{layout}' is not one hicache copies "
                                              f"(its heads are not whole in a token): use --hicache-mem-layout "
                                              f"{' or '.join(_LAYOUTS)}")
        kv = hp.kv_buffer
        if not isinstance(kv, torch.Tensor):
            raise hicache.Error(errno.EINVAL, f"hicache: the host pool's kv_buffer is a {type(kv).__name__}, not "
                                              f"one tensor")
        if not kv.is_contiguous():
            raise hicache.Error(errno.EINVAL, "hicache: the host pool's kv_buffer is not contiguous")
        if hp.page_size != self.P:
            raise self._mismatch("page size", f"{hp.page_size} tokens a page", f"{self.P}")
        if hp.layer_num != c["layers"]:
            raise self._mismatch(f"layers of component '{c['name']}'", hp.layer_num, c["layers"])
        dt = _DTYPE_NAMES.get(kv.dtype)
        pdt = _DTYPE_OF.get(c["dtype"], str(c["dtype"]))
        if dt != pdt:
            raise self._mismatch(f"dtype of component '{c['name']}'", kv.dtype, pdt)
        if self.check_model and self.sc.model_name and self.sc.model_name != self.info["model_id"]:
            raise self._mismatch("model (pages of another model would be wrong here; give \"check_model\": false "
                                 "if the names differ only in spelling)", repr(self.sc.model_name),
                                 repr(self.info["model_id"]))
        isz = kv.element_size()
        if self.mla:
            if c["sharding"] != 1:
                raise self._mismatch(f"sharding of component '{c['name']}'", "an MLA model (one latent for all "
                                     "ranks)", "a sharded component: create it --replicated")
            latent, pb = kv.shape[-1] * isz, c["kv_heads"] * c["head_bytes"]
            if pb != latent and 2 * pb != latent:
                raise self._mismatch(f"latent of component '{c['name']}'", f"{latent} bytes a token",
                                     f"{c['kv_heads']} head(s) of {c['head_bytes']} bytes (give the latent, or "
                                     f"half of it as K and half as V)")
            return ci, c, layout, latent, 2 * pb == latent
        if c["sharding"] == 1 and self.tp_size > 1:
            raise self._mismatch(f"sharding of component '{c['name']}'", f"an MHA model at TP {self.tp_size}",
                                 "a replicated component (an MLA pool?)")
        H = c["kv_heads"]
        mine = H // self.tp_size if H >= self.tp_size else 1
        if hp.head_num != mine or hp.head_dim * isz != c["head_bytes"]:
            raise self._mismatch(f"heads of component '{c['name']}' at TP {self.tp_size}",
                                 f"{hp.head_num} KV heads a rank of {hp.head_dim} x {kv.dtype}",
                                 f"{H} KV heads of {c['head_bytes']} bytes, {mine} a rank")
        return ci, c, layout, hp.head_num * hp.head_dim * isz, False

    @staticmethod
    def _describe(ci, kv, layout, mla, tb, split, P, L):
        """The device description of a kv_buffer of SGLang's layout (the
        mapping in hc_dev_open(3))."""
        isz = kv.element_size()
        halves = [kv] if mla else [kv[0], kv[1]]
        bases, stride, nslots, bstride, bslots = [], 0, 0, 0, 0
        for K in halves:
            b = K.data_ptr()
            if layout == "layer_first":  # [L, N, ...]
                bases.append([b + l * K.stride(0) * isz for l in range(L)])
                stride, nslots = K.stride(1) * isz, K.shape[1]
            elif layout == "page_first":  # [N, L, ...]
                bases.append([b + l * K.stride(1) * isz for l in range(L)])
                stride, nslots = K.stride(0) * isz, K.shape[0]
            else:  # page_first_direct [N/P, L, P, ...]
                bases.append([b + l * K.stride(1) * isz for l in range(L)])
                stride, nslots, bstride, bslots = K.stride(2) * isz, K.shape[0] * P, K.stride(0) * isz, P
        if mla:
            k = bases[0]
            v = [a + tb // 2 for a in k] if split else None
            tb = tb // 2 if split else tb
        else:
            k, v = bases
        return hicache.DeviceComponent(ci, k, v, token_bytes=tb, token_stride=stride, slots=nslots,
                                       block_stride=bstride, block_slots=bslots)

    def _open(self, kv, layout):
        dc = self._describe(self.ci, kv, layout, self.mla, self.tb, self.split, self.P, self.L)
        kind = "cuda" if kv.is_cuda else "host"
        return hicache.Device(self.pool, [dc], tp_size=self.tp_size, tp_rank=self.tp_rank, kind=kind,
                              device=(kv.device.index or 0) if kv.is_cuda else 0)

    def register_mem_pool_host(self, mem_pool_host):
        """Check the host pool against the pool's geometry and describe it to
        the device path: a mismatch is hicache.Error naming both sides."""
        super().register_mem_pool_host(mem_pool_host)
        self.ci, c, self.layout, self.tb, self.split = self._geometry(mem_pool_host)
        self.L = c["layers"]
        if self.dev is not None:
            self.dev.close()
        self.dev = self._open(mem_pool_host.kv_buffer, self.layout)
        self.page_bytes = self.tb * self.P * self.L * (1 if self.mla else 2)
        self.host = mem_pool_host

    def _flat_shape(self):
        hp, P, L = self.host, self.P, self.L
        if self.mla:
            d = self.host.kv_buffer.shape[-1]
            return {"layer_first": (L, P, 1, d), "page_first": (P, L, 1, d),
                    "page_first_direct": (1, L, P, 1, d)}[self.layout]
        H, D = hp.head_num, hp.head_dim
        return {"layer_first": (2, L, P, H, D), "page_first": (2, P, L, H, D),
                "page_first_direct": (2, 1, L, P, H, D)}[self.layout]

    def _scratch(self):
        """One page of the host pool's layout, for the calls that pass flat
        pages (get, set): SGLang's flat page order is this layout's."""
        if self.scratch is None:
            self.scratch = torch.zeros(self._flat_shape(), dtype=self.host.kv_buffer.dtype)
            self.scratch_dev = self._open(self.scratch, self.layout)
            self.scratch_slots = torch.arange(self.P, dtype=torch.int64)
        return self.scratch

    # ---- names, holds, logs ---------------------------------------------

    def _warn(self, what, msg, *args):
        """A failure is a log line, at most one a minute of each kind and
        reason (the line with its numbers left out), so that a failure that
        repeats at every batch does not flood the log."""
        self.st.add(errors=1)
        line = msg % args
        key = (what, re.sub(r"\d+", "#", line))
        now = time.monotonic()
        with self.mu:
            if now - self.warned.get(key, -1e9) < 60:
                return
            if len(self.warned) > 1024:
                self.warned.clear()
            self.warned[key] = now
        log.warning("hicache: %s", line)

    def _name(self, kind, key):
        """A ticket name no rank of this engine uses twice: the kind of call,
        its first key, and how often this rank asked it before.  The ranks
        make the same calls in the same order, so they count alike; a rank
        that misses a call desynchronises only that first key."""
        key = key if isinstance(key, str) else bytes(key).hex()
        with self.mu:
            n = self.seq.pop((kind, key), 0)
            self.seq[(kind, key)] = n + 1
            while len(self.seq) > 65536:
                self.seq.popitem(last=False)
        return f"{kind}{key[:40]}", n

    @staticmethod
    def _depth(extra_info):
        pk = getattr(extra_info, "prefix_keys", None) if extra_info is not None else None
        return len(pk) if pk else 0

    def _release(self, tickets):
        for t in tickets:
            try:
                t.release()
            except hicache.Error as e:
                self._warn("release", "ticket release: %s", e.strerror)

    def _expire(self):
        """Drop holds batch_get_v1 never came for (a prefetch SGLang dropped)."""
        now, old = time.monotonic(), []
        with self.mu:
            while self.held and now - next(iter(self.held.values()))[0] > self.hold_s:
                old.append(self.held.popitem(last=False)[1])
        for h in old:
            self._release(h[3])

    def _usable(self, what, needs_host=True):
        """Whether a call can run: False, with a log line, when the backend
        is closed or (for a copy) no host pool was registered."""
        if self.pool is None:
            self._warn("closed", "%s after close(): the backend is closed", what)
            return False
        if needs_host and self.dev is None:
            self._warn("register", "%s before register_mem_pool_host(): SGLang registers its host pool first",
                       what)
            return False
        return True

    def _warn_prefetch(self, e, n):
        if e.errno == errno.ENOTCONN:
            self._warn("service", "pool '%s' has no service (hicached): L3 is not asked", self.name)
        else:
            self._warn("prefetch", "L3 prefetch of %d keys: %s", n, e.strerror)

    def _find(self, keys, kind, depth, named=True):
        """The pages of the longest prefix of keys READY in the pool, after
        the service has brought what L3 has (up to the deadline): (pages,
        holds on them, pool hit).  Named, under tickets, every rank gets the
        same pages; unnamed, each rank gets what it finds and unpins it."""
        if named:
            rid, n = self._name(kind, keys[0])
            t = self.pool.ticket_lookup(rid, 2 * n, keys)
            pages, holds, h = t.pages[:t.count], [t], t.count
        else:
            rid = n = None
            pages = self.pool.lookup(keys, pin=True)
            holds, h = [_Pins(self.pool, pages)], len(pages)
        if h == len(keys):
            return pages, holds, h
        step = 0 if n is None else 2 * n + 1
        try:
            rq = self.pool.prefetch(keys[h:], first_depth=depth + h, request_id=rid, step=step, policy="timeout",
                                    timeout_ms=self.deadline_ms)
        except hicache.Error as e:
            self._warn_prefetch(e, len(keys) - h)
            return pages, holds, h
        try:
            got = rq.take(rid, step)
            holds.append(got if named else _Pins(self.pool, got))
            pages += got.pages[:got.count] if named else got
            try:
                if rq.poll() is None:  # past the deadline: stop it, or free() waits for the service
                    rq.cancel()
            except hicache.Error:
                pass  # the request's own failure: its take said what is READY
        except hicache.Error as e:
            self._warn_prefetch(e, len(keys) - h)
        finally:
            try:
                rq.free()
            except hicache.Error as e:
                self._warn("prefetch", "L3 prefetch: %s", e.strerror)
        return pages, holds, h

    # ---- the zero-copy calls (interface_v1) -----------------------------

    def batch_exists(self, keys, extra_info=None):
        """How many of the first keys are in the pool or in L3.  Pages only in
        L3 are brought into the pool now, once for every rank; the pages stay
        held for batch_get_v1 (hold_ms at most)."""
        keys = list(keys)
        if not keys or not self._usable("batch_exists", False):
            return 0
        t0 = time.monotonic()
        self._expire()
        try:
            pages, tickets, h = self._find(keys, "e", self._depth(extra_info))
        except hicache.Error as e:
            self._warn("exists", "exists of %d keys: %s", len(keys), e.strerror)
            return 0
        m = len(pages)
        with self.mu:
            old = self.held.pop(keys[0], None)
            self.held[keys[0]] = (time.monotonic(), keys[:m], pages, tickets)
        if old:
            self._release(old[3])
        self.st.add(exists_calls=1, exists_keys=len(keys), hit_pool=h, hit_l3=m - h, miss=len(keys) - m)
        self.st.took("exists", t0)
        return m

    def _slots(self, host_indices, n):
        hi = host_indices
        if not isinstance(hi, torch.Tensor):
            hi = torch.as_tensor(hi)
        if hi.dtype != torch.int64 or hi.device.type != "cpu" or not hi.is_contiguous():
            hi = hi.to(device="cpu", dtype=torch.int64).contiguous()
        if hi.numel() < n * self.P:
            raise hicache.Error(errno.EINVAL, f"host_indices has {hi.numel()} slots, {n} pages need {n * self.P}")
        return hi[:n * self.P]

    def _held_for(self, keys):
        with self.mu:
            h = self.held.get(keys[0])
            if h is None:
                return None
            del self.held[keys[0]]
        _, hk, pages, tickets = h
        m = 0
        while m < min(len(hk), len(keys)) and hk[m] == keys[m]:
            m += 1
        return pages[:m], tickets

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Copy this rank's shard of each page into its host slots: True for
        each page copied (a prefix)."""
        keys = list(keys)
        res = [False] * len(keys)
        if not keys:
            return res
        if not self._usable("batch_get_v1"):
            return res
        self._expire()
        t0, tickets = time.monotonic(), []
        try:
            got = self._held_for(keys)
            if got is None:
                pages, tickets, _ = self._find(keys, "g", self._depth(extra_info), named=False)
            else:
                pages, tickets = got
            m = min(len(pages), len(keys))
            if m:
                with self.dev.load(pages[:m], self._slots(host_indices, m)) as x:
                    x.wait()
                res[:m] = [True] * m
        except hicache.Error as e:
            self._warn("get", "batch_get_v1 of %d pages: %s", len(keys), e.strerror)
            self.st.add(get_failed=len(keys))
            m = 0
        finally:
            self._release(tickets)
        self.st.add(get_calls=1, get_pages=m, get_bytes=m * self.page_bytes)
        self.st.took("get", t0, m, m * self.page_bytes)
        return res

    def _reserve(self, keys, depth):
        """(pages, skips, ticket or None, first): one reservation for the
        engine.  An MLA page is rank 0's alone to write (SGLang backs up from
        rank 0 only), so it reserves without a ticket."""
        if self.mla:
            pages, skip = self.pool.reserve(keys, first_depth=depth)
            return pages, skip, None, True
        rid, n = self._name("s", keys[0])
        t = self.pool.ticket_reserve(rid, n, keys, first_depth=depth)
        return [p if not s else hicache.PAGE_NONE for p, s in zip(t.pages, t.skip)], t.skip, t, t.first

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Store this rank's shard of each page from its host slots: True for
        a page stored or already present, False for one another engine is
        writing or that could not be stored."""
        keys = list(keys)
        n = len(keys)
        if not n:
            return []
        if not self._usable("batch_set_v1"):
            return [False] * n
        if self.mla and self.tp_rank != 0:
            return [True] * n  # the latent is rank 0's to write
        self._expire()
        t0 = time.monotonic()
        try:
            pages, skip, t, first = self._reserve(keys, self._depth(extra_info))
        except hicache.Error as e:
            what = "the pool is full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else e.strerror
            self._warn(f"set{e.errno}", "batch_set_v1 of %d pages: %s", n, what)
            self.st.add(set_failed=n)
            return [False] * n
        fill = [i for i in range(n) if not skip[i] and pages[i] != hicache.PAGE_NONE]
        res = [bool(skip[i] == hicache.SKIP_READY) for i in range(n)]
        try:
            if fill:
                hi = self._slots(host_indices, n).view(n, self.P)
                idx = torch.tensor(fill, dtype=torch.int64)
                with self.dev.store([pages[i] for i in fill], hi.index_select(0, idx).reshape(-1)) as x:
                    x.wait()
                for i in fill:
                    res[i] = True
        except hicache.Error as e:
            self._warn("store", "batch_set_v1 of %d pages: %s", len(fill), e.strerror)
            if first:
                self._abort([pages[i] for i in fill])
            self.st.add(set_failed=len(fill))
            fill = []
        finally:
            if t is not None:
                self._release([t])
        busy = sum(1 for s in skip if s == hicache.SKIP_BUSY)
        self.st.add(set_calls=1, set_pages=len(fill), set_present=sum(1 for s in skip if s == hicache.SKIP_READY),
                    set_busy=busy, set_bytes=len(fill) * self.page_bytes)
        self.st.took("set", t0, len(fill), len(fill) * self.page_bytes)
        return res

    # ---- the calls that pass flat pages ----------------------------------

    def exists(self, key):
        """Whether the pool or L3 has key's page (nothing is held)."""
        if not self._usable("exists", False):
            return False
        try:
            if self.pool.lookup([key]):
                return True
            with self.pool.exists([key]) as rq:
                return rq.wait(self.deadline_ms) == 1
        except hicache.Error as e:
            self._warn_prefetch(e, 1)
            return False

    def get(self, key, target_location=None, target_sizes=None):
        """The page of key as a flat tensor of this rank's shard (into
        target_location when given), or None when no tier has it."""
        out = self.batch_get([key], None if target_location is None else [target_location])
        return out[0]

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """Flat pages of this rank's shard in the host pool's layout
        (SGLang's get_data_page(flat=True) order), into target_locations when
        given: a tensor for each page of the prefix found, then None."""
        keys = list(keys)
        out = [None] * len(keys)
        if not keys or not self._usable("batch_get"):
            return out
        self._expire()
        holds = []
        try:
            got = self._held_for(keys)
            pages, holds = got if got is not None else self._find(keys, "G", 0, named=False)[:2]
            with self.scratch_mu:
                scratch = self._scratch()
                for i, p in enumerate(pages[:len(keys)]):
                    with self.scratch_dev.load([p], self.scratch_slots) as x:
                        x.wait()
                    dst = target_locations[i] if target_locations else torch.empty(scratch.numel(),
                                                                                    dtype=scratch.dtype)
                    dst.view(-1).copy_(scratch.view(-1))
                    out[i] = dst
        except hicache.Error as e:
            self._warn("get", "batch_get of %d pages: %s", len(keys), e.strerror)
        finally:
            self._release(holds)
        return out

    def set(self, key, value=None, target_location=None, target_sizes=None):
        return self.batch_set([key], [value])

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        """Store flat pages (SGLang's get_data_page(flat=True) order); True
        when every page is stored or present."""
        keys = list(keys)
        if not keys:
            return True
        if not self._usable("batch_set"):
            return False
        if values is None or len(values) != len(keys):
            self._warn("set", "batch_set: %d keys and %s values: give one flat page for each key", len(keys),
                       "no" if values is None else len(values))
            return False
        if self.mla and self.tp_rank != 0:
            return True
        self._expire()
        try:
            pages, skip, t, first = self._reserve(keys, 0)
        except hicache.Error as e:
            self._warn(f"set{e.errno}", "batch_set of %d pages: %s", len(keys), e.strerror)
            return False
        ok, i = True, 0
        try:
            with self.scratch_mu:
                scratch = self._scratch()
                for i, p in enumerate(pages):
                    if skip[i]:
                        ok &= skip[i] == hicache.SKIP_READY
                        continue
                    v = values[i]
                    if v.numel() != scratch.numel():
                        raise hicache.Error(errno.EINVAL, f"batch_set: a flat page has {scratch.numel()} elements, "
                                                          f"the value of key {i} has {v.numel()}")
                    scratch.view(-1).copy_(v.reshape(-1))
                    with self.scratch_dev.store([p], self.scratch_slots) as x:
                        x.wait()
                i = len(pages)
        except hicache.Error as e:
            self._warn("store", "batch_set of %d pages: %s", len(keys), e.strerror)
            ok = False
            if first:  # the pages not stored yet; those before are READY
                self._abort([p for p, sk in zip(pages[i:], skip[i:]) if not sk])
        finally:
            if t is not None:
                self._release([t])
        return ok

    def _abort(self, pages):
        try:
            if pages:
                self.pool.abort(pages)
        except hicache.Error as e:
            self._warn("abort", "abort of %d reserved pages: %s", len(pages), e.strerror)

    # ---- the rest -------------------------------------------------------

    def get_stats(self):
        with self.st.lock:
            d = Stats(self.st.c, self.st.sg)
            d["latency_s"] = {k: {"calls": a[0], "mean": a[1] / a[0] if a[0] else 0.0, "max": a[2]}
                              for k, a in self.st.lat.items()}
            self.st.sg = {k: [] for k in self.st.sg}
        d["engine_id"], d["pool"] = self.engine_id, self.name
        if self.pool is None:
            return d
        try:
            ps = self.pool.stats()
            d["pool_pages"] = ps["pages"]
            d["pool_counters"] = {k: v for k, v in ps["counters"].items() if v}
            if self.dev is not None:
                d["device"] = self.dev.stats()
        except hicache.Error as e:
            self._warn("stats", "stats: %s", e.strerror)
        return d

    def clear(self):
        """clear "local" (the default): let go of the pages this rank holds
        for a batch_get_v1 that has not come; the pages stay, since other
        servers share them.  clear "pool": then also evict every page of the
        pool that no rank holds, every server's (hc_evict(3))."""
        if self.pool is None:
            return
        with self.mu:
            held, self.held = list(self.held.values()), OrderedDict()
        for h in held:
            self._release(h[3])
        if self.clear_mode == "pool":
            try:
                n = self.pool.evict()
                log.info("hicache: cleared pool '%s': %d pages evicted", self.name, n)
            except hicache.Error as e:
                self._warn("clear", "clear of pool '%s': %s", self.name, e.strerror)

    def close(self):
        """Let every hold go, close the device path, leave and detach."""
        if getattr(self, "pool", None) is None:
            return
        self.clear_mode, mode = "local", self.clear_mode
        self.clear()
        self.clear_mode = mode
        for d in (self.dev, self.scratch_dev):
            if d is not None:
                d.close()
        self.dev = self.scratch_dev = None
        try:
            self.pool.leave()
        except hicache.Error:
            pass
        self.pool.detach()
        self.pool = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
