#!/usr/bin/env python3
"""PyTorch peer for scalelab's GPU training step: the same GPT (pre-LN blocks, tanh GELU, tied LM
head, mean cross-entropy, AdamW) trained on the same GPU, so tools/gpu_measure.sh can report
scalelab's tokens/s as a ratio measured in one run.

Rows: fp32 (TF32 off, as scalelab's fp32 path), bf16 autocast (fp32 master weights, as scalelab's
stage 03), each eager and under torch.compile. Attention is written out (scores, mask, softmax,
probabilities @ v) like scalelab's clear attention; --sdpa adds rows with PyTorch's fused
scaled_dot_product_attention, the mark a flash-attention stage will aim at.

Prints one JSON object per row and, with --json, writes them all to a file.
Timing: CUDA events around each step after warm-up; the median of --steps steps.
"""
import argparse
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, sdpa):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.NH, self.sdpa = NH, sdpa

    def attention(self, x):
        B, T, C = x.shape
        # (B,T,3C) -> three (B,NH,T,hs)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (B,NH,T,T)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, maxT, C, L, NH, sdpa):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(maxT, C)
        self.h = nn.ModuleList(Block(C, NH, sdpa) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for name, p in self.named_parameters():  # GPT-2 initialisation
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def measure(args, precision, compiled, sdpa):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = GPT(args.V, args.T, args.C, args.L, args.NH, sdpa).to(dev)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    fwd = torch.compile(model) if compiled else model
    idx = torch.randint(0, args.V, (args.B, args.T), device=dev)
    tgt = torch.randint(0, args.V, (args.B, args.T), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(precision == "bf16")):
            loss = fwd(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.steps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    times.sort()
    med = times[len(times) // 2]
    tokens = args.B * args.T
    # 6 N per token for the weights (forward 2, backward 4) plus the attention products
    # (QK^T and PV: 4 T C per token per layer forward, 3x that with backward, causal or not).
    flops = 6 * params * tokens + 12 * args.L * args.B * args.T * args.T * args.C
    row = dict(peer="pytorch-" + torch.__version__, precision=precision,
               mode="compile" if compiled else "eager", attention="sdpa" if sdpa else "explicit",
               B=args.B, T=args.T, params=params, ms_per_step=round(med * 1e3, 3),
               tokens_per_s=round(tokens / med), tflops=round(flops / med / 1e12, 2),
               loss=round(float(loss), 4), peak_mem_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2))
    del model, opt, fwd
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for k, d in dict(V=50257, T=1024, C=768, L=12, NH=12, B=8, steps=20, warmup=5).items():
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--sdpa", action="store_true", help="also rows with fused attention")
    ap.add_argument("--json", help="write all rows to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu_bench: no CUDA device; nothing measured", file=sys.stderr)
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as in scalelab's fp32 path
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    for sdpa in ([False, True] if args.sdpa else [False]):
        for precision in args.precisions.split(","):
            for mode in args.modes.split(","):
                try:
                    row = measure(args, precision, mode == "compile", sdpa)
                except Exception as e:  # a failed torch.compile is a result too, not a crash
                    row = dict(precision=precision, mode=mode, attention="sdpa" if sdpa else "explicit",
                               error=f"{type(e).__name__}: {str(e)[:300]}")
                print(json.dumps(row), flush=True)
                rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
