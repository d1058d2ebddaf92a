#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# fuzz.sh - libFuzzer on hicache-memd's control protocol and directory
# (tests/fuzz/fuzz_memd.c, built as tests/fuzz/fuzz-memd with ASan and
# UBSan when clang links -fsanitize=fuzzer) for FUZZ_SECONDS (default 20),
# starting from the seed corpus.  The fuzzer works on a copy in a temporary
# folder, so the tree's corpus is never changed by a run; a crash is saved
# there and its path printed: replay it with
#   tests/fuzz/fuzz-memd CRASH-FILE
# and, once fixed, add it to tests/fuzz/corpus/memd/ (tests/fuzz/replay_memd
# then runs it at every make check).  Exit status: the fuzzer's.
#
# Environment (make sets it): HC_BUILDDIR, HC_SRCDIR.
set -u

me=tests/fuzz/fuzz.sh
: "${HC_BUILDDIR:=.}" "${HC_SRCDIR:=.}" "${FUZZ_SECONDS:=20}"
fuzzer=$HC_BUILDDIR/tests/fuzz/fuzz-memd
seeds=$HC_SRCDIR/tests/fuzz/corpus/memd

if [ ! -x "$fuzzer" ]; then
	echo "$me: $fuzzer is not built: make tests/fuzz/fuzz-memd (needs clang with libFuzzer)" >&2
	exit 99
fi
if [ -z "$(ls -A "$seeds" 2>/dev/null)" ]; then
	echo "$me: no seeds in $seeds: run tests/fuzz/corpus/make-corpus.py" >&2
	exit 99
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hicache-fuzz.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/corpus" "$tmp/crashes" && cp "$seeds"/* "$tmp/corpus/" || exit 99

# -rss_limit_mb: the harness holds a 1 MiB region's directory, far less
"$fuzzer" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=1024 -print_final_stats=1 \
	-artifact_prefix="$tmp/crashes/" "$tmp/corpus" 2>"$tmp/log"
status=$?
tail -n 25 "$tmp/log"
if [ "$status" -ne 0 ]; then
	keep=$(mktemp -d "${TMPDIR:-/tmp}/hicache-fuzz-crash.XXXXXX") && cp "$tmp"/crashes/* "$keep/" 2>/dev/null
	echo "$me: the fuzzer failed (status $status); its inputs are in ${keep:-$tmp/crashes}" >&2
fi
exit "$status"
