# SPDX-License-Identifier: Apache-2.0
"""bench-sglang.py - hicache.sglang's zero-copy calls against torch moving
the same bytes between the same host tensors, in the same run.

A Llama-3-8B server at TP 2 (32 layers, 8 KV heads of head_dim 128, bf16;
4 heads a rank) with 64-token pages: 4 MiB of each rank's shard a page.
Both rank processes run at once, as SGLang's do, on a pool with no
service.  Each repetition times, on every rank:

  batch_set_v1   128 new pages from the host pool's slots into the pool
                 (reservation ticket, the copy in C, the commit);
  batch_get_v1   the same 128 pages back into other slots (after a
                 batch_exists, as SGLang's prefetch thread does first);
  torch set      index_select(out=) of the same slots into a contiguous
                 tensor of 128 pages: one gather, as the store is;
  torch get      index_copy_ of that tensor into the other slots: one
                 scatter, as the load is.

A row is the median over --reps of the slower rank (the server waits for
it); the ratio is ours divided by torch's, and the target is 0.8.  torch
runs with one thread a rank, as the device path copies on the calling
thread.  Then the cost of a call of one page: for a page of 2 KiB, where
the copy is nothing, and for a Llama page, each against the device path's
own copy of that page (hc_dev_store/hc_dev_load with HC_XFER_SYNC), so
the difference is what the call adds: Python, the tickets, the holds.
"""
import argparse
import multiprocessing
import os
import statistics
import sys
import time

SRCDIR = os.environ.get("HC_SRCDIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
try:
    import sglang  # noqa: F401  (a real SGLang, when this Python has it)
except ImportError:
    sys.path.insert(0, os.path.join(SRCDIR, "tests", "sglang_standin"))

import torch  # noqa: E402

torch.set_num_threads(1)
if os.environ.get("HC_BENCH_LOG"):
    import logging
    logging.basicConfig(level=logging.WARNING)

import hicache  # noqa: E402
from hicache.sglang import HicacheStorage  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402

try:
    from sglang.srt.mem_cache.memory_pool_host import MHATokenToKVPoolHost  # noqa: E402
except ImportError:
    from sglang.srt.mem_cache.pool_host import MHATokenToKVPoolHost  # noqa: E402

TP = 2
LAYOUTS = ("layer_first", "page_first", "page_first_direct")
LLAMA = dict(model="meta-llama/Meta-Llama-3-8B", layers=32, heads=8, head_dim=128)
TINY = dict(model="bench/tiny", layers=1, heads=2, head_dim=32)  # 2 KiB of a rank's shard a 16-token page


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


class Rank:
    """One rank: its backend on the pool, and a host pool of a layout."""

    def __init__(self, rank, pool, geo, P, engine):
        self.rank, self.geo, self.P = rank, geo, P
        cfg = HiCacheStorageConfig(tp_rank=rank, tp_size=TP, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                   attn_cp_size=1, is_mla_model=False, enable_storage_metrics=False,
                                   is_page_first_layout=False, model_name=geo["model"],
                                   extra_config={"pool": pool, "engine_id": engine})
        self.s = HicacheStorage(cfg, {})
        self.seq = 0

    def host(self, layout, slots):
        h = MHATokenToKVPoolHost(self.geo["layers"], self.geo["heads"] // TP, self.geo["head_dim"], slots, self.P,
                                 dtype=torch.bfloat16, layout=layout)
        h.kv_buffer.normal_()  # every byte touched before the clock runs
        self.s.register_mem_pool_host(h)
        return h

    def keys(self, n, own=False):
        """Keys of n new pages: the same in every rank, or this rank's own."""
        self.seq += 1
        base = (self.seq * 1000003 + (self.rank + 1) * 7919 * own) % 2**31
        return hicache.key_chain(range(base, base + n * self.P), self.P)


def throughput(rank, args, barrier, out):
    P, n = args.page_tokens, args.pages
    r = Rank(rank, args.pool, LLAMA, P, 1)
    rows = []
    try:
        for layout in args.layouts:
            host = r.host(layout, 2 * n * P)
            # the dimension of kv_buffer that indexes slots (page_first_direct: pages of P slots)
            dim = {"layer_first": 2, "page_first": 1, "page_first_direct": 1}[layout]
            unit = P if layout == "page_first_direct" else 1
            src_idx, dst_idx = torch.arange(0, n * P // unit), torch.arange(n * P // unit, 2 * n * P // unit)
            buf = torch.empty_like(host.kv_buffer.index_select(dim, src_idx))
            src, dst = torch.arange(0, n * P), torch.arange(n * P, 2 * n * P)
            got = {"set": [], "get": [], "tset": [], "tget": []}
            for rep in range(args.reps + 1):  # the first is a warm-up
                keys = r.keys(n)
                barrier.wait()
                ts, res = timed(lambda: r.s.batch_set_v1(keys, src))
                assert all(res), f"rank {rank}: batch_set_v1 stored {sum(res)} of {n}"
                barrier.wait()
                tg, res = timed(lambda: (r.s.batch_exists(keys), r.s.batch_get_v1(keys, dst))[1])
                assert all(res), f"rank {rank}: batch_get_v1 fetched {sum(res)} of {n}"
                barrier.wait()
                tts, _ = timed(lambda: torch.index_select(host.kv_buffer, dim, src_idx, out=buf))
                ttg, _ = timed(lambda: host.kv_buffer.index_copy_(dim, dst_idx, buf))
                if rep:
                    for k, v in (("set", ts), ("get", tg), ("tset", tts), ("tget", ttg)):
                        got[k].append(v)
                barrier.wait()
                if rank == 0:  # make room: the pool holds one batch and a spare
                    r.s.pool.evict()
                barrier.wait()
            rows.append((layout, {k: statistics.median(v) for k, v in got.items()}))
        out.send((rows, r.s.page_bytes))
    finally:
        r.s.close()


def fixed_cost(rank, args, barrier, out, pool, geo, P):
    """calls calls of one page back to back on both ranks at once, as a
    server makes them, against as many of the device path's own copies."""
    r = Rank(rank, pool, geo, P, 2)
    n = args.calls
    try:
        r.host("page_first_direct", 4 * P)
        src, dst = torch.arange(P), torch.arange(2 * P, 3 * P)
        keys = [r.keys(1) for _ in range(n)]
        mine, _ = r.s.pool.reserve(r.keys(32, own=True))  # pages of this rank's to copy into
        r.s.batch_set_v1(r.keys(1), src)  # warm-up
        barrier.wait()
        t_set, res = timed(lambda: [r.s.batch_set_v1(k, src) for k in keys])
        assert all(x == [True] for x in res), f"rank {rank}: batch_set_v1 failed: {[i for i, x in enumerate(res) if x != [True]][:5]}"
        barrier.wait()
        t_get, res = timed(lambda: [(r.s.batch_exists(k), r.s.batch_get_v1(k, dst))[1] for k in keys])
        assert all(x == [True] for x in res), f"rank {rank}: batch_get_v1 failed: {[(i, x) for i, x in enumerate(res) if x != [True]][:5]} {r.s.get_stats()}"
        ready = [r.s.pool.lookup(k, pin=True)[0] for k in keys]
        barrier.wait()
        t_store, _ = timed(lambda: [r.s.dev.store([mine[i % 32]], src, commit=False, sync=True).free()
                                    for i in range(n)])
        barrier.wait()
        t_load, _ = timed(lambda: [r.s.dev.load([p], dst, sync=True).free() for p in ready])
        for p in ready:
            r.s.pool.unpin(p)
        r.s.pool.abort(mine)
        out.send(({"set": t_set / n, "get": t_get / n, "store": t_store / n, "load": t_load / n}, r.s.page_bytes))
    finally:
        r.s.close()


def run(target, *args):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(TP, timeout=120)  # a rank that failed breaks it: no hang
    pipes, procs = [], []
    for r in range(TP):
        a, b = ctx.Pipe(duplex=False)
        p = ctx.Process(target=target, args=(r, *args[:1], barrier, b, *args[1:]))
        p.start()
        pipes.append(a)
        procs.append(p)
    res = [a.recv() for a in pipes]
    for p in procs:
        p.join()
    return res


def create(name, geo, P, pages):
    comp = hicache.Component.kv("kv", "bf16", kv_heads=geo["heads"], head_bytes=geo["head_dim"] * 2,
                                layers=geo["layers"])
    hicache.Pool.create(name, geo["model"], page_tokens=P, tp_size=TP, components=[comp], capacity_pages=pages,
                        max_tickets=4096)  # a rank may run calls ahead of the other


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=128, help="pages a batch (SGLang's is 128)")
    ap.add_argument("--page-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200, help="calls of one page for the fixed cost")
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    args = ap.parse_args()
    args.layouts = args.layouts.split(",")
    P, n = args.page_tokens, args.pages
    args.pool = f"bench-sglang-{os.getpid()}"
    tiny = f"bench-sglang-{os.getpid()}-tiny"
    create(args.pool, LLAMA, P, max(2 * n, args.calls + 80) + 8)
    create(tiny, TINY, 16, args.calls + 96)  # the pages of the calls, and 32 of each rank's own
    try:
        res = run(throughput, args)
        one = [run(fixed_cost, args, tiny, TINY, 16), run(fixed_cost, args, args.pool, LLAMA, P)]
    finally:
        hicache.Pool.destroy(args.pool, force=True)
        hicache.Pool.destroy(tiny, force=True)
    page_bytes = res[0][1]
    print(f"bench-sglang: {LLAMA['model']} at TP {TP} ({LLAMA['layers']} layers, {LLAMA['heads'] // TP} of "
          f"{LLAMA['heads']} KV heads a rank, head_dim {LLAMA['head_dim']}, bf16), {P}-token pages: "
          f"{page_bytes / 2**20:.1f} MiB a rank a page, {n}-page batches ({n * page_bytes / 2**20:.0f} MiB a rank "
          f"a call), {TP} rank processes at once, median of {args.reps}; torch {torch.__version__}, 1 thread a rank")
    print()
    print(f"{'layout':17} | {'call':12} | {'hicache GB/s':>12} | {'torch GB/s':>10} | {'ratio':>5} | >=0.8")
    print("-" * 72)
    for li, (layout, _) in enumerate(res[0][0]):
        for call, mine, peer in (("batch_set_v1", "set", "tset"), ("batch_get_v1", "get", "tget")):
            t = max(r[0][li][1][mine] for r in res)  # the slower rank: the server waits for it
            tp = max(r[0][li][1][peer] for r in res)
            gb, pgb = n * page_bytes / t / 1e9, n * page_bytes / tp / 1e9
            print(f"{layout:17} | {call:12} | {gb:12.2f} | {pgb:10.2f} | {gb / pgb:5.2f} | "
                  f"{'met' if gb / pgb >= 0.8 else 'MISSED'}")
    print()
    print(f"one page a call, page_first_direct: {args.calls} calls back to back on both ranks, the slower rank's "
          f"mean:")
    print(f"{'page (a rank)':20} | {'call':28} | {'call us':>8} | {'copy us':>8} | {'added us':>8}")
    print("-" * 84)
    for label, r in (("tiny", one[0]), ("Llama-3-8B", one[1])):
        pb = r[0][1]
        for call, k, c in (("batch_set_v1", "set", "store"), ("batch_exists + batch_get_v1", "get", "load")):
            t, tc = max(x[0][k] for x in r), max(x[0][c] for x in r)
            print(f"{label + f', {pb / 1024:.0f} KiB':20} | {call:28} | {t * 1e6:8.0f} | {tc * 1e6:8.0f} | "
                  f"{(t - tc) * 1e6:8.0f}")


if __name__ == "__main__":
    main()
