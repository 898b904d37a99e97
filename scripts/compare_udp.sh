#!/usr/bin/env bash
# One run on loopback, each side pinned to its CPU: rdm4-perf over the udp
# device beside fi_pingpong -p tcp and -p udp (libfabric-bin) and
# ucx_perftest over TCP (ucx-utils): 8 B and 1 MiB latency and streaming.
# usage: scripts/compare_udp.sh   (after cargo build --release)
set -u
P=${RDM4_PERF:-$(cd "$(dirname "$0")/.." && pwd)/target/release/rdm4-perf}
root=$(cd "$(dirname "$0")/.." && pwd)
cc -O2 -o /tmp/rdm4_raw_udp_pingpong "$root/scripts/raw_udp_pingpong.c" && echo "== $(/tmp/rdm4_raw_udp_pingpong 8 200000)"
echo "== rdm4 udp"; RDM4_UDP_ADDR=127.0.0.1 timeout 120 $P --device udp --test tag_lat,tag_bw --sizes 8,1048576 2>&1 | tail -6
echo "== rdm4 udp, sends with RDM4_MSG_MORE"; RDM4_UDP_ADDR=127.0.0.1 timeout 120 $P --device udp --test tag_bw --sizes 8,1048576 --more 2>&1 | grep tag_bw
for prov in tcp udp; do
  for size in 8 1048576; do
    n=$([ $size = 8 ] && echo 20000 || echo 300)
    taskset -c 0 fi_pingpong -p $prov -e rdm -m tagged -S $size -I $n -B 47$RANDOM >/tmp/fis.$prov.$size 2>&1 &
    sleep 0.5
    port=$(ps -o args= -C fi_pingpong | grep -o "\-B [0-9]*" | tail -1 | awk '{print $2}')
    out=$(taskset -c 1 timeout 60 fi_pingpong -p $prov -e rdm -m tagged -S $size -I $n -P $port 127.0.0.1 2>&1 | tail -2)
    wait
    echo "== fi_pingpong -p $prov size $size: $out"
  done
done
for t in tag_lat tag_bw; do
  for size in 8 1048576; do
    n=$([ $size = 8 ] && echo 200000 || echo 2000)
    UCX_TLS=tcp UCX_NET_DEVICES=lo taskset -c 0 ucx_perftest -p 13337 >/dev/null 2>&1 &
    sleep 0.5
    out=$(UCX_TLS=tcp UCX_NET_DEVICES=lo taskset -c 1 timeout 60 ucx_perftest 127.0.0.1 -p 13337 -t $t -s $size -n $n 2>&1 | grep -A2 "Final" | tail -1)
    wait
    echo "== ucx tcp $t $size: $out"
  done
done
