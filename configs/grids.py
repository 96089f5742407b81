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
    seeds: int = 0  # seeds 0 .. seeds - 1 where a prediction needs more than the study's (0: the study's)


@dataclasses.dataclass(frozen=True)
class Pick:
    """A config field chosen for each run on validation before its seeds train: every value trains once
    (seed 0) with `overrides` on top of the run's (a shortened schedule, say), and the seeds train at the
    value whose last validation headline metric is best. Test data never decides."""
    field: str  # e.g. "learning_rate"
    values: tuple
    overrides: dict  # what the candidates change besides the field, e.g. {"num_train_steps": 400}


@dataclasses.dataclass(frozen=True)
class Contrast:
    """One of a study's questions as one number: the sum of weight x headline metric over its terms, seed by
    seed (the seed fixes data order and masking in every run, so runs pair by seed), e.g. {"linear_L512": 1,
    "softmax_L512": -1, "linear": -1, "softmax": 1}: how much a gap grows with the length. A term is a run
    ("linear": its test value) or a run at a validation step ("linear@500"); one contrast's terms are all
    test values or all validation values."""
    question: str  # what the number answers, and which sign says what
    terms: dict[str, float]  # term -> weight


@dataclasses.dataclass(frozen=True)
class Study:
    config: str  # file[:presets], relative to the repository root
    overrides: dict  # shared by every run
    runs: list[Run]
    seeds: int  # each run trains with seeds 0 .. seeds - 1
    sweep: bool = False  # also a W&B sweep, sweeps/<task>-<preset>.yaml (python -m scripts.sweep --generate)
    pick: Pick | None = None  # a field each run chooses on validation first
    notes: str = ""  # printed in the report under its command: what the study is, and is not, e.g. a paper's setup
    contrasts: tuple[Contrast, ...] = ()  # its predictions as numbers, each with an interval in the report
    verdict: str = ""  # which prediction held, written once the contrasts were in; printed under them
    # Run name -> the preset of the same task whose published runs.json holds that run, trained as this study would
    # train it (the same config, overrides, pick and seeds: studies/runner.py checks): read, never trained here.
    borrowed: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.sweep and self.pick:  # a W&B grid trains every run at once: no stage to pick in first
            raise ValueError(f"{self.config}: a study that picks {self.pick.field} on validation cannot be a W&B "
                             "sweep (sweep=True); run it with python -m scripts.compare")
        if self.sweep and (more := [run.name for run in self.runs if run.seeds]):  # a grid crosses runs and seeds
            raise ValueError(f"{self.config}: runs {', '.join(more)} set their own seeds, which a W&B sweep's grid "
                             "cannot (sweep=True); run the study with python -m scripts.compare")
        names = {run.name for run in self.runs}
        if unknown := sorted(set(self.borrowed) - names):
            raise ValueError(f"{self.config}: borrowed runs {', '.join(unknown)} are not runs of the study")
        for contrast in self.contrasts:
            runs, _, steps = zip(*(term.partition("@") for term in contrast.terms))
            if unknown := sorted(set(runs) - names):
                raise ValueError(f"{self.config}: contrast {contrast.question!r} names {', '.join(unknown)}, not "
                                 f"runs of the study ({', '.join(sorted(names))})")
            if len({bool(step) for step in steps}) > 1 or not all(step.isdigit() for step in steps if step):
                raise ValueError(f"{self.config}: contrast {contrast.question!r}: its terms are all runs or all "
                                 "run@step (a validation step, an integer), not both")

    def seeds_of(self, run: Run) -> int:
        return run.seeds or self.seeds


def kind_run(kind: str, name: str = "", seeds: int = 0, **options) -> Run:
    """A run of attention `kind` (every role), its options set as `attention.<option>`."""
    overrides = {"attention.name": kind, **{f"attention.{key}": value for key, value in options.items()}}
    return Run(name or kind, overrides, seeds)


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


def tiny_study(config_file: str, sweep: bool = False) -> Study:
    """Softmax beside linear attention on the task's `tiny` preset, one seed each: a study's whole path
    (training, report, figures) in about a minute on 2 CPU cores; with `sweep`, also a W&B sweep (the task's
    `tiny_sweep`: a sweep's whole path as quickly)."""
    return Study(f"{config_file}:tiny", {}, [kind_run("softmax"), kind_run("linear")], seeds=1, sweep=sweep)
