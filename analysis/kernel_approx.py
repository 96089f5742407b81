"""How well finite feature maps approximate the softmax kernel exp(q.k / sqrt(d)), in float64.

Softmax attention is linear attention with infinitely many features; each family below truncates that
feature space: Performer's positive random features (m features), the Taylor series of exp to a given
order, and the limit (1 + x/n)^n. The error of one setting is |phi(q).phi(k) - exp(q.k / sqrt d)| divided
by exp(q.k / sqrt d), averaged over random (q, k) pairs and, for Performer, over independent projections.

Norms. q and k are Gaussian directions rescaled to |q| = |k| = c * d^(1/4) for c in NORM_SCALES, so
|q|^2 / sqrt(d) = c^2 in {0.25, 1, 4, 16} whatever d is. That is the quantity Performer's variance grows
with (the relative variance of one feature is exp(|q + k|^2 / sqrt d) - 1, about exp(2 c^2) - 1), while
the logit q.k / sqrt(d) = c^2 cos(q, k) that Taylor and the limit expand in has a typical size of
c^2 / sqrt(d): the study reports its mean absolute value per norm as "mean_abs_logit".
"""

from functools import partial

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis import plots  # noqa: E402
from attention.feature_maps import (  # noqa: E402
    exp_limit_feature_dim,
    exp_limit_features,
    positive_random_features,
    random_projection,
    taylor_feature_dim,
    taylor_features,
)

NORM_SCALES = (0.5, 1.0, 2.0, 4.0)
PERFORMER_MULTIPLIERS = (1, 2, 4, 8, 16, 32, 64)  # m / d
TAYLOR_ORDERS = (1, 2, 3, 4)
EXP_LIMIT_NS = (1, 2, 3, 4, 5, 6)
FAMILIES = ("performer_orthogonal", "performer_iid", "taylor", "exp_limit")
RESULT_KEYS = ("dim", "seed", "num_pairs", "num_draws", "norms", "mean_abs_logit", "kernels")
ROW_KEYS = ("kernel", "order", "feature_dim", "norm", "relative_error")

# Exact feature maps grow as C(d + order, order) (74613 features for n = 6 at d = 16), and building them
# gathers [pairs, features, order] factors, so pairs are mapped over in batches that keep that small.
MAX_BATCH_ELEMENTS = 2**21


def sample_pairs(key, num_pairs: int, dim: int) -> tuple[jax.Array, jax.Array]:
    """Two [num_pairs, dim] arrays of independent uniformly random unit vectors."""
    q, k = jax.random.normal(key, (2, num_pairs, dim))
    return q / jnp.linalg.norm(q, axis=-1, keepdims=True), k / jnp.linalg.norm(k, axis=-1, keepdims=True)


def logits(q, k) -> jax.Array:
    return jnp.sum(q * k, axis=-1) / jnp.sqrt(q.shape[-1])


def mean_relative_error(estimate, q, k) -> jax.Array:
    """Mean of |estimate - exp(q.k / sqrt d)| / exp(q.k / sqrt d); estimate is [..., num_pairs]."""
    exact = jnp.exp(logits(q, k))
    return jnp.mean(jnp.abs(estimate - exact) / exact)


def _softmax_scaled(x):
    # The feature maps approximate exp(q.k); scaling both sides by d^(-1/4) makes that exp(q.k / sqrt d).
    return x * x.shape[-1] ** -0.25


@partial(jax.jit, static_argnums=(0, 1, 2))
def _exact_features_error(feature_map, degree: int, batch_size: int, q, k) -> jax.Array:
    def inner_product(pair):
        return jnp.dot(feature_map(pair[0], degree), feature_map(pair[1], degree))

    estimate = jax.lax.map(inner_product, (_softmax_scaled(q), _softmax_scaled(k)), batch_size=batch_size)
    return mean_relative_error(estimate, q, k)


def _batch_size(feature_dim: int, degree: int) -> int:
    return max(1, MAX_BATCH_ELEMENTS // (feature_dim * degree))


def taylor_error(q, k, order: int) -> float:
    """Error of the Taylor series of exp to `order`, exact in its C(d + order, order) features."""
    batch_size = _batch_size(taylor_feature_dim(q.shape[-1], order), order)
    return float(_exact_features_error(taylor_features, order, batch_size, q, k))


def exp_limit_error(q, k, n: int) -> float:
    """Error of (1 + x/n)^n, exact in its C(d + n, n) features."""
    batch_size = _batch_size(exp_limit_feature_dim(q.shape[-1], n), n)
    return float(_exact_features_error(exp_limit_features, n, batch_size, q, k))


@partial(jax.jit, static_argnums=(0, 1, 2))
def performer_projections(num_features: int, dim: int, orthogonal: bool, draw_keys) -> jax.Array:
    """[num_draws, num_features, dim]: one random projection per key in draw_keys."""
    return jax.vmap(partial(random_projection, num_features=num_features, dim=dim, orthogonal=orthogonal))(
        draw_keys)


@partial(jax.jit, static_argnums=0)
def _performer_errors(feature_dims: tuple[int, ...], projections, q, k) -> jax.Array:
    q_scaled, k_scaled = _softmax_scaled(q), _softmax_scaled(k)

    def estimate(projection):
        phi_q = positive_random_features(q_scaled, projection)
        return jnp.sum(phi_q * positive_random_features(k_scaled, projection), axis=-1)

    # The leading rows of a projection are a projection of that size: iid rows stay iid, and whole
    # orthogonal blocks stay orthogonal blocks when the size is a multiple of d.
    errors = [mean_relative_error(jax.vmap(estimate)(projections[:, :m]), q, k) for m in feature_dims]
    return jnp.stack(errors)


def performer_errors(q, k, projections, feature_dims: tuple[int, ...]) -> list[float]:
    """Error of positive random features with the first m rows of each projection, per m in feature_dims.

    projections is [num_draws, max(feature_dims), d]; errors are averaged over its draws too.
    """
    return _performer_errors(feature_dims, projections, q, k).tolist()


def _rows_at_norm(q, k, norm: float, projections: dict[str, jax.Array]) -> list[dict]:
    dim = q.shape[-1]
    feature_dims = tuple(multiplier * dim for multiplier in PERFORMER_MULTIPLIERS)
    rows = [_row(kernel, None, m, norm, error)
            for kernel, draws in projections.items()
            for m, error in zip(feature_dims, performer_errors(q, k, draws, feature_dims))]
    for order in TAYLOR_ORDERS:
        rows.append(_row("taylor", order, taylor_feature_dim(dim, order), norm, taylor_error(q, k, order)))
    for n in EXP_LIMIT_NS:
        rows.append(_row("exp_limit", n, exp_limit_feature_dim(dim, n), norm, exp_limit_error(q, k, n)))
    return rows


def _row(kernel: str, order: int | None, feature_dim: int, norm: float, error: float) -> dict:
    """order is the Taylor order or the n of (1 + x/n)^n; None for Performer."""
    return {"kernel": kernel, "order": order, "feature_dim": feature_dim, "norm": norm,
            "relative_error": error}


def kernel_approximation_study(dim: int, *, seed: int = 0, num_pairs: int = 256, num_draws: int = 8) -> dict:
    """Errors of every family and setting at every norm c * d^(1/4), c in NORM_SCALES.

    Returns a JSON-serialisable dict with RESULT_KEYS; "kernels" is a list of rows with ROW_KEYS.
    The same pair directions are used at every norm; everything is determined by seed.
    """
    norms = [scale * dim**0.25 for scale in NORM_SCALES]
    with jax.enable_x64(True):
        # XLA's RngBitGenerator compiles several times faster on CPU than the default threefry, which
        # dominated the run time; its draws are reproducible for a seed on one backend and JAX version.
        key_pairs, key_projections = jax.random.split(jax.random.key(seed, impl="rbg"))
        q_unit, k_unit = sample_pairs(key_pairs, num_pairs, dim)
        # Every m uses the leading rows of the same draws (common random numbers), so that the curves
        # differ by m rather than by which projections happened to be drawn.
        draw_keys = jax.random.split(key_projections, num_draws)
        max_features = max(PERFORMER_MULTIPLIERS) * dim
        projections = {kernel: performer_projections(max_features, dim, orthogonal, draw_keys)
                       for kernel, orthogonal in (("performer_orthogonal", True), ("performer_iid", False))}
        kernels, mean_abs_logit = [], []
        for norm in norms:
            q, k = norm * q_unit, norm * k_unit
            mean_abs_logit.append(float(jnp.mean(jnp.abs(logits(q, k)))))
            kernels += _rows_at_norm(q, k, norm, projections)
    return {"dim": dim, "seed": seed, "num_pairs": num_pairs, "num_draws": num_draws, "norms": norms,
            "mean_abs_logit": mean_abs_logit, "kernels": kernels}


def family_curve(result: dict, kernel: str, norm: float) -> tuple[list[int], list[float]]:
    """Feature dims in increasing order and the errors of one family at one norm."""
    rows = sorted((row for row in result["kernels"] if row["kernel"] == kernel and row["norm"] == norm),
                  key=lambda row: row["feature_dim"])
    return [row["feature_dim"] for row in rows], [row["relative_error"] for row in rows]


def plot_kernel_approximation(result: dict, path: str) -> str:
    """One panel per norm: relative error against feature dimension, log-log, a line per family."""
    norms = result["norms"]
    fig, axes = plt.subplots(1, len(norms), figsize=(4 * len(norms), 3.6), sharey=True, squeeze=False,
                             layout="constrained")
    for ax, norm, abs_logit in zip(axes[0], norms, result["mean_abs_logit"]):
        for kernel in FAMILIES:
            ax.plot(*family_curve(result, kernel, norm), marker="o", markersize=3, label=kernel)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"|q| = |k| = {norm:.2g}, mean |logit| = {abs_logit:.2g}", fontsize=9)
        ax.set_xlabel("feature dimension")
    axes[0, 0].set_ylabel(r"mean relative error of $\exp(q \cdot k / \sqrt{d})$")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"d = {result['dim']}, {result['num_pairs']} pairs, {result['num_draws']} Performer draws")
    return plots.save_figure(fig, path)
