"""`zen simulate`: the trace positional (--profile the same), tensors named as
`zen analyze` names them, the whole model by default, unknown names listed,
and no prediction beyond what the bytes allow against the dense AllReduce."""

from cli_testing import TRACE, zen, zen_json


def test_trace_is_positional_and_profile_is_the_same():
    a = zen("simulate", TRACE, "--world", "16")
    b = zen("simulate", "--profile", TRACE, "--world", "16")
    assert a.stdout == b.stdout


def test_default_is_the_whole_model_of_the_first_step(tmp_path):
    r, j = zen_json(tmp_path, "simulate", TRACE, "--world", "8")
    assert "whole model: 2 tensors of step 0" in r.stdout
    assert [t["name"] for t in j["tensors"]] == ["step0.embedding",
                                                "step0.lstm_weight_hh_l0_topk"]
    # The model's time is the sum of its tensors' times, scheme by scheme.
    _, emb = zen_json(tmp_path, "simulate", TRACE, "--tensor", "embedding", "--world", "8",
                      name="emb.json")
    _, lstm = zen_json(tmp_path, "simulate", TRACE, "--tensor", "step0.lstm_weight_hh_l0_topk",
                       "--world", "8", name="lstm.json")
    for whole, a, b in zip(j["worlds"][0]["predictions"], emb["worlds"][0]["predictions"],
                           lstm["worlds"][0]["predictions"]):
        assert whole["scheme"] == a["scheme"] == b["scheme"]
        assert abs(whole["time_s"] - a["time_s"] - b["time_s"]) <= 1e-12 + 1e-9 * whole["time_s"]


def test_base_name_and_full_name_are_the_same_tensor():
    a = zen("simulate", TRACE, "--tensor", "embedding", "--world", "16")
    b = zen("simulate", TRACE, "--tensor", "step0.embedding", "--world", "16")
    assert a.stdout == b.stdout
    assert "tensor step0.embedding" in a.stdout
    c = zen("simulate", TRACE, "--tensor", "embedding", "--step", "2", "--world", "16")
    assert "tensor step2.embedding" in c.stdout


def test_unknown_tensor_lists_the_names():
    r = zen("simulate", TRACE, "--tensor", "emb.weight", check=False)
    assert r.returncode != 0
    assert "embedding, lstm_weight_hh_l0_topk" in r.stderr
    assert "steps 0,1,2" in r.stderr
    # bench names tensors alike
    r = zen("bench", "--world", "2", "--trace", TRACE, "--tensor", "emb.weight", check=False)
    assert r.returncode != 0 and "embedding, lstm_weight_hh_l0_topk" in r.stderr


def test_88_percent_dense_weight_is_not_predicted_far_faster_than_dense_allreduce(tmp_path):
    # 256 x 256 floats (D = 256 KiB), every rank 88% of the rows: at 64 ranks
    # the union of any 63 is every row, so each rank must receive >= D in >= 1
    # round; the dense AllReduce moves 2 (63/64) D in 12 rounds. Bound:
    # (12 L + 2 (63/64) D/B) / (L + D/B), 2.5x at 25 Gbit/s and 5 us.
    _, j = zen_json(tmp_path, "simulate", "--synthetic",
                    "zipf:rows=256,width=256,density=0.88,skew=0", "--ranks", "8",
                    "--world", "64")
    d, b, l = 256 * 256 * 4, 25e9 / 8, 5e-6
    bound = (12 * l + 2 * 63 / 64 * d / b) / (l + d / b)
    w = j["worlds"][0]
    assert abs(w["allreduce"]["time_s"] - (12 * l + 2 * 63 / 64 * d / b)) < 1e-9
    for p in w["predictions"]:
        assert p["time_s"] >= l + d / b - 1e-12, p
        assert p["speedup_vs_allreduce"] <= bound, p
