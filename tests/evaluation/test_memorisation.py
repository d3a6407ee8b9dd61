"""cadenza.evaluation.memorisation: the longest copied run, against a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest

from cadenza.evaluation.memorisation import RunFinder, longest_common_run


def brute_force_run(sample, corpus):
    """O(n * m * L) reference: first (piece, position) in corpus order achieving the longest run."""
    best = (0, -1, -1)
    for k, piece in enumerate(corpus):
        for j in range(len(piece)):
            for i in range(len(sample)):
                n = 0
                while i + n < len(sample) and j + n < len(piece) and sample[i + n] == piece[j + n]:
                    n += 1
                if n > best[0]:
                    best = (n, k, j)
    return best


@pytest.mark.parametrize("primes", [None, (3, 5)])  # (3, 5): hashes collide constantly; verification must cope
def test_longest_common_run_matches_brute_force(primes, monkeypatch):
    if primes:
        import cadenza.evaluation.memorisation as memo

        monkeypatch.setattr(memo, "_PRIMES", primes)
    rng = np.random.default_rng(0)
    for _ in range(150):
        alphabet = int(rng.integers(1, 5))
        sample = rng.integers(0, alphabet, rng.integers(0, 25))
        corpus = [rng.integers(0, alphabet, rng.integers(0, 20)) for _ in range(rng.integers(0, 5))]
        assert tuple(longest_common_run(sample, corpus)) == brute_force_run(list(sample), [list(p) for p in corpus])


def test_runs_do_not_straddle_pieces():
    # [2, 3] ends piece 0 and [4, 5] starts piece 1: two runs of 2, never one of 4; the first is reported
    assert longest_common_run(np.array([2, 3, 4, 5]), [np.array([1, 2, 3]), np.array([4, 5, 6])]) == (2, 0, 1)
    assert longest_common_run(np.array([7, 8]), [np.array([1, 2])]) == (0, -1, -1)
    assert longest_common_run(np.array([], int), [np.array([1, 2])]) == (0, -1, -1)
    assert longest_common_run(np.array([1]), []) == (0, -1, -1)


def test_planted_copy_in_a_large_corpus():
    rng = np.random.default_rng(7)
    corpus = [rng.integers(0, 388, int(rng.integers(500, 1500))) for _ in range(300)]  # ~300k tokens
    finder = RunFinder(corpus)
    for piece, pos, length in [(123, 100, 257), (0, 0, 40), (299, len(corpus[299]) - 64, 64)]:
        sample = rng.integers(0, 388, 2000)
        sample[700:700 + length] = corpus[piece][pos:pos + length]
        # neighbours differ from the copy's, so the run cannot extend by chance
        sample[699] = (corpus[piece][pos - 1] + 1) % 388 if pos else sample[699]
        if pos + length < len(corpus[piece]):
            sample[700 + length] = (corpus[piece][pos + length] + 1) % 388
        assert finder.longest_common_run(sample) == (length, piece, pos)
