"""benchmarks/linear_paths.py and benchmarks/roofline.py at tiny sizes, run through their scripts' command lines
(python -m scripts.bench_linear_paths, scripts.bench_roofline): a loop's body counted once per trip (against
the analytic count of the passes' products), the rows and tables the benchmark writes, bench_attention's
variants of a kind and its roofline table; and the committed reports and docs/benchmarks.md's tables read
from the committed JSON. No speed is asserted."""
import json
import pathlib

import jax
import jax.numpy as jnp
import pytest

from attention.ops import chunked_sums
from benchmarks import attention, common, linear_paths, roofline
from scripts import bench_attention, bench_linear_paths, bench_roofline

ROOT = pathlib.Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports" / "bench"
LINEAR_PATHS = ("", "linear_paths_grad", "linear_strategies_short", "linear_strategies_long")


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
    counted = roofline.loop_aware_cost(compile_program, length // chunk)
    assert products <= counted["flops"] <= 1.15 * products
    assert common.xla_cost(compile_program())["flops"] < 0.5 * products
    assert counted["bytes"] > common.xla_cost(compile_program())["bytes"]
    assert chunked_sums.UNROLL == 1  # the second compilation's unroll is undone


def test_a_program_calling_a_kernel_xla_cannot_see_into_has_no_counted_work():
    """cuDNN's flash attention and Pallas kernels are custom calls: XLA's cost analysis counts none of their
    work, which would put such a program thousands of times over its roofline."""
    class Compiled:  # what a GPU compilation's HLO holds, where this CPU compiles neither kernel
        def __init__(self, target):
            self.text = f'%fmha = (f32[2]) custom-call(%q), custom_call_target="{target}"'

        def as_text(self):
            return self.text

    for target in ("__cudnn$fmhaSoftmax", "__gpu$xla.gpu.triton", "mosaic_gpu_v2"):
        assert roofline.loop_aware_cost(lambda: None, 4, Compiled(target)) == {"flops": None, "bytes": None}
    program = jax.jit(jnp.matmul).lower(jnp.ones((8, 8)), jnp.ones((8, 8))).compile()
    assert not roofline.calls_opaque_kernels(program) and roofline.loop_aware_cost(lambda: program, 1)["flops"] > 0


def test_rates_and_roofline(capsys):
    rates = bench_roofline.main(["--repeats=1"])
    assert rates["matmul_flops_per_s"] > 1e8 and rates["bandwidth_bytes_per_s"] > 1e8
    assert "GFLOP/s" in capsys.readouterr().out
    unit = {"matmul_flops_per_s": 1.0, "bandwidth_bytes_per_s": 1.0}
    assert roofline.against_roofline(2.0, {"flops": 4.0, "bytes": 1.0}, unit) == {
        "flops_per_s": 2.0, "matmul_share": 2.0, "roofline_s": 4.0, "over_roofline": 0.5}
    assert roofline.against_roofline(2.0, {"flops": 1.0, "bytes": 8.0}, unit)["over_roofline"] == 0.25
    rows = [{"ms": 1e3, "flops": 3.0, "bytes_accessed": 1.0}, {"ms": None}]
    best = roofline.annotate(rows, [unit, {"matmul_flops_per_s": 2.0, "bandwidth_bytes_per_s": 0.5}])
    assert best == {"matmul_flops_per_s": 2.0, "bandwidth_bytes_per_s": 1.0}  # the better of before and after
    assert rows[0]["over_roofline"] == 1 / 1.5 and rows[0]["matmul_share"] == 1.5 and "over_roofline" not in rows[1]


def test_tiny_run_writes_every_column_mode_and_length(tmp_path, capsys):
    columns = "autodiff:8,xla:8:parallel,xla:0"
    result = bench_linear_paths.main(["--lengths=16", "--heads=2", "--head_dim=8", "--repeats=1",
                                      f"--columns={columns}", f"--out={tmp_path}"])
    rows = json.loads((tmp_path / "linear_paths.json").read_text())["rows"]
    labels = ["autodiff C=8", "xla C=8 parallel", "xla C=auto"]
    assert [(row["kind"], row["causal"]) for row in rows] == [(label, causal) for causal in (True, False)
                                                               for label in labels]
    for row in rows:
        assert row["ms"] > 0 and row["temp_bytes"] > 0 and row["flops"] > 0 and row["over_roofline"] > 0
        assert row["temp_bytes"] == row["memory"]["temp"] and row["bytes_accessed"] > 0
    text = (tmp_path / "linear_paths.md").read_text()
    assert "## causal" in text and "## bidirectional" in text and "| 16 | xla C=auto |" in text
    assert (tmp_path / "linear_paths.png").stat().st_size > 0
    assert result["run_rates"]["matmul_flops_per_s"] > 0
    assert "against" not in capsys.readouterr().out  # no side by side without autodiff C=64 and xla C=auto


def test_forced_strategy_is_traced_and_undone(monkeypatch):
    """A column's strategy reaches chunked_sums when its program is traced, and only then."""
    from attention.ops import chunking

    seen = []
    monkeypatch.setattr(chunked_sums, "causal_sums", lambda *args: seen.append(args[-1]) or args[2])
    own = chunking.strategy_for
    layer = attention.build_layer("linear", 2, 8, {"chunk_size": 8})
    inputs = attention.random_inputs(jax.random.key(0), 1, 32, 2, 8)
    for strategy in chunked_sums.STRATEGIES:
        with linear_paths.forced_strategy(strategy):
            attention.gradient_program(layer[0], True).lower(layer[1], *inputs, None)
    assert seen == list(chunked_sums.STRATEGIES) and chunking.strategy_for is own


@pytest.mark.parametrize("columns", ["cudnn:8", "xla:8:fast", "xla", "xla:8,xla:8", "xla:-8"])
def test_bad_columns_are_refused(columns):
    with pytest.raises(SystemExit):
        linear_paths.parse_columns(columns)


def test_attention_benchmark_takes_variants_and_puts_each_kind_against_its_roofline(tmp_path, capsys):
    """scripts/bench_attention.py with the autodiff and the custom-VJP linear paths as columns of one run."""
    bench_attention.main(["--lengths=16", "--heads=2", "--head_dim=8", "--repeats=1", "--masks=none",
                          "--kinds=softmax,linear,linear:autodiff", f"--out={tmp_path}"])
    result = json.loads((tmp_path / "attention.json").read_text())
    assert result["options"] == {"softmax": {"softmax_implementation": "auto"}, "linear": {},
                                 "linear:autodiff": {"kernelized_implementation": "autodiff"}}
    assert len(result["rows"]) == 6
    assert all(row["over_roofline"] > 0 and row["flops"] > 0 and row["bytes_accessed"] > 0 for row in result["rows"])
    assert "Time over the roofline" in (tmp_path / "attention.md").read_text()
    assert "| causal | 16 |" in capsys.readouterr().out
    for label in ("hard:xla", "linear:xla:x"):
        with pytest.raises(SystemExit, match="a variant is kind:implementation"):
            attention.variant_options(label)


@pytest.mark.parametrize("folder", LINEAR_PATHS)
def test_committed_reports_are_their_json_rendered(folder):
    path = REPORTS / folder / "linear_paths.json"
    assert linear_paths.markdown(json.loads(path.read_text())) == path.with_suffix(".md").read_text()


def test_docs_tables_are_the_committed_json_rendered(capsys):
    """docs/benchmarks.md's autodiff-against-custom-VJP tables and the yardstick, as the benchmarks render them."""
    docs = (ROOT / "docs" / "benchmarks.md").read_text()
    grad = bench_linear_paths.main([f"--tables_of={REPORTS / 'linear_paths_grad' / 'linear_paths.json'}"])
    assert linear_paths.comparison(grad, "causal") in capsys.readouterr().out
    for folder in ("", "linear_paths_grad"):
        result = json.loads((REPORTS / folder / "linear_paths.json").read_text())
        for mode in result["settings"]["modes"]:
            assert linear_paths.comparison(result, mode) in docs, (folder, mode)
    yardstick = json.loads((REPORTS / "yardstick" / "attention.json").read_text())
    assert attention.markdown(yardstick) == (REPORTS / "yardstick" / "attention.md").read_text()
    assert attention.roofline_summary(yardstick) in docs
