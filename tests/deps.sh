#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# deps.sh - the dependency rule of doc/design.md ("Where things live"),
# read from the symbols of the built objects: calls go one way, tools ->
# lib -> shmpool, and a backend sees only include/hicache/backend.h.
#   - an object of shmpool/ refers to no symbol defined in lib/ or tools/;
#   - an object of lib/ refers to no symbol defined only in tools/;
#   - a plugin object (backends/NAME/) refers to no hc_ or hc__ symbol but
#     its own plugin's: it gets the host's functions through struct
#     hc_backend_host;
#   - an object of tools/ refers to no hc__ (internal) symbol: tools link
#     the public libhicache only.
# The objects are found by walking the folders (libtool's PIC objects are
# in .libs/), in the build tree: $HC_BUILDDIR, else the current folder.
# Sanitizer runtime symbols (__asan_*, __ubsan_*, ...) do not count.
# Each breach is a line naming the object and the symbol; exit 1 if any.

NM=${DEPS_NM:-nm}
cd "${HC_BUILDDIR:-.}" || exit 99

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hc-deps.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

# "folder object symbol" lines of what each object defines (def) and
# refers to without defining (und), for the four folders.
for dir in shmpool lib tools backends; do
	n=0
	for o in $(find "$dir" -name '*.o' | LC_ALL=C sort); do
		n=$((n + 1))
		"$NM" -P -g --defined-only "$o" >"$tmp/out" || exit 99
		awk -v d="$dir" -v o="$o" '{ print d, o, $1 }' "$tmp/out" >>"$tmp/def"
		"$NM" -P -u "$o" >"$tmp/out" || exit 99
		awk -v d="$dir" -v o="$o" '{ print d, o, $1 }' "$tmp/out" >>"$tmp/und"
	done
	if [ "$n" -eq 0 ]; then
		echo "deps: no objects under $(pwd)/$dir: build first" >&2
		exit 99
	fi
	echo "deps: $dir: $n objects"
done

awk '
	/ (__asan|___asan|__odr_asan|__ubsan|__lsan|__tsan|__msan|__sanitizer|__sancov)/ { next }
	# a plugin: its folder under backends/
	function plugin(o) {
		split(o, part, "/")
		return part[1] "/" part[2]
	}
	FNR == NR {
		if (!(($1, $3) in def))
			def[$1, $3] = $2
		if ($1 == "backends")
			def[plugin($2), $3] = $2
		next
	}
	function breach(why) {
		printf "deps: %s refers to %s, %s\n", $2, $3, why
		bad++
	}
	$1 == "shmpool" && !(("shmpool", $3) in def) && (("lib", $3) in def) {
		breach("defined in " def["lib", $3] ": shmpool uses neither lib/ nor tools/")
	}
	$1 == "shmpool" && !(("shmpool", $3) in def) && (("tools", $3) in def) {
		breach("defined in " def["tools", $3] ": shmpool uses neither lib/ nor tools/")
	}
	$1 == "lib" && !(("lib", $3) in def) && !(("shmpool", $3) in def) && (("tools", $3) in def) {
		breach("defined only in " def["tools", $3] ": lib/ does not use tools/")
	}
	$1 == "backends" && $3 ~ /^hc_/ && !((plugin($2), $3) in def) {
		breach("not its plugin'\''s: a plugin gets the host'\''s functions through struct hc_backend_host")
	}
	$1 == "tools" && $3 ~ /^hc__/ {
		breach("an internal symbol: tools use the public libhicache only")
	}
	END { exit (bad > 0) }
' "$tmp/def" "$tmp/und"
