#!/usr/bin/env python3
"""Runs bmas gateway's benchmarks and writes them into bench/RESULTS.md under "# Gateway benchmarks".

Usage: bench/gateway_bench.py [BUILD_DIR] [--quick] [--only 1,2,3,4 [--record]]
                              [--gateway-binary PATH] [--client openai]

Every figure is measured by this script, beside the command that produced it; only that
heading's section is replaced: the engine's above it (bench/run.py) and Slurm's after it
(bench/slurm_bench.py) are kept. --quick shortens every run
(for trying the script out); --only runs the listed benchmarks and prints them without
touching RESULTS.md, unless --record is given too: then only the listed sections are
replaced there. Needs wrk and nginx (`bash scripts/install-deps.sh --bench`).
--gateway-binary PATH runs the gateway from another build (the engine and the tools stay
BUILD_DIR's): an A/B of the gateway alone, e.g. against a build of an earlier commit.
"""
import json
import os
import platform
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

QUICK = "--quick" in sys.argv
RECORD = "--record" in sys.argv
sys.argv = [a for a in sys.argv if a != "--record"]
ONLY = None
if "--only" in sys.argv:
    i = sys.argv.index("--only")
    ONLY = {int(x) for x in sys.argv[i + 1].split(",")}
    del sys.argv[i:i + 2]  # run.py reads BUILD_DIR from the other arguments
# --client openai: wrk sends the head the `openai` npm client sends (bench/wrk_completion.lua);
# G1 then goes to a section of its own.
CLIENT = "wrk"
if "--client" in sys.argv:
    i = sys.argv.index("--client")
    CLIENT = sys.argv[i + 1]
    del sys.argv[i:i + 2]
GATEWAY_BINARY = None
if "--gateway-binary" in sys.argv:
    i = sys.argv.index("--gateway-binary")
    GATEWAY_BINARY = os.path.abspath(sys.argv[i + 1])
    del sys.argv[i:i + 2]

import run  # noqa: E402  bench/run.py: Engine, ROOT, BMAS, LOADGEN, MODEL
ROOT, BMAS, LOADGEN, MODEL = run.ROOT, run.BMAS, run.LOADGEN, run.MODEL
WRK_SCRIPT = os.path.join(ROOT, "bench", "wrk_completion.lua")
HEADING = "# Gateway benchmarks"
LLAMA = "llama-3.1-8b-h100"

started_processes = []  # stopped at the end, whatever happens
temporary_dirs = []  # removed at the end


def cpu_split(pid):
    """(utime, stime) of a process (all its threads) in seconds, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / os.sysconf("SC_CLK_TCK"), int(fields[12]) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), from /proc/PID/stat."""
    return sum(cpu_split(pid))


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def http_get(url, key=None, timeout=5):
    request = urllib.request.Request(url)
    if key:
        request.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def metric_sum(text, name, labels=""):
    """Sum of the samples of `name` whose label set contains every `k="v"` in labels."""
    total = 0.0
    wanted = re.findall(r'(\w+="[^"]*")', labels)
    for m in re.finditer(rf"^{re.escape(name)}(?:{{([^}}]*)}})? (\S+)$", text, re.M):
        if all(w in (m.group(1) or "") for w in wanted):
            total += float(m.group(2))
    return total


def busy_cpu_seconds():
    """CPU time the whole machine has spent busy since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def own_cpu_seconds():
    """CPU time of this script and of every process it started and waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def engine(*args):
    e = run.Engine(*args)
    started_processes.append(e.proc)
    return e


def stop(proc, sig=signal.SIGTERM):
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class State:
    """A state directory with users and their keys (`bmas user add`, `bmas key create`)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="bmas-bench-state-")
        temporary_dirs.append(self.dir)
        self.env = dict(os.environ, BMAS_STATE_DIR=self.dir)
        self.keys = {}

    def add_user(self, name, weight=None):
        args = [BMAS, "user", "add", name] + (["--weight", str(weight)] if weight else [])
        subprocess.run(args, env=self.env, check=True, capture_output=True)
        self.keys[name] = subprocess.run([BMAS, "key", "create", name], env=self.env, check=True,
                                         capture_output=True, text=True).stdout.strip()
        return self.keys[name]

    def operator_secret(self):
        """The secret the gateway's operator listener asks for (the gateway makes it)."""
        with open(os.path.join(self.dir, "run", "operator.secret")) as f:
            return f.read().strip()


class Gateway:
    """A `bmas gateway` process (one worker thread) in front of `engines`, ready to serve."""

    def __init__(self, state, engines, *args, key):
        backends = [x for e in engines for x in ("--backend", e.url)]
        self.state = state
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([GATEWAY_BINARY or BMAS, "gateway", "--port", "0", *backends, *args],
                                     env=state.env,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        started_processes.append(self.proc)
        # "metrics on URL/metrics" (the operator listener), then "listening on URL".
        self.metrics_url = None
        while True:
            line = self.proc.stdout.readline()
            m = re.search(r"(http://\S+)", line)
            if not m:
                raise RuntimeError("gateway did not start")
            if "metrics on" in line:
                self.metrics_url = m.group(1)
                continue
            self.url = m.group(1)
            break
        self.command = " ".join(["BMAS_STATE_DIR=STATE build/bmas gateway --port 0",
                                 *(["--backend URL"] * len(engines)), *args])
        # Serves once every backend has passed its first health check.
        deadline = time.time() + 20
        while True:
            healthy = metric_sum(self.metrics(), "bmas_gateway_backend_healthy")
            if healthy == len(engines) and http_get(self.url + "/v1/models", key)[0] == 200:
                break
            if time.time() > deadline:
                raise RuntimeError(f"gateway not ready: {healthy} of {len(engines)} backends healthy")
            time.sleep(0.1)

    def metrics(self):
        return http_get(self.metrics_url, key=self.state.operator_secret())[1]

    def cpu_seconds(self):
        return cpu_seconds(self.proc.pid)

    def cpu_split(self):
        return cpu_split(self.proc.pid)

    def peak_mb(self):
        return status_kb(self.proc.pid, "VmHWM") / 1024

    def wait_idle(self, timeout=60):
        """Waits until no request is in flight to any backend."""
        deadline = time.time() + timeout
        while metric_sum(self.metrics(), "bmas_gateway_backend_in_flight") > 0:
            if time.time() > deadline:
                raise RuntimeError("gateway still has requests in flight")
            time.sleep(0.2)

    def stop(self):
        stop(self.proc)


class Nginx:
    """nginx as a plain reverse proxy in front of one engine: 1 worker, upstream keep-alive."""

    def __init__(self, engine_url):
        self.dir = tempfile.mkdtemp(prefix="bmas-bench-nginx-")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        upstream = engine_url.removeprefix("http://")
        # As root, nginx's workers would switch to nobody; they stay the current user.
        user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""
        d = self.dir
        self.config = (
            f"{user}worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n"
            "events { worker_connections 4096; }\n"
            "http {\n"
            f"  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n"
            f"  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n"
            "  keepalive_requests 1000000;\n"
            f"  upstream engine {{ server {upstream}; keepalive 64; keepalive_requests 1000000; }}\n"
            "  server {\n"
            f"    listen 127.0.0.1:{port};\n"
            "    location / {\n"
            "      proxy_pass http://engine;\n"
            "      proxy_http_version 1.1;\n"
            '      proxy_set_header Connection "";\n'
            "      proxy_buffering off;\n"
            "    }\n  }\n}\n")
        self.path = os.path.join(d, "nginx.conf")
        with open(self.path, "w") as f:
            f.write(self.config)
        self.proc = subprocess.Popen(["nginx", "-c", self.path, "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started_processes.append(self.proc)
        deadline = time.time() + 10
        while http_get(self.url + "/v1/models")[0] != 200:
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("nginx did not start: " + open(os.path.join(d, "error.log")).read())
            time.sleep(0.05)

    def pids(self):
        """The master and its workers."""
        pids = [self.proc.pid]
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                            pids.append(int(entry))
                except OSError:
                    pass
        return pids

    def cpu_seconds(self):
        return sum(cpu_seconds(p) for p in self.pids())

    def cpu_split(self):
        splits = [cpu_split(p) for p in self.pids()]
        return sum(u for u, _ in splits), sum(s for _, s in splits)

    def stop(self):
        stop(self.proc, signal.SIGQUIT)
        shutil.rmtree(self.dir, ignore_errors=True)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wrk(url, connections, seconds, key):
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", WRK_SCRIPT, url + "/v1/completions"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, BMAS_BENCH_KEY=key,
                                                                            BMAS_BENCH_CLIENT=CLIENT))
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stdout} {out.stderr}")
    result = json.loads(lines[-1])
    if result["status_errors"] or result["socket_errors"]:
        raise RuntimeError(f"{' '.join(cmd)}: errors: {result}")
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    shown = ("BMAS_BENCH_CLIENT=openai " if CLIENT == "openai" else "") + f"BMAS_BENCH_KEY=KEY wrk -t1 -c{connections} -d{seconds}s -s bench/wrk_completion.lua URL/v1/completions"
    return result, shown


def loadgen_command(url, args):
    """The command, and how RESULTS.md shows it: keys as KEY1 ... KEYn, temporary paths as PROMPT_DIR."""
    cmd = [LOADGEN, "--url", url, "--model", MODEL, "--json", *args]
    shown = [re.sub(r"^/tmp/\S*", "PROMPT_DIR", a) for i, a in enumerate(args)
             if a != "--api-key" and (i == 0 or args[i - 1] != "--api-key")]
    n = args.count("--api-key")
    shown += [] if n == 0 else ["--api-key KEY1"] if n == 1 else [f"--api-key KEY1 ... --api-key KEY{n}"]
    return cmd, " ".join(["build/bench/bmas_loadgen --url URL --model", MODEL, "--json", *shown])


def start_loadgen(url, *args):
    cmd, shown = loadgen_command(url, args)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), shown


def finish_loadgen(proc):
    out, err = proc.communicate()
    if not out.strip():
        raise RuntimeError(f"bmas_loadgen failed: {err}")
    result = json.loads(out)
    if result["requests_failed"]:
        raise RuntimeError(f"bmas_loadgen: {result['requests_failed']} requests failed: {result['first_error']}")
    return result


def loadgen(url, *args):
    proc, shown = start_loadgen(url, *args)
    return finish_loadgen(proc), shown


# ---- 1. Overhead -------------------------------------------------------------------------------

def cpu_snapshot(proxy, eng):
    """CPU seconds so far: the proxy's user and system time (0 without a proxy), the engine's,
    wrk's (the children this script has waited for: wrk is the only one that ends during a run),
    and the whole machine's busy time."""
    user, system = proxy.cpu_split() if proxy else (0.0, 0.0)
    t = os.times()
    return {"user": user, "system": system, "engine": eng.cpu_seconds(),
            "wrk": t.children_user + t.children_system, "busy": busy_cpu_seconds()}


def overhead():
    seconds, rounds = (2, 2) if QUICK else (3, 5)
    eng = engine("--profile", "instant")
    state = State()
    key = state.add_user("bench")
    gw = Gateway(state, [eng], key=key)
    ngx = Nginx(eng.url)
    targets = [("direct", eng.url, None), ("nginx", ngx.url, ngx), ("bmas gateway", gw.url, gw)]
    # Rounds alternate the targets, so that a slow spell of the machine hits them alike; a row
    # adds its rounds' requests, time and CPU, and averages their percentiles.
    results, shown = {}, ""
    for connections in (1, 32):
        for name, url, proxy in targets:
            wrk(url, connections, 1, key)  # warm-up: connections, upstream pools
        for _ in range(rounds):
            for name, url, proxy in targets:
                before = cpu_snapshot(proxy, eng)
                r, shown_cmd = wrk(url, connections, seconds, key)
                after = cpu_snapshot(proxy, eng)
                r.update({k: after[k] - before[k] for k in after})
                results.setdefault((name, connections), []).append(r)
                if len(results[(name, connections)]) == 1:
                    shown += f"{shown_cmd}   # URL: {name}; {rounds} rounds, alternating\n"
    raw = dict(results)
    for k, rs in raw.items():
        requests = sum(r["requests"] for r in rs)
        seconds_run = sum(r["duration_us"] for r in rs) / 1e6

        def per_request_us(field):
            return sum(r[field] for r in rs) * 1e6 / requests

        results[k] = {"requests": requests,
                      "rps": requests / seconds_run,
                      "p50_us": sum(r["p50_us"] for r in rs) / len(rs),
                      "p99_us": sum(r["p99_us"] for r in rs) / len(rs),
                      "cpu_us": per_request_us("user") + per_request_us("system") if k[0] != "direct" else None,
                      "user_us": per_request_us("user"), "system_us": per_request_us("system"),
                      "engine_us": per_request_us("engine"), "wrk_us": per_request_us("wrk"),
                      "busy": sum(r["busy"] for r in rs) / (seconds_run * os.cpu_count())}
    nginx_config = ngx.config
    gw_command = gw.command
    ngx.stop()
    gw.stop()
    eng.stop()

    g32, n32 = results[("bmas gateway", 32)], results[("nginx", 32)]
    g1, n1, d1 = results[("bmas gateway", 1)], results[("nginx", 1)], results[("direct", 1)]
    rps_ratio = g32["rps"] / n32["rps"]
    added_ms = (g1["p50_us"] - d1["p50_us"]) / 1e3
    added_p99_ms = (g1["p99_us"] - d1["p99_us"]) / 1e3
    cpu_ratio = g32["cpu_us"] / n32["cpu_us"]
    rows = ["| target | connections | requests/s | p50 (ms) | p99 (ms) | proxy CPU per request (µs) |",
            "|---|---:|---:|---:|---:|---:|"]
    for (name, c), r in results.items():
        cpu = "" if r["cpu_us"] is None else f"{r['cpu_us']:.1f}"
        rows.append(f"| {name} | {c} | {r['rps']:.0f} | {r['p50_us'] / 1e3:.3f} | {r['p99_us'] / 1e3:.3f} | {cpu} |")
    rows += ["", "CPU per request at 32 connections, by process (µs; wrk's from the children this script waited for, "
             "the others from /proc/PID/stat), and how busy the machine's cores were:", "",
             "| target | wrk | engine | proxy, user | proxy, system | all three | cores busy |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, _, _ in targets:
        r = results[(name, 32)]
        everything = r["wrk_us"] + r["engine_us"] + r["user_us"] + r["system_us"]
        rows.append(f"| {name} | {r['wrk_us']:.1f} | {r['engine_us']:.1f} | {r['user_us']:.1f} | "
                    f"{r['system_us']:.1f} | {everything:.1f} | {r['busy'] * 100:.0f}% |")
    # Each round's gateway run against the nginx run just before it: a slow spell of the machine
    # lasts longer than one round and moves both alike.
    pairs = list(zip(raw[("bmas gateway", 32)], raw[("nginx", 32)]))
    rps_rounds = sorted(g["requests"] / g["duration_us"] / (n["requests"] / n["duration_us"]) for g, n in pairs)
    cpu_rounds = sorted((g["user"] + g["system"]) / g["requests"] / ((n["user"] + n["system"]) / n["requests"])
                        for g, n in pairs)

    def median(xs):
        return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2

    def spread(xs):
        return f"median {median(xs):.2f}x, rounds {', '.join(f'{x:.2f}' for x in xs)}"

    config_lines = "\n".join(l for l in nginx_config.splitlines() if "temp_path" not in l and "pid " not in l
                             and "error_log" not in l and not l.startswith("user "))
    text = (f"Non-streaming `/v1/completions`, an 8-word prompt, `max_tokens` 16, against `bmas engine --profile instant` "
            f"(no model time: what is measured is HTTP and proxying). Each row: {rounds} runs of {seconds} s, alternating "
            f"with the other targets, after 1 s of warm-up; wrk, "
            f"the engine and the proxy share the machine's 2 cores. nginx: `nginx -c DIR/nginx.conf -g 'daemon off;'` "
            f"as the current user, with this configuration (plus pid, log and temp paths in DIR):\n\n```nginx\n{config_lines}\n```\n\n"
            f"Gateway/nginx requests/s at 32 connections: **{rps_ratio:.2f}x** (target >= 1.1x). "
            f"Gateway p99 added at 1 connection over direct: **{added_p99_ms:.3f} ms** (target < 1 ms; nginx adds "
            f"{(n1['p99_us'] - d1['p99_us']) / 1e3:.3f} ms); p50 added: {added_ms:.3f} ms (nginx: "
            f"{(n1['p50_us'] - d1['p50_us']) / 1e3:.3f} ms). CPU per request at 32 connections, gateway/nginx: "
            f"**{cpu_ratio:.2f}x** ({g32['cpu_us']:.1f} against {n32['cpu_us']:.1f} µs; target <= 1.0x). Proxy CPU is "
            "utime + stime from /proc/PID/stat over the run (nginx: master and worker) divided by requests. "
            f"The kernel's part of it: {g32['system_us']:.1f} µs for the gateway, {n32['system_us']:.1f} µs for nginx "
            f"({n32['system_us'] / n32['cpu_us'] * 100:.0f}% of nginx's CPU per request); the cores were "
            f"{n32['busy'] * 100:.0f}% busy with nginx, {g32['busy'] * 100:.0f}% with the gateway. "
            f"Round by round, each gateway run against the nginx run before it: requests/s {spread(rps_rounds)}; "
            f"CPU per request {spread(cpu_rounds)}.")
    if CLIENT == "openai":
        text = ("wrk sends the head the `openai` npm client sends (4.104.0 on Node 20, as captured from it: "
                "sixteen fields, where wrk alone sends four; `BMAS_BENCH_CLIENT=openai`, bench/wrk_completion.lua). "
                + text)
        return ("G1o. Overhead with the openai npm client's head: direct vs nginx vs bmas gateway",
                f"build/bmas engine --port 0 --profile instant\n{gw_command}\n{shown.rstrip()}", text, rows)
    return ("G1. Overhead: direct vs nginx vs bmas gateway, in front of an instant engine",
            f"build/bmas engine --port 0 --profile instant\n{gw_command}\n{shown.rstrip()}", text, rows)


# ---- 2. Many streams -------------------------------------------------------------------------

def many_streams():
    ramp_s, seconds = (3, 7) if QUICK else (10, 30)
    args = ["--concurrency", "1000", "--ramp-up", str(ramp_s), "--duration", str(seconds), "--max-tokens", "256",
            "--prompt-words", "128"]
    state = State()
    key = state.add_user("bench")

    eng = engine("--profile", LLAMA, "--max-num-seqs", "1024")
    gw = Gateway(state, [eng], key=key)
    direct, cmd_direct = loadgen(eng.url, *args, "--seed", "1")
    cpu0, t0 = gw.cpu_seconds(), time.time()
    via, cmd_via = loadgen(gw.url, *args, "--seed", "2", "--api-key", key)
    via_cores = (gw.cpu_seconds() - cpu0) / (time.time() - t0)
    via_peak = gw.peak_mb()
    again, _ = loadgen(eng.url, *args, "--seed", "3")
    gw.stop()
    eng.stop()

    engines = [engine("--profile", LLAMA), engine("--profile", LLAMA)]
    gw2 = Gateway(state, engines, key=key)
    idle_mb = gw2.peak_mb()
    cpu0, t0 = gw2.cpu_seconds(), time.time()
    two, cmd_two = loadgen(gw2.url, *args, "--seed", "4", "--api-key", key)
    two_cores = (gw2.cpu_seconds() - cpu0) / (time.time() - t0)
    two_peak = gw2.peak_mb()
    gw2_command = gw2.command
    gw2.stop()
    for e in engines:
        e.stop()

    added_p99 = via["ttft_p99_ms"] - direct["ttft_p99_ms"]
    noise_p99 = again["ttft_p99_ms"] - direct["ttft_p99_ms"]
    rows = ["| path | requests counted | output tok/s | TTFT p50 (ms) | TTFT p99 (ms) | ITL p99 (ms) | gateway peak RSS (MB) | gateway CPU (cores) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label, r, peak, cores in (("direct to one engine", direct, None, None),
                                  ("gateway, that engine", via, via_peak, via_cores),
                                  ("direct again (noise floor)", again, None, None),
                                  ("gateway, two engines", two, two_peak, two_cores)):
        rows.append(f"| {label} | {r['requests_ok']} | {r['output_tokens_per_s']:.0f} | {r['ttft_p50_ms']:.1f} | "
                    f"{r['ttft_p99_ms']:.1f} | {r['itl_p99_ms']:.2f} | {'' if peak is None else f'{peak:.1f}'} | "
                    f"{'' if cores is None else f'{cores:.2f}'} |")
    text = (f"1,000 streaming clients, started evenly over {ramp_s} s and then measured for {seconds} s (requests "
            f"sent during the ramp-up are not counted), 128-word prompts, 256 output tokens. Gateway peak memory "
            f"(VmHWM from /proc/PID/status) in front of two engines: **{two_peak:.1f} MB** (target: under 64 MB; "
            f"{idle_mb:.1f} MB once started, before the load). TTFT p99 through the gateway to one engine minus "
            f"direct to the same engine: **{added_p99:+.1f} ms** ({via['ttft_p99_ms']:.1f} against "
            f"{direct['ttft_p99_ms']:.1f} ms; target: under 1 ms); the same load direct a second time differs from "
            f"the first by {noise_p99:+.1f} ms, the noise floor of this comparison. Each run has its own --seed, "
            "so none finds another's prompts in the prefix cache. The load client, the gateway and the engines "
            "share 2 cores.")
    command = (f"build/bmas engine --port 0 --profile {LLAMA} --max-num-seqs 1024\n"
               f"BMAS_STATE_DIR=STATE build/bmas gateway --port 0 --backend URL\n{cmd_direct}   # direct\n"
               f"{cmd_via}   # through the gateway\n{cmd_direct.replace('--seed 1', '--seed 3')}   # direct again\n"
               f"build/bmas engine --port 0 --profile {LLAMA}   # twice\n{gw2_command}\n{cmd_two}")
    return ("G2. Many streams: 1,000 concurrent streaming clients through the gateway", command, text, rows)


# ---- 3. Noisy neighbour ------------------------------------------------------------------------

def noisy_neighbour():
    light_s = 8 if QUICK else 20
    warm_s = 3
    state = State()
    light_keys = [state.add_user(f"light{i:02d}") for i in range(16)]
    heavy_key = state.add_user("heavy")
    w1_key, w2_key = state.add_user("w1", 1), state.add_user("w2", 2)
    engines = [engine("--profile", LLAMA, "--max-num-seqs", "32") for _ in range(2)]

    light = ["--concurrency", "16", "--duration", str(light_s), "--think-ms", "500", "--max-tokens", "16",
             "--prompt-words", "64"] + [x for k in light_keys for x in ("--api-key", k)]
    heavy = ["--concurrency", "128", "--duration", str(light_s + warm_s + 2), "--max-tokens", "1024",
             "--prompt-words", "64", "--api-key", heavy_key]
    runs, commands, seed = {}, [], 0
    for fairness in ("vtc", "none"):
        gw = Gateway(state, engines, "--fairness", fairness, key=heavy_key)
        commands.append(gw.command)
        if fairness == "vtc":
            seed += 1
            runs["alone"], cmd = loadgen(gw.url, *light, "--seed", str(seed))
            commands.append(cmd + "   # light users alone")
        heavy_proc, heavy_cmd = start_loadgen(gw.url, *heavy)
        time.sleep(warm_s)
        seed += 1
        runs[fairness], cmd = loadgen(gw.url, *light, "--seed", str(seed))
        commands += [heavy_cmd + f"   # heavy user; after {warm_s} s:", cmd + "   # light users; then the heavy client is killed"]
        stop(heavy_proc)  # its streams are cut; the gateway aborts them upstream
        gw.wait_idle()
        gw.stop()

    # Two backlogged users with weights 1 and 2.
    window_s = 8 if QUICK else 20
    gw = Gateway(state, engines, "--fairness", "vtc", key=w1_key)
    weighted = ["--concurrency", "128", "--duration", str(warm_s + window_s + 1), "--max-tokens", "128",
                "--prompt-words", "64"]
    p1, cmd1 = start_loadgen(gw.url, *weighted, "--api-key", w1_key)
    p2, cmd2 = start_loadgen(gw.url, *weighted, "--api-key", w2_key)
    time.sleep(warm_s)
    m0 = gw.metrics()
    time.sleep(window_s)
    m1 = gw.metrics()
    finish_loadgen(p1)
    finish_loadgen(p2)
    gw.stop()
    for e in engines:
        e.stop()
    commands += [gw.command, cmd1.replace("KEY1", "KEY_W1") + "   # weight 1", cmd2.replace("KEY1", "KEY_W2") + "   # weight 2, at the same time"]

    def completion(m, user):
        return metric_sum(m, "bmas_gateway_tokens_total", f'user="{user}",kind="completion"')

    t1, t2 = completion(m1, "w1") - completion(m0, "w1"), completion(m1, "w2") - completion(m0, "w2")
    share2 = t2 / (t1 + t2)
    ratio = t2 / t1
    alone, vtc, none = runs["alone"], runs["vtc"], runs["none"]
    rows = ["| light users | requests | TTFT p50 (ms) | TTFT p99 (ms) | p99 / alone |", "|---|---:|---:|---:|---:|"]
    for label, r in (("alone", alone), ("with the heavy user, --fairness vtc", vtc), ("with the heavy user, --fairness none", none)):
        rows.append(f"| {label} | {r['requests_ok']} | {r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} | "
                    f"{r['ttft_p99_ms'] / alone['ttft_p99_ms']:.2f}x |")
    rows += ["", "| weighted users (vtc) | weight | completion tokens in the window | share | target share |",
             "|---|---:|---:|---:|---:|",
             f"| w1 | 1 | {t1:.0f} | {100 * (1 - share2):.1f}% | 33.3% |",
             f"| w2 | 2 | {t2:.0f} | {100 * share2:.1f}% | 66.7% |"]
    text = (f"Two engines with `--max-num-seqs 32` (the gateway admits 32 per engine). 16 light users (one key each) "
            f"send one request at a time, 64-word prompts, 16 output tokens, 500 ms think time, for {light_s} s; "
            f"the heavy user keeps 128 streams of 1,024 output tokens open from {warm_s} s before. Light TTFT p99 "
            f"with the heavy user under vtc: **{vtc['ttft_p99_ms'] / alone['ttft_p99_ms']:.2f}x** alone "
            f"({vtc['ttft_p99_ms']:.1f} against {alone['ttft_p99_ms']:.1f} ms; target: within 2x); under "
            f"`--fairness none`: {none['ttft_p99_ms'] / alone['ttft_p99_ms']:.1f}x.\n\n"
            f"Weights: two users, weights 1 and 2, 128 streams of 128 output tokens each; completion tokens from "
            f"the gateway's `bmas_gateway_tokens_total{{kind=\"completion\"}}` over {window_s} s after {warm_s} s "
            f"of warm-up. w2/w1: **{ratio:.2f}** (target: 2 within 10%, 1.8 to 2.2).")
    return ("G3. Noisy neighbour: light users' TTFT beside a heavy user, and weighted shares",
            f"build/bmas engine --port 0 --profile {LLAMA} --max-num-seqs 32   # twice\n" + "\n".join(commands),
            text, rows)


# ---- 4. Shared prompts -------------------------------------------------------------------------

def write_system_prompt(path, words, seed):
    # Words of at most 4 letters: one token each with bmas's tokenizer. Each assistant's
    # prompt differs from its first word.
    vocab = ["node", "gpu", "data", "task", "job", "user", "core", "rack", "link", "port", "file",
             "disk", "ram", "bus", "log", "key", "exam", "unit", "quiz", "labs", "week", "term"]
    state = (seed + 1) * 2654435761 % 2**32
    out = []
    for _ in range(words):
        state = (state * 1103515245 + 12345) % 2**31
        out.append(vocab[(state >> 8) % len(vocab)])
    with open(path, "w") as f:
        f.write(f"Course {seed} helper: " + " ".join(out))


def count_tokens(text):
    """Tokens of `text` under bmas engine's piece rule (src/engine/tokenizer.h), ASCII text."""
    n, i = 0, 0
    while i < len(text):
        if text.startswith("<|", i) and 0 <= text.find("|>", i + 2) <= i + 30:
            i = text.find("|>", i + 2) + 2
        else:
            j = i + 1 if text[i] == " " and i + 1 < len(text) and text[i + 1].isalnum() else i
            if text[j].isalnum():
                k = j
                while k < len(text) and k - j < 4 and text[k].isalnum():
                    k += 1
                i = k
            else:
                i += 1
        n += 1
    return n


def shared_prompts():
    seconds = 10 if QUICK else 30
    prompt_dir = tempfile.mkdtemp(prefix="bmas-bench-prompts-")
    for a in range(16):
        write_system_prompt(os.path.join(prompt_dir, f"assistant{a:02d}.txt"), 1500, a)
    state = State()
    keys = [state.add_user(f"student{i:03d}") for i in range(200)]
    engine_args = ["--profile", LLAMA, "--num-kv-blocks", "640", "--max-model-len", "4096"]
    args = ["--endpoint", "chat", "--system-prompt-dir", prompt_dir, "--concurrency", "200", "--duration",
            str(seconds), "--think-ms", "2000", "--max-tokens", "32", "--prompt-words", "16"]
    args += [x for k in keys for x in ("--api-key", k)]
    runs, commands = {}, []
    policies = ("round_robin", "prefix_affinity", "cache_aware")
    for routing in policies:
        engines = [engine(*engine_args) for _ in range(4)]
        gw = Gateway(state, engines, "--routing", routing, key=keys[0])
        before = [e.metrics() for e in engines]
        result, cmd = loadgen(gw.url, *args)
        after = [e.metrics() for e in engines]
        commands += [gw.command, cmd]
        gw.stop()
        for e in engines:
            e.stop()
        hits = sum(metric_sum(a, "vllm:prefix_cache_hits_total") - metric_sum(b, "vllm:prefix_cache_hits_total")
                   for a, b in zip(after, before))
        queries = sum(metric_sum(a, "vllm:prefix_cache_queries_total") - metric_sum(b, "vllm:prefix_cache_queries_total")
                      for a, b in zip(after, before))
        preempted = sum(metric_sum(a, "vllm:num_preemptions_total") - metric_sum(b, "vllm:num_preemptions_total")
                        for a, b in zip(after, before))
        result.update(hit_rate=hits / queries, preemptions=preempted,
                      per_engine=[metric_sum(a, "vllm:prefix_cache_queries_total") - metric_sum(b, "vllm:prefix_cache_queries_total")
                                  for a, b in zip(after, before)])
        runs[routing] = result
    # The best any placement can do: every assistant's prompt on one engine with room, cached
    # after its first request. Then a request hits the full 16-token blocks of what it shares
    # with the others of its assistant ("<|system|>\nSYSTEM\n<|user|>\n"), and misses the rest
    # (its own question and the template after it); the first request of each assistant misses
    # everything.
    shared = []
    for a in range(16):
        with open(os.path.join(prompt_dir, f"assistant{a:02d}.txt")) as f:
            shared.append(count_tokens("<|system|>\n" + f.read() + "\n<|user|>\n") // 16 * 16)
    shared_mean = sum(shared) / len(shared)
    shutil.rmtree(prompt_dir, ignore_errors=True)
    for r in runs.values():
        r["best_hit_rate"] = shared_mean * (r["requests_ok"] - 16) / (r["prompt_tokens"] or 1)
    rr, pa, ca = runs["round_robin"], runs["prefix_affinity"], runs["cache_aware"]
    prompt_tokens = pa["prompt_tokens"] // max(pa["requests_ok"], 1)
    rows = ["| routing | requests | prefix-cache hit rate | TTFT mean (ms) | TTFT p50 (ms) | TTFT p99 (ms) | preemptions | prompt tokens per engine |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in (("round_robin", rr), ("prefix_affinity", pa), ("cache_aware", ca)):
        spread = " / ".join(f"{q / 1e3:.0f}k" for q in r["per_engine"])
        rows.append(f"| {name} | {r['requests_ok']} | {100 * r['hit_rate']:.1f}% | {r['ttft_mean_ms']:.1f} | "
                    f"{r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} | {r['preemptions']:.0f} | {spread} |")
    text = (f"Four engines, each with 640 KV blocks of 16 tokens (room for about six of the system prompts). "
            f"16 course assistants, each with its own system prompt of ~1,500 tokens (PROMPT_DIR, written by the "
            f"script); 200 users (one key each), user i bound to assistant i % 16, each sending a chat request "
            f"(system prompt + a 16-word question of their own) then thinking 2 s, for {seconds} s; "
            f"{prompt_tokens} prompt tokens per request, 32 output tokens. Fresh engines for each policy. Hit rate: "
            f"the sum over engines of `vllm:prefix_cache_hits_total` over `vllm:prefix_cache_queries_total` "
            f"(tokens), during the run. prefix_affinity against round_robin: hit rate "
            f"**{pa['hit_rate'] / rr['hit_rate']:.2f}x** (target >= 2x), mean TTFT **{pa['ttft_mean_ms'] / rr['ttft_mean_ms']:.2f}x** "
            f"(target <= 0.5x).\n\n"
            f"Best possible hit rate for the same workload: every assistant's prompt kept on one engine with room "
            f"(four per engine fit), so only the first request of each assistant misses its system prompt. A later "
            f"request then hits the full 16-token blocks it shares with its assistant's other requests "
            f"(`<|system|>\\nSYSTEM\\n<|user|>\\n`: {shared_mean:.0f} tokens on average, counted with the engine's "
            f"tokenizer rule) and misses its own question and the template's end. Bound = {shared_mean:.0f} x "
            f"(requests - 16) / prompt tokens of the run, i.e. 1 - (first-time misses + unshared tokens) / total: "
            f"{100 * ca['best_hit_rate']:.1f}% for the cache_aware run ({100 * rr['best_hit_rate']:.1f}% and "
            f"{100 * pa['best_hit_rate']:.1f}% for the others, whose request counts differ). cache_aware: hit rate "
            f"**{ca['hit_rate'] / ca['best_hit_rate']:.2f}** of the best possible (target >= 0.9), mean TTFT "
            f"**{ca['ttft_mean_ms'] / rr['ttft_mean_ms']:.2f}x** round_robin's (target <= 0.3x), "
            f"{ca['ttft_mean_ms'] / pa['ttft_mean_ms']:.2f}x prefix_affinity's.")
    return ("G4. Shared prompts: cache-aware vs prefix-affinity vs round-robin routing",
            f"build/bmas engine --port 0 {' '.join(engine_args)}   # four, fresh for each policy\n" + "\n".join(commands),
            text, rows)


EARLIER = "**Earlier runs, kept as they were written.**"


def record_sections(sections):
    """Replaces the recorded block of the given "## " sections of RESULTS.md (from its "Re-run
    alone with" line to the section's earlier runs, or its end), saying which commit wrote it.
    What is written above the block stays, and the block it replaces moves to the top of the
    section's earlier runs; the rest of the file stays as it was."""
    path = os.path.join(ROOT, "bench", "RESULTS.md")
    with open(path) as f:
        doc = f.read()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    for title, command, body, table in sections:
        heading = f"## {title}"
        start = doc.index(heading) + len(heading)
        following = re.search(r"\n#{1,2} ", doc[start:])
        end = start + following.start() + 1 if following else len(doc)
        section = doc[start:end]
        only = re.match(r"G(\d+)", title).group(1)
        client = " --client openai" if CLIENT == "openai" else ""
        block = (f"Re-run alone with `python3 bench/gateway_bench.py --only {only}{client} "
                 f"--record` on {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC at commit {commit}; the other "
                 f"gateway figures are from the full run above.\n\n```\n{command}\n```\n\n{body}\n\n"
                 + "\n".join(table) + "\n")
        rerun = section.find("\nRe-run alone with ")
        if rerun < 0:
            section = "\n\n" + block + "\n"
        else:
            above = section[:rerun + 1]
            earlier = section.find(EARLIER, rerun)
            old_block = section[rerun + 1:earlier if earlier >= 0 else len(section)].rstrip("\n")
            after = section[earlier + len(EARLIER):].lstrip("\n") if earlier >= 0 else ""
            section = (above + block + "\n" + EARLIER + "\n\n" + old_block + "\n\n" + after).rstrip("\n") + "\n\n"
        doc = doc[:start] + section + doc[end:]
    with open(path, "w") as f:
        f.write(doc)


def main():
    for tool in ("wrk", "nginx") if ONLY is None or ONLY & {1, 2} else ():
        if shutil.which(tool) is None and shutil.which(tool, path="/usr/sbin:/usr/bin") is None:
            sys.exit(f"gateway_bench: {tool} is missing; run `bash scripts/install-deps.sh --bench`")
    os.environ["PATH"] += ":/usr/sbin"
    started = time.strftime("%Y-%m-%d %H:%M")
    # What was measured: the commit, whether src/ had changes not committed, and the binaries,
    # which must not be rebuilt while the benchmarks run.
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "src"):
        commit += " with changes to src/ not committed"
    # (--only 1 needs no load generator: a build without bench/ has none.)
    binaries = {path: os.stat(path).st_mtime for path in (BMAS, LOADGEN) if os.path.exists(path)}
    busy0, own0 = busy_cpu_seconds(), own_cpu_seconds()
    t0 = time.time()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    benchmarks = [(1, overhead), (2, many_streams), (3, noisy_neighbour), (4, shared_prompts)]
    sections = []
    try:
        for number, bench in benchmarks:
            if ONLY is None or number in ONLY:
                sections.append(bench())
                print(f"gateway_bench: {sections[-1][0]} done after {time.time() - t0:.0f} s", file=sys.stderr)
    finally:
        for proc in started_processes:
            stop(proc)
        for d in temporary_dirs:
            shutil.rmtree(d, ignore_errors=True)

    others = (busy_cpu_seconds() - busy0 - (own_cpu_seconds() - own0)) / (time.time() - t0)
    rebuilt = [run.rel(p) for p, mtime in binaries.items() if os.stat(p).st_mtime != mtime]
    if rebuilt:
        sys.exit(f"gateway_bench: {', '.join(rebuilt)} changed during the run; RESULTS.md is left as it was")
    text = (f"{HEADING}\n\nWritten by `python3 bench/gateway_bench.py` (or `make bench`) on {started} in "
            f"{time.time() - t0:.0f} s, at commit {commit}; {os.cpu_count()} cores, {cpu}, Linux {platform.release()}; other processes kept {max(others, 0):.2f} cores "
            "busy on average meanwhile (the machine's busy time from /proc/stat less this script's and its "
            "children's). Nothing here is typed in by hand. URL, KEY and STATE stand for what the script created (the gateway's state "
            "directory holds the users and keys it made with `bmas user add` and `bmas key create`).\n\n")
    for title, command, body, table in sections:
        text += f"## {title}\n\n```\n{command}\n```\n\n{body}\n\n" + "\n".join(table) + "\n\n"
    if ONLY is not None and RECORD and not QUICK:
        record_sections(sections)
    if ONLY is not None:
        print(text)
        return
    run.write_section(HEADING, text)
    print(text)


if __name__ == "__main__":
    main()
