"""MLM batches built on the device from the training rows: each epoch's order and BERT's masking, a function of
(seed, step) as data/mlm.py's host stream is, drawn with jax.random in place of numpy's generators.

The same rules as `data/mlm.py`: consecutive slices of a fresh permutation per epoch; per row min(max_predictions,
max(1, rint(mask_rate * n_real)), n_real) predicted tokens chosen uniformly without replacement, each becoming MASK, a
random non-special token or itself. Another stream of random numbers, so runs of one stream pair by seed and runs of
the two do not: the host stream stays the default (config.dataset.stream), which every committed study trained on.
"""
import jax
import jax.numpy as jnp
import numpy as np

from data.tokenizer import MASK, NUM_SPECIAL, PAD

_ROWS, _MASKING = 0, 7  # the two streams' tags under the seed's key


def batch_rows(key, num_examples: int, batch_size: int, step):
    """The rows of the batch at `step` [batch_size]: its slice of the permutation of its epoch, and of the next one
    where it runs past the end (a batch spans at most two epochs: batch_size <= num_examples)."""
    positions = step * batch_size + jnp.arange(batch_size)
    first = positions[0] // num_examples
    orders = [jax.random.permutation(jax.random.fold_in(key, first + later), num_examples) for later in (0, 1)]
    offsets = positions % num_examples
    return jnp.where(positions // num_examples == first, orders[0][offsets], orders[1][offsets])


def mask_tokens(tokens, key, *, vocab_size: int, max_predictions: int, mask_rate: float = 0.15,
                mask_token_rate: float = 0.8, random_token_rate: float = 0.1) -> dict:
    """BERT masking of int32 rows [N, L] on the device: data/mlm.py's mask_tokens, its outputs of the same shapes
    and meaning (inputs [N, L]; positions, targets and weights [N, max_predictions], unused slots 0)."""
    real = tokens != PAD
    num_rows, length = tokens.shape
    order_key, kind_key, token_key = jax.random.split(key, 3)
    count = jnp.minimum(jnp.minimum(max_predictions, jnp.maximum(1, jnp.rint(mask_rate * real.sum(1)))),
                        real.sum(1))
    # A uniform sample without replacement: the first of a random order, PAD keyed +inf so it comes last.
    order = jnp.argsort(jnp.where(real, jax.random.uniform(order_key, tokens.shape), jnp.inf), axis=1)
    used = jnp.arange(max_predictions) < count[:, None]
    positions = jnp.sort(jnp.where(used, order[:, :max_predictions], length), axis=1)  # unused slots sort last
    positions = jnp.where(used, positions, 0)
    targets = jnp.where(used, jnp.take_along_axis(tokens, positions, axis=1), 0)
    kind = jax.random.uniform(kind_key, (num_rows, max_predictions))
    random_tokens = jax.random.randint(token_key, (num_rows, max_predictions), NUM_SPECIAL, vocab_size, jnp.int32)
    replacements = jnp.where(kind < mask_token_rate, MASK,
                             jnp.where(kind < mask_token_rate + random_token_rate, random_tokens, targets))
    # Unused slots point past the row, where the scatter drops them (position 0 may be a used slot's).
    inputs = tokens.at[jnp.arange(num_rows)[:, None], jnp.where(used, positions, length)].set(replacements, mode="drop")
    return {"inputs": inputs, "positions": positions.astype(jnp.int32), "targets": targets,
            "weights": used.astype(jnp.float32)}


def batch_function(rows: np.ndarray, batch_size: int, seed: int, **masking):
    """A jitted step -> batch of the training `rows` [N, L], held on the device once: no host work per step."""
    if batch_size > len(rows):
        raise ValueError(f"a batch of {batch_size} rows is more than the {len(rows)} training rows")
    table = jnp.asarray(rows, jnp.int32)
    key = jax.random.key(seed)

    @jax.jit
    def at_step(step):
        chosen = batch_rows(jax.random.fold_in(key, _ROWS), len(rows), batch_size, step)
        masking_key = jax.random.fold_in(jax.random.fold_in(key, _MASKING), step)
        return mask_tokens(table[chosen], masking_key, **masking)

    return at_step
