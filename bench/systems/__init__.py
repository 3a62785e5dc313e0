"""systems benchmarks (run each as `python -m bench.systems.NAME`)."""
