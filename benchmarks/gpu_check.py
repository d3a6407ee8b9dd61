"""GPU check: the mixed-precision and memory paths that only a GPU exercises, in a few minutes.

    bash benchmarks/gpu_check.sh            # or: python benchmarks/gpu_check.py --device cuda
    python benchmarks/gpu_check.py --device cpu --quick    # a dry run of the script itself

Prints a markdown table (paste it into docs/benchmarks.md): fp16 + GradScaler and bf16 training
steps of the tiny preset, the rope model forced onto the flash kernel, the relative model at context
2048 with and without gradient checkpointing, and tokens/s, model FLOPs utilisation (against a bf16
matmul peak measured in the same run) and peak memory for the `base` preset.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

import torch


def matmul_peak(device, dtype=torch.bfloat16, n=8192, reps=10) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t)


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_case(name, preset, device, precision, overrides=(), steps=10, batch=None, kernel=None, ckpt=False):
    from cadenza.training.config import resolve
    from cadenza.env.device import autocast
    from cadenza.models import build_model

    cfg = resolve(preset, None, list(overrides))
    model = build_model(cfg.model).to(device)
    model.grad_checkpoint = ckpt
    b = batch or cfg.train.batch_size
    t = cfg.model.context
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    x = torch.randint(0, 388, (b, t + 1), device=device)
    ctx = contextlib.nullcontext()
    if kernel == "flash":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        ctx = sdpa_kernel([SDPBackend.FLASH_ATTENTION])  # fails loudly if flash cannot run
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, losses, skipped = [], [], 0
    with ctx:
        for i in range(steps + 2):
            sync(device)
            t0 = time.perf_counter()
            with autocast(device, precision):
                _, loss = model(x[:, :-1], x[:, 1:])
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scale_before = scaler.get_scale() if scaler.is_enabled() else 1.0
            scaler.step(opt)
            scaler.update()
            if scaler.is_enabled() and scaler.get_scale() < scale_before:
                skipped += 1
            opt.zero_grad(set_to_none=True)
            sync(device)
            if i >= 2:
                times.append(time.perf_counter() - t0)
            losses.append(float(loss.detach()))
    tps = b * t / sorted(times)[len(times) // 2]
    mem = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    ok = all(map(lambda v: v == v and abs(v) < 1e4, losses)) and losses[-1] < losses[0]
    return {"case": name, "precision": precision, "context": t, "batch": b, "tokens_per_s": tps,
            "flops_per_token": model.flops_per_token(t), "peak_gib": mem, "ok": ok, "skipped": skipped,
            "loss": f"{losses[0]:.2f} -> {losses[-1]:.2f}"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a dry run of the script on CPU)")
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run `cadenza doctor` to see why", file=sys.stderr)
        return 2
    bf16 = device.type != "cuda" or torch.cuda.is_bf16_supported()
    q = ["d_model=64", "n_layers=2", "n_heads=2", "d_ff=128"] if a.quick else []
    long = ["context=256"] if a.quick else ["context=2048"]
    steps = 3 if a.quick else 10
    cases = []
    if device.type == "cuda":
        cases.append(("tiny fp16 + GradScaler", "tiny", "fp16", q, None, None, False))
    if bf16:
        cases.append(("tiny bf16", "tiny", "bf16", q, None, None, False))
    half = "bf16" if bf16 else "fp16"
    if device.type == "cuda":
        cases.append(("rope, flash kernel", "tiny", half, q + ['attention="rope"'], None, "flash", False))
    cases += [
        ("relative ctx 2048", "base", half, q + long, 4 if not a.quick else 2, None, False),
        ("relative ctx 2048 + grad ckpt", "base", half, q + long, 4 if not a.quick else 2, None, True),
        ("base preset (relative)", "base", half, q + long, None if not a.quick else 2, None, False),
        ("base preset (rope)", "base", half, q + long + ['attention="rope"'], None if not a.quick else 2, None, False),
    ]
    peak = matmul_peak(device, torch.bfloat16 if bf16 else torch.float16, n=1024 if a.quick else 8192)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}, {half} matmul peak {peak / 1e12:.1f} TFLOP/s\n")
    print("| case | precision | context | batch | tokens/s | MFU | peak GiB | loss | ok |")
    print("|---|---|---:|---:|---:|---:|---:|---|---|")
    failures = 0
    for label, preset, prec, ov, batch, kernel, ckpt in cases:
        try:
            r = run_case(label, preset, device, prec, ov, steps, batch, kernel, ckpt)
        except Exception as e:  # report and go on: one broken path should not hide the others
            failures += 1
            print(f"| {label} | {prec} | | | | | | {type(e).__name__}: {str(e)[:60]} | FAIL |")
            continue
        failures += not r["ok"]
        mfu = r["tokens_per_s"] * r["flops_per_token"] / peak
        print(f"| {label} | {prec} | {r['context']} | {r['batch']} | {r['tokens_per_s']:,.0f} | {mfu * 100:.0f}% | "
              f"{r['peak_gib']:.2f} | {r['loss']} | {'yes' if r['ok'] else 'NO'} |")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
