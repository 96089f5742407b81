"""Fault tolerance: train.py stopped by SIGTERM exits cleanly and its rerun resumes to the parameters
and metrics of an uninterrupted run; so does a restart whose latest checkpoint does not restore;
non-finite steps stop the run or are skipped and counted."""
import gc
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from flax import nnx

from runtime import interrupts
from runtime.checkpoints import CheckpointError, Checkpoints
import tasks
from tasks import translation
from training import evaluation, loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WALL_CLOCK = ("elapsed_s", "steps_per_sec", "tokens_per_sec")  # the only fields an interruption may change


def _skip_final_evaluation(monkeypatch) -> None:
    # Decoding and rank analysis are half a tiny run's time, and test_training's concern.
    monkeypatch.setattr(evaluation, "evaluate_and_write", lambda *args: {"metrics": {}, "rank": []})


@pytest.fixture
def no_final_evaluation(monkeypatch):
    _skip_final_evaluation(monkeypatch)


@pytest.fixture(scope="module")
def straight(tiny_config, tmp_path_factory):
    """(config, workdir) of an uninterrupted tiny run: 20 steps, logged every 5, checkpoints at 14 and 20
    (every 7 steps, so that the older one falls mid-window)."""
    config = tiny_config()
    config.checkpoint_every_steps = 7  # saving changes neither the training nor the metrics
    workdir = str(tmp_path_factory.mktemp("straight"))
    with pytest.MonkeyPatch.context() as patch:
        _skip_final_evaluation(patch)
        loop.train_and_evaluate(config, workdir)
    return config, workdir


def _metric_lines(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [{k: v for k, v in json.loads(line).items() if k not in WALL_CLOCK} for line in f]


def _assert_same_state(workdir: str, reference: str, step: int) -> None:
    """The saved states at `step`, read by Orbax without a target (not through the loop's restore)."""
    def read(directory):
        state = ocp.StandardCheckpointer().restore(os.path.join(directory, "checkpoints", str(step), "state"))
        return {key: state[key] for key in ("step", "params", "opt_state")}
    jax.tree.map(np.testing.assert_array_equal, read(workdir), read(reference))


@pytest.fixture
def python_sigint_handler():
    """Python's own SIGINT handler, which pytest-xdist's workers replace by SIG_IGN."""
    original = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, original)


def test_stop_requests_catch_the_signals_then_restore_the_handlers(python_sigint_handler):
    before = {signum: signal.getsignal(signum) for signum in interrupts.SIGNALS}
    with interrupts.stop_requests() as stop:
        signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt: just the request
        assert (stop.signum, stop.exit_status()) == (signal.SIGINT, 130)
        with pytest.raises(KeyboardInterrupt):  # a second one acts as before: the way out of a hang
            signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)
        assert stop.signum == signal.SIGINT  # the first signal decides the exit status
    assert {signum: signal.getsignal(signum) for signum in interrupts.SIGNALS} == before


def _wait_for_first_metrics_line(process: subprocess.Popen, workdir: str, timeout: float = 300) -> None:
    path, deadline = os.path.join(workdir, "metrics.jsonl"), time.time() + timeout
    while not (os.path.exists(path) and os.path.getsize(path)):
        assert process.poll() is None, f"train.py exited with {process.returncode} before training"
        assert time.time() < deadline, "train.py wrote no metrics in time"
        time.sleep(0.01)


def test_train_py_stopped_by_sigterm_resumes_to_the_uninterrupted_result(straight, data_files, tmp_path):
    _, reference = straight  # the same config, but for checkpoint_every_steps
    workdir, log_path = str(tmp_path / "run"), str(tmp_path / "train.log")
    command = [sys.executable, "train.py", "--config=configs/translation.py:tiny",
               "--config.dataset.name=files", f"--config.dataset.train_file={data_files[0]}",
               f"--config.dataset.test_file={data_files[1]}", f"--workdir={workdir}"]
    with open(log_path, "w") as log:  # a file, not a pipe, which the waiting below would leave unread
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        _wait_for_first_metrics_line(process, workdir)  # step 5; compiling the evaluation at 10 takes longer
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    with open(log_path) as f:
        output = f.read()
    assert process.returncode == 128 + signal.SIGTERM, output
    assert "\x1b[" not in output and "Downloading" not in output  # a log file: no terminal escapes
    stopped = re.search(r"^interrupted at step (\d+): checkpoint saved, restart the same command to resume$",
                        output, re.MULTILINE)
    assert stopped, output
    step = int(stopped.group(1))
    assert Checkpoints(os.path.join(workdir, "checkpoints")).latest_step() == step < 20

    rerun = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"resuming {workdir} from step {step}" in rerun.stdout
    with open(os.path.join(workdir, "eval.json")) as f:
        assert json.load(f)["step"] == 20
    assert _metric_lines(workdir) == _metric_lines(reference)
    _assert_same_state(workdir, reference, 20)


def _truncate_files(directory: str) -> None:
    for parent, _, names in os.walk(directory):
        for name in names:
            open(os.path.join(parent, name), "w").close()


def _cut_in_half(directory: str) -> None:
    """The checkpoint's largest file, its array data, cut to half its length: TensorStore's reads of it fail,
    not the JSON around them."""
    files = [os.path.join(parent, name) for parent, _, names in os.walk(directory) for name in names]
    largest = max(files, key=os.path.getsize)
    os.truncate(largest, os.path.getsize(largest) // 2)


def _delete_manifests(directory: str) -> None:
    for parent, _, names in os.walk(directory):
        for name in names:
            if name == "manifest.ocdbt":
                os.unlink(os.path.join(parent, name))


@pytest.mark.parametrize("damage", [_truncate_files, _delete_manifests], ids=["truncated", "manifest_deleted"])
def test_a_latest_checkpoint_that_does_not_restore_falls_back_to_the_older_one(straight, tmp_path, capsys, damage,
                                                                              no_final_evaluation):
    config, reference = straight
    workdir = str(tmp_path / "run")
    shutil.copytree(reference, workdir)
    checkpoints = os.path.join(workdir, "checkpoints")
    damage(os.path.join(checkpoints, "20"))  # e.g. a disk that filled up after the rename
    loop.train_and_evaluate(config, workdir)
    out, err = capsys.readouterr()
    moved = [name for name in os.listdir(checkpoints) if name.startswith("20.unrestorable-")]
    assert len(moved) == 1
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and re.fullmatch(
        rf"warning: checkpoint at step 20 in {re.escape(checkpoints)} does not restore \(.+\); moved to "
        rf"{re.escape(os.path.join(checkpoints, moved[0]))}, resuming from step 14", warnings[0]), warnings
    assert "Traceback" not in out + err, err
    assert f"resuming {workdir} from step 14" in out
    # Steps 15-20 trained again, to the same state and metrics: the step-15 line averages steps 11-15,
    # of which 11-14 ran before the restart and came back with checkpoint 14.
    assert _metric_lines(workdir) == _metric_lines(reference)
    _assert_same_state(workdir, reference, 20)


def test_eval_py_falls_back_past_a_latest_checkpoint_that_does_not_restore_and_writes_beside_a_later_eval_json(
        straight, tmp_path, monkeypatch, capsys):
    config, reference = straight
    workdir = str(tmp_path / "run")
    shutil.copytree(reference, workdir)
    _cut_in_half(os.path.join(workdir, "checkpoints", "20"))
    evaluated = {}
    def capture(task, config, workdir, model, data, step):
        evaluated.update(step=step, params=nnx.state(model, nnx.Param))
        with open(os.path.join(workdir, "eval.json"), "w") as f:
            json.dump({"step": step}, f)
        return {"step": step, "split": "test", "metrics": {"loss": 1.0}}
    monkeypatch.setattr(evaluation, "evaluate_and_write", capture)
    later = os.path.join(workdir, "eval.json")
    with open(later, "w") as f:
        json.dump({"step": 20}, f)  # the finished run's, of the checkpoint that no longer restores
    loop.evaluate(config, workdir)
    assert evaluated["step"] == 14
    with open(later) as f:
        assert json.load(f) == {"step": 20}
    with open(os.path.join(workdir, "eval_step14", "eval.json")) as f:
        assert json.load(f)["step"] == 14
    lines = capsys.readouterr().out.strip().splitlines()
    assert (f"warning: {later} is of step 20, later than the checkpoint at step 14 that restores; this evaluation "
            f"goes to {workdir}/eval_step14, and eval.json stays as it is") in lines
    # The reason in words: Orbax's error quotes a TensorStore method, whose repr the warning leaves out.
    moved = [line for line in lines if line.startswith("warning: checkpoint at step 20")]
    assert len(moved) == 1 and "pybind11" not in moved[0] and "<bound method" not in moved[0], moved
    # eval.py's last line names the file this evaluation wrote, not the later eval.json beside it.
    assert lines[-1] == (f"evaluated the checkpoint at step 14 on the test split: loss 1.0000; written to "
                         f"{workdir}/eval_step14/eval.json")
    saved = ocp.StandardCheckpointer().restore(os.path.join(reference, "checkpoints", "14", "state"))["params"]
    def by_path(tree):  # Orbax restores list indices as strings, and a Variable as {"value": array}
        names = lambda path: tuple(str(getattr(key, "key", getattr(key, "idx", key))) for key in path)
        return {names(path)[: -1 if names(path)[-1] == "value" else None]: leaf
                for path, leaf in jax.tree.leaves_with_path(tree)}
    got, expected = by_path(evaluated["params"].to_pure_dict()), by_path(saved)
    assert got.keys() == expected.keys()
    for key in got:
        np.testing.assert_array_equal(got[key], expected[key], err_msg=str(key))


def test_falling_back_past_a_checkpoint_cut_in_half_prints_no_traceback(straight, tmp_path, monkeypatch, capfd):
    """Orbax's reads that the failed restore abandoned raise again as Python collects them, each in a traceback
    (none to dozens a run, as the timing falls); the one warning line says it instead."""
    config, reference = straight
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)  # Python's, which prints them; not pytest's
    for attempt in range(3):
        workdir = str(tmp_path / str(attempt))
        shutil.copytree(reference, workdir)
        _cut_in_half(os.path.join(workdir, "checkpoints", "20"))
        assert loop.restore_latest_model(tasks.get(config.task), config, workdir)[0] == 14
        gc.collect()  # what the collector would otherwise meet later, up to the interpreter's exit
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "Exception ignored" not in err, err
    assert out.count("warning: checkpoint at step 20 ") == 3, out


def test_when_no_checkpoint_restores_the_error_says_so_and_moves_nothing(straight, tmp_path):
    config, reference = straight
    workdir = str(tmp_path / "run")
    shutil.copytree(reference, workdir)
    checkpoints = os.path.join(workdir, "checkpoints")
    for step in ("14", "20"):
        _truncate_files(os.path.join(checkpoints, step))
    with pytest.raises(CheckpointError, match=r"no checkpoint in .* restores \(step 20: .+; step 14: .+\)"):
        loop.train_and_evaluate(config, workdir)
    assert sorted(os.listdir(checkpoints)) == ["14", "20"]


def test_metadata_is_saved_as_it_was_when_save_was_called(tmp_path, monkeypatch):
    """The loop keeps appending step metrics to the window list it has just saved, while Orbax writes the
    JSON later in its own thread: what Orbax is handed must not change with the caller's list."""
    handed = []
    json_save = ocp.args.JsonSave
    monkeypatch.setattr(ocp.args, "JsonSave", lambda item: handed.append(item) or json_save(item))
    checkpoints = Checkpoints(str(tmp_path))
    window = [{"loss": 1.0}]
    checkpoints.save(1, {"x": jax.numpy.arange(4.0)}, {"window": window})
    window.append({"loss": jax.numpy.float32(2.0)})  # not JSON: a device array, as the loop appends
    checkpoints.close()
    assert handed == [{"window": [{"loss": 1.0}]}]
    checkpoints = Checkpoints(str(tmp_path))
    assert checkpoints.restore(1, {"x": jax.numpy.arange(4.0)})[1] == {"window": [{"loss": 1.0}]}
    checkpoints.close()


def test_a_run_killed_mid_save_resumes_from_the_checkpoint_before(straight, tmp_path, capsys, no_final_evaluation):
    config, reference = straight
    workdir = str(tmp_path / "run")
    shutil.copytree(reference, workdir)
    checkpoints = os.path.join(workdir, "checkpoints")
    # What a process killed mid-save leaves (seen with SIGKILL on Orbax 0.12): the step's temporary directory.
    os.rename(os.path.join(checkpoints, "20"), os.path.join(checkpoints, "20.orbax-checkpoint-tmp"))
    loop.train_and_evaluate(config, workdir)
    assert f"resuming {workdir} from step 14" in capsys.readouterr().out
    assert _metric_lines(workdir) == _metric_lines(reference)
    _assert_same_state(workdir, reference, 20)


def _nan_at_steps(monkeypatch, steps: set[int]) -> None:
    """A NaN loss (and loss sum) at the given 0-based steps, through a factor the batch carries."""
    train_batch, metric_sums = translation.train_batch, translation.metric_sums

    def batch_with_factor(config, data, batch_size, step):
        factor = np.float32(np.nan if step in steps else 1.0)
        return {**train_batch(config, data, batch_size, step), "factor": factor}

    def sums_times_factor(model, batch, label_smoothing=0.0):
        loss, sums = metric_sums(model, batch, label_smoothing)
        factor = batch.get("factor", 1.0)  # evaluation batches have none
        return loss * factor, {**sums, "loss": sums["loss"] * factor}

    monkeypatch.setattr(translation, "train_batch", batch_with_factor)
    monkeypatch.setattr(translation, "metric_sums", sums_times_factor)


NONFINITE_STEPS = 10  # both tests below: the same schedule, so the same train step (compiled once)


def test_nonfinite_skip_trains_on_and_counts_skipped_steps(tiny_config, tmp_path, monkeypatch, capsys,
                                                           no_final_evaluation):
    config = tiny_config()
    config.nonfinite, config.num_train_steps = "skip", NONFINITE_STEPS
    _nan_at_steps(monkeypatch, {2, 3})  # steps 3 and 4 of the first logging window
    loop.train_and_evaluate(config, str(tmp_path))
    train = [line for line in _metric_lines(str(tmp_path)) if line["split"] == "train"]
    assert [(line["step"], line["skipped_steps"]) for line in train] == [(5, 2), (10, 0)]
    assert all(np.isfinite(line["loss"]) for line in train)  # over the steps that were applied
    # The schedule's step counts advanced over the skipped steps: the learning rate logged is the one used.
    saved = ocp.StandardCheckpointer().restore(os.path.join(tmp_path, "checkpoints", "10", "state"))
    counts = [leaf for leaf in jax.tree.leaves(saved["opt_state"]) if np.issubdtype(np.asarray(leaf).dtype, np.integer)]
    assert counts and all(int(count) == 10 for count in counts)
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: 2 of the 5 steps up to step 5 had a non-finite loss or gradient "
                        "(first: step 3); their updates were skipped"]


def test_nonfinite_stop_names_the_step_once_the_saves_before_it_are_complete(tiny_config, tmp_path, monkeypatch):
    """The save of step 4 is still being written when step 5's window finds the NaN of step 4: the error
    waits for it, where leaving it to the interpreter's exit printed Orbax's tracebacks and lost the step."""
    config = tiny_config()
    config.num_train_steps, config.checkpoint_every_steps = NONFINITE_STEPS, 1
    _nan_at_steps(monkeypatch, {3})
    with pytest.raises(FloatingPointError, match="non-finite loss or gradient at step 4; stopping"):
        loop.train_and_evaluate(config, str(tmp_path))
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["3", "4"]  # complete: no .orbax-checkpoint-tmp
