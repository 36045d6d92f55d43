"""Ripple: parallel decoders for diffusion language models."""
