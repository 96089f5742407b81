"""Interventions on a trained softmax model at evaluation (studies/interventions.py): no intervention is the run's
own evaluation; a temperature divides every logit (held to softmax written in numpy); a rank cut is the
softmax_rank kind over the very parameters softmax trained; runs of another kind, causal roles under a rank cut
and malformed specs are refused in one line."""
import json
import os
import types

import jax
import numpy as np
import pytest
from flax import nnx

from attention import MultiHeadAttention
from configs import mlm as mlm_config
from studies import StudyError, interventions
from studies.interventions import Intervention
from tasks import mlm
from training import evaluation, validate


def test_specs_parse_to_interventions_and_a_bad_one_names_the_forms():
    specs = ("none", "rank=32", "temperature=4", "temperature=0.5", "hedgehog=0", "hedgehog=300")
    assert [interventions.parse(spec).name for spec in specs] == [
        "none", "rank32", "temperature4", "temperature0.5", "hedgehog0", "hedgehog300"]
    for bad in ("rank=0", "rank=x", "temperature=-1", "sharpen=2", "", "hedgehog=-1", "hedgehog=1.5"):
        with pytest.raises(ValueError, match=rf"^intervention '{bad}': give none, rank=<integer >= 1>, "):
            interventions.parse(bad)


def test_no_intervention_is_the_runs_own_final_evaluation(tiny_run, tmp_path):
    _, workdir = tiny_run
    result = interventions.evaluate(workdir, Intervention(), str(tmp_path / "none"))
    with open(os.path.join(workdir, evaluation.EVAL_FILE)) as f:
        trained = json.load(f)
    assert result["metrics"] == trained["metrics"] and result["step"] == trained["step"]
    assert result["rank"] == trained["rank"]
    with open(tmp_path / "none" / evaluation.EVAL_FILE) as f:
        assert json.load(f)["intervention"] == {"rank": None, "temperature": None, "hedgehog_steps": None,
                                                "workdir": workdir}


def _softmax(x):
    x = x - x.max(-1, keepdims=True)
    return np.exp(x) / np.exp(x).sum(-1, keepdims=True)


def test_a_temperature_divides_every_logit_of_every_head():
    d_model, heads, length, temperature = 16, 2, 7, 3.0
    module = MultiHeadAttention("softmax", d_model=d_model, num_heads=heads, rngs=nnx.Rngs(0))
    module.query.bias[...] = np.linspace(-1, 1, d_model)  # a bias too, which the temperature must divide
    x = np.random.default_rng(0).normal(size=(1, length, d_model)).astype(np.float32)
    params = {name: (np.asarray(getattr(module, name).kernel[...], np.float64),
                     np.asarray(getattr(module, name).bias[...], np.float64)) for name in ("query", "key")}
    q, k = ((x[0] @ kernel + bias).reshape(length, heads, -1) for kernel, bias in params.values())
    expected = _softmax(np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d_model // heads) / temperature)
    interventions.flatten_rows(module, temperature)
    weights = module.attention.weights(module._heads(module.query(x)), module._heads(module.key(x)), None)
    np.testing.assert_allclose(np.asarray(weights)[0], expected, rtol=1e-5, atol=1e-6)


_TINY_VOCAB = types.SimpleNamespace(tokenizer=types.SimpleNamespace(vocab_size=40))  # all create_model reads of data


def _mlm_model(config):
    return mlm.create_model(config, _TINY_VOCAB)


def test_a_rank_cut_is_softmax_rank_over_the_parameters_softmax_trained():
    config = mlm_config.get_config("tiny")
    cut = interventions.intervened_config(config, Intervention(rank=4))
    assert (cut.attention.name, cut.attention.rank, cut.eval.plots) == ("softmax_rank", 4, False)
    assert config.attention.name == "softmax"  # the trained config is left as it was
    validate.validate(cut)
    trained, intervened = (nnx.state(_mlm_model(c), nnx.Param) for c in (config, cut))
    assert jax.tree.map(np.shape, trained) == jax.tree.map(np.shape, intervened)


def test_other_kinds_and_causal_roles_under_a_rank_cut_are_refused(tiny_config):
    config = tiny_config()
    with pytest.raises(validate.ConfigError, match="softmax_rank"):
        validate.validate(interventions.intervened_config(config, Intervention(rank=4)))
    config.attention.name = "linear"
    with pytest.raises(ValueError, match="^the interventions act on softmax attention; this run trained linear$"):
        interventions.intervened_config(config, Intervention(temperature=2.0))


def test_the_script_refuses_a_folder_without_seeds_and_a_bad_intervention(tmp_path, capsys):
    from scripts import attention_interventions

    for flags, message in (([f"--runs={tmp_path}"], f"--runs={tmp_path}: no seed<k> workdirs in it"),
                           ([f"--runs={tmp_path}", "--interventions=rank=0"], "--interventions: intervention 'rank=0'")):
        if "--interventions" in flags[-1]:
            (tmp_path / "seed0").mkdir()
        with pytest.raises(SystemExit) as exit_info:
            attention_interventions.main(flags)
        assert exit_info.value.code == 2 and capsys.readouterr().err.startswith(f"error: {message}")


def test_a_run_that_cannot_be_cut_is_one_error_naming_its_workdir(tiny_run, tmp_path):
    """The translation model's decoder is causal: a rank cut there is refused, naming the workdir."""
    _, workdir = tiny_run
    with pytest.raises(StudyError, match=f"^{workdir}: config.attention.name='softmax_rank'"):
        interventions.run([workdir], [Intervention(rank=4)], str(tmp_path / "evals"), str(tmp_path / "out"), "", "")


def test_the_hedgehog_swap_keeps_every_trained_parameter_and_starts_its_maps_at_the_identity():
    config = mlm_config.get_config("tiny")
    swapped_config = interventions.intervened_config(config, Intervention(hedgehog_steps=0))
    assert (swapped_config.attention.name, swapped_config.attention.hedgehog_logit_scale) == ("hedgehog", 2.0)
    trained = _mlm_model(config)
    swapped = interventions.with_trained_parameters(mlm, swapped_config, _TINY_VOCAB, trained)
    trained_params = nnx.to_flat_state(nnx.state(trained, nnx.Param))
    swapped_params = dict(nnx.to_flat_state(nnx.state(swapped, nnx.Param)))
    for path, value in trained_params:
        np.testing.assert_array_equal(swapped_params.pop(path)[...], value[...])
    assert swapped_params and all(path[-2:] == ("attention", "weight") for path in swapped_params)
    head_dim = config.model.d_model // config.model.num_heads
    for value in swapped_params.values():
        np.testing.assert_array_equal(value[...], np.tile(np.eye(head_dim), (config.model.num_heads, 1, 1)))


def test_fitting_trains_the_maps_alone_lowers_the_matching_loss_and_is_recorded(tiny_run, tmp_path, monkeypatch):
    """On the tiny translation run (Hedgehog in its encoder, causal decoder and cross roles): the parameters around
    the fitting, seen through a wrapper of fit_hedgehog_maps, and the evaluation written after it."""
    _, workdir = tiny_run
    fit, seen = interventions.fit_hedgehog_maps, {}

    def values(model):
        return {path: np.array(value[...]) for path, value in nnx.to_flat_state(nnx.state(model, nnx.Param))}

    def watched_fit(task, config, data, model, steps):
        seen["before"] = values(model)
        losses = fit(task, config, data, model, steps)
        seen["after"], seen["modules"] = values(model), list(nnx.iter_modules(model))
        return losses

    monkeypatch.setattr(interventions, "fit_hedgehog_maps", watched_fit)
    result = interventions.evaluate(workdir, Intervention(hedgehog_steps=40), str(tmp_path / "hedgehog40"))
    losses = result["intervention"]["fit_loss"]
    assert list(losses) == ["0", "39"] and losses["39"] < 0.9 * losses["0"]
    before, after = seen["before"], seen["after"]
    moved = {path for path in before if not np.array_equal(before[path], after[path])}
    assert moved == {path for path in before if path[-1] == "weight"} and len(moved) == 3  # one map per role
    assert all(module.deterministic for _, module in seen["modules"] if hasattr(module, "deterministic"))
    assert set(result["attention"].values()) == {"hedgehog"} and result["intervention"]["hedgehog_steps"] == 40
    head_dim = result["config"]["model"]["d_model"] // result["config"]["model"]["num_heads"]
    assert {row["role"]: row["rank_bound"] for row in result["rank"]} == {  # a causal mask lifts the bound
        "encoder_self": 2 * head_dim, "decoder_self": None, "cross": 2 * head_dim}


def test_a_fitting_that_diverges_stops_in_one_line_naming_its_step(tiny_run, tmp_path, monkeypatch):
    _, workdir = tiny_run
    monkeypatch.setattr(interventions.aux_losses, "pop_total", lambda model: np.float32("nan"))
    with pytest.raises(StudyError, match=r"fitting Hedgehog's maps: the attention-matching loss is nan at step 1 of 3;"):
        interventions.run([workdir], [Intervention(hedgehog_steps=3)], str(tmp_path / "evals"), str(tmp_path / "out"),
                          "", "")
