"""A study run: its runs and seeds (STUDIES in configs/<task>.py), each in its workdir, trained by jobs.py; the
finished ones read back and recorded beside the report (runs.json, merged with what earlier parts recorded, so
that a study can run in parts, in several sittings and on several machines), and reported (analysis/report.py)
with their validation curves. A study's Pick first trains each run's candidates and sets the run's field to
the one best on validation."""
import dataclasses
import json
import os
import shutil

import tasks
from analysis import plots, rank_plots, report, tables
from configs.grids import Pick, Run, Study
from runtime import atomic, devices
from runtime.workdirs import WorkdirError, read_json
from studies import StudyError, catalog
from studies.catalog import get_study, study_name
from studies.jobs import Job, is_finished, packed_command, run_jobs, train_command
from training import evaluation, packed
from training.metrics import read_metrics

RUNS_JSON = "runs.json"
COMPILATION_CACHE_DIR = "compilation_cache"  # under --runs_dir by default: JAX's, shared by the study's processes
# The repository's root: a borrowed run is read from the published reports whatever --reports_dir this study uses.
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PICK_DIR = "pick"  # under a run's directory: the workdirs of its candidates
ATTENTION_HEAD = 0  # the head of every run that the study's attention_maps.png draws


@dataclasses.dataclass(frozen=True)
class StudyRun:
    """One invocation of a study: what every stage (picks, seeds, records, report) reads."""
    task: str
    preset: str
    study: Study
    runs_dir: str  # absolute: train.py runs in the repository root
    out_dir: str  # the report's folder
    extra: list[str]  # train.py's arguments after the study's own
    command: str  # the command line, as the report's "Produced by" names it
    workers: int | None = None  # training processes at once (None: one per device)
    pack: bool = False  # each run's seeds (and a packable pick's candidates) as one program
    compilation_cache: str | None = None  # JAX's, shared by the training processes

    @property
    def group(self) -> str:
        return study_name(self.task, self.preset)

    def workdir(self, run: Run, seed: int) -> str:
        return run_workdir(self.runs_dir, self.task, self.preset, run, seed)


def part_runs(runs: list[Run], part: str) -> list[Run]:
    """Part "k/n" of `runs`: the k-th of n consecutive slices about equal in runs; all of them for an empty
    `part`. Each of n <= len(runs) parts has a run; a part of more parts than runs may have none, an error
    (the study is split wrong) rather than a part that trains nothing in silence."""
    if not part:
        return runs
    index, _, count = part.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise ValueError(f"--part={part}: not of the form k/n, the k-th of n parts with 1 <= k <= n (e.g. "
                         f"--part=1/4)")
    index, count = int(index), int(count)
    selected = runs[round((index - 1) * len(runs) / count):round(index * len(runs) / count)]
    if not selected:
        raise ValueError(f"--part={part}: this part has no runs: the study has {len(runs)} runs (after any --only), "
                         f"fewer than its {count} parts; split it into at most {len(runs)} parts")
    return selected


def select_runs(study: Study, only: str, part: str = "") -> list[Run]:
    """The study's runs it trains (not those it borrows) named in `only` (all when empty), then part `part` of
    them (part_runs); an unknown name is an error, and so is a borrowed one."""
    trained = [run for run in study.runs if run.name not in study.borrowed]
    if not only:
        return part_runs(trained, part)
    known = [run.name for run in trained]
    wanted = only.split(",")
    if borrowed := [name for name in wanted if name in study.borrowed]:
        raise ValueError(f"runs {', '.join(borrowed)} are borrowed from another study's published runs, not "
                         f"trained here; this study trains: {', '.join(known)}")
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise ValueError(f"unknown runs {', '.join(unknown)}; this study's runs: {', '.join(known)}")
    return part_runs([run for run in trained if run.name in wanted], part)


def _training(study: Study, run: Run) -> tuple:
    """What decides how a run trains: the config, every override in the order train.py applies them, the pick
    and the seeds."""
    return study.config, {**study.overrides, **run.overrides}, study.pick, study.seeds_of(run)


def borrowed_records(study: Study, task: str) -> dict[str, dict]:
    """Run name -> the record (run_record's, with "borrowed_from": the preset) of each run the study borrows, from
    the lending study's published runs.json; StudyError where the lender would train it otherwise, or has not
    recorded it."""
    records = {}
    for name, preset in study.borrowed.items():
        lender = get_study(task, preset)
        mine = next(run for run in study.runs if run.name == name)
        theirs = next((run for run in lender.runs if run.name == name), None)
        if theirs is None or _training(lender, theirs) != _training(study, mine):
            raise StudyError(f"run {name} is borrowed from {task}/{preset}, which trains no run of that name as this "
                             f"study would (config, overrides, pick, seeds): train it here instead")
        path = os.path.join(REPOSITORY, report_dir("reports", task, preset), RUNS_JSON)
        if name not in (lent := read_study_file(path, task, preset) if os.path.exists(path) else {}):
            raise StudyError(f"{path} records no run {name} to borrow: run {study_command(task, preset)} first")
        records[name] = {**lent[name], "borrowed_from": preset}
    return records


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


def study_command(task: str, preset: str) -> str:
    return f"python -m scripts.compare --task={task} --preset={preset}"


def read_study_file(path: str, task: str, preset: str) -> dict:
    """A study's own JSON file beside its report (runs.json, results.json); StudyError naming it and how to
    rebuild it where it does not read (a copy cut short)."""
    try:
        return read_json(path)
    except WorkdirError as error:
        raise StudyError(f"{error}; restore it (git checkout -- {path}, where it is committed), or move it away "
                         f"and rebuild it where the study's workdirs are: `{study_command(task, preset)}` (and "
                         f"each part's --part) reads the finished runs again instead of training them") from None


def recorded_runs(workdirs: dict[str, list[str]], picks: dict[str, dict], out_dir: str,
                  study: Study, task: str, preset: str) -> dict[str, dict]:
    """Run name -> its record (`run_record`, with its `pick_record` under "pick" where the study picks), for
    every run of the study that finished here, that it borrows (borrowed_records) or that runs.json in `out_dir`
    recorded (an earlier part's); a seed finished here replaces its recorded one, and the recorded seeds not
    trained here stay (_merged_seeds). Writes the union back to runs.json."""
    path = os.path.join(out_dir, RUNS_JSON)
    recorded = read_study_file(path, task, preset) if os.path.exists(path) else {}
    local = {name: {**record, **({"pick": picks[name]} if name in picks else {})}
             for name, seed_workdirs in workdirs.items() if (record := run_record(seed_workdirs))}
    borrowed = borrowed_records(study, task)
    merged = {run.name: borrowed.get(run.name) or _merged_seeds(local.get(run.name), recorded.get(run.name))
              for run in study.runs}
    merged = {name: record for name, record in merged.items() if record}
    if merged:
        os.makedirs(out_dir, exist_ok=True)
        atomic.write_text(path, json.dumps(merged, indent=1))
    return merged


def _seed(result: dict) -> int:
    return result["config"]["seed"]


def _merged_seeds(local: dict | None, recorded: dict | None) -> dict | None:
    """A run's record of its seeds finished here (`local`) and those an earlier part recorded and this one did not
    train (seeds 3-4 added to seeds 0-2 trained elsewhere, say), in seed order; the spectra of its lowest seed."""
    if not (local and recorded):
        return local or recorded
    trained_here = {_seed(result) for result in local["results"]}
    kept = [(result, curve) for result, curve in zip(recorded["results"], recorded["curves"])
            if _seed(result) not in trained_here]
    seeds = sorted([*kept, *zip(local["results"], local["curves"])], key=lambda pair: _seed(pair[0]))
    lowest = recorded if kept and min(_seed(result) for result, _ in kept) < min(trained_here) else local
    return {**local, "results": [result for result, _ in seeds], "curves": [curve for _, curve in seeds],
            "spectra": lowest["spectra"] or local["spectra"] or recorded["spectra"]}


def recorded_seeds(record: dict | None) -> set[int]:
    return {_seed(result) for result in record["results"]} if record else set()


def pick_candidates(pick: Pick, run: Run) -> list[Run]:
    """The runs that choose `run`'s value of pick.field: one per value, on the pick's overrides, each in a
    directory of the run's own."""
    return [Run(os.path.join(run.name, PICK_DIR, f"{pick.field}={value}"),
                {**run.overrides, **pick.overrides, pick.field: value}) for value in pick.values]


def pick_record(metric: str, pick: Pick, workdirs: list[str]) -> dict | None:
    """The last validation `metric` of each candidate's workdir (None where it did not finish: a divergent
    rate, say) and the value of the best; None when none finished."""
    scores = [final_validation(workdir).get(metric) if is_finished(workdir) else None for workdir in workdirs]
    finished = [(score, value) for score, value in zip(scores, pick.values) if score is not None]
    if not finished:
        return None
    return {"field": pick.field, "validation": {str(value): score for value, score in zip(pick.values, scores)},
            "chosen": max(finished, key=lambda pair: pair[0])[1]}


def labelled_results(records: dict[str, dict]) -> dict[str, list[dict]]:
    """Each run's seeds' results, each naming under "selected" the value its run picked on validation and
    holding its periodic evaluations under "validation_curve" (for the reports' readings over steps)."""
    def selected(record):
        return {"selected": f"{record['pick']['field']}={record['pick']['chosen']}"} if record.get("pick") else {}
    return {name: [{**result, **selected(record), "validation_curve": curve}
                   for result, curve in zip(record["results"], record["curves"])]
            for name, record in records.items()}


def head_dim(results: dict[str, list[dict]]) -> int | None:
    """The head dim of the runs' models, from the config each eval.json records; None where they differ
    (the Transformer beside the RNN: no one width to compare with)."""
    if any("config" not in result for evals in results.values() for result in evals):
        return None  # an eval.json of a task that does not record its config (recall's)
    dims = {result["config"]["model"]["d_model"] // result["config"]["model"]["num_heads"]
            for evals in results.values() for result in evals}
    return dims.pop() if len(dims) == 1 else None


def _jobs(context: StudyRun, runs: list[Run], seeds: dict[str, list[int]], workdirs: dict[str, list[str]]) -> list[Job]:
    """The job of every (run, seed), or where the context packs, of every run, its seeds packed in one program."""
    study, group, extra = context.study, context.group, context.extra
    jobs = []
    for run in runs:
        pairs = list(zip(seeds[run.name], workdirs[run.name]))
        if context.pack and len(pairs) > 1:
            span = f"{pairs[0][0]}-{pairs[-1][0]}" if len(pairs) == pairs[-1][0] - pairs[0][0] + 1 else \
                ", ".join(str(seed) for seed, _ in pairs)
            jobs.append((f"{run.name} seeds {span} (packed)", packed_command(
                study, run, [(workdir, {"seed": seed}) for seed, workdir in pairs], group, extra), pairs[0][1]))
        else:
            jobs += [(f"{run.name} seed{seed}", train_command(study, run, seed, workdir, group, extra), workdir)
                     for seed, workdir in pairs]
    return jobs


def _packs(option: str, task: str, study: Study, runs: list[Run]) -> bool:
    """Whether the study trains packed, as --pack says (`auto`: where this machine has an accelerator), and says
    so."""
    wanted = option == "on" or option == "auto" and devices.probe()["platform"] in devices.ACCELERATORS
    if not wanted:
        return False
    if not packable(task, study, runs):
        print("not packed: a run stops early (eval.stop_metric) or is distributed", flush=True)
        return False
    packed_too = " and its candidate rates" if study.pick and study.pick.field in packed.PACKABLE else ""
    print(f"packed: each run's seeds{packed_too} train as one program (train.py --pack; --pack=off: one process a "
          f"seed)", flush=True)
    return True


def packable(task: str, study: Study, runs: list[Run]) -> bool:
    """Whether the runs' seeds (and a learning-rate pick's candidates) can train packed (training/packed.py): no
    early stop, one process, on the configs the runs train."""
    for run in runs:
        config = catalog.run_config(task, study, run)
        if config.eval.stop_metric or config.distributed:
            return False
    return True


def _write_report(task: str, preset: str, command: str, records: dict[str, dict], out_dir: str) -> None:
    """The report of the recorded runs (`recorded_runs`), curves.png from their periodic evaluations."""
    results = labelled_results(records)
    curves = {name: record["curves"] for name, record in records.items()}
    curves_path = os.path.join(out_dir, plots.CURVES_PLOT)
    if any(len(lines) > 1 for seeds in curves.values() for lines in seeds):
        plots.plot_validation_curves(curves, tasks.get(task).METRICS[0], curves_path)
    else:  # one evaluation per run (or none: trained on the whole released SCAN files) draws no curve
        print("at most one periodic evaluation per run in metrics.jsonl: no curves.png", flush=True)
        if os.path.exists(curves_path):  # an earlier report's: the report must not link it
            os.remove(curves_path)
    spectra = {name: record["spectra"] for name, record in records.items() if record["spectra"]}
    picks = {name: record["pick"] for name, record in records.items() if record.get("pick")}
    study = get_study(task, preset)
    path = report.write_report(tasks.get(task), preset, command, results, spectra, out_dir, head_dim(results), picks,
                               study.notes, study.contrasts, study.verdict)
    print(f"\n{tables.accuracy_table(tasks.get(task).METRICS, results)}\n\nreport: {path}", flush=True)


def _attention_figure(task: str, preset: str, records: dict[str, dict], runs_dir: str, out_dir: str) -> None:
    """ATTENTION_PLOT of the recorded runs whose seed 0 left its attention example on this machine; a run
    trained elsewhere (an earlier part, on another machine) or by an older version is named and left out."""
    examples, missing = {}, []
    for name in records:
        path = os.path.join(runs_dir, task, preset, name, "seed0", "plots", evaluation.ATTENTION_EXAMPLE)
        if os.path.exists(path):
            examples[name] = evaluation.read_attention_example(path)
        else:
            missing.append(name)
    if examples:
        plots.plot_attention_by_run(examples, ATTENTION_HEAD, os.path.join(out_dir, plots.ATTENTION_PLOT))
    if missing:
        print(f"{plots.ATTENTION_PLOT}: no attention example of {', '.join(missing)} on this machine", flush=True)


def _recorded_command(out_dir: str) -> str:
    """The command a report says produced it (its "Produced by" block)."""
    with open(os.path.join(out_dir, "report.md")) as f:
        text = f.read()
    return text.split("```\n", 2)[1].strip()


def rewrite_report(task: str, preset: str, reports_dir: str) -> str:
    """Writes the report of (task, preset) again from what its directory records, training nothing: runs.json
    where it exists (spectra, curves and picks too), else results.json (the runs' results only: a report
    whose plots need the spectra cannot be rewritten from it). Keeps the command that produced it."""
    out_dir = report_dir(reports_dir, task, preset)
    if not os.path.exists(os.path.join(out_dir, "report.md")):
        raise StudyError(f"{out_dir}: no report.md: the study {task}/{preset} has not reported there; run it "
                         f"first ({study_command(task, preset)}), or name its --reports_dir")
    command = _recorded_command(out_dir)
    if os.path.exists(os.path.join(out_dir, RUNS_JSON)):
        _write_report(task, preset, command, read_study_file(os.path.join(out_dir, RUNS_JSON), task, preset),
                      out_dir)
        return os.path.join(out_dir, "report.md")
    if os.path.exists(os.path.join(out_dir, rank_plots.SPECTRA_PLOT)):
        raise StudyError(f"{out_dir} has no {RUNS_JSON}: its {rank_plots.SPECTRA_PLOT} needs the runs' spectra")
    results = read_study_file(os.path.join(out_dir, report.RESULTS_JSON), task, preset)
    study = get_study(task, preset)
    # A study's notes, contrasts and verdict describe its runs: a report of runs it no longer has (renamed since)
    # goes without them.
    current = set(results) <= {run.name for run in study.runs}
    return report.write_report(tasks.get(task), preset, command, results, {}, out_dir, head_dim(results),
                               notes=study.notes if current else "", contrasts=study.contrasts if current else (),
                               verdict=study.verdict if current else "")


def _picked(context: StudyRun, runs: list[Run], recorded: dict[str, dict]) -> tuple[list[Run], dict[str, dict]]:
    """Trains the candidates of the study's Pick for `runs` (where the context packs and the field is packable, a
    run's candidates in one program), but for a run whose pick runs.json records (`recorded`) and none of whose
    candidates' workdirs is here (picked on another machine); returns the runs with the field set to the value
    chosen on validation (a run none of whose candidates finished left out) and each run's pick_record."""
    study, pick = context.study, context.study.pick
    candidates = {run.name: pick_candidates(pick, run) for run in runs}
    picked_elsewhere = {name: recorded[name]["pick"] for name, choices in candidates.items()
                        if recorded.get(name, {}).get("pick")
                        and not any(os.path.exists(context.workdir(choice, 0)) for choice in choices)}
    for name, record in picked_elsewhere.items():
        print(f"{name}: {pick.field}={record['chosen']}, picked earlier ({RUNS_JSON}), not picked again", flush=True)
    candidates = {name: choices for name, choices in candidates.items() if name not in picked_elsewhere}
    workdirs = {candidate.name: [context.workdir(candidate, 0)]
                for choices in candidates.values() for candidate in choices}
    if context.pack and pick.field in packed.PACKABLE:
        jobs = [(f"{run.name} {pick.field} pick (packed)",
                 packed_command(study, Run(run.name, {**run.overrides, **pick.overrides}),
                                [(workdirs[choice.name][0], {"seed": 0, pick.field: value})
                                 for choice, value in zip(candidates[run.name], pick.values)], context.group,
                                context.extra),
                 workdirs[candidates[run.name][0].name][0]) for run in runs if run.name in candidates]
    else:
        jobs = _jobs(context, [c for choices in candidates.values() for c in choices],
                     {name: [0] for name in workdirs}, workdirs)
    # A candidate that fails (a rate that diverges) is an outcome of the pick, not a failure of the study.
    run_jobs(jobs, context.workers, context.compilation_cache)
    picks = {**picked_elsewhere, **{name: record for name, choices in candidates.items()
                                    if (record := pick_record(tasks.get(context.task).METRICS[0], pick,
                                                              [workdirs[choice.name][0] for choice in choices]))}}
    return [dataclasses.replace(run, overrides={**run.overrides, pick.field: picks[run.name]["chosen"]})
            for run in runs if run.name in picks], picks


def start_from_published(context: StudyRun) -> None:
    """The committed runs.json of the study, where it has one, in the report folder that has none: the seeds and
    picks it records are then read, not trained again (_picked, _seeds_to_train), and the report merges them."""
    published = os.path.join(REPOSITORY, report_dir("reports", context.task, context.preset), RUNS_JSON)
    if os.path.exists(published) and not os.path.exists(os.path.join(context.out_dir, RUNS_JSON)):
        os.makedirs(context.out_dir, exist_ok=True)
        shutil.copy(published, context.out_dir)
        print(f"started from {published}", flush=True)


def _seeds_to_train(context: StudyRun, run: Run, record: dict | None, count: int) -> list[int]:
    """The run's seeds (`count`, else the study's for the run) but those that runs.json records (`record`) and
    that have no workdir here: trained on another machine, or here before the workdirs went, they are read, not
    trained again (to train one again, take it out of runs.json)."""
    elsewhere = sorted(seed for seed in recorded_seeds(record) if not os.path.exists(context.workdir(run, seed)))
    if elsewhere:
        print(f"{run.name}: seeds {', '.join(map(str, elsewhere))} recorded in {RUNS_JSON}, not trained again",
              flush=True)
    return [seed for seed in range(count or context.study.seeds_of(run)) if seed not in elsewhere]


def _report(context: StudyRun, workdirs: dict[str, list[str]], picks: dict[str, dict]) -> None:
    """Records the runs of `workdirs` that finished with what earlier parts recorded, and reports them all."""
    task, preset = context.task, context.preset
    if records := recorded_runs(workdirs, picks, context.out_dir, context.study, task, preset):
        _attention_figure(task, preset, records, context.runs_dir, context.out_dir)
        _write_report(task, preset, context.command, records, context.out_dir)


def run_study(task: str, preset: str, options, extra: list[str], command: str) -> None:
    """Trains the study (task, preset) as the study flags in `options` say (define_study_flags of
    scripts/command_line.py), each run with the arguments `extra`, then reports it, with what earlier parts
    recorded, under `command`, the command line that ran it."""
    try:
        study = get_study(task, preset)
        runs = select_runs(study, options.only, options.part)
    except ValueError as error:
        raise StudyError(str(error)) from None
    # Absolute: train.py runs in the repository root, while relative flags mean the caller's directory.
    runs_dir = os.path.abspath(options.runs_dir)
    context = StudyRun(task, preset, study, runs_dir, report_dir(options.reports_dir, task, preset), extra, command,
                       options.jobs, _packs(options.pack, task, study, runs),
                       os.path.abspath(options.compilation_cache or os.path.join(runs_dir, COMPILATION_CACHE_DIR)))
    runs_json = os.path.join(context.out_dir, RUNS_JSON)
    if options.from_published:
        start_from_published(context)
    # Read before hours of training, not after: a copy that does not read is named now.
    recorded = read_study_file(runs_json, task, preset) if os.path.exists(runs_json) else {}
    try:  # a workdir's config.json or eval.json that does not read names itself
        chosen, picks = _picked(context, runs, recorded) if study.pick else (runs, {})
        seeds = {run.name: _seeds_to_train(context, run, recorded.get(run.name), options.seeds) for run in chosen}
        workdirs = {run.name: [context.workdir(run, seed) for seed in seeds[run.name]] for run in chosen}
        try:
            failed = run_jobs(_jobs(context, chosen, seeds, workdirs), options.jobs, context.compilation_cache)
        except SystemExit:  # stopped (SIGTERM, SIGINT: a time limit, say): the runs that finished are reported
            _report(context, workdirs, picks)
            raise
        _report(context, workdirs, picks)
    except WorkdirError as error:
        raise StudyError(str(error)) from None
    failed += [f"{run.name} (every candidate of the pick)" for run in runs if study.pick and run.name not in picks]
    if failed:
        raise StudyError(f"failed runs: {', '.join(failed)}; see the lines above and their train.log", status=1)
