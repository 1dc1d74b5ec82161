"""Per-operation compute model: one transformer layer's kernels on one GPU, each timed from its size.

A layer is the list of kernels one GPU runs for one micro-batch (``layer_ops``): the GEMMs of the
attention projections and the MLP (or the router and the local experts' GEMMs), the attention core
(two batched matrix products with softmax and dropout between them, or one FlashAttention kernel), the
layer norms, activation function, dropouts and residual adds. Each kernel is a (FLOPs, bytes moved)
pair; its time is FLOPs at the engine's rate (tensor cores for matrix products, the vector units for
the rest) times an efficiency read off a curve by the kernel's size, plus its bytes at the HBM rate
times an efficiency by size: the two are added, not overlapped, the mode in which Calculon's published
system files (Isaev et al., SC'23) are written and which those files' curves were measured for.

Backward: a GEMM runs twice more (the input gradient and the weight gradient, each its own kernel with
its own size); a batched product without weights twice its forward FLOPs; an element-wise kernel twice
its FLOPs, reading what it read plus the output gradient and writing the input gradient. FlashAttention's
backward runs 2.5x its forward FLOPs (it recomputes the scores; Dao, FlashAttention-2) and, the mask
being causal, both passes skip the masked half of the score blocks.

The curves belong to the GPU (catalog ``gpus``: ``vector_tflops`` and the three ``*_efficiency_curve``
lists); a GPU without them is timed by the flat model in ``training.step_time`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import Gpu

FLASH_BACKWARD = 2.5     # FlashAttention-2: backward FLOPs / forward FLOPs (scores recomputed)
CAUSAL_SHARE = 0.5       # the share of score blocks a causal FlashAttention kernel computes
MASK_BYTES = 1           # one byte per element of a dropout mask


@dataclass(frozen=True)
class Op:
    """One kernel: ``flops`` on the ``engine`` ("matrix" or "vector"), ``bytes`` read and written."""

    name: str
    engine: str
    flops: float
    bytes: float
    weights: float = 0.0       # bytes of weights among ``bytes`` (a GEMM's backward reads and writes them)
    low_precision: bool = False  # a GEMM that runs in the compute dtype (FP8); everything else runs in BF16
    repeat: int = 1            # identical kernels in a row (one per local expert)


@dataclass(frozen=True)
class LayerTime:
    """Seconds one layer takes on one GPU for one micro-batch."""

    forward_s: float
    backward_s: float
    recompute_s: float

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s + self.recompute_s


def curve_share(curve: tuple, size: float) -> float:
    """The efficiency of the first (threshold, share) pair whose threshold ``size`` reaches."""
    for threshold, share in curve:
        if size >= threshold:
            return share
    return curve[-1][1]


def has_curves(gpu: Gpu) -> bool:
    return bool(gpu.vector_tflops and gpu.matrix_efficiency_curve and gpu.vector_efficiency_curve
                and gpu.memory_efficiency_curve)


def op_seconds(op: Op, gpu: Gpu, dtype: str) -> float:
    if op.engine == "matrix":
        peak = gpu.peak_tflops(dtype) if op.low_precision else gpu.bf16_tflops
        curve = gpu.matrix_efficiency_curve
    else:
        peak, curve = gpu.vector_tflops, gpu.vector_efficiency_curve
    flops_s = op.flops / (peak * 1e12 * curve_share(curve, op.flops / 1e9)) if op.flops else 0.0
    bytes_s = op.bytes / (gpu.hbm_tbps * 1e12 * curve_share(gpu.memory_efficiency_curve, op.bytes / 1e6))
    return (flops_s + bytes_s) * op.repeat


def backward_ops(op: Op) -> list[Op]:
    """The kernels of ``op``'s backward pass (module docstring)."""
    if op.name == "flash-attention":
        return [Op(op.name + "-backward", "matrix", FLASH_BACKWARD * op.flops, 2 * op.bytes)]
    if op.engine == "matrix" and op.weights:
        activations = op.bytes - op.weights
        return [Op(op.name + "-input-grad", "matrix", op.flops, activations + op.weights, op.weights,
                   op.low_precision, op.repeat),
                Op(op.name + "-weight-grad", "matrix", op.flops, activations + op.weights, op.weights,
                   op.low_precision, op.repeat)]
    if op.engine == "matrix":
        return [Op(op.name + "-backward", "matrix", 2 * op.flops, 2 * op.bytes, repeat=op.repeat)]
    return [Op(op.name + "-backward", "vector", 2 * op.flops, 1.5 * op.bytes, repeat=op.repeat)]


def gemm(name: str, rows: float, inner: float, cols: float, element: int, low_precision: bool = True,
         repeat: int = 1) -> Op:
    """``rows x inner`` activations times an ``inner x cols`` weight."""
    weights = inner * cols * element
    return Op(name, "matrix", 2 * rows * inner * cols, (rows * inner + rows * cols) * element + weights, weights,
              low_precision, repeat)


def elementwise(name: str, elements: float, flops_each: float, element: int, extra_bytes: float = 0.0,
                repeat: int = 1) -> Op:
    return Op(name, "vector", flops_each * elements, 2 * elements * element + extra_bytes, repeat=repeat)


def layer_ops(arch, degrees: dict, micro_batch: int, sequence_parallel: bool, flash_attention: bool,
              moe: bool, element: int = 2) -> list[Op]:
    """The forward kernels of one layer (dense or MoE) on one GPU for one micro-batch: tokens b x s / cp,
    heads and FFN columns split by TP, the element-wise work outside the GEMMs split by TP too when
    sequence parallelism is on."""
    from .training import attention_width, counts, head_dim

    tp, cp, ep = degrees["tp"], degrees["cp"], degrees["ep"]
    h, c = arch.hidden, counts(arch)
    tokens = micro_batch * arch.seq_len / cp
    seq_tokens = tokens / (tp if sequence_parallel else 1)   # rows the norms, dropouts and adds see
    q_width = attention_width(arch) / tp
    kv_width = (arch.kv_heads or arch.heads) * head_dim(arch) / tp
    heads = arch.heads / tp
    keys = arch.seq_len   # with context parallelism each query still meets the whole sequence's keys
    out_proj = h * attention_width(arch)
    in_width = (c.attention - out_proj) / h / tp   # columns of the fused Q, K, V (or MLA's down/up) projection
    ops = [elementwise("input-norm", seq_tokens * h, 9, element),
           gemm("qkv", tokens, h, in_width, element)]
    if flash_attention:
        flops = 4 * tokens * keys * q_width * CAUSAL_SHARE
        ops.append(Op("flash-attention", "matrix", flops, (2 * tokens * q_width + 2 * keys * kv_width) * element))
    else:
        scores = micro_batch * heads * (arch.seq_len / cp) * keys
        ops += [Op("scores", "matrix", 2 * tokens * keys * q_width,
                   (tokens * q_width + keys * kv_width) * element + scores * element),
                elementwise("softmax", scores, 5, element),
                elementwise("attention-dropout", scores, 1, element, scores * MASK_BYTES),
                Op("context", "matrix", 2 * tokens * keys * q_width,
                   scores * element + (keys * kv_width + tokens * q_width) * element)]
    ops += [gemm("attention-out", tokens, q_width, h, element),
            elementwise("attention-dropout-add", seq_tokens * h, 2, element, seq_tokens * h * (element + MASK_BYTES)),
            elementwise("mlp-norm", seq_tokens * h, 9, element)]
    matrices = 3 if arch.gated_ffn else 2
    up = matrices - 1
    if moe:
        routed = tokens * arch.top_k * arch.capacity_factor   # token-expert pairs this GPU computes
        local_experts = arch.experts // ep   # the layout check makes ep divide the experts
        per_expert = routed / local_experts
        ffn = arch.expert_ffn / tp
        ops += [gemm("router", tokens, h, arch.experts, element, low_precision=False),
                gemm("expert-up", per_expert, h, up * ffn, element, repeat=local_experts),
                elementwise("expert-activation", per_expert * ffn, 8, element, repeat=local_experts),
                gemm("expert-down", per_expert, ffn, h, element, repeat=local_experts)]
        if arch.shared_experts:
            shared = arch.shared_experts * ffn
            ops += [gemm("shared-up", tokens, h, up * shared, element),
                    elementwise("shared-activation", tokens * shared, 8, element),
                    gemm("shared-down", tokens, shared, h, element)]
    else:
        ffn = arch.ffn / tp
        ops += [gemm("mlp-up", tokens, h, up * ffn, element),
                elementwise("mlp-activation", tokens * ffn, 8, element),
                gemm("mlp-down", tokens, ffn, h, element)]
    ops.append(elementwise("mlp-dropout-add", seq_tokens * h, 2, element, seq_tokens * h * (element + MASK_BYTES)))
    return ops


ATTENTION_CORE = ("scores", "softmax", "attention-dropout", "context")


def layer_time(ops: list[Op], gpu: Gpu, dtype: str, recompute: str) -> LayerTime:
    """Forward, backward and recompute seconds of one layer's kernels. Selective recompute repeats the
    attention core (nothing when FlashAttention already recomputes its scores), full the whole forward."""
    forward = sum(op_seconds(op, gpu, dtype) for op in ops)
    backward = sum(op_seconds(b, gpu, dtype) for op in ops for b in backward_ops(op))
    if recompute == "full":
        again = forward
    elif recompute == "selective":
        again = sum(op_seconds(op, gpu, dtype) for op in ops if op.name in ATTENTION_CORE)
    else:
        again = 0.0
    return LayerTime(forward, backward, again)


def logits_seconds(arch, degrees: dict, micro_batch: int, gpu: Gpu, dtype: str, element: int = 2) -> float:
    """The output projection to the vocabulary (forward and backward) on the last stage."""
    tokens = micro_batch * arch.seq_len / degrees["cp"]
    op = gemm("logits", tokens, arch.hidden, arch.vocab / degrees["tp"], element, low_precision=False)
    return op_seconds(op, gpu, dtype) + sum(op_seconds(b, gpu, dtype) for b in backward_ops(op))
