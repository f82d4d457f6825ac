"""examples/train_topk.py under `torchrun` on 2 ranks: a top-k run stopped
with --checkpoint and continued with --resume prints the losses of the run
without the stop (real text, the example's transformer, Adam)."""

import json
import subprocess

from zen_torch_testing import REPO, rank_env, torchrun

TINY = ["--vocab", "2000", "--max-paragraphs", "3000", "--batch", "4", "--seq-len", "16",
        "--width", "16", "--warmup", "1", "--ramp", "2", "--ratio", "0.05", "--modes", "topk"]


def train(out, *extra):
    cmd = [torchrun(), "--standalone", "--nproc-per-node", "2",
           str(REPO / "examples" / "train_topk.py"), *TINY, "--out", str(out), *extra]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=rank_env(), timeout=150)
    assert run.returncode == 0, run.stdout
    return json.loads(out.read_text())["runs"]["topk"]


def test_train_topk_resumes_where_it_stopped(tmp_path):
    # Stopped after 3 of 6 steps (in the ramp: the step count, every rank's
    # residuals and Adam's moments travel in the per-rank checkpoints).
    full = train(tmp_path / "full.json", "--steps", "6")
    ckpt = tmp_path / "ckpt"
    first = train(tmp_path / "first.json", "--steps", "3", "--checkpoint", str(ckpt))
    assert sorted(p.name for p in ckpt.iterdir()) == ["topk.0.pt", "topk.1.pt"]
    resumed = train(tmp_path / "resumed.json", "--steps", "6", "--resume", str(ckpt))
    assert resumed["first_step"] == 3
    assert first["losses"] + resumed["losses"] == full["losses"]
    assert resumed["eval_loss"] == full["eval_loss"]
    assert [r["ratio"] for r in resumed["stats"]] == [r["ratio"] for r in full["stats"][3:]]
