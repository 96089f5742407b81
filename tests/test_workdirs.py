"""A workdir belongs to one config: train.py and eval.py refuse another before writing anything."""
import json
import os
import shutil

import pytest

from configs import workdir as workdir_config
from runtime import locks, workdirs
from runtime.workdirs import WorkdirError
from training import loop
from training.loop import evaluate
from training.validate import ConfigError


@pytest.fixture(scope="module")
def trained(tiny_run):
    """(config, workdir) of a finished tiny run (the session's: tests copy it before writing)."""
    return tiny_run


def _copy(trained, tmp_path) -> str:
    copy = str(tmp_path / "run")
    shutil.copytree(trained[1], copy)
    return copy


def _files(workdir: str) -> dict[str, bytes]:
    """Every file under the workdir, by relative path: what a refused command must leave as it was."""
    contents = {}
    for parent, _, names in os.walk(workdir):
        for name in set(names) - {locks.LOCK_FILE}:  # the lock holds the PID of the last process
            path = os.path.join(parent, name)
            with open(path, "rb") as f:
                contents[os.path.relpath(path, workdir)] = f.read()
    return contents


def _changed(config, **fields):
    config = config.copy_and_resolve_references()
    for dotted, value in fields.items():
        parent, _, name = dotted.replace("__", ".").rpartition(".")
        (config[parent] if parent else config)[name] = value
    return config


@pytest.mark.parametrize("fields, listed", [
    ({"attention__name": "dot"}, "attention.name 'softmax' -> 'dot'"),  # the same parameter shapes
    ({"learning_rate": 0.01}, "learning_rate 0.002 -> 0.01"),
    ({"model__d_model": 64}, "model.d_model 32 -> 64"),
    ({"seed": 1, "model__positions": "learned"}, "model.positions 'sinusoidal' -> 'learned', seed 0 -> 1"),
])
def test_a_restart_with_another_config_is_refused_and_writes_nothing(trained, tmp_path, fields, listed):
    workdir = _copy(trained, tmp_path)
    before = _files(workdir)
    with pytest.raises(WorkdirError, match=f"this workdir trained another config \\({listed}\\); train this "
                                           f"one in a new --workdir"):
        loop.train_and_evaluate(_changed(trained[0], **fields), workdir)
    assert _files(workdir) == before


def test_another_data_file_is_another_config(trained, tmp_path, data_files):
    workdir = _copy(trained, tmp_path)
    other = tmp_path / "other.tsv"
    shutil.copy(data_files[0], other)
    with pytest.raises(WorkdirError, match=f"dataset.train_file '{data_files[0]}' -> '{other}'"):
        loop.train_and_evaluate(_changed(trained[0], dataset__train_file=str(other)), workdir)


def test_extending_a_run_needs_the_change_named(trained, tmp_path):
    workdir = _copy(trained, tmp_path)
    before = _files(workdir)
    longer = _changed(trained[0], num_train_steps=30, eval__beam_size=2)
    with pytest.raises(WorkdirError, match=r"this run trained with other values \(eval.beam_size 1 -> 2, "
                                           r"num_train_steps 20 -> 30\); to continue it with the new ones, add "
                                           r"--config.resume_with_changes=eval.beam_size,num_train_steps$"):
        loop.train_and_evaluate(longer, workdir)
    assert _files(workdir) == before
    longer.resume_with_changes = "num_train_steps"  # eval.beam_size still unnamed
    with pytest.raises(WorkdirError, match="resume_with_changes=num_train_steps,eval.beam_size$"):
        loop.train_and_evaluate(longer, workdir)
    longer.resume_with_changes = "num_train_steps,eval"
    workdirs.check_restart(longer, workdir)  # passes; test_training's resume test trains it


def test_only_the_schedule_eval_wandb_and_sharding_may_be_named(tiny_config, tmp_path):
    config = _changed(tiny_config(), resume_with_changes="num_train_steps,attention.name")
    with pytest.raises(ConfigError, match="attention.name cannot change within a run; a restart may change "
                                          "only: num_train_steps, "):
        loop.train_and_evaluate(config, str(tmp_path / "new"))
    assert not os.path.exists(tmp_path / "new")


def test_eval_refuses_a_config_the_workdir_did_not_train(trained, tmp_path):
    workdir = _copy(trained, tmp_path)
    before = _files(workdir)
    with pytest.raises(WorkdirError, match="attention.name 'softmax' -> 'dot'.*leave out --config"):
        evaluate(_changed(trained[0], attention__name="dot"), workdir)
    assert _files(workdir) == before
    workdirs.check_eval_config(_changed(trained[0], eval__beam_size=3, num_train_steps=5), workdir)


def test_eval_creates_no_workdir(trained, tmp_path):
    missing = str(tmp_path / "absent")
    with pytest.raises(WorkdirError, match=f"--workdir={missing}: no such directory"):
        evaluate(trained[0], missing)
    os.makedirs(missing)
    with pytest.raises(WorkdirError, match="checkpoints: no checkpoint; train first"):
        evaluate(trained[0], missing)
    assert os.listdir(missing) == []


def test_the_workdir_config_is_the_trained_one_and_eval_json_records_it(trained):
    config, workdir = trained
    assert workdir_config.load_config(workdir).to_dict() == config.to_dict()
    with open(os.path.join(workdir, "eval.json")) as f:
        assert json.load(f)["config"] == workdirs.config_record(config)


def test_a_field_newer_than_the_config_json_keeps_its_default(trained, tmp_path):
    workdir = _copy(trained, tmp_path)
    path = os.path.join(workdir, "config.json")
    with open(path) as f:
        record = json.load(f)
    del record["dataset"]["max_source_len"], record["resume_with_changes"]
    with open(path, "w") as f:
        json.dump(record, f)
    restored = workdir_config.load_config(workdir)
    assert restored.dataset.max_source_len == 256 and restored.resume_with_changes == ""
    workdirs.check_restart(trained[0], workdir)  # what config.json does not hold cannot differ
