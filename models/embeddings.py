"""Token embeddings that compute in the dtype their table holds.

The train step casts the parameters to config.compute_dtype and leaves the model code dtype-free. flax's
`nnx.Embed` fixes its dtype when built (float32 by default) and casts the table back to it on every lookup
and tied projection, which would run a bfloat16 model's activations, attention and logits in float32.
"""
from flax import nnx
from flax.nnx.nn import dtypes


def _promote_without_fixed_dtype(args, /, *, dtype=None, inexact=True):
    del dtype  # the dtype fixed at construction: the parameters' dtype decides instead
    return dtypes.promote_dtype(args, inexact=inexact)


def embedding(num_embeddings: int, features: int, *, rngs: nnx.Rngs) -> nnx.Embed:
    """An `nnx.Embed` whose lookups and `attend` keep the table's (and the queries') dtype."""
    return nnx.Embed(num_embeddings, features, promote_dtype=_promote_without_fixed_dtype, rngs=rngs)
