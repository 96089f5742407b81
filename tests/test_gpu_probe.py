"""scripts/gpu_probe.sh, the one-shot check of a lent GPU machine (benchmarks/probe.py): its smoke run, every
step at toy sizes on the CPU, records a status for every step and leaves OUT within what a lent machine gives
back (at most 8 files, none deeper than 2 folders, results.json readable); a step is stopped at its cap, a
failing one keeps its exit status, one the budget cannot fit is skipped; the tests' outcomes are read from a
log cut short; the MFU's peak is the device kind's."""
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import time
import types

import pytest

from benchmarks import linear_paths, probe
from scripts import bench_attention, bench_linear_paths, bench_train, command_line

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    base = tmp_path_factory.mktemp("probe")
    done = subprocess.run([str(ROOT / "scripts" / "gpu_probe.sh"), "--smoke", f"--out={base / 'out'}",
                           f"--work={base / 'work'}", "--wheelhouse=none"],
                          env={**os.environ, "PYTHON": sys.executable, "PROBE_STUDY": ""}, capture_output=True,
                          text=True, timeout=900)
    return base / "out", done


def test_every_step_runs_and_records_its_status(smoke):
    out, done = smoke
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    steps = json.loads((out / "results.json").read_text())["steps"]
    status = {step["name"]: step["status"] for step in steps}
    found = {step["name"]: step["result"] for step in steps}
    assert list(status) == [step.name for step in probe.STEPS]
    assert status.pop("install").startswith("skipped: --wheelhouse=none")
    assert status.pop("study") == "skipped: PROBE_STUDY is empty"
    assert set(status.values()) == {"ok"}
    assert found["versions"]["packages"]["jax"]["version"] and found["versions"]["device_count"] >= 1
    assert found["tests"]["ran"] == found["tests"]["selected"] > 0 and found["tests"]["failing"] == []
    assert found["pallas_check"]["ok"] and found["pallas_check"]["rows"]
    assert found["mlm_train"]["overrides"] == {"compute_dtype": "bfloat16"}
    assert found["mlm_train"]["configs"][0]["steps_per_sec"] > 0
    summary = (out / "summary.md").read_text()
    assert all(f"| {name} |" in summary for name in status) and "## mlm_train" in summary


def test_out_holds_at_most_8_files_none_deeper_than_2_folders(smoke):
    out, _ = smoke
    files = [path.relative_to(out) for path in out.rglob("*") if path.is_file()]
    assert {"summary.md", "results.json", "logs.txt", "mlm_train.md"} <= {str(path) for path in files}
    assert len(files) <= 8 and all(len(path.parts) <= 3 for path in files)
    names = probe.packed_names()  # every file a probe may write, the study's report too
    assert len(names) == len(set(names)) <= probe.MAX_FILES == 8


def _probe(tmp_path, budget_s: float = 60.0, steps: str = "") -> probe.Probe:
    options = types.SimpleNamespace(steps=steps, study="", wheelhouse="none", site=str(tmp_path / "site"))
    return probe.Probe(options, "smoke", str(tmp_path / "out"), str(tmp_path), dict(os.environ),
                       time.monotonic() + budget_s, "now")


def _step(name: str, cap_s: float, argv: list[str]) -> probe.Step:
    return probe.Step(name, cap_s, lambda probe, cap_s: argv, lambda probe: None)


def test_a_step_is_stopped_at_its_cap_and_a_failing_one_keeps_its_exit_status(tmp_path, monkeypatch):
    monkeypatch.setattr(probe, "MIN_STEP_S", 0)
    started = time.monotonic()
    record = probe.run_step(_probe(tmp_path), _step("sleeper", 1, ["sleep", "30"]))
    assert record["status"] == "timed out at its cap of 1 s" and time.monotonic() - started < 10
    record = probe.run_step(_probe(tmp_path), _step("failing", 30, [sys.executable, "-c", "print('said'); exit(3)"]))
    assert record["status"] == "failed (exit 3)" and (tmp_path / "failing.log").read_text() == "said\n"


def test_a_step_with_a_longer_grace_gets_a_shorter_cap_and_its_sigterm_first(tmp_path, monkeypatch):
    """The study step's grace (time to checkpoint and report after SIGTERM) comes off its cap, so that the step
    still ends within the budget; `timeout` gives it that grace before SIGKILL."""
    calls = []
    monkeypatch.setattr(probe.subprocess, "Popen", lambda argv, **kwargs: calls.append(argv) or
                        types.SimpleNamespace(wait=lambda timeout=None: 0))
    step = dataclasses.replace(_step("study", None, ["true"]), grace_s=45)
    record = probe.run_step(_probe(tmp_path, budget_s=100.0), step)
    assert calls[0][:2] == ["timeout", "--kill-after=45"] and 64 <= float(calls[0][2]) <= 65
    assert record["cap_s"] in (64, 65)
    assert {s.name: s.grace_s for s in probe.STEPS}["study"] == 45


def test_a_step_the_budget_cannot_fit_or_not_in_steps_is_skipped(tmp_path):
    record = probe.run_step(_probe(tmp_path, budget_s=probe.MIN_STEP_S - 1), _step("late", 60, ["true"]))
    assert record["status"].startswith("skipped: out of time") and not (tmp_path / "late.log").exists()
    record = probe.run_step(_probe(tmp_path, steps="versions"), _step("other", 60, ["true"]))
    assert record["status"] == "skipped: not in --steps"


def test_test_outcomes_are_read_from_a_log_cut_short(tmp_path):
    (tmp_path / "tests.log").write_text(
        "collected 10 items / 4 deselected / 6 selected\n\n"
        "tests/test_a.py::test_x[1-2] PASSED                [ 16%]\n"
        "tests/test_a.py::test_y FAILED                     [ 33%]\n"
        "tests/test_b.py::test_z SKIPPED (needs a GPU)      [ 50%]\n"
        "[gw0] [ 66%] PASSED tests/test_c.py::test_w \n"  # pytest-xdist's workers
        "[gw3] [ 83%] FAILED tests/test_c.py::test_v[a-b] \n"
        "FAILED tests/test_c.py::test_v[a-b] - assert 0\n")  # -rfE's summary: not an outcome of its own
    assert probe.read_test_outcomes(_probe(tmp_path)) == {
        "selected": 6, "ran": 5, "counts": {"PASSED": 2, "FAILED": 2, "SKIPPED": 1},
        "failing": ["tests/test_a.py::test_y", "tests/test_c.py::test_v[a-b]"], "final": None}


@pytest.mark.parametrize("kind, peak", [("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12),
                                        ("NVIDIA H200", 989e12), ("cpu", None)])
def test_the_bf16_peak_is_the_device_kinds(kind, peak):
    assert probe.bf16_peak(kind) == peak


@pytest.mark.parametrize("script, arguments", [(bench_linear_paths, "linear_paths"), (bench_attention, "attention"),
                                               (bench_train, "train")])
def test_the_full_runs_arguments_are_flags_of_its_scripts(script, arguments):
    """What the smoke run cannot check, the sizes of the run on a GPU: a flag the script lacks, or a value its
    flag refuses, ends the parse with status 2."""
    options = command_line.parse(script.FLAGS, list(getattr(probe.SIZES["full"], arguments)), script.__doc__)
    if script is bench_linear_paths:
        assert [column["implementation"] for column in linear_paths.parse_columns(options.columns)] == [
            "xla", "pallas", "pallas", "pallas"]



def test_the_study_step_trains_the_rank_or_shape_arms_at_512_in_bfloat16_by_default(tmp_path):
    from scripts import gpu_probe

    gpu_probe.FLAGS.unparse_flags()
    gpu_probe.FLAGS(["gpu_probe"])
    # The study's own default is $PROBE_STUDY's, else mlm:rank_or_shape: named here, whatever this shell sets.
    defaults = types.SimpleNamespace(study="mlm:rank_or_shape", study_runs=gpu_probe.FLAGS.study_runs,
                                     study_seeds=gpu_probe.FLAGS.study_seeds, study_dtype=gpu_probe.FLAGS.study_dtype,
                                     study_jobs=gpu_probe.FLAGS.study_jobs)
    bfloat16 = types.SimpleNamespace(options=defaults, path=lambda *parts: str(tmp_path.joinpath(*parts)), env={})
    command = probe._study(bfloat16, 60)
    # Apart from the CPU's runs: nothing published is read, and matmuls keep the GPU's default.
    assert bfloat16.env == {}
    study_dirs = [f"--compilation_cache={tmp_path / 'compilation_cache'}", f"--runs_dir={tmp_path / 'study' / 'runs'}",
                  f"--reports_dir={tmp_path / 'study'}", "--", "--config.wandb.mode=disabled"]
    assert command[command.index("-m") + 1:] == [
        "scripts.compare", "--task=mlm", "--preset=rank_or_shape", "--only=softmax_L512,linear_L512", "--seeds=2",
        *study_dirs, "--config.compute_dtype=bfloat16"]
    from configs import mlm
    assert {"softmax_L512", "linear_L512"} <= {run.name for run in mlm.STUDIES["rank_or_shape"]().runs}
    # Zoology's cells, as the docstring gives them: every run, one seed, the config's float32.
    zoology = types.SimpleNamespace(study="recall:zoology", study_runs="", study_seeds=1, study_dtype="", study_jobs=4)
    float32 = types.SimpleNamespace(options=zoology, path=lambda *parts: str(tmp_path.joinpath(*parts)), env={})
    command = probe._study(float32, 60)
    # Float32 runs join the CPU's: beside the seeds the published runs.json records, at the highest matmul precision.
    assert command[command.index("-m") + 1:] == [
        "scripts.compare", "--task=recall", "--preset=zoology", "--jobs=4", "--seeds=1", "--from_published",
        *study_dirs]
    assert float32.env == {"JAX_DEFAULT_MATMUL_PRECISION": "highest"}
    own_seeds = types.SimpleNamespace(options=types.SimpleNamespace(**{**vars(zoology), "study_seeds": 0}),
                                      path=float32.path, env={})
    assert not any(arg.startswith("--seeds") for arg in probe._study(own_seeds, 60))  # each run's own
    bare = types.SimpleNamespace(**{**vars(zoology), "study": "rank_or_shape"})
    with pytest.raises(probe.Refused, match="--study=rank_or_shape: name the task too, task:preset"):
        probe._study(types.SimpleNamespace(options=bare, path=str, env={}), 60)


def _study_folder(tmp_path):
    """A study step's folder: a report folder and one run's workdir with its checkpoints."""
    folder = tmp_path / "study" / "recall" / "zoology"
    folder.mkdir(parents=True)
    for name in ("report.md", "results.json", "runs.json", "curves.png"):
        (folder / name).write_text(name)
    workdir = tmp_path / "study" / "runs" / "recall" / "zoology" / "softmax" / "seed0"
    (workdir / "checkpoints" / "100").mkdir(parents=True)
    (workdir / "checkpoints" / "100" / "state").write_text("weights")
    for name in ("config.json", "eval.json", "metrics.jsonl"):
        (workdir / name).write_text(name)
    return "runs/recall/zoology/softmax/seed0"


def test_the_study_comes_back_as_one_file_without_checkpoints_and_resumes(tmp_path):
    """Its report folder and its runs' workdirs but their checkpoints; unpacked by --study_resume_from where the
    next probe's scripts.compare looks (--runs_dir=<study>/runs, --reports_dir=<study>)."""
    run = _probe(tmp_path)
    run.options.budget_s = 60.0
    workdir = _study_folder(tmp_path)
    probe.pack(run)
    with tarfile.open(tmp_path / "out" / "study.tgz") as archive:
        names = set(archive.getnames())
        assert archive.extractfile("study/recall/zoology/results.json").read() == b"results.json"
    assert {f"study/recall/zoology/{name}" for name in ("curves.png", "report.md", "results.json", "runs.json")} <= names
    assert {f"study/{workdir}/{name}" for name in ("config.json", "eval.json", "metrics.jsonl")} <= names
    assert [name for name in names if "checkpoints" in name] == []
    assert os.listdir(tmp_path / "out").count("study.tgz.partial") == 0
    probe.resume_study(str(tmp_path / "out" / "study.tgz"), str(tmp_path / "next"))
    assert (tmp_path / "next" / workdir / "eval.json").read_text() == "eval.json"
    assert (tmp_path / "next" / "recall" / "zoology" / "runs.json").read_text() == "runs.json"


def test_a_step_with_reports_packs_while_it_runs(tmp_path, monkeypatch):
    """OUT is written again every PACK_EVERY_S while the step runs, not only once it ends."""
    run = _probe(tmp_path)
    run.options.budget_s = 60.0
    packed = []
    monkeypatch.setattr(probe, "PACK_EVERY_S", 0.2)
    monkeypatch.setattr(probe, "pack", lambda probe: packed.append(time.monotonic()))
    step = probe.Step("study", 30, lambda probe, cap: ["sleep", "1"], lambda probe: None,
                      reports=(("study", "study.tgz"),))
    assert probe.run_step(run, step)["status"] == "ok"
    assert len(packed) >= 3


def test_docs_gpu_numbers_are_the_committed_probe_results():
    """docs/benchmarks.md's account of the H200 probe, recomputed from reports/gpu/probe/results.json."""
    root = pathlib.Path(__file__).resolve().parents[1]
    docs = " ".join((root / "docs" / "benchmarks.md").read_text().split())
    steps = {step["name"]: step for step in json.loads((root / "reports/gpu/probe/results.json").read_text())["steps"]}
    rows = steps["attention"]["result"]["rows"]
    for causal, lengths in ((False, (2048, 8192, 32768)), (True, (2048, 4096, 8192, 32768))):
        for length in lengths:
            ms = {row["kind"]: row["ms"] for row in rows if row["causal"] == causal and row["length"] == length}
            assert f"{ms['softmax'] / ms['linear']:.2f}x at {length:,}" in docs, (causal, length)
    times = steps["pallas_times"]["result"]["rows"]
    xla_ms = {row["length"]: row["ms"] for row in times if row["kind"].startswith("xla")}
    for chunk in (32, 64, 128):
        speeds = [xla_ms[row["length"]] / row["ms"] for row in times if row["kind"] == f"pallas C={chunk}"]
        assert f"chunk {chunk} {min(speeds):.2f}-{max(speeds):.2f}x" in docs, chunk
    train = steps["mlm_train"]["result"]["configs"][0]
    assert (f"{train['ms_per_step']:.2f} ms per step, {train['steps_per_sec']:.0f} steps/s, "
            f"{train['tokens_per_sec']:,.0f} tokens/s, {100 * train['mfu']:.1f}%") in docs
    prefetched = steps["mlm_train"]["result"]["configs"][1]
    assert prefetched["batches"] == "prefetch" and f"prefetched, {prefetched['ms_per_step']:.2f} ms per step" in docs
    check = steps["pallas_check"]["result"]
    worst = {dtype: max(row["max_error"] for row in check["rows"] if row["dtype"] == dtype) for dtype in
             ("float32", "bfloat16")}
    assert check["ok"] and (f"all {len(check['rows'])} width x chunk x dtype cases agree" in docs
                            and f"{worst['float32']:.1e} of the output's scale in float32 and "
                                f"{worst['bfloat16']:.1e} in bfloat16" in docs)
    tests = steps["tests"]["result"]
    assert f"ran {tests['ran']} of the {tests['selected']} accelerator tests, {tests['counts']['PASSED']} passed" in docs


def test_the_smoke_study_step_trains_the_tiny_study_whatever_study_is_named(tmp_path):
    """A smoke run on a CPU trains mlm's tiny study (two runs, one seed), not the lent machine's study at L = 512,
    which no CPU finishes in the smoke's budget."""
    named = types.SimpleNamespace(study="mlm:rank_or_shape", study_runs="softmax_L512", study_seeds=2,
                                  study_dtype="bfloat16", study_jobs=0)
    smoke = types.SimpleNamespace(options=named, size="smoke", path=lambda *parts: str(tmp_path.joinpath(*parts)),
                                  env={})
    command = probe._study(smoke, 60)
    assert command[command.index("scripts.compare") + 1:] == [
        "--task=mlm", "--preset=tiny", "--seeds=1", "--from_published",
        f"--compilation_cache={tmp_path / 'compilation_cache'}", f"--runs_dir={tmp_path / 'study' / 'runs'}",
        f"--reports_dir={tmp_path / 'study'}", "--", "--config.wandb.mode=disabled"]
