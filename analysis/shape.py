"""Shape metrics of attention rows: how each query spreads its weight over the keys it may attend to (the
"spikiness" of Zhang et al.'s Hedgehog), next to the ranks of analysis/rank.py.

Per row, over its allowed keys: the entropy in nats of its distribution, the same as a fraction of log(number
of allowed keys), its largest weight (top-1), and, for the softmax family, the spread of its logits: the
standard deviation of log(weight), which equals that of the scores because a softmax only shifts them by the
row's log-sum-exp.

The distribution of a row is its weights clipped at 0 and renormalised over its allowed keys. For the kinds
this lab has the clipping changes nothing (their rows hold no negative weight; local_predictive's rows sum to
less than 1 and are renormalised); a kind whose rows can hold negative weights (a projection of a softmax)
is measured on the distribution of its positive part, and a row with no positive weight is left out.

The logit spread clips weights at WEIGHT_FLOOR, float32's smallest normal number, before the log. A weight
of 0 has logit -inf: a float32 softmax underflows there for a logit some 87 (103 with subnormals) below its
row's log-sum-exp, and a kind that cuts keys itself (local's window, hard's top-k) gives its cut keys 0. Left
as -inf, one such key would make the spread infinite; clipped, it counts at the lowest logit float32 holds
(log WEIGHT_FLOOR = -87.3 against a weight of 1), so a peaked row keeps a large finite spread, one that is a
lower bound of its scores' own. The floor is the smallest normal rather than subnormal number because GPUs
flush subnormals to 0: every backend then gives the same spread. A negative weight counts at the floor too.

Rows are computed on the device the weights are on (attention_rows), one transfer of [layers, B, H, Lq]
values per role; their means per head and selection of rows are numpy (head_means, summarize_shape).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

METRIC_NAMES = ("row_entropy", "entropy_fraction", "top1_weight", "top1_above_half", "logit_spread", "negative_mass",
                "row_sum_deviation")
WEIGHT_FLOOR = float(np.finfo(np.float32).tiny)
ALL_ROWS = "all"  # the selection of every unpadded query row


def row_metrics(weights, allowed) -> dict:
    """Per row of `weights` [..., Lq, Lk] over the keys where `allowed` (bool, broadcastable) is True, as
    float32 arrays [..., Lq]: "mass" (the row's positive weight: 0 leaves the row nothing to measure),
    "negative" (its negative weight, as a positive number), "keys" (its allowed keys), "entropy" (nats), "top1"
    and "logit_spread" (NaN without an allowed key)."""
    weights = jnp.asarray(weights, jnp.float32)
    allowed = jnp.broadcast_to(allowed, weights.shape)
    positive = jnp.where(allowed, jnp.maximum(weights, 0.0), 0.0)
    negative = jnp.where(allowed, jnp.maximum(-weights, 0.0), 0.0).sum(-1)
    mass = positive.sum(-1)
    p = positive / jnp.where(mass > 0, mass, 1.0)[..., None]
    # 0 log 0 = 0: keys without weight add nothing to the entropy.
    entropy = -jnp.sum(p * jnp.log(jnp.where(p > 0, p, 1.0)), axis=-1)
    return {"mass": mass, "negative": negative, "keys": allowed.sum(-1).astype(jnp.float32), "entropy": entropy,
            "top1": p.max(-1), "logit_spread": _log_spread(weights, allowed)}


def _log_spread(weights, allowed):
    """The population std of log(max(weights, WEIGHT_FLOOR)) over the allowed keys of each row, in two
    passes: the logs of a flat row sit close together far below 0, where the mean of squares less the
    squared mean cancels."""
    count = allowed.sum(-1)
    logs = jnp.where(allowed, jnp.log(jnp.maximum(weights, WEIGHT_FLOOR)), 0.0)
    mean = logs.sum(-1) / count
    return jnp.sqrt(jnp.sum(jnp.where(allowed, jnp.square(logs - mean[..., None]), 0.0), axis=-1) / count)


def head_means(rows: dict, selected, softmax: bool) -> dict:
    """Means per head of row_metrics' `rows` ([B, H, Lq] each) over the rows `selected` ([B, Lq] bool) that
    have weight: "rows" (how many, per head), and METRIC_NAMES as [H] float64 arrays. The entropy fraction
    leaves out rows of a single allowed key (log 1 = 0); a mean over no row is NaN, as is the logit spread
    unless `softmax` (the kind's weights are a softmax of its scores). The negative mass is a row's negative
    weight over its total |weight|, the row-sum deviation |sum of its weights - 1|: both 0 for a distribution,
    and what tells a signed control (softmax_rank's projection, mala) from one (landmark_softmax, elu + 1)."""
    rows = {name: np.asarray(values, np.float64) for name, values in rows.items()}
    counted = np.asarray(selected, bool)[:, None, :] & (rows["mass"] > 0)
    several = counted & (rows["keys"] > 1)
    fraction = rows["entropy"] / np.log(np.where(several, rows["keys"], 2.0))
    means = {"rows": counted.sum(axis=(0, 2)),
             "row_entropy": _mean(rows["entropy"], counted),
             "entropy_fraction": _mean(fraction, several),
             "top1_weight": _mean(rows["top1"], counted),
             "top1_above_half": _mean(rows["top1"] > 0.5, counted),
             "negative_mass": _mean(rows["negative"] / (rows["mass"] + rows["negative"]), counted),
             "row_sum_deviation": _mean(np.abs(rows["mass"] - rows["negative"] - 1), counted)}
    spread = _mean(rows["logit_spread"], counted) if softmax else np.full(len(means["rows"]), np.nan)
    return means | {"logit_spread": spread}


def _mean(values, where) -> np.ndarray:
    """[H] means of values [B, H, Lq] over the rows `where` holds; NaN over none."""
    count = where.sum(axis=(0, 2))
    total = np.where(where, values, 0.0).sum(axis=(0, 2))
    return np.divide(total, count, out=np.full(total.shape, np.nan), where=count > 0)


def allowed_keys(key_lengths, query_positions, num_keys: int, causal: bool):
    """[B, 1, Lq, Lk] bool: the keys below key_lengths [B] and, when `causal`, at or before each query's
    position (query_positions [B, Lq])."""
    keys = jnp.arange(num_keys)
    allowed = (keys < jnp.asarray(key_lengths)[:, None])[:, None, None, :]
    if causal:
        allowed = allowed & (keys <= jnp.asarray(query_positions)[:, :, None])[:, None]
    return allowed


@functools.partial(jax.jit, static_argnames="causal")
def _layer_rows(layer_weights, key_lengths, query_positions, causal):
    return row_metrics(layer_weights, allowed_keys(key_lengths, query_positions, layer_weights.shape[-1], causal))


def attention_rows(weights: dict, key_lengths: dict, query_positions: dict, causal_roles) -> dict:
    """role -> row_metrics of weights[role] [num_layers, B, H, Lq, Lk] (padded; a jax array stays where it
    is), each [num_layers, B, H, Lq] numpy: example e's keys are the first key_lengths[role][e], and those
    after its query's position (query_positions[role] [B, Lq]) too in `causal_roles`. One layer at a time on
    the device, one transfer."""
    rows = {role: [_layer_rows(w[layer], jnp.asarray(key_lengths[role]), jnp.asarray(query_positions[role]),
                               role in causal_roles) for layer in range(w.shape[0])]
            for role, w in weights.items()}
    host = jax.device_get({role: jax.tree.map(lambda *layers: jnp.stack(layers), *layer_rows)
                           for role, layer_rows in rows.items()})
    return {role: host[role] for role in weights}  # in the roles' order: a pytree's dict comes back sorted


def _number(value) -> float | None:
    return None if np.isnan(value) else float(value)


def summarize_shape(rows: dict, selections: dict, softmax: dict) -> list[dict]:
    """One row per (role, selection, layer, head) of attention_rows' `rows`: selections[role] maps a name to
    the query rows [B, Lq] (bool) it averages over, softmax[role][layer] whether the logit spread applies. A
    selection that holds no row in the analysed examples writes none; a mean over no row is None."""
    summary = []
    for role, role_rows in rows.items():
        for name, selected in selections[role].items():
            for layer in range(len(role_rows["mass"])):
                layer_rows = {key: values[layer] for key, values in role_rows.items()}
                means = head_means(layer_rows, selected, softmax[role][layer])
                summary += [{"role": role, "layer": layer, "head": head, "query_rows": name,
                             "rows": int(means["rows"][head])}
                            | {metric: _number(means[metric][head]) for metric in METRIC_NAMES}
                            for head in range(len(means["rows"])) if means["rows"][head] > 0]
    return summary
