"""The installed `orrery` package against the `orrery` command.

Run by scripts/python-test.sh on the wheel installed into a fresh virtual
environment: ORRERY_CLI names the command built from the same tree (the
Python results must be its bytes and its error lines), ORRERY_SHARED the
shared corpus. Each comparison with the command is skipped, saying so, only
where ORRERY_CLI is not given.
"""

import json
import os
import subprocess
import threading

import pytest

import orrery

CLI = os.environ.get("ORRERY_CLI")
SHARED = os.environ.get("ORRERY_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
needs_cli = pytest.mark.skipif(not CLI, reason="ORRERY_CLI (the orrery command to compare with) is not set")


def cli(*args, check=True):
    r = subprocess.run([CLI, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"orrery {' '.join(args)}: {r.stderr}")
    return r


def cli_error(*args):
    r = cli(*args, check=False)
    assert r.returncode == 1, r
    line = r.stderr.strip()
    assert line.startswith("orrery: error: ") and "\n" not in line, line
    return line[len("orrery: error: "):]


@pytest.fixture(scope="module")
def gpt13():
    return orrery.load("gpt3-1.3b")


def test_load_a_shared_model():
    path = os.path.join(SHARED, "models", "gpt2_small_torchnn.onnx")
    if not os.path.exists(path):
        pytest.skip(f"{path}: the shared corpus is not here")
    m = orrery.load(path)
    assert m.parameters > 100_000_000
    assert max(l["count"] for l in m.layers) == 12  # its 12 blocks outlined
    # The stats are those of `orrery stats --json`.
    if CLI:
        want = json.loads(cli("stats", path, "--dim", "batch=1", "--json").stdout)
        got = m.stats
        assert got["parameters"] == want["parameters"]
        assert got["training_flops_per_sample"] == want["training_flops_per_sample"]
        assert [l["count"] for l in got["layers"]] == [l["count"] for l in want["layers"]]


def test_load_from_bytes_equals_load_from_file(tmp_path):
    src = os.path.join(os.path.dirname(orrery.__file__), "models", "gpt3-125m.onnx")
    with open(src, "rb") as f:
        data = f.read()
    a = orrery.load(src)
    b = orrery.load(data, name="gpt3-125m-bytes")
    assert a.stats["parameters"] == b.stats["parameters"] == 125226240
    assert b.name == "gpt3-125m-bytes"


def test_plan_is_the_cli_bytes(gpt13):
    cluster = orrery.Cluster.preset("8xA100-80G")
    p = orrery.plan(gpt13, cluster, global_batch=64, top=3)
    s = p.strategy
    assert s["dp"] * s["tp"] * s["pp"] * s["cp"] <= 8
    assert s["global_batch_size_samples"] == 64
    assert p.step_time_s > 0 and p.predicted["peak_memory_bytes"] <= 80 * 2**30
    assert len(p.runners_up) == 2
    assert "best plan" in p.summary
    if not CLI:
        pytest.skip("ORRERY_CLI is not set: the bytes are not compared")
    out = cli("plan", "gpt3-1.3b", "--cluster", "8xA100-80G", "--global-batch", "64", "--top", "3", "--json").stdout
    assert p.to_json() == out


def test_plan_keywords_are_the_cli_flags(gpt13):
    cluster = orrery.Cluster.preset("2x8xA100-80G")
    p = orrery.plan(gpt13, cluster, 256, objective="energy", framework="deepspeed", grad_bytes=2)
    if not CLI:
        pytest.skip("ORRERY_CLI is not set: the bytes are not compared")
    out = cli("plan", "gpt3-1.3b", "--cluster", "2x8xA100-80G", "--global-batch", "256", "--objective", "energy",
              "--framework", "deepspeed", "--grad-bytes", "2", "--json").stdout
    assert p.to_json() == out


def test_goodput_keywords_are_the_cli_flags(gpt13):
    cluster = orrery.Cluster.preset("2x8xA100-80G")
    p = orrery.plan(gpt13, cluster, 256, objective="time-to-train", tokens=1e11, days=5, trials=7)
    g = p["goodput"]
    assert 0.9 < g["effective_training_time_fraction"] <= 1
    assert g["time_to_train"]["tokens"] == 1e11
    assert g["run"]["trials"] == 7
    s = orrery.simulate(gpt13, cluster, "dp=16,mbs=1,gbs=256", tokens=1e11, checkpoint="async")
    assert s["goodput"]["checkpoint_mode"] == "async"
    with pytest.raises(orrery.Error, match="--checkpoint 'often': expected sync or async"):
        orrery.simulate(gpt13, cluster, "dp=16,mbs=1,gbs=256", tokens=1e11, checkpoint="often")
    with pytest.raises(orrery.Error, match="give the token budget"):
        orrery.plan(gpt13, cluster, 256, objective="time-to-train")
    with pytest.raises(TypeError, match="days: expected a number"):
        orrery.simulate(gpt13, cluster, "dp=16,mbs=1,gbs=256", days="3")
    if not CLI:
        pytest.skip("ORRERY_CLI is not set: the bytes are not compared")
    out = cli("plan", "gpt3-1.3b", "--cluster", "2x8xA100-80G", "--global-batch", "256", "--objective",
              "time-to-train", "--tokens", "1e11", "--days", "5", "--trials", "7", "--json").stdout
    assert p.to_json() == out


def test_plans_carry_a_band_and_rank_by_it(gpt13):
    cluster = orrery.Cluster.preset("8xA100-80G")
    p = orrery.plan(gpt13, cluster, 64, top=3, rank_by="p90")
    band = p.predicted["step_time_band_s"]
    assert band["p10"] <= band["p50"] <= band["p90"]
    p90s = [p.predicted["step_time_band_s"]["p90"]] + [
        r["predicted"]["step_time_band_s"]["p90"] for r in p.runners_up]
    assert p90s == sorted(p90s)
    assert "band" in p.summary
    with pytest.raises(orrery.Error, match="--rank-by p90: ranks step times"):
        orrery.plan(gpt13, cluster, 64, objective="cost", rank_by="p90")
    if not CLI:
        pytest.skip("ORRERY_CLI is not set: the bytes are not compared")
    out = cli("plan", "gpt3-1.3b", "--cluster", "8xA100-80G", "--global-batch", "64", "--top", "3",
              "--rank-by", "p90", "--json").stdout
    assert p.to_json() == out


@needs_cli
def test_plan_from_a_cluster_file_is_the_cli_bytes(gpt13, tmp_path):
    spec = {"name": "two-nodes", "nodes": [{"count": 2, "device": "H100-SXM", "devices_per_node": 8}]}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(spec))
    r = cli("plan", "gpt3-1.3b", "--cluster", str(path), "--global-batch", "128", "--json", check=False)
    if r.returncode != 0:
        with pytest.raises(orrery.Error) as e:
            orrery.Cluster.load(path)
        assert str(e.value) in r.stderr
        return
    p = orrery.plan(gpt13, orrery.Cluster.load(path), 128)
    assert p.to_json() == r.stdout
    inline = orrery.Cluster.from_json(spec)
    assert inline.num_devices == 16
    q = orrery.plan(gpt13, inline, 128)
    assert q.strategy == p.strategy and q.step_time_s == p.step_time_s


def test_simulate_a_given_strategy():
    # A file, not a built-in name: the JSON records the path it resolves to.
    path = os.path.join(os.path.dirname(orrery.__file__), "models", "gpt3-1.3b.onnx")
    gpt13 = orrery.load(path)
    cluster = orrery.Cluster.preset("8xA100-80G")
    s = orrery.simulate(gpt13, cluster, "tp=2,dp=4,mbs=2,gbs=64")
    d = orrery.simulate(gpt13, cluster, {"tp": 1, "dp": 8, "mbs": 2, "gbs": 64})
    assert s.step_time_s > 0 and d.step_time_s > 0
    assert s.step_time_s != d.step_time_s
    r = orrery.simulate(gpt13, cluster, "tp=2,dp=4,mbs=2,gbs=64,recompute=full")
    assert r.step_time_s > s.step_time_s  # recomputing costs a forward
    if CLI:
        out = cli("simulate", path, "--cluster", "8xA100-80G", "--strategy", "tp=2,dp=4,mbs=2,gbs=64",
                  "--json").stdout
        assert s.to_json() == out


def test_a_layer_profile_adds_its_host_time(gpt13, tmp_path):
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"schema": "orrery-layer-profile", "version": 1, "source": "test",
                                   "layers": [{"device": "A100-80G", "tp": 1, "forward_s": 0.01}]}))
    cluster = orrery.Cluster.preset("8xA100-80G")
    plain = orrery.simulate(gpt13, cluster, "dp=8,mbs=2,gbs=64")
    host = orrery.simulate(gpt13, cluster, "dp=8,mbs=2,gbs=64", layer_profile=str(profile))
    assert host.step_time_s > plain.step_time_s + 0.5  # 24 layers, 4 micro-batches, ~30 ms each
    p = orrery.plan(gpt13, cluster, 64, strategy="dp=8,mbs=2,gbs=64", layer_profile=str(profile))
    assert p.predicted["layer_profile"]["layers"][0]["forward_s"] == 0.01
    assert p.step_time_s == pytest.approx(host.step_time_s, rel=1e-12)
    with pytest.raises(orrery.Error, match="no entry for A100-80G at tp 2"):
        orrery.simulate(gpt13, cluster, "tp=2,dp=4,mbs=2,gbs=64", layer_profile=str(profile))


def test_deepspeed_pipeline_sends(gpt13):
    # Whole gradients from every tp rank and the attention mask beside each
    # activation (DeepSpeed's pipeline engine) cost more than shards.
    cluster = orrery.Cluster.preset("2x8xA100-80G")
    strategy = "tp=4,pp=4,mbs=2,gbs=32,overlap=none"
    base = orrery.simulate(gpt13, cluster, strategy)
    ds = orrery.simulate(gpt13, cluster, strategy, pipeline_gradients="whole", pipeline_mask=True)
    assert ds.step_time_s > base.step_time_s
    p = orrery.plan(gpt13, cluster, 32, strategy=strategy, pipeline_gradients="whole",
                    pipeline_mask=True)
    assert (p.predicted["pipeline_gradients"], p.predicted["pipeline_attention_mask"]) == \
        ("whole", "fp16")
    assert p.step_time_s == pytest.approx(ds.step_time_s, rel=1e-12)
    with pytest.raises(orrery.Error, match="--pipeline-gradients 'halves'"):
        orrery.simulate(gpt13, cluster, strategy, pipeline_gradients="halves")


def test_every_framework_assumption_is_a_keyword_and_a_plan_field(gpt13):
    # One table names each assumption for plans, flags and keywords: each
    # keyword is taken, lands in the plan, and moves or keeps the price as
    # its flag does.
    cluster = orrery.Cluster.preset("2x8xA100-80G")
    strategy = "tp=2,pp=2,dp=4,mbs=1,gbs=32,zero=3,overlap=none"
    keywords = orrery.assumption_keywords()
    assert keywords == ["separate_grad_accumulation", "grad_bytes",
                        "grad_reduce_bytes", "zero3_prefetch_params",
                        "loss", "memory_headroom", "pipeline_gradients", "pipeline_mask"]
    values = {"separate_grad_accumulation": (True, "gradient_accumulation", "separate"),
              "grad_bytes": (2, "gradient_bytes_per_parameter", 2),
              "grad_reduce_bytes": (2, "gradient_reduce_bytes_per_parameter", 2),
              "zero3_prefetch_params": (5e7, "zero3_prefetch_parameters", 5e7),
              "loss": ("fp32-copy", "loss", "fp32-copy"),
              "memory_headroom": (0.1, "memory_headroom_fraction", 0.1),
              "pipeline_gradients": ("whole", "pipeline_gradients", "whole"),
              "pipeline_mask": (True, "pipeline_attention_mask", "fp16")}
    assert sorted(values) == sorted(keywords)
    for key, (value, field, recorded) in values.items():
        p = orrery.plan(gpt13, cluster, 32, strategy=strategy, **{key: value})
        assert p.predicted[field] == recorded, key
        if CLI:
            flag = "--" + key.replace("_", "-")
            args = [flag] if value is True else [flag, str(value)]
            assert p.to_json() == cli("plan", "gpt3-1.3b", "--cluster", "2x8xA100-80G",
                                      "--global-batch", "32", "--strategy", strategy,
                                      "--json", *args).stdout, key
    with pytest.raises(TypeError, match="unexpected keyword argument 'grad_bites'"):
        orrery.simulate(gpt13, cluster, strategy, grad_bites=2)
    with pytest.raises(TypeError, match="pipeline_mask: expected True or False"):
        orrery.simulate(gpt13, cluster, strategy, pipeline_mask="yes")
    with pytest.raises(TypeError, match="grad_bytes: expected a number"):
        orrery.simulate(gpt13, cluster, strategy, grad_bytes="2")


def test_simulate_a_plan_and_a_trace(gpt13, tmp_path):
    cluster = orrery.Cluster.preset("8xA100-80G")
    p = orrery.plan(gpt13, cluster, 64)
    s = orrery.simulate(gpt13, cluster, plan=p, trace=str(tmp_path / "t.json"))
    assert s.step_time_s == pytest.approx(p.step_time_s, rel=1e-9)
    trace = json.loads((tmp_path / "t.json").read_text())
    assert trace["traceEvents"]


def test_export_to_megatron(gpt13):
    p = orrery.plan(gpt13, orrery.Cluster.preset("2x8xA100-80G"), 256, strategy="tp=2,pp=2,dp=4,mbs=2,gbs=256")
    text = p.export("megatron")
    assert "--tensor-model-parallel-size 2" in text
    assert "--pipeline-model-parallel-size 2" in text
    with pytest.raises(orrery.Error, match="unknown format"):
        p.export("nonsense")
    if CLI:
        plan_file = p.to_json()
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"orrery-pytest-{os.getpid()}.json")
        with open(path, "w") as f:
            f.write(plan_file)
        try:
            assert cli("export", path, "--to", "megatron").stdout == text
        finally:
            os.unlink(path)


def test_export_a_heterogeneous_plan_to_pytorch():
    here = os.path.dirname(os.path.abspath(__file__))
    cluster = orrery.Cluster(os.path.join(here, "..", "..", "bench", "clusters",
                                          "h100-a100-40g.json"))
    p = orrery.plan(orrery.load("llama2-7b"), cluster, 64)
    assert p.strategy["kind"] == "heterogeneous"
    text = p.export("pytorch")
    assert "GROUPS = [" in text and "class StageSchedule" in text
    assert 'DEVICE_TYPE = "cuda"' in text
    with pytest.raises(orrery.Error, match="only pytorch expresses that"):
        p.export("megatron")


def test_report_writes_the_page(gpt13, tmp_path):
    p = orrery.plan(gpt13, orrery.Cluster.preset("8xA100-80G"), 64)
    out = p.report(tmp_path / "plan.html")
    html = open(out).read()
    assert html.startswith("<!DOCTYPE html>") or "<html" in html[:200]
    assert p.strategy["cli"].split(",")[0] in html


def test_a_bad_onnx_file_raises_the_cli_message(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not a protobuf \xff\xff\xff")
    with pytest.raises(orrery.Error) as e:
        orrery.load(bad)
    msg = str(e.value)
    assert str(bad) in msg and "\n" not in msg
    if CLI:
        assert msg == cli_error("stats", str(bad), "--dim", "batch=1")
    with pytest.raises(orrery.Error) as e2:
        orrery.load(b"\x00\x01garbage", name="in-memory.onnx")
    assert "in-memory.onnx" in str(e2.value)


def test_bad_inputs_raise_one_line_errors(gpt13):
    cluster = orrery.Cluster.preset("8xA100-80G")
    path = os.path.join(os.path.dirname(orrery.__file__), "models", "gpt3-125m.onnx")
    cases = [
        (lambda: orrery.simulate(gpt13, cluster, "tp=3,gbs=8"), ["simulate", "gpt3-1.3b", "--cluster", "8xA100-80G", "--strategy", "tp=3,gbs=8"]),
        (lambda: orrery.simulate(gpt13, cluster, "tp=2,bogus=1"), ["simulate", "gpt3-1.3b", "--cluster", "8xA100-80G", "--strategy", "tp=2,bogus=1"]),
        (lambda: orrery.Cluster.preset("8xNoSuchGPU"), ["simulate", "gpt3-1.3b", "--cluster", "8xNoSuchGPU", "--strategy", "dp=8"]),
        (lambda: orrery.load(path, {"nosuchdim": 4}), ["stats", path, "--dim", "batch=1", "--dim", "nosuchdim=4"]),
    ]
    for call, args in cases:
        with pytest.raises(orrery.Error) as e:
            call()
        assert "\n" not in str(e.value)
        if CLI:
            assert str(e.value) == cli_error(*args), args
    for bad in [lambda: orrery.plan(gpt13, cluster, 64, objective="speed"),
                lambda: orrery.plan(gpt13, cluster, 64, precision="fp7"),
                lambda: orrery.plan(gpt13, cluster, 64, framework="caffe"),
                lambda: orrery.plan(gpt13, cluster, 64, grad_bytes=3),
                lambda: orrery.plan(gpt13, cluster, 0),
                lambda: orrery.plan(gpt13, cluster, 64, top=0),
                lambda: orrery.simulate(gpt13, cluster),
                lambda: orrery.load("gpt3-1.3b", kernels="turbo"),
                lambda: orrery.Cluster.from_json("{not json")]:
        with pytest.raises(orrery.Error) as e:
            bad()
        assert str(e.value) and "\n" not in str(e.value)


def test_a_model_and_a_cluster_are_taken_as_load_and_cluster_take_them(gpt13, tmp_path):
    # A name, a path, bytes or a loaded model: the same plan, byte for byte.
    path = os.path.join(os.path.dirname(orrery.__file__), "models", "gpt3-125m.onnx")
    with open(path, "rb") as f:
        data = f.read()
    small = orrery.load("gpt3-125m")
    want = orrery.plan(small, "8xA100-80G", 64, strategy="dp=8,mbs=1,gbs=64").to_json()
    for model in ["gpt3-125m", path, data]:
        got = orrery.plan(model, "8xA100-80G", 64, strategy="dp=8,mbs=1,gbs=64")
        assert json.loads(got.to_json())["predicted"] == json.loads(want)["predicted"]
    spec = {"sites": [{"nodes": [{"count": 1, "device": "A100-80G", "devices_per_node": 8}]}]}
    sim = orrery.simulate("gpt3-125m", spec, "dp=8,mbs=1,gbs=64")
    assert sim.step_time_s == pytest.approx(orrery.simulate(small, "8xA100-80G", "dp=8,mbs=1,gbs=64").step_time_s)
    # A wrong type is a TypeError naming the argument.
    for call, argument in [(lambda: orrery.plan(42, "8xA100-80G"), "model"),
                           (lambda: orrery.plan(small, 8), "cluster"),
                           (lambda: orrery.simulate(small, "8xA100-80G", 3.5), "strategy"),
                           (lambda: orrery.simulate(small, "8xA100-80G", plan="p.json"), "plan"),
                           (lambda: orrery.plan(small, "8xA100-80G", "64"), "global_batch"),
                           (lambda: orrery.load(None), "source"),
                           (lambda: orrery.load("gpt3-125m", dims=[("seq", 4)]), "dims"),
                           (lambda: orrery.Cluster(8), "spec"),
                           (lambda: orrery.Plan.load(7), "path")]:
        with pytest.raises(TypeError, match=f"^{argument}: expected"):
            call()


def test_a_plan_that_cannot_fit_says_so():
    m = orrery.load("gpt3-175b")
    with pytest.raises(orrery.Error) as e:
        orrery.plan(m, orrery.Cluster.preset("1xA100-40G"), 8)
    assert "fit" in str(e.value)
    if CLI:
        assert str(e.value) == cli_error("plan", "gpt3-175b", "--cluster", "1xA100-40G", "--global-batch", "8")


def test_models_plan_in_parallel_threads():
    models = [orrery.load("gpt3-350m"), orrery.load("gpt3-760m")]
    cluster = orrery.Cluster.preset("8xA100-80G")
    alone = [orrery.plan(m, cluster, 64).to_json() for m in models]
    together = [None, None]

    def run(i):
        together[i] = orrery.plan(models[i], cluster, 64).to_json()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone


# from_torch: real architectures with random weights, nothing downloaded.

def _count(module):
    return sum(p.numel() for p in module.parameters())


def test_from_torch_resnet50():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    tv = pytest.importorskip("torchvision", reason="torchvision is not installed")
    net = tv.models.resnet50()
    m = orrery.from_torch(net, torch.randn(1, 3, 224, 224), dynamic_shapes={"images": {0: "batch"}})
    assert abs(m.parameters - _count(net)) <= 1e-3 * _count(net)
    assert net.training  # given back in the mode it was in
    p = orrery.plan(m, orrery.Cluster.preset("8xA100-80G"), 256)
    assert p.step_time_s > 0


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_from_torch_hugging_face(arch):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    if arch == "gpt2":
        config = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=512, vocab_size=1000)
    else:
        config = transformers.LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                          num_attention_heads=8, num_key_value_heads=4, vocab_size=1000,
                                          max_position_embeddings=512)
    net = transformers.AutoModelForCausalLM.from_config(config)
    net.eval()
    ids = torch.randint(0, 1000, (1, 128))
    m = orrery.from_torch(net, (ids,), dynamic_shapes={"input_ids": {0: "batch", 1: "seq"}}, dims={"seq": 128})
    assert abs(m.parameters - _count(net)) <= 1e-3 * _count(net)
    assert [l["count"] for l in m.layers if l["kind"] == "transformer_layer"] == [4]
    assert not net.training
    p = orrery.plan(m, orrery.Cluster.preset("8xA100-80G"), 64)
    assert p.step_time_s > 0


def test_the_gil_is_released_while_planning():
    # While one thread searches, another keeps running Python: the longest
    # pause the other thread sees is a small part of the search (with the
    # GIL held it would be the whole search).
    import time
    model = orrery.load("gpt3-175b")
    cluster = orrery.Cluster.preset("128x8xA100-80G")
    span = {}

    def search():
        span["start"] = time.perf_counter()
        orrery.plan(model, cluster, 1536)
        span["end"] = time.perf_counter()

    t = threading.Thread(target=search)
    last, longest = time.perf_counter(), 0.0
    t.start()  # with the GIL held, this waits for the whole search
    while t.is_alive():
        now = time.perf_counter()
        longest = max(longest, now - last)
        last = now
    longest = max(longest, time.perf_counter() - last)  # a wait that outlived the search
    t.join()
    assert longest < 0.5 * (span["end"] - span["start"]), (longest, span)


def test_a_saved_plan_loads_with_its_model_and_cluster(gpt13, tmp_path):
    p = orrery.plan(gpt13, orrery.Cluster.preset("8xA100-80G"), 64)
    path = tmp_path / "plan.json"
    p.save(path)
    q = orrery.Plan.load(path)
    assert q.to_json() == p.to_json()
    assert q.export("megatron") == p.export("megatron")
    assert orrery.simulate(q._model, q._cluster, plan=q).step_time_s == pytest.approx(p.step_time_s, rel=1e-9)
    q.report(tmp_path / "q.html")
    if CLI:
        assert "valid" in cli("check", str(path)).stdout
    # A plan for another model is refused when it is checked.
    other = orrery.Plan.load(path, model=orrery.load("gpt3-350m"))
    with pytest.raises(orrery.Error, match="digest"):
        other.report(tmp_path / "other.html")
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "orrery-plan"}')
    with pytest.raises(orrery.Error, match="cluster.spec: missing"):
        orrery.Plan.load(broken)
