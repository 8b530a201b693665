#!/usr/bin/env python3
"""How closely `bmas plan` models the real Slurm: fidelity benchmark 2 of the capacity planner.

Usage: bench/plan_fidelity_bench.py [BUILD_DIR] [--quick]

A seeded trace of 200 jobs (1, 2, 4 or 8 GPUs; 1-30 s each; Poisson arrivals that keep the 12
GPUs a little over-subscribed) is submitted, time-compressed, to a real local Slurm (`bmas slurm
up`: 3 nodes x 4 fake GPUs, the cluster of examples/cluster-local.toml) with sbatch, at its
times. Each job stamps its own start and end. The same trace then goes through `bmas plan
--cluster examples/cluster-local.toml --trace` with no tuning flag: the trace gives each job's
time limit (every job asks for one minute, -t 1), and the planner takes its launch delay and
backfill interval from the cluster and its defaults. The launch delay (sbatch to the job's first
instruction, on an empty cluster) and the release delay (a job's last instruction to the next
job starting on its GPUs, less the launch delay) are measured just before, for comparison only. Mean and p95 wait and the makespan are compared; the target is
within 10%. Writes "# Planner fidelity" in bench/RESULTS.md (not with --quick). Needs root and
Slurm; without them it says so and exits 0.
"""
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

QUICK = "--quick" in sys.argv
import run  # noqa: E402  bench/run.py: ROOT, BMAS
import slurm_bench  # noqa: E402  its local Cluster
ROOT, BMAS = run.ROOT, run.BMAS
HEADING = "# Planner fidelity"
JOBS = 40 if QUICK else 200
SEED = 13
MEAN_GAP_S = 3.3  # ~ 2.9 GPUs x 15.5 s per job against 12 GPUs: about 1.1x what they hold
SIZES = [(1, 0.4), (2, 0.25), (4, 0.2), (8, 0.15)]


def percentile(xs, q):
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(q * len(xs) + 0.999999) - 1))]


def make_trace():
    rng = random.Random(SEED)
    t, jobs = 0.0, []
    for i in range(JOBS):
        r, gpus = rng.random(), SIZES[-1][0]
        for g, share in SIZES:
            if r < share:
                gpus = g
                break
            r -= share
        jobs.append({"i": i, "at": round(t, 3), "gpus": gpus, "duration": rng.randint(1, 30)})
        t += rng.expovariate(1 / MEAN_GAP_S)
    return jobs


def sbatch_args(c, gpus, seconds, tag):
    nodes, per_node = (gpus // 4, 4) if gpus > 4 else (1, gpus)
    stamp = os.path.join(c.work, tag)
    script = f"date +%s.%N > {stamp}.s; sleep {seconds}; date +%s.%N > {stamp}.e"
    return ["sbatch", "--parsable", "-p", "lab", "-t", "1", "-N", str(nodes), f"--gres=gpu:{per_node}",
            "-o", "/dev/null", "--wrap", script]


def read_stamp(path, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return float(text)
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"no stamp {path} after {timeout} s")


def calibrate(c):
    """(launch delay, release delay), medians of 5 tries each on the empty cluster."""
    launch, release = [], []
    for k in range(5):
        t0 = time.time()
        c.run(sbatch_args(c, 1, 0, f"cal-l{k}"))
        launch.append(read_stamp(os.path.join(c.work, f"cal-l{k}.s")) - t0)
        slurm_bench.wait_empty_queue(c)
    for k in range(5):
        # A whole-cluster job, then another right behind it: the second starts when the first's
        # GPUs are released.
        c.run(sbatch_args(c, 12, 2, f"cal-a{k}"))
        c.run(sbatch_args(c, 12, 0, f"cal-b{k}"))
        end_a = read_stamp(os.path.join(c.work, f"cal-a{k}.e"))
        start_b = read_stamp(os.path.join(c.work, f"cal-b{k}.s"))
        release.append(start_b - end_a)
        slurm_bench.wait_empty_queue(c)
    l = statistics.median(launch)
    return l, max(0.0, statistics.median(release) - l), launch, release


def replay(c, jobs):
    """Submits each job at its time; returns per job (submit, start, end) in seconds from the
    first submission."""
    submitted = [None] * len(jobs)
    t0 = time.time() + 1
    for j in jobs:
        delay = t0 + j["at"] - time.time()
        if delay > 0:
            time.sleep(delay)
        submitted[j["i"]] = time.time()
        c.run(sbatch_args(c, j["gpus"], j["duration"], f"job{j['i']}"))
    out = []
    for j in jobs:
        s = read_stamp(os.path.join(c.work, f"job{j['i']}.s"), timeout=1800)
        e = read_stamp(os.path.join(c.work, f"job{j['i']}.e"), timeout=1800)
        out.append((submitted[j["i"]] - t0, s - t0, e - t0))
    base = min(x[0] for x in out)
    return [(a - base, b - base, e - base) for a, b, e in out]


def model(jobs, real, workdir):
    """`bmas plan` with no tuning flag: the trace says what each job asked for (-t 1: 60 s), and
    the planner takes the rest from the cluster and its defaults."""
    trace = os.path.join(workdir, "trace.csv")
    with open(trace, "w") as f:
        f.write("submit_s,user,gpus,duration_s,partition,time_limit_s\n")
        for j, (sub, _, _) in zip(jobs, real):
            f.write(f"{sub:.3f},bench,{j['gpus']},{j['duration']},lab,60\n")
    cmd = [BMAS, "plan", "--cluster", os.path.join(ROOT, "examples", "cluster-local.toml"), "--trace", trace,
           "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    shown = ["build/bmas" if a == BMAS else run.rel(a) if a.startswith(ROOT) else a for a in cmd]
    shown = ["TRACE.csv" if a == trace else a for a in shown]
    return json.loads(r.stdout), " ".join(shown)


def main():
    if os.geteuid() != 0:
        print("plan_fidelity_bench: skipped: `bmas slurm up` needs root", file=sys.stderr)
        return
    os.environ["PATH"] += ":/usr/sbin"
    if shutil.which("slurmctld") is None:
        print("plan_fidelity_bench: skipped: Slurm is not installed (bash scripts/install-deps.sh)", file=sys.stderr)
        return
    started = time.strftime("%Y-%m-%d %H:%M")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    jobs = make_trace()
    c = slurm_bench.Cluster()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("plan_fidelity_bench: terminated"))
    t0 = time.time()
    try:
        c.up()
        launch, release, launches, releases = calibrate(c)
        print(f"plan_fidelity_bench: launch delay {launch:.3f} s, release delay {release:.3f} s", file=sys.stderr)
        real = replay(c, jobs)
        plan, command = model(jobs, real, c.top)
    finally:
        c.down()
    elapsed = time.time() - t0
    waits = [s - sub for sub, s, _ in real]
    real_mean, real_p95 = statistics.mean(waits), percentile(waits, 0.95)
    real_makespan = max(e for _, _, e in real)
    model_makespan = plan["jobs"]["makespan_s"]
    calibration = plan["sim"]["calibration"]
    m_mean, m_p95 = plan["jobs"]["wait_s"]["mean"], plan["jobs"]["wait_s"]["p95"]

    def ratio(m, r):
        return f"{m / r:.2f}" if r > 0 else "-"
    rows = [("wait, mean (s)", real_mean, m_mean), ("wait, p95 (s)", real_p95, m_p95),
            ("makespan (s)", real_makespan, model_makespan)]
    table = ["| | real Slurm | bmas plan | plan / real |", "|---|---|---|---|"]
    for name, r, m in rows:
        table.append(f"| {name} | {r:.2f} | {m:.2f} | {ratio(m, r)} |")
    worst = max(abs(m / r - 1) for _, r, m in rows if r > 0)
    text = (f"{HEADING}\n\nWritten by `python3 bench/plan_fidelity_bench.py` on {started} in {elapsed:.0f} s at commit "
            f"{commit}; {os.cpu_count()} cores, Linux {platform.release()}. Nothing here is typed in by hand.\n\n"
            "## 2. Jobs against the real Slurm\n\n"
            f"{JOBS} jobs (seed {SEED}: 1, 2, 4 or 8 GPUs with shares 40/25/20/15%, 1-30 s each, Poisson arrivals "
            f"{MEAN_GAP_S} s apart on average) submitted with sbatch at their times to the local cluster of "
            "examples/cluster-local.toml (`bmas slurm up`: 3 nodes x 4 fake GPUs, bf_interval=1), each asking for "
            "-t 1; every job stamps its first and last instruction. The same trace, with the submission times "
            "sbatch was actually called at, then goes through:\n\n"
            f"```\n{command}\n```\n\n"
            "No tuning flag: the trace carries each job's time limit (the `-t 1` it asked for: 60 s), and the "
            "planner takes the rest itself and says so: launch delay "
            f"{calibration['launch_delay_s']:.2f} s ({calibration['launch_delay_source']}); backfill every "
            f"{calibration['backfill_interval_s']:g} s ({calibration['backfill_interval_source']}). For comparison, "
            f"measured on the same cluster just before (median of 5), not given to the planner: the launch delay, "
            f"sbatch to a job's first instruction on an empty cluster, {launch:.3f} s (tries: "
            f"{', '.join(f'{x:.3f}' for x in launches)}); the release delay, a job's last instruction to the next "
            f"job's first on its GPUs, less the launch delay, {release:.3f} s (tries, before subtracting: "
            f"{', '.join(f'{x:.3f}' for x in releases)}).\n\n"
            + "\n".join(table) +
            f"\n\nWorst difference: {100 * worst:.1f}% (target: within 10%).\n")
    print(text)
    if not QUICK:
        run.write_section(HEADING, text)


if __name__ == "__main__":
    main()
