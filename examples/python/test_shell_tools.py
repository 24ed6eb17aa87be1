"""Tests for shell_tools.py against the real programs
($AGENTPLANE_BIN or PATH; scripts/test-examples builds them)."""

import json
import os
import tempfile
import time
import unittest

from shell_tools import ShellTools


def until(condition, what, seconds=20):
    """Poll condition until it is truthy, failing after a deadline."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class ShellToolsTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.work = os.path.realpath(tmp.name)
        os.mkdir(os.path.join(self.work, "src"))
        self.tools = ShellTools(self.work, state_dir=os.path.join(self.work, ".state"))
        self.addCleanup(self.tools.close)

    def test_cwd_env_and_functions_persist(self):
        r = self.tools.call("run_shell", json.dumps({"command": "cd src && export STAGE=test && hi() { echo hi $1; }"}))
        self.assertEqual(r["exit_code"], 0, r)
        self.assertEqual(r["cwd"], os.path.join(self.work, "src"))
        r = self.tools.run_shell("echo $STAGE; hi there; pwd", description="Check the state")
        self.assertEqual(r["output"], f"test\nhi there\n{self.work}/src\n")

    def test_timeout_interrupts_and_the_shell_survives(self):
        self.tools.run_shell("export KEPT=yes")
        r = self.tools.run_shell("echo before; sleep 30", timeout=1)
        self.assertEqual((r["exit_code"], r.get("timed_out"), r["output"]), (124, True, "before\n"))
        self.assertEqual(self.tools.run_shell("echo $KEPT")["output"], "yes\n")

    def test_errors_are_results(self):
        r = self.tools.run_shell("echo oops >&2; exit 3")
        self.assertEqual((r["exit_code"], r["output"]), (3, "oops\n"))
        r = self.tools.run_shell("exit")  # the shell itself ends
        self.assertIn("error", r)
        self.assertEqual(self.tools.run_shell("echo fresh")["output"], "fresh\n")  # a new session
        self.assertIn("error", self.tools.shell_task_output("job_forged"))
        self.assertIn("error", self.tools.shell_task_kill("job_forged"))
        self.assertIn("unknown tool", self.tools.call("rm_rf", "{}")["error"])
        self.assertIn("bad arguments", self.tools.call("run_shell", '{"cmd": "ls"}')["error"])

    def test_background_task_output_is_incremental_and_kill_stops_it(self):
        go = os.path.join(self.work, "go")
        r = self.tools.run_shell(f"echo one; while [ ! -e {go} ]; do sleep 0.05; done; echo two; exec sleep 60",
                                 run_in_background=True)
        task = r["task_id"]
        self.addCleanup(self.tools.shell_task_kill, task)
        first = until(lambda: self.tools.shell_task_output(task)["stdout"], "the first line")
        self.assertEqual(first, "one\n")
        open(go, "w").close()
        second = until(lambda: self.tools.shell_task_output(task)["stdout"], "the second line")
        self.assertEqual(second, "two\n")  # only what was not read before
        self.assertEqual(self.tools.shell_task_kill(task)["status"], "stopped")
        r = self.tools.shell_task_output(task)
        self.assertEqual((r["status"], r["stdout"], r["exit_code"]), ("stopped", "", None))

    def test_background_task_that_fails(self):
        task = self.tools.run_shell("echo bad >&2; exit 4", run_in_background=True)["task_id"]
        stderr = []

        def ended():
            out = self.tools.shell_task_output(task)
            stderr.append(out["stderr"])
            return out if "exit_code" in out else None

        r = until(ended, "the task to end")
        self.assertEqual((r["status"], r["exit_code"], "".join(stderr)), ("failed", 4, "bad\n"))

    def test_schemas_come_from_the_programs(self):
        schemas = {s["function"]["name"]: s["function"] for s in self.tools.schemas()}
        self.assertEqual(sorted(schemas), ["run_shell", "shell_task_kill", "shell_task_output"])
        run = schemas["run_shell"]["parameters"]
        self.assertEqual(run["required"], ["command"])
        self.assertEqual(run["properties"]["command"], {"type": "string", "description": "a shell command line"})
        self.assertEqual([b["type"] for b in run["properties"]["timeout"]["anyOf"]], ["number", "string"])
        self.assertEqual(schemas["shell_task_kill"]["parameters"]["required"], ["task_id"])


if __name__ == "__main__":
    unittest.main()
