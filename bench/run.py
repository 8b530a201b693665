#!/usr/bin/env python3
"""Runs bmas's benchmarks and writes bench/RESULTS.md. Usage: bench/run.py [BUILD_DIR] [--quick]

Every figure in RESULTS.md is measured by this script, beside the command that produced it.
--quick shortens the 60-second load test to 10 seconds (for trying the script out).
"""
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(next((a for a in sys.argv[1:] if not a.startswith("--")), os.path.join(ROOT, "build")))
QUICK = "--quick" in sys.argv
BMAS = os.path.join(BUILD, "bmas")
LOADGEN = os.path.join(BUILD, "bench", "bmas_loadgen")
MICRO = os.path.join(BUILD, "bench", "bmas_engine_bench")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def proc_cpu_seconds(pid):
    """CPU seconds (user and system) that process `pid` has used; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_section(heading, text):
    """Replaces the section of RESULTS.md that starts at the line `heading` and runs to the next
    "# " heading, wherever it is, keeping the others; appends it when there is none. The scripts
    that measure one part each (gateway, Slurm, workspaces) write their own."""
    path = os.path.join(ROOT, "bench", "RESULTS.md")
    old = open(path).read() if os.path.exists(path) else ""
    start = old.find(heading + "\n")
    if start < 0:
        before, after = old.rstrip() + "\n\n" if old.strip() else "", ""
    else:
        before = old[:start]
        nxt = re.search(r"^# ", old[start + len(heading):], re.M)
        after = old[start + len(heading) + nxt.start():] if nxt else ""
    with open(path, "w") as f:
        f.write(before + text.rstrip() + "\n" + ("\n" + after if after else ""))


def scratch(prefix, top_mode=0o755):
    """A temporary directory under /tmp for a benchmark's own cluster: (top, state dir, a job
    directory every user may write, a copy of build/bmas). The copy keeps a rebuild during the
    run from changing anything; the job directory is 1777 for jobs of other users."""
    top = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(top, top_mode)
    work = os.path.join(top, "work")
    os.mkdir(work)
    os.chmod(work, 0o1777)
    copy = os.path.join(top, "bmas")
    shutil.copy2(BMAS, copy)
    os.chmod(copy, 0o755)
    return top, os.path.join(top, "state"), work, copy


def rel(path):
    return os.path.relpath(path, ROOT)


class Engine:
    """A `bmas engine` process on a free port."""

    def __init__(self, *args):
        self.args = [BMAS, "engine", "--port", "0", *args]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"(http://\S+)", line)
        if not m:
            raise RuntimeError("engine did not start: " + line)
        self.url = m.group(1)
        self.command = " ".join(["build/bmas", "engine", "--port", "0", *args])

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def metrics(self):
        return subprocess.run(["curl", "-s", self.url + "/metrics"], capture_output=True, text=True,
                              check=True).stdout

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def loadgen(engine, *args):
    cmd = [LOADGEN, "--url", engine.url, "--model", MODEL, "--json", *args]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr}")
    shown_args = [re.sub(r"^/tmp/.*/(prompt\d+\.txt)$", r"PROMPT_DIR/\1", a) for a in args]
    shown = " ".join(["build/bench/bmas_loadgen", "--url", "URL", "--model", MODEL, "--json", *shown_args])
    return json.loads(out.stdout), shown


def histogram(text, name):
    """Cumulative bucket counts {le: count} of an unlabelled histogram."""
    buckets = {}
    for m in re.finditer(rf'^{re.escape(name)}_bucket{{le="([^"]+)"}} (\S+)$', text, re.M):
        buckets[float("inf") if m.group(1) == "+Inf" else float(m.group(1))] = float(m.group(2))
    return buckets


def quantile(before, after, q):
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0) for b in bounds]
    total = counts[-1]
    if total == 0:
        return 0.0, 0
    rank, prev_bound, prev_count = q * total, 0.0, 0.0
    for b, c in zip(bounds, counts):
        if c >= rank:
            if b == float("inf"):
                return prev_bound, int(total)
            return prev_bound + (b - prev_bound) * (rank - prev_count) / max(c - prev_count, 1e-9), int(total)
        prev_bound, prev_count = b, c
    return bounds[-2], int(total)


def write_prompt(path, words, seed):
    # Words of at most 4 letters: one token each with bmas's tokenizer.
    vocab = ["node", "gpu", "data", "task", "job", "user", "core", "rack", "link", "port", "file",
             "disk", "ram", "bus", "log", "key"]
    state = seed * 2654435761 % 2**32
    out = []
    for _ in range(words):
        state = (state * 1103515245 + 12345) % 2**31
        out.append(vocab[state % len(vocab)])
    with open(path, "w") as f:
        f.write(f"Document {seed}: " + " ".join(out))


def main():
    sections = []
    started = time.strftime("%Y-%m-%d %H:%M")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")

    # 1. Calibration.
    calib = json.loads(subprocess.run([BMAS, "engine", "calibrate", "--json"], capture_output=True,
                                      text=True, check=True).stdout)
    rows = ["| concurrency | ITL model (ms) | ITL reference | error | TTFT model (ms) | TTFT reference | error | output tok/s model | reference |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    worst = 0.0
    for r in calib:
        e_itl = 100 * (r["itl_ms"] / r["ref_itl_ms"] - 1)
        worst = max(worst, abs(e_itl))
        ttft_ref = r["ref_ttft_ms"]
        e_ttft = "" if ttft_ref is None else f"{100 * (r['ttft_ms'] / ttft_ref - 1):+.1f}%"
        if ttft_ref is not None:
            worst = max(worst, abs(100 * (r["ttft_ms"] / ttft_ref - 1)))
        tps_ref = r["ref_output_tokens_per_s"]
        rows.append(f"| {r['concurrency']} | {r['itl_ms']:.2f} | {r['ref_itl_ms']:.2f} | {e_itl:+.1f}% | "
                    f"{r['ttft_ms']:.1f} | {'' if ttft_ref is None else f'{ttft_ref:.0f}'} | {e_ttft} | "
                    f"{r['output_tokens_per_s']:.0f} | {'' if tps_ref is None else f'{tps_ref:.0f}'} |")
    sections.append(("1. Calibration: model vs reference (virtual time)", "build/bmas engine calibrate --json",
                     "Profile `llama-3.1-8b-h100` against NVIDIA's NIM figures for Llama-3.1-8B on one H100. "
                     "Assumed (the reference gives no lengths): 128-token prompts, 128 output tokens, "
                     f"all N requests sent at once. Worst ITL/TTFT error: **{worst:.1f}%** (target: within 10%).",
                     rows))

    # 2. Batching is real.
    eng = Engine("--profile", "llama-3.1-8b-h100")
    one, cmd1 = loadgen(eng, "--concurrency", "1", "--requests-per-client", "8", "--max-tokens", "128", "--prompt-words", "128")
    many, cmd64 = loadgen(eng, "--concurrency", "64", "--requests-per-client", "4", "--max-tokens", "128", "--prompt-words", "128")
    eng.stop()
    ratio = many["output_tokens_per_s"] / one["output_tokens_per_s"]
    itl_err = 100 * (one["itl_mean_ms"] / 4.63 - 1)
    sections.append(("2. Batching is real: 64 streams vs 1, real time", f"{eng.command}\n{cmd1}\n{cmd64}",
                     f"Streaming clients over loopback, measured outside the engine. 64 streams give "
                     f"**{ratio:.1f}x** one stream's output tokens/s (vLLM: ~20-60x; target >= 20x). "
                     f"ITL at one stream: **{one['itl_mean_ms']:.2f} ms**, {itl_err:+.1f}% from the reference 4.63 ms (target: within 10%); "
                     f"TTFT at one stream {one['ttft_mean_ms']:.1f} ms (reference 10 ms).",
                     ["| clients | output tok/s | ITL mean (ms) | ITL p99 (ms) | TTFT mean (ms) | requests |",
                      "|---:|---:|---:|---:|---:|---:|",
                      f"| 1 | {one['output_tokens_per_s']:.0f} | {one['itl_mean_ms']:.2f} | {one['itl_p99_ms']:.2f} | {one['ttft_mean_ms']:.1f} | {one['requests_ok']} |",
                      f"| 64 | {many['output_tokens_per_s']:.0f} | {many['itl_mean_ms']:.2f} | {many['itl_p99_ms']:.2f} | {many['ttft_mean_ms']:.1f} | {many['requests_ok']} |"]))

    # 3. Prefix caching is real.
    eng = Engine("--profile", "llama-3.1-8b-h100")
    tmp = tempfile.mkdtemp()
    cold, warm, prompt_tokens = [], [], 0
    for seed in range(5):
        path = os.path.join(tmp, f"prompt{seed}.txt")
        write_prompt(path, 1996, seed)
        c, cmd_cold = loadgen(eng, "--prompt-file", path, "--concurrency", "1", "--requests-per-client", "1", "--max-tokens", "16")
        w, cmd_warm = loadgen(eng, "--prompt-file", path, "--concurrency", "1", "--requests-per-client", "3", "--max-tokens", "16")
        cold.append(c["ttft_mean_ms"])
        warm.append(w["ttft_mean_ms"])
        prompt_tokens = c.get("prompt_tokens", 0) // max(c["requests_ok"], 1)
    metrics = eng.metrics()
    eng.stop()
    hits = re.search(r"^vllm:prefix_cache_hits_total\S* (\S+)", metrics, re.M).group(1)
    cold_ms, warm_ms = sum(cold) / len(cold), sum(warm) / len(warm)
    sections.append(("3. Prefix caching is real: TTFT of a 2,000-token prompt, cold vs repeated",
                     f"{eng.command}\n{cmd_cold}   # for each of 5 distinct prompts: first cold\n{cmd_warm}   # then repeated",
                     f"Prompts of {prompt_tokens} tokens, written by bench/run.py into PROMPT_DIR, 16 output tokens. Repeated/cold TTFT: **{warm_ms / cold_ms:.2f}x** (target: at most 0.3x). "
                     f"Prefix-cache hits over the run: {float(hits):.0f} tokens.",
                     ["| | TTFT mean (ms) |", "|---|---:|",
                      f"| cold (first time each prompt is seen) | {cold_ms:.1f} |",
                      f"| repeated | {warm_ms:.1f} |"]))

    # 4. Cost of the model itself.
    seconds = 10 if QUICK else 60
    eng = Engine("--profile", "llama-3.1-8b-h100")
    before_metrics, cpu0, t0 = eng.metrics(), eng.cpu_seconds(), time.time()
    load, cmd_load = loadgen(eng, "--concurrency", "1000", "--duration", str(seconds), "--max-tokens", "256", "--prompt-words", "128")
    cpu1, t1 = eng.cpu_seconds(), time.time()
    after_metrics = eng.metrics()
    eng.stop()
    name = "bmas_engine_step_lateness_seconds"
    p50, steps = quantile(histogram(before_metrics, name), histogram(after_metrics, name), 0.50)
    p99, _ = quantile(histogram(before_metrics, name), histogram(after_metrics, name), 0.99)
    engine_cores = (cpu1 - cpu0) / (t1 - t0)
    sections.append((f"4. Cost of the model: 1,000 concurrent streaming clients for {seconds} s",
                     f"{eng.command}\n{cmd_load}",
                     f"Engine CPU: **{engine_cores:.2f} cores** (target: under one). Step lateness (real end minus "
                     f"modelled end, from `{name}`, interpolated within its buckets): p50 {p50 * 1e3:.3f} ms, **p99 {p99 * 1e3:.3f} ms** (target: under 1 ms), "
                     f"over {steps} steps. The load client shares the machine's 2 cores.",
                     ["| requests ok | failed | output tok/s | ITL mean (ms) | ITL p99 (ms) | TTFT mean (ms) | engine CPU (cores) |",
                      "|---:|---:|---:|---:|---:|---:|---:|",
                      f"| {load['requests_ok']} | {load['requests_failed']} | {load['output_tokens_per_s']:.0f} | {load['itl_mean_ms']:.2f} | "
                      f"{load['itl_p99_ms']:.2f} | {load['ttft_mean_ms']:.1f} | {engine_cores:.2f} |"]))

    # 5. Virtual-time speed, and the JSON parser choice.
    micro = json.loads(subprocess.run([MICRO, "--benchmark_format=json"], capture_output=True, text=True,
                                      check=True).stdout)
    rows = ["| benchmark | result |", "|---|---:|"]
    best = 0.0
    for b in micro["benchmarks"]:
        if "tokens_per_cpu_s" in b:
            best = max(best, b["tokens_per_cpu_s"])
            rows.append(f"| {b['name']} (clients) | {b['tokens_per_cpu_s'] / 1e6:.1f} M simulated output tokens per CPU-second |")
        else:
            rows.append(f"| {b['name']} | {b['cpu_time']:.0f} ns per request body ({b['bytes_per_second'] / 1e6:.0f} MB/s) |")
    sections.append(("5. Virtual-time speed (and the request-path JSON parser)", "build/bench/bmas_engine_bench --benchmark_format=json",
                     f"The closed-loop scenario in virtual time, `llama-3.1-8b-h100`, 8 requests per client. "
                     f"Best: **{best / 1e6:.1f} M tokens per CPU-second** (target: 5 M or more). "
                     "The JSON rows parse a 1.7 kB chat request and read its fields: simdjson (used on the request "
                     "path) against RapidJSON (used to write responses); BM_RequestParser is the engine's whole parse "
                     "with validation and tokenization.",
                     rows))

    # bench/gateway_bench.py writes its own part, from "# Gateway benchmarks" on: keep it.
    path = os.path.join(ROOT, "bench", "RESULTS.md")
    old = open(path).read() if os.path.exists(path) else ""
    gateway_part = old[old.index("\n# Gateway benchmarks\n") + 1:] if "\n# Gateway benchmarks\n" in old else ""
    with open(path, "w") as f:
        f.write("# Benchmark results\n\n")
        f.write(f"Written by `python3 bench/run.py` (or `make bench`) on {started}; {os.cpu_count()} cores, {cpu}, "
                f"Linux {platform.release()}. Nothing here is typed in by hand: rerun the script to refresh it. "
                "The machine is shared and noisy; compare ratios, not absolute times.\n\n")
        for title, command, text, table in sections:
            f.write(f"## {title}\n\n```\n{command}\n```\n\n{text}\n\n" + "\n".join(table) + "\n\n")
        f.write(gateway_part)
    print(open(path).read())


if __name__ == "__main__":
    main()
