"""Trains a study's grid of attention kinds over several seeds in parallel, then writes its report.

  python -m scripts.compare --task=mlm                                  # preset quick
  python -m scripts.compare --task=translation --preset=kinds --jobs=2
  python -m scripts.compare --task=mlm --only=softmax,linear --seeds=1 -- --config.wandb.mode=disabled

From the repository root. The grids are in configs/studies.py. Each (run, seed) trains in its own process
and workdir, <runs_dir>/<task>/<preset>/<run>/seed<k> (its log in train.log there); one whose eval.json is
at the config's last step is skipped, so an interrupted study resumes. Arguments after `--` go to every
train.py run. The report (tables, plots) goes to <reports_dir>/<task>/report.md for the quick preset and
to <reports_dir>/<task>/<preset>/report.md for the others, from every run that finished.
"""
import concurrent.futures
import os
import queue
import shlex
import subprocess
import sys
import time

from absl import flags

import tasks
from analysis import plots, report
from configs import grids, studies
from scripts import command_line
from training import devices
from training.metrics import read_metrics
from training.workdirs import CONFIG_FILE, WorkdirError, read_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Job = tuple[str, list[str], str]  # (label, train.py command, workdir) of one (run, seed)


def define_study_flags(flag_values: flags.FlagValues) -> None:
    """The flags of a study's run, compare's and scripts/sweep.py's (which runs a sweep's study)."""
    flags.DEFINE_integer("seeds", None, "seeds per run (default: the study's)", lower_bound=1,
                         flag_values=flag_values)
    flags.DEFINE_integer("jobs", None, "training processes at once (default: one per GPU, one on a TPU, one per "
                         "CPU core without them)", lower_bound=1, flag_values=flag_values)
    flags.DEFINE_string("only", "", "comma-separated subset of the study's run names", flag_values=flag_values)
    flags.DEFINE_string("runs_dir", "runs/compare", "workdirs go to <runs_dir>/<task>/<preset>",
                        flag_values=flag_values)
    flags.DEFINE_string("reports_dir", "reports", "the report goes to <reports_dir>/<task>[/<preset>]",
                        flag_values=flag_values)


FLAGS = flags.FlagValues()
flags.DEFINE_enum("task", None, sorted(studies.presets()), "the study's task", required=True, flag_values=FLAGS)
flags.DEFINE_string("preset", "quick", "the study of the task: see configs/studies.py", flag_values=FLAGS)
define_study_flags(FLAGS)


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """The arguments before `--`, and those after it (for every train.py run)."""
    return (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])


def select_runs(study: grids.Study, only: str) -> list[grids.Run]:
    """The study's runs named in `only` (all when empty); an unknown name is an error."""
    if not only:
        return study.runs
    known = [run.name for run in study.runs]
    wanted = only.split(",")
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise ValueError(f"unknown runs {', '.join(unknown)}; this study's runs: {', '.join(known)}")
    return [run for run in study.runs if run.name in wanted]


def run_workdir(runs_dir: str, task: str, preset: str, run: grids.Run, seed: int) -> str:
    return os.path.join(runs_dir, task, preset, run.name, f"seed{seed}")


def train_command(study: grids.Study, run: grids.Run, seed: int, workdir: str, group: str,
                  extra: list[str]) -> list[str]:
    """train.py's command line: the study's overrides, then the run's, then `extra` (the last wins)."""
    overrides = {**study.overrides, **run.overrides}
    return [
        sys.executable,
        os.path.join(ROOT, "train.py"),
        f"--config={os.path.join(ROOT, study.config)}",
        f"--workdir={workdir}",
        f"--config.seed={seed}",
        *(f"--config.{key}={value}" for key, value in overrides.items()),
        f"--config.wandb.group={group}",
        *extra,
    ]


def report_dir(reports_dir: str, task: str, preset: str) -> str:
    """The quick study's report is the task's; another preset's sits beside it, so none overwrites another."""
    return os.path.join(reports_dir, task, *([] if preset == "quick" else [preset]))


def is_finished(workdir: str) -> bool:
    """eval.json exists and was written at the last step of the config the run trained with. An eval.json
    that does not read (a write cut short) is no result: training again resumes from the last checkpoint
    and writes it anew."""
    eval_path, config_path = os.path.join(workdir, "eval.json"), os.path.join(workdir, CONFIG_FILE)
    if not (os.path.exists(eval_path) and os.path.exists(config_path)):
        return False
    try:
        step = read_json(eval_path).get("step")
    except WorkdirError as error:
        print(f"warning: {error}; the run will be evaluated again", flush=True)
        return False
    return step == read_json(config_path).get("num_train_steps")


def train(command: list[str], workdir: str, env: dict[str, str] | None) -> bool:
    """Runs train.py, appending its output to <workdir>/train.log; True when it exited cleanly."""
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "train.log"), "a") as log:
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env).returncode == 0


def _train_timed(command: list[str], workdir: str, env: dict[str, str] | None) -> tuple[bool, float]:
    started = time.time()
    # A clean exit without eval.json at the last step (e.g. a resumed run with fewer steps) is no success.
    ok = train(command, workdir, env) and is_finished(workdir)
    return ok, time.time() - started


def train_all(jobs: list[Job], environments: list[dict | None]):
    """Trains the jobs, one per environment at a time (devices.job_environments: each pinned to its
    device); yields (label, workdir, ok, seconds) as each ends.

    The first job runs alone: it builds the dataset and tokenizer in the shared data directory, which
    parallel processes would otherwise race to build.
    """
    if not jobs:
        return
    (label, command, workdir), rest = jobs[0], jobs[1:]
    yield (label, workdir, *_train_timed(command, workdir, environments[0]))
    free = queue.Queue()
    for env in environments:
        free.put(env)

    def train_on_free_slot(command, workdir):
        env = free.get()
        try:
            return _train_timed(command, workdir, env)
        finally:
            free.put(env)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(environments)) as pool:
        futures = {pool.submit(train_on_free_slot, command, workdir): (label, workdir)
                   for label, command, workdir in rest}
        for future in concurrent.futures.as_completed(futures):
            yield (*futures[future], *future.result())


def job_environments(workers: int | None) -> list[dict | None]:
    """One environment per concurrent training process: `workers` of them, or by default one per
    accelerator of this machine (one per CPU core without one); see training/devices.py."""
    if workers == 1:
        return [None]
    info = devices.probe()
    workers = workers or devices.default_jobs(info)
    print(f"{workers} training process(es) at once on {devices.describe(info)}", flush=True)
    return devices.job_environments(info, workers)


def final_validation(workdir: str) -> dict:
    """The metrics of the last periodic evaluation (on the validation split) in the workdir's metrics.jsonl;
    none without the file."""
    evals = [record for record in read_metrics(workdir) if record["split"] == "eval"]
    return evals[-1] if evals else {}


def _result(workdir: str) -> dict:
    """eval.json, with the final validation metrics under "validation" (for choices made without test data)."""
    return {**read_json(os.path.join(workdir, "eval.json")), "validation": final_validation(workdir)}


def load_results(workdirs: dict[str, list[str]]) -> tuple[dict[str, list[dict]], dict[str, dict], int | None]:
    """From run name -> its seeds' workdirs: the finished seeds' results (`_result`) per run (runs without
    one left out), the first finished seed's spectra.json where it exists, and the head dim of the runs'
    models (None where they differ, e.g. the Transformer beside the RNN: no one width to compare with)."""
    results, spectra, head_dims = {}, {}, set()
    for name, seed_workdirs in workdirs.items():
        finished = [workdir for workdir in seed_workdirs if is_finished(workdir)]
        if not finished:
            continue
        results[name] = [_result(workdir) for workdir in finished]
        spectra_path = os.path.join(finished[0], "spectra.json")
        if os.path.exists(spectra_path):
            spectra[name] = read_json(spectra_path)
        model = read_json(os.path.join(finished[0], "config.json"))["model"]
        head_dims.add(model["d_model"] // model["num_heads"])
    return results, spectra, head_dims.pop() if len(head_dims) == 1 else None


def curve_records(results: dict[str, list[dict]], workdirs: dict[str, list[str]]) -> dict[str, list[list[dict]]]:
    """Per run of the report, the metrics.jsonl records of its finished seeds (of the run chosen on validation,
    for a group: `select_by_validation`)."""
    return {name: [read_metrics(workdir) for workdir in workdirs[evals[0]["run"]] if is_finished(workdir)]
            for name, evals in results.items()}


def select_by_validation(task: str, results: dict[str, list[dict]],
                         runs: list[grids.Run]) -> dict[str, list[dict]]:
    """Each group of alternative runs (grids.Run.group) reduced to the one with the best mean validation
    headline metric, under the group's name (the chosen run's name is kept in each result's "run");
    runs without a group pass unchanged."""
    selected, best = {}, {}
    for run in runs:
        if run.name not in results:
            continue
        evals = [{**result, "run": run.name} for result in results[run.name]]
        if not run.group:
            selected[run.name] = evals
            continue
        score = report.validation_score(tasks.get(task).METRICS, evals)
        if run.group not in best or score > best[run.group]:
            best[run.group], selected[run.group] = score, evals
    return selected


def run_jobs(jobs: list[Job], workers: int | None) -> list[str]:
    """Trains the unfinished jobs, `workers` at a time (None: `job_environments`' default), printing a
    progress line as each ends (and one for each job finished earlier, skipped); returns the labels of the
    jobs that failed."""
    skipped = [job for job in jobs if is_finished(job[2])]
    pending = [job for job in jobs if job not in skipped]
    for index, (label, _, _) in enumerate(skipped, 1):
        print(f"[{index}/{len(jobs)}] {label}: finished earlier, skipped", flush=True)
    failed = []
    try:
        environments = job_environments(workers) if pending else [None]
    except ValueError as error:
        raise SystemExit(str(error)) from None
    for index, (label, workdir, ok, seconds) in enumerate(train_all(pending, environments), len(skipped) + 1):
        status = "done" if ok else f"FAILED (see {os.path.join(workdir, 'train.log')})"
        print(f"[{index}/{len(jobs)}] {label}: {status} in {seconds:.0f}s", flush=True)
        if not ok:
            failed.append(label)
    return failed


def _jobs(study: grids.Study, runs: list[grids.Run], seeds: range, workdirs: dict[str, list[str]],
          group: str, extra: list[str]) -> list[Job]:
    """The job of every (run, seed)."""
    return [(f"{run.name} seed{seed}", train_command(study, run, seed, workdir, group, extra), workdir)
            for run in runs for seed, workdir in zip(seeds, workdirs[run.name])]


def _write_report(task: str, preset: str, command: str, results: dict[str, list[dict]],
                  workdirs: dict[str, list[str]], out_dir: str, spectra: dict, head_dim: int | None) -> None:
    """The report of the results (run name -> seeds' results), curves.png from their workdirs' metrics."""
    records = curve_records(results, workdirs)
    if any(record["split"] == "eval" for seeds in records.values() for lines in seeds for record in lines):
        plots.plot_validation_curves(records, tasks.get(task).METRICS[0],
                                     os.path.join(out_dir, plots.CURVES_PLOT))
    else:  # e.g. trained on the whole released SCAN files: no validation split, no curve
        print("no periodic evaluation in these runs' metrics.jsonl: no curves.png", flush=True)
    path = report.write_report(tasks.get(task), preset, command, results, spectra, out_dir, head_dim)
    print(f"\n{report.accuracy_table(tasks.get(task).METRICS, results)}\n\nreport: {path}", flush=True)


def run_study(task: str, preset: str, options, extra: list[str], command: str) -> None:
    """Trains the study (task, preset) as the study flags in `options` say (`define_study_flags`), each
    run with the arguments `extra`, then reports it under `command`, the command line that ran it."""
    try:
        study = studies.get_study(task, preset)
        runs = select_runs(study, options.only)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    seeds = range(options.seeds or study.seeds)
    # Absolute: train.py runs in the repository root, while relative flags mean the caller's directory.
    runs_dir = os.path.abspath(options.runs_dir)
    workdirs = {run.name: [run_workdir(runs_dir, task, preset, run, seed) for seed in seeds] for run in runs}
    try:  # a workdir's config.json or eval.json that does not read names itself
        failed = run_jobs(_jobs(study, runs, seeds, workdirs, f"{task}-{preset}", extra), options.jobs)
        results, spectra, head_dim = load_results(workdirs)
    except WorkdirError as error:
        raise SystemExit(str(error)) from None
    results = select_by_validation(task, results, runs)
    spectra = {name: spectra[evals[0]["run"]] for name, evals in results.items() if evals[0]["run"] in spectra}
    if results:
        _write_report(task, preset, command, results, workdirs, report_dir(options.reports_dir, task, preset),
                      spectra, head_dim)
    if failed:
        raise SystemExit(f"failed runs: {', '.join(failed)}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    own, extra = split_extra(argv)
    args = command_line.parse(FLAGS, own, __doc__)
    run_study(args.task, args.preset, args, extra, shlex.join(["python", "-m", "scripts.compare", *argv]))


if __name__ == "__main__":
    main()
