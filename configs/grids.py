"""What a study is, as plain data: a config, the runs on it and how many seeds; and the grids of attention
kinds that several tasks' studies share. Each task's config file lists its studies (STUDIES), which
studies/catalog.py looks up.

Overrides map dotted config fields to values; each becomes `--config.<field>=<value>` on train.py's
command line, the study's first, then the run's.
"""
import dataclasses


@dataclasses.dataclass(frozen=True)
class Run:
    name: str  # its directory and its row in the report
    overrides: dict


@dataclasses.dataclass(frozen=True)
class Pick:
    """A config field chosen for each run on validation before its seeds train: every value trains once
    (seed 0) with `overrides` on top of the run's (a shortened schedule, say), and the seeds train at the
    value whose last validation headline metric is best. Test data never decides."""
    field: str  # e.g. "learning_rate"
    values: tuple
    overrides: dict  # what the candidates change besides the field, e.g. {"num_train_steps": 400}


@dataclasses.dataclass(frozen=True)
class Study:
    config: str  # file[:presets], relative to the repository root
    overrides: dict  # shared by every run
    runs: list[Run]
    seeds: int  # each run trains with seeds 0 .. seeds - 1
    sweep: bool = False  # also a W&B sweep, sweeps/<task>-<preset>.yaml (python -m scripts.sweep --generate)
    pick: Pick | None = None  # a field each run chooses on validation first

    def __post_init__(self):
        if self.sweep and self.pick:  # a W&B grid trains every run at once: no stage to pick in first
            raise ValueError(f"{self.config}: a study that picks {self.pick.field} on validation cannot be a W&B "
                             "sweep (sweep=True); run it with python -m scripts.compare")
    notes: str = ""  # printed in the report under its command: what the study is, and is not, e.g. a paper's setup


def kind_run(kind: str, name: str = "", **options) -> Run:
    """A run of attention `kind` (every role), its options set as `attention.<option>`."""
    overrides = {"attention.name": kind, **{f"attention.{key}": value for key, value in options.items()}}
    return Run(name or kind, overrides)


def rank_bound_grid(performer_features: tuple[int, ...], local_window: int) -> list[Run]:
    """Softmax against kernelised kinds of growing feature dimension, and local attention."""
    return [
        kind_run("softmax"),
        kind_run("linear"),  # elu + 1 features: feature dim = head dim
        *(kind_run("performer", f"performer_m{m}", num_features=m) for m in performer_features),
        kind_run("taylor", taylor_order=2),
        kind_run("exp_limit", exp_limit_n=2),
        kind_run("local", window=local_window),
    ]


def every_kind_grid(performer_features: tuple[int, ...], local_window: int) -> list[Run]:
    """The rank-bound grid and the other kernelised kinds."""
    others = [kind_run(kind) for kind in ("relu", "hedgehog", "cosformer")]
    return rank_bound_grid(performer_features, local_window) + others


def tiny_study(config_file: str) -> Study:
    """Softmax beside linear attention on the task's `tiny` preset, one seed each: a study's whole path
    (training, report, figures) in about a minute on 2 CPU cores."""
    return Study(f"{config_file}:tiny", {}, [kind_run("softmax"), kind_run("linear")], seeds=1)
