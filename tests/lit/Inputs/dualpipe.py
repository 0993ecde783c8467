"""Checks a DualPipe step against DeepSeek's table (dualpipe.test)."""
import json, sys
one, dual = (json.load(open(p)) for p in sys.argv[1:3])
pp = 8
mid = dual["stages"][3]
# A DualPipe stage reports both of its chunks; one chunk is half.
f = mid["forward_s_per_micro_batch"] / 2
b = mid["backward_s_per_micro_batch"] / 2
w = mid["weight_gradient_s_per_micro_batch"] / 2
wait = mid["seconds_per_step_by_activity"]["idle_s"]
formula = (pp / 2 - 1) * ((f + b) + b - 3 * w)
print("dualpipe bubble within 10%:", abs(wait - formula) / formula < 0.1)
m1 = one["stages"][3]
f1, b1 = m1["forward_s_per_micro_batch"], m1["backward_s_per_micro_batch"]
wait1 = m1["seconds_per_step_by_activity"]["idle_s"]
print("1f1b bubble within 10%:", abs(wait1 - (pp - 1) * (f1 + b1)) / ((pp - 1) * (f1 + b1)) < 0.1)
print("faster:", dual["step_time_s"] < one["step_time_s"])
print("weights 2x:", abs(mid["memory_bytes"]["weights"] / m1["memory_bytes"]["weights"] - 2) < 0.01)
# 1F1B's first stage keeps PP micro-batches of one chunk.
per = one["stages"][0]["memory_bytes"]["activations"] / pp
peak = max(s["memory_bytes"]["activations"] for s in dual["stages"])
print("activations PP+1:", abs(peak - (pp + 1) * per) / ((pp + 1) * per) < 0.1)
st = dual["stages"]
print("mirrored ranks alike:", all(st[r]["memory_bytes"] == st[pp - 1 - r]["memory_bytes"] and
      st[r]["forward_s_per_micro_batch"] == st[pp - 1 - r]["forward_s_per_micro_batch"] for r in range(pp)))
print("copies reduced:", dual["breakdown_s"]["exposed_dp_communication"] > 10 * one["breakdown_s"]["exposed_dp_communication"])
