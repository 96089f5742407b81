"""`pip install .` installs the attention library alone, with lower bounds on jax, flax and numpy as its
dependencies, and README's example runs against the installed files from outside the repository. Offline: setuptools
itself (what pip's build runs) lays out the package and writes its metadata from pyproject.toml."""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ("pyproject.toml", "requirements.txt", "requirements-test.txt")
EXAMPLE_HEADING = "## Use the attention kinds in your own Flax model"


def _requirements(name: str) -> list[str]:
    with open(os.path.join(ROOT, name)) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the installed files' directory, the egg-info directory) of a build of a copy of the sources: a build
    in the repository would leave build/ and *.egg-info there, under the other workers' feet."""
    root = tmp_path_factory.mktemp("package")
    shutil.copytree(os.path.join(ROOT, "attention"), root / "source" / "attention",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in FILES:
        shutil.copy(os.path.join(ROOT, name), root / "source")
    subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "egg_info",
                    f"--egg-base={root}", "build_py", f"--build-lib={root / 'lib'}"],
                   cwd=root / "source", check=True, capture_output=True)
    return root / "lib", root / "attention_lab.egg-info"


def _version(text: str) -> tuple[int, ...]:
    return tuple(map(int, text.split(".")))


def test_only_the_attention_package_is_installed_with_the_ranges_the_suite_ran(built):
    """jax, flax and numpy, each from the version requirements.txt pins (the suite's) to below the next minor
    release, which no test has run (pip install . brought jax 0.12 and numpy 2.5.5 under lower bounds alone): none
    of the lab's own dependencies (datasets, W&B, metrics, plots)."""
    lib, egg_info = built
    assert sorted(path.name for path in lib.iterdir()) == ["attention"]
    assert (egg_info / "top_level.txt").read_text().split() == ["attention"]
    requires = (egg_info / "requires.txt").read_text()
    install, test = requires.split("[test]")
    pins = dict(line.split("==") for line in _requirements("requirements.txt"))
    ranges = {}
    for line in install.split():  # e.g. jax<0.12,>=0.11.2: setuptools orders the specifiers its own way
        name = re.match(r"[A-Za-z_-]+", line).group(0)
        bounds = dict(re.findall(r"(>=|<)([\d.]+)", line[len(name):]))
        ranges[name] = (_version(bounds[">="]), _version(bounds["<"]))
    assert sorted(ranges) == ["flax", "jax", "numpy"]
    for name, (floor, ceiling) in ranges.items():
        pin = _version(pins[name])
        assert floor == pin and ceiling == (pin[0], pin[1] + 1), (name, floor, ceiling)
    assert test.split() == _requirements("requirements-test.txt")


def test_the_readme_example_runs_from_outside_the_repository(built, tmp_path):
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    example = re.search(r"```python\n(.*?)```", readme.split(EXAMPLE_HEADING, 1)[1], re.S).group(1)
    (tmp_path / "example.py").write_text(example)
    environment = {**os.environ, "PYTHONPATH": str(built[0]), "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=environment, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(2, 10, 64)"
