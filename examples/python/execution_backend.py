"""An ExecutionBackend (run a command, run one in the background, write and
edit files) implemented on agentplane's programs.

    backend = AgentplaneBackend(cwd="/path/to/project")
    result = await backend.run_command("make test", timeout=120)
    result["status"]          # completed | timeout | error | cancelled
    job = backend.run_command_background("npm run dev", timeout=0)
    backend.edit_file("app.py", [{"old_string": "a", "new_string": "b"}])

agentsh runs foreground commands (and kills everything they started before it
returns), agentjob owns background commands (they survive this process), and
agentfs writes files atomically and reports them before and after. Each call
is one subprocess with the request as JSON on stdin, so nothing is quoted.

The programs are looked up in $AGENTPLANE_BIN if set, else on PATH.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from typing import Any, Dict, List, Optional


def program(name: str) -> str:
    """Path of an agentplane program: $AGENTPLANE_BIN/name, else PATH."""
    bin_dir = os.environ.get("AGENTPLANE_BIN")
    if bin_dir:
        return os.path.join(bin_dir, name)
    return shutil.which(name) or name


def parse_result(stdout: str, stderr: str = "") -> Dict[str, Any]:
    """The JSON result a program printed (the last line, for NDJSON)."""
    lines = stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        message = (stderr.strip() or "no JSON result on stdout")[:500]
        return {"success": False, "error": {"code": "no_result", "message": message}}


class AgentplaneBackend:
    """ExecutionBackend over agentsh, agentjob and agentfs.

    cwd is where commands run and relative paths resolve (passed in each
    request, so a missing directory is an error result); state_dir is the
    agentplane environment holding background jobs (default: the user's).
    """

    def __init__(self, cwd: Optional[str] = None, *, state_dir: Optional[str] = None,
                 max_output: int = 30000) -> None:
        self.cwd = os.path.abspath(cwd or os.getcwd())
        self.max_output = max_output
        self._env = dict(os.environ)
        if state_dir:
            self._env["AGENTPLANE_STATE_DIR"] = state_dir

    def _call(self, name: str, args: List[str], request: Dict[str, Any]) -> Dict[str, Any]:
        proc = subprocess.run(
            [program(name), *args, "--request", "-"],
            input=json.dumps(request), capture_output=True, text=True, env=self._env,
        )
        return parse_result(proc.stdout, proc.stderr)

    # E1: foreground command.
    async def run_command(self, command: str, *, timeout: float,
                          sandbox_write_access: bool = True,
                          network_permission: str = "host") -> Dict[str, Any]:
        request = {
            "command": command,
            "cwd": self.cwd,
            "timeout": timeout,
            "merge_output": True,
            "max_output": self.max_output,
            "sandbox": "workspace-write" if sandbox_write_access else "read-only",
            "net": "none" if network_permission in ("none", "deny", "disabled") else "host",
        }
        proc = await asyncio.create_subprocess_exec(
            program("agentsh"), "--request", "-",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self._env,
        )
        try:
            out, err = await proc.communicate(json.dumps(request).encode())
        except asyncio.CancelledError:
            # agentsh stops the command's whole tree on SIGTERM and still
            # reports; wait for that so nothing outlives the cancelled task.
            proc.terminate()
            await asyncio.shield(proc.wait())
            raise
        r = parse_result(out.decode(), err.decode())
        result = {
            "success": bool(r.get("success")),
            "status": r.get("status", "error"),
            "output": r.get("output", ""),
            # agentsh's exit status mirrors the command's (125: agentsh failed).
            "return_code": r.get("exit_code", proc.returncode),
            "truncated": bool(r.get("truncated")),
            "elapsed_ms": r.get("elapsed_ms", 0),
        }
        if "error" in r:
            result["error"] = r["error"]["message"]
        return result

    # E2: background command; the command id is an agentjob handle.
    def run_command_background(self, command: str, *, timeout: float = 0,
                               conversation_id: Optional[str] = None,
                               wait_seconds: float = 0,
                               network_permission: str = "host",
                               sandbox_write_access: bool = True) -> Dict[str, Any]:
        """Start command detached and return its command_id at once, or after
        up to wait_seconds if it finishes by then (quick commands report their
        result directly). The job survives this process: see command_output
        and cancel_command. network_permission and sandbox_write_access are
        accepted for the protocol; agentjob applies its configured sandbox."""
        request: Dict[str, Any] = {"command": command, "cwd": self.cwd, "timeout": timeout}
        if conversation_id:
            request["description"] = f"conversation {conversation_id}"
        started = self._call("agentjob", ["start"], request)
        if not started.get("success"):
            return {"success": False, "status": "error", "command_id": None,
                    "error": started["error"]["message"]}
        handle = started["handle"]
        if wait_seconds > 0:
            done = self._call("agentjob", ["wait"], {"jobs": [handle], "timeout": wait_seconds})
            if not done.get("timed_out"):
                out = self.command_output(handle)
                return {"success": done.get("status") == "exited", "command_id": handle,
                        "status": "completed", "return_code": done.get("exit_code"),
                        "output": out["output"]}
        return {"success": True, "command_id": handle, "status": "running_background"}

    def command_output(self, command_id: str) -> Dict[str, Any]:
        """Output of a background command not read before, and its status."""
        r = self._call("agentjob", ["logs"], {"job": command_id, "since_last": True})
        if not r.get("success"):
            return {"success": False, "status": "error", "output": "", "error": r["error"]["message"]}
        return {"success": True, "status": r["status"],
                "output": r["stdout"]["data"] + r["stderr"]["data"]}

    def cancel_command(self, command_id: str) -> Dict[str, Any]:
        """Stop a background command and everything it started."""
        r = self._call("agentjob", ["stop"], {"job": command_id})
        return {"success": bool(r.get("success")), "status": r.get("status", "error")}

    # E3 and E4: files, reported before and after.
    def _file_result(self, r: Dict[str, Any]) -> Dict[str, Any]:
        if not r.get("success"):
            return {"success": False, "path": r.get("path"), "error": r["error"]["message"],
                    "error_code": r["error"]["code"]}
        return {"success": True, "path": r["path"], "original_file": r["original_file"],
                "new_file": r["new_file"], "diff": r["diff"]}

    def read_file(self, path: str) -> Dict[str, Any]:
        """The file's text as it is on disk: a UTF-8 byte-order mark, which
        agentfs reports as bom rather than in content, is put back, so that
        read_file then write_file leaves the file's bytes as they were."""
        r = self._call("agentfs", ["read"], {"path": os.path.join(self.cwd, path)})
        if not r.get("success"):
            return {"success": False, "path": path, "error": r["error"]["message"],
                    "error_code": r["error"]["code"]}
        if r.get("binary"):
            return {"success": False, "path": path, "error": "not a text file", "error_code": "binary_file"}
        return {"success": True, "path": path, "sha256": r["sha256"],
                "content": ("\ufeff" if r.get("bom") else "") + r["content"]}

    def write_file(self, path: str, content: str, *, mode: str = "w") -> Dict[str, Any]:
        if mode not in ("w", "a"):
            raise ValueError(f"mode must be 'w' or 'a', not {mode!r}")
        request = {"path": os.path.join(self.cwd, path), "content": content, "append": mode == "a"}
        return self._file_result(self._call("agentfs", ["write"], request))

    def edit_file(self, path: str, replacements: List[Dict[str, Any]]) -> Dict[str, Any]:
        """Apply replacements ({old_string, new_string, replace_all}) all or
        none: if one does not match, the file is left as it was."""
        request = {"path": os.path.join(self.cwd, path), "edits": replacements}
        return self._file_result(self._call("agentfs", ["edit"], request))
