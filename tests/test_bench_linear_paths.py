"""scripts/bench_linear_paths.py and scripts/roofline.py at tiny sizes: a loop's body counted once per trip
(against the analytic count of the passes' products), the rows and tables the script writes, and
bench_attention's variants of a kind and its roofline table. No speed is asserted."""
import json

import jax
import jax.numpy as jnp
import pytest

from attention import chunked_sums
from scripts import bench_attention, bench_linear_paths, roofline


@pytest.mark.parametrize("stabilised", [False, True])
@pytest.mark.parametrize("length, chunk", [(64, 16), (256, 32)])
def test_loop_aware_cost_counts_each_loop_body_once_per_trip(length, chunk, stabilised):
    """The sequential strategy's value and gradient (nothing dead) at head width = chunk = w, 4 and 8 chunks:
    at least the 16 products of w x w x w per chunk and head that its three passes make (4 forward, 5 in
    order for dq, 7 in reverse for dk, dv), and the rest (exp, sums, divisions) within 15% of them; XLA's
    own count sees one trip of each pass."""
    q = jnp.ones((1, length, 2, chunk), jnp.float32)
    stabiliser = jnp.zeros((1, length, 2, 1), jnp.float32) if stabilised else None

    def compile_program():
        def loss(q, k, v):
            return chunked_sums.causal_sums(q, k, v, jnp.float32(1e-6), stabiliser, chunk, "sequential").sum()
        return jax.jit(jax.value_and_grad(loss, (0, 1, 2))).lower(q, q, q).compile()

    products = 16 * 2 * chunk**3 * 2 * (length // chunk)  # FLOPs, 2 heads
    counted = roofline.loop_aware_cost(compile_program, length // chunk)["flops"]
    assert products <= counted <= 1.15 * products
    assert roofline.cost(compile_program())["flops"] < 0.5 * products


def test_rates_and_roofline():
    rates = roofline.machine_rates(repeats=1)
    assert rates["matmul_flops_per_s"] > 0 and rates["bandwidth_bytes_per_s"] > 0
    bound = roofline.against_roofline(2.0, {"flops": 4.0, "bytes": 1.0}, {"matmul_flops_per_s": 1.0,
                                                                          "bandwidth_bytes_per_s": 1.0})
    assert bound == {"flops_per_s": 2.0, "matmul_share": 2.0, "roofline_s": 4.0, "over_roofline": 0.5}


def test_tiny_run_writes_every_column_mode_and_length(tmp_path):
    columns = "autodiff:8,xla:8:parallel,xla:0"
    result = bench_linear_paths.main(["--lengths=16", "--heads=2", "--head_dim=8", "--repeats=1",
                                      f"--columns={columns}", f"--out={tmp_path}"])
    rows = json.loads((tmp_path / "linear_paths.json").read_text())["rows"]
    labels = ["autodiff C=8", "xla C=8 parallel", "xla C=auto"]
    assert [(row["kind"], row["causal"]) for row in rows] == [(label, causal) for causal in (True, False)
                                                               for label in labels]
    for row in rows:
        assert row["ms"] > 0 and row["temp_bytes"] > 0 and row["flops"] > 0 and row["over_roofline"] > 0
    text = (tmp_path / "linear_paths.md").read_text()
    assert "## causal" in text and "## bidirectional" in text and "| 16 | xla C=auto |" in text
    assert result["run_rates"]["matmul_flops_per_s"] > 0


@pytest.mark.parametrize("columns", ["cudnn:8", "xla:8:fast", "xla", "xla:8,xla:8"])
def test_bad_columns_are_refused(columns):
    with pytest.raises(SystemExit):
        bench_linear_paths.parse_columns(columns)


def test_attention_benchmark_takes_variants_and_puts_each_kind_against_its_roofline(tmp_path):
    """scripts/bench_attention.py with the former and the new linear path as columns of one run."""
    bench_attention.main(["--lengths=16", "--heads=2", "--head_dim=8", "--repeats=1", "--masks=none",
                          "--kinds=linear,linear:autodiff", f"--out={tmp_path}"])
    result = json.loads((tmp_path / "attention.json").read_text())
    assert result["options"] == {"linear": {}, "linear:autodiff": {"implementation": "autodiff"}}
    assert len(result["rows"]) == 4 and all(row["over_roofline"] > 0 and row["flops"] > 0 for row in result["rows"])
    assert "Time over the roofline" in (tmp_path / "attention.md").read_text()
    for label in ("hard:xla", "linear:xla:x"):
        with pytest.raises(SystemExit, match="a variant is kind:implementation"):
            roofline.variant_options(label)
