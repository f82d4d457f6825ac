"""`zen bench`: progress on stderr also when it is not a terminal (naming the
size point), a sweep's rows printed as they complete, --quiet silencing
both, nccl-tests' -b -e -f -n -w, and the JSON's zen and schema versions."""

import json
import subprocess
import time

from cli_testing import ZEN, zen

SPEC = "zipf:rows=4096,width=8,density=0.01"


def test_progress_lines_on_a_non_terminal_stderr_name_the_point_and_scheme():
    r = zen("bench", "--world", "2", "--synthetic", SPEC, "--sweep", "rows",
            "--sweep-range", "512:1024:2", "--iters", "1", "--schemes", "dense,zen")
    lines = [l for l in r.stderr.splitlines() if l.startswith("zen bench:")]
    assert lines == [
        "zen bench: size point 1 of 2 (rows 512, density 1.00e-02): scheme 1 of 2 (dense), 2 iterations",
        "zen bench: size point 1 of 2 (rows 512, density 1.00e-02): scheme 2 of 2 (zen), 2 iterations",
        "zen bench: size point 2 of 2 (rows 1024, density 1.00e-02): scheme 1 of 2 (dense), 2 iterations",
        "zen bench: size point 2 of 2 (rows 1024, density 1.00e-02): scheme 2 of 2 (zen), 2 iterations",
    ]
    single = zen("bench", "--world", "2", "--synthetic", SPEC, "--iters", "1", "--schemes", "zen")
    assert "zen bench: scheme 1 of 1 (zen), 2 iterations" in single.stderr


def test_quiet_silences_the_progress():
    r = zen("bench", "--world", "2", "--synthetic", SPEC, "--sweep", "rows",
            "--sweep-range", "512:1024:2", "--iters", "1", "--schemes", "zen", "--quiet")
    assert "zen bench:" not in r.stderr
    rows = [l for l in r.stdout.splitlines() if l.split()[:1] in (["512"], ["1024"])]
    assert len(rows) == 2  # the table still comes, whole, at the end


def test_sweep_rows_print_as_they_complete():
    # The first point's row must be on stdout while the second, slow, point runs.
    p = subprocess.Popen([str(ZEN), "bench", "--world", "2", "--sweep", "rows",
                          "--synthetic", "zipf:width=8,density=0.01", "--sweep-range",
                          "512:2097152:4096", "--iters", "3", "--schemes", "dense"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        first_row_at = None
        start = time.monotonic()
        for line in p.stdout:
            if line.split()[:1] == ["512"]:
                first_row_at = time.monotonic() - start
                break
        assert first_row_at is not None
        assert p.poll() is None, "the whole sweep ended before its first row was read"
        rest = p.stdout.read()
        assert p.wait(timeout=300) == 0
        assert any(l.split()[:1] == ["2097152"] for l in rest.splitlines())
        assert rest.count("median ms") == 0  # the header came once, before the first row
    finally:
        if p.poll() is None:
            p.kill()


def test_nccl_tests_aliases_map_to_the_sweep_and_iterations(tmp_path):
    out = tmp_path / "a.json"
    zen("bench", "--world", "2", "--synthetic", SPEC, "-b", "16K", "-e", "64K", "-f", "2",
        "-n", "2", "-w", "0", "--schemes", "zen", "--quiet", "--json", out)
    j = json.loads(out.read_text())
    assert j["sweep"] == "rows"
    # 16 KiB .. 64 KiB of dense float32 rows of width 8 (32 bytes): 512 .. 2048 rows, x2.
    assert [p["tensor"]["rows"] for p in j["points"]] == [512, 1024, 2048]
    assert all(p["iters"] == 2 and p["warmup"] == 0 for p in j["points"])
    bad = zen("bench", "--world", "2", "--synthetic", SPEC, "-b", "lots", check=False)
    assert bad.returncode == 2 and "-b lots" in bad.stderr
    bad = zen("bench", "--world", "2", "--synthetic", SPEC, "-b", "1K", "--sweep", "density",
              check=False)
    assert bad.returncode == 2


def test_json_carries_the_zen_and_schema_versions(tmp_path):
    version = zen("--version").stdout.split()[1]
    for extra in ([], ["--sweep", "rows", "--sweep-range", "512:512:2"]):
        out = tmp_path / "v.json"
        zen("bench", "--world", "2", "--synthetic", SPEC, "--iters", "1", "--schemes", "zen",
            "--quiet", "--json", out, *extra)
        j = json.loads(out.read_text())
        assert j["zen_version"] == version
        assert j["schema_version"] == 2
