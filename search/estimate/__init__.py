"""`hpsearch estimate`: the training memory of a study's configurations before launch, and
(`--measure`) the efficiency study of one configuration. torch loads only when one runs.

- `picking`: which configurations (the middle, each parameter's ends, all low/high, samples);
- `memory`: the estimate, a dry step per configuration against the device's memory;
- `measure`: real steps per technique (fp32, bf16, accumulation, checkpointing), each row in
  a fresh process (``python -m search.estimate.measure --row``);
- `text`: columns, ratios, times.

The command itself (flags, `$HPSEARCH_DEVICE_MEMORY`) is `search.commands.estimate`.
"""

from search.estimate.measure import format_techniques, measure_techniques, run_measure
from search.estimate.memory import estimate_json, estimate_memory, format_estimate
from search.estimate.picking import Configuration, configurations

__all__ = [
    "Configuration",
    "configurations",
    "estimate_json",
    "estimate_memory",
    "format_estimate",
    "format_techniques",
    "measure_techniques",
    "run_measure",
]
