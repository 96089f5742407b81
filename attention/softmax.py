"""Scaled dot-product softmax attention (Vaswani et al. 2017)."""
import jax
import jax.numpy as jnp
from flax import nnx

from attention import masks
from attention.registry import register


@register("softmax")
class SoftmaxAttention(nnx.Module):
    feature_dim = None  # exp(q.k) has no finite feature map: the matrix is not rank-bounded

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, dropout_rate: float = 0.0):
        self.scale = head_dim**-0.5
        self.dropout = nnx.Dropout(dropout_rate, rngs=rngs)

    def weights(self, q, k, mask=None, *, causal=False):
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * self.scale
        mask = masks.combine(mask, causal, q.shape[1], k.shape[1])
        if mask is None:
            return jax.nn.softmax(scores, axis=-1)
        # A finite fill keeps a row with no allowed key (and its gradient) free of NaN; that row is
        # then all zeros: it attends to nothing.
        weights = jax.nn.softmax(jnp.where(mask, scores, jnp.finfo(jnp.float32).min), axis=-1)
        return jnp.where(mask, weights, 0.0)

    def __call__(self, q, k, v, mask=None, *, causal=False):
        dropout_active = self.dropout.rate > 0 and not self.dropout.deterministic
        if dropout_active or q.shape[-1] != v.shape[-1]:
            weights = self.dropout(self.weights(q, k, mask, causal=causal)).astype(v.dtype)
            return jnp.einsum("bhqk,bkhd->bqhd", weights, v)
        return jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=causal, scale=self.scale)
