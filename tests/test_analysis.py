import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from analysis import plots, rank
from models import MaskedLanguageModel, TransformerSpec
from training import evaluation

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_numerical_rank_of_random_square_matrix_is_full(rng):
    assert rank.rank_metrics(rng.normal(size=(50, 50)))["numerical_rank"] == 50


def test_numerical_rank_of_low_rank_product(rng):
    u, v = rng.normal(size=(50, 7)), rng.normal(size=(50, 7))
    assert rank.rank_metrics(u @ v.T)["numerical_rank"] == 7


def test_numerical_rank_of_zeros_is_zero():
    assert rank.rank_metrics(np.zeros((6, 4)))["numerical_rank"] == 0


def test_numerical_rank_of_row_stochastic_linear_attention(rng):
    # Row normalisation is a diagonal scaling, so phi(Q) phi(K)^T keeps its rank r.
    phi_q = np.exp(rng.normal(size=(50, 7)))
    phi_k = np.exp(rng.normal(size=(50, 7)))
    scores = phi_q @ phi_k.T
    attention = (scores / scores.sum(axis=1, keepdims=True)).astype(np.float32)
    assert rank.rank_metrics(attention)["numerical_rank"] == 7


@pytest.mark.parametrize("metric", ["effective_rank", "stable_rank"])
def test_soft_ranks_of_identity_and_rank_one(metric, rng):
    assert rank.rank_metrics(np.eye(9))[metric] == pytest.approx(9.0)
    x, y = rng.normal(size=(8, 1)), rng.normal(size=(1, 5))
    assert rank.rank_metrics(x @ y)[metric] == pytest.approx(1.0)


def test_effective_rank_hand_computed():
    expected = math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert rank.effective_rank(np.array([3.0, 1.0])) == pytest.approx(expected)
    assert rank.rank_metrics(np.diag([1.0, 3.0]))["effective_rank"] == pytest.approx(expected)


def test_stable_rank_hand_computed():
    assert rank.stable_rank(np.array([3.0, 1.0])) == pytest.approx(10.0 / 9.0)
    assert rank.rank_metrics(np.diag([1.0, 3.0]))["stable_rank"] == pytest.approx(10.0 / 9.0)


def test_singular_values_descending_float64(rng):
    s = rank.singular_values(rng.normal(size=(5, 3)).astype(np.float32))
    assert s.dtype == np.float64 and np.all(np.diff(s) <= 0)


NUM_LAYERS, NUM_EXAMPLES, NUM_HEADS = 2, 3, 2


def padded_attention(rng, query_lengths, key_lengths, max_q, max_k, feature_dim=None):
    """[layers, examples, heads, max_q, max_k] row-stochastic blocks, garbage in the padding."""
    w = rng.uniform(5.0, 100.0, size=(NUM_LAYERS, NUM_EXAMPLES, NUM_HEADS, max_q, max_k))
    for e, (lq, lk) in enumerate(zip(query_lengths, key_lengths)):
        for layer in range(NUM_LAYERS):
            for head in range(NUM_HEADS):
                if feature_dim is None:
                    scores = np.exp(rng.normal(size=(lq, lk)))
                else:
                    scores = np.exp(rng.normal(size=(lq, feature_dim))) @ np.exp(
                        rng.normal(size=(feature_dim, lk))
                    )
                w[layer, e, head, :lq, :lk] = scores / scores.sum(axis=1, keepdims=True)
    return w


@pytest.fixture
def attention_fixture(rng):
    lengths = {
        "encoder_self": (np.array([4, 7, 6]), np.array([4, 7, 6])),
        "cross": (np.array([3, 5, 2]), np.array([4, 7, 6])),
    }
    weights = {
        "encoder_self": padded_attention(rng, *lengths["encoder_self"], 8, 8, feature_dim=3),
        "cross": padded_attention(rng, *lengths["cross"], 5, 8),
    }
    query_lengths = {role: q for role, (q, _) in lengths.items()}
    key_lengths = {role: k for role, (_, k) in lengths.items()}
    return weights, query_lengths, key_lengths


def test_summarize_attention_uses_only_unpadded_blocks(attention_fixture):
    weights, query_lengths, key_lengths = attention_fixture
    rank_bounds = {"encoder_self": [3, 4], "cross": [None, None]}  # a bound a layer
    spectra = rank.attention_spectra(weights, query_lengths, key_lengths)
    rows = rank.summarize_attention(spectra, query_lengths, key_lengths, rank_bounds)

    assert len(rows) == 2 * NUM_LAYERS * NUM_HEADS
    assert [r["role"] for r in rows] == ["encoder_self"] * 4 + ["cross"] * 4
    for row in rows:
        assert set(row) == {
            "role", "layer", "head", "seq_len", "numerical_rank", "max_numerical_rank", "effective_rank",
            "stable_rank", "rank_bound", "matrices", "matrices_bindable", "matrices_over_bound",
        }
        role, layer, head = row["role"], row["layer"], row["head"]
        blocks = [
            weights[role][layer, e, head, :lq, :lk].astype(np.float32)
            for e, (lq, lk) in enumerate(zip(query_lengths[role], key_lengths[role]))
        ]
        ranks = [np.linalg.matrix_rank(b) for b in blocks]
        expected_rank = np.mean(ranks)
        s = [np.linalg.svd(b.astype(np.float64), compute_uv=False) for b in blocks]
        expected_stable = np.mean([np.sum(x**2) / x[0] ** 2 for x in s])
        p = [x / x.sum() for x in s]
        expected_effective = np.mean([np.exp(-np.sum(q * np.log(q))) for q in p])

        assert row["numerical_rank"] == pytest.approx(expected_rank)
        assert row["max_numerical_rank"] == max(ranks)
        assert row["stable_rank"] == pytest.approx(expected_stable)
        assert row["effective_rank"] == pytest.approx(expected_effective)
        assert row["seq_len"] == round(np.mean(key_lengths[role]))
        assert row["rank_bound"] == rank_bounds[role][layer]
    assert all(r["numerical_rank"] == 3.0 for r in rows if r["role"] == "encoder_self")


def test_summarize_attention_counts_each_matrix_over_its_bound():
    # Spectra of r ones: numerical rank r. [2 layers, 4 examples, 2 heads, 8]: every matrix rank 2, but
    # one of layer 1, head 0's is rank 5, over the bound 3 while that row's mean rank (2.75) is not.
    ranks = np.full((2, 4, 2), 2)
    ranks[1, 2, 0] = 5
    s = (np.arange(8) < ranks[..., None]).astype(np.float64)
    lengths = np.array([8, 8, 8, 8])
    spectra = {"encoder_self": s, "cross": s, "wide": s, "softmax": s}
    query_lengths = {"encoder_self": lengths, "cross": np.array([3, 8, 6, 8]), "wide": lengths, "softmax": lengths}
    key_lengths = {"encoder_self": lengths, "cross": np.array([8, 8, 8, 3]), "wide": lengths, "softmax": lengths}
    bounds = {"encoder_self": [3, 3], "cross": [5, 5], "wide": [8, 8], "softmax": [None, None]}
    rows = rank.summarize_attention(spectra, query_lengths, key_lengths, bounds)

    rows = {(r["role"], r["layer"], r["head"]): r for r in rows}
    assert rows[("encoder_self", 1, 0)]["numerical_rank"] == 2.75
    # (matrices, matrices_bindable, matrices_over_bound): cross's shorter side exceeds 5 in examples 1 and 2
    # only; wide's bound 8 cannot bind on 8 x 8 matrices.
    expected = {"encoder_self": (4, 4, 0), "cross": (4, 2, 0), "wide": (4, 0, 0), "softmax": (4, None, None)}
    for (role, layer, head), row in rows.items():
        counts = (row["matrices"], row["matrices_bindable"], row["matrices_over_bound"])
        assert counts == ((4, 4, 1) if (role, layer, head) == ("encoder_self", 1, 0) else expected[role])


def test_mean_spectrum_of_identities_ignores_padding():
    # Identity blocks of sizes 2 and 4 in garbage padding: normalised spectra [1, 1] and [1, 1, 1, 1].
    w = np.full((1, 2, 3, 4, 4), 7.0)
    w[:, 0, :, :2, :2] = np.eye(2)
    w[:, 1] = np.eye(4)
    lengths = {"encoder_self": np.array([2, 4])}
    spectra = rank.attention_spectra({"encoder_self": w}, lengths, lengths)
    spectrum = rank.mean_spectrum(spectra["encoder_self"], lengths["encoder_self"], lengths["encoder_self"])
    np.testing.assert_allclose(spectrum, [[1.0, 1.0, 0.5, 0.5]])


# --- attention_spectra (device, batched, padded) against rank_metrics (numpy float64, one block at a time) ---

# Both sides are float64 SVDs of the same float32 or float64 entries, which differ by round-off only.
RANK_RTOL = 1e-9


def metrics_per_block(weights, query_lengths, key_lengths) -> dict:
    """[layers, examples, heads] arrays of rank_metrics of each example's unpadded block."""
    weights = np.asarray(weights)
    metrics = {name: np.zeros(weights.shape[:3]) for name in rank.METRIC_NAMES}
    for layer, e, head in np.ndindex(weights.shape[:3]):
        block = weights[layer, e, head, : query_lengths[e], : key_lengths[e]]
        for name, value in rank.rank_metrics(block).items():
            metrics[name][layer, e, head] = value
    return metrics


def assert_device_ranks_match(weights, query_lengths, key_lengths) -> dict:
    """The device path's metrics of every block equal numpy's: the numerical rank exactly, the effective
    and stable ranks within RANK_RTOL. Returns numpy's."""
    lengths = {"role": np.asarray(query_lengths)}, {"role": np.asarray(key_lengths)}
    spectra = rank.attention_spectra({"role": weights}, *lengths)["role"]
    actual = rank.spectrum_metrics(spectra, np.maximum(query_lengths, key_lengths)[:, None])
    expected = metrics_per_block(weights, query_lengths, key_lengths)
    np.testing.assert_array_equal(actual["numerical_rank"], expected["numerical_rank"])
    for name in ("effective_rank", "stable_rank"):
        np.testing.assert_allclose(actual[name], expected[name], rtol=RANK_RTOL)
    return expected


@pytest.mark.parametrize("num_queries", [40, 24])
def test_device_ranks_of_products_of_known_rank(rng, num_queries):
    ranks = np.array([[1, 3], [5, 8], [12, 20]])  # [examples, heads]
    weights = np.zeros((1, *ranks.shape, num_queries, 40), np.float32)
    for e, head in np.ndindex(ranks.shape):
        r = ranks[e, head]
        weights[0, e, head] = rng.normal(size=(num_queries, r)) @ rng.normal(size=(r, 40))
    lengths = np.full(len(ranks), num_queries), np.full(len(ranks), 40)
    expected = assert_device_ranks_match(weights, *lengths)
    np.testing.assert_array_equal(expected["numerical_rank"][0], ranks)


def test_device_ranks_of_padded_examples_of_different_lengths(attention_fixture):
    weights, query_lengths, key_lengths = attention_fixture
    for role in weights:
        assert_device_ranks_match(weights[role], query_lengths[role], key_lengths[role])
    # Each example's spectrum: its block's min(lq, lk) singular values, then exact zeros.
    spectra = rank.attention_spectra(weights, query_lengths, key_lengths)
    for role, w in weights.items():
        for e, (lq, lk) in enumerate(zip(query_lengths[role], key_lengths[role])):
            block_spectra = rank.singular_values(w[:, e, :, :lq, :lk])
            # Singular values at float64's rounding (s_max * 1e-16) carry no digits: compared in absolute terms.
            np.testing.assert_allclose(spectra[role][:, e, :, : min(lq, lk)], block_spectra, rtol=RANK_RTOL,
                                       atol=1e-13 * block_spectra.max())
            assert np.all(spectra[role][:, e, :, min(lq, lk):] == 0.0)


def softmax_of_random_scores(seed, heads=16, length=256, dim=4, temperature=2.0) -> np.ndarray:
    """[1, 1, heads, length, length] float32 softmax(temperature * q k^T / sqrt(dim)), q and k normal."""
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(2, heads, length, dim))
    scores = temperature * q @ k.transpose(0, 2, 1) / np.sqrt(dim)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)).astype(np.float32)[None, None]


def test_device_numerical_rank_of_softmax_near_the_threshold():
    # A spectrum that decays through the threshold, with a singular value close to it: for head 8 of these
    # draws a float32 SVD counted 205 on this machine where float64 counts 206. The device's SVD is float64.
    weights = softmax_of_random_scores(seed=20)[:, :, 8:9]
    lengths = np.array([256])
    assert 150 < assert_device_ranks_match(weights, lengths, lengths)["numerical_rank"].item() < 256


@pytest.mark.parametrize("kind", ["softmax", "linear"])
def test_device_ranks_of_a_tiny_models_attention(rng, kind):
    spec = TransformerSpec(num_layers=2, d_model=16, num_heads=2, mlp_dim=32, dropout_rate=0.0, max_len=24,
                           attention={"encoder_self": kind})
    model = MaskedLanguageModel(20, spec, rngs=nnx.Rngs(0))
    lengths = np.array([24, 17, 9])
    inputs = np.where(np.arange(24) < lengths[:, None], rng.integers(4, 20, (3, 24)), 0)  # 0 is the padding id
    weights = evaluation.attention_weights(model, lambda m, b: m(b["inputs"]), {"inputs": jnp.asarray(inputs)})
    numerical = assert_device_ranks_match(weights["encoder_self"], lengths, lengths)["numerical_rank"]
    if kind == "linear":  # elu + 1 features of 8-wide heads: rank at most 8
        assert np.all(numerical <= 8)


def assert_png(path):
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE


def test_plot_attention_heatmaps_writes_png(tmp_path, rng):
    weights = {
        "encoder_self": rng.uniform(size=(2, 2, 4, 4)),
        "cross": rng.uniform(size=(2, 2, 3, 4)),
    }
    source, target = ["a", "b", "c", "d"], ["x", "y", "z"]
    path = plots.plot_attention_heatmaps(
        weights,
        {"encoder_self": source, "cross": target},
        {"encoder_self": source, "cross": source},
        str(tmp_path / "plots" / "heatmaps.png"),
        "runs/x | softmax | step 20",
    )
    assert path == str(tmp_path / "plots" / "heatmaps.png")
    assert_png(path)


def test_plot_spectra_writes_png(tmp_path):
    spectra = {
        "encoder_self": np.array([[1.0, 0.5, 1e-9, 0.0], [1.0, 0.3, 0.1, 0.0]]),
        "decoder_self": np.array([[1.0, 0.8, 0.6, 0.4]]),
    }
    path = plots.plot_spectra(
        spectra, {"encoder_self": 2, "decoder_self": None}, str(tmp_path / "spectra.png"), "runs/x | linear | step 5"
    )
    assert_png(path)
