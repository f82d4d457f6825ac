"""zen.fsdp.SparseReduceScatter, FSDP2's reduce-scatter sending only non-zeros
(docs/sections/fsdp.md). Real processes on loopback, Gloo, 2 and 3 ranks
(fsdp_worker.py), each scenario against an independent reference: Gloo's
reduce_scatter_tensor, FSDP2 with its own reduce-scatter, a plain model's
gradients summed by all_reduce.
"""

import json
import pathlib
import subprocess
import sys

import pytest

from zen_torch_testing import check, rank_env, run_ranks, torchrun

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
WORKER = HERE / "fsdp_worker.py"
SCENARIOS = ["collective", "premul", "async_op", "mismatch", "fsdp_train", "fsdp_divide"]


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"world{n}")
def fsdp_job(request, tmp_path_factory):
    world = request.param
    results, log = run_ranks(tmp_path_factory.mktemp(f"fsdp{world}"), world, SCENARIOS,
                             timeout=300, worker=WORKER)
    return world, results, log


def rounding_bound(world):
    # Two summation orders of `world` terms each round world - 1 times, each
    # by at most eps/2 of the running |sum| <= sum |terms|: they differ by at
    # most (world - 1) eps sum|terms|; AVG's divide rounds each side once
    # more, by at most eps/2 of the result: + 1. (2 ranks: a + b == b + a,
    # bit for bit, asserted separately.)
    return float(world - 1 + 1)


def test_matches_gloo_reduce_scatter(fsdp_job):
    """Odd chunk sizes (1, 13) and whole words (1000), all-zero, all-dense and uneven chunks,
    bf16/fp32/fp64, SUM and AVG, each encoding forced: bit for bit on 2 ranks;
    within the rounding of a different summation order on 3 (Gloo's order
    depends on the owner and the size, zen sums in ascending rank order)."""
    world = fsdp_job[0]
    for rank, res in enumerate(check(fsdp_job, "collective")):
        assert len(res["cases"]) == 3 * (2 + 4) * 6 * 2
        if world == 2:
            bad = [c for c in res["cases"] if not c["equal"]]
            assert not bad, f"rank {rank}: not bit for bit: {bad[:5]}"
        worst = max(c["rounding"] for c in res["cases"])
        assert worst <= rounding_bound(world), f"rank {rank}: {worst} eps x sum|values|"
        # Every encoding was exercised, and the sparse path carried every
        # case but some with 1-element chunks (a non-zero element costs 8
        # bytes, aligned, > 1.5 x 4 bytes of a dense one: the fallback).
        assert set(res["formats"]) == {"empty", "runs", "coo", "bitmap", "dense"}, res["formats"]
        assert all(c["sparse"] for c in res["cases"] if c["chunk"] > 1)
        assert any(not c["sparse"] for c in res["cases"])
        # Chunks of whole 8-byte words are sparse by the word, others by the element.
        slots = {(c["dtype"], c["chunk"]): c["slot"] for c in res["cases"]}
        assert slots[("fp32", 1000)] == 2 and slots[("bf16", 1000)] == 4 and slots[("fp32", 13)] == 1, slots
        fb = res["fallback"]
        assert not fb["sparse"] and fb["equal"], fb
        assert fb["bytes_sent"] >= fb["dense_bytes"], fb


def test_premul_sum_divide_factor(fsdp_job):
    """PREMUL_SUM (set_gradient_divide_factor) on the sparse path and through
    the fallback (Gloo has none: a multiplied copy, summed)."""
    world = fsdp_job[0]
    for res in check(fsdp_job, "premul"):
        assert res["sparse"]["sparse"] and not res["fallback"]["sparse"], res
        for r in res.values():
            assert r["equal"] if world == 2 else r["rounding"] <= rounding_bound(world), res


def test_async_op_returns_a_work(fsdp_job):
    world = fsdp_job[0]
    for res in check(fsdp_job, "async_op"):
        assert not res["done_before"] and res["done_after"], res
        assert res["equal"] if world == 2 else res["rounding"] <= rounding_bound(world), res


def test_mismatch_raises_on_every_rank(fsdp_job):
    world = fsdp_job[0]
    for rank, res in enumerate(check(fsdp_job, "mismatch")):
        numel, dtype, fraction = res["messages"]
        assert fraction and "max_fraction" in fraction and "rank 1 has 0.25" in fraction, fraction
        assert numel and "input_tensor numel" in numel and f"rank 1 has {world * 10 + 1}" in numel, numel
        assert f"(rank {rank})" in numel, numel
        assert dtype and "dtype" in dtype and "rank 1 has torch.float64" in dtype, dtype
        assert res["after"] == sum(range(world)), "the group is unusable after the error"


def test_fsdp_training_equals_fsdp(fsdp_job):
    """10 SGD steps of Embedding(1001, 24) + Linear + ReLU + Linear under
    fully_shard (odd sizes: padded shards), zen against FSDP2's own
    reduce-scatter: fp32 (AVG) with both reshard settings, fp64 (SUM and a
    post-divide), bf16 reduce_dtype. The embedding's reduce-scatter is sparse
    (10 calls), the two dense groups fall back (20 calls). Bit for bit on 2
    ranks; on 3, within rounding (in this test the touched rows rarely
    overlap, and the parameters come out identical too)."""
    world = fsdp_job[0]
    for rank, res in enumerate(check(fsdp_job, "fsdp_train")):
        assert set(res) == {"fp32", "fp32_noreshard", "fp64", "bf16_reduce"}
        for name, r in res.items():
            assert r["sparse_calls"] == 10 and r["fallback_calls"] == 20, (rank, name, r)
            if world == 2:
                assert r["equal"], (rank, name, r)
            else:
                assert r["diff"] <= 1e-5, (rank, name, r)


def test_fsdp_gradient_divide_factor(fsdp_job):
    for res in check(fsdp_job, "fsdp_divide"):
        assert res["sparse_calls"] == 1
        assert res["max_abs_diff"] <= 1e-6, res


def test_arguments_are_checked_and_no_extension_is_needed():
    """zen.fsdp loads with torch alone (zen._zen blocked), and rejects bad
    arguments with ValueError."""
    code = (
        "import sys, importlib.util\n"
        "sys.modules['zen._zen'] = None\n"  # any import of the extension fails
        f"spec = importlib.util.spec_from_file_location('zen_fsdp', {str(REPO / 'python/zen/fsdp.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter\n"
        "assert isinstance(m.SparseReduceScatter(), ReduceScatter)\n"
        "for kw in ({'max_fraction': -1}, {'formats': ('coo',)}, {'formats': ('zip', 'dense')}):\n"
        "    try:\n"
        "        m.SparseReduceScatter(**kw)\n"
        "    except ValueError:\n"
        "        continue\n"
        "    raise SystemExit(f'no ValueError for {kw}')\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=rank_env())
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_train_fsdp_example_runs_under_torchrun(tmp_path):
    """examples/train_fsdp.py as the docs run it, briefly: 2 ranks, both
    syncs, zen on both transports."""
    runs = {"zen": ["--sync", "zen"], "zen_transport": ["--sync", "zen", "--transport", "zen"],
            "fsdp": ["--sync", "fsdp"]}
    for name, flags in runs.items():
        cmd = [torchrun(), "--standalone", "--nproc-per-node", "2", str(REPO / "examples/train_fsdp.py"),
               *flags, "--rows", "20000", "--steps", "3", "--json", str(tmp_path / f"{name}.json")]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=rank_env(), cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "rs bytes/rank" in out.stdout, out.stdout
    zen, zen_transport, fsdp = (json.loads((tmp_path / f"{s}.json").read_text()) for s in runs)
    assert (zen["transport"], zen_transport["transport"]) == ("process_group", "zen")
    # The same data, the same steps: the same losses (2 ranks: bit for bit).
    assert zen["losses"] == fsdp["losses"], (zen["losses"], fsdp["losses"])
    assert zen_transport["losses"] == fsdp["losses"], (zen_transport["losses"], fsdp["losses"])
    assert zen["rs_bytes_per_step"] * 5 < fsdp["rs_bytes_per_step"], (zen, fsdp)
    assert zen_transport["rs_bytes_per_step"] == zen["rs_bytes_per_step"], (zen_transport, zen)
