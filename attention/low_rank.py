"""`softmax_rank`: softmax's own weights with their rank bounded at m, the control that separates the rank of
a kernelised kind's phi(Q) phi(K)^T (at most its feature dimension m) from the shape of its rows."""
import jax
import jax.numpy as jnp
from flax import nnx

from attention import option_specs
from attention.registry import register
from attention.score_base import ScoreAttention, dot_scores, masked_softmax

NOT_CAUSAL = ("attention kind 'softmax_rank' cannot attend causally: the rank-m projection of a lower-triangular "
              "matrix is not lower-triangular, so every query would see future keys")
NOT_DECODING = ("attention kind 'softmax_rank' cannot decode one position at a time: its projection is computed "
                "from the rows of every query at once")


def top_right_singular_vectors(matrices, count: int):
    """[..., Lq, Lk] float32 -> [..., Lk, count]: orthonormal right singular vectors of each matrix for its
    `count` largest singular values, the eigenvectors of M^T M for its largest eigenvalues."""
    # At full float32 precision: a GPU's default TF32 product errs by about 1e-3, the size of the gaps between
    # the eigenvalues that decide the subspace.
    gram = jnp.einsum("...qk,...ql->...kl", matrices, matrices, precision=jax.lax.Precision.HIGHEST)
    _, vectors = jnp.linalg.eigh(gram)  # eigenvalues ascending
    return vectors[..., -count:]


def project_onto_top_rows(weights, allowed, rank: int):
    """A [B, H, Lq, Lk] -> A V V^T, V [B, H, Lk, rank] the top right singular vectors of A: the best rank-`rank`
    approximation of A (Eckart-Young). V is held constant (stop_gradient): gradients reach A through the
    projection alone. A matrix whose rank cannot exceed `rank`, by its shape or by the queries and keys
    `allowed` lets attend (None: all), comes back unchanged."""
    if rank >= min(weights.shape[-2:]):
        return weights
    basis = jax.lax.stop_gradient(top_right_singular_vectors(weights, rank))
    if allowed is None:
        return weights @ basis @ jnp.swapaxes(basis, -1, -2)
    allowed = jnp.broadcast_to(allowed, weights.shape)
    attended_keys = allowed.any(-2)
    # A is 0 in the columns of keys that no query attends, so the exact singular vectors are 0 there too:
    # zeroing their round-off keeps such keys (padding) out of the output exactly.
    basis = jnp.where(attended_keys[..., None], basis, 0.0)
    projected = weights @ basis @ jnp.swapaxes(basis, -1, -2)
    bounded = jnp.minimum(allowed.any(-1).sum(-1), attended_keys.sum(-1)) <= rank
    return jnp.where(bounded[..., None, None], weights, projected)


RANK = option_specs.Option("rank", 32, "m, the rank of the projected softmax weights (its `feature_dim`)",
                           rule=option_specs.at_least(1))


@register("softmax_rank")
class SoftmaxRankAttention(ScoreAttention):
    """Scaled dot-product softmax weights A, as the `softmax` kind computes them (same scale, same masks),
    projected onto their top-`rank` right-singular subspace: A V_m V_m^T, output (A V_m V_m^T) v. Each row
    keeps softmax's shape as far as m dimensions allow, and the matrix has rank at most m, as a kernelised
    kind's with feature dimension m: `feature_dim` is m, so eval.json's rank bound applies to it.

    V_m comes from jnp.linalg.eigh of A^T A, under stop_gradient (gradients flow through A to q and k).
    Chosen for exactness: on random q, k at L = 512, m = 32, A V_m V_m^T was float64's best rank-m
    approximation to float32 round-off (Frobenius error within 1e-11 of the optimum), where 8 steps of
    subspace iteration with QR left 0.3-1.3% more error and entries off by up to 0.97, for the m-th and
    (m+1)-th singular values of such matrices differ by about 1%. Its cost: one forward and backward at
    B = 16, H = 4, L = 512, d = 32, key padding, took 1.19 s against the `softmax` kind's 0.21 s, 5.7x (2-core
    CPU, best of 3 alternating rounds); the eigendecompositions, O(L^3) per head, are most of it.

    The projected rows no longer sum to 1 and may hold small negative weights; `weights` returns the matrix
    the output uses. Where m covers the rank A can have (m >= its allowed keys or queries) the projection is
    the identity, and the weights are softmax's exactly. Each row depends on every query, so the kind is not
    incremental (ScoreAttention.incremental): it refuses causal=True and the decoding methods. It keeps every
    key and value (the softmax family's state_size)."""

    OWN_OPTIONS = (RANK,)
    incremental = False
    keeps_every_key = False  # its projected rows are no softmax: small or negative weights, no scores

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, rank: int = 32, **base_options):
        super().__init__(rngs=rngs, **base_options)
        self.scale = head_dim**-0.5
        self.rank = rank
        self.feature_dim = rank

    def scores(self, q, k):
        return dot_scores(q, k, self.scale)

    def weights(self, q, k, mask=None, *, causal=False):
        if causal:
            raise ValueError(NOT_CAUSAL)
        allowed = self.allowed(q, k, mask, causal)
        return project_onto_top_rows(masked_softmax(self.scores(q, k), allowed), allowed, self.rank)

    def _refuse_decoding(self, *args, **kwargs):
        raise ValueError(NOT_DECODING)

    init_cache = decode_step = init_memory = attend_memory = _refuse_decoding
