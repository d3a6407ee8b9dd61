"""Plain-Python reference of the performance encoding, written loop by loop from the spec.

The vectorised `PerformanceTokenizer` must agree with it token for token (encoding) and note for
note (decoding, including the repair counts).
"""

from __future__ import annotations

import math

SPS, MAX_SHIFT, BINS = 100, 100, 32
ON, OFF, SHIFT, VEL, PAD, BOS, EOS = 0, 128, 256, 356, 388, 389, 390


def vel_bin(v: int) -> int:
    return (v - 1) * BINS // 127 + 1


def reference_quantize(notes):
    q = []
    for s, e, p, v in zip(notes.start, notes.end, notes.pitch, notes.velocity):
        qs, qe = math.floor(s * SPS + 0.5), math.floor(e * SPS + 0.5)
        if qe <= qs:  # shorter than a step: onset rounds down if it can, else the release rounds up
            if math.floor(s * SPS) < qs:
                qs -= 1
            else:
                qe = math.ceil(e * SPS)
        q.append([qs, qe, int(p), vel_bin(int(v))])
    groups = {}
    for i, n in enumerate(q):  # same pitch, same step: one note until the latest release, loudest bin
        groups.setdefault((n[2], n[0]), []).append(i)
    merged = []
    for idx in groups.values():
        last = list(q[idx[-1]])
        last[1] = max(q[i][1] for i in idx)
        last[3] = max(q[i][3] for i in idx)
        merged.append((idx[-1], last))
    q = [n for _, n in sorted(merged)]
    by_pitch = {}
    for n in q:
        by_pitch.setdefault(n[2], []).append(n)
    out = []
    for ns in by_pitch.values():
        ns.sort(key=lambda n: n[0])
        for i, n in enumerate(ns):
            n[1] = max(n[1], n[0] + 1)
            if i + 1 < len(ns):
                n[1] = min(n[1], ns[i + 1][0])
            out.append(n)
    return out


def reference_encode(notes) -> list[int]:
    events = []
    for s, e, p, b in reference_quantize(notes):
        events.append((s, 1, p, b))
        events.append((e, 0, p, 0))
    events.sort(key=lambda ev: (ev[0], ev[1], ev[2]))
    ids, now, cur_bin = [], 0, None
    for t, is_on, p, b in events:
        delta = t - now
        while delta > 0:
            k = min(delta, MAX_SHIFT)
            ids.append(SHIFT + k - 1)
            delta -= k
        now = t
        if is_on:
            if b != cur_bin:
                ids.append(VEL + b - 1)
                cur_bin = b
            ids.append(ON + p)
        else:
            ids.append(OFF + p)
    return ids


def reference_decode(ids):
    """-> (sorted list of (start_step, end_step, pitch, bin), repair counts)"""
    t, b = 0, vel_bin(64)
    sounding, notes = {}, []
    rep = dict(orphan_note_offs=0, restarted_notes=0, closed_at_end=0, zero_length=0, special_tokens=0)

    def close(p, end):
        s, nb = sounding.pop(p)
        if end > s:
            notes.append((s, end, p, nb))
        else:
            rep["zero_length"] += 1

    for i in ids:
        i = int(i)
        if i == EOS:
            break
        if i >= PAD:
            rep["special_tokens"] += 1
        elif i < OFF:
            if i in sounding:
                rep["restarted_notes"] += 1
                close(i, t)
            sounding[i] = (t, b)
        elif i < SHIFT:
            p = i - OFF
            if p in sounding:
                close(p, t)
            else:
                rep["orphan_note_offs"] += 1
        elif i < VEL:
            t += i - SHIFT + 1
        else:
            b = i - VEL + 1
    for p in list(sounding):
        rep["closed_at_end"] += 1
        s, nb = sounding.pop(p)
        notes.append((s, max(t, s + 1), p, nb))
    return sorted(notes), rep
