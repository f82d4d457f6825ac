"""zen.process_group (ZEN over torch.distributed collectives) on real
processes: Gloo on CPU tensors at 2, 3 and 4 ranks (pg_worker.py: one job
of 4 ranks started once, the scenarios run over subgroups of 2 and 3 and
the whole job; hard timeout), and, marked `gpu`, NCCL on CUDA tensors
at the world sizes the machine's GPUs allow (scripts/gpu-check). The row
permutation is checked against the C++ RowPermutation's values
(data/row_permutation_table.json, printed by data/row_permutation_table.cc).
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from zen_torch_testing import REPO, rank_env, wait_all

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "pg_worker.py"
TABLE = HERE / "data" / "row_permutation_table.json"

from zen.process_group import RowOwner, RowPermutation  # noqa: E402


def have_extension():
    try:
        return importlib.util.find_spec("zen._zen") is not None
    except ImportError:
        return False


def run_pg_ranks(tmp_path, world, scenarios, device="cpu", timeout=150):
    """Runs pg_worker.py's scenarios on `world` ranks, each at every world
    size 2, 3, ..., world (subgroups of the first ranks; cxx and timeout
    over the whole job); returns {(scenario, size): [result per rank]}."""
    out = tmp_path / "out"
    out.mkdir()
    env = rank_env()
    env["ZEN_REPO"] = str(REPO)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE)] + [p for p in sys.path if p])
    procs = [subprocess.Popen([sys.executable, str(WORKER), "--rank", str(r), "--world",
                               str(world), "--init", f"file://{tmp_path / 'store'}", "--out",
                               str(out), "--device", device, *scenarios],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env)
             for r in range(world)]
    codes, outputs, timed_out = wait_all(procs, timeout)
    log = "\n".join(f"--- rank {r} (exit {c}) ---\n{o}" for r, (c, o) in
                    enumerate(zip(codes, outputs)))
    assert not timed_out, f"ranks did not finish within {timeout} s (hang?)\n{log}"
    results = {}
    for s in scenarios:
        sizes = [world] if s in ("cxx", "timeout", "bench") else \
            sorted({w for w in (2, 3) if w < world} | {world})
        for w in sizes:
            per_rank = []
            for r in range(w):
                path = out / f"{s}@{w}.{r}.json"
                assert path.exists(), f"rank {r} wrote no result for '{s}' at {w}\n{log}"
                per_rank.append(json.loads(path.read_text()))
            results[(s, w)] = per_rank
    return world, results, log


def passed(job, scenario, size):
    """Asserts the scenario passed on every rank of the size; the results."""
    world, results, log = job
    failures = [f"rank {r}:\n{res['error']}" for r, res in enumerate(results[(scenario, size)])
                if not res["ok"]]
    assert not failures, f"'{scenario}' failed on {size} ranks:\n" + "\n".join(failures)
    return [res["result"] for res in results[(scenario, size)]]


CPU_SCENARIOS = ["exact", "huge", "dense", "mismatch", "torch_hook"]
SIZES = [2, 3, 4]


@pytest.fixture(scope="module")
def pg_job(tmp_path_factory):
    """One job of 4 Gloo ranks (torch start-up is the cost): every scenario
    over 2, 3 and 4 of them; the C++ comparison and the timeout over all 4."""
    scenarios = list(CPU_SCENARIOS)
    if have_extension():
        scenarios.append("cxx")
    scenarios.append("timeout")  # last: it leaves the group unusable
    return run_pg_ranks(tmp_path_factory.mktemp("pg"), 4, scenarios)


@pytest.mark.parametrize("size", SIZES)
def test_exact_every_dtype(pg_job, size):
    results = passed(pg_job, "exact", size)
    assert all(r["cases"] == results[0]["cases"] for r in results)


@pytest.mark.parametrize("size", SIZES)
def test_huge_rows(pg_job, size):
    passed(pg_job, "huge", size)


@pytest.mark.parametrize("size", SIZES)
def test_dense_rows_in_place(pg_job, size):
    passed(pg_job, "dense", size)


@pytest.mark.parametrize("size", SIZES)
def test_zen_torch_entry_points_on_the_engine(pg_job, size):
    # zen.torch with ZenState(transport='process_group') on this job's
    # device: DDP hooks bit for bit plain DDP (float32 and float64, sparse
    # and dense embeddings), topk_hook, allreduce_ in every dtype
    # (pg_worker.scenario_torch_hook; on CUDA through scripts/gpu-check).
    passed(pg_job, "torch_hook", size)


@pytest.mark.parametrize("size", SIZES)
def test_mismatch_raises_on_every_rank(pg_job, size):
    messages = passed(pg_job, "mismatch", size)
    # The same exception on every rank, naming the offending rank.
    for label in messages[0]:
        assert len({m[label].split(" (raised")[0] for m in messages}) == 1, label


def test_same_bits_and_bytes_as_cxx_scheme(pg_job):
    world, results, _ = pg_job
    if ("cxx", world) not in results:
        pytest.skip("no C++ extension")
    per_rank = passed(pg_job, "cxx", world)
    for tname in per_rank[0]:
        width = per_rank[0][tname]["width"]
        cxx = sum(r[tname]["cxx_sent"] for r in per_rank)
        pg = sum(r[tname]["pg_sent"] for r in per_rank)
        assert abs(pg - cxx) <= 0.05 * cxx, (tname, width, pg, cxx, per_rank)


def test_timeout_raises_instead_of_hanging(pg_job):
    per_rank = passed(pg_job, "timeout", pg_job[0])
    assert "timed out" in per_rank[0]["message"].lower(), per_rank[0]


@pytest.mark.skipif(not TABLE.exists(), reason="no table")
def test_permutation_matches_cxx_table(device="cpu"):
    table = json.loads(TABLE.read_text())
    for case in table["permutation"]:
        perm = RowPermutation(case["seed"], case["rows"])
        ids = torch.tensor(case["ids"], dtype=torch.int64, device=device)
        want = case["pi"]
        assert perm(ids.clone()).tolist() == want, case["rows"]
        assert [perm.scalar(i) for i in case["ids"]] == want
        assert perm.inverse(torch.tensor(want, device=device)).tolist() == case["ids"]
    for case in table["owner"]:
        owner = RowOwner(case["seed"], case["rows"], case["servers"], case["block_bits"])
        ids = torch.tensor(case["ids"], dtype=torch.int64, device=device)
        keys = owner.keys(ids)
        servers = owner.servers_of_keys(keys)
        starts = torch.tensor(owner.starts[:-1], device=device)[servers]
        got = [[s, p] for s, p in zip(servers.tolist(), (keys - starts).tolist())]
        assert got == case["places"], case
        assert [list(owner.scalar_place(i)) for i in case["ids"]] == case["places"]
        assert owner.ids_of_keys(keys).tolist() == case["ids"]


def test_permutation_is_a_bijection():
    for rows in (1, 2, 3, 5, 1000, 1 << 10, (1 << 10) + 1):
        perm = RowPermutation(99, rows)
        ids = torch.arange(rows)
        out = perm(ids.clone())
        assert sorted(out.tolist()) == list(range(rows))
        assert perm.inverse(out).tolist() == list(range(rows))


def test_owner_tables_match_the_network():
    """RowOwner.use_table() (pi and pi^-1 as lookup tables, what the engine
    switches to on a tensor's second call) gives the network's keys and ids:
    whole and partial blocks, with and without cycle walking."""
    for rows, servers, block_bits in ((1000, 4, 0), (1 << 10, 3, 0), (32000, 8, 0),
                                      (16384, 4, 3), (5000 + 7, 2, 2), (7, 2, 0)):
        plain = RowOwner(77, rows, servers, block_bits)
        tabled = RowOwner(77, rows, servers, block_bits)
        tabled.use_table()
        ids = torch.arange(rows)
        keys = plain.keys(ids.clone())
        assert torch.equal(tabled.keys(ids.clone()), keys), (rows, block_bits)
        assert sorted(keys.tolist()) == list(range(rows))
        assert torch.equal(tabled.ids_of_keys(keys), ids), (rows, block_bits)
        # The scalar reference, on a sample.
        for i in range(0, rows, max(1, rows // 50)):
            s, p = plain.scalar_place(i)
            assert keys[i].item() - plain.start(s) == p
    with pytest.raises(ValueError):
        RowOwner(1, RowOwner.TABLE_MAX_UNITS + 1, 2).use_table()


def test_rank_order_sum_on_cpu_is_assign_then_add():
    """The CPU aggregation (index_add_ from -0.0, one pass per rank) is the
    documented order bit for bit: per row, the lowest rank's value assigned,
    the next ranks' added in ascending rank order; signed zeros, NaN, and
    values whose sum depends on the order included."""
    from zen.process_group import ProcessGroupEngine
    g = torch.Generator().manual_seed(11)
    for dtype in (torch.float32, torch.float64):
        for n in (1, 2, 5):
            U, width = 40, 3
            part_pos, part_val = [], []
            for q in range(n):
                pos = torch.randperm(U, generator=g)[:int(torch.randint(1, U, (1,),
                                                                       generator=g))]
                pos = pos.sort().values
                val = (torch.randn((pos.numel(), width), generator=g, dtype=torch.float64)
                       * 10.0 ** torch.randint(-3, 30, (pos.numel(), 1), generator=g)).to(dtype)
                val[::3] = -0.0
                val[::7, 0] = 0.0
                val[::11, 1] = float("nan")
                part_pos.append(pos)
                part_val.append(val)
            served, inv = torch.unique(torch.cat(part_pos), sorted=True, return_inverse=True)
            got = ProcessGroupEngine._aggregate(None, part_pos, part_val, inv, served.numel(),
                                                width, dtype, "rank", None, 0, n,
                                                torch.device("cpu"))
            want = {}
            for pos, val in zip(part_pos, part_val):
                for p, row in zip(pos.tolist(), val):
                    want[p] = want[p] + row if p in want else row.clone()
            ref = torch.stack([want[p] for p in served.tolist()])
            view = torch.int64 if dtype == torch.float64 else torch.int32
            assert torch.equal(got.view(view), ref.view(view)), (dtype, n)


def test_nonzero_rows_is_any_nonzero(device="cpu"):
    """allreduce_rows_'s row selection is (m != 0).any(dim=1): NaN, +-inf and
    subnormals count, -0.0 does not; every dtype; width 0."""
    from zen.process_group import _nonzero_rows
    specials = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e-45, 5e-324, 1.0, -3.5]
    g = torch.Generator().manual_seed(4)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        for width in (1, 3, 64):
            pick = torch.randint(0, len(specials), (200, width), generator=g)
            m = torch.tensor(specials, dtype=torch.float64)[pick]
            m[torch.rand(200, generator=g) < 0.5] = 0.0  # many all-zero rows
            m[::17] = -0.0
            m = m.to(dtype).to(device)
            want = (m != 0).any(dim=1).nonzero().view(-1)
            assert torch.equal(_nonzero_rows(m), want), (dtype, width)
    assert _nonzero_rows(torch.zeros((5, 0), device=device)).numel() == 0


def gpu_world():
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
@pytest.mark.skipif(gpu_world() == 0, reason="no GPU")
def test_gpu_nccl(tmp_path):
    """The CPU scenarios on CUDA tensors over NCCL, at every size up to
    min(GPUs, 4) (one GPU: NCCL world 1)."""
    world = min(gpu_world(), 4)
    job = run_pg_ranks(tmp_path, world, CPU_SCENARIOS, device="cuda", timeout=240)
    for (s, w) in job[1]:
        passed(job, s, w)


def test_index_encodings_round_trip(device="cpu"):
    from zen.process_group import (_BITMAP, _COO, _COO32, _ELIAS_FANO, _choose, _decode_index,
                                   _encode_index, _index_bytes)
    g = torch.Generator().manual_seed(5)
    for domain, count in ((1, 1), (7, 3), (64, 64), (1000, 1), (1000, 37), (1000, 999),
                          ((1 << 33) + 9, 20), (4096, 300)):
        pos = torch.randperm(min(domain, 1 << 20), generator=g)[:count].sort().values
        if domain > 1 << 20:
            pos = pos * (domain // (1 << 20))
        pos = pos.to(device)
        for enc in (_COO, _COO32, _BITMAP, _ELIAS_FANO):
            if (enc == _COO32 and domain > 1 << 32) or (enc == _BITMAP and domain > 1 << 24):
                continue  # (the bitmap is only chosen where it is smaller than the positions)
            raw = _encode_index(pos, enc, domain)
            assert raw.device == pos.device
            assert raw.dtype == torch.uint8 and raw.numel() == _index_bytes(enc, count, domain)
            assert _decode_index(raw, enc, count, domain).tolist() == pos.tolist(), (enc, domain)
        # The choice is the smallest (an independent count of each size).
        sizes = {_COO32 if domain <= 1 << 32 else _COO: (4 if domain <= 1 << 32 else 8) * count,
                 _BITMAP: -(-domain // 8)}
        low = max((domain // count).bit_length() - 1, 0)
        sizes[_ELIAS_FANO] = -(-count * low // 8) + -(-(count + ((domain - 1) >> low) + 1) // 8)
        assert _index_bytes(_choose(count, domain), count, domain) == min(sizes.values())


@pytest.mark.gpu
@pytest.mark.skipif(gpu_world() == 0, reason="no GPU")
def test_gpu_permutation_and_encodings():
    """The int64 Feistel network (wrapping multiplies, masked shifts) and
    the index encodings on CUDA tensors: exercised even where NCCL world 1
    has no peer to send them to."""
    test_permutation_matches_cxx_table("cuda")
    test_index_encodings_round_trip("cuda")
