"""accelerate's cpu_offload forward at the size issue 42 measured: a random
Llama of ~1.5 GB of bf16 weights offloaded to CPU memory, one synchronous
.to() per weight per forward (accelerate's hook).  `--pinned` page-locks
the offloaded weights first (the physical limit).  Prints one line:
forwards' median ms (after the first two), each forward's ms, the logits'
checksum (the same in every variant)."""
import argparse
import hashlib
import statistics
import time

import torch
from accelerate import cpu_offload
from transformers import AutoModelForCausalLM, LlamaConfig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pinned", action="store_true")
    ap.add_argument("--forwards", type=int, default=8)
    a = ap.parse_args()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5504, num_hidden_layers=12,
                         num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=256,
                         torch_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.eval()
    gb = sum(p.numel() * p.element_size() for p in model.parameters()) / 1e9
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    if a.pinned:
        state = {k: v.pin_memory() for k, v in state.items()}
    dev = torch.device("cuda", 0)
    cpu_offload(model, execution_device=dev, state_dict=state)
    ids = torch.randint(0, config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1)).to(dev)
    times = []
    with torch.no_grad():
        for _ in range(a.forwards):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(ids).logits
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    digest = hashlib.sha256(out.float().cpu().numpy().tobytes()).hexdigest()[:16]
    print("accel %s weights_gb=%.2f median_ms=%.2f first_ms=%s checksum=%s" % (
        "pinned" if a.pinned else "pageable", gb, statistics.median(times[2:]),
        ",".join("%.1f" % t for t in times), digest), flush=True)


if __name__ == "__main__":
    main()
