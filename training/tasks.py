"""Tasks by `config.task`. A task module provides:

  check_config(config)                         the task's own config fields (its dataset.name among them),
                                               raising config_checks.ConfigError; validate.validate calls it
  prepare_data(config, workdir) -> data        with `data.train` and `data.validation` arrays (validation
                                               None: no periodic evaluation)
  create_model(config, data) -> model          with `attention_layers()`
  train_batch(config, data, batch_size, step)  the batch at a step, a function of (seed, step)
  metric_sums(model, batch, label_smoothing)   (mean loss, sums that add over batches, `input_tokens` among
                                               them: input_tokens(batch), the throughput's count)
  summarize(sums) -> metrics                   PROGRESS_METRIC names the one on the progress line
  evaluate_model(config, workdir, model, data, step) -> eval.json's content, written
"""
import importlib

NAMES = ("translation", "mlm", "recall", "listops")


def get(name: str):
    if name not in NAMES:
        raise ValueError(f"config.task={name!r} is not a task; choose one of: {', '.join(NAMES)}")
    return importlib.import_module(f"training.{name}")
