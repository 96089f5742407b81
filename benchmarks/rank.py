"""Time of the rank analysis of a model's attention weights by sequence length, the device path against the
host path it replaced: the measurement and report of `python -m scripts.bench_rank`, whose docstring (its
--help) states the method."""
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from analysis import rank
from benchmarks.common import machine_text, parse_lengths, report_markdown, write_reports

ROLE = "encoder_self"  # any role: the analysis does not depend on which


def softmax_weights(key, layers: int, batch: int, heads: int, length: int, head_dim: int) -> jax.Array:
    """[layers, B, H, L, L] float32 softmax attention of standard-normal queries and keys."""
    q, k = jax.random.normal(key, (2, layers, batch, heads, length, head_dim), jnp.float32)
    return jax.block_until_ready(jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / np.sqrt(head_dim), axis=-1))


def new_path(weights, lengths) -> None:
    """Rank rows and mean spectrum as evaluation computes them now."""
    query, key = {ROLE: lengths}, {ROLE: lengths}
    spectra = rank.attention_spectra({ROLE: weights}, query, key)
    rank.summarize_attention(spectra, query, key, {ROLE: [None] * weights.shape[0]})
    rank.mean_spectrum(spectra[ROLE], lengths, lengths)


def old_path(weights, lengths) -> None:
    """The SVDs evaluation ran before: on the host, per example, once for the rows and once for the spectrum."""
    host = jax.device_get(weights)
    for _ in range(2):
        for e, length in enumerate(lengths):
            rank.singular_values(host[:, e, :, :length, :length])


def seconds(function, repeats: int, max_seconds: float) -> list[float]:
    """Timings of `function()`: --repeats after one untimed call, or that call alone if it was too long."""
    started = time.perf_counter()
    function()
    first = time.perf_counter() - started
    if first > max_seconds:
        return [first]
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        timings.append(time.perf_counter() - started)
    return timings


def extrapolated_old_seconds(weights) -> dict:
    """The old path's time from one matrix's SVD times the number it ran, plus the weights' transfer."""
    started = time.perf_counter()
    host = jax.device_get(weights)
    transfer = time.perf_counter() - started
    started = time.perf_counter()
    rank.singular_values(host[0, 0, 0])
    one_matrix = time.perf_counter() - started
    svds = 2 * int(np.prod(weights.shape[:3]))
    return {"transfer_s": transfer, "one_matrix_s": one_matrix, "old_extrapolated_s": transfer + svds * one_matrix}


def measure_length(length: int, settings: dict) -> dict:
    weights = softmax_weights(jax.random.key(settings["seed"]), settings["layers"], settings["batch"],
                              settings["heads"], length, settings["head_dim"])
    lengths = np.full(settings["batch"], length)
    timing = (settings["repeats"], settings["max_seconds"])
    new = seconds(lambda: new_path(weights, lengths), *timing)
    old = seconds(lambda: old_path(weights, lengths), *timing) if length <= settings["old_max_length"] else []
    row = {"length": length, "matrices": int(np.prod(weights.shape[:3])),
           "new_s": float(np.median(new)), "new_repeats": new,
           "old_s": float(np.median(old)) if old else None, "old_repeats": old,
           **extrapolated_old_seconds(weights)}
    row["speedup"] = (row["old_s"] or row["old_extrapolated_s"]) / row["new_s"]
    return row


def measure(lengths: list[int], settings: dict) -> dict:
    started = time.perf_counter()
    rows = []
    for length in lengths:
        rows.append(measure_length(length, settings))
        row = rows[-1]
        print(f"L={length:,}: new {_seconds_cell(row['new_s'])} s, old {_seconds_cell(row['old_s'])} s, "
              f"old extrapolated {_seconds_cell(row['old_extrapolated_s'])} s", flush=True)
    return {"machine": _machine(), "settings": {"lengths": lengths, **settings}, "rows": rows,
            "elapsed_s": time.perf_counter() - started}


def _machine() -> dict:
    device = jax.devices()[0]
    return {"platform": device.platform, "device": device.device_kind, "cpu_count": os.cpu_count(),
            "processor": platform.processor() or platform.machine(), "jax": jax.__version__,
            "numpy": np.__version__, "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")}


def _seconds_cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def table(result: dict) -> str:
    lines = ["| L | matrices | old, full (s) | old, extrapolated (s) | new (s) | old/new |",
             "|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        cells = [_seconds_cell(row[name]) for name in ("old_s", "old_extrapolated_s", "new_s")]
        lines.append(f"| {row['length']:,} | {row['matrices']} | {' | '.join(cells)} | {row['speedup']:.2g} |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    s, m = result["settings"], result["machine"]
    settings = (f"{s['layers']} layers, B={s['batch']}, H={s['heads']}, D={s['head_dim']}, softmax weights, float32; "
                f"median of {s['repeats']} timings (one timing above {s['max_seconds']:g} s); {machine_text(m)}, "
                f"numpy {m['numpy']}, OpenBLAS threads {m['openblas_threads']}. old/new uses the full old time "
                f"where measured (L <= {s['old_max_length']:,}), else the extrapolated one.")
    return report_markdown("Rank analysis of attention weights: device path (new) against host path (old)", settings,
                           table(result), "")


def run(options) -> dict:
    """The benchmark as the flags of scripts/bench_rank.py (`options`) ask: measured, written under
    options.out (rank.json and rank.md), its table printed; returns the result."""
    settings = {name: getattr(options, name) for name in
                ("layers", "batch", "heads", "head_dim", "old_max_length", "repeats", "max_seconds", "seed")}
    result = measure(parse_lengths(options.lengths), settings)
    paths = write_reports(result, options.out, "rank", markdown)
    print(f"\n{table(result)}\n\n{len(result['rows'])} lengths in {result['elapsed_s']:.0f} s; "
          f"written: {', '.join(paths)}")
    return result
