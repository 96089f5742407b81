"""Markdown tables of the eval.json of workdirs (`python -m scripts.summarize_runs`): test metrics, a table per
task, and mean attention ranks per role."""
import os

import numpy as np

from runtime.workdirs import WorkdirError, read_json
from studies import StudyError

RANK_FIELDS = ("numerical_rank", "effective_rank", "stable_rank")
REQUIRED = ("task", "metrics", "attention", "rank")  # what the tables read of an eval.json


def load(workdir: str) -> dict:
    path = os.path.join(workdir, "eval.json")
    if not os.path.exists(path):
        raise WorkdirError(f"{path}: not found; run train.py or eval.py on {workdir} first")
    result = read_json(path)
    if missing := [key for key in REQUIRED if key not in result]:
        raise WorkdirError(f"{path}: no {', '.join(missing)}; not an eval.json of this lab (eval.py on "
                           f"{workdir} writes one)")
    if problem := _malformed(result):
        raise WorkdirError(f"{path}: {problem}; not an eval.json as this lab writes it (eval.py on {workdir} "
                           f"writes it anew)")
    return result


def _malformed(result: dict) -> str | None:
    """What in an eval.json the tables cannot read; None when they can."""
    if not isinstance(result["metrics"], dict) or not all(
            value is None or isinstance(value, (int, float)) for value in result["metrics"].values()):
        return "metrics is not an object of numbers"
    if not isinstance(result["attention"], dict):
        return "attention is not an object of role -> kind"
    row_fields = ("role", "seq_len", "rank_bound", *RANK_FIELDS)
    if not isinstance(result["rank"], list) or not all(
            isinstance(row, dict) and all(field in row for field in row_fields) for row in result["rank"]):
        return f"rank is not a list of rows with {', '.join(row_fields)}"
    return None


def workdir_metrics_table(results: dict[str, dict]) -> str:
    """One table per task, in the order the tasks first appear: their metrics differ."""
    tables = []
    for task in dict.fromkeys(result["task"] for result in results.values()):
        runs = {workdir: result for workdir, result in results.items() if result["task"] == task}
        names = list(dict.fromkeys(name for result in runs.values() for name in result["metrics"]))
        lines = ["| run | attention | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
        for workdir, result in runs.items():
            kinds = "/".join(dict.fromkeys(result["attention"].values()))
            values = " | ".join(_number(result["metrics"].get(name)) for name in names)
            lines.append(f"| {workdir} | {kinds} | {values} |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


def _number(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def workdir_rank_table(results: dict[str, dict]) -> str:
    lines = ["| run | role | kind | mean key length | numerical rank | effective rank | stable rank | rank bound |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for workdir, result in results.items():
        for role, kind in result["attention"].items():
            rows = [row for row in result["rank"] if row["role"] == role]
            if not rows:  # no attention in that role (the RNN without attention)
                continue
            means = " | ".join(f"{np.mean([row[field] for row in rows]):.2f}" for field in RANK_FIELDS)
            bound = rows[0]["rank_bound"]
            lines.append(f"| {workdir} | {role} | {kind} | {rows[0]['seq_len']} | {means} | "
                         f"{'-' if bound is None else bound} |")
    return "\n".join(lines)


def summary_tables(workdirs: list[str]) -> str:
    """The metrics and rank tables of the workdirs; SystemExit naming an eval.json that is missing or not one."""
    try:
        results = {workdir: load(workdir) for workdir in workdirs}
    except WorkdirError as error:
        raise StudyError(str(error)) from None
    return workdir_metrics_table(results) + "\n\n" + workdir_rank_table(results)
