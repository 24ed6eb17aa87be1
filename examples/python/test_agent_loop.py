"""Tests for agent_loop.py: replay transcript_calls.json through the real
programs ($AGENTPLANE_BIN or PATH) and check the transcript."""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

# What the model sees after each call: the exit status and the fields that
# matter; the rest (timings, pids, hashes) is normalised away.
EXPECTED = [
    ("agentfs_write", 0, {"success": True, "created": True, "new_file": 'echo "Helo, $1"\n'}),
    ("agentsh_run", 1, {"success": False, "status": "completed", "exit_code": 1, "stdout": ""}),
    ("agentfs_edit", 0, {"success": True, "original_file": 'echo "Helo, $1"\n', "new_file": 'echo "Hello, $1"\n',
                         "diff_stats": {"added": 1, "removed": 1}}),
    ("agentsh_run", 0, {"success": True, "status": "completed", "stdout": "Hello, world\n", "cwd": "<work>"}),
    ("agentfs_read", 1, {"success": False, "error": {"code": "file_not_found", "message": "greet.txt does not exist"}}),
    ("agentsh_run", 124, {"success": False, "status": "timeout", "timed_out": True, "exit_code": 124,
                          "elapsed_ms": "<ms>", "description": "A command that hangs"}),
    ("agentjob_start", 0, {"success": True, "handle": "<job>", "name": "server", "status": "ready", "pid": "<pid>"}),
    ("agentjob_logs", 0, {"success": True, "handle": "<job>", "data": "serving\n", "offset": 0, "next_offset": 8}),
    ("agentjob_stop", 0, {"success": True, "status": "stopped", "signal": "SIGTERM"}),
]


def normalise(line: str, work: str) -> str:
    line = line.replace(work, "<work>")
    line = re.sub(r'"(\w+_ms)": \d+', r'"\1": "<ms>"', line)
    line = re.sub(r'"pid": \d+', '"pid": "<pid>"', line)
    line = re.sub(r'"(started_at|ended_at)": "[^"]+"', r'"\1": "<time>"', line)
    line = re.sub(r'"(sha256\w*)": "[0-9a-f]+"', r'"\1": "<sha256>"', line)
    return re.sub(r'"job_[a-z0-9]+"', '"<job>"', line)


class AgentLoopTest(unittest.TestCase):
    def test_transcript(self):
        with tempfile.TemporaryDirectory() as tmp:
            work = os.path.realpath(tmp)
            env = dict(os.environ, AGENTPLANE_STATE_DIR=os.path.join(work, ".state"))
            proc = subprocess.run(
                [sys.executable, os.path.join(HERE, "agent_loop.py"),
                 os.path.join(HERE, "transcript_calls.json"), "--cwd", work],
                capture_output=True, text=True, env=env, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            lines = [normalise(l, work) for l in proc.stdout.splitlines()]

        with open(os.path.join(HERE, "transcript_calls.json")) as f:
            calls = json.load(f)
        self.assertEqual(len(calls), len(EXPECTED))
        self.assertEqual(len(lines), 2 * len(EXPECTED) + 1)
        self.assertEqual(lines[-1], f"--- {len(EXPECTED)} calls, 3 failed")
        for i, (tool, code, fields) in enumerate(EXPECTED, 1):
            call, answer = lines[2 * i - 2], lines[2 * i - 1]
            self.assertEqual(call, f">>> [{i}] {tool} {calls[i - 1]['arguments']}")
            prefix = f"<<< [{i}] exit {code} "
            self.assertTrue(answer.startswith(prefix), f"call {i}: {answer}")
            result = json.loads(answer[len(prefix):])
            for key, want in fields.items():
                self.assertEqual(result.get(key), want, f"call {i} {tool}: {key} in {answer}")

    def test_unknown_tool_and_bad_arguments_are_results(self):
        from agent_loop import run_tool_call
        code, result = run_tool_call("rm_everything", "{}", ".")
        self.assertEqual((code, result["error"]["code"]), (2, "unknown_tool"))
        code, result = run_tool_call("agentfs_read", '{"path": "x", "colour": "red"}', ".")
        self.assertEqual((code, result["error"]["code"]), (2, "invalid_request"))
        code, result = run_tool_call("agentsh_run", '{"command": "exit 5"}', ".")
        self.assertEqual((code, result["exit_code"]), (5, 5))


if __name__ == "__main__":
    unittest.main()
