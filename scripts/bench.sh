#!/usr/bin/env bash
# Benchmarks simplex-hub against a Node.js `ws` relay (docs/benchmarks.md).
#
#   scripts/bench.sh [scenario...]     # default: all
#
# Builds everything first (the hub in release, the bench crate, the relay's
# npm dependency), then measures: servers pinned to CPU 0, the load
# generator to CPU 1, A (hub) and B (relay) alternating, BENCH_REPS
# repetitions (default 3). Loopback only; every loop is bounded in count and
# time. Before each scenario the harness waits (up to BENCH_QUIET_WAIT
# seconds, default 900) until no compiler runs and the machine is idle.
# Output: one Markdown table on stdout, also kept in bench/results/.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
reps=${BENCH_REPS:-3}
scenarios=("$@")
[ ${#scenarios[@]} -eq 0 ] && scenarios=(all)

command -v node >/dev/null || { echo "bench.sh: node (20+) is required for the baseline" >&2; exit 1; }
command -v npm >/dev/null || { echo "bench.sh: npm is required for the baseline" >&2; exit 1; }

echo "== build (nothing is measured while compiling)" >&2
cargo build --release >&2
cargo build --release --manifest-path bench/Cargo.toml >&2
(cd bench/baselines && npm install --no-audit --no-fund --silent) >&2

ulimit -n 20000 2>/dev/null || ulimit -n 4096 2>/dev/null || true
mkdir -p bench/results

{
  echo "## Machine"
  echo
  echo "- nproc: $(nproc)"
  echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "- memory: $(free -h | awk '/^Mem:/ {print $2 " total, " $7 " available"}')"
  echo "- kernel: $(uname -r)"
  echo "- rustc: $(rustc --version)"
  echo "- node: $(node --version), ws $(node -p "require('./bench/baselines/node_modules/ws/package.json').version")"
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
} | tee bench/results/machine.md

# The harness pins itself to CPU 1 and each server to CPU 0 (what
# `taskset -c 1` / `taskset -c 0` would do) when the machine has 2+ CPUs.
echo "## Results" | tee bench/results/latest.md
echo | tee -a bench/results/latest.md
bench/target/release/bench "${scenarios[@]}" --reps "$reps" \
  --json bench/results/latest.json | tee -a bench/results/latest.md

if command -v hyperfine >/dev/null; then
  echo >&2
  echo "== --help with hyperfine" >&2
  hyperfine -N --warmup 10 --runs 200 \
    "target/release/simplex-hub --help" "node -e 0" \
    --export-markdown bench/results/hyperfine-help.md >&2
  cat bench/results/hyperfine-help.md
else
  echo "(hyperfine not installed: the table's \`--help\` row is the harness's own loop)"
fi
