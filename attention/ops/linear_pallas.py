"""Causal linear attention as Pallas kernels (jax.experimental.pallas, lowered through Triton on a GPU), forward
and backward: the path `implementation="pallas"` of the kernelised kinds (attention/ops/kernel_sums.py).

A kernel's program is one chunk of C positions of one (batch, head): the grid is (B, H, n) for n chunks, so a
GPU gets B H n programs (B = 1, H = 4 at 4,096 tokens in chunks of 64: 256 for an H100's 132 SMs), where one
program per (batch, head) walking the chunks gave it B H. What crosses the chunks, the state of the chunks
before (P [m, Dv], z [m]) and in the backward its cotangent, goes through XLA between two kernels: the parallel
strategy of attention/ops/chunked_sums.py, in kernels (the prefix is a cumsum, or under a key stabiliser a scan of
n small XLA steps). Forward: the chunks' own states, their exclusive prefix sum (chunked_sums.exclusive_prefix),
each chunk's output and denominator D. Backward: the states again (nothing per chunk is stored), each chunk's
dq, D's cotangent and its queries' part of the states' cotangent, the reverse prefix of that, each chunk's dk
and dv. q, k, v [B, L, H, *] are read in place (no transposed copy). A chunk's arithmetic is chunked_sums'
(`chunk_state`, `chunk_forward`, `query_gradients`, `key_gradients`), so the kernels and the XLA path compute
one formula.

Where they run: on a GPU, for feature and value widths and chunks that are powers of two from 16 to 128 whose
blocks fit an H100's shared memory (`unsupported` says why not otherwise; `auto` then takes the XLA path, an
explicit `pallas` is refused). The budget (`shared_memory_bytes`, `num_warps`) is an estimate from the blocks
each kernel holds, calibrated on what Triton 3.6 compiled for sm_90 on the H100 probe. Elsewhere `pallas` runs the
kernels in interpret mode (pallas_call(..., interpret=True), the kernels' bodies executed as XLA operations):
that is how the tests hold them to the XLA path on the CPU. Neither their speed nor their results on a GPU
were measured: no GPU was lent to the sessions that wrote them (tests/test_linear_paths.py compares them with
the XLA path on one, make test-accelerator).

The Triton backend of Pallas is deprecated since jax 0.11 (Mosaic GPU is its successor, a lowering of its own)
and a jaxlib may lack it: without it `import attention` works, `auto` takes XLA and `pallas` is refused.
"""
import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from attention.ops import chunked_sums

try:
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as pallas_triton
except ImportError as error:
    UNAVAILABLE = f"this jax has no Pallas Triton backend (jax.experimental.pallas.triton: {error})"
else:
    UNAVAILABLE = None

WIDTHS = (16, 32, 64, 128)  # feature, value and chunk sizes the Triton kernels take (tl.dot needs 16 or more)

# One program's budget on an H100 (sm_90): shared memory a thread block may opt in to, registers per thread.
SHARED_MEMORY_PER_BLOCK = 227 * 1024
REGISTERS_PER_THREAD = 255


# --- the kernels: one chunk of one (batch, head) each; blocks named by C (chunk), m (feature), D (value) ------


def _chunk_states(k, v, unit):
    """The chunk's own state (S, s) in its last position's units, and its decay where there is a stabiliser."""
    state = chunked_sums.chunk_state(k, v, unit)
    return state if unit.decay is None else (*state, unit.decay)


def _outputs(q, k, v, eps, matrix, vector, unit):
    """The chunk's output N / D and D, given the state (P, z) it received."""
    return chunked_sums.chunk_forward(q, k, v, (matrix, vector), eps[:, None], unit)


def _query_gradients(q, k, v, out_cotangent, denominator, matrix, vector, unit):
    """dq, D's cotangent, and the chunk's queries' part (Q^T dN, Q^T dD) of the cotangent of the state it received."""
    dq, normaliser, parts = chunked_sums.query_gradients((matrix, vector), q, k, v, out_cotangent,
                                                         denominator[:, None], unit)
    return dq, normaliser, *chunked_sums.state_cotangent(q, parts, normaliser, unit)


def _key_gradients(q, k, v, out_cotangent, denominator, normaliser, matrix, vector, unit):
    """dk, dv given the cotangent (R, r) of the state the chunk passes on."""
    dk, dv, _ = chunked_sums.key_gradients((matrix, vector), q, k, v, out_cotangent, denominator[:, None],
                                           normaliser[:, None], unit)
    return dk, dv


class Kernel(NamedTuple):
    """A kernel's body and what its budget is estimated from: its dots (tl.dot), each as its two operands'
    blocks, "*" where they are float32 whatever the inputs' dtype (one is a float32 intermediate, and
    chunked_sums._sums meets two dtypes in the wider), and the blocks it holds at once at its busiest."""
    name: str
    body: Callable
    dots: tuple[str, ...]
    live: str


# K^T V (both float32 under a key stabiliser, which scales k first); holding k, v, the state.
STATES = Kernel("chunk states", _chunk_states, ("Cm CD*",), "Cm CD mD")
# Q K^T, Q P, (Q K^T) V; holding q, k, v, P, the scores, the output.
FORWARD = Kernel("forward", _outputs, ("Cm Cm", "Cm mD*", "CC CD*"), "Cm Cm CD mD CC CD")
# Q K^T, dN V^T, dN P^T, (scores' cotangent) K, Q^T dN; holding q, k, v, dO, P, the scores, dN V^T, the scores'
# cotangent, dq, Q^T dN.
QUERY = Kernel("dq", _query_gradients, ("Cm Cm", "CD CD*", "CD mD*", "CC Cm*", "Cm CD*"),
               "Cm Cm CD CD mD CC CC CC Cm mD")
# Q K^T, dN V^T, (scores' cotangent)^T Q, V R^T, scores^T dN, K R; holding q, k, v, dO, dN, R, the scores,
# dN V^T, the scores' cotangent, dk, dv.
KEY = Kernel("dk/dv", _key_gradients, ("Cm Cm", "CD CD*", "CC Cm*", "CD mD*", "CC CD*", "Cm mD*"),
             "Cm Cm CD CD CD mD CC CC CC Cm CD")
KERNELS = (STATES, FORWARD, QUERY, KEY)


# --- the budget -----------------------------------------------------------------------------------------------


def _elements(blocks: str, feature_dim: int, value_dim: int, chunk: int) -> int:
    size = {"C": chunk, "m": feature_dim, "D": value_dim}
    return sum(size[rows] * size[columns] for rows, columns in blocks.split())


def shared_memory_bytes(kernel: Kernel, feature_dim: int, value_dim: int, chunk: int, dtype) -> int:
    """The shared memory one program of `kernel` needs, estimated: Triton stages a dot's operands there (wgmma
    reads them from it; a float32 dot at IEEE precision passes them through it to the FMA layout) and reuses a
    buffer once its dot is done; two dots' operands are counted at once, the two largest. Calibrated on the one
    reading there is: Triton 3.6 took 256 KiB for the dk/dv kernel at width 128 and chunk 128 on the H100 probe, which
    is this count of its float32 dots (two of two 128 x 128 operands)."""
    def operand_bytes(dot: str) -> int:
        itemsize = 4 if dot.endswith("*") else jnp.dtype(dtype).itemsize
        return _elements(dot.rstrip("*"), feature_dim, value_dim, chunk) * itemsize

    return sum(sorted(map(operand_bytes, kernel.dots))[-2:])


def registers_per_thread(kernel: Kernel, feature_dim: int, value_dim: int, chunk: int, num_warps: int) -> float:
    """The float32 registers a thread needs to hold the blocks `kernel` holds at once, spread over the program's
    32 x num_warps threads (an estimate: 16-bit inputs need less, Triton's own temporaries more)."""
    return _elements(kernel.live, feature_dim, value_dim, chunk) / (32 * num_warps)


def num_warps(kernel: Kernel, feature_dim: int, value_dim: int, chunk: int) -> int:
    """4 warps (128 threads) where the kernel's blocks fit in 255 registers a thread, else 8.

    The dk/dv kernel at width 64 (chunk 64) holds about 45,000 float32 elements: 352 registers a thread at 4
    warps, which spilled on the H100 probe, 176 at 8. Above 8 warps nothing is gained: an SM has 65,536 registers, so
    16 warps (512 threads) get at most 128 a thread, and at width 128 (chunk 64) that kernel holds 86,000
    elements, more than the SM's registers at any warp count: it spills either way."""
    fits = registers_per_thread(kernel, feature_dim, value_dim, chunk, 4) <= REGISTERS_PER_THREAD
    return 4 if fits else 8


def unsupported(platform: str, feature_dim: int, value_dim: int, chunk: int, dtype) -> str | None:
    """Why the kernels cannot run as compiled kernels here, or None if they can."""
    if UNAVAILABLE:
        return UNAVAILABLE
    if platform != "gpu":
        return f"they are compiled for a GPU (Triton); this process runs on {platform}"
    for name, size in (("feature width", feature_dim), ("value width", value_dim), ("chunk", chunk)):
        if size not in WIDTHS:
            return f"{name} {size} is not one of {', '.join(map(str, WIDTHS))}"
    for kernel in KERNELS:
        needed = shared_memory_bytes(kernel, feature_dim, value_dim, chunk, dtype)
        if needed > SHARED_MEMORY_PER_BLOCK:
            return (f"chunk {chunk} at feature width {feature_dim} and value width {value_dim} ({jnp.dtype(dtype)}) "
                    f"needs about {needed // 1024} KiB of shared memory in the {kernel.name} kernel, over the "
                    f"H100's {SHARED_MEMORY_PER_BLOCK // 1024} KiB per block: take a smaller attention.chunk_size")
    return None


# --- the calls ------------------------------------------------------------------------------------------------


def _block(layout: str, x, chunk: int):
    """The BlockSpec of program (b, h, i)'s block of x: "rows", chunk i of head h of x [B, L', H, d];
    "positions", chunk i of x [B, H, L'] (a value per position); "chunks", entry i of x [n, B, H, ...]."""
    if layout == "rows":
        return pl.BlockSpec((None, chunk, None, x.shape[3]), lambda b, h, i: (b, i, h, 0))
    if layout == "positions":
        return pl.BlockSpec((None, None, chunk), lambda b, h, i: (b, h, i))
    rest = x.shape[3:]
    return pl.BlockSpec((None, None, None, *rest), lambda b, h, i: (i, b, h, *(0 for _ in rest)))


def _kernel(body, num_inputs: int, stabilised: bool):
    """A Pallas kernel of `body`, a function of its input blocks and the chunk's Units to its output blocks;
    under a stabiliser its last two inputs are the chunk's running max c [C] and received units r."""
    def kernel(*refs):
        inputs, outputs = refs[:num_inputs], refs[num_inputs:]
        stabiliser = tuple(ref[...] for ref in inputs[num_inputs - 2:]) if stabilised else None
        blocks = (ref[...] for ref in inputs[:num_inputs - 2 * stabilised])
        for ref, value in zip(outputs, body(*blocks, chunked_sums.units(stabiliser)), strict=True):
            ref[...] = value.reshape(ref.shape).astype(ref.dtype)

    kernel.__name__ = body.__name__.lstrip("_")  # the Triton kernel's name
    return kernel


class _Launcher(NamedTuple):
    """What the kernels of one call share: the chunk, the widths, the stabiliser's inputs, interpret mode."""
    chunk: int
    feature_dim: int
    value_dim: int
    stabiliser: tuple  # () or (c [B, H, L'], r [n, B, H]): `_rows`
    interpret: bool

    def __call__(self, kernel: Kernel, inputs, outputs):
        """pallas_call of `kernel` over the grid (B, H, n): inputs as (array, layout), the first [B, L', H, *],
        and outputs as (ShapeDtypeStruct, layout)."""
        batch, length, heads, _ = inputs[0][0].shape
        inputs = [*inputs, *zip(self.stabiliser, ("positions", "chunks"))]
        warps = num_warps(kernel, self.feature_dim, self.value_dim, self.chunk)
        return pl.pallas_call(
            _kernel(kernel.body, len(inputs), bool(self.stabiliser)), out_shape=[x for x, _ in outputs],
            grid=(batch, heads, length // self.chunk),
            in_specs=[_block(layout, x, self.chunk) for x, layout in inputs],
            out_specs=[_block(layout, x, self.chunk) for x, layout in outputs],
            # Triton's compiler parameters select the Triton lowering; one stage: no copy of a block is
            # multi-buffered, as `shared_memory_bytes` counts (the kernels have no loop to pipeline anyway).
            compiler_params=pallas_triton.CompilerParams(num_warps=warps, num_stages=1), interpret=self.interpret,
        )(*(x for x, _ in inputs))

    def per_chunk(self, rows, *shape):
        """A float32 output [n, B, H, *shape] for the chunks of `rows` [B, L', H, *]."""
        batch, length, heads, _ = rows.shape
        return jax.ShapeDtypeStruct((length // self.chunk, batch, heads, *shape), jnp.float32), "chunks"

    def received_states(self, k, values):
        """The state (P [n, B, H, m, Dv], z [n, B, H, m]) each chunk receives, and the chunks' decay [n, B, H]
        (None without a stabiliser)."""
        outputs = [self.per_chunk(k, self.feature_dim, self.value_dim), self.per_chunk(k, self.feature_dim)]
        own = self(STATES, [(k, "rows"), (values, "rows")], outputs + [self.per_chunk(k)] * bool(self.stabiliser))
        decay = own[2] if self.stabiliser else None
        return chunked_sums.exclusive_prefix(tuple(own[:2]), decay), decay


def _per_position(x, batch: int, length: int, heads: int):
    """A scalar or [B, L, H, 1] array -> float32 [B, H, L]."""
    return jnp.broadcast_to(jnp.asarray(x, jnp.float32), (batch, length, heads, 1))[..., 0].transpose(0, 2, 1)


def _rows(phi_q, eps, key_stabiliser, chunk: int):
    """eps [B, H, L'] and the stabiliser's inputs of the kernels: () without one, else its running max
    [B, H, L'] and the units each chunk receives [n, B, H] (the last of the chunk before; chunk 0's first),
    L' the length padded to whole chunks."""
    batch, length, heads, _ = phi_q.shape
    padding = ((0, 0), (0, 0), (0, -length % chunk))
    eps = jnp.pad(_per_position(eps, batch, length, heads), padding, "edge")
    if key_stabiliser is None:
        return eps, ()
    c = jnp.pad(_per_position(key_stabiliser, batch, length, heads), padding, "edge")
    last = c[..., chunk - 1::chunk]
    return eps, (c, jnp.concatenate([c[..., :1], last[..., :-1]], axis=-1).transpose(2, 0, 1))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def causal_sums(phi_q, phi_k, v, eps, key_stabiliser, chunk: int, interpret: bool):
    """chunked_sums.causal_sums computed by the kernels (`interpret`: in interpret mode)."""
    return _forward(phi_q, phi_k, v, eps, key_stabiliser, chunk, interpret)[0]


def _like(x, layout: str):
    return jax.ShapeDtypeStruct(x.shape, x.dtype), layout


def _forward(phi_q, phi_k, v, eps, key_stabiliser, chunk, interpret):
    length = phi_q.shape[1]
    q, k, values = (chunked_sums.padded_rows(x, chunk) for x in (phi_q, phi_k, v))
    eps_rows, stabiliser = _rows(phi_q, eps, key_stabiliser, chunk)
    launch = _Launcher(chunk, q.shape[-1], values.shape[-1], stabiliser, interpret)
    (matrix, vector), _ = launch.received_states(k, values)
    inputs = [(q, "rows"), (k, "rows"), (values, "rows"), (eps_rows, "positions"), (matrix, "chunks"),
              (vector, "chunks")]
    out, denominators = launch(FORWARD, inputs, [_like(values, "rows"), _like(eps_rows, "positions")])
    return out[:, :length], (q, k, values, eps, key_stabiliser, stabiliser, denominators)


def _backward(chunk, interpret, residuals, out_cotangent):
    q, k, values, eps, key_stabiliser, stabiliser, denominators = residuals
    launch = _Launcher(chunk, q.shape[-1], values.shape[-1], stabiliser, interpret)
    length = out_cotangent.shape[1]
    out_cotangent = chunked_sums.padded_rows(out_cotangent, chunk).astype(values.dtype)
    (matrix, vector), decay = launch.received_states(k, values)
    inputs = [(q, "rows"), (k, "rows"), (values, "rows"), (out_cotangent, "rows"), (denominators, "positions")]
    dq, normalisers, *own = launch(QUERY, [*inputs, (matrix, "chunks"), (vector, "chunks")],
                                   [_like(q, "rows"), _like(denominators, "positions"), _like(matrix, "chunks"),
                                    _like(vector, "chunks")])
    cotangent = chunked_sums.exclusive_prefix(tuple(own), decay, reverse=True)
    dk, dv = launch(KEY, [*inputs, (normalisers, "positions"), *((x, "chunks") for x in cotangent)],
                    [_like(k, "rows"), _like(values, "rows")])
    # D's cotangent [B, H, L'] as eps's.
    normalisers = normalisers[..., :length].transpose(0, 2, 1)[..., None]
    eps_cotangent = normalisers if jnp.ndim(eps) else normalisers.sum()
    stabiliser_cotangent = None if key_stabiliser is None else jnp.zeros_like(key_stabiliser)
    return dq[:, :length], dk[:, :length], dv[:, :length], eps_cotangent, stabiliser_cotangent


causal_sums.defvjp(_forward, _backward)
