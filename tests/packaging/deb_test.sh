#!/usr/bin/env bash
# The Debian package: scripts/make-deb.sh builds it from the build's binary; its files, its
# control fields and its conffile are as the README says; the packaged binary runs; and every
# systemd unit passes `systemd-analyze verify` with nothing to say (an unknown key, a missing
# binary or a bad dependency each print a line, which fails the test).
# Usage: deb_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

deb=$(bash "$src/scripts/make-deb.sh" "$build" "$work")
[[ -f $deb ]] || fail "make-deb.sh printed $deb, which is not a file"

info=$(dpkg-deb --field "$deb" Package Architecture Depends)
grep -q '^Package: bmas$' <<<"$info" || fail "Package field: $info"
grep -q 'libssl3' <<<"$info" || fail "Depends lacks the libraries dpkg-shlibdeps finds: $info"
grep -q 'chromium\|g++\|build-essential' <<<"$info" && fail "a node must not pull browsers or compilers: $info"
[[ $(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles) == /etc/bmas/bmas.toml ]] ||
  fail "conffiles is not /etc/bmas/bmas.toml"

root="$work/root"
dpkg-deb -x "$deb" "$root"
for f in usr/bin/bmas etc/bmas/bmas.toml lib/systemd/system/bmas-agent.service \
         lib/systemd/system/bmas-gateway.service lib/systemd/system/bmas-join.service; do
  [[ -e $root/$f ]] || fail "the package lacks /$f"
done
[[ $("$root/usr/bin/bmas" --version) == bmas* ]] || fail "the packaged binary does not run"

units=("$root"/lib/systemd/system/bmas-*.service)
((${#units[@]} == $(ls "$src"/packaging/systemd/*.service | wc -l))) || fail "a unit is missing"
if command -v systemd-analyze >/dev/null; then
  # Against the package's own tree, with the host's stock units beside it (targets, network).
  cp -an /lib/systemd/system/. "$root/lib/systemd/system/" 2>/dev/null || true
  out=$(systemd-analyze verify --man=no --root="$root" "${units[@]}" 2>&1) || fail "verify: $out"
  [[ -z $out ]] || fail "systemd-analyze verify has something to say: $out"
else
  echo "systemd-analyze is not installed (apt-get install systemd): units not verified"
fi
echo "ok: $(basename "$deb"), ${#units[@]} units verified"
