"""``make deploy``'s first run: ask only what a first deploy needs, then ``sam deploy``.

    python dev/pgdrain_dev/first_deploy.py --sam .venv-sam/bin/sam --stack-name pgdrain \\
        --region eu-west-1

``sam deploy --guided`` asks every parameter of the template (40 of them) and cannot take an
empty answer for a NoEcho one: ``DatabaseUrl``'s prompt asks again until something is typed,
which then becomes ``DATABASE_URL``, beats the secret and IAM settings and fails the
migration. Here the user chooses how the stack reaches the database and gives that mode's
values, the network when the database is private, and where alarms go; every other parameter
keeps the template's default. The answers that hold no secret are saved in samconfig.toml
(``sam deploy --save-params``), so later ``make deploy`` runs reuse them without asking. A
``DatabaseUrl`` (trials only) carries a password: it is read without echo and never saved, so
every deploy in that mode asks for it again.

Standard library only: it runs with the Python that runs ``make``, before any virtualenv.
"""

from __future__ import annotations

import argparse
import getpass
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

MODES = {
    "secret": "a Secrets Manager secret (RDS JSON: username, password, host, port, dbname)",
    "iam": "RDS IAM authentication (a user granted rds_iam, no password)",
    "url": "a postgresql:// URL (trials only: it carries the password; not saved)",
}
SECRET_ARN = re.compile(
    r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+$")
KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")
RESOURCE_ID = re.compile(r"^(db|cluster|prx)-[A-Za-z0-9]+$")
SUBNET = re.compile(r"^subnet-[0-9a-f]+$")
SECURITY_GROUP = re.compile(r"^sg-[0-9a-f]+$")
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
HOST = re.compile(r"^[A-Za-z0-9.-]+$")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$-]{0,62}$")


class Invalid(ValueError):
    """An answer that cannot be used; its message says what is wrong, and the question is
    asked again."""


def matching(pattern: re.Pattern[str], looks_like: str) -> Callable[[str], str]:
    """An answer that must match ``pattern``; refused with what it should look like."""
    def check(raw: str) -> str:
        if not pattern.match(raw):
            raise Invalid(looks_like)
        return raw
    return check


def optional(check: Callable[[str], str]) -> Callable[[str], str]:
    """An answer that may be left empty (Enter), checked when given."""
    return lambda raw: check(raw) if raw else ""


secret_arn = matching(SECRET_ARN, "a Secrets Manager secret ARN looks like "
                      "arn:aws:secretsmanager:eu-west-1:123456789012:secret:name-AbCdEf")
kms_key_arn = matching(KMS_KEY_ARN, "a KMS key ARN looks like "
                       "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-...")
host = matching(HOST, "a host name, like mydb.abc123.eu-west-1.rds.amazonaws.com")
name = matching(NAME, "a PostgreSQL name: a letter or _, then letters, digits, _, $ or -")
resource_id = matching(RESOURCE_ID, "the DB instance's or cluster's resource id: db-..., "
                       "cluster-... (or an RDS Proxy's prx-...), not its name")
email = matching(EMAIL, "an e-mail address, like ops@example.com")


def database_url(raw: str) -> str:
    if not raw.startswith(("postgresql://", "postgres://")):
        raise Invalid("a URL that starts with postgresql:// (the value is not shown)")
    if any(c.isspace() or c in '"\\' for c in raw):
        raise Invalid("a URL without spaces, quotes or backslashes: percent-encode them in "
                      "the password (%20, %22, %5C; the value is not shown)")
    return raw


def id_list(pattern: re.Pattern[str], example: str) -> Callable[[str], str]:
    def check(raw: str) -> str:
        items = [item.strip() for item in raw.split(",") if item.strip()]
        if not items or not all(pattern.match(item) for item in items):
            raise Invalid(f"comma-separated ids like {example}")
        return ",".join(items)
    return check



@dataclass(frozen=True)
class Question:
    parameter: str
    prompt: str
    check: Callable[[str], str]
    hidden: bool = False


QUESTIONS: dict[str, list[Question]] = {
    "secret": [
        Question("DatabaseSecretArn", "The secret's ARN", secret_arn),
        Question("MigrationSecretArn", "The schema owner's secret for the migration, if "
                 "the functions' role only has row privileges (Enter: the same secret)",
                 optional(secret_arn)),
        Question("SecretKmsKeyArn", "The KMS key's ARN, if the secret is encrypted with a "
                 "customer-managed key (Enter: AWS's own)", optional(kms_key_arn)),
        Question("DatabaseHost", "The database host, if the secret has none (an RDS-managed "
                 "master secret) (Enter: the secret's)", optional(host)),
        Question("DatabaseName", "The database name, if the secret has none (Enter: the "
                 "secret's)", optional(name)),
    ],
    "iam": [
        Question("DatabaseHost", "The database (or RDS Proxy) host", host),
        Question("DatabaseName", "The database name", name),
        Question("DatabaseUser", "The user (granted rds_iam)", name),
        Question("DatabaseResourceId", "The instance's or cluster's resource id (db-..., "
                 "cluster-...)", resource_id),
    ],
    "url": [
        Question("DatabaseUrl", "The postgresql:// URL (not shown as you type)", database_url,
                 hidden=True),
    ],
}
NETWORK = [
    Question("SubnetIds", "Subnets of the database's VPC, comma-separated (Enter: the "
             "database is public)", optional(id_list(SUBNET, "subnet-0abc,subnet-0def"))),
]
SECURITY_GROUPS = Question("SecurityGroupIds", "Security groups for the functions, allowed "
                          "on 5432 by the database's", id_list(SECURITY_GROUP, "sg-0abc"))
ALARMS = Question("AlarmEmail", "An e-mail address for the alarms (Enter: no alarms)",
                  optional(email))
SECRET_PARAMETERS = frozenset({"DatabaseUrl"})
"""Never written to samconfig.toml, nor printed."""


def ask(question: Question, read: Callable[[str], str], read_hidden: Callable[[str], str],
        say: Callable[[str], None]) -> str:
    """Ask until the answer passes its check; an empty answer is one where Enter is allowed."""
    while True:
        raw = (read_hidden if question.hidden else read)(f"{question.prompt}: ").strip()
        try:
            return question.check(raw)
        except Invalid as exc:
            say(f"  {exc}")


def choose_mode(read: Callable[[str], str], say: Callable[[str], None]) -> str:
    say("How do the functions reach PostgreSQL?")
    for index, (mode, text) in enumerate(MODES.items(), 1):
        say(f"  {index}. {mode}: {text}")
    while True:
        raw = read("Choose 1, 2 or 3 [1]: ").strip() or "1"
        if raw in ("1", "2", "3"):
            return list(MODES)[int(raw) - 1]
        if raw in MODES:
            return raw
        say("  1, 2 or 3 (or secret, iam, url)")


def interview(read: Callable[[str], str] | None = None,
              read_hidden: Callable[[str], str] | None = None,
              say: Callable[[str], None] = print) -> dict[str, str]:
    """The first deploy's questions (on the terminal unless ``read`` and ``read_hidden`` are
    given); returns the parameters to override (the others keep the template's defaults).
    Empty optional answers are left out."""
    read = read or input
    read_hidden = read_hidden or getpass.getpass
    mode = choose_mode(read, say)
    answers = {"DatabaseIamAuth": "true"} if mode == "iam" else {}
    for question in [*QUESTIONS[mode], *NETWORK]:
        answers[question.parameter] = ask(question, read, read_hidden, say)
    if answers.get("SubnetIds"):
        answers[SECURITY_GROUPS.parameter] = ask(SECURITY_GROUPS, read, read_hidden, say)
    answers[ALARMS.parameter] = ask(ALARMS, read, read_hidden, say)
    return {key: value for key, value in answers.items() if value}


def _quoted(value: str) -> str:
    """A parameter override as sam deploy parses it: Key="value", a quote inside as \\".
    SAM unescapes nothing else (a backslash stays as typed), so no answer may hold one before
    a quote: the checks refuse backslashes and quotes where they could appear (the URL)."""
    return '"' + value.replace('"', '\\"') + '"'


def deploy_command(sam: str, stack_name: str, region: str, parameters: dict[str, str]
                   ) -> list[str]:
    """``sam deploy`` with these overrides; ``--save-params`` keeps them in samconfig.toml
    unless one is a secret (then nothing is saved: the next deploy asks again)."""
    overrides = [f"{key}={_quoted(value)}" for key, value in parameters.items()]
    command = [sam, "deploy", "--stack-name", stack_name, "--region", region,
               "--parameter-overrides", *overrides]
    if not SECRET_PARAMETERS & parameters.keys():
        command.append("--save-params")
    return command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sam", required=True)
    parser.add_argument("--stack-name", required=True)
    parser.add_argument("--region", required=True)
    args = parser.parse_args(argv)
    print(f"First deploy of stack {args.stack_name} in {args.region}: a few questions "
          "(every other parameter keeps its default; docs/deploy.md lists them).")
    try:
        parameters = interview()
    except (EOFError, KeyboardInterrupt):
        print("\nmake deploy: stopped before deploying; nothing was created", file=sys.stderr)
        return 1
    if SECRET_PARAMETERS & parameters.keys():
        print("DatabaseUrl is not saved: the next `make deploy` asks for it again (use a "
              "secret to deploy without it).")
    return subprocess.run(deploy_command(args.sam, args.stack_name, args.region, parameters),
                          check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
