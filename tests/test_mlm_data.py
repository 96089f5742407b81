"""MLM data: BERT masking against its formula and rates, packing, batches by step, the pydoc corpora and
their TFDS builder, the SentencePiece tokenizer."""

import collections
import importlib.metadata
import importlib.util
import itertools
import json
import lzma
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from configs import mlm as mlm_config
from data import mlm, mlm_corpus, paths, text_corpus
from data.tokenizer import EOS, MASK, NUM_SPECIAL, PAD, Tokenizer, load_or_train, train_sentencepiece

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# `training` (and with it jax) is imported in the tests that need it, after the stdlib parses: with jax's
# objects in memory, the garbage collector makes those parses ~50% slower.

VOCAB_SIZE = 1000
SEQ_LEN = 128
MAX_PREDICTIONS = mlm.default_max_predictions(SEQ_LEN)


def padded_rows(rng: np.random.Generator, num_rows: int, length: int) -> np.ndarray:
    """Random non-special tokens, each row followed by PAD from a random length on (some rows all PAD)."""
    tokens = rng.integers(NUM_SPECIAL, VOCAB_SIZE, (num_rows, length), dtype=np.int32)
    real_lengths = rng.integers(0, length + 1, num_rows)
    tokens[np.arange(length) >= real_lengths[:, None]] = PAD
    return tokens


@pytest.fixture(scope="module")
def masked():
    tokens = padded_rows(np.random.default_rng(0), 2000, SEQ_LEN)
    batch = mlm.mask_tokens(tokens, np.random.default_rng(1), vocab_size=VOCAB_SIZE,
                            max_predictions=MAX_PREDICTIONS)
    return tokens, batch


def test_default_max_predictions_is_berts():
    assert mlm.default_max_predictions(128) == 20
    assert mlm.default_max_predictions(512) == 77


def test_mask_tokens_predicts_the_formula_count_of_real_tokens_per_row(masked):
    tokens, batch = masked
    num_real = (tokens != PAD).sum(axis=1)
    expected = [min(MAX_PREDICTIONS, max(1, round(0.15 * n))) if n else 0 for n in num_real]
    np.testing.assert_array_equal(batch["weights"].sum(axis=1), expected)
    assert abs(sum(expected) / num_real.sum() - 0.15) < 0.01
    assert {name: (array.shape, array.dtype) for name, array in batch.items()} == {
        "inputs": ((2000, SEQ_LEN), np.int32), "positions": ((2000, MAX_PREDICTIONS), np.int32),
        "targets": ((2000, MAX_PREDICTIONS), np.int32), "weights": ((2000, MAX_PREDICTIONS), np.float32)}


def test_mask_tokens_chooses_distinct_real_positions_and_targets_the_originals(masked):
    tokens, batch = masked
    used = batch["weights"] > 0
    positions = batch["positions"]
    originals = np.take_along_axis(tokens, positions, axis=1)
    assert np.all(originals[used] != PAD)
    np.testing.assert_array_equal(batch["targets"][used], originals[used])
    distinct = [len(set(row[row_used])) == row_used.sum() for row, row_used in zip(positions, used)]
    assert all(distinct)
    assert not positions[~used].any() and not batch["targets"][~used].any()
    assert np.all(batch["weights"][~used] == 0)


def test_mask_tokens_replaces_80_10_10_within_binomial_bounds(masked):
    tokens, batch = masked
    used = batch["weights"] > 0
    replaced = np.take_along_axis(batch["inputs"], batch["positions"], axis=1)[used]
    targets = batch["targets"][used]
    is_mask, is_random = replaced == MASK, (replaced != MASK) & (replaced != targets)
    # A random replacement draws the original token again with probability 1 / (non-special ids).
    p_random = 0.1 * (1 - 1 / (VOCAB_SIZE - NUM_SPECIAL))
    n = len(replaced)
    for count, p in ((is_mask.sum(), 0.8), (is_random.sum(), p_random), ((~is_mask & ~is_random).sum(), 0.1)):
        assert abs(count - n * p) < 5 * math.sqrt(n * p * (1 - p))
    assert np.all(replaced[is_random] >= NUM_SPECIAL)
    untouched = np.ones_like(tokens, bool)
    row, slot = np.nonzero(used)
    untouched[row, batch["positions"][row, slot]] = False
    np.testing.assert_array_equal(batch["inputs"][untouched], tokens[untouched])


def test_mask_tokens_may_mask_eos_but_never_pad():
    tokens = np.array([[EOS, EOS, EOS, PAD], [PAD, PAD, PAD, PAD]])
    batch = mlm.mask_tokens(tokens, np.random.default_rng(0), vocab_size=VOCAB_SIZE, max_predictions=4)
    np.testing.assert_array_equal(batch["weights"], [[1, 0, 0, 0], [0, 0, 0, 0]])
    assert batch["positions"][0, 0] < 3 and batch["targets"][0, 0] == EOS
    np.testing.assert_array_equal(batch["inputs"][1], tokens[1])


def test_mask_tokens_is_a_function_of_the_generator_seed():
    tokens = padded_rows(np.random.default_rng(0), 50, 32)

    def masked_with(seed):
        return mlm.mask_tokens(tokens, np.random.default_rng(seed), vocab_size=VOCAB_SIZE, max_predictions=5)

    first, again, other = masked_with(3), masked_with(3), masked_with(4)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert not np.array_equal(first["positions"], other["positions"])


def test_pack_concatenates_documents_with_eos_and_pads_only_the_last_row():
    documents = [[5, 6, 7], [8], [9, 10, 11, 12, 13], [14]]
    expected = [[5, 6, 7, EOS], [8, EOS, 9, 10], [11, 12, 13, EOS], [14, EOS, PAD, PAD]]
    packed = mlm.pack(documents, 4)
    assert packed.dtype == np.int32
    np.testing.assert_array_equal(packed, expected)
    np.testing.assert_array_equal(mlm.pack(documents[:3], 4), expected[:3])  # no empty row after a full one
    assert mlm.pack([], 4).shape == (0, 4)


def test_batch_at_step_is_a_function_of_seed_and_step():
    tokens = padded_rows(np.random.default_rng(0), 100, 32)
    masking = dict(vocab_size=VOCAB_SIZE, max_predictions=5)

    def batch(seed, step):
        return mlm.batch_at_step(tokens, 16, seed, step, **masking)

    first, again = batch(0, 3), batch(0, 3)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert not np.array_equal(first["inputs"], batch(0, 4)["inputs"])
    assert not np.array_equal(first["inputs"], batch(1, 3)["inputs"])
    fixed = mlm.fixed_masking(tokens, **masking)
    np.testing.assert_array_equal(fixed["positions"], mlm.fixed_masking(tokens, **masking)["positions"])


@pytest.fixture(scope="module")
def documents():
    return text_corpus.collect_documents()


def test_collect_documents_gives_sorted_unique_names_and_texts(documents):
    names = [name for name, _ in documents]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert len({text for _, text in documents}) == len(documents)
    assert all(text.strip() for _, text in documents)
    assert {"json.decoder", "email.mime.text", "topic:assignment"} <= set(names)
    assert len(documents) > 300 and sum(len(text.split()) for _, text in documents) > 100_000


def test_split_of_is_90_5_5_and_a_function_of_the_name_alone(documents):
    names = [name for name, _ in documents]
    counts = collections.Counter(text_corpus.split_of(name) for name in names)
    for split, p in (("train", 0.9), ("validation", 0.05), ("test", 0.05)):
        assert abs(counts[split] - len(names) * p) < 5 * math.sqrt(len(names) * p * (1 - p))
    assert [text_corpus.split_of(name) for name in reversed(names)] == [
        text_corpus.split_of(name) for name in names][::-1]
    # Pinned, so a change of the hash cannot move documents between splits unnoticed.
    assert [text_corpus.split_of(name) for name in ("json", "os", "unittest", "topic:assignment")] == [
        "train", "validation", "test", "train"]


def test_pydoc_corpus_builds_the_frozen_documents_per_split(tmp_path, monkeypatch):
    documents = text_corpus.frozen_documents("stdlib")
    monkeypatch.setattr(text_corpus, "collect_documents", None)  # never read live: the frozen copy is
    for split in text_corpus.SPLITS:
        expected = [text for name, text in documents if text_corpus.split_of(name) == split]
        assert text_corpus.load_documents(split, str(tmp_path / "a")) == expected
        assert text_corpus.load_documents(split, str(tmp_path / "b")) == expected
    statistics = text_corpus.corpus_statistics(str(tmp_path / "a"))
    assert sum(s["documents"] for s in statistics.values()) == len(documents)
    with pytest.raises(ValueError, match="choose one of: train, validation, test"):
        text_corpus.load_documents("dev", str(tmp_path / "a"))
    config = "stdlib_" + json.loads(text_corpus.MANIFEST.read_text())["stdlib"]["sha256"][:12]
    assert (tmp_path / "a" / "pydoc_corpus" / config / "2.0.0" / "dataset_info.json").is_file()


def test_a_frozen_corpus_reads_back_as_collected_and_refuses_changed_bytes(tmp_path, monkeypatch):
    names = ("numpy.linalg._linalg", "scipy.cluster.hierarchy", "absl.testing.absltest")
    documents = [(name, f"The documentation of {name}, in ünicode.") for name in names]
    monkeypatch.setattr(text_corpus, "collect_documents", lambda corpus: {"scientific": documents}[corpus])
    monkeypatch.setattr(text_corpus, "SHARD_BYTES", 250)  # lines of ~105 characters: two, then one
    entry = text_corpus.freeze("scientific", tmp_path)
    assert (entry["documents"], entry["words"], len(entry["shards"])) == (3, 18, 2)
    assert entry["packages"]["numpy"] == importlib.metadata.version("numpy")
    assert text_corpus.frozen_documents("scientific", tmp_path) == documents
    path = text_corpus.frozen_path("scientific", 0, tmp_path)
    assert lzma.decompress(path.read_bytes()).decode().splitlines()[0] == (
        '{"name": "numpy.linalg._linalg", "text": "The documentation of numpy.linalg._linalg, in ünicode."}')
    assert len(lzma.decompress(text_corpus.frozen_path("scientific", 1, tmp_path).read_bytes()).splitlines()) == 1
    path.write_bytes(lzma.compress(b'{"name": "x", "text": "y"}\n'))
    with pytest.raises(ValueError, match="scientific-00.jsonl.xz does not match its sha256 in manifest.json"):
        text_corpus.frozen_documents("scientific", tmp_path)


def test_the_shipped_corpora_are_the_documentation_they_claim():
    manifest = json.loads(text_corpus.MANIFEST.read_text())
    assert all(path.stat().st_size < 2_000_000 for path in text_corpus.FROZEN_DIR.iterdir())  # small to track
    for corpus, must_hold in (("stdlib", {"json.decoder", "email.mime.text", "topic:assignment"}),
                              ("scientific", {"numpy.linalg._linalg", "flax.nnx.compat", "optax"})):
        documents = text_corpus.frozen_documents(corpus)
        names = [name for name, _ in documents]
        assert names == sorted(names) and len(set(names)) == len(names) and must_hold <= set(names)
        assert (len(documents), sum(len(text.split()) for _, text in documents)) == (
            manifest[corpus]["documents"], manifest[corpus]["words"])
    assert manifest["scientific"]["packages"]["jax"] == importlib.metadata.version("jax")


def test_the_scientific_corpus_builds_its_own_config_split_by_the_same_rule(tmp_path, monkeypatch):
    names = ("numpy.linalg._linalg", "scipy.cluster.hierarchy", "absl.testing.absltest")
    assert [text_corpus.split_of(name) for name in names] == ["train", "validation", "test"]
    documents = [(name, f"The documentation of {name}.") for name in names]
    monkeypatch.setattr(text_corpus, "frozen_documents", lambda corpus: {"scientific": documents}[corpus])
    for (_, text), split in zip(documents, text_corpus.SPLITS):
        assert text_corpus.load_documents(split, str(tmp_path), "scientific") == [text]
    assert text_corpus.corpus_statistics(str(tmp_path), "scientific")["train"] == {"documents": 1, "words": 4}
    assert sorted(path.name for path in (tmp_path / "pydoc_corpus").iterdir()) == [
        ".config", text_corpus.config_name("scientific")]


# A fake site-packages: executing any of its modules would raise, so a corpus that imported one would fail.
FAKE_PACKAGES = {
    "site/fakepkg/__init__.py": '''"""The fake package, documented in a few words."""
raise ImportError("fakepkg was imported instead of parsed")


def helper():
    """Helps with nothing at all."""
''',
    "site/fakepkg/linalg/_linalg.py": '''"""Linear algebra of the fake package."""
raise ImportError("fakepkg.linalg._linalg was imported instead of parsed")


class Matrix:
    """A matrix of fake numbers."""

    def copy(self):
        """Helps with nothing at all."""

    def __repr__(self):
        """Return repr(self)."""
''',
    "site/fakepkg/empty.py": "VALUE = 1\n",
    "site/fakepkg/broken.py": '"""Never read: the file does not parse."""\ndef broken(:\n',
    "site/fakepkg/not-a-module.py": '"""Never read: its name is no identifier."""\n',
    "site/fakepkg/tests/test_linalg.py": '"""Never read: tests are no documentation."""\n',
    # A namespace package (no __init__.py) in two directories, as orbax is.
    "site/nspkg/first.py": '"""The first part of a namespace package."""\n',
    "other_site/nspkg/second.py": '"""The second part of a namespace package."""\n',
}


def test_the_scientific_corpus_names_modules_from_site_packages_without_importing_them(tmp_path, monkeypatch):
    for relative, source in FAKE_PACKAGES.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.syspath_prepend(str(tmp_path / "other_site"))
    monkeypatch.setattr(text_corpus, "SCIENTIFIC_PACKAGES", ("fakepkg", "nspkg"))
    assert text_corpus.collect_documents("scientific") == [
        ("fakepkg", "The fake package, documented in a few words.\n\nHelps with nothing at all."),
        ("fakepkg.linalg._linalg", "Linear algebra of the fake package.\n\nA matrix of fake numbers."),
        ("nspkg.first", "The first part of a namespace package."),
        ("nspkg.second", "The second part of a namespace package."),
    ]
    assert "fakepkg" not in sys.modules
    monkeypatch.setattr(text_corpus, "SCIENTIFIC_PACKAGES", ("fakepkg", "no_such_package"))
    with pytest.raises(ModuleNotFoundError, match="'no_such_package' is no installed package"):
        text_corpus.collect_documents("scientific")


def test_every_scientific_package_is_an_installed_package_in_sorted_order():
    assert list(text_corpus.SCIENTIFIC_PACKAGES) == sorted(text_corpus.SCIENTIFIC_PACKAGES)
    for package in text_corpus.SCIENTIFIC_PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package


def test_an_unknown_corpus_is_refused_with_the_corpus_names(tmp_path):
    from training import validate

    message = "corpus='wiki' is not a pydoc corpus; choose one of: stdlib, scientific"
    with pytest.raises(ValueError, match=message):
        text_corpus.collect_documents("wiki")
    with pytest.raises(ValueError, match=message):
        text_corpus.load_documents("train", str(tmp_path), "wiki")
    message = "config.dataset.corpus='wiki' is not allowed; choose one of: stdlib, scientific"
    with pytest.raises(validate.ConfigError, match=message):
        validate.validate(mlm_config.get_config("corpus=wiki"))
    assert not list(tmp_path.iterdir())


def test_the_corpus_preset_reaches_the_corpus_and_a_vocabulary_of_its_own(monkeypatch):
    stdlib, scientific = mlm_config.get_config().dataset, mlm_config.get_config("corpus=scientific").dataset
    assert (stdlib.name, stdlib.corpus, scientific.name, scientific.corpus) == (
        "pydoc", "stdlib", "pydoc", "scientific")
    # Each frozen corpus's vocabulary lies beside its dataset, in a directory named after its content.
    datasets = paths.data_dir("datasets")  # the repository's
    for dataset in (stdlib, scientific):
        assert mlm_corpus._tokenizer_path(dataset) == os.path.join(
            datasets, "pydoc_corpus", text_corpus.config_name(dataset.corpus), "sentencepiece_unigram_4000.model")
    monkeypatch.setattr(text_corpus, "load_documents", lambda *arguments: list(arguments))
    assert mlm_corpus.load_texts(scientific, "train") == ["train", datasets, "scientific"]


# A few hundred words of plain English, generated so the test needs no data file.
TINY_CORPUS = [
    f"The {who} {does} the {what} before lunch.\nThen the {what} is {how}."
    for who, does, what, how in itertools.product(
        ("parser", "writer"), ("reads", "checks"), ("file", "socket", "buffer"), ("closed", "ready", "empty"))
]
ORDINARY_TEXT = "The writer checks the socket before lunch. Then the buffer is ready."


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_train_sentencepiece_fixes_special_ids_and_round_trips_text(tmp_path, model_type):
    path = str(tmp_path / "tiny.model")
    train_sentencepiece(TINY_CORPUS, path, vocab_size=100, model_type=model_type)
    tokenizer = Tokenizer.load(path)
    assert [tokenizer.piece(i) for i in (PAD, Tokenizer.UNK, EOS, MASK)] == ["<pad>", "<unk>", "</s>", "[MASK]"]
    assert Tokenizer.NUM_SPECIAL == NUM_SPECIAL == 4 and 0 < tokenizer.vocab_size <= 100
    ids = tokenizer.encode(ORDINARY_TEXT)
    assert Tokenizer.UNK not in ids and tokenizer.decode(ids + [PAD, PAD]) == ORDINARY_TEXT
    assert tokenizer.encode_batch([ORDINARY_TEXT, "the file"]) == [ids, tokenizer.encode("the file")]
    masked = tokenizer.encode("the [MASK] is ready")
    assert masked.count(MASK) == 1 and tokenizer.decode(masked) == "the [MASK] is ready"


def test_train_sentencepiece_is_byte_deterministic(tmp_path):
    first, second = tmp_path / "first.model", tmp_path / "second.model"
    train_sentencepiece(TINY_CORPUS, str(first), vocab_size=100)
    train_sentencepiece(TINY_CORPUS, str(second), vocab_size=100)
    assert first.read_bytes() == second.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.model", "second.model"]  # no temporaries left


def test_train_sentencepiece_rejects_an_unknown_model_type(tmp_path):
    with pytest.raises(ValueError, match="model_type='word'.*unigram, bpe"):
        train_sentencepiece(TINY_CORPUS, str(tmp_path / "m.model"), vocab_size=100, model_type="word")


def test_load_or_train_reads_the_texts_only_when_the_model_is_missing(tmp_path):
    calls = []

    def texts():
        calls.append(1)
        return TINY_CORPUS

    path = str(tmp_path / "m.model")
    trained = load_or_train(path, texts, vocab_size=100, model_type="unigram")
    loaded = load_or_train(path, texts, vocab_size=100, model_type="unigram")
    assert len(calls) == 1 and loaded.encode(ORDINARY_TEXT) == trained.encode(ORDINARY_TEXT)


def test_a_tokenizer_model_that_is_no_model_is_trained_again_with_a_warning(tmp_path, capsys):
    path, reference = str(tmp_path / "m.model"), str(tmp_path / "reference.model")
    with open(path, "wb") as f:
        f.write(b"\x00 not a ModelProto \xff" * 10)  # a cut copy, a disk error, another file under its name
    rebuilt = load_or_train(path, lambda: TINY_CORPUS, vocab_size=100)
    assert capsys.readouterr().out.startswith(f"warning: {path}: not a SentencePiece model (")
    train_sentencepiece(TINY_CORPUS, reference, vocab_size=100)  # byte-deterministic: the model it should be
    with open(path, "rb") as got, open(reference, "rb") as expected:
        assert got.read() == expected.read()
    assert rebuilt.decode(rebuilt.encode(ORDINARY_TEXT)) == ORDINARY_TEXT


def test_a_tokenizer_being_trained_by_another_process_is_waited_for_then_read(tmp_path):
    from runtime import locks

    path, finished = str(tmp_path / "m.model"), str(tmp_path / "finished.model")
    train_sentencepiece(TINY_CORPUS, finished, vocab_size=100)
    # Another builder: holds the model's lock, writes the model 1 s later, then lets go.
    builder = subprocess.Popen(
        [sys.executable, "-c", "import shutil, sys, time\nfrom runtime import locks\n"
         "with locks.building(sys.argv[1]):\n    print('building', flush=True)\n    time.sleep(1)\n"
         "    shutil.copy(sys.argv[2], sys.argv[1])", path, finished],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert builder.stdout.readline().strip() == "building"

        def never_called():
            raise AssertionError("trained a second time")

        tokenizer = load_or_train(path, never_called, vocab_size=100)
    finally:
        builder.wait(timeout=60)
    assert tokenizer.encode(ORDINARY_TEXT) == Tokenizer.load(finished).encode(ORDINARY_TEXT)
    assert locks.holder(str(tmp_path)) is None  # the workdir lock is another file: untouched


def test_a_text_of_one_line_longer_than_sentencepiece_reads_is_cut_into_sentences(tmp_path):
    """SentencePiece skips a line over 4192 bytes: a text that is one long line (here 0.3 MB) trained no model."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa"]
    line = " ".join(words[(i * 7 + i // 8) % len(words)] for i in range(50_000))
    tokenizer = load_or_train(str(tmp_path / "m.model"), lambda: [line], vocab_size=40)
    pieces = {tokenizer.piece(i) for i in range(tokenizer.vocab_size)}
    assert {f"▁{word}" for word in words} <= pieces  # every word learned whole
    prefix = " ".join(line.split(" ")[:30])
    assert tokenizer.decode(tokenizer.encode(prefix)) == prefix
