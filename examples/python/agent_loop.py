"""A mini agent loop: replay a model's tool calls through agentplane and print
the transcript a model would see.

    python3 agent_loop.py transcript_calls.json [--cwd DIR]

Each call is {"name": "agentfs_write", "arguments": "<JSON string>"}, as a
model emits it. The name says the program and operation (agentsh_run is
agentsh itself, agentjob_logs is `agentjob logs`, agentsh_session_start is
`agentsh session start`), and the arguments go to `--request -` untouched:
they use the same keys as the schemas `PROGRAM schema` prints. The programs
are looked up in $AGENTPLANE_BIN if set, else on PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Tuple

PROGRAMS = ("agentsh", "agentjob", "agentfs")


def program(name: str) -> str:
    bin_dir = os.environ.get("AGENTPLANE_BIN")
    return os.path.join(bin_dir, name) if bin_dir else shutil.which(name) or name


def command_for(tool: str) -> List[str]:
    """The argv that runs a tool: agentjob_logs -> [agentjob, logs]."""
    name, _, operation = tool.partition("_")
    if name not in PROGRAMS or not operation:
        raise KeyError(tool)
    words = [] if (name, operation) == ("agentsh", "run") else operation.split("_")
    return [program(name), *words]


def run_tool_call(tool: str, arguments: str, cwd: str) -> Tuple[int, Dict[str, Any]]:
    """Run one call; return the program's exit status and its JSON result."""
    try:
        argv = command_for(tool)
    except KeyError:
        return 2, {"success": False, "error": {"code": "unknown_tool", "message": f"no tool {tool}"}}
    proc = subprocess.run([*argv, "--request", "-"], input=arguments, capture_output=True,
                          text=True, cwd=cwd)
    lines = proc.stdout.strip().splitlines()  # NDJSON operations end with the result
    try:
        return proc.returncode, json.loads(lines[-1])
    except (IndexError, ValueError):
        return proc.returncode, {"success": False, "error": {"code": "no_result", "message": proc.stderr.strip()}}


def replay(calls: List[Dict[str, str]], cwd: str, out=sys.stdout) -> int:
    """Print each call and its result; return how many calls failed."""
    failed = 0
    for i, call in enumerate(calls, 1):
        print(f">>> [{i}] {call['name']} {call['arguments']}", file=out)
        code, result = run_tool_call(call["name"], call["arguments"], cwd)
        failed += not result.get("success")
        print(f"<<< [{i}] exit {code} {json.dumps(result, ensure_ascii=False)}", file=out)
    print(f"--- {len(calls)} calls, {failed} failed", file=out)
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calls", help="a JSON file with a list of {name, arguments}")
    parser.add_argument("--cwd", default=".", help="where the calls run")
    args = parser.parse_args()
    with open(args.calls) as f:
        calls = json.load(f)
    replay(calls, args.cwd)
    return 0  # a failed call is part of the transcript, not a failure of the loop


if __name__ == "__main__":
    sys.exit(main())
