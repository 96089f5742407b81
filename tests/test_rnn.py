"""The recurrent encoder-decoder: cells against step-by-step numpy, attention kinds in the decoder against
dense references (tests/reference_scored.py), a tiny run, the attention forms' config checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from kind_harness import reference_for
from models.rnn import NO_ATTENTION, GRUCell, LSTMCell, RecurrentEncoderDecoder, RecurrentSpec, recur
from training import loop, validate
from training.metrics import read_metrics

B, HIDDEN, VOCAB = 2, 8, 11


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _linear(module, x):
    kernel = np.asarray(module.kernel[...], np.float64)
    bias = 0.0 if module.bias is None else np.asarray(module.bias[...], np.float64)
    return x @ kernel + bias


def lstm_step(cell, state, x):
    h, c = state
    i, f, g, o = np.split(_linear(cell.input, x) + _linear(cell.recurrent, h), 4, axis=-1)
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c), c


def gru_step(cell, state, x):
    (h,) = state
    x_r, x_z, x_n = np.split(_linear(cell.input, x), 3, axis=-1)
    h_r, h_z, h_n = np.split(_linear(cell.recurrent, h), 3, axis=-1)
    r, z = _sigmoid(x_r + h_r), _sigmoid(x_z + h_z)
    return ((1 - z) * np.tanh(x_n + r * h_n) + z * h,)


STEPS = {"lstm": (LSTMCell, lstm_step), "gru": (GRUCell, gru_step)}


def reference_recur(cell, step, inputs, lengths, state, reverse=False):
    """Row by row, token by token: each row reads its own real tokens only, in order or reversed."""
    outputs = np.zeros(inputs.shape[:2] + (cell.hidden_dim,))
    finals = []
    for row, length in enumerate(lengths):
        row_state = tuple(s[row] for s in state)
        positions = range(length - 1, -1, -1) if reverse else range(length)
        for t in positions:
            row_state = step(cell, row_state, inputs[row, t])
            outputs[row, t] = row_state[0]
        finals.append(row_state)
    return outputs, tuple(np.stack(parts) for parts in zip(*finals))


@pytest.mark.parametrize("cell_name", ["lstm", "gru"])
@pytest.mark.parametrize("reverse", [False, True])
def test_scanned_cell_equals_a_step_by_step_reference(cell_name, reverse):
    cell_class, step = STEPS[cell_name]
    cell = cell_class(5, HIDDEN, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(1)
    inputs, lengths = rng.normal(size=(3, 7, 5)), np.array([7, 4, 1])
    valid = np.arange(7)[None, :] < lengths[:, None]
    state = tuple(rng.normal(size=(3, HIDDEN)) for _ in cell.initial_state(3))
    want_outputs, want_final = reference_recur(cell, step, inputs, lengths, state, reverse)
    got_outputs, got_final = jax.jit(lambda *args: recur(cell, *args, reverse=reverse))(
        jnp.asarray(inputs, jnp.float32), jnp.asarray(valid), tuple(jnp.asarray(s, jnp.float32) for s in state))
    np.testing.assert_allclose(got_outputs, want_outputs, atol=1e-5)
    for got, want in zip(got_final, want_final):
        np.testing.assert_allclose(got, want, atol=1e-5)


def _model(kind, cell="lstm", bidirectional=True, seed=0, static_attention=False):
    options = {} if kind == NO_ATTENTION else reference_for(kind).options
    spec = RecurrentSpec(num_layers=2, hidden_dim=HIDDEN, cell=cell, bidirectional=bidirectional,
                         num_heads=2, attention=kind, attention_options=options,
                         static_attention=static_attention)
    return RecurrentEncoderDecoder(VOCAB, VOCAB, spec, rngs=nnx.Rngs(seed))


def _tokens(seed=2):
    rng = np.random.default_rng(seed)
    source, target = rng.integers(3, VOCAB, (B, 9)), rng.integers(3, VOCAB, (B, 6))
    source[0, 6:], target[0, 4:] = 0, 0  # padding in row 0
    return source, target


def _reference_logits(model, source, decoder_input, kind, static_attention=False):
    """The decoder in numpy: encoder and decoder recurrences step by step, attention by the kind's dense
    reference (static: with the top encoder layer's final state as every step's query), Luong's
    combination, tied output embedding."""
    step = lstm_step
    embed = lambda table, tokens: np.asarray(table.embedding[...], np.float64)[tokens]  # noqa: E731
    source_len, target_len = (source != 0).sum(1), (decoder_input != 0).sum(1)
    encoder = model.encoder
    x = embed(encoder.embed, source)
    initial_states = []
    for layer, forward_cell in enumerate(encoder.forward_cells):
        zeros = (np.zeros((B, HIDDEN)),) * 2
        forward, final = reference_recur(forward_cell, step, x, source_len, zeros)
        backward, backward_final = reference_recur(encoder.backward_cells[layer], step, x, source_len, zeros,
                                                   reverse=True)
        final = tuple(np.tanh(_linear(encoder.final_bridge, np.concatenate(pair, -1)))
                      for pair in zip(final, backward_final))
        initial_states.append(final)
        x = np.concatenate([forward, backward], -1)
    memory = _linear(encoder.states_bridge, x)
    y = embed(model.target_embed, decoder_input)
    for cell, initial in zip(model.decoder_cells, initial_states):
        y, _ = reference_recur(cell, step, y, target_len, initial)
    attention = model.attention
    heads = lambda z: z.reshape(z.shape[:-1] + (attention.num_heads, -1))  # noqa: E731
    query = np.repeat(initial_states[-1][0][:, None], y.shape[1], 1) if static_attention else y
    q, k, v = heads(_linear(attention.query, query)), heads(_linear(attention.key, memory)), heads(
        _linear(attention.value, memory))
    allowed = np.broadcast_to((source != 0)[:, None, None, :], (B, attention.num_heads, q.shape[1], k.shape[1]))
    params = {name: np.asarray(v[...], np.float64) for name, v in nnx.state(attention.attention, nnx.Param).items()}
    weights = reference_for(kind).weights(np, q, k, allowed, params)
    context = _linear(attention.output, np.einsum("bhqk,bkhd->bqhd", weights, v).reshape(y.shape))
    combined = np.tanh(_linear(model.combine, np.concatenate([context, y], -1)))
    return combined @ np.asarray(model.target_embed.embedding[...], np.float64).T


@pytest.mark.parametrize("kind, static_attention", [
    *((kind, False) for kind in ("dot", "multiplicative", "additive", "local", "local_predictive", "hard",
                                 "forced_forward")),
    ("multiplicative", True), ("additive", True)])
def test_decoder_attention_matches_the_dense_reference(kind, static_attention):
    model = _model(kind, static_attention=static_attention)
    source, target = _tokens()
    decoder_input = np.concatenate([np.ones((B, 1), int), target[:, :-1]], 1)  # BOS-shifted
    decoder_input[target == 0] = 0
    got = jax.jit(lambda s, d: model(s, d))(jnp.asarray(source), jnp.asarray(decoder_input))
    want = _reference_logits(model, source, decoder_input, kind, static_attention)
    real = decoder_input != 0  # padded decoder positions are never scored
    np.testing.assert_allclose(np.asarray(got)[real], want[real], atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_without_attention_the_source_reaches_the_decoder_through_the_final_state(cell):
    model = _model("none", cell=cell, bidirectional=False)
    source, target = _tokens()
    assert model.attention_layers() == {}
    other_source = source.copy()
    other_source[1, 0] = (source[1, 0] - 2) % (VOCAB - 3) + 3  # a different first token in row 1
    logits = [np.asarray(model(jnp.asarray(s), jnp.asarray(target))) for s in (source, other_source)]
    np.testing.assert_array_equal(logits[0][0], logits[1][0])
    assert not np.allclose(logits[0][1], logits[1][1])


def test_a_tiny_run_lowers_the_loss_and_decodes_deterministically(tiny_config, tmp_path):
    config = tiny_config(arg="tiny,rnn")
    config.num_train_steps, config.eval.plots = 40, True
    result = loop.train_and_evaluate(config, str(tmp_path))
    losses = [line["loss"] for line in read_metrics(str(tmp_path)) if line["split"] == "train"]
    assert losses[-1] < losses[0]
    assert result["attention"] == {"cross": "multiplicative"}
    assert {row["role"] for row in result["rank"]} == {"cross"}


def test_rnn_configs_are_checked_before_anything_is_built(tiny_config):
    config = tiny_config(arg="tiny,rnn")
    config.attention.encoder_self = "linear"
    with pytest.raises(validate.ConfigError, match=r"has no encoder_self attention \(its roles: cross\)"):
        validate.validate(config)
    config = tiny_config(arg="tiny,rnn")
    config.model.cell = "elman"
    with pytest.raises(validate.ConfigError, match="config.model.cell='elman' is not allowed"):
        validate.validate(config)
    config = tiny_config()
    config.attention.name = "none"  # no attention is an RNN-only choice
    with pytest.raises(validate.ConfigError, match="config.attention.name='none' is not allowed"):
        validate.validate(config)


@pytest.mark.parametrize("arg, fields, message", [
    ("tiny,rnn", {"static_attention": True, "d_model": 32}, None),
    ("tiny,rnn,attention=forced_forward", {"static_attention": True}, "static_attention=True shares one context"),
    ("tiny,rnn,attention=none", {"static_attention": True}, "choose a kind other than none and forced_forward"),
    ("tiny", {"static_attention": True}, "applies to model.name='rnn' only"),
    ("tiny", {"decoder_memory": "key_value"}, "applies to model.name='rnn' only"),
    ("tiny,rnn", {"decoder_memory": "key_value_predict", "d_model": 32}, "must be divisible by 3"),
    ("tiny,rnn", {"decoder_memory": "key_values"}, "decoder_memory='key_values' is not allowed"),
    ("tiny,rnn", {"decoder_memory": "key_value", "memory_window": 0}, "memory_window=0 must be an integer >= 1"),
])
def test_attention_forms_are_checked_before_anything_is_built(tiny_config, arg, fields, message):
    config = tiny_config(arg=arg)
    config.model.update(fields)
    if message is None:
        validate.validate(config)
        return
    with pytest.raises(validate.ConfigError, match=message):
        validate.validate(config)
