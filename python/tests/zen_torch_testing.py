"""Helpers of the zen.torch tests: start N ranks of zen_worker.py on loopback
(FileStore rendezvous for torch, zen rendezvous through it), with a hard
timeout so that a hang fails the test instead of stalling the suite.
(A uniquely named module, so that it never clashes with another test
directory's conftest.)
"""

import json
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
WORKER = HERE / "zen_worker.py"


def rank_env():
    env = dict(os.environ)
    # PYTHONFAULTHANDLER: a rank that dies of a signal (SIGSEGV, SIGABRT)
    # prints every thread's Python stack into the test's log.
    env.update(OMP_NUM_THREADS="1", ZEN_TIMEOUT="60", PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    env.pop("ZEN_SCHEME", None)
    return env


def torchrun():
    """The torchrun of this interpreter's environment (the venv's, torch 2.x),
    the command users type; torch 1.13's needs `--redirects 2 --tee 2` on
    Python 3.11, so the tests need torch >= 2."""
    path = pathlib.Path(sys.executable).parent / "torchrun"
    assert path.exists(), f"no torchrun next to {sys.executable} (torch >= 2 venv expected)"
    return str(path)


def wait_all(procs, timeout):
    """Waits for every process; kills all on timeout. Returns (codes, outputs, timed_out)."""
    timed_out = False
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            for q in procs:
                q.kill()
            out, _ = p.communicate()
        outputs.append(out)
    return [p.returncode for p in procs], outputs, timed_out


def run_ranks(tmp_path, world, scenarios, timeout=100, worker=None):
    """Runs the scenarios of `worker` (default zen_worker.py) on `world` ranks;
    returns {scenario: [result per rank]}."""
    worker = worker or WORKER
    out = tmp_path / "out"
    out.mkdir()
    init = f"file://{tmp_path / 'store'}"
    procs = [
        subprocess.Popen([sys.executable, str(worker), "--rank", str(r), "--world", str(world),
                          "--init", init, "--out", str(out), *scenarios],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=rank_env())
        for r in range(world)
    ]
    codes, outputs, timed_out = wait_all(procs, timeout)
    log = "\n".join(f"--- rank {r} (exit {c}) ---\n{o}" for r, (c, o) in
                    enumerate(zip(codes, outputs)))
    assert not timed_out, f"ranks did not finish within {timeout} s (hang?)\n{log}"
    results = {}
    for s in scenarios:
        per_rank = []
        for r in range(world):
            path = out / f"{s}.{r}.json"
            assert path.exists(), f"rank {r} wrote no result for '{s}'\n{log}"
            per_rank.append(json.loads(path.read_text()))
        results[s] = per_rank
    return results, log


def check(job, scenario):
    """Asserts the scenario passed on every rank; returns the per-rank results."""
    world, results, log = job
    failures = [f"rank {r}:\n{res['error']}" for r, res in enumerate(results[scenario])
                if not res["ok"]]
    assert not failures, f"'{scenario}' failed on {world} ranks:\n" + "\n".join(failures)
    return [res["result"] for res in results[scenario]]
