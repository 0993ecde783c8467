# lit configuration for Orrery: FileCheck tests on IR and CLI output.
import os
import lit.formats

config.name = "Orrery"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".onnxtext", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(os.path.dirname(config.orrery_bin_dir), "tests", "lit")
config.environment["PATH"] = os.pathsep.join(
    [config.orrery_bin_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
config.substitutions.append(("%python", config.python))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
# The shared corpus (real ONNX files written by other tools).
config.substitutions.append(("%shared", config.shared_dir))
config.substitutions.append(("%generate", config.python + " " + os.path.join(config.orrery_src_dir, "models", "generate.py")))
