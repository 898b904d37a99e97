#!/usr/bin/env bash
# auto against udp between two "hosts": two network namespaces joined by a
# veth pair (MTU $MTU, default 1500), rdm4-perf --server in one and --client
# in the other, each with its own RDM4_SHM_PREFIX (so that auto finds no
# segment of the other side and goes by udp, as between hosts). Runs
# alternate udp and auto, $PAIRS pairs (default 4) per test; prints the
# paired median of auto/udp per figure. Needs root and iproute2; removes
# what it makes.
# usage: [MTU=9000] [PAIRS=6] scripts/ab_remote.sh   (after cargo build --release)
set -u
P=${RDM4_PERF:-$(cd "$(dirname "$0")/.." && pwd)/target/release/rdm4-perf}
MTU=${MTU:-1500} PAIRS=${PAIRS:-4} ns=$$
out=$(mktemp)
ip netns add rna$ns; ip netns add rnb$ns
trap 'ip netns del rna$ns; ip netns del rnb$ns; rm -f "$out"' EXIT
ip link add rva$ns type veth peer name rvb$ns
ip link set rva$ns netns rna$ns; ip link set rvb$ns netns rnb$ns
ip -n rna$ns addr add 10.89.0.1/24 dev rva$ns; ip -n rnb$ns addr add 10.89.0.2/24 dev rvb$ns
ip -n rna$ns link set rva$ns mtu "$MTU" up; ip -n rnb$ns link set rvb$ns mtu "$MTU" up
ip -n rna$ns link set lo up; ip -n rnb$ns link set lo up
run() { # device test size iters
  RDM4_SHM_PREFIX=ra$ns RDM4_UDP_ADDR=10.89.0.1 ip netns exec rna$ns taskset -c 0 timeout 60 "$P" --device "$1" \
    --server --oob-port 18517 --test "$2" --sizes "$3" --iters "$4" --settle-ms 100 >/dev/null 2>&1 &
  sleep 0.3
  RDM4_SHM_PREFIX=rb$ns RDM4_UDP_ADDR=10.89.0.2 ip netns exec rnb$ns taskset -c 1 timeout 60 "$P" --device "$1" \
    --client 10.89.0.1 --oob-port 18517 --test "$2" --sizes "$3" --iters "$4" --settle-ms 100 --json 2>/dev/null | tail -1
  wait
}
for spec in "tag_lat 8 5000" "tag_bw 8 100000" "tag_bw 1048576 500"; do
  set -- $spec
  for i in $(seq "$PAIRS"); do
    if [ $((i % 2)) = 0 ]; then a=$(run udp "$@"); b=$(run auto "$@"); else b=$(run auto "$@"); a=$(run udp "$@"); fi
    echo "$1 $2 udp $a"; echo "$1 $2 auto $b"
  done
done >"$out"
python3 - "$out" <<'PY'
import collections, json, statistics as st, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split(" ", 3)
    if len(p) == 4 and p[3].startswith("{"):
        rows[(p[0], p[1], p[2])].append(json.loads(p[3]))
for t, s in sorted({(a, b) for a, b, _ in rows}):
    u, a = rows[(t, s, "udp")], rows[(t, s, "auto")]
    for k in (["lat_us_median", "lat_us_avg"] if t == "tag_lat" else ["msg_rate", "bw_mbps"]):
        r = [y[k] / x[k] for x, y in zip(u, a) if x[k] > 0]
        if r:
            print(f"{t} {s} {k}: udp {st.median(x[k] for x in u):.4g} auto {st.median(y[k] for y in a):.4g}"
                  f" auto/udp (paired median) {st.median(r):.3f} of {len(r)}")
PY
