"""The grids scripts/compare.py runs, as plain data: a config, the runs on it and how many seeds.

Overrides map dotted config fields to values; each becomes `--config.<field>=<value>` on train.py's
command line, the study's first, then the run's.
"""
import dataclasses

import attention


@dataclasses.dataclass(frozen=True)
class Run:
    name: str  # its directory and its row in the report
    overrides: dict


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


def _mlm_full() -> Study:
    runs = _rank_bound_grid((32, 128, 512, 1024), local_window=16) + [_run("relu"), _run("hedgehog"), _run("cosformer")]
    return Study("configs/mlm.py", {}, runs, seeds=3)


def _rnn_runs() -> list[Run]:
    """The recurrent baseline with Luong's kinds of attention (one head), and without attention."""
    rnn = {"model.name": "rnn", "model.num_heads": 1}
    kinds = ("none", "dot", "multiplicative", "additive", "local", "local_predictive", "hard")
    return [Run(f"rnn_{kind}", {**rnn, "attention.name": kind}) for kind in kinds]


def _translation_runs() -> list[Run]:
    # head_dim 16; SCAN commands have at most 9 words, so no feature dim here is below the length.
    return _rank_bound_grid((16, 64, 256), local_window=3) + _rnn_runs()


def _translation_quick() -> Study:
    return Study("configs/translation.py", {"num_train_steps": 1_000}, _translation_runs(), seeds=2)


def _translation_full() -> Study:
    return Study("configs/translation.py", {}, _translation_runs(), seeds=3)


def _translation_kinds() -> Study:
    # scaled_dot is softmax registered under a second name: one run of it is enough.
    runs = [_run(kind) for kind in attention.names() if kind != "scaled_dot"]
    return Study("configs/translation.py", {"num_train_steps": 1_000}, runs, seeds=1)


def _translation_splits() -> Study:
    """The Transformer and the RNN (Luong's multiplicative attention) on each SCAN split, the default
    config otherwise."""
    models = {"transformer": {}, "rnn": {"model.name": "rnn", "model.num_heads": 1,
                                         "attention.name": "multiplicative"}}
    runs = [Run(f"{model}_{split}", {**overrides, "dataset.split": split})
            for split in ("simple", "length", "add_jump") for model, overrides in models.items()]
    return Study("configs/translation.py", {}, runs, seeds=1)


_STUDIES = {
    "mlm": {"quick": _mlm_quick, "full": _mlm_full},
    "translation": {"quick": _translation_quick, "full": _translation_full, "kinds": _translation_kinds,
                    "splits": _translation_splits},
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
