# SPDX-License-Identifier: Apache-2.0
"""test_sglang.py - hicache.sglang, SGLang's HiCache storage backend on a
shared pool, driven as SGLang drives it: built by the "dynamic" factory,
called in batches of 128 pages by a controller (the stand-in in
tests/sglang_standin, written from SGLang's interface), with real torch
host pools of each layout, one process a TP rank, a launcher process a
server.  Every round trip is checked with torch.equal."""
import errno
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest

SRCDIR = os.environ.get("HC_SRCDIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BUILDDIR = os.environ.get("HC_BUILDDIR", ".")
sys.path.insert(0, os.path.join(SRCDIR, "tests", "sglang_standin"))

import torch  # noqa: E402

torch.set_num_threads(1)  # forked ranks must not inherit a thread pool

import hicache  # noqa: E402
import hicache.sglang as hs  # noqa: E402
from sglang.srt.managers.cache_controller import HiCacheController  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import (HiCacheStorageConfig, get_hash_str,  # noqa: E402
                                                  storage_namespace_seed)
from sglang.srt.mem_cache.pool_host import MHATokenToKVPoolHost, MLATokenToKVPoolHost  # noqa: E402
from sglang.srt.observability.metrics_collector import StorageMetrics, log_storage_metrics  # noqa: E402

MODEL = "test/llama-mini"
L, H, D, P = 3, 8, 16, 4  # layers, KV heads, head_dim (bf16), tokens a page
LAYOUTS = ("layer_first", "page_first", "page_first_direct")
RANK_TIMEOUT = 60  # a server whose ranks are not done by then hangs: the test fails
_n = 0


def pool_name():
    """A name hct_sweep (tests/hct.c) reclaims once this process is gone."""
    global _n
    _n += 1
    return f"hctest-{os.getpid()}-sg{_n}"


def create_pool(name, pages=256, head_groups=4, mla=None, tp=2, model=MODEL, dtype="bf16", state=False):
    """A pool for MODEL: K/V of H heads of D bf16, or an MLA latent of mla
    bytes a token, replicated; with state, a state component besides."""
    if mla:
        comps = [hicache.Component.kv("latent", dtype, kv_heads=1, head_bytes=mla, layers=L, replicated=True)]
    else:
        comps = [hicache.Component.kv("kv", dtype, kv_heads=H, head_bytes=D * 2, layers=L)]
    if state:
        comps.insert(0, hicache.Component.state("mamba", "f32", bytes_per_layer=256, layers=1))
    hicache.Pool.create(name, model, page_tokens=P, tp_size=tp, components=comps, capacity_pages=pages,
                        head_groups=0 if mla else head_groups, max_ranks=16, max_tickets=1024)


def config(name, tp_rank, tp_size, mla=False, model=MODEL, v1=True, **extra):
    ec = {"backend_name": "hicache", "module_path": "hicache.sglang", "class_name": "HicacheStorage", "pool": name}
    if v1:
        ec["interface_v1"] = 1
    ec.update(extra)
    return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=True,
                                is_page_first_layout=False, model_name=model, extra_config=ec)


def tokens(seed, npages):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 128000, (npages * P,), generator=g).tolist()


def full_kv(seed, ntok):
    """Every head's K/V of ntok tokens: [2, L, ntok, H, D]."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, L, ntok, H, D, generator=g).to(torch.bfloat16)


def shard(kv, rank, tp):
    h = H // tp
    return kv[:, :, :, rank * h:(rank + 1) * h].contiguous()


def latent(seed, ntok, dim):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(L, ntok, dim, generator=g).to(torch.bfloat16)


def mha_host(tp, layout, slots=1024):
    return MHATokenToKVPoolHost(L, H // tp, D, slots, P, dtype=torch.bfloat16, layout=layout)


def run_server(tp, fn, *args):
    """One server: a launcher process that forks tp rank processes, as
    SGLang's does (so the ranks share a parent), each running fn(rank, tp,
    sync, *args).  sync() is a barrier of the server's ranks, as SGLang's
    collectives are: every rank has joined before any stores, and none
    leaves while another still works.  The ranks' results, in rank order; a
    rank that raised or did not finish fails the test with its traceback."""
    ctx = multiprocessing.get_context("fork")
    up, down = ctx.Pipe(duplex=False)
    barrier = ctx.Barrier(tp)

    def sync():
        barrier.wait(RANK_TIMEOUT)

    def rank_main(rank, w):
        try:
            w.send(("ok", fn(rank, tp, sync, *args)))
        except BaseException:
            w.send(("error", f"rank {rank} of {tp}:\n{traceback.format_exc()}"))
        finally:
            w.close()

    def launcher(w):
        pipes, procs = [], []
        for r in range(tp):
            rr, rw = ctx.Pipe(duplex=False)
            p = ctx.Process(target=rank_main, args=(r, rw))
            p.start()
            rw.close()
            pipes.append(rr)
            procs.append(p)
        out, deadline = [], time.monotonic() + RANK_TIMEOUT
        for r, (rr, p) in enumerate(zip(pipes, procs)):
            if rr.poll(max(0.0, deadline - time.monotonic())):
                out.append(rr.recv())
            else:
                out.append(("error", f"rank {r} of {tp}: no answer in {RANK_TIMEOUT} s (hung)"))
        for p in procs:
            p.join(1)
            if p.is_alive():
                p.kill()
                p.join()
        w.send(out)
        w.close()

    lp = ctx.Process(target=launcher, args=(down,))
    lp.start()
    down.close()
    if not up.poll(RANK_TIMEOUT + 10):
        lp.kill()
        raise AssertionError(f"server of TP {tp}: the launcher did not answer")
    out = up.recv()
    lp.join()
    errs = [m for s, m in out if s != "ok"]
    if errs:
        raise AssertionError("\n".join(errs))
    return [m for _, m in out]


def make_controller(name, rank, tp, host, **kw):
    return HiCacheController(config(name, rank, tp, **kw), host)


def admin(name):
    return hicache.Pool.attach(name, flags=hicache.ATTACH_ADMIN)


def backup_rank(rank, tp, sync, name, layout, seed, npages, engine, slot0=8):
    """A rank stores its shard of npages pages from its host pool."""
    host = mha_host(tp, layout)
    c = make_controller(name, rank, tp, host, engine_id=engine)
    sync()
    kv = shard(full_kv(seed, npages * P), rank, tp)
    slots = torch.arange(slot0, slot0 + npages * P)
    host.put(slots, kv)
    keys = hicache.key_chain(tokens(seed, npages), P)
    done = c.page_set(keys, slots)
    st = c.storage_backend.get_stats()
    sync()
    c.storage_backend.close()
    return done, dict(st), st.backup_pgs


def restore_rank(rank, tp, sync, name, layout, seed, npages, engine, slot0=100):
    """A rank finds npages pages and fetches its shard into zeroed slots."""
    host = mha_host(tp, layout)
    c = make_controller(name, rank, tp, host, engine_id=engine)
    sync()
    keys = hicache.key_chain(tokens(seed, npages), P)
    hit = c.storage_hit_query(keys)
    slots = torch.arange(slot0, slot0 + npages * P)
    got = c.page_get(keys[:hit], slots)
    same = torch.equal(host.take(slots[:got * P]), shard(full_kv(seed, npages * P), rank, tp)[:, :, :got * P])
    rest_zero = int(host.kv_buffer.count_nonzero()) == int(host.take(slots[:got * P]).count_nonzero())
    st = c.storage_backend.get_stats()
    sync()
    c.storage_backend.close()
    return hit, got, same, rest_zero, dict(st)


class Base(unittest.TestCase):
    def setUp(self):
        self.names = []

    def pool(self, **kw):
        name = pool_name()
        create_pool(name, **kw)
        self.names.append(name)
        return name

    def tearDown(self):
        for n in self.names:
            try:
                hicache.Pool.destroy(n, force=True)
            except hicache.Error:
                pass


class RoundTrip(Base):
    def test_tp2_and_tp4_every_layout(self):
        """Backup by a TP=2 and a TP=4 server of each layout, then a restore
        into zeroed host pools: the same bytes, one page per key."""
        for tp in (2, 4):
            for i, layout in enumerate(LAYOUTS):
                with self.subTest(tp=tp, layout=layout):
                    name = self.pool()
                    npages = 130 if layout == "page_first" else 9  # 130: two batches of SGLang's 128
                    seed = 100 * tp + i
                    for done, st, pgs in run_server(tp, backup_rank, name, layout, seed, npages, 5):
                        self.assertEqual(done, npages)
                        self.assertEqual((st["set_pages"], st["set_failed"]), (npages, 0))
                        self.assertEqual(sum(pgs), npages, "StorageMetrics.backup_pgs")
                    with admin(name) as a:
                        self.assertEqual(a.stats()["pages"]["ready"], npages, "one page per key for all ranks")
                    for hit, got, same, rest_zero, st in run_server(tp, restore_rank, name, layout, seed, npages, 6):
                        self.assertEqual((hit, got), (npages, npages))
                        self.assertTrue(same, "restored bytes differ")
                        self.assertTrue(rest_zero, "a byte outside the slots was written")
                        self.assertEqual(st["hit_pool"], npages)

    def test_tp4_reads_what_tp2_stored(self):
        name = self.pool(head_groups=4)
        run_server(2, backup_rank, name, "layer_first", 7, 6, 1)
        for hit, got, same, _, _ in run_server(4, restore_rank, name, "page_first", 7, 6, 2):
            self.assertEqual((hit, got), (6, 6))
            self.assertTrue(same, "a TP=4 rank's heads differ from what the TP=2 ranks stored")

    def test_two_servers_share_pages(self):
        """What one server stored is a hit for another, and storing it again
        copies nothing."""
        name = self.pool()
        run_server(2, backup_rank, name, "page_first_direct", 3, 5, 21)

        def again(rank, tp, sync):
            done, st, _ = backup_rank(rank, tp, sync, name, "layer_first", 3, 5, 22)
            return done, st["set_present"], st["set_pages"], st["device"]["stores"]

        for done, present, stored, copies in run_server(2, again):
            self.assertEqual((done, present, stored, copies), (5, 5, 0, 0))
        for hit, got, same, _, _ in run_server(2, restore_rank, name, "layer_first", 3, 5, 23):
            self.assertTrue(hit == got == 5 and same)

    def test_mla_stored_once(self):
        """An MLA server: only TP rank 0 writes, each page is one envelope of
        the latent, and every rank reads it back."""
        kv_lora, rope = 24, 8
        dim = kv_lora + rope
        for split in (True, False):
            with self.subTest(split=split):
                # split: the latent is the pool's K and V halves; else all K
                name = self.pool(mla=dim if split else dim * 2)

                def rank_fn(rank, tp, sync, layout):
                    host = MLATokenToKVPoolHost(L, kv_lora, rope, 256, P, dtype=torch.bfloat16, layout=layout)
                    c = make_controller(name, rank, tp, host, mla=True, engine_id=40)
                    sync()
                    n = 6
                    data, keys = latent(9, n * P, dim), hicache.key_chain(tokens(9, n), P)
                    slots = torch.arange(16, 16 + n * P)
                    host.put(slots, data)
                    done = c.page_set(keys, slots)
                    stores = c.storage_backend.get_stats()["device"]["stores"]
                    sync()  # SGLang's ranks meet before a later request reads the pages
                    host.kv_buffer.zero_()
                    hit = c.storage_hit_query(keys)
                    slots2 = torch.arange(64, 64 + n * P)
                    got = c.page_get(keys, slots2)
                    same = torch.equal(host.take(slots2), data)
                    sync()
                    c.storage_backend.close()
                    return done, stores, hit, got, same

                out = run_server(2, rank_fn, "page_first")
                self.assertEqual([o[:2] for o in out], [(6, 1), (6, 0)], "rank 0 stores, rank 1 copies nothing")
                for layout in ("layer_first", "page_first_direct"):
                    out += run_server(2, rank_fn, layout)
                for o in out:
                    self.assertEqual(o[2:], (6, 6, True))
                with admin(name) as a:
                    self.assertEqual(a.stats()["pages"]["ready"], 6, "one envelope a page for every rank")


class Keys(Base):
    def test_sglang_chain_meets_key_chain(self):
        toks = tokens(1, 5)
        theirs, prior = [], None
        for i in range(0, len(toks), P):
            prior = get_hash_str(toks[i:i + P], prior)
            theirs.append(prior)
        self.assertEqual(hicache.key_chain(toks, P), theirs)
        seed = storage_namespace_seed("lora-7", "tenant-a")
        theirs, prior = [], seed
        for i in range(0, len(toks), P):
            prior = get_hash_str(toks[i:i + P], prior)
            theirs.append(prior)
        mine = hicache.key_chain(toks, P, seed=hicache.namespace_seed("lora-7", "tenant-a"))
        self.assertEqual(mine, theirs)
        self.assertEqual(hicache.namespace_seed("lora-7", "tenant-a").hex(), seed)
        # a page SGLang's keys stored is found by key_chain's, and the other way
        name = self.pool()
        host = mha_host(1, "layer_first")
        c = make_controller(name, 0, 1, host, engine_id=3)
        try:
            slots = torch.arange(0, 5 * P)
            host.put(slots, full_kv(1, 5 * P))
            self.assertEqual(c.page_set(theirs, slots), 5)
            self.assertEqual(c.storage_hit_query(mine), 5)
        finally:
            c.storage_backend.close()


class Generic(Base):
    def test_flat_pages_without_interface_v1(self):
        """Without interface_v1 SGLang passes flat pages (get_data_page,
        set_from_flat_data_page): the same bytes come back."""
        for layout in LAYOUTS:
            with self.subTest(layout=layout):
                name = self.pool()
                host = MHATokenToKVPoolHost(L, H, D, 256, P, dtype=torch.bfloat16, layout=layout)
                c = make_controller(name, 0, 1, host, v1=False, engine_id=9)
                try:
                    self.assertFalse(c.zero_copy)
                    kv, keys = full_kv(4, 3 * P), hicache.key_chain(tokens(4, 3), P)
                    slots = torch.arange(32, 32 + 3 * P)
                    host.put(slots, kv)
                    self.assertEqual(c.page_set(keys, slots), 3)
                    host.kv_buffer.zero_()
                    self.assertEqual(c.storage_hit_query(keys), 3)
                    self.assertEqual(c.page_get(keys, slots), 3)
                    self.assertTrue(torch.equal(host.take(slots), kv))
                    s = c.storage_backend
                    self.assertTrue(s.exists(keys[0]))
                    self.assertFalse(s.exists(hicache.key_chain(tokens(5, 1), P)[0]))
                    flat = s.get(keys[1])
                    self.assertTrue(torch.equal(flat, host.get_data_page(32 + P)))
                    self.assertIsNone(s.get(hicache.key_chain(tokens(5, 1), P)[0]))
                finally:
                    c.storage_backend.close()


def wait_for(what, pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"{what}: not within {timeout} s")


def pool_stats(name):
    with admin(name) as a:
        return a.stats()


def counters(name, *cs):
    c = pool_stats(name)["counters"]
    return tuple(c[x] for x in cs)


class Service(Base):
    """With hicached and the file backend behind the pool."""

    def setUp(self):
        super().setUp()
        self.name = self.pool()
        self.dir = tempfile.mkdtemp(prefix="hctest-sglang-")
        self.svc = subprocess.Popen([os.path.join(BUILDDIR, "tools", "hicached"), "--pool", self.name, "--backend",
                                     f"file:dir={self.dir}", "--log-level", "warn", "--sealed", "false"])
        with admin(self.name) as a:
            wait_for("hicached serves the pool", a.service_live)

    def tearDown(self):
        if self.svc.poll() is None:
            self.svc.terminate()
        self.svc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)
        super().tearDown()

    def store_then_evict(self, seed, npages):
        run_server(2, backup_rank, self.name, "layer_first", seed, npages, 31)
        wait_for("write_through writes every page", lambda: counters(self.name, "l3_backup_pages")[0] >= npages)
        with hicache.Pool.attach(self.name) as a:  # evicting takes a rank slot
            self.assertEqual(a.evict(), npages)
            self.assertEqual(a.stats()["pages"]["ready"], 0)

    def test_evicted_pages_come_back_from_l3(self):
        self.store_then_evict(11, 12)
        for hit, got, same, _, st in run_server(2, restore_rank, self.name, "page_first", 11, 12, 32):
            self.assertEqual((hit, got), (12, 12))
            self.assertTrue(same, "the pages from L3 differ")
            self.assertEqual((st["hit_pool"], st["hit_l3"]), (0, 12))
        self.assertEqual(counters(self.name, "l3_prefetch_pages"), (12,), "each page read from L3 once for both ranks")

    def test_dead_service(self):
        """A service killed: pages only in L3 are misses, at once, with a log
        line; the pool still serves what it holds."""
        self.store_then_evict(12, 4)
        self.svc.send_signal(signal.SIGKILL)
        self.svc.wait(10)
        host = mha_host(1, "layer_first")
        c = make_controller(self.name, 0, 1, host, engine_id=33)
        s = c.storage_backend
        try:
            keys = hicache.key_chain(tokens(12, 4), P)
            with self.assertLogs("hicache.sglang", logging.WARNING) as logs:
                self.assertEqual(s.batch_exists(keys), 0)
            self.assertIn("has no service (hicached)", "\n".join(logs.output))
            self.assertEqual(s.batch_get_v1(keys, torch.arange(4 * P)), [False] * 4)
            self.assertFalse(s.exists(keys[0]))
            other = hicache.key_chain(tokens(13, 2), P)
            host.put(torch.arange(2 * P), shard(full_kv(13, 2 * P), 0, 1))
            self.assertEqual(s.batch_set_v1(other, torch.arange(2 * P)), [True, True])
            self.assertEqual(s.batch_exists(other), 2)
            self.assertEqual(s.batch_get_v1(other, torch.arange(8 * P, 10 * P)), [True, True])
        finally:
            s.close()


def sealed_rank(rank, tp, sync, name, sock, seed, npages):
    """A rank of a server on a sealed pool: it stores its shard and finds
    every page, the pool handed over hicached's socket."""
    host = mha_host(tp, "layer_first")
    c = make_controller(name, rank, tp, host, engine_id=41, pool_socket=sock)
    sync()
    slots = torch.arange(8, 8 + npages * P)
    host.put(slots, shard(full_kv(seed, npages * P), rank, tp))
    keys = hicache.key_chain(tokens(seed, npages), P)
    done = c.page_set(keys, slots)
    sync()
    hit = c.storage_hit_query(keys)
    path = c.storage_backend.pool.info()["path"]
    sync()
    c.storage_backend.close()
    return done, hit, path


class SealedService(unittest.TestCase):
    """hicached's default, a sealed pool: the ranks get it with pool_socket."""

    def test_ranks_attach_by_socket(self):
        name, tmp = pool_name(), tempfile.mkdtemp(prefix="hctest-sglang-")
        sock, l3 = os.path.join(tmp, "pool.sock"), os.path.join(tmp, "l3")
        os.mkdir(l3)
        svc = subprocess.Popen([os.path.join(BUILDDIR, "tools", "hicached"), "--pool", name, "--backend",
                                f"file:dir={l3}", "--log-level", "warn", "--model", MODEL, "--page-tokens", str(P),
                                "--tp", "2", "--kv", f"kv,bf16,{H},{D * 2},{L}", "--pages", "64", "--head-groups",
                                "4", "--max-ranks", "16", "--max-tickets", "1024", "--socket", sock])
        try:
            wait_for("hicached listens", lambda: os.path.exists(sock) or svc.poll() is not None)
            self.assertIsNone(svc.poll(), "hicached exited")
            for done, hit, path in run_server(2, sealed_rank, name, sock, 21, 6):
                self.assertEqual((done, hit), (6, 6))
                self.assertEqual(path, f"memfd:hicache.{name}")
            self.assertFalse(os.path.exists(f"/dev/shm/hicache.{name}"))
        finally:
            svc.terminate()
            self.assertEqual(svc.wait(30), 0)
            shutil.rmtree(tmp, ignore_errors=True)


class Errors(Base):
    def backend(self, name, tp=1, rank=0, **kw):
        return hs.HicacheStorage(config(name, rank, tp, **kw), {})

    def refused(self, storage, host, *words):
        with self.assertRaises(hicache.Error) as e:
            storage.register_mem_pool_host(host)
        self.assertEqual(e.exception.errno, errno.EINVAL)
        for w in words:
            self.assertIn(w, e.exception.strerror)

    def test_bad_geometry(self):
        name = self.pool()
        s = self.backend(name, tp=2)
        try:
            self.refused(s, MHATokenToKVPoolHost(L, H // 2, D, 64, P, dtype=torch.float16), "dtype", "torch.float16",
                         "bf16")
            self.refused(s, MHATokenToKVPoolHost(L, 3, D, 64, P, dtype=torch.bfloat16), "3 KV heads a rank",
                         "8 KV heads", "4 a rank")
            self.refused(s, MHATokenToKVPoolHost(L, H // 2, 8, 64, P, dtype=torch.bfloat16), "of 8 x torch.bfloat16",
                         "of 32 bytes")
            self.refused(s, MHATokenToKVPoolHost(L + 1, H // 2, D, 64, P, dtype=torch.bfloat16), "layers", "4", "3")
            self.refused(s, MHATokenToKVPoolHost(L, H // 2, D, 64, 2 * P, dtype=torch.bfloat16), "page size",
                         "8 tokens a page", "4")
            self.refused(s, MHATokenToKVPoolHost(L, H // 2, D, 64, P, dtype=torch.bfloat16, layout="page_head"),
                         "page_head", "--hicache-mem-layout")
            self.assertIsNone(s.dev, "a refused host pool is not registered")
        finally:
            s.close()
        s = self.backend(name, mla=True)  # an MLA model on a pool of sharded heads
        try:
            self.refused(s, MLATokenToKVPoolHost(L, 24, 8, 64, P, dtype=torch.bfloat16), "MLA", "sharded",
                         ",replicated")
        finally:
            s.close()
        s = self.backend(name, model="test/other-model")
        try:
            self.refused(s, mha_host(1, "layer_first"), "'test/other-model'", f"'{MODEL}'", "check_model")
        finally:
            s.close()
        s = self.backend(name, model="test/other-model", check_model=False)
        try:
            s.register_mem_pool_host(mha_host(1, "layer_first"))  # the names differ, the geometry agrees
        finally:
            s.close()
        mla = self.pool(mla=64)
        s = self.backend(mla, tp=2)  # an MHA model on an MLA pool
        try:
            self.refused(s, mha_host(2, "layer_first"), "sharding", "replicated")
        finally:
            s.close()
        s = self.backend(mla, mla=True)
        try:
            self.refused(s, MLATokenToKVPoolHost(L, 40, 8, 64, P, dtype=torch.bfloat16), "latent", "96 bytes a token",
                         "64 bytes")
        finally:
            s.close()

    def test_bad_config(self):
        name = self.pool()
        cases = [({"pool": ""}, errno.EINVAL, "has no 'pool'"),
                 ({"pool": pool_name()}, errno.ENOENT, "pool"),
                 ({"prefetch_deadline_ms": "soon"}, errno.EINVAL, "'prefetch_deadline_ms' is 'soon'"),
                 ({"engine_id": 70000}, errno.EINVAL, "'engine_id' is 70000: give an integer from 0 to 65535"),
                 ({"clear": "all"}, errno.EINVAL, "'clear' is 'all'"),
                 ({"check_model": "maybe"}, errno.EINVAL, "'check_model' is 'maybe'")]
        for extra, err, words in cases:
            with self.subTest(extra=extra):
                with self.assertRaises(hicache.Error) as e:
                    self.backend(name, **extra)
                self.assertEqual(e.exception.errno, err)
                self.assertIn(words, e.exception.strerror)
        cfg = config(name, 0, 1)
        cfg.pp_size = 2
        with self.assertRaises(hicache.Error) as e:
            hs.HicacheStorage(cfg, {})
        self.assertIn("{pp_rank}", e.exception.strerror)
        cfg = config(name, 0, 1)
        cfg.attn_cp_size = 2
        with self.assertRaises(hicache.Error) as e:
            hs.HicacheStorage(cfg, {})
        self.assertIn("attn_cp_size", e.exception.strerror)
        a = self.backend(name, engine_id=9)
        try:
            with self.assertRaises(hicache.Error) as e:
                self.backend(name, engine_id=9)
            self.assertEqual(e.exception.errno, errno.EEXIST)
            self.assertIn("give each server its own 'engine_id'", e.exception.strerror)
        finally:
            a.close()
        with self.assertLogs("hicache.sglang", logging.WARNING) as logs:
            self.backend(name, engine_id=9, prefetch_dedline_ms=5).close()
        self.assertIn("prefetch_dedline_ms", "\n".join(logs.output))

    def test_close_while_called(self):
        """close() while SGLang's threads still call: it waits for the calls
        running, the later ones are False, and nothing raises or crashes."""
        name = self.pool()
        for _ in range(8):
            host = mha_host(1, "layer_first")
            c = make_controller(name, 0, 1, host, engine_id=18)
            s = c.storage_backend
            keys = hicache.key_chain(tokens(60, 4), P)
            host.put(torch.arange(4 * P), full_kv(60, 4 * P))
            s.batch_set_v1(keys, torch.arange(4 * P))
            errors, go = [], threading.Event()

            def loop(fn):
                go.wait()
                try:
                    for _ in range(300):
                        r = fn()
                        if not isinstance(r, (int, list)):
                            errors.append(f"returned {r!r}")
                except Exception:
                    errors.append(traceback.format_exc())

            ts = [threading.Thread(target=loop, args=(f,)) for f in (
                lambda: s.batch_get_v1(keys, torch.arange(8 * P, 12 * P)),
                lambda: s.batch_set_v1(keys, torch.arange(4 * P)),
                lambda: s.batch_exists(keys))]
            for t in ts:
                t.start()
            go.set()
            time.sleep(0.01)
            with self.assertLogs("hicache.sglang", logging.WARNING):
                s.close()
                for t in ts:
                    t.join(RANK_TIMEOUT)
            self.assertEqual(errors, [])
            self.assertEqual(s.batch_get_v1(keys, torch.arange(4 * P)), [False] * 4)
            self.assertEqual(s.get_stats()["engine_id"], 18, "figures still, after close")

    def test_collected_without_close(self):
        """A backend nobody closes is collected like any object, and its rank
        slot and engine membership go with it."""
        import gc
        name = self.pool()
        s = self.backend(name, engine_id=19)
        s.register_mem_pool_host(mha_host(1, "layer_first"))
        del s
        gc.collect()
        self.backend(name, engine_id=19).close()  # EEXIST if the first still held TP rank 0

    def test_flat_value_not_a_tensor(self):
        name = self.pool()
        s = self.backend(name, engine_id=20)
        try:
            s.register_mem_pool_host(mha_host(1, "layer_first"))
            with self.assertLogs("hicache.sglang", logging.WARNING) as logs:
                self.assertFalse(s.batch_set(hicache.key_chain(tokens(61, 2), P), ["not a page", None]))
            self.assertIn("batch_set of 2 pages", logs.output[0])
            with admin(name) as a:
                self.assertEqual(a.stats()["pages"]["reserved"], 0, "the reservation was given back")
        finally:
            s.close()

    def test_import_without_sglang(self):
        env = dict(os.environ, PYTHONPATH=os.path.join(SRCDIR, "python"))
        r = subprocess.run([sys.executable, "-c", "import hicache.sglang"], env=env, capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ImportError: hicache.sglang is SGLang's storage backend", r.stderr)
        self.assertIn("install SGLang", r.stderr)

    def test_full_pool(self):
        """Every page held: a backup is False and a log line, never a wait;
        once the holds go, the pool evicts for it."""
        name = self.pool(pages=8)
        host = mha_host(1, "layer_first")
        c = make_controller(name, 0, 1, host, engine_id=4)
        s = c.storage_backend
        try:
            held, new = hicache.key_chain(tokens(20, 8), P), hicache.key_chain(tokens(21, 3), P)
            host.put(torch.arange(11 * P), shard(full_kv(20, 11 * P), 0, 1))
            self.assertEqual(s.batch_set_v1(held, torch.arange(8 * P)), [True] * 8)
            self.assertEqual(s.batch_exists(held), 8)  # held for a batch_get_v1 that does not come
            with self.assertLogs("hicache.sglang", logging.WARNING) as logs:
                self.assertEqual(s.batch_set_v1(new, torch.arange(8 * P, 11 * P)), [False] * 3)
            self.assertIn("the pool is full", "\n".join(logs.output))
            self.assertEqual(s.get_stats()["set_failed"], 3)
            s.clear()
            self.assertEqual(s.batch_set_v1(new, torch.arange(8 * P, 11 * P)), [True] * 3)
            self.assertEqual(s.batch_exists(new), 3)
        finally:
            s.close()

    def test_misuse(self):
        name = self.pool()
        s = self.backend(name)
        keys = hicache.key_chain(tokens(30, 2), P)
        with self.assertLogs("hicache.sglang", logging.WARNING) as logs:
            self.assertEqual(s.batch_get_v1(keys, torch.arange(2 * P)), [False, False])
        self.assertIn("before register_mem_pool_host", logs.output[0])
        host = mha_host(1, "layer_first")
        s.register_mem_pool_host(host)
        with self.assertLogs("hicache.sglang", logging.WARNING) as logs:
            self.assertEqual(s.batch_set_v1(keys, torch.arange(P)), [False, False])  # a page's slots short
        self.assertIn("host_indices has 4 slots, 2 pages need 8", logs.output[0])
        with admin(name) as a:
            st = a.stats()["pages"]
            self.assertEqual((st["reserved"], st["ready"]), (0, 0), "the reservation was given back")
        self.assertEqual(s.batch_set_v1(keys, torch.arange(2 * P)), [True, True])
        self.assertEqual(s.batch_exists(keys), 2)
        with self.assertLogs("hicache.sglang", logging.WARNING) as logs:
            self.assertEqual(s.batch_get_v1(keys, torch.arange(P)), [False, False])
        self.assertIn("host_indices has 4 slots", logs.output[0])
        self.assertEqual(s.batch_get_v1(keys, torch.arange(2 * P)), [True, True], "the holds were let go")
        other = hicache.key_chain(tokens(31, 2), P)
        with self.assertLogs("hicache.sglang", logging.WARNING) as logs:
            self.assertFalse(s.batch_set(other, [torch.zeros(3)] * 2))
        self.assertIn(f"a flat page has {2 * L * P * H * D} elements, the value of key 0 has 3", logs.output[0])
        with admin(name) as a:
            self.assertEqual(a.stats()["pages"]["reserved"], 0, "the reservation was given back")
        s.close()
        with self.assertLogs("hicache.sglang", logging.WARNING) as logs:
            self.assertEqual(s.batch_exists(keys), 0)
        self.assertIn("after close()", logs.output[0])
        self.assertEqual(s.batch_set_v1(keys, torch.arange(2 * P)), [False, False])


class Behaviour(Base):
    def test_stats_are_storage_metrics(self):
        name = self.pool()
        host = mha_host(1, "page_first")
        c = make_controller(name, 0, 1, host, engine_id=2)
        s = c.storage_backend
        try:
            keys = hicache.key_chain(tokens(40, 5), P)
            host.put(torch.arange(5 * P), shard(full_kv(40, 5 * P), 0, 1))
            c.page_set(keys[:3], torch.arange(3 * P))
            self.assertEqual(c.storage_hit_query(keys), 3)
            c.page_get(keys[:3], torch.arange(8 * P, 11 * P))
            st = s.get_stats()
            self.assertIsInstance(st, StorageMetrics)
            self.assertEqual(log_storage_metrics(st), (3, 3))
            self.assertEqual((st["hit_pool"], st["hit_l3"], st["miss"]), (3, 0, 2))
            self.assertEqual((st["get_pages"], st["set_pages"]), (3, 3))
            self.assertEqual(st["get_bytes"], 3 * 2 * L * P * H * D * 2)
            self.assertEqual(st["latency_s"]["get"]["calls"], 1)
            self.assertGreater(st["latency_s"]["set"]["max"], 0.0)
            self.assertEqual(st["device"]["loads"], 1)
            self.assertEqual(log_storage_metrics(s.get_stats()), (0, 0), "the lists are since the last call")
        finally:
            s.close()

    def test_clear(self):
        name = self.pool()
        keys = hicache.key_chain(tokens(41, 4), P)
        for mode, left in (("local", 4), ("pool", 0)):
            host = mha_host(1, "layer_first")
            c = make_controller(name, 0, 1, host, engine_id=2, clear=mode)
            s = c.storage_backend
            try:
                host.put(torch.arange(4 * P), shard(full_kv(41, 4 * P), 0, 1))
                self.assertEqual(c.page_set(keys, torch.arange(4 * P)), 4)
                self.assertEqual(s.batch_exists(keys), 4)
                s.clear()
                with admin(name) as a:
                    self.assertEqual(a.stats()["pages"]["ready"], left, f"clear '{mode}'")
            finally:
                s.close()

    def test_backup_prefetch_and_io_threads(self):
        """SGLang's threads call each rank's backend at once: the backup
        thread stores batches, the prefetch thread asks for each batch once
        it is stored, the IO thread fetches what it found; reads run while
        later batches are written.  TP 2, every byte checked."""
        name = self.pool(pages=512)
        nb, per = 24, 4

        def rank_fn(rank, tp, sync):
            import queue
            host = mha_host(tp, "page_first", slots=2 * nb * per * P)
            c = make_controller(name, rank, tp, host, engine_id=6)
            kv = shard(full_kv(42, nb * per * P), rank, tp)
            host.put(torch.arange(nb * per * P), kv)
            keys = [hicache.key_chain(tokens(1000 + i, per), P) for i in range(nb)]
            q1, q2, errors, read = queue.Queue(), queue.Queue(), [], [0]
            sync()

            def backup():
                for i in range(nb):
                    if c.page_set(keys[i], torch.arange(i * per * P, (i + 1) * per * P)) != per:
                        errors.append(f"backup {i}")
                    q1.put(i)
                q1.put(None)

            def prefetch():
                while (i := q1.get()) is not None:
                    q2.put((i, c.storage_hit_query(keys[i])))
                q2.put(None)

            def io():
                while (item := q2.get()) is not None:
                    i, hit = item
                    base = (nb + i) * per * P
                    dst = torch.arange(base, base + hit * P)
                    got = c.page_get(keys[i][:hit], dst)
                    if got != hit or not torch.equal(host.take(dst[:got * P]),
                                                     kv[:, :, i * per * P:i * per * P + got * P]):
                        errors.append(f"io {i}: {got} of {hit} pages")
                    read[0] += got

            ts = [threading.Thread(target=f) for f in (backup, prefetch, io)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(RANK_TIMEOUT)
            hung = [t.name for t in ts if t.is_alive()]
            sync()
            full = sum(c.storage_hit_query(k) for k in keys)
            sync()
            c.storage_backend.close()
            return errors, hung, read[0], full

        for errors, hung, read, full in run_server(2, rank_fn):
            self.assertEqual((errors, hung), ([], []))
            self.assertEqual(full, nb * per, "every batch stored by both ranks")

    def test_engine_id_derived(self):
        """Without engine_id, the ranks of one server (one parent) agree, and
        servers under other parents differ."""
        name = self.pool()

        def rank_fn(rank, tp, sync):
            host = mha_host(tp, "layer_first")
            c = make_controller(name, rank, tp, host)
            sync()
            c.storage_backend.close()
            return c.storage_backend.engine_id, os.getppid()

        a, b = run_server(2, rank_fn), run_server(2, rank_fn)
        self.assertEqual(a[0][0], a[1][0])
        self.assertEqual(b[0][0], b[1][0])
        self.assertNotEqual(a[0][1], b[0][1], "two launchers")
        self.assertEqual(a[0][0], hs.derive_engine_id(a[0][1], 0, 0, MODEL))
        ids = {hs.derive_engine_id(pid, 0, 0, MODEL) for pid in range(1000, 1064)}
        self.assertGreater(len(ids), 60, "64 parents, as many engine ids but for a rare collision")
        self.assertNotEqual(hs.derive_engine_id(1000, 0), hs.derive_engine_id(1000, 1), "DP ranks differ")


class Agreement(Base):
    """How the ranks of a server stay in step, and what a rank that falls
    out of step, or fails, leaves behind."""

    def test_a_rank_that_fails_its_copy(self):
        """Rank 1's copy fails after rank 0 reserved and wrote: rank 0 gives
        the pages up once the others' shards cannot come any more, and the
        keys can be stored again."""
        name = self.pool()

        def rank_fn(rank, tp, sync):
            host = mha_host(tp, "layer_first")
            c = make_controller(name, rank, tp, host, engine_id=12, ticket_timeout_ms=300)
            s = c.storage_backend
            keys = hicache.key_chain(tokens(50, 3), P)
            host.put(torch.arange(3 * P), shard(full_kv(50, 3 * P), rank, tp))
            sync()
            first = s.batch_set_v1(keys, torch.arange(3 * P)) if rank == 0 else None
            sync()
            if rank == 1:  # a page's slots short: this rank's copy fails
                first = s.batch_set_v1(keys, torch.arange(P))
            sync()
            reserved, given_up = None, 0
            if rank == 0:
                wait_for("rank 0 gives up the pages rank 1 never completed",
                         lambda: pool_stats(name)["pages"]["reserved"] == 0, timeout=10)
                reserved, given_up = pool_stats(name)["pages"]["reserved"], s.get_stats()["given_up"]
            sync()
            again = s.batch_set_v1(keys, torch.arange(3 * P))
            sync()
            hit = s.batch_exists(keys)
            sync()
            s.close()
            return first, reserved, given_up, again, hit

        (f0, r0, g0, a0, h0), (f1, _, g1, a1, h1) = run_server(2, rank_fn)
        self.assertEqual((f0, f1), ([True] * 3, [False] * 3))
        self.assertEqual((r0, g0, g1), (0, 3, 0), "rank 0 gave its 3 reserved pages up")
        self.assertEqual((a0, a1, h0, h1), ([True] * 3, [True] * 3, 3, 3))

    def test_out_of_step_and_back(self):
        """Rank 0 makes a call rank 1 does not (the same first key, other
        keys): rank 1 finds that name used, moves on, and the ranks share
        every ticket after."""
        name = self.pool()
        keys = hicache.key_chain(tokens(51, 4), P)

        def rank_fn(rank, tp, sync):
            host = mha_host(tp, "layer_first")
            c = make_controller(name, rank, tp, host, engine_id=13)
            s = c.storage_backend
            host.put(torch.arange(4 * P), shard(full_kv(51, 4 * P), rank, tp))
            sync()
            s.batch_set_v1(keys, torch.arange(4 * P))
            sync()
            if rank == 0:
                s.batch_exists(keys[:2])  # a call of its own
            sync()
            hits, shared = [], []
            for _ in range(5):
                before = counters(name, "tickets_opened", "tickets_joined")
                sync()
                hits.append(s.batch_exists(keys))
                sync()
                after = counters(name, "tickets_opened", "tickets_joined")
                shared.append((after[0] - before[0], after[1] - before[1]))
                sync()
            st = s.get_stats()
            s.close()
            return hits, shared, st["steps_skipped"], st["unnamed"]

        (h0, sh0, sk0, u0), (h1, sh1, sk1, u1) = run_server(2, rank_fn)
        self.assertEqual((h0, h1), ([4] * 5, [4] * 5))
        self.assertEqual((sk0, sk1, u0, u1), (0, 1, 0, 0), "rank 1 moved one step on; nobody fell back")
        self.assertEqual(sh0, [(1, 1)] * 5, "each call: one ticket opened, the other rank joined it")

    def test_holds_of_requests_sharing_a_prefix(self):
        """Two prefetches whose keys share their first page: each get finds
        its own hold; a get with no hold looks up."""
        name = self.pool()
        host = mha_host(1, "layer_first")
        c = make_controller(name, 0, 1, host, engine_id=14)
        s = c.storage_backend
        try:
            toks = tokens(52, 4)
            a = hicache.key_chain(toks, P)
            b = hicache.key_chain(toks[:P] + tokens(53, 3), P)
            kv_a, kv_b = full_kv(52, 4 * P), full_kv(53, 4 * P)
            kv_b[:, :, :P] = kv_a[:, :, :P]  # the shared first page
            host.put(torch.arange(4 * P), kv_a)
            host.put(torch.arange(4 * P, 8 * P), kv_b)
            self.assertEqual(s.batch_set_v1(a, torch.arange(4 * P)), [True] * 4)
            self.assertEqual(s.batch_set_v1(b, torch.arange(4 * P, 8 * P)), [True, True, True, True])
            self.assertEqual((s.batch_exists(a), s.batch_exists(b)), (4, 4))
            host.kv_buffer.zero_()
            self.assertEqual(s.batch_get_v1(a, torch.arange(16 * P, 20 * P)), [True] * 4)
            self.assertEqual(s.batch_get_v1(b, torch.arange(20 * P, 24 * P)), [True] * 4)
            self.assertTrue(torch.equal(host.take(torch.arange(16 * P, 20 * P)), kv_a))
            self.assertTrue(torch.equal(host.take(torch.arange(20 * P, 24 * P)), kv_b))
            self.assertEqual(s.batch_get_v1(a[1:], torch.arange(8 * P, 11 * P)), [True] * 3, "no hold: a lookup")
            self.assertEqual(len(s.held), 0)
        finally:
            s.close()

    def test_dropped_prefetch_lets_go_when_idle(self):
        """SGLang drops a prefetch it asked about (below its threshold): the
        pages it held are let go after hold_ms, with no call to notice."""
        name = self.pool()
        host = mha_host(1, "layer_first")
        c = make_controller(name, 0, 1, host, engine_id=15, hold_ms=200)
        s = c.storage_backend
        try:
            keys = hicache.key_chain(tokens(54, 3), P)
            host.put(torch.arange(3 * P), full_kv(54, 3 * P))
            s.batch_set_v1(keys, torch.arange(3 * P))
            self.assertEqual(s.batch_exists(keys), 3)
            with hicache.Pool.attach(name) as other:
                self.assertEqual(other.evict(), 0, "held for the get")
                wait_for("the holds let go", lambda: other.evict() == 3, timeout=5)
        finally:
            s.close()

    def test_pool_with_another_component(self):
        """A pool that also has a state component: pages hold the K/V
        component alone, and are found and read by it."""
        name = self.pool(state=True)
        for hit, got, same, _, st in (run_server(2, backup_rank, name, "page_first", 55, 5, 16) and
                                      run_server(2, restore_rank, name, "layer_first", 55, 5, 17)):
            self.assertEqual((hit, got, same), (5, 5, True))
        with admin(name) as a:
            self.assertEqual(a.stats()["pages"]["ready"], 5)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(process)d %(name)s %(levelname)s %(message)s")
    print(f"test_sglang: hicache {hicache.version()}, torch {torch.__version__}, Python {sys.version.split()[0]}")
    unittest.main(verbosity=2)
