"""Linear attention's paths side by side in one run: the former autodiff path against the custom-VJP sums.

  python -m scripts.bench_linear_paths                       # L 1,024..16,384, causal and bidirectional
  python -m scripts.bench_linear_paths --lengths=8192 --modes=causal \\
      --columns=xla:16:sequential,xla:32:sequential,xla:64:sequential,xla:32:parallel --out=reports/bench/strategies

Each column is the kind `linear` (B = 1, H = 4, D = 64 by default, float32) with `implementation`, chunk size
(0: attention/chunking.py's) and, optionally, the strategy of attention/chunked_sums.py forced at trace time
(else chunking.py's): "autodiff:64" is the former path at the chunk size it ran best at on the CPU from
1,024 tokens, "xla:0" the custom-VJP sums as the kinds run them by default with chunk_size=0. The program
timed is the jitted value and gradient of sum(out * cotangent) for q, k and v: the output computed as a
training step needs it (of the gradient alone, XLA drops what only the output needs); `--program=grad`
times the gradient alone, the program issue 27 measured the former path by. The columns run
in alternating rounds so that a shared machine's noise falls on all alike; a column's time is the median of
--repeats timings.

Per row: time; XLA's temporaries (`memory_analysis().temp_size_in_bytes`: the buffers XLA allocates beside
arguments and outputs); FLOPs and bytes of XLA's cost analysis of the program timed, each loop's body
counted once per trip (scripts/roofline.py); the FLOP rate, its share of the matmul rate and the time over
the roofline, from the matmul rate and memory bandwidth measured in the same run (before the first length
and after the last). Writes linear_paths.json, .md and .png under --out.
"""
import contextlib
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from flax import nnx

from attention import chunked_sums, chunking, kernel_sums
from scripts import command_line, roofline
from scripts.bench_attention import (Candidate, build_layer, define_shape_flags, machine, machine_text,
                                     parse_lengths, plot, random_inputs, report_markdown, seconds_per_call,
                                     write_reports)

MODES = {"causal": True, "bidirectional": False}
DEFAULT_COLUMNS = "autodiff:64,xla:64,xla:0"
MIB = 2**20


def parse_columns(text: str) -> list[dict]:
    """implementation:chunk[:strategy], comma-separated -> [{label, implementation, chunk_size, strategy}]."""
    columns = []
    for spec in (part.strip() for part in text.split(",") if part.strip()):
        parts = spec.split(":")
        try:
            implementation, chunk_size, strategy = parts[0], int(parts[1]), (parts[2:] or [None])[0]
        except (IndexError, ValueError):
            command_line.fail(f"--columns: {spec!r} is not implementation:chunk[:strategy]")
        if implementation not in kernel_sums.IMPLEMENTATIONS or chunk_size < 0 or len(parts) > 3 or (
                strategy is not None and strategy not in chunked_sums.STRATEGIES):
            command_line.fail(f"--columns: {spec!r}: implementation in {kernel_sums.IMPLEMENTATIONS}, chunk >= 0, "
                              f"strategy in {chunked_sums.STRATEGIES}")
        label = f"{implementation} C={chunk_size or 'auto'}" + (f" {strategy}" if strategy else "")
        columns.append({"label": label, "implementation": implementation, "chunk_size": chunk_size,
                        "strategy": strategy})
    if not columns or len({column["label"] for column in columns}) != len(columns):
        command_line.fail(f"--columns: {text!r} is empty or names a column twice")
    return columns


@contextlib.contextmanager
def _strategy(strategy: str | None):
    """chunking.strategy_for answering `strategy` while a program is traced (None: its own answer)."""
    own = chunking.strategy_for
    if strategy is not None:
        chunking.strategy_for = lambda platform, length: strategy
    try:
        yield
    finally:
        chunking.strategy_for = own


def training_program(graphdef, causal: bool, program: str = "value_and_grad"):
    """jit of (state, q, k, v, cotangent) -> (sum(out * cotangent), its gradient for q, k and v), or the
    gradient alone for `program` "grad"."""

    def loss(q, k, v, state, cotangent):
        return jnp.sum(nnx.merge(graphdef, state)(q, k, v, causal=causal) * cotangent)

    differentiated = getattr(jax, program)(loss, argnums=(0, 1, 2))
    return jax.jit(lambda state, q, k, v, cotangent: differentiated(q, k, v, state, cotangent))


def _compiled(column, causal, length, settings, arguments):
    """(compiled program, its loop-aware cost, its temporaries in bytes, compile seconds)."""
    layer = build_layer("linear", settings["heads"], settings["head_dim"],
                        {"implementation": column["implementation"], "chunk_size": column["chunk_size"]})

    def compile_program():
        with _strategy(column["strategy"]):
            return training_program(layer[0], causal, settings["program"]).lower(layer[1], *arguments).compile()

    started = time.perf_counter()
    compiled = compile_program()
    compile_s = time.perf_counter() - started
    work = roofline.work(compile_program, layer, causal, length)
    return (compiled, (layer[1], *arguments)), work, compiled.memory_analysis().temp_size_in_bytes, compile_s


def measure_length(columns, causal: bool, length: int, settings: dict) -> list[dict]:
    """A row per column at one length in one mode, the columns timed in alternating rounds."""
    key = jax.random.fold_in(jax.random.key(settings["seed"]), length)
    inputs = random_inputs(key, settings["batch"], length, settings["heads"], settings["head_dim"])
    candidates, temps = [], {}
    for column in columns:
        (program, arguments), work, temp, compile_s = _compiled(column, causal, length, settings, inputs)
        temps[column["label"]] = temp
        candidates.append(Candidate(column["label"], program, arguments, None, compile_s,
                                    seconds_per_call(program, arguments, 1), math.inf, settings["repeats"], work))
    for _ in range(settings["repeats"]):
        for candidate in candidates:
            candidate.time_once()
    rows = []
    for candidate in candidates:
        rows.append({"kind": candidate.kind, "causal": causal, "masked": False, "length": length,
                     "ms": 1e3 * float(np.median(candidate.seconds)),
                     "ms_repeats": [1e3 * s for s in candidate.seconds], "temp_bytes": temps[candidate.kind],
                     "flops": candidate.flops, "bytes_accessed": candidate.bytes_accessed,
                     "compile_s": candidate.compile_s})
    return rows


def measure(columns: list[dict], lengths: list[int], modes: list[str], settings: dict, log=print) -> dict:
    started = time.perf_counter()
    rates = [roofline.machine_rates()]
    rows = []
    for mode in modes:
        for length in lengths:
            measured = measure_length(columns, MODES[mode], length, settings)
            rows.extend(measured)
            log(f"[{time.perf_counter() - started:6.1f} s] {mode} L={length}: "
                + ", ".join(f"{row['kind']} {row['ms']:.1f} ms" for row in measured))
    rates.append(roofline.machine_rates())
    labels = [column["label"] for column in columns]
    return {"machine": machine(), "rates": rates, "run_rates": roofline.annotate(rows, rates),
            "settings": {**settings, "kinds": labels, "columns": columns, "lengths": lengths, "modes": modes},
            "rows": rows, "elapsed_s": time.perf_counter() - started}


# --- report ----------------------------------------------------------------------------------------------------


def _number(value, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if value is None else f"{value / scale:,.{digits}f}"


def table(result: dict, mode: str) -> str:
    """A row per length and column: time, speed-up over the first column, temporaries, work, rates."""
    header = ["L", "path", "ms", "x first", "temp MiB", "GFLOP", "GB moved", "GFLOP/s", "of matmul rate",
              "x roofline"]
    lines = ["| " + " | ".join(header) + " |", "|---:|:---|" + "---:|" * (len(header) - 2)]
    rows = [row for row in result["rows"] if row["causal"] == MODES[mode]]
    for length in result["settings"]["lengths"]:
        at_length = [row for row in rows if row["length"] == length]
        for row in at_length:
            share = None if row["matmul_share"] is None else 100 * row["matmul_share"]
            lines.append("| " + " | ".join([
                f"{length:,}", row["kind"], _number(row["ms"], digits=1), _number(at_length[0]["ms"] / row["ms"]),
                _number(row["temp_bytes"], MIB, 1), _number(row["flops"], 1e9), _number(row["bytes_accessed"], 1e9),
                _number(row["flops_per_s"], 1e9, 1), "-" if share is None else f"{share:.0f}%",
                _number(row["over_roofline"], digits=1)]) + " |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    s = result["settings"]
    program = {"value_and_grad": "the value and gradient", "grad": "the gradient alone"}[s["program"]]
    settings = (f"`linear`, B={s['batch']}, H={s['heads']}, D={s['head_dim']}, float32, forward+backward ({program} "
                f"w.r.t. q, k, v of sum(out * cotangent)); median of {s['repeats']} timings in alternating rounds; "
                f"{machine_text(result['machine'])}. `x first`: the first column's time over the row's. temp: XLA's "
                f"temporaries (`memory_analysis().temp_size_in_bytes`).\n\n{roofline.rates_text(result)}")
    body = []
    for mode in s["modes"]:
        body += [f"## {mode}\n", table(result, mode), ""]
    return report_markdown("Linear attention: the former autodiff path and the custom-VJP sums", settings, *body)


FLAGS = flags.FlagValues()
flags.DEFINE_string("columns", DEFAULT_COLUMNS, "comma-separated implementation:chunk[:strategy] of the kind "
                    "linear (implementation autodiff or xla; chunk 0: attention/chunking.py's; strategy "
                    "sequential or parallel: forced, else chunking.py's)", flag_values=FLAGS)
flags.DEFINE_string("modes", ",".join(MODES), "comma-separated: causal, bidirectional", flag_values=FLAGS)
flags.DEFINE_enum("program", "value_and_grad", ("value_and_grad", "grad"), "what is timed: the loss and its "
                  "gradient, or the gradient alone", flag_values=FLAGS)
define_shape_flags(FLAGS, "1024,2048,4096,8192,16384")
SETTINGS = ("batch", "heads", "head_dim", "repeats", "seed", "program")


def parse_modes(text: str) -> list[str]:
    modes = [mode.strip() for mode in text.split(",") if mode.strip()]
    if not modes or set(modes) - set(MODES):
        command_line.fail(f"--modes: {text!r} is not a comma-separated subset of {', '.join(MODES)}")
    return modes


def main(argv=None) -> dict:
    """Measures, writes linear_paths.{json,md,png} under --out and prints the tables."""
    args = command_line.parse(FLAGS, argv, __doc__)
    settings = {name: getattr(args, name) for name in SETTINGS}
    result = measure(parse_columns(args.columns), parse_lengths(args.lengths), parse_modes(args.modes), settings)
    written = write_reports(result, args.out, "linear_paths", markdown, plot)
    print("\n\n".join(f"{mode}:\n{table(result, mode)}" for mode in result["settings"]["modes"]))
    print(f"written: {', '.join(written)} ({result['elapsed_s']:.0f} s)")
    return result


if __name__ == "__main__":
    main()
