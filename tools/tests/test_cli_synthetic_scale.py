"""`zen bench --synthetic` at 2^31 and 2^40 rows with a few non-zeros runs in
3 GB of address space: the generator samples without a per-row table.
(dense is left out: it densifies rows x width by definition.)"""

import shutil

import pytest

from cli_testing import ZEN

SPARSE = "agsparse,sparcml,omnireduce,sparse_ps,zen"


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
@pytest.mark.parametrize("spec", ["zipf:rows=2147483648,density=2e-9",
                                  "zipf:rows=1099511627776,density=4.5e-12",
                                  "zipf:rows=1099511627776,density=4.5e-12,skew=0"])
def test_huge_row_counts_run_in_3_gb(spec):
    import subprocess
    r = subprocess.run(["prlimit", "--as=3221225472", str(ZEN), "bench", "--world", "2",
                        "--synthetic", spec, "--schemes", SPARSE, "--iters", "2", "--quiet"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for scheme in SPARSE.split(","):
        assert any(line.split()[:1] == [scheme] and line.split()[-1] == "0"
                   for line in r.stdout.splitlines()), (scheme, r.stdout)
