#!/usr/bin/env python3
"""PyTorch twin of arbor's `examples/sst` on the GLUE SST-2 tsv files (sentence classifier).

Trains on train.tsv, validates on dev.tsv, and prints the validation accuracy every --every
steps:  `step 250 valid 0.8123 examples/s 812`. See twins/README.md.
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def read_tsv(path):
    """arbor-data readers/sst.rs `read_sst2_tsv`: two columns in either order (a header with a
    `label` column says which), CRLF accepted, cells trimmed, tokens = whitespace split. The sst
    app lower-cases the words (LOWERCASE = true)."""
    out = []
    layout = None
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            a, b = (c.strip() for c in line.split("\t"))
            if layout is None:
                if line_no == 1 and "label" in (a.lower(), b.lower()):
                    layout = "label_first" if a.lower() == "label" else "sentence_first"
                    continue
                layout = "sentence_first" if b in ("0", "1") or a not in ("0", "1") else "label_first"
            text, label = (a, b) if layout == "sentence_first" else (b, a)
            assert label in ("0", "1"), f"{path}:{line_no}: label {label!r}"
            words = [w.lower() for w in text.split()]
            assert words, f"{path}:{line_no}: empty sentence"
            out.append((words, int(label == "1")))
    return out


def main():
    ap = common.base_parser(__doc__.splitlines()[0], ["lstm", "gumbel", "on-lstm"],
                            dict(dim=100, batch=64, lr=1e-3, steps=2000, every=250, dropout=0.1,
                                 embed_init_std=0.01))
    ap.add_argument("--train", default="../shared/data/sst2_glue/train.tsv")
    ap.add_argument("--valid", default="../shared/data/sst2_glue/dev.tsv")
    args = ap.parse_args()
    common.setup(args)

    train, valid = read_tsv(args.train), read_tsv(args.valid)
    if args.valid_limit:
        valid = valid[:args.valid_limit]
    vocab = common.build_vocab(w for w, _ in train)
    common.log(f"SST-2: {len(train)} training sentences, {len(valid)} validation; vocabulary {len(vocab)}; "
               f"encoder {args.encoder} (dim {args.dim}, leaf {args.leaf})")

    tb, tl, tlen = common.prepare(vocab, train)
    vb, vl, vlen = common.prepare(vocab, valid)
    model = common.ClassifierModel(args, len(vocab), 2)
    common.train(args, model, len(train), tlen, tb, tl, len(valid), vlen, vb, vl)


if __name__ == "__main__":
    main()
