"""gpu benchmarks (run each as `python -m bench.gpu.NAME`)."""
