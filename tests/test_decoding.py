"""Incremental decoding against full re-decoding: the wrapper's cached step equals the row of the full
causal (or cross) computation (each kind's own steps: tests/kind_harness.py); the models' per-step logits
equal model(source, buffer); greedy decoding equals re-running the model on the growing buffer; beam search
equals exhaustive enumeration."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from attention import MultiHeadAttention
from models import EncoderDecoder, TransformerSpec
from data.vocab import Vocabulary
from token_batches import padded_sources
from models.decoding import SpecialIds, beam_search, greedy_decode
from models.rnn import RecurrentEncoderDecoder, RecurrentSpec
from training import validate

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU

B, D_MODEL, HEADS, LENGTH, SOURCE_LENGTH = 2, 8, 2, 5, 7
SOURCE_VOCAB, TARGET_VOCAB, MAX_LEN = 11, 9, 6
ATOL = 2e-5
IDS = SpecialIds(bos=Vocabulary.BOS, eos=Vocabulary.EOS, pad=Vocabulary.PAD)
BOS, EOS, PAD = IDS


def _layer(kind, seed=0, qk_head_dim=None):
    layer = MultiHeadAttention(kind, d_model=D_MODEL, num_heads=HEADS, rngs=nnx.Rngs(seed), qk_head_dim=qk_head_dim)
    layer.eval()
    return layer


def _inputs(seed, length):
    """[B, length, D] inputs whose scale grows along the sequence: later keys set larger stabilisers."""
    x = jax.random.normal(jax.random.key(seed), (B, length, D_MODEL))
    return x * (1 + 0.5 * jnp.arange(length))[None, :, None]


def _steps(step, carry, length):
    """step(carry, t) -> (carry, output) for t < length in one `lax.scan` (t traced, as in decoding);
    the outputs stacked on axis 1."""
    _, outputs = jax.lax.scan(step, carry, jnp.arange(length))
    return jnp.swapaxes(outputs, 0, 1)


# Every kind's steps are held to its dense reference by tests/kind_harness.py; here the wrapper's projections
# around them: a score kind and two kernelised ones at the default widths and with queries and keys narrower
# than the values (head dim 4), whose caches and states then have two widths.
@pytest.mark.parametrize("kind", ["softmax", "linear", "performer"])
@pytest.mark.parametrize("qk_head_dim", [None, 3])
def test_cached_steps_equal_the_full_rows(kind, qk_head_dim):
    """Self-attention: step t against row t of the causal computation, a padding token mid-sequence.
    Cross-attention: queries of a LENGTH-row decoder over a longer, padded source (cosFormer's M and
    local's alignment depend on both lengths)."""
    layer, x, source = _layer(kind, qk_head_dim=qk_head_dim), _inputs(1, LENGTH), _inputs(3, SOURCE_LENGTH)
    valid = jnp.ones((B, LENGTH), bool).at[1, 2].set(False)
    key_mask = jnp.arange(SOURCE_LENGTH)[None, :] < jnp.array([[SOURCE_LENGTH], [4]])

    @jax.jit
    def run(x, valid, source, key_mask):
        def self_step(cache, t):
            out, cache = layer.decode_step(jax.lax.dynamic_slice_in_dim(x, t, 1, 1), cache, t, LENGTH, valid[:, t])
            return cache, out[:, 0]

        def cross_step(memory, t):  # the memory changes from step to step only for forced_forward
            out, memory = layer.attend_memory(jax.lax.dynamic_slice_in_dim(x, t, 1, 1), memory, key_mask, t, LENGTH)
            return memory, out[:, 0]

        return {"self": (layer(x, x, valid[:, None, None, :], causal=True),
                         _steps(self_step, layer.init_cache(B, LENGTH), LENGTH)),
                "cross": (layer(x, source, key_mask[:, None, None, :]),
                          _steps(cross_step, layer.init_memory(source, key_mask, LENGTH), LENGTH))}

    for role, (full, stepped) in run(x, valid, source, key_mask).items():
        np.testing.assert_allclose(stepped, full, atol=ATOL, rtol=1e-5, err_msg=role)


def test_linear_state_has_no_length_axis():
    cache = _layer("performer").init_cache(B, 4096)
    assert all(4096 not in leaf.shape for leaf in jax.tree.leaves(cache))


def test_a_kind_without_decoding_is_refused_by_name():
    class FullOnly(nnx.Module):  # a kind with the training interface only
        feature_dim = None

        def __call__(self, q, k, v, mask=None, *, causal=False):
            return v

    layer = _layer("softmax")
    layer.attention, layer.kind = FullOnly(), "full_only"
    with pytest.raises(NotImplementedError, match="'full_only' cannot decode incrementally: it lacks init_cache"):
        layer.init_cache(B, LENGTH)


# --- models ------------------------------------------------------------------------------------------------


def _transformer(kind, seed=0, vocab=TARGET_VOCAB):
    spec = TransformerSpec(num_layers=2, d_model=16, num_heads=2, mlp_dim=32, dropout_rate=0.0, max_len=MAX_LEN,
                           tied_embeddings=False, attention=dict.fromkeys(("encoder_self", "decoder_self", "cross"),
                                                                          kind))
    return EncoderDecoder(SOURCE_VOCAB, vocab, spec, rngs=nnx.Rngs(seed))


def _rnn(kind, cell, hidden_dim=16, **forms):
    spec = RecurrentSpec(num_layers=2, hidden_dim=hidden_dim, cell=cell, attention=kind, tied_embeddings=False,
                         **forms)
    return RecurrentEncoderDecoder(SOURCE_VOCAB, TARGET_VOCAB, spec, rngs=nnx.Rngs(0))


# Every kind's step is checked above; here the models' plumbing: the KV cache, the linear state, a kind
# whose features depend on max_len (cosFormer), a cross-attention memory that changes with each step
# (forced_forward), and the RNN's carry with a position-dependent kind, with static attention's one context,
# and with the decoder memory's window (shorter than the buffer, padding inside it).
# Seeds chosen so that greedy outputs mix EOS mid-sequence, rows without EOS and generated PAD tokens.
MODELS = {"softmax": lambda: _transformer("softmax", seed=8), "linear": lambda: _transformer("linear", seed=3),
          "cosformer": lambda: _transformer("cosformer", seed=3),
          "forced_forward": lambda: _transformer("forced_forward", seed=8),
          "rnn-gru-local": lambda: _rnn("local", "gru"),
          "rnn-static-key_value": lambda: _rnn("additive", "lstm", static_attention=True, decoder_memory="key_value",
                                               memory_window=2),
          "rnn-forced_forward-key_value_predict": lambda: _rnn("forced_forward", "gru", hidden_dim=18,
                                                               decoder_memory="key_value_predict", memory_window=3)}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    model = MODELS[request.param]()
    model.eval()
    return model


def _sources(seed=0, batch=3):
    return padded_sources(seed, batch, SOURCE_LENGTH, SOURCE_VOCAB)


def test_per_step_logits_equal_full_re_decoding(model):
    """A random buffer with a PAD inside: each step's logits are row t of model(source, buffer)."""
    source = _sources()
    buffer = np.random.default_rng(1).integers(3, TARGET_VOCAB, (len(source), MAX_LEN))
    buffer[:, 0], buffer[0, 3] = BOS, PAD

    @jax.jit
    def run(source, buffer):
        step = lambda state, t: model.decode_step(buffer[:, t], t, state)[::-1]
        state = model.init_decode_state(model.encode(source), source, MAX_LEN)
        return model(source, buffer), _steps(step, state, MAX_LEN)

    full, stepped = run(source, jnp.asarray(buffer))
    np.testing.assert_allclose(stepped, full, atol=1e-4, rtol=1e-4)


def _full_re_decoding_greedy(model, source, max_len):
    """The model re-run on the whole fixed buffer at every step, one token appended at a time."""
    buffer = np.full((len(source), max_len), PAD)
    buffer[:, 0] = BOS
    out = np.full((len(source), max_len), PAD)
    done = np.zeros(len(source), bool)
    forward = jax.jit(model.__call__)
    for t in range(max_len):
        token = np.asarray(jnp.argmax(forward(source, jnp.asarray(buffer))[:, t], -1))
        out[:, t] = np.where(done, PAD, token)
        done |= out[:, t] == EOS
        if t + 1 < max_len:
            buffer[:, t + 1] = out[:, t]
    return out


def test_greedy_and_beam_of_one_equal_full_re_decoding(model):
    source = _sources(seed=2)
    expected = _full_re_decoding_greedy(model, source, MAX_LEN)
    greedy, beam = jax.jit(lambda s: (greedy_decode(model, s, MAX_LEN, ids=IDS),
                                      beam_search(model, s, MAX_LEN, 1, 0.6, ids=IDS)))(source)
    np.testing.assert_array_equal(greedy, expected)
    np.testing.assert_array_equal(beam, expected)


# --- beam search against exhaustive enumeration --------------------------------------------------------------

SMALL_VOCAB, SHORT = 5, 3  # PAD, BOS, EOS, UNK and one word; outputs of at most 3 tokens


def _every_hypothesis():
    """Every output: tokens up to and including EOS, or SHORT tokens without EOS (85 of them here)."""
    others = [token for token in range(SMALL_VOCAB) if token != EOS]
    for length in range(1, SHORT + 1):
        for prefix in itertools.product(others, repeat=length - 1):
            yield (*prefix, EOS)
    yield from itertools.product(others, repeat=SHORT)


def _brute_force_best(model, source, alpha):
    hypotheses = list(_every_hypothesis())
    outputs = np.array([h + (PAD,) * (SHORT - len(h)) for h in hypotheses])
    lengths = np.array([len(h) for h in hypotheses])
    buffers = np.concatenate([np.full((len(outputs), 1), BOS), outputs[:, :-1]], 1)
    best = []
    forward = jax.jit(model.__call__)
    for row in np.asarray(source):
        sources = jnp.asarray(np.repeat(row[None], len(outputs), 0))
        log_probs = np.asarray(jax.nn.log_softmax(forward(sources, jnp.asarray(buffers)), -1), np.float64)
        token_log_probs = np.take_along_axis(log_probs, outputs[..., None], -1)[..., 0]
        counted = np.arange(SHORT)[None, :] < lengths[:, None]
        scores = (token_log_probs * counted).sum(1) / ((5 + lengths) / 6) ** alpha
        assert np.sort(scores)[-1] - np.sort(scores)[-2] > 1e-4  # a unique winner
        best.append(outputs[np.argmax(scores)])
    return np.stack(best)


def test_exhaustive_beam_search_finds_the_best_penalised_hypothesis():
    """With a beam as wide as the number of hypotheses nothing is pruned: the search must return the
    enumeration's best log p / ((5 + length) / 6)^alpha, without (alpha 0) and with a length penalty."""
    model = _transformer("softmax", seed=3, vocab=SMALL_VOCAB)
    model.eval()
    source = _sources(seed=4, batch=2)
    count = len(list(_every_hypothesis()))
    search = jax.jit(lambda s, alpha: beam_search(model, s, SHORT, count, alpha, ids=IDS))
    winners = []
    for alpha in (0.0, 2.0):
        winners.append(_brute_force_best(model, source, alpha))
        np.testing.assert_array_equal(search(source, alpha), winners[-1], err_msg=f"alpha={alpha}")
    assert not np.array_equal(*winners)  # the penalty changes a winner: it is applied, not ignored


@pytest.mark.parametrize("field, value, message", [
    ("beam_size", 0, "config.eval.beam_size=0 must be an integer >= 1"),
    ("length_penalty", -0.5, "config.eval.length_penalty=-0.5 must be a finite number >= 0"),
])
def test_decoding_configs_are_checked_before_anything_is_built(tiny_config, field, value, message):
    config = tiny_config()
    config.eval[field] = value
    with pytest.raises(validate.ConfigError, match=message):
        validate.validate(config)
