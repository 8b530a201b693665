#!/usr/bin/env bash
# Runs dashboard_browser_test.mjs in Debian's headless Chromium through puppeteer-core (pinned
# in package-lock.json, installed by `npm ci` into WORK_DIR), passing it the other arguments.
# Usage: run.sh WORK_DIR URL USER_KEY ADMIN_KEY RUNNING_JOB RUNNING_GPUS PENDING_JOB OTHER_USER SHOTS_DIR
# Fails (never skips) when node, npm or chromium is missing, so that a CI without them shows it.
set -euo pipefail

script="${BASH_SOURCE[0]}"
[[ "$script" == */* ]] || script="./$script"
src="$(cd "${script%/*}" && pwd)"
work="$1"
shift

fail() {
  echo "dashboard_browser_test: FAILED: $*" >&2
  exit 1
}
command -v node >/dev/null 2>&1 || fail "node is not installed (bash scripts/install-deps.sh)"
command -v npm >/dev/null 2>&1 || fail "npm is not installed (bash scripts/install-deps.sh)"
command -v chromium >/dev/null 2>&1 || fail "chromium is not installed (bash scripts/install-deps.sh)"

mkdir -p "$work"
cp "$src/package.json" "$src/package-lock.json" "$src/dashboard_browser_test.mjs" "$work/"
cd "$work"
stamp=node_modules/.bmas-installed-from-lock
if [[ ! -d node_modules/puppeteer-core ]] || ! cmp -s package-lock.json "$stamp"; then
  echo "dashboard_browser_test: npm ci in $work" >&2
  # puppeteer-core downloads no browser: it drives Debian's chromium.
  npm ci --no-audit --no-fund --prefer-offline --loglevel=error ||
    fail "npm ci failed (is the npm registry, or a cache holding puppeteer-core, reachable?)"
  cp package-lock.json "$stamp"
fi
exec node dashboard_browser_test.mjs "$@"
