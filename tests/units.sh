#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# units.sh - the systemd units as built: hicached@.service is Type=notify,
# and 'systemd-analyze security' rates it and hicache-memd.service under
# 4.5 (each unit's comments say why each point it still counts is kept).  The rating reads
# the file itself (--offline), so no systemd need run here.

cd "${HC_BUILDDIR:-.}" || exit 99
limit=4.5

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "units.sh: systemd-analyze is missing: apt-get install systemd (./install-deps.sh does)" >&2
	exit 1
fi
for unit in tools/daemon/hicached@.service tools/memd/hicache-memd.service; do
	grep -qx "User=hicache" "$unit" ||
		{ echo "units.sh: $unit does not run as hicache (hicache.sysusers)" >&2; exit 1; }
done
grep -qx 'Type=notify' tools/daemon/hicached@.service ||
	{ echo "units.sh: tools/daemon/hicached@.service is not Type=notify" >&2; exit 1; }
for unit in tools/daemon/hicached@.service tools/memd/hicache-memd.service; do
	[ -f "$unit" ] || { echo "units.sh: $unit is not built" >&2; exit 1; }
	out=$(systemd-analyze security --offline=true --no-pager "$unit" 2>&1)
	score=$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
	if [ -z "$score" ]; then
		printf '%s\n' "$out" >&2
		echo "units.sh: $unit: no exposure level in systemd-analyze's answer" >&2
		exit 1
	fi
	echo "units.sh: $unit: exposure $score (limit $limit)"
	if ! awk -v s="$score" -v l="$limit" 'BEGIN { exit !(s < l) }'; then
		printf '%s\n' "$out" >&2
		echo "units.sh: $unit rates $score, not under $limit" >&2
		exit 1
	fi
done
