#!/bin/sh
# install-deps.sh - install what building and testing hicache needs on
# Debian 12, and nothing that is already there.  Safe to run again.
set -e
PKGS="build-essential autoconf automake libtool pkg-config check libsubunit-dev
      libssl-dev libnuma-dev libjson-c-dev libck-dev python3
      liburing-dev libxxhash-dev libinih-dev libsystemd-dev fio
      libmemcached-dev memcached sasl2-bin libucx-dev ucx-utils iproute2 clang
      abigail-tools clang-format python3-torch systemd prometheus
      python3-prometheus-client librsvg2-bin"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "install-deps.sh: installing$missing"
$SUDO apt-get update -qq
# $missing is a list of package names: split it on purpose.
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
