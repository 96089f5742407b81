"""Runs the grid of a W&B sweep definition (sweeps/*.yaml) locally, without a W&B server, and tabulates it.

  python scripts/sweep.py sweeps/mlm.yaml [--jobs=2] [--runs_dir=runs/sweeps]
                          [--only=attention.name=softmax,performer --only=seed=0] [-- extra train.py args]

Each distinct point of the grid trains in its own process and workdir, <runs_dir>/<name>/<slug>, the slug
naming its swept values (e.g. attention.name=performer,attention.num_features=32,seed=0), with the
arguments `wandb agent` would pass (the YAML's command and ${args}), its own --workdir,
--config.wandb.group=<name>, then the arguments after `--`. A kind option the point's kind does not take
(softmax's attention.num_features) is left out of its identity: that run trains and is reported once.
Runs whose eval.json is at the config's last step are skipped, so an interrupted sweep resumes. Every
finished run of the grid goes into <runs_dir>/<name>/results.csv and results.md: one row per run (swept
values, test metrics, mean effective rank per role), and the mean ± std over seeds.
"""
import argparse
import csv
import dataclasses
import itertools
import os
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run as a script from anywhere: the repository's packages must import

import yaml  # noqa: E402

import attention  # noqa: E402
from analysis import stats  # noqa: E402
from scripts import compare  # noqa: E402
from training import metrics  # noqa: E402
from training.workdirs import WorkdirError, read_json  # noqa: E402

# The agent's macros this runner fills; the others (${args_json_file}, ${envvar:...}, ...) are an error.
MACROS = ("${env}", "${interpreter}", "${program}", "${args}")
DEFAULT_COMMAND = list(MACROS)  # W&B's, when the YAML has no `command`
SEED = "config.seed"


@dataclasses.dataclass(frozen=True)
class Sweep:
    name: str  # the runs' group and directory
    program: str  # relative to the repository root
    command: list[str]
    parameters: dict[str, list]  # in the YAML's order; a fixed `value` is a list of one
    swept: tuple[str, ...]  # the parameters given as `values`


def _error(path: str, message: str) -> ValueError:
    return ValueError(f"{path}: {message}")


def _parameters(path: str, parameters) -> tuple[dict[str, list], tuple[str, ...]]:
    if not isinstance(parameters, dict) or not parameters:
        raise _error(path, "`parameters` must map config fields to {values: [...]} or {value: ...}")
    grid, swept = {}, []
    for name, spec in parameters.items():
        if not name.startswith("config."):
            raise _error(path, f"parameter {name}: train.py takes config fields, named config.<field>")
        if not isinstance(spec, dict) or set(spec) not in ({"values"}, {"value"}):
            raise _error(path, f"parameter {name}: a grid needs `values: [...]` or `value: ...`, got {spec!r}")
        if "value" in spec:
            grid[name] = [spec["value"]]
        elif isinstance(spec["values"], list) and spec["values"]:
            grid[name] = spec["values"]
            swept.append(name)
        else:
            raise _error(path, f"parameter {name}: `values` must be a non-empty list, got {spec['values']!r}")
    return grid, tuple(swept)


def _command(path: str, command: list) -> list[str]:
    command = [str(item) for item in command]
    unknown = [item for item in command if "${" in item and item not in MACROS]
    if unknown:
        raise _error(path, f"command: {', '.join(unknown)} not supported; macros: {', '.join(MACROS)}")
    if not any(item.startswith("--workdir=") for item in command):
        raise _error(path, f"command needs --workdir=...{metrics.RUN_ID_PLACEHOLDER}: train.py requires a workdir, "
                           "one per agent run")
    return command


def load_sweep(path: str) -> Sweep:
    """The sweep definition at `path`; a method other than grid, or a parameter that is not a list of
    values or a fixed value, is an error naming it."""
    with open(path) as f:
        definition = yaml.safe_load(f)
    if not isinstance(definition, dict):
        raise _error(path, "not a sweep definition (a mapping with method, parameters and command)")
    if definition.get("method") != "grid":
        raise _error(path, f"method: {definition.get('method')!r}; scripts/sweep.py runs grid sweeps only")
    grid, swept = _parameters(path, definition.get("parameters"))
    name = definition.get("name") or os.path.splitext(os.path.basename(path))[0]
    return Sweep(name, definition.get("program", "train.py"), _command(path, definition.get("command", DEFAULT_COMMAND)),
                 grid, swept)


def identity(point: dict) -> dict:
    """`point` without the kind options its attention kind (config.attention.name) does not take."""
    kind = point.get("config.attention.name")
    if kind not in attention.names():  # unswept, or unknown: train.py's validation names the kinds
        return point
    ignored = {f"config.attention.{option}" for option in attention.all_options() - set(attention.options(kind))}
    return {key: value for key, value in point.items() if key not in ignored}


def expand(sweep: Sweep) -> list[dict]:
    """The grid's points, the last parameter varying fastest, each distinct config once: the first of the
    points that differ only in options their kind ignores."""
    points = [dict(zip(sweep.parameters, values)) for values in itertools.product(*sweep.parameters.values())]
    distinct = {}
    for point in points:
        distinct.setdefault(tuple(identity(point).items()), point)
    return list(distinct.values())


def _field(name: str) -> str:
    return name.removeprefix("config.")


def slug(sweep: Sweep, point: dict) -> str:
    """The point's directory name: its swept values, those its kind ignores left out."""
    kept = identity(point)
    return ",".join(f"{_field(name)}={kept[name]}" for name in sweep.swept if name in kept)


def train_command(sweep: Sweep, point: dict, workdir: str, extra: list[str]) -> list[str]:
    """The YAML's command with the agent's macros filled (${args} as the agent renders it, --param=value)
    and its --workdir replaced, then the sweep's group and `extra`."""
    fill = {"${env}": [], "${interpreter}": [sys.executable], "${program}": [os.path.join(ROOT, sweep.program)],
            "${args}": [f"--{name}={value}" for name, value in point.items()]}
    command = []
    for item in sweep.command:
        command += [f"--workdir={workdir}"] if item.startswith("--workdir=") else fill.get(item, [item])
    return [*command, f"--config.wandb.group={sweep.name}", *extra]


def select(sweep: Sweep, points: list[dict], only: list[str]) -> list[dict]:
    """The points matching every `field=value[,value...]` filter; a point whose kind ignores the field
    matches. An unswept field or a value outside the grid is an error naming the allowed ones."""
    for spec in only:
        field, _, values = spec.partition("=")
        name = "config." + _field(field)
        if name not in sweep.swept:
            raise ValueError(f"--only={spec}: {field} is not swept; swept: {', '.join(map(_field, sweep.swept))}")
        allowed = [str(value) for value in sweep.parameters[name]]
        unknown = [value for value in values.split(",") if value not in allowed]
        if unknown:
            raise ValueError(f"--only={spec}: {', '.join(unknown)} not in the grid; {field}: {', '.join(allowed)}")
        points = [point for point in points
                  if name not in identity(point) or str(point[name]) in values.split(",")]
    return points


def _config_value(config: dict, name: str):
    for part in _field(name).split("."):
        config = config[part]
    return config


def result_row(sweep: Sweep, point: dict, workdir: str) -> dict:
    """A finished run: its swept values as it trained them (config.json; empty where its kind ignores
    one), its test metrics and the mean effective rank of each role over layers and heads (eval.json)."""
    config, result = read_json(os.path.join(workdir, "config.json")), read_json(os.path.join(workdir, "eval.json"))
    kept = identity(point)
    row = {_field(name): _config_value(config, name) if name in kept else "" for name in sweep.swept}
    row.update(result["metrics"])
    for role in dict.fromkeys(rank["role"] for rank in result["rank"]):
        values = [rank["effective_rank"] for rank in result["rank"] if rank["role"] == role]
        row[f"effective_rank/{role}"] = sum(values) / len(values)
    return row


def _columns(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(column for row in rows for column in row))


def _cell(value) -> str:
    if value == "" or value is None:
        return "-"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _markdown(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def runs_table(rows: list[dict]) -> str:
    columns = _columns(rows)
    return _markdown(columns, [[_cell(row.get(column)) for column in columns] for row in rows])


def seeds_table(sweep: Sweep, rows: list[dict]) -> str:
    """Mean ± sample std over seeds of every metric, per setting of the other swept values."""
    keys = [_field(name) for name in sweep.swept if name != SEED]
    groups = {}
    for row in rows:
        groups.setdefault(tuple(row[key] for key in keys), []).append(row)
    measured = [column for column in _columns(rows) if column not in (*keys, _field(SEED))]
    table = []
    for setting, group in groups.items():
        cells = [_cell(value) for value in setting] + [str(len(group))]
        for column in measured:
            mean, std = stats.mean_std([row[column] for row in group])
            cells.append(f"{mean:.4f} ± {'-' if std is None else f'{std:.4f}'}")
        table.append(cells)
    return _markdown([*keys, "seeds", *(f"{column} (mean ± std)" for column in measured)], table)


def write_results(sweep: Sweep, rows: list[dict], out_dir: str, command: str) -> tuple[str, str]:
    """results.csv (one row per run, full precision) and results.md (both tables) in `out_dir`."""
    csv_path, md_path = os.path.join(out_dir, "results.csv"), os.path.join(out_dir, "results.md")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=_columns(rows))
        writer.writeheader()
        writer.writerows(rows)
    with open(md_path, "w") as f:
        f.write(f"# Sweep {sweep.name}\n\n`{command}`\n\n## Runs\n\n{runs_table(rows)}\n\n"
                f"## Mean ± std over seeds\n\n{seeds_table(sweep, rows)}\n")
    return csv_path, md_path


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The script's own flags, and the arguments after `--` for train.py."""
    own, extra = compare.split_extra(argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", help="a sweep definition, e.g. sweeps/mlm.yaml")
    parser.add_argument("--jobs", type=compare.positive_int, help=compare.JOBS_HELP)
    parser.add_argument("--only", action="append", default=[], metavar="FIELD=VALUE[,VALUE...]",
                        help="train only the points with these values (repeatable); reports cover the whole grid")
    parser.add_argument("--runs_dir", default="runs/sweeps")
    return parser.parse_args(own), extra


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args, extra = parse_args(argv)
    try:
        sweep = load_sweep(args.sweep)
        points = expand(sweep)
        selected = select(sweep, points, args.only)
    except (OSError, ValueError) as error:
        raise SystemExit(str(error)) from None
    # Absolute: train.py runs in the repository root, while relative flags mean the caller's directory.
    out_dir = os.path.join(os.path.abspath(args.runs_dir), sweep.name)
    workdirs = [os.path.join(out_dir, slug(sweep, point)) for point in points]
    jobs = [(slug(sweep, point), train_command(sweep, point, workdir, extra), workdir)
            for point, workdir in zip(points, workdirs) if point in selected]
    try:  # a workdir's config.json or eval.json that does not read names itself
        failed = compare.run_jobs(jobs, args.jobs)
        rows = [result_row(sweep, point, workdir) for point, workdir in zip(points, workdirs)
                if compare.is_finished(workdir)]
    except WorkdirError as error:
        raise SystemExit(str(error)) from None
    if rows:
        csv_path, md_path = write_results(sweep, rows, out_dir, shlex.join(["python", "scripts/sweep.py", *argv]))
        print(f"\n{seeds_table(sweep, rows)}\n\n{len(rows)}/{len(points)} runs: {csv_path}, {md_path}", flush=True)
    if failed:
        raise SystemExit(f"failed runs: {', '.join(failed)}")


if __name__ == "__main__":
    main()
