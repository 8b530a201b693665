#!/usr/bin/env python3
"""Runs bmas's workspace benchmarks and writes them into bench/RESULTS.md under "# Workspace benchmarks".

Usage: bench/lxd_bench.py [BUILD_DIR] [--quick] [--only 1,2,4,6]

Starts its own LXD (`bmas lxd up` with a private `[lxd] dir`: a btrfs pool on a sparse loop file
in a temporary directory), builds the Debian image with `bmas image build --base debian`, and at
the end deletes every workspace it made, stops LXD with `bmas lxd down` and removes the
directory (the loop file with it), whatever happens. Workspaces belong to the Unix users
bmasbench001..bmasbench300, made with `useradd --create-home` when missing and kept afterwards.
--quick uses fewer workspaces (for trying the script out); --only runs the listed benchmarks (W1
and W2 always run: the others build on them) and writes them into RESULTS.md, keeping the other W
sections as an earlier run left them ("Not measured this session" where there are none). W3 runs
jobs in a workspace: it starts the local Slurm cluster (`bmas slurm up`, in the same state
directory) and `bmas agent`, and stops both before W1's parallel creations; W6 does the same on the
local cluster with MIG layouts (examples/cluster-local-mig.toml), a whole GPU's jobs against a
MIG slice's. Needs root and LXD (`bash scripts/install-deps.sh`);
without them it says why and exits 0, so `make bench` still runs the other benchmarks.
"""
import concurrent.futures
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

QUICK = "--quick" in sys.argv
ONLY = None
if "--only" in sys.argv:
    i = sys.argv.index("--only")
    ONLY = {int(x) for x in sys.argv[i + 1].split(",")}
    del sys.argv[i:i + 2]  # run.py reads BUILD_DIR from the other arguments

import run  # noqa: E402  bench/run.py: ROOT, BMAS
ROOT, BMAS = run.ROOT, run.BMAS
HEADING = "# Workspace benchmarks"
USERS = [f"bmasbench{i:03d}" for i in range(1, 301)]
SEQUENTIAL = 3 if QUICK else 10   # W1: created one after another, after one cold creation
PARALLEL = 5 if QUICK else 50     # W1: created all at once; W4: the ones left running
DEFINED = 20 if QUICK else 300    # W4: workspaces defined
SETTLE_S = 20                     # W2: idle time before measuring
POOL_SIZE = "40GiB"               # the btrfs loop file: sparse, so this is a ceiling
MIN_FREE_GB = 10                  # refused below this much free disk under /tmp


def percentile(xs, q):
    """Nearest rank: the value that q of the samples do not exceed."""
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(q * len(xs) + 0.999999) - 1))]


def meminfo_kb(field):
    with open("/proc/meminfo") as f:
        return int(next(l.split()[1] for l in f if l.startswith(field + ":")))


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return int(next(l.split()[1] for l in f if l.startswith(field + ":")))


def pss_kb(pid):
    """Proportional set size of a process, from /proc/PID/smaps_rollup."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return int(next(l.split()[1] for l in f if l.startswith("Pss:")))


def mib(kb):
    return kb / 1024


class Lxd:
    """A private LXD from `bmas lxd up` in a temporary directory, and the bench users.

    The directory is 711 (mkdtemp makes 700): unprivileged containers' root, a high host uid,
    must get through to their root file systems under it. bmas runs from a copy, so that a
    rebuild of build/bmas during the run changes nothing."""

    def __init__(self):
        self.top = tempfile.mkdtemp(prefix="bmas-lxd-bench-", dir="/tmp")
        os.chmod(self.top, 0o711)
        self.state = os.path.join(self.top, "state")
        self.lxd_dir = os.path.join(self.top, "lxd")
        self.config = os.path.join(self.top, "bmas.toml")
        with open(self.config, "w") as f:
            f.write(f'[lxd]\ndir = "{self.lxd_dir}"\nstorage_driver = "btrfs"\npool_size = "{POOL_SIZE}"\n')
        self.bmas_path = os.path.join(self.top, "bmas")
        shutil.copy2(BMAS, self.bmas_path)
        self.env = dict(os.environ, LXD_DIR=self.lxd_dir)
        self.made = set()  # users whose workspace this run created

    def bmas(self, *args):
        return [self.bmas_path, "--config", self.config, "--state-dir", self.state, *args]

    def run(self, cmd, check=True):
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
        return r

    def timed(self, cmd):
        t0 = time.monotonic()
        self.run(cmd)
        return time.monotonic() - t0

    def up(self):
        self.run(self.bmas("lxd", "up"))
        with open(os.path.join(self.state, "lxd.json")) as f:
            started = json.load(f)["started"]
        lxd = [d["pid"] for d in started if d["name"] == "lxd"]
        if not lxd:
            raise RuntimeError("an LXD already answers on this run's socket: bmas lxd up started none")
        self.lxd_pid = lxd[0]

    def create(self, user):
        t = self.timed(self.bmas("workspace", "create", user))
        self.made.add(user)
        return t

    def instance_state(self, name):
        return json.loads(self.run(["lxc", "query", f"/1.0/instances/{name}/state"]).stdout)

    def down(self):
        """Deletes this run's workspaces (4 at a time), stops what `lxd up` started, removes the
        directory. Returns the seconds the deletions took and how many there were."""
        t0, n = time.monotonic(), len(self.made)
        if os.path.exists(os.path.join(self.state, "lxd.json")):
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda u: self.run(self.bmas("workspace", "delete", u), check=False),
                              sorted(self.made)))
        deleted_s = time.monotonic() - t0
        subprocess.run(self.bmas("lxd", "down"), capture_output=True)
        # lxd down unmounts the pool; anything still mounted below the directory goes too.
        with open("/proc/self/mounts") as f:
            left = [l.split()[1] for l in f if l.split()[1].startswith(self.top + "/")]
        for point in sorted(left, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)
        shutil.rmtree(self.top, ignore_errors=True)
        return deleted_s, n


def ensure_users(users):
    """Makes the accounts that are missing (with their homes); returns how many it made."""
    made = 0
    for u in users:
        if subprocess.run(["id", u], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--create-home", u], check=True)
            made += 1
    return made


def workspace_memory(lxd, user):
    """(memory cgroup usage, of which inactive page cache, monitor PSS), KiB, for a running
    workspace. The cgroup is found from the container's init process; the monitor is the
    host-side `[lxc monitor] LXC_PATH NAME` process LXD keeps for each running container."""
    name = f"ws-{user}"
    pid = lxd.instance_state(name)["pid"]
    cgroup = None
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "memory" in controllers.split(","):
                cgroup = ("/sys/fs/cgroup/memory", path)
            elif controllers == "" and cgroup is None:
                cgroup = ("/sys/fs/cgroup", path)
    base, path = cgroup
    top = os.path.join(base, path.strip("/").split("/")[0])  # lxc.payload.NAME, above init.scope
    if os.path.exists(os.path.join(top, "memory.usage_in_bytes")):
        usage = int(open(os.path.join(top, "memory.usage_in_bytes")).read())
        stat = dict(l.split() for l in open(os.path.join(top, "memory.stat")))
        inactive = int(stat.get("total_inactive_file", 0))
    else:
        usage = int(open(os.path.join(top, "memory.current")).read())
        stat = dict(l.split() for l in open(os.path.join(top, "memory.stat")))
        inactive = int(stat.get("inactive_file", 0))
    monitor = monitor_pid(lxd, name)
    return usage / 1024, inactive / 1024, pss_kb(monitor) if monitor else None


def monitor_pid(lxd, name):
    want = f"[lxc monitor] {lxd.lxd_dir}/containers {name}"
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if cmd == want:
            return int(p)
    return None


def memory_rows(lxd, label, users):
    samples = [workspace_memory(lxd, u) for u in users]
    cg = [s[0] for s in samples]
    ws = [s[0] - s[1] for s in samples]
    mon = [s[2] for s in samples if s[2] is not None]
    both = [s[0] + s[2] for s in samples if s[2] is not None]
    row = lambda what, xs: (f"| {label} | {what} | {len(xs)} | {mib(statistics.mean(xs)):.1f} | "
                            f"{mib(max(xs)):.1f} | {mib(min(xs)):.1f} |")
    return [row("memory cgroup usage", cg), row("of which not inactive page cache", ws),
            row("`[lxc monitor]` PSS", mon), row("**cgroup usage + monitor PSS**", both)], both


# ---- W1. Workspace creation ---------------------------------------------------------------------

def create_sequential(lxd, cold_user, seq_users):
    """Seconds for the first creation after the import, and for each of the next, in a row."""
    return lxd.create(cold_user), [lxd.create(u) for u in seq_users]


def create_parallel(lxd, users):
    """Creates the workspaces all at once, a process each; (seconds each took, seconds in all)."""
    times, failed, lock = {}, {}, threading.Lock()

    def one(u):
        try:
            t = lxd.create(u)
        except RuntimeError as e:
            with lock:
                failed[u] = str(e).partition(" exited ")[2].partition(": ")[2]  # bmas's message
            return
        with lock:
            times[u] = t
    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = time.monotonic() - t0
    if not times:
        raise RuntimeError(f"every parallel creation failed: {next(iter(failed.values()))}")
    return list(times.values()), total, failed


def creation_section(lxd, cold, seq, par, total, failed):
    running = sum(1 for w in json.loads(lxd.run(lxd.bmas("workspace", "list", "--json")).stdout)
                  if w["status"] == "Running")
    per = total / len(par)
    why = next(iter(failed.values()), "")
    rows = ["| how | workspaces | p50 (s) | p90 (s) | max (s) | total (s) | per workspace (s) |",
            "|---|---:|---:|---:|---:|---:|---:|",
            f"| first after the image import (cold) | 1 | {cold:.2f} |  |  | {cold:.2f} | {cold:.2f} |",
            f"| one after another | {len(seq)} | {percentile(seq, .5):.2f} | {percentile(seq, .9):.2f} | "
            f"{max(seq):.2f} | {sum(seq):.1f} | {sum(seq) / len(seq):.2f} |",
            f"| {len(par) + len(failed)} at once | {len(par)} | {percentile(par, .5):.2f} | {percentile(par, .9):.2f} | "
            f"{max(par):.2f} | {total:.1f} | **{per:.2f}** |"]
    ok = percentile(seq, .5) < 2 and per < 2 and not failed  # failures void the parallel figure
    text = (f"Seconds each `bmas workspace create USER` took (the command's whole run: look-ups, create from the "
            f"Debian image, start; it returns once LXD reports the container running), Debian image, btrfs "
            f"(copy-on-write) pool. The first creation after the import is shown apart: LXD unpacks the image into "
            f"the pool once then. Then {len(seq)} one after another, then {len(par)} started at the same moment "
            f"(one process each): \"per workspace\" there is the total over {len(par)}; p50/p90 are each command's "
            f"own time, all of them sharing the 2 cores. One after another, p50 **{percentile(seq, .5):.2f} s**; "
            f"{len(par)} at once, **{total:.1f} s** in all, **{per:.2f} s** per workspace (target: under 2 s each: "
            f"{'met' if ok else 'NOT met'}). After them, `bmas workspace list --json` showed {running} running." +
            (f" **{len(failed)} of the {len(par) + len(failed)} parallel creations FAILED** (left out of the table; "
             f"\"per workspace\" is over the {len(par)} that worked): {why}" if failed else ""))
    shown = ("build/bmas --config CONFIG --state-dir STATE workspace create bmasbench001   # cold\n"
             f"build/bmas --config CONFIG --state-dir STATE workspace create bmasbenchNNN   # x{len(seq)}, one after another\n"
             f"build/bmas --config CONFIG --state-dir STATE workspace create bmasbenchNNN   # x{len(par)}, all at once")
    return "W1. Workspace creation, Debian image", shown, text, rows


# ---- W2. Idle memory per running workspace ------------------------------------------------------

def idle_memory(lxd, users):
    time.sleep(SETTLE_S)
    return memory_rows(lxd, f"{len(users)} idle, {SETTLE_S} s after the last was created", users)


def idle_memory_section(rows, both, scale_rows, scale_both):
    header = ["| workspaces | what | containers | mean (MiB) | max (MiB) | min (MiB) |",
              "|---|---|---:|---:|---:|---:|"]
    worst = max(both + scale_both)
    text = (f"Per running Debian workspace, measured on the host while idle (the default image, `--init minimal`: "
            f"PID 1 is tini over a sleep, nothing else; no network): its memory cgroup's usage (`memory.usage_in_bytes` of `lxc.payload.ws-USER`, cgroup v1 "
            f"here; page cache charged to it included; the row below it leaves out `total_inactive_file`) plus the "
            f"PSS of its host-side monitor process (`[lxc monitor] LXD_DIR/containers ws-USER`, from "
            f"`/proc/PID/smaps_rollup`; it sits in cgroup lxc.monitor.ws-USER, not the container's lxc.payload.ws-USER, so nothing is counted twice). "
            f"Together, mean **{mib(statistics.mean(both)):.1f} MiB**, max {mib(max(both)):.1f} MiB over the "
            f"{len(both)} workspaces created one after another in W1 (target: under 20 MiB: "
            f"{'met' if mib(worst) < 20 else 'NOT met'} by the largest of any row, {mib(worst):.1f} MiB). "
            + (f"The second set of rows measures the {len(scale_both)} workspaces left running in W4, the moment "
               f"W4's figures were taken. " if scale_both else "") + f"lxcfs, shared by all containers, is not counted.")
    shown = ("lxc query /1.0/instances/ws-USER/state   # its init's pid -> /proc/PID/cgroup -> lxc.payload.ws-USER\n"
             "cat /sys/fs/cgroup/memory/lxc.payload.ws-USER/memory.usage_in_bytes   # and memory.stat\n"
             "grep Pss: /proc/MONITOR/smaps_rollup   # MONITOR: cmdline '[lxc monitor] LXD_DIR/containers ws-USER'")
    return "W2. Idle memory per running workspace", shown, text, header + rows + scale_rows


# ---- W3. GPU bind and release latency -----------------------------------------------------------

GPU_JOBS = 10 if QUICK else 30  # W3: jobs of 2 GPUs by one workspace user
PAIRS = 10 if QUICK else 30      # W3: `true` jobs with and without a workspace, alternating
CHECK = ('test -e /dev/nvidia0 && test -e /dev/nvidia1 && echo bench-gpus-present || echo bench-gpus-missing; '
         'ls /dev | grep -c nvidia')


def as_user(lxd, user, *args):
    """`bmas ARGS...` as `user` from their home, as a user runs it (the integration tests' way)."""
    import pwd
    home = pwd.getpwnam(user).pw_dir
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "sh", "-c",
            'cd "$0" && exec "$@"', home, *lxd.bmas(*args)]


def container_nvidia(pid):
    """The nvidia nodes in a container's /dev, seen from the host through its init's root."""
    return [d for d in os.listdir(f"/proc/{pid}/root/dev") if d.startswith("nvidia")]


def start_agent(lxd):
    """`bmas agent` beside the local cluster; returns (process, its metrics URL)."""
    agent = subprocess.Popen(lxd.bmas("agent", "--reconcile-interval", "0.5", "--metrics-port", "0"),
                             env=lxd.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        line = agent.stdout.readline()
        if not line:
            break
        m = re.search(r"listening on (\S+)", line)
        if m:
            threading.Thread(target=agent.stdout.read, daemon=True).start()  # keep its pipe drained
            return agent, m.group(1)
    agent.kill()
    raise RuntimeError("bmas agent did not say it was listening")


def gpu_jobs(lxd, user, plain_user):
    """Slurm up, `bmas agent`, GPU_JOBS jobs of 2 GPUs by `user` (who has a running workspace),
    then PAIRS `true` jobs by `user` and by `plain_user` (no workspace), alternating."""
    import random
    import urllib.request
    lxd.run(lxd.bmas("slurm", "up"))
    agent, url = start_agent(lxd)
    try:
        pid = lxd.instance_state(f"ws-{user}")["pid"]
        if container_nvidia(pid):
            raise RuntimeError(f"ws-{user} holds nvidia devices before any job")
        ids, seen, release, gone_at_return, failed = [], 0, [], 0, []
        for _ in range(GPU_JOBS):
            r = lxd.run(as_user(lxd, user, "run", "--gpus", "2", "--wait", "--", "sh", "-c", CHECK), check=False)
            t0 = time.monotonic()
            while container_nvidia(pid) and time.monotonic() - t0 < 30:
                time.sleep(0.002)
            dt = time.monotonic() - t0
            m = re.search(r"job (\d+) submitted", r.stderr)
            if r.returncode != 0 or not m:
                failed.append(r.stderr.strip()[-200:])
                continue
            ids.append(m.group(1))
            seen += "bench-gpus-present" in r.stdout
            gone_at_return += dt < 0.003
            release.append(dt)
        # Submission to exit of `true`, with a workspace (2 GPUs bound) and without, in pairs
        # alternating which goes first, each after a random pause (Slurm starts jobs at its
        # next scheduling pass, so each job sees a random moment of that cycle).
        times = {"ws": [], "plain": []}
        for i in range(PAIRS):
            order = [("ws", user), ("plain", plain_user)]
            for kind, u in (order if i % 2 == 0 else order[::-1]):
                time.sleep(random.random())
                t0 = time.monotonic()
                r = lxd.run(as_user(lxd, u, "run", "--gpus", "2", "--wait", "--", "true"), check=False)
                if r.returncode == 0:
                    times[kind].append(time.monotonic() - t0)
                else:
                    failed.append(f"{kind}: {r.stderr.strip()[-200:]}")
        metrics = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    finally:
        agent.terminate()
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
        lxd.run(lxd.bmas("slurm", "down"), check=False)
    hooks = open(os.path.join(lxd.state, "slurm", "log", "hooks.log")).read()
    bound = [float(x) for j, x in re.findall(r"^prolog job (\d+) user \S+ node \S+: bound \S+ in \S+ in (\d+) ms$",
                                              hooks, re.M) if j in ids]
    released = [float(x) for j, x in re.findall(r"^epilog job (\d+) user \S+ node \S+: released 2 device\(s\) "
                                                 r"from \S+ in (\d+) ms$", hooks, re.M) if j in ids]
    metric = lambda name: float(re.search(rf"^{name} (\S+)$", metrics, re.M).group(1))
    return dict(ids=ids, seen=seen, release=release, gone_at_return=gone_at_return, bound=bound,
                released=released, times=times, failed=failed, user=user, plain_user=plain_user,
                bind_count=metric("bmas_agent_gpu_bind_seconds_count"),
                bind_sum=metric("bmas_agent_gpu_bind_seconds_sum"),
                release_count=metric("bmas_agent_gpu_release_seconds_count"),
                release_sum=metric("bmas_agent_gpu_release_seconds_sum"))


def gpu_jobs_section(w):
    ms = lambda xs, q: f"{percentile(xs, q) * 1e3:.0f}" if xs else "-"
    n = len(w["ids"])
    rows = ["| what | jobs | p50 (ms) | p99 (ms) | max (ms) |", "|---|---:|---:|---:|---:|",
            f"| bind: prolog start to devices added (hooks.log) | {len(w['bound'])} | "
            f"{ms([x / 1e3 for x in w['bound']], .5)} | {ms([x / 1e3 for x in w['bound']], .99)} | "
            f"{max(w['bound']):.0f} |",
            f"| release: epilog start to devices removed (hooks.log) | {len(w['released'])} | "
            f"{ms([x / 1e3 for x in w['released']], .5)} | {ms([x / 1e3 for x in w['released']], .99)} | "
            f"{max(w['released']):.0f} |",
            f"| release seen from outside: `bmas run --wait` returned to no nvidia node left in the container's /dev | "
            f"{len(w['release'])} | {ms(w['release'], .5)} | {ms(w['release'], .99)} | {max(w['release']) * 1e3:.0f} |",
            "", "| `bmas run --gpus 2 --wait -- true`, submission to exit | jobs | p50 (ms) | p99 (ms) |",
            "|---|---:|---:|---:|",
            f"| user with a workspace (job in the workspace, 2 GPUs bound and released) | {len(w['times']['ws'])} | "
            f"{ms(w['times']['ws'], .5)} | {ms(w['times']['ws'], .99)} |",
            f"| user without a workspace (plain Slurm job) | {len(w['times']['plain'])} | "
            f"{ms(w['times']['plain'], .5)} | {ms(w['times']['plain'], .99)} |"]
    b50 = percentile(w["bound"], .5) / 1e3 if w["bound"] else float("inf")
    b99 = percentile(w["bound"], .99) / 1e3 if w["bound"] else float("inf")
    r99 = max(percentile(w["released"], .99) / 1e3 if w["released"] else float("inf"),
              percentile(w["release"], .99) if w["release"] else float("inf"))
    ratio = (percentile(w["times"]["ws"], .5) / percentile(w["times"]["plain"], .5)
             if w["times"]["ws"] and w["times"]["plain"] else float("nan"))
    ok = b99 < 1 and r99 < 1 and w["seen"] == n and n > 0
    text = (f"{n} jobs of 2 GPUs, one after another, by {w['user']}, whose workspace (W1's first, Debian image) "
            f"is running; the local cluster from `bmas slurm up` (3 nodes x 4 fake GPUs: character devices with the "
            f"NVIDIA major, ENXIO on open) in the same state directory, with its prolog and epilog `bmas slurm hook "
            f"prolog|epilog`, and `bmas agent --reconcile-interval 0.5` beside it. Measured two ways. (a) The hooks' "
            f"own figures, from STATE/slurm/log/hooks.log: prolog start to the devices added in LXD (`bound ... in N "
            f"ms`), epilog start (which first has the agent kill the job's processes) to the devices removed "
            f"(`released 2 device(s) ... in N ms`): bind p50 **{b50 * 1e3:.0f} ms**, p99 **{b99 * 1e3:.0f} ms**; "
            f"release p50 **{percentile(w['released'], .5):.0f} ms**, p99 "
            f"**{percentile(w['released'], .99):.0f} ms** (the agent's /metrics agree: "
            f"`bmas_agent_gpu_bind_seconds` {w['bind_count']:.0f} observations, mean "
            f"{w['bind_sum'] / max(w['bind_count'], 1) * 1e3:.0f} ms; `bmas_agent_gpu_release_seconds` "
            f"{w['release_count']:.0f}, mean {w['release_sum'] / max(w['release_count'], 1) * 1e3:.0f} ms; they "
            f"include the jobs of the second table). (b) From outside. Bind: the job's first instruction is "
            f"`test -e /dev/nvidia0 && test -e /dev/nvidia1`: **{w['seen']} of {n}** jobs saw both GPUs at their "
            f"first instruction (target: all). Release: from the moment `bmas run --wait` returned (it asks "
            f"slurmrestd for the job's state until Slurm reports it ended), the container's /dev was listed from the host every 2 ms (`/proc/INIT_PID/root/dev`, "
            f"INIT_PID from `lxc query /1.0/instances/ws-USER/state`) until no `nvidia*` was left: p50 "
            f"**{percentile(w['release'], .5) * 1e3:.0f} ms**, p99 **{percentile(w['release'], .99) * 1e3:.0f} ms**; "
            f"in {w['gone_at_return']} of {len(w['release'])} jobs they were already gone at the first look (then "
            f"a user who sees the job end never sees its GPUs still plugged in; the hooks' figures above are what "
            f"release costs). "
            f"Targets: bind and release under 1 s, all jobs seeing their GPUs: {'met' if ok else 'NOT met'}. "
            f"Then {len(w['times']['ws'])} + {len(w['times']['plain'])} jobs `true` with 2 GPUs, by {w['user']} "
            f"(in the workspace) and by {w['plain_user']} (no workspace: a plain Slurm job), in pairs alternating "
            f"which goes first, each after a random 0-1 s pause (Slurm starts a job at its next scheduling pass; "
            f"see S1): submission to exit p50, with/without a workspace: **{ratio:.2f}x**." +
            (f" **{len(w['failed'])} jobs FAILED**: {w['failed'][0]}" if w["failed"] else ""))
    shown = ("build/bmas --config CONFIG --state-dir STATE slurm up\n"
             "build/bmas --config CONFIG --state-dir STATE agent --reconcile-interval 0.5 --metrics-port 0\n"
             f"cd ~ && build/bmas --config CONFIG --state-dir STATE run --gpus 2 --wait -- sh -c '{CHECK}'   "
             f"# as {w['user']}, x{n}; then list /proc/INIT_PID/root/dev until no nvidia*\n"
             "grep -E ': (bound|released) ' STATE/slurm/log/hooks.log\n"
             f"cd ~ && build/bmas --config CONFIG --state-dir STATE run --gpus 2 --wait -- true   "
             f"# as {w['user']} and as {w['plain_user']}, alternating")
    return "W3. GPU bind and release latency for jobs in a workspace", shown, text, rows


# ---- W6. MIG slice bind and release ---------------------------------------------------------------

SLICE_PAIRS = 5 if QUICK else 20  # W6: pairs of jobs, one whole GPU and one 1g.10gb slice


def slice_jobs(lxd, user):
    """The local cluster with MIG layouts; SLICE_PAIRS pairs of jobs by `user` (a running
    workspace), one on a whole GPU and one on a 1g.10gb slice, alternating which goes first. The
    hooks' log gives each job's bind (prolog start to devices added) and release (epilog start to
    devices removed)."""
    inventory = os.path.join(ROOT, "examples", "cluster-local-mig.toml")
    lxd.run(lxd.bmas("slurm", "up", "--cluster", inventory))
    agent, _ = start_agent(lxd)
    kinds, failed = {}, []
    try:
        for i in range(SLICE_PAIRS):
            order = [("whole", "1"), ("slice", "1g.10gb")]
            for kind, gpus in (order if i % 2 == 0 else order[::-1]):
                r = lxd.run(as_user(lxd, user, "run", "--gpus", gpus, "--wait", "--", "true"), check=False)
                m = re.search(r"job (\d+) submitted", r.stderr)
                if r.returncode != 0 or not m:
                    failed.append(f"{kind}: {r.stderr.strip()[-200:]}")
                    continue
                kinds[m.group(1)] = kind
    finally:
        agent.terminate()
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
        lxd.run(lxd.bmas("slurm", "down"), check=False)
    hooks = open(os.path.join(lxd.state, "slurm", "log", "hooks.log")).read()
    out = {"whole": {"bind": [], "release": [], "devices": set()},
           "slice": {"bind": [], "release": [], "devices": set()}}
    for job, paths, ms in re.findall(r"^prolog job (\d+) user \S+ node \S+: bound (\S+) in \S+ in (\d+) ms$",
                                     hooks, re.M):
        if job in kinds:
            out[kinds[job]]["bind"].append(float(ms))
            out[kinds[job]]["devices"].add(len(paths.split(",")))
    for job, ms in re.findall(r"^epilog job (\d+) user \S+ node \S+: released \d+ device\(s\) from \S+ in (\d+) ms$",
                              hooks, re.M):
        if job in kinds:
            out[kinds[job]]["release"].append(float(ms))
    for k in out:
        out[k]["devices"] = sorted(out[k]["devices"])
    return dict(jobs=out, failed=failed, user=user)


def slice_jobs_section(w):
    j = w["jobs"]
    ms = lambda xs, q: f"{percentile(xs, q):.0f}" if xs else "-"
    ratio = lambda what: (percentile(j["slice"][what], .5) / percentile(j["whole"][what], .5)
                          if j["slice"][what] and j["whole"][what] else float("nan"))
    rows = ["| job | devices plugged | jobs | bind p50 (ms) | bind p99 (ms) | release p50 (ms) | release p99 (ms) |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for kind, label in (("whole", "`--gpus 1` (a whole GPU)"), ("slice", "`--gpus 1g.10gb` (a MIG slice)")):
        x = j[kind]
        rows.append(f"| {label} | {', '.join(str(d) for d in x['devices']) or '-'} | {len(x['bind'])} | "
                    f"{ms(x['bind'], .5)} | {ms(x['bind'], .99)} | {ms(x['release'], .5)} | "
                    f"{ms(x['release'], .99)} |")
    text = (f"{len(j['whole']['bind'])} jobs on a whole GPU and {len(j['slice']['bind'])} on a 1g.10gb MIG slice, "
            f"by {w['user']}, whose workspace is running, in pairs alternating which goes first; the local cluster "
            f"with MIG layouts (`bmas slurm up --cluster examples/cluster-local-mig.toml`: oss01 whole, oss02-03 with "
            f"GPU 2 split 3g+2g+1g+1g and GPU 3 into seven 1g; fake GPUs and capabilities, ENXIO on open), its prolog "
            f"and epilog, and `bmas agent` beside it. A slice's job gets three devices plugged (the GPU's node and its "
            f"GPU and compute instances' access capabilities), fenced to the job's cgroup, where a whole GPU gets one. "
            f"From the hooks' log: bind is prolog start to the devices added in LXD, release epilog start to the "
            f"devices removed. Slice against whole GPU, p50: bind **{ratio('bind'):.2f}x**, release "
            f"**{ratio('release'):.2f}x**." +
            (f" **{len(w['failed'])} jobs FAILED**: {w['failed'][0]}" if w["failed"] else ""))
    shown = ("build/bmas --config CONFIG --state-dir STATE slurm up --cluster examples/cluster-local-mig.toml\n"
             "build/bmas --config CONFIG --state-dir STATE agent --reconcile-interval 0.5 --metrics-port 0\n"
             f"cd ~ && build/bmas --config CONFIG --state-dir STATE run --gpus 1 --wait -- true         # as {w['user']}\n"
             f"cd ~ && build/bmas --config CONFIG --state-dir STATE run --gpus 1g.10gb --wait -- true   # alternating\n"
             "grep -E ': (bound|released) ' STATE/slurm/log/hooks.log")
    return "W6. MIG slice bind and release, against a whole GPU's", shown, text, rows


# ---- W4. Scale ----------------------------------------------------------------------------------

def scale(lxd, stop_users, define_users, mem_before_kb):
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda u: lxd.run(lxd.bmas("workspace", "stop", u)), stop_users))

    define_failed = []

    def define(u):
        try:
            c = lxd.create(u)
        except RuntimeError as e:
            define_failed.append(f"{u}: {str(e)[-300:]}")
            return None
        lxd.run(lxd.bmas("workspace", "stop", u))
        return c
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        created = [c for c in pool.map(define, define_users) if c is not None]
    setup_s = time.monotonic() - t0
    listed = json.loads(lxd.run(lxd.bmas("workspace", "list", "--json")).stdout)
    running = [w["user"] for w in listed if w["status"] == "Running"]
    time.sleep(SETTLE_S)

    variants = [("`bmas workspace list`", lxd.bmas("workspace", "list")),
                ("`bmas workspace list --json`", lxd.bmas("workspace", "list", "--json")),
                ("`lxc list` (reference)", ["lxc", "list"]),
                ("`lxc list --format csv -c ns` (reference)", ["lxc", "list", "--format", "csv", "-c", "ns"])]
    reps = 10
    times = {name: [] for name, _ in variants}
    for r in range(reps):  # interleaved, so each sees the same moment
        for name, cmd in (variants if r % 2 == 0 else variants[::-1]):
            times[name].append(lxd.timed(cmd))
    mem_now = meminfo_kb("MemAvailable")
    lxd_rss, lxd_pss = status_kb(lxd.lxd_pid, "VmRSS"), pss_kb(lxd.lxd_pid)
    scale_rows, scale_both = memory_rows(lxd, f"{len(running)} running of {len(listed)} (W4)", running)
    total_cg = sum(workspace_memory(lxd, u)[0] for u in running)

    p50 = {name: percentile(ts, .5) for name, ts in times.items()}
    rows = ["| command | runs | p50 (ms) | max (ms) | vs `lxc list` p50 |", "|---|---:|---:|---:|---:|"]
    for name, ts in times.items():
        rows.append(f"| {name} | {len(ts)} | {p50[name] * 1e3:.0f} | {max(ts) * 1e3:.0f} | "
                    f"{p50[name] / p50['`lxc list` (reference)']:.2f}x |")
    delta = mem_before_kb - mem_now
    rows += ["", "| host memory | MiB |", "|---|---:|",
             f"| MemAvailable before `bmas lxd up` | {mib(mem_before_kb):.0f} |",
             f"| MemAvailable now | {mib(mem_now):.0f} |",
             f"| **drop** | **{mib(delta):.0f}** |",
             f"| of which the {len(running)} running workspaces' memory cgroups | {mib(total_cg):.0f} |",
             f"| lxd's own RSS (PSS) | {mib(lxd_rss):.0f} ({mib(lxd_pss):.0f}) |"]
    bmas_p50 = p50["`bmas workspace list`"]
    text = (f"{len(listed)} workspaces defined, {len(running)} of them running (the ones W1 created all at once; the "
            f"rest were created and then stopped with `bmas workspace stop`, 4 at a time: "
            f"{setup_s:.0f} s for {len(define_users)} creations and {len(stop_users) + len(define_users)} stops; "
            f"creation p50 {percentile(created, .5):.2f} s with 4 at once; "
            + (f"{len(define_failed)} of these creations FAILED, the first with: {define_failed[0]}" if define_failed
               else "none of these creations failed")
            + f"). After {SETTLE_S} s idle, each listing "
            f"ran {reps} times, interleaved with the others and alternating their order, so all see the same moment. "
            f"`bmas workspace list` p50 **{bmas_p50 * 1e3:.0f} ms**, **{bmas_p50 / p50['`lxc list` (reference)']:.2f}x** "
            f"`lxc list` ({p50['`lxc list` (reference)'] * 1e3:.0f} ms; it also asks for every running container's "
            f"state, for its network columns). bmas makes one request (`GET /1.0/instances?recursion=1`). Host "
            f"memory: MemAvailable before `bmas lxd up` against now, with {len(running)} running — the machine is "
            f"shared, so other engineers' builds move this figure by hundreds of MiB either way; the cgroup sum "
            f"and lxd's RSS are this run's own.")
    shown = ("build/bmas --config CONFIG --state-dir STATE workspace stop bmasbenchNNN   # W1's one-after-another ones\n"
             f"build/bmas --config CONFIG --state-dir STATE workspace create bmasbenchNNN && "
             f"build/bmas --config CONFIG --state-dir STATE workspace stop bmasbenchNNN   # x{len(define_users)}, 4 at a time\n"
             "build/bmas --config CONFIG --state-dir STATE workspace list\n"
             "build/bmas --config CONFIG --state-dir STATE workspace list --json\n"
             "LXD_DIR=LXD lxc list\n"
             "LXD_DIR=LXD lxc list --format csv -c ns\n"
             "grep MemAvailable /proc/meminfo; grep VmRSS /proc/LXD_PID/status; grep Pss: /proc/LXD_PID/smaps_rollup")
    title = f"W4. Scale: {len(listed)} workspaces defined, {len(running)} running"
    return (title, shown, text, rows), scale_rows, scale_both


NAMES = {1: "Workspace creation, Debian image", 2: "Idle memory per running workspace",
         3: "GPU bind and release latency for jobs in a workspace", 4: "Scale",
         6: "MIG slice bind and release, against a whole GPU's"}


def old_sections():
    """This script's W sections now in RESULTS.md, by number, each with its heading."""
    path = os.path.join(ROOT, "bench", "RESULTS.md")
    old = open(path).read() if os.path.exists(path) else ""
    start = old.find(HEADING + "\n")
    if start < 0:
        return {}
    body = old[start + len(HEADING):]
    nxt = re.search(r"^# ", body, re.M)
    body = body[:nxt.start()] if nxt else body
    parts = re.split(r"^(?=## W\d)", body, flags=re.M)
    return {int(re.match(r"## W(\d)", p).group(1)): p for p in parts if p.startswith("## W")}


def main():
    if os.geteuid() != 0:
        print("lxd_bench: skipped: `bmas lxd up` needs root", file=sys.stderr)
        return
    if shutil.which("lxd") is None and not os.path.exists("/usr/sbin/lxd"):
        print("lxd_bench: skipped: LXD is not installed (bash scripts/install-deps.sh)", file=sys.stderr)
        return
    free_gb = shutil.disk_usage("/tmp").free / 2**30
    if free_gb < MIN_FREE_GB:
        print(f"lxd_bench: skipped: {free_gb:.0f} GB free under /tmp, {MIN_FREE_GB} needed", file=sys.stderr)
        return
    started = time.strftime("%Y-%m-%d %H:%M")
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "src"):
        commit += " with changes to src/ not committed"
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    made_users = ensure_users(USERS[:DEFINED])
    load0 = os.getloadavg()
    mem_before = meminfo_kb("MemAvailable")
    lxd = Lxd()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("lxd_bench: terminated"))
    t0 = time.time()
    cold, seq = USERS[0], USERS[1:1 + SEQUENTIAL]
    par = USERS[1 + SEQUENTIAL:1 + SEQUENTIAL + PARALLEL]
    rest = USERS[1 + SEQUENTIAL + PARALLEL:DEFINED]
    sections, deleted = {}, None
    try:
        up_s = lxd.timed(lxd.bmas("lxd", "up"))
        lxd.up()  # idempotent: reads what the first call started
        image = lxd.run(lxd.bmas("image", "build", "--base", "debian")).stdout.strip()
        print(f"lxd_bench: {image}", file=sys.stderr)
        # Each benchmark builds on the one before (W2 measures W1's workspaces, W4 keeps W1's
        # parallel ones running), so W1 and W2 always run; --only picks what is printed, and
        # leaves W4 out unless named.
        cold_s, seq_s = create_sequential(lxd, cold, seq)
        w2_rows, w2_both = idle_memory(lxd, [cold] + seq)
        if ONLY is None or 3 in ONLY:
            if os.access("/usr/sbin/slurmctld", os.X_OK):
                try:
                    w3 = gpu_jobs(lxd, cold, USERS[DEFINED - 1])
                    print(f"lxd_bench: W3 raw: {json.dumps(w3)}", file=sys.stderr)
                    sections[3] = gpu_jobs_section(w3)
                except Exception as e:  # W1's parallel creations still run
                    print(f"lxd_bench: W3 FAILED: {e!r}", file=sys.stderr)
                    sections[3] = (NAMES[3], "(see bench/lxd_bench.py, gpu_jobs)",
                                   f"**FAILED** this session: {e}", [])
                print(f"lxd_bench: W3 done after {time.time() - t0:.0f} s", file=sys.stderr)
            else:
                print("lxd_bench: W3 skipped: Slurm is not installed", file=sys.stderr)
        if ONLY is None or 6 in ONLY:
            if os.access("/usr/sbin/slurmctld", os.X_OK):
                try:
                    w6 = slice_jobs(lxd, cold)
                    print(f"lxd_bench: W6 raw: {json.dumps(w6)}", file=sys.stderr)
                    sections[6] = slice_jobs_section(w6)
                except Exception as e:
                    print(f"lxd_bench: W6 FAILED: {e!r}", file=sys.stderr)
                    sections[6] = (NAMES[6], "(see bench/lxd_bench.py, slice_jobs)",
                                   f"**FAILED** this session: {e}", [])
                print(f"lxd_bench: W6 done after {time.time() - t0:.0f} s", file=sys.stderr)
            else:
                print("lxd_bench: W6 skipped: Slurm is not installed", file=sys.stderr)
        par_s, par_total, par_failed = create_parallel(lxd, par)
        sections[1] = creation_section(lxd, cold_s, seq_s, par_s, par_total, par_failed)
        print(f"lxd_bench: W1 and W2 done after {time.time() - t0:.0f} s", file=sys.stderr)
        scale_rows, scale_both = [], []
        if ONLY is None or 4 in ONLY:
            try:
                sections[4], scale_rows, scale_both = scale(lxd, [cold] + seq, rest, mem_before)
                print(f"lxd_bench: W4 done after {time.time() - t0:.0f} s", file=sys.stderr)
            except Exception as e:  # W1-W3 are still written
                print(f"lxd_bench: W4 FAILED: {e!r}", file=sys.stderr)
                sections[4] = (NAMES[4], "(see bench/lxd_bench.py, scale)", f"**FAILED** this session: {e}", [])
        sections[2] = idle_memory_section(w2_rows, w2_both, scale_rows, scale_both)
    finally:
        deleted = lxd.down()
    elapsed = time.time() - t0
    load1 = os.getloadavg()
    text = (f"{HEADING}\n\nWritten by `python3 bench/lxd_bench.py` (or `make bench`, as root) on {started} in "
            f"{elapsed:.0f} s, at commit {commit}; {os.cpu_count()} cores, {cpu}, Linux {platform.release()}; load "
            f"average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end. Nothing here is typed in by hand. The "
            f"script starts its own LXD: `build/bmas --config CONFIG --state-dir STATE lxd up`, CONFIG setting "
            f"`[lxd] dir = LXD`, `storage_driver = \"btrfs\"` and `pool_size = \"{POOL_SIZE}\"` (a sparse loop "
            f"file), all in a temporary directory ({up_s:.1f} s); then `bmas image build --base debian` "
            f"(debootstrap minbase from apt's mirror: `{image}`). At the end it deleted its {deleted[1]} workspaces "
            f"with `bmas workspace delete`, 4 at a time ({deleted[0]:.0f} s), ran `bmas lxd down` and removed the "
            f"directory. Workspaces belong to bmasbench001..bmasbench{DEFINED:03d} (`useradd --create-home`; "
            f"{made_users} made by this run, kept for the next). lxcfs is shared with the rest of the machine. bmas "
            f"runs from a copy of build/bmas taken at the start. The machine is shared and noisy."
            + (f" This run measured W{',W'.join(str(n) for n in sorted(sections))} only (`--only`)." if ONLY else "")
            + "\n\n")
    kept = old_sections()
    for number in (1, 2, 3, 4, 6):
        if number in sections:
            title, command, body, table = sections[number]
            text += f"## {title}\n\n```\n{command}\n```\n\n{body}\n\n" + "\n".join(table) + "\n\n"
        elif number in kept and "not measured this session" not in kept[number]:
            text += kept[number].rstrip() + "\n\n"  # measured by an earlier run: kept as it was
        else:
            text += f"## W{number}. {NAMES[number]}\n\nNot measured this session.\n\n"
    run.write_section(HEADING, text)
    print(text)


if __name__ == "__main__":
    main()
