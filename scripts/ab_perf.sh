#!/usr/bin/env bash
# Compares two builds of rdm4-perf on one test and size (default 8 B) by many short paired
# runs, alternating which goes first (A B, B A, ...), and prints the median
# of the per-pair ratios B/A and how many pairs went each way. On a VM whose
# vCPU placement changes within seconds, a pair of ~50 ms runs almost always
# sees one placement, so the paired ratio shows differences of a few percent
# that separate long runs cannot.
#
# usage: scripts/ab_perf.sh PERF_A PERF_B [PAIRS] [TEST] [ITERS] [SIZE]
#   e.g. cp target/release/rdm4-perf /tmp/perf-a; (change, rebuild);
#        scripts/ab_perf.sh /tmp/perf-a target/release/rdm4-perf 100 tag_lat
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
a=$1 b=$2 pairs=${3:-50} test=${4:-tag_lat} iters=${5:-30000} size=${6:-8}
run() { "$1" --test "$test" --sizes "$size" --iters "$iters" --json | tail -n 1 | sed "s/^/$2 /"; }
for i in $(seq "$pairs"); do
    if [ $((i % 2)) = 0 ]; then run "$a" A; run "$b" B; else run "$b" B; run "$a" A; fi
done | TEST="$test" python3 -c '
import json, os, statistics as st, sys
runs = {"A": [], "B": []}
for line in sys.stdin:
    who, js = line.split(" ", 1)
    runs[who].append(json.loads(js))
keys = ["lat_us_median", "lat_us_avg"] if os.environ["TEST"].endswith("lat") else ["msg_rate", "bw_mbps"]
for k in keys:
    x = [r[k] for r in runs["A"]]
    y = [r[k] for r in runs["B"]]
    d = [q / p for p, q in zip(x, y) if p > 0]
    print("%-14s A %-10.4g B %-10.4g B/A (paired median) %.3f   B<A %d  B>A %d  of %d"
          % (k, st.median(x), st.median(y), st.median(d), sum(v < 1 for v in d), sum(v > 1 for v in d), len(d)))
'
