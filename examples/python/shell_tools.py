"""run_shell, shell_task_output and shell_task_kill: shell tools for a model,
on an agentsh session (cd, export and functions persist between calls) and
agentjob (background tasks that outlive the call, read incrementally).

    tools = ShellTools(cwd="/path/to/project")
    tools.schemas()                 # OpenAI function definitions
    tools.call("run_shell", '{"command": "cd src && export DEBUG=1"}')
    tools.run_shell("npm run dev", run_in_background=True)   # {"task_id": ...}
    tools.shell_task_output(task_id)                          # only new output
    tools.close()

The argument schemas come from `agentsh schema` and `agentjob schema`, so a
model sees the programs' own descriptions. The programs are looked up in
$AGENTPLANE_BIN if set, else on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any, Dict, List, Optional

MAX_TIMEOUT = 600


def program(name: str) -> str:
    """Path of an agentplane program: $AGENTPLANE_BIN/name, else PATH."""
    bin_dir = os.environ.get("AGENTPLANE_BIN")
    return os.path.join(bin_dir, name) if bin_dir else shutil.which(name) or name


class ShellTools:
    """The three tools bound to one persistent shell, started on first use."""

    READER = "shell_tools"  # the agentjob --since-last cursor of these tools

    def __init__(self, cwd: Optional[str] = None, *, state_dir: Optional[str] = None,
                 default_timeout: float = 120) -> None:
        self.cwd = os.path.abspath(cwd or os.getcwd())
        self.default_timeout = default_timeout
        self.session: Optional[str] = None
        self._env = dict(os.environ)
        if state_dir:
            self._env["AGENTPLANE_STATE_DIR"] = state_dir

    def _call(self, name: str, args: List[str], request: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        if request is not None:
            args = [*args, "--request", "-"]
        proc = subprocess.run([program(name), *args], input=json.dumps(request or {}),
                              capture_output=True, text=True, env=self._env)
        try:
            return json.loads(proc.stdout)
        except ValueError:
            return {"success": False, "error": {"code": "no_result", "message": proc.stderr.strip()[:500]}}

    def schemas(self) -> List[Dict[str, Any]]:
        """OpenAI function definitions whose argument descriptions are the programs' own."""
        # The plain JSON Schema dialect: optional keys stay optional (the
        # openai dialect is strict, every key required and nullable).
        def params(program_name: str, tool: str) -> Dict[str, Any]:
            out = self._call(program_name, ["schema", "--format", "jsonschema"])
            return next(t["properties"] for t in out["tools"] if t["title"] == tool)

        run, logs = params("agentsh", "agentsh_run"), params("agentjob", "agentjob_logs")
        task_id = {"type": "string", "description": "the task_id run_shell returned; " + logs["job"]["description"]}

        def function(name: str, description: str, properties: Dict[str, Any], required: List[str]):
            return {"type": "function", "function": {"name": name, "description": description, "parameters": {
                "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}

        return [
            function("run_shell",
                     "Run a shell command in a persistent session: cwd, exported variables and "
                     "functions persist between calls. Set run_in_background for servers and "
                     "watchers, then read them with shell_task_output.",
                     # agentsh's command is a string or an argv; a session takes the string.
                     {"command": {"type": "string", "description": run["command"]["anyOf"][0]["description"]},
                      "description": run["description"],
                      "timeout": run["timeout"],
                      "run_in_background": {"type": "boolean", "description":
                                            "start it detached and return a task_id at once"}},
                     ["command"]),
            function("shell_task_output",
                     "Read a background task's output not read before, with its status and exit code.",
                     {"task_id": task_id}, ["task_id"]),
            function("shell_task_kill", "Stop a background task and everything it started.",
                     {"task_id": task_id}, ["task_id"]),
        ]

    def call(self, name: str, arguments: str) -> Dict[str, Any]:
        """Run a tool call as a model emits it: a name and a JSON string of arguments."""
        tools = {"run_shell": self.run_shell, "shell_task_output": self.shell_task_output,
                 "shell_task_kill": self.shell_task_kill}
        if name not in tools:
            return {"error": f"unknown tool {name!r}"}
        try:
            return tools[name](**json.loads(arguments or "{}"))
        except (ValueError, TypeError) as e:
            return {"error": f"bad arguments for {name}: {e}"}

    def run_shell(self, command: str, description: Optional[str] = None,
                  timeout: Optional[float] = None, run_in_background: bool = False) -> Dict[str, Any]:
        if run_in_background:
            # A background task is its own detached process, not the session's
            # shell, so a server keeps running while the session is used.
            request = {"command": command, "cwd": self.cwd}
            if description:
                request["description"] = description
            r = self._call("agentjob", ["start"], request)
            if not r.get("success"):
                return {"error": r["error"]["message"]}
            return {"task_id": r["handle"], "status": r["status"]}
        if self.session is None:
            r = self._call("agentsh", ["session", "start"], {"cwd": self.cwd})
            if not r.get("success"):
                return {"error": r["error"]["message"]}
            self.session = r["session"]
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            timeout = self.default_timeout
        request = {"session": self.session, "command": command,
                   "timeout": min(timeout, MAX_TIMEOUT), "merge_output": True}
        if description:
            request["description"] = description
        r = self._call("agentsh", [], request)
        if "error" in r:
            if r["error"]["code"] == "session_ended":
                self.session = None  # the next call starts a fresh shell
            return {"error": r["error"]["message"], "exit_code": r.get("exit_code")}
        self.cwd = r.get("cwd", self.cwd)
        out = {"exit_code": r["exit_code"], "output": r["output"], "cwd": self.cwd}
        if r["timed_out"]:
            out["timed_out"] = True  # interrupted; the shell and its state survive
        if r["truncated"]:
            out["truncated"] = True
        if r.get("session_reset"):
            out["session_reset"] = True
        return out

    def shell_task_output(self, task_id: str) -> Dict[str, Any]:
        r = self._call("agentjob", ["logs"], {"job": task_id, "since_last": True, "reader": self.READER})
        if not r.get("success"):
            return {"error": r["error"]["message"]}
        out = {"status": r["status"], "stdout": r["stdout"]["data"], "stderr": r["stderr"]["data"]}
        if r["status"] not in ("starting", "running", "ready"):
            out["exit_code"] = self._call("agentjob", ["status"], {"jobs": [task_id]}).get("exit_code")
        return out

    def shell_task_kill(self, task_id: str) -> Dict[str, Any]:
        r = self._call("agentjob", ["stop"], {"job": task_id})
        if not r.get("success"):
            return {"error": r["error"]["message"]}
        return {"status": r["status"], "exit_code": r["exit_code"]}

    def close(self) -> None:
        """Stop the session's shell. Background tasks keep running until they
        exit or are killed: they are what the agent left running on purpose."""
        if self.session is not None:
            self._call("agentsh", ["session", "stop"], {"session": self.session})
            self.session = None
