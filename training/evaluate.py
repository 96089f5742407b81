"""Evaluation of a trained translation model: eval.json (DESIGN.md), attention ranks and plots."""
import contextlib
import json
import os

import jax
import numpy as np
import sacrebleu
from flax import nnx

from analysis import plots, rank
from data import pipeline
from data.vocab import Vocabulary
from models import ROLES
from models.decoding import greedy_decode
from training import translation, validate
from training.checkpoints import Checkpoints
from training.steps import create_optimizer, init_state, make_eval_step


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


def attention_weights(model, batch) -> dict[str, np.ndarray]:
    """role -> [num_layers, B, H, Lq, Lk] attention matrices under teacher forcing."""
    model.eval()
    with capturing_weights(model):
        graphdef, state = nnx.split(model)

    @jax.jit
    def run(state, source, decoder_input):
        captured = nnx.merge(graphdef, state)
        captured(source, decoder_input)
        return {role: jax.numpy.stack([layer.attention_weights.value[0] for layer in layers])
                for role, layers in captured.attention_layers().items()}

    return jax.device_get(run(state, batch["source"], batch["decoder_input"]))


def teacher_forced_metrics(eval_step, params, rest, arrays, batch_size: int) -> dict:
    """Loss, token accuracy and exact match over every row of `arrays` (see translation.metric_sums)."""
    totals = None
    for batch, _ in pipeline.fixed_size_batches(arrays, batch_size):
        sums = jax.device_get(eval_step(params, rest, batch))
        totals = sums if totals is None else jax.tree.map(np.add, totals, sums)
    return translation.summarize(totals)


def greedy_outputs(model, data: translation.TranslationData, batch_size: int) -> list[str]:
    model.eval()
    graphdef, state = nnx.split(model)
    max_len = data.test["target"].shape[1]
    decode = jax.jit(lambda state, source: greedy_decode(nnx.merge(graphdef, state), source, max_len))
    outputs = []
    for batch, real in pipeline.fixed_size_batches(data.test, batch_size):
        tokens = jax.device_get(decode(state, batch["source"]))[:real]
        outputs.extend(data.target_vocab.decode(row) for row in tokens)
    return outputs


def rank_sample(data: translation.TranslationData, num_examples: int) -> np.ndarray:
    """A fixed sample of test rows (the same for every run on the same data)."""
    count = min(num_examples, len(data.test_pairs))
    return np.sort(np.random.default_rng(0).choice(len(data.test_pairs), count, replace=False))


def attention_analysis(config, workdir, model, data):
    """Rank rows of eval.json, plus heat-map and spectra plots when `config.eval.plots`."""
    rows = rank_sample(data, config.eval.rank_examples)
    batch = {name: array[rows] for name, array in data.test.items()}
    captured = attention_weights(model, batch)
    weights = {role: captured[role] for role in ROLES}  # JAX returns dict keys sorted
    source_len = (batch["source"] != Vocabulary.PAD).sum(1)
    target_len = (batch["decoder_input"] != Vocabulary.PAD).sum(1)
    query_len = {"encoder_self": source_len, "decoder_self": target_len, "cross": target_len}
    key_len = {"encoder_self": source_len, "decoder_self": target_len, "cross": source_len}
    bounds = translation.rank_bounds(model)
    summary = rank.summarize_attention(weights, query_len, key_len, bounds)
    if config.eval.plots:
        plot_dir = os.path.join(workdir, "plots")
        source_tokens = [data.source_vocab.tokens[i] for i in batch["source"][0, : source_len[0]]]
        target_tokens = [data.target_vocab.tokens[i] for i in batch["decoder_input"][0, : target_len[0]]]
        tokens_q = {"encoder_self": source_tokens, "decoder_self": target_tokens, "cross": target_tokens}
        tokens_k = {"encoder_self": source_tokens, "decoder_self": target_tokens, "cross": source_tokens}
        first = {role: w[:, 0, :, : query_len[role][0], : key_len[role][0]] for role, w in weights.items()}
        plots.plot_attention_heatmaps(first, tokens_q, tokens_k, os.path.join(plot_dir, "attention.png"))
        spectra = {role: rank.mean_spectrum(w, query_len[role], key_len[role]) for role, w in weights.items()}
        plots.plot_spectra(spectra, bounds, os.path.join(plot_dir, "spectra.png"))
    return summary


def evaluate_model(config, workdir: str, model, data: translation.TranslationData, step: int) -> dict:
    """Evaluates on the whole test split and writes `eval.json` in the workdir; returns its content."""
    model.eval()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    eval_step = make_eval_step(graphdef, translation.metric_sums)
    metrics = teacher_forced_metrics(eval_step, params, rest, data.test, config.eval.batch_size)
    outputs = greedy_outputs(model, data, config.eval.batch_size)
    references = [target for _, target in data.test_pairs]
    result = {
        "step": int(step),
        "task": "translation",
        "split": "test",
        "num_examples": len(references),
        "attention": validate.role_kinds(config),
        "metrics": {
            "exact_match": float(np.mean([o == r for o, r in zip(outputs, references)])),
            "token_accuracy": metrics["token_accuracy"],
            "bleu": sacrebleu.corpus_bleu(outputs, [references]).score,
            "loss": metrics["loss"],
        },
        "rank": attention_analysis(config, workdir, model, data),
    }
    with open(os.path.join(workdir, "eval.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


def evaluate(config, workdir: str) -> dict:
    """Restores the latest checkpoint of `workdir` and evaluates it (what eval.py runs)."""
    validate.validate(config)
    checkpoints = Checkpoints(os.path.join(workdir, "checkpoints"))
    step = checkpoints.latest_step()
    if step is None:
        raise FileNotFoundError(f"no checkpoint in {os.path.join(workdir, 'checkpoints')}; train first")
    data = translation.prepare_data(config, workdir)
    model = translation.create_model(config, data)
    _, state = init_state(model, create_optimizer(config))  # the layout training checkpointed
    state, _ = checkpoints.restore(step, state)
    checkpoints.close()
    nnx.update(model, state["params"], state["rest"])
    return evaluate_model(config, workdir, model, data, step)
