#!/usr/bin/env bash
# fetch.sh DEST [next]: the servers of the version matrix (issue 16), from
# Debian's packages, on a Debian 12 machine that reaches only the package
# registry. Nothing is installed: apt-get downloads the packages into
# DEST/apt-SUITE with its own lists (the system's apt state is untouched),
# dpkg -x unpacks them into DEST/root-SUITE, and each server gets a
# directory of wrappers named as the tests call them (redis-server,
# redis-cli, redis-benchmark) that run the binary with that suite's dynamic
# loader and libraries:
#
#   DEST/redis-8.0/redis-server   Redis 8.0.x  (Debian 13, trixie)
#   DEST/valkey-8.1/redis-server  Valkey 8.1.x (Debian 13, trixie)
#   DEST/valkey-9.1/redis-server  Valkey 9.1.x (Debian unstable, with "next";
#                                 not in the matrix yet: its suites differ)
#
# Debian 13's are fixed for its life; unstable moves, so its server is
# fetched only when asked ("next", make test-matrix) and a version that
# moved is skipped with a message, where a moved Debian 13 version fails.
# A test run puts one of the directories first in PATH; the wrappers find
# their libraries relative to themselves, so DEST may move. A second call
# with every server starting does nothing; delete DEST to fetch again.
# amd64 only (the packages and the loader's path are).
set -euo pipefail

dest=${1:?usage: fetch.sh DEST [next]}
next=${2:-}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

# The servers' own packages and every library they load that Debian 12's
# differ from (the loader is the suite's, so all of them come from there).
libs=(libc6 libgcc-s1 libstdc++6 libatomic1 libjemalloc2 liblzf1 libssl3t64 libzstd1 zlib1g libsystemd0 libcap2)

# unpack SUITE PACKAGE...: download and unpack into DEST/root-SUITE.
unpack() {
  local suite=$1
  shift
  local apt="$dest/apt-$suite" root="$dest/root-$suite"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" >"$apt/sources.list"
  : >"$apt/status"
  local opts=(
    -o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "Dir::State::status=$apt/status"
    -o APT::Architecture=amd64 -o APT::Sandbox::User="$(id -un)" -q
  )
  echo "fetch.sh: Debian $suite package lists into $apt"
  apt-get "${opts[@]}" update >/dev/null
  (cd "$apt/debs" && rm -f ./*.deb && apt-get "${opts[@]}" download "$@" "${libs[@]}" >/dev/null)
  rm -rf "$root" && mkdir -p "$root"
  for deb in "$apt"/debs/*.deb; do
    dpkg -x "$deb" "$root"
  done
}

# wrap SUITE DIR NAME TARGET ARGV0: DIR/NAME runs root-SUITE's TARGET as ARGV0.
wrap() {
  mkdir -p "$dest/$2"
  cat >"$dest/$2/$3" <<WRAP
#!/bin/sh
# Debian $1's $4, run as $5 by that suite's loader (test/servers/fetch.sh).
r=\$(cd "\$(dirname "\$0")/../root-$1" && pwd) || exit 127
exec "\$r/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \\
  --library-path "\$r/lib/x86_64-linux-gnu:\$r/usr/lib/x86_64-linux-gnu" \\
  --argv0 $5 "\$r/usr/bin/$4" "\$@"
WRAP
  chmod +x "$dest/$2/$3"
}

# server SUITE DIR FLAVOUR: the wrappers of a Redis or Valkey build.
server() {
  local check=$3-check-rdb
  wrap "$1" "$2" redis-server "$check" "$3-server"
  wrap "$1" "$2" redis-cli "$3-cli" "$3-cli"
  wrap "$1" "$2" redis-benchmark "$3-benchmark" "$3-benchmark"
}

# promised DIR: whether DIR's server is the version its name promises
# (DIR is "redis-8.0": a "v=8.0." build).
promised() {
  local got
  got=$("$dest/$1/redis-server" --version)
  case "$got" in
  *" v=${1#*-}."*) echo "fetch.sh: $1: $got" ;;
  *)
    echo "fetch.sh: $1: the suite now has $got" >&2
    rm -rf "${dest:?}/$1"
    return 1
    ;;
  esac
}

# runs DIR: whether DIR's server is there and starts.
runs() { "$dest/$1/redis-server" --version >/dev/null 2>&1; }

if ! runs redis-8.0 || ! runs valkey-8.1; then
  unpack trixie redis-tools valkey-tools
  server trixie redis-8.0 redis
  server trixie valkey-8.1 valkey
  # The directory names promise a version: fail rather than test another.
  promised redis-8.0 || { echo "fetch.sh: update the matrix (test/servers/fetch.sh, Makefile MATRIX)" >&2; exit 1; }
  promised valkey-8.1 || { echo "fetch.sh: update the matrix (test/servers/fetch.sh, Makefile MATRIX)" >&2; exit 1; }
fi

if [ "$next" = next ] && ! runs valkey-9.1; then
  unpack sid valkey-tools
  server sid valkey-9.1 valkey
  promised valkey-9.1 || echo "fetch.sh: valkey-9.1 skipped (Debian unstable moved on)" >&2
fi
exit 0
