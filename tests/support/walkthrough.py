"""The README's walk-through as data: its command blocks, their expected output, and how to run them.

A step is a fenced block whose info string is ``bash walkthrough`` or ``python walkthrough``
(GitHub highlights the language and ignores the rest; Python runs with the shell's ``python``);
the ``text`` block right after it, if any, is what it prints. Steps run in
order, each in a fresh ``bash`` that starts from the variables the earlier steps exported, as in
one terminal. ``until-output-matches`` marks a read-only step whose answer depends on background
work (a message still being processed): it is run again until its output matches, for a while.

An expected output matches when its lines appear in order in the output, each as one line:
whitespace runs count as one space, box-drawing rules match whatever their width (table columns
size to their content), ``...`` in a line stands for any text, and a line that is only ``...``
for any number of lines.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
_RULE_CHARS = "─━│┃┄┅┆┇┈┉┊┋┌┍┎┏┐┑┒┓└┕┖┗┘┙┚┛├┝┞┟┠┡┢┣┤┥┦┧┨┩┪┫┬┭┮┯┰┱┲┳┴┵┶┷┸┹┺┻┼┽┾┿╀╁╂╃╄╅╆╇╈╉╊╋"
_RULE_RUN = re.compile(f"([{_RULE_CHARS}])\\1+")
ANY_LINES = "..."
_PYTHON_END = "ARANDU_README_PYTHON"


@dataclass(frozen=True)
class Step:
    """One command block of the walk-through and the output it shows."""

    number: int
    script: str
    expected: str | None
    retry: bool


def parse_steps(readme: Path) -> list[Step]:
    """The walk-through steps of ``readme``, in order."""
    blocks = [(match.group(1).split(), match.group(2)) for match in _FENCE.finditer(readme.read_text("utf-8"))]
    steps: list[Step] = []
    for index, (info, body) in enumerate(blocks):
        if info[1:2] != ["walkthrough"] or info[0] not in ("bash", "python"):
            continue
        # A Python block runs as a reader would run it: with the project's Python, in the same shell.
        script = f"python - <<'{_PYTHON_END}'\n{body}{_PYTHON_END}\n" if info[0] == "python" else body
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        expected = following[1] if following is not None and following[0][:1] == ["text"] else None
        steps.append(Step(len(steps) + 1, script, expected, "until-output-matches" in info))
    return steps


def _normal(line: str) -> str:
    return _RULE_RUN.sub(r"\1", " ".join(line.split()))


def _line_pattern(line: str) -> re.Pattern[str]:
    parts = [re.escape(part) for part in _normal(line).split(ANY_LINES)]
    return re.compile("^" + ".*".join(parts) + "$")


def matches(expected: str, output: str) -> bool:
    """Whether ``output`` shows ``expected`` (module docstring)."""
    wanted = [line for line in expected.splitlines() if line.strip()]
    lines = [_normal(line) for line in output.splitlines() if line.strip()]

    def match_from(w: int, o: int) -> bool:
        if w == len(wanted):
            return True
        if wanted[w].strip() == ANY_LINES:
            return any(match_from(w + 1, start) for start in range(o, len(lines) + 1))
        if o < len(lines) and _line_pattern(wanted[w]).match(lines[o]):
            return match_from(w + 1, o + 1)
        return False

    # The expected lines are one contiguous stretch of the output, unless they say otherwise with "...".
    return any(match_from(0, start) for start in range(len(lines) + 1))


@dataclass
class Shell:
    """Runs steps one after the other, carrying exported variables from one to the next."""

    cwd: Path
    env: dict[str, str]
    state: Path

    def run(self, step: Step, timeout_s: float = 180) -> str:
        """Run ``step`` (stdout and stderr together) and return what it printed; raises if it fails."""
        prelude = f"set -e -o pipefail\n[ -f {self.state} ] && source {self.state}\n"
        script = f"{prelude}{step.script}\nexport -p > {self.state}.new\n"
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"step {step.number} exited {done.returncode}:\n{step.script}\n---\n{done.stdout}")
        Path(f"{self.state}.new").replace(self.state)
        return done.stdout

    def run_checked(self, step: Step, wait_s: float = 60) -> str:
        """Run ``step`` and check its output against the README (again and again for a retried step)."""
        deadline = time.monotonic() + (wait_s if step.retry else 0)
        while True:
            output = self.run(step)
            if step.expected is None or matches(step.expected, output):
                return output
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"step {step.number} printed what the README does not show.\n--- command:\n{step.script}"
                    f"\n--- README:\n{step.expected}\n--- output:\n{output}"
                )
            time.sleep(1)
