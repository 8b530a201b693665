#!/usr/bin/env bash
# Runs SCRIPT (default: openai_client_test.mjs) against $BMAS_BINARY with the openai package
# pinned in package-lock.json, installed by `npm ci` into WORK_DIR (default: this directory).
# Usage: run.sh [WORK_DIR [SCRIPT]]
# Fails (never skips) when node or npm is missing, so that a CI without them shows it.
set -euo pipefail

script="${BASH_SOURCE[0]}"
[[ "$script" == */* ]] || script="./$script"
src="$(cd "${script%/*}" && pwd)"
work="${1:-$src}"
test_script="${2:-openai_client_test.mjs}"
name="${test_script%.mjs}"

fail() {
  echo "$name: FAILED: $*" >&2
  exit 1
}

[[ "$test_script" != */* && -f "$src/$test_script" ]] ||
  fail "no test script $test_script in $src"

command -v node >/dev/null 2>&1 ||
  fail "node is not installed; install Node.js 18 or newer (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 ||
  fail "npm is not installed; install it (Debian: apt-get install npm)"
[[ -n "${BMAS_BINARY:-}" ]] ||
  fail "BMAS_BINARY is not set; run through ctest, or set it to the path of build/bmas"
[[ -x "$BMAS_BINARY" ]] || fail "BMAS_BINARY=$BMAS_BINARY is not an executable file"

mkdir -p "$work"
if [[ "$work" != "$src" ]]; then
  cp "$src/package.json" "$src/package-lock.json" "$src/$test_script" "$work/"
fi
cd "$work"

# Install (again) when node_modules is missing or was installed from another lock file.
stamp=node_modules/.bmas-installed-from-lock
if [[ ! -d node_modules/openai ]] || ! cmp -s package-lock.json "$stamp"; then
  echo "$name: npm ci in $work" >&2
  npm ci --no-audit --no-fund --prefer-offline --loglevel=error ||
    fail "npm ci failed (is the npm registry, or a cache holding openai, reachable?)"
  cp package-lock.json "$stamp"
fi

exec node "$test_script" "$BMAS_BINARY"
