#!/usr/bin/env python3
"""Instructions per relayed request in the bmas gateway, counted by callgrind: G1's set-up
(`bmas gateway --threads 1` before `bmas engine --profile instant`, wrk at 32 connections with
bench/wrk_completion.lua), with the gateway under valgrind. Instruction counts do not depend on
what else the machine runs, so this is the figure to compare changes by on a shared machine.

Usage: bench/gateway_callgrind.py [BUILD_DIR] [--seconds S] [--top N] [--keep DIR] [--port P] [--nginx]
                                  [--client openai] [--gateway-binary PATH]

--port P: the gateway listens on P, as a deployed one does, and so keeps its usage journal
(<state dir>/store/gateway-usage-P.journal); the default, 0, is an ephemeral port: no journal.

--client openai: wrk sends the head the `openai` npm client sends (sixteen fields, against
wrk's four; bench/wrk_completion.lua). --gateway-binary PATH: the gateway of another build.

--nginx: counts nginx instead, as G1 runs it (one worker, upstream keep-alive; here with
master_process off, so that its one process is the one valgrind counts): the reference.

Prints instructions per request and the top N functions by inclusive instructions per request
(callgrind_annotate --inclusive=yes). Counters are zeroed after a warm-up run and dumped after
the measured one, so start-up is not counted. --keep DIR leaves the callgrind output there.
Needs valgrind, wrk and a C compiler. Run it in a private network namespace (`unshare -rn`) on a shared machine.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def option(name, default):
    if name in sys.argv:
        i = sys.argv.index(name)
        value = sys.argv[i + 1]
        del sys.argv[i:i + 2]
        return value
    return default


SECONDS = int(option("--seconds", "5"))
TOP = int(option("--top", "25"))
KEEP = option("--keep", None)
PORT = option("--port", "0")
NGINX = "--nginx" in sys.argv
CLIENT = option("--client", "wrk")
sys.argv = [a for a in sys.argv if a != "--nginx"]

import gateway_bench as gb  # noqa: E402  (reads BUILD_DIR from the remaining arguments)
import run  # noqa: E402


def wrk(url, key, seconds):
    """Requests wrk completed in `seconds` at 32 connections (a generous timeout: under valgrind
    the gateway is some 50 times slower)."""
    cmd = ["wrk", "-t1", "-c32", f"-d{seconds}s", "--timeout", "30s", "-s", gb.WRK_SCRIPT,
           url + "/v1/completions"]
    out = subprocess.run(cmd, capture_output=True, text=True,
                         env=dict(os.environ, BMAS_BENCH_KEY=key, BMAS_BENCH_CLIENT=CLIENT))
    result = json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1])
    if result["status_errors"] or result["socket_errors"]:
        raise RuntimeError(f"{' '.join(cmd)}: errors: {result}")
    return result["requests"]


def start_gateway(valgrind, engine, shim):
    """`bmas gateway --threads 1` under valgrind: (process, URL, key)."""
    state = gb.State()
    key = state.add_user("bench")
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([*valgrind, gb.GATEWAY_BINARY or gb.BMAS, "gateway", "--port", PORT, "--backend", engine.url, "--threads", "1"],
                            env=dict(state.env, LD_PRELOAD=shim), stdout=subprocess.PIPE, stderr=log, text=True)
    while True:
        line = proc.stdout.readline()
        m = re.search(r"(http://\S+)", line)
        if not m:
            gb.stop(proc)
            log.seek(0)
            raise RuntimeError("gateway did not start: " + log.read().decode()[-2000:])
        if "listening on" in line:
            return proc, m.group(1), key


def start_nginx(valgrind, engine, out_dir):
    """nginx with G1's configuration under valgrind, in one process: (process, URL, key)."""
    port = gb.free_port()
    d = out_dir
    config = ("master_process off;\ndaemon off;\n"
              # As root, nginx would hand its temporary directories to nobody; it stays root.
              + ("user root;\n" if os.geteuid() == 0 else "")
              + f"worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n"
              "events { worker_connections 4096; }\n"
              f"http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n"
              f"  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n"
              "  keepalive_requests 1000000;\n"
              f"  upstream engine {{ server {engine.url.removeprefix('http://')}; keepalive 64; "
              "keepalive_requests 1000000; }\n"
              f"  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://engine;\n"
              '      proxy_http_version 1.1;\n      proxy_set_header Connection "";\n      proxy_buffering off;\n'
              "    }\n  }\n}\n")
    path = os.path.join(d, "nginx.conf")
    with open(path, "w") as f:
        f.write(config)
    proc = subprocess.Popen([*valgrind, shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin"), "-c", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while gb.http_get(url + "/v1/models", timeout=30)[0] != 200:
        if proc.poll() is not None or time.time() > deadline:
            gb.stop(proc)
            log = os.path.join(d, "error.log")
            raise RuntimeError("nginx did not start: " + (open(log).read() if os.path.exists(log) else ""))
        time.sleep(0.5)
    return proc, url, "none"


def main():
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate", "wrk") + (("nginx",) if NGINX else ()):
        if not shutil.which(tool) and not shutil.which(tool, path="/usr/sbin"):
            sys.exit(f"needs {tool}: apt-get install valgrind wrk")
    out_dir = KEEP or tempfile.mkdtemp(prefix="bmas-callgrind-")
    os.makedirs(out_dir, exist_ok=True)
    # valgrind 3.19 has no openat2, which bmas opens its state directory with: a preloaded
    # shared object maps it to openat (bench/valgrind_openat2.c).
    shim = os.path.join(out_dir, "valgrind_openat2.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", shim,
                    os.path.join(run.ROOT, "bench", "valgrind_openat2.c"), "-ldl"], check=True)
    engine = run.Engine("--profile", "instant")
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/callgrind.out.%p"]
    proc = None
    try:
        proc, url, key = start_nginx(valgrind, engine, out_dir) if NGINX else start_gateway(valgrind, engine, shim)
        deadline = time.time() + 120
        # Ready once the proxy lists the engine's model (the gateway answers 200 with no models first).
        while "Llama-3.1-8B-Instruct" not in gb.http_get(url + "/v1/models", key, timeout=30)[1]:
            if time.time() > deadline:
                raise RuntimeError("proxy not ready after 120 s")
            time.sleep(0.5)
        wrk(url, key, 3)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
        requests = wrk(url, key, SECONDS)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
    finally:
        if proc:
            gb.stop(proc)
        engine.stop()
        for d in gb.temporary_dirs:
            shutil.rmtree(d, ignore_errors=True)
    dumps = sorted((f for f in os.listdir(out_dir) if re.match(rf"callgrind\.out\.{proc.pid}\.\d+$", f)),
                   key=lambda f: int(f.rsplit(".", 1)[1]))
    dump = os.path.join(out_dir, dumps[0])
    report = subprocess.run(["callgrind_annotate", "--inclusive=yes", f"--threshold=100", dump],
                            capture_output=True, text=True, check=True).stdout
    total = int(re.search(r"^([\d,]+) \s*\(?[\d.%]*\)?\s*PROGRAM TOTALS", report, re.M).group(1).replace(",", ""))
    print(f"requests: {requests}; instructions: {total}; per request: {total / requests / 1000:.1f}k "
          f"(dump {dump})")
    shown = 0
    for line in report.splitlines():
        m = re.match(r"^\s*([\d,]+) \s*\(\s*[\d.]+%\)\s+(\S.*)$", line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        if shown >= TOP:
            break
        print(f"{int(m.group(1).replace(',', '')) / requests:9.0f}  {m.group(2)[:150]}")
        shown += 1
    if not KEEP:
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
