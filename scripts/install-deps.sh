#!/usr/bin/env bash
# Installs everything bmas needs to build, run and test, from Debian 12's packages.
# Safe to run again; skips apt-get when every package is already installed.
# Usage: scripts/install-deps.sh [--bench]   (--bench adds what `make bench` compares the
# gateway with: wrk and nginx)
set -euo pipefail

bench=false
for arg in "$@"; do
  case "$arg" in
    --bench) bench=true ;;
    *) echo "install-deps: unknown argument $arg (usage: install-deps.sh [--bench])" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential g++ cmake ninja-build ccache pkg-config git
  libboost-dev libsimdjson-dev rapidjson-dev libcli11-dev libtomlplusplus-dev
  libspdlog-dev libfmt-dev libsqlite3-dev sqlite3 libssl-dev libgoogle-perftools-dev
  # The PostgreSQL store: libpq, and the server its tests start (initdb, pg_ctl).
  libpq-dev postgresql
  libgtest-dev libgmock-dev libbenchmark-dev
  # Timetable floors in the site's local time: the tz database and a C++ reader of it.
  libhowardhinnant-date-dev tzdata
  # The fuzz build (make fuzz): clang 14, and compiler-rt's libFuzzer and sanitizer runtimes.
  clang libclang-rt-14-dev
  curl procps python3 openssl
  # A real local Slurm cluster (bmas slurm up) and MPI across its nodes.
  slurm-wlm slurmctld slurmd slurmrestd slurm-client slurm-wlm-jwt-plugin munge
  # Accounting for per-user GPU caps (an inventory with accounting = true): slurmdbd on MariaDB.
  slurmdbd mariadb-server
  openmpi-bin libopenmpi-dev
  # LXD workspaces (bmas lxd up, bmas image build): LXD and lxcfs, id mapping, the btrfs
  # pool on a loop file, image packing, the busybox test image and Debian images.
  lxd lxcfs uidmap btrfs-progs squashfs-tools xz-utils busybox-static debootstrap
  # The login test: a student's `ssh -tt` into their workspace (sshd's ForceCommand).
  openssh-server openssh-client
  # The Debian package (make deb: dpkg-shlibdeps) and its units' check (systemd-analyze).
  dpkg-dev systemd
  # The multi-host test bed (tests/cluster): network namespaces, a bridge and veth pairs.
  iproute2 util-linux
  # The dashboard's browser test: headless Chromium, driven by puppeteer-core from npm.
  chromium
)
# The integration tests with the real OpenAI client and the dashboard's browser test, and the
# dashboard's assets (uPlot, embedded at build time), need node and npm. A machine that already
# has a node with its own npm (for example from NodeSource) keeps it: Debian's npm conflicts.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
$bench && packages+=(wrk nginx strace linux-perf)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get -o DPkg::Lock::Timeout=900 update -q
  $sudo apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}"
fi
