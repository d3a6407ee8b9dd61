"""Training throughput: cadenza's models vs Hugging Face GPT-2 of the same size, in one run.

    python benchmarks/bench_train.py                    # CPU: fp32 and bf16, then peak memory
    python benchmarks/bench_train.py --steps 10 --skip-memory

Same work for every model: vocab 388 (+3 specials), d 256, 4 layers, 4 heads, ffn 1024, context
512, batch 8, dropout 0.1 on embeddings and residuals (none on attention weights, for both),
AdamW; one training step = forward + backward + optimizer step. The CPU's matmul peak is measured
in the same run, so FLOPs utilisation (MFU) is against this machine, not a datasheet. Peak memory
of the relative model at context 2048 is compared with the rope model, each in a fresh process.
Timings are medians; the contestants alternate step by step so a slow spell hits all of them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

SIZE = dict(vocab_size=391, d_model=256, n_layers=4, n_heads=4, d_ff=1024, context=512, dropout=0.1)


def matmul_peak(dtype, n: int = 1024, reps: int = 20) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    return 2 * n**3 / min(times)


def cadenza_model(model: str, attention: str, context: int = 512):
    from cadenza.models import build_model
    from cadenza.models.config import ModelConfig

    return build_model(ModelConfig(model=model, attention=attention, **{**SIZE, "context": context}))


def hf_model():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=SIZE["vocab_size"], n_positions=SIZE["context"], n_embd=SIZE["d_model"],
                     n_layer=SIZE["n_layers"], n_head=SIZE["n_heads"], n_inner=SIZE["d_ff"],
                     resid_pdrop=SIZE["dropout"], embd_pdrop=SIZE["dropout"], attn_pdrop=0.0,
                     bos_token_id=389, eos_token_id=390, pad_token_id=388)
    m = GPT2LMHeadModel(cfg)
    m.flops_per_token = lambda t: 6 * sum(p.numel() for p in m.parameters()) - 6 * m.transformer.wpe.weight.numel() \
        + 12 * SIZE["n_layers"] * SIZE["d_model"] * t
    return m


class Contestant:
    def __init__(self, name: str, model, hf: bool, precision: str, batch: int, context: int):
        self.name, self.model, self.hf, self.precision = name, model, hf, precision
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 388, (batch, context + 1), generator=g)
        self.times: list[float] = []
        self.tokens = batch * context

    def step(self) -> None:
        x, y = self.x[:, :-1], self.x[:, 1:]
        t = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            if self.hf:  # HF shifts labels itself; feed the same tokens so both predict the same targets
                loss = self.model(input_ids=x, labels=self.x[:, :-1]).loss
            else:
                _, loss = self.model(x, y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.times.append(time.perf_counter() - t)


def throughput(precisions, steps: int, warmup: int, batch: int) -> list[dict]:
    rows = []
    for precision in precisions:
        torch.manual_seed(0)
        contestants = [
            Contestant("HF GPT2LMHeadModel", hf_model(), True, precision, batch, SIZE["context"]),
            Contestant("cadenza rope", cadenza_model("transformer", "rope"), False, precision, batch, SIZE["context"]),
            Contestant("cadenza relative", cadenza_model("transformer", "relative"), False, precision, batch,
                       SIZE["context"]),
            Contestant("cadenza absolute", cadenza_model("transformer", "absolute"), False, precision, batch,
                       SIZE["context"]),
            Contestant("cadenza lstm 2x512", cadenza_model("lstm", "rope"), False, precision, batch, SIZE["context"]),
        ]
        for _ in range(warmup):
            for c in contestants:
                c.step()
        for c in contestants:
            c.times.clear()
        for _ in range(steps):
            for c in contestants:
                c.step()
        peak = matmul_peak(torch.float32 if precision == "fp32" else torch.bfloat16)
        hf_tps = contestants[0].tokens / statistics.median(contestants[0].times)
        for c in contestants:
            tps = c.tokens / statistics.median(c.times)
            fpt = c.model.flops_per_token(SIZE["context"])
            rows.append({"precision": precision, "model": c.name, "tokens_per_s": tps, "vs_hf": tps / hf_tps,
                         "mfu": tps * fpt / peak, "peak_gflops": peak / 1e9,
                         "params_m": sum(p.numel() for p in c.model.parameters()) / 1e6})
    return rows


def _rss_kb(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _memory_child(attention: str, context: int, batch: int, precision: str) -> None:
    model = cadenza_model("transformer", attention, context)
    x = torch.randint(0, 388, (batch, context + 1))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):  # warm-up step
        _, loss = model(x[:, :-1], x[:, 1:])
    loss.backward()
    model.zero_grad(set_to_none=True)
    del loss
    base = _rss_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # reset the peak-RSS counter (VmHWM) to now
        f.write("5")
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        _, loss = model(x[:, :-1], x[:, 1:])
    loss.backward()
    print(json.dumps({"attention": attention, "context": context, "peak_mb": (_rss_kb("VmHWM") - base) / 1024}))


def memory(context: int, batch: int, precision: str) -> list[dict]:
    rows = []
    for attention in ("rope", "relative"):
        child = [sys.executable, __file__, "--memory-child", attention, str(context), str(batch), precision]
        out = subprocess.run(child, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--precision", nargs="+", default=["fp32", "bf16"])
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--memory-context", type=int, default=2048)
    ap.add_argument("--memory-batch", type=int, default=2)
    ap.add_argument("--memory-child", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--out", help="write the result JSON here (benchmarks/results/train/...)")
    a = ap.parse_args(argv)
    if a.memory_child:
        att, ctx, b, prec = a.memory_child
        _memory_child(att, int(ctx), int(b), prec)
        return 0
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; batch {a.batch}, context {SIZE['context']}, "
          f"median of {a.steps} steps after {a.warmup} warm-up\n")
    from cadenza.env.device import cpu_supports_bf16

    requested = list(a.precision)
    if "bf16" in a.precision and not cpu_supports_bf16():
        print("bf16 rows skipped: this CPU has no native bf16 (no AVX512-BF16 or AMX), so bf16 autocast would "
              "be emulated and slower than fp32 (see `cadenza doctor --precision bf16`)\n")
        a.precision = [p for p in a.precision if p != "bf16"]
    rows = throughput(a.precision, a.steps, a.warmup, a.batch)
    print("| precision | model | tokens/s | vs HF | MFU | params |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['precision']} | {r['model']} | {r['tokens_per_s']:,.0f} | {r['vs_hf']:.2f}x | "
              f"{r['mfu'] * 100:.0f}% | {r['params_m']:.2f}M |")
    for p in a.precision:
        peak = next(r["peak_gflops"] for r in rows if r["precision"] == p)
        print(f"\nmatmul peak {p}: {peak:,.0f} GFLOP/s (1024x1024, best of 20)", end="")
    print()
    mem = []
    skipped = [] if "bf16" in a.precision or "bf16" not in requested else ["bf16: no native bf16 on this CPU"]
    if not a.skip_memory:
        mem = memory(a.memory_context, a.memory_batch, "fp32")
        rope = next(m["peak_mb"] for m in mem if m["attention"] == "rope")
        print(f"\npeak memory of one training step (fp32, context {a.memory_context}, batch {a.memory_batch}, "
              "fresh process each)")
        print("| attention | peak MB | vs rope |\n|---|---:|---:|")
        for m in mem:
            print(f"| {m['attention']} | {m['peak_mb']:,.0f} | {m['peak_mb'] / rope:.2f}x |")
    from _record import write_result

    write_result(a.out, {"benchmark": "train", "steps": a.steps, "batch": a.batch, "context": SIZE["context"],
                         "rows": rows, "skipped": skipped, "memory": {"context": a.memory_context,
                                                                      "batch": a.memory_batch, "rows": mem}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
