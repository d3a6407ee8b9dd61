"""The compiled decode step (AOTInductor) against the same step exported to ONNX Runtime, in one run.

    pip install onnxruntime onnx onnxscript
    python benchmarks/bench_onnx_step.py --out benchmarks/results/onnx/onnx-step.json

Issue 16 asked to measure ONNX Runtime as the alternative backend for the static decode step. Both
run `cadenza.generation.step.DecodeStep` (the bench_generate model size, untrained weights), the
cache length dynamic: AOTInductor through cadenza's package (`cadenza.generation.compiled`), ONNX
Runtime on an export by `torch.onnx.export(dynamo=True)` with every graph optimization, 2 intra-op
threads, with and without its spin-waiting threads. Milliseconds per step (median of 5 x 40 calls,
contestants interleaved) at two cache lengths, and the largest logit difference from eager.

ONNX Runtime is given contiguous cache slices, which real decoding would have to copy (the cache is
preallocated for the whole context); AOTInductor reads views of that cache. The comparison therefore
favours ONNX Runtime.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_generate import cadenza_model, median_ms


def export(step, args, context: int, path: Path) -> float:
    """Export the step to ONNX with the cache length dynamic; seconds taken."""
    n = torch.export.Dim("cached", min=1, max=context - 1)
    t = time.perf_counter()
    with torch.no_grad():
        program = torch.onnx.export(step, args, dynamo=True, dynamic_shapes=({}, {3: n}, {3: n}), optimize=True)
    program.save(str(path))
    return time.perf_counter() - t


def session(path: Path, spinning: bool):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = torch.get_num_threads()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])



@torch.inference_mode()
def measure(attention: str, batch: int, lengths: list[int], folder: Path) -> dict:
    from cadenza.generation import compiled
    from cadenza.generation.step import DecodeStep, idle_draw

    with torch.inference_mode(False):
        m = cadenza_model(attention)
    step = DecodeStep(m, attention_kernel=False)  # ONNX has no cadenza::decode_attention: Inductor's arithmetic
    cache = m.new_cache(batch)
    ids = torch.full((batch, 1), 5)
    path = folder / f"step-{attention}-{batch}.onnx"
    args = (ids, cache.k[:, :, :, :2].contiguous(), cache.v[:, :, :, :2].contiguous())
    with torch.inference_mode(False):
        seconds = export(step, args, m.config.context, path)
    fn = compiled.load(m, batch, quiet=True)
    if fn is None:
        raise SystemExit(f"no compiled step here: {compiled.unavailable_reason()}")
    sessions = {"onnxruntime": session(path, spinning=False), "onnxruntime, spinning": session(path, spinning=True)}
    names = [i.name for i in sessions["onnxruntime"].get_inputs()]
    torch.manual_seed(0)
    cache.k.normal_()
    cache.v.normal_()
    rows = []
    draw = idle_draw(batch, m.config.vocab_size)
    for n in lengths:
        k, v = cache.k[:, :, :, :n], cache.v[:, :, :, :n]
        feed = dict(zip(names, (ids.numpy(), k.contiguous().numpy(), v.contiguous().numpy())))
        ref = step(ids, k, v)[0]
        row = {"cached": n, "ms": {}, "max_abs_error": {}}
        # the package also draws a token (a few microseconds of its time); ONNX Runtime only decodes
        contestants = {"aotinductor": lambda: fn(ids, k, v, *draw)}
        contestants.update({name: (lambda s=s: s.run(None, feed)) for name, s in sessions.items()})
        for name, call in contestants.items():  # logits first: a tensor (AOTInductor) or an array (ORT)
            row["max_abs_error"][name] = (torch.as_tensor(call()[0]) - ref).abs().max().item()
            row["ms"][name] = median_ms(call)
        rows.append(row)
        print(f"{attention} batch {batch}, {n} cached: " + ", ".join(f"{k} {v:.3f} ms" for k, v in row["ms"].items()))
    return {"attention": attention, "batch": batch, "export_seconds": seconds, "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--attention", nargs="+", default=["rope", "relative"])
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 448])
    ap.add_argument("--out", help="write the result JSON here")
    a = ap.parse_args(argv)
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"{e.name} is not installed: pip install onnxruntime onnx onnxscript") from None
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for att in a.attention:
            for b in a.batches:
                results.append(measure(att, b, a.lengths, Path(tmp)))
    import onnxruntime as ort
    from _record import write_result

    write_result(a.out, {"benchmark": "onnx_step", "onnxruntime": ort.__version__, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
