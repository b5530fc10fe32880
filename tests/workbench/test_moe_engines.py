"""Mixture-of-experts engines and architectures the database does not list: profiles from the
measured database's MoE rows, the expert parallelism a framework runs by default, stand-ins of the
same shape, and refusals that name the config field that decides them."""

import json

import pytest
from typer.testing import CliRunner

from workbench.calibrate.database.aiconfigurator import system_spec
from workbench.calibrate.database.config_support import priced_as
from workbench.calibrate.database.profile import derive_profile
from workbench.cli import app
from workbench.compare.moe_sd import moe_contrast
from workbench.contracts.architecture import PRESET_DIR, load_architecture
from workbench.contracts.policy import DrafterKind
from workbench.contracts.profile import load_profile
from workbench.contracts.schema import ConfigError
from workbench.contracts.strategy import Strategy
from workbench.plan.fit import memory_fit

runner = CliRunner()
BASE = load_profile("h100-qwen2.5-7b-tp1")


@pytest.fixture(scope="module")
def qwen3_moe():
    return derive_profile("qwen3-30b-a3b", "h100", 4, "sglang", BASE, "q3")


def test_moe_shapes_are_read_from_the_config():
    q = load_architecture("qwen3-30b-a3b")
    assert (q.experts.count, q.experts.per_token, q.experts.intermediate) == (128, 8, 768)
    assert q.params / 1e9 == pytest.approx(30.5, abs=0.2)
    assert q.active_params / 1e9 == pytest.approx(3.3, abs=0.15)
    ds = load_architecture("deepseek-v3")
    assert ds.experts.moe_layers == 58 and ds.experts.shared_intermediate == 2048
    assert ds.params / 1e9 == pytest.approx(671, rel=0.01) and ds.quant == "fp8"
    assert ds.kv_bytes_per_token() == 61 * (512 + 64) * 2  # MLA's latent vector, every layer
    assert load_architecture("qwen2.5-7b").experts is None


def test_a_moe_profile_is_built_at_the_frameworks_default_expert_parallelism(qwen3_moe):
    p = qwen3_moe.profile
    e = p.decode.experts
    assert (e.count, e.per_token) == (128, 8) and e.weights_s > 0
    assert p.cluster.ep == 1 and p.cluster.tp == 4
    assert "SGLang --ep-size 1" in p.source and "uniform routing" in p.source
    assert "one dense Llama layer" in p.source  # the EAGLE head is priced as what it is
    assert qwen3_moe.median_abs_error_pct < 10.0


def test_expert_parallelism_is_overridden_and_a_bad_degree_is_refused_naming_ep():
    p = derive_profile("qwen3-30b-a3b", "h100", 4, "sglang", BASE, "q3-ep4", ep=4).profile
    assert p.cluster.ep == 4 and "EP4" in p.cluster.label
    with pytest.raises(ConfigError) as exc:
        derive_profile("qwen3-30b-a3b", "h100", 4, "sglang", BASE, "bad", ep=3)
    assert "--ep" in str(exc.value) and "divides --tp 4" in str(exc.value)


def test_sd_on_a_moe_engine_pays_less_at_batch_1_than_on_a_dense_one_of_its_active_size(
        qwen3_moe):
    m = moe_contrast(qwen3_moe.profile, DrafterKind.EAGLE, Strategy.chain(3), 3.0, 2048.0,
                     (1, 8, 64, 256))
    first, last = m.rows[0], m.rows[-1]
    assert first.decode_experts == pytest.approx(8) and first.verify_experts > 25
    assert first.speedup < first.dense_speedup
    assert last.expert_read_ratio == pytest.approx(1.0, abs=0.01)
    assert "dense engine of the same active size" in m.sentence()


def test_the_issues_sd_curve_on_qwen3_30b_a3b_runs_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    d = tmp_path / "qwen3-30b-a3b"
    d.mkdir()
    data = json.loads((PRESET_DIR / "qwen3-30b-a3b.json").read_text())
    (d / "config.json").write_text(json.dumps({k: v for k, v in data.items() if k[0] != "_"}))
    res = runner.invoke(app, ["sd-curve", "--arch", str(d / "config.json"), "--gpu", "h100",
                              "--tp", "4", "--framework", "sglang", "--batches", "1,16,128"])
    assert res.exit_code == 0, res.output
    assert "experts read: decode (of 128)" in res.output
    assert "Why this curve differs from a dense engine" in res.output


def test_a_dense_decoder_the_database_does_not_list_is_priced_as_a_stand_in():
    p = derive_profile("gemma-2-2b", "h100", 1, "vllm", BASE, "g2").profile
    assert "The database lists no Gemma2ForCausalLM: priced as LlamaForCausalLM" in p.source
    for ignored in ("sliding-window attention (4096 tokens on every other layer",
                    "soft-capping", "extra RMSNorms"):
        assert ignored in p.source
    phi = priced_as(json.loads((PRESET_DIR / "phi-3-mini-4k.json").read_text()), "phi")
    assert phi.stand_in == "LlamaForCausalLM" and "sliding-window" in phi.ignored[0]


def test_a_head_size_the_database_never_measured_keeps_the_widths():
    p = derive_profile("phi-3-mini-4k", "h100", 1, "vllm", BASE, "phi").profile
    assert "head size 96" in p.source and "24 heads and 24 KV heads of 128" in p.source


def _config(tmp_path, name, data):
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    return str(path)


# Field values as the public configs state them: google-t5/t5-small (T5ForConditionalGeneration,
# is_encoder_decoder) and state-spaces/mamba-2.8b-hf (MambaForCausalLM, state_size).
T5 = {"architectures": ["T5ForConditionalGeneration"], "is_encoder_decoder": True, "d_model": 512,
      "num_layers": 6, "num_heads": 8, "vocab_size": 32128}
MAMBA = {"architectures": ["MambaForCausalLM"], "hidden_size": 2560, "num_hidden_layers": 64,
         "state_size": 16, "vocab_size": 50280}


@pytest.mark.parametrize("data,field", [(T5, "is_encoder_decoder"), (MAMBA, "state_size")])
def test_a_model_no_decoder_stands_in_for_is_refused_naming_the_config_field(tmp_path, data,
                                                                              field):
    path = _config(tmp_path, field, data)
    res = runner.invoke(app, ["profile", "--arch", path, "--gpu", "h100", "--tp", "1",
                              "--out", str(tmp_path / "p.yaml")])
    assert res.exit_code == 2
    assert f"field '{field}'" in res.output and "--tp" not in res.output
    assert not (tmp_path / "p.yaml").exists()


def test_a_moe_shape_the_database_never_measured_is_refused_naming_the_expert_fields(tmp_path):
    # allenai/OLMoE-1B-7B's shape: 64 experts of 1024, top-8, hidden 2048 (not in the database)
    olmoe = {"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "hidden_size": 2048,
             "intermediate_size": 1024, "num_hidden_layers": 16, "num_attention_heads": 16,
             "num_key_value_heads": 16, "num_experts": 64, "num_experts_per_tok": 8,
             "vocab_size": 50304, "max_position_embeddings": 4096}
    with pytest.raises(ConfigError) as exc:
        derive_profile(_config(tmp_path, "olmoe", olmoe), "h100", 1, "vllm", BASE, "o")
    msg = str(exc.value)
    assert "field 'num_experts'" in msg and "moe_intermediate_size" in msg and "--tp" not in msg


@pytest.mark.parametrize("change, field", [
    ({"architectures": {"": 1}}, None),  # not a list: no family, the shape still reads
    ({"architectures": True}, None),
    ({"text_config": 3}, None),
    ({"num_experts": "many", "num_experts_per_tok": 8}, "num_experts"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "mlp_only_layers": 5}, "mlp_only_layers"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 99},
     "first_k_dense_replace"),
    ({"kv_lora_rank": 512, "qk_nope_head_dim": "x"}, "qk_nope_head_dim"),
    ({"quantization_config": "fp8"}, None),
])
def test_a_config_of_odd_values_reads_or_is_refused_naming_the_field(tmp_path, change, field):
    data = json.loads((PRESET_DIR / "qwen2.5-7b.json").read_text())
    path = tmp_path / "odd" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**data, **change}))
    if field is None:
        assert load_architecture(path).params > 0
        return
    with pytest.raises(ConfigError) as e:
        load_architecture(path)
    assert field in str(e.value) and "config.json" in str(e.value)


def test_a_tp_that_does_not_split_the_heads_names_the_config_field():
    with pytest.raises(ConfigError) as exc:
        derive_profile("qwen3-30b-a3b", "h100", 3, "vllm", BASE, "x")
    assert "num_attention_heads" in str(exc.value)


def test_memory_counts_every_expert_in_the_checkpoints_format():
    ds = load_architecture("deepseek-v3")
    assert memory_fit(ds, system_spec("h100"), 8, 8192).reason.startswith("the fp8 weights need")
    assert memory_fit(ds, system_spec("h200"), 8, 8192).reason == ""
    assert memory_fit(load_architecture("qwen3-235b-a22b"), system_spec("h100"), 4, 8192).reason


def test_the_moe_workload_preset_runs_on_its_profile(tmp_path):
    res = runner.invoke(app, ["sim", "--workload", "verl-dapo-qwen3-30b-a3b", "--policy",
                              "baseline,tlt", "--steps", "1", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "why each speedup" in res.output


def test_the_silicon_check_selects_only_single_node_decode_dominated_runs():
    from workbench.calibrate.database.silicon_check import MAX_CONCURRENCY, selected_rows

    rows = selected_rows(("h100",))
    assert len(rows) > 10 and set(rows.model_path) == {"openai/gpt-oss-120b"}
    assert (rows.osl >= rows.isl).all() and (rows.tp_size <= 8).all()
    assert (rows.batch_size <= MAX_CONCURRENCY).all()


def test_the_shipped_moe_profile_is_what_the_database_gives():
    from workbench.calibrate.database.catalog import PRESET_CASES, preset_profile
    from workbench.contracts.schema import differences

    case = next(c for c in PRESET_CASES if c.model == "qwen3-30b-a3b")
    again, shipped = preset_profile(case), load_profile(case.name)
    assert not differences(again.decode, shipped.decode, 0.01)
    assert again.cluster == shipped.cluster


def test_gpt_oss_decode_steps_on_h100_are_within_15_percent_of_nvidias_measured_runs(
        tmp_path, monkeypatch):
    from workbench.calibrate.database.catalog import disk_cached_profile
    from workbench.calibrate.database.silicon_check import median_abs_error, silicon_check

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rows = silicon_check(lambda a, g, tp, fw, ep: disk_cached_profile(
        a, g, tp, fw, "h100-qwen2.5-7b-tp1", ep), ("h100",))
    assert len(rows) >= 20 and median_abs_error(rows) < 15.0


def test_heads_the_engine_has_no_rows_for_are_refused_naming_the_config_field():
    # Gemma-2-9B's 8 KV heads of 256: SGLang's rows hold them, vLLM's do not
    with pytest.raises(ConfigError) as exc:
        derive_profile("gemma-2-9b", "h100", 1, "vllm", BASE, "g9")
    msg = str(exc.value)
    assert "field 'num_key_value_heads'" in msg and "--framework" in msg
    assert "tp" not in msg.split("allowed:")[0]
