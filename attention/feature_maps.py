"""Feature maps phi for kernelised (linear) attention: plain functions of the last axis.

Precision from bfloat16 (or float16) inputs: a positive phi is returned in x's dtype, since a sum of
positive products phi(q).phi(k) keeps the relative rounding of its terms (2^-8 in bfloat16); where
that phi would chain several roundings (an exponent, a softmax, a product with cos) it is computed in
float32 and rounded once, at the end. The Taylor and exp_limit monomials take both signs, and
phi(q).phi(k) can be far smaller than its terms (near 0 where 1 + q.k/n is), so rounding them would
err by 2^-8 of the terms, not of the sum: they are computed and returned in float32.
"""
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np


def in_float32(x):
    """x in float32, or kept in a wider float dtype."""
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def elu_plus_one(x):
    """elu(x) + 1, positive everywhere.

    The negative branch is exp(x) itself, not (exp(x) - 1) + 1: in bfloat16 exp(x) - 1 rounds to -1 for
    x below about -5.5 and the sum cancels to exactly 0, which would zero the normaliser.
    """
    return jnp.where(x > 0, x + 1, jnp.exp(jnp.minimum(x, 0)))


def relu_features(x, eps):
    """relu(x) + eps: eps keeps phi(q).phi(k), hence the normaliser, positive."""
    return jax.nn.relu(x) + eps


def random_projection(key, num_features: int, dim: int, orthogonal: bool = True):
    """FAVOR+ projection [num_features, dim] whose rows are each marginally N(0, I).

    Orthogonal rows come in blocks of `dim` (the last block truncated), each block the rows of a
    Haar-random orthogonal matrix; rescaling each row to the norm of a fresh dim-dimensional Gaussian
    (chi-distributed) keeps the rows marginally Gaussian, while orthogonality lowers the variance of
    the kernel estimate (Choromanski et al. 2021).
    """
    if not orthogonal:
        return jax.random.normal(key, (num_features, dim))
    num_blocks = -(-num_features // dim)
    # One draw supplies the blocks' directions and the rows' norms: a second shape, a second compilation.
    directions, norms = jax.random.normal(key, (2, num_blocks * dim, dim))
    q, r = jnp.linalg.qr(directions.reshape(num_blocks, dim, dim))
    # Fixing the signs of diag(R) makes Q Haar-distributed, whatever sign convention the QR uses.
    q = q * jnp.sign(jnp.diagonal(r, axis1=-2, axis2=-1))[:, None, :]
    rows = q.reshape(num_blocks * dim, dim)[:num_features]
    return rows * jnp.linalg.norm(norms[:num_features], axis=-1, keepdims=True)


def random_feature_exponent(x, projection):
    """x.w - |x|^2/2 for every row w of `projection` [..., m, d] (leading axes broadcast against x's),
    in float32 at least: the exponent is a difference of sums of order |x|^2, and exp turns its
    absolute error (a bfloat16 exponent near 8 is off by up to 1/32) into a relative error of the feature."""
    x = in_float32(x)
    return (jnp.einsum("...d,...md->...m", x, projection.astype(x.dtype))
            - 0.5 * jnp.sum(x * x, axis=-1, keepdims=True))


def positive_random_features(x, projection, stabilizer=None):
    """exp(x.w - |x|^2/2 - stabilizer) / sqrt(m) over the m rows w of `projection` -> [..., m].

    E[phi(q).phi(k)] = exp(q.k) for rows w ~ N(0, I) and no stabilizer; a stabilizer shared by all
    the features of a row (or of all keys) scales phi without biasing the normalised attention.
    """
    return features_of_exponent(random_feature_exponent(x, projection), stabilizer).astype(x.dtype)


def features_of_exponent(exponent, stabilizer=None):
    """The positive random features of an already computed `random_feature_exponent` [..., m], in its
    dtype: for callers that need the exponent anyway (to choose the stabilizer), so it is computed once.

    The stabilizer is a constant to differentiation: it cancels in the normalised attention (whose eps is
    rescaled by it too), so its gradient would only add terms that sum to 0."""
    if stabilizer is not None:
        exponent = exponent - jax.lax.stop_gradient(stabilizer)
    return jnp.exp(exponent) / math.sqrt(exponent.shape[-1])


def _num_multisets(size: int, degree: int) -> int:
    return math.comb(size + degree - 1, degree)


def _symmetric_monomial_features(z, degree: int, weight):
    """weight(beta) * z^beta for every multiset beta of `degree` coordinates of z -> [..., F].

    `weight` maps the [F, size] counts of the multisets to [F] weights. The monomial table is built
    with numpy at trace time, so only [..., F, degree] factors are gathered, never a d^degree tensor.
    """
    size = z.shape[-1]
    multisets = list(itertools.combinations_with_replacement(range(size), degree))
    index = np.array(multisets, dtype=np.int32).reshape(len(multisets), degree)
    counts = np.stack([np.bincount(row, minlength=size) for row in index])
    return jnp.prod(z[..., index], axis=-1) * jnp.asarray(weight(counts), z.dtype)


def _factorials(counts):
    return np.array([math.factorial(c) for c in range(counts.max() + 1)], np.float64)[counts]


def taylor_feature_dim(dim: int, order: int) -> int:
    return _num_multisets(dim + 1, order)


def taylor_features(x, order: int):
    """phi with phi(q).phi(k) = sum_{j <= order} (q.k)^j / j! exactly -> float32 [..., C(d + order, order)].

    (q.k)^j / j! = sum_{|alpha| = j} q^alpha k^alpha / alpha!, so the features are x^alpha / sqrt(alpha!)
    for every multi-index alpha of degree <= order: the multisets of `order` coordinates of [x, 1], the
    appended 1 filling up the degree and taking no part in alpha!.
    """
    x = in_float32(x)  # (see the module's docstring)
    z = jnp.concatenate([x, jnp.ones(x.shape[:-1] + (1,), x.dtype)], axis=-1)
    return _symmetric_monomial_features(
        z, order, lambda counts: 1 / np.sqrt(_factorials(counts[:, :-1]).prod(-1)))


def exp_limit_feature_dim(dim: int, n: int) -> int:
    return _num_multisets(dim + 1, n)


def exp_limit_features(x, n: int):
    """phi with phi(q).phi(k) = (1 + q.k/n)^n exactly -> float32 [..., C(d + n, n)].

    With z = [1, x/sqrt(n)], (1 + q.k/n)^n = (z_q.z_k)^n = sum_{|beta| = n} n!/beta! z_q^beta z_k^beta:
    the symmetric n-th tensor power of z.
    """
    x = in_float32(x)  # (see the module's docstring)
    z = jnp.concatenate([jnp.ones(x.shape[:-1] + (1,), x.dtype), x / math.sqrt(n)], axis=-1)
    return _symmetric_monomial_features(
        z, n, lambda counts: np.sqrt(math.factorial(n) / _factorials(counts).prod(-1)))


def cosformer_features(x, positions, max_len: int):
    """[relu(x) cos(a_i), relu(x) sin(a_i)] with a_i = pi i / (2 max_len) -> [B, L, H, 2d].

    x is [B, L, H, d] and `positions` [L] the position i of each row along axis 1. The product of two
    features is relu(q).relu(k) cos(a_i - a_j): cosFormer's locality re-weighting, decomposed so that
    it stays linear, and positive while |i - j| < max_len.
    """
    # The angle in float32: a low-precision position would shift it by whole steps of pi / (2 M).
    angle = (jnp.pi / (2 * max_len)) * jnp.asarray(positions, jnp.float32)[:, None, None]
    relu = jax.nn.relu(in_float32(x))
    return jnp.concatenate([relu * jnp.cos(angle), relu * jnp.sin(angle)], axis=-1).astype(x.dtype)


def hedgehog_features(x, weight, logit_scale: float = 1.0):
    """softmax over the last axis of logit_scale [x W, -x W] -> [B, L, H, 2d'], for x [B, L, H, d], W [H, d, d'].

    The softmax makes phi positive and spiky like exp(q.k), which a learned W can then imitate
    (Zhang et al. 2024); the -xW half lets it respond to negative projections too. `logit_scale` multiplies
    the softmax's logits: a spikier map from the same W (the paper's code multiplies them by 2).
    """
    # The projection and its softmax in float32, rounded once at the end. float32 operands rather than
    # preferred_element_type: XLA's CPU backend has no bfloat16 x bfloat16 -> float32 kernel for this
    # layout, and products of bfloat16 numbers are exact in float32 all the same.
    projected = logit_scale * jnp.einsum("...hd,hde->...he", in_float32(x), in_float32(weight))
    return jax.nn.softmax(jnp.concatenate([projected, -projected], axis=-1), axis=-1).astype(x.dtype)
