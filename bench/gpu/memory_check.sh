#!/usr/bin/env bash
# The GPU paths of the memory estimate and the memory check, on one GPU, in one run (~5 min).
# Run from the repository root on a machine with CUDA: bash bench/gpu/memory_check.sh
#
# 1. The dry run on fake CUDA tensors (CUDA's autocast, foreach AdamW, 512-byte rounding)
#    against torch.cuda.max_memory_allocated of real steps; then real CUDA out-of-memory
#    errors under a capped allocator: the plan the trainer adapts to against the estimate's.
# 2. hpsearch estimate --device cuda:0: the GPU's free memory as the limit.
# 3. hpsearch estimate --measure --device cuda:0: bf16 (fp16 on GPUs without bf16) rows,
#    CUDA allocator peaks, synchronized step times.
# 4. A worker on that GPU with --device-memory 1.9MiB: width 64 ends FAIL before
#    training (it needs 1.9 MB even at micro-batch 1), width 8 trains.
set -euo pipefail
cd "$(dirname "$0")/../.."
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA here'; print(torch.cuda.get_device_name(0))"

echo "== 1. estimate against real steps"
python -m bench.systems.memory_estimate --device cuda:0

echo "== 2. hpsearch estimate --device cuda:0"
python -m search estimate examples/digits.toml --device cuda:0

echo "== 3. hpsearch estimate --measure --device cuda:0"
python -m search estimate examples/digits.toml --device cuda:0 --measure \
    --set width=64 --set batch_size=128 --steps 20

echo "== 4. a GPU worker with --device-memory 1.9MiB"
work=$(mktemp -d)
cat > "$work/grid.toml" <<'TOML'
[study]
name = "gpu-memory-check"
direction = "maximize"
n_trials = 4
sampler = "grid"

[pruner]
type = "none"

[task]
name = "digits"
epochs = 1

[space]
width = { type = "categorical", choices = [8, 64] }
batch_size = { type = "categorical", choices = [32, 64] }
TOML
python -m search run "$work/grid.toml" --storage "sqlite:///$work/study.db" --workers 1 \
    --device-memory 1.9MiB
python - "$work/study.db" <<'PY'
import sys

import optuna

study = optuna.load_study(study_name="gpu-memory-check", storage=f"sqlite:///{sys.argv[1]}")
for t in study.trials:
    print(t.number, t.state.name, t.params, t.user_attrs.get("memory_check"),
          t.system_attrs.get("fail_reason", ""))
PY
rm -rf "$work"
