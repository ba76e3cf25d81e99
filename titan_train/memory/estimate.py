"""Per-rank device memory of one training step, from the config alone (the analytic estimate).

Pure functions, no torch: the trainer's preflight calls this before any rank starts and the
doctor (`titan-doctor diagnose --config`) renders it. Every formula below names the code it
models. Counts are exact where the code is deterministic (parameter shards, optimizer
state, the tensors autograd saves per block); the moment of the peak is modelled as the
larger of its phases (the end of forward while the loss is computed, the start of the loss's
backward, each block's backward, the optimizer step), which is where the estimate's error comes from
(benchmarks/memory_accuracy.py measures it against torch's memory tracker).

Tensor sizes use these names (per rank, per micro-batch):
  b sequences, s tokens each, T = b*s; d model width, q = n_heads*head_dim (= d),
  kv = n_kv_heads*head_dim, f = SwiGLU width, V vocab, h heads; t = tp degree;
  e = bytes of the compute dtype, r = bytes of the residual stream (4 under autocast / fp32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from titan_train.config.job import JobConfig, pipeline_microbatches, pipeline_stages
from titan_train.config.model_args import ModelArgs
from titan_train.config.parallel_dims import ParallelDims, stage_layers
from titan_train.config.precision import BYTES

GiB = 2**30

# How far the analytic estimate may be from the measured peak. benchmarks/memory_accuracy.py
# measures it: at most 7.8% over its 20 stage rows on CPU (the bound is 20%). On
# an NPU, build() runs torch_npu's fused ops (titan_train/models/kernels.py), which save what their
# own backward needs rather than what the reference ops below save, so the margin keeps the
# issue's bound. The preflight refuses only beyond it; the doctor calls the band "tight".
ERROR_MARGIN = 0.20
# Caching-allocator rounding and fragmentation plus kernel workspaces, on accelerators.
# Seed OOM reports show "reserved by PyTorch" 1% to 16% above "allocated" (rules/
# log_signatures.toml oom.npu / oom.cuda sources); 10% is the middle of that range.
ALLOCATOR_MARGIN = 0.10


@dataclass(frozen=True)
class Layout:
    """What the estimate needs to know about the job, resolved from config + world size."""

    model: ModelArgs
    dims: ParallelDims
    micro_batch: int  # sequences per forward on one rank (one pipeline micro-batch with pp)
    seq_len: int
    grad_accum: int
    precision: str  # fp32 | bf16 | fp16
    fsdp: bool  # FSDP2 actually applied (ParallelDims.uses_fsdp)
    cpu_offload: bool
    ac: str  # none | full | selective
    ac_every: int
    pp_schedule: str
    pp_microbatches: int
    backend: str  # hccl | nccl | gloo: which communication buffers exist
    stages: int = 1  # pipeline stages (titan_train.config.job.pipeline_stages)
    loss_chunks: int = 1  # the output projection + loss in this many sequence pieces (loss.chunked_cross_entropy)
    ac_option: str = "all_mm"  # what selective AC keeps: all_mm | op (training.selective_ac_option)
    hccl_buffsize_mb: int = 200


def layout(cfg: JobConfig, world_size: int, backend: str, hccl_buffsize_mb: int | None = None) -> Layout:
    """The Layout of `cfg` on `world_size` ranks (the config must already be valid)."""
    d, t = cfg.distributed, cfg.training
    dims = ParallelDims.of(d, world_size)
    local_batch = t.batch_size // (dims.dp * t.grad_accum_steps)
    microbatches = pipeline_microbatches(d) if dims.pp > 1 else 1
    return Layout(
        model=cfg.model,
        dims=dims,
        micro_batch=max(local_batch // microbatches, 1),
        seq_len=t.seq_len,
        grad_accum=t.grad_accum_steps,
        precision=t.mixed_precision,
        fsdp=dims.uses_fsdp(d.fsdp, d.cpu_offload),
        cpu_offload=d.cpu_offload,
        ac=t.activation_checkpoint,
        ac_every=t.ac_every,
        ac_option=t.selective_ac_option,
        loss_chunks=t.loss_chunks,
        pp_schedule=d.pp_schedule,
        pp_microbatches=microbatches,
        backend=backend,
        stages=pipeline_stages(d) if dims.pp > 1 else 1,
        hccl_buffsize_mb=hccl_buffsize_mb or default_hccl_buffsize_mb(),
    )


def hccl_buffsize_mb(env) -> int | None:
    """HCCL_BUFFSIZE (MB) as the environment sets it; None when unset or not a positive number."""
    raw = env.get("HCCL_BUFFSIZE", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def default_hccl_buffsize_mb() -> int:
    """HCCL_BUFFSIZE's default from rules/hccl_env.toml (200 MB, HCCL documentation)."""
    from titan_knowledge import load

    for entry in load("hccl_env").get("range", []):
        if entry["name"] == "HCCL_BUFFSIZE":
            return int(entry["default"])
    return 200


# ---- parameters -------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    name: str
    shape: tuple[int, ...]
    tp_dim: int | None  # the dim tensor parallel splits (None: replicated on tp ranks)


def block_params(m: ModelArgs, layer: int) -> list[Param]:
    """One TransformerBlock's parameters and their TP plan (titan_train.distributed.parallelize.apply_tp:
    wq/wk/wv/w1/w3 column-wise = Shard(0) of the (out, in) weight, wo/w2 row-wise = Shard(1),
    norms replicated)."""
    d, q, kv, f = m.d_model, m.n_heads * m.head_dim, m.kv_heads * m.head_dim, m.ffn_dim
    p = f"layers.{layer}."
    return [
        Param(p + "attention_norm.weight", (d,), None),
        Param(p + "attention.wq.weight", (q, d), 0),
        Param(p + "attention.wk.weight", (kv, d), 0),
        Param(p + "attention.wv.weight", (kv, d), 0),
        Param(p + "attention.wo.weight", (d, q), 1),
        Param(p + "ffn_norm.weight", (d,), None),
        Param(p + "feed_forward.w1.weight", (f, d), 0),
        Param(p + "feed_forward.w2.weight", (d, f), 1),
        Param(p + "feed_forward.w3.weight", (f, d), 0),
    ]


def root_params(m: ModelArgs, first: bool, last: bool) -> list[Param]:
    """Embedding (row-wise: Shard(0) of the vocab rows), final norm, output (column-wise)."""
    out = [Param("tok_embeddings.weight", (m.vocab_size, m.d_model), 0)] if first else []
    if last:
        out += [Param("norm.weight", (m.d_model,), None), Param("output.weight", (m.vocab_size, m.d_model), 0)]
    return out


def tp_local(p: Param, tp: int) -> tuple[int, ...]:
    """The shape a tensor-parallel rank holds (DTensor gives rank 0 the ceil)."""
    if p.tp_dim is None or tp == 1:
        return p.shape
    shape = list(p.shape)
    shape[p.tp_dim] = -(-shape[p.tp_dim] // tp)
    return tuple(shape)


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def sharded_numel(p: Param, lay: Layout) -> int:
    """Elements one rank stores for `p`: FSDP2 splits dim 0 of the TP-local tensor into
    dp_shard chunks (all dp ranks, or under HSDP one replica's) and pads every chunk to the
    largest (torch fsdp _fsdp_param.py: padded_sharded_param_data), so each rank stores
    ceil(dim0 / dp_shard) rows; HSDP's replicas each hold the same shards."""
    shape = tp_local(p, lay.dims.tp)
    if not lay.fsdp:
        return numel(shape)
    return -(-shape[0] // lay.dims.dp_shard) * numel(shape[1:])


# ---- activations: what autograd saves ---------------------------------------------------


def _dtypes(lay: Layout) -> tuple[int, int]:
    """(e, r): compute bytes, residual-stream bytes. FSDP's MixedPrecisionPolicy casts the
    parameters, so activations and the residual are in param_dtype; autocast (no FSDP)
    keeps the embedding and residual stream in fp32 and runs matmuls in half precision."""
    e = BYTES[lay.precision]
    return e, (e if lay.fsdp else 4)


def _autocast(lay: Layout) -> bool:
    return lay.precision != "fp32" and not lay.fsdp


def rmsnorm_saved(tokens: int, lay: Layout) -> int:
    """titan_train.models.kernels.rms_norm (the reference op): x.float() kept by pow and mul (4d; the input itself when it
    is fp32), rsqrt (4), normed.type_as(x) kept by `* weight` (r*d; aliases the fp32
    product when r = 4)."""
    d = lay.model.d_model
    _, r = _dtypes(lay)
    return tokens * (4 * d + 4 + r * d)


def block_saved(lay: Layout, b: int) -> int:
    """Bytes autograd keeps from one TransformerBlock's forward until its backward (no AC).

    Counted op by op from titan_train/models/llama.py and the reference ops it calls through
    titan_train/models/kernels.py (what build() picks off an NPU), and checked exactly against the
    live model with saved_tensors_hooks (tests/train/test_memory_estimate.py::test_block_*):
      2 RMSNorms on the sequence-parallel residual (T/t tokens, see rmsnorm_saved);
      linear inputs: the (gathered) norm output shared by wq/wk/wv and by w1/w3 (2*T*d*e);
        under autocast each linear keeps its own half-precision cast (5*T*d*2);
      RoPE keeps nothing (cos/sin are buffers); SDPA keeps q, k, v (k and v repeated to all
        heads when n_kv_heads < n_heads), its output (= wo's input) and logsumexp (b*h*s*4);
      SwiGLU keeps w1 out, silu out, w3 out and their product (4*T*f*e);
      autocast's half casts of the matmul weights are kept too (weights x 2 B);
      FSDP mixed precision casts the block's rope input (2 * max_seq_len * head_dim/2 * e).
    """
    m, t = lay.model, lay.dims.tp
    e, _ = _dtypes(lay)
    T, s = b * lay.seq_len, lay.seq_len
    q, kv, f, h = m.n_heads * m.head_dim, m.kv_heads * m.head_dim, m.ffn_dim, m.n_heads
    kv_sdpa = q if m.n_heads > m.kv_heads else kv
    out = 2 * rmsnorm_saved(T // t, lay)
    out += 5 * T * m.d_model * 2 if _autocast(lay) else 2 * T * m.d_model * e
    out += (2 * T * q + 2 * T * kv_sdpa) // t * e + b * (h // t) * s * 4
    out += 4 * T * (f // t) * e
    if _autocast(lay):  # the matmul weights' half casts (norm weights are not autocast ops)
        out += sum(numel(tp_local(p, t)) for p in block_params(m, 0) if len(p.shape) == 2) * 2
    elif lay.fsdp and e < 4:
        out += m.max_seq_len * m.head_dim * e
    return out


def block_saved_ac(lay: Layout, b: int, mode: str) -> int:
    """Bytes one block keeps under activation checkpointing (titan_train/distributed/activation_checkpoint.py).

    full: only the block's inputs, the residual x (T/t*d*r) and, under FSDP mixed precision,
      its cast rope table.
    selective (all_mm): the inputs plus the outputs of the ops it must save: every matmul
      (wq, wk, wv, w1, w3 on T/t... columns; wo and w2 produce T*d before the TP
      reduce-scatter, whose T/t*d output is saved too) and attention (output + logsumexp).
    selective (op): the same but for every second matmul in call order, recomputed: of
      wq wk wv wo w1 w3 w2 it keeps wq, wv, w1 and w2.
    """
    m, t = lay.model, lay.dims.tp
    e, r = _dtypes(lay)
    T, d = b * lay.seq_len, m.d_model
    inputs = T // t * d * r + (m.max_seq_len * m.head_dim * e if lay.fsdp and e < 4 else 0)
    if mode == "full":
        return inputs
    q, kv, f = m.n_heads * m.head_dim, m.kv_heads * m.head_dim, m.ffn_dim
    if lay.ac_option == "op":
        mm = T * (q + kv + f) // t * e + T * d * e
    else:
        mm = T * (q + 2 * kv + 2 * f) // t * e + 2 * T * d * e
    reduce_scatter = 2 * T // t * d * e if t > 1 else 0
    attention = T * q // t * e + b * (m.n_heads // t) * lay.seq_len * 4
    return inputs + mm + reduce_scatter + attention


def head_saved(lay: Layout, b: int, first: bool, last: bool) -> int:
    """Saved outside the blocks: the embedding keeps its token ids (T*8); the final norm;
    the output projection its input (T*d*e, gathered over tp; a half cast under autocast,
    plus the cast weight); cross-entropy keeps log_softmax's fp32 output (T*V*4, sharded
    over the vocabulary under tp: loss parallel) and the targets (T*8)
    (titan_train.components.loss.cross_entropy). With loss_chunks > 1 each piece is
    checkpointed: only the final norm's output (T/t*d*e, sequence-sharded) and the targets
    stay (loss.chunked_cross_entropy)."""
    m, t = lay.model, lay.dims.tp
    e, _ = _dtypes(lay)
    T = b * lay.seq_len
    out = T * 8 if first else 0
    if last and lay.loss_chunks > 1:
        out += rmsnorm_saved(T // t, lay) + T // t * m.d_model * e + T * 8 + 4 * lay.loss_chunks
    elif last:
        out += rmsnorm_saved(T // t, lay) + T * m.d_model * e + T * (m.vocab_size // t) * 4 + T * 8 + 4
        if _autocast(lay):
            out += numel(tp_local(root_params(m, False, True)[1], t)) * 2
    return out


def logits_bytes(lay: Layout, b: int) -> int:
    """The logits held through backward: none in the eager step (it drops them once the
    loss is computed, step.eager_forward_backward); under pp the schedule's forward cache
    keeps each in-flight micro-batch's (b, s, V/tp) in the compute dtype (fp32 under fp32)."""
    e, _ = _dtypes(lay)
    return b * lay.seq_len * (lay.model.vocab_size // lay.dims.tp) * e if lay.dims.pp > 1 else 0


# ---- the estimate -----------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    name: str
    bytes: int
    detail: str  # how it was computed, in words a user can check


@dataclass
class StageEstimate:
    stage: int  # pipeline rank (0 without pp)
    layers: int
    phase: str  # when the peak happens
    terms: list[Term]  # the breakdown at the peak; sums to `tensor_bytes`
    tensor_bytes: int
    comm_bytes: int
    margin_bytes: int
    host_bytes: int  # host memory for offloaded state (cpu_offload)

    @property
    def peak_bytes(self) -> int:
        return self.tensor_bytes + self.comm_bytes + self.margin_bytes


@dataclass
class Estimate:
    layout: Layout
    stages: list[StageEstimate]
    weights_bytes: int  # the whole model's weights in the compute dtype (fp32: 4 B)
    params: int  # parameter count
    notes: list[str] = field(default_factory=list)

    @property
    def worst(self) -> StageEstimate:
        return max(self.stages, key=lambda s: s.peak_bytes)

    @property
    def peak_bytes(self) -> int:
        return self.worst.peak_bytes


def estimate(lay: Layout, *, accelerator: bool = True) -> Estimate:
    """Per-rank peak of every pipeline stage; `accelerator` adds the allocator margin
    (a CPU run has no caching allocator to fragment)."""
    m = lay.model
    layers = stage_layers(m.n_layers, lay.stages)
    per_rank = [[s for s in range(lay.stages) if s % lay.dims.pp == p] for p in range(lay.dims.pp)]
    stages = [
        _stage(lay, p, [layers[s] for s in ids], first=0 in ids, last=lay.stages - 1 in ids, accelerator=accelerator)
        for p, ids in enumerate(per_rank)
    ]
    params = sum(numel(p.shape) for i in range(m.n_layers) for p in block_params(m, i))
    params += sum(numel(p.shape) for p in root_params(m, True, True))
    return Estimate(lay, stages, weights_bytes=params * BYTES[lay.precision], params=params)


@dataclass
class _Stage:
    """One pp rank's share of the model as the phases of its step see it: computed once by
    _describe_stage, read by each phase's function below."""

    lay: Layout
    pp_rank: int
    first: bool  # holds the embedding (pp rank 0)
    last: bool  # holds the final norm, output projection and loss
    layer_ids: list[int]  # the blocks of every local chunk, in order
    position_chunk: list[int]  # the chunk of each of those blocks
    n_chunks: int
    roots: list[Param]
    shard: int  # elements of this rank's parameter shard
    n_tensors: int
    tokens: int  # T = micro_batch x seq_len
    root_numel: int  # the root's params, tp-local
    block_numel: list[int]  # each block's params, tp-local
    block_shard: list[int]  # each block's params, sharded
    kept_gathered: list[int]  # blocks FSDP keeps unsharded after forward
    per_block: list[int]  # bytes one micro-batch leaves in each block
    chunk_acts: list[int]  # bytes one micro-batch leaves in each chunk
    logits: int  # bytes of one micro-batch's logits (last stage)
    first_held: dict  # {chunk: micro-batches alive at its first backward}
    later_options: dict  # {chunk: [micro-batches alive at each later backward]}

    @property
    def grads(self) -> int:
        return 4 * self.shard  # fp32: FSDP's reduce_dtype, or the fp32 params' own grads

    def alive(self, held: tuple[int, ...]) -> int:
        """Activation bytes of `held[c]` micro-batches alive in each chunk c."""
        return sum(h * a for h, a in zip(held, self.chunk_acts))

    def gathered(self, indices, upto: int) -> int:
        """Unsharded params FSDP2 holds: the root's (never resharded after forward), these
        blocks', and the kept blocks backward has not reached yet (post_backward reshards),
        in param_dtype (FSDPParam.unsharded_param)."""
        if not self.lay.fsdp:
            return 0
        kept = {i for i in self.kept_gathered if i <= upto}
        e, _ = _dtypes(self.lay)
        return (self.root_numel + sum(self.block_numel[i] for i in set(indices) | kept if i >= 0)) * e


def _describe_stage(lay: Layout, pp_rank: int, chunks: list[list[int]], first: bool, last: bool) -> _Stage:
    m, t = lay.model, lay.dims.tp
    layer_ids = [i for c in chunks for i in c]
    blocks = [block_params(m, i) for i in layer_ids]
    roots = root_params(m, first, last)
    b, n_chunks = lay.micro_batch, len(chunks)
    # micro-batches whose activations each local stage (chunk) holds when a chunk's backward
    # starts: at its first backward, and at its worst later one (gradients accumulated by then)
    first_held, later_options = _held(lay, pp_rank, n_chunks)
    per_block = [block_saved_ac(lay, b, lay.ac) if _checkpointed(lay, i) else block_saved(lay, b) for i in layer_ids]
    # bytes one micro-batch leaves in each chunk: its blocks, the embedding's ids on the first
    # stage (chunk 0 of pp rank 0), the final norm + output + loss on the last stage
    position_chunk = [c for c, ids in enumerate(chunks) for _ in ids]
    chunk_acts = [
        sum(x for x, c in zip(per_block, position_chunk) if c == chunk)
        + (head_saved(lay, b, True, False) if first and chunk == 0 else 0)
        + (head_saved(lay, b, False, True) if last and chunk == n_chunks - 1 else 0)
        for chunk in range(n_chunks)
    ]
    return _Stage(
        lay=lay,
        pp_rank=pp_rank,
        first=first,
        last=last,
        layer_ids=layer_ids,
        position_chunk=position_chunk,
        n_chunks=n_chunks,
        roots=roots,
        shard=sum(sharded_numel(p, lay) for p in roots + [p for blk in blocks for p in blk]),
        n_tensors=len(roots) + sum(len(blk) for blk in blocks),
        tokens=b * lay.seq_len,
        root_numel=sum(numel(tp_local(p, t)) for p in roots),
        block_numel=[sum(numel(tp_local(p, t)) for p in blk) for blk in blocks],
        block_shard=[sum(sharded_numel(p, lay) for p in blk) for blk in blocks],
        # FSDP with pp keeps every block of the stage gathered (reshard_after_forward=False,
        # titan_train.distributed.parallelize.apply_fsdp pipelined=True); without pp, the last block only
        kept_gathered=list(range(len(blocks))) if lay.dims.pp > 1 else [len(blocks) - 1],
        per_block=per_block,
        chunk_acts=chunk_acts,
        logits=logits_bytes(lay, b) if last else 0,
        first_held=first_held,
        later_options=later_options,
    )


def _persistent_terms(s: _Stage) -> list[Term]:
    """What the stage holds through the whole step: fp32 master params (the module is built
    in fp32), AdamW's exp_avg and exp_avg_sq (2 x fp32 per element, torch.optim.AdamW) plus
    one fp32 `step` per tensor, the RoPE table buffer (2 x max_seq_len x head_dim/2, fp32, not
    sharded), and the step's token ids (inputs and targets, int64, on every rank) beyond those
    of in-flight micro-batches, which are counted where autograd saves them (embedding, loss)."""
    lay, m, T = s.lay, s.lay.model, s.tokens
    params, optim = 4 * s.shard, 8 * s.shard + 4 * s.n_tensors
    offloaded = lay.cpu_offload
    base = [
        Term(
            "params (sharded, fp32)",
            0 if offloaded else params,
            f"{s.shard:,} elements x 4 B" + (" (on host: cpu_offload)" if offloaded else ""),
        ),
        Term("optimizer state", 0 if offloaded else optim, "AdamW exp_avg + exp_avg_sq: 2 x 4 B per element"),
        Term("buffers", m.max_seq_len * m.head_dim * 4, "RoPE table, fp32"),
    ]
    micro_batches = lay.grad_accum * (lay.pp_microbatches if lay.dims.pp > 1 else 1)
    ids_saved = T * ((8 * s.first_held[0][0] if s.first else 0) + (8 * s.first_held[0][-1] if s.last else 0))
    if micro_batches * T * 16 > ids_saved:
        base.append(
            Term(
                "token ids",
                micro_batches * T * 16 - ids_saved,
                f"{micro_batches} micro-batches of inputs + targets, int64",
            )
        )
    return base


def _loss_backward(s: _Stage, held: tuple[int, ...], accum_grads: int, when: str):
    """The start of backward on the last stage: every activation alive, the logits of every
    in-flight micro-batch (the step's variable; the pipeline's forward cache), and
    log_softmax's backward with its fp32 grad input and output (T*V*4 each; three under tp)."""
    in_flight, lay = held[-1], s.lay
    vocab = lay.model.vocab_size // lay.dims.tp
    if lay.loss_chunks > 1:  # a piece recomputed: its logits, fp32 cast, log-softmax, 2 fp32 gradients
        e, _ = _dtypes(lay)
        per_token = e + (4 if e < 4 else 0) + 12
        loss = (s.tokens // lay.loss_chunks) * vocab * per_token
        detail = f"one of {lay.loss_chunks} pieces recomputed: {per_token} B per (b*s*V/tp) element"
    else:
        # nll_loss_backward's and _log_softmax_backward_data's outputs; loss_parallel's fused
        # backward (loss.py _nll_loss_and_log_softmax_backward) holds zeros_like(x), exp(x)
        # and their sum, then the product
        grads = 3 if lay.dims.tp > 1 else 2
        loss = in_flight * s.logits + grads * s.tokens * vocab * 4
        detail = f"logits {_mb(s.logits)} x {in_flight} + {grads} fp32 (b*s*V/tp) gradients of the loss"
    return (
        "backward start (loss gradient)" + when,
        [
            Term("activations", s.alive(held), _acts_detail(lay, held, len(s.layer_ids))),
            Term("logits and loss", loss, detail),
            Term("params gathered", s.gathered([], len(s.block_numel)), "FSDP root + blocks kept after forward"),
            Term("gradients", accum_grads, "accumulated over micro-batches"),
        ],
    )


def _worst_block_backward(s: _Stage, held_by_chunk: dict, accum_grads: int, when: str):
    """The costliest moment inside a block's backward, latest layer first. SwiGLU's backward
    holds the grad of w2's input and the two grads of the product (3*T*f/t*e) once w2's saved
    input (T*f/t*e) is freed, next to the grad of the block output (T/t*d*r; gathered over tp,
    T*d*e). The root's grads wait for FSDP's root post-backward (unsharded, param_dtype), w2's
    for the block's reduce-scatter, whose fp32 input (reduce_dtype) FSDP keeps for the last
    two blocks. Done blocks' grads are sharded fp32. FSDP prefetches the next block unless the
    current one is being recomputed (AC)."""
    lay, m, t, T = s.lay, s.lay.model, s.lay.dims.tp, s.tokens
    e, r = _dtypes(lay)
    b = lay.micro_batch
    temps = 2 * T * (m.ffn_dim // t) * e + T // t * m.d_model * r + (T * m.d_model * e if t > 1 else 0)
    grad_bytes = e if lay.fsdp else 4
    pending = (
        sum(numel(tp_local(p, t)) for p in s.roots if p.name != "tok_embeddings.weight") + m.d_model * (m.ffn_dim // t)
    ) * grad_bytes
    worst = None
    n_blocks = len(s.block_numel)
    for k in range(n_blocks):  # k blocks already done
        cur = n_blocks - 1 - k
        chunk = s.position_chunk[cur]
        if chunk not in held_by_chunk:
            continue
        held = held_by_chunk[chunk]
        recomputed = _checkpointed(lay, s.layer_ids[cur])
        # a recomputed block's graph reuses the checkpoint's inputs (and selective AC's saved
        # outputs); only a half-precision input is not already inside block_saved
        current = block_saved(lay, b) + (T // t * m.d_model * r if recomputed and r < 4 else 0)
        # every held micro-batch's activations, but of the one in backward: its chunk's
        # blocks below this one, this block's graph, the embedding's ids
        earlier = sum(x for x, c in zip(s.per_block[:cur], s.position_chunk) if c == chunk)
        acts = s.alive(held) - s.chunk_acts[chunk] + earlier + current + (T * 8 if s.first and chunk == 0 else 0)
        done = sum(s.block_shard[cur + 1 :] if lay.fsdp else s.block_numel[cur + 1 :]) * 4
        reduce_scatter = min(k, 2) * max(s.block_numel) * 4 if lay.fsdp else 0
        detail = _acts_detail(lay, held, cur + 1, block_saved(lay, b) if recomputed else 0)
        terms = [
            Term("activations", acts, detail),
            Term("logits and loss", held[-1] * s.logits, "logits held until their backward"),
            Term(
                "params gathered",
                s.gathered([cur] + ([cur - 1] if not recomputed else []), cur),
                "FSDP root + current" + ("" if recomputed else " and prefetched") + " block",
            ),
            Term(
                "gradients",
                max(accum_grads, done) + pending + reduce_scatter,
                f"{k} later blocks' done; root's and w2's pending" + (", reduce-scatter inputs" if k else ""),
            ),
            Term("backward temporaries", temps, "grads of the SwiGLU and residual activations"),
        ]
        if worst is None or sum(x.bytes for x in terms) > sum(x.bytes for x in worst[1]):
            worst = (f"backward of layer {s.layer_ids[cur]}" + when, terms)
    return worst


def _loss_forward(s: _Stage, held: tuple[int, ...], accum_grads: int, when: str):
    """The end of forward on the last stage, while the loss is computed: every activation
    alive (log_softmax's output among them), this micro-batch's logits (compute dtype) and
    their fp32 cast (the same tensor in fp32). aten._log_softmax writes its output and
    allocates nothing else a tensor holds; under tp loss_parallel's log_softmax
    (torch/distributed/tensor/parallel/loss.py _log_softmax) keeps the shifted logits beside
    exp(shifted), then beside its output: one fp32 (b*s*V/tp) more. All over V/tp of the
    vocabulary. Traced op by op on real gloo ranks (MemTracker, benchmarks/memory_accuracy.py)."""
    lay, t = s.lay, s.lay.dims.tp
    e, _ = _dtypes(lay)
    per_token = e + (4 if e < 4 else 0) + (4 if t > 1 else 0)
    if lay.loss_chunks > 1:  # a checkpointed piece (measured), under loss_parallel more
        per_token += 4 + (12 if t > 1 else 0)
    piece = s.tokens // lay.loss_chunks  # loss_chunks > 1: one piece's logits at a time
    return (
        "forward end (loss)" + when,
        [
            Term("activations", s.alive(held), _acts_detail(lay, held, len(s.layer_ids))),
            Term(
                "logits and loss",
                (held[-1] - 1) * s.logits + piece * (lay.model.vocab_size // t) * per_token,
                f"logits and their fp32 temporaries: {per_token} B per (b*s*V/tp) element"
                + (f", one of {lay.loss_chunks} pieces" if lay.loss_chunks > 1 else ""),
            ),
            Term("params gathered", s.gathered([], len(s.block_numel)), "FSDP root + blocks kept after forward"),
            Term("gradients", accum_grads, "accumulated over micro-batches"),
        ],
    )


def _forward_backward(s: _Stage, held_by_chunk: dict, accum_grads: int, when: str) -> list:
    """The peak candidates of the backward passes with `held_by_chunk[c]` micro-batches'
    activations alive per chunk when chunk c's backward starts, and `accum_grads` bytes of
    gradients from earlier micro-batches."""
    out = []
    if s.last and s.n_chunks - 1 in held_by_chunk:
        out.append(_loss_forward(s, held_by_chunk[s.n_chunks - 1], accum_grads, when))
        out.append(_loss_backward(s, held_by_chunk[s.n_chunks - 1], accum_grads, when))
    worst = _worst_block_backward(s, held_by_chunk, accum_grads, when)
    return out + ([worst] if worst else [])


def _later_micro_batches(s: _Stage) -> list:
    """With pipeline micro-batches, later backwards also hold the gradients accumulated so
    far (fewer in flight at the end of GPipe and of a short 1F1B) and the sends: torch's
    pipelining waits for them at the end of the step, so every micro-batch's output (to the
    next stage) and input grad (to the previous) stays."""
    lay, m, t = s.lay, s.lay.model, s.lay.dims.tp
    _, r = _dtypes(lay)
    sends = lay.pp_microbatches * lay.micro_batch * (lay.seq_len // t) * m.d_model * r * ((not s.last) + (not s.first))
    # the pipeline turns FSDP's gradient sync off but for the last micro-batch
    # (PipelineStage.backward_maybe_with_nosync), so FSDP accumulates them unsharded, in its
    # fp32 reduce dtype
    accumulated = (s.root_numel + sum(s.block_numel)) * 4 if lay.fsdp else s.grads
    later_held = {
        c: max(options, key=lambda h: s.alive(h) + h[-1] * s.logits) for c, options in s.later_options.items()
    }
    if not later_held:
        return []
    later = _forward_backward(s, later_held, accumulated, ", a later micro-batch")
    for _, terms in later:
        terms.append(
            Term("pipeline sends", sends, "outputs / input grads sent to neighbour stages, held until the step ends")
        )
    return later


def _optimizer_step(s: _Stage):
    """Grads complete; foreach AdamW allocates one fp32 temporary per element
    (torch._foreach_sqrt of exp_avg_sq, torch/optim/adamw.py _multi_tensor_adamw)."""
    return (
        "optimizer step",
        [
            Term("gradients", s.grads, "fp32, sharded"),
            Term("optimizer temporaries", 4 * s.shard, "foreach AdamW: one fp32 copy of the shard"),
        ],
    )


def _stage(
    lay: Layout, pp_rank: int, chunks: list[list[int]], *, first: bool, last: bool, accelerator: bool
) -> StageEstimate:
    """The peak of one pp rank's step: the costliest of its phases, on top of what it holds
    throughout."""
    s = _describe_stage(lay, pp_rank, chunks, first, last)
    offloaded = lay.cpu_offload
    # the first micro-batch's backward, with every in-flight micro-batch's activations
    candidates = _forward_backward(s, s.first_held, s.grads if lay.grad_accum > 1 and not offloaded else 0, "")
    if lay.dims.pp > 1 and lay.pp_microbatches > 1 and not offloaded:
        candidates += _later_micro_batches(s)
    if not offloaded:
        candidates.append(_optimizer_step(s))
    phase, terms = max(candidates, key=lambda c: sum(x.bytes for x in c[1]))
    terms = _persistent_terms(s) + [x for x in terms if x.bytes]
    tensor_bytes = sum(x.bytes for x in terms)
    margin = int(ALLOCATOR_MARGIN * tensor_bytes) if accelerator else 0
    params, optim = 4 * s.shard, 8 * s.shard + 4 * s.n_tensors
    return StageEstimate(
        stage=pp_rank,
        layers=len(s.layer_ids),
        phase=phase,
        terms=terms,
        tensor_bytes=tensor_bytes,
        comm_bytes=comm_buffers(lay),
        margin_bytes=margin,
        host_bytes=params + optim + s.grads if offloaded else 0,
    )


def _checkpointed(lay: Layout, layer: int) -> bool:
    """titan_train.distributed.activation_checkpoint.apply_ac: every `ac_every`-th block by layer id."""
    return lay.ac != "none" and layer % lay.ac_every == 0


def _held(lay: Layout, pp_rank: int, chunks: int) -> tuple[dict, dict]:
    """Micro-batches whose activations each chunk of this rank holds when a chunk's backward
    starts, as ({chunk: at its first backward}, {chunk: [at each later one]}); a later
    backward runs with gradients accumulated. 1 without pp; GPipe runs all forwards first
    (fewer left at later backwards); 1F1B holds (pp - rank) from warm-up on (Narayanan et al.
    2021, PipeDream-Flush); interleaved 1F1B as torch.distributed.pipelining runs it
    (interleaved_backwards)."""
    if lay.dims.pp == 1:
        return {0: (1,)}, {}
    n = lay.pp_microbatches
    if lay.pp_schedule == "interleaved_1f1b":
        first, later = {}, {}
        for chunk, held in interleaved_backwards(n, chunks, lay.dims.pp, pp_rank):
            if chunk in first:
                later.setdefault(chunk, []).append(held)
            first.setdefault(chunk, held)
        return first, later
    in_flight = n if lay.pp_schedule == "gpipe" else min(n, lay.dims.pp - pp_rank)
    steady = in_flight if lay.pp_schedule != "gpipe" and n > in_flight else in_flight - 1
    return {0: (in_flight,)}, ({0: [(steady,)]} if steady > 0 else {})


def interleaved_backwards(n: int, chunks: int, pp: int, rank: int) -> list[tuple[int, tuple[int, ...]]]:
    """(chunk, micro-batches held per chunk) just before each backward of `rank` under
    torch.distributed.pipelining's ScheduleInterleaved1F1B: `warmup` forwards (the last rank
    runs a full round of micro-batches on every chunk but its last, each rank before it two
    more), then one forward + one backward per op, then the remaining backwards. Forward op k
    runs chunk (k // per_round) % chunks; backward op k runs the chunks in reverse
    (torch/distributed/pipelining/schedules.py: _get_warmup_ops, forward_stage_index,
    backward_stage_index). The last rank thus holds a whole round on chunk 0 but one
    micro-batch on its last chunk, not the same number on each."""
    per_round = n // max(1, n // pp)
    total = n * chunks
    warmup = min((chunks - 1) * per_round + 2 * (pp - 1 - rank), total)
    held, out = [0] * chunks, []
    for op in range(total + warmup):
        if op < total:
            held[(op // per_round) % chunks] += 1
        if op >= warmup:
            chunk = chunks - 1 - ((op - warmup) // per_round) % chunks
            out.append((chunk, tuple(held)))
            held[chunk] -= 1
    return out


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n < GiB else f"{n / GiB:,.2f} GiB"


def _acts_detail(lay: Layout, held: tuple[int, ...], layers: int, recompute: int = 0) -> str:
    """What the activation figure covers, in words."""
    selective = "op-level selective AC" if lay.ac_option == "op" else "selective AC"
    what = {"none": "no AC", "full": f"full AC every {lay.ac_every}", "selective": f"{selective} every {lay.ac_every}"}
    count = f"{held[0]} micro-batch(es)" if len(held) == 1 else f"({', '.join(map(str, held))}) micro-batches per chunk"
    text = f"{layers} blocks x {count} of {lay.micro_batch} x {lay.seq_len}, {what[lay.ac]}"
    return text + (f", + one block recomputed ({_mb(recompute)})" if recompute else "")


def communicators(lay: Layout) -> int:
    """Process groups this rank communicates on: the world group (barrier, loss all-reduce),
    one per mesh dim of size > 1 that is smaller than the world (DeviceMesh reuses the world
    group for a dim that spans it), and pipeline point-to-point links to the previous and
    next stage (HCCL opens a communicator per peer pair for send/recv). Under HSDP the dp
    dim is two: FSDP all-gathers and reduce-scatters over dp_shard and all-reduces over
    dp_replicate (the flattened dp group only names a rank for the data loader)."""
    dims, world = lay.dims, lay.dims.world_size
    data = (dims.dp_replicate, dims.dp_shard) if dims.dp_replicate > 1 else (dims.dp,)
    groups = 1 + sum(1 for size in (*data, dims.pp, dims.tp) if 1 < size < world)
    return groups + (2 if dims.pp > 2 else 1 if dims.pp == 2 else 0)


def comm_buffers(lay: Layout) -> int:
    """HCCL: each communicator holds 2 x HCCL_BUFFSIZE MB of device memory, one for sending
    and one for receiving (HCCL User Guide, HCCL_BUFFSIZE: https://www.hiascend.com/document/
    detail/en/canncommercial/850/commlib/hcclug/hcclug_000076.html). NCCL's buffers are
    small next to this and gloo's live in host memory: counted as 0."""
    if lay.backend != "hccl" or lay.dims.world_size == 1:
        return 0
    return communicators(lay) * 2 * lay.hccl_buffsize_mb * 2**20
