#!/usr/bin/env python3
"""OpenAI-compatible servers side by side: `medtune serve` and llama-cpp-python's
`llama_cpp.server` on the same GGUF, the same prompts, one after the other in one run.

  python3 bench/serve_bench.py MODEL.gguf [--medtune build/medtune] [--llama-cpp-python PY]
                               [--clients 1,4,16] [--max-tokens 64] [--threads 2]

Per server, started on a free loopback port and stopped afterwards:
  single stream  3 streamed completions, greedy: time to first token (TTFT), decode tokens/s
                 (streamed chunks after the first / time between the first and the last), medians;
  concurrent     C clients at once, each 2 non-streamed completions (max_tokens tokens, greedy,
                 different prompts): aggregate completion tokens/s = sum(usage) / wall time.
Prints a markdown table and the ratio medtune / llama.cpp. Standard library only (urllib,
threads); llama.cpp is skipped with a note when PY cannot import llama_cpp.server.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

PROMPTS = [
    "A 45-year-old man presents with crushing chest pain radiating to the left arm. The first step in management is",
    "Metformin lowers blood glucose mainly by",
    "The most common cause of community-acquired pneumonia in adults is",
    "In a patient with diabetic ketoacidosis, the initial fluid of choice is",
    "Warfarin acts by inhibiting",
    "The classic triad of Wernicke encephalopathy consists of",
    "First-line treatment for uncomplicated hypertension in a 50-year-old includes",
    "Loop diuretics act on the",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, stream=False):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=600)


def wait_up(url, proc, seconds=300):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=5).read()
            return
        except Exception:
            time.sleep(0.5)
    raise RuntimeError("server did not come up")


def single_stream(base, model, max_tokens):
    ttfts, rates = [], []
    for i in range(3):
        t0 = time.time()
        first = last = None
        chunks = 0
        with post(base + "/v1/completions", {"model": model, "prompt": PROMPTS[i], "max_tokens": max_tokens,
                                             "temperature": 0, "stream": True}) as r:
            for line in r:
                line = line.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                j = json.loads(line[6:])
                if j.get("choices") and j["choices"][0].get("text"):
                    now = time.time()
                    chunks += 1
                    first = first or now
                    last = now
        ttfts.append(first - t0)
        if chunks > 1:
            rates.append((chunks - 1) / (last - first))
    return statistics.median(ttfts), statistics.median(rates)


def concurrent(base, model, clients, max_tokens):
    total = [0]
    lock = threading.Lock()

    def one(i):
        for k in range(2):
            with post(base + "/v1/completions", {"model": model, "prompt": PROMPTS[(i + k) % len(PROMPTS)],
                                                 "max_tokens": max_tokens, "temperature": 0}) as r:
                n = json.load(r)["usage"]["completion_tokens"]
            with lock:
                total[0] += n
    t0 = time.time()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return total[0] / (time.time() - t0)


def measure(name, cmd, base, model, args, env):
    log = tempfile.NamedTemporaryFile(prefix=f"serve_bench_{name}_", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_up(base, proc)
        single_stream(base, model, 8)  # warm-up
        ttft, rate = single_stream(base, model, args.max_tokens)
        agg = {c: concurrent(base, model, c, args.max_tokens) for c in args.clients}
        return {"ttft_s": ttft, "decode_tps": rate, "aggregate_tps": agg}
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--medtune", default="build/medtune")
    ap.add_argument("--llama-cpp-python", default="build/venv-llamacpp/bin/python")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OMP_WAIT_POLICY="passive")
    results = {}
    port = free_port()
    results["medtune serve"] = measure(
        "medtune", [args.medtune, "-t", str(args.threads), "serve", args.model, "--port", str(port), "-c", "2048", "-q",
                    "--alias", "m", "--queue-size", "256", "--threads-http", "64"],
        f"http://127.0.0.1:{port}", "m", args, env)
    py = args.llama_cpp_python
    if subprocess.run([py, "-c", "import llama_cpp.server"], capture_output=True).returncode == 0:
        port = free_port()
        results["llama_cpp.server"] = measure(
            "llama_cpp", [py, "-m", "llama_cpp.server", "--model", args.model, "--port", str(port), "--n_ctx", "2048",
                          "--n_threads", str(args.threads), "--model_alias", "m"],
            f"http://127.0.0.1:{port}", "m", args, env)
    else:
        print(f"note: {py} cannot import llama_cpp.server: llama.cpp not measured", file=sys.stderr)
    names = list(results)
    print("| | " + " | ".join(names) + (" | medtune / llama.cpp |" if len(names) == 2 else " |"))
    print("|---|" + "---:|" * (len(names) + (1 if len(names) == 2 else 0)))
    rows = [("time to first token, s (median of 3)", lambda r: r["ttft_s"], False),
            ("single-stream decode, tokens/s (median of 3)", lambda r: r["decode_tps"], True)]
    rows += [(f"aggregate tokens/s, {c} concurrent clients", (lambda c: lambda r: r["aggregate_tps"][c])(c), True)
             for c in args.clients]
    for label, get, higher_better in rows:
        vals = [get(results[n]) for n in names]
        line = f"| {label} | " + " | ".join(f"{v:.3g}" for v in vals) + " |"
        if len(vals) == 2:
            line += f" {vals[0] / vals[1]:.2f} |"
        print(line)
    print(json.dumps(results), file=sys.stderr)


if __name__ == "__main__":
    main()
