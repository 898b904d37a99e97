#!/usr/bin/env bash
# scripts/fabtests.sh: build libfabric's functional tests (fabtests) 1.17.0
# against the installed libfabric 1.17 and run the RDM ones for one provider,
# server and client on this host over loopback, with a results table.
#
# ---------------------------------------------------------------- usage ----
# Needs: libfabric 1.17 headers and library (Debian 12: libfabric-dev,
#   libfabric1), gcc, make, and autoconf + automake + libtool when the
#   source is a git checkout (a release tarball has its configure already);
#   bash >= 5.1, coreutils `timeout`.
# Needs the libfabric v1.17.0 source tree. The script never downloads it.
#   Get one of these on a machine that has network access, then copy it here:
#     git clone --branch v1.17.0 --depth 1 https://github.com/ofiwg/libfabric
#     (or https://github.com/ofiwg/libfabric/releases/download/v1.17.0/
#      libfabric-1.17.0.tar.bz2 or fabtests-1.17.0.tar.bz2)
#   Pass the libfabric tree, its fabtests/ directory, or one of these
#   tarballs, as --src or in LIBFABRIC_SRC.
#
# Run (builds once into /tmp/fabtests-build, then runs every test):
#   LIBFABRIC_SRC=/tmp/libfabric-1.17.0 scripts/fabtests.sh -p "tcp;ofi_rxm"
#   LIBFABRIC_SRC=/tmp/libfabric-1.17.0 FI_PROVIDER_PATH=/path/to/dir/with/librdm4-fi.so \
#       scripts/fabtests.sh -p rdm4
#
# Output: one row per test as it finishes, then a totals line:
#   TEST     the fabtests command line, without the provider (-p) and the
#            address arguments the script adds (see ADDR)
#   ADDR     how the two sides find each other (why which test: see below):
#              oob   out-of-band: server `-E=<port> -B 0`, client
#                    `-E=<port> -B 0 127.0.0.1`. The server listens on a TCP
#                    socket at <port>, a free port the script picks; each
#                    side sends the other its fi_getname blob over it and
#                    fi_av_insert's what it gets: no address string is parsed.
#              oob+s oob plus `-s 127.0.0.1` on both sides (--oob-src), for
#                    IP providers that otherwise bind the wildcard address
#                    0.0.0.0 and then refuse it in fi_av_insert (udp;ofi_rxd,
#                    sockets). Not for opaque-address providers.
#              node  node/service: server `-s 127.0.0.1 -B <port>`, client
#                    `-s 127.0.0.1 -P <port> 127.0.0.1`: the provider's
#                    fi_getinfo must turn "127.0.0.1" and "<port>" into its
#                    own addresses.
#              one   a single process (unit tests), arguments as shown
#   RESULT   pass | fail | timeout | skipped-unsupported
#              skipped-unsupported: both sides (or one side, while the script
#              ended the other that was still waiting for it) exited with
#              FI_ENODATA (61; no fi_info matches the test's hints) or
#              FI_ENOSYS (38), also as 195 / 218 (the same, returned negative
#              from main). That is how fabtests says "this provider does not
#              offer that"; runfabtests.sh calls it Notrun.
#              timeout: a side was still running at the time limit (-t).
#              fail: anything else; see the logs.
#   SECS     wall time of the test
#   EXIT     exit status, server/client (or the one process); 61 FI_ENODATA,
#            38 FI_ENOSYS, 95 FI_EOPNOTSUPP, 11 FI_EAGAIN, 124 hit the time
#            limit; a "K" after it: ended by the script (SIGTERM) 3 s
#            after its peer had failed, or, for fi_rdm_stress whose server
#            never ends, once the client was done.
#   NOTE     "upstream-excluded" when runfabtests.sh 1.17.0's exclude file for
#            the provider (test_configs/<util or core>/*.exclude) lists it.
#   Logs of the last run: <build-dir>/logs/<provider>/NN.server.log and
#   NN.client.log (NN.log for one process), each starting with its command
#   line, and results.tsv with the table; the tests run in that directory,
#   so a crashing test's backtrace file (*.btr) lands there too.
#   Exit status: 0 when nothing failed or timed out, 1 otherwise, 2 on a
#   usage or build error.
#
# Options (env in brackets):
#   -p PROV         provider string given to every test's -p, e.g. rdm4,
#                   "tcp;ofi_rxm", "udp;ofi_rxd" (required unless --build-only)
#   --src DIR|TAR   libfabric 1.17.0 source [LIBFABRIC_SRC]; only needed for
#                   the first build
#   --build-dir DIR default /tmp/fabtests-build [FABTESTS_BUILD_DIR]
#   --rebuild       build again even if the build directory has a build
#   --build-only    build and stop
#   -t SECS         time limit of each process, default 60 [FABTESTS_TIMEOUT]
#   -f REGEX        run only the tests whose TEST matches (grep -E)
#   -x REGEX        skip the tests whose TEST matches (grep -E)
#   -g GROUPS       comma list of unit,neg,functional,short,extra (default all)
#   -m oob|node     force every two-process test to this addressing
#   --oob-src       oob tests as oob+s [FABTESTS_OOB_SRC=1]
#   -l              list the tests with their addressing and stop
#   -j N            make jobs, default 2 [FABTESTS_JOBS]
#   --host ADDR     loopback address to use, default 127.0.0.1
#   FI_PROVIDER_PATH, FI_LOG_LEVEL and the like pass through to the tests.
#
# ---------------------------------------------------- how tests are picked --
# The list is runfabtests.sh 1.17.0's: its "unit" tests, its negative test
# `fi_rdm g00n13s`, and those of its "functional" and "short" sets that open
# RDM endpoints (`-e rdm`, or RDM by default: fi_rdm*, fi_shared_ctx,
# fi_scalable_ep, fi_msg_inject, fi_poll, fi_rma_bw -e rdm, ...). Its
# "standard" set is the "short" one with more iterations and is left out.
# "extra" holds the RDM tests 1.17.0 builds but runfabtests.sh does not run:
# fi_rdm_deferred_wq, fi_rdm_multi_domain, and fi_rdm_stress with one client
# (-C 1: with more, the parent forks them and exits 0 whatever they do).
#
# Addressing, decided per test for a provider whose addresses are opaque
# blobs (addr_format FI_FORMAT_UNSPEC) that only fi_getname gives and only
# fi_av_insert takes:
#   oob (preferred): every test that sets up through ft_init_fabric (which
#     opens the out-of-band socket). Still, fabtests 1.17.0 then calls on both
#     sides fi_getinfo(node NULL, service "0", FI_SOURCE, hints): the service
#     is -B's ("9228" without -B, which two tcp endpoints on one host cannot
#     both bind), so the provider must accept a numeric service with no node
#     (ignoring it is fine). "0" lets IP providers take any free port, and
#     fi_rdm_multi_client's ten successive clients get ten addresses.
#   node: the tests that cannot exchange addresses out of band in 1.17.0:
#     fi_shared_ctx and fi_scalable_ep (the client fi_av_insert's the
#     fi_info dest_addr its node/service gave), fi_poll (never opens the
#     socket; with -E it fails with EBADF, exit 9), fi_rdm_shared_av (its
#     forked client half has no socket), fi_rdm_stress (the client reaches the
#     server by node/service only). An opaque-address provider can be
#     expected to answer these with FI_ENODATA (skipped-unsupported) unless
#     its fi_getinfo resolves "127.0.0.1" plus a port into a peer address.
#   one: fi_getinfo_test and fi_av_test test node/service strings by design
#     (fi_av_test asks for addr_format FI_SOCKADDR: a provider without it
#     should get skipped-unsupported; rdm4 has it); `fi_rdm g00n13s` passes when
#     fi_getinfo("g00n13s", ...) fails with FI_ENODATA, so a provider that
#     ignores the node fails it; the other unit tests pass no address.
# Known oob-only trouble: fi_rdm_tagged_peek's server starts with five
# fi_tsend's and gives up on -FI_EAGAIN (exit 11, client left waiting):
# tcp;ofi_rxm returns EAGAIN while its connection is being set up, which under
# node addressing the in-band address exchange has already done.
#
# runfabtests.sh is not used to drive the runs: its cleanup kills every
# process on the host whose name starts with fi_ (kill -9), other users'
# included, and its -b mode leaves both sides on source port 9228, which fails
# on one host (EADDRINUSE). This script runs each side under `timeout` (which
# signals its own process group, so a test's forked children too) and ends
# only those.
set -u -o pipefail

FT_VERSION=1.17.0
SELF=$(basename "$0")

src=${LIBFABRIC_SRC:-}
build=${FABTESTS_BUILD_DIR:-/tmp/fabtests-build}
tmo=${FABTESTS_TIMEOUT:-60}
jobs=${FABTESTS_JOBS:-2}
host=127.0.0.1
prov=""
filter=""
skip=""
groups="unit,neg,functional,short,extra"
force_mode=""
oob_src=${FABTESTS_OOB_SRC:-0}
rebuild=0
build_only=0
list_only=0
grace=3          # seconds a side may keep running after its peer failed
ready_wait=10    # seconds to wait for an oob server's socket

die() { echo "$SELF: $*" >&2; exit 2; }

usage() {
	sed -n '/^# ---* usage/,/^# ---* how tests/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit "${1:-0}"
}

while [ $# -gt 0 ]; do
	case "$1" in
	-p) prov=${2?}; shift 2 ;;
	--src) src=${2?}; shift 2 ;;
	--build-dir) build=${2?}; shift 2 ;;
	--rebuild) rebuild=1; shift ;;
	--build-only) build_only=1; shift ;;
	-t) tmo=${2?}; shift 2 ;;
	-f) filter=${2?}; shift 2 ;;
	-x) skip=${2?}; shift 2 ;;
	-g) groups=${2?}; shift 2 ;;
	-m) force_mode=${2?}; shift 2 ;;
	-l) list_only=1; shift ;;
	-j) jobs=${2?}; shift 2 ;;
	--host) host=${2?}; shift 2 ;;
	--oob-src) oob_src=1; shift ;;
	-h|--help) usage 0 ;;
	*) echo "$SELF: unknown argument '$1'" >&2; usage 2 ;;
	esac
done
# absolute, as the tests run in the log directory
build=$(realpath -m -- "$build")
[ -n "$src" ] && [ -e "$src" ] && src=$(realpath -- "$src")
case "$force_mode" in ""|oob|node) ;; *) die "-m takes oob or node" ;; esac
[[ "$tmo" =~ ^[0-9]+$ ]] || die "-t takes whole seconds"
((BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1))) ||
	die "needs bash 5.1 or newer (wait -n -p)"

# ------------------------------------------------------------------ tests --
# group | addressing | flags | command (words, no quoting)
#   flags: persist = the server never exits by design; the script ends it
#          once the client is done, and the client's status is the result.
#          neg = one process expected to exit with FI_ENODATA.
TESTS='
unit       |one  |    |fi_getinfo_test -s HOST HOST
unit       |one  |    |fi_av_test -g HOST -n 1 -s HOST -e rdm
unit       |one  |    |fi_dom_test -n 2
unit       |one  |    |fi_eq_test
unit       |one  |    |fi_cq_test
unit       |one  |    |fi_mr_test
unit       |one  |    |fi_cntr_test
neg        |one  |neg |fi_rdm g00n13s
functional |oob  |    |fi_av_xfer -e rdm
functional |oob  |    |fi_cq_data -e rdm
functional |node |    |fi_poll -t queue
functional |node |    |fi_poll -t counter
functional |oob  |    |fi_rdm
functional |oob  |    |fi_rdm -U
functional |oob  |    |fi_rdm_rma_event
functional |oob  |    |fi_rdm_rma_trigger
functional |node |    |fi_shared_ctx
functional |node |    |fi_shared_ctx --no-tx-shared-ctx
functional |node |    |fi_shared_ctx --no-rx-shared-ctx
functional |oob  |    |fi_rdm_tagged_peek
functional |node |    |fi_scalable_ep
functional |node |    |fi_rdm_shared_av
functional |oob  |    |fi_multi_mr -e rdm -V
functional |oob  |    |fi_multi_ep -e rdm -v
functional |oob  |    |fi_recv_cancel -e rdm -V
functional |oob  |    |fi_unexpected_msg -e rdm -I 10
functional |oob  |    |fi_msg_inject -A inject -v
functional |oob  |    |fi_msg_inject -N -A inject -v
functional |oob  |    |fi_msg_inject -A inj_complete -v
functional |oob  |    |fi_msg_inject -N -A inj_complete -v
functional |oob  |    |fi_bw -e rdm -v -T 1
functional |oob  |    |fi_bw -e rdm -v -T 1 -U
functional |oob  |    |fi_rdm_multi_client -C 10 -I 5
functional |oob  |    |fi_rdm_multi_client -C 10 -I 5 -U
short      |oob  |    |fi_rma_bw -e rdm -o write -I 5
short      |oob  |    |fi_rma_bw -e rdm -o write -I 5 -U
short      |oob  |    |fi_rma_bw -e rdm -o read -I 5
short      |oob  |    |fi_rma_bw -e rdm -o read -I 5 -U
short      |oob  |    |fi_rma_bw -e rdm -o writedata -I 5
short      |oob  |    |fi_rma_bw -e rdm -o writedata -I 5 -U
short      |oob  |    |fi_rdm_atomic -I 5 -o all
short      |oob  |    |fi_rdm_atomic -I 5 -o all -U
short      |oob  |    |fi_rdm_cntr_pingpong -I 5
short      |oob  |    |fi_multi_recv -e rdm -I 5
short      |oob  |    |fi_rdm_pingpong -I 5
short      |oob  |    |fi_rdm_pingpong -I 5 -U
short      |oob  |    |fi_rdm_pingpong -I 5 -v
short      |oob  |    |fi_rdm_pingpong -I 5 -v -U
short      |oob  |    |fi_rdm_tagged_pingpong -I 5
short      |oob  |    |fi_rdm_tagged_pingpong -I 5 -U
short      |oob  |    |fi_rdm_tagged_pingpong -I 5 -v
short      |oob  |    |fi_rdm_tagged_pingpong -I 5 -v -U
short      |oob  |    |fi_rdm_tagged_bw -I 5
short      |oob  |    |fi_rdm_tagged_bw -I 5 -U
short      |oob  |    |fi_rdm_tagged_bw -I 5 -v
short      |oob  |    |fi_rdm_tagged_bw -I 5 -v -U
extra      |oob  |    |fi_rdm_deferred_wq
extra      |oob  |    |fi_rdm_deferred_wq -T msg
extra      |oob  |    |fi_rdm_deferred_wq -T tagged
extra      |oob  |    |fi_rdm_deferred_wq -T rma
extra      |oob  |    |fi_rdm_deferred_wq -T atomic
extra      |oob  |    |fi_rdm_multi_domain
extra      |node |persist|fi_rdm_stress -C 1 -u STRESS_JSON
'

# ------------------------------------------------------------------ build --
find_fabtests_src() {
	# prints the fabtests source directory for $1 (tree or tarball)
	local s=$1 d f
	if [ -f "$s" ]; then
		case "$s" in
		*.tar.bz2|*.tar.gz|*.tgz|*.tar.xz|*.tar) ;;
		*) die "$s: not a directory or a .tar[.gz|.bz2|.xz] archive" ;;
		esac
		d="$build/srcdist"
		rm -rf "$d" && mkdir -p "$d" || die "cannot make $d"
		tar -xf "$s" -C "$d" || die "cannot extract $s"
		for f in "$d"/*/fabtests/configure.ac "$d"/*/configure.ac; do
			if [ -f "$f" ] && [ -f "$(dirname "$f")/common/shared.c" ]; then
				dirname "$f"
				return
			fi
		done
		die "$1: no fabtests sources inside"
	fi
	[ -d "$s" ] || die "$s: no such directory"
	if [ -f "$s/fabtests/configure.ac" ]; then
		(cd "$s/fabtests" && pwd)
	elif [ -f "$s/configure.ac" ] && [ -f "$s/common/shared.c" ]; then
		(cd "$s" && pwd)
	else
		die "$s: neither a libfabric tree (with fabtests/) nor a fabtests tree"
	fi
}

how_to_get_sources() {
	cat >&2 <<-EOF
	$SELF: needs the libfabric $FT_VERSION sources (this script never downloads).
	  On a machine with network access:
	    git clone --branch v$FT_VERSION --depth 1 https://github.com/ofiwg/libfabric libfabric-$FT_VERSION
	  or fetch https://github.com/ofiwg/libfabric/releases/download/v$FT_VERSION/libfabric-$FT_VERSION.tar.bz2
	  copy it here and run:  LIBFABRIC_SRC=<that tree or tarball> $0 -p <provider>
	EOF
	exit 2
}

check_installed_libfabric() {
	local h=/usr/include/rdma/fabric.h maj min
	[ -f "$h" ] || die "$h missing: install libfabric-dev (1.17)"
	maj=$(awk '/#define FI_MAJOR_VERSION/{print $3}' "$h")
	min=$(awk '/#define FI_MINOR_VERSION/{print $3}' "$h")
	if [ "$maj.$min" != 1.17 ]; then
		echo "$SELF: warning: installed libfabric headers are $maj.$min, not 1.17" >&2
	fi
}

build_fabtests() {
	local fsrc stamp want log v
	if [ -z "$src" ]; then
		if [ -x "$build/install/bin/fi_rdm" ] && [ $rebuild = 0 ]; then
			echo "# using the earlier build in $build (no source given)"
			return
		fi
		how_to_get_sources
	fi
	stamp="$build/.built"
	if [ -f "$src" ] && [ $rebuild = 0 ] && [ -x "$build/install/bin/fi_rdm" ] &&
	   [ "$(cat "$stamp" 2>/dev/null)" = "fabtests $FT_VERSION from $(realpath "$src")" ]; then
		echo "# using the build in $build (fabtests $FT_VERSION from $src)"
		return
	fi
	fsrc=$(find_fabtests_src "$src") || exit 2
	v=$(sed -n 's/^AC_INIT(\[fabtests\], *\[\([^]]*\)\].*/\1/p' "$fsrc/configure.ac")
	if [ "$v" != "$FT_VERSION" ]; then
		echo "$SELF: $fsrc is fabtests '$v', not $FT_VERSION" >&2
		how_to_get_sources
	fi
	want="fabtests $v from $fsrc"
	[ -f "$src" ] && want="fabtests $v from $(realpath "$src")"
	if [ $rebuild = 0 ] && [ -x "$build/install/bin/fi_rdm" ] &&
	   [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
		echo "# using the build in $build ($want)"
		return
	fi
	check_installed_libfabric
	mkdir -p "$build" || die "cannot make $build"
	log="$build/build.log"
	echo "# building $want in $build (log: $log)"
	rm -rf "$build/src" "$build/install" "$stamp"
	# Work on a copy: autogen and configure write into the source tree.
	cp -a "$fsrc" "$build/src" || die "cannot copy $fsrc"
	(
		set -e
		cd "$build/src"
		if [ ! -x configure ]; then
			for t in autoreconf automake libtoolize; do
				command -v $t >/dev/null ||
					{ echo "$t missing: a git tree needs autoconf automake libtool"; exit 1; }
			done
			mkdir -p config
			autoreconf -ivf
		fi
		# /usr is on the default search paths; --with-libfabric=/usr would
		# add -L/usr/lib, which is not where Debian keeps the library.
		if [ "${LIBFABRIC_PREFIX:-/usr}" = /usr ]; then
			./configure --prefix="$build/install"
		else
			./configure --prefix="$build/install" --with-libfabric="$LIBFABRIC_PREFIX"
		fi
		make -j"$jobs"
		make install
	) >"$log" 2>&1 || { tail -30 "$log" >&2; die "build failed, see $log"; }
	echo "$want" >"$stamp"
	echo "# built: $build/install/bin ($(grep -c . <<<"$(ls "$build/install/bin")") programs)"
}

# -------------------------------------------------------------- running ---
bin=""
logdir=""
cur_pids=()

end_ours() {
	# end the pairs this script started (each is a `timeout` process that
	# forwards the signal to its own process group)
	local p
	for p in "${cur_pids[@]}"; do
		kill -TERM "$p" 2>/dev/null
	done
}
trap 'end_ours; exit 130' INT TERM HUP
# rdm4's shared-memory segments go under a prefix of this run's, removed at
# the end: a test ended by a signal (fi_rdm_stress's server) never closes
# its endpoint, and would leave its segments in /dev/shm.
if [ -z "${RDM4_SHM_PREFIX:-}" ]; then
	export RDM4_SHM_PREFIX="fabtests$$"
	trap 'rm -f /dev/shm/"$RDM4_SHM_PREFIX"-*' EXIT
fi

port_in_use() {
	local hex
	hex=$(printf ':%04X ' "$1")
	grep -qs -- "$hex" /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6
}

# free_port VAR: a port no socket on this host uses, not handed out before
declare -A used_ports=()
free_port() {
	local p i
	for i in $(seq 200); do
		p=$((20000 + RANDOM % 30000))
		[ -n "${used_ports[$p]:-}" ] && continue
		port_in_use "$p" && continue
		used_ports[$p]=1
		printf -v "$1" '%s' "$p"
		return
	done
	die "no free port found"
}

tcp_listening() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v h="$hex" '$4 == "0A" { n = split($2, a, ":"); if (a[n] == h) f = 1 } END { exit !f }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# FI_ENODATA / FI_ENOSYS, returned from main as positive or (some tests) negative
is_unsupported() { [[ "$1" =~ ^(61|38|195|218)$ ]]; }

# run_one N GROUP MODE FLAGS WORDS... ; sets r_result r_exit r_secs
run_one() {
	local n=$1 mode=$3 flags=$4
	shift 4
	local -a cmd=("$@") s_args c_args
	local exe=${cmd[0]} t0 t1 slog clog spid cpid sp op
	local srv_rc="" cli_rc="" s_killed=0 c_killed=0 first gpid w rc
	cmd=("$bin/$exe" "${cmd[@]:1}")
	slog=$(printf '%s/%02d.server.log' "$logdir" "$n")
	clog=$(printf '%s/%02d.client.log' "$logdir" "$n")
	t0=$(date +%s.%N)
	if [ ! -x "$bin/$exe" ]; then
		r_result=fail r_exit="not built" r_secs=0
		return
	fi
	if [ "$mode" = one ]; then
		slog=$(printf '%s/%02d.log' "$logdir" "$n")
		timeout -k 5 "$tmo" "${cmd[@]}" -p "$prov" </dev/null >"$slog" 2>&1 &
		spid=$!
		cur_pids=("$spid")
		wait "$spid"
		srv_rc=$?
		cur_pids=()
		t1=$(date +%s.%N)
		r_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
		r_exit=$srv_rc
		if [[ "$flags" == *neg* ]]; then
			case $srv_rc in 61) r_result=pass ;; 124|137) r_result=timeout ;; *) r_result=fail ;; esac
		else
			case $srv_rc in
			0) r_result=pass ;;
			124|137) r_result=timeout ;;
			*) is_unsupported "$srv_rc" && r_result=skipped-unsupported || r_result=fail ;;
			esac
		fi
		return
	fi

	free_port sp; free_port op
	if [ "$mode" = oob ]; then
		s_args=(-E="$op" -B 0)
		c_args=(-E="$op" -B 0 "$host")
	elif [ "$mode" = oob+s ]; then
		s_args=(-E="$op" -s "$host" -B 0)
		c_args=(-E="$op" -s "$host" -B 0 "$host")
	else
		s_args=(-s "$host" -B "$sp")
		c_args=(-s "$host" -P "$sp" "$host")
	fi
	{ echo "# ${cmd[*]} -p $prov ${s_args[*]}"; } >"$slog"
	timeout -k 5 "$tmo" "${cmd[@]}" -p "$prov" "${s_args[@]}" </dev/null >>"$slog" 2>&1 &
	spid=$!
	cur_pids=("$spid")
	# let the server get to its accept (oob) or its receive (node)
	if [ "$mode" != node ]; then
		for w in $(seq $((ready_wait * 10))); do
			tcp_listening "$op" && break
			kill -0 "$spid" 2>/dev/null || break
			sleep 0.1
		done
	else
		sleep 1
	fi
	{ echo "# ${cmd[*]} -p $prov ${c_args[*]}"; } >"$clog"
	timeout -k 5 "$tmo" "${cmd[@]}" -p "$prov" "${c_args[@]}" </dev/null >>"$clog" 2>&1 &
	cpid=$!
	cur_pids=("$spid" "$cpid")

	wait -n -p first "$spid" "$cpid"
	w=$?
	if [ "$first" = "$cpid" ]; then
		cli_rc=$w
		if [[ "$flags" == *persist* ]] || [ "$cli_rc" != 0 ]; then
			# the server never ends by itself (persist), or it may be
			# waiting for the client that failed: give it the grace, then end it
			sleep "$grace" &
			gpid=$!
			wait -n -p w "$spid" "$gpid"
			rc=$?
			if [ "$w" = "$spid" ]; then
				srv_rc=$rc
				kill "$gpid" 2>/dev/null; wait "$gpid" 2>/dev/null
			else
				kill -TERM "$spid" 2>/dev/null
				wait "$spid"; srv_rc=$?
				s_killed=1
			fi
		else
			wait "$spid"; srv_rc=$?
		fi
	else
		srv_rc=$w
		if [ "$srv_rc" != 0 ]; then
			sleep "$grace" &
			gpid=$!
			wait -n -p w "$cpid" "$gpid"
			rc=$?
			if [ "$w" = "$cpid" ]; then
				cli_rc=$rc
				kill "$gpid" 2>/dev/null; wait "$gpid" 2>/dev/null
			else
				kill -TERM "$cpid" 2>/dev/null
				wait "$cpid"; cli_rc=$?
				c_killed=1
			fi
		else
			wait "$cpid"; cli_rc=$?
		fi
	fi
	cur_pids=()
	t1=$(date +%s.%N)
	r_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
	r_exit="$srv_rc$([ $s_killed = 1 ] && echo K)/$cli_rc$([ $c_killed = 1 ] && echo K)"

	if [[ "$flags" == *persist* ]] && [ $s_killed = 1 ]; then
		case $cli_rc in
		0) r_result=pass ;;
		124|137) r_result=timeout ;;
		*) is_unsupported "$cli_rc" && r_result=skipped-unsupported || r_result=fail ;;
		esac
	elif [ "$srv_rc" = 0 ] && [ "$cli_rc" = 0 ]; then
		r_result=pass
	elif { [ $s_killed = 0 ] && [[ "$srv_rc" =~ ^(124|137)$ ]]; } ||
	     { [ $c_killed = 0 ] && [[ "$cli_rc" =~ ^(124|137)$ ]]; }; then
		r_result=timeout
	elif { is_unsupported "$srv_rc" || [ $s_killed = 1 ]; } &&
	     { is_unsupported "$cli_rc" || [ $c_killed = 1 ]; }; then
		r_result=skipped-unsupported
	else
		r_result=fail
	fi
}

# The patterns of runfabtests.sh's exclude file for this provider (the
# utility provider's if there is one, else the core's), for the NOTE column.
excludes=()
load_upstream_excludes() {
	local core util name f pat
	IFS=';' read -r core util _ <<<"$prov"
	name=${util:-$core}
	f="$build/src/test_configs/$name/$name.exclude"
	[ -n "$name" ] && [ -f "$f" ] || return 0
	while IFS= read -r pat || [ -n "$pat" ]; do
		[[ "$pat" =~ ^[[:space:]]*(#|$) ]] && continue
		excludes+=("$pat")
	done <"$f"
}
upstream_excluded() {
	local pat
	for pat in "${excludes[@]}"; do
		[[ "$1" =~ $pat ]] && return 0
	done
	return 1
}

run_all() {
	local line group mode flags cmdline n=0 t_start t_end note row
	local -a words
	local -A count=()
	local stress_json="$build/src/test_configs/rdm_stress/stress.json"
	local slug
	slug=$(tr -c 'A-Za-z0-9_.-' '_' <<<"$prov" | sed 's/_$//')
	logdir="$build/logs/$slug"
	bin="$build/install/bin"
	load_upstream_excludes
	if [ $list_only = 0 ]; then
		rm -rf "$logdir" && mkdir -p "$logdir" || die "cannot make $logdir"
		# the tests' working directory: whatever they drop (libfabric's
		# crash backtraces, *.btr) lands beside the logs
		cd "$logdir" || die "cannot enter $logdir"
		echo "# fabtests $FT_VERSION, provider '$prov', host $host, limit ${tmo}s a process," \
			"FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-<unset>}"
		echo "# logs: $logdir"
		printf '%-3s %-50s %-5s %-19s %5s  %-9s %s\n' '#' TEST ADDR RESULT SECS EXIT NOTE
		printf 'n\ttest\taddr\tresult\tsecs\texit\tnote\n' >"$logdir/results.tsv"
	fi
	t_start=$(date +%s)
	while IFS= read -r line; do
		[ -z "${line// /}" ] && continue
		IFS='|' read -r group mode flags cmdline <<<"$line"
		group=${group// /} mode=${mode// /} flags=${flags// /}
		[[ ",$groups," == *",$group,"* ]] || continue
		cmdline=${cmdline//HOST/$host}
		cmdline=${cmdline//STRESS_JSON/$stress_json}
		local shown_cmd=${cmdline//$stress_json/stress.json}
		[ -n "$filter" ] && ! grep -Eq -- "$filter" <<<"$shown_cmd" && continue
		[ -n "$skip" ] && grep -Eq -- "$skip" <<<"$shown_cmd" && continue
		[ "$mode" != one ] && [ -n "$force_mode" ] && mode=$force_mode
		[ "$mode" = oob ] && [ $oob_src = 1 ] && mode=oob+s
		n=$((n + 1))
		if [ $list_only = 1 ]; then
			printf '%-10s %-5s %s\n' "$group" "$mode" "$shown_cmd"
			continue
		fi
		read -ra words <<<"$cmdline"
		run_one "$n" "$group" "$mode" "$flags" "${words[@]}"
		note=""
		upstream_excluded "$shown_cmd" && note="upstream-excluded"
		printf -v row '%-3s %-50s %-5s %-19s %5s  %-9s %s' "$n" "$shown_cmd" "$mode" "$r_result" "$r_secs" "$r_exit" "$note"
		echo "${row%"${row##*[! ]}"}"
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$shown_cmd" "$mode" "$r_result" "$r_secs" "$r_exit" "$note" \
			>>"$logdir/results.tsv"
		count[$r_result]=$(( ${count[$r_result]:-0} + 1 ))
	done <<<"$TESTS"
	[ $list_only = 1 ] && return 0
	t_end=$(date +%s)
	echo "# total $n: pass ${count[pass]:-0}, fail ${count[fail]:-0}," \
		"timeout ${count[timeout]:-0}, skipped-unsupported ${count[skipped-unsupported]:-0};" \
		"$((t_end - t_start)) s"
	[ "${count[fail]:-0}" = 0 ] && [ "${count[timeout]:-0}" = 0 ]
}

if [ $list_only = 1 ]; then
	run_all
	exit 0
fi
build_fabtests
[ $build_only = 1 ] && exit 0
[ -n "$prov" ] || die "give the provider with -p (e.g. -p \"tcp;ofi_rxm\"), see --help"
run_all
