#!/usr/bin/env python3
"""PyTorch twin of arbor's `examples/listops train` (ListOps, Nangia and Bowman 2018).

Reads arbor's ListOps TSV files (`label<TAB>expression`, the expression bracketed into its binary
tree as the released files are, or flat), trains on the expressions of at most
--max-train-length tokens, and prints the validation accuracy every --every steps:
`step 1000 valid 0.5420 examples/s 3400`. With --test it scores that file at the end
(`test 0.5886`). See twins/README.md.
"""
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def parse_tree(tokens, where):
    """The binary tree the brackets spell (`( ( [MAX 2 ) ] )`) as nested pairs of leaves; a
    one-token expression is its leaf. arbor's gold-tree encoders follow this tree."""
    stack = []
    for t in tokens:
        if t == ")":
            items = []
            while stack and stack[-1] != "(":
                items.append(stack.pop())
            assert stack, f"{where}: unbalanced `)`"
            stack.pop()
            assert len(items) in (1, 2), f"{where}: a bracket holds {len(items)} parts, not 2"
            stack.append(items[0] if len(items) == 1 else (items[1], items[0]))
        else:
            stack.append(t)
    assert len(stack) == 1 and stack[0] != "(", f"{where}: flat or unbalanced, no single tree"
    return stack[0]


def read_tsv(path, trees=False):
    """arbor-data readers/listops.rs: two tab-separated columns, label first (a digit); the
    expression's tokens are its leaves -- `(` and `)` are the binary tree's brackets, not tokens;
    `[MAX`, `]` and the digits are tokens. With `trees`, each example also has its bracketed
    tree (`tree_nodes` form) for the gold-tree encoder."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            label, expr = line.split("\t")
            if line_no == 1 and not label.strip().isdigit():
                continue  # a header line
            all_tokens = re.findall(r"\(|\)|[^()\s]+", expr)
            tokens = [t for t in all_tokens if t not in "()"]
            assert tokens, f"{path}:{line_no}: empty expression"
            if trees:
                tree = common.tree_nodes(parse_tree(all_tokens, f"{path}:{line_no}"))
                out.append((tokens, int(label), tree))
            else:
                out.append((tokens, int(label)))
    return out


def prepare_gold(vocab, data):
    """common.prepare with each batch's trees: (ids, lengths, trees)."""
    make, labels, lengths = common.prepare(vocab, [(w, y) for w, y, _ in data])
    return (lambda idx: (*make(idx), [data[i][2] for i in idx])), labels, lengths


def main():
    ap = common.base_parser(__doc__.splitlines()[0], ["lstm", "on-lstm", "gumbel", "spinn-pi-nt"],
                            dict(dim=128, batch=64, lr=1e-3, steps=10**9, every=1000, dropout=0.1))
    ap.add_argument("--train", default="datasets/listops/train.tsv")
    ap.add_argument("--valid", default="datasets/listops/valid.tsv")
    ap.add_argument("--test", default=None)
    ap.add_argument("--max-train-length", type=int, default=50,
                    help="train on expressions of at most this many tokens (arbor's recipes: 50)")
    args = ap.parse_args()
    common.setup(args)

    gold = args.encoder == "spinn-pi-nt"
    train = [x for x in read_tsv(args.train, gold) if len(x[0]) <= args.max_train_length]
    valid = read_tsv(args.valid, gold)
    test = read_tsv(args.test, gold) if args.test else []
    vocab = common.build_vocab(x[0] for x in train)
    common.log(f"ListOps: {len(train)} training expressions (<= {args.max_train_length} tokens), "
               f"{len(valid)} validation; vocabulary {len(vocab)}; encoder {args.encoder} (dim {args.dim})")

    prepare = prepare_gold if gold else common.prepare
    tb, tl, tlen = prepare(vocab, train)
    vb, vl, vlen = prepare(vocab, valid)
    model = common.ClassifierModel(args, len(vocab), 10)
    common.train(args, model, len(train), tlen, tb, tl, len(valid), vlen, vb, vl)
    if test:
        xb, xl, xlen = prepare(vocab, test)
        # Long expressions: a few at a time (arbor caps padded tokens per evaluation batch too).
        acc = common.evaluate(model, len(test), xb, xl, xlen, 32)
        print(f"test {acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
