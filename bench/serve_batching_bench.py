#!/usr/bin/env python3
"""Continuous batching in `medtune serve`: aggregate generated tokens/s at 1, 4 and 16 concurrent
streaming clients, --parallel 1 (one request at a time, the old scheduling) against --parallel 16,
side by side in one run.

  python3 bench/serve_batching_bench.py MODEL.gguf [--medtune build/medtune] [--clients 1,4,16]
        [--parallel 1,16] [--max-tokens 64] [--requests 2] [--repeats 3] [--threads 2]
        [--extra NAME=BIN] (another medtune binary at its defaults, e.g. an older build)
        [--llama-cpp-python PYTHON] (also llama_cpp.server, run by that Python, same GGUF, threads and
        per-request context; it serves one request at a time)

Every server runs at once on its own loopback port (idle ones wait passively), and the
measurements alternate between them (repeat -> clients -> server), so that a noisy machine's
slow minutes fall on all of them alike. One measurement: C clients at once, each sending
`requests` streamed greedy completions (different prompts, up to max_tokens tokens each) one
after the other; aggregate tokens/s =
sum of the streams' usage.completion_tokens / wall time. Prints medians over the repeats as a
markdown table (and all samples as JSON on stderr). Standard library only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# The prompts and server helpers are serve_bench.py's (this script runs from bench/, so it imports).
from serve_bench import PROMPTS, free_port, post, wait_up


def stream(base, prompt, max_tokens):
    """One streamed greedy completion; its completion tokens (from the usage chunk)."""
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    n = chunks = 0
    with post(base + "/v1/completions", body) as r:
        for line in r:
            line = line.strip()
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                j = json.loads(line[6:])
                if j.get("usage"):
                    n = j["usage"]["completion_tokens"]
                elif j.get("choices"):
                    chunks += 1
    # llama_cpp.server sends no usage chunk; it streams one chunk per token.
    return n if n else chunks


def aggregate(base, clients, requests, max_tokens):
    total = [0]
    errors = []
    lock = threading.Lock()

    def client(i):
        try:
            for k in range(requests):
                n = stream(base, PROMPTS[(i + k) % len(PROMPTS)], max_tokens)
                with lock:
                    total[0] += n
        except Exception as e:
            errors.append(repr(e))
    t0 = time.time()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]}")
    return total[0] / (time.time() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--medtune", default="build/medtune")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--parallel", default="1,16")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--slot-ctx", type=int, default=512, help="KV positions per slot: -c = parallel x this")
    ap.add_argument("--extra", action="append", default=[], help="NAME=BIN: another medtune build, at its defaults")
    ap.add_argument("--llama-cpp-python", default="", help="a Python with llama-cpp-python[server]: adds llama_cpp.server")
    args = ap.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OMP_WAIT_POLICY="passive")
    common = ["-q", "--alias", "m", "--queue-size", "256", "--threads-http", "64"]
    servers = {}  # name -> (cmd, base)
    for p in [int(p) for p in args.parallel.split(",")]:
        port = free_port()
        servers[f"--parallel {p}"] = ([args.medtune, "-t", str(args.threads), "serve", args.model, "--port", str(port),
                                       "--parallel", str(p), "-c", str(p * args.slot_ctx)] + common,
                                      f"http://127.0.0.1:{port}")
    for e in args.extra:
        name, binary = e.split("=", 1)
        port = free_port()
        servers[name] = ([binary, "-t", str(args.threads), "serve", args.model, "--port", str(port),
                          "-c", str(args.slot_ctx)] + common, f"http://127.0.0.1:{port}")
    if args.llama_cpp_python:
        port = free_port()
        servers["llama_cpp.server"] = ([args.llama_cpp_python, "-m", "llama_cpp.server", "--model", args.model,
                                        "--model_alias", "m", "--host", "127.0.0.1", "--port", str(port),
                                        "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
                                        "--n_ctx", str(args.slot_ctx)], f"http://127.0.0.1:{port}")
    procs = []
    samples = {name: {c: [] for c in clients} for name in servers}
    try:
        for name, (cmd, base) in servers.items():
            log = tempfile.NamedTemporaryFile(prefix="serve_batching_bench_", suffix=".log", delete=False)
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
            wait_up(base, procs[-1])
            aggregate(base, 1, 1, 8)  # warm-up: page the weights in
        for rep in range(args.repeats):
            for c in clients:
                for name, (_, base) in servers.items():
                    tps = aggregate(base, c, args.requests, args.max_tokens)
                    samples[name][c].append(tps)
                    print(f"repeat {rep + 1}, {c} clients, {name}: {tps:.1f} tokens/s", file=sys.stderr, flush=True)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=60)
    names = list(servers)
    print(f"| aggregate generated tokens/s (median of {args.repeats}) | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for c in clients:
        print(f"| {c} concurrent streaming client{'s' if c > 1 else ''} | " +
              " | ".join(f"{statistics.median(samples[n][c]):.1f}" for n in names) + " |")
    print(json.dumps(samples), file=sys.stderr)


if __name__ == "__main__":
    main()
