"""Kernels: plain functions over buffers and Arrow arrays. They never import the engine."""
