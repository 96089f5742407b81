"""Packed training: several runs of one architecture trained by one jitted program, `jax.vmap` over the runs.

The runs may differ in what `PACKABLE` names (the seed: initialisation, data order, masking and dropout; the
learning rate: each run's update scaled by its own under an optimizer of peak 1, steps.create_optimizer) and in
nothing else. Each keeps its own workdir as `train_and_evaluate` writes it, config.json, metrics.jsonl, event
files, checkpoints, eval.json, so that resuming, reports and `scripts.compare` see ordinary runs: a packed run
resumes alone or packed, from the same checkpoints. The state of the R runs is stacked along a leading axis, and
so are their batches: each step is one dispatch of one program for all of them.

One device only (a mesh of several would need the runs' axis in every sharding). A run whose loss or gradient
goes non-finite under `nonfinite="stop"` stops alone (its updates skipped from then on, no eval.json) while the
others train on, as a diverging rate of a pick should.
"""
import contextlib
import copy
import functools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from data.prefetch import prefetch
from runtime import interrupts, locks, workdirs
from runtime.checkpoints import Checkpoints
from training import evaluation, loop, sharding
from training.config_checks import ConfigError
from training.steps import create_optimizer, eval_step_fn, train_step_fn

PACKABLE = ("seed", "learning_rate")  # the fields in which packed runs may differ


def members(config, entries: list[str]) -> tuple[list, list[str]]:
    """(configs, workdirs) of train.py's --pack entries, each `<workdir>:<field>=<value>[,...]` with fields of
    PACKABLE set on a copy of `config`; ConfigError for an entry that does not read."""
    configs, workdir_list = [], []
    for entry in entries:
        workdir, _, values = entry.rpartition(":")
        member = copy.deepcopy(config)
        for item in values.split(","):
            field, _, value = item.partition("=")
            if field not in PACKABLE or not value or not workdir:
                raise ConfigError(f"--pack={entry}: not <workdir>:<field>=<value>[,...] with fields among "
                                  f"{', '.join(PACKABLE)}")
            try:
                member[field] = type(config[field])(value)
            except ValueError:
                raise ConfigError(f"--pack={entry}: {field}={value!r} is not a {type(config[field]).__name__}") from None
        configs.append(member)
        workdir_list.append(workdir)
    return configs, workdir_list


def check_packable(configs: list) -> None:
    """ConfigError unless the configs differ in PACKABLE fields alone, on one device, without early stops."""
    def rest(config):
        record = workdirs.config_record(config)
        return {key: value for key, value in record.items() if key not in PACKABLE}

    first = rest(configs[0])
    for index, config in enumerate(configs[1:], 1):
        if differing := sorted(key for key in first.keys() | rest(config).keys()
                               if first.get(key) != rest(config).get(key)):
            raise ConfigError(f"packed run {index} differs from run 0 in {', '.join(differing)}; packed runs may "
                              f"differ in {', '.join(PACKABLE)} alone: train the others apart")
    if jax.device_count() > 1:
        raise ConfigError(f"packed training runs on one device, not {jax.device_count()}: train the runs apart")
    if configs[0].dataset.get("stream", "host") != "host":
        raise ConfigError(f"config.dataset.stream={configs[0].dataset.stream!r}: packed runs build their batches on "
                          f"the host; train device-stream runs apart")
    if configs[0].eval.stop_metric:
        raise ConfigError(f"config.eval.stop_metric={configs[0].eval.stop_metric!r}: packed runs do not stop early "
                          f"one by one; train runs that stop early apart")


def stacked(trees):
    """Trees of one structure, each leaf stacked along a new leading axis: the runs' axis."""
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees)


def _member(tree, index: int):
    return jax.tree.map(lambda leaf: leaf[index], tree)


class _Pack:
    """The runs being trained together: each run's TrainingRun, checkpoints and metrics writer, and which are
    still live (not stopped by a non-finite step)."""

    def __init__(self, runs, checkpoints, writers):
        self.runs, self.checkpoints, self.writers = runs, checkpoints, writers
        self.live = [True] * len(runs)

    def label(self, index: int) -> str:
        return f"[{os.path.basename(os.path.normpath(self.runs[index].workdir))}]"


def train_packed(configs: list, workdir_list: list[str]) -> list[dict | None]:
    """Trains each config in its workdir as train_and_evaluate would, the unfinished ones packed into one
    program; returns each run's eval.json content (None for a run stopped by a non-finite step)."""
    check_packable(configs)
    for config, workdir in zip(configs, workdir_list):
        loop.check_run(config, workdir)
    with contextlib.ExitStack() as held:
        for config, workdir in zip(configs, workdir_list):
            held.enter_context(locks.held(workdir, "train.py"))
            workdirs.check_restart(config, workdir)
        results = [loop.finished_result(config, workdir) for config, workdir in zip(configs, workdir_list)]
        todo = [index for index, result in enumerate(results) if result is None]
        if todo:
            trained = _train([configs[i] for i in todo], [workdir_list[i] for i in todo], held)
            for index, result in zip(todo, trained):
                results[index] = result
    return results


def _train(configs: list, workdir_list: list[str], held: contextlib.ExitStack) -> list[dict | None]:
    built = [loop.build_run(config, workdir) for config, workdir in zip(configs, workdir_list)]
    runs = [run for run, _ in built]
    checkpoints = [held.enter_context(Checkpoints(os.path.join(w, workdirs.CHECKPOINTS_DIR))) for w in workdir_list]
    starts = [loop.restore_start(run, saved, state) for (run, state), saved in zip(built, checkpoints)]
    if len({start.step for start in starts}) > 1:
        raise workdirs.WorkdirError(f"packed runs resume from one step; their checkpoints are at steps "
                                    f"{[start.step for start in starts]}: train them apart")
    writers = [loop.metrics_writer(run.task, run.config, run.workdir, starts[0].step) for run in runs]
    for run in runs:
        loop.write_config(run)
    pack = _Pack(runs, checkpoints, writers)
    state, done, elapsed_s = _train_steps(pack, starts)
    for saved in checkpoints:
        saved.close()
    return [loop.finish_run(run, _member(state, index), writer, done, elapsed_s[index]) if pack.live[index] else None
            for index, (run, writer) in enumerate(zip(runs, writers))]


def _steps(pack: _Pack):
    """The vmapped, jitted train step ((state, batch, dropout_keys, rates) -> (state, metrics)), state donated,
    and eval step ((params, rest, batch) -> sums, the batch shared)."""
    config, first = pack.runs[0].config, pack.runs[0]
    eval_step = eval_step_fn(first.graphdef, first.task.metric_sums, config.compute_dtype)
    return (packed_train_step(first.graphdef, config, first.task.metric_sums),
            jax.jit(jax.vmap(eval_step, in_axes=(0, 0, None))))


def packed_train_step(graphdef, config, metric_sums):
    """The jitted train step of runs stacked along a leading axis, their state donated: (states, batches,
    dropout_keys, rates) -> (states, metrics), each run's update scaled by its rate under an optimizer of peak 1."""
    loss_fn = functools.partial(metric_sums, label_smoothing=config.label_smoothing)
    train_step = train_step_fn(graphdef, create_optimizer(config, peak=1.0), loss_fn, config.compute_dtype)
    return jax.jit(jax.vmap(train_step), donate_argnums=0)


def _batches(pack: _Pack, steps: range):
    """Each step's batches of every run, stacked, built ahead in a thread (the host's share of a step)."""
    batch_size = sharding.global_batch_size(pack.runs[0].config.per_device_batch_size)

    def at(step):
        return jax.device_put(stacked([run.task.train_batch(run.config, run.data, batch_size, step)
                                       for run in pack.runs]))

    return prefetch(at, steps)


def _train_steps(pack: _Pack, starts: list):
    """Trains every run from their common start to config.num_train_steps: (the stacked state, its step, each
    run's elapsed seconds)."""
    first = pack.runs[0]
    config, total = first.config, first.config.num_train_steps
    train_step, eval_step = _steps(pack)
    state = stacked([start.state for start in starts])
    keys = jnp.stack([jax.random.fold_in(jax.random.key(run.config.seed), 1) for run in pack.runs])
    rates = jnp.asarray([run.config.learning_rate for run in pack.runs], jnp.float32)
    start_step, started = starts[0].step, time.time()
    elapsed = lambda index: starts[index].metadata["elapsed_s"] + time.time() - started  # noqa: E731
    validated = first.data.validation is not None
    progress = loop.Progress(start_step, total, config.eval_every_steps if validated else 0)
    windows = [loop.Window(start.metadata.get("window", [])) for start in starts]
    stacked_window = []  # the steps' stacked metrics since the last log, device values
    steps = range(start_step, total)
    done = start_step
    with interrupts.stop_requests() as stop, contextlib.closing(_batches(pack, steps)) as batches:
        for step, batch in zip(steps, batches):
            state, step_metrics = train_step(state, batch, keys, rates)
            stacked_window.append(step_metrics)
            done = step + 1
            if step == start_step:
                progress.first_step_done(done)
            if loop.due(done, config.log_every_steps, total):
                _log(pack, windows, jax.device_get(stacked_window), progress, done, elapsed)
                stacked_window = []
            validates = validated and loop.due(done, config.eval_every_steps, total)
            with progress.paused(evaluation=validates):
                if validates:
                    _validate(pack, eval_step, state, done, elapsed)
                if loop.due(done, config.checkpoint_every_steps, total) or stop.signum:
                    _save(pack, windows, stacked_window, state, done, elapsed)
            if stop.signum:
                _exit_interrupted(pack, done, stop)
            if not any(pack.live):
                break
    return state, done, [elapsed(index) for index in range(len(pack.runs))]


def _log(pack: _Pack, windows, window_metrics: list[dict], progress: loop.Progress, done: int, elapsed) -> None:
    """Each live run's train metrics of the window ending at `done`, as its own loop would log them, at the
    pack's pace; a run whose window holds a non-finite step under nonfinite="stop" stops here, alone."""
    pace = progress.update(done)
    for index, run in enumerate(pack.runs):
        windows[index].steps += [{key: value[index] for key, value in step.items()} for step in window_metrics]
        window = windows[index].take()
        if not pack.live[index]:
            continue
        print(pack.label(index), end=" ", flush=True)
        try:
            loop.log_train_window(run, pack.writers[index], window, pace, done, elapsed(index))
        except FloatingPointError as error:
            pack.live[index] = False
            pack.writers[index].close()  # its lines so far stay; it writes no more
            print(f"error: {run.workdir}: {error}", flush=True)


def _validate(pack: _Pack, eval_step, state, done: int, elapsed) -> None:
    """Each live run's periodic validation, from one vmapped evaluation of every run."""
    totals = evaluation.metric_totals(eval_step, state["params"], state["rest"], pack.runs[0].data.validation,
                                      pack.runs[0].config.eval.batch_size)
    for index, run in enumerate(pack.runs):
        if pack.live[index]:
            values = run.task.summarize(_member(totals, index))
            pack.writers[index].write(done, "eval", elapsed(index), values)
            print(f"{pack.label(index)} eval at step {done} | " + " | ".join(f"{k} {v:.4f}" for k, v in values.items()),
                  flush=True)


def _save(pack: _Pack, windows, stacked_window: list[dict], state, done: int, elapsed) -> None:
    """Each live run's checkpoint, with the steps of its logging window so far (host values), as its own loop
    saves it."""
    pending = jax.device_get(stacked_window)
    for index, saved in enumerate(pack.checkpoints):
        if pack.live[index]:
            window = windows[index].host() + [{key: float(value[index]) for key, value in step.items()}
                                              for step in pending]
            saved.save(done, _member(state, index), {"elapsed_s": elapsed(index), "window": window})


def _exit_interrupted(pack: _Pack, step: int, stop: interrupts.StopRequest):
    for saved, writer in zip(pack.checkpoints, pack.writers):
        saved.close()
        writer.mark_preempted()
        writer.close()
    print(f"interrupted at step {step}: checkpoints saved, restart the same command to resume", flush=True)
    raise SystemExit(stop.exit_status())
