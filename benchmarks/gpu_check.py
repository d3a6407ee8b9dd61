"""GPU check: every CUDA path of cadenza in one run of a few minutes, for the rare GPU at hand.

    bash benchmarks/gpu_check.sh                # on a GPU machine: $OUT/gpu_check.json, under 8 minutes
    python benchmarks/gpu_check.py --dry-run    # the same code paths on CPU at tiny sizes (a test runs it)

Each check is one entry of the JSON report: {"status": ok | fail | skipped, "seconds", "why" (when
not ok), and what it measured}. The report is rewritten after every check, so a run cut short keeps
what it measured; checks that would start past the deadline are skipped and say so.
docs/environment.md ("The GPU check") says what each entry means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
DEADLINE_S = 420  # gpu_check.sh stops everything at 480 s: a check never starts after this
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)}


class Skip(Exception):
    """A check that cannot run here; its message says why."""


@dataclass
class Run:
    device: torch.device
    dry: bool
    work: Path
    report: dict
    path: Path
    started: float = field(default_factory=time.time)
    half: str = "bf16"  # the reduced precision this GPU does natively (bf16, else fp16)
    peak: float | None = None  # measured matmul FLOP/s in `half`, for MFU
    store: Path | None = None
    run: Path | None = None  # the trained run the later checks reuse

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def steps(self) -> tuple[int, int]:
        """Training steps of a run, and the step a run is interrupted at to be resumed."""
        return (12, 8) if self.dry else (30, 20)

    def need_cuda(self) -> None:
        if not self.cuda:
            raise Skip("CUDA only")


def cli(*argv: str) -> int:
    """A `cadenza` command in this process: the CLI's own parsing, no interpreter start per call."""
    from cadenza.cli import main

    return main([str(a) for a in argv])


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]


# ---- the checks, in the order they run ------------------------------------------------------------
def check_environment(r: Run) -> dict:
    """`cadenza doctor` with its GPU smoke test; the GPU against this build's architectures."""
    from cadenza.env.cuda import arch_problem, install_hint

    p = subprocess.run([sys.executable, "-m", "cadenza", "doctor", "--json", "--device", r.device.type],
                       capture_output=True, text=True, timeout=180, env=ENV)
    if p.returncode not in (0, 1):  # 1 is a finding, reported below; anything else is doctor failing
        raise AssertionError(f"cadenza doctor exited {p.returncode}: {p.stderr[-2000:]}")
    doc = json.loads(p.stdout)
    findings = [f"{d['severity']} {d['code']}: {d['message']}" for d in doc["diagnoses"] if d["severity"] != "ok"]
    out = {"doctor_exit_code": doc["exit_code"], "smoke": doc["report"].get("smoke"), "findings": findings}
    if r.cuda:
        cc = torch.cuda.get_device_capability(r.device)
        smi = (doc["report"].get("nvidia_smi") or {}).get("gpus") or [{}]
        out.update(capability=f"{cc[0]}.{cc[1]}", arch_list=torch.cuda.get_arch_list(), driver=smi[0].get("driver"),
                   arch_problem=arch_problem(cc, torch.cuda.get_arch_list(), torch.cuda.get_device_name(r.device)),
                   install_hint=install_hint(smi[0].get("driver"), cc),
                   tf32_matmul=torch.backends.cuda.matmul.fp32_precision)
    if doc["exit_code"] or out.get("arch_problem"):
        raise AssertionError(out)
    return out


def matmul_rate(device: torch.device, dtype: torch.dtype, n: int, seconds: float) -> float:
    """FLOP/s of an n x n x n matmul: the median of 5 rounds, each of as many products as fill
    `seconds` / 5, after a warm-up (clocks rise, cuBLAS picks its kernel)."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(5):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    a @ b
    sync(device)
    reps = max(3, int(seconds / 5 / max(time.perf_counter() - t0, 1e-6)))
    rates = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync(device)
        rates.append(2 * n**3 * reps / (time.perf_counter() - t0))
    return float(np.median(rates))


def check_matmul_peak(r: Run) -> dict:
    """The matmul peaks MFU is measured against: `half` and fp32 (TF32 on CUDA, as training sets it)."""
    n, secs = (256, 0.2) if r.dry else (8192, 5.0)
    r.peak = matmul_rate(r.device, torch.bfloat16 if r.half == "bf16" else torch.float16, n, secs)
    fp32 = matmul_rate(r.device, torch.float32, n, secs)
    return {"n": n, f"{r.half}_tflops": round(r.peak / 1e12, 2), "fp32_tflops": round(fp32 / 1e12, 2)}


def check_store(r: Run) -> dict:
    """A small synthetic corpus (random polyphonic MIDI) through `cadenza prepare`."""
    import symusic

    rng, folder = np.random.default_rng(0), r.work / "midi"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(8 if r.dry else 48):
        score, track, t = symusic.Score(480), symusic.Track("piano", 0, False), 0
        for _ in range(200 if r.dry else 800):
            t += int(rng.choice([0, 0, 120, 240, 480]))
            track.notes.append(symusic.Note(t, int(rng.integers(60, 960)), int(rng.integers(36, 96)), 80))
        score.tracks.append(track)
        (folder / f"piece{i}.mid").write_bytes(bytes(score.dumps_midi()))
    r.store = r.work / "store"
    if cli("prepare", folder, "--out", r.store, "--workers", 1 if r.dry else 4, "--quiet",
           "--valid-fraction", 0.2, "--test-fraction", 0):
        raise AssertionError("cadenza prepare failed")
    return {"pieces": len(list(folder.glob("*.mid")))}


def train(r: Run, out: Path, *settings: str, resume: bool = False) -> list[dict]:
    """`cadenza train` at the check's size: the tiny preset on a GPU, a smaller one in a dry run."""
    size = ["context=64", "d_model=32", "n_layers=2", "n_heads=2", "d_ff=64", "batch_size=4", "sample_tokens=16",
            "eval_every=1000", "log_every=4", "save_every=4"] if r.dry else \
        ["batch_size=16", "sample_tokens=128", "eval_every=10", "log_every=5", "save_every=10"]
    base = ["--data", r.store, "--device", r.device.type, *size, "grad_accum=2", "warmup_steps=5", "eval_windows=4"]
    code = cli("train", "--out", out, "--quiet", *(["--resume"] if resume else base), *settings)
    if code:
        raise AssertionError(f"cadenza train exited {code}")
    return metrics(out)


def counting_syncs(step, counts: list[int]):
    """`step` (the trainer's `_train_step`) counting the host syncs inside it: CUDA's sync debug
    mode warns on each."""
    def counted(s):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                return step(s)
            finally:
                torch.cuda.set_sync_debug_mode("default")
                counts.append(sum("synchroniz" in str(w.message) for w in caught))

    return counted


def check_train_resume(r: Run) -> dict:
    """30 steps with grad_accum=2, uninterrupted and as 20 + 10 resumed: the losses should agree.
    On CUDA, also the host syncs inside a step: the loop reads its results only at logging steps,
    so at most one per micro-batch is allowed, for PyTorch's own (the embedding's backward)."""
    from cadenza.training import trainer

    r.run, split, per_step, step = r.work / "full", r.work / "split", [], trainer._train_step
    trainer._train_step = counting_syncs(step, per_step) if r.cuda else step
    n, cut = r.steps
    try:
        full = train(r, r.run, f"max_steps={n}")
    finally:
        trainer._train_step = step
    train(r, split, f"max_steps={cut}", f"lr_horizon={n}")
    resumed = train(r, split, f"max_steps={n}", resume=True)
    a, b = {m["step"]: m["loss"] for m in full}, {m["step"]: m["loss"] for m in resumed}
    diff = max(abs(a[s] - b[s]) for s in range(1, n + 1))
    syncs = max(per_step) if per_step else None
    out = {"max_loss_difference": diff, "bit_exact": diff == 0.0, "tokens_per_s": full[-1]["tokens_per_s"],
           "host_syncs_per_step": syncs, "loss": f"{full[0]['loss']:.3f} -> {full[-1]['loss']:.3f}"}
    if diff > (1e-3 if r.cuda else 0.0) or (syncs or 0) > 2:
        raise AssertionError(out)
    return out


def check_precisions(r: Run) -> dict:
    """fp16 with the grad scaler and bf16, 30 steps each; a run saved without fp16 resumed in it."""
    from cadenza.env.device import cuda_supports_bf16
    from cadenza.models import checkpoint as ckpt

    out, cases = {}, [p for p in ("fp16", "bf16") if (p != "fp16" or r.cuda)
                      and (p != "bf16" or not r.cuda or cuda_supports_bf16(r.device))]
    for p in cases:
        m = train(r, r.work / p, f"max_steps={r.steps[0]}", f'precision="{p}"')
        out[p] = {"loss": f"{m[0]['loss']:.3f} -> {m[-1]['loss']:.3f}", "tokens_per_s": m[-1]["tokens_per_s"]}
        assert m[-1]["loss"] < m[0]["loss"], out
    if r.cuda:  # a run saved without a grad scaler state (fp32 or bf16), resumed in fp16
        train(r, r.work / "split", f"max_steps={r.steps[0] + 5}", "--precision", "fp16", resume=True)
        out["resumed_in_fp16_scale"] = ckpt.load_state(ckpt.latest_checkpoint(r.work / "split"))["scaler"]["scale"]
    out["skipped"] = [p for p in ("fp16", "bf16") if p not in cases]
    return out


def check_lstm_bf16(r: Run) -> dict:
    """The LSTM under bf16 autocast: the dtype autocast gives the cell, and what the model runs it in."""
    from cadenza.env.device import autocast
    from cadenza.models import build_model
    from cadenza.models.config import ModelConfig

    m = build_model(ModelConfig(model="lstm", vocab_size=391, embed_dim=64 if r.dry else 256,
                                lstm_hidden=64 if r.dry else 512)).to(r.device)
    x = torch.randint(0, 391, (8, 64 if r.dry else 512), device=r.device)
    head_in = []
    m.head.register_forward_pre_hook(lambda mod, args: head_in.append(str(args[0].dtype)))
    with autocast(r.device, "bf16"):
        try:
            cell = str(m.lstm(m.tok_emb(x))[0].dtype)
        except RuntimeError as e:  # oneDNN on a CPU without bf16
            cell = f"fails ({str(e).splitlines()[0][:80]})"
        _, loss = m(x, x)
    loss.backward()
    finite = all(bool(torch.isfinite(p.grad).all()) for p in m.parameters())
    out = {"autocast_cell_output": cell, "cell_output_the_head_sees": head_in[-1], "gradients_finite": finite}
    assert finite and (head_in[-1] == "torch.float32" or cell == "torch.bfloat16"), out
    return out


def timed_steps(r: Run, overrides: list[str], batch: int, steps: int, ckpt: bool = False) -> dict:
    """Training steps of the `base` preset (context 2048) in `half`: tokens/s, MFU, peak memory."""
    from cadenza.env.device import autocast
    from cadenza.models import build_model
    from cadenza.training.config import resolve

    small = ["context=1100", "d_model=32", "n_layers=1", "n_heads=2", "d_ff=64"] if r.dry else []
    cfg = resolve("base", None, small + overrides)
    model = build_model(cfg.model).to(r.device)
    model.grad_checkpoint = ckpt
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    scaler = torch.amp.GradScaler(r.device.type, enabled=r.half == "fp16")
    t = cfg.model.context
    x = torch.randint(0, cfg.model.vocab_size, (batch, t + 1), device=r.device)
    if r.cuda:
        torch.cuda.reset_peak_memory_stats(r.device)
    times = []
    for _ in range(steps + 1):  # the first step pays for allocations and kernel choice
        sync(r.device)
        t0 = time.perf_counter()
        with autocast(r.device, r.half):
            _, loss = model(x[:, :-1], x[:, 1:])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sync(r.device)
        times.append(time.perf_counter() - t0)
    tps = batch * t / float(np.median(times[1:]))
    return {"tokens_per_s": round(tps), "mfu": round(tps * model.flops_per_token(t) / r.peak, 3) if r.peak else None,
            "peak_gib": round(torch.cuda.max_memory_allocated(r.device) / 2**30, 2) if r.cuda else None,
            "loss": round(loss.item(), 3)}


def check_attention_2048(r: Run) -> dict:
    """The base preset at context 2048: relative attention with and without layer checkpointing,
    rope for comparison, and relative attention's GPU block size against the sizes around it."""
    from cadenza.models import attention

    batch, steps = (1, 1) if r.dry else (8, 3)
    out = {"relative": timed_steps(r, [], batch, steps),
           "relative_checkpointed": timed_steps(r, [], batch, steps, ckpt=True),
           "rope": timed_steps(r, ['attention="rope"'], batch, steps), "blocks": {}, "gpu_block": attention.GPU_BLOCK}
    chosen = attention.GPU_BLOCK
    try:
        for size in (128, 256) if r.dry else (128, 256, 512, 1024, 2048):
            attention.GPU_BLOCK = size
            out["blocks"][size] = timed_steps(r, [f"attn_chunk={size}"], batch, steps)["tokens_per_s"]
    finally:
        attention.GPU_BLOCK = chosen
    out["fastest_block"] = max(out["blocks"], key=out["blocks"].get)
    return out


def check_generate(r: Run) -> dict:
    """`cadenza generate` on CUDA (eager) against the CPU's compiled step: tokens/s at batch 1 and 8."""
    out = {}
    for dev in ("cuda", "cpu") if r.cuda else ("cpu",):
        for batch in (1, 8):
            folder = r.work / f"gen-{dev}-{batch}"
            cli("generate", "--checkpoint", r.run, "--device", dev, "--max-tokens", 32 if r.dry else 512,
                "--batch-size", batch, "--num-samples", batch, "--no-eos", "--out", folder, "--quiet",
                *(["--no-compile"] if r.dry else []))
            run = json.loads((folder / "generation.json").read_text())["run"]
            out[f"{dev}_batch{batch}"] = {"tokens_per_s": round(run["tokens_per_s"]), "compiled": run["compiled"]}
    if r.cuda:
        out["faster"] = {b: max(("cuda", "cpu"), key=lambda d: out[f"{d}_batch{b}"]["tokens_per_s"]) for b in (1, 8)}
    else:
        out["skipped"] = "CUDA decoding" + (" and the CPU compiled step (a build takes minutes here)" if r.dry else "")
    return out


def check_compile(r: Run) -> dict:
    """`cadenza train --compile`: the first steps' compile time and the speed after it."""
    r.need_cuda()
    t0 = time.time()
    m = train(r, r.work / "compiled", f"max_steps={r.steps[0]}", "--compile")
    base = metrics(r.run)
    return {"seconds_with_compile": round(time.time() - t0, 1), "tokens_per_s": m[-1]["tokens_per_s"],
            "eager_tokens_per_s": base[-1]["tokens_per_s"]}


def check_ddp(r: Run) -> dict:
    """Two ranks under torchrun with NCCL, one GPU each."""
    r.need_cuda()
    if torch.cuda.device_count() < 2:
        raise Skip("one GPU: DDP needs a GPU per rank (tests/training/test_ddp.py runs two CPU ranks)")
    out = r.work / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "cadenza",
           "train", "--data", str(r.store), "--out", str(out), "--device", "cuda", "--quiet", "max_steps=20",
           "batch_size=16", "log_every=5", "eval_every=10", "save_every=10"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=ENV)
    assert p.returncode == 0, p.stderr[-2000:]
    m = metrics(out)
    return {"steps": len(m), "loss": f"{m[0]['loss']:.3f} -> {m[-1]['loss']:.3f}",
            "tokens_per_s": m[-1]["tokens_per_s"]}


CHECKS = [check_environment, check_matmul_peak, check_store, check_train_resume, check_precisions, check_lstm_bf16,
          check_attention_2048, check_generate, check_compile, check_ddp]


def run_checks(r: Run) -> int:
    for check in CHECKS:
        name, t0 = check.__name__.removeprefix("check_"), time.time()
        try:
            if t0 - r.started > DEADLINE_S:
                raise Skip(f"out of time ({DEADLINE_S} s)")
            entry = {"status": "ok", **check(r)}
        except Skip as e:
            entry = {"status": "skipped", "why": str(e)}
        except Exception as e:  # one broken path must not hide the others
            entry = {"status": "fail", "why": f"{type(e).__name__}: {e}"[:2000],
                     "trace": traceback.format_exc().splitlines()[-6:]}
        r.report["checks"][name] = {**entry, "seconds": round(time.time() - t0, 1)}
        r.path.write_text(json.dumps(r.report, indent=2, default=str))
        numbers = json.dumps({k: v for k, v in entry.items() if k != "status"}, default=str)
        print(f"{name:16} {entry['status']:8} {numbers[:300]}", flush=True)
    return int(any(c["status"] == "fail" for c in r.report["checks"].values()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes: the script's own check")
    ap.add_argument("--out", default="benchmarks/results/gpu", help="folder for gpu_check.json")
    a = ap.parse_args(argv)
    from cadenza.env.device import cuda_supports_bf16, enable_tf32

    device = torch.device("cpu" if a.dry_run else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run `cadenza doctor` to see why, or --dry-run", file=sys.stderr)
        return 2
    enable_tf32(device)  # as training does
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if device.type == "cuda" else []
    report = {"dry_run": a.dry_run, "torch": torch.__version__, "cuda": torch.version.cuda, "gpus": gpus,
              "python": platform.python_version(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"),
              "checks": {}}
    r = Run(device, a.dry_run, work, report, out / "gpu_check.json",
            half="bf16" if device.type == "cpu" or cuda_supports_bf16(device) else "fp16")
    try:
        return run_checks(r)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # checkpoints and samples: only the JSON comes back


if __name__ == "__main__":
    raise SystemExit(main())
