"""`python -m zen` where no `zen` executable is installed: a clear error
naming where it looked and how to get the tool, exit status 1, instead of a
traceback. (Where `pip install .` installed it, test_pip_install.py runs
`python -m zen --version` against the project's version.)"""

import os
import subprocess
import sys

from zen_torch_testing import rank_env


def test_python_m_zen_without_the_cli_says_how_to_get_it(tmp_path):
    # An interpreter whose scripts directories and PATH hold no `zen`: the
    # module's search is redirected to empty folders before it runs.
    empty = tmp_path / "empty"
    empty.mkdir()
    code = (
        "import runpy, sys, sysconfig\n"
        f"sysconfig.get_path = lambda name, scheme=None: {str(empty)!r}\n"
        "sys.argv = ['zen', '--version']\n"
        "runpy.run_module('zen', run_name='__main__', alter_sys=True)\n")
    env = rank_env()
    env["PATH"] = str(empty)
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env, timeout=120)
    assert out.returncode == 1, out.stdout
    assert "the `zen` command-line tool is not installed" in out.stdout, out.stdout
    assert os.path.join(str(empty), "zen") in out.stdout, out.stdout
    assert "pip install ." in out.stdout, out.stdout
    assert "Traceback" not in out.stdout, out.stdout
