"""Post-training quantization for inference and the agreement metrics that judge it."""
