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

from attention import feature_maps, option_specs

# A decay's b at the start, sigmoid(b) every gate's value whatever the key: 3 gives 0.95, near no decay (gated_linear's
# `linear`, gated_delta's `delta`); 0.95 a position keeps 0.95^64 = 4% of a key 64 positions back.
DECAY_BIAS = option_specs.Option(
    "decay_bias", 3.0, "b of the decay sigmoid(k . w + b) at the start (w = 0): every gate starts at sigmoid(b), "
    "0.95 at 3, 0.993 at 5", rule=option_specs.positive("sigmoid(b) <= 0.5 would halve the state at every position"))


class DecayParam(nnx.Param):
    """A parameter of a decay (its gate's w and b): the optimizer keeps it out of weight decay unless
    config.weight_decay_on_decays (training/steps.py), as Mamba2 and Gated DeltaNet keep A_log and dt_bias out of
    it: AdamW's decay would pull b toward 0, the gate toward sigmoid(0) = 0.5, a state halved at every position."""


def parameters(num_heads: int, head_dim: int, bias: float, features: int | None = None, decay: bool = True):
    """(w [H, d] at 0, b [H] at `bias`), or with `features` = m one scalar per feature, (w [H, m, d], b [H, m]):
    every position starts at sigmoid(bias), whatever its key. A decay's are DecayParams; a write strength's (the
    delta rule's beta, `decay` False) ordinary Params."""
    per_head = (num_heads,) if features is None else (num_heads, features)
    kind = DecayParam if decay else nnx.Param
    return kind(jnp.zeros(per_head + (head_dim,))), kind(jnp.full(per_head, bias, jnp.float32))


def _logit(k, weight, bias):
    """k [B, L, H, d] -> float32 [B, L, H], or [B, L, H, m] for a weight [H, m, d]."""
    return jnp.einsum("blhd,h...d->blh...", feature_maps.in_float32(k), weight[...]) + bias[...]


def _masked(x, key_mask, padded_value: float):
    if key_mask is None:
        return x
    return jnp.where(key_mask.reshape(key_mask.shape + (1,) * (x.ndim - 2)), x, padded_value)


def log_gate(k, weight, bias, key_mask):
    """log g_t = log sigmoid(k_t . w_h + b_h) <= 0 [B, L, H] (per feature: [B, L, H, m]) in float32, 0 at padded
    keys (key_mask [B, L] False)."""
    return _masked(jax.nn.log_sigmoid(_logit(k, weight, bias)), key_mask, 0.0)


def strength(k, weight, bias, key_mask):
    """beta_t = sigmoid(k_t . w_h + b_h) in (0, 1) [B, L, H] in float32, 0 at padded keys."""
    return _masked(jax.nn.sigmoid(_logit(k, weight, bias)), key_mask, 0.0)
