"""zen.fsdp.SparseReduceScatter on transport "zen": the counts and the
payload move over zen's C++ communicator through a zen.Context's progress
thread (zen/engine/exchange_job.h) instead of the process group's
collectives (docs/sections/fsdp.md). Real processes on loopback, Gloo, 2 and
3 ranks (fsdp_worker.py's zen_* scenarios). References: transport
"process_group" (the same plan and sum, another exchange: bit for bit on
any world size), Gloo's reduce_scatter_tensor, FSDP2 with its own
reduce-scatter.
"""

import pytest

from zen_torch_testing import check, run_ranks
from zen.fsdp import SparseReduceScatter
from test_fsdp import WORKER, rounding_bound

SCENARIOS = ["zen_collective", "zen_async", "zen_mismatch", "zen_timeout", "zen_train"]


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"world{n}")
def zen_job(request, tmp_path_factory):
    world = request.param
    results, log = run_ranks(tmp_path_factory.mktemp(f"fsdpzen{world}"), world, SCENARIOS,
                             timeout=300, worker=WORKER)
    return world, results, log


def test_zen_transport_matches_process_group_and_gloo(zen_job):
    """bf16/fp32/fp64, SUM/AVG/PREMUL_SUM, chunks of 1, 13 and 1000 (odd
    sizes, whole words), all-zero, all-dense and uneven chunks, every
    encoding forced: bit for bit what transport "process_group" gives, with
    the same plan; against Gloo bit for bit on 2 ranks, within rounding on 3."""
    world = zen_job[0]
    for rank, res in enumerate(check(zen_job, "zen_collective")):
        assert res["transport"] == "zen"
        assert len(res["cases"]) == 3 * (2 + 4) * 6 * 3
        bad = [c for c in res["cases"] if not (c["equal_pg"] and c["same_plan"])]
        assert not bad, f"rank {rank}: transports differ: {bad[:5]}"
        if world == 2:
            bad = [c for c in res["cases"] if not c["equal"]]
            assert not bad, f"rank {rank}: not bit for bit with Gloo: {bad[:5]}"
        worst = max(c["rounding"] for c in res["cases"])
        assert worst <= rounding_bound(world), f"rank {rank}: {worst} eps x sum|values|"
        assert set(res["formats"]) == {"empty", "runs", "coo", "bitmap", "dense"}, res["formats"]
        assert all(c["sparse"] for c in res["cases"] if c["chunk"] > 1)
        assert any(not c["sparse"] for c in res["cases"])  # the fallback ran too
        assert res["fallback"] == {"sparse": False, "equal": True}, res["fallback"]
        assert res["zen_bytes"] > 0, "nothing went over zen's communicator"


def test_zen_transport_async_op_progresses_without_wait(zen_job):
    for res in check(zen_job, "zen_async"):
        assert not res["done_before"] and res["done_after"], res
        assert res["progressed"] and res["untouched"], res
        assert res["equal_pg"], res


def test_zen_transport_mismatch_raises_on_every_rank(zen_job):
    world = zen_job[0]
    for rank, res in enumerate(check(zen_job, "zen_mismatch")):
        numel, dtype, fraction, device = res["messages"]
        assert device and "on meta" in device and "CPU tensors" in device, device
        assert numel and "input_tensor numel" in numel and f"rank 1 has {world * 10 + 1}" in numel, numel
        assert f"(rank {rank})" in numel, numel
        assert dtype and "dtype" in dtype and "rank 1 has torch.float64" in dtype, dtype
        assert fraction and "max_fraction" in fraction and "rank 1 has 0.25" in fraction, fraction
        assert res["transport"] == "zen"
        assert res["after_zen"] == [float(world)] * 10, "zen's communicator is unusable after the error"
        assert res["after"] == sum(range(world)), "the group is unusable after the error"


def test_zen_transport_absent_peer_is_a_transport_error(zen_job):
    res = check(zen_job, "zen_timeout")[0]
    assert res["error"] == "zen.TransportError", res
    assert 1.5 <= res["seconds"] <= 30, res


def test_zen_transport_fsdp_training_equals_fsdp(zen_job):
    """10 SGD steps under fully_shard (test_fsdp.py's model and settings) on
    transport "zen": the parameters of transport "process_group" bit for bit,
    and FSDP2's own as test_fsdp.py asserts (bit for bit on 2 ranks)."""
    world = zen_job[0]
    for rank, res in enumerate(check(zen_job, "zen_train")):
        assert set(res) == {"fp32", "fp32_noreshard", "fp64", "bf16_reduce"}
        for name, r in res.items():
            assert r["transport"] == "zen", (rank, name, r)
            assert r["sparse_calls"] == 10 and r["fallback_calls"] == 20, (rank, name, r)
            assert r["equal_pg"], (rank, name, r)
            if world == 2:
                assert r["equal"], (rank, name, r)
            else:
                assert r["diff"] <= 1e-5, (rank, name, r)


def test_transport_arguments_are_checked():
    from zen.torch import ZenState
    assert SparseReduceScatter().transport == "process_group"
    assert SparseReduceScatter(transport="zen").transport == "zen"
    assert SparseReduceScatter(zen_state=ZenState(transport="zen")).transport == "zen"
    with pytest.raises(ValueError, match="transport must be one of"):
        SparseReduceScatter(transport="tcp")
    with pytest.raises(TypeError, match="zen_state must be a zen.torch.ZenState"):
        SparseReduceScatter(zen_state=object())
    with pytest.raises(ValueError, match="the zen_state's transport is 'process_group'"):
        SparseReduceScatter(zen_state=ZenState(transport="process_group"), transport="zen")
