#!/usr/bin/env python3
"""How fast `bmas plan` simulates: one week of the reference scenario (300 users, 48 GPUs) on
one core (taskset -c 0), against the issue's target of 60 s or less, and what the time goes to:
the same week with the cohorts' inference turned off (jobs and the floor's control loop only)
and with their training turned off (inference only). Each variant runs 3 times; the median is
reported. Writes "# Planner speed" in bench/RESULTS.md.

Usage: bench/plan_speed_bench.py [BUILD_DIR]
"""
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time

import run  # bench/run.py: ROOT, BMAS, write_section
ROOT, BMAS = run.ROOT, run.BMAS
HEADING = "# Planner speed"
SCENARIO = os.path.join(ROOT, "examples", "plan-300x48.toml")


def variant(path, text, key, value):
    """The reference scenario with every cohort's `key` set to `value`, beside the original (so
    that its relative cluster path still resolves)."""
    text = re.sub(rf"^{key} = [0-9.]+", f"{key} = {value}", text, flags=re.M)
    with open(path, "w") as f:
        f.write(text)
    return path


def timed(scenario):
    cmd = ["taskset", "-c", "0", BMAS, "plan", "--scenario", scenario, "--json"]
    runs = []
    for _ in range(3):
        t0 = time.time()
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        runs.append((time.time() - t0, json.loads(out)))
    runs.sort(key=lambda r: r[0])
    return runs[1]


def sweep_wall(value, base_wall):
    """Seconds one run of the reference scenario with --sweep KEY=V takes, less the base run that
    bmas plan also makes: the median of 3."""
    cmd = ["taskset", "-c", "0", BMAS, "plan", "--scenario", SCENARIO, "--json", "--sweep", value]
    walls, report = [], None
    for _ in range(3):
        t0 = time.time()
        report = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        walls.append(time.time() - t0 - base_wall)
    return statistics.median(walls), report["sweep"]["results"][0]


def main():
    started = time.strftime("%Y-%m-%d %H:%M")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    text = open(SCENARIO).read()
    folder = os.path.dirname(SCENARIO)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".plan-speed-") as tmp:
        scenarios = [
            ("the reference week", SCENARIO),
            ("jobs only (sessions_per_hour = 0)",
             variant(os.path.join(tmp, "..", os.path.basename(tmp) + "-jobs.toml"), text, "sessions_per_hour", 0)),
            ("inference only (jobs_per_week = 0)",
             variant(os.path.join(tmp, "..", os.path.basename(tmp) + "-inference.toml"), text, "jobs_per_week", 0)),
        ]
        rows = []
        try:
            for name, path in scenarios:
                wall, report = timed(path)
                sim = report["sim"]
                rows.append((name, wall, sim, report))
        finally:
            for _, path in scenarios[1:]:
                if os.path.exists(path):
                    os.remove(path)
    whole_wall = rows[0][1]
    scaling = ["| scenario | wall (s) | vs the reference | met |", "|---|---|---|---|",
               f"| reference: 300 users, 48 GPUs | {whole_wall:.2f} | 1.00 | - |"]
    growth = {}
    for value in ("users=600", "users=1200", "gpus=24", "gpus=96"):
        wall, point = sweep_wall(value, whole_wall)
        growth[value] = wall / whole_wall
        scaling.append(f"| {value} | {wall:.2f} | {wall / whole_wall:.2f} | {'yes' if point['met'] else 'no'} |")
    table = ["| run | wall (s) | simulated (s) | simulated s per wall s | events | events per s | requests | jobs |",
             "|---|---|---|---|---|---|---|---|"]
    for name, wall, sim, report in rows:
        table.append(f"| {name} | {wall:.2f} | {sim['simulated_s']:.0f} | {sim['simulated_s'] / wall:.0f} | "
                     f"{sim['events']} | {sim['events'] / wall:.0f} | {report['inference']['requests']} | "
                     f"{report['jobs']['count']} |")
    whole = rows[0][1]
    body = (f"{HEADING}\n\nWritten by `python3 bench/plan_speed_bench.py` on {started} at commit {commit}; "
            f"{os.cpu_count()} cores, Linux {platform.release()}. Nothing here is typed in by hand. Each run is\n\n"
            "```\ntaskset -c 0 build/bmas plan --scenario SCENARIO --json\n```\n\n"
            "three times, the median kept (wall time includes reading the files and writing the report). "
            "The variants are examples/plan-300x48.toml with one key set in every cohort.\n\n" + "\n".join(table) +
            f"\n\nOne simulated week of the reference scenario takes {whole:.1f} s on one core (target: 60 s or less). "
            "Events are the Slurm model's (submissions, ends, scheduling passes) and the inference "
            "simulation's (requests sent and entering engines, engine steps, control ticks, replica changes); "
            "engine steps are most of them. "
            f"Without the cohorts' inference the week takes {rows[1][1]:.2f} s, without their training "
            f"{rows[2][1]:.2f} s: the inference simulation (engine steps of the replicas, admission, the "
            f"autoscaler) is what dominates, about {100 * (1 - rows[1][1] / whole):.0f}% of the whole (the "
            "part the jobs-only week does not spend); the Slurm model and the reading of files are the rest.\n\n"
            "How it grows: the reference scenario with every cohort scaled (`--sweep users=N`) or the cluster "
            "cut or grown (`--sweep gpus=N`), one value per run, timed as the run less the reference run "
            "`bmas plan` makes first, median of 3:\n\n" + "\n".join(scaling) +
            f"\n\nTwice and four times the users take {growth['users=600']:.1f}x and {growth['users=1200']:.1f}x "
            "as long (the tokens served grow with them, and the Slurm model's backfill passes with the queue of an "
            f"overloaded cluster); half and twice the GPUs take {growth['gpus=24']:.2f}x and {growth['gpus=96']:.2f}x.\n")
    print(body)
    run.write_section(HEADING, body)


if __name__ == "__main__":
    main()
