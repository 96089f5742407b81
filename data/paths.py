"""Where the lab's files are: the repository, and under it the datasets it builds."""
import os

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def data_dir(configured: str) -> str:
    """config.dataset.data_dir as a path: a relative one is relative to the repository, not to the directory
    a command runs in, so that runs started anywhere share the datasets built once (an absolute one, e.g.
    on a larger disk, is taken as it is)."""
    return os.path.join(REPOSITORY, os.path.expanduser(configured))
