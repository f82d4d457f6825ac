"""zen.TopKSelector on numpy arrays, and zen.sparsify's topk_hook on 2 and 3
real processes (scenarios in topk_worker.py): the synchronized result against
each rank's selection recomputed with torch and summed with
torch.distributed, the residual against what was not sent, warm-up against
plain DDP bit for bit.

Run: PYTHONPATH=build/python /usr/bin/python3 -m pytest -q python/tests/test_topk_hook.py
"""

import math
import os
import pathlib
import subprocess

import numpy as np
import pytest

import zen
from zen_torch_testing import HERE, check
from zen_torch_testing import run_ranks as run_worker_ranks

WORKER = HERE / "topk_worker.py"
SHAPES = [(64, 40), (40,), (20, 30), (50, 50)]  # topk_worker.SHAPES
SCENARIOS = ["reference", "reference_momentum", "reference_sampled", "reference_unfused",
             "reference_buckets", "reference_buckets_apart", "reference_record", "ddp_warmup",
             "ddp_sparse", "ddp_sparse_coalesced", "checkpoint"]


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


def test_hook_one_item_per_parameter(topk_job):
    # TopKState(fuse=False): the same reference checks, one zen item per parameter.
    check(topk_job, "reference_unfused")


def test_hook_coalesces_a_steps_buckets_into_one_exchange(topk_job):
    # Two buckets per step: the first one's future waits for the last, one
    # zen batch per step, and each bucket gets exactly its part of the sum.
    check(topk_job, "reference_buckets")


def test_hook_one_exchange_per_bucket_by_default(topk_job):
    # TopKState() (coalesce=False): the same two buckets, one batch each.
    check(topk_job, "reference_buckets_apart")


def test_record_writes_what_every_rank_sent(topk_job):
    # TopKState(record=...): per recorded step, every parameter's selection
    # of every rank and step<k>.all (checked against each rank's
    # contribution with the docs' numpy reader inside the scenario); the
    # trace is valid for `zen analyze`.
    world = topk_job[0]
    result = check(topk_job, "reference_record")[0]
    assert result["tensors"] == 2 * (1 + len(SHAPES))
    zen_cli = pathlib.Path(os.environ.get("ZEN_BUILD", "build")) / "bin" / "zen"
    if not zen_cli.exists():
        pytest.skip(f"no {zen_cli} (build the CLI, or set ZEN_BUILD)")
    text = subprocess.run([str(zen_cli), "analyze", result["path"]], capture_output=True,
                          text=True, check=True).stdout
    assert f"{world} ranks, {2 * (1 + len(SHAPES))} tensors" in text, text
    block = text.split("step0.all")[1]
    # 2560 + 2500 values sparsified at 5% (128 + 125 sent), 40 + 600 dense.
    density = 100 * (128 + 125 + 40 + 600) / sum(math.prod(s) for s in SHAPES)
    assert f"density per rank   min {density:.3f}%" in block, block


def test_warmup_is_plain_ddp_bit_for_bit(topk_job):
    check(topk_job, "ddp_warmup")


def test_sparsified_ddp_keeps_ranks_in_sync(topk_job):
    # Parameters equal on every rank (asserted inside each rank), the ratio
    # follows the warm-up and ramp, and every step left a stats record.
    for res in check(topk_job, "ddp_sparse"):
        assert len(res["stats"]) == 8 and len(res["losses"]) == 8


def test_sparsified_ddp_coalesced_keeps_ranks_in_sync(topk_job):
    # The same with TopKState(coalesce=True): DDP's real buckets (several per
    # step), one exchange per step (asserted inside each rank).
    for res in check(topk_job, "ddp_sparse_coalesced"):
        assert len(res["stats"]) == 8 and len(res["losses"]) == 8


def test_checkpoint_resumes_bit_for_bit(topk_job):
    # Saved mid-ramp (momentum correction on) with torch.save, resumed in a new
    # model, DDP and TopKState: the parameters, residuals and momentum at the
    # end equal the run without the stop; a fresh TopKState instead does not;
    # mismatched options, unnamed parameters and wrong sizes raise ValueError
    # before anything changes (topk_worker.scenario_checkpoint).
    for res in check(topk_job, "checkpoint"):
        assert res == {"step": 7, "residuals": 3}, res


# --- examples/train_topk.py --summary (scripts/topk-testbed's figures) -------

def test_train_topk_summary_compares_the_same_steps(tmp_path):
    import importlib.util
    import json
    spec = importlib.util.spec_from_file_location(
        "train_topk", HERE.parent.parent / "examples" / "train_topk.py")
    train_topk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_topk)
    args = {"world": 8, "batch": 8, "seq_len": 32, "ratio": 0.01, "warmup": 2, "ramp": 1,
            "record_steps": 1, "scheme": "zen", "bucket_cap_mb": None}
    keys = ("sync_s", "select_s", "zen_sync_s", "bucket_sum_s", "step_s", "bytes_sent",
            "bytes_received")

    def write(name, mode, syncs, stats=None):
        timing = [dict(zip(keys, [t, 0.001, t, t, 0.2, 1e5, 2e5]), step=i)
                  for i, t in enumerate(syncs)]
        run = {"params": 1000, "timing": timing}
        if stats:
            run["stats"] = stats
        path = tmp_path / name
        path.write_text(json.dumps({"args": args, "runs": {mode: run}}))
        return path

    # The first warmup + ramp + record_steps = 4 steps are not measured.
    dense = write("dense.json", "dense", [9, 9, 9, 9, 0.08, 0.09, 0.1])
    topk = write("topk.json", "topk", [9, 9, 9, 9, 0.02, 0.03, 0.01],
                 [{"fraction": 0.02}] * 7)
    text = "\n".join(train_topk.summarize(dense, topk))
    assert "sync (first bucket called to last done) 90.0 ms (80.0-100.0)" in text, text
    assert "20.0 ms (10.0-30.0)" in text, text
    assert "ratio dense / top-k, sync medians: 4.50x (span, slowest rank)" in text, text
    assert "fraction sent 2.00%" in text and "10240 tokens/s" in text, text
