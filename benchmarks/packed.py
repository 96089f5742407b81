"""Trainings per hour, one run at a time against R runs packed in one vmapped program (training/packed.py):
the measurement and report of `python -m scripts.bench_packed`, whose docstring (its --help) states the method."""
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

import tasks
from benchmarks import roofline
from benchmarks.common import counted_flops, machine, write_reports
from benchmarks.train import load_config, parse_overrides
from data.prefetch import prefetch
from training import packed, steps

BATCH_SOURCES = ("fixed", "prefetch")


class _Trainer:
    """R runs of one config (seeds 0 .. R-1) as one program: R = 1 is the single run's jitted step as the loop
    compiles it, R > 1 training/packed.py's packed step, the runs' states and batches stacked. Batches are put on
    the device as they are made, as the training loops make them."""

    def __init__(self, config, data, count: int):
        task = tasks.get(config.task)
        self.batch_size = config.per_device_batch_size
        configs = [config.copy_and_resolve_references() for _ in range(count)]
        for seed, member in enumerate(configs):
            member.seed = seed
        states = []
        for member in configs:
            graphdef, state = steps.init_state(task.create_model(member, data), steps.create_optimizer(member, 1.0))
            states.append(state)
        keys = jnp.stack([jax.random.key(seed) for seed in range(count)])
        rates = jnp.full((count,), config.learning_rate, jnp.float32)
        if count == 1:
            self.make_batch = lambda step: jax.device_put(task.train_batch(config, data, self.batch_size, step))
            self.state = states[0]
            step = steps.train_step_fn(graphdef, steps.create_optimizer(config, 1.0), task.metric_sums,
                                       config.compute_dtype)
            jitted = jax.jit(lambda state, batch: step(state, batch, keys[0], rates[0]), donate_argnums=0)
        else:
            self.make_batch = lambda step: packed.stacked([task.train_batch(member, data, self.batch_size, step)
                                                           for member in configs])
            self.state = packed.stacked(states)
            packed_step = packed.packed_train_step(graphdef, config, task.metric_sums)
            jitted = jax.jit(lambda state, batch: packed_step(state, batch, keys, rates), donate_argnums=0)
        self.batches = [self.make_batch(step_index) for step_index in range(4)]
        self.tokens = float(np.mean([task.input_tokens(batch) for batch in self.batches]))
        self.flops = counted_flops(jitted.lower(self.state, self.batches[0]).compile())
        self.step, self.next_step = jitted, 0

    def run(self, num_steps: int, source: str) -> float:
        """Seconds per step over `num_steps` steps with batches from `source` (one host sync at the end)."""
        steps_range = range(self.next_step, self.next_step + num_steps)
        self.next_step += num_steps
        started = time.perf_counter()
        batches = ((self.batches[index % 4] for index in steps_range) if source == "fixed"
                   else prefetch(self.make_batch, steps_range))
        for batch in batches:
            self.state, metrics = self.step(self.state, batch)
        jax.block_until_ready(metrics)
        return (time.perf_counter() - started) / num_steps


def measure(specs: list[str], count: int, sources: list[str], rounds: int, steps_per_round: int, workdir: str,
            overrides: dict | None = None) -> dict:
    os.makedirs(workdir, exist_ok=True)
    trainers = {}
    for spec in specs:
        print(f"compiling {spec}: one run, and {count} packed ...", flush=True)
        config = load_config(spec, overrides)
        data = tasks.get(config.task).prepare_data(config, workdir)
        for runs in (1, count):
            trainers[spec, runs] = (config, _Trainer(config, data, runs))
            for source in sources:
                trainers[spec, runs][1].run(2, source)
    times = {(spec, runs, source): [] for spec, runs in trainers for source in sources}
    dtypes = sorted({config.compute_dtype for config, _ in trainers.values()})
    peak = {dtype: [] for dtype in dtypes}
    for round_index in range(rounds):  # alternating, so that a shared machine's load falls on all alike
        for dtype in dtypes:
            peak[dtype].append(roofline.matmul_rate(dtype, repeats=3))
        for (spec, runs), (_, trainer) in trainers.items():
            for source in sources:
                times[spec, runs, source].append(trainer.run(steps_per_round, source))
        print(f"round {round_index + 1}/{rounds}: " + ", ".join(
            f"{spec} x{runs} ({source}) {1e3 * values[-1]:.0f} ms" for (spec, runs, source), values in times.items()),
            flush=True)
    matmul = {dtype: float(np.median(rates)) for dtype, rates in peak.items()}
    rows = []
    for (spec, runs), (config, trainer) in trainers.items():
        for source in sources:
            seconds = float(np.median(times[spec, runs, source]))
            rate = None if trainer.flops is None else trainer.flops / seconds
            rows.append({"config": spec, "runs": runs, "batches": source, "ms_per_step": 1e3 * seconds,
                         "train_steps": config.num_train_steps,
                         "trainings_per_hour": 3600 * runs / (seconds * config.num_train_steps),
                         "flops_per_step": trainer.flops, "flops_per_sec": rate,
                         "fraction_of_matmul": None if rate is None else rate / matmul[config.compute_dtype],
                         "ms_per_step_rounds": [1e3 * t for t in times[spec, runs, source]]})
    return {"machine": machine(matmul_precision=False), "matmul_flops_per_sec_by_dtype": matmul,
            "rounds": rounds, "steps_per_round": steps_per_round, "packed_runs": count, "overrides": overrides or {},
            "rows": rows}


def table(result: dict) -> str:
    single = {(row["config"], row["batches"]): row for row in result["rows"] if row["runs"] == 1}
    lines = ["| config | batches | runs in the program | ms/step | trainings/hour | x one run | GFLOP/step | "
             "of matmul |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        base = single[row["config"], row["batches"]]["trainings_per_hour"]
        flops = "-" if row["flops_per_step"] is None else f"{row['flops_per_step'] / 1e9:.2f}"
        share = "-" if row["fraction_of_matmul"] is None else f"{100 * row['fraction_of_matmul']:.0f}%"
        lines.append(f"| `{row['config']}` | {row['batches']} | {row['runs']} | {row['ms_per_step']:.0f} | "
                     f"{row['trainings_per_hour']:.2f} | {row['trainings_per_hour'] / base:.2f} | {flops} | {share} |")
    lines.append("\nTrainings per hour: of each config's whole schedule (its num_train_steps), from the median "
                 "round's time per step, training only (no evaluation or checkpoints). Of matmul: XLA's FLOP count "
                 "of the step over its time, against the fastest dense matmul in the same run: " +
                 ", ".join(f"{dtype} {rate / 1e9:,.1f} GFLOP/s" for dtype, rate in
                           result["matmul_flops_per_sec_by_dtype"].items()) + ".")
    return "\n".join(lines)


def run(options) -> dict:
    """The benchmark as the flags of scripts/bench_packed.py (`options`) ask: measured, written under options.out
    (packed.json and packed.md), its table printed; returns the result."""
    logging.set_verbosity(logging.WARNING)
    sources = options.batches.split(",")
    if unknown := sorted(set(sources) - set(BATCH_SOURCES)):
        raise SystemExit(f"--batches: {', '.join(unknown)} not one of {', '.join(BATCH_SOURCES)}")
    if options.runs < 2:
        raise SystemExit(f"--runs={options.runs}: pack at least 2 runs")
    result = measure(options.configs.split(","), options.runs, sources, options.rounds, options.steps_per_round,
                     options.workdir, parse_overrides(options.overrides))
    paths = write_reports(result, options.out, "packed", lambda measured: table(measured) + "\n")
    print(table(result))
    print(f"written: {paths[0]}, packed.md")
    return result
