# SPDX-License-Identifier: Apache-2.0
"""test_metrics.py - what a Prometheus user scrapes: hicached's /metrics,
hicache-pool stat --prometheus and hicache-memd's /metrics, each parsed by
a real parser (prometheus_client) and linted by promtool, and their
figures held to the pool's: build info, start times, capacity and bytes by
page state that add up, and the L3's occupancy by backend."""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
from decimal import Decimal

from prometheus_client.parser import text_string_to_metric_families

import hicache

BUILDDIR = os.environ.get("HC_BUILDDIR", ".")
TOOLS = os.path.join(BUILDDIR, "tools")
PROMTOOL = os.environ.get("PROMTOOL") or shutil.which("promtool")
# one naming scheme: service_ (not svc_), _failed (not _fails or _fail_)
BAD_NAME = re.compile(r"(^|_)svc_|_fails?(_|$)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.headers.get("Content-Type"), r.read().decode()


def families(text):
    """name -> family; a name given twice fails."""
    out = {}
    for f in text_string_to_metric_families(text):
        assert f.name not in out, f"family {f.name} given twice"
        out[f.name] = f
    return out


def sample(fam, name=None, **labels):
    hits = [s for s in fam.samples
            if (name is None or s.name == name) and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, f"{fam.name}{labels}: {len(hits)} samples"
    return hits[0].value


class Lint:
    def promtool_clean(self, text):
        """promtool check metrics: exit 0 and nothing said."""
        self.assertIsNotNone(PROMTOOL, "promtool is missing: apt-get install prometheus (install-deps.sh does)")
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        self.assertEqual((p.returncode, p.stdout + p.stderr), (0, ""), "promtool check metrics")

    def names_one_scheme(self, fams):
        for name, f in fams.items():
            self.assertIsNone(BAD_NAME.search(name), f"{name}: not the one naming scheme")
            if f.type == "counter":  # the parser takes _total off; every sample has it
                for s in f.samples:
                    self.assertTrue(s.name.endswith("_total") or s.name.endswith("_created"), s.name)
            else:
                self.assertFalse(name.endswith("_total"), f"{name}: a {f.type} named like a counter")


class Hicached(unittest.TestCase, Lint):
    @classmethod
    def setUpClass(cls):
        cls.name = f"hctest-{os.getpid()}-metrics"
        cls.l3 = tempfile.mkdtemp(prefix="hct-metrics-")
        cls.port = free_port()
        cls.t0 = time.time()
        cls.log = tempfile.TemporaryFile()
        cls.d = subprocess.Popen(
            [os.path.join(TOOLS, "hicached"), "--pool", cls.name, "--backend", f"file:dir={cls.l3}",
             "--model", "test/model", "--page-tokens", "16", "--tp", "1", "--kv", "kv,bf16,2,64,2",
             "--pages", "16", "--metrics-listen", f"127.0.0.1:{cls.port}", "--sealed", "false"],
            stdout=cls.log, stderr=subprocess.STDOUT)
        for _ in range(1000):
            try:
                scrape(cls.port)
                break
            except OSError:
                if cls.d.poll() is not None:
                    break
                time.sleep(0.01)
        cls.log.seek(0)
        assert cls.d.poll() is None, "hicached exited: " + cls.log.read().decode()

    @classmethod
    def tearDownClass(cls):
        cls.d.terminate()
        cls.d.wait(timeout=30)
        cls.log.close()
        shutil.rmtree(cls.l3, ignore_errors=True)

    def some_traffic(self):
        """Pages written and backed up, so the L3 holds objects."""
        p = hicache.Pool.attach(self.name)
        try:
            keys = hicache.key_chain(list(range(1000, 1064)), 16)
            pages, _ = p.reserve(keys)
            for pg in pages:
                p.commit(pg, 1)  # head group 0 of 1: the whole page
            with p.backup(pages) as rq:
                self.assertEqual(rq.wait(10000), 4)
        finally:
            p.detach()

    def test_scrape(self):
        ctype, text = scrape(self.port)
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"), ctype)
        fams = families(text)
        self.promtool_clean(text)
        self.names_one_scheme(fams)
        self.assertEqual(sample(fams["hicache_build_info"], pool=self.name, version=hicache.version()), 1)
        start = sample(fams["hicache_service_start_time_seconds"], pool=self.name)
        self.assertTrue(self.t0 - 1 <= start <= time.time(), (self.t0, start))
        created = sample(fams["hicache_pool_created_time_seconds"], pool=self.name)
        self.assertTrue(start - 1 <= created <= time.time(), (start, created))
        info = hicache.Pool.attach(self.name)
        try:
            npages, env = info.info()["npages"], info.info()["envelope_bytes"]
            states = info.stats()["pages"]
        finally:
            info.detach()
        cap = sample(fams["hicache_pool_capacity_bytes"], pool=self.name)
        self.assertEqual(cap, npages * env)
        by_state = {s.labels["state"]: s.value for s in fams["hicache_pool_bytes"].samples}
        self.assertEqual(sum(by_state.values()), cap)
        self.assertEqual(by_state["free"], states["free"] * env)
        self.assertEqual(sample(fams["hicache_service_up"], pool=self.name), 1)
        self.assertEqual(sample(fams["hicache_l3_info"], pool=self.name, backend="file"), 1)
        for f in ("hicache_l3_objects", "hicache_l3_bytes", "hicache_l3_capacity_bytes"):
            self.assertGreaterEqual(sample(fams[f], pool=self.name, backend="file"), 0)
        hist = fams["hicache_request_seconds"]
        self.assertEqual(hist.type, "histogram")
        bounds = sorted({float(s.labels["le"]) for s in hist.samples if s.name.endswith("_bucket")})
        self.assertGreaterEqual(bounds[-2], 60.0, "latency buckets reach a minute")
        self.assertEqual(bounds[-1], float("inf"))
        # each bound exact, 16 us << i: %g once printed 4.194304 s as 4.1943, under the true bound
        les = sorted({Decimal(s.labels["le"]) for s in hist.samples
                      if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"})
        self.assertEqual(les, [Decimal(16 << i) / 10**6 for i in range(len(les))])

    def test_l3_occupancy_follows_backups(self):
        before = families(scrape(self.port)[1])
        objects0 = sample(before["hicache_l3_objects"], pool=self.name, backend="file")
        self.some_traffic()
        for _ in range(500):
            after = families(scrape(self.port)[1])
            if sample(after["hicache_l3_objects"], pool=self.name, backend="file") >= objects0 + 4:
                break
            time.sleep(0.01)
        self.assertEqual(sample(after["hicache_l3_objects"], pool=self.name, backend="file"), objects0 + 4)
        self.assertGreater(sample(after["hicache_l3_bytes"], pool=self.name, backend="file"),
                           sample(before["hicache_l3_bytes"], pool=self.name, backend="file"))
        self.assertGreaterEqual(sample(after["hicache_l3_backup_pages"], pool=self.name), 4)

    def test_stat_prometheus(self):
        p = subprocess.run([os.path.join(TOOLS, "hicache-pool"), "stat", self.name, "--prometheus"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        fams = families(p.stdout)
        self.promtool_clean(p.stdout)
        self.names_one_scheme(fams)
        self.assertNotIn("hicache_service_up", fams)  # hicached's own, not the pool's


class Memd(unittest.TestCase, Lint):
    def test_scrape(self):
        port, t0 = free_port(), time.time()
        d = subprocess.Popen([os.path.join(TOOLS, "hicache-memd"), "--size", "256K", "--listen", "127.0.0.1:0",
                              "--backing", "file:" + os.path.join(tempfile.gettempdir(), f"hct-memd-{os.getpid()}"),
                              "--metrics-listen", f"127.0.0.1:{port}"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            for line in d.stdout:  # its log first, then where it listens
                if "listening on" in line:
                    break
            self.assertIn("listening on", line)
            text = None
            for _ in range(500):
                try:
                    text = scrape(port)[1]
                    break
                except OSError:
                    time.sleep(0.01)
            self.assertIsNotNone(text, "no /metrics")
            fams = families(text)
            self.promtool_clean(text)
            self.names_one_scheme(fams)
            self.assertEqual(sample(fams["hicache_memd_build_info"], version=hicache.version()), 1)
            start = sample(fams["hicache_memd_start_time_seconds"])
            self.assertTrue(t0 - 1 <= start <= time.time())
            self.assertEqual(sample(fams["hicache_memd_region_bytes"]), 256 << 10)
            self.assertEqual(fams["hicache_memd_lookups"].type, "counter")
        finally:
            d.terminate()
            d.wait(timeout=30)
            d.stdout.close()


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=[sys.argv[0]])
