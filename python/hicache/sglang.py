# SPDX-License-Identifier: Apache-2.0
"""hicache.sglang: SGLang's HiCache L3 storage on a shared hicache pool.

Load it with --hicache-storage-backend dynamic and an extra config naming
this module and class HicacheStorage (hicache-sglang(7) has the flags).
Every rank of every SGLang server on the node then shares one pool: each
rank copies its shard of a page between its host pool and the page's
envelope, in C (the device path, on the calling thread), and hicached
behind the pool backs the pages up to L3 and brings them back.

The TP ranks of a server agree without a collective: each lookup and each
reservation is a ticket named from the call: its kind, its first key, and
how often this rank's thread for that kind named that key before.  The
ranks make the same calls in the same order, so each gets the answer the
first rank got.  A rank that falls out of step (a call the others did not
make) finds the names ahead used for other keys, or stale, and moves on
until it meets them again, answering from the pool alone meanwhile.  One
behind on a key whose calls repeat the same key list within the ticket
timeout, it claims each call's ticket one call late: the same keys, a hit
that may be a call old, every share still claimed; SGLang's all-reduce of
the hit settles the difference.
"""
import errno
import functools
import hashlib
import logging
import os
import re
import threading
import time
import weakref
from collections import OrderedDict, deque

try:
    import torch
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
except ImportError as _e:
    raise ImportError(f"hicache.sglang is SGLang's storage backend, and SGLang (with torch) cannot be imported "
                      f"here ({_e}): install SGLang in this Python, or use the hicache package without it") from None

import hicache
from hicache._hostpool import HostLayout, kv_component

try:  # what SGLang's metrics collector asserts get_stats() returns, where it lives
    from sglang.srt.observability.metrics_collector import StorageMetrics as _Metrics
except ImportError:
    try:
        from sglang.srt.metrics.collector import StorageMetrics as _Metrics
    except ImportError:
        _Metrics = object

__all__ = ["HicacheStorage", "Stats", "derive_engine_id"]

log = logging.getLogger("hicache.sglang")

# extra_config keys of SGLang's own, which are not ours to check
_SGLANG_KEYS = {"backend_name", "module_path", "class_name", "interface_v1", "interface_v2", "tp_lcm_size"}
_OPTIONS = {"pool", "pool_dir", "pool_socket", "engine_id", "component", "prefetch_deadline_ms", "ticket_timeout_ms",
            "hold_ms", "quota_pages", "check_model", "clear"}
# A named call that finds its name taken by another request (EINVAL), its
# share claimed (EALREADY) or the ticket gone (ESTALE) is out of step: it
# tries the next names, this many, then answers from the pool alone.
_STEP_ERRORS = (errno.EINVAL, errno.EALREADY, errno.ESTALE)
_STEP_TRIES = 4
_NAMES_KEPT = 65536  # first keys a kind counts; the oldest is forgotten
_LIST_MAX = 4096  # entries of each StorageMetrics list kept between get_stats() calls


def derive_engine_id(ppid, dp_rank=0, pp_rank=0, model=""):
    """The engine id a rank takes when the extra config gives none: a hash
    of its parent's pid (SGLang's launcher starts every TP rank of a server
    as its child, so the ranks agree and two servers differ), its DP and PP
    rank, and the model, folded to 0..65535."""
    h = hashlib.sha256(f"{ppid}/{dp_rank}/{pp_rank}/{model}".encode()).digest()
    return int.from_bytes(h[:2], "little")


class _Names:
    """The ticket names of one kind of call.  Each kind is made by one of
    SGLang's threads (batch_exists by the prefetch thread, batch_set_v1 by
    the backup thread), so every rank counts it, and forgets its oldest
    keys, in the same order."""

    def __init__(self, kind):
        self.kind, self.count, self.mu = kind, OrderedDict(), threading.Lock()

    def take(self, key):
        """(request id, n): this is the n-th call of this kind for key."""
        key = key if isinstance(key, str) else bytes(key).hex()
        with self.mu:
            n = self.count.pop(key, 0)
            self.count[key] = n + 1
            while len(self.count) > _NAMES_KEPT:
                self.count.popitem(last=False)
        return f"{self.kind}{key[:40]}", n, key


class _Stats:
    """Figures of one rank, under a lock: SGLang reads them from its metrics
    thread while the prefetch and backup threads add to them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.c = dict(exists_calls=0, exists_keys=0, hit_pool=0, hit_l3=0, miss=0, get_calls=0, get_pages=0,
                      get_bytes=0, get_failed=0, set_calls=0, set_pages=0, set_present=0, set_busy=0,
                      set_failed=0, set_bytes=0, steps_skipped=0, unnamed=0, given_up=0, errors=0)
        self.lat = {k: [0, 0.0, 0.0] for k in ("exists", "get", "set")}  # calls, sum s, max s
        self.sg = dict(prefetch_pgs=[], backup_pgs=[], prefetch_bandwidth=[], backup_bandwidth=[])

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                self.c[k] += v

    def took(self, what, t0, pages=0, nbytes=0):
        """A call done: its latency; for a get or a set, its pages and bytes."""
        dt = time.monotonic() - t0
        with self.lock:
            a = self.lat[what]
            a[0], a[1], a[2] = a[0] + 1, a[1] + dt, max(a[2], dt)
            if what in ("get", "set"):
                self.c[what + "_calls"] += 1
                self.c[what + "_pages"] += pages
                self.c[what + "_bytes"] += nbytes
            if what in ("get", "set") and pages:
                p = "prefetch" if what == "get" else "backup"
                for k, v in ((p + "_pgs", pages), (p + "_bandwidth", nbytes / dt / 1e9 if dt > 0 else 0.0)):
                    lst = self.sg[k]
                    lst.append(v)
                    if len(lst) > _LIST_MAX:  # nobody reads them (no storage metrics): keep the newest
                        del lst[:len(lst) - _LIST_MAX]


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


def _guarded(fallback, needs_host=True):
    """A call of SGLang's threads: counted while it runs, so that close()
    and register_mem_pool_host() wait for it; fallback(*args) (0, False,
    a list of False or None) when the backend is closed or has no host
    pool yet, with a log line."""

    def wrap(fn):
        @functools.wraps(fn)
        def call(self, *args, **kw):
            if not self._enter(fn.__name__, needs_host):
                return fallback(*args)
            try:
                return fn(self, *args, **kw)
            finally:
                self._leave()
        return call

    return wrap


def _falses(keys, *_):
    return [False] * len(keys)


def _nones(keys, *_):
    return [None] * len(keys)


def _reap(ref, stop, period):
    """The backend's thread: lets old holds go every period.  It keeps only
    a weak reference, so a backend nobody closes is still collected."""
    while not stop.wait(period):
        self = ref()
        if self is None:
            return
        try:
            if self._enter("reap", False, quiet=True):
                try:
                    self._expire()
                finally:
                    self._leave()
        except Exception as e:  # a log line, never the end of the thread
            self._warn("reap", "letting go of old holds: %s", e)
        del self


class HicacheStorage(HiCacheStorage):
    """SGLang's HiCacheStorage on a hicache pool (hicache-sglang(7)).  Its
    calls may come from several threads at once; close() waits for those
    running, and the ones after it return False (or 0, or None)."""

    def __init__(self, storage_config, kwargs=None):
        self.pool = None
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
        self.hold_s = self._int(cfg, "hold_ms", 10000, 1, 3600000) / 1000.0
        ticket_ms = self._int(cfg, "ticket_timeout_ms", 0, 0, 2**32 - 1)
        quota = self._int(cfg, "quota_pages", hicache.QUOTA_UNLIMITED, 1, 2**32 - 1)
        self.clear_mode = str(cfg.get("clear", "local"))
        if self.clear_mode not in ("local", "pool"):
            raise hicache.Error(errno.EINVAL, f"hicache: extra config 'clear' is '{self.clear_mode}': give "
                                              f"\"local\" (drop this rank's holds) or \"pool\" (evict every "
                                              f"page no rank holds, every server's)")
        self.check_model = self._bool(cfg, "check_model", True)
        model = storage_config.model_name or ""
        if "engine_id" in cfg:
            self.engine_id = self._int(cfg, "engine_id", 0, 0, 65535)
        else:
            self.engine_id = derive_engine_id(os.getppid(), int(getattr(storage_config, "dp_rank", 0) or 0), pp_rank,
                                              model)
        pool = hicache.Pool.attach(name, dir=cfg.get("pool_dir"), socket=cfg.get("pool_socket"))
        try:
            self.info = pool.info()
            self.ci, self.comp = kv_component(self.info, cfg.get("component"))
            pool.join(self.engine_id, self.tp_size, self.tp_rank, quota_pages=quota, ticket_timeout_ms=ticket_ms)
        except hicache.Error as e:
            pool.detach()
            hint = (" (another server has this engine id: give each server its own 'engine_id')"
                    if e.errno == errno.EEXIST else "")
            raise hicache.Error(e.errno, f"hicache: engine {self.engine_id} TP rank {self.tp_rank} of "
                                         f"{self.tp_size} on pool '{name}': {e.strerror}{hint}") from None
        self.pool, self.name, self.P = pool, name, self.info["page_tokens"]
        self.mask = 1 << self.ci  # the component this backend writes, and looks up
        # a reservation another rank never completed is given up after this
        self.grace_s = 2 * (ticket_ms or 10000) / 1000.0
        self.dev = self.host = self.lay = self.scratch = self.scratch_dev = None
        self.st = _Stats()
        self.mu = threading.Lock()  # held, pending, warned
        self.cv = threading.Condition()  # inflight, exclusive, closing
        self.inflight, self.exclusive, self.closing = 0, False, False
        self.scratch_mu = threading.Lock()  # the flat calls share one page of scratch
        self.names = {"e": _Names("e"), "s": _Names("s")}
        self.held = OrderedDict()  # id -> (time, keys, pages, holds) found by batch_exists for batch_get_v1
        self.held_id = 0
        self.pending = deque()  # (deadline, pages) this rank reserved for its engine, not yet READY
        self.warned = {}
        self.stop = threading.Event()
        self.reaper = threading.Thread(target=_reap, args=(weakref.ref(self), self.stop, min(1.0, self.hold_s / 2)),
                                       name="hicache-holds", daemon=True)
        self.reaper.start()
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

    def _open(self, kv):
        kind = "cuda" if kv.is_cuda else "host"
        return hicache.Device(self.pool, [self.lay.describe(kv)], tp_size=self.tp_size, tp_rank=self.tp_rank,
                              kind=kind, device=(kv.device.index or 0) if kv.is_cuda else 0)

    def register_mem_pool_host(self, mem_pool_host):
        """Check the host pool against the pool's geometry and describe it to
        the device path: a mismatch is hicache.Error naming both sides."""
        if self.pool is None:
            raise hicache.Error(errno.EBADF, "hicache: register_mem_pool_host after close()")
        lay = HostLayout(mem_pool_host, self.info, self.ci, self.comp, self.tp_size, self.mla, self.sc.model_name,
                         self.check_model)
        with self._alone():  # no call copies while the devices change
            if self.pool is None:
                raise hicache.Error(errno.EBADF, "hicache: register_mem_pool_host after close()")
            old, prev = (self.dev, self.scratch_dev), self.lay
            self.lay = lay  # what _open describes
            try:
                dev = self._open(mem_pool_host.kv_buffer)
            except Exception:
                self.lay = prev
                raise
            super().register_mem_pool_host(mem_pool_host)
            self.host, self.dev = mem_pool_host, dev
            self.scratch = self.scratch_dev = None
            for d in old:
                if d is not None:
                    d.close()

    @property
    def page_bytes(self):
        """This rank's bytes of a page (0 before a host pool is registered)."""
        return self.lay.page_bytes if self.lay is not None else 0

    def _scratch(self):
        """One page of the host pool's layout, for the calls that pass flat
        pages (get, set): SGLang's flat page order is this layout's."""
        if self.scratch is None:
            self.scratch = torch.zeros(self.lay.flat_shape, dtype=self.host.kv_buffer.dtype)
            self.scratch_dev = self._open(self.scratch)
            self.scratch_slots = torch.arange(self.P, dtype=torch.int64)
        return self.scratch

    def _slots(self, host_indices, n):
        hi = host_indices
        if not isinstance(hi, torch.Tensor):
            hi = torch.as_tensor(hi)
        if hi.dtype != torch.int64 or hi.device.type != "cpu" or not hi.is_contiguous():
            hi = hi.to(device="cpu", dtype=torch.int64).contiguous()
        if hi.numel() < n * self.P:
            raise hicache.Error(errno.EINVAL, f"host_indices has {hi.numel()} slots, {n} pages need {n * self.P}")
        return hi[:n * self.P]

    # ---- logs, holds, names ---------------------------------------------

    def _enter(self, what, needs_host=True, quiet=False):
        """Whether a call can run, and if so count it in: not while
        register_mem_pool_host() or close() runs (it waits), nor once the
        backend is closed or, for a copy, before a host pool is registered
        (a log line)."""
        with self.cv:
            while self.exclusive and not self.closing:
                self.cv.wait()
            if self.closing or self.pool is None:
                why = ("closed", "%s after close(): the backend is closed")
            elif needs_host and self.dev is None:
                why = ("register", "%s before register_mem_pool_host(): SGLang registers its host pool first")
            else:
                self.inflight += 1
                return True
        if not quiet:
            self._warn(why[0], why[1], what)
        return False

    def _leave(self):
        with self.cv:
            self.inflight -= 1
            self.cv.notify_all()

    def _alone(self):
        """A context in which no call runs: it waits for those running, and
        the ones that come wait for it."""
        backend = self

        class Alone:
            def __enter__(self):
                with backend.cv:
                    while backend.exclusive:
                        backend.cv.wait()
                    backend.exclusive = True
                    while backend.inflight:
                        backend.cv.wait()

            def __exit__(self, *exc):
                with backend.cv:
                    backend.exclusive = False
                    backend.cv.notify_all()

        return Alone()

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

    def _warn_l3(self, e, n):
        if e.errno == errno.ENOTCONN:
            self._warn("service", "pool '%s' has no service (hicached): L3 is not asked", self.name)
        else:
            self._warn("prefetch", "L3 prefetch of %d keys: %s", n, e.strerror)

    def _release(self, holds):
        for t in holds:
            try:
                t.release()
            except hicache.Error as e:
                self._warn("release", "release of a hold: %s", e.strerror)

    def _abort(self, pages):
        try:
            if pages:
                self.pool.abort(pages)
        except hicache.Error as e:
            self._warn("abort", "abort of %d reserved pages: %s", len(pages), e.strerror)

    def _expire(self):
        """Let go of holds no batch_get_v1 came for in hold_ms (a prefetch
        SGLang dropped), and give up reservations of this rank's that
        another rank of the engine never completed (its copy failed, or it
        died): the pool keeps them in quarantine until no copy can land."""
        now, old, due = time.monotonic(), [], []
        with self.mu:
            while self.held and now - next(iter(self.held.values()))[0] > self.hold_s:
                old.append(self.held.popitem(last=False)[1])
            while self.pending and self.pending[0][0] <= now:
                due += self.pending.popleft()[1]
        for h in old:
            self._release(h[3])
        given = 0
        for p in due:  # one at a time: a page completed meanwhile is no failure of the others
            try:
                if self.pool.page_state(p) == "RESERVED":
                    self.pool.abort([p])
                    given += 1
            except hicache.Error:
                pass  # completed or given up between the look and the abort: nothing to do
        if given:
            self.st.add(given_up=given)
            self._warn("stuck", "%d pages this rank reserved for its engine were not complete after %.0f s "
                                "(another rank's copy failed, or it is gone): given up", given, self.grace_s)

    def _named(self, kind, key, call):
        """call(request id, n) under the next name of key, moving on past
        names another request of the engine has used; (result, rid, n)."""
        names = self.names[kind]
        rid, n, k = names.take(key)
        for i in range(_STEP_TRIES):
            try:
                return call(rid, n), rid, n
            except hicache.Error as e:
                if e.errno not in _STEP_ERRORS or i == _STEP_TRIES - 1:
                    raise
                self.st.add(steps_skipped=1)
                rid, n, k = names.take(k)

    @staticmethod
    def _depth(extra_info):
        pk = getattr(extra_info, "prefix_keys", None) if extra_info is not None else None
        return len(pk) if pk else 0

    def _find(self, keys, depth, named=True):
        """The pages of the longest prefix of keys READY in the pool, after
        the service has brought what L3 has (up to the deadline): (pages,
        holds on them, pool hit).  Named, under tickets, every rank gets the
        same pages; unnamed, each rank gets what it finds and unpins it."""
        rid = n = None
        if named:
            try:
                t, rid, n = self._named("e", keys[0],
                                        lambda r, i: self.pool.ticket_lookup(r, 2 * i, keys, comps=self.mask))
                pages, holds, h = t.pages[:t.count], [t], t.count
            except hicache.Error as e:
                if e.errno not in _STEP_ERRORS:
                    raise
                self._warn("step", "lookup of %d keys: %s: this rank answers from the pool alone", len(keys),
                           e.strerror)
                self.st.add(unnamed=1)
                named = False
        if not named:
            pages = self.pool.lookup(keys, pin=True, comps=self.mask)
            holds, h = [_Pins(self.pool, pages)], len(pages)
        if h == len(keys):
            return pages, holds, h
        step, rest = (2 * n + 1 if named else 0), keys[h:]
        try:
            rq = self.pool.prefetch(rest, first_depth=depth + h, presence=self.mask, request_id=rid, step=step,
                                    policy="timeout", timeout_ms=self.deadline_ms)
        except hicache.Error as e:
            self._warn_l3(e, len(rest))
            if named:  # the other ranks' takes are lookups under this name: claim the same answer
                try:
                    got = self.pool.ticket_lookup(rid, step, rest, comps=self.mask)
                    holds.append(got)
                    pages += got.pages[:got.count]
                except hicache.Error as e2:
                    self._warn("step", "lookup of %d keys: %s", len(rest), e2.strerror)
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
            self._warn_l3(e, len(rest))
        finally:
            try:
                rq.free()
            except hicache.Error as e:
                self._warn("prefetch", "L3 prefetch: %s", e.strerror)
        return pages, holds, h

    def _hold(self, keys, pages, holds):
        with self.mu:
            self.held_id += 1
            self.held[self.held_id] = (time.monotonic(), keys, pages, holds)

    def _held_for(self, keys):
        """The hold batch_exists left for these keys (the one sharing the
        longest prefix with them): (pages of that prefix, holds), or None."""
        best, m = None, 0
        with self.mu:
            for i, (_, hk, _, _) in self.held.items():
                if hk and hk[0] == keys[0]:
                    j = 0
                    while j < min(len(hk), len(keys)) and hk[j] == keys[j]:
                        j += 1
                    if j > m:
                        best, m = i, j
            if best is None:
                return None
            _, _, pages, holds = self.held.pop(best)
        return pages[:m], holds

    def _pages_for(self, keys, depth):
        """The pages of the longest prefix of keys for a get: those
        batch_exists held for them, then what the pool (and L3) has for the
        rest, each rank on its own: (pages, holds)."""
        pages, holds = self._held_for(keys) or ([], [])
        if len(pages) < len(keys):
            try:
                more, extra, _ = self._find(keys[len(pages):], depth + len(pages), named=False)
            except BaseException:
                self._release(holds)
                raise
            pages, holds = pages + more, holds + extra
        return pages, holds

    # ---- the zero-copy calls (interface_v1) -----------------------------

    @_guarded(lambda *_: 0, needs_host=False)
    def batch_exists(self, keys, extra_info=None):
        """How many of the first keys are in the pool or in L3.  Pages only in
        L3 are brought into the pool now, once for every rank; the pages stay
        held for batch_get_v1 (hold_ms at most)."""
        keys = list(keys)
        if not keys:
            return 0
        t0 = time.monotonic()
        try:
            pages, holds, h = self._find(keys, self._depth(extra_info))
        except hicache.Error as e:
            self._warn("exists", "exists of %d keys: %s", len(keys), e.strerror)
            return 0
        m = len(pages)
        if m:
            self._hold(keys[:m], pages, holds)
        else:
            self._release(holds)
        self.st.add(exists_calls=1, exists_keys=len(keys), hit_pool=h, hit_l3=m - h, miss=len(keys) - m)
        self.st.took("exists", t0)
        return m

    @_guarded(_falses)
    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Copy this rank's shard of each page into its host slots: True for
        each page copied (a prefix)."""
        keys = list(keys)
        res = [False] * len(keys)
        if not keys:
            return res
        t0, holds, m = time.monotonic(), [], 0
        try:
            pages, holds = self._pages_for(keys, self._depth(extra_info))
            m = min(len(pages), len(keys))
            if m:
                self.dev.load(pages[:m], self._slots(host_indices, m), sync=True).free()
                res[:m] = [True] * m
        except hicache.Error as e:
            self._warn("get", "batch_get_v1 of %d pages: %s", len(keys), e.strerror)
            self.st.add(get_failed=len(keys))
            m = 0
        finally:
            self._release(holds)
        self.st.took("get", t0, m, m * self.page_bytes)
        return res

    def _reserve(self, keys, depth):
        """(pages, skips, ticket or None, first): one reservation for the
        engine.  An MLA page is rank 0's alone to write (SGLang backs up from
        rank 0 only), so it reserves without a ticket."""
        if self.mla:
            pages, skip = self.pool.reserve(keys, first_depth=depth, presence=self.mask)
            return pages, skip, None, True
        t, _, _ = self._named("s", keys[0], lambda r, i: self.pool.ticket_reserve(r, i, keys, first_depth=depth,
                                                                                     presence=self.mask))
        return [p if not s else hicache.PAGE_NONE for p, s in zip(t.pages, t.skip)], t.skip, t, t.first

    def _reserve_failed(self, e, n, what):
        if e.errno == errno.ENOSPC:
            why = "the pool is full (every page held or being written)"
        elif e.errno == errno.EDQUOT:
            why = "this rank's quota_pages are in use"
        else:
            why = e.strerror
        self._warn(f"set{e.errno}", "%s of %d pages: %s", what, n, why)

    def _written(self, pages, first, t):
        """After this rank's copies: a reservation of the engine's that this
        rank made waits for the others' shards; give it up if they never
        come (_expire)."""
        if first and t is not None and self.tp_size > 1 and pages:
            with self.mu:
                self.pending.append((time.monotonic() + self.grace_s, pages))

    @_guarded(_falses)
    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Store this rank's shard of each page from its host slots: True for
        a page stored or already present, False for one another engine is
        writing or that could not be stored."""
        keys = list(keys)
        n = len(keys)
        if not n:
            return []
        if self.mla and self.tp_rank != 0:
            return [True] * n  # the latent is rank 0's to write
        t0 = time.monotonic()
        try:
            pages, skip, t, first = self._reserve(keys, self._depth(extra_info))
        except hicache.Error as e:
            self._reserve_failed(e, n, "batch_set_v1")
            self.st.add(set_failed=n)
            return [False] * n
        fill = [i for i in range(n) if not skip[i] and pages[i] != hicache.PAGE_NONE]
        res = [bool(skip[i] == hicache.SKIP_READY) for i in range(n)]
        try:
            if fill:
                hi = self._slots(host_indices, n).view(n, self.P)
                if len(fill) < n:
                    hi = hi.index_select(0, torch.tensor(fill, dtype=torch.int64))
                self.dev.store([pages[i] for i in fill], hi.reshape(-1), sync=True).free()
                for i in fill:
                    res[i] = True
                self._written([pages[i] for i in fill], first, t)
        except Exception as e:  # hicache.Error, or anything else: a False, and the reservation given back
            self._warn("store", "batch_set_v1 of %d pages: %s", len(fill), getattr(e, "strerror", None) or repr(e))
            if first:
                self._abort([pages[i] for i in fill])
            self.st.add(set_failed=len(fill))
            fill = []
        finally:
            if t is not None:
                self._release([t])
        busy = sum(1 for s in skip if s == hicache.SKIP_BUSY)
        self.st.add(set_present=sum(1 for s in skip if s == hicache.SKIP_READY), set_busy=busy)
        self.st.took("set", t0, len(fill), len(fill) * self.page_bytes)
        return res

    # ---- the calls that pass flat pages ----------------------------------

    @_guarded(lambda *_: False, needs_host=False)
    def exists(self, key):
        """Whether the pool or L3 has key's page (nothing is held)."""
        try:
            if self.pool.lookup([key], comps=self.mask):
                return True
            with self.pool.exists([key]) as rq:
                try:
                    return rq.wait(self.deadline_ms) == 1
                except hicache.Error as e:
                    if e.errno == errno.ETIMEDOUT:
                        rq.cancel()  # or leaving the block waits for the service
                    raise
        except hicache.Error as e:
            if e.errno == errno.ENOTCONN:
                self._warn("service", "pool '%s' has no service (hicached): L3 is not asked", self.name)
            else:
                self._warn("exists", "L3 exists of a key: %s", e.strerror)
            return False

    def get(self, key, target_location=None, target_sizes=None):
        """The page of key as a flat tensor of this rank's shard (into
        target_location when given), or None when no tier has it."""
        out = self.batch_get([key], None if target_location is None else [target_location])
        return out[0]

    @_guarded(_nones)
    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """Flat pages of this rank's shard in the host pool's layout
        (SGLang's get_data_page(flat=True) order), into target_locations when
        given: a tensor for each page of the prefix found, then None."""
        keys = list(keys)
        out = [None] * len(keys)
        if not keys:
            return out
        t0, holds, m = time.monotonic(), [], 0
        try:
            pages, holds = self._pages_for(keys, 0)
            with self.scratch_mu:
                scratch = self._scratch()
                for i, p in enumerate(pages[:len(keys)]):
                    self.scratch_dev.load([p], self.scratch_slots, sync=True).free()
                    dst = target_locations[i] if target_locations else torch.empty(scratch.numel(),
                                                                                    dtype=scratch.dtype)
                    dst.view(-1).copy_(scratch.view(-1))
                    out[i] = dst
                    m += 1
        except hicache.Error as e:
            self._warn("get", "batch_get of %d pages: %s", len(keys), e.strerror)
        finally:
            self._release(holds)
        self.st.took("get", t0, m, m * self.page_bytes)
        return out

    def set(self, key, value=None, target_location=None, target_sizes=None):
        return self.batch_set([key], [value])

    @_guarded(lambda *_: False)
    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        """Store flat pages (SGLang's get_data_page(flat=True) order); True
        when every page is stored or present."""
        keys = list(keys)
        if not keys:
            return True
        if values is None or len(values) != len(keys):
            self._warn("set", "batch_set: %d keys and %s values: give one flat page for each key", len(keys),
                       "no" if values is None else len(values))
            return False
        if self.mla and self.tp_rank != 0:
            return True
        t0 = time.monotonic()
        try:
            pages, skip, t, first = self._reserve(keys, 0)
        except hicache.Error as e:
            self._reserve_failed(e, len(keys), "batch_set")
            return False
        ok, i, done = True, 0, []
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
                    self.scratch_dev.store([p], self.scratch_slots, sync=True).free()
                    done.append(p)
                i = len(pages)
            self._written(done, first, t)
        except Exception as e:  # hicache.Error, or a value that is no tensor: a False, never a leak
            self._warn("store", "batch_set of %d pages: %s", len(keys), getattr(e, "strerror", None) or repr(e))
            ok = False
            if first:  # the pages not stored yet; those before are done
                self._abort([p for p, sk in zip(pages[i:], skip[i:]) if not sk])
                self._written(done, first, t)
        finally:
            if t is not None:
                self._release([t])
        self.st.took("set", t0, len(done), len(done) * self.page_bytes)
        return ok

    # ---- the rest -------------------------------------------------------

    def get_stats(self):
        with self.st.lock:
            d = Stats(self.st.c, self.st.sg)
            d["latency_s"] = {k: {"calls": a[0], "mean": a[1] / a[0] if a[0] else 0.0, "max": a[2]}
                              for k, a in self.st.lat.items()}
            self.st.sg = {k: [] for k in self.st.sg}
        d["engine_id"], d["pool"] = self.engine_id, self.name
        if not self._enter("get_stats", False, quiet=True):
            return d  # closed: this rank's own figures only
        try:
            ps = self.pool.stats()
            d["pool_pages"] = ps["pages"]
            d["pool_counters"] = {k: v for k, v in ps["counters"].items() if v}
            if self.dev is not None:
                d["device"] = self.dev.stats()
        except hicache.Error as e:
            self._warn("stats", "stats: %s", e.strerror)
        finally:
            self._leave()
        return d

    def _drop_holds(self):
        with self.mu:
            held, self.held = list(self.held.values()), OrderedDict()
        for h in held:
            self._release(h[3])

    @_guarded(lambda *_: None, needs_host=False)
    def clear(self):
        """clear "local" (the default): let go of the pages this rank holds
        for a batch_get_v1 that has not come; the pages stay, since other
        servers share them.  clear "pool": then also evict every page of the
        pool that no rank holds, every server's (hc_evict(3))."""
        self._drop_holds()
        if self.clear_mode == "pool":
            try:
                n = self.pool.evict()
                log.info("hicache: cleared pool '%s': %d pages evicted", self.name, n)
            except hicache.Error as e:
                self._warn("clear", "clear of pool '%s': %s", self.name, e.strerror)

    def close(self):
        """Wait for the calls running, let every hold go, close the device
        path, leave and detach; calls after it return False (0, None).  The
        pages this rank stored stay with the pool."""
        with getattr(self, "cv", threading.Condition()):
            if getattr(self, "pool", None) is None or self.closing:
                return
            self.closing = True
            while self.inflight:
                self.cv.wait()
            self.cv.notify_all()
        self.stop.set()
        if self.reaper is not threading.current_thread():
            self.reaper.join()
        self._drop_holds()
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
