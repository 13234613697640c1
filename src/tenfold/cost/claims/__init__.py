"""NVIDIA's claims and the article's estimate, reproduced with the model and decomposed, and the model's
speedups beside NVIDIA's measured pairs."""
