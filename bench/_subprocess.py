"""A helper process of a benchmark: started and awaited ``ready``, always stopped.

The delivery benchmark runs its dispatcher (``_dispatcher.py``) and its webhook receiver
(``_http.py``) this way; each prints a line starting with ``ready`` once it can serve, and
gets ``--parent <pid>`` so that it exits if the benchmark dies.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Self


class ChildProcess:
    """One subprocess: launched and awaited ``ready`` on entry, stopped on exit (SIGTERM,
    then SIGKILL after ``stop_timeout``), whatever happens in between."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        ready_timeout: float = 60.0,
        stop_timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.command = [*command, "--parent", str(os.getpid())]
        self.env = env
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """The process id."""
        assert self.proc is not None, f"{self.name} is not running"
        return self.proc.pid

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Launch the process and wait until it prints its ``ready`` line."""
        self.proc = subprocess.Popen(
            self.command, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], self.ready_timeout)
        line = self.proc.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("ready"):
            raise RuntimeError(
                f"{self.name} process {self.proc.pid} did not get ready in "
                f"{self.ready_timeout}s (exit code {self.proc.poll()})"
            )
        self.on_ready(line)

    def on_ready(self, line: str) -> None:
        """Read what the ``ready`` line tells (nothing by default)."""

    def check_alive(self) -> None:
        """Raise if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"{self.name} process {self.proc.pid} exited early with code {self.proc.poll()}"
            )

    def cpu_seconds(self) -> float:
        """User + system CPU time the process has used so far (Linux ``/proc``)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        # After the command name: utime and stime are the 12th and 13th fields.
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """SIGTERM the process, wait for it, and SIGKILL it if it does not stop."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            print(f"{self.name} {proc.pid} ignored SIGTERM; killing it", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        if proc.stdout is not None:
            with contextlib.suppress(OSError):
                proc.stdout.close()
