"""Pooling heads: a sequence of encoder states [B, L, d] with its valid positions [B, L] -> one vector
per sequence, for classification. Each is chosen by name (`POOLINGS`) and works after any encoder.

  cls            the first position's state (the encoder's input starts with a [CLS] token)
  mean           the mean over the valid positions
  feed_forward   attention with no query (Raffel & Ellis 2015): e_t = v^T tanh(W h_t + b),
                 alpha = softmax(e) over the valid positions, c = sum_t alpha_t h_t
  structured     the structured self-attentive embedding (Lin et al. 2017): r hops
                 A = softmax(W2 tanh(W1 H^T)) [r, L], M = A H [r, d] flattened, and the penalty
                 ||A A^T - I||_F^2 that keeps the hops apart

Every head returns (pooled [B, output_dim], penalty [B]); the penalty is 0 but for `structured`.
"""
import jax
import jax.numpy as jnp
from flax import nnx

POOLINGS = ("cls", "mean", "feed_forward", "structured")


def _masked_softmax(scores, mask):
    """softmax over the last axis of scores [B, r, L] at the valid positions mask [B, L]. A finite floor,
    not -inf: a row with no valid position (a padding row of an evaluation batch) gets finite weights,
    which its zero weight in the loss then cancels, instead of NaN, which it would not."""
    scores = jnp.where(mask[:, None, :], scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
    return jax.nn.softmax(scores, axis=-1)


class _AttentivePooling(nnx.Module):
    """r learned queries-free score functions over the states: feed_forward (r = 1) and structured."""

    def __init__(self, d_model: int, hidden_dim: int, hops: int, *, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(d_model, hidden_dim, rngs=rngs)
        self.scores = nnx.Linear(hidden_dim, hops, use_bias=False, rngs=rngs)
        self.hops = hops
        self.output_dim = hops * d_model

    def attend(self, x, mask):
        """(pooled [B, hops * d], attention [B, hops, L])."""
        weights = _masked_softmax(jnp.swapaxes(self.scores(jnp.tanh(self.hidden(x))), 1, 2), mask)
        pooled = jnp.einsum("brl,bld->brd", weights.astype(x.dtype), x)
        return pooled.reshape(x.shape[0], -1), weights


class FeedForwardPooling(_AttentivePooling):
    def __init__(self, d_model: int, hidden_dim: int, *, rngs: nnx.Rngs):
        super().__init__(d_model, hidden_dim, 1, rngs=rngs)

    def __call__(self, x, mask):
        pooled, _ = self.attend(x, mask)
        return pooled, jnp.zeros(x.shape[0], jnp.float32)


class StructuredPooling(_AttentivePooling):
    def __init__(self, d_model: int, hidden_dim: int, *, hops: int, penalty: float, rngs: nnx.Rngs):
        super().__init__(d_model, hidden_dim, hops, rngs=rngs)
        self.penalty = penalty

    def __call__(self, x, mask):
        pooled, weights = self.attend(x, mask)
        gram = jnp.einsum("brl,bsl->brs", weights, weights)
        redundancy = jnp.sum(jnp.square(gram - jnp.eye(self.hops)), axis=(1, 2))
        return pooled, self.penalty * redundancy


class ClsPooling(nnx.Module):
    def __init__(self, d_model: int):
        self.output_dim = d_model

    def __call__(self, x, mask):
        return x[:, 0], jnp.zeros(x.shape[0], jnp.float32)


class MeanPooling(nnx.Module):
    def __init__(self, d_model: int):
        self.output_dim = d_model

    def __call__(self, x, mask):
        weights = mask.astype(x.dtype)[..., None]
        pooled = (x * weights).sum(1) / jnp.maximum(weights.sum(1), 1)
        return pooled, jnp.zeros(x.shape[0], jnp.float32)


def create(name: str, d_model: int, *, hidden_dim: int, hops: int, penalty: float, rngs: nnx.Rngs):
    """The pooling head `name` of POOLINGS over states of width d_model (hidden_dim: the score MLP's width
    of the attentive heads; hops and penalty: structured's r and penalty weight)."""
    if name == "cls":
        return ClsPooling(d_model)
    if name == "mean":
        return MeanPooling(d_model)
    if name == "feed_forward":
        return FeedForwardPooling(d_model, hidden_dim, rngs=rngs)
    if name == "structured":
        return StructuredPooling(d_model, hidden_dim, hops=hops, penalty=penalty, rngs=rngs)
    raise ValueError(f"pooling={name!r}; choose one of: {', '.join(POOLINGS)}")
