#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# abi.sh - the public ABI, checked (make check) or recorded (make abi-update,
# with --update) with libabigail: abidw dumps what a built shared object
# exports, with the types of the public headers only, and abidiff compares
# the dump with the baseline committed in abi/ (abi/README).
#
# An addition passes: a new exported function; a member appended to a struct
# that leads with a size member, as long as it is reached only through
# pointers (the library reads such a member only when the caller's size
# covers it); an enumerator added before a __COUNT.  Anything else abidiff
# reports fails, with its report.
#
# Environment (make sets it): ABIDW, ABIDIFF, HC_BUILDDIR, HC_SRCDIR.
set -u

me=tests/abi.sh
update=no
[ "${1:-}" = --update ] && update=yes
: "${ABIDW:=abidw}" "${ABIDIFF:=abidiff}" "${HC_BUILDDIR:=.}" "${HC_SRCDIR:=.}"
abi=$HC_SRCDIR/abi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hicache-abi.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

# What makes a dump the same whichever way the tree was built (crash points,
# sanitizers, CUDA or not, in or out of the source tree): no paths, no
# locations, no DT_NEEDED, no undefined or unexported symbols, no private
# types, and type ids from a hash rather than from the order of reading.
DW_FLAGS="--drop-private-types --drop-undefined-syms --exported-interfaces-only --no-corpus-path
	--no-comp-dir-path --no-show-locs --no-architecture --no-elf-needed --type-id-style hash"

fail() {
	echo "$me: $*" >&2
	exit 1
}

# dump SO OUT HEADER-OPTIONS...: the ABI of SO into OUT
dump() {
	so=$1 out=$2
	shift 2
	[ -f "$so" ] || fail "$so is not built"
	# shellcheck disable=SC2086 # DW_FLAGS is a list of options
	"$ABIDW" $DW_FLAGS "$@" --out-file "$out.raw" "$so" || fail "$ABIDW failed on $so"
	# a translation unit's path from the top of the source tree, however
	# configure was run (in the tree, as ../configure, by an absolute path)
	sed -n "s|.*<abi-instr .* path='\([^']*\)'.*|\1|p" "$out.raw" | sort -u >"$out.paths" || exit 99
	: >"$out.sed"
	while read -r p; do
		r=$(cd "$HC_BUILDDIR" && realpath -m --relative-to="$HC_SRCDIR" -- "$p") || exit 99
		echo "s|path='$p'|path='$r'|" >>"$out.sed"
	done <"$out.paths"
	sed -f "$out.sed" "$out.raw" >"$out" || exit 99
	# Without DWARF abidw still lists the symbols but not one type: the
	# comparison would pass whatever the headers say.
	nsym=$(sed -n '/<elf-function-symbols>/,/<\/elf-function-symbols>/p' "$out" | grep -c '<elf-symbol ')
	ndecl=$(grep -c "<function-decl .*elf-symbol-id=" "$out")
	[ "$nsym" -gt 0 ] || fail "$so exports no function"
	[ "$ndecl" -eq "$nsym" ] ||
		fail "$so has debug info (DWARF) for $ndecl of its $nsym exported functions: build with -g in CFLAGS (configure's default)"
}

# suppressions BASELINE: the libabigail suppressions that make an addition
# to BASELINE pass (see the top of this file)
suppressions() {
	echo "# What abidiff takes for additions to $(basename "$1"), not changes.  Written"
	echo "# from it by 'make abi-update' (tests/abi.sh): do not edit."
	# named structs, not declarations, whose first or second member is size
	grown=$(awk -v q="'" '
		function attr(s) { sub(".* name=" q, "", s); sub(q ".*", "", s); return s }
		/<class-decl / && !/\/>/ { if (++depth == 1) { name = attr($0); n = 0 } }
		/<data-member / && depth == 1 { n++ }
		/<var-decl / && depth == 1 && n <= 2 && attr($0) == "size" && name !~ /^__anonymous/ { print name }
		/<\/class-decl>/ { depth-- }' "$1" | sort -u | paste -sd '|' -)
	if [ -n "$grown" ]; then
		echo
		echo "# A member appended to a struct that leads with a size member."
		echo "[suppress_type]"
		echo "  type_kind = struct"
		echo "  name_regexp = ^($grown)\$"
		echo "  has_data_member_inserted_at = end"
		echo "  accessed_through = pointer"
	fi
	counts=$(sed -n "s/.*<enumerator name='\([A-Za-z0-9_]*__COUNT\)'.*/\1/p" "$1" | sort -u | paste -sd ',' - | sed 's/,/, /g')
	if [ -n "$counts" ]; then
		echo
		echo "# An enumerator added before the __COUNT that ends its enum."
		echo "[suppress_type]"
		echo "  type_kind = enum"
		echo "  changed_enumerators = $counts"
	fi
}

# check NAME SO BUMP HEADER-OPTIONS...: SO against abi/NAME.abi, or record
# it; BUMP says what a deliberate change of this ABI takes.  The public types
# are those defined in the headers of the --headers-dir given (--header-file
# makes none public in libabigail 2.2).
check() {
	name=$1 so=$2 bump=$3
	shift 3
	dump "$so" "$tmp/$name.abi" "$@"
	if [ $update = yes ]; then
		mkdir -p "$abi" && cp "$tmp/$name.abi" "$abi/$name.abi" &&
			suppressions "$abi/$name.abi" >"$abi/$name.suppr" || exit 99
		echo "$me: wrote abi/$name.abi and abi/$name.suppr"
		return
	fi
	[ -f "$abi/$name.abi" ] || fail "no baseline abi/$name.abi: make abi-update writes it"
	suppressions "$abi/$name.abi" >"$tmp/$name.suppr" || exit 99
	cmp -s "$tmp/$name.suppr" "$abi/$name.suppr" ||
		fail "abi/$name.suppr does not follow from abi/$name.abi: run make abi-update"
	"$ABIDIFF" --no-added-syms --suppressions "$abi/$name.suppr" "$abi/$name.abi" "$tmp/$name.abi" >"$tmp/$name.diff" 2>&1
	rc=$?
	# abidiff's status is a bit set: 1 error, 2 usage error, 4 a change,
	# 8 an incompatible one (a removed symbol); additions alone give 0
	# here (--no-added-syms, the suppressions)
	if [ $rc -eq 0 ]; then
		"$ABIDIFF" --suppressions "$abi/$name.suppr" "$abi/$name.abi" "$tmp/$name.abi" >"$tmp/$name.add" 2>&1
		added=$(grep -c '^  \[A\] ' "$tmp/$name.add")
		note=
		[ "$added" -eq 0 ] || note=", plus $added added symbols (make abi-update records them with their version)"
		echo "$me: $name: $so has the ABI of abi/$name.abi$note"
		return
	fi
	cat "$tmp/$name.diff"
	# a signal, an error
	if [ $rc -ge 16 ] || [ $((rc & 3)) -ne 0 ]; then
		fail "$ABIDIFF failed (status $rc) comparing abi/$name.abi with $so"
	fi
	echo "$me: $name: $so changes or removes what abi/$name.abi has (abidiff status $rc)." >&2
	echo "$me: by accident: put it back.  On purpose: $bump, run make abi-update, and commit abi/." >&2
	status=1
}

# A private header named like a public one would count as public: abidw
# tells public types by the base name of the header that defines them.
for h in "$HC_SRCDIR"/include/hicache/*.h "$HC_SRCDIR"/include/hicache/version.h.in; do
	b=$(basename "$h" .in)
	clash=$(find "$HC_SRCDIR/lib" "$HC_SRCDIR/shmpool" -name "$b" 2>/dev/null | head -1)
	[ -z "$clash" ] || fail "${clash#"$HC_SRCDIR"/} is named like the public include/hicache/$b: libabigail would take its types for public ones; rename it"
done

status=0
check libhicache "$HC_BUILDDIR/lib/.libs/libhicache.so" \
	"bump the soname (-version-info in Makefile.am) and the version node in lib/libhicache.sym" \
	--headers-dir "$HC_SRCDIR/include/hicache" --headers-dir "$HC_BUILDDIR/include/hicache"
check backend "$HC_BUILDDIR/tests/fixtures/.libs/abi_backend.so" \
	"bump HC_BACKEND_ABI_VERSION in include/hicache/backend.h (every plugin is then rebuilt)" \
	--headers-dir "$HC_SRCDIR/include/hicache"
exit $status
