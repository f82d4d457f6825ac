"""Fixtures of the zen.torch tests (helpers in zen_torch_testing.py).

Run: PYTHONPATH=build/python ZEN_BUILD=build .venv/bin/python -m pytest -q python/tests
(.venv/ with torch 2.13: scripts/lib.sh's zen_venv; build/ configured with -DZEN_PYTHON=.venv/bin/python)
"""

import pytest

from zen_torch_testing import run_ranks


@pytest.fixture(scope="session")
def session_tmp(tmp_path_factory):
    return tmp_path_factory


@pytest.fixture(scope="session", params=[2, 3], ids=lambda n: f"world{n}")
def job(request, session_tmp):
    """All scenarios on 2 and 3 ranks, once per session (torch start-up is the cost)."""
    world = request.param
    results, log = run_ranks(session_tmp.mktemp(f"world{world}"), world,
                             ["hook", "allreduce", "mismatch", "drift", "raw_args", "dtypes", "record", "ddp",
                              "values_pg", "values", "ddp_flags", "subgroups", "compiled",
                              "wrong_sums", "decisions", "pg_transport",
                              "record_fail", "fp64_ddp", "half16", "half_ddp"])
    return world, results, log


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: runs on CUDA tensors (scripts/gpu-check); skipped "
                                       "without a GPU")
