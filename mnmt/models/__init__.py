"""Models: T5.1.1 encoder-decoder and decoder-only networks (Flax), the size zoo, accounting.

Submodules import JAX/Flax; this package module itself stays light:
`configs` (T5Config), `layers`/`t5` (Flax modules), `encoder_decoder` (EncoderDecoderModel),
`decoder_only` (DecoderOnlyModel, Caillaut-format examples), `zoo` (named sizes, `mnmt-zoo`),
`accounting` (parameter counts, training FLOPs), `losses`.
"""

from mnmt.models.configs import T5Config

__all__ = ["T5Config"]
