#!/usr/bin/env bash
# Runs rdm4-perf and ucx_perftest back to back, N rounds, 8-byte tagged
# latency, 8-byte streaming message rate and 1 MiB streaming bandwidth over
# shared memory, and prints each round's pairs of numbers and their ratios. On a VM whose vCPU placement
# changes from one minute to the next (cross-core latency 65 to 270 ns on
# the machine this was written on), only numbers taken seconds apart
# compare; ../shared/bench/peers.py runs each tool's repeats in a block.
# Rounds alternate which tool goes first; the last lines give the median of
# the rounds' ratios and how many rounds meet issue 6's targets (8 B latency
# at most 0.7x UCX's, 8 B rate at least 1.5x, 1 MiB bandwidth at least
# 1.25x). Each round starts with the
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
# again over the unmarked rounds only. The placements and what they do to
# each tool: docs/performance.md, "Methods".
#
# usage: scripts/compare_ucx.sh [ROUNDS] [RDM4_PERF]
set -euo pipefail
rounds=${1:-5}
perf=${2:-target/release/rdm4-perf}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (apt-get install ucx-utils)" >&2; exit 1; }
ucx() { # test iters [size] -> last result line of the client
    local port=$((20000 + RANDOM % 20000))
    UCX_NET_DEVICES=lo taskset -c 0 ucx_perftest -p "$port" >/dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    UCX_NET_DEVICES=lo taskset -c 1 ucx_perftest 127.0.0.1 -p "$port" -t "$1" -s "${3:-8}" -n "$2" -w "$(($2 / 100))" -f 2>/dev/null |
        awk 'NF == 8 && $1 ~ /^[0-9.]+$/ { line = $0 } END { print line }'
    wait "$srv" 2>/dev/null || true
}
cargo build --release --example shm_pingpong >/dev/null 2>&1
probe() { target/release/examples/shm_pingpong 20000 | awk '/line/ { l = $3 } /CPU throughput/ { c = $NF } END { print l, c }'; }
printf '%-6s %6s %6s %5s %10s %10s %7s   %10s %10s %7s   %9s %9s %7s\n' round floor floor2 cpu "rdm4 us" "ucx us" \
    ratio "rdm4 M/s" "ucx M/s" ratio "rdm4 GB/s" "ucx GB/s" ratio
theirs() {
    ulat=$(ucx tag_lat 1000000 | awk '{ print $2 }')
    urate=$(ucx tag_bw 5000000 | awk '{ print $8 / 1e6 }')
    # MiB/s of 1 MiB messages -> GB/s
    ubw=$(ucx tag_bw 5000 1048576 | awk '{ print $6 * 1.048576 / 1000 }')
}
json() { # test size key
    echo "$mine" | python3 -c "import sys,json; print([d for d in map(json.loads, sys.stdin) if d['test']=='$1' and d['size']==$2][0]['$3'])"
}
ratios=()
for r in $(seq "$rounds"); do
    read -r line cpu < <(probe)
    [ $((r % 2)) = 0 ] && theirs
    read -r line2 _ < <(probe)
    mine=$("$perf" --test tag_lat,tag_bw --sizes 8,1048576 --json)
    [ $((r % 2)) = 1 ] && { read -r line2 _ < <(probe); theirs; }
    lat=$(json tag_lat 8 lat_us_median)
    rate=$(python3 -c "print($(json tag_bw 8 msg_rate) / 1e6)")
    bw=$(python3 -c "print($(json tag_bw 1048576 bw_mbps) / 1e3)")
    same=$(python3 -c "k = lambda f: 0 if f < 30 else 1 if f < 120 else 2; print(int(k($line) == k($line2)))")
    mark=$([ "$same" = 1 ] && echo ' ' || echo '*')
    python3 -c "print('%-6s %6.0f %6.0f %5.1f %10.3f %10.3f %7.2f   %10.2f %10.2f %7.2f   %9.1f %9.1f %7.2f' % ('$r$mark', $line, $line2, $cpu, $lat, $ulat, $lat/$ulat, $rate, $urate, $rate/$urate, $bw, $ubw, $bw/$ubw))"
    ratios+=("$lat/$ulat,$rate/$urate,$bw/$ubw,$same")
done
python3 -c "
import statistics as st
r = [tuple(map(eval, x.split(','))) for x in '${ratios[*]}'.split()]
print('median %57.2f %32.2f %29.2f' % tuple(st.median(x[i] for x in r) for i in range(3)))
count = lambda rs: (sum(x[0] <= 0.7 for x in rs), sum(x[1] >= 1.5 for x in rs), sum(x[2] >= 1.25 for x in rs))
print('rounds within the targets: latency <= 0.7 in %d, rate >= 1.5 in %d, bandwidth >= 1.25 in %d, of %d'
      % (count(r) + (len(r),)))
h = [x for x in r if x[3]]
print('of the %d rounds whose placement held: latency <= 0.7 in %d, rate >= 1.5 in %d, bandwidth >= 1.25 in %d'
      % ((len(h),) + count(h)))"
