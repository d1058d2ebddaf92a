#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# installed.sh - what 'make install' put in place, from 'make installcheck'
# (the Makefile passes the directories, with DESTDIR):
#   - each program sits where its man page's section says: bin with a
#     page in section 1, sbin with one in section 8;
#   - systemd-analyze verify passes the installed units, their commands
#     and man pages found where they were installed;
#   - systemd-sysusers makes the user and group hicache from the installed
#     sysusers.d file, in a root of its own.
set -u
fail=0
say() { echo "installed.sh: $*" >&2; fail=1; }

for d in HC_BINDIR HC_SBINDIR HC_MANDIR; do
	eval "v=\${$d:-}"
	[ -n "$v" ] || { echo "installed.sh: $d is not set (run it from make installcheck)" >&2; exit 2; }
done

for p in "$HC_BINDIR"/* "$HC_SBINDIR"/*; do
	[ -f "$p" ] || continue
	name=$(basename "$p")
	case "$p" in
	"$HC_SBINDIR"/*) want=8 other=1 ;;
	*) want=1 other=8 ;;
	esac
	if [ ! -f "$HC_MANDIR/man$want/$name.$want" ]; then
		if [ -f "$HC_MANDIR/man$other/$name.$other" ]; then
			say "$p has its page in section $other: install it in $([ "$other" = 8 ] && echo sbin || echo bin)"
		else
			say "$p has no man page ($HC_MANDIR/man$want/$name.$want)"
		fi
	fi
done

if [ -n "${HC_UNITDIR:-}" ] && [ -d "$HC_UNITDIR" ]; then
	command -v systemd-analyze >/dev/null 2>&1 ||
		{ echo "installed.sh: systemd-analyze is missing: apt-get install systemd (./install-deps.sh does)" >&2; exit 1; }
	# under a DESTDIR the units name the programs where they will be, not
	# where they are: copies that name them where they are
	units=$HC_UNITDIR
	if [ -n "${DESTDIR:-}" ]; then
		units=$(mktemp -d) || exit 1
		for u in "$HC_UNITDIR"/hicache*.service; do
			[ -f "$u" ] && sed "s|=${HC_SBINDIR#"$DESTDIR"}/|=$HC_SBINDIR/|" "$u" >"$units/$(basename "$u")"
		done
	fi
	n=0
	for u in "$units"/hicache*.service; do
		[ -f "$u" ] || continue
		n=$((n + 1))
		# man: the pages the unit's Documentation= names, as installed
		if ! out=$(MANPATH="$HC_MANDIR" systemd-analyze verify --man=yes "$u" 2>&1) || [ -n "$out" ]; then
			printf '%s\n' "$out" >&2
			say "systemd-analyze verify $u did not pass"
		else
			echo "installed.sh: systemd-analyze verify $(basename "$u"): clean"
		fi
	done
	[ "$n" -ge 2 ] || say "$HC_UNITDIR holds $n of the 2 units"
	[ "$units" = "$HC_UNITDIR" ] || rm -rf "$units"
fi

if [ -n "${HC_SYSUSERSDIR:-}" ]; then
	f="$HC_SYSUSERSDIR/hicache.conf"
	root=$(mktemp -d) || exit 1
	mkdir -p "$root/etc"
	if ! systemd-sysusers --root="$root" "$f" >/dev/null 2>&1; then
		say "systemd-sysusers refused $f"
	elif ! grep -q '^hicache:' "$root/etc/passwd" || ! grep -q '^hicache:' "$root/etc/group"; then
		say "systemd-sysusers made no user or group hicache from $f"
	else
		echo "installed.sh: $f makes the user and group hicache"
	fi
	rm -rf "$root"
fi
exit $fail
