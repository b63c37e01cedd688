"""Inference engines: one protocol, several back ends (llama.cpp, MLX)."""
