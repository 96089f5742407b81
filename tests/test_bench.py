"""scripts/bench_attention.py and scripts/bench_decode.py at tiny sizes: the rows, tables and plot they
write, and bench_attention's budgets. No speed is asserted: only that every measurement is present,
positive, or skipped for the stated reason."""
import json

import pytest

from scripts import bench_attention, bench_decode

TINY = ["--lengths=16,32", "--batch=1", "--heads=2", "--head_dim=8", "--repeats=2"]
KINDS = ["softmax", "linear"]


def _rows(out):
    return json.loads((out / "attention.json").read_text())["rows"]


def _by_key(rows):
    return {(row["kind"], row["causal"], row["length"]): row for row in rows}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    bench_attention.main([*TINY, f"--kinds={','.join(KINDS)}", f"--out={out}"])
    return out


def test_every_kind_mode_and_length_is_measured(tiny_run):
    rows = _by_key(_rows(tiny_run))
    expected = {(kind, causal, length) for kind in KINDS for causal in (False, True) for length in (16, 32)}
    assert set(rows) == expected and len(_rows(tiny_run)) == len(expected)
    for row in rows.values():
        assert row["skipped"] is None
        assert row["ms"] > 0 and len(row["ms_repeats"]) == 2 and all(ms > 0 for ms in row["ms_repeats"])
        # At least q, k, v and the cotangent (4 x 32 x 2 x 8 float32) come in, their gradients go out.
        assert row["bytes"] >= 2 * 4 * row["length"] * 2 * 8 * 4


def test_json_records_machine_and_settings(tiny_run):
    result = json.loads((tiny_run / "attention.json").read_text())
    assert {"platform", "device", "cpu_count", "jax"} <= set(result["machine"])
    assert result["settings"]["kinds"] == KINDS and result["settings"]["lengths"] == [16, 32]
    assert result["settings"]["heads"] == 2 and result["settings"]["head_dim"] == 8


def test_markdown_has_a_table_per_mode_and_the_png_exists(tiny_run):
    text = (tiny_run / "attention.md").read_text()
    header = "| L | softmax ms | linear ms | softmax/linear |"
    assert text.count(header) == 2  # bidirectional and causal
    assert "## bidirectional" in text and "## causal" in text
    assert any(line.startswith("| 16 |") for line in text.splitlines())
    assert (tiny_run / "attention.png").stat().st_size > 0


def test_time_budget_skips_the_larger_lengths(tmp_path):
    bench_attention.main([*TINY, "--kinds=linear,reference", "--max_seconds=0", f"--out={tmp_path}"])
    rows = _by_key(_rows(tmp_path))
    for kind in ("linear", "reference"):
        for causal in (False, True):
            assert rows[kind, causal, 16]["ms"] > 0  # the length that went over budget is still measured
            skipped = rows[kind, causal, 32]
            assert skipped["ms"] is None and "--max_seconds" in skipped["skipped"]
    assert "skip" in (tmp_path / "attention.md").read_text()


def test_memory_budget_skips_before_running(tmp_path):
    bench_attention.main([*TINY, "--kinds=linear", "--max_memory_gb=0", f"--out={tmp_path}"])
    rows = _rows(tmp_path)
    assert len(rows) == 4 and all(row["ms"] is None for row in rows)
    first = _by_key(rows)["linear", False, 16]
    assert "--max_memory_gb" in first["skipped"] and first["bytes"] > 0  # planned, though not run
    assert (tmp_path / "attention.png").exists()


def _result(times: dict) -> dict:
    """A hand-written result: times[(kind, length)] in ms, None for skipped, bidirectional only measured."""
    lengths = sorted({length for _, length in times})
    rows = [{"kind": kind, "causal": causal, "length": length, "ms": times[kind, length] if not causal else None,
             "skipped": None if not causal else "x"}
            for kind in ("softmax", "linear") for causal in (False, True) for length in lengths]
    return {"settings": {"kinds": ["softmax", "linear"], "lengths": lengths}, "rows": rows}


def test_summary_names_the_crossover_and_the_ratio_at_8192():
    result = _result({("softmax", 4096): 1.0, ("linear", 4096): 2.0, ("softmax", 8192): 9.0, ("linear", 8192): 3.0})
    assert bench_attention.summary(result, "bidirectional") == (
        "bidirectional: linear faster than softmax from L=8192 (crossover); softmax/linear at L=8192: 3.00x")
    assert bench_attention.summary(result, "causal") == "causal: no length with both softmax and linear measured"


def test_summary_without_crossover_names_the_largest_length_compared():
    result = _result({("softmax", 256): 1.0, ("linear", 256): 2.0, ("softmax", 512): None, ("linear", 512): 3.0})
    assert bench_attention.summary(result, "bidirectional") == (
        "bidirectional: linear not faster than softmax up to L=256; softmax/linear at L=8192: not measured")


def test_unknown_kind_is_refused_before_compiling():
    with pytest.raises(SystemExit, match="unknown.*'nope'.*reference"):
        bench_attention.parse_kinds("softmax,nope")


def test_bench_decode_quick_measures_every_kind_and_length(tmp_path):
    bench_decode.main(["--quick", "--kinds=softmax,performer", f"--out={tmp_path}"])
    result = json.loads((tmp_path / "decode.json").read_text())
    rows = {(row["kind"], row["length"]): row for row in result["rows"]}
    assert set(rows) == {(kind, length) for kind in ("softmax", "performer") for length in (16, 64)}
    for row in rows.values():
        assert row["ms_per_token"] > 0 and len(row["ms_repeats"]) == 2 and row["steps"] == 8
        assert row["tokens_per_s"] == pytest.approx(1e3 / row["ms_per_token"])
    text = (tmp_path / "decode.md").read_text()
    assert "| L | softmax ms/token | performer ms/token | softmax tokens/s | performer tokens/s |" in text
    ratio = rows["softmax", 64]["ms_per_token"] / rows["softmax", 16]["ms_per_token"]
    assert f"| **64 / 16** | **{ratio:.2f}x** |" in text
    assert (tmp_path / "decode.png").stat().st_size > 0


def test_bench_decode_refuses_the_reference_kind():
    with pytest.raises(SystemExit, match="'reference' has no incremental decoding"):
        bench_decode.main(["--quick", "--kinds=softmax,reference"])
