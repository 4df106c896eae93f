"""accelerate's cpu_offload of a randomly initialised Llama (transformers,
no download), for tests/gpu/corpus.sh.

The weights stay in CPU memory; accelerate's hook uploads each layer's
before its forward, deep below the script's line.  Three forwards on the
GPU; their logits must match a forward on the CPU (the weights arrived
intact), and their bytes' SHA-256 is the checksum the corpus compares
between runs.  Prints "result verify=ok checksum=... min_copies=N"."""
import hashlib
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
from accelerate import cpu_offload  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig  # noqa: E402

STEPS = 3


def main():
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    config = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128)
    model = AutoModelForCausalLM.from_config(config)  # SITE:model
    model.eval()
    nparams = sum(1 for _ in model.parameters())
    ids = torch.randint(0, config.vocab_size, (2, 64))
    with torch.no_grad():
        ref = model(ids).logits
    dev = torch.device("cuda", 0)
    cpu_offload(model, execution_device=dev)
    gids = ids.to(dev)  # SITE:ids
    with torch.no_grad():
        for _ in range(STEPS):
            out = model(gids).logits  # SITE:forward
    logits = out.cpu()  # SITE:download
    ok = torch.allclose(logits, ref, rtol=1e-3, atol=1e-4)
    digest = hashlib.sha256(logits.numpy().tobytes()).hexdigest()[:16]
    print("result verify=%s checksum=%s min_copies=%d" % ("ok" if ok else "FAIL", digest, nparams * STEPS),
          flush=True)
    if not ok:
        raise SystemExit("the GPU's logits differ from the CPU's: max %g"
                         % (logits - ref).abs().max().item())


if __name__ == "__main__":
    main()  # SITE:main
