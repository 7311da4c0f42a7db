# pytest configuration for kfuse's Python tests: a private kernel cache per session, and the
# repository's examples.
import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def private_kernel_cache(tmp_path_factory):
    os.environ["KFUSE_CACHE_DIR"] = str(tmp_path_factory.mktemp("kfuse-cache"))


@pytest.fixture
def examples():
    return REPO / "examples"


def rel(a, b):
    """||a - b|| / ||b|| of two tensors, in float64; ||a - b|| where b is zero (eval mode leaves
    zero running statistics as they are)."""
    den = b.double().norm().item()
    num = (a.double() - b.double()).norm().item()
    return num / den if den > 0 else num
