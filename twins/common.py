"""Shared pieces of the PyTorch twins of arbor's example programs.

Everything here mirrors a piece of arbor (the Rust workspace this folder sits in); the comments
name the Rust file each part follows. The twins exist to compare learning curves step for step,
so they copy arbor's choices (initialisations, gate layouts, dropout placement, length-bucketed
batches, Adam epsilon, plateau decay) rather than PyTorch's habits where the two differ.
"""
import argparse
import math
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

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
# Layers with arbor's initialisation
# --------------------------------------------------------------------------------------------


def default_chunk_size(d):
    """arbor-encoders lstm.rs `default_chunk_size`: largest c in 1..=min(10, d) dividing d."""
    return next(c for c in range(min(10, max(d, 1)), 0, -1) if d % c == 0)


def linear(d_in, d_out, bias=True):
    """Burn's Linear init is KaimingUniform(gain 1/sqrt 3) = U(±1/sqrt(fan_in)) for weight and
    bias: the same as PyTorch's nn.Linear default."""
    return nn.Linear(d_in, d_out, bias=bias)


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
        self.l1, self.l2 = linear(d_in, d_hidden), linear(d_hidden, d_out)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.l2(self.drop(F.relu(self.l1(self.drop(x)))))


class TreeLstm(nn.Module):
    """cells/tree_lstm.rs `BinaryTreeLstm`: gates = W[h_l; h_r] + b in the order i, f_l, f_r, o, u;
    W ~ U(±1/sqrt(2D)); the bias starts at 0 except the two forget gates at 1."""

    def __init__(self, d):
        super().__init__()
        self.d = d
        self.w = linear(2 * d, 5 * d)
        with torch.no_grad():
            self.w.bias.zero_()
            self.w.bias[d:3 * d] = 1.0

    def forward(self, hl, cl, hr, cr):
        i, fl, fr, o, u = self.w(torch.cat([hl, hr], -1)).chunk(5, -1)
        c = torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr + torch.sigmoid(i) * torch.tanh(u)
        return torch.sigmoid(o) * torch.tanh(c), c


def lstm_params_like_arbor(lstm):
    """cells/lstm.rs: input Linear(d_in, 4H) with bias, hidden Linear(H, 4H) without bias, gates
    i, f, u(g), o: PyTorch's order. So an nn.LSTM / nn.LSTMCell matches with weight_ih and bias_ih
    ~ U(±1/sqrt(d_in)), weight_hh ~ U(±1/sqrt(H)) and bias_hh fixed at 0 (frozen)."""
    for name, p in lstm.named_parameters():
        with torch.no_grad():
            if name.startswith("weight_ih") or name.startswith("bias_ih"):
                bound = 1.0 / math.sqrt(lstm.input_size)
                p.uniform_(-bound, bound)
            elif name.startswith("weight_hh"):
                bound = 1.0 / math.sqrt(lstm.hidden_size)
                p.uniform_(-bound, bound)
            elif name.startswith("bias_hh"):
                p.zero_()
                p.requires_grad_(False)


# --------------------------------------------------------------------------------------------
# Encoders (arbor-encoders, arbor-cells). Each takes embeddings [B, T, D] and lengths [B] and
# returns the sentence vectors [B, H].
# --------------------------------------------------------------------------------------------


class LstmEncoder(nn.Module):
    """encoders/lstm.rs with the LSTM cell, 1 layer, pooling `last` (the state after each
    sentence's last real word; padding steps leave the state unchanged)."""

    def __init__(self, d_in, d):
        super().__init__()
        self.rnn = nn.LSTM(d_in, d, batch_first=True)
        lstm_params_like_arbor(self.rnn)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, (h, _) = self.rnn(packed)
        return h[-1]


def ordered_update(mf, mi, gates, c):
    """master.rs `ordered_update`: master gates mf, mi [B, C] (activated), gate pre-activations
    [i; f; u; o] [B, 4H], cell c [B, H] → (h, c). ω = f~·i~, f^ = σ(f)·ω + (f~ − ω),
    i^ = σ(i)·ω + (i~ − ω) chunk-wise, c = f^·c + i^·tanh(u), h = σ(o)·tanh(c)."""
    B, C = mf.shape
    d = c.shape[1]
    S = d // C
    mf, mi = mf.unsqueeze(2), mi.unsqueeze(2)
    i, f, u, o = gates.chunk(4, 1)
    w = mf * mi
    fh = (torch.sigmoid(f).view(B, C, S) * w + (mf - w)).view(B, d)
    ih = (torch.sigmoid(i).view(B, C, S) * w + (mi - w)).view(B, d)
    c2 = fh * c + ih * torch.tanh(u)
    return torch.sigmoid(o) * torch.tanh(c2), c2


class OnLstmEncoder(nn.Module):
    """cells/on_lstm.rs + master.rs + runner.rs: one ON-LSTM layer, pooling `last`.
    Pre-activations [forget-master (C); input-master (C); i; f; u; o (H each)] =
    Linear(d_in, 4H+2C)(x) + Linear(H, 4H+2C, no bias)(h). f~ = cumax, i~ = 1 − cumax,
    ω = f~·i~, f^ = σ(f)·ω + (f~ − ω), i^ = σ(i)·ω + (i~ − ω) (chunk-wise),
    c = f^·c + i^·tanh(u), h = σ(o)·tanh(c). Padding steps keep the state."""

    def __init__(self, d_in, d, chunk_size):
        super().__init__()
        assert d % chunk_size == 0, "--dim must be a multiple of the chunk size"
        self.d, self.nc = d, d // chunk_size
        self.inp = linear(d_in, 4 * d + 2 * self.nc)
        self.hid = linear(d, 4 * d + 2 * self.nc, bias=False)

    def forward(self, x, lengths):
        B, T, _ = x.shape
        d, C = self.d, self.nc
        xp = self.inp(x)
        h = x.new_zeros(B, d)
        c = x.new_zeros(B, d)
        for t in range(T):
            a = xp[:, t] + self.hid(h)
            mf = torch.cumsum(torch.softmax(a[:, :C], -1), -1)
            mi = 1.0 - torch.cumsum(torch.softmax(a[:, C:2 * C], -1), -1)
            h2, c2 = ordered_update(mf, mi, a[:, 2 * C:], c)
            m = (lengths > t).unsqueeze(1)
            h, c = torch.where(m, h2, h), torch.where(m, c2, c)
        return h


class FastTreesEncoder(nn.Module):
    """cells/fast_trees.rs: ON-LSTM whose master gates read x_t only. Input projection
    [forget-master (C); input-master (C); i; f; u; o (H each)] = Linear(d_in, 4H+2C)(x); the
    hidden projection Linear(H, 4H, no bias)(h) adds to the gates only; the update is
    OnLstmEncoder's. Padding steps keep the state."""

    def __init__(self, d_in, d, chunk_size):
        super().__init__()
        assert d % chunk_size == 0, "--dim must be a multiple of the chunk size"
        self.d, self.nc = d, d // chunk_size
        self.inp = linear(d_in, 4 * d + 2 * self.nc)
        self.hid = linear(d, 4 * d, bias=False)

    def forward(self, x, lengths):
        B, T, _ = x.shape
        d, C = self.d, self.nc
        xp = self.inp(x)
        mf_all = torch.cumsum(torch.softmax(xp[:, :, :C], -1), -1)
        mi_all = 1.0 - torch.cumsum(torch.softmax(xp[:, :, C:2 * C], -1), -1)
        h = x.new_zeros(B, d)
        c = x.new_zeros(B, d)
        for t in range(T):
            a = xp[:, t, 2 * C:] + self.hid(h)
            h2, c2 = ordered_update(mf_all[:, t], mi_all[:, t], a, c)
            m = (lengths > t).unsqueeze(1)
            h, c = torch.where(m, h2, h), torch.where(m, c2, c)
        return h


NEG_BIG = -1e30


def masked_softmax(scores, mask):
    """cells/gumbel.rs `masked_softmax`: exact zeros outside the mask, no NaN when a row is
    all-invalid (finished sentences)."""
    filled = scores.masked_fill(~mask, NEG_BIG)
    mx = filled.max(1, keepdim=True).values.detach()
    e = (filled - mx).masked_fill(~mask, 0.0).exp() * mask.float()
    return e / e.sum(1, keepdim=True).clamp_min(1e-12)


class GumbelTreeLstm(nn.Module):
    """encoders/gumbel_tree_lstm.rs. Leaves: a left-to-right LSTM cell (bias 0, forget bias 1)
    whose (h, c) at every position are the leaves (no masking: padding leaves are never
    selected), or an affine map to [h; c]. Each layer composes all adjacent pairs with the Tree-LSTM, scores them with
    q·h~/sqrt(D) (q ~ N(0, 0.01²)), selects one with straight-through Gumbel-softmax (training:
    noise g = −log(−log u), u clamped to [1e-10, 1−1e-7]; evaluation: argmax) over the valid
    candidates, and builds new = s·h~ + (1−cum)·left + (cum−s)·right. A sentence already
    complete keeps its left column. The root h is the sentence vector."""

    def __init__(self, d_in, d, leaf="lstm", tau=1.0, query_std=0.01, leaf_forget_bias=1.0):
        super().__init__()
        self.d, self.tau, self.leaf_kind = d, tau, leaf
        if leaf == "lstm":
            self.leaf = nn.LSTMCell(d_in, d)
            lstm_params_like_arbor(self.leaf)
            if leaf_forget_bias is not None:
                # cells/lstm.rs `forget_bias: Some(v)` (set to 1 in gumbel_tree_lstm.rs since
                # arbor commit 8117c9b): the bias starts at 0 except the forget gate's at v.
                with torch.no_grad():
                    self.leaf.bias_ih.zero_()
                    self.leaf.bias_ih[d:2 * d] = leaf_forget_bias
        else:
            self.leaf = linear(d_in, 2 * d)
        self.comp = TreeLstm(d)
        self.query = nn.Parameter(torch.randn(d) * query_std)

    def leaves(self, x):
        if self.leaf_kind == "affine":
            return self.leaf(x).chunk(2, -1)
        B, T, _ = x.shape
        # nn.LSTMCell with a zero, frozen bias_hh is arbor's LstmCell; precompute nothing, the
        # fused cell is faster than a hand-written step on one CPU thread.
        h = x.new_zeros(B, self.d)
        c = x.new_zeros(B, self.d)
        hs, cs = [], []
        for t in range(T):
            h, c = self.leaf(x[:, t], (h, c))
            hs.append(h)
            cs.append(c)
        return torch.stack(hs, 1), torch.stack(cs, 1)

    def forward(self, x, lengths):
        n = int(lengths.max())
        x = x[:, :n]
        h, c = self.leaves(x)
        B = x.shape[0]
        # Rows sorted by length, longest first: at layer t the sentences still being built
        # (length >= t + 2) are a prefix, and a finished sentence's root (its column 0) is taken
        # out. This is arbor's "a complete sentence keeps its state" without computing on it.
        order = torch.argsort(lengths, descending=True, stable=True)
        h, c, lens = h[order], c[order], lengths[order]
        finished = []
        scale = math.sqrt(self.d)
        for t in range(n - 1):
            m = n - t
            k = int((lens >= t + 2).sum())
            if k < h.shape[0]:
                finished.append(h[k:, 0])
                h, c, lens = h[:k], c[:k], lens[:k]
            lh, lc, rh, rc = h[:, :m - 1], c[:, :m - 1], h[:, 1:], c[:, 1:]
            ph, pc = self.comp(lh, lc, rh, rc)
            logits = (ph @ self.query) / scale  # [k, m-1]
            valid = torch.arange(m - 1).unsqueeze(0) + (t + 1) < lens.unsqueeze(1)
            if self.training:
                u = torch.rand_like(logits).clamp(1e-10, 1.0 - 1e-7)
                scores = (logits - torch.log(-torch.log(u))) / self.tau
                soft = masked_softmax(scores, valid)
                idx = scores.detach().masked_fill(~valid, NEG_BIG).argmax(1)
                hard = F.one_hot(idx, m - 1).to(soft.dtype)
                s = hard - soft.detach() + soft
            else:
                idx = logits.masked_fill(~valid, NEG_BIG).argmax(1)
                s = F.one_hot(idx, m - 1).to(logits.dtype)
            s = s.unsqueeze(2)
            cum = s.cumsum(1)
            keep_left, take_right = 1.0 - cum, cum - s
            h = s * ph + keep_left * lh + take_right * rh
            c = s * pc + keep_left * lc + take_right * rc
        finished.append(h[:, 0])
        roots = torch.cat(finished[::-1])  # back to longest-first order
        return roots[torch.argsort(order)]


class GoldTreeLstm(nn.Module):
    """encoders/spinn (SPINN-PI-NT): the word vectors go through Linear(d_in, 2D) to [h; c]
    leaves, then the Tree-LSTM composes along the gold tree. Computed level by level (all nodes
    of the same height at once), which is what the thin stack computes too."""

    def __init__(self, d_in, d):
        super().__init__()
        self.d = d
        self.proj = linear(d_in, 2 * d)
        self.comp = TreeLstm(d)

    def forward(self, x, lengths, trees):
        """x [B, T, D] embeddings; trees: per sentence, a list of internal nodes
        (left, right, height) in post-order with local ids (leaves 0..n-1, internal node j is
        n + j); the root is the last internal node (or leaf 0 for one word)."""
        B, T, _ = x.shape
        mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
        leaves = self.proj(x[mask])  # [sum n, 2D] in sentence order
        nl = leaves.shape[0]
        H, C = leaves.chunk(2, -1)
        n_int = sum(len(t) for t in trees)
        Hs = torch.cat([H, H.new_zeros(n_int, self.d)])
        Cs = torch.cat([C, C.new_zeros(n_int, self.d)])
        by_h = {}
        roots = []
        leaf_off, int_off = 0, nl
        for b, nodes in enumerate(trees):
            n = int(lengths[b])
            gid = lambda k: leaf_off + k if k < n else int_off + (k - n)  # noqa: E731
            for j, (l, r, ht) in enumerate(nodes):
                by_h.setdefault(ht, ([], [], []))
                lst = by_h[ht]
                lst[0].append(int_off + j)
                lst[1].append(gid(l))
                lst[2].append(gid(r))
            roots.append(int_off + len(nodes) - 1 if nodes else leaf_off)
            leaf_off += n
            int_off += len(nodes)
        for ht in sorted(by_h):
            idx, li, ri = (torch.tensor(v) for v in by_h[ht])
            hh, cc = self.comp(Hs[li], Cs[li], Hs[ri], Cs[ri])
            Hs = Hs.index_copy(0, idx, hh)
            Cs = Cs.index_copy(0, idx, cc)
        return Hs[torch.tensor(roots)]


def tree_nodes(tree):
    """A nested-tuple binary tree (leaves are anything else) → its internal nodes
    [(left, right, height)] in post-order with local ids (leaves numbered left to right 0..n-1,
    internal node j numbered n + j)."""
    n_leaves = [0]

    def count(t):
        if isinstance(t, tuple):
            count(t[0])
            count(t[1])
        else:
            n_leaves[0] += 1

    count(tree)
    n = n_leaves[0]
    nodes = []
    next_leaf = [0]

    def walk(t):
        if not isinstance(t, tuple):
            next_leaf[0] += 1
            return next_leaf[0] - 1, 0
        l, hl = walk(t[0])
        r, hr = walk(t[1])
        nodes.append((l, r, 1 + max(hl, hr)))
        return n + len(nodes) - 1, 1 + max(hl, hr)

    walk(tree)
    return nodes


def make_encoder(args, d_in):
    if args.encoder == "lstm":
        return LstmEncoder(d_in, args.dim)
    if args.encoder == "on-lstm":
        return OnLstmEncoder(d_in, args.dim, args.chunk_size)
    if args.encoder == "fasttrees":
        return FastTreesEncoder(d_in, args.dim, args.chunk_size)
    if args.encoder == "gumbel":
        fb = None if args.leaf_forget_bias == "random" else float(args.leaf_forget_bias)
        return GumbelTreeLstm(d_in, args.dim, args.leaf, args.tau, leaf_forget_bias=fb)
    if args.encoder == "spinn-pi-nt":
        return GoldTreeLstm(d_in, args.dim)
    raise ValueError(args.encoder)


# --------------------------------------------------------------------------------------------
# Heads (arbor-heads nli.rs, classifier.rs)
# --------------------------------------------------------------------------------------------


class NliModel(nn.Module):
    """nli.rs: premises and hypotheses encoded in ONE padded batch (premises first) after
    embedding dropout; features [u; v; u−v; u⊙v] → MLP."""

    def __init__(self, args, n_vocab, n_classes):
        super().__init__()
        self.embedding = Embedding(n_vocab, args.dim, args.embed_init_std)
        self.encoder = make_encoder(args, args.dim)
        self.drop = nn.Dropout(args.dropout)
        self.mlp = Mlp(4 * args.dim, args.mlp_dim, n_classes, args.dropout)
        self.gold = args.encoder == "spinn-pi-nt"

    def forward(self, batch):
        ids, lengths, trees = batch
        x = self.drop(self.embedding(ids))
        s = self.encoder(x, lengths, trees) if self.gold else self.encoder(x, lengths)
        n = s.shape[0] // 2
        u, v = s[:n], s[n:]
        return self.mlp(torch.cat([u, v, u - v, u * v], 1))


class ClassifierModel(nn.Module):
    """classifier.rs: embedding dropout → encoder → MLP."""

    def __init__(self, args, n_vocab, n_classes):
        super().__init__()
        self.embedding = Embedding(n_vocab, args.dim, args.embed_init_std)
        self.encoder = make_encoder(args, args.dim)
        self.drop = nn.Dropout(args.dropout)
        self.mlp = Mlp(args.dim, args.mlp_dim, n_classes, args.dropout)
        self.gold = args.encoder == "spinn-pi-nt"

    def forward(self, batch):
        """batch: (ids, lengths), or (ids, lengths, trees) for the gold-tree encoder (trees as
        `tree_nodes` gives them)."""
        ids, lengths = batch[0], batch[1]
        x = self.drop(self.embedding(ids))
        s = self.encoder(x, lengths, batch[2]) if self.gold else self.encoder(x, lengths)
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
    opt = torch.optim.Adam(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-5)
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
