"""The size of an MLM config's corpus per split, as `python -m scripts.corpus_stats` prints it: documents,
words, SentencePiece tokens and packed sequences."""
from absl import logging

from data import mlm_corpus
from data.mlm import pack
from tasks import mlm
from training import validate


def run(options) -> None:
    """Prints the vocabulary and a row per split of options.config's corpus (the pydoc corpus options.corpus
    where it is set), as the flags of scripts/corpus_stats.py ask."""
    logging.set_verbosity(logging.WARNING)
    config = options.config
    if options.corpus:
        config.dataset.name, config.dataset.corpus = "pydoc", options.corpus
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
