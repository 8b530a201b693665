#!/usr/bin/env python3
"""W5: a job on a node that lacks the user's workspace: the prolog's copy of it, against `lxc copy`.

Usage: bench/workspace_copy_bench.py [BUILD_DIR] [--runs N]

Two LXDs on this host stand for two nodes (LXD's own tests run several daemons the same way):
node A (`bmas lxd up` with `[lxd] listen`) holds a Debian workspace of user bmasbench001; node B
(`bmas lxd up` with A as its peer) has none. Each run times, on B:
  - bmas: `bmas slurm hook prolog` for a job of that user (what Slurm runs before the job): it
    finds the workspace on A, pulls the copy over HTTPS, starts it and waits for its init; then
    `bmas slurm hook epilog`, which deletes the copy;
  - lxc: the same copy with LXD's own client, `lxc copy A:ws-bmasbench001 ws-bmasbench001
    --instance-only --stateless` then `lxc start`, the reference; then `lxc delete --force`.
The two alternate, so that both see the same page cache and load. Writes the section
"# Workspace copy between nodes" of bench/RESULTS.md. Needs root and LXD; says why and exits 0
without them.
"""
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = 10
if "--runs" in sys.argv:
    i = sys.argv.index("--runs")
    RUNS = int(sys.argv[i + 1])
    del sys.argv[i:i + 2]

import run  # noqa: E402  bench/run.py: ROOT, BMAS
ROOT, BMAS = run.ROOT, run.BMAS
HEADING = "# Workspace copy between nodes"
USER = "bmasbench001"
NAME = "ws-" + USER


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, top, name, extra):
        self.state = os.path.join(top, f"state-{name}")
        self.lxd_dir = os.path.join(top, f"lxd-{name}")
        self.config = os.path.join(top, f"bmas-{name}.toml")
        with open(self.config, "w") as f:
            f.write(f'[lxd]\ndir = "{self.lxd_dir}"\nstorage_driver = "btrfs"\npool_size = "20GiB"\n'
                    f'cert = "{top}/peer.crt"\nkey = "{top}/peer.key"\n{extra}')
        self.bmas_path = os.path.join(top, "bmas")
        self.env = dict(os.environ, LXD_DIR=self.lxd_dir, HOME=top)

    def run(self, cmd, env=None, check=True):
        r = subprocess.run(cmd, env=dict(self.env, **(env or {})), capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()} {r.stdout.strip()}")
        return r

    def bmas(self, *args, env=None):
        return self.run([self.bmas_path, "--config", self.config, "--state-dir", self.state, *args], env)


def timed(f):
    t0 = time.monotonic()
    f()
    return time.monotonic() - t0


def p50(xs):
    return statistics.median(xs)


def main():
    if os.geteuid() != 0:
        print("workspace_copy_bench: skipped: `bmas lxd up` needs root", file=sys.stderr)
        return
    if shutil.which("lxd") is None:
        print("workspace_copy_bench: skipped: LXD is not installed (bash scripts/install-deps.sh)",
              file=sys.stderr)
        return
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--create-home", USER], check=True)
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "src"):
        commit += " with changes to src/ not committed"
    top = tempfile.mkdtemp(prefix="bmas-copy-bench-", dir="/tmp")
    os.chmod(top, 0o711)
    shutil.copy2(BMAS, os.path.join(top, "bmas"))
    port = free_port()
    a = Node(top, "a", f'listen = "127.0.0.1:{port}"\n')
    bmas_s, lxc_s, sizes = [], [], []
    a.bmas("lxd", "up")
    # B names A with the fingerprint A's LXD reports (no peer is trusted on first use).
    fingerprint = json.loads(a.bmas("lxd", "status", "--json").stdout)["certificate_fingerprint"]
    b = Node(top, "b", f'peers = [{{ url = "https://127.0.0.1:{port}", '
                       f'fingerprint = "{fingerprint}" }}]\n')
    try:
        b.bmas("lxd", "up")
        image = a.bmas("image", "build", "--base", "debian").stdout.strip()
        print(f"workspace_copy_bench: {image}", file=sys.stderr)
        a.bmas("workspace", "create", USER)
        # The reference client needs A as a remote that trusts it: the same certificate.
        os.makedirs(os.path.join(top, ".config", "lxc"), exist_ok=True)
        shutil.copy(os.path.join(top, "peer.crt"), os.path.join(top, ".config", "lxc", "client.crt"))
        shutil.copy(os.path.join(top, "peer.key"), os.path.join(top, ".config", "lxc", "client.key"))
        b.run(["lxc", "remote", "add", "nodea", f"https://127.0.0.1:{port}", "--accept-certificate"])
        used = a.run(["du", "-sm", os.path.join(a.lxd_dir, "storage-pools", "bmas", "containers", NAME)])
        size_mb = used.stdout.split()[0]
        for i in range(RUNS):
            env = {"SLURM_JOB_ID": str(9000 + i), "SLURM_JOB_USER": USER, "SLURMD_NODENAME": "nodeb",
                   "SLURM_JOB_GPUS": ""}

            def prolog():
                out = b.bmas("slurm", "hook", "prolog", env=env).stdout
                if "copied" not in out:
                    raise RuntimeError(f"the prolog made no copy: {out}")
            bmas_s.append(timed(prolog))
            b.bmas("slurm", "hook", "epilog", env=env)

            def reference():
                b.run(["lxc", "copy", f"nodea:{NAME}", NAME, "--instance-only", "--stateless"])
                b.run(["lxc", "start", NAME])
            lxc_s.append(timed(reference))
            b.run(["lxc", "delete", "--force", NAME])
    finally:
        for node in (b, a):
            node.run([node.bmas_path, "--config", node.config, "--state-dir", node.state, "lxd", "down"],
                     check=False)
        with open("/proc/self/mounts") as f:
            left = [l.split()[1] for l in f if l.split()[1].startswith(top + "/")]
        for point in sorted(left, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)
        shutil.rmtree(top, ignore_errors=True)
    cmd = "python3 bench/workspace_copy_bench.py build" + (f" --runs {RUNS}" if RUNS != 10 else "")
    text = f"""{HEADING}

Measured {time.strftime('%Y-%m-%d %H:%M')} at {commit}, `{cmd}`, on this 2-core machine.
Two LXDs on one host stand for two nodes; the copy goes over HTTPS on loopback, so the network
is not the limit here, the pools' btrfs and rsync are. The workspace: the Debian image (`--init minimal`),
{size_mb} MB in the pool.

## W5. A job on a node without the workspace: prolog with the copy, vs `lxc copy` + `lxc start`

| | p50 | min | max | runs |
|---|---|---|---|---|
| bmas prolog (find on the peer, pull the copy, start, wait for init) | {p50(bmas_s):.2f} s | {min(bmas_s):.2f} s | {max(bmas_s):.2f} s | {RUNS} |
| `lxc copy --instance-only --stateless` + `lxc start` (reference) | {p50(lxc_s):.2f} s | {min(lxc_s):.2f} s | {max(lxc_s):.2f} s | {RUNS} |

Ratio of p50s, bmas / lxc: {p50(bmas_s) / p50(lxc_s):.2f}x. The prolog also asks each peer for
the workspace and checks the peer's certificate; `lxc` had its remote set up beforehand. The
epilog (not timed) deletes the copy after each run.
"""
    run.write_section(HEADING, text)
    print(text)


if __name__ == "__main__":
    main()
