"""The rank-m controls of softmax, which separate the rank of a kernelised kind's phi(Q) phi(K)^T (at most its
feature dimension m) from the shape of its rows: `softmax_rank`, softmax's own weights projected to rank m (signed
entries, rows of any sum), and `landmark_softmax`, softmax routed through m landmarks of the keys (nonnegative rows
that sum to 1, of nonnegative rank <= m, as elu + 1's are)."""
import functools

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
LANDMARKS_NOT_CAUSAL = ("attention kind 'landmark_softmax' cannot attend causally: each landmark averages a segment "
                        "of the keys, so every query would see future keys through it")
LANDMARKS_NOT_DECODING = ("attention kind 'landmark_softmax' cannot decode one position at a time: its landmarks "
                          "average segments of every key of the sequence")


def top_right_singular_vectors(matrices, count: int, iterations: int = 0):
    """[..., Lq, Lk] float32 -> [..., Lk, count]: orthonormal right singular vectors of each matrix for its
    `count` largest singular values, the eigenvectors of M^T M for its largest eigenvalues: exact (eigh of the
    Lk x Lk Gram matrix) where `iterations` is 0, else after that many steps of subspace iteration."""
    if iterations:
        return _subspace_iteration(matrices, count, iterations)
    # At full float32 precision: a GPU's default TF32 product errs by about 1e-3, the size of the gaps between
    # the eigenvalues that decide the subspace.
    gram = jnp.einsum("...qk,...ql->...kl", matrices, matrices, precision=jax.lax.Precision.HIGHEST)
    _, vectors = jnp.linalg.eigh(gram)  # eigenvalues ascending
    return vectors[..., -count:]


def _subspace_iteration(matrices, count: int, iterations: int):
    """Randomised subspace iteration (Halko, Martinsson & Tropp 2011, Algorithm 4.4) on M^T M from a fixed
    Gaussian block of 2 x `count` columns, orthonormalised by QR at every step, then Rayleigh-Ritz: the top
    `count` eigenvectors of the block's small Gram matrix. Oversampling by `count` makes the error of step i
    shrink as (s_{2m+1} / s_m)^(2i) rather than (s_{m+1} / s_m)^(2i), so that close singular values at the m-th
    do not stall it. O(Lq Lk m) a step where eigh of the Gram matrix is O(Lk^3)."""
    num_keys = matrices.shape[-1]
    width = min(2 * count, num_keys)
    product = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
    # The same start for every matrix and call: the basis is a deterministic function of the weights.
    block = jax.random.normal(jax.random.key(0), (num_keys, width), matrices.dtype)
    block = jnp.broadcast_to(block, matrices.shape[:-2] + block.shape)
    for _ in range(iterations):
        block, _ = jnp.linalg.qr(product(jnp.swapaxes(matrices, -1, -2), product(matrices, block)))
    image = product(matrices, block)
    _, ritz = jnp.linalg.eigh(product(jnp.swapaxes(image, -1, -2), image))  # eigenvalues ascending
    return product(block, ritz[..., -count:])


def project_onto_top_rows(weights, allowed, rank: int, iterations: int = 0):
    """A [B, H, Lq, Lk] -> A V V^T, V [B, H, Lk, rank] the top right singular vectors of A: the best rank-`rank`
    approximation of A (Eckart-Young). V is held constant (stop_gradient): gradients reach A through the
    projection alone. A matrix whose rank cannot exceed `rank`, by its shape or by the queries and keys
    `allowed` lets attend (None: all), comes back unchanged."""
    if rank >= min(weights.shape[-2:]):
        return weights
    basis = jax.lax.stop_gradient(top_right_singular_vectors(weights, rank, iterations))
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


RANK = option_specs.Option("rank", 32, "m, the rank bound of softmax_rank's projection and landmark_softmax's "
                           "number of landmarks (their `feature_dim`)", rule=option_specs.at_least(1))
BASIS_ITERATIONS = option_specs.Option(
    "basis_iterations", 0, "softmax_rank's basis: 0, exact (eigh of A^T A, O(L^3) per head); k > 0, k steps of "
    "randomised subspace iteration (O(L^2 m) each)", rule=option_specs.at_least(0, "0: the exact basis"))


class _NotIncremental(ScoreAttention):
    """A softmax-family kind whose rows depend on the whole sequence: it refuses causal=True and the decoding
    methods (ScoreAttention.incremental), each in its own one line."""

    incremental = False
    not_causal = not_decoding = ""

    def _refuse_causal(self, causal):
        if causal:
            raise ValueError(self.not_causal)

    def _refuse_decoding(self, *args, **kwargs):
        raise ValueError(self.not_decoding)

    init_cache = decode_step = init_memory = attend_memory = _refuse_decoding


@register("softmax_rank")
class SoftmaxRankAttention(_NotIncremental):
    """Scaled dot-product softmax weights A, as the `softmax` kind computes them (same scale, same masks),
    projected onto their top-`rank` right-singular subspace: A V_m V_m^T, output (A V_m V_m^T) v. Each row
    keeps softmax's shape as far as m dimensions allow, and the matrix has rank at most m, as a kernelised
    kind's with feature dimension m: `feature_dim` is m, so eval.json's rank bound applies to it.

    V_m is held constant under differentiation (stop_gradient: gradients flow through A to q and k). With
    `basis_iterations` = 0 it comes from jnp.linalg.eigh of A^T A. Chosen first for exactness: on random q, k at
    L = 512, m = 32, A V_m V_m^T was float64's best rank-m approximation to float32 round-off (Frobenius error
    within 1e-11 of the optimum), where 8 steps of subspace iteration with QR and no oversampling left 0.3-1.3%
    more error, for the m-th and (m+1)-th singular values of such matrices differ by about 1%. Its cost: one
    forward and backward at B = 16, H = 4, L = 512, d = 32, key padding, took 1.19 s against the `softmax` kind's
    0.21 s, 5.7x (2-core CPU); the eigendecompositions, O(L^3) per head, are most of it. With
    `basis_iterations` = k > 0 it comes from k steps of subspace iteration oversampled 2x (_subspace_iteration):
    a near-best rank-m approximation at O(L^2 m) a step (tests/test_low_rank.py holds its error to the exact
    one's; docs/benchmarks.md, "Rank-m softmax", its cost).

    The projected rows no longer sum to 1 and may hold small negative weights; `weights` returns the matrix
    the output uses. Where m covers the rank A can have (m >= its allowed keys or queries) the projection is
    the identity, and the weights are softmax's exactly. Each row depends on every query, so the kind is not
    incremental. It keeps every key and value (the softmax family's state_size)."""

    OWN_OPTIONS = (RANK, BASIS_ITERATIONS)
    keeps_every_key = False  # its projected rows are no softmax: small or negative weights, no scores
    not_causal, not_decoding = NOT_CAUSAL, NOT_DECODING

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, rank: int = 32, basis_iterations: int = 0,
                 **base_options):
        super().__init__(rngs=rngs, **base_options)
        self.scale = head_dim**-0.5
        self.rank = rank
        self.basis_iterations = basis_iterations
        self.feature_dim = rank

    def scores(self, q, k):
        return dot_scores(q, k, self.scale)

    def weights(self, q, k, mask=None, *, causal=False):
        self._refuse_causal(causal)
        allowed = self.allowed(q, k, mask, causal)
        return project_onto_top_rows(masked_softmax(self.scores(q, k), allowed), allowed, self.rank,
                                     self.basis_iterations)


def segment_means(k, key_mask, count: int):
    """Landmarks [B, count, H, D]: the mean of the allowed keys (key_mask [B, Lk], None: all) in each of `count`
    contiguous segments of the positions (key j in segment floor(j count / Lk)), and [B, count] whether a segment
    holds any allowed key (an empty one's landmark is 0 and must not be attended)."""
    num_keys = k.shape[1]
    segment = (jnp.arange(num_keys) * count) // num_keys
    member = (segment[:, None] == jnp.arange(count)[None, :]).astype(jnp.float32)  # [Lk, count]
    if key_mask is None:
        key_mask = jnp.ones(k.shape[:2], bool)
    member = member[None] * key_mask[:, :, None]  # [B, Lk, count]
    sizes = member.sum(1)  # [B, count]
    sums = jnp.einsum("bjs,bjhd->bshd", member, k.astype(jnp.float32))
    return (sums / jnp.maximum(sizes, 1.0)[:, :, None, None]).astype(k.dtype), sizes > 0


@register("landmark_softmax")
class LandmarkSoftmaxAttention(_NotIncremental):
    """Softmax routed through m landmarks: A = P R, with P [Lq, m] the softmax over landmarks of q.l / sqrt(d)
    and R [m, Lk] the softmax over the allowed keys of l.k / sqrt(d), the landmarks l the means of the keys in m
    contiguous segments (segment_means; Nystromformer's landmarks, used as Agent Attention uses its agent tokens).

    The control that has the bound elu + 1 has, with softmax's scores: every row is nonnegative and sums to 1,
    as elu + 1's, and A is a product of two nonnegative matrices through m, so its nonnegative rank (hence its
    rank) is at most m, `feature_dim`, as elu + 1's phi(Q) phi(K)^T with m features is; `softmax_rank`'s
    projection bounds the rank alone, with signed entries and rows of any sum. Unlike that projection, A is not
    softmax's own matrix even where m covers every key: each query reaches keys through the landmarks' rows.

    Padded keys are left out of the landmarks and of R; a segment with no allowed key gives no landmark. The
    landmarks mix every key of the sequence, so the kind is not incremental (ScoreAttention.incremental). It
    keeps every key and value (the softmax family's state_size)."""

    OWN_OPTIONS = (RANK,)
    # Positive on every allowed key: the spread of log(weight) is defined, the spread of P R's logs, no one score matrix.
    keeps_every_key = True
    not_causal, not_decoding = LANDMARKS_NOT_CAUSAL, LANDMARKS_NOT_DECODING

    def __init__(self, *, num_heads: int, head_dim: int, rngs: nnx.Rngs, rank: int = 32, **base_options):
        super().__init__(rngs=rngs, **base_options)
        self.scale = head_dim**-0.5
        self.feature_dim = rank

    def weights(self, q, k, mask=None, *, causal=False):
        self._refuse_causal(causal)
        allowed = self.allowed(q, k, mask, causal)
        # The keys some query may attend to make the landmarks; padding is all a mask says in the lab's encoders.
        key_valid = None if allowed is None else jnp.broadcast_to(
            allowed, (q.shape[0], q.shape[2], q.shape[1], k.shape[1])).any(axis=(1, 2))
        landmarks, occupied = segment_means(k, key_valid, self.feature_dim)
        to_landmarks = masked_softmax(dot_scores(q, landmarks, self.scale), occupied[:, None, None, :])
        to_keys = masked_softmax(dot_scores(landmarks, k, self.scale),
                                 None if key_valid is None else key_valid[:, None, None, :])
        weights = jnp.einsum("bhqs,bhsk->bhqk", to_landmarks, to_keys)
        if allowed is None:
            return weights
        # A mask finer than key padding cuts its entries out of the rows, renormalised (the rank then no longer
        # bounded by m); a row with no allowed key attends to nothing. Under key padding alone this changes nothing.
        weights = jnp.where(allowed, weights, 0.0)
        return weights / jnp.maximum(weights.sum(-1, keepdims=True), jnp.finfo(jnp.float32).tiny)
