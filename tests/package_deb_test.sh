#!/bin/sh
# The .deb (issue 8, done-when 3), in three ctest tests sharing DEB_DIR:
#   build CPACK CPACK_CONFIG DEB_DIR  cpack builds llmq_*.deb into DEB_DIR (the fixture).
#   contents DEB_DIR                  dpkg-deb -c / -I show the files, the conffile, the Debian
#                                     library dependencies and the maintainer scripts.
#   install DEB_DIR                   as root only: dpkg -i puts the binary, the unit, the user and
#                                     the folders in place without enabling or starting anything;
#                                     a reinstall keeps an edited /etc/llmq/llmq.yaml; dpkg -r keeps
#                                     /var/lib/llmq; dpkg --purge removes it. The machine is left as
#                                     it was (the package purged, a user the test created deleted).
#                                     LLMQ_TEST_DPKG_INSTALL=0 skips it.
# Exits 77 (skipped) where a tool is missing, or the install test must not run.
set -eu
# shellcheck source=tests/service_test_lib.sh
. "$(dirname "$0")/service_test_lib.sh"

need() {
  command -v "$1" >/dev/null 2>&1 || skip "$1 is absent ($2; scripts/bootstrap installs it)"
}

mode=$1
shift
# Where the build is skipped, so are the tests of its package.
need dpkg-deb "Debian's dpkg"
need dpkg-shlibdeps "Debian's dpkg-dev"
case "$mode" in
  build)
    cpack=$1 config=$2 debs=$3
    rm -rf "$debs"
    mkdir -p "$debs"
    "$cpack" --config "$config" -G DEB -B "$debs" || fail "cpack -G DEB failed"
    find "$debs" -maxdepth 1 -name 'llmq_*.deb' | grep -q . || fail "cpack made no llmq_*.deb"
    exit 0
    ;;
  contents | install)
    debs=$1
    ;;
  *)
    fail "unknown mode $mode"
    ;;
esac

deb=$(find "$debs" -maxdepth 1 -name 'llmq_*.deb' | head -n 1)
[ -n "$deb" ] || fail "no llmq_*.deb in $debs (the package_deb_build test makes it)"
echo "package: $deb"

if [ "$mode" = contents ]; then
  files=$(dpkg-deb -c "$deb" | awk '{ print $1, $6 }')
  printf '%s\n' "$files"
  for want in '-rwxr-xr-x ./usr/bin/llmq' '-rw-r--r-- ./lib/systemd/system/llmq.service' \
    '-rw-r--r-- ./usr/lib/sysusers.d/llmq.conf' '-rw-r--r-- ./usr/lib/tmpfiles.d/llmq.conf' \
    '-rw-r--r-- ./etc/llmq/llmq.yaml'; do
    printf '%s\n' "$files" | grep -qxF -- "$want" || fail "the package lacks: $want"
  done
  # Nothing else: every regular file is one of the five.
  n=$(printf '%s\n' "$files" | grep -c '^-' || true)
  [ "$n" -eq 5 ] || fail "the package holds $n files, not 5"
  unit=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/systemd/system/llmq.service)
  printf '%s\n' "$unit" | grep -qxF 'ExecStart=/usr/bin/llmq serve --config /etc/llmq/llmq.yaml' ||
    fail "the packaged unit does not run /usr/bin/llmq"

  info=$(dpkg-deb -I "$deb")
  printf '%s\n' "$info"
  field() { dpkg-deb -f "$deb" "$1"; }
  [ "$(field Package)" = llmq ] || fail "Package is '$(field Package)', not llmq"
  [ "$(field Architecture)" = "$(dpkg --print-architecture)" ] || fail "wrong Architecture"
  depends=$(field Depends)
  # The binary's libraries, as Debian packages found by dpkg-shlibdeps, and systemd.
  for pkg in systemd libc6 libstdc++6 libgomp1 libsqlite3-0 libpq5 libssl3 libyaml-cpp0.7 \
    libsentencepiece0 libsystemd0; do
    printf '%s\n' "$depends" | tr ',' '\n' | sed 's/^ *//; s/ .*//' | grep -qxF "$pkg" ||
      fail "Depends lacks $pkg: $depends"
  done
  # Only packages: no -dev package, nothing that is not a Debian package name.
  if printf '%s\n' "$depends" | grep -q -- '-dev\b'; then fail "Depends names a -dev package"; fi
  for script in postinst prerm postrm conffiles; do
    printf '%s\n' "$info" | grep -qE "^ +[0-9]+ bytes, +[0-9]+ lines +(\* +)?$script( |$)" ||
      fail "the control archive lacks $script"
  done
  ctl=$(mktemp -d)
  trap 'rm -rf "$ctl"' EXIT
  dpkg-deb -e "$deb" "$ctl"
  [ "$(cat "$ctl/conffiles")" = /etc/llmq/llmq.yaml ] || fail "conffiles: $(cat "$ctl/conffiles")"
  for script in postinst prerm postrm; do
    [ -x "$ctl/$script" ] || fail "$script is not executable"
    sh -n "$ctl/$script" || fail "$script is not valid sh"
  done
  # The postinst neither enables nor starts the service.
  starts='systemctl[^#]*(enable|start)|deb-systemd-invoke +(start|restart)'
  if grep -Eq "$starts" "$ctl/postinst"; then
    fail "postinst starts or enables the service"
  fi
  echo "contents: 5 files at their places, conffile, Depends: $depends"
  exit 0
fi

# --- install ----------------------------------------------------------------------------------
[ "${LLMQ_TEST_DPKG_INSTALL:-1}" != 0 ] || skip "LLMQ_TEST_DPKG_INSTALL=0"
[ "$(id -u)" -eq 0 ] || skip "dpkg -i needs root (CI runs the tests as root)"
# Two test runs on one machine take turns.
exec 9>/tmp/llmq-package-deb-install-test.lock
flock -w 600 9 || fail "another run of this test held /tmp/llmq-package-deb-install-test.lock"
# Never touch a real installation or its data: purge would delete /var/lib/llmq.
if dpkg-query -W -f='${Status}' llmq 2>/dev/null | grep -q 'installed'; then
  skip "the llmq package is installed on this machine; not touching it"
fi
for p in /var/lib/llmq /etc/llmq /usr/bin/llmq /lib/systemd/system/llmq.service; do
  [ ! -e "$p" ] || skip "$p exists on this machine (the package's purge would remove it)"
done
had_user=no
had_group=no
getent passwd llmq >/dev/null && had_user=yes
getent group llmq >/dev/null && had_group=yes

cleanup() {
  if dpkg-query -W -f='${Status}' llmq 2>/dev/null | grep -q 'installed\|config-files'; then
    dpkg --purge llmq >/dev/null 2>&1 || true
  fi
  if [ "$had_user" = no ] && getent passwd llmq >/dev/null; then userdel llmq || true; fi
  if [ "$had_group" = no ] && getent group llmq >/dev/null; then groupdel llmq || true; fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
echo "--- dpkg -i"
dpkg -i "$deb" || fail "dpkg -i failed"
[ "$(dpkg-query -W -f='${Status}' llmq)" = "install ok installed" ] || fail "not installed"
for f in /usr/bin/llmq /lib/systemd/system/llmq.service /usr/lib/sysusers.d/llmq.conf \
  /usr/lib/tmpfiles.d/llmq.conf /etc/llmq/llmq.yaml; do
  [ -f "$f" ] || fail "$f is missing"
done
dpkg-query -W -f='${Conffiles}\n' llmq | grep -q '^ /etc/llmq/llmq.yaml ' ||
  fail "/etc/llmq/llmq.yaml is not a conffile"
/usr/bin/llmq --version || fail "/usr/bin/llmq --version failed"
pw=$(getent passwd llmq) || fail "no llmq user"
printf '%s\n' "$pw" | grep -q ':/var/lib/llmq:/usr/sbin/nologin$' || fail "llmq user: $pw"
getent group llmq >/dev/null || fail "no llmq group"
check_spool_layout "" "$(id -u llmq)" "$(getent group llmq | cut -d: -f3)"
# Nothing enabled or started.
if ls /etc/systemd/system/*.wants/llmq.service >/dev/null 2>&1; then fail "llmq.service enabled"; fi
if [ -d /run/systemd/system ]; then
  [ "$(systemctl is-active llmq.service || true)" != active ] || fail "llmq.service was started"
fi
if command -v systemd-analyze >/dev/null 2>&1; then
  out=$(systemd-analyze verify /lib/systemd/system/llmq.service 2>&1) ||
    fail "systemd-analyze verify of the installed unit: $out"
  [ -z "$out" ] || fail "systemd-analyze verify of the installed unit printed: $out"
fi
echo "installed: binary, unit, snippets, conffile, user llmq, spool folders; nothing enabled"

echo "--- reinstall with an edited config"
echo "# edited by the test" >>/etc/llmq/llmq.yaml
dpkg -i "$deb" || fail "reinstalling failed"
tail -n 1 /etc/llmq/llmq.yaml | grep -qx '# edited by the test' ||
  fail "the edited config was replaced"

echo "--- dpkg -r"
echo '{}' >/var/lib/llmq/outbox/kept.results.jsonl
dpkg -r llmq || fail "dpkg -r failed"
for p in /usr/bin/llmq /lib/systemd/system/llmq.service; do
  [ ! -e "$p" ] || fail "$p is left after dpkg -r"
done
[ -f /var/lib/llmq/outbox/kept.results.jsonl ] || fail "dpkg -r deleted /var/lib/llmq"
[ -f /etc/llmq/llmq.yaml ] || fail "dpkg -r deleted the conffile"

echo "--- dpkg --purge"
dpkg --purge llmq || fail "dpkg --purge failed"
for p in /var/lib/llmq /etc/llmq /etc/systemd/system/llmq.service \
  /var/lib/systemd/deb-systemd-helper-enabled/llmq.service.dsh-also \
  /var/lib/systemd/deb-systemd-helper-masked/llmq.service; do
  if [ -e "$p" ] || [ -L "$p" ]; then fail "$p is left after purge"; fi
done
if dpkg-query -W -f='${Status}' llmq 2>/dev/null | grep -q 'installed\|config-files'; then
  fail "llmq is still known to dpkg after purge"
fi
echo "removed: files gone on remove, state kept until purge, purge leaves nothing"
