"""A Lightning Trainer.fit fed by a DataLoader with two worker processes
(synthetic data), for tests/gpu/corpus.sh.

Lightning moves each batch to the GPU (move_data_to_device) 40-80 Python
frames below the script's trainer.fit line.  After the epoch, the
weights must match the same SGD steps replayed on the CPU (every batch
arrived intact); their SHA-256 is the checksum the corpus compares between
runs.  Prints "result verify=ok checksum=... min_copies=N"."""
import copy
import hashlib
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

try:
    import lightning as L
except ImportError:
    import pytorch_lightning as L

BATCHES, BS = 32, 64


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))

    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def replay(start, ds):
    # The same steps on the CPU, batch by batch.
    net = copy.deepcopy(start)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for i in range(BATCHES):
        x, y = ds[i * BS:(i + 1) * BS]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net.net(x), y).backward()
        opt.step()
    return net


def main():
    L.seed_everything(0, workers=True)
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(BATCHES * BS, 512, generator=g),
                       torch.randint(0, 10, (BATCHES * BS,), generator=g))
    loader = DataLoader(ds, batch_size=BS, num_workers=2, shuffle=False)
    model = Net()
    start = copy.deepcopy(model)
    trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, deterministic=True)
    trainer.fit(model, loader)  # SITE:fit
    got = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    want = replay(start, ds).state_dict()
    ok = all(torch.allclose(got[k], want[k], rtol=1e-3, atol=1e-4) for k in want)
    digest = hashlib.sha256(b"".join(got[k].numpy().tobytes() for k in sorted(got))).hexdigest()[:16]
    print("result verify=%s checksum=%s min_copies=%d" % ("ok" if ok else "FAIL", digest, 2 * BATCHES),
          flush=True)
    if not ok:
        raise SystemExit("the GPU's weights differ from the CPU's replay")


if __name__ == "__main__":
    main()  # SITE:main
