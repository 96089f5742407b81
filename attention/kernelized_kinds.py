"""Linear (kernelised) attention kinds: each a feature map phi with exp(q.k) replaced by phi(q).phi(k)."""
import math

import jax
import jax.numpy as jnp
from flax import nnx

from attention import aux_losses, feature_maps, masks, option_specs
from attention.ops import kernel_sums
from attention.kernelized_base import KernelizedAttention
from attention.registry import register
from attention.score_base import dot_scores, masked_softmax


def _scaled_in_float32(x, head_dim: int):
    """x / head_dim^(1/4), in float32 for features computed in it: in bfloat16 the product would round
    x a second time."""
    return feature_maps.in_float32(x) * head_dim**-0.25


@register("linear")
class LinearAttention(KernelizedAttention):
    """phi = elu + 1 (Katharopoulos et al. 2020)."""

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, **base_options):
        super().__init__(**base_options)
        self.feature_dim = head_dim

    def features(self, x):
        return feature_maps.elu_plus_one(x)


@register("relu")
class ReluAttention(KernelizedAttention):
    """phi = relu + relu_eps."""

    OWN_OPTIONS = (option_specs.Option("relu_eps", 1e-3, "added to the features, so that the normaliser stays positive",
                                       rule=option_specs.non_negative()),)

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, relu_eps: float = 1e-3, **base_options):
        super().__init__(**base_options)
        self.feature_dim = head_dim
        self.relu_eps = relu_eps

    def features(self, x):
        return feature_maps.relu_features(x, self.relu_eps)


class RandomState(nnx.Variable):
    """Random draws that belong to the model state (checkpointed, redrawn on schedule), never trained."""


@register("performer")
class PerformerAttention(KernelizedAttention):
    """FAVOR+ (Choromanski et al. 2021): positive random features, phi(q).phi(k) an unbiased estimate
    of exp(q.k / sqrt(d)) from `num_features` projections per head.

    Stabilisers keep every exponent <= 0: each query or key row is divided by exp of its largest
    exponent, and the base brings the keys to one scale: the largest stabiliser of the allowed keys,
    or causally the running max over the keys up to each query, as a decoding step keeps it, so no
    later key enters. eps is rescaled by the same factors, so the output is the unstabilised
    num / (den + eps). What a shared stabiliser cannot avoid: keys far below the largest one lose
    relative precision, as in any softmax computed with a global max.

    The projection is drawn at construction; with `redraw_every_steps` = N > 0 the train step redraws it
    at steps 0, N, 2N, ... (`on_train_step`), and evaluation uses whichever draw is current.
    """

    OWN_OPTIONS = (
        option_specs.Option("num_features", 64, "random features m (the rank bound)", rule=option_specs.at_least(1)),
        option_specs.Option("orthogonal", True, "orthogonal random blocks, else iid rows", choices=(True, False)),
        option_specs.Option("redraw_every_steps", 0, "redraw the features every N training steps; 0: fixed",
                            rule=option_specs.at_least(0, "0: never redraw")))

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, num_features: int = 64,
                 orthogonal: bool = True, redraw_every_steps: int = 0, **base_options):
        super().__init__(**base_options)
        self.feature_dim = num_features
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.orthogonal = orthogonal
        self.redraw_every_steps = redraw_every_steps
        key = rngs.params()
        self.base_key = RandomState(key)
        self.projection = RandomState(self._draw(key))

    def _draw(self, key):
        """[H, m, d]: an independent projection per head."""
        draw_one = lambda head_key: feature_maps.random_projection(
            head_key, self.feature_dim, self.head_dim, self.orthogonal)
        return jax.vmap(draw_one)(jax.random.split(key, self.num_heads))

    def on_train_step(self, step):
        """Called by the train step, inside jit: `step` is traced, hence lax.cond."""
        if self.redraw_every_steps:
            period = self.redraw_every_steps
            self.projection[...] = jax.lax.cond(
                step % period == 0,
                lambda: self._draw(jax.random.fold_in(self.base_key[...], step // period)),
                lambda: self.projection[...])

    def _exponent(self, x):
        scaled = _scaled_in_float32(x, self.head_dim)
        return feature_maps.random_feature_exponent(scaled, self.projection[...])

    def row_features(self, x, positions, max_len: int):
        exponent = self._exponent(x)
        stabiliser = exponent.max(-1, keepdims=True)
        return feature_maps.features_of_exponent(exponent, stabiliser).astype(x.dtype), stabiliser


class _ExactPolynomialAttention(KernelizedAttention):
    """exp(q.k / sqrt(d)) replaced by a polynomial of it of even degree (odd ones are negative somewhere, and
    the normaliser could cross 0), exactly, through symmetric monomial features of x = q d^-1/4."""

    feature_map = None  # (x, degree) -> features
    feature_count = None  # (head_dim, degree) -> the feature dimension

    def _set_degree(self, degree: int, head_dim: int):
        self.degree, self.head_dim = degree, head_dim
        self.feature_dim = self.feature_count(head_dim, degree)

    def features(self, x):
        return self.feature_map(_scaled_in_float32(x, self.head_dim), self.degree)

    def kernel(self, s):
        """phi(q).phi(k) as the polynomial of s = q.k / sqrt(d) it equals."""
        raise NotImplementedError

    def __call__(self, q, k, v, mask=None, *, causal=False):
        """With fewer keys than features (kernelized_implementation "auto", the default), the Lq x Lk matrix of
        kernel(q.k / sqrt(d)) is the cheaper way to the same product phi(Q) phi(K)^T: O(Lq Lk d) against
        O((Lq + Lk) m Dv) with m = C(d + p, p), and no [B, L, H, m] features to keep for the backward."""
        if self.implementation != "auto" or k.shape[1] >= self.feature_dim:
            return super().__call__(q, k, v, mask, causal=causal)
        s = jnp.einsum("bqhd,bkhd->bhqk", _scaled_in_float32(q, self.head_dim), _scaled_in_float32(k, self.head_dim))
        scores = self.kernel(s)
        key_mask = masks.key_padding(mask, k.shape[0], k.shape[1])
        if key_mask is not None:
            scores = scores * key_mask[:, None, None, :].astype(scores.dtype)
        if causal:
            scores = jnp.where(masks.causal_mask(q.shape[1]), scores, 0.0)
        return kernel_sums.explicit_attention(scores, v, self._eps(0.0))


TAYLOR_ORDER = option_specs.Option(
    "taylor_order", 2, "even order p of the truncated exp series", rule=option_specs.even_degree(
        "a Taylor series of exp cut at an odd order is negative somewhere (1 + x < 0 for x < -1)"))


@register("taylor")
class TaylorAttention(_ExactPolynomialAttention):
    """exp(q.k / sqrt(d)) replaced by its Taylor series up to `taylor_order`, exactly, with
    C(d + p, p) features: the rank bound grows with the order as the series approaches softmax."""

    OWN_OPTIONS = (TAYLOR_ORDER,)
    feature_map = staticmethod(feature_maps.taylor_features)
    feature_count = staticmethod(feature_maps.taylor_feature_dim)

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, taylor_order: int = 2, **base_options):
        super().__init__(**base_options)
        self._set_degree(taylor_order, head_dim)

    def kernel(self, s):
        return sum(s**order / math.factorial(order) for order in range(self.degree + 1))


@register("exp_limit")
class ExpLimitAttention(_ExactPolynomialAttention):
    """exp(q.k / sqrt(d)) replaced by (1 + q.k / (n sqrt(d)))^n, exactly, with C(d + n, n) features.

    The feature dim C(d + n, n) for head_dim d and exp_limit_n n:

        d \\ n      2        4            6
        16       153     4,845       74,613
        32       561    58,905    2,760,681
        64     2,145   814,385  131,115,985

    The linear form costs O(L m Dv) time and O(L m) memory per head, so it beats softmax's O(L^2 Dv)
    only while m < L: n = 2 (153 to 2,145 features) suits sequences of hundreds to thousands of
    positions; n = 4 (5k to 800k) exceeds any usual length, and n = 6 is out of reach.
    """

    OWN_OPTIONS = (option_specs.Option(
        "exp_limit_n", 2, "even n of (1 + q.k / (n sqrt d))^n",
        rule=option_specs.even_degree("(1 + x/n)^n is negative for x < -n when n is odd")),)
    feature_map = staticmethod(feature_maps.exp_limit_features)
    feature_count = staticmethod(feature_maps.exp_limit_feature_dim)

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, exp_limit_n: int = 2, **base_options):
        super().__init__(**base_options)
        self._set_degree(exp_limit_n, head_dim)

    def kernel(self, s):
        return (1 + s / self.degree) ** self.degree


@register("cosformer")
class CosformerAttention(KernelizedAttention):
    """cosFormer (Qin et al. 2022): relu(q).relu(k) cos(pi (i - j) / (2M)), M = max(Lq, Lk), which
    favours nearby positions and stays linear through cos(a - b) = cos a cos b + sin a sin b."""

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, **base_options):
        super().__init__(**base_options)
        self.feature_dim = 2 * head_dim

    # Features need M, the longer side's length, and each row's position: more than its vectors.
    def row_features(self, x, positions, max_len: int):
        return feature_maps.cosformer_features(x, positions, max_len), 0.0


def attention_matching_loss(teacher, student):
    """KL(teacher || student) of each row of two [B, H, Lq, Lk] attention matrices, averaged over the rows
    where the teacher attends to some key, the heads and the batch: the paper's soft cross-entropy less the
    teacher's entropy, which carries no gradient to the student, so that a perfect match scores 0."""
    # The floor keeps log finite where a student weight underflows; such a key's term is then large, not inf.
    log_student = jnp.log(jnp.maximum(student, jnp.finfo(jnp.float32).tiny))
    row_divergence = (jax.scipy.special.xlogy(teacher, teacher) - teacher * log_student).sum(-1)
    rows = teacher.sum(-1) > 0
    return jnp.where(rows, row_divergence, 0.0).sum() / jnp.maximum(rows.sum(), 1)


@register("hedgehog")
class HedgehogAttention(KernelizedAttention):
    """Hedgehog (Zhang et al. 2024): phi = softmax(s [xW, -xW]) with a learned W per head, initialised to
    the identity, so that training can make linear attention as spiky as softmax; s is `hedgehog_logit_scale`.

    With `distill_weight` > 0 the kind is also trained to imitate softmax, as the paper fits its map: each
    training call adds distill_weight times attention_matching_loss(softmax(q.k / sqrt(d)) under the same
    mask, held constant, its own weights) to the training loss (attention/aux_losses.py), jointly with the
    task from the first step (the paper's separate first stage, fitting the map alone, is not built). That
    loss forms the Lq x Lk matrices, O(L^2) like softmax, in training only."""

    OWN_OPTIONS = (
        option_specs.Option("distill_weight", 0.0, "weight of the attention-matching loss added to the training "
                            "loss; 0: undistilled", rule=option_specs.non_negative("0: no distillation")),
        option_specs.Option("hedgehog_logit_scale", 1.0, "factor of the feature map's softmax logits (the paper's "
                            "code: 2)", rule=option_specs.positive("it multiplies the feature map's logits")))

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, distill_weight: float = 0.0,
                 hedgehog_logit_scale: float = 1.0, **base_options):
        super().__init__(**base_options)
        self.feature_dim = 2 * head_dim
        self.weight = nnx.Param(jnp.tile(jnp.eye(head_dim), (num_heads, 1, 1)))
        self.distill_weight = distill_weight
        self.logit_scale = hedgehog_logit_scale
        # nnx's train() sets it False and eval() True, as on nnx.Dropout: the distillation loss is computed in
        # training only. True until train(), so that a model built and called directly adds no loss term.
        self.deterministic = True

    def features(self, x):
        return feature_maps.hedgehog_features(x, self.weight[...], self.logit_scale)

    def distillation_loss(self, q, k, mask=None, *, causal=False):
        """attention_matching_loss of softmax's weights on q and k, a constant, and this kind's."""
        allowed = masks.combine(mask, causal, q.shape[1], k.shape[1])
        teacher = masked_softmax(dot_scores(q, k, q.shape[-1] ** -0.5), allowed)
        return attention_matching_loss(jax.lax.stop_gradient(teacher), self.weights(q, k, mask, causal=causal))

    def __call__(self, q, k, v, mask=None, *, causal=False):
        if self.distill_weight and not self.deterministic:
            aux_losses.add(self, self.distill_weight * self.distillation_loss(q, k, mask, causal=causal))
        return super().__call__(q, k, v, mask, causal=causal)
