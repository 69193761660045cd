#!/usr/bin/python3
"""PyTorch oracle for lab 00: the scalelab GPT written independently in PyTorch.

Builds the same model as reference/model (pre-LayerNorm GPT-2 blocks, causal attention,
GELU tanh form, LayerNorm eps 1e-5, LM head tied to the token embedding, mean cross-entropy,
nn.Linear weights stored (out, in), nanoGPT state-dict names), all in float32, on the "tiny"
config. It initialises the weights itself from a fixed seed, runs one fixed batch, and writes
two safetensors files (by hand, with struct + json: no safetensors package is needed):

  gpt_tiny_init.safetensors    the initial weights exactly as nanoGPT's state_dict() names them
                               (including the tied duplicate "lm_head.weight")
  gpt_tiny_oracle.safetensors  tokens, targets (I32, B x T); logits (F32, B x T x V); loss (F32,
                               scalar); losses (F32, 4): the loss before each of 3 AdamW training
                               steps and after the last; grad.<name>: d loss / d parameter at the
                               initial weights; step3.<name>: parameters after 3 training steps
                               (forward, backward, AdamW on the same batch each step; the key
                               biases' gradients, zero in exact arithmetic, are set to 0 before
                               each update: see zero_key_bias_grads);
                               adamw3.<name>: parameters after 3 AdamW steps that all use the
                               fixed gradient grad.<name> (the optimizer alone, no model)

Run it with the system interpreter that has torch (Debian's python3-torch):
    /usr/bin/python3 tools/torch_oracle.py --out tests/oracle
tools/regen_oracle.sh does that, and `tools/regen_oracle.sh --check` verifies that the
committed files are what this script produces.
"""
import argparse
import json
import math
import os
import struct
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # the first python3 on PATH may lack torch
    sys.exit("torch_oracle.py needs PyTorch: run it with /usr/bin/python3 (Debian's python3-torch)")

CONFIG = dict(name="tiny", vocab_size=64, max_seq_len=16, channels=32, num_layers=2, num_heads=4)
B, T = 4, 16
SEED = 20240601
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
STEPS = 3


# ---- the model ---------------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.NH = NH

    def forward(self, x):
        Bx, Tx, C = x.shape
        hs = C // self.NH
        q, k, v = self.c_attn(x).split(C, dim=2)  # qkv is laid out [q | k | v], heads contiguous
        q = q.view(Bx, Tx, self.NH, hs).transpose(1, 2)  # (B, NH, T, hs)
        k = k.view(Bx, Tx, self.NH, hs).transpose(1, 2)
        v = v.view(Bx, Tx, self.NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(Tx, Tx, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(Bx, Tx, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = CausalSelfAttention(C, NH)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        V, Tm, C = cfg["vocab_size"], cfg["max_seq_len"], cfg["channels"]
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, C),
            wpe=nn.Embedding(Tm, C),
            h=nn.ModuleList([Block(C, cfg["num_heads"]) for _ in range(cfg["num_layers"])]),
            ln_f=nn.LayerNorm(C, eps=1e-5)))
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in GPT-2 and scalelab

    def forward(self, idx, targets):
        Tx = idx.shape[1]
        pos = torch.arange(Tx)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))  # mean
        return logits, loss


def layout_names(cfg):
    """scalelab's ParamLayout order (nanoGPT's state-dict order without lm_head)."""
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for l in range(cfg["num_layers"]):
        p = f"transformer.h.{l}."
        names += [p + s for s in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                  "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")]
    return names + ["transformer.ln_f.weight", "transformer.ln_f.bias"]


def init_weights(model, cfg, seed):
    """Deterministic, deliberately non-default weights, so that every term of every backward
    matters: LayerNorm weights away from 1 and biases away from 0 (else a swapped dweight/dbias
    would go unnoticed), attention scores of order 1 (else softmax is nearly uniform), GELU
    inputs of order 1 (its curved part), logits of order 1."""
    gen = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    C = cfg["channels"]
    with torch.no_grad():
        for name in layout_names(cfg):
            p = params[name]
            if ".ln_" in name:
                base = 1.0 if name.endswith(".weight") else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            elif name.endswith("c_proj.weight"):
                p.copy_((0.5 / math.sqrt(p.shape[1])) * torch.randn(p.shape, generator=gen))
            elif name.endswith(("c_attn.weight", "c_fc.weight")):
                p.copy_((1.0 / math.sqrt(C)) * torch.randn(p.shape, generator=gen))
            else:  # wte, wpe
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))


def zero_key_bias_grads(model, cfg):
    """The key part of c_attn.bias (elements C..2C) has gradient exactly 0 in exact arithmetic:
    a key bias b adds q.b to every score of a softmax row, and softmax ignores a constant added
    to a whole row. In floats the gradient is rounding noise (~1e-9), and AdamW, which divides by
    sqrt(v), would turn that noise into updates of up to lr in arbitrary directions, different
    in every implementation. Zeroing it (the C++ test does the same) leaves only weight decay."""
    C = cfg["channels"]
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_attn.bias.grad[C:2 * C] = 0


# ---- safetensors, by hand ----------------------------------------------------------------------

def tensor_bytes(t):
    t = t.detach().contiguous().view(-1)
    if t.dtype == torch.float32:
        return "F32", struct.pack("<%df" % t.numel(), *t.tolist())  # float -> Python float is exact
    if t.dtype in (torch.int32, torch.int64):
        return "I32", struct.pack("<%di" % t.numel(), *t.tolist())
    raise ValueError(f"unsupported dtype {t.dtype}")


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, torch tensor). Header padded with spaces to 8 bytes."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors:
        dtype, blob = tensor_bytes(t)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


# ---- the oracle --------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/oracle", help="directory for the two .safetensors files")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    cfg = CONFIG
    model = GPT(cfg)
    init_weights(model, cfg, SEED)
    names = layout_names(cfg)
    params = dict(model.named_parameters())
    assert set(params) == set(names), "the PyTorch model's parameters differ from scalelab's layout"
    init = {n: params[n].detach().clone() for n in names}

    gen = torch.Generator().manual_seed(SEED + 1)
    tokens = torch.randint(0, cfg["vocab_size"], (B, T), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, cfg["vocab_size"], (B, T), generator=gen, dtype=torch.int64)

    # Forward and backward at the initial weights.
    logits, loss = model(tokens, targets)
    loss.backward()
    grads = {n: params[n].grad.detach().clone() for n in names}
    model.zero_grad(set_to_none=True)

    # Training: 3 steps of forward, backward, AdamW on the same batch.
    opt = torch.optim.AdamW([params[n] for n in names], foreach=False, **ADAMW)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, step_loss = model(tokens, targets)
        losses.append(step_loss.item())
        step_loss.backward()
        zero_key_bias_grads(model, cfg)
        opt.step()
    with torch.no_grad():
        losses.append(model(tokens, targets)[1].item())
    step3 = {n: params[n].detach().clone() for n in names}
    assert losses[0] == loss.item()

    # The optimizer alone: 3 AdamW steps from the initial weights with the fixed gradient.
    alone = [init[n].clone().requires_grad_(True) for n in names]
    opt_alone = torch.optim.AdamW(alone, foreach=False, **ADAMW)
    for _ in range(STEPS):
        for p, n in zip(alone, names):
            p.grad = grads[n].clone()
        opt_alone.step()
    adamw3 = {n: p.detach().clone() for p, n in zip(alone, names)}

    meta = {k: str(v) for k, v in cfg.items()}
    meta.update(format="pt", generator="tools/torch_oracle.py", torch_version=torch.__version__, seed=str(SEED))
    # nanoGPT's state_dict() lists the tied LM head a second time, as lm_head.weight.
    weights = [(n, init[n]) for n in names] + [("lm_head.weight", init["transformer.wte.weight"])]
    write_safetensors(os.path.join(args.out, "gpt_tiny_init.safetensors"), weights, meta)

    meta.update(batch=str(B), seq_len=str(T), lr=repr(ADAMW["lr"]), beta1=repr(ADAMW["betas"][0]),
                beta2=repr(ADAMW["betas"][1]), eps=repr(ADAMW["eps"]), weight_decay=repr(ADAMW["weight_decay"]),
                adamw_steps=str(STEPS))
    fixture = [("tokens", tokens.to(torch.int32)), ("targets", targets.to(torch.int32)),
               ("logits", logits), ("loss", loss.detach().reshape(())),
               ("losses", torch.tensor(losses, dtype=torch.float32))]
    fixture += [("grad." + n, grads[n]) for n in names]
    fixture += [("step3." + n, step3[n]) for n in names]
    fixture += [("adamw3." + n, adamw3[n]) for n in names]
    write_safetensors(os.path.join(args.out, "gpt_tiny_oracle.safetensors"), fixture, meta)
    print(f"loss {loss.item():.6f}; losses over {STEPS} AdamW steps {[round(x, 6) for x in losses]}")
    print(f"wrote {args.out}/gpt_tiny_init.safetensors and {args.out}/gpt_tiny_oracle.safetensors")


if __name__ == "__main__":
    main()
