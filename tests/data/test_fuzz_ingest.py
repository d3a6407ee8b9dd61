"""Fuzzing `prepare` with damaged MIDI: thousands of seeded mutations of real files (header fields,
chunk lengths, running status, delta times, stray bytes, truncation). `prepare` must never raise,
and every file must come out either kept or skipped with a reason."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SHARED_DATA, random_piece

from cadenza.data.prepare import prepare

CASES = 4000


def track_chunks(data: bytes) -> list[tuple[int, int]]:
    """(start of data, length) of each MTrk chunk, as far as the declared lengths go."""
    out, at = [], 14
    while at + 8 <= len(data) and data[at:at + 4] == b"MTrk":
        n = int.from_bytes(data[at + 4:at + 8], "big")
        out.append((at + 8, n))
        at += 8 + n
    return out


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    d = bytearray(data)
    chunks = track_chunks(data) or [(14, max(0, len(d) - 14))]
    start, n = chunks[int(rng.integers(len(chunks)))]
    inside = lambda: start + int(rng.integers(max(n, 1)))  # noqa: E731  (a position in a track)
    kind = int(rng.integers(7))
    if kind == 0:  # header: format, number of tracks or time division
        field = int(rng.choice([8, 10, 12]))
        d[field:field + 2] = int(rng.choice([0, 1, 2, 0x7FFF, 0x8000, 0xE728, 0xFFFF,
                                             int(rng.integers(65536))])).to_bytes(2, "big")
    elif kind == 1 and len(d) >= start:  # a chunk length that lies
        lie = min(int(rng.choice([0, 1, n // 2, n + 1, n * 4, 0xFFFFFFFF])), 0xFFFFFFFF)
        d[start - 4:start] = lie.to_bytes(4, "big")
    elif kind == 2:  # running status: a status byte becomes a data byte (or the reverse)
        for _ in range(int(rng.integers(1, 4))):
            i = inside()
            if i < len(d):
                d[i] = d[i] & 0x7F if d[i] & 0x80 else d[i] | 0x80
    elif kind == 3:  # delta times: a huge variable-length quantity where an event was
        i = min(inside(), len(d))
        d[i:i] = bytes([0xFF, 0xFF, 0xFF, 0x7F][: int(rng.integers(1, 5))])
    elif kind == 4:  # stray bytes
        for _ in range(int(rng.integers(1, 6))):
            i = inside()
            if i < len(d):
                d[i] = int(rng.integers(256))
    elif kind == 5:  # truncated
        del d[int(rng.integers(8, max(9, len(d)))):]
    else:  # tempo and meta events with absurd lengths
        i = min(inside(), len(d))
        d[i:i] = bytes([0, 0xFF, int(rng.choice([0x51, 0x2F, 0x58, 0x01])), int(rng.integers(256))])
    return bytes(d)


def seeds() -> list[bytes]:
    """Real MIDI when the shared test data is present; varied generated pieces always."""
    rng = np.random.default_rng(0)
    found = sorted((SHARED_DATA / "midi").rglob("*.mid"))[:24] if (SHARED_DATA / "midi").exists() else []
    real = [p.read_bytes() for p in found if p.stat().st_size < 200_000]
    made = [bytes(random_piece(rng, int(rng.integers(20, 120))).dumps_midi()) for _ in range(8)]
    return real + made


@pytest.mark.slow
def test_prepare_survives_thousands_of_damaged_files(tmp_path):
    rng = np.random.default_rng(1234)
    originals = seeds()
    folder = tmp_path / "fuzz"
    folder.mkdir()
    for k in range(CASES):
        data = originals[k % len(originals)]
        for _ in range(int(rng.integers(1, 4))):
            data = mutate(data, rng)
        (folder / f"case{k:05d}.mid").write_bytes(data)
    res = prepare(folder, tmp_path / "store", workers=2, progress=False)
    kept = {p.source for p in res.store.pieces}
    skipped = {s["source"]: s["reason"] for s in res.skipped}
    assert len(kept) + len(skipped) == CASES and not kept & set(skipped)
    assert all(reason and "\n" not in reason for reason in skipped.values())
    assert len(kept) > 50  # some mutations leave a file readable, and those files are kept
    # every reason is one a user can act on, not an internal error of the tokenizer
    assert not [r for r in skipped.values() if r.startswith(("IndexError", "ValueError", "TypeError", "KeyError"))]
