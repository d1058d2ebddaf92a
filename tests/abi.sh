#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# abi.sh - the public ABI, checked (make check) or recorded (make abi-update,
# with --update) with libabigail: abidw dumps what a built shared object
# exports, with the types of the public headers only, and abidiff compares
# the dump with the baseline committed in abi/ (abi/README).
#
# An addition passes: a new exported function; a member appended to a struct
# that may grow; an enumerator added before a __COUNT.  A struct may grow
# when it is reached only through pointers (never held by value in another
# struct, an array member, a parameter or a return value) and either
#   - the caller fills it: its first or second member is size, the caller's
#     sizeof, and the library reads a member only where that covers it; or
#   - the library fills it: an exported function takes a pointer to it and,
#     right after it, a size_t size, the caller's sizeof, and writes only
#     that much (shmpool/abi.c).
# Anything else fails, with abidiff's report: a change, a removal, and in a
# struct that may grow, a member inserted, moved or renamed too.
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
	[ "$ndecl" -eq "$nsym" ] || fail "$so has debug info (DWARF) for $ndecl of its $nsym" \
		"exported functions: build with -g in CFLAGS (configure's default)"
}

# awk: attr(line, a), the value of attribute a in a line of abidw's XML
AWK_ATTR='
	function attr(s, a) {
		if (!sub(".* " a "=" q, "", s))
			return ""
		sub(q ".*", "", s)
		return s
	}'

# members DUMP: "struct offset-in-bits member type", a line for each member
# of each named struct DUMP defines.  Typedefs, anonymous structs, unions
# and enums, pointer, array, qualified and function types are spelled out
# down to named structs, unions, enums and base types, whose own changes
# abidiff reports: a type id stays the same when what it names changes.
members() {
	awk -v q="'" "$AWK_ATTR"'
		function tname(id, d,    n, a, m, sig, i) {
			if (d > 8 || !(id in kind))
				return id
			if (kind[id] == "*")
				return tname(ref[id], d + 1) "*"
			if (kind[id] == "[]")
				return tname(ref[id], d + 1) "[" nm[id] " bits]"
			if (kind[id] == "q")
				return nm[id] " " tname(ref[id], d + 1)
			if (kind[id] == "=")
				return nm[id] "=" tname(ref[id], d + 1)
			if (kind[id] == "{}") { # "struct,member type-id offset,..."
				n = split(nm[id], a, ",")
				for (i = 2; i <= n; i++) {
					split(a[i], m, " ")
					sig = sig (i > 2 ? "; " : "") m[1]
					if (m[2] != "")
						sig = sig " " tname(m[2], d + 1)
					if (m[3] != "")
						sig = sig " @" m[3]
				}
				return a[1] "{" sig "}"
			}
			if (kind[id] == "f") { # "type-id,type-id,..."
				n = split(nm[id], a, ",")
				for (i = 1; i <= n; i++)
					sig = sig (i > 1 ? ", " : "") tname(a[i], d + 1)
				return tname(ref[id], d + 1) "(" sig ")"
			}
			return nm[id]
		}
		# first read: every type by its id
		NR == FNR && fn != "" {
			if (/<parameter /) {
				t = attr($0, "type-id")
				nm[fn] = nm[fn] (nm[fn] == "" ? "" : ",") (t == "" ? "..." : t)
			} else if (/<return /)
				ref[fn] = attr($0, "type-id")
			else if (/<\/function-type>/)
				fn = ""
			next
		}
		NR == FNR && anon != "" {
			if (/<data-member /)
				off = attr($0, "layout-offset-in-bits")
			else if (/<var-decl /)
				nm[anon] = nm[anon] "," attr($0, "name") " " attr($0, "type-id") " " off
			else if (/<enumerator /)
				nm[anon] = nm[anon] "," attr($0, "name") "=" attr($0, "value")
			else if (/<\/(class|union|enum)-decl>/)
				anon = ""
			next
		}
		NR == FNR {
			if ((id = attr($0, "id")) == "")
				next
			t = attr($0, "type-id")
			if (/<function-type / && !/\/>/) {
				kind[id] = "f"; nm[id] = ""; fn = id
			} else if (/<(class|union|enum)-decl / && /is-anonymous=/ && !/\/>/) {
				kind[id] = "{}"; anon = id; off = ""
				nm[id] = /<union/ ? "union" : /<enum/ ? "enum" : "struct"
			} else if (/<pointer-type-def /) {
				kind[id] = "*"; ref[id] = t
			} else if (/<array-type-def /) {
				kind[id] = "[]"; ref[id] = t; nm[id] = attr($0, "size-in-bits")
			} else if (/<typedef-decl /) {
				kind[id] = "="; ref[id] = t; nm[id] = attr($0, "name")
			} else if (/<qualified-type-def /) {
				kind[id] = "q"; ref[id] = t; nm[id] = /const=/ ? "const" : "volatile"
			} else if ((n = attr($0, "name")) != "") {
				kind[id] = "n"; nm[id] = n
			}
			next
		}
		# second read: the members of each named struct
		/<class-decl / && !/\/>/ && ++depth == 1 {
			st = attr($0, "name")
			skip = st ~ /^__anonymous/ || st in seen
			seen[st] = 1
		}
		/<data-member / && depth == 1 { off = attr($0, "layout-offset-in-bits") }
		/<var-decl / && depth == 1 && !skip { print st, off, attr($0, "name"), tname(attr($0, "type-id"), 0) }
		/<\/class-decl>/ { depth-- }' "$1" "$1"
}

# uses DUMP: how DUMP's named structs are used, a line for each use that
# bears on their growth: "filled S" when an exported function takes a
# pointer to S and, right after it, a size_t parameter named size (the
# caller's sizeof: the library fills S, hicache.h "ABI"); "held S" when a
# member, a variable, a parameter or a return value holds S by value, alone
# or in an array (its size is then part of another layout or of a call).
# Typedefs and qualifiers are seen through.
uses() {
	awk -v q="'" "$AWK_ATTR"'
		function strip(id, d) { # through typedefs and qualifiers
			while (d++ < 16 && id in alias)
				id = alias[id]
			return id
		}
		function is_size_t(id, d) {
			for (; d < 16 && id in alias; d++) {
				if (tdname[id] == "size_t")
					return 1
				id = alias[id]
			}
			return 0
		}
		function to_struct(id) { # the struct a pointer points to, if any
			id = strip(id)
			return id in ptr ? defined[strip(ptr[id])] : ""
		}
		function by_value(id, d) { # the struct held by value, if any
			for (id = strip(id); d < 16 && id in arr; d++)
				id = strip(arr[id])
			return defined[id]
		}
		NR == FNR {
			if ((id = attr($0, "id")) == "")
				next
			t = attr($0, "type-id")
			if (/<pointer-type-def /)
				ptr[id] = t
			else if (/<array-type-def /)
				arr[id] = t
			else if (/<qualified-type-def /)
				alias[id] = t
			else if (/<typedef-decl /) {
				alias[id] = t; tdname[id] = attr($0, "name")
			} else if (/<class-decl / && !/\/>/ && !/is-anonymous=/)
				defined[id] = attr($0, "name")
			next
		}
		/<(var-decl|parameter|return) / && (s = by_value(attr($0, "type-id"))) != "" { print "held", s }
		/<function-decl / && /elf-symbol-id=/ && !/\/>/ { np = 0; infn = 1 }
		infn && /<parameter / { np++; ptype[np] = attr($0, "type-id"); pname[np] = attr($0, "name") }
		infn && /<\/function-decl>/ {
			infn = 0
			for (i = 1; i < np; i++)
				if (pname[i + 1] == "size" && is_size_t(ptype[i + 1]) && (s = to_struct(ptype[i])) != "")
					print "filled", s
		}' "$1" "$1" | sort -u
}

# grown DUMP: the structs of DUMP that may grow at their end: those the
# caller fills, whose first or second member is size, and those the library
# fills by the caller's size (uses); but none that is held by value (uses),
# whose growth would move what follows it in another struct.  abidiff's
# accessed_through = pointer does not see to that: it lets a struct grow
# everywhere once some function reaches it through a pointer.
grown() {
	uses "$1" >"$tmp/uses" && sed -n 's/^held //p' "$tmp/uses" >"$tmp/held" || exit 99
	{
		members "$1" | awk '$1 != last { last = $1; n = 0 } ++n <= 2 && $3 == "size" { print $1 }'
		sed -n 's/^filled //p' "$tmp/uses"
	} | sort -u | grep -vxF -f "$tmp/held"
}

# in_place NAME: whether each struct of abi/NAME.abi that may grow still
# begins with the members it had there, at their offsets, with their names
# and types (a rename fails too: abidiff would take it for harmless)
in_place() {
	members "$abi/$1.abi" >"$tmp/$1.old" && members "$tmp/$1.abi" >"$tmp/$1.new" || exit 99
	moved=0
	for st in $(grown "$abi/$1.abi"); do
		grep "^$st " "$tmp/$1.old" >"$tmp/old"
		grep "^$st " "$tmp/$1.new" | head -n "$(wc -l <"$tmp/old")" >"$tmp/new"
		cmp -s "$tmp/old" "$tmp/new" && continue
		echo "== struct $st, which may only grow at its end (struct, offset in bits, member, type):"
		diff -u --label "abi/$1.abi" --label "the build" "$tmp/old" "$tmp/new"
		moved=1
	done
	return $moved
}

# suppressions BASELINE: the libabigail suppressions that make an addition
# to BASELINE pass (see the top of this file)
suppressions() {
	echo "# What abidiff takes for additions to $(basename "$1"), not changes.  Written"
	echo "# from it by 'make abi-update' (tests/abi.sh): do not edit."
	growing=$(grown "$1" | paste -sd '|' -)
	if [ -n "$growing" ]; then
		echo
		echo "# A member appended to a struct that leads with a size member, or that the"
		echo "# library fills by the caller's size."
		echo "[suppress_type]"
		echo "  type_kind = struct"
		echo "  name_regexp = ^($growing)\$"
		echo "  has_data_member_inserted_at = end"
		echo "  accessed_through = pointer"
	fi
	counts=$(sed -n "s/.*<enumerator name='\([A-Za-z0-9_]*__COUNT\)'.*/\1/p" "$1" | sort -u |
		paste -sd ',' - | sed 's/,/, /g')
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
	# Three looks, as none is enough alone.  abidiff of whole interfaces,
	# with the suppressions as written: a struct that may grow passes
	# whatever happened in it or under it, as long as no member went.
	# abidiff type by type (--leaf-changes-only): finds what changed under
	# such a struct (accessed_through means nothing there, and grown leaves
	# out the structs held by value).  And in_place, for what moved or
	# changed in such a struct itself.
	sed '/^ *accessed_through/d' "$abi/$name.suppr" >"$tmp/$name.leaf.suppr" || exit 99
	ok=yes
	compare "$name" "whole interfaces" "$abi/$name.suppr" || ok=no
	compare "$name" "each type on its own" "$tmp/$name.leaf.suppr" \
		--leaf-changes-only --impacted-interfaces || ok=no
	in_place "$name" || ok=no
	if [ $ok = yes ]; then
		"$ABIDIFF" --suppressions "$abi/$name.suppr" "$abi/$name.abi" "$tmp/$name.abi" >"$tmp/$name.add" 2>&1
		added=$(grep -c '^  \[A\] ' "$tmp/$name.add")
		note=
		[ "$added" -eq 0 ] ||
			note=", plus new symbols: $added (make abi-update records them with their version node)"
		echo "$me: $name: $so has the ABI of abi/$name.abi$note"
		return
	fi
	echo "$me: $name: $so changes or removes what abi/$name.abi has." >&2
	echo "$me: by accident: put it back.  On purpose: $bump, run make abi-update, and commit abi/." >&2
	status=1
}

# compare NAME WHAT SUPPR OPTIONS...: abidiff of abi/NAME.abi and the dump
# of the build; 0 when it finds nothing but additions, else its report and
# 1.  abidiff's status is a bit set: 1 error, 2 usage error, 4 a change, 8
# an incompatible one (a removed symbol); additions alone give 0 here
# (--no-added-syms, the suppressions).
compare() {
	name=$1 what=$2 suppr=$3
	shift 3
	"$ABIDIFF" --no-added-syms --suppressions "$suppr" "$@" "$abi/$name.abi" "$tmp/$name.abi" \
		>"$tmp/$name.diff" 2>&1
	rc=$?
	[ $rc -eq 0 ] && return 0
	echo "== abidiff, $what (status $rc):"
	cat "$tmp/$name.diff"
	# a signal, an error
	if [ $rc -ge 16 ] || [ $((rc & 3)) -ne 0 ]; then
		fail "$ABIDIFF failed (status $rc) comparing abi/$name.abi with $so"
	fi
	return 1
}

# A private header named like a public one would count as public: abidw
# tells public types by the base name of the header that defines them.
for h in "$HC_SRCDIR"/include/hicache/*.h "$HC_SRCDIR"/include/hicache/version.h.in; do
	b=$(basename "$h" .in)
	clash=$(find "$HC_SRCDIR/lib" "$HC_SRCDIR/shmpool" -name "$b" 2>/dev/null | head -1)
	[ -z "$clash" ] || fail "${clash#"$HC_SRCDIR"/} is named like the public include/hicache/$b:" \
		"libabigail would take its types for public ones; rename it"
done

status=0
check libhicache "$HC_BUILDDIR/lib/.libs/libhicache.so" \
	"bump the soname (-version-info in Makefile.am) and the version node in lib/libhicache.sym" \
	--headers-dir "$HC_SRCDIR/include/hicache" --headers-dir "$HC_BUILDDIR/include/hicache"
check backend "$HC_BUILDDIR/tests/fixtures/.libs/abi_backend.so" \
	"bump HC_BACKEND_ABI_VERSION in include/hicache/backend.h (every plugin is then rebuilt)" \
	--headers-dir "$HC_SRCDIR/include/hicache"
exit $status
