#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
#
# make-segments.py - writes the seed corpus of tests/fuzz/fuzz_segment.c
# into tests/fuzz/corpus/segment/: real small pools made by the library
# (python/hicache) in a private directory, each cut after its last
# non-zero byte (the harness pads the file back to the size its header
# gives), and damaged variants of them: a bad magic, version, state or
# size, a component table out of place, and, with the meta_digest zeroed
# (the harness reseals it), a geometry that does not follow, then
# scribbled page, index, ticket and free-map regions.  Run it from a built
# tree after a change of shmpool/layout.h and commit what it writes:
#
#   HICACHE_LIB=lib/.libs/libhicache.so.2 PYTHONPATH=python \
#       python3 tests/fuzz/corpus/make-segments.py [OUTDIR]
#
# The pools are created by tools/hicache-pool ($HICACHE_POOL), which takes
# small rings (the seeds stay some 80 KiB).

import os
import shutil
import struct
import subprocess
import sys
import tempfile

import hicache

HDR = 4096
COMP_BYTES = 128  # struct hc_seg_comp
OFF_SEGMENT_BYTES, OFF_STATE, OFF_MAJOR = 24, 672, 8
OFF_MODEL, OFF_NPAGES, OFF_NCOMP, OFF_TOC, OFF_DIGEST = 112, 324, 316, 384, 640
# enum hc_region
RANKS, CTL, STATS, PAGES, PINS, TMASK, INDEX, TICKETS, TPAGES, RINGS, FREEMAP, LRU = range(1, 13)


def create(d, name, tp, pages, *extra):
    tool = os.environ.get("HICACHE_POOL", "tools/hicache-pool")
    subprocess.run([tool, "create", name, "--dir", d, "--model", "test/m", "--page-tokens", "16", "--tp", str(tp),
                    "--pages", str(pages), "--kv", "kv,bf16,4,64,2", "--state", "st,f32,1024,2", "--ticket-keys",
                    "16", "--ring-entries", "8", "--arg-bytes", "4K", *extra], check=True, stdout=subprocess.DEVNULL)


def image(d, name):
    with open(os.path.join(d, "hicache." + name), "rb") as f:
        return f.read().rstrip(b"\0")


def region(img, r):
    return struct.unpack_from("<QQ", img, OFF_TOC + 16 * r)


def put(img, off, data):
    b = bytearray(img)
    if len(b) < off + len(data):
        b.extend(b"\0" * (off + len(data) - len(b)))
    b[off:off + len(data)] = data
    return bytes(b)


def unsealed(img, off, data):
    """A header or component field changed, the digest zeroed for the harness to reseal."""
    return put(put(img, off, data), OFF_DIGEST, b"\0" * 32)


def scribble(img, r, pattern, step=1):
    off, n = region(img, r)
    b = bytearray(img)
    if len(b) < off + n:
        b.extend(b"\0" * (off + n - len(b)))
    for i in range(0, n, step):
        b[off + i] = pattern[(i // step) % len(pattern)]
    return bytes(b)


def pools(d):
    """name -> image of a few real pools, with pages in every state."""
    out = {}
    create(d, "plain", 2, 8, "--max-ranks", "2")
    out["plain"] = image(d, "plain")
    create(d, "lru", 1, 4, "--max-ranks", "1", "--evict", "lru", "--host-mode", "buffer_only")
    out["lru-buffer-only"] = image(d, "lru")
    create(d, "used", 2, 8, "--max-ranks", "2")
    with hicache.Pool.attach("used", dir=d) as p:
        keys = hicache.key_chain(range(64), 16)
        pages, _ = p.reserve(keys)
        for pg in pages[:3]:
            p.commit(pg, 0x3)
        hit = p.lookup(keys[:1], pin=True)  # one page pinned, one left reserved
        out["used-attached"] = image(d, "used")  # a live rank slot, as a copy finds it
        for pg in hit:
            p.unpin(pg)
        p.abort(pages[3:])
        p.evict(1)
    out["used"] = image(d, "used")
    create(d, "tk", 2, 8, "--max-ranks", "2")
    with hicache.Pool.attach("tk", dir=d) as p:
        p.join(engine_id=7, tp_size=2, tp_rank=0)
        p.ticket_reserve("req-1", 0, hicache.key_chain(range(32), 16))  # held open: a ticket in flight
        out["ticket-open"] = image(d, "tk")
    return out


def damaged(base, used):
    npages = struct.unpack_from("<I", base, OFF_NPAGES)[0]
    return {
        "bad-magic": put(base, 0, b"HICACHE\2"),
        "bad-layout-major": put(base, OFF_MAJOR, struct.pack("<I", 7)),
        "bad-state-creating": put(base, OFF_STATE, struct.pack("<I", 1)),
        "bad-size-larger": unsealed(base, OFF_SEGMENT_BYTES, struct.pack("<Q", 6 << 20)),
        "bad-size-odd": unsealed(base, OFF_SEGMENT_BYTES, struct.pack("<Q", (4 << 20) + 4096)),
        "bad-short": base[:HDR - 1],
        "bad-digest": put(base, OFF_DIGEST, b"\1" * 32),
        "bad-ncomp-zero": put(base, OFF_NCOMP, struct.pack("<I", 0)),
        "bad-ncomp-9": unsealed(base, OFF_NCOMP, struct.pack("<I", 9)),
        "bad-toc-comps": unsealed(base, OFF_TOC + 8, struct.pack("<Q", 3 * COMP_BYTES)),
        "unsealed-ok": unsealed(base, OFF_DIGEST, b"\0" * 32),
        "unsealed-npages": unsealed(base, OFF_NPAGES, struct.pack("<I", npages * 2)),
        "unsealed-model-ctl": unsealed(base, OFF_MODEL, b"test/\x01"),
        "unsealed-model-open": unsealed(base, OFF_MODEL, b"m" * 129),
        "unsealed-comp-dtype": unsealed(base, HDR + 32, struct.pack("<I", 99)),
        "unsealed-comp-name": unsealed(base, HDR, b"n" * 32),
        "unsealed-head-groups-zero": unsealed(base, 312, struct.pack("<I", 0)),
        "scribbled-pages": scribble(used, PAGES, b"\xff\x07\x03\x80", 3),
        "scribbled-pins": scribble(used, PINS, b"\xff\x00\x00\x01"),
        "scribbled-index": scribble(used, INDEX, b"\x41\xff\x00\x13\x07", 1),
        "scribbled-tickets": scribble(used, TICKETS, b"\x05\xff\x7f\x00\x02", 7),
        "scribbled-freemap": scribble(used, FREEMAP, b"\xa5\x5a"),
        "scribbled-ranks": scribble(used, RANKS, b"\x01\x00\xff\xff", 5),
        "scribbled-rings": scribble(used, RINGS, b"\x09\x00\x00\x80", 4),
        "scribbled-ctl": scribble(used, CTL, b"\xff\x01", 3),
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "segment")
    os.makedirs(out, exist_ok=True)
    d = tempfile.mkdtemp(prefix="hicache-seeds.")
    try:
        real = pools(d)
    finally:
        shutil.rmtree(d)
    seeds = dict(real)
    seeds.update(damaged(real["plain"], real["used"]))
    for name, data in sorted(seeds.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("%d seeds in %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
