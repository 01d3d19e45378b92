"""Model configuration: the `T5Config` dataclass shared by every model family.

The fields follow T5X's `t5_1_1` network config (emb_dim, num_heads, head_dim, mlp_dim, ...).
`architecture` selects the encoder-decoder (T5.1.1) or the decoder-only network (Caillaut 2024
§3.3-3.5); `mlp_activations` = ("gelu", "linear") is T5.1.1's gated-GELU MLP, a 1-tuple is the
ungated MLP of the original Transformer (used for Ghorbani's and Caillaut's parameter budgets).
"""

from __future__ import annotations

import dataclasses
from typing import Any

_ACTIVATIONS = ("gelu", "relu", "linear", "silu", "gelu_exact")
_DTYPES = ("float32", "bfloat16", "float16")
# Rematerialisation of each encoder/decoder layer (MaxText's `remat_policy` names): "none" keeps
# every activation for the backward pass; "full" saves only the layer's input and recomputes the
# rest (jax.checkpoint_policies.nothing_saveable); "minimal" saves the outputs of the matmuls
# without batch dimensions, i.e. the q/k/v/out and MLP projections, and recomputes the attention
# einsums and elementwise work (checkpoint_dots_with_no_batch_dims); "dots_saveable" saves every
# matmul output, the attention einsums included (checkpoint_dots).
REMAT_POLICIES = ("none", "full", "minimal", "dots_saveable")
# Activation dtypes a training run accepts (TrainConfig / StudySpec.activation_dtype): float16
# is left out, it would need loss scaling.
ACTIVATION_DTYPES = ("float32", "bfloat16")
# Named logical-axis rule sets (TrainConfig / StudySpec.partitioning_rules; the rules themselves
# are in mnmt.models.partitioning): "standard" is T5X's 1-D model parallelism, parameters
# replicated over 'data'; "fsdp" also shards every parameter with an 'embed' dim over 'data'.
PARTITIONING_RULES = ("standard", "fsdp")


@dataclasses.dataclass(frozen=True)
class T5Config:
    """Shapes and options of one model. Immutable and hashable (usable as a jit static arg).

    `dtype` is the activation/compute dtype; parameters are always float32, and so are the
    attention softmax, the RMSNorm statistics, the logits and the loss (T5X's conventions).
    `remat_policy` (one of `REMAT_POLICIES`) rematerialises each encoder/decoder layer in the
    backward pass; it changes memory and compute, never the values.
    `shared_embedding`: one input embedding for encoder and decoder (T5.1.1); False gives the
    decoder its own input table (Ghorbani 2021 App. A counts three vocab×emb tables).
    """

    vocab_size: int = 32128
    emb_dim: int = 512
    num_heads: int = 8
    head_dim: int = 64
    mlp_dim: int = 2048
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout_rate: float = 0.0
    dtype: str = "float32"
    remat_policy: str = "none"
    mlp_activations: tuple[str, ...] = ("gelu", "linear")
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    logits_via_embedding: bool = False
    shared_embedding: bool = True
    architecture: str = "encoder_decoder"
    name: str = ""
    family: str = ""

    def __post_init__(self) -> None:
        problems = []
        for field in ("vocab_size", "emb_dim", "num_heads", "head_dim", "mlp_dim",
                      "relative_attention_num_buckets", "relative_attention_max_distance"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                problems.append(f"{field} must be a positive int, got {value!r}")
        for field in ("num_encoder_layers", "num_decoder_layers"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 0:
                problems.append(f"{field} must be a non-negative int, got {value!r}")
        if not 0.0 <= float(self.dropout_rate) < 1.0:
            problems.append(f"dropout_rate must be in [0, 1), got {self.dropout_rate!r}")
        if self.dtype not in _DTYPES:
            problems.append(f"dtype must be one of {_DTYPES}, got {self.dtype!r}")
        if self.remat_policy not in REMAT_POLICIES:
            problems.append(f"remat_policy must be one of {REMAT_POLICIES}, "
                            f"got {self.remat_policy!r}")
        acts = tuple(self.mlp_activations)
        if not acts or any(a not in _ACTIVATIONS for a in acts):
            problems.append(f"mlp_activations must be a non-empty tuple of {_ACTIVATIONS}, got {acts!r}")
        if self.architecture not in ("encoder_decoder", "decoder_only"):
            problems.append("architecture must be 'encoder_decoder' or 'decoder_only', "
                            f"got {self.architecture!r}")
        if self.architecture == "encoder_decoder" and self.num_encoder_layers < 1:
            problems.append("an encoder_decoder model needs num_encoder_layers >= 1")
        if self.architecture == "decoder_only" and self.num_encoder_layers != 0:
            problems.append("a decoder_only model must have num_encoder_layers == 0, "
                            f"got {self.num_encoder_layers}")
        if self.num_decoder_layers < 1:
            problems.append("num_decoder_layers must be >= 1")
        if problems:
            raise ValueError(f"invalid T5Config{' ' + self.name if self.name else ''}: "
                             + "; ".join(problems))
        object.__setattr__(self, "mlp_activations", acts)

    @property
    def is_decoder_only(self) -> bool:
        """True for Caillaut-style decoder-only MT (§3.3), no encoder."""
        return self.architecture == "decoder_only"

    def replace(self, **changes: Any) -> T5Config:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able field dict (run.json's model config)."""
        d = dataclasses.asdict(self)
        d["mlp_activations"] = list(self.mlp_activations)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> T5Config:
        """Inverse of `to_dict`; unknown fields are an error naming them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"T5Config.from_dict: unknown field(s) {unknown}; known: {sorted(known)}")
        d = dict(d)
        if "mlp_activations" in d:
            d["mlp_activations"] = tuple(d["mlp_activations"])
        return cls(**d)
