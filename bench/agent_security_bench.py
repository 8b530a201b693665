#!/usr/bin/env python3
"""Measures the root agent (`bmas agent`) under attack and under faults, and writes the figures
into bench/RESULTS.md under "# Agent security benchmarks" (issue 11, the trust boundary).

Usage: bench/agent_security_bench.py [BUILD_DIR] [--quick] [--only 1,2]

  AS1. Idle and slow connections: one normal user runs `bmas workspace exec USER -- true` back
       to back (and a few `bmas run --gpus 1 --wait -- true` jobs), first alone, then while
       non-root attacker users (bmasatk01..16) hold connections to the agent's socket that send
       nothing, or send one byte just before the deadline, or one byte a second; first 14
       attacker users, then all 16 at their per-uid caps (1,024 connections).
  AS2. Faults during jobs: jobs in users' workspaces (`sleep`, and a `setsid sleep` that
       detaches), and in turn slurmctld, LXD and the agent killed (SIGKILL) and started again;
       then every job's processes, GPU devices and job cgroups must be gone.

Starts its own LXD (`bmas lxd up` with a private `[lxd] dir` in a temporary directory), the
busybox image, the local Slurm cluster (`bmas slurm up`) and `bmas agent`, and stops all of
them and removes the directory at the end, whatever happens. bmas runs from a copy of
build/bmas taken at the start. Workspaces belong to bmasbench001..004 and the attackers are
bmasatk01..16 (`useradd`, made when missing and kept). Needs root, LXD and Slurm
(`bash scripts/install-deps.sh`); without them it says why and exits 0. --quick shortens the
phases (for trying the script out); --only runs the listed benchmarks and prints them without
touching RESULTS.md. Not part of ctest.
"""
import glob
import http.client
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

QUICK = "--quick" in sys.argv
ONLY = None
if "--only" in sys.argv:
    i = sys.argv.index("--only")
    ONLY = {int(x) for x in sys.argv[i + 1].split(",")}
    del sys.argv[i:i + 2]  # run.py reads BUILD_DIR from the other arguments

import run  # noqa: E402  bench/run.py: ROOT, BMAS, write_section
import lxd_bench as lb  # noqa: E402  ensure_users, as_user, percentile, status_kb
ROOT, BMAS = run.ROOT, run.BMAS
HEADING = "# Agent security benchmarks"

from agent_bench_support import (  # noqa: E402
    ATTACKER,
    COUNTS,
    Attacker,
    Sampler,
    USERS,
    ATTACKERS,
    SETTLE_BEFORE_KILL_S,
    IO_TIMEOUT_S,
    CAP_PER_UID,
    AGENT_WIDE_CAP,
    EXTRA,
    PHASE_S,
    PHASE_JOBS,
    busy_cpu_seconds,
    niced_cpu,
    proc_cpu,
    running,
    job_cgroups,
    Cluster)

def client_loop(c, user, seconds):
    """`bmas workspace exec USER -- true` as USER, back to back; latencies (ms), failures, and
    the first few distinct error messages."""
    lat, failed, errors = [], 0, []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        t = time.perf_counter()
        try:
            r = subprocess.run(c.as_user(user, "workspace", "exec", user, "--", "true"), env=c.env,
                               capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired:
            r = subprocess.CompletedProcess([], 124, "", "no answer within 180 s")
        if r.returncode == 0:
            lat.append((time.perf_counter() - t) * 1e3)
        else:
            failed += 1
            msg = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:200]
            msg = re.sub(r"/tmp/bmas-agent-bench-\w+", "DIR", msg)
            if msg not in errors and len(errors) < 3:
                errors.append(msg)
    return lat, failed, errors


def client_jobs(c, user, n):
    """n jobs `bmas run --gpus 1 --wait -- true` as USER, one after another; seconds each took
    (those that exited 0) and the failures."""
    times, failed = [], []
    for _ in range(n):
        t = time.monotonic()
        try:
            r = subprocess.run(c.as_user(user, "run", "--gpus", "1", "--wait", "--", "true"), env=c.env,
                               capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired:
            r = subprocess.CompletedProcess([], 124, "", "the job did not end within 180 s")
        if r.returncode == 0:
            times.append(time.monotonic() - t)
        else:
            lines = [l for l in (r.stdout + "\n" + r.stderr).splitlines() if l.strip() and " submitted (" not in l]
            msg = (lines or [""])[-1][:200]
            failed.append(f"exit {r.returncode}: " + re.sub(r"/tmp/bmas-agent-bench-\w+", "DIR", msg))
    return times, failed


def wait_connections(c, target, seconds=15):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if c.metrics().get("bmas_agent_connections", 0) >= target:
            return True
        time.sleep(0.25)
    return False


def phase(c, label, attackers, target):
    user = USERS[0]
    ramp = None
    if attackers:
        t = time.monotonic()
        wait_connections(c, target)
        ramp = time.monotonic() - t
    st0 = {a.user: a.stats() for a in attackers}
    m0, cpu0, busy0, log0 = c.metrics(), proc_cpu(c.agent.pid), busy_cpu_seconds(), os.path.getsize(c.agent_log)
    t0 = time.monotonic()
    with Sampler(c) as s:
        lat, failed, errors = client_loop(c, user, PHASE_S)
        jobs, jobs_failed = client_jobs(c, user, PHASE_JOBS)
    elapsed = time.monotonic() - t0
    m1, cpu1, busy1 = c.metrics(), proc_cpu(c.agent.pid), busy_cpu_seconds()
    st1 = {a.user: a.stats() for a in attackers}
    with open(c.agent_log, errors="replace") as f:
        f.seek(log0)
        log_lines = f.read().splitlines()
    delta = {k: sum(st1[u].get(k, 0) - st0[u].get(k, 0) for u in st1) for k in COUNTS}
    dm = lambda k: m1.get(k, 0) - m0.get(k, 0)
    samples = s.samples or [(0, 0, 0, 0)]
    conns = [x[3] for x in samples if x[3] == x[3]]
    return dict(label=label, lat=lat, failed=failed, errors=errors, jobs=jobs, jobs_failed=jobs_failed,
                seconds=elapsed, ramp=ramp, attack=delta, held=sum(st1[u].get("open", 0) for u in st1),
                over_cap=dm("bmas_agent_connections_over_cap_total"), refused=dm("bmas_agent_refused_total"),
                sessions=dm("bmas_agent_sessions_total"), execs=dm("bmas_agent_execs_total"),
                conns_mean=sum(conns) / len(conns) if conns else float("nan"),
                conns_max=max(conns) if conns else float("nan"), conns_min=min(conns) if conns else float("nan"),
                fds_max=max(x[0] for x in samples), rss_max=max(x[1] for x in samples),
                threads_max=max(x[2] for x in samples), agent_cores=(cpu1 - cpu0) / elapsed,
                host_cores=(busy1 - busy0) / elapsed, log_lines=len(log_lines),
                turned_away_lines=sum("turned away" in l for l in log_lines),
                refused_lines=sum("refused:" in l for l in log_lines), metrics=m1)


def idle_connections(c):
    user = USERS[0]
    # Warm-up: the first calls page the binary in.
    client_loop(c, user, 2)
    phases = [phase(c, "alone", [], 0)]
    print(f"agent_security_bench: AS1 alone: {len(phases[0]['lat'])} ok", file=sys.stderr)
    # 12 users idle (each trying 8 more than its cap), 1 slow, 1 drip; then 2 more idle users.
    idle1, slow_user, drip_user, idle2 = ATTACKERS[:12], ATTACKERS[12], ATTACKERS[13], ATTACKERS[14:]
    attackers = []
    try:
        for u in idle1:
            attackers.append(Attacker(c, u, "idle", CAP_PER_UID + EXTRA))
        attackers.append(Attacker(c, slow_user, "slow", CAP_PER_UID, IO_TIMEOUT_S - 1))
        attackers.append(Attacker(c, drip_user, "drip", CAP_PER_UID, 1.0))
        p1 = phase(c, f"{len(idle1)} idle users + 1 slow + 1 drip", attackers,
                   0.9 * CAP_PER_UID * len(attackers))
        phases.append(p1)
        print(f"agent_security_bench: AS1 14 attackers: {len(p1['lat'])} ok, {p1['failed']} failed", file=sys.stderr)
        for u in idle2:
            attackers.append(Attacker(c, u, "idle", CAP_PER_UID + EXTRA))
        p2 = phase(c, f"{len(idle1) + len(idle2)} idle users + 1 slow + 1 drip", attackers,
                   min(AGENT_WIDE_CAP, CAP_PER_UID * len(attackers)) - 8)
        phases.append(p2)
        print(f"agent_security_bench: AS1 16 attackers: {len(p2['lat'])} ok, {p2['failed']} failed", file=sys.stderr)
    finally:
        for a in attackers:
            a.stop()
    # The agent after the attack: its connections gone, and it serves.
    wait_connections_zero = time.monotonic()
    while c.metrics().get("bmas_agent_connections", 1) > 0 and time.monotonic() - wait_connections_zero < 15:
        time.sleep(0.2)
    after_lat, after_failed, _ = client_loop(c, user, 3)
    return dict(phases=phases, after_ok=len(after_lat), after_failed=after_failed,
                agent_alive=c.agent.poll() is None, metrics=c.metrics(),
                nofile=resource.getrlimit(resource.RLIMIT_NOFILE))


def idle_connections_section(r):
    base = r["phases"][0]
    b50, b99 = lb.percentile(base["lat"], .5), lb.percentile(base["lat"], .99)
    ms = lambda xs, q: f"{lb.percentile(xs, q):.0f}" if xs else "-"
    ratio = lambda xs, q, b: f"{lb.percentile(xs, q) / b:.2f}x" if xs else "-"
    rows = ["| phase | attackers' connections open in the agent (mean / max) | `workspace exec` ok | failed | p50 (ms) | p99 (ms) | p50 vs alone | p99 vs alone | jobs ok | jobs failed | job p50 (s) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in r["phases"]:
        held = "0" if p is base else f"{p['conns_mean']:.0f} / {p['conns_max']:.0f}"
        job50 = f"{lb.percentile(p['jobs'], .5):.2f}" if p["jobs"] else "-"
        rows.append(f"| {p['label']} | {held} | {len(p['lat'])} | {p['failed']} | {ms(p['lat'], .5)} | "
                    f"{ms(p['lat'], .99)} | {ratio(p['lat'], .5, b50)} | {ratio(p['lat'], .99, b99)} | "
                    f"{len(p['jobs'])} | {len(p['jobs_failed'])} | "
                    f"{job50} |")
    rows += ["", "| phase | refused over a cap (`bmas_agent_connections_over_cap_total`) | refused as malformed (`bmas_agent_refused_total`) | dropped at the deadline (attackers saw EOF) | attackers' connects failed | agent fds max | agent RSS max (MiB) | agent threads max | agent CPU (cores) | host busy (cores) | agent log lines |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in r["phases"]:
        a = p["attack"]
        rows.append(f"| {p['label']} | {p['over_cap']:.0f} | {p['refused']:.0f} | {a.get('dropped', 0)} | "
                    f"{a.get('connect_failed', 0)} | {p['fds_max']} | {p['rss_max'] / 1024:.1f} | {p['threads_max']} | "
                    f"{p['agent_cores']:.2f} | {p['host_cores']:.2f} | {p['log_lines']} |")
    m = r["metrics"]
    rows += ["", "| the agent's /metrics after AS1 | value |", "|---|---:|"]
    for k in sorted(m):
        if not k.endswith(("_bucket", "_sum", "_count")):
            rows.append(f"| `{k}` | {m[k]:.0f} |")
    p1, p2 = r["phases"][1], r["phases"][2]
    per_conn = (p1["rss_max"] - base["rss_max"]) / max(p1["conns_mean"], 1)
    fails = "; ".join(f"{p['label']}: {', '.join(p['errors'] + p['jobs_failed'][:1])}"
                      for p in r["phases"] if p["errors"] or p["jobs_failed"])
    full = p2["failed"] > 0 or p2["jobs_failed"]
    text = (f"One normal user ({USERS[0]}, whose workspace runs) calls `bmas workspace exec {USERS[0]} -- true` "
            f"back to back for {PHASE_S} s (each call a fresh `setpriv ... bmas` process: connect to the agent, "
            f"send the request with its stdin/stdout/stderr, the agent asks LXD for the workspace, starts `true` "
            f"in it as the user and reports its exit), then runs {PHASE_JOBS} Slurm jobs `bmas run --gpus 1 --wait "
            f"-- true` one after another (prolog binds the GPU, the job's `bmas agent exec` goes through the agent, "
            f"the epilog asks the agent to kill the job, then unplugs). First alone, then while non-root attacker users "
            f"hold connections to the agent's socket ({os.path.join('STATE', 'run', 'agent.sock')}, SOCK_SEQPACKET, "
            f"mode 0666); the agent runs with `--io-timeout {IO_TIMEOUT_S} --max-connections-per-uid {CAP_PER_UID}` "
            f"(its defaults) and, from src/agent/agent.cc, admits at most {AGENT_WIDE_CAP} connections from all "
            f"users together (root included; fewer when its fd limit is short: here RLIMIT_NOFILE "
            f"{r['nofile'][1]}, so {AGENT_WIDE_CAP}). Each attacker is a Python process run as its own user "
            f"(`setpriv --reuid bmasatkNN --regid bmasatkNN --clear-groups`). *Idle* attackers try to hold "
            f"{CAP_PER_UID + EXTRA} connections each ({EXTRA} over the per-uid cap) that send nothing: one the agent "
            f"drops at its deadline (EOF) is opened again at once, one it refuses (\"too many connections\") after 1 s. "
            f"On SEQPACKET a message is atomic, so there is no half-sent request: the *slow* attacker holds "
            f"{CAP_PER_UID} connections that each stay silent {IO_TIMEOUT_S - 1} s (just under the deadline) and then "
            f"send a 1-byte message, which the agent refuses at once as malformed (then open again at once); the "
            f"*drip* attacker's {CAP_PER_UID} connections send a 1-byte message every second, and the first one is "
            f"refused at once. The attack starts, the script waits until the agent's `bmas_agent_connections` gauge "
            f"shows the attackers' connections (\"ramp\": {p1['ramp']:.1f} s and {p2['ramp']:.1f} s), and the "
            f"phase runs while they stay. First ({p1['label']}: at most "
            f"{CAP_PER_UID * (len(ATTACKERS) - 2)} connections within the per-uid caps; the agent's gauge peaked at "
            f"{p1['conns_max']:.0f}, the normal user's included, so no attacker got past its cap), `workspace exec` p50 "
            f"**{lb.percentile(p1['lat'], .5) / b50 if p1['lat'] else float('nan'):.2f}x** alone, p99 "
            f"**{lb.percentile(p1['lat'], .99) / b99 if p1['lat'] else float('nan'):.2f}x**, {p1['failed']} failed. "
            f"Then ({p2['label']}: {len(ATTACKERS)} x {CAP_PER_UID} = {CAP_PER_UID * len(ATTACKERS)} connections, "
            f"what {len(ATTACKERS)} users may hold within their per-uid caps): {len(p2['lat'])} calls ok, "
            f"**{p2['failed']} failed**, jobs {len(p2['jobs'])} ok / {len(p2['jobs_failed'])} failed." +
            (f" **Finding: {len(ATTACKERS)} non-root users, each within its per-uid cap, fill the agent-wide cap "
             f"with connections that send nothing, and then other users' sessions and jobs are turned away** "
             f"(\"too many connections ... or the agent is full\", or the connection reset while the agent's "
             f"listen backlog is full; a job whose `bmas agent exec` is turned away exits 126 and fails); the calls "
             f"that got through found a slot free for a moment (idle connections dropped at their deadline, refused "
             f"ones closed)." if full else "") +
            f" Memory: alone the agent held {base['rss_max'] / 1024:.0f} MiB and {base['threads_max']} threads; with "
            f"{p1['conns_mean']:.0f} connections open, {p1['rss_max'] / 1024:.0f} MiB and {p1['threads_max']} threads, "
            f"**{per_conn:.0f} KiB per open connection** (each connection has a thread; a thread waiting for its "
            f"request holds no receive buffer: the message's length is peeked first, src/agent/agent_wire.cc). "
            f"Every session is forked from the agent (src/agent/agent_spawn.cc), so a larger agent with more "
            f"threads is slower to fork; that is a likely cause of the slower sessions under attack, not "
            f"measured apart here." +
            f" The agent's log stayed short: {sum(p['log_lines'] for p in r['phases'])} lines over the three phases "
            f"({sum(p['turned_away_lines'] for p in r['phases'])} \"turned away\" warnings: rate-limited to one per "
            f"5 s). After the attackers stopped, {r['after_ok']} calls ok and {r['after_failed']} failed in 3 s; the "
            f"agent {'kept running' if r['agent_alive'] else 'HAD DIED'}." +
            (f" Errors seen: {fails}." if fails else ""))
    shown = ("build/bmas --config CONFIG --state-dir STATE agent --reconcile-interval 0.5 --metrics-port 0 "
             f"--io-timeout {IO_TIMEOUT_S} --max-connections-per-uid {CAP_PER_UID}\n"
             f"cd ~ && setpriv --reuid {USERS[0]} --regid {USERS[0]} --init-groups build/bmas --config CONFIG "
             f"--state-dir STATE workspace exec {USERS[0]} -- true   # back to back, {PHASE_S} s\n"
             f"cd ~ && setpriv --reuid {USERS[0]} --regid {USERS[0]} --init-groups build/bmas --config CONFIG "
             f"--state-dir STATE run --gpus 1 --wait -- true   # x{PHASE_JOBS}\n"
             "setpriv --reuid bmasatkNN --regid bmasatkNN --clear-groups python3 -c ATTACKER STATE/run/agent.sock "
             "idle|slow|drip N   # ATTACKER: bench/agent_security_bench.py\n"
             "ls /proc/AGENT/fd | wc -l; grep -E 'VmRSS|Threads' /proc/AGENT/status; curl METRICS/metrics   # every 0.5 s")
    return "AS1. Idle and slow connections against the agent: a normal user's latency", shown, text, rows


# ---- AS2. Faults during jobs -------------------------------------------------------------------


class Job:
    def __init__(self, c, user, detached, main, gpus=2):
        self.user, self.detached, self.main = user, f"sleep {detached}", f"sleep {main}"
        cmd = ["sh", "-c", f"setsid sleep {detached} </dev/null >/dev/null 2>&1 & exec sleep {main}"]
        r = c.run(c.as_user(user, "run", "--gpus", str(gpus), "--", *cmd))
        self.id = int(r.stdout.split()[0])

    @property
    def needles(self):
        return [self.detached, self.main]


def start_jobs(c, specs, timeout=90):
    """Submits the jobs and waits until each runs, both its sleeps are on the host and its 2 GPU
    devices are in its workspace."""
    jobs = [Job(c, *s) for s in specs]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = c.job_states([j.id for j in jobs])
        procs = running([n for j in jobs for n in j.needles])
        devs = c.job_devices() or {}
        if (all(states.get(j.id, ("",))[0] == "RUNNING" for j in jobs)
                and all(n in procs for j in jobs for n in j.needles)
                and all(len(devs.get(j.id, [])) == 2 for j in jobs)):
            return jobs
        time.sleep(0.3)
    hooks = open(os.path.join(c.state, "slurm", "log", "hooks.log")).read().splitlines()
    print("agent_security_bench: hooks.log ends with:\n" + "\n".join(hooks[-12:]), file=sys.stderr)
    raise RuntimeError(f"jobs did not all start within {timeout} s: states {c.job_states([j.id for j in jobs])}, "
                       f"processes {sorted(running([n for j in jobs for n in j.needles]))}, "
                       f"devices {c.job_devices()}; the hooks' log: "
                       + " | ".join(l for l in hooks if any(str(j.id) in l for j in jobs))[-600:])


def wait_clean(c, jobs, t0, timeout=90):
    """Seconds from t0 until the jobs' processes, GPU devices and job cgroups were all gone (None
    for what was not gone within `timeout`), and what was left then."""
    ids = {j.id for j in jobs}
    needles = [n for j in jobs for n in j.needles]
    gone = {"processes": None, "devices": None, "cgroups": None}
    left = {}
    while True:
        now = time.monotonic()
        procs = running(needles)
        devs = c.job_devices()
        cgs = job_cgroups() & ids
        if gone["processes"] is None and not procs:
            gone["processes"] = now - t0
        if gone["devices"] is None and devs is not None and not (set(devs) & ids):
            gone["devices"] = now - t0
        if gone["cgroups"] is None and not cgs:
            gone["cgroups"] = now - t0
        if all(v is not None for v in gone.values()) or now - t0 > timeout:
            left = {"processes": sorted(procs), "devices": sorted(d for i in ids for d in (devs or {}).get(i, [])),
                    "cgroups": sorted(cgs), "lxd_answered": devs is not None}
            return gone, left
        time.sleep(0.1)


def kill_and_wait(pid, sig=signal.SIGKILL, timeout=10):
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def group_row(fault, what, jobs, killed, down_s, while_down, t_ref, gone, left, states):
    return dict(fault=fault, what=what, jobs=len(jobs), killed=killed, down_s=down_s, while_down=while_down,
                ref=t_ref, gone=gone, left=left, states=sorted({s[0] + " " + s[1] for s in states.values()}))


def fault_slurmctld(c, base):
    """(a) slurmctld SIGKILLed with 4 jobs running; 2 of them end during the outage (their main
    sleep runs out), the other 2 are cancelled once slurmctld is back."""
    short = [31, 33]  # seconds: the main sleeps that run out while slurmctld is down
    specs = [(USERS[0], base + 1, base + 11), (USERS[1], base + 2, base + 12),
             (USERS[2], base + 3, short[0]), (USERS[3], base + 4, short[1])]
    jobs = start_jobs(c, specs)
    long_jobs, short_jobs = jobs[:2], jobs[2:]
    # Well into the jobs' run: slurmctld saves its state a few seconds after a change, and a
    # kill before that loses the jobs (a trial run: the restarted slurmctld started one again
    # and drained its node, "Duplicate jobid").
    time.sleep(SETTLE_BEFORE_KILL_S)
    pid = c.ctld_pid()
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = [a.decode() for a in f.read().rstrip(b"\0").split(b"\0")]
    at_kill = running([j.main for j in short_jobs])
    t_kill = time.monotonic()
    kill_and_wait(pid)
    # The short jobs' main sleeps run out while slurmctld is away.
    deadline = time.monotonic() + 40
    while running([j.main for j in short_jobs]) and time.monotonic() < deadline:
        time.sleep(0.2)
    ended_s = time.monotonic() - t_kill
    time.sleep(2)
    during = running([j.detached for j in short_jobs])
    devs_during = c.job_devices() or {}
    # Then slurmctld is started again: by `bmas slurm up` (which starts the daemons that died).
    up = c.run(c.bmas("slurm", "up"), check=False, timeout=120)
    up_said = ((up.stdout if up.returncode == 0 else up.stderr).strip().splitlines() or [""])[0 if up.returncode == 0 else -1]
    up_said = re.sub(r"/tmp/bmas-agent-bench-\w+/state", "STATE", up_said)
    while_down = (f"slurmctld was killed {SETTLE_BEFORE_KILL_S} s after all 4 jobs ran ({len(at_kill)} of the 2 short "
                  f"main sleeps still running then); the main sleeps of 2 jobs ran out {ended_s:.0f} s after the kill; "
                  f"2 s later their detached "
                  f"sleeps were {'still running' if len(during) == 2 else f'{len(during)} of 2 running'} and "
                  f"{sum(len(devs_during.get(j.id, [])) for j in short_jobs)} of their 4 GPU devices plugged "
                  f"(nothing can end a job while slurmctld is away); `bmas slurm up` said: \"{up_said}\"")
    up_ok = up.returncode == 0
    if not up_ok:
        # Started again by hand, as `bmas slurm up` starts it (its own log, detached).
        log = open(os.path.join(c.state, "slurm", "log", "slurmctld.out"), "a")
        c.extra_ctld = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        log.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if subprocess.run(["scontrol", "ping"], env=c.slurm_env(), capture_output=True, text=True,
                          timeout=10).stdout.count("UP") >= 1:
            break
        time.sleep(0.2)
    t_up = time.monotonic()
    down_s = t_up - t_kill
    gone_s, left_s = wait_clean(c, short_jobs, t_up)
    still = c.job_states([j.id for j in long_jobs])
    t_cancel = time.monotonic()
    for j in long_jobs:
        c.run(c.as_user(j.user, "cancel", str(j.id)))
    gone_l, left_l = wait_clean(c, long_jobs, t_cancel)
    how = ("`bmas slurm up`" if up_ok else
           f"by hand, `{' '.join(argv[:2])} -f STATE/slurm/etc/slurm.conf` (as `bmas slurm up` starts it)")
    return [group_row("a. slurmctld", "2 jobs whose command ended while slurmctld was down", short_jobs,
                      f"slurmctld (SIGKILL); started again {how}", down_s, while_down,
                      "slurmctld back", gone_s, left_s, c.job_states([j.id for j in short_jobs])),
            group_row("a. slurmctld", f"2 jobs still running after it (states then: "
                      f"{', '.join(sorted({s[0] for s in still.values()}))}), cancelled with `bmas cancel`",
                      long_jobs, "", None, "", "cancel", gone_l, left_l, c.job_states([j.id for j in long_jobs]))]


def fault_lxd(c, base):
    """(b) lxd SIGKILLed with 4 jobs running; 2 cancelled while it is down, LXD started again
    with `bmas lxd up`, then the other 2 cancelled."""
    specs = [(u, base + k + 1, base + k + 11) for k, u in enumerate(USERS)]
    jobs = start_jobs(c, specs)
    first, second = jobs[:2], jobs[2:]
    pid = c.lxd_pid()
    t_kill = time.monotonic()
    kill_and_wait(pid)
    answered_down = c.lxd_get("/1.0") is not None
    for j in first:
        c.run(c.as_user(j.user, "cancel", str(j.id)))
    t_cancel = time.monotonic()
    # Their processes while LXD is away (the agent kills a job's cgroup when its caller goes).
    deadline = time.monotonic() + 20
    while running([n for j in first for n in j.needles]) and time.monotonic() < deadline:
        time.sleep(0.1)
    procs_gone = time.monotonic() - t_cancel if not running([n for j in first for n in j.needles]) else None
    time.sleep(max(0.0, 8 - (time.monotonic() - t_kill)))
    t_up0 = time.monotonic()
    up = c.run(c.bmas("lxd", "up"), check=False, timeout=180)
    t_up = time.monotonic()
    down_s = t_up - t_kill
    new_pid = c.lxd_pid()
    gone_1, left_1 = wait_clean(c, first, t_up)
    gone_1["processes"] = procs_gone  # from the cancel, with LXD still down
    instances = c.lxd_get("/1.0/instances?recursion=1") or []
    ws_running = sum(1 for i in instances if i.get("status") == "Running")
    second_states = c.job_states([j.id for j in second])
    second_procs = running([n for j in second for n in j.needles])
    while_down = (f"LXD {'STILL ANSWERED' if answered_down else 'did not answer'} after the kill; "
                  f"2 jobs cancelled {t_cancel - t_kill:.1f} s after it: their processes "
                  + (f"were gone {procs_gone:.2f} s after the cancel, with LXD still down" if procs_gone is not None
                     else "were NOT gone within 20 s")
                  + f"; `bmas lxd up` {'took' if up.returncode == 0 else 'FAILED after'} {t_up - t_up0:.1f} s"
                  + f" ({'a new lxd' if new_pid != pid else 'NO new lxd'})"
                  + ("" if up.returncode == 0 else f" ({up.stderr.strip()[-200:]})")
                  + f"; afterwards {ws_running} of {len(instances)} workspaces running, the other 2 jobs "
                  f"{', '.join(sorted({s[0] for s in second_states.values()}))} with "
                  f"{len(second_procs)} of their 4 sleeps")
    t_cancel2 = time.monotonic()
    for j in second:
        c.run(c.as_user(j.user, "cancel", str(j.id)))
    gone_2, left_2 = wait_clean(c, second, t_cancel2)
    return [group_row("b. LXD", "2 jobs cancelled while LXD was down",
                      first, "lxd (SIGKILL); started again with `bmas lxd up`", down_s, while_down,
                      "processes: the cancel; devices and cgroups: `bmas lxd up` returned",
                      gone_1, left_1, c.job_states([j.id for j in first])),
            group_row("b. LXD", "2 jobs cancelled after LXD was back", second, "", None, "", "cancel",
                      gone_2, left_2, c.job_states([j.id for j in second]))]


def fault_agent(c, base):
    """(c) the agent SIGKILLed with 4 jobs running, started again after their cleanup (or after
    30 s); jobs still running then are cancelled."""
    specs = [(u, base + k + 1, base + k + 11) for k, u in enumerate(USERS)]
    jobs = start_jobs(c, specs)
    t_kill = time.monotonic()
    c.agent.kill()
    c.agent.wait()
    c.agent = None
    gone, left = wait_clean(c, jobs, t_kill, timeout=30)
    states_down = c.job_states([j.id for j in jobs])
    t_up0 = time.monotonic()
    c.start_agent()
    down_s = time.monotonic() - t_kill
    alive = [j for j in jobs if states_down.get(j.id, ("",))[0] in ("RUNNING", "PENDING", "CONFIGURING", "COMPLETING")]
    while_down = (f"the jobs' `bmas agent exec` lost the agent's connection: {time.monotonic() - t_kill:.1f} s after "
                  f"the kill the 4 jobs were "
                  f"{', '.join(sorted({s[0] + ' (exit ' + s[1] + ')' for s in states_down.values()}))}, and the "
                  f"epilog (no agent to ask) ended what was left in the workspaces; the agent was started again "
                  f"{t_up0 - t_kill:.1f} s after the kill")
    rows = [group_row("c. agent", "4 jobs running when the agent was killed", jobs,
                      "bmas agent (SIGKILL); started again the same way", down_s, while_down, "kill",
                      gone, left, c.job_states([j.id for j in jobs]))]
    if alive:
        t_cancel = time.monotonic()
        for j in alive:
            c.run(c.as_user(j.user, "cancel", str(j.id)), check=False)
        g2, l2 = wait_clean(c, alive, t_cancel)
        rows.append(group_row("c. agent", f"{len(alive)} jobs still running with the agent back, cancelled", alive,
                              "", None, "", "cancel", g2, l2, c.job_states([j.id for j in alive])))
    return rows


def node_gres(c):
    """{node: (state, GPUs Slurm counts as in use)} from `scontrol -d -o show node`."""
    r = subprocess.run(["scontrol", "-d", "-o", "show", "node"], env=c.slurm_env(), capture_output=True,
                       text=True, timeout=15)
    out = {}
    for line in r.stdout.splitlines():
        n, st, used = (re.search(p, line) for p in (r"NodeName=(\S+)", r" State=(\S+)", r"GresUsed=gpu:\w*:?(\d+)"))
        if n:
            out[n.group(1)] = (st.group(1) if st else "?", int(used.group(1)) if used else -1)
    return out


def gres_after_restart(c, base):
    """After the slurmctld fault, with no job running: the GPUs Slurm counts as in use per node,
    then 4 jobs of 2 GPUs: the GPUs each was given (scontrol's JOB_GRES) and its devices in LXD."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(s[0] != "UNKNOWN" and "IDLE" not in s[0] for s in node_gres(c).values()):
        time.sleep(0.5)
    idle = node_gres(c)
    jobs = [Job(c, u, base + k + 1, base + k + 11) for k, u in enumerate(USERS)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = c.job_states([j.id for j in jobs])
        if all(states.get(j.id, ("",))[0] == "RUNNING" for j in jobs) and \
                all(n in running([n for j in jobs for n in j.needles]) for j in jobs for n in j.needles):
            break
        time.sleep(0.3)
    time.sleep(2)  # the prolog's devices
    given, devs = {}, c.job_devices() or {}
    for j in jobs:
        r = subprocess.run(["scontrol", "-d", "show", "job", str(j.id)], env=c.slurm_env(), capture_output=True,
                           text=True, timeout=15)
        g = re.search(r"JOB_GRES=gpu:\w*:?(\d+)", r.stdout)
        n = re.search(r"\bNodeList=(\S+)", r.stdout)
        given[j.id] = dict(node=n.group(1) if n else "?", gpus=int(g.group(1)) if g else -1,
                           devices=len(devs.get(j.id, [])))
    t = time.monotonic()
    for j in jobs:
        c.run(c.as_user(j.user, "cancel", str(j.id)), check=False)
    gone, left = wait_clean(c, jobs, t, timeout=60)
    return dict(idle=idle, given=given, gone=gone, left=left)


def resume_nodes(c):
    """Nodes that are down or drained ("Nodes that were not": name (state, reason)), resumed."""
    r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], env=c.slurm_env(), capture_output=True,
                       text=True, timeout=15)
    bad = sorted({l for l in r.stdout.splitlines() if re.search(r"\|(down|drain)", l)})
    for l in bad:
        subprocess.run(["scontrol", "update", f"nodename={l.split('|')[0]}", "state=resume"],
                       env=c.slurm_env(), capture_output=True, timeout=15)
    if bad:
        time.sleep(2)
    return [l.replace("|", " ", 1).replace("|", " (", 1) + ")" for l in bad]


def faults(c):
    rows, problems, all_jobs_needles = [], [], []
    # slurmctld last: its restart leaves Slurm's GPU accounting wrong on the nodes that had jobs
    # (measured below, after it), which would spoil the faults after it.
    for name, fn, base in (("LXD", fault_lxd, 4200), ("agent", fault_agent, 4300), ("slurmctld", fault_slurmctld, 4100)):
        resumed = resume_nodes(c)
        if resumed:
            problems.append(f"before the {name} fault, nodes {resumed} were not usable and were resumed "
                            f"(`scontrol update nodename=N state=resume`)")
        m0, pid0 = c.metrics(), c.agent.pid if c.agent else None
        try:
            got = fn(c, base)
            m1 = c.metrics()
            before = m0.get("bmas_agent_reconcile_removed_total", 0) if c.agent and c.agent.pid == pid0 else 0
            got[0]["reconciled"] = m1.get("bmas_agent_reconcile_removed_total", 0) - before
            rows += got
            print(f"agent_security_bench: AS2 {name}: {json.dumps(got, default=str)}", file=sys.stderr)
        except Exception as e:  # the next fault still runs
            print(f"agent_security_bench: AS2 {name} FAILED: {e!r}", file=sys.stderr)
            problems.append(f"{name}: " + re.sub(r"/tmp/bmas-agent-bench-\w+", "DIR", str(e))[-400:])
            for u in USERS:
                subprocess.run(["scancel", "--user", u], env=c.slurm_env(), capture_output=True, timeout=30)
            time.sleep(5)
        all_jobs_needles += [f"sleep {base + k}" for k in range(1, 15)]
    try:
        gres = gres_after_restart(c, 4400)
    except Exception as e:
        gres = dict(error=re.sub(r"/tmp/bmas-agent-bench-\w+", "DIR", str(e))[-400:])
    print(f"agent_security_bench: AS2 GPU accounting after the slurmctld restart: {json.dumps(gres)}", file=sys.stderr)
    all_jobs_needles += [f"sleep {4400 + k}" for k in range(1, 15)]
    # Everything the three faults started, a few seconds after the last.
    time.sleep(3)
    final = dict(processes=sorted(running(all_jobs_needles)), devices=c.job_devices(), cgroups=sorted(job_cgroups()),
                 nvidia=c.nvidia_in_workspaces(), agent_metrics=c.metrics())
    return dict(rows=rows, problems=problems, final=final, gres=gres)


def faults_section(r):
    f = lambda x: "-" if x is None else f"{x:.2f}"
    rows = ["| fault | jobs | what was killed | down for (s) | times from | processes gone after (s) | GPU devices gone after (s) | job cgroups gone after (s) | devices the reconcile pass unplugged (whole fault) | jobs' final states | leftover processes | leftover devices | leftover job cgroups |",
            "|---|---|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    leftovers = 0
    for g in r["rows"]:
        lp, ld, lc = len(g["left"]["processes"]), len(g["left"]["devices"]), len(g["left"]["cgroups"])
        leftovers += lp + ld + lc
        rec = f"{g['reconciled']:.0f}" if "reconciled" in g else ""
        rows.append(f"| {g['fault']} | {g['what']} | {g['killed']} | {f(g['down_s'])} | {g['ref']} | "
                    f"{f(g['gone']['processes'])} | {f(g['gone']['devices'])} | {f(g['gone']['cgroups'])} | {rec} | "
                    f"{', '.join(g['states'])} | {lp} | {ld} | {lc} |")
    fin = r["final"]
    fin_dev = sum(len(v) for v in (fin["devices"] or {}).values()) if fin["devices"] is not None else "LXD did not answer"
    notes = " ".join(f"{g['fault']}: {g['while_down']}." for g in r["rows"] if g["while_down"])
    left_text = "; ".join(f"{g['fault']} ({g['what'][:40]}...): {json.dumps(g['left'])}" for g in r["rows"]
                          if g["left"]["processes"] or g["left"]["devices"] or g["left"]["cgroups"])
    findings = ""
    for g in r["rows"]:
        if g["fault"].startswith("c.") and g["ref"] == "kill" and any("126" in s for s in g["states"]):
            findings += ("**Finding: killing the agent fails every job running in a workspace**: a job's `bmas agent "
                         "exec` loses the agent's connection and exits 126, Slurm ends the job, and the epilog (which "
                         "needs no agent) ends the rest; nothing is left behind, but the jobs are lost. ")
        if g["fault"].startswith("a.") and "by hand" in g["killed"]:
            findings += ("**Finding: `bmas slurm up` cannot start again a slurmctld that died alone** (it refuses while "
                         "the cluster's other daemons run, and `bmas slurm down` would end the running jobs); this "
                         "script started it by hand with the command line it had. ")
    g = r["gres"]
    if "error" in g:
        gres_text = f"The check of Slurm's GPU accounting after the slurmctld restart FAILED: {g['error']}"
    else:
        leaked = {n: v[1] for n, v in g["idle"].items() if v[1] > 0}
        short = {i: v for i, v in g["given"].items() if v["gpus"] != 2}
        gres_text = (f"After the slurmctld fault, with no job left, Slurm counted GPUs in use (`GresUsed` of `scontrol -d "
                     f"show node`) on {', '.join(f'{n}: {k}' for n, k in sorted(leaked.items())) if leaked else 'no node'}. "
                     f"Then 4 more jobs asking for 2 GPUs each: " +
                     "; ".join(f"job on {v['node']} given {v['gpus']} GPUs (`JOB_GRES`), {v['devices']} devices plugged"
                               for v in g["given"].values()) + ". " +
                     (f"**Finding (Slurm 22.05.8, not bmas): after slurmctld is killed and started again, the GPUs of the "
                      f"jobs that were running stay counted as in use after those jobs end, and a later job that asks "
                      f"for 2 GPUs is started on such a node with 0** (it runs, its prolog plugs nothing, the job sees "
                      f"no GPU). That is why this script runs the slurmctld fault last. " if leaked or short else "") +
                     f"Their cleanup after `bmas cancel`: processes {f(g['gone']['processes'])} s, devices "
                     f"{f(g['gone']['devices'])} s, leftovers {len(g['left']['processes']) + len(g['left']['devices']) + len(g['left']['cgroups'])}.")
    text = (f"Four users (bmasbench001..004), each with a running workspace (busybox image), each run a job "
            f"`bmas run --gpus 2 -- sh -c 'setsid sleep D </dev/null >/dev/null 2>&1 & exec sleep M'` (D and M "
            f"distinct numbers for every job; the job's command runs in the workspace through the agent, in the job's "
            f"cgroup `bmas-job-ID` there, with its 2 GPUs plugged by the prolog as LXD devices `bmas-jID-NODE-gpuN`). "
            f"Once every job runs, both its sleeps are on the host and its devices are plugged, one component is "
            f"killed with SIGKILL and started again, and the jobs end (they run out, or their users cancel them with "
            f"`bmas cancel`). Then, every 0.1 s: host processes whose command line is exactly `sleep D` or `sleep M` "
            f"(/proc/*/cmdline; a workspace's processes are host processes), the `bmas-j<job>-` devices of every "
            f"instance (LXD's `GET /1.0/instances?recursion=1`), and `bmas-job-<job>` cgroups under any "
            f"`/sys/fs/cgroup/*/lxc.payload.ws-*`. \"Gone after\" counts from the moment in \"times from\"; leftovers "
            f"are what was still there 90 s after it (30 s for the agent's kill). The agent "
            f"runs with `--reconcile-interval 0.5`. The faults ran in the order b, c, a. {notes} {findings}{gres_text} "
            f"After all three faults: {len(fin['processes'])} of the jobs' sleeps on the host, {fin_dev} bmas GPU "
            f"devices in LXD, {len(fin['cgroups'])} job cgroups, nvidia nodes in the workspaces' /dev: "
            f"{json.dumps(fin['nvidia']) if fin['nvidia'] else 'none'}. "
            + (f"**Leftovers: {leftovers}** — {left_text}. " if leftovers else "**Leftovers: none.** ")
            + (f"**Faults that could not be measured:** {'; '.join(r['problems'])}." if r["problems"] else ""))
    shown = ("cd ~ && setpriv --reuid bmasbench00N --regid bmasbench00N --init-groups build/bmas --config CONFIG "
             "--state-dir STATE run --gpus 2 -- sh -c 'setsid sleep D </dev/null >/dev/null 2>&1 & exec sleep M'   # x4\n"
             "kill -KILL SLURMCTLD; build/bmas --config CONFIG --state-dir STATE slurm up; "
             "/usr/sbin/slurmctld -D -f STATE/slurm/etc/slurm.conf &   # when slurm up refuses\n"
             "kill -KILL LXD; build/bmas --config CONFIG --state-dir STATE lxd up\n"
             "kill -KILL AGENT; build/bmas --config CONFIG --state-dir STATE agent --reconcile-interval 0.5 "
             f"--metrics-port 0 --io-timeout {IO_TIMEOUT_S} --max-connections-per-uid {CAP_PER_UID}\n"
             "cd ~ && setpriv --reuid bmasbench00N --regid bmasbench00N --init-groups build/bmas --config CONFIG "
             "--state-dir STATE cancel ID\n"
             "grep -l '^sleep D$' /proc/*/cmdline (NULs as spaces); LXD_DIR=LXD lxc query '/1.0/instances?recursion=1'; "
             "ls -d /sys/fs/cgroup/*/lxc.payload.ws-*/bmas-job-*   # every 0.1 s")
    return "AS2. Faults during jobs: slurmctld, LXD and the agent killed", shown, text, rows


# ---- main ---------------------------------------------------------------------------------------


def main():
    if os.geteuid() != 0:
        print("agent_security_bench: skipped: `bmas lxd up` and `bmas slurm up` need root", file=sys.stderr)
        return
    if shutil.which("lxd") is None and not os.path.exists("/usr/sbin/lxd"):
        print("agent_security_bench: skipped: LXD is not installed (bash scripts/install-deps.sh)", file=sys.stderr)
        return
    if not os.access("/usr/sbin/slurmctld", os.X_OK):
        print("agent_security_bench: skipped: Slurm is not installed (bash scripts/install-deps.sh)", file=sys.stderr)
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    started = time.strftime("%Y-%m-%d %H:%M")
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "src"):
        commit += " with changes to src/ not committed"
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    made_users = lb.ensure_users(USERS)
    for u in ATTACKERS:
        if subprocess.run(["id", u], capture_output=True).returncode != 0:
            subprocess.run(["useradd", u], check=True)
            made_users += 1
    load0, busy0, niced0, t0 = os.getloadavg(), busy_cpu_seconds(), niced_cpu(), time.time()
    c = Cluster()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("agent_security_bench: terminated"))
    sections, problems = [], []
    try:
        c.up()
        print(f"agent_security_bench: up after {time.time() - t0:.0f} s ({c.image})", file=sys.stderr)
        if ONLY is None or 1 in ONLY:
            r1 = idle_connections(c)
            print(f"agent_security_bench: AS1 raw: {json.dumps(r1, default=str)[:4000]}", file=sys.stderr)
            sections.append(idle_connections_section(r1))
            print(f"agent_security_bench: AS1 done after {time.time() - t0:.0f} s", file=sys.stderr)
        if ONLY is None or 2 in ONLY:
            r2 = faults(c)
            sections.append(faults_section(r2))
            print(f"agent_security_bench: AS2 done after {time.time() - t0:.0f} s", file=sys.stderr)
    finally:
        problems = c.down()
    elapsed = time.time() - t0
    load1, busy1, niced1 = os.getloadavg(), busy_cpu_seconds(), niced_cpu()
    by_name = {}
    for p, v in niced1.items():
        by_name[v[1]] = by_name.get(v[1], 0.0) + v[0] - (niced0[p][0] if p in niced0 else 0.0)
    niced = sum(by_name.values())
    niced_names = [n for n, cpu in sorted(by_name.items(), key=lambda x: -x[1]) if cpu >= 1.0]
    text = (f"{HEADING}\n\nWritten by `python3 bench/agent_security_bench.py` (as root) on {started} in "
            f"{elapsed:.0f} s, at commit {commit}; {os.cpu_count()} cores, {cpu}, Linux {platform.release()}. "
            f"Other load: the machine is shared; over the run it was busy {(busy1 - busy0) / elapsed:.2f} cores on "
            f"average (this run's own work included), of which processes at a positive nice value (other engineers' "
            f"fuzzers and builds; those that used a second or more: {', '.join(niced_names[:6]) or 'none'}) took "
            f"{niced / elapsed:.2f} cores; load average "
            f"{load0[0]:.2f} at the start, {load1[0]:.2f} at the end. Nothing here is typed in by hand. The script "
            f"starts its own LXD (`build/bmas --config CONFIG --state-dir STATE lxd up`, CONFIG setting "
            f"`[lxd] dir = LXD` and `pool_size = \"4GiB\"`, all in a temporary directory), builds the busybox "
            f"image (`bmas image build --base busybox`), starts the local Slurm cluster (`bmas slurm up`: 3 nodes x "
            f"4 fake GPUs, in the same state directory), creates workspaces for {USERS[0]}..{USERS[-1]} "
            f"(`bmas workspace create`) and starts `bmas agent`; at the end it stops the agent, runs `bmas slurm "
            f"down`, deletes the workspaces, runs `bmas lxd down` and removes the directory. Users "
            f"{USERS[0]}..{USERS[-1]} and the attackers {ATTACKERS[0]}..{ATTACKERS[-1]} are made with `useradd` when "
            f"missing ({made_users} made by this run) and kept. bmas runs from a copy of build/bmas taken at the "
            f"start." + (f" Cleanup problems: {'; '.join(problems)}." if problems else "") + "\n\n")
    for title, command, body, table in sections:
        text += f"## {title}\n\n```\n{command}\n```\n\n{body}\n\n" + "\n".join(table) + "\n\n"
    if ONLY is not None:
        print(text)
        return
    run.write_section(HEADING, text)
    print(text)


if __name__ == "__main__":
    main()
