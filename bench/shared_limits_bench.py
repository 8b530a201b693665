#!/usr/bin/env python3
"""Two gateways with limits shared through PostgreSQL, against one gateway on SQLite; writes
"# Shared limits benchmarks" in bench/RESULTS.md (only that section).

Usage: bench/shared_limits_bench.py [BUILD_DIR] [--quick] [--only 3]

--only N[,N...] runs those sections (1 = L1, 2 = L2, 3 = L3) and prints them without writing
bench/RESULTS.md.

L1: requests/s (wrk, 16 connections per gateway) and p50 added over the engine at one
connection, for one gateway on SQLite (limits in its memory) and for two gateways on one
PostgreSQL (shared limits: a Reserve and a Settle in the store per request).
L2: a user with a tpm limit sends concurrent requests through both gateways: tokens admitted
against the limit, and requests refused, with shared limits and without.
L3: two backlogged users with weights 1 and 2 on one engine: their shares of the tokens served
through one gateway, and through two gateways (each user through both, or one each).
Needs wrk and Debian's PostgreSQL 15 server (scripts/install-deps.sh). Runs as root (the
server then runs as the `postgres` account).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import gateway_bench as gb  # noqa: E402  its helpers: engine, State, Gateway, wrk, stop
import run  # noqa: E402

QUICK = gb.QUICK
HEADING = "# Shared limits benchmarks"
PG_BIN = os.environ.get("BMAS_PG_BIN", "/usr/lib/postgresql/15/bin")


class Postgres:
    """A throwaway cluster on a unix socket in a temporary directory (as pg_server.h in the tests),
    fsync off."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="bmas-bench-pg-")
        gb.temporary_dirs.append(self.dir)
        shutil.chown(self.dir, "postgres", "postgres")
        self.data = os.path.join(self.dir, "data")
        self.port = gb.free_port()
        self.as_postgres([f"{PG_BIN}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres"])
        options = (f"-k {self.dir} -p {self.port} -c listen_addresses= -c fsync=off "
                   "-c synchronous_commit=off")
        self.as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-l", self.dir + "/log", "-o", options,
                          "-w", "start"])
        self.as_postgres(["psql", "-h", self.dir, "-p", str(self.port), "-U", "postgres", "-d", "postgres",
                          "-c", "CREATE DATABASE bmas"])
        self.url = f"postgresql://postgres@/bmas?host={self.dir}&port={self.port}"

    def as_postgres(self, args):
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True)

    def stop(self):
        self.as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop"])


def post(url, key, body):
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Authorization": "Bearer " + key,
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, {}


def wrk_together(gateways, connections, seconds, key):
    """wrk against each gateway at once; their requests/s added, their p50s averaged."""
    results = [None] * len(gateways)

    def one(i):
        results[i], _ = gb.wrk(gateways[i].url, connections, seconds, key)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(gateways))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(r["rps"] for r in results), sum(r["p50_us"] for r in results) / len(results)


def throughput():
    seconds = 2 if QUICK else 5
    eng = gb.engine("--profile", "instant")
    direct, _ = gb.wrk(eng.url, 1, seconds, "none")
    rows = ["| setup | requests/s (16 connections per gateway) | p50 at 1 connection (ms) | added p50 (ms) |",
            "|---|---:|---:|---:|"]
    sqlite = gb.State()
    key = sqlite.add_user("bench")
    one = gb.Gateway(sqlite, [eng], key=key)
    gb.wrk(one.url, 16, 1, key)  # warm-up
    rps, _ = wrk_together([one], 16, seconds, key)
    lat, _ = gb.wrk(one.url, 1, seconds, key)
    rows.append(f"| 1 gateway, SQLite, its own limits | {rps:.0f} | {lat['p50_us'] / 1e3:.3f} | "
                f"{(lat['p50_us'] - direct['p50_us']) / 1e3:.3f} |")
    one.stop()
    pg = Postgres()
    shared = gb.State()
    shared.env["BMAS_STORE_URL"] = pg.url
    key = shared.add_user("bench")
    two = [gb.Gateway(shared, [eng], key=key) for _ in range(2)]
    for g in two:
        gb.wrk(g.url, 16, 1, key)
    rps2, _ = wrk_together(two, 16, seconds, key)
    lat2, _ = gb.wrk(two[0].url, 1, seconds, key)
    rows.append(f"| 2 gateways, PostgreSQL, shared limits | {rps2:.0f} | {lat2['p50_us'] / 1e3:.3f} | "
                f"{(lat2['p50_us'] - direct['p50_us']) / 1e3:.3f} |")
    for g in two:
        g.stop()
    pg.stop()
    eng.stop()
    text = (f"Non-streaming `/v1/completions` (bench/wrk_completion.lua, `max_tokens` 16) against one "
            f"`bmas engine --profile instant`; {seconds} s runs after 1 s of warm-up; the user has no limits, "
            "so every request is admitted, but with shared limits each one makes a Reserve and a Settle "
            "(one statement each, on the gateway's pool of 4 store connections) in PostgreSQL (a local cluster on a unix socket, fsync off). wrk, the "
            f"engine, the gateways and PostgreSQL share the machine's cores. Direct to the engine: p50 "
            f"{direct['p50_us'] / 1e3:.3f} ms. Two gateways on PostgreSQL / one on SQLite, requests/s: "
            f"**{rps2 / rps:.2f}x**; added p50: **{lat2['p50_us'] - lat['p50_us']:+.0f} µs**.")
    return ("L1. Requests/s and added p50: one gateway on SQLite vs two on PostgreSQL",
            "BMAS_STATE_DIR=STATE [BMAS_STORE_URL=PG] build/bmas gateway --port 0 --backend URL\n"
            "BMAS_BENCH_KEY=KEY wrk -t1 -c16 -d5s -s bench/wrk_completion.lua URL/v1/completions", text, rows)


def overshoot():
    tpm, max_tokens, requests = 2000, 100, 60
    eng = gb.engine("--profile", "instant")
    pg = Postgres()
    rows = ["| limits | requests | admitted | refused (429) | tokens admitted | tpm | over the limit |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for shared in (True, False):
        state = gb.State()
        state.env["BMAS_STORE_URL"] = pg.url
        config = os.path.join(state.dir, "bmas.toml")
        with open(config, "w") as f:
            f.write(f"[gateway]\nshared_limits = {'true' if shared else 'false'}\n")
        state.env["BMAS_CONFIG"] = config
        name = "shared" if shared else "local"
        key = state.add_user(name)
        subprocess.run([gb.BMAS, "user", "set", name, "--tpm", str(tpm)], env=state.env, check=True,
                       capture_output=True)
        gateways = [gb.Gateway(state, [eng], key=key) for _ in range(2)]
        outcomes = []
        lock = threading.Lock()

        def send(i):
            status, body = post(gateways[i % 2].url, key,
                                {"model": run.MODEL, "prompt": "Say hello to the cluster", "max_tokens": max_tokens})
            with lock:
                outcomes.append((status, body.get("usage", {}).get("total_tokens", 0)))

        threads = [threading.Thread(target=send, args=(i,)) for i in range(requests)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        admitted = sum(1 for s, _ in outcomes if s == 200)
        refused = sum(1 for s, _ in outcomes if s == 429)
        used = sum(n for s, n in outcomes if s == 200)
        label = "shared (PostgreSQL)" if shared else "each gateway's own (shared_limits = false)"
        rows.append(f"| {label} | {requests} | {admitted} | {refused} | {used} | {tpm} | {max(used - tpm, 0)} |")
        for g in gateways:
            g.stop()
    pg.stop()
    eng.stop()
    text = (f"One user with `--tpm {tpm}` sends {requests} requests at once (`max_tokens` {max_tokens}, a "
            "5-token prompt), alternating between two gateways on one PostgreSQL store, each before the same "
            "instant engine. Tokens admitted: the `usage.total_tokens` of the 200s. Target: over the limit "
            "by at most one request's reservation (about 106 tokens here).")
    return ("L2. A user's tpm under concurrent load through two gateways", "python3 bench/shared_limits_bench.py",
            text, rows)


def fairness():
    """Two backlogged users, weights 1 and 2, on one engine: their shares of served tokens through
    one gateway, and through two gateways on one PostgreSQL store, routed two ways."""
    warm_s, window_s = (2, 6) if QUICK else (3, 15)
    eng = gb.engine("--profile", gb.LLAMA, "--max-num-seqs", "32")
    pg = Postgres()
    state = gb.State()
    state.env["BMAS_STORE_URL"] = pg.url
    w1, w2 = state.add_user("w1", 1), state.add_user("w2", 2)
    # Each user: two loadgens of 32 streams, sent through the gateways given.
    load = ["--concurrency", "32", "--duration", str(warm_s + window_s + 1), "--max-tokens", "128",
            "--prompt-words", "64"]
    setups = (("one gateway, both users", 1, ((0, 0), (0, 0))),
              ("two gateways, each user through both", 2, ((0, 1), (0, 1))),
              ("two gateways, w1 through the first, w2 through the second", 2, ((0, 0), (1, 1))))
    rows = ["| setup | w1 tokens | w2 tokens | w2 share (target 66.7%) | w2 / w1 (target 2) |",
            "|---|---:|---:|---:|---:|"]
    ratios = []
    shown = ""
    for label, n, routes in setups:
        gateways = [gb.Gateway(state, [eng], key=w1) for _ in range(n)]
        procs = []
        for key, route in ((w1, routes[0]), (w2, routes[1])):
            for g in route:
                proc, shown = gb.start_loadgen(gateways[g].url, *load, "--api-key", key)
                procs.append(proc)
        time.sleep(warm_s)
        m0 = [g.metrics() for g in gateways]
        time.sleep(window_s)
        m1 = [g.metrics() for g in gateways]
        for proc in procs:
            gb.finish_loadgen(proc)

        def served(user):
            name = f'user="{user}",kind="completion"'
            return sum(gb.metric_sum(b, "bmas_gateway_tokens_total", name) -
                       gb.metric_sum(a, "bmas_gateway_tokens_total", name) for a, b in zip(m0, m1))

        t1, t2 = served("w1"), served("w2")
        ratios.append(t2 / t1)
        rows.append(f"| {label} | {t1:.0f} | {t2:.0f} | {100 * t2 / (t1 + t2):.1f}% | {t2 / t1:.2f} |")
        for g in gateways:
            g.wait_idle()
            g.stop()
    pg.stop()
    eng.stop()
    text = (
        "Two users with weights 1 and 2, each backlogged (two loadgens of 32 streams of 128 output tokens, 64-word "
        f"prompts), compete for one `bmas engine --profile {gb.LLAMA} --max-num-seqs 32`. Fair means each user's "
        "share of the completion tokens served is their share of the weights (w2: 2/3), as one gateway's VTC queue "
        "gives, however the users' requests are spread over gateways. Served tokens: the sum over the gateways of "
        f"`bmas_gateway_tokens_total{{kind=\"completion\"}}` over {window_s} s after {warm_s} s of warm-up; "
        f"shared limits on (PostgreSQL), no limits set. w2/w1: one gateway **{ratios[0]:.2f}**; two gateways, each "
        f"user through both **{ratios[1]:.2f}**; each user on a gateway of their own **{ratios[2]:.2f}**."
        " The gateways share what their fair queues know through the store (src/gateway/fair_share.h): every 200 ms"
        " each writes the tokens its queue charged each user, who waits on it, and its requests in flight, and reads"
        " the others'. Each queue is charged what the other gateways served a user, so it orders by global counters;"
        " and each gateway fills only its share of the engine's 32 slots, by the weights backlogged on it. Pinned"
        " users get 11 and 21 slots (32 split 1:2, rounded), hence about 1.91 rather than 2. Before this (each"
        " gateway's queue saw only its own requests, and each filled all 32 slots) the rows read 2.00, 1.84 and 1.00:"
        " the engine got 64 requests for 32 slots and served them in arrival order.")
    command = (f"build/bmas engine --port 0 --profile {gb.LLAMA} --max-num-seqs 32\n"
               "BMAS_STATE_DIR=STATE BMAS_STORE_URL=PG build/bmas gateway --port 0 --backend URL   # once or twice\n"
               f"{shown}   # twice per user, through the gateways the row names")
    return ("L3. Token fairness across gateways", command, text, rows)


def main():
    started = time.strftime("%Y-%m-%d %H:%M")
    t0 = time.time()
    git = lambda *a: subprocess.run(["git", "-C", run.ROOT, *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    busy0, own0 = gb.busy_cpu_seconds(), gb.own_cpu_seconds()
    sections = []
    try:
        for number, bench in enumerate((throughput, overshoot, fairness), 1):
            if gb.ONLY is None or number in gb.ONLY:
                sections.append(bench())
    finally:
        for proc in gb.started_processes:
            gb.stop(proc)
        for d in gb.temporary_dirs:
            shutil.rmtree(d, ignore_errors=True)
    others = (gb.busy_cpu_seconds() - busy0 - (gb.own_cpu_seconds() - own0)) / (time.time() - t0)
    text = (f"{HEADING}\n\nWritten by `python3 bench/shared_limits_bench.py` on {started} in "
            f"{time.time() - t0:.0f} s, at commit {commit}; {os.cpu_count()} cores; other processes kept "
            f"{max(others, 0):.2f} cores busy on average meanwhile. URL, KEY, STATE and PG stand for what the "
            "script created.\n\n")
    for title, command, body, table in sections:
        text += f"## {title}\n\n```\n{command}\n```\n\n{body}\n\n" + "\n".join(table) + "\n\n"
    if QUICK or gb.ONLY is not None:
        print(text)
        return
    run.write_section(HEADING, text)
    print(text)


if __name__ == "__main__":
    main()
