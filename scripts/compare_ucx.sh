#!/usr/bin/env bash
# Runs rdm4-perf and ucx_perftest back to back, N rounds, 8-byte tagged
# latency and streaming message rate over shared memory, and prints each
# round's pair of numbers and their ratio. On a VM whose vCPU placement
# changes from one minute to the next (cross-core latency 65 to 270 ns on
# the machine this was written on), only numbers taken seconds apart
# compare; ../shared/bench/peers.py runs each tool's repeats in a block.
# Rounds alternate which tool goes first; the last lines give the median of
# the rounds' ratios and how many rounds meet issue 6's targets (8 B latency
# at most 0.7x UCX's, 8 B rate at least 1.5x). Each round starts with the
# cross-process cache-line floor (examples/shm_pingpong's `line` row, ns
# one way), which names the placement the host gave the two vCPUs for that
# round: ~16-25 ns when they are hyperthreads of one core, ~45-60 near,
# ~160-200 far. The `cpu` column is the lower of shm_pingpong's integer
# throughputs of the two CPUs (G ops/s, measured by both processes at once
# at the end of the same run): ~11 when a core is ours alone, ~7.5 when the
# host runs another tenant on its other hardware thread (rdm4's latency and
# rate, bound by instructions, fall with it; UCX's, bound by line transfers,
# hardly move). The floor is taken again between the two tools' runs
# (`floor2`); a round whose two floors name different placements (hyperthreads
# below 30 ns, near below 120, far beyond) is marked `*`: its ratio compares
# two placements, not two libraries, and the last line counts the targets
# again over the unmarked rounds only.
#
# usage: scripts/compare_ucx.sh [ROUNDS] [RDM4_PERF]
set -euo pipefail
rounds=${1:-5}
perf=${2:-target/release/rdm4-perf}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (apt-get install ucx-utils)" >&2; exit 1; }
ucx() { # test iters -> last result line of the client
    local port=$((20000 + RANDOM % 20000))
    UCX_NET_DEVICES=lo taskset -c 0 ucx_perftest -p "$port" >/dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    UCX_NET_DEVICES=lo taskset -c 1 ucx_perftest 127.0.0.1 -p "$port" -t "$1" -s 8 -n "$2" -w 10000 -f 2>/dev/null |
        awk 'NF == 8 && $1 ~ /^[0-9.]+$/ { line = $0 } END { print line }'
    wait "$srv" 2>/dev/null || true
}
cargo build --release --example shm_pingpong >/dev/null 2>&1
probe() { target/release/examples/shm_pingpong 20000 | awk '/line/ { l = $3 } /CPU throughput/ { c = $NF } END { print l, c }'; }
printf '%-6s %6s %6s %5s %10s %10s %7s   %10s %10s %7s\n' round floor floor2 cpu "rdm4 us" "ucx us" ratio "rdm4 M/s" "ucx M/s" ratio
theirs() {
    ulat=$(ucx tag_lat 1000000 | awk '{ print $2 }')
    urate=$(ucx tag_bw 5000000 | awk '{ print $8 / 1e6 }')
}
ratios=()
for r in $(seq "$rounds"); do
    read -r line cpu < <(probe)
    [ $((r % 2)) = 0 ] && theirs
    read -r line2 _ < <(probe)
    mine=$("$perf" --test tag_lat,tag_bw --sizes 8 --json)
    [ $((r % 2)) = 1 ] && { read -r line2 _ < <(probe); theirs; }
    lat=$(echo "$mine" | python3 -c 'import sys,json; print([d for d in map(json.loads, sys.stdin) if d["test"]=="tag_lat"][0]["lat_us_median"])')
    rate=$(echo "$mine" | python3 -c 'import sys,json; print([d for d in map(json.loads, sys.stdin) if d["test"]=="tag_bw"][0]["msg_rate"]/1e6)')
    same=$(python3 -c "k = lambda f: 0 if f < 30 else 1 if f < 120 else 2; print(int(k($line) == k($line2)))")
    mark=$([ "$same" = 1 ] && echo ' ' || echo '*')
    python3 -c "print('%-6s %6.0f %6.0f %5.1f %10.3f %10.3f %7.2f   %10.2f %10.2f %7.2f' % ('$r$mark', $line, $line2, $cpu, $lat, $ulat, $lat/$ulat, $rate, $urate, $rate/$urate))"
    ratios+=("$lat/$ulat,$rate/$urate,$same")
done
python3 -c "
import statistics as st
r = [tuple(map(eval, x.split(','))) for x in '${ratios[*]}'.split()]
print('median %57.2f %32.2f' % (st.median(a for a, _, _ in r), st.median(b for _, b, _ in r)))
print('rounds within the targets: latency <= 0.7 in %d of %d, rate >= 1.5 in %d of %d'
      % (sum(a <= 0.7 for a, _, _ in r), len(r), sum(b >= 1.5 for _, b, _ in r), len(r)))
h = [x for x in r if x[2]]
print('of the %d rounds whose placement held: latency <= 0.7 in %d, rate >= 1.5 in %d'
      % (len(h), sum(a <= 0.7 for a, _, _ in h), sum(b >= 1.5 for _, b, _ in h)))"
