"""data/mlm_baselines.py against brute-force loops over positions and vocabulary, on random token rows."""
import math

import numpy as np
import pytest

from data import mlm, mlm_baselines
from data.tokenizer import MASK, PAD

VOCAB = 12


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(0)
    train = rng.integers(4, VOCAB, (40, 16)).astype(np.int32)
    train[-1, 10:] = PAD
    test = rng.integers(4, 8, (10, 16)).astype(np.int32)  # few ids: repeated pairs, a large recall slice
    test[-1, 12:] = PAD
    return train, mlm.fixed_masking(test, vocab_size=VOCAB, max_predictions=5, mask_rate=0.3)


def _counts(train):
    unigram, pairs = np.zeros(VOCAB), np.zeros((VOCAB, VOCAB))
    for row in train:
        for i, token in enumerate(row):
            if token != PAD:
                unigram[token] += 1
                if i + 1 < len(row) and row[i + 1] != PAD:
                    pairs[token, row[i + 1]] += 1
    return unigram, pairs


def _visible(row, position):
    return PAD if position < 0 or position >= len(row) or row[position] == MASK else row[position]


def _bigram_guess(left, right, unigram, pairs):
    def score(t):
        value = math.log(pairs[left, t] + 1) if left != PAD else math.log(unigram[t] + 1)
        if right != PAD:
            value += math.log(pairs[t, right] + 1) - math.log(pairs[t].sum() + VOCAB)
        return value
    candidates = [t for t in range(VOCAB) if t not in (PAD, MASK)]
    return max(candidates, key=lambda t: (score(t), -t))  # ties: the lowest id, as argmax


def test_the_baselines_match_loops_over_positions_and_vocabulary(rows):
    train, split = rows
    unigram, pairs = _counts(train)
    most_frequent = int(np.argmax(unigram))
    hits = mlm_baselines.hits(train, split, VOCAB)
    for n, row in enumerate(split["inputs"]):
        for slot, (position, target) in enumerate(zip(split["positions"][n], split["targets"][n])):
            left, right = _visible(row, position - 1), _visible(row, position + 1)
            shown = row[position]
            expected = {"most_frequent": float(target == most_frequent),
                        "visible_or_frequent": float((most_frequent if shown == MASK else shown) == target),
                        "unigram": unigram[target] / unigram.sum(),
                        "bigram": float(_bigram_guess(left, right, unigram, pairs) == target)}
            assert {name: hit[n, slot] for name, hit in hits.items()} == pytest.approx(expected), (n, slot)


def test_the_recall_slice_is_where_the_target_follows_the_same_left_neighbour_elsewhere(rows):
    _, split = rows
    inputs, positions, targets = split["inputs"], split["positions"], split["targets"]
    expected = np.zeros(positions.shape, bool)
    for n, row in enumerate(inputs):
        for slot, position in enumerate(positions[n]):
            left = _visible(row, position - 1)
            expected[n, slot] = left != PAD and any(
                j != position and row[j] == targets[n, slot] and row[j - 1] == left for j in range(1, len(row)))
    found = mlm_baselines.recall_slice(inputs, positions, targets)
    assert (found == expected).all() and 0 < found.sum() < found.size


def test_the_bigram_uses_both_neighbours():
    train = np.array([[4, 5, 6, 4, 7, 8] * 4], np.int32)  # 5 follows 4 and precedes 6; 7 follows 4 and precedes 8
    unigram, pairs = mlm_baselines._unigram_counts(train, VOCAB), mlm_baselines._pair_counts(train, VOCAB)
    guesses = mlm_baselines.bigram_predictions(np.array([4, 4, PAD]), np.array([6, 8, 8]), unigram, pairs)
    assert guesses.tolist() == [5, 7, 7]
