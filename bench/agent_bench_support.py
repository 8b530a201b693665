"""What bench/agent_security_bench.py measures with: the cluster (LXD, the local Slurm and `bmas
agent`, under one temporary directory), the users it runs as, the attackers it turns on the
agent's socket, and the host readings its figures come from (/proc and cgroups). Imported by
that script after it has taken its own arguments out of sys.argv (bench/run.py reads BUILD_DIR
from what is left)."""
import glob
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import run  # noqa: E402  bench/run.py: ROOT, BMAS
import lxd_bench as lb  # noqa: E402  ensure_users, as_user, percentile, status_kb
ROOT, BMAS = run.ROOT, run.BMAS
QUICK = "--quick" in sys.argv

USERS = [f"bmasbench{i:03d}" for i in range(1, 5)]   # workspaces; USERS[0] is the normal client
ATTACKERS = [f"bmasatk{i:02d}" for i in range(1, 17)]
SETTLE_BEFORE_KILL_S = 10  # AS2 a: jobs run this long before slurmctld is killed
IO_TIMEOUT_S = 10        # the agent's defaults, given explicitly
CAP_PER_UID = 64
AGENT_WIDE_CAP = 8192    # kMaxConnections in src/agent/agent.cc (below it when fds are short)
EXTRA = 8                # each idle attacker tries to hold this many more than the per-uid cap
PHASE_S = 5 if QUICK else 20
PHASE_JOBS = 2 if QUICK else 5
CLK = os.sysconf("SC_CLK_TCK")

# ---- helpers -------------------------------------------------------------------------------------


def busy_cpu_seconds():
    """CPU time the whole machine has spent busy since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / CLK


def niced_cpu():
    """{pid: (cpu seconds, comm)} of every process running at a nice value above 0 (the
    fuzzers at 19, other engineers' builds at 10)."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:
            continue
        fields = tail.split()
        if int(fields[16]) > 0:
            out[p] = ((int(fields[11]) + int(fields[12])) / CLK, head.split("(", 1)[1])
    return out


proc_cpu = run.proc_cpu_seconds


def host_commands():
    """{pid: command line with spaces} of every host process."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        if raw:
            out[int(p)] = raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    return out


def running(needles):
    """The needles ("sleep 4101") some host process's command line is exactly, with its pids."""
    want = set(needles)
    found = {}
    for pid, cmd in host_commands().items():
        if cmd in want:
            found.setdefault(cmd, []).append(pid)
    return found


def job_cgroups():
    """Job ids of the bmas-job-<id> cgroups left in any workspace, in any hierarchy."""
    ids = set()
    for ws in glob.glob("/sys/fs/cgroup/*/lxc.payload.ws-*"):
        for d in glob.glob(ws + "/bmas-job-*") + glob.glob(ws + "/*/bmas-job-*"):
            m = re.search(r"bmas-job-(\d+)$", d)
            if m:
                ids.add(int(m.group(1)))
    return ids


def metric_values(text):
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(bmas_agent_[a-z_]+) (\S+)$", text, re.M)}


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self.path)


# ---- the cluster: LXD, Slurm, the agent ----------------------------------------------------------


class Cluster:
    """A private LXD (`bmas lxd up`), the busybox image, the local Slurm cluster (`bmas slurm
    up`) and `bmas agent`, all under one temporary directory (711: containers' root must get
    through to their root file systems). bmas runs from a copy, so that a rebuild of build/bmas
    during the run changes nothing."""

    def __init__(self):
        self.top = tempfile.mkdtemp(prefix="bmas-agent-bench-", dir="/tmp")
        os.chmod(self.top, 0o711)
        self.state = os.path.join(self.top, "state")
        self.lxd_dir = os.path.join(self.top, "lxd")
        self.config = os.path.join(self.top, "bmas.toml")
        with open(self.config, "w") as f:
            f.write(f'[lxd]\ndir = "{self.lxd_dir}"\npool_size = "4GiB"\n')
        os.chmod(self.config, 0o644)
        self.bmas_path = os.path.join(self.top, "bmas")
        shutil.copy2(BMAS, self.bmas_path)
        os.chmod(self.bmas_path, 0o755)
        self.env = dict(os.environ, LXD_DIR=self.lxd_dir)
        self.lxd_socket = os.path.join(self.lxd_dir, "unix.socket")
        self.made = set()      # users whose workspace this run created
        self.slurm = False
        self.agent = None
        self.agent_args = None
        self.metrics_url = None
        self.agent_log = os.path.join(self.top, "agent.log")
        self.extra_ctld = None  # a slurmctld this script started again by hand (AS2 a)

    def bmas(self, *args):
        return [self.bmas_path, "--config", self.config, "--state-dir", self.state, *args]

    def run(self, cmd, check=True, timeout=180):
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-500:]}")
        return r

    def as_user(self, user, *args):
        return lb.as_user(self, user, *args)

    def slurm_env(self):
        return dict(os.environ, SLURM_CONF=os.path.join(self.state, "slurm", "etc", "slurm.conf"))

    def up(self):
        self.run(self.bmas("lxd", "up"))
        self.lxd_pid()  # says so when an LXD already answered on this socket
        self.image = self.run(self.bmas("image", "build", "--base", "busybox")).stdout.strip()
        self.run(self.bmas("slurm", "up"))
        self.slurm = True
        for u in USERS:
            self.run(self.bmas("workspace", "create", u))
            self.made.add(u)
        self.agent_args = self.bmas("agent", "--reconcile-interval", "0.5", "--metrics-port", "0",
                                    "--io-timeout", str(IO_TIMEOUT_S),
                                    "--max-connections-per-uid", str(CAP_PER_UID))
        self.start_agent()

    def lxd_pid(self):
        with open(os.path.join(self.state, "lxd.json")) as f:
            started = [d["pid"] for d in json.load(f)["started"] if d["name"] == "lxd"]
        if not started:
            raise RuntimeError("an LXD already answers on this run's socket: bmas lxd up started none")
        return started[-1]

    def ctld_pid(self):
        if self.extra_ctld is not None:
            return self.extra_ctld.pid
        with open(os.path.join(self.state, "slurm", "local.json")) as f:
            return next(d["pid"] for d in json.load(f)["daemons"] if d["name"] == "slurmctld")

    def start_agent(self):
        log = open(self.agent_log, "a")
        self.agent = subprocess.Popen(self.agent_args, env=self.env, stdout=subprocess.PIPE,
                                      stderr=log, text=True)
        log.close()
        deadline = time.monotonic() + 20
        self.metrics_url = None
        while time.monotonic() < deadline:
            line = self.agent.stdout.readline()
            if not line:
                break
            m = re.search(r"metrics listening on (\S+)", line)
            if m:
                self.metrics_url = m.group(1)
                break
        if self.metrics_url is None:
            raise RuntimeError("bmas agent did not say it was listening: " + open(self.agent_log).read()[-500:])
        threading.Thread(target=self.agent.stdout.read, daemon=True).start()  # keep the pipe drained

    def stop_agent(self):
        if self.agent is None:
            return
        if self.agent.poll() is None:
            self.agent.terminate()
            try:
                self.agent.wait(15)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()
        self.agent = None

    def metrics(self):
        try:
            # The agent's operator listener asks for the operator secret (the agent made it).
            with open(os.path.join(self.state, "run", "operator.secret")) as f:
                request = urllib.request.Request(self.metrics_url + "/metrics",
                                                 headers={"Authorization": "Bearer " + f.read().strip()})
            return metric_values(urllib.request.urlopen(request, timeout=5).read().decode())
        except OSError:
            return {}

    def lxd_get(self, path):
        """LXD's answer's metadata; None when LXD does not answer."""
        try:
            c = UnixHTTP(self.lxd_socket)
            c.request("GET", path)
            body = json.loads(c.getresponse().read())
            c.close()
            return body.get("metadata")
        except (OSError, ValueError, http.client.HTTPException):
            return None

    def job_devices(self):
        """{job id: ["instance/device", ...]} of the bmas GPU devices (bmas-j<job>-<node>-gpu<i>)
        in any instance; None when LXD does not answer."""
        instances = self.lxd_get("/1.0/instances?recursion=1")
        if instances is None:
            return None
        out = {}
        for inst in instances:
            for name in inst.get("devices", {}):
                m = re.match(r"bmas-j(\d+)-.+-gpu\d+$", name)
                if m:
                    out.setdefault(int(m.group(1)), []).append(f"{inst['name']}/{name}")
        return out

    def nvidia_in_workspaces(self):
        """{instance: [nvidia nodes in its /dev]}, seen from the host through its init's root."""
        out = {}
        for inst in self.lxd_get("/1.0/instances?recursion=1") or []:
            st = self.lxd_get(f"/1.0/instances/{inst['name']}/state") or {}
            pid = st.get("pid") or 0
            if pid > 0:
                try:
                    nodes = [d for d in os.listdir(f"/proc/{pid}/root/dev") if d.startswith("nvidia")]
                except OSError:
                    continue
                if nodes:
                    out[inst["name"]] = nodes
        return out

    def job_states(self, ids):
        """{id: (state, exit code)} from scontrol; {} when slurmctld does not answer."""
        out = {}
        for i in ids:
            r = subprocess.run(["scontrol", "-o", "show", "job", str(i)], env=self.slurm_env(),
                               capture_output=True, text=True, timeout=15)
            m = re.search(r"JobState=(\S+)", r.stdout)
            e = re.search(r" ExitCode=(\S+)", r.stdout)
            if m:
                out[i] = (m.group(1), e.group(1) if e else "?")
        return out

    def down(self):
        """Cancels what runs, stops the agent, Slurm and LXD, deletes the workspaces and removes
        the directory. Returns what it could not do."""
        problems = []
        if self.slurm:
            for u in USERS:
                subprocess.run(["scancel", "--user", u], env=self.slurm_env(), capture_output=True, timeout=30)
        self.stop_agent()
        if self.slurm:
            r = self.run(self.bmas("slurm", "down"), check=False)
            if r.returncode != 0:
                problems.append(f"bmas slurm down: {r.stderr.strip()[-300:]}")
        if self.extra_ctld is not None:
            if self.extra_ctld.poll() is None:
                self.extra_ctld.terminate()
                try:
                    self.extra_ctld.wait(20)
                except subprocess.TimeoutExpired:
                    self.extra_ctld.kill()
                    self.extra_ctld.wait()
        if os.path.exists(os.path.join(self.state, "lxd.json")):
            for u in sorted(self.made):
                r = self.run(self.bmas("workspace", "delete", u), check=False)
                if r.returncode != 0:
                    problems.append(f"workspace delete {u}: {r.stderr.strip()[-200:]}")
        r = self.run(self.bmas("lxd", "down"), check=False)
        if r.returncode != 0:
            problems.append(f"bmas lxd down: {r.stderr.strip()[-300:]}")
        with open("/proc/self/mounts") as f:
            left = [l.split()[1] for l in f if l.split()[1].startswith(self.top + "/")]
        for point in sorted(left, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)
        shutil.rmtree(self.top, ignore_errors=True)
        return problems


# ---- AS1. Idle and slow connections ------------------------------------------------------------

# Runs as an attacker user: holds `want` connections to the agent's socket. "idle" ones send
# nothing; "slow" ones send one byte SLOW seconds after connecting (just before the agent's
# deadline); "drip" ones send one byte every SLOW seconds. A connection the agent closes
# (EOF: dropped at its deadline; or a reply: refused) is opened again at once, one refused as
# over the cap after 1 s. Each line on stdin is answered with the counts, as JSON; EOF ends it.


# ---- the attackers: connections to the agent that send nothing, or next to nothing ----------

ATTACKER = r'''
import json, os, selectors, socket, sys, time
path, mode, want, slow = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
sel = selectors.DefaultSelector()
sel.register(0, selectors.EVENT_READ, None)
st = {"opened": 0, "connect_failed": 0, "refused_cap": 0, "refused_other": 0, "dropped": 0, "bytes_sent": 0}
conns = {}
pending = [0.0] * want
def open_one(now):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.setblocking(False)
    try:
        s.connect(path)
    except OSError:
        s.close()
        st["connect_failed"] += 1
        pending.append(now + 0.1)
        return
    st["opened"] += 1
    conns[s] = now + slow if mode != "idle" else None
    sel.register(s, selectors.EVENT_READ, s)
def closed(s, now, kind):
    sel.unregister(s)
    s.close()
    del conns[s]
    st[kind] += 1
    pending.append(now + (1.0 if kind == "refused_cap" else 0.0))
while True:
    now = time.monotonic()
    due = [t for t in pending if t <= now]
    pending = [t for t in pending if t > now]
    for _ in due:
        open_one(now)
    for s, at in list(conns.items()):
        if at is not None and at <= now:
            try:
                s.send(b"{")
                st["bytes_sent"] += 1
            except OSError:
                pass
            conns[s] = now + slow if mode == "drip" else None
    for key, _ in sel.select(0.05):
        if key.data is None:
            if not os.read(0, 4096):
                sys.exit(0)
            st["open"] = len(conns)
            sys.stdout.write(json.dumps(st) + "\n")
            sys.stdout.flush()
            continue
        s = key.data
        try:
            data = s.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if not data:
            closed(s, now, "dropped")
        elif b"too many connections" in data:
            closed(s, now, "refused_cap")
        else:
            closed(s, now, "refused_other")
'''

COUNTS = ("opened", "connect_failed", "refused_cap", "refused_other", "dropped", "bytes_sent")


class Attacker:
    def __init__(self, cluster, user, mode, want, slow=0.0):
        self.user, self.mode, self.want = user, mode, want
        sock = os.path.join(cluster.state, "run", "agent.sock")
        self.proc = subprocess.Popen(
            ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "/usr/bin/python3", "-c",
             ATTACKER, sock, mode, str(want), str(slow)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")

    def stats(self):
        try:
            self.proc.stdin.write("s\n")
            self.proc.stdin.flush()
            return json.loads(self.proc.stdout.readline())
        except (OSError, ValueError):
            return {k: 0 for k in COUNTS + ("open",)}

    def stop(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Sampler:
    """The agent's fds, RSS, threads and open connections (its gauge), every 0.5 s."""

    def __init__(self, cluster):
        self.c, self.samples = cluster, []
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        pid = self.c.agent.pid
        while not self.stop_ev.is_set():
            try:
                fds = len(os.listdir(f"/proc/{pid}/fd"))
                rss = lb.status_kb(pid, "VmRSS")
                threads = lb.status_kb(pid, "Threads")
            except (OSError, StopIteration):
                break
            conns = self.c.metrics().get("bmas_agent_connections", float("nan"))
            self.samples.append((fds, rss, threads, conns))
            self.stop_ev.wait(0.5)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        self.thread.join()
