"""One rank of a DistributedDataParallel job under torchrun, for
tests/gpu/corpus.sh (run only where two GPUs are present).

Each step uploads a pageable batch of small integers (exact in float32)
from the script's own function, checks its sum on the GPU against the
CPU's, and trains a linear layer; DDP keeps the ranks' weights equal,
which every rank checks through an all-gather of their checksums.
Prints "result rank=R verify=ok checksum=... min_copies=N" per rank."""
import hashlib
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

STEPS, N = 12, 1 << 20


def upload(batch, dev):
    return batch.to(dev)  # SITE:upload


def main():
    rank, local, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    model = DDP(torch.nn.Linear(1024, 16).to(dev), device_ids=[local])  # SITE:model
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)
    ok = True
    for _ in range(STEPS):
        batch = torch.randint(0, 8, (N,), generator=g).float()  # SITE:batch
        x = upload(batch, dev)  # SITE:step
        ok &= x.sum().item() == batch.sum().item()
        opt.zero_grad()
        model(x.view(-1, 1024)).square().mean().backward()
        opt.step()
    params = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()  # SITE:download
    digest = hashlib.sha256(params.numpy().tobytes()).hexdigest()[:16]
    every = [None] * world
    dist.all_gather_object(every, digest)
    ok &= len(set(every)) == 1
    dist.destroy_process_group()
    print("result rank=%d verify=%s checksum=%s min_copies=%d"
          % (rank, "ok" if ok else "FAIL", digest, STEPS), flush=True)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()  # SITE:main
