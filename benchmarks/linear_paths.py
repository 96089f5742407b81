"""Linear attention's paths side by side in one run, the autodiff path against the custom-VJP sums (or
chunk sizes and strategies): the measurement and reports of `python -m scripts.bench_linear_paths`, whose
docstring (its --help) states the method. Timing, warm-up, medians and budgets are benchmarks/attention.py's,
the roofline benchmarks/roofline.py's."""
import contextlib
import json
import time

from attention.ops import chunked_sums, chunking, kernel_sums
from benchmarks import roofline
from benchmarks.attention import build_layer, measure_modes, plot
from benchmarks.common import machine, machine_text, parse_lengths, report_markdown, write_reports

MODES = {"causal": (True, False), "bidirectional": (False, False)}  # name -> (causal, masked)
DEFAULT_COLUMNS = "autodiff:64,xla:64,xla:0"
AUTODIFF, CUSTOM_VJP = "autodiff C=64", "xla C=auto"  # the columns the comparison sets side by side
PROGRAMS = {"value_and_grad": "the value and gradient", "grad": "the gradient alone"}
MIB = 2**20


def parse_columns(text: str) -> list[dict]:
    """implementation:chunk[:strategy], comma-separated -> [{label, implementation, chunk_size, strategy}]."""
    columns = []
    for spec in (part.strip() for part in text.split(",") if part.strip()):
        parts = spec.split(":")
        try:
            implementation, chunk_size, strategy = parts[0], int(parts[1]), (parts[2:] or [None])[0]
        except (IndexError, ValueError):
            raise SystemExit(f"--columns: {spec!r} is not implementation:chunk[:strategy]") from None
        if implementation not in kernel_sums.IMPLEMENTATIONS or chunk_size < 0 or len(parts) > 3 or (
                strategy is not None and strategy not in chunked_sums.STRATEGIES):
            raise SystemExit(f"--columns: {spec!r}: implementation in {kernel_sums.IMPLEMENTATIONS}, chunk >= 0, "
                             f"strategy in {chunked_sums.STRATEGIES}")
        label = f"{implementation} C={chunk_size or 'auto'}" + (f" {strategy}" if strategy else "")
        columns.append({"label": label, "implementation": implementation, "chunk_size": chunk_size,
                        "strategy": strategy})
    if not columns or len({column["label"] for column in columns}) != len(columns):
        raise SystemExit(f"--columns: {text!r} is empty or names a column twice")
    return columns


def parse_modes(text: str) -> list[str]:
    modes = [mode.strip() for mode in text.split(",") if mode.strip()]
    if not modes or set(modes) - set(MODES):
        raise SystemExit(f"--modes: {text!r} is not a comma-separated subset of {', '.join(MODES)}")
    return modes


@contextlib.contextmanager
def forced_strategy(strategy: str | None):
    """chunking.strategy_for answering `strategy` while a program is traced (None: its own answer)."""
    own = chunking.strategy_for
    if strategy is not None:
        chunking.strategy_for = lambda platform, length: strategy
    try:
        yield
    finally:
        chunking.strategy_for = own


def measure(columns: list[dict], lengths: list[int], modes: list[str], settings: dict, log=print) -> dict:
    """Every column x mode x length of the kind `linear`, timed in alternating rounds; `settings` holds batch,
    heads, head_dim, repeats, seed, program ("value_and_grad" or "grad"), max_seconds and max_memory_gb."""
    started = time.perf_counter()
    labels = [column["label"] for column in columns]
    layers = {column["label"]: build_layer("linear", settings["heads"], settings["head_dim"],
                                           {"kernelized_implementation": column["implementation"],
                                            "chunk_size": column["chunk_size"]}) for column in columns}
    traced_in = {column["label"]: lambda strategy=column["strategy"]: forced_strategy(strategy)
                 for column in columns}
    measured = measure_modes(labels, layers, lengths, {mode: MODES[mode] for mode in modes}, settings, log, traced_in)
    for row in measured["rows"]:
        row["temp_bytes"] = None if row["memory"] is None else row["memory"]["temp"]
    return {"machine": machine(), **measured,
            "settings": {**settings, "kinds": labels, "columns": columns, "lengths": lengths, "modes": modes},
            "elapsed_s": time.perf_counter() - started}


# --- reports ---------------------------------------------------------------------------------------------------


def _number(value, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if value is None else f"{value / scale:,.{digits}f}"


def _share(row: dict) -> str:
    return "-" if row.get("matmul_share") is None else f"{100 * row['matmul_share']:.0f}%"


def _mode_rows(result: dict, mode: str) -> list[dict]:
    return [row for row in result["rows"] if row["causal"] == MODES[mode][0] and row["ms"] is not None]


def table(result: dict, mode: str) -> str:
    """A row per length and column: time, speed-up over the first column, temporaries, work, rates."""
    header = ["L", "path", "ms", "x first", "temp MiB", "GFLOP", "GB moved", "GFLOP/s", "of matmul rate",
              "x roofline"]
    lines = ["| " + " | ".join(header) + " |", "|---:|:---|" + "---:|" * (len(header) - 2)]
    rows = _mode_rows(result, mode)
    for length in result["settings"]["lengths"]:
        at_length = [row for row in rows if row["length"] == length]
        for row in at_length:
            lines.append("| " + " | ".join([
                f"{length:,}", row["kind"], _number(row["ms"], digits=1), _number(at_length[0]["ms"] / row["ms"]),
                _number(row["temp_bytes"], MIB, 1), _number(row["flops"], 1e9), _number(row["bytes_accessed"], 1e9),
                _number(row["flops_per_s"], 1e9, 1), _share(row), _number(row["over_roofline"], digits=1)]) + " |")
    return "\n".join(lines)


def comparison(result: dict, mode: str, first: str = AUTODIFF, second: str = CUSTOM_VJP) -> str:
    """Two columns of a run side by side, a row per length: their times and its ratio, their temporaries and
    its ratio, their FLOP rates with the share of the matmul rate, their times over the roofline."""
    header = ["L", "autodiff ms", "custom-VJP ms", "custom-VJP/autodiff speed", "autodiff temp MiB",
              "custom-VJP temp MiB", "custom-VJP/autodiff temp", "autodiff GFLOP/s (of matmul)",
              "custom-VJP GFLOP/s (of matmul)", "autodiff x roofline", "custom-VJP x roofline"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    rows = {(row["kind"], row["length"]): row for row in _mode_rows(result, mode)}
    for length in result["settings"]["lengths"]:
        a, b = rows.get((first, length)), rows.get((second, length))
        if a is None or b is None:
            continue
        lines.append("| " + " | ".join([
            f"{length:,}", _number(a["ms"], digits=1), _number(b["ms"], digits=1), f"{a['ms'] / b['ms']:.2f}x",
            _number(a["temp_bytes"], MIB, 1), _number(b["temp_bytes"], MIB, 1),
            f"{b['temp_bytes'] / a['temp_bytes']:.2f}",
            *(f"{_number(row['flops_per_s'], 1e9, 1)} ({_share(row)})" for row in (a, b)),
            _number(a["over_roofline"], digits=1), _number(b["over_roofline"], digits=1)]) + " |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    s = result["settings"]
    settings = (f"`linear`, B={s['batch']}, H={s['heads']}, D={s['head_dim']}, float32, forward+backward "
                f"({PROGRAMS[s['program']]} w.r.t. q, k, v of sum(out * cotangent)); median of {s['repeats']} "
                f"timings in alternating rounds; {machine_text(result['machine'])}. `x first`: the first column's "
                f"time over the row's. temp: XLA's temporaries (`memory_analysis().temp_size_in_bytes`).\n\n"
                f"{roofline.rates_text(result)}")
    body = []
    for mode in s["modes"]:
        body += [f"## {mode}\n", table(result, mode), ""]
    return report_markdown("Linear attention: the autodiff path and the custom-VJP sums", settings, *body)


def tables(result: dict) -> str:
    """What a run prints: each mode's table, and the autodiff and custom-VJP paths side by side where it has both."""
    text = []
    for mode in result["settings"]["modes"]:
        text.append(f"{mode}:\n{table(result, mode)}")
        if {AUTODIFF, CUSTOM_VJP} <= set(result["settings"]["kinds"]):
            text.append(f"{mode}, {AUTODIFF} against {CUSTOM_VJP}:\n{comparison(result, mode)}")
    return "\n\n".join(text)


# --- the benchmark ---------------------------------------------------------------------------------------------

SETTINGS = ("batch", "heads", "head_dim", "repeats", "seed", "program", "max_seconds", "max_memory_gb")


def run(options) -> dict:
    """The benchmark as the flags of scripts/bench_linear_paths.py (`options`) ask: measured and written under
    options.out (linear_paths.json, .md and .png), its tables printed; or, with options.tables_of, the tables
    of a JSON it wrote, printed, nothing measured. Returns the result."""
    if options.tables_of:
        with open(options.tables_of) as f:
            result = json.load(f)
        print(tables(result))
        return result
    settings = {name: getattr(options, name) for name in SETTINGS}
    result = measure(parse_columns(options.columns), parse_lengths(options.lengths), parse_modes(options.modes),
                     settings)
    written = write_reports(result, options.out, "linear_paths", markdown, plot)
    print(tables(result))
    print(f"written: {', '.join(written)} ({result['elapsed_s']:.0f} s)")
    return result
