"""AdamW's weight decay and the decays' parameters (attention/key_gates.py's DecayParam): kept out of it by the
declared tag, every other parameter in it; config.weight_decay_on_decays puts them back (the ablation)."""
import jax
import jax.numpy as jnp
import optax
from flax import nnx

import attention
from attention import key_gates
from training import steps


def _params(kind: str):
    module = attention.create(kind, num_heads=2, head_dim=4, rngs=nnx.Rngs(0))
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
    assert {path[0]: value for path, value in nnx.State(mask).flat_state()} == {
        "beta_weight": True, "beta_bias": True, "gate_weight": False, "gate_bias": False}
    config.weight_decay_on_decays = True  # the ablation: every parameter decays
    assert _moved(config, _params("gated_delta")) == {"beta_weight", "beta_bias", "gate_weight", "gate_bias"}


def test_only_decays_are_tagged():
    """Of every kind's parameters, the DecayParams are exactly the decay gates' w and b."""
    tagged = set()
    for kind in attention.names():
        module = attention.create(kind, num_heads=2, head_dim=4, rngs=nnx.Rngs(0))
        tagged |= {(kind, path[0]) for path, _ in nnx.state(module, key_gates.DecayParam).flat_state()}
    assert tagged == {(kind, name) for kind in ("gated_linear", "gated_delta") for name in ("gate_weight", "gate_bias")}
