"""Forward+backward time and planned memory of ONE attention layer, by sequence length, in one run.

  python scripts/bench_attention.py                      # softmax, linear, performer, reference; L 256..16384
  python scripts/bench_attention.py --kinds=softmax,linear,performer,taylor,cosformer,reference \\
      --lengths=256,1024,4096 --repeats=3 --max_seconds=5

Inputs q, k, v [B, L, H, D] (float32, standard normal) go through one registered kind,
`attention.create(kind, num_heads=H, head_dim=D, rngs=nnx.Rngs(0))` called as
`module(q, k, v, mask=None, causal=causal)`, or, as the kind "reference", through
`jax.nn.dot_product_attention(q, k, v, is_causal=causal)` (same [B, L, H, D] layout). Kernelised kinds that
take `num_features` (performer) get --num_features, 64 = D by default: as many features as the head
width, the same rank bound as `linear` (phi = elu + 1 has D features), so the two differ only in the
feature map.

Time: the jitted gradient of sum(out * cotangent) with respect to q, k and v only: the module's state
(performer's random projection, hedgehog's weights) is an argument of the jitted function, merged inside
it with nnx.merge and held constant, so a kind's parameter gradients are not part of the time. Each
program is compiled once and called twice to warm up; then, per length, timing rounds alternate between
the kinds so that noise from a shared machine falls on all of them alike, each timing after one untimed
call (see seconds_per_call: the first call after another kind's is slow). One timing is as many calls
as make it last ~50 ms (short programs are otherwise swamped by timer and dispatch noise), each ending in
block_until_ready; a kind's time is the median of --repeats timings.

Memory: XLA's planned buffer sizes of the compiled program, from `compiled.memory_analysis()`:
temp + argument + output - alias bytes. This is what XLA's buffer assignment allocates for the program
(on the CPU backend of jax 0.10.2 `peak_memory_in_bytes` counts arguments and outputs only, so temp is
added here), not the process RSS, and not what a GPU allocator would reserve on top.

Budget: a kind whose planned memory exceeds --max_memory_gb is not run at that length; a kind whose
forward+backward takes longer than --max_seconds (median, or the warm-up call alone, in which case it is
timed once more only) is measured at that length; in both cases the larger lengths of that kind, in that
mode, are skipped and recorded as such with the reason.

Writes under --out: attention.json (machine, settings, one row per (kind, causal, L)), attention.md
(tables per mode: ms and MiB per kind, ratios softmax/linear and softmax/reference) and attention.png
(log-log time against L, bidirectional and causal panels).
"""
import argparse
import json
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run as a script from anywhere: the repository's packages must import

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

import attention  # noqa: E402

REFERENCE = "reference"  # jax.nn.dot_product_attention, not a registered kind
DEFAULT_KINDS = "softmax,linear,performer," + REFERENCE
DEFAULT_LENGTHS = ",".join(str(2**p) for p in range(8, 15))  # 256 .. 16,384
MODES = {"bidirectional": False, "causal": True}
TIMING_SECONDS = 0.05  # one timing lasts about this long: enough calls to rise above timer noise
MAX_CALLS_PER_TIMING = 1000
MIB = 2**20


# --- arguments ---------------------------------------------------------------------------------------------


def parse_kinds(text: str) -> list[str]:
    """Comma-separated kinds, checked against the registry before anything compiles."""
    kinds = [kind.strip() for kind in text.split(",") if kind.strip()]
    known = attention.names()
    unknown = [kind for kind in kinds if kind != REFERENCE and kind not in known]
    if unknown or not kinds:
        raise SystemExit(f"--kinds: unknown {unknown or '(empty)'}; known: {', '.join(known)}, {REFERENCE}")
    if len(set(kinds)) != len(kinds):
        raise SystemExit(f"--kinds: {text!r} names a kind twice")
    return kinds


def parse_lengths(text: str) -> list[int]:
    try:
        lengths = sorted({int(length) for length in text.split(",")})
    except ValueError:
        raise SystemExit(f"--lengths: {text!r} is not a comma-separated list of integers") from None
    if lengths[0] < 1:
        raise SystemExit(f"--lengths: lengths must be positive, got {text!r}")
    return lengths


def kind_options(kind: str, num_features: int) -> dict:
    """The bench's options for `kind`: --num_features for the kinds that take it, defaults otherwise."""
    return {} if kind == REFERENCE else attention.select_options(kind, {"num_features": num_features})


# --- the measured program ------------------------------------------------------------------------------------


def build_layer(kind: str, heads: int, head_dim: int, options: dict):
    """(graphdef, state) of the kind's module; (None, {}) for the reference, which has no state."""
    if kind == REFERENCE:
        return None, {}
    module = attention.create(kind, num_heads=heads, head_dim=head_dim, rngs=nnx.Rngs(0), **options)
    return nnx.split(module)


def gradient_program(graphdef, causal: bool):
    """jit of (state, q, k, v, cotangent) -> d sum(out * cotangent) / d(q, k, v)."""

    def attend(state, q, k, v):
        if graphdef is None:
            return jax.nn.dot_product_attention(q, k, v, is_causal=causal)
        return nnx.merge(graphdef, state)(q, k, v, mask=None, causal=causal)

    def loss(q, k, v, state, cotangent):
        return jnp.sum(attend(state, q, k, v) * cotangent)

    grad = jax.grad(loss, argnums=(0, 1, 2))
    return jax.jit(lambda state, q, k, v, cotangent: grad(q, k, v, state, cotangent))


def planned_memory(compiled) -> dict:
    """XLA's planned buffer bytes of a compiled program (not RSS): its parts and their total."""
    stats = compiled.memory_analysis()
    parts = {"temp": stats.temp_size_in_bytes, "argument": stats.argument_size_in_bytes,
             "output": stats.output_size_in_bytes, "alias": stats.alias_size_in_bytes}
    # Aliased bytes are an argument buffer reused for an output: counted once.
    return {**parts, "total": parts["temp"] + parts["argument"] + parts["output"] - parts["alias"]}


def random_inputs(key, batch: int, length: int, heads: int, head_dim: int):
    """q, k, v and the output cotangent, each [B, L, H, D] standard normal float32."""
    return tuple(jax.random.normal(part, (batch, length, heads, head_dim), jnp.float32)
                 for part in jax.random.split(key, 4))


def seconds_per_call(program, arguments, calls: int) -> float:
    """Mean seconds of `calls` calls after one untimed call. The call that follows another program's pays
    for its buffers again (first touch of memory the other program used and freed): measured on this
    machine, linear attention at L=8,192 took 380-470 ms on its first call after softmax's and 100-120 ms
    on the next ones, so an interleaved timing without that call measured the neighbour, not the kind."""
    jax.block_until_ready(program(*arguments))
    started = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(program(*arguments))
    return (time.perf_counter() - started) / calls


# --- the sweep -------------------------------------------------------------------------------------------------


class Candidate:
    """One kind at one length in one mode, compiled and warmed up, waiting for its timing rounds."""

    def __init__(self, kind, program, arguments, memory, compile_s, warmup_s, max_seconds, repeats):
        self.kind, self.program, self.arguments = kind, program, arguments
        self.memory, self.compile_s, self.warmup_s = memory, compile_s, warmup_s
        self.calls = min(MAX_CALLS_PER_TIMING, max(1, int(TIMING_SECONDS / max(warmup_s, 1e-6))))
        # Already over budget once: one more call is the measurement, not `repeats` more.
        self.repeats = 1 if warmup_s > max_seconds else repeats
        self.seconds = []

    def time_once(self):
        if len(self.seconds) < self.repeats:
            self.seconds.append(seconds_per_call(self.program, self.arguments, self.calls))


def _row(kind, causal, length, **fields) -> dict:
    row = {"kind": kind, "causal": causal, "length": length, "ms": None, "ms_repeats": [], "calls_per_timing": None,
           "bytes": None, "memory": None, "compile_s": None, "skipped": None}
    return {**row, **fields}


def _compile(layer, causal, arguments):
    """(compiled program, its planned memory, compile seconds) of one kind at one length."""
    graphdef, _ = layer
    started = time.perf_counter()
    compiled = gradient_program(graphdef, causal).lower(*arguments).compile()
    return compiled, planned_memory(compiled), time.perf_counter() - started


def measure_length(kinds, layers, causal, length, settings, stopped: dict) -> list[dict]:
    """Rows of every kind at one length in one mode; updates `stopped` (kind -> reason) for larger ones."""
    key = jax.random.fold_in(jax.random.key(settings["seed"]), length)
    inputs = random_inputs(key, settings["batch"], length, settings["heads"], settings["head_dim"])
    rows, candidates = {}, []
    for kind in kinds:
        if kind in stopped:
            rows[kind] = _row(kind, causal, length, skipped=stopped[kind])
            continue
        arguments = (layers[kind][1], *inputs)
        compiled, memory, compile_s = _compile(layers[kind], causal, arguments)
        if memory["total"] > settings["max_memory_gb"] * 2**30:
            reason = f"planned memory {memory['total'] / 2**30:.2f} GiB > --max_memory_gb={settings['max_memory_gb']}"
            stopped[kind] = f"{reason} at L={length}"
            rows[kind] = _row(kind, causal, length, skipped=reason, bytes=memory["total"], memory=memory,
                              compile_s=compile_s)
            continue
        warmup_s = seconds_per_call(compiled, arguments, 1)  # sets `calls`
        candidates.append(Candidate(kind, compiled, arguments, memory, compile_s, warmup_s,
                                    settings["max_seconds"], settings["repeats"]))
    for _ in range(settings["repeats"]):  # rounds alternate between the kinds
        for candidate in candidates:
            candidate.time_once()
    for candidate in candidates:
        ms = 1e3 * float(np.median(candidate.seconds))
        rows[candidate.kind] = _row(
            candidate.kind, causal, length, ms=ms, ms_repeats=[1e3 * s for s in candidate.seconds],
            calls_per_timing=candidate.calls, bytes=candidate.memory["total"], memory=candidate.memory,
            compile_s=candidate.compile_s)
        slowest = max(ms / 1e3, candidate.warmup_s)
        if slowest > settings["max_seconds"]:
            stopped[candidate.kind] = f"forward+backward {slowest:.2f} s > --max_seconds={settings['max_seconds']} at L={length}"
    return [rows[kind] for kind in kinds]


def measure(kinds: list[str], lengths: list[int], settings: dict, log=print) -> dict:
    """Every kind x mode x length as rows; `settings` holds batch, heads, head_dim, num_features, repeats,
    max_seconds, max_memory_gb and seed."""
    options = {kind: kind_options(kind, settings["num_features"]) for kind in kinds}
    layers = {kind: build_layer(kind, settings["heads"], settings["head_dim"], options[kind]) for kind in kinds}
    rows, started = [], time.perf_counter()
    for mode, causal in MODES.items():
        stopped = {}
        for length in lengths:
            measured = measure_length(kinds, layers, causal, length, settings, stopped)
            rows.extend(measured)
            log(f"[{time.perf_counter() - started:6.1f} s] {mode} L={length}: " + ", ".join(map(_brief, measured)))
    return {"machine": machine(), "settings": {**settings, "kinds": kinds, "lengths": lengths},
            "options": options, "feature_dim": {kind: _feature_dim(layers[kind]) for kind in kinds},
            "rows": rows, "elapsed_s": time.perf_counter() - started}


def _feature_dim(layer) -> int | None:
    graphdef, state = layer
    return None if graphdef is None else nnx.merge(graphdef, state).feature_dim


def _brief(row: dict) -> str:
    if row["ms"] is None:
        return f"{row['kind']} skipped"
    return f"{row['kind']} {row['ms']:.2f} ms {row['bytes'] / MIB:.1f} MiB"


def machine() -> dict:
    device = jax.devices()[0]
    return {"platform": device.platform, "device": device.device_kind, "device_count": jax.device_count(),
            "cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "jax": jax.__version__}


# --- reports -------------------------------------------------------------------------------------------------


def _lookup(result: dict) -> dict:
    """(mode, kind, length) -> row."""
    causal_to_mode = {causal: mode for mode, causal in MODES.items()}
    return {(causal_to_mode[row["causal"]], row["kind"], row["length"]): row for row in result["rows"]}


def _ratio(numerator: dict | None, denominator: dict | None) -> float | None:
    if numerator is None or denominator is None or numerator["ms"] is None or denominator["ms"] is None:
        return None
    return numerator["ms"] / denominator["ms"]


def _ratio_columns(kinds: list[str]) -> list[tuple[str, str]]:
    """The (numerator, denominator) ratios the table can show: softmax over linear and over the reference."""
    return [(a, b) for a, b in (("softmax", "linear"), ("softmax", REFERENCE)) if a in kinds and b in kinds]


def summary(result: dict, mode: str) -> str:
    """Crossover (smallest L at which linear is faster than softmax) and softmax/linear at L=8192."""
    kinds, lengths = result["settings"]["kinds"], result["settings"]["lengths"]
    if "softmax" not in kinds or "linear" not in kinds:
        return f"{mode}: no crossover: needs both softmax and linear in --kinds"
    rows = _lookup(result)
    both = [(length, _ratio(rows[mode, "softmax", length], rows[mode, "linear", length])) for length in lengths]
    both = [(length, ratio) for length, ratio in both if ratio is not None]
    if not both:
        return f"{mode}: no length with both softmax and linear measured"
    faster = [length for length, ratio in both if ratio > 1]
    crossover = (f"linear faster than softmax from L={faster[0]} (crossover)" if faster
                 else f"linear not faster than softmax up to L={both[-1][0]}")
    at_8k = dict(both).get(8192)
    return f"{mode}: {crossover}; softmax/linear at L=8192: " + ("not measured" if at_8k is None else f"{at_8k:.2f}x")


def _cell(row: dict | None, field: str, scale: float) -> str:
    if row is None or row["ms"] is None:
        return "skip"
    return f"{row[field] / scale:.2f}"


def table(result: dict, mode: str, field: str = "ms") -> str:
    """Markdown: a row per length, a column per kind (ms, or MiB when field is "bytes"), then the ratios."""
    kinds, lengths = result["settings"]["kinds"], result["settings"]["lengths"]
    rows = _lookup(result)
    unit, scale = ("ms", 1.0) if field == "ms" else ("MiB", MIB)
    ratios = _ratio_columns(kinds) if field == "ms" else []
    header = ["L", *(f"{kind} {unit}" for kind in kinds), *(f"{a}/{b}" for a, b in ratios)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for length in lengths:
        cells = [f"{length:,}", *(_cell(rows.get((mode, kind, length)), field, scale) for kind in kinds)]
        for a, b in ratios:
            ratio = _ratio(rows[mode, a, length], rows[mode, b, length])
            cells.append("-" if ratio is None else f"{ratio:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _skip_notes(result: dict, mode: str) -> list[str]:
    """The first skip of each kind in a mode, with its reason (the later ones follow from it)."""
    notes = {}
    for (row_mode, kind, _), row in _lookup(result).items():
        if row_mode == mode and row["skipped"] and kind not in notes:
            notes[kind] = f"- {kind} skipped from L={row['length']:,}: {row['skipped']}"
    return list(notes.values())


def markdown(result: dict) -> str:
    s = result["settings"]
    m = result["machine"]
    lines = ["# One attention layer, forward+backward (grad w.r.t. q, k, v)\n",
             f"B={s['batch']}, H={s['heads']}, D={s['head_dim']}, float32; median of {s['repeats']} timings; "
             f"{m['platform']} ({m['device']}), {m['cpu_count']} CPUs, jax {m['jax']}. "
             f"`{REFERENCE}` is `jax.nn.dot_product_attention`. Memory is XLA's planned buffer size "
             f"(temp + arguments + outputs), not RSS.\n"]
    for mode in MODES:
        lines += [f"## {mode}\n", "Time (ms):\n", table(result, mode), "", "Planned memory (MiB):\n",
                  table(result, mode, "bytes"), ""]
        lines += _skip_notes(result, mode) + ["", f"**{summary(result, mode)}**", ""]
    return "\n".join(lines)


def plot(result: dict, path: str) -> str:
    """Log-log time against L, a line per kind; panels bidirectional and causal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _lookup(result)
    fig, axes = plt.subplots(1, len(MODES), figsize=(11, 4.2), sharey=True, squeeze=False, layout="constrained")
    for ax, mode in zip(axes[0], MODES):
        for kind in result["settings"]["kinds"]:
            points = [(length, rows[mode, kind, length]["ms"]) for length in result["settings"]["lengths"]
                      if rows[mode, kind, length]["ms"] is not None]
            if points:
                label = "reference (jax.nn.dot_product_attention)" if kind == REFERENCE else kind
                ax.plot(*zip(*points), marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(mode)
        ax.set_xlabel("sequence length L")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    axes[0, 0].set_ylabel("forward+backward ms")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_reports(result: dict, out: str, stem: str = "attention", to_markdown=markdown, to_plot=plot) -> list[str]:
    """<out>/<stem>.json, .md and .png of a benchmark's result (bench_decode passes its own writers)."""
    os.makedirs(out, exist_ok=True)
    paths = [os.path.join(out, f"{stem}.{extension}") for extension in ("json", "md", "png")]
    with open(paths[0], "w") as f:
        json.dump(result, f, indent=1)
    with open(paths[1], "w") as f:
        f.write(to_markdown(result))
    to_plot(result, paths[2])
    return paths


# --- command line ------------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default=DEFAULT_KINDS,
                        help=f"comma-separated registered kinds and/or '{REFERENCE}' (jax.nn.dot_product_attention)")
    parser.add_argument("--lengths", default=DEFAULT_LENGTHS, help="comma-separated sequence lengths")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head_dim", type=int, default=64)
    parser.add_argument("--num_features", type=int, default=64, help="for the kinds that take it (performer)")
    parser.add_argument("--repeats", type=int, default=5, help="timings per measurement; the median is kept")
    parser.add_argument("--max_seconds", type=float, default=10.0,
                        help="a kind slower than this per forward+backward skips its larger lengths")
    parser.add_argument("--max_memory_gb", type=float, default=8.0,
                        help="a kind whose planned memory exceeds this (GiB) is skipped from that length on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="reports/bench")
    args = parser.parse_args(argv)
    for name in ("batch", "heads", "head_dim", "num_features", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    kinds, lengths = parse_kinds(args.kinds), parse_lengths(args.lengths)
    settings = {name: getattr(args, name) for name in
                ("batch", "heads", "head_dim", "num_features", "repeats", "max_seconds", "max_memory_gb", "seed")}
    result = measure(kinds, lengths, settings)
    paths = write_reports(result, args.out)
    for mode in MODES:
        print(f"\n{mode} (ms):\n{table(result, mode)}")
    print()
    for mode in MODES:
        print(summary(result, mode))
    print(f"{len(result['rows'])} measurements in {result['elapsed_s']:.0f} s; written: {', '.join(paths)}")
    return result


if __name__ == "__main__":
    main()
