#!/usr/bin/env bash
# Browser tests: the real hub binary and its embedded panel, driven in
# headless Chromium by playwright-core under Node's built-in test runner.
#
#   scripts/browser-tests.sh                 install what is missing, build, test
#   scripts/browser-tests.sh --screenshots   also write docs/screenshots/*.png
#
# Installs Chromium with apt-get when /usr/bin/chromium (or $CHROMIUM_PATH)
# is missing, and tests/browser's pinned npm dependency with `npm ci`.
# Works as root without a display (CI=true). Exits non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

screenshots=0
for arg in "$@"; do
  case "$arg" in
    --screenshots) screenshots=1 ;;
    -h | --help)
      sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "browser-tests: unknown argument: $arg" >&2
      exit 2
      ;;
  esac
done

chromium="${CHROMIUM_PATH:-/usr/bin/chromium}"
if [ ! -x "$chromium" ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "browser-tests: no Chromium at $chromium and no apt-get to install it (set CHROMIUM_PATH)" >&2
    exit 1
  fi
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "== installing Chromium (apt-get)"
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends chromium
fi

if ! command -v node >/dev/null 2>&1; then
  echo "browser-tests: Node.js 20 or newer is required" >&2
  exit 1
fi
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
  echo "browser-tests: Node.js 20 or newer is required (found $(node --version))" >&2
  exit 1
fi

if [ ! -f tests/browser/node_modules/playwright-core/package.json ]; then
  echo "== installing tests/browser dependencies (npm ci)"
  (cd tests/browser && npm ci --no-audit --no-fund)
fi

echo "== cargo build (the hub under test)"
cargo build --locked

echo "== browser tests"
export SIMPLEX_HUB_BIN="$PWD/target/debug/simplex-hub"
export CHROMIUM_PATH="$chromium"
export SCREENSHOTS="$screenshots"
cd tests/browser
exec node --test --test-concurrency=1 --test-reporter=spec ./*.test.js
