"""The encoder-decoder: decoding against a step-by-step reference, masking, and the exact-match identity."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from models import EncoderDecoder, TransformerSpec
from data.vocab import Vocabulary
from token_batches import padded_sources
from models.decoding import DecodeState, SpecialIds, greedy_decode
from tasks import translation

SOURCE_VOCAB, TARGET_VOCAB, MAX_LEN = 11, 9, 12
# Greedy outputs of up to 6 tokens: the reference compiles the model once per prefix length. Chunks of 2
# make linear attention's prefixes of 1 to 6 span up to three chunks, the last one full or partial. The
# seeds give outputs with EOS first, mid-sequence and last, and rows without EOS.
DECODE_LEN, SEEDS = 6, {"softmax": 6, "linear": 2}


@pytest.fixture(scope="module", params=["softmax", "linear"])
def model(request):
    spec = TransformerSpec(num_layers=2, d_model=16, num_heads=2, mlp_dim=32, dropout_rate=0.0,
                           max_len=MAX_LEN, attention=dict.fromkeys(("encoder_self", "decoder_self", "cross"),
                                                                    request.param),
                           attention_options={"linear": {"chunk_size": 2}})
    model = EncoderDecoder(SOURCE_VOCAB, TARGET_VOCAB, spec, rngs=nnx.Rngs(SEEDS[request.param]))
    model.eval()
    return model


# Compiled: eager dispatch of a whole model costs seconds per call.
_forward = nnx.jit(lambda model, source, decoder_input: model(source, decoder_input))
IDS = SpecialIds(bos=Vocabulary.BOS, eos=Vocabulary.EOS, pad=Vocabulary.PAD)
BOS, EOS, PAD = IDS
_greedy = nnx.jit(lambda model, source, max_len: greedy_decode(model, source, max_len, ids=IDS), static_argnums=2)


def _sources(seed=0, batch=6):
    return padded_sources(seed, batch, 7, SOURCE_VOCAB)


def _reference_greedy(model, source, max_len):
    """The model re-run on the growing prefix (every row's, as long as the longest unfinished one): no
    fixed buffer, no masks; a row's tokens after its EOS are PAD."""
    prefix, done = np.full((len(source), 1), BOS), np.zeros(len(source), bool)
    while prefix.shape[1] <= max_len and not done.all():
        token = np.asarray(jnp.argmax(_forward(model, source, jnp.asarray(prefix))[:, -1], -1))
        prefix = np.concatenate([prefix, np.where(done, PAD, token)[:, None]], 1)
        done |= token == EOS
    return np.pad(prefix[:, 1:], ((0, 0), (0, max_len + 1 - prefix.shape[1])), constant_values=PAD)


def test_greedy_decode_matches_step_by_step_reference(model):
    source = _sources()
    got = np.asarray(_greedy(model, source, DECODE_LEN))
    expected = _reference_greedy(model, source, DECODE_LEN)
    np.testing.assert_array_equal(got, expected)
    assert {EOS, PAD} <= set(expected.ravel()) and not all(EOS in row for row in expected)


class _Scripted(nnx.Module):
    """Whatever it reads, predicts token script[i, t] at position t of example i (whose source starts
    with token 4 + i): greedy decoding outputs the script up to its first EOS, and teacher forcing's argmax
    at position t is script[i, t]."""

    def __init__(self, script):
        self.script = nnx.Param(jnp.asarray(script, jnp.int32))

    def __call__(self, source, decoder_input):
        rows = self.script[...][source[:, 0] - 4]
        return 10.0 * jax.nn.one_hot(rows[:, : decoder_input.shape[1]], TARGET_VOCAB)

    def encode(self, source):
        return source

    def init_decode_state(self, memory, source, max_len):
        return DecodeState(carry=source[:, 0] - 4, max_len=max_len)

    def decode_step(self, token, index, state):
        return 10.0 * jax.nn.one_hot(self.script[...][state.carry, index], TARGET_VOCAB), state


def _scripts_with_special_tokens_everywhere(width=8):
    """(targets, scripts): per position p and token s of PAD, BOS, EOS, a target of random words + EOS
    and a script that is the target with s at p: PAD and BOS inserted (so that the decoded string, which
    drops them, still equals the target's), EOS replacing; words follow the target's EOS in the script."""
    rng = np.random.default_rng(0)
    targets, scripts = [], []
    for position in range(width):
        for special in (PAD, BOS, EOS, None):  # None: the script is the target
            words = list(rng.integers(4, TARGET_VOCAB, rng.integers(1, width - 1)))
            target = words + [EOS] + [PAD] * (width - len(words) - 1)
            script = words + [EOS] + list(rng.integers(4, TARGET_VOCAB, width))
            if special in (PAD, BOS):
                script.insert(position, special)
            elif special == EOS:
                script[position] = EOS
            targets.append(target)
            scripts.append(script[:width])
    return np.array(targets), np.array(scripts)


def test_exact_match_compares_token_ids_and_teacher_forcing_equals_the_final_evaluation():
    """translation.final_metrics (eval.json's path: greedy decoding, token ids up to EOS) and metric_sums
    (teacher forcing) agree with each other and with a row-by-row reference, on outputs with PAD, BOS and
    EOS at every position; rows whose decoded string equals the reference's are wrong when a PAD or BOS
    came before EOS."""
    from data.vocab import Vocabulary
    from training import evaluation

    target, script = _scripts_with_special_tokens_everywhere()
    vocab = Vocabulary([*Vocabulary.SPECIAL_TOKENS, *(f"w{i}" for i in range(4, TARGET_VOCAB))])
    source = np.stack([4 + np.arange(len(target)), np.full(len(target), EOS)], 1)
    decoder_input = np.concatenate([np.full((len(target), 1), BOS), target[:, :-1]], 1)
    arrays = {"source": source, "decoder_input": decoder_input, "target": target}
    pairs = [(str(i), vocab.decode(row)) for i, row in enumerate(target)]
    data = translation.TranslationData(vocab, vocab, arrays, None, arrays, pairs)
    config = ml_collections.ConfigDict({"eval": {"batch_size": 16, "beam_size": 1, "length_penalty": 0.0}})
    model = _Scripted(script)

    expected = []
    for row_target, row_script in zip(target, script):
        end = list(row_target).index(EOS) + 1
        expected.append(np.array_equal(row_script[:end], row_target[:end]))
    decoded = translation.decoded_outputs(model, arrays, config.eval)
    first_eos = [list(row).index(EOS) + 1 if EOS in row else len(row) for row in script]
    np.testing.assert_array_equal(decoded, [list(row[:end]) + [PAD] * (len(row) - end)
                                            for row, end in zip(script, first_eos)])
    string_equal = [vocab.decode(row) == reference for row, (_, reference) in zip(decoded, pairs)]
    assert sum(np.logical_and(string_equal, np.logical_not(expected))) >= 8  # PAD or BOS before EOS
    assert 0 < sum(expected) < len(expected)

    teacher_forced = translation.summarize(evaluation.model_metric_totals(model, translation.metric_sums, arrays, 16))
    assert translation.final_metrics(config, model, data)["exact_match"] == pytest.approx(np.mean(expected))
    assert teacher_forced["exact_match"] == pytest.approx(np.mean(expected))
    np.testing.assert_array_equal(translation.exact_rows(decoded == target, target), expected)


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


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_bfloat16_parameters_keep_every_activation_in_bfloat16(positions):
    """The train step casts the parameters to config.compute_dtype and nothing else: a float32 constant
    added on the way (the position table) would silently run the model, and its attention, in float32."""
    from training.steps import _in_compute_dtype
    spec = TransformerSpec(num_layers=1, d_model=16, num_heads=2, mlp_dim=32, dropout_rate=0.0,
                           max_len=MAX_LEN, positions=positions)
    graphdef, params, rest = nnx.split(EncoderDecoder(SOURCE_VOCAB, TARGET_VOCAB, spec, rngs=nnx.Rngs(0)),
                                       nnx.Param, ...)
    model = nnx.merge(graphdef, _in_compute_dtype(params, "bfloat16"), rest)
    logits = jax.eval_shape(lambda source, target: model(source, target), _sources(), _sources()[:, :5])
    assert logits.dtype == jnp.bfloat16
