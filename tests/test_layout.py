"""The packages' dependencies point one way: attention <- models <- training, data beside them. A model is
handed what it needs of a dataset (its special ids, its sizes); it never imports the data pipeline. The
packages over runs, benchmarks, studies and demos, sit on top side by side: none imports another. scripts/
holds the command lines over all of them, and no package imports it. And functions stay short enough to
read at a glance, config files aside (one field per line)."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOOLS = ("benchmarks", "studies", "demos")
FORBIDDEN = {"attention": {"models", "data", "training", "configs"}, "models": {"data", "training", "configs"},
             **{tool: set(TOOLS) - {tool} for tool in TOOLS}}


def _imported_packages(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_what_it_must_not(package):
    crossings = {str(path.relative_to(ROOT)): sorted(_imported_packages(path) & FORBIDDEN[package])
                 for path in sorted((ROOT / package).glob("*.py"))}
    assert {path: packages for path, packages in crossings.items() if packages} == {}


def test_nothing_but_scripts_imports_scripts():
    """No package (the tests, which run the scripts, aside), nor train.py or eval.py."""
    packages = [path.parent for path in sorted(ROOT.glob("*/__init__.py")) if path.parent.name != "scripts"]
    assert {"training", *TOOLS} <= {package.name for package in packages}
    paths = [path for package in packages for path in sorted(package.rglob("*.py"))] + sorted(ROOT.glob("*.py"))
    assert [str(path.relative_to(ROOT)) for path in paths if "scripts" in _imported_packages(path)] == []


MAX_FUNCTION_LINES = 50
SOURCES = ("attention", "models", "data", "training", "analysis", "benchmarks", "studies", "demos", "scripts", "tests")


def test_no_function_is_longer_than_fifty_lines():
    paths = [path for package in SOURCES for path in sorted((ROOT / package).glob("*.py"))]
    paths += [ROOT / "train.py", ROOT / "eval.py"]
    long = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = length
    assert long == {}
