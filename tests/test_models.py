"""The encoder-decoder: decoding against a step-by-step reference, masking, and the exact-match identity."""
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from models import EncoderDecoder, TransformerSpec
from models.decoding import BOS, EOS, PAD, greedy_decode
from training import translation

SOURCE_VOCAB, TARGET_VOCAB, MAX_LEN = 11, 9, 12


@pytest.fixture(scope="module", params=["softmax", "linear"])
def model(request):
    spec = TransformerSpec(num_layers=2, d_model=16, num_heads=2, mlp_dim=32, dropout_rate=0.0,
                           max_len=MAX_LEN, attention=dict.fromkeys(("encoder_self", "decoder_self", "cross"),
                                                                    request.param),
                           attention_options={"linear": {"chunk_size": 4}})
    model = EncoderDecoder(SOURCE_VOCAB, TARGET_VOCAB, spec, rngs=nnx.Rngs(0))
    model.eval()
    return model


# Compiled: eager dispatch of a whole model costs seconds per call.
_forward = nnx.jit(lambda model, source, decoder_input: model(source, decoder_input))
_greedy = nnx.jit(greedy_decode, static_argnums=2)


def _sources(seed=0, batch=6, length=7):
    rng = np.random.default_rng(seed)
    source = rng.integers(4, SOURCE_VOCAB, (batch, length))
    for row, used in enumerate(rng.integers(2, length + 1, batch)):
        source[row, used - 1] = EOS
        source[row, used:] = PAD
    return jnp.asarray(source, jnp.int32)


def _reference_greedy(model, source, max_len):
    """One example at a time, re-running the model on the growing prefix: no fixed buffer, no masks."""
    outputs = []
    for row in np.asarray(source):
        prefix = [BOS]
        while len(prefix) <= max_len and (len(prefix) == 1 or prefix[-1] != EOS):
            logits = _forward(model, jnp.asarray(row[None]), jnp.asarray([prefix]))
            prefix.append(int(jnp.argmax(logits[0, -1])))
        tokens = prefix[1:] + [PAD] * (max_len - len(prefix) + 1)
        outputs.append(tokens)
    return np.asarray(outputs)


def test_greedy_decode_matches_step_by_step_reference(model):
    source = _sources()
    got = np.asarray(_greedy(model, source, MAX_LEN))
    np.testing.assert_array_equal(got, _reference_greedy(model, source, MAX_LEN))


def test_teacher_forced_exact_match_equals_greedy_exact_match(model):
    """metric_sums counts a row exact when every teacher-forced argmax is right; those must be the rows
    that greedy decoding reproduces. An untrained model rarely emits EOS, so the targets here are
    full-length greedy outputs: even rows exactly, odd rows with one token changed at position 6."""
    source = _sources(seed=1, batch=8)
    target = np.array(_greedy(model, source, MAX_LEN))
    target[1::2, 6] = 4 + (target[1::2, 6] - 3) % (TARGET_VOCAB - 4)
    decoder_input = np.concatenate([np.full((len(target), 1), BOS), target[:, :-1]], 1)
    batch = {"source": source, "decoder_input": jnp.asarray(decoder_input), "target": jnp.asarray(target)}
    _, sums = nnx.jit(translation.metric_sums)(model, batch)
    decoded = np.asarray(_greedy(model, source, MAX_LEN))
    greedy_exact = [np.array_equal(d, t) for d, t in zip(decoded, target)]
    assert greedy_exact == [True, False] * 4
    assert int(sums["exact_sequences"]) == sum(greedy_exact)


def test_padding_in_the_source_does_not_change_the_output(model):
    source = _sources(seed=2)
    longer = jnp.concatenate([source, jnp.zeros((source.shape[0], 3), jnp.int32)], 1)
    decoder_input = jnp.asarray(np.random.default_rng(3).integers(4, TARGET_VOCAB, (source.shape[0], 5)))
    np.testing.assert_allclose(_forward(model, longer, decoder_input), _forward(model, source, decoder_input),
                               atol=1e-5)


def test_decoder_is_causal(model):
    source = _sources(seed=4)
    decoder_input = np.random.default_rng(5).integers(4, TARGET_VOCAB, (source.shape[0], 8))
    changed = decoder_input.copy()
    changed[:, 5:] = 4 + (changed[:, 5:] - 3) % (TARGET_VOCAB - 4)
    a, b = _forward(model, source, jnp.asarray(decoder_input)), _forward(model, source, jnp.asarray(changed))
    np.testing.assert_allclose(a[:, :5], b[:, :5], atol=1e-5)
    assert not np.allclose(a[:, 5:], b[:, 5:])
