"""The dot-product kinds: Luong's unscaled `dot` and scaled dot-product attention (`softmax`, also
`scaled_dot`), a softmax over q.k (see ScoreAttention), run through XLA's or cuDNN's fused attention where
they can (attention/fused.py)."""
import jax
import jax.numpy as jnp
from flax import nnx

from attention import fused, option_specs
from attention.registry import register
from attention.score_base import ScoreAttention, dot_scores

SOFTMAX_IMPLEMENTATION = option_specs.Option(
    "softmax_implementation", "auto",
    "who computes the softmax: `auto` (cuDNN flash attention where the GPU, dtype and mask allow it, else XLA), "
    "`xla` or `cudnn` (an error where it cannot run), see attention/fused.py",
    choices=fused.IMPLEMENTATIONS)


def _zero_rows_without_keys(out, allowed):
    """out [B, Lq, H, Dv] with zeros for the queries that may attend to no key."""
    batch, query_length, heads, _ = out.shape
    has_key = jnp.broadcast_to(allowed, (batch, heads, query_length, allowed.shape[-1])).any(-1)
    return jnp.where(has_key.transpose(0, 2, 1)[..., None], out, 0.0)


@register("dot")
class DotAttention(ScoreAttention):
    """Luong et al. (2015) 'dot' score q.k, unscaled: its spread grows with head_dim, so the softmax
    saturates sooner in wide heads than the scaled kind's.

    Without dropout, one call of `jax.nn.dot_product_attention` computes it: `softmax_implementation` (see
    attention/fused.py) "xla" is XLA's softmax, "cudnn" cuDNN's flash kernel, "auto" the latter where
    the hardware, the dtype and the mask allow it."""

    OWN_OPTIONS = (SOFTMAX_IMPLEMENTATION,)
    scaled = False

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, softmax_implementation: str = "auto",
                 **base_options):
        super().__init__(rngs=rngs, **base_options)
        self.scale = head_dim**-0.5 if self.scaled else 1.0
        self.implementation = softmax_implementation

    def scores(self, q, k):
        return dot_scores(q, k, self.scale)

    def __call__(self, q, k, v, mask=None, *, causal=False):
        dropout_active = self.dropout.rate > 0 and not self.dropout.deterministic
        if dropout_active or q.shape[-1] != v.shape[-1]:
            return super().__call__(q, k, v, mask, causal=causal)
        # A kind that narrows the causal keys further (local's window) must keep its own mask: neither
        # is_causal nor key lengths would express the narrowing.
        narrowed = self.narrows_keys(k.shape[1])
        if fused.select(self.implementation, q, v, mask, narrowed) == "cudnn":
            return fused.attention_over_lengths(q, k, v, fused.key_lengths(mask, q.shape[0]), scale=self.scale,
                                                causal=causal, implementation="cudnn")
        if mask is None and causal and not narrowed and q.shape[1] == k.shape[1]:
            # Every causal row has a key (its own position): no mask to build or read.
            return jax.nn.dot_product_attention(q, k, v, scale=self.scale, is_causal=True)
        allowed = self.allowed(q, k, mask, causal)
        out = jax.nn.dot_product_attention(q, k, v, mask=allowed, scale=self.scale)
        # dot_product_attention spreads a row with no allowed key uniformly over all keys; here such a
        # row attends to nothing, as in `weights`.
        return out if allowed is None else _zero_rows_without_keys(out, allowed)


@register("scaled_dot")
@register("softmax")
class SoftmaxAttention(DotAttention):
    """Scaled dot-product attention (Vaswani et al. 2017): q.k / sqrt(head_dim) keeps the scores'
    spread near 1 at any head width."""

    scaled = True


LOGIT_CAP = option_specs.Option(
    "logit_cap", 1.0, "c of softmax_capped's logits c tanh(s / c): every row's entropy is at least that of keys at "
    "+-c, 0.90 of the maximum at L = 128 for c = 1", rule=option_specs.positive("it bounds the logits to (-c, c)"))


@register("softmax_capped")
class CappedSoftmaxAttention(ScoreAttention):
    """Scaled dot-product softmax over soft-capped logits c tanh(q.k / (sqrt(d) c)) (Gemma 2's logit cap): the
    full-rank flat control. Logits inside (-c, c) bound how far a row can stray from uniform at any q and k: a
    row's weights differ by at most a factor e^(2c), so at L = 128 and c = 1 no row falls below 0.90 of the
    maximum entropy (k keys at +c and the rest at -c, the flattest limit, is lowest at k = 26), about the 0.95
    elu + 1's trained rows sit at, while the matrix keeps the full numerical rank of softmax's. Near 0 the cap is
    the identity (tanh(x) ~ x), so small scores are softmax's own.

    A softmax over scores, so it decodes and attends causally as softmax does, with its cache of every key."""

    OWN_OPTIONS = (LOGIT_CAP,)

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, logit_cap: float = 1.0, **base_options):
        super().__init__(rngs=rngs, **base_options)
        self.scale = head_dim**-0.5
        self.logit_cap = logit_cap

    def scores(self, q, k):
        return self.logit_cap * jnp.tanh(dot_scores(q, k, self.scale) / self.logit_cap)
