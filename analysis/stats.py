"""Summaries of a metric over the seeds of a run."""
import numpy as np


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample std (ddof=1); no std from a single value."""
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) >= 2 else None
