"""The training model: layouts and their rules, software stacks, compute, memory, the estimate, the search."""
