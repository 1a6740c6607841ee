"""Shared pieces of the PyTorch twins of arbor's example programs.

Everything here mirrors a piece of arbor (the Rust workspace this folder sits in); the comments
name the Rust file each part follows. The twins exist to compare learning curves step for step,
so they copy arbor's choices (initialisations, gate layouts, dropout placement, length-bucketed
batches, Adam epsilon, plateau decay) rather than PyTorch's habits where the two differ.
"""
import argparse
import math
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The models are written once, for these twins and for arbor-bench's (`--versus pytorch`), in
# crates/arbor-bench/pytorch/twin_models.py (that folder is packed alone for GPU machines).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "crates",
                                "arbor-bench", "pytorch"))
from twin_models import (  # noqa: E402,F401  (tree_nodes: the scripts use common.tree_nodes)
    ConvFastTreesLayer, FastTreesLayer, GumbelTreeLstm, LstmLayer, OnLstmLayer, SpinnPiNt,
    default_chunk_size, tree_nodes)

# --------------------------------------------------------------------------------------------
# Command line and set-up
# --------------------------------------------------------------------------------------------


def base_parser(description, encoders, defaults):
    """Flags shared by the three scripts; `defaults` overrides per script (dim, batch, lr…)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--encoder", choices=encoders, default=defaults.get("encoder", encoders[0]))
    ap.add_argument("--dim", type=int, default=defaults.get("dim", 100),
                    help="encoder width, embedding width and MLP width (arbor --dim)")
    ap.add_argument("--mlp-dim", type=int, default=None, help="MLP hidden width (default --dim)")
    ap.add_argument("--embed-dim", type=int, default=None,
                    help="word-vector width (arbor --embed-dim; default --dim)")
    ap.add_argument("--weight-decay", type=float, default=0.0,
                    help="L2 penalty added to the gradient by Adam (arbor --weight-decay: Burn's "
                         "AdamConfig::with_weight_decay, coupled as torch.optim.Adam's)")
    ap.add_argument("--batch", type=int, default=defaults.get("batch", 64),
                    help="examples per batch (arbor --batch-size)")
    ap.add_argument("--lr", type=float, default=defaults.get("lr", 1e-3))
    ap.add_argument("--steps", type=int, default=defaults.get("steps", 2000),
                    help="optimizer steps (arbor --max-steps)")
    ap.add_argument("--epochs", type=int, default=5,
                    help="stop after this many epochs even before --steps (arbor --epochs, default 5)")
    ap.add_argument("--every", type=int, default=defaults.get("every", 250),
                    help="evaluate every N steps (arbor --eval-every)")
    ap.add_argument("--dropout", type=float, default=defaults.get("dropout", 0.1),
                    help="dropout on the embeddings and before each MLP layer (arbor --dropout)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--leaf", choices=["lstm", "affine"], default="lstm",
                    help="Gumbel Tree-LSTM leaves (arbor --leaf)")
    ap.add_argument("--embed-init-std", type=float, default=defaults.get("embed_init_std", 1.0),
                    help="word vectors ~ N(0, std^2) (arbor --embed-init-std; the default is the arbor "
                         "program's: 1 for logic, 0.01 for sst and snli)")
    ap.add_argument("--chunk-size", type=int, default=0,
                    help="ON-LSTM chunk size (0: arbor's default, the largest divisor of --dim that is <= 10)")
    ap.add_argument("--leaf-forget-bias", default="1",
                    help="Gumbel leaf LSTM: biases start at 0 except the forget gate's at this value "
                         "(arbor since commit 8117c9b); `random` = U(±1/sqrt(d_in)) like every other "
                         "bias (arbor before that commit)")
    ap.add_argument("--tau", type=float, default=1.0, help="Gumbel-softmax temperature")
    ap.add_argument("--clip", type=float, default=5.0, help="global gradient-norm clip (0: none)")
    ap.add_argument("--plateau-factor", type=float, default=0.5,
                    help="multiply lr by this after more than --plateau-patience evaluations "
                         "without a new best (arbor's engine; 1 disables)")
    ap.add_argument("--plateau-patience", type=int, default=1)
    ap.add_argument("--cosine-steps", type=int, default=0,
                    help="arbor --lr-schedule cosine: anneal lr to 0 over N steps (0: plateau decay); "
                         "arbor's N is epochs x the first epoch's batches")
    ap.add_argument("--no-bucket", action="store_true",
                    help="plain shuffled batches instead of arbor's length-bucketed ones")
    ap.add_argument("--valid-limit", type=int, default=None,
                    help="evaluate on the first N validation examples only (arbor uses all)")
    ap.add_argument("--eval-batch", type=int, default=256)
    return ap


def setup(args):
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    if args.chunk_size == 0:
        args.chunk_size = default_chunk_size(args.dim)
    if args.mlp_dim is None:
        args.mlp_dim = args.dim
    if args.embed_dim is None:
        args.embed_dim = args.dim


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Data helpers (arbor-data: vocab.rs, batch.rs)
# --------------------------------------------------------------------------------------------

PAD, UNK = 0, 1


def build_vocab(sentences):
    """`<pad>` = 0, `<unk>` = 1, then words by decreasing count, ties alphabetical (vocab.rs)."""
    counts = {}
    for s in sentences:
        for w in s:
            counts[w] = counts.get(w, 0) + 1
    words = sorted((w for w in counts if w not in ("<pad>", "<unk>")), key=lambda w: (-counts[w], w))
    vocab = {"<pad>": PAD, "<unk>": UNK}
    for w in words:
        vocab[w] = len(vocab)
    return vocab


def encode(vocab, words):
    return [vocab.get(w, UNK) for w in words]


def make_batches(lengths, batch_size, seed, epoch, bucket=True):
    """arbor-data batch.rs `make_batches`: shuffle, stable-sort by length (bucketing), cut into
    batches of `batch_size` (the last one may be short), shuffle the batches. Same structure as
    arbor; the permutations differ (Python's RNG, not Rust's StdRng)."""
    rng = random.Random((seed << 20) ^ (epoch + 1) * 0x9E3779B97F4A7C15)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    if bucket:
        order.sort(key=lambda i: lengths[i])
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def prepare(vocab, data):
    """(words, label) examples → a batch maker over example indices, the labels, the lengths."""
    ids = [encode(vocab, w) for w, _ in data]
    labels = [y for _, y in data]
    lengths = [len(s) for s in ids]
    return (lambda idx: pad([ids[i] for i in idx])), labels, lengths


def pad(seqs):
    """Right-padded LongTensor [n, T] with <pad> = 0, and the lengths."""
    lengths = [len(s) for s in seqs]
    out = torch.zeros(len(seqs), max(lengths), dtype=torch.long)
    for k, s in enumerate(seqs):
        out[k, :len(s)] = torch.tensor(s, dtype=torch.long)
    return out, torch.tensor(lengths, dtype=torch.long)


# --------------------------------------------------------------------------------------------
# Embedding and MLP with arbor's initialisation (the encoders: twin_models.py)
# --------------------------------------------------------------------------------------------


class Embedding(nn.Module):
    """heads/embedding.rs + apps/common.rs `embedding`: N(0, std²) rows (arbor default std 1 =
    nn.Embedding's default), with the <pad> and <unk> rows at zero (`with_zero_rows`; <unk> never
    occurs in training, so its row would otherwise keep its random start). `zero_specials=False`
    gives arbor's behaviour before that change."""

    def __init__(self, n, d, std, zero_specials=True):
        super().__init__()
        self.emb = nn.Embedding(n, d)
        with torch.no_grad():
            self.emb.weight.normal_(0.0, std)
            if zero_specials:
                self.emb.weight[PAD].zero_()
                self.emb.weight[UNK].zero_()

    def forward(self, ids):
        return self.emb(ids)


class Mlp(nn.Module):
    """heads/mlp.rs with one hidden layer: dropout → Linear → ReLU → dropout → Linear."""

    def __init__(self, d_in, d_hidden, d_out, dropout):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_in, d_hidden), nn.Linear(d_hidden, d_out)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.l2(self.drop(F.relu(self.l1(self.drop(x)))))


def make_encoder(args, d_in):
    """The encoder of `--encoder` (twin_models.py); its `sentence(x, lengths)` (the gold-tree
    encoder: `sentence(x, lengths, trees)`) takes embeddings [B, T, D] and lengths [B] and
    returns the sentence vectors [B, H]: lstm = encoders/lstm.rs with the LSTM cell, 1 layer,
    pooling `last`; on-lstm, fasttrees, conv-fasttrees = the same runner with cells/on_lstm.rs,
    fast_trees.rs, conv_fast_trees.rs (kernel 3, as many convolution channels as inputs);
    gumbel = encoders/gumbel_tree_lstm.rs; spinn-pi-nt = encoders/spinn without tracking."""
    if args.encoder == "lstm":
        return LstmLayer(d_in, args.dim)
    if args.encoder == "on-lstm":
        return OnLstmLayer(d_in, args.dim, args.chunk_size)
    if args.encoder == "fasttrees":
        return FastTreesLayer(d_in, args.dim, args.chunk_size)
    if args.encoder == "conv-fasttrees":
        return ConvFastTreesLayer(d_in, args.dim, args.chunk_size)
    if args.encoder == "gumbel":
        fb = None if args.leaf_forget_bias == "random" else float(args.leaf_forget_bias)
        return GumbelTreeLstm(d_in, args.dim, args.leaf, args.tau, leaf_forget_bias=fb)
    if args.encoder == "spinn-pi-nt":
        return SpinnPiNt(d_in, args.dim)
    raise ValueError(args.encoder)


# --------------------------------------------------------------------------------------------
# Heads (arbor-heads nli.rs, classifier.rs)
# --------------------------------------------------------------------------------------------


class NliModel(nn.Module):
    """nli.rs: premises and hypotheses encoded in ONE padded batch (premises first) after
    embedding dropout; features [u; v; u−v; u⊙v] → MLP."""

    def __init__(self, args, n_vocab, n_classes):
        super().__init__()
        self.embedding = Embedding(n_vocab, args.embed_dim, args.embed_init_std)
        self.encoder = make_encoder(args, args.embed_dim)
        self.drop = nn.Dropout(args.dropout)
        self.mlp = Mlp(4 * args.dim, args.mlp_dim, n_classes, args.dropout)
        self.gold = args.encoder == "spinn-pi-nt"

    def forward(self, batch):
        ids, lengths, trees = batch
        x = self.drop(self.embedding(ids))
        s = (self.encoder.sentence(x, lengths, trees) if self.gold
             else self.encoder.sentence(x, lengths))
        n = s.shape[0] // 2
        u, v = s[:n], s[n:]
        return self.mlp(torch.cat([u, v, u - v, u * v], 1))


class ClassifierModel(nn.Module):
    """classifier.rs: embedding dropout → encoder → MLP."""

    def __init__(self, args, n_vocab, n_classes):
        super().__init__()
        self.embedding = Embedding(n_vocab, args.embed_dim, args.embed_init_std)
        self.encoder = make_encoder(args, args.embed_dim)
        self.drop = nn.Dropout(args.dropout)
        self.mlp = Mlp(args.dim, args.mlp_dim, n_classes, args.dropout)
        self.gold = args.encoder == "spinn-pi-nt"

    def forward(self, batch):
        """batch: (ids, lengths), or (ids, lengths, trees) for the gold-tree encoder (trees as
        `tree_nodes` gives them)."""
        ids, lengths = batch[0], batch[1]
        x = self.drop(self.embedding(ids))
        s = (self.encoder.sentence(x, lengths, batch[2]) if self.gold
             else self.encoder.sentence(x, lengths))
        return self.mlp(s)


# --------------------------------------------------------------------------------------------
# Training loop (arbor-train engine.rs)
# --------------------------------------------------------------------------------------------


def evaluate(model, n, make_batch, labels, lengths, batch_size):
    """Exact correct/total over the split, in length-sorted batches (as arbor evaluates)."""
    model.eval()
    order = sorted(range(n), key=lambda i: lengths[i])
    correct = 0
    with torch.inference_mode():
        for k in range(0, n, batch_size):
            idx = order[k:k + batch_size]
            pred = model(make_batch(idx)).argmax(1)
            correct += int((pred == torch.tensor([labels[i] for i in idx])).sum())
    model.train()
    return correct / max(n, 1)


def train(args, model, n_train, train_lengths, train_batch, train_labels,
          n_valid, valid_lengths, valid_batch, valid_labels):
    """arbor's engine: Adam (β 0.9/0.999, ε 1e-5: Burn's AdamConfig default), cross-entropy,
    global-norm clipping, length-bucketed shuffled batches, evaluation every N steps, plateau
    decay of the learning rate on the validation accuracy, stop at --steps or --epochs."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-5,
                           weight_decay=args.weight_decay)
    lr = args.lr
    step, epoch, train_s, seen = 0, 0, 0.0, 0
    best, best_step, bad = None, None, 0
    last_acc, last_eval = None, None
    n_params = sum(p.numel() for p in params)
    log(f"{n_train} training examples, {n_valid} validation; {n_params} trainable parameters")

    def report(select):
        nonlocal best, best_step, bad, lr, last_acc, last_eval
        acc = evaluate(model, n_valid, valid_batch, valid_labels, valid_lengths, args.eval_batch)
        eps = seen / max(train_s, 1e-9)
        print(f"step {step} valid {acc:.4f} examples/s {eps:.0f}", flush=True)
        last_acc, last_eval = acc, step
        if select and args.cosine_steps > 0:
            if best is None or acc > best:
                best, best_step = acc, step
        elif select:
            if best is None or acc > best:
                best, best_step, bad = acc, step, 0
            else:
                bad += 1
                if bad > args.plateau_patience and args.plateau_factor < 1.0:
                    lr = max(lr * args.plateau_factor, 1e-6)
                    bad = 0
                    for g in opt.param_groups:
                        g["lr"] = lr
                    log(f"step {step}: validation stalled, learning rate now {lr:.2e}")

    model.train()
    while epoch < args.epochs and step < args.steps:
        batches = make_batches(train_lengths, args.batch, args.seed, epoch, bucket=not args.no_bucket)
        for idx in batches:
            t0 = time.perf_counter()
            if args.cosine_steps > 0:
                lr = 0.5 * args.lr * (1 + math.cos(math.pi * min(step, args.cosine_steps) / args.cosine_steps))
                for g in opt.param_groups:
                    g["lr"] = lr
            logits = model(train_batch(idx))
            loss = F.cross_entropy(logits, torch.tensor([train_labels[i] for i in idx]))
            if not torch.isfinite(loss):
                raise SystemExit(f"non-finite loss {loss.item()} at step {step}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if args.clip > 0:
                nn.utils.clip_grad_norm_(params, args.clip)
            opt.step()
            train_s += time.perf_counter() - t0
            seen += len(idx)
            step += 1
            if args.every > 0 and step % args.every == 0:
                report(True)
            if step >= args.steps:
                break
        epoch += 1
    if last_eval != step:
        report(False)
    print(f"final step {step} epochs {epoch} valid {last_acc:.4f} best {best if best is not None else last_acc:.4f}"
          f" (step {best_step if best_step is not None else step}) lr {lr:.2e} train_seconds {train_s:.0f}"
          f" examples/s {seen / max(train_s, 1e-9):.0f}", flush=True)
