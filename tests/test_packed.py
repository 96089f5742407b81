"""Packed training (training/packed.py): runs differing in seed and learning rate trained as one vmapped program
write what each would write trained alone (metrics.jsonl, eval.json, checkpoints that resume), and runs that
differ in anything else are refused."""
import json
import os
import shutil

import numpy as np
import pytest

from configs import mlm as mlm_config
from training import loop, packed
from training.config_checks import ConfigError
from training.metrics import read_metrics

MEMBERS = ((0, 3e-3), (1, 1e-2))  # (seed, learning rate): another seed and another rate at once


@pytest.fixture(scope="module")
def text_files(tmp_path_factory):
    rng = np.random.default_rng(0)
    words = ["the cat", "a dog", "sees", "likes", "the ball", "a stick", "in the", "garden", "house", "."]
    directory = tmp_path_factory.mktemp("packed_text")
    for name, count in (("train.txt", 400), ("test.txt", 40)):
        (directory / name).write_text("".join(" ".join(rng.choice(words, 9)) + "\n" for _ in range(count)))
    return str(directory / "train.txt"), str(directory / "test.txt"), str(directory / "datasets")


def _config(text_files, seed, learning_rate, steps=12):
    config = mlm_config.get_config("tiny")
    config.dataset.name = "text_files"
    config.dataset.train_file, config.dataset.test_file, config.dataset.data_dir = text_files
    config.num_train_steps, config.log_every_steps, config.eval_every_steps = steps, 4, 6
    config.checkpoint_every_steps = 6
    config.seed, config.learning_rate = seed, learning_rate
    config.model.dropout_rate = 0.1  # each run's own dropout stream
    config.eval.plots = False
    return config


def _lines(workdir):
    """metrics.jsonl's numbers but its timings, by (step, split)."""
    return {(line["step"], line["split"]): {key: value for key, value in line.items()
                                            if key not in ("step", "split", "elapsed_s", "steps_per_sec",
                                                           "tokens_per_sec")}
            for line in read_metrics(workdir)}


@pytest.fixture(scope="module")
def trained(text_files, tmp_path_factory):
    """Each member trained alone, then all of them packed: (single workdirs, packed workdirs, packed results)."""
    root = tmp_path_factory.mktemp("packed_runs")
    single = [str(root / f"single_{seed}_{rate}") for seed, rate in MEMBERS]
    for (seed, rate), workdir in zip(MEMBERS, single):
        loop.train_and_evaluate(_config(text_files, seed, rate), workdir)
    together = [str(root / f"packed_{seed}_{rate}") for seed, rate in MEMBERS]
    results = packed.train_packed([_config(text_files, seed, rate) for seed, rate in MEMBERS], together)
    return single, together, results


def test_each_packed_run_logs_and_evaluates_what_it_would_alone(trained):
    """Every train and validation line of metrics.jsonl, and eval.json's test metrics, to float tolerance: the
    packed step is the single step vmapped, its update scaled by the run's rate under an optimizer of peak 1."""
    single, together, results = trained
    for alone, with_others, result in zip(single, together, results):
        want, got = _lines(alone), _lines(with_others)
        assert list(got) == list(want)
        for line in want:
            assert got[line] == pytest.approx(want[line], rel=2e-4, abs=1e-6), (alone, line)
        with open(os.path.join(alone, "eval.json")) as f:
            eval_alone = json.load(f)
        assert result["metrics"] == pytest.approx(eval_alone["metrics"], rel=2e-4)
        assert result["step"] == eval_alone["step"] == 12
    differing = [_lines(workdir)[12, "train"]["loss"] for workdir in together]
    assert len(set(differing)) == len(MEMBERS)  # the members did differ


def test_a_packed_run_is_an_ordinary_run_finished_and_resumable(trained, text_files, tmp_path):
    """Trained again, packed or alone, a finished run is returned as it is; a run extended to more steps resumes
    from the packed run's checkpoint."""
    _, together, results = trained
    again = packed.train_packed([_config(text_files, seed, rate) for seed, rate in MEMBERS], together)
    assert again == results
    seed, rate = MEMBERS[0]
    workdir = shutil.copytree(together[0], tmp_path / "extended")
    config = _config(text_files, seed, rate, steps=14)
    config.resume_with_changes = "num_train_steps"
    assert loop.train_and_evaluate(config, str(workdir))["step"] == 14
    assert [line["step"] for line in read_metrics(str(workdir)) if line["split"] == "train"][-2:] == [12, 14]


def test_runs_that_differ_beyond_seed_and_rate_are_refused(text_files, tmp_path):
    configs = [_config(text_files, 0, 3e-3), _config(text_files, 1, 3e-3)]
    configs[1].model.d_model = 64
    with pytest.raises(ConfigError, match="^packed run 1 differs from run 0 in model; packed runs may differ in seed, "
                                          "learning_rate alone"):
        packed.train_packed(configs, [str(tmp_path / "a"), str(tmp_path / "b")])
