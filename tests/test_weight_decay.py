"""AdamW's weight decay and the decays' parameters (attention/key_gates.py's DecayParam): kept out of it by the
declared tag, every other parameter in it; config.weight_decay_on_decays puts them back (the ablation)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import attention
from attention import key_gates
from training import steps


def _params(kind: str):
    module = attention.create(kind, num_heads=2, head_dim=4, d_model=8, rngs=nnx.Rngs(0))
    # Every parameter away from 0, so that weight decay would move it.
    return jax.tree.map(lambda x: x + 1.0, nnx.state(module, nnx.Param))


def _moved(config, params) -> set[str]:
    """The parameters two AdamW updates with zero gradients move: weight decay's alone."""
    optimizer = steps.create_optimizer(config)
    state, zeros = optimizer.init(params), jax.tree.map(jnp.zeros_like, params)
    moved = params
    for _ in range(2):  # the schedule's first step has rate 0
        updates, state = optimizer.update(zeros, state, moved)
        moved = optax.apply_updates(moved, updates)
    return {path[0] for (path, before), (_, after) in zip(params.flat_state(), moved.flat_state())
            if not jnp.array_equal(before[...], after[...])}


def test_the_decays_parameters_are_out_of_weight_decay_and_nothing_else(tiny_config):
    """gated_delta has a decay gate (gate_weight, gate_bias) and a write strength (beta_weight, beta_bias): the
    tag takes the decay's out, the strength's stay in; gated_linear's gate is a decay too."""
    config = tiny_config()
    config.warmup_steps, config.weight_decay = 1, 0.1
    assert _moved(config, _params("gated_delta")) == {"beta_weight", "beta_bias"}
    assert _moved(config, _params("gated_linear")) == set()
    mask = steps.decayed(_params("gated_delta"))
    assert {path[0]: variable.value for path, variable in mask.flat_state()} == {
        "beta_weight": True, "beta_bias": True, "gate_weight": False, "gate_bias": False}
    config.weight_decay_on_decays = True  # the ablation: every parameter decays
    assert _moved(config, _params("gated_delta")) == {"beta_weight", "beta_bias", "gate_weight", "gate_bias"}


def test_the_input_gated_kinds_decays_are_out_of_weight_decay(tiny_config):
    """Gated DeltaNet's A_log and dt_bias (Mamba2's exemption) and GLA's gate bias stay; their projections of x,
    output norms and gates decay."""
    config = tiny_config()
    config.warmup_steps, config.weight_decay = 1, 0.1
    assert _moved(config, _params("gated_deltanet")) == {"beta", "decay", "output_norm"}
    assert _moved(config, _params("gla")) == {"gate_down", "gate_up", "output_norm"}
    config.weight_decay_on_decays = True
    assert _moved(config, _params("gated_deltanet")) == {"beta", "decay", "output_norm", "a_log", "dt_bias"}


def test_only_decays_are_tagged():
    """Of every kind's parameters, the DecayParams are exactly the decay gates' w and b."""
    tagged = set()
    for kind in attention.names():
        module = attention.create(kind, num_heads=2, head_dim=4, d_model=8, rngs=nnx.Rngs(0))
        tagged |= {(kind, path[0]) for path, _ in nnx.state(module, key_gates.DecayParam).flat_state()}
    assert tagged == {(kind, name) for kind in ("gated_linear", "gated_delta") for name in ("gate_weight", "gate_bias")
                      } | {("gla", "gate_bias"), ("gated_deltanet", "a_log"), ("gated_deltanet", "dt_bias")}


def test_the_optimizer_is_optax_adamw_in_its_state_and_updates(tiny_config):
    """Its state is optax.adamw's, so that a checkpoint written before the exemption restores; with no decay's
    parameter to exempt, its updates are adamw's."""
    config = tiny_config()
    config.warmup_steps, config.weight_decay = 1, 0.1
    params = _params("linear") | {"w": nnx.Param(jnp.arange(3.0))}
    ours, theirs = steps.create_optimizer(config), optax.chain(
        optax.clip_by_global_norm(config.grad_clip_norm),
        optax.adamw(steps.learning_rate_schedule(config), weight_decay=config.weight_decay))
    states = [optimizer.init(params) for optimizer in (ours, theirs)]
    assert jax.tree.structure(states[0]) == jax.tree.structure(states[1])
    gradients = jax.tree.map(lambda x: 0.1 * jnp.ones_like(x), params)
    for _ in range(2):
        (mine, states[0]), (want, states[1]) = (optimizer.update(gradients, state, params)
                                                for optimizer, state in zip((ours, theirs), states))
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), mine, want)


def test_a_run_recorded_before_the_exemption_loads_with_weight_decay_on_its_decays():
    """Its checkpoints hold a model trained with weight decay on every parameter: continued or evaluated, it is
    that run; a record that names the field keeps its value."""
    from configs import recall as recall_config
    from configs import workdir as workdir_config
    record = recall_config.get_config("tiny").to_dict()
    del record["weight_decay_on_decays"]
    assert workdir_config.from_record(record, "runs/x/config.json").weight_decay_on_decays is True
    record["weight_decay_on_decays"] = False
    assert workdir_config.from_record(record, "runs/x/config.json").weight_decay_on_decays is False
