#!/usr/bin/env bash
# Instructions per 8-byte message through the C API, exact and independent of
# the machine's speed: callgrind counts two runs of examples/capi_pair (20k and
# 100k messages) and divides the difference by 80k. Modes as capi_pair's:
# `plain` (any-source receives, rounds of 16), `directed` (named source, as
# rdm4-perf), `idle`, `ahead`, `inject`; a second argument sets the round size
# (1: ping-pong-like). `write_now` counts 8-byte `rdm4_write_now`s into a
# peer's `rdm4_mr_alloc` memory over shm instead (per write; no rounds).
#
# usage: scripts/icount.sh [plain|directed|idle|ahead|inject|write_now] [ROUND]
set -euo pipefail
mode=${1:-plain} round=${2:-16}
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
cargo build --release --example capi_pair >/dev/null 2>&1
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/capi_pair "$1" "$mode" "$round" 2>&1 |
        awk '/Collected/ { print $4 }'
}
# The one-sided mode is shm's (`rdm4_write_now` is done where the device
# reaches the peer's memory itself).
[ "$mode" != write_now ] || export RDM4_DEVICE=shm
a=$(count 20000) b=$(count 100000)
if [ "$mode" = write_now ]; then
    echo "write_now: $(( (b - a) / 80000 )) instructions per write"
else
    echo "$mode, rounds of $round: $(( (b - a) / 80000 )) instructions per message"
fi
