#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# fuzz.sh - libFuzzer on each harness for FUZZ_SECONDS (default 15),
# starting from its seed corpus: hicache-memd's control protocol and
# directory (tests/fuzz/fuzz_memd.c, as tests/fuzz/fuzz-memd), the
# replay's trace reader (fuzz_trace.c, as fuzz-trace), backend specs
# (fuzz_spec.c), the L3 object header's check (fuzz_object.c), a pool
# segment's attach and check (fuzz_segment.c) and hicached's config file
# (fuzz_conf.c), built with ASan and UBSan when clang links -fsanitize=fuzzer.  The fuzzer works on a copy in a temporary
# folder, so the tree's corpus is never changed by a run; a crash is saved
# there and its path printed: replay it with
#   tests/fuzz/fuzz-NAME CRASH-FILE
# and, once fixed, add it to tests/fuzz/corpus/NAME/ (tests/fuzz/replay_NAME
# then runs it at every make check).  Exit status: the last failing
# fuzzer's, or 0.
#
# Environment (make sets it): HC_BUILDDIR, HC_SRCDIR.
set -u

me=tests/fuzz/fuzz.sh
: "${HC_BUILDDIR:=.}" "${HC_SRCDIR:=.}" "${FUZZ_SECONDS:=15}"
status=0

# fuzz NAME: tests/fuzz/fuzz-NAME from tests/fuzz/corpus/NAME, for FUZZ_SECONDS
fuzz() {
	fuzzer=$HC_BUILDDIR/tests/fuzz/fuzz-$1
	seeds=$HC_SRCDIR/tests/fuzz/corpus/$1
	if [ ! -x "$fuzzer" ]; then
		echo "$me: $fuzzer is not built: make tests/fuzz/fuzz-$1 (needs clang with libFuzzer)" >&2
		return 99
	fi
	if [ -z "$(ls -A "$seeds" 2>/dev/null)" ]; then
		echo "$me: no seeds in $seeds" >&2
		return 99
	fi
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/hicache-fuzz.XXXXXX") || return 99
	mkdir "$tmp/corpus" "$tmp/crashes" && cp "$seeds"/* "$tmp/corpus/" || { rm -rf "$tmp"; return 99; }
	# -rss_limit_mb: the harnesses hold a 1 MiB region's directory, or a trace;
	# TMPDIR: what a harness makes there (fuzz-segment's pool files) goes
	# with the folder, even after a crash
	TMPDIR="$tmp" "$fuzzer" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$tmp/crashes/" "$tmp/corpus" 2>"$tmp/log"
	st=$?
	echo "== $1"
	grep -E '^(stat::|Done )|cov:' "$tmp/log" | tail -n 8
	if [ "$st" -ne 0 ]; then
		tail -n 25 "$tmp/log"
		keep=$(mktemp -d "${TMPDIR:-/tmp}/hicache-fuzz-crash.XXXXXX") && cp "$tmp"/crashes/* "$keep/" 2>/dev/null
		echo "$me: fuzz-$1 failed (status $st); its inputs are in ${keep:-$tmp/crashes}" >&2
	fi
	rm -rf "$tmp"
	return "$st"
}

for h in memd trace spec object segment conf; do
	fuzz "$h" || status=$?
done
exit "$status"
