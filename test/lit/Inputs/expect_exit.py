"""expect_exit.py CODE COMMAND [ARGS...]: runs COMMAND, passes its output
through, and exits 0 only if it exited with CODE (lit's `not` accepts any
failure; the CLI's exit codes are part of its contract)."""
import subprocess
import sys

want = int(sys.argv[1])
rc = subprocess.run(sys.argv[2:]).returncode
if rc != want:
    sys.stderr.write(f"expect_exit: exit code {rc}, expected {want}\n")
    sys.exit(1)
