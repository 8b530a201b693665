#!/usr/bin/env python3
"""Measures bmas gateway under abuse and writes the figures into bench/RESULTS.md under
"# Gateway security benchmarks".

Usage: bench/gateway_security_bench.py [BUILD_DIR] [--quick] [--only 1,2]

  GS1. Slowloris and idle connections: hundreds of connections each sending one byte of a
       request header per second, plus 1,000 connections that send nothing, against the
       gateway, while one normal client measures its latency; the same client measured just
       before, without the attack, in the same run.
  GS2. Memory soak: 1 M requests through the gateway to `bmas engine --profile instant`, the
       gateway's resident memory sampled every 100 k.

Every figure is measured by this script, beside the command that produced it; only its own
section of RESULTS.md is replaced. --quick shortens every run (for trying the script out);
--only runs the listed benchmarks and prints them without touching RESULTS.md. Not part of
ctest.
"""
import http.client
import os
import platform
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time

QUICK = "--quick" in sys.argv
ONLY = None
if "--only" in sys.argv:
    i = sys.argv.index("--only")
    ONLY = {int(x) for x in sys.argv[i + 1].split(",")}
    del sys.argv[i:i + 2]  # run.py reads BUILD_DIR from the other arguments

import gateway_bench as gb  # noqa: E402  bench/gateway_bench.py: Gateway, State, loadgen
import run  # noqa: E402
ROOT, BMAS, MODEL = run.ROOT, run.BMAS, run.MODEL
HEADING = "# Gateway security benchmarks"

SLOW = 50 if QUICK else 300        # slowloris connections
IDLE = 100 if QUICK else 1000      # idle connections
PHASE_S = 5 if QUICK else 20       # each latency phase
SOAK = 20_000 if QUICK else 1_000_000
SAMPLE = SOAK // 10


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def probe(url, key, seconds):
    """One keep-alive client sending non-streaming completions back to back; latencies in ms."""
    host, port = url.removeprefix("http://").split(":")
    body = ('{"model":"%s","prompt":"hello there","max_tokens":16}' % MODEL).encode()
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    latencies, failures = [], 0
    until = time.time() + seconds
    while time.time() < until:
        t = time.perf_counter()
        try:
            conn.request("POST", "/v1/completions", body, headers)
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                failures += 1
                continue
        except OSError:
            failures += 1
            conn.close()
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            continue
        latencies.append((time.perf_counter() - t) * 1000)
    conn.close()
    return latencies, failures


class Attack:
    """`slow` connections that each send one byte of a request header per second, and `idle`
    connections that send nothing; a connection the gateway closes is opened again, and
    counted."""

    HEADER = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + b"a" * 4000 +
              b"\r\n")

    def __init__(self, url, slow, idle):
        host, port = url.removeprefix("http://").split(":")
        self.addr = (host, int(port))
        self.slow, self.idle = slow, idle
        self.closed_by_server = 0
        self.connect_failures = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def connect(self):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(self.addr)
        return s

    def run(self):
        sel = selectors.DefaultSelector()
        slow = {}
        for _ in range(self.slow):
            s = self.connect()
            slow[s] = 0
            sel.register(s, selectors.EVENT_READ)
        idle = []
        for _ in range(self.idle):
            s = self.connect()
            idle.append(s)
            sel.register(s, selectors.EVENT_READ)
        next_byte = time.time()
        while not self.stop.is_set():
            for key, _ in sel.select(timeout=0.1):
                s = key.fileobj
                try:
                    data = s.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    continue  # a response (408, 431, ...): the close follows
                self.closed_by_server += 1
                sel.unregister(s)
                s.close()
                fresh = self.connect()
                sel.register(fresh, selectors.EVENT_READ)
                if s in slow:
                    del slow[s]
                    slow[fresh] = 0
                else:
                    idle[idle.index(s)] = fresh
            if time.time() >= next_byte:
                next_byte += 1
                for s, sent in list(slow.items()):
                    try:
                        s.send(self.HEADER[sent % len(self.HEADER):][:1])
                        slow[s] = sent + 1
                    except OSError:
                        pass
        for key in list(sel.get_map().values()):
            key.fileobj.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def instant_cluster():
    """An instant engine, a gateway in front of it, and user alice's key."""
    e = gb.engine("--profile", "instant")
    state = gb.State()
    key = state.add_user("alice")
    return e, gb.Gateway(state, [e], key=key), key


def slowloris():
    e, gw, key = instant_cluster()
    probe(gw.url, key, 2)  # warm-up
    base, base_failed = probe(gw.url, key, PHASE_S)
    with Attack(gw.url, SLOW, IDLE) as attack:
        time.sleep(3)  # every attacking connection open
        attacked, attacked_failed = probe(gw.url, key, PHASE_S)
        open_fds = len(os.listdir(f"/proc/{gw.proc.pid}/fd"))
        rss_mb = gb.status_kb(gw.proc.pid, "VmRSS") / 1024
        closed = attack.closed_by_server
    gw.stop()
    e.stop()
    rows = ["| phase | requests | failed | p50 ms | p99 ms |", "|---|---|---|---|---|"]
    for name, lat, failed in (("no attack", base, base_failed),
                              (f"{SLOW} slowloris + {IDLE} idle connections", attacked, attacked_failed)):
        rows.append(f"| {name} | {len(lat)} | {failed} | {percentile(lat, 50):.2f} | {percentile(lat, 99):.2f} |")
    text = (f"One client sends non-streaming completions (max_tokens 16) back to back over one "
            f"kept-alive connection for {PHASE_S} s, first alone, then while {SLOW} connections each "
            f"send one byte of a request header per second and {IDLE} connections send nothing. "
            f"During the attack the gateway held {open_fds} file descriptors and "
            f"{rss_mb:.1f} MB resident; it closed {closed} attacking connections within the "
            f"phase (its read and idle deadlines; each was opened again). p50 under attack / alone: "
            f"**{percentile(attacked, 50) / percentile(base, 50):.2f}x**, p99: "
            f"**{percentile(attacked, 99) / percentile(base, 99):.2f}x**.")
    command = (f"build/bmas engine --port 0 --profile instant\n{gw.command}\n"
               f"python3 bench/gateway_security_bench.py --only 1   # the attack and the probe")
    return "GS1. Slowloris and idle connections: a normal client's latency", command, text, rows


def soak():
    e, gw, key = instant_cluster()
    concurrency = 50
    rounds = SOAK // SAMPLE
    rows = ["| requests | gateway RSS MB | requests/s (this round) |", "|---|---|---|"]
    rows.append(f"| 0 | {gb.status_kb(gw.proc.pid, 'VmRSS') / 1024:.1f} | |")
    first_rss = None
    shown = ""
    done = 0
    for _ in range(rounds):
        t = time.time()
        result, shown = gb.loadgen(gw.url, "--api-key", key, "--no-stream", "--max-tokens", "8",
                                   "--concurrency", str(concurrency), "--requests-per-client",
                                   str(SAMPLE // concurrency), "--threads", "1")
        n = result["requests_ok"] + result["requests_failed"]
        done += n
        rss = gb.status_kb(gw.proc.pid, "VmRSS") / 1024
        first_rss = first_rss or rss
        rows.append(f"| {done:,} | {rss:.1f} | {n / (time.time() - t):,.0f} |")
        if result["requests_failed"]:
            raise RuntimeError(f"soak: {result['requests_failed']} requests failed")
    last_rss = gb.status_kb(gw.proc.pid, "VmRSS") / 1024
    peak = gb.status_kb(gw.proc.pid, "VmHWM") / 1024
    gw.stop()
    e.stop()
    text = (f"{done:,} non-streaming requests (max_tokens 8, {concurrency} clients) through one "
            f"gateway to an instant engine, in rounds of {SAMPLE:,}. Resident memory after the first "
            f"round {first_rss:.1f} MB, after the last {last_rss:.1f} MB "
            f"(**{last_rss - first_rss:+.1f} MB** over {done - SAMPLE:,} requests); peak {peak:.1f} MB.")
    command = (f"build/bmas engine --port 0 --profile instant\n{gw.command}\n{shown}   "
               f"# {rounds} times; VmRSS of the gateway after each")
    return "GS2. Memory soak: 1 M requests, the gateway's RSS every 100 k", command, text, rows


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the gateway inherits it too
    started = time.strftime("%Y-%m-%d %H:%M")
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "src"):
        commit += " with changes to src/ not committed"
    busy0, own0 = gb.busy_cpu_seconds(), gb.own_cpu_seconds()
    t0 = time.time()
    sections = []
    try:
        for number, bench in ((1, slowloris), (2, soak)):
            if ONLY is None or number in ONLY:
                sections.append(bench())
                print(f"gateway_security_bench: {sections[-1][0]} done after {time.time() - t0:.0f} s",
                      file=sys.stderr)
    finally:
        for proc in gb.started_processes:
            gb.stop(proc)
        for d in gb.temporary_dirs:
            gb.shutil.rmtree(d, ignore_errors=True)
    others = (gb.busy_cpu_seconds() - busy0 - (gb.own_cpu_seconds() - own0)) / (time.time() - t0)
    text = (f"{HEADING}\n\nWritten by `python3 bench/gateway_security_bench.py` on {started} in "
            f"{time.time() - t0:.0f} s, at commit {commit}; {os.cpu_count()} cores, Linux "
            f"{platform.release()}; other processes kept {max(others, 0):.2f} cores busy on average "
            f"meanwhile. The file descriptor limit was raised to {hard} for the script and the "
            f"gateway. URL, KEY and STATE stand for what the script created.\n\n")
    for title, command, body, table in sections:
        text += f"## {title}\n\n```\n{command}\n```\n\n{body}\n\n" + "\n".join(table) + "\n\n"
    if ONLY is not None:
        print(text)
        return
    run.write_section(HEADING, text)
    print(text)


if __name__ == "__main__":
    main()
