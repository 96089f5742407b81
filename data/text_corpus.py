"""English text for masked language modelling, assembled from installed documentation and shipped frozen.

Two corpora (CORPORA), neither needing a download:
  stdlib      the docstrings of Python's standard library and the pydoc help topics;
  scientific  the docstrings of the packages requirements.txt installs (SCIENTIFIC_PACKAGES), ~6x larger.
Both depend on the versions that hold them (a patch release of Python rewords docstrings; the accelerator
image lacks some packages), so each was collected once (`collect_documents`) and lies frozen in the
repository, data/corpora/<corpus>-<shard>.jsonl.xz, with its provenance in data/corpora/manifest.json: every
machine trains on the same text. `python -m scripts.freeze_corpus` collects them anew.
"""

import ast
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import lzma
import platform
import os
import sysconfig
import warnings
from pathlib import Path

import pydoc_data.topics
import tensorflow_datasets as tfds

from data import local_builder
from data.local_builder import LocalBuilder

SPLITS = ("train", "validation", "test")
CORPORA = ("stdlib", "scientific")
# The import names of every distribution requirements.txt pinned when the corpus was made (pytest's pins are
# in requirements-test.txt now), plus scipy (jax's numerical routines) and
# mpl_toolkits (inside matplotlib's wheel). Fixed, not read from requirements.txt: a pin added for a tool
# should not change the corpus. In sorted order, which decides the module that keeps a repeated docstring.
SCIENTIFIC_PACKAGES = (
    "_pytest", "absl", "array_record", "etils", "flax", "importlib_resources", "jax", "jaxlib", "matplotlib",
    "ml_collections", "mpl_toolkits", "numpy", "optax", "orbax", "pytest", "sacrebleu", "scipy",
    "sentencepiece", "tensorflow_datasets", "wandb", "xdist", "yaml")
_SKIPPED_DIRECTORIES = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
_MIN_WORDS = 3  # shorter docstrings ("Return self.", "Constructor.") are boilerplate, not prose
_DOCUMENTED_NODES = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_STATEMENT_NODES = (ast.stmt, ast.excepthandler, ast.match_case)  # what can contain a definition
FROZEN_DIR = Path(__file__).parent / "corpora"
MANIFEST = FROZEN_DIR / "manifest.json"

Documents = list[tuple[str, str]]


def collect_documents(corpus: str = "stdlib") -> Documents:
    """(name, text) of every module (and, for stdlib, pydoc topic) with documentation, sorted by name.

    A docstring that already appeared earlier (modules in sorted path order, then topics) is dropped, so
    inherited or copied documentation does not repeat across documents and splits.
    """
    seen: set[str] = set()
    documents = []
    for name, docstrings in _sources(corpus):
        fresh = [text for text in docstrings if _is_new_prose(text, seen)]
        if fresh:
            documents.append((name, "\n\n".join(fresh)))
    return sorted(documents)


def _is_new_prose(text: str, seen: set[str]) -> bool:
    if len(text.split()) < _MIN_WORDS or text in seen:
        return False
    seen.add(text)
    return True


def _sources(corpus: str):
    """(document name, docstrings) in the order that decides which copy of a repeated docstring stays."""
    _check_corpus(corpus)
    if corpus == "stdlib":
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        return [*_module_docstrings(stdlib, stdlib), *_topic_docstrings()]
    return [source for package in SCIENTIFIC_PACKAGES for source in _package_docstrings(package)]


def _check_corpus(corpus: str) -> None:
    if corpus not in CORPORA:
        raise ValueError(f"corpus={corpus!r} is not a pydoc corpus; choose one of: {', '.join(CORPORA)}")


def _package_docstrings(package: str):
    """The modules of an installed top-level package, named from the directory that holds it.

    find_spec of a top-level name locates the package without executing it; a namespace package (orbax,
    mpl_toolkits) may span several directories.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or spec.submodule_search_locations is None:
        raise ModuleNotFoundError(f"{package!r} is no installed package; the scientific corpus reads the "
                                  f"packages requirements.txt installs")
    for location in sorted(spec.submodule_search_locations):
        yield from _module_docstrings(Path(location), Path(location).parent)


def _module_docstrings(root: Path, base: Path):
    """(dotted module name relative to base, its docstrings in source order) of the modules under root, in
    sorted path order."""
    for path in _module_paths(root):
        name = _module_name(path.relative_to(base))
        docstrings = _docstrings(path)
        if name is not None and docstrings is not None:
            yield name, docstrings


def _module_paths(root: Path) -> list[Path]:
    paths = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if d not in _SKIPPED_DIRECTORIES)
        paths += [Path(directory, f) for f in sorted(files) if f.endswith(".py")]
    return paths


def _module_name(relative: Path) -> str | None:
    """`email/mime/text.py` -> `email.mime.text`, `json/__init__.py` -> `json`; None for a file that is
    no importable module (such as `config-3.11-x86_64-linux-gnu/python-config.py`)."""
    parts = relative.with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not all(part.isidentifier() for part in parts):
        return None
    return ".".join(parts)


def _docstrings(path: Path) -> list[str] | None:
    """Module docstring, then those of its classes and functions; None if the file does not parse.

    The source is parsed, never imported: importing some modules has side effects (`antigravity` opens a
    web browser).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in old modules' string literals
            tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):  # ValueError covers undecodable bytes and null bytes
        return None
    docstrings = [ast.get_docstring(node) for node in [tree, *_definitions(tree)]]
    return [text for text in docstrings if text]


def _definitions(node: ast.AST):
    """Classes and functions under node in source order. Only statements are visited: definitions never
    sit inside expressions, and skipping those makes this several times faster than ast.walk."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, _STATEMENT_NODES):
            if isinstance(child, _DOCUMENTED_NODES):
                yield child
            yield from _definitions(child)


def _topic_docstrings():
    for key, text in sorted(pydoc_data.topics.topics.items()):
        yield f"topic:{key}", [text.strip()]


# --- the frozen corpora ---------------------------------------------------------------------------------


SHARD_BYTES = 4_000_000  # of JSON text a shard holds at most: about 0.7 MB compressed, small files to track


def frozen_path(corpus: str, shard: int, directory: Path = FROZEN_DIR) -> Path:
    return directory / f"{corpus}-{shard:02d}.jsonl.xz"


def freeze(corpus: str, directory: Path = FROZEN_DIR) -> dict:
    """Collects `corpus` from this installation and writes it in shards (`frozen_path`), one JSON object
    {"name", "text"} a line, sorted by name, with its entry in the directory's manifest.json (returned): the
    sha256 of the whole text (the corpus's name, config_name) and of each shard's file."""
    documents = collect_documents(corpus)
    lines = [json.dumps({"name": name, "text": text}, ensure_ascii=False) + "\n" for name, text in documents]
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(f"{corpus}-*.jsonl.xz"):
        stale.unlink()
    shards = [lzma.compress("".join(shard).encode("utf-8"), preset=9) for shard in _shards(lines)]
    for index, data in enumerate(shards):
        frozen_path(corpus, index, directory).write_bytes(data)
    entry = {"sha256": hashlib.sha256("".join(lines).encode("utf-8")).hexdigest(),
             "shards": [hashlib.sha256(data).hexdigest() for data in shards], "documents": len(documents),
             "words": sum(len(text.split()) for _, text in documents),
             "python": platform.python_version(), "packages": _versions(corpus)}
    manifest_path = directory / MANIFEST.name
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest[corpus] = entry
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return entry


def _shards(lines: list[str]) -> list[list[str]]:
    """Consecutive lines, SHARD_BYTES of text at most a shard (a longer line alone)."""
    shards, size = [[]], 0
    for line in lines:
        if shards[-1] and size + len(line) > SHARD_BYTES:
            shards, size = shards + [[]], 0
        shards[-1].append(line)
        size += len(line)
    return shards


def _versions(corpus: str) -> dict[str, str]:
    """The versions the text was read from: the distributions of SCIENTIFIC_PACKAGES (none for stdlib)."""
    if corpus == "stdlib":
        return {}
    distributions = importlib.metadata.packages_distributions()
    names = sorted({name for package in SCIENTIFIC_PACKAGES for name in distributions.get(package, ())})
    return {name: importlib.metadata.version(name) for name in names}


def frozen_documents(corpus: str, directory: Path = FROZEN_DIR) -> Documents:
    """(name, text) of the frozen corpus, sorted by name; each shard's bytes checked against the manifest."""
    _check_corpus(corpus)
    text = ""
    for index, expected in enumerate(_manifest_entry(corpus, directory)["shards"]):
        data = frozen_path(corpus, index, directory).read_bytes()
        if hashlib.sha256(data).hexdigest() != expected:
            raise ValueError(f"{frozen_path(corpus, index, directory)} does not match its sha256 in "
                             f"{MANIFEST.name}: restore it (git checkout) or collect it anew "
                             f"(python -m scripts.freeze_corpus)")
        text += lzma.decompress(data).decode("utf-8")
    rows = [json.loads(line) for line in text.splitlines()]
    return [(row["name"], row["text"]) for row in rows]


def _manifest_entry(corpus: str, directory: Path = FROZEN_DIR) -> dict:
    return json.loads((directory / MANIFEST.name).read_text())[corpus]


def config_name(corpus: str) -> str:
    """The builder config (and so the directory) of the frozen corpus: named after its content, so that a
    corpus collected anew is built, and its vocabulary trained, apart from the old one's files."""
    return f"{corpus}_{_manifest_entry(corpus)['sha256'][:12]}"


def split_of(name: str) -> str:
    """"train", "validation" or "test" (90/5/5) by a hash of the name alone, so a document keeps its split
    when others are added or removed, whatever the order they come in."""
    bucket = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") % 20
    return "train" if bucket < 18 else "validation" if bucket == 18 else "test"


@dataclasses.dataclass(eq=False)
class CorpusConfig(tfds.core.BuilderConfig):
    corpus: str = "stdlib"  # one of CORPORA


_DESCRIPTIONS = {
    "stdlib": (
        "English documentation of Python: docstrings of its standard-library modules, classes and functions "
        "and its pydoc help topics, deduplicated, one document per module or topic. Read from the frozen "
        "copy in the repository (data/corpora/manifest.json names the Python it was collected from)."
    ),
    "scientific": (
        f"English documentation of the Python packages {', '.join(SCIENTIFIC_PACKAGES)}: docstrings of "
        "their modules, classes and functions, deduplicated, one document per module, tests excluded. Read "
        "from the frozen copy in the repository (data/corpora/manifest.json names the versions)."
    ),
}


class PydocCorpus(LocalBuilder, skip_registration=True):
    """The frozen documentation, one example per document; one config per corpus (the default: stdlib),
    named after the frozen file's content (config_name)."""

    VERSION = tfds.core.Version("2.0.0")
    RELEASE_NOTES = {"1.0.0": "Docstrings of the installed modules, deduplicated.",
                     "2.0.0": "Read from the corpus frozen in the repository, the same on every machine."}
    BUILDER_CONFIGS = [CorpusConfig(name=config_name(corpus), corpus=corpus) for corpus in CORPORA]

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=_DESCRIPTIONS[self.builder_config.corpus],
            features=tfds.features.FeaturesDict({"name": tfds.features.Text(), "text": tfds.features.Text()}),
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # read from the repository, nothing to download
        documents = frozen_documents(self.builder_config.corpus)
        return {
            split: self._generate_examples([doc for doc in documents if split_of(doc[0]) == split])
            for split in SPLITS
        }

    def _generate_examples(self, documents: Documents):
        for name, text in documents:
            yield name, {"name": name, "text": text}


def load_documents(split: str, data_dir: str, corpus: str = "stdlib") -> list[str]:
    """Texts of a split sorted by document name, building the array_record files under data_dir once."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not a corpus split; choose one of: {', '.join(SPLITS)}")
    _check_corpus(corpus)
    config = next(config for config in PydocCorpus.BUILDER_CONFIGS if config.corpus == corpus)
    builder = local_builder.prepared(PydocCorpus, config=config, data_dir=data_dir, file_format="array_record")
    # TFDS writes records in the order of their hashed keys, so the order is restored by sorting.
    examples = [(ex["name"], ex["text"]) for ex in builder.as_data_source(split=split)]
    return [text.decode("utf-8") for _, text in sorted(examples)]


def corpus_statistics(data_dir: str, corpus: str = "stdlib") -> dict[str, dict[str, int]]:
    """Documents and whitespace-separated words per split."""
    statistics = {}
    for split in SPLITS:
        texts = load_documents(split, data_dir, corpus)
        statistics[split] = {"documents": len(texts), "words": sum(len(text.split()) for text in texts)}
    return statistics
