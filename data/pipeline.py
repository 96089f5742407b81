"""Token arrays for translation, and deterministic batches for every task: the batch at a step is a
function of (seed, step)."""
import functools

import numpy as np

from data.vocab import Vocabulary


def encode_pairs(pairs, source_vocab: Vocabulary, target_vocab: Vocabulary, source_len: int,
                 target_len: int) -> dict[str, np.ndarray]:
    """(source, target) strings -> padded int32 arrays.

    source = words + EOS; decoder_input = BOS + words; target = words + EOS (what each position predicts).
    """
    arrays = {name: np.full((len(pairs), length), Vocabulary.PAD, np.int32)
              for name, length in (("source", source_len), ("decoder_input", target_len),
                                   ("target", target_len))}
    for row, (source, target) in enumerate(pairs):
        source_ids = source_vocab.encode(source) + [Vocabulary.EOS]
        target_ids = target_vocab.encode(target)
        arrays["source"][row, : len(source_ids)] = source_ids
        arrays["decoder_input"][row, : len(target_ids) + 1] = [Vocabulary.BOS] + target_ids
        arrays["target"][row, : len(target_ids) + 1] = target_ids + [Vocabulary.EOS]
    return arrays


@functools.lru_cache(maxsize=4)
def _epoch_order(num_examples: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(num_examples)


def batch_indices(num_examples: int, batch_size: int, seed: int, step: int) -> np.ndarray:
    """Rows of the batch at `step`: consecutive slices of a fresh permutation per epoch."""
    positions = step * batch_size + np.arange(batch_size)
    epochs, offsets = np.divmod(positions, num_examples)
    rows = np.empty(batch_size, np.int64)
    for epoch in np.unique(epochs):  # a batch spans at most a few epochs
        in_epoch = epochs == epoch
        rows[in_epoch] = _epoch_order(num_examples, seed, int(epoch))[offsets[in_epoch]]
    return rows


def batch_at_step(arrays: dict[str, np.ndarray], batch_size: int, seed: int, step: int):
    rows = batch_indices(len(next(iter(arrays.values()))), batch_size, seed, step)
    return {name: array[rows] for name, array in arrays.items()}


def fixed_size_batches(arrays: dict[str, np.ndarray], batch_size: int):
    """Consecutive batches of exactly `batch_size` rows (one compiled shape); the last one is padded
    with all-PAD rows, which carry no weight. Yields (batch, number of real rows)."""
    num_examples = len(next(iter(arrays.values())))
    for start in range(0, num_examples, batch_size):
        batch = {name: array[start : start + batch_size] for name, array in arrays.items()}
        real = len(next(iter(batch.values())))
        if real < batch_size:
            batch = {name: np.pad(a, ((0, batch_size - real), (0, 0))) for name, a in batch.items()}
        yield batch, real
