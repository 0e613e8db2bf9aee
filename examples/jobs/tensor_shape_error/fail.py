"""NuNet's failing example: adding tensors of shapes (5, 2) and (3, 2) raises a RuntimeError.

The job must end as "failed" with the traceback in its log and the exit code kept.
"""

import torch

a = torch.ones(5, 2)
b = torch.ones(3, 2)
print(f"adding tensors of shapes {tuple(a.shape)} and {tuple(b.shape)}")
c = a + b  # RuntimeError: The size of tensor a (5) must match the size of tensor b (3) ...
print(c)
