#!/usr/bin/env python3
"""Where a relayed request's CPU goes: bmas gateway against nginx, in front of the same instant
engine. Writes the "G5" section of bench/RESULTS.md with --record.

Usage: bench/gateway_profile.py [BUILD_DIR] [--seconds S] [--record]

Two views, each over a wrk run at 32 connections (G1's body and configurations):
- system calls per request, by call (`strace -c -f -p PID`; strace slows the proxy, but the
  calls a request makes do not depend on speed, except the reads that find nothing yet);
- the proxy's CPU samples by where they fall: the kernel, the proxy's own code, libc, the
  allocator (`perf record -e cpu-clock`: this VM has no hardware counters, so callgrind's
  instruction counts would be the stable figure, but valgrind 3.19 lacks openat2, which bmas
  needs).
Needs wrk, nginx, strace and perf (`bash scripts/install-deps.sh --bench`).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

RECORD = "--record" in sys.argv
SECONDS = 5
if "--seconds" in sys.argv:
    i = sys.argv.index("--seconds")
    SECONDS = int(sys.argv[i + 1])
    del sys.argv[i:i + 2]
sys.argv = [a for a in sys.argv if a != "--record"]

import gateway_bench as gb  # noqa: E402  (reads BUILD_DIR from the remaining arguments)
import run  # noqa: E402

HEADING = "## G5. Where a relayed request's CPU goes: bmas gateway vs nginx"


def wrk(url, key, seconds):
    env = dict(os.environ, BMAS_BENCH_KEY=key or "none")
    out = subprocess.run(["wrk", "-t1", "-c32", f"-d{seconds}s", "-s", gb.WRK_SCRIPT, url + "/v1/completions"],
                         env=env, capture_output=True, text=True, check=True).stdout
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    import json
    result = json.loads(line)
    if result["socket_errors"] or result["status_errors"]:
        raise RuntimeError(f"wrk saw errors: {line}")
    return result["requests"]


def syscalls(pids, url, key):
    """{call: calls per request} over a wrk run, counted by strace on `pids`."""
    out = tempfile.mktemp(prefix="bmas-strace-")
    args = ["strace", "-f", "-c", "-o", out]
    for p in pids:
        args += ["-p", str(p)]
    tracer = subprocess.Popen(args, stderr=subprocess.DEVNULL)
    time.sleep(1)
    n = wrk(url, key, SECONDS)
    tracer.send_signal(2)
    tracer.wait(timeout=30)
    counts = {}
    with open(out) as f:
        for line in f:
            m = re.match(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
            if m and m.group(2) != "total":
                counts[m.group(2)] = int(m.group(1)) / n
    os.unlink(out)
    return counts


def samples(pids, url, key):
    """{where: share of CPU samples} over a wrk run."""
    data = tempfile.mktemp(prefix="bmas-perf-")
    rec = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "2000", "-o", data, "-p",
                            ",".join(map(str, pids))], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    wrk(url, key, SECONDS)
    rec.send_signal(2)
    rec.wait(timeout=60)
    report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso", "--stdio"],
                            capture_output=True, text=True).stdout
    os.unlink(data)
    shares = {}
    for line in report.splitlines():
        m = re.match(r"^\s*([\d.]+)%\s+(\S+)", line)
        if not m:
            continue
        dso = m.group(2)
        where = ("kernel" if "kernel" in dso else "the proxy's own code" if dso in ("bmas", "nginx")
                 else "libc" if dso.startswith("libc.") else
                 "allocator (tcmalloc)" if "tcmalloc" in dso else "other libraries")
        shares[where] = shares.get(where, 0) + float(m.group(1))
    return shares


def main():
    for tool in ("wrk", "nginx", "strace", "perf"):
        if not shutil.which(tool):
            sys.exit(f"needs {tool}: bash scripts/install-deps.sh --bench")
    engine = run.Engine("--profile", "instant")
    state = gb.State()
    key = state.add_user("bench")
    results = {}
    try:
        gw = gb.Gateway(state, [engine], "--threads", "1", key=key)
        wrk(gw.url, key, 1)
        results["bmas gateway"] = (syscalls([gw.proc.pid], gw.url, key), samples([gw.proc.pid], gw.url, key))
        gw.stop()
        ngx = gb.Nginx(engine.url)
        wrk(ngx.url, None, 1)
        results["nginx"] = (syscalls(ngx.pids(), ngx.url, None), samples(ngx.pids(), ngx.url, None))
        ngx.stop()
    finally:
        for p in gb.started_processes:
            if p.poll() is None:
                p.kill()
        engine.stop()
        for d in gb.temporary_dirs:
            shutil.rmtree(d, ignore_errors=True)

    calls = sorted({c for r in results.values() for c, v in r[0].items() if v >= 0.01},
                   key=lambda c: -results["bmas gateway"][0].get(c, 0))
    rows = ["| system call | bmas gateway | nginx |", "|---|---:|---:|"]
    for c in calls:
        rows.append(f"| {c} | {results['bmas gateway'][0].get(c, 0):.2f} | {results['nginx'][0].get(c, 0):.2f} |")
    rows.append(f"| **all** | **{sum(results['bmas gateway'][0].values()):.2f}** | "
                f"**{sum(results['nginx'][0].values()):.2f}** |")
    wheres = ["kernel", "the proxy's own code", "libc", "allocator (tcmalloc)", "other libraries"]
    shares = ["| CPU samples in | bmas gateway | nginx |", "|---|---:|---:|"]
    for w in wheres:
        shares.append(f"| {w} | {results['bmas gateway'][1].get(w, 0):.1f}% | {results['nginx'][1].get(w, 0):.1f}% |")
    commit = subprocess.run(["git", "-C", run.ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    text = (f"{HEADING}\n\nWritten by `python3 bench/gateway_profile.py --record` on "
            f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC at commit {commit}; 2 shared cores. "
            f"G1's set-up (`bmas gateway --threads 1`; nginx with 1 worker), one wrk run of {SECONDS} s at 32 "
            "connections for each view. System calls per request (`strace -f -c -p PID` over the run, "
            "divided by wrk's requests):\n\n" + "\n".join(rows) +
            "\n\nThe proxy's CPU by where it was spent (`perf record -e cpu-clock -p PID`, `perf report "
            "--sort dso`):\n\n" + "\n".join(shares) + "\n")
    print(text)
    if RECORD:
        path = os.path.join(run.ROOT, "bench", "RESULTS.md")
        with open(path) as f:
            doc = f.read()
        if HEADING in doc:
            start = doc.index(HEADING)
            end = doc.find("\n## ", start + len(HEADING))
            doc = doc[:start] + text + ("\n" + doc[end + 1:] if end >= 0 else "")
        else:
            anchor = doc.index("## G2. ")
            doc = doc[:anchor] + text + "\n" + doc[anchor:]
        with open(path, "w") as f:
            f.write(doc)


if __name__ == "__main__":
    main()
