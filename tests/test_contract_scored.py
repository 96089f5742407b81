"""The kind contract (tests/kind_harness.py) on every kind of the package that is a softmax over scores."""
import pytest

from attention.score_base import ScoreAttention
from kind_harness import KindContract, package_kinds_of

pytestmark = pytest.mark.accelerator  # make test-accelerator runs these on the GPU or TPU


class TestScoredKinds(KindContract):
    kinds = package_kinds_of(ScoreAttention)
