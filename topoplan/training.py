"""Training-step model: from a model architecture and its parallel layout to step time, exposed
communication, MFU, tokens/s and cost per token (``docs/training.md``).

The stage takes a ``Design`` whose ``workload`` names a model, derives the step's collectives from the
architecture (``step_traffic``), has the flow solver and the NCCL model time them on the fabric with the
job's placement (``time_traffic``), and adds compute, pipeline bubble and the exposed part of each
collective class under the spec's overlap policies (``step_time``). Without overlap a step is the plain
sum: per micro-batch compute and TP/CP/EP collectives, times the micro-batches plus the bubble slots,
then the PP hops, the DP gradient reduction and the optimizer update.

FLOPs follow Korthikanti et al. (MLSys'23): model FLOPs per token = 6 x the matmul parameters a token
meets + 12 x layers x sequence x attention width; selective recompute adds the attention term once more,
full recompute one forward pass of the layers. Compute runs at the GPU's dense peak times a measured
matmul share (catalog ``gpus``), never a figure fitted to a training run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .catalog import Catalog, Gpu, ModelArch
from .compute import has_curves, layer_ops, layer_time, logits_seconds

RECOMPUTE = ("none", "selective", "full")
COMPUTE_MODELS = ("auto", "per-op", "flat")
SCHEDULES = ("1f1b", "interleaved", "dualpipe")
DTYPES = ("bf16", "fp8")
COMM_CLASSES = ("tp", "cp", "ep", "pp", "dp")
ADAM_STATE_BYTES = 12        # fp32 master weights + Adam's two moments, per parameter (ZeRO paper's K = 12)
ADAM_UPDATE_BYTES = 30       # HBM traffic of one mixed-precision Adam update per local parameter [D]:
#                              read master, m, v (12) and the gradient (4), write master, m, v (12), bf16 weight (2)
DUALPIPE_SM_SHARE = 20 / 132  # DeepSeek-V3 gives 20 of the H800's 132 SMs to communication


# --- the architecture ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Counts:
    """Parameter counts of an architecture (matmul weights; norms and biases are left out)."""

    attention: int        # per layer
    dense_ffn: int        # per dense layer
    expert: int           # per expert
    router: int           # per MoE layer
    embedding: int        # input and output embeddings (one matrix when tied)
    dense_layers: int
    moe_layers: int
    total: int
    active: int           # the matmul weights one token meets (the output projection counted, the lookup not)


def head_dim(arch: ModelArch) -> int:
    return arch.head_dim or arch.hidden // arch.heads


def attention_width(arch: ModelArch) -> int:
    return arch.attention_dim or arch.heads * head_dim(arch)


def counts(arch: ModelArch) -> Counts:
    hd, kv = head_dim(arch), arch.kv_heads or arch.heads
    attention = arch.attention_params or (2 * arch.hidden * arch.heads * hd + 2 * arch.hidden * kv * hd)
    matrices = 3 if arch.gated_ffn else 2
    dense_ffn = matrices * arch.hidden * arch.ffn
    expert = matrices * arch.hidden * arch.expert_ffn
    moe_layers = arch.layers - arch.dense_layers if arch.experts else 0
    dense_layers = arch.layers - moe_layers
    router = arch.hidden * arch.experts
    embedding = arch.vocab * arch.hidden * (1 if arch.tied_embeddings else 2)
    per_moe_layer = (arch.experts + arch.shared_experts) * expert + router
    total = arch.layers * attention + dense_layers * dense_ffn + moe_layers * per_moe_layer + embedding
    active = (arch.layers * attention + dense_layers * dense_ffn
              + moe_layers * ((arch.top_k + arch.shared_experts) * expert + router) + arch.vocab * arch.hidden)
    return Counts(attention, dense_ffn, expert, router, embedding, dense_layers, moe_layers, total, active)


def model_problems(arch: ModelArch) -> list[tuple[str, str, str]]:
    """(field, message, hint) for an architecture that does not hold together."""
    out = []
    if not arch.head_dim and arch.hidden % arch.heads:
        out.append(("heads", f"hidden {arch.hidden:,} is not a whole number of {arch.heads} heads",
                    "set head_dim, or a head count that divides hidden"))
    if arch.kv_heads and arch.heads % arch.kv_heads:
        out.append(("kv_heads", f"{arch.kv_heads} KV heads do not divide {arch.heads} query heads",
                    "grouped-query attention shares each KV head among a whole number of query heads"))
    if arch.experts:
        if not arch.top_k or arch.top_k > arch.experts:
            out.append(("top_k", f"top_k must be 1..{arch.experts} for {arch.experts} experts", "e.g. top_k: 2"))
        if not arch.expert_ffn:
            out.append(("expert_ffn", "an MoE model needs each expert's feed-forward width", "e.g. expert_ffn: 2048"))
        if arch.dense_layers >= arch.layers:
            out.append(("dense_layers", f"{arch.dense_layers} dense layers leave none of the {arch.layers} for experts",
                        "lower dense_layers"))
    elif arch.top_k or arch.shared_experts:
        out.append(("experts", "top_k and shared_experts need routed experts", "set experts, or remove them"))
    return out


def model_flops_per_token(arch: ModelArch, seq_len: int | None = None) -> float:
    """Korthikanti's model FLOPs (forward and backward, no recompute) per token."""
    s = seq_len or arch.seq_len
    return 6.0 * counts(arch).active + 12.0 * arch.layers * s * attention_width(arch)


def hardware_flops_per_token(arch: ModelArch, recompute: str, seq_len: int | None = None) -> float:
    """Model FLOPs plus what recompute runs again: selective the attention term once more (Korthikanti's
    ``1 + s/3h`` form), full one forward pass of the layers (Narayanan's 96-form)."""
    s = seq_len or arch.seq_len
    attention = 12.0 * arch.layers * s * attention_width(arch)
    model = model_flops_per_token(arch, s)
    if recompute == "selective":
        return model + attention
    if recompute == "full":
        c = counts(arch)
        layer_matmuls = c.active - arch.vocab * arch.hidden
        return model + 2.0 * layer_matmuls + attention / 3.0
    return model


def attention_flops_per_token(arch: ModelArch, recompute: str, seq_len: int | None = None) -> float:
    """The attention-score share of the hardware FLOPs (the part that does not scale with parameters)."""
    s = seq_len or arch.seq_len
    attention = 12.0 * arch.layers * s * attention_width(arch)
    return attention * {"none": 1.0, "selective": 2.0, "full": 4 / 3}[recompute]


def megatron_model_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """The closed form of Korthikanti et al.: 72 B s l h^2 (1 + s/6h + V/12hl), for GPT (FFN 4h)."""
    return 72.0 * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (12 * hidden * layers))


# --- the job --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Economics:
    """What a GPU-hour of the cluster costs: capital over its life, and power (defaults are assumptions,
    stated in docs/training.md)."""

    life_years: float = 4.0
    usd_per_kwh: float = 0.10
    pue: float = 1.3


@dataclass(frozen=True)
class Policy:
    name: str
    params: tuple = ()   # (key, value) pairs

    def get(self, key: str, default):
        return dict(self.params).get(key, default)


@dataclass(frozen=True)
class Training:
    """The spec's ``workload.model`` and ``workload.training`` sections, normalised."""

    model: ModelArch
    global_batch: int                    # sequences per step
    micro_batch: int = 1
    sequence_parallel: bool = True
    recompute: str = "selective"
    schedule: str = "1f1b"
    virtual_stages: int = 1
    zero: int = 1
    compute_dtype: str = "bf16"
    activation_bytes: int = 2
    gradient_bytes: int = 4              # Megatron keeps and reduces fp32 main gradients
    parameter_bytes: int = 2
    compute_efficiency: float | None = None   # None: the GPU's measured matmul share
    compute_model: str = "auto"          # per-op, flat, or auto: per-op where the GPU has the curves
    flash_attention: bool = True
    overlap: tuple = ()                  # Policy, in the spec's order
    tokens: float | None = None          # to train, for the time to train
    economics: Economics = Economics()

    def policy(self, name: str) -> Policy | None:
        for p in self.overlap:
            if p.name == name:
                return p
        return None


def microbatches(training: Training, dp: int) -> int:
    return training.global_batch // (dp * training.micro_batch)


def layout_problems(training: Training, degrees: dict) -> list[tuple[str, str, str]]:
    """(key under workload.training or .parallelism, message, hint) for a layout that cannot run."""
    arch, out = training.model, []
    tp, cp, dp, pp, ep = (degrees[d] for d in ("tp", "cp", "dp", "pp", "ep"))
    per_step = dp * training.micro_batch
    if training.global_batch % per_step:
        out.append(("training.global_batch", f"{training.global_batch:,} sequences do not split into dp={dp} x "
                    f"micro_batch={training.micro_batch}", f"use a multiple of {per_step:,}"))
    if arch.heads % tp:
        out.append(("parallelism.tp", f"tp={tp} does not divide the model's {arch.heads} heads",
                    "tensor parallelism splits heads; pick a divisor"))
    if arch.seq_len % cp:
        out.append(("parallelism.cp", f"cp={cp} does not divide the sequence of {arch.seq_len:,} tokens",
                    "context parallelism splits the sequence"))
    if ep > 1 and not arch.experts:
        out.append(("parallelism.ep", f"ep={ep} but {arch.id} has no experts", "set ep: 1 for a dense model"))
    elif arch.experts and arch.experts % ep:
        out.append(("parallelism.ep", f"ep={ep} does not divide {arch.experts} experts", "pick a divisor"))
    if pp * training.virtual_stages > arch.layers:
        out.append(("parallelism.pp", f"pp={pp} x {training.virtual_stages} virtual stages is more than the "
                    f"{arch.layers} layers", "fewer stages"))
    if training.virtual_stages > 1 and training.schedule != "interleaved":
        out.append(("training.virtual_stages", "virtual stages need schedule: interleaved",
                    "set schedule: interleaved, or virtual_stages: 1"))
    if training.schedule == "dualpipe" and pp % 2:
        out.append(("training.schedule", f"DualPipe runs an even number of stages, not pp={pp}", "use an even pp"))
    return out


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU on the fullest stage (the first: input embedding, most micro-batches in flight).
    Activations use Korthikanti et al.'s GPT constants (4h MLP, multi-head attention, dropout) for every
    model: GQA, SwiGLU and MoE layers are only approximated."""

    parameters: float
    gradients: float
    optimizer: float
    activations: float
    hbm: float

    @property
    def total(self) -> float:
        return self.parameters + self.gradients + self.optimizer + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.hbm

    def describe(self) -> str:
        return (f"{self.total / 1e9:,.1f} GB per GPU (parameters {self.parameters / 1e9:,.1f}, gradients "
                f"{self.gradients / 1e9:,.1f}, optimizer {self.optimizer / 1e9:,.1f}, activations "
                f"{self.activations / 1e9:,.1f}) of {self.hbm / 1e9:,.0f} GB")


def stage_layers(training: Training, pp: int) -> int:
    """Layers on the fullest stage (a layer count that does not split evenly puts the extra on some)."""
    chunks = pp * training.virtual_stages
    return math.ceil(training.model.layers / chunks) * training.virtual_stages


def local_parameters(training: Training, degrees: dict) -> tuple[float, float]:
    """(dense, expert) parameters one GPU of the fullest stage holds before any ZeRO sharding."""
    arch, c = training.model, counts(training.model)
    tp, pp, ep = degrees["tp"], degrees["pp"], degrees["ep"]
    layers = stage_layers(training, pp)
    moe_share = c.moe_layers / arch.layers
    dense_per_layer = c.attention + (1 - moe_share) * c.dense_ffn + moe_share * (
        arch.shared_experts * c.expert + c.router)
    dense = (layers * dense_per_layer + arch.vocab * arch.hidden) / tp
    expert = layers * moe_share * arch.experts * c.expert / (ep * tp)
    return dense, expert


def activation_bytes_per_layer(training: Training, degrees: dict) -> float:
    """Korthikanti et al.'s activation memory of one layer and one micro-batch (16-bit activations):
    s b h (34 + 5 a s / h) without parallelism, split by TP as the paper's Table 2 gives."""
    arch = training.model
    tp, cp = degrees["tp"], degrees["cp"]
    s, b, h, a = arch.seq_len / cp, training.micro_batch, arch.hidden, arch.heads
    sbh = s * b * h * training.activation_bytes / 2
    attention = 5 * a * s / h
    if training.recompute == "full":
        return 2 * sbh / (tp if training.sequence_parallel else 1)
    if training.sequence_parallel:
        return sbh * (34 + (0 if training.recompute == "selective" else attention)) / tp
    return sbh * (10 + 24 / tp + (0 if training.recompute == "selective" else attention / tp))


def memory(training: Training, degrees: dict, gpu: Gpu) -> Memory:
    dp, pp, ep, v = degrees["dp"], degrees["pp"], degrees["ep"], training.virtual_stages
    dense, expert = local_parameters(training, degrees)
    expert_dp = max(1, dp // ep)
    zero = training.zero

    def sharded(stage: int, bytes_each: float) -> float:
        return bytes_each * (dense / (dp if zero >= stage else 1) + expert / (expert_dp if zero >= stage else 1))

    m = microbatches(training, dp)
    in_flight = min(m, pp) if pp > 1 else 1
    interleave = 1 + (pp - 1) / (pp * v) if v > 1 else 1.0
    if training.schedule == "dualpipe":
        in_flight, interleave = pp + 1, 1.0
    layers = stage_layers(training, pp)
    activations = activation_bytes_per_layer(training, degrees) * layers * in_flight * interleave
    params = sharded(3, training.parameter_bytes) * (2 if training.schedule == "dualpipe" else 1)
    return Memory(params, sharded(2, training.gradient_bytes), sharded(1, ADAM_STATE_BYTES), activations,
                  gpu.hbm_gb * 1e9)


# --- the step's collectives ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Traffic:
    """One collective of the step: ``count`` runs of ``size_bytes`` (nccl-tests convention) per micro-batch
    (``per`` = "microbatch", on one stage) or per step."""

    cls: str            # tp, cp, ep, pp, dp
    op: str
    group: str
    size_bytes: float
    count: float
    per: str
    part: str = ""      # dp: "reduce" or "gather" (what an overlap policy may hide)


def step_traffic(training: Training, degrees: dict) -> list[Traffic]:
    arch = training.model
    tp, cp, dp, pp, ep = (degrees[d] for d in ("tp", "cp", "dp", "pp", "ep"))
    v = training.virtual_stages
    b, s, h = training.micro_batch, arch.seq_len / cp, arch.hidden
    act = training.activation_bytes
    layers = stage_layers(training, pp)
    c = counts(arch)
    moe_layers = layers * c.moe_layers / arch.layers
    out = []
    if tp > 1:
        size = b * s * h * act
        runs = 4 + (2 if training.recompute == "full" else 0)   # two per layer each way, recompute repeats forward
        if training.sequence_parallel:
            # Megatron saves only the sequence-sharded input of the two column-parallel GEMMs and gathers it
            # again in the backward pass for their weight gradients (megatron/core/tensor_parallel/layers.py,
            # on a side stream beside the input-gradient GEMM: exposed here unless a policy hides TP, as
            # Calculon's seq_par_ag_redo counts it); a recomputed forward has just gathered it
            regather = 0 if training.recompute == "full" else 2
            out += [Traffic("tp", "allgather", "tp", size, (runs + regather) * layers, "microbatch"),
                    Traffic("tp", "reducescatter", "tp", size, runs * layers, "microbatch")]
        else:
            out.append(Traffic("tp", "allreduce", "tp", size, runs * layers, "microbatch"))
    if cp > 1:   # Llama 3: K and V all-gathered in the forward pass, their gradients reduce-scattered back
        kv = (arch.kv_heads or arch.heads) * head_dim(arch)
        size = 2 * b * arch.seq_len * kv * act / tp
        out += [Traffic("cp", "allgather", "cp", size, layers, "microbatch"),
                Traffic("cp", "reducescatter", "cp", size, layers, "microbatch")]
    if ep > 1 and moe_layers:
        tokens = b * s / (tp if training.sequence_parallel else 1)
        size = tokens * arch.top_k * h * act * arch.capacity_factor
        out.append(Traffic("ep", "alltoall", "ep", size, 4 * moe_layers, "microbatch"))  # dispatch, combine, x2
    if pp > 1:
        size = b * s * h * act / (tp if training.sequence_parallel else 1)
        out.append(Traffic("pp", "sendrecv", "pp", size, 2 * v * microbatches(training, dp), "step"))
    if dp > 1:
        dense, expert = local_parameters(training, degrees)
        params = dense + expert   # expert gradients reduced over the dp group too (an approximation)
        grads, weights = params * training.gradient_bytes, params * training.parameter_bytes
        if training.zero == 0:
            out.append(Traffic("dp", "allreduce", "dp", grads, 1, "step", "reduce"))
        else:
            out += [Traffic("dp", "reducescatter", "dp", grads, 1, "step", "reduce"),
                    Traffic("dp", "allgather", "dp", weights, 2 if training.zero == 3 else 1, "step", "gather")]
    return out


def wire_bytes(t: Traffic, group_size: int) -> float:
    """Bytes each rank sends for one run (ring forms): what ZeRO's and DiLoCo's volume rules count."""
    n = group_size
    share = {"allreduce": 2 * (n - 1) / n, "reducescatter": (n - 1) / n, "allgather": (n - 1) / n,
             "alltoall": (n - 1) / n, "sendrecv": 1.0}[t.op]
    return t.size_bytes * share


# --- overlap policies -----------------------------------------------------------------------------------

@dataclass
class Raw:
    """Un-overlapped times: per micro-batch on one stage (compute and the TP/CP/EP collectives) and per step."""

    compute_mb: float
    comm_mb: dict          # tp, cp, ep -> seconds per micro-batch
    pp_s: float
    dp_reduce_s: float
    dp_gather_s: float
    optimizer_s: float
    microbatches: int
    bubble_slots: float    # micro-batch slots the pipeline idles: (p - 1) / v for 1F1B
    gradient_elements: float
    peak_flops: float      # per GPU, at the compute dtype and efficiency


@dataclass(frozen=True)
class OverlapPolicy:
    name: str
    source: str
    apply: object          # (raw, exposed dict, params) -> None, updates ``exposed`` in place
    adds_compute: bool = False   # it costs compute, so it can lose to none


def _dp_backward(raw, e, p):
    """Megatron's --overlap-grad-reduce / --overlap-param-gather: buckets reduce under the last micro-batch's
    backward (2/3 of its compute), the parameter gather under the next step's first forward (1/3)."""
    e["dp_reduce"] = max(0.0, e["dp_reduce"] - 2 / 3 * raw.compute_mb)
    e["dp_gather"] = max(0.0, e["dp_gather"] - 1 / 3 * raw.compute_mb)


def _zero3_prefetch(raw, e, p):
    """ZeRO-3 / FSDP prefetch: each layer's gather runs under the previous layer's compute, all step long."""
    e["dp_gather"] = max(0.0, e["dp_gather"] - raw.compute_mb * raw.microbatches)


def _coexec(raw, e, p):
    """Micro-batch co-execution: one micro-batch's TP/CP/EP collectives run under another's compute."""
    for cls in ("tp", "cp", "ep"):
        e[cls] = max(0.0, e[cls] - raw.compute_mb)


def _tp_slicing(raw, e, p):
    """Domino: the batch is sliced so one slice's TP collective runs under the other's GEMMs; at most
    ``fraction`` of the layer's compute can hide it."""
    e["tp"] = max(0.0, e["tp"] - float(p.get("fraction", 0.5)) * raw.compute_mb)


def _dualpipe(raw, e, p):
    """DualPipe: the EP all-to-alls of one micro-batch run under the paired micro-batch's compute, on SMs
    taken from compute (20 of 132 on H800)."""
    e["compute_mb"] = raw.compute_mb / (1 - DUALPIPE_SM_SHARE)
    e["ep"] = max(0.0, e["ep"] - e["compute_mb"])


def _local_updates(raw, e, p):
    """DiLoCo: workers synchronise every ``every`` steps (H); the DP traffic per step is divided by H."""
    h = int(p.get("every", 500))
    e["dp_reduce"] /= h
    e["dp_gather"] /= h


def _co2(raw, e, p):
    """CO2: the outer all-reduce every ``every`` steps (tau) runs asynchronously under the next tau steps."""
    tau = int(p.get("every", 4))
    rest = (raw.compute_mb + sum(raw.comm_mb.values())) * (raw.microbatches + raw.bubble_slots)
    for key in ("dp_reduce", "dp_gather"):
        e[key] = max(0.0, e[key] - tau * rest) / tau


def _compression(raw, e, p):
    """Gradient compression: the reduce moves ``1 / ratio`` of the bytes; encoding and decoding cost
    ``flops_per_element`` per gradient element (PowerSGD rank r: ratio ~ h / 2r, about 6 r FLOPs)."""
    ratio = float(p.get("ratio", 4.0))
    e["dp_reduce"] /= ratio
    e["compression_s"] = float(p.get("flops_per_element", 0.0)) * raw.gradient_elements / raw.peak_flops


POLICIES = {policy.name: policy for policy in (
    OverlapPolicy("dp-overlap", "Megatron-LM --overlap-grad-reduce/--overlap-param-gather; MegaScale (NSDI'24)",
                  _dp_backward),
    OverlapPolicy("zero3-prefetch", "ZeRO (Rajbhandari et al., SC'20) / PyTorch FSDP prefetch", _zero3_prefetch),
    OverlapPolicy("microbatch-coexec", "micro-batch co-execution (Wang et al.)", _coexec),
    OverlapPolicy("tp-slicing", "Domino (Wang et al., arXiv 2409.15241)", _tp_slicing),
    OverlapPolicy("ep-dualpipe", "DualPipe (deepseek-ai/DualPipe; DeepSeek-V3 report)", _dualpipe,
                  adds_compute=True),
    OverlapPolicy("local-updates", "DiLoCo (Douillard et al., arXiv 2311.08105)", _local_updates),
    OverlapPolicy("co2", "CO2 (Sun et al., ICLR'24, arXiv 2401.16265)", _co2),
    OverlapPolicy("compression", "PowerSGD (arXiv 1905.13727), 1-bit Adam (arXiv 2102.02888)", _compression,
                  adds_compute=True),
)}
POLICY_PARAMS = {"tp-slicing": ("fraction",), "local-updates": ("every",), "co2": ("every",),
                 "compression": ("ratio", "flops_per_element")}


# --- the step -------------------------------------------------------------------------------------------

@dataclass
class Step:
    """One training step on the fabric."""

    step_s: float
    compute_s: float
    bubble_s: float
    exposed_s: dict               # tp, cp, ep, pp, dp -> seconds on the critical path
    unoverlapped_s: dict          # the same classes before any overlap policy
    optimizer_s: float
    other_s: float                # compute a policy adds (compression's encode and decode)
    model_flops: float            # per step
    hardware_flops: float
    tokens: float                 # per step
    mfu: float
    hfu: float
    gpus: int
    memory: Memory
    microbatches: int
    collectives: list = field(default_factory=list)   # (Traffic, time of one run, algorithm/protocol)
    compute_model: str = "flat"   # how compute_s was timed: per-op or flat

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_s

    @property
    def exposed_total_s(self) -> float:
        return sum(self.exposed_s.values())


def bubble_slots(schedule: str, pp: int, virtual_stages: int) -> float:
    """Idle micro-batch slots of the pipeline: (p - 1) / v for 1F1B (v = 1) and interleaved 1F1B; DualPipe
    (p/2 - 1), its bidirectional fill counted in whole forward-and-backward slots (an approximation of its
    README's (p/2 - 1)(F&B + B - 3W))."""
    if pp <= 1:
        return 0.0
    if schedule == "dualpipe":
        return pp / 2 - 1
    return (pp - 1) / virtual_stages


def compute_model_of(training: Training, gpu: Gpu) -> str:
    """The compute model a step is timed with: a spec's ``compute_efficiency`` means the flat model."""
    if training.compute_model == "flat" or training.compute_efficiency is not None:
        return "flat"
    if training.compute_model == "per-op" or has_curves(gpu):
        return "per-op"
    return "flat"


def per_op_compute_mb(training: Training, degrees: dict, gpu: Gpu) -> float:
    """Seconds of compute per micro-batch on the fullest stage, kernel by kernel (``topoplan.compute``):
    its layers, MoE and dense in the model's proportion, plus the output projection of the last stage."""
    arch = training.model
    layers = stage_layers(training, degrees["pp"])
    moe_share = counts(arch).moe_layers / arch.layers

    def one(moe: bool) -> float:
        ops = layer_ops(arch, degrees, training.micro_batch, training.sequence_parallel, training.flash_attention,
                        moe, training.activation_bytes)
        return layer_time(ops, gpu, training.compute_dtype, training.recompute).total_s

    per_layer = (1 - moe_share) * one(False) + (moe_share * one(True) if moe_share else 0.0)
    return layers * per_layer + logits_seconds(arch, degrees, training.micro_batch, gpu, training.compute_dtype,
                                               training.activation_bytes)


def step_time(training: Training, degrees: dict, gpu: Gpu, times: dict, gpus: int) -> Step:
    """Assemble a step from the collectives' times (``times``: Traffic -> seconds per run, for what
    ``step_traffic`` returned; a class left out counts as free)."""
    arch = training.model
    dp, pp = degrees["dp"], degrees["pp"]
    m = microbatches(training, dp)
    tokens = training.global_batch * arch.seq_len
    efficiency = training.compute_efficiency or gpu.efficiency(training.compute_dtype)
    peak = gpu.peak_tflops(training.compute_dtype) * 1e12 * efficiency
    hardware = hardware_flops_per_token(arch, training.recompute) * tokens
    if arch.experts and arch.capacity_factor > 1:   # padded expert slots are computed too
        c = counts(arch)
        hardware += 6.0 * c.moe_layers * arch.top_k * c.expert * (arch.capacity_factor - 1) * tokens
    # the attention-score products (FlashAttention) run in BF16 whatever the GEMMs' type
    attention = attention_flops_per_token(arch, training.recompute) * tokens
    bf16_rate = gpu.bf16_tflops * 1e12 * (training.compute_efficiency or gpu.efficiency("bf16"))
    balanced = ((hardware - attention) / peak + attention / bf16_rate) / gpus
    imbalance = stage_layers(training, pp) / (arch.layers / pp)   # the fullest stage sets the pace
    compute_model = compute_model_of(training, gpu)
    if compute_model == "per-op":
        compute_mb = per_op_compute_mb(training, degrees, gpu)
    else:
        compute_mb = balanced * imbalance / m
    comm_mb = {cls: 0.0 for cls in ("tp", "cp", "ep")}
    pp_s = dp_reduce = dp_gather = 0.0
    for traffic, seconds in times.items():
        total = seconds * traffic.count
        if traffic.per == "microbatch":
            comm_mb[traffic.cls] += total
        elif traffic.cls == "pp":
            pp_s += total
        elif traffic.part == "gather":
            dp_gather += total
        else:
            dp_reduce += total
    dense, expert = local_parameters(training, degrees)
    shard = dp if training.zero >= 1 else 1
    optimizer = (dense + expert) / shard * ADAM_UPDATE_BYTES / (gpu.hbm_tbps * 1e12)
    raw = Raw(compute_mb, comm_mb, pp_s, dp_reduce, dp_gather, optimizer, m,
              bubble_slots(training.schedule, pp, training.virtual_stages), dense + expert, peak)
    exposed = {"compute_mb": compute_mb, **comm_mb, "pp": pp_s, "dp_reduce": dp_reduce, "dp_gather": dp_gather,
               "compression_s": 0.0}
    for policy in training.overlap:
        POLICIES[policy.name].apply(raw, exposed, policy)
    per_mb = exposed["compute_mb"] + exposed["tp"] + exposed["cp"] + exposed["ep"]
    bubble = raw.bubble_slots * per_mb
    exposed_s = {"tp": m * exposed["tp"], "cp": m * exposed["cp"], "ep": m * exposed["ep"], "pp": exposed["pp"],
                 "dp": exposed["dp_reduce"] + exposed["dp_gather"]}
    unoverlapped = {"tp": m * comm_mb["tp"], "cp": m * comm_mb["cp"], "ep": m * comm_mb["ep"], "pp": pp_s,
                    "dp": dp_reduce + dp_gather}
    compute = m * exposed["compute_mb"]
    step = compute + bubble + sum(exposed_s.values()) + optimizer + exposed["compression_s"]
    model_flops = model_flops_per_token(arch) * tokens
    bf16_peak = gpus * gpu.bf16_tflops * 1e12
    return Step(step, compute, bubble, exposed_s, unoverlapped, optimizer, exposed["compression_s"], model_flops,
                hardware, tokens, model_flops / step / bf16_peak, hardware / step / bf16_peak, gpus,
                memory(training, degrees, gpu), m, compute_model=compute_model)


# --- timing on the fabric -------------------------------------------------------------------------------

NOMINAL_BYTES = 1 << 26   # the size each distinct collective is routed at; loads scale to every other size


def time_traffic(topology, design, catalog: Catalog, traffic: list[Traffic], latency_scale: float = 1.0,
                 progress=None) -> dict:
    """Traffic -> (seconds per run, "algorithm/protocol"): each distinct (op, group) routed once on the
    fabric by the spec's engine under the NCCL model, every size then read off without new routing."""
    from .flow.algorithms import applicable, plan_collective
    from .flow.metrics import evaluate_collective, timing_for
    from .spec import Collective

    timing = timing_for(design, catalog, latency_scale, topology)
    routing = design.routing
    results, out = {}, {}
    for t in traffic:
        key = (t.op, t.group)
        if key not in results:
            collective = Collective(f"{t.cls}-{t.op}", t.op, t.group, NOMINAL_BYTES, "auto")
            probe = replace(design, workload=replace(design.workload, collectives=(collective,)))
            plans = [plan_collective(topology, probe, collective, a) for a in applicable(topology, probe, collective)]
            results[key] = evaluate_collective(topology, plans, timing, routing.engine, routing.seeds, routing.qps,
                                               routed_one=None if progress is None else progress)
        choice, protocol, seconds = results[key].at(t.size_bytes)
        out[t] = (float("inf") if seconds is None else seconds, f"{choice.algorithm.name}/{protocol}")
    return out


def gpu_of(catalog: Catalog, server) -> Gpu | None:
    return catalog.gpus.get(server.gpu.lower())


def evaluate_step(topology, design, catalog: Catalog, latency_scale: float = 1.0, progress=None) -> Step:
    training = design.workload.training
    degrees = design.workload.parallelism
    gpu = gpu_of(catalog, catalog.servers[design.cluster.server])
    traffic = step_traffic(training, degrees)
    timed = time_traffic(topology, design, catalog, traffic, latency_scale, progress)
    step = step_time(training, degrees, gpu, {t: seconds for t, (seconds, _) in timed.items()}, design.gpus)
    step.collectives = [(t, seconds, label) for t, (seconds, label) in timed.items()]
    return step


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    capital_usd: float
    power_w: float


def capital_usd(design, catalog: Catalog, bom) -> float:
    """What the cluster costs to buy: its servers and its network's bill of materials."""
    return catalog.servers[design.cluster.server].price_usd * design.cluster.servers + bom.total_usd


def cluster_price(design, catalog: Catalog, bom, economics: Economics) -> Price:
    """The cluster's cost per hour: servers and network amortised over their life, plus power at the PUE."""
    server = catalog.servers[design.cluster.server]
    return price_of(capital_usd(design, catalog, bom), server.power_w * design.cluster.servers + bom.power_w,
                    economics)


def price_of(capital: float, power_w: float, economics: Economics) -> Price:
    hours = economics.life_years * 365.25 * 24
    return Price(capital / hours + power_w / 1000 * economics.pue * economics.usd_per_kwh, capital, power_w)
