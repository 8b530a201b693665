#!/usr/bin/env python3
"""Runs bmas's Slurm benchmarks and writes them into bench/RESULTS.md under "# Slurm benchmarks".

Usage: bench/slurm_bench.py [BUILD_DIR] [--quick] [--only 1,2,3,4]

Starts its own local cluster (`bmas slurm up`: 3 nodes x 4 fake GPUs) in a temporary state
directory and stops it at the end, whatever happens. Every figure is set against plain Slurm
(sbatch, scontrol) measured in the same run, beside the command that produced it. --quick
runs fewer jobs (for trying the script out); --only runs the listed benchmarks and prints them
without touching RESULTS.md. Needs root and Slurm (`bash scripts/install-deps.sh`); without
them it says why and exits 0, so `make bench` still runs the other benchmarks.
"""
import os
import platform
import random
import re
import selectors
import shlex
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

import run  # noqa: E402  bench/run.py: ROOT, BMAS, rel
ROOT, BMAS = run.ROOT, run.BMAS
HEADING = "# Slurm benchmarks"
# Research mode is given to one user and probed with another; both accounts exist on any Debian.
RESEARCH_USER, OTHER_USER = "daemon", "nobody"


def percentile(xs, q):
    """Nearest rank: the value that q of the samples do not exceed."""
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(q * len(xs) + 0.999999) - 1))]


def busy_cpu_seconds():
    """CPU time the whole machine has spent busy since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


class CpuAccount:
    """CPU time of everything this run starts, in a cpuacct cgroup (v1) of its own.

    Slurm's daemons, slurmstepd and the jobs are not this script's waited-for children (they
    are reparented to PID 1), so os.times() misses them. Every process inherits its parent's
    cgroup, and Slurm moves job processes in the freezer, devices and memory controllers only,
    so once the script is in this cgroup, cpuacct.usage counts all of it. Without cgroup v1
    cpuacct the figure is left out (None)."""

    BASE = "/sys/fs/cgroup/cpuacct"

    def __init__(self):
        self.path = os.path.join(self.BASE, f"bmas-slurm-bench-{os.getpid()}")
        try:
            os.mkdir(self.path)
            with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            self.path = None

    def seconds(self):
        if self.path is None:
            return None
        with open(os.path.join(self.path, "cpuacct.usage")) as f:
            return int(f.read()) / 1e9

    def close(self):
        if self.path is None:
            return
        with open(os.path.join(self.BASE, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        for _ in range(50):  # the last job processes may take a moment to exit
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)


class Cluster:
    """A local Slurm from `bmas slurm up` in a temporary state directory, and a job directory.

    The state directory's parents must be traversable by munge, nobody and the jobs' users, so
    it is 755 (mkdtemp makes 700); jobs of other users write into the work directory (1777).
    bmas is run from a copy, so that a rebuild of build/bmas during the run changes nothing."""

    def __init__(self):
        self.top = tempfile.mkdtemp(prefix="bmas-slurm-bench-", dir="/tmp")
        os.chmod(self.top, 0o755)
        self.state = os.path.join(self.top, "state")
        self.work = os.path.join(self.top, "work")
        os.mkdir(self.work)
        os.chmod(self.work, 0o1777)
        self.bmas_path = os.path.join(self.top, "bmas")
        shutil.copy2(BMAS, self.bmas_path)
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.state, "slurm", "etc", "slurm.conf"))

    def up(self):
        r = subprocess.run(self.bmas("slurm", "up"), capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"bmas slurm up failed: {r.stderr.strip()}")

    def bmas(self, *args):
        return [self.bmas_path, "--state-dir", self.state, *args]

    def run(self, cmd, check=True, user=None):
        """A command in the work directory, with SLURM_CONF set; `user`: as that Unix user."""
        if user:
            cmd = ["runuser", "-u", user, "--", "env", f"SLURM_CONF={self.env['SLURM_CONF']}", *cmd]
        r = subprocess.run(cmd, cwd=self.work, env=self.env, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
        return r

    def job(self, job_id):
        """`scontrol -o show job ID` as a dict."""
        out = self.run(["scontrol", "-o", "show", "job", str(job_id)]).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def cancel_all(self):
        """Cancels every job, then waits until the queue is empty and every node idle again."""
        ids = self.run(["squeue", "-h", "-o", "%i"]).stdout.split()
        for i in range(0, len(ids), 200):
            self.run(["scancel", *ids[i:i + 200]], check=False)
        deadline = time.time() + 180
        while (self.run(["squeue", "-h", "-o", "%i"]).stdout.strip()
               or set(self.run(["sinfo", "-h", "-N", "-o", "%t"]).stdout.split()) - {"idle"}):
            if time.time() > deadline:
                raise RuntimeError("the cluster did not drain: " + self.run(["sinfo", "-N"]).stdout)
            time.sleep(0.2)

    def down(self):
        """Stops what `slurm up` started (it records the daemons; with none it does nothing)."""
        subprocess.run(self.bmas("slurm", "down"), capture_output=True)
        shutil.rmtree(self.top, ignore_errors=True)


def poll(what, predicate, timeout=60, every=0.02):
    """predicate()'s first true value, trying every `every` seconds for at most `timeout`."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(every)


def read_until_line(proc, deadline, want_stderr=None):
    """Reads a process's stdout and stderr as they come; returns (time of stdout's first line,
    its text, when stderr first contained want_stderr, stderr so far)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    out, err, t_err = b"", b"", None
    while b"\n" not in out:
        left = deadline - time.time()
        if left <= 0:
            proc.kill()
            raise RuntimeError(f"{proc.args}: no output in time; stderr: {err.decode()}")
        for key, _ in sel.select(timeout=left):
            chunk = os.read(key.fileobj.fileno(), 4096)
            if not chunk:
                sel.unregister(key.fileobj)
                if not sel.get_map():
                    raise RuntimeError(f"{proc.args} ended without output: {err.decode()}")
            elif key.data == "out":
                out += chunk
            else:
                err += chunk
                if t_err is None and want_stderr and want_stderr.encode() in err:
                    t_err = time.time()
    t_out = time.time()
    sel.close()
    return t_out, out.decode().split("\n", 1)[0], t_err, err.decode()


def bmas_first_line(c, cmd, timeout=120):
    """Starts `bmas run --wait ...`; returns (seconds to its stdout's first line, seconds until it
    had printed "submitted" on stderr, that is until its submission returned, the job id, the line)."""
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=c.work, env=c.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t_line, line, t_sub, err = read_until_line(proc, t0 + timeout, "submitted")
    _, rest = proc.communicate(timeout=timeout)
    err += rest.decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {err}")
    return t_line - t0, (t_sub or t_line) - t0, re.search(r"job (\d+) submitted", err).group(1), line


def sbatch_first_line(c, args, timeout=120):
    """`sbatch --parsable ARGS`, then polls its output file every 5 ms until it holds a line;
    returns (seconds to that line, seconds sbatch took, the job id, the line)."""
    t0 = time.time()
    job_id = c.run(["sbatch", "--parsable", *args]).stdout.strip().split(";")[0]
    t_sub = time.time()
    path = os.path.join(c.work, f"slurm-{job_id}.out")
    while True:
        try:
            with open(path) as f:
                text = f.read()
            if "\n" in text:
                return time.time() - t0, t_sub - t0, job_id, text.split("\n", 1)[0]
        except FileNotFoundError:
            pass
        if time.time() - t0 > timeout:
            raise RuntimeError(f"sbatch {' '.join(args)}: job {job_id} printed nothing in {timeout} s")
        time.sleep(0.005)


def together(*fns):
    """Runs the functions at the same time, one thread each; returns their results in order."""
    results, errors = [None] * len(fns), []

    def call(i, fn):
        try:
            results[i] = fn()
        except Exception as e:  # noqa: BLE001  re-raised below, in the caller's thread
            errors.append(e)
    threads = [threading.Thread(target=call, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def ctld_log(c):
    """slurmctld's log as (seconds since the epoch, message), to the millisecond."""
    entries = []
    with open(os.path.join(c.state, "slurm", "log", "slurmctld.log")) as f:
        for line in f:
            m = re.match(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?\] (.*)", line)
            if m:
                entries.append((time.mktime(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) + float(m.group(2) or 0),
                                m.group(3)))
    return entries


def job_starts(log):
    """{job id: [(time, which scheduler started it)]}: `sched: Allocate` is the main scheduler's
    pass, which events such as a job ending trigger; `sched/backfill` a backfill pass (every
    bf_interval)."""
    starts = {}
    for t, text in log:
        m = re.match(r"(sched: Allocate|sched/backfill: _start_job: Started) JobId=(\d+)", text)
        if m:
            starts.setdefault(m.group(2), []).append((t, "backfill" if "backfill" in m.group(1) else "main scheduler"))
    return starts


def wait_empty_queue(c):
    poll("an empty queue", lambda: not c.run(["squeue", "-h", "-o", "%i"]).stdout.strip(), every=0.01)


# ---- 1. bmas run to first line of output -------------------------------------------------------

def first_line(c):
    n = 10 if QUICK else 100
    bmas_cmd = c.bmas("run", "--wait", "--", "echo", "hi")
    pairs = []
    # Slurm does not start a batch job the moment it is submitted: the next scheduling pass does,
    # a backfill pass (every second here) unless something else runs the main scheduler first
    # (a job ending, for one). How long a job waits thus depends on when it was submitted, and
    # one command submitted right after another's job ended would be favoured. So each pair is
    # submitted at a random moment on an empty queue, and both commands at once, so that both
    # jobs wait for the same pass: the difference within a pair is bmas's own cost. The first
    # pair warms up; which command starts first alternates.
    rng = random.Random(1)
    for i in range(n + 1):
        wait_empty_queue(c)
        time.sleep(rng.uniform(0, 1))
        bmas = lambda: bmas_first_line(c, bmas_cmd)
        sbatch = lambda: sbatch_first_line(c, ["--wrap", "echo hi"])
        b, sb = together(bmas, sbatch) if i % 2 else together(sbatch, bmas)[::-1]
        if b[3] != "hi" or sb[3] != "hi":
            raise RuntimeError(f"first lines {b[3]!r} and {sb[3]!r}, not 'hi'")
        if i > 0:
            pairs.append((b, sb))
    wait_empty_queue(c)
    starts = job_starts(ctld_log(c))
    # Where bmas's time goes: its process start alone (a ~100 MB binary), timed the same way.
    process = []
    for _ in range(n):
        t0 = time.time()
        c.run(c.bmas("version"))
        process.append(time.time() - t0)

    ms = lambda xs, q: percentile(xs, q) * 1e3
    rows = ["| path | jobs | first line p50 (ms) | p99 (ms) | submission returned p50 (ms) | "
            "submission to first line p50 (ms) | started by |", "|---|---:|---:|---:|---:|---:|---|"]
    for k, name in ((0, "`bmas run --wait`"), (1, "`sbatch` + polling its output file")):
        runs = [p[k] for p in pairs]
        first, sub = [r[0] for r in runs], [r[1] for r in runs]
        by = [starts.get(r[2], [(0, "?")])[0][1] for r in runs]
        rows.append(f"| {name} | {len(runs)} | {ms(first, .5):.0f} | {ms(first, .99):.0f} | {ms(sub, .5):.0f} | "
                    f"{ms([f - s for f, s in zip(first, sub)], .5):.0f} | "
                    + ", ".join(f"{w} {by.count(w)}" for w in sorted(set(by))) + " |")
    rows.append(f"| `bmas version` (process start alone) | {len(process)} |  |  | {ms(process, .5):.0f} |  |  |")
    b_first, s_first = [p[0][0] for p in pairs], [p[1][0] for p in pairs]
    diff = [b - s for b, s in zip(b_first, s_first)]
    text = (f"{n} pairs, after one warm-up pair. Clock: from starting the command to the first line `hi`: on "
            "`bmas run --wait`'s stdout, or in sbatch's `slurm-ID.out`, polled every 5 ms. Slurm starts a new batch "
            "job at its next scheduling pass, not on submission (\"started by\", from slurmctld's log: a backfill pass, "
            "every second here, or the main scheduler when some event runs it), so a job waits 0-1 s for that, "
            "depending on when it was sent. Each pair is therefore submitted at a random moment on an empty queue (a "
            "random 0-1 s pause), bmas and sbatch at the same time, so both jobs wait for the same pass. "
            f"bmas p50: **{ms(b_first, .5):.0f} ms** (target: under 500 ms); bmas/sbatch p50: "
            f"**{percentile(b_first, .5) / percentile(s_first, .5):.2f}x** ({ms(s_first, .5):.0f} ms for sbatch). bmas's own "
            f"cost, bmas minus sbatch within a pair: p50 **{ms(diff, .5):+.0f} ms**, p99 {ms(diff, .99):+.0f} ms. "
            "\"Submission returned\": for bmas, when it printed `submitted` on stderr (its REST submission through "
            "slurmrestd had returned); for sbatch, when sbatch exited. After that, bmas `--wait` asks slurmrestd for "
            "the job's state every 20 ms for its first 2 s, then every 100 ms, and reads the output "
            "file once the job has started.")
    shown = ("build/bmas --state-dir STATE run --wait -- echo hi\n"
             "sbatch --parsable --wrap 'echo hi'   # at the same time; then poll WORK/slurm-ID.out\n"
             "build/bmas --state-dir STATE version")
    return "S1. `bmas run` to the first line of the job's output, vs plain sbatch", shown, text, rows


# ---- 2. 1,000 submissions in a row -------------------------------------------------------------

def submissions(c):
    n = 100 if QUICK else 1000
    rounds = 2
    commands = {"bmas run": c.bmas("run", "--", "true"), "sbatch": ["sbatch", "--wrap", "true"]}
    # The lab partition is DOWN while this runs: jobs are accepted and stay PENDING
    # (PartitionDown), so what is timed is submission alone, not 2,000 `true` jobs starting on
    # the same 2 cores at rates that differ between the two.
    c.run(["scontrol", "update", "PartitionName=lab", "State=DOWN"])
    results = {name: [] for name in commands}
    try:
        for r in range(rounds):
            for name in (list(commands) if r % 2 == 0 else list(commands)[::-1]):
                # The loop is the shell's, as shown in RESULTS.md.
                loop = f"for i in $(seq {n}); do {shlex.join(commands[name])} >/dev/null || exit 1; done"
                t0 = time.time()
                c.run(["bash", "-c", loop])
                results[name].append(n / (time.time() - t0))
                queued = len(c.run(["squeue", "-h", "-o", "%i"]).stdout.split())
                if queued != n:
                    raise RuntimeError(f"{name}: {queued} jobs queued after {n} submissions")
                c.cancel_all()
    finally:
        c.run(["scontrol", "update", "PartitionName=lab", "State=UP"])
    rate = {name: sum(rs) / len(rs) for name, rs in results.items()}
    rows = ["| command | " + " | ".join(f"round {i + 1} (submissions/s)" for i in range(rounds)) + " | mean | ms each |",
            "|---|" + "---:|" * (rounds + 2)]
    for name, rs in results.items():
        rows.append(f"| `{name}` | " + " | ".join(f"{x:.0f}" for x in rs) + f" | {rate[name]:.0f} | {1e3 / rate[name]:.1f} |")
    text = (f"{n:,} submissions in a row, one process after another, {rounds} rounds alternating which goes first; "
            "after each series the jobs are counted in `squeue` and cancelled, and the nodes left to drain. "
            "The lab partition is set DOWN for this benchmark (`scontrol update PartitionName=lab State=DOWN`): "
            "jobs are accepted and stay pending, so only submission is timed. "
            f"bmas/sbatch submissions per second: **{rate['bmas run'] / rate['sbatch']:.2f}x** "
            f"({rate['bmas run']:.0f} against {rate['sbatch']:.0f}/s). sbatch talks to slurmctld directly (munge); "
            "bmas submits over HTTP to slurmrestd (JWT), which talks to slurmctld.")
    shown = (f"for i in $(seq {n}); do build/bmas --state-dir STATE run -- true; done\n"
             f"for i in $(seq {n}); do sbatch --wrap true; done")
    return f"S2. {n:,} submissions in a row: bmas vs sbatch", shown, text, rows


# ---- 3. Mode switch lab -> research -> lab -----------------------------------------------------

def bmas_has_mode(c):
    """`bmas mode` arrived after these benchmarks were written; its row fills in once it exists."""
    return "Usage: bmas mode" in c.run(c.bmas("mode", "--help"), check=False).stdout


def reservation_of(c, user):
    """(name, nodes) of an ACTIVE reservation whose users include `user`, else None."""
    for line in c.run(["scontrol", "-o", "show", "reservation"]).stdout.splitlines():
        f = dict(re.findall(r"(\w+)=(\S*)", line))
        if f.get("State") == "ACTIVE" and user in f.get("Users", "").split(","):
            return f["ReservationName"], f["Nodes"]
    return None


def mode_switch(c):
    reps = 2 if QUICK else 5
    variants = [("`scontrol` by hand",
                 ["scontrol", "create", "reservation", "ReservationName=bench_research", f"Users={RESEARCH_USER}",
                  "NodeCnt=1", "StartTime=now", "Duration=infinite"],
                 ["scontrol", "delete", "ReservationName=bench_research"])]
    has_mode = bmas_has_mode(c)
    if has_mode:
        variants.append(("`bmas mode`", c.bmas("mode", "research", "--users", RESEARCH_USER, "--count", "1"),
                         c.bmas("mode", "lab")))
    # The other user's probe job: srun gives up after a second when it cannot start at once.
    # probe_s: how long the last probe took, its own share of "other user's job ran there".
    probe_s = []

    def probe(node):
        t = time.time()
        r = c.run(["srun", "--immediate=1", "-w", node, "true"], check=False, user=OTHER_USER)
        probe_s.append(time.time() - t)
        return r
    results = {}
    for r in range(reps):
        for name, research, lab in (variants if r % 2 == 0 else variants[::-1]):
            c.cancel_all()
            t0 = time.time()
            c.run(research)
            t_ret = time.time()
            _, node = poll("the reservation", lambda: reservation_of(c, RESEARCH_USER))
            t_hold = time.time()
            refused = probe(node).returncode != 0
            t1 = time.time()
            c.run(lab)
            t_ret_lab = time.time()
            poll("the reservation to go", lambda: reservation_of(c, RESEARCH_USER) is None)
            t_gone = time.time()
            poll(f"{OTHER_USER}'s job on {node}", lambda: probe(node).returncode == 0, every=0)
            t_back = time.time()
            results.setdefault(name, []).append(
                (t_ret - t0, t_hold - t0, refused, t_ret_lab - t1, t_gone - t1, t_back - t1, probe_s[-1]))
    c.cancel_all()
    rows = ["| how | research: command returned (s) | reservation ACTIVE (s) | other user refused there | "
            "lab: command returned (s) | reservation gone (s) | other user's job ran there (s) | of which its srun (s) |",
            "|---|---:|---:|---|---:|---:|---:|---:|"]
    med = statistics.median
    for name, rs in results.items():
        cols = list(zip(*rs))
        rows.append(f"| {name} | {med(cols[0]):.3f} | {med(cols[1]):.3f} | {sum(cols[2])} of {len(rs)} | "
                    f"{med(cols[3]):.3f} | {med(cols[4]):.3f} | {med(cols[5]):.3f} | {med(cols[6]):.3f} |")
    if not has_mode:
        rows.append("| `bmas mode` | TODO: not in this build of bmas; the row fills in when `bmas mode --help` works |"
                    "  |  |  |  |  |  |")
    worst = max(max(x[1], x[5]) for rs in results.values() for x in rs)
    text = (f"Lab -> research -> lab, {reps} times each, alternating; medians. Research gives user `{RESEARCH_USER}` "
            f"one node; seconds from invoking the command until `scontrol -o show reservation` shows the reservation "
            f"ACTIVE with that user (polled every 20 ms), and from invoking the way back until it is gone. Once it is "
            f"active, user `{OTHER_USER}` tries a job on its node (`srun --immediate=1 -w NODE true`, run as that "
            f"user): it must be refused. After lab mode, the same probe repeats until it runs; the last column is "
            f"that srun's own time. Slowest switch of any run: **{worst:.2f} s** (target: seconds, "
            f"not minutes). The cluster is idle for every switch.")
    shown = "\n".join([" ".join(variants[0][1]) + "   # research, by hand",
                       " ".join(variants[0][2]) + "   # lab, by hand",
                       f"build/bmas --state-dir STATE mode research --users {RESEARCH_USER} --count 1",
                       "build/bmas --state-dir STATE mode lab",
                       f"scontrol -o show reservation   # polled",
                       f"runuser -u {OTHER_USER} -- srun --immediate=1 -w NODE true   # the other user's probe"])
    return "S3. Mode switch: lab -> research -> lab", shown, text, rows


# ---- 4. Preemption -----------------------------------------------------------------------------

def preemptions(c, inf):
    """Each preemption of job `inf` from slurmctld's log: when the preempting (training) job was
    submitted, when the scheduler preempted `inf` for it, when `inf`'s requeue completed (it is
    torn down on every node), when the training job was started, and when `inf` was started
    again and by which scheduler."""
    log = ctld_log(c)
    starts = job_starts(log)
    submitted = {m.group(1): t for t, text in log
                 if (m := re.match(r"_slurm_rpc_submit_batch_job: JobId=(\d+)", text))}
    events = []
    for t, text in log:
        if m := re.match(rf"preempted JobId={inf} .* for JobId=(\d+)", text):
            events.append({"training": m.group(1), "preempted": t})
        elif text.startswith(f"Requeuing JobId={inf}") and events and "requeued" not in events[-1]:
            events[-1]["requeued"] = t
    for e in events:
        e["submitted"] = submitted[e["training"]]
        e["training_started"] = starts[e["training"]][0][0]
        e["restarted"], e["by"] = next(x for x in starts[inf] if x[0] >= e["requeued"])
    return events


def preemption(c):
    reps = 2 if QUICK else 5

    def bmas_inference():
        return c.run(c.bmas("run", "--partition", "inference", "--gpus", "12", "--", "sleep", "300")).stdout.strip()

    def bmas_training():
        t, _, _, line = bmas_first_line(c, c.bmas("run", "--partition", "training", "--gpus", "4", "--wait", "--", "echo", "go"))
        return t, line

    # bmas runs a job of several nodes as a step on each (srun in its batch script); so does this
    # baseline, so that both inference jobs are torn down the same way when preempted.
    def sbatch_inference():
        return c.run(["sbatch", "--parsable", "--partition", "inference", "--nodes", "3", "--gpus-per-node", "4",
                      "--wrap", "srun --ntasks-per-node=1 sleep 300"]).stdout.strip().split(";")[0]

    def sbatch_training():
        t, _, _, line = sbatch_first_line(c, ["--partition", "training", "--nodes", "1", "--gpus-per-node", "4",
                                              "--wrap", "echo go"])
        return t, line

    variants = [("bmas run", bmas_inference, bmas_training), ("sbatch", sbatch_inference, sbatch_training)]
    rng = random.Random(4)
    results = {}
    for name, inference, training in variants:
        c.cancel_all()
        inf = inference()
        runs = []
        for _ in range(reps):
            poll("the inference job to run", lambda: c.job(inf).get("JobState") == "RUNNING", timeout=300, every=0.1)
            time.sleep(rng.uniform(0, 1))  # a random moment, as in S1
            t_first, line = training()
            if line != "go":
                raise RuntimeError(f"{name}: training printed {line!r}")
            # Requeued, the inference job is PENDING (Reason=BeginTime) until its EligibleTime,
            # then until a scheduling pass starts it; the next repetition waits for that.
            job = poll("the requeue", lambda: (lambda j: j.get("JobState") == "PENDING" and j)(c.job(inf)), every=0.05)
            eligible = time.mktime(time.strptime(job["EligibleTime"], "%Y-%m-%dT%H:%M:%S"))
            poll("the inference job to come back", lambda: c.job(inf).get("JobState") == "RUNNING", timeout=300, every=0.1)
            runs.append((t_first, eligible))
        events = preemptions(c, inf)
        if len(events) != reps:
            raise RuntimeError(f"{name}: {len(events)} preemptions in slurmctld's log, not {reps}")
        results[name] = [dict(e, first_line=t, eligible=elig) for (t, elig), e in zip(runs, events)]
        c.cancel_all()
    rows = ["| submitted with | training: submission to first line p50 (s) | max (s) | of which: waiting for a "
            "scheduling pass (s) | inference teardown (s) | requeue to training start (s) | inference: requeue to eligible (s) | "
            "requeue to running again, each time (s) | restarted by |",
            "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    p50 = lambda es, f: percentile([f(e) for e in es], .5)
    for name, es in results.items():
        by = [e["by"] for e in es]
        again = ", ".join(f"{e['restarted'] - e['requeued']:.1f}" for e in es)
        rows.append(f"| `{name}` | {p50(es, lambda e: e['first_line']):.2f} | {max(e['first_line'] for e in es):.2f} | "
                    f"{p50(es, lambda e: e['preempted'] - e['submitted']):.2f} | {p50(es, lambda e: e['requeued'] - e['preempted']):.2f} | "
                    f"{p50(es, lambda e: e['training_started'] - e['requeued']):.2f} | {p50(es, lambda e: e['eligible'] - e['requeued']):.0f} | "
                    f"{again} | "
                    + ", ".join(f"{w} {by.count(w)}x" for w in sorted(set(by))) + " |")
    p_b = p50(results["bmas run"], lambda e: e["first_line"])
    p_s = p50(results["sbatch"], lambda e: e["first_line"])
    params = re.search(r"^SchedulerParameters=(\S*)", open(c.env["SLURM_CONF"]).read(), re.M)
    text = (f"An inference job holds all 12 GPUs (3 nodes x 4, one task per node); a training job asks for 4 and "
            f"preempts it. {reps} preemptions for each way of submitting, one after another; each waits until the "
            f"requeued inference job runs again. Training submission to its first output line, p50: **{p_b:.2f} s** "
            f"with bmas, {p_s:.2f} s with sbatch (**{p_b / p_s:.2f}x**). Where that time goes, from slurmctld's log "
            f"(p50, seconds): from the training job's submission to the pass that preempts the inference job; the "
            f"inference job's teardown (`preempted JobId=... has been requeued` to `Requeuing JobId=...`: every node "
            f"has ended it); then to the training job's start. The requeued inference job is eligible again "
            f"`cred_expire` + 1 s after its requeue (EligibleTime from `scontrol show job`, whole seconds; the local "
            f"cluster sets cred_expire=10) and then waits for a scheduling pass to start it: \"restarted by\" says "
            f"which (`sched: Allocate`, the main scheduler, runs on events and every `sched_interval`, 60 s unless "
            f"set; `sched/backfill` every `bf_interval`). This cluster's "
            f"`SchedulerParameters={params.group(1) if params else ''}`.")
    shown = ("build/bmas --state-dir STATE run --partition inference --gpus 12 -- sleep 300\n"
             "build/bmas --state-dir STATE run --partition training --gpus 4 --wait -- echo go\n"
             "sbatch --parsable --partition inference --nodes 3 --gpus-per-node 4 --wrap 'srun --ntasks-per-node=1 sleep 300'\n"
             "sbatch --parsable --partition training --nodes 1 --gpus-per-node 4 --wrap 'echo go'   # then poll WORK/slurm-ID.out\n"
             "scontrol -o show job ID   # the inference job's JobState and EligibleTime, polled every 100 ms\n"
             "STATE/slurm/log/slurmctld.log   # submissions, preemptions, requeues and starts, to the millisecond")
    return "S4. Preemption: training submission to training start while inference holds every GPU", shown, text, rows


def main():
    if os.geteuid() != 0:
        print("slurm_bench: skipped: `bmas slurm up` needs root", file=sys.stderr)
        return
    os.environ["PATH"] += ":/usr/sbin"
    if shutil.which("slurmctld") is None:
        print("slurm_bench: skipped: Slurm is not installed (bash scripts/install-deps.sh)", file=sys.stderr)
        return
    started = time.strftime("%Y-%m-%d %H:%M")
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "src"):
        commit += " with changes to src/ not committed"
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    load0 = os.getloadavg()
    account = CpuAccount()
    busy0, own0, t0 = busy_cpu_seconds(), account.seconds(), time.time()
    benchmarks = [(1, first_line), (2, submissions), (3, mode_switch), (4, preemption)]
    sections, cluster = [], Cluster()
    # SIGTERM too unwinds through the `finally` below, which stops the cluster.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("slurm_bench: terminated"))
    try:
        cluster.up()
        for number, bench in benchmarks:
            if ONLY is None or number in ONLY:
                sections.append(bench(cluster))
                print(f"slurm_bench: {sections[-1][0]} done after {time.time() - t0:.0f} s", file=sys.stderr)
    finally:
        cluster.down()
        elapsed = time.time() - t0
        busy = busy_cpu_seconds() - busy0
        own = account.seconds() - own0 if own0 is not None else None
        account.close()

    load1 = os.getloadavg()
    if own is None:
        cpu_note = f"the machine was {busy / elapsed:.2f} cores busy on average (this run's own share unknown: no cgroup v1 cpuacct)"
    else:
        cpu_note = (f"this run (the script, bmas, the cluster's daemons and its jobs, counted in a cpuacct cgroup of its own) "
                    f"kept {own / elapsed:.2f} cores busy on average, other processes {max(busy - own, 0) / elapsed:.2f} cores")
    text = (f"{HEADING}\n\nWritten by `python3 bench/slurm_bench.py` (or `make bench`, as root) on {started} in {elapsed:.0f} s, "
            f"at commit {commit}; {os.cpu_count()} cores, {cpu}, Linux {platform.release()}; {cpu_note}; load average "
            f"{load0[0]:.2f} at the start, {load1[0]:.2f} at the end. Nothing here is typed in by hand. The script starts "
            "its own local cluster (`build/bmas --state-dir STATE slurm up`: 3 nodes x 4 fake GPUs, stopped with "
            "`slurm down` at the end); STATE is that temporary state directory, WORK the directory (mode 1777) every job is "
            "submitted from, and Slurm's own commands run with `SLURM_CONF=STATE/slurm/etc/slurm.conf`. bmas runs from a "
            "copy of build/bmas taken at the start. The machine is shared and noisy: compare the ratios.\n\n")
    for title, command, body, table in sections:
        text += f"## {title}\n\n```\n{command}\n```\n\n{body}\n\n" + "\n".join(table) + "\n\n"
    if ONLY is None:
        run.write_section(HEADING, text)
    print(text)


if __name__ == "__main__":
    main()
