"""Encoder-decoder Transformer on SCAN (generated from its grammar, built locally as a TFDS dataset).

Presets in the argument, comma separated:
  attention=<kind>   every role uses <kind> (see `attention.names()`)
  split=<split>      SCAN split: simple, length, add_jump or add_turn_left
  full_train         train on the whole released training file (no validation split), as published
                     results do
  rnn                the recurrent encoder-decoder with Luong's multiplicative attention, one head
  tiny               a seconds-long run for tests and smoke checks
e.g. `--config=configs/translation.py:attention=linear,split=length`.
"""
import functools

import ml_collections

import attention
from configs import common, grids, presets
from data import scan_grammar


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    config = common.base_config("translation")
    config.per_device_batch_size = 64
    config.learning_rate = 2e-3
    config.model.name = "transformer"  # or "rnn": the recurrent encoder-decoder (models/rnn.py)
    config.model.num_heads = 4  # per stack, encoder and decoder each: 2 layers of d_model 64
    config.model.tied_embeddings = True  # output projection = target embedding^T
    config.model.cell = "lstm"  # rnn: lstm or gru (d_model is the hidden size; mlp_dim, positions unused)
    config.model.bidirectional = True  # rnn: a bidirectional encoder
    # rnn: static attention, one query (the encoder's final state), so one context for every decoder step
    config.model.static_attention = False
    # rnn: "key_value" or "key_value_predict" attention of the decoder over its own last memory_window
    # states, each state split in key, value (and predict) parts (Daniluk et al. 2017); "none"
    config.model.decoder_memory = "none"
    config.model.memory_window = 5  # rnn: decoder states the decoder memory attends to

    config.dataset.name = "scan"  # "scan" (generated) or "files" (train_file / test_file)
    config.dataset.split = "simple"  # SCAN split as released: simple, length, add_jump, add_turn_left
    # Hold ~10% of the training commands out as the validation split (those whose CRC-32 is 0 mod 10;
    # an add_* split's primitive stays in training): periodic evaluation and tuning read it, only eval.json
    # reads test. False: train on the whole released training file, as published results do, with no
    # periodic evaluation.
    config.dataset.hold_out_validation = True
    config.dataset.train_file = ""  # files: `IN: ... OUT: ...` lines or `source<TAB>target`
    config.dataset.test_file = ""
    # files: the longest source and target, in words, a line may have (longer ones are an error naming
    # file:line); every batch pads to the longest line, so they bound memory.
    config.dataset.max_source_len = 256
    config.dataset.max_target_len = 256
    config.dataset.data_dir = "datasets"  # where the TFDS dataset is built; relative: to the repository

    config.eval.batch_size = 512  # teacher-forced evaluation and decoding
    config.eval.beam_size = 1  # decoding of the test outputs: 1 is greedy, more is beam search
    config.eval.length_penalty = 0.0  # beam search ranks log p / ((5 + length) / 6)^alpha (GNMT); 0: none
    config.eval.rank_examples = 32

    presets.apply(config, arg, {"attention": common.set_attention, "split": _set_split, "rnn": _set_rnn,
                                "full_train": _set_full_train, "tiny": _set_tiny})
    return config


def _set_split(config, split):
    config.dataset.split = split


def _set_full_train(config, _):
    config.dataset.hold_out_validation = False


def _set_rnn(config, _):
    config.model.name = "rnn"
    config.model.num_heads = 1  # Luong's attention has one head
    config.attention.name = "multiplicative"  # Luong's "general" score


def _set_tiny(config, _):
    common.set_tiny_schedule(config)
    config.per_device_batch_size = 16
    config.model.num_layers = 1
    config.model.d_model = 32
    config.model.num_heads = 2
    config.model.mlp_dim = 64
    config.eval.batch_size = 256


# The studies of `python -m scripts.compare --task=translation --preset=<name>`: grids of runs on this config.
def _rnn_runs() -> list[grids.Run]:
    """The recurrent baseline with Luong's kinds of attention (one head), and without attention."""
    rnn = {"model.name": "rnn", "model.num_heads": 1}
    kinds = ("none", "dot", "multiplicative", "additive", "local", "local_predictive", "hard")
    return [grids.Run(f"rnn_{kind}", {**rnn, "attention.name": kind}) for kind in kinds]


def _transformer_runs() -> list[grids.Run]:
    # head_dim 16; SCAN commands have at most 9 words, so no feature dim here is below the length.
    return grids.rank_bound_grid((16, 64, 256), local_window=3)


def _runs() -> list[grids.Run]:
    return _transformer_runs() + _rnn_runs()


def _study_quick() -> grids.Study:
    return grids.Study("configs/translation.py", {"num_train_steps": 1_000}, _runs(), seeds=2)


def _study_full() -> grids.Study:
    return grids.Study("configs/translation.py", {}, _runs(), seeds=3)


def _study_rank() -> grids.Study:
    """The full study's Transformer runs alone: a grid of kinds and feature dims, so also a W&B sweep."""
    return grids.Study("configs/translation.py", {}, _transformer_runs(), seeds=3, sweep=True)


def _study_default() -> grids.Study:
    """The default config (`make train`) with softmax and with elu+1 linear attention in every role."""
    runs = [grids.kind_run("softmax"), grids.kind_run("linear")]
    return grids.Study("configs/translation.py", {}, runs, seeds=1)


def _study_kinds() -> grids.Study:
    # scaled_dot is softmax registered under a second name: one run of it is enough. A kind that is not
    # incremental (softmax_rank) cannot take the decoder's roles, nor one that reads the layer's input (gla,
    # deltanet, gated_deltanet) cross-attention, and every run here puts its kind in every role.
    runs = [grids.kind_run(kind) for kind in attention.names()
            if kind != "scaled_dot" and attention.registry.get(kind).incremental
            and not getattr(attention.registry.get(kind), "reads_inputs", False)]
    return grids.Study("configs/translation.py", {"num_train_steps": 1_000}, runs, seeds=1)


_RNN_LUONG = {"model.name": "rnn", "model.num_heads": 1, "attention.name": "multiplicative"}


def _study_splits() -> grids.Study:
    """The Transformer and the RNN (Luong's multiplicative attention) on each SCAN split, the default
    config otherwise, trained on the whole released training files to compare with published numbers."""
    models = {"transformer": {}, "rnn": _RNN_LUONG}
    runs = [grids.Run(f"{model}_{split}", {**overrides, "dataset.split": split})
            for split in scan_grammar.SPLITS for model, overrides in models.items()]
    return grids.Study("configs/translation.py:full_train", {}, runs, seeds=3)


def _study_forms() -> grids.Study:
    """Dynamic attention (the splits study's models) against static attention, one context for every step,
    and forced-forward (intra-temporal) attention, in the RNN and in the Transformer's cross-attention, on
    the simple and length splits; the same config as the splits study otherwise."""
    forms = {"rnn_dynamic": _RNN_LUONG,
             "rnn_static": {**_RNN_LUONG, "model.static_attention": True},
             "rnn_forced_forward": {**_RNN_LUONG, "attention.name": "forced_forward"},
             "transformer_dynamic": {},
             "transformer_forced_forward": {"attention.cross": "forced_forward"}}
    runs = [grids.Run(f"{form}_{split}", {**overrides, "dataset.split": split})
            for split in ("simple", "length") for form, overrides in forms.items()]
    return grids.Study("configs/translation.py:full_train", {}, runs, seeds=2)


STUDIES = {
    "tiny": functools.partial(grids.tiny_study, "configs/translation.py"),
    "tiny_sweep": functools.partial(grids.tiny_study, "configs/translation.py", sweep=True),
    "quick": _study_quick,
    "full": _study_full,
    "default": _study_default,
    "kinds": _study_kinds,
    "splits": _study_splits,
    "forms": _study_forms,
    "rank": _study_rank,
}
