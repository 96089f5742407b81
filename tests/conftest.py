"""Shared fixtures: tiny SCAN files and the tiny config that trains on them. W&B is always off."""
import os

import pytest

os.environ["WANDB_MODE"] = "disabled"
# The suite compiles hundreds of tiny programs: LLVM's optimisation is about a quarter of its CPU time
# and buys nothing at these shapes. Set before any test module imports JAX.
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0".strip()


@pytest.fixture(scope="session")
def data_files(tmp_path_factory):
    """300 SCAN training pairs as TSV and 40 test pairs in SCAN's own format."""
    from data import scan_grammar

    train, test = scan_grammar.simple()
    directory = tmp_path_factory.mktemp("data")
    train_file, test_file = directory / "train.tsv", directory / "test.txt"
    train_file.write_text("".join(f"{s}\t{t}\n" for s, t in train[:300]))
    test_file.write_text("".join(f"IN: {s} OUT: {t}\n" for s, t in test[:40]))
    return str(train_file), str(test_file)


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
