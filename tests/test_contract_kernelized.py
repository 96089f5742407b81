"""The kind contract (tests/kind_harness.py) on every kernelised kind of the package."""
import pytest

from attention.kernelized_base import KernelizedAttention
from kind_harness import KindContract, package_kinds_of

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU


class TestKernelizedKinds(KindContract):
    kinds = package_kinds_of(KernelizedAttention)
