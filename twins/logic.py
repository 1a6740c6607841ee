#!/usr/bin/env python3
"""PyTorch twin of arbor's `examples/logic` (propositional-logic inference, Bowman et al. 2015).

Trains on train0..train6 of the logic data with a seeded 10% validation split and prints the
validation accuracy every --every steps:  `step 250 valid 0.6123 examples/s 812`.
See twins/README.md for the arbor command each run mirrors and where the twin differs.
"""
import os
import random
import re
import sys

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

REL = ["<", ">", "=", "^", "|", "v", "#"]
OPERATORS = ("not", "and", "or")


def parse(s):
    """A fully bracketed formula → (nested-tuple binary tree, leaf words). A bracket with one
    child is that child (arbor-data tree.rs, unlabelled style)."""
    stack = [[]]
    for tok in re.findall(r"\(|\)|[^()\s]+", s):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            kids = stack.pop()
            if len(kids) == 1:
                node = kids[0]
            elif len(kids) == 2:
                node = (kids[0], kids[1])
            else:
                raise ValueError(f"not binary: {s}")
            stack[-1].append(node)
        else:
            stack[-1].append(tok)
    (tree,) = stack[0]
    words = []

    def leaves(t):
        if isinstance(t, tuple):
            leaves(t[0])
            leaves(t[1])
        else:
            words.append(t)

    leaves(tree)
    return tree, words


def bracket_tokens(s):
    """The tokens of a formula as written, brackets split off (arbor-data `bracket_tokens`)."""
    return re.findall(r"\(|\)|[^()\s]+", s)


def load(data_dir, max_ops):
    """train0, train1, … (consecutive from 0) of `data_dir`; pairs with ≤ max_ops operators."""
    pairs = []
    k = 0
    while os.path.isfile(os.path.join(data_dir, f"train{k}")):
        for line in open(os.path.join(data_dir, f"train{k}"), encoding="utf-8"):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            rel, left, right = line.split("\t")
            lt, lw = parse(left)
            rt, rw = parse(right)
            ops = max(sum(w in OPERATORS for w in lw), sum(w in OPERATORS for w in rw))
            if ops <= max_ops:
                # The formula as written, brackets included (the reference's `p1.split()`).
                lb, rb = bracket_tokens(left), bracket_tokens(right)
                pairs.append((REL.index(rel.strip()), lt, lw, rt, rw, lb, rb))
        k += 1
    return pairs


def main():
    ap = common.base_parser(__doc__.splitlines()[0], ["spinn-pi-nt", "lstm", "on-lstm", "fasttrees", "conv-fasttrees",
                                                               "gumbel"],
                            dict(dim=64, batch=32, lr=2e-3, steps=2000, every=250, dropout=0.0))
    ap.add_argument("--data-dir", default="../shared/data/propositional_logic")
    ap.add_argument("--max-train-operators", type=int, default=6)
    ap.add_argument("--valid-fraction", type=float, default=0.1)
    ap.add_argument("--no-brackets", action="store_true",
                    help="feed the leaves only to encoders that do not follow gold trees "
                         "(arbor's `logic --no-brackets`); by default they read the brackets")
    args = ap.parse_args()
    common.setup(args)

    pool = load(args.data_dir, args.max_train_operators)
    # arbor-data logic.rs `train_valid_split`: shuffle with the seed, the LAST floor(10%) are valid.
    random.Random(args.seed).shuffle(pool)
    n_valid = int(len(pool) * args.valid_fraction)
    train, valid = pool[:len(pool) - n_valid], pool[len(pool) - n_valid:]
    if args.valid_limit:
        valid = valid[:args.valid_limit]
    # Leaves for the gold-tree encoder (its trees shift one leaf at a time) and with
    # --no-brackets; the formulas as written otherwise (arbor-apps logic.rs `LogicInput`).
    brackets = args.encoder != "spinn-pi-nt" and not args.no_brackets
    left_i, right_i = (5, 6) if brackets else (2, 4)
    vocab = common.build_vocab(w for p in train for w in (p[left_i], p[right_i]))
    common.log(f"logic: {len(train)} training pairs, {len(valid)} validation; "
               f"input {'bracketed' if brackets else 'leaves'}; vocabulary {len(vocab)}; "
               f"encoder {args.encoder} (dim {args.dim}, chunk size {args.chunk_size}, leaf {args.leaf})")

    def prepare(pairs):
        ids = [(common.encode(vocab, p[left_i]), common.encode(vocab, p[right_i])) for p in pairs]
        trees = None
        if args.encoder == "spinn-pi-nt":
            trees = [(common.tree_nodes(p[1]), common.tree_nodes(p[3])) for p in pairs]
        labels = [p[0] for p in pairs]
        lengths = [max(len(a), len(b)) for a, b in ids]

        def batch(idx):
            ids_, lengths_ = common.pad([ids[i][0] for i in idx] + [ids[i][1] for i in idx])
            t = None
            if trees is not None:
                t = [trees[i][0] for i in idx] + [trees[i][1] for i in idx]
            return ids_, lengths_, t

        return batch, labels, lengths

    tb, tl, tlen = prepare(train)
    vb, vl, vlen = prepare(valid)
    model = common.NliModel(args, len(vocab), len(REL))
    common.train(args, model, len(train), tlen, tb, tl, len(valid), vlen, vb, vl)


if __name__ == "__main__":
    main()
