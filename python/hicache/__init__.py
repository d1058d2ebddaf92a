# SPDX-License-Identifier: Apache-2.0
"""hicache: the shared host tier of an LLM engine's KV cache, from Python.

A binding of libhicache (hicache(7)): pools of page envelopes shared by
every rank process on a node, page keys as SGLang computes them, ticketed
lookups and reservations that give every TP rank of an engine the same
answer, and requests to the service (hicached) that moves pages to and
from L3.  Every failure raises hicache.Error, with the errno and the line
hc_last_error() gave.  hicache-python(7) is the reference.
"""
import ctypes
import errno as _errno

from . import _lib

__all__ = ["Error", "Pool", "Ticket", "Request", "key_chain", "namespace_seed", "version", "Component",
           "Device", "DeviceComponent", "Transfer", "PAGE_NONE", "QUOTA_UNLIMITED"]

_c = _lib.load()
PAGE_NONE = _lib.PAGE_NONE
QUOTA_UNLIMITED = 0xFFFFFFFF
SKIP_READY, SKIP_BUSY = 1, 2

# enums of hicache.h, by the names the tools use
DTYPES = {"f32": 1, "f16": 2, "bf16": 3, "fp8_e4m3": 4, "fp8_e5m2": 5, "int8": 6, "uint8": 7}
_KV, _STATE = 1, 2
_SHARDED, _REPLICATED = 0, 1
_EVICT = {"clock": 0, "lru": 1}
_HOST_MODE = {"cache": 0, "buffer_only": 1}
_LOOKUP_PIN, _LOOKUP_NOTOUCH = 0x1, 0x2
_CREATE_NO_POPULATE = 0x1
ATTACH_ADMIN, ATTACH_READONLY, ATTACH_NO_RECOVER, ATTACH_NO_POPULATE = 0x1, 0x2, 0x4, 0x8
_PREFETCH_POLICY = {"best_effort": 0, "wait_complete": 1, "timeout": 2}
_DEV_KIND = {"host": 0, "cuda": 1}
_DEV_PATH = {"auto": 0, "direct": 1, "kernel": 2}
_XFER_COMMIT, _XFER_SYNC = 0x1, 0x2


class Error(OSError):
    """A libhicache call failed: errno is its errno, strerror its error line."""

    def __init__(self, err, line):
        super().__init__(err, line)


def _check(ret):
    """Raise hicache.Error for a negative errno; return a count as it is."""
    if ret < 0:
        raise Error(-ret, _c.hc_last_error().decode(errors="replace"))
    return ret


def _bad(err, line):
    raise Error(err, line)


def version():
    """The library's version string."""
    return _c.hc_version().decode()


def _bytes_key(k, what):
    if isinstance(k, str):
        try:
            k = bytes.fromhex(k)
        except ValueError:
            _bad(_errno.EINVAL, f"{what}: '{k}' is not a key: give 64 hex digits or 32 bytes")
    if not isinstance(k, (bytes, bytearray)) or len(k) != _lib.KEY_BYTES:
        _bad(_errno.EINVAL, f"{what}: a key is 32 bytes (or 64 hex digits), got {k!r:.80}")
    return bytes(k)


def _keys(keys, what):
    """keys (hex strings or 32-byte values) as a C array."""
    keys = list(keys)
    arr = (_lib.Key * max(len(keys), 1))()
    for i, k in enumerate(keys):
        ctypes.memmove(arr[i], _bytes_key(k, what), _lib.KEY_BYTES)
    return arr, len(keys)


def namespace_seed(extra_key=None, cache_salt=None):
    """The 32-byte seed of a namespace, or None when both parts are None."""
    seed = (ctypes.c_uint8 * 32)()
    enc = lambda s: None if s is None else str(s).encode()
    n = _check(_c.hc_namespace_seed(enc(extra_key), enc(cache_salt), seed))
    return bytes(seed) if n else None


def key_chain(tokens, page_tokens, prev=None, seed=None, as_bytes=False):
    """The keys of the full pages of tokens, as SGLang computes them.

    Each key is SHA-256 of the previous key and the page's token ids as
    uint32 little-endian; prev continues a chain (the key of the page
    before tokens[0]), seed starts one (namespace_seed); give at most one.
    A partial last page gets no key.  Hex strings, or bytes with as_bytes.
    """
    toks = list(tokens)
    if page_tokens <= 0:
        _bad(_errno.EINVAL, f"key chain: page_tokens {page_tokens} must be positive")
    arr = (ctypes.c_uint32 * max(len(toks), 1))()
    for i, t in enumerate(toks):
        if not 0 <= int(t) < 2**32:
            _bad(_errno.EINVAL, f"key chain: token {i} is {t}, not a uint32 token id")
        arr[i] = int(t)
    out = (_lib.Key * max(len(toks) // page_tokens, 1))()

    def c_key(k, what):
        return None if k is None else (ctypes.c_uint8 * 32).from_buffer_copy(_bytes_key(k, what))

    n = _check(_c.hc_key_chain(c_key(seed, "key chain: seed"), c_key(prev, "key chain: prev"), arr, len(toks),
                               page_tokens, out))
    keys = [bytes(out[i]) for i in range(n)]
    return keys if as_bytes else [k.hex() for k in keys]


class Component:
    """One component of a pool's envelope, as Pool.create takes it."""

    def __init__(self, name, dtype, kv_heads=0, head_bytes=0, layers=0, bytes_per_layer=0, replicated=False,
                 window_pages=0):
        if dtype not in DTYPES:
            _bad(_errno.EINVAL, f"component '{name}': dtype '{dtype}' is none of {', '.join(DTYPES)}")
        self.name, self.dtype, self.layers = name, dtype, layers
        self.kv_heads, self.head_bytes, self.bytes_per_layer = kv_heads, head_bytes, bytes_per_layer
        self.replicated, self.window_pages = replicated, window_pages

    @classmethod
    def kv(cls, name, dtype, kv_heads, head_bytes, layers, replicated=False, window_pages=0):
        """K and V of every token: kv_heads heads of head_bytes, in layers."""
        return cls(name, dtype, kv_heads=kv_heads, head_bytes=head_bytes, layers=layers, replicated=replicated,
                   window_pages=window_pages)

    @classmethod
    def state(cls, name, dtype, bytes_per_layer, layers, window_pages=1):
        """A per-page state snapshot (one copy for all ranks)."""
        return cls(name, dtype, bytes_per_layer=bytes_per_layer, layers=layers, replicated=True,
                   window_pages=window_pages)

    def _spec(self, keep):
        name = self.name.encode()
        keep.append(name)
        return _lib.ComponentSpec.make(name=name, dtype=DTYPES[self.dtype], kind=_STATE if self.bytes_per_layer else _KV,
                                       sharding=_REPLICATED if self.replicated else _SHARDED, kv_heads=self.kv_heads,
                                       head_bytes=self.head_bytes, bytes_per_layer=self.bytes_per_layer,
                                       layers=self.layers, window_pages=self.window_pages)


def _info(s):
    """A ctypes struct as a dict: char arrays decoded, byte arrays as bytes."""
    out = {}
    for name, t in s._fields_:
        v = getattr(s, name)
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        elif isinstance(v, ctypes.Array):
            v = bytes(v)
        out[name] = v
    return out


class Ticket:
    """What this rank holds of one ticket: pages (the answer), first (this
    rank did the work); release() it once, or use it as a context."""

    def __init__(self, pool, t, pages, n, skip=None):
        self._pool, self._t, self._pages = pool, t, pages
        self.count = n
        self.pages = [pages[i] for i in range(t.n)]
        self.skip = None if skip is None else [skip[i] for i in range(t.n)]
        self.first = bool(t.first)

    def release(self):
        if not self._t.released:
            _check(_c.hc_ticket_release(self._pool._p, ctypes.byref(self._t)))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class _Handle:
    """A C handle that waits and frees once: free() (its result), the end
    of a with block, or the collector."""

    def __init__(self, h, free_fn):
        self._hd, self._free_fn = h, free_fn

    def free(self):
        if self._hd:
            r = self._free_fn(self._hd)
            self._hd = None
            return _check(r)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __del__(self):
        if getattr(self, "_hd", None):
            self._free_fn(self._hd)


class Request(_Handle):
    """A request to the service (hc_req_*): poll(), wait(), cancel(); free()
    it, or use it as a context."""

    def __init__(self, pool, rq, keys=None):
        super().__init__(rq, _c.hc_req_free)
        self._pool, self._keys = pool, keys

    def poll(self):
        """The result, or None while it runs."""
        r = _c.hc_req_poll(self._hd)
        return None if r == -_errno.EINPROGRESS else _check(r)

    def wait(self, timeout_ms=-1):
        """The result; hicache.Error(ETIMEDOUT) after timeout_ms (< 0: none)."""
        return _check(_c.hc_req_wait(self._hd, int(timeout_ms)))

    def cancel(self):
        r = _c.hc_req_cancel(self._hd)
        if r != -_errno.EALREADY:
            _check(r)

    def take(self, request_id=None, step=0):
        """A prefetch's hit: its pages, pinned for this rank (under a ticket
        name, a Ticket to release; else a list to unpin)."""
        n = len(self._keys) if self._keys else 0
        pages = (ctypes.c_uint64 * max(n, 1))()
        if request_id is None:
            got = _check(_c.hc_req_prefetch_take(self._hd, pages, None))
            return [pages[i] for i in range(got)]
        t = _lib.Ticket.make()
        got = _check(_c.hc_req_prefetch_take(self._hd, pages, ctypes.byref(t)))
        return Ticket(self._pool, t, pages, got)



class Pool:
    """An attached pool.  Pool.create makes one; Pool.attach attaches one
    (claiming a rank slot unless flags say ATTACH_ADMIN); detach() or the
    context ends it."""

    def __init__(self, handle, name):
        self._p, self.name = handle, name

    @staticmethod
    def create(name, model_id, page_tokens, tp_size, components, capacity_pages=0, capacity_bytes=0, dir=None,
               head_groups=0, max_ranks=0, quarantine_ms=0, evict="clock", host_mode="cache", max_tickets=0,
               ticket_keys=0, populate=True, mode=0, group=None):
        """Create the pool (hc_pool_create(3)); attach it with Pool.attach."""
        if evict not in _EVICT or host_mode not in _HOST_MODE:
            _bad(_errno.EINVAL, f"pool '{name}': evict must be one of {list(_EVICT)} and host_mode one of "
                                f"{list(_HOST_MODE)}")
        keep = []
        comps = list(components)
        arr = (_lib.ComponentSpec * max(len(comps), 1))(*[c._spec(keep) for c in comps])
        enc = lambda s: None if s is None else str(s).encode()
        spec = _lib.PoolSpec.make(name=enc(name), dir=enc(dir), model_id=enc(model_id), page_tokens=page_tokens,
                                  tp_size=tp_size, head_groups=head_groups, comps=arr, ncomp=len(comps),
                                  capacity_pages=capacity_pages, capacity_bytes=capacity_bytes, max_ranks=max_ranks,
                                  quarantine_ms=quarantine_ms, mode=mode, group=enc(group),
                                  flags=0 if populate else _CREATE_NO_POPULATE, evict=_EVICT[evict],
                                  max_tickets=max_tickets, ticket_keys=ticket_keys, host_mode=_HOST_MODE[host_mode])
        _check(_c.hc_pool_create(ctypes.byref(spec)))

    @classmethod
    def attach(cls, name, dir=None, flags=0, socket=None, socket_timeout_ms=0):
        """Attach pool name in dir, or the sealed pool that the owner of the Unix socket
        path hands over (hicached's [pool] socket; hicache-sealed(7))."""
        if socket is not None and dir is not None:
            _bad(_errno.EINVAL, f"pool '{name}': give its dir (a named pool) or its socket (a sealed one), not both")
        o = _lib.AttachOpts.make(dir=None if dir is None else str(dir).encode(), flags=flags,
                                 socket=None if socket is None else str(socket).encode(),
                                 socket_timeout_ms=socket_timeout_ms)
        h = ctypes.c_void_p()
        _check(_c.hc_pool_attach(str(name).encode(), ctypes.byref(o), ctypes.byref(h)))
        return cls(h, name)

    @staticmethod
    def destroy(name, dir=None, force=False):
        _check(_c.hc_pool_destroy(str(name).encode(), None if dir is None else str(dir).encode(), 1 if force else 0))

    def detach(self):
        if self._p:
            r = _c.hc_pool_detach(self._p)
            self._p = None
            _check(r)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()

    def _h(self):
        if not self._p:
            _bad(_errno.EBADF, f"pool '{self.name}' is detached")
        return self._p

    def info(self):
        """The pool's geometry (hc_pool_info(3)), as a dict."""
        i = _lib.PoolInfo()
        _check(_c.hc_pool_info(self._h(), ctypes.byref(i), ctypes.sizeof(i)))
        d = _info(i)
        d["components"] = [self.component(c) for c in range(i.ncomp)]
        return d

    def component(self, comp):
        ci = _lib.ComponentInfo()
        _check(_c.hc_pool_component(self._h(), comp, ctypes.byref(ci), ctypes.sizeof(ci)))
        return _info(ci)

    def join(self, engine_id, tp_size, tp_rank, quota_pages=QUOTA_UNLIMITED, ticket_timeout_ms=0):
        """Join an engine (hc_engine_join(3)): every rank of it, once."""
        s = _lib.EngineSpec.make(engine_id=engine_id, tp_size=tp_size, tp_rank=tp_rank, quota_pages=quota_pages,
                                 ticket_timeout_ms=ticket_timeout_ms)
        _check(_c.hc_engine_join(self._h(), ctypes.byref(s)))

    def leave(self):
        _check(_c.hc_engine_leave(self._h()))

    def _lreq(self, keys, pin, comps, what):
        arr, n = _keys(keys, what)
        return _lib.LookupReq.make(keys=arr, nkeys=n, comps=comps, flags=_LOOKUP_PIN if pin else 0), arr, n

    def lookup(self, keys, pin=False, comps=0):
        """The handles of the longest READY prefix of keys (pinned with pin)."""
        r, arr, n = self._lreq(keys, pin, comps, "lookup")
        pages = (ctypes.c_uint64 * max(n, 1))()
        h = _check(_c.hc_lookup(self._h(), ctypes.byref(r), pages))
        return [pages[i] for i in range(h)]

    def _rreq(self, keys, first_depth, presence, what):
        arr, n = _keys(keys, what)
        return _lib.ReserveReq.make(keys=arr, nkeys=n, first_depth=first_depth, presence=presence), arr, n

    def reserve(self, keys, first_depth=0, presence=0):
        """Reserve by key (hc_reserve(3)): (pages, skips), a page to fill or
        PAGE_NONE with the skip (SKIP_READY, SKIP_BUSY) for each key."""
        r, arr, n = self._rreq(keys, first_depth, presence, "reserve")
        pages, skip = (ctypes.c_uint64 * max(n, 1))(), (ctypes.c_uint8 * max(n, 1))()
        _check(_c.hc_reserve(self._h(), ctypes.byref(r), pages, skip))
        return [pages[i] if not skip[i] else PAGE_NONE for i in range(n)], [skip[i] for i in range(n)]

    @staticmethod
    def _name(request_id, step):
        return _lib.TicketName.make(request_id=str(request_id).encode(), step=step)

    def ticket_lookup(self, request_id, step, keys, comps=0):
        """A lookup under a ticket (hc_ticket_lookup(3)): every rank of the
        engine gets the same pinned hit.  A Ticket."""
        nm = self._name(request_id, step)
        r, arr, n = self._lreq(keys, False, comps, "ticket lookup")
        pages, t = (ctypes.c_uint64 * max(n, 1))(), _lib.Ticket.make()
        h = _check(_c.hc_ticket_lookup(self._h(), ctypes.byref(nm), ctypes.byref(r), pages, ctypes.byref(t)))
        return Ticket(self, t, pages, h)

    def ticket_reserve(self, request_id, step, keys, first_depth=0, presence=0):
        """A reservation under a ticket (hc_ticket_reserve(3)): the first rank
        reserves, every rank gets the same pages to fill its shards of."""
        nm = self._name(request_id, step)
        r, arr, n = self._rreq(keys, first_depth, presence, "ticket reserve")
        pages, skip, t = (ctypes.c_uint64 * max(n, 1))(), (ctypes.c_uint8 * max(n, 1))(), _lib.Ticket.make()
        m = _check(_c.hc_ticket_reserve(self._h(), ctypes.byref(nm), ctypes.byref(r), pages, skip, ctypes.byref(t)))
        return Ticket(self, t, pages, m, skip)

    def needed(self, presence=0):
        """The fill mask a page of these components needs to be READY."""
        return _c.hc_page_needed(self._h(), presence)

    def commit(self, page, shards):
        _check(_c.hc_page_commit(self._h(), page, shards))

    def abort(self, pages):
        arr, n = _u64_array(pages)
        _check(_c.hc_page_abort(self._h(), arr, n))

    def free(self, pages):
        arr, n = _u64_array(pages)
        _check(_c.hc_page_free(self._h(), arr, n))

    def pin(self, page):
        _check(_c.hc_page_pin(self._h(), page))

    def unpin(self, page):
        _check(_c.hc_page_unpin(self._h(), page))

    def evict(self, n=None):
        """Evict up to n unpinned keyed READY pages by the pool's policy (all
        of them when n is None): the count evicted (hc_evict(3))."""
        return _check(_c.hc_evict(self._h(), self.info()["npages"] if n is None else int(n)))

    def evict_key(self, key):
        """Evict the page of key unless it is held: 1, or 0 when absent."""
        return _check(_c.hc_evict_key(self._h(), (ctypes.c_uint8 * 32).from_buffer_copy(_bytes_key(key, "evict"))))

    def page_state(self, page):
        """The state name of the page a handle names (hc_page_state(3)), or
        None when the page has lived again since (a later generation)."""
        h = ctypes.c_uint64()
        st = _check(_c.hc_page_state(self._h(), page & 0xFFFFFFFF, ctypes.byref(h), None, None))
        return _c.hc_page_state_name(st).decode() if h.value == page else None

    def page_buffer(self, page, comp=0, layer=0, group=0):
        """One (component, layer, head group) run of a page, as a writable
        memoryview of the envelope (hc_page_addr(3))."""
        addr, ln = ctypes.c_void_p(), ctypes.c_size_t()
        _check(_c.hc_page_addr(self._h(), page, comp, layer, group, ctypes.byref(addr), ctypes.byref(ln)))
        return memoryview((ctypes.c_uint8 * ln.value).from_address(addr.value)).cast("B")

    def stats(self):
        """The pool's figures (hc_pool_stats(3)): gauges, pages by state,
        counters and histograms by name."""
        s = _lib.Stats()
        _check(_c.hc_pool_stats(self._h(), ctypes.byref(s), ctypes.sizeof(s)))
        d = {n: getattr(s, n) for n, _ in s._fields_ if n not in ("pages", "counter", "hist", "tokens")}
        d["pages"] = {}
        for i in range(_lib.PAGE_STATES_MAX):
            nm = _c.hc_page_state_name(i).decode()
            if nm == "INVALID":
                break
            d["pages"][nm.lower()] = s.pages[i]
        d["counters"] = {}
        for i in range(_lib.CTR_MAX):
            nm = _c.hc_counter_name(i)
            if nm is None:
                break
            d["counters"][nm.decode()] = s.counter[i]
        for key, fn, arr, mx in (("hist", _c.hc_hist_name, s.hist, _lib.HIST_MAX),
                                 ("tokens", _c.hc_tier_name, s.tokens, _lib.TIER_MAX)):
            d[key] = {}
            for i in range(mx):
                nm = fn(i)
                if nm is None:
                    break
                d[key][nm.decode()] = {"buckets": list(arr[i].bucket), "count": arr[i].count, "sum": arr[i].sum,
                                    "max": arr[i].max}
        return d

    def service_live(self):
        """Whether a service serves the pool now: its pid, or None."""
        pid = ctypes.c_uint32()
        return pid.value if _check(_c.hc_service_probe(self._h(), ctypes.byref(pid))) else None

    def exists(self, keys):
        """Ask the service how long a prefix of keys L3 has: a Request."""
        arr, n = _keys(keys, "L3 exists")
        rq = ctypes.c_void_p()
        _check(_c.hc_req_exists(self._h(), arr, n, ctypes.byref(rq)))
        return Request(self, rq)

    def backup(self, pages):
        """Ask the service to back READY keyed pages up to L3: a Request."""
        arr, n = _u64_array(pages)
        rq = ctypes.c_void_p()
        _check(_c.hc_req_backup(self._h(), arr, n, ctypes.byref(rq)))
        return Request(self, rq)

    def prefetch(self, keys, first_depth=0, presence=0, request_id=None, step=0, policy="wait_complete",
                 timeout_ms=0, timeout_us_per_page=0, prio=0):
        """Ask the service to make keys READY from L3 (hc_req_prefetch(3)): a
        Request whose take() gives the hit, under a ticket name or not."""
        if policy not in _PREFETCH_POLICY:
            _bad(_errno.EINVAL, f"prefetch: policy '{policy}' is none of {', '.join(_PREFETCH_POLICY)}")
        arr, n = _keys(keys, "L3 prefetch")
        nm = None if request_id is None else self._name(request_id, step)
        r = _lib.PrefetchReq.make(keys=arr, nkeys=n, first_depth=first_depth, presence=presence,
                                  name=None if nm is None else ctypes.pointer(nm), policy=_PREFETCH_POLICY[policy],
                                  timeout_ms=timeout_ms, timeout_us_per_page=timeout_us_per_page, prio=prio)
        rq = ctypes.c_void_p()
        _check(_c.hc_req_prefetch(self._h(), ctypes.byref(r), ctypes.byref(rq)))
        return Request(self, rq, list(keys))


def _u64_array(values):
    """values (page handles, addresses) as a C uint64 array, and its count."""
    values = list(values)
    return (ctypes.c_uint64 * max(len(values), 1))(*values), len(values)


def _u64s(v, n, what):
    """A uint64 array of n values as the C calls take it: an address (an int,
    the caller's promise), a CPU int64 tensor (its own memory, no copy), a
    ctypes array, or a sequence (copied).  Returns (pointer, keepalive)."""
    if v is None:
        return None, None
    if isinstance(v, int):
        return ctypes.c_void_p(v), None
    if hasattr(v, "data_ptr"):  # a torch tensor, without importing torch here
        if str(v.dtype) not in ("torch.int64", "torch.uint64") or not v.is_contiguous() or v.device.type != "cpu":
            _bad(_errno.EINVAL, f"{what}: a tensor of slots must be contiguous int64 on the CPU, got {v.dtype} "
                                f"on {v.device}{'' if v.is_contiguous() else ', not contiguous'}")
        if v.numel() != n:
            _bad(_errno.EINVAL, f"{what}: {v.numel()} slots, the transfer needs {n}")
        return ctypes.c_void_p(v.data_ptr()), v
    if isinstance(v, ctypes.Array):
        if len(v) < n:
            _bad(_errno.EINVAL, f"{what}: {len(v)} slots, the transfer needs {n}")
        return ctypes.cast(v, ctypes.c_void_p), v
    arr, m = _u64_array(v)
    if m != n:
        _bad(_errno.EINVAL, f"{what}: {m} slots, the transfer needs {n}")
    return ctypes.cast(arr, ctypes.c_void_p), arr


class DeviceComponent:
    """One component of a rank's KV, as hc_dev_open(3) takes it: the K (and
    V) address of slot 0 of every layer, this rank's bytes of a token, the
    stride between slots, how many slots, and blocks (block_slots slots
    block_stride bytes apart; 0: none).  v=None: a state, or a replicated
    component whose K half alone moves (MLA)."""

    def __init__(self, comp, k, v=None, token_bytes=0, token_stride=0, slots=0, block_stride=0, block_slots=0):
        self.comp, self.k, self.v = comp, [int(a) for a in k], None if v is None else [int(a) for a in v]
        self.token_bytes, self.token_stride, self.slots = token_bytes, token_stride or token_bytes, slots
        self.block_stride, self.block_slots = block_stride, block_slots

    def _spec(self, keep):
        k = _u64_array(self.k)[0]
        v = None if self.v is None else _u64_array(self.v)[0]
        keep += [k, v]
        return _lib.DevComp.make(comp=self.comp, k=ctypes.cast(k, ctypes.POINTER(ctypes.c_uint64)),
                                 v=None if v is None else ctypes.cast(v, ctypes.POINTER(ctypes.c_uint64)),
                                 token_bytes=self.token_bytes, token_stride=self.token_stride, slots=self.slots,
                                 block_stride=self.block_stride, block_slots=self.block_slots)


class Transfer(_Handle):
    """A transfer in flight (hc_dev_load(3)): wait(), wait_layer(l),
    layer_done(l); free() it (it waits), or use it as a context."""

    def __init__(self, x, n):
        super().__init__(x, _c.hc_xfer_free)
        self.pages = n

    @property
    def layers(self):
        return _c.hc_xfer_layers(self._hd)

    def layer_done(self, layer):
        return bool(_check(_c.hc_xfer_layer_done(self._hd, layer)))

    def wait_layer(self, layer):
        _check(_c.hc_xfer_wait_layer(self._hd, layer))

    def wait(self):
        """Every layer in (and, for a store with commit, the commits): its
        result, or hicache.Error."""
        return _check(_c.hc_xfer_wait(self._hd))



class Device:
    """A rank's KV as the pool's device path sees it (hc_dev_open(3)): kind
    "host" for host memory (SGLang's host pool), "cuda" for a CUDA device.
    load() and store() move pages between envelopes and slots in C."""

    def __init__(self, pool, comps, tp_size=1, tp_rank=0, kind="host", device=0, path="auto"):
        if kind not in _DEV_KIND or path not in _DEV_PATH:
            _bad(_errno.EINVAL, f"device: kind must be one of {list(_DEV_KIND)} and path one of {list(_DEV_PATH)}")
        keep = []
        comps = list(comps)
        arr = (_lib.DevComp * max(len(comps), 1))(*[c._spec(keep) for c in comps])
        spec = _lib.DevSpec.make(kind=_DEV_KIND[kind], device=device, tp_size=tp_size, tp_rank=tp_rank, comps=arr,
                                 ncomp=len(comps), path=_DEV_PATH[path])
        h = ctypes.c_void_p()
        _check(_c.hc_dev_open(pool._h(), ctypes.byref(spec), ctypes.byref(h)))
        self._d, self._pool, self._T = h, pool, pool.info()["page_tokens"]

    def _h(self):
        if not self._d:
            _bad(_errno.EBADF, "device is closed")
        return self._d

    def _xfer(self, fn, pages, slots, state_slots, flags, after, what):
        parr, n = _u64_array(pages)
        sp, keep1 = _u64s(slots, n * self._T, f"{what}: slots")
        ssp, keep2 = _u64s(state_slots, n, f"{what}: state slots")
        r = _lib.XferReq.make(pages=parr, n=n, slots=sp, state_slots=ssp, flags=flags,
                              after=None if after is None else ctypes.c_void_p(int(after)))
        x = ctypes.c_void_p()
        _check(fn(self._h(), ctypes.byref(r), ctypes.byref(x)))
        return Transfer(x, n)

    def load(self, pages, slots, state_slots=None, after=None, sync=False):
        """Copy READY pages into the slots (slot of token t of page i at
        i * page_tokens + t): a Transfer.  sync (a host device): copy on
        this thread, finished when the call returns (HC_XFER_SYNC)."""
        return self._xfer(_c.hc_dev_load, pages, slots, state_slots, _XFER_SYNC if sync else 0, after,
                          "device load")

    def store(self, pages, slots, state_slots=None, commit=True, after=None, sync=False):
        """Copy the slots into pages reserved by this rank's engine, and
        with commit commit this rank's shards: a Transfer."""
        return self._xfer(_c.hc_dev_store, pages, slots, state_slots,
                          (_XFER_COMMIT if commit else 0) | (_XFER_SYNC if sync else 0), after, "device store")

    def stats(self):
        s = _lib.DevStats()
        _check(_c.hc_dev_stats(self._h(), ctypes.byref(s), ctypes.sizeof(s)))
        return {n: getattr(s, n) for n, _ in s._fields_}

    def close(self):
        if self._d:
            r = _c.hc_dev_close(self._d)
            self._d = None
            _check(r)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
