#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests of the PostgreSQL queue (jobs/pg_store.h):
#   pg_server.sh start DIR   initdb in DIR/data, then a server listening only on the Unix socket
#                            DIR/.s.PGSQL.5432 (no TCP), superuser `postgres`, trust auth on the
#                            socket (the folder is 0700: only its owner, and root, reach it)
#   pg_server.sh stop DIR    stops it and removes DIR
#   pg_server.sh halt DIR    stops it (a fast shutdown: its connections are cut), keeping its data
#   pg_server.sh resume DIR  starts a halted server again (a test that restarts the server mid-job)
# ctest runs `start` once before the tests that need the server and `stop` after them
# (FIXTURES_SETUP / FIXTURES_CLEANUP, tests/CMakeLists.txt); a test process run without ctest
# starts its own with this script (tests/pg_server.h). PostgreSQL refuses to run as root: as root,
# the server runs as the unprivileged `postgres` system user (Debian's package makes it; else
# `nobody`), which owns DIR. The server is disposable: fsync is off.
# The server binaries: from $LLMQ_PG_BINDIR when set (only there), else PATH, else Debian's
# /usr/lib/postgresql/*/bin (the newest). Without them it says so and exits 0: the tests then
# skip, or fail under LLMQ_REQUIRE_REFERENCES=1 (tests/pg_server.h).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 start|stop|halt|resume DIR" >&2; exit 2; }
cmd=$1
dir=$2

find_bin() {
  if [ -n "${LLMQ_PG_BINDIR:-}" ]; then
    [ -x "$LLMQ_PG_BINDIR/$1" ] && echo "$LLMQ_PG_BINDIR/$1"
    return 0
  fi
  command -v "$1" 2>/dev/null && return 0
  local b
  b=$(ls -d /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n 1)
  [ -n "$b" ] && echo "$b"
}
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$owner" -- "$@"
  else
    "$@"
  fi
}
owner=$(id -un)
if [ "$(id -u)" -eq 0 ]; then
  owner=nobody
  getent passwd postgres >/dev/null && owner=postgres
fi

stop() {
  if [ -f "$dir/data/postmaster.pid" ] && [ -n "${pg_ctl:-}" ]; then
    as_owner "$pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

# Starts the server of DIR/data.
serve() {
  as_owner "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 120 \
    -o "-c listen_addresses= -c unix_socket_directories=$dir -c port=5432 -c fsync=off \
-c synchronous_commit=off -c full_page_writes=off -c max_connections=200" start >/dev/null
}

initdb=$(find_bin initdb || true)
pg_ctl=$(find_bin pg_ctl || true)
case "$cmd" in
  stop)
    stop
    ;;
  start)
    stop  # a server left by an interrupted run
    if [ -z "$initdb" ] || [ -z "$pg_ctl" ]; then
      echo "pg_server: PostgreSQL's server binaries (initdb, pg_ctl) are absent (Debian: apt-get" \
        "install postgresql, as scripts/bootstrap does); the PostgreSQL queue tests will skip"
      exit 0
    fi
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown "$owner" "$dir"
    chmod 0700 "$dir"
    if ! as_owner "$initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C \
      >"$dir/initdb.log" 2>&1; then
      cat "$dir/initdb.log" >&2
      echo "pg_server: initdb failed in $dir/data (above)" >&2
      exit 1
    fi
    if ! serve; then
      cat "$dir/server.log" >&2
      echo "pg_server: the server did not start (its log above)" >&2
      exit 1
    fi
    echo "pg_server: PostgreSQL ($("$initdb" --version)) on $dir/.s.PGSQL.5432, as $owner"
    ;;
  halt)
    as_owner "$pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
  resume)
    if ! serve; then
      cat "$dir/server.log" >&2
      echo "pg_server: the server did not start again (its log above)" >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 start|stop|halt|resume DIR" >&2
    exit 2
    ;;
esac
