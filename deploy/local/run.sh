#!/usr/bin/env bash
# Runs Cicada in front of a local Redis (what `make run` does).
#
# Upstream: $UPSTREAM if set; else a Redis already answering on
# 127.0.0.1:6379; else a throw-away redis-server on a free port from 6390,
# installed with apt-get if missing and stopped (its data dir removed) on exit.
# Cicada runs in the foreground with `--upstream <addr> $ARGS "$@"`; ARGS
# is split at whitespace with no quoting (a value with spaces goes in its
# CICADA_ environment variable, or in "$@").
#
# Usage: deploy/local/run.sh [cicada flags...]
#        UPSTREAM=host:port ARGS='--loops 2' deploy/local/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# as_root runs a command as root: directly when root, else with sudo if present.
as_root() {
  if [[ $(id -u) == 0 ]] || ! command -v sudo >/dev/null; then "$@"; else sudo "$@"; fi
}

# ensure_redis installs redis-server if missing; apt-get update only if the
# first install fails.
ensure_redis() {
  command -v redis-server >/dev/null && return
  echo "run.sh: installing redis-server" >&2
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get install -y -q redis-server ||
    { as_root apt-get update -q && as_root apt-get install -y -q redis-server; }
}

# redis_answers HOST PORT: true if a Redis there answers PING with +PONG or
# -NOAUTH within 1 s. Uses bash's /dev/tcp: redis-cli may not be installed.
redis_answers() {
  local reply
  # shellcheck disable=SC2016 # $1 and $2 expand in the inner bash
  reply=$(timeout 1 bash -c '
    exec 3<>"/dev/tcp/$1/$2" || exit 1
    printf "PING\r\n" >&3
    IFS= read -r line <&3 && printf "%s" "$line"' _ "$1" "$2" 2>/dev/null) || return 1
  [[ $reply == +PONG* || $reply == -NOAUTH* ]]
}

# port_free PORT: true if nothing accepts connections on 127.0.0.1:PORT.
port_free() {
  # shellcheck disable=SC2016 # $1 expands in the inner bash
  ! timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# flag_value NAME DEFAULT ARGS...: the last value given to --NAME in ARGS.
flag_value() {
  local name=$1 value=$2
  shift 2
  while (($#)); do
    case $1 in
      "--$name") value=${2:-$value}; shift ;;
      "--$name="*) value=${1#*=} ;;
    esac
    shift
  done
  printf '%s' "$value"
}

redis_pid=""
redis_dir=""
stop_redis() {
  if [[ -n $redis_pid ]]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    echo "run.sh: stopped redis-server (pid $redis_pid)" >&2
    redis_pid=""
  fi
  if [[ -n $redis_dir ]]; then
    rm -rf "$redis_dir"
    redis_dir=""
  fi
}
trap stop_redis EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_redis starts a throw-away redis-server on a free port and sets
# upstream to its address.
start_redis() {
  ensure_redis
  local port
  for port in $(seq 6390 6490); do
    if port_free "$port"; then break; fi
    port=""
  done
  if [[ -z $port ]]; then
    echo "run.sh: no free port in 6390-6490 for redis-server" >&2
    exit 1
  fi
  redis_dir=$(mktemp -d)
  # Its own session: Ctrl-C reaches Cicada only, and the EXIT trap stops
  # Redis once Cicada has shut down.
  setsid redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$redis_dir" --daemonize no >"$redis_dir/redis.log" 2>&1 &
  redis_pid=$!
  local i
  for i in $(seq 100); do
    if redis_answers 127.0.0.1 "$port"; then
      upstream=127.0.0.1:$port
      how="redis-server started on $upstream (pid $redis_pid; stopped on exit)"
      return
    fi
    if ! kill -0 "$redis_pid" 2>/dev/null; then
      echo "run.sh: redis-server exited at start:" >&2
      cat "$redis_dir/redis.log" >&2
      redis_pid=""
      exit 1
    fi
    sleep 0.1
  done
  echo "run.sh: redis-server on port $port did not answer PING after $((i / 10)) s" >&2
  exit 1
}

if [[ -n ${UPSTREAM:-} ]]; then
  upstream=$UPSTREAM
  how="Redis at $upstream (from UPSTREAM)"
elif redis_answers 127.0.0.1 6379; then
  upstream=127.0.0.1:6379
  how="the Redis already running on $upstream"
else
  start_redis
fi

if command -v make >/dev/null; then
  make -s build
else
  CGO_ENABLED=0 go build -trimpath -o bin/cicada ./cmd/cicada
fi

read -r -a extra <<<"${ARGS:-}"
all=("${extra[@]}" "$@")
# Loopback unless asked otherwise: Redis trusts Cicada's connections as local
# (protected mode no longer applies), so a development run stays private.
listen=$(flag_value listen "${CICADA_LISTEN:-127.0.0.1:6380}" "${all[@]}")
admin=$(flag_value admin "${CICADA_ADMIN:-127.0.0.1:9121}" "${all[@]}")
echo "run.sh: upstream: $how; Cicada listens on $listen, admin on $admin" >&2

# Not exec: the EXIT trap must stop the redis-server after Cicada exits.
# Human-readable logs unless asked otherwise (a later --log-format wins).
bin/cicada --upstream "$upstream" --listen "$listen" --admin "$admin" \
  --log-format "${CICADA_LOG_FORMAT:-console}" "${all[@]}"
