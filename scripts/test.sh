#!/usr/bin/env bash
# Every test: formatting, lints with warnings denied, unit, property and end-to-end tests.
# End-to-end tests start the real `quiver` binary on 127.0.0.1 with free ports.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is missing: install Rust first (https://rustup.rs)" >&2
    exit 1
fi
# rustfmt and clippy come with rustup's default profile; add them when a minimal one lacks them.
if command -v rustup >/dev/null 2>&1; then
    cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
    cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
fi

# crates/cli/tests/bench_report_html.rs opens the bench's HTML reports in headless Chromium:
# installed from Debian's packages when missing (as root), as compat/ensure-tools.sh does for
# Java; otherwise the test fails and says how to install it.
if ! command -v chromium >/dev/null 2>&1 && [ -z "${QUIVER_CHROMIUM:-}" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "test.sh: installing chromium for the HTML report test" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
    else
        echo "test.sh: chromium is needed for the HTML report test: apt-get install -y chromium" >&2
        exit 1
    fi
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Includes the bounded fuzz run (fuzz/tests/bounded.rs): each target for 5 s, about 30 s on two
# cores; scripts/fuzz.sh runs them for longer.
cargo test --workspace --locked
# Apache RocketMQ's own Java client, mqadmin and benchmark tools against `quiver up`
# (installs Java 17 and Maven when missing; jars are cached in .cache/m2).
./compat/run.sh
# Master/slave replication both ways with Apache RocketMQ 5.5.0 (as root, in a private network
# namespace; skipped otherwise).
./compat/replication.sh
# Apache RocketMQ 5.5.0 brokers in controller mode failing over under Quiver's controller (as
# root, in a private network namespace; skipped otherwise).
./compat/controller.sh
