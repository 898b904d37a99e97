#!/usr/bin/env bash
# The libfabric provider beside libfabric's own providers and Open MPI's
# default paths, in one run (issue 40's speed targets):
#
#   one host:    fi_pingpong -p rdm4 beside -p shm (8 B latency, 1 MiB);
#                mpi_check --pingpong over pml cm + mtl ofi on rdm4 beside
#                pml ob1 + btl vader;
#   namespaces:  two network namespaces joined by a veth pair (MTU 1500):
#                fi_pingpong -p rdm4 (auto, each "host" with its own
#                /dev/shm) beside -p tcp and -p udp; mpi_check --pingpong
#                over rdm4 beside ob1 + btl tcp (scripts/mpi_netns.sh).
#
# usage: scripts/compare_fi.sh [repeats]   (default 3; needs root, iproute2,
#        libfabric-bin, Open MPI; after make -C fi). Processes are pinned to
#        the two CPUs on one host; fi_pingpong's figure is its usec/xfer
#        (half a round trip, averaged over the run), mpi_check's the median
#        of its repetitions. Each repeat runs every variant once, in turn,
#        so that the VM's changing vCPU placement hits all alike.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$root/target/release}
reps=${1:-3}
port=$((46000 + $$ % 1000))
mpi_check=$(mktemp -d)/mpi_check
mpicc -O2 -o "$mpi_check" "$root/fi/tests/mpi_check.c" || exit 1

# fi_pingpong server and client; prints "usec/xfer MB/s" of its one size.
# $1 $2: the commands to prefix the server and the client with; the rest:
# fi_pingpong's options; FI_SERVER: the address the client connects to.
pingpong() {
    local pre_s=$1 pre_c=$2
    shift 2
    port=$((port + 1))
    $pre_s timeout 120 fi_pingpong -B $port "$@" >/dev/null 2>&1 &
    sleep 0.5
    $pre_c timeout 120 fi_pingpong -P $port "$@" "${FI_SERVER:-127.0.0.1}" 2>&1 | tail -1 | awk '{print $7, $6}'
    wait
}

# The 1 B and 1 MiB rows of mpi_check --pingpong: "lat_us MBps".
mpi_pp() {
    "$@" "$mpi_check" --pingpong 2>/dev/null | awk '$1 == "pp" && ($2 == 1 || $2 == 1048576 || $2 == 4194304) {printf "%s:%s/%s ", $2, $3, $4}'
    echo
}

mpirun_local=(mpirun --allow-run-as-root -np 2 --bind-to core)
rdm4_mtl=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include rdm4 --mca btl ^ofi)

echo "== one host (usec/xfer MB/s)"
for r in $(seq "$reps"); do
    for size_iters in "8 200000" "1048576 2000"; do
        set -- $size_iters
        a=$(pingpong "taskset -c 0" "taskset -c 1" -p rdm4 -e rdm -m tagged -S "$1" -I "$2")
        b=$(pingpong "taskset -c 0" "taskset -c 1" -p shm -e rdm -m tagged -S "$1" -I "$2")
        echo "repeat $r  size $1  rdm4 $a  shm $b"
    done
    echo "repeat $r  mpi rdm4/mtl ofi   $(mpi_pp "${mpirun_local[@]}" "${rdm4_mtl[@]}")"
    echo "repeat $r  mpi ob1/vader      $(mpi_pp "${mpirun_local[@]}" --mca pml ob1 --mca btl self,vader)"
done

ns1=cmpfa$$ ns2=cmpfb$$
cleanup() { ip netns del "$ns1" 2>/dev/null; ip netns del "$ns2" 2>/dev/null; rm -rf "$(dirname "$mpi_check")"; }
trap cleanup EXIT
ip netns add "$ns1" && ip netns add "$ns2" && ip link add va$$ type veth peer name vb$$ &&
    ip link set va$$ netns "$ns1" && ip link set vb$$ netns "$ns2" &&
    ip -n "$ns1" addr add 10.89.0.1/24 dev va$$ && ip -n "$ns2" addr add 10.89.0.2/24 dev vb$$ &&
    ip -n "$ns1" link set va$$ up && ip -n "$ns2" link set vb$$ up &&
    ip -n "$ns1" link set lo up && ip -n "$ns2" link set lo up || { echo "cannot make namespaces"; exit 1; }
# Each "host" with a /dev/shm of its own, so that auto reaches the other by udp.
tmpd=$(dirname "$mpi_check")
for h in 1 2; do
    ns=$ns1; [ $h = 2 ] && ns=$ns2
    printf '#!/bin/sh\nexec ip netns exec %s sh -c '"'"'mount -t tmpfs tmpfs /dev/shm && exec "$0" "$@"'"'"' "$@"\n' "$ns" >"$tmpd/host$h"
    chmod +x "$tmpd/host$h"
done
export FI_SERVER=10.89.0.1
echo "== two namespaces (usec/xfer MB/s)"
for r in $(seq "$reps"); do
    for size_iters in "8 20000" "1048576 500"; do
        set -- $size_iters
        a=$(pingpong "$tmpd/host1" "$tmpd/host2" -p rdm4 -e rdm -m tagged -S "$1" -I "$2")
        b=$(pingpong "ip netns exec $ns1" "ip netns exec $ns2" -p tcp -e rdm -m tagged -S "$1" -I "$2")
        c=$(pingpong "ip netns exec $ns1" "ip netns exec $ns2" -p udp -e rdm -m tagged -S "$1" -I "$2")
        echo "repeat $r  size $1  rdm4 $a  tcp $b  udp $c"
    done
done
unset FI_SERVER
for r in $(seq "$reps"); do
    echo "repeat $r  mpi rdm4/mtl ofi across   $(mpi_pp env MPI_NETNS_NP=2 "$root/scripts/mpi_netns.sh" "${rdm4_mtl[@]}" --)"
    echo "repeat $r  mpi ob1/tcp across        $(mpi_pp env MPI_NETNS_NP=2 "$root/scripts/mpi_netns.sh" --mca pml ob1 --mca btl self,vader,tcp --)"
done
