"""Real outputs of tether-exec validate against schemas/*.json.

Run by scripts/test-python.sh (needs the `jsonschema` package and TETHER_EXEC_BIN).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import unittest
from pathlib import Path

import jsonschema
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = {p.name: json.loads(p.read_text()) for p in (ROOT / "schemas").glob("*.json")}
REGISTRY = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in SCHEMAS.values())
BIN = os.environ.get("TETHER_EXEC_BIN", "tether-exec")


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(SCHEMAS[name], registry=REGISTRY)


class Outputs(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="tether-schema-")
        root = Path(self._tmp.name).resolve()
        self.ws, self.state = root / "ws", root / "state"
        self.ws.mkdir()
        self.policy = root / "p.toml"
        self.policy.write_text('require_approval_for = ["rm"]\ndeny = ["curl"]\ndefault = "allow"\n')
        self.env = dict(os.environ, TETHER_EXEC_STATE_DIR=str(self.state), TETHER_EXEC_APPROVER_KEY=str(root / "k"))
        self.receipt = root / "r.json"

    def tearDown(self) -> None:
        self._tmp.cleanup()

    def tx(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([BIN, *args], cwd=self.ws, env=self.env, capture_output=True, text=True, check=False)

    def run_receipt(self, script: str) -> dict:
        self.tx("run", "--policy", str(self.policy), "--receipt", str(self.receipt), "-c", script)
        return json.loads(self.receipt.read_text())

    def test_every_json_output_matches_its_schema(self) -> None:
        receipts = [self.run_receipt(s) for s in ["echo hi", "curl x", "rm -rf build", "exit 3"]]
        self.assertEqual([r["decision"] for r in receipts], ["allow", "deny", "ask", "allow"])
        for r in receipts:
            validator("receipt.schema.json").validate(r)
        for s in ["echo hi", "curl x", "rm x"]:
            out = self.tx("check", "--policy", str(self.policy), "--json", "-c", s).stdout
            validator("check.schema.json").validate(json.loads(out))
        pending = json.loads(self.tx("pending", "--json").stdout)
        validator("pending.schema.json").validate(pending)
        pid = receipts[2]["pending_id"]
        validator("show.schema.json").validate(json.loads(self.tx("show", pid, "--json").stdout))
        self.assertEqual(self.tx("approve", pid).returncode, 0)
        self.tx("resume", pid, "--receipt", str(self.receipt))
        validator("receipt.schema.json").validate(json.loads(self.receipt.read_text()))
        validator("audit-verify.schema.json").validate(json.loads(self.tx("audit", "verify", "--json").stdout))
        lines = self.tx("audit", "show", "--json").stdout.splitlines()
        self.assertGreater(len(lines), 8)
        for line in lines:
            validator("audit-record.schema.json").validate(json.loads(line))
        validator("doctor.schema.json").validate(json.loads(self.tx("doctor", "--json").stdout))

    def test_the_schemas_reject_a_wrong_receipt(self) -> None:
        r = self.run_receipt("echo hi")
        r["decision"] = "maybe"
        with self.assertRaises(jsonschema.ValidationError):
            validator("receipt.schema.json").validate(r)
        r = self.run_receipt("echo hi")
        r["unexpected"] = 1
        with self.assertRaises(jsonschema.ValidationError):
            validator("receipt.schema.json").validate(r)


if __name__ == "__main__":
    unittest.main()
