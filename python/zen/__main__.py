"""`python -m zen ARGS`: runs the `zen` command-line tool with ARGS.

`pip install .` installs the tool as an executable into the environment's
scripts directory (a venv's bin/), beside this interpreter; this module
replaces the Python process with it, so that exit status, output and signals
are the tool's own. It looks in this interpreter's scripts directory first
(the copy installed with this package), then in the user scheme's, then on
PATH; when none has it, it says where it looked and how to get it."""

import os
import shutil
import sys
import sysconfig


def find_cli():
    """The path of the `zen` executable, and the places looked at."""
    looked = []
    schemes = [None]
    user_scheme = f"{os.name}_user"
    if user_scheme in sysconfig.get_scheme_names():
        schemes.append(user_scheme)
    for scheme in schemes:
        scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        candidate = os.path.join(scripts, "zen")
        looked.append(candidate)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate, looked
    on_path = shutil.which("zen")
    looked.append("PATH")
    return on_path, looked


def main(argv):
    path, looked = find_cli()
    if path is None:
        sys.stderr.write(
            "python -m zen: the `zen` command-line tool is not installed (looked in "
            + ", ".join(looked) + ").\n"
            "`pip install .` from a zen clone installs it beside this Python; a CMake\n"
            "build has it as build/bin/zen (README.md, \"The zen tool\").\n")
        return 1
    os.execv(path, [path] + argv)
    return 1  # not reached: execv replaces this process or raises OSError


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
