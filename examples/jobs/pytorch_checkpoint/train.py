"""A checkpointed PyTorch training on synthetic data (CPU or GPU).

Like NuNet's checkpointed CIFAR-10 example, it keeps its state in the workspace: an epoch
counter file and the model and optimizer weights, written after each epoch (the file is
replaced atomically). When the provider restores a checkpoint and starts the job again, it
continues from the next epoch instead of starting over.
Environment: EPOCHS (default 8), EPOCH_SECONDS (extra sleep per epoch, for demos; default 0).
"""

import os
import time
from pathlib import Path

import torch
from torch import nn

workspace = Path(os.environ.get("WORKSPACE", "."))
state_dir = workspace / "checkpoint"
state_dir.mkdir(parents=True, exist_ok=True)
outputs = workspace / "outputs"
outputs.mkdir(parents=True, exist_ok=True)
epochs = int(os.environ.get("EPOCHS", "8"))
pause = float(os.environ.get("EPOCH_SECONDS", "0"))
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

# Synthetic regression data: y = x @ w + noise, the same every run (fixed seed).
inputs = torch.randn(2048, 16)
target = inputs @ torch.randn(16, 1) + 0.1 * torch.randn(2048, 1)
inputs, target = inputs.to(device), target.to(device)

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
loss_fn = nn.MSELoss()

epoch_file = state_dir / "epoch.txt"
weights_file = state_dir / "weights.pt"
start = 0
if epoch_file.exists() and weights_file.exists():
    start = int(epoch_file.read_text().strip())
    saved = torch.load(weights_file, map_location=device)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    print(f"resuming from epoch {start}")
else:
    print(f"starting a new training on {device}")

for epoch in range(start, epochs):
    for batch in range(0, len(inputs), 128):
        optimizer.zero_grad()
        loss = loss_fn(model(inputs[batch : batch + 128]), target[batch : batch + 128])
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        full = loss_fn(model(inputs), target).item()
    print(f"epoch {epoch + 1}/{epochs} loss {full:.4f}")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, weights_file)
    tmp = epoch_file.with_suffix(".tmp")
    tmp.write_text(str(epoch + 1))
    tmp.replace(epoch_file)  # the counter moves only once the weights are saved
    time.sleep(pause)

torch.save(model.state_dict(), outputs / "model.pt")
(outputs / "final_loss.txt").write_text(f"{full:.6f}\n")
print("training done; model written to outputs/model.pt")
