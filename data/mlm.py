"""Masked language modelling data on the host: packed token rows and BERT masking, vectorised in numpy.

The batch at a step is a function of (seed, step), so a resumed run sees the batches it would have seen.
"""

import math

import numpy as np

from data.pipeline import batch_indices
from data.tokenizer import EOS, MASK, NUM_SPECIAL, PAD


def pack(token_lists: list[list[int]], seq_len: int) -> np.ndarray:
    """int32 [N, seq_len]: the documents, each followed by EOS, concatenated and cut into consecutive rows;
    only the last row is padded."""
    eos = np.array([EOS], np.int32)
    pieces = [piece for tokens in token_lists for piece in (np.asarray(tokens, np.int32), eos)]
    stream = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
    rows = np.full((-(-len(stream) // seq_len), seq_len), PAD, np.int32)
    rows.reshape(-1)[: len(stream)] = stream
    return rows


def default_max_predictions(seq_len: int, mask_rate: float = 0.15) -> int:
    """Room for every prediction of a full row: ceil(0.15 * 128) = 20, as in BERT."""
    return math.ceil(mask_rate * seq_len)


def mask_tokens(tokens: np.ndarray, rng: np.random.Generator, *, vocab_size: int, max_predictions: int,
                mask_rate: float = 0.15, mask_token_rate: float = 0.8,
                random_token_rate: float = 0.1) -> dict[str, np.ndarray]:
    """BERT masking of int [N, L] rows.

    Each row predicts min(max_predictions, max(1, round(mask_rate * n_real))) of its n_real non-PAD tokens
    (EOS included), chosen uniformly without replacement; each chosen token becomes MASK, a random
    non-special token, or stays, with probabilities mask_token_rate, random_token_rate and the rest.
    Returns inputs [N, L], and positions, targets and weights [N, max_predictions], whose unused slots are 0.
    """
    tokens = np.asarray(tokens, np.int32)
    num_rows = len(tokens)
    positions, used = _choose_positions(tokens != PAD, rng, max_predictions, mask_rate)
    targets = np.where(used, tokens[np.arange(num_rows)[:, None], positions], 0)
    # Drawn for every slot, used or not, so the stream of random numbers does not depend on the data.
    kind = rng.random((num_rows, max_predictions))
    random_tokens = rng.integers(NUM_SPECIAL, vocab_size, (num_rows, max_predictions), dtype=np.int32)
    replacements = np.where(kind < mask_token_rate, MASK,
                            np.where(kind < mask_token_rate + random_token_rate, random_tokens, targets))
    inputs = tokens.copy()
    row, slot = np.nonzero(used)
    inputs[row, positions[row, slot]] = replacements[row, slot]
    return {"inputs": inputs, "positions": positions, "targets": targets, "weights": used.astype(np.float32)}


def _choose_positions(real: np.ndarray, rng: np.random.Generator, max_predictions: int, mask_rate: float):
    """Positions [N, max_predictions] of the predicted tokens, ascending, and which slots are used.

    A uniform sample without replacement per row is the first tokens of a random order: sort random
    keys, PAD keyed +inf so it comes last.
    """
    num_real = real.sum(axis=1)
    # rint rounds half to even, as Python's round; the last minimum gives an all-PAD row no prediction.
    count = np.minimum(np.minimum(max_predictions, np.maximum(1, np.rint(mask_rate * num_real))), num_real)
    keys = np.where(real, rng.random(real.shape), np.inf)
    order = np.argsort(keys, axis=1)[:, :max_predictions]
    order = np.pad(order, ((0, 0), (0, max_predictions - order.shape[1])))  # rows shorter than the slots
    used = np.arange(max_predictions) < count[:, None]
    length = real.shape[1]
    positions = np.sort(np.where(used, order, length), axis=1)  # unused slots (= length) sort last
    return np.where(used, positions, 0).astype(np.int32), used


def batch_at_step(tokens: np.ndarray, batch_size: int, seed: int, step: int, **masking) -> dict[str, np.ndarray]:
    """The masked batch at `step`: rows and masks both a function of (seed, step)."""
    rows = batch_indices(len(tokens), batch_size, seed, step)
    # The trailing 7 keeps this stream apart from the [seed, epoch] streams that order the rows.
    return mask_tokens(tokens[rows], np.random.default_rng([seed, step, 7]), **masking)


def fixed_masking(tokens: np.ndarray, **masking) -> dict[str, np.ndarray]:
    """All rows masked once with a fixed generator: evaluation sets are masked the same way for every run
    and seed, so runs compare on the same positions."""
    return mask_tokens(tokens, np.random.default_rng(12345), **masking)
