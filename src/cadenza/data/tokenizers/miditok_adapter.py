"""Any MidiTok tokenizer (REMI, TSD, MIDILike, Structured, ...) behind cadenza's interface.

Optional: ``pip install 'cadenza[miditok]'``. The same note normalisation as the performance
tokenizer is applied first (tracks merged, pedal, overlaps), then MidiTok encodes the merged piano
track. MidiTok's own PAD/BOS/EOS ids are used, so stores and models work unchanged.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from cadenza.data.midi import notes_to_score
from cadenza.data.tokenizers.base import DecodeReport, Encoded, Tokenizer, TokenizerError


def _miditok():
    try:
        import miditok
    except ImportError:  # pragma: no cover - depends on the environment
        raise TokenizerError(
            "the MidiTok adapter needs MidiTok: pip install 'cadenza[miditok]'"
        ) from None
    return miditok


class MidiTokTokenizer(Tokenizer):
    """Wrap a MidiTok tokenizer class by name, with an optional MidiTok config (JSON-able dict)."""

    name = "miditok"

    def __init__(self, kind: str = "REMI", config: dict[str, Any] | None = None):
        miditok = _miditok()
        cls = getattr(miditok, kind, None)
        if cls is None or not isinstance(cls, type):
            raise TokenizerError(f"MidiTok has no tokenizer {kind!r} (try REMI, TSD, MIDILike, Structured)")
        self.kind = kind
        if config is None:
            self._tok = cls()
        else:
            with tempfile.TemporaryDirectory() as d:
                p = Path(d) / "tokenizer.json"
                p.write_text(json.dumps(config))
                self._tok = cls(params=p)
        if getattr(self._tok, "is_multi_voc", False):
            raise TokenizerError(f"MidiTok {kind} uses several vocabularies at once (a tuple per token); "
                                 "cadenza models need one id per token: use REMI, TSD, MIDILike or Structured")
        self._config = config if config is not None else self._saved_config()
        vocab = self._tok.vocab
        self.vocab_size = len(self._tok)
        self.pad_id = int(self._tok.pad_token_id)
        self.bos_id = int(vocab.get("BOS_None", self.pad_id))
        self.eos_id = int(vocab.get("EOS_None", self.pad_id))
        self._id_to_token = {v: k for k, v in vocab.items()}

    def _saved_config(self) -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "tokenizer.json"
            self._tok.save(p)
            return json.loads(p.read_text())

    def params(self) -> dict[str, Any]:
        return {"kind": self.kind, "config": self._config}

    @property
    def miditok(self):
        """The wrapped MidiTok tokenizer."""
        return self._tok

    def token_name(self, i: int) -> str:
        return self._id_to_token.get(int(i), f"<{int(i)}>")

    def encode(self, source) -> Encoded:
        notes, stats = self.read(source)
        if len(notes) == 0:
            return Encoded(np.zeros(0, np.int64), 0, stats)
        seqs = self._tok.encode(notes_to_score(notes))
        seq = seqs[0] if isinstance(seqs, list) else seqs
        ids = np.asarray(seq.ids, dtype=np.int64)
        return Encoded(ids=ids, notes=len(notes), stats=stats, seconds=notes.duration,
                       durations=notes.end - notes.start)

    def decode(self, ids):
        report = DecodeReport()
        ids = self.content(ids, report)
        try:
            score = self._tok.decode([ids.tolist()])
        except Exception as e:  # MidiTok's own errors are terse; say what was being decoded
            raise TokenizerError(f"MidiTok {self.kind} cannot decode these {ids.size} ids "
                                 f"({type(e).__name__}: {e})") from e
        return score, report
