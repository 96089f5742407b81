"""The two entries: `train_and_evaluate(config, workdir)`, the whole run, resumable from the workdir (train.py),
and `evaluate(config, workdir)`, the final evaluation of a workdir's latest checkpoint (eval.py)."""
import contextlib
import dataclasses
import functools
import json
import os
import time
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np
import optax
from flax import nnx

from analysis import plots
from attention import aux_losses
from data.prefetch import prefetch
from runtime import atomic, devices, interrupts, locks, profiling, workdirs
from runtime.checkpoints import Checkpoints
import tasks
from training import evaluation, metrics, model_config, sharding, validate
from training.config_checks import ConfigError
from training.metrics import MetricsWriter, read_metrics
from training.steps import create_optimizer, init_state, learning_rate_schedule, make_eval_step, make_train_step


def _format_duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s"


class Progress:
    """Steps/s over the last logging window, and the ETA of the run: its training at the steady pace (over the
    steps after the first of this process, whose call compiled the train step) and its evaluations still to come,
    every `eval_every` steps and the final one, each at the mean time of the evaluations so far (the final one
    does more: a lower bound). Steps/s counts training time only: what runs inside `paused()` (evaluation,
    checkpointing) is left out."""

    def __init__(self, step: int, total: int, eval_every: int = 0, clock=time.time):
        self.total, self.eval_every, self.clock = total, eval_every, clock
        self.paused_s = 0.0  # every pause so far
        self.evaluations_s = []  # each evaluation's pause so far
        self.window_start, self.steady_start = self._mark(step), None

    def _mark(self, step: int) -> tuple[int, float, float]:
        return step, self.clock(), self.paused_s

    def _pace(self, since: tuple[int, float, float], step: int) -> float:
        """Steps per second of training time from `since` (a _mark) to now, at step `step`."""
        since_step, since_time, since_paused = since
        return (step - since_step) / max(self.clock() - since_time - (self.paused_s - since_paused), 1e-9)

    @contextlib.contextmanager
    def paused(self, evaluation: bool = False):
        """Time left out of steps/s; an `evaluation`'s also measures the evaluations to come."""
        start = self.clock()
        try:
            yield
        finally:
            self.paused_s += self.clock() - start
            if evaluation:
                self.evaluations_s.append(self.clock() - start)

    def _evaluations_left(self, step: int) -> int:
        """The periodic evaluations from `step` on (the step's own comes after its log line; one at the last step,
        as `due` has it) and the final one."""
        if not self.eval_every:
            return 1
        every = self.eval_every
        return self.total // every - (step - 1) // every + (self.total % every != 0) + 1

    def first_step_done(self, step: int) -> None:
        self.steady_start = self._mark(step)

    def update(self, step: int) -> tuple[float, str]:
        """(steps/s of the window ending at `step`, the ETA: "-" until a step after the first has run)."""
        steps_per_sec = self._pace(self.window_start, step)
        self.window_start = self._mark(step)
        if self.steady_start is None or step == self.steady_start[0]:
            return steps_per_sec, "-"
        training = (self.total - step) / max(self._pace(self.steady_start, step), 1e-9)
        if not self.evaluations_s:  # no evaluation timed yet: what they will take is not known
            return steps_per_sec, f"{_format_duration(training)} + evaluation"
        evaluations = self._evaluations_left(step) * sum(self.evaluations_s) / len(self.evaluations_s)
        return steps_per_sec, _format_duration(training + evaluations)


class Window:
    """The per-step metrics of the logging window so far: device values as the steps return them (no host
    sync), host floats once `host()` reads them. A checkpoint saves `host()` and a restart starts from it,
    and both are summed in float64, so a run resumed mid-window logs the numbers an uninterrupted one does."""

    def __init__(self, restored: list[dict]):
        self.steps = list(restored)

    def add(self, step_metrics: dict) -> None:
        self.steps.append(step_metrics)

    def host(self) -> list[dict]:
        self.steps = [{key: float(value) for key, value in metrics.items()} for metrics in jax.device_get(self.steps)]
        return self.steps

    def take(self) -> list[dict]:
        """host(), and the next window starts empty."""
        steps, self.steps = self.host(), []
        return steps


def due(done: int, every: int, total: int) -> bool:
    """Every `every` steps, and at the last one."""
    return done % every == 0 or done == total


def _check_finite(window: list[dict], done: int, nonfinite: str) -> int:
    """The number of steps of the window (ending at step `done`) whose update was skipped as non-finite;
    with nonfinite="stop", the first of them stops the run."""
    finite = np.asarray([metrics["finite"] for metrics in window], bool)
    skipped = int((~finite).sum())
    if not skipped:
        return 0
    first_bad = done - len(window) + int(np.argmin(finite)) + 1
    if nonfinite == "stop":
        raise FloatingPointError(
            f"non-finite loss or gradient at step {first_bad}; stopping. Its update was skipped, so no "
            f"checkpoint holds non-finite values; lower learning_rate, check the data, or set "
            f"config.nonfinite='skip' to train on past such steps.")
    print(f"warning: {skipped} of the {len(window)} steps up to step {done} had a non-finite loss or "
          f"gradient (first: step {first_bad}); their updates were skipped", flush=True)
    return skipped


@dataclasses.dataclass(frozen=True)
class TrainingRun:
    """What a training run is built from, once (build_run): its task, data and model, the one optimizer its
    state is initialized and updated with, and the mesh and shardings the state is laid out by. The train
    state, which each step replaces, travels beside it; so do the checkpoints and the metrics writer,
    opened once the state is built."""
    config: ml_collections.ConfigDict
    workdir: str
    task: tasks.Task
    data: Any  # what task.prepare_data returns
    model: nnx.Module
    graphdef: nnx.GraphDef
    optimizer: optax.GradientTransformation
    mesh: jax.sharding.Mesh
    shardings: dict  # the train state's, as sharding.put_state returns them
    machine: dict  # devices.runtime(): config.json's "runtime"


def train_and_evaluate(config, workdir: str, *, evaluate_again: bool = False) -> dict:
    """Trains `config` in `workdir` (resuming from its latest checkpoint) and returns eval.json's content.
    A run whose eval.json is at its last step is done: that eval.json is returned as it is, unless
    `evaluate_again`.

    SIGTERM or SIGINT while it trains: it checkpoints the step it is at and raises SystemExit with the
    status of a process killed by that signal (see interrupts.StopRequest), for a restart to resume.
    """
    check_run(config, workdir)
    # One process trains a workdir; a refused run leaves no empty workdir behind.
    with locks.held(workdir, "train.py", lock=jax.process_index() == 0):
        workdirs.check_restart(config, workdir)  # before anything in the workdir is written
        if not evaluate_again and (result := finished_result(config, workdir)) is not None:
            return result
        run, state = build_run(config, workdir)
        with Checkpoints(os.path.join(workdir, workdirs.CHECKPOINTS_DIR)) as checkpoints:
            start = restore_start(run, checkpoints, state)
            writer = metrics_writer(run.task, config, workdir, start.step)
            write_config(run)  # once W&B, which may refuse the run, has taken it
            state, last_step, elapsed_s = _train_steps(run, start, checkpoints, writer)
        return finish_run(run, state, writer, last_step, elapsed_s)


def check_run(config, workdir: str) -> None:
    """The checks before the workdir is locked: its path, the devices, the config, W&B's access."""
    workdirs.check_path(workdir)
    validate.check_devices(config)
    sharding.initialize(config)  # before validate(), which already runs JAX code
    validate.validate(config)
    if jax.process_index() == 0:  # the only process that logs to W&B
        metrics.check_wandb(config, workdir)


def test_summary(result: dict) -> str:
    """The test metrics of eval.json's content, for the closing line."""
    return ", ".join(f"{k} {v:.4f}" for k, v in result["metrics"].items())


def finished_result(config, workdir: str) -> dict | None:
    """eval.json's content where it evaluated the run's last step, or the step it stopped early at (said in
    the closing line), else None."""
    path = os.path.join(workdir, evaluation.EVAL_FILE)
    if not os.path.exists(path):
        return None
    step = (result := workdirs.read_json(path)).get("step")
    if not metrics.ends_run(config, workdir, step):
        return None
    print(f"done: {step} steps, trained and evaluated before; test {test_summary(result)}; "
          f"eval.json in {workdir} (--evaluate_again to evaluate it again)", flush=True)
    return result


def build_run(config, workdir: str) -> tuple[TrainingRun, dict]:
    """The run, and its fresh train state placed on the devices: the task's data, the model, the optimizer."""
    machine = devices.runtime()
    print(f"devices: {devices.describe(machine)}", flush=True)
    task = tasks.get(config.task)
    data = task.prepare_data(config, workdir)
    model = task.create_model(config, data)
    optimizer = create_optimizer(config)
    graphdef, state = init_state(model, optimizer)
    mesh = sharding.data_mesh()
    state, shardings = sharding.put_state(state, mesh, config.sharding.params)
    return TrainingRun(config, workdir, task, data, model, graphdef, optimizer, mesh, shardings, machine), state


class Start(NamedTuple):
    """Where training starts: the latest checkpoint's step, state and metadata, or step 0's."""
    step: int
    state: dict
    metadata: dict  # elapsed_s, and the steps of the logging window the checkpoint cut ("window")


def restore_start(run: TrainingRun, checkpoints: Checkpoints, state) -> Start:
    """The latest checkpoint's start, or a fresh one from `state`. A run is never shortened: a checkpoint
    past config.num_train_steps is refused (its eval.json would be the longer run's)."""
    total = run.config.num_train_steps
    if (restored := checkpoints.restore_latest(state)) is None:
        return Start(0, state, {"elapsed_s": 0.0})
    if restored[0] > total:
        raise workdirs.WorkdirError(
            f"config.num_train_steps={total} is below step {restored[0]} of the latest checkpoint in "
            f"{checkpoints.directory}; a run is not shortened: set num_train_steps >= {restored[0]}, or train "
            f"{total} steps in a new --workdir")
    print(f"resuming {run.workdir} from step {restored[0]}", flush=True)
    return Start(*restored)


def metrics_writer(task, config, workdir: str, start_step: int) -> MetricsWriter:
    """This process's MetricsWriter: in the workdir for the first (or only) host; the others, which compute
    the same metrics, log apart in process_<i>/ without W&B, so that no line of metrics.jsonl is written
    twice."""
    kinds = tuple(sorted(model_config.every_kind(config, task.roles(config))))
    if jax.process_index() == 0:
        return MetricsWriter(workdir, config, start_step, kinds, task.METRICS[0])
    directory = os.path.join(workdir, f"process_{jax.process_index()}")
    os.makedirs(directory, exist_ok=True)
    return MetricsWriter(directory, config, start_step, kinds, task.METRICS[0], to_wandb=False)


def write_config(run: TrainingRun) -> None:
    atomic.write_text(os.path.join(run.workdir, workdirs.CONFIG_FILE),
                      json.dumps({**workdirs.config_record(run.config), "runtime": run.machine}, indent=1))


def _steps(run: TrainingRun):
    """The jitted train and eval steps."""
    config = run.config
    loss_fn = functools.partial(run.task.metric_sums, label_smoothing=config.label_smoothing)
    dropout_key = jax.random.fold_in(jax.random.key(config.seed), 1)
    train_step = make_train_step(run.graphdef, run.optimizer, loss_fn, dropout_key,
                                 compute_dtype=config.compute_dtype, shardings=run.shardings)
    eval_step = make_eval_step(run.graphdef, run.task.metric_sums, compute_dtype=config.compute_dtype,
                               shardings=run.shardings)
    return train_step, eval_step


def log_train_window(run: TrainingRun, writer: MetricsWriter, window: list[dict], pace: tuple[float, str],
                     done: int, elapsed_s: float) -> None:
    """Writes and prints the train metrics of the logging window ending at step `done`, over its steps
    whose update was applied (all of them when none was: such a window reports its non-finite loss), at
    `pace`, Progress.update's (steps/s, ETA) of the window."""
    config = run.config
    skipped = _check_finite(window, done, config.nonfinite)
    counted = [metrics for metrics in window if metrics["finite"]] or window
    sums = jax.tree.map(lambda *values: np.sum(values), *counted)
    steps_per_sec, eta = pace
    # Tokens read per step (skipped steps read theirs too) at the window's pace: also right for a window
    # that a restart cut, whose first steps ran before it.
    tokens_per_sec = steps_per_sec * float(np.mean([m["input_tokens"] for m in window]))
    metrics = {**run.task.summarize(sums), "learning_rate": float(learning_rate_schedule(config)(done - 1)),
               "grad_norm": float(np.mean([m["grad_norm"] for m in counted])), "steps_per_sec": steps_per_sec,
               "tokens_per_sec": tokens_per_sec}
    if aux_losses.NAME in sums:  # the mean over the window of what the model's modules added to the loss
        metrics[aux_losses.NAME] = float(sums[aux_losses.NAME] / len(counted))
    if config.nonfinite == "skip":
        metrics["skipped_steps"] = skipped
    writer.write(done, "train", elapsed_s, metrics)
    progress_metric = run.task.PROGRESS_METRIC
    print(f"step {done}/{config.num_train_steps} | loss {metrics['loss']:.4f} | {progress_metric} "
          f"{metrics[progress_metric]:.4f} | {steps_per_sec:.1f} steps/s | {tokens_per_sec:,.0f} tokens/s | "
          f"ETA {eta}", flush=True)


def _evaluate_validation(run: TrainingRun, writer: MetricsWriter, eval_step, state, done: int, elapsed_s: float):
    totals = evaluation.metric_totals(eval_step, state["params"], state["rest"], run.data.validation,
                                      run.config.eval.batch_size)
    metrics = run.task.summarize(totals)
    writer.write(done, "eval", elapsed_s, metrics)
    print(f"eval at step {done} | " + " | ".join(f"{k} {v:.4f}" for k, v in metrics.items()), flush=True)
    return metrics


def _exit_interrupted(step: int, stop: interrupts.StopRequest, checkpoints: Checkpoints, writer: MetricsWriter):
    checkpoints.close()  # waits for the asynchronous save to complete
    writer.mark_preempted()
    writer.close()
    print(f"interrupted at step {step}: checkpoint saved, restart the same command to resume", flush=True)
    raise SystemExit(stop.exit_status())


def _train_steps(run: TrainingRun, start: Start, checkpoints: Checkpoints, writer: MetricsWriter):
    """Trains from `start` to config.num_train_steps, or to the validation that reaches the early stop:
    (the trained state, its step, the run's elapsed seconds)."""
    config, task, state = run.config, run.task, start.state
    if metrics.stopped_early_at(config, run.workdir, start.step):  # its final evaluation was interrupted
        return state, start.step, start.metadata["elapsed_s"]
    train_step, eval_step = _steps(run)
    batch_size = sharding.global_batch_size(config.per_device_batch_size)
    started, total = time.time(), config.num_train_steps
    elapsed = lambda: start.metadata["elapsed_s"] + time.time() - started  # noqa: E731
    validated = run.data.validation is not None
    progress = Progress(start.step, total, config.eval_every_steps if validated else 0)
    window = Window(start.metadata.get("window", []))  # the steps of the logging window the checkpoint cut
    trace = profiling.StepTrace(config, run.workdir)
    steps = range(start.step, total)
    batches = train_batches(run, batch_size, steps)
    with interrupts.stop_requests() as stop, contextlib.closing(batches):
        for step, batch in zip(steps, batches):
            state, step_metrics = train_step(state, batch)
            window.add(step_metrics)
            done = step + 1
            if step == start.step:  # the call returns once compiled; the step itself runs on asynchronously
                progress.first_step_done(done)
            if due(done, config.log_every_steps, total):
                log_train_window(run, writer, window.take(), progress.update(done), done, elapsed())
            validates = validated and due(done, config.eval_every_steps, total)
            with progress.paused(evaluation=validates):
                trace.after_step(done, state)
                stops_early = validates and metrics.reaches_stop(
                    config, _evaluate_validation(run, writer, eval_step, state, done, elapsed()))
                if stops_early and window.steps:
                    log_train_window(run, writer, window.take(), progress.update(done), done, elapsed())
                if due(done, config.checkpoint_every_steps, total) or stop.signum or stops_early:
                    checkpoints.save(done, state, {"elapsed_s": elapsed(), "window": window.host()})
            if stop.signum:
                _exit_interrupted(done, stop, checkpoints, writer)
            if stops_early:
                print(f"validation {config.eval.stop_metric} reached eval.stop_at={config.eval.stop_at} at step "
                      f"{done} of {total}: training stops here", flush=True)
                break
    checkpoints.close()  # the last save is complete (or its failure raised) before the final evaluation
    return state, done if steps else start.step, elapsed()


def train_batches(run: TrainingRun, batch_size: int, steps: range):
    """Each step's batch on the run's mesh: built on the device where the task has a device stream and the config
    takes it (`device_batches(config, data, batch_size, placement)`, its batches' arrays [rows, n] placed by
    `placement`: dispatched, no host work), else on the host ahead of the step (prefetch)."""
    task, config = run.task, run.config
    at_step = getattr(task, "device_batches", lambda *args: None)(config, run.data, batch_size,
                                                                   sharding.batch_sharding(run.mesh, 2))
    if at_step is not None:
        if jax.process_count() > 1:  # its rows sit on this process's devices alone
            raise ConfigError(f"config.dataset.stream={config.dataset.stream!r} builds the batches in one process, "
                              f"not {jax.process_count()}; take the host stream")
        return (at_step(step) for step in steps)
    return prefetch(lambda step: sharding.put_batch(task.train_batch(config, run.data, batch_size, step), run.mesh),
                    steps)


def finish_run(run: TrainingRun, state, writer: MetricsWriter, total: int, elapsed_s: float) -> dict:
    """The final evaluation of the trained model (eval.json), then the run's curves and the closing line.
    The evaluation's collectives are the processes' last: they meet at JAX's shutdown barrier right after
    it, before the work that one process does alone (the curves, W&B's upload) could keep the other
    waiting there past its timeout."""
    config, workdir = run.config, run.workdir
    nnx.update(run.model, state["params"], state["rest"])
    try:
        result = evaluation.evaluate_and_write(run.task, config, workdir, run.model, run.data, total)
    except KeyboardInterrupt:
        print(f"interrupted at step {total} during the final evaluation: training is done and checkpointed; "
              f"restart the same command to evaluate it", flush=True)
        raise SystemExit(interrupts.INTERRUPTED_STATUS) from None
    sharding.finish(config)
    if config.eval.plots and jax.process_index() == 0:  # the other hosts' metrics are the same
        title = plots.run_title(workdir, model_config.role_kinds(config, run.task.roles(config)), total)
        plots.plot_run_curves(read_metrics(workdir), os.path.join(workdir, "plots", plots.CURVES_PLOT), title)
    writer.log_evaluation(total, result, workdir)
    writer.close()
    print(f"done: {total} steps in {_format_duration(elapsed_s)}; test {test_summary(result)}; "
          f"eval.json in {workdir}", flush=True)
    return result


def evaluate(config, workdir: str) -> dict:
    """Restores the latest checkpoint of `workdir` and evaluates it (what eval.py runs) with `config`,
    which may differ from the config the workdir trained only in what workdirs.CHANGEABLE allows; prints the
    step, the test metrics and the eval.json it wrote. A workdir that another process trains (or evaluates) is
    refused: its checkpoints are being rotated."""
    validate.validate(config)
    workdirs.check_eval_config(config, workdir)
    directory = os.path.join(workdir, workdirs.CHECKPOINTS_DIR)
    if not os.path.exists(directory):  # checked first: eval.py leaves a workdir without checkpoints as it is
        raise workdirs.WorkdirError(f"{directory}: no checkpoint; train first")
    with locks.held(workdir, "eval.py"):
        return _evaluate_latest(config, workdir)


def evaluation_dir(workdir: str, step: int) -> str:
    """Where eval.py writes (and wrote) the evaluation of the checkpoint at `step` (eval.json, spectra.json,
    plots/): the workdir, unless its eval.json is of a later step, whose checkpoint no longer restores: then
    eval_step<step>/ beside it, so that an older model's numbers never replace a later one's."""
    path = os.path.join(workdir, evaluation.EVAL_FILE)
    try:
        later = workdirs.read_json(path).get("step", step) if os.path.exists(path) else step
    except workdirs.WorkdirError:  # a cut eval.json holds no result to keep
        later = step
    if not isinstance(later, int) or later <= step:
        return workdir
    return os.path.join(workdir, f"eval_step{step}")


def _prepared_evaluation_dir(workdir: str, step: int) -> str:
    """evaluation_dir, created, and said where it is not the workdir."""
    directory = evaluation_dir(workdir, step)
    if directory != workdir:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(workdir, evaluation.EVAL_FILE)
        print(f"warning: {path} is of step {workdirs.read_json(path)['step']}, later than the checkpoint at step "
              f"{step} that restores; this evaluation goes to {directory}, and eval.json stays as it is", flush=True)
    return directory


def restore_latest_model(task, config, workdir: str):
    """(step, model, data): the model of `config` with the parameters of the latest checkpoint of `workdir` that
    restores (past a damaged latest one, as training does), and the task's data."""
    directory = os.path.join(workdir, workdirs.CHECKPOINTS_DIR)
    with Checkpoints(directory) as checkpoints:
        if checkpoints.latest_step() is None:
            raise workdirs.WorkdirError(f"{directory}: no checkpoint; train first")
        data = task.prepare_data(config, workdir)
        # Shapes only: an initialisation computed here (seconds of small compilations) would be overwritten.
        model = nnx.eval_shape(lambda: task.create_model(config, data))
        step, state, _ = checkpoints.restore_latest(_abstract_state(task, config, data))
    nnx.update(model, state["params"], state["rest"])
    return step, model, data


def _abstract_state(task, config, data) -> dict:
    """The train state's shapes, dtypes and shardings on the data mesh, as training checkpointed it, computing
    nothing: what a checkpoint restores onto."""
    state = jax.eval_shape(lambda: init_state(task.create_model(config, data), create_optimizer(config))[1])
    shardings = sharding.state_shardings(state, sharding.data_mesh(), config.sharding.params)
    return jax.tree.map(lambda x, where: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=where), state, shardings)


def _evaluate_latest(config, workdir: str) -> dict:
    task = tasks.get(config.task)
    step, model, data = restore_latest_model(task, config, workdir)
    directory = _prepared_evaluation_dir(workdir, step)
    try:
        result = evaluation.evaluate_and_write(task, config, directory, model, data, step)
    except KeyboardInterrupt:
        print(f"interrupted while evaluating the checkpoint at step {step}: eval.json is as it was; rerun "
              f"eval.py to evaluate it", flush=True)
        raise SystemExit(interrupts.INTERRUPTED_STATUS) from None
    # The directory it went to, not one worked out again afterwards from the eval.json beside it.
    print(f"evaluated the checkpoint at step {step} on the {result['split']} split: {test_summary(result)}; "
          f"written to {os.path.join(directory, evaluation.EVAL_FILE)}", flush=True)
    return result
