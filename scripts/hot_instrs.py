#!/usr/bin/env python3
"""Per-instruction execution counts of one function, as disassembly.

Runs examples/capi_pair under callgrind with instruction-level data, then
prints the instructions of every function whose name contains FUNC (inlined
code included, calls' inclusive costs excluded) that ran at least MIN times,
with their counts, and the total per message. Shows where a hot path spends
its instructions: bounds checks, spills, a field read byte by byte.

usage: scripts/hot_instrs.py FUNC [MIN] [capi_pair arguments...]
   e.g. scripts/hot_instrs.py ShmDevice::recv_batch 90000 100000 directed 1
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    func = sys.argv[1]
    least = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    args = sys.argv[3:] or ["100000", "directed", "1"]
    binary = "target/release/examples/capi_pair"
    subprocess.run(["cargo", "build", "--release", "--example", "capi_pair"], check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no",
                        "--compress-strings=no", "--callgrind-out-file=" + out, binary] + args,
                       check=True, capture_output=True)
        counts = collections.Counter()
        cur, call_line = None, False
        with open(out) as f:
            for line in f:
                if line.startswith("fn="):
                    cur, call_line = line[3:].strip(), False
                elif line.startswith("calls="):
                    call_line = True  # the next cost line is a call's inclusive cost
                else:
                    m = re.match(r"^(0x[0-9a-f]+)\s+\d+\s+(\d+)", line)
                    if m and cur and func in cur:
                        if not call_line:
                            counts[int(m.group(1), 16)] += int(m.group(2))
                        call_line = False
    if not counts:
        sys.exit("no instructions of a function matching %r" % func)
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-M", "intel",
                          "--start-address=%#x" % min(counts), "--stop-address=%#x" % (max(counts) + 16), binary],
                         check=True, capture_output=True, text=True).stdout
    total = 0
    for line in dis.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\s+(.*)", line)
        if m and counts.get(int(m.group(1), 16), 0) >= least:
            c = counts[int(m.group(1), 16)]
            total += c
            print("%10d  %s" % (c, m.group(2)[:100]))
    print("total per message (listed lines): %.1f" % (total / int(args[0])))

if __name__ == "__main__":
    main()
