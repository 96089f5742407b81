"""Training speed of whole configs, measured in one run: time per step, tokens/s, achieved FLOP/s.

  python -m scripts.bench_train                                   # Transformer vs RNN on SCAN, MLM
  python -m scripts.bench_train --configs=configs/translation.py,configs/translation.py:rnn --rounds=7
  python -m scripts.bench_train --batches=host,prefetch           # the input pipeline's cost

Each config's jitted train step is compiled once, then timed in rounds that alternate between the
configs, so that noise from a shared machine falls on all of them alike; a config's time is its median
round. FLOPs per step come from XLA's cost analysis of the compiled step; the dense-matmul FLOP/s it is
compared with is measured in the same run. Writes JSON and a markdown table under --out.

--batches says where each step's batch comes from: "fixed", four batches made before timing (the step
alone); "host", made in the loop before each step (the training loop before batches were prefetched);
"prefetch", made ahead by data/prefetch.py's thread (the training loop now). Each is its own row.
"""
import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags, logging

from configs import mlm as mlm_config
from configs import recall as recall_config
from configs import translation as translation_config
from data.prefetch import prefetch
from scripts import command_line
import tasks
from training import sharding, steps, validate

CONFIG_MODULES = {"configs/translation.py": translation_config, "configs/mlm.py": mlm_config,
                  "configs/recall.py": recall_config}
DEFAULT_CONFIGS = "configs/translation.py,configs/translation.py:rnn,configs/mlm.py"
BATCH_SOURCES = ("fixed", "host", "prefetch")


def load_config(spec: str):
    path, _, arg = spec.partition(":")
    if path not in CONFIG_MODULES:
        raise SystemExit(f"--configs: {path!r} is not one of {', '.join(CONFIG_MODULES)}")
    config = CONFIG_MODULES[path].get_config(arg or None)
    config.wandb.mode = "disabled"
    validate.validate(config)
    return config


class Bench:
    """One config's compiled train step, its batches and its state, ready to time."""

    def __init__(self, spec: str, workdir: str):
        self.spec = spec
        config = load_config(spec)
        task = tasks.get(config.task)
        data = task.prepare_data(config, workdir)
        optimizer = steps.create_optimizer(config)
        graphdef, self.state = steps.init_state(task.create_model(config, data), optimizer)
        train_step = steps.make_train_step(graphdef, optimizer, task.metric_sums, jax.random.key(0),
                                           compute_dtype=config.compute_dtype)
        batch_size = config.per_device_batch_size * jax.local_device_count()
        mesh = sharding.data_mesh()
        self.make_batch = lambda step: sharding.put_batch(task.train_batch(config, data, batch_size, step), mesh)
        self.next_step = 0  # of the batches made while timed: each timed step reads a new one
        self.batches = [task.train_batch(config, data, batch_size, step) for step in range(4)]
        self.tokens = float(np.mean([task.input_tokens(batch) for batch in self.batches]))
        compiled = train_step.lower(self.state, self.batches[0]).compile()
        self.flops = _flops(compiled)
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
        else:
            batches = prefetch(self.make_batch, steps)
        for batch in batches:
            self.state, metrics = self.step(self.state, batch)
        jax.block_until_ready(metrics)
        return (time.perf_counter() - started) / num_steps


def _flops(compiled) -> float | None:
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
    return float(analysis["flops"]) if analysis and "flops" in analysis else None


def matmul_flops_per_sec(size: int = 1024, repeats: int = 20) -> float:
    """Achieved FLOP/s of a float32 size x size matmul: the machine's dense reference."""
    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    matmul = jax.jit(lambda x: x @ a)
    x = matmul(a).block_until_ready()
    started = time.perf_counter()
    for _ in range(repeats):
        x = matmul(x)
    x.block_until_ready()
    return 2 * size**3 * repeats / (time.perf_counter() - started)


def measure(specs: list[str], sources: list[str], rounds: int, steps_per_round: int, workdir: str) -> dict:
    os.makedirs(workdir, exist_ok=True)
    benches = []
    for spec in specs:
        print(f"compiling {spec} ...", flush=True)
        benches.append(Bench(spec, workdir))
        for source in sources:  # device batches are committed to the mesh: the step compiles for them too
            benches[-1].run(2, source)
    times = {(bench.spec, source): [] for bench in benches for source in sources}
    peak = []
    for round_index in range(rounds):
        peak.append(matmul_flops_per_sec())
        for bench in benches:
            for source in sources:
                times[bench.spec, source].append(bench.run(steps_per_round, source))
        print(f"round {round_index + 1}/{rounds}: " + ", ".join(
            f"{spec} ({source}) {1e3 * values[-1]:.1f} ms" for (spec, source), values in times.items()), flush=True)
    matmul = float(np.median(peak))
    rows = []
    for bench in benches:
        for source in sources:
            seconds = float(np.median(times[bench.spec, source]))
            achieved = None if bench.flops is None else bench.flops / seconds
            rows.append({"config": bench.spec, "batches": source, "ms_per_step": 1e3 * seconds,
                         "tokens_per_step": bench.tokens, "tokens_per_sec": bench.tokens / seconds,
                         "flops_per_step": bench.flops, "flops_per_sec": achieved,
                         "fraction_of_matmul": None if achieved is None else achieved / matmul,
                         "ms_per_step_rounds": [1e3 * t for t in times[bench.spec, source]]})
    return {"machine": _machine(), "matmul_flops_per_sec": matmul, "rounds": rounds,
            "steps_per_round": steps_per_round, "configs": rows}


def _machine() -> dict:
    device = jax.devices()[0]
    return {"platform": device.platform, "device": device.device_kind, "device_count": jax.device_count(),
            "cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "jax": jax.__version__}


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
    lines.append(f"\nDense float32 1024x1024 matmul in the same run: "
                 f"{result['matmul_flops_per_sec'] / 1e9:.1f} GFLOP/s.")
    return "\n".join(lines)


FLAGS = flags.FlagValues()
flags.DEFINE_string("configs", DEFAULT_CONFIGS, "comma-separated FILE[:PRESETS]", flag_values=FLAGS)
flags.DEFINE_string("batches", "fixed", f"comma-separated, of {', '.join(BATCH_SOURCES)}", flag_values=FLAGS)
flags.DEFINE_integer("rounds", 5, "timing rounds; a config's time is its median round", flag_values=FLAGS)
flags.DEFINE_integer("steps_per_round", 20, "train steps per config in a round", flag_values=FLAGS)
flags.DEFINE_string("out", "reports/bench", "folder for train.json and train.md", flag_values=FLAGS)
flags.DEFINE_string("workdir", "runs/bench", "vocabularies of the translation configs", flag_values=FLAGS)


def main(argv: list[str] | None = None) -> None:
    args = command_line.parse(FLAGS, argv, __doc__)
    logging.set_verbosity(logging.WARNING)
    sources = args.batches.split(",")
    if unknown := sorted(set(sources) - set(BATCH_SOURCES)):
        raise SystemExit(f"--batches: {', '.join(unknown)} not one of {', '.join(BATCH_SOURCES)}")
    result = measure(args.configs.split(","), sources, args.rounds, args.steps_per_round, args.workdir)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "train.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "train.md"), "w") as f:
        f.write(table(result) + "\n")
    print(table(result))
    print(f"written: {os.path.join(args.out, 'train.json')}, train.md")


if __name__ == "__main__":
    main()
