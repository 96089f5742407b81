"""A study run: its runs and seeds (STUDIES in configs/<task>.py), each in its workdir, trained by jobs.py; the finished
ones read back, each group of alternative runs reduced to the one chosen on validation, and reported
(analysis/report.py) with their validation curves."""
import os

import tasks
from analysis import plots, report
from configs.grids import Run, Study
from studies.catalog import get_study
from studies.jobs import Job, is_finished, run_jobs, train_command
from training.metrics import read_metrics
from training.workdirs import WorkdirError, read_json
from studies import StudyError


def select_runs(study: Study, only: str) -> list[Run]:
    """The study's runs named in `only` (all when empty); an unknown name is an error."""
    if not only:
        return study.runs
    known = [run.name for run in study.runs]
    wanted = only.split(",")
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise ValueError(f"unknown runs {', '.join(unknown)}; this study's runs: {', '.join(known)}")
    return [run for run in study.runs if run.name in wanted]


def run_workdir(runs_dir: str, task: str, preset: str, run: Run, seed: int) -> str:
    return os.path.join(runs_dir, task, preset, run.name, f"seed{seed}")


def report_dir(reports_dir: str, task: str, preset: str) -> str:
    """The quick study's report is the task's; another preset's sits beside it, so none overwrites another."""
    return os.path.join(reports_dir, task, *([] if preset == "quick" else [preset]))


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
                         runs: list[Run]) -> dict[str, list[dict]]:
    """Each group of alternative runs (Run.group) reduced to the one with the best mean validation
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


def _jobs(study: Study, runs: list[Run], seeds: range, workdirs: dict[str, list[str]],
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
    """Trains the study (task, preset) as the study flags in `options` say (define_study_flags of
    scripts/command_line.py), each run with the arguments `extra`, then reports it under `command`, the
    command line that ran it."""
    try:
        study = get_study(task, preset)
        runs = select_runs(study, options.only)
    except ValueError as error:
        raise StudyError(str(error)) from None
    seeds = range(options.seeds or study.seeds)
    # Absolute: train.py runs in the repository root, while relative flags mean the caller's directory.
    runs_dir = os.path.abspath(options.runs_dir)
    workdirs = {run.name: [run_workdir(runs_dir, task, preset, run, seed) for seed in seeds] for run in runs}
    try:  # a workdir's config.json or eval.json that does not read names itself
        failed = run_jobs(_jobs(study, runs, seeds, workdirs, f"{task}-{preset}", extra), options.jobs)
        results, spectra, head_dim = load_results(workdirs)
    except WorkdirError as error:
        raise StudyError(str(error)) from None
    results = select_by_validation(task, results, runs)
    spectra = {name: spectra[evals[0]["run"]] for name, evals in results.items() if evals[0]["run"] in spectra}
    if results:
        _write_report(task, preset, command, results, workdirs, report_dir(options.reports_dir, task, preset),
                      spectra, head_dim)
    if failed:
        raise StudyError(f"failed runs: {', '.join(failed)}; see the lines above and their train.log", status=1)
