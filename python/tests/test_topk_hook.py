"""zen.TopKSelector on numpy arrays, and zen.sparsify's topk_hook on 2 and 3
real processes (scenarios in topk_worker.py): the synchronized result against
each rank's selection recomputed with torch and summed with
torch.distributed, the residual against what was not sent, warm-up against
plain DDP bit for bit.

Run: PYTHONPATH=build/python /usr/bin/python3 -m pytest -q python/tests/test_topk_hook.py
"""

import numpy as np
import pytest

import zen
from zen_torch_testing import HERE, check
from zen_torch_testing import run_ranks as run_worker_ranks

WORKER = HERE / "topk_worker.py"
SCENARIOS = ["reference", "reference_momentum", "reference_sampled", "ddp_warmup", "ddp_sparse"]


def run_ranks(tmp_path, world, scenarios, timeout=150):
    return run_worker_ranks(tmp_path, world, scenarios, timeout=timeout, worker=WORKER)


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"world{n}")
def topk_job(request, tmp_path_factory):
    world = request.param
    results, log = run_ranks(tmp_path_factory.mktemp(f"topk{world}"), world, SCENARIOS)
    return world, results, log


# --- the selector on numpy arrays -----------------------------------------

def reference(data, k):
    order = np.argsort(-np.abs(data), kind="stable")[:k]
    return np.sort(order)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n,k", [(1, 1), (1000, 0), (1000, 10), (1000, 1000), (100_000, 1000)])
def test_selector_matches_sort_and_leaves_the_residual(threads, n, k):
    rng = np.random.default_rng(n + k)
    data = rng.standard_normal(n).astype(np.float32)
    original = data.copy()
    ids, values = zen.TopKSelector(threads).select(data, k)
    expected = reference(original, k)
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_array_equal(values, original[expected])
    kept = original.copy()
    kept[expected] = 0
    np.testing.assert_array_equal(data, kept)


def test_selector_writes_into_given_arrays_and_sampled_lands_near_k():
    data = np.random.default_rng(1).standard_normal(200_000).astype(np.float32)
    ids, values = np.empty(3000, np.int64), np.empty(3000, np.float32)
    sel = zen.TopKSelector(1, method="sampled")
    got_ids, got_values = sel.select(data.copy(), 2000, ids, values)
    assert 1600 <= len(got_ids) <= 2400, len(got_ids)
    assert np.shares_memory(got_ids, ids) and np.shares_memory(got_values, values)
    assert sel.stats["k"] == 2000 and sel.method == "sampled"
    assert zen.topk_count(3_000_000_000, 0.01) == 30_000_000


def test_selector_rejects_bad_arrays():
    sel = zen.TopKSelector()
    with pytest.raises(ValueError, match="float32"):
        sel.select(np.zeros(10), 3)
    with pytest.raises(ValueError, match="1-D"):
        sel.select(np.zeros((2, 5), np.float32), 3)
    with pytest.raises(ValueError, match="hold 2 entries"):
        sel.select(np.zeros(10, np.float32), 3, np.zeros(2, np.int64), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="method"):
        zen.TopKSelector(method="fast")


# --- the hook on real processes -------------------------------------------

def test_hook_equals_each_ranks_selection_summed(topk_job):
    # 5 steps (the first a warm-up) on a bucket with two sparsified
    # parameters, a bias and a small matrix (dense): the result equals the
    # all_reduce of every rank's recomputed contribution / world, the
    # residual holds exactly what was not sent, the stats count it.
    for res in check(topk_job, "reference"):
        assert res[0]["mode"] == "warmup" and len(res) == 5
        for step in res[1:]:
            assert step["fraction"] < 0.2 and step["bytes_sent"] > 0


def test_hook_momentum_correction(topk_job):
    check(topk_job, "reference_momentum")


def test_hook_sampled_threshold(topk_job):
    check(topk_job, "reference_sampled")


def test_warmup_is_plain_ddp_bit_for_bit(topk_job):
    check(topk_job, "ddp_warmup")


def test_sparsified_ddp_keeps_ranks_in_sync(topk_job):
    # Parameters equal on every rank (asserted inside each rank), the ratio
    # follows the warm-up and ramp, and every step left a stats record.
    for res in check(topk_job, "ddp_sparse"):
        assert len(res["stats"]) == 8 and len(res["losses"]) == 8
