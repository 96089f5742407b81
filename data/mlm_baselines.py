"""Predictors of masked tokens that use no attention, scored on the same masked positions as a model, and
the recall slice: the positions whose answer the rest of their sequence holds.

Every statistic comes from the training rows (packed, unmasked); a predictor sees what the model sees, the
masked inputs of an evaluation split (data/mlm.py's fixed_masking arrays). A masked language model below
these has not learned anything its attention could add.
"""
import numpy as np

from data.tokenizer import MASK, PAD

BASELINES = ("most_frequent", "visible_or_frequent", "unigram", "bigram")
_BATCH = 512  # positions scored at once: arrays of [_BATCH, vocab]


def _unigram_counts(train: np.ndarray, vocab_size: int) -> np.ndarray:
    """float64 [V]: how often each id occurs in the training rows, PAD not counted."""
    return np.bincount(train[train != PAD], minlength=vocab_size).astype(np.float64)


def _pair_counts(train: np.ndarray, vocab_size: int) -> np.ndarray:
    """float64 [V, V]: [a, b] counts id b right after id a within a training row, PAD pairs left out."""
    left, right = train[:, :-1].reshape(-1).astype(np.int64), train[:, 1:].reshape(-1)
    real = (left != PAD) & (right != PAD)
    counts = np.bincount(left[real] * vocab_size + right[real], minlength=vocab_size * vocab_size)
    return counts.reshape(vocab_size, vocab_size).astype(np.float64)


def neighbours(inputs: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[N, P] visible ids left and right of each predicted position; PAD where that side shows nothing (the
    row's edge, padding or a [MASK])."""
    padded = np.pad(inputs, ((0, 0), (1, 1)), constant_values=PAD)
    rows = np.arange(len(inputs))[:, None]
    left, right = padded[rows, positions], padded[rows, positions + 2]
    return np.where(left == MASK, PAD, left), np.where(right == MASK, PAD, right)


def bigram_predictions(left: np.ndarray, right: np.ndarray, unigram: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """argmax_t P(t | left) P(right | t) with add-one counts, for 1-D arrays of neighbour ids: a naive Bayes
    of the two neighbours. A side showing PAD drops out (P(t) takes the place of P(t | left) when the left
    one does); with neither side it is the most frequent id. PAD and MASK are never predicted."""
    vocab = len(unigram)
    log_after = np.log(pairs + 1.0)  # log c(a, t) + const, row a
    log_before = np.log(pairs + 1.0) - np.log(pairs.sum(1, keepdims=True) + vocab)  # log P(b | t), [t, b]
    log_unigram = np.log(unigram + 1.0)
    predictions = np.empty(len(left), np.int64)
    for start in range(0, len(left), _BATCH):
        a, b = left[start:start + _BATCH], right[start:start + _BATCH]
        has_left, has_right = (a != PAD)[:, None], (b != PAD)[:, None]
        score = np.where(has_left, log_after[a], log_unigram[None, :])
        score = score + np.where(has_right, log_before[:, b].T, 0.0)
        score[:, [PAD, MASK]] = -np.inf
        predictions[start:start + _BATCH] = np.argmax(score, axis=1)
    return predictions


def recall_slice(inputs: np.ndarray, positions: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """bool [N, P]: the predicted positions whose answer can be recalled from their own row: the target
    occurs at another position of the row, after the same (visible) left neighbour. Finding it there takes
    attention (Zoology's associative recall, in text)."""
    left, _ = neighbours(inputs, positions)
    previous = np.pad(inputs[:, :-1], ((0, 0), (1, 0)), constant_values=PAD)  # [N, L]: the id before each
    same_left = (previous[:, None, :] == left[:, :, None]) & (left[:, :, None] != PAD)  # [N, P, L]
    elsewhere = np.arange(inputs.shape[1])[None, None, :] != positions[:, :, None]
    return (same_left & elsewhere & (inputs[:, None, :] == targets[:, :, None])).any(axis=2)


def hits(train: np.ndarray, split: dict, vocab_size: int) -> dict[str, np.ndarray]:
    """Per baseline, float [N, P]: 1 where it predicts the target of `split` (fixed_masking arrays), 0 where
    not; for `unigram`, a guess drawn from the training frequencies, the chance it is right."""
    unigram = _unigram_counts(train, vocab_size)
    inputs, positions, targets = split["inputs"], split["positions"], split["targets"]
    visible = np.take_along_axis(inputs, positions, axis=1)
    most_frequent = int(np.argmax(unigram))
    left, right = neighbours(inputs, positions)
    bigram = bigram_predictions(left.reshape(-1), right.reshape(-1), unigram, _pair_counts(train, vocab_size))
    return {
        "most_frequent": (targets == most_frequent).astype(np.float32),
        "visible_or_frequent": (np.where(visible == MASK, most_frequent, visible) == targets).astype(np.float32),
        "unigram": (unigram[targets] / unigram.sum()).astype(np.float32),
        "bigram": (bigram.reshape(targets.shape) == targets).astype(np.float32),
    }
