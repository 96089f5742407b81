"""analysis/kernel_approx.py against closed forms; demos/kernel_approx.py end to end, through python -m
scripts.kernel_approx, on a small study."""
import json
import math

import jax
import numpy as np
import pytest

import scripts.kernel_approx
from analysis import kernel_approx

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DIM = 4


def _pair(cosine: float, norm: float) -> tuple[np.ndarray, np.ndarray]:
    """One (q, k) pair as [1, DIM] arrays of the given norm and cosine, so q.k = norm^2 * cosine."""
    q = np.zeros((1, DIM))
    k = np.zeros((1, DIM))
    q[0, 0] = norm
    k[0, :2] = norm * cosine, norm * math.sqrt(1 - cosine**2)
    return q, k


def _relative_error(estimate: float, logit: float) -> float:
    return abs(estimate - math.exp(logit)) / math.exp(logit)


@pytest.mark.parametrize("cosine", [0.6, -0.6])
@pytest.mark.parametrize("order", [1, 2, 4])
def test_taylor_error_matches_closed_form(order, cosine):
    q, k = _pair(cosine, norm=2 * DIM**0.25)
    logit = 4 * cosine
    expected = _relative_error(sum(logit**j / math.factorial(j) for j in range(order + 1)), logit)
    with jax.enable_x64(True):
        assert kernel_approx.taylor_error(q, k, order) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("cosine", [0.6, -0.6])
@pytest.mark.parametrize("n", [1, 3, 6])
def test_exp_limit_error_matches_closed_form(n, cosine):
    q, k = _pair(cosine, norm=2 * DIM**0.25)
    logit = 4 * cosine
    expected = _relative_error((1 + logit / n) ** n, logit)
    with jax.enable_x64(True):
        assert kernel_approx.exp_limit_error(q, k, n) == pytest.approx(expected, rel=1e-9)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """The script's JSON and PNG for a small study, and its printed report."""
    out = tmp_path_factory.mktemp("kernel_approx")
    scripts.kernel_approx.main(["--dim", str(DIM), "--out", str(out), "--seed", "1", "--pairs", "16", "--draws", "8"])
    with open(out / "kernel_approx.json") as f:
        return json.load(f), (out / "kernel_approx.png").read_bytes()


def _error(result: dict, kernel: str, feature_dim: int, norm: float) -> float:
    [row] = [row for row in result["kernels"]
             if (row["kernel"], row["feature_dim"], row["norm"]) == (kernel, feature_dim, norm)]
    return row["relative_error"]


def test_json_has_documented_keys(outputs):
    result, _ = outputs
    assert set(result) == set(kernel_approx.RESULT_KEYS)
    assert all(set(row) == set(kernel_approx.ROW_KEYS) for row in result["kernels"])
    assert {row["kernel"] for row in result["kernels"]} == set(kernel_approx.FAMILIES)
    assert result["norms"] == pytest.approx([scale * DIM**0.25 for scale in kernel_approx.NORM_SCALES])


def test_plot_is_png(outputs):
    assert outputs[1].startswith(PNG_SIGNATURE)


def test_exact_expansions_improve_with_order(outputs):
    result, _ = outputs
    norm = result["norms"][kernel_approx.NORM_SCALES.index(1.0)]
    taylor = kernel_approx.family_curve(result, "taylor", norm)[1]
    exp_limit = kernel_approx.family_curve(result, "exp_limit", norm)[1]
    assert taylor[-1] < taylor[0] and exp_limit[-1] < exp_limit[0]


@pytest.mark.parametrize("kernel", ["performer_orthogonal", "performer_iid"])
def test_performer_improves_with_features(outputs, kernel):
    result, _ = outputs
    norm = result["norms"][kernel_approx.NORM_SCALES.index(1.0)]
    # Monte Carlo error falls as 1/sqrt(m): 64 times the features should at least halve it.
    assert _error(result, kernel, 64 * DIM, norm) < 0.5 * _error(result, kernel, DIM, norm)
