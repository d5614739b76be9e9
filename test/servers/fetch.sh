#!/usr/bin/env bash
# fetch.sh DEST: Redis 8.0 and Valkey 8.1 for the version matrix (issue 16),
# from Debian 13's packages, on a Debian 12 machine that reaches only the
# package registry. Nothing is installed: apt-get downloads the packages
# into DEST/apt with its own lists (the system's apt state is untouched),
# dpkg -x unpacks them into DEST/root, and each server gets a directory of
# wrappers named as the tests call them (redis-server, redis-cli,
# redis-benchmark) that run the binary with Debian 13's dynamic loader and
# libraries:
#
#   DEST/redis-8.0/redis-server   Redis 8.0.x  (redis-check-rdb called as redis-server)
#   DEST/valkey-8.1/redis-server  Valkey 8.1.x (valkey-check-rdb called as valkey-server)
#
# A test run puts one of those directories first in PATH. A second call
# with everything in place does nothing; delete DEST to fetch again.
set -euo pipefail

dest=${1:?usage: fetch.sh DEST}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
if [ -x "$dest/redis-8.0/redis-server" ] && [ -x "$dest/valkey-8.1/redis-server" ]; then
  exit 0
fi

suite=trixie
apt="$dest/apt"
root="$dest/root"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" >"$apt/sources.list"
: >"$apt/status"
opts=(
  -o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "Dir::State::status=$apt/status"
  -o APT::Architecture=amd64 -o APT::Sandbox::User="$(id -un)" -q
)
echo "fetch.sh: Debian $suite package lists into $apt"
apt-get "${opts[@]}" update >/dev/null

# The servers' own packages and every library they load that Debian 12's
# differ from (the loader is Debian 13's, so all of them come from there).
pkgs=(redis-tools valkey-tools libc6 libgcc-s1 libstdc++6 libatomic1 libjemalloc2
  liblzf1 libssl3t64 libzstd1 zlib1g libsystemd0 libcap2)
(cd "$apt/debs" && rm -f ./*.deb && apt-get "${opts[@]}" download "${pkgs[@]}" >/dev/null)
rm -rf "$root" && mkdir -p "$root"
for deb in "$apt"/debs/*.deb; do
  dpkg -x "$deb" "$root"
done

# wrap DIR NAME TARGET ARGV0: DIR/NAME runs root's TARGET as ARGV0.
wrap() {
  mkdir -p "$1"
  cat >"$1/$2" <<WRAP
#!/bin/sh
r='$root'
exec "\$r/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \\
  --library-path "\$r/lib/x86_64-linux-gnu:\$r/usr/lib/x86_64-linux-gnu" \\
  --argv0 $4 "\$r/usr/bin/$3" "\$@"
WRAP
  chmod +x "$1/$2"
}
wrap "$dest/redis-8.0" redis-server redis-check-rdb redis-server
wrap "$dest/redis-8.0" redis-cli redis-cli redis-cli
wrap "$dest/redis-8.0" redis-benchmark redis-benchmark redis-benchmark
wrap "$dest/valkey-8.1" redis-server valkey-check-rdb valkey-server
wrap "$dest/valkey-8.1" redis-cli valkey-cli valkey-cli
wrap "$dest/valkey-8.1" redis-benchmark valkey-benchmark valkey-benchmark

# The directory names promise a version: fail rather than test another.
for v in redis-8.0 valkey-8.1; do
  got=$("$dest/$v/redis-server" --version)
  case "$got" in
  *" v=${v#*-}."*) echo "fetch.sh: $v: $got" ;;
  *)
    echo "fetch.sh: $v: Debian $suite now has $got; update the matrix (test/servers/fetch.sh, Makefile MATRIX)" >&2
    rm -rf "$dest/$v"
    exit 1
    ;;
  esac
done
