"""Shared fixtures: tiny SCAN files and the tiny config that trains on them. W&B is always off."""
import collections
import contextlib
import fcntl
import gc
import os
import shutil
import tempfile

import pytest

os.environ["WANDB_MODE"] = "disabled"
# The cyclic collector's first generation at 20,000 new objects, not 700: importing the lab and collecting the
# tests (a worker's first 5 s of CPU) takes a quarter less.
gc.set_threshold(20_000, 50, 1_000)
# One BLAS thread per process (set before numpy loads OpenBLAS; xdist's workers and the processes tests start
# inherit it): the workers already take a core each, and OpenBLAS's threads (numpy's, and the LAPACK behind
# jnp.linalg's eigh, svd and qr on the CPU) spin waiting for a core another worker holds. softmax_rank's eigh
# of two 1,024 x 1,024 matrices took 19 s so beside a busy core, 0.25 s on one thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# The suite runs on the CPU, also on a machine with a GPU or TPU: its parallel workers would each take the
# accelerator (75% of a GPU's memory each; a TPU's chips go to the first, the others fall back quietly).
# TEST_ACCELERATOR=1 (make test-accelerator) runs the tests marked `accelerator` on it, in one process.
ON_ACCELERATOR = os.environ.get("TEST_ACCELERATOR") == "1"


if ON_ACCELERATOR:
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    # GPUs multiply float32 matrices in TF32 (10-bit mantissa) by default; the references need float32.
    os.environ["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"
elif "_LAB_XLA_FLAGS" not in os.environ:  # an xdist worker inherits the controller's flags
    os.environ["JAX_PLATFORMS"] = "cpu"
    # The suite compiles hundreds of tiny programs: LLVM's optimisation is about a quarter of its CPU time
    # and buys nothing at these shapes. Set before any test module imports JAX. (XLA aborts on a flag its
    # jaxlib does not know: the pinned jaxlib knows this one; 0.11 dropped the fusion-emitter switch that
    # was here beside it.)
    os.environ["_LAB_XLA_FLAGS"] = "--xla_backend_optimization_level=0"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {os.environ['_LAB_XLA_FLAGS']}".strip()


def pytest_configure(config):
    config.addinivalue_line("markers", "accelerator: worth running on a GPU or TPU too (make test-accelerator)")
    if not ON_ACCELERATOR and not hasattr(config, "workerinput"):  # not in an xdist worker: it inherits it
        _share_compilations(config)
    if _last_seconds(config):  # xdist would otherwise hand out the files with the most tests first
        config.option.loadscopereorder = False


def _share_compilations(config) -> None:
    """One persistent compilation cache for the session: its xdist workers (started after this, with this
    environment) and the processes tests start (train.py, the sharding runs) compile a program once, where
    most tiny runs of a config would compile the same train, eval and decoding steps again. The key is the
    program, the XLA flags and the devices, so a hit is the program a compilation would give; a reader
    that meets an entry being written falls back to compiling. Removed when the session ends; a directory
    that JAX_COMPILATION_CACHE_DIR already names is kept and used."""
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        config.stash[_OWN_CACHE] = os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jax-cache-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # the default, 1 s, skips most


_OWN_CACHE = pytest.StashKey[str]()


def pytest_unconfigure(config):
    if _OWN_CACHE in config.stash:
        shutil.rmtree(config.stash[_OWN_CACHE], ignore_errors=True)


# ---- the longest files first -------------------------------------------------------------------------
# `make test` hands whole files to its workers (--dist loadfile): a long file started last keeps one worker
# busy while the others have nothing left. So the files go out longest first, by their seconds in the
# last run that ran them (pytest's cache, .pytest_cache); files it did not run, in collection order after.
_SECONDS_KEY = "attention-lab/seconds-per-file"
_seconds = collections.Counter()  # this session's, per file: setup, call and teardown of its tests


def _last_seconds(config) -> dict:
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    return cache.get(_SECONDS_KEY, {}) if cache else {}


def pytest_collection_modifyitems(config, items):
    last = _last_seconds(config)
    items.sort(key=lambda item: -last.get(item.nodeid.split("::")[0], 0.0))  # stable: a file's own order


def pytest_collection_finish(session):
    """The objects the imports and the collection made (JAX's, Flax's, the test modules') are kept out of the
    cyclic collector's passes (and its first generation collected at 20,000 new objects, above): tracing makes
    millions of short-lived objects, and a pass over the whole heap each time took 6% of a kind contract file's
    time (2.6 s in 40 s, timed by gc.callbacks; 0.2 s after)."""
    gc.collect()
    gc.freeze()


def pytest_runtest_logreport(report):
    _seconds[report.nodeid.split("::")[0]] += report.duration  # xdist's controller sees every worker's


def pytest_sessionfinish(session):
    if getattr(session.config, "cache", None) and not hasattr(session.config, "workerinput"):
        session.config.cache.set(_SECONDS_KEY, {**_last_seconds(session.config), **_seconds})


def _where_tests_ran() -> str:
    import jax

    devices = jax.devices()
    where = f"{len(devices)} x {devices[0].device_kind} ({devices[0].platform}), jax {jax.__version__}"
    if ON_ACCELERATOR and devices[0].platform == "cpu":
        return f"TEST_ACCELERATOR=1, but JAX sees no accelerator: tests on the CPU: {where}"
    if ON_ACCELERATOR:
        return f"tests on the accelerator: {where}"
    return f"tests on the CPU: {where} (TEST_ACCELERATOR=1 or make test-accelerator: the accelerator subset)"


def pytest_terminal_summary(terminalreporter):
    """Printed last, also under -q, where the report header is not."""
    terminalreporter.write_line(_where_tests_ran())


@contextlib.contextmanager
def _shared(tmp_path_factory, name: str):
    """The path `name` in the directory that every xdist worker of the session sees, held by this worker
    (a file lock) inside the block: the first worker to get there builds it, the others find it built."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's base directory, above each worker's own
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        yield root / name


@pytest.fixture(scope="session")
def data_files(tmp_path_factory):
    """300 SCAN training pairs as TSV and 40 test pairs in SCAN's own format: one copy for the session's
    workers, since a run's config names its files (tiny_run's is shared)."""
    from data import scan_grammar

    with _shared(tmp_path_factory, "data") as directory:
        train_file, test_file = directory / "train.tsv", directory / "test.txt"
        if not test_file.exists():
            train, test = scan_grammar.simple()
            directory.mkdir(exist_ok=True)
            train_file.write_text("".join(f"{s}\t{t}\n" for s, t in train[:300]))
            test_file.write_text("".join(f"IN: {s} OUT: {t}\n" for s, t in test[:40]))
    return str(train_file), str(test_file)


@pytest.fixture(scope="session")
def tiny_run(tiny_config, tmp_path_factory):
    """(config, workdir) of a finished run of tiny_config() with its plots, trained once in the session by
    the first worker that asks for it. Read-only: a test that would write there works on a copy."""
    from training import loop

    config = tiny_config()
    config.eval.plots = True
    with _shared(tmp_path_factory, "tiny_run") as workdir:
        if not workdir.exists():
            try:
                loop.train_and_evaluate(config, str(workdir))
            except BaseException:
                shutil.rmtree(workdir, ignore_errors=True)  # for the next test that asks to train it again
                raise
    return config, str(workdir)


@pytest.fixture(scope="session")
def tiny_config(data_files):
    """tiny_config(files=data_files, arg="tiny") -> the translation config on those files."""
    from configs import translation as translation_config

    def make(files=data_files, arg="tiny"):
        config = translation_config.get_config(arg)
        config.dataset.name = "files"
        config.dataset.train_file, config.dataset.test_file = files
        return config

    return make
