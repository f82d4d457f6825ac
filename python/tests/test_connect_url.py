"""zen.connect_url and zen.connect: rendezvous URLs (file:, tcp:, env://),
reruns in one directory, launcher variables read at the Python edge, and
timeout validation, the transport table (transport="mpi" under mpirun) and
the who-is-missing notices. Peers are real processes where
the launcher's environment differs per rank."""

import os
import subprocess
import sys
import threading

import pytest
import torch.distributed as dist

import zen


def on_threads(world, connect):
    out = [None] * world

    def body(r):
        try:
            out[r] = connect(r)
        except Exception as e:  # returned to the test
            out[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return out


def test_rerun_in_the_same_directory_connects(tmp_path):
    url = f"file:{tmp_path}/rdv?job=py"
    for run in range(2):
        comms = on_threads(3, lambda r: zen.connect_url(url, r, 3, timeout=20))
        assert all(isinstance(c, zen.Communicator) for c in comms), (run, comms)
    # Private files, a private directory (created by zen).
    assert (os.stat(tmp_path / "rdv").st_mode & 0o777) == 0o700
    for f in (tmp_path / "rdv").iterdir():
        assert (f.stat().st_mode & 0o777) == 0o600, f


@pytest.mark.parametrize("bad", [1e30, float("nan"), 0.0, -1.0, float("inf")])
def test_absurd_timeouts_are_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="timeout") as e:
        zen.connect_url(f"file:{tmp_path}", 0, 2, timeout=bad)
    assert "-9223372036854775808" not in str(e.value)
    with pytest.raises(ValueError, match="timeout"):
        zen.connect(dist.HashStore(), 0, 2, timeout=bad)


def test_bad_urls_and_missing_launcher(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="rendezvous URL"):
        zen.connect_url("http://x", 0, 2)
    with pytest.raises(ValueError, match="job id"):
        zen.connect_url(f"file:{tmp_path}?job=a/b", 0, 2)
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
              "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ValueError, match="no launcher variables"):
        zen.connect_url("env://")
    with pytest.raises(ValueError, match="needs rank and size"):
        zen.connect_url(f"file:{tmp_path}")


WORKER = """
import sys, zen
c = zen.connect_url("env://", timeout=20)
print("connected", c.rank, c.size)
"""


def test_env_url_under_torchrun_variables():
    """Three processes with torchrun's variables; rank 0 (started last)
    hosts zen's store on MASTER_PORT+1; a second elastic generation (restart
    count 1) on the same port connects too."""
    for restart in ("0", "1"):
        procs = []
        for r in (2, 1, 0):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="3", MASTER_ADDR="127.0.0.1",
                       MASTER_PORT="29870", TORCHELASTIC_RESTART_COUNT=restart,
                       TORCHELASTIC_RUN_ID="pytest")
            procs.append(subprocess.Popen([sys.executable, "-c", WORKER], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        outs = [p.communicate(timeout=60)[0] for p in procs]
        for p, out in zip(procs, outs):
            assert p.returncode == 0, out
            assert "connected" in out and " 3" in out, out


def test_transport_table_and_unknown_transports(tmp_path):
    ids = [t["id"] for t in zen._zen.transports()]
    assert ids[0] == "gloo"
    gloo = zen._zen.transports()[0]
    assert gloo["url_schemes"] == ["file:", "redis://", "tcp://"]
    assert not gloo["ranks_from_launcher"]
    with pytest.raises(ValueError, match=r"unknown transport 'nccl' \(known: gloo"):
        zen.connect_url(f"file:{tmp_path}", 0, 2, transport="nccl")
    # The gloo entry by name is the default.
    comms = on_threads(2, lambda r: zen.connect_url(f"file:{tmp_path}/d", r, 2, timeout=20,
                                                    transport="gloo"))
    assert all(isinstance(c, zen.Communicator) for c in comms), comms


# Each rank writes its own file: mpirun forwards the ranks' stdout in chunks
# that can interleave within a line.
MPI_WORKER = """
import pathlib, sys
import zen
c = zen.connect_url("mpi://", transport="mpi", timeout=20)
pathlib.Path(sys.argv[1], f"rank{c.rank}").write_text(f"connected {c.rank} {c.size}")
"""


def test_mpi_transport_under_mpirun(tmp_path):
    """connect_url(..., transport="mpi") reaches MPI_COMM_WORLD from Python
    (builds with MPI), with rank and size from mpirun."""
    import shutil
    if "mpi" not in [t["id"] for t in zen._zen.transports()]:
        pytest.skip("this zen was built without MPI")
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun")
    with pytest.raises(ValueError, match="pass 'mpi://' or 'env://'"):
        zen.connect_url("file:/tmp/x", 0, 2, transport="mpi")
    cmd = ["mpirun", "-np", "2", "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    out = subprocess.run(cmd + [sys.executable, "-c", MPI_WORKER, str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = sorted(p.read_text() for p in tmp_path.glob("rank*"))
    assert lines == ["connected 0 2", "connected 1 2"], out.stdout + out.stderr


def test_a_waiting_rank_names_who_is_missing(tmp_path, capfd):
    """Rank 0 of 2 with no rank 1: every 5 s a line on stderr names rank 1,
    then the timeout's error."""
    with pytest.raises(RuntimeError, match="address of rank 1"):
        zen.connect_url(f"file:{tmp_path}", 0, 2, timeout=6)
    err = capfd.readouterr().err
    lines = [l for l in err.splitlines() if "has waited" in l]
    assert len(lines) == 1, err
    assert "zen: rank 0 has waited 5 s" in lines[0], lines
    assert "rank 1 of 2 (not arrived yet)" in lines[0], lines
    with pytest.raises(RuntimeError, match="address of rank 1"):
        zen.connect_url(f"file:{tmp_path}", 0, 2, timeout=6, progress=False)
    assert "has waited" not in capfd.readouterr().err
