"""softmax_rank's basis, exact against subspace iteration: the error of each projection against the best rank-m
approximation, and the time of a forward and backward of the kind against the softmax kind's, measured in one run:
the measurement and report of `python -m scripts.bench_rank_basis`, whose docstring (its --help) states the method."""
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import nnx

import attention
from attention import low_rank
from benchmarks.common import machine, write_reports


def _inputs(batch: int, length: int, heads: int, dim: int, scale: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.normal(size=(batch, length, heads, dim)).astype(np.float32) for _ in range(3))
    return jnp.asarray(scale * q), jnp.asarray(k), jnp.asarray(v)


def excess_error(length: int, rank: int, iterations: int, scale: float, batch: int = 4, heads: int = 4,
                 dim: int = 32) -> dict:
    """Mean and largest ||A - A V V^T||_F / ||A - A_m||_F - 1 over the matrices of one batch of softmax weights
    (scores of queries scaled by `scale`: sharper rows, as trained ones are), A_m from float64 singular values."""
    q, k, _ = _inputs(batch, length, heads, dim, scale)
    weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(dim), axis=-1)
    projected = low_rank.project_onto_top_rows(weights, None, rank, iterations)
    exact = np.asarray(weights, np.float64)
    s = np.linalg.svd(exact, compute_uv=False)
    optimum = np.sqrt((s[..., rank:] ** 2).sum(-1))
    excess = np.linalg.norm(exact - np.asarray(projected, np.float64), axis=(-2, -1)) / optimum - 1
    return {"mean": float(excess.mean()), "max": float(excess.max())}


def _gradient_program(kind: str, heads: int, dim: int, **options):
    module = attention.create(kind, num_heads=heads, head_dim=dim, rngs=nnx.Rngs(0), **options)
    return jax.jit(jax.grad(lambda q, k, v: (module(q, k, v) ** 2).sum(), (0, 1, 2)))


def measure(lengths: list[int], batches: list[int], rank: int, iterations: list[int], rounds: int,
            heads: int = 4, dim: int = 32) -> dict:
    rows = []
    for length, batch in zip(lengths, batches):
        arguments = _inputs(batch, length, heads, dim, 2.0)
        programs = {"softmax": _gradient_program("softmax", heads, dim)}
        for steps in (0, *iterations):
            programs[steps] = _gradient_program("softmax_rank", heads, dim, rank=rank, basis_iterations=steps)
        for program in programs.values():
            jax.block_until_ready(program(*arguments))
        times = {name: [] for name in programs}
        for _ in range(rounds):  # alternating, so that a shared machine's load falls on all alike
            for name, program in programs.items():
                started = time.perf_counter()
                jax.block_until_ready(program(*arguments))
                times[name].append(time.perf_counter() - started)
        softmax_s = float(np.median(times["softmax"]))
        for steps in (0, *iterations):
            seconds = float(np.median(times[steps]))
            rows.append({"length": length, "batch": batch, "basis": "exact (eigh)" if steps == 0 else
                         f"{steps} subspace steps", "iterations": steps, "ms": 1e3 * seconds,
                         "x_softmax": seconds / softmax_s, "softmax_ms": 1e3 * softmax_s,
                         "excess_error": excess_error(length, rank, steps, 2.0)})
        print(f"L = {length}: " + ", ".join(f"{row['basis']} {row['ms']:.0f} ms ({row['x_softmax']:.1f}x)"
                                            for row in rows if row["length"] == length), flush=True)
    return {"machine": machine(matmul_precision=False), "rank": rank, "heads": heads, "head_dim": dim,
            "rounds": rounds, "rows": rows}


def table(result: dict) -> str:
    lines = ["| L | batch | basis | fwd+bwd ms | x softmax | excess error, mean | excess error, max |",
             "|---:|---:|---|---:|---:|---:|---:|"]
    for row in result["rows"]:
        error = row["excess_error"]
        lines.append(f"| {row['length']} | {row['batch']} | {row['basis']} | {row['ms']:.0f} | "
                     f"{row['x_softmax']:.2f} | {100 * error['mean']:.4f}% | {100 * error['max']:.4f}% |")
    lines.append(f"\nm = {result['rank']}, {result['heads']} heads of {result['head_dim']}; x softmax: against the "
                 "softmax kind's forward and backward on the same inputs in the same rounds. Excess error: ||A - A V "
                 "V^T||_F over the best rank-m approximation's, less 1, over one batch of 4 (queries scaled 2x).")
    return "\n".join(lines)


def run(options) -> dict:
    logging.set_verbosity(logging.WARNING)
    lengths = [int(x) for x in options.lengths.split(",")]
    batches = [int(x) for x in options.batches.split(",")]
    if len(batches) != len(lengths):
        raise SystemExit(f"--batches: one per length ({len(lengths)}), got {len(batches)}")
    result = measure(lengths, batches, options.rank, [int(x) for x in options.iterations.split(",")], options.rounds)
    paths = write_reports(result, options.out, "rank_basis", lambda measured: table(measured) + "\n")
    print(table(result))
    print(f"written: {paths[0]}, rank_basis.md")
    return result
