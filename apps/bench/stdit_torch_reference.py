"""The plain PyTorch way of training bench_sora's STDiT shapes, for side-by-side figures.

The same model as sora/models/stdit.h and text_encoder.h, written the way a PyTorch user would
(nn.Linear, F.scaled_dot_product_attention, torch.optim.AdamW): patch embedding, adaLN-single,
alternating spatial and temporal blocks with cross-attention to a byte-level caption encoder,
and the rectified-flow loss. Eager, or under torch.compile (--compile). Measures what bench_sora
measures for its own rows, the same way: the fp32 2048x2048 matrix-product rate before each
step and the median step time, and prints one row:

    python apps/bench/stdit_torch_reference.py --shape default --threads 2 --steps 5 [--compile]
    -> "row <impl> <step_s> <matmul_gflops> <parameters>"
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from matmul_rate import matmul_gflops  # beside this script

SHAPES = {  # must match bench_sora's
    "default": dict(hidden=128, depth=4, heads=4, latent=(4, 4, 8, 8), batch=8),
    "L": dict(hidden=256, depth=6, heads=8, latent=(4, 8, 16, 16), batch=2),
}
TEXT_TOKENS, TEXT_LAYERS = 64, 2


def heads_of(x, h):  # [N, L, D] -> [N, h, L, D/h]
    return x.view(x.shape[0], x.shape[1], h, -1).transpose(1, 2)


def merge(x):
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)


class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x, key_mask=None):
        q, k, v = self.qkv(x).chunk(3, -1)
        mask = None if key_mask is None else key_mask[:, None, None, :]
        return self.proj(merge(F.scaled_dot_product_attention(
            heads_of(q, self.heads), heads_of(k, self.heads), heads_of(v, self.heads), attn_mask=mask)))


class CrossAttention(nn.Module):
    def __init__(self, dim, context_dim, heads):
        super().__init__()
        self.heads = heads
        self.q, self.kv, self.proj = nn.Linear(dim, dim), nn.Linear(context_dim, 2 * dim), nn.Linear(dim, dim)

    def forward(self, x, context, mask):
        k, v = self.kv(context).chunk(2, -1)
        return self.proj(merge(F.scaled_dot_product_attention(
            heads_of(self.q(x), self.heads), heads_of(k, self.heads), heads_of(v, self.heads),
            attn_mask=mask[:, None, None, :])))


class TextEncoder(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.embed, self.position = nn.Embedding(259, dim), nn.Embedding(TEXT_TOKENS, dim)
        self.layers = nn.ModuleList(nn.ModuleDict(dict(
            norm1=nn.LayerNorm(dim), attn=SelfAttention(dim, heads), norm2=nn.LayerNorm(dim),
            fc1=nn.Linear(dim, 4 * dim), fc2=nn.Linear(4 * dim, dim))) for _ in range(TEXT_LAYERS))
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids):
        mask = ids.ne(0)
        h = self.embed(ids) + self.position.weight
        for l in self.layers:
            h = h + l.attn(l.norm1(h), mask)
            h = h + l.fc2(F.gelu(l.fc1(l.norm2(h)), approximate="tanh"))
        return self.norm(h), mask


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.table = nn.Parameter(torch.randn(6, dim) / dim**0.5)
        self.attn, self.cross = SelfAttention(dim, heads), CrossAttention(dim, dim, heads)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x, mod, text, mask):
        m = (self.table[None] + mod).unbind(1)
        ln = lambda t: F.layer_norm(t, t.shape[-1:], eps=1e-6)
        h = x + m[2].unsqueeze(1) * self.attn(modulate(ln(x), m[0], m[1]))
        h = h + self.cross(h.reshape(text.shape[0], -1, h.shape[-1]), text, mask).reshape(h.shape)
        return h + m[5].unsqueeze(1) * self.fc2(F.gelu(self.fc1(modulate(ln(h), m[3], m[4])), approximate="tanh"))


def sinusoid(pos, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = pos.float()[..., None] * freqs
    return torch.cat([torch.cos(args), torch.sin(args)], -1)


class Stdit(nn.Module):
    def __init__(self, c, dim, depth, heads):
        super().__init__()
        self.dim = dim
        self.patch = nn.Conv3d(c, dim, (1, 2, 2), stride=(1, 2, 2))
        self.time = nn.Sequential(nn.Linear(256, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.time_mod = nn.Linear(dim, 6 * dim)
        self.spatial = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.temporal = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.final_table = nn.Parameter(torch.randn(2, dim) / dim**0.5)
        self.final = nn.Linear(dim, 4 * c)
        self.text = TextEncoder(dim, heads)

    def forward(self, x, t, ids):
        text, mask = self.text(ids)
        B, D = x.shape[0], self.dim
        p = self.patch(x)
        T, Hp, Wp = p.shape[2:]
        S = Hp * Wp
        h = p.flatten(3).permute(0, 2, 3, 1)
        gy, gx = torch.meshgrid(torch.arange(Hp), torch.arange(Wp), indexing="ij")
        h = h + torch.cat([sinusoid(gy.flatten(), D // 2), sinusoid(gx.flatten(), D - D // 2)], -1)
        time = self.time(sinusoid(t * 1000, 256))
        mod = self.time_mod(F.silu(time)).view(B, 6, D)
        mod_s, mod_t = mod.repeat_interleave(T, 0), mod.repeat_interleave(S, 0)
        for i, (sb, tb) in enumerate(zip(self.spatial, self.temporal)):
            h = sb(h.reshape(B * T, S, D), mod_s, text, mask).view(B, T, S, D)
            rows = h.permute(0, 2, 1, 3).reshape(B * S, T, D)
            if i == 0:
                rows = rows + sinusoid(torch.arange(T), D)
            h = tb(rows, mod_t, text, mask).view(B, S, T, D).permute(0, 2, 1, 3)
        fin = (self.final_table[None] + time[:, None]).unbind(1)
        out = self.final(modulate(F.layer_norm(h.reshape(B, T * S, D), (D,), eps=1e-6), fin[0], fin[1]))
        C = x.shape[1]
        out = out.view(B, T, Hp, Wp, 1, 2, 2, C).permute(0, 7, 1, 4, 2, 5, 3, 6)
        return out.reshape(x.shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="default")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    s = SHAPES[a.shape]
    torch.manual_seed(0)
    model = Stdit(s["latent"][0], s["hidden"], s["depth"], s["heads"])
    params = sum(p.numel() for p in model.parameters())
    step_model = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    B = s["batch"]
    x0 = torch.randn(B, *s["latent"])
    ids = torch.zeros(B, TEXT_TOKENS, dtype=torch.long)
    ids[:, :24] = torch.randint(3, 259, (B, 24))
    mm = [torch.randn(2048, 2048) for _ in range(3)]
    times, rates = [], []
    for step in range(a.steps + 2):  # two warm-up steps (compilation happens in the first)
        rate = matmul_gflops(*mm)
        t0 = time.perf_counter()
        noise, t = torch.randn_like(x0), torch.rand(B)
        xt = (1 - t.view(-1, 1, 1, 1, 1)) * x0 + t.view(-1, 1, 1, 1, 1) * noise
        loss = (step_model(xt, t, ids) - (noise - x0)).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if step >= 2:
            times.append(dt)
            rates.append(rate)
    impl = "pytorch+compile" if a.compile else "pytorch"
    print(f"row {impl} {statistics.median(times):.6f} {statistics.median(rates):.3f} {params}", flush=True)


if __name__ == "__main__":
    main()
