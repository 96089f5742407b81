"""Markdown tables of test metrics and mean attention ranks per role, from the eval.json of workdirs.

  python scripts/summarize_runs.py runs/default runs/lin
"""
import json
import os
import sys

import numpy as np

RANK_FIELDS = ("numerical_rank", "effective_rank", "stable_rank")


def load(workdir: str) -> dict:
    path = os.path.join(workdir, "eval.json")
    if not os.path.exists(path):
        raise SystemExit(f"{path}: not found; run train.py or eval.py on {workdir} first")
    with open(path) as f:
        return json.load(f)


def metrics_table(results: dict[str, dict]) -> str:
    names = list(next(iter(results.values()))["metrics"])
    lines = ["| run | attention | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
    for workdir, result in results.items():
        kinds = "/".join(dict.fromkeys(result["attention"].values()))
        values = " | ".join(f"{result['metrics'][name]:.4f}" for name in names)
        lines.append(f"| {workdir} | {kinds} | {values} |")
    return "\n".join(lines)


def rank_table(results: dict[str, dict]) -> str:
    lines = ["| run | role | kind | mean key length | numerical rank | effective rank | stable rank | rank bound |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for workdir, result in results.items():
        for role, kind in result["attention"].items():
            rows = [row for row in result["rank"] if row["role"] == role]
            means = " | ".join(f"{np.mean([row[field] for row in rows]):.2f}" for field in RANK_FIELDS)
            bound = rows[0]["rank_bound"]
            lines.append(f"| {workdir} | {role} | {kind} | {rows[0]['seq_len']} | {means} | "
                         f"{'-' if bound is None else bound} |")
    return "\n".join(lines)


def main(workdirs: list[str]) -> None:
    if not workdirs:
        raise SystemExit(__doc__)
    results = {workdir: load(workdir) for workdir in workdirs}
    print(metrics_table(results), rank_table(results), sep="\n\n")


if __name__ == "__main__":
    main(sys.argv[1:])
