"""Generation speed: cadenza vs Hugging Face `generate` vs full-prefix recomputation, in one run.

    python benchmarks/bench_generate.py
    python benchmarks/bench_generate.py --new-tokens 256 --batches 1 8 --repeats 3
    python benchmarks/bench_generate.py --vocab notes      # or metrical

Same model size for all (d 256, 4 layers, 4 heads, ffn 1024, context 512), untrained weights, the
vocabulary of `--vocab` (`performance`: the 388-event one, 391 ids, a 1-token prompt: BOS; `notes`:
the note-level one with the shipped model's five styles, 718 ids, the prompt a generation of the
shipped model starts with: a style, the task flag, BOS), 512 new tokens, plain sampling (temperature
1, no top-k/top-p filter) and no early stop. cadenza runs with its KV cache, with the vocabulary's
grammar mask (its default) and without; "full recompute" is cadenza's model re-run on the whole
prefix for every token, the way MusicTransformer-Pytorch and anticipation sample. Medians over
repeats, contestants interleaved.
The rows and step timings marked "Inductor attention" are cadenza's compiled step with its attention
in Inductor's loops instead of the native kernel: what the kernel adds, measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

from cadenza.data.tokenizers import PerformanceTokenizer
from cadenza.models import checkpoint as ckpt
from cadenza.models.zoo import DEFAULT

# The compiled step with its attention in Inductor's loops instead of the native kernel: what the
# kernel adds, in the same run (not a contestant for the goal).
ABLATION = "Inductor attention"
SIZE = dict(d_model=256, n_layers=4, n_heads=4, d_ff=1024, context=512, dropout=0.0)
# Per vocabulary: its tokenizer, and the style of the prompt (None: the vocabulary has none).
VOCABS = {"performance": (lambda: PerformanceTokenizer(), None),
          "notes": (lambda: shipped_tokenizer(), "bach"),  # the shipped `styles` model's, its styles included
          "metrical": (lambda: metrical_tokenizer(), "bach")}  # bars and beats, with lookahead, the same styles


def shipped_tokenizer():
    """The shipped model's tokenizer, as its checkpoint records it (the note vocabulary, 718 ids)."""
    return ckpt.load_tokenizer(DEFAULT)


def metrical_tokenizer():
    """The metrical vocabulary the `bars` preset trains on (lookahead), with the shipped model's styles."""
    from cadenza.data.tokenizers import Styled
    from cadenza.data.tokenizers.metrical import MetricalTokenizer

    return Styled(MetricalTokenizer(lookahead=True), shipped_tokenizer().styles)


def vocabulary(vocab: str):
    """(the vocabulary's tokenizer, a function of b -> (b, T) prompts): what a generation of a
    model on it starts with (`prompt.Prompt`: the window prefix, then BOS)."""
    make, style = VOCABS[vocab]
    tok = make()
    ids = tok.window_prefix(style) + [tok.bos_id]
    return tok, lambda b: torch.tensor([ids] * b)


def cadenza_model(attention: str, vocab: str = "performance"):
    from cadenza.models import build_model
    from cadenza.models.config import ModelConfig

    torch.manual_seed(0)
    size = vocabulary(vocab)[0].vocab_size
    return build_model(ModelConfig(attention=attention, vocab_size=size, **SIZE)).eval()


def hf_model(tok):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=tok.vocab_size, n_positions=1024, n_embd=256, n_layer=4, n_head=4, n_inner=1024,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=tok.bos_id,
                     eos_token_id=tok.eos_id, pad_token_id=tok.pad_id)
    return GPT2LMHeadModel(cfg).eval()


def contestants(new_tokens: int, attention: list[str], vocab: str = "performance"):
    from cadenza.generation.config import SamplingConfig
    from cadenza.generation.sampler import generate_ids

    tok, prompts = vocabulary(vocab)
    hf = hf_model(tok)

    def run_hf(b):
        ids = prompts(b)
        with torch.inference_mode():
            hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0,
                        max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=tok.pad_id)

    out = {"HF GPT2 generate": run_hf}
    for att in attention:
        m = cadenza_model(att, vocab)

        def run(b, m=m, constrained=True, cache=True):
            g = torch.Generator().manual_seed(0)
            cfg = SamplingConfig(max_tokens=new_tokens, constrained=constrained, use_cache=cache, stop_at_eos=False)
            generate_ids(m, prompts(b), tok, cfg, generator=g)

        def run_fast(b, m=m, attention_kernel=True):
            from cadenza.generation import compiled

            g = torch.Generator().manual_seed(0)
            cfg = SamplingConfig(max_tokens=new_tokens, stop_at_eos=False)
            generate_ids(m, prompts(b), tok, cfg, generator=g,
                         decoder=compiled.decoder(m, b, quiet=True, attention_kernel=attention_kernel))

        out[f"cadenza {att}, compiled step"] = run_fast
        out[f"cadenza {att}, compiled step, {ABLATION}"] = lambda b, run=run_fast: run(b, attention_kernel=False)
        out[f"cadenza {att}"] = run
        out[f"cadenza {att}, no grammar"] = lambda b, run=run: run(b, constrained=False)
    m = cadenza_model(attention[0], vocab)
    out[f"full recompute ({attention[0]})"] = lambda b: contestants_full(m, tok, prompts(b), new_tokens)
    out["floor: the weight matmuls alone"] = lambda b: matmul_floor(m, b, new_tokens)
    return out


@torch.inference_mode()
def matmul_floor(model, b: int, n: int) -> None:
    """Only the matrix products every decoder of this size must do per token (no attention, no
    sampling, no Python model code): an upper bound on tokens/s for any eager implementation."""
    weights = [mod.weight for mod in model.modules() if isinstance(mod, torch.nn.Linear)]
    x = {w.shape[1]: torch.randn(b, w.shape[1]) for w in weights}
    for _ in range(n):
        for w in weights:
            torch.nn.functional.linear(x[w.shape[1]], w)


def median_ms(fn, calls: int = 40, rounds: int = 5, warm_up: int = 10) -> float:
    """Milliseconds per call of `fn`: the median over `rounds` rounds of `calls` calls."""
    for _ in range(warm_up):
        fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t) / calls * 1e3)
    return statistics.median(times)


def step_profile(attentions: list[str], batches: list[int], vocab: str, lengths=(64, 448), repeats: int = 200) -> dict:
    """Milliseconds per compiled step at two cache lengths (how the step's cost grows with the cache
    it reads); beside each, the time to read that filled cache once with a plain reduction (the
    ceiling for the growth: what the step's attention loops cost beyond it is their code, not the
    memory) and the machine's memory bandwidth (a 64 MB copy)."""
    from cadenza.generation import compiled
    from cadenza.generation.step import idle_draw

    out: dict = {}
    read: dict = {}
    for attention in attentions:
        m = cadenza_model(attention, vocab)
        for b in batches:
            fn = compiled.load(m, b, quiet=True)
            plain = compiled.load(m, b, quiet=True, attention_kernel=False)
            if fn is None or plain is None:
                raise SystemExit(f"no compiled step for {attention} batch {b}")
            cache = m.new_cache(b)
            cache.k.normal_()  # pages the whole buffer in, as a generation's writes do
            cache.v.normal_()
            ids = torch.full((b, 1), 5)
            draw = idle_draw(b, m.config.vocab_size)  # the step draws too, as in generation
            for n in lengths:
                k, v = cache.k[:, :, :, :n], cache.v[:, :, :, :n]
                key = f"{attention} batch {b}, {n} cached"
                with torch.inference_mode():  # as in generation
                    out[key] = median_ms(lambda: fn(ids, k, v, *draw), calls=repeats // 5, warm_up=1)
                    out[f"{key}, {ABLATION}"] = median_ms(lambda: plain(ids, k, v, *draw), calls=repeats // 5,
                                                         warm_up=1)
                    read[key] = median_ms(lambda: (k.sum(), v.sum()), calls=repeats // 5, warm_up=1)
    src = torch.ones(16 * 1024 * 1024)
    dst = torch.empty_like(src)
    rates = []
    for _ in range(6):  # the first round pages the buffers in
        t = time.perf_counter()
        for _ in range(10):
            dst.copy_(src)
        rates.append(2 * src.numel() * 4 * 10 / (time.perf_counter() - t) / 1e9)  # bytes read + written
    return {"step_ms": out, "cache_read_ms": read, "copy_gb_per_s": statistics.median(rates[1:])}


def compile_costs(batches: list[int], attention: list[str], vocab: str) -> dict:
    """Per (attention, batch): seconds to build the compiled step into an empty cache, and the
    first token's latency (load + prompt + one step) with a cold and with a warm disk cache."""
    import tempfile

    from cadenza.generation import compiled
    from cadenza.generation.config import SamplingConfig
    from cadenza.generation.sampler import generate_ids

    (tok, prompts), one_token = vocabulary(vocab), SamplingConfig(max_tokens=1, stop_at_eos=False)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CADENZA_CACHE"] = tmp
        for att in attention:
            m = cadenza_model(att, vocab)
            for b in batches:
                t = time.perf_counter()
                generate_ids(m, prompts(b), tok, one_token, decoder=compiled.decoder(m, b, quiet=True))
                cold = time.perf_counter() - t
                # warm: a fresh process, as a second `cadenza generate` would be (imports included)
                warm = subprocess.run([sys.executable, __file__, "--vocab", vocab, "--first-token", att, str(b)],
                                      check=True, capture_output=True, text=True, env=os.environ).stdout.split()[-1]
                out[f"{att} batch {b}"] = {"first_token_cold_s": cold, "first_token_warm_s": float(warm)}
        del os.environ["CADENZA_CACHE"]
    return out


def first_token(attention: str, b: int, vocab: str) -> float:
    """Seconds from asking for the compiled step (in the disk cache) to the first token, in this
    process: the `--first-token` mode that `compile_costs` runs in a fresh interpreter."""
    from cadenza.generation import compiled
    from cadenza.generation.config import SamplingConfig
    from cadenza.generation.sampler import generate_ids

    tok, prompts = vocabulary(vocab)
    m = cadenza_model(attention, vocab)
    t = time.perf_counter()  # from a loaded model, as in `cadenza generate`; loading the package included
    fast = compiled.decoder(m, b, quiet=True, build_missing=False)
    if fast is None:
        raise SystemExit("the compiled step is not in the cache")
    generate_ids(m, prompts(b), tok, SamplingConfig(max_tokens=1, stop_at_eos=False), decoder=fast)
    return time.perf_counter() - t


def contestants_full(m, tok, prompts, n):
    from cadenza.generation.config import SamplingConfig
    from cadenza.generation.sampler import generate_ids

    g = torch.Generator().manual_seed(0)
    cfg = SamplingConfig(max_tokens=n, constrained=False, use_cache=False, stop_at_eos=False)
    generate_ids(m, prompts, tok, cfg, generator=g)


def race(runs: dict, batches: list[int], repeats: int, new_tokens: int):
    """Every contestant at every batch size, interleaved, `repeats` times. -> (tokens/s, the median
    over repeats; each repeat's seconds; the load average before and after each batch size)."""
    results: dict[str, dict[int, float]] = {k: {} for k in runs}
    seconds: dict[str, dict[int, list[float]]] = {k: {} for k in runs}
    load = [os.getloadavg()[0]]  # other work on the machine moves every ratio: recorded beside them
    for b in batches:
        times: dict[str, list[float]] = {k: [] for k in runs}
        for k, fn in runs.items():  # warm-up
            fn(b) if not k.startswith("full") else None
        for r in range(repeats):
            for k, fn in runs.items():
                if k.startswith("full") and r > 0:
                    continue  # one full-recompute run is enough to see the gap (it is slow)
                t = time.perf_counter()
                fn(b)
                times[k].append(time.perf_counter() - t)
        for k in runs:
            results[k][b] = b * new_tokens / statistics.median(times[k])
            seconds[k][b] = times[k]
        load.append(os.getloadavg()[0])
    return results, seconds, load


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--attention", nargs="+", default=["rope", "relative"])
    ap.add_argument("--vocab", choices=list(VOCABS), default="performance",
                    help="the vocabulary every contestant decodes (notes: the shipped model's)")
    ap.add_argument("--skip-full", action="store_true", help="skip the (slow) full-recompute contestant")
    ap.add_argument("--out", help="write the result JSON here (benchmarks/results/generate/...)")
    ap.add_argument("--first-token", nargs=2, metavar=("ATTENTION", "BATCH"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.first_token:
        print(first_token(a.first_token[0], int(a.first_token[1]), a.vocab))
        return 0
    from cadenza.env.record import cpu_info
    from cadenza.generation import compiled

    if reason := compiled.unavailable_reason():
        raise SystemExit(f"the compiled decode step is unavailable here: {reason}")
    cpu = cpu_info()
    print(f"CPU: {cpu['model']}, {cpu['cores']} cores; flags {' '.join(cpu['isa'])}")
    costs = compile_costs(a.batches, a.attention, a.vocab)
    for k, c in costs.items():
        print(f"compiled step, {k}: first token {c['first_token_cold_s']:.1f} s with an empty cache "
              f"(build included), {c['first_token_warm_s']:.2f} s from the disk cache in a new process")
    profile = step_profile(a.attention, a.batches, a.vocab)
    reads = profile["cache_read_ms"]
    print("compiled step: " + ", ".join(f"{k}: {v:.2f} ms" + (f" (cache read {reads[k]:.2f})" if k in reads else "")
                                        for k, v in profile["step_ms"].items())
          + f"; memory copy {profile['copy_gb_per_s']:.1f} GB/s")
    runs = contestants(a.new_tokens, a.attention, a.vocab)
    if a.skip_full:
        runs = {k: v for k, v in runs.items() if not k.startswith("full")}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {a.vocab} vocabulary, "
          f"{a.new_tokens} new tokens, median of {a.repeats}\n")
    print("| generator | " + " | ".join(f"batch {b} tok/s | vs HF" for b in a.batches) + " |")
    print("|---|" + "---:|---:|" * len(a.batches))
    results, seconds, load = race(runs, a.batches, a.repeats, a.new_tokens)
    hf = results["HF GPT2 generate"]
    for k, r in results.items():
        print(f"| {k} | " + " | ".join(f"{r[b]:,.0f} | {r[b] / hf[b]:.2f}x" for b in a.batches) + " |")
    from _record import write_result

    rows = [{"generator": k, "tokens_per_s": {str(b): r[b] for b in r}, "vs_hf": {str(b): r[b] / hf[b] for b in r},
             "seconds_per_repeat": {str(b): seconds[k][b] for b in r}} for k, r in results.items()]
    print(f"load average (1 min) before and after each batch size: {', '.join(f'{x:.2f}' for x in load)}")
    write_result(a.out, {"benchmark": "generate", "vocab": a.vocab, "vocab_size": vocabulary(a.vocab)[0].vocab_size,
                         "new_tokens": a.new_tokens, "repeats": a.repeats,
                         "batches": a.batches, "compile": costs, "step_profile": profile, "rows": rows,
                         "load_average": load})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
