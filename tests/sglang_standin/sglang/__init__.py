# SPDX-License-Identifier: Apache-2.0
"""A stand-in for the parts of SGLang that hicache.sglang meets, written
for the tests from SGLang's documented interface (tests/test_sglang.py):
not SGLang, and never installed."""
