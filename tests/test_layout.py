"""The packages' dependencies point one way: attention <- models <- training, data beside them. A model is
handed what it needs of a dataset (its special ids, its sizes); it never imports the data pipeline. And
functions stay short enough to read at a glance, config files aside (one field per line)."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORBIDDEN = {"attention": {"models", "data", "training", "configs"}, "models": {"data", "training", "configs"}}


def _imported_packages(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_packages_import_nothing_from_higher_ones(package):
    crossings = {str(path.relative_to(ROOT)): sorted(_imported_packages(path) & FORBIDDEN[package])
                 for path in sorted((ROOT / package).glob("*.py"))}
    assert {path: packages for path, packages in crossings.items() if packages} == {}


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
