#!/usr/bin/env bash
# Runs an MPI program with 4 ranks on two "hosts" of this machine: two
# network namespaces joined by a veth pair (10.213.X.1/24 and 10.213.X.2/24,
# X taken from our PID), 2 ranks in each. mpirun runs in the first namespace
# with a hostfile naming both addresses (2 slots each) and starts the daemon
# on the second through scripts/mpi_netns_rsh.sh. Ranks are mapped by node,
# so 0 and 2 are on the first host, 1 and 3 on the second: ranks 0 and 1
# (and every pair of ring neighbours) talk across the veth. Each host also
# has its own UTS namespace with the namespace's name as hostname: Open MPI
# names files after the hostname (vader's /dev/shm/vader_segment.HOST.*), and
# with one hostname the two hosts would share them. TCP between hosts (btl
# tcp and the runtime's oob) is restricted to the veth subnet. Ranks are not
# bound (--bind-to none): each "host" believes it owns both CPUs, and
# mpirun's default binding for two ranks would put both on CPU 0, where two
# polling processes take turns of milliseconds.
# Needs root and iproute2; removes what it makes, and ends only processes in
# its own namespaces. The whole run is bounded by MPI_NETNS_TIMEOUT seconds
# (default 300); the exit status is mpirun's (124 on timeout). MPI_NETNS_NP
# sets the number of ranks (default 4; 2: one on each host).
#
# usage: scripts/mpi_netns.sh [mpirun options...] -- program [args...]
#   e.g. scripts/mpi_netns.sh --mca pml ob1 --mca btl self,vader,tcp -- /tmp/mpi_check
set -u

opts=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    opts+=("$1")
    shift
done
if [ $# -lt 2 ]; then
    sed -n '2,18p' "$0" >&2
    exit 2
fi
shift
[ "$(id -u)" = 0 ] || { echo "mpi_netns.sh: needs root" >&2; exit 2; }

agent=$(cd "$(dirname "$0")" && pwd)/mpi_netns_rsh.sh
x=$(($$ % 250 + 1))
ns1=rdm4h1-$$ ns2=rdm4h2-$$
veth1=r4a$$ veth2=r4b$$
addr1=10.213.$x.1 addr2=10.213.$x.2
tmp=$(mktemp -d /tmp/mpi_netns.XXXXXX)

cleanup() {
    local ns pids
    trap - EXIT INT TERM
    for ns in "$ns1" "$ns2"; do
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
    done
    sleep 0.5
    for ns in "$ns1" "$ns2"; do
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    done
    ip link del "$veth1" 2>/dev/null
    ip -n "$ns1" link del "$veth1" 2>/dev/null
    ip netns del "$ns1" 2>/dev/null
    ip netns del "$ns2" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

set -e
ip netns add "$ns1"
ip netns add "$ns2"
ip link add "$veth1" type veth peer name "$veth2"
ip link set "$veth1" netns "$ns1"
ip link set "$veth2" netns "$ns2"
ip -n "$ns1" addr add "$addr1/24" dev "$veth1"
ip -n "$ns2" addr add "$addr2/24" dev "$veth2"
ip -n "$ns1" link set "$veth1" up
ip -n "$ns2" link set "$veth2" up
ip -n "$ns1" link set lo up
ip -n "$ns2" link set lo up
printf '%s slots=2\n%s slots=2\n' "$addr1" "$addr2" >"$tmp/hosts"
set +e

# Read by mpi_netns_rsh.sh: which namespace owns which address.
export MPI_NETNS_HOSTS="$addr1=$ns1 $addr2=$ns2"
export OMPI_MCA_btl_tcp_if_include=10.213.$x.0/24
export OMPI_MCA_oob_tcp_if_include=10.213.$x.0/24

# In the background, so that a signal to this script is handled at once
# (bash runs traps only between foreground commands) and cleanup ends mpirun.
# Each host also gets a /dev/shm of its own (ip netns exec gives the
# process a mount namespace), as real hosts have.
ip netns exec "$ns1" unshare --uts sh -c 'hostname "$0" && mount -t tmpfs tmpfs /dev/shm && exec "$@"' "$ns1" \
    timeout -k 10 "${MPI_NETNS_TIMEOUT:-300}" \
    mpirun --allow-run-as-root --oversubscribe -np "${MPI_NETNS_NP:-4}" --hostfile "$tmp/hosts" --map-by node --bind-to none \
    --mca plm_rsh_agent "$agent" "${opts[@]}" "$@" &
wait $!
