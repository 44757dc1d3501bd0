#!/usr/bin/env python3
"""Writes the fixtures of tests/unit/train/test_optimizer.cpp and test_lr_schedule.cpp.

    python3 tools/make_optimizer_fixtures.py          # from anywhere; ~2 s on 1 core

Needs torch and transformers (versions in tools/requirements.txt). The outputs are committed;
tests never run Python. Everything is seeded, so a rerun with the pinned versions rewrites the
same files.

tests/fixtures/optim/adamw.json
    torch.optim.AdamW (foreach=False, i.e. _single_tensor_adam: the path the Hugging Face Trainer
    takes on the CPU) run for 5 steps, with a different gradient and a different lr every step, on
    parameters of odd sizes (1, 15, 37, 70: vector bodies plus scalar tails for 8- and 16-wide
    SIMD). Two cases: the usual betas (beta1 = 0.9, so torch's lerp takes its "small weight"
    branch) and beta1 = 0.3 (its other branch). The same float32 inputs are run twice: in float32
    (the bit-level target of our fp32 AdamW) and upcast to float64 (the target of our float64
    instantiation, and the exact answer the fp32 result is compared to with a rounding tolerance).
    Float values are written as JSON numbers; a float32 value is its exact float64 value, so the
    C++ side reads it as double and casts to float without loss.

tests/fixtures/optim/clip.json
    torch.nn.utils.clip_grad_norm_ (norm_type 2, foreach default) on the same sizes, in float32
    and float64: one case that clips (total norm > max_norm) and one that does not.

tests/fixtures/optim/schedules.json
    transformers.get_scheduler(name, ...) for each supported name and a few step counts: the lr
    the optimizer holds before optimizer step s (= base_lr * lambda(s) of torch's LambdaLR), for
    s = 0 .. num_training_steps + 4 (past the end too: cosine rises again there, and we match it).
"""
import json
import os

import torch
import transformers

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "optim")

SIZES = [1, 15, 37, 70]
NAMES = ["lora_A", "lora_B", "bias", "big"]


def as_list(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


def random_inputs(seed, steps):
    """float32 initial params and per-step grads; grads vary in scale per step and include zeros."""
    g = torch.Generator().manual_seed(seed)
    params, grads = [], []
    for n in SIZES:
        params.append((torch.randn(n, generator=g) * 0.1).float())
        per_step = []
        for s in range(steps):
            gr = torch.randn(n, generator=g) * (10.0 ** (s % 3 - 1))
            if n > 3:
                gr[n // 2] = 0.0  # exact zero gradient: m and v decay, p still moves
            per_step.append(gr.float())
        grads.append(per_step)
    return params, grads


def run_adamw(params0, grads, lrs, cfg, dtype):
    ps = [torch.nn.Parameter(p.clone().to(dtype)) for p in params0]
    opt = torch.optim.AdamW(ps, lr=lrs[0], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                            weight_decay=cfg["weight_decay"], foreach=False)
    after = [[] for _ in ps]
    for s, lr in enumerate(lrs):
        for group in opt.param_groups:
            group["lr"] = lr  # what LambdaLR does between steps: a Python float
        for i, p in enumerate(ps):
            p.grad = grads[i][s].clone().to(dtype)
        opt.step()
        for i, p in enumerate(ps):
            after[i].append(as_list(p))
    state = [opt.state[p] for p in ps]
    return after, [as_list(st["exp_avg"]) for st in state], [as_list(st["exp_avg_sq"]) for st in state]


def adamw_fixture():
    cases = []
    lrs = [1e-3, 2.5e-3, 1.7e-3, 6e-4, 3e-4]
    for case_i, cfg in enumerate([
        {"name": "default_betas", "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01},
        {"name": "small_beta1", "beta1": 0.3, "beta2": 0.95, "eps": 1e-6, "weight_decay": 0.1},
    ]):
        params0, grads = random_inputs(1234 + case_i, len(lrs))
        after32, m32, v32 = run_adamw(params0, grads, lrs, cfg, torch.float32)
        after64, m64, v64 = run_adamw(params0, grads, lrs, cfg, torch.float64)
        params = []
        for i, name in enumerate(NAMES):
            params.append({
                "name": name, "numel": SIZES[i], "init": as_list(params0[i]),
                "grads": [as_list(gr) for gr in grads[i]],
                "after_f32": after32[i], "after_f64": after64[i],
                "exp_avg_f32": m32[i], "exp_avg_sq_f32": v32[i],
                "exp_avg_f64": m64[i], "exp_avg_sq_f64": v64[i],
            })
        cases.append({**cfg, "lrs": lrs, "params": params})
    return {"description": "torch.optim.AdamW(foreach=False) trajectories; see tools/make_optimizer_fixtures.py",
            "cases": cases}


def check_op_order(fixture):
    """Replays each float32 trajectory with the element formulas of src/train/optimizer.cpp (numpy,
    fp32 FMA emulated in float64: exact product, one rounding to double, one to float; double
    rounding could flip a tie, rarely enough to never have been seen) but with torch's own sqrt, and
    asserts every element equals torch's. This pins the order of operations; the one remaining
    difference, torch's sqrt (MKL VML on x86 builds, not correctly rounded) against std::sqrt, is
    what the C++ test's 2-ulp bound on parameters is for."""
    import numpy as np
    f32 = np.float32

    def fma32(a, b, c):
        return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(f32)

    for c in fixture["cases"]:
        b1, b2, eps, wd = c["beta1"], c["beta2"], c["eps"], c["weight_decay"]
        for prm in c["params"]:
            p = np.array(prm["init"], f32)
            m = np.zeros_like(p)
            v = np.zeros_like(p)
            for s, lr in enumerate(c["lrs"]):
                t = float(s + 1)
                g = np.array(prm["grads"][s], f32)
                p = p * f32(1 - lr * wd)
                w = f32(1 - b1)
                small = abs(w) < 0.5
                m = fma32(w if small else w - f32(1), g - m, m if small else g)
                v = fma32(f32(1 - b2) * g, g, v * f32(b2))
                step_size = lr / (1 - b1 ** t)
                bc2_sqrt = (1 - b2 ** t) ** 0.5
                denom = torch.from_numpy(v).sqrt().numpy() / f32(bc2_sqrt) + f32(eps)
                p = p + (f32(-step_size) * m) / denom
                want = np.array(prm["after_f32"][s], f32)
                assert (p == want).all(), (c["name"], prm["name"], s, np.nonzero(p != want))
            assert (m == np.array(prm["exp_avg_f32"], f32)).all()
            assert (v == np.array(prm["exp_avg_sq_f32"], f32)).all()


def clip_fixture():
    cases = []
    for case_i, (name, scale, max_norm) in enumerate([("clips", 1.0, 1.0), ("no_clip", 0.01, 1.0)]):
        g = torch.Generator().manual_seed(99 + case_i)
        grads0 = [(torch.randn(n, generator=g) * scale).float() for n in SIZES]
        out = {"name": name, "max_norm": max_norm, "grads": [as_list(x) for x in grads0]}
        for dtype, tag in [(torch.float32, "f32"), (torch.float64, "f64")]:
            ps = [torch.nn.Parameter(torch.zeros(n, dtype=dtype)) for n in SIZES]
            for p, gr in zip(ps, grads0):
                p.grad = gr.clone().to(dtype)
            total = torch.nn.utils.clip_grad_norm_(ps, max_norm)
            out["total_norm_" + tag] = float(total)
            out["clipped_" + tag] = [as_list(p.grad) for p in ps]
        cases.append(out)
    return {"description": "torch.nn.utils.clip_grad_norm_(params, max_norm) (norm_type 2)", "cases": cases}


def schedule_fixture():
    base_lr = 2e-4
    configs = [
        ("constant", 3, 20, {}),
        ("constant_with_warmup", 3, 20, {}),
        ("constant_with_warmup", 0, 20, {}),
        ("linear", 3, 20, {}),
        ("linear", 0, 7, {}),
        ("cosine", 3, 20, {}),
        ("cosine", 0, 7, {}),
        ("cosine", 3, 20, {"num_cycles": 1.0}),
        ("cosine_with_min_lr", 3, 20, {"min_lr_rate": 0.1}),
        ("cosine_with_min_lr", 5, 17, {"min_lr": 1e-5}),
    ]
    cases = []
    for name, warmup, total, kwargs in configs:
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.AdamW([p], lr=base_lr)
        sched = transformers.get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=total,
                                           scheduler_specific_kwargs=dict(kwargs))
        lrs = []
        for _ in range(total + 5):
            lrs.append(float(opt.param_groups[0]["lr"]))  # the lr the coming optimizer step uses
            p.grad = torch.zeros(1)
            opt.step()
            sched.step()
        cases.append({"name": name, "base_lr": base_lr, "num_warmup_steps": warmup,
                      "num_training_steps": total, "kwargs": kwargs, "lrs": lrs})
    return {"description": "transformers.get_scheduler lr before each optimizer step", "cases": cases}


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    for fname, make in [("adamw.json", adamw_fixture), ("clip.json", clip_fixture),
                        ("schedules.json", schedule_fixture)]:
        data = make()
        if fname == "adamw.json":
            check_op_order(data)
        data["versions"] = versions
        with open(os.path.join(OUT, fname), "w") as f:
            json.dump(data, f, indent=None, separators=(",", ":"))
            f.write("\n")
        print(fname, os.path.getsize(os.path.join(OUT, fname)), "bytes")


if __name__ == "__main__":
    main()
