"""A study run: its runs and seeds (STUDIES in configs/<task>.py), each in its workdir, trained by jobs.py; the
finished ones read back and recorded beside the report (runs.json, merged with what earlier parts recorded, so
that a study can run in parts, in several sittings and on several machines), each group of alternative runs
reduced to the one chosen on validation, and reported (analysis/report.py) with their validation curves."""
import json
import os

import tasks
from analysis import plots, report
from configs.grids import Run, Study
from studies import StudyError
from studies.catalog import get_study
from studies.jobs import Job, is_finished, run_jobs, train_command
from training import atomic
from training.metrics import read_metrics
from training.workdirs import WorkdirError, read_json

RUNS_JSON = "runs.json"


def part_runs(runs: list[Run], part: str) -> list[Run]:
    """Part "k/n" of `runs`: the k-th of n consecutive slices about equal in runs, a group of alternatives
    (Run.group) never split; all of them for an empty `part`."""
    if not part:
        return runs
    index, count = (int(number) for number in part.split("/"))
    if not 1 <= index <= count:
        raise ValueError(f"--part={part}: k/n with 1 <= k <= n")
    units = [[run for run in runs if (run.group or run.name) == key]
             for key in dict.fromkeys(run.group or run.name for run in runs)]
    bounds = [round(i * len(runs) / count) for i in range(count + 1)]
    starts = [sum(len(unit) for unit in units[:i]) for i in range(len(units))]
    return [run for unit, start in zip(units, starts) if bounds[index - 1] <= start < bounds[index] for run in unit]


def select_runs(study: Study, only: str, part: str = "") -> list[Run]:
    """The study's runs named in `only` (all when empty), then part `part` of them (part_runs); an unknown
    name is an error."""
    if not only:
        return part_runs(study.runs, part)
    known = [run.name for run in study.runs]
    wanted = only.split(",")
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise ValueError(f"unknown runs {', '.join(unknown)}; this study's runs: {', '.join(known)}")
    return part_runs([run for run in study.runs if run.name in wanted], part)


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


def run_record(seed_workdirs: list[str]) -> dict | None:
    """What the report needs of a run's finished seeds: their results (`_result`), the first one's spectra
    (None without) and each seed's periodic evaluations from metrics.jsonl (its curve); None when no seed
    has finished."""
    finished = [workdir for workdir in seed_workdirs if is_finished(workdir)]
    if not finished:
        return None
    spectra_path = os.path.join(finished[0], "spectra.json")
    return {"results": [_result(workdir) for workdir in finished],
            "spectra": read_json(spectra_path) if os.path.exists(spectra_path) else None,
            "curves": [[record for record in read_metrics(workdir) if record["split"] == "eval"]
                       for workdir in finished]}


def recorded_runs(workdirs: dict[str, list[str]], out_dir: str, study: Study) -> dict[str, dict]:
    """Run name -> its record (`_record`), for every run of the study that finished here or that runs.json in
    `out_dir` recorded (an earlier part's); a run finished here replaces its recorded one. Writes the union
    back to runs.json."""
    path = os.path.join(out_dir, RUNS_JSON)
    recorded = read_json(path) if os.path.exists(path) else {}
    local = {name: record for name, seed_workdirs in workdirs.items() if (record := run_record(seed_workdirs))}
    merged = {run.name: local.get(run.name) or recorded.get(run.name) for run in study.runs}
    merged = {name: record for name, record in merged.items() if record}
    if merged:
        os.makedirs(out_dir, exist_ok=True)
        atomic.write_text(path, json.dumps(merged, indent=1))
    return merged


def head_dim(results: dict[str, list[dict]]) -> int | None:
    """The head dim of the runs' models, from the config each eval.json records; None where they differ
    (the Transformer beside the RNN: no one width to compare with)."""
    dims = {result["config"]["model"]["d_model"] // result["config"]["model"]["num_heads"]
            for evals in results.values() for result in evals}
    return dims.pop() if len(dims) == 1 else None


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


def _write_report(task: str, preset: str, command: str, runs: dict[str, dict], selected: dict[str, list[dict]],
                  out_dir: str) -> None:
    """The report of the selected results (report name -> seeds' results, each naming the run it came from),
    curves.png from the recorded periodic evaluations of those runs."""
    chosen = {name: runs[evals[0]["run"]] for name, evals in selected.items()}
    curves = {name: record["curves"] for name, record in chosen.items()}
    if any(lines for seeds in curves.values() for lines in seeds):
        plots.plot_validation_curves(curves, tasks.get(task).METRICS[0], os.path.join(out_dir, plots.CURVES_PLOT))
    else:  # e.g. trained on the whole released SCAN files: no validation split, no curve
        print("no periodic evaluation in these runs' metrics.jsonl: no curves.png", flush=True)
    spectra = {name: record["spectra"] for name, record in chosen.items() if record["spectra"]}
    path = report.write_report(tasks.get(task), preset, command, selected, spectra, out_dir, head_dim(selected))
    print(f"\n{report.accuracy_table(tasks.get(task).METRICS, selected)}\n\nreport: {path}", flush=True)


def run_study(task: str, preset: str, options, extra: list[str], command: str) -> None:
    """Trains the study (task, preset) as the study flags in `options` say (define_study_flags of
    scripts/command_line.py), each run with the arguments `extra`, then reports it, with what earlier parts
    recorded, under `command`, the command line that ran it."""
    try:
        study = get_study(task, preset)
        runs = select_runs(study, options.only, options.part)
    except ValueError as error:
        raise StudyError(str(error)) from None
    seeds = range(options.seeds or study.seeds)
    # Absolute: train.py runs in the repository root, while relative flags mean the caller's directory.
    runs_dir = os.path.abspath(options.runs_dir)
    workdirs = {run.name: [run_workdir(runs_dir, task, preset, run, seed) for seed in seeds] for run in runs}
    out_dir = report_dir(options.reports_dir, task, preset)
    try:  # a workdir's config.json or eval.json that does not read names itself
        failed = run_jobs(_jobs(study, runs, seeds, workdirs, f"{task}-{preset}", extra), options.jobs)
        recorded = recorded_runs(workdirs, out_dir, study)
    except WorkdirError as error:
        raise StudyError(str(error)) from None
    selected = select_by_validation(task, {name: record["results"] for name, record in recorded.items()},
                                    study.runs)
    if selected:
        _write_report(task, preset, command, recorded, selected, out_dir)
    if failed:
        raise StudyError(f"failed runs: {', '.join(failed)}; see the lines above and their train.log", status=1)
