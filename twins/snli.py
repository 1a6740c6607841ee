#!/usr/bin/env python3
"""PyTorch twin of arbor's `examples/snli` trained on one SNLI jsonl file with --holdout.

Reads the jsonl (gold label `-` skipped), holds out the LAST --holdout pairs as validation,
trains on the rest, and prints the validation accuracy every --every steps:
`step 250 valid 0.5123 examples/s 812`. See twins/README.md.
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

LABELS = ["entailment", "neutral", "contradiction"]


def sentence_tokens(obj, which):
    """arbor-data readers/snli.rs: the leaves of `sentence{k}_binary_parse` when the record has a
    non-blank one (atoms split at brackets and white space), else `sentence{k}` split on white
    space. The snli app lower-cases the words (LOWERCASE = true)."""
    parse = obj.get(f"sentence{which}_binary_parse")
    if isinstance(parse, str) and parse.strip():
        words = re.findall(r"[^()\s]+", parse)
    else:
        words = obj[f"sentence{which}"].split()
    assert words, "empty sentence"
    return [w.lower() for w in words]


def read(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            obj = json.loads(line)
            if obj["gold_label"] == "-":
                continue
            out.append((sentence_tokens(obj, 1), sentence_tokens(obj, 2), LABELS.index(obj["gold_label"])))
    return out


def main():
    ap = common.base_parser(__doc__.splitlines()[0], ["gumbel", "lstm", "on-lstm"],
                            dict(dim=100, batch=64, lr=1e-3, steps=2000, every=250, dropout=0.1,
                                 embed_init_std=0.01))
    ap.add_argument("--train", default="../shared/data/snli/snli_1.0_dev.jsonl")
    ap.add_argument("--holdout", type=int, default=1000,
                    help="the last N pairs of --train are the validation split (arbor --holdout)")
    args = ap.parse_args()
    common.setup(args)

    pairs = read(args.train)
    if not 0 < args.holdout < len(pairs):
        raise SystemExit(f"--holdout {args.holdout} must be between 1 and {len(pairs) - 1}")
    train, valid = pairs[:-args.holdout], pairs[-args.holdout:]
    if args.valid_limit:
        valid = valid[:args.valid_limit]
    vocab = common.build_vocab(s for p, h, _ in train for s in (p, h))
    common.log(f"SNLI: {len(train)} training pairs, valid {len(valid)}; vocabulary {len(vocab)}; "
               f"encoder {args.encoder} (dim {args.dim}, leaf {args.leaf})")

    def prepare(data):
        ids = [(common.encode(vocab, p), common.encode(vocab, h)) for p, h, _ in data]
        labels = [y for _, _, y in data]
        lengths = [max(len(a), len(b)) for a, b in ids]

        def batch(idx):
            x, lens = common.pad([ids[i][0] for i in idx] + [ids[i][1] for i in idx])
            return x, lens, None

        return batch, labels, lengths

    tb, tl, tlen = prepare(train)
    vb, vl, vlen = prepare(valid)
    model = common.NliModel(args, len(vocab), len(LABELS))
    common.train(args, model, len(train), tlen, tb, tl, len(valid), vlen, vb, vl)


if __name__ == "__main__":
    main()
