"""A free loopback port for a server a test starts itself, and waiting until it listens."""

from __future__ import annotations

import socket
import subprocess
import time


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[str], what: str, wait: float = 30.0) -> None:
    """Return once something accepts connections on ``port``; fail with the process's
    stderr when it exits first, or after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"{what} did not start listening"
            time.sleep(0.05)
