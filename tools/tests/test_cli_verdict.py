"""`zen analyze`'s verdict: per tensor and for the whole model, auto's pick,
its predicted time against the dense AllReduce (the same numbers `zen
simulate` predicts for that tensor), the deciding properties, and the
pointer to `zen simulate`."""

import re

from cli_testing import TRACE, zen, zen_json


def verdict_rows(text):
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 2 and cells[0].split() and cells[0].split()[0] in (
                "embedding", "lstm_weight_hh_l0_topk", "whole"):
            rows[cells[0].split()[0]] = [c.split() for c in cells[1:]]
    return rows


def test_verdict_per_tensor_and_whole_model_matches_simulate(tmp_path):
    r = zen("analyze", TRACE, "--world", "64")
    out = r.stdout
    assert "summary (means over tensors of one name)" in out  # the report comes first
    assert "verdict for step 0 of the model: 2 tensors" in out
    rows = verdict_rows(out)
    assert set(rows) == {"embedding", "lstm_weight_hh_l0_topk", "whole"}
    for world_index, world in enumerate((8, 64)):
        total_ms = total_dense = 0.0
        for name, tensor in (("embedding", "step0.embedding"),
                             ("lstm_weight_hh_l0_topk", "step0.lstm_weight_hh_l0_topk")):
            scheme, ms, dense_ms, saves = rows[name][world_index]
            _, sim = zen_json(tmp_path, "simulate", TRACE, "--tensor", tensor, "--world", world,
                              name=f"{name}-{world}.json")
            w = sim["worlds"][0]
            predicted = {p["scheme"]: p["time_s"] for p in w["predictions"]}
            # auto's pick is the model's fastest scheme, at simulate's time.
            assert scheme == min(predicted, key=predicted.get)
            assert abs(float(ms) - 1e3 * predicted[scheme]) < 1e-3
            assert abs(float(dense_ms) - 1e3 * w["allreduce"]["time_s"]) < 1e-3
            total_ms += float(ms)
            total_dense += float(dense_ms)
        ms, dense_ms, saves = rows["whole"][world_index]
        assert abs(float(ms) - total_ms) < 2e-3 and abs(float(dense_ms) - total_dense) < 2e-3
        m = re.search(rf"Verdict at {world} ranks: use (\w+)\. One step synchronizes in "
                      rf"([\d.]+) ms, predicted, against ([\d.]+) ms for a dense AllReduce: "
                      rf"([\d.]+)x faster\.", out)
        assert m, out
        assert m.group(2) == ms and m.group(3) == dense_ms
        assert abs(float(m.group(4)) - float(dense_ms) / float(ms)) < 0.1
    assert re.search(r"embedding -> \w+: density 1\.\d\d% and (skew|overlap) ", out)
    assert f"zen simulate {TRACE} --world 16,64,256,1024" in out


def test_verdict_alone_and_the_network_given():
    full = zen("analyze", TRACE, "--bandwidth", "500mbit", "--latency-us", "50").stdout
    alone = zen("analyze", TRACE, "--verdict", "--bandwidth", "500mbit",
                "--latency-us", "50").stdout
    assert "summary (means" not in alone
    assert full.endswith(alone)
    assert "500mbit per link, 50 us per round" in alone
    assert "Verdict at 8 ranks:" in alone and "Verdict at 64" not in alone
