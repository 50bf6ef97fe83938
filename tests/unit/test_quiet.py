"""Model libraries' progress bars are switched off at the edges, and an operator's own
setting of the same variables wins."""

from __future__ import annotations

import os
import subprocess
import sys

from retold.quiet import QUIET_ENVIRONMENT, silence_progress_output


def test_unset_variables_get_quiet_values_and_set_ones_are_kept() -> None:
    environ = {"TRANSFORMERS_VERBOSITY": "info"}
    silence_progress_output(environ)
    assert environ == {**QUIET_ENVIRONMENT, "TRANSFORMERS_VERBOSITY": "info"}


def test_a_library_imported_before_goes_quiet_and_a_child_process_starts_quiet() -> None:
    code = (
        "import os, subprocess, sys\n"
        "import huggingface_hub.utils as hub\n"
        "assert not hub.are_progress_bars_disabled()\n"  # imported loud, before the call
        "from retold.quiet import silence_progress_output\n"
        "silence_progress_output()\n"
        "assert hub.are_progress_bars_disabled()\n"
        # A child (a demo's worker) imports huggingface_hub and transformers with the variables set.
        "child = ('import os, huggingface_hub.utils as hub;'\n"
        "         ' print(hub.are_progress_bars_disabled(), os.environ[\"TRANSFORMERS_VERBOSITY\"])')\n"
        "print(subprocess.run([sys.executable, '-c', child], capture_output=True, text=True).stdout)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in QUIET_ENVIRONMENT}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True error"
    assert result.stderr == ""
