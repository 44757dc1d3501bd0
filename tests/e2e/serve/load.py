"""Load and fault test for `medtune serve` (run by tests/e2e/serve_load.sh and soak_serve.sh).

argv: BASE_URL MODEL SERVER_PID CLIENTS ROUNDS
Each round: CLIENTS threads at once, each one streaming chat request; every 4th client drops its
connection after two events, every 8th sends garbage first (a broken request line, a truncated
body, invalid JSON, a wrong field); all well-formed requests must succeed with [DONE]. Reports
p50/p99 request latency and time to first token, and aggregate tokens/s. After the first round
(warm-up: allocator pools, thread stacks, OpenMP), the server's RSS, thread count and open file
descriptors are sampled after each round; they must not grow: RSS by at most 16 MiB in all (the
allocator keeps freed pages; a leak of one KV cache row per request would be far more), threads and
fds back to their warm-up values once idle keep-alive connections are closed.
Prints one JSON line with the numbers.
"""
import http.client
import json
import os
import socket
import statistics
import sys
import threading
import time
import urllib.parse

base_url, model, pid, clients, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
u = urllib.parse.urlparse(base_url)
HOST, PORT = u.hostname, u.port
failures, latencies, ttfts, tokens = [], [], [], [0]
lock = threading.Lock()
QUESTIONS = ["Which drug is first-line for type 2 diabetes?", "What does the heart pump?",
             "Name a symptom of anemia.", "What is hypertension?"]


def proc_stats():
    status = open(f"/proc/{pid}/status").read()
    rss = int([l for l in status.splitlines() if l.startswith("VmRSS:")][0].split()[1]) * 1024
    threads = int([l for l in status.splitlines() if l.startswith("Threads:")][0].split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, threads, fds


def garbage(kind):
    s = socket.create_connection((HOST, PORT), timeout=30)
    try:
        if kind == 0:
            s.sendall(b"GARBAGE / HTTP/9.9\r\n\r\n")
        elif kind == 1:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"model\":")
        elif kind == 2:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{{{{{")
        else:
            body = json.dumps({"model": model, "messages": [{"role": "user", "content": 5}]}).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        if kind == 1:
            return  # hangs up in the middle of its body: the server must just drop it
        reply = s.recv(4096)
        if kind in (2, 3) and b" 400 " not in reply.split(b"\r\n")[0]:
            with lock:
                failures.append(f"garbage {kind}: {reply[:80]!r}")
    except OSError:
        pass  # the server may close a connection it cannot parse: that is fine
    finally:
        s.close()


def client(i, rnd):
    if i % 8 == 7:
        garbage((i // 8 + rnd) % 4)
    drop = i % 4 == 3
    body = json.dumps({"model": model, "stream": True, "temperature": 0, "max_tokens": 16,
                       "stream_options": {"include_usage": True},
                       "messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]})
    t0 = time.time()
    conn = http.client.HTTPConnection(HOST, PORT, timeout=300)
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            with lock:
                failures.append(f"client {i}: HTTP {r.status} {r.read()[:200]!r}")
            return
        events, first, done, n = 0, None, False, 0
        while True:
            line = r.fp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            events += 1
            if line == b"data: [DONE]":
                done = True
                break
            j = json.loads(line[6:])
            if j.get("choices") and j["choices"][0]["delta"].get("content") and first is None:
                first = time.time() - t0
            if j.get("usage"):
                n = j["usage"]["completion_tokens"]
            if drop and events >= 2:
                conn.sock.shutdown(socket.SHUT_RDWR)
                return
        if not done:
            with lock:
                failures.append(f"client {i}: the stream ended without [DONE]")
            return
        with lock:
            latencies.append(time.time() - t0)
            if first is not None:
                ttfts.append(first)
            tokens[0] += n
    except Exception as e:  # a well-formed request must never fail
        with lock:
            failures.append(f"client {i}: {type(e).__name__}: {e}")
    finally:
        conn.close()


def settle(baseline_fds):
    # Idle keep-alive connections close after the server's 5 s keep-alive timeout.
    deadline = time.time() + 15
    while time.time() < deadline:
        s = proc_stats()
        if s[2] <= baseline_fds:
            return s
        time.sleep(0.2)
    return proc_stats()


samples = []
t_start = time.time()
busy = 0.0
for rnd in range(rounds):
    t0 = time.time()
    threads = [threading.Thread(target=client, args=(i, rnd)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    busy += time.time() - t0
    if rnd == 0:
        baseline = settle(10**9)
        tokens0, busy0 = tokens[0], busy
    samples.append(settle(baseline[2]))

rss = [s[0] for s in samples]
report = {
    "clients": clients, "rounds": rounds, "requests_ok": len(latencies), "failures": len(failures),
    "p50_latency_s": statistics.median(latencies) if latencies else None,
    "p99_latency_s": sorted(latencies)[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else None,
    "p50_ttft_s": statistics.median(ttfts) if ttfts else None,
    "p99_ttft_s": sorted(ttfts)[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] if ttfts else None,
    "tokens_per_s": (tokens[0] - tokens0) / (busy - busy0) if rounds > 1 and busy > busy0 else None,
    "rss_mib_after_warmup": baseline[0] / 2**20, "rss_mib_last": rss[-1] / 2**20, "rss_mib_max": max(rss) / 2**20,
    "threads_after_warmup": baseline[1], "threads_last": samples[-1][1],
    "fds_after_warmup": baseline[2], "fds_last": samples[-1][2],
}
print(json.dumps(report))
for f in failures[:10]:
    print("FAIL:", f)
ok = not failures
if max(rss) - baseline[0] > 16 * 2**20:
    print(f"FAIL: RSS grew from {baseline[0] / 2**20:.1f} MiB to {max(rss) / 2**20:.1f} MiB"); ok = False
if samples[-1][1] > baseline[1]:
    print(f"FAIL: threads grew from {baseline[1]} to {samples[-1][1]}"); ok = False
if samples[-1][2] > baseline[2]:
    print(f"FAIL: open fds grew from {baseline[2]} to {samples[-1][2]}"); ok = False
sys.exit(0 if ok else 1)
