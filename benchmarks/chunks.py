"""Causal linear attention's chunk size against softmax, forward+backward: the measurement and reports of
`python -m scripts.bench_chunks`, whose docstring (its --help) states the method. Timing, warm-up, medians
and budgets are benchmarks/attention.py's."""
import time

import jax

import attention
from attention.ops import chunking
from benchmarks.attention import (brief, build_layer, feature_dim, kind_options, measure_length, parse_kinds,
                                  selected_implementation, settings_of)
from benchmarks.common import machine, machine_text, parse_ints, parse_lengths, write_reports

SOFTMAX = "softmax"


def label(kind: str, chunk_size: int) -> str:
    return f"{kind} C={chunk_size or 'auto'}"


def flop_limit(length: int, feature_dim: int, chunk: int) -> float:
    """L / (m + C/2): softmax's multiply-adds (the whole L x L matrix) over causal linear attention's in
    chunks of C (the causal half of each block), with m = D = Dv."""
    return length / (feature_dim + chunk / 2)


def effective_chunk(chunk_size: int, length: int, platform: str) -> int:
    """The chunk the kinds run at this length: C, or the auto size for 0, never more than L."""
    return min(chunk_size or chunking.chunk_size_for(platform, length), length)


def measure(kinds: list[str], chunk_sizes: list[int], lengths: list[int], settings: dict, log=print) -> dict:
    """Causal softmax and every (kind, chunk size) at every length, timed in alternating rounds."""
    settings = {"dtype": "float32", "implementation": "auto", **settings}
    settings["reference_implementation"] = selected_implementation(settings["implementation"], settings)
    labels, layers, columns = [SOFTMAX], {}, {}
    options = kind_options(SOFTMAX, settings["num_features"], settings["implementation"])
    layers[SOFTMAX] = build_layer(SOFTMAX, settings["heads"], settings["head_dim"], options, settings["dtype"])
    for kind in kinds:
        for chunk_size in chunk_sizes:
            options = {**kind_options(kind, settings["num_features"]), "chunk_size": chunk_size}
            name = label(kind, chunk_size)
            labels.append(name)
            columns[name] = {"kind": kind, "chunk_size": chunk_size, "options": options}
            layers[name] = build_layer(kind, settings["heads"], settings["head_dim"], options, settings["dtype"])
            columns[name]["feature_dim"] = feature_dim(layers[name])
    platform = jax.default_backend()
    rows, stopped, started = [], {}, time.perf_counter()
    for length in lengths:
        measured = measure_length(labels, layers, True, length, settings, stopped)
        for row in measured:
            if row["kind"] in columns:
                column = columns[row["kind"]]
                row.update(label=row["kind"], kind=column["kind"], chunk_size=column["chunk_size"],
                           chunk=effective_chunk(column["chunk_size"], length, platform))
            else:
                row.update(label=SOFTMAX, chunk_size=None, chunk=None)
        rows.extend(measured)
        log(f"[{time.perf_counter() - started:6.1f} s] causal L={length}: "
            + ", ".join(brief({**row, "kind": row["label"]}) for row in measured))
    return {"machine": machine(), "settings": {**settings, "kinds": kinds, "chunk_sizes": chunk_sizes,
                                               "lengths": lengths, "platform": platform},
            "columns": columns, "rows": rows, "elapsed_s": time.perf_counter() - started}


# --- reports -------------------------------------------------------------------------------------------------


def _by_label(result: dict) -> dict:
    return {(row["label"], row["length"]): row for row in result["rows"]}


def ratios(result: dict) -> list[dict]:
    """Per (kind, chunk size, length) measured with softmax: the time ratio softmax/linear, the FLOP
    limit L / (m + C/2), the ratio's fraction of it and XLA's counted FLOP ratio."""
    rows, out = _by_label(result), []
    for length in result["settings"]["lengths"]:
        softmax = rows.get((SOFTMAX, length))
        for name, column in result["columns"].items():
            row = rows.get((name, length))
            if softmax is None or row is None or softmax["ms"] is None or row["ms"] is None:
                continue
            ratio = softmax["ms"] / row["ms"]
            limit = flop_limit(length, column["feature_dim"], row["chunk"])
            # XLA's cost analysis does not see inside cuDNN's custom call: no counted ratio for it.
            countable = result["settings"].get("reference_implementation") != "cudnn"
            counted = softmax["flops"] / row["flops"] if countable and softmax["flops"] and row["flops"] else None
            out.append({"kind": column["kind"], "chunk_size": column["chunk_size"], "chunk": row["chunk"],
                        "length": length, "ms": row["ms"], "softmax_ms": softmax["ms"], "ratio": ratio,
                        "limit": limit, "of_limit": ratio / limit, "counted_flop_ratio": counted})
    return out


def best_chunks(result: dict) -> dict:
    """(kind, length) -> the fastest explicit chunk size's entry of `ratios` (auto, 0, is not a candidate)."""
    best = {}
    for entry in ratios(result):
        key = (entry["kind"], entry["length"])
        if entry["chunk_size"] and (key not in best or entry["ms"] < best[key]["ms"]):
            best[key] = entry
    return best


def table(result: dict, kind: str) -> str:
    """Markdown: a row per length; ms of softmax and of each chunk size, then the best chunk's ratios."""
    rows, best = _by_label(result), best_chunks(result)
    names = [name for name, column in result["columns"].items() if column["kind"] == kind]
    header = ["L", "softmax ms", *(f"C={result['columns'][name]['chunk_size'] or 'auto'} ms" for name in names),
              "best C", "softmax/linear", "limit L/(m+C/2)", "of limit", "counted FLOP ratio"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for length in result["settings"]["lengths"]:
        softmax = rows.get((SOFTMAX, length))
        cells = [f"{length:,}", "skip" if softmax is None or softmax["ms"] is None else f"{softmax['ms']:.2f}"]
        for name in names:
            row = rows.get((name, length))
            cells.append("skip" if row is None or row["ms"] is None else f"{row['ms']:.2f}")
        entry = best.get((kind, length))
        if entry is None:
            cells += ["-"] * 5
        else:
            counted = "-" if entry["counted_flop_ratio"] is None else f"{entry['counted_flop_ratio']:.1f}x"
            cells += [str(entry["chunk"]), f"{entry['ratio']:.1f}x", f"{entry['limit']:.1f}x",
                      f"{entry['of_limit']:.0%}", counted]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio_table(result: dict, kind: str) -> str:
    """Markdown: softmax/linear at each chunk size and length, with its fraction of L/(m+C/2)."""
    names = [name for name, column in result["columns"].items() if column["kind"] == kind]
    entries = {(entry["chunk_size"], entry["length"]): entry for entry in ratios(result) if entry["kind"] == kind}
    header = ["L", *(f"C={result['columns'][name]['chunk_size'] or 'auto'}" for name in names)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for length in result["settings"]["lengths"]:
        cells = [f"{length:,}"]
        for name in names:
            entry = entries.get((result["columns"][name]["chunk_size"], length))
            cells.append("-" if entry is None else f"{entry['ratio']:.1f}x ({entry['of_limit']:.0%})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    s, m = result["settings"], result["machine"]
    lines = ["# Causal linear attention: chunk size against softmax, forward+backward\n",
             f"B={s['batch']}, H={s['heads']}, D={s['head_dim']}, {s['dtype']}; softmax runs "
             f"{s['reference_implementation']} (`--implementation={s['implementation']}`); median of "
             f"{s['repeats']} timings; {machine_text(m)}. "
             f"The limit is softmax's multiply-adds over linear's, L / (m + C/2); the counted FLOP ratio is "
             f"XLA's cost analysis of the two programs (whole C x C blocks and the whole L x L matrix). "
             f"C=auto is attention/ops/chunking.py's size for {s['platform']}.\n"]
    for kind in s["kinds"]:
        lines += [f"## {kind}\n", "Time (ms) and the fastest chunk's ratio:\n", table(result, kind), "",
                  "softmax/linear per chunk size (fraction of its limit L/(m+C/2)):\n", ratio_table(result, kind), ""]
        skipped = [row for row in result["rows"] if row["skipped"] and row["kind"] in (kind, SOFTMAX)]
        seen = set()
        for row in skipped:
            if row["label"] not in seen:
                seen.add(row["label"])
                lines.append(f"- {row['label']} skipped from L={row['length']:,}: {row['skipped']}")
        lines.append("")
    return "\n".join(lines)


def plot(result: dict, path: str) -> str:
    """ms against chunk size, a line per length (and kind); softmax's time as a dashed line per length."""
    from analysis import plots  # first: it sets the Agg backend
    import matplotlib.pyplot as plt

    rows = _by_label(result)
    fig, ax = plt.subplots(figsize=(6.5, 4.2), layout="constrained")
    for length in result["settings"]["lengths"]:
        for kind in result["settings"]["kinds"]:
            points = [(column["chunk_size"], rows[name, length]["ms"]) for name, column in result["columns"].items()
                      if column["kind"] == kind and column["chunk_size"] and rows[name, length]["ms"] is not None]
            if points:
                ax.plot(*zip(*points), marker="o", label=f"{kind} L={length:,}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("chunk size C")
    ax.set_ylabel("causal forward+backward ms")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return plots.save_figure(fig, path)


# --- the benchmark -------------------------------------------------------------------------------------------


def run(options) -> dict:
    """The benchmark as the flags of scripts/bench_chunks.py (`options`) ask: measured, written under
    options.out (chunks.json, .md and .png), its tables printed; returns the result."""
    kinds = parse_kinds(options.kinds)
    if without := [kind for kind in kinds if "chunk_size" not in attention.options(kind)]:
        raise SystemExit(f"--kinds: {', '.join(without)} take no chunk_size (not kernelised)")
    chunk_sizes, lengths = parse_ints("--chunk_sizes", options.chunk_sizes, 0), parse_lengths(options.lengths)
    result = measure(kinds, chunk_sizes, lengths, settings_of(options))
    result["ratios"] = ratios(result)
    paths = write_reports(result, options.out, "chunks", markdown, plot)
    for kind in kinds:
        print(f"\n{kind} (ms):\n{table(result, kind)}\n\n{ratio_table(result, kind)}")
    print(f"{len(result['rows'])} measurements in {result['elapsed_s']:.0f} s; written: {', '.join(paths)}")
    return result
