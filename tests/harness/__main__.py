"""Writes a dataset that the tests and benchmarks use, for a look or a
benchmark's --data:

    PYTHONPATH=tests:python python3 -m harness textures OUTDIR [--classes 6]
        [--train 150] [--val 50] [--seed 1]
"""

import argparse

from .datasets import TEXTURE_CLASSES, make_textures


def main() -> None:
    """python3 -m harness textures OUTDIR [--classes 6] [--train 150]
    [--val 50] [--seed 1]: writes the textures dataset, prints its splits."""
    parser = argparse.ArgumentParser(
        description="Writes a dataset the tests and benchmarks use.")
    sub = parser.add_subparsers(dest="kind", required=True)
    tex = sub.add_parser("textures", help="the convergence-parity textures")
    tex.add_argument("out_dir")
    tex.add_argument("--classes", type=int, default=len(TEXTURE_CLASSES))
    tex.add_argument("--train", type=int, default=150,
                     help="training images per class")
    tex.add_argument("--val", type=int, default=50,
                     help="validation images per class")
    tex.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    train_dir, val_dir = make_textures(args.out_dir, args.classes, args.train,
                                       args.val, args.seed)
    print(train_dir)
    print(val_dir)


if __name__ == "__main__":
    main()
