"""A study's wall time, its runs trained one process a seed against packed (`scripts.compare --pack=off|on`): the
measurement and report of `python -m scripts.bench_packed_study`, whose docstring (its --help) states the method."""
import glob
import json
import os
import shutil
import subprocess
import sys
import time

from benchmarks.common import machine, write_reports
from data import paths

MODES = ("off", "on")


def compare_command(options, mode: str, root: str) -> list[str]:
    """scripts.compare's command line for one mode, its runs, compilation cache and report under `root`."""
    only = [f"--only={options.only}"] if options.only else []
    seeds = [f"--seeds={options.seeds}"] if options.seeds else []
    jobs = [f"--jobs={options.jobs}"] if options.jobs else []
    return [sys.executable, "-m", "scripts.compare", f"--task={options.task}", f"--preset={options.preset}",
            *only, *seeds, *jobs, f"--pack={mode}", f"--runs_dir={root}", f"--reports_dir={root}/reports",
            "--", "--config.wandb.mode=disabled"]


def trained(root: str) -> dict:
    """What a mode's study left under `root`: each finished workdir's test metrics by its path below the task's
    folder (a pick's candidates included), and the training processes it took (one train.log each)."""
    results = {}
    for path in sorted(glob.glob(os.path.join(root, "*", "*", "**", "eval.json"), recursive=True)):
        with open(path) as f:
            results[os.path.relpath(os.path.dirname(path), root)] = json.load(f)["metrics"]
    return {"workdirs": results, "processes": len(glob.glob(os.path.join(root, "**", "train.log"), recursive=True))}


def largest_differences(first: dict, second: dict) -> dict:
    """Each metric's largest absolute difference between two sittings' runs of the same workdirs."""
    shared = sorted(first.keys() & second.keys())
    return {metric: max(abs(first[path][metric] - second[path][metric]) for path in shared)
            for metric in sorted({metric for path in shared for metric in first[path]})} if shared else {}


def measure(options) -> dict:
    """Runs the study once per mode of options.order (a mode may come back: sittings alternate so that a shared
    machine's load falls on both alike), each from scratch in its own folder under options.root (no compilation
    cache carried between sittings), and times each from its start to its report."""
    sittings = []
    for index, mode in enumerate(options.order.split(",")):
        root = os.path.abspath(os.path.join(options.root, f"{index}_pack_{mode}"))
        shutil.rmtree(root, ignore_errors=True)  # a finished run would be skipped: each sitting trains from scratch
        command = compare_command(options, mode, root)
        print(f"sitting {index}, --pack={mode}: {' '.join(command[1:])}", flush=True)
        started = time.perf_counter()
        with open(f"{root}.log", "w") as log:
            subprocess.run(command, cwd=paths.REPOSITORY, stdout=log, stderr=subprocess.STDOUT, check=True)
        sittings.append({"pack": mode, "wall_s": time.perf_counter() - started, **trained(root)})
        print(f"sitting {index}, --pack={mode}: {sittings[-1]['wall_s']:.0f} s, {len(sittings[-1]['workdirs'])} "
              f"trainings in {sittings[-1]['processes']} processes", flush=True)
    for sitting in sittings:  # every sitting against the first unpacked one: packing and chance, each in its size
        sitting["largest_differences"] = largest_differences(sittings[0]["workdirs"], sitting["workdirs"])
    return {"machine": machine(matmul_precision=False), "task": options.task, "preset": options.preset,
            "only": options.only, "seeds": options.seeds, "jobs": options.jobs, "sittings": sittings}


def mean_wall_s(result: dict, mode: str) -> float | None:
    walls = [sitting["wall_s"] for sitting in result["sittings"] if sitting["pack"] == mode]
    return sum(walls) / len(walls) if walls else None


def table(result: dict) -> str:
    unpacked = mean_wall_s(result, "off")
    lines = ["| sitting | --pack | trainings | processes | wall time | trainings/hour | x unpacked | "
             "largest test-metric gap to sitting 0 |", "|---:|---|---:|---:|---:|---:|---:|---|"]
    for index, sitting in enumerate(result["sittings"]):
        count, wall_s = len(sitting["workdirs"]), sitting["wall_s"]
        ratio = "-" if unpacked is None else f"{unpacked / wall_s:.2f}"
        gaps = ", ".join(f"{metric} {value:.2g}" for metric, value in sitting["largest_differences"].items())
        lines.append(f"| {index} | {sitting['pack']} | {count} | {sitting['processes']} | {wall_s / 60:.1f} min | "
                     f"{3600 * count / wall_s:.1f} | {ratio} | {gaps if index else '-'} |")
    if unpacked is not None and (packed := mean_wall_s(result, "on")) is not None:
        lines.append(f"\nMean wall time: unpacked {unpacked / 60:.1f} min, packed {packed / 60:.1f} min; "
                     f"packed is {unpacked / packed:.2f}x as fast. x unpacked: the mean unpacked sitting's wall time "
                     f"over the row's.")
    return "\n".join(lines)


def run(options) -> dict:
    """The benchmark as the flags of scripts/bench_packed_study.py (`options`) ask: measured, written under
    options.out (packed_study.json and .md), its table printed; returns the result."""
    if unknown := sorted(set(options.order.split(",")) - set(MODES)):
        raise SystemExit(f"--order: {', '.join(unknown)} not one of {', '.join(MODES)}")
    if options.order.split(",")[0] != "off":
        raise SystemExit(f"--order={options.order}: begin with off, the sitting the others' metrics are held to")
    os.makedirs(options.root, exist_ok=True)
    result = measure(options)
    paths_written = write_reports(result, options.out, "packed_study", lambda measured: table(measured) + "\n")
    print(table(result))
    print(f"written: {paths_written[0]}, packed_study.md")
    return result
