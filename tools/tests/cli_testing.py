"""Helpers of the `zen` CLI tests: where the binary and the shipped trace are.

Run: ZEN_BUILD=build /work/main/.venv/bin/python -m pytest -q tools/tests
($ZEN_BUILD, default build/, is a configured and built tree holding bin/zen.)
"""

import json
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("ZEN_BUILD", ROOT / "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD
ZEN = BUILD / "bin" / "zen"
TRACE = ROOT / "data" / "traces" / "gcide-lm-n8.safetensors"


def zen(*args, check=True, timeout=300, env=None, **kw):
    """Runs `zen ARGS`; returns the CompletedProcess (text, both streams)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    r = subprocess.run([str(ZEN), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=full_env, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"zen {' '.join(map(str, args))} exited {r.returncode}\n"
                             f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


def zen_json(tmp_path, *args, name="out.json"):
    """Runs `zen ARGS --json FILE` and returns (process, parsed JSON)."""
    out = tmp_path / name
    r = zen(*args, "--json", out)
    return r, json.loads(out.read_text())
