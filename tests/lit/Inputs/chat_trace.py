"""A chat trace for `orrery serve --trace`: every request's prompt starts
with one shared system prompt, then the user's turn; arrivals Poisson at a
rate. Deterministic (seeded).

    chat_trace.py OUT.csv --requests N --rate R --system TOKENS
                  [--user LO HI] [--output LO HI]
"""
import argparse
import random

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--requests", type=int, default=600)
ap.add_argument("--rate", type=float, default=100.0)
ap.add_argument("--system", type=int, default=2048)
ap.add_argument("--user", type=int, nargs=2, default=[256, 768],
                help="the user turn's tokens, drawn uniformly")
ap.add_argument("--output", type=int, nargs=2, default=[128, 384],
                help="the answer's tokens, drawn uniformly")
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
rng = random.Random(a.seed)
t = 0.0
with open(a.out, "w") as f:
    f.write("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n")
    for _ in range(a.requests):
        t += rng.expovariate(a.rate)
        user, out = rng.randint(*a.user), rng.randint(*a.output)
        f.write(f"{t:.6f},{a.system + user},{out},system,{a.system}\n")
