"""docs/design.md stays true: its eval.json schema matches what a real tiny run writes, key for key and type
for type, and every Python file it names exists."""
import json
import pathlib
import re

import pytest

from configs import listops as listops_config
from training import loop

ROOT = pathlib.Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "object": dict, "array": list,
              "boolean": bool, "null": type(None)}


def _schema() -> dict:
    blocks = re.findall(r"^```schema\n(.*?)^```", DESIGN.read_text(), re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, f"{DESIGN} must hold exactly one ```schema block (eval.json's); found {len(blocks)}"
    return json.loads(blocks[0])


SCHEMA = _schema()


def _is(value, name: str) -> bool:
    """Whether `value` has the JSON type `name` (a bool is neither an integer nor a number)."""
    if isinstance(value, bool):
        return name == "boolean"
    return isinstance(value, JSON_TYPES[name])


def violations(value, kind, path: str) -> list[str]:
    """What in `value` breaks the schema type `kind` (see docs/design.md), each as 'path: reason'."""
    if isinstance(kind, dict) and "object of" in kind:
        if not isinstance(value, dict):
            return [f"{path}: {value!r} is not an object"]
        return [error for key, item in value.items() for error in violations(item, kind["object of"], f"{path}.{key}")]
    if isinstance(kind, dict) and "array of" in kind:
        if not isinstance(value, list):
            return [f"{path}: {value!r} is not an array"]
        return [error for i, item in enumerate(value) for error in violations(item, kind["array of"], f"{path}[{i}]")]
    if isinstance(kind, dict):  # an object with fixed keys: {"required": {...}, "optional": {...}}
        return object_violations(value, kind, path)
    if isinstance(kind, str) and kind in SCHEMA["definitions"]:
        return violations(value, SCHEMA["definitions"][kind], path)
    names = kind if isinstance(kind, list) else [kind]
    unknown = [name for name in names if name not in JSON_TYPES]
    assert not unknown, f"docs/design.md: {path}: {unknown} is neither a JSON type nor a definition"
    return [] if any(_is(value, name) for name in names) else [f"{path}: {value!r} is not {' or '.join(names)}"]


def object_violations(value, schema: dict, path: str) -> list[str]:
    """Missing required keys, keys the schema does not declare, and values of the wrong type."""
    if not isinstance(value, dict):
        return [f"{path}: {value!r} is not an object"]
    required, optional = schema.get("required", {}), schema.get("optional", {})
    errors = [f"{path}.{key}: written by the code but not declared in docs/design.md"
              for key in value if key not in required and key not in optional]
    errors += [f"{path}.{key}: declared required in docs/design.md but not written"
               for key in required if key not in value]
    declared = {**optional, **required}
    return errors + [error for key, item in value.items() if key in declared
                     for error in violations(item, declared[key], f"{path}.{key}")]


@pytest.fixture(scope="module")
def eval_files(tiny_run, tmp_path_factory) -> dict[str, dict]:
    """task -> the eval.json of a tiny run, as read back from the workdir: translation (the session's tiny
    run) and ListOps."""
    _, translation = tiny_run
    listops = tmp_path_factory.mktemp("listops")
    config = listops_config.get_config("tiny")
    config.dataset.data_dir = str(listops / "datasets")
    loop.train_and_evaluate(config, str(listops / "run"))
    return {task: json.loads((pathlib.Path(workdir) / "eval.json").read_text())
            for task, workdir in (("translation", translation), ("listops", listops / "run"))}


@pytest.mark.parametrize("task", ["translation", "listops"])
def test_eval_json_has_exactly_the_keys_and_types_the_design_declares(eval_files, task):
    """Every required key is there with its type, every key there is declared, down to rank rows and state
    entries: a new key without a line in the doc fails, and so does a promised key the code dropped."""
    errors = object_violations(eval_files[task], SCHEMA, "eval.json")
    assert not errors, "eval.json and docs/design.md disagree:\n" + "\n".join(errors)


@pytest.mark.parametrize("task", ["translation", "listops"])
def test_eval_json_metrics_and_roles_are_those_the_design_lists(eval_files, task):
    """The metric keys are exactly the task's in metrics_by_task; roles are among the declared roles."""
    result = eval_files[task]
    assert result["task"] == task
    assert list(result["metrics"]) == SCHEMA["metrics_by_task"][task]
    roles = set(result["attention"]) | set(result["state"]) | {row["role"] for row in result["rank"] + result["shape"]}
    assert roles <= set(SCHEMA["roles"])
    assert result["rank"], "a Transformer run has rank rows: the rows' schema was checked on none"
    assert result["shape"], "a Transformer run has shape rows: the rows' schema was checked on none"


def test_the_listed_optional_keys_are_ones_only_some_tasks_write(eval_files):
    """A key the doc calls optional is not written by every task run here (else it belongs in required)."""
    always = set.intersection(*(set(result) for result in eval_files.values()))
    assert always & set(SCHEMA["optional"]) == set()


def test_every_python_file_the_design_names_exists():
    """Each `....py` path in backticks (globs and placeholders aside) is a file of the repository."""
    spans = re.findall(r"`([^`\n]+)`", DESIGN.read_text())
    paths = {path for span in spans for path in re.findall(r"(?<![\w/.*<>-])([\w-]+(?:/[\w-]+)*\.py)\b", span)}
    assert paths, "docs/design.md names no Python file: the pattern no longer matches"
    missing = sorted(path for path in paths if not (ROOT / path).is_file())
    assert not missing, f"docs/design.md names files that do not exist: {', '.join(missing)}"


def test_every_relative_link_of_the_readme_and_docs_resolves():
    """A link to a report, a figure or another page names a file of the repository (anchors aside)."""
    broken = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for match in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            target = match.group(1)
            if not target.startswith(("http://", "https://", "mailto:")) and not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert broken == []
