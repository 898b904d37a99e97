#!/usr/bin/env python3
"""Compare rdm4 with UCX and libfabric's shm provider on this host, in one run.

usage: scripts/compare_peers.py [--sizes 8,4096,65536,1048576] [--repeats 3]
                                [--quick] [--json PATH] [--timeout SECONDS]
                                [--no-pin] [--rdm4-device shm|udp|auto]

Every tool moves tagged messages between two processes on this machine over
shared memory:

  rdm4       target/release/rdm4-perf (or $RDM4_PERF) --test tag_lat,tag_bw
             --sizes ... --json over rdm4's default device (auto: shared
             memory between processes of one host) unless --rdm4-device;
             it spawns its own peer and pins the two processes to CPUs 0
             and 1 itself.
  UCX        ucx_perftest (package ucx-utils), default transports (shared
             memory between two local processes), tests tag_lat and tag_bw.
  libfabric  fi_pingpong (package libfabric-bin), -p shm -e rdm -m tagged:
             ping-pong only, so it gives latency but no message rate or
             streaming bandwidth.

For the peers the script starts the server, waits until it listens, and runs
the client against 127.0.0.1; with two or more CPUs the server is pinned to the
first allowed CPU and the client to the second (taskset).  ucx_perftest does
as many iterations as rdm4-perf picks for itself (the same formulas, warm-up
excluded from timing in both); fi_pingpong has no warm-up and its first
message sometimes waits 2-16 ms for the shm provider's connection setup, so
its runs are sized (from one calibration run per size) to last ~0.5 s, which
keeps such a stall under ~3%.  --quick runs one repeat, divides UCX's
iterations by 10 and sizes fi_pingpong's runs for ~0.1 s.  The repeats are interleaved (rdm4, UCX, libfabric,
then the next repeat in a rotated order), so a drift of the machine's speed
hits every tool alike; the table gives the median of the repeats, and
--json PATH writes every raw repeat with its exact command.

How the numbers are read:
  * all latencies are one-way (half the round trip): rdm4-perf and
    ucx_perftest halve it themselves; fi_pingpong's usec/xfer is already
    elapsed / (2 x iterations).  fi_pingpong times its provider's lazy
    connection setup too, so its latency is the steady state
    (T_N - T_1) / (N - 1) / 2, with T_1 the fastest of three 1-iteration runs.
  * ucx_perftest's "50.0%ile" is the median, "overall" the average; its MB/s
    are MiB/s and are converted to MB/s (10^6 B/s) like everything here.
  * "ping-pong bandwidth" = size / average one-way latency (one message in
    flight); "streaming bandwidth" and "message rate" come from tag_bw.

A missing tool is reported (with the package to install) and its column left
empty; a run that fails is reported and left out; a run that times out
(--timeout, default 60 s) also skips that tool's remaining runs of that test.
Only processes this script started (each in its own session) are ever killed.
The table goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = ("rdm4", "ucx", "fi")
TITLES = {"rdm4": "rdm4", "ucx": "UCX", "fi": "libfabric shm"}
METRICS = (  # key, label, unit
    ("lat_med", "latency, median", "µs"),
    ("lat_avg", "latency, average", "µs"),
    ("rate", "message rate", "M msg/s"),
    ("bw", "streaming bandwidth", "MB/s"),
    ("ppbw", "ping-pong bandwidth", "MB/s"),
)
LIVE: set[subprocess.Popen] = set()


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def lat_iters(size: int) -> int:  # rdm4-perf's automatic count for tag_lat
    return max(20, min(200_000, 200_000_000 // (size + 2000)))


def bw_iters(size: int) -> int:  # rdm4-perf's automatic count for tag_bw
    return max(100, min(2_000_000, 2_000_000_000 // (size + 1000)))


def human_size(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


# ---------------------------------------------------------------- processes


def start(cmd: list[str], env: dict | None) -> subprocess.Popen:
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, start_new_session=True)
    LIVE.add(p)
    return p


def kill(p: subprocess.Popen) -> None:
    """Kills p and its descendants: its own process group (pgid == p.pid)."""
    if p.poll() is None:
        for target in (lambda: os.killpg(p.pid, signal.SIGKILL), lambda: p.kill()):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass
    try:
        p.communicate(timeout=5)
    except (subprocess.TimeoutExpired, ValueError):
        pass
    LIVE.discard(p)


def finish(p: subprocess.Popen, timeout: float) -> tuple[int | None, str, str]:
    """Waits for p up to timeout seconds; rc None means it was killed."""
    try:
        out, err = p.communicate(timeout=timeout)
        LIVE.discard(p)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        kill(p)
        return None, "", ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


class Harness:
    def __init__(self, args: argparse.Namespace):
        self.timeout = args.timeout
        cpus = sorted(os.sched_getaffinity(0))
        self.pin = (not args.no_pin and len(cpus) >= 2 and shutil.which("taskset") is not None)
        self.cpus = cpus[:2] if self.pin else []

    def pinned(self, cmd: list[str], which: int) -> list[str]:
        return ["taskset", "-c", str(self.cpus[which])] + cmd if self.pin else cmd

    def pair(self, server: list[str], client: list[str], port: int,
             env: dict | None = None) -> tuple[str, str | None]:
        """Runs a server/client pair; returns (client stdout, error or None)."""
        full_env = dict(os.environ, **(env or {}))
        srv = start(self.pinned(server, 0), full_env)
        deadline = time.monotonic() + min(10.0, self.timeout)
        while not listening(port) and srv.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if not listening(port):
            rc, out, err = finish(srv, 0.5)
            why = f" (exit {rc}: {(err or out).strip()[-300:]})" if rc is not None else ""
            return "", f"server did not listen on port {port}{why}"
        cli = start(self.pinned(client, 1), full_env)
        rc, out, err = finish(cli, self.timeout)
        src, _, _ = finish(srv, 5 if rc is not None else 0.1)
        if rc is None:
            return out, f"timeout after {self.timeout:.0f} s"
        if rc != 0:
            return out, f"client exit {rc}: {(err or out).strip()[-300:]}"
        if src is None:
            log("  (server did not exit by itself; killed)")
        return out, None


# ---------------------------------------------------------------- the tools


def rdm4_run(h: Harness, perf: str, sizes: list[int], device: str | None) -> tuple[list[dict], str, str | None]:
    cmd = [perf, "--test", "tag_lat,tag_bw", "--sizes", ",".join(map(str, sizes)), "--json"]
    if device:
        cmd += ["--device", device]
    p = start(cmd, None)
    rc, out, err = finish(p, h.timeout)
    if rc is None:
        return [], shlex.join(cmd), f"timeout after {h.timeout:.0f} s"
    if rc != 0:
        return [], shlex.join(cmd), f"exit {rc}: {err.strip()[-300:]}"
    rows = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows, shlex.join(cmd), None if rows else "no JSON lines in its output"


def ucx_cmds(test: str, size: int, iters: int, port: int) -> tuple[list[str], list[str]]:
    server = ["ucx_perftest", "-p", str(port)]
    client = ["ucx_perftest", "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size),
              "-n", str(iters), "-w", str(max(1, iters // 10)), "-f", "-I"]
    return server, client


UCX_ENV = {"UCX_NET_DEVICES": "lo"}  # no network device; local peers use shared memory


def ucx_parse(out: str) -> list[float] | None:
    """The final result line: iterations, p50, avg, overall (µs), MiB/s avg,
    overall, msg/s avg, overall (-I appends the protocol description)."""
    found = None
    for line in out.splitlines():
        tokens = line.replace("Final:", "").split()
        try:
            found = [float(t) for t in tokens[:8]] if len(tokens) >= 8 else found
        except ValueError:
            continue
    return found


def fi_cmds(size: int, iters: int, port: int) -> tuple[list[str], list[str]]:
    base = ["fi_pingpong", "-p", "shm", "-e", "rdm", "-m", "tagged", "-S", str(size), "-I", str(iters)]
    return base + ["-B", str(port)], base + ["-P", str(port), "127.0.0.1"]


def sig_digits(text: str) -> int:
    return len(text.replace(".", "").lstrip("0"))


def fi_elapsed_us(out: str, size: int, iters: int) -> float | None:
    """Elapsed µs of the timed loop, from whichever of MB/sec (= 2·N·size /
    elapsed) or usec/xfer (= elapsed / 2N) was printed with more digits."""
    for line in out.splitlines():
        t = line.split()  # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec ("4k", "1m"...)
        if len(t) == 8 and t[0] != "bytes" and all(x.replace(".", "").isdigit() for x in t[5:7]):
            mbps, usec = t[5], t[6]
            if float(mbps) > 0 and sig_digits(mbps) >= sig_digits(usec):
                return 2 * iters * size / float(mbps)
            return float(usec) * 2 * iters
    return None


# ---------------------------------------------------------------- main


def host_lines(h: Harness) -> list[str]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), model)
    except OSError:
        pass
    versions = []
    for cmd in (["ucx_info", "-v"], ["fi_info", "--version"]):
        if shutil.which(cmd[0]):
            try:
                first = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.splitlines()
                versions.append(first[0].lstrip("# ").replace("Version ", "UCX ").replace("fi_info: ", "libfabric "))
            except (subprocess.TimeoutExpired, IndexError, OSError):
                pass
    pin = (f"peers' servers on CPU {h.cpus[0]}, clients on CPU {h.cpus[1]} (taskset); "
           "rdm4-perf pins its two processes to CPUs 0 and 1 itself") if h.pin else "not pinned"
    return [f"- host: CPU {model}, `nproc` = {len(os.sched_getaffinity(0))}, kernel {platform.release()}",
            f"- peers: {', '.join(versions) or 'none found'}; pinning: {pin}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8,4096,65536,1048576", help="message sizes in bytes")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement; the median is shown")
    ap.add_argument("--quick", action="store_true", help="1 repeat, peers do 1/10 of the iterations")
    ap.add_argument("--json", metavar="PATH", help="write every raw repeat here")
    ap.add_argument("--timeout", type=float, default=60.0, help="limit for any one process (s)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the peers' processes")
    ap.add_argument("--rdm4-device", metavar="DEV", help="rdm4-perf's --device (default: its own); the peers stay as they are")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    repeats = 1 if args.quick else max(1, args.repeats)
    scale = 10 if args.quick else 1
    fi_target = 0.1 if args.quick else 0.5  # seconds per timed fi_pingpong loop
    h = Harness(args)
    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")

    perf = os.environ.get("RDM4_PERF") or os.path.join(REPO, "target/release/rdm4-perf")
    skipped: dict[str, str] = {}
    if not (os.path.isfile(perf) and os.access(perf, os.X_OK)):
        skipped["rdm4"] = f"{perf} not found: run `cargo build --release --bin rdm4-perf` or set RDM4_PERF"
    for tool, exe, pkg in (("ucx", "ucx_perftest", "ucx-utils"), ("fi", "fi_pingpong", "libfabric-bin")):
        if shutil.which(exe) is None:
            skipped[tool] = f"`{exe}` not found: `apt-get install {pkg}`"
    for tool, why in skipped.items():
        log(f"skipping {TITLES[tool]}: {why}")

    # values[tool][(metric, size)] = one value per successful repeat
    values: dict[str, dict[tuple[str, int], list[float]]] = {t: {} for t in TOOLS}
    raw: list[dict] = []
    failures: list[str] = []
    dead: dict[tuple[str, str], str] = {}  # (tool, test) -> why its remaining runs are skipped

    def add(tool: str, metric: str, size: int, v: float) -> None:
        values[tool].setdefault((metric, size), []).append(v)

    def failed(tool: str, test: str, size: int | str, why: str) -> None:
        failures.append(f"{TITLES[tool]} {test} {size}: {why}")
        log(f"  {TITLES[tool]} {test} {size}: FAILED: {why}")
        if why.startswith("timeout"):
            dead[(tool, test.split()[0])] = why

    def run_rdm4(rep: int) -> None:
        rows, cmd, err = rdm4_run(h, perf, sizes, args.rdm4_device)
        log(f"  rdm4: {cmd}")
        if err:
            failed("rdm4", "tag_lat,tag_bw", "all", err)
            if err.startswith("timeout"):
                skipped["rdm4"] = err
            return
        for r in rows:
            raw.append({"tool": "rdm4", "repeat": rep, "cmd": cmd, "result": r})
            size = r["size"]
            if r["test"] == "tag_lat":
                add("rdm4", "lat_med", size, r["lat_us_median"])
                add("rdm4", "lat_avg", size, r["lat_us_avg"])
                if r["lat_us_avg"] > 0:
                    add("rdm4", "ppbw", size, size / r["lat_us_avg"])
            elif r["test"] == "tag_bw":
                add("rdm4", "rate", size, r["msg_rate"] / 1e6)
                add("rdm4", "bw", size, r["bw_mbps"])

    def run_ucx(rep: int) -> None:
        for test in ("tag_lat", "tag_bw"):
            for size in sizes:
                if ("ucx", test) in dead:
                    continue
                iters = max(10, (lat_iters(size) if test == "tag_lat" else bw_iters(size)) // scale)
                port = free_port()
                server, client = ucx_cmds(test, size, iters, port)
                out, err = h.pair(server, client, port, UCX_ENV)
                res = None if err else ucx_parse(out)
                if res is None:
                    failed("ucx", test, size, err or "no result line")
                    continue
                log(f"  UCX {test} {size}: {' '.join(out.strip().splitlines()[-1].split()[:8])}")
                raw.append({"tool": "ucx", "repeat": rep, "test": test, "size": size, "iters": iters,
                            "server": shlex.join(server), "client": shlex.join(client),
                            "env": UCX_ENV, "result_line": out.strip().splitlines()[-1]})
                if test == "tag_lat":
                    add("ucx", "lat_med", size, res[1])
                    add("ucx", "lat_avg", size, res[3])
                    if res[3] > 0:
                        add("ucx", "ppbw", size, size / res[3])
                else:
                    add("ucx", "bw", size, res[5] * 1.048576)
                    add("ucx", "rate", size, res[7] / 1e6)

    fi_t1: dict[int, float] = {}
    fi_n: dict[int, int] = {}

    def fi_once(size: int, iters: int) -> tuple[float | None, str, dict]:
        port = free_port()
        server, client = fi_cmds(size, iters, port)
        out, err = h.pair(server, client, port)
        info = {"server": shlex.join(server), "client": shlex.join(client), "output": out.strip()}
        if err:
            return None, err, info
        us = fi_elapsed_us(out, size, iters)
        return us, "" if us else f"no result line in {out.strip()!r}", info

    def fi_prepare(size: int) -> bool:
        """T_1 (the fastest of three 1-iteration runs: the first message's
        setup stall only adds time) and N (a timed loop of ~fi_target s)."""
        probes = [fi_once(size, 1) for _ in range(3)]
        good = [p[0] for p in probes if p[0]]
        if not good:
            failed("fi", "pingpong -I 1", size, probes[-1][1])
            return False
        fi_t1[size] = min(good)
        n0 = max(10, lat_iters(size) // scale)
        t, err, info = fi_once(size, n0)
        if t is None:
            failed("fi", "pingpong (calibration)", size, err)
            return False
        round_trip = max(t - fi_t1[size], 1e-3 * n0) / (n0 - 1)
        fi_n[size] = max(n0, min(5_000_000, int(fi_target * 1e6 / round_trip)))
        raw.append({"tool": "fi", "calibration": True, "size": size, "t1_probes_us": [p[0] for p in probes],
                    "t1_us": fi_t1[size], "calibration_iters": n0, "calibration_us": t, "iters": fi_n[size],
                    **info})
        log(f"  libfabric {size}: T_1 {fi_t1[size]:.0f} µs of {[round(p[0] or -1) for p in probes]}, "
            f"N = {fi_n[size]}")
        return True

    def run_fi(rep: int) -> None:
        for size in sizes:
            if ("fi", "pingpong") in dead:
                return
            if size not in fi_n and not fi_prepare(size):
                continue
            iters = fi_n[size]
            elapsed, err, info = fi_once(size, iters)
            if elapsed is None:
                failed("fi", "pingpong", size, err)
                continue
            one_way = max(elapsed - fi_t1[size], 0.0) / (iters - 1) / 2
            log(f"  libfabric pingpong {size}: {elapsed / iters / 2:.3f} µs printed, {one_way:.3f} µs steady")
            raw.append({"tool": "fi", "repeat": rep, "size": size, "iters": iters, "elapsed_us": elapsed,
                        "t1_us": fi_t1[size], "lat_us_uncorrected": elapsed / iters / 2,
                        "lat_us": one_way, **info})
            add("fi", "lat_avg", size, one_way)
            if one_way > 0:
                add("fi", "ppbw", size, size / one_way)

    runners = {"rdm4": run_rdm4, "ucx": run_ucx, "fi": run_fi}
    try:
        for rep in range(repeats):
            order = TOOLS[rep % 3:] + TOOLS[:rep % 3]
            for tool in order:
                if tool not in skipped:
                    log(f"repeat {rep + 1}/{repeats}: {TITLES[tool]}")
                    runners[tool](rep)
    finally:
        for p in list(LIVE):
            kill(p)
    wall = time.monotonic() - t0

    # ------------------------------------------------------------ the report
    s = ",".join(map(str, sizes))
    n_lat = "N = clamp(200e6 / (SIZE + 2000), 20, 200000)" + (" / 10" if scale > 1 else "")
    n_bw = "N = clamp(2e9 / (SIZE + 1000), 100, 2000000)" + (" / 10" if scale > 1 else "")
    srv, cpu = (f"taskset -c {h.cpus[0]} ", f"taskset -c {h.cpus[1]} ") if h.pin else ("", "")
    perf_shown = os.path.relpath(perf, os.getcwd()) if perf.startswith(REPO) else perf
    lines = [f"# rdm4 vs UCX vs libfabric shm — {date}", ""]
    lines += host_lines(h)
    lines += [f"- load average (1 min) {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end "
              "(other busy processes on these CPUs disturb every number, the averages most)",
              f"- {repeats} repeat(s) interleaved, median shown; sizes {s}; wall time {wall:.0f} s; "
              f"command: `{shlex.join(['python3'] + sys.argv)}`",
              "- commands (PORT: a free local port picked per run; SIZE: each size):",
              f"  - rdm4: `{perf_shown} --test tag_lat,tag_bw --sizes {s} --json`",
              f"  - UCX: server `UCX_NET_DEVICES=lo {srv}ucx_perftest -p PORT`, client "
              f"`UCX_NET_DEVICES=lo {cpu}ucx_perftest 127.0.0.1 -p PORT -t tag_lat -s SIZE -n N -w N/10 -f -I` "
              f"with {n_lat}, and the same with `-t tag_bw`, {n_bw}",
              f"  - libfabric: server `{srv}fi_pingpong -p shm -e rdm -m tagged -S SIZE -I N -B PORT`, "
              f"client `{cpu}fi_pingpong -p shm -e rdm -m tagged -S SIZE -I N -P PORT 127.0.0.1` "
              f"with N sized for a ~{fi_target:g} s loop (per size: 3 runs with `-I 1` for T_1, 1 calibration run "
              f"with {n_lat.removeprefix('N = ')}; N in the JSON)", ""]
    present = [t for t in TOOLS if t not in skipped or values[t]]
    peers = [t for t in ("ucx", "fi") if t in present]
    head = ["metric"] + [TITLES[t] for t in present]
    if "rdm4" in present:
        head += [f"rdm4 / {TITLES[t]}" for t in peers]
    head += ["spread"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in sizes:
        for key, label, unit in METRICS:
            med = {t: statistics.median(values[t][(key, size)]) if values[t].get((key, size)) else None
                   for t in present}
            if all(v is None for v in med.values()):
                continue
            row = [f"{human_size(size)} {label} ({unit})"] + [fmt(med[t]) for t in present]
            if "rdm4" in present:
                row += [f"{med['rdm4'] / med[t]:.2f}" if med["rdm4"] and med[t] else "—" for t in peers]
            spreads = [(max(v) - min(v)) / statistics.median(v) for t in present
                       if len(v := values[t].get((key, size), [])) > 1 and statistics.median(v) > 0]
            row.append(f"{100 * max(spreads):.0f}%" if spreads else "—")
            lines.append("| " + " | ".join(row) + " |")
    lines += ["",
              "- ratio = rdm4 ÷ peer: below 1 is better for rdm4 in latency rows, above 1 in rate and "
              "bandwidth rows. spread = largest (max−min)/median of one tool's repeats in that row.",
              "- latencies are one-way (half the round trip); libfabric's is the average over its "
              "steady state (connection setup removed); fi_pingpong is ping-pong only, hence no median, "
              "message rate or streaming bandwidth. MB/s = 10⁶ B/s; ping-pong bandwidth = size / average latency."]
    for tool, why in skipped.items():
        lines.append(f"- {TITLES[tool]} not measured: {why}")
    for f in failures:
        lines.append(f"- failed run: {f}")
    print("\n".join(lines))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": date, "argv": sys.argv, "sizes": sizes, "repeats": repeats,
                       "quick": args.quick, "pinned_cpus": h.cpus, "wall_s": wall,
                       "skipped": skipped, "failures": failures, "runs": raw,
                       "medians": {t: {f"{k}@{sz}": statistics.median(v) for (k, sz), v in values[t].items()}
                                   for t in TOOLS}}, f, indent=1)
        log(f"raw repeats written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
