#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# backend_example.sh - the example plugin of hicache-backend(7), whose
# source is the man page: extracted from the page (the code between .EX
# and .EE under EXAMPLE, its roff escapes undone), built as a plugin out of
# hicache's tree, and run through hicache-backend-check, which it must pass.
#
# make check runs it on the page of the source tree, built against the
# headers of the tree.  make installcheck runs it on what was installed:
#   HC_EXAMPLE_MAN     the page (default: $HC_SRCDIR/man/hicache-backend.7)
#   HC_EXAMPLE_CFLAGS  how the plugin finds <hicache/backend.h> (default:
#                      -I$HC_SRCDIR/include; installed: pkg-config's)
#   HC_EXAMPLE_CHECK   the checker (default: $HC_BUILDDIR/tools/...)
#   CC                 the compiler (default: cc)

src=${HC_SRCDIR:-.}
man=${HC_EXAMPLE_MAN:-$src/man/hicache-backend.7}
cflags=${HC_EXAMPLE_CFLAGS--I$src/include}
check=${HC_EXAMPLE_CHECK:-${HC_BUILDDIR:-.}/tools/hicache-backend-check}
cc=${CC:-cc}

# The first .EX ... .EE under .SH EXAMPLE, as C.
extract() {
	awk '/^\.SH EXAMPLE/ { ex = 1; next }
		ex && /^\.SH / { exit }
		ex && /^\.EX/ { code = 1; next }
		code && /^\.EE/ { exit }
		code { print }' "$man" |
		sed -e 's/\\-/-/g' -e "s/\\\\(aq/'/g" -e 's/\\(dq/"/g' -e 's/\\(ha/^/g' -e 's/\\(ti/~/g' \
			-e 's/\\&//g' -e 's/\\e/\\/g'
}

[ -r "$man" ] || { echo "backend_example.sh: cannot read $man" >&2; exit 99; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hc-example.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

extract >"$tmp/heap.c"
if ! grep -q 'hc_backend_entry' "$tmp/heap.c" || grep -q '^\.' "$tmp/heap.c"; then
	echo "backend_example.sh: no example plugin under EXAMPLE in $man" >&2
	exit 1
fi
if grep -n '\\[-(&e]' "$tmp/heap.c"; then
	echo "backend_example.sh: roff escapes left in the example of $man (above)" >&2
	exit 1
fi
echo "backend_example.sh: $man: $(wc -l <"$tmp/heap.c") lines; $cc $cflags"
# shellcheck disable=SC2086 # the flags are words
$cc -std=gnu11 -Wall -Wextra -Werror -O2 -shared -fPIC -fvisibility=hidden -pthread $cflags \
	-o "$tmp/heap.so" "$tmp/heap.c" || {
	echo "backend_example.sh: the example of $man does not build" >&2
	exit 1
}
"$check" "$tmp/heap.so" || {
	echo "backend_example.sh: the example of $man fails hicache-backend-check (above)" >&2
	exit 1
}
