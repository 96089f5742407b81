"""analysis/shape.py: each row metric against a numpy reference that loops over rows (scipy's entropy, numpy's
std of the scores), on hand-made weights: uniform and one-hot rows, softmaxes of known scores, masked keys
holding junk, negative weights, causal masks and selections of rows."""
import numpy as np
import pytest
from scipy import stats as scipy_stats

from analysis import shape

FLOOR = np.finfo(np.float32).tiny


def reference_row(weights: np.ndarray, allowed: np.ndarray) -> dict:
    """One row's metrics from its allowed keys alone: the positive part renormalised for the distribution,
    logs of the weights floored at float32's smallest normal for the spread."""
    kept = weights[allowed].astype(np.float64)
    p = np.clip(kept, 0, None) / np.clip(kept, 0, None).sum()
    entropy = scipy_stats.entropy(p)
    return {"row_entropy": entropy, "entropy_fraction": entropy / np.log(len(kept)) if len(kept) > 1 else None,
            "top1_weight": p.max(), "top1_above_half": float(p.max() > 0.5),
            "logit_spread": np.std(np.log(np.maximum(kept, FLOOR))),
            "negative_mass": -kept[kept < 0].sum() / np.abs(kept).sum(), "row_sum_deviation": abs(kept.sum() - 1)}


def reference_head_means(weights, allowed, selected) -> dict:
    """[H] means of reference_row over the selected rows of weights [B, H, Lq, Lk] (allowed [B, Lq, Lk])."""
    batch, heads, queries, _ = weights.shape
    means = {}
    for metric in shape.METRIC_NAMES:
        per_head = []
        for head in range(heads):
            values = [reference_row(weights[b, head, q], allowed[b, q])[metric]
                      for b in range(batch) for q in range(queries) if selected[b, q]]
            values = [value for value in values if value is not None]
            per_head.append(np.mean(values) if values else np.nan)
        means[metric] = np.array(per_head)
    return means


def _masked_softmax(scores, allowed):
    shifted = np.where(allowed, scores - scores.max(-1, keepdims=True), -np.inf)
    exp = np.exp(shifted)
    return exp / exp.sum(-1, keepdims=True)


def _padding(key_lengths, queries: int, keys: int) -> np.ndarray:
    """[B, Lq, Lk]: the first key_lengths[b] keys of every row."""
    return np.broadcast_to((np.arange(keys) < np.array(key_lengths)[:, None])[:, None, :],
                           (len(key_lengths), queries, keys))


def _means(weights, allowed, selected=None, softmax=True) -> dict:
    rows = shape.row_metrics(weights, allowed[:, None])
    selected = np.ones(weights.shape[:1] + weights.shape[2:3], bool) if selected is None else selected
    return shape.head_means(rows, selected, softmax)


def test_uniform_rows_have_entropy_log_n_fraction_1_and_top1_1_over_n():
    allowed = _padding([5, 3], 2, 5)
    n = allowed.sum(-1)  # [B, Lq]: 5 and 3 keys
    weights = np.where(allowed, 1.0 / n[..., None], 0.7)[:, None].repeat(2, axis=1)  # junk on the padding keys
    means = _means(weights, allowed)
    assert means["row_entropy"] == pytest.approx([np.mean(np.log(n))] * 2)
    assert means["entropy_fraction"] == pytest.approx([1.0, 1.0])
    assert means["top1_weight"] == pytest.approx([np.mean(1.0 / n)] * 2)
    assert list(means["top1_above_half"]) == [0.0, 0.0]
    assert means["logit_spread"] == pytest.approx([0.0, 0.0], abs=1e-6)  # equal scores
    assert list(means["rows"]) == [4, 4]


def test_one_hot_rows_have_entropy_0_top1_1_and_all_above_half():
    allowed = _padding([4], 3, 4)
    weights = np.eye(4)[[0, 2, 3]][None, None]
    means = _means(weights, allowed)
    assert (means["row_entropy"], means["entropy_fraction"]) == (pytest.approx([0.0]), pytest.approx([0.0]))
    assert (means["top1_weight"], means["top1_above_half"]) == (pytest.approx([1.0]), pytest.approx([1.0]))
    # The three zero weights count at the floor: the std of one 0 and three log(floor)s.
    assert means["logit_spread"] == pytest.approx([np.std([0.0] + 3 * [np.log(FLOOR)])], rel=1e-5)


def test_the_logit_spread_of_a_softmax_is_the_std_of_its_scores_over_the_allowed_keys():
    rng = np.random.default_rng(0)
    scores = rng.normal(0, 3, (2, 3, 4, 6))
    allowed = _padding([6, 4], 4, 6) & (np.arange(6) <= np.arange(4)[:, None] + 1)  # padding and a band
    rows = shape.row_metrics(_masked_softmax(scores, allowed[:, None]), allowed[:, None])
    expected = [[[np.std(scores[b, h, q][allowed[b, q]]) for q in range(4)] for h in range(3)] for b in range(2)]
    np.testing.assert_allclose(rows["logit_spread"], expected, rtol=1e-4)


def test_junk_on_masked_keys_changes_nothing_and_each_row_matches_the_reference():
    rng = np.random.default_rng(1)
    allowed = _padding([7, 5, 2], 3, 7) & (rng.random((3, 3, 7)) < 0.8)
    allowed[:, :, 0] = True  # every row has a key
    weights = np.where(allowed[:, None], rng.dirichlet(np.ones(7), (3, 2, 3)), 0.0)
    junk = np.where(allowed[:, None], weights, 5.0)
    rows = shape.row_metrics(junk, allowed[:, None])
    for b, h, q in np.ndindex(3, 2, 3):
        reference = reference_row(weights[b, h, q], allowed[b, q])
        assert rows["entropy"][b, h, q] == pytest.approx(reference["row_entropy"], abs=1e-5)
        assert rows["top1"][b, h, q] == pytest.approx(reference["top1_weight"], rel=1e-6)
        assert rows["logit_spread"][b, h, q] == pytest.approx(reference["logit_spread"], rel=1e-4)
        assert rows["keys"][b, h, q] == allowed[b, q].sum()
    means = _means(junk, allowed)
    expected = reference_head_means(weights, allowed, np.ones((3, 3), bool))
    for metric in shape.METRIC_NAMES:
        np.testing.assert_allclose(means[metric], expected[metric], rtol=1e-4, atol=1e-6)


def test_a_selection_averages_its_rows_only_and_single_key_rows_leave_the_fraction():
    rng = np.random.default_rng(2)
    allowed = np.broadcast_to(np.tril(np.ones((5, 5), bool)), (2, 5, 5))  # causal: row 0 has one key
    weights = np.where(allowed[:, None], rng.random((2, 3, 5, 5)), 0.0)
    weights /= weights.sum(-1, keepdims=True)
    selected = np.array([[True, False, True, True, False], [True, True, False, False, False]])
    means = _means(weights, allowed, selected)
    expected = reference_head_means(weights, allowed, selected)
    for metric in shape.METRIC_NAMES:
        np.testing.assert_allclose(means[metric], expected[metric], rtol=1e-5, atol=1e-6)
    assert list(means["rows"]) == [5, 5, 5]
    only_first = np.zeros((2, 5), bool)
    only_first[:, 0] = True
    first = _means(weights, allowed, only_first)
    assert np.isnan(first["entropy_fraction"]).all() and first["row_entropy"] == pytest.approx([0, 0, 0])


def test_negative_weights_measure_the_renormalised_positive_part_without_nan():
    weights = np.array([[[[0.6, 0.6, -0.2], [-0.1, -0.3, 0.0]]]])  # the second row has no positive weight
    allowed = np.ones((1, 2, 3), bool)
    means = _means(weights, allowed, softmax=True)
    # Row 0 as [0.5, 0.5, 0]; row 1 is left out.
    assert list(means["rows"]) == [1]
    assert means["row_entropy"] == pytest.approx([np.log(2)])
    assert means["entropy_fraction"] == pytest.approx([np.log(2) / np.log(3)])
    assert (means["top1_weight"], means["top1_above_half"]) == (pytest.approx([0.5]), pytest.approx([0.0]))
    assert means["logit_spread"] == pytest.approx([np.std(np.log([0.6, 0.6, FLOOR]))], rel=1e-5)
    assert means["negative_mass"] == pytest.approx([0.2 / 1.4]) and means["row_sum_deviation"] == pytest.approx([0], abs=1e-6)


def test_signed_rows_and_rows_of_another_sum_show_in_negative_mass_and_row_sum_deviation():
    """A distribution has 0 of both; softmax_rank's projected rows hold some negative weight and sum to about 1;
    local_predictive's rows sum to less than 1."""
    weights = np.array([[[[0.25, 0.25, 0.5], [0.7, 0.5, -0.1], [0.2, 0.2, 0.1]]]])
    means = _means(weights, np.ones((1, 3, 3), bool))
    assert means["negative_mass"] == pytest.approx([(0 + 0.1 / 1.3 + 0) / 3])
    assert means["row_sum_deviation"] == pytest.approx([(0 + 0.1 + 0.5) / 3])


def test_outside_the_softmax_family_there_is_no_logit_spread():
    allowed = _padding([3], 2, 3)
    means = _means(np.full((1, 1, 2, 3), 1 / 3), allowed, softmax=False)
    assert np.isnan(means["logit_spread"]).all() and means["row_entropy"] == pytest.approx([np.log(3)])


def test_attention_rows_mask_causal_keys_at_each_querys_position_and_summarize_writes_rows_per_selection():
    """A causal role whose rows sit at given positions (recall's query rows), uniform over the keys up to
    each: fraction 1 and entropy log(position + 1) only if the causal mask follows the positions; a cross
    role without it."""
    positions = np.array([[3, 1], [0, 4]])
    key_lengths = np.array([5, 5])
    causal_allowed = np.arange(5) <= positions[:, :, None]  # [B, Lq, Lk]
    causal = np.where(causal_allowed, 1.0 / (positions[:, :, None] + 1), 0.0)[None, :, None]  # [1, B, 1, 2, 5]
    cross_allowed = _padding([5, 3], 2, 5)
    rng = np.random.default_rng(3)
    cross = _masked_softmax(rng.normal(size=(2, 2, 2, 5)), cross_allowed[:, None])[None]
    weights = {"decoder_self": causal, "cross": cross}
    rows = shape.attention_rows(weights, {"decoder_self": key_lengths, "cross": np.array([5, 3])},
                                {"decoder_self": positions, "cross": np.tile(np.arange(2), (2, 1))},
                                causal_roles=("decoder_self",))
    assert list(rows) == ["decoder_self", "cross"] and rows["cross"]["entropy"].shape == (1, 2, 2, 2)
    everything, nothing = np.ones((2, 2), bool), np.zeros((2, 2), bool)
    summary = shape.summarize_shape(rows, {"decoder_self": {"all": everything},
                                           "cross": {"all": everything, "none": nothing}},
                                    {"decoder_self": [True], "cross": [False]})
    assert [(row["role"], row["query_rows"], row["layer"], row["head"]) for row in summary] == [
        ("decoder_self", "all", 0, 0), ("cross", "all", 0, 0), ("cross", "all", 0, 1)]
    causal_row, cross_row = summary[0], summary[1]
    assert set(causal_row) == {"role", "layer", "head", "query_rows", "rows", *shape.METRIC_NAMES}
    assert causal_row["rows"] == 4
    assert causal_row["row_entropy"] == pytest.approx(np.mean(np.log(positions + 1)))
    assert causal_row["entropy_fraction"] == pytest.approx(1.0)  # the position-0 row has one key: left out
    assert causal_row["logit_spread"] == pytest.approx(0.0, abs=1e-6)
    expected = reference_head_means(cross[0], cross_allowed, everything)
    assert cross_row["row_entropy"] == pytest.approx(expected["row_entropy"][0], rel=1e-5)
    assert cross_row["logit_spread"] is None


def test_keeps_every_key_is_declared_by_the_kinds_whose_weights_are_positive_on_every_allowed_key():
    """The logit spread reads log(weight) as a score: only where no allowed key's weight is 0 (or below)."""
    from flax import nnx

    import attention
    from attention.score_base import ScoreAttention

    q, k = np.random.default_rng(0).normal(size=(2, 1, 64, 2, 8)).astype(np.float32)  # 64 keys: above rank 32
    for name in attention.names():
        kind = attention.create(name, num_heads=2, head_dim=8, d_model=16, rngs=nnx.Rngs(0))
        if isinstance(kind, ScoreAttention):
            weights = np.asarray(kind.weights(q, k))
            assert kind.keeps_every_key == bool((weights > 0).all()), name
