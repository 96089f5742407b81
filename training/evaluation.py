"""Evaluation shared by the tasks: metric sums over a split, attention capture, ranks and row shapes, plots,
eval.json. The entry that evaluates a workdir, eval.py's, is training/loop.py's `evaluate`."""
import contextlib
import dataclasses
import io
import json
import os

import jax
import numpy as np
from flax import nnx

from analysis import rank, shape
from data import pipeline
from models import CAUSAL_ROLES
from runtime import atomic, devices, workdirs
from training import model_config, sharding
from training.steps import make_eval_step

EVAL_FILE = "eval.json"  # the final evaluation, in the workdir
SPECTRA_FILE = "spectra.json"
ATTENTION_PLOT, SPECTRA_PLOT = "attention.png", "spectra.png"  # under plots/, with config.eval.plots
ATTENTION_EXAMPLE = "attention_example.npz"  # under plots/: the weights of attention.png
QUERY_TOKENS, KEY_TOKENS = ".query_tokens", ".key_tokens"  # an array's name in it: role + suffix


@contextlib.contextmanager
def capturing_weights(model):
    """Within the block, every attention layer sows its explicit [B, H, Lq, Lk] weights."""
    layers = [layer for role_layers in model.attention_layers().values() for layer in role_layers]
    for layer in layers:
        layer.capture_weights = True
    try:
        yield
    finally:
        for layer in layers:
            layer.capture_weights = False


def attention_weights(model, forward, batch) -> dict[str, jax.Array]:
    """role -> [num_layers, B, H, Lq, Lk] attention matrices of `forward(model, batch)` (eval mode), left on
    the device: at long lengths they are far larger than what the analysis brings back."""
    model.eval()
    with capturing_weights(model):
        graphdef, state = nnx.split(model)

    @jax.jit
    def run(state, batch):
        captured = nnx.merge(graphdef, state)
        forward(captured, batch)
        return {role: jax.numpy.stack([layer.attention_weights.value[0] for layer in layers])
                for role, layers in captured.attention_layers().items()}

    return run(state, batch)


def metric_totals(eval_step, params, rest, arrays, batch_size: int) -> dict:
    """The eval step's sums added over every row of `arrays`, in fixed-size batches split over the devices
    the parameters are on: rounded up to a multiple of them with padding rows, which weigh nothing."""
    mesh = sharding.mesh_of(params)
    totals = None
    for batch, _ in pipeline.fixed_size_batches(arrays, sharding.padded_batch_size(batch_size, mesh)):
        sums = jax.device_get(eval_step(params, rest, sharding.put_batch(batch, mesh)))
        totals = sums if totals is None else jax.tree.map(np.add, totals, sums)
    return totals


def model_metric_totals(model, metric_sums, arrays, batch_size: int) -> dict:
    """metric_totals of `model` itself, in evaluation mode."""
    model.eval()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    # Placed on a mesh, the step is the training loop's eval step, out_shardings included: the same program, which
    # the compilation cache then serves.
    mesh = sharding.mesh_of(params)
    shardings = {"params": _shardings(params, mesh), "rest": _shardings(rest, mesh)} if mesh else None
    return metric_totals(make_eval_step(graphdef, metric_sums, shardings=shardings), params, rest, arrays, batch_size)


def _shardings(tree, mesh):
    """Each array's own sharding; replicated on `mesh` for a host (numpy) array."""
    return jax.tree.map(lambda x: x.sharding if isinstance(x, jax.Array) else sharding.replicated(mesh), tree)


def rank_sample(num_rows: int, num_examples: int) -> np.ndarray:
    """A fixed sample of rows (the same for every run on the same data)."""
    count = min(num_examples, num_rows)
    return np.sort(np.random.default_rng(0).choice(num_rows, count, replace=False))


def rank_bounds(model) -> dict[str, list]:
    """Per role, each layer's rank bound (MultiHeadAttention.rank_bound) where no causal mask lifts it, else None."""
    return {role: [None if role in CAUSAL_ROLES else layer.rank_bound for layer in layers]
            for role, layers in model.attention_layers().items()}


def attention_state(model, seq_lens: dict[str, int]) -> dict:
    """Per role of the model: its kind, feature dim (None for the softmax family), the widths of a head's
    keys and values, and the numbers one head keeps to attend over seq_lens[role] positions
    (MultiHeadAttention.state_size) with their total over the role's heads and layers. A role whose layers
    differ in kind (model.layer_kinds): its kinds joined by commas, no one feature dim, the mean state of a
    head over its layers, and under "layers" each layer's kind, feature dim and state per head."""
    state = {}
    for role, layers in model.attention_layers().items():
        first, causal = layers[0], role in CAUSAL_ROLES
        per_layer = [{"kind": layer.kind, "feature_dim": layer.feature_dim,
                      "per_head": layer.state_size(seq_lens[role], causal=causal)} for layer in layers]
        total = sum(entry["per_head"] for entry in per_layer) * first.num_heads
        state[role] = {"kind": first.kind, "feature_dim": first.feature_dim, "key_dim": first.qk_head_dim,
                       "value_dim": first.head_dim, "seq_len": seq_lens[role], "per_head": per_layer[0]["per_head"],
                       "total": total}
        if len({entry["kind"] for entry in per_layer}) > 1:
            state[role] |= {"kind": ",".join(entry["kind"] for entry in per_layer), "feature_dim": None,
                            "per_head": round(total / (first.num_heads * len(layers))), "layers": per_layer}
    return state


def attention_analysis(config, workdir, model, weights, query_len, key_len, tokens_q, tokens_k,
                       query_positions=None, selections=None) -> dict:
    """eval.json's `rank` and `shape` rows and spectra.json for `weights` (role -> [layers, B, H, Lq, Lk])
    whose example e is valid on [:query_len[role][e], :key_len[role][e]]; example 0's weights in
    plots/attention_example.npz; its heat maps and the spectra as plots when `config.eval.plots`.
    query_positions and selections: see shape_rows."""
    if not weights:  # a model without attention (the RNN baseline's lower bound)
        return {"rank": [], "shape": []}
    bounds = rank_bounds(model)
    singular_values = rank.attention_spectra(weights, query_len, key_len)
    summary = rank.summarize_attention(singular_values, query_len, key_len, bounds)
    spectra = {role: rank.mean_spectrum(s, query_len[role], key_len[role]) for role, s in singular_values.items()}
    atomic.write_text(os.path.join(workdir, SPECTRA_FILE),
                      json.dumps({role: spectrum.tolist() for role, spectrum in spectra.items()}))
    # Only example 0 is drawn (evaluate_and_write), so only its unpadded block leaves the device. It is kept
    # even without plots: a study's figure of every run side by side is drawn from it.
    first = {role: jax.device_get(w[:, 0, :, : query_len[role][0], : key_len[role][0]])
             for role, w in weights.items()}
    write_attention_example(os.path.join(workdir, "plots", ATTENTION_EXAMPLE), first, tokens_q, tokens_k)
    return {"rank": summary,
            "shape": shape_rows(model, weights, query_len, key_len, query_positions or {}, selections or {})}


def shape_rows(model, weights, query_len, key_len, query_positions: dict, selections: dict) -> list:
    """analysis/shape.py's rows of `weights` (as attention_analysis's) over every unpadded query row and over
    each of `selections` (name -> [B, Lq] bool, in every role). A row's keys are its example's unpadded ones,
    in a causal role those up to its position: query_positions[role] [B, Lq], by default the row's index."""
    positions = {role: query_positions.get(role, np.tile(np.arange(w.shape[-2]), (w.shape[1], 1)))
                 for role, w in weights.items()}
    rows = shape.attention_rows(weights, key_len, positions, CAUSAL_ROLES)
    chosen = {}
    for role, w in weights.items():
        valid = np.arange(w.shape[-2]) < np.asarray(query_len[role])[:, None]
        chosen[role] = {shape.ALL_ROWS: valid} | {name: valid & rows_of for name, rows_of in selections.items()}
    softmax = {role: [layer.feature_dim is None and getattr(layer.attention, "keeps_every_key", False)
                      for layer in layers] for role, layers in model.attention_layers().items()}
    return shape.summarize_shape(rows, chosen, softmax)


def write_attention_example(path: str, weights: dict, tokens_q: dict, tokens_k: dict) -> None:
    """The weights attention.png draws, for a study's figure of every run side by side
    (analysis/plots.py: plot_attention_by_run): per role, [layers, heads, Lq, Lk] in float16 and the tokens
    of each axis."""
    arrays = {}
    for role, w in weights.items():
        arrays[role] = np.asarray(w, np.float16)
        arrays[f"{role}{QUERY_TOKENS}"] = np.asarray(tokens_q[role], str)
        arrays[f"{role}{KEY_TOKENS}"] = np.asarray(tokens_k[role], str)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic.write_bytes(path, buffer.getvalue())


def read_attention_example(path: str) -> dict[str, dict]:
    """write_attention_example's file: role -> {"weights", "query_tokens", "key_tokens"}."""
    with np.load(path) as arrays:
        return {role: {"weights": arrays[role].astype(np.float32),
                       "query_tokens": arrays[f"{role}{QUERY_TOKENS}"].tolist(),
                       "key_tokens": arrays[f"{role}{KEY_TOKENS}"].tolist()}
                for role in arrays.files if not role.endswith((QUERY_TOKENS, KEY_TOKENS))}


def encoder_analysis(config, workdir, model, inputs, pad_id: int, tokens_of, selections=None) -> dict:
    """attention_analysis of the encoder self-attention over a fixed sample of `inputs` [N, L] (padded
    with pad_id); tokens_of(ids) names the tokens of the first example's unpadded ids for the heat maps;
    `selections` (name -> [N, L] bool) the query rows of `inputs` averaged apart in the shape rows."""
    sample = rank_sample(len(inputs), config.eval.rank_examples)
    batch = {"inputs": inputs[sample]}
    weights = attention_weights(model, lambda m, b: m(b["inputs"]), batch)
    lengths = {"encoder_self": (batch["inputs"] != pad_id).sum(1)}
    tokens = {"encoder_self": tokens_of(batch["inputs"][0, : lengths["encoder_self"][0]])}
    return attention_analysis(config, workdir, model, weights, lengths, lengths, tokens, tokens,
                              selections={name: rows[sample] for name, rows in (selections or {}).items()})


@dataclasses.dataclass(frozen=True)
class TaskEvaluation:
    """What a task's `evaluate_model` measured; `evaluate_and_write` adds the keys every eval.json has."""
    split: str  # the split the metrics are of
    num_examples: int  # its size
    metrics: dict  # name -> float: the task's METRICS
    keys_attended: dict[str, int]  # role -> the positions its keys span: attention_state's lengths
    extras: dict = dataclasses.field(default_factory=dict)  # the task's own keys: rank and shape rows, ...


def evaluate_and_write(task, config, workdir: str, model, data, step: int) -> dict:
    """The final evaluation of `model` at `step` by `task`, written to eval.json in `workdir` (the run's, or
    the folder of an earlier step's evaluation beside it) and returned: the keys every task's eval.json has
    (step, task, split, num_examples, attention, metrics, state, config, runtime) around the task's own
    extras (docs/design.md holds the schema); with config.eval.plots, its figures titled with the step."""
    measured = task.evaluate_model(config, workdir, model, data)
    result = {"step": int(step), "task": task.NAME, "split": measured.split,
              "num_examples": int(measured.num_examples),
              "attention": model_config.role_kinds(config, task.roles(config)), "metrics": measured.metrics,
              **measured.extras, "state": attention_state(model, measured.keys_attended),
              "config": workdirs.config_record(config), "runtime": devices.runtime()}
    atomic.write_text(os.path.join(workdir, EVAL_FILE), json.dumps(result, indent=1))
    if config.eval.plots:
        draw_evaluation_plots(workdir, result)
    return result


def draw_evaluation_plots(workdir: str, result: dict) -> None:
    """plots/attention.png and plots/spectra.png of the evaluation `result` (eval.json's content), from
    the example's weights and spectra.json that it wrote, titled with the run, its kinds and the step. A
    model without attention has neither."""
    from analysis import plots  # Matplotlib: not for the tasks' config checks, which import this module

    plot_dir, spectra_path = os.path.join(workdir, "plots"), os.path.join(workdir, SPECTRA_FILE)
    if not os.path.exists(spectra_path):
        return
    title = plots.run_title(workdir, result["attention"], result["step"])
    example = read_attention_example(os.path.join(plot_dir, ATTENTION_EXAMPLE))
    plots.plot_attention_heatmaps({role: entry["weights"] for role, entry in example.items()},
                                  {role: entry["query_tokens"] for role, entry in example.items()},
                                  {role: entry["key_tokens"] for role, entry in example.items()},
                                  os.path.join(plot_dir, ATTENTION_PLOT), title)
    bounds = {row["role"]: row["rank_bound"] for row in result["rank"]}
    spectra = {role: np.asarray(spectrum) for role, spectrum in workdirs.read_json(spectra_path).items()}
    plots.plot_spectra(spectra, bounds, os.path.join(plot_dir, SPECTRA_PLOT), title)
