"""One attention layer's forward+backward time and planned memory by sequence length: the measurement and
reports of `python -m scripts.bench_attention`, whose docstring (its --help) states the method. Its
measure_length times any labelled layers, so benchmarks/chunks.py times configured kinds with it."""
import contextlib
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import attention
from attention import fused
from benchmarks import roofline
from benchmarks.common import calls_per_timing, machine, machine_text, parse_lengths, seconds_per_call, write_reports

REFERENCE = "reference"  # jax.nn.dot_product_attention, not a registered kind
MASKS = ("none", "padding")  # no mask; right padding of the keys
# Mode name -> (causal, masked): the panels of the plot, the sections of the markdown.
MODES = {"bidirectional": (False, False), "causal": (True, False),
         "bidirectional + padding": (False, True), "causal + padding": (True, True)}
MIB = 2**20
VARIANT = ":"  # a column `kind:implementation`: a kind with that value of its implementation option
IMPLEMENTATION_OPTIONS = ("softmax_implementation", "kernelized_implementation")  # a kind reads one at most
# The flags (scripts/command_line.py) that are settings of a measurement, as bench_chunks shares them.
SETTINGS = ("batch", "heads", "head_dim", "num_features", "dtype", "implementation", "repeats", "max_seconds",
            "max_memory_gb", "seed")


# --- arguments ---------------------------------------------------------------------------------------------


def parse_kinds(text: str) -> list[str]:
    """Comma-separated kinds, checked against the registry before anything compiles."""
    kinds = [kind.strip() for kind in text.split(",") if kind.strip()]
    known = attention.names()
    unknown = [kind for kind in kinds if kind != REFERENCE and kind_of(kind) not in known]
    if unknown or not kinds:
        raise SystemExit(f"--kinds: unknown {unknown or '(empty)'}; known: {', '.join(known)}, {REFERENCE}")
    if len(set(kinds)) != len(kinds):
        raise SystemExit(f"--kinds: {text!r} names a kind twice")
    if reading := [kind for kind in kinds if kind != REFERENCE
                   and getattr(attention.registry.get(kind_of(kind)), "reads_inputs", False)]:
        raise SystemExit(f"--kinds: {', '.join(reading)} read the layer's input x beside q, k and v, which this "
                         f"benchmark does not build; time them in a model: python -m scripts.bench_train "
                         f"--configs=configs/mlm.py --overrides=attention.name={reading[0]}")
    return kinds


def kind_of(label: str) -> str:
    """The registered kind of a column's label (`kind` or `kind:implementation`)."""
    return label.split(VARIANT)[0]


def variant_options(label: str) -> dict:
    """The options a label sets beyond the benchmark's: the kind's implementation option for
    `kind:implementation` (e.g. `linear:autodiff`, kernelized_implementation=autodiff, beside `linear`)."""
    parts = label.split(VARIANT)
    if len(parts) == 1:
        return {}
    options = [option for option in IMPLEMENTATION_OPTIONS if option in attention.options(parts[0])]
    if len(parts) > 2 or not options:
        raise SystemExit(f"--kinds: {label!r}: a variant is kind{VARIANT}implementation, for a kind that "
                         f"takes {' or '.join(IMPLEMENTATION_OPTIONS)}")
    return {options[0]: parts[1]}


def parse_masks(text: str) -> list[str]:
    masks = [mask.strip() for mask in text.split(",") if mask.strip()]
    if not masks or set(masks) - set(MASKS):
        raise SystemExit(f"--masks: {text!r} is not a comma-separated subset of {', '.join(MASKS)}")
    return [mask for mask in MASKS if mask in masks]


def kind_options(kind: str, num_features: int, implementation: str = "auto") -> dict:
    """The bench's options for `kind`: --num_features and --implementation (softmax_implementation) for the
    kinds that take them, defaults otherwise (a kernelised kind's kernelized_implementation: auto)."""
    if kind == REFERENCE:
        return {}
    candidates = {"num_features": num_features, "softmax_implementation": implementation}
    return {**attention.select_options(kind_of(kind), candidates), **variant_options(kind)}


def modes(masks: list[str]) -> dict:
    """The modes (name -> (causal, masked)) that --masks asks for, in MODES' order."""
    return {name: mode for name, mode in MODES.items() if MASKS[mode[1]] in masks}


def mode_name(causal: bool, masked: bool) -> str:
    return next(name for name, mode in MODES.items() if mode == (causal, masked))


def selected_implementation(implementation: str, settings: dict) -> str:
    """"xla" or "cudnn": what softmax (and so the reference) runs for --implementation on these inputs,
    masked by key padding or not (cuDNN takes both). SystemExit, one line, where "cudnn" cannot run."""
    shape = jax.ShapeDtypeStruct((settings["batch"], 1, settings["heads"], settings["head_dim"]),
                                 jnp.dtype(settings["dtype"]))
    reason = fused.cudnn_unsupported(shape, shape, None, causal_narrowed=False)
    if implementation == "cudnn" and reason is not None:
        raise SystemExit(f"--implementation=cudnn cannot run here: {reason}")
    return fused.select(implementation, shape, shape, None, causal_narrowed=False)


# --- the measured program ------------------------------------------------------------------------------------


def in_dtype(tree, dtype):
    """The floating arrays of `tree` cast to `dtype`, as the training step casts its parameters."""
    dtype = jnp.dtype(dtype)
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def build_layer(kind: str, heads: int, head_dim: int, options: dict, dtype="float32"):
    """(graphdef, state) of the kind's module, its floating state in `dtype`; (None, {}) for the
    reference, which has no state."""
    if kind == REFERENCE:
        return None, {}
    module = attention.create(kind_of(kind), num_heads=heads, head_dim=head_dim, rngs=nnx.Rngs(0), **options)
    graphdef, state = nnx.split(module)
    return graphdef, in_dtype(state, dtype)


def gradient_program(graphdef, causal: bool, reference_implementation: str | None = None, program: str = "grad"):
    """jit of (state, q, k, v, cotangent, padding) -> d sum(out * cotangent) / d(q, k, v), or, for `program`
    "value_and_grad", (sum(out * cotangent), that gradient).

    `padding` is None (no mask), a kind's key mask [B, 1, 1, L] (boolean) or the reference's key lengths
    [B] (int32); the reference runs `reference_implementation` (None: jax's default, XLA)."""

    def attend(state, q, k, v, padding):
        if graphdef is None:
            return jax.nn.dot_product_attention(q, k, v, is_causal=causal, key_value_seq_lengths=padding,
                                                implementation=reference_implementation)
        return nnx.merge(graphdef, state)(q, k, v, mask=padding, causal=causal)

    def loss(q, k, v, state, cotangent, padding):
        return jnp.sum(attend(state, q, k, v, padding) * cotangent)

    grad = getattr(jax, program)(loss, argnums=(0, 1, 2))
    return jax.jit(lambda state, q, k, v, cotangent, padding: grad(q, k, v, state, cotangent, padding))


def planned_memory(compiled) -> dict:
    """XLA's planned buffer bytes of a compiled program (not RSS): its parts and their total."""
    stats = compiled.memory_analysis()
    parts = {"temp": stats.temp_size_in_bytes, "argument": stats.argument_size_in_bytes,
             "output": stats.output_size_in_bytes, "alias": stats.alias_size_in_bytes}
    # Aliased bytes are an argument buffer reused for an output: counted once.
    return {**parts, "total": parts["temp"] + parts["argument"] + parts["output"] - parts["alias"]}


def random_inputs(key, batch: int, length: int, heads: int, head_dim: int, dtype="float32"):
    """q, k, v and the output cotangent, each [B, L, H, D] standard normal in `dtype`."""
    return tuple(jax.random.normal(part, (batch, length, heads, head_dim), jnp.dtype(dtype))
                 for part in jax.random.split(key, 4))


def valid_keys(length: int, padding: float) -> int:
    """Keys left unmasked when the last `padding` fraction of `length` keys is padding (at least one)."""
    return max(1, length - round(padding * length))


def padding_inputs(batch: int, length: int, padding: float) -> dict:
    """The same right padding as a kind's key mask [B, 1, 1, L] and as the reference's key lengths [B]."""
    valid = valid_keys(length, padding)
    mask = jnp.broadcast_to(jnp.arange(length) < valid, (batch, 1, 1, length))
    return {"mask": mask, "lengths": jnp.full((batch,), valid, jnp.int32)}


# --- the sweep -------------------------------------------------------------------------------------------------


class Candidate:
    """One kind at one length in one mode, compiled and warmed up, waiting for its timing rounds."""

    def __init__(self, kind, program, arguments, memory, compile_s, warmup_s, max_seconds, repeats, work):
        self.kind, self.program, self.arguments = kind, program, arguments
        self.memory, self.compile_s, self.warmup_s = memory, compile_s, warmup_s
        self.calls = calls_per_timing(warmup_s)
        # Already over budget once: one more call is the measurement, not `repeats` more.
        self.repeats = 1 if warmup_s > max_seconds else repeats
        self.seconds = []
        # FLOPs and bytes of XLA's cost analysis, each loop's body counted once per trip (benchmarks/roofline.py).
        self.flops, self.bytes_accessed = work["flops"], work["bytes"]

    def time_once(self):
        if len(self.seconds) < self.repeats:
            self.seconds.append(seconds_per_call(self.program, self.arguments, self.calls))


def _row(kind, causal, length, masked=False, **fields) -> dict:
    row = {"kind": kind, "causal": causal, "masked": masked, "length": length, "valid_keys": None, "ms": None,
           "ms_repeats": [], "calls_per_timing": None, "bytes": None, "memory": None, "flops": None,
           "bytes_accessed": None, "compile_s": None, "skipped": None}
    return {**row, **fields}


def _compile(layer, causal, arguments, settings, traced_in=None):
    """(compiled program, its planned memory, compile seconds, its FLOPs and bytes with each loop's body counted
    once per trip: benchmarks/roofline.py) of one kind at one length, traced inside `traced_in()` if given."""
    graphdef, _ = layer

    def compile_program():
        with traced_in() if traced_in else contextlib.nullcontext():
            program = gradient_program(graphdef, causal, settings.get("reference_implementation"),
                                       settings.get("program", "grad"))
            return program.lower(*arguments).compile()

    started = time.perf_counter()
    compiled = compile_program()
    compile_s = time.perf_counter() - started
    work = roofline.loop_aware_cost(compile_program, roofline.trips(layer, causal, arguments[1].shape[1]), compiled)
    return compiled, planned_memory(compiled), compile_s, work


def measure_length(kinds, layers, causal, length, settings, stopped: dict, masked: bool = False,
                   traced_in: dict | None = None) -> list[dict]:
    """Rows of every kind at one length in one mode; updates `stopped` (kind -> reason) for larger ones.

    `kinds` are labels of `layers` (a registered kind, the reference, or any label benchmarks/chunks.py or
    linear_paths.py gives a configured kind); `traced_in` maps a label to a context manager its program is
    traced in. settings["reference_implementation"], if set, is what the reference runs; settings["program"]
    is what is timed (gradient_program's: "grad" by default)."""
    dtype = settings.get("dtype", "float32")
    key = jax.random.fold_in(jax.random.key(settings["seed"]), length)
    inputs = random_inputs(key, settings["batch"], length, settings["heads"], settings["head_dim"], dtype)
    padding = padding_inputs(settings["batch"], length, settings.get("padding", 0.1)) if masked else None
    valid = valid_keys(length, settings.get("padding", 0.1)) if masked else None
    rows, candidates, common = {}, [], {"masked": masked, "valid_keys": valid}
    for kind in kinds:
        if kind in stopped:
            rows[kind] = _row(kind, causal, length, skipped=stopped[kind], **common)
            continue
        graphdef = layers[kind][0]
        kind_padding = None if padding is None else padding["lengths" if graphdef is None else "mask"]
        arguments = (layers[kind][1], *inputs, kind_padding)
        compiled, memory, compile_s, work = _compile(layers[kind], causal, arguments, settings,
                                                     (traced_in or {}).get(kind))
        if memory["total"] > settings["max_memory_gb"] * 2**30:
            reason = f"planned memory {memory['total'] / 2**30:.2f} GiB > --max_memory_gb={settings['max_memory_gb']}"
            stopped[kind] = f"{reason} at L={length}"
            rows[kind] = _row(kind, causal, length, skipped=reason, bytes=memory["total"], memory=memory,
                              compile_s=compile_s, **common)
            continue
        warmup_s = seconds_per_call(compiled, arguments, 1)  # sets `calls`
        candidates.append(Candidate(kind, compiled, arguments, memory, compile_s, warmup_s,
                                    settings["max_seconds"], settings["repeats"], work))
    for _ in range(settings["repeats"]):  # rounds alternate between the kinds
        for candidate in candidates:
            candidate.time_once()
    rows.update(_timed_rows(candidates, causal, length, settings, stopped, common))
    return [rows[kind] for kind in kinds]


def _timed_rows(candidates, causal, length, settings, stopped: dict, common: dict) -> dict:
    """kind -> row of each timed candidate; a kind over --max_seconds is stopped."""
    rows = {}
    for candidate in candidates:
        ms = 1e3 * float(np.median(candidate.seconds))
        rows[candidate.kind] = _row(
            candidate.kind, causal, length, ms=ms, ms_repeats=[1e3 * s for s in candidate.seconds],
            calls_per_timing=candidate.calls, bytes=candidate.memory["total"], memory=candidate.memory,
            flops=candidate.flops, bytes_accessed=candidate.bytes_accessed, compile_s=candidate.compile_s, **common)
        slowest = max(ms / 1e3, candidate.warmup_s)
        if slowest > settings["max_seconds"]:
            stopped[candidate.kind] = (f"forward+backward {slowest:.2f} s > --max_seconds={settings['max_seconds']} "
                                       f"at L={length}")
    return rows


def measure_modes(kinds, layers, lengths: list[int], modes_measured: dict, settings: dict, log=print,
                  traced_in: dict | None = None) -> dict:
    """Every labelled layer x mode (name -> (causal, masked)) x length, timed in alternating rounds between this
    machine's rates measured before and after: {"rates", "run_rates", "rows"}, each row against its
    roofline (benchmarks/roofline.py)."""
    rows, started, rates = [], time.perf_counter(), [roofline.machine_rates(settings.get("dtype", "float32"))]
    for mode, (causal, masked) in modes_measured.items():
        stopped = {}
        for length in lengths:
            measured = measure_length(kinds, layers, causal, length, settings, stopped, masked, traced_in)
            rows.extend(measured)
            log(f"[{time.perf_counter() - started:6.1f} s] {mode} L={length}: " + ", ".join(map(brief, measured)))
    rates.append(roofline.machine_rates(settings.get("dtype", "float32")))
    return {"rates": rates, "run_rates": roofline.annotate(rows, rates), "rows": rows}


def measure(kinds: list[str], lengths: list[int], settings: dict, log=print) -> dict:
    """Every kind x mode x length as rows; `settings` holds batch, heads, head_dim, num_features, repeats,
    max_seconds, max_memory_gb, seed and, optional, dtype ("float32"), implementation ("auto"), masks
    (["none"]) and padding (0.1)."""
    settings = {"dtype": "float32", "implementation": "auto", "masks": ["none"], "padding": 0.1, **settings}
    selected = selected_implementation(settings["implementation"], settings)
    settings["reference_implementation"] = selected
    options = {kind: kind_options(kind, settings["num_features"], settings["implementation"]) for kind in kinds}
    layers = {kind: build_layer(kind, settings["heads"], settings["head_dim"], options[kind], settings["dtype"])
              for kind in kinds}
    started = time.perf_counter()
    measured = measure_modes(kinds, layers, lengths, modes(settings["masks"]), settings, log)
    return {"machine": machine(), "settings": {**settings, "kinds": kinds, "lengths": lengths},
            "options": options, "feature_dim": {kind: feature_dim(layers[kind]) for kind in kinds},
            **measured, "elapsed_s": time.perf_counter() - started}


def feature_dim(layer) -> int | None:
    """The feature dimension m of a layer of `build_layer` (None for the softmax family and the reference)."""
    graphdef, state = layer
    return None if graphdef is None else nnx.merge(graphdef, state).feature_dim


def brief(row: dict) -> str:
    """A row as the progress line shows it."""
    if row["ms"] is None:
        return f"{row['kind']} skipped"
    return f"{row['kind']} {row['ms']:.2f} ms {row['bytes'] / MIB:.1f} MiB"


# --- reports -------------------------------------------------------------------------------------------------


def _lookup(result: dict) -> dict:
    """(mode, kind, length) -> row. Rows without "masked" (results written before the masked modes)
    are unmasked."""
    return {(mode_name(row["causal"], row.get("masked", False)), row["kind"], row["length"]): row
            for row in result["rows"]}


def result_modes(result: dict) -> list[str]:
    """The modes a result measured, in MODES' order."""
    measured = {mode_name(row["causal"], row.get("masked", False)) for row in result["rows"]}
    return [mode for mode in MODES if mode in measured]


def _ratio(numerator: dict | None, denominator: dict | None) -> float | None:
    if numerator is None or denominator is None or numerator["ms"] is None or denominator["ms"] is None:
        return None
    return numerator["ms"] / denominator["ms"]


def _ratio_columns(kinds: list[str]) -> list[tuple[str, str]]:
    """The (numerator, denominator) ratios the table can show: softmax over linear and over the reference."""
    return [(a, b) for a, b in (("softmax", "linear"), ("softmax", REFERENCE)) if a in kinds and b in kinds]


def _ratio_header(a: str, b: str, mode: str) -> str:
    if b == REFERENCE and not MODES[mode][1]:
        return f"{a}/{b} (same call)"  # no mask: our softmax makes the reference's call, ~1.0 by construction
    return f"{a}/{b}"


def summary(result: dict, mode: str) -> str:
    """Crossover (smallest L at which linear is faster than softmax) and softmax/linear at L=8192."""
    kinds, lengths = result["settings"]["kinds"], result["settings"]["lengths"]
    if "softmax" not in kinds or "linear" not in kinds:
        return f"{mode}: no crossover: needs both softmax and linear in --kinds"
    rows = _lookup(result)
    both = [(length, _ratio(rows.get((mode, "softmax", length)), rows.get((mode, "linear", length))))
            for length in lengths]
    both = [(length, ratio) for length, ratio in both if ratio is not None]
    if not both:
        return f"{mode}: no length with both softmax and linear measured"
    faster = [length for length, ratio in both if ratio > 1]
    crossover = (f"linear faster than softmax from L={faster[0]} (crossover)" if faster
                 else f"linear not faster than softmax up to L={both[-1][0]}")
    at_8k = dict(both).get(8192)
    return f"{mode}: {crossover}; softmax/linear at L=8192: " + ("not measured" if at_8k is None else f"{at_8k:.2f}x")


def reference_summary(result: dict, mode: str) -> str | None:
    """softmax/reference over the lengths of a masked mode (what our masked path costs), or None."""
    if not MODES[mode][1] or not {"softmax", REFERENCE} <= set(result["settings"]["kinds"]):
        return None
    rows = _lookup(result)
    ratios = [(length, _ratio(rows.get((mode, "softmax", length)), rows.get((mode, REFERENCE, length))))
              for length in result["settings"]["lengths"]]
    ratios = [(length, ratio) for length, ratio in ratios if ratio is not None]
    if not ratios:
        return f"{mode}: softmax/reference: no length with both measured"
    low, high = min(ratio for _, ratio in ratios), max(ratio for _, ratio in ratios)
    return (f"{mode}: softmax/reference (key padding) {low:.2f}-{high:.2f}x over L={ratios[0][0]}.."
            f"{ratios[-1][0]}, at L={ratios[-1][0]}: {ratios[-1][1]:.2f}x")


def _cell(row: dict | None, field: str, scale: float) -> str:
    if row is None or row["ms"] is None:
        return "skip"
    return "-" if row.get(field) is None else f"{row[field] / scale:.2f}"


def table(result: dict, mode: str, field: str = "ms") -> str:
    """Markdown: a row per length, a column per kind (ms, MiB when field is "bytes", the time over the
    roofline for "over_roofline"), then the ratios."""
    kinds, lengths = result["settings"]["kinds"], result["settings"]["lengths"]
    rows = _lookup(result)
    unit, scale = {"ms": ("ms", 1.0), "bytes": ("MiB", MIB), "over_roofline": ("x roofline", 1.0)}[field]
    ratios = _ratio_columns(kinds) if field == "ms" else []
    header = ["L", *(f"{kind} {unit}" for kind in kinds), *(_ratio_header(a, b, mode) for a, b in ratios)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for length in lengths:
        cells = [f"{length:,}", *(_cell(rows.get((mode, kind, length)), field, scale) for kind in kinds)]
        for a, b in ratios:
            ratio = _ratio(rows.get((mode, a, length)), rows.get((mode, b, length)))
            cells.append("-" if ratio is None else f"{ratio:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def roofline_summary(result: dict) -> str:
    """Markdown: a row per mode and length, a column per kind, its ms and (in brackets) its time over its
    roofline, then softmax/linear: the yardstick of a run that measured the machine's rates."""
    kinds, rows = result["settings"]["kinds"], _lookup(result)
    ratios = [(a, b) for a, b in _ratio_columns(kinds) if b != REFERENCE]
    header = ["mode", "L", *(f"{kind} ms (x roofline)" for kind in kinds), *(f"{a}/{b}" for a, b in ratios)]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for mode in result_modes(result):
        for length in result["settings"]["lengths"]:
            cells = [mode, f"{length:,}"]
            for kind in kinds:
                row = rows.get((mode, kind, length))
                measured = row is not None and row["ms"] is not None
                over = "-" if not measured or row.get("over_roofline") is None else f"{row['over_roofline']:.1f}"
                cells.append(f"{row['ms']:,.1f} ({over})" if measured else "skip")
            for a, b in ratios:
                ratio = _ratio(rows.get((mode, a, length)), rows.get((mode, b, length)))
                cells.append("-" if ratio is None else f"{ratio:.1f}x")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _skip_notes(result: dict, mode: str) -> list[str]:
    """The first skip of each kind in a mode, with its reason (the later ones follow from it)."""
    notes = {}
    for (row_mode, kind, _), row in _lookup(result).items():
        if row_mode == mode and row["skipped"] and kind not in notes:
            notes[kind] = f"- {kind} skipped from L={row['length']:,}: {row['skipped']}"
    return list(notes.values())


def _mode_note(result: dict, mode: str) -> str:
    settings = result["settings"]
    if MODES[mode][1]:
        return (f"The last {settings.get('padding', 0.1):.0%} of the keys are padding: every kind gets the "
                f"boolean mask [B, 1, 1, L], `{REFERENCE}` the same padding as `key_value_seq_lengths`.\n")
    return (f"No mask: softmax makes the same `jax.nn.dot_product_attention` call as `{REFERENCE}`, so "
            f"softmax/{REFERENCE} is a sanity check (~1.0 by construction), not a comparison.\n")


def markdown(result: dict) -> str:
    s = result["settings"]
    m = result["machine"]
    dtype = s.get("dtype", "float32")
    implementation = (f"`--implementation={s['implementation']}` (softmax and `{REFERENCE}` run "
                      f"{s['reference_implementation']}); " if "implementation" in s else "")
    lines = ["# One attention layer, forward+backward (grad w.r.t. q, k, v)\n",
             f"B={s['batch']}, H={s['heads']}, D={s['head_dim']}, {dtype}; {implementation}"
             f"median of {s['repeats']} timings; "
             f"{machine_text(m)}. "
             f"`{REFERENCE}` is `jax.nn.dot_product_attention`. Memory is XLA's planned buffer size "
             f"(temp + arguments + outputs), not RSS.\n"]
    if "rates" in result:  # a result measured before the yardstick has none
        lines.append(roofline.rates_text(result))
    for mode in result_modes(result):
        lines += [f"## {mode}\n", _mode_note(result, mode), "Time (ms):\n", table(result, mode), "",
                  "Planned memory (MiB):\n", table(result, mode, "bytes"), ""]
        if "rates" in result:
            lines += ["Time over the roofline (1.0: the machine's limit):\n", table(result, mode, "over_roofline"), ""]
        lines += _skip_notes(result, mode) + ["", f"**{summary(result, mode)}**", ""]
        if reference := reference_summary(result, mode):
            lines += [f"**{reference}**", ""]
    return "\n".join(lines)


def plot(result: dict, path: str) -> str:
    """Log-log time against L, a line per kind; a panel per mode (bidirectional and causal, a row per mask)."""
    from analysis import plots  # first: it sets the Agg backend
    import matplotlib.pyplot as plt

    rows = _lookup(result)
    measured = result_modes(result) or ["bidirectional", "causal"]
    grid = [[mode for mode in measured if MODES[mode][1] == masked] for masked in (False, True)]
    grid = [line for line in grid if line]
    columns = max(len(line) for line in grid)
    fig, axes = plt.subplots(len(grid), columns, figsize=(5.5 * columns, 4.2 * len(grid)), sharey=True,
                             squeeze=False, layout="constrained")
    for ax_row, line in zip(axes, grid):
        for ax, mode in zip(ax_row, line):
            for kind in result["settings"]["kinds"]:
                points = [(length, rows[mode, kind, length]["ms"]) for length in result["settings"]["lengths"]
                          if (mode, kind, length) in rows and rows[mode, kind, length]["ms"] is not None]
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
        ax_row[0].set_ylabel("forward+backward ms")
    return plots.save_figure(fig, path)


# --- the benchmark -------------------------------------------------------------------------------------------


def settings_of(options) -> dict:
    """The SETTINGS of the flags `options`."""
    return {name: getattr(options, name) for name in SETTINGS}


def run(options) -> dict:
    """The benchmark as the flags of scripts/bench_attention.py (`options`) ask: measured, written under
    options.out (attention.json, .md and .png), its tables and summaries printed; returns the result."""
    kinds, lengths, masks = parse_kinds(options.kinds), parse_lengths(options.lengths), parse_masks(options.masks)
    result = measure(kinds, lengths, {**settings_of(options), "masks": masks, "padding": options.padding})
    paths = write_reports(result, options.out, "attention", markdown, plot)
    for mode in result_modes(result):
        print(f"\n{mode} (ms):\n{table(result, mode)}")
    print(f"\nms (x roofline):\n{roofline_summary(result)}\n")
    for mode in result_modes(result):
        print(summary(result, mode))
        if reference := reference_summary(result, mode):
            print(reference)
    print(f"{len(result['rows'])} measurements in {result['elapsed_s']:.0f} s; written: {', '.join(paths)}")
    return result
