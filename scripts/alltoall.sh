#!/usr/bin/env bash
# All-to-all at 2, 4, 8 and 16 processes on this host (issue 41, "Scale"):
# Open MPI's MPI_Alltoall (scripts/alltoall.c, every byte of the last round
# checked) over rdm4 (pml cm, mtl ofi, the rdm4 provider, over its default
# device: shm here), beside Open MPI's own paths, ob1 with vader and pml ucx,
# in the same run, interleaved per process count. Prints the program's
# lines: aggregate messages/s and MB/s (every process's blocks) and the
# slowest process's time per round.
#
# usage: scripts/alltoall.sh [SIZES] [SECONDS] [NPS]
#   e.g. scripts/alltoall.sh 8,65536 2 "2 4 8 16"
# CPUS=LIST (e.g. CPUS=0) runs every process on those CPUs (taskset) and
# has Open MPI yield when idle at any count: oversubscription on demand,
# with far less run-to-run noise than the unpinned runs (no migrations,
# no cross-CPU transfers).
# Needs mpicc/mpirun (openmpi-bin, libopenmpi-dev) and the provider built
# (make -C fi): FI_PROVIDER_PATH points at target/release.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sizes=${1:-8,65536} secs=${2:-2} nps=${3:-"2 4 8 16"}
bin=$(mktemp -d)/alltoall
trap 'rm -rf "$(dirname "$bin")"' EXIT
mpicc -O2 -o "$bin" "$root/scripts/alltoall.c"
[ -f "$root/target/release/librdm4-fi.so" ] || { echo "build the provider first: make -C fi" >&2; exit 2; }
common=(--allow-run-as-root --oversubscribe --bind-to none -x RDM4_SHM_PREFIX=rdm4a2a$$)
pin=()
if [ -n "${CPUS:-}" ]; then
  pin=(taskset -c "$CPUS")
  common+=(--mca mpi_yield_when_idle 1)
fi
declare -A how=(
  [rdm4]="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include rdm4 --mca btl ^ofi --mca osc pt2pt -x FI_PROVIDER_PATH=$root/target/release"
  [ob1_vader]="--mca pml ob1 --mca btl self,vader"
  [ucx]="--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca btl ^ofi,uct --mca osc ^ucx"
)
for np in $nps; do
  for t in rdm4 ob1_vader ucx; do
    # shellcheck disable=SC2086
    out=$(timeout 300 "${pin[@]}" mpirun -np "$np" "${common[@]}" ${how[$t]} "$bin" "$sizes" "$secs" 2>&1) || {
      echo "$t np=$np: failed"; echo "$out" | tail -5; continue; }
    echo "$out" | grep '^alltoall' | sed "s/^/$t /"
  done
done
