"""The recipes of docs/sections/pytorch.md, "Recipes": examples/lightning_ddp.py
(PyTorch Lightning, DDPStrategy with ddp_comm_state/ddp_comm_hook) and
examples/accelerate_ddp.py (HF accelerate, the hook registered on the prepared
model), each under torchrun on 2 CPU ranks (Gloo) for 4 steps, with zen and
with plain DDP (the reference: the framework's own gradient averaging). On 2
ranks every summation order gives the same float32 sum, so the losses are
equal step by step; the zen run also shows that zen synchronized the
embedding (ZenState.decisions()), so the equality is not that of a hook that
never ran. The frameworks' versions: python/requirements-recipes.txt."""

import re
import subprocess

import pytest

from zen_torch_testing import REPO, rank_env, torchrun

STEPS = 4


def train(example, sync):
    cmd = [torchrun(), "--standalone", "--nproc-per-node", "2",
           str(REPO / "examples" / example), "--sync", sync, "--steps", str(STEPS)]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=rank_env(), timeout=240)
    assert run.returncode == 0, run.stdout
    losses = [float(m) for m in re.findall(r"^step\s+\d+\s+loss (\S+)", run.stdout, re.M)]
    assert len(losses) == STEPS, run.stdout
    return losses, run.stdout


@pytest.mark.parametrize("example", ["lightning_ddp.py", "accelerate_ddp.py"])
def test_recipe_gives_plain_ddps_losses(example):
    zen_losses, out = train(example, "zen")
    assert re.search(r"^zen: emb\.weight bucket \d+ path zen scheme \w+$", out, re.M), out
    ddp_losses, ddp_out = train(example, "ddp")
    assert "zen:" not in ddp_out, ddp_out
    assert len(set(ddp_losses)) > 1, ddp_out  # the model trains: later losses depend on the sync
    assert zen_losses == ddp_losses
