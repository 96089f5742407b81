"""benchmarks/attention.py, chunks.py and decode.py at tiny sizes, run through their scripts' command lines
(python -m scripts.bench_attention, ...): the rows, tables and plot they write, the attention benchmark's
budgets, dtype, implementation and masked modes; bench_train's config overrides. No speed is asserted: only that every measurement is
present, positive, or skipped for the stated reason."""
import json
import pathlib
import subprocess

import jax
import pytest

from attention.ops import chunking
from benchmarks import attention, common, train
from scripts import bench_attention, bench_chunks, bench_decode

TINY = ["--lengths=16,32", "--batch=1", "--heads=2", "--head_dim=8", "--repeats=2"]
KINDS = ["softmax", "linear", "reference"]
# One run, at one length (compiling dominates), covers the new axes too: bfloat16 inputs, an explicit
# implementation, both masks (the default).
TINY_RUN = [*TINY, "--lengths=16", f"--kinds={','.join(KINDS)}", "--dtype=bfloat16", "--implementation=xla"]
VALID_KEYS = {16: 14}  # the last 10% (rounded) of the keys are padding


def _rows(out):
    return json.loads((out / "attention.json").read_text())["rows"]


def _by_key(rows):
    return {(row["kind"], row["causal"], row["masked"], row["length"]): row for row in rows}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    bench_attention.main([*TINY_RUN, f"--out={out}"])
    return out


def test_every_kind_mode_and_length_is_measured(tiny_run):
    rows = _by_key(_rows(tiny_run))
    expected = {(kind, causal, masked, length) for kind in KINDS for causal in (False, True)
                for masked in (False, True) for length in (16,)}
    assert set(rows) == expected and len(_rows(tiny_run)) == len(expected)
    for row in rows.values():
        assert row["skipped"] is None
        assert row["ms"] > 0 and len(row["ms_repeats"]) == 2 and all(ms > 0 for ms in row["ms_repeats"])
        # At least q, k, v and the cotangent (4 x L x 2 x 8 bfloat16) come in, their gradients go out.
        assert row["bytes"] >= 2 * 4 * row["length"] * 2 * 8 * 2
        assert row["valid_keys"] == (VALID_KEYS[row["length"]] if row["masked"] else None)


def test_inputs_are_in_the_requested_dtype(tiny_run):
    rows = _by_key(_rows(tiny_run))
    for length in (16,):
        # The reference has no state: its arguments are q, k, v and the cotangent, 2 bytes per number,
        # and, masked, the key lengths [B] (int32).
        assert rows["reference", False, False, length]["memory"]["argument"] == 4 * length * 2 * 8 * 2
        assert rows["reference", False, True, length]["memory"]["argument"] == 4 * length * 2 * 8 * 2 + 4


def test_json_records_machine_settings_dtype_and_implementation(tiny_run):
    result = json.loads((tiny_run / "attention.json").read_text())
    assert {"platform", "device", "cpu_count", "jax", "matmul_precision"} <= set(result["machine"])
    settings = result["settings"]
    assert settings["kinds"] == KINDS and settings["lengths"] == [16]
    assert settings["heads"] == 2 and settings["head_dim"] == 8
    assert settings["dtype"] == "bfloat16" and settings["masks"] == ["none", "padding"]
    assert settings["padding"] == 0.1
    # The implementation reaches the kinds that take it, and the reference runs what softmax selects.
    assert settings["implementation"] == "xla" and settings["reference_implementation"] == "xla"
    assert result["options"] == {"softmax": {"softmax_implementation": "xla"}, "linear": {}, "reference": {}}


def test_markdown_has_a_table_per_mode_and_the_png_exists(tiny_run):
    text = (tiny_run / "attention.md").read_text()
    kinds = "| L | softmax ms | linear ms | reference ms | softmax/linear |"
    assert text.count(f"{kinds} softmax/reference (same call) |") == 2  # unmasked: a sanity check
    assert text.count(f"{kinds} softmax/reference |") == 2  # masked: the comparison
    for mode in ("bidirectional", "causal", "bidirectional + padding", "causal + padding"):
        assert f"## {mode}\n" in text
    assert "bfloat16; `--implementation=xla` (softmax and `reference` run xla)" in text
    assert text.count("softmax/reference (key padding)") == 2
    assert any(line.startswith("| 16 |") for line in text.splitlines())
    assert (tiny_run / "attention.png").stat().st_size > 0


def test_cudnn_is_refused_without_an_nvidia_gpu(capsys):
    assert jax.devices()[0].platform == "cpu"  # tests/conftest.py: the suite runs on the CPU
    with pytest.raises(SystemExit, match="^--implementation=cudnn cannot run here: it needs an NVIDIA GPU"):
        bench_attention.main([*TINY, "--implementation=cudnn", "--dtype=bfloat16"])
    with pytest.raises(SystemExit, match="cudnn cannot run here"):
        bench_chunks.main(["--lengths=16", "--implementation=cudnn"])
    assert "softmax" not in capsys.readouterr().out  # refused before anything ran


def test_masks_argument_is_checked():
    assert attention.parse_masks("padding,none") == ["none", "padding"]
    with pytest.raises(SystemExit, match="--masks"):
        attention.parse_masks("none,causal")


def test_time_budget_skips_the_larger_lengths(tmp_path):
    bench_attention.main([*TINY, "--kinds=linear,reference", "--masks=none", "--max_seconds=0", f"--out={tmp_path}"])
    rows = _by_key(_rows(tmp_path))
    for kind in ("linear", "reference"):
        for causal in (False, True):
            assert rows[kind, causal, False, 16]["ms"] > 0  # the length that went over budget is still measured
            skipped = rows[kind, causal, False, 32]
            assert skipped["ms"] is None and "--max_seconds" in skipped["skipped"]
    assert "skip" in (tmp_path / "attention.md").read_text()


def test_memory_budget_skips_before_running(tmp_path):
    bench_attention.main([*TINY, "--kinds=linear", "--masks=none", "--max_memory_gb=0", f"--out={tmp_path}"])
    rows = _rows(tmp_path)
    assert len(rows) == 4 and all(row["ms"] is None for row in rows)
    first = _by_key(rows)["linear", False, False, 16]
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
    assert attention.summary(result, "bidirectional") == (
        "bidirectional: linear faster than softmax from L=8192 (crossover); softmax/linear at L=8192: 3.00x")
    assert attention.summary(result, "causal") == "causal: no length with both softmax and linear measured"


def test_summary_without_crossover_names_the_largest_length_compared():
    result = _result({("softmax", 256): 1.0, ("linear", 256): 2.0, ("softmax", 512): None, ("linear", 512): 3.0})
    assert attention.summary(result, "bidirectional") == (
        "bidirectional: linear not faster than softmax up to L=256; softmax/linear at L=8192: not measured")


def test_list_arguments_are_checked_and_a_timing_lasts_about_timing_seconds():
    assert common.parse_ints("--chunk_sizes", "64,0,64", 0) == [0, 64]
    with pytest.raises(SystemExit, match="--chunk_sizes: values must be >= 1"):
        common.parse_ints("--chunk_sizes", "0,64", 1)
    with pytest.raises(SystemExit, match="--lengths: '16,x' is not a comma-separated list of integers"):
        common.parse_lengths("16,x")
    assert common.calls_per_timing(common.TIMING_SECONDS / 2) == 2
    assert common.calls_per_timing(10.0) == 1 and common.calls_per_timing(0.0) == common.MAX_CALLS_PER_TIMING


def test_unknown_kind_is_refused_before_compiling():
    with pytest.raises(SystemExit, match="unknown.*'nope'.*reference"):
        attention.parse_kinds("softmax,nope")
    with pytest.raises(SystemExit, match="gla read the layer's input x .* python -m scripts.bench_train"):
        attention.parse_kinds("softmax,gla,reference")
    assert attention.parse_kinds("softmax,linear:autodiff,reference") == ["softmax", "linear:autodiff", "reference"]


def test_bench_chunks_times_every_chunk_size_against_softmax(tmp_path):
    result = bench_chunks.main(["--lengths=16", "--heads=2", "--head_dim=8", "--repeats=1", "--chunk_sizes=0,4",
                                f"--out={tmp_path}"])
    written = json.loads((tmp_path / "chunks.json").read_text())
    rows = {(row["label"], row["length"]): row for row in written["rows"]}
    labels = ["softmax", "linear C=auto", "linear C=4"]
    assert set(rows) == {(label, 16) for label in labels}
    assert all(row["ms"] > 0 and row["causal"] and row["flops"] > 0 for row in rows.values())
    # 0 is the size attention/ops/chunking.py gives this platform, at most L.
    assert rows["linear C=auto", 16]["chunk"] == min(chunking.chunk_size_for("cpu", 16), 16)
    assert rows["linear C=4", 16]["chunk"] == 4
    entries = {(entry["chunk_size"], entry["length"]): entry for entry in written["ratios"]}
    assert set(entries) == {(0, 16), (4, 16)}
    entry = entries[4, 16]
    assert entry["limit"] == pytest.approx(16 / (8 + 4 / 2))  # L / (m + C/2), m = D = 8 for linear
    assert entry["ratio"] == pytest.approx(rows["softmax", 16]["ms"] / rows["linear C=4", 16]["ms"])
    assert entry["of_limit"] == pytest.approx(entry["ratio"] / entry["limit"])
    text = (tmp_path / "chunks.md").read_text()
    assert "| L | softmax ms | C=auto ms | C=4 ms | best C | softmax/linear |" in text
    assert (tmp_path / "chunks.png").stat().st_size > 0
    assert result["settings"]["platform"] == "cpu"


def test_bench_chunks_refuses_a_kind_without_chunks():
    with pytest.raises(SystemExit, match="softmax take no chunk_size"):
        bench_chunks.main(["--kinds=softmax", "--lengths=16"])


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


def test_bench_train_overrides_set_fields_after_the_presets_and_refuse_what_is_no_field():
    overrides = train.parse_overrides("dataset.seq_len=64, compute_dtype=bfloat16,learning_rate=3e-4")
    assert overrides == {"dataset.seq_len": 64, "compute_dtype": "bfloat16", "learning_rate": 3e-4}
    config = train.load_config("configs/mlm.py:tiny", overrides)
    assert (config.dataset.seq_len, config.compute_dtype, config.learning_rate) == (64, "bfloat16", 3e-4)
    assert config.model.d_model == 32  # the preset's, kept
    with pytest.raises(SystemExit, match="--overrides: dataset.seq_length: no such field"):
        train.load_config("configs/mlm.py:tiny", {"dataset.seq_length": 64})
    with pytest.raises(SystemExit, match="--overrides: dataset.seq_len: .*int"):
        train.load_config("configs/mlm.py:tiny", {"dataset.seq_len": "long"})
    with pytest.raises(SystemExit, match="'seq_len' is not field=value"):
        train.parse_overrides("seq_len")


def test_bench_train_compares_each_config_with_a_matmul_in_its_dtype_and_reads_old_results():
    from benchmarks import train

    row = {"config": "configs/mlm.py", "batches": "fixed", "ms_per_step": 2.0, "tokens_per_sec": 1e6,
           "flops_per_step": 4e9, "flops_per_sec": 2e12, "fraction_of_matmul": 0.25}
    now = {"configs": [row], "matmul_flops_per_sec_by_dtype": {"bfloat16": 8e12}, "matmul_sizes": [4096, 8192]}
    assert train.table(now).splitlines()[2:] == [
        "| `configs/mlm.py` | fixed | 2.0 | 1.00 | 1,000,000 | 4.00 | 2000.0 | 25% |", "",
        "Of matmul: against the fastest dense matmul of 4096x4096 and 8192x8192 in the config's compute dtype, "
        "in the same run: bfloat16 8,000.0 GFLOP/s."]
    before = {"configs": [row], "matmul_flops_per_sec": 8e9}  # the committed reports' JSON
    assert train.table(before).splitlines()[-1] == "Dense float32 1024x1024 matmul in the same run: 8.0 GFLOP/s."


def test_bench_packed_times_one_run_against_the_packed_program_in_trainings_per_hour(tmp_path):
    from scripts import bench_packed
    result = bench_packed.main(["--configs=configs/mlm.py:tiny", "--runs=2", "--batches=fixed", "--rounds=1",
                                "--steps_per_round=2", f"--out={tmp_path}", f"--workdir={tmp_path / 'data'}"])
    rows = {row["runs"]: row for row in result["rows"]}
    assert set(rows) == {1, 2} and rows[2]["flops_per_step"] == pytest.approx(2 * rows[1]["flops_per_step"], rel=0.05)
    for row in rows.values():  # a whole schedule's trainings at the measured step time
        assert row["trainings_per_hour"] == pytest.approx(
            3600 * row["runs"] / (row["ms_per_step"] / 1e3 * row["train_steps"]))
    assert "| `configs/mlm.py:tiny` | fixed | 2 |" in (tmp_path / "packed.md").read_text()


def test_bench_rank_basis_gives_each_basis_its_time_and_error(tmp_path):
    from scripts import bench_rank_basis
    result = bench_rank_basis.main(["--lengths=24", "--batches=2", "--rank=4", "--iterations=1,6", "--rounds=1",
                                    f"--out={tmp_path}"])
    errors = {row["iterations"]: row["excess_error"]["max"] for row in result["rows"]}
    assert errors[0] == pytest.approx(0, abs=1e-6) and errors[6] < errors[1]
    assert all(row["ms"] > 0 and row["x_softmax"] > 0 for row in result["rows"])
    assert "| 24 | 2 | exact (eigh) |" in (tmp_path / "rank_basis.md").read_text()


def test_docs_device_stream_numbers_are_the_committed_benchmark():
    """docs/benchmarks.md's device-stream paragraph, recomputed from reports/bench/stream/train.json."""
    root = pathlib.Path(__file__).resolve().parents[1]
    docs = " ".join((root / "docs" / "benchmarks.md").read_text().split())
    rows = json.loads((root / "reports/bench/stream/train.json").read_text())["configs"]
    ms = {(row["config"], row["batches"]): row["ms_per_step"] for row in rows}
    for config, name in (("configs/mlm.py", "default"), ("configs/mlm.py:standard", "standard")):
        device, prefetch = ms[config, "device"], ms[config, "prefetch"]
        assert f"{device / prefetch:.2f}x" in docs and f"{device:.1f} against {prefetch:.1f} ms" in docs, name


_RUN = subprocess.run


def _fake_study(command, **kwargs):
    """scripts.compare as bench_packed_study calls it, its training replaced by the files a study leaves: a
    pick's candidate and two seeds, one train.log a seed (--pack=off) or a run (--pack=on)."""
    if "scripts.compare" not in command:
        return _RUN(command, **kwargs)
    root = next(arg.partition("=")[2] for arg in command if arg.startswith("--runs_dir="))
    packed = "--pack=on" in command
    for index, path in enumerate(["recall/quick/softmax/pick/lr0.01", "recall/quick/softmax/seed0",
                                  "recall/quick/softmax/seed1"]):
        workdir = pathlib.Path(root, path)
        workdir.mkdir(parents=True)
        accuracy = 0.5 + index / 10 + (1e-6 if packed else 0)
        (workdir / "eval.json").write_text(json.dumps({"metrics": {"query_accuracy": accuracy}}))
        if not packed or path.endswith(("pick/lr0.01", "seed0")):
            (workdir / "train.log").write_text("")


def test_bench_packed_study_times_each_sitting_and_holds_its_runs_to_the_first(tmp_path, monkeypatch):
    from benchmarks import packed_study
    from scripts import bench_packed_study
    monkeypatch.setattr(packed_study.subprocess, "run", _fake_study)
    study = ["--task=recall", "--only=softmax"]
    result = bench_packed_study.main([*study, f"--root={tmp_path / 'runs'}", f"--out={tmp_path}", "--seeds=2"])
    sittings = result["sittings"]
    assert [sitting["pack"] for sitting in sittings] == ["off", "on", "on", "off"]
    assert all(len(sitting["workdirs"]) == 3 for sitting in sittings)
    assert [sitting["processes"] for sitting in sittings] == [3, 2, 2, 3]
    assert [sitting["largest_differences"]["query_accuracy"] for sitting in sittings] == pytest.approx(
        [0, 1e-6, 1e-6, 0], abs=1e-9)
    unpacked = (sittings[0]["wall_s"] + sittings[3]["wall_s"]) / 2
    lines = (tmp_path / "packed_study.md").read_text().splitlines()
    assert lines[2].startswith("| 0 | off | 3 | 3 |") and lines[3].startswith("| 1 | on | 3 | 2 |")
    assert f" {unpacked / sittings[1]['wall_s']:.2f} | query_accuracy 1e-06 |" in lines[3]
    packed = (sittings[1]["wall_s"] + sittings[2]["wall_s"]) / 2
    assert f"packed is {unpacked / packed:.2f}x as fast" in lines[-1]
    for order, message in (("off,twice", "--order: twice not one of off, on"), ("on,off", "begin with off")):
        with pytest.raises(SystemExit, match=message):
            bench_packed_study.main([*study, f"--root={tmp_path / 'runs'}", f"--out={tmp_path}", f"--order={order}"])


def test_docs_packed_study_numbers_are_the_committed_benchmark():
    """docs/benchmarks.md's reading of the packed study, recomputed from reports/bench/packed_study.json."""
    root = pathlib.Path(__file__).resolve().parents[1]
    docs = " ".join((root / "docs" / "benchmarks.md").read_text().split())
    result = json.loads((root / "reports/bench/packed_study.json").read_text())
    from benchmarks.packed_study import mean_wall_s
    unpacked, packed = mean_wall_s(result, "off"), mean_wall_s(result, "on")
    processes = {sitting["pack"]: sitting["processes"] for sitting in result["sittings"]}
    assert (f"took {packed / unpacked:.2f}x the time: {packed / 60:.1f} against {unpacked / 60:.1f} minutes, "
            f"{unpacked / packed:.2f}x the trainings per hour**, in {processes['on']} processes instead of "
            f"{processes['off']}") in docs
    first = {}  # each mode's first sitting: its reruns give the same numbers
    for sitting in result["sittings"]:
        assert sitting["workdirs"] == first.setdefault(sitting["pack"], sitting)["workdirs"]
    gaps = [sitting["largest_differences"] for sitting in result["sittings"]]
    largest = {metric: max(gap[metric] for gap in gaps) for metric in gaps[0]}
    assert (f"within {largest['query_accuracy']:.2g} of query accuracy and {largest['loss']:.2g} of loss" in docs
            and "the same numbers to the last digit" in docs)


def test_docs_packed_step_numbers_are_the_committed_benchmark():
    """docs/benchmarks.md's reading of the packed step: its range of gains and of matmul shares, from
    reports/bench/packed.json."""
    root = pathlib.Path(__file__).resolve().parents[1]
    docs = " ".join((root / "docs" / "benchmarks.md").read_text().split())
    rows = json.loads((root / "reports/bench/packed.json").read_text())["rows"]
    single = {(row["config"], row["batches"]): row["trainings_per_hour"] for row in rows if row["runs"] == 1}
    gains = [row["trainings_per_hour"] / single[row["config"], row["batches"]] for row in rows if row["runs"] > 1]
    shares = {runs: [round(100 * row["fraction_of_matmul"]) for row in rows if (row["runs"] > 1) == runs]
              for runs in (False, True)}
    assert f"gains little: {min(gains):.2f}x to {max(gains):.2f}x of one run's trainings per hour" in docs
    recall = [row for row in rows if row["config"] == "configs/recall.py:quick" and row["batches"] == "prefetch"]
    gain = recall[1]["trainings_per_hour"] / recall[0]["trainings_per_hour"]
    assert f"{gain:.2f}x for recall's step with its batches prefetched" in docs
    assert (f"at {min(shares[False])}-{max(shares[False])}% of the thread's matmul rate and the packed step at "
            f"{min(shares[True])}-{max(shares[True])}%") in docs
