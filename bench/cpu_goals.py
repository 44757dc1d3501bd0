#!/usr/bin/env python3
"""Issue 17's CPU goals on this machine, side by side in one run, with a verdict for each goal.

    bash bench/setup_peers.sh build/peers          # once: the pinned peers, llama.cpp built for this CPU
    python3 bench/cpu_goals.py --peers build/peers [--out runs/cpu-goals] [--rounds 3]

Run from the repository root after scripts/build.sh. What it measures, each against its peer on the
same GGUF with the same number of threads (every peer run alternates with medtune's within a round,
so that a shared machine's load hits both alike):

  forward   prompt (256 tokens) and batch-1 decode (64 tokens after it) tokens/s of medtune's int8
            route (what `generate` and `serve` take by default on these files) against llama.cpp
            (llama-cpp-python), on the bundled Q4_1 file and a Q8_0 file made from it by llama.cpp's
            own quantizer (bench/llama_quantize.py); bench_forward against bench/llama_cpp_forward.py
  scoring   MedQA dev letter scoring, questions/s, `medtune eval --precision int8` against the
            transformers fp32 loop, and the int8 letters' agreement with medtune's fp32 ones
            (bench/eval_vs_transformers.py); with bf16 arithmetic on the CPU also both engines at bf16
  training  a LoRA step (4 x 256 tokens, r16 on all seven linears), medtune `--precision bf16`
            against PyTorch + PEFT under bf16 autocast and at fp32 (bench/compare_train.py), --rounds
            times (a process of PyTorch's each)
  default   the embedded default (configs/smollm2-fictional-lora.yaml) trained at precision=bf16,
            then its test accuracy (the issue asks >= 90%)

A goal's ratio is the median of its rounds' ratios (both engines ran back to back in a round; the
ratio of the engines' medians is printed beside it, and differs where the host's speed drifted
between rounds). The verdict says whether that median meets the goal on this CPU and nothing more:
it does not know which goals this CPU's instructions allow (BENCHMARKS.md argues those per CPU).
Writes OUT/goals.md (the table) and OUT/goals.json (every number), and the peers' and medtune's raw
output under OUT/logs/.
OMP_WAIT_POLICY is removed from every child's environment, as a user's shell has it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics as st
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_quantize  # noqa: E402  (its output names; llama_cpp is imported only to quantize)

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BUNDLED = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
# Flags of /proc/cpuinfo that decide which kernel paths run (doctor prints the paths taken).
ISA_FLAGS = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
             "amx_tile", "amx_int8", "amx_bf16")


def child_env() -> dict:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    return env


def run(cmd: list[str], log: str) -> str:
    """Runs cmd, appends its stdout and stderr to log, returns stdout; a failure names the log."""
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        p = subprocess.run(cmd, cwd=ROOT, env=child_env(), text=True, stdout=subprocess.PIPE,
                           stderr=f)
        f.write(p.stdout)
    if p.returncode != 0:
        sys.exit(f"cpu_goals.py: `{' '.join(cmd)}` exited with {p.returncode}; its output is in {log}")
    return p.stdout


def blas_text(cpu: dict) -> str:
    """OpenBLAS's kernels for medtune's fp32 GEMMs, and the environment's OPENBLAS_CORETYPE if set."""
    env = cpu.get("openblas_coretype_env", "")
    return f"OpenBLAS {cpu.get('openblas_core', 'unknown')}" + (f" (OPENBLAS_CORETYPE={env} in the environment)" if env else "")


def cpu_identity(build: str) -> dict:
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key in ("vendor_id", "model name", "cpu family", "model") and key not in info:
                info[key] = value
            if key == "flags" and "flags" not in info:
                have = set(value.split())
                info["flags"] = [x for x in ISA_FLAGS if x in have]
    info.setdefault("flags", [])
    info["logical_cpus"] = os.cpu_count()
    doctor = subprocess.run([os.path.join(build, "medtune"), "doctor"], cwd=ROOT, env=child_env(),
                            text=True, capture_output=True).stdout
    m = re.search(r"kernel paths this CPU can take: (.*?); taking: (\S+)", doctor)
    info["medtune_kernel_path"] = m.group(2) if m else "unknown"
    m = re.search(r"bf16 all weights: (\S+)", doctor)
    info["medtune_bf16_path"] = m.group(1) if m else "unknown"
    # medtune's fp32 GEMMs are OpenBLAS's: which kernels, and whether the environment chose them
    # (a machine-wide OPENBLAS_CORETYPE below the CPU slows them 1.7x on a Zen 5: BENCHMARKS.md,
    # session 53). The peers do not use OpenBLAS for their GEMMs.
    m = re.search(r"BLAS: .*?; core (\S+),", doctor)
    info["openblas_core"] = m.group(1) if m else "unknown"
    info["openblas_coretype_env"] = os.environ.get("OPENBLAS_CORETYPE", "")
    return info


def has_bf16_arithmetic(cpu: dict) -> bool:
    return "avx512_bf16" in cpu["flags"] or "amx_bf16" in cpu["flags"]


def q8_0_file(a, logs: str) -> str:
    """The Q8_0 file llama.cpp's quantizer makes from the bundled model (made once, kept in OUT)."""
    path = llama_quantize.output_path(a.model, a.models_dir, "Q8_0")
    if not os.path.exists(path):
        os.makedirs(a.models_dir, exist_ok=True)
        run([a.llama_python, "bench/llama_quantize.py", a.model, a.models_dir, "Q8_0"],
            os.path.join(logs, "quantize.log"))
    return path


def forward(a, files: list[str], logs: str) -> dict:
    """Per file: each round's llama.cpp and medtune int8 prompt/decode tokens/s (medians of 2)."""
    log = os.path.join(logs, "forward.log")
    res = {os.path.basename(f): {"llama.cpp": [], "medtune int8": []} for f in files}
    for r in range(a.rounds):
        for f in files:
            out = run([a.llama_python, "bench/llama_cpp_forward.py", f, "256", "64", str(a.threads), "2"], log)
            rounds = re.findall(r"prompt ([\d.]+) tok/s, decode ([\d.]+) tok/s", out)
            if not rounds:
                sys.exit(f"cpu_goals.py: no timings from bench/llama_cpp_forward.py; see {log}")
            llama = (st.median(float(p) for p, _ in rounds), st.median(float(d) for _, d in rounds))
            out = run([os.path.join(a.build, "bench", "bench_forward"), f, "--prompt-tokens", "256",
                       "--decode-tokens", "64", "--repeats", "2", "--threads", str(a.threads),
                       "--precision", "int8"], log)
            j = json.loads(out.strip().splitlines()[-1])
            ours = (j["prompt_tokens_per_s_median"], j["decode_tokens_per_s_median"])
            name = os.path.basename(f)
            res[name]["llama.cpp"].append(llama)
            res[name]["medtune int8"].append(ours)
            print(f"  round {r + 1} {name}: llama.cpp prompt {llama[0]:.0f} decode {llama[1]:.1f}, "
                  f"medtune int8 prompt {ours[0]:.0f} decode {ours[1]:.1f} tokens/s", flush=True)
    return res


def scoring(a, bf16: bool, logs: str) -> dict:
    cmd = [a.torch_python, "bench/eval_vs_transformers.py", "--medtune", os.path.join(a.build, "medtune"),
           "--model", a.model, "--data", a.data, "--limit", str(a.limit), "--threads", str(a.threads),
           "--repeats", str(a.scoring_repeats), "--int8", "--no-bs4", "--letter-only"] + (["--bf16"] if bf16 else [])
    return json.loads(run(cmd, os.path.join(logs, "scoring.log")).strip().splitlines()[-1])


def training(a, logs: str) -> list[dict]:
    """compare_train.py's numbers, one dict per round: each round runs both engines at both
    precisions in one process of PyTorch's, whose bf16 step moved by up to 1.7x between such
    processes (BENCHMARKS.md, session 53), so one round is no verdict."""
    cmd = [a.torch_python, "bench/compare_train.py", "--bench", os.path.join(a.build, "bench", "bench_train_step"),
           "--model", a.model, "--threads", str(a.threads), "--precisions", "fp32,bf16",
           "--steps", str(a.train_steps)]
    rounds = []
    for i in range(a.rounds):
        rounds.append(json.loads(run(cmd, os.path.join(logs, "training.log")).strip().splitlines()[-1]))
        steps = {k: v["median_step_s"] for k, v in rounds[-1].items()}
        print(f"  round {i + 1}: step seconds " + ", ".join(f"{k} {v:.3f}" for k, v in steps.items()), flush=True)
    return rounds


def embedded_default(a, out: str, logs: str) -> dict:
    log = os.path.join(logs, "default.log")
    medtune = os.path.join(a.build, "medtune")
    run_dir, eval_dir = os.path.join(out, "default-bf16"), os.path.join(out, "default-bf16-eval")
    for d in (run_dir, eval_dir):  # this script's own output from an earlier run: trained afresh
        shutil.rmtree(d, ignore_errors=True)
    t0 = time.perf_counter()
    run([medtune, "-t", str(a.threads), "train", "--config", "configs/smollm2-fictional-lora.yaml",
         f"output_dir={run_dir}", "precision=bf16"], log)
    train_s = time.perf_counter() - t0
    run([medtune, "-t", str(a.threads), "eval", a.model, "--data", "data/fictional/test.jsonl", "--format",
         "lm_eval", "--scoring", "text", "-q", "--adapter", os.path.join(run_dir, "adapter"), "--out", eval_dir], log)
    acc = json.load(open(os.path.join(eval_dir, "report.json")))["metrics"]["accuracy"]
    return {"train_s": train_s, "correct": acc["correct"], "n": acc["n"], "accuracy": acc["value"]}


def ratio_row(goal: str, ours: list[float], peer: list[float], target: float) -> dict:
    """A goal's row. Both engines ran back to back in each round, so a round's ratio is a paired
    comparison; the verdict takes the median of those, since a shared host's speed drifts between
    rounds (session 50's Zen 3 decoded 1.6x faster 90 minutes after its first run) and moves both
    engines of a round alike. The ratio of the engines' medians is kept beside it."""
    rounds = [o / p for o, p in zip(ours, peer)]
    ratio = st.median(rounds)
    return {"goal": goal, "ratio": ratio, "ratio_of_medians": st.median(ours) / st.median(peer),
            "rounds": rounds, "target": target, "met": ratio >= target}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default="build/peers", help="bench/setup_peers.sh's directory (torch/, llama/)")
    ap.add_argument("--torch-python", help="a python with torch, transformers, peft (default PEERS/torch/bin/python)")
    ap.add_argument("--llama-python", help="a python with llama_cpp (default PEERS/llama/bin/python)")
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default=BUNDLED)
    ap.add_argument("--models-dir", help="where the Q8_0 file is made (default OUT/models)")
    ap.add_argument("--data", default=os.environ.get("MEDTUNE_MEDQA_DEV", "/work/shared/data/medqa/dev.jsonl"),
                    help="MedQA dev JSONL for the scoring goal")
    ap.add_argument("--out", default="runs/cpu-goals")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="forward and training rounds (each engine, each file)")
    ap.add_argument("--limit", type=int, default=100, help="MedQA questions scored")
    ap.add_argument("--scoring-repeats", type=int, default=2)
    ap.add_argument("--train-steps", type=int, default=3, help="timed steps per engine and precision")
    ap.add_argument("--scoring-bf16", choices=("auto", "on", "off"), default="auto",
                    help="also score at bf16 on both engines; auto: where the CPU has bf16 arithmetic "
                         "(elsewhere PyTorch's autocast is emulated, minutes per question set)")
    ap.add_argument("--skip", default="", help="comma-separated: forward, scoring, training, default")
    a = ap.parse_args()
    a.torch_python = a.torch_python or os.path.join(a.peers, "torch", "bin", "python")
    a.llama_python = a.llama_python or os.path.join(a.peers, "llama", "bin", "python")
    a.models_dir = a.models_dir or os.path.join(a.out, "models")
    # The children run in the repository root: every path made absolute from the caller's directory.
    for key in ("peers", "torch_python", "llama_python", "build", "model", "models_dir", "data", "out"):
        setattr(a, key, os.path.abspath(getattr(a, key)))
    skip = {s for s in a.skip.split(",") if s}
    for s in skip - {"forward", "scoring", "training", "default"}:
        sys.exit(f"cpu_goals.py: --skip {s}: not one of forward, scoring, training, default")
    if "scoring" not in skip and not os.path.exists(a.data):
        sys.exit(f"cpu_goals.py: --data {a.data}: no such file (the MedQA dev split; or --skip scoring)")
    for need, py in (({"forward"}, a.llama_python), ({"scoring", "training"}, a.torch_python)):
        if need - skip and not os.path.exists(py):
            sys.exit(f"cpu_goals.py: {py}: no such interpreter; run bash bench/setup_peers.sh {a.peers} "
                     f"or pass --{'llama' if 'forward' in need else 'torch'}-python")
    logs = os.path.join(a.out, "logs")
    os.makedirs(logs, exist_ok=True)

    cpu = cpu_identity(a.build)
    print(f"CPU: {cpu.get('model name')} (family {cpu.get('cpu family')} model {cpu.get('model')}), "
          f"{cpu['logical_cpus']} logical CPUs, flags {' '.join(cpu['flags'])}; medtune's kernels: "
          f"{cpu['medtune_kernel_path']}, bf16 GEMMs: {cpu['medtune_bf16_path']}, fp32 GEMMs: {blas_text(cpu)}; "
          f"{a.threads} threads", flush=True)
    result = {"cpu": cpu, "threads": a.threads, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": []}
    rows = result["rows"]

    if "forward" not in skip:
        files = [a.model, q8_0_file(a, logs)]
        print(f"forward: {a.rounds} rounds of prompt 256 + decode 64, {', '.join(map(os.path.basename, files))}")
        fw = result["forward"] = forward(a, files, logs)
        for name, eng in fw.items():
            for i, (what, target) in enumerate((("prompt", 3.0), ("decode", 1.5))):
                rows.append(ratio_row(f"{what} {name} vs llama.cpp", [x[i] for x in eng["medtune int8"]],
                                      [x[i] for x in eng["llama.cpp"]], target))
    if "scoring" not in skip:
        bf16 = a.scoring_bf16 == "on" or (a.scoring_bf16 == "auto" and has_bf16_arithmetic(cpu))
        print(f"scoring: MedQA dev first {a.limit}, {a.scoring_repeats} rounds" + (", with bf16" if bf16 else ""),
              flush=True)
        sc = result["scoring"] = scoring(a, bf16, logs)
        rows.append(ratio_row("letter scoring int8 vs transformers fp32", sc["runs"]["medtune letter int8"],
                              sc["runs"]["hf letter"], 3.0))
        n = sc["questions"]
        rows.append({"goal": "int8 letters equal to fp32's", "value": sc["agree_int8_vs_fp32"] / n,
                     "text": f"{sc['agree_int8_vs_fp32']}/{n}", "target": 0.98,
                     "met": sc["agree_int8_vs_fp32"] / n >= 0.98})
        if bf16:
            rows.append(ratio_row("letter scoring bf16 vs transformers bf16 autocast",
                                  sc["runs"]["medtune letter bf16"], sc["runs"]["hf letter bf16"], 1.0))
            rows[-1]["target"] = None  # no goal of its own: the issue asks for the comparison
    if "training" not in skip:
        print(f"training: {a.rounds} rounds of {a.train_steps} timed steps per engine and precision", flush=True)
        tr = result["training"] = training(a, logs)
        ours = [r["medtune_bf16_plain"]["tokens_per_s"] for r in tr]
        for peer, target in (("bf16", 2.0), ("fp32", 3.0)):
            theirs = [r[f"torch_peft_{peer}_plain"]["tokens_per_s"] for r in tr]
            rows.append(ratio_row(f"training bf16 vs PyTorch + PEFT {'bf16 autocast' if peer == 'bf16' else 'fp32'}",
                                  ours, theirs, target))
    if "default" not in skip:
        print("default: the embedded default trained at precision=bf16, then its test questions", flush=True)
        d = result["default"] = embedded_default(a, a.out, logs)
        rows.append({"goal": "embedded default at bf16, test accuracy", "value": d["accuracy"],
                     "text": f"{d['correct']}/{d['n']} (trained in {d['train_s']:.0f} s)", "target": 0.90,
                     "met": d["accuracy"] >= 0.90})

    lines = [f"CPU: {cpu.get('model name')} (family {cpu.get('cpu family')} model {cpu.get('model')}; "
             f"{' '.join(cpu['flags'])}), medtune kernels {cpu['medtune_kernel_path']}, fp32 GEMMs {blas_text(cpu)}, "
             f"{a.threads} threads, "
             f"{result['date']}", "", "| goal | measured (median of rounds) | per round | ratio of medians | target | verdict |",
             "| --- | ---: | --- | ---: | ---: | --- |"]
    for r in rows:
        measured = f"{r['ratio']:.3f}x" if "ratio" in r else r["text"]  # 3 places: 1.4995 is not 1.50
        per_round = ", ".join(f"{x:.2f}" for x in r.get("rounds", []))
        of_medians = f"{r['ratio_of_medians']:.2f}x" if "ratio_of_medians" in r else ""
        if r["target"] is None:
            target, verdict = "-", "-"
        else:
            target = f">= {r['target']:.2f}x" if "ratio" in r else f">= {r['target']:.0%}"
            verdict = "met" if r["met"] else "**not met**"
        lines.append(f"| {r['goal']} | {measured} | {per_round} | {of_medians} | {target} | {verdict} |")
    table = "\n".join(lines) + "\n"
    print("\n" + table)
    with open(os.path.join(a.out, "goals.md"), "w") as f:
        f.write(table)
    with open(os.path.join(a.out, "goals.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {os.path.join(a.out, 'goals.md')} and goals.json; logs in {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
