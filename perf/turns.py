"""Two timing processes that take turns (``python -m perf --lockstep``).

A host's speed moves in spells of seconds (docs/findings.md, finding 8), and a Nightly process
run before its PR process meets other spells than the PR one: a row that is host time in both
columns is then decided by the spells. With ``--lockstep`` the two tags' processes run side by
side and hand one token back and forth through two pipes: a process works only while it holds the
token and passes it on after each timed column (``bench._Columns.time_round``), so that both tags'
rounds of a column follow each other within a second or two, and only one process uses the host
and the device at a time. A process whose partner has exited (its pipe end closed) goes on alone.
"""

from __future__ import annotations

import os

TOKEN = b"t"


class Turns:
    """This process's end of the token ring: it reads the token from ``read_fd`` and passes it
    through ``write_fd``. ``Turns()`` (no pipes) never waits."""

    def __init__(self, read_fd: int | None = None, write_fd: int | None = None) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd

    @property
    def alone(self) -> bool:
        return self.read_fd is None

    def wait(self) -> None:
        """Block until the partner passes the token; from EOF on (the partner has exited), never
        again."""
        if self.alone:
            return
        if not os.read(self.read_fd, 1):
            self.close()

    def pass_turn(self) -> None:
        """Hand the token to the partner and wait for it to come back."""
        if self.alone:
            return
        try:
            os.write(self.write_fd, TOKEN)
        except BrokenPipeError:  # the partner has exited
            self.close()
            return
        self.wait()

    def close(self) -> None:
        """Leave the ring: the partner reads EOF at its next wait and goes on alone."""
        for fd in (self.read_fd, self.write_fd):
            if fd is not None:
                os.close(fd)
        self.read_fd = self.write_fd = None


TURNS = Turns()


def join(read_fd: int, write_fd: int) -> None:
    """Make this process's ``TURNS`` the ring end of these descriptors and wait for the first
    turn."""
    global TURNS
    TURNS = Turns(read_fd, write_fd)
    TURNS.wait()


def parse_fds(text: str) -> tuple[int, int]:
    """``"5,8"`` -> ``(5, 8)``: the read and write descriptors of ``--turns``."""
    read_fd, write_fd = (int(part) for part in text.split(","))
    return read_fd, write_fd
