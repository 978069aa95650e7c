# shellcheck shell=sh
# Shared by the shell tests of the service (sourced).

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Reported by ctest as skipped (SKIP_RETURN_CODE 77 in tests/CMakeLists.txt).
skip() {
  echo "SKIP: $*"
  exit 77
}

# check_spool_layout ROOT UID GID: the state folder and the spool folders that
# systemd/llmq.tmpfiles.conf makes exist under ROOT with their modes, owned by UID:GID.
check_spool_layout() {
  for want in "/var/lib/llmq 750" "/var/lib/llmq/inbox 2770" "/var/lib/llmq/outbox 750" \
    "/var/lib/llmq/archive 750" "/var/lib/llmq/failed 750"; do
    dir=${want% *}
    got=$(stat -c '%a %u %g' "$1$dir") || fail "$dir was not created"
    [ "$got" = "${want#* } $2 $3" ] || fail "$dir is '$got' (mode uid gid), not '${want#* } $2 $3'"
  done
}
