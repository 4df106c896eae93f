"""One rank of an MPI job (mpirun of Open MPI, mpi4py), for
tests/gpu/corpus.sh.

Each rank (on GPU rank % count) uploads pageable batches with PyTorch
from the script's own function, doubles them on the GPU, downloads them,
checks every byte, and the ranks agree on a checksum over MPI.
Prints "result rank=R verify=ok checksum=... min_copies=N" per rank."""
import hashlib

import torch
from mpi4py import MPI

STEPS, N = 8, 4 << 20


def roundtrip(batch, dev):
    g = batch.to(dev)  # SITE:upload
    return (g * 2).cpu()  # SITE:download


def main():
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    h = hashlib.sha256()
    ok = True
    for s in range(STEPS):
        batch = torch.arange(N, dtype=torch.float32) + 1000 * s  # SITE:batch
        back = roundtrip(batch, dev)  # SITE:step
        ok &= torch.equal(back, batch * 2)
        h.update(back.numpy().tobytes())
    digest = h.hexdigest()[:16]
    every = comm.allgather(digest)
    ok &= len(set(every)) == 1
    ok = comm.allreduce(int(ok), op=MPI.MIN) == 1
    print("result rank=%d verify=%s checksum=%s min_copies=%d"
          % (rank, "ok" if ok else "FAIL", digest, 2 * STEPS), flush=True)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()  # SITE:main
