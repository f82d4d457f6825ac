"""examples/train_lm.py under `torchrun` as its docstring says (env://, the
job's TCPStore carries zen's rendezvous): zen and plain Gloo print the same
losses, step by step."""

import json
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


def test_train_lm_zen_matches_gloo(tmp_path):
    # Sparse embedding (the dense-bucket path is compared with DDP in
    # test_zen_torch_ranks.py; one launcher run costs seconds of torch start-up).
    # On 2 ranks the losses (printed to 9 digits: the float32 value) are
    # identical; the timeline lists every bucket of every step.
    timeline = tmp_path / "timeline.json"
    zen_losses, out = train("zen", "--timeline", str(timeline))
    assert "zen scheme" in out and "payload bytes" in out, out
    # The summary names what ran for the embedding (its sparse bucket, on zen).
    assert re.search(r"bucket \d+ \(sparse\): zen, \w+: .*embedding\.weight", out), out
    assert re.search(r"timeline: step [0-9.]+ ms vs compute-only", out), out
    gloo_losses, _ = train("gloo")
    assert zen_losses == pytest.approx(gloo_losses, rel=1e-5)
    assert zen_losses == gloo_losses
    data = json.loads(timeline.read_text())
    assert len(data["steps"]) == 3
    for step in data["steps"]:
        assert step["step_start"] <= step["backward_start"] <= step["backward_end"] <= step["step_end"]
        assert step["buckets"], step
        for b in step["buckets"]:
            # Started during backward, completed before backward returned.
            assert step["backward_start"] <= b["start"] <= b["end"] <= step["backward_end"], step


def test_train_lm_without_embedding_zen_matches_gloo():
    zen_losses, _ = train("zen", "--model", "none")
    gloo_losses, _ = train("gloo", "--model", "none")
    assert zen_losses == gloo_losses


def test_train_lm_on_the_process_group_transport_matches_gloo():
    # ZenState(transport='process_group') (what runs on NCCL), here on CPU
    # over Gloo: sparse and dense embeddings, the losses of plain DDP to the
    # last bit on 2 ranks; the summary names the transport.
    for model in ("sparse", "dense"):
        pg_losses, out = train("zen", "--model", model, "--transport", "process_group")
        assert "transport 'process_group'" in out, out
        gloo_losses, _ = train("gloo", "--model", model)
        assert pg_losses == gloo_losses, (model, pg_losses, gloo_losses)


def test_gpu_check_without_a_gpu_says_so_and_exits_0():
    # scripts/gpu-check on a machine without a GPU: runs nothing, says why,
    # exit status 0 (its GPU steps run through ZEN_GPU_CHECK_DEVICE=cpu in
    # test_process_group.py's scenarios).
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: scripts/gpu-check runs for real")
    run = subprocess.run([str(REPO / "scripts" / "gpu-check")], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=120)
    assert run.returncode == 0, run.stdout
    assert "no GPU here" in run.stdout and "nothing run" in run.stdout, run.stdout
