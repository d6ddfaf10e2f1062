"""`make sam-check`: the first deploy's `sam deploy` command, read back by SAM CLI's own
option parsers (run with .venv-sam's Python, where samcli is installed).

`--parameter-overrides` must come back as the answers given, quotes, spaces, commas and
percent-escapes included, and `--save-params` must be an option SAM knows; otherwise the first
deploy would hand CloudFormation other values than the user typed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "dev"))

from samcli.cli.types import CfnParameterOverridesType  # noqa: E402
from samcli.commands.deploy.command import cli as deploy  # noqa: E402

from pgdrain_dev.first_deploy import deploy_command  # noqa: E402

ANSWERS = {
    "DatabaseSecretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:pgdrain-AbCdEf",
    "SubnetIds": "subnet-0a1,subnet-0b2", "SecurityGroupIds": "sg-0c3",
    "AlarmEmail": "ops@example.com", "DatabaseName": 'we"ird name',
    "DatabaseUrl": "postgresql://u:p%22w%5C@db.example.com:5432/app?sslmode=verify-full",
}


def main() -> None:
    command = deploy_command("sam", "pgdrain", "eu-west-1", ANSWERS)
    start = command.index("--parameter-overrides") + 1
    overrides = command[start:start + len(ANSWERS)]
    parsed = CfnParameterOverridesType().convert(tuple(overrides), None, None)
    assert parsed == ANSWERS, f"SAM reads {parsed}, not {ANSWERS}"
    options = {opt for p in deploy.params for opt in p.opts}
    saved = deploy_command("sam", "pgdrain", "eu-west-1",
                           {k: v for k, v in ANSWERS.items() if k != "DatabaseUrl"})
    assert "--save-params" in saved and "--save-params" not in command
    missing = {a for a in command + saved if a.startswith("--")} - options
    assert not missing, f"sam deploy does not know {missing}"
    print(f"first deploy: SAM CLI reads the {len(ANSWERS)} answers back as given")


if __name__ == "__main__":
    main()
