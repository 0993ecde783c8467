"""PatrickStar's chunks (chunks.test): the model data per device is 14
bytes per parameter over dp (16-bit parameters whose chunks take their
gradients, fp32 master weights, momentum and variance), split between the
device and the host; the device adds one gathered chunk group.

    patrickstar.py STATS.json CHUNKED.json CHUNK_MILLIONS DP DEVICES_PER_NODE
"""
import json, sys
stats, run = (json.load(open(p)) for p in sys.argv[1:3])
chunk, dp, per_node = float(sys.argv[3]) * 1e6, int(sys.argv[4]), int(sys.argv[5])
params = stats["parameters"]
mem = run["stages"][0]["memory_bytes"]
gathered = dp * chunk * 2
on_device = mem["weights"] - gathered + mem["optimizer"]
on_host = run["host_memory_bytes_per_node"] / per_node
expected = 14 * params / dp
print(f"model data per device {expected / 2**30:.2f} GiB: {on_device / 2**30:.2f} on the device, {on_host / 2**30:.2f} on the host")
print("model data split exactly:", abs(on_device + on_host - expected) / expected < 1e-6)
print("gradients in their chunks:", mem["gradients"] == 0)
print("some on the host:", on_host > 0)
print("within the 80 % PatrickStar uses:", mem["total"] <= 0.8 * mem["capacity"] + 1)
