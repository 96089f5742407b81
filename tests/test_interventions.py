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
    assert [interventions.parse(spec).name for spec in ("none", "rank=32", "temperature=4", "temperature=0.5")] == [
        "none", "rank32", "temperature4", "temperature0.5"]
    for bad in ("rank=0", "rank=x", "temperature=-1", "sharpen=2", ""):
        with pytest.raises(ValueError, match=rf"^intervention '{bad}': give none, rank=<integer >= 1> or "):
            interventions.parse(bad)


def test_no_intervention_is_the_runs_own_final_evaluation(tiny_run, tmp_path):
    _, workdir = tiny_run
    result = interventions.evaluate(workdir, Intervention(), str(tmp_path / "none"))
    with open(os.path.join(workdir, evaluation.EVAL_FILE)) as f:
        trained = json.load(f)
    assert result["metrics"] == trained["metrics"] and result["step"] == trained["step"]
    assert result["rank"] == trained["rank"]
    with open(tmp_path / "none" / evaluation.EVAL_FILE) as f:
        assert json.load(f)["intervention"] == {"rank": None, "temperature": None, "workdir": workdir}


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


def _mlm_model(config):
    return mlm.create_model(config, types.SimpleNamespace(tokenizer=types.SimpleNamespace(vocab_size=40)))


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
