"""The metrical vocabulary: golden ids, exact round trips on its grid (3/4, 6/8, triplets, pickups,
tempo changes), MIDI that keeps its bars, and masks under which no draw is ill formed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cadenza.data.meter import Meter
from cadenza.data.midi import Notes, notes_to_score, read_notes, score_to_bytes
from cadenza.data.tokenizers import get_tokenizer, tokenizer_from_dict
from cadenza.data.tokenizers.metrical import LENGTHS, QPM, MetricalTokenizer
from cadenza.data.tokenizers.note_grid import GridNotes

tok = MetricalTokenizer()


def piece(meter: Meter, rows) -> Notes:
    """Notes from (quarter, quarters long, pitch) rows on `meter`."""
    q = np.array(rows, np.float64).reshape(-1, 3)
    return Notes.from_arrays(meter.seconds(q[:, 0]), meter.seconds(q[:, 0] + q[:, 1]), q[:, 2].astype(int),
                             np.full(len(q), 90), 0,
                             meter=meter)


PICKUP_WALTZ = Meter.from_changes([(0, 120), (4, 88.6)], [(0, 1, 4), (1, 3, 4)])
WALTZ_ROWS = [(0, 1, 67),  # the pickup
              (1, 3, 48), (1, 1 / 3, 72), (4 / 3, 1 / 3, 74), (5 / 3, 1 / 3, 76), (2, 2, 77),  # triplets
              (4, 3, 79)]  # slower: the tempo changes at the bar line


def test_golden_ids_of_a_waltz_with_a_pickup_triplets_and_a_tempo_change():
    ids = tok.encode(piece(PICKUP_WALTZ, WALTZ_ROWS)).ids
    names = [tok.token_name(i) for i in ids]
    assert names == [
        "BAR", "METER_1/4", "TEMPO_120", "POS_0", "VELOCITY_12", "INSTRUMENT_0", "NOTE_67", "DURATION_11",
        "BAR", "METER_3/4", "POS_0", "NOTE_48", "DURATION_27", "NOTE_72", "DURATION_3", "POS_4", "NOTE_74",
        "DURATION_3", "POS_8", "NOTE_76", "DURATION_3", "POS_12", "NOTE_77", "DURATION_23",
        "BAR", "TEMPO_89", "POS_0", "NOTE_79", "DURATION_27", "BAR"]
    assert ids[:4].tolist() == [0, tok.meter(1, 4), tok.tempo(120), tok.pos(0)] == [0, 254, 225, 1]
    assert LENGTHS[27] == 36 and LENGTHS[3] == 4 and QPM[25] == pytest.approx(88.61, abs=0.01)


@pytest.mark.parametrize("meter,rows", [
    (PICKUP_WALTZ, WALTZ_ROWS),
    (Meter.constant(96, 6, 8), [(0, 1.5, 60), (1.5, 0.5, 62), (2, 1, 64), (3, 3, 65), (3, 0.25, 72), (6.5, 0.75, 55)]),
    (Meter.from_changes([(0, 60), (2.5, 144)], [(0, 4, 4), (8, 3, 2), (14, 5, 8)]),
     [(0, 4, 60), (2.5, 0.5, 67), (8, 6, 48), (9, 0.25, 79), (14, 2.5, 50), (16, 1, 52)]),
])
def test_exact_round_trip_on_the_grid(meter, rows):
    notes = piece(meter, rows)
    enc = tok.encode(notes)
    back, report = tok.decode_notes(enc.ids)
    assert report.repairs == 0 and not any(report.extra.values())
    order = np.lexsort((notes.pitch, notes.start))
    got = np.lexsort((back.pitch, back.start))
    assert np.array_equal(back.pitch[got], notes.pitch[order])
    # on the meter's own tempos (the tokens' tempos are bins): onsets and releases in beats are exact
    beats = back.meter.quarters(back.start[got])
    assert np.allclose(beats, meter.quarters(notes.start[order]), atol=1e-9)
    assert np.allclose(back.meter.quarters(back.end[got]), meter.quarters(notes.end[order]), atol=1e-9)
    assert back.meter.bar_starts(20).tolist() == meter.bar_starts(20).tolist()
    assert np.array_equal(tok.encode_grid(tok.decode_grid(enc.ids)[0], close=True), enc.ids)


def test_midi_keeps_its_bars_and_tempo_through_a_round_trip(tmp_path):
    notes = piece(PICKUP_WALTZ, WALTZ_ROWS)
    back, _ = read_notes(score_to_bytes(notes_to_score(notes)), programs=True)
    assert back.meter.signature_at == (0.0, 1.0) and back.meter.numerator == (1, 3)
    assert back.meter.qpm[0] == pytest.approx(120) and back.meter.qpm[1] == pytest.approx(88.6, abs=0.01)
    assert np.array_equal(tok.encode(back).ids, tok.encode(notes).ids)


def test_a_file_without_a_meter_is_four_four_at_120():
    notes = Notes.from_arrays([0.0, 0.5, 2.25], [0.5, 1.0, 3.0], [60, 62, 64], [80, 80, 80], 0)
    names = [tok.token_name(i) for i in tok.encode(notes).ids]
    assert names[:3] == ["BAR", "METER_4/4", "TEMPO_120"] and names.count("BAR") == 3  # two bars, then closed
    assert "POS_6" in names  # 2.25 s at 120 qpm: 4.5 quarters, half a beat into bar 2


def test_off_grid_notes_snap_to_the_nearest_tick_and_long_bars_split():
    notes = piece(Meter.constant(120, 4, 4), [(0.02, 1, 60), (1.5 + 1 / 16, 1, 62)])
    back = tok.decode_notes(tok.encode(notes).ids)[0]
    assert np.allclose(back.meter.quarters(back.start), [0, 1.5 + 1 / 12])  # a 64th off: to the nearest tick
    huge = Meter.constant(120, 20, 4)  # a bar of 20 quarters is longer than any METER: split in two
    enc = tok.encode(piece(huge, [(0, 1, 60), (12, 1, 62)]))
    assert enc.stats["long_bars_split"] == 1
    assert [tok.token_name(i) for i in enc.ids].count("METER_10/4") == 1


def test_the_tokenizer_rebuilds_from_its_config_and_by_name():
    assert isinstance(get_tokenizer("metrical"), MetricalTokenizer)
    again = tokenizer_from_dict(tok.with_styles(["bach"]).to_dict())
    assert again.vocab_size == tok.vocab_size + 2 and again.base.params() == tok.params()


def test_no_draw_under_the_masks_is_ill_formed():
    # 10,000 random draws (64 rows) under the masks decode with no repair, their bars whole
    styled = tok.with_styles(["a"])
    rows = 64
    g = styled.grammar(rows, torch.device("cpu"), max_polyphony=6)
    g.observe(torch.tensor([styled.window_prefix("a") + [tok.bos_id]] * rows))
    gen = torch.Generator().manual_seed(0)
    drawn = []
    for _ in range(10_000 // rows + 1):
        m = g.allowed()
        assert m.any(1).all()
        x = torch.multinomial(m.float(), 1, generator=gen)[:, 0]
        g.observe(x[:, None])
        drawn.append(x)
    for r, row in enumerate(torch.stack(drawn, 1).tolist()):
        if tok.eos_id in row:
            row = row[:row.index(tok.eos_id)]
        elif g.phase[r] != 0:  # cut inside a note: drop it
            row = row[:max(i for i, t in enumerate(row) if t == tok.bar_id or tok.pos_offset <= t < tok.tempo_offset)]
        events, _, report = tok.decode_grid(row)
        assert report.repairs == 0 and not any(report.extra.values())
        assert (events.onset >= 0).all()


@pytest.mark.parametrize("header", [False, True])
def test_a_new_piece_opens_with_a_note_on_its_first_beat(header):
    # as 99.7% of the training pieces do: no empty first bar and no rest before the first note,
    # whether the model writes the first bar line or a meter and tempo asked for wrote it
    from tests.conftest import draw_under_masks

    styled = tok.with_styles(["a"])
    prompt = styled.window_prefix("a") + [tok.bos_id] + (tok.header((3, 4), 60.0) if header else [])
    g = styled.grammar(64, torch.device("cpu"))
    g.observe(torch.tensor([prompt] * 64))
    head = prompt[len(styled.window_prefix("a")) + 1:]  # the header's tokens, if any
    for row in draw_under_masks(g, 64, 40, seed=3).tolist():
        row = row[:row.index(tok.eos_id)] if tok.eos_id in row else row
        events = tok.decode_grid(head + row)[0]
        assert len(events) and events.onset.min() == 0


def chorale(lookahead: bool = False):
    """Four voices in 3/4 after a one-beat pickup, the tempo changing in bar 3, on the grid."""
    from tests.conftest import four_voices

    meter = Meter.from_changes([(0, 100), (7, 80)], [(0, 1, 4), (1, 3, 4)])
    n = four_voices(24, 3.0, 0.5, program=0)
    notes = Notes.from_arrays(meter.seconds(n.start * 2), meter.seconds(n.end * 2), n.pitch, n.velocity, n.programs,
                              meter=meter)
    t = MetricalTokenizer(lookahead=lookahead)
    return t, t.quantize(notes)[0]


@pytest.mark.parametrize("lookahead", [False, True])
@pytest.mark.parametrize("task", ["autoregress", "infill", "accompany", "accompany_live"])
def test_every_real_window_passes_the_masks(task, lookahead):
    # what training writes is what the masks allow, token by token: controls forced at their
    # positions, the next bar's given notes shown after each bar line where the task looks ahead
    from cadenza.data.anticipation import choose_controls, window_ids
    from cadenza.data.tokenizers.note_grid import Plan

    t, g = chorale(lookahead)
    rng = np.random.default_rng(1)
    given, kind = choose_controls(g, "infill" if task == "infill" else "accompany" if task != "autoregress" else task,
                                  rng)
    kind = task if given is not None and task.startswith("accompany") else kind
    ids = window_ids(t, g, given, True, True, kind, None)
    controls = g.take(given) if given is not None else GridNotes.empty(g)
    controls.velocity = np.zeros_like(controls.velocity)
    plan = Plan(controls=controls, previews=t.previews(kind)) if given is not None else None
    grammar = t.grammar(1, "cpu", plan=plan)
    head = 3 if plan is None else 6  # the task flag, the key, BOS (and given music's first BAR METER TEMPO)
    grammar.observe(torch.tensor([ids[:head].tolist()]))  # the prompt
    for i in range(head, len(ids) - 1):  # up to EOS, which the masks allow only at the length asked for
        assert grammar.allowed()[0, ids[i]], (i, t.token_name(ids[i]))
        grammar.observe(torch.tensor([[ids[i]]]))
    if t.previews(kind):
        assert t.ahead_id in ids.tolist()
    events, decoded, _ = t.decode_grid(ids)
    assert np.array_equal(decoded.onset, controls.onset) and np.array_equal(decoded.pitch, controls.pitch)


def test_metrical_samples_keep_to_their_programs_and_bars():
    styled = tok.with_styles(["a"])
    g = styled.grammar(8, "cpu", max_polyphony=6, programs=[19], bars=3, allow_eos=True)
    g.observe(torch.tensor([styled.window_prefix("a") + [tok.bos_id]] * 8))
    gen, rows, done = torch.Generator().manual_seed(3), [[] for _ in range(8)], torch.zeros(8, dtype=torch.bool)
    for _ in range(400):
        x = torch.multinomial(g.allowed().float(), 1, generator=gen)[:, 0]
        g.observe(x[:, None])
        for r in range(8):
            if not done[r]:
                rows[r].append(int(x[r]))
        done |= g.finished()
        if done.all():
            break
    assert done.all()  # each row reached its third bar's closing line
    for row in rows:
        assert row.count(tok.bar_id) == 4 and row[-1] == tok.bar_id  # three bars and the line that closes them
        events, _, _ = tok.decode_grid(row)
        assert set(events.program.tolist()) <= {19}


@pytest.mark.parametrize("lookahead", [False, True])
def test_a_bar_span_scores_the_same_music_with_and_without_its_suffix(lookahead):
    # the span's music is the same tokens either way; given notes (and previews of them) are not scored
    from cadenza.evaluation.bar_spans import BarSpan, encodings

    t, g = chorale(lookahead)
    span = BarSpan(g, 1 * 12 + 36, 1 * 12 + 3 * 36, 0, None, True)  # bars 2-3 (after the pickup and bar 1)
    enc = encodings(t, span)
    scored = {k: ids[mask] for k, (ids, mask) in enc.items()}
    assert np.array_equal(scored["plain"], scored["anticipatory"]) and scored["plain"].size > 10
    assert (getattr(t, "ahead_id", None) in enc["anticipatory"][0].tolist()) == lookahead
    assert not np.isin(scored["plain"], np.arange(t.control_offset, t.duration_offset)).any()


def test_the_last_bar_of_a_span_is_its_music_after_its_second_to_last_bar_line():
    from cadenza.evaluation.bar_spans import BarSpan, encodings, last_bar

    t, g = chorale(True)
    span = BarSpan(g, 1 * 12 + 36, 1 * 12 + 3 * 36, 0, None, True)  # bars 2-3
    for ids, mask in encodings(t, span).values():
        last = last_bar(t, ids, mask)
        inside = np.flatnonzero(last)
        assert last.sum() < mask.sum() and (mask | ~last).all()
        assert ids[inside[-1]] == t.bar_id and (ids[inside[:-1]] != t.bar_id).all()  # one bar, closed by its line
        assert np.count_nonzero(ids[np.flatnonzero(mask)] == t.bar_id) == 3  # opens bar 2, opens 3, closes 3
