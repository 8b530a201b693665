#!/usr/bin/env python3
"""Measures `bmas dashboard` with a full cluster's state and writes bench/RESULTS.md under
"# Dashboard benchmarks".

Usage: bench/dashboard_bench.py [BUILD_DIR] [--quick]

Starts its own local Slurm (`bmas slurm up --cluster examples/cluster-12x4.toml`: 12 nodes x 4
fake GPUs) in a temporary state directory and stops it at the end, whatever happens. It fills
the state: 300 users in bmas's store (one admin), token usage, 30 days of finished jobs and
idle-GPU actions written into the store's SQLite file, and 1,000 jobs in Slurm (every GPU
busy, the rest pending) submitted as 15 Unix users. Then it times, on keep-alive connections,
the dashboard's API and whole page loads (the HTML, its 4 assets and its 3 API calls, one after
another on one connection, as a cold browser does at worst) as an admin and as a plain user,
against nginx serving the same bytes as static files in the same run; and what one refresh of
the dashboard's state costs. --quick takes 30 samples instead of 200 and prints the results
without touching RESULTS.md. Needs root and Slurm (`bash scripts/install-deps.sh`); without
them it says why and exits 0. Without nginx (`bash scripts/install-deps.sh --bench`) it says
so and reports bmas alone.
"""
import base64
import hashlib
import hmac
import http.client
import json
import os
import platform
import random
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import run  # noqa: E402  bench/run.py: ROOT, BMAS, write_section
from slurm_bench import CpuAccount, busy_cpu_seconds, percentile, poll  # noqa: E402

QUICK = "--quick" in sys.argv
ROOT, BMAS = run.ROOT, run.BMAS
HEADING = "# Dashboard benchmarks"
INVENTORY = os.path.join(ROOT, "examples", "cluster-12x4.toml")
SAMPLES = 30 if QUICK else 200
REFRESH_S = 2
# Jobs run as these Unix users (every Debian has them); the store knows them too.
JOB_USERS = ["daemon", "bin", "sys", "games", "man", "lp", "mail", "news", "uucp", "proxy",
             "www-data", "backup", "list", "irc", "nobody"]
ADMIN, PLAIN = "admin", "daemon"
N_USERS, N_JOBS = 300, 1000
# Every GPU busy: 6 jobs of 4 GPUs, 8 of 2 and 8 of 1 on 12 nodes x 4 (one node each).
RUNNING_SHAPES = [4] * 6 + [2] * 8 + [1] * 8
FINISHED_JOBS, IDLE_ACTIONS = 20000, 400
MODELS = ["meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct", "Qwen/Qwen2.5-7B-Instruct"]
BACKENDS = [f"http://oss{n:02d}:8000" for n in (1, 2, 3, 4)]
ASSETS = ["/assets/uPlot.min.css", "/assets/app.css", "/assets/uPlot.iife.min.js", "/assets/app.js"]
# Page -> the API it draws; app.js fetches /api/me first and /api/history after.
PAGES = [("cluster", "cluster"), ("queue", "queue"), ("users", "users")]
APIS = ["me", "cluster", "queue", "users", "history"]

started_processes = []


def stop(proc, sig=signal.SIGTERM):
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def slurm_jwt(key, user, lifetime_s=3600):
    """An HS256 token as `bmas` mints it for slurmrestd (claims exp, iat, sun)."""
    now = int(time.time())
    payload = json.dumps({"exp": now + lifetime_s, "iat": now, "sun": user}, separators=(",", ":"))
    signing = b64url(b'{"alg":"HS256","typ":"JWT"}') + "." + b64url(payload.encode())
    return signing + "." + b64url(hmac.new(key, signing.encode(), hashlib.sha256).digest())


class Cluster:
    """`bmas slurm up --cluster examples/cluster-12x4.toml` in a temporary state directory
    (755, so that munge, slurmd and the jobs' users reach into it), a job directory (1777) and
    a copy of build/bmas, so that a rebuild during the run changes nothing."""

    def __init__(self):
        self.top = tempfile.mkdtemp(prefix="bmas-dashboard-bench-", dir="/tmp")
        os.chmod(self.top, 0o755)
        self.state = os.path.join(self.top, "state")
        self.work = os.path.join(self.top, "work")
        os.mkdir(self.work)
        os.chmod(self.work, 0o1777)
        self.bmas_path = os.path.join(self.top, "bmas")
        shutil.copy2(BMAS, self.bmas_path)
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.state, "slurm", "etc", "slurm.conf"))
        self.local = None

    def bmas(self, *args):
        return [self.bmas_path, "--state-dir", self.state, *args]

    def run(self, cmd, check=True, user=None, timeout=600):
        if user:
            cmd = ["runuser", "-u", user, "--", "env", f"SLURM_CONF={self.env['SLURM_CONF']}", *cmd]
        r = subprocess.run(cmd, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
        return r

    def up(self):
        r = subprocess.run(self.bmas("slurm", "up", "--cluster", INVENTORY), capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"bmas slurm up --cluster {run.rel(INVENTORY)} failed: {r.stderr.strip()}")
        with open(os.path.join(self.state, "slurm", "local.json")) as f:
            self.local = json.load(f)

    def daemon_pids(self, name):
        return [d["pid"] for d in self.local["daemons"] if d["name"] == name]

    def down(self):
        subprocess.run(self.bmas("slurm", "down"), capture_output=True)
        shutil.rmtree(self.top, ignore_errors=True)


# ---- the state ---------------------------------------------------------------------------------

def make_users(c):
    """300 users through `bmas user add` (some with limits), keys for the admin and a plain user."""
    others = [f"res{i:03d}" for i in range(1, N_USERS - len(JOB_USERS))]
    names = [ADMIN] + JOB_USERS + others
    assert len(names) == N_USERS
    for i, name in enumerate(names):
        extra = ["--admin"] if name == ADMIN else []
        if i % 5 == 1:
            extra += ["--rpm", "60", "--tpm", "200000"]
        if i % 7 == 2:
            extra += ["--tokens-per-day", "5000000", "--max-concurrent", "8"]
        c.run(c.bmas("user", "add", name, *extra))
    keys = {u: c.run(c.bmas("key", "create", u)).stdout.strip() for u in (ADMIN, PLAIN)}
    return names, keys


def fill_store(c, names, running_ids, rng):
    """Token usage, finished jobs and idle-GPU actions, written straight into the store's SQLite
    file (the tables the gateway, the Slurm monitor and idle policing write). Returns counts."""
    now = int(time.time())
    db = sqlite3.connect(os.path.join(c.state, "store", "bmas.db"))
    usage = {}
    # Each user: a request burst in about half of the 10-minute slots of the last 24 hours;
    # 60 of them busy every minute of the last hour.
    for u in names:
        model, backend = rng.choice(MODELS), rng.choice(BACKENDS)
        for slot in range(144):
            if rng.random() < 0.5:
                usage[(now // 60 - slot * 10 - rng.randrange(10), u, model, backend)] = None
    for u in names[:60]:
        for m in range(60):
            usage[(now // 60 - m, u, MODELS[0], BACKENDS[0])] = None
    rows = []
    for (minute, u, model, backend) in usage:
        req = rng.randint(1, 20)
        rows.append((minute, u, model, backend, req, req * rng.randint(100, 2000), req * rng.randint(50, 500)))
    db.executemany("INSERT INTO usage (minute, user, model, backend, requests, prompt_tokens, completion_tokens) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    # 30 days of finished jobs, about 670 a day.
    jobs = []
    states = ["COMPLETED"] * 14 + ["FAILED"] * 3 + ["CANCELLED"] * 2 + ["TIMEOUT"]
    for i in range(FINISHED_JOBS):
        end = now - rng.randrange(30 * 86400)
        dur = rng.randint(300, 86400)
        gpus = rng.choice([1, 1, 2, 4, 4, 8])
        node = rng.randrange(1, 12)
        nodes = f"oss[{node:02d}-{node + 1:02d}]" if gpus > 4 else f"oss{node:02d}"
        state = rng.choice(states)
        jobs.append(("bmas", 1000 + i, rng.choice(names), f"job-{i}", rng.choice(["lab", "training", "inference"]),
                     state, gpus, nodes, end - dur - rng.randint(0, 3600), end - dur, end,
                     0 if state == "COMPLETED" else 1))
    db.executemany("INSERT INTO jobs (cluster, id, user, name, partition, state, gpus, nodes, submit_time, "
                   "start_time, end_time, exit_code) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", jobs)
    # Idle-GPU actions: a warning (and for some a cancellation) on finished jobs, and a warning
    # on three of the running jobs, which /api/queue then shows.
    idle = []
    for j in rng.sample(jobs, IDLE_ACTIONS):
        since = j[9] + rng.randint(600, 3600)
        idle.append((j[1], j[2], j[4], "warn", since + 1800, since, j[6], j[6] * 1800, "GPUs idle for 30 min"))
        if rng.random() < 0.4:
            idle.append((j[1], j[2], j[4], "cancel", since + 3600, since, j[6], j[6] * 3600, "GPUs idle for 60 min"))
    for job_id, user, part, gpus in running_ids[:3]:
        idle.append((job_id, user, part, "warn", now - 300, now - 2100, gpus, gpus * 1800, "GPUs idle for 30 min"))
    db.executemany("INSERT INTO idle_actions (job, user, partition, kind, at, idle_since, gpus, wasted_gpu_seconds, "
                   "reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", idle)
    db.commit()
    db.close()
    return len(rows), len(jobs), len(idle)


def submit_as_users(c, plan):
    """plan: [(user, [sbatch arguments])]; one shell script of sbatch commands per user, run as
    that user (runuser), so that 1,000 submissions cost 15 runusers, not 1,000."""
    per_user = {}
    for user, args in plan:
        per_user.setdefault(user, []).append(args)
    for user, jobs in per_user.items():
        path = os.path.join(c.work, f"submit-{user}.sh")
        with open(path, "w") as f:
            f.write("set -e\n")
            for args in jobs:
                f.write(" ".join(["sbatch", "--parsable", "--output=/dev/null", *args]) + " >/dev/null\n")
        os.chmod(path, 0o644)
        c.run(["bash", path], user=user)


def squeue(c):
    """[(id, user, partition, state, name)]"""
    out = c.run(["squeue", "-h", "-o", "%i|%u|%P|%T|%j"]).stdout
    return [tuple(line.split("|")) for line in out.splitlines()]


def make_jobs(c, rng):
    """22 running jobs that hold all 48 GPUs, then 978 pending behind them (5% held)."""
    plan = []
    for i, gpus in enumerate(RUNNING_SHAPES):
        part = "training" if i % 3 == 0 else "lab"
        limit = rng.randint(120, 1440)
        plan.append((JOB_USERS[i % len(JOB_USERS)],
                     ["-p", part, "-N1", f"--gres=gpu:{gpus}", f"--time={limit}", f"-J run-{i}",
                      "--wrap", "'sleep 86400'"]))
    submit_as_users(c, plan)
    poll("every GPU held by a running job",
         lambda: sum(1 for j in squeue(c) if j[3] == "RUNNING") == len(RUNNING_SHAPES), timeout=180, every=0.5)
    names = ["llama-ft", "eval", "sweep", "vllm-serve", "pretrain", "notebook", "bench", "distill"]
    plan = []
    for i in range(N_JOBS - len(RUNNING_SHAPES)):
        user = JOB_USERS[rng.randrange(len(JOB_USERS))]
        gpus = rng.choice([1, 1, 1, 2, 2, 4, 4, 8])
        shape = ["-N2", "--gres=gpu:4"] if gpus == 8 else ["-N1", f"--gres=gpu:{gpus}"]
        part = rng.choice(["lab", "lab", "training", "inference"])
        limit = rng.randint(30, 1440)
        hold = ["--hold"] if rng.random() < 0.05 else []
        plan.append((user, ["-p", part, *shape, f"--time={limit}", f"-J {rng.choice(names)}-{i}", *hold,
                            "--wrap", "'sleep 3600'"]))
    submit_as_users(c, plan)
    jobs = squeue(c)
    if len(jobs) != N_JOBS:
        raise RuntimeError(f"{len(jobs)} jobs in squeue, not {N_JOBS}")
    return jobs


# ---- HTTP --------------------------------------------------------------------------------------

class Conn:
    """One keep-alive connection; get() returns (seconds, body) and insists on a 200."""

    def __init__(self, port, headers=None):
        self.port, self.headers = port, dict(headers or {})
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def get(self, path):
        t0 = time.perf_counter()
        self.conn.request("GET", path, headers=self.headers)
        r = self.conn.getresponse()
        body = r.read()
        dt = time.perf_counter() - t0
        if r.status != 200:
            raise RuntimeError(f"GET {path} on port {self.port}: {r.status} {body[:300]!r}")
        return dt, body

    def close(self):
        self.conn.close()


class Dashboard:
    def __init__(self, c, refresh_s):
        self.args = c.bmas("dashboard", "--port", "0", "--refresh", str(refresh_s))
        self.log = tempfile.TemporaryFile()
        self.t0 = time.time()
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        started_processes.append(self.proc)
        line = self.proc.stdout.readline()
        self.t_listening = time.time()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.log.seek(0)
            raise RuntimeError(f"bmas dashboard did not start: {line!r} {self.log.read().decode()}")
        self.port = int(m.group(1))

    def login(self, key):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("POST", "/login", body=json.dumps({"key": key}), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        cookie = r.getheader("Set-Cookie", "")
        conn.close()
        m = re.match(r"(bmas_session=[0-9a-f]+)", cookie)
        if r.status != 200 or not m:
            raise RuntimeError(f"POST /login answered {r.status}, cookie {cookie!r}")
        return m.group(1)

    def stop(self):
        stop(self.proc)


class Nginx:
    """nginx serving files, one worker, keep-alive: one server (port) per viewer, whose root
    holds the bytes bmas answered that viewer, at the same paths."""

    def __init__(self, roots):
        self.dir = tempfile.mkdtemp(prefix="bmas-dashboard-bench-nginx-")
        os.chmod(self.dir, 0o755)
        self.ports = {}
        servers = ""
        for viewer, files in roots.items():
            root = os.path.join(self.dir, viewer)
            for path, body in files.items():
                full = os.path.join(root, path.lstrip("/"))
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "wb") as f:
                    f.write(body)
            port = free_port()
            self.ports[viewer] = port
            servers += (f"  server {{\n    listen 127.0.0.1:{port};\n    root {root};\n"
                        "    location /api/ { default_type application/json; }\n"
                        "    location /assets/ { }\n"
                        "    location / { default_type text/html; }\n  }\n")
        d = self.dir
        user = "user root;\n" if os.geteuid() == 0 else ""
        self.config = (
            f"{user}worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n"
            "events { worker_connections 1024; }\n"
            "http {\n"
            f"  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n"
            f"  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n"
            "  sendfile on;\n  keepalive_requests 1000000;\n"
            "  types { text/css css; application/javascript js; }\n"
            "  add_header Cache-Control no-store;\n"
            + servers + "}\n")
        self.path = os.path.join(d, "nginx.conf")
        with open(self.path, "w") as f:
            f.write(self.config)
        self.proc = subprocess.Popen(["nginx", "-c", self.path, "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started_processes.append(self.proc)
        port = next(iter(self.ports.values()))

        def answers():
            try:
                return Conn(port).get(ASSETS[1])
            except (OSError, RuntimeError, http.client.HTTPException):
                if self.proc.poll() is not None:
                    raise RuntimeError("nginx did not start: " + open(os.path.join(d, "error.log")).read())
                return None
        poll("nginx", answers, timeout=10, every=0.05)

    def stop(self):
        stop(self.proc, signal.SIGQUIT)
        shutil.rmtree(self.dir, ignore_errors=True)


def page_paths(page, api):
    return [f"/{page}", *ASSETS, "/api/me", f"/api/{api}", "/api/history"]


def page_load(port, headers, paths):
    """A cold browser at worst: a new connection, then each request after the last one's
    answer. Returns (seconds, bytes)."""
    conn = Conn(port, headers)
    t0 = time.perf_counter()
    size = 0
    for p in paths:
        size += len(conn.get(p)[1])
    dt = time.perf_counter() - t0
    conn.close()
    return dt, size


# ---- measurements ------------------------------------------------------------------------------

def measure(dash, ngx, cookies):
    """API calls and page loads, every case round-robin over the whole run so that each sees
    the dashboard's refreshes alike; bmas and nginx alternate which goes first."""
    targets = [("bmas", lambda v: dash.port, lambda v: {"Cookie": cookies[v]})]
    if ngx:
        targets.append(("nginx", lambda v: ngx.ports[v], lambda v: {}))
    viewers = [ADMIN, PLAIN]
    # One keep-alive connection per (target, viewer) for the API calls; a Bearer one too.
    conns = {(t, v): Conn(port(v), hdr(v)) for t, port, hdr in targets for v in viewers}
    api = {(a, v, t): [] for a in APIS for v in viewers for t, _, _ in targets}
    sizes = {}
    pages = {(p, v, t): [] for p, _ in PAGES for v in viewers for t, _, _ in targets}
    page_sizes = {}
    for i in range(SAMPLES + 3):  # 3 warm-up rounds
        order = targets if i % 2 == 0 else targets[::-1]
        for a in APIS:
            for v in viewers:
                for t, _, _ in order:
                    dt, body = conns[(t, v)].get(f"/api/{a}")
                    if i >= 3:
                        api[(a, v, t)].append(dt)
                        sizes.setdefault((a, v, t), []).append(len(body))
        for p, a in PAGES:
            for v in viewers:
                for t, port, hdr in order:
                    dt, size = page_load(port(v), hdr(v), page_paths(p, a))
                    if i >= 3:
                        pages[(p, v, t)].append(dt)
                        page_sizes.setdefault((p, v, t), []).append(size)
    for c in conns.values():
        c.close()
    return api, sizes, pages, page_sizes


def bearer_vs_cookie(dash, keys, cookies):
    """/api/me with the key on every request (a SHA-256 and an SQLite lookup) against the
    session cookie, alternating."""
    bearer = Conn(dash.port, {"Authorization": f"Bearer {keys[ADMIN]}"})
    cookie = Conn(dash.port, {"Cookie": cookies[ADMIN]})
    b, k = [], []
    for i in range(SAMPLES + 3):
        for which, conn, out in ((("b", bearer, b), ("c", cookie, k)) if i % 2 == 0 else
                                 (("c", cookie, k), ("b", bearer, b))):
            dt, _ = conn.get("/api/me")
            if i >= 3:
                out.append(dt)
    bearer.close()
    cookie.close()
    return b, k


def refresh_costs(c, process_start):
    """What one refresh pays: the whole of the dashboard's first refresh (it runs before the
    dashboard listens), and its parts one by one."""
    reps = 3 if QUICK else 10
    first = []
    for _ in range(reps):
        d = Dashboard(c, 3600)
        first.append(d.t_listening - d.t0)
        d.stop()
    key = open(c.local["jwt_key"], "rb").read()
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": slurm_jwt(key, "root")}
    rest = Conn(c.local["rest_port"], headers)
    parts = {}
    n = 5 if QUICK else 20
    for name, path in (("slurmrestd GET /slurm/v0.0.38/jobs", "/slurm/v0.0.38/jobs"),
                       ("slurmrestd GET /slurm/v0.0.38/nodes", "/slurm/v0.0.38/nodes")):
        rest.get(path)
        samples = [rest.get(path) for _ in range(n)]
        parts[name] = ([s[0] for s in samples], len(samples[-1][1]))
    rest.close()
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = c.run(["scontrol", "-o", "show", "reservation"], check=False).stdout
        t.append(time.perf_counter() - t0)
    parts["`scontrol -o show reservation` (a process)"] = (t, len(out))
    # The store's five reads, the same SQL through python's sqlite3 (the same SQLite library).
    db = sqlite3.connect(os.path.join(c.state, "store", "bmas.db"))
    now = int(time.time())
    queries = [
        ("SELECT * FROM users ORDER BY name", ()),
        ("SELECT user, model, backend, SUM(requests), SUM(prompt_tokens), SUM(completion_tokens) FROM usage "
         "WHERE minute >= ? AND (? IS NULL OR user = ?) GROUP BY user, model, backend ORDER BY user, model, backend",
         ((now - 3600) // 60, None, None)),
        ("SELECT user, model, backend, SUM(requests), SUM(prompt_tokens), SUM(completion_tokens) FROM usage "
         "WHERE minute >= ? AND (? IS NULL OR user = ?) GROUP BY user, model, backend ORDER BY user, model, backend",
         ((now - now % 86400) // 60, None, None)),
        ("SELECT user, COUNT(*), SUM(CASE WHEN start_time > 0 AND end_time > start_time THEN gpus * "
         "(end_time - start_time) ELSE 0 END) FROM jobs WHERE end_time >= ? AND (? IS NULL OR user = ?) "
         "GROUP BY user ORDER BY user", (now - 30 * 86400, None, None)),
        ("SELECT job, user, partition, kind, at, idle_since, gpus, wasted_gpu_seconds, reason FROM idle_actions "
         "WHERE at >= ? AND (? IS NULL OR user = ?) ORDER BY at DESC, job DESC", (now - 30 * 86400, None, None)),
    ]
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        rows = sum(len(db.execute(q, a).fetchall()) for q, a in queries)
        t.append(time.perf_counter() - t0)
    db.close()
    parts[f"the store's 5 reads (python sqlite3; {rows:,} rows)"] = (t, None)
    return first, parts


def profile(dash, cookie, path, seconds=4):
    """Where the dashboard's time goes while it answers `path` in a loop: `perf record` with
    DWARF call graphs, then each bmas::dashboard function's share of the samples, its callees
    included. [] without perf (linux-perf) or when it fails."""
    if shutil.which("perf") is None:
        return []
    out = tempfile.mktemp(prefix="bmas-dashboard-bench-perf-")
    stop_at = time.time() + seconds + 1

    def load():
        conn = Conn(dash.port, {"Cookie": cookie})
        while time.time() < stop_at:
            conn.get(path)
        conn.close()
    worker = threading.Thread(target=load)
    worker.start()
    try:
        r = subprocess.run(["perf", "record", "-F", "499", "--call-graph", "dwarf,16384", "-p", str(dash.proc.pid),
                            "-o", out, "--", "sleep", str(seconds)], capture_output=True, text=True)
        if r.returncode != 0:
            return []
        rep = subprocess.run(["perf", "report", "-i", out, "--children", "--sort", "symbol", "--stdio", "-g", "none"],
                             capture_output=True, text=True).stdout
    finally:
        worker.join()
        if os.path.exists(out):
            os.remove(out)
    shares = []
    for line in rep.splitlines():
        # perf pads its lines with thousands of blanks: strip them before matching.
        m = re.match(r"\s*([\d.]+)%\s+([\d.]+)%\s+\[\.\]\s+(bmas::dashboard::.*)", line.strip())
        name = m and (m.group(3).split("  ")[0].removesuffix("(inlined)").strip().replace("[abi:cxx11]", "")
                      .replace("(anonymous namespace)::", ""))
        if m and name not in (n for _, _, n in shares):
            shares.append((float(m.group(1)), float(m.group(2)), name))
    return shares[:6]


def idle_cpu(c, dash, seconds):
    """Cores kept busy while nobody asks anything: the dashboard (its refreshes), slurmrestd
    (answering them) and slurmctld (scheduling 1,000 jobs, refreshes or not)."""
    pids = {"bmas dashboard": [dash.proc.pid], "slurmrestd": c.daemon_pids("slurmrestd"),
            "slurmctld": c.daemon_pids("slurmctld")}
    before = {k: sum(run.proc_cpu_seconds(p) for p in v) for k, v in pids.items()}
    t0 = time.time()
    time.sleep(seconds)
    elapsed = time.time() - t0
    return {k: (sum(run.proc_cpu_seconds(p) for p in v) - before[k]) / elapsed for k, v in pids.items()}, elapsed


def main():
    if os.geteuid() != 0:
        print("dashboard_bench: skipped: `bmas slurm up` needs root", file=sys.stderr)
        return
    os.environ["PATH"] += ":/usr/sbin"
    if shutil.which("slurmctld") is None:
        print("dashboard_bench: skipped: Slurm is not installed (bash scripts/install-deps.sh)", file=sys.stderr)
        return
    have_nginx = shutil.which("nginx") is not None
    if not have_nginx:
        print("dashboard_bench: nginx is missing (bash scripts/install-deps.sh --bench): bmas alone, no ratios",
              file=sys.stderr)
    started = time.strftime("%Y-%m-%d %H:%M")
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "src", "web"):
        commit += " with changes to src/ or web/ not committed"
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    load0 = os.getloadavg()
    account = CpuAccount()
    busy0, own0, t0 = busy_cpu_seconds(), account.seconds(), time.time()
    rng = random.Random(12)
    cluster, dash, ngx = Cluster(), None, None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("dashboard_bench: terminated"))
    log = lambda msg: print(f"dashboard_bench: {msg} ({time.time() - t0:.0f} s)", file=sys.stderr)
    try:
        cluster.up()
        log("cluster up")
        names, keys = make_users(cluster)
        log("300 users")
        jobs = make_jobs(cluster, rng)
        log(f"{len(jobs)} jobs")
        running = [(int(j[0]), j[1], j[2], RUNNING_SHAPES[int(j[4].split("-")[1])]) for j in jobs if j[3] == "RUNNING"]
        n_usage, n_finished, n_idle = fill_store(cluster, names, running, rng)
        log("store filled")
        process_start = []
        for _ in range(10):
            t = time.time()
            cluster.run(cluster.bmas("version"))
            process_start.append(time.time() - t)

        dash = Dashboard(cluster, REFRESH_S)
        admin = Conn(dash.port, {"Authorization": f"Bearer {keys[ADMIN]}"})

        def queue_full():
            q = json.loads(admin.get("/api/queue")[1])
            reasons = {j["reason"] for j in q["pending"]}
            return (len(q["pending"]) + len(q["running"]) == N_JOBS and len(q["running"]) == len(RUNNING_SHAPES)
                    and "None" not in reasons and q)
        queue = poll("the dashboard to show the 1,000 jobs with Slurm's reasons", queue_full, timeout=180, every=1)
        admin.close()
        log("dashboard shows the jobs")
        cookies = {v: dash.login(keys[v]) for v in (ADMIN, PLAIN)}
        if have_nginx:
            roots = {}
            for v in (ADMIN, PLAIN):
                conn = Conn(dash.port, {"Cookie": cookies[v]})
                files = {f"/{p}": conn.get(f"/{p}")[1] for p, _ in PAGES}
                files.update({a: conn.get(a)[1] for a in ASSETS})
                files.update({f"/api/{a}": conn.get(f"/api/{a}")[1] for a in APIS})
                conn.close()
                roots[v] = files
            ngx = Nginx(roots)
        idle_rates, idle_s = idle_cpu(cluster, dash, 10 if QUICK else 30)
        log("idle CPU")
        api, sizes, pages, page_sizes = measure(dash, ngx, cookies)
        log("API and page loads")
        bearer, cookie = bearer_vs_cookie(dash, keys, cookies)
        slowest = max(((a, v) for a in APIS for v in (ADMIN, PLAIN)), key=lambda k: percentile(api[(k[0], k[1], "bmas")], .5))
        shares = profile(dash, cookies[slowest[1]], f"/api/{slowest[0]}")
        log("profile")
        conn = Conn(dash.port, {"Cookie": cookies[ADMIN]})
        history_body = conn.get("/api/history")[1]
        conn.close()
        history, history_bytes = json.loads(history_body)["points"], len(history_body)
        first, parts = refresh_costs(cluster, process_start)
        log("refresh costs")
    finally:
        if ngx:
            ngx.stop()
        if dash:
            dash.stop()
        for p in started_processes:
            stop(p)
        cluster.down()
        elapsed = time.time() - t0
        busy = busy_cpu_seconds() - busy0
        own = account.seconds() - own0 if own0 is not None else None
        account.close()
    load1 = os.getloadavg()

    # ---- the report ----
    ms = lambda xs, q: percentile(xs, q) * 1e3
    kb = lambda n: f"{n / 1024:.1f}"
    viewer_name = {ADMIN: f"admin (`{ADMIN}`)", PLAIN: f"plain user (`{PLAIN}`)"}
    pending = len(queue["pending"])
    held = sum(1 for j in queue["pending"] if j["reason"] == "JobHeldUser")
    users_with_jobs = len({j["user"] for j in queue["pending"] + queue["running"]})
    if own is None:
        cpu_note = f"the machine was {busy / elapsed:.2f} cores busy on average (this run's own share unknown: no cgroup v1 cpuacct)"
    else:
        cpu_note = (f"this run (the script, bmas, nginx, the cluster's daemons and its jobs, counted in a cpuacct cgroup "
                    f"of its own) kept {own / elapsed:.2f} cores busy on average, other processes "
                    f"{max(busy - own, 0) / elapsed:.2f} cores")
    text = (f"{HEADING}\n\nWritten by `python3 bench/dashboard_bench.py build` (or `make bench`, as root) on {started} "
            f"in {elapsed:.0f} s, at commit {commit}; {os.cpu_count()} cores, {cpu}, Linux {platform.release()}; "
            f"{cpu_note}; load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end. Nothing here is typed in "
            "by hand. The machine is shared and noisy: compare the ratios to nginx, measured in the same run.\n\n"
            "The state: the script starts its own local cluster, `build/bmas --state-dir STATE slurm up --cluster "
            "examples/cluster-12x4.toml` (12 nodes x 4 fake GPUs: 12 slurmd, slurmctld, slurmrestd and munged on this "
            "machine; stopped with `slurm down` at the end), with bmas run from a copy of build/bmas taken at the start. "
            f"Slurm holds **{N_JOBS:,} jobs**: {len(queue['running'])} running that hold all **48 GPUs** "
            f"(6 x 4 GPUs, 8 x 2, 8 x 1), and {pending} pending behind them ({held} of them held; 1-8 GPUs, in lab, "
            f"training and inference), submitted with `sbatch` by {users_with_jobs} Unix users (Debian's system "
            f"accounts: {', '.join(JOB_USERS)}). The store holds **{N_USERS} users** (`bmas user add`, one of them "
            f"`--admin`; some with limits) and, written straight into its SQLite file, {n_usage:,} rows of token usage "
            f"(every user, the last 24 hours), {n_finished:,} finished jobs of the last 30 days and {n_idle:,} idle-GPU "
            f"actions (3 on running jobs). The dashboard: `build/bmas --state-dir STATE dashboard --port 0 --refresh "
            f"{REFRESH_S}`, with Slurm and the store only (no gateway, no agents). Clients sign in with `POST /login` "
            "and send the session cookie, as a browser does; they are Python's http.client on keep-alive connections "
            "over loopback (its own cost is in both columns). nginx: one worker, `sendfile on`, serving the bytes "
            "bmas had answered each viewer, saved as files at the same paths, one server per viewer.\n\n")

    # D1. API.
    rows = ["| endpoint | viewer | response (KiB) | bmas p50 (ms) | bmas p99 (ms) | nginx p50 (ms) | nginx p99 (ms) | "
            "bmas/nginx p50 | bmas/nginx p99 |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for a in APIS:
        for v in (ADMIN, PLAIN):
            b = api[(a, v, "bmas")]
            row = f"| `/api/{a}` | {viewer_name[v]} | {kb(statistics.median(sizes[(a, v, 'bmas')]))} | {ms(b, .5):.2f} | {ms(b, .99):.2f} |"
            if ngx:
                n = api[(a, v, "nginx")]
                row += (f" {ms(n, .5):.2f} | {ms(n, .99):.2f} | {percentile(b, .5) / percentile(n, .5):.1f}x | "
                        f"{percentile(b, .99) / percentile(n, .99):.1f}x |")
            else:
                row += " | | | |"
            rows.append(row)
    slow = slowest
    d1 = (f"{SAMPLES} samples of each, after 3 warm-up rounds, round-robin over every row and both servers (which "
          "goes first alternates), so that each row sees the dashboard's refreshes (every 2 s) alike. One keep-alive "
          "connection per server and viewer; the clock runs from sending the request to the last byte of the answer. "
          f"The slowest endpoint: **`/api/{slow[0]}`** as the {viewer_name[slow[1]]}, p50 "
          f"{ms(api[(slow[0], slow[1], 'bmas')], .5):.1f} ms.")
    if ngx:
        worst = max(((a, v) for a in APIS for v in (ADMIN, PLAIN)),
                    key=lambda k: percentile(api[(k[0], k[1], "bmas")], .5) / percentile(api[(k[0], k[1], "nginx")], .5))
        d1 += (f" Largest bmas/nginx p50 ratio: `/api/{worst[0]}` as the {viewer_name[worst[1]]}, "
               f"{percentile(api[(worst[0], worst[1], 'bmas')], .5) / percentile(api[(worst[0], worst[1], 'nginx')], .5):.1f}x: "
               "nginx sends a file it has; bmas builds the JSON from the last refresh's state for each request.")
    if shares:
        d1 += (f" Where `/api/{slow[0]}`'s time goes (`perf record --call-graph dwarf` on the dashboard while it "
               "answers that request in a loop for 4 s; share of the samples in each function with what it calls, "
               "self in brackets): " + "; ".join(f"`{name}` {total:.0f}% ({own:.0f}%)" for total, own, name in shares)
               + ".")
        share = {name: total for total, _, name in shares}
        if share.get("bmas::dashboard::EstimateStartSeconds", 0) > 50 and share.get("bmas::dashboard::BuildClusterMap", 0) > 50:
            d1 += (" The pending jobs' `reason_text` and `eta_s` each call `EstimateStartSeconds`, which rebuilds "
                   "the whole cluster map (`BuildClusterMap`: every node against every job, comparing strings) and "
                   "walks every job again: twice per pending job, so the work grows as pending jobs x (nodes x jobs).")
    d1 += (f" `/api/me` with `Authorization: Bearer KEY` (a SHA-256 of the key and an SQLite lookup on every "
           f"request) against the session cookie, alternating on two connections, {SAMPLES} each: p50 "
           f"{ms(bearer, .5):.2f} ms against {ms(cookie, .5):.2f} ms, p99 {ms(bearer, .99):.2f} ms against "
           f"{ms(cookie, .99):.2f} ms.")
    d1 += (f" `/api/history` grows by a point every 10 s up to 360 (an hour); in this run it had {len(history)} "
           f"({history_bytes:,} bytes, {history_bytes / max(len(history), 1):.0f} per point), so a dashboard up for an "
           f"hour or more answers about **{history_bytes / max(len(history), 1) * 360 / 1024:.0f} KiB** to every page "
           "load and to every open page's refresh (every 5 s).")
    commands = ("build/bmas --state-dir STATE slurm up --cluster examples/cluster-12x4.toml\n"
                f"build/bmas --state-dir STATE dashboard --port 0 --refresh {REFRESH_S}\n"
                "curl -X POST -H 'Content-Type: application/json' -d '{\"key\": \"KEY\"}' URL/login   # the session cookie\n"
                "GET URL/api/{me,cluster,queue,users,history}   # Cookie: bmas_session=...\n"
                "nginx -c DIR/nginx.conf -g 'daemon off;'   # the same bytes, as files")
    sections = [("D1. API latency: bmas dashboard vs nginx serving the same bytes", commands, d1, rows)]

    # D2. Page loads.
    rows = ["| page | viewer | requests | bytes (KiB) | bmas p50 (ms) | bmas p99 (ms) | nginx p50 (ms) | nginx p99 (ms) | "
            "bmas/nginx p50 | bmas/nginx p99 |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p, a in PAGES:
        for v in (ADMIN, PLAIN):
            b = pages[(p, v, "bmas")]
            row = (f"| `/{p}` | {viewer_name[v]} | {len(page_paths(p, a))} | {kb(statistics.median(page_sizes[(p, v, 'bmas')]))} | "
                   f"{ms(b, .5):.1f} | {ms(b, .99):.1f} |")
            if ngx:
                n = pages[(p, v, "nginx")]
                row += (f" {ms(n, .5):.1f} | {ms(n, .99):.1f} | {percentile(b, .5) / percentile(n, .5):.1f}x | "
                        f"{percentile(b, .99) / percentile(n, .99):.1f}x |")
            else:
                row += " | | | |"
            rows.append(row)
    cl = pages[("cluster", ADMIN, "bmas")]
    worst_page = max(pages, key=lambda k: percentile(pages[k], .99) if k[2] == "bmas" else -1)
    wp99 = ms(pages[worst_page], .99)
    over = [(p, v) for p, _ in PAGES for v in (ADMIN, PLAIN) if ms(pages[(p, v, "bmas")], .99) >= 200]
    under = [p for p, _ in PAGES if not any(o[0] == p for o in over)]
    if not over:
        verdict = "met: every page, both viewers, p99 under 200 ms"
    else:
        verdict = ("not met for every page: " + ", ".join(f"`/{p}`" for p in under) + " load in under 200 ms at p99 "
                   "for both viewers, but " + ", ".join(f"`/{p}` as the {viewer_name[v]} (p50 "
                                                        f"{ms(pages[(p, v, 'bmas')], .5):.0f} ms, p99 "
                                                        f"{ms(pages[(p, v, 'bmas')], .99):.0f} ms)" for p, v in over)
                   + " do not")
    d2 = (f"A page load as a cold browser makes it at worst: a new connection, then the page's HTML, its 4 assets "
          f"({', '.join(f'`{a}`' for a in ASSETS)}), then `/api/me`, the page's API and `/api/history`, each sent "
          f"after the previous answer (a browser overlaps some of them on up to 6 connections). {SAMPLES} loads of "
          "each, after 3 warm-up rounds, round-robin over the rows and both servers; the clock runs from before the "
          "connection to the last byte of the last answer. "
          f"**Verdict on the target \"one page load under 200 ms with that much state\": {verdict}.** The cluster page "
          f"as the admin: p50 {ms(cl, .5):.1f} ms, p99 {ms(cl, .99):.1f} ms; the slowest page here, `/{worst_page[0]}` "
          f"as the {viewer_name[worst_page[1]]}: p99 {wp99:.1f} ms.")
    sections.append(("D2. Page load: HTML, assets and API calls, one connection",
                     "GET URL/PAGE URL/assets/{uPlot.min.css,app.css,uPlot.iife.min.js,app.js} URL/api/me URL/api/PAGE "
                     "URL/api/history   # a new connection, one request after another; Cookie: bmas_session=...\n"
                     "nginx -c DIR/nginx.conf -g 'daemon off;'   # the same bytes, as files", d2, rows))

    # D3. Refresh.
    start = statistics.median(process_start)
    rows = ["| what | samples | p50 (ms) | max (ms) | response (KiB) |", "|---|---:|---:|---:|---:|"]
    rows.append(f"| one whole refresh: `bmas dashboard` start to listening, less a process start | {len(first)} | "
                f"{(statistics.median(first) - start) * 1e3:.0f} | {(max(first) - start) * 1e3:.0f} |  |")
    rows.append(f"| `bmas version` (a process start alone) | {len(process_start)} | {start * 1e3:.0f} | "
                f"{max(process_start) * 1e3:.0f} |  |")
    for name, (ts, size) in parts.items():
        rows.append(f"| {name} | {len(ts)} | {ms(ts, .5):.1f} | {max(ts) * 1e3:.1f} | {'' if size is None else kb(size)} |")
    cores = ", ".join(f"{k} {v:.3f}" for k, v in idle_rates.items())
    per_refresh = idle_rates["bmas dashboard"] * (REFRESH_S + statistics.median(first) - start)
    d3 = (f"Each refresh (every {REFRESH_S} s here; `[dashboard] refresh_s`) asks slurmrestd for every job and "
          "node, runs `scontrol -o show reservation` for the mode, reads the store (users, tokens of the last hour "
          "and of today, finished jobs and idle actions of 30 days) and builds the next state; requests are answered "
          "from the last state meanwhile, on another thread. The dashboard does its first refresh before it listens, "
          "so its start to `listening` less a process start is one whole refresh with this state "
          f"(`build/bmas --state-dir STATE dashboard --port 0 --refresh 3600`, started {len(first)} times beside the "
          "one under test). The parts are timed alone: slurmrestd with a JWT minted as bmas mints it (user root), "
          f"on a keep-alive connection. Cores kept busy over {idle_s:.0f} s with no requests: {cores}; that is about "
          f"**{per_refresh * 1e3:.0f} ms of CPU per refresh** in the dashboard. slurmctld's share includes its own "
          f"scheduling passes over the {pending} pending jobs (this cluster's `bf_interval=1`, `sched_interval=2`), "
          "refreshes or not.")
    sections.append(("D3. Refresh: what reading that much state costs", "build/bmas --state-dir STATE dashboard --port 0 "
                     "--refresh 3600   # time to its `listening` line\nGET REST/slurm/v0.0.38/jobs   # "
                     "X-SLURM-USER-NAME: root, X-SLURM-USER-TOKEN: JWT\nGET REST/slurm/v0.0.38/nodes\n"
                     "scontrol -o show reservation\nbuild/bmas --state-dir STATE version", d3, rows))

    for title, command, body, table in sections:
        text += f"## {title}\n\n```\n{command}\n```\n\n{body}\n\n" + "\n".join(table) + "\n\n"
    if not QUICK:
        run.write_section(HEADING, text)
    print(text)


if __name__ == "__main__":
    main()
