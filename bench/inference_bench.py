#!/usr/bin/env python3
"""Elastic inference benchmarks on the local cluster of `bmas up`; writes "# Elastic inference
benchmarks" into bench/RESULTS.md.

Usage: bench/inference_bench.py [BUILD_DIR] [--only 1,2,3] | --regenerate RESULTS_JSON 'YYYY-MM-DD HH:MM'

Starts `bmas up` (local Slurm: 3 nodes x 4 fake GPUs; no LXD, no dashboard) in a temporary
state directory and always stops it at the end (SIGINT to bmas up, then `bmas slurm down`).
  1. Reaction: a deployment with --max-num-seqs 1 and --ttft-slo-ms is given more streams than
     it admits; from the breach to the replica job's submission (controller.log) and to the
     replica serving (its /health, the gateway's /load); then from the end of the load to the
     drain and cancellation of the extra replica.
  2. Preemption: replicas hold every GPU; a student's 2-GPU training job is submitted (sbatch
     -p training) several times; time to its first instruction, against the same job on free
     GPUs measured in the same run. And the largest inter-token gap of each stream the gateway
     resumed, against the normal inter-token gap.
  3. Scale-up by wake against cold start: the same breach, answered alternately by waking a
     replica asleep on its GPU and by submitting a new one.
Needs root and Slurm. No timed assertions: figures are printed and written, not judged.
"""
import http.client
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

ONLY = None
if "--only" in sys.argv:
    i = sys.argv.index("--only")
    ONLY = {int(x) for x in sys.argv[i + 1].split(",")}
    del sys.argv[i:i + 2]

import run  # noqa: E402  bench/run.py: ROOT, BMAS, write_section

ROOT, BMAS = run.ROOT, run.BMAS
HEADING = "# Elastic inference benchmarks"
STUDENT = "bmas-bench-student"
# A replica that takes this long to load, as a scaled-down vLLM start-up (the profile's 60 s
# would make every run minutes long).
STARTUP_S = 5
SLO_MS = 300
SCALE_DOWN_IDLE_S = 10
REPLICA_CMD = ("{bmas} engine --host {host} --port {port} --model {model} --profile {profile} "
               "--max-num-seqs 1 --shutdown-timeout 0 --startup-s " + str(STARTUP_S))


def percentile(xs, q):
    """Nearest rank: the value that q of the samples do not exceed."""
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(q * len(xs) + 0.999999) - 1))]


def log_time(line):
    """Unix time of a bmas log line (spdlog, local time, milliseconds)."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3})", line)
    if not m:
        return None
    return time.mktime(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) + int(m.group(2)) / 1000


class Up:
    """`bmas up` in a temporary state directory, from a copy of build/bmas."""

    def __init__(self):
        self.top, self.state, self.work, self.bmas_path = run.scratch("bmas-inference-bench-", 0o1777)
        self.config = os.path.join(self.top, "bmas.toml")
        with open(self.config, "w") as f:
            f.write(f"[up]\nlxd = false\ndashboard = false\nengines = 1\n"
                    f"replica_scale_down_idle_s = {SCALE_DOWN_IDLE_S}\n"
                    "[engine]\nprofile = \"instant\"\n")
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.state, "slurm", "etc", "slurm.conf"))
        self.proc = None
        self.out = []

    def start(self):
        self.proc = subprocess.Popen([self.bmas_path, "--config", self.config, "--state-dir", self.state, "up"],
                                     stdout=subprocess.PIPE, stderr=open(os.path.join(self.top, "up.err"), "w"),
                                     text=True)
        running = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.out.append(line)
                if line.startswith("bmas up: running"):
                    running.set()
        threading.Thread(target=read, daemon=True).start()
        if not running.wait(180):
            raise RuntimeError("bmas up did not start: " + "".join(self.out) +
                               open(os.path.join(self.top, "up.err")).read()[-2000:])
        text = "".join(self.out)
        self.gateway = int(re.search(r"\n  gateway +http://127\.0\.0\.1:([0-9]+)", text).group(1))
        self.metrics = int(re.search(r"operator metrics: http://127\.0\.0\.1:([0-9]+)", text).group(1))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        subprocess.run(self.bmas("slurm", "down"), capture_output=True)

    def bmas(self, *args):
        return [self.bmas_path, "--state-dir", self.state, *args]

    def run(self, *args, check=True):
        r = subprocess.run(self.bmas(*args), capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"bmas {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def slurm(self, *cmd, user=None):
        full = (["runuser", "-u", user, "--"] if user else []) + list(cmd)
        return subprocess.run(full, capture_output=True, text=True, env=self.env)

    def key(self, user):
        self.run("user", "add", user, check=False)
        return re.search(r"sk-bmas-[A-Za-z0-9_-]+", self.run("key", "create", user)).group(0)

    def replicas(self):
        """{model: [replica dicts]} from `bmas inference list --json`."""
        try:
            return {d["model"]: d["replicas"] for d in json.loads(self.run("inference", "list", "--json"))}
        except (RuntimeError, ValueError):
            return {}

    def load(self):
        # The operator listener asks for the operator secret (`bmas up` made it).
        with open(os.path.join(self.state, "run", "operator.secret")) as f:
            secret = f.read().strip()
        request = urllib.request.Request(f"http://127.0.0.1:{self.metrics}/load",
                                         headers={"Authorization": "Bearer " + secret})
        with urllib.request.urlopen(request, timeout=5) as r:
            return json.loads(r.read())

    def log_lines(self, name):
        path = os.path.join(self.state, "logs", name)
        return open(path, errors="replace").read().splitlines() if os.path.exists(path) else []

    def wait(self, cond, timeout, step=0.5):
        end = time.time() + timeout
        while time.time() < end:
            if cond():
                return True
            time.sleep(step)
        return False


def stream_once(port, key, model, max_tokens, prompt):
    """One streamed completion: (start, token times, ok, error)."""
    t0 = time.time()
    times, ok, err = [], False, ""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("POST", "/v1/completions",
                     json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True}),
                     {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return t0, times, False, f"HTTP {resp.status}"
        for line in resp:
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                ok = True
                break
            obj = json.loads(data)
            if "error" in obj:
                err = str(obj["error"])[:200]
                break
            if obj.get("choices") and obj["choices"][0].get("text"):
                times.append(time.time())
        conn.close()
    except (OSError, http.client.HTTPException, ValueError) as e:
        err = str(e)
    return t0, times, ok, err


class Clients:
    """Closed-loop streaming clients, one thread (and one bmas user) each."""

    def __init__(self, up, model, keys, max_tokens):
        self.stop_flag = threading.Event()
        self.streams = []  # (user, start, times, ok, err)
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.loop, args=(up.gateway, u, k, model, max_tokens), daemon=True)
                        for u, k in keys]
        self.started = time.time()
        for t in self.threads:
            t.start()

    def loop(self, port, user, key, model, max_tokens):
        i = 0
        while not self.stop_flag.is_set():
            t0, times, ok, err = stream_once(port, key, model, max_tokens, f"story {i} of {user}")
            i += 1
            with self.lock:
                self.streams.append((user, t0, times, ok, err))
            if not ok:
                time.sleep(0.2)  # a failure is counted, not retried in a tight loop

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(180)
        return time.time()


class ReplicaWatch:
    """Follows controller.log for submitted replica jobs and stamps, every 0.1 s, when each
    one's log file appears (its job started), its /health answers, the gateway's /load
    shows it healthy, and `bmas inference list` calls it ready."""

    def __init__(self, up, model):
        self.up, self.model = up, model
        self.jobs = {}  # id -> dict of times
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        last_list = 0
        while not self.done.is_set():
            for line in self.up.log_lines("controller.log"):
                m = re.search(rf"{re.escape(self.model)}: submitted replica job (\d+) \((\w+), port (\d+)\)", line)
                if m and int(m.group(1)) not in self.jobs:
                    self.jobs[int(m.group(1))] = {"submitted": log_time(line), "port": int(m.group(3)),
                                                  "partition": m.group(2)}
            for jid, j in self.jobs.items():
                now = time.time()
                if "started" not in j and os.path.exists(os.path.join(self.up.state, "replicas", f"replica-{jid}.log")):
                    j["started"] = now
                if "health" not in j:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{j['port']}/health", timeout=1) as r:
                            if r.status == 200:
                                j["health"] = now
                    except OSError:
                        pass
                if "gateway" not in j:
                    try:
                        for b in self.up.load().get("backends", []):
                            if b.get("url", "").endswith(f":{j['port']}") and b.get("healthy"):
                                j["gateway"] = now
                    except (OSError, ValueError):
                        pass
            if time.time() - last_list > 0.5 and any("ready" not in j for j in self.jobs.values()):
                last_list = time.time()
                for r in self.up.replicas().get(self.model, []):
                    j = self.jobs.get(r["job_id"])
                    if j is not None and r["state"] == "ready" and "ready" not in j:
                        j["ready"] = last_list
            time.sleep(0.1)

    def stop(self):
        self.done.set()
        self.thread.join()


def bench_reaction(up, keys, reps):
    model = "acme/react"
    deploy = ["inference", "deploy", model, "--min", "1", "--max", "2", "--profile", "llama-3.1-8b-h100",
              "--ttft-slo-ms", str(SLO_MS), "--command", REPLICA_CMD]
    up.run(*deploy)
    if not up.wait(lambda: sum(r["state"] == "ready" for r in up.replicas().get(model, [])) == 1, 90):
        raise RuntimeError("acme/react's floor replica never became ready")
    watch = ReplicaWatch(up, model)
    # The policy ignores a breach until the newest ready replica has been up its breach_settle
    # (30 s): wait that out, so that the breach rule is what is measured.
    time.sleep(32)
    floor_jobs = set(watch.jobs)
    rows = []
    for rep in range(reps):
        before = set(watch.jobs)
        clients = Clients(up, model, keys[:3], 100)
        load_start = clients.started
        got = up.wait(lambda: any("gateway" in j for jid, j in watch.jobs.items() if jid not in before), 90, 0.2)
        time.sleep(3)
        load_end = clients.stop()
        new = [jid for jid in watch.jobs if jid not in before]
        if not got or not new:
            rows.append({"rep": rep, "missing": "no replica was added within 90 s"})
            continue
        jid = new[0]
        j = dict(watch.jobs[jid])
        # The breach: the first request that waited past the SLO without a token, at start + SLO.
        late = [s[1] + SLO_MS / 1000 for s in clients.streams
                if not s[2] or s[2][0] - s[1] > SLO_MS / 1000]
        breach = min(late) if late else None
        # Scale-down: controller.log's drain and cancel of that replica.
        def found(pattern):
            for line in up.log_lines("controller.log"):
                if re.search(pattern, line):
                    return log_time(line)
            return None
        # Scaled down: cancelled, or put to sleep (sleep mode: the job keeps its GPU).
        up.wait(lambda: found(rf"(cancelled|putting) replica job {jid}\b") is not None, 150, 1)
        drained = found(rf"draining replica job {jid}\b")
        cancelled = found(rf"(cancelled|putting) replica job {jid}\b")
        if found(rf"putting replica job {jid}\b") is not None:
            up.slurm("scancel", str(jid))  # each repetition measures a cold start (3. wakes)
        rows.append({"rep": rep, "job": jid, "load_start": load_start, "breach": breach, **j,
                     "load_end": load_end, "drained": drained, "cancelled": cancelled,
                     "streams": len(clients.streams), "failed": sum(not s[3] for s in clients.streams)})
        print("reaction", rows[-1], flush=True)
        # The next repetition starts from the floor alone.
        up.wait(lambda: len(up.replicas().get(model, [])) == 1, 60, 1)
        time.sleep(2)
    watch.stop()
    return rows, "build/bmas " + " ".join(
        a if " " not in a else f'"{a}"' for a in deploy)


def bench_wake(up, keys, cycles):
    """Scale-up by waking a sleeping replica against by a cold start, alternately: load on one
    replica until a second serves, load off until it is put to sleep; every other cycle the
    sleeper is cancelled first, so that the next scale-up is a submission."""
    model = "acme/wake"
    # The other sections' deployments go first: 2. leaves every GPU to its replicas.
    for other in ("acme/react", "acme/fill"):
        up.run("inference", "remove", other, check=False)
    up.wait(lambda: not any(m in up.replicas() for m in ("acme/react", "acme/fill")) and
            sum(1 for x in up.slurm("squeue", "-h", "-u", "bmas", "-o", "%j").stdout.split()
                if "acme/" in x) == 0, 120, 1)
    deploy = ["inference", "deploy", model, "--min", "1", "--max", "2", "--profile", "llama-3.1-8b-h100",
              "--ttft-slo-ms", str(SLO_MS), "--command", REPLICA_CMD]
    up.run(*deploy)
    if not up.wait(lambda: sum(r["state"] == "ready" for r in up.replicas().get(model, [])) == 1, 90):
        raise RuntimeError("acme/wake's floor replica never became ready")
    time.sleep(32)  # breach_settle, as in 1.

    def serving():
        try:
            return sum(1 for b in up.load().get("backends", [])
                       if model in b.get("models", []) and b.get("healthy") and not b.get("draining"))
        except (OSError, ValueError):
            return 0

    rows = []
    for c in range(cycles):
        kind = "cold" if c % 2 == 0 else "wake"
        if kind == "cold":
            for r in up.replicas().get(model, []):
                if r["state"] == "sleeping":
                    up.slurm("scancel", str(r["job_id"]))
            up.wait(lambda: all(r["state"] != "sleeping" for r in up.replicas().get(model, [])), 30, 0.5)
        mark = len(up.log_lines("controller.log"))
        clients = Clients(up, model, keys[:3], 100)
        load_start = clients.started
        served_at = None
        end = time.time() + 90
        while time.time() < end:
            if serving() >= 2:
                served_at = time.time()
                break
            time.sleep(0.1)
        time.sleep(3)
        load_end = clients.stop()
        late = [st[1] + SLO_MS / 1000 for st in clients.streams if not st[2] or st[2][0] - st[1] > SLO_MS / 1000]
        breach = min(late) if late else None
        lines = up.log_lines("controller.log")[mark:]
        how = next((("wake" if "waking" in l else "cold") for l in lines
                    if re.search(rf"{re.escape(model)}: (waking|submitted) replica job", l)), None)
        ctl = next((float(m.group(1)) for l in lines
                    if (m := re.search(rf"{re.escape(model)}: replica job \d+ serves ([0-9.]+) s after", l))), None)
        rows.append({"cycle": c, "planned": kind, "how": how, "load_start": load_start, "breach": breach,
                     "served": served_at, "controller_s": ctl, "streams": len(clients.streams),
                     "failed": sum(not st[3] for st in clients.streams)})
        print("wake", rows[-1], flush=True)
        # Back to the floor alone: the second replica asleep (or cancelled).
        up.wait(lambda: sum(r["state"] == "ready" for r in up.replicas().get(model, [])) == 1 and
                all(r["state"] in ("ready", "sleeping") for r in up.replicas().get(model, [])), 150, 1)
        time.sleep(2)
    return rows, "build/bmas " + " ".join(a if " " not in a else f'"{a}"' for a in deploy)


def ensure_student():
    if subprocess.run(["id", STUDENT], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", STUDENT], check=True)


def training_start(up, node, gpus, hold_s):
    """Submits the student's training job; seconds from just before sbatch to its first
    instruction (the date it writes), or None."""
    marker = os.path.join(up.work, f"t-{time.time_ns()}")
    t0 = time.time()
    r = up.slurm("sbatch", "--parsable", "-p", "training", "-N1", "-w", node, f"--gpus-per-node={gpus}",
                 "-D", up.work, "-o", "/dev/null", "--wrap", f"date +%s.%N > {marker}; sleep {hold_s}",
                 user=STUDENT)
    if r.returncode != 0:
        raise RuntimeError("sbatch: " + r.stderr)
    jid = r.stdout.strip().split(";")[0]
    if not up.wait(lambda: os.path.exists(marker) and os.path.getsize(marker) > 0, 90, 0.05):
        up.slurm("scancel", jid)
        return None, jid
    return float(open(marker).read()) - t0, jid


def running_replicas(up):
    r = up.slurm("squeue", "-h", "-u", "bmas", "-t", "RUNNING", "-o", "%i %N %P")
    return [l.split() for l in r.stdout.splitlines() if l.strip()]


def healthy_backends(up):
    try:
        return sum(bool(b.get("healthy")) and not b.get("draining") for b in up.load().get("backends", []))
    except (OSError, ValueError):
        return 0


def bench_preemption(up, keys, reps):
    ensure_student()
    nodes = up.slurm("sinfo", "-h", "-N", "-o", "%N").stdout.split()
    nodes = sorted(set(nodes))
    floors = {}
    for rs in up.replicas().values():
        for r in rs:
            floors[r["node"]] = floors.get(r["node"], 0) + 1
    node = min(nodes, key=lambda n: floors.get(n, 0))
    gpus = 2
    job_cmd = (f"runuser -u {STUDENT} -- sbatch --parsable -p training -N1 -w {node} --gpus-per-node={gpus} "
               f"-D WORK -o /dev/null --wrap 'date +%s.%N > WORK/t-N; sleep 2'")
    # Reference: the same job on free GPUs.
    free = []
    for _ in range(reps):
        lat, jid = training_start(up, node, gpus, 2)
        if lat is not None:
            free.append(lat)
        up.wait(lambda: up.slurm("squeue", "-h", "-j", jid).stdout.strip() == "", 30, 0.2)
        time.sleep(1)
    print("free", free, flush=True)
    # Fill every GPU with replicas of one deployment under load.
    model = "acme/fill"
    total_gpus = 4 * len(nodes)
    held = sum(len(v) for v in up.replicas().values())
    deploy = ["inference", "deploy", model, "--min", "1", "--max", str(total_gpus - held),
              "--profile", "llama-3.1-8b-h100", "--command", REPLICA_CMD]
    up.run(*deploy)
    # The gateway learns of a deployment from the store once a second; before that the model
    # is unknown (404).
    def listed():
        req = urllib.request.Request(f"http://127.0.0.1:{up.gateway}/v1/models",
                                     headers={"Authorization": "Bearer " + keys[0][1]})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return model in r.read().decode()
        except OSError:
            return False
    up.wait(listed, 10, 0.2)
    clients = Clients(up, model, keys[:total_gpus + 2], 1500)
    full = up.wait(lambda: len(running_replicas(up)) >= total_gpus, 180, 1)
    print("full", full, len(running_replicas(up)), flush=True)
    busy = []
    for _ in range(reps):
        # Every GPU runs a replica, and the gateway routes to every one (the requeued ones have
        # loaded again), so that the cut replicas carry streams.
        up.wait(lambda: len(running_replicas(up)) >= total_gpus and healthy_backends(up) >= total_gpus, 90, 0.5)
        time.sleep(2)
        on_node = [x for x in running_replicas(up) if x[1] == node]
        lat, jid = training_start(up, node, gpus, 2)
        busy.append({"latency": lat, "replicas_on_node": len(on_node),
                     "full": len(running_replicas(up))})
        print("busy", busy[-1], flush=True)
        up.wait(lambda: up.slurm("squeue", "-h", "-j", jid).stdout.strip() == "", 30, 0.2)
    time.sleep(5)
    clients.stop()
    # Resumed streams: the gateway logs the user and the tokens sent before each cut.
    resumes = []
    for line in up.log_lines("gateway.log"):
        m = re.search(rf"resuming a stream of {re.escape(model)} for (\S+) after (\d+) tokens", line)
        if m:
            resumes.append((m.group(1), int(m.group(2)), log_time(line)))
    resumed_gaps, normal_gaps, other_max = [], [], []
    matched = 0
    for user, start, times, ok, err in clients.streams:
        gaps = [b - a for a, b in zip(times, times[1:])]
        hit = None
        for (u, n, t) in resumes:
            if u == user and 0 < n < len(times) and times[n - 1] - 1 <= t <= times[n] + 1:
                hit = n
        if hit is not None:
            matched += 1
            resumed_gaps.append(times[hit] - times[hit - 1])
        elif gaps:
            normal_gaps.extend(gaps)
            other_max.append(max(gaps))
    fails = [s[4] for s in clients.streams if not s[3]]
    return {"node": node, "gpus": gpus, "free": free, "busy": busy, "resumes": len(resumes), "matched": matched,
            "resumed_gaps": resumed_gaps, "normal_gaps": normal_gaps, "other_max": other_max,
            "streams": len(clients.streams), "failed": len(fails), "first_failure": fails[0] if fails else "",
            "job_cmd": job_cmd, "deploy": deploy, "full": full}


def fmt_s(x):
    return "n/a" if x is None else f"{x:.2f}"


def regenerate(path, started):
    """Rewrites the section from a run's results.json (the raw figures), without running."""
    raw = json.load(open(path))
    results = {int(k): v for k, v in raw.items()}
    run.write_section(HEADING, report(results, started))


def main():
    if "--regenerate" in sys.argv:
        i = sys.argv.index("--regenerate")
        regenerate(sys.argv[i + 1], sys.argv[i + 2])
        return 0
    if os.geteuid() != 0 or not os.path.exists("/usr/sbin/slurmctld"):
        print("inference_bench: needs root and Slurm; skipped")
        return 0
    up = Up()
    results = {}
    started = time.strftime("%Y-%m-%d %H:%M")
    try:
        up.start()
        keys = [(f"bench{i}", up.key(f"bench{i}")) for i in range(15)]
        if ONLY is None or 1 in ONLY:
            results[1] = bench_reaction(up, keys, 3)
        if ONLY is None or 2 in ONLY:
            results[2] = bench_preemption(up, keys, 8)
        if ONLY is None or 3 in ONLY:
            results[3] = bench_wake(up, keys, 6)
    finally:
        up.stop()
    with open(os.path.join(up.top, "results.json"), "w") as f:
        json.dump({str(k): v for k, v in results.items()}, f, default=str)
    print("raw results:", os.path.join(up.top, "results.json"))
    text = report(results, started)
    print(text)
    if ONLY is None:
        run.write_section(HEADING, text)
    return 0


def report(results, started):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    slurm_v = subprocess.run(["/usr/sbin/slurmctld", "-V"], capture_output=True, text=True).stdout.strip()
    out = [HEADING, "",
           f"Measured {started} by `bench/inference_bench.py` on {platform.node()}: {cpu}, {os.cpu_count()} cores, "
           f"{slurm_v}, Python {platform.python_version()}. One `bmas up` (local Slurm, 3 nodes x 4 fake GPUs, "
           f"config `[up] lxd=false dashboard=false engines=1 replica_scale_down_idle_s={SCALE_DOWN_IDLE_S}`, "
           f"`[engine] profile=\"instant\"`) in a temporary state directory, stopped at the end. Replicas run "
           f"`{REPLICA_CMD}`: one stream at a time, and a {STARTUP_S} s simulated start-up (vLLM's is 15-60 s; "
           "the figures below are what bmas adds on top of it). Clients are Python threads streaming "
           "/v1/completions through the gateway, one bmas user each.", ""]
    if 1 in results:
        rows, cmd = results[1]
        out += ["## 1. Reaction: from a breach to a new replica, and back", "", "```",
                cmd, "```", "",
                "Then, 3 times: 3 streaming clients (max_tokens 100) against its one replica, until the new "
                "replica serves, +3 s; then the wait for the scale-down (sleep mode puts the extra replica to "
                "sleep; it is then cancelled with scancel, so that each repetition measures a cold start).", "",
                "Times in seconds. *breach*: the first request that had no token after the SLO "
                f"({SLO_MS} ms), at its start + {SLO_MS} ms. *submitted*: controller.log's `submitted replica "
                "job N`. *job start*: its replica log file appears. *start-up*: job start to the engine's "
                "/health (the simulated load time). *serving*: the gateway's /load shows it healthy. "
                "*ready*: `bmas inference list` says ready (polled every 0.5 s).", "",
                "| rep | load start to breach | breach to submitted (target <= 5) | submitted to job start | "
                "start-up | breach to serving | serving - start-up (target <= 3) | breach to list ready | "
                "load end to drain | load end to sleep or cancel | streams | failed |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            if "missing" in r:
                out.append(f"| {r['rep']} | {r['missing']} |||||||||||")
                continue
            b = r["breach"]
            d = lambda a, k: None if r.get(k) is None or a is None else r[k] - a  # noqa: E731
            startup = d(r.get("started"), "health")
            serving = d(b, "gateway")
            out.append(f"| {r['rep'] + 1} | {fmt_s(d(r['load_start'], 'breach'))} | {fmt_s(d(b, 'submitted'))} | "
                       f"{fmt_s(d(r.get('submitted'), 'started'))} | {fmt_s(startup)} | {fmt_s(serving)} | "
                       f"{fmt_s(None if serving is None or startup is None else serving - startup)} | "
                       f"{fmt_s(d(b, 'ready'))} | {fmt_s(d(r['load_end'], 'drained'))} | "
                       f"{fmt_s(d(r['load_end'], 'cancelled'))} | {r['streams']} | {r['failed']} |")
        ok = [r for r in rows if "missing" not in r and r["breach"] is not None]
        if ok:
            sub = max(r["submitted"] - r["breach"] for r in ok)
            over = [r["gateway"] - r["breach"] - (r["health"] - r["started"]) for r in ok
                    if all(r.get(k) is not None for k in ("gateway", "health", "started"))]
            down = [r["cancelled"] - r["load_end"] for r in ok if r.get("cancelled")]
            out += ["", f"Worst breach to submission: **{sub:.2f} s** (target 5 s: {'met' if sub <= 5 else 'missed'}); "
                    f"worst serving beyond start-up: **{fmt_s(max(over) if over else None)} s** (target 3 s: "
                    f"{'met' if over and max(over) <= 3 else 'missed'}). Load end to sleep (or cancellation): "
                    f"{', '.join(f'{x:.1f}' for x in down)} s, with replica_scale_down_idle_s = {SCALE_DOWN_IDLE_S}: "
                    "the policy waits for the load averaged over 60 s (an exponential moving average) to fall "
                    "below half of what one replica fewer admits, and only then counts the idle time, so the "
                    "idle setting is a lower bound, not the delay. The load starts 32 s after the floor "
                    "replica is ready: the policy ignores a breach until the newest ready replica has been up "
                    "30 s (breach_settle), and a breach inside that window waits for it or for the 60-s load "
                    "average (an earlier run without the wait: 18.6 s from breach to submission)."]
        out.append("")
    if 2 in results:
        p = results[2]
        free = p["free"]
        busy = [b["latency"] for b in p["busy"] if b["latency"] is not None]
        out += ["## 2. Preemption: a training job on GPUs that replicas hold", "", "```",
                "build/bmas " + " ".join(a if " " not in a else f'"{a}"' for a in p["deploy"]),
                p["job_cmd"], "```", "",
                f"The training job (WORK: the run's job directory) {len(p['busy'])} times on free GPUs before "
                f"the deployment (reference), then {len(p['busy'])} times once every GPU runs a replica and the "
                "gateway routes to each, with 14 streaming clients (max_tokens 1500).", "",
                f"Seconds from just before sbatch to the job's first instruction (the date it writes), "
                f"{p['gpus']} GPUs on {p['node']}; every GPU held by replicas at submission: {p['full']}.", "",
                "| | n | p50 | p99 | max |", "|---|---:|---:|---:|---:|"]
        for name, xs in (("free GPUs (plain Slurm)", free), ("GPUs held by replicas (preemption)", busy)):
            out.append(f"| {name} | {len(xs)} | {fmt_s(percentile(xs, .5) if xs else None)} | "
                       f"{fmt_s(percentile(xs, .99) if xs else None)} | {fmt_s(max(xs) if xs else None)} |")
        missed = len(p["busy"]) - len(busy)
        rg, ng, om = p["resumed_gaps"], p["normal_gaps"], p["other_max"]
        out += ["", f"Training jobs that did not start within 90 s: {missed}. "
                f"Streams: {p['streams']}, failed: {p['failed']}"
                + (f" (first: `{p['first_failure']}`)" if p["first_failure"] else "") +
                f"; the gateway resumed {p['resumes']}, of which {p['matched']} were matched to a client stream "
                "(by user and token count).", "",
                "| inter-token gap (ms) | n | p50 | p99 | max |", "|---|---:|---:|---:|---:|"]
        for name, xs in (("every gap of the streams not resumed", ng),
                         ("largest gap of each stream not resumed", om),
                         ("the gap at the resumption, per resumed stream", rg)):
            ms = [1000 * x for x in xs]
            out.append(f"| {name} | {len(ms)} | {fmt_s(percentile(ms, .5) if ms else None)} | "
                       f"{fmt_s(percentile(ms, .99) if ms else None)} | {fmt_s(max(ms) if ms else None)} |")
        if busy:
            p99 = percentile(busy, .99)
            out += ["", f"Training start under preemption: p99 **{p99:.2f} s** (target 2 s: {'met' if p99 <= 2 else 'missed'}), "
                    f"{percentile(busy, .5) - percentile(free, .5):+.2f} s at p50 against the same job on free GPUs."]
        if rg and ng and percentile(rg, .5) > 100 * percentile(ng, .5):
            out += ["", "A resumed stream stalls for seconds, about a thousand times the normal gap (no target was "
                    "set for it; this is far from seamless). With every GPU held and more clients than replicas, "
                    "the cut stream goes back through the gateway's admission queue like a new request "
                    "(Gateway::Attempt enqueues it) and waits for a replica to free up, behind the requests "
                    "already waiting. The queue is token-fair (VTC, src/gateway/fair_queue.h: the backlogged user "
                    "with the smallest served-token counter goes first) and the cut stream's user has just been "
                    "charged for the tokens it streamed, so it is likely served after the others (read from the "
                    "code, not measured). Admitting resumptions ahead of new requests would bound the gap by the "
                    "time to the next free replica."]
        out.append("")
    if 3 in results:
        rows, cmd = results[3]
        out += ["## 3. Scale-up: waking a sleeping replica against a cold start", "", "```", cmd, "```", "",
                f"{len(rows)} cycles on one deployment: 3 streaming clients (max_tokens 100) against its floor "
                "replica until a second replica serves (the gateway's /load shows it healthy), +3 s; then no "
                "load until the second replica is put to sleep on its GPU. Before every other cycle the "
                "sleeping replica is cancelled (scancel), so that scale-ups alternate between a cold start "
                "(a job submitted) and a wake-up (`POST /wake_up`). *controller*: what controller.log says "
                "the replica took to serve from its submission or its wake (`serves N s after ...`, seen at "
                "the controller's 2 s passes).", "",
                "| cycle | scale-up by | load start to breach | breach to serving | controller: to serving | "
                "streams | failed |", "|---:|---|---:|---:|---:|---:|---:|"]
        by = {"cold": [], "wake": []}
        for r in rows:
            b = r["breach"]
            bs = None if b is None or r["served"] is None else r["served"] - b
            if bs is not None and r["how"] in by:
                by[r["how"]].append(bs)
            out.append(f"| {r['cycle'] + 1} | {r['how'] or 'n/a'} | "
                       f"{fmt_s(None if b is None else b - r['load_start'])} | {fmt_s(bs)} | "
                       f"{fmt_s(r['controller_s'])} | {r['streams']} | {r['failed']} |")
        if by["cold"] and by["wake"]:
            c50, w50 = percentile(by["cold"], .5), percentile(by["wake"], .5)
            out += ["", f"Breach to serving, p50: **{w50:.2f} s by waking** against **{c50:.2f} s by a cold "
                    f"start** ({w50 / c50:.2f}x), with a {STARTUP_S} s simulated start-up and the profile's "
                    "wake time (0.8 s for llama-3.1-8b-h100, src/engine/profiles.toml). A real vLLM's start-up "
                    "is 15-60 s, so the gap there is wider."]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
