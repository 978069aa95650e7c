#!/bin/sh
# The service files of systemd/ (issue 8, done-when 1): `systemd-analyze verify` prints nothing
# for llmq.service and the llmq-night-* example (start at 22:00, stop at 06:00), `systemd-analyze security --offline=yes` rates its exposure at 2.0 or lower,
# and the sysusers.d / tmpfiles.d snippets create the user and the spool folders (in a scratch
# root, when running as root: the folders are chowned to the new user).
# Usage: systemd_unit_test.sh SYSTEMD_SOURCE_DIR LLMQ_BINARY WORK_DIR. Exits 77 (skipped) without
# systemd-analyze.
set -eu
src=$1
bin=$2
work=$3
# shellcheck source=tests/service_test_lib.sh
. "$(dirname "$0")/service_test_lib.sh"

if ! command -v systemd-analyze >/dev/null 2>&1; then
  skip "systemd-analyze is absent (Debian: the systemd package; scripts/bootstrap installs it)"
fi
rm -rf "$work"
mkdir -p "$work"

# shellcheck disable=SC2016 # $MAINPID is the unit's, not the shell's.
# The settings the service depends on are there, and PrivateDevices= (which hides the GPUs) is not.
for line in 'Type=notify' 'ExecStart=/usr/bin/llmq serve --config /etc/llmq/llmq.yaml' \
  'ExecReload=/bin/kill -HUP $MAINPID' 'Restart=on-failure' 'User=llmq' 'Group=llmq' \
  'StateDirectory=llmq' 'RuntimeDirectory=llmq' 'DevicePolicy=closed' \
  'DeviceAllow=char-nvidia* rw' 'ProtectSystem=strict' 'NoNewPrivileges=yes' \
  'RestrictAddressFamilies=AF_UNIX' 'WantedBy=multi-user.target'; do
  grep -qxF "$line" "$src/llmq.service" || fail "llmq.service lacks the line: $line"
done
grep -q '^WatchdogSec=' "$src/llmq.service" || fail "llmq.service sets no WatchdogSec="
grep -q '^TimeoutStopSec=' "$src/llmq.service" || fail "llmq.service sets no TimeoutStopSec="
if grep -q '^PrivateDevices=' "$src/llmq.service"; then
  fail "llmq.service sets PrivateDevices=, which hides /dev/nvidia*"
fi

# verify checks that ExecStart's binary exists: a copy of the unit runs the build's binary.
sed "s|^ExecStart=/usr/bin/llmq |ExecStart=$bin |" "$src/llmq.service" >"$work/llmq.service"
grep -qF "ExecStart=$bin serve " "$work/llmq.service" || fail "could not point ExecStart at $bin"
rc=0
out=$(systemd-analyze verify "$work/llmq.service" 2>&1) || rc=$?
if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
  fail "systemd-analyze verify (exit $rc) printed:
$out"
fi
echo "systemd-analyze verify llmq.service: exit 0, no output"

# The drop-in for metrics over HTTP verifies with the unit, and lets it use IPv4 on loopback only.
mkdir -p "$work/llmq.service.d"
cp "$src/llmq-metrics-http.conf" "$work/llmq.service.d/metrics-http.conf"
rc=0
out=$(systemd-analyze verify "$work/llmq.service" 2>&1) || rc=$?
if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
  fail "systemd-analyze verify llmq.service with llmq-metrics-http.conf (exit $rc) printed:
$out"
fi
for line in 'RestrictAddressFamilies=AF_UNIX AF_INET' 'PrivateNetwork=no' 'IPAddressAllow=localhost'; do
  grep -qxF "$line" "$src/llmq-metrics-http.conf" || fail "llmq-metrics-http.conf lacks: $line"
done
rm -r "$work/llmq.service.d"
echo "systemd-analyze verify llmq.service with the llmq-metrics-http.conf drop-in: exit 0, no output"

# The nightly-run example (the systemd-timer alternative to serve.run_windows): the timers and the
# stopping service verify cleanly beside the unit, start and stop at the documented times, and
# name units that exist (verify does not check a timer's Unit=).
night="llmq-night-start.timer llmq-night-stop.timer llmq-night-stop.service"
for f in $night; do cp "$src/$f" "$work/$f"; done
grep -qxF 'OnCalendar=*-*-* 22:00:00' "$work/llmq-night-start.timer" ||
  fail "llmq-night-start.timer does not start at 22:00"
grep -qxF 'Unit=llmq.service' "$work/llmq-night-start.timer" ||
  fail "llmq-night-start.timer does not start llmq.service"
grep -qxF 'OnCalendar=*-*-* 06:00:00' "$work/llmq-night-stop.timer" ||
  fail "llmq-night-stop.timer does not stop at 06:00"
grep -qxF 'Unit=llmq-night-stop.service' "$work/llmq-night-stop.timer" ||
  fail "llmq-night-stop.timer does not run llmq-night-stop.service"
grep -qxF 'ExecStart=/bin/systemctl --no-block stop llmq.service' "$work/llmq-night-stop.service" ||
  fail "llmq-night-stop.service does not stop llmq.service"
rc=0
# shellcheck disable=SC2086 # $night is a list of names.
out=$(cd "$work" && systemd-analyze verify $night 2>&1) || rc=$?
if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
  fail "systemd-analyze verify $night (exit $rc) printed:
$out"
fi
echo "systemd-analyze verify $night: exit 0, no output"

rc=0
out=$(systemd-analyze security --offline=yes "$work/llmq.service" 2>&1) || rc=$?
score=$(printf '%s\n' "$out" |
  sed -n 's/.*Overall exposure level for llmq\.service: \([0-9.]*\).*/\1/p')
if [ "$rc" -ne 0 ] || [ -z "$score" ]; then
  fail "systemd-analyze security (exit $rc) printed:
$out"
fi
awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' || fail "exposure $score is over 2.0:
$out"
echo "What still counts against it:"
printf '%s\n' "$out" | grep '✗' || true
echo "systemd-analyze security --offline=yes llmq.service: exposure $score (at most 2.0)"

if [ "$(id -u)" -ne 0 ]; then
  echo "(not root: the sysusers.d / tmpfiles.d snippets are not applied; their chown needs root)"
  exit 0
fi
root=$work/root
mkdir -p "$root/etc"
systemd-sysusers --root="$root" "$src/llmq.sysusers.conf" 2>&1
grep -q '^llmq:x:[0-9]*:[0-9]*:[^:]*:/var/lib/llmq:/usr/sbin/nologin$' "$root/etc/passwd" ||
  fail "systemd-sysusers wrote no llmq user with home /var/lib/llmq: $(cat "$root/etc/passwd")"
grep -q '^llmq:x:' "$root/etc/group" || fail "systemd-sysusers wrote no llmq group"
uid=$(sed -n 's/^llmq:x:\([0-9]*\):.*/\1/p' "$root/etc/passwd")
gid=$(sed -n 's/^llmq:x:\([0-9]*\):.*/\1/p' "$root/etc/group")
systemd-tmpfiles --root="$root" --create "$src/llmq.tmpfiles.conf"
check_spool_layout "$root" "$uid" "$gid"
echo "llmq.sysusers.conf and llmq.tmpfiles.conf: user llmq ($uid), spool folders with their modes"
