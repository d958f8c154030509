"""The engine: lowering plans to kernels, the executor, and (only here) DataFusion."""
