"""Rank metrics of attention matrices, computed in float64 on the unpadded part of each matrix."""

import numpy as np

# Attention matrices are computed in float32, so singular values below float32 round-off are noise.
FLOAT32_EPS = float(np.finfo(np.float32).eps)

METRIC_NAMES = ("numerical_rank", "effective_rank", "stable_rank")


def singular_values(matrix) -> np.ndarray:
    """Singular values over the last two axes, float64, in descending order."""
    return np.linalg.svd(np.asarray(matrix, dtype=np.float64), compute_uv=False)


def numerical_rank(s, shape) -> int:
    """Number of singular values above s_max * max(shape) * eps_float32 (0 for an all-zero matrix)."""
    s = np.asarray(s, dtype=np.float64)
    if s.size == 0 or s[0] == 0.0:
        return 0
    return int(np.sum(s > s[0] * max(shape) * FLOAT32_EPS))


def effective_rank(s) -> float:
    """Roy & Vetterli (2007): exp of the Shannon entropy of the normalised spectrum s / sum(s)."""
    s = np.asarray(s, dtype=np.float64)
    total = s.sum()
    if total == 0.0:
        return 0.0
    p = s[s > 0] / total  # dropping zeros is the convention 0 log 0 = 0
    return float(np.exp(-np.sum(p * np.log(p))))


def stable_rank(s) -> float:
    """sum(s^2) / s_max^2: squared Frobenius over squared spectral norm."""
    s = np.asarray(s, dtype=np.float64)
    if s.size == 0 or s[0] == 0.0:
        return 0.0
    return float(np.sum(s**2) / s[0] ** 2)


def rank_metrics(matrix) -> dict:
    """The three metrics of one matrix, as python floats."""
    matrix = np.asarray(matrix)
    s = singular_values(matrix)
    return _metrics_of_spectrum(s, matrix.shape)


def _metrics_of_spectrum(s, shape) -> dict:
    return {
        "numerical_rank": float(numerical_rank(s, shape)),
        "effective_rank": effective_rank(s),
        "stable_rank": stable_rank(s),
    }


def summarize_attention(
    weights: dict[str, np.ndarray],
    query_lengths: dict[str, np.ndarray],
    key_lengths: dict[str, np.ndarray],
    rank_bounds: dict[str, int | None],
) -> list[dict]:
    """One row per (role, layer, head) with rank metrics averaged over examples.

    weights[role] is [num_layers, num_examples, num_heads, Lq, Lk] (padded); the metrics of example e are
    computed on w[:query_lengths[role][e], :key_lengths[role][e]]. A row's "seq_len" is the mean key
    length over the examples, rounded to int; "rank_bound" is rank_bounds[role].
    """
    rows = []
    for role, w in weights.items():
        num_layers, num_examples, num_heads = w.shape[:3]
        totals = np.zeros((num_layers, num_heads, len(METRIC_NAMES)))
        for e in range(num_examples):
            lq, lk = int(query_lengths[role][e]), int(key_lengths[role][e])
            spectra = singular_values(w[:, e, :, :lq, :lk])  # [num_layers, num_heads, min(lq, lk)]
            for layer in range(num_layers):
                for head in range(num_heads):
                    metrics = _metrics_of_spectrum(spectra[layer, head], (lq, lk))
                    totals[layer, head] += [metrics[name] for name in METRIC_NAMES]
        means = totals / num_examples
        seq_len = int(round(float(np.mean(key_lengths[role]))))
        for layer in range(num_layers):
            for head in range(num_heads):
                rows.append(
                    {"role": role, "layer": layer, "head": head, "seq_len": seq_len}
                    | {name: float(means[layer, head, i]) for i, name in enumerate(METRIC_NAMES)}
                    | {"rank_bound": rank_bounds[role]}
                )
    return rows


def mean_spectrum(weights_role: np.ndarray, query_lengths, key_lengths) -> np.ndarray:
    """[num_layers, max_len]: singular values divided by the largest, averaged over examples and heads.

    weights_role is [num_layers, num_examples, num_heads, Lq, Lk] (padded); spectra of shorter matrices
    are padded with zeros up to the longest one.
    """
    num_layers, num_examples, num_heads = weights_role.shape[:3]
    spectra = [
        singular_values(weights_role[:, e, :, : int(query_lengths[e]), : int(key_lengths[e])])
        for e in range(num_examples)
    ]
    max_len = max(s.shape[-1] for s in spectra)
    total = np.zeros((num_layers, max_len))
    for s in spectra:
        largest = s[..., :1]
        normalised = np.divide(s, largest, out=np.zeros_like(s), where=largest > 0)
        total[:, : s.shape[-1]] += normalised.sum(axis=1)
    return total / (num_examples * num_heads)
