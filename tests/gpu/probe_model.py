"""Reads a run's ``model.pkl`` on the GPU and prints, as JSON, what the GPU lane checks.

``python probe_model.py RUN_DIR``: the saved state's tensors where train.py left them, the
algorithm rebuilt as DomainBed's scripts rebuild it and moved to CUDA, one more update on random
CUDA minibatches, and ``predict`` twice in eval mode.
"""

from __future__ import annotations

import json
import math
import sys
from itertools import chain
from pathlib import Path

import torch
from domainbed import algorithms


def off_gpu(module: torch.nn.Module) -> list[str]:
    tensors = chain(module.named_parameters(), module.named_buffers())
    return [name for name, tensor in tensors if not tensor.is_cuda]


def main(run_dir: Path) -> dict:
    checkpoint = torch.load(run_dir / "model.pkl", map_location=None, weights_only=False)
    state = checkpoint["model_dict"]
    shape = checkpoint["model_input_shape"]
    classes, domains = checkpoint["model_num_classes"], checkpoint["model_num_domains"]
    cls = algorithms.get_algorithm_class(checkpoint["args"]["algorithm"])
    algorithm = cls(shape, classes, domains, checkpoint["model_hparams"])
    algorithm.load_state_dict(state)
    algorithm.to("cuda")
    before_update = off_gpu(algorithm)
    generator = torch.Generator(device="cuda").manual_seed(0)
    batches = [
        (
            torch.randn(2, *shape, device="cuda", generator=generator),
            torch.randint(0, classes, (2,), device="cuda", generator=generator),
        )
        for _ in range(domains)
    ]
    algorithm.train()
    logged = algorithm.update(batches)
    algorithm.eval()
    x = torch.randn(3, *shape, device="cuda", generator=generator)
    with torch.no_grad():
        first, second = algorithm.predict(x), algorithm.predict(x)
    return {
        "saved_off_gpu": [name for name, tensor in state.items() if not tensor.is_cuda],
        "off_gpu": before_update,
        "off_gpu_after_update": off_gpu(algorithm),
        "update_finite": all(math.isfinite(value) for value in logged.values()),
        "predict_repeatable": torch.equal(first, second),
        "predict_finite": bool(first.isfinite().all()),
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
