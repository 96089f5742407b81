"""Time of the rank analysis of a model's attention weights, by sequence length: the device path against the
host path it replaced.

  python -m scripts.bench_rank                             # 2 layers, B 1, 4 heads; L 128, 512, 1,024, 4,096
  python -m scripts.bench_rank --lengths=128,1024,2048 --heads=8 --old_max_length=1024

Input: the weights one role's attention gives to the analysis, [layers, B, H, L, L] float32 on the default
device: softmax(q k^T / sqrt(D)) of standard-normal q and k [layers, B, H, L, D] (no padding).

new: what evaluation runs now (training/evaluation.py attention_analysis): analysis.rank.attention_spectra
(a float64 batched SVD, singular values only, one layer at a time on the device; one transfer of the
spectra), then the summary rows and the mean spectrum from those spectra.

old: what evaluation ran before: the weights copied to the host, then numpy's float64 SVD of each
example's [layers, H, L, L] block, all of it twice, once for the summary rows and once for the mean
spectrum (the metrics of the spectra, cheap, are left out). It is run in full up to --old_max_length; at
every length one matrix's numpy SVD is also timed, and "old, extrapolated" is the weights' transfer plus
2 x layers x B x H times that one SVD (for lengths where the full run would take too long).

Each path is called once untimed (compilation), then timed --repeats times and the median kept; a path
whose first call takes over --max_seconds is timed by that call alone (it then includes compilation,
well under a second). Run as a script, OpenBLAS gets one thread unless OPENBLAS_NUM_THREADS is set (below).
Writes rank.json (machine, settings, one row per L) and rank.md under --out.
"""
import json
import os
import platform
import time

if __name__ == "__main__":  # before numpy loads OpenBLAS, and not for a process that imports this module
    # numpy's SVD and jax's CPU one both run on OpenBLAS, whose worker threads spin while they wait. With
    # other processes on this 2-core machine's cores that made either path up to 50x slower (the analysis
    # at L = 1,024 took 18-113 s rather than 1.6-3.3 s), so one thread, unless the environment says.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import flags  # noqa: E402

from analysis import rank  # noqa: E402
from scripts import command_line  # noqa: E402
from scripts.bench_attention import machine_text, parse_lengths, report_markdown  # noqa: E402

ROLE = "encoder_self"  # any role: the analysis does not depend on which


def softmax_weights(key, layers: int, batch: int, heads: int, length: int, head_dim: int) -> jax.Array:
    """[layers, B, H, L, L] float32 softmax attention of standard-normal queries and keys."""
    q, k = jax.random.normal(key, (2, layers, batch, heads, length, head_dim), jnp.float32)
    return jax.block_until_ready(jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / np.sqrt(head_dim), axis=-1))


def new_path(weights, lengths) -> None:
    """Rank rows and mean spectrum as evaluation computes them now."""
    query, key = {ROLE: lengths}, {ROLE: lengths}
    spectra = rank.attention_spectra({ROLE: weights}, query, key)
    rank.summarize_attention(spectra, query, key, {ROLE: None})
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


FLAGS = flags.FlagValues()
flags.DEFINE_string("lengths", "128,512,1024,4096", "comma-separated sequence lengths", flag_values=FLAGS)
flags.DEFINE_integer("layers", 2, "layers of weights", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("batch", 1, "B", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("heads", 4, "H", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("head_dim", 64, "D", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_integer("old_max_length", 4096, "the old path runs in full up to this length (above it, "
                     "extrapolated only)", flag_values=FLAGS)
flags.DEFINE_integer("repeats", 3, "timings per measurement; the median is kept", lower_bound=1, flag_values=FLAGS)
flags.DEFINE_float("max_seconds", 20.0, "a path whose first call takes longer is timed by that call alone",
                   flag_values=FLAGS)
flags.DEFINE_integer("seed", 0, "seed of q and k", flag_values=FLAGS)
flags.DEFINE_string("out", "reports/bench", "folder for rank.json and rank.md", flag_values=FLAGS)


def main(argv=None) -> dict:
    args = command_line.parse(FLAGS, argv, __doc__)
    settings = {name: getattr(args, name) for name in
                ("layers", "batch", "heads", "head_dim", "old_max_length", "repeats", "max_seconds", "seed")}
    result = measure(parse_lengths(args.lengths), settings)
    os.makedirs(args.out, exist_ok=True)
    paths = [os.path.join(args.out, name) for name in ("rank.json", "rank.md")]
    with open(paths[0], "w") as f:
        json.dump(result, f, indent=1)
    with open(paths[1], "w") as f:
        f.write(markdown(result))
    print(f"\n{table(result)}\n\n{len(result['rows'])} lengths in {result['elapsed_s']:.0f} s; "
          f"written: {', '.join(paths)}")
    return result


if __name__ == "__main__":
    main()
