"""Dense reference of the hybrid kind: the mean of the references of its two parts, Taylor's
(tests/reference_kernelized.py) and local attention's window (tests/reference_scored.py)."""
from kind_harness import dense_reference
from reference_kernelized import CHUNKS, taylor
from reference_scored import WINDOW, local


@dense_reference("based", window=WINDOW, taylor_order=2, **CHUNKS)
def based(xp, q, k, allowed, arrays):
    return (taylor(xp, q, k, allowed, arrays) + local(xp, q, k, allowed, arrays)) / 2
