"""train.py and eval.py run as a user runs them, a process per command, without each command paying the
seconds of importing JAX, Flax and Orbax and of tearing those modules down at its exit (most of a failing
command's time): a server process imports the modules the scripts import, then forks a child per command,
which runs the script as `python <script> <flags>` would: its sys.argv, sys.path[0] the script's folder, its
working directory, stdout and stderr to files, stdin empty. It ends as the interpreter ends a script (the
status of SystemExit, an uncaught error's traceback and status 1, its threads joined, atexit's functions
run, stdout and stderr flushed), but for the teardown of the modules, where nothing of the scripts' is
written. Importing initialises no JAX backend (JAX warns at a fork after one), so each child starts its
own, as a new process does; JAX reads its environment at import, so a command runs in the server's.

  runner = ScriptRunner(env)
  process = runner.run("train.py", "--workdir=...", cwd=...)  # a subprocess.CompletedProcess
  runner.close()
"""
import atexit
import gc
import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What train.py and eval.py import, but for themselves (each defines its flags as it is imported).
PRELOADED = ("absl.app", "ml_collections.config_flags", "runtime.cli", "training.evaluation", "training.loop",
             "training.metrics", "training.validate", "runtime.workdirs")


class ScriptRunner:
    """The client: starts the server, runs commands through it one at a time."""

    def __init__(self, env: dict):
        self._server = subprocess.Popen([sys.executable, os.path.abspath(__file__)], cwd=ROOT, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self._server.stdout.readline()
        assert ready == "ready\n", f"the script server did not start: {ready!r}"

    def run(self, script: str, *flags: str, cwd: str = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
        """`python ROOT/<script> <flags>` in `cwd`, as subprocess.run(..., capture_output=True, text=True)."""
        path = os.path.join(ROOT, script)
        with tempfile.TemporaryDirectory(prefix="script-output-") as outputs:
            stdout, stderr = os.path.join(outputs, "stdout"), os.path.join(outputs, "stderr")
            request = {"script": path, "flags": list(flags), "cwd": cwd, "stdout": stdout, "stderr": stderr,
                       "timeout": timeout}
            self._server.stdin.write(json.dumps(request) + "\n")
            self._server.stdin.flush()
            reply = json.loads(self._server.stdout.readline())
            with open(stdout) as out, open(stderr) as err:
                output, errors = out.read(), err.read()
        if reply["timed_out"]:
            raise subprocess.TimeoutExpired([path, *flags], timeout, output, errors)
        return subprocess.CompletedProcess([sys.executable, path, *flags], reply["returncode"], output, errors)

    def close(self) -> None:
        self._server.stdin.close()  # the server's loop ends with its input
        self._server.wait(timeout=60)


# ---- the server (this file run as a script) ----------------------------------------------------------

def _become_the_script(script: str, flags: list[str], cwd: str, stdout: str, stderr: str, **_) -> None:
    """In the forked child: the process `python <script> <flags>` started in `cwd` would be, running the
    script to its exit."""
    os.chdir(cwd)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, stdout), (2, stderr)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.argv, sys.path[0] = [script, *flags], os.path.dirname(script)
    status = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        status = _exit_status(stop.code)
    except BaseException:  # noqa: BLE001 - what the interpreter does with an uncaught error
        sys.excepthook(*sys.exc_info())
        status = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _exit_status(code) -> int:
    """The status the interpreter exits with for sys.exit(code)."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def _wait(pid: int, timeout: float) -> tuple[int, bool]:
    """(exit status as subprocess gives it, whether the child was killed at `timeout`)."""
    deadline = time.monotonic() + timeout
    while (finished := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), True
        time.sleep(0.01)
    return os.waitstatus_to_exitcode(finished[1]), False


def _serve() -> None:
    sys.path[0] = ROOT  # the folder of train.py and eval.py, as `python ROOT/train.py` puts it first
    for name in PRELOADED:
        importlib.import_module(name)
    # The modules' objects out of the children's cyclic collections, each of which would walk the inherited
    # heap (and copy it, page by page, from the server's); as in tests/conftest.py, the first generation is
    # collected at 20,000 new objects.
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 1_000)
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _become_the_script(**request)
        returncode, timed_out = _wait(pid, request["timeout"])
        print(json.dumps({"returncode": returncode, "timed_out": timed_out}), flush=True)


if __name__ == "__main__":
    _serve()
