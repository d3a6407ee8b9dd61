"""The compiled decode step against the eager model: same logits, same greedy tokens, same MIDI.

The decode step (`DecodeStep`) is checked eagerly for every attention scheme; the compiled decode
step is checked for relative and rope attention at batch 1 and 8, over 512 steps that start from a
primer and slide the window several times (context 128).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cadenza.data.tokenizers import PerformanceTokenizer
from cadenza.generation import compiled, kernel
from cadenza.generation.config import SamplingConfig
from cadenza.generation.filters import filter_logits, inverse_cdf
from cadenza.generation.sampler import _Window, generate_ids, sample_seeds
from cadenza.generation.step import StepDecoder
from cadenza.models import build_model
from cadenza.models.config import ModelConfig

TOK = PerformanceTokenizer()


def model(attention: str, context: int = 128, seed: int = 0):
    torch.manual_seed(seed)
    cfg = ModelConfig(attention=attention, vocab_size=TOK.vocab_size, d_model=64, n_layers=2, n_heads=4,
                      d_ff=128, context=context, dropout=0.0)
    return build_model(cfg).eval()


def window_logits(m, seq: torch.Tensor, primer: int, decoder=None) -> list[torch.Tensor]:
    """The sampler's logits for every position after `primer`, fed token by token, sliding the
    window as generation does (with `decoder`, a `StepDecoder`: through its decode step)."""
    w = _Window(m, seq.shape[0], True, slide=m.config.context // 4, decoder=decoder)
    out = [w.next_logits(seq[:, :primer], primer)]
    for n in range(primer + 1, seq.shape[1] + 1):
        out.append(w.next_logits(seq[:, :n], 1))
    return out


@pytest.mark.parametrize("attention", ["relative", "rope", "absolute"])
def test_step_function_matches_the_eager_model(attention):
    m = model(attention)
    seq = torch.randint(0, 388, (3, 300))
    with torch.inference_mode():
        ref = window_logits(m, seq, 20)
        got = window_logits(m, seq, 20, StepDecoder(m, 3))
    assert max((a - b).abs().max().item() for a, b in zip(ref, got)) < 1e-4


def test_a_drawing_step_refuses_draw_inputs_it_would_misread():
    m = model("rope")
    dec = StepDecoder(m, 2, draws=True)
    ids = torch.tensor([[5], [7]])
    allowed = torch.zeros(2, TOK.vocab_size, dtype=torch.bool)
    allowed[:, 40:60] = True
    with torch.inference_mode():
        dec.step(ids)  # the prompt fills the cache
        logits, drawn = dec.step_draw(ids, allowed, torch.full((2,), 0.5), torch.tensor(0.9))
        assert logits.shape == (2, TOK.vocab_size) and ((drawn >= 40) & (drawn < 60)).all()
        with pytest.raises(ValueError, match="mask"):
            dec.step_draw(ids, allowed[:, :-1], torch.zeros(2), torch.tensor(1.0))
        with pytest.raises(ValueError, match="uniforms"):
            dec.step_draw(ids, allowed, torch.zeros(2, dtype=torch.float64), torch.tensor(1.0))


@pytest.fixture(scope="module")
def built(compile_here):
    """Models whose compiled decode steps the tests build into a private cache, once for the module."""
    return {att: model(att) for att in ("relative", "rope")}


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["relative", "rope"])
@pytest.mark.parametrize("batch", [1, 8])
def test_compiled_logits_match_eager_over_512_steps_and_window_slides(built, attention, batch):
    m = built[attention]
    dec = compiled.decoder(m, batch, quiet=True)
    assert dec is not None
    seq = torch.randint(0, 388, (batch, 512 + 16))
    with torch.inference_mode():
        ref = window_logits(m, seq, 16)
        got = window_logits(m, seq, 16, dec)
    assert len(got) == 513
    assert max((a - b).abs().max().item() for a, b in zip(ref, got)) < 1e-4


@pytest.mark.slow
def test_compiled_greedy_tokens_equal_eager_and_sampling_repeats(built):
    m = built["relative"]
    prompt = torch.full((1, 1), TOK.bos_id)
    greedy = [generate_ids(m, prompt, TOK, SamplingConfig(max_tokens=300, top_k=1, stop_at_eos=False), decoder=decoder)
              for decoder in (None, compiled.decoder(m, 1, quiet=True))]
    assert greedy[0] == greedy[1]
    seeds = sample_seeds(3, 0, 1)
    runs = [generate_ids(m, prompt, TOK, SamplingConfig(max_tokens=300), seeds=seeds,
                         decoder=compiled.decoder(m, 1, quiet=True))
            for _ in range(2)]
    assert runs[0] == runs[1]


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["relative", "rope"])
@pytest.mark.parametrize("batch", [1, 8])
def test_the_step_draws_the_tokens_the_sampler_would_draw_from_its_logits(built, attention, batch):
    """Plain sampling draws inside the compiled decode step: at every step of a 512-token generation (the
    grammar on, temperature 0.8, a window slide), its tokens are those the eager filters and
    inverse-CDF draw pick from the logits it returns."""
    m = built[attention]
    dec = compiled.decoder(m, batch, quiet=True)
    seen = []
    step_draw = dec.step_draw

    def recording(ids, allowed, u, temperature):
        logits, drawn = step_draw(ids, allowed, u, temperature)
        seen.append((logits, drawn, allowed.clone(), u.clone()))
        return logits, drawn

    dec.step_draw = recording
    cfg = SamplingConfig(max_tokens=512, temperature=0.8, stop_at_eos=False)
    generate_ids(m, torch.full((batch, 1), TOK.bos_id), TOK, cfg, seeds=sample_seeds(5, 0, batch), decoder=dec)
    drawn_in_step = [(logits, drawn, allowed, u) for logits, drawn, allowed, u in seen if drawn is not None]
    assert len(drawn_in_step) > 400  # all but the prompt's step and the steps right after slides
    for logits, drawn, allowed, u in drawn_in_step:
        probs = torch.softmax(filter_logits(logits, 0.8, None, None, allowed), dim=-1)
        assert torch.equal(drawn, inverse_cdf(probs, u)[:, 0])


@pytest.mark.slow
def test_a_step_whose_kernel_call_does_not_build_falls_back_to_inductors_attention(built, monkeypatch):
    m = built["rope"]
    real = compiled.build

    def build(model, batch, path, attention_kernel=False):
        if attention_kernel:
            raise RuntimeError("this PyTorch cannot call custom operators from a package")
        real(model, batch, path, attention_kernel)

    monkeypatch.setattr(compiled, "build", build)
    with pytest.warns(RuntimeWarning, match="could not compile the decode step"):
        fn = compiled.load(m, 5, quiet=True)  # a batch size no other test builds
    assert fn is not None
    assert compiled.load(m, 5, quiet=True) is fn  # found again without another build


@pytest.mark.slow
def test_packages_are_cached_on_disk_and_keyed_by_weights_and_batch(built):
    m = built["rope"]
    assert compiled.decoder(m, 1, quiet=True) is not None
    assert list(compiled.cache_dir().glob("step-*.pt2"))
    assert compiled.package_key(m, 1) != compiled.package_key(m, 2)
    assert compiled.package_key(m, 1) != compiled.package_key(model("rope", seed=1), 1)
    # a shape that was never built falls back (None) instead of building when told not to build
    assert compiled.decoder(m, 3, build_missing=False) is None


@pytest.mark.slow
def test_loading_a_cached_package_does_not_import_inductor(built):
    """Inductor takes seconds to import: a process that finds its package in the cache must not pay
    for it (a second `cadenza generate` would wait seconds for its first token)."""
    assert compiled.decoder(built["rope"], 1, quiet=True) is not None
    lib = kernel.library_path()  # the kernel may have been loaded by another module's tests, from its cache
    if kernel.ready() and not lib.exists():
        lib.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(kernel._STATE["loaded"], lib)
    here = Path(__file__).parent
    code = (f"import sys; sys.path[:0] = [{str(here.parent)!r}, {str(here)!r}]\n"
            "from test_static import compiled, model\n"  # the same model as the fixture's, from its seed
            "assert compiled.decoder(model('rope'), 1, build_missing=False) is not None, 'not found in the cache'\n"
            "print('inductor imported' if 'torch._inductor' in sys.modules else 'inductor not imported')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "inductor not imported"


def test_unsupported_models_and_the_opt_out_decode_eagerly(monkeypatch):
    monkeypatch.setenv("CADENZA_NO_COMPILE", "1")
    assert "CADENZA_NO_COMPILE" in compiled.unavailable_reason()
    assert compiled.decoder(model("rope"), 1) is None
    lstm = build_model(ModelConfig(model="lstm", vocab_size=TOK.vocab_size, d_model=32, n_layers=1,
                                   context=64)).eval()
    monkeypatch.delenv("CADENZA_NO_COMPILE")
    assert compiled.decoder(lstm, 1) is None
    with pytest.raises(ValueError, match="lstm"):
        StepDecoder(lstm, 1)


def test_a_decoder_for_another_batch_size_is_refused():
    m = model("rope")
    with pytest.raises(ValueError, match="rows"):
        generate_ids(m, torch.full((2, 1), TOK.bos_id), TOK, SamplingConfig(max_tokens=5), decoder=StepDecoder(m, 1))


def test_weights_made_under_inference_mode_still_get_a_package_key():
    with torch.inference_mode():  # e.g. a model loaded inside a `torch.inference_mode()` block
        m = model("rope")
    key = compiled.package_key(m, 1)
    assert key == compiled.package_key(m, 1)
    with torch.inference_mode():
        m.head.weight.add_(1.0)  # no version counter to notice this: the weights are hashed again
    assert compiled.package_key(m, 1) != key


@pytest.mark.slow
def test_a_build_autotunes_without_printing_inductors_tables(built, capfd, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # no autotuning results from earlier builds
    torch.manual_seed(0)  # layers as wide as the shipped models': Inductor autotunes these
    m = build_model(ModelConfig(attention="rope", vocab_size=TOK.vocab_size, d_model=256, n_layers=1, n_heads=4,
                                d_ff=1024, context=64, dropout=0.0)).eval()
    capfd.readouterr()
    assert compiled.decoder(m, 1, quiet=True) is not None
    err = capfd.readouterr().err
    assert "AUTOTUNE" not in err and "Autotune Choices" not in err, err[-500:]


@pytest.fixture(scope="module")
def notes_model(compile_here):
    """A model on the note vocabulary, and an accompaniment's prompt and plan (a forced melody)."""
    from cadenza.data.midi import Notes
    from cadenza.data.requests import accompany_request
    from cadenza.data.tokenizers import NoteTokenizer

    tok = NoteTokenizer()
    torch.manual_seed(1)
    m = build_model(ModelConfig(vocab_size=tok.vocab_size, d_model=64, n_layers=2, n_heads=4, d_ff=128, context=128,
                                dropout=0.0)).eval()
    starts = torch.arange(16) * 0.5
    melody = Notes.from_arrays(starts.numpy(), (starts + 0.45).numpy(), [72, 74, 76, 77] * 4, [80] * 16)
    request = accompany_request(tok, melody)
    return m, tok, torch.tensor([tok.window_prefix(None, True) + request.prompt.tolist()] * 2), request.plan


@pytest.mark.slow
def test_the_note_vocabulary_decodes_the_same_compiled_and_eager(notes_model):
    """Greedy decoding with given notes forced by the masks (and window slides past context 128):
    the compiled decode step picks the eager model's tokens; sampled, it draws what the eager
    filters draw from its logits."""
    m, tok, prompt, plan = notes_model
    cfg = SamplingConfig(max_tokens=300, top_k=1, stop_at_eos=False)
    greedy = [generate_ids(m, prompt, tok, cfg, decoder=decoder, plan=plan)
              for decoder in (None, compiled.decoder(m, 2, quiet=True))]
    assert greedy[0] == greedy[1]
    dec = compiled.decoder(m, 2, quiet=True)
    seen, step_draw = [], dec.step_draw

    def recording(ids, allowed, u, temperature):
        logits, drawn = step_draw(ids, allowed, u, temperature)
        seen.append((logits, drawn, allowed.clone(), u.clone()))
        return logits, drawn

    dec.step_draw = recording
    generate_ids(m, prompt, tok, SamplingConfig(max_tokens=300, stop_at_eos=False), seeds=sample_seeds(4, 0, 2),
                 decoder=dec, plan=plan)
    drawn = [s for s in seen if s[1] is not None]
    assert len(drawn) > 200
    for logits, got, allowed, u in drawn:
        probs = torch.softmax(filter_logits(logits, 1.0, None, None, allowed), -1)
        assert torch.equal(got, inverse_cdf(probs, u)[:, 0])
