#!/usr/bin/env bash
# Instructions per 8-byte message through the C API, exact and independent of
# the machine's speed: callgrind counts two runs of examples/capi_pair (20k and
# 100k messages) and divides the difference by 80k. Modes as capi_pair's:
# `plain` (any-source receives, rounds of 16), `directed` (named source, as
# rdm4-perf), `idle`; a second argument sets the round size (1: ping-pong-like).
#
# usage: scripts/icount.sh [plain|directed|idle|ahead|inject] [ROUND]
set -euo pipefail
mode=${1:-plain} round=${2:-16}
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
cargo build --release --example capi_pair >/dev/null 2>&1
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/capi_pair "$1" "$mode" "$round" 2>&1 |
        awk '/Collected/ { print $4 }'
}
a=$(count 20000) b=$(count 100000)
echo "$mode, rounds of $round: $(( (b - a) / 80000 )) instructions per message"
