"""The one-shot check of a lent GPU machine, the work of scripts/gpu_probe.sh (`python -m scripts.gpu_probe`,
whose docstring says what each step measures): the steps in priority order, each one command capped by
`timeout` within the probe's budget, and after every step the folder OUT rewritten with what the steps so far
found, in at most 8 files none deeper than 2 folders (what a lent machine gives back): summary.md,
results.json, logs.txt and the benchmarks' own reports. This process imports no JAX: the steps' processes
take the device in turn, and an install that breaks JAX still leaves a summary saying so."""
import dataclasses
import datetime
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import types
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY, RESULTS, LOGS = "summary.md", "results.json", "logs.txt"
MAX_FILES = 8  # what a lent machine gives back from OUT
LOG_KEPT = (3_000, 12_000)  # the characters of a step's log that logs.txt keeps: its head and its tail
MIN_STEP_S = 15  # a step the budget leaves less than this is skipped
TEST_WORKERS = 4  # pytest-xdist's processes for the accelerator tests on a lent machine
KILL_AFTER_S = 10  # a step at its cap gets SIGTERM, then SIGKILL this much later
# OUT is written again this often while a step with reports runs: a study's finished runs come back even where the
# machine is taken before the step ends.
PACK_EVERY_S = 30
# What a folder packed into OUT leaves out: the runs' checkpoints and profiles (what a report or a resumed study needs
# is each run's config.json, eval.json, metrics.jsonl and spectra.json).
UNPACKED_FOLDERS = ("checkpoints", "profile")
PER_TEST_TIMEOUT_S = 90
GPU_TEST_FILES = ("tests/test_fused_attention.py", "tests/test_linear_paths.py", "tests/test_mixed_precision.py")
# Dense bfloat16 peak FLOP/s of NVIDIA's datasheets (without sparsity), by a part of the device kind JAX
# reports, the first that matches ("NVIDIA H100 80GB HBM3" is the SXM part).
BF16_DENSE_PEAK = (("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12), ("H200", 989e12),
                   ("B200", 2250e12), ("A100", 312e12))


@dataclasses.dataclass(frozen=True)
class Sizes:
    """A probe's budget and its steps' arguments: the real run's, or the smoke run's toy sizes."""
    budget_s: float
    tests: tuple[str, ...]  # pytest's paths: the GPU-specific files first
    linear_paths: tuple[str, ...]  # python -m scripts.bench_linear_paths
    attention: tuple[str, ...]  # python -m scripts.bench_attention
    train: tuple[str, ...]  # python -m scripts.bench_train
    # The study step's in place of --study, --study_runs, --study_seeds, --study_dtype, --study_jobs (None: theirs):
    # the smoke run's is the task's tiny study, whatever study a lent machine would train.
    study: dict | None = None


SIZES = {
    "full": Sizes(
        budget_s=450, tests=(*GPU_TEST_FILES, "tests"),
        linear_paths=("--columns=xla:0,pallas:32,pallas:64,pallas:128", "--modes=causal", "--batch=32", "--heads=4",
                      "--head_dim=64", "--lengths=1024,2048,4096,8192,16384", "--repeats=3", "--max_memory_gb=40"),
        attention=("--kinds=softmax,linear", "--dtype=bfloat16", "--implementation=cudnn", "--masks=none",
                   "--batch=32", "--heads=4", "--head_dim=64", "--lengths=2048,4096,8192,16384,32768", "--repeats=3",
                   "--max_memory_gb=40"),
        # The default model and the one sized for MFU (configs/mlm.py:mfu), 5 timed rounds of 100 steps after an
        # untimed one, the host stream against the device stream's batches.
        train=("--configs=configs/mlm.py,configs/mlm.py:mfu", "--overrides=dataset.seq_len=512,compute_dtype=bfloat16",
               "--batches=fixed,prefetch,device", "--rounds=5", "--steps_per_round=100")),
    "smoke": Sizes(
        budget_s=240, tests=("tests/test_prefetch.py",),
        linear_paths=("--columns=xla:16,pallas:16", "--modes=causal", "--batch=2", "--heads=2", "--head_dim=16",
                      "--lengths=32", "--repeats=1"),
        attention=("--kinds=softmax,linear", "--dtype=bfloat16", "--implementation=auto", "--masks=none", "--batch=2",
                   "--heads=2", "--head_dim=16", "--lengths=32", "--repeats=1"),
        train=("--configs=configs/mlm.py:tiny", "--overrides=compute_dtype=bfloat16", "--batches=fixed", "--rounds=1",
               "--steps_per_round=2"),
        study={"study": "mlm:tiny", "study_runs": "", "study_seeds": 1, "study_dtype": "", "study_jobs": 0}),
}


class Skipped(Exception):
    """A step that does not run, and why."""


class Refused(Exception):
    """A step that cannot run as asked (a failure, unlike Skipped), and why."""


@dataclasses.dataclass
class Probe:
    """One run of the probe: its settings, and the records of the steps so far."""
    options: object  # scripts/gpu_probe.py's flags
    size: str  # "full" or "smoke"
    out: str
    work: str  # the steps' own outputs and logs
    env: dict  # of every step's process
    deadline: float  # time.monotonic() by which the steps end
    started: str  # UTC, ISO 8601
    records: list = dataclasses.field(default_factory=list)

    def path(self, *parts: str) -> str:
        return os.path.join(self.work, *parts)


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    cap_s: float | None  # None: what the budget leaves
    command: Callable[[Probe, float], list[str]]  # given the cap; raises Skipped or Refused
    collect: Callable[[Probe], dict | None]  # what the step found, for results.json; None if nothing
    section: Callable[[Probe, dict], list[str]] | None = None  # its lines in summary.md, from what it found
    # (a glob under the work folder, its name in OUT); a .tgz holds the first match's folder (the match itself where
    # it is one) without UNPACKED_FOLDERS
    reports: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    grace_s: float = KILL_AFTER_S  # from SIGTERM at its cap to SIGKILL: the more it takes off the cap


# --- the steps' commands and what each found ---------------------------------------------------------------


def _module(name: str, *arguments: str) -> list[str]:
    """`python -m name arguments`, in this process's Python ($PYTHON of gpu_probe.sh)."""
    return [sys.executable, "-m", name, *arguments]


def _wheels(probe: Probe) -> list[str]:
    return sorted(glob.glob(os.path.join(REPOSITORY, probe.options.wheelhouse, "*.whl")))


def _install(probe: Probe, cap_s: float) -> list[str]:
    wheelhouse = probe.options.wheelhouse
    if wheelhouse == "none":
        raise Skipped("--wheelhouse=none: the interpreter's own packages")
    if not (wheels := _wheels(probe)):
        raise Refused(f"no wheels in {wheelhouse}/: run `make wheelhouse` where pip reaches PyPI and carry it")
    site = probe.options.site
    shutil.rmtree(site, ignore_errors=True)
    probe.env["PYTHONPATH"] = os.pathsep.join(filter(None, [site, probe.env.get("PYTHONPATH")]))
    return _module("pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
                   "--upgrade", "--target", site, *wheels)


def _versions(probe: Probe, cap_s: float) -> list[str]:
    return _module("scripts.gpu_probe", "--check=versions", f"--json={probe.path('versions.json')}")


def _tests(probe: Probe, cap_s: float) -> list[str]:
    # pyproject's addopts (-q) dropped: -v lists each test's outcome as it ends, read if the cap stops the run
    per_test = [f"--timeout={PER_TEST_TIMEOUT_S}"] if importlib.util.find_spec("pytest_timeout") else []
    # One process got through a quarter of the accelerator tests in 150 s on an H200, most of it compiling;
    # four share the GPU (conftest turns preallocation off) and its 16 cores.
    # Whole files to each worker in the order given: the GPU-specific files first, before a cap can stop the run.
    workers = (["-n", str(TEST_WORKERS), "--dist", "loadfile"]
               if probe.size != "smoke" and importlib.util.find_spec("xdist") else [])
    return _module("pytest", "-m", "accelerator", "-p", "no:cacheprovider", "-o", "addopts=", "-v", "-rfE",
                   *workers, *per_test, *SIZES[probe.size].tests)


def _pallas_check(probe: Probe, cap_s: float) -> list[str]:
    return _module("scripts.gpu_probe", "--check=pallas", f"--json={probe.path('pallas_check.json')}",
                   f"--deadline_s={max(cap_s - 30, 1):.0f}", *(["--smoke"] if probe.size == "smoke" else []))


def _bench(script: str, arguments: str, folder: str, workdir: bool = False):
    def command(probe: Probe, cap_s: float) -> list[str]:
        extra = [f"--workdir={probe.path(folder)}"] if workdir else []
        return _module(script, *getattr(SIZES[probe.size], arguments), *extra, f"--out={probe.path(folder)}")
    return command


def _pack_folder(folder: str, path: str) -> None:
    """`folder` as the archive `path` (its top folder named after it, .tgz taken off) without UNPACKED_FOLDERS,
    written beside it first, so that OUT never holds half an archive."""
    partial = f"{path}.partial"
    skipped = lambda info: None if set(info.name.split("/")) & set(UNPACKED_FOLDERS) else info
    with tarfile.open(partial, "w:gz") as archive:
        archive.add(folder, arcname=os.path.basename(path).removesuffix(".tgz"), filter=skipped)
    os.replace(partial, path)


def resume_study(archive: str, study_folder: str) -> None:
    """Unpacks a study.tgz an earlier probe brought back into `study_folder`: its runs' workdirs under runs/, each
    finished one skipped by scripts.compare (studies/jobs.py's is_finished needs no checkpoint), and its report
    folders with runs.json, which the new report merges."""
    with tarfile.open(archive) as packed:
        members = [member for member in packed.getmembers() if member.name.startswith("study/")]
        for member in members:
            member.name = member.name.removeprefix("study/")
        packed.extractall(study_folder, members=members, filter="data")


def _study(probe: Probe, cap_s: float) -> list[str]:
    """The study --study (task:preset): its runs --study_runs (all where empty),
    --study_seeds seeds each (each run's own where 0), in --study_dtype (the config's own where empty), --study_jobs
    at once (compare's default, one per GPU, where 0); in a smoke run, the toy study its Sizes name in its place
    (PROBE_STUDY empty: none). In float32 its runs join the same study's CPU runs: it starts from the published
    runs.json (compare's --from_published) and its matmuls run at the highest precision (a GPU's default is TF32's
    10-bit mantissa)."""
    if not probe.options.study:
        raise Skipped("PROBE_STUDY is empty")
    sized = SIZES[getattr(probe, "size", "full")].study
    options = types.SimpleNamespace(**sized) if sized else probe.options
    task, _, preset = options.study.rpartition(":")
    if not task:
        raise Refused(f"--study={options.study}: name the task too, task:preset")
    if resumed := getattr(probe.options, "study_resume_from", ""):
        resume_study(resumed, probe.path("study"))
    runs = [f"--only={options.study_runs}"] if options.study_runs else []
    dtype = [f"--config.compute_dtype={options.study_dtype}"] if options.study_dtype else []
    jobs = [f"--jobs={options.study_jobs}"] if options.study_jobs else []
    seeds = [f"--seeds={options.study_seeds}"] if options.study_seeds else []
    joins = []
    if options.study_dtype in ("", "float32"):  # its runs join the CPU's: the published seeds stay, matmuls exact
        joins = ["--from_published"]
        probe.env["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"  # the last step: no later one inherits it
    # The compilation cache outside the study's folder, which comes back packed.
    return _module("scripts.compare", f"--task={task}", f"--preset={preset}", *runs, *jobs, *seeds, *joins,
                   f"--compilation_cache={probe.path('compilation_cache')}", f"--runs_dir={probe.path('study', 'runs')}",
                   f"--reports_dir={probe.path('study')}", "--", "--config.wandb.mode=disabled", *dtype)


def _json(*parts: str):
    def collect(probe: Probe) -> dict | None:
        path = probe.path(*parts)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)
    return collect


def read_test_outcomes(probe: Probe) -> dict | None:
    """The counts of the tests' outcomes and the failing ones, from pytest's -v log (whole or cut short)."""
    text = _read(probe.path("tests.log"))
    collected = re.search(r"collected (\d+) items?(?: / \d+ deselected)?(?: / (\d+) selected)?", text)
    outcome_names = "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS"
    outcomes = re.findall(rf"^(tests/\S+) ({outcome_names})\b", text, re.MULTILINE) + [
        (test, outcome) for outcome, test in  # xdist's -v: "[gw0] [ 12%] PASSED tests/..."
        re.findall(rf"^\[gw\d+\] \[\s*\d+%\] ({outcome_names}) (tests/\S+)", text, re.MULTILINE)]
    final = re.findall(r"^=+ (.+ in [\d.]+s.*?) =+$", text, re.MULTILINE)
    counts = {}
    for _, outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    return {"selected": int(collected.group(2) or collected.group(1)) if collected else None,
            "ran": len(outcomes), "counts": counts,
            "failing": [test for test, outcome in outcomes if outcome in ("FAILED", "ERROR")],
            "final": final[-1] if final else None}


def bf16_peak(device_kind: str) -> float | None:
    return next((peak for part, peak in BF16_DENSE_PEAK if part in device_kind), None)


def _training_speed(probe: Probe) -> dict | None:
    """bench_train's result and, per row, steps/s and the model FLOP utilisation against the bf16 peak."""
    train = _json("mlm_train", "train.json")(probe)
    if train is None:
        return None
    peak = bf16_peak(train["machine"]["device"])
    for row in train["configs"]:
        row["steps_per_sec"] = 1e3 / row["ms_per_step"]
        row["bf16_peak_flops"] = peak
        # The hand count where bench_train has one (MLM: XLA's counts cuDNN's attention as 0), else XLA's.
        rate = row.get("model_flops_per_sec") or row["flops_per_sec"]
        row["mfu"] = None if peak is None or rate is None else rate / peak
    return train


# --- running the steps -------------------------------------------------------------------------------------


def _status(exit_code: int, cap_s: float) -> str:
    if exit_code == 0:
        return "ok"
    if exit_code in (124, 137):  # timeout's own: the cap passed (137: SIGKILL after KILL_AFTER_S more)
        return f"timed out at its cap of {cap_s:.0f} s"
    return f"failed (exit {exit_code})"


def run_step(probe: Probe, step: Step) -> dict:
    """Runs `step` under `timeout` at its cap (or what the budget leaves), its output to <work>/<name>.log;
    its record: name, status ("ok", "failed ...", "timed out ...", "skipped: why"), seconds, cap, command and
    what it found."""
    record = {"name": step.name, "status": None, "seconds": 0.0, "cap_s": None, "command": None, "result": None}
    left = probe.deadline - time.monotonic()
    cap_s = (left if step.cap_s is None else min(step.cap_s, left)) - (step.grace_s - KILL_AFTER_S)
    try:
        if probe.options.steps and step.name not in probe.options.steps.split(","):
            raise Skipped("not in --steps")
        if cap_s < MIN_STEP_S:
            raise Skipped(f"out of time: {max(left, 0):.0f} s of the budget left")
        argv = step.command(probe, cap_s)
    except Skipped as why:
        return {**record, "status": f"skipped: {why}"}
    except Refused as why:
        return {**record, "status": f"failed: {why}"}
    started = time.monotonic()
    with open(probe.path(f"{step.name}.log"), "w") as log:
        process = subprocess.Popen(["timeout", f"--kill-after={step.grace_s:.0f}", f"{cap_s:.0f}", *argv], stdout=log,
                                   stderr=subprocess.STDOUT, env={**probe.env, **dict(step.env)}, cwd=REPOSITORY)
        while True:
            try:
                exit_code = process.wait(timeout=PACK_EVERY_S if step.reports else None)
                break
            except subprocess.TimeoutExpired:
                pack(probe)
    record.update(status=_status(exit_code, cap_s), seconds=round(time.monotonic() - started, 1),
                  cap_s=round(cap_s), command=" ".join(argv))
    try:
        record["result"] = step.collect(probe)
    except Exception as error:  # noqa: BLE001 - a step's output it cannot read is part of what it found
        record["result"] = {"error": f"reading what {step.name} wrote: {type(error).__name__}: {error}"}
    return record


def start(options) -> Probe:
    size = "smoke" if options.smoke else "full"
    budget_s = options.budget_s or SIZES[size].budget_s
    work = options.work or tempfile.mkdtemp(prefix="gpu-probe-")
    os.makedirs(work, exist_ok=True)
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    return Probe(options, size, options.out, os.path.abspath(work), env, time.monotonic() + budget_s,
                 datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def run(options) -> int:
    """Every step in turn, OUT rewritten after each; 0 if none failed or timed out, else 1."""
    probe = start(options)
    print(f"gpu probe ({probe.size}): results in {probe.out}, the steps' own files in {probe.work}", flush=True)
    for step in STEPS:
        record = run_step(probe, step)
        probe.records.append(record)
        pack(probe)
        print(f"{step.name}: {record['status']} ({record['seconds']} s)", flush=True)
        if record["status"] != "ok" and record["command"]:
            print(_kept(_read(probe.path(f"{step.name}.log")), (0, 3_000)), flush=True)
    print(f"summary: {os.path.join(probe.out, SUMMARY)}")
    return 0 if all(record["status"] == "ok" or record["status"].startswith("skipped")
                    for record in probe.records) else 1


# --- OUT: the files that come back --------------------------------------------------------------------------


def _read(path: str) -> str:
    if not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        return f.read()


def _kept(text: str, kept: tuple[int, int] = LOG_KEPT) -> str:
    """`text` cut to its first and last characters (LOG_KEPT), saying how much was cut."""
    head, tail = kept
    if len(text) <= head + tail:
        return text
    return f"{text[:head]}\n[... {len(text) - head - tail:,} characters cut ...]\n{text[len(text) - tail:]}"


def packed_names() -> list[str]:
    """Every file the probe may write in OUT."""
    return [SUMMARY, RESULTS, LOGS, *(name for step in STEPS for _, name in step.reports)]


def pack(probe: Probe) -> None:
    """OUT: summary.md, results.json, logs.txt and the reports of the steps that wrote them."""
    os.makedirs(probe.out, exist_ok=True)
    results = {"probe": {"size": probe.size, "started": probe.started, "argv": sys.argv, "python": sys.executable,
                         "budget_s": probe.options.budget_s or SIZES[probe.size].budget_s, "work": probe.work},
               "steps": probe.records}
    logs = "".join(f"===== {record['name']}: {record['status']} ({record['seconds']} s)\n$ {record['command']}\n"
                   f"{_kept(_read(probe.path(record['name'] + '.log')))}\n"
                   for record in probe.records if record["command"])
    for name, text in ((RESULTS, json.dumps(results, indent=1)), (LOGS, logs), (SUMMARY, summary(probe))):
        with open(os.path.join(probe.out, name), "w") as f:
            f.write(text)
    for step in STEPS:
        for pattern, name in step.reports:
            if not (found := sorted(glob.glob(probe.path(pattern), recursive=True))):
                continue
            if name.endswith(".tgz"):  # the first match's folder, in one file
                _pack_folder(found[0] if os.path.isdir(found[0]) else os.path.dirname(found[0]),
                             os.path.join(probe.out, name))
            else:
                shutil.copyfile(found[0], os.path.join(probe.out, name))


# --- summary.md ----------------------------------------------------------------------------------------------


def _machine_line(versions: dict | None) -> str:
    if not versions:
        return "Machine and versions: not read (see the step `versions`)."
    packages = versions["packages"]
    stack = ", ".join(f"{name} {(packages.get(name) or {}).get('version', '-')}"
                      for name in ("jax", "jaxlib", "flax", "numpy", "triton"))
    return (f"{versions['device_count']} x {versions['device_kind']} ({versions['backend']}); Python "
            f"{versions['python']}, {stack}.")


def _versions_section(probe: Probe, versions: dict) -> list[str]:
    off = versions["not_as_pinned"]
    lines = ["Not at requirements.txt's pin: " + (", ".join(
        f"{name} {found['installed'] or 'not installed'} (pinned {found['pinned']})" for name, found in off.items())
        or "none") + "."]
    check = versions["pip_check"]
    lines += [f"\n`pip check` (exit {check['exit']}), its first lines:\n", "```", *check["lines"][:12], "```"]
    return lines


def _tests_section(probe: Probe, tests: dict) -> list[str]:
    counts = ", ".join(f"{count} {outcome.lower()}" for outcome, count in sorted(tests["counts"].items()))
    lines = [f"{tests['ran']} of {tests['selected']} selected tests ran: {counts or 'none'}; "
             + (f"pytest: {tests['final']}." if tests["final"] else "stopped before pytest's last line.")]
    return lines + [f"- failing: `{test}`" for test in tests["failing"][:30]]


def _pallas_check_section(probe: Probe, check: dict) -> list[str]:
    mode = "compiled for the GPU" if check["compiled"] else "in interpret mode (no GPU)"
    lines = [f"Pallas against the XLA path, {mode}, L = {check['length']}, B = 2, H = 4; error: the largest "
             f"|pallas - xla| over the largest |xla|, of the output and the three gradients "
             "(tolerance: " + ", ".join(f"{limit:g} in {dtype}" for dtype, limit in check["tolerance"].items())
             + ").\n", "| m | Dv | C | dtype | error | ok | s |", "|---:|---:|---:|---|---:|---|---:|"]
    for row in check["rows"]:
        error = f"{row['max_error']:.1e}" if "max_error" in row else row["error"].splitlines()[0][:120]
        lines.append(f"| {row['feature_dim']} | {row['value_dim']} | {row['chunk']} | {row['dtype']} | {error} | "
                     f"{'yes' if row['ok'] else '**no**'} | {row['seconds']} |")
    return lines + ([f"\nNot run (out of time): {len(check['not_run'])} cases."] if check["not_run"] else [])


def _from_heading(text: str) -> list[str]:
    """A report's lines from its first `## ` heading on, the headings one level down."""
    lines = text.splitlines()
    first = next((index for index, line in enumerate(lines) if line.startswith("## ")), len(lines))
    return [f"#{line}" if line.startswith("#") else line for line in lines[first:]]


def _scaled(value: float | None, scale: float, form: str) -> str:
    return "-" if value is None else format(value / scale, form)


def _training_section(probe: Probe, train: dict) -> list[str]:
    lines = ["bench_train on " + ", ".join(f"`{row['config']}`" for row in train["configs"][:1]) + " with "
             + (", ".join(f"`{field}={value}`" for field, value in train["overrides"].items()) or "its defaults")
             + " (the stdlib corpus unless the config names another). GFLOP/step: XLA's cost analysis of the "
             "compiled step (benchmarks/common.py), which counts cuDNN's and Pallas's kernels as 0; model GFLOP/step: "
             "the matmuls counted by hand from the config (benchmarks/model_flops.py, attention included), from "
             "which TFLOP/s and the MFU against the dense bfloat16 peak of the device kind are taken where it has "
             "one.\n",
             "| batches | ms/step | steps/s | tokens/s | GFLOP/step | model GFLOP/step | TFLOP/s | bf16 peak TFLOP/s "
             "| MFU |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in train["configs"]:
        cells = [row["batches"], f"{row['ms_per_step']:.2f}", f"{row['steps_per_sec']:.1f}",
                 f"{row['tokens_per_sec']:,.0f}", _scaled(row["flops_per_step"], 1e9, ".2f"),
                 _scaled(row.get("model_flops_per_step"), 1e9, ".2f"),
                 _scaled(row.get("model_flops_per_sec") or row["flops_per_sec"], 1e12, ".2f"),
                 _scaled(row["bf16_peak_flops"], 1e12, ".0f"),
                 _scaled(row["mfu"], 0.01, ".2f") + ("%" if row["mfu"] is not None else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _pallas_times_section(probe: Probe, times: dict) -> list[str]:
    return [f"Times of the causal value and gradient at {_shape(times)}; pallas_times.md in full:\n",
            *_from_heading(_read(probe.path("pallas_times", "linear_paths.md")))]


def _attention_section(probe: Probe, attention: dict) -> list[str]:
    report = _read(probe.path("attention", "attention.md"))
    return [f"softmax ({attention['settings']['implementation']}) against linear at {_shape(attention)}, "
            f"{attention['settings']['dtype']}; attention.md in full:\n",
            *(line for line in report.splitlines() if line.startswith("**"))]


def _shape(result: dict) -> str:
    settings = result["settings"]
    return (f"B = {settings['batch']}, H = {settings['heads']} (B*H = {settings['batch'] * settings['heads']}), "
            f"D = {settings['head_dim']}")


def summary(probe: Probe) -> str:
    versions = next((record["result"] for record in probe.records if record["name"] == "versions"), None)
    used = sum(record["seconds"] for record in probe.records)
    lines = [f"# GPU probe, {probe.started}" + (" (smoke: toy sizes)" if probe.size == "smoke" else ""), "",
             _machine_line(versions if versions and "error" not in versions else None),
             f"{used:.0f} s of the steps' budget used; results.json holds every number, logs.txt each step's log.",
             "", "| step | status | seconds | cap s |", "|---|---|---:|---:|"]
    lines += [f"| {record['name']} | {record['status']} | {record['seconds']} | {record['cap_s'] or '-'} |"
              for record in probe.records]
    for step, record in zip(STEPS, probe.records):
        if section := _section(probe, step, record):
            lines += ["", f"## {record['name']}", "", *section]
    return "\n".join(lines) + "\n"


def _section(probe: Probe, step: Step, record: dict) -> list[str]:
    """A step's lines in summary.md; none for a step that found nothing."""
    result = record["result"]
    if not result or step.section is None:
        return []
    if "error" in result:
        return [result["error"]]
    try:
        return step.section(probe, result)
    except Exception as error:  # noqa: BLE001 - the other steps' summary still gets written
        return [f"(no summary of what it found: {type(error).__name__}: {error}; see results.json)"]


STEPS = (
    Step("install", 90, _install, lambda probe: {"wheels": [os.path.basename(path) for path in _wheels(probe)]}),
    Step("versions", 60, _versions, _json("versions.json"), _versions_section),
    Step("tests", 150, _tests, read_test_outcomes, _tests_section, env=(("TEST_ACCELERATOR", "1"),)),
    Step("pallas_check", 90, _pallas_check, _json("pallas_check.json"), _pallas_check_section),
    Step("pallas_times", 80, _bench("scripts.bench_linear_paths", "linear_paths", "pallas_times"),
         _json("pallas_times", "linear_paths.json"), _pallas_times_section,
         (("pallas_times/linear_paths.md", "pallas_times.md"),)),
    Step("attention", 70, _bench("scripts.bench_attention", "attention", "attention"),
         _json("attention", "attention.json"), _attention_section,
         (("attention/attention.md", "attention.md"), ("attention/attention.png", "attention.png"))),
    Step("mlm_train", 120, _bench("scripts.bench_train", "train", "mlm_train", workdir=True), _training_speed,
         _training_section, (("mlm_train/train.md", "mlm_train.md"),)),
    # The hook of a later study on a lent machine: PROBE_STUDY=task:preset trains it in the time left; its
    # report folder (report.md, results.json, runs.json, plots) and its runs' workdirs without checkpoints come back
    # as one file, every PACK_EVERY_S while it runs; --study_resume_from=<that file> skips its finished runs.
    # Stopped at its cap, it checkpoints its runs and reports those that finished (studies/runner.py): 45 s.
    Step("study", None, _study, lambda probe: None, reports=(("study", "study.tgz"),), grace_s=45),
)
