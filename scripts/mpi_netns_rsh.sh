#!/bin/sh
# The rsh agent of scripts/mpi_netns.sh (mpirun --mca plm_rsh_agent): called
# as "mpi_netns_rsh.sh HOST COMMAND...", runs COMMAND with sh -c inside the
# network namespace that owns address HOST, found in MPI_NETNS_HOSTS
# ("addr=namespace addr=namespace"), which mpi_netns.sh exports, in a UTS
# namespace of its own whose hostname is the namespace's name, with a
# /dev/shm of its own.
host=$1
shift
for pair in $MPI_NETNS_HOSTS; do
    if [ "${pair%%=*}" = "$host" ]; then
        ns=${pair#*=}
        exec ip netns exec "$ns" unshare --uts sh -c \
            'hostname "$0" && mount -t tmpfs tmpfs /dev/shm && exec sh -c "$1"' "$ns" "$*"
    fi
done
echo "mpi_netns_rsh.sh: no namespace for host $host (MPI_NETNS_HOSTS=$MPI_NETNS_HOSTS)" >&2
exit 1
