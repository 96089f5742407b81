"""`train_and_evaluate(config, workdir)`: the whole run, resumable from the workdir."""
import functools
import os
import time

import jax
import numpy as np
from flax import nnx

from training import evaluate, tasks, validate
from training.checkpoints import Checkpoints
from training.metrics import MetricsWriter
from training.steps import create_optimizer, init_state, learning_rate_schedule, make_eval_step, make_train_step


def _format_duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s"


class _Progress:
    """Steps/s over the last logging window and the ETA of the run."""

    def __init__(self, step: int, total: int):
        self.total = total
        self.step, self.time = step, time.time()

    def update(self, step: int) -> tuple[float, str]:
        now = time.time()
        steps_per_sec = (step - self.step) / max(now - self.time, 1e-9)
        self.step, self.time = step, now
        return steps_per_sec, _format_duration((self.total - step) / max(steps_per_sec, 1e-9))


def _check_finite(step_metrics: list, first_step: int) -> None:
    finite = np.asarray([m["finite"] for m in step_metrics])
    if not finite.all():
        bad = first_step + int(np.argmin(finite)) + 1
        raise FloatingPointError(
            f"non-finite loss or gradient at step {bad}; stopping. That update was skipped, so the "
            f"parameters are those of step {bad - 1}; lower learning_rate or check the data.")


def train_and_evaluate(config, workdir: str) -> dict:
    """Trains `config` in `workdir` (resuming from its latest checkpoint) and returns eval.json's content."""
    validate.validate(config)
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(config.to_json(indent=1))
    task = tasks.get(config.task)
    data = task.prepare_data(config, workdir)
    model = task.create_model(config, data)
    optimizer = create_optimizer(config)
    graphdef, state = init_state(model, optimizer)

    checkpoints = Checkpoints(os.path.join(workdir, "checkpoints"))
    start_step, elapsed_before = 0, 0.0
    if (latest := checkpoints.latest_step()) is not None:
        state, metadata = checkpoints.restore(latest, state)
        start_step, elapsed_before = latest, metadata["elapsed_s"]
        print(f"resuming {workdir} from step {start_step}", flush=True)
    writer = MetricsWriter(workdir, config, start_step)

    loss_fn = functools.partial(task.metric_sums, label_smoothing=config.label_smoothing)
    dropout_key = jax.random.fold_in(jax.random.key(config.seed), 1)
    train_step = make_train_step(graphdef, optimizer, loss_fn, dropout_key)
    eval_step = make_eval_step(graphdef, task.metric_sums)
    schedule = learning_rate_schedule(config)
    batch_size = config.per_device_batch_size * jax.local_device_count()

    started = time.time()
    def elapsed():
        return elapsed_before + time.time() - started

    progress = _Progress(start_step, config.num_train_steps)
    pending, pending_from = [], start_step
    for step in range(start_step, config.num_train_steps):
        batch = task.train_batch(config, data, batch_size, step)
        state, step_metrics = train_step(state, batch)
        pending.append(step_metrics)
        done = step + 1
        last = done == config.num_train_steps
        if done % config.log_every_steps == 0 or last:
            pending = jax.device_get(pending)  # the one host sync per logging window
            _check_finite(pending, pending_from)
            sums = jax.tree.map(lambda *values: np.sum(values), *pending)
            steps_per_sec, eta = progress.update(done)
            metrics = {**task.summarize(sums), "learning_rate": float(schedule(done - 1)),
                       "grad_norm": float(np.mean([m["grad_norm"] for m in pending])),
                       "steps_per_sec": steps_per_sec}
            writer.write(done, "train", elapsed(), metrics)
            progress_metric = task.PROGRESS_METRIC
            print(f"step {done}/{config.num_train_steps} | loss {metrics['loss']:.4f} | {progress_metric} "
                  f"{metrics[progress_metric]:.4f} | {steps_per_sec:.1f} steps/s | ETA {eta}", flush=True)
            pending, pending_from = [], done
        if done % config.eval_every_steps == 0 or last:
            eval_metrics = task.summarize(evaluate.metric_totals(
                eval_step, state["params"], state["rest"], data.validation, config.eval.batch_size))
            writer.write(done, "eval", elapsed(), eval_metrics)
            print(f"eval at step {done} | " + " | ".join(f"{k} {v:.4f}" for k, v in eval_metrics.items()),
                  flush=True)
        if done % config.checkpoint_every_steps == 0 or last:
            checkpoints.save(done, state, {"elapsed_s": elapsed()})
    checkpoints.close()

    nnx.update(model, state["params"], state["rest"])
    result = task.evaluate_model(config, workdir, model, data, config.num_train_steps)
    writer.close()
    summary = ", ".join(f"{k} {v:.4f}" for k, v in result["metrics"].items())
    print(f"done: {config.num_train_steps} steps in {_format_duration(elapsed())}; test {summary}; "
          f"eval.json in {workdir}", flush=True)
    return result
