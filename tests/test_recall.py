"""Associative recall: the generator against Zoology's published one, the model options the task uses
(short convolution, separate query/key width, attention-only blocks, state sizes) against numpy
references, and a tiny run of each form end to end."""
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import stats

from attention import MultiHeadAttention
from configs import recall as recall_config
from data import recall
from models import LanguageModel, TransformerSpec
from models.transformer import EncoderBlock, ShortConvolution
from training import evaluation, loop, validate
from training.metrics import read_metrics
from tasks import recall as recall_task
from training.validate import ConfigError

V, L, N = 64, 32, 4


def _generate(form="causal", count=500, pairs=N, seed=0):
    return recall.generate(count, vocab_size=V, seq_len=L, num_kv_pairs=pairs, seed=seed, form=form)


def _context(data, pairs=N):
    return data["inputs"][:, 0 : 2 * pairs : 2], data["inputs"][:, 1 : 2 * pairs : 2]


# --- the generator ------------------------------------------------------------------------------------------


def test_keys_and_values_come_from_their_halves_distinct_in_each_sequence():
    keys, values = _context(_generate())
    assert keys.min() >= 1 and keys.max() < V // 2
    assert values.min() >= V // 2 and values.max() < V
    for row in (*keys, *values):
        assert len(set(row)) == N


@pytest.mark.parametrize("form", recall.FORMS)
def test_every_key_is_queried_once_and_scored_with_its_own_value(form):
    data = _generate(form)
    keys, values = _context(data)
    shift = 1 if form == "bidirectional" else 0  # the answer sits on the [MASK] after the query
    for example in range(len(keys)):
        answer = dict(zip(keys[example], values[example]))
        queried = data["inputs"][example, data["positions"][example] - shift]
        assert sorted(queried) == sorted(keys[example])  # each key queried exactly once
        assert [answer[key] for key in queried] == list(data["targets"][example])
        query_offsets = data["positions"][example] - shift - 2 * N
        assert (query_offsets >= 0).all() and (query_offsets % 2 == 0).all()  # in the query region, even
        # The key occurs once in the context.
        assert all(list(keys[example]).count(key) == 1 for key in queried)
    assert (np.diff(data["positions"], axis=1) > 0).all()  # listed in sequence order
    assert (data["weights"] == 1).all()


@pytest.mark.parametrize("form", recall.FORMS)
def test_without_random_non_queries_the_query_region_is_zeros_but_its_queries(form):
    """Zoology's Figure 2 data: the same sequences (keys, values, gaps) with 0 for every query-region
    token that is no query key ([MASK] in the bidirectional form)."""
    filled = _generate(form)
    zeros = recall.generate(500, vocab_size=V, seq_len=L, num_kv_pairs=N, seed=0, form=form, random_non_queries=False)
    for name in ("positions", "targets", "weights"):
        np.testing.assert_array_equal(zeros[name], filled[name])
    region = zeros["inputs"][:, 2 * N:]
    np.testing.assert_array_equal(zeros["inputs"][:, :2 * N], filled["inputs"][:, :2 * N])
    kept = region != 0  # the query keys, and [MASK] after each in the bidirectional form
    np.testing.assert_array_equal(region[kept], filled["inputs"][:, 2 * N:][kept])
    assert kept.sum(axis=1).tolist() == [N * (1 + (form == "bidirectional"))] * 500
    assert (filled["inputs"][:, 2 * N:] != 0).sum() > 2 * kept.sum()  # the default fills it with random tokens
    config = recall_config.get_config("tiny")
    config.dataset.random_non_queries = False
    assert (recall_task.prepare_data(config, "").train["inputs"][:, 2 * config.dataset.num_kv_pairs:] != 0).sum(
        axis=1).max() == config.dataset.num_kv_pairs


def test_no_answer_reaches_the_input():
    causal, bidirectional = _generate("causal"), _generate("bidirectional")
    mask = recall.mask_id(V)
    assert mask == V and recall.model_vocab_size(V, "bidirectional") == V + 1
    # Bidirectional: every answer position holds [MASK], and [MASK] is nowhere else.
    rows = np.arange(len(bidirectional["inputs"]))[:, None]
    assert (bidirectional["inputs"][rows, bidirectional["positions"]] == mask).all()
    assert (bidirectional["inputs"] == mask).sum() == bidirectional["positions"].size
    # Causal: the token after a query is random, so it equals the answer at chance rate (1 / V) only.
    after = causal["inputs"][rows, np.minimum(causal["positions"] + 1, L - 1)]
    assert (after == causal["targets"]).mean() < 3 / V
    assert (causal["inputs"] != mask).all()


def _zoology_gaps(rng, count, num_gaps, pairs, power_a=0.01):
    """Zoology's draw, written out: numpy's choice without replacement with p ~ (g + 1)^(a - 1), the
    gap of the i-th key of the context being the i-th drawn."""
    p = power_a * np.arange(1, num_gaps + 1) ** (power_a - 1)
    p = p / p.sum()
    return np.stack([rng.choice(num_gaps, size=pairs, replace=False, p=p) for _ in range(count)])


def _our_gaps(data, pairs):
    """The gap of each context key's query, in context order."""
    keys, _ = _context(data, pairs)
    positions = data["positions"]
    queried = np.take_along_axis(data["inputs"], positions, axis=1)
    order = np.argsort(queried, axis=1)
    by_key = np.take_along_axis(positions, order, axis=1)  # positions sorted by key value
    rank_of_key = np.argsort(np.argsort(keys, axis=1), axis=1)
    return (np.take_along_axis(by_key, rank_of_key, axis=1) - 2 * pairs) // 2


def test_query_gaps_follow_zoologys_power_law_draws_in_order():
    count, pairs = 6_000, N
    num_gaps = (L - 2 * pairs) // 2
    ours = _our_gaps(_generate(count=count, pairs=pairs, seed=1), pairs)
    reference = _zoology_gaps(np.random.default_rng(2), count, num_gaps, pairs)
    for index in range(pairs):  # the first key tends to the nearest gap, later ones less so
        table = np.stack([np.bincount(sample[:, index], minlength=num_gaps) for sample in (ours, reference)])
        table = table[:, table.sum(0) > 0]
        assert stats.chi2_contingency(table).pvalue > 1e-4, index
    first, last = ours[:, 0].mean(), ours[:, -1].mean()
    assert first < last  # draws without replacement: the order is part of the law


def test_a_single_querys_gap_has_the_power_law_itself():
    count, num_gaps = 20_000, (L - 2) // 2
    gaps = _our_gaps(recall.generate(count, vocab_size=V, seq_len=L, num_kv_pairs=1, seed=3), 1)[:, 0]
    expected = recall.gap_probabilities(num_gaps, 0.01) * count
    observed = np.bincount(gaps, minlength=num_gaps)
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    assert expected[0] / expected[-1] == pytest.approx(num_gaps**0.99)


def test_the_examples_are_a_function_of_the_seed():
    first, again, other = _generate(seed=[5, 0]), _generate(seed=[5, 0]), _generate(seed=[5, 1])
    assert all((first[name] == again[name]).all() for name in first)
    assert (first["inputs"] != other["inputs"]).any()


@pytest.mark.parametrize("sizes, message", [
    ((64, 31, 4), "must be even"), ((64, 30, 8), ">= 4 \\* num_kv_pairs"), ((8, 64, 4), "fewer than"),
])
def test_impossible_sizes_are_refused(sizes, message):
    vocab_size, seq_len, pairs = sizes
    with pytest.raises(ValueError, match=message):
        recall.generate(1, vocab_size=vocab_size, seq_len=seq_len, num_kv_pairs=pairs, seed=0)
    config = recall_config.get_config("tiny")
    config.dataset.vocab_size, config.dataset.seq_len, config.dataset.num_kv_pairs = sizes
    with pytest.raises(ConfigError, match="config.dataset"):
        validate.validate(config)


# --- model options -------------------------------------------------------------------------------------------


def test_short_convolution_is_the_causal_depthwise_sum_of_its_taps():
    conv = ShortConvolution(5, 3, rngs=nnx.Rngs(0))
    conv.bias[...] = jnp.arange(5.0)
    x = np.random.default_rng(0).normal(size=(2, 7, 5)).astype(np.float32)
    kernel, bias = np.asarray(conv.kernel[...]), np.arange(5.0)
    expected = np.zeros_like(x)
    for t in range(7):
        expected[:, t] = bias + sum(kernel[j] * x[:, t - j] for j in range(3) if t - j >= 0)
    np.testing.assert_allclose(conv(jnp.asarray(x)), expected, rtol=1e-5, atol=1e-6)


def test_a_centred_convolution_sums_the_taps_on_both_sides_and_reads_no_padding():
    conv = ShortConvolution(5, 3, rngs=nnx.Rngs(0), centered=True)
    conv.bias[...] = jnp.arange(5.0)
    x = np.random.default_rng(0).normal(size=(2, 7, 5)).astype(np.float32)
    valid = np.ones((2, 7), bool)
    valid[1, 5:] = False  # the second sequence ends after 5 positions
    kernel, bias = np.asarray(conv.kernel[...]), np.arange(5.0)
    real = np.where(valid[..., None], x, 0.0)
    expected = np.zeros_like(x)
    for t in range(7):  # tap j reads position t + 1 - j: the next, this and the previous one
        expected[:, t] = bias + sum(kernel[j] * real[:, t + 1 - j] for j in range(3) if 0 <= t + 1 - j < 7)
    np.testing.assert_allclose(conv(jnp.asarray(x), jnp.asarray(valid)), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="odd kernel size, not 4"):
        ShortConvolution(5, 4, rngs=nnx.Rngs(0), centered=True)


def test_a_centred_convolution_is_refused_in_a_causal_role():
    config = recall_config.get_config("tiny")
    config.model.conv_centered = True
    with pytest.raises(ConfigError, match="conv_centered=True: this model's convolution is in a causal role "
                                          r"\(decoder_self\), where it would read later positions"):
        validate.validate(config)
    config.dataset.form = "bidirectional"
    validate.validate(config)  # an encoder: both sides are its to read
    config.model.conv_kernel = 4
    with pytest.raises(ConfigError, match="needs an odd config.model.conv_kernel"):
        validate.validate(config)
    spec = {"num_layers": 1, "d_model": 8, "num_heads": 2, "mlp_dim": 8, "dropout_rate": 0.0, "max_len": 12,
            "conv_kernel": 3, "conv_centered": True}
    with pytest.raises(ValueError, match="not in the causal role decoder_self"):
        EncoderBlock(TransformerSpec(**spec), rngs=nnx.Rngs(0), role="decoder_self")


def _elu_plus_one(x):
    return np.where(x > 0, x + 1, np.exp(x))


@pytest.mark.parametrize("kind", ["softmax", "linear"])
def test_queries_and_keys_of_their_own_width(kind):
    """d_model 8, 2 heads of value width 4 and query/key width 3: the output against numpy with the
    layer's own projection weights."""
    layer = MultiHeadAttention(kind, d_model=8, num_heads=2, rngs=nnx.Rngs(1), qk_head_dim=3)
    assert layer.query.kernel[...].shape == (8, 6) and layer.value.kernel[...].shape == (8, 8)
    assert layer.feature_dim == (3 if kind == "linear" else None)
    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype(np.float32)

    def project(dense, heads_width):
        return (x @ np.asarray(dense.kernel[...]) + np.asarray(dense.bias[...])).reshape(2, 5, 2, heads_width)

    q, k, v = project(layer.query, 3), project(layer.key, 3), project(layer.value, 4)
    if kind == "softmax":
        scores = np.exp(np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(3))
    else:
        scores = np.einsum("bqhd,bkhd->bhqk", _elu_plus_one(q), _elu_plus_one(k))
    weights = scores / scores.sum(-1, keepdims=True)
    heads = np.einsum("bhqk,bkhd->bqhd", weights, v).reshape(2, 5, 8)
    expected = heads @ np.asarray(layer.output.kernel[...]) + np.asarray(layer.output.bias[...])
    np.testing.assert_allclose(layer(jnp.asarray(x), jnp.asarray(x)), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind, options, causal, expected", [
    ("softmax", {}, True, 10 * (3 + 4)),  # every key and value
    ("linear", {}, True, 3 * 4),  # m x Dv, m = d' = 3
    ("taylor", {}, False, math.comb(3 + 2, 2) * 4),
    ("performer", {"num_features": 5}, False, 5 * 4),
    ("local", {"window": 2}, True, 3 * (3 + 4)),  # the query and the 2 keys before it
    ("local", {"window": 2}, False, 5 * (3 + 4)),  # and the 2 after it
    ("based", {"window": 2}, True, math.comb(3 + 2, 2) * 4 + 3 * (3 + 4)),  # taylor's state and local's window
    ("based", {"window": 2}, False, math.comb(3 + 2, 2) * 4 + 5 * (3 + 4)),
])
def test_each_kind_reports_the_state_a_head_keeps(kind, options, causal, expected):
    layer = MultiHeadAttention(kind, d_model=8, num_heads=2, rngs=nnx.Rngs(0), qk_head_dim=3, kind_options=options)
    assert layer.state_size(10, causal) == expected


def _spec(**fields):
    return TransformerSpec(**{"num_layers": 2, "d_model": 8, "num_heads": 2, "mlp_dim": 0, "dropout_rate": 0.0,
                              "max_len": 12, "positions": "learned", "conv_kernel": 3,
                              "attention": dict.fromkeys(("encoder_self", "decoder_self"), "softmax"), **fields})


def test_an_attention_only_block_adds_the_attention_branch_alone():
    block = EncoderBlock(_spec(), rngs=nnx.Rngs(0))
    assert block.feed_forward is None and block.feed_forward_branch is None
    x = jax.random.normal(jax.random.key(1), (2, 6, 8))
    def both(block, x):
        h = block.convolution(block.attention_branch.norm(x))
        return block(x, None), x + block.self_attention(h, h)

    output, expected = nnx.jit(both)(block, x)
    np.testing.assert_allclose(output, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("role, causal", [("decoder_self", True), ("encoder_self", False)])
def test_the_language_model_sees_the_future_only_when_bidirectional(role, causal):
    model = LanguageModel(V + 1, _spec(), rngs=nnx.Rngs(0), role=role)
    forward = nnx.jit(lambda model, tokens, positions=None: model(tokens, positions))
    tokens = jax.random.randint(jax.random.key(2), (2, 12), 0, V)
    changed = tokens.at[:, 7:].set((tokens[:, 7:] + 1) % V)
    before, after = forward(model, tokens), forward(model, changed)
    change_before_7 = float(np.abs(before[:, :7] - after[:, :7]).max())
    assert change_before_7 < 1e-6 if causal else change_before_7 > 1e-3
    positions = jnp.array([[3, 5], [0, 11]])
    at_positions = jnp.take_along_axis(before, positions[..., None], 1)
    np.testing.assert_allclose(forward(model, tokens, positions), at_positions, rtol=1e-5, atol=1e-5)


# --- a tiny run of each form ----------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[("causal", "softmax", 0), ("bidirectional", "linear", 8)],
                ids=["causal-softmax", "bidirectional-linear-d8"])
def trained(request, tmp_path_factory):
    form, kind, qk_head_dim = request.param
    config = recall_config.get_config(f"tiny,form={form},attention={kind}")
    config.model.qk_head_dim = qk_head_dim
    config.num_train_steps, config.learning_rate = 40, 1e-2
    workdir = str(tmp_path_factory.mktemp(f"recall_{form}"))
    return config, workdir, loop.train_and_evaluate(config, workdir)


def test_a_tiny_run_writes_the_recall_eval_json(trained):
    config, workdir, result = trained
    with open(os.path.join(workdir, "eval.json")) as f:
        assert json.load(f) == json.loads(json.dumps(result))
    dataset, model = config.dataset, config.model
    role = "decoder_self" if dataset.form == "causal" else "encoder_self"
    assert result["attention"] == {role: config.attention.name}
    assert set(result["metrics"]) == {"query_accuracy", "loss"} and result["num_examples"] == dataset.test_size
    assert result["recall"] == {"form": dataset.form, "vocab_size": V, "seq_len": 16, "num_kv_pairs": 2,
                                "random_non_queries": True}
    state = result["state"][role]
    value_dim = model.d_model // model.num_heads
    if config.attention.name == "linear":  # m = d' = 8 features of values of width 16
        assert (state["feature_dim"], state["key_dim"], state["per_head"]) == (8, 8, 8 * value_dim)
    else:
        assert state["per_head"] == 16 * 2 * value_dim
    assert state["total"] == state["per_head"] * model.num_heads * model.num_layers
    # One rank row per layer and head, of the [N, L] query rows: rank at most N = 2 (and m where bounded).
    assert len(result["rank"]) == model.num_layers * model.num_heads
    for row in result["rank"]:
        assert row["seq_len"] == dataset.seq_len and 1 <= row["numerical_rank"] <= 2
        assert row["rank_bound"] == (8 if role == "encoder_self" else None)
    # The shapes of the same query rows: N = 2 per analysed example, a logit spread for softmax only.
    assert len(result["shape"]) == model.num_layers * model.num_heads
    for row in result["shape"]:
        assert (row["role"], row["query_rows"]) == (role, "all")
        assert row["rows"] == 2 * min(config.eval.rank_examples, dataset.test_size)
        assert (row["logit_spread"] is None) == (config.attention.name == "linear")


def test_a_tiny_run_lowers_the_loss(trained):
    _, workdir, _ = trained
    losses = [line["loss"] for line in read_metrics(workdir) if line["split"] == "train"]
    assert losses[-1] < losses[0] - 0.3, losses


def test_eval_json_counts_the_examples_of_the_split_it_reports(tmp_path):
    config = recall_config.get_config("tiny")
    config.dataset.split = "validation"  # 32 examples, against the test split's 48
    data = recall_task.prepare_data(config, str(tmp_path))
    result = evaluation.evaluate_and_write(recall_task, config, str(tmp_path),
                                           recall_task.create_model(config, data), data, 0)
    assert (result["split"], result["num_examples"]) == ("validation", config.dataset.validation_size)
