"""Training speed of whole configs: time per step, tokens/s and achieved FLOP/s against a dense matmul's,
measured in one run: the measurement and report of `python -m scripts.bench_train`, whose docstring (its
--help) states the method."""
import ast
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

import tasks
from attention import registry
from attention.kernelized_base import KernelizedAttention
from benchmarks import model_flops, roofline
from benchmarks.common import counted_flops, machine, write_reports
from configs.task_configs import BY_TASK
from models.mlm import MaskedLanguageModel
from data.prefetch import prefetch
from training import sharding, steps, validate

BATCH_SOURCES = ("fixed", "host", "prefetch", "device")


def parse_overrides(text: str) -> dict:
    """--overrides, `field=value,...`, as {field: value}: a value that reads as a Python literal (512, 3e-3,
    True) is that literal, any other (bfloat16) a string."""
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        field, separator, value = item.partition("=")
        if not separator or not field:
            raise SystemExit(f"--overrides: {item!r} is not field=value")
        try:
            overrides[field] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[field] = value
    return overrides


def _override(config, field: str, value) -> None:
    *parents, leaf = field.split(".")
    node = config
    try:
        for parent in parents:
            node = node[parent]
        node[leaf]  # noqa: B018 - an override changes a field of the config; it adds none
        node[leaf] = value
    except KeyError:
        raise SystemExit(f"--overrides: {field}: no such field of the config") from None
    except TypeError as error:  # ml_collections' own: the value's type against the field's
        raise SystemExit(f"--overrides: {field}: {error}") from None


def load_config(spec: str, overrides: dict | None = None):
    """The config of `configs/<task>.py[:presets]`, with `overrides` ({field: value}) set after the presets."""
    path, _, arg = spec.partition(":")
    directory, task = os.path.split(os.path.splitext(path)[0])
    if directory != "configs" or task not in tasks.names():
        raise SystemExit(f"--configs: {path!r} is not a task's config: configs/<task>.py, task one of "
                         f"{', '.join(tasks.names())}")
    config = BY_TASK[task].get_config(arg or None)
    for field, value in (overrides or {}).items():
        _override(config, field, value)
    config.wandb.mode = "disabled"
    validate.validate(config)
    return config


def hand_counted_flops(config, model, batch: dict) -> float | None:
    """benchmarks/model_flops.py's count of an MLM step whose attention layers are all softmax or all one kernelised
    kind (the others' forms would need counts of their own: a projection, a window, a second part); None otherwise."""
    if not isinstance(model, MaskedLanguageModel):
        return None
    kinds = {type(layer.attention): layer.attention for layers in model.attention_layers().values()
             for layer in layers}
    if len(kinds) != 1:
        return None
    (cls, kind), = kinds.items()
    if cls is registry.get("softmax"):
        feature_dim = None
    elif issubclass(cls, KernelizedAttention) and kind.feature_dim_bounds_rank:  # phi(Q) phi(K)^T, no decay
        feature_dim = kind.feature_dim
    else:
        return None
    return model_flops.train_step_flops(model_flops.mlm_shape(config, batch, feature_dim))


class Bench:
    """One config's compiled train step, its batches and its state, ready to time."""

    def __init__(self, spec: str, workdir: str, overrides: dict | None = None):
        self.spec = spec
        config = load_config(spec, overrides)
        self.compute_dtype = config.compute_dtype
        task = tasks.get(config.task)
        data = task.prepare_data(config, workdir)
        optimizer = steps.create_optimizer(config)
        model = task.create_model(config, data)
        graphdef, self.state = steps.init_state(model, optimizer)
        train_step = steps.make_train_step(graphdef, optimizer, task.metric_sums, jax.random.key(0),
                                           compute_dtype=config.compute_dtype)
        batch_size = config.per_device_batch_size * jax.local_device_count()
        mesh = sharding.data_mesh()
        self.make_batch = lambda step: sharding.put_batch(task.train_batch(config, data, batch_size, step), mesh)
        # The device stream's batches (config.dataset.stream=device), where the task has one.
        device = config.copy_and_resolve_references()
        if "stream" in device.dataset:
            device.dataset.stream = "device"
        self.device_batch = getattr(task, "device_batches", lambda *args: None)(
            device, data, batch_size, sharding.batch_sharding(mesh, 2))
        self.next_step = 0  # of the batches made while timed: each timed step reads a new one
        self.batches = [task.train_batch(config, data, batch_size, step) for step in range(4)]
        self.tokens = float(np.mean([task.input_tokens(batch) for batch in self.batches]))
        compiled = train_step.lower(self.state, self.batches[0]).compile()
        self.flops = counted_flops(compiled)
        self.model_flops = hand_counted_flops(config, model, self.batches[0])
        self.step = train_step

    def run(self, num_steps: int, source: str = "fixed") -> float:
        """Seconds per step over `num_steps` steps with batches from `source` (one host sync at the end)."""
        steps = range(self.next_step, self.next_step + num_steps)
        self.next_step += num_steps
        started = time.perf_counter()
        if source == "fixed":
            batches = (self.batches[step % len(self.batches)] for step in steps)
        elif source == "host":
            batches = (self.make_batch(step) for step in steps)
        elif source == "device":
            if self.device_batch is None:
                raise SystemExit(f"--batches=device: {self.spec}'s task has no device stream (MLM's has)")
            batches = (self.device_batch(step) for step in steps)
        else:
            batches = prefetch(self.make_batch, steps)
        for batch in batches:
            self.state, metrics = self.step(self.state, batch)
        jax.block_until_ready(metrics)
        return (time.perf_counter() - started) / num_steps


def measure(specs: list[str], sources: list[str], rounds: int, steps_per_round: int, workdir: str,
            overrides: dict | None = None) -> dict:
    os.makedirs(workdir, exist_ok=True)
    benches = []
    for spec in specs:
        print(f"compiling {spec} ...", flush=True)
        benches.append(Bench(spec, workdir, overrides))
        for source in sources:  # a first round, untimed: device batches are committed to the mesh (the step
            benches[-1].run(steps_per_round, source)  # compiles for them too), and the first steps warm the rest
    times = {(bench.spec, source): [] for bench in benches for source in sources}
    dtypes = sorted({bench.compute_dtype for bench in benches})
    peak = {dtype: [] for dtype in dtypes}
    for round_index in range(rounds):
        for dtype in dtypes:  # each round: the machine's rate as its load is then
            peak[dtype].append(roofline.matmul_rate(dtype, repeats=3))
        for bench in benches:
            for source in sources:
                times[bench.spec, source].append(bench.run(steps_per_round, source))
        print(f"round {round_index + 1}/{rounds}: " + ", ".join(
            f"{spec} ({source}) {1e3 * values[-1]:.1f} ms" for (spec, source), values in times.items()), flush=True)
    matmul = {dtype: float(np.median(rates)) for dtype, rates in peak.items()}
    rows = []
    for bench in benches:
        for source in sources:
            seconds = float(np.median(times[bench.spec, source]))
            achieved = None if bench.flops is None else bench.flops / seconds
            rows.append({"config": bench.spec, "batches": source, "ms_per_step": 1e3 * seconds,
                         "tokens_per_step": bench.tokens, "tokens_per_sec": bench.tokens / seconds,
                         "flops_per_step": bench.flops, "flops_per_sec": achieved,
                         "model_flops_per_step": bench.model_flops,
                         "model_flops_per_sec": None if bench.model_flops is None else bench.model_flops / seconds,
                         "fraction_of_matmul": None if achieved is None else achieved / matmul[bench.compute_dtype],
                         "ms_per_step_rounds": [1e3 * t for t in times[bench.spec, source]]})
    return {"machine": machine(matmul_precision=False), "matmul_flops_per_sec_by_dtype": matmul,
            "matmul_sizes": list(roofline.matmul_sizes()),
            "rounds": rounds,
            "steps_per_round": steps_per_round, "overrides": overrides or {}, "configs": rows}


def table(result: dict) -> str:
    first = result["configs"][0]["ms_per_step"]
    lines = ["| config | batches | ms/step | x first | tokens/s | GFLOP/step | GFLOP/s | of matmul |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in result["configs"]:
        flops = "-" if row["flops_per_step"] is None else f"{row['flops_per_step'] / 1e9:.2f}"
        rate = "-" if row["flops_per_sec"] is None else f"{row['flops_per_sec'] / 1e9:.1f}"
        fraction = "-" if row["fraction_of_matmul"] is None else f"{100 * row['fraction_of_matmul']:.0f}%"
        lines.append(f"| `{row['config']}` | {row['batches']} | {row['ms_per_step']:.1f} | "
                     f"{row['ms_per_step'] / first:.2f} | {row['tokens_per_sec']:,.0f} | {flops} | {rate} | "
                     f"{fraction} |")
    if "matmul_flops_per_sec_by_dtype" in result:
        sizes = " and ".join(f"{size}x{size}" for size in result["matmul_sizes"])
        lines.append("\nOf matmul: against the fastest dense matmul of " + sizes + " in the config's compute "
                     "dtype, in the same run: " + ", ".join(f"{dtype} {rate / 1e9:,.1f} GFLOP/s" for dtype, rate in
                                                             result["matmul_flops_per_sec_by_dtype"].items()) + ".")
    else:  # a result of the float32 1024 matmul alone, before the rate was taken in each config's dtype
        lines.append(f"\nDense float32 1024x1024 matmul in the same run: "
                     f"{result['matmul_flops_per_sec'] / 1e9:.1f} GFLOP/s.")
    if overrides := result.get("overrides"):  # absent from the JSON of runs before --overrides
        lines.append("Every config with " + ", ".join(f"`{field}={value}`" for field, value in overrides.items())
                     + ".")
    return "\n".join(lines)


def run(options) -> dict:
    """The benchmark as the flags of scripts/bench_train.py (`options`) ask: measured, written under
    options.out (train.json and train.md), its table printed; returns the result."""
    logging.set_verbosity(logging.WARNING)
    sources = options.batches.split(",")
    if unknown := sorted(set(sources) - set(BATCH_SOURCES)):
        raise SystemExit(f"--batches: {', '.join(unknown)} not one of {', '.join(BATCH_SOURCES)}")
    result = measure(options.configs.split(","), sources, options.rounds, options.steps_per_round, options.workdir,
                     parse_overrides(options.overrides))
    paths = write_reports(result, options.out, "train", lambda measured: table(measured) + "\n")
    print(table(result))
    print(f"written: {paths[0]}, train.md")
    return result
