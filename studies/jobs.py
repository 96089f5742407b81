"""The training processes of a study: train.py's command line for one (run, seed), whether its workdir holds
a finished run, and the unfinished ones trained in parallel, one process per device (runtime/devices.py)."""
import concurrent.futures
import os
import queue
import re
import subprocess
import sys
import threading
import time

from configs.grids import Run, Study
from data import paths
from runtime import devices, locks
from runtime.workdirs import CONFIG_FILE, WorkdirError, read_json
from studies import StudyError, children
from training import metrics

ROOT = paths.REPOSITORY
# (label, train.py command, workdir) of one (run, seed), or of runs packed in one process (train.py --pack): the
# first packed run's workdir, where its train.log goes; job_workdirs reads every packed run's from the command.
Job = tuple[str, list[str], str]
PACK_FLAG = "--pack="
_started: set[int] = set()  # the PIDs of the train.py processes this study started: a workdir's lock that
                            # names another was held by another process (trained_elsewhere)


def train_command(study: Study, run: Run, seed: int, workdir: str, group: str, extra: list[str]) -> list[str]:
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


def packed_command(study: Study, run: Run, members: list[tuple[str, dict]], group: str,
                   extra: list[str]) -> list[str]:
    """train.py's command line that trains `members`, (workdir, {field: value} of training/packed.py's PACKABLE
    fields), as one program on the study's and the run's overrides (then `extra`)."""
    first = train_command(study, run, 0, members[0][0], group, extra)
    shared = [arg for arg in first if not arg.startswith(("--workdir=", "--config.seed="))]
    return [*shared, *(PACK_FLAG + workdir + ":" + ",".join(f"{field}={value}" for field, value in values.items())
                       for workdir, values in members)]


def job_workdirs(job: Job) -> list[str]:
    """The workdirs a job trains: each packed run's, or its one."""
    packed = [arg[len(PACK_FLAG):].rpartition(":")[0] for arg in job[1] if arg.startswith(PACK_FLAG)]
    return packed or [job[2]]


def job_finished(job: Job) -> bool:
    return all(is_finished(workdir) for workdir in job_workdirs(job))


def is_finished(workdir: str) -> bool:
    """eval.json exists and was written at the end of the run the config trained: its last step, or the
    validation that stopped it early. An eval.json that does not read (a write cut short) is no result:
    training again resumes from the last checkpoint and writes it anew."""
    eval_path, config_path = os.path.join(workdir, "eval.json"), os.path.join(workdir, CONFIG_FILE)
    if not (os.path.exists(eval_path) and os.path.exists(config_path)):
        return False
    try:
        step = read_json(eval_path).get("step")
    except WorkdirError as error:
        print(f"warning: {error}; the run will be evaluated again", flush=True)
        return False
    return metrics.ends_run(read_json(config_path), workdir, step)


def train(command: list[str], workdir: str, env: dict[str, str] | None) -> bool:
    """Runs train.py, appending its output to <workdir>/train.log; True when it exited cleanly. The process
    ends with this one (children.py): SIGTERM or SIGINT here, or this process killed."""
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, TRAIN_LOG), "a") as log:
        process = children.start(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        if process is not None:
            _started.add(process.pid)
        return process is not None and children.wait(process) == 0


def _train_timed(command: list[str], workdir: str, env: dict[str, str] | None) -> tuple[bool, float]:
    started = time.time()
    # A clean exit without eval.json at the last step (e.g. a resumed run with fewer steps) is no success.
    ok = train(command, workdir, env) and job_finished(("", command, workdir))
    return ok, time.time() - started


DATA_POLL_S = 1.0  # how often the first job's workdir is looked at for its config.json
STATUS_EVERY_S = 30.0  # how often each running job's last progress line is printed
TRAIN_LOG = "train.log"
COMPILATION_CACHE_VARIABLE = "JAX_COMPILATION_CACHE_DIR"  # read by JAX when it starts
_PROGRESS_LINE = re.compile(r"^(?:\[[^\]]+\] )?step \d+/\d+ .*$", re.MULTILINE)  # training/loop.py's, packed.py's
_TAIL_BYTES = 16_384  # the end of a train.log that holds its last progress line


def _log_size(workdir: str) -> int:
    path = os.path.join(workdir, TRAIN_LOG)
    return os.path.getsize(path) if os.path.exists(path) else 0


def job_status(label: str, workdir: str, log_offset: int, started: float) -> str:
    """One line on a running job: its last progress line in train.log past `log_offset` (where this attempt's
    output starts), or that it is still preparing (data, compilation), and how long it has run."""
    progress = "preparing (data, compilation)"
    if os.path.exists(path := os.path.join(workdir, TRAIN_LOG)):
        with open(path, "rb") as f:
            f.seek(max(log_offset, os.path.getsize(path) - _TAIL_BYTES))
            if lines := _PROGRESS_LINE.findall(f.read().decode("utf-8", errors="replace")):
                progress = lines[-1]
    return f"  {label}: {progress} ({time.time() - started:.0f}s)"


def _data_prepared(workdir: str, since: float) -> bool:
    """Whether train.py in `workdir` has prepared its data since `since`: it writes config.json after that
    and its other checks (training/loop.py), not before; an older config.json is an earlier attempt's."""
    path = os.path.join(workdir, CONFIG_FILE)
    # A second of slack: some filesystems keep modification times to the second.
    return os.path.exists(path) and os.path.getmtime(path) >= since - 1.0


def train_all(jobs: list[Job], environments: list[dict | None]):
    """Trains the jobs, one per environment at a time (devices.job_environments: each pinned to its
    device); yields (label, workdir, ok, seconds) as each ends.

    The first job starts alone: it builds the dataset and tokenizer in the shared data directory, which
    parallel processes would otherwise race to build. The others start once it has prepared them (its
    config.json is written) or has ended, so that no slot idles while it trains. Every STATUS_EVERY_S
    without a job ending, each running job's status is printed (job_status), one line each.
    """
    if not jobs:
        return
    free = queue.Queue()
    for env in environments:
        free.put(env)
    running, lock = {}, threading.Lock()  # label -> job_status's (workdir, log offset, start time)

    def train_on_free_slot(label, command, workdir):
        env = free.get()
        with lock:
            running[label] = (workdir, _log_size(workdir), time.time())
        try:
            return _train_timed(command, workdir, env)
        finally:
            with lock:
                del running[label]
            free.put(env)

    (label, command, workdir), rest = jobs[0], jobs[1:]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(environments)) as pool:
        started = time.time()
        first = pool.submit(train_on_free_slot, label, command, workdir)
        while not (first.done() or _data_prepared(workdir, started)):
            time.sleep(DATA_POLL_S)
        futures = {first: (label, workdir),
                   **{pool.submit(train_on_free_slot, label, command, workdir): (label, workdir)
                      for label, command, workdir in rest}}
        pending = set(futures)
        while pending:
            done, pending = concurrent.futures.wait(pending, timeout=STATUS_EVERY_S,
                                                    return_when=concurrent.futures.FIRST_COMPLETED)
            with lock:
                lines = [] if done else [job_status(label, *state) for label, state in running.items()]
            if lines:
                print("\n".join(lines), flush=True)
            for future in done:
                yield (*futures[future], *future.result())


def job_environments(workers: int | None) -> list[dict | None]:
    """One environment per concurrent training process: `workers` of them, or by default one per
    accelerator of this machine (one per CPU core without one); see runtime/devices.py."""
    if workers == 1:
        return [None]
    info = devices.probe()
    workers = workers or devices.default_jobs(info)
    print(f"{workers} training process(es) at once on {devices.describe(info)}", flush=True)
    return devices.job_environments(info, workers)


def trained_elsewhere(workdir: str) -> str | None:
    """Why a job that did not succeed is another process's, said after "trained by another process": that
    process holds the workdir now, or held it last (this study's train.py was refused, never holding it);
    None where this study's own train.py held it last, or nobody did: a failure."""
    if (holder := locks.holder(workdir)) is not None:
        return f"{holder} holds {workdir}; rerun once it ends to report it"
    if (pid := locks.last_holder_pid(workdir)) is None or pid in _started:
        return None
    return f"process {pid} {'finished' if is_finished(workdir) else 'held'} {workdir}"


def _in_use(jobs: list[Job]) -> list[Job]:
    """The jobs whose workdir another process holds: never trained beside it."""
    held = []
    for job in jobs:
        for workdir in job_workdirs(job):
            if (holder := locks.holder(workdir)) is not None:
                print(f"{job[0]}: trained by another process ({holder} holds {workdir}); not trained beside it: rerun "
                      f"once it ends to report it", flush=True)
                held.append(job)
                break
    return held


def with_compilation_cache(environments: list[dict | None], cache_dir: str) -> list[dict]:
    """The environments with JAX's persistent compilation cache in `cache_dir` (unless the caller's environment
    names one): a study's seeds run one program, compiled once (the tiny MLM run: 18.5 s cold, 11.7 s warm)."""
    cache = os.environ.get(COMPILATION_CACHE_VARIABLE, cache_dir)
    return [{**(env if env is not None else os.environ), COMPILATION_CACHE_VARIABLE: cache} for env in environments]


def run_jobs(jobs: list[Job], workers: int | None, compilation_cache: str | None = None) -> list[str]:
    """Trains the unfinished jobs, `workers` at a time (None: `job_environments`' default), sharing JAX's
    compilation cache in `compilation_cache` where given, printing a
    progress line as each ends (and one for each job finished earlier, skipped); returns the labels of the
    jobs that failed. A job whose workdir another process trains (it holds the workdir's lock, before or
    when this one's train.py starts: two studies started at once) is said to be trained by another process,
    not failed. SIGTERM or SIGINT stops every training process (each checkpoints its step) and then this
    one, with the status of that signal."""
    skipped = [job for job in jobs if job_finished(job)]
    held = _in_use([job for job in jobs if job not in skipped])
    pending = [job for job in jobs if job not in skipped and job not in held]
    for index, (label, _, _) in enumerate(skipped, 1):
        print(f"[{index}/{len(jobs)}] {label}: finished earlier, skipped", flush=True)
    failed = []
    try:
        environments = job_environments(workers) if pending else [None]
    except ValueError as error:
        raise StudyError(str(error)) from None
    if compilation_cache:
        environments = with_compilation_cache(environments, compilation_cache)
    with children.ended_on_exit():
        for index, (label, workdir, ok, seconds) in enumerate(train_all(pending, environments),
                                                              len(skipped) + len(held) + 1):
            elsewhere = None if ok else trained_elsewhere(workdir)
            status = ("done" if ok else f"trained by another process ({elsewhere})" if elsewhere
                      else f"FAILED (see {os.path.join(workdir, TRAIN_LOG)})")
            print(f"[{index}/{len(jobs)}] {label}: {status} in {seconds:.0f}s", flush=True)
            if not (ok or elsewhere):
                failed.append(label)
    return failed
