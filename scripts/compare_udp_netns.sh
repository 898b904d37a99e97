#!/usr/bin/env bash
# rdm4-perf --device udp (--server/--client) and ucx_perftest over TCP
# between two network namespaces joined by a veth pair, at MTU 1500 and
# 9000, each side pinned. Needs root and iproute2; removes what it makes.
# usage: scripts/compare_udp_netns.sh   (after cargo build --release)
set -u
P=${RDM4_PERF:-$(cd "$(dirname "$0")/.." && pwd)/target/release/rdm4-perf}
for mtu in 1500 9000; do
  ip netns add nsa$$; ip netns add nsb$$
  ip link add va$$ type veth peer name vb$$
  ip link set va$$ netns nsa$$; ip link set vb$$ netns nsb$$
  ip -n nsa$$ addr add 10.88.0.1/24 dev va$$; ip -n nsb$$ addr add 10.88.0.2/24 dev vb$$
  ip -n nsa$$ link set va$$ mtu $mtu up; ip -n nsb$$ link set vb$$ mtu $mtu up
  ip -n nsa$$ link set lo up; ip -n nsb$$ link set lo up
  echo "== MTU $mtu: rdm4 udp"
  RDM4_UDP_ADDR=10.88.0.1 ip netns exec nsa$$ taskset -c 0 timeout 120 $P --device udp --server --oob-port 18515 --test tag_lat,tag_bw --sizes 8,1048576 >/tmp/nss.out 2>&1 &
  sleep 0.5
  RDM4_UDP_ADDR=10.88.0.2 ip netns exec nsb$$ taskset -c 1 timeout 120 $P --device udp --client 10.88.0.1 --oob-port 18515 --test tag_lat,tag_bw --sizes 8,1048576 2>&1 | tail -6
  wait
  for t in tag_lat tag_bw; do for size in 8 1048576; do
    n=$([ $size = 8 ] && echo 100000 || echo 1000)
    UCX_TLS=tcp ip netns exec nsa$$ taskset -c 0 ucx_perftest -p 13338 >/dev/null 2>&1 &
    sleep 0.5
    out=$(UCX_TLS=tcp ip netns exec nsb$$ taskset -c 1 timeout 60 ucx_perftest 10.88.0.1 -p 13338 -t $t -s $size -n $n 2>&1 | grep -A2 "Final" | tail -1)
    wait
    echo "== MTU $mtu ucx tcp $t $size: $out"
  done; done
  ip netns del nsa$$; ip netns del nsb$$
done
