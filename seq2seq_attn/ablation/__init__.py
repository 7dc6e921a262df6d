"""The ablation runner: expand a grid of configs, run each cell once, report."""
