"""model.layer_kinds: one self-attention kind per layer (Based's interleaving of a window and Taylor layers),
through the model, the config checks and the evaluation's records."""
import jax
import numpy as np
import pytest
from flax import nnx

from configs import recall as recall_config
from configs import translation as translation_config
from models import LanguageModel, TransformerSpec
from training import evaluation, model_config, validate
from training.validate import ConfigError
from test_design import violations

V = 20


def _spec(**fields) -> TransformerSpec:
    return TransformerSpec(**{"num_layers": 2, "d_model": 8, "num_heads": 2, "mlp_dim": 0, "dropout_rate": 0.0,
                              "max_len": 12, "positions": "learned", "qk_head_dim": 2,
                              "attention": dict.fromkeys(("encoder_self", "decoder_self"), "softmax"), **fields})


def _kinds(model: LanguageModel, role: str) -> list[str]:
    return [layer.kind for layer in model.attention_layers()[role]]


def test_each_layer_takes_its_kind_and_agreeing_layers_build_the_same_model():
    options = {"local": {"window": 3}}
    mixed = LanguageModel(V, _spec(layer_kinds=("local", "taylor"), attention_options=options), rngs=nnx.Rngs(0),
                          role="decoder_self")
    assert _kinds(mixed, "decoder_self") == ["local", "taylor"]
    assert mixed.attention_layers()["decoder_self"][0].attention.window == 3
    # The same kind in every layer, by layer or by role: the same parameters drawn in the same order.
    tokens = jax.random.randint(jax.random.key(1), (2, 12), 0, V)
    by_layer = LanguageModel(V, _spec(layer_kinds=("softmax", "softmax")), rngs=nnx.Rngs(0), role="decoder_self")
    by_role = LanguageModel(V, _spec(), rngs=nnx.Rngs(0), role="decoder_self")
    np.testing.assert_array_equal(by_layer(tokens), by_role(tokens))


def test_a_mixed_causal_model_sees_no_later_position():
    model = LanguageModel(V, _spec(layer_kinds=("local", "taylor"), attention_options={"local": {"window": 3}}),
                          rngs=nnx.Rngs(0), role="decoder_self")
    tokens = jax.random.randint(jax.random.key(2), (2, 12), 0, V)
    changed = tokens.at[:, 7:].set((tokens[:, 7:] + 1) % V)
    np.testing.assert_allclose(model(tokens)[:, :7], model(changed)[:, :7], atol=1e-6)


def _recall_config(layer_kinds: str, form: str = "causal"):
    config = recall_config.get_config(f"tiny,form={form}")
    config.model.layer_kinds = layer_kinds
    return config


@pytest.mark.parametrize("layer_kinds, message", [
    ("local", r"^config.model.layer_kinds='local' names 1 kind\(s\) for config.model.num_layers=2: one a layer$"),
    ("local,taylr", r"^config.model.layer_kinds \(layer 1\)='taylr' is not allowed; .*; did you mean taylor\?$"),
    ("softmax_rank,softmax", r"^config.model.layer_kinds='softmax_rank,softmax': the decoder_self role attends "
                             r"causally, and kind 'softmax_rank' cannot: .*; give model.layer_kinds another kind$"),
])
def test_a_wrong_list_is_refused_in_one_line(layer_kinds, message):
    with pytest.raises(ConfigError, match=message):
        validate.validate(_recall_config(layer_kinds))


def test_a_model_without_self_attention_refuses_layer_kinds():
    config = translation_config.get_config("tiny")
    config.model.name = "rnn"
    config.model.layer_kinds = "softmax,softmax"
    with pytest.raises(ConfigError, match=r"^config.model.layer_kinds='softmax,softmax': this model has no "
                                          r"self-attention \(its roles: cross\); leave it empty$"):
        validate.validate(config)


def test_the_records_name_every_layers_kind_state_and_bound():
    """eval.json's `attention` names the layers' kinds as written, `state` holds each layer's, the rank rows
    each layer's bound; the options of both kinds are read."""
    config = _recall_config("softmax,linear", form="bidirectional")
    config.model.qk_head_dim = 4
    validate.validate(config)
    roles = ("encoder_self",)
    assert model_config.role_kinds(config, roles) == {"encoder_self": "softmax,linear"}
    assert set(model_config.kind_options(config, roles)) == {"softmax", "linear"}
    spec = model_config.transformer_spec(config, 16, roles)
    model = LanguageModel(V, spec, rngs=nnx.Rngs(0), role="encoder_self")
    assert evaluation.rank_bounds(model) == {"encoder_self": [None, 4]}
    (state,) = evaluation.attention_state(model, {"encoder_self": 16}).values()
    value_dim = config.model.d_model // config.model.num_heads
    softmax_state, linear_state = 16 * (4 + value_dim), 4 * value_dim  # every key and value; m x d_v
    assert state["layers"] == [{"kind": "softmax", "feature_dim": None, "per_head": softmax_state},
                               {"kind": "linear", "feature_dim": 4, "per_head": linear_state}]
    assert (state["kind"], state["feature_dim"]) == ("softmax,linear", None)
    assert state["total"] == (softmax_state + linear_state) * config.model.num_heads
    assert state["per_head"] == round((softmax_state + linear_state) / 2)
    assert violations(state, "state_entry", "state.encoder_self") == []  # as docs/design.md declares it
