"""Kinds with learned score functions: Luong's general (multiplicative), Bahdanau's additive, and a
Gaussian kernel (Nadaraya-Watson regression). Each is a softmax over its scores (see ScoreAttention)."""
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from attention import option_specs
from attention.registry import register
from attention.score_base import ScoreAttention, dot_scores, lecun_normal_per_head


@register("multiplicative")
class MultiplicativeAttention(ScoreAttention):
    """Luong et al. (2015) 'general' score q^T W_h k with a learned [Dk, Dk] matrix per head.

    W_h starts at I / sqrt(Dk), so the kind starts as exactly scaled dot-product attention and learns
    away from it; a random start would instead begin with scores unrelated to q.k.
    """

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, **base_options):
        super().__init__(rngs=rngs, **base_options)
        identity = jnp.eye(head_dim) * head_dim**-0.5
        self.bilinear = nnx.Param(jnp.tile(identity, (num_heads, 1, 1)))

    def scores(self, q, k):
        return dot_scores(q, jnp.einsum("bkhe,hde->bkhd", k, self.bilinear[...]))


HIDDEN_DIM = option_specs.Option("hidden_dim", 0, "width of the score MLP; 0: head_dim",
                                 rule=option_specs.at_least(0, "0: head_dim"))
# Widths of queries and keys other than head_dim, for direct construction: the multi-head wrapper leaves them unset.
QUERY_DIM, KEY_DIM = (option_specs.Option(name, None, f"width of the {role}; unset: head_dim",
                                          rule=option_specs.unset_or(option_specs.at_least(1)))
                      for name, role in (("query_dim", "queries"), ("key_dim", "keys")))


@register("additive")
class AdditiveAttention(ScoreAttention):
    """Bahdanau et al. (2015) score w_h^T tanh(W_q,h q + W_k,h k) with a hidden layer per head.

    `hidden_dim` (0: head_dim) is the width of that layer. `query_dim` and `key_dim` (default
    head_dim) let queries and keys differ in size, e.g. an RNN decoder state attending to encoder
    states; the multi-head wrapper leaves them at head_dim. The tanh sits between query and key, so
    every (query, key) pair has its own hidden vector: memory O(B H Lq Lk hidden) is inherent here.
    """

    OWN_OPTIONS = (HIDDEN_DIM, QUERY_DIM, KEY_DIM)

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, hidden_dim: int = 0,
                 query_dim: int | None = None, key_dim: int | None = None, **base_options):
        super().__init__(rngs=rngs, **base_options)
        hidden_dim = hidden_dim or head_dim
        self.query_projection = lecun_normal_per_head(rngs, (num_heads, query_dim or head_dim, hidden_dim))
        self.key_projection = lecun_normal_per_head(rngs, (num_heads, key_dim or head_dim, hidden_dim))
        self.score_vector = lecun_normal_per_head(rngs, (num_heads, hidden_dim))

    def scores(self, q, k):
        hidden_q = jnp.einsum("bqhd,hde->bhqe", q, self.query_projection[...])
        hidden_k = jnp.einsum("bkhd,hde->bhke", k, self.key_projection[...])
        hidden = jnp.tanh(hidden_q[:, :, :, None] + hidden_k[:, :, None])
        return jnp.einsum("bhqke,he->bhqk", hidden, self.score_vector[...], preferred_element_type=jnp.float32)


@register("gaussian")
class GaussianAttention(ScoreAttention):
    """Nadaraya-Watson kernel regression: score -(w_h / 2) |q - k|^2, i.e. weights proportional to a
    Gaussian kernel of precision w_h > 0 (learned per head as softplus of a parameter).

    w_h starts at 1 / sqrt(Dk), the scale of scaled dot-product attention: the kind then equals it up
    to the |k|^2 term (the |q|^2 term is constant along a row, so the softmax ignores it).
    """

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, **base_options):
        super().__init__(rngs=rngs, **base_options)
        # softplus^-1(1 / sqrt(Dk)), so that the precision softplus(raw_precision) starts at 1 / sqrt(Dk).
        raw_initial = np.log(np.expm1(head_dim**-0.5))
        self.raw_precision = nnx.Param(jnp.full((num_heads,), raw_initial, jnp.float32))

    def scores(self, q, k):
        # |q - k|^2 expanded, so no [B, Lq, Lk, H, D] difference tensor is formed.
        squared_q = jnp.einsum("bqhd,bqhd->bhq", q, q, preferred_element_type=jnp.float32)
        squared_k = jnp.einsum("bkhd,bkhd->bhk", k, k, preferred_element_type=jnp.float32)
        squared_distance = squared_q[..., None] + squared_k[:, :, None] - 2 * dot_scores(q, k)
        precision = jax.nn.softplus(self.raw_precision[...])
        return -0.5 * precision[:, None, None] * squared_distance
