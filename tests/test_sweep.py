"""sweeps/*.yaml and studies/sweeps.py (python -m scripts.sweep): each file is what its study generates, the
agent's runs are the study's configs, a sweep file runs locally through the study runner, and the W&B identity
of an agent's run."""
import glob
import itertools
import os
import shutil

import pytest
import yaml
from absl import flags
from ml_collections import config_flags

import tasks
from scripts import sweep
from studies import catalog, jobs, runner, sweeps
from training import loop, metrics, validate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MACROS = ("${env}", "${interpreter}", "${program}", "${args}")


# --- the sweep files -------------------------------------------------------------------------------------


def test_each_sweep_file_is_what_its_study_generates():
    paths = sorted(os.path.relpath(path, ROOT) for path in glob.glob(os.path.join(ROOT, "sweeps", "*.yaml")))
    assert paths == sorted(sweeps.sweep_path(task, preset) for task, preset in catalog.sweeps())
    for task, preset in catalog.sweeps():
        with open(os.path.join(ROOT, sweeps.sweep_path(task, preset))) as f:
            assert f.read() == sweeps.sweep_text(task, preset), "stale: python -m scripts.sweep --generate"


def test_generate_writes_the_committed_files(tmp_path, monkeypatch, capsys):
    (tmp_path / "sweeps").mkdir()
    monkeypatch.setattr(jobs, "ROOT", str(tmp_path))
    sweep.main(["--generate"])
    output = capsys.readouterr().out
    for task, preset in catalog.sweeps():
        path = sweeps.sweep_path(task, preset)
        assert (tmp_path / path).read_text() == open(os.path.join(ROOT, path)).read() and str(tmp_path / path) in output


def _train_flags(argv: list[str]):
    """The config and workdir train.py would take from `argv` (its program, then its arguments)."""
    flag_values = flags.FlagValues()
    config = config_flags.DEFINE_config_file("config", flag_values=flag_values, sys_argv=argv)
    workdir = flags.DEFINE_string("workdir", None, "", flag_values=flag_values)
    flag_values(argv)
    return config.value, workdir.value


def _agent_commands(path: str, monkeypatch):
    """(point, train.py's argv) of every run `wandb agent` starts for the grid of the sweep file at `path`:
    its command with ${args} as `--<parameter>=<value>` and the other macros left out, run up to the exec of
    train.py."""
    with open(path) as f:
        definition = yaml.safe_load(f)
    parameters = definition["parameters"]
    grid = [spec["values"] if "values" in spec else [spec["value"]] for spec in parameters.values()]
    started = []
    monkeypatch.setattr(sweep.os, "execv", lambda program, argv: started.append(argv))
    for values in itertools.product(*grid):
        point = dict(zip(parameters, values))
        argv = []
        for item in definition["command"]:
            argv += [f"--{name}={value}" for name, value in point.items()] if item == "${args}" else (
                [] if item in MACROS else [item])
        assert argv[:2] == ["-m", "scripts.sweep"]
        sweep.main(argv[2:])
        yield point, started[-1][1:]  # without the interpreter


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "sweeps", "*.yaml"))))
def test_no_sweep_file_trains_two_identical_configs(path, monkeypatch):
    """Each of the agent's runs is a distinct config (its workdir aside: the agent's run id)."""
    monkeypatch.chdir(ROOT)  # the agent runs from the repository root
    configs = [_train_flags(argv)[0].to_json(sort_keys=True)
               for _, argv in _agent_commands(os.path.relpath(path, ROOT), monkeypatch)]
    assert len(set(configs)) == len(configs)


@pytest.mark.parametrize("task, preset", catalog.sweeps())
def test_the_agents_runs_are_the_studys_runs_each_at_its_seeds(task, preset, monkeypatch):
    monkeypatch.chdir(ROOT)
    study = catalog.get_study(task, preset)
    started = {}
    for point, argv in _agent_commands(sweeps.sweep_path(task, preset), monkeypatch):
        config, workdir = _train_flags(argv)
        assert workdir == os.path.join(ROOT, "runs", "agent", f"{task}-{preset}", metrics.RUN_ID_PLACEHOLDER)
        assert config.wandb.group == f"{task}-{preset}" and config.seed == point["seed"]
        run = next(run for run in study.runs if run.name == point["study_run"])
        for name, value in {**study.overrides, **run.overrides}.items():
            field = config
            for part in name.split("."):
                field = field[part]
            assert field == value, name
        validate.validate(config)
        started.setdefault(point["study_run"], set()).add(point["seed"])
    assert started == {run.name: set(range(study.seeds)) for run in study.runs}


def test_an_agent_run_the_sweep_lacks_is_one_line(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    path = sweeps.sweep_path(*catalog.sweeps()[0])
    with pytest.raises(SystemExit) as exit:
        sweep.main([path, "--study_run=nonsense"])
    assert exit.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: --study_run=nonsense --seed=0: not a run of {path}; its runs: ")


# --- a sweep file run locally ----------------------------------------------------------------------------


def test_a_sweep_file_runs_its_study_through_the_runner_and_an_edited_one_is_refused(tmp_path, monkeypatch,
                                                                                     capsys):
    calls = []
    monkeypatch.setattr(runner, "run_study", lambda *args: calls.append(args))
    monkeypatch.chdir(ROOT)
    path = sweeps.sweep_path(*catalog.sweeps()[0])
    argv = [path, "--jobs=2", "--only=softmax", f"--runs_dir={tmp_path}", "--", "--config.num_train_steps=10"]
    sweep.main(argv)
    [(task, preset, options, extra, command)] = calls
    assert (task, preset) == catalog.sweeps()[0] and extra == ["--config.num_train_steps=10"]
    assert (options.jobs, options.only, options.runs_dir, options.seeds) == (2, "softmax", str(tmp_path), None)
    assert options.reports_dir == os.path.join("runs", "reports", sweeps.SWEEP_REPORTS)  # not the study's
    assert command == "python -m scripts.sweep " + " ".join(argv)

    edited = tmp_path / "edited.yaml"
    shutil.copy(path, edited)
    edited.write_text(edited.read_text().replace("goal: maximize", "goal: minimize"))
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    for bad, line in ((edited, "not the sweep file of a study marked `sweep`"), (binary, "not a text file")):
        with pytest.raises(SystemExit) as exit:
            sweep.main([str(bad)])
        assert exit.value.code == 2 and capsys.readouterr().err.startswith(f"error: {bad}: {line}")
    assert len(calls) == 1


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
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv(metrics.RUN_ID_VAR, "run0001")
    monkeypatch.setenv(metrics.SWEEP_ID_VAR, "sweep01")
    # W&B reads these variables once per process, at its first run: one that an earlier test in this worker
    # started (tests/test_wandb.py) would keep them from reaching this one, and this one's sweep, once
    # torn down no more, would reach a later test's run (its keys then never reach its file).
    wandb.teardown()
    config = tiny_config()
    writer = loop.metrics_writer(tasks.get(config.task), config, str(tmp_path), 0)
    try:
        assert (writer.run.id, writer.run.group) == ("run0001", "sweep01")
        assert set(writer.run.tags) == {"translation", "softmax"}
        assert writer.run.config["attention"]["name"] == "softmax" and writer.run.config["seed"] == 0
    finally:
        writer.close()
        wandb.teardown()
    assert (tmp_path / "wandb_id.txt").read_text() == "run0001"
    monkeypatch.setenv(metrics.RUN_ID_VAR, "run0002")
    with pytest.raises(ValueError, match="holds W&B run run0001, but \\$WANDB_RUN_ID is run0002"):
        metrics.MetricsWriter(str(tmp_path), config, 0)
