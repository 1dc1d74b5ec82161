"""The per-operation compute model against its oracles: Calculon (another engine, run on the same layers),
the closed-form FLOPs of a GPT layer, and the rules the model states (curves, FlashAttention, MoE)."""

import pytest

from topoplan import compute as C
from topoplan import training as T
from topoplan.catalog import ModelArch, load_catalog

CATALOG = load_catalog()
A100 = CATALOG.gpus["a100-sxm4-80gb"]
TP8 = {"tp": 8, "cp": 1, "ep": 1, "dp": 1, "pp": 1}

# Calculon (calculon-ai/calculon at caa4b11) run here with systems/a100_80g.json on the configurations of
# its own Korthikanti Table 5 validation (validation/seqsel/tab5/*_seqsel.json: TP 8, sequence parallelism,
# attention-only recompute): per block and micro-batch, forward, backward (activation + weight gradients)
# and recompute seconds, as `block_fw_time`, `block_agrad_time + block_wgrad_time`, `block_re_time`
CALCULON = [  # hidden, ffn, heads, layers, micro-batch, forward, backward, recompute
    ("megatron-22b", 6144, 24576, 64, 48, 4, 0.0051407, 0.0092848, 0.0010097),
    ("gpt3-175b", 12288, 49152, 96, 96, 1, 0.0043405, 0.0082652, 0.0004147),
    ("turing-530b", 20480, 81920, 128, 105, 1, 0.0106123, 0.0208095, 0.0005400),
    ("megatron-1t", 25600, 102400, 160, 128, 1, 0.0161843, 0.0318611, 0.0006750),
]


def gpt(name, hidden, ffn, heads, layers, seq=2048, vocab=51200):
    return ModelArch(name, "", layers, hidden, ffn, heads, vocab, seq, "test")


@pytest.mark.parametrize("name,hidden,ffn,heads,layers,micro,forward,backward,recompute", CALCULON)
def test_layer_time_agrees_with_calculon(name, hidden, ffn, heads, layers, micro, forward, backward, recompute):
    ops = C.layer_ops(gpt(name, hidden, ffn, heads, layers), TP8, micro, True, False, False)
    t = C.layer_time(ops, A100, "bf16", "selective")
    # the two models list the same kernels but count element-wise FLOPs and bytes by their own rules
    assert t.forward_s == pytest.approx(forward, rel=0.05)
    assert t.backward_s == pytest.approx(backward, rel=0.05)
    assert t.total_s == pytest.approx(forward + backward + recompute, rel=0.03)
    # the recomputed attention core: the two count its bytes differently, within a factor of 3
    assert recompute < t.recompute_s < 3 * recompute


@pytest.mark.parametrize("tp,micro", [(1, 1), (8, 1), (4, 2)])
def test_matrix_flops_are_korthikanti_closed_form(tp, micro):
    arch = gpt("g", 12288, 49152, 96, 96)
    s, h = arch.seq_len, arch.hidden
    ops = C.layer_ops(arch, {**TP8, "tp": tp}, micro, True, False, False)
    matrix = sum(op.flops * op.repeat for op in ops if op.engine == "matrix")
    assert matrix == pytest.approx((24 * micro * s * h * h + 4 * micro * s * s * h) / tp, rel=1e-12)
    backward = sum(b.flops * b.repeat for op in ops if op.engine == "matrix" for b in C.backward_ops(op))
    assert backward == pytest.approx(2 * matrix, rel=1e-12)


def test_curve_share_reads_the_first_threshold_reached():
    curve = ((128.0, 0.95), (16.0, 0.9), (1.0, 0.6), (0.0, 0.1))
    assert [C.curve_share(curve, x) for x in (1e6, 128, 127.9, 16, 1, 0.5, 0)] == [0.95, 0.95, 0.9, 0.9, 0.6,
                                                                                    0.1, 0.1]


def test_op_time_is_flops_time_plus_bytes_time():
    op = C.Op("x", "matrix", 200e9, 50e6)
    flops_s = 200e9 / (A100.bf16_tflops * 1e12 * 0.95)
    bytes_s = 50e6 / (A100.hbm_tbps * 1e12 * 0.75)   # 50 MB: the [10 MB, 0.75] point
    assert C.op_seconds(op, A100, "bf16") == pytest.approx(flops_s + bytes_s, rel=1e-12)
    assert C.op_seconds(C.Op("x", "matrix", 200e9, 50e6, repeat=4), A100, "bf16") == pytest.approx(
        4 * (flops_s + bytes_s), rel=1e-12)


def test_flash_attention_moves_fewer_bytes_and_runs_faster():
    arch = gpt("g", 8192, 28672, 64, 80, seq=8192)
    plain = C.layer_ops(arch, TP8, 1, True, False, False)
    flash = C.layer_ops(arch, TP8, 1, True, True, False)
    assert sum(op.bytes for op in flash) < sum(op.bytes for op in plain)
    assert C.layer_time(flash, A100, "bf16", "selective").total_s < C.layer_time(plain, A100, "bf16",
                                                                                 "selective").total_s
    # FlashAttention already recomputes the scores: selective recompute adds nothing
    assert C.layer_time(flash, A100, "bf16", "selective").recompute_s == 0


def test_moe_expert_flops_follow_the_routing():
    arch = CATALOG.models["deepseek-v3"]
    degrees = {"tp": 1, "cp": 1, "ep": 64, "dp": 128, "pp": 16}
    ops = C.layer_ops(arch, degrees, 1, False, True, True)
    experts = sum(op.flops * op.repeat for op in ops if op.name in ("expert-up", "expert-down"))
    matrices = 3 if arch.gated_ffn else 2
    tokens = arch.seq_len * arch.top_k * arch.capacity_factor
    assert experts == pytest.approx(2 * tokens * arch.hidden * arch.expert_ffn * matrices, rel=1e-12)
    assert {op.repeat for op in ops if op.name.startswith("expert-")} == {arch.experts // 64}


def test_step_uses_per_op_where_the_gpu_has_curves_and_flat_otherwise():
    from dataclasses import replace

    arch = CATALOG.models["gpt3-175b"]
    training = T.Training(arch, 64, sequence_parallel=True, virtual_stages=1, zero=1)
    degrees = {"tp": 8, "cp": 1, "dp": 1, "pp": 8, "ep": 1}
    per_op = T.step_time(training, degrees, A100, {}, 64)
    assert per_op.compute_model == "per-op"
    assert per_op.compute_s == pytest.approx(T.microbatches(training, 1) * T.per_op_compute_mb(training, degrees,
                                                                                                 A100))
    flat = T.step_time(replace(training, compute_model="flat"), degrees, A100, {}, 64)
    bare = replace(A100, vector_tflops=0.0, matrix_efficiency_curve=())
    assert flat.compute_model == T.step_time(training, degrees, bare, {}, 64).compute_model == "flat"
    assert T.step_time(replace(training, compute_efficiency=0.5), degrees, A100, {}, 64).compute_model == "flat"
    # kernels below the best GEMM's rate and their memory traffic make per-op slower than the flat ceiling
    assert per_op.compute_s > flat.compute_s
