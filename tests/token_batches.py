"""Token batches the model tests share."""
import jax.numpy as jnp
import numpy as np

from data.vocab import Vocabulary


def padded_sources(seed: int, batch: int, length: int, vocab_size: int):
    """[batch, length] int32 sources of random lengths 2..length: ordinary tokens, EOS, then padding."""
    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocab_size, (batch, length))
    for row, used in enumerate(rng.integers(2, length + 1, batch)):
        source[row, used - 1] = Vocabulary.EOS
        source[row, used:] = Vocabulary.PAD
    return jnp.asarray(source, jnp.int32)
