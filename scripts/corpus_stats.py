"""Size of an MLM config's corpus per split: documents, words, SentencePiece tokens, packed sequences.

  python scripts/corpus_stats.py                       # the default corpus (configs/mlm.py)
  python scripts/corpus_stats.py --corpus=scientific   # the pydoc corpus of the pinned packages
  python scripts/corpus_stats.py --config=configs/mlm.py --config.dataset.vocab_size=8000
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run as a script from anywhere: the repository's packages must import

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from data import mlm_corpus, text_corpus  # noqa: E402
from data.mlm import pack  # noqa: E402
from training import mlm, validate  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", os.path.join(ROOT, "configs", "mlm.py"), "MLM config.")
_CORPUS = flags.DEFINE_enum("corpus", None, text_corpus.CORPORA,
                            "The pydoc corpus to measure (sets dataset.name=pydoc and dataset.corpus).")


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)
    config = _CONFIG.value
    if _CORPUS.value:
        config.dataset.name, config.dataset.corpus = "pydoc", _CORPUS.value
    validate.validate(config)
    data = mlm.prepare_data(config, workdir="")
    dataset = config.dataset
    print(f"vocabulary: {data.tokenizer.vocab_size} {dataset.tokenizer} pieces; sequences of {dataset.seq_len}")
    print("| split | documents | words | tokens | sequences |\n|---|---:|---:|---:|---:|")
    for split in (dataset.train_split, dataset.validation_split, dataset.split):
        texts = mlm_corpus.load_texts(dataset, split)
        token_lists = data.tokenizer.encode_batch(texts)
        tokens = sum(len(ids) for ids in token_lists)
        words = sum(len(text.split()) for text in texts)
        sequences = len(pack(token_lists, dataset.seq_len))
        print(f"| {split} | {len(texts):,} | {words:,} | {tokens:,} | {sequences:,} |")


if __name__ == "__main__":
    app.run(main)
