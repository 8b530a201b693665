#!/usr/bin/env bash
# Builds a Debian package of bmas from a build directory: /usr/bin/bmas, the systemd units of
# packaging/systemd, an example /etc/bmas/bmas.toml (a conffile, not overwritten on upgrade)
# and the maintainer scripts of packaging/debian. Its Depends are what dpkg-shlibdeps reads off
# the binary's libraries, plus the daemons bmas drives on a node (munge, slurmd) and on the
# controller they are Recommends, so that a node does not pull in Chromium or a compiler.
# Usage: scripts/make-deb.sh [BUILD_DIR] [OUT_DIR]   (defaults: build, BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build}
out=${2:-$build}
bin="$build/bmas"
[[ -x $bin ]] || { echo "make-deb: $bin is not built: run make build first" >&2; exit 1; }
command -v dpkg-deb >/dev/null || { echo "make-deb: dpkg-deb is missing: apt-get install dpkg-dev" >&2; exit 1; }
command -v dpkg-shlibdeps >/dev/null || { echo "make-deb: dpkg-shlibdeps is missing: apt-get install dpkg-dev" >&2; exit 1; }

version=$(sed -n 's/.*kBmasVersion = "\([^"]*\)".*/\1/p' src/common/version.h)
[[ -n $version ]] || { echo "make-deb: no version in src/common/version.h" >&2; exit 1; }
arch=$(dpkg --print-architecture)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
install -D -m 0755 "$bin" "$root/usr/bin/bmas"
strip --strip-debug "$root/usr/bin/bmas"
for unit in packaging/systemd/*.service; do
  install -D -m 0644 "$unit" "$root/lib/systemd/system/$(basename "$unit")"
done
install -D -m 0644 examples/bmas.toml "$root/etc/bmas/bmas.toml"
install -D -m 0644 examples/cluster-12x4.toml "$root/usr/share/doc/bmas/examples/cluster-12x4.toml"
install -D -m 0644 README.md "$root/usr/share/doc/bmas/README.md"
install -D -m 0644 docs/cluster-join.md "$root/usr/share/doc/bmas/cluster-join.md"

# dpkg-shlibdeps wants a debian/control beside the tree it reads.
mkdir -p "$stage/debian"
printf 'Source: bmas\n\nPackage: bmas\nArchitecture: any\n' >"$stage/debian/control"
shlibs=$(cd "$stage" && dpkg-shlibdeps -O -e root/usr/bin/bmas 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[[ -n $shlibs ]] || { echo "make-deb: dpkg-shlibdeps found no library dependencies" >&2; exit 1; }

mkdir -p "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
    -e "s/@SHLIBS@/$shlibs/" packaging/debian/control.in >"$root/DEBIAN/control"
echo /etc/bmas/bmas.toml >"$root/DEBIAN/conffiles"
for script in postinst prerm postrm; do
  install -m 0755 "packaging/debian/$script" "$root/DEBIAN/$script"
done

deb="$out/bmas_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
