#!/usr/bin/env python3
"""Measures MIG re-layout (issue 26) and writes it into bench/RESULTS.md under
"# MIG re-layout benchmarks".

Usage: bench/mig_relayout_bench.py [BUILD_DIR] [--rounds N] [--print]

Starts its own local cluster of examples/cluster-local-flex.toml (`bmas slurm up`: two hosts
with GPUs 0-2 whole and GPU 3 re-partitionable) in a temporary state directory, and stops it at
the end, whatever happens. The GPUs are the fake NVML library's (build/tests/fake_nvml), and the
layout is applied through it. Whole-GPU jobs hold both hosts' other GPUs throughout.

R1, each round: a job asking for a slice of the next layout's profile waits; then
`bmas slurm relayout oss01-gpu3 LAYOUT --nvml-library FAKE` runs. Timed from the command's
start: the new layout's node idle in Slurm (what the command prints), the command's return, and
the waiting job running (squeue, polled every 20 ms). The reference in the same run is what
Slurm itself needs for a node's gres to change: a slurmctld restart (the node definition is read
only at start) until every node answers again, measured as `kill slurmctld` then `bmas slurm up`,
which starts it again as it was. After every round: the whole-GPU jobs still RUNNING and never
requeued, and no node drained. --print writes nothing into RESULTS.md. Needs root and Slurm.
"""
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROUNDS = 12
if "--rounds" in sys.argv:
    i = sys.argv.index("--rounds")
    ROUNDS = int(sys.argv[i + 1])
    del sys.argv[i:i + 2]
PRINT_ONLY = "--print" in sys.argv

import run  # noqa: E402  bench/run.py: ROOT, BMAS, BUILD, write_section, scratch
from slurm_bench import poll  # noqa: E402

ROOT, BMAS = run.ROOT, run.BMAS
HEADING = "# MIG re-layout benchmarks"
FAKE_NVML = os.path.join(run.BUILD, "tests", "fake_nvml", "libnvidia-ml.so.1")
INVENTORY = os.path.join(ROOT, "examples", "cluster-local-flex.toml")
# The layouts in turn, and the profile a waiting job asks for in each.
CYCLE = [("7x1g.10gb", "gpu:1g.10gb:1"), ("3g.40gb+2g.20gb+2x1g.10gb", "gpu:2g.20gb:1"),
         ("2x3g.40gb", "gpu:3g.40gb:2"), ("whole", "gpu:h100:1")]


def percentile(xs, q):
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(q * len(xs) + 0.999999) - 1))]


class Cluster:
    def __init__(self):
        self.top, self.state, self.work, self.bmas_path = run.scratch("bmas-relayout-bench-")
        self.nvml = os.path.join(self.top, "nvml.txt")
        with open(self.nvml, "w") as f:
            for g in range(4):
                f.write(f"uuid=GPU-{g} name=NVIDIA_H100_80GB_HBM3 util=0 mem_used_mib=0 "
                        "mem_total_mib=81559 mig=0 cc=9.0\n")
        self.env = dict(os.environ, BMAS_FAKE_NVML=self.nvml,
                        SLURM_CONF=os.path.join(self.state, "slurm", "etc", "slurm.conf"))

    def bmas(self, *args):
        return [self.bmas_path, "--state-dir", self.state, *args]

    def run(self, cmd, check=True):
        r = subprocess.run(cmd, cwd=self.work, env=self.env, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
        return r

    def up(self):
        self.run(self.bmas("slurm", "up", "--cluster", INVENTORY))

    def down(self):
        subprocess.run(self.bmas("slurm", "down"), capture_output=True, env=self.env)
        shutil.rmtree(self.top, ignore_errors=True)

    def sbatch(self, *args):
        return self.run(["sbatch", "--parsable", "-o", "/dev/null", *args]).stdout.strip()

    def state_of(self, job):
        return self.run(["squeue", "-h", "-j", job, "-o", "%T"], check=False).stdout.strip()

    def node_states(self):
        out = self.run(["sinfo", "-h", "-N", "-p", "lab", "-o", "%N %T"]).stdout
        return dict(line.split() for line in out.splitlines())


def restart_slurmctld(c):
    """Slurm's own way for a node's gres to change: slurmctld starts again (then every node must
    answer it). Seconds until every running layout node and host is responding and not drained."""
    pid = int(c.run(["pgrep", "-f", f"slurmctld -D -f {c.env['SLURM_CONF']}"]).stdout.split()[0])
    t0 = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    poll("slurmctld to stop", lambda: not os.path.exists(f"/proc/{pid}"), timeout=20, every=0.01)
    c.run(c.bmas("slurm", "up", "--cluster", INVENTORY))

    def answering():
        states = c.node_states()
        # Standby layout nodes are DOWN and drained, with no slurmd; the four others must answer.
        live = {n: s for n, s in states.items() if not s.startswith("down") and "drain" not in s}
        return len(live) >= 4 and all(not s.endswith("*") for s in live.values())
    poll("every node to answer", answering, timeout=60)
    time.sleep(0.5)
    return time.monotonic() - t0


def main():
    if os.geteuid() != 0 or shutil.which("slurmctld", path=os.environ["PATH"] + ":/usr/sbin") is None:
        print("mig_relayout_bench: skipped: needs root and Slurm (bash scripts/install-deps.sh)",
              file=sys.stderr)
        return
    if not os.path.exists(FAKE_NVML):
        sys.exit(f"mig_relayout_bench: {FAKE_NVML} is missing: build the project first")
    os.environ["PATH"] += ":/usr/sbin"
    started = time.strftime("%Y-%m-%d %H:%M")
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    load0 = os.getloadavg()
    t_start = time.time()
    c = Cluster()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("mig_relayout_bench: terminated"))
    rows, restarts, untouched, drained = [], [], 0, 0
    try:
        c.up()
        # The hosts' other GPUs, and oss02's GPU 3 (whole), held throughout.
        whole = [c.sbatch(f"--gres=gpu:h100:{n}", "-w", host, "--wrap", "sleep 3600")
                 for host, n in (("oss01", 3), ("oss02", 3), ("oss02-gpu3-0", 1))]
        poll("the whole-GPU jobs to run", lambda: all(c.state_of(j) == "RUNNING" for j in whole))
        for r in range(ROUNDS):
            layout, gres = CYCLE[r % len(CYCLE)]
            waiting = c.sbatch(f"--gres={gres}", "--wrap", "sleep 3600")
            time.sleep(0.3)  # it is queued, and pending
            assert c.state_of(waiting) == "PENDING", (r, layout, c.state_of(waiting), c.node_states())
            t0 = time.monotonic()
            proc = subprocess.Popen(c.bmas("slurm", "relayout", "oss01-gpu3", layout, "--nvml-library",
                                           FAKE_NVML), cwd=c.work, env=c.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            # Both clocks in one loop: the command's return, and the waiting job's start.
            returned = started_at = None
            deadline = time.monotonic() + 60
            while (returned is None or started_at is None) and time.monotonic() < deadline:
                if returned is None and proc.poll() is not None:
                    returned = time.monotonic()
                if started_at is None and c.state_of(waiting) == "RUNNING":
                    started_at = time.monotonic()
                time.sleep(0.01)
            out, err = proc.communicate(timeout=60)
            if started_at is None:
                raise RuntimeError(f"the job waiting for {layout} did not run: {out} {err}")
            if proc.returncode != 0:
                raise RuntimeError(f"relayout to {layout} failed: {err.strip()}")
            m = re.search(r"schedulable ([0-9.]+) s", out)
            rows.append((layout, float(m.group(1)), returned - t0, started_at - t0))
            c.run(["scancel", waiting])
            # Gone from squeue: neither running nor completing, so the GPU may change again.
            poll("the slice job to end", lambda: c.state_of(waiting) == "")
            infos = [dict(re.findall(r"(\w+)=(\S*)", c.run(["scontrol", "-o", "show", "job", j]).stdout))
                     for j in whole]
            untouched += all(i.get("JobState") == "RUNNING" and i.get("Restarts") == "0" for i in infos)
            reasons = c.run(["sinfo", "-h", "-N", "-p", "lab", "-o", "%N|%T|%E"]).stdout.splitlines()
            drained += any("drain" in l and "|bmas: standby MIG layout" not in l for l in reasons)
        for _ in range(3):
            restarts.append(restart_slurmctld(c))
        infos = [dict(re.findall(r"(\w+)=(\S*)", c.run(["scontrol", "-o", "show", "job", j]).stdout))
                 for j in whole]
        whole_after_restarts = all(i.get("JobState") == "RUNNING" for i in infos)
    finally:
        c.down()
    elapsed = time.time() - t_start
    load1 = os.getloadavg()

    sched = [x[1] for x in rows]
    started_s = [x[3] for x in rows]
    p50_started = statistics.median(started_s)
    p50_restart = statistics.median(restarts)
    text = (f"{HEADING}\n\nWritten by `python3 bench/mig_relayout_bench.py` (as root) on {started} in "
            f"{elapsed:.0f} s, at commit {commit}; {os.cpu_count()} cores, {cpu}, Linux {platform.release()}; "
            f"load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end. Nothing here is typed in by "
            "hand. The script starts its own local cluster of examples/cluster-local-flex.toml in a temporary "
            "state directory STATE and stops it at the end; FAKE is build/tests/fake_nvml/libnvidia-ml.so.1 with "
            "its GPUs in a file of the run's own. The machine is shared and noisy: compare the ratios.\n\n")
    text += ("## R1. Re-layout: from the decision to slices schedulable, with other GPUs' jobs running\n\n```\n"
             "sbatch --gres=gpu:h100:3 -w oss01 --wrap 'sleep 3600'   # and oss02, and oss02-gpu3-0 (1): held throughout\n"
             "sbatch --gres=gpu:1g.10gb:1 --wrap 'sleep 3600'   # waits: no running node has the profile\n"
             "build/bmas --state-dir STATE slurm relayout oss01-gpu3 7x1g.10gb --nvml-library FAKE\n"
             "squeue -h -j ID -o %T   # polled every 20 ms until RUNNING\n"
             "kill slurmctld; build/bmas --state-dir STATE slurm up   # the reference: slurmctld restarted, then every node answering\n"
             "```\n\n")
    text += (f"{len(rows)} changes of oss01's GPU 3 through the layouts whole -> 7x1g.10gb -> 3g+2g+2x1g -> 2x3g.40gb "
             "-> whole, each applied through NVML (the fake's own calls), each with one job waiting for a slice of "
             "the new layout. From the command's start until the new layout's node is idle in Slurm, p50 "
             f"**{statistics.median(sched):.2f} s** (max {max(sched):.2f} s; target: under 10 s; HAMi's dynamic MIG "
             "takes about 6 s per pod); until the waiting job runs, which adds Slurm's next scheduling pass (up "
             f"to a second here), p50 **{p50_started:.2f} s**, p99 {percentile(started_s, 0.99):.2f} s. Slurm's own way "
             f"for a node's gres to change, restarting slurmctld, took p50 {p50_restart:.2f} s until every node answered "
             f"again ({len(restarts)} restarts), so a re-layout is **{p50_started / p50_restart:.2f}x** of that, and it "
             "touches one node where the restart touches the whole cluster. After each change, the three whole-GPU jobs "
             f"were RUNNING with no restart in **{untouched} of {len(rows)}** rounds, and a node other than a standby layout's (DOWN and drained, no slurmd) was drained "
             f"in {drained} of {len(rows)} (the whole-GPU jobs survived the slurmctld restarts too: "
             f"{'yes' if whole_after_restarts else 'no'}).\n\n")
    text += "| layout | rounds | schedulable p50 (s) | command returned p50 (s) | waiting job running p50 (s) | max (s) |\n"
    text += "|---|---:|---:|---:|---:|---:|\n"
    for layout, _ in CYCLE:
        xs = [x for x in rows if x[0] == layout]
        if xs:
            text += (f"| {layout} | {len(xs)} | {statistics.median(x[1] for x in xs):.2f} | "
                     f"{statistics.median(x[2] for x in xs):.2f} | {statistics.median(x[3] for x in xs):.2f} | "
                     f"{max(x[3] for x in xs):.2f} |\n")
    text += (f"| reference: slurmctld restarted, until every node answers | {len(restarts)} |  |  | "
             f"{p50_restart:.2f} | {max(restarts):.2f} |\n")
    if not PRINT_ONLY:
        run.write_section(HEADING, text)
    print(text)


if __name__ == "__main__":
    main()
