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


def batch_rows(orders, num_examples: int, batch_size: int, step):
    """The rows of the batch at `step` [batch_size]: its slice of the order of its epoch, and of the next epoch's
    where it runs past the end (orders [2, N]: its epoch's and the next one's; batch_size <= num_examples)."""
    positions = step * batch_size + jnp.arange(batch_size)
    offsets = positions % num_examples
    spills = positions // num_examples > (step * batch_size) // num_examples
    return jnp.where(spills, orders[1][offsets], orders[0][offsets])


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


class DeviceBatches:
    """step -> the training batch of that step, built on the device from the rows held there: each epoch's order
    computed once (a permutation of every row), then per step a slice of it and the masking, one jitted program
    placed by `placement` (None: the default device). No host work per step but the dispatch."""

    def __init__(self, rows: np.ndarray, batch_size: int, seed: int, placement=None, **masking):
        if batch_size > len(rows):
            raise ValueError(f"a batch of {batch_size} rows is more than the {len(rows)} training rows")
        self.num_examples, self.batch_size = len(rows), batch_size
        key = jax.random.key(seed)
        table = jnp.asarray(rows, jnp.int32)
        rows_key, masking_key = jax.random.fold_in(key, _ROWS), jax.random.fold_in(key, _MASKING)
        self._order = jax.jit(lambda epoch: jax.random.permutation(jax.random.fold_in(rows_key, epoch),
                                                                   self.num_examples))

        def batch(this_epoch, next_epoch, step):
            chosen = batch_rows((this_epoch, next_epoch), self.num_examples, batch_size, step)
            return mask_tokens(table[chosen], jax.random.fold_in(masking_key, step), **masking)

        self._batch = jax.jit(batch, out_shardings=placement)
        self._orders = {}  # epoch -> its order: the last few

    def _epoch_order(self, epoch: int):
        if epoch not in self._orders:
            self._orders = {kept: order for kept, order in self._orders.items() if kept >= epoch - 1}
            self._orders[epoch] = self._order(epoch)
        return self._orders[epoch]

    def __call__(self, step: int):
        epoch = step * self.batch_size // self.num_examples
        spills = ((step + 1) * self.batch_size - 1) // self.num_examples > epoch
        this_epoch = self._epoch_order(epoch)
        return self._batch(this_epoch, self._epoch_order(epoch + 1) if spills else this_epoch, step)
