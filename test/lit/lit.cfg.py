# lit configuration for mhagen's IR and CLI tests.
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "mhagen"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".test", ".mha", ".mlir"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = config.mhagen_test_src
config.test_exec_root = config.mhagen_test_obj

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.mhagen_tools_dir, append_path=True)
if config.mha_opt_dir:
    llvm_config.with_environment("PATH", config.mha_opt_dir, append_path=True)
config.substitutions.append(("%inputs", os.path.join(config.mhagen_test_src, "Inputs")))
config.substitutions.append(("%mhagen", os.path.join(config.mhagen_tools_dir, "mhagen")))
if config.ptxas:
    config.substitutions.append(("%ptxas", config.ptxas))
if config.cuobjdump:
    config.substitutions.append(("%cuobjdump", config.cuobjdump))
    # cuobjdump runs the nvdisasm next to it.
    llvm_config.with_environment(
        "PATH", os.path.dirname(os.path.realpath(config.cuobjdump)),
        append_path=True)
for feature in config.available_features_extra:
    config.available_features.add(feature)
# Generated kernels must not depend on the machine's thread count.
config.environment["MHAGEN_NUM_THREADS"] = "2"
# A machine presenting itself as a lesser class (runtime.h) does so for the
# mhagen processes the tests start, too.
if "MHAGEN_CPU_CLASS" in os.environ:
    config.environment["MHAGEN_CPU_CLASS"] = os.environ["MHAGEN_CPU_CLASS"]
import sys
config.substitutions.append(
    ("%expect-exit",
     sys.executable + " " + os.path.join(config.mhagen_test_src, "Inputs", "expect_exit.py")))
