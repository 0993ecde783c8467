"""A torchtitan job TOML read by torchtitan's own code: its ConfigManager
(the JobConfig dataclasses, parsed as `--job.config_file` is) and its
ParallelDims (the degrees' product against the world size), from the pinned
torchtitan wheel. torchtitan's ConfigManager drops a key it does not know
without a word, so every key of the file must come back with its value.

    python3 torchtitan_config.py JOB.toml WORLD_SIZE

Prints "ok" or the problem and exits 1. torchtitan's package __init__ loads
its dataset pipeline (datasets, torchdata), which the config does not need:
the package is entered as a namespace so that only the config manager and
the parallel dims load.
"""
import importlib.util
import os
import sys
import tomllib
import types


def torchtitan_modules():
    spec = importlib.util.find_spec("torchtitan")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torchtitan is not installed")
    package = types.ModuleType("torchtitan")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["torchtitan"] = package
    from torchtitan.config_manager import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims
    return ConfigManager, ParallelDims


def main():
    path, world = sys.argv[1], int(sys.argv[2])
    ConfigManager, ParallelDims = torchtitan_modules()
    written = tomllib.load(open(path, "rb"))
    config = ConfigManager().parse_args(["--job.config_file", path])
    problems = []
    for section, keys in written.items():
        parsed = getattr(config, section, None)
        if parsed is None:
            problems.append(f"[{section}] is no JobConfig section")
            continue
        for key, value in keys.items():
            if not hasattr(parsed, key):
                problems.append(f"[{section}] {key}: torchtitan ignores it")
            elif getattr(parsed, key) != value:
                problems.append(f"[{section}] {key} = {value!r} reads as {getattr(parsed, key)!r}")
    p = config.parallelism
    try:
        ParallelDims(dp_replicate=p.data_parallel_replicate_degree,
                     dp_shard=p.data_parallel_shard_degree, cp=p.context_parallel_degree,
                     tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                     world_size=world, enable_loss_parallel=True)
    except AssertionError as e:
        problems.append(f"ParallelDims: {e}")
    if problems:
        print("; ".join(problems))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    os.environ.setdefault("TORCHTITAN_LOG_LEVEL", "ERROR")
    main()
