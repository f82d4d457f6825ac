"""scripts/train-testbed and scripts/topk-testbed without a testbed: their
own logic (options, the launch shared in scripts/lib.sh, the result lines,
progress and --quiet) against stand-ins for what needs root and network
namespaces. Stubs on PATH answer `id -u` with 0 and run `ip netns exec NS
CMD...` as CMD; scripts/testbed runs $ZEN, here a script that accepts `testbed
up/down`; the venv's python is a wrapper that plays each torchrun rank
(rank 0 prints what train_lm.py / train_topk.py print) and hands every other
call to this interpreter. Each rank's command line is logged, so the test
checks the launch as well.
"""

import json
import os
import pathlib
import stat
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent

# Plays one torchrun rank: rank 0 of train_lm.py prints its per-step losses
# (FAKE_DIFFER=zen: the zen run's loss differs from step 2 on) and its mean
# tokens/s; rank 0 of train_topk.py writes --out as train_topk.py does.
FAKE_RANK = r'''
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(" ".join(argv) + "\n")
def opt(name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default
rank = int(opt("--node-rank"))
script = next(a for a in argv if a.endswith(".py"))
if script.endswith("train_lm.py"):
    sync, model, steps = opt("--sync"), opt("--model"), int(opt("--steps"))
    if rank == 0:
        for k in range(steps):
            loss = 5.0 - 0.1 * k + (0.5 if sync == os.environ.get("FAKE_DIFFER") and k >= 2 else 0)
            print(f"step {k:4d}  loss {loss:.9g}  tokens/s {1000:9.0f}")
        rate = {"gloo": 1000, "zen": 1250}[sync]
        print(f"[train_lm] sync {sync}: mean tokens/s {rate} over steps 1-{steps - 1}")
elif script.endswith("train_topk.py") and rank == 0:
    mode, steps = opt("--modes"), int(opt("--steps"))
    args = {"world": int(opt("--nnodes")), "batch": 8, "seq_len": 32,
            "ratio": float(opt("--ratio")), "warmup": int(opt("--warmup")),
            "ramp": int(opt("--ramp")), "record_steps": int(opt("--record-steps")),
            "scheme": opt("--scheme", "zen"), "bucket_cap_mb": None}
    t = 0.08 if mode == "dense" else 0.02
    keys = ("sync_s", "select_s", "zen_sync_s", "bucket_sum_s", "step_s", "bytes_sent",
            "bytes_received")
    run = {"params": 1000, "timing": [dict(zip(keys, [t, 0.001, t, t, 0.2, 1e5, 2e5]), step=i)
                                      for i in range(steps)]}
    if mode == "topk":
        run["stats"] = [{"fraction": 0.02}] * steps
    with open(opt("--out"), "w") as f:
        json.dump({"args": args, "runs": {mode: run}}, f)
    print(f"[train_topk] {mode} done")
'''


def _script(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def bed(tmp_path):
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    _script(stubs / "id", '#!/bin/sh\n[ "$1" = -u ] && { echo 0; exit 0; }\nexec /usr/bin/id "$@"\n')
    _script(stubs / "ip", '#!/bin/sh\n[ "$1 $2" = "netns exec" ] || exit 9\n'
                          'echo "$3" >>"$FAKE_NS_LOG"\nshift 3\nexec "$@"\n')
    _script(stubs / "zen", '#!/bin/sh\necho "testbed $*" >>"$FAKE_NS_LOG"\n'
                           '[ "$1" = testbed ] || exit 9\n')
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (tmp_path / "fake_rank.py").write_text(FAKE_RANK)
    _script(venv / "bin" / "python",
            f'#!/bin/sh\nif [ "$1 $2" = "-m torch.distributed.run" ]; then\n'
            f'  shift 2; exec {sys.executable} {tmp_path / "fake_rank.py"} "$@"\nfi\n'
            f'exec {sys.executable} "$@"\n')
    build = tmp_path / "build"
    (build / "python" / "zen").mkdir(parents=True)
    (build / "bin").mkdir()
    _script(build / "bin" / "zen", "#!/bin/sh\nexit 9\n")
    env = dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}", ZEN=str(stubs / "zen"),
               ZEN_VENV=str(venv), ZEN_BUILD=str(build), FAKE_LOG=str(tmp_path / "ranks.log"),
               FAKE_NS_LOG=str(tmp_path / "ns.log"))
    env.pop("FAKE_DIFFER", None)
    return tmp_path, env


def _run(script, args, env, merge=False):
    return subprocess.run(["bash", str(REPO / "scripts" / script), *args], env=env, text=True,
                          stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merge else subprocess.PIPE, timeout=120)


def test_train_testbed_prints_each_pair_as_it_completes_and_progress_on_stderr(bed):
    tmp, env = bed
    out = tmp / "out"
    r = _run("train-testbed", ["--hosts", "3", "--steps", "4", "--models", "sparse,none",
                               "--repeat", "2", "--out", str(out), "--", "--extra", "x"], env)
    assert r.returncode == 0, r.stdout + r.stderr
    # stderr is a pipe here, not a terminal: one plain progress line per run.
    progress = [line for line in r.stderr.splitlines() if line.startswith("[train-testbed] ")]
    assert len(progress) == 8, r.stderr
    assert progress[0].startswith("[train-testbed] run 1/8: train_lm --model sparse --sync gloo "
                                  "on 3 hosts at 500mbit, 4 steps, pass 1 of 2; "), progress
    assert progress[3].startswith("[train-testbed] run 4/8: train_lm --model sparse --sync gloo "
                                  "on 3 hosts at 500mbit, 4 steps, pass 2 of 2; "), progress
    assert "\r" not in r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("model ")]
    assert len(rows) == 6, r.stdout
    assert rows[0].startswith("model sparse pass 1 (gloo,zen)  gloo     1000 tokens/s  "
                              "zen     1250 tokens/s  zen/gloo 1.25x  losses identical at all "
                              "4 steps (float32)  (3 hosts at 500mbit; "), rows
    assert rows[1].startswith("model sparse pass 2 (zen,gloo)"), rows
    assert rows[2].startswith("model sparse  zen/gloo median 1.25x (min 1.25x, max 1.25x) "
                              "over 2 interleaved pairs"), rows
    assert rows[5].startswith("model none    zen/gloo median 1.25x"), rows
    assert (out / "summary.txt").read_text().splitlines() == rows
    # Every rank ran under torchrun inside its own host, as users launch it.
    launches = (tmp / "ranks.log").read_text().splitlines()
    assert len(launches) == 8 * 3
    # (The ranks of one run start together, in any order.)
    assert sorted(launches[:3]) == [
        f"--nnodes 3 --nproc-per-node 1 --node-rank {i} --master-addr 10.77.0.1 "
        f"--master-port 29517 --redirects 2 --tee 2 {REPO}/examples/train_lm.py "
        "--sync gloo --model sparse --steps 4 --extra x" for i in range(3)], launches[:3]
    ns = (tmp / "ns.log").read_text().splitlines()
    assert ns[:2] == ["testbed testbed down tr", "testbed testbed up 3 500mbit tr"], ns
    assert sorted(ns[2:5]) == ["zentbtr-h0", "zentbtr-h1", "zentbtr-h2"], ns
    assert (tmp / "ns.log").read_text().splitlines()[-1] == "testbed testbed down tr"
    assert (out / "sparse-zen.2.log").exists() and (out / "sparse-zen.2.host2.log").exists()


def test_train_testbed_rows_interleave_with_progress(bed):
    """A pair's line comes out when the pair is done, before the next run starts."""
    tmp, env = bed
    r = _run("train-testbed", ["--hosts", "2", "--steps", "3", "--models", "sparse,dense",
                               "--out", str(tmp / "out")], env, merge=True)
    assert r.returncode == 0, r.stdout
    kinds = [line.split()[0] + (" " + line.split()[1] if line.startswith("model") else "")
             for line in r.stdout.splitlines()
             if line.startswith(("[train-testbed] run", "model "))]
    assert kinds == ["[train-testbed]", "[train-testbed]", "model sparse",
                     "[train-testbed]", "[train-testbed]", "model dense"], r.stdout


def test_train_testbed_quiet_prints_only_the_summary_at_the_end(bed):
    tmp, env = bed
    out = tmp / "out"
    env["FAKE_DIFFER"] = "zen"
    r = _run("train-testbed", ["--hosts", "2", "--steps", "4", "--models", "dense", "--quiet",
                               "--out", str(out)], env)
    # Losses that differ still give exit status 3, with or without --quiet.
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stderr == "", r.stderr
    assert r.stdout == (out / "summary.txt").read_text(), r.stdout
    assert r.stdout.startswith("model dense   gloo     1000 tokens/s  zen     1250 tokens/s  "
                               "zen/gloo 1.25x  losses DIFFER from step 2 on  (2 hosts at "
                               "500mbit; "), r.stdout
    assert len(r.stdout.splitlines()) == 1


def test_train_testbed_rejects_bad_options(bed):
    _, env = bed
    r = _run("train-testbed", ["--models", "sparse,huge"], env)
    assert r.returncode == 1 and "unknown model 'huge'" in r.stderr, r.stderr
    r = _run("train-testbed", ["--repeat", "0"], env)
    assert r.returncode == 1 and "--repeat wants a positive count" in r.stderr, r.stderr
    r = _run("train-testbed", ["--help"], env)
    assert r.returncode == 0 and "--quiet" in r.stdout and "Needs root" in r.stdout


def test_topk_testbed_runs_both_modes_through_the_shared_launch(bed):
    tmp, env = bed
    out = tmp / "out"
    r = _run("topk-testbed", ["--hosts", "2", "--steps", "8", "--warmup", "2", "--ramp", "1",
                              "--record-steps", "1", "--no-bench", "--out", str(out)], env)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = (out / "summary.txt").read_text()
    assert summary.startswith("scripts/topk-testbed --hosts 2 --rate 500mbit --steps 8 "
                              "--ratio 0.01 --warmup 2 --ramp 1 --record-steps 1 --scheme zen"), summary
    assert "ratio dense / top-k, sync medians: 4.00x (span, slowest rank)" in summary, summary
    assert summary in r.stdout
    launches = (tmp / "ranks.log").read_text().splitlines()
    assert len(launches) == 4
    assert sorted(launches[:2]) == [
        f"--nnodes 2 --nproc-per-node 1 --node-rank {i} --master-addr 10.77.0.1 "
        f"--master-port 29527 --redirects 2 --tee 2 {REPO}/examples/train_topk.py "
        "--modes dense --steps 8 --ratio 0.01 --warmup 2 --ramp 1 --record-steps 1 "
        f"--sync-timing --out {out}/dense.json" for i in range(2)], launches[:2]
    assert all(f"--modes topk" in line and f"--scheme zen --record {out}/topk-trace.safetensors"
               in line for line in launches[2:]), launches[2:]
    assert (out / "dense.log").exists() and (out / "topk.host1.log").exists()
    assert (tmp / "ns.log").read_text().splitlines()[-1] == "testbed testbed down tk"


def test_a_failing_rank_fails_the_script_with_rank_0s_log(bed):
    tmp, env = bed
    # A rank whose python dies: the script stops, naming the run and showing rank 0's end.
    (tmp / "fake_rank.py").write_text('import sys\nprint("rank log line")\nsys.exit(7)\n')
    r = _run("train-testbed", ["--hosts", "2", "--steps", "2", "--models", "none",
                               "--out", str(tmp / "out")], env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "rank log line" in r.stderr
    assert "--model none --sync gloo failed (rc 7)" in r.stderr, r.stderr
    assert (tmp / "ns.log").read_text().splitlines()[-1] == "testbed testbed down tr"
