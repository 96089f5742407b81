"""Summaries of a metric over the seeds of a run."""
import numpy as np
from scipy import stats


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample std (ddof=1); no std from a single value."""
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) >= 2 else None


def mean_std_text(values: list[float]) -> str:
    """mean_std as a table cell: "0.3860 ± 0.0080", "0.3860 ± -" for a single value."""
    mean, std = mean_std(values)
    return f"{mean:.4f} ± {'-' if std is None else f'{std:.4f}'}"


def paired_difference(values: dict[int, float], reference: dict[int, float]) -> tuple[float, float | None]:
    """Mean of values[s] - reference[s] over the seeds s both have, and the half-width of its 95% interval
    (Student's t with n - 1 degrees of freedom: the seed fixes data order, masking and initialisation for
    both, so the runs pair by seed); no interval from one pair."""
    mean, half_width, _ = paired_combination([(1.0, values), (-1.0, reference)])
    return mean, half_width


def paired_combination(terms: list[tuple[float, dict[int, float]]]) -> tuple[float, float | None, int]:
    """sum of weight x values[s] over the terms, for each seed s that every term has: the mean over those
    seeds, the half-width of its 95% interval (as paired_difference's), and how many seeds."""
    seeds = sorted(set.intersection(*(set(values) for _, values in terms)))
    combined = [sum(weight * values[seed] for weight, values in terms) for seed in seeds]
    mean, std = mean_std(combined)
    if std is None:
        return mean, None, len(seeds)
    return mean, float(stats.t.ppf(0.975, len(seeds) - 1) * std / np.sqrt(len(seeds))), len(seeds)
