"""zen._zen in one process: ranks are threads connected through an in-memory
torch HashStore (exercising the Python-store rendezvous adapter), so the
bindings, the GIL release and the error mapping are tested without spawning."""

import threading

import numpy as np
import pytest
import torch.distributed as dist

import zen


def on_threads(world, fn, prefix):
    """Runs fn(comm) on `world` threads; returns the results or exceptions."""
    store = dist.HashStore()
    out = [None] * world

    def body(r):
        try:
            comm = zen.connect(store, r, world, prefix=prefix, timeout=20)
            out[r] = fn(comm)
        except Exception as e:  # returned to the test
            out[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return out


def test_registry_and_default():
    ids = [s for s, _ in zen.schemes()]
    assert {"dense", "agsparse"} <= set(ids)
    assert zen.default_scheme() in ids
    with pytest.raises(ValueError, match="unknown scheme 'nope'"):
        zen.create_scheme("nope")


def test_exception_classes():
    for cls in (zen.MismatchError, zen.FormatError, zen.TransportError):
        assert issubclass(cls, zen.Error) and issubclass(cls, RuntimeError)
    assert not issubclass(ValueError, zen.Error)


@pytest.mark.parametrize("scheme", [s for s, _ in zen.schemes()])
def test_sparse_and_dense_sums(scheme):
    world, rows, width = 3, 40, 3
    rng = [np.random.default_rng(r) for r in range(world)]
    ids = [rng[r].integers(0, rows, size=6) for r in range(world)]  # duplicates likely
    vals = [rng[r].standard_normal((6, width)).astype(np.float32) for r in range(world)]
    dense = [np.zeros((rows, width), np.float32) for _ in range(world)]
    for r in range(world):
        np.add.at(dense[r], ids[r], vals[r])
    reference = sum(d.astype(np.float64) for d in dense)

    def fn(comm):
        s = zen.create_scheme(scheme)
        out_ids, out_vals = s.sync(comm, rows, width, ids[comm.rank], vals[comm.rank], "t")
        buf = dense[comm.rank].copy()
        s.sync_dense(comm, buf, rows, width, "d")
        return out_ids, out_vals, buf

    for got in on_threads(world, fn, f"sums-{scheme}"):
        assert not isinstance(got, Exception), repr(got)
        out_ids, out_vals, buf = got
        want_ids = np.unique(np.concatenate(ids))
        np.testing.assert_array_equal(out_ids, want_ids)
        np.testing.assert_allclose(out_vals, reference[want_ids], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(buf, reference, rtol=1e-5, atol=1e-6)


def test_mismatch_on_every_rank():
    def fn(comm):
        s = zen.create_scheme("agsparse")
        buf = np.zeros((5 + comm.rank, 2), np.float32)
        s.sync_dense(comm, buf, 5 + comm.rank, 2, "emb")

    errors = on_threads(2, fn, "mismatch")
    for r, e in enumerate(errors):
        assert isinstance(e, zen.MismatchError), repr(e)
        assert f"rank {r}, tensor 'emb'" in str(e) and "rows" in str(e)


def test_bad_input_raises_on_every_rank():
    def fn(comm):
        s = zen.create_scheme("agsparse")
        bad = [50] if comm.rank == 0 else [1]  # id outside [0, 10) on rank 0
        s.sync(comm, 10, 1, np.array(bad), np.ones((1, 1), np.float32), "ids")

    errors = on_threads(2, fn, "badid")
    assert isinstance(errors[0], ValueError) and "50" in str(errors[0]), repr(errors[0])
    assert isinstance(errors[1], ValueError) and "rank 0 rejected" in str(errors[1])


def test_dense_buffer_checks():
    # A dtype zen does not sum (int32) on one rank: ValueError on every rank,
    # that rank naming the dtypes zen sums.
    def fn(comm):
        s = zen.create_scheme("agsparse")
        buf = np.zeros((4, 2), np.int32 if comm.rank else np.float32)
        s.sync_dense(comm, buf, 4, 2, "buf")

    errors = on_threads(2, fn, "dtype")
    assert all(isinstance(e, ValueError) for e in errors), errors
    assert "float32" in str(errors[1])

    # float64 on one rank, float32 on the other (each summed alone): the
    # ranks disagree on the dtype, MismatchError on every rank naming both.
    def mixed(comm):
        s = zen.create_scheme("agsparse")
        buf = np.zeros((4, 2), np.float64 if comm.rank else np.float32)
        s.sync_dense(comm, buf, 4, 2, "buf")

    errors = on_threads(2, mixed, "dtype2")
    assert all(isinstance(e, zen.MismatchError) for e in errors), errors
    assert all("float32" in str(e) and "float64" in str(e) for e in errors), errors


@pytest.mark.parametrize("scheme", [s for s, _ in zen.schemes()])
def test_float64_is_summed_in_float64(scheme):
    # float64 arrays are read in place and summed in float64 (1e10 + 1 -
    # 1e10 is 1; 0 in float32) by every scheme (each declares float64).
    world, rows, width = 3, 10, 2
    given = [np.array([[1e10, 1e300]]), np.array([[1.0, 1e-300]]), np.array([[-1e10, 0.0]])]
    ids = [np.array([4]), np.array([4]), np.array([4])]
    want = np.zeros((rows, width))
    for r in range(world):
        want[4] = want[4] + given[r][0]  # the float64 reference, in rank order

    def fn(comm):
        s = zen.create_scheme(scheme)
        out_ids, out_vals = s.sync(comm, rows, width, ids[comm.rank], given[comm.rank], "t")
        buf = np.zeros((rows, width))
        buf[4] = given[comm.rank][0]
        s.sync_dense(comm, buf, rows, width, "d")
        return out_ids, out_vals, buf

    results = on_threads(world, fn, f"f64-{scheme}")
    for got in results:
        assert not isinstance(got, Exception), repr(got)
        out_ids, out_vals, buf = got
        assert out_vals.dtype == np.float64 and out_ids.tolist() == [4]
        assert out_vals.tolist() == [want[4].tolist()] and want[4].tolist() == [1.0, 1e300]
        assert np.array_equal(buf, want)


def _bf16_bits(x):
    """bfloat16 bits of float32 values, written out here: the top 16 bits
    of each float32, rounded to nearest even (the format's definition)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


@pytest.mark.parametrize("scheme", [s for s, _ in zen.schemes()])
def test_bfloat16_and_float16_are_summed_at_their_own_width(scheme):
    # float16 arrays are read in place as float16; bfloat16 (numpy has none)
    # as a uint16 view of its bits with dtype="bfloat16". Row 4 holds 1,
    # 2^-8, 2^-8 over the ranks: 1 + 2^-7 rounded once (agsparse, sparse_ps,
    # omnireduce, zen), 1 rounded at each hop (dense, sparcml); the result
    # comes back at 16 bits.
    world, rows, width = 3, 10, 2
    given = [np.array([[1.0, 3.0]]), np.array([[2.0 ** -8, 3.0]]), np.array([[2.0 ** -8, 3.0]])]
    once = scheme in ("agsparse", "sparse_ps", "omnireduce", "zen")

    def fn(comm):
        s = zen.create_scheme(scheme)
        bits = _bf16_bits(given[comm.rank])
        out_ids, out_bf = s.sync(comm, rows, width, np.array([4]), bits, "b", dtype="bfloat16")
        half = given[comm.rank].astype(np.float16)
        _, out_fp = s.sync(comm, rows, width, np.array([4]), half, "h")
        buf = np.zeros((rows, width), np.float16)
        buf[4] = half[0]
        s.sync_dense(comm, buf, rows, width, "d")
        dense_bf = np.zeros((rows, width), np.int16)
        dense_bf[4] = bits[0].view(np.int16)
        s.sync_dense(comm, dense_bf, rows, width, "db", dtype="bfloat16")
        return out_ids, out_bf, out_fp, buf, dense_bf

    results = on_threads(world, fn, f"b16-{scheme}")
    for got in results:
        assert not isinstance(got, Exception), repr(got)
        out_ids, out_bf, out_fp, buf, dense_bf = got
        assert out_ids.tolist() == [4] and out_bf.dtype == np.uint16 and out_fp.dtype == np.float16
        first = 1.0 + 2.0 ** -7 if once else None
        for bf in (out_bf[0], dense_bf[4].view(np.uint16)):
            assert bf[1] == _bf16_bits([9.0])[0]
            assert bf[0] in (_bf16_bits([1.0 + 2.0 ** -7])[0], _bf16_bits([1.0])[0])
            if first is not None:
                assert bf[0] == _bf16_bits([first])[0]
        # float16 holds 1 + 2^-7 exactly.
        assert out_fp[0].tolist() == [1.0 + 2.0 ** -7, 9.0] and buf[4].tolist() == [1.0 + 2.0 ** -7, 9.0]


def test_16_bit_dtype_errors_raise_on_every_rank():
    # A uint16 array without dtype= (it is not a float dtype zen sums), and a
    # float32 array given as bfloat16: ValueError on every rank naming them.
    def fn(comm):
        s = zen.create_scheme("agsparse")
        if comm.rank == 0:
            s.sync(comm, 10, 1, np.array([1]), np.ones((1, 1), np.uint16), "t")
        else:
            s.sync(comm, 10, 1, np.array([1]), np.ones((1, 1), np.float32), "t", dtype="bfloat16")

    errors = on_threads(2, fn, "b16-err")
    assert all(isinstance(e, ValueError) for e in errors), errors
    assert "uint16" in str(errors[0]) and "bfloat16" in str(errors[0])
    assert "float32" in str(errors[1]) and "bfloat16" in str(errors[1])


def test_rendezvous_timeout_is_transport_error():
    store = dist.HashStore()
    with pytest.raises(zen.TransportError, match="address of rank 1"):
        zen.connect(store, 0, 2, prefix="alone", timeout=0.5)
