"""Tests for execution_backend.py against the real programs
($AGENTPLANE_BIN or PATH; scripts/test-examples builds them)."""

import asyncio
import os
import tempfile
import time
import unittest

from execution_backend import AgentplaneBackend


def processes_with_arg(arg):
    """The pids whose command line has arg as one of its arguments, zombies
    (an empty command line) aside."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if arg.encode() in args:
            found.append(int(name))
    return found


class ExecutionBackendTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.work = os.path.join(tmp.name, "work")
        os.mkdir(self.work)
        self.backend = AgentplaneBackend(self.work, state_dir=os.path.join(tmp.name, "state"))

    def test_byte_order_mark_round_trips(self):
        # A BOM file read and written back keeps its bytes; an edit keeps it.
        path = os.path.join(self.work, "bom.txt")
        with open(path, "wb") as f:
            f.write(b"\xef\xbb\xbfhello\n")
        r = self.backend.read_file("bom.txt")
        self.assertTrue(r["success"], r)
        self.assertEqual(r["content"], "\ufeffhello\n")
        self.assertTrue(self.backend.write_file("bom.txt", r["content"])["success"])
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"\xef\xbb\xbfhello\n")
        self.assertTrue(self.backend.edit_file("bom.txt", [{"old_string": "hello", "new_string": "bye"}])["success"])
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"\xef\xbb\xbfbye\n")
        self.assertTrue(self.backend.write_file("plain.txt", "x\n")["success"])
        self.assertEqual(self.backend.read_file("plain.txt")["content"], "x\n")

    async def test_run_command_completed(self):
        r = await self.backend.run_command("echo out; echo err >&2", timeout=30)
        self.assertEqual(r["status"], "completed")
        self.assertTrue(r["success"])
        self.assertEqual(r["return_code"], 0)
        self.assertEqual(r["output"], "out\nerr\n")
        self.assertFalse(r["truncated"])
        self.assertIsInstance(r["elapsed_ms"], int)

    async def test_run_command_failure_is_a_result(self):
        r = await self.backend.run_command("echo broken; exit 3", timeout=30)
        self.assertEqual((r["status"], r["success"], r["return_code"]), ("completed", False, 3))
        self.assertEqual(r["output"], "broken\n")

    async def test_run_command_timeout_keeps_output(self):
        r = await self.backend.run_command("echo started; sleep 30", timeout=1)
        self.assertEqual(r["status"], "timeout")
        self.assertEqual(r["return_code"], 124)
        self.assertEqual(r["output"], "started\n")
        self.assertLess(r["elapsed_ms"], 20000)

    async def test_run_command_error(self):
        os.rmdir(self.work)  # the working directory is gone
        r = await self.backend.run_command("true", timeout=30)
        self.assertEqual(r["status"], "error")
        self.assertFalse(r["success"])
        self.assertEqual(r["return_code"], 125)  # agentsh itself could not run it
        self.assertIn(self.work, r["error"])

    async def test_run_command_truncated(self):
        backend = AgentplaneBackend(self.work, max_output=1000)
        r = await backend.run_command("seq 1 10000", timeout=30)
        self.assertTrue(r["truncated"])
        self.assertTrue(r["output"].endswith("10000\n"))  # the end is kept

    async def test_run_command_sandbox(self):
        r = await self.backend.run_command("touch made-here", timeout=30, sandbox_write_access=False)
        self.assertEqual((r["status"], r["success"]), ("completed", False))
        self.assertFalse(os.path.exists(os.path.join(self.work, "made-here")))
        r = await self.backend.run_command("touch made-here", timeout=30, sandbox_write_access=True)
        self.assertTrue(r["success"], r)
        self.assertTrue(os.path.exists(os.path.join(self.work, "made-here")))

    async def test_cancelled_run_leaves_nothing_behind(self):
        # The sandbox runs the command in a PID namespace of its own, so the
        # command cannot name its pid here ($$ is its pid in there): it is
        # found by an argument no other process has.
        marker = os.path.join(self.work, "started")
        tag = f"60.{os.getpid()}{int(time.time() * 1000) % 100000}"
        task = asyncio.create_task(self.backend.run_command(f"touch {marker}; exec sleep {tag}", timeout=0))
        deadline = asyncio.get_running_loop().time() + 20
        while not processes_with_arg(tag):
            self.assertLess(asyncio.get_running_loop().time(), deadline, "command never started")
            await asyncio.sleep(0.02)
        self.assertTrue(os.path.exists(marker))
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertEqual(processes_with_arg(tag), [], "the command outlived the cancelled call")

    def test_background_command(self):
        r = self.backend.run_command_background("echo quick", wait_seconds=20)
        self.assertEqual((r["status"], r["return_code"], r["output"]), ("completed", 0, "quick\n"))
        self.assertTrue(r["command_id"].startswith("job_"))

        r = self.backend.run_command_background("echo serving; exec sleep 60", conversation_id="c1")
        self.assertEqual(r["status"], "running_background")
        handle = r["command_id"]
        self.addCleanup(self.backend.cancel_command, handle)
        # A stop may come before the shell has echoed: wait for the line,
        # reading the log without the since_last cursor, which command_output
        # uses below.
        deadline = time.monotonic() + 20
        while "serving" not in self.backend._call("agentjob", ["logs"], {"job": handle})["stdout"]["data"]:
            self.assertLess(time.monotonic(), deadline, "the job never echoed")
            time.sleep(0.02)
        self.assertEqual(self.backend.cancel_command(handle), {"success": True, "status": "stopped"})
        out = self.backend.command_output(handle)
        self.assertEqual((out["status"], out["output"]), ("stopped", "serving\n"))
        self.assertEqual(self.backend.command_output(handle)["output"], "")  # read once

    def test_background_command_error(self):
        r = self.backend.run_command_background("exit 7", wait_seconds=20)
        self.assertEqual((r["status"], r["success"], r["return_code"]), ("completed", False, 7))
        r = self.backend.command_output("job_forged")
        self.assertFalse(r["success"])
        self.assertIn("not a valid job handle", r["error"])

    def test_write_and_edit_report_before_and_after(self):
        r = self.backend.write_file("pkg/a.txt", "one\ntwo\n")
        self.assertEqual((r["original_file"], r["new_file"]), ("", "one\ntwo\n"))
        r = self.backend.write_file("pkg/a.txt", "three\n", mode="a")
        self.assertEqual((r["original_file"], r["new_file"]), ("one\ntwo\n", "one\ntwo\nthree\n"))
        r = self.backend.edit_file("pkg/a.txt", [
            {"old_string": "one", "new_string": "1"},
            {"old_string": "t", "new_string": "T", "replace_all": True},
        ])
        self.assertTrue(r["success"], r)
        self.assertEqual(r["new_file"], "1\nTwo\nThree\n")
        with open(os.path.join(self.work, "pkg/a.txt")) as f:
            self.assertEqual(f.read(), "1\nTwo\nThree\n")

    def test_edit_error_changes_nothing(self):
        self.backend.write_file("a.txt", "alpha\nbeta\n")
        r = self.backend.edit_file("a.txt", [
            {"old_string": "alpha", "new_string": "ALPHA"},
            {"old_string": "gamma", "new_string": "GAMMA"},
        ])
        self.assertFalse(r["success"])
        self.assertEqual(r["error_code"], "old_string_not_found")
        with open(os.path.join(self.work, "a.txt")) as f:
            self.assertEqual(f.read(), "alpha\nbeta\n")


if __name__ == "__main__":
    unittest.main()
