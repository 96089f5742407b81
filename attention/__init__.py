"""Attention kinds behind one interface (see docs/design.md), a registry and the multi-head wrapper.

Importing the package registers every kind. Besides the interface of docs/design.md, each kind reports the
size of what it must keep to attend, `state_size(key_dim, value_dim, seq_len, causal)` numbers per head:
m x Dv for a kernelised kind at any length (a fixed state, hence a bounded recall), every key and value
for the softmax family (the cache grows with the length), the window's for local attention, both for `based`.

Incremental decoding, one position at a time (q, k, v [B, 1, H, D]; every kind built on ScoreAttention
or KernelizedAttention has it, `based` through both of its parts, and one that is not `incremental`
(softmax_rank) refuses it; MultiHeadAttention wraps it with the projections and refuses a kind without it,
naming it):

    init_cache(batch, max_len, num_heads, key_dim, value_dim, dtype) -> cache   # causal self-attention
    decode_step(q, k, v, cache, index, max_len, key_valid [B]) -> (out [B, 1, H, Dv], cache)
    init_memory(k, v, key_mask [B, Lk], max_len) -> memory                # cross-attention, once per source
    attend_memory(q, memory, key_mask, index, max_len) -> (out [B, 1, H, Dv], memory)

`index` is the query's position in a decoder of `max_len` positions (traced; max_len is static): a step
equals row `index` of the full computation over a `max_len` buffer, padding keys (key_valid False)
ignored as a padding mask would. Softmax-family caches hold the keys and values [B, max_len, H, Dk or Dv] (a
step is O(max_len)); kernelised ones hold S = sum phi(k) [v, 1]^T [B, H, m, Dv + 1] (a step is O(1) in
the position). Every array of a cache or memory leads with the batch axis, so beams can be reordered
by gathering along it.
"""
from attention import (  # noqa: F401  (registration side effect)
    dot_product, forced_forward, hard, hybrid, input_gated, kernelized_kinds, key_gated, learned_scores, local,
    low_rank, magnitude_aware)
from attention.multi_head import MultiHeadAttention
from attention.registry import (all_options, create, names, option_defaults, options, options_of, register,
                                select_options)

__all__ = ["MultiHeadAttention", "all_options", "create", "names", "option_defaults", "options", "options_of",
           "register", "select_options"]
