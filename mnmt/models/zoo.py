"""Named model sizes: mini-1…8, ladder-1…8, fernandes-1…8, Ghorbani's depth family, Caillaut's decoder-only.

- fernandes-k: Fernandes et al. 2023 App. A (T5.1.1, vocab 128,000); counts equal the table.
- mini-k: the same kind of progression (alternating width and depth steps, MLP = 4·emb,
  head_dim·heads = emb) scaled down for CPU studies, ≈58K to ≈5.3M non-embedding params.
- ghorbani-E-D: Ghorbani et al. 2021 App. A: emb 1024, MLP 8192, 16 heads × 64, E encoder and
  D decoder layers (2-64 in the paper; any 1-128 accepted), vocab 32,000, ungated ReLU MLP and
  separate encoder/decoder input embeddings (their counts: ≈21M/≈25M per layer, ≈98M embeddings).
- caillaut-70m … caillaut-6.9b: Caillaut et al. 2024 Table 3 (Pythia shapes: MLP 4·emb, ungated
  GELU), decoder-only, vocab 100,352 (their 100,000 BPE vocabulary padded to a multiple of 128,
  which is what Table 3's embedding counts imply).
- micro-k: three single-layer sizes below mini-1 (≈9K-37K non-embedding params) that stay
  capacity-limited on the synthetic `cpu-tiny` data while converging in a few hundred steps;
  with mini-1/mini-2 they span the regime where the CPU study's size law is measurable (on
  cpu-tiny, mini-1 … mini-4 reach nearly the same loss, so their curve is flat).
- nano-k: two single-layer sizes below micro-1 (≈2.5K and ≈5K non-embedding params, width 8
  and 12): on `cpu-tiny` they are capacity-limited on the easier pair (en-de), where every
  size from micro-1 up already reaches the same floor, so a study's size law sees both pairs.
- mini-dec-k: decoder-only counterparts of mini-k (2× the layers, no encoder) for CPU studies.
- chen-base, chen-medium, chen-large: the Transformer shapes of Chen et al. 2023 Table 6 (layers
  3/6/6, hidden 512/512/1024, FFN 2048/2048/4096, ungated ReLU, 64K vocabulary) built as T5.1.1
  stacks here (RMSNorm, relative positions, no biases), so their counts are near, not equal to,
  the table's 64M/102M/317M.
- ladder-k: one shape rule for CPU studies, the papers' kind of ladder (Kaplan et al. 2020,
  Hoffmann et al. 2022 grow depth and width together at a fixed head size): width
  w_k = 8·(k + 1) at every step, one more layer per stack every second step (ceil(k / 2)
  layers), heads of 8 dimensions (w_k / 8 of them), gated-GELU MLP 4·w_k — the aspect ratio
  w/L stays within 16–24. Eight sizes, ≈9.4K to ≈0.75M non-embedding parameters; ladder-1 is
  micro-1's shape.
- mini-ed-E-D: a CPU analogue of Ghorbani's depth family at micro-1's width (emb 16, 2 heads × 8,
  gated-GELU MLP 64), E encoder and D decoder layers (1-16): ≈4.1K non-embedding parameters per
  encoder layer and ≈5.2K per decoder layer, so E, D ∈ 1…6 span ≈9K-56K.

`mnmt-zoo --family F [--json]` prints names, shapes and parameter counts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from mnmt.models.accounting import param_counts
from mnmt.models.configs import T5Config

# (layers per stack, emb, heads, head_dim, mlp) — Fernandes 2023 App. A, in the table's order
FERNANDES = [
    (2, 512, 8, 64, 2048),
    (3, 768, 12, 64, 3072),
    (6, 768, 12, 64, 3072),
    (9, 768, 12, 64, 3072),
    (9, 1024, 16, 64, 4096),
    (12, 1024, 16, 64, 4096),
    (12, 1280, 16, 80, 5120),
    (12, 1536, 16, 96, 6144),
]
FERNANDES_VOCAB = 128_000
# The table's total for size 7 (1,035,876,864) is 327,680 = 2·128·1280 above 2·128,000·1280 +
# its corrected count, i.e. it implies 128,128 vocabulary rows; every other row implies 128,000.
FERNANDES_VOCAB_OVERRIDE = {7: 128_128}

MINI = [
    (1, 40, 4, 10, 160),
    (1, 64, 4, 16, 256),
    (2, 64, 4, 16, 256),
    (3, 64, 4, 16, 256),
    (3, 96, 6, 16, 384),
    (4, 96, 6, 16, 384),
    (4, 128, 8, 16, 512),
    (4, 192, 12, 16, 768),
]
MINI_VOCAB = 512

# Same layout as MINI (MLP = 4·emb, heads·head_dim = emb), one layer per stack, narrower.
MICRO = [
    (1, 16, 2, 8, 64),
    (1, 24, 2, 12, 96),
    (1, 32, 4, 8, 128),
]

# Below micro-1: widths 8 and 12 (layers, emb, heads, head dim, MLP as MICRO).
NANO = [
    (1, 8, 2, 4, 32),
    (1, 12, 2, 6, 48),
]

# ladder-k (k = 1 … LADDER_SIZES): the one shape rule of ladder_shape()
LADDER_SIZES = 8
LADDER_HEAD_DIM = 8
LADDER_MLP_RATIO = 4


def ladder_shape(k: int) -> tuple[int, int, int, int, int]:
    """(layers per stack, emb, heads, head_dim, mlp) of ladder-k: width 8·(k + 1), depth
    ceil(k / 2), heads of LADDER_HEAD_DIM dimensions, MLP 4·width."""
    if not 1 <= k <= LADDER_SIZES:
        raise ValueError(f"unknown size 'ladder-{k}'; expected ladder-1 … ladder-{LADDER_SIZES}")
    width = LADDER_HEAD_DIM * (k + 1)
    layers = (k + 1) // 2
    return (layers, width, width // LADDER_HEAD_DIM, LADDER_HEAD_DIM, LADDER_MLP_RATIO * width)


GHORBANI_VOCAB = 32_000
# depth pairs of Ghorbani App. A Tables 1-3 (encoder scaling, decoder scaling, symmetric)
_G_DEPTHS = [2, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 48, 56, 64]
GHORBANI_TABLE_DEPTHS = sorted(
    {(e, 6) for e in _G_DEPTHS} | {(6, d) for d in [2, 4, 6] + _G_DEPTHS[2:]}
    | {(n, n) for n in [2, 3, 4, 5, 8, 16, 20, 24, 32, 48, 56, 64]})

# name: (layers, emb, heads) — Caillaut 2024 Table 3
CAILLAUT = {
    "70m": (6, 512, 8),
    "160m": (12, 768, 16),
    "410m": (24, 1024, 16),
    "610m": (16, 1536, 16),
    "1b": (16, 2048, 8),
    "6.9b": (32, 4096, 32),
}
CAILLAUT_VOCAB = 100_352

# name: (layers per stack, emb, heads, mlp) — Chen et al. 2023 Table 6
CHEN = {"base": (3, 512, 8, 2048), "medium": (6, 512, 8, 2048), "large": (6, 1024, 16, 4096)}
CHEN_VOCAB = 64_000

# mini-ed-E-D: (emb, heads, head_dim, mlp) shared by every depth; Ghorbani-style tables of depths
MINI_ED_SHAPE = (16, 2, 8, 64)
MINI_ED_MAX_DEPTH = 16
MINI_ED_TABLE_DEPTHS = sorted({(e, 2) for e in range(1, 7)} | {(2, d) for d in range(1, 7)}
                              | {(n, n) for n in range(1, 7)})

FAMILIES = ("mini", "micro", "nano", "ladder", "fernandes", "ghorbani", "caillaut", "mini-dec", "mini-ed",
            "chen")


def sizes(family: str) -> list[str]:
    """Size names of a family, smallest first (Ghorbani: the App. A table depths; mini-ed: the
    encoder-scaling (E, 2), decoder-scaling (2, D) and symmetric (n, n) depths up to 6)."""
    if family == "mini":
        return [f"mini-{i + 1}" for i in range(len(MINI))]
    if family == "mini-dec":
        return [f"mini-dec-{i + 1}" for i in range(len(MINI))]
    if family == "micro":
        return [f"micro-{i + 1}" for i in range(len(MICRO))]
    if family == "nano":
        return [f"nano-{i + 1}" for i in range(len(NANO))]
    if family == "ladder":
        return [f"ladder-{k}" for k in range(1, LADDER_SIZES + 1)]
    if family == "fernandes":
        return [f"fernandes-{i + 1}" for i in range(len(FERNANDES))]
    if family == "ghorbani":
        return [f"ghorbani-{e}-{d}" for e, d in GHORBANI_TABLE_DEPTHS]
    if family == "caillaut":
        return [f"caillaut-{k}" for k in CAILLAUT]
    if family == "chen":
        return [f"chen-{k}" for k in CHEN]
    if family == "mini-ed":
        return [f"mini-ed-{e}-{d}" for e, d in MINI_ED_TABLE_DEPTHS]
    raise ValueError(f"unknown model family {family!r}; known: {', '.join(FAMILIES)}")


def _indexed(name: str, prefix: str, table: list) -> tuple:
    m = re.fullmatch(prefix + r"-(\d+)", name)
    if not m or not 1 <= int(m.group(1)) <= len(table):
        raise ValueError(f"unknown size {name!r}; expected {prefix}-1 … {prefix}-{len(table)}")
    return table[int(m.group(1)) - 1]


def get_config(size: str, vocab_size: int | None = None, **overrides) -> T5Config:
    """The `T5Config` of a named size; `vocab_size` replaces the family's default vocabulary,
    other keyword arguments (dropout_rate, dtype, ...) override config fields."""
    size = size.strip().lower()
    if size.startswith("mini-dec-"):
        n, d, h, k, m = _indexed(size, "mini-dec", MINI)
        cfg = T5Config(vocab_size=MINI_VOCAB, emb_dim=d, num_heads=h, head_dim=k, mlp_dim=m,
                       num_encoder_layers=0, num_decoder_layers=2 * n, dropout_rate=0.0,
                       architecture="decoder_only", family="mini-dec")
    elif size.startswith("mini-ed-"):
        mm = re.fullmatch(r"mini-ed-(\d+)-(\d+)", size)
        top = MINI_ED_MAX_DEPTH
        if not mm or not (1 <= int(mm.group(1)) <= top and 1 <= int(mm.group(2)) <= top):
            raise ValueError(f"unknown size {size!r}; expected mini-ed-E-D with encoder depth E "
                             f"and decoder depth D in 1..{top}")
        d, h, k, m = MINI_ED_SHAPE
        cfg = T5Config(vocab_size=MINI_VOCAB, emb_dim=d, num_heads=h, head_dim=k, mlp_dim=m,
                       num_encoder_layers=int(mm.group(1)), num_decoder_layers=int(mm.group(2)),
                       dropout_rate=0.0, family="mini-ed")
    elif size.startswith("mini-"):
        n, d, h, k, m = _indexed(size, "mini", MINI)
        cfg = T5Config(vocab_size=MINI_VOCAB, emb_dim=d, num_heads=h, head_dim=k, mlp_dim=m,
                       num_encoder_layers=n, num_decoder_layers=n, dropout_rate=0.0, family="mini")
    elif size.startswith("micro-"):
        n, d, h, k, m = _indexed(size, "micro", MICRO)
        cfg = T5Config(vocab_size=MINI_VOCAB, emb_dim=d, num_heads=h, head_dim=k, mlp_dim=m,
                       num_encoder_layers=n, num_decoder_layers=n, dropout_rate=0.0, family="micro")
    elif size.startswith("nano-"):
        n, d, h, k, m = _indexed(size, "nano", NANO)
        cfg = T5Config(vocab_size=MINI_VOCAB, emb_dim=d, num_heads=h, head_dim=k, mlp_dim=m,
                       num_encoder_layers=n, num_decoder_layers=n, dropout_rate=0.0, family="nano")
    elif size.startswith("ladder-"):
        m_k = re.fullmatch(r"ladder-(\d+)", size)
        if not m_k:
            raise ValueError(f"unknown size {size!r}; expected ladder-1 … ladder-{LADDER_SIZES}")
        n, d, h, k, m = ladder_shape(int(m_k.group(1)))
        cfg = T5Config(vocab_size=MINI_VOCAB, emb_dim=d, num_heads=h, head_dim=k, mlp_dim=m,
                       num_encoder_layers=n, num_decoder_layers=n, dropout_rate=0.0,
                       family="ladder")
    elif size.startswith("fernandes-"):
        n, d, h, k, m = _indexed(size, "fernandes", FERNANDES)
        vocab = FERNANDES_VOCAB_OVERRIDE.get(int(size.split("-")[1]), FERNANDES_VOCAB)
        cfg = T5Config(vocab_size=vocab, emb_dim=d, num_heads=h, head_dim=k, mlp_dim=m,
                       num_encoder_layers=n, num_decoder_layers=n, dropout_rate=0.1,
                       family="fernandes")
    elif size.startswith("ghorbani-"):
        mm = re.fullmatch(r"ghorbani-(\d+)-(\d+)", size)
        if not mm or not (1 <= int(mm.group(1)) <= 128 and 1 <= int(mm.group(2)) <= 128):
            raise ValueError(f"unknown size {size!r}; expected ghorbani-E-D with encoder depth E "
                             "and decoder depth D in 1..128 (the paper uses 2..64)")
        cfg = T5Config(vocab_size=GHORBANI_VOCAB, emb_dim=1024, num_heads=16, head_dim=64,
                       mlp_dim=8192, num_encoder_layers=int(mm.group(1)),
                       num_decoder_layers=int(mm.group(2)), dropout_rate=0.1,
                       mlp_activations=("relu",), shared_embedding=False, family="ghorbani")
    elif size.startswith("chen-"):
        key = size[len("chen-"):]
        if key not in CHEN:
            raise ValueError(f"unknown size {size!r}; expected one of {sizes('chen')}")
        n, d, h, m = CHEN[key]
        cfg = T5Config(vocab_size=CHEN_VOCAB, emb_dim=d, num_heads=h, head_dim=d // h, mlp_dim=m,
                       num_encoder_layers=n, num_decoder_layers=n, dropout_rate=0.1,
                       mlp_activations=("relu",), family="chen")
    elif size.startswith("caillaut-"):
        key = size[len("caillaut-"):]
        if key not in CAILLAUT:
            raise ValueError(f"unknown size {size!r}; expected one of {sizes('caillaut')}")
        n, d, h = CAILLAUT[key]
        cfg = T5Config(vocab_size=CAILLAUT_VOCAB, emb_dim=d, num_heads=h, head_dim=d // h,
                       mlp_dim=4 * d, num_encoder_layers=0, num_decoder_layers=n,
                       dropout_rate=0.0, mlp_activations=("gelu",), architecture="decoder_only",
                       family="caillaut")
    else:
        raise ValueError(f"unknown size {size!r}; families: {', '.join(FAMILIES)} "
                         "(e.g. mini-3, ladder-4, fernandes-1, ghorbani-6-6, caillaut-70m, mini-dec-2, mini-ed-2-4)")
    cfg = cfg.replace(name=size)
    if vocab_size is not None:
        cfg = cfg.replace(vocab_size=int(vocab_size))
    if overrides:
        cfg = cfg.replace(**overrides)
    return cfg


def is_decoder_only(size: str) -> bool:
    """Whether a named size is decoder-only; False for a name the zoo does not know or a value
    that is not a name (whoever builds that size reports it)."""
    try:
        return bool(get_config(size).is_decoder_only)
    except (KeyError, ValueError, TypeError, AttributeError):
        return False


def describe(size: str, vocab_size: int | None = None) -> dict:
    """Name, shape and parameter counts of one size (the `mnmt-zoo --json` record)."""
    c = get_config(size, vocab_size)
    return {
        "name": c.name, "family": c.family, "architecture": c.architecture,
        "num_encoder_layers": c.num_encoder_layers, "num_decoder_layers": c.num_decoder_layers,
        "emb_dim": c.emb_dim, "num_heads": c.num_heads, "head_dim": c.head_dim,
        "mlp_dim": c.mlp_dim, "mlp_activations": list(c.mlp_activations),
        "vocab_size": c.vocab_size, **param_counts(c).to_dict(),
    }


def _mlp_kind(acts: list[str]) -> str:
    if len(acts) == 2 and acts[1] == "linear":
        return f"gated-{acts[0]}"
    return "-".join(acts)


def gin_text(size: str) -> str:
    """The t5x_configs/models/<size>.gin file of one size (sets MODEL_SIZE, documents shapes)."""
    r = describe(size)
    arch = "decoder-only" if r["architecture"] == "decoder_only" else "encoder-decoder"
    lines = [
        f"# {r['name']}: {arch} ({r['family']} family), generated by `mnmt-zoo --write_gin`.",
        f"#   layers enc/dec {r['num_encoder_layers']}/{r['num_decoder_layers']}, emb "
        f"{r['emb_dim']}, heads {r['num_heads']} x {r['head_dim']}, mlp {r['mlp_dim']} "
        f"{_mlp_kind(r['mlp_activations'])}, vocab {r['vocab_size']} (replaced by the run's "
        "vocabulary)",
        f"#   params: total {r['total']:,}, embedding {r['embedding']:,}, non-embedding "
        f"{r['non_embedding']:,} (encoder {r['encoder']:,}, decoder {r['decoder']:,})",
        "# Include after runs/train.gin, e.g.",
        "#   mnmt-train --gin_file=t5x_configs/runs/train.gin "
        f"--gin_file=t5x_configs/models/{r['name']}.gin ...",
        f"MODEL_SIZE = '{r['name']}'",
        "",
    ]
    return "\n".join(lines)


GIN_SIZES = (sizes("nano") + sizes("micro") + sizes("ladder") + sizes("mini") + sizes("fernandes") + sizes("caillaut") + sizes("mini-dec")
             + ["ghorbani-6-6", "ghorbani-2-2", "ghorbani-64-64", "ghorbani-2-6",
                "ghorbani-64-6", "ghorbani-6-2", "ghorbani-6-64"])


def write_gin_files(out_dir: str) -> list[str]:
    """Write one gin file per size of GIN_SIZES into out_dir; returns the paths."""
    import os

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for size in GIN_SIZES:
        path = os.path.join(out_dir, f"{size}.gin")
        with open(path, "w", encoding="utf-8") as f:
            f.write(gin_text(size))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    """`mnmt-zoo`: list sizes with their parameter counts, or write the gin files."""
    p = argparse.ArgumentParser(prog="mnmt-zoo", description="List model sizes and their "
                                "parameter counts (total, embedding, non_embedding, encoder, "
                                "decoder; embedding = input tables + output projection).")
    p.add_argument("--family", default="mini", choices=FAMILIES)
    p.add_argument("--size", action="append", help="only these sizes (repeatable)")
    p.add_argument("--vocab_size", type=int, default=None, help="override the vocabulary size")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.add_argument("--write_gin", metavar="DIR", help="write t5x_configs/models-style gin files")
    a = p.parse_args(argv)
    if a.write_gin:
        for path in write_gin_files(a.write_gin):
            print(path)
        return 0
    try:
        rows = [describe(s, a.vocab_size) for s in (a.size or sizes(a.family))]
    except ValueError as e:
        p.error(str(e))
    if a.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    head = f"{'name':<16}{'enc':>4}{'dec':>4}{'emb':>6}{'heads':>6}{'hd':>4}{'mlp':>6}" \
           f"{'vocab':>8}{'total':>15}{'non_embedding':>15}{'encoder':>14}{'decoder':>14}"
    print(head)
    for r in rows:
        print(f"{r['name']:<16}{r['num_encoder_layers']:>4}{r['num_decoder_layers']:>4}"
              f"{r['emb_dim']:>6}{r['num_heads']:>6}{r['head_dim']:>4}{r['mlp_dim']:>6}"
              f"{r['vocab_size']:>8}{r['total']:>15,}{r['non_embedding']:>15,}"
              f"{r['encoder']:>14,}{r['decoder']:>14,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
