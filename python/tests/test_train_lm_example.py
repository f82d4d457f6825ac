"""examples/train_lm.py under `torchrun` as its docstring says (env://, the
job's TCPStore carries zen's rendezvous): zen and plain Gloo print the same
losses, step by step."""

import re
import subprocess

import pytest

from zen_torch_testing import REPO, rank_env, torchrun

TINY = ["--steps", "3", "--vocab", "2000", "--max-paragraphs", "3000", "--batch", "4",
        "--seq-len", "16", "--width", "16", "--hidden", "32"]


def train(sync, *extra):
    cmd = [torchrun(), "--standalone", "--nproc-per-node", "2",
           str(REPO / "examples" / "train_lm.py"), "--sync", sync, *TINY, *extra]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=rank_env(), timeout=150)
    assert run.returncode == 0, run.stdout
    losses = [float(m) for m in re.findall(r"^step\s+\d+\s+loss (\S+)", run.stdout, re.M)]
    assert len(losses) == 3, run.stdout
    assert re.search(r"tokens/s\s+\d+", run.stdout), run.stdout
    return losses, run.stdout


def test_train_lm_zen_matches_gloo():
    # Sparse embedding (the dense-bucket path is compared with DDP in
    # test_zen_torch_ranks.py; one launcher run costs seconds of torch start-up).
    zen_losses, out = train("zen")
    assert "zen scheme" in out and "payload bytes" in out, out
    gloo_losses, _ = train("gloo")
    assert zen_losses == pytest.approx(gloo_losses, rel=1e-5)
