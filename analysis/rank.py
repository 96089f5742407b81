"""Rank metrics of attention matrices, from float64 singular values of the unpadded part of each matrix.

A batch of captured weights is reduced to its singular values on the device the weights are on
(attention_spectra), and only those cross to the host, once; the metrics of the spectra are numpy.
"""

import jax
import jax.numpy as jnp
import numpy as np

# Attention matrices are computed in float32, so singular values below float32 round-off are noise.
FLOAT32_EPS = float(np.finfo(np.float32).eps)

METRIC_NAMES = ("numerical_rank", "effective_rank", "stable_rank")


def singular_values(matrix) -> np.ndarray:
    """Singular values over the last two axes, float64, in descending order."""
    return np.linalg.svd(np.asarray(matrix, dtype=np.float64), compute_uv=False)


# --- metrics of spectra: s [..., n] descending, trailing zeros allowed ------------------------------------


def numerical_rank(s, size) -> np.ndarray:
    """Number of singular values above s_max * size * eps_float32, where size is the larger side of the
    matrix (broadcast against s's leading axes); 0 for an all-zero matrix."""
    s = np.asarray(s, dtype=np.float64)
    threshold = s[..., :1] * np.asarray(size, dtype=np.float64)[..., None] * FLOAT32_EPS
    return np.sum(s > threshold, axis=-1)


def effective_rank(s) -> np.ndarray:
    """Roy & Vetterli (2007): exp of the Shannon entropy of the normalised spectrum s / sum(s)."""
    s = np.asarray(s, dtype=np.float64)
    total = s.sum(axis=-1, keepdims=True)
    p = np.divide(s, total, out=np.zeros_like(s), where=total > 0)
    # 0 log 0 = 0: zero singular values, padding's included, add nothing to the entropy.
    entropy = -np.sum(p * np.log(np.where(p > 0, p, 1.0)), axis=-1)
    return np.where(total[..., 0] > 0, np.exp(entropy), 0.0)


def stable_rank(s) -> np.ndarray:
    """sum(s^2) / s_max^2: squared Frobenius over squared spectral norm (0 for an all-zero matrix)."""
    s = np.asarray(s, dtype=np.float64)
    largest = s[..., 0]
    return np.divide(np.sum(s**2, axis=-1), largest**2, out=np.zeros_like(largest), where=largest > 0)


def spectrum_metrics(s, size) -> dict[str, np.ndarray]:
    """The three metrics of spectra s [..., n] of matrices whose larger side is `size` [...]."""
    return {"numerical_rank": numerical_rank(s, size), "effective_rank": effective_rank(s),
            "stable_rank": stable_rank(s)}


def rank_metrics(matrix) -> dict:
    """The three metrics of one matrix, as python floats."""
    matrix = np.asarray(matrix)
    metrics = spectrum_metrics(singular_values(matrix), max(matrix.shape))
    return {name: float(value) for name, value in metrics.items()}


# --- spectra of captured attention, on the device ---------------------------------------------------------


@jax.jit
def _layer_spectra(layer_weights, query_lengths, key_lengths):
    """[B, H, min(Lq, Lk)] float64 singular values of one layer's padded weights [B, H, Lq, Lk], example
    e's block being [:query_lengths[e], :key_lengths[e]].

    Zeroing an example's padded rows and columns leaves the singular values of its block as they are and
    adds zeros, so one batched SVD of the padded matrices gives every example's spectrum. float64 because
    a float32 SVD's error, measured at up to ~15 eps32 * s_max at L = 1,024, can move a singular value
    across the numerical-rank threshold: it did in 4 of ~1,500 random softmax matrices at L = 256-512
    (docs/benchmarks.md, "Rank analysis").
    """
    num_queries, num_keys = layer_weights.shape[-2:]
    valid_rows = jnp.arange(num_queries) < query_lengths[:, None]  # [B, Lq]
    valid_cols = jnp.arange(num_keys) < key_lengths[:, None]  # [B, Lk]
    valid = valid_rows[:, None, :, None] & valid_cols[:, None, None, :]
    s = jnp.linalg.svd(jnp.where(valid, layer_weights, 0).astype(jnp.float64 if jax.config.jax_enable_x64 else
                                                                   jnp.float32), compute_uv=False)
    # Round-off may leave tiny values where exact zeros belong: an example's spectrum is min(lq, lk) long.
    rank_bound = jnp.minimum(query_lengths, key_lengths)[:, None, None]
    return jnp.where(jnp.arange(s.shape[-1]) < rank_bound, s, 0.0)


def attention_spectra(weights: dict, query_lengths: dict, key_lengths: dict) -> dict[str, np.ndarray]:
    """role -> [num_layers, num_examples, num_heads, min(Lq, Lk)] numpy singular values, descending: float64
    (float32 on a TPU).

    weights[role] is [num_layers, num_examples, num_heads, Lq, Lk] (padded; a jax array stays where it
    is): example e's spectrum is that of w[:query_lengths[role][e], :key_lengths[role][e]], followed by
    zeros. The SVDs run one layer at a time (bounding the float64 copy to one layer's matrices); only the
    singular values come back, in one transfer.
    """
    if jax.default_backend() == "tpu":  # TPUs have no float64 SVD: float32's rare off-by-one there
        return _spectra(weights, query_lengths, key_lengths)
    with jax.enable_x64(True):
        return _spectra(weights, query_lengths, key_lengths)


def _spectra(weights: dict, query_lengths: dict, key_lengths: dict) -> dict[str, np.ndarray]:
    spectra = {}
    for role, w in weights.items():
        lq, lk = jnp.asarray(query_lengths[role]), jnp.asarray(key_lengths[role])
        spectra[role] = jnp.stack([_layer_spectra(w[layer], lq, lk) for layer in range(w.shape[0])])
    host = jax.device_get(spectra)
    return {role: host[role] for role in weights}  # in the roles' order: a pytree's dict comes back sorted


def summarize_attention(
    spectra: dict[str, np.ndarray],
    query_lengths: dict[str, np.ndarray],
    key_lengths: dict[str, np.ndarray],
    rank_bounds: dict[str, list[int | None]],
) -> list[dict]:
    """One row per (role, layer, head) with rank metrics averaged over examples, and the rank bound checked
    on each example's matrix.

    spectra[role] is attention_spectra's [num_layers, num_examples, num_heads, n]; example e's matrix is
    query_lengths[role][e] x key_lengths[role][e]. A row's "seq_len" is the mean key length over the
    examples, rounded to int; "max_numerical_rank" the largest over the examples' matrices; "rank_bound" is
    rank_bounds[role]; "matrices" is the number of examples;
    "matrices_bindable" counts those whose shorter side exceeds the bound, "matrices_over_bound" those whose
    numerical rank does (both None without a bound). rank_bounds[role] holds one bound per layer: a role's
    layers may differ in kind (model.layer_kinds).
    """
    rows = []
    for role, s in spectra.items():
        num_layers, num_examples, num_heads = s.shape[:3]
        size = np.maximum(query_lengths[role], key_lengths[role])[:, None]  # [examples, 1] against [.., E, H]
        metrics = spectrum_metrics(s, size)
        means = {name: values.mean(axis=1) for name, values in metrics.items()}
        seq_len = int(round(float(np.mean(key_lengths[role]))))
        shorter_sides = np.minimum(query_lengths[role], key_lengths[role])
        for layer in range(num_layers):
            bound = rank_bounds[role][layer]
            # A matrix's rank is at most its shorter side, so a bound at or above that side cannot bind on it.
            bindable = None if bound is None else int(np.sum(shorter_sides > bound))
            over = None if bound is None else np.sum(metrics["numerical_rank"][layer] > bound, axis=0)  # [heads]
            for head in range(num_heads):
                rows.append(
                    {"role": role, "layer": layer, "head": head, "seq_len": seq_len}
                    | {name: float(means[name][layer, head]) for name in METRIC_NAMES}
                    | {"max_numerical_rank": int(metrics["numerical_rank"][layer, :, head].max())}
                    | {"rank_bound": bound, "matrices": num_examples, "matrices_bindable": bindable,
                       "matrices_over_bound": None if over is None else int(over[head])}
                )
    return rows


def mean_spectrum(spectra_role: np.ndarray, query_lengths, key_lengths) -> np.ndarray:
    """[num_layers, max_len]: singular values divided by the largest, averaged over examples and heads.

    spectra_role is attention_spectra's [num_layers, num_examples, num_heads, n] of one role; example
    e's spectrum has min(query_lengths[e], key_lengths[e]) values, padded with zeros up to the longest.
    """
    num_examples, num_heads = spectra_role.shape[1:3]
    max_len = int(np.max(np.minimum(query_lengths, key_lengths)))
    largest = spectra_role[..., :1]
    normalised = np.divide(spectra_role, largest, out=np.zeros_like(spectra_role), where=largest > 0)
    return normalised[..., :max_len].sum(axis=(1, 2)) / (num_examples * num_heads)
