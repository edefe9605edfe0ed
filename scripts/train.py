#!/usr/bin/env python3
"""A small GPT-style training loop: the workload gemmshim is meant for.

Token and position embeddings, --layers transformer blocks (causal
self-attention and a 4x MLP, every projection an nn.Linear), a final
LayerNorm and an nn.Linear head, AdamW, under
torch.autocast(dtype=torch.bfloat16). Every Linear is a cuBLAS GEMM on CUDA:
forward through addmm (cublasLtMatmul with a bias epilogue where PyTorch can)
or mm (the head, no bias: cublasGemmEx), backward through mm for the input
and weight gradients, so a model with N Linear modules makes 3N GEMMs a step. Attention runs in
scaled_dot_product_attention (flash/efficient kernels, not cuBLAS) so the
routes under test only see the Linears.

Data is synthetic and made here (no downloads): sequences from a fixed random
Markov chain in which each token has four likely successors, so the loss
falls from ln(vocab) towards the chain's entropy (about 1.1 nats) and a
broken GEMM shows as a loss that does not fall. Everything is seeded.

Output: one line per step, "step N loss X ms Y", then one JSON line with the
summary (final loss, mean step time without the --warmup first steps, the
per-step losses and start times for the report's --steps (python/gemmshim/report/expect.py)).

  LD_PRELOAD=build/libgemmshim.so GEMMSHIM_LOG=/tmp/gs-%p.jsonl python scripts/train.py
  python scripts/train.py --device cpu --steps 3 --layers 1 --d-model 64 --seq 32 --batch 2
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The chain's successor probabilities: entropy ~1.1 nats per token.
SUCCESSOR_PROBS = (0.55, 0.25, 0.15, 0.05)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out of the mean step time")
    ap.add_argument("--no-autocast", action="store_true",
                    help="train in fp32 (the reference the bf16 runs are compared with)")
    ap.add_argument("--summary", help="also write the summary JSON line to this file")
    args = ap.parse_args(argv)
    if args.d_model % args.heads:
        ap.error("--d-model must be a multiple of --heads")
    if args.steps < 1 or args.layers < 1 or args.seq < 2 or args.batch < 1:
        ap.error("--steps, --layers, --batch must be >= 1 and --seq >= 2")
    return args


def markov_batches(steps, batch, seq, vocab, seed):
    """steps x batch sequences of seq + 1 tokens (inputs and shifted
    targets), on the CPU, from a seeded generator: the same on every device."""
    gen = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, len(SUCCESSOR_PROBS)), generator=gen)
    probs = torch.tensor(SUCCESSOR_PROBS)
    rows = steps * batch
    tokens = torch.empty(rows, seq + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, vocab, (rows,), generator=gen)
    choice = torch.multinomial(probs, rows * seq, replacement=True, generator=gen).view(rows, seq)
    for t in range(seq):
        tokens[:, t + 1] = successors[tokens[:, t], choice[:, t]]
    return tokens.view(steps, batch, seq + 1)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, seq, d, layers, heads):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def linear_inventory(model):
    """Number of nn.Linear modules and their distinct (in, out, bias) shapes:
    the shim keys call sites on caller and shape, so layers of one shape
    share a site."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    shapes = sorted({(m.in_features, m.out_features, m.bias is not None) for m in linears})
    return len(linears), [list(s) for s in shapes]


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("train: no CUDA device visible to PyTorch (use --device cpu)", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    data = markov_batches(args.steps, args.batch, args.seq, args.vocab, args.seed)
    model = GPT(args.vocab, args.seq, args.d_model, args.layers, args.heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    n_linear, linear_shapes = linear_inventory(model)
    amp_dtype = None if args.no_autocast else torch.bfloat16
    print(f"train: {sum(p.numel() for p in model.parameters())} parameters, {n_linear} nn.Linear "
          f"({len(linear_shapes)} distinct shapes), device {device}, "
          f"{'fp32' if amp_dtype is None else 'autocast bf16'}, torch {torch.__version__}", flush=True)

    losses, step_ms, step_start_ns = [], [], []
    for step in range(args.steps):
        batch = data[step].to(device, non_blocking=False)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        # Wall-clock start (CLOCK_REALTIME, as the routing log's t_ns), so
        # the log's calls can be assigned to steps.
        step_start_ns.append(time.time_ns())
        t0 = time.perf_counter()
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp_dtype is not None):
            logits = model(inputs)
            loss = F.cross_entropy(logits.float().view(-1, args.vocab), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()  # waits for the step's work
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        ms = (time.perf_counter() - t0) * 1e3
        losses.append(value)
        step_ms.append(ms)
        print(f"step {step} loss {value:.4f} ms {ms:.2f}", flush=True)
        if not math.isfinite(value):
            print("train: loss is not finite; stopping", file=sys.stderr)
            break

    timed = step_ms[args.warmup:] or step_ms
    tail = losses[-10:]
    summary = {
        "summary": True,
        "final_loss": losses[-1],
        "final_window_loss": sum(tail) / len(tail),
        "final_window": len(tail),
        "first_loss": losses[0],
        "mean_step_ms": sum(timed) / len(timed),
        "warmup_steps": len(step_ms) - len(timed),
        "steps_run": len(losses),
        "finite": all(math.isfinite(x) for x in losses),
        "losses": losses,
        "step_ms": step_ms,
        "step_start_ns": step_start_ns,
        "n_linear": n_linear,
        "linear_shapes": linear_shapes,
        "gemms_per_step_expected": 3 * n_linear,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "precision": "fp32" if amp_dtype is None else "autocast-bf16",
        "torch": torch.__version__,
        "args": vars(args),
        "gemmshim_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("GEMMSHIM_")},
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
    }
    line = json.dumps(summary)
    print(line, flush=True)
    if args.summary:
        with open(args.summary, "w", encoding="utf-8") as f:
            f.write(line + "\n")
    return 0 if summary["finite"] else 1


if __name__ == "__main__":
    sys.exit(main())
