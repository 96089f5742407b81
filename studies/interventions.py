"""Interventions on a trained softmax model's attention, at evaluation only: what the model loses when its own
weights are cut to rank m (the `softmax_rank` kind over the parameters it trained) or when its rows are
flattened (every logit divided by a temperature T, through its query projection: q -> q / T). Each seed's
model is evaluated as its task's final evaluation does (accuracy, ranks, row shapes) under each intervention,
and the results are reported as a study's runs are.

It measures how much what softmax learned relies on rank above m and on sharp rows; not what a model trained
under either constraint reaches (the rank-or-shape study's softmax_rank32 and hedgehog_distilled arms do).
"""
import dataclasses
import json
import os

from flax import nnx

import tasks
from analysis import report
from attention import MultiHeadAttention
from configs import workdir as workdir_config
from runtime import atomic, workdirs as workdir_files
from studies import StudyError, runner
from training import evaluation, loop, model_config, validate

TRAINED_KIND = "softmax"


@dataclasses.dataclass(frozen=True)
class Intervention:
    """`none`, `rank=<m>` or `temperature=<T>`: one change to every attention of the model."""
    rank: int | None = None
    temperature: float | None = None

    @property
    def name(self) -> str:
        if self.rank is not None:
            return f"rank{self.rank}"
        return "none" if self.temperature is None else f"temperature{self.temperature:g}"


def parse(spec: str) -> Intervention:
    """`none`, `rank=32` (an integer >= 1) or `temperature=4` (a number > 0); ValueError naming the spec."""
    field, _, value = spec.partition("=")
    try:
        if spec == "none":
            return Intervention()
        if field == "rank" and int(value) >= 1:
            return Intervention(rank=int(value))
        if field == "temperature" and float(value) > 0:
            return Intervention(temperature=float(value))
    except ValueError:
        pass
    raise ValueError(f"intervention {spec!r}: give none, rank=<integer >= 1> or temperature=<number > 0>")


def intervened_config(config, intervention: Intervention):
    """The trained config with the rank cut as its kind (softmax_rank has softmax's parameters: none of its own);
    refused for a model that did not train softmax in every attention role."""
    task = tasks.get(config.task)
    kinds = set(model_config.role_kinds(config, task.roles(config)).values())
    if kinds != {TRAINED_KIND}:
        raise ValueError(f"the interventions act on softmax attention; this run trained {', '.join(sorted(kinds))}")
    config = config.copy_and_resolve_references()
    config.eval.plots = False
    if intervention.rank is not None:
        config.attention.name, config.attention.rank = "softmax_rank", intervention.rank
    return config


def flatten_rows(model, temperature: float) -> None:
    """Divides every attention's logits by `temperature`: its query projection's kernel and bias are divided by it,
    and q enters nothing but the scores q . k."""
    for _, module in nnx.iter_modules(model):
        if isinstance(module, MultiHeadAttention):
            module.query.kernel[...] = module.query.kernel[...] / temperature
            module.query.bias[...] = module.query.bias[...] / temperature


def evaluate(workdir: str, intervention: Intervention, out_dir: str) -> dict:
    """The final evaluation of the run in `workdir` under `intervention`, written as eval.json (with spectra.json)
    to `out_dir` and returned, with the intervention under "intervention"."""
    trained = workdir_config.load_config(workdir)
    config = intervened_config(trained, intervention)
    validate.validate(config)  # a rank cut in a causal role is refused here, in one line
    task = tasks.get(config.task)
    step, model, data = loop.restore_latest_model(task, config, workdir)
    if intervention.temperature is not None:
        flatten_rows(model, intervention.temperature)
    os.makedirs(out_dir, exist_ok=True)
    result = evaluation.evaluate_and_write(task, config, out_dir, model, data, step)
    result["intervention"] = {**dataclasses.asdict(intervention), "workdir": workdir}
    atomic.write_text(os.path.join(out_dir, evaluation.EVAL_FILE), json.dumps(result, indent=1))
    return result


def run(workdirs: list[str], interventions: list[Intervention], evals_dir: str, out_dir: str, command: str,
        notes: str, contrasts: tuple = ()) -> str:
    """Every workdir (a seed) under every intervention, each evaluation in evals_dir/<intervention>/seed<k> (kept:
    a rerun evaluates only what is missing); then report.md, results.json and the plots in `out_dir`, as a study's,
    with `contrasts` (grids.Contrast over the interventions' names) as its predictions' numbers. Returns the
    report's path; StudyError naming a workdir that cannot be evaluated so (another kind, no checkpoint)."""
    results, spectra = {}, {}
    for intervention in interventions:
        for seed, workdir in enumerate(workdirs):
            seed_dir = os.path.join(evals_dir, intervention.name, f"seed{seed}")
            if os.path.exists(path := os.path.join(seed_dir, evaluation.EVAL_FILE)):
                result = workdir_files.read_json(path)
            else:
                print(f"{intervention.name} seed{seed}: evaluating {workdir}", flush=True)
                try:
                    result = evaluate(workdir, intervention, seed_dir)
                except ValueError as error:  # ConfigError and WorkdirError are ValueErrors
                    raise StudyError(f"{workdir}: {error}") from None
            results.setdefault(intervention.name, []).append(result)
            if seed == 0 and os.path.exists(spectra_path := os.path.join(seed_dir, evaluation.SPECTRA_FILE)):
                spectra[intervention.name] = workdir_files.read_json(spectra_path)
    task = tasks.get(results[interventions[0].name][0]["task"])
    return report.write_report(task, "interventions", command, results, spectra, out_dir, runner.head_dim(results),
                               notes=notes, contrasts=contrasts)
