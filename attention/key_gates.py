"""Scalars per position and head read from the key: sigmoid(k_t . w_h + b_h), w and b learned per head. They are
gated_linear's and gated_delta's decay g_t and the delta rule's write strength beta_t.

A kind sees q, k and v only, not the layer's input x_t, so they are read from the key: it is the projection of
x_t that enters the state, and both say how the state takes it in (how much of the older state a decay keeps,
how strongly a write replaces what the key held). A query-side scalar would not exist on a cross-attention's
keys' axis, along which the state is built. A padded key is neutral: its gate is 1 (it decays nothing) and its
strength 0 (it writes and erases nothing), so padding is as if it were absent.
"""
import jax
import jax.numpy as jnp
from flax import nnx

from attention import feature_maps

# A decay's b at the start: sigmoid(3) = 0.95, near no decay (gated_linear's `linear`, gated_delta's `delta`).
DECAY_BIAS = 3.0

def parameters(num_heads: int, head_dim: int, bias: float):
    """(w [H, d] at 0, b [H] at `bias`): every position starts at sigmoid(bias), whatever its key."""
    return nnx.Param(jnp.zeros((num_heads, head_dim))), nnx.Param(jnp.full((num_heads,), float(bias)))


def _logit(k, weight, bias):
    """k [B, L, H, d] -> float32 [B, L, H]."""
    return jnp.einsum("blhd,hd->blh", feature_maps.in_float32(k), weight[...]) + bias[...]


def log_gate(k, weight, bias, key_mask):
    """log g_t = log sigmoid(k_t . w_h + b_h) <= 0 [B, L, H] in float32, 0 at padded keys (key_mask [B, L] False)."""
    log_g = jax.nn.log_sigmoid(_logit(k, weight, bias))
    return log_g if key_mask is None else log_g * key_mask[:, :, None]


def strength(k, weight, bias, key_mask):
    """beta_t = sigmoid(k_t . w_h + b_h) in (0, 1) [B, L, H] in float32, 0 at padded keys."""
    beta = jax.nn.sigmoid(_logit(k, weight, bias))
    return beta if key_mask is None else beta * key_mask[:, :, None]
