#!/usr/bin/env bash
# Runs plan_html_browser_test.mjs in Debian's headless Chromium through puppeteer-core, with
# the dashboard browser test's package.json and lock (../dashboard: one pinned puppeteer-core),
# installed by `npm ci` into WORK_DIR. The test renders the sample reports in DATA_DIR with
# RENDER (plan_html_render) and keeps its screenshots in WORK_DIR/shots.
# Usage: run.sh WORK_DIR RENDER DATA_DIR
# Fails (never skips) when node, npm or chromium is missing, so that a CI without them shows it.
set -euo pipefail

script="${BASH_SOURCE[0]}"
[[ "$script" == */* ]] || script="./$script"
src="$(cd "${script%/*}" && pwd)"
work="$1"
render="$2"
data="$3"

fail() {
  echo "plan_html_browser_test: FAILED: $*" >&2
  exit 1
}
command -v node >/dev/null 2>&1 || fail "node is not installed (bash scripts/install-deps.sh)"
command -v npm >/dev/null 2>&1 || fail "npm is not installed (bash scripts/install-deps.sh)"
command -v "${CHROMIUM:-chromium}" >/dev/null 2>&1 ||
  fail "chromium is not installed (bash scripts/install-deps.sh)"
[[ -x "$render" ]] || fail "no renderer at $render (build the plan_html_render target)"

mkdir -p "$work"
cp "$src/../dashboard/package.json" "$src/../dashboard/package-lock.json" \
  "$src/plan_html_browser_test.mjs" "$work/"
cd "$work"
stamp=node_modules/.bmas-installed-from-lock
if [[ ! -d node_modules/puppeteer-core ]] || ! cmp -s package-lock.json "$stamp"; then
  echo "plan_html_browser_test: npm ci in $work" >&2
  # puppeteer-core downloads no browser: it drives Debian's chromium.
  npm ci --no-audit --no-fund --prefer-offline --loglevel=error ||
    fail "npm ci failed (is the npm registry, or a cache holding puppeteer-core, reachable?)"
  cp package-lock.json "$stamp"
fi
exec node plan_html_browser_test.mjs "$render" "$data" "$work"
