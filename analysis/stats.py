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
    seeds = sorted(set(values) & set(reference))
    differences = np.array([values[seed] - reference[seed] for seed in seeds])
    mean, std = mean_std(list(differences))
    if std is None:
        return mean, None
    return mean, float(stats.t.ppf(0.975, len(differences) - 1) * std / np.sqrt(len(differences)))
