"""demos/nadaraya_watson.py and demos/attention_scale.py: their estimators against references written here,
the effects their reports claim, and each end to end through its script (python -m scripts.<name>) on a small
setting."""
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import attention
import scripts.attention_scale
import scripts.nadaraya_watson
from demos import attention_scale
from demos import nadaraya_watson as nw

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PNG_BYTES = 150_000
KEYS = np.array([0.0, 0.4, 1.7, 2.2, 3.9], np.float32)
VALUES = np.array([1.0, -2.0, 0.5, 3.0, 4.0], np.float32)
QUERIES = np.array([0.0, 1.0, 2.5, 4.9], np.float32)


def _kernel_regression(queries, keys, values, width):
    """sum_i K(x - x_i) y_i / sum_j K(x - x_j), K(u) = exp(-(u w)^2 / 2), one query at a time in float64."""
    estimates = []
    for query in queries:
        kernel = [math.exp(-(((query - key) * width) ** 2) / 2) for key in keys]
        estimates.append(sum(k * v for k, v in zip(kernel, values)) / sum(kernel))
    return np.array(estimates)


def test_fixed_kernel_matches_reference():
    expected = _kernel_regression(QUERIES, KEYS, VALUES, 1.0)
    np.testing.assert_allclose(nw.kernel_weights(QUERIES, KEYS, 1.0) @ VALUES, expected, rtol=1e-5, atol=1e-6)
    # The kind as created, untouched: at head_dim 1 its precision starts at 1, the fixed kernel.
    kind = attention.create("gaussian", num_heads=1, head_dim=1, rngs=nnx.Rngs(0))
    np.testing.assert_allclose(nw.attend(kind, QUERIES, KEYS, VALUES), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("width", [0.5, 3.0])
def test_gaussian_kind_at_width_w_is_the_closed_form(width):
    kind = nw.gaussian_kind(width)
    assert nw.kind_width(kind) == pytest.approx(width, rel=1e-5)
    expected = _kernel_regression(QUERIES, KEYS, VALUES, width)
    np.testing.assert_allclose(nw.attend(kind, QUERIES, KEYS, VALUES), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(nw.attention_weights(kind, QUERIES, KEYS), nw.kernel_weights(QUERIES, KEYS, width),
                               atol=1e-5)


def test_leave_one_out_drops_each_point_itself():
    kind = nw.gaussian_kind(2.0)
    predictions = nw.attend(kind, KEYS, KEYS, VALUES, nw.leave_one_out_mask(len(KEYS)))
    for i in range(len(KEYS)):
        others = np.arange(len(KEYS)) != i
        expected = _kernel_regression(KEYS[i:i + 1], KEYS[others], VALUES[others], 2.0)
        assert predictions[i] == pytest.approx(expected[0], rel=1e-4)
    assert np.all(np.diag(nw.kernel_weights(KEYS, KEYS, 2.0, leave_one_out=True)) == 0)


def test_training_the_width_lowers_the_loss_and_beats_the_baselines():
    x_train, y_train, x_test, y_test = nw.make_data(seed=0, num_train=50, noise_std=0.5)
    kind, losses = nw.train_width(x_train, y_train, steps=100, learning_rate=1.0)
    assert losses[-1] < 0.8 * losses[0]
    assert nw.kind_width(kind) > 1.5  # narrower than the fixed kernel
    learned = nw.mse(nw.attend(kind, x_test, x_train, y_train), y_test)
    fixed = nw.mse(nw.attend(nw.gaussian_kind(1.0), x_test, x_train, y_train), y_test)
    assert learned < 0.5 * fixed < 0.5 * nw.mse(np.full_like(y_test, y_train.mean()), y_test)


@pytest.mark.parametrize("dim", [16, 256])
def test_dot_product_variance_is_d(dim):
    variance = attention_scale.dot_product_variance(np.random.default_rng(0), dim, pairs=20_000)
    assert variance == pytest.approx(dim, rel=0.1)


def test_entropy_and_jacobian_match_autodiff():
    scores = np.random.default_rng(1).normal(0, 2, (3, 6))
    probabilities = attention_scale.softmax(scores)
    entropy = -np.sum(probabilities * np.log(probabilities), -1)
    np.testing.assert_allclose(attention_scale.row_entropy(scores), entropy, rtol=1e-12)
    jacobians = jax.vmap(jax.jacobian(jax.nn.softmax))(jnp.asarray(scores, jnp.float32))
    np.testing.assert_allclose(attention_scale.softmax_jacobian_norm(probabilities),
                               np.linalg.norm(jacobians, axis=(-2, -1)), rtol=1e-5)


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_query_gradient_matches_autodiff(scale):
    rng = np.random.default_rng(2)
    keys, queries = rng.normal(size=(1, 6, 4)), rng.normal(size=(1, 3, 4))
    probabilities = attention_scale.softmax(np.einsum("srd,sld->srl", queries, keys) * scale)
    jacobians = jax.vmap(jax.jacobian(lambda q: jax.nn.softmax(jnp.asarray(keys[0], jnp.float32) @ q * scale)))(
        jnp.asarray(queries[0], jnp.float32))
    np.testing.assert_allclose(attention_scale.query_gradient_norm(probabilities, keys, scale)[0],
                               np.linalg.norm(jacobians, axis=(-2, -1)), rtol=1e-5)


@pytest.fixture(scope="module")
def softmax_rows():
    rng = np.random.default_rng(0)
    return {dim: attention_scale.softmax_statistics(rng, dim, length=128, key_sets=8, queries=16)
            for dim in (16, 512)}


def test_scale_keeps_entropy_and_its_absence_collapses_it(softmax_rows):
    narrow, wide = softmax_rows[16], softmax_rows[512]
    assert wide["scaled"]["entropy"] > 0.95 * narrow["scaled"]["entropy"]
    assert wide["unscaled"]["entropy"] < 0.25 * narrow["unscaled"]["entropy"]
    assert wide["unscaled"]["entropy"] < 0.1 * wide["scaled"]["entropy"]


def test_scale_keeps_the_jacobian_and_its_absence_shrinks_it(softmax_rows):
    narrow, wide = softmax_rows[16], softmax_rows[512]
    assert wide["scaled"]["jacobian_mean"] == pytest.approx(narrow["scaled"]["jacobian_mean"], rel=0.2)
    assert wide["unscaled"]["jacobian_mean"] < 0.6 * narrow["unscaled"]["jacobian_mean"]
    assert wide["unscaled"]["jacobian_median"] < 0.1 * narrow["unscaled"]["jacobian_median"]
    assert wide["unscaled"]["jacobian_median"] < 0.2 * wide["scaled"]["jacobian_median"]


def _pngs_are_small(folder, names):
    for name in names:
        data = (folder / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) < MAX_PNG_BYTES, name


def test_nadaraya_watson_script_writes_its_report(tmp_path):
    scripts.nadaraya_watson.main(["--out", str(tmp_path), "--steps", "20"])
    result = json.loads((tmp_path / "results.json").read_text())
    assert set(result["test_mse"]) == set(nw.ESTIMATORS)
    assert result["kind_vs_closed_form_max_abs"] < 1e-4
    assert "weights" not in result
    report = (tmp_path / "report.md").read_text()
    assert f"learned w = {result['width']['learned_kernel']:.4f}" in report
    _pngs_are_small(tmp_path, ["fit.png", "attention.png"])


def _scan_results(path, dot, softmax):
    entry = lambda match: {"step": 7, "split": "test", "metrics": {"exact_match": match}}  # noqa: E731
    path.write_text(json.dumps({"dot": [entry(dot)], "softmax": [entry(softmax)], "linear": [entry(0.5)]}))
    return str(path)


def test_attention_scale_script_reads_the_scan_numbers(tmp_path):
    scan = _scan_results(tmp_path / "kinds.json", dot=0.1234, softmax=0.5678)
    argv = ["--out", str(tmp_path / "out"), "--max_dim", "16", "--pairs", "500", "--key_sets", "2",
            "--queries", "4", "--scan_results", scan]
    scripts.attention_scale.main(argv)
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [row["dim"] for row in result["rows"]] == [2, 4, 8, 16]
    assert result["scan"]["dot"]["exact_match"] == [0.1234]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "0.1234 for `dot` against 0.5678 for `softmax`, one seed" in report
    _pngs_are_small(tmp_path / "out", ["scale.png"])


def test_attention_scale_script_names_missing_scan_results(tmp_path):
    missing = tmp_path / "absent.json"
    with pytest.raises(SystemExit, match=f"{missing}: not found"):
        scripts.attention_scale.main(["--out", str(tmp_path), "--scan_results", str(missing)])
    without_dot = tmp_path / "no_dot.json"
    without_dot.write_text(json.dumps({"softmax": [{"metrics": {"exact_match": 0.9}}]}))
    with pytest.raises(SystemExit, match="no test exact_match for run 'dot'"):
        scripts.attention_scale.main(["--out", str(tmp_path), "--scan_results", str(without_dot)])
