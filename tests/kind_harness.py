"""The contract every attention kind is held to, against the dense reference declared for it.

A reference is the kind's attention weights written out as one formula against an array module `xp`:
`weights(xp, q, k, allowed, arrays) -> [B, H, Lq, Lk]`, with `allowed` [B, H, Lq, Lk] the keys each query
may attend to (padding, causality) and `arrays` the module's own arrays by name (its parameters, a random
projection). Run with numpy in float64 it is the reference for outputs, weights and decoding; run with
jax.numpy it is differentiated for the gradients. The output is always weights @ v.

Declare one with `@dense_reference(kind, **options)` in `tests/reference_*.py` beside the kind's tests (or
in the test file that defines a kind), then subclass `KindContract` with `kinds = (...)` in a test file:
every test below then runs on those kinds. tests/test_contract_scored.py and test_contract_kernelized.py
hold the kinds of the `attention` package to it (two files, so that parallel workers share the work), and
tests/test_kinds.py fails for a registered kind that has no reference or that neither of them runs.

A kind that is not `incremental` (ScoreAttention.incremental: its rows depend on later queries) is held to
refusing causal attention and decoding in place of the tests of them; its gradients and its query without
keys are checked bidirectionally, and it trains in the roles the config checks let it take.
"""
import dataclasses
import functools
import importlib
import pathlib
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import attention
from attention import registry
from data import pipeline
from tasks import translation
from training import steps, validate

B, L, H, D = 2, 13, 3, 4  # L > D, so that a feature dimension of D bounds the rank
SETTINGS = {"padding": (L, L, False), "causal": (L, L, True), "cross": (5, 9, False)}  # Lq, Lk, causal
CROSS_DECODER_LENGTH, CROSS_SOURCE_LENGTH = 5, 9


@dataclasses.dataclass(frozen=True)
class Reference:
    weights: Callable  # (xp, q, k, allowed, arrays) -> [B, H, Lq, Lk]
    options: dict  # the kind's options in these tests (e.g. a chunk size that does not divide L)


_REFERENCES: dict[str, Reference] = {}


def dense_reference(kind: str, **options):
    """Decorator: `weights` is the dense reference of attention kind `kind`, built with `options`."""

    def declare(weights):
        if kind in _REFERENCES:
            raise ValueError(f"kind {kind!r} has two dense references")
        _REFERENCES[kind] = Reference(weights, options)
        return weights

    return declare


def references() -> dict[str, Reference]:
    """Every declared reference: those of tests/reference_*.py (imported here) and of any test module
    imported so far."""
    for path in sorted(pathlib.Path(__file__).parent.glob("reference_*.py")):
        importlib.import_module(path.stem)
    return dict(_REFERENCES)


def package_kinds() -> list[str]:
    """The kinds the attention package registers: a test may register its own (tests/test_kind_demo.py)."""
    return [name for name in attention.names() if registry.get(name).__module__.split(".")[0] == "attention"]


def package_kinds_of(base: type) -> tuple[str, ...]:
    """One name per class (scaled_dot is softmax) of the package's kinds built on `base`."""
    classes = {}
    for name in package_kinds():
        if issubclass(registry.get(name), base):
            classes.setdefault(registry.get(name), name)
    return tuple(sorted(classes.values()))


def reference_for(kind: str) -> Reference:
    """The reference of `kind` or of another name of the same class (softmax is scaled_dot)."""
    declared = references()
    for name in [kind, *(other for other in declared if registry.get(other) is registry.get(kind))]:
        if name in declared:
            return declared[name]
    raise LookupError(f"attention kind {kind!r} has no dense reference: declare one with "
                      f"kind_harness.dense_reference in tests/reference_*.py (see tests/kind_harness.py)")


# ---- inputs and the module under test --------------------------------------------------------------

def inputs(seed=0, lq=L, lk=L, norm=None):
    """q [B, lq, H, D], k and v [B, lk, H, D] in float64, and key_valid [B, lk] (example 0: 4 padded keys)."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.normal(size=(B, length, H, D)) for length in (lq, lk, lk))
    if norm is not None:
        q, k = (x * norm / np.linalg.norm(x, axis=-1, keepdims=True) for x in (q, k))
    key_valid = np.ones((B, lk), bool)
    key_valid[0, lk - 4 :] = False
    return q, k, v, key_valid


def allowed(key_valid, lq, causal):
    allowed = np.broadcast_to(key_valid[:, None, None, :], (B, H, lq, key_valid.shape[1]))
    return allowed & np.tril(np.ones((lq, lq), bool)) if causal else allowed


def mask(key_valid):
    return jnp.asarray(key_valid[:, None, None, :])


def f32(*arrays):
    return [jnp.asarray(x, jnp.float32) for x in arrays]


def create(kind, seed=10):
    """The kind with its test options, every parameter moved off its initial value (multiplicative starts
    as scaled dot-product exactly, hedgehog as the identity): a reference must use them to agree."""
    module = attention.create(kind, num_heads=H, head_dim=D, rngs=nnx.Rngs(jax.random.key(0, impl="rbg")),
                              **reference_for(kind).options)
    rng = np.random.default_rng(seed)
    params = nnx.state(module, nnx.Param)
    nnx.update(module, jax.tree.map(lambda x: x + jnp.asarray(0.5 * rng.normal(size=x.shape), x.dtype), params))
    return module


def module_arrays(module) -> dict:
    """The arrays a reference may read, by attribute name: parameters and random projections, no RNG keys."""
    arrays = {path: variable[...] for path, variable in nnx.state(module).flat_state()}
    return {path[0]: np.asarray(value, np.float64) for path, value in arrays.items()
            if len(path) == 1 and not jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key)}


def expected(kind, module, q, k, v, allowed):
    """(output, weights) of the kind's reference in float64 numpy."""
    weights = reference_for(kind).weights(np, q, k, allowed, module_arrays(module))
    return np.einsum("bhqk,bkhd->bqhd", weights, v), weights


@functools.cache
def attending(kind: str, causal: bool):
    """(module, jitted (q, k, v, mask) -> (output, weights)) of `kind`, cached: the tests of a kind on the
    same shapes share one compilation (eager calls would compile each operation)."""
    module = create(kind)
    return module, jax.jit(lambda q, k, v, mask: (module(q, k, v, mask, causal=causal),
                                                  module.weights(q, k, mask, causal=causal)))


def incremental(kind: str) -> bool:
    """Whether the kind can attend causally and decode (attention/score_base.py, ScoreAttention.incremental)."""
    return registry.get(kind).incremental


def refuses_causal(kind: str) -> bool:
    """False for an incremental kind. For another, checks that both causal calls refuse in one line that
    says so, and returns True: a causal test of it has nothing more to compare."""
    if incremental(kind):
        return False
    q, k, v, key_valid = inputs()
    module = create(kind)
    for attend in (lambda: module(*f32(q, k, v), mask(key_valid), causal=True),
                   lambda: module.weights(*f32(q, k), mask(key_valid), causal=True)):
        with pytest.raises(ValueError, match=f"^attention kind '{kind}' cannot attend causally: [^\n]+$"):
            attend()
    return True


@functools.cache
def differentiating(kind: str):
    """(module, jitted (q, k, v, mask, cotangent) -> gradients of sum(cotangent * output) of causal attention
    (bidirectional for a kind that is not incremental) for (q, k, v) and the module's parameters by name, and
    the output), cached as `attending` is."""
    module = create(kind)
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)

    def loss(params, q, k, v, mask, cotangent):
        out = nnx.merge(graphdef, params, rest)(q, k, v, mask, causal=incremental(kind))
        return (out.astype(jnp.float32) * cotangent).sum(), out

    grad = jax.jit(jax.grad(loss, (0, 1, 2, 3), has_aux=True))

    def gradients(q, k, v, mask, cotangent):
        (param_grads, *input_grads), out = grad(params, q, k, v, mask, cotangent)
        return input_grads, {path[0]: value[...] for path, value in param_grads.flat_state()}, out

    return module, gradients


def _reference_gradients(kind, module, q, k, v, allowed, cotangent):
    """The same gradients through the reference in jax.numpy, float32."""
    arrays = {name: jnp.asarray(value, jnp.float32) for name, value in module_arrays(module).items()}
    names = [path[0] for path, _ in nnx.state(module, nnx.Param).flat_state()]

    def loss(params, q, k, v):
        weights = reference_for(kind).weights(jnp, q, k, allowed, {**arrays, **params})
        return (jnp.einsum("bhqk,bkhd->bqhd", weights, v) * cotangent).sum()

    params = {name: arrays[name] for name in names}
    param_grads, *input_grads = jax.jit(jax.grad(loss, (0, 1, 2, 3)))(params, *f32(q, k, v))
    return input_grads, param_grads


def _scan_steps(step, carry, length):
    """step(carry, t) -> (carry, output [B, 1, H, Dv]) for t < length, t traced as in decoding -> [B, L, H, Dv]."""
    _, outputs = jax.lax.scan(step, carry, jnp.arange(length))
    return jnp.swapaxes(outputs[:, :, 0], 0, 1)


def assert_every_parameter_trains(config, tmp_path) -> None:
    """Two steps of the loop's train step on the translation `config` with finite loss and gradient norm, an
    update to every parameter (each kind's own included), and one compilation: the state the first step gives
    back (strongly typed jax arrays) has the types init_state gave it."""
    data = translation.prepare_data(config, str(tmp_path))
    # Sign descent: a parameter moves exactly when its gradient is not zero, as under Adam without weight
    # decay (which would move every parameter), at half the compile time of the whole step's AdamW.
    optimizer = optax.chain(optax.scale_by_sign(), optax.scale(-config.learning_rate))
    graphdef, state = steps.init_state(translation.create_model(config, data), optimizer)
    train_step = steps.make_train_step(graphdef, optimizer, translation.metric_sums, jax.random.key(0))
    # Compared at each step: a gradient whose sign flips between the steps moves a parameter back exactly.
    changed = jax.tree.map(lambda _: False, state["params"])
    for step in range(2):
        before = jax.tree.map(np.array, state["params"])
        state, metrics = train_step(state, pipeline.batch_at_step(data.train, 8, seed=0, step=step))
        assert np.isfinite(float(metrics["loss"])) and float(metrics["grad_norm"]) > 0
        assert bool(metrics["finite"])
        changed = jax.tree.map(lambda moved, a, b: moved or not np.array_equal(a, b), changed, before,
                               jax.device_get(state["params"]))
    assert all(jax.tree.leaves(changed)), "every parameter (including kind-specific ones) gets updates"
    assert train_step._cache_size() == 1, "the second step compiled again: a leaf of the state changed its type"


class KindContract:
    """Outputs, weights, padding, causality, cross-attention, gradients, large norms, decoding and training
    of each kind in `kinds` against its dense reference. Subclass it as `Test...` in a test file."""

    kinds: tuple = ()

    def pytest_generate_tests(self, metafunc):
        if "kind" in metafunc.fixturenames:
            metafunc.parametrize("kind", self.kinds)

    @pytest.mark.parametrize("setting", sorted(SETTINGS))
    def test_output_and_weights_match_reference(self, kind, setting):
        lq, lk, causal = SETTINGS[setting]
        if causal and refuses_causal(kind):
            return
        q, k, v, key_valid = inputs(lq=lq, lk=lk)
        module, attend = attending(kind, causal)
        want, want_weights = expected(kind, module, q, k, v, allowed(key_valid, lq, causal))
        out, weights = attend(*f32(q, k, v), mask(key_valid))
        np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)
        np.testing.assert_allclose(weights, want_weights, atol=2e-6)

    @pytest.mark.parametrize("causal", [False, True])
    def test_without_a_mask_matches_reference(self, kind, causal):
        """No mask: the fast paths a kind may take then (jax.nn.dot_product_attention with is_causal) must
        keep what the kind narrows, e.g. local attention's window."""
        if causal and refuses_causal(kind):
            return
        q, k, v, _ = inputs(seed=21)
        module, attend = attending(kind, causal)
        want, _ = expected(kind, module, q, k, v, allowed(np.ones((B, L), bool), L, causal))
        out, _ = attend(*f32(q, k, v), None)
        np.testing.assert_allclose(out, want, atol=2e-5, rtol=2e-5)

    def test_gradients_match_reference(self, kind):
        """Causal (where the kind is incremental) and padded at once, for the inputs and every parameter."""
        q, k, v, key_valid = inputs(seed=3)
        cotangent = jnp.asarray(np.random.default_rng(4).normal(size=(B, L, H, D)), jnp.float32)
        module, gradients = differentiating(kind)
        got_inputs, got_params, _ = gradients(*f32(q, k, v), mask(key_valid), cotangent)
        want_inputs, want_params = _reference_gradients(kind, module, q, k, v,
                                                        allowed(key_valid, L, incremental(kind)), cotangent)
        assert got_params.keys() == want_params.keys()
        for got, want in zip([*got_inputs, *got_params.values()], [*want_inputs, *want_params.values()]):
            np.testing.assert_allclose(got, want, atol=5e-5, rtol=5e-5)

    @pytest.mark.parametrize("causal", [False, True])
    def test_output_ignores_padded_and_future_keys(self, kind, causal):
        if causal and refuses_causal(kind):
            return
        q, k, v, key_valid = inputs(seed=5)
        _, attend = attending(kind, causal)
        out, _ = attend(*f32(q, k, v), mask(key_valid))
        k2, v2 = k.copy(), v.copy()
        k2[~key_valid], v2[~key_valid] = 100.0, -100.0  # garbage in padded keys
        if causal:  # and in the future of query 6: only its outputs up to 6 must stay
            k2[:, 7:], v2[:, 7:] = 50.0, 50.0
        out2, _ = attend(*f32(q, k2, v2), mask(key_valid))
        upto = 7 if causal else L
        np.testing.assert_allclose(out2[:, :upto], out[:, :upto], atol=1e-5)

    def test_large_norms_stay_finite_and_a_query_without_keys_attends_to_nothing(self, kind):
        """Norm 10 with q.k = +-100 exactly; example 1's first key padded, so that its first causal query
        may attend to no key (bidirectionally, for a kind that is not incremental, a mask of that query's row
        alone): its output and weights are 0, everything finite, gradients too."""
        q, _, v, key_valid = inputs(seed=9, norm=10.0)
        k = np.where(np.arange(L)[None, :, None, None] % 2, q, -q)
        key_valid[1, 0] = False
        query_mask = mask(key_valid)
        if not incremental(kind):
            query_mask = allowed(key_valid, L, False).copy()
            query_mask[1, :, 0] = False
        _, attend = attending(kind, incremental(kind))
        out, weights = attend(*f32(q, k, v), query_mask)
        input_grads, param_grads, _ = differentiating(kind)[1](*f32(q, k, v), query_mask, jnp.ones((B, L, H, D)))
        for array in [out, weights, *input_grads, *param_grads.values()]:
            assert np.all(np.isfinite(np.asarray(array)))
        assert np.all(np.asarray(out)[1, 0] == 0) and np.all(np.asarray(weights)[1, :, 0] == 0)

    def test_decoding_steps_equal_the_reference_rows(self, kind):
        """Causal self-attention step by step (a padding key mid-sequence, inputs growing along it, so that
        later keys set larger scales), and cross-attention of a shorter decoder over a padded source. A kind
        that is not incremental refuses each decoding method in one line that says so."""
        module = create(kind)
        if not incremental(kind):
            q, k, v, key_valid = inputs(seed=11)
            (q, k, v), valid = f32(q, k, v), jnp.asarray(key_valid)
            row = [x[:, :1] for x in (q, k, v)]
            # No cache or memory to pass: building them is refused first.
            for call in (lambda: module.init_cache(B, L, H, D, D), lambda: module.init_memory(k, v, valid, L),
                         lambda: module.decode_step(*row, None, 0, L, valid[:, 0]),
                         lambda: module.attend_memory(row[0], None, valid, 0, L)):
                with pytest.raises(ValueError, match=f"^attention kind '{kind}' cannot decode one position at a "
                                                     f"time: [^\n]+$"):
                    call()
            return
        q, k, v, key_valid = inputs(seed=11)
        q, k, v = (x * (1 + 0.1 * np.arange(L))[None, :, None, None] for x in (q, k, v))
        key_valid[1, 5] = False
        qc, kc, vc, source_valid = inputs(seed=12, lq=CROSS_DECODER_LENGTH, lk=CROSS_SOURCE_LENGTH)

        @jax.jit
        def run(q, k, v, key_valid, qc, kc, vc, source_valid):
            def self_step(cache, t):
                rows = [jax.lax.dynamic_slice_in_dim(x, t, 1, 1) for x in (q, k, v)]
                out, cache = module.decode_step(*rows, cache, t, L, key_valid[:, t])
                return cache, out

            def cross_step(memory, t):
                row = jax.lax.dynamic_slice_in_dim(qc, t, 1, 1)
                out, memory = module.attend_memory(row, memory, source_valid, t, CROSS_DECODER_LENGTH)
                return memory, out

            memory = module.init_memory(kc, vc, source_valid, CROSS_DECODER_LENGTH)
            return (_scan_steps(self_step, module.init_cache(B, L, H, D, D), L),
                    _scan_steps(cross_step, memory, CROSS_DECODER_LENGTH))

        stepped_self, stepped_cross = run(*f32(q, k, v), jnp.asarray(key_valid), *f32(qc, kc, vc),
                                          jnp.asarray(source_valid))
        want_self, _ = expected(kind, module, q, k, v, allowed(key_valid, L, True))
        want_cross, _ = expected(kind, module, qc, kc, vc, allowed(source_valid, CROSS_DECODER_LENGTH, False))
        np.testing.assert_allclose(stepped_self, want_self, atol=5e-5, rtol=1e-5, err_msg="self")
        np.testing.assert_allclose(stepped_cross, want_cross, atol=5e-5, rtol=1e-5, err_msg="cross")

    def test_trains_in_every_role_of_the_translation_model(self, kind, tiny_config, tmp_path):
        """Two steps of the loop's train step with finite loss and gradient norm, and an update to every
        parameter (the kind's own included) in the encoder's, decoder's and cross-attention. A kind that is not
        incremental is refused in the causal and decoded roles, and trains in the encoder beside softmax."""
        config = tiny_config()
        config.attention.name = kind
        if not incremental(kind):
            for role in ("decoder_self", "cross"):
                with pytest.raises(validate.ConfigError, match=f"^config.attention.name='{kind}': the {role} "
                                                               f"role .+; give attention.{role} another kind$"):
                    validate.validate(config)
                config.attention[role] = "softmax"
        validate.validate(config)
        assert_every_parameter_trains(config, tmp_path)
