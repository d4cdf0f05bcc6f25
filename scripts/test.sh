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

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# Apache RocketMQ's own Java client, mqadmin and benchmark tools against `quiver up`
# (installs Java 17 and Maven when missing; jars are cached in .cache/m2).
./compat/run.sh
# Master/slave replication both ways with Apache RocketMQ 5.5.0 (as root, in a private network
# namespace; skipped otherwise).
./compat/replication.sh
