"""Per-token time of incremental decoding through one causal self-attention layer, by buffer length: the
measurement and reports of `python -m scripts.bench_decode`, whose docstring (its --help) states the method."""
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import attention
from benchmarks.attention import REFERENCE, parse_kinds
from benchmarks.common import (calls_per_timing, machine, machine_text, parse_lengths, report_markdown,
                               seconds_per_call, write_reports)

QUICK = {"lengths": "16,64", "heads": 2, "head_dim": 16, "steps": 8, "repeats": 2}


def build_layer(kind: str, heads: int, head_dim: int, num_features: int):
    options = attention.select_options(kind, {"num_features": num_features})
    layer = attention.MultiHeadAttention(kind, d_model=heads * head_dim, num_heads=heads, rngs=nnx.Rngs(0),
                                         kind_options=options)
    layer.eval()
    return nnx.split(layer)


def decode_program(graphdef, length: int, steps: int):
    """jit of (layer state, cache, inputs [steps, B, 1, d]) -> outputs: positions length - steps ..
    length - 1, one decode_step each, in a scan."""

    def decode(state, cache, inputs):
        layer = nnx.merge(graphdef, state)
        valid = jnp.ones(inputs.shape[1], bool)

        def step(cache, x_and_index):
            x, index = x_and_index
            out, cache = layer.decode_step(x, cache, index, length, valid)
            return cache, out

        _, outputs = jax.lax.scan(step, cache, (inputs, jnp.arange(length - steps, length)))
        return outputs

    return jax.jit(decode)


def measure_length(kinds, layers, length, settings) -> list[dict]:
    """Rows of every kind at one buffer length, timing rounds interleaved between the kinds."""
    steps = min(settings["steps"], length)
    d_model = settings["heads"] * settings["head_dim"]
    inputs = jax.random.normal(jax.random.fold_in(jax.random.key(settings["seed"]), length),
                               (steps, settings["batch"], 1, d_model))
    candidates = []
    for kind in kinds:
        graphdef, state = layers[kind]
        cache = nnx.merge(graphdef, state).init_cache(settings["batch"], length)
        arguments = (state, cache, inputs)
        started = time.perf_counter()
        compiled = decode_program(graphdef, length, steps).lower(*arguments).compile()
        compile_s = time.perf_counter() - started
        warmup_s = seconds_per_call(compiled, arguments, 1)
        candidates.append({"kind": kind, "program": compiled, "arguments": arguments,
                           "calls": calls_per_timing(warmup_s), "compile_s": compile_s, "seconds": []})
    for _ in range(settings["repeats"]):
        for candidate in candidates:
            candidate["seconds"].append(seconds_per_call(candidate["program"], candidate["arguments"],
                                                         candidate["calls"]))
    rows = []
    for candidate in candidates:
        ms = 1e3 * float(np.median(candidate["seconds"])) / steps
        rows.append({"kind": candidate["kind"], "length": length, "steps": steps, "ms_per_token": ms,
                     "tokens_per_s": 1e3 / ms, "ms_repeats": [1e3 * s / steps for s in candidate["seconds"]],
                     "calls_per_timing": candidate["calls"], "compile_s": candidate["compile_s"]})
    return rows


def measure(kinds: list[str], lengths: list[int], settings: dict, log=print) -> dict:
    layers = {kind: build_layer(kind, settings["heads"], settings["head_dim"], settings["num_features"])
              for kind in kinds}
    rows, started = [], time.perf_counter()
    for length in lengths:
        measured = measure_length(kinds, layers, length, settings)
        rows.extend(measured)
        log(f"[{time.perf_counter() - started:6.1f} s] L={length}: "
            + ", ".join(f"{row['kind']} {row['ms_per_token']:.3f} ms/token" for row in measured))
    return {"machine": machine(), "settings": {**settings, "kinds": kinds, "lengths": lengths},
            "rows": rows, "elapsed_s": time.perf_counter() - started}


# --- reports -------------------------------------------------------------------------------------------------


def _lookup(result: dict) -> dict:
    return {(row["kind"], row["length"]): row for row in result["rows"]}


def growth(result: dict, kind: str) -> float:
    """Per-token time at the largest length over that at the smallest."""
    lengths, rows = result["settings"]["lengths"], _lookup(result)
    return rows[kind, lengths[-1]]["ms_per_token"] / rows[kind, lengths[0]]["ms_per_token"]


def table(result: dict) -> str:
    kinds, lengths, rows = result["settings"]["kinds"], result["settings"]["lengths"], _lookup(result)
    header = ["L", *(f"{kind} ms/token" for kind in kinds), *(f"{kind} tokens/s" for kind in kinds)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for length in lengths:
        cells = [f"{length:,}", *(f"{rows[kind, length]['ms_per_token']:.3f}" for kind in kinds),
                 *(f"{rows[kind, length]['tokens_per_s']:,.0f}" for kind in kinds)]
        lines.append("| " + " | ".join(cells) + " |")
    ratio = [f"**{lengths[-1]:,} / {lengths[0]:,}**", *(f"**{growth(result, kind):.2f}x**" for kind in kinds),
             *("" for _ in kinds)]
    lines.append("| " + " | ".join(ratio) + " |")
    return "\n".join(lines)


def summary(result: dict) -> str:
    lengths = result["settings"]["lengths"]
    return (f"per-token time at L={lengths[-1]:,} vs L={lengths[0]:,}: "
            + ", ".join(f"{kind} {growth(result, kind):.2f}x" for kind in result["settings"]["kinds"]))


def markdown(result: dict) -> str:
    s = result["settings"]
    settings = (f"B={s['batch']}, H={s['heads']}, D={s['head_dim']}, float32; the last {s['steps']} positions of a "
                f"buffer of L; median of {s['repeats']} timings; {machine_text(result['machine'])}. Softmax kinds "
                f"keep a KV cache (a step scores all L positions), kernelised kinds a state sum phi(k) [v, 1]^T (a "
                f"step is O(1) in L).")
    return report_markdown("Incremental decoding, one causal self-attention layer (projections included)", settings,
                           table(result), "", f"**{summary(result)}**", "")


def plot(result: dict, path: str) -> str:
    from analysis import plots  # first: it sets the Agg backend
    import matplotlib.pyplot as plt

    rows = _lookup(result)
    fig, ax = plt.subplots(figsize=(6, 4.2), layout="constrained")
    for kind in result["settings"]["kinds"]:
        lengths = result["settings"]["lengths"]
        ax.plot(lengths, [rows[kind, length]["ms_per_token"] for length in lengths], marker="o", label=kind)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("buffer length L")
    ax.set_ylabel("ms per decoded token")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return plots.save_figure(fig, path)


# --- the benchmark -------------------------------------------------------------------------------------------


def run(options) -> dict:
    """The benchmark as the flags of scripts/bench_decode.py (`options`) ask, with QUICK's sizes under
    --quick: measured, written under options.out (decode.json, .md and .png), its table printed; returns the
    result."""
    chosen = {**vars(options), **(QUICK if options.quick else {})}
    kinds, lengths = parse_kinds(chosen["kinds"]), parse_lengths(chosen["lengths"])
    if REFERENCE in kinds:
        raise SystemExit(f"--kinds: {REFERENCE!r} has no incremental decoding; choose registered kinds")
    settings = {name: chosen[name] for name in
                ("batch", "heads", "head_dim", "num_features", "steps", "repeats", "seed")}
    result = measure(kinds, lengths, settings)
    paths = write_reports(result, chosen["out"], "decode", markdown, plot)
    print(f"\n{table(result)}\n\n{summary(result)}")
    print(f"{len(result['rows'])} measurements in {result['elapsed_s']:.0f} s; written: {', '.join(paths)}")
    return result
