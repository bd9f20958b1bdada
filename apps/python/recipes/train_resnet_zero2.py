"""Train a torchvision-style ResNet, defined in Python, under ZeRO-2.

    colossal run --nproc_per_node 2 python apps/python/recipes/train_resnet_zero2.py
    colossal run --nproc_per_node 2 python apps/python/recipes/train_resnet_zero2.py --data_dir photos/

The model is a plain torch.nn.Module (ResNet's BasicBlock design: 3x3 convolutions, batch norm,
identity shortcuts, a strided stage per width), the data a torch Dataset and DataLoader with a
DistributedSampler. ZeRO-2 shards the optimizer state and gradients over the ranks; the forward
and backward are PyTorch's own. Batch-norm statistics stay per rank, as under torch DDP without
SyncBatchNorm.

Data: --data_dir ROOT/CLASS/*.png|jpg (read with torchvision if it is installed), or by default a
generated set of 32x32 images whose class is the quadrant holding a bright square under noise,
so the recipe runs anywhere. Every --eval_interval steps it reports held-out accuracy; at the end
it saves a resumable checkpoint (--checkpoint_dir) and the weights (--output).
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import colossal


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data_dir", default="", help="ROOT/CLASS/image files (default: the generated quadrant set)")
    p.add_argument("--image_size", type=int, default=32)
    p.add_argument("--width", type=int, default=16, help="channels of the first stage (doubling per stage)")
    p.add_argument("--blocks", type=int, nargs="+", default=[1, 1, 1], help="BasicBlocks per stage")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--global_batch_size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight_decay", type=float, default=5e-4)
    p.add_argument("--precision", default="fp32", help="fp32 | bf16 | fp16")
    p.add_argument("--eval_interval", type=int, default=50)
    p.add_argument("--checkpoint_dir", default="out/resnet/checkpoints")
    p.add_argument("--output", default="out/resnet/model")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


# ---- the model: torchvision's ResNet layout, small -------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class ResNet(nn.Module):
    def __init__(self, num_classes, blocks=(1, 1, 1), width=16, in_channels=3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        stages, cin = [], width
        for i, n in enumerate(blocks):
            cout = width * 2 ** i
            stages.append(nn.Sequential(*[BasicBlock(cin if j == 0 else cout, cout, 2 if (i and j == 0) else 1)
                                          for j in range(n)]))
            cin = cout
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---- the data ----------------------------------------------------------------------------------

class Quadrants(Dataset):
    """Noise images with a bright square in one quadrant; the label is the quadrant (4 classes)."""

    classes = ["top-left", "top-right", "bottom-left", "bottom-right"]

    def __init__(self, n, size, seed):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 4, (n,), generator=g)
        self.images = torch.randn(n, 3, size, size, generator=g) * 0.5
        half, side = size // 2, size // 4
        offsets = torch.randint(0, half - side + 1, (n, 2), generator=g)
        for i in range(n):
            q = int(self.labels[i])
            y = (q // 2) * half + int(offsets[i, 0])
            x = (q % 2) * half + int(offsets[i, 1])
            self.images[i, :, y:y + side, x:x + side] += 2.0

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def image_folder(root, size):
    try:
        from torchvision import datasets, transforms
    except ImportError:
        raise SystemExit("--data_dir reads images with torchvision: pip install torchvision (the same version "
                         "family as torch)")
    t = transforms.Compose([transforms.Resize((size, size)), transforms.ToTensor()])
    data = datasets.ImageFolder(root, transform=t)
    n_eval = max(1, len(data) // 10)
    g = torch.Generator().manual_seed(0)
    train, held_out = torch.utils.data.random_split(data, [len(data) - n_eval, n_eval], generator=g)
    return train, held_out, data.classes


def accuracy(model, loader, world):
    """Held-out accuracy over every rank's share."""
    model.eval()
    counts = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for x, y in loader:
            counts[0] += (model(x).argmax(1) == y).sum()
            counts[1] += len(y)
    model.train()
    if world > 1:
        colossal.dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def main():
    a = parse_args()
    rank, world = colossal.launch(seed=a.seed)
    if a.global_batch_size % world:
        raise SystemExit(f"--global_batch_size {a.global_batch_size} does not split over {world} ranks")
    if a.data_dir:
        if not os.path.isdir(a.data_dir):
            raise SystemExit(f"--data_dir: {a.data_dir} is not a directory")
        train, held_out, classes = image_folder(a.data_dir, a.image_size)
    else:
        train, held_out = Quadrants(4096, a.image_size, seed=1), Quadrants(512, a.image_size, seed=2)
        classes = Quadrants.classes
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=a.seed, drop_last=True)
    loader = DataLoader(train, batch_size=a.global_batch_size // world, sampler=sampler, drop_last=True)
    eval_loader = DataLoader(held_out, batch_size=256,
                             sampler=DistributedSampler(held_out, num_replicas=world, rank=rank, shuffle=False))

    model = ResNet(len(classes), a.blocks, a.width)
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=a.lr, total_steps=a.steps)
    booster = colossal.Booster(plugin="zero2", precision=a.precision)
    model, optimizer, criterion, loader, scheduler = booster.boost(model, optimizer, nn.CrossEntropyLoss(), loader,
                                                                   scheduler)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"ResNet {a.blocks} x width {a.width} ({params / 1e3:.0f}K parameters), {len(classes)} classes, "
              f"{len(train)} training images; {booster}, {world} rank(s)", flush=True)

    step, epoch, t0 = 0, 0, time.time()
    while step < a.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x.to(optimizer.compute_dtype)), y)
            booster.backward(loss, optimizer)
            optimizer.step()
            scheduler.step()
            step += 1
            if step % a.eval_interval == 0 or step == a.steps:
                acc = accuracy(model, eval_loader, world)
                if rank == 0:
                    images_s = step * a.global_batch_size / (time.time() - t0)
                    print(f"step {step}/{a.steps} loss {loss.item():.4f} held-out accuracy {acc:.4f} "
                          f"images/s {images_s:.0f}", flush=True)
            if step == a.steps:
                break
        epoch += 1

    # Every rank's replica is the same after each step (ZeRO-2 gathers the updated shards).
    checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1)
    spread = checksum.clone()
    colossal.dist.all_reduce(spread, op="max")
    lowest = checksum.clone()
    colossal.dist.all_reduce(lowest, op="min")
    booster.save_checkpoint(model, a.checkpoint_dir, step=step, epoch=epoch)
    booster.save_model(model, a.output)
    if rank == 0:
        print(f"replicas agree: {bool((spread - lowest).abs().item() <= 1e-9 * abs(checksum.item()))}")
        print(f"final held-out accuracy {acc:.4f}; saved {a.checkpoint_dir}/step-{step} and {a.output}", flush=True)


if __name__ == "__main__":
    main()
