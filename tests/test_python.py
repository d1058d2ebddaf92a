# SPDX-License-Identifier: Apache-2.0
"""test_python.py - the Python binding (python/hicache) against the built
libhicache: its structs laid out as the C compiler lays them out from the
headers (tests/pylayout.c), the key chain against the rule written again in
hashlib, pools, pages, tickets across rank processes, stats, and errors
raised as hicache.Error with the library's line."""
import ctypes
import errno
import hashlib
import os
import struct
import subprocess
import sys
import unittest

import hicache
from hicache import _lib

BUILDDIR = os.environ.get("HC_BUILDDIR", ".")
_n = 0


def pool_name():
    """A name hct_sweep (tests/hct.c) reclaims once this process is gone."""
    global _n
    _n += 1
    return f"hctest-{os.getpid()}-py{_n}"


def sglang_chain(tokens, page_tokens, prior=None):
    """The key rule of doc/design.md, "Keys": SHA-256 of the previous key
    and the page's token ids as uint32 little-endian, from hashlib."""
    keys, prev = [], prior
    for i in range(0, len(tokens) - page_tokens + 1, page_tokens):
        h = hashlib.sha256()
        if prev is not None:
            h.update(prev)
        h.update(struct.pack(f"<{page_tokens}I", *tokens[i:i + page_tokens]))
        prev = h.digest()
        keys.append(prev.hex())
    return keys


def components():
    return [hicache.Component.kv("kv", "bf16", kv_heads=4, head_bytes=64, layers=2),
            hicache.Component.state("state", "f32", bytes_per_layer=1024, layers=2)]


class Layout(unittest.TestCase):
    def test_structs_match_the_headers(self):
        out = subprocess.run([os.path.join(BUILDDIR, "tests", "pylayout")], check=True, capture_output=True,
                             text=True).stdout
        sizes, members = {}, {}
        for line in out.splitlines():
            f = line.split()
            if f[0] == "struct":
                sizes[f[1]] = int(f[2])
            else:
                t, m = f[1].split(".")
                members.setdefault(t, {})[m] = (int(f[2]), int(f[3]))
        self.assertEqual(set(sizes), set(_lib.STRUCTS), "pylayout.c and _lib.STRUCTS name different structs")
        for name, cls in _lib.STRUCTS.items():
            self.assertEqual(__import__("ctypes").sizeof(cls), sizes[name], f"sizeof(struct {name})")
            py = {f[0] for f in cls._fields_}
            self.assertEqual(py, set(members[name]), f"struct {name}: the members bound differ from the C ones")
            for field, (off, size) in members[name].items():
                d = getattr(cls, field)
                self.assertEqual((d.offset, d.size), (off, size), f"struct {name}.{field}: offset and size")


class Keys(unittest.TestCase):
    def test_chain_is_sglangs(self):
        toks = list(range(1000, 1000 + 4 * 16 + 5))  # four full pages and a partial one
        self.assertEqual(hicache.key_chain(toks, 16), sglang_chain(toks, 16))
        k = hicache.key_chain(toks, 16, as_bytes=True)
        self.assertEqual([x.hex() for x in k], sglang_chain(toks, 16))
        # a chain continued from the key of the page before
        self.assertEqual(hicache.key_chain(toks[32:], 16, prev=k[1]), sglang_chain(toks[32:], 16, prior=k[1]))
        self.assertEqual(hicache.key_chain(toks[:15], 16), [])

    def test_namespace(self):
        self.assertIsNone(hicache.namespace_seed())
        a, b = hicache.namespace_seed("lora-1"), hicache.namespace_seed("lora-1", "salt")
        self.assertEqual(len(a), 32)
        self.assertNotEqual(a, b)
        toks = list(range(32))
        self.assertNotEqual(hicache.key_chain(toks, 16, seed=a), hicache.key_chain(toks, 16))
        self.assertEqual(hicache.key_chain(toks, 16, seed=a), sglang_chain(toks, 16, prior=a))

    def test_bad_input(self):
        with self.assertRaises(hicache.Error) as e:
            hicache.key_chain([2**32], 1)
        self.assertEqual(e.exception.errno, errno.EINVAL)
        self.assertIn("token 0", e.exception.strerror)
        with self.assertRaises(hicache.Error) as e:
            hicache.key_chain([1, 2], 1, prev=b"short")
        self.assertIn("32 bytes", e.exception.strerror)
        with self.assertRaises(hicache.Error) as e:  # the library's own check: one of prev and seed
            hicache.key_chain([1, 2], 1, prev=bytes(32), seed=bytes(32))
        self.assertEqual(e.exception.errno, errno.EINVAL)


class PoolCase(unittest.TestCase):
    def setUp(self):
        self.name = pool_name()
        hicache.Pool.create(self.name, "test/model-7b", page_tokens=16, tp_size=2, components=components(),
                            capacity_pages=8, populate=False)
        self.pool = hicache.Pool.attach(self.name, flags=hicache.ATTACH_NO_POPULATE)

    def tearDown(self):
        self.pool.detach()
        hicache.Pool.destroy(self.name, force=True)

    def fill_commit(self, pool, page, rank):
        """Write this rank's shard of every component (a byte pattern) and commit it."""
        info = pool.info()
        for c, comp in enumerate(info["components"]):
            groups = [rank] if comp["sharding"] == 0 else ([0] if rank == 0 else [])
            for g in groups:
                for layer in range(comp["layers"]):
                    buf = pool.page_buffer(page, c, layer, g)
                    buf[:] = bytes([(c * 16 + layer * 4 + g + 1) & 0xff]) * len(buf)
        pool.commit(page, (1 << rank) | ((1 << 31) if rank == 0 else 0))  # rank 0 writes the replicated part

    def test_info_and_stats(self):
        info = self.pool.info()
        self.assertEqual(info["name"], self.name)
        self.assertEqual((info["page_tokens"], info["tp_size"], info["npages"]), (16, 2, 8))
        self.assertEqual([c["name"] for c in info["components"]], ["kv", "state"])
        st = self.pool.stats()
        self.assertEqual(st["pages"]["free"], 8)
        self.assertIn("lookups", st["counters"])
        self.assertIn("backup", st["hist"])
        self.assertIn("l2", st["tokens"])

    def test_reserve_commit_lookup(self):
        keys = hicache.key_chain(range(48), 16)
        pages, skip = self.pool.reserve(keys)
        self.assertEqual(skip, [0, 0, 0])
        for pg in pages:
            self.fill_commit(self.pool, pg, 0)
            self.fill_commit(self.pool, pg, 1)
        hit = self.pool.lookup(keys + hicache.key_chain(range(100, 116), 16), pin=True)
        self.assertEqual(hit, pages)
        for pg in hit:
            self.pool.unpin(pg)
        # READY already: the reservation skips them
        again, skip = self.pool.reserve(keys[:2])
        self.assertEqual(skip, [hicache.SKIP_READY] * 2)
        self.assertEqual(again, [hicache.PAGE_NONE] * 2)
        st = self.pool.stats()
        self.assertEqual(st["pages"]["ready"], 3)
        self.assertGreaterEqual(st["counters"]["reserves"], 3)
        self.assertEqual(st["counters"]["hits"], 3)

    def test_tickets_across_ranks(self):
        keys = hicache.key_chain(range(32), 16)
        pages, _ = self.pool.reserve(keys)
        for pg in pages:
            self.fill_commit(self.pool, pg, 0)
            self.fill_commit(self.pool, pg, 1)
        self.pool.join(engine_id=7, tp_size=2, tp_rank=0)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # rank 1 of the engine, a process of its own
            os.close(r)
            code = 1
            try:
                with hicache.Pool.attach(self.name, flags=hicache.ATTACH_NO_POPULATE) as p:
                    p.join(engine_id=7, tp_size=2, tp_rank=1)
                    with p.ticket_lookup("req-1", 0, keys) as t:
                        os.write(w, repr((t.count, t.pages, t.first)).encode())
                    code = 0
            finally:
                os._exit(code)
        os.close(w)
        with self.pool.ticket_lookup("req-1", 0, keys) as t:
            mine = (t.count, t.pages)
        _, status = os.waitpid(pid, 0)
        theirs = eval(os.read(r, 4096).decode())
        os.close(r)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(mine, (2, pages))
        self.assertEqual(theirs[:2], mine, "one ticket, two answers")

    def test_errors(self):
        missing = pool_name()
        with self.assertRaises(hicache.Error) as e:
            hicache.Pool.attach(missing)
        self.assertEqual(e.exception.errno, errno.ENOENT)
        self.assertIn(missing, e.exception.strerror)
        with self.assertRaises(hicache.Error) as e:
            hicache.Pool.create(pool_name(), "m", page_tokens=16, tp_size=2, components=[], capacity_pages=4)
        self.assertEqual(e.exception.errno, errno.EINVAL)
        self.assertIn("components", e.exception.strerror)
        with self.assertRaises(hicache.Error) as e:
            hicache.Component.kv("kv", "bf17", 1, 1, 1)
        self.assertIn("bf17", e.exception.strerror)
        with self.assertRaises(hicache.Error) as e:
            self.pool.lookup(["00" * 31])
        self.assertIn("32 bytes", e.exception.strerror)
        with self.assertRaises(hicache.Error) as e:  # no service serves the pool
            with self.pool.exists(hicache.key_chain(range(16), 16)) as rq:
                rq.wait(2000)
        self.assertEqual(e.exception.errno, errno.ENOTCONN)
        self.assertIsNone(self.pool.service_live())
        p = hicache.Pool.attach(self.name, flags=hicache.ATTACH_ADMIN)
        p.detach()
        with self.assertRaises(hicache.Error) as e:
            p.info()
        self.assertEqual(e.exception.errno, errno.EBADF)


class SealedCase(unittest.TestCase):
    """A sealed pool that hicached creates and hands over its socket
    (hicache-sealed(7)): attached by the socket, with no name in /dev/shm."""

    def setUp(self):
        import tempfile
        import time
        self.name = pool_name()
        self.tmp = tempfile.mkdtemp(prefix="hct-sealed-")
        self.sock = os.path.join(self.tmp, "pool.sock")
        self.l3 = os.path.join(self.tmp, "l3")
        os.mkdir(self.l3)
        self.d = subprocess.Popen(
            [os.path.join(BUILDDIR, "tools", "hicached"), "--pool", self.name, "--backend",
             f"file:dir={self.l3}", "--model", "test/model-7b", "--page-tokens", "16", "--tp", "2", "--kv",
             "kv,bf16,4,64,2", "--state", "state,f32,1024,2,replicated", "--pages", "8", "--socket", self.sock,
             "--log-level", "warn"])
        for _ in range(1000):
            if os.path.exists(self.sock) or self.d.poll() is not None:
                break
            time.sleep(0.005)
        self.assertIsNone(self.d.poll(), "hicached exited")

    def tearDown(self):
        import shutil
        self.d.terminate()
        self.assertEqual(self.d.wait(30), 0)
        self.assertFalse(os.path.exists(self.sock), "hicached left its socket")
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_attach_by_socket(self):
        with hicache.Pool.attach(self.name, flags=hicache.ATTACH_NO_POPULATE, socket=self.sock) as p:
            info = p.info()
            self.assertEqual((info["name"], info["path"]), (self.name, f"memfd:hicache.{self.name}"))
            self.assertFalse(os.path.exists(f"/dev/shm/hicache.{self.name}"))
            keys = hicache.key_chain(range(32), 16)
            pages, _ = p.reserve(keys)
            for pg in pages:
                PoolCase.fill_commit(None, p, pg, 0)
                PoolCase.fill_commit(None, p, pg, 1)
            self.assertEqual(p.lookup(keys), pages)

    def test_errors(self):
        with self.assertRaises(hicache.Error) as e:
            hicache.Pool.attach("another", socket=self.sock)
        self.assertEqual(e.exception.errno, errno.ENOENT)
        self.assertIn(f"serves pool '{self.name}'", e.exception.strerror)
        with self.assertRaises(hicache.Error) as e:
            hicache.Pool.attach(self.name, dir="/dev/shm", socket=self.sock)
        self.assertEqual(e.exception.errno, errno.EINVAL)
        with self.assertRaises(hicache.Error) as e:
            hicache.Pool.attach(self.name, socket=os.path.join(self.tmp, "none.sock"))
        self.assertEqual(e.exception.errno, errno.ENOENT)
        self.assertIn("no socket at", e.exception.strerror)


class DeviceCase(unittest.TestCase):
    """The device path's host kind through the binding: host buffers stand
    in for a rank's KV, with ctypes arrays for memory (no torch here)."""
    L, T, TB, SLOTS = 2, 4, 16, 12  # layers, page tokens, token bytes (2 heads of 8), slots a layer

    def setUp(self):
        self.name = pool_name()
        hicache.Pool.create(self.name, "test/dev", page_tokens=self.T, tp_size=1, populate=False, capacity_pages=4,
                            components=[hicache.Component.kv("kv", "bf16", kv_heads=2, head_bytes=8,
                                                             layers=self.L)])
        self.pool = hicache.Pool.attach(self.name, flags=hicache.ATTACH_NO_POPULATE)
        self.k = (ctypes.c_uint8 * (self.L * self.SLOTS * self.TB))()
        self.v = (ctypes.c_uint8 * (self.L * self.SLOTS * self.TB))()

    def tearDown(self):
        self.pool.detach()
        hicache.Pool.destroy(self.name, force=True)

    def comp(self):
        layer = self.SLOTS * self.TB
        return hicache.DeviceComponent(0, [ctypes.addressof(self.k) + l * layer for l in range(self.L)],
                                       [ctypes.addressof(self.v) + l * layer for l in range(self.L)],
                                       token_bytes=self.TB, slots=self.SLOTS)

    def test_store_then_load(self):
        for i in range(len(self.k)):
            self.k[i], self.v[i] = i * 7 & 0xff, i * 13 & 0xff
        want_k, want_v = bytes(self.k), bytes(self.v)
        keys = hicache.key_chain(range(2 * self.T), self.T)
        pages, skip = self.pool.reserve(keys)
        self.assertEqual(skip, [0, 0])
        with hicache.Device(self.pool, [self.comp()]) as dev:
            with dev.store(pages, list(range(2 * self.T))) as x:
                self.assertEqual(x.layers, self.L)
                self.assertEqual(x.wait(), 0)
            hit = self.pool.lookup(keys, pin=True)
            self.assertEqual(hit, pages, "committed by the store")
            ctypes.memset(self.k, 0, len(self.k))
            ctypes.memset(self.v, 0, len(self.v))
            slots = (ctypes.c_uint64 * (2 * self.T))(*range(4, 4 + 2 * self.T))  # the same tokens, 4 slots on
            with dev.load(hit, slots) as x:
                x.wait_layer(0)
                self.assertTrue(x.layer_done(0))
                x.wait()
            st = dev.stats()
        for pg in hit:
            self.pool.unpin(pg)
        per_layer = self.SLOTS * self.TB
        for l in range(self.L):
            lo = l * per_layer
            self.assertEqual(bytes(self.k)[lo + 4 * self.TB:lo + (4 + 2 * self.T) * self.TB],
                             want_k[lo:lo + 2 * self.T * self.TB], f"K of layer {l}")
            self.assertEqual(bytes(self.v)[lo + 4 * self.TB:lo + (4 + 2 * self.T) * self.TB],
                             want_v[lo:lo + 2 * self.T * self.TB], f"V of layer {l}")
            self.assertEqual(bytes(self.k)[lo:lo + 4 * self.TB], bytes(4 * self.TB), "slots not named stay zero")
        self.assertEqual((st["loads"], st["stores"]), (1, 1))
        self.assertEqual(st["load_bytes"], 2 * 2 * self.L * self.T * self.TB)

    def test_sync(self):
        """sync=True: done, and committed, when the call returns."""
        for i in range(len(self.k)):
            self.k[i], self.v[i] = i * 5 & 0xff, i * 3 & 0xff
        keys = hicache.key_chain(range(100, 100 + self.T), self.T)
        pages, _ = self.pool.reserve(keys)
        with hicache.Device(self.pool, [self.comp()]) as dev:
            x = dev.store(pages, list(range(self.T)), sync=True)
            self.assertEqual(self.pool.lookup(keys), pages, "READY before any wait")
            self.assertTrue(x.layer_done(self.L - 1))
            x.free()
            before = bytes(self.k)
            with dev.load(pages, list(range(8, 8 + self.T)), sync=True) as x:
                self.assertEqual(bytes(self.k)[8 * self.TB:(8 + self.T) * self.TB], before[:self.T * self.TB])
        with hicache.Device(self.pool, [self.comp()]) as dev:  # the library refuses a load that commits
            with self.assertRaises(hicache.Error) as e:
                dev._xfer(hicache._c.hc_dev_load, pages, list(range(self.T)), None, 0x1, None, "device load")
        self.assertIn("flags 0x1", e.exception.strerror)

    def test_errors(self):
        with self.assertRaises(hicache.Error) as e:
            hicache.Device(self.pool, [self.comp()], kind="tpu")
        self.assertIn("kind must be one of", e.exception.strerror)
        bad = self.comp()
        bad.slots = 0
        with self.assertRaises(hicache.Error) as e:  # the library's own check
            hicache.Device(self.pool, [bad])
        self.assertEqual(e.exception.errno, errno.EINVAL)
        self.assertIn("slots", e.exception.strerror)
        dev = hicache.Device(self.pool, [self.comp()])
        pages, _ = self.pool.reserve(hicache.key_chain(range(self.T), self.T))
        with self.assertRaises(hicache.Error) as e:
            dev.store(pages, [0, 1, 2])
        self.assertIn("3 slots, the transfer needs 4", e.exception.strerror)
        with self.assertRaises(hicache.Error) as e:  # a slot past the pool of slots
            dev.store(pages, [0, 1, 2, self.SLOTS])
        self.assertEqual(e.exception.errno, errno.ERANGE)
        self.assertIn(str(self.SLOTS), e.exception.strerror)
        self.pool.abort(pages)
        dev.close()
        with self.assertRaises(hicache.Error) as e:
            dev.load([], [])
        self.assertEqual(e.exception.errno, errno.EBADF)

    def test_evict(self):
        keys = hicache.key_chain(range(3 * self.T), self.T)
        pages, _ = self.pool.reserve(keys)
        with hicache.Device(self.pool, [self.comp()]) as dev:
            dev.store(pages, list(range(3 * self.T))).free()
        self.assertEqual(self.pool.page_state(pages[0]), "READY")
        self.assertEqual(self.pool.evict_key(keys[2]), 1)
        self.assertEqual(self.pool.evict_key(keys[2]), 0, "absent now")
        self.assertEqual(self.pool.page_state(pages[2]), "FREE")
        self.assertEqual(self.pool.lookup(keys), pages[:2])
        self.pool.pin(pages[0])
        self.assertEqual(self.pool.evict(), 1, "the pinned page stays")
        self.assertEqual(self.pool.lookup(keys[:1]), pages[:1])
        self.pool.unpin(pages[0])


if __name__ == "__main__":
    print(f"test_python: hicache {hicache.version()} from {_lib._find()}, Python {sys.version.split()[0]}")
    unittest.main(verbosity=2)
