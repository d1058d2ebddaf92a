#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
#
# make-corpus.py - writes the seed corpus of tests/fuzz/fuzz_memd.c into
# tests/fuzz/corpus/memd/: valid sessions of every message type, sessions
# that fill the region, let leases expire and replace objects, and one of
# each kind of bad message.  An input is a stream of messages, each led by
# a control byte (fuzz_memd.c says how it is read):
#   bits 0-1 the connection, bit 2 fix-up, bits 3-7 clock steps of 16 ms.
# The files are small and are committed; run this again after a change of
# the protocol (backends/mori/wire.h) and commit what it writes.
#
#   python3 tests/fuzz/corpus/make-corpus.py [OUTDIR]

import os
import struct
import sys

MAGIC = 0x444D4348
HELLO, LOOKUP, ALLOC, COMMIT, RELEASE, DELETE, STATS = range(1, 8)
LEASE = 1
ALIGN = 4096
REGION = 1 << 20  # fuzz_memd.c's


def ctl(conn=0, fix=False, steps=0):
    return bytes([(conn & 3) | (4 if fix else 0) | ((steps & 31) << 3)])


def msg(mtype, body=b"", conn=0, version=1, seq=1, magic=MAGIC, length=None, fix=False, steps=0):
    n = len(body) if length is None else length
    return ctl(conn, fix, steps) + struct.pack("<IHHII", magic, version, mtype, n, seq) + body


def hello(conn=0, vmin=1, vmax=1, lease_ms=0):
    return msg(HELLO, struct.pack("<HHI", vmin, vmax, lease_ms), conn=conn)


def name(i):
    return ("object-%d" % i).encode().ljust(64, b"\0")


def count(n, flags=0):
    return struct.pack("<II", n, flags)


def alloc(items, conn=0, seq=2, steps=0):
    body = count(len(items)) + b"".join(name(i) + struct.pack("<Q", n) for i, n in items)
    return msg(ALLOC, body, conn=conn, seq=seq, steps=steps)


def tokens(mtype, toks, conn=0, seq=3, steps=0):
    return msg(mtype, count(len(toks)) + b"".join(struct.pack("<Q", t) for t in toks), conn=conn, seq=seq, steps=steps)


def names(mtype, ids, flags=0, conn=0, seq=4, steps=0):
    return msg(mtype, count(len(ids), flags) + b"".join(name(i) for i in ids), conn=conn, seq=seq, steps=steps)


def stats(conn=0, seq=5):
    return msg(STATS, count(0), conn=conn, seq=seq)


# dir.c gives tokens from a counter: the n-th lease or grant of a run is
# (n << 1) | 1 for a grant, n << 1 for a lookup's lease.
def grant(n):
    return (n << 1) | 1


def lease(n):
    return n << 1


def corpus():
    c = {}
    c["hello"] = hello()
    c["hello-short-lease"] = hello(lease_ms=50) + alloc([(1, 100)], steps=5) + tokens(COMMIT, [grant(1)])
    c["stats"] = hello() + stats()
    c["round-trip"] = (hello() + alloc([(1, 1), (2, 4096), (3, 10000)]) +
                       tokens(COMMIT, [grant(1), grant(2), grant(3)]) +
                       names(LOOKUP, [1, 2, 3, 4]) + names(LOOKUP, [1, 2], LEASE) +
                       tokens(RELEASE, [lease(4), lease(5), lease(5)]) +
                       names(DELETE, [1, 2, 3, 4]) + stats())
    c["give-up-grant"] = hello() + alloc([(1, REGION)]) + tokens(RELEASE, [grant(1)]) + tokens(COMMIT, [grant(1)])
    c["commit-lease-token"] = (hello() + alloc([(1, 100)]) + tokens(COMMIT, [grant(1)]) +
                               names(LOOKUP, [1], LEASE) + tokens(COMMIT, [lease(2)]))
    c["too-big"] = hello() + alloc([(1, REGION + 1), (2, 0), (3, REGION), (4, 1)])
    # 256 units of 4 KiB fill the region; then more evict the coldest
    fill = alloc([(i, ALIGN) for i in range(64)], seq=10)
    fill += tokens(COMMIT, [grant(i) for i in range(1, 65)], seq=11)
    fill += alloc([(i, ALIGN * 3) for i in range(64, 128)], seq=12)
    fill += tokens(COMMIT, [grant(i) for i in range(65, 129)], seq=13)
    c["fill"] = hello() + fill
    c["evict"] = (hello() + fill + names(LOOKUP, [0, 1, 2], LEASE) +
                  alloc([(200 + i, ALIGN * 8) for i in range(32)]) + names(LOOKUP, list(range(0, 64, 4))) + stats())
    c["leased-blocks"] = (hello() + alloc([(1, REGION // 2), (2, REGION // 2)]) + tokens(COMMIT, [grant(1), grant(2)]) +
                          names(LOOKUP, [1, 2], LEASE) + alloc([(3, ALIGN)]) + tokens(RELEASE, [lease(3)]) +
                          alloc([(3, ALIGN)]))
    c["expiry"] = (hello() + alloc([(1, ALIGN), (2, ALIGN)]) + tokens(COMMIT, [grant(1)]) +
                   names(LOOKUP, [1], LEASE) + stats() +
                   tokens(COMMIT, [grant(2)], steps=31) + tokens(COMMIT, [grant(2)], steps=31) +
                   tokens(RELEASE, [lease(3)], steps=31) + stats())
    c["replace"] = (hello() + alloc([(1, 8192)]) + tokens(COMMIT, [grant(1)]) + names(LOOKUP, [1], LEASE) +
                    alloc([(1, 4096)]) + tokens(COMMIT, [grant(3)]) + names(DELETE, [1]) + stats() +
                    tokens(RELEASE, [lease(2)]) + stats())
    c["two-connections"] = (hello(0) + hello(1, lease_ms=100) + alloc([(1, 5000)], conn=1) +
                            tokens(COMMIT, [grant(1)], conn=0) + names(LOOKUP, [1], LEASE, conn=1) +
                            names(DELETE, [1], conn=0) + tokens(RELEASE, [lease(2)], conn=1, steps=10) + stats(conn=1))
    # leases of three lengths, taken in turns: they expire out of order
    mixed = hello(0) + hello(1, lease_ms=40) + hello(2, lease_ms=300) + alloc([(1, 100)]) + tokens(COMMIT, [grant(1)])
    for i in range(12):
        mixed += names(LOOKUP, [1], LEASE, conn=i % 3, steps=1)
    c["mixed-leases"] = mixed + tokens(RELEASE, [lease(5), lease(9)], steps=3) + stats(conn=1)
    # every other unit freed: many one-unit extents in one bin
    frag = hello() + alloc([(i, ALIGN) for i in range(60)]) + tokens(COMMIT, [grant(i) for i in range(1, 61)])
    frag += names(DELETE, list(range(0, 60, 2))) + alloc([(100, ALIGN), (101, 2 * ALIGN)])
    c["fragment"] = frag + names(DELETE, list(range(1, 60, 2))) + stats()
    # more leases than the table holds (fuzz_memd.c's max_leases is 64)
    c["lease-table-full"] = (hello() + alloc([(1, 100)]) + tokens(COMMIT, [grant(1)]) +
                             names(LOOKUP, [1] * 40, LEASE) + names(LOOKUP, [1] * 40, LEASE) + alloc([(2, 100)]))
    c["fixup"] = (msg(HELLO, struct.pack("<HHI", 1, 1, 0), magic=0, length=0, fix=True) +
                  msg(ALLOC, count(2) + name(1) + struct.pack("<Q", 7) + name(2) + struct.pack("<Q", 70000),
                      length=0, fix=True, version=9) +
                  msg(COMMIT, count(2) + struct.pack("<QQ", grant(1), grant(2)), fix=True, length=3) +
                  msg(LOOKUP, count(2, LEASE) + name(1) + name(2), fix=True) + msg(STATS, count(0), fix=True))
    # bad messages: each closes its connection; the next message opens a new one
    bad = {
        "magic": msg(STATS, count(0), magic=0x50545448),
        "version": msg(STATS, count(0), version=2),
        "oversize": msg(LOOKUP, b"", length=(1 << 20) + 1),
        "count-too-large": tokens(COMMIT, list(range(1, 66))),
        "count-zero": msg(DELETE, count(0)),
        "length-mismatch": msg(COMMIT, count(2) + struct.pack("<Q", 1) + b"\0\0\0\0"),
        "short-count": msg(LOOKUP, b"\1\0\0\0"),
        "unknown-type": msg(9, count(1)),
        "reply-type": msg(STATS | 0x80, count(0)),
        "release-flags": msg(RELEASE, count(1, 4) + struct.pack("<Q", 1)),
        "lookup-flags": names(LOOKUP, [1], flags=3),
        "stats-count": msg(STATS, count(1)),
        "hello-twice": hello(),
    }
    for k, v in bad.items():
        c["bad-" + k] = hello() + v + hello() + stats()
    c["bad-before-hello"] = stats() + hello() + stats()
    c["bad-hello-range"] = hello(vmin=3, vmax=1) + hello() + stats()
    c["bad-hello-versions"] = hello(vmin=2, vmax=5) + hello() + stats()
    c["bad-hello-size"] = msg(HELLO, struct.pack("<HHII", 1, 1, 0, 0)) + hello() + stats()
    c["truncated"] = hello() + alloc([(1, 100)])[:40]
    c["empty"] = b""
    return c


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "memd")
    os.makedirs(out, exist_ok=True)
    for k, v in sorted(corpus().items()):
        with open(os.path.join(out, k), "wb") as f:
            f.write(v)
    print("make-corpus: %d inputs in %s" % (len(corpus()), out))


if __name__ == "__main__":
    main()
