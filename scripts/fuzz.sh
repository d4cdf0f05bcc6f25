#!/usr/bin/env bash
# Longer fuzz runs than CI's: cargo-fuzz (libFuzzer, guided by coverage, with AddressSanitizer)
# on nightly Rust, from the seed corpus in fuzz/corpus/<target>/.
#
#   scripts/fuzz.sh                  every target, 60 s each
#   scripts/fuzz.sh sql92 600        one target, 10 minutes
#   scripts/fuzz.sh all 300          every target, 5 minutes each
#
# Installs what is missing: the nightly toolchain (rustup) and cargo-fuzz (into .cache/, which
# git ignores). Inputs that reach new code are kept in .cache/fuzz/corpus/<target>/ for the next
# run. An input that crashes a target is saved in fuzz/artifacts/<target>/ (the run goes on with
# the next target and fails at the end); once its bug is fixed, copy it into
# fuzz/corpus/<target>/, where every `cargo test` tries it again.
set -euo pipefail
cd "$(dirname "$0")/.."

target="${1:-all}"
seconds="${2:-60}"
case "$seconds" in
    '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;;
esac

if ! command -v rustup >/dev/null 2>&1; then
    echo "fuzz.sh: rustup is needed to install the nightly toolchain (https://rustup.rs)" >&2
    exit 1
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal
fi

tools="$PWD/.cache/cargo-fuzz"
export PATH="$tools/bin:$PATH"
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --root "$tools"
fi

# The workspace's release profile links with fat LTO, which makes every rebuild of an
# instrumented target take minutes and gains a fuzzer nothing.
export CARGO_PROFILE_RELEASE_LTO=false
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16

if [ "$target" = all ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
else
    targets=("$target")
fi

failed=()
for name in "${targets[@]}"; do
    found=".cache/fuzz/corpus/$name"
    mkdir -p "$found" "fuzz/artifacts/$name"
    echo "fuzz.sh: $name for ${seconds}s" >&2
    # New inputs go to the first corpus folder; the seeds in the second are only read.
    if ! cargo +nightly fuzz run --features libfuzzer "$name" "$found" "fuzz/corpus/$name" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1; then
        failed+=("$name")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz.sh: crashes in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz.sh: no crash in ${#targets[@]} target(s), ${seconds}s each" >&2
