"""template.yaml as CloudFormation receives it: SAM's own translator, run offline (what `sam
validate` does), for the template tests and for `make checkov`, which scans the translated
template (checkov cannot read SAM's Globals with intrinsic functions).

    python -m pgdrain_dev.sam_translate [template.yaml] > translated.json
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class _ManagedPolicies:
    """SAM asks for the ARNs of AWS managed policies by name; answer without calling IAM."""

    def load(self) -> dict[str, str]:
        names = ("AWSXrayWriteOnlyAccess", "AWSLambdaBasicExecutionRole",
                 "AWSLambdaVPCAccessExecutionRole")
        return {name: f"arn:aws:iam::aws:policy/{name}" for name in names}


def translated(template: dict[str, Any], **parameters: str) -> dict[str, Any]:
    """``template`` (parsed) translated with ``parameters``; code locations stand in for what
    `sam package` would upload."""
    template = copy.deepcopy(template)
    for resource in template["Resources"].values():
        for key in ("CodeUri", "ContentUri"):
            if key in resource.get("Properties", {}):
                resource["Properties"][key] = "s3://bucket/key"
    region = os.environ.get("AWS_DEFAULT_REGION")
    os.environ["AWS_DEFAULT_REGION"] = region or "eu-west-1"  # ARNs need one; any will do
    try:
        return dict(transform(template, parameters, _ManagedPolicies()))
    finally:
        if region is None:
            del os.environ["AWS_DEFAULT_REGION"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else "template.yaml")
    json.dump(translated(yaml_parse(path.read_text())), sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
