"""Hedgehog distilled to softmax: the attention-matching loss a training call adds (attention/kernelized_kinds.py)
against a numpy reference, no gradient into the softmax teacher, the train step (training/steps.py) unchanged
without it and adding it with it, evaluation untouched, a tiny MLM run that lowers and logs it, and the feature
map's logit scale."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import attention
from attention import aux_losses
from configs import mlm as mlm_config
from test_mlm import _config, text_files  # noqa: F401  (text_files: the fixture, used by name)
from training import loop, steps, validate
from training.config_checks import ConfigError
from training.metrics import read_metrics

B, L, H, D = 3, 7, 2, 4
EPS = 1e-6  # the kind's default normaliser floor


def _inputs(seed=0):
    """q, k, v [B, L, H, D] in float64 and key_valid [B, L]: example 0 has 3 padded keys, example 2 none
    allowed, so its rows must not count in the mean."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.normal(size=(B, L, H, D)) for _ in range(3))
    key_valid = np.ones((B, L), bool)
    key_valid[0, L - 3:] = False
    key_valid[2] = False
    return q, k, v, key_valid


def _allowed(key_valid, causal):
    allowed = np.broadcast_to(key_valid[:, None, None, :], (B, H, L, L))
    return allowed & np.tril(np.ones((L, L), bool)) if causal else allowed


def _hedgehog(seed=1, **options):
    """The kind with its weight moved off the identity it starts at, and that weight in float64."""
    module = attention.create("hedgehog", num_heads=H, head_dim=D, rngs=nnx.Rngs(0), **options)
    weight = np.eye(D) + 0.5 * np.random.default_rng(seed).normal(size=(H, D, D))
    module.weight[...] = jnp.asarray(weight, jnp.float32)
    return module, weight


def _features(xp, x, weight, logit_scale=1.0):
    projected = logit_scale * xp.einsum("blhd,hde->blhe", x, weight)
    logits = xp.concatenate([projected, -projected], axis=-1)
    e = xp.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _student(xp, q, k, weight, allowed, logit_scale=1.0):
    """phi(q) phi(k)^T over the allowed keys, each row divided by its sum (+ eps)."""
    scores = xp.einsum("bqhm,bkhm->bhqk", _features(xp, q, weight, logit_scale),
                       _features(xp, k, weight, logit_scale)) * allowed
    return scores / (scores.sum(-1, keepdims=True) + EPS)


def _teacher(q, k, allowed):
    """softmax(q k^T / sqrt(d)) over the allowed keys, in numpy: zero rows where no key is allowed."""
    scores = np.where(allowed, np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D), -np.inf)
    top = np.max(scores, -1, keepdims=True)
    e = np.where(allowed, np.exp(scores - np.where(np.isfinite(top), top, 0.0)), 0.0)
    return e / np.maximum(e.sum(-1, keepdims=True), 1e-300)


def _kl(xp, teacher, student, allowed):
    """Mean over the rows with an allowed key (and heads, batch) of sum_k t log(t / s) over allowed keys."""
    terms = xp.where(allowed, teacher * (xp.log(xp.where(allowed, teacher, 1.0))
                                         - xp.log(xp.where(allowed, student, 1.0))), 0.0)
    rows = allowed.any(-1)
    return terms.sum(-1).sum() / rows.sum()


def _mask(key_valid):
    return jnp.asarray(key_valid[:, None, None, :])


def _f32(*arrays):
    return [jnp.asarray(x, jnp.float32) for x in arrays]


@pytest.mark.parametrize("causal", [False, True], ids=["padding", "causal"])
@pytest.mark.parametrize("logit_scale", [1.0, 2.0])
def test_a_training_call_adds_the_weighted_kl_from_softmax_to_its_own_weights(causal, logit_scale):
    module, weight = _hedgehog(distill_weight=0.7, hedgehog_logit_scale=logit_scale)
    q, k, v, key_valid = _inputs()
    allowed = _allowed(key_valid, causal)
    want = 0.7 * _kl(np, _teacher(q, k, allowed), _student(np, q, k, weight, allowed, logit_scale), allowed)
    module.train()
    module(*_f32(q, k, v), _mask(key_valid), causal=causal)
    np.testing.assert_allclose(aux_losses.pop_total(module), want, rtol=2e-5)
    assert aux_losses.pop_total(module) is None  # popped: nothing is left in the module's state


def test_no_gradient_flows_into_the_softmax_teacher():
    """The loss's gradient for q and k is the reference's with the teacher a constant array; a teacher left
    in the graph would add its own terms (checked to be far from zero, so the comparison can fail)."""
    module, weight = _hedgehog()
    q, k, _, key_valid = _inputs(seed=3)
    allowed = _allowed(key_valid, causal=False)
    constant_teacher = jnp.asarray(_teacher(q, k, allowed), jnp.float32)

    def reference(q, k, teacher=None):
        live = teacher is None
        if live:
            scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D)
            teacher = jnp.where(allowed, jax.nn.softmax(jnp.where(allowed, scores, -1e30), axis=-1), 0.0)
        return _kl(jnp, teacher, _student(jnp, q, k, jnp.asarray(weight, jnp.float32), allowed), allowed)

    got = jax.grad(lambda q, k: module.distillation_loss(q, k, _mask(key_valid)), (0, 1))(*_f32(q, k))
    want = jax.grad(lambda q, k: reference(q, k, constant_teacher), (0, 1))(*_f32(q, k))
    through_teacher = jax.grad(reference, (0, 1))(*_f32(q, k))
    for name, g, w, t in zip("qk", got, want, through_teacher):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=name)
        assert np.abs(np.asarray(t) - np.asarray(w)).max() > 100 * np.abs(np.asarray(g) - np.asarray(w)).max()


def test_evaluation_mode_and_a_fresh_module_add_nothing():
    module, _ = _hedgehog(distill_weight=1.0)
    q, k, v, key_valid = _inputs()
    module(*_f32(q, k, v), _mask(key_valid))  # built, never put in training mode
    module.train()
    module.eval()
    module(*_f32(q, k, v), _mask(key_valid))
    assert aux_losses.pop_total(module) is None


# ---- the train step --------------------------------------------------------------------------------------

def _attention_model(distill_weight):
    """Multi-head hedgehog attention of d_model 8 over the inputs, its kind's weight off the identity."""
    model = attention.MultiHeadAttention("hedgehog", d_model=8, num_heads=H, rngs=nnx.Rngs(5),
                                         kind_options={"distill_weight": distill_weight})
    model.attention.weight[...] = jnp.asarray(_hedgehog()[1], jnp.float32)
    return model


def _task_loss(model, batch):
    out = model(batch["x"], batch["x"], _mask(batch["key_valid"]))
    loss = jnp.mean((out - batch["y"]) ** 2)
    return loss, {"loss": loss}


def _batch():
    rng = np.random.default_rng(7)
    _, _, _, key_valid = _inputs()
    return {"x": jnp.asarray(rng.normal(size=(B, L, 8)), jnp.float32),
            "y": jnp.asarray(rng.normal(size=(B, L, 8)), jnp.float32), "key_valid": key_valid}


def _step_and_reference(distill_weight, reference_loss):
    """(the train step's new params and metrics, the params of one hand-written AdamW step on reference_loss
    (params, graphdef, rest, batch) from the same state)."""
    optimizer = optax.adamw(1e-2)
    graphdef, state = steps.init_state(_attention_model(distill_weight), optimizer)
    params, rest, batch = state["params"], state["rest"], _batch()
    grads = jax.jit(jax.grad(lambda p: reference_loss(p, graphdef, rest, batch)))(params)
    updates, _ = optimizer.update(grads, state["opt_state"], params)
    want = optax.apply_updates(params, updates)
    new_state, metrics = steps.make_train_step(graphdef, optimizer, _task_loss, jax.random.key(0))(
        jax.tree.map(jnp.copy, state), batch)
    return new_state["params"], metrics, want


def _merged_task_loss(params, graphdef, rest, batch):
    return _task_loss(nnx.merge(graphdef, params, rest), batch)[0]


def test_without_distillation_the_train_step_is_the_task_loss_alone():
    """To float32 rounding: the two are separately compiled programs, whose fusions may round differently."""
    got, metrics, want = _step_and_reference(0.0, _merged_task_loss)
    assert set(metrics) == {"loss", "grad_norm", "finite"}
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8), got, want)


def test_with_distillation_the_train_step_adds_the_weighted_matching_loss():
    """The reference adds 0.5 x the KL of the jax.numpy reference, its teacher a constant, on the model's
    own projected queries and keys."""

    def with_matching_loss(params, graphdef, rest, batch):
        model = nnx.merge(graphdef, params, rest)
        q, k = (projection(batch["x"]).reshape(B, L, H, D) for projection in (model.query, model.key))
        allowed = _allowed(batch["key_valid"], causal=False)
        teacher = jax.lax.stop_gradient(jnp.where(allowed, jax.nn.softmax(
            jnp.where(allowed, jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D), -1e30), axis=-1), 0.0))
        student = _student(jnp, q, k, model.attention.weight[...], allowed)
        return _merged_task_loss(params, graphdef, rest, batch) + 0.5 * _kl(jnp, teacher, student, allowed)

    got, metrics, want = _step_and_reference(0.5, with_matching_loss)
    assert float(metrics["aux_loss"]) > 0
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6), got, want)


def test_evaluation_is_the_same_with_and_without_distillation():
    batch, results = _batch(), []
    for distill_weight in (0.0, 2.0):
        graphdef, params, rest = nnx.split(_attention_model(distill_weight), nnx.Param, ...)
        results.append(steps.make_eval_step(graphdef, _task_loss)(params, rest, batch))
    np.testing.assert_array_equal(results[0]["loss"], results[1]["loss"])
    assert set(results[1]) == {"loss"}


# ---- a run, its config, the logit scale -----------------------------------------------------------------

def test_a_tiny_mlm_run_lowers_the_matching_loss_and_logs_it(text_files, tmp_path):  # noqa: F811
    """At the paper's logit scale 2 the matching loss falls from 0.17 to 0.09 over these 40 steps; with a
    negligible weight (1e-6) it rises from 0.18 to 0.21 instead, as training sharpens the softmax teacher."""
    config = _config(text_files, "tiny,attention=hedgehog")
    config.attention.distill_weight, config.attention.hedgehog_logit_scale = 1.0, 2.0
    config.num_train_steps, config.learning_rate = 40, 3e-3
    loop.train_and_evaluate(config, str(tmp_path))
    records = read_metrics(str(tmp_path))
    matching = [line["aux_loss"] for line in records if line["split"] == "train"]
    assert len(matching) == 8 and all(np.isfinite(matching)), matching
    assert matching[-1] < 0.7 * matching[0], matching
    assert not any("aux_loss" in line for line in records if line["split"] == "eval")


def test_every_task_config_carries_the_options_at_their_defaults_and_refuses_bad_values():
    config = mlm_config.get_config("tiny,attention=hedgehog")
    assert (config.attention.distill_weight, config.attention.hedgehog_logit_scale) == (0.0, 1.0)
    config.attention.distill_weight = -0.5
    with pytest.raises(ConfigError, match=r"distill_weight=-0\.5 must be a number >= 0"):
        validate.validate(config)


@pytest.mark.parametrize("logit_scale", [1.0, 2.0])
def test_the_logit_scale_multiplies_the_feature_maps_logits(logit_scale):
    module, weight = _hedgehog(hedgehog_logit_scale=logit_scale)
    q, k, _, key_valid = _inputs(seed=4)
    np.testing.assert_allclose(module.features(jnp.asarray(q, jnp.float32)), _features(np, q, weight, logit_scale),
                               rtol=1e-5, atol=1e-7)
    allowed = _allowed(key_valid, causal=True)
    np.testing.assert_allclose(module.weights(*_f32(q, k), _mask(key_valid), causal=True),
                               _student(np, q, k, weight, allowed, logit_scale), rtol=1e-5, atol=1e-7)
