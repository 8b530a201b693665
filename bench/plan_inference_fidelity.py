#!/usr/bin/env python3
"""How closely `bmas plan` models inference: fidelity benchmark 1 of the capacity planner.

Usage: bench/plan_inference_fidelity.py [BUILD_DIR]

Two replicas of the llama profile (`bmas engine --profile llama-3.1-8b-h100`, real time) behind
the real gateway, loaded twice: a closed loop (bench/loadgen.cc: 16 clients started evenly over 1 s, then 10 s counted)
and an open loop (Poisson arrivals, 20 a second, 400 requests, from this script's streaming
client threads); 128-token prompts and 128 output tokens, one user. The same loads then go
through the planner's inference simulation (build/bench/bmas_plan_inference: the admission
library, the router and EngineCore replicas in virtual time). TTFT p50 and p95 and the output
throughput are compared; the target is within 10%. Writes "## 1. Inference against the real
gateway" into "# Planner fidelity" of bench/RESULTS.md, keeping the jobs part.
"""
import http.client
import json
import os
import platform
import random
import re
import subprocess
import sys
import threading
import time

import run  # bench/run.py: ROOT, BMAS, Engine, write_section
import gateway_bench  # its State and Gateway
ROOT, BMAS = run.ROOT, run.BMAS
SIM = os.path.join(os.path.dirname(BMAS), "bench", "bmas_plan_inference")
LOADGEN = os.path.join(os.path.dirname(BMAS), "bench", "bmas_loadgen")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PROFILE = "llama-3.1-8b-h100"
# Clients start evenly over the ramp-up (not counted), so that they are not in lockstep.
CLOSED = {"concurrency": 16, "ramp_up": 1.0, "duration": 10.0}
OPEN = {"rate": 20.0, "requests": 400, "seed": 5}
TOKENS = 128


def percentile(xs, q):
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(q * len(xs) + 0.999999) - 1))]


def closed_real(gw, key):
    cmd = [LOADGEN, "--url", gw.url, "--model", MODEL, "--json", "--endpoint", "completions",
           "--concurrency", str(CLOSED["concurrency"]), "--ramp-up", str(CLOSED["ramp_up"]),
           "--duration", str(CLOSED["duration"]),
           "--max-tokens", str(TOKENS), "--prompt-words", str(TOKENS), "--api-key", key]
    r = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    if r["requests_failed"]:
        raise RuntimeError(f"loadgen: {r['first_error']}")
    return {"ttft_p50_s": r["ttft_p50_ms"] / 1000, "ttft_p95_s": r["ttft_p95_ms"] / 1000,
            "output_tokens_per_s": r["output_tokens_per_s"], "prompt_tokens": r["prompt_tokens"] / r["requests_ok"]}


def stream(host, port, key, prompt, out, i):
    t0 = time.time()
    conn = http.client.HTTPConnection(host, port, timeout=120)
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": TOKENS, "stream": True,
                       "stream_options": {"include_usage": True}, "ignore_eos": True})
    conn.request("POST", "/v1/completions", body, {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        out[i] = {"error": f"HTTP {resp.status}: {resp.read()[:200]!r}"}
        return
    first, tokens, prompt_tokens = None, 0, None
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        msg = json.loads(line[6:])
        if msg.get("choices") and msg["choices"][0].get("text"):
            if first is None:
                first = time.time()
            tokens += 1
        if msg.get("usage"):
            prompt_tokens = msg["usage"]["prompt_tokens"]
            tokens = msg["usage"]["completion_tokens"]
    out[i] = {"sent": t0, "ttft": (first or time.time()) - t0, "end": time.time(), "tokens": tokens,
              "prompt_tokens": prompt_tokens}
    conn.close()


def open_real(gw, key):
    host, port = re.match(r"http://([^:/]+):(\d+)", gw.url).groups()
    rng = random.Random(OPEN["seed"])
    words = ["the", "cluster", "student", "model", "token", "queue", "replica", "node"]
    out, threads = [None] * OPEN["requests"], []
    t = time.time() + 0.5
    for i in range(OPEN["requests"]):
        prompt = " ".join(rng.choice(words) for _ in range(TOKENS))
        delay = t - time.time()
        if delay > 0:
            time.sleep(delay)
        th = threading.Thread(target=stream, args=(host, int(port), key, prompt, out, i))
        th.start()
        threads.append(th)
        t += rng.expovariate(OPEN["rate"])
    for th in threads:
        th.join()
    errors = [o["error"] for o in out if "error" in o]
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed: {errors[0]}")
    ttft = [o["ttft"] for o in out]
    span = max(o["end"] for o in out) - min(o["sent"] for o in out)
    return {"ttft_p50_s": percentile(ttft, 0.5), "ttft_p95_s": percentile(ttft, 0.95),
            "output_tokens_per_s": sum(o["tokens"] for o in out) / span,
            "prompt_tokens": sum(o["prompt_tokens"] or 0 for o in out) / len(out)}


def simulated(prompt_tokens, *args):
    cmd = [SIM, "--profile", PROFILE, "--replicas", "2", "--prompt-tokens", str(prompt_tokens),
           "--output-tokens", str(TOKENS), *args]
    r = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return r, " ".join(["build/bench/bmas_plan_inference", *cmd[1:]])


def main():
    started = time.strftime("%Y-%m-%d %H:%M")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    engines = [run.Engine("--profile", PROFILE) for _ in range(2)]
    try:
        state = gateway_bench.State()
        key = state.add_user("bench")
        gw = gateway_bench.Gateway(state, engines, key=key)
        try:
            real_closed = closed_real(gw, key)
            real_open = open_real(gw, key)
        finally:
            gw.stop()
    finally:
        for e in engines:
            e.stop()
        gateway_bench.cleanup() if hasattr(gateway_bench, "cleanup") else None
    sim_closed, cmd_closed = simulated(round(real_closed["prompt_tokens"]), "--concurrency", str(CLOSED["concurrency"]),
                                       "--ramp-up", str(CLOSED["ramp_up"]), "--duration", str(CLOSED["duration"]))
    sim_open, cmd_open = simulated(round(real_open["prompt_tokens"]), "--rate", str(OPEN["rate"]),
                                   "--requests", str(OPEN["requests"]), "--seed", str(OPEN["seed"]))
    rows, worst, worst_central, worst_tail = [], 0.0, 0.0, 0.0
    for name, real, sim in (("closed loop, 16 clients", real_closed, sim_closed),
                            ("open loop, Poisson 20/s", real_open, sim_open)):
        for label, k, scale in (("TTFT p50 (ms)", "ttft_p50_s", 1000), ("TTFT p95 (ms)", "ttft_p95_s", 1000),
                                ("output tokens/s", "output_tokens_per_s", 1)):
            ratio = sim[k] / real[k] if real[k] else float("nan")
            worst = max(worst, abs(ratio - 1))
            if k == "ttft_p95_s":
                worst_tail = max(worst_tail, abs(ratio - 1))
            else:
                worst_central = max(worst_central, abs(ratio - 1))
            rows.append(f"| {name} | {label} | {real[k] * scale:.1f} | {sim[k] * scale:.1f} | {ratio:.2f} |")
    text = ("## 1. Inference against the real gateway\n\n"
            f"Written by `python3 bench/plan_inference_fidelity.py` on {started} at commit {commit}; "
            f"{os.cpu_count()} cores, Linux {platform.release()}. Two `bmas engine --profile {PROFILE}` replicas "
            "(real time) behind `bmas gateway --backend URL --backend URL`, one user; "
            f"{TOKENS}-token prompts (as the engine counted them: {real_closed['prompt_tokens']:.0f} and "
            f"{real_open['prompt_tokens']:.0f}), {TOKENS} output tokens. The closed loop is\n\n"
            f"```\nbuild/bench/bmas_loadgen --url URL --model {MODEL} --json --endpoint completions --concurrency "
            f"{CLOSED['concurrency']} --ramp-up {CLOSED['ramp_up']} --duration {CLOSED['duration']} --max-tokens {TOKENS} "
            f"--prompt-words {TOKENS} --api-key KEY\n{cmd_closed}\n```\n\n"
            f"and the open loop {OPEN['requests']} streamed completions at Poisson times, {OPEN['rate']:.0f} a second "
            "(seed 5), from the script's own client threads, against\n\n"
            f"```\n{cmd_open}\n```\n\n"
            "| load | figure | real | bmas plan | plan / real |\n|---|---|---|---|---|\n" + "\n".join(rows) +
            f"\n\nWorst difference: {100 * worst:.1f}% (target: within 10%): {100 * worst_central:.1f}% for TTFT "
            f"p50 and throughput, {100 * worst_tail:.1f}% for TTFT p95. The simulation has no jitter: its "
            "engines step on a deterministic clock and it leaves out the HTTP hops, the gateway's own time and the "
            "scheduling of a dozen threads on this machine's 2 shared cores, which the real run's tail holds.\n\n")
    print(text)
    path = os.path.join(ROOT, "bench", "RESULTS.md")
    doc = open(path).read()
    start = doc.find("# Planner fidelity\n")
    if start < 0:
        raise RuntimeError("run bench/plan_fidelity_bench.py first: it writes # Planner fidelity")
    section_end = re.search(r"^# ", doc[start + 2:], re.M)
    end = start + 2 + section_end.start() if section_end else len(doc)
    section = doc[start:end]
    section = re.sub(r"## 1\. Inference against the real gateway\n.*?(?=^## |\Z)", "", section, flags=re.M | re.S)
    at = section.find("## 2. Jobs")
    section = section[:at] + text + section[at:] if at >= 0 else section.rstrip() + "\n\n" + text
    with open(path, "w") as f:
        f.write(doc[:start] + section + doc[end:])


if __name__ == "__main__":
    main()
