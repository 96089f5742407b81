"""Trains the translation model once per attention kind, then prints the comparison tables.

  python scripts/compare_kinds.py --workdir=runs/kinds --steps=1500
  python scripts/compare_kinds.py --workdir=runs/kinds --kinds=softmax,performer -- --config.seed=1

Each kind trains in its own process and workdir (<workdir>/<kind>, its log in train.log there); a kind
whose eval.json is already at the requested step is skipped, so an interrupted comparison resumes.
Arguments after `--` go to every train.py run.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run as a script from anywhere: the repository's packages must import

import attention  # noqa: E402
from scripts import summarize_runs  # noqa: E402


def finished(workdir: str, steps: int) -> bool:
    path = os.path.join(workdir, "eval.json")
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return json.load(f)["step"] == steps


def train(kind: str, workdir: str, steps: int, config: str, extra: list[str]) -> bool:
    os.makedirs(workdir, exist_ok=True)
    command = [sys.executable, os.path.join(ROOT, "train.py"), f"--config={config}:attention={kind}",
               f"--workdir={workdir}", f"--config.num_train_steps={steps}", *extra]
    with open(os.path.join(workdir, "train.log"), "a") as log:
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="runs/kinds")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--kinds", default=",".join(attention.names()), help="comma-separated kinds")
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "translation.py"))
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    kinds = args.kinds.split(",")
    failed = []
    for index, kind in enumerate(kinds, 1):
        workdir = os.path.join(args.workdir, kind)
        if finished(workdir, args.steps):
            print(f"[{index}/{len(kinds)}] {kind}: finished earlier, skipped", flush=True)
            continue
        started = time.time()
        ok = train(kind, workdir, args.steps, args.config, extra)
        status = "done" if ok else f"FAILED (see {workdir}/train.log)"
        print(f"[{index}/{len(kinds)}] {kind}: {status} in {time.time() - started:.0f}s", flush=True)
        if not ok:
            failed.append(kind)
    done = [os.path.join(args.workdir, k) for k in kinds if k not in failed]
    results = {workdir: summarize_runs.load(workdir) for workdir in done}
    print(summarize_runs.metrics_table(results), summarize_runs.rank_table(results), sep="\n\n")
    if failed:
        raise SystemExit(f"failed kinds: {', '.join(failed)}")


if __name__ == "__main__":
    main()
