"""The serving model: engine presets, KV cache, one engine step, memory, results, the estimate, the search."""
