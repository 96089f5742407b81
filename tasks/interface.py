"""What a task is: a module (or any object) with these names. The training loop, evaluation, config checks,
the study runner and its reports reach a task only through them, so a task is one module of tasks/ and its
config file (tests/test_toy_task.py builds one inside a test)."""
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Task(Protocol):
    NAME: str  # config.task
    METRICS: tuple[str, ...]  # eval.json's test metrics; the first is the headline of reports and studies
    PROGRESS_METRIC: str  # the metric of summarize() on the progress line: an accuracy in [0, 1] (eval.stop_at)

    def roles(self, config) -> tuple[str, ...]:
        """The attention roles of the model `config` selects (models.ROLES names)."""

    def allowed_kinds(self, config) -> list[str]:
        """The attention kinds those roles may take: attention.names(), and any the task's models add."""

    def check_config(self, config) -> None:
        """The task's own fields, its dataset.name among them; raises training.config_checks.ConfigError."""

    def prepare_data(self, config, workdir: str) -> Any:
        """The data, with `train` and `validation` arrays (validation None: no periodic evaluation)."""

    def create_model(self, config, data) -> Any:
        """An nnx.Module with `attention_layers()` (role -> its layers)."""

    def train_batch(self, config, data, batch_size: int, step: int) -> dict:
        """The training batch at `step`: a function of (config.seed, step) alone."""

    def metric_sums(self, model, batch, label_smoothing: float = 0.0) -> tuple[Any, dict]:
        """(mean loss, sums that add over batches), `input_tokens` among the sums (throughput's count)."""

    def summarize(self, sums: dict) -> dict:
        """Added sums -> metrics (floats)."""

    def evaluate_model(self, config, workdir: str, model, data) -> Any:
        """The final evaluation's measurements, a training.evaluation.TaskEvaluation: its metrics and its own
        extras (evaluation.evaluate_and_write adds the keys every eval.json has and writes it)."""

    def report_sections(self, results: dict, spectra: dict, out_dir: str, head_dim: int | None) -> list[str]:
        """A study's report body in markdown (analysis.report.rank_study_sections for the rank-bound grids),
        its PNGs written to out_dir; `results` maps a run to its seeds' eval.json dicts."""


MEMBERS = (*Task.__annotations__, *(name for name in vars(Task) if not name.startswith("_")))
