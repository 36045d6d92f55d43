"""Model families, weight loading, the denoising engine and its KV cache policies."""
