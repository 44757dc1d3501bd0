#!/usr/bin/env python3
"""LoRA training speed on one model, side by side in one run: medtune (bench/bench_train_step)
and PyTorch CPU + PEFT (transformers loading the same GGUF, dequantized to fp32), each at every
precision of --precisions: fp32, and bf16 (medtune `--precision bf16`; PyTorch's bf16 autocast,
`torch.autocast("cpu", dtype=torch.bfloat16)` around the forward, as its docs and HF Trainer's
`bf16=True` on a CPU do).

    python3 bench/compare_train.py --bench build/bench/bench_train_step \
        --model models/SmolLM2-135M-Instruct.Q4_1.gguf --threads 2 --precisions fp32,bf16

Both run the shape of issue 5's goal: batch 4 x 256 random token ids, labels = input ids (every
next token a target; with --answer-tokens K only each row's last K tokens, the prompt masked with
-100 as TRL's completion-only collator does), LoRA r16 alpha 32 on q,k,v,o,gate,up,down, one forward + backward + AdamW
step per iteration; the median over --steps timed steps after one warm-up step. medtune reads the
Q4_1 weights in place (dequantized tile by tile inside each matmul); PyTorch holds them as fp32.
The peer is optional: a missing package is reported, not fatal. Prints a table and one JSON line.
"""
import argparse
import json
import os
import statistics
import subprocess
import time


def bench_medtune(a, checkpointing, precision):
    out = subprocess.run([a.bench, a.model, "--batch", str(a.batch), "--seq", str(a.seq), "--rank", str(a.rank),
                          "--steps", str(a.steps), "--threads", str(a.threads), "--checkpointing",
                          str(int(checkpointing)), "--answer-tokens", str(a.answer_tokens), "--precision", precision],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def bench_torch_peft(a, checkpointing, precision):
    import contextlib
    import resource
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    d, f = os.path.split(os.path.abspath(a.model))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(r=a.rank, lora_alpha=2 * a.rank, lora_dropout=0.0,
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                             "gate_proj", "up_proj", "down_proj"]))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    ids = torch.randint(0, model.config.vocab_size, (a.batch, a.seq), generator=torch.Generator().manual_seed(1234))
    labels = ids.clone()
    if a.answer_tokens > 0:  # transformers shifts labels: label t is predicted at position t - 1
        labels[:, : max(1, a.seq - a.answer_tokens)] = -100
    times, cpu_times, loss = [], [], 0.0
    for s in range(a.steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
                    else contextlib.nullcontext())
        with autocast:
            out = model(input_ids=ids, labels=labels)
        out.loss.backward()
        opt.step()
        if s:
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
        loss = out.loss.item()
    med = statistics.median(times)
    return {"median_step_s": med, "median_step_cpu_s": statistics.median(cpu_times),
            "tokens_per_s": a.batch * a.seq / med, "last_loss": loss,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default="build/bench/bench_train_step")
    p.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--checkpointing", action="store_true", help="also measure with gradient checkpointing")
    p.add_argument("--answer-tokens", type=int, default=0,
                   help="only the last K tokens of each row are targets (completion-only loss, the prompt masked); "
                        "0: every token")
    p.add_argument("--precisions", default="fp32",
                   help="comma-separated: fp32, bf16 (each engine runs each; ratios are against every torch run)")
    a = p.parse_args()
    precisions = a.precisions.split(",")
    results = {}
    print(f"LoRA r{a.rank} all linear, batch {a.batch} x {a.seq}, {a.threads} threads, median of {a.steps} steps")
    # CPU s: process CPU time per step, all threads. On a loaded machine wall time at 2 threads
    # mostly measures OpenMP's spinning waits (both engines spin); compare at --threads 1 there.
    print(f"{'checkpointing':<14}{'engine':<22}{'step s':>9}{'CPU s':>9}{'tok/s':>9}{'peak RSS MiB':>14}")
    for ck in ([False, True] if a.checkpointing else [False]):
        tag = "ckpt" if ck else "plain"
        runs = []
        # Alternating engines at each precision, so that a load change hits both.
        for prec in precisions:
            m = bench_medtune(a, ck, prec)
            results[f"medtune_{prec}_{tag}"] = m
            runs.append((f"medtune {prec}", m))
            try:
                t = bench_torch_peft(a, ck, prec)
            except ImportError as e:
                t = None
                print(f"PyTorch + PEFT peer skipped: {e}")
            results[f"torch_peft_{prec}_{tag}"] = t
            runs.append((f"torch+peft {prec}", t))
        for name, r in runs:
            if r:
                cpu = r.get("median_step_cpu_s", float("nan"))
                print(f"{tag:<14}{name:<22}{r['median_step_s']:>9.2f}{cpu:>9.2f}{r['tokens_per_s']:>9.1f}"
                      f"{r['peak_rss_mib']:>14.0f}")
        # Speed of each medtune run over each torch run (step time ratio; CPU-time ratio).
        for mname, m in runs:
            if not mname.startswith("medtune") or not m:
                continue
            for tname, t in runs:
                if tname.startswith("torch") and t:
                    print(f"{'':<14}{mname + ' vs ' + tname.split()[1]:<22}{t['median_step_s'] / m['median_step_s']:>9.2f}x"
                          f"{t['median_step_cpu_s'] / m['median_step_cpu_s']:>8.2f}x  (torch {tname.split()[1]})")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
