"""Interventions on a trained softmax model's attention, at evaluation only: what the model loses when its own
weights are cut to rank m (the `softmax_rank` kind over the parameters it trained), when its rows are
flattened (every logit divided by a temperature T, through its query projection: q -> q / T), or when its
attention is replaced by Hedgehog's linear attention (rank <= 2 x head dim) whose feature maps alone are fitted
to the trained softmax's own rows (the Hedgehog paper's first stage, no finetuning after). Each seed's model is
evaluated as its task's final evaluation does (accuracy, ranks, row shapes) under each intervention, and the
results are reported as a study's runs are.

It measures how much what softmax learned relies on rank above m and on sharp rows, and how much of it a linear
attention taught those rows keeps; not what a model trained under either constraint reaches (the rank-or-shape
study's softmax_rank32 and hedgehog_distilled arms do).
"""
import dataclasses
import json
import math
import os

import jax
import optax
from flax import nnx

import tasks
from analysis import report
from attention import MultiHeadAttention, aux_losses
from attention.kernelized_kinds import HedgehogAttention
from configs import workdir as workdir_config
from runtime import atomic, workdirs as workdir_files
from studies import StudyError, runner
from training import evaluation, loop, model_config, sharding, validate

TRAINED_KIND = "softmax"
HEDGEHOG_LOGIT_SCALE = 2.0  # the paper's code, as the rank-or-shape study's hedgehog_distilled arm
FIT_LEARNING_RATE = 1e-2  # Adam's, for the maps: the rate the Hedgehog paper distils at
FIT_LOG_EVERY = 50  # steps between the fitting losses kept in eval.json and printed


@dataclasses.dataclass(frozen=True)
class Intervention:
    """`none`, `rank=<m>`, `temperature=<T>` or `hedgehog=<steps>`: one change to every attention of the model."""
    rank: int | None = None
    temperature: float | None = None
    hedgehog_steps: int | None = None  # steps fitting Hedgehog's maps to the trained rows; 0: the maps at identity

    @property
    def name(self) -> str:
        if self.rank is not None:
            return f"rank{self.rank}"
        if self.hedgehog_steps is not None:
            return f"hedgehog{self.hedgehog_steps}"
        return "none" if self.temperature is None else f"temperature{self.temperature:g}"


def parse(spec: str) -> Intervention:
    """`none`, `rank=32` (an integer >= 1), `temperature=4` (a number > 0) or `hedgehog=500` (an integer >= 0);
    ValueError naming the spec."""
    field, _, value = spec.partition("=")
    try:
        if spec == "none":
            return Intervention()
        if field == "rank" and int(value) >= 1:
            return Intervention(rank=int(value))
        if field == "temperature" and float(value) > 0:
            return Intervention(temperature=float(value))
        if field == "hedgehog" and int(value) >= 0:
            return Intervention(hedgehog_steps=int(value))
    except ValueError:
        pass
    raise ValueError(f"intervention {spec!r}: give none, rank=<integer >= 1>, temperature=<number > 0> or "
                     f"hedgehog=<fitting steps, an integer >= 0>")


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
    if intervention.hedgehog_steps is not None:
        config.attention.name, config.attention.hedgehog_logit_scale = "hedgehog", HEDGEHOG_LOGIT_SCALE
        config.attention.distill_weight = 1.0  # the loss the maps are fitted to; added in training mode only
    return config


def flatten_rows(model, temperature: float) -> None:
    """Divides every attention's logits by `temperature`: its query projection's kernel and bias are divided by it,
    and q enters nothing but the scores q . k."""
    for _, module in nnx.iter_modules(model):
        if isinstance(module, MultiHeadAttention):
            module.query.kernel[...] = module.query.kernel[...] / temperature
            module.query.bias[...] = module.query.bias[...] / temperature


def with_trained_parameters(task, config, data, trained) -> nnx.Module:
    """The model of `config` holding every parameter of the `trained` model, which must have them all: softmax_rank
    has none of its own, Hedgehog's maps, which softmax has not, stay at their initialisation (the identity).
    (Random state is not carried: softmax's attention dropout has none in Hedgehog, and evaluation draws none.)"""
    model = task.create_model(config, data)
    nnx.update(model, nnx.state(trained, nnx.Param))
    return model


def fit_hedgehog_maps(task, config, data, model, steps: int) -> dict[str, float]:
    """The Hedgehog paper's first stage on `model` (Hedgehog in every role): its maps alone trained, by Adam at
    FIT_LEARNING_RATE on the task's first `steps` training batches, to the sum over attentions of each one's
    attention-matching loss against softmax's weights on its own q and k (HedgehogAttention.distillation_loss),
    with dropout off. Those q and k are the swapped model's, computed through the Hedgehog layers before it (so a
    map also gets gradient from the layers after it), where the paper feeds each layer the teacher's inputs.
    Returns the loss every FIT_LOG_EVERY steps and at the last, by step; ValueError where one is not finite."""
    model.eval()
    map_weights = set()
    for path, module in nnx.iter_modules(model):
        if isinstance(module, HedgehogAttention):
            module.deterministic = False  # it adds its distillation loss only when not deterministic
            map_weights.add((*path, "weight"))
    graphdef, weights, rest = nnx.split(model, lambda path, _: tuple(path) in map_weights, ...)
    optimizer = optax.adam(FIT_LEARNING_RATE)

    @jax.jit
    def fit_step(weights, opt_state, rest, batch):
        def loss_of(weights):
            fitted = nnx.merge(graphdef, weights, rest)
            task.metric_sums(fitted, batch)  # the forward pass; the loss is what the attentions added
            return aux_losses.pop_total(fitted)

        loss, grads = jax.value_and_grad(loss_of)(weights)
        updates, opt_state = optimizer.update(grads, opt_state, weights)
        return optax.apply_updates(weights, updates), opt_state, loss

    opt_state, losses = optimizer.init(weights), {}
    batch_size = sharding.global_batch_size(config.per_device_batch_size)
    for step in range(steps):
        batch = task.train_batch(config, data, batch_size, step)
        weights, opt_state, loss = fit_step(weights, opt_state, rest, batch)
        if step % FIT_LOG_EVERY == 0 or step == steps - 1:  # a non-finite map stays so: seen at the next log
            if not math.isfinite(losses.setdefault(str(step), float(loss))):
                raise ValueError(f"fitting Hedgehog's maps: the attention-matching loss is {float(loss)} at step "
                                 f"{step + 1} of {steps}; the evaluation would read diverged maps")
            print(f"  fitting Hedgehog's maps: step {step + 1}/{steps}, attention-matching loss {float(loss):.4f}",
                  flush=True)
    nnx.update(model, weights)
    model.eval()  # deterministic again: evaluation adds no distillation loss
    return losses


def evaluate(workdir: str, intervention: Intervention, out_dir: str) -> dict:
    """The final evaluation of the run in `workdir` under `intervention`, written as eval.json (with spectra.json)
    to `out_dir` and returned, with the intervention under "intervention"."""
    trained_config = workdir_config.load_config(workdir)
    config = intervened_config(trained_config, intervention)
    validate.validate(config)  # a rank cut in a causal role is refused here, in one line
    task = tasks.get(config.task)
    step, trained, data = loop.restore_latest_model(task, trained_config, workdir)
    model = with_trained_parameters(task, config, data, trained)
    fitted = {}
    if intervention.temperature is not None:
        flatten_rows(model, intervention.temperature)
    if intervention.hedgehog_steps:
        fitted["fit_loss"] = fit_hedgehog_maps(task, config, data, model, intervention.hedgehog_steps)
    os.makedirs(out_dir, exist_ok=True)
    result = evaluation.evaluate_and_write(task, config, out_dir, model, data, step)
    result["intervention"] = {**dataclasses.asdict(intervention), "workdir": workdir, **fitted}
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
