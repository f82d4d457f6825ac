"""zen.Context from Python on 2 and 3 real processes (TCP over loopback):
batches of dense and sparse items summed against numpy, completion callbacks
run once from the progress thread, one rank's bad item fails the batch on
every rank without a hang, and a sparse item written into a dense array
("out", divided by "divisor")."""

import multiprocessing as mp
import traceback

import numpy as np
import pytest

import zen


def _worker(rank, world, url, out):
    try:
        comm = zen.connect_url(url, rank, world, timeout=20.0)
        ctx = zen.Context(comm, scheme="zen")
        rng = np.random.default_rng(rank)
        # Per batch: a dense matrix with rank-dependent zero rows, a vector, a sparse COO.
        dense = [rng.standard_normal((50, 4)).astype(np.float32) for _ in range(3)]
        for d in dense:
            d[rank::3] = 0
        vec = [np.full(7, rank + 1.0, dtype=np.float32) for _ in range(3)]
        done = []
        handles = []
        for k in range(3):
            items = [("dense", "w", dense[k], 50, 4), ("dense", "b", vec[k], 7, 1),
                     ("sparse", "emb", 100, 2, np.array([rank, 90, rank], dtype=np.int64),
                      np.ones((3, 2), dtype=np.float32))]
            handles.append(ctx.start(f"bucket{k}", items, on_done=lambda h, k=k: done.append(k)))
        results = [h.wait() for h in handles]
        # A second wait() returns the same arrays (the sums' own storage,
        # moved out once), with the same contents.
        again = handles[0].wait()
        same = (again is results[0] and again[0][0] is results[0][0][0]
                and again[0][1] is results[0][0][1]
                and again[0][0].flags.owndata is False)
        ctx.drain()
        bad = ("dense", "b", np.zeros(7, dtype=np.int32 if rank == 1 else np.float32), 7, 1)
        try:
            ctx.start("bad", [bad]).wait()
            error = None
        except ValueError as e:
            error = str(e)
        after = np.full(7, 1.0, dtype=np.float32)
        ctx.start("after", [("dense", "b", after, 7, 1)]).wait()
        # Sparse in, dense out: the sum divided by 2 written into `into`
        # (zeros elsewhere), None in wait()'s list; a wrong-sized out on
        # rank 1 fails that batch on every rank.
        ids = np.array([rank, 90, rank], dtype=np.int64)
        into = np.full((100, 2), 5.0, dtype=np.float32)
        into_items = [("sparse", "emb", 100, 2, ids, np.ones((3, 2), dtype=np.float32),
                       {"out": into, "divisor": 2.0})]
        into_result = ctx.start("into", into_items).wait()
        short = np.zeros(199 if rank == 1 else 200, dtype=np.float32)
        try:
            ctx.start("into", [into_items[0][:6] + ({"out": short},)]).wait()
            into_error = None
        except ValueError as e:
            into_error = str(e)
        out.put((rank, [d.tolist() for d in dense], [v.tolist() for v in vec],
                 [[(i.tolist(), v.tolist()) for i, v in r] for r in results], sorted(done),
                 error, after.tolist(), (into.tolist(), into_result, into_error), same, None))
    except Exception:
        out.put((rank, None, None, None, None, None, None, None, None, traceback.format_exc()))


def _run_ranks(target, world, tmp_path):
    """Runs target(rank, world, url, queue) on `world` spawned processes;
    returns {rank: what that rank put after its rank}."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, world, f"file:{tmp_path}", out))
             for r in range(world)]
    for p in procs:
        p.start()
    got = {}
    for _ in range(world):
        rank, *rest = out.get(timeout=120)
        got[rank] = rest
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return got


@pytest.mark.parametrize("world", [2, 3])
def test_context_batches_from_python(tmp_path, world):
    got = _run_ranks(_worker, world, tmp_path)
    for rank, (dense, vec, sparse, done, error, after, into, same, tb) in got.items():
        assert tb is None, tb
        assert same
        # The independent reference: each rank's inputs regenerated here.
        for k in range(3):
            expect = np.zeros((50, 4), dtype=np.float64)
            for r in range(world):
                rng = np.random.default_rng(r)
                inputs = [rng.standard_normal((50, 4)).astype(np.float32) for _ in range(3)]
                inputs[k][r::3] = 0
                expect += inputs[k]
            np.testing.assert_allclose(np.array(dense[k]), expect, rtol=1e-5, atol=1e-6)
            assert vec[k] == [world * (world + 1) / 2] * 7
            ids, values = sparse[k][0]
            assert ids == sorted(set(range(world)) | {90})
            expected_rows = {i: 2.0 for i in range(world)}
            expected_rows[90] = float(world)
            assert values == [[expected_rows[i]] * 2 for i in ids]
        assert done == [0, 1, 2]
        assert error is not None and (("int32" in error) == (rank == 1)), error
        assert f"rank {rank}" in error
        assert after == [float(world)] * 7
        into, into_result, into_error = into
        assert into_result == [None]
        expect = np.zeros((100, 2))
        expect[:world] = 1.0  # rows 0..world-1: 2 / 2
        expect[90] = world / 2
        np.testing.assert_array_equal(np.array(into), expect)
        assert into_error is not None and "rank 1" in into_error, into_error
        if rank == 1:
            assert "dense output has" in into_error, into_error


def _inplace_worker(rank, world, url, out):
    try:
        import gc
        comm = zen.connect_url(url, rank, world, timeout=20.0)
        ctx = zen.Context(comm, scheme="zen")
        # Sorted, unique ids: the item's arrays are read where they lie (no
        # copy); arrays made inline and dropped by Python before wait() are
        # kept alive by the call. An int32 ids array is converted first.
        ids = np.array([1, 7, 40 + rank], dtype=np.int64)
        values = np.full((3, 4), rank + 1.0, dtype=np.float32)
        ids_before, values_before = ids.copy(), values.copy()
        h = ctx.start("b", [("sparse", "emb", 64, 4, ids, values),
                            ("sparse", "e32", 64, 1, np.array([3, 9], dtype=np.int32),
                             np.array([1.0, rank], dtype=np.float32)),
                            ("sparse", "tmp", 64, 2, np.arange(0, 64, 8, dtype=np.int64),
                             np.full((8, 2), 0.5, dtype=np.float32))])
        gc.collect()
        res = [(i.tolist(), v.tolist()) for i, v in h.wait()]
        # The caller's arrays are untouched and the results own their memory.
        untouched = (np.array_equal(ids, ids_before) and np.array_equal(values, values_before))
        owns = all(not np.shares_memory(v, values) for _, v in h.wait())
        # The same through zen.Scheme.sync (synchronous).
        s = zen.create_scheme("zen")
        sid, sval = s.sync(comm, 64, 4, ids, values, name="emb")
        out.put((rank, res, untouched, owns, (sid.tolist(), sval.tolist()), None))
    except Exception:
        out.put((rank, None, None, None, None, traceback.format_exc()))


def test_sparse_items_are_read_in_place(tmp_path):
    world = 2
    got = _run_ranks(_inplace_worker, world, tmp_path)
    for rank, (res, untouched, owns, direct, tb) in got.items():
        assert tb is None, tb
        assert untouched and owns
        (ids, values), (ids32, values32), (idst, valuest) = res
        assert ids == [1, 7, 40, 41]
        assert values == [[3.0] * 4, [3.0] * 4, [1.0] * 4, [2.0] * 4]
        assert ids32 == [3, 9] and values32 == [[2.0], [1.0]]
        assert idst == list(range(0, 64, 8)) and valuest == [[1.0, 1.0]] * 8
        assert direct == (ids, values)
