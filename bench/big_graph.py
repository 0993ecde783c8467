#!/usr/bin/python3
"""Writes an ONNX text graph of N ops with no repeated layer (a chain of
elementwise ops and contractions in a random order with random widths), for
measuring the front end's time and memory on a graph it cannot outline
(docs/outlining.md, "Bounded resources").

    /usr/bin/python3 bench/big_graph.py 100000 -o big.onnxtext
    /usr/bin/time -v build/bin/orrery stats big.onnxtext
"""
import argparse
import random


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ops", type=int)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    unary = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp", "Erf", "Softsign"]
    widths = [8, 16, 24, 32, 40, 48, 56, 64]
    nodes, weights = [], []
    width, cur = 16, "x"
    for i in range(args.ops):
        out = f"v{i}"
        if rng.random() < 0.2:
            nxt = rng.choice(widths)
            w = f"w{i}"
            weights.append(f"float[{width}, {nxt}] {w} = {{0.0}}")
            nodes.append(f"  {out} = MatMul({cur}, {w})")
            width = nxt
        else:
            nodes.append(f"  {out} = {rng.choice(unary)}({cur})")
        cur = out
    with open(args.output, "w") as f:
        f.write('<\n  ir_version: 8,\n  opset_import: ["" : 17]\n>\n')
        f.write(f"big (float[4, 16] x) => (float[4, {width}] {cur})\n")
        f.write("<" + ", ".join(weights) + ">\n{\n")
        f.write("\n".join(nodes) + "\n}\n")


if __name__ == "__main__":
    main()
