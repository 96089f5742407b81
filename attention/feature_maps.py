"""Feature maps phi for kernelised (linear) attention: plain functions of the last axis."""
import jax.numpy as jnp


def elu_plus_one(x):
    """elu(x) + 1, positive everywhere.

    The negative branch is exp(x) itself, not (exp(x) - 1) + 1: in bfloat16 exp(x) - 1 rounds to -1 for
    x below about -5.5 and the sum cancels to exactly 0, which would zero the normaliser.
    """
    return jnp.where(x > 0, x + 1, jnp.exp(jnp.minimum(x, 0)))
