"""Dynamic-range telemetry: the recorder, where its records go (JSONL, TensorBoard), and the risk table."""
