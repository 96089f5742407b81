"""A tiny translation training over 2 processes x 2 CPU devices, through jax.distributed, as a multi-host
run trains: both processes must finish and pass JAX's shutdown barrier. Run several times with busy
processes beside it, it checks that nothing after the final evaluation waits in one process only (the
other then waits at the barrier until it times out, and both abort):

  .venv/bin/python tests/two_processes.py --runs=5 --load=2

Exit status 0 when every run passed. Not in the suite: a run takes minutes on a CPU. W&B is offline, as
runs are by default: the first process logs to it, the other must not.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROCESSES, DEVICES = 2, 2
BUSY = "while True: pass"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _write_data(directory: str) -> tuple[str, str]:
    sys.path.insert(0, ROOT)
    from data import scan_grammar

    train, test = scan_grammar.simple()
    train_file, test_file = os.path.join(directory, "train.tsv"), os.path.join(directory, "test.txt")
    with open(train_file, "w") as f:
        f.write("".join(f"{source}\t{target}\n" for source, target in train[:300]))
    with open(test_file, "w") as f:
        f.write("".join(f"IN: {source} OUT: {target}\n" for source, target in test[:40]))
    return train_file, test_file


def run_once(directory: str, files: tuple[str, str], timeout: float) -> tuple[bool, str]:
    """(whether both processes exited 0 within `timeout` seconds, their output)."""
    workdir = os.path.join(directory, f"run-{time.time_ns()}")
    command = [sys.executable, "train.py", "--config=configs/translation.py:tiny", f"--workdir={workdir}",
               "--config.distributed=True", "--config.num_train_steps=6", "--config.log_every_steps=3",
               "--config.eval_every_steps=3", "--config.checkpoint_every_steps=3", "--config.dataset.name=files",
               f"--config.dataset.train_file={files[0]}", f"--config.dataset.test_file={files[1]}"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "offline", "JAX_NUM_PROCESSES": str(PROCESSES),
           "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{_free_port()}", "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
           "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}"}
    logs = [tempfile.TemporaryFile("w+") for _ in range(PROCESSES)]
    processes = [subprocess.Popen(command, cwd=ROOT, env={**env, "JAX_PROCESS_ID": str(index)}, stdout=log,
                                  stderr=subprocess.STDOUT, text=True) for index, log in enumerate(logs)]
    deadline, passed = time.time() + timeout, True
    for process in processes:
        try:
            passed &= process.wait(timeout=max(deadline - time.time(), 1)) == 0
        except subprocess.TimeoutExpired:
            passed = False
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = []
    for index, log in enumerate(logs):
        log.seek(0)
        output.append(f"--- process {index} (exit {processes[index].returncode})\n{log.read()}")
        log.close()
    return passed, "\n".join(output)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="trainings, one after the other")
    parser.add_argument("--load", type=int, default=os.cpu_count(), help="busy processes beside them")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a run may take")
    args = parser.parse_args(argv)
    load = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load)]
    passes = 0
    try:
        with tempfile.TemporaryDirectory() as directory:
            files = _write_data(directory)
            for run in range(1, args.runs + 1):
                started = time.time()
                passed, output = run_once(directory, files, args.timeout)
                passes += passed
                print(f"run {run}/{args.runs}: {'passed' if passed else 'FAILED'} in {time.time() - started:.0f}s",
                      flush=True)
                if not passed:
                    print(output[-6000:], flush=True)
    finally:
        for process in load:
            process.kill()
            process.wait()
    print(f"{passes} of {args.runs} two-process runs passed, with {args.load} busy processes beside them")
    return 0 if passes == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
