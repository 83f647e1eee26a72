#!/usr/bin/env bash
# Fuzz smoke pass for CI (see fuzz/README.md): installs cargo-fuzz when it is
# missing, checks the fuzz crate's formatting, builds every target without a
# sanitizer (stable toolchain, no nightly flags), then runs each one briefly
# from its committed seeds, NPROC targets at a time. Exits non-zero if any
# target crashes or fails a property; the crashing input is copied to
# fuzz/artifacts/<target>/ and printed as hex in the log.
#
# FUZZ_SECONDS  seconds per target (default 20)
# FUZZ_JOBS     targets run at once (default: number of CPUs)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-20}"
jobs="${FUZZ_JOBS:-$(nproc)}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== cargo install cargo-fuzz --locked"
    cargo install cargo-fuzz --locked
fi

echo "== cargo fmt --check (fuzz crate)"
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

# 16 codegen units build the hub crate about 35 s faster on two cores than
# cargo-fuzz's default of 1; the run rate measured the same.
echo "== cargo fuzz build -s none --codegen-units 16"
cargo fuzz build -s none --codegen-units 16

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
targets="$(cargo fuzz list)"
# The binaries just built; running them directly (not `cargo fuzz run`)
# skips a cargo invocation, and a rebuild, per target.
bin="fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release"

# One target: a throwaway corpus seeded from fuzz/seeds/<target>, so the
# smoke run never writes into the repository except for crash artifacts.
run_one() {
    local target="$1" seconds="$2" work="$3" bin="$4"
    mkdir -p "$work/$target" "$work/artifacts/$target"
    cp fuzz/seeds/"$target"/* "$work/$target/"
    if "$bin/$target" "$work/$target" \
        -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$work/artifacts/$target/" \
        >"$work/$target.log" 2>&1; then
        local runs
        runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$target.log" | grep -o '[0-9]*$' || true)"
        echo "ok      $target (${runs:-?} runs in ${seconds}s)"
    else
        echo "FAILED  $target"
        grep -v '^#' "$work/$target.log" | tail -n 60
        mkdir -p "fuzz/artifacts/$target"
        for artifact in "$work/artifacts/$target"/*; do
            [ -f "$artifact" ] || continue
            cp "$artifact" "fuzz/artifacts/$target/"
            echo "--- fuzz/artifacts/$target/$(basename "$artifact") (hex):"
            od -An -tx1 -v "$artifact" | head -n 64
        done
        return 1
    fi
}
export -f run_one

echo "== fuzz smoke: ${seconds}s per target, ${jobs} at a time"
start=$SECONDS
status=0
printf '%s\n' $targets | xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ {} "$seconds" "$work" "$bin" || status=1
echo "== fuzz smoke took $((SECONDS - start))s"
if [ "$status" -ne 0 ]; then
    echo "fuzz smoke FAILED; reproduce with: cargo fuzz run -s none <target> fuzz/artifacts/<target>/<file>" >&2
fi
exit "$status"
