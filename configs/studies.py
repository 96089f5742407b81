"""The grids scripts/compare.py runs, as plain data: a config, the runs on it and how many seeds.

Overrides map dotted config fields to values; each becomes `--config.<field>=<value>` on train.py's
command line, the study's first, then the run's. The studies listed in studies/sweeps.py's SWEEPS are also
W&B sweeps, sweeps/<task>-<preset>.yaml, generated from them.
"""
import dataclasses

import attention
from data import scan_grammar


@dataclasses.dataclass(frozen=True)
class Run:
    name: str  # its directory and its row in the report
    overrides: dict
    # Runs sharing a non-empty group are alternatives (e.g. learning rates): the report keeps the one whose
    # validation headline metric, mean over seeds, is best, under the group's name. Test data never decides.
    group: str = ""


@dataclasses.dataclass(frozen=True)
class Study:
    config: str  # file[:presets], relative to the repository root
    overrides: dict  # shared by every run
    runs: list[Run]
    seeds: int  # each run trains with seeds 0 .. seeds - 1


def _run(kind: str, name: str = "", **options) -> Run:
    """A run of attention `kind` (every role), its options set as `attention.<option>`."""
    overrides = {"attention.name": kind, **{f"attention.{key}": value for key, value in options.items()}}
    return Run(name or kind, overrides)


def _rank_bound_grid(performer_features: tuple[int, ...], local_window: int) -> list[Run]:
    """Softmax against kernelised kinds of growing feature dimension, and local attention."""
    return [
        _run("softmax"),
        _run("linear"),  # elu + 1 features: feature dim = head dim
        *(_run("performer", f"performer_m{m}", num_features=m) for m in performer_features),
        _run("taylor", taylor_order=2),
        _run("exp_limit", exp_limit_n=2),
        _run("local", window=local_window),
    ]


def _mlm_quick() -> Study:
    # head_dim 32, sequence length 128: Performer's m below, at and above the length.
    return Study("configs/mlm.py:quick", {}, _rank_bound_grid((32, 128, 512), local_window=16), seeds=2)


def _every_kind_grid(performer_features: tuple[int, ...], local_window: int) -> list[Run]:
    """The rank-bound grid and the other kernelised kinds."""
    return _rank_bound_grid(performer_features, local_window) + [_run("relu"), _run("hedgehog"), _run("cosformer")]


def _mlm_full() -> Study:
    return Study("configs/mlm.py", {}, _every_kind_grid((32, 128, 512, 1024), local_window=16), seeds=3)


def _mlm_long() -> Study:
    """The full grid on the scientific corpus (1.8M words) at sequence length 512, for an accelerator: the
    bounds of elu+1 (head_dim 32) and of Performer's smaller m sit far below the length, and the corpus
    takes about 210 steps of 32 sequences per epoch instead of the stdlib's 30."""
    return Study("configs/mlm.py:corpus=scientific", {"dataset.seq_len": 512},
                 _every_kind_grid((32, 128, 512), local_window=64), seeds=3)


def _rnn_runs() -> list[Run]:
    """The recurrent baseline with Luong's kinds of attention (one head), and without attention."""
    rnn = {"model.name": "rnn", "model.num_heads": 1}
    kinds = ("none", "dot", "multiplicative", "additive", "local", "local_predictive", "hard")
    return [Run(f"rnn_{kind}", {**rnn, "attention.name": kind}) for kind in kinds]


def _translation_transformer_runs() -> list[Run]:
    # head_dim 16; SCAN commands have at most 9 words, so no feature dim here is below the length.
    return _rank_bound_grid((16, 64, 256), local_window=3)


def _translation_runs() -> list[Run]:
    return _translation_transformer_runs() + _rnn_runs()


def _translation_quick() -> Study:
    return Study("configs/translation.py", {"num_train_steps": 1_000}, _translation_runs(), seeds=2)


def _translation_full() -> Study:
    return Study("configs/translation.py", {}, _translation_runs(), seeds=3)


def _translation_rank() -> Study:
    """The full study's Transformer runs alone: a grid of kinds and feature dims, so also a W&B sweep."""
    return Study("configs/translation.py", {}, _translation_transformer_runs(), seeds=3)


def _translation_default() -> Study:
    """The default config (`make train`) with softmax and with elu+1 linear attention in every role."""
    return Study("configs/translation.py", {}, [_run("softmax"), _run("linear")], seeds=1)


def _translation_kinds() -> Study:
    # scaled_dot is softmax registered under a second name: one run of it is enough.
    runs = [_run(kind) for kind in attention.names() if kind != "scaled_dot"]
    return Study("configs/translation.py", {"num_train_steps": 1_000}, runs, seeds=1)


_RNN_LUONG = {"model.name": "rnn", "model.num_heads": 1, "attention.name": "multiplicative"}


def _translation_splits() -> Study:
    """The Transformer and the RNN (Luong's multiplicative attention) on each SCAN split, the default
    config otherwise, trained on the whole released training files to compare with published numbers."""
    models = {"transformer": {}, "rnn": _RNN_LUONG}
    runs = [Run(f"{model}_{split}", {**overrides, "dataset.split": split})
            for split in scan_grammar.SPLITS for model, overrides in models.items()]
    return Study("configs/translation.py:full_train", {}, runs, seeds=3)


def _translation_forms() -> Study:
    """Dynamic attention (the splits study's models) against static attention, one context for every step,
    and forced-forward (intra-temporal) attention, in the RNN and in the Transformer's cross-attention, on
    the simple and length splits; the same config as the splits study otherwise."""
    forms = {"rnn_dynamic": _RNN_LUONG,
             "rnn_static": {**_RNN_LUONG, "model.static_attention": True},
             "rnn_forced_forward": {**_RNN_LUONG, "attention.name": "forced_forward"},
             "transformer_dynamic": {},
             "transformer_forced_forward": {"attention.cross": "forced_forward"}}
    runs = [Run(f"{form}_{split}", {**overrides, "dataset.split": split})
            for split in ("simple", "length") for form, overrides in forms.items()]
    return Study("configs/translation.py:full_train", {}, runs, seeds=2)


def _listops_runs(local_window: int) -> list[Run]:
    """LRA's separating kinds with the [CLS] head, and softmax with each other pooling head."""
    kinds = [_run("softmax"), _run("linear"), _run("performer"), _run("taylor", taylor_order=2),
             _run("local", window=local_window)]
    heads = [Run(f"softmax_{head}", {"attention.name": "softmax", "model.pooling": head})
             for head in ("mean", "feed_forward", "structured")]
    return kinds + heads


def _listops_quick() -> Study:
    """Expressions of 32-128 tokens (depth 6, 5 arguments): a CPU's budget."""
    return Study("configs/listops.py:quick", {}, _listops_runs(local_window=16), seeds=2)


def _listops_full() -> Study:
    """Long Range Arena's ListOps (500-2,000 tokens), for an accelerator."""
    return Study("configs/listops.py:full", {}, _listops_runs(local_window=64), seeds=3)


_OPTION_LETTERS = {"num_features": "m", "window": "w"}  # in run names: performer_m64_N16, local_w8_N16


def _recall_run(kind: str, pairs: int, qk_head_dim: int = 0, **options) -> Run:
    """A recall run of `kind` on N = `pairs` key-value pairs; `qk_head_dim` d' (0: the head's width) sets
    a kernelised kind's feature dim, e.g. elu+1's m = d', Taylor's m = C(d' + 2, 2)."""
    width = f"_d{qk_head_dim}" if qk_head_dim else ""
    extra = "".join(f"_{_OPTION_LETTERS.get(key, key)}{value}" for key, value in options.items())
    overrides = {"attention.name": kind, "dataset.num_kv_pairs": pairs, "model.qk_head_dim": qk_head_dim,
                 **{f"attention.{key}": value for key, value in options.items()}}
    return Run(f"{kind}{width}{extra}_N{pairs}", overrides)


def _recall_quick() -> Study:
    """Causal MQAR at L = 64: softmax, elu+1 at d' = 16 (m = 16) and Taylor at d' = 4 (m = 15, nearly the
    same state) against N, and both kinds' feature width at N = 16, from m well below N to m above it."""
    pairs = (4, 8, 16)
    runs = [_recall_run(kind, n, width) for n in pairs for kind, width in
            (("softmax", 0), ("linear", 16), ("taylor", 4))]
    runs += [_recall_run("linear", 16, width) for width in (4, 64)]
    runs += [_recall_run("taylor", 16, width) for width in (2, 8)]
    return Study("configs/recall.py:quick", {}, runs, seeds=3)


def _recall_bidirectional() -> Study:
    """The quick grid in the bidirectional form, where a kernelised kind's rank bound applies directly."""
    return dataclasses.replace(_recall_quick(), config="configs/recall.py:quick,form=bidirectional")


def _recall_kinds() -> Study:
    """Every kernelised kind of Hedgehog's Table 2 and the rest of the zoo at N = 16, L = 64: Taylor and
    exp_limit at d' = 16 (m = 153, as Based), the others at the head's width 64 (Performer with m = 64)."""
    runs = [_recall_run("softmax", 16), _recall_run("linear", 16), _recall_run("relu", 16),
            _recall_run("performer", 16, num_features=64), _recall_run("taylor", 16, 16),
            _recall_run("exp_limit", 16, 16), _recall_run("cosformer", 16), _recall_run("hedgehog", 16),
            _recall_run("local", 16, window=8)]
    return Study("configs/recall.py:quick", {}, runs, seeds=2)


def _recall_anchors() -> Study:
    """Softmax at Zoology's Figure 2 sizes, d_model 64, V = 8,192: (L, N) = (64, 4), (128, 8), (256, 16)."""
    runs = [Run(f"softmax_L{length}_N{pairs}", {"dataset.seq_len": length, "dataset.num_kv_pairs": pairs})
            for length, pairs in ((64, 4), (128, 8), (256, 16))]
    return Study("configs/recall.py", {}, runs, seeds=1)


# The full recall grid's points on the feature-width axis: (kind, d', kind options). d' sets the feature dim
# m of most kernelised kinds (elu+1, relu: m = d'; cosformer, hedgehog: 2 d'; taylor, exp_limit:
# C(d' + 2, 2) = 15, 45, 153); Performer's m is its own option, local attention's state its window. Two or
# three points per kind, two learning rates: 19 x 5 N x 2 x 3 seeds = 570 runs.
_RECALL_WIDTHS = (
    [("softmax", 0, {})]
    + [(kind, width, {}) for kind in ("linear", "relu") for width in (16, 64)]
    + [(kind, width, {}) for kind in ("cosformer", "hedgehog") for width in (8, 32)]
    + [(kind, width, {}) for kind in ("taylor", "exp_limit") for width in (4, 8, 16)]
    + [("performer", 0, {"num_features": m}) for m in (16, 256)]
    + [("local", 0, {"window": window}) for window in (8, 32)]
)
_LEARNING_RATES = (1e-3, 3e-3)


def _recall_full() -> Study:
    """Every kind x N x feature width x learning rate, 3 seeds, at L = 256 and V = 8,192 (Zoology's); each
    (kind, N, width) keeps the learning rate of the best mean validation accuracy (Run.group)."""
    runs = []
    for pairs in (4, 8, 16, 32, 64):
        for kind, width, options in _RECALL_WIDTHS:
            base = _recall_run(kind, pairs, width, **options)
            runs += [Run(f"{base.name}_lr{rate:g}", {**base.overrides, "learning_rate": rate}, group=base.name)
                     for rate in _LEARNING_RATES]
    return Study("configs/recall.py:full", {}, runs, seeds=3)


_STUDIES = {
    "mlm": {"quick": _mlm_quick, "full": _mlm_full, "long": _mlm_long},
    "translation": {"quick": _translation_quick, "full": _translation_full, "default": _translation_default,
                    "kinds": _translation_kinds, "splits": _translation_splits, "forms": _translation_forms,
                    "rank": _translation_rank},
    "listops": {"quick": _listops_quick, "full": _listops_full},
    "recall": {"quick": _recall_quick, "bidirectional": _recall_bidirectional, "kinds": _recall_kinds,
               "anchors": _recall_anchors, "full": _recall_full},
}


def presets() -> dict[str, tuple[str, ...]]:
    """task -> its preset names."""
    return {task: tuple(by_preset) for task, by_preset in _STUDIES.items()}


def get_study(task: str, preset: str) -> Study:
    if task not in _STUDIES:
        raise ValueError(f"unknown task {task!r}; tasks: {', '.join(_STUDIES)}")
    if preset not in _STUDIES[task]:
        raise ValueError(f"unknown preset {preset!r} for task {task}; presets: {', '.join(_STUDIES[task])}")
    return _STUDIES[task][preset]()
