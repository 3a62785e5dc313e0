"""efficiency benchmarks (run each as `python -m bench.efficiency.NAME`)."""
