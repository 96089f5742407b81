"""The packages' dependencies point one way: attention <- models <- training <- tasks, data beside them, runtime
(the run's machinery) under training and data, and no module imports itself back. A model is handed what it needs of a dataset (its
special ids, its sizes); it never imports the data pipeline. A task is known by name only to its own module, report,
config, dataset and tests. The packages over runs, benchmarks, studies and demos, sit on top side by side:
none imports another. scripts/ holds the command lines over all of them, and no package imports it. And
functions stay short enough to read at a glance, config files aside (one field per line)."""
import ast
import pathlib

import pytest

import tasks

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOOLS = ("benchmarks", "studies", "demos")
FORBIDDEN = {"attention": {"models", "data", "training", "runtime", "tasks", "configs"},
             "models": {"data", "training", "runtime", "tasks", "configs"},
             "analysis": {"training", "runtime", "tasks", "configs"},
             "runtime": {"models", "analysis", "tasks", "configs", *TOOLS},
             "training": {"configs", *TOOLS}, "tasks": {"configs", *TOOLS},
             **{tool: set(TOOLS) - {tool} for tool in TOOLS}}
# What runtime/ takes of training/: the errors runtime/cli.py reports in one line.
RUNTIME_FROM_TRAINING = {"training.config_checks", "training.metrics"}
PACKAGES = ("attention", "models", "data", "training", "runtime", "tasks", "analysis", "configs", *TOOLS,
            "scripts")


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
    assert {"training", "runtime", *TOOLS} <= {package.name for package in packages}
    paths = [path for package in packages for path in sorted(package.rglob("*.py"))] + sorted(ROOT.glob("*.py"))
    assert [str(path.relative_to(ROOT)) for path in paths if "scripts" in _imported_packages(path)] == []


MAX_FUNCTION_LINES = 50
SOURCES = ("attention", "models", "data", "training", "runtime", "tasks", "analysis", *TOOLS, "scripts", "tests")


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


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _lab_modules() -> dict[str, pathlib.Path]:
    return {_module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).glob("*.py"))}


def _imports(name: str, path: pathlib.Path, modules) -> set[str]:
    """The lab modules `name` imports: `from a import b` counts as a.b where that is a module, else a."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                      for alias in node.names}
    return (found & set(modules)) - {name}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, or None (depth-first search)."""
    state, stack = {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[module] = "done"
        stack.pop()
        return None

    return next((cycle for module in sorted(graph) if module not in state and (cycle := visit(module))), None)


def _import_graph() -> dict[str, set[str]]:
    modules = {**_lab_modules(), "train": ROOT / "train.py"}
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_no_module_imports_itself_back():
    graph = _import_graph()
    assert graph["tasks"] >= {f"tasks.{task}" for task in tasks.names()}  # the one list of tasks
    assert graph["configs.task_configs"] >= {f"configs.{task}" for task in tasks.names()}
    assert _cycle(graph) is None


def test_runtime_takes_only_the_errors_it_reports_from_training():
    graph = _import_graph()
    taken = {target for module, targets in graph.items() if module.startswith("runtime.")
             for target in targets if target.startswith("training")}
    assert taken <= RUNTIME_FROM_TRAINING


def _import_paths(graph: dict[str, set[str]], start: str) -> dict[str, list[str]]:
    """Each module reachable from `start` by imports -> one shortest chain of imports to it (breadth first)."""
    paths, frontier = {start: [start]}, [start]
    while frontier:
        reached = {}
        for module in frontier:
            for target in sorted(graph[module] - set(paths) - set(reached)):
                reached[target] = paths[module] + [target]
        paths.update(reached)
        frontier = list(reached)
    return paths


def test_imports_lead_from_train_py_to_every_task_and_model_class():
    """A reader (an IDE, grep) follows train.py to each task module and to the module of each model class a
    task builds, by plain imports: no module is found by name at run time."""
    import models
    paths = _import_paths(_import_graph(), "train")
    model_modules = {getattr(models, name).__module__ for name in
                     ("EncoderDecoder", "LanguageModel", "MaskedLanguageModel", "SequenceClassifier")}
    wanted = {f"tasks.{task}" for task in tasks.names()} | model_modules | {"attention.registry"}
    assert {module for module in wanted if module not in paths} == set()
    assert paths["tasks.mlm"][-2:] == ["tasks", "tasks.mlm"]  # through the list, not a lookup by name
    assert {"runtime.cli", "training.loop"} <= set(paths)  # the entry's command line and its loop


def test_a_cycle_is_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def _task_names_in(path: pathlib.Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}"
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Constant) and node.value in tasks.names()]


def test_a_task_is_named_only_in_its_module_config_dataset_report_and_tests():
    own = {ROOT / package / f"{task}.py" for task in tasks.names() for package in ("tasks", "configs", "data")}
    own |= {ROOT / "analysis" / f"{task}_report.py" for task in tasks.names()}
    paths = [path for path in _lab_modules().values() if path not in own] + [ROOT / "train.py", ROOT / "eval.py"]
    assert [hit for path in paths for hit in _task_names_in(path)] == []
