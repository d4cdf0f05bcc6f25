#!/usr/bin/env bash
# Installs Apache RocketMQ's own gRPC clients for Python, Go and Node.js into .cache/grpc-clients/
# (git-ignored) and runs their end-to-end tests (python/, go/, node/ here) against a gRPC endpoint.
#
#   compat/grpc/clients.sh                   install all three; a step whose result is up to date is skipped
#   compat/grpc/clients.sh install LANG...   install these: python, go, node
#   compat/grpc/clients.sh run LANG ENDPOINT NORMAL_TOPIC FIFO_TOPIC DELAY_TOPIC TRANSACTION_TOPIC ORDERED_GROUP GROUP_PREFIX
#                                            install LANG (if needed), then run its test; exits as the test does
#
# The topics must exist with message.type NORMAL, FIFO, DELAY and TRANSACTION, and ORDERED_GROUP must be an
# orderly group (mqadmin updateSubGroup -o true). Needs python3, go and node/npm; the clients and their
# dependencies come from PyPI, the Go module proxy and npm, and their download caches stay in .cache too.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE="$(cd "$HERE/../.." && pwd)/.cache/grpc-clients"
export PIP_CACHE_DIR="$CACHE/pip" npm_config_cache="$CACHE/npm"
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS=-modcacherw GOTOOLCHAIN=local

log() { echo "clients.sh: $*" >&2; }

install_python() {
    local venv="$CACHE/python/venv" requirements="$HERE/python/requirements.txt"
    if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$venv/requirements.txt"; then return; fi
    log "python: a venv with $(tr '\n' ' ' < "$requirements")"
    rm -rf "$venv"
    if ! python3 -m venv "$venv"; then
        # Debian ships venv's pip bootstrap apart from python3.
        [ "$(id -u)" = 0 ] || { log "python3 -m venv failed: apt-get install python3-venv"; exit 1; }
        DEBIAN_FRONTEND=noninteractive apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv
        rm -rf "$venv" && python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/requirements.txt"
}

install_go() {
    local binary="$CACHE/go/grpc-client-test"
    if [ -x "$binary" ] && [ -z "$(find "$HERE/go" -type f -newer "$binary")" ]; then return; fi
    log "go: building with $(grep -o 'rocketmq-clients/golang/v5 v[0-9.]*' "$HERE/go/go.mod")"
    go -C "$HERE/go" build -o "$binary" .
}

install_node() {
    local dir="$CACHE/node"
    if [ -f "$dir/node_modules/.package-lock.json" ] && cmp -s "$HERE/node/package-lock.json" "$dir/package-lock.json"; then
        return
    fi
    log "node: npm ci of rocketmq-client-nodejs $(grep -o '"rocketmq-client-nodejs": "[^"]*"' "$HERE/node/package.json" | cut -d'"' -f4)"
    mkdir -p "$dir"
    cp "$HERE/node/package.json" "$HERE/node/package-lock.json" "$dir/"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
}

install() {
    case "$1" in
        python | go | node) "install_$1" ;;
        *) log "unknown language '$1' (python, go, node)"; exit 2 ;;
    esac
}

usage() { sed -n '5,8p' "$0" | cut -c3- >&2; exit 2; }

case "${1:-install}" in
    install)
        shift $(($# > 0))
        [ $# -gt 0 ] || set -- python go node
        for lang in "$@"; do install "$lang"; done
        ;;
    run)
        [ $# -eq 9 ] || usage
        lang="$2"
        shift 2
        install "$lang"
        case "$lang" in
            python) exec "$CACHE/python/venv/bin/python" "$HERE/python/grpc_client_test.py" "$@" ;;
            go) exec "$CACHE/go/grpc-client-test" "$@" ;;
            node) export NODE_PATH="$CACHE/node/node_modules" && exec node "$HERE/node/grpc_client_test.js" "$@" ;;
        esac
        ;;
    *) usage ;;
esac
