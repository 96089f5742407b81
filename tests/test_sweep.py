"""sweeps/*.yaml and scripts/sweep.py: the grids, the agent's command, the local runner on a tiny grid,
and the W&B identity of a run started by `wandb agent`."""
import csv
import glob
import json
import os

import numpy as np
import pytest
from absl import flags
from ml_collections import config_flags

import attention
from scripts import compare, sweep
from training import loop, metrics, validate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEPS = sorted(glob.glob(os.path.join(ROOT, "sweeps", "*.yaml")))


def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _grid(tmp_path, parameters: str, **keys) -> str:
    """A sweep definition with `parameters` (YAML lines) and the real sweeps' command on translation."""
    head = {"name": "tiny", "program": "train.py", "method": "grid", **keys}
    command = ["${env}", "${interpreter}", "${program}", "--config=configs/translation.py:tiny",
               "--workdir=runs/agent/tiny/{wandb_run_id}", "${args}"]
    return _write(tmp_path / "grid.yaml", "".join(f"{key}: {value}\n" for key, value in head.items())
                  + "parameters:\n" + parameters + "command:\n" + "".join(f"  - '{item}'\n" for item in command))


# --- the sweep definitions -------------------------------------------------------------------------------


def _train_flags(argv: list[str]):
    """The config and workdir train.py would take from `argv` (its program, then its arguments)."""
    flag_values = flags.FlagValues()
    config = config_flags.DEFINE_config_file("config", flag_values=flag_values, sys_argv=argv)
    workdir = flags.DEFINE_string("workdir", None, "", flag_values=flag_values)
    flag_values(argv)
    return config.value, workdir.value


def test_sweep_names_are_the_files_and_their_runs_get_one_workdir_each():
    assert [os.path.basename(path) for path in SWEEPS] == ["mlm.yaml", "translation.yaml"]
    for path in SWEEPS:
        definition = sweep.load_sweep(path)
        assert definition.name == os.path.basename(path).removesuffix(".yaml")
        workdir = next(item for item in definition.command if item.startswith("--workdir="))
        assert workdir.endswith(f"/{definition.name}/{metrics.RUN_ID_PLACEHOLDER}")
        assert os.path.exists(os.path.join(ROOT, definition.program))


@pytest.mark.parametrize("path", SWEEPS, ids=os.path.basename)
def test_every_point_of_the_real_sweeps_is_a_valid_config_train_py_accepts(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the agent runs from the repository root: --config is relative to it
    definition = sweep.load_sweep(path)
    assert set(definition.swept) == {"config.attention.name", "config.attention.num_features", "config.seed"}
    kinds = definition.parameters["config.attention.name"]
    features, seeds = definition.parameters["config.attention.num_features"], definition.parameters["config.seed"]
    # Kinds taking a feature size run once per size, the others once.
    distinct = sum(len(features) if "num_features" in attention.options(kind) else 1 for kind in kinds) * len(seeds)
    points = sweep.expand(definition)
    assert len(points) == distinct < len(kinds) * len(features) * len(seeds)
    for point in points:
        config, workdir = _train_flags(sweep.train_command(definition, point, "/runs/p", [])[1:])
        assert workdir == "/runs/p"
        for name, value in point.items():
            field = config
            for part in name.removeprefix("config.").split("."):
                field = field[part]
            assert field == value, name
        assert config.wandb.group == definition.name
        validate.validate(config)


def test_options_a_kind_ignores_do_not_repeat_its_runs(tmp_path):
    definition = sweep.load_sweep(_grid(tmp_path, (
        "  config.attention.name: {values: [softmax, performer]}\n"
        "  config.attention.num_features: {values: [8, 16]}\n"
        "  config.seed: {values: [0, 1]}\n"
        "  config.num_train_steps: {value: 5}\n")))
    points = sweep.expand(definition)
    assert [sweep.slug(definition, point) for point in points] == [
        "attention.name=softmax,seed=0",
        "attention.name=softmax,seed=1",
        "attention.name=performer,attention.num_features=8,seed=0",
        "attention.name=performer,attention.num_features=8,seed=1",
        "attention.name=performer,attention.num_features=16,seed=0",
        "attention.name=performer,attention.num_features=16,seed=1",
    ]
    # softmax runs with the arguments of the first point the agent would start for it.
    assert sweep.train_command(definition, points[1], "/runs/s", ["--config.eval.plots=False"])[1:] == [
        os.path.join(ROOT, "train.py"),
        "--config=configs/translation.py:tiny",
        "--workdir=/runs/s",
        "--config.attention.name=softmax",
        "--config.attention.num_features=8",
        "--config.seed=1",
        "--config.num_train_steps=5",
        "--config.wandb.group=tiny",
        "--config.eval.plots=False",
    ]
    only = sweep.select(definition, points, ["attention.num_features=16", "config.seed=1"])
    assert [sweep.slug(definition, point) for point in only] == [
        "attention.name=softmax,seed=1", "attention.name=performer,attention.num_features=16,seed=1"]
    with pytest.raises(ValueError, match="--only=width=3: width is not swept; swept: attention.name, "):
        sweep.select(definition, points, ["width=3"])
    with pytest.raises(ValueError, match="--only=seed=0,7: 7 not in the grid; seed: 0, 1"):
        sweep.select(definition, points, ["seed=0,7"])


@pytest.mark.parametrize("parameters, keys, message", [
    ("  config.seed: {values: [0]}\n", {"method": "random"}, "method: 'random'; scripts/sweep.py runs grid sweeps only"),
    ("  config.learning_rate: {min: 0.001, max: 0.1}\n", {},
     "parameter config.learning_rate: a grid needs `values: \\[...\\]` or `value: ...`"),
    ("  config.seed: {values: []}\n", {}, "parameter config.seed: `values` must be a non-empty list"),
    ("  seed: {values: [0]}\n", {}, "parameter seed: train.py takes config fields, named config.<field>"),
])
def test_definitions_the_local_runner_cannot_run_are_named(tmp_path, parameters, keys, message):
    with pytest.raises(ValueError, match=message):
        sweep.load_sweep(_grid(tmp_path, parameters, **keys))


def test_macros_other_than_the_agents_basic_ones_are_an_error(tmp_path):
    path = _write(tmp_path / "json.yaml", "method: grid\nparameters:\n  config.seed: {values: [0]}\n"
                  "command: ['${env}', '${interpreter}', '${program}', '--workdir=x', '${args_json_file}']\n")
    with pytest.raises(ValueError, match=r"command: \$\{args_json_file\} not supported"):
        sweep.load_sweep(path)


# --- the local runner on a tiny grid ---------------------------------------------------------------------


def _train_in_process(command: list[str], workdir: str, env) -> bool:
    """compare.train without its process start (seconds of imports each): train.py's flags parsed from
    the command, then its training, in this process."""
    config, workdir_flag = _train_flags(command[1:])
    assert workdir_flag == workdir
    loop.train_and_evaluate(config, workdir)
    return True


def test_main_trains_a_tiny_grid_tabulates_every_eval_json_and_skips_it_next_time(tmp_path, data_files, capsys,
                                                                                    monkeypatch):
    monkeypatch.setattr(compare, "train", _train_in_process)
    monkeypatch.chdir(ROOT)
    train_file, test_file = data_files
    # Two runs (a third of the suite's budget for this file): one kind, so that they differ by seed only.
    path = _grid(tmp_path, (
        "  config.attention.name: {values: [linear]}\n"
        "  config.seed: {values: [0, 1]}\n"
        "  config.dataset.name: {value: files}\n"
        f"  config.dataset.train_file: {{value: '{train_file}'}}\n"
        f"  config.dataset.test_file: {{value: '{test_file}'}}\n"))
    argv = [path, f"--runs_dir={tmp_path / 'runs'}", "--jobs=2", "--", "--config.num_train_steps=10"]
    sweep.main(argv)
    output = capsys.readouterr().out
    assert output.count(" done in ") == 2 and "[2/2]" in output and "FAILED" not in output

    out_dir = tmp_path / "runs" / "tiny"
    with open(out_dir / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(row["attention.name"], row["seed"]) for row in rows] == [("linear", "0"), ("linear", "1")]
    evals = []
    for seed, row in enumerate(rows):
        workdir = out_dir / f"attention.name=linear,seed={seed}"
        result = json.loads((workdir / "eval.json").read_text())
        assert json.loads((workdir / "config.json").read_text())["num_train_steps"] == result["step"] == 10
        evals.append(result)
        for name in ("exact_match", "token_accuracy", "bleu", "loss"):
            assert float(row[name]) == result["metrics"][name]
        for role in ("encoder_self", "decoder_self", "cross"):
            expected = np.mean([rank["effective_rank"] for rank in result["rank"] if rank["role"] == role])
            assert float(row[f"effective_rank/{role}"]) == pytest.approx(expected, rel=1e-12)

    markdown = (out_dir / "results.md").read_text()
    for seed, result in enumerate(evals):
        assert f"| linear | {seed} | {result['metrics']['exact_match']:.4f} |" in markdown
    losses = [result["metrics"]["loss"] for result in evals]
    cross = [np.mean([rank["effective_rank"] for rank in result["rank"] if rank["role"] == "cross"])
             for result in evals]
    loss, rank = (f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f}" for values in (losses, cross))
    line = next(line for line in markdown.splitlines() if line.startswith("| linear | 2 |"))
    assert f"| {loss} |" in line and line.endswith(f"| {rank} |")

    sweep.main(argv)
    output = capsys.readouterr().out
    assert output.count("finished earlier, skipped") == 2 and " done in " not in output


# --- W&B identity under `wandb agent` --------------------------------------------------------------------


def test_workdir_placeholder_takes_the_agents_run_id_or_names_the_variable(monkeypatch):
    monkeypatch.delenv(metrics.RUN_ID_VAR, raising=False)
    assert metrics.resolve_workdir("runs/x") == "runs/x"
    with pytest.raises(ValueError, match=r"\{wandb_run_id\}, filled from \$WANDB_RUN_ID, which is not set"):
        metrics.resolve_workdir("runs/sweeps/{wandb_run_id}")
    monkeypatch.setenv(metrics.RUN_ID_VAR, "ab12cd34")
    assert metrics.resolve_workdir("runs/sweeps/{wandb_run_id}/") == "runs/sweeps/ab12cd34/"


def test_an_agents_run_keeps_its_id_groups_by_sweep_and_refuses_another_runs_workdir(tiny_config, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv(metrics.RUN_ID_VAR, "run0001")
    monkeypatch.setenv(metrics.SWEEP_ID_VAR, "sweep01")
    config = tiny_config()
    writer = metrics.MetricsWriter(str(tmp_path), config, 0)
    try:
        assert (writer.run.id, writer.run.group) == ("run0001", "sweep01")
        assert set(writer.run.tags) == {"translation", "softmax"}
        assert writer.run.config["attention"]["name"] == "softmax" and writer.run.config["seed"] == 0
    finally:
        writer.close()
    assert (tmp_path / "wandb_id.txt").read_text() == "run0001"
    monkeypatch.setenv(metrics.RUN_ID_VAR, "run0002")
    with pytest.raises(ValueError, match="holds W&B run run0001, but \\$WANDB_RUN_ID is run0002"):
        metrics.MetricsWriter(str(tmp_path), config, 0)
